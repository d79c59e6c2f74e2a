//! The unexpected store: messages that arrived before a matching receive was posted. Eager
//! messages are held whole (bounded by bytes and count, paid for by the credit granted to
//! their senders); rendezvous RTSs header-only (bounded by their own count). An eager
//! message is held as the frames it came in, not copied out of them (bounded by
//! `Config::unexpected_frames`: each pins a buffer of the link's receive pool), so its
//! payload is copied once, at the match, or its one frame lent to the receiver there.

use super::types::{MsgInfo, ReqId};
use crate::fasthash::FastMap as HashMap;
use crate::matching::MatchSpec;
use core::ops::Range;
use smallvec::SmallVec;

/// Where a stored message's payload lies.
pub(super) enum Data<F> {
    /// Copied out of its frames, which went back to the link (a message past the frame
    /// bound): `received` bytes of it so far.
    Bytes(Vec<u8>),
    /// Its frames as they arrived, in order, each with where its payload lies in it;
    /// `reserved` of the store's frame bound are counted for it (all of its fragments).
    Frames {
        held: SmallVec<[(F, Range<usize>); 1]>,
        reserved: usize,
    },
}

pub(super) struct Unexp<F> {
    pub(super) ep: u16,
    /// The peer node it came from.
    pub(super) peer: usize,
    pub(super) msg_id: u32,
    pub(super) info: MsgInfo,
    pub(super) sync: bool,
    pub(super) rndv: bool,
    pub(super) data: Data<F>,
    pub(super) received: u64,
    pub(super) cost: u32,
    /// A receive waiting for the rest of the data.
    pub(super) claimed: Option<ReqId>,
}

impl<F> Unexp<F> {
    /// Store bytes the message takes (what its sender's credit pays for).
    fn bytes(&self) -> u64 {
        match &self.data {
            Data::Bytes(v) => v.capacity() as u64,
            Data::Frames { .. } => self.info.len,
        }
    }
    fn frames(&self) -> usize {
        match &self.data {
            Data::Bytes(_) => 0,
            Data::Frames { reserved, .. } => *reserved,
        }
    }
}

pub(super) struct Store<F> {
    msgs: HashMap<u64, Unexp<F>>,
    next: u64,
    bytes: u64,
    /// Frames held, or reserved for fragments still to come.
    frames: usize,
    /// Unexpected RTSs held (bounded apart from eager messages: they cost no credit).
    rts: usize,
    /// Messages taken by `improbe`, by handle, until `imrecv` receives them.
    pub(super) probed: HashMap<u64, u64>,
    /// Messages held per peer node (only peers with some): a session is not retired while
    /// the store holds its messages.
    held: HashMap<usize, u32>,
}

impl<F> Default for Store<F> {
    fn default() -> Self {
        Store {
            msgs: HashMap::default(),
            next: 1,
            bytes: 0,
            frames: 0,
            rts: 0,
            probed: HashMap::default(),
            held: HashMap::default(),
        }
    }
}

impl<F> Store<F> {
    /// Stores `x`; returns its key.
    pub(super) fn insert(&mut self, x: Unexp<F>) -> u64 {
        let u = self.next;
        self.next += 1;
        self.bytes += x.bytes();
        self.frames += x.frames();
        self.rts += usize::from(x.rndv);
        *self.held.entry(x.peer).or_insert(0) += 1;
        self.msgs.insert(u, x);
        u
    }

    pub(super) fn remove(&mut self, u: u64) -> Option<Unexp<F>> {
        let x = self.msgs.remove(&u)?;
        if let Some(n) = self.held.get_mut(&x.peer) {
            *n -= 1;
            if *n == 0 {
                self.held.remove(&x.peer);
            }
        }
        self.bytes -= x.bytes();
        self.frames -= x.frames();
        self.rts -= usize::from(x.rndv);
        Some(x)
    }

    pub(super) fn get(&self, u: u64) -> Option<&Unexp<F>> {
        self.msgs.get(&u)
    }
    pub(super) fn get_mut(&mut self, u: u64) -> Option<&mut Unexp<F>> {
        self.msgs.get_mut(&u)
    }

    /// Whether stored message `u` matches what `spec` asks for.
    pub(super) fn matches(&self, u: u64, spec: &MatchSpec) -> bool {
        self.get(u)
            .is_some_and(|x| spec.matches(x.info.match_bits, x.info.src_rank))
    }

    /// The rendezvous messages (RTSs) held from peer node `p`: a scan of the store, for the
    /// rare restart of a peer.
    pub(super) fn rts_from(&self, p: usize) -> Vec<u64> {
        if !self.holds_from(p) {
            return Vec::new();
        }
        let mut v: Vec<u64> = self
            .msgs
            .iter()
            .filter(|(_, x)| x.peer == p && x.rndv)
            .map(|(&u, _)| u)
            .collect();
        v.sort_unstable();
        v
    }

    /// Peer node `p` restarted: its eager messages held here stay (they are whole here, or
    /// dropped by the caller), but owe nothing to its next incarnation, which reuses message
    /// ids and starts credit over: no Matched for a synchronous one, no credit released.
    pub(super) fn orphan_from(&mut self, p: usize) {
        if !self.holds_from(p) {
            return;
        }
        for x in self.msgs.values_mut().filter(|x| x.peer == p) {
            x.sync = false;
            x.cost = 0;
        }
    }

    /// Whether messages of peer node `p` are held.
    pub(super) fn holds_from(&self, p: usize) -> bool {
        self.held.contains_key(&p)
    }

    /// Bytes held by eager messages.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }
    /// Frames held, or reserved for fragments still to come.
    pub(super) fn frames(&self) -> usize {
        self.frames
    }
    /// RTSs held.
    pub(super) fn rts(&self) -> usize {
        self.rts
    }
    /// Eager messages held.
    pub(super) fn eager(&self) -> usize {
        self.msgs.len() - self.rts
    }
}
