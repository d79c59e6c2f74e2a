//! Fixtures of the agent tests: `tigon agent` and `tigon peer` processes (killed and reaped
//! on drop, even when a test panics; an agent's log is printed when a test fails), a scratch
//! directory per test, memif / veth fabrics, and nftables loss rules.
//!
//! Agents pin lcores 0 and 1 and run with `--idle yield` (two cores here are shared with the
//! peers); the tests that start them form the `dpdk-pinned` nextest group (one at a time).
#![allow(dead_code)]

pub mod mpi;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use tigon_pmd::testbed::{Netns, VethPair, unique_tag};

pub const TIGON: &str = env!("CARGO_BIN_EXE_tigon");

/// Sizes every exchange sends: empty, tiny, around the 1500-byte frame, jumbo, around the
/// 32 KiB eager threshold (and channel buffer size), rendezvous up to 16 MiB.
pub const SIZES: &str = "0,1,60,1400,1500,4k,9000,32k,33k,100k,1M,4M,16M";

/// A scratch directory for sockets, logs and peer addresses; removed on drop.
pub struct TestDir {
    pub path: PathBuf,
}

impl TestDir {
    pub fn new(name: &str) -> TestDir {
        let path = std::env::temp_dir().join(format!("tigon-t-{name}-{}", unique_tag()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(path.join("addr")).expect("creating the test directory");
        TestDir { path }
    }
    pub fn join(&self, p: &str) -> PathBuf {
        self.path.join(p)
    }
    /// Where peers publish their addresses.
    pub fn addr(&self) -> PathBuf {
        self.path.join("addr")
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: sending a signal to a child we spawned and have not reaped yet.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

/// Waits for `child` up to `timeout`; `None` if it is still running.
fn wait_for(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            return Some(s);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A running `tigon agent`.
pub struct Agent {
    pub name: String,
    pub socket: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
}

impl Agent {
    /// Starts an agent on `port` pinned to `lcore` (inside `netns` if given) and waits until
    /// it answers on its control socket.
    pub fn start(
        dir: &TestDir,
        name: &str,
        port: &str,
        lcore: u32,
        netns: Option<&str>,
        extra: &[&str],
    ) -> Agent {
        let socket = dir.join(&format!("{name}.sock"));
        let log = dir.join(&format!("{name}.log"));
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, TIGON]);
                c
            }
            None => Command::new(TIGON),
        };
        cmd.arg("agent")
            .args(["--port", port, "--lcore", &lcore.to_string()])
            .arg("--socket")
            .arg(&socket)
            .args(["--idle", "yield"]);
        // Two cores shared by agents, peers and whatever else runs: a descheduled engine
        // must not make its peer give up (no test here waits for that deadline).
        if !extra.contains(&"--peer-timeout-ms") {
            cmd.args(["--peer-timeout-ms", "30000"]);
        }
        cmd.args(extra);
        let out = std::fs::File::create(&log).expect("agent log");
        cmd.stdin(Stdio::null())
            .stdout(out.try_clone().expect("dup"))
            .stderr(out);
        let child = cmd.spawn().expect("spawning tigon agent");
        let mut a = Agent {
            name: name.into(),
            socket,
            log,
            child: Some(child),
        };
        a.wait_ready();
        a
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(s) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "agent {} exited ({s}) before serving:\n{}",
                    self.name,
                    tail(&self.log, 30)
                );
            }
            if tigon_client::agent_stats(&self.socket).is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "agent {} not serving after 60 s:\n{}",
                self.name,
                tail(&self.log, 30)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("agent running").id()
    }

    /// Its counters (`tigon stats`). An engine descheduled for a while answers late (the
    /// control thread then replies `{"error": ...}`): ask again, for up to a minute.
    pub fn stats(&self) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let r = tigon_client::agent_stats(&self.socket);
            match r {
                Ok(v) if v.get("error").is_none() => return v,
                _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
                Ok(v) => panic!("stats of agent {}: {v}\n{}", self.name, self.log_tail()),
                Err(e) => panic!("stats of agent {}: {e}\n{}", self.name, self.log_tail()),
            }
        }
    }

    /// Its counters, or the error, without waiting (for failure reports).
    pub fn stats_now(&self) -> String {
        match tigon_client::agent_stats(&self.socket) {
            Ok(v) => v.to_string(),
            Err(e) => e,
        }
    }

    pub fn log_tail(&self) -> String {
        tail(&self.log, 30)
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// Open file descriptors of the agent process.
    pub fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM; returns the exit status (panics if it does not exit within `timeout`).
    pub fn terminate(&mut self, timeout: Duration) -> ExitStatus {
        let mut c = self.child.take().expect("agent running");
        signal(c.id(), libc::SIGTERM);
        match wait_for(&mut c, timeout) {
            Some(s) => s,
            None => {
                let _ = c.kill();
                let _ = c.wait();
                panic!(
                    "agent {} still running {timeout:?} after SIGTERM:\n{}",
                    self.name,
                    tail(&self.log, 30)
                );
            }
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("--- agent {} log ---\n{}", self.name, tail(&self.log, 40));
        }
    }
}

/// A running `tigon peer`.
pub struct Peer {
    pub name: String,
    out: PathBuf,
    err: PathBuf,
    child: Option<Child>,
}

/// How a peer ended.
#[derive(Debug)]
pub struct Ended {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Peer {
    /// `tigon peer --socket S --dir D --name NAME [--peer P] --rank R MODE...`, run through
    /// `prefix` (e.g. `setpriv ...`) if given.
    pub fn spawn_with(
        prefix: &[&str],
        dir: &TestDir,
        socket: &Path,
        name: &str,
        peer: Option<&str>,
        rank: u32,
        mode: &[&str],
    ) -> Peer {
        let mut cmd = match prefix.split_first() {
            Some((p, rest)) => {
                let mut c = Command::new(p);
                c.args(rest).arg(TIGON);
                c
            }
            None => Command::new(TIGON),
        };
        cmd.arg("peer")
            .arg("--socket")
            .arg(socket)
            .arg("--dir")
            .arg(dir.addr())
            .args(["--name", name, "--rank", &rank.to_string()]);
        if let Some(p) = peer {
            cmd.args(["--peer", p]);
        }
        cmd.args(mode);
        let out = dir.join(&format!("{name}.out"));
        let err = dir.join(&format!("{name}.err"));
        cmd.stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).expect("peer stdout"))
            .stderr(std::fs::File::create(&err).expect("peer stderr"));
        let child = cmd.spawn().expect("spawning tigon peer");
        Peer {
            name: name.into(),
            out,
            err,
            child: Some(child),
        }
    }

    pub fn spawn(
        dir: &TestDir,
        agent: &Agent,
        name: &str,
        peer: Option<&str>,
        rank: u32,
        mode: &[&str],
    ) -> Peer {
        Peer::spawn_with(&[], dir, &agent.socket, name, peer, rank, mode)
    }

    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// Waits until a line of its stdout satisfies `f`; returns that line.
    pub fn wait_line(&mut self, timeout: Duration, f: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(l) = self.stdout().lines().find(|l| f(l)) {
                return l.to_string();
            }
            if let Some(s) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                // It may have printed the line just before exiting.
                if let Some(l) = self.stdout().lines().find(|l| f(l)) {
                    return l.to_string();
                }
                panic!(
                    "peer {} exited ({s}) without the expected line; stdout:\n{}\nstderr:\n{}",
                    self.name,
                    self.stdout(),
                    self.stderr()
                );
            }
            assert!(
                Instant::now() < deadline,
                "peer {}: no expected line after {timeout:?}; stdout:\n{}\nstderr:\n{}",
                self.name,
                self.stdout(),
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Waits for it to exit (killing it and panicking after `timeout`).
    pub fn wait(&mut self, timeout: Duration) -> Ended {
        let mut c = self.child.take().expect("peer running");
        let Some(status) = wait_for(&mut c, timeout) else {
            let _ = c.kill();
            let _ = c.wait();
            panic!(
                "peer {} still running after {timeout:?}; stdout:\n{}\nstderr:\n{}",
                self.name,
                self.stdout(),
                self.stderr()
            );
        };
        Ended {
            status,
            stdout: self.stdout(),
            stderr: self.stderr(),
        }
    }

    /// Waits for a successful exit; returns its stdout.
    pub fn wait_ok(&mut self, timeout: Duration) -> String {
        let e = self.wait(timeout);
        assert!(
            e.status.success(),
            "peer {} failed ({}); stdout:\n{}\nstderr:\n{}",
            self.name,
            e.status,
            e.stdout,
            e.stderr
        );
        e.stdout
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Whether it has exited (it is reaped by [`Peer::wait`]).
    pub fn exited(&mut self) -> bool {
        !matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs an exchange between the two agents of every pair at once (one pair of peers each;
/// pass an agent several times for several clients of it), every message checked byte by
/// byte by the peers. Panics unless every peer sent and received everything.
pub fn exchange(dir: &TestDir, run: &str, pairs: &[(&Agent, &Agent)], extra: &[&str]) {
    let n_sizes = SIZES.split(',').count() as u64;
    let rounds: u64 = extra
        .iter()
        .position(|a| *a == "--rounds")
        .map(|i| extra[i + 1].parse().expect("--rounds N"))
        .unwrap_or(1);
    let mut mode = vec!["exchange", "--sizes", SIZES];
    mode.extend_from_slice(extra);
    let mut peers = Vec::new();
    let mut agents: Vec<&Agent> = Vec::new();
    for (i, (x, y)) in pairs.iter().enumerate() {
        let (a, b) = (format!("{run}-{i}x"), format!("{run}-{i}y"));
        peers.push(Peer::spawn(dir, x, &a, Some(&b), 2 * i as u32, &mode));
        peers.push(Peer::spawn(dir, y, &b, Some(&a), 2 * i as u32 + 1, &mode));
        for z in [*x, *y] {
            if !agents.iter().any(|g| std::ptr::eq(*g, z)) {
                agents.push(z);
            }
        }
    }
    let outs = wait_peers(run, &mut peers, &agents, Duration::from_secs(240));
    for (p, out) in peers.iter().zip(outs) {
        let v: Value = serde_json::from_str(out.trim())
            .unwrap_or_else(|e| panic!("peer {} printed `{out}`: {e}", p.name));
        assert_eq!(v["sent"], n_sizes * rounds, "{}: {v}", p.name);
        assert_eq!(v["received"], n_sizes * rounds, "{}: {v}", p.name);
        println!("exchange {run}: {}: {v}", p.name);
    }
}

/// Waits until every peer has exited successfully (within `timeout` for all); returns their
/// stdouts. When one fails or hangs, prints what the agents were doing, then panics.
pub fn wait_peers(
    what: &str,
    peers: &mut [Peer],
    agents: &[&Agent],
    timeout: Duration,
) -> Vec<String> {
    let deadline = Instant::now() + timeout;
    let mut outs = Vec::new();
    for p in peers.iter_mut() {
        let left = deadline.saturating_duration_since(Instant::now());
        let ended = eventually(left, || p.exited()).then(|| p.wait(Duration::from_secs(5)));
        let Some(Ended { stdout, .. }) = ended.filter(|e| e.status.success()) else {
            for g in agents {
                eprintln!("{what}: agent {} stats: {}", g.name, g.stats_now());
            }
            let (out, err) = (p.stdout(), p.stderr());
            p.kill();
            panic!(
                "{what}: peer {} failed or still running after {timeout:?}; stdout:\n{out}\nstderr:\n{err}",
                p.name
            );
        };
        outs.push(stdout);
    }
    outs
}

/// Two agents joined by a memif pair: `a` (server, lcore 0) and `b` (client, lcore 1). The
/// server starts first: a memif client fails to start without its server's socket.
pub fn memif_pair(dir: &TestDir, extra: &[&str]) -> (Agent, Agent) {
    memif_pair_roles(dir, "server", "client", extra)
}

/// A memif pair whose ports take these `role=` devargs (e.g. `client,zero-copy=yes`).
pub fn memif_pair_roles(
    dir: &TestDir,
    a_role: &str,
    b_role: &str,
    extra: &[&str],
) -> (Agent, Agent) {
    let sock = dir.join("memif.sock");
    let port = |role: &str| format!("net_memif0,role={role},socket={}", sock.display());
    let a = Agent::start(dir, "a", &port(a_role), 0, None, extra);
    let b = Agent::start(dir, "b", &port(b_role), 1, None, extra);
    (a, b)
}

/// A veth pair between two namespaces with an af_packet agent in each: `a` in `ns_a`
/// (lcore 0), `b` in `ns_b` (lcore 1). Drop the agents before the pair.
pub fn veth_pair(dir: &TestDir, extra: &[&str]) -> (VethPair, Agent, Agent) {
    veth_pair_on(dir, "net_af_packet0", extra)
}

/// [`veth_pair`] with the ports of driver `dev` (`net_af_packet0`, `net_af_xdp0`).
pub fn veth_pair_on(dir: &TestDir, dev: &str, extra: &[&str]) -> (VethPair, Agent, Agent) {
    let veth = VethPair::new(&unique_tag(), 1500).expect("netns + veth (needs root and iproute2)");
    let port = |ifc: &str| format!("{dev},iface={ifc}");
    let a = Agent::start(dir, "a", &port(&veth.a), 0, Some(veth.ns_a.name()), extra);
    let b = Agent::start(dir, "b", &port(&veth.b), 1, Some(veth.ns_b.name()), extra);
    (veth, a, b)
}

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn ip(args: &[&str]) -> Result<String, String> {
    run(Command::new("ip").args(args))
}

fn nft(ns: &str, args: &[&str]) -> Result<String, String> {
    run(Command::new("ip")
        .args(["netns", "exec", ns, "nft"])
        .args(args))
}

/// Two namespaces whose veth interfaces (`a` in `ns_a`, `b` in `ns_b`) meet in a third
/// namespace, `ns_m`, on a bridge; nftables there drops `pct`% of the frames entering the
/// bridge from either side, at random (this kernel has no netem).
///
/// Why not a drop rule in the agents' own namespaces: a packet socket (af_packet) receives
/// a frame before the netdev ingress hook runs, so an ingress drop there never reaches it;
/// and an egress drop makes the kernel retry the frame from af_packet's transmit ring
/// (`tpacket_snd` puts a dropped frame back to SEND_REQUEST), so nothing is lost either.
/// In the middle namespace no packet socket listens: what is dropped there is lost.
pub struct LossyWire {
    pub a: String,
    pub b: String,
    ports: [String; 2],
    // Dropped after `drop` has removed the nft table; deleting a namespace deletes the
    // interfaces in it.
    pub ns_a: Netns,
    pub ns_b: Netns,
    pub ns_m: Netns,
}

impl LossyWire {
    pub fn new(pct: u32) -> LossyWire {
        let tag = unique_tag();
        let ns_a = Netns::new(&format!("tgA{tag}")).expect("netns (needs root and iproute2)");
        let ns_b = Netns::new(&format!("tgB{tag}")).expect("netns");
        let ns_m = Netns::new(&format!("tgM{tag}")).expect("netns");
        let w = LossyWire {
            a: format!("tla{tag}"),
            b: format!("tlb{tag}"),
            ports: [format!("tma{tag}"), format!("tmb{tag}")],
            ns_a,
            ns_b,
            ns_m,
        };
        let m = w.ns_m.name().to_string();
        let sysctl = |ns: &str, key: &str| {
            let _ = run(Command::new("ip").args(["netns", "exec", ns, "sysctl", "-qw", key]));
        };
        ip(&["-n", &m, "link", "add", "br0", "type", "bridge"]).expect("bridge");
        sysctl(&m, "net.ipv6.conf.br0.disable_ipv6=1");
        for (end, port, ns) in [(&w.a, &w.ports[0], &w.ns_a), (&w.b, &w.ports[1], &w.ns_b)] {
            // Both ends are born in the middle namespace, so deleting it cleans up even if
            // the move below fails.
            ip(&[
                "-n", &m, "link", "add", end, "type", "veth", "peer", "name", port,
            ])
            .expect("veth");
            ip(&["-n", &m, "link", "set", end, "netns", ns.name()]).expect("veth to netns");
            sysctl(ns.name(), &format!("net.ipv6.conf.{end}.disable_ipv6=1"));
            sysctl(&m, &format!("net.ipv6.conf.{port}.disable_ipv6=1"));
            ip(&["-n", ns.name(), "link", "set", end, "up"]).expect("link up");
            ip(&["-n", &m, "link", "set", port, "master", "br0", "up"]).expect("bridge port");
        }
        ip(&["-n", &m, "link", "set", "br0", "up"]).expect("bridge up");
        if pct > 0 {
            nft(&m, &["add", "table", "netdev", "tg"]).expect("nft table");
            for (i, port) in w.ports.iter().enumerate() {
                let chain = format!("in{i}");
                let hook = format!("{{ type filter hook ingress device {port} priority 0; }}");
                nft(&m, &["add", "chain", "netdev", "tg", &chain, &hook]).expect("nft chain");
                let pct = pct.to_string();
                let rule = [
                    "add", "rule", "netdev", "tg", &chain, "numgen", "random", "mod", "100", "<",
                    &pct, "counter", "drop",
                ];
                nft(&m, &rule).expect("nft rule");
            }
        }
        w
    }

    /// Frames nftables dropped so far (both directions).
    pub fn dropped(&self) -> u64 {
        let text = nft(self.ns_m.name(), &["list", "table", "netdev", "tg"]).unwrap_or_default();
        let words: Vec<&str> = text.split_whitespace().collect();
        words
            .windows(2)
            .filter(|w| w[0] == "packets")
            .filter_map(|w| w[1].parse::<u64>().ok())
            .sum()
    }

    /// An af_packet agent at each end: `a` (lcore 0) and `b` (lcore 1).
    pub fn agents(&self, dir: &TestDir, extra: &[&str]) -> (Agent, Agent) {
        let port = |ifc: &str| format!("net_af_packet0,iface={ifc}");
        let a = Agent::start(dir, "a", &port(&self.a), 0, Some(self.ns_a.name()), extra);
        let b = Agent::start(dir, "b", &port(&self.b), 1, Some(self.ns_b.name()), extra);
        (a, b)
    }
}

impl Drop for LossyWire {
    fn drop(&mut self) {
        let _ = nft(self.ns_m.name(), &["delete", "table", "netdev", "tg"]);
    }
}

/// `v` at a JSON pointer such as `/serve/clients_reclaimed`, as a number.
pub fn num(v: &Value, ptr: &str) -> u64 {
    v.pointer(ptr)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("no number at {ptr} in {v}"))
}

/// Polls `f` until it holds or `timeout` passes; returns whether it held.
pub fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
