//! Emulated nodes on one machine: one `tigon agent` per node, linked by a memif pair or by
//! veth interfaces between network namespaces (af_packet), with optional wire loss from
//! nftables. Used by `tigon run`, the demo and the benchmarks; everything is torn down on drop.

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
}

#[derive(Debug, Clone)]
pub struct ClusterOpts {
    pub nodes: usize,
    pub fabric: FabricKind,
    /// Percent of frames dropped on each node's ingress (veth only).
    pub loss: u32,
    pub dma: bool,
    pub mtu: u16,
    /// Extra agent options.
    pub agent_args: Vec<String>,
}

/// One emulated node.
pub struct Node {
    pub socket: PathBuf,
    pub log: PathBuf,
    /// The network namespace the node's agent runs in (veth).
    pub netns: Option<String>,
    /// Whether an nft loss rule drops frames entering this node.
    lossy: bool,
    agent: Option<Child>,
}

impl Node {
    /// Frames the `--loss` rule dropped on this node's ingress so far (None without one).
    pub fn dropped(&self) -> Option<u64> {
        let ns = self.netns.as_deref().filter(|_| self.lossy)?;
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                ns,
                "nft",
                "list",
                "table",
                "netdev",
                "tigon_loss",
            ])
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
    Bridge {
        bridge: String,
        ns: Vec<Netns>,
    },
}

/// Running agents and the fabric between them.
pub struct Cluster {
    pub dir: PathBuf,
    pub nodes: Vec<Node>,
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

/// Drops `pct`% of the frames entering `iface` in namespace `ns` (this kernel has no netem).
fn add_loss(ns: &str, iface: &str, pct: u32) -> Result<(), String> {
    let rules = format!(
        "table netdev tigon_loss {{\n chain ingress {{\n  type filter hook ingress device \"{iface}\" priority 0; policy accept;\n  numgen random mod 100 < {pct} counter drop\n }}\n}}\n"
    );
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
            "nft loss rule on {iface}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

impl Cluster {
    pub fn start(o: &ClusterOpts) -> Result<Cluster, String> {
        if o.nodes < 1 {
            return Err("--nodes must be at least 1".into());
        }
        if o.fabric == FabricKind::Memif && o.nodes > 2 {
            return Err("memif links two nodes; use --fabric veth for more".into());
        }
        if o.loss > 0 && o.fabric != FabricKind::Veth {
            return Err(
                "--loss needs --fabric veth (loss is injected by nftables on the veth)".into(),
            );
        }
        let tag = unique_tag();
        let dir = std::env::temp_dir().join(format!("tigon-run-{tag}"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut c = Cluster {
            dir: dir.clone(),
            nodes: Vec::new(),
            wire: Wire::None,
        };
        let mut ports: Vec<(String, Option<String>)> = Vec::new();
        match o.fabric {
            FabricKind::Memif => {
                let sock = dir.join("memif.sock");
                for i in 0..o.nodes {
                    let role = if i == 0 { "server" } else { "client" };
                    ports.push((
                        format!("net_memif0,role={role},socket={}", sock.display()),
                        None,
                    ));
                }
            }
            FabricKind::Veth if o.nodes <= 2 => {
                let pair = VethPair::new(&tag, o.mtu)?;
                let ends = [
                    (pair.a.clone(), pair.ns_a.name().to_string()),
                    (pair.b.clone(), pair.ns_b.name().to_string()),
                ];
                for (iface, ns) in ends.iter().take(o.nodes) {
                    ports.push((af_packet(iface, o.mtu), Some(ns.clone())));
                    if o.loss > 0 {
                        add_loss(ns, iface, o.loss)?;
                    }
                }
                c.wire = Wire::Pair { _pair: pair };
            }
            FabricKind::Veth => {
                let bridge = format!("tgbr{tag}");
                ip(&["link", "add", &bridge, "type", "bridge"])?;
                ip(&["link", "set", &bridge, "mtu", &o.mtu.to_string(), "up"])?;
                let mut nss = Vec::new();
                c.wire = Wire::Bridge {
                    bridge: bridge.clone(),
                    ns: Vec::new(),
                };
                for i in 0..o.nodes {
                    let ns = Netns::new(&format!("tgN{tag}{i}"))?;
                    let (inner, outer) = (format!("tvn{tag}{i}"), format!("tvh{tag}{i}"));
                    ip(&[
                        "link", "add", &inner, "type", "veth", "peer", "name", &outer,
                    ])?;
                    ip(&["link", "set", &inner, "netns", ns.name()])?;
                    ip(&[
                        "link",
                        "set",
                        &outer,
                        "master",
                        &bridge,
                        "mtu",
                        &o.mtu.to_string(),
                        "up",
                    ])?;
                    ip(&[
                        "-n",
                        ns.name(),
                        "link",
                        "set",
                        &inner,
                        "mtu",
                        &o.mtu.to_string(),
                        "up",
                    ])?;
                    if o.loss > 0 {
                        add_loss(ns.name(), &inner, o.loss)?;
                    }
                    ports.push((af_packet(&inner, o.mtu), Some(ns.name().to_string())));
                    nss.push(ns);
                }
                c.wire = Wire::Bridge { bridge, ns: nss };
            }
        }
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        for (i, (port, ns)) in ports.into_iter().enumerate() {
            let socket = dir.join(format!("agent{i}.sock"));
            let log = dir.join(format!("agent{i}.log"));
            let mut cmd = match &ns {
                Some(ns) => {
                    let mut k = Command::new("ip");
                    k.args(["netns", "exec", ns]).arg(&exe);
                    k
                }
                None => Command::new(&exe),
            };
            cmd.arg("agent")
                .args([
                    "--port",
                    &port,
                    "--lcore",
                    &(i % cpus).to_string(),
                    "--idle",
                    "yield",
                    "--mtu",
                    &o.mtu.to_string(),
                ])
                .arg("--socket")
                .arg(&socket);
            if o.dma {
                cmd.args(["--dma", "dma_skeleton0"]);
            }
            cmd.args(&o.agent_args);
            let logf = std::fs::File::create(&log).map_err(|e| e.to_string())?;
            let child = cmd
                .stdin(Stdio::null())
                .stdout(logf.try_clone().map_err(|e| e.to_string())?)
                .stderr(logf)
                .spawn()
                .map_err(|e| format!("starting agent {i}: {e}"))?;
            c.nodes.push(Node {
                socket,
                log,
                lossy: ns.is_some() && o.loss > 0,
                netns: ns,
                agent: Some(child),
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
            if let Some(ch) = self.nodes[i].agent.as_mut()
                && let Ok(Some(st)) = ch.try_wait()
            {
                let log = std::fs::read_to_string(&self.nodes[i].log).unwrap_or_default();
                return Err(format!("agent {i} exited ({st}) before serving:\n{log}"));
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

    /// Stops the agents (SIGINT, then SIGKILL after 3 s).
    pub fn stop_agents(&mut self) {
        for n in &mut self.nodes {
            if let Some(ch) = &n.agent {
                let _ = Command::new("kill")
                    .args(["-INT", &ch.id().to_string()])
                    .status();
            }
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        for n in &mut self.nodes {
            if let Some(mut ch) = n.agent.take() {
                while Instant::now() < deadline {
                    if let Ok(Some(_)) = ch.try_wait() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                let _ = ch.kill();
                let _ = ch.wait();
            }
        }
    }
}

fn af_packet(iface: &str, mtu: u16) -> String {
    if mtu > 1500 {
        format!("net_af_packet{iface},iface={iface},framesz=9216,blocksz=36864,framecnt=2048")
    } else {
        format!("net_af_packet{iface},iface={iface}")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop_agents();
        if let Wire::Bridge { bridge, ns } = std::mem::replace(&mut self.wire, Wire::None) {
            drop(ns);
            let _ = ip(&["link", "del", &bridge]);
        }
        // A pair's namespaces (and the nft tables in them) go with it.
        self.wire = Wire::None;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Where `mca_mtl_tigon.so` lives: $TIGON_MTL_DIR, next to this executable (or in its
/// `ompi/` subdirectory), or Open MPI's own component directory. A cargo build leaves
/// `libmca_mtl_tigon.so` next to `tigon`: then a directory under `scratch` gets a link with
/// the name Open MPI looks for.
pub fn mtl_dir(scratch: &Path) -> Option<PathBuf> {
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf));
    let mut c: Vec<PathBuf> = Vec::new();
    if let Some(d) = std::env::var_os("TIGON_MTL_DIR") {
        c.push(d.into());
    }
    if let Some(d) = &exe_dir {
        c.push(d.join("ompi"));
        c.push(d.clone());
    }
    c.push(OMPI_COMPONENT_DIR.into());
    if let Some(d) = c.into_iter().find(|d| d.join("mca_mtl_tigon.so").exists()) {
        return Some(d);
    }
    let lib = exe_dir?.join("libmca_mtl_tigon.so");
    if !lib.exists() {
        return None;
    }
    let dir = scratch.join("ompi");
    std::fs::create_dir_all(&dir).ok()?;
    std::os::unix::fs::symlink(&lib, dir.join("mca_mtl_tigon.so")).ok()?;
    Some(dir)
}

pub const OMPI_COMPONENT_DIR: &str = "/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3";
