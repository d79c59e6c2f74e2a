//! A lossless in-memory link between two threads, standing for a NIC in benchmarks of the poll
//! loop: frames handed over by the burst (one lock per burst, then a pointer move per frame,
//! as a DPDK ring's bulk enqueue and dequeue), and frame buffers recycled through a lock-free
//! queue (a received frame gives its buffer back when dropped, whichever thread drops it), so
//! that the steady state allocates nothing.

use crate::link::Link;
use crate::wire::MacAddr;
use crossbeam_queue::ArrayQueue;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

struct Pipe {
    /// Frames on their way, oldest first: at most `depth`.
    frames: Mutex<VecDeque<Vec<u8>>>,
    depth: usize,
    /// Emptied buffers travelling back to the sender.
    spare: ArrayQueue<Vec<u8>>,
}

/// The queue behind `m`. A thread that panicked while holding it left it whole (every
/// critical section here is a move of buffers): the other end goes on.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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
            frames: Mutex::new(VecDeque::with_capacity(depth)),
            depth,
            spare: ArrayQueue::new(depth * 2),
        })
    };
    let (ab, ba) = (p(), p());
    let end = |mac, tx, rx| MemLink {
        mac,
        max_frame,
        tx,
        rx,
        tx_full: 0,
    };
    (end(a, ab.clone(), ba.clone()), end(b, ba, ab))
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
        let mut q = lock(&self.rx.frames);
        let n = q.len().min(max);
        let home = &self.rx;
        out.extend(q.drain(..n).map(|buf| MemFrame {
            buf,
            home: home.clone(),
        }));
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
        let mut q = lock(&self.tx.frames);
        let n = frames.len().min(self.tx.depth - q.len());
        q.extend(frames.drain(..n));
        drop(q);
        if !frames.is_empty() {
            self.tx_full += 1;
        }
    }
    fn max_frame(&self) -> usize {
        self.max_frame
    }
    fn mac(&self) -> MacAddr {
        self.mac
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames arrive whole and in order, a full queue holds back the rest of a burst (counted),
    /// and buffers come back to the sender once the receiver is done with them.
    #[test]
    fn frames_cross_in_order_within_the_depth_and_buffers_come_back() {
        let (mut a, mut b) = pair(
            MacAddr([2, 0, 0, 0, 0, 1]),
            MacAddr([2, 0, 0, 0, 0, 2]),
            1514,
            4,
        );
        let mut burst: Vec<Vec<u8>> = (0..6u8)
            .map(|i| {
                let mut v = a.alloc_tx(60).unwrap();
                v[0] = i;
                v
            })
            .collect();
        a.tx_burst(&mut burst);
        assert_eq!(burst.len(), 2, "the queue holds 4");
        assert_eq!(a.tx_full, 1);
        let mut got = Vec::new();
        b.rx_burst(&mut got, 3);
        assert_eq!(
            got.iter().map(|f| f.as_ref()[0]).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert!(got.iter().all(|f| f.as_ref().len() == 60));
        got.clear();
        a.tx_burst(&mut burst);
        assert!(burst.is_empty());
        b.rx_burst(&mut got, 64);
        assert_eq!(
            got.iter().map(|f| f.as_ref()[0]).collect::<Vec<_>>(),
            [3, 4, 5]
        );
        drop(got);
        // Six buffers back with the sender: the next allocations reuse them (each resized to
        // what is asked).
        assert_eq!(a.tx.spare.len(), 6);
        assert_eq!(a.alloc_tx(100).unwrap().len(), 100);
        assert_eq!(a.tx.spare.len(), 5);
    }
}
