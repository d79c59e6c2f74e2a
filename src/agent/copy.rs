//! [`CopyEngine`] of the agent: the CPU for small payloads into channel buffers; the dmadev
//! (when given) for payloads of at least `dma_threshold` bytes into channel buffers; and, for
//! large messages, the rank's own memory through `process_vm_writev` / `process_vm_readv`,
//! batched: received frames for a rank are written by one vectored call per poll (or per
//! 256 frames), and a burst's frames of a send buffer are read by one vectored call
//! (`read_vectored`; short reads go through a 256 KiB read-ahead). Queued copies of every kind
//! complete in submission order, each with its own outcome. A received frame for a rank that
//! polls for it is lent to the rank instead of written (`Clients::lend_fragment`): the rank
//! copies it on its own core.

use super::link::RxFrame;
use super::memory::{ClientCopy, ClientMem, Clients, Target};
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;
use tigon_engine::{BufRef, CopyEngine, CopyError, TxRef};
use tigon_pmd::{DmaDev, ExtMem, Mbuf};

/// Reads of a rank's send buffer are fetched this much at a time (one system call per block
/// of frames rather than per frame).
const READ_AHEAD: usize = 256 * 1024;
/// Reads of a rank's send buffer into frames at least this long go straight into the frame
/// (one `process_vm_readv` per frame), shorter ones through the read-ahead.
const DIRECT_READ_MIN: usize = 4096;
/// Direct writes wait for at most this many frames (or the end of the poll) before one
/// vectored `process_vm_writev` delivers them all.
const WRITE_BATCH: usize = 256;

/// A queued copy, in submission order.
enum Queued {
    /// Device operations it took (one per mbuf segment).
    Dma(u16),
    /// A frame for a rank's own memory, in the write batch.
    Direct,
}

struct PendingWrite {
    frame: RxFrame,
    range: Range<usize>,
    pid: i32,
    addr: u64,
    /// The reference's region: checked again when the batch goes out, as the operation may
    /// have ended (or been abandoned) since the frame was queued.
    region: u64,
}

struct ReadCache {
    key: (u64, u64, u64),
    start: u64,
    data: Vec<u8>,
}

/// Bytes moved into and out of client memory, by way.
#[derive(Debug, Default)]
pub struct Copied {
    /// The engine core's own copies (memcpy): between frames and channel buffers, and out of
    /// the read-ahead of a rank's send buffer into frames.
    pub cpu: u64,
    /// dmadev copies into channel buffers.
    pub dma: u64,
    /// Copies to and from the ranks' own memory (`process_vm_*`).
    pub direct: u64,
    /// Payload bytes of large messages lent to their ranks, which copied them (not the
    /// engine: its part was the wire).
    pub lent: u64,
}

pub struct AgentCopy {
    pub clients: Clients,
    pub bytes: Copied,
    pub dma: Option<DmaDev>,
    pub dma_threshold: usize,
    queued: VecDeque<Queued>,
    ops_done: u64,
    batch: Vec<PendingWrite>,
    /// Outcomes of flushed direct writes not yet reported, in order.
    direct_done: VecDeque<Result<(), CopyError>>,
    read_cache: Option<ReadCache>,
    pub dma_errors: u64,
    pub direct_syscalls: u64,
    /// The receive pool's memory, which clients map read-only: frames received there may be
    /// lent to them (`lease`).
    pub rx_mem: Option<Arc<ExtMem>>,
}

impl AgentCopy {
    pub fn new(dma: Option<DmaDev>, dma_threshold: usize) -> Self {
        AgentCopy {
            clients: Clients::default(),
            bytes: Copied::default(),
            dma,
            dma_threshold,
            queued: VecDeque::new(),
            ops_done: 0,
            batch: Vec::new(),
            direct_done: VecDeque::new(),
            read_cache: None,
            dma_errors: 0,
            direct_syscalls: 0,
            rx_mem: None,
        }
    }

    /// Where `range` of `frame` lies in the receive memory the clients map, if it lies
    /// there (in the frame's first segment): only such bytes may be lent.
    fn rx_offset(&self, frame: &RxFrame, range: &Range<usize>) -> Option<u64> {
        let rx = self.rx_mem.as_ref()?;
        let RxFrame::Mbuf(m) = frame else {
            return None;
        };
        let base = rx.as_ptr() as usize;
        let at = m.data().as_ptr() as usize + range.start;
        let inside = at >= base && at + range.len() <= base + rx.len();
        (inside && range.end <= m.data().len()).then(|| (at - base) as u64)
    }

    /// Queues a received payload for a rank's own memory (written by [`Self::flush`]).
    fn queue_direct(&mut self, w: PendingWrite) {
        self.batch.push(w);
        self.queued.push_back(Queued::Direct);
        if self.batch.len() >= WRITE_BATCH {
            self.flush();
        }
    }

    /// The DPDK registration of `m`'s channel when the dmadev should copy `range` of `frame`
    /// there: a whole single-mbuf tail, at least `dma_threshold` long, with room on the device.
    fn dma_target(
        &self,
        m: &ClientMem,
        frame: &RxFrame,
        range: &Range<usize>,
    ) -> Option<Arc<ExtMem>> {
        let dev = self.dma.as_ref()?;
        let fits = matches!(frame, RxFrame::Mbuf(_))
            && range.len() >= self.dma_threshold
            && range.end == frame.as_ref().len()
            && dev.burst_capacity() >= 2;
        fits.then(|| m.ext.clone()).flatten()
    }

    /// Starts the dmadev copy of `range` of `mbuf` to offset `at` of `ext`; it completes in
    /// [`CopyEngine::poll_completed`].
    fn dma_copy(
        &mut self,
        mbuf: Mbuf,
        range: Range<usize>,
        ext: &Arc<ExtMem>,
        at: usize,
    ) -> Result<bool, CopyError> {
        let segs = mbuf.nb_segs();
        let dev = self.dma.as_mut().expect("dma_target found the dmadev");
        dev.copy_from_mbuf(mbuf, range.start, ext, at)
            .map_err(|e| CopyError(format!("dmadev: {e}")))?;
        let _ = dev.submit();
        self.queued.push_back(Queued::Dma(segs));
        self.bytes.dma += range.len() as u64;
        Ok(false)
    }

    /// Delivers the batched direct writes: one vectored system call per run of writes to the
    /// same process; on failure, piece by piece, so only the pieces that fail report it.
    /// Pieces whose operation is no longer armed are not written and report failure.
    fn flush(&mut self) {
        let batch = std::mem::take(&mut self.batch);
        let live: Vec<bool> = batch.iter().map(|w| self.clients.armed(w.region)).collect();
        let mut i = 0;
        while i < batch.len() {
            let pid = batch[i].pid;
            let mut j = i;
            while j < batch.len() && batch[j].pid == pid {
                j += 1;
            }
            let pieces: Vec<(&[u8], u64)> = (i..j)
                .filter(|&k| live[k])
                .map(|k| {
                    (
                        &batch[k].frame.as_ref()[batch[k].range.clone()],
                        batch[k].addr,
                    )
                })
                .collect();
            self.direct_syscalls += !pieces.is_empty() as u64;
            let outcomes: Vec<Result<(), CopyError>> =
                match tigon_shm::remote::write_vectored(pid, &pieces) {
                    Ok(()) => pieces.iter().map(|_| Ok(())).collect(),
                    Err(_) => pieces
                        .iter()
                        .map(|(b, a)| {
                            self.direct_syscalls += 1;
                            tigon_shm::remote::write(pid, *a, b)
                                .map_err(|e| CopyError(format!("writing the client's buffer: {e}")))
                        })
                        .collect(),
                };
            let mut outcomes = outcomes.into_iter().zip(&pieces);
            for &alive in &live[i..j] {
                if !alive {
                    self.direct_done.push_back(Err(CopyError(
                        "the operation of this buffer is over or abandoned".into(),
                    )));
                    continue;
                }
                let (r, (b, _)) = outcomes.next().expect("one outcome per live piece");
                if r.is_ok() {
                    self.bytes.direct += b.len() as u64;
                }
                self.direct_done.push_back(r);
            }
            i = j;
        }
    }
}

impl ClientCopy for AgentCopy {
    fn clients(&mut self) -> &mut Clients {
        &mut self.clients
    }
}

impl CopyEngine<RxFrame> for AgentCopy {
    fn copy_from_frame(
        &mut self,
        frame: RxFrame,
        range: Range<usize>,
        dst: &BufRef,
        off: u64,
    ) -> Result<bool, CopyError> {
        if frame.as_ref().get(range.clone()).is_none() {
            return Err(CopyError("frame range".into()));
        }
        let target = self.clients.resolve(dst, off, range.len())?;
        match target {
            Target::Direct(pid, addr) => {
                // Its client polls for it: lent, the client copies it on its own core (the
                // engine's part is done).
                let frame = match self.rx_offset(&frame, &range) {
                    Some(rx_off) => {
                        let len = range.len() as u32;
                        match self.clients.lend_fragment(dst, off, frame, rx_off, len) {
                            Ok(()) => {
                                self.bytes.lent += len as u64;
                                return Ok(true);
                            }
                            Err(f) => f,
                        }
                    }
                    None => frame,
                };
                self.queue_direct(PendingWrite {
                    frame,
                    range,
                    pid,
                    addr,
                    region: dst.region,
                });
                return Ok(false);
            }
            Target::Channel(m, at) => {
                if let Some(ext) = self.dma_target(m, &frame, &range)
                    && let RxFrame::Mbuf(mbuf) = frame
                {
                    return self.dma_copy(mbuf, range, &ext, at);
                }
            }
        }
        let bytes = &frame.as_ref()[range];
        target.write(bytes)?;
        self.bytes.cpu += bytes.len() as u64;
        Ok(true)
    }

    fn write(&mut self, dst: &BufRef, off: u64, src: &[u8]) -> Result<(), CopyError> {
        let target = self.clients.resolve(dst, off, src.len())?;
        target.write(src)?;
        match target {
            Target::Channel(..) => self.bytes.cpu += src.len() as u64,
            Target::Direct(..) => self.bytes.direct += src.len() as u64,
        }
        Ok(())
    }

    fn read(&mut self, src: &BufRef, off: u64, out: &mut [u8]) -> Result<(), CopyError> {
        let key = (src.region, src.addr, src.len);
        if let Some(c) = &self.read_cache
            && c.key == key
            && off >= c.start
            && off + out.len() as u64 <= c.start + c.data.len() as u64
        {
            let at = (off - c.start) as usize;
            out.copy_from_slice(&c.data[at..at + out.len()]);
            self.bytes.cpu += out.len() as u64;
            return Ok(());
        }
        let target = self.clients.resolve(src, off, out.len())?;
        let Target::Direct(..) = target else {
            target.read(out)?;
            self.bytes.cpu += out.len() as u64;
            return Ok(());
        };
        // A jumbo frame's worth, or the rest of the buffer (a small message staged by its
        // rank when its channel buffers were all taken: nothing after it to fetch): read
        // straight into the frame, the kernel's one copy (the read-ahead below saves system
        // calls on small frames but copies every byte twice).
        if out.len() >= DIRECT_READ_MIN || src.len - off <= out.len() as u64 {
            target.read(out)?;
            self.bytes.direct += out.len() as u64;
            return Ok(());
        }
        // A rank's send buffer: fetch ahead, the next frames will want what follows (as far
        // as the buffer goes: `n` bytes from `off` fit it, like `out` does).
        let n = (src.len - off).min(READ_AHEAD as u64).max(out.len() as u64) as usize;
        let mut c = self.read_cache.take().unwrap_or(ReadCache {
            key,
            start: 0,
            data: Vec::new(),
        });
        c.data.resize(n, 0);
        target.read(&mut c.data)?;
        self.bytes.direct += n as u64;
        c.key = key;
        c.start = off;
        out.copy_from_slice(&c.data[..out.len()]);
        self.bytes.cpu += out.len() as u64;
        self.read_cache = Some(c);
        Ok(())
    }

    fn read_vectored(
        &mut self,
        src: &BufRef,
        off: u64,
        outs: &mut [&mut [u8]],
    ) -> Result<(), CopyError> {
        let total: usize = outs.iter().map(|o| o.len()).sum();
        match self.clients.resolve(src, off, total)? {
            // A rank's send buffer: one system call for the burst's frames of it.
            Target::Direct(pid, addr) => {
                tigon_shm::remote::read_vectored(pid, addr, outs)
                    .map_err(|e| CopyError(format!("reading the client's buffer: {e}")))?;
                self.bytes.direct += total as u64;
                Ok(())
            }
            Target::Channel(m, mut at) => {
                for out in outs.iter_mut() {
                    m.region
                        .read(at, out)
                        .map_err(|e| CopyError(e.to_string()))?;
                    at += out.len();
                }
                self.bytes.cpu += total as u64;
                Ok(())
            }
        }
    }

    fn lend(&mut self, frame: RxFrame, range: Range<usize>, dst: &BufRef) -> Result<(), RxFrame> {
        match self.rx_offset(&frame, &range) {
            Some(at) => self.clients.lend(dst, frame, at),
            None => Err(frame),
        }
    }

    fn tx_ref(&self, src: &BufRef, off: u64, len: usize) -> Option<TxRef<'_>> {
        // A channel buffer registered with DPDK: the port sends from it (the rank's one
        // copy into the channel is the last CPU copy on this side).
        match self.clients.resolve(src, off, len).ok()? {
            Target::Channel(m, at) => Some(TxRef {
                mem: m.ext.as_ref()?,
                offset: at,
                len,
            }),
            Target::Direct(..) => None,
        }
    }

    fn release(&mut self, buf: &BufRef) {
        if self
            .read_cache
            .as_ref()
            .is_some_and(|c| c.key == (buf.region, buf.addr, buf.len))
        {
            self.read_cache = None;
        }
    }

    fn poll_completed(&mut self, done: &mut Vec<Result<(), CopyError>>) {
        if self.queued.is_empty() {
            return;
        }
        self.flush();
        let mut dma_failed = false;
        if let Some(dev) = self.dma.as_mut() {
            let c = dev.completed(64);
            self.ops_done += c.count as u64;
            if c.has_error {
                // The failed operation is next: take it (and any others) with their statuses.
                let mut st = Vec::new();
                let (n, _) = dev.completed_status(64, &mut st);
                self.ops_done += n as u64;
                self.dma_errors += st.iter().filter(|s| !s.is_success()).count() as u64;
                dma_failed = st.iter().any(|s| !s.is_success());
            }
        }
        while let Some(q) = self.queued.front() {
            match q {
                Queued::Dma(ops) => {
                    if self.ops_done < *ops as u64 {
                        break;
                    }
                    self.ops_done -= *ops as u64;
                    done.push(if std::mem::take(&mut dma_failed) {
                        Err(CopyError("dmadev reported a failed copy".into()))
                    } else {
                        Ok(())
                    });
                }
                Queued::Direct => match self.direct_done.pop_front() {
                    Some(r) => done.push(r),
                    None => break,
                },
            }
            self.queued.pop_front();
        }
    }

    fn copied_bytes(&self) -> (u64, u64) {
        (self.bytes.dma, self.bytes.cpu)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::lease::Leases;
    use crate::agent::memory::{ClientMem, bufref};
    use std::sync::Arc;
    use tigon_engine::channel::Payload;
    use tigon_shm::Region;

    /// Reads of a rank's own memory (here this process's): one that takes the rest of the
    /// buffer is the kernel's one copy, straight into the frame; shorter reads of a long
    /// buffer go through the read-ahead (one system call, then a memcpy per frame).
    #[test]
    fn a_read_of_the_rest_of_a_direct_buffer_is_copied_once() {
        let mut c = AgentCopy::new(None, usize::MAX);
        c.clients.insert(
            0,
            ClientMem {
                armed: tigon_engine::fasthash::FastMap::default(),
                region: Arc::new(Region::create("copy-test", 4096, false).unwrap()),
                pid: std::process::id() as i32,
                ext: None,
                leases: Leases::default(),
                fragments: None,
            },
        );
        let msg: Vec<u8> = (0..200u32).map(|i| (i * 7) as u8).collect();
        let t = c.clients.arm(0, 0, 0);
        let whole = bufref(
            0,
            t,
            Payload::Direct {
                addr: msg.as_ptr() as u64,
                len: 200,
            },
        );
        let mut out = [0u8; 200];
        c.read(&whole, 0, &mut out).unwrap();
        assert_eq!(out[..], msg[..]);
        assert_eq!(
            (c.bytes.direct, c.bytes.cpu),
            (200, 0),
            "one copy, the kernel's"
        );
        assert!(c.read_cache.is_none());
        // Two frames of a longer buffer: the first read fetches both, each frame a memcpy.
        let mut a = [0u8; 120];
        c.read(&whole, 0, &mut a).unwrap();
        assert_eq!(a[..], msg[..120]);
        let mut b = [0u8; 80];
        c.read(&whole, 120, &mut b).unwrap();
        assert_eq!(b[..], msg[120..]);
        assert_eq!((c.bytes.direct, c.bytes.cpu), (400, 200));
    }
}
