//! Emulated nodes on one machine: one `tigon agent` per node, linked by a memif pair or by
//! veth interfaces between network namespaces (af_packet), with optional wire loss from
//! nftables. Used by `tigon run`, the demo and the benchmarks; everything is torn down on drop.

use crate::cli::say;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tigon_pmd::testbed::{Netns, VethPair, unique_tag};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FabricKind {
    /// A shared-memory wire between two agents (DPDK net_memif).
    Memif,
    /// Real Ethernet frames through the kernel: network namespaces joined by veth (af_packet).
    Veth,
    /// Two subnets joined by a router (a network namespace forwarding IPv4): the nodes
    /// alternate between them, so frames between neighbours cross the router (--wire udp).
    Routed,
}

/// How the agents encapsulate their frames (`tigon agent --wire`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WireKind {
    /// Raw Ethernet, EtherType 0x88b5: one layer-2 domain.
    Ether,
    /// UDP/IPv4: crosses routers and cloud VPCs.
    Udp,
}

/// The emulated subnets: node `i` of a routed fabric is on side `i % 2`.
const SUBNET: [u8; 2] = [1, 2];

/// Node `i`'s `--ip` and `--gateway` with `--wire udp`.
fn node_ip(fabric: FabricKind, i: usize) -> (String, Option<String>) {
    if fabric == FabricKind::Routed {
        let side = SUBNET[i % 2];
        (
            format!("10.71.{side}.{}/24", i / 2 + 1),
            Some(format!("10.71.{side}.254")),
        )
    } else {
        (format!("10.71.1.{}/24", i + 1), None)
    }
}

/// Where the emulated nodes' engines run (`tigon run --layout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LayoutKind {
    /// `dedicated` with a spare core per node for an engine and at least one for the ranks
    /// (2 × nodes CPUs), else `shared`.
    Auto,
    /// One agent process hosts every node's engine in one busy poll loop on CPU 0; the ranks
    /// run on the other CPUs, yielding while they wait.
    Shared,
    /// One agent per node: each busy-polling its own CPU when the machine has a CPU per
    /// node and one more for the ranks; with fewer, the agents share the CPUs with the ranks
    /// and sleep when idle (`--idle yield`).
    Dedicated,
}

/// The layout a cluster runs: its kind, whether the engines busy-poll, and their CPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub kind: LayoutKind,
    pub spin: bool,
    /// The CPU of each node's engine.
    pub lcores: Vec<usize>,
    /// The CPUs the ranks may use (all of them when the engines share the ranks' CPUs).
    pub rank_cpus: Vec<usize>,
}

impl Layout {
    /// The layout `kind` gives `nodes` nodes on `cpus` CPUs.
    pub fn choose(kind: LayoutKind, nodes: usize, cpus: usize) -> Layout {
        let cpus = cpus.max(1);
        let kind = match kind {
            LayoutKind::Auto if cpus >= 2 * nodes => LayoutKind::Dedicated,
            LayoutKind::Auto => LayoutKind::Shared,
            k => k,
        };
        let all: Vec<usize> = (0..cpus).collect();
        match kind {
            LayoutKind::Shared => Layout {
                kind,
                spin: cpus > 1,
                lcores: vec![0; nodes],
                rank_cpus: if cpus > 1 { all[1..].to_vec() } else { all },
            },
            _ if cpus > nodes => Layout {
                kind,
                spin: true,
                lcores: (0..nodes).collect(),
                rank_cpus: all[nodes..].to_vec(),
            },
            _ => Layout {
                kind,
                spin: false,
                lcores: (0..nodes).map(|i| i % cpus).collect(),
                rank_cpus: all,
            },
        }
    }

    /// One line for people: which layout runs, where.
    pub fn describe(&self) -> String {
        let list = |v: &[usize]| v.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
        let idle = if self.spin {
            "busy-polling"
        } else {
            "sleeping when idle"
        };
        match self.kind {
            LayoutKind::Shared => format!(
                "layout shared: one agent runs the {} nodes' engines in one poll loop on CPU {} ({idle}); ranks on CPUs {}",
                self.lcores.len(),
                self.lcores[0],
                list(&self.rank_cpus)
            ),
            _ => format!(
                "layout dedicated: one agent per node, engines on CPUs {} ({idle}); ranks on CPUs {}",
                list(&self.lcores),
                list(&self.rank_cpus)
            ),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ClusterOpts {
    pub nodes: usize,
    pub fabric: FabricKind,
    /// Percent of frames dropped on each node's ingress (veth only).
    pub loss: u32,
    pub dma: bool,
    pub mtu: u16,
    /// The agents' encapsulation.
    pub wire: WireKind,
    /// Extra agent options.
    pub agent_args: Vec<String>,
    /// Where the engines run.
    pub layout: LayoutKind,
    /// memif: the client node's port in zero-copy mode (the wire copies once per frame,
    /// on the server's side).
    pub memif_zero_copy: bool,
}

/// One emulated node.
pub struct Node {
    pub socket: PathBuf,
    pub log: PathBuf,
    /// The CPU its agent's engine runs on.
    pub lcore: usize,
    /// The namespace and nft chain of the `--loss` rule on this node's frames.
    loss: Option<(String, String)>,
    /// The agent process serving it (an index into the cluster's agents).
    agent: usize,
}

impl Node {
    /// Frames the `--loss` rule dropped of those this node sent so far (None without one).
    pub fn dropped(&self) -> Option<u64> {
        let (ns, chain) = self.loss.as_ref()?;
        let out = Command::new("ip")
            .args([
                "netns", "exec", ns, "nft", "list", "chain", "netdev", LOSS_TABLE,
            ])
            .arg(chain)
            .stdin(Stdio::null())
            .output()
            .ok()?;
        // `... counter packets N bytes M drop`
        let text = String::from_utf8_lossy(&out.stdout);
        let mut words = text.split_whitespace();
        words.find(|w| *w == "packets")?;
        words.next()?.parse().ok()
    }
}

enum Wire {
    None,
    /// Held for its Drop: the pair and its namespaces go with the cluster.
    Pair {
        _pair: VethPair,
    },
    /// Held for their Drop: deleting the namespaces deletes the veths and the bridge in them
    /// (and the nft table).
    Bridge {
        _nodes: Vec<Netns>,
        _middle: Netns,
    },
}

/// Running agents and the fabric between them.
pub struct Cluster {
    pub dir: PathBuf,
    pub nodes: Vec<Node>,
    pub layout: Layout,
    /// The agent processes: one per node, or one for all with the shared layout.
    agents: Vec<Option<Child>>,
    /// `tcpdump` writing what crosses the middle of the fabric (`--capture`).
    capture: Option<Child>,
    /// The namespace in the middle (bridge or router), where captures are taken.
    middle: Option<String>,
    /// A router (an address on each bridge) in the middle.
    routed: bool,
    wire: Wire,
}

fn run_quiet(cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    run_quiet(Command::new("ip").args(args))
}

const LOSS_TABLE: &str = "tigon_loss";

/// Agents' `--peer-timeout-ms` unless the caller passes one.
pub const EMULATED_PEER_TIMEOUT_MS: &str = "30000";

/// In namespace `ns`, drops `pct`% of the frames entering each of `ports` at random (this
/// kernel has no netem), counting them: one chain per port, named after it.
fn add_loss(ns: &str, ports: &[String], pct: u32) -> Result<(), String> {
    let mut rules = format!("table netdev {LOSS_TABLE} {{\n");
    for p in ports {
        rules += &format!(
            " chain {p} {{\n  type filter hook ingress device \"{p}\" priority 0; policy accept;\n  numgen random mod 100 < {pct} counter drop\n }}\n"
        );
    }
    rules += "}\n";
    nft(ns, &rules, "loss rules")
}

/// Keeps the kernel of node namespace `ns` out of the frames arriving on `iface`, as for a
/// NIC bound to DPDK: the agent's packet socket still gets each frame (taps run before the
/// netdev ingress hook), then the frame is dropped instead of going up the kernel's IPv4
/// stack (with `--wire udp` that stack looked up a route for every datagram and freed it in
/// a softirq on the engine's CPU: 2 µs more per one-way over veth than raw Ethernet).
fn kernel_off(ns: &str, iface: &str) -> Result<(), String> {
    let rules = format!(
        "table netdev tigon_node {{\n chain in {{\n  type filter hook ingress device \"{iface}\" priority 0; policy drop;\n }}\n}}\n"
    );
    nft(ns, &rules, "rules keeping the kernel out")
}

/// Loads nftables `rules` in namespace `ns`.
fn nft(ns: &str, rules: &str, what: &str) -> Result<(), String> {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = c
        .spawn()
        .map_err(|e| format!("nft: {e} (install nftables)"))?;
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(rules.as_bytes())
        .map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "nft {what} in {ns}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// Best effort: no IPv6 on `iface` in `ns` (no router solicitations or DAD frames reaching
/// the agents).
fn no_ipv6(ns: &str, iface: &str) {
    let _ = run_quiet(
        Command::new("ip")
            .args(["netns", "exec", ns, "sysctl", "-qw"])
            .arg(format!("net.ipv6.conf.{iface}.disable_ipv6=1")),
    );
}

impl Cluster {
    pub fn start(o: &ClusterOpts) -> Result<Cluster, String> {
        if o.nodes < 1 {
            return Err("--nodes must be at least 1".into());
        }
        if o.fabric == FabricKind::Memif && o.nodes > 2 {
            return Err("memif links two nodes; use --fabric veth for more".into());
        }
        if o.loss > 0 && o.fabric == FabricKind::Memif {
            return Err(
                "--loss needs --fabric veth or routed (loss is injected by nftables on the veth)"
                    .into(),
            );
        }
        if o.fabric == FabricKind::Routed && o.wire == WireKind::Ether {
            return Err(
                "--fabric routed needs --wire udp: raw Ethernet frames (EtherType \
                        0x88b5) cannot cross a router"
                    .into(),
            );
        }
        // What earlier runs that were SIGKILLed left (their owners are gone).
        crate::leftovers::sweep();
        let tag = unique_tag();
        let dir = std::env::temp_dir().join(format!("tigon-run-{tag}"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut c = Cluster {
            dir: dir.clone(),
            nodes: Vec::new(),
            layout: Layout::choose(o.layout, o.nodes, cpus),
            agents: Vec::new(),
            capture: None,
            middle: None,
            routed: o.fabric == FabricKind::Routed,
            wire: Wire::None,
        };
        let mut ports: Vec<(String, Option<String>)> = Vec::new();
        // Per node: where its loss rule is (namespace, chain).
        let mut loss: Vec<Option<(String, String)>> = vec![None; o.nodes];
        match o.fabric {
            FabricKind::Memif => {
                let sock = dir.join("memif.sock");
                for i in 0..o.nodes {
                    // The client side has memif's zero-copy mode: the server copies
                    // into and out of the client's own mbufs, the client copies nothing.
                    let role = match (i, o.memif_zero_copy) {
                        (0, _) => "server",
                        (_, true) => "client,zero-copy=yes",
                        (_, false) => "client",
                    };
                    // Device names are per process: distinct, so one agent can host both.
                    ports.push((
                        format!("net_memif{i},role={role},socket={}", sock.display()),
                        None,
                    ));
                }
            }
            FabricKind::Veth if o.nodes <= 2 && o.loss == 0 => {
                let pair = VethPair::new(&tag, o.mtu)?;
                let ends = [
                    (pair.a.clone(), pair.ns_a.name().to_string()),
                    (pair.b.clone(), pair.ns_b.name().to_string()),
                ];
                for (iface, ns) in ends.iter().take(o.nodes) {
                    kernel_off(ns, iface)?;
                    ports.push((af_packet(iface, o.mtu), Some(ns.clone())));
                }
                c.wire = Wire::Pair { _pair: pair };
            }
            FabricKind::Veth | FabricKind::Routed => {
                // The nodes' veths meet on a bridge in a middle namespace, where the loss
                // rules drop frames entering the bridge. Not in the nodes' own namespaces: a
                // packet socket (af_packet) receives a frame before the netdev ingress hook
                // runs, and a frame dropped on egress is sent again from af_packet's transmit
                // ring, so nothing would be lost. In the middle no packet socket listens.
                // Routed: two bridges, one per subnet, and the middle namespace routes
                // between them (its kernel answers ARP for the gateways and forwards).
                let middle = Netns::new(&format!("tgM{tag}"))?;
                let m = middle.name().to_string();
                switch_only(&m);
                let mtu = o.mtu.to_string();
                let routed = o.fabric == FabricKind::Routed;
                let bridges: &[&str] = if routed { &["br0", "br1"] } else { &["br0"] };
                for (k, br) in bridges.iter().enumerate() {
                    ip(&["-n", &m, "link", "add", br, "type", "bridge"])?;
                    no_ipv6(&m, br);
                    ip(&["-n", &m, "link", "set", br, "mtu", &mtu, "up"])?;
                    if routed {
                        let gw = format!("10.71.{}.254/24", SUBNET[k]);
                        ip(&["-n", &m, "addr", "add", &gw, "dev", br])?;
                    }
                }
                if routed {
                    run_quiet(Command::new("ip").args([
                        "netns",
                        "exec",
                        &m,
                        "sysctl",
                        "-qw",
                        "net.ipv4.ip_forward=1",
                    ]))?;
                }
                let mut nss = Vec::new();
                let mut bridge_ports = Vec::new();
                for i in 0..o.nodes {
                    let ns = Netns::new(&format!("tgN{tag}{i}"))?;
                    let (inner, port) = (format!("tvn{tag}{i}"), format!("p{i}"));
                    // Both ends are born in the middle namespace: deleting it deletes them,
                    // also when a step below fails.
                    ip(&[
                        "-n", &m, "link", "add", &inner, "type", "veth", "peer", "name", &port,
                    ])?;
                    ip(&["-n", &m, "link", "set", &inner, "netns", ns.name()])?;
                    no_ipv6(&m, &port);
                    no_ipv6(ns.name(), &inner);
                    ip(&["-n", &m, "link", "set", &port, "mtu", &mtu])?;
                    let br = bridges[i % bridges.len()];
                    ip(&["-n", &m, "link", "set", &port, "master", br, "up"])?;
                    ip(&["-n", ns.name(), "link", "set", &inner, "mtu", &mtu, "up"])?;
                    kernel_off(ns.name(), &inner)?;
                    ports.push((af_packet(&inner, o.mtu), Some(ns.name().to_string())));
                    bridge_ports.push(port);
                    nss.push(ns);
                }
                if o.loss > 0 {
                    add_loss(&m, &bridge_ports, o.loss)?;
                    loss = bridge_ports
                        .into_iter()
                        .map(|p| Some((m.clone(), p)))
                        .collect();
                }
                c.middle = Some(m.clone());
                c.wire = Wire::Bridge {
                    _nodes: nss,
                    _middle: middle,
                };
            }
        }
        let sockets: Vec<PathBuf> = (0..ports.len())
            .map(|i| dir.join(format!("agent{i}.sock")))
            .collect();
        if c.layout.kind == LayoutKind::Shared {
            // One agent, every node in its poll loop; each node's port in its namespace.
            let mut nodes = Vec::new();
            for (i, (port, ns)) in ports.iter().enumerate() {
                let mut n = serde_json::json!({ "port": port, "socket": sockets[i] });
                if let Some(ns) = ns {
                    n["netns"] = ns.as_str().into();
                }
                if o.dma {
                    n["dma"] = format!("dma_skeleton{i}").into();
                }
                if o.wire == WireKind::Udp {
                    let (addr, gw) = node_ip(o.fabric, i);
                    n["wire"] = "udp".into();
                    n["ip"] = addr.into();
                    if let Some(gw) = gw {
                        n["gateway"] = gw.into();
                    }
                }
                nodes.push(n);
            }
            let cfg = dir.join("agent.json");
            std::fs::write(&cfg, serde_json::json!({ "nodes": nodes }).to_string())
                .map_err(|e| format!("{}: {e}", cfg.display()))?;
            let mut args = vec!["--config".to_string(), cfg.display().to_string()];
            args.extend(c.agent_options(o, 0));
            let log = dir.join("agent.log");
            c.spawn_agent(None, &args, &log)?;
            for (i, socket) in sockets.into_iter().enumerate() {
                c.nodes.push(Node {
                    socket,
                    log: log.clone(),
                    lcore: c.layout.lcores[i],
                    loss: loss[i].take(),
                    agent: 0,
                });
            }
            for i in 0..c.nodes.len() {
                c.wait_ready(i)?;
            }
            return Ok(c);
        }
        for (i, ((port, ns), socket)) in ports.into_iter().zip(sockets).enumerate() {
            let log = dir.join(format!("agent{i}.log"));
            let mut args = vec!["--port".to_string(), port, "--socket".into()];
            args.push(socket.display().to_string());
            if o.dma {
                args.extend(["--dma".into(), "dma_skeleton0".into()]);
            }
            if o.wire == WireKind::Udp {
                let (addr, gw) = node_ip(o.fabric, i);
                args.extend(["--wire".into(), "udp".into(), "--ip".into(), addr]);
                if let Some(gw) = gw {
                    args.extend(["--gateway".into(), gw]);
                }
            }
            args.extend(c.agent_options(o, i));
            let agent = c.spawn_agent(ns.as_deref(), &args, &log)?;
            c.nodes.push(Node {
                socket,
                log,
                lcore: c.layout.lcores[i],
                loss: loss[i].take(),
                agent,
            });
            // memif: the server must be listening before the client connects.
            if i == 0 {
                c.wait_ready(0)?;
            }
        }
        for i in 1..c.nodes.len() {
            c.wait_ready(i)?;
        }
        Ok(c)
    }

    /// The options of node `i`'s agent that the layout and `o` decide.
    fn agent_options(&self, o: &ClusterOpts, i: usize) -> Vec<String> {
        let mut v: Vec<String> = vec![
            "--lcore".into(),
            self.layout.lcores[i].to_string(),
            "--idle".into(),
            if self.layout.spin { "spin" } else { "yield" }.into(),
            "--mtu".into(),
            o.mtu.to_string(),
        ];
        // A busy engine on a machine that also builds and tests must keep its core: it makes
        // progress for every rank (a soak whose spinning engine ran at nice 0 moved 4,000
        // messages in 40 s at load 10, against 57,000 at load 6).
        if self.layout.spin && !o.agent_args.iter().any(|a| a.starts_with("--nice")) {
            v.extend(["--nice".into(), "-10".into()]);
        }
        // The emulated nodes share this machine's cores with the ranks and whatever else
        // runs: an agent starved for seconds is not a dead peer (the agent's default
        // timeout, 5 s, aborted jobs on a loaded 2-core machine).
        if !o
            .agent_args
            .iter()
            .any(|a| a.starts_with("--peer-timeout-ms"))
        {
            v.extend(["--peer-timeout-ms".into(), EMULATED_PEER_TIMEOUT_MS.into()]);
        }
        v.extend(o.agent_args.iter().cloned());
        v
    }

    /// Starts `tigon agent ARGS` (inside namespace `ns`), logging to `log`; returns its index.
    fn spawn_agent(
        &mut self,
        ns: Option<&str>,
        args: &[String],
        log: &Path,
    ) -> Result<usize, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let i = self.agents.len();
        let mut cmd = match ns {
            Some(ns) => {
                let mut k = Command::new("ip");
                k.args(["netns", "exec", ns]).arg(&exe);
                k
            }
            None => Command::new(&exe),
        };
        cmd.arg("agent").args(args);
        // An agent dies with the launcher, even one killed by SIGKILL; in a process group
        // of its own, a terminal's Ctrl-C reaches only the launcher, which stops the job,
        // reads the agents' counters and then stops them.
        tigon_shm::process::die_with_parent(&mut cmd, libc::SIGTERM);
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let logf = std::fs::File::create(log).map_err(|e| e.to_string())?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(logf.try_clone().map_err(|e| e.to_string())?)
            .stderr(logf)
            .spawn()
            .map_err(|e| format!("starting agent {i}: {e}"))?;
        self.agents.push(Some(child));
        Ok(i)
    }

    fn wait_ready(&mut self, i: usize) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if tigon_client::agent_stats(&self.nodes[i].socket).is_ok() {
                return Ok(());
            }
            // Ctrl-C (when the caller installed tigon_shm's handler): stop waiting; drop tears
            // down what is up.
            if tigon_shm::signals::terminating() {
                return Err("interrupted while the nodes came up".into());
            }
            let a = self.nodes[i].agent;
            if let Some(ch) = self.agents[a].as_mut()
                && let Ok(Some(st)) = ch.try_wait()
            {
                let log = std::fs::read_to_string(&self.nodes[i].log).unwrap_or_default();
                return Err(format!("agent {a} exited ({st}) before serving:\n{log}"));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "agent {i} did not come up within 30 s (log: {})",
                    self.nodes[i].log.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The agents' process ids.
    pub fn agent_pids(&self) -> Vec<u32> {
        self.agents.iter().flatten().map(Child::id).collect()
    }

    /// The processes a job's clean-up must leave running: the agents and the capture.
    pub fn keep_pids(&self) -> Vec<u32> {
        let mut p = self.agent_pids();
        p.extend(self.capture.as_ref().map(Child::id));
        p
    }

    /// Stops the agents (SIGINT, then SIGKILL after 3 s).
    pub fn stop_agents(&mut self) {
        for ch in self.agents.iter_mut().flatten() {
            // One that has exited (and may have been reaped: its pid is no longer its own)
            // is not signalled.
            if let Ok(None) = ch.try_wait() {
                tigon_shm::process::signal(ch.id(), libc::SIGINT);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        for a in &mut self.agents {
            if let Some(mut ch) = a.take() {
                let mut status = None;
                while Instant::now() < deadline {
                    if let Ok(Some(st)) = ch.try_wait() {
                        status = Some(st);
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                if status.is_none() {
                    let _ = ch.kill();
                    let _ = ch.wait();
                }
                // An agent that crashed (on its way out, after the job had its results) or was
                // killed is still worth seeing: said, not folded into the job's exit code.
                if let Some(sig) = status.and_then(|st| st.signal())
                    && sig != libc::SIGINT
                {
                    say!("tigon: agent {} was ended by signal {sig}", ch.id());
                }
            }
        }
    }
}

/// The middle namespace's bridges forward frames as a switch does, and nothing more: with
/// the `br_netfilter` module loaded, a bridge otherwise hands every IPv4 (and ARP, IPv6)
/// packet it forwards to the iptables hooks (header validation, an skb extension, a route
/// lookup: measured ~1 us per UDP datagram on the veth fabric, which raw Ethernet frames do
/// not pay). The `bridge-nf-call-*` switches are per network namespace where the kernel
/// shows them inside one (as here), so only the middle namespace's are set; where they are
/// not there (module not loaded, or an older kernel with host-wide switches) nothing is
/// written.
fn switch_only(ns: &str) {
    for proto in ["iptables", "ip6tables", "arptables"] {
        let knob = format!("/proc/sys/net/bridge/bridge-nf-call-{proto}");
        let script = format!("[ -e {knob} ] && echo 0 > {knob}; true");
        let _ = run_quiet(Command::new("ip").args(["netns", "exec", ns, "sh", "-c", &script]));
    }
}

fn af_packet(iface: &str, mtu: u16) -> String {
    if mtu > 1500 {
        format!("net_af_packet{iface},iface={iface},framesz=9216,blocksz=36864,framecnt=2048")
    } else {
        format!("net_af_packet{iface},iface={iface}")
    }
}

impl Cluster {
    /// Starts `tcpdump` in the fabric's middle namespace on the first bridge (with a routed
    /// fabric: subnet 1's side of the router, which every frame between neighbours crosses),
    /// writing frame headers (first 256 bytes) to the pcap file `file` until the cluster
    /// stops.
    pub fn capture(&mut self, file: &Path) -> Result<(), String> {
        let Some(m) = &self.middle else {
            return Err(
                "--capture needs a bridge or router in the middle: --fabric veth with \
                        --nodes 3 or more or --loss, or --fabric routed"
                    .into(),
            );
        };
        let mut cmd = Command::new("ip");
        cmd.args([
            "netns",
            "exec",
            m,
            "tcpdump",
            "-q",
            "-U",
            "--immediate-mode",
            "-s",
            "256",
            "-i",
            "br0",
            "-w",
        ])
        .arg(file);
        // Gone with the launcher, even a SIGKILLed one.
        tigon_shm::process::die_with_parent(&mut cmd, libc::SIGTERM);
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("tcpdump: {e} (apt-get install tcpdump)"))?;
        // tcpdump says "listening on br0" once it captures; frames before that are missed.
        let mut err = child.stderr.take().expect("piped");
        let mut seen = Vec::new();
        let mut buf = [0u8; 256];
        use std::io::Read;
        while !String::from_utf8_lossy(&seen).contains("listening on") {
            match err.read(&mut buf) {
                Ok(0) | Err(_) => {
                    let _ = child.wait();
                    return Err(format!(
                        "tcpdump failed: {}",
                        String::from_utf8_lossy(&seen).trim()
                    ));
                }
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
        // "listening on" comes a moment before frames reach the file. With a router (an
        // address on br0), nudge it until a frame of our own shows up: an ARP request for an
        // address nobody holds (it stays in the capture, harmless). On a bare bridge, wait.
        let routed = self.routed;
        let deadline = Instant::now() + Duration::from_secs(2);
        let pcap_header = 24;
        while Instant::now() < deadline {
            if !routed {
                std::thread::sleep(Duration::from_millis(500));
                break;
            }
            let _ = Command::new("ip")
                .args(["netns", "exec", m, "ping", "-c1", "-W1", "-w1", "-I", "br0"])
                .arg(format!("10.71.{}.253", SUBNET[0]))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map(|mut p| {
                    std::thread::sleep(Duration::from_millis(50));
                    let _ = p.kill();
                    let _ = p.wait();
                });
            if std::fs::metadata(file).is_ok_and(|md| md.len() > pcap_header) {
                break;
            }
        }
        self.capture = Some(child);
        Ok(())
    }

    fn stop_capture(&mut self) {
        if let Some(mut c) = self.capture.take() {
            // SIGTERM: tcpdump flushes and closes the file.
            let _ = Command::new("kill").arg(c.id().to_string()).status();
            let _ = c.wait();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop_capture();
        self.stop_agents();
        // The namespaces, and the veths, bridge and nft tables in them.
        self.wire = Wire::None;
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_dir_all(self.shm_dir());
    }
}

/// Where the memory that Open MPI's ranks share on the host goes (`/dev/shm`).
pub const SHM_ROOT: &str = "/dev/shm";

impl Cluster {
    /// The ranks' shared-memory files (Open MPI's vader segments): a directory of the
    /// cluster's own under /dev/shm, named like its scratch directory, so that the files of
    /// ranks killed before they could remove them go with the cluster (and with the next
    /// run's sweep when the launcher itself was killed), not stay in /dev/shm.
    pub fn shm_dir(&self) -> PathBuf {
        Path::new(SHM_ROOT).join(self.dir.file_name().unwrap_or_default())
    }
}

pub const OMPI_COMPONENT_DIR: &str = "/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3";
