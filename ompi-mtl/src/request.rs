//! Requests: the MTL's part of a PML request (`mtl_request_size` bytes that start with
//! `mca_mtl_request_t`), completions from the agent, and the progress callback.
//!
//! A request in flight is known to the client by its address (the `ctx` of
//! [`tigon_client::Client::notify`]); [`progress`] drains finished ones, fills the MPI status
//! and calls the PML's completion callback. `ctx` 0 marks a send that was already complete at
//! the MPI level (its data was copied into the channel).

use crate::component::{Mtl, mtl};
use crate::ffi::{self, mca_mtl_request_t, opal_convertor_t};
use crate::report;
use crate::report::trace;
use std::cell::Cell;
use std::os::raw::c_int;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tigon_client::{Done, Error, Req};
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

/// The MTL's state of one operation.
pub struct State {
    pub kind: Kind,
    /// Packed (send) or receive buffer, and its length.
    pub buf: *mut u8,
    pub len: usize,
    /// `buf` is a bounce buffer of the convertor's (non-contiguous datatype): unpack / free it.
    pub free_after: bool,
    pub convertor: *mut opal_convertor_t,
    /// The client's handle, for cancel (receives).
    pub client_req: Option<Req>,
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
            client_req: None,
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
        report::show_help(
            topic,
            &format!("mtl:tigon: {what} on {}: {reason}", report::hostname()),
            &report::hostname(),
            &reason,
        );
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

/// Finishes the operation `ctx` with `result`.
///
/// # Safety
/// `ctx` is 0 or the address of a [`Request`] whose operation was notified with it and is
/// still pending.
unsafe fn complete(m: &Mtl, ctx: u64, result: tigon_client::Result<Done>) {
    trace!(
        "done {ctx:#x}: {:?}",
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
    // SAFETY: per the contract `req` is a live request; only shared access to its state.
    let st = unsafe { &(*req).st };
    let sup = req.cast::<mca_mtl_request_t>();
    match st.kind {
        Kind::Send | Kind::SendWait => {
            let err = match &result {
                Ok(_) => ffi::MPI_SUCCESS as c_int,
                Err(e) => failure(m, e),
            };
            free_send_buffer(st);
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
            let (source, tag, mut err, count, cancelled) = match result {
                Ok(Done::Received { status, data }) => {
                    let mut count = status.received as usize;
                    if let Some(v) = data {
                        // Came through a channel buffer: copy it out.
                        let n = v.len().min(st.len);
                        if n > 0 {
                            // SAFETY: `st.buf` holds `st.len` writable bytes (the user's
                            // buffer or the convertor's bounce buffer) until completion.
                            unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), st.buf, n) };
                        }
                        count = n;
                    }
                    let err = if status.truncated {
                        ffi::MPI_ERR_TRUNCATE as c_int
                    } else {
                        ffi::MPI_SUCCESS as c_int
                    };
                    let tag = split_bits(status.match_bits).1;
                    (status.source as c_int, tag, err, count, false)
                }
                Ok(other) => {
                    report::always(&format!(
                        "mtl:tigon: internal error: a receive completed as {other:?}"
                    ));
                    (
                        ffi::MPI_ANY_SOURCE,
                        ffi::MPI_ANY_TAG,
                        ffi::MPI_ERR_INTERN as c_int,
                        0,
                        false,
                    )
                }
                Err(e) if is_cancelled(&e) => (
                    ffi::MPI_ANY_SOURCE,
                    ffi::MPI_ANY_TAG,
                    ffi::MPI_SUCCESS as c_int,
                    0,
                    true,
                ),
                Err(e) => (
                    ffi::MPI_ANY_SOURCE,
                    ffi::MPI_ANY_TAG,
                    failure(m, &e),
                    0,
                    false,
                ),
            };
            // SAFETY: unpacks `count` received bytes from the bounce buffer into the user's
            // datatype and frees it (no-op for contiguous receives).
            let rc =
                unsafe { ffi::tigon_unpack(st.convertor, st.buf.cast(), count, st.free_after) };
            if rc != ffi::OMPI_SUCCESS && err == ffi::MPI_SUCCESS as c_int {
                err = ffi::MPI_ERR_INTERN as c_int;
            }
            // SAFETY: the PML request is live until its callback, and untouched after it.
            unsafe {
                ffi::tigon_request_status(sup, source, tag, err, count, cancelled);
                ffi::tigon_request_callback(sup);
            }
        }
    }
}

thread_local! {
    static DRAINED: Cell<Vec<(u64, tigon_client::Result<Done>)>> = const { Cell::new(Vec::new()) };
    /// When this thread last called progress and found nothing (ns since `EPOCH`).
    static LAST_EMPTY: Cell<u64> = const { Cell::new(0) };
}

/// Empty progress calls closer together than this are a wait loop (MPI_Wait, a blocking
/// send or receive, or MPI_Test in a loop with nothing else in it); farther apart, the
/// application computes between calls (MPI_Test in a compute loop) and must not be put to
/// sleep — that would steal its processor time, the opposite of what overlap wants.
const WAIT_LOOP_GAP_NS: u64 = 5_000;

/// Sleeping instead of sched_yield (see `nap_when_idle`): poll window in ns, 0 = off.
static NAP_AFTER_NS: AtomicU64 = AtomicU64::new(0);
/// When something last happened (an operation posted or completed), in ns since `EPOCH`.
static LAST_ACTIVITY: AtomicU64 = AtomicU64::new(0);
static EPOCH: OnceLock<Instant> = OnceLock::new();
/// The longest sleep per progress call: Open MPI's progress loop also drives other things.
const NAP_AT_MOST: Duration = Duration::from_millis(1);

fn now_ns() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// From now on progress calls that find nothing to do, once nothing happened for `after`,
/// sleep until the agent queues a completion (1 ms at most) instead of returning at once
/// (Open MPI's own wait would sched_yield, which on EEVDF kernels lets busy neighbours starve
/// the waiting process for seconds).
pub fn nap_when_idle(after: Duration) {
    touch();
    NAP_AFTER_NS.store((after.as_nanos() as u64).max(1), Ordering::Relaxed);
}

/// Notes activity: an operation was posted (the caller is likely to wait for it next).
pub fn touch() {
    LAST_ACTIVITY.store(now_ns(), Ordering::Relaxed);
}

fn maybe_nap() {
    let after = NAP_AFTER_NS.load(Ordering::Relaxed);
    if after == 0 {
        return;
    }
    let now = now_ns();
    let last = LAST_EMPTY.replace(now);
    if now.saturating_sub(last) > WAIT_LOOP_GAP_NS
        || now.saturating_sub(LAST_ACTIVITY.load(Ordering::Relaxed)) < after
    {
        return;
    }
    if let Some(m) = mtl() {
        m.client.sleep_until_completion(NAP_AT_MOST);
        // The sleep is part of the wait loop, not a gap in it.
        LAST_EMPTY.set(now_ns());
    }
}

/// Completes every finished operation; returns how many.
pub fn progress_now() -> usize {
    let Some(m) = mtl() else { return 0 };
    // Taken out of the thread-local: a completion callback may re-enter progress.
    let mut v = DRAINED.take();
    let n = m.client.drain(&mut v);
    for (ctx, r) in v.drain(..) {
        // SAFETY: every ctx handed to `notify` is 0 or a pending request's address.
        unsafe { complete(m, ctx, r) };
    }
    DRAINED.set(v);
    if n > 0 {
        touch();
    }
    n
}

/// The callback registered with `opal_progress_register`.
///
/// # Safety
/// Called by Open MPI's progress engine only (any thread).
pub unsafe extern "C" fn progress() -> c_int {
    let n = progress_now();
    if n == 0 {
        maybe_nap();
    }
    n.min(c_int::MAX as usize) as c_int
}
