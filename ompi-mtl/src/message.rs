//! Matched-probe messages: `MPI_Improbe` takes a message out of the agent's unexpected queue
//! and names it by a handle; Open MPI's `ompi_message_t` carries it (in `req_ptr`) to
//! `MPI_Imrecv`.

use crate::ffi::{self, ompi_communicator_t, ompi_message_t};
use std::os::raw::c_int;

/// A message taken by an improbe: what `req_ptr` points to.
pub struct Taken {
    pub handle: u64,
    /// Every byte of it was at the node (the agent said so): its receive completes at once.
    pub arrived: bool,
}

/// Allocates the message for a successful improbe into `*msg`.
pub fn matched(
    comm: *mut ompi_communicator_t,
    source: c_int,
    len: u64,
    taken: Taken,
    msg: *mut *mut ompi_message_t,
) -> c_int {
    let data = Box::into_raw(Box::new(taken));
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

/// Takes what [`matched`] stored out of a message, returns the message to Open MPI and sets
/// `*msg` to MPI_MESSAGE_NULL.
pub fn take(msg: *mut *mut ompi_message_t) -> Option<Taken> {
    // SAFETY: Open MPI passes a valid pointer to a message handle.
    if msg.is_null() || unsafe { *msg }.is_null() {
        return None;
    }
    // SAFETY: `*msg` is a message allocated by `matched` (imrecv only gets messages of this
    // MTL's improbe); its req_ptr is our box, taken exactly once here.
    let data = unsafe { ffi::tigon_message_take(msg) } as *mut Taken;
    if data.is_null() {
        return None;
    }
    // SAFETY: see above.
    Some(*unsafe { Box::from_raw(data) })
}
