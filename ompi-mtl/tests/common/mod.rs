//! Test harness for the MTL: the component directory Open MPI loads it from, two `tigon
//! agent`s joined by a memif link, the C test programs (built with mpicc) and mpirun.
#![allow(dead_code)]

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Open MPI's own components (Debian); `ompi_info --path pkglibdir` says where they are.
const DEBIAN_PKGLIBDIR: &str = "/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3";

/// `target/<profile>` of this test binary (`target/<profile>/deps/<test>`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps")
        .to_path_buf()
}

fn profile_name() -> String {
    profile_dir()
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "debug".into())
}

fn copy_atomic(from: &Path, to: &Path) {
    let tmp = to.with_extension(format!("tmp{}", std::process::id()));
    std::fs::copy(from, &tmp)
        .unwrap_or_else(|e| panic!("copying {} to {}: {e}", from.display(), tmp.display()));
    std::fs::rename(&tmp, to).expect("rename");
}

/// The directory holding `mca_mtl_tigon.so` and `help-mtl-tigon.txt`, as installed for Open
/// MPI: `target/<profile>/ompi/`.
pub fn component_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // `cargo build` leaves the component at target/<profile>/, but building the tests
        // (cargo test / nextest alone) refreshes only deps/: take the newer, never a stale one.
        let top = profile_dir().join("libmca_mtl_tigon.so");
        let deps = profile_dir().join("deps/libmca_mtl_tigon.so");
        let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        let so = match (mtime(&top), mtime(&deps)) {
            (Some(t), Some(d)) if d > t => deps,
            (None, Some(_)) => deps,
            _ => top,
        };
        assert!(
            so.exists(),
            "{} missing: build the crate (cargo build -p tigon-ompi-mtl)",
            so.display()
        );
        let dir = profile_dir().join("ompi");
        std::fs::create_dir_all(&dir).expect("mkdir ompi");
        copy_atomic(&so, &dir.join("mca_mtl_tigon.so"));
        let help = Path::new(env!("CARGO_MANIFEST_DIR")).join("help-mtl-tigon.txt");
        copy_atomic(&help, &dir.join("help-mtl-tigon.txt"));
        dir
    })
    .clone()
}

/// `--mca mca_base_component_path` value: ours first, then Open MPI's own.
pub fn component_path() -> String {
    let pkglib = Command::new("ompi_info")
        .args(["--path", "pkglibdir", "--parsable"])
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find_map(|l| l.strip_prefix("path:pkglibdir:").map(str::to_string))
        })
        .unwrap_or_else(|| DEBIAN_PKGLIBDIR.into());
    format!("{}:{pkglib}", component_dir().display())
}

/// The `tigon` binary: $TIGON_BIN, else next to this test binary, else built now.
pub fn tigon_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("TIGON_BIN") {
            return PathBuf::from(p);
        }
        let bin = profile_dir().join("tigon");
        if !bin.exists() {
            let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
            c.args(["build", "-p", "tigon", "--bin", "tigon", "-j2"]);
            if profile_name() == "release" {
                c.arg("--release");
            }
            let target = profile_dir().parent().expect("target dir").to_path_buf();
            c.env("CARGO_TARGET_DIR", target);
            let st = c.status().expect("running cargo build -p tigon");
            assert!(st.success(), "cargo build -p tigon failed");
        }
        assert!(bin.exists(), "{} missing", bin.display());
        bin
    })
    .clone()
}

/// The MPI test programs: `tests/mpi/<name>.c`, built once per test binary with mpicc.
pub fn program(name: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mpi")
        .join(format!("{name}.c"));
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mpi");
    std::fs::create_dir_all(&out_dir).expect("mkdir");
    let out = out_dir.join(name);
    let tmp = out_dir.join(format!("{name}.{}", std::process::id()));
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

/// Makes the child receive `sig` when this (test) process dies, however it dies: a test killed
/// by nextest's timeout must not leave agents or mpirun behind (they run in their own process
/// groups, which the test runner's kill does not reach).
fn die_with_parent(c: &mut Command, sig: i32) {
    // SAFETY: prctl is async-signal-safe and touches only the child between fork and exec.
    unsafe {
        c.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Two agents over a memif link (lcores 0 and 1, idle policy `yield`), killed on drop.
pub struct Agents {
    pub dir: PathBuf,
    pub sockets: Vec<PathBuf>,
    children: Vec<Child>,
    /// Each agent's options past the common ones (to start it again: `restart`).
    args: Vec<Vec<String>>,
}

impl Agents {
    pub fn start(name: &str) -> Agents {
        Agents::start_with(name, 30_000)
    }

    /// Agents that declare a silent peer unreachable after `peer_timeout_ms`.
    pub fn start_with(name: &str, peer_timeout_ms: u64) -> Agents {
        Agents::start_args(name, peer_timeout_ms, [&[], &[]])
    }

    /// Agents with extra options each (the server's first).
    pub fn start_args(name: &str, peer_timeout_ms: u64, extra: [&[&str]; 2]) -> Agents {
        let dir = std::env::temp_dir().join(format!("tigon-mtl-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let memif = dir.join("memif.sock");
        let mut a = Agents {
            dir: dir.clone(),
            sockets: Vec::new(),
            children: Vec::new(),
            args: Vec::new(),
        };
        // The server first: the client's memif needs the server's socket to exist.
        for (i, role) in ["server", "client"].iter().enumerate() {
            let mut args: Vec<String> = vec![
                "--port".into(),
                // A MAC of its own, as a NIC has: an agent started again (`restart`) is the
                // same node to its peer, not a new one (memif draws a random MAC otherwise).
                format!(
                    "net_memif0,role={role},socket={},mac=02:00:00:00:7e:{:02x}",
                    memif.display(),
                    i + 1
                ),
                // A loaded 2-core machine can starve an agent for seconds: do not mistake
                // that for a dead peer (the agent's default is 5 s).
                "--peer-timeout-ms".into(),
                peer_timeout_ms.to_string(),
            ];
            args.extend(extra[i].iter().map(|s| s.to_string()));
            a.args.push(args);
            a.sockets.push(dir.join(format!("agent{i}.sock")));
            let child = a.spawn(i);
            a.children.push(child);
        }
        a
    }

    /// Starts agent `i` and waits until it serves.
    fn spawn(&mut self, i: usize) -> Child {
        self.spawn_env(i, &[])
    }

    fn spawn_env(&mut self, i: usize, env: &[(&str, &str)]) -> Child {
        // Built first if missing (minutes in a fresh clone), outside the agent's deadline.
        let bin = tigon_bin();
        let deadline = Instant::now() + Duration::from_secs(60);
        let sock = &self.sockets[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("agent{i}.log")))
            .expect("log");
        let mut cmd = Command::new(&bin);
        cmd.arg("agent")
            .args(&self.args[i])
            .args(["--lcore", &i.to_string(), "--idle", "yield"])
            .arg("--socket")
            .arg(sock)
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(log.try_clone().expect("dup"))
            .stderr(log)
            .process_group(0);
        die_with_parent(&mut cmd, libc::SIGINT);
        let mut child = cmd.spawn().expect("spawning tigon agent");
        // Serving: the agent answers a stats request once its port is up (its control socket
        // accepts connections earlier). The memif server listens by then (on an abstract
        // socket: no file to wait for).
        loop {
            if tigon_client::agent_stats(sock).is_ok() {
                break;
            }
            if let Ok(Some(st)) = child.try_wait() {
                panic!("agent {i} exited ({st}): {}", self.log(i));
            }
            assert!(
                Instant::now() < deadline,
                "agent {i} not serving {} after 60 s: {}",
                sock.display(),
                self.log(i)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        child
    }

    /// Kills agent `i` (SIGKILL: nothing of it tells its peer) and starts it again at once,
    /// with the same options: a node whose agent died and was restarted (by systemd, say)
    /// while its peer kept running.
    pub fn restart(&mut self, i: usize) {
        self.restart_env(i, &[]);
    }

    /// As [`Agents::restart`], the new agent with environment `env` added.
    pub fn restart_env(&mut self, i: usize, env: &[(&str, &str)]) {
        let _ = self.children[i].kill();
        let _ = self.children[i].wait();
        let _ = std::fs::remove_file(&self.sockets[i]);
        self.children[i] = self.spawn_env(i, env);
    }

    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.dir.join(format!("agent{i}.log"))).unwrap_or_default()
    }

    /// The agent's counters (`tigon stats`).
    pub fn stats(&self, i: usize) -> serde_json::Value {
        tigon_client::agent_stats(&self.sockets[i]).unwrap_or_default()
    }

    /// The agents' process ids.
    pub fn pids(&self) -> Vec<i32> {
        self.children.iter().map(|c| c.id() as i32).collect()
    }

    /// Whether both agents still run.
    pub fn alive(&mut self) -> bool {
        self.children
            .iter_mut()
            .all(|c| matches!(c.try_wait(), Ok(None)))
    }
}

impl Drop for Agents {
    fn drop(&mut self) {
        for c in &self.children {
            // SAFETY: signals our own child (SIGINT: the agent's orderly shutdown).
            unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for c in &mut self.children {
            while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("agent logs kept in {}", self.dir.display());
        }
    }
}

/// The result of an mpirun.
pub struct Run {
    pub status: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
    pub timed_out: bool,
}

impl Run {
    pub fn text(&self) -> String {
        format!(
            "exit {:?}{} after {:.1?}\n--- stdout\n{}\n--- stderr\n{}",
            self.status,
            if self.timed_out { " (TIMED OUT)" } else { "" },
            self.elapsed,
            self.stdout,
            self.stderr
        )
    }
    pub fn assert_ok(&self, name: &str) {
        assert!(
            self.status == Some(0) && self.stdout.contains(&format!("OK {name}")),
            "{name} failed: {}",
            self.text()
        );
    }
}

/// Options of an mpirun.
pub struct Mpirun {
    pub np: usize,
    pub args: Vec<String>,
    pub mca: Vec<(String, String)>,
    pub timeout: Duration,
    /// Use tigon (`--mca pml cm --mca mtl tigon`).
    pub tigon: bool,
    /// Sockets of the agents ranks spread over (first half of the ranks on the first).
    pub sockets: Vec<PathBuf>,
    pub env: Vec<(String, String)>,
    /// More mpirun options.
    pub extra: Vec<String>,
}

impl Mpirun {
    pub fn new(np: usize, agents: &Agents) -> Mpirun {
        Mpirun {
            np,
            args: Vec::new(),
            mca: Vec::new(),
            timeout: Duration::from_secs(180),
            tigon: true,
            sockets: agents.sockets.clone(),
            env: Vec::new(),
            extra: Vec::new(),
        }
    }

    pub fn run(&self, program: &Path) -> Run {
        let mut c = Command::new("mpirun");
        c.args([
            "--allow-run-as-root",
            "--oversubscribe",
            "--bind-to",
            "none",
        ]);
        c.args(["--mca", "mca_base_component_path", &component_path()]);
        c.args(["--mca", "mpi_yield_when_idle", "1"]);
        c.args(["--mca", "orte_base_help_aggregate", "0"]);
        if self.tigon {
            c.args(["--mca", "pml", "cm", "--mca", "mtl", "tigon"]);
        }
        for (k, v) in &self.mca {
            c.args(["--mca", k, v]);
        }
        c.args(&self.extra);
        // Ranks 0..ceil(np/n) on the first agent, and so on: one app context per agent.
        let n = self.sockets.len().max(1);
        let per = self.np.div_ceil(n);
        let mut left = self.np;
        for i in 0..n {
            let k = per.min(left);
            if k == 0 {
                break;
            }
            left -= k;
            if i > 0 {
                c.arg(":");
            }
            c.args(["-np", &k.to_string()]);
            if let Some(s) = self.sockets.get(i) {
                c.args(["-x", &format!("TIGON_SOCKET={}", s.display())]);
            }
            for (k, v) in &self.env {
                c.args(["-x", &format!("{k}={v}")]);
            }
            c.arg(program);
            c.args(&self.args);
        }
        run_with_timeout(c, self.timeout)
    }
}

/// Runs `c` in its own process group, killing the group after `timeout`. The run gets a
/// `TMPDIR` of its own, removed afterwards: Open MPI keeps its session directory there
/// (`ompi.<host>.<uid>/`), and a job that ends uncleanly, or one killed at the timeout,
/// leaves entries in it that nothing removes (seen: an empty `jf.*` after the NetPIPE
/// test, `pid.*` of killed runs in the shared /tmp).
pub fn run_with_timeout(mut c: Command, timeout: Duration) -> Run {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let t0 = Instant::now();
    let dir = std::env::temp_dir();
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // Short: Open MPI's PMIx puts a Unix socket under it (at most 107 bytes of path).
    let tmp = dir.join(format!("tmpi-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&tmp).expect("the run's TMPDIR");
    c.env("TMPDIR", &tmp);
    let out_path = dir.join(format!("tigon-mtl-out-{}-{n}", std::process::id()));
    let err_path = out_path.with_extension("err");
    let out_f = std::fs::File::create(&out_path).expect("stdout file");
    let err_f = std::fs::File::create(&err_path).expect("stderr file");
    c.stdin(Stdio::null())
        .stdout(out_f)
        .stderr(err_f)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .process_group(0);
    die_with_parent(&mut c, libc::SIGTERM);
    let mut child = c.spawn().expect("spawning mpirun");
    let pgid = child.id() as i32;
    let mut timed_out = false;
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st.code();
        }
        if t0.elapsed() > timeout {
            timed_out = true;
            // SAFETY: signals the process group we created for this run.
            unsafe { libc::kill(-pgid, libc::SIGTERM) };
            std::thread::sleep(Duration::from_secs(2));
            // SAFETY: as above.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            break child.wait().ok().and_then(|s| s.code());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let read = |p: &Path| {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(p) {
            let _ = f.read_to_string(&mut s);
        }
        let _ = std::fs::remove_file(p);
        s
    };
    let _ = std::fs::remove_dir_all(&tmp);
    Run {
        status,
        stdout: read(&out_path),
        stderr: read(&err_path),
        elapsed: t0.elapsed(),
        timed_out,
    }
}

/// `Output` of a plain command as text.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// One busy loop per CPU (`sh -c 'while :; do :; done'`), as daemons or oversubscribed ranks
/// would hold a node's cores; killed on drop.
pub struct BusyLoops(Vec<Child>);

impl BusyLoops {
    pub fn start() -> BusyLoops {
        let n = std::thread::available_parallelism().map_or(2, |n| n.get());
        BusyLoops(
            (0..n)
                .map(|_| {
                    let mut c = Command::new("sh");
                    c.args(["-c", "while :; do :; done"])
                        .stdin(Stdio::null())
                        .stdout(Stdio::null());
                    die_with_parent(&mut c, libc::SIGKILL);
                    c.spawn().expect("spawning a busy loop")
                })
                .collect(),
        )
    }
}

impl Drop for BusyLoops {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A thread that freezes the agents at random: every 2-20 ms it SIGSTOPs one of them for
/// 1-8 ms (a descheduled engine, as a loaded node sees it), then SIGCONTs it.
pub struct Freezer {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
    pids: Vec<i32>,
}

impl Freezer {
    pub fn start(pids: Vec<i32>, seed: u32) -> Freezer {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (flag, targets) = (stop.clone(), pids.clone());
        let thread = std::thread::spawn(move || {
            let mut x = seed | 1;
            let mut rnd = move |lo: u64, hi: u64| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                lo + x as u64 % (hi - lo + 1)
            };
            let mut stops = 0;
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(rnd(2, 20)));
                let pid = targets[rnd(0, targets.len() as u64 - 1) as usize];
                // SAFETY: signals one of the agents this test started (their pids are ours
                // until they are reaped, which happens after this thread is joined).
                unsafe { libc::kill(pid, libc::SIGSTOP) };
                std::thread::sleep(Duration::from_millis(rnd(1, 8)));
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGCONT) };
                stops += 1;
            }
            stops
        });
        Freezer {
            stop,
            thread: Some(thread),
            pids,
        }
    }

    /// Stops freezing; returns how many times an agent was frozen.
    pub fn finish(mut self) -> u64 {
        self.halt()
    }

    fn halt(&mut self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let n = self.thread.take().map_or(0, |t| t.join().unwrap_or(0));
        for &pid in &self.pids {
            // SAFETY: as above; no agent is left stopped, whatever happened.
            unsafe { libc::kill(pid, libc::SIGCONT) };
        }
        n
    }
}

impl Drop for Freezer {
    fn drop(&mut self) {
        self.halt();
    }
}
