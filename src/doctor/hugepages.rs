//! Hugepages: reserved, free, and mounted where DPDK looks; page files left by killed
//! DPDK processes.

use super::{Check, pci};
use std::path::Path;

/// Free hugepages (of 2 MiB) below which an agent may not start: its two mbuf pools take
/// about 40 MiB, the channels of its clients more.
const MIN_FREE_PAGES: u64 = 64;

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

pub(super) fn hugepages(dir: &Path, no_huge: bool, port: Option<&str>) -> Check {
    let d = dir.display();
    use tigon_shm::region::meminfo;
    let total = meminfo("HugePages_Total").unwrap_or(0);
    let free = meminfo("HugePages_Free").unwrap_or(0);
    let kb = meminfo("Hugepagesize").unwrap_or(2048);
    let reserve = cmds![
        "echo 1024 > /proc/sys/vm/nr_hugepages",
        format!("mkdir -p {d} && mount -t hugetlbfs nodev {d}"),
        "# persistent: vm.nr_hugepages=1024 in /etc/sysctl.d/80-tigon.conf (the systemd unit's pre-start script reserves TIGON_HUGEPAGES)",
    ];
    if no_huge {
        let why = if port.is_some_and(pci::is_pci) {
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
