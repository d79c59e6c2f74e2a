//! What a killed launcher leaves behind. `tigon run`, the demo, the benchmarks and the tests
//! name their scratch directories (`/tmp/tigon-run-PID-N`), network namespaces (`tgAPID-N`,
//! `tgB…`, `tgM…`, `tgN…`) and root-namespace veths (`tvaPID-N`, `tvb…`) with their own pid
//! (`tigon_pmd::testbed::unique_tag`). Their children die with them (a parent-death signal),
//! but a SIGKILLed owner cannot remove the names; the next `tigon run` does, for every owner
//! that is gone, and never touches what a live process owns. `scripts/clean-leftovers.sh`
//! (`make clean-netns`) applies the same rule from the shell.

use std::path::Path;
use std::process::{Command, Stdio};
use tigon_pmd::testbed::tag_owner;

/// Prefixes of the network namespaces a launcher or test makes (`tgA<tag>` ...).
const NETNS_PREFIXES: &[&str] = &["tgA", "tgB", "tgM", "tgN"];
/// Prefixes of veths created in the root namespace before moving into their namespaces.
const LINK_PREFIXES: &[&str] = &["tva", "tvb"];
/// Scratch entries in the temporary directory: `tigon-run-<tag>` (a cluster's agents'
/// sockets and logs), `tigon-demo-<tag>.sock` (the port demo's memif socket).
const TMP_PREFIXES: &[&str] = &["tigon-run-", "tigon-demo-"];

/// The owner pid of a leftover `name` starting with one of `prefixes`, if it has one.
fn owner(name: &str, prefixes: &[&str]) -> Option<u32> {
    let p = prefixes.iter().find(|p| name.starts_with(*p))?;
    tag_owner(name[p.len()..].trim_start_matches(|c: char| c.is_ascii_lowercase()))
}

/// Whether `pid` belongs to a dead owner: no such process.
fn dead(pid: u32) -> bool {
    pid != std::process::id() && !tigon_shm::process::exists(pid)
}

fn lines(cmd: &str, args: &[&str]) -> Vec<String> {
    Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn quiet(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Removes the network namespaces and root-namespace veths of dead owners; returns one line
/// per thing removed.
fn sweep_net() -> Vec<String> {
    let mut removed = Vec::new();
    for l in lines("ip", &["netns", "list"]) {
        let Some(name) = l.split_whitespace().next() else {
            continue;
        };
        if let Some(pid) = owner(name, NETNS_PREFIXES).filter(|&p| dead(p))
            && quiet("ip", &["netns", "del", name])
        {
            removed.push(format!(
                "network namespace {name} (owner pid {pid} is gone)"
            ));
        }
    }
    for l in lines("ip", &["-o", "link", "show"]) {
        // `7: tva123-0@tvb123-0: <...>`
        let Some(name) = l.split(':').nth(1).map(|n| n.trim().split('@').next()) else {
            continue;
        };
        let Some(name) = name else { continue };
        if let Some(pid) = owner(name, LINK_PREFIXES).filter(|&p| dead(p))
            && quiet("ip", &["link", "del", name])
        {
            removed.push(format!("veth {name} (owner pid {pid} is gone)"));
        }
    }
    removed
}

/// Removes the scratch entries of dead owners under `tmp`; returns one line per entry.
fn sweep_tmp(tmp: &Path) -> Vec<String> {
    let mut removed = Vec::new();
    let Ok(rd) = std::fs::read_dir(tmp) else {
        return removed;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = owner(&name, TMP_PREFIXES).filter(|&p| dead(p)) else {
            continue;
        };
        let p = e.path();
        let ok = if p.is_dir() && !p.is_symlink() {
            std::fs::remove_dir_all(&p).is_ok()
        } else {
            std::fs::remove_file(&p).is_ok()
        };
        if ok {
            removed.push(format!("{} (owner pid {pid} is gone)", p.display()));
        }
    }
    removed
}

/// Removes what dead owners left (namespaces, veths, scratch in the temporary directory and
/// in /dev/shm), logging each.
pub fn sweep() {
    let mut removed = sweep_net();
    removed.extend(sweep_tmp(&std::env::temp_dir()));
    // The ranks' shared-memory files of a cluster (`Cluster::shm_dir`).
    removed.extend(sweep_tmp(Path::new(crate::fabric::SHM_ROOT)));
    for r in removed {
        log::info!("removed a leftover of a killed run: {r}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_from_names() {
        assert_eq!(owner("tgA123-0", NETNS_PREFIXES), Some(123));
        assert_eq!(owner("tgN123-01", NETNS_PREFIXES), Some(123));
        // scripts/guide-local.sh's nodes: tgAg<pid>-<n>.
        assert_eq!(owner("tgAg99-1", NETNS_PREFIXES), Some(99));
        assert_eq!(owner("tigon-run-4567-2", TMP_PREFIXES), Some(4567));
        assert_eq!(owner("tigon-demo-4567-0.sock", TMP_PREFIXES), Some(4567));
        assert_eq!(owner("tva88-3", LINK_PREFIXES), Some(88));
        // Not ours, or no owner to read.
        assert_eq!(owner("tgX123-0", NETNS_PREFIXES), None);
        assert_eq!(owner("tigon-run-test-1-2.out", TMP_PREFIXES), None);
        assert_eq!(owner("tgA1f30", NETNS_PREFIXES), None);
    }

    #[test]
    fn sweeps_only_dead_owners() {
        let tmp = std::env::temp_dir().join(format!("tigon-sweep-test-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).expect("mkdir");
        // A dead owner: a child that has exited and been reaped.
        let mut c = Command::new("true").spawn().expect("spawn true");
        let gone = c.id();
        c.wait().expect("wait");
        let me = std::process::id();
        let dead_dir = tmp.join(format!("tigon-run-{gone}-0"));
        let live_dir = tmp.join(format!("tigon-run-{me}-0"));
        let dead_sock = tmp.join(format!("tigon-demo-{gone}-0.sock"));
        std::fs::create_dir_all(dead_dir.join("x")).expect("mkdir");
        std::fs::create_dir_all(&live_dir).expect("mkdir");
        std::fs::write(&dead_sock, b"").expect("write");
        let removed = sweep_tmp(&tmp);
        assert!(!dead_dir.exists() && !dead_sock.exists(), "{removed:?}");
        assert!(live_dir.exists(), "a live owner's directory was removed");
        assert!(
            removed
                .iter()
                .any(|r| r.contains(&format!("tigon-run-{gone}-0"))),
            "{removed:?}"
        );
        std::fs::remove_dir_all(&tmp).expect("rm");
    }
}
