//! The `--idle yield` policy: how long the engine polls after work, how long it sleeps, and
//! what it asks of the kernel to be woken fast and to run as soon as it is woken.

use super::args::Settings;
use std::time::Duration;

/// The `--idle yield` policy: how long to poll after work, how long to sleep, and the
/// CPU-latency request held meanwhile.
pub struct Idle {
    /// Keep polling this long after the last work.
    pub spin: Duration,
    /// The longest sleep on a link that cannot wake the engine, while it may be busy.
    pub poll: Duration,
    /// The longest sleep.
    pub max: Duration,
    _qos: Option<tigon_shm::wake::CpuLatency>,
}

impl Idle {
    /// [`Idle::spin`] in nanoseconds.
    pub fn spin_ns(&self) -> u64 {
        self.spin.as_nanos() as u64
    }

    /// The policy of checked settings (`--cpu-latency`, `--idle-spin-us`, `--idle-poll-us`).
    pub fn new(s: &Settings) -> Idle {
        let _qos = s
            .cpu_latency_us
            .and_then(|us| match tigon_shm::wake::CpuLatency::request(us) {
                Ok(q) => Some(q),
                Err(e) => {
                    log::warn!("/dev/cpu_dma_latency: {e}; wake-ups of idle cores may be slow");
                    None
                }
            });
        Idle {
            // 0 by default: a woken engine preempts the rank sharing its core, so every
            // microsecond it polls after its work is charged to that rank (measured here: an
            // 8-byte MPI_Isend took 39 µs with 20 µs of polling, 19 µs with none).
            spin: s.idle_spin,
            poll: s.idle_poll,
            // Heartbeats (every 50 ms) and the shutdown check bound the longest sleep.
            max: Duration::from_millis(10),
            _qos,
        }
    }
}

/// With `--idle yield`: the engine shares its core with ranks, so it asks to be woken
/// precisely and to run as soon as it is woken.
pub fn share_core(nice: i32) {
    tigon_shm::signals::set_timer_slack_ns(1000);
    // Sharing cores with ranks, the engine must run as soon as it is woken: it makes
    // progress for all of them. At nice 0 a pinned engine next to busy processes was
    // measured descheduled for 2-10 s at a time here (its peers then time out); at -10
    // it gets about nine times their weight, and it sleeps whenever it has nothing to do.
    set_nice(nice);
}

/// The engine thread's nice value (a warning when the agent may not set it).
pub fn set_nice(nice: i32) {
    if let Err(e) = tigon_shm::signals::set_thread_nice(nice) {
        log::warn!("engine thread: nice {nice}: {e} (needs CAP_SYS_NICE); running at 0");
    }
}
