//! Rendezvous messages: the sender announces the message (RTS, header only); the receiver,
//! once a receive matches, pulls the data in blocks (Pull → PullData), several outstanding
//! per peer (a frame window's worth, over all its messages, the oldest first),
//! straight into the posted buffer, and ends with FIN, which completes the send.

use crate::copy::CopyEngine;
use crate::engine::Engine;
use crate::engine::request::RecvState;
use crate::engine::stream::TxDesc;
use crate::engine::types::{Error, Outcome, ReqId};
use crate::engine::unexpected::{Data, Unexp};
use crate::link::Link;
use crate::wire::{self, Kind, Repr};

/// What asking for the next block of a pull did.
enum Ask {
    Asked,
    /// The peer's pull budget is full: later, as bytes arrive.
    Full,
    /// Nothing left to ask (or the receive is gone).
    Done,
    /// The receive pulls from another peer.
    OtherPeer,
}

impl<L: Link, C: CopyEngine<L::Frame>> Engine<L, C> {
    /// An RTS: pull at once into a posted receive, or store the header until one is posted.
    /// `false`: the store holds as many RTSs as it may.
    pub(super) fn on_rts(&mut self, p: usize, r: &Repr) -> bool {
        if r.flags & wire::FLAG_NO_CREDIT != 0 {
            self.grow_grant(p);
        }
        let ep = r.dst_ep;
        if self.eps.get(ep).is_err() {
            self.refuse_msg(p, r.msg_id);
            return true;
        }
        let info = self.msg_info(p, r);
        if let Some(id) = self.take_posted(ep, info, false) {
            self.start_pull(p, r.msg_id, id, r.total);
        } else {
            if self.unex.rts() >= self.cfg.unexpected_rts {
                return false;
            }
            self.add_unexp(Unexp {
                ep,
                peer: p,
                msg_id: r.msg_id,
                info,
                sync: false,
                rndv: true,
                data: Data::Bytes(Vec::new()),
                received: 0,
                cost: 0,
                claimed: None,
            });
        }
        true
    }

    /// Receive `id` matched message `msg_id` of peer `p` (`total` bytes): start pulling.
    pub(in crate::engine) fn start_pull(&mut self, p: usize, msg_id: u32, id: ReqId, total: u64) {
        let Some(r) = self.reqs.recv_mut(id) else {
            return;
        };
        let want = total.min(r.buf.len);
        r.state = RecvState::Pulling {
            peer: p,
            msg_id,
            want,
            asked: 0,
            got: 0,
        };
        self.peers[p].msgs.q.pulls.insert(msg_id, id);
        self.pull_wait.push_back(id);
        self.pump_pulls(p);
        // A zero-byte pull (truncated to nothing) finishes at once.
        self.maybe_finish_pull(id);
    }

    /// Bytes kept requested from peer `p`, over all the messages pulled from it: as many
    /// whole blocks as the frame window the sender may have in flight to us holds (less and
    /// the pipe drains between blocks: the sender idles while its window has room), at least
    /// `pull_outstanding` blocks. More would only queue at the sender, its window full: it
    /// then sends a frame per ack that frees a place instead of a burst, and waits for the
    /// acks the receiver delays (a block rounded up past the window filled it on every 4 MiB
    /// message, `Stats::tx_window_full`, and took 5-10 % off the rate of `tigon bench
    /// engine`).
    #[inline]
    fn pull_budget(&self, p: usize) -> u64 {
        let conn = &self.peers[p].conn;
        let frames = self.cfg.window.min(conn.remote_window as u32) as usize;
        let block = self.cfg.pull_block.max(1);
        let blocks =
            (frames * conn.pull_frag() as usize / block).clamp(self.cfg.pull_outstanding, 256);
        // The count is kept in 32 bits (an idle peer's state is tight).
        ((blocks * block) as u64).min(u32::MAX as u64)
    }

    /// Asks peer `p` for blocks while its pull budget has room, for its oldest pulling
    /// receive first: messages from one peer are pulled one after another, not all at once.
    /// The check is in line (it runs for every frame of pulled data while a receive waits to
    /// ask), the asking out of line.
    #[inline]
    pub(in crate::engine) fn pump_pulls(&mut self, p: usize) {
        if self.pull_wait.is_empty() {
            return;
        }
        let budget = self.pull_budget(p);
        let inflight = self.peers[p].msgs.pull_inflight as u64;
        if inflight > 0 && inflight + self.cfg.pull_block as u64 > budget {
            return;
        }
        self.ask_blocks(p, budget);
    }

    /// Asks peer `p` for blocks while its pull `budget` has room (`pump_pulls`).
    #[inline(never)]
    fn ask_blocks(&mut self, p: usize, budget: u64) {
        let mut i = 0;
        while let Some(&id) = self.pull_wait.get(i) {
            match self.ask_block(id, p, budget) {
                Ask::Asked => {}
                Ask::Full => break,
                Ask::Done => {
                    self.pull_wait.remove(i);
                }
                Ask::OtherPeer => i += 1,
            }
        }
    }

    /// Queues the next pull request of receive `id` if it pulls from peer `p` and the peer's
    /// budget has room for it.
    fn ask_block(&mut self, id: ReqId, p: usize, budget: u64) -> Ask {
        let block = self.cfg.pull_block as u64;
        let Some(r) = self.reqs.recv_mut(id) else {
            return Ask::Done;
        };
        let RecvState::Pulling {
            peer,
            msg_id,
            want,
            asked,
            ..
        } = &mut r.state
        else {
            return Ask::Done;
        };
        if *asked >= *want {
            return Ask::Done;
        }
        if *peer != p {
            return Ask::OtherPeer;
        }
        let len = (*want - *asked).min(block);
        let (m, off) = (*msg_id, *asked);
        let msgs = &mut self.peers[p].msgs;
        // Always one block at least, whatever the budget.
        let inflight = msgs.pull_inflight as u64;
        if inflight > 0 && inflight + len > budget {
            return Ask::Full;
        }
        *asked += len;
        msgs.pull_inflight = (inflight + len).min(u32::MAX as u64) as u32;
        self.peers[p].stream.queue(TxDesc {
            offset: off,
            total: len,
            ..TxDesc::new(Kind::Pull, m)
        });
        self.mark_active(p);
        Ask::Asked
    }

    /// Receive `id` stops pulling (done or failed): the bytes it had asked for and not
    /// received leave its peer's budget.
    pub(in crate::engine) fn end_pull(&mut self, id: ReqId) {
        if let Some(r) = self.reqs.recv_mut(id)
            && let RecvState::Pulling {
                peer,
                msg_id,
                asked,
                got,
                ..
            } = r.state
        {
            let msgs = &mut self.peers[peer].msgs;
            msgs.q.pulls.remove(&msg_id);
            let left = asked.saturating_sub(got).min(u32::MAX as u64) as u32;
            msgs.pull_inflight = msgs.pull_inflight.saturating_sub(left);
        }
    }

    /// Completes pulling receive `id` once every byte has arrived and been copied, and tells
    /// the sender (FIN).
    pub(in crate::engine) fn maybe_finish_pull(&mut self, id: ReqId) {
        let Some(r) = self.reqs.recv_mut(id) else {
            return;
        };
        let RecvState::Pulling {
            peer,
            msg_id,
            want,
            got,
            ..
        } = r.state
        else {
            return;
        };
        if got < want || r.copies > 0 {
            if got >= want {
                r.arrived = true;
            }
            return;
        }
        let info = r.info.expect("matched");
        let truncated = info.len > r.buf.len;
        self.end_pull(id);
        self.finish(
            id,
            Ok(Outcome::Received {
                info,
                received: want,
                truncated,
            }),
        );
        self.send_fin(peer, msg_id);
    }

    /// Tells the sender of rendezvous message `msg_id` that the receiver is done with it: a
    /// sender on this node completes at once, one elsewhere when the FIN arrives.
    pub(in crate::engine) fn send_fin(&mut self, p: usize, msg_id: u32) {
        if !self.finish_local_send(p, msg_id, Kind::Fin) {
            self.peers[p].stream.queue(TxDesc::new(Kind::Fin, msg_id));
        }
        self.mark_active(p);
    }

    /// The receiver asks for a block of a rendezvous send: queue its fragments.
    pub(super) fn on_pull(&mut self, p: usize, r: &Repr) {
        let frag = self.peers[p].conn.pull_frag() as u64;
        let Some(&id) = self.peers[p].msgs.q.sends.get(&r.msg_id) else {
            self.stats.drop_unknown_msg += 1;
            return;
        };
        let Some(s) = self.reqs.send(id) else {
            return;
        };
        let total = s.buf.len;
        let end = r.offset.saturating_add(r.total).min(total);
        if !s.rndv || r.offset >= end {
            self.stats.drop_malformed += 1;
            return;
        }
        let count = (end - r.offset).div_ceil(frag) as u32;
        let base = TxDesc {
            req: Some(id),
            frag_count: count,
            total,
            ..TxDesc::new(Kind::PullData, r.msg_id)
        };
        let start = r.offset;
        self.peers[p].stream.queue_bulk(count, |i| {
            let off = start + i as u64 * frag;
            TxDesc {
                frag_index: i,
                offset: off,
                len: (end - off).min(frag) as u32,
                ..base
            }
        });
        self.mark_active(p);
    }

    /// A fragment of a pulled block: copy it into the receive; its bytes leave the peer's
    /// pull budget, which asks for the next block once a block's worth has arrived.
    /// `length` bytes at `offset` of message `msg_id`, in frame `f` (behind the pull header).
    /// Always in line: it runs for every frame of pulled data, nearly always from pulled.rs.
    #[inline(always)]
    pub(in crate::engine) fn on_pull_data(
        &mut self,
        p: usize,
        msg_id: u32,
        offset: u64,
        length: u32,
        f: L::Frame,
    ) {
        let Some(&id) = self.peers[p].msgs.q.pulls.get(&msg_id) else {
            self.stats.drop_unknown_msg += 1;
            return;
        };
        let Some(rr) = self.reqs.recv_mut(id) else {
            return;
        };
        let RecvState::Pulling { want, got, .. } = &mut rr.state else {
            return;
        };
        if offset + length as u64 > *want {
            self.stats.drop_malformed += 1;
            return;
        }
        *got += length as u64;
        let all = *got >= *want;
        rr.received += length as u64;
        let buf = rr.buf;
        let msgs = &mut self.peers[p].msgs;
        msgs.pull_inflight = msgs.pull_inflight.saturating_sub(length);
        if length > 0 {
            self.submit_copy(
                id,
                f,
                wire::PULL_OVERHEAD..wire::PULL_OVERHEAD + length as usize,
                buf,
                offset,
            );
        }
        // Per frame of bulk data, only what can have changed: the receive is done once its
        // last byte is in; more blocks are asked for once the budget has room (the check in
        // line: `pump_pulls`).
        if all {
            self.maybe_finish_pull(id);
        }
        self.pump_pulls(p);
    }

    /// The receiver has the whole message: the send completes. Flagged NO_ENDPOINT: no
    /// endpoint there takes it, and the send fails.
    pub(super) fn on_fin(&mut self, p: usize, r: &Repr) {
        let Some(&id) = self.peers[p].msgs.q.sends.get(&r.msg_id) else {
            return;
        };
        if r.flags & wire::FLAG_NO_ENDPOINT != 0 {
            let to = self.remote_of(id, self.peers[p].mac);
            self.finish(id, Err(Error::PeerRestarted(to)));
        } else if let Some(s) = self.reqs.send_mut(id) {
            s.fin = true;
            self.try_finish_send(id);
        }
    }
}
