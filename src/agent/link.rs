//! The engine's [`Link`] over a DPDK port, with a loopback for frames between two endpoints
//! of this node (they never touch the wire).

use std::collections::VecDeque;
use tigon_engine::{Link, MacAddr};
use tigon_pmd::{Mbuf, Mempool, Port};

/// Frames queued on the loopback at most: each holds a tx buffer until the engine reads it.
const LOOPBACK_RING: usize = 512;

/// A received frame: the mbuf itself when it is one segment, else its bytes gathered.
pub enum RxFrame {
    Mbuf(Mbuf),
    Flat(Vec<u8>),
}

impl AsRef<[u8]> for RxFrame {
    fn as_ref(&self) -> &[u8] {
        match self {
            RxFrame::Mbuf(m) => m.data(),
            RxFrame::Flat(v) => v,
        }
    }
}

/// A frame being built: a fresh, single-segment, unshared mbuf.
pub struct TxFrame(Mbuf);

impl AsRef<[u8]> for TxFrame {
    fn as_ref(&self) -> &[u8] {
        self.0.data()
    }
}

impl AsMut<[u8]> for TxFrame {
    fn as_mut(&mut self) -> &mut [u8] {
        // Checked when allocated; the mbuf is not shared before it is sent.
        self.0.data_mut().expect("fresh tx mbuf is unique")
    }
}

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct LinkStats {
    pub loopback_frames: u64,
    pub rx_chained: u64,
    pub tx_alloc_failures: u64,
}

pub struct PortLink {
    pub port: Port,
    pool: Mempool,
    mac: MacAddr,
    max_frame: usize,
    loopback: VecDeque<RxFrame>,
    rx: Vec<Mbuf>,
    tx: Vec<Mbuf>,
    pub stats: LinkStats,
}

impl PortLink {
    pub fn new(port: Port, tx_pool: Mempool, mac: MacAddr, max_frame: usize) -> Self {
        PortLink {
            port,
            pool: tx_pool,
            mac,
            max_frame,
            loopback: VecDeque::new(),
            rx: Vec::new(),
            tx: Vec::new(),
            stats: LinkStats::default(),
        }
    }
}

impl Link for PortLink {
    type Frame = RxFrame;
    type TxBuf = TxFrame;

    fn rx_burst(&mut self, out: &mut Vec<RxFrame>, max: usize) {
        // Up to `max` frames from each source: the loopback (frames this node sent itself)
        // must not starve the port, nor the port the loopback, whose frames hold tx buffers.
        let start = out.len();
        while out.len() - start < max {
            match self.loopback.pop_front() {
                Some(f) => out.push(f),
                None => break,
            }
        }
        self.port.rx_burst(0, &mut self.rx, max);
        for m in self.rx.drain(..) {
            if m.nb_segs() == 1 {
                out.push(RxFrame::Mbuf(m));
            } else {
                self.stats.rx_chained += 1;
                out.push(RxFrame::Flat(m.to_vec()));
            }
        }
    }

    fn alloc_tx(&mut self, len: usize) -> Option<TxFrame> {
        let Ok(len16) = u16::try_from(len) else {
            return None;
        };
        let mut m = match self.pool.alloc() {
            Ok(m) => m,
            Err(_) => {
                self.stats.tx_alloc_failures += 1;
                return None;
            }
        };
        if m.append(len16).is_err() || m.data_mut().is_err() {
            self.stats.tx_alloc_failures += 1;
            return None;
        }
        Some(TxFrame(m))
    }

    fn tx_burst(&mut self, frames: &mut Vec<TxFrame>) {
        let mut refused = Vec::new();
        for f in frames.drain(..) {
            if f.0.data().get(..6) != Some(&self.mac.0[..]) {
                self.tx.push(f.0);
            } else if self.loopback.len() < LOOPBACK_RING && refused.is_empty() {
                self.stats.loopback_frames += 1;
                self.loopback.push_back(RxFrame::Mbuf(f.0));
            } else {
                // A full loopback ring pushes back like a full driver ring (and keeps its
                // order: once one frame waits, the rest of this burst's loopback waits too).
                refused.push(TxFrame(f.0));
            }
        }
        self.port.tx_burst(0, &mut self.tx);
        // What the driver did not take waits for the next burst, in order.
        frames.extend(refused);
        frames.extend(self.tx.drain(..).map(TxFrame));
    }

    fn max_frame(&self) -> usize {
        self.max_frame
    }

    fn mac(&self) -> MacAddr {
        self.mac
    }
}
