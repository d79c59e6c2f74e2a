//! Pools of packet mbufs (`rte_pktmbuf_pool_create`).

use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::Arc;

use tigon_dpdk_sys as sys;

use crate::eal::Eal;
use crate::error::{Error, Result};
use crate::extmem::ExtMem;
use crate::mbuf::Mbuf;

/// Headroom DPDK reserves in front of every mbuf's data.
pub const HEADROOM: u16 = sys::RTE_PKTMBUF_HEADROOM as u16;
/// DPDK's default data room: 2048 bytes of data plus the headroom.
pub const DEFAULT_DATA_ROOM: u16 = sys::RTE_MBUF_DEFAULT_BUF_SIZE as u16;
/// Data room for 9000-byte MTU frames (9018 B with Ethernet header and FCS) in one segment.
pub const JUMBO_DATA_ROOM: u16 = 9216 + HEADROOM;
/// Longest mempool name DPDK accepts (its memzone names carry a prefix).
pub const MAX_NAME_LEN: usize = 24;

struct Inner {
    mp: NonNull<sys::rte_mempool>,
    name: String,
    size: u32,
    eal: Eal,
    /// The memory holding the mbufs' data, when not DPDK's (`with_external_data`): freed
    /// after the pool (fields drop after `Drop::drop`).
    ext: Option<Arc<ExtMem>>,
}

// SAFETY: DPDK mempools (default ring ops, multi-producer/multi-consumer) are thread-safe.
unsafe impl Send for Inner {}
// SAFETY: as above; every operation through &Inner is a thread-safe DPDK call.
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        // SAFETY: mp is a live pool created by us.
        let in_use = unsafe { sys::tigon_mempool_in_use_count(self.mp.as_ptr()) };
        if in_use != 0 {
            // Mbufs of this pool are still alive somewhere (an `Mbuf`, a port ring): freeing
            // the pool or cleaning up the EAL would leave them dangling, so leak both.
            log::warn!(
                "mempool `{}` dropped with {in_use} mbufs in use: leaking it (and keeping the \
                 EAL alive)",
                self.name
            );
            std::mem::forget(self.eal.clone());
            // The data of those mbufs stays mapped too.
            std::mem::forget(self.ext.take());
            return;
        }
        // SAFETY: no mbuf of this pool is in use and no port references it any more (ports
        // hold a Mempool clone), so the pool can be freed.
        unsafe { sys::rte_mempool_free(self.mp.as_ptr()) };
    }
}

/// A pool of packet mbufs. Cloning shares the pool.
#[derive(Clone)]
pub struct Mempool {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Mempool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mempool")
            .field("name", &self.inner.name)
            .field("size", &self.inner.size)
            .finish()
    }
}

impl Mempool {
    /// Creates a pool of `size` mbufs (2^n - 1 is optimal), each with `data_room` bytes of
    /// buffer including the `HEADROOM` (use `DEFAULT_DATA_ROOM` or `JUMBO_DATA_ROOM`).
    /// The name must be unique in the process and at most `MAX_NAME_LEN` bytes.
    pub fn new(eal: &Eal, name: &str, size: u32, data_room: u16) -> Result<Mempool> {
        if name.is_empty() || name.len() > MAX_NAME_LEN {
            return Err(Error::InvalidArgument(format!(
                "mempool name `{name}` must be 1..={MAX_NAME_LEN} bytes"
            )));
        }
        if size == 0 || data_room <= HEADROOM {
            return Err(Error::InvalidArgument(format!(
                "mempool `{name}`: size {size} must be > 0 and data room {data_room} must \
                 exceed the {HEADROOM}-byte headroom"
            )));
        }
        let (cname, cache) = (pool_name(name)?, cache_size(size));
        // SAFETY: the EAL is initialised (we hold a handle); cname is a valid C string.
        let mp = unsafe {
            sys::rte_pktmbuf_pool_create(
                cname.as_ptr(),
                size,
                cache,
                0,
                data_room,
                sys::rte_socket_id() as i32,
            )
        };
        let mp = NonNull::new(mp).ok_or_else(|| {
            create_failed(
                format!("creating mempool `{name}` ({size} mbufs of {data_room} B)"),
                size as u64 * (data_room as u64 + MBUF_OVERHEAD),
            )
        })?;
        Ok(Mempool {
            inner: Arc::new(Inner {
                mp,
                name: name.to_string(),
                size,
                eal: eal.clone(),
                ext: None,
            }),
        })
    }

    /// A pool of `size` mbufs whose data rooms (`data_room` bytes each, headroom included)
    /// lie in `mem` rather than in DPDK's memory (`rte_pktmbuf_pool_create_extbuf`): whoever
    /// maps `mem` sees the frames received into them. `mem` must hold `size` data rooms in
    /// runs contiguous in IO space (its whole length with IOVA-as-VA, each hugepage with
    /// physical addresses). The pool keeps `mem` alive.
    pub fn with_external_data(
        eal: &Eal,
        name: &str,
        size: u32,
        data_room: u16,
        mem: &Arc<ExtMem>,
    ) -> Result<Mempool> {
        if name.is_empty() || name.len() > MAX_NAME_LEN || size == 0 || data_room <= HEADROOM {
            return Err(Error::InvalidArgument(format!(
                "mempool `{name}`: name of 1..={MAX_NAME_LEN} bytes, size > 0 and a data room \
                 over the {HEADROOM}-byte headroom needed"
            )));
        }
        let elt = data_room.next_multiple_of(64);
        // One piece per run of the region contiguous in IO space (with physical addresses,
        // a hugepage each): a data room never straddles two.
        let mut ext = Vec::new();
        let mut fits = 0usize;
        for (va, iova, len) in mem.dma_chunks() {
            let n = len / elt as usize;
            if n == 0 {
                continue;
            }
            ext.push(sys::rte_pktmbuf_extmem {
                buf_ptr: va,
                buf_iova: iova,
                buf_len: n * elt as usize,
                elt_size: elt,
            });
            fits += n;
        }
        if fits < size as usize {
            return Err(Error::InvalidArgument(format!(
                "mempool `{name}`: the region holds {fits} data rooms of {elt} B in runs \
                 contiguous in IO space, not {size}"
            )));
        }
        let (cname, cache) = (pool_name(name)?, cache_size(size));
        // SAFETY: the EAL is initialised; each piece of `ext` lies in `mem`, registered with
        // DPDK and kept mapped by the pool (`Inner::ext`) until the pool is freed.
        let mp = unsafe {
            sys::rte_pktmbuf_pool_create_extbuf(
                cname.as_ptr(),
                size,
                cache,
                0,
                data_room,
                sys::rte_socket_id() as i32,
                ext.as_ptr(),
                ext.len() as u32,
            )
        };
        let mp = NonNull::new(mp).ok_or_else(|| {
            create_failed(
                format!("creating mempool `{name}` ({size} mbufs of {data_room} B in a region)"),
                size as u64 * MBUF_OVERHEAD,
            )
        })?;
        Ok(Mempool {
            inner: Arc::new(Inner {
                mp,
                name: name.to_string(),
                size,
                eal: eal.clone(),
                ext: Some(Arc::clone(mem)),
            }),
        })
    }

    /// The region holding the mbufs' data, for a pool made by
    /// [`Mempool::with_external_data`].
    pub fn external_data(&self) -> Option<&Arc<ExtMem>> {
        self.inner.ext.as_ref()
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Number of mbufs in the pool.
    pub fn size(&self) -> u32 {
        self.inner.size
    }

    /// Buffer size of each mbuf, headroom included.
    pub fn data_room(&self) -> u16 {
        // SAFETY: live pool.
        unsafe { sys::tigon_pktmbuf_data_room_size(self.inner.mp.as_ptr()) }
    }

    /// Free mbufs (including those in per-lcore caches).
    pub fn available(&self) -> u32 {
        // SAFETY: live pool.
        unsafe { sys::tigon_mempool_avail_count(self.inner.mp.as_ptr()) }
    }

    /// Mbufs currently allocated.
    pub fn in_use(&self) -> u32 {
        // SAFETY: live pool.
        unsafe { sys::tigon_mempool_in_use_count(self.inner.mp.as_ptr()) }
    }

    /// The EAL this pool belongs to.
    pub fn eal(&self) -> &Eal {
        &self.inner.eal
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::rte_mempool {
        self.inner.mp.as_ptr()
    }

    /// One empty mbuf, or `Error::PoolExhausted`.
    pub fn alloc(&self) -> Result<Mbuf> {
        // SAFETY: live pool; a non-null result is a fresh mbuf that we now own.
        let m = unsafe { sys::tigon_pktmbuf_alloc(self.as_ptr()) };
        match NonNull::new(m) {
            // SAFETY: freshly allocated, owned by nobody else.
            Some(m) => Ok(unsafe { Mbuf::from_raw(m) }),
            None => Err(self.exhausted()),
        }
    }

    /// `n` empty mbufs appended to `out`, all or none.
    pub fn alloc_bulk(&self, n: usize, out: &mut Vec<Mbuf>) -> Result<()> {
        let count = u32::try_from(n)
            .map_err(|_| Error::InvalidArgument(format!("bulk allocation of {n} mbufs")))?;
        let mut raw: Vec<*mut sys::rte_mbuf> = vec![std::ptr::null_mut(); n];
        // SAFETY: raw has room for n pointers; on success every slot holds a fresh mbuf.
        let ret = unsafe { sys::tigon_pktmbuf_alloc_bulk(self.as_ptr(), raw.as_mut_ptr(), count) };
        if ret != 0 {
            return Err(self.exhausted());
        }
        out.reserve(n);
        for p in raw {
            if let Some(m) = NonNull::new(p) {
                // SAFETY: freshly allocated, owned by nobody else.
                out.push(unsafe { Mbuf::from_raw(m) });
            }
        }
        Ok(())
    }

    /// An mbuf whose data is `len` bytes of `mem` at `offset` (zero copy). See
    /// [`Mbuf::attach_extbuf`].
    pub fn alloc_extbuf(&self, mem: &Arc<ExtMem>, offset: usize, len: u16) -> Result<Mbuf> {
        let mut m = self.alloc()?;
        m.attach_extbuf(mem, offset, len)?;
        Ok(m)
    }

    fn exhausted(&self) -> Error {
        Error::PoolExhausted {
            pool: self.inner.name.clone(),
            size: self.inner.size,
        }
    }
}

/// Bytes of DPDK memory an mbuf takes besides its data room (the `rte_mbuf` header and
/// the pool's per-object header, roughly): for the size a failed pool asked for.
const MBUF_OVERHEAD: u64 = 192;

/// The error of a pool that could not be created. Out of memory is the usual cause, and the
/// memory is hugepages (each node's pools of jumbo mbufs take ~150 MB): said so, with the
/// pages left and the fixes, where DPDK's own words would be a bare "Cannot allocate memory".
fn create_failed(what: String, bytes: u64) -> Error {
    let e = Error::dpdk(what.clone(), -1);
    if e.errno() != Some(libc::ENOMEM) {
        return e;
    }
    let meminfo = tigon_shm::region::meminfo;
    let free = meminfo("HugePages_Free")
        .zip(meminfo("Hugepagesize"))
        .map_or(String::new(), |(pages, kb)| {
            format!("; {pages} hugepages of {} MiB free now", kb / 1024)
        });
    Error::Hugepages(format!(
        "{what}: out of DPDK memory (the pool needs ~{} MiB{free}). Reserve more hugepages \
         (`echo N > /proc/sys/vm/nr_hugepages`), run fewer nodes or ports in this process, or \
         use smaller frames (`--mtu 1500` makes each mbuf ~4x smaller)",
        bytes.div_ceil(1 << 20)
    ))
}

/// A pool's name as DPDK takes it.
fn pool_name(name: &str) -> Result<CString> {
    CString::new(name)
        .map_err(|_| Error::InvalidArgument(format!("mempool name `{name}` has a NUL")))
}

/// Per-lcore caches speed up big pools but hide mbufs from other lcores; small pools (tests,
/// control traffic) go without.
fn cache_size(size: u32) -> u32 {
    if size >= 4096 { 256 } else { 0 }
}
