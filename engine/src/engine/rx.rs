//! The receive path: a burst of frames from the link, each parsed, checked against this node's
//! peer nodes and sessions, and dispatched — handshake frames to conn.rs, acks to the stream,
//! sequenced frames through the stream's ordering to the message protocol (proto/).

use super::Engine;
use super::conn::RETIRED;
use super::fast;
use super::peer::PeerState;
use super::stream::Arrival;
use crate::copy::CopyEngine;
use crate::link::Link;
use crate::wire::{self, AckRepr, Frame, Kind, MacAddr, Repr};

/// From this many peers on, a receive burst reads its frames' peers ahead (`receive_warm`):
/// below it, their state (192 B each) stays in the processor's caches.
pub(super) const WARM_PEERS: usize = 4096;

/// Frames between the read-ahead of a frame's peer (or of its index bucket, if it names no
/// slot) and its handling (`receive_warm`).
const AHEAD: usize = 8;
/// A receive takes up to this many bursts (`Config::burst`) when the link holds them: a busy
/// link's frames are handled in longer runs, with the poll's other work (acks, transmit,
/// timers) paid once per run. Above all, the read-ahead of many peers' state
/// (`receive_warm`) starts again with every receive, and the first `AHEAD` frames of each
/// find their peers' lines still on the way: perf put 8 % of the 65,536-peer poll's samples on
/// the bucket reads of those frames alone (a receive that leaves frames in the link now
/// leaves its last `AHEAD`, read ahead, to the next: `receive_warm`). Up to four bursts of
/// 32 at once, `tigon bench scale --peers 2,65536` (interleaved runs) went from 10.7-10.9 to
/// 11.3 M msgs/s at 2 peers and from 9.1-9.2 to 10.0 M at 65,536: their ratio from 0.84 to
/// 0.88. With the longer runs for the many peers' read-ahead only (2 peers at one burst),
/// the ratio reached 0.90 and above, but then the two counts ran different engines.
const RX_BURSTS: usize = 4;

/// What one receive burst did.
pub(super) struct RxBurst {
    pub(super) frames: usize,
    /// Fewer frames than the receive takes at most: the link's receive queue is drained.
    pub(super) drained: bool,
}

impl<L: Link, C: CopyEngine<L::Frame>> Engine<L, C> {
    /// Takes up to `RX_BURSTS` bursts of frames from the link and handles each (and first
    /// those the receive before left, see `receive_warm`).
    pub(super) fn receive(&mut self, link: &mut L, now: u64) -> RxBurst {
        let mut rx = std::mem::take(&mut self.rx);
        let carried = rx.len();
        let max = self.cfg.burst * RX_BURSTS;
        link.rx_burst(&mut rx, max - carried);
        // Drained: the link gave fewer than the `max - carried` asked for.
        let burst = RxBurst {
            frames: rx.len(),
            drained: rx.len() < max,
        };
        if self.peers.len() < WARM_PEERS {
            for f in rx.drain(..) {
                self.on_frame(f, now);
            }
        } else {
            self.receive_warm(&mut rx, carried, !burst.drained, now);
        }
        self.rx = rx;
        burst
    }

    /// Handles a burst's frames with their peers read ahead. With many peers (65,536 of
    /// them: 12 MB of state) each frame's peer is a cache miss; handled one by one, a frame
    /// would wait for its misses before the next frame's begin. Here the processor is asked
    /// for the lines of frame `i + AHEAD`'s peer that the receive path reads (`Peer::HOT`)
    /// as frame `i` is handled: the misses of several frames overlap with each other and
    /// with the handling of the frames before them, and stay few enough at a time for the
    /// processor to keep every request (asked for all of a 32-frame burst at once, ~130
    /// lines, most were still on their way when their frame's turn came: perf put a quarter
    /// of the poll's samples on the first load from the peer). Every frame of a connected
    /// peer names its slot here (`Repr::slot`, wire version 9); of one that does not (a
    /// Connect) only the index bucket its lookup starts at is asked for. Nothing is decided
    /// here (the slot is not checked): a frame's peer is looked up when it is handled.
    /// The read-ahead is most of what many peers cost beyond a few in instructions: it is
    /// kept to a load and the requests per frame (with a second stage for the bucket's slot
    /// and a ring carrying tokens from one stage to the next it cost ~80 instructions a
    /// frame, callgrind, `tigon bench scale --peers 65536 --virtual-clock`).
    ///
    /// The first `warmed` frames were read ahead by the receive before. With `more` (the
    /// link holds more frames than this receive took), the last `AHEAD` frames are read
    /// ahead but not handled: they stay in `rx` for the next receive, which handles them
    /// first: their lines arrive while this poll's acks, transmit and timers run, and the
    /// next receive's first frames find them there instead of each waiting for its misses
    /// (as the first `AHEAD` frames of every receive did). Measured on `tigon bench scale
    /// --peers 2,65536`: about +0.01 on the ratio, ahead in 13 of 19 alternating pairs
    /// (docs/MEASUREMENTS.md).
    fn receive_warm(&mut self, rx: &mut Vec<L::Frame>, warmed: usize, more: bool, now: u64) {
        for f in rx.iter().take(AHEAD).skip(warmed) {
            self.frame_ahead(f.as_ref());
        }
        let handle = if more {
            rx.len().saturating_sub(AHEAD)
        } else {
            rx.len()
        };
        let mut frames = rx.drain(..handle);
        while let Some(f) = frames.next() {
            if let Some(g) = frames.as_slice().get(AHEAD - 1) {
                self.frame_ahead(g.as_ref());
            }
            self.on_frame(f, now);
        }
        drop(frames);
        // The frames left (none unless `more`), read ahead now for the next receive.
        for f in rx.iter() {
            self.frame_ahead(f.as_ref());
        }
    }

    /// Asks for the lines the receive path reads of the peer frame `f` names, or for the
    /// index bucket of its sender.
    #[inline(always)]
    fn frame_ahead(&self, f: &[u8]) {
        match wire::slot_hint(f) {
            Some(s) => {
                if let Some(peer) = self.peers.get(s as usize - 1) {
                    peer.warm();
                }
            }
            None => {
                if let Some(w) = src_word(f) {
                    self.peer_index.prefetch_word(w);
                }
            }
        }
    }

    /// Demux: which peer node, which incarnation of it. Endpoints are the message layer's
    /// business (proto/): the session is the node's.
    fn on_frame(&mut self, f: L::Frame, now: u64) {
        // A small message has a path of its own (fast.rs).
        let v = Frame::new_unchecked(f.as_ref());
        if v.is_small() {
            return self.on_small(f, now);
        }
        // So does a fragment of pulled data (pulled.rs).
        if v.is_pull() {
            return self.on_pull_frame(f, now);
        }
        // The header is used where it was parsed (a reference into the result), not moved
        // out of it: it is 88 bytes, and this runs for every frame.
        let parsed = Frame::new_checked(f.as_ref()).and_then(|fr| Repr::parse(&fr));
        let r = match &parsed {
            Ok(r) => r,
            Err(wire::Error::Version) => {
                self.on_other_version(f.as_ref());
                return;
            }
            Err(e) => {
                self.stats.drop(*e);
                return;
            }
        };
        self.stats.rx_frames += 1;
        if r.dst_mac != self.mac && r.dst_mac != MacAddr::BROADCAST {
            self.stats.drop_not_ours += 1;
            return;
        }
        let from = r.src_mac;
        // No node has the all-zero address: it marks a retired session's free slot (conn.rs,
        // `RETIRED`), which a tigon frame claiming it would otherwise be taken for (a Connect
        // from it would set up a session in a slot the next new peer is given).
        if from == RETIRED {
            self.stats.drop_malformed += 1;
            return;
        }
        let kind = r.kind.expect("parsed");
        match kind {
            Kind::Connect => self.on_connect(*r, from, f.as_ref(), now),
            Kind::ConnectAck => self.on_connect_ack(*r, from, f.as_ref(), now),
            Kind::Reset => self.on_reset(*r, from, now),
            _ => {
                // A short ack names both sessions by one tag, and is never answered with a
                // Reset (it does not say whom to address; its sender hears of this node's
                // forgetting by its own frames, or its timers).
                let short = kind == Kind::ShortAck;
                let Some(p) = self.find_peer_hinted(from, r.slot) else {
                    // A connection this node retired, or one with an earlier incarnation of
                    // this node: the sender is told (the Reset names this incarnation), and
                    // starts a new one or fails what it had in flight.
                    self.stats.drop_stale += 1;
                    if !short {
                        self.send_reset(*r);
                    }
                    return;
                };
                let conn = &self.peers[p].conn;
                // A sequenced frame that rode behind the peer's Connect names none of ours yet
                // (0), and its ack field means nothing (the peer did not know our stream).
                let rode = r.dst_session == 0 && !short && kind.is_sequenced();
                let same = if short {
                    r.tag == wire::session_tag(conn.remote, conn.local)
                } else {
                    r.src_session == conn.remote && (r.dst_session == conn.local || rode)
                };
                if conn.state != PeerState::Connected || !same {
                    self.stats.drop_stale += 1;
                    return;
                }
                if kind == Kind::ShortAck {
                    // Nothing missing, no probe answered: the cumulative part alone, and the
                    // peer's longest ack hold from now on (in `seq`, wire version 8).
                    self.peers[p].stream.set_peer_ack_delay(r.seq);
                    self.on_ack(p, r.ack, r.credit, None, None, now);
                } else if kind == Kind::Ack {
                    self.peers[p].stream.set_peer_ack_delay(r.seq);
                    let sack = AckRepr::parse(Frame::new_unchecked(f.as_ref()).payload())
                        .unwrap_or_default();
                    // No bit set (nothing missing): only the cumulative part counts.
                    let sack = (sack.sack != [0; wire::SACK_WORDS]).then_some(&sack);
                    let reply = (r.flags & wire::FLAG_PROBE_REPLY != 0).then_some(r.msg_id as u16);
                    self.on_ack(p, r.ack, r.credit, sack, reply, now);
                } else if kind == Kind::Probe {
                    // Answered by the next standalone ack: after every frame that arrived
                    // before the probe, as this one, has been taken.
                    self.on_ack(p, r.ack, r.credit, None, None, now);
                    let s = &mut self.peers[p].stream;
                    s.probe_reply = true;
                    s.probe_echo = r.msg_id as u16;
                    s.ack_now = true;
                    self.mark_active(p);
                } else {
                    if !rode {
                        self.on_ack(p, r.ack, r.credit, None, None, now);
                    }
                    self.on_sequenced(p, r, f, now);
                }
            }
        }
    }

    /// The ack and credit fields every frame from a connected peer carries, and an Ack
    /// frame's selective ack: retire what was acknowledged, send what the credit now allows.
    #[inline]
    pub(super) fn on_ack(
        &mut self,
        p: usize,
        ack: u32,
        credit: u32,
        sack: Option<&AckRepr>,
        probe_reply: Option<u16>,
        now: u64,
    ) {
        let peer = &mut self.peers[p];
        peer.conn.last_rx = now;
        let more_credit = peer.credit.on_released(credit);
        // Most frames acknowledge nothing new (the ack has not moved since the last one):
        // that check is all they cost (inlined here, the rest out of line).
        if !more_credit && sack.is_none() && probe_reply.is_none() && !peer.stream.acks_new(ack) {
            return;
        }
        self.on_new_ack(p, ack, more_credit, sack, probe_reply, now);
    }

    /// An ack that moved, more credit, a selective ack or a probe's reply.
    #[inline(never)]
    pub(super) fn on_new_ack(
        &mut self,
        p: usize,
        ack: u32,
        more_credit: bool,
        sack: Option<&AckRepr>,
        probe_reply: Option<u16>,
        now: u64,
    ) {
        // Each eager frame acknowledged is retired with its send as the stream lets go of it
        // (fast.rs, `Retire`): a standard send done completes there. A send the
        // protocol must look at (synchronous, rendezvous, not fully queued) waits in
        // `acked` until the stream is done, and so does every frame behind it (completions
        // stay in frame order).
        let Engine {
            peers,
            reqs,
            completions,
            copy,
            stats,
            acked,
            cfg,
            ..
        } = self;
        let peer = &mut peers[p];
        peer.stream.on_ack(
            ack,
            sack,
            probe_reply,
            now,
            cfg.rto_min_ns,
            &mut fast::Retire {
                reqs,
                completions,
                copy,
                stats,
                later: acked,
                frame: std::marker::PhantomData,
            },
        );
        if peer.stream.has_tx() {
            self.mark_active(p);
        }
        if more_credit && !self.peers[p].msgs.q.waiting.is_empty() {
            self.flush_waiting(p);
            self.mark_active(p);
        }
        if !self.acked.is_empty() {
            let mut later = std::mem::take(&mut self.acked);
            for (id, counted) in later.drain(..) {
                let Engine {
                    reqs,
                    completions,
                    copy,
                    stats,
                    ..
                } = self;
                if counted || fast::retire_acked(reqs, completions, copy, stats, id) {
                    self.try_finish_send(id);
                }
            }
            self.acked = later;
        }
    }

    /// A sequenced frame: delivered if next in order (with those held behind it), held if
    /// ahead of a gap, dropped if already delivered. Flagged `FLAG_ACK_NOW`, it is
    /// acknowledged at the end of this burst; otherwise its ack waits (`schedule_ack`) for a
    /// frame out to the peer, more frames from it, the loop running idle, or
    /// `max_ack_delay_ns`: with many peers each sending now and then (65,536 peers, a
    /// message each every few ms) that is what lets one ack cover several messages.
    pub(super) fn on_sequenced(&mut self, p: usize, r: &Repr, f: L::Frame, now: u64) {
        let ack_now = r.flags & wire::FLAG_ACK_NOW != 0;
        match self.peers[p].stream.arrival(r.seq, self.cfg.window) {
            Arrival::Next => {
                if !self.process(p, r, f) {
                    self.stats.rx_stalled += 1;
                    return;
                }
                self.peers[p].stream.advance();
                // Frames that were waiting for this one.
                while let Some(f) = self.peers[p].stream.take_held() {
                    let Ok(r) = Frame::new_checked(f.as_ref()).and_then(|x| Repr::parse(&x)) else {
                        break;
                    };
                    if !self.process(p, &r, f) {
                        // Put nothing back: the sender retransmits what we could not take.
                        self.stats.rx_stalled += 1;
                        self.peers[p].stream.q.reorder.clear();
                        break;
                    }
                    self.peers[p].stream.advance();
                }
                let every = self.cfg.ack_every;
                let delay = self.ack_hold_ns(self.peers[p].stream.hold_long);
                let peer = &mut self.peers[p];
                let s = &mut peer.stream;
                if ack_now {
                    s.ack_soon();
                    // Credit this frame's message frees later is acked at once too.
                    peer.credit.asked = true;
                } else {
                    s.schedule_ack(now, every, delay);
                }
            }
            Arrival::Ahead => {
                if self.peers[p].stream.hold(r.seq, f) {
                    self.stats.rx_out_of_order += 1;
                } else {
                    self.stats.rx_duplicates += 1;
                }
            }
            Arrival::Stale => {
                self.stats.rx_duplicates += 1;
                self.peers[p].stream.ack_soon();
            }
        }
        self.mark_active(p);
    }
}

/// The source address of a frame (any frame: the Ethernet header's) as [`MacAddr::word`], if
/// the frame is long enough: one load of bytes 4..12, the destination's last two shifted out.
#[inline]
fn src_word(f: &[u8]) -> Option<u64> {
    let b: &[u8; 8] = f.get(4..12)?.try_into().ok()?;
    Some(u64::from_le_bytes(*b) >> 16)
}

#[cfg(test)]
mod tests {
    /// The read-ahead's source address is the frame's bytes 6..12 as one integer, what
    /// `MacAddr::word` makes of them; a frame too short to hold it has none.
    #[test]
    fn src_word_is_the_source_address_word() {
        let src = crate::wire::MacAddr([0x02, 0xa1, 0x00, 0x7f, 0xfe, 0x81]);
        let mut f = vec![0xffu8; 60];
        f[6..12].copy_from_slice(&src.0);
        assert_eq!(super::src_word(&f), Some(src.word()));
        assert_eq!(super::src_word(&f[..11]), None);
    }
}
