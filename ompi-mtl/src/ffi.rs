//! Open MPI 4.1's MTL interface as bindgen sees it in the installed devel headers, plus the C
//! shim's functions (csrc/shim.h). The only module that declares foreign items.

#![allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    dead_code,
    clippy::all,
    clippy::undocumented_unsafe_blocks
)]

include!(concat!(env!("OUT_DIR"), "/ompi.rs"));

use std::cell::UnsafeCell;
use std::os::raw::c_char;

/// A struct Open MPI reads (and may write) through a pointer we hand it: the exported
/// component and the module. Rust code only ever takes its raw address.
#[repr(transparent)]
pub struct Shared<T>(UnsafeCell<T>);

// SAFETY: Rust never creates references into the cell; Open MPI accesses the struct through
// raw pointers under its own rules (component and module tables are set up once, by one
// thread, before any communication).
unsafe impl<T> Sync for Shared<T> {}

impl<T> Shared<T> {
    pub const fn new(v: T) -> Self {
        Shared(UnsafeCell::new(v))
    }
    pub const fn get(&self) -> *mut T {
        self.0.get()
    }
}

/// A NUL-terminated, zero-padded C string field of `N` bytes (truncated to fit).
pub const fn c_name<const N: usize>(s: &str) -> [c_char; N] {
    let b = s.as_bytes();
    let mut out = [0 as c_char; N];
    let mut i = 0;
    while i < b.len() && i + 1 < N {
        out[i] = b[i] as c_char;
        i += 1;
    }
    out
}
