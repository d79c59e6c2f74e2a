//! What the MTL tells the user: Open MPI's output streams and show_help messages
//! (help-mtl-tigon.txt), with a plain-text fallback when the help file is not installed.

use crate::ffi;
use std::ffi::{CStr, CString};
use std::os::raw::c_char;

fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', " ")).expect("NULs replaced")
}

/// A line on Open MPI's output (always shown).
pub fn always(msg: &str) {
    let m = cstring(msg);
    // SAFETY: `m` is a valid C string for the duration of the call.
    unsafe { ffi::tigon_output(0, m.as_ptr()) };
}

/// A line shown at MCA verbosity `level` or above (`--mca mtl_tigon_verbose N`).
pub fn verbose(level: i32, msg: &str) {
    let m = cstring(&format!("mtl:tigon: {msg}"));
    // SAFETY: `m` is a valid C string for the duration of the call.
    unsafe { ffi::tigon_output(level.max(1), m.as_ptr()) };
}

/// A help-mtl-tigon.txt message with two arguments, or `fallback` when the file is missing.
pub fn show_help(topic: &str, fallback: &str, a1: &str, a2: &str) {
    let (t, f, x, y) = (cstring(topic), cstring(fallback), cstring(a1), cstring(a2));
    // SAFETY: all four are valid C strings for the duration of the call.
    unsafe { ffi::tigon_show_help(t.as_ptr(), f.as_ptr(), x.as_ptr(), y.as_ptr()) };
}

/// Ends this process through Open MPI's runtime (which ends the job), after printing `msg`.
pub fn abort(msg: &str) -> ! {
    let m = cstring(msg);
    // SAFETY: `m` is a valid C string; ompi_rte_abort does not return.
    unsafe { ffi::tigon_abort(ffi::OMPI_ERR_UNREACH, m.as_ptr()) };
    std::process::abort()
}

/// This process's host name.
pub fn hostname() -> String {
    // SAFETY: the shim returns a string owned by Open MPI for the life of the process.
    c_str(unsafe { ffi::tigon_hostname() })
}

static TRACE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Turns the per-operation trace on (`mtl_tigon_verbose` 100 or more).
pub fn set_trace(on: bool) {
    TRACE.store(on, std::sync::atomic::Ordering::Relaxed);
}

pub fn tracing() -> bool {
    TRACE.load(std::sync::atomic::Ordering::Relaxed)
}

/// One line per operation on stderr, for debugging (`--mca mtl_tigon_verbose 100`).
macro_rules! trace {
    ($($arg:tt)*) => {
        if $crate::report::tracing() {
            eprintln!("mtl:tigon[{}] {}", std::process::id(), format!($($arg)*));
        }
    };
}
pub(crate) use trace;

/// Converts a C string from Open MPI (may be null) for messages.
pub fn c_str(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: the shim returns NUL-terminated strings owned by Open MPI that outlive this call.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}
