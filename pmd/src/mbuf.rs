//! Owned packet mbufs, possibly chained (multi-segment frames) or over external memory.
//!
//! Ownership: an `Mbuf` owns one reference to every segment of its chain and Drop returns
//! them (`rte_pktmbuf_free`). There is no `Clone`: [`Mbuf::try_clone`] adds a reference to
//! every segment (no copy), so both handles can be freed independently and the segments go
//! back to the pool after the last one. While shared, the data is read-only: the mutating
//! methods return [`Error::Shared`]. Bytes in external memory (see `attach_extbuf`) are never
//! written through an mbuf either (the region is shared memory that others may map):
//! `data_mut` / `append` / `prepend` refuse such a segment, and `extend_from_slice` starts a
//! new segment after it.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

use tigon_dpdk_sys as sys;

use crate::error::{Error, Result};
use crate::extmem::ExtMem;

/// An owned packet mbuf (the head of a chain). `#[repr(transparent)]` over the DPDK pointer
/// so that `&mut [Mbuf]` passes straight to the burst functions.
#[repr(transparent)]
pub struct Mbuf {
    ptr: NonNull<sys::rte_mbuf>,
}

// SAFETY: an Mbuf owns its references; DPDK mbufs may be freed from any thread (atomic
// refcounts, thread-safe mempools).
unsafe impl Send for Mbuf {}
// SAFETY: &Mbuf only reads the mbuf (and bumps atomic refcounts in try_clone).
unsafe impl Sync for Mbuf {}

impl Drop for Mbuf {
    fn drop(&mut self) {
        // SAFETY: we own one reference to every segment of the chain.
        unsafe { sys::tigon_pktmbuf_free(self.ptr.as_ptr()) }
    }
}

impl std::fmt::Debug for Mbuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mbuf")
            .field("len", &self.len())
            .field("segs", &self.nb_segs())
            .finish()
    }
}

impl Mbuf {
    /// Takes ownership of a raw mbuf chain.
    ///
    /// # Safety
    /// `ptr` must be a valid mbuf chain head of which the caller owns one reference, which
    /// passes to the returned `Mbuf`.
    pub unsafe fn from_raw(ptr: NonNull<sys::rte_mbuf>) -> Mbuf {
        Mbuf { ptr }
    }

    /// Gives up ownership without freeing (for handing the mbuf to DPDK directly).
    pub fn into_raw(self) -> NonNull<sys::rte_mbuf> {
        let p = self.ptr;
        std::mem::forget(self);
        p
    }

    /// The raw head pointer (still owned by `self`).
    pub fn as_ptr(&self) -> *mut sys::rte_mbuf {
        self.ptr.as_ptr()
    }

    fn head(&self) -> &sys::rte_mbuf {
        // SAFETY: ptr is a valid mbuf for as long as self lives.
        unsafe { self.ptr.as_ref() }
    }

    /// Frame length: the sum of every segment's data.
    pub fn len(&self) -> usize {
        self.head().pkt_len as usize
    }

    /// True for a frame of 0 bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of segments in the chain.
    pub fn nb_segs(&self) -> u16 {
        self.head().nb_segs
    }

    /// Port the frame arrived on (set by rx).
    pub fn port(&self) -> u16 {
        self.head().port
    }

    /// Free bytes in front of the first segment's data.
    pub fn headroom(&self) -> u16 {
        // SAFETY: valid mbuf.
        unsafe { sys::tigon_pktmbuf_headroom(self.ptr.as_ptr()) }
    }

    /// Free bytes after the last segment's data.
    pub fn tailroom(&self) -> u16 {
        let last = self.last_seg();
        // SAFETY: last is a valid segment of our chain.
        unsafe { sys::tigon_pktmbuf_tailroom(last) }
    }

    /// Reference count of the head segment.
    pub fn refcnt(&self) -> u16 {
        // SAFETY: valid mbuf.
        unsafe { sys::tigon_mbuf_refcnt_read(self.ptr.as_ptr()) }
    }

    /// True when this handle is the only reference to every segment and no segment
    /// borrows another mbuf's buffer, i.e. the data may be modified.
    pub fn is_unique(&self) -> bool {
        self.seg_ptrs().all(|s| {
            // SAFETY: s is a valid segment of our chain.
            unsafe { seg_refcnt(s) == 1 && (*s).ol_flags & sys::TIGON_MBUF_F_INDIRECT == 0 }
        })
    }

    /// True when the head segment's buffer is external memory (see `attach_extbuf`).
    pub fn is_external(&self) -> bool {
        // SAFETY: valid mbuf.
        unsafe { sys::tigon_mbuf_ol_flags(self.ptr.as_ptr()) & sys::TIGON_MBUF_F_EXTERNAL != 0 }
    }

    /// IO address of the first segment's data (what a device reads or writes).
    pub fn data_iova(&self) -> u64 {
        // SAFETY: valid mbuf.
        unsafe { sys::tigon_pktmbuf_data_iova(self.ptr.as_ptr()) }
    }

    /// Another handle on the same frame (no copy): every segment's refcount goes up by one.
    /// Fails only if a refcount would overflow.
    pub fn try_clone(&self) -> Result<Mbuf> {
        if self.seg_ptrs().any(|s| {
            // SAFETY: s is a valid segment of our chain.
            let r = unsafe { sys::tigon_mbuf_refcnt_read(s) };
            r == u16::MAX
        }) {
            return Err(Error::InvalidArgument(
                "mbuf reference count would overflow".into(),
            ));
        }
        // SAFETY: bumps every segment's refcount atomically; the new handle owns those
        // references.
        unsafe { sys::tigon_pktmbuf_refcnt_update(self.ptr.as_ptr(), 1) };
        Ok(Mbuf { ptr: self.ptr })
    }

    fn seg_ptrs(&self) -> impl Iterator<Item = *mut sys::rte_mbuf> + '_ {
        let mut cur = self.ptr.as_ptr();
        std::iter::from_fn(move || {
            if cur.is_null() {
                return None;
            }
            let s = cur;
            // SAFETY: s is a valid segment; `next` is null or the next valid segment.
            cur = unsafe { (*s).next };
            Some(s)
        })
    }

    fn last_seg(&self) -> *mut sys::rte_mbuf {
        let mut last = self.ptr.as_ptr();
        for s in self.seg_ptrs() {
            last = s;
        }
        last
    }

    /// The first segment's data.
    pub fn data(&self) -> &[u8] {
        seg_slice(self.ptr.as_ptr())
    }

    /// The first segment's data, writable (only when unique).
    pub fn data_mut(&mut self) -> Result<&mut [u8]> {
        if !self.is_unique() || seg_external(self.ptr.as_ptr()) {
            return Err(Error::Shared);
        }
        let s = self.ptr.as_ptr();
        // SAFETY: unique (no other handle or indirect mbuf sees this buffer), and the slice
        // borrows self mutably.
        unsafe {
            let len = (*s).data_len as usize;
            Ok(std::slice::from_raw_parts_mut(seg_data(s), len))
        }
    }

    /// The data of each segment, in order.
    pub fn segments(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.seg_ptrs().map(seg_slice)
    }

    /// The whole frame as one vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        self.read_into(&mut v);
        v
    }

    /// Replaces the contents of `out` with the whole frame.
    pub fn read_into(&self, out: &mut Vec<u8>) {
        out.clear();
        out.reserve(self.len());
        for s in self.segments() {
            out.extend_from_slice(s);
        }
    }

    /// Copies frame bytes from `offset` into `buf`; returns how many were copied.
    pub fn copy_to_slice(&self, mut offset: usize, buf: &mut [u8]) -> usize {
        let mut done = 0;
        for s in self.segments() {
            if done == buf.len() {
                break;
            }
            if offset >= s.len() {
                offset -= s.len();
                continue;
            }
            let n = (s.len() - offset).min(buf.len() - done);
            buf[done..done + n].copy_from_slice(&s[offset..offset + n]);
            done += n;
            offset = 0;
        }
        done
    }

    /// Grows the last segment by `len` bytes and returns them (uninitialised contents are
    /// whatever the buffer held). Fails if the tailroom is short or the mbuf is shared.
    pub fn append(&mut self, len: u16) -> Result<&mut [u8]> {
        if !self.is_unique() || seg_external(self.last_seg()) {
            return Err(Error::Shared);
        }
        // SAFETY: unique chain whose last segment is pool memory; append touches only that
        // segment and the head's pkt_len.
        let p = unsafe { sys::tigon_pktmbuf_append(self.ptr.as_ptr(), len) };
        if p.is_null() {
            return Err(Error::InvalidArgument(format!(
                "append of {len} B exceeds the tailroom ({} B)",
                self.tailroom()
            )));
        }
        // SAFETY: DPDK returned `len` bytes inside our uniquely owned buffer.
        Ok(unsafe { std::slice::from_raw_parts_mut(p as *mut u8, len as usize) })
    }

    /// Appends `bytes` at the end of the frame, chaining new segments from `new_segment`
    /// (usually `|| pool.alloc()`) when the last one is full (frames longer than one mbuf's
    /// data room).
    pub fn extend_from_slice(
        &mut self,
        mut new_segment: impl FnMut() -> Result<Mbuf>,
        mut bytes: &[u8],
    ) -> Result<()> {
        if !self.is_unique() {
            return Err(Error::Shared);
        }
        while !bytes.is_empty() {
            let room = if seg_external(self.last_seg()) {
                0
            } else {
                self.tailroom() as usize
            };
            if room == 0 {
                let seg = new_segment()?;
                self.chain(seg)?;
                continue;
            }
            let n = room.min(bytes.len());
            let dst = self.append(n as u16)?;
            dst.copy_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        Ok(())
    }

    /// Grows the first segment at the front by `len` bytes (into the headroom).
    pub fn prepend(&mut self, len: u16) -> Result<&mut [u8]> {
        if !self.is_unique() || seg_external(self.ptr.as_ptr()) {
            return Err(Error::Shared);
        }
        // SAFETY: unique chain; prepend touches the head segment only.
        let p = unsafe { sys::tigon_pktmbuf_prepend(self.ptr.as_ptr(), len) };
        if p.is_null() {
            return Err(Error::InvalidArgument(format!(
                "prepend of {len} B exceeds the headroom ({} B)",
                self.headroom()
            )));
        }
        // SAFETY: DPDK returned `len` bytes inside our uniquely owned buffer.
        Ok(unsafe { std::slice::from_raw_parts_mut(p as *mut u8, len as usize) })
    }

    /// Marks an Ethernet/IPv4/UDP frame (20-byte IP header) for the NIC to fill in its IPv4
    /// header checksum and/or UDP checksum (the port must have the offloads enabled; the UDP
    /// checksum field must hold the pseudo-header sum).
    pub fn offload_ipv4_udp_checksums(&mut self, ip: bool, udp: bool) {
        // SAFETY: we own the mbuf; the shim sets length and flag fields of its header only.
        unsafe { sys::tigon_mbuf_tx_ipv4_udp_cksum(self.ptr.as_ptr(), ip.into(), udp.into()) }
    }

    /// Removes `len` bytes from the front of the first segment.
    pub fn adj(&mut self, len: u16) -> Result<()> {
        if !self.is_unique() {
            return Err(Error::Shared);
        }
        // SAFETY: unique chain.
        let p = unsafe { sys::tigon_pktmbuf_adj(self.ptr.as_ptr(), len) };
        if p.is_null() {
            return Err(Error::InvalidArgument(format!(
                "cannot remove {len} B from a first segment of {} B",
                self.data().len()
            )));
        }
        Ok(())
    }

    /// Keeps only `range` of a one-segment frame: [`Self::adj`] then [`Self::trim`] with
    /// one check, no call into DPDK (a received UDP datagram cut to the engine's frame, once
    /// per frame: the two calls cost ~130 instructions).
    pub fn keep(&mut self, range: std::ops::Range<usize>) -> Result<()> {
        let s = self.ptr.as_ptr();
        // SAFETY: valid mbuf; plain header fields read.
        let (segs, len) = unsafe { ((*s).nb_segs, usize::from((*s).data_len)) };
        if segs != 1 || range.start > range.end || range.end > len {
            return Err(Error::InvalidArgument(format!(
                "cannot keep {range:?} of a frame of {len} B in {segs} segment(s)"
            )));
        }
        if !self.is_unique() {
            return Err(Error::Shared);
        }
        let keep = (range.end - range.start) as u16;
        // SAFETY: a unique one-segment mbuf: its data start moves forward and its length
        // shrinks, inside the data it had (what rte_pktmbuf_adj and _trim write).
        unsafe {
            (*s).data_off += range.start as u16;
            (*s).data_len = keep;
            (*s).pkt_len = u32::from(keep);
        }
        Ok(())
    }

    /// Removes `len` bytes from the end of the last segment.
    pub fn trim(&mut self, len: u16) -> Result<()> {
        if !self.is_unique() {
            return Err(Error::Shared);
        }
        // SAFETY: unique chain.
        let ret = unsafe { sys::tigon_pktmbuf_trim(self.ptr.as_ptr(), len) };
        if ret != 0 {
            return Err(Error::InvalidArgument(format!(
                "cannot trim {len} B from a last segment of {} B",
                seg_slice(self.last_seg()).len()
            )));
        }
        Ok(())
    }

    /// Appends the segments of `tail` to this frame (e.g. a header mbuf followed by an
    /// external-buffer payload). On failure (too many segments, or either frame shared)
    /// `tail` is freed.
    pub fn chain(&mut self, tail: Mbuf) -> Result<()> {
        // Chaining rewrites both chains' metadata (next pointers, lengths): no other handle
        // may see either.
        if !self.is_unique() || !tail.is_unique() {
            return Err(Error::Shared);
        }
        // SAFETY: both chains are valid; on success the head takes over tail's references.
        let ret = unsafe { sys::tigon_pktmbuf_chain(self.ptr.as_ptr(), tail.as_ptr()) };
        if ret != 0 {
            return Err(Error::InvalidArgument(
                "chaining would exceed DPDK's segment limit".into(),
            ));
        }
        std::mem::forget(tail);
        Ok(())
    }

    /// Points this (empty, unique, single-segment, pool-backed) mbuf at `len` bytes of `mem`
    /// starting at `offset`: the frame is those bytes, without a copy. `mem` stays alive at
    /// least until the mbuf (and every clone) is freed, e.g. after the NIC sent it.
    ///
    /// The bytes live in shared memory: whoever else maps `mem` must not modify them while
    /// the mbuf is in flight.
    pub fn attach_extbuf(&mut self, mem: &Arc<ExtMem>, offset: usize, len: u16) -> Result<()> {
        if !self.is_unique() || self.nb_segs() != 1 || self.is_external() {
            return Err(Error::InvalidArgument(
                "attach_extbuf needs a unique, single-segment, pool-backed mbuf".into(),
            ));
        }
        if !self.is_empty() {
            return Err(Error::InvalidArgument(
                "attach_extbuf needs an empty mbuf (its data would be lost)".into(),
            ));
        }
        let end = offset.checked_add(len as usize);
        if end.is_none_or(|e| e > mem.len()) {
            return Err(Error::InvalidArgument(format!(
                "extbuf range {offset}+{len} exceeds the {}-byte region",
                mem.len()
            )));
        }
        let iova = mem.iova(offset).unwrap_or(u64::MAX);
        // The region stays mapped while the mbuf lives: one reference to it, given back by
        // `ext_free` (no allocation per mbuf: the shared info lies in the mbuf's own buffer).
        let keep = Arc::into_raw(Arc::clone(mem));
        // SAFETY: the mbuf is unique, direct, single-segment and empty (checked above); the
        // range lies inside `mem`, which `keep` holds mapped until DPDK calls `ext_free`
        // exactly once, when this mbuf (and every clone of it) is freed.
        let ret = unsafe {
            let addr = mem.as_ptr().add(offset) as *mut c_void;
            sys::tigon_pktmbuf_attach_extbuf_inplace(
                self.ptr.as_ptr(),
                addr,
                iova,
                len,
                Some(ext_free),
                keep as *mut c_void,
            )
        };
        if ret != 0 {
            // SAFETY: not attached: `keep` was not handed to DPDK; take the reference back.
            drop(unsafe { Arc::from_raw(keep) });
            return Err(Error::InvalidArgument(
                "the mbuf's own buffer cannot hold the external buffer's shared info".into(),
            ));
        }
        // SAFETY: attached above; the append stays inside the `len`-byte external buffer.
        if len > 0 && unsafe { sys::tigon_pktmbuf_append(self.ptr.as_ptr(), len) }.is_null() {
            return Err(Error::InvalidArgument("extbuf append failed".into()));
        }
        Ok(())
    }
}

/// Called by DPDK when the last mbuf referencing an external buffer is freed: gives back the
/// reference to the region taken in `attach_extbuf`.
unsafe extern "C" fn ext_free(_addr: *mut c_void, opaque: *mut c_void) {
    if !opaque.is_null() {
        // SAFETY: opaque is the `Arc::into_raw` of attach_extbuf; DPDK calls this once.
        drop(unsafe { Arc::from_raw(opaque as *const ExtMem) });
    }
}

/// Whether segment `s` points at an external buffer attached to it (`attach_extbuf`: shared
/// memory others may map, never written through an mbuf). The data rooms of a pool made over
/// external memory (`Mempool::with_external_data`) are the pool's own and writable.
fn seg_external(s: *mut sys::rte_mbuf) -> bool {
    // SAFETY: s is a valid segment (its pool pointer is valid for a pool-backed mbuf); the
    // shim (which looks at the pool for pinned buffers) is asked only about a segment with
    // an external buffer.
    unsafe {
        (*s).ol_flags & sys::TIGON_MBUF_F_EXTERNAL != 0 && sys::tigon_mbuf_ext_attached(s) != 0
    }
}

/// A segment's reference count, read as `rte_mbuf_refcnt_read` does (a relaxed atomic
/// load), without a call into the shim: `is_unique` runs it for every frame built or cut.
///
/// # Safety
/// `s` is a valid segment.
unsafe fn seg_refcnt(s: *mut sys::rte_mbuf) -> u16 {
    // SAFETY: the field is a live, aligned u16 that DPDK only changes atomically.
    unsafe { std::sync::atomic::AtomicU16::from_ptr(&raw mut (*s).refcnt) }
        .load(std::sync::atomic::Ordering::Relaxed)
}

/// Where a segment's data starts (`rte_pktmbuf_mtod`: buffer address plus data offset).
///
/// # Safety
/// `s` is a valid segment.
unsafe fn seg_data(s: *mut sys::rte_mbuf) -> *mut u8 {
    // SAFETY: the data offset lies inside the segment's buffer.
    unsafe { ((*s).buf_addr as *mut u8).add(usize::from((*s).data_off)) }
}

fn seg_slice<'a>(s: *mut sys::rte_mbuf) -> &'a [u8] {
    // SAFETY: s is a valid segment of a chain borrowed for 'a by the caller; its data lies in
    // its buffer.
    unsafe {
        let len = (*s).data_len as usize;
        if len == 0 {
            return &[];
        }
        std::slice::from_raw_parts(seg_data(s), len)
    }
}
