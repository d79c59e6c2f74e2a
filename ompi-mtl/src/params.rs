//! The component's MCA parameters (registered by the C shim).

use crate::ffi;
use std::ffi::CStr;
use std::path::PathBuf;
use std::time::Duration;

/// The component's MCA parameters.
pub struct Params {
    pub priority: i32,
    pub verbose: i32,
    pub socket: Option<PathBuf>,
    pub channel_threshold: i32,
    pub finalize_timeout: Duration,
    /// Spin this long before napping, when the MTL does the waiting; `None`: never nap.
    pub nap_after: Option<Duration>,
}

/// The parameters' current values.
pub fn params() -> Params {
    // SAFETY: the shim returns a pointer to its static parameter block, valid for the life of
    // the process; Open MPI writes it only while registering variables (before any reader).
    let p = unsafe { &*ffi::tigon_params() };
    let socket = if p.socket.is_null() {
        None
    } else {
        // SAFETY: a non-null string variable is a NUL-terminated string owned by Open MPI's
        // variable system, alive until the variable is deregistered at component close.
        let s = unsafe { CStr::from_ptr(p.socket) };
        (!s.to_bytes().is_empty()).then(|| PathBuf::from(s.to_string_lossy().into_owned()))
    };
    Params {
        priority: p.priority,
        verbose: p.verbose,
        socket,
        channel_threshold: p.channel_threshold,
        finalize_timeout: Duration::from_millis(p.finalize_timeout_ms.max(0) as u64),
        nap_after: (p.nap_after_us >= 0).then(|| Duration::from_micros(p.nap_after_us as u64)),
    }
}
