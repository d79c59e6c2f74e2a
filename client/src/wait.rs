//! How a thread that waits on the engine passes time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tigon_engine::channel::Channel;

/// How a caller that waits on the engine passes time: it polls (yielding the processor
/// between polls when told to, as Open MPI does with mpi_yield_when_idle), and only after
/// [`set_wait_policy`]'s idle time (1 ms by default) sleeps on the channel's futex until the
/// engine queues a completion (the engine wakes it: about 2 µs), a couple of milliseconds at
/// most so liveness checks go on.
pub(crate) struct Backoff(Instant);

/// Poll this long before sleeping (ns; u64::MAX: never sleep).
static SLEEP_AFTER_NS: AtomicU64 = AtomicU64::new(1_000_000);
static YIELD: AtomicBool = AtomicBool::new(false);
const SLEEP_AT_MOST: Duration = Duration::from_millis(2);

/// How this process's blocking waits (probe, cancel, back-pressure) pass time: yield the
/// processor between polls or not, and sleep after `sleep_after` without an answer (`None`:
/// never; the MTL passes its `mtl_tigon_nap_after_us`).
pub fn set_wait_policy(yield_between_polls: bool, sleep_after: Option<Duration>) {
    YIELD.store(yield_between_polls, Ordering::Relaxed);
    let ns = sleep_after.map_or(u64::MAX, |d| d.as_nanos().min(u64::MAX as u128 - 1) as u64);
    SLEEP_AFTER_NS.store(ns, Ordering::Relaxed);
}

impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff(Instant::now())
    }
    /// How long since this wait began.
    pub(crate) fn waited(&self) -> Duration {
        self.0.elapsed()
    }

    pub(crate) fn idle(&self, ch: &Channel) {
        let after = SLEEP_AFTER_NS.load(Ordering::Relaxed);
        if (self.0.elapsed().as_nanos() as u64) < after {
            if YIELD.load(Ordering::Relaxed) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        } else {
            ch.wait_completions(SLEEP_AT_MOST);
        }
    }
}
