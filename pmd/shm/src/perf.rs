//! The CPU's instruction counter for the calling thread (`perf_event_open`), for benchmarks
//! that report instructions per message where the CPU and the kernel offer the counter
//! (many VMs do not: then [`InstrCounter::this_thread`] says why and the caller reports none).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `struct perf_event_attr` of PERF_ATTR_SIZE_VER5 (112 bytes), as 64-bit words.
const ATTR_WORDS: usize = 14;
const PERF_TYPE_HARDWARE: u64 = 0;
const PERF_COUNT_HW_INSTRUCTIONS: u64 = 1;
/// Flag bits of the attr's bit-field word: count user space only.
const EXCLUDE_KERNEL: u64 = 1 << 5;
const EXCLUDE_HV: u64 = 1 << 6;

/// Counts the user-space instructions the calling thread retires from its creation on.
pub struct InstrCounter(OwnedFd);

impl InstrCounter {
    /// A counter on the calling thread, running from now.
    pub fn this_thread() -> io::Result<InstrCounter> {
        let mut attr = [0u64; ATTR_WORDS];
        // type (u32) and size (u32), little-endian in the first word.
        attr[0] = PERF_TYPE_HARDWARE | ((ATTR_WORDS as u64 * 8) << 32);
        attr[1] = PERF_COUNT_HW_INSTRUCTIONS;
        attr[5] = EXCLUDE_KERNEL | EXCLUDE_HV;
        // SAFETY: perf_event_open reads `size` bytes of the attr, which `attr` holds; pid 0
        // and cpu -1 count the calling thread on any CPU; the result is a new descriptor or -1.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                attr.as_ptr(),
                0 as libc::pid_t,
                -1 as libc::c_int,
                -1 as libc::c_int,
                0 as libc::c_ulong,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this descriptor to us, and nothing else owns it.
        Ok(InstrCounter(unsafe { OwnedFd::from_raw_fd(fd as i32) }))
    }

    /// Instructions counted so far.
    pub fn read(&self) -> io::Result<u64> {
        let mut v = 0u64;
        // SAFETY: reads at most 8 bytes into `v`, which is 8 bytes long.
        let n = unsafe {
            libc::read(
                self.0.as_raw_fd(),
                (&mut v as *mut u64).cast::<libc::c_void>(),
                8,
            )
        };
        if n != 8 {
            return Err(io::Error::last_os_error());
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_up_where_the_counter_exists() {
        match InstrCounter::this_thread() {
            Ok(c) => {
                let a = c.read().unwrap();
                let mut x = 0u64;
                for i in 0..10_000u64 {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
                }
                let b = c.read().unwrap();
                assert!(b > a + 10_000, "{a} -> {b} ({x})");
            }
            // This VM or kernel offers no counter: the error says so, nothing else happens.
            Err(e) => assert!(e.raw_os_error().is_some(), "{e}"),
        }
    }
}
