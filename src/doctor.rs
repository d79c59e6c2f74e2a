//! `tigon doctor`: checks that this node can run tigon — hugepages, the NIC (bound to a DPDK
//! driver, or a vdev), IOMMU / vfio, dmadevs, DPDK, Open MPI, the MTL component and the
//! agent — and prints, for each problem, the commands that fix it. Exits non-zero when the
//! node cannot run tigon. Starts no DPDK: it runs next to a live agent.

use crate::agent::AgentArgs;
use crate::fabric::OMPI_COMPONENT_DIR;
use clap::Args;
use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The agent configuration the systemd unit uses; read when `--config` is not given.
pub const DEFAULT_CONFIG: &str = "/etc/tigon/agent.json";
/// The component's file name in an Open MPI component directory.
pub const MTL_FILE: &str = "mca_mtl_tigon.so";
/// Free hugepages (of 2 MiB) below which an agent may not start: its two mbuf pools take
/// about 40 MiB, the channels of its clients more.
const MIN_FREE_PAGES: u64 = 64;
/// Drivers a NIC can be bound to for DPDK's PCI PMDs.
const DPDK_DRIVERS: &[&str] = &["vfio-pci", "uio_pci_generic", "igb_uio"];
/// Kernel drivers DPDK shares a NIC with (bifurcated: no binding needed).
const BIFURCATED: &[&str] = &["mlx5_core", "mlx4_core"];
/// Intel copy engines DPDK drives as dmadevs (IOAT: Haswell to Ice Lake; DSA: Sapphire Rapids).
const DMA_IDS: &[(u16, &str)] = &[
    (0x0b00, "IOAT (Ice Lake)"),
    (0x0b25, "DSA"),
    (0x2021, "IOAT (Skylake)"),
    (0x6f20, "IOAT (Broadwell)"),
    (0x2f20, "IOAT (Haswell)"),
];

#[derive(Args, Debug, Default)]
pub struct DoctorArgs {
    /// The agent's control socket (default: the config's, else $TIGON_SOCKET, else
    /// /run/tigon/agent.sock).
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// The agent's port: a PCI address or vdev devargs (default: the config's).
    #[arg(long)]
    pub port: Option<String>,
    /// The agent's dmadev (default: the config's).
    #[arg(long)]
    pub dma: Option<String>,
    /// Where hugetlbfs should be mounted.
    #[arg(long, default_value = "/dev/hugepages")]
    pub huge_dir: PathBuf,
    /// Where mca_mtl_tigon.so should be (default: $TIGON_MTL_DIR, next to this executable,
    /// its ompi/ subdirectory, or Open MPI's component directory).
    #[arg(long)]
    pub mtl_dir: Option<PathBuf>,
    /// The agent's JSON configuration (default: /etc/tigon/agent.json when it exists).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Print the findings as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

/// One finding: what was checked, how it went, and the commands that fix it.
#[derive(Debug, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub status: Level,
    pub summary: String,
    /// Commands to run, in order (comments start with `#`).
    pub fix: Vec<String>,
}

impl Check {
    fn ok(name: &'static str, summary: impl Into<String>) -> Check {
        Check {
            name,
            status: Level::Ok,
            summary: summary.into(),
            fix: Vec::new(),
        }
    }
    fn warn(name: &'static str, summary: impl Into<String>, fix: &[String]) -> Check {
        Check {
            name,
            status: Level::Warn,
            summary: summary.into(),
            fix: fix.to_vec(),
        }
    }
    fn fail(name: &'static str, summary: impl Into<String>, fix: &[String]) -> Check {
        Check {
            name,
            status: Level::Fail,
            summary: summary.into(),
            fix: fix.to_vec(),
        }
    }
}

macro_rules! cmds {
    ($($e:expr),* $(,)?) => { [$(String::from($e)),*] };
}

/// What the doctor examines: the command line filled in from the agent's configuration.
struct Target {
    socket: PathBuf,
    port: Option<String>,
    dma: Option<String>,
    no_huge: bool,
}

pub fn run(a: DoctorArgs) -> Result<(), String> {
    let checks = diagnose(&a);
    let fails: Vec<&str> = checks
        .iter()
        .filter(|c| c.status == Level::Fail)
        .map(|c| c.name)
        .collect();
    let warns = checks.iter().filter(|c| c.status == Level::Warn).count();
    if a.json {
        let v = serde_json::json!({ "ok": fails.is_empty(), "checks": checks });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        print!("{}", render(&checks));
        println!(
            "{}",
            if fails.is_empty() {
                format!("this node can run tigon ({warns} warning(s))")
            } else {
                format!(
                    "this node cannot run tigon: {} problem(s), {warns} warning(s)",
                    fails.len()
                )
            }
        );
    }
    if fails.is_empty() {
        Ok(())
    } else {
        Err(format!("doctor: problems with {}", fails.join(", ")))
    }
}

/// The report as text: one line per check, its fix indented below it.
pub fn render(checks: &[Check]) -> String {
    let mut s = String::new();
    for c in checks {
        let tag = match c.status {
            Level::Ok => "ok  ",
            Level::Warn => "WARN",
            Level::Fail => "FAIL",
        };
        s.push_str(&format!("{tag}  {:<10} {}\n", c.name, c.summary));
        for (i, f) in c.fix.iter().enumerate() {
            let lead = if i == 0 { "fix:" } else { "    " };
            s.push_str(&format!("            {lead} {f}\n"));
        }
    }
    s
}

/// Runs every check.
pub fn diagnose(a: &DoctorArgs) -> Vec<Check> {
    let mut checks = Vec::new();
    let (t, config_check) = target(a);
    if let Some(c) = config_check {
        checks.push(c);
    }
    checks.push(hugepages(&a.huge_dir, t.no_huge, t.port.as_deref()));
    let agent = agent(&t.socket, t.port.as_deref());
    let agent_up = agent.status != Level::Fail;
    checks.push(port(t.port.as_deref(), agent_up));
    checks.push(iommu(t.port.as_deref()));
    checks.push(dmadev(t.dma.as_deref()));
    checks.push(dpdk());
    checks.push(openmpi());
    checks.push(mtl(a.mtl_dir.as_deref()));
    checks.push(agent);
    checks
}

fn target(a: &DoctorArgs) -> (Target, Option<Check>) {
    let env_no_huge = std::env::var_os(tigon_pmd::NO_HUGE_ENV).is_some_and(|v| v == "1");
    let path = a.config.clone().or_else(|| {
        Path::new(DEFAULT_CONFIG)
            .exists()
            .then(|| PathBuf::from(DEFAULT_CONFIG))
    });
    let mut cfg = AgentArgs::default();
    let mut check = None;
    if let Some(p) = &path {
        match std::fs::read_to_string(p)
            .map_err(|e| e.to_string())
            .and_then(|s| serde_json::from_str::<AgentArgs>(&s).map_err(|e| e.to_string()))
        {
            Ok(c) => {
                check = Some(Check::ok("config", format!("{} parsed", p.display())));
                cfg = c;
            }
            Err(e) => {
                check = Some(Check::fail(
                    "config",
                    format!("{}: {e}", p.display()),
                    &cmds![
                        "# the keys are `tigon agent`'s options in kebab-case, e.g. {\"port\": \"0000:3b:00.0\", \"lcore\": 2, \"mtu\": 9000}",
                        "tigon agent --help",
                        format!("${{EDITOR:-vi}} {}", p.display()),
                    ],
                ));
            }
        }
    }
    let t = Target {
        socket: a
            .socket
            .clone()
            .or(cfg.socket)
            .unwrap_or_else(tigon_client::default_socket),
        port: a.port.clone().or(cfg.port),
        dma: a.dma.clone().or(cfg.dma),
        no_huge: env_no_huge || cfg.no_huge.unwrap_or(false),
    };
    (t, check)
}

// --- hugepages ---------------------------------------------------------------------------------

fn meminfo(key: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// The filesystem type mounted at `dir` (the last mount there wins), if `dir` is a mount point.
fn mount_type(dir: &Path) -> Option<String> {
    let dir = std::fs::canonicalize(dir).ok()?;
    let text = std::fs::read_to_string("/proc/self/mounts").ok()?;
    text.lines().rev().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_, at, ty) = (f.next()?, f.next()?, f.next()?);
        // /proc/mounts escapes spaces as \040.
        (Path::new(&at.replace("\\040", " ")) == dir).then(|| ty.to_string())
    })
}

fn hugepages(dir: &Path, no_huge: bool, port: Option<&str>) -> Check {
    let d = dir.display();
    let total = meminfo("HugePages_Total").unwrap_or(0);
    let free = meminfo("HugePages_Free").unwrap_or(0);
    let kb = meminfo("Hugepagesize").unwrap_or(2048);
    let reserve = cmds![
        "echo 1024 > /proc/sys/vm/nr_hugepages",
        format!("mkdir -p {d} && mount -t hugetlbfs nodev {d}"),
        "# persistent: vm.nr_hugepages=1024 in /etc/sysctl.d/80-tigon.conf (the systemd unit's pre-start script reserves TIGON_HUGEPAGES)",
    ];
    if no_huge {
        let why = if port.is_some_and(is_pci) {
            "a NIC wants hugepage-backed DMA memory"
        } else {
            "fine for vdevs, slower for a NIC"
        };
        return Check::warn(
            "hugepages",
            format!("TIGON_NO_HUGE=1 / no-huge: DPDK runs without hugepages ({why})"),
            &[reserve.as_slice(), &cmds!["unset TIGON_NO_HUGE"]].concat(),
        );
    }
    let mounted = mount_type(dir);
    let no_huge_fix =
        "# or, for vdev ports only: export TIGON_NO_HUGE=1 (DPDK runs with --no-huge)";
    if total == 0 {
        return Check::fail(
            "hugepages",
            "no hugepages reserved (HugePages_Total is 0)",
            &[reserve.as_slice(), &cmds![no_huge_fix]].concat(),
        );
    }
    match mounted.as_deref() {
        Some("hugetlbfs") => {}
        other => {
            let what = match other {
                Some(t) => format!("{d} is a {t} mount, not hugetlbfs"),
                None if dir.is_dir() => format!("{d} is not a hugetlbfs mount point"),
                None => format!("{d} does not exist"),
            };
            // Mounting over a directory in use would hide what it holds.
            let busy = std::fs::read_dir(dir).is_ok_and(|mut rd| rd.next().is_some());
            let at = if busy {
                "/dev/hugepages".to_string()
            } else {
                d.to_string()
            };
            let mut fix = Vec::new();
            if busy && dir != Path::new("/dev/hugepages") {
                fix.push(format!(
                    "# {d} is not empty: mount hugetlbfs on an empty directory instead (then --huge-dir {at})"
                ));
            }
            fix.extend(cmds![
                format!("mkdir -p {at} && mount -t hugetlbfs nodev {at}"),
                format!("# persistent: echo 'nodev {at} hugetlbfs defaults 0 0' >> /etc/fstab"),
                no_huge_fix,
            ]);
            return Check::fail(
                "hugepages",
                format!("{what} ({free} of {total} hugepages free)"),
                &fix,
            );
        }
    }
    // DPDK processes killed by a signal leave their pages behind as files (agents run
    // --in-memory and leave none).
    let stale: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains("map_"))
                .collect()
        })
        .unwrap_or_default();
    let summary = format!("{free} of {total} free ({kb} kB pages), hugetlbfs at {d}");
    if free < MIN_FREE_PAGES {
        let mut fix = Vec::new();
        if !stale.is_empty() {
            fix.push(format!(
                "# {} page file(s) in {d} (e.g. {}) left by a killed DPDK process; if `fuser -v {d}/*` shows no user:",
                stale.len(),
                stale[0]
            ));
            fix.push(format!("rm -f {d}/*map_*"));
        }
        fix.push(format!("echo {} > /proc/sys/vm/nr_hugepages", total + 1024));
        let s = format!("only {summary}: an agent needs about {MIN_FREE_PAGES}");
        return if free == 0 {
            Check::fail("hugepages", s, &fix)
        } else {
            Check::warn("hugepages", s, &fix)
        };
    }
    if !stale.is_empty() {
        return Check::warn(
            "hugepages",
            format!(
                "{summary}; {} page file(s) left in {d} by DPDK processes",
                stale.len()
            ),
            &cmds![
                format!("fuser -v {d}/*   # files nobody uses can go:"),
                format!("rm -f {d}/*map_*"),
            ],
        );
    }
    Check::ok("hugepages", summary)
}

// --- PCI, NIC, IOMMU ---------------------------------------------------------------------------

/// `0000:3b:00.0` or `3b:00.0` (the first devargs field), in its full form.
pub fn pci_address(devargs: &str) -> Option<String> {
    let s = devargs.split(',').next()?.trim().to_ascii_lowercase();
    let hex = |t: &str, n: usize| t.len() == n && t.bytes().all(|b| b.is_ascii_hexdigit());
    let parts: Vec<&str> = s.split(':').collect();
    let (dom, bus, devfn) = match parts.as_slice() {
        [d, b, df] => (d.to_string(), *b, *df),
        [b, df] => ("0000".to_string(), *b, *df),
        _ => return None,
    };
    let (dev, func) = devfn.split_once('.')?;
    (hex(&dom, 4)
        && hex(bus, 2)
        && hex(dev, 2)
        && matches!(func, "0" | "1" | "2" | "3" | "4" | "5" | "6" | "7"))
    .then(|| format!("{dom}:{bus}:{dev}.{func}"))
}

fn is_pci(devargs: &str) -> bool {
    pci_address(devargs).is_some()
}

fn pci_driver(addr: &str) -> Option<String> {
    let link = std::fs::read_link(format!("/sys/bus/pci/devices/{addr}/driver")).ok()?;
    Some(link.file_name()?.to_string_lossy().into_owned())
}

fn pci_ifaces(addr: &str) -> Vec<String> {
    std::fs::read_dir(format!("/sys/bus/pci/devices/{addr}/net"))
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// PCI devices bound to `driver`.
fn bound_to(driver: &str) -> Vec<String> {
    std::fs::read_dir(format!("/sys/bus/pci/drivers/{driver}"))
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| pci_address(n).is_some())
                .collect()
        })
        .unwrap_or_default()
}

fn read_hex(path: String) -> Option<u32> {
    let s = std::fs::read_to_string(path).ok()?;
    u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
}

fn bind_fix(addr: &str) -> Vec<String> {
    let mut fix = vec!["modprobe vfio-pci".to_string()];
    for i in pci_ifaces(addr) {
        fix.push(format!("ip link set {i} down"));
    }
    fix.push(format!("dpdk-devbind.py -b vfio-pci {addr}"));
    fix.push(format!(
        "# with the systemd unit: TIGON_NIC={addr} in /etc/tigon/agent.env, then systemctl restart tigon-agent"
    ));
    fix
}

fn port(port: Option<&str>, agent_up: bool) -> Check {
    let Some(p) = port else {
        let bound: Vec<String> = DPDK_DRIVERS
            .iter()
            .flat_map(|d| bound_to(d).into_iter().map(move |a| format!("{a} ({d})")))
            .collect();
        if !bound.is_empty() {
            return Check::ok(
                "port",
                format!(
                    "bound for DPDK: {} (pass --port to check the agent's)",
                    bound.join(", ")
                ),
            );
        }
        let fix = cmds![
            "dpdk-devbind.py --status-dev net   # the NICs' PCI addresses",
            "modprobe vfio-pci && dpdk-devbind.py -b vfio-pci <PCI address>",
            "# or no binding: an af_packet vdev on a kernel interface: tigon agent --port net_af_packet0,iface=eth1",
            "# then tell the doctor: tigon doctor --port <PCI address or devargs> (or \"port\" in /etc/tigon/agent.json)",
        ];
        let s = "no NIC bound to vfio-pci / uio and no --port given";
        return if agent_up {
            Check::warn("port", format!("{s} (the running agent has its own)"), &fix)
        } else {
            Check::fail("port", s, &fix)
        };
    };
    if let Some(addr) = pci_address(p) {
        if !Path::new(&format!("/sys/bus/pci/devices/{addr}")).exists() {
            return Check::fail(
                "port",
                format!("no PCI device {addr} on this node"),
                &cmds!["dpdk-devbind.py --status-dev net   # lists the NICs and their drivers"],
            );
        }
        return match pci_driver(&addr) {
            Some(d) if DPDK_DRIVERS.contains(&d.as_str()) => {
                Check::ok("port", format!("NIC {addr} bound to {d}"))
            }
            Some(d) if BIFURCATED.contains(&d.as_str()) => Check::ok(
                "port",
                format!("NIC {addr} on {d} (bifurcated driver: DPDK shares it, no binding)"),
            ),
            Some(d) => Check::fail(
                "port",
                format!("NIC {addr} is bound to the kernel driver {d}, not to vfio-pci"),
                &bind_fix(&addr),
            ),
            None => Check::fail(
                "port",
                format!("NIC {addr} is bound to no driver"),
                &bind_fix(&addr),
            ),
        };
    }
    let name = p.split(',').next().unwrap_or("").trim();
    if name.starts_with("net_af_packet") || name.starts_with("net_af_xdp") {
        let iface = p
            .split(',')
            .find_map(|kv| kv.trim().strip_prefix("iface="))
            .unwrap_or("");
        if iface.is_empty() {
            return Check::fail(
                "port",
                format!("vdev {name} without iface="),
                &cmds![format!(
                    "tigon agent --port {name},iface=eth1   # the interface to use"
                )],
            );
        }
        if !Path::new(&format!("/sys/class/net/{iface}")).exists() {
            return Check::warn(
                "port",
                format!("vdev {p}: no interface {iface} in this network namespace"),
                &cmds![
                    "ip -br link   # the interfaces here",
                    format!(
                        "# if the agent runs in another namespace: ip netns exec <ns> tigon doctor --port {p}"
                    ),
                ],
            );
        }
        return Check::ok(
            "port",
            format!("vdev {p} (kernel interface {iface}, no binding needed)"),
        );
    }
    if name.starts_with("net_") {
        return Check::ok("port", format!("vdev {p} (no binding needed)"));
    }
    Check::fail(
        "port",
        format!("`{p}` is neither a PCI address nor a vdev (net_...)"),
        &cmds![
            "dpdk-devbind.py --status-dev net   # the NICs' PCI addresses",
            "# vdev examples: net_af_packet0,iface=eth1  net_memif0,role=server,socket=/run/memif.sock",
        ],
    )
}

fn iommu(port: Option<&str>) -> Check {
    let groups = std::fs::read_dir("/sys/kernel/iommu_groups")
        .map(|rd| rd.count())
        .unwrap_or(0);
    let vfio = Path::new("/sys/bus/pci/drivers/vfio-pci").exists();
    let noiommu = std::fs::read_to_string("/sys/module/vfio/parameters/enable_unsafe_noiommu_mode")
        .is_ok_and(|s| s.trim() == "Y");
    let state = format!(
        "{groups} IOMMU group(s), vfio-pci {}{}",
        if vfio { "loaded" } else { "not loaded" },
        if noiommu {
            ", vfio no-IOMMU mode on"
        } else {
            ""
        }
    );
    let enable = cmds![
        "# bare metal: add intel_iommu=on iommu=pt (AMD: amd_iommu=on) to GRUB_CMDLINE_LINUX in /etc/default/grub, then: update-grub && reboot",
        "# a VM without a virtual IOMMU: modprobe vfio enable_unsafe_noiommu_mode=1 (or echo 1 > /sys/module/vfio/parameters/enable_unsafe_noiommu_mode)",
    ];
    let pci = port.and_then(pci_address);
    let needs_vfio = pci.as_ref().is_some_and(|a| {
        let d = pci_driver(a).unwrap_or_default();
        !BIFURCATED.contains(&d.as_str()) && d != "uio_pci_generic" && d != "igb_uio"
    });
    if !needs_vfio {
        let why = match port {
            Some(p) if pci.is_some() => format!("not needed for {p} (uio or bifurcated driver)"),
            Some(_) => "not needed for a vdev port".to_string(),
            None => "needed only to bind a NIC to vfio-pci".to_string(),
        };
        // Only a node whose port is unknown may still want vfio-pci: warn then.
        return if groups > 0 || noiommu || port.is_some() {
            Check::ok("iommu", format!("{state} ({why})"))
        } else {
            Check::warn("iommu", format!("{state}: {why}"), &enable)
        };
    }
    if groups == 0 && !noiommu {
        return Check::fail(
            "iommu",
            format!("{state}: vfio-pci needs an IOMMU (or no-IOMMU mode) for the NIC"),
            &enable,
        );
    }
    if !vfio {
        return Check::fail(
            "iommu",
            format!("{state}: the NIC needs it"),
            &cmds!["modprobe vfio-pci"],
        );
    }
    Check::ok("iommu", state)
}

fn dmadev(dma: Option<&str>) -> Check {
    if let Some(d) = dma {
        if d.starts_with("dma_") {
            return Check::ok(
                "dmadev",
                format!("{d} (a software dmadev: functional, not fast)"),
            );
        }
        if let Some(addr) = pci_address(d) {
            return match pci_driver(&addr) {
                Some(drv) if drv == "vfio-pci" => {
                    Check::ok("dmadev", format!("{addr} bound to vfio-pci"))
                }
                other => Check::fail(
                    "dmadev",
                    format!(
                        "--dma {addr} is bound to {}, not vfio-pci: the agent cannot open it",
                        other.unwrap_or_else(|| "no driver".into())
                    ),
                    &cmds![
                        "modprobe vfio-pci",
                        format!("dpdk-devbind.py -b vfio-pci {addr}"),
                    ],
                ),
            };
        }
        return Check::warn(
            "dmadev",
            format!("--dma {d}: neither a PCI address nor a dma_ vdev"),
            &cmds!["dpdk-devbind.py --status-dev dma   # the copy engines and their addresses"],
        );
    }
    let mut found: Vec<String> = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/sys/bus/pci/devices") {
        for e in rd.filter_map(|e| e.ok()) {
            let a = e.file_name().to_string_lossy().into_owned();
            if read_hex(format!("/sys/bus/pci/devices/{a}/vendor")) != Some(0x8086) {
                continue;
            }
            let Some(dev) = read_hex(format!("/sys/bus/pci/devices/{a}/device")) else {
                continue;
            };
            // IOAT parts come as 8 channels with consecutive ids.
            if let Some((_, kind)) = DMA_IDS
                .iter()
                .find(|(id, _)| dev >= *id as u32 && dev <= *id as u32 + 7)
            {
                let drv = pci_driver(&a).unwrap_or_else(|| "no driver".into());
                found.push(format!("{a} {kind} ({drv})"));
            }
        }
    }
    found.sort();
    if found.is_empty() {
        return Check::warn(
            "dmadev",
            "no dmadev (Intel IOAT / DSA) found: the engine copies received payloads with its CPU",
            &cmds![
                "# nothing to do: --dma is an optimisation for nodes with IOAT / DSA copy engines"
            ],
        );
    }
    Check::warn(
        "dmadev",
        format!(
            "present but not configured: {} (the engine copies with its CPU)",
            found.join(", ")
        ),
        &cmds![
            "dpdk-devbind.py -b vfio-pci <address above>",
            "# then: tigon agent --dma <address> (\"dma\" in /etc/tigon/agent.json); tigon bench dma picks --dma-threshold",
        ],
    )
}

// --- software ---------------------------------------------------------------------------------

fn output(cmd: &mut Command) -> Option<(bool, String, String)> {
    let o = cmd.output().ok()?;
    Some((
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    ))
}

fn dpdk() -> Check {
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

fn openmpi() -> Check {
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

fn mtl(dir: Option<&Path>) -> Check {
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

// --- the agent --------------------------------------------------------------------------------

fn count(v: &Value, path: &[&str]) -> u64 {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

fn agent(socket: &Path, port: Option<&str>) -> Check {
    let s = socket.display();
    let start = cmds![
        "systemctl start tigon-agent   # then: systemctl status tigon-agent; journalctl -u tigon-agent -n 50",
        format!(
            "# or by hand: tigon agent --port {} --socket {s}",
            port.unwrap_or("<PCI address or devargs>")
        ),
    ];
    let stats = match tigon_client::agent_stats(socket) {
        Ok(v) => v,
        Err(e) => {
            let what = if !socket.exists() {
                format!("no agent: nothing at {s}")
            } else if e.contains("refused") {
                format!(
                    "no agent: {s} is left over from an agent that is gone (connection refused)"
                )
            } else if e.contains("ermission") {
                let uid = std::fs::metadata("/proc/self")
                    .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
                    .unwrap_or(0);
                return Check::fail(
                    "agent",
                    format!("{s}: permission denied"),
                    &cmds![format!(
                        "# run as the agent's user, or let this uid attach: tigon agent --allow-uid {uid} ..."
                    )],
                );
            } else {
                format!("the agent at {s} does not answer: {e}")
            };
            return Check::fail("agent", what, &start);
        }
    };
    let drops: u64 = stats
        .get("drops")
        .and_then(Value::as_object)
        .map_or(0, |m| m.values().filter_map(Value::as_u64).sum());
    let failed = count(&stats, &["messages", "failed"]);
    let timeouts = count(&stats, &["peer_events", "timeouts"]);
    let summary = format!(
        "{s}: {} client(s), {} peer(s), {} frames rx / {} tx, {drops} dropped, {} retransmits, {failed} failed operation(s)",
        count(&stats, &["clients"]),
        count(&stats, &["peers"]),
        count(&stats, &["frames", "rx"]),
        count(&stats, &["frames", "tx"]),
        count(&stats, &["retransmits"]),
    );
    if failed > 0 || timeouts > 0 {
        return Check::warn(
            "agent",
            format!("{summary}, {timeouts} peer timeout(s)"),
            &cmds![
                format!("tigon stats --socket {s}   # peer_events, drops, port.imissed"),
                "# unreachable peers: check the link (ip -s link, the switch's MTU) and that every node's agent runs",
            ],
        );
    }
    Check::ok("agent", summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_addresses() {
        assert_eq!(pci_address("0000:3b:00.0").as_deref(), Some("0000:3b:00.0"));
        assert_eq!(
            pci_address("3B:00.1,txq=2").as_deref(),
            Some("0000:3b:00.1")
        );
        assert_eq!(pci_address("net_af_packet0,iface=eth0"), None);
        assert_eq!(pci_address("net_memif0,socket=/a:b.c"), None);
        assert_eq!(pci_address("00:1f.8"), None);
        assert_eq!(pci_address("dma_skeleton0"), None);
    }

    #[test]
    fn render_puts_fixes_under_their_check() {
        let c = [Check::fail("agent", "no agent", &cmds!["a", "b"])];
        let t = render(&c);
        assert!(t.contains("FAIL  agent      no agent\n"), "{t}");
        assert!(t.contains("fix: a\n"), "{t}");
        assert!(t.contains("     b\n"), "{t}");
    }
}
