//! The message protocol over the stream: how a send becomes frames (eager while the peer's
//! credit covers it, rendezvous otherwise), how an arriving message meets its receive (a
//! posted one, or the unexpected store until one is posted), and the dispatch of in-order
//! frames to the two message state machines, [`eager`] and [`rndv`].

mod eager;
mod rndv;

use crate::addr::EndpointAddr;
use crate::copy::CopyEngine;
use crate::engine::Engine;
use crate::engine::fast;
use crate::engine::peer::eager_cost;
use crate::engine::request::{RecvState, Req, ReqKind, Requests};
use crate::engine::stream::TxDesc;
use crate::engine::types::{MsgInfo, Outcome, ReqId};
use crate::engine::unexpected::Unexp;
use crate::link::Link;
use crate::wire::{self, Kind, Repr};

impl<L: Link, C: CopyEngine<L::Frame>> Engine<L, C> {
    /// Moves the sends that waited for the connection onto the wire queue, in order.
    pub(in crate::engine) fn flush_waiting(&mut self, p: usize) {
        while !self.peers[p].msgs.q.waiting.is_empty()
            && let Some(id) = self.peers[p].msgs.q.waiting.pop_front()
        {
            self.queue_send(p, id);
        }
    }

    /// Expands a send into frames on the peer's queue: eager while the peer's credit covers
    /// it, rendezvous otherwise.
    pub(in crate::engine) fn queue_send(&mut self, p: usize, id: ReqId) {
        let rndv_threshold = self.cfg.rndv_threshold as u64;
        let peer = &mut self.peers[p];
        let (frag, avail) = (peer.conn.frag as u32, peer.credit.avail());
        let Some(s) = self.reqs.send_mut(id) else {
            return;
        };
        let len = s.buf.len;
        let base = TxDesc {
            flags: if s.sync { wire::FLAG_SYNC } else { 0 },
            req: Some(id),
            total: len,
            ..TxDesc::new(Kind::Eager, s.msg_id)
        };
        s.queued = true;
        let small = !s.sync && fast::small_fits(len, frag, self.cfg.rndv_threshold);
        if small && eager_cost(len) <= avail {
            // A small standard message: one frame under the compact header, no fragment
            // arithmetic (as isend queues it when nothing waits for the connection).
            s.unacked = 1;
            fast::queue_small(peer, id, s.msg_id, len);
            self.stats.eager_sent += 1;
            return;
        } else if len <= rndv_threshold && eager_cost(len) <= avail {
            let count = len.div_ceil(frag as u64).max(1) as u32;
            // A small standard message: one frame under the compact header.
            let kind = if count == 1 && !s.sync && len as usize <= wire::COMPACT_MAX_PAYLOAD {
                Kind::Small
            } else {
                Kind::Eager
            };
            s.unacked = count;
            peer.credit.used = peer.credit.used.wrapping_add(eager_cost(len));
            for i in 0..count {
                let off = i as u64 * frag as u64;
                let l = (len - off).min(frag as u64) as u32;
                peer.stream.queue(TxDesc {
                    kind,
                    frag_index: i,
                    frag_count: count,
                    offset: off,
                    len: l,
                    ..base
                });
            }
            self.stats.eager_sent += 1;
        } else {
            // Rendezvous needs no credit: the receiver stores only the RTS's header (bounded
            // by its count limit) and pulls the data into the posted buffer.
            s.rndv = true;
            let mut flags = base.flags;
            if len <= rndv_threshold {
                flags |= wire::FLAG_NO_CREDIT;
                self.stats.credit_fallbacks += 1;
            }
            peer.stream.queue(TxDesc {
                kind: Kind::Rts,
                flags,
                ..base
            });
            self.stats.rndv_sent += 1;
        }
        // Only sends a frame will name by message id (the receiver's Matched, Pull or Fin)
        // are kept by it: a standard eager send is reached through its frames' descriptors.
        if s.sync || s.rndv {
            peer.msgs.q.sends.insert(s.msg_id, id);
        }
    }

    /// Completes send `id` once the protocol is done with it: every eager frame acknowledged
    /// (and, if synchronous, the message matched), or the rendezvous receiver's FIN.
    pub(in crate::engine) fn try_finish_send(&mut self, id: ReqId) {
        let Some(s) = self.reqs.send_mut(id) else {
            return;
        };
        // A matched synchronous message has reached the receiver whole (the receiver matches
        // it once its last fragment is in), so it completes even before the acks do.
        let done = if s.rndv {
            s.fin
        } else {
            s.queued && (s.unacked == 0 && !s.sync || s.sync && s.matched)
        };
        if done {
            self.finish(id, Ok(Outcome::Sent));
        }
    }

    /// The receiver of message `msg_id` from an endpoint of this node matched it (`Matched`:
    /// a synchronous eager message) or is done with it (`Fin`: rendezvous): its send completes
    /// now, in the same pass as the receive and right behind it, rather than when a frame has
    /// gone round the loopback: a rank that saw its receive complete then finds the send
    /// complete too. False if the sender is on another node (the frame tells it).
    pub(in crate::engine) fn finish_local_send(
        &mut self,
        p: usize,
        msg_id: u32,
        news: Kind,
    ) -> bool {
        // This node's own peer entry is both the sender's and the receiver's side.
        if self.peers[p].mac != self.mac {
            return false;
        }
        let Some(&id) = self.peers[p].msgs.q.sends.get(&msg_id) else {
            return false;
        };
        let Some(s) = self.reqs.send_mut(id) else {
            return false;
        };
        match news {
            Kind::Fin => s.fin = true,
            _ => s.matched = true,
        }
        self.try_finish_send(id);
        true
    }

    /// Handles one in-order frame. `false`: cannot take it now (store full); it is not consumed.
    pub(in crate::engine) fn process(&mut self, p: usize, r: &Repr, f: L::Frame) -> bool {
        match r.kind.expect("parsed") {
            Kind::Eager | Kind::Small => return self.on_eager(p, r, f),
            Kind::Rts => return self.on_rts(p, r),
            Kind::Pull => self.on_pull(p, r),
            Kind::PullData => self.on_pull_data(p, r.msg_id, r.offset, r.length, f),
            Kind::Matched => self.on_matched(p, r.msg_id),
            Kind::Fin => self.on_fin(p, r),
            Kind::Grant => self.on_grant(p, r),
            Kind::GrantReturn => self.on_grant_return(p, r),
            Kind::Connect
            | Kind::ConnectAck
            | Kind::Ack
            | Kind::Reset
            | Kind::Ping
            | Kind::Probe
            | Kind::ShortAck => {}
        }
        true
    }

    /// What a message from peer node `p` with header `r` reports to its receiver.
    fn msg_info(&self, p: usize, r: &Repr) -> MsgInfo {
        MsgInfo {
            source: EndpointAddr::new(self.peers[p].mac, r.src_ep),
            src_rank: r.src_rank,
            match_bits: r.match_bits,
            len: r.total,
        }
    }

    /// The first receive posted on `ep` that matches `info`, taken off the posted queue (and
    /// into the eager state if `eager`: the message's data follows in its frames).
    fn take_posted(&mut self, ep: u16, info: MsgInfo, eager: bool) -> Option<ReqId> {
        let e = self.eps.get_mut(ep).ok()?;
        let reqs = &mut self.reqs;
        // Usually the oldest posted receive takes it: one look at it, one pop.
        let front = *e.posted.front()?;
        if let Some(r) = reqs.recv_mut(front)
            && r.spec.matches(info.match_bits, info.src_rank)
        {
            r.info = Some(info);
            if eager {
                r.state = RecvState::Eager;
            }
            e.posted.pop_front();
            return Some(front);
        }
        let matches = |reqs: &Requests, id: ReqId| match reqs.get(id) {
            Some(Req {
                kind: ReqKind::Recv(r),
                ..
            }) => r.spec.matches(info.match_bits, info.src_rank),
            _ => false,
        };
        let i = e.posted.iter().position(|&id| matches(reqs, id))?;
        let id = e.posted.remove(i)?;
        if let Some(r) = reqs.recv_mut(id) {
            r.info = Some(info);
            if eager {
                r.state = RecvState::Eager;
            }
        }
        Some(id)
    }

    /// Stores a message no receive was posted for, queued on its endpoint in arrival order.
    fn add_unexp(&mut self, x: Unexp<L::Frame>) -> u64 {
        let ep = x.ep;
        let u = self.unex.insert(x);
        self.stats.unexpected += 1;
        if let Ok(e) = self.eps.get_mut(ep) {
            e.unexpected.push_back(u);
        }
        self.stats.unexpected_bytes_peak = self.stats.unexpected_bytes_peak.max(self.unex.bytes());
        u
    }

    /// Hands unexpected message `u` to receive `id`.
    pub(in crate::engine) fn deliver_unexp(&mut self, u: u64, id: ReqId) {
        let Some(x) = self.unex.get(u) else {
            return;
        };
        let info = x.info;
        let (peer, msg_id, rndv) = (x.peer, x.msg_id, x.rndv);
        let r = self.reqs.recv_mut(id).expect("fresh receive");
        r.info = Some(info);
        if rndv {
            self.unex.remove(u);
            self.start_pull(peer, msg_id, id, info.len);
            return;
        }
        let x = self.unex.get_mut(u).expect("present");
        if x.received < info.len {
            // Still arriving: the rest lands in the store, then the receive takes it all.
            x.claimed = Some(id);
            self.reqs.recv_mut(id).expect("fresh").state = RecvState::Claimed;
            return;
        }
        self.complete_from_store(u, id);
    }
}
