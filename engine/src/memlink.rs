//! A lossless in-memory link between two threads: lock-free queues of frames, with the frame
//! buffers recycled so the steady state allocates nothing. For benchmarks of the poll loop.

use crate::link::Link;
use crate::wire::MacAddr;
use crossbeam_queue::ArrayQueue;
use std::sync::Arc;

struct Pipe {
    frames: ArrayQueue<Vec<u8>>,
    /// Emptied buffers travelling back to the sender.
    spare: ArrayQueue<Vec<u8>>,
}

/// One end of a [`pair`].
pub struct MemLink {
    mac: MacAddr,
    max_frame: usize,
    tx: Arc<Pipe>,
    rx: Arc<Pipe>,
    /// Bursts cut short because the peer's queue was full.
    pub tx_full: u64,
}

/// Two connected ends with `depth` frames of buffering each way.
pub fn pair(a: MacAddr, b: MacAddr, max_frame: usize, depth: usize) -> (MemLink, MemLink) {
    let p = || {
        Arc::new(Pipe {
            frames: ArrayQueue::new(depth),
            spare: ArrayQueue::new(depth * 2),
        })
    };
    let (ab, ba) = (p(), p());
    (
        MemLink {
            mac: a,
            max_frame,
            tx: ab.clone(),
            rx: ba.clone(),
            tx_full: 0,
        },
        MemLink {
            mac: b,
            max_frame,
            tx: ba,
            rx: ab,
            tx_full: 0,
        },
    )
}

/// A received frame; its buffer returns to the sender's spares when dropped.
pub struct MemFrame {
    buf: Vec<u8>,
    home: Arc<Pipe>,
}

impl AsRef<[u8]> for MemFrame {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

// The link's functions are kept out of line so that `make bench-instr` can count the
// engine without them (a call per burst or frame is all it costs).
impl Drop for MemFrame {
    #[inline(never)]
    fn drop(&mut self) {
        let _ = self.home.spare.push(std::mem::take(&mut self.buf));
    }
}

impl Link for MemLink {
    type Frame = MemFrame;
    type TxBuf = Vec<u8>;

    #[inline(never)]
    fn rx_burst(&mut self, out: &mut Vec<MemFrame>, max: usize) {
        for _ in 0..max {
            match self.rx.frames.pop() {
                Some(buf) => out.push(MemFrame {
                    buf,
                    home: self.rx.clone(),
                }),
                None => break,
            }
        }
    }
    #[inline(never)]
    fn alloc_tx(&mut self, len: usize) -> Option<Vec<u8>> {
        let mut v = self.tx.spare.pop().unwrap_or_default();
        // Same-size frames reuse their buffer as is: the engine overwrites every byte.
        if v.len() != len {
            v.clear();
            v.resize(len, 0);
        }
        Some(v)
    }
    #[inline(never)]
    fn tx_burst(&mut self, frames: &mut Vec<Vec<u8>>) {
        let mut sent = 0;
        for f in frames.iter_mut() {
            if let Err(back) = self.tx.frames.push(std::mem::take(f)) {
                *f = back;
                self.tx_full += 1;
                break;
            }
            sent += 1;
        }
        frames.drain(..sent);
    }
    fn max_frame(&self) -> usize {
        self.max_frame
    }
    fn mac(&self) -> MacAddr {
        self.mac
    }
}
