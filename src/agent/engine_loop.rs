//! The engine thread: DPDK brought up on the engine's lcore, then one loop that polls the
//! engine (rx burst → demux → protocol → tx burst → timers → copy completions), serves the
//! clients' rings, takes the control thread's commands, and sleeps when there is nothing to do.

use super::args::{AgentArgs, Settings};
use super::control::Cmd;
use super::copy::AgentCopy;
use super::dpdk;
use super::idle::{self, Idle};
use super::link::PortLink;
use super::notify;
use super::serve::Served;
use super::stats::{self, LoopGaps};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};
use tigon_engine::channel::STATE_SHUTDOWN;
use tigon_engine::{Engine, Link};
use tigon_pmd::Eal;
use tigon_shm::wake::EventFd;

/// Client requests taken from one client's ring per loop.
const REQUEST_BURST: usize = 32;

/// How the engine thread talks to the control thread.
pub struct ToControl<'a> {
    pub cmds: Receiver<Cmd>,
    /// Clients the engine disconnected for misbehaving (by handle).
    pub evicted: Sender<u64>,
    /// Rung by the control thread and by clients whose requests find the engine asleep.
    pub bell: &'a EventFd,
}

/// Runs the engine until the agent is told to stop (SIGTERM / SIGINT).
pub fn run(a: &AgentArgs, s: &Settings, control: ToControl<'_>) -> Result<(), String> {
    let dp = dpdk::bring_up(a, s)?;
    let dma_threshold = s.dma_threshold;
    if dp.dma.is_some() && dma_threshold > s.mtu as usize {
        // The dmadev copies one received frame's payload at a time.
        log::warn!(
            "--dma-threshold {dma_threshold} exceeds the MTU ({}): the dmadev will copy \
             nothing (use --mtu 9000 or a lower --dma-threshold)",
            s.mtu
        );
    }
    let copy = AgentCopy::new(dp.dma, dma_threshold);
    let eng = Engine::new(s.engine.clone(), dp.mac, dp.link.max_frame(), copy)?;
    log::info!(
        "tigon agent: port {} ({}), mtu {}, lcore {}, socket {}, dma {}, idle {}",
        s.devargs,
        dp.mac,
        s.mtu,
        s.lcore,
        s.socket.display(),
        a.dma.as_deref().unwrap_or("none"),
        if s.spin { "spin" } else { "yield" }
    );
    let idle = Idle::new(s);
    if !s.spin {
        idle::share_core(s.nice);
    }
    // Serving from here on: the control thread listens and this loop answers it. Under
    // systemd (Type=notify) `systemctl start` returns now.
    notify::tell(&format!(
        "READY=1\nSTATUS=serving {} on {}",
        s.socket.display(),
        s.devargs
    ));
    let now = Instant::now();
    EngineLoop {
        eal: dp.eal,
        eng,
        link: dp.link,
        served: Served::default(),
        control,
        spin: s.spin,
        idle,
        // The link's own descriptors to sleep on: af_packet's sockets (memif has none DPDK
        // exposes; a sleeping engine then polls it every `--idle-poll-us`).
        wire_fds: tigon_shm::wake::packet_sockets(),
        t0: now,
        last_iter: 0,
        last_cpu: tigon_shm::signals::thread_cpu_ns(),
        gaps: LoopGaps::default(),
        loops: 0,
        last_work: now,
        last_beat: now,
        shutdown_at: None,
    }
    .run();
    Ok(())
}

struct EngineLoop<'a> {
    eal: Eal,
    eng: Engine<PortLink, AgentCopy>,
    link: PortLink,
    served: Served,
    control: ToControl<'a>,
    spin: bool,
    idle: Idle,
    wire_fds: Vec<OwnedFd>,
    /// The engine's clock starts here.
    t0: Instant,
    /// Clock and thread CPU time at the start of the last iteration.
    last_iter: u64,
    last_cpu: u64,
    /// Scheduling seen by the engine (a descheduled engine looks like a dead peer to the
    /// others).
    gaps: LoopGaps,
    loops: u32,
    last_work: Instant,
    last_beat: Instant,
    shutdown_at: Option<Instant>,
}

impl EngineLoop<'_> {
    fn run(&mut self) {
        loop {
            let now = self.start_iteration();
            let mut work = self.poll_engine(now);
            work += self.serve_clients();
            self.loops = self.loops.wrapping_add(1);
            if work == 0 || self.loops.is_multiple_of(64) {
                work += self.take_commands();
            }
            self.beat();
            if self.leaving() {
                return;
            }
            if work > 0 {
                self.last_work = Instant::now();
            } else if self.spin || self.last_work.elapsed() < self.idle.spin {
                std::hint::spin_loop();
            } else {
                self.sleep();
            }
        }
    }

    /// Nanoseconds on the engine's clock.
    fn clock(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    /// The engine's time now, noting the gap since the last iteration.
    ///
    /// The thread's CPU time is a real system call (CLOCK_THREAD_CPUTIME_ID, ~0.6 us here,
    /// against 24 ns for the vDSO's monotonic clock): it was read on every pass, ~11 times
    /// per message. Now it is read only when a gap is the longest yet (to tell a busy engine
    /// from a descheduled one) and every 64 passes to keep the base fresh, so the CPU time
    /// of the longest gap is an upper bound that includes up to 63 passes before it.
    fn start_iteration(&mut self) -> u64 {
        let now = self.clock();
        let gap = now.saturating_sub(self.last_iter);
        if self.gaps.is_longest(gap) {
            let cpu = tigon_shm::signals::thread_cpu_ns();
            self.gaps.note(gap, cpu.saturating_sub(self.last_cpu));
            self.last_cpu = cpu;
        } else {
            self.gaps.note(gap, 0);
            if self.loops.is_multiple_of(64) {
                self.last_cpu = tigon_shm::signals::thread_cpu_ns();
            }
        }
        self.last_iter = now;
        now
    }

    /// Frames in, protocol, frames out, timers, copy completions.
    fn poll_engine(&mut self, now: u64) -> usize {
        let work = self.eng.poll(&mut self.link, now);
        let spent = self.clock().saturating_sub(now) / 1000;
        self.gaps.max_poll_us = self.gaps.max_poll_us.max(spent);
        work
    }

    /// Clients' requests to the engine, the engine's completions to the clients; the control
    /// thread hears of clients disconnected meanwhile.
    fn serve_clients(&mut self) -> usize {
        let t = self.clock();
        let work = self.served.requests(&mut self.eng, REQUEST_BURST)
            + self.served.completions(&mut self.eng);
        let spent = self.clock().saturating_sub(t) / 1000;
        self.gaps.max_serve_us = self.gaps.max_serve_us.max(spent);
        for (client, _) in self.served.evicted.drain(..) {
            let _ = self.control.evicted.send(client);
        }
        work
    }

    /// The control thread's commands: attach, detach, stats.
    fn take_commands(&mut self) -> usize {
        let t = self.clock();
        let mut n = 0;
        while let Ok(c) = self.control.cmds.try_recv() {
            n += 1;
            match c {
                Cmd::Attach { ch, pid, reply } => {
                    let ext = dpdk::register(&self.eal, &ch);
                    let r = self
                        .served
                        .attach(&mut self.eng, ch, pid, ext)
                        .map(|(client, addr)| (client, self.link.addr_text(addr)));
                    let _ = reply.send(r);
                }
                Cmd::Detach { client } => self.served.detach(&mut self.eng, client),
                Cmd::Stats { reply } => {
                    let _ =
                        reply.send(stats::json(&self.eng, &self.served, &self.link, &self.gaps));
                }
            }
        }
        let spent = self.clock().saturating_sub(t) / 1000;
        self.gaps.max_cmds_us = self.gaps.max_cmds_us.max(spent);
        n
    }

    /// Every 50 ms, bumps each channel's heartbeat (clients watch it to tell a live agent).
    fn beat(&mut self) {
        if self.last_beat.elapsed() >= Duration::from_millis(50) {
            self.last_beat = Instant::now();
            self.served.beat();
        }
    }

    /// Once told to stop: tells the clients, gives acknowledgements in flight a moment, then
    /// says it is time to leave.
    fn leaving(&mut self) -> bool {
        if tigon_shm::signals::terminating() && self.shutdown_at.is_none() {
            log::info!("tigon agent: shutting down");
            notify::tell("STOPPING=1");
            self.served.set_state(STATE_SHUTDOWN);
            self.shutdown_at = Some(Instant::now());
        }
        self.shutdown_at.is_some_and(|t| {
            t.elapsed() >= Duration::from_millis(200)
                || self.eng.pending_ops() == 0 && t.elapsed() >= Duration::from_millis(20)
        })
    }

    /// Sleeps until a client rings, a frame arrives on a link that can wake us, or the
    /// engine's next timer.
    fn sleep(&mut self) {
        let wait = self.sleep_budget();
        if !wait.is_zero() && !self.served.set_asleep(true) {
            let mut fds = [self.control.bell.fd().as_fd(); 4];
            let n = 1 + self.wire_fds.len().min(3);
            for (slot, f) in fds[1..n].iter_mut().zip(&self.wire_fds) {
                *slot = f.as_fd();
            }
            let t = Instant::now();
            tigon_shm::wake::poll_readable(&fds[..n], wait);
            self.gaps.max_sleep_us = self.gaps.max_sleep_us.max(t.elapsed().as_micros() as u64);
            self.gaps.sleeps += 1;
        }
        self.served.set_asleep(false);
        self.control.bell.drain();
    }

    /// How long the engine may sleep.
    fn sleep_budget(&self) -> Duration {
        let wait = Duration::from_nanos(self.eng.sleep_budget_ns(self.clock())).min(self.idle.max);
        // A link that cannot wake us is polled at `--idle-poll-us` while operations are in
        // flight and for a second after the last work: a peer's eager messages may arrive
        // before any receive is posted, and left in the ring they would wait out the long
        // sleep (measured: 4 ms Waitalls and the sender's timeouts firing).
        if self.wire_fds.is_empty()
            && (self.eng.pending_ops() > 0 || self.last_work.elapsed() < Duration::from_secs(1))
        {
            wait.min(self.idle.poll)
        } else {
            wait
        }
    }
}
