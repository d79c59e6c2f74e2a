//! Memory mbufs may point into that other processes can map too: a memfd DPDK did not
//! allocate (e.g. the agent's shared-memory channel), registered with `rte_extmem_register`
//! so that devices can reach it, or mapped only (where no device needs it registered); or a
//! memzone of DPDK's own memory whose file other processes may map read-only
//! ([`ExtMem::shared_memzone`], in `memzone.rs`).

use std::ffi::c_void;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;

use tigon_dpdk_sys as sys;

use crate::eal::{Eal, IovaMode};
use crate::error::{Error, Result};

const SMALL_PAGE: usize = 4096;

/// Memory shared with other processes by passing [`ExtMem::fd`] (they map `len` bytes at
/// [`ExtMem::file_offset`]); accessed here through copies (`read_at` / `write_at`), never
/// through Rust references, because other processes may write it at any time.
pub struct ExtMem {
    pub(crate) addr: NonNull<u8>,
    pub(crate) len: usize,
    pub(crate) page_size: usize,
    pub(crate) hugetlb: bool,
    pub(crate) iovas: Vec<u64>,
    pub(crate) fd: OwnedFd,
    /// Where the region starts in `fd`'s file.
    pub(crate) file_offset: u64,
    pub(crate) backing: Backing,
    pub(crate) _eal: Eal,
}

/// What an [`ExtMem`] is, which says how it goes away.
pub(crate) enum Backing {
    /// Our own mapping of a memfd, registered with DPDK (`rte_extmem_register`) or not.
    Mapped { registered: bool },
    /// A memzone of DPDK's memory (its fd a read-only reopening of the memseg list's file).
    Memzone,
}

// SAFETY: the mapping is process-wide and immutable in shape; all access goes through raw
// copies whose coordination is the caller's protocol (like any shared memory).
unsafe impl Send for ExtMem {}
// SAFETY: as above.
unsafe impl Sync for ExtMem {}

impl std::fmt::Debug for ExtMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtMem")
            .field("len", &self.len)
            .field("page_size", &self.page_size)
            .field("hugetlb", &self.hugetlb)
            .finish()
    }
}

pub(crate) fn default_hugepage_size() -> usize {
    tigon_shm::region::hugepage_size()
}

impl ExtMem {
    /// At least `len` bytes (rounded up to whole pages): hugetlb memfd pages when the system
    /// has free ones, else ordinary memfd pages (fine for vdevs and IOVA-as-VA).
    pub fn new(eal: &Eal, len: usize) -> Result<Arc<ExtMem>> {
        match Self::with_hugepages(eal, len, true) {
            Ok(m) => Ok(m),
            Err(e) => {
                log::debug!("hugetlb memfd unavailable ({e}); using ordinary pages");
                Self::with_hugepages(eal, len, false)
            }
        }
    }

    /// Like `new`, but insisting on hugetlb pages (`true`) or ordinary pages (`false`).
    pub fn with_hugepages(eal: &Eal, len: usize, hugetlb: bool) -> Result<Arc<ExtMem>> {
        if len == 0 {
            return Err(Error::InvalidArgument("external memory of 0 bytes".into()));
        }
        let page_size = if hugetlb {
            default_hugepage_size()
        } else {
            SMALL_PAGE
        };
        let len = len.div_ceil(page_size) * page_size;
        let flags = libc::MFD_CLOEXEC | if hugetlb { libc::MFD_HUGETLB } else { 0 };
        // SAFETY: plain syscall with a static NUL-terminated name.
        let raw = unsafe { libc::memfd_create(c"tigon-extmem".as_ptr(), flags) };
        if raw < 0 {
            return Err(Error::io("memfd_create"));
        }
        // SAFETY: raw is a fresh fd we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: fd is a valid memfd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(Error::io(format!("sizing a {len}-byte memfd")));
        }
        Self::map(eal, fd, len, page_size, hugetlb, true)
    }

    /// Maps and registers an existing memfd of `len` bytes whose pages are `page_size`
    /// bytes (e.g. one received from another process). `len` must be a multiple of
    /// `page_size`.
    pub fn from_fd(eal: &Eal, fd: OwnedFd, len: usize, page_size: usize) -> Result<Arc<ExtMem>> {
        check_size(len, page_size)?;
        Self::map(eal, fd, len, page_size, page_size != SMALL_PAGE, true)
    }

    /// Like [`ExtMem::from_fd`] but not registered with DPDK: mbufs may point into it (their
    /// IO addresses computed as `from_fd` would), but no device that needs its memory known
    /// to DPDK (`rte_dev_dma_map`, a dmadev or NIC behind an IOMMU) may reach it. What a
    /// process with a memif zero-copy port needs: that port offers its peer every memory
    /// segment DPDK knows of when it (re)connects and has no file for external ones.
    pub fn from_fd_unregistered(
        eal: &Eal,
        fd: OwnedFd,
        len: usize,
        page_size: usize,
    ) -> Result<Arc<ExtMem>> {
        check_size(len, page_size)?;
        Self::map(eal, fd, len, page_size, page_size != SMALL_PAGE, false)
    }

    fn map(
        eal: &Eal,
        fd: OwnedFd,
        len: usize,
        page_size: usize,
        hugetlb: bool,
        register: bool,
    ) -> Result<Arc<ExtMem>> {
        // SAFETY: maps `len` bytes of our fd; MAP_POPULATE makes a hugetlb shortage fail here
        // (ENOMEM) instead of as SIGBUS on first touch.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::io(format!(
                "mapping {len} B of {} memory",
                if hugetlb { "hugetlb" } else { "memfd" }
            )));
        }
        let addr = NonNull::new(p as *mut u8).ok_or_else(|| Error::io("mmap returned null"))?;
        // Pin pages so that physical addresses (IOVA-as-PA) stay valid.
        // SAFETY: addr..addr+len is our mapping.
        if unsafe { libc::mlock(p, len) } != 0 {
            log::debug!(
                "mlock of external memory failed: {}",
                std::io::Error::last_os_error()
            );
        }
        let n_pages = len / page_size;
        let iovas: Vec<u64> = (0..n_pages)
            .map(|i| {
                // SAFETY: i * page_size < len.
                let va = unsafe { addr.as_ptr().add(i * page_size) };
                match eal.iova_mode() {
                    IovaMode::Va => va as u64,
                    // SAFETY: va is a mapped, populated page of ours.
                    IovaMode::Pa => unsafe { sys::rte_mem_virt2phy(va as *const c_void) },
                }
            })
            .collect();
        if register {
            let mut table = iovas.clone();
            let n_pages_u32 = u32::try_from(n_pages)
                .map_err(|_| Error::InvalidArgument(format!("{n_pages} pages is too many")))?;
            // SAFETY: the range is our mapping; the table has one IOVA per page.
            let ret = unsafe {
                sys::rte_extmem_register(p, len, table.as_mut_ptr(), n_pages_u32, page_size)
            };
            if ret != 0 {
                let e = Error::dpdk(format!("rte_extmem_register of {len} B"), ret);
                // SAFETY: unmapping our own mapping, nothing references it yet.
                unsafe { libc::munmap(p, len) };
                return Err(e);
            }
        }
        Ok(Arc::new(ExtMem {
            addr,
            len,
            page_size,
            hugetlb,
            iovas,
            fd,
            file_offset: 0,
            backing: Backing::Mapped {
                registered: register,
            },
            _eal: eal.clone(),
        }))
    }

    /// Whether DPDK knows this memory: registered external memory, or its own.
    pub fn is_registered(&self) -> bool {
        !matches!(self.backing, Backing::Mapped { registered: false })
    }

    /// Whether this is DPDK's own memory (a memzone), not external memory.
    pub fn is_dpdk_memory(&self) -> bool {
        matches!(self.backing, Backing::Memzone)
    }

    /// Where the region starts in the file of [`ExtMem::fd`] (0 but for DPDK memory).
    pub fn file_offset(&self) -> u64 {
        self.file_offset
    }

    /// Size in bytes (whole pages).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true (a region has at least one page); for clippy's sake.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Page size backing the region.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// True when backed by hugetlb pages.
    pub fn is_hugetlb(&self) -> bool {
        self.hugetlb
    }

    /// Start of the mapping in this process.
    pub fn as_ptr(&self) -> *mut u8 {
        self.addr.as_ptr()
    }

    /// The memfd, to share the region with another process (SCM_RIGHTS); for DPDK memory a
    /// read-only descriptor of the whole memseg list's file (see [`ExtMem::file_offset`]).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// IO address of byte `offset`, if DPDK knows one.
    pub fn iova(&self, offset: usize) -> Option<u64> {
        if offset >= self.len {
            return None;
        }
        let base = *self.iovas.get(offset / self.page_size)?;
        (base != sys::TIGON_BAD_IOVA).then(|| base + (offset % self.page_size) as u64)
    }

    /// IO address of `offset..offset+len` when the range is contiguous in IO space (always
    /// with IOVA-as-VA; with physical addresses, only within a page or across adjacent ones).
    pub fn iova_range(&self, offset: usize, len: usize) -> Result<u64> {
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= self.len && len > 0)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "range {offset}+{len} is outside the {}-byte region",
                    self.len
                ))
            })?;
        let start = self.iova(offset).ok_or_else(|| {
            Error::InvalidArgument("external memory has no IO address (IOVA)".into())
        })?;
        let first = offset / self.page_size;
        let last = (end - 1) / self.page_size;
        for pg in first + 1..=last {
            let expect = self.iovas[first] + ((pg - first) * self.page_size) as u64;
            if self.iovas[pg] != expect {
                return Err(Error::InvalidArgument(format!(
                    "range {offset}+{len} is not contiguous in IO space (physical addresses): \
                     split it at page boundaries or use --iova-mode=va"
                )));
            }
        }
        Ok(start)
    }

    fn check(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(e) if e <= self.len => Ok(()),
            _ => Err(Error::InvalidArgument(format!(
                "range {offset}+{len} is outside the {}-byte region",
                self.len
            ))),
        }
    }

    /// Copies `data` into the region at `offset`.
    pub fn write_at(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check(offset, data.len())?;
        // SAFETY: in bounds; raw copy into shared memory (no Rust reference to it exists).
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.as_ptr().add(offset), data.len())
        };
        Ok(())
    }

    /// Copies `buf.len()` bytes of the region at `offset` into `buf`.
    pub fn read_at(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        self.check(offset, buf.len())?;
        // SAFETY: in bounds; raw copy out of shared memory.
        unsafe {
            std::ptr::copy_nonoverlapping(self.as_ptr().add(offset), buf.as_mut_ptr(), buf.len())
        };
        Ok(())
    }

    /// Fills `offset..offset+len` with `byte`.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<()> {
        self.check(offset, len)?;
        // SAFETY: in bounds.
        unsafe { std::ptr::write_bytes(self.as_ptr().add(offset), byte, len) };
        Ok(())
    }

    /// (address, iova, len) pieces contiguous in IO space, for rte_dev_dma_map.
    pub fn dma_chunks(&self) -> Vec<(*mut c_void, u64, usize)> {
        let mut out: Vec<(*mut c_void, u64, usize)> = Vec::new();
        for (i, &iova) in self.iovas.iter().enumerate() {
            // SAFETY: i * page_size < len.
            let va = unsafe { self.as_ptr().add(i * self.page_size) } as *mut c_void;
            match out.last_mut() {
                Some((_, start, l)) if *start + *l as u64 == iova => *l += self.page_size,
                _ => out.push((va, iova, self.page_size)),
            }
        }
        out
    }
}

impl Drop for ExtMem {
    fn drop(&mut self) {
        let p = self.addr.as_ptr() as *mut c_void;
        let registered = match self.backing {
            Backing::Mapped { registered } => registered,
            // Kept: freeing it would let DPDK give the hugepages back (a hole punched in the
            // memseg file), and a process still mapping them would fault on its next read.
            // It goes with the EAL.
            Backing::Memzone => return,
        };
        // SAFETY: no mbuf references the region (they hold an Arc) and ports unmap it before
        // releasing theirs; unregister (if registered), then unmap our own mapping.
        unsafe {
            if registered && sys::rte_extmem_unregister(p, self.len) != 0 {
                log::warn!(
                    "rte_extmem_unregister: {}",
                    crate::error::strerror(crate::error::rte_errno())
                );
            }
            libc::munmap(p, self.len);
        }
    }
}

/// `len` bytes of pages of `page_size` bytes: both non-zero, a whole number of pages, the page
/// size a power of two.
fn check_size(len: usize, page_size: usize) -> Result<()> {
    if len == 0 || page_size == 0 || !len.is_multiple_of(page_size) || !page_size.is_power_of_two()
    {
        return Err(Error::InvalidArgument(format!(
            "external memory of {len} B must be a non-zero multiple of its page size \
             ({page_size} B, a power of two)"
        )));
    }
    Ok(())
}
