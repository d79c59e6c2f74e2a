//! The engine thread: DPDK brought up on the engine's lcore, then one loop that polls the
//! engine (rx burst → demux → protocol → tx burst → timers → copy completions), serves the
//! clients' rings, takes the control thread's commands, and sleeps when there is nothing to do.

use super::control::{Cmd, RxShare};
use super::copy::AgentCopy;
use super::dpdk;
use super::idle::{self, Idle};
use super::lease::LeaseBudget;
use super::link::PortLink;
use super::nodes::NodePlan;
use super::notify;
use super::serve::Served;
use super::stats::{self, LoopGaps};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};
use tigon_engine::channel::STATE_SHUTDOWN;
use tigon_engine::{Engine, Link};
use tigon_pmd::{Eal, MemsegFd, MemsegFdState};
use tigon_shm::clock::Clock;
use tigon_shm::wake::EventFd;

/// Client requests taken from one client's ring per loop.
const REQUEST_BURST: usize = 32;
/// The thread's CPU time (a system call) is read at most this often besides the longest gaps.
const CPU_BASE_EVERY_NS: u64 = 1_000_000;

/// How the engine thread talks to the control thread.
pub struct ToControl<'a> {
    pub cmds: Receiver<Cmd>,
    /// Clients the engine disconnected for misbehaving (by handle).
    pub evicted: Sender<u64>,
    /// Rung by the control thread and by clients whose requests find the engine asleep.
    pub bell: &'a EventFd,
    /// Where the control thread finds the node's channel slots in DPDK memory, once reserved.
    pub slots: std::sync::Arc<std::sync::OnceLock<super::slots::Slots>>,
}

/// Runs the engines of `nodes` (one per node, each with its control thread's channels) in one
/// loop until the agent is told to stop (SIGTERM / SIGINT).
pub fn run(nodes: &[NodePlan], controls: Vec<ToControl<'_>>) -> Result<(), String> {
    let dp = dpdk::bring_up(nodes)?;
    let shared = &nodes[0].settings;
    // AF_XDP ports' claims on their interfaces: declared before the nodes, so released only
    // after their ports have closed.
    let mut xdp_claims = Vec::new();
    let mut served_nodes = Vec::with_capacity(nodes.len());
    for ((plan, plane), control) in nodes.iter().zip(dp.nodes).zip(controls) {
        let s = &plan.settings;
        if plane.dma.is_some() && s.dma_threshold > s.mtu as usize {
            // The dmadev copies one received frame's payload at a time.
            log::warn!(
                "--dma-threshold {} exceeds the MTU ({}): the dmadev will copy nothing (use \
                 --mtu 9000 or a lower --dma-threshold)",
                s.dma_threshold,
                s.mtu
            );
        }
        xdp_claims.extend(plane.xdp_claim);
        let mut copy = AgentCopy::new(plane.dma, s.dma_threshold);
        if let Some(mem) = &plane.rx_mem {
            copy.clients.budget = LeaseBudget::for_pool(dpdk::RX_POOL);
            log::info!(
                "receive pool in shared memory ({} MiB): ranks read small messages where they \
                 arrive (up to {} frames lent)",
                mem.len() >> 20,
                copy.clients.budget.max
            );
        }
        copy.rx_mem = plane.rx_mem;
        copy.clients.lend_large = s.lend_large;
        if let Some(sl) = plane.slots {
            let _ = control.slots.set(sl);
        }
        // Unexpected messages held as their frames keep receive buffers: a quarter of the
        // pool at most (another quarter may be lent to ranks), the rest for the port's ring
        // and the reorder windows.
        let cfg = tigon_engine::Config {
            unexpected_frames: dpdk::RX_POOL as usize / 4,
            ..s.engine.clone()
        };
        let mut eng = Engine::new(cfg, plane.mac, plane.link.max_frame(), copy)?;
        // Its start time: a peer that holds a session with an earlier start of this node
        // knows from a rank's address that the node restarted (`Engine::check_incarnation`;
        // a start whose clock was stepped back is asked about: `Engine::isend_to`).
        // TIGON_TEST_CLOCK_STEP_MS moves the start time read here (tests of a stepped clock).
        // Said in the log when set: outside a test it makes the node's restarts look wrong to
        // its peers, and an agent's environment is easy to inherit unseen.
        let step_ms: i64 = match std::env::var("TIGON_TEST_CLOCK_STEP_MS") {
            Err(_) => 0,
            Ok(v) => match v.trim().parse() {
                Ok(ms) => {
                    log::warn!(
                        "TIGON_TEST_CLOCK_STEP_MS={ms}: this agent's start time (its \
                         incarnation, which peers compare) is moved by {ms} ms; a test hook, \
                         unset it outside tests"
                    );
                    ms
                }
                Err(_) => {
                    log::warn!(
                        "TIGON_TEST_CLOCK_STEP_MS={v:?} is not a whole number of ms: ignored"
                    );
                    0
                }
            },
        };
        let now = std::time::SystemTime::now();
        let stepped = if step_ms < 0 {
            now.checked_sub(std::time::Duration::from_millis(step_ms.unsigned_abs()))
        } else {
            now.checked_add(std::time::Duration::from_millis(step_ms as u64))
        };
        let since_epoch = stepped
            .unwrap_or(now)
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        eng.set_incarnation(tigon_engine::addr::incarnation_of(since_epoch));
        log::info!(
            "tigon agent: port {} ({}), mtu {}, lcore {}, socket {}, dma {}, idle {}",
            s.devargs,
            plane.mac,
            s.mtu,
            s.lcore,
            s.socket.display(),
            plan.args.dma.as_deref().unwrap_or("none"),
            if s.spin { "spin" } else { "yield" }
        );
        let relink = memif_client(plane.link.port.devargs()).then(Relink::default);
        served_nodes.push(NodeLoop {
            eng,
            link: plane.link,
            served: Served::new(s.max_clients),
            control,
            register_channels: plane.register_channels,
            relink,
        });
    }
    let idle = Idle::new(shared);
    if !shared.spin {
        idle::share_core(shared.nice.unwrap_or(-10));
    } else if let Some(n) = shared.nice {
        idle::set_nice(n);
    }
    let layout = Layout {
        nodes: nodes.len(),
        lcore: shared.lcore,
        idle: if shared.spin { "spin" } else { "yield" },
    };
    if nodes.len() > 1 {
        log::info!(
            "tigon agent: {} nodes on lcore {}, one poll loop",
            nodes.len(),
            shared.lcore
        );
    }
    let clock = Clock::new(Duration::from_millis(5));
    log::debug!(
        "engine clock: {}",
        if clock.uses_tsc() {
            "the time-stamp counter"
        } else {
            "the monotonic clock"
        }
    );
    // Serving from here on: the control threads listen and this loop answers them. Under
    // systemd (Type=notify) `systemctl start` returns now.
    notify::tell(&format!(
        "READY=1\nSTATUS=serving {} on {}",
        shared.socket.display(),
        shared.devargs
    ));
    EngineLoop {
        eal: dp.eal,
        memif_quiet: false,
        memseg_fd: dp.memseg_fd,
        last_memseg_check: 0,
        nodes: served_nodes,
        layout,
        spin: shared.spin,
        idle,
        // The links' own descriptors to sleep on: af_packet's sockets (memif has none DPDK
        // exposes; a sleeping engine then polls it every `--idle-poll-us`).
        wire_fds: tigon_shm::wake::packet_sockets(),
        clock,
        last_iter: 0,
        last_cpu: tigon_shm::signals::thread_cpu_ns(),
        last_cpu_at: 0,
        gaps: LoopGaps::default(),
        loops: 0,
        last_work: 0,
        last_beat: 0,
        shutdown_at: None,
    }
    .run();
    Ok(())
}

/// What `tigon stats` says of how the agent runs: how many nodes share its loop, on which
/// core, and how it idles.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Layout {
    pub nodes: usize,
    pub lcore: u32,
    pub idle: &'static str,
}

/// One node's engine, its port, its clients and its control thread.
struct NodeLoop<'a> {
    eng: Engine<PortLink, AgentCopy>,
    link: PortLink,
    served: Served,
    control: ToControl<'a>,
    /// Clients' channels are registered with DPDK (a device must reach them).
    register_channels: bool,
    /// A memif client port: restarted while its link stays down (see `keep_links`).
    relink: Option<Relink>,
}

/// The watch on a memif client port's link. DPDK 22.11's memif client connects when its
/// port starts and never again: once its server's agent went away (restarted, say), the
/// node reached no peer until this agent was restarted too. A link down this long is
/// restarted (stop and start: the client connects anew), then again every as long while the
/// server is not back.
#[derive(Default)]
struct Relink {
    last_look: u64,
    down_since: Option<u64>,
    last_try: u64,
    /// Restarts tried since the link went down: DPDK's memif says "Failed to connect
    /// socket" at each, once a second for as long as the server is away; after the first
    /// its log is quieted until the link is back (we said why once).
    tries: u32,
}

/// How often a watched link is looked at, and how long it stays down before a restart.
const RELINK_LOOK_NS: u64 = 100_000_000;
const RELINK_AFTER_NS: u64 = 1_000_000_000;
/// DPDK's log type of the memif driver.
const MEMIF_LOGS: &str = "pmd.net.memif";

fn memif_client(devargs: &str) -> bool {
    devargs.starts_with("net_memif") && devargs.split(',').any(|kv| kv.trim() == "role=client")
}

struct EngineLoop<'a> {
    eal: Eal,
    /// DPDK's memif log is quieted while a memif client port's link stays down (`keep_links`).
    memif_quiet: bool,
    /// The EAL's memory file descriptor a memif zero-copy port closes (see `MemsegFd`), and
    /// when it was last looked at.
    memseg_fd: Option<MemsegFd>,
    last_memseg_check: u64,
    nodes: Vec<NodeLoop<'a>>,
    layout: Layout,
    spin: bool,
    idle: Idle,
    wire_fds: Vec<OwnedFd>,
    /// The engines' clock (the time-stamp counter where it serves: read several times a
    /// pass).
    clock: Clock,
    /// Clock and thread CPU time at the start of the last iteration.
    last_iter: u64,
    last_cpu: u64,
    /// When `last_cpu` was read (engine clock).
    last_cpu_at: u64,
    /// Scheduling seen by the engine (a descheduled engine looks like a dead peer to the
    /// others).
    gaps: LoopGaps,
    loops: u32,
    /// Engine-clock times of the last pass that did work, and of the last heartbeat.
    last_work: u64,
    last_beat: u64,
    shutdown_at: Option<Instant>,
}

impl EngineLoop<'_> {
    fn run(&mut self) {
        loop {
            let now = self.start_iteration();
            let mut work = 0;
            for i in 0..self.nodes.len() {
                let (w, t) = self.poll_engine(i, now);
                work += w + self.serve_clients(i, t);
            }
            self.loops = self.loops.wrapping_add(1);
            // The control threads' commands (attach, stats) can wait a few passes of a
            // spinning engine (looking costs a channel lock per node); one that sleeps looks
            // before each sleep, as the control thread's doorbell woke it.
            if self.loops.is_multiple_of(16) || work == 0 && !self.spin {
                work += self.take_commands();
            }
            self.beat(now);
            self.keep_memseg_fd(now);
            self.keep_links(now);
            if self.leaving() {
                return;
            }
            // One clock read per pass (`now`): a spinning engine's idle pass is mostly the
            // clock otherwise.
            if work > 0 {
                self.last_work = now;
            } else if self.spin || now.saturating_sub(self.last_work) < self.idle.spin_ns() {
                std::hint::spin_loop();
            } else {
                self.sleep();
            }
        }
    }

    /// Nanoseconds on the engines' clock.
    fn clock(&self) -> u64 {
        self.clock.now_ns()
    }

    /// The engines' time now, noting the gap since the last iteration.
    ///
    /// The thread's CPU time is a real system call (CLOCK_THREAD_CPUTIME_ID, ~0.6 us here,
    /// against 24 ns for the vDSO's monotonic clock): it was read on every pass, ~11 times
    /// per message. Now it is read only when a gap is the longest yet (to tell a busy engine
    /// from a descheduled one) and once a millisecond to keep the base fresh (every 64
    /// passes was still ~34,000 calls a second, 2 % of a spinning core), so the CPU time of
    /// the longest gap is an upper bound that includes up to 1 ms before it: what matters
    /// are gaps of many milliseconds.
    fn start_iteration(&mut self) -> u64 {
        let now = self.clock();
        let gap = now.saturating_sub(self.last_iter);
        if self.gaps.is_longest(gap) {
            let cpu = tigon_shm::signals::thread_cpu_ns();
            self.gaps.note(gap, cpu.saturating_sub(self.last_cpu));
            self.last_cpu = cpu;
            self.last_cpu_at = now;
        } else {
            self.gaps.note(gap, 0);
            if now.saturating_sub(self.last_cpu_at) >= CPU_BASE_EVERY_NS {
                self.last_cpu = tigon_shm::signals::thread_cpu_ns();
                self.last_cpu_at = now;
            }
        }
        self.last_iter = now;
        now
    }

    /// Node `i`'s frames in, protocol, frames out, timers, copy completions. Returns the work
    /// done and the time after it (the clock is read again only if there was work).
    fn poll_engine(&mut self, i: usize, now: u64) -> (usize, u64) {
        let n = &mut self.nodes[i];
        n.link.set_clock(now);
        let work = n.eng.poll(&mut n.link, now);
        if work == 0 {
            return (0, now);
        }
        let t = self.clock();
        self.gaps.max_poll_us = self.gaps.max_poll_us.max(t.saturating_sub(now) / 1000);
        (work, t)
    }

    /// Node `i`'s clients' requests to its engine, the engine's completions to the clients
    /// (from time `t`); the node's control thread hears of clients disconnected meanwhile.
    fn serve_clients(&mut self, i: usize, t: u64) -> usize {
        let n = &mut self.nodes[i];
        let work = n.served.requests(&mut n.eng, REQUEST_BURST) + n.served.completions(&mut n.eng);
        for (client, _) in n.served.evicted.drain(..) {
            let _ = n.control.evicted.send(client);
        }
        if work > 0 {
            let spent = self.clock().saturating_sub(t) / 1000;
            self.gaps.max_serve_us = self.gaps.max_serve_us.max(spent);
        }
        work
    }

    /// The control threads' commands: attach, detach, stats.
    fn take_commands(&mut self) -> usize {
        let t = self.clock();
        let mut count = 0;
        for n in &mut self.nodes {
            while let Ok(c) = n.control.cmds.try_recv() {
                count += 1;
                match c {
                    Cmd::Attach {
                        ch,
                        pid,
                        uid,
                        slot,
                        reply,
                    } => {
                        // A channel in DPDK's memory is DPDK's already (and a memif zero-copy
                        // port sends from it).
                        let ext = match slot {
                            Some(mem) => Some(mem),
                            None => dpdk::register(&self.eal, &ch, n.register_channels),
                        };
                        // The receive memory, for the client to map read-only. DPDK's own
                        // memory only to clients of the agent's own user: its file holds all
                        // of the list's memory (frames sent too), which they could read of
                        // this process anyway.
                        let rx = n.eng.copy_engine().rx_mem.as_ref().and_then(|m| {
                            if m.is_dpdk_memory() && uid != tigon_shm::sock::euid() {
                                return None;
                            }
                            let fd = m.fd().try_clone_to_owned().ok()?;
                            Some(RxShare {
                                fd,
                                offset: m.file_offset(),
                                len: m.len() as u64,
                            })
                        });
                        let r = n.served.attach(&mut n.eng, ch, pid, ext, rx.is_some()).map(
                            |(client, addr)| {
                                (client, n.link.addr_text(addr, n.eng.incarnation()), rx)
                            },
                        );
                        let _ = reply.send(r);
                    }
                    Cmd::Detach { client } => n.served.detach(&mut n.eng, client),
                    Cmd::Stats { reply } => {
                        let _ = reply.send(stats::json(
                            &n.eng,
                            &n.served,
                            &n.link,
                            &self.gaps,
                            &self.layout,
                            n.control.slots.get(),
                        ));
                    }
                }
            }
        }
        let spent = self.clock().saturating_sub(t) / 1000;
        self.gaps.max_cmds_us = self.gaps.max_cmds_us.max(spent);
        count
    }

    /// Every 50 ms, bumps each channel's heartbeat (clients watch it to tell a live agent).
    fn beat(&mut self, now: u64) {
        if now.saturating_sub(self.last_beat) >= 50_000_000 {
            self.last_beat = now;
            for n in &self.nodes {
                n.served.beat();
            }
        }
    }

    /// Puts the EAL's memory file back under its descriptor number once a memif zero-copy
    /// port has closed it (at each connection): in the first two seconds, when the port
    /// connects and before ranks attach (so little else opens files), every pass while no
    /// rank is attached and every 50 us once one is, then every 50 ms (reconnections). The
    /// look is a system call (~1 us): on every pass it made each message of a job's first
    /// two seconds wait for it at each hop (NetPIPE over `tigon run`: 6.4 us one way at its
    /// first sizes, 3.3 us from the fourth on, 2 s after the agent started).
    fn keep_memseg_fd(&mut self, now: u64) {
        let Some(m) = &self.memseg_fd else {
            return;
        };
        let every = if now >= 2_000_000_000 {
            50_000_000
        } else if self.nodes.iter().any(|n| n.served.has_clients()) {
            50_000
        } else {
            0
        };
        if now.saturating_sub(self.last_memseg_check) < every {
            return;
        }
        self.last_memseg_check = now;
        match m.restore() {
            MemsegFdState::Intact => {}
            MemsegFdState::Restored => log::debug!(
                "memif closed DPDK's memory file descriptor {}: put back",
                m.number()
            ),
            MemsegFdState::Taken => {
                log::warn!(
                    "memif closed DPDK's memory file descriptor {} and the number now names \
                     another file: DPDK must not grow or shrink its memory from now on",
                    m.number()
                );
                self.memseg_fd = None;
            }
        }
    }

    /// Restarts a memif client port whose link has been down for `RELINK_AFTER_NS` (its
    /// server's agent went away), and again as long after each try, until it is back up.
    fn keep_links(&mut self, now: u64) {
        let eal = &self.eal;
        for n in &mut self.nodes {
            let Some(w) = n.relink.as_mut() else {
                continue;
            };
            if now.saturating_sub(w.last_look) < RELINK_LOOK_NS {
                continue;
            }
            w.last_look = now;
            let up = n.link.port.link().map(|l| l.up).unwrap_or(true);
            if up {
                if w.down_since.take().is_some() {
                    log::info!("port {}: link up again", n.link.port.name());
                }
                w.tries = 0;
                continue;
            }
            let since = *w.down_since.get_or_insert(now);
            if now.saturating_sub(since) < RELINK_AFTER_NS
                || now.saturating_sub(w.last_try) < RELINK_AFTER_NS
            {
                continue;
            }
            w.last_try = now;
            w.tries += 1;
            if w.tries == 2 {
                log::warn!(
                    "port {}: link down for {} s: its memif server (the peer node's agent) is \
                     not there; trying to connect again every {} s, quietly",
                    n.link.port.name(),
                    now.saturating_sub(since) / 1_000_000_000,
                    RELINK_AFTER_NS / 1_000_000_000
                );
                if !self.memif_quiet {
                    eal.quiet_logs(MEMIF_LOGS, true);
                    self.memif_quiet = true;
                }
            }
            match n.link.port.restart() {
                Ok(()) => log::info!(
                    "port {}: link down for {} ms: restarted to connect to its memif server anew",
                    n.link.port.name(),
                    now.saturating_sub(since) / 1_000_000
                ),
                Err(e) => log::debug!("port {}: restart: {e}", n.link.port.name()),
            }
        }
        // Every link back (several nodes' memif ports share this EAL's log): memif's own
        // messages matter again.
        if self.memif_quiet
            && !self
                .nodes
                .iter()
                .any(|n| n.relink.as_ref().is_some_and(|w| w.tries > 1))
        {
            eal.quiet_logs(MEMIF_LOGS, false);
            self.memif_quiet = false;
        }
    }

    /// Once told to stop: tells the clients, gives acknowledgements in flight a moment, then
    /// says it is time to leave.
    fn leaving(&mut self) -> bool {
        if tigon_shm::signals::terminating() && self.shutdown_at.is_none() {
            log::info!("tigon agent: shutting down");
            notify::tell("STOPPING=1");
            for n in &self.nodes {
                n.served.set_state(STATE_SHUTDOWN);
            }
            self.shutdown_at = Some(Instant::now());
        }
        let pending: usize = self.nodes.iter().map(|n| n.eng.pending_ops()).sum();
        self.shutdown_at.is_some_and(|t| {
            t.elapsed() >= Duration::from_millis(200)
                || pending == 0 && t.elapsed() >= Duration::from_millis(20)
        })
    }

    /// Sleeps until a client rings, a frame arrives on a link that can wake us, or an
    /// engine's next timer.
    fn sleep(&mut self) {
        let wait = self.sleep_budget();
        // Every node's clients must see the engine asleep before it sleeps (so that they
        // ring), and none may have a request waiting.
        let mut busy = false;
        for n in &self.nodes {
            busy |= n.served.set_asleep(true);
        }
        if !wait.is_zero() && !busy {
            let mut fds: Vec<_> = self
                .nodes
                .iter()
                .map(|n| n.control.bell.fd().as_fd())
                .collect();
            fds.extend(self.wire_fds.iter().map(|f| f.as_fd()));
            let t = Instant::now();
            tigon_shm::wake::poll_readable(&fds, wait);
            self.gaps.max_sleep_us = self.gaps.max_sleep_us.max(t.elapsed().as_micros() as u64);
            self.gaps.sleeps += 1;
        }
        for n in &self.nodes {
            n.served.set_asleep(false);
            n.control.bell.drain();
        }
    }

    /// How long the engine may sleep.
    fn sleep_budget(&self) -> Duration {
        let now = self.clock();
        let mut wait = self.idle.max;
        let mut pending = 0;
        for n in &self.nodes {
            wait = wait.min(Duration::from_nanos(n.eng.sleep_budget_ns(now)));
            pending += n.eng.pending_ops();
        }
        // A link that cannot wake us is polled at `--idle-poll-us` while operations are in
        // flight and for a second after the last work: a peer's eager messages may arrive
        // before any receive is posted, and left in the ring they would wait out the long
        // sleep (measured: 4 ms Waitalls and the sender's timeouts firing).
        let deaf = self.wire_fds.len() < self.nodes.len();
        if deaf && (pending > 0 || now.saturating_sub(self.last_work) < 1_000_000_000) {
            wait.min(self.idle.poll)
        } else {
            wait
        }
    }
}
