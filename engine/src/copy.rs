//! The copy engine: where payload bytes move between frames and message buffers.
//!
//! The engine never touches message memory itself. It names buffers with [`BufRef`]s that only
//! the copy engine resolves: heap regions in tests, a client's shared-memory channel or its
//! address space in the agent, where a DMA device may do the work asynchronously.

use core::ops::Range;

/// An opaque reference to message memory: `region` and `addr` mean something to the copy
/// engine only; `len` is the buffer's capacity in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BufRef {
    pub region: u64,
    pub addr: u64,
    pub len: u64,
}

impl BufRef {
    pub fn new(region: u64, addr: u64, len: u64) -> Self {
        BufRef { region, addr, len }
    }
}

/// A copy that could not be done: the buffer does not resolve, or the device failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyError(pub String);

impl core::fmt::Display for CopyError {
    fn fmt(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
        write!(f, "copy failed: {}", self.0)
    }
}

/// Moves payload. `F` is the link's received frame type, handed over so an asynchronous device
/// can keep it alive until its copy is done.
pub trait CopyEngine<F> {
    /// Copies `frame[range]` into `dst` at byte `dst_off`. `Ok(true)`: done now; `Ok(false)`:
    /// queued, reported later by [`CopyEngine::poll_completed`] in submission order.
    fn copy_from_frame(
        &mut self,
        frame: F,
        range: Range<usize>,
        dst: &BufRef,
        dst_off: u64,
    ) -> Result<bool, CopyError>;
    /// Lends `frame`, whose `range` holds a whole message, to the owner of receive buffer
    /// `dst`, who reads the payload where it lies instead of having it copied into `dst`
    /// (the agent's ranks map its receive memory read-only and give the frame back when
    /// done). `Ok(())`: lent, the receive is complete and `dst` untouched; `Err(frame)`:
    /// not (the caller copies it).
    fn lend(&mut self, frame: F, _range: Range<usize>, _dst: &BufRef) -> Result<(), F> {
        Err(frame)
    }
    /// Whether [`CopyEngine::lend`] may ever lend: a copier that never does says so, and the
    /// receive path then copies at once instead of handing the frame to `lend` and taking it
    /// back (a small message's frame moved twice).
    fn lends(&self) -> bool {
        true
    }
    /// Synchronously writes `src` into `dst` at `dst_off` (unexpected-message delivery).
    fn write(&mut self, dst: &BufRef, dst_off: u64, src: &[u8]) -> Result<(), CopyError>;
    /// Synchronously reads from `src` at `src_off` into `out` (building transmit frames).
    fn read(&mut self, src: &BufRef, src_off: u64, out: &mut [u8]) -> Result<(), CopyError>;
    /// Reads consecutive bytes of `src` from `src_off` into each of `outs` in turn (the
    /// payloads of a burst's frames of one message): where a read has a fixed cost per call
    /// (a system call into another process), one call for all of them.
    fn read_vectored(
        &mut self,
        src: &BufRef,
        src_off: u64,
        outs: &mut [&mut [u8]],
    ) -> Result<(), CopyError> {
        let mut off = src_off;
        for out in outs.iter_mut() {
            self.read(src, off, out)?;
            off += out.len() as u64;
        }
        Ok(())
    }
    /// Whether a burst's rendezvous payloads are better read together, by
    /// [`CopyEngine::read_vectored`] once the burst is built (a copier whose every read has a
    /// fixed cost, such as a system call into another process), than each as its frame is
    /// built (a copier that reads memory directly: the batching would only add work).
    fn reads_in_batches(&self) -> bool {
        true
    }
    /// Appends the outcome of each queued copy finished since the last call, in submission
    /// order (a failure fails only the receive that copy belonged to).
    fn poll_completed(&mut self, done: &mut Vec<Result<(), CopyError>>);
    /// Where `len` bytes of `src` at `src_off` lie, when the link may send them in place
    /// (see [`crate::Link::alloc_tx_ref`]); `None`: they must be read ([`CopyEngine::read`]).
    fn tx_ref(&self, _src: &BufRef, _src_off: u64, _len: usize) -> Option<crate::TxRef<'_>> {
        None
    }
    /// Bytes copied so far by the device and by the CPU.
    fn copied_bytes(&self) -> (u64, u64) {
        (0, 0)
    }
    /// The operation using `buf` is over: forget anything cached about it (its owner may now
    /// change the bytes).
    fn release(&mut self, _buf: &BufRef) {}
}

/// Memory the CPU copier can address directly.
pub trait Memory {
    fn slice(&self, b: &BufRef) -> Option<&[u8]>;
    fn slice_mut(&mut self, b: &BufRef) -> Option<&mut [u8]>;
}

#[inline]
fn range_of(b: &BufRef, off: u64, len: usize) -> Result<Range<usize>, CopyError> {
    match off.checked_add(len as u64) {
        Some(end) if end <= b.len => Ok(off as usize..end as usize),
        _ => Err(overrun(b, off, len)),
    }
}

// The errors are built out of line: the copies run for every message, the errors never.
#[cold]
#[inline(never)]
fn overrun(b: &BufRef, off: u64, len: usize) -> CopyError {
    CopyError(format!(
        "{len} bytes at offset {off} overrun a {}-byte buffer",
        b.len
    ))
}

/// Copies `src` into `to` (of the same length). 8 to 16 bytes (a small message's payload: the
/// common MPI message) are moved in line as two words that may overlap: a call to `memcpy`
/// for them cost more than the copy.
#[inline(always)]
fn copy_bytes(to: &mut [u8], src: &[u8]) {
    if src.len() <= 16
        && to.len() == src.len()
        && let (Some(&head), Some(&tail)) = (src.first_chunk::<8>(), src.last_chunk::<8>())
        && let Some(first) = to.first_chunk_mut::<8>()
    {
        *first = head;
        if let Some(last) = to.last_chunk_mut::<8>() {
            *last = tail;
        }
    } else {
        to.copy_from_slice(src);
    }
}

#[cold]
#[inline(never)]
fn unknown(b: &BufRef) -> CopyError {
    CopyError(format!("unknown buffer {b:?}"))
}

#[cold]
#[inline(never)]
fn smaller(what: &str) -> CopyError {
    CopyError(format!("{what} smaller than announced"))
}

/// Synchronous copies by the CPU over any [`Memory`].
#[derive(Debug, Default)]
pub struct CpuCopy<M> {
    pub mem: M,
    bytes: u64,
}

impl<M> CpuCopy<M> {
    pub fn new(mem: M) -> Self {
        CpuCopy { mem, bytes: 0 }
    }
}

impl<F: AsRef<[u8]>, M: Memory> CopyEngine<F> for CpuCopy<M> {
    // In line in the receive path: out of line, a small message paid a call and a stack
    // frame for a copy of a few bytes.
    #[inline(always)]
    fn copy_from_frame(
        &mut self,
        frame: F,
        range: Range<usize>,
        dst: &BufRef,
        dst_off: u64,
    ) -> Result<bool, CopyError> {
        let Some(src) = frame.as_ref().get(range) else {
            return Err(smaller("frame"));
        };
        <Self as CopyEngine<&[u8]>>::write(self, dst, dst_off, src)?;
        Ok(true)
    }
    #[inline(always)]
    fn write(&mut self, dst: &BufRef, dst_off: u64, src: &[u8]) -> Result<(), CopyError> {
        let r = range_of(dst, dst_off, src.len())?;
        let Some(m) = self.mem.slice_mut(dst) else {
            return Err(unknown(dst));
        };
        let Some(to) = m.get_mut(r) else {
            return Err(smaller("buffer"));
        };
        copy_bytes(to, src);
        self.bytes += src.len() as u64;
        Ok(())
    }
    #[inline(always)]
    fn read(&mut self, src: &BufRef, src_off: u64, out: &mut [u8]) -> Result<(), CopyError> {
        let r = range_of(src, src_off, out.len())?;
        let Some(m) = self.mem.slice(src) else {
            return Err(unknown(src));
        };
        let Some(from) = m.get(r) else {
            return Err(smaller("buffer"));
        };
        copy_bytes(out, from);
        Ok(())
    }
    fn poll_completed(&mut self, _done: &mut Vec<Result<(), CopyError>>) {}
    // The buffers are this process's own: nobody to lend a frame to.
    fn lends(&self) -> bool {
        false
    }
    // A read is a copy within this process: nothing to save by reading a burst together.
    fn reads_in_batches(&self) -> bool {
        false
    }
    fn copied_bytes(&self) -> (u64, u64) {
        (0, self.bytes)
    }
}

/// Heap regions for tests and benchmarks: `BufRef::region` names a `Vec<u8>`, `addr` is the
/// offset into it.
#[derive(Debug, Default)]
pub struct HeapMemory {
    /// Region `i + 1` at index `i` (`None` once taken).
    regions: Vec<Option<Vec<u8>>>,
}

impl HeapMemory {
    /// Adds a region holding `data`; returns a reference to all of it.
    pub fn insert(&mut self, data: Vec<u8>) -> BufRef {
        let len = data.len() as u64;
        self.regions.push(Some(data));
        BufRef::new(self.regions.len() as u64, 0, len)
    }
    pub fn take(&mut self, b: &BufRef) -> Option<Vec<u8>> {
        self.slot_mut(b.region)?.take()
    }
    pub fn get(&self, b: &BufRef) -> Option<&Vec<u8>> {
        self.regions
            .get((b.region as usize).checked_sub(1)?)?
            .as_ref()
    }
    fn slot_mut(&mut self, region: u64) -> Option<&mut Option<Vec<u8>>> {
        self.regions.get_mut((region as usize).checked_sub(1)?)
    }
}

impl Memory for HeapMemory {
    #[inline]
    fn slice(&self, b: &BufRef) -> Option<&[u8]> {
        let v = self.get(b)?;
        v.get(b.addr as usize..(b.addr.checked_add(b.len)?) as usize)
    }
    #[inline]
    fn slice_mut(&mut self, b: &BufRef) -> Option<&mut [u8]> {
        let v = self.slot_mut(b.region)?.as_mut()?;
        v.get_mut(b.addr as usize..(b.addr.checked_add(b.len)?) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_of_every_short_length_land_whole_and_in_place() {
        for n in 0..=40usize {
            let mut c = CpuCopy::new(HeapMemory::default());
            let data: Vec<u8> = (0..n as u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
            let src = c.mem.insert(data.clone());
            let dst = c.mem.insert(vec![0xee; n + 4]);
            let mut out = vec![0u8; n];
            <CpuCopy<HeapMemory> as CopyEngine<&[u8]>>::read(&mut c, &src, 0, &mut out).unwrap();
            assert_eq!(out, data, "read of {n} bytes");
            <CpuCopy<HeapMemory> as CopyEngine<&[u8]>>::write(&mut c, &dst, 2, &data).unwrap();
            let got = c.mem.get(&dst).unwrap();
            assert_eq!(&got[2..2 + n], &data[..], "write of {n} bytes");
            assert_eq!(&got[..2], &[0xee, 0xee], "before the write of {n} bytes");
            assert_eq!(&got[2 + n..], &[0xee, 0xee], "after the write of {n} bytes");
        }
    }
}
