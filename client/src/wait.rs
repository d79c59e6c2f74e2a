//! How a thread that waits on the engine passes time.

use std::time::{Duration, Instant};
use tigon_engine::channel::Channel;

/// How a caller that waits on the engine passes time: it polls for a while (an answer
/// usually comes within microseconds), then sleeps on the channel's futex until the engine
/// queues a completion (the engine wakes it: about 2 µs), a couple of milliseconds at most so
/// liveness checks go on.
///
/// Never `sched_yield` or timed naps: on EEVDF kernels (Linux 6.6+) every yield pushes the
/// caller's virtual deadline a slice further, so a thread that yielded through a wait is
/// then starved for seconds by busy neighbours on its core; a timed sleep costs 25 µs or
/// more however short it is asked to be; and polling holds the core the engine may need.
pub(crate) struct Backoff(Instant);

const SPIN_BEFORE_SLEEP: Duration = Duration::from_micros(20);
const SLEEP_AT_MOST: Duration = Duration::from_millis(2);

impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff(Instant::now())
    }
    pub(crate) fn idle(&self, ch: &Channel) {
        if self.0.elapsed() < SPIN_BEFORE_SLEEP {
            std::hint::spin_loop();
        } else {
            ch.wait_completions(SLEEP_AT_MOST);
        }
    }
}
