//! Running things: a command with its output in a file, killed with everything it started
//! when it outlives its timeout or the test panics.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Every process: (pid, parent pid, start time in clock ticks).
pub fn processes() -> Vec<(i32, i32, u64)> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // After the command name's closing parenthesis: state, ppid, ... starttime (20th).
            let f: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
            Some((pid, f.get(1)?.parse().ok()?, f.get(19)?.parse().ok()?))
        })
        .collect()
}

/// The descendants of `root` (pid and start time, so that a reused pid is never signalled).
pub fn descendants(root: i32) -> Vec<(i32, u64)> {
    let all = processes();
    let mut out: Vec<(i32, u64)> = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for &(pid, ppid, start) in &all {
            if ppid == p && !out.iter().any(|(q, _)| *q == pid) {
                out.push((pid, start));
                frontier.push(pid);
            }
        }
    }
    out
}

pub fn signal_if_same(procs: &[(i32, u64)], sig: libc::c_int) {
    let now = processes();
    for &(pid, start) in procs {
        if now.iter().any(|&(p, _, s)| p == pid && s == start) {
            // SAFETY: a process we started (directly or not), identified by pid and start time.
            unsafe { libc::kill(pid, sig) };
        }
    }
}

/// A command with its output in a file. It stays in the test's process group, so that
/// nextest's signals (its timeout, Ctrl-C) reach it and its children too; when it outlives
/// its timeout or the test panics, it and every process it started get SIGTERM (the guide's
/// script then removes its namespaces and stops its agents), then SIGKILL.
pub struct Job {
    child: Option<Child>,
    log: PathBuf,
}

impl Job {
    pub fn spawn(mut cmd: Command, log: PathBuf) -> Job {
        let out = std::fs::File::create(&log).expect("log file");
        cmd.stdin(Stdio::null())
            .stdout(out.try_clone().expect("dup"))
            .stderr(out);
        Job {
            child: Some(cmd.spawn().expect("spawn")),
            log,
        }
    }

    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn kill_tree(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        let tree = descendants(c.id() as i32);
        // SAFETY: our own child, not yet reaped.
        unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
        signal_if_same(&tree, libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = c.kill();
        let _ = c.wait();
        signal_if_same(&tree, libc::SIGKILL);
    }

    /// Waits for the exit status. After `timeout`, panics with the output and what `why`
    /// says (called while everything still runs), and kills the job.
    pub fn wait(
        &mut self,
        timeout: Duration,
        why: impl FnOnce() -> String,
    ) -> std::process::ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            let c = self.child.as_mut().expect("running");
            if let Some(st) = c.try_wait().expect("try_wait") {
                self.child = None;
                return st;
            }
            if Instant::now() > deadline {
                let why = why();
                self.kill_tree();
                panic!("still running after {timeout:?}:\n{}\n{why}", self.output());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        self.kill_tree();
    }
}
