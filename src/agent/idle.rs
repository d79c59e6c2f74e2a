//! The `--idle yield` policy: how long the engine polls after work, how long it sleeps, and
//! what it asks of the kernel to be woken fast and to run as soon as it is woken.

use super::args::AgentArgs;
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
    pub fn new(a: &AgentArgs, spin: bool) -> Result<Idle, String> {
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

/// With `--idle yield`: the engine shares its core with ranks, so it asks to be woken
/// precisely and to run as soon as it is woken.
pub fn share_core(nice: Option<i32>) {
    tigon_shm::signals::set_timer_slack_ns(1000);
    // Sharing cores with ranks, the engine must run as soon as it is woken: it makes
    // progress for all of them. At nice 0 a pinned engine next to busy processes was
    // measured descheduled for 2-10 s at a time here (its peers then time out); at -10
    // it gets about nine times their weight, and it sleeps whenever it has nothing to do.
    let nice = nice.unwrap_or(-10);
    if let Err(e) = tigon_shm::signals::set_thread_nice(nice) {
        log::warn!("engine thread: nice {nice}: {e} (needs CAP_SYS_NICE); running at 0");
    }
}
