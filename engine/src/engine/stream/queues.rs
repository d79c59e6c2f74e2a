//! What a stream keeps of its frames: their descriptors ([`TxDesc`]) and the queues that hold
//! them, behind one pointer in the peer, and the ack's due time in 8 bytes; the last two are
//! what let a peer fit three cache lines (peer.rs, `Peer`).

use crate::engine::lazy::{Empty, give_back};
use crate::engine::types::ReqId;
use crate::wire::Kind;
use std::collections::{BTreeMap, VecDeque};

/// One sequenced frame to (re)build: enough to emit it again with the same sequence number.
#[derive(Debug, Clone, Copy)]
pub(in crate::engine) struct TxDesc {
    pub(in crate::engine) seq: u32,
    pub(in crate::engine) kind: Kind,
    pub(in crate::engine) flags: u16,
    pub(in crate::engine) req: Option<ReqId>,
    pub(in crate::engine) msg_id: u32,
    pub(in crate::engine) frag_index: u32,
    pub(in crate::engine) frag_count: u32,
    pub(in crate::engine) offset: u64,
    pub(in crate::engine) len: u32,
    pub(in crate::engine) total: u64,
    pub(in crate::engine) first_sent: u64,
    pub(in crate::engine) last_sent: u64,
    pub(in crate::engine) retries: u32,
    pub(in crate::engine) acked: bool,
    /// On the resend queue (so queueing it is O(1), not a search of the queue).
    pub(in crate::engine) queued: bool,
}

impl TxDesc {
    /// A one-fragment frame of `kind` about message `msg_id`, with no data.
    pub(in crate::engine) fn new(kind: Kind, msg_id: u32) -> Self {
        TxDesc {
            seq: 0,
            kind,
            flags: 0,
            req: None,
            msg_id,
            frag_index: 0,
            frag_count: 1,
            offset: 0,
            len: 0,
            total: 0,
            first_sent: 0,
            last_sent: 0,
            retries: 0,
            acked: false,
            queued: false,
        }
    }
}

/// When the ack owed falls due, if one is: an `Option<u64>` in 8 bytes (`u64::MAX` for none;
/// a time is never that late), which is what lets a peer fit three cache lines (peer.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::engine) struct Due(u64);

impl Due {
    pub(in crate::engine) const NONE: Due = Due(u64::MAX);

    /// Due at `t` ns.
    #[inline]
    pub(in crate::engine) fn at(t: u64) -> Due {
        Due(t.min(u64::MAX - 1))
    }

    #[inline]
    pub(in crate::engine) fn get(self) -> Option<u64> {
        (self != Self::NONE).then_some(self.0)
    }

    #[inline]
    pub(in crate::engine) fn is_some(self) -> bool {
        self != Self::NONE
    }

    #[inline]
    pub(in crate::engine) fn is_none(self) -> bool {
        self == Self::NONE
    }
}

/// The stream's collections, allocated together on a peer's first use of any and given back
/// together once all are empty (peer.rs, `shrink`): one pointer in the peer instead of five,
/// which is what lets a peer's state fit three cache lines (peer.rs, `Peer`).
#[derive(Debug)]
pub(in crate::engine) struct Queues<F> {
    /// New frames, sent in this order: control frames (Pull, Fin, Matched, Grant, Ping:
    /// small, and what keeps the other side's pipe full), the messages in `pending` (eager
    /// fragments and RTSs, in the order matching needs), then bulk data (pulled blocks). A
    /// Pull or a new message never waits behind a backlog of pulled blocks. Control and bulk
    /// share `ctl_bulk`, the stream's `n_ctl` control frames in front (one queue less).
    pub(in crate::engine) ctl_bulk: VecDeque<TxDesc>,
    pub(in crate::engine) pending: VecDeque<TxDesc>,
    pub(in crate::engine) resend: VecDeque<u32>,
    pub(in crate::engine) unacked: VecDeque<TxDesc>,
    pub(in crate::engine) reorder: BTreeMap<u32, F>,
}

impl<F: 'static> Queues<F> {
    /// Drops the buffers of the empty queues (the others are in use).
    pub(in crate::engine) fn give_back_empty(&mut self) {
        give_back(&mut self.ctl_bulk);
        give_back(&mut self.pending);
        give_back(&mut self.resend);
        give_back(&mut self.unacked);
        give_back(&mut self.reorder);
    }
}

impl<F> Default for Queues<F> {
    fn default() -> Self {
        Queues {
            ctl_bulk: VecDeque::new(),
            pending: VecDeque::new(),
            resend: VecDeque::new(),
            unacked: VecDeque::new(),
            reorder: BTreeMap::new(),
        }
    }
}

impl<F: 'static> Empty for Queues<F> {
    const EMPTY: &'static Self = &Queues {
        ctl_bulk: VecDeque::new(),
        pending: VecDeque::new(),
        resend: VecDeque::new(),
        unacked: VecDeque::new(),
        reorder: BTreeMap::new(),
    };
    fn heap_bytes(&self) -> usize {
        self.ctl_bulk.heap_bytes()
            + self.pending.heap_bytes()
            + self.resend.heap_bytes()
            + self.unacked.heap_bytes()
            + self.reorder.heap_bytes()
    }
    fn is_clear(&self) -> bool {
        self.ctl_bulk.is_empty()
            && self.pending.is_empty()
            && self.resend.is_empty()
            && self.unacked.is_empty()
            && self.reorder.is_empty()
    }
}
