//! `tigon agent`: the node agent. A DPDK primary process whose main lcore runs the engine's
//! poll loop (rx burst → demux → protocol → tx burst → timers → copy completions, then the
//! clients' rings), while a control thread attaches clients and serves stats.

mod control;
mod copy;
mod link;
mod memory;
mod serve;

use clap::Args;
use control::{Cmd, Control};
use serde::Deserialize;
use std::os::fd::AsFd;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};
use tigon_engine::channel::{Geometry, STATE_SHUTDOWN};
use tigon_engine::{Config, Engine, MacAddr};
use tigon_pmd::{
    DEFAULT_DATA_ROOM, DmaDev, Eal, ExtMem, Hugepages, IovaMode, JUMBO_DATA_ROOM, Mempool, Port,
    PortConfig,
};

#[derive(Args, Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct AgentArgs {
    /// The NIC: a PCI address, or a vdev such as `net_memif0,role=server,socket=/run/x.sock`,
    /// `net_af_packet0,iface=eth1`, `net_af_xdp0,iface=eth1`.
    #[arg(long)]
    pub port: Option<String>,
    /// The lcore (CPU) the engine's poll loop owns.
    #[arg(long)]
    pub lcore: Option<u32>,
    /// Control socket clients attach to.
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// MTU of the port: 1500 or 9000.
    #[arg(long)]
    pub mtu: Option<u16>,
    /// A dmadev for copy offload, e.g. `dma_skeleton0` (ioat / idxd PCI addresses on real nodes).
    #[arg(long)]
    pub dma: Option<String>,
    /// Received payloads at least this long go through the dmadev (default from `tigon bench dma`).
    #[arg(long)]
    pub dma_threshold: Option<usize>,
    /// When there is no work: `spin` (busy-poll, for a dedicated core) or `yield` (shared machines).
    #[arg(long)]
    pub idle: Option<String>,
    /// Uids allowed to attach (comma-separated); default: the agent's own uid.
    #[arg(long, value_delimiter = ',')]
    pub allow_uid: Option<Vec<u32>>,
    /// Messages longer than this go by rendezvous (bytes).
    #[arg(long)]
    pub rndv_threshold: Option<usize>,
    /// An unreachable peer fails operations after this long (milliseconds).
    #[arg(long)]
    pub peer_timeout_ms: Option<u64>,
    /// With `--idle yield`: keep polling this long after the last work before sleeping
    /// (microseconds; default 0: the polling is charged to the ranks sharing the core).
    #[arg(long)]
    pub idle_spin_us: Option<u64>,
    /// With `--idle yield`, on a link that cannot wake a sleeping engine (memif): the longest
    /// sleep while operations are in flight or within a second of the last work
    /// (microseconds). af_packet and client requests wake it at once.
    #[arg(long)]
    pub idle_poll_us: Option<u64>,
    /// CPU-latency QoS request held while the agent runs, in microseconds, or `off`
    /// (/dev/cpu_dma_latency; `0` keeps idle cores polling so wake-ups take microseconds).
    /// Default: 0 with `--idle yield`, off with `spin`.
    #[arg(long)]
    pub cpu_latency: Option<String>,
    /// Nice value of the engine thread with `--idle yield` (default -10: the engine makes
    /// progress for every rank sharing its core).
    #[arg(long, allow_hyphen_values = true)]
    pub nice: Option<i32>,
    /// Run DPDK without hugepages (also when TIGON_NO_HUGE=1).
    #[arg(long)]
    pub no_huge: Option<bool>,
    /// Extra EAL arguments, passed through.
    #[arg(long, allow_hyphen_values = true)]
    pub eal: Option<Vec<String>>,
    /// A JSON file with any of these options (command-line options win).
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
}

impl AgentArgs {
    fn merge(mut self) -> Result<AgentArgs, String> {
        let Some(path) = self.config.clone() else {
            return Ok(self);
        };
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let f: AgentArgs =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        macro_rules! fill {
            ($($f:ident),*) => { $( if self.$f.is_none() { self.$f = f.$f; } )* };
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
            peer_timeout_ms,
            idle_spin_us,
            idle_poll_us,
            cpu_latency,
            nice,
            no_huge,
            eal
        );
        Ok(self)
    }
}

/// A file prefix unique to this agent (several agents may share a machine).
fn file_prefix(socket: &Path) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in socket.as_os_str().as_encoded_bytes() {
        h = (h ^ *b as u64).wrapping_mul(0x100_0000_01b3);
    }
    format!("tigon-{:012x}", h & 0xffff_ffff_ffff)
}

fn bind(socket: &Path) -> Result<UnixListener, String> {
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    if socket.exists() {
        if std::os::unix::net::UnixStream::connect(socket).is_ok() {
            return Err(format!("an agent is already serving {}", socket.display()));
        }
        let _ = std::fs::remove_file(socket);
    }
    let l = UnixListener::bind(socket).map_err(|e| format!("binding {}: {e}", socket.display()))?;
    // Anyone may connect: the uid check (SO_PEERCRED against --allow-uid) is what admits or
    // refuses a client, with a message that says why. A socket only its owner could open
    // would refuse every other uid with a bare EACCES, whatever --allow-uid says.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o666))
        .map_err(|e| format!("chmod {}: {e}", socket.display()))?;
    Ok(l)
}

/// The device name of `devargs` (what comes before the first comma).
fn device_name(devargs: &str) -> &str {
    devargs.split(',').next().unwrap_or("").trim()
}

/// Whether the port's driver takes its frame size from elsewhere than `rte_eth_dev_set_mtu`
/// (which it refuses): memif carries jumbo frames in its `bsize` buffers (the port layer sets
/// `bsize=9216`), af_packet follows the kernel interface's MTU and the ring's `framesz`.
fn mtu_from_devargs(devargs: &str) -> bool {
    let name = device_name(devargs);
    name.starts_with("net_memif") || name.starts_with("net_af_packet")
}

/// Devargs for the port at `mtu`: af_packet needs ring frames that hold a jumbo frame plus
/// its TPACKET header, and an interface whose MTU lets such frames through.
fn port_devargs(devargs: &str, mtu: u16) -> Result<String, String> {
    if mtu <= 1500 || !device_name(devargs).starts_with("net_af_packet") {
        return Ok(devargs.to_string());
    }
    let iface = devargs
        .split(',')
        .find_map(|kv| kv.trim().strip_prefix("iface="));
    if let Some(iface) = iface
        && let Ok(text) = std::fs::read_to_string(format!("/sys/class/net/{iface}/mtu"))
        && let Ok(have) = text.trim().parse::<u32>()
        && have < mtu as u32
    {
        return Err(format!(
            "--mtu {mtu}: interface {iface} has MTU {have} (af_packet follows the kernel's \
             MTU: `ip link set {iface} mtu {mtu}`)"
        ));
    }
    let mut d = devargs.to_string();
    if !d.contains("framesz=") {
        d.push_str(",framesz=9216");
    }
    if !d.contains("blocksz=") {
        d.push_str(",blocksz=36864");
    }
    Ok(d)
}

pub fn run(args: AgentArgs) -> Result<(), String> {
    let a = args.merge()?;
    let devargs = a
        .port
        .clone()
        .ok_or("--port is required (a PCI address or a vdev's devargs)")?;
    let socket = a
        .socket
        .clone()
        .unwrap_or_else(tigon_client::default_socket);
    let mtu = a.mtu.unwrap_or(1500);
    if mtu != 1500 && mtu != 9000 {
        return Err(format!("--mtu {mtu}: use 1500 or 9000"));
    }
    let spin = match a.idle.as_deref().unwrap_or("spin") {
        "spin" => true,
        "yield" => false,
        o => return Err(format!("--idle {o}: use spin or yield")),
    };
    let allow = a.allow_uid.clone().unwrap_or_else(|| {
        vec![
            std::fs::metadata("/proc/self")
                .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
                .unwrap_or(0),
        ]
    });
    let no_huge = a.no_huge.unwrap_or(false)
        || std::env::var_os(tigon_pmd::NO_HUGE_ENV).is_some_and(|v| v == "1");
    let mut cfg = Config {
        max_frame: mtu as usize + 14,
        ..Config::default()
    };
    if let Some(t) = a.rndv_threshold {
        cfg.rndv_threshold = t;
    }
    if !spin {
        // Sharing cores means being descheduled for a tick now and then: do not mistake
        // that for loss.
        cfg.rto_min_ns = cfg.rto_min_ns.max(1_000_000);
    }
    if let Some(ms) = a.peer_timeout_ms {
        cfg.peer_timeout_ns = ms * 1_000_000;
    }
    cfg.validate()?;
    let geometry = Geometry {
        n_desc: 4096,
        n_data: 256,
        data_size: cfg.rndv_threshold.max(16 * 1024) as u32,
    };

    tigon_shm::signals::install().map_err(|e| format!("signal handlers: {e}"))?;
    // The control thread starts before DPDK pins this thread to the engine's lcore.
    let listener = bind(&socket)?;
    let (cmd_tx, cmd_rx) = mpsc::channel::<Cmd>();
    let (evict_tx, evict_rx) = mpsc::channel::<u64>();
    let bell = Arc::new(
        tigon_shm::wake::EventFd::new().map_err(|e| format!("the agent's doorbell: {e}"))?,
    );
    let control = Control {
        bell: bell.clone(),
        listener,
        allow_uids: allow.clone(),
        geometry,
        eager_limit: cfg.rndv_threshold as u64,
        hugetlb: !no_huge,
        cmds: cmd_tx,
        evicted: evict_rx,
    };
    let control = std::thread::Builder::new()
        .name("tigon-control".into())
        .spawn(move || control.run(tigon_shm::signals::terminating))
        .map_err(|e| e.to_string())?;

    let result = engine_main(
        &a, &devargs, &socket, mtu, spin, cfg, no_huge, cmd_rx, evict_tx, &bell,
    );
    tigon_shm::signals::request_termination();
    let _ = control.join();
    let _ = std::fs::remove_file(&socket);
    result
}

#[allow(clippy::too_many_arguments)]
fn engine_main(
    a: &AgentArgs,
    devargs: &str,
    socket: &Path,
    mtu: u16,
    spin: bool,
    cfg: Config,
    no_huge: bool,
    cmds: mpsc::Receiver<Cmd>,
    evicted: mpsc::Sender<u64>,
    bell: &tigon_shm::wake::EventFd,
) -> Result<(), String> {
    let lcore = a.lcore.unwrap_or(0);
    let mut b = Eal::builder()
        .lcores(lcore.to_string())
        .main_lcore(lcore)
        .file_prefix(file_prefix(socket))
        .in_memory(true)
        .hugepages(if no_huge {
            Hugepages::Off
        } else {
            Hugepages::Auto
        })
        .log_level("*:warning");
    if a.dma.is_some() {
        b = b.iova_mode(IovaMode::Va);
    }
    // A vdev port needs no PCI scan (which would also grab the host's own NIC).
    let pci = |d: &str| d.contains(':') && !d.starts_with("net_") && !d.starts_with("dma_");
    if !pci(devargs) && !a.dma.as_deref().is_some_and(pci) {
        b = b.no_pci(true);
    }
    // A software dmadev (dma_skeleton) is a vdev to create; IOAT / DSA devices are found by
    // the bus scans.
    if let Some(d) = &a.dma
        && device_name(d).starts_with("dma_")
    {
        b = b.vdev(d.clone());
    }
    if let Some(extra) = &a.eal {
        b = b.args(extra.clone());
    }
    let eal = b.init().map_err(|e| format!("DPDK initialisation: {e}"))?;
    let room = if mtu > 1500 {
        JUMBO_DATA_ROOM
    } else {
        DEFAULT_DATA_ROOM
    };
    let rx_pool = Mempool::new(&eal, "tigon_rx", 8191, room).map_err(|e| e.to_string())?;
    let tx_pool = Mempool::new(&eal, "tigon_tx", 8191, room).map_err(|e| e.to_string())?;
    let port_args = port_devargs(devargs, mtu)?;
    let port = Port::open(
        &eal,
        &port_args,
        &rx_pool,
        &PortConfig {
            mtu: (!mtu_from_devargs(devargs)).then_some(mtu),
            ..PortConfig::default()
        },
    )
    .map_err(|e| {
        let hint = if port_args.contains("net_memif") && port_args.contains("role=client") {
            " (a memif client needs its server: start the role=server agent first, on the same socket)"
        } else {
            ""
        };
        format!("port `{port_args}`: {e}{hint}")
    })?;
    let mac = MacAddr(port.mac().map_err(|e| e.to_string())?);
    let dma = match &a.dma {
        Some(d) => Some(DmaDev::open(&eal, d, 1024).map_err(|e| format!("dmadev `{d}`: {e}"))?),
        None => None,
    };
    let max_frame = mtu as usize + 14;
    let mut link = link::PortLink::new(port, tx_pool, mac, max_frame);
    let dma_threshold = a.dma_threshold.unwrap_or(DEFAULT_DMA_THRESHOLD);
    if dma.is_some() && dma_threshold > mtu as usize {
        // The dmadev copies one received frame's payload at a time.
        log::warn!(
            "--dma-threshold {dma_threshold} exceeds the MTU ({mtu}): the dmadev will copy \
             nothing (use --mtu 9000 or a lower --dma-threshold)"
        );
    }
    let copy = copy::AgentCopy::new(dma, dma_threshold);
    let mut eng = Engine::new(cfg, mac, max_frame, copy)?;
    let mut served = serve::Served::default();
    log::info!(
        "tigon agent: port {devargs} ({mac}), mtu {mtu}, lcore {lcore}, socket {}, dma {}, idle {}",
        socket.display(),
        a.dma.as_deref().unwrap_or("none"),
        if spin { "spin" } else { "yield" }
    );
    let idle = Idle::new(a, spin)?;
    if !spin {
        tigon_shm::signals::set_timer_slack_ns(1000);
        // Sharing cores with ranks, the engine must run as soon as it is woken: it makes
        // progress for all of them. At nice 0 a pinned engine next to busy processes was
        // measured descheduled for 2-10 s at a time here (its peers then time out); at -10
        // it gets about nine times their weight, and it sleeps whenever it has nothing to do.
        let nice = a.nice.unwrap_or(-10);
        if let Err(e) = tigon_shm::signals::set_thread_nice(nice) {
            log::warn!("engine thread: nice {nice}: {e} (needs CAP_SYS_NICE); running at 0");
        }
    }
    // The link's own descriptors to sleep on: af_packet's sockets (memif has none DPDK
    // exposes; a sleeping engine then polls it every `--idle-poll-us`).
    let wire_fds = tigon_shm::wake::packet_sockets();
    let mut last_work = Instant::now();
    let t0 = Instant::now();
    let mut last_beat = Instant::now();
    let mut loops = 0u32;
    // Scheduling seen by the engine: the longest time between two loop iterations, and how
    // many gaps exceeded 100 ms (a descheduled engine looks like a dead peer to the others).
    let mut gaps = LoopGaps::default();
    let mut last_iter = 0u64;
    let mut shutdown_at: Option<Instant> = None;
    let mut last_cpu = tigon_shm::signals::thread_cpu_ns();
    loop {
        let now = t0.elapsed().as_nanos() as u64;
        let cpu = tigon_shm::signals::thread_cpu_ns();
        gaps.note(now.saturating_sub(last_iter), cpu.saturating_sub(last_cpu));
        last_iter = now;
        last_cpu = cpu;
        let mut work = eng.poll(&mut link, now);
        let t_serve = t0.elapsed().as_nanos() as u64;
        gaps.max_poll_us = gaps.max_poll_us.max((t_serve - now) / 1000);
        work += served.requests(&mut eng, 32);
        work += served.completions(&mut eng);
        let t_cmds = t0.elapsed().as_nanos() as u64;
        gaps.max_serve_us = gaps.max_serve_us.max((t_cmds - t_serve) / 1000);
        for (slot, _) in served.evicted.drain(..) {
            let _ = evicted.send(slot);
        }
        loops = loops.wrapping_add(1);
        if work == 0 || loops.is_multiple_of(64) {
            while let Ok(c) = cmds.try_recv() {
                work += 1;
                match c {
                    Cmd::Attach { ch, pid, reply } => {
                        let ext = register(&eal, &ch);
                        let r = served
                            .attach(&mut eng, ch, pid, ext)
                            .map(|(s, addr)| (s, addr.to_string()));
                        let _ = reply.send(r);
                    }
                    Cmd::Detach { client } => served.detach(&mut eng, client),
                    Cmd::Stats { reply } => {
                        let _ = reply.send(stats_json(&eng, &served, &link, &gaps));
                    }
                }
            }
            let spent = (t0.elapsed().as_nanos() as u64).saturating_sub(t_cmds) / 1000;
            gaps.max_cmds_us = gaps.max_cmds_us.max(spent);
        }
        if last_beat.elapsed() >= Duration::from_millis(50) {
            last_beat = Instant::now();
            served.beat();
        }
        if tigon_shm::signals::terminating() && shutdown_at.is_none() {
            log::info!("tigon agent: shutting down");
            served.set_state(STATE_SHUTDOWN);
            shutdown_at = Some(Instant::now());
        }
        // Drain: give acknowledgements in flight a moment, then leave.
        if let Some(t) = shutdown_at
            && (t.elapsed() >= Duration::from_millis(200)
                || eng.pending_ops() == 0 && t.elapsed() >= Duration::from_millis(20))
        {
            break;
        }
        if work > 0 {
            last_work = Instant::now();
        } else if spin || last_work.elapsed() < idle.spin {
            std::hint::spin_loop();
        } else {
            // Sleep until a client rings, a frame arrives on a link that can wake us, or the
            // engine's next timer.
            let now = t0.elapsed().as_nanos() as u64;
            let mut wait = Duration::from_nanos(eng.sleep_budget_ns(now)).min(idle.max);
            // A link that cannot wake us is polled at `--idle-poll-us` while operations are
            // in flight and for a second after the last work: a peer's eager messages may
            // arrive before any receive is posted, and left in the ring they would wait out
            // the long sleep (measured: 4 ms Waitalls and the sender's timeouts firing).
            if wire_fds.is_empty()
                && (eng.pending_ops() > 0 || last_work.elapsed() < Duration::from_secs(1))
            {
                wait = wait.min(idle.poll);
            }
            if !wait.is_zero() && !served.set_asleep(true) {
                let mut fds = [bell.fd().as_fd(); 4];
                let n = 1 + wire_fds.len().min(3);
                for (slot, f) in fds[1..n].iter_mut().zip(&wire_fds) {
                    *slot = f.as_fd();
                }
                let t = Instant::now();
                tigon_shm::wake::poll_readable(&fds[..n], wait);
                gaps.max_sleep_us = gaps.max_sleep_us.max(t.elapsed().as_micros() as u64);
                gaps.sleeps += 1;
            }
            served.set_asleep(false);
            bell.drain();
        }
    }
    drop(idle);
    Ok(())
}

/// The `--idle yield` policy: how long to poll after work, how long to sleep, and the
/// CPU-latency request held meanwhile.
struct Idle {
    spin: Duration,
    poll: Duration,
    max: Duration,
    _qos: Option<tigon_shm::wake::CpuLatency>,
}

impl Idle {
    fn new(a: &AgentArgs, spin: bool) -> Result<Idle, String> {
        let qos = match a.cpu_latency.as_deref() {
            Some("off") => None,
            Some(v) => Some(
                v.parse::<i32>()
                    .map_err(|_| format!("--cpu-latency {v}: microseconds or `off`"))?,
            ),
            None if spin => None,
            None => Some(0),
        };
        let _qos = qos.and_then(|us| match tigon_shm::wake::CpuLatency::request(us) {
            Ok(q) => Some(q),
            Err(e) => {
                log::warn!("/dev/cpu_dma_latency: {e}; wake-ups of idle cores may be slow");
                None
            }
        });
        Ok(Idle {
            // 0 by default: a woken engine preempts the rank sharing its core, so every
            // microsecond it polls after its work is charged to that rank (measured here: an
            // 8-byte MPI_Isend took 39 µs with 20 µs of polling, 19 µs with none).
            spin: Duration::from_micros(a.idle_spin_us.unwrap_or(0)),
            poll: Duration::from_micros(a.idle_poll_us.unwrap_or(50).max(1)),
            // Heartbeats (every 50 ms) and the shutdown check bound the longest sleep.
            max: Duration::from_millis(10),
            _qos,
        })
    }
}

/// Below this many bytes a CPU copy beats a dmadev round trip (see `tigon bench dma`).
pub const DEFAULT_DMA_THRESHOLD: usize = 4096;

/// Registers a client's channel with DPDK so the dmadev can write its data buffers.
fn register(eal: &Eal, ch: &tigon_engine::channel::Channel) -> Option<std::sync::Arc<ExtMem>> {
    let fd = ch.region.fd().try_clone().ok()?;
    let page = if ch.region.is_hugetlb() {
        2 << 20
    } else {
        4096
    };
    match ExtMem::from_fd(eal, fd, ch.region.len(), page) {
        Ok(m) => Some(m),
        Err(e) => {
            log::warn!("channel not registered with DPDK ({e}); CPU copies only for this client");
            None
        }
    }
}

/// Where the engine loop's time goes, worst cases: the longest gap between two iterations
/// (and the CPU time the thread got during it: far less than the gap means it was
/// descheduled or blocked), and the longest engine poll, client serving, control command
/// and idle sleep.
#[derive(Debug, Default, serde::Serialize)]
struct LoopGaps {
    max_gap_us: u64,
    max_gap_cpu_us: u64,
    gaps_over_100ms: u64,
    max_poll_us: u64,
    max_serve_us: u64,
    max_cmds_us: u64,
    max_sleep_us: u64,
    sleeps: u64,
}

impl LoopGaps {
    fn note(&mut self, ns: u64, cpu_ns: u64) {
        if ns / 1000 > self.max_gap_us {
            self.max_gap_us = ns / 1000;
            self.max_gap_cpu_us = cpu_ns / 1000;
        }
        if ns > 100_000_000 {
            self.gaps_over_100ms += 1;
        }
    }
}

fn stats_json(
    eng: &Engine<link::PortLink, copy::AgentCopy>,
    served: &serve::Served,
    link: &link::PortLink,
    gaps: &LoopGaps,
) -> serde_json::Value {
    let s = &eng.stats;
    let c = eng.copy_engine();
    let port = link.port.stats().ok();
    serde_json::json!({
        "clients": served.client_count(),
        "serve": served.stats,
        "peers": s.peers,
        "frames": { "rx": s.rx_frames, "tx": s.tx_frames, "tx_bytes": s.tx_bytes, "acks_sent": s.acks_sent },
        "retransmits": s.retransmits,
        "drops": {
            "checksum": s.drop_checksum, "truncated": s.drop_truncated, "malformed": s.drop_malformed,
            "foreign": s.drop_foreign, "not_ours": s.drop_not_ours, "no_endpoint": s.drop_no_endpoint,
            "stale_session": s.drop_stale, "unknown_message": s.drop_unknown_msg, "duplicates": s.rx_duplicates,
        },
        "ring_full": served.stats.ring_full,
        "copies": { "dma_bytes": c.clients.dma_bytes, "cpu_bytes": c.clients.cpu_bytes, "direct_bytes": c.clients.direct_bytes, "dma_errors": c.dma_errors },
        "messages": {
            "sends": s.sends_completed, "recvs": s.recvs_completed, "failed": s.ops_failed, "eager": s.eager_sent,
            "rendezvous": s.rndv_sent, "unexpected": s.unexpected, "unexpected_bytes_peak": s.unexpected_bytes_peak,
            "credit_stalls": s.credit_stalls,
        },
        "peer_events": { "restarts": s.peer_restarts, "timeouts": s.peer_timeouts },
        "link": link.stats,
        "engine_loop": gaps,
        "port": port.map(|p| serde_json::json!({ "ipackets": p.ipackets, "opackets": p.opackets, "imissed": p.imissed, "ierrors": p.ierrors, "oerrors": p.oerrors, "rx_nombuf": p.rx_nombuf })),
    })
}
