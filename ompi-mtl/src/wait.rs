//! How a rank waits: the MTL's progress callback polls, yields where Open MPI asks
//! (`mpi_yield_when_idle`), polls on for a moment after a send to a process of this host
//! before its first yield (`mtl_tigon_spin_after_send_ns`), and sleeps on the channel only
//! after a long idle (`mtl_tigon_nap_after_us`) or in a bulk wait crowded by a computing
//! neighbour. The state those decisions read (activity, sends, bulk operations, the thread's
//! CPU time) lives here; the progress callback itself is in `request`.

use crate::state::mtl;
use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tigon_shm::clock::Clock;

thread_local! {
    /// When this thread last called progress and found nothing (`now_ns`).
    static LAST_EMPTY: Cell<u64> = const { Cell::new(0) };
}

/// Empty progress calls closer together than this are a wait loop (MPI_Wait, a blocking
/// send or receive, or MPI_Test in a loop with nothing else in it); farther apart, the
/// application computes between calls (MPI_Test in a compute loop) and must not be put to
/// sleep — that would steal its processor time, the opposite of what overlap wants.
pub(crate) const WAIT_LOOP_GAP_NS: u64 = 5_000;

/// Sleeping after a long idle (see `nap_when_idle`): poll window in ns, 0 = off.
static NAP_AFTER_NS: AtomicU64 = AtomicU64::new(0);
/// Empty progress calls closer than this are one wait loop (see `WAIT_LOOP_GAP_NS`).
static WAIT_GAP_NS: AtomicU64 = AtomicU64::new(WAIT_LOOP_GAP_NS);
/// When something last happened (an operation posted or completed), in `now_ns` time.
static LAST_ACTIVITY: AtomicU64 = AtomicU64::new(0);
/// The rank's clock: the time-stamp counter where it serves (a progress call reads the time
/// once or twice, and a wait makes millions of them: the vDSO's clock was ~6 % of the CPU
/// two ranks share in a ping-pong), calibrated for 1 ms on first use.
static CLOCK: OnceLock<Clock> = OnceLock::new();
/// The longest sleep per progress call: Open MPI's progress loop also drives other things.
const NAP_AT_MOST: Duration = Duration::from_millis(1);

pub(crate) fn now_ns() -> u64 {
    CLOCK
        .get_or_init(|| Clock::new(Duration::from_millis(1)))
        .now_ns()
}

/// From now on progress calls that find nothing to do, once nothing happened for `after`,
/// sleep until the agent queues a completion (1 ms at most) instead of returning at once:
/// a rank that waits long gives its core back. `yielding`: Open MPI yields between polls.
pub fn nap_when_idle(after: Duration, yielding: bool) {
    touch();
    NAP_AFTER_NS.store((after.as_nanos() as u64).max(1), Ordering::Relaxed);
    YIELDING.store(yielding, Ordering::Relaxed);
    // A yield can take a whole scheduler slice when a neighbour runs: those gaps are still
    // the wait loop.
    let gap = if yielding {
        10_000_000
    } else {
        WAIT_LOOP_GAP_NS
    };
    WAIT_GAP_NS.store(gap, Ordering::Relaxed);
}

/// Notes activity at `now`: operations completed.
pub(crate) fn note_activity(now: u64) {
    LAST_ACTIVITY.store(now, Ordering::Relaxed);
}

/// Notes activity: an operation was posted (the caller is likely to wait for it next).
pub fn touch() {
    LAST_ACTIVITY.store(now_ns(), Ordering::Relaxed);
}

/// Where waits yield (`mpi_yield_when_idle`): how long a thread polls after a send to a
/// process of this host before its wait may yield; 0: never (see `request::spin_after_send`).
static SPIN_AFTER_SEND_NS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// When this thread last posted a send to a process of this host (`now_ns`).
    static SENT_ON_HOST_AT: Cell<u64> = const { Cell::new(0) };
}

/// Whether the poll after a send pays: only where waits yield (a rank spinning on its own
/// core holds nothing up), and only where a rank's processor has at most one other rank of
/// the job on it (`local` ranks on this host, `cpus` this process may run on), likely the
/// receiver, who has nothing to do until the message is there; with more, the processor the
/// sender holds is one the others could use. On one vCPU of this VM (`tigon run --nodes 2`,
/// 8 B): 2 ranks, all-to-all 4.6 -> 3.9 µs and ping-pong 3.1 -> 2.2 µs with it; 3 ranks about
/// even; 4 ranks all-to-all 15.1 -> 16.1-17.4 µs, allreduce 16.5 -> 17.5-19.2 µs.
pub fn spin_after_send_pays(yielding: bool, local: usize, cpus: usize) -> bool {
    yielding && local <= 2 * cpus.max(1)
}

/// Sets the poll after a send (`mtl_tigon_spin_after_send_ns`), on where
/// [`spin_after_send_pays`].
pub fn set_spin_after_send(spin: Duration, on: bool) {
    let ns = if on { spin.as_nanos() as u64 } else { 0 };
    SPIN_AFTER_SEND_NS.store(ns, Ordering::Relaxed);
}

/// Notes a send posted (activity, like [`touch`]), to a process of this host or not.
pub fn touch_send(on_host: bool) {
    let now = now_ns();
    LAST_ACTIVITY.store(now, Ordering::Relaxed);
    if on_host {
        SENT_ON_HOST_AT.set(now);
    }
}

/// Until when a progress call at `now` that found nothing polls on (see
/// `request::spin_after_send`); `None`: it returns at once.
#[inline]
pub(crate) fn spin_until(now: u64) -> Option<u64> {
    let spin = SPIN_AFTER_SEND_NS.load(Ordering::Relaxed);
    if spin == 0 {
        return None;
    }
    let sent = SENT_ON_HOST_AT.get();
    let until = sent.saturating_add(spin);
    (sent != 0 && now < until).then_some(until)
}

/// Operations of at least this many bytes are bulk: a wait on one lasts at least its transfer
/// (256 KiB: 80 µs or more here), so a futex wake (a few µs) costs it little.
pub const BULK_BYTES: usize = 256 << 10;
/// Bulk operations of this process in flight.
static BULK: AtomicUsize = AtomicUsize::new(0);
/// Open MPI yields the processor between polls (mpi_yield_when_idle): ranks share cores.
static YIELDING: AtomicBool = AtomicBool::new(false);

/// An operation of `len` bytes is about to be handed to the client for notification.
pub fn bulk_started(len: usize) {
    if len >= BULK_BYTES {
        BULK.fetch_add(1, Ordering::Relaxed);
    }
}

/// An operation of `len` bytes counted by [`bulk_started`] is over (completed, or never
/// started after all).
pub fn bulk_over(len: usize) {
    if len >= BULK_BYTES {
        // Never below zero, whatever the order of a racing start and completion.
        let _ = BULK.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }
}

/// CPU time of this thread (ns): a system call (CLOCK_THREAD_CPUTIME_ID), so asked only
/// where a sleep is in question (a bulk operation in flight, or a long idle), and seldom
/// of a thread found computing.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `ts`, which we own.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

thread_local! {
    /// This thread's CPU time (ns; 0: none yet) and the wall time (`now_ns`) when it last
    /// looked, at an empty progress call (see `look`).
    static LAST_SAMPLE: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
    /// Empty progress calls left before this thread looks again: it computes between them.
    static SKIP: Cell<u32> = const { Cell::new(0) };
    /// When this thread's last sleep in a crowded bulk wait ended (`now_ns`; 0: none).
    static WOKE: Cell<u64> = const { Cell::new(0) };
    /// Looks in a row that found this thread running little (see `crowded_bulk_wait`).
    static LOW: Cell<u8> = const { Cell::new(0) };
    /// Empty progress calls since this thread last looked at its CPU time.
    static CALLS: Cell<u32> = const { Cell::new(0) };
}

/// A thread that slept in a crowded bulk wait and waits again this soon after (its
/// completion taken, the next operation posted: a rank that only moves data, such as a
/// pong) sleeps at once, without looking at its CPU time over a yield first.
const WAIT_AGAIN_NS: u64 = 20_000;

/// A thread found computing between its progress calls looks again only after this many
/// more (each look is a system call, in every MPI_Test of a computing rank).
const SKIP_AFTER_COMPUTING: u32 = 8;

/// Whether this thread, calling progress with nothing to do `gap` ns after its previous
/// such call while a bulk operation is in flight, waits in a loop that takes the processor
/// from a thread that computes on it: since its last look it only polled, and ran less than
/// a third of the time, at two looks in a row (the rest went to another task on its core,
/// which its yields let run — a rank computing with MPI_Test there yields at each test
/// too, and each of those hands the core back to this loop for a poll and two context
/// switches). Such a wait sleeps until its completion comes: the transfer is long, and
/// asleep it costs that computing rank nothing. A rank that itself computes between tests
/// ran most of that time and goes on polling.
fn crowded_bulk_wait(now: u64, gap: u64) -> bool {
    if BULK.load(Ordering::Relaxed) == 0 || !YIELDING.load(Ordering::Relaxed) {
        LOW.set(0);
        WOKE.set(0);
        return false;
    }
    if gap >= WAIT_GAP_NS.load(Ordering::Relaxed) {
        // Not a wait loop: the application came back after a long while.
        forget_sample();
        return false;
    }
    let woke = WOKE.replace(0);
    if woke != 0 && now.saturating_sub(woke) < WAIT_AGAIN_NS {
        return true;
    }
    let Some((cpu, wall, calls)) = look(now) else {
        return false;
    };
    if !polls_crowded(cpu, wall, calls) {
        LOW.set(0);
        SKIP.set(SKIP_AFTER_COMPUTING);
        return false;
    }
    // Twice in a row: once may be another rank's burst of real work (a pong handling its
    // message) in the middle of this one's compute loop.
    let low = LOW.get() + 1;
    LOW.set(low);
    low >= 2
}

/// A look at this thread's CPU time, at an empty progress call: since its previous look, the
/// CPU time it ran, the wall time, and the empty progress calls (this one included). `None`
/// without an earlier look, and while it skips looks (found computing lately: each look is
/// a system call).
fn look(now: u64) -> Option<(u64, u64, u32)> {
    let calls = CALLS.get() + 1;
    CALLS.set(calls);
    let skip = SKIP.get();
    if skip > 0 {
        SKIP.set(skip - 1);
        return None;
    }
    let cpu = thread_cpu_ns();
    let (last_cpu, last_wall) = LAST_SAMPLE.replace((cpu, now));
    CALLS.set(0);
    (last_cpu != 0).then(|| {
        (
            cpu.saturating_sub(last_cpu),
            now.saturating_sub(last_wall),
            calls,
        )
    })
}

/// A progress call that found nothing, then the caller's own work up to the next, within
/// this much CPU time: a poll (and a yield), not a computation between tests.
const POLL_CPU_MAX_NS: u64 = 6_000;

/// Whether a thread that ran `cpu` ns over `calls` empty progress calls only polled.
fn only_polls(cpu: u64, calls: u32) -> bool {
    calls > 0 && cpu < POLL_CPU_MAX_NS * calls as u64
}

/// Whether a thread that ran `cpu` ns of the last `wall` ns, over `calls` empty progress
/// calls, only polled (under [`POLL_CPU_MAX_NS`] of CPU per call) and ran less than a third
/// of the time: a waiter that another task on its core wants to share with. A thread that
/// computes between its calls, or runs little only because some unrelated task takes its
/// core, is not.
fn polls_crowded(cpu: u64, wall: u64, calls: u32) -> bool {
    only_polls(cpu, calls) && cpu.saturating_mul(3) < wall
}

fn forget_sample() {
    LAST_SAMPLE.set((0, 0));
    SKIP.set(0);
    WOKE.set(0);
    LOW.set(0);
    CALLS.set(0);
}

/// Sleeps if this progress call, which found nothing to do, is part of a wait that should;
/// returns whether it slept.
pub(crate) fn maybe_nap(now: u64) -> bool {
    let after = NAP_AFTER_NS.load(Ordering::Relaxed);
    if after == 0 {
        return false;
    }
    let last = LAST_EMPTY.replace(now);
    if crowded_bulk_wait(now, now.saturating_sub(last)) {
        if let Some(m) = mtl() {
            m.client.sleep_until_completion(NAP_AT_MOST);
        }
        let woke = now_ns();
        LAST_EMPTY.set(woke);
        forget_sample();
        WOKE.set(woke);
        return true;
    }
    if now.saturating_sub(last) > WAIT_GAP_NS.load(Ordering::Relaxed)
        || now.saturating_sub(LAST_ACTIVITY.load(Ordering::Relaxed)) < after
    {
        return false;
    }
    // Yielding, the gap between empty calls cannot tell a wait loop (a yield may last a
    // neighbour's whole slice) from a computation with MPI_Test every few µs, which must
    // never be put to sleep: the thread's CPU time per call can.
    if YIELDING.load(Ordering::Relaxed) {
        match look(now) {
            Some((cpu, _, calls)) if only_polls(cpu, calls) => {}
            Some(_) => {
                SKIP.set(SKIP_AFTER_COMPUTING);
                return false;
            }
            None => return false,
        }
    }
    if let Some(m) = mtl() {
        m.client.sleep_until_completion(NAP_AT_MOST);
        // The sleep is part of the wait loop, not a gap in it.
        LAST_EMPTY.set(now_ns());
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wait polls on after a send only where waits yield, only after a send to this host,
    /// and only until the send is `spin_after_send_ns` old.
    #[test]
    fn the_poll_after_a_send_is_for_yielding_waits_after_sends_on_this_host() {
        let spin = Duration::from_nanos(700);
        set_spin_after_send(spin, false);
        SENT_ON_HOST_AT.set(1_000_000);
        assert_eq!(
            spin_until(1_000_100),
            None,
            "a rank on its own core never waits"
        );
        set_spin_after_send(spin, true);
        SENT_ON_HOST_AT.set(0);
        assert_eq!(spin_until(100), None, "no send to this host yet");
        SENT_ON_HOST_AT.set(1_000_000);
        assert_eq!(spin_until(1_000_100), Some(1_000_700));
        assert_eq!(spin_until(1_000_700), None, "the send is old enough");
        // A send elsewhere leaves the last send on this host as it was.
        touch_send(false);
        assert_eq!(SENT_ON_HOST_AT.get(), 1_000_000);
        touch_send(true);
        let at = SENT_ON_HOST_AT.get();
        assert!(at > 0 && spin_until(at) == Some(at + 700));
        set_spin_after_send(Duration::ZERO, true);
        assert_eq!(spin_until(at), None, "0 turns it off");
        // Two ranks to a processor: the other is likely the receiver; more: not.
        assert!(spin_after_send_pays(true, 2, 1));
        assert!(spin_after_send_pays(true, 8, 4));
        assert!(!spin_after_send_pays(true, 3, 1));
        assert!(!spin_after_send_pays(true, 4, 1));
        assert!(
            !spin_after_send_pays(false, 2, 1),
            "not where waits do not yield"
        );
    }

    /// A pong waiting on a transfer while a rank computes 14 µs between tests polls (4 µs a
    /// call) and gets about 4 µs of every 18; the computing rank runs 14 µs a call; a rank
    /// that computes while an unrelated task takes most of its core is not a waiter either;
    /// two ranks that both wait get half each.
    #[test]
    fn only_a_polling_thread_that_ran_under_a_third_of_the_time_is_crowded() {
        assert!(polls_crowded(4_000, 18_000, 1));
        assert!(polls_crowded(36_000, 162_000, 9));
        assert!(!polls_crowded(14_000, 18_000, 1));
        assert!(
            !polls_crowded(14_000, 60_000, 1),
            "computing, its core taken"
        );
        assert!(!polls_crowded(9_000, 18_000, 2), "both waiting");
        assert!(!polls_crowded(0, 0, 0));
    }

    /// A rank computing 14 µs between tests, or even 7 µs, does not only poll; a yield loop
    /// (about 4 µs of CPU a call here, system time included) does.
    #[test]
    fn a_thread_computing_between_tests_does_not_only_poll() {
        assert!(only_polls(4_000, 1));
        assert!(only_polls(20_000, 9));
        assert!(!only_polls(14_000, 1));
        assert!(!only_polls(7_000, 1));
        assert!(!only_polls(63_000, 9));
        assert!(!only_polls(0, 0));
    }

    /// Bulk operations are counted from start to completion; small ones not at all; the
    /// count never goes below zero (a completion racing its start's count).
    #[test]
    fn bulk_operations_are_counted_and_never_below_zero() {
        let n = || BULK.load(Ordering::Relaxed);
        let base = n();
        bulk_started(BULK_BYTES - 1);
        assert_eq!(n(), base);
        bulk_started(BULK_BYTES);
        bulk_started(1 << 20);
        assert_eq!(n(), base + 2);
        bulk_over(BULK_BYTES);
        bulk_over(64);
        assert_eq!(n(), base + 1);
        bulk_over(1 << 20);
        assert_eq!(n(), base);
        if base == 0 {
            bulk_over(1 << 20);
            assert_eq!(n(), 0);
        }
    }
}
