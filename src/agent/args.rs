//! `tigon agent`'s options (command line, or a JSON file), and the settings checked from them.

use clap::Args;
use serde::Deserialize;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;
use tigon_engine::Config;
use tigon_engine::channel::Geometry;
use tigon_engine::net::encap::UdpConfig;

#[derive(Args, Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct AgentArgs {
    /// The NIC: a PCI address, or a vdev such as `net_memif0,role=server,socket=/run/x.sock`,
    /// `net_af_packet0,iface=eth1`, `net_af_xdp0,iface=eth1`. Required.
    #[arg(long)]
    pub port: Option<String>,
    /// The CPU the engine's poll loop owns, one of this machine's [default: 0].
    #[arg(long, allow_negative_numbers = true)]
    pub lcore: Option<i64>,
    /// Control socket clients attach to; its directory must exist [default: $TIGON_SOCKET,
    /// else /run/tigon/agent.sock].
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// MTU of the port: 1500 or 9000 [default: 1500].
    #[arg(long, allow_negative_numbers = true)]
    pub mtu: Option<i64>,
    /// A dmadev for copy offload: `dma_skeleton0`, or an IOAT / DSA PCI address [default:
    /// none, the engine copies].
    #[arg(long)]
    pub dma: Option<String>,
    /// Received payloads at least this long go through the dmadev, in bytes [default: 4096;
    /// `tigon bench dma` measures the crossover].
    #[arg(long, allow_negative_numbers = true)]
    pub dma_threshold: Option<i64>,
    /// When there is no work: `spin` (busy-poll, for a dedicated core) or `yield` (shared
    /// machines) [default: spin].
    #[arg(long)]
    pub idle: Option<String>,
    /// Uids allowed to attach (comma-separated) [default: the agent's own uid].
    #[arg(long, value_delimiter = ',')]
    pub allow_uid: Option<Vec<u32>>,
    /// Messages longer than this go by rendezvous, in bytes, 0 to 262144 [default: 32768].
    #[arg(long, allow_negative_numbers = true)]
    pub rndv_threshold: Option<i64>,
    /// Requests each rank may have outstanding at once (its channel's descriptors: 128 bytes
    /// of shared memory each), 64 to 65536 [default: 16384]. A rank past it waits for one of
    /// them to complete, and fails after a minute if none does.
    #[arg(long, allow_negative_numbers = true)]
    pub channel_requests: Option<i64>,
    /// Ranks this node's agent serves at once, 1 to 65536 [default: 1024]. One more is
    /// refused at attach (its MPI_Init fails, naming this option): each rank's channel is
    /// shared memory (~10 MiB at the defaults), which a runaway launcher would otherwise take
    /// until the machine has none.
    #[arg(long, allow_negative_numbers = true)]
    pub max_clients: Option<i64>,
    /// An unreachable peer fails operations after this long, in milliseconds, 100 to 3600000
    /// [default: 5000].
    #[arg(long, allow_negative_numbers = true)]
    pub peer_timeout_ms: Option<i64>,
    /// A session with a peer node idle this long, with nothing in flight, is retired (its
    /// state freed; the next message sets up a new one), in milliseconds: 0 (never) or more
    /// than the peer timeout, at most 86400000 [default: 60000, or twice the peer timeout
    /// if that is longer].
    #[arg(long, allow_negative_numbers = true)]
    pub session_idle_ms: Option<i64>,
    /// While the engine is busy, an ack owed to a peer waits up to this long for more of its
    /// frames or a frame to it (one ack for several messages), in microseconds, 0 to 50000;
    /// advertised to peers at connect, whose retransmit timeouts allow for it [default: 5000].
    #[arg(long, allow_negative_numbers = true)]
    pub max_ack_delay_us: Option<i64>,
    /// The same while thousands of peers owe an ack at once (each sending less often than
    /// the delay above, one ack per message otherwise), in microseconds, 0 to 50000; told to
    /// each peer in an ack before it applies; never shorter than --max-ack-delay-us
    /// [default: 40000].
    #[arg(long, allow_negative_numbers = true)]
    pub max_ack_delay_busy_us: Option<i64>,
    /// With `--idle yield`: keep polling this long after the last work before sleeping, in
    /// microseconds, 0 to 1000000 [default: 0: the polling is charged to the ranks sharing
    /// the core].
    #[arg(long, allow_negative_numbers = true)]
    pub idle_spin_us: Option<i64>,
    /// With `--idle yield`, on a link that cannot wake a sleeping engine (memif): the longest
    /// sleep while operations are in flight or within a second of the last work, in
    /// microseconds, 1 to 10000 [default: 50]. af_packet and client requests wake it at once.
    #[arg(long, allow_negative_numbers = true)]
    pub idle_poll_us: Option<i64>,
    /// CPU-latency QoS request held while the agent runs, in microseconds, or `off`
    /// (/dev/cpu_dma_latency; `0` keeps idle cores polling so wake-ups take microseconds)
    /// [default: 0 with `--idle yield`, off with `spin`].
    #[arg(long, allow_hyphen_values = true)]
    pub cpu_latency: Option<String>,
    /// Nice value of the engine thread, -20 to 19 [default: -10 with `--idle yield` (the
    /// engine makes progress for every rank sharing its core); with `spin` only when given:
    /// an engine spinning on a core others also use (an emulation on a small machine) keeps
    /// its share of it].
    #[arg(long, allow_hyphen_values = true)]
    pub nice: Option<i32>,
    /// Lend the frames of a large message to the receiving rank while it waits for it (it
    /// copies them into its buffer on its own core: the engine core copies a received byte
    /// once, not twice); off: the engine writes them into the rank's memory
    /// (`process_vm_writev`) [default: off: on this 2-core VM, 4 MiB NetPIPE, lending won
    /// in some runs and lost in others (43 against 53-62 Gb/s written by the engine one day,
    /// 25-29 against 22-26 another), and lowered availability].
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub lend_large: Option<bool>,
    /// Checksum every frame's payload in software, not only its headers [default: off: the
    /// link checks frames itself (Ethernet's FCS; memif and veth are memory)].
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub payload_checksum: Option<bool>,
    /// Encapsulation: `ether` (raw Ethernet, EtherType 0x88b5: one layer-2 domain) or `udp`
    /// (UDP/IPv4: crosses routers and cloud VPCs; needs --ip). Every agent of a job must use
    /// the same [default: ether].
    #[arg(long)]
    pub wire: Option<String>,
    /// With `--wire udp`: this agent's IPv4 address and prefix, e.g. 10.1.0.5/24 [default:
    /// none; required with --wire udp].
    #[arg(long)]
    pub ip: Option<String>,
    /// With `--wire udp`: the router for peers outside the --ip subnet [default: none, such
    /// peers are unreachable].
    #[arg(long)]
    pub gateway: Option<String>,
    /// With `--wire udp`: the UDP port of every agent of the cluster, 1 to 65535 (open it in
    /// firewalls and security groups) [default: 7470].
    #[arg(long, allow_negative_numbers = true)]
    pub udp_port: Option<i64>,
    /// With `--wire udp`: receive queues on the port, 1 to 16, spread by RSS over UDP/IPv4
    /// (the hash covers the UDP source port, which senders vary per endpoint pair, so each
    /// pair stays on one queue, in order); the engine polls them all. Where the driver offers
    /// no RSS the port gets one queue, and `tigon stats` says so [default: 4 with --wire udp,
    /// 1 with --wire ether].
    #[arg(long, allow_negative_numbers = true)]
    pub rx_queues: Option<i64>,
    /// Run DPDK without hugepages (also when TIGON_NO_HUGE=1) [default: off].
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub no_huge: Option<bool>,
    /// Extra EAL arguments, passed through.
    #[arg(long, allow_hyphen_values = true)]
    pub eal: Option<Vec<String>>,
    /// Open the port inside this network namespace (a name of `ip netns`): for emulated nodes
    /// on veth in namespaces [default: the agent's own namespace].
    #[arg(long)]
    pub netns: Option<String>,
    /// Host one more node's engine in this agent's poll loop (repeatable): a JSON object of
    /// the per-node options (port, socket, mtu, wire, ip, ...), e.g. --node
    /// '{"port":"net_memif1,role=client,socket=/tmp/m.sock","socket":"/tmp/b.sock"}'. Each
    /// node gets its own port, address, control socket, pools and stats; all share the
    /// --lcore. Unset options come from the top level [default: one node, the top level's].
    #[arg(long = "node", value_name = "JSON")]
    #[serde(skip)]
    pub node: Vec<String>,
    /// In the --config file: the nodes this agent hosts, as a list of such objects.
    #[arg(skip)]
    pub nodes: Option<Vec<AgentArgs>>,
    /// A JSON file with any of these options, keys as the option names without `--`
    /// (command-line options win) [default: none].
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
}

impl AgentArgs {
    /// Fills what the command line left out from the `--config` file.
    pub fn merge(mut self) -> Result<AgentArgs, String> {
        let Some(path) = self.config.clone() else {
            return Ok(self);
        };
        let f = read_config(&path)?;
        self.fill_from(&f);
        Ok(self)
    }
}

/// The most a configuration file may hold: a few hundred bytes in practice.
const CONFIG_MAX: u64 = 1 << 20;

/// Reads a `--config` file: a regular file of at most [`CONFIG_MAX`] bytes holding one JSON
/// object of options. Before, any file was read whole: `/dev/zero` until memory ran out, a
/// FIFO forever, and a top level that was not an object got serde's positional messages
/// ("expected struct AgentArgs with 30 elements"; helper-found).
pub fn read_config(path: &std::path::Path) -> Result<AgentArgs, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    // Opened without blocking: a FIFO with no writer would hold up the open itself.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| at(&e))?;
    let meta = f.metadata().map_err(|e| at(&e))?;
    if !meta.is_file() {
        return Err(at(
            &"not a regular file: name a JSON file of `tigon agent` options",
        ));
    }
    if meta.len() > CONFIG_MAX {
        return Err(at(&format!(
            "{} bytes, more than a configuration file holds (at most {CONFIG_MAX})",
            meta.len()
        )));
    }
    let mut text = String::new();
    f.take(CONFIG_MAX + 1)
        .read_to_string(&mut text)
        .map_err(|e| at(&e))?;
    let object = serde_json::from_str::<serde_json::Value>(&text).map(|v| v.is_object());
    if let Ok(false) = object {
        return Err(at(
            &"the file must hold one JSON object of `tigon agent` options, keys \
             as the option names without `--` (e.g. {\"port\": \"0000:3b:00.0\", \"mtu\": 9000})",
        ));
    }
    serde_json::from_str(&text).map_err(|e| at(&e))
}

impl AgentArgs {
    /// Takes every option `self` leaves unset from `f`.
    pub(super) fn fill_from(&mut self, f: &AgentArgs) {
        macro_rules! fill {
            ($($f:ident),*) => { $( if self.$f.is_none() { self.$f = f.$f.clone(); } )* };
        }
        fill!(
            port,
            lcore,
            socket,
            mtu,
            dma,
            dma_threshold,
            idle,
            allow_uid,
            rndv_threshold,
            channel_requests,
            max_clients,
            peer_timeout_ms,
            session_idle_ms,
            max_ack_delay_us,
            max_ack_delay_busy_us,
            idle_spin_us,
            idle_poll_us,
            cpu_latency,
            nice,
            lend_large,
            payload_checksum,
            wire,
            ip,
            gateway,
            udp_port,
            no_huge,
            eal,
            netns,
            nodes
        );
    }
}

/// The agent's settings, checked, with their defaults: what `tigon agent` runs with and what
/// `tigon doctor` checks a configuration against (one check for both).
pub struct Settings {
    /// The port's devargs.
    pub devargs: String,
    /// The network namespace the port is opened in (None: the agent's own).
    pub netns: Option<String>,
    pub socket: PathBuf,
    /// The engine's CPU.
    pub lcore: u32,
    pub mtu: u16,
    /// `--idle spin` (else `yield`).
    pub spin: bool,
    pub allow_uids: Vec<u32>,
    pub no_huge: bool,
    pub engine: Config,
    /// `--wire udp`: the agent's place on the IP network (None: raw Ethernet).
    pub udp: Option<UdpConfig>,
    /// Receive queues asked of the port (RSS over UDP/IPv4 when more than one).
    pub rx_queues: u16,
    /// Of every client's channel.
    pub geometry: Geometry,
    /// `--max-clients`: ranks served at once.
    pub max_clients: usize,
    /// Payloads the dmadev copies (if there is one) are at least this long.
    pub dma_threshold: usize,
    /// `--lend-large`: frames of large messages may be lent to ranks that wait for them.
    pub lend_large: bool,
    /// With `--idle yield`: polling after work, and the longest sleep on a link that cannot
    /// wake the engine.
    pub idle_spin: Duration,
    pub idle_poll: Duration,
    /// The CPU-latency request to hold, in microseconds (None: none).
    pub cpu_latency_us: Option<i32>,
    /// The engine thread's nice value: always with `--idle yield`, with `spin` only when
    /// given (None: leave it).
    pub nice: Option<i32>,
}

impl Settings {
    /// The longest frame: the MTU plus the Ethernet header.
    pub fn max_frame(&self) -> usize {
        self.mtu as usize + 14
    }
}

/// The UDP/IPv4 settings of `--wire udp` (None with `--wire ether`), checked.
fn udp_settings(a: &AgentArgs) -> Result<Option<UdpConfig>, String> {
    let udp_only = |opt: &str| {
        Err(format!(
            "--{opt} applies to --wire udp only (this agent runs --wire ether: raw Ethernet)"
        ))
    };
    match a.wire.as_deref().unwrap_or("ether") {
        "ether" => {
            return match (&a.ip, &a.gateway, a.udp_port) {
                (Some(_), ..) => udp_only("ip"),
                (_, Some(_), _) => udp_only("gateway"),
                (.., Some(_)) => udp_only("udp-port"),
                _ => Ok(None),
            };
        }
        "udp" => {}
        o => {
            return bad(
                "wire",
                o,
                "use ether (raw Ethernet, one layer-2 domain) or udp (UDP/IPv4, routable)",
            );
        }
    }
    let Some(ip) = a.ip.as_deref() else {
        return Err(
            "--wire udp needs --ip: this agent's IPv4 address and prefix, e.g. \
                    --ip 10.1.0.5/24"
                .into(),
        );
    };
    let (addr, prefix) = ip.split_once('/').unwrap_or((ip, "32"));
    let addr: Ipv4Addr = addr
        .parse()
        .or_else(|_| bad("ip", ip, "an IPv4 address and prefix, e.g. 10.1.0.5/24"))?;
    let prefix: u8 = match prefix.parse() {
        Ok(p) if p <= 32 => p,
        _ => return bad("ip", ip, "a prefix length of 0 to 32 after the /, e.g. /24"),
    };
    if addr.is_unspecified() || addr.is_broadcast() || addr.is_multicast() {
        return bad("ip", ip, "a unicast address of this node");
    }
    let port = in_range(
        "udp-port",
        a.udp_port.unwrap_or(tigon_engine::net::DEFAULT_PORT.into()),
        1,
        65_535,
        "",
    )? as u16;
    let mut c = UdpConfig::new(addr, prefix, tigon_engine::MacAddr::default());
    c.port = port;
    if let Some(g) = a.gateway.as_deref() {
        let g: Ipv4Addr = g
            .parse()
            .or_else(|_| bad("gateway", g, "an IPv4 address on the --ip subnet"))?;
        let probe = UdpConfig { gateway: None, ..c };
        if probe.next_hop(g).is_none() {
            return bad(
                "gateway",
                g,
                &format!("an address on this agent's subnet ({ip}): the router's"),
            );
        }
        c.gateway = Some(g);
    }
    Ok(Some(c))
}

/// Below this many bytes a CPU copy beats a dmadev round trip (see `tigon bench dma`).
pub const DEFAULT_DMA_THRESHOLD: usize = 4096;
/// Requests a rank may have outstanding at once, by default: programs that post thousands of
/// receives ahead (a linear all-to-all over thousands of ranks) stay within it. It was 4,096,
/// which a job of 4,096 receives posted before a barrier hung on.
pub const DEFAULT_CHANNEL_REQUESTS: u32 = 16_384;
/// Ranks a node's agent serves at once unless `--max-clients` says otherwise.
pub const DEFAULT_MAX_CLIENTS: usize = 1024;
/// The largest `--rndv-threshold`: every client's channel holds 256 buffers of this size.
pub const MAX_RNDV_THRESHOLD: usize = 256 << 10;

/// `Err` with one line naming the option, its value, what is allowed and how to fix it.
fn bad<T>(opt: &str, value: impl std::fmt::Display, allowed: &str) -> Result<T, String> {
    Err(format!(
        "--{opt} {value}: {allowed} (on the command line, or \"{opt}\" in the --config file)"
    ))
}

/// Receive queues with `--wire udp` when not given: enough for RSS to spread the flows of a
/// node's ranks where the driver offers it.
const DEFAULT_UDP_RX_QUEUES: u16 = 4;
/// The most receive queues one engine polls.
const MAX_RX_QUEUES: u16 = 16;

/// `value` if it lies in `lo..=hi`, else the error naming both.
fn in_range<T: PartialOrd + std::fmt::Display + Copy>(
    opt: &str,
    value: T,
    lo: T,
    hi: T,
    unit: &str,
) -> Result<T, String> {
    if value < lo || value > hi {
        return bad(opt, value, &format!("use {lo} to {hi}{unit}"));
    }
    Ok(value)
}

/// The CPUs this process may run on (`Cpus_allowed_list` of /proc/self/status), e.g. 0-1.
pub fn allowed_cpus() -> (Vec<u32>, String) {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let list = text
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(str::trim)
        .unwrap_or("")
        .to_string();
    let mut cpus = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(lo), Ok(hi)) = (lo.parse::<u32>(), hi.parse::<u32>()) {
            cpus.extend(lo..=hi);
        }
    }
    (cpus, list)
}

/// A dmadev's name: a software vdev (`dma_skeleton0`) or a PCI address.
fn is_dmadev(d: &str) -> bool {
    let name = d.split(',').next().unwrap_or("");
    name.starts_with("dma_") || tigon_pmd::pci_address(name).is_some()
}

impl AgentArgs {
    /// The settings these options make, or what is wrong with them (the first problem, one
    /// line). Nothing is created or started: `tigon doctor` calls it on a configuration file.
    pub fn settings(&self) -> Result<Settings, String> {
        let a = self;
        let devargs = match a.port.as_deref().map(str::trim) {
            Some(p) if !p.is_empty() => p.to_string(),
            Some(_) => return bad("port", "\"\"", "a PCI address or a vdev's devargs"),
            None => {
                return Err(
                    "--port is required: a PCI address (0000:3b:00.0) or a vdev's \
                            devargs (net_af_packet0,iface=eth1)"
                        .into(),
                );
            }
        };
        let socket = a
            .socket
            .clone()
            .unwrap_or_else(tigon_client::default_socket);
        // The default's directory (/run/tigon) is the agent's to make; any other must exist:
        // the agent does not create directories it would then leave behind.
        let dir = socket.parent().filter(|d| !d.as_os_str().is_empty());
        if let Some(dir) = dir
            && !dir.is_dir()
            && socket != std::path::Path::new(tigon_client::DEFAULT_SOCKET)
        {
            return bad(
                "socket",
                socket.display(),
                &format!(
                    "directory {} does not exist: create it (mkdir -p {}) or use the default {}",
                    dir.display(),
                    dir.display(),
                    tigon_client::DEFAULT_SOCKET
                ),
            );
        }
        let lcore_arg = a.lcore.unwrap_or(0);
        let (cpus, list) = allowed_cpus();
        let lcore = u32::try_from(lcore_arg).unwrap_or(u32::MAX);
        if lcore_arg < 0 || (!cpus.is_empty() && !cpus.contains(&lcore)) {
            return bad(
                "lcore",
                lcore_arg,
                &format!(
                    "this machine's CPUs are {list}: pick one of them (ideally one no rank runs on)"
                ),
            );
        }
        let mtu = match a.mtu.unwrap_or(1500) {
            m @ (1500 | 9000) => m as u16,
            m => return bad("mtu", m, "use 1500, or 9000 for jumbo frames"),
        };
        let spin = match a.idle.as_deref().unwrap_or("spin") {
            "spin" => true,
            "yield" => false,
            o => {
                return bad(
                    "idle",
                    o,
                    "use spin (a core of its own) or yield (shared cores)",
                );
            }
        };
        if let Some(d) = &a.dma
            && !is_dmadev(d)
        {
            return bad(
                "dma",
                d,
                "a dmadev: dma_skeleton0, or a copy engine's PCI address (dpdk-devbind.py --status-dev dma)",
            );
        }
        let dma_threshold = a.dma_threshold.unwrap_or(DEFAULT_DMA_THRESHOLD as i64);
        let dma_threshold =
            in_range("dma-threshold", dma_threshold, 1, 1 << 30, " bytes")? as usize;
        let allow = a.allow_uid.clone().unwrap_or_else(|| {
            vec![
                std::fs::metadata("/proc/self")
                    .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
                    .unwrap_or(0),
            ]
        });
        if allow.is_empty() {
            return bad(
                "allow-uid",
                "[]",
                "at least one uid (e.g. --allow-uid 0,1000)",
            );
        }
        let no_huge = a.no_huge.unwrap_or(false)
            || std::env::var_os(tigon_pmd::NO_HUGE_ENV).is_some_and(|v| v == "1");
        let mut cfg = Config {
            max_frame: mtu as usize + 14,
            ..Config::default()
        };
        if let Some(t) = a.rndv_threshold {
            cfg.rndv_threshold =
                in_range("rndv-threshold", t, 0, MAX_RNDV_THRESHOLD as i64, " bytes")? as usize;
        }
        if !spin {
            // Sharing cores means being descheduled for a tick now and then: do not mistake
            // that for loss.
            cfg.rto_min_ns = cfg.rto_min_ns.max(1_000_000);
        }
        if a.payload_checksum.is_some() {
            cfg.payload_checksum = a.payload_checksum;
        }
        if let Some(ms) = a.peer_timeout_ms {
            cfg.peer_timeout_ns =
                in_range("peer-timeout-ms", ms, 100, 3_600_000, " ms")? as u64 * 1_000_000;
        }
        if let Some(us) = a.max_ack_delay_us {
            let limit = (tigon_engine::wire::ACK_DELAY_LIMIT_NS / 1_000) as i64;
            cfg.max_ack_delay_ns =
                in_range("max-ack-delay-us", us, 0, limit, " us")? as u64 * 1_000;
        }
        if let Some(us) = a.max_ack_delay_busy_us {
            let limit = (tigon_engine::wire::ACK_DELAY_LIMIT_NS / 1_000) as i64;
            cfg.max_ack_delay_busy_ns =
                in_range("max-ack-delay-busy-us", us, 0, limit, " us")? as u64 * 1_000;
        }
        cfg.session_idle_ns = match a.session_idle_ms {
            Some(ms) => {
                let ms = in_range("session-idle-ms", ms, 0, 86_400_000, " ms")? as u64;
                if ms != 0 && ms * 1_000_000 <= cfg.peer_timeout_ns {
                    return bad(
                        "session-idle-ms",
                        ms,
                        &format!(
                            "use 0 (never) or more than the peer timeout ({} ms)",
                            cfg.peer_timeout_ns / 1_000_000
                        ),
                    );
                }
                ms * 1_000_000
            }
            None => cfg.session_idle_ns.max(2 * cfg.peer_timeout_ns),
        };
        let udp = udp_settings(a)?;
        if udp.is_some() {
            // The engine's frames travel behind IPv4 and UDP headers: the MTU must hold both.
            cfg.max_frame -= tigon_engine::net::UDP_OVERHEAD;
        }
        cfg.validate()?;
        let rx_queues = match (a.rx_queues, udp.is_some()) {
            (None, true) => DEFAULT_UDP_RX_QUEUES,
            (None, false) => 1,
            (Some(n), true) => in_range("rx-queues", n, 1, MAX_RX_QUEUES as i64, "")? as u16,
            (Some(1), false) => 1,
            (Some(n), false) => {
                return bad(
                    "rx-queues",
                    n,
                    "several receive queues need --wire udp (RSS spreads UDP/IPv4 by its \
                     source port; raw Ethernet frames would all land on one queue): use 1",
                );
            }
        };
        let idle_spin = in_range(
            "idle-spin-us",
            a.idle_spin_us.unwrap_or(0),
            0,
            1_000_000,
            " µs",
        )? as u64;
        // Heartbeats and the shutdown check bound the longest sleep to 10 ms anyway.
        let idle_poll = in_range(
            "idle-poll-us",
            a.idle_poll_us.unwrap_or(50),
            1,
            10_000,
            " µs",
        )? as u64;
        let cpu_latency_us = match a.cpu_latency.as_deref() {
            Some("off") => None,
            Some(v) => match v.parse::<i32>() {
                Ok(us) if us >= 0 => Some(us),
                _ => return bad("cpu-latency", v, "microseconds (0 or more) or off"),
            },
            None if spin => None,
            None => Some(0),
        };
        let nice = match (a.nice, spin) {
            (Some(n), _) => Some(in_range("nice", n, -20, 19, "")?),
            (None, false) => Some(-10),
            (None, true) => None,
        };
        let n_desc = match a.channel_requests {
            Some(n) => in_range("channel-requests", n, 64, 65_536, "")? as u32,
            None => DEFAULT_CHANNEL_REQUESTS,
        };
        let max_clients = match a.max_clients {
            Some(n) => in_range("max-clients", n, 1, 65_536, "")? as usize,
            None => DEFAULT_MAX_CLIENTS,
        };
        let geometry = Geometry {
            n_desc,
            n_data: 256,
            data_size: cfg.rndv_threshold.max(16 * 1024) as u32,
        };
        let netns = a.netns.clone();
        if let Some(ns) = &netns
            && !ns.contains('/')
            && !std::path::Path::new("/run/netns").join(ns).exists()
        {
            return bad(
                "netns",
                ns,
                "a network namespace that exists (`ip netns list`; create it with `ip netns add`)",
            );
        }
        Ok(Settings {
            devargs,
            netns,
            socket,
            lcore,
            mtu,
            spin,
            allow_uids: allow,
            no_huge,
            engine: cfg,
            udp,
            rx_queues,
            geometry,
            max_clients,
            dma_threshold,
            lend_large: a.lend_large.unwrap_or(false),
            idle_spin: Duration::from_micros(idle_spin),
            idle_poll: Duration::from_micros(idle_poll),
            cpu_latency_us,
            nice,
        })
    }
}
