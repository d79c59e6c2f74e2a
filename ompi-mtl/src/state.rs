//! What a rank's MTL holds between selection and finalize: the attached client, or why
//! tigon cannot be used although it was requested.

use std::ptr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use tigon_client::Client;

/// Everything a rank's MTL holds once attached.
pub struct Mtl {
    pub client: Client,
    /// Payloads up to this many bytes go through the channel's data buffers; longer ones are
    /// read and written in place by the agent.
    pub channel_max: u64,
    /// Sends already complete at the MPI level whose transfer is still in flight.
    pub detached_sends: AtomicUsize,
    /// A transfer failure has been reported to the user (once per process is enough).
    pub failure_reported: AtomicBool,
}

static MTL: AtomicPtr<Mtl> = AtomicPtr::new(ptr::null_mut());
/// Why the component cannot work although it was explicitly requested: selection went ahead
/// so that MPI_Init fails (in add_procs) instead of silently using another transport.
static UNUSABLE: Mutex<Option<String>> = Mutex::new(None);

/// The attached MTL, between selection and finalize.
pub fn mtl() -> Option<&'static Mtl> {
    let p = MTL.load(Ordering::Acquire);
    // SAFETY: `p` is null or came from `Box::into_raw` in `attach`; it is freed only
    // by `detach`, at finalize or component close, when MPI forbids further calls into the MTL
    // (the progress callback is unregistered before).
    unsafe { p.as_ref() }
}

/// Why tigon cannot be used although it was requested (MPI_Init then fails).
pub fn unusable() -> Option<String> {
    UNUSABLE.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Makes `m` the attached MTL (replacing any earlier one).
pub fn attach(m: Mtl) {
    detach();
    MTL.store(Box::into_raw(Box::new(m)), Ordering::Release);
}

/// Records why tigon cannot be used (see [`unusable`]).
pub fn set_unusable(reason: String) {
    *UNUSABLE.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason);
}

/// Drops the attached MTL (its client detaches from the agent).
pub fn detach() {
    let p = MTL.swap(ptr::null_mut(), Ordering::AcqRel);
    if !p.is_null() {
        // SAFETY: `p` came from `Box::into_raw` and the swap made this the only owner.
        drop(unsafe { Box::from_raw(p) });
    }
}
