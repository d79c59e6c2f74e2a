//! Matched-probe messages: `MPI_Improbe` takes a message out of the agent's unexpected queue
//! and names it by a handle; Open MPI's `ompi_message_t` carries it (in `req_ptr`) to
//! `MPI_Imrecv`.

use crate::ffi::{self, ompi_communicator_t, ompi_message_t};
use std::os::raw::c_int;

/// What `req_ptr` points to.
struct Matched {
    handle: u64,
}

/// Allocates the message for a successful improbe into `*msg`.
pub fn matched(
    comm: *mut ompi_communicator_t,
    source: c_int,
    _tag: c_int,
    len: u64,
    handle: u64,
    msg: *mut *mut ompi_message_t,
) -> c_int {
    let data = Box::into_raw(Box::new(Matched { handle }));
    // SAFETY: `comm` is live; the message keeps `data` until `take`.
    let m = unsafe { ffi::tigon_message_alloc(comm, source, len as usize, data.cast()) };
    if m.is_null() {
        // SAFETY: `data` was not handed to anyone.
        drop(unsafe { Box::from_raw(data) });
        return ffi::OMPI_ERR_OUT_OF_RESOURCE;
    }
    // SAFETY: Open MPI passes a valid out-pointer.
    unsafe { *msg = m };
    ffi::OMPI_SUCCESS
}

/// Takes the handle out of a message from [`matched`], returns the message to Open MPI and
/// sets `*msg` to MPI_MESSAGE_NULL.
pub fn take(msg: *mut *mut ompi_message_t) -> Option<u64> {
    // SAFETY: Open MPI passes a valid pointer to a message handle.
    if msg.is_null() || unsafe { *msg }.is_null() {
        return None;
    }
    // SAFETY: `*msg` is a message allocated by `matched` (imrecv only gets messages of this
    // MTL's improbe); its req_ptr is our box, taken exactly once here.
    let data = unsafe { ffi::tigon_message_take(msg) } as *mut Matched;
    if data.is_null() {
        return None;
    }
    // SAFETY: see above.
    Some(unsafe { Box::from_raw(data) }.handle)
}
