//! Requests: the MTL's part of a PML request (`mtl_request_size` bytes that start with
//! `mca_mtl_request_t`), completions from the agent, and the progress callback.
//!
//! A request in flight is known to the client by its address (the `ctx` of
//! [`tigon_client::Client::notify`]); [`progress`] drains finished ones, fills the MPI status
//! and calls the PML's completion callback. `ctx` 0 marks a send that was already complete at
//! the MPI level (its data was copied into the channel).
//!
//! Nothing is written into the rank's memory for an operation that is not the one in flight
//! in that request: each completion names the client operation it finishes, which must be the
//! one the request holds ([`State::op`]) and still be in flight ([`State::phase`]). A receive
//! the program frees while it is active (MPI_Request_free, seen through the hook of
//! `tigon_hook_request_free`) is abandoned: the agent is told to stop writing its buffer
//! before MPI_Request_free returns, and its completion writes nothing either.

use crate::ffi::{self, mca_mtl_request_t, opal_convertor_t};
use crate::report;
use crate::report::trace;
use crate::state::{Mtl, mtl};
use std::cell::Cell;
use std::os::raw::c_int;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tigon_client::{Done, Error, Notified, Req};
use tigon_engine::channel::status;
use tigon_engine::matching::split_bits;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A nonblocking send; completes through the PML's callback.
    Send,
    /// A blocking send waiting on the stack of `mtl_send`.
    SendWait,
    /// A receive (irecv or imrecv).
    Recv,
}

/// Where an operation is ([`State::phase`]).
pub mod phase {
    /// Not started, or finished: a completion for it is stale and dropped.
    pub const IDLE: u8 = 0;
    pub const ACTIVE: u8 = 1;
    /// Its completion is writing the results into the program's memory.
    pub const COMPLETING: u8 = 2;
    /// A receive the program freed while active: its completion writes nothing.
    pub const ABANDONED: u8 = 3;
}

/// The MTL's state of one operation.
pub struct State {
    pub kind: Kind,
    /// Packed (send) or receive buffer, and its length.
    pub buf: *mut u8,
    pub len: usize,
    /// `buf` is a bounce buffer of the convertor's (non-contiguous datatype): unpack / free it.
    pub free_after: bool,
    pub convertor: *mut opal_convertor_t,
    /// The client's operation this request waits for (cancel, abandon, and the check of each
    /// completion). Set before the client is asked to notify it.
    pub op: Option<Req>,
    /// A receive the agent writes straight into `buf` (not through a channel buffer).
    pub direct: bool,
    /// See [`phase`].
    pub phase: AtomicU8,
    /// Blocking operations: set last by the completion, after which the waiter owns the request.
    pub done: AtomicBool,
    pub error: AtomicI32,
}

/// What the PML allocates for us behind its own request: `mtl_request_size` bytes.
#[repr(C)]
pub struct Request {
    /// Filled by the PML before each call: its ompi_request_t and completion callback.
    pub sup: mca_mtl_request_t,
    pub st: State,
}

impl State {
    pub fn new(kind: Kind, buf: *mut u8, len: usize, free_after: bool) -> State {
        State {
            kind,
            buf,
            len,
            free_after,
            convertor: std::ptr::null_mut(),
            op: None,
            direct: false,
            phase: AtomicU8::new(phase::ACTIVE),
            done: AtomicBool::new(false),
            error: AtomicI32::new(ffi::MPI_SUCCESS as c_int),
        }
    }
}

/// Initialises the MTL part of a PML request (the memory is uninitialised or holds a
/// finished operation; `sup` belongs to the PML and is left alone).
///
/// # Safety
/// `r` must point to a request of `mtl_request_size` bytes that no completion refers to.
pub unsafe fn start(r: *mut mca_mtl_request_t, st: State) -> *mut Request {
    let req = r.cast::<Request>();
    // SAFETY: the caller guarantees `mtl_request_size` (= size_of::<Request>()) bytes, aligned
    // by the PML's allocator; `write` does not read (or drop) the old contents.
    unsafe { std::ptr::addr_of_mut!((*req).st).write(st) };
    req
}

/// The MPI error for a failed transfer; tells the user once per process.
pub fn failure(m: &Mtl, e: &Error) -> c_int {
    if !m.failure_reported.swap(true, Ordering::AcqRel) {
        let (topic, what) = match e {
            Error::AgentGone(_) => ("agent gone", "tigon agent gone"),
            _ => ("peer failure", "tigon transfer failed"),
        };
        let reason = e.to_string();
        let line = format!("mtl:tigon: {what} on {}: {reason}", report::hostname());
        report::show_help(topic, &line, &report::hostname(), &reason);
        // The job usually ends right after this (MPI_ERRORS_ARE_FATAL), and ORTE's
        // show_help forwarding loses a message when the process ends before it went out, or
        // when several ranks fail at once (mpirun then prints "Data unpack would read past
        // end of buffer in show_help.c" and nothing of ours; helper-found, 5 of 10 agents
        // killed mid-transfer): the one line on the rank's own stderr always reaches the user.
        report::always(&line);
    }
    ffi::MPI_ERR_OTHER as c_int
}

fn is_cancelled(e: &Error) -> bool {
    matches!(e, Error::Failed { status: s, .. } if *s == status::CANCELLED)
}

/// Frees a send's bounce buffer.
fn free_send_buffer(st: &State) {
    if st.free_after && !st.buf.is_null() {
        // SAFETY: the convertor malloc'd this buffer for us (ompi_mtl_datatype_pack) and
        // nothing refers to it once the send finished.
        unsafe { libc::free(st.buf.cast()) };
    }
}

/// Finishes the operation `ctx` (the client's `op`) with `result`.
///
/// # Safety
/// `ctx` is 0 or the address of a [`Request`] whose operation was notified with it (the
/// request itself may have moved on to another operation: that is checked).
pub unsafe fn complete(m: &Mtl, ctx: u64, op: Req, result: tigon_client::Result<Done>) {
    trace!(
        "done {ctx:#x} {op:?}: {:?}",
        result.as_ref().map(|d| match d {
            Done::Received { status, .. } => format!("{status:?}"),
            d => format!("{d:?}"),
        })
    );
    if ctx == 0 {
        m.detached_sends.fetch_sub(1, Ordering::AcqRel);
        if let Err(e) = &result {
            // The send completed at the MPI level long ago: there is no request to fail, and
            // its receiver would wait forever. Like Open MPI's own transports on a fatal
            // error, end the job.
            failure(m, e);
            report::abort(&format!(
                "mtl:tigon: a message sent earlier by this process was lost ({e}); aborting \
                 the job"
            ));
        }
        return;
    }
    let req = ctx as *mut Request;
    // SAFETY: `ctx` is the address of a PML request (its memory stays allocated: the PML
    // keeps requests on a free list); only shared access to its state.
    let st = unsafe { &(*req).st };
    let sup = req.cast::<mca_mtl_request_t>();
    // The generation check: this completion is for the operation in flight in this request.
    let from = match st.phase.load(Ordering::Acquire) {
        p @ (phase::ACTIVE | phase::ABANDONED) if st.op == Some(op) => p,
        p => {
            report::always(&format!(
                "mtl:tigon: internal error: completion of {op:?} for request {ctx:#x}, which \
                 holds {:?} in phase {p}; ignored",
                st.op
            ));
            return;
        }
    };
    bulk_over(st.len);
    match st.kind {
        Kind::Send | Kind::SendWait => {
            let err = match &result {
                Ok(_) => ffi::MPI_SUCCESS as c_int,
                Err(e) => failure(m, e),
            };
            free_send_buffer(st);
            st.phase.store(phase::IDLE, Ordering::Release);
            if st.kind == Kind::SendWait {
                st.error.store(err, Ordering::Relaxed);
                // The waiter may return (and its stack frame go) as soon as it sees this.
                st.done.store(true, Ordering::Release);
            } else {
                // SAFETY: the PML request is live until its callback; after the callback it
                // may be freed, so nothing touches it afterwards.
                unsafe {
                    ffi::tigon_request_error(sup, err);
                    ffi::tigon_request_callback(sup);
                }
            }
        }
        Kind::Recv => {
            // Writing the program's memory from here: a free racing with us waits (see
            // `tigon_request_freeing`), one that came first has made us skip it.
            let live = from == phase::ACTIVE
                && st
                    .phase
                    .compare_exchange(
                        phase::ACTIVE,
                        phase::COMPLETING,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_ok();
            let (source, tag, err, count, cancelled) = recv_outcome(m, st, result, live);
            let mut err = err;
            // SAFETY: unpacks `count` received bytes from the bounce buffer into the user's
            // datatype and frees it (no-op for contiguous receives); for an abandoned receive
            // only frees it (count 0: nothing unpacked).
            let rc = unsafe {
                ffi::tigon_unpack(
                    st.convertor,
                    st.buf.cast(),
                    if live { count } else { 0 },
                    st.free_after,
                )
            };
            if rc != ffi::OMPI_SUCCESS && err == ffi::MPI_SUCCESS as c_int {
                err = ffi::MPI_ERR_INTERN as c_int;
            }
            st.phase.store(phase::IDLE, Ordering::Release);
            // SAFETY: the PML request is live until its callback, and untouched after it.
            unsafe {
                ffi::tigon_request_status(sup, source, tag, err, count, cancelled);
                ffi::tigon_request_callback(sup);
            }
        }
    }
}

/// A receive's MPI status (source, tag, error, count, cancelled); copies a payload that came
/// through a channel buffer into the receive buffer when `live`.
fn recv_outcome(
    m: &Mtl,
    st: &State,
    result: tigon_client::Result<Done>,
    live: bool,
) -> (c_int, c_int, c_int, usize, bool) {
    let nothing = |err| (ffi::MPI_ANY_SOURCE, ffi::MPI_ANY_TAG, err, 0, false);
    match result {
        Ok(Done::Received { status, data }) => {
            let mut count = status.received as usize;
            if let Some(v) = data {
                // Came through a channel buffer: copy it out.
                let n = v.len().min(st.len);
                if n > 0 && live {
                    // SAFETY: `st.buf` holds `st.len` writable bytes (the user's buffer or the
                    // convertor's bounce buffer) until this request completes, unless the
                    // program freed the request (then `live` is false).
                    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), st.buf, n) };
                    m.client.count_copied(n as u64);
                }
                count = n;
            }
            received(&status, count)
        }
        Ok(Done::ReceivedInChannel { status, lease }) => {
            let n = (lease.len() as usize).min(st.len);
            let dst = if live && n > 0 {
                // SAFETY: `st.buf` holds `st.len` writable bytes (the user's buffer or the
                // convertor's bounce buffer) until this request completes, unless the program
                // freed the request (then `live` is false); nothing else writes them meanwhile.
                Some(unsafe { std::slice::from_raw_parts_mut(st.buf, n) })
            } else {
                None
            };
            // Also when it is not live: the channel buffer goes back either way.
            let count = m.client.take_lease(&lease, dst).unwrap_or(0);
            received(&status, count)
        }
        Ok(other) => {
            report::always(&format!(
                "mtl:tigon: internal error: a receive completed as {other:?}"
            ));
            nothing(ffi::MPI_ERR_INTERN as c_int)
        }
        Err(e) if is_cancelled(&e) => (
            ffi::MPI_ANY_SOURCE,
            ffi::MPI_ANY_TAG,
            ffi::MPI_SUCCESS as c_int,
            0,
            true,
        ),
        // The agent refused to write a freed receive's buffer: nobody to tell.
        Err(_) if !live => nothing(ffi::MPI_SUCCESS as c_int),
        Err(e) => nothing(failure(m, &e)),
    }
}

/// A completed receive's (source, tag, error, count, cancelled).
fn received(status: &tigon_client::Status, count: usize) -> (c_int, c_int, c_int, usize, bool) {
    let err = if status.truncated {
        ffi::MPI_ERR_TRUNCATE as c_int
    } else {
        ffi::MPI_SUCCESS as c_int
    };
    let tag = split_bits(status.match_bits).1;
    (status.source as c_int, tag, err, count, false)
}

/// Called by the hook of `tigon_hook_request_free` when the program frees a receive request
/// (MPI_Request_free, or Open MPI freeing a completed one). An active receive is abandoned:
/// once this returns, neither the agent nor the MTL writes its buffer.
///
/// # Safety
/// Called by the shim with a request this MTL initialised (the hook is only installed by
/// `post_recv`), which the PML keeps allocated until its completion callback.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tigon_request_freeing(r: *mut mca_mtl_request_t) {
    // SAFETY: see above; shared access only.
    let st = unsafe { &(*r.cast::<Request>()).st };
    if st.kind != Kind::Recv {
        return;
    }
    match st.phase.compare_exchange(
        phase::ACTIVE,
        phase::ABANDONED,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        Ok(_) => {
            if st.direct
                && let (Some(m), Some(op)) = (mtl(), st.op)
            {
                // Waits for the agent's answer: after it, the agent writes nothing there. An
                // error (the agent gone) leaves nobody to write it either.
                let r = m.client.abandon(op);
                trace!("abandon {op:?}: {r:?}");
            }
        }
        // Its completion is writing the buffer right now (another thread): let it finish.
        Err(phase::COMPLETING) => {
            while st.phase.load(Ordering::Acquire) == phase::COMPLETING {
                std::hint::spin_loop();
            }
        }
        Err(_) => {}
    }
}

thread_local! {
    static DRAINED: Cell<Vec<Notified>> = const { Cell::new(Vec::new()) };
    /// When this thread last called progress and found nothing (ns since `EPOCH`).
    static LAST_EMPTY: Cell<u64> = const { Cell::new(0) };
}

/// Empty progress calls closer together than this are a wait loop (MPI_Wait, a blocking
/// send or receive, or MPI_Test in a loop with nothing else in it); farther apart, the
/// application computes between calls (MPI_Test in a compute loop) and must not be put to
/// sleep — that would steal its processor time, the opposite of what overlap wants.
const WAIT_LOOP_GAP_NS: u64 = 5_000;

/// Sleeping after a long idle (see `nap_when_idle`): poll window in ns, 0 = off.
static NAP_AFTER_NS: AtomicU64 = AtomicU64::new(0);
/// Empty progress calls closer than this are one wait loop (see `WAIT_LOOP_GAP_NS`).
static WAIT_GAP_NS: AtomicU64 = AtomicU64::new(WAIT_LOOP_GAP_NS);
/// When something last happened (an operation posted or completed), in ns since `EPOCH`.
static LAST_ACTIVITY: AtomicU64 = AtomicU64::new(0);
static EPOCH: OnceLock<Instant> = OnceLock::new();
/// The longest sleep per progress call: Open MPI's progress loop also drives other things.
const NAP_AT_MOST: Duration = Duration::from_millis(1);

fn now_ns() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
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

/// Notes activity: an operation was posted (the caller is likely to wait for it next).
pub fn touch() {
    LAST_ACTIVITY.store(now_ns(), Ordering::Relaxed);
}

/// Where waits yield (`mpi_yield_when_idle`): how long a thread polls after a send to a
/// process of this host before its wait may yield; 0: never (see [`spin_after_send`]).
static SPIN_AFTER_SEND_NS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// When this thread last posted a send to a process of this host (ns since `EPOCH`).
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
/// [`spin_after_send`]); `None`: it returns at once.
#[inline]
fn spin_until(now: u64) -> Option<u64> {
    let spin = SPIN_AFTER_SEND_NS.load(Ordering::Relaxed);
    if spin == 0 {
        return None;
    }
    let sent = SENT_ON_HOST_AT.get();
    let until = sent.saturating_add(spin);
    (sent != 0 && now < until).then_some(until)
}

/// A progress call that found nothing, shortly after this thread sent to a process of this
/// host, where waits yield: polls on until the agent has had the time to deliver the message
/// (`mtl_tigon_spin_after_send_ns`), and only then lets Open MPI yield; returns what
/// completed meanwhile. Ranks that share a processor take turns at each yield: yielding
/// before the message is there hands the processor to its receiver, which finds nothing and
/// yields it back — two context switches (~570 ns each on a 2-vCPU VM) per round, about three
/// switches per one-way message in a ping-pong. Polling 700 ns first took a small message's
/// one-way time from 3.1 to 2.1-2.4 µs between two emulated nodes, and from 2.9 to 2.0-2.2
/// µs within one (`tigon run`, NetPIPE 1-64 B, ranks on one vCPU).
#[inline]
fn spin_after_send(now: u64) -> usize {
    let Some(until) = spin_until(now) else {
        return 0;
    };
    loop {
        std::hint::spin_loop();
        let n = progress_now();
        if n > 0 {
            return n;
        }
        if now_ns() >= until {
            return 0;
        }
    }
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
fn maybe_nap(now: u64) -> bool {
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

/// Completes every finished operation; returns how many.
pub fn progress_now() -> usize {
    progress_at(None)
}

/// [`progress_now`], at time `now` if the caller has read the clock already (the activity
/// it notes is then that time, not a second read).
fn progress_at(now: Option<u64>) -> usize {
    let Some(m) = mtl() else { return 0 };
    // Taken out of the thread-local: a completion callback may re-enter progress.
    let mut v = DRAINED.take();
    let n = m.client.drain(&mut v);
    if !v.is_empty() && m.client.lends() {
        // A wait of this rank may be over: it may compute next, and must not be lent
        // frames to copy then (its next wait loop says it polls again within µs).
        m.client.not_polling();
    }
    for d in v.drain(..) {
        // SAFETY: every ctx handed to `notify` is 0 or a request's address.
        unsafe { complete(m, d.ctx, d.req, d.result) };
    }
    DRAINED.set(v);
    if n > 0 {
        LAST_ACTIVITY.store(now.unwrap_or_else(now_ns), Ordering::Relaxed);
    }
    n
}

thread_local! {
    /// When this thread's last progress call ended (`now_ns`).
    static LAST_CALL: Cell<u64> = const { Cell::new(0) };
}

/// Tells the agent this thread waits, polling, when this progress call follows the last
/// one within [`WAIT_LOOP_GAP_NS`] (a wait loop, or tests with next to nothing between
/// them): the frames of large receives may then be lent to this rank, which copies them
/// on its own core in the calls that follow; a rank computing between its calls leaves
/// that copy to the agent.
fn note_polling(m: &Mtl, now: u64) {
    if now.saturating_sub(LAST_CALL.get()) < WAIT_LOOP_GAP_NS {
        m.client.polling();
    }
}

/// The callback registered with `opal_progress_register`.
///
/// # Safety
/// Called by Open MPI's progress engine only (any thread).
pub unsafe extern "C" fn progress() -> c_int {
    // One clock read for an empty call (a wait loop makes millions, each followed by a
    // yield when ranks share a core: every read shows in the one-way time there).
    let now = now_ns();
    let lends = match mtl() {
        Some(m) if m.client.lends() => {
            note_polling(m, now);
            true
        }
        _ => false,
    };
    let mut n = progress_at(Some(now));
    if n == 0 {
        n = spin_after_send(now);
    }
    // Woken by a completion: take it now, and tell Open MPI there was work (it would yield
    // the processor otherwise, before its caller sees the completion).
    let napped = n == 0 && maybe_nap(now);
    if napped {
        n = progress_now();
    }
    // From the end of this call: copying lent frames (or a nap) may have taken a while;
    // a call that did nothing ended when it began. (Not kept where nothing is lent.)
    if lends {
        LAST_CALL.set(if n > 0 || napped { now_ns() } else { now });
    }
    n.min(c_int::MAX as usize) as c_int
}

static PROGRESS_REGISTERED: AtomicBool = AtomicBool::new(false);

/// Registers [`progress`] with Open MPI's progress engine.
pub fn register_progress() -> c_int {
    // SAFETY: `progress` is a plain function with the callback's signature, alive forever.
    let rc = unsafe { ffi::tigon_progress_register(Some(progress)) };
    if rc == ffi::OMPI_SUCCESS {
        PROGRESS_REGISTERED.store(true, Ordering::Release);
    }
    rc
}

/// Unregisters [`progress`], if it was registered.
pub fn unregister_progress() {
    if PROGRESS_REGISTERED.swap(false, Ordering::AcqRel) {
        // SAFETY: unregisters the callback registered in `register_progress`.
        unsafe { ffi::tigon_progress_unregister(Some(progress)) };
    }
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
