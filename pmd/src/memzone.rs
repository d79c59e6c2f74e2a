//! DPDK's own memory shared read-only with other processes: a memzone whose bytes other
//! processes map from the file behind DPDK's memory (a memfd per memseg list with
//! `--in-memory --single-file-segments`). What a memif zero-copy port's process needs to share
//! frames: that port reaches only DPDK's memory, and only the first memseg list of it.

use std::ffi::{CString, c_int, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;

use tigon_dpdk_sys as sys;

use crate::eal::Eal;
use crate::error::{Error, Result};
use crate::extmem::{Backing, ExtMem, default_hugepage_size};

/// Longest memzone name DPDK takes (RTE_MEMZONE_NAMESIZE less its NUL).
const MEMZONE_NAME_MAX: usize = 31;

/// The first memseg list `rte_memseg_walk` meets with a segment in use (its address).
#[derive(Default)]
struct First {
    msl: usize,
}

/// Records the list of the first segment the walk meets, and stops it.
unsafe extern "C" fn first_list(
    msl: *const sys::rte_memseg_list,
    _ms: *const sys::rte_memseg,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: `arg` is the `First` that `shared_memzone` passed, alive for the walk.
    unsafe { (*arg.cast::<First>()).msl = msl as usize };
    1
}

impl ExtMem {
    /// At least `len` bytes (whole hugepages) of DPDK's memory, reserved as a memzone named
    /// `name`, that other processes may map read-only: [`ExtMem::fd`] is a read-only
    /// descriptor of the file behind it and [`ExtMem::file_offset`] where the memzone starts
    /// in it. Checked with DPDK's own view of its memory: the memzone lies in one memseg
    /// list, the first one that has memory (what memif's zero-copy mode offers its peer as
    /// its region 1, the one every buffer it passes must lie in), within the segments in use
    /// now, and its pages are consecutive in that list's file. Needs hugepages,
    /// `--in-memory` (or hugetlbfs files) and `--single-file-segments`.
    ///
    /// The memzone is never freed (see `Drop`): other processes may map it as long as the
    /// EAL lives.
    pub fn shared_memzone(eal: &Eal, name: &str, len: usize) -> Result<Arc<ExtMem>> {
        if eal.no_huge() {
            return Err(Error::InvalidArgument(
                "DPDK memory shared with other processes needs hugepages".into(),
            ));
        }
        if name.is_empty() || name.len() > MEMZONE_NAME_MAX || len == 0 {
            return Err(Error::InvalidArgument(format!(
                "memzone `{name}` of {len} B: a name of 1..={MEMZONE_NAME_MAX} bytes and a \
                 size > 0 needed"
            )));
        }
        let page = default_hugepage_size();
        let len = len.div_ceil(page) * page;
        let cname = CString::new(name)
            .map_err(|_| Error::InvalidArgument(format!("memzone name `{name}` has a NUL")))?;
        // SAFETY: the EAL is initialised (we hold a handle); cname is a valid C string.
        let mz = unsafe {
            sys::rte_memzone_reserve_aligned(
                cname.as_ptr(),
                len,
                sys::rte_socket_id() as i32,
                0,
                page as u32,
            )
        };
        let mz = NonNull::new(mz.cast_mut())
            .ok_or_else(|| Error::dpdk(format!("reserving memzone `{name}` of {len} B"), -1))?;
        // SAFETY: a live memzone we reserved; its descriptor is DPDK's and stays put.
        let addr = unsafe { (*mz.as_ptr()).__bindgen_anon_1.addr } as *mut u8;
        match describe(addr, len, page) {
            Ok((fd, file_offset, iovas)) => Ok(Arc::new(ExtMem {
                addr: NonNull::new(addr).ok_or_else(|| Error::io("memzone at address 0"))?,
                len,
                page_size: page,
                hugetlb: true,
                iovas,
                fd,
                file_offset,
                backing: Backing::Memzone,
                _eal: eal.clone(),
            })),
            Err(e) => {
                // SAFETY: our memzone, not handed to anyone.
                unsafe { sys::rte_memzone_free(mz.as_ptr()) };
                Err(e)
            }
        }
    }
}

/// [start, end) of the first memseg list that has memory, as far as its segments in use
/// reach (what memif's zero-copy mode offers its peer as region 1 when it connects now);
/// `None` without DPDK memory.
pub(crate) fn first_list_in_use() -> Option<(usize, usize)> {
    let mut first = First::default();
    // SAFETY: the callback only records its list; `first` outlives the walk.
    unsafe { sys::rte_memseg_walk(Some(first_list), (&raw mut first).cast()) };
    // SAFETY: a list descriptor DPDK gave us (or null), alive as long as the EAL.
    let l = unsafe { (first.msl as *const sys::rte_memseg_list).as_ref() }?;
    // SAFETY: reading DPDK's list descriptor.
    let base = unsafe { l.__bindgen_anon_1.base_va } as usize;
    let in_use = l.memseg_arr.count as usize * l.page_sz as usize;
    Some((base, base + in_use))
}

/// For `len` bytes of DPDK memory at `addr` (both multiples of `page`): a read-only fd of its
/// memseg list's file, where `addr` lies in that file, and each page's IO address; or why
/// another process could not map it as one range of the first list.
fn describe(addr: *mut u8, len: usize, page: usize) -> Result<(OwnedFd, u64, Vec<u64>)> {
    let not = |why: String| Err(Error::InvalidArgument(why));
    if !(addr as usize).is_multiple_of(page) {
        return not(format!(
            "memzone at {addr:p} is not aligned to {page} B pages"
        ));
    }
    // SAFETY: a lookup in DPDK's memory map; the result (if any) is DPDK's list descriptor,
    // which lives as long as the EAL.
    let msl = unsafe { sys::rte_mem_virt2memseg_list(addr as *const c_void) };
    // SAFETY: as above; read only.
    let Some(l) = (unsafe { msl.as_ref() }) else {
        return not("memzone outside DPDK's memseg lists".into());
    };
    if l.external != 0 || l.page_sz != page as u64 {
        return not(format!(
            "memzone in a memseg list of {} B pages{}, not {page} B",
            l.page_sz,
            if l.external != 0 { " (external)" } else { "" }
        ));
    }
    let mut first = First::default();
    // SAFETY: the callback only records its list; `first` outlives the walk.
    unsafe { sys::rte_memseg_walk(Some(first_list), (&raw mut first).cast()) };
    if first.msl != msl as usize {
        return not("memzone not in the first memseg list that has memory".into());
    }
    // SAFETY: reading DPDK's list descriptor.
    let base = unsafe { l.__bindgen_anon_1.base_va } as usize;
    let in_use = l.memseg_arr.count as usize * page;
    let end = addr as usize - base + len;
    if end > in_use {
        return not(format!(
            "memzone ends {end} B into its memseg list, past the {in_use} B in use (a hole)"
        ));
    }
    let mut list_fd = -1;
    let mut start = 0u64;
    let mut iovas = Vec::with_capacity(len / page);
    for i in 0..len / page {
        // SAFETY: inside the memzone, so inside `msl`.
        let va = unsafe { addr.add(i * page) };
        // SAFETY: a lookup in DPDK's memory map of memory it allocated.
        let ms = unsafe { sys::rte_mem_virt2memseg(va as *const c_void, msl) };
        // SAFETY: as above; read only.
        let Some(seg) = (unsafe { ms.as_ref() }) else {
            return not(format!("no memory segment at {va:p}"));
        };
        // SAFETY: a segment DPDK gave us; both calls only look it up.
        let fd = unsafe { sys::rte_memseg_get_fd(ms) };
        let mut off = 0usize;
        // SAFETY: as above; `off` is a valid out-pointer.
        let ret = unsafe { sys::rte_memseg_get_fd_offset(ms, &mut off) };
        if fd < 0 || ret < 0 {
            return not(format!(
                "memory segment without a file ({}): DPDK needs --in-memory or hugetlbfs files",
                crate::error::strerror(crate::error::rte_errno())
            ));
        }
        // SAFETY: reading DPDK's segment descriptor.
        let seg_va = unsafe { seg.__bindgen_anon_1.addr } as usize;
        let off = off as u64 + (va as usize - seg_va) as u64;
        if i == 0 {
            (list_fd, start) = (fd, off);
        } else if fd != list_fd || off != start + (i * page) as u64 {
            return not(
                "memzone pages not consecutive in one file (DPDK needs --single-file-segments)"
                    .into(),
            );
        }
        iovas.push(seg.iova + (va as usize - seg_va) as u64);
    }
    // Another descriptor of the same file, read-only: whoever receives it can map the file
    // for reading and never for writing. (DPDK's own descriptor stays DPDK's: memif's
    // zero-copy client even closes it once connected.)
    let path = CString::new(format!("/proc/self/fd/{list_fd}")).expect("no NUL");
    // SAFETY: plain syscall with a valid path.
    let raw = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if raw < 0 {
        return Err(Error::io("reopening DPDK's memory file read-only"));
    }
    // SAFETY: raw is a fresh fd we own.
    Ok((unsafe { OwnedFd::from_raw_fd(raw) }, start, iovas))
}

/// DPDK's own descriptor of the file behind its first memseg list, kept under its number.
///
/// memif's zero-copy client (DPDK 22.11, `memif_connect`) closes the descriptor it got from
/// `rte_memseg_get_fd` for its region 1 each time it connects, though that is the EAL's own
/// descriptor of the list's file, which the EAL goes on using: to grow or shrink the list's
/// memory, to hand it to the next connection, to close it at cleanup. The number then names
/// whatever the process opens next (a rank's channel, a socket). [`MemsegFd::restore`] puts
/// a duplicate of the file back under the number while it is free.
pub struct MemsegFd {
    number: c_int,
    keep: OwnedFd,
    id: (u64, u64),
}

/// What [`MemsegFd::restore`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemsegFdState {
    /// The number names the list's file.
    Intact,
    /// It was closed; it names the file again.
    Restored,
    /// Something else took the number: the EAL must not touch that list's file again.
    Taken,
}

/// (device, inode) of an open descriptor.
fn file_id(fd: c_int) -> Option<(u64, u64)> {
    // SAFETY: fstat writes into a zeroed stat buffer we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: plain syscall; an invalid fd is an error, not UB.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

impl MemsegFd {
    /// The descriptor of the first memseg list that has memory (memif's region 1), before
    /// any zero-copy port has connected.
    pub fn first_list(_eal: &Eal) -> Result<MemsegFd> {
        let mut seg: *const sys::rte_memseg = std::ptr::null();
        unsafe extern "C" fn first_seg(
            _msl: *const sys::rte_memseg_list,
            ms: *const sys::rte_memseg,
            arg: *mut c_void,
        ) -> c_int {
            // SAFETY: `arg` is the pointer `first_list` passed, alive for the walk.
            unsafe { *arg.cast::<*const sys::rte_memseg>() = ms };
            1
        }
        // SAFETY: the callback only records the segment; `seg` outlives the walk.
        unsafe { sys::rte_memseg_walk(Some(first_seg), (&raw mut seg).cast()) };
        if seg.is_null() {
            return Err(Error::InvalidArgument("DPDK has no memory segment".into()));
        }
        // SAFETY: a segment DPDK gave us; the call only looks it up.
        let number = unsafe { sys::rte_memseg_get_fd(seg) };
        if number < 0 {
            return Err(Error::InvalidArgument(format!(
                "DPDK's memory has no file ({})",
                crate::error::strerror(crate::error::rte_errno())
            )));
        }
        // SAFETY: duplicating an open descriptor into a fresh one we own.
        let raw = unsafe { libc::fcntl(number, libc::F_DUPFD_CLOEXEC, 0) };
        if raw < 0 {
            return Err(Error::io("duplicating DPDK's memory file descriptor"));
        }
        // SAFETY: raw is a fresh fd we own.
        let keep = unsafe { OwnedFd::from_raw_fd(raw) };
        let id = file_id(raw).ok_or_else(|| Error::io("fstat of DPDK's memory file"))?;
        Ok(MemsegFd { number, keep, id })
    }

    /// The descriptor number the EAL uses.
    pub fn number(&self) -> c_int {
        self.number
    }

    /// Puts the list's file back under its number if the number is free (atomically: never
    /// over a descriptor someone else opened).
    pub fn restore(&self) -> MemsegFdState {
        match file_id(self.number) {
            Some(id) if id == self.id => return MemsegFdState::Intact,
            Some(_) => return MemsegFdState::Taken,
            None => {}
        }
        // SAFETY: F_DUPFD gives the lowest free number >= `number`: `number` itself if it is
        // free, never one in use.
        let got = unsafe { libc::fcntl(self.keep.as_raw_fd(), libc::F_DUPFD, self.number) };
        if got == self.number {
            MemsegFdState::Restored
        } else {
            if got >= 0 {
                // SAFETY: the duplicate we just made under another number, ours to close.
                unsafe { libc::close(got) };
            }
            MemsegFdState::Taken
        }
    }
}
