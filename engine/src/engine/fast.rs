//! The small-message fast path: a [`Kind::Small`] frame (one whole message under the compact
//! header) that is next in order from its peer and meets the receive at the front of its
//! endpoint's posted queue is handled here in one pass — its header read where it lies
//! (no full [`Repr`]), its peer looked up once, its payload copied into the receive's
//! buffer and the receive completed without its state being written back to the request
//! slab. Anything else about such a frame (out of order, nothing posted, a receive further
//! back in the queue, an asynchronous copy still under way) goes the general way: the frame's
//! full header is made from the compact one and handed to the stream's ordering (rx.rs) and
//! the eager state machine (proto/eager.rs), which give the same outcome.
//!
//! On the sending side, a standard send of a small message to a connected peer with credit
//! is queued as one compact frame straight from `isend` (its request written once, queued),
//! and the ack of a standard eager send's last frame completes the send here, with one look
//! at the request.

use super::Engine;
use super::conn::RETIRED;
use super::endpoint::Endpoints;
use super::peer::{Peer, PeerState, eager_cost};
use super::request::{Acked, Requests};
use super::stream::{Due, TakeAcked, TxDesc};
use super::types::{Completion, MsgInfo, Outcome, ReqId};
use crate::addr::EndpointAddr;
use crate::copy::{BufRef, CopyEngine};
use crate::link::Link;
use crate::stats::Stats;
use crate::wire::{self, Kind, MacAddr, SmallHeader};
use std::collections::VecDeque;
use std::marker::PhantomData;

impl<L: Link, C: CopyEngine<L::Frame>> Engine<L, C> {
    /// A received [`Kind::Small`] frame (its kind byte says so; everything else is checked
    /// here).
    ///
    /// [`Kind::Small`]: wire::Kind::Small
    pub(super) fn on_small(&mut self, f: L::Frame, now: u64) {
        let h = match SmallHeader::parse(f.as_ref()) {
            Ok(h) => h,
            Err(wire::Error::Version) => return self.on_other_version(f.as_ref()),
            Err(e) => return self.stats.drop(e),
        };
        self.stats.rx_frames += 1;
        let dst = h.dst_mac.word();
        if dst != self.mac_word && dst != MacAddr::BROADCAST.word() {
            self.stats.drop_not_ours += 1;
            return;
        }
        // From the address no node has (rx.rs, `on_frame`).
        if h.src_mac == RETIRED {
            self.stats.drop_malformed += 1;
            return;
        }
        // A compact frame names both sessions by one tag, and is never answered with a
        // Reset (it does not say whom to address; its retransmission carries the full
        // header and will be).
        let Some(p) = self.find_peer_hinted(h.src_mac, h.slot) else {
            self.stats.drop_stale += 1;
            return;
        };
        // The peer's entry is borrowed once for everything the frame does to it (the
        // connection check, its ack and credit, the receive order); the rest of the engine
        // is reached by its other fields.
        // The ack's longest hold: the busy delay only to a peer told of it (mod.rs,
        // `ack_hold_ns`; read here, before the peer's entry is borrowed).
        let every = self.cfg.ack_every;
        let (delay, busy_delay) = (self.cfg.max_ack_delay_ns, self.ack_hold_ns(true));
        let mut peer = &mut self.peers[p];
        let conn = &mut peer.conn;
        // A frame that rode behind the peer's Connect names none of our connections yet, and
        // its ack field means nothing (the peer did not know our stream).
        let rode = h.tag != wire::session_tag(conn.remote, conn.local);
        if conn.state != PeerState::Connected
            || (rode && h.tag != wire::session_tag(conn.remote, 0))
        {
            self.stats.drop_stale += 1;
            return;
        }
        // Its ack and credit (rx.rs, `on_ack`): the work only if they moved.
        conn.last_rx = now;
        if !rode {
            let more_credit = peer.credit.on_released(h.credit);
            if more_credit || peer.stream.acks_new(h.ack) {
                self.on_new_ack(p, h.ack, more_credit, None, None, now);
                peer = &mut self.peers[p];
            }
        }
        let fast = h.seq == peer.stream.rcv_next
            && peer.stream.q.reorder.is_empty()
            && peer.msgs.in_eager.is_none()
            && h.flags as u16 & !(wire::FLAG_PAYLOAD_CK | wire::FLAG_ACK_NOW) == 0
            && self.copy_fifo.is_empty();
        let front = if fast {
            take_front(
                &mut self.eps,
                &mut self.reqs,
                h.dst_ep,
                h.match_bits,
                h.src_rank,
            )
        } else {
            None
        };
        let Some((id, buf)) = front else {
            return self.on_sequenced(p, &h.repr(), f, now);
        };
        // The message is consumed: its credit goes back with the next ack, and the stream
        // moves on (nothing is held behind it: the reorder buffer is empty).
        let len = h.length as u64;
        peer.credit.last_eager_rx = now;
        peer.credit.released = peer.credit.released.wrapping_add(eager_cost(len));
        let stream = &mut peer.stream;
        let delay = if stream.hold_long { busy_delay } else { delay };
        if stream.ack_due.is_none() {
            stream.ack_due = Due::at(now + delay);
        }
        stream.advance();
        if h.flags as u16 & wire::FLAG_ACK_NOW != 0 {
            // The sender wants its ack now (as rx.rs, `on_sequenced`): at the end of this burst.
            stream.ack_soon();
            if !peer.in_active {
                // Most likely all its transmit visit will do is this ack: the cheaper visit
                // (tx.rs, `quick_acks`).
                peer.in_active = true;
                self.quick_acks.push(p);
            }
        } else {
            stream.schedule_ack(now, every, delay);
            if !peer.in_active {
                // An ack owed `ack_every` frames: now; else, a delayed one only (nothing else
                // of the peer's changed here): at its time (`ack_timers`).
                if stream.ack_now {
                    self.mark_active(p);
                } else if !stream.ack_queued {
                    self.delay_ack(p);
                }
            }
        }
        let info = MsgInfo {
            source: EndpointAddr::new(h.src_mac, h.src_ep),
            src_rank: h.src_rank,
            match_bits: h.match_bits,
            len,
        };
        self.deliver_small(id, h.dst_ep, buf, info, f);
    }

    /// Copies a small message's payload into receive `id` (taken off endpoint `ep`'s posted
    /// queue) and completes it: at once when the copy is done now (nothing of the receive is
    /// written back to the slab), through the copy FIFO when a device finishes it later.
    fn deliver_small(&mut self, id: ReqId, ep: u16, buf: BufRef, info: MsgInfo, f: L::Frame) {
        let n = info.len.min(buf.len);
        let copied = if n == 0 {
            Ok(true)
        } else {
            let head = wire::COMPACT_OVERHEAD;
            let range = head..head + n as usize;
            // A whole message that fits may be read where it arrived (the frame lent to the
            // receiver); otherwise it is copied into the receive's buffer.
            let f = if n == info.len && self.copy.lends() {
                self.copy.lend(f, range.clone(), &buf).err()
            } else {
                Some(f)
            };
            match f {
                None => Ok(true),
                Some(f) => self.copy.copy_from_frame(f, range, &buf, 0),
            }
        };
        match copied {
            Ok(true) => {
                self.reqs.remove(id);
                self.stats.recvs_completed += 1;
                self.completions.push_back(Completion {
                    req: id,
                    ep,
                    result: Ok(Outcome::Received {
                        info,
                        received: n,
                        truncated: info.len > buf.len,
                    }),
                });
            }
            Ok(false) => {
                if let Some(r) = self.reqs.recv_mut(id) {
                    r.info = Some(info);
                    r.state = super::request::RecvState::Eager;
                    r.received = n;
                    r.arrived = true;
                    r.copies = 1;
                }
                self.copy_fifo.push_back((id, false));
            }
            Err(e) => self.finish(id, Err(super::types::Error::Copy(e.0))),
        }
    }
}

/// An eager frame of send `id` was acknowledged, as the stream retires it (rx.rs,
/// `on_new_ack`: the engine's other fields are borrowed apart from the peer's stream): one
/// frame fewer to wait for, and a standard send with none left completes here, with one
/// look at its request. True if the protocol decides (a synchronous or rendezvous send, or
/// one not fully queued: proto/, `try_finish_send`).
#[inline(always)]
pub(super) fn retire_acked<F, C: CopyEngine<F>>(
    reqs: &mut Requests,
    completions: &mut VecDeque<Completion>,
    copy: &mut C,
    stats: &mut Stats,
    id: ReqId,
) -> bool {
    match reqs.frame_acked(id) {
        Acked::Gone | Acked::Pending => false,
        Acked::Check => true,
        Acked::Done { ep, buf } => {
            copy.release(&buf);
            stats.sends_completed += 1;
            completions.push_back(Completion {
                req: id,
                ep,
                result: Ok(Outcome::Sent),
            });
            false
        }
    }
}

/// Retires the eager frames an ack acknowledges with their sends, as the stream lets go of
/// them (rx.rs, `on_new_ack`; the engine's fields borrowed apart from the peer's stream). A
/// send the protocol must look at waits in `later` (counted off), and once anything waits
/// there, so does every frame after it (not counted off yet): completions keep the frames'
/// order.
pub(super) struct Retire<'a, F, C> {
    pub(super) reqs: &'a mut Requests,
    pub(super) completions: &'a mut VecDeque<Completion>,
    pub(super) copy: &'a mut C,
    pub(super) stats: &'a mut Stats,
    pub(super) later: &'a mut Vec<(ReqId, bool)>,
    /// The link's frame type (the copy engine's parameter).
    pub(super) frame: PhantomData<fn(F)>,
}

impl<F, C: CopyEngine<F>> TakeAcked for Retire<'_, F, C> {
    #[inline(always)]
    fn take(&mut self, id: ReqId) {
        if !self.later.is_empty() {
            self.later.push((id, false));
        } else if retire_acked(self.reqs, self.completions, self.copy, self.stats, id) {
            self.later.push((id, true));
        }
    }
}

/// Whether a standard send of `len` bytes to `peer` goes out now as one compact frame: the
/// peer is connected with nothing waiting before it (or connecting, and this is its first
/// message), and the message fits the compact header, a frame and the peer's credit
/// (`rndv_threshold`: the eager limit).
#[inline]
pub(super) fn small_send<F: 'static>(peer: &Peer<F>, len: u64, rndv_threshold: usize) -> bool {
    let ready = match peer.conn.state {
        PeerState::Connected => true,
        // The first message to a node rides behind the Connect, on the first credit
        // (`wire::FIRST_CREDIT`): nothing else queued or sent yet.
        PeerState::Connecting => !peer.stream.has_new() && peer.stream.q.unacked.is_empty(),
        PeerState::Idle => false,
    };
    ready
        && peer.msgs.q.waiting.is_empty()
        && small_fits(len, peer.conn.frag as u32, rndv_threshold)
        && eager_cost(len) <= peer.credit.avail()
}

/// Whether a standard message of `len` bytes fits one compact frame (to a peer whose frames
/// carry `frag` bytes, under the eager limit `rndv_threshold`).
#[inline]
pub(super) fn small_fits(len: u64, frag: u32, rndv_threshold: usize) -> bool {
    len <= wire::COMPACT_MAX_PAYLOAD as u64 && len <= frag as u64 && len <= rndv_threshold as u64
}

/// Queues small standard message `msg_id` of send `id` (`len` bytes, its credit available:
/// [`small_send`]) to `peer` as one compact frame. Its request is already marked queued with
/// one frame unacknowledged; the caller counts it sent.
#[inline]
pub(super) fn queue_small<F: 'static>(peer: &mut Peer<F>, id: ReqId, msg_id: u32, len: u64) {
    peer.credit.used = peer.credit.used.wrapping_add(eager_cost(len));
    peer.stream.queue_message(TxDesc {
        req: Some(id),
        total: len,
        len: len as u32,
        ..TxDesc::new(Kind::Small, msg_id)
    });
}

/// The receive at the front of endpoint `ep`'s posted queue, taken off it if it matches a
/// message with `bits` from `rank`: its id and buffer.
#[inline(always)]
fn take_front(
    eps: &mut Endpoints,
    reqs: &mut Requests,
    ep: u16,
    bits: u64,
    rank: u32,
) -> Option<(ReqId, BufRef)> {
    let e = eps.get_mut(ep).ok()?;
    let id = *e.posted.front()?;
    let r = reqs.recv_mut(id)?;
    if !r.spec.matches(bits, rank) {
        return None;
    }
    let buf = r.buf;
    e.posted.pop_front();
    Some((id, buf))
}
