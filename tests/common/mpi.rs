//! MPI test programs and the processes of a job: what tests/run.rs and tests/lifecycle.rs
//! share.

use super::TIGON;
use std::path::{Path, PathBuf};
use std::process::Command;

/// An MPI test program built with mpicc: `ompi-mtl/tests/mpi/<name>.c`, or this crate's
/// `tests/mpi/<name>.c`.
pub fn program(name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = [root.join("tests/mpi"), root.join("ompi-mtl/tests/mpi")]
        .into_iter()
        .map(|d| d.join(format!("{name}.c")))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("no source for MPI program {name}"));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("run-mpi");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let out = dir.join(name);
    // Built under a private name, then renamed: tests in other processes may build it too.
    let tmp = dir.join(format!("{name}.{}", std::process::id()));
    let st = Command::new("mpicc")
        .args(["-O2", "-g", "-Wall", "-pthread", "-o"])
        .arg(&tmp)
        .arg(&src)
        .status()
        .expect("running mpicc (apt-get install openmpi-bin libopenmpi-dev)");
    assert!(st.success(), "mpicc {} failed", src.display());
    std::fs::rename(&tmp, &out).expect("rename");
    out
}

/// Panics unless the MTL was built next to `tigon`.
pub fn check_mtl_built() {
    let so = Path::new(TIGON).with_file_name("libmca_mtl_tigon.so");
    assert!(
        so.exists(),
        "{} missing: build the MTL first (cargo build -p tigon-ompi-mtl; make test does)",
        so.display()
    );
}

/// Processes descended from `pid`.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let kids = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            for k in kids.split_whitespace().filter_map(|k| k.parse().ok()) {
                out.push(k);
                todo.push(k);
            }
        }
    }
    out
}

/// The running processes under `pid` whose executable is `exe`.
pub fn descendants_running(pid: u32, exe: &Path) -> Vec<u32> {
    descendants(pid)
        .into_iter()
        .filter(|p| std::fs::read_link(format!("/proc/{p}/exe")).is_ok_and(|e| e == exe))
        .collect()
}

/// A process as (pid, start time in clock ticks since boot): unlike a bare pid, never the
/// name of a later process.
pub fn identity(pid: u32) -> Option<(u32, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 22, counted after the parenthesised command name (which may hold spaces).
    let (_, rest) = s.rsplit_once(')')?;
    let start = rest.split_whitespace().nth(19)?.parse().ok()?;
    Some((pid, start))
}

/// Whether the process `id` names still runs.
pub fn still_runs(id: (u32, u64)) -> bool {
    identity(id.0) == Some(id) && running(id.0)
}

/// Whether `pid` still runs (a zombie does not: it only waits for its parent to reap it).
pub fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s.rsplit_once(')').is_some_and(|(_, r)| r.starts_with(" Z")))
}

/// A process's command line, words joined by spaces ("" once it is gone).
pub fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .map(|w| String::from_utf8_lossy(w).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// Sends `sig` (e.g. "INT", "KILL") to `pid`, or to process group `-pid`.
pub fn signal(sig: &str, target: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), "--", target])
        .stderr(std::process::Stdio::null())
        .status();
}

fn sh(cmd: &str, args: &[&str]) -> String {
    let o = Command::new(cmd)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The tag of the first cluster a `tigon run` (or demo) with this pid creates: its
/// namespaces, interfaces and scratch directory are named with it
/// (tigon_pmd::testbed::unique_tag: `PID-N`).
pub fn tag(pid: u32) -> String {
    format!("{pid}-0")
}

/// Whether a line of `ip netns list` / `ip -o link show` names something with `tag`: a word
/// that is letters followed by the tag (`tgA123-0`, `tgN123-01`, `tva123-0@...`).
fn names_tag(line: &str, tag: &str) -> bool {
    line.split(|c: char| c.is_whitespace() || c == '@' || c == ':')
        .any(|w| {
            w.trim_start_matches(|c: char| c.is_ascii_alphabetic())
                .starts_with(tag)
        })
}

/// What the `tigon run` with this pid left behind: namespaces, links, its scratch directory
/// (agents' sockets and logs), processes started with paths in it (agents), and loss tables
/// outside a namespace. Empty when it cleaned up.
pub fn leftovers(pid: u32) -> Vec<String> {
    let tag = tag(pid);
    let mut left: Vec<String> = sh("ip", &["netns", "list"])
        .lines()
        .chain(sh("ip", &["-o", "link", "show"]).lines())
        .filter(|l| names_tag(l, &tag))
        .map(str::to_string)
        .collect();
    let dir = std::env::temp_dir().join(format!("tigon-run-{tag}"));
    if dir.exists() {
        left.push(format!("directory {}", dir.display()));
    }
    // Open MPI's shared-memory files of the job's ranks (killed ranks cannot remove theirs).
    let shm = std::path::Path::new("/dev/shm").join(format!("tigon-run-{tag}"));
    if shm.exists() {
        left.push(format!("directory {}", shm.display()));
    }
    let pattern = format!("{}/", dir.display());
    left.extend(
        sh("pgrep", &["-af", &pattern])
            .lines()
            .map(|l| format!("process {l}")),
    );
    left.extend(
        sh("nft", &["list", "tables"])
            .lines()
            .filter(|l| l.contains("tigon_loss"))
            .map(|l| format!("root namespace nft {l}")),
    );
    left
}
