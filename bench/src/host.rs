//! How fast the host runs right now, for the reports: this VM switches between a fast and a
//! slow mode within minutes (`tigon bench engine` 13 M against 5.5 M small messages/s), and
//! the slow mode doubles every cross-core hand-off tigon makes while it hardly changes
//! Open MPI's TCP path, so a figure means little without the mode it was measured in.
//!
//! Two probes, ~50 ms together: the round trip of one cache line between threads on CPU 0
//! and CPU 1 (what a ring between a rank and the engine costs), and the time of one step of
//! a dependent multiply-add chain on one core (the core's own speed).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One probe of the host.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Host {
    /// Round trip of a cache line between CPU 0 and CPU 1 (ns); `None` with one CPU, or
    /// when the probe could not finish in [`BUDGET`] (a partner thread hardly ever running:
    /// a CPU taken by something else, or valgrind, which runs one thread at a time).
    pub cross_core_rtt_ns: Option<f64>,
    /// One step of a dependent 64-bit multiply-add chain (ns).
    pub op_ns: f64,
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.cross_core_rtt_ns {
            Some(rtt) => write!(f, "cross-core round trip {rtt:.0} ns, ")?,
            None => write!(f, "no cross-core figure (one CPU, or CPU 1 busy), ")?,
        }
        write!(f, "{:.2} ns per dependent multiply-add", self.op_ns)
    }
}

/// Round trips of the cross-core probe.
const ROUND_TRIPS: u64 = 200_000;
/// The probe gives up on a partner that does not answer (a CPU taken by something else).
const PATIENCE: Duration = Duration::from_millis(500);
/// The cross-core probe gives up after this long in all: under valgrind its threads take
/// turns on one scheduler slice per hop, and 200,000 round trips would take hours.
const BUDGET: Duration = Duration::from_secs(2);
/// Steps of the single-core probe.
const STEPS: u64 = 20_000_000;

/// Probes the host (see the module's doc).
pub fn probe() -> Host {
    // Tried whatever this thread's own placement (a benchmark may have pinned it): where
    // there is no CPU 1, placing the partner there fails and the probe says "one CPU".
    Host {
        cross_core_rtt_ns: cross_core_rtt(),
        op_ns: op_ns(),
    }
}

/// A line for the reports: "host: ..." (the time of day lets runs be matched to modes).
pub fn line(h: &Host) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
        % 86_400;
    format!(
        "host ({:02}:{:02}:{:02} UTC): {h}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

fn op_ns() -> f64 {
    let mut x: u64 = std::hint::black_box(1);
    let t = Instant::now();
    for _ in 0..STEPS {
        // black_box: without it the compiler folds runs of steps into one.
        x = std::hint::black_box(x)
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
    }
    std::hint::black_box(x);
    t.elapsed().as_nanos() as f64 / STEPS as f64
}

/// Ping-pong of one counter between a thread on CPU 1 and this one on CPU 0; `None` when
/// the threads cannot be placed so or the partner stalls.
fn cross_core_rtt() -> Option<f64> {
    let flag = Arc::new(AtomicU64::new(0));
    let theirs = flag.clone();
    let partner = std::thread::spawn(move || -> bool {
        if tigon_shm::process::set_affinity(&[1]).is_err() {
            theirs.store(u64::MAX, Ordering::Release);
            return false;
        }
        for i in 0..ROUND_TRIPS {
            if !wait_for(&theirs, 2 * i + 1) {
                return false;
            }
            theirs.store(2 * i + 2, Ordering::Release);
        }
        true
    });
    // Back on all CPUs afterwards: the caller's own placement is not ours to keep.
    let before = tigon_shm::process::affinity().ok();
    let placed = tigon_shm::process::set_affinity(&[0]).is_ok();
    let mut ok = placed;
    let t = Instant::now();
    for i in 0..ROUND_TRIPS {
        if !ok {
            break;
        }
        flag.store(2 * i + 1, Ordering::Release);
        ok = wait_for(&flag, 2 * i + 2);
        if i % 1024 == 1023 && t.elapsed() > BUDGET {
            ok = false;
        }
    }
    let elapsed = t.elapsed();
    if !ok {
        // Releases a partner still waiting.
        flag.store(u64::MAX, Ordering::Release);
    }
    let partner_ok = partner.join().unwrap_or(false);
    if let Some(cpus) = before {
        let _ = tigon_shm::process::set_affinity(&cpus);
    }
    (ok && partner_ok).then(|| elapsed.as_nanos() as f64 / ROUND_TRIPS as f64)
}

/// Spins until `flag` holds `want` (true), or holds `u64::MAX` or stays unchanged past
/// [`PATIENCE`] (false).
fn wait_for(flag: &AtomicU64, want: u64) -> bool {
    let mut spins = 0u32;
    let mut since: Option<Instant> = None;
    loop {
        match flag.load(Ordering::Acquire) {
            v if v == want => return true,
            u64::MAX => return false,
            _ => {}
        }
        std::hint::spin_loop();
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(4096) {
            let start = *since.get_or_insert_with(Instant::now);
            if start.elapsed() > PATIENCE {
                return false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_measures_something_and_leaves_the_placement_as_it_was() {
        let before = tigon_shm::process::affinity().ok();
        let h = probe();
        assert!(h.op_ns > 0.0 && h.op_ns < 1_000.0, "{h}");
        if let Some(rtt) = h.cross_core_rtt_ns {
            assert!(rtt > 0.0, "{h}");
        }
        assert_eq!(tigon_shm::process::affinity().ok(), before);
        assert!(line(&h).starts_with("host ("), "{}", line(&h));
    }
}
