//! The request slab: every pending send and receive, named by a [`ReqId`] whose generation
//! count makes stale ids miss.

use super::types::{MsgInfo, ReqId};
use crate::copy::BufRef;
use crate::matching::MatchSpec;

#[derive(Debug)]
pub(super) enum RecvState {
    Posted,
    /// Eager data flowing straight into the buffer.
    Eager,
    /// Rendezvous: pulling `want` bytes; `asked` bytes requested so far.
    Pulling {
        peer: usize,
        msg_id: u32,
        want: u64,
        asked: u64,
        got: u64,
    },
    /// Waiting for an unexpected eager message to finish arriving into the store.
    Claimed,
}

#[derive(Debug)]
pub(super) struct RecvReq {
    pub(super) spec: MatchSpec,
    pub(super) buf: BufRef,
    pub(super) state: RecvState,
    pub(super) info: Option<MsgInfo>,
    pub(super) received: u64,
    pub(super) copies: u32,
    /// Every byte has arrived; the receive completes when `copies` reaches zero.
    pub(super) arrived: bool,
}

impl RecvReq {
    /// A receive posted into `buf` for messages matching `spec`.
    pub(super) fn posted(spec: MatchSpec, buf: BufRef) -> Self {
        RecvReq {
            spec,
            buf,
            state: RecvState::Posted,
            info: None,
            received: 0,
            copies: 0,
            arrived: false,
        }
    }
}

#[derive(Debug)]
pub(super) struct SendReq {
    /// The peer node, and the endpoint on it the message is for.
    pub(super) peer: usize,
    pub(super) dst_ep: u16,
    pub(super) msg_id: u32,
    pub(super) buf: BufRef,
    pub(super) bits: u64,
    pub(super) rank: u32,
    pub(super) sync: bool,
    pub(super) rndv: bool,
    /// Eager frames not yet acknowledged (counted once all are queued).
    pub(super) unacked: u32,
    pub(super) queued: bool,
    pub(super) matched: bool,
    /// Rendezvous only: the receiver sent FIN.
    pub(super) fin: bool,
}

impl SendReq {
    /// A send of `buf` to endpoint `dst_ep` of peer `peer`, nothing of it queued yet.
    #[inline]
    pub(super) fn new(
        peer: usize,
        dst_ep: u16,
        msg_id: u32,
        buf: BufRef,
        bits: u64,
        rank: u32,
        sync: bool,
    ) -> Self {
        SendReq {
            peer,
            dst_ep,
            msg_id,
            buf,
            bits,
            rank,
            sync,
            rndv: false,
            unacked: 0,
            queued: false,
            matched: false,
            fin: false,
        }
    }
}

#[derive(Debug)]
pub(super) enum ReqKind {
    Send(SendReq),
    Recv(RecvReq),
}

#[derive(Debug)]
pub(super) struct Req {
    pub(super) ep: u16,
    pub(super) kind: ReqKind,
}

/// What the completion of a retired request needs of it.
pub(super) struct Retired {
    pub(super) ep: u16,
    /// A send's peer, message id and buffer, and whether the peer's `sends` holds it
    /// (synchronous and rendezvous sends only).
    pub(super) send: Option<(usize, u32, BufRef, bool)>,
}

/// What an acknowledged eager frame did to its send ([`Requests::frame_acked`]).
pub(super) enum Acked {
    /// No such send (it failed or completed meanwhile).
    Gone,
    /// Frames of it are still unacknowledged.
    Pending,
    /// A synchronous, rendezvous or not yet fully queued send: the protocol decides.
    Check,
    /// A standard send, all acknowledged: retired (its endpoint and buffer).
    Done { ep: u16, buf: BufRef },
}

/// Requests by index, each slot with the generation of its latest occupant.
#[derive(Debug, Default)]
pub(super) struct Requests {
    slots: Vec<(u32, Option<Req>)>,
    free: Vec<usize>,
    /// The highest generation of the slots [`Requests::trim`] dropped: a slot made again at
    /// one of their indices starts above it, so a handle of a dropped slot's occupant never
    /// names the new one.
    dropped_generation: u32,
}

/// Slots the slab keeps whatever it held: trimming below this saves too little to pay.
const TRIM_KEEP: usize = 4096;

impl Requests {
    pub(super) fn alloc(&mut self, r: Req) -> ReqId {
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push((self.dropped_generation, None));
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[i];
        slot.0 = slot.0.wrapping_add(1);
        slot.1 = Some(r);
        ReqId::new(i, slot.0)
    }

    pub(super) fn get(&self, id: ReqId) -> Option<&Req> {
        let (g, r) = self.slots.get(id.index())?;
        if *g == id.generation() {
            r.as_ref()
        } else {
            None
        }
    }
    pub(super) fn get_mut(&mut self, id: ReqId) -> Option<&mut Req> {
        let (g, r) = self.slots.get_mut(id.index())?;
        if *g == id.generation() {
            r.as_mut()
        } else {
            None
        }
    }
    pub(super) fn send(&self, id: ReqId) -> Option<&SendReq> {
        match &self.get(id)?.kind {
            ReqKind::Send(s) => Some(s),
            _ => None,
        }
    }
    pub(super) fn send_mut(&mut self, id: ReqId) -> Option<&mut SendReq> {
        match &mut self.get_mut(id)?.kind {
            ReqKind::Send(s) => Some(s),
            _ => None,
        }
    }
    pub(super) fn recv_mut(&mut self, id: ReqId) -> Option<&mut RecvReq> {
        match &mut self.get_mut(id)?.kind {
            ReqKind::Recv(r) => Some(r),
            _ => None,
        }
    }

    /// Retires request `id` (if it is still the slot's occupant): frees its slot and returns
    /// what its completion needs, without moving the whole request out of the slab.
    pub(super) fn retire(&mut self, id: ReqId) -> Option<Retired> {
        let (g, slot) = self.slots.get_mut(id.index())?;
        if *g != id.generation() {
            return None;
        }
        let req = slot.as_ref()?;
        let r = Retired {
            ep: req.ep,
            send: match &req.kind {
                ReqKind::Send(s) => Some((s.peer, s.msg_id, s.buf, s.sync || s.rndv)),
                ReqKind::Recv(_) => None,
            },
        };
        *slot = None;
        self.free.push(id.index());
        Some(r)
    }

    /// An eager frame of send `id` was acknowledged: one frame fewer unacknowledged, and a
    /// standard send with none left is retired here (one look at its slot).
    #[inline]
    pub(super) fn frame_acked(&mut self, id: ReqId) -> Acked {
        let Some((g, slot)) = self.slots.get_mut(id.index()) else {
            return Acked::Gone;
        };
        let Some(Req {
            ep,
            kind: ReqKind::Send(s),
        }) = slot
        else {
            return Acked::Gone;
        };
        if *g != id.generation() {
            return Acked::Gone;
        }
        s.unacked = s.unacked.saturating_sub(1);
        if s.sync || s.rndv || !s.queued {
            return Acked::Check;
        }
        if s.unacked > 0 {
            return Acked::Pending;
        }
        let done = Acked::Done {
            ep: *ep,
            buf: s.buf,
        };
        *slot = None;
        self.free.push(id.index());
        done
    }

    /// Frees request `id`'s slot (if it is still the slot's occupant), for a request
    /// completed by its caller.
    #[inline]
    pub(super) fn remove(&mut self, id: ReqId) {
        if let Some((g, slot)) = self.slots.get_mut(id.index())
            && *g == id.generation()
            && slot.take().is_some()
        {
            self.free.push(id.index());
        }
    }

    /// Gives back the memory of a slab that once held many more requests than it holds now
    /// (a burst of 100,000 unexpected messages, say): when at most a quarter of its slots
    /// are in use and at least a quarter at its end are free, the free ones past the last
    /// in use are dropped, and the free list is ordered so that new requests take the
    /// lowest indices, leaving the high ones to empty for a later trim. Each trim drops a
    /// quarter of the slab or more, so a slab of any size is down in a few; a look that
    /// drops nothing walks at most a quarter of it (the timers look once a second).
    pub(super) fn trim(&mut self) {
        let len = self.slots.len();
        if len <= TRIM_KEEP || self.live() * 4 > len {
            return;
        }
        let mut end = len;
        while end > TRIM_KEEP && self.slots[end - 1].1.is_none() {
            end -= 1;
            if end < len - len / 4 {
                // A quarter free at the end: worth it; find where the free run starts.
                while end > TRIM_KEEP && self.slots[end - 1].1.is_none() {
                    end -= 1;
                }
                break;
            }
        }
        if end > len - len / 4 {
            // Less than a quarter free at the end (the highest requests still pending).
            return;
        }
        for (g, _) in &self.slots[end..] {
            self.dropped_generation = self.dropped_generation.max(*g);
        }
        self.slots.truncate(end);
        self.slots.shrink_to_fit();
        self.free.retain(|&i| i < end);
        // Popped from the end: lowest index first.
        self.free.sort_unstable_by(|a, b| b.cmp(a));
        self.free.shrink_to_fit();
    }

    /// Slots the slab holds (in use or free).
    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Requests still pending: every slot but those on the free list (each way a slot
    /// empties puts it there). Counted, not scanned: the agent asks on every pass of its
    /// loop, and the slab keeps the size of the most requests ever in flight (a scan of it
    /// after a stream of 100,000 unexpected messages took the loop ~10 us a pass, and a
    /// ping-pong's one-way from 2 to 17 us).
    pub(super) fn live(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matching::MatchSpec;

    fn recv() -> Req {
        Req {
            ep: 0,
            kind: ReqKind::Recv(RecvReq::posted(
                MatchSpec::mpi(0, 1, 2),
                BufRef::new(0, 0, 8),
            )),
        }
    }

    /// After a burst, the slab gives its slots back down to the last one in use and what
    /// it keeps anyway; a handle of a dropped slot's occupant never names a later one at
    /// its index; requests still pending are untouched.
    #[test]
    fn a_burst_leaves_no_slab_behind() {
        let mut r = Requests::default();
        let ids: Vec<ReqId> = (0..100_000).map(|_| r.alloc(recv())).collect();
        r.trim();
        assert_eq!(r.capacity(), 100_000, "all in use: nothing to drop");
        // The first 100 and one at 50,000 stay pending.
        let keep: Vec<ReqId> = ids[..100].iter().copied().chain([ids[50_000]]).collect();
        for id in &ids {
            if !keep.contains(id) {
                r.remove(*id);
            }
        }
        assert_eq!(r.live(), 101);
        r.trim();
        assert_eq!(r.capacity(), 50_001, "down to the last slot in use");
        // New requests take the lowest free indices, so the high one is the last in use.
        let low = r.alloc(recv());
        assert_eq!(low.index(), 100);
        r.remove(low);
        r.remove(ids[50_000]);
        r.trim();
        assert_eq!(r.capacity(), TRIM_KEEP, "what it keeps anyway");
        assert_eq!(r.live(), 100);
        for id in &ids[..100] {
            assert!(r.get(*id).is_some(), "pending requests untouched");
        }
        // A slot made again at a dropped index: the old handle does not name it.
        let mut again = Vec::new();
        while again.last().is_none_or(|id: &ReqId| id.index() < 60_000) {
            again.push(r.alloc(recv()));
        }
        let new = *again.last().unwrap();
        let old = ids[new.index()];
        assert_eq!(old.index(), new.index());
        assert_ne!(old.generation(), new.generation());
        assert!(r.get(old).is_none() && r.get(new).is_some());
        assert!(r.retire(old).is_none(), "a stale handle retires nothing");
        // Many in use again: no trim while more than a quarter is.
        let before = r.capacity();
        r.trim();
        assert_eq!(r.capacity(), before);
    }
}
