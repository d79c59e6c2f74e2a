//! Nothing outlives `tigon run` or `tigon demo`, however they end:
//! - SIGKILLed mid-job (memif and veth), their agents, mpirun and ranks die with them; what
//!   they could not remove (scratch directory, namespaces) carries their pid, and the next
//!   `tigon run` or `make clean-netns` removes it, and nothing a live process owns;
//! - Ctrl-C at a terminal (SIGINT to the whole process group) stops the job, prints the
//!   agents' counters (the agents did not get the signal) and exits 130 with no rank left;
//! - `tigon demo` stopped by SIGTERM or Ctrl-C exits 130 and leaves nothing;
//! - `tigon run` whose stderr went away (a closed pipe) or cannot be written (a full disk)
//!   runs the job, tears down and passes the program's status on.
//!
//! Each launcher runs in a process group of its own, as a shell job does. The agents pin
//! lcores 0 and 1: nextest runs these tests in the `dpdk-pinned` group.

mod common;

use common::mpi::{
    check_mtl_built, descendants, descendants_running, identity, leftovers, program, signal,
    still_runs, tag,
};
use common::{TIGON, eventually};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Processes as (pid, start time): see `common::mpi::identity`.
type Ids = Vec<(u32, u64)>;

/// A `tigon` launcher started as a shell job (its own process group), output to files.
struct Launcher {
    child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Launcher {
    /// Started with `TMPDIR` = `tmp`: its scratch directory lands there.
    fn start_in(args: &[&str], tmp: &Path) -> Launcher {
        check_mtl_built();
        let base = std::env::temp_dir().join(format!(
            "tigon-lifecycle-{}-{}",
            std::process::id(),
            args[0]
        ));
        let (out, err) = (base.with_extension("out"), base.with_extension("err"));
        let mut c = Command::new(TIGON);
        c.env("TMPDIR", tmp);
        let child = c
            .args(args)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).expect("stdout file"))
            .stderr(std::fs::File::create(&err).expect("stderr file"))
            .env("RUST_LOG", "info")
            .spawn()
            .expect("spawning tigon");
        Launcher { child, out, err }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn output(&self) -> String {
        format!(
            "--- stdout\n{}\n--- stderr\n{}",
            std::fs::read_to_string(&self.out).unwrap_or_default(),
            std::fs::read_to_string(&self.err).unwrap_or_default()
        )
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// Waits for it to exit (up to `timeout`); its exit code, None if a signal ended it.
    fn wait(&mut self, timeout: Duration) -> Option<i32> {
        let mut st = None;
        let done = eventually(timeout, || {
            st = self.child.try_wait().expect("try_wait");
            st.is_some()
        });
        assert!(done, "still running {timeout:?} later:\n{}", self.output());
        st.and_then(|s| s.code())
    }

    /// Waits until `n` processes of `exe` run under it: the job is under way. Returns them
    /// and everything else then running under it (agents, mpirun).
    fn wait_for(&mut self, exe: &Path, n: usize) -> (Ids, Ids) {
        let mut found = Vec::new();
        let ok = eventually(Duration::from_secs(120), || {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return true;
            }
            found = descendants_running(self.pid(), exe);
            found.len() >= n
        });
        assert!(
            ok && found.len() >= n,
            "no {n} {} under {}:\n{}",
            exe.display(),
            self.pid(),
            self.output()
        );
        // A moment of traffic, so the kill lands mid-transfer.
        std::thread::sleep(Duration::from_secs(2));
        let ids = |v: Vec<u32>| v.into_iter().filter_map(identity).collect::<Ids>();
        (ids(found), ids(descendants(self.pid())))
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            signal("INT", &format!("-{}", self.pid()));
            let _ = eventually(Duration::from_secs(30), || {
                !matches!(self.child.try_wait(), Ok(None))
            });
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(&self.out);
        let _ = std::fs::remove_file(&self.err);
    }
}

fn command_lines(ids: &[(u32, u64)]) -> Vec<String> {
    ids.iter()
        .map(|&(p, _)| format!("{p}: {}", common::mpi::cmdline(p)))
        .collect()
}

fn netns_exists(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

fn ip(args: &[&str]) {
    let st = Command::new("ip").args(args).status().expect("ip");
    assert!(st.success(), "ip {args:?} failed");
}

/// A process that owns names in these tests while it runs: a `sleep`.
struct Owner(Child);

impl Owner {
    fn new() -> Owner {
        Owner(
            Command::new("sleep")
                .arg("600")
                .spawn()
                .expect("spawn sleep"),
        )
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
    fn end(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.end();
        let _ = Command::new("ip")
            .args(["netns", "del", &format!("tgA{}-0", self.0.id())])
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(
            std::env::temp_dir().join(format!("tigon-run-{}-0", self.0.id())),
        );
    }
}

/// A directory under the temporary directory, removed when dropped.
struct PrivateTmp(PathBuf);

impl PrivateTmp {
    /// One per test, also where `cargo test` runs this file's tests as threads of one
    /// process (nextest runs each in a process of its own): two tests sharing one directory
    /// took each other's launchers for their own.
    fn new() -> PrivateTmp {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p =
            std::env::temp_dir().join(format!("tigon-lifecycle-tmp-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&p).expect("mkdir");
        PrivateTmp(p)
    }
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl PrivateTmp {
    /// What is in it (a launcher run with it as its TMPDIR should leave nothing: its scratch
    /// directory, and Open MPI's session directory, which mpirun leaves behind when a job is
    /// interrupted unless told to put it in that scratch directory).
    fn entries(&self) -> Vec<PathBuf> {
        std::fs::read_dir(&self.0)
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default()
    }
}

/// `tigon run` SIGKILLed mid-transfer on memif, then on veth: its agents, mpirun and ranks
/// die with it. What it leaves (its scratch directory; on veth its namespaces) is named with
/// its pid: the next `tigon run` removes the first one's, `make clean-netns` the second's,
/// and neither touches the names of a process that runs.
#[test]
fn sigkill_takes_every_child_along() {
    let order = program("order");
    // A temporary directory of this test's own: every `tigon run` sweeps the scratch of dead
    // owners in its TMPDIR, so another test's run in the shared /tmp could remove the killed
    // launcher's directory before this test has looked at it.
    let scratch = PrivateTmp::new();
    let tmp = scratch.0.clone();
    let mut live = Owner::new();
    let live_ns = format!("tgA{}-0", live.pid());
    let live_dir = tmp.join(format!("tigon-run-{}-0", live.pid()));
    ip(&["netns", "add", &live_ns]);
    std::fs::create_dir_all(&live_dir).expect("mkdir");

    for fabric in ["memif", "veth"] {
        let mut job = Launcher::start_in(
            &[
                "run",
                "--fabric",
                fabric,
                "-np",
                "2",
                "--",
                order.to_str().unwrap(),
                "1000000",
            ],
            &tmp,
        );
        let pid = job.pid();
        let (ranks, all) = job.wait_for(&order, 2);
        let cmds = command_lines(&all);
        // One agent for both nodes with the shared layout (fewer than 2 CPUs per node).
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let agents = if cpus < 4 { 1 } else { 2 };
        assert!(
            cmds.iter().filter(|c| c.contains(" agent --")).count() == agents
                && cmds.iter().any(|c| c.contains("mpirun"))
                && ranks.len() == 2,
            "expected {agents} agent(s), mpirun and two ranks under {pid}: {cmds:#?}"
        );
        // Namespaces are global: another `tigon run` on this machine (a test beside this one)
        // sweeps those of dead launchers, so they are checked for their names while the job
        // runs, and after the kill only those still there are left to `make clean-netns`.
        let nss = [format!("tgA{}", tag(pid)), format!("tgB{}", tag(pid))];
        if fabric == "veth" {
            assert!(
                nss.iter().all(|n| netns_exists(n)),
                "{fabric}: the running job's namespaces are not {nss:?}"
            );
        }
        signal("KILL", &pid.to_string());
        assert_eq!(job.wait(Duration::from_secs(30)), None, "{}", job.output());
        let gone = eventually(Duration::from_secs(30), || {
            !all.iter().any(|&id| still_runs(id))
        });
        let left: Vec<_> = all.iter().copied().filter(|&id| still_runs(id)).collect();
        assert!(
            gone,
            "{fabric}: still running 30 s after `tigon run` was killed: {:#?}",
            command_lines(&left)
        );
        // What it could not remove carries its pid.
        let dir = tmp.join(format!("tigon-run-{}", tag(pid)));
        assert!(dir.exists(), "{fabric}: no {}", dir.display());
        if fabric == "veth" && !nss.iter().all(|n| netns_exists(n)) {
            eprintln!("{fabric}: another tigon run swept some of {nss:?} first");
        }

        if fabric == "memif" {
            // The next `tigon run` removes it.
            let o = Command::new(TIGON)
                .args(["run", "-np", "1", "--", "true"])
                .env("RUST_LOG", "info")
                .env("TMPDIR", &tmp)
                .stdin(Stdio::null())
                .output()
                .expect("tigon run");
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(o.status.success(), "the next tigon run failed:\n{err}");
            assert!(
                !dir.exists(),
                "the next tigon run left {}:\n{err}",
                dir.display()
            );
            assert!(
                err.contains(&format!("tigon-run-{}", tag(pid))),
                "the next tigon run did not say what it removed:\n{err}"
            );
        } else {
            let o = Command::new("make")
                .args(["-s", "-C", env!("CARGO_MANIFEST_DIR"), "clean-netns"])
                .env("TMPDIR", &tmp)
                .stdin(Stdio::null())
                .output()
                .expect("make clean-netns");
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(o.status.success(), "make clean-netns:\n{out}");
            assert!(
                nss.iter().all(|n| !netns_exists(n)) && !dir.exists(),
                "make clean-netns left {nss:?} or {}:\n{out}",
                dir.display()
            );
            assert!(
                out.contains(&format!(
                    "kept netns {live_ns}: its owner, pid {}",
                    live.pid()
                )),
                "{out}"
            );
        }
        // A running process's names were kept.
        assert!(
            netns_exists(&live_ns) && live_dir.exists(),
            "{fabric}: the names of running pid {} were removed",
            live.pid()
        );
        assert!(leftovers(pid).is_empty(), "{:#?}", leftovers(pid));
        assert!(!tmp.join(format!("tigon-run-{}", tag(pid))).exists());
    }

    // Once their owner is gone, the next `tigon run` removes them too.
    live.end();
    let o = Command::new(TIGON)
        .env("TMPDIR", &tmp)
        .args(["run", "-np", "1", "--", "true"])
        .stdin(Stdio::null())
        .output()
        .expect("tigon run");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        !netns_exists(&live_ns) && !live_dir.exists(),
        "{live_ns} / {} of dead pid {} were not removed",
        live_dir.display(),
        live.pid()
    );
}

/// Ctrl-C at the terminal: SIGINT to `tigon run`'s whole process group. The agents, in groups
/// of their own, do not get it: `tigon run` stops mpirun and the ranks, prints the agents'
/// counters, then stops the agents, and exits 130 with no rank running.
#[test]
fn terminal_ctrl_c_stops_the_job_then_the_agents() {
    let order = program("order");
    let scratch = PrivateTmp::new();
    let mut job = Launcher::start_in(
        &[
            "run",
            "--stats",
            "-np",
            "2",
            "--",
            order.to_str().unwrap(),
            "1000000",
        ],
        &scratch.0,
    );
    let pid = job.pid();
    let (ranks, all) = job.wait_for(&order, 2);
    signal("INT", &format!("-{pid}"));
    let code = job.wait(Duration::from_secs(60));
    // At the moment it exits: nothing it started runs.
    let left: Vec<_> = all.iter().copied().filter(|&id| still_runs(id)).collect();
    assert!(
        left.is_empty(),
        "running after `tigon run` exited: {:#?} (ranks were {ranks:?})",
        command_lines(&left)
    );
    assert_eq!(code, Some(130), "{}", job.output());
    let err = job.stderr();
    let stats: Vec<serde_json::Value> = err
        .lines()
        .filter_map(|l| l.strip_prefix("tigon run: agent "))
        .filter_map(|l| l.split_once(" stats: "))
        .map(|(_, j)| {
            serde_json::from_str(j).unwrap_or_else(|e| panic!("agent stats `{j}`: {e}\n{err}"))
        })
        .collect();
    assert!(
        stats.len() == 2
            && stats
                .iter()
                .all(|s| s["messages"]["sends"].as_u64() > Some(0)),
        "expected both agents' counters after Ctrl-C:\n{err}"
    );
    assert!(leftovers(pid).is_empty(), "{:#?}", leftovers(pid));
    assert_eq!(
        scratch.entries(),
        Vec::<PathBuf>::new(),
        "left in its TMPDIR"
    );
}

/// `tigon demo` stopped mid-NetPIPE by SIGTERM, then by Ctrl-C (its process group): exit 130,
/// no process, directory or socket of it left, Open MPI's session directory included.
#[test]
fn demo_stopped_leaves_nothing() {
    let np = Path::new("/usr/bin/NPopenmpi");
    assert!(
        np.exists(),
        "NetPIPE missing (apt-get install netpipe-openmpi)"
    );
    for (sig, group) in [("TERM", false), ("INT", true)] {
        let scratch = PrivateTmp::new();
        let mut demo = Launcher::start_in(&["demo", "--upper", "4194304"], &scratch.0);
        let pid = demo.pid();
        let (_, all) = demo.wait_for(np, 2);
        let target = if group {
            format!("-{pid}")
        } else {
            pid.to_string()
        };
        signal(sig, &target);
        let code = demo.wait(Duration::from_secs(60));
        let left: Vec<_> = all.iter().copied().filter(|&id| still_runs(id)).collect();
        assert!(
            left.is_empty(),
            "SIG{sig}: running after the demo exited: {:#?}",
            command_lines(&left)
        );
        assert_eq!(code, Some(130), "SIG{sig}:\n{}", demo.output());
        assert!(leftovers(pid).is_empty(), "SIG{sig}: {:#?}", leftovers(pid));
        let left = scratch.entries();
        assert!(left.is_empty(), "SIG{sig}: left in its TMPDIR: {left:?}");
    }
}

/// `tigon run --stats` with its stderr a pipe nobody reads any more (`2>&1 | head -0`) or
/// `/dev/full`: its messages (the layout at the start, the counters at the end) are dropped,
/// and the job runs, is torn down and its status passed on. Before, the first message killed
/// it by SIGPIPE (exit 141) before its clean-up, leaving its scratch directory, or panicked
/// on the full disk before any rank started (exit 101; helper-found).
#[test]
fn stderr_gone_or_full_runs_the_job_and_cleans_up() {
    check_mtl_built();
    let prog = program("exit_code");
    for full in [false, true] {
        let (reader, writer) = std::io::pipe().expect("pipe");
        let err: Stdio = if full {
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .expect("/dev/full")
                .into()
        } else {
            writer.into()
        };
        drop(reader);
        let child = Command::new(TIGON)
            .args(["run", "--stats", "-np", "2", "--"])
            .arg(&prog)
            .args(["1", "3"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("tigon run");
        let pid = child.id();
        let out = child.wait_with_output().expect("waiting");
        assert_eq!(out.status.code(), Some(3), "full {full}: {:?}", out.status);
        let left = leftovers(pid);
        assert!(left.is_empty(), "full {full}: left behind: {left:#?}");
    }
}
