//! What the guide installs on a node works as the guide says: the pre-start script's
//! `--dry-run` on the example configuration (as shipped and as the guide suggests editing
//! it), and the systemd unit passes `systemd-analyze verify`.
//!
//! Installs go to a temporary `--destdir`, never to the real /usr/local or /etc.

use super::checks::{check_abs_path, check_tigon};
use super::files::read;
use super::readme::{blocks, guide};
use super::staged::Staged;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

#[test]
fn prestart_dry_run_on_the_example_config() {
    let staged = Staged::new("guide-prestart");
    let g = guide();
    let line = blocks(&g, "sh guide")
        .iter()
        .flat_map(|b| b.lines().map(str::to_string).collect::<Vec<_>>())
        .find(|l| l.contains("--dry-run"))
        .expect("the guide shows the pre-start script's --dry-run");
    let env_file = staged.path("/etc/tigon/agent.env");
    let original = read(&env_file);
    // The guide's line on the staged install, with agent.env as shipped and as edited the
    // ways the guide suggests.
    let run = |extra: &str| -> String {
        std::fs::write(&env_file, format!("{original}{extra}")).expect("agent.env");
        let mut c = Command::new("bash");
        c.args(["-euo", "pipefail", "-c", &staged.relocate(&line)]);
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("TIGON_")) {
            c.env_remove(k);
        }
        let o = c.output().expect("bash");
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let err = String::from_utf8_lossy(&o.stderr);
        println!("--- agent.env +{extra:?}:\n{out}{err}");
        assert!(o.status.success(), "the dry run failed:\n{out}{err}");
        assert!(err.contains("tigon-prestart: ready"), "{err}");
        out
    };
    let pages_before = read(Path::new("/proc/sys/vm/nr_hugepages"));

    let out = run("");
    assert!(out.contains("modprobe vfio-pci\n"), "{out}");
    assert!(
        out.contains("dpdk-devbind.py -b vfio-pci 0000:3b:00.0\n"),
        "{out}"
    );
    if pages_before.trim().parse::<u64>().expect("nr_hugepages") < 1024 {
        assert!(
            out.contains("echo 1024 > /proc/sys/vm/nr_hugepages\n"),
            "{out}"
        );
    }

    let out = run("TIGON_VFIO_NOIOMMU=1\n");
    assert!(
        out.contains("modprobe vfio enable_unsafe_noiommu_mode=1\n"),
        "{out}"
    );
    assert!(
        out.contains("echo 1 > /sys/module/vfio/parameters/enable_unsafe_noiommu_mode\n"),
        "{out}"
    );

    let out = run("TIGON_DRIVER=uio_pci_generic\n");
    assert!(out.contains("modprobe uio_pci_generic\n"), "{out}");
    assert!(
        out.contains("dpdk-devbind.py -b uio_pci_generic 0000:3b:00.0\n"),
        "{out}"
    );

    let out = run("TIGON_NIC=eth1\nTIGON_MTU=9000\n");
    assert!(
        out.contains("ip link set eth1 mtu 9000\nip link set eth1 up\n"),
        "{out}"
    );
    assert!(
        !out.contains("dpdk-devbind.py"),
        "af_packet binds nothing: {out}"
    );

    assert_eq!(
        read(Path::new("/proc/sys/vm/nr_hugepages")),
        pages_before,
        "a dry run changes nothing"
    );
}

#[test]
fn systemd_unit_verifies() {
    let staged = Staged::new("guide-unit");
    let unit_path = staged.path("/etc/systemd/system/tigon-agent.service");
    let unit = read(&unit_path);
    // What the issue asks of it, and the paths it names installed.
    for want in [
        "EnvironmentFile=/etc/tigon/agent.env\n",
        "ExecStartPre=/usr/local/lib/tigon/tigon-prestart.sh\n",
        "ExecStart=/usr/local/bin/tigon agent --config /etc/tigon/agent.json\n",
        "Restart=on-failure\n",
        "RuntimeDirectory=tigon\n",
        "WantedBy=multi-user.target\n",
    ] {
        assert!(unit.contains(want), "the unit lacks {want}");
        for w in want.trim().split(['=', ' ']).filter(|w| w.starts_with('/')) {
            check_abs_path(&staged, w, want);
        }
    }
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart=/usr/local/bin/"))
        .expect("ExecStart");
    let words: Vec<&str> = exec.split_whitespace().collect();
    check_tigon(&words, "the unit's ExecStart");
    // The agent's socket is in the unit's RuntimeDirectory.
    let cfg: Value =
        serde_json::from_str(&read(&staged.path("/etc/tigon/agent.json"))).expect("agent.json");
    assert_eq!(cfg["socket"], "/run/tigon/agent.sock");

    let Ok(o) = Command::new("systemd-analyze").arg("--version").output() else {
        println!("systemd-analyze not found: `systemd-analyze verify` skipped");
        return;
    };
    assert!(o.status.success());
    // The unit as `install.sh --prefix` writes it for the staged prefix, so that the
    // programs it starts exist.
    let dir = staged.dir.join("verify");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let copy = dir.join("tigon-agent.service");
    std::fs::write(&copy, staged.relocate(&unit)).expect("write");
    let o = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
        .expect("systemd-analyze verify");
    let err = String::from_utf8_lossy(&o.stderr);
    println!("systemd-analyze verify {}:\n{err}", copy.display());
    assert!(o.status.success(), "systemd-analyze verify failed:\n{err}");
    assert!(
        !err.contains("tigon-agent.service"),
        "systemd-analyze complains about the unit:\n{err}"
    );
}
