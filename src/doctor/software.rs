//! The software a node needs: DPDK and its PMDs, Open MPI 4.1, and the MTL component where
//! Open MPI loads it.

use super::Check;
use crate::fabric::OMPI_COMPONENT_DIR;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The component's file name in an Open MPI component directory.
pub const MTL_FILE: &str = "mca_mtl_tigon.so";

fn output(cmd: &mut Command) -> Option<(bool, String, String)> {
    let o = cmd.output().ok()?;
    Some((
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    ))
}

pub(super) fn dpdk() -> Check {
    let dev = output(Command::new("pkg-config").args(["--modversion", "libdpdk"]))
        .filter(|o| o.0)
        .map(|o| o.1.trim().to_string());
    let pkg = output(Command::new("dpkg-query").args(["-W", "-f", "${Version}", "dpdk"]))
        .filter(|o| o.0 && !o.1.trim().is_empty())
        .map(|o| o.1.trim().to_string());
    let install = cmds!["apt-get install -y dpdk libdpdk-dev pkg-config   # or: scripts/setup.sh"];
    let Some(version) = dev.clone().or(pkg) else {
        return Check::fail(
            "dpdk",
            "DPDK not found (no pkg-config libdpdk, no dpdk package)",
            &install,
        );
    };
    let libdir = output(Command::new("pkg-config").args(["--variable=libdir", "libdpdk"]))
        .filter(|o| o.0)
        .map_or_else(
            || "/usr/lib/x86_64-linux-gnu".to_string(),
            |o| o.1.trim().to_string(),
        );
    let pmds = std::fs::read_dir(Path::new(&libdir).join("dpdk"))
        .ok()
        .and_then(|rd| {
            rd.filter_map(|e| e.ok()).map(|e| e.path()).find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("pmds-"))
            })
        });
    let Some(pmds) = pmds else {
        return Check::fail(
            "dpdk",
            format!("DPDK {version}, but no PMD directory under {libdir}/dpdk"),
            &install,
        );
    };
    let missing: Vec<&str> = [
        "librte_net_memif.so",
        "librte_net_af_packet.so",
        "librte_bus_pci.so",
    ]
    .into_iter()
    .filter(|f| !pmds.join(f).exists())
    .collect();
    let from = if dev.is_some() {
        "libdpdk"
    } else {
        "package dpdk"
    };
    if !version.starts_with("22.11") {
        return Check::warn(
            "dpdk",
            format!("DPDK {version} ({from}); tigon is built and tested against 22.11"),
            &cmds!["apt-get install -y dpdk=22.11* libdpdk-dev=22.11*   # Debian 12's"],
        );
    }
    if !missing.is_empty() {
        return Check::warn(
            "dpdk",
            format!(
                "DPDK {version}: {} missing from {}",
                missing.join(", "),
                pmds.display()
            ),
            &install,
        );
    }
    Check::ok(
        "dpdk",
        format!("{version} ({from}), PMDs in {}", pmds.display()),
    )
}

/// `ompi_info --version`'s version, e.g. `4.1.4`.
fn ompi_version() -> Option<String> {
    let (ok, out, _) = output(Command::new("ompi_info").arg("--version"))?;
    if !ok {
        return None;
    }
    out.lines()
        .find_map(|l| l.trim().strip_prefix("Open MPI v"))
        .map(|v| v.trim().to_string())
}

pub(super) fn openmpi() -> Check {
    match ompi_version() {
        None => Check::fail(
            "open-mpi",
            "ompi_info not found: Open MPI is not installed",
            &cmds!["apt-get install -y openmpi-bin libopenmpi-dev"],
        ),
        Some(v) if v.starts_with("4.1.") => Check::ok("open-mpi", v),
        Some(v) => Check::fail(
            "open-mpi",
            format!("Open MPI {v}: the component is built for Open MPI 4.1.x's ABI"),
            &cmds!["apt-get install -y openmpi-bin=4.1.* libopenmpi-dev=4.1.*   # Debian 12's"],
        ),
    }
}

/// Where the doctor looks for the component, in order: $TIGON_MTL_DIR, this executable's
/// `ompi/` subdirectory and its own directory, Open MPI's component directory. (Only looks:
/// unlike `tigon run`, it makes no links to a cargo build's `libmca_mtl_tigon.so`.)
fn mtl_candidates(exe_dir: Option<&Path>) -> Vec<PathBuf> {
    let mut c: Vec<PathBuf> = Vec::new();
    if let Some(d) = std::env::var_os("TIGON_MTL_DIR") {
        c.push(d.into());
    }
    if let Some(d) = exe_dir {
        c.push(d.join("ompi"));
        c.push(d.to_path_buf());
    }
    c.push(OMPI_COMPONENT_DIR.into());
    c
}

pub(super) fn mtl(dir: Option<&Path>) -> Check {
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf));
    let dir = match dir {
        Some(d) => Some(d.to_path_buf()),
        None => mtl_candidates(exe_dir.as_deref())
            .into_iter()
            .find(|d| d.join(MTL_FILE).exists()),
    };
    // A cargo build leaves the component next to `tigon` under its library name.
    let built = exe_dir
        .as_ref()
        .map(|d| d.join("libmca_mtl_tigon.so"))
        .filter(|p| p.exists());
    let install_into = |d: &str| {
        let mut fix = match &built {
            Some(b) => cmds![format!("install -m 0644 {} {d}/{MTL_FILE}", b.display())].to_vec(),
            None => cmds![
                "# in the tigon source tree:",
                "cargo build --release -p tigon-ompi-mtl",
                format!("install -m 0644 target/release/libmca_mtl_tigon.so {d}/{MTL_FILE}"),
            ]
            .to_vec(),
        };
        fix.extend(cmds![
            format!("install -m 0644 ompi-mtl/help-mtl-tigon.txt {d}/"),
            "# or everything (tigon, the component, the systemd unit): make release && scripts/install.sh",
        ]);
        fix
    };
    let Some(dir) = dir.clone().filter(|d| d.join(MTL_FILE).exists()) else {
        let (where_, to) = match dir {
            Some(d) => (d.display().to_string(), d.display().to_string()),
            None => {
                let mut w = vec!["$TIGON_MTL_DIR".to_string()];
                if let Some(e) = &exe_dir {
                    w.push(e.join("ompi").display().to_string());
                    w.push(e.display().to_string());
                }
                w.push(OMPI_COMPONENT_DIR.to_string());
                (w.join(", "), OMPI_COMPONENT_DIR.to_string())
            }
        };
        return Check::fail(
            "mtl",
            format!("{MTL_FILE} not found (looked in {where_})"),
            &install_into(&to),
        );
    };
    let so = dir.join(MTL_FILE);
    let path = format!("{}:{OMPI_COMPONENT_DIR}", dir.display());
    let listed = output(
        Command::new("ompi_info")
            .args(["--param", "mtl", "tigon"])
            .env("OMPI_MCA_mca_base_component_path", &path)
            .env("OMPI_MCA_mca_base_component_show_load_errors", "1"),
    );
    let Some((_, out, err)) = listed else {
        return Check::fail(
            "mtl",
            format!("{} present, but ompi_info did not run", so.display()),
            &cmds!["apt-get install -y openmpi-bin"],
        );
    };
    if !out.lines().any(|l| l.contains("MCA mtl: tigon")) {
        let why: Vec<&str> = out
            .lines()
            .chain(err.lines())
            .map(str::trim)
            .filter(|l| l.contains("tigon") || l.contains("rror"))
            .take(3)
            .collect();
        return Check::fail(
            "mtl",
            format!(
                "{} present, but Open MPI does not load it{}",
                so.display(),
                if why.is_empty() {
                    String::new()
                } else {
                    format!(": {}", why.join(" / "))
                }
            ),
            &[
                cmds![format!(
                    "OMPI_MCA_mca_base_component_show_load_errors=1 OMPI_MCA_mca_base_component_path={path} ompi_info --param mtl tigon   # says why"
                )]
                .as_slice(),
                &install_into(&dir.display().to_string()),
            ]
            .concat(),
        );
    }
    let help = dir.join("help-mtl-tigon.txt");
    let how = if dir == Path::new(OMPI_COMPONENT_DIR) {
        "mpirun finds it by default".to_string()
    } else {
        format!("mpirun needs --mca mca_base_component_path {path}")
    };
    if !help.exists() {
        return Check::warn(
            "mtl",
            format!(
                "{} loads; no help-mtl-tigon.txt next to it (errors come out as plain text); {how}",
                so.display()
            ),
            &cmds![format!(
                "install -m 0644 ompi-mtl/help-mtl-tigon.txt {}/",
                dir.display()
            )],
        );
    }
    Check::ok("mtl", format!("{} loads; {how}", so.display()))
}
