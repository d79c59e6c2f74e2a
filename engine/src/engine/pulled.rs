//! Pulled rendezvous data frame by frame, both ends: most frames of a large message are
//! [`Kind::PullData`] fragments, under their own header ([`wire::PullHeader`]). The sender
//! writes that header straight from the stream's descriptor and the peer's header (no full
//! [`Repr`](wire::Repr)); the receiver reads it where it lies, finds the peer once, takes
//! the ack and credit it carries, and, when the frame is next in order with nothing held,
//! copies its payload into the pulling receive without the stream's reordering pass (the
//! general way, rx.rs `on_sequenced` → proto/ `process`, gives the same outcome and takes
//! every other case).

use super::Engine;
use super::peer::PeerState;
use super::request::{Req, ReqKind};
use super::stream::{Emit, TxDesc};
use super::tx::PendingRead;
use super::types::Error;
use crate::copy::CopyEngine;
use crate::link::Link;
use crate::wire::{self, MacAddr, PullHeader, Repr};

impl<L: Link, C: CopyEngine<L::Frame>> Engine<L, C> {
    /// A received [`Kind::PullData`] frame (its kind byte says so; everything else is
    /// checked here).
    pub(super) fn on_pull_frame(&mut self, f: L::Frame, now: u64) {
        let h = match PullHeader::parse(f.as_ref()) {
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
        let Some(p) = self.find_peer(h.src_mac) else {
            // A connection this node retired, or one with an earlier incarnation of this
            // node: the sender is told (as rx.rs, `on_frame`, tells it of any frame).
            self.stats.drop_stale += 1;
            self.send_reset(h.repr());
            return;
        };
        let conn = &self.peers[p].conn;
        // Pulled data answers a Pull: it never rides behind a Connect, and names both
        // connections.
        if conn.state != PeerState::Connected
            || h.src_session != conn.remote
            || h.dst_session != conn.local
        {
            self.stats.drop_stale += 1;
            return;
        }
        // Its ack and credit (rx.rs, `on_ack`, written out: the work only if they moved).
        let peer = &mut self.peers[p];
        peer.conn.last_rx = now;
        let more_credit = peer.credit.on_released(h.credit);
        if more_credit || peer.stream.acks_new(h.ack) {
            self.on_new_ack(p, h.ack, more_credit, None, None, now);
        }
        let stream = &self.peers[p].stream;
        if h.seq != stream.rcv_next || !stream.q.reorder.is_empty() {
            return self.on_sequenced(p, &h.repr(), f, now);
        }
        // Next in order, nothing held behind it: what `on_sequenced` does for it.
        self.on_pull_data(p, h.msg_id, h.offset, h.length as u32, f);
        let every = self.cfg.ack_every;
        let delay = self.ack_hold_ns(self.peers[p].stream.hold_long);
        let peer = &mut self.peers[p];
        let s = &mut peer.stream;
        s.advance();
        if h.flags as u16 & wire::FLAG_ACK_NOW != 0 {
            s.ack_soon();
        } else {
            s.schedule_ack(now, every, delay);
        }
        // The transmit pass visits the peer for its ack only when one is owed now; a
        // delayed one waits for its time (`ack_timers`), as for a small message (fast.rs).
        // What the frame asked to send (the next Pull, the Fin) marked it already.
        if !peer.in_active {
            if s.ack_now {
                self.mark_active(p);
            } else if !s.ack_queued {
                self.delay_ack(p);
            }
        }
    }

    /// A fragment of a pulled block, first sent or resent: its header written straight from
    /// the peer's `header` and the descriptor (its payload read now, or with the rest of
    /// the burst: `read_payloads`).
    #[inline(never)]
    pub(super) fn emit_pull(&mut self, link: &mut L, header: &Repr, d: &TxDesc) -> Emit {
        let Some(id) = d.req else {
            return Emit::Gone;
        };
        let Some(Req {
            kind: ReqKind::Send(s),
            ..
        }) = self.reqs.get(id)
        else {
            return Emit::Gone;
        };
        let src = s.buf;
        let h = PullHeader {
            dst_mac: header.dst_mac,
            src_mac: header.src_mac,
            flags: (d.flags | self.ck_flag()) as u8,
            src_session: header.src_session,
            dst_session: header.dst_session,
            seq: d.seq,
            ack: header.ack,
            credit: header.credit,
            msg_id: d.msg_id,
            length: d.len as u16,
            offset: d.offset,
        };
        let head = wire::PULL_OVERHEAD;
        let len = head + d.len as usize;
        // A first transmission from a buffer the link can send from goes in place (see
        // `in_place`); a resend is copied.
        let placed = if d.retries == 0 {
            self.in_place(link, h.dst_mac, head, &src, d.offset, d.len as usize)
        } else {
            None
        };
        let mut buf = match placed {
            Some(b) => b,
            None => {
                let Some(mut buf) = link.alloc_tx(len.max(wire::MIN_FRAME)) else {
                    self.stats.tx_no_buffers += 1;
                    return Emit::NoBuffer;
                };
                // Read with the rest of the burst, unless the checksum must cover the
                // payload (it is filled here, over what is read) or the copier reads as
                // cheaply frame by frame.
                if !self.payload_ck && self.copy.reads_in_batches() {
                    self.reads.push(PendingRead {
                        frame: self.tx.len(),
                        at: head,
                        len: len - head,
                        src,
                        off: d.offset,
                        req: id,
                    });
                } else if let Err(e) = self.copy.read(&src, d.offset, &mut buf.as_mut()[head..len])
                {
                    self.finish(id, Err(Error::Copy(e.0)));
                    return Emit::Gone;
                }
                buf
            }
        };
        h.emit(buf.as_mut());
        wire::fill_pull_checksum(buf.as_mut());
        self.stats.tx_bytes += len as u64;
        self.tx.push(buf);
        Emit::Sent
    }
}
