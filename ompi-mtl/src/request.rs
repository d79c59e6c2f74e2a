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
use crate::wait;
use std::cell::Cell;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, Ordering};
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
    wait::bulk_over(st.len);
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
            // Also when it is not live: the channel buffer goes back either way. A payload
            // that cannot be read where the agent says it is fails the receive: a count of 0
            // with success would hand the program a buffer it never got.
            match m.client.take_lease(&lease, dst) {
                Ok(count) => received(&status, count),
                Err(e) => {
                    let (source, tag, _, _, _) = received(&status, 0);
                    (source, tag, failure(m, &e), 0, false)
                }
            }
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
}

/// A progress call that found nothing, shortly after this thread sent to a process of this
/// host, where waits yield: polls on until the agent has had the time to deliver the message
/// (`mtl_tigon_spin_after_send_ns`), and only then lets Open MPI yield; returns what
/// completed meanwhile. Ranks that share a processor take turns at each yield: yielding
/// before the message is there hands the processor to its receiver, which finds nothing and
/// yields it back — two context switches (~570 ns each on a 2-vCPU VM) per round, about three
/// switches per one-way message in a ping-pong. Polling 700 ns first took a small message's
/// one-way time from 3.1 to 2.1-2.4 µs between two emulated nodes, and from 2.9 to 2.0-2.2
/// µs within one (`tigon run`, NetPIPE 1-64 B, ranks on one vCPU). Since the channel carries
/// requests and completions in their ring slots (version 10) the agent delivers sooner: 600
/// ns against 700, interleaved pairs, 1.86-2.06 against 1.96-2.04 µs between two nodes
/// (faster in 6 of 8), 1.71-1.81 against 1.83-2.01 within one (6 of 6).
#[inline]
fn spin_after_send(now: u64) -> usize {
    let Some(until) = wait::spin_until(now) else {
        return 0;
    };
    loop {
        std::hint::spin_loop();
        let n = progress_now();
        if n > 0 {
            return n;
        }
        if wait::now_ns() >= until {
            return 0;
        }
    }
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
        wait::note_activity(now.unwrap_or_else(wait::now_ns));
    }
    n
}

thread_local! {
    /// When this thread's last progress call ended (`now_ns`).
    static LAST_CALL: Cell<u64> = const { Cell::new(0) };
}

/// Tells the agent this thread waits, polling, when this progress call follows the last
/// one within [`wait::WAIT_LOOP_GAP_NS`] (a wait loop, or tests with next to nothing between
/// them): the frames of large receives may then be lent to this rank, which copies them
/// on its own core in the calls that follow; a rank computing between its calls leaves
/// that copy to the agent.
fn note_polling(m: &Mtl, now: u64) {
    if now.saturating_sub(LAST_CALL.get()) < wait::WAIT_LOOP_GAP_NS {
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
    let now = wait::now_ns();
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
    let napped = n == 0 && wait::maybe_nap(now);
    if napped {
        n = progress_now();
    }
    // From the end of this call: copying lent frames (or a nap) may have taken a while;
    // a call that did nothing ended when it began. (Not kept where nothing is lent.)
    if lends {
        LAST_CALL.set(if n > 0 || napped { wait::now_ns() } else { now });
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
