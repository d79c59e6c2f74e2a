//! A shared memory region: a memfd mapping that two processes see at once.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// A `MAP_SHARED` mapping of a memfd. The other side may write any byte at any time, so the
/// region hands out only atomics and copies, never references to plain bytes.
#[derive(Debug)]
pub struct Region {
    addr: NonNull<u8>,
    len: usize,
    hugetlb: bool,
    fd: OwnedFd,
}

// SAFETY: the mapping lives as long as the Region; all access is through atomics or raw
// copies, which are sound to perform from any thread.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

/// A field of /proc/meminfo (`"Hugepagesize"`, `"HugePages_Free"`): its number (kB for
/// sizes, a count for pages); `None` where it cannot be read.
pub fn meminfo(field: &str) -> Option<u64> {
    std::fs::read_to_string("/proc/meminfo")
        .ok()?
        .lines()
        .find_map(|l| {
            let v = l.strip_prefix(field)?.strip_prefix(':')?;
            v.split_whitespace().next()?.parse().ok()
        })
}

/// The default hugepage size in bytes (2 MiB where /proc/meminfo does not say).
pub fn hugepage_size() -> usize {
    meminfo("Hugepagesize").map_or(2 << 20, |kb| kb as usize * 1024)
}

impl Region {
    /// A new region of at least `len` bytes: hugetlb pages when `hugetlb` is set and the
    /// system has them free, else ordinary shared pages.
    pub fn create(name: &str, len: usize, hugetlb: bool) -> io::Result<Region> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty region"));
        }
        if hugetlb {
            // Without free hugepages, fall back to ordinary pages.
            if let Ok(r) = Self::create_with(name, len, true) {
                return Ok(r);
            }
        }
        Self::create_with(name, len, false)
    }

    fn create_with(name: &str, len: usize, huge: bool) -> io::Result<Region> {
        let page = if huge { hugepage_size() } else { 4096 };
        let len = len.div_ceil(page) * page;
        let cname = std::ffi::CString::new(name)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in name"))?;
        let flags = libc::MFD_CLOEXEC | if huge { libc::MFD_HUGETLB } else { 0 };
        // SAFETY: memfd_create reads a valid NUL-terminated string and returns a new fd or -1.
        let fd = unsafe { libc::memfd_create(cname.as_ptr(), flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: ftruncate on our own fd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut r = Self::map(fd, len)?;
        r.hugetlb = huge;
        // hugetlbfs reserves the pages at mmap time: a shortage fails above, never as SIGBUS.
        Ok(r)
    }

    /// Maps a region received from another process; `len` must not exceed the file's size.
    pub fn from_fd(fd: OwnedFd, len: usize) -> io::Result<Region> {
        // SAFETY: fstat writes into a zeroed stat buffer we own.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd is valid and st is a valid out-pointer.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if (st.st_size as u64) < len as u64 || len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "region smaller than announced",
            ));
        }
        Self::map(fd, len)
    }

    /// Maps `len` bytes of `fd` from `offset` (a multiple of the file's page size) for
    /// reading and writing: a region that is one part of a larger file (a hugetlb file when
    /// `hugetlb`), e.g. a channel in DPDK's own memory.
    pub fn from_fd_at(fd: OwnedFd, offset: u64, len: usize, hugetlb: bool) -> io::Result<Region> {
        // SAFETY: fstat writes into a zeroed stat buffer we own.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd is valid and st is a valid out-pointer.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let end = offset.checked_add(len as u64);
        if end.is_none_or(|e| (st.st_size as u64) < e) || len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "region smaller than announced",
            ));
        }
        let mut r = Self::map_at(fd, offset, len)?;
        r.hugetlb = hugetlb;
        Ok(r)
    }

    /// Keeps the mapping out of child processes (`MADV_DONTFORK`): a fork must not leave a
    /// second holder of memory the other side may hand to someone else once this process
    /// is gone.
    pub fn dont_fork(&self) -> io::Result<()> {
        // SAFETY: advice on exactly our own mapping; it changes no contents.
        let rc = unsafe { libc::madvise(self.addr.as_ptr().cast(), self.len, libc::MADV_DONTFORK) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn map(fd: OwnedFd, len: usize) -> io::Result<Region> {
        Self::map_at(fd, 0, len)
    }

    fn map_at(fd: OwnedFd, offset: u64, len: usize) -> io::Result<Region> {
        let file_off = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset out of range"))?;
        // SAFETY: a fresh shared mapping of our fd; the kernel picks the address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                file_off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let addr =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Region {
            addr,
            len,
            hugetlb: false,
            fd,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn is_hugetlb(&self) -> bool {
        self.hugetlb
    }
    /// The fd to pass to the other process.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }
    /// Where the region is mapped in this process (for registering it with a device).
    pub fn addr(&self) -> usize {
        self.addr.as_ptr() as usize
    }

    fn check(&self, off: usize, len: usize, align: usize) -> io::Result<()> {
        match off.checked_add(len) {
            Some(end) if end <= self.len && off.is_multiple_of(align) => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{len} bytes at offset {off} outside a {}-byte region (or misaligned)",
                    self.len
                ),
            )),
        }
    }

    /// The 32-bit atomic at `off` (4-byte aligned).
    pub fn atomic_u32(&self, off: usize) -> io::Result<&AtomicU32> {
        self.check(off, 4, 4)?;
        // SAFETY: in bounds and aligned (checked); the mapping outlives &self; AtomicU32 has
        // the layout of u32 and any bit pattern is valid.
        Ok(unsafe { &*self.addr.as_ptr().add(off).cast::<AtomicU32>() })
    }

    /// The 64-bit atomic at `off` (8-byte aligned).
    pub fn atomic_u64(&self, off: usize) -> io::Result<&AtomicU64> {
        self.check(off, 8, 8)?;
        // SAFETY: as for atomic_u32.
        Ok(unsafe { &*self.addr.as_ptr().add(off).cast::<AtomicU64>() })
    }

    /// Copies `out.len()` bytes at `off` out of the region.
    pub fn read(&self, off: usize, out: &mut [u8]) -> io::Result<()> {
        self.check(off, out.len(), 1)?;
        // SAFETY: the source range is inside the mapping (checked) and cannot overlap `out`,
        // which is memory of this process outside the mapping. Bytes the other side writes
        // concurrently may be torn; callers validate what they read.
        unsafe {
            std::ptr::copy_nonoverlapping(self.addr.as_ptr().add(off), out.as_mut_ptr(), out.len())
        };
        Ok(())
    }

    /// Copies `src` into the region at `off`.
    pub fn write(&self, off: usize, src: &[u8]) -> io::Result<()> {
        self.check(off, src.len(), 1)?;
        // SAFETY: the destination range is inside the mapping (checked) and distinct from `src`.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.addr.as_ptr().add(off), src.len())
        };
        Ok(())
    }

    /// Copies `len` bytes within the region, `from` → `to` (ranges may not overlap).
    pub fn copy_within(&self, from: usize, to: usize, len: usize) -> io::Result<()> {
        self.check(from, len, 1)?;
        self.check(to, len, 1)?;
        if from < to + len && to < from + len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "overlapping copy",
            ));
        }
        // SAFETY: both ranges are inside the mapping and do not overlap (checked).
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.addr.as_ptr().add(from),
                self.addr.as_ptr().add(to),
                len,
            )
        };
        Ok(())
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping we created; no references outlive self.
        unsafe { libc::munmap(self.addr.as_ptr().cast(), self.len) };
    }
}

/// A shared-memory region this process may only read (mapped `PROT_READ`): memory another
/// process owns and this one must not be able to change, e.g. the agent's received frames
/// as a rank sees them.
pub struct ReadOnlyRegion {
    addr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping lives as long as the value; all access is raw copies out of it.
unsafe impl Send for ReadOnlyRegion {}
// SAFETY: as above.
unsafe impl Sync for ReadOnlyRegion {}

impl std::fmt::Debug for ReadOnlyRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadOnlyRegion")
            .field("len", &self.len)
            .finish()
    }
}

impl ReadOnlyRegion {
    /// Maps `len` bytes of `fd` read-only (the fd is closed once mapped).
    pub fn from_fd(fd: OwnedFd, len: usize) -> io::Result<ReadOnlyRegion> {
        Self::from_fd_at(fd, 0, len)
    }

    /// Maps `len` bytes of `fd` from `offset` (a multiple of the file's page size) read-only
    /// (the fd is closed once mapped).
    pub fn from_fd_at(fd: OwnedFd, offset: u64, len: usize) -> io::Result<ReadOnlyRegion> {
        // SAFETY: fstat writes into a zeroed stat buffer we own.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd is valid and st is a valid out-pointer.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let file_off = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset out of range"))?;
        let end = offset.checked_add(len as u64);
        if end.is_none_or(|e| (st.st_size as u64) < e) || len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "region smaller than announced",
            ));
        }
        // SAFETY: a fresh read-only shared mapping of our fd; the kernel picks the address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                file_off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let addr =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(ReadOnlyRegion { addr, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `out.len()` bytes at `off` into `out`.
    pub fn read(&self, off: usize, out: &mut [u8]) -> io::Result<()> {
        match off.checked_add(out.len()) {
            Some(end) if end <= self.len => {}
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{} bytes at {off} overrun a {}-byte region",
                        out.len(),
                        self.len
                    ),
                ));
            }
        }
        // SAFETY: the source range is inside the mapping (checked) and cannot overlap `out`,
        // memory of this process outside the mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(self.addr.as_ptr().add(off), out.as_mut_ptr(), out.len())
        };
        Ok(())
    }
}

impl ReadOnlyRegion {
    /// Copies `len` bytes at `off` into `dst` at `dst_off` (a received payload into the
    /// receive buffer it was meant for, read where the frame arrived).
    pub fn copy_to(&self, off: usize, len: usize, dst: &RecvBuf, dst_off: usize) -> io::Result<()> {
        let fits = |o: usize, l: usize| o.checked_add(len).is_some_and(|e| e <= l);
        if !fits(off, self.len) || !fits(dst_off, dst.len) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{len} bytes from {off} of a {}-byte region to {dst_off} of a {}-byte \
                     buffer overrun one of them",
                    self.len, dst.len
                ),
            ));
        }
        // SAFETY: both ranges are in bounds (checked); `dst` is memory of this process that
        // `RecvBuf::new`'s caller vouched for, outside this read-only mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.addr.as_ptr().add(off),
                (dst.addr as *mut u8).add(dst_off),
                len,
            )
        };
        Ok(())
    }
}

/// A receive buffer of this process, which the agent writes while its receive is in flight
/// and which this process may fill from frames lent to it ([`ReadOnlyRegion::copy_to`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvBuf {
    addr: usize,
    len: usize,
}

impl RecvBuf {
    /// `len` bytes at `addr`.
    ///
    /// # Safety
    /// The memory must be writable memory of this process, valid and written by nothing else
    /// of this process until the receive it is posted for completes or is abandoned (the
    /// owner of the `RecvBuf` stops using it then).
    pub unsafe fn new(addr: *mut u8, len: usize) -> RecvBuf {
        RecvBuf {
            addr: addr as usize,
            len,
        }
    }
    pub fn addr(&self) -> u64 {
        self.addr as u64
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for ReadOnlyRegion {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping we created; no references outlive self.
        unsafe { libc::munmap(self.addr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lent payload is copied into a receive buffer of this process within both bounds.
    #[test]
    fn read_only_region_copies_into_a_receive_buffer_within_bounds() {
        let owner = Region::create("ro-copy", 8192, false).unwrap();
        owner.write(4000, b"payload").unwrap();
        let ro = ReadOnlyRegion::from_fd(owner.fd().try_clone().unwrap(), 8192).unwrap();
        let mut out = vec![0u8; 16];
        // SAFETY: `out` outlives `dst` and is not touched while `dst` is used.
        let dst = unsafe { RecvBuf::new(out.as_mut_ptr(), out.len()) };
        ro.copy_to(4000, 7, &dst, 9).unwrap();
        assert!(ro.copy_to(4000, 8, &dst, 9).is_err(), "past the buffer");
        assert!(ro.copy_to(8190, 7, &dst, 0).is_err(), "past the region");
        assert!(ro.copy_to(usize::MAX, 7, &dst, 0).is_err(), "overflow");
        assert_eq!(&out[9..], b"payload");
        assert_eq!(out[..9], [0; 9]);
    }

    /// A read-only mapping reads what the owner wrote, refuses reads past its end, and
    /// cannot be written (a write through the mapping would fault: mprotect shows PROT_READ).
    #[test]
    fn read_only_region_reads_the_owners_bytes() {
        let owner = Region::create("ro-test", 8192, false).unwrap();
        owner.write(100, b"frame bytes").unwrap();
        let ro = ReadOnlyRegion::from_fd(owner.fd().try_clone().unwrap(), 8192).unwrap();
        let mut b = [0u8; 11];
        ro.read(100, &mut b).unwrap();
        assert_eq!(&b, b"frame bytes");
        owner.write(100, b"FRAME").unwrap();
        ro.read(100, &mut b[..5]).unwrap();
        assert_eq!(&b[..5], b"FRAME", "the same pages");
        assert!(ro.read(8190, &mut b).is_err());
        assert!(ReadOnlyRegion::from_fd(owner.fd().try_clone().unwrap(), 1 << 20).is_err());
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let start = format!("{:x}-", ro.addr.as_ptr() as usize);
        let line = maps.lines().find(|l| l.starts_with(&start)).unwrap();
        assert!(
            line.split_whitespace().nth(1).unwrap().starts_with("r--s"),
            "{line}"
        );
    }

    /// A range of the file from an offset: the bytes there, and nothing past the file.
    #[test]
    fn read_only_region_maps_a_range_from_an_offset() {
        let owner = Region::create("ro-off", 3 * 4096, false).unwrap();
        owner.write(4096 + 10, b"second page").unwrap();
        let ro = ReadOnlyRegion::from_fd_at(owner.fd().try_clone().unwrap(), 4096, 8192).unwrap();
        let mut b = [0u8; 11];
        ro.read(10, &mut b).unwrap();
        assert_eq!(&b, b"second page");
        assert!(ro.read(8190, &mut b).is_err(), "the range's end");
        let fd = || owner.fd().try_clone().unwrap();
        assert!(
            ReadOnlyRegion::from_fd_at(fd(), 8192, 8192).is_err(),
            "past the file"
        );
        assert!(ReadOnlyRegion::from_fd_at(fd(), u64::MAX, 4096).is_err());
    }

    /// A read-write range of the file from an offset: writes reach the owner's mapping, the
    /// range ends where it says, and `dont_fork` marks the mapping so.
    #[test]
    fn region_maps_a_writable_range_from_an_offset() {
        let owner = Region::create("rw-off", 3 * 4096, false).unwrap();
        let fd = || owner.fd().try_clone().unwrap();
        let r = Region::from_fd_at(fd(), 4096, 8192, false).unwrap();
        r.write(10, b"from the range").unwrap();
        let mut b = [0u8; 14];
        owner.read(4096 + 10, &mut b).unwrap();
        assert_eq!(&b, b"from the range");
        assert!(r.write(8190, b"past").is_err(), "the range's end");
        assert!(
            Region::from_fd_at(fd(), 8192, 8192, false).is_err(),
            "past the file"
        );
        r.dont_fork().unwrap();
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let start = format!("{:x}-", r.addr());
        let flags = smaps
            .split_inclusive('\n')
            .skip_while(|l| !l.starts_with(&start))
            .find(|l| l.starts_with("VmFlags:"))
            .unwrap();
        assert!(flags.contains(" dc"), "MADV_DONTFORK shows as dc: {flags}");
    }

    #[test]
    fn shared_between_two_mappings() {
        let a = Region::create("t", 10_000, false).unwrap();
        let fd = a.fd().try_clone().unwrap();
        let b = Region::from_fd(fd, a.len()).unwrap();
        a.write(100, b"hello").unwrap();
        let mut out = [0u8; 5];
        b.read(100, &mut out).unwrap();
        assert_eq!(&out, b"hello");
        a.atomic_u32(8)
            .unwrap()
            .store(7, std::sync::atomic::Ordering::Release);
        assert_eq!(
            b.atomic_u32(8)
                .unwrap()
                .load(std::sync::atomic::Ordering::Acquire),
            7
        );
    }

    #[test]
    fn out_of_bounds_and_misaligned_refused() {
        let a = Region::create("t", 4096, false).unwrap();
        assert!(a.write(4095, b"ab").is_err());
        assert!(a.read(usize::MAX, &mut [0u8; 2]).is_err());
        assert!(a.atomic_u32(2).is_err());
        assert!(a.atomic_u64(4096).is_err());
        let fd = a.fd().try_clone().unwrap();
        assert!(
            Region::from_fd(fd, 1 << 20).is_err(),
            "larger than the file"
        );
    }
}
