//! The transmit path: every active peer's handshake frames, its stream's (re)transmissions
//! and its standalone ack, built into link buffers and sent as one burst.

use super::Engine;
use super::peer::PeerState;
use super::request::{Req, ReqKind};
use super::stream::{Emit, FrameSource, TxDesc};
use super::types::{Error, ReqId};
use crate::copy::{BufRef, CopyEngine};
use crate::link::Link;
use crate::wire::{self, ConnectRepr, Frame, Kind, MacAddr, Repr};

/// A rendezvous frame in the burst whose payload is still to be read: the frames of one
/// message are read together just before the burst goes (`read_payloads`), one call for
/// many frames where the copy engine has a cost per call (`process_vm_readv` of a rank's
/// send buffer: one call per 9 KB frame moved under 4 GB/s here, per 8 frames over 10).
pub(super) struct PendingRead {
    /// Index of the frame in `Engine::tx`.
    pub(super) frame: usize,
    /// The payload's place in the frame.
    pub(super) at: usize,
    pub(super) len: usize,
    pub(super) src: BufRef,
    pub(super) off: u64,
    pub(super) req: ReqId,
}

/// The frame source for one peer's stream: builds its descriptors into the burst, under
/// the header that every frame to the peer shares.
struct Burst<'a, L: Link, C: CopyEngine<L::Frame>> {
    engine: &'a mut Engine<L, C>,
    link: &'a mut L,
    header: Repr,
    budget: usize,
}

impl<L: Link, C: CopyEngine<L::Frame>> FrameSource for Burst<'_, L, C> {
    fn room(&self) -> bool {
        self.engine.tx.len() < self.budget
    }
    #[inline]
    fn emit(&mut self, d: &TxDesc) -> Emit {
        // A small message goes under the compact header the first time only (see
        // `emit_desc`): that case has a function of its own, with a smaller frame.
        if d.kind == Kind::Small && d.retries == 0 {
            return self.engine.emit_small(self.link, &self.header, d);
        }
        // Pulled data has a header of its own (pulled.rs).
        if d.kind == Kind::PullData {
            return self.engine.emit_pull(self.link, &self.header, d);
        }
        self.engine.emit_desc(self.link, &self.header, d)
    }
}

impl<L: Link, C: CopyEngine<L::Frame>> Engine<L, C> {
    /// Builds frames for the active peers (up to two bursts' worth) and hands them to the link.
    pub(super) fn transmit(&mut self, link: &mut L, now: u64) -> usize {
        let mut sent = 0;
        self.payload_ck = self.cfg.payload_checksum.unwrap_or(!link.frame_check());
        for r in std::mem::take(&mut self.resets) {
            sent += self.emit(link, r, None) as usize;
        }
        let budget = self.cfg.burst * 2;
        if !self.quick_acks.is_empty() {
            sent += self.quick_acks(link, now, budget);
        }
        let spare = std::mem::take(&mut self.active_spare);
        let mut active = std::mem::replace(&mut self.active, spare);
        for &p in &active {
            self.peers[p].in_active = false;
            if self.tx.len() >= budget {
                self.mark_active(p);
                continue;
            }
            sent += match self.ack_only(link, p, now) {
                Some(n) => n,
                None => self.transmit_peer(link, p, now, budget),
            };
            if self.peers[p].quiet() {
                // Nothing more to send, nothing timed (what `settle` would find, cheaper).
                self.went_quiet(p, now);
                continue;
            }
            let peer = &self.peers[p];
            let (conn, stream) = (&peer.conn, &peer.stream);
            let new = conn.state == PeerState::Connected && stream.has_new();
            let room =
                (stream.q.unacked.len() as u32) < self.cfg.window.min(conn.remote_window as u32);
            if new && !room {
                self.stats.tx_window_full += 1;
            }
            let more = conn.state == PeerState::Connecting
                || stream.probe
                || stream.probe_reply
                || !stream.q.resend.is_empty()
                || (new && room);
            // An ack owed and not due yet (the visit would have sent it): visited again at
            // its time, not by every pass until then.
            let ack_later = stream.ack_due.is_some();
            if more {
                self.mark_active(p);
            } else if ack_later {
                self.delay_ack(p);
            }
            self.settle(p, now);
        }
        active.clear();
        self.active_spare = active;
        if !self.reads.is_empty() {
            self.read_payloads();
        }
        if !self.tx.is_empty() {
            let before = self.tx.len();
            link.tx_burst(&mut self.tx);
            self.stats.tx_frames += (before - self.tx.len()) as u64;
            if !self.tx.is_empty() {
                self.stats.tx_backpressure += 1;
            }
        }
        sent
    }

    /// The header of a frame of `kind` to peer node `p`, carrying this side's ack and credit.
    /// The endpoints are filled in per message (`emit_desc`).
    fn header(&self, p: usize, kind: Kind) -> Repr {
        let peer = &self.peers[p];
        Repr {
            dst_mac: peer.mac,
            src_mac: self.mac,
            kind: Some(kind),
            src_session: peer.conn.local,
            dst_session: peer.conn.remote,
            ack: peer.stream.rcv_next,
            credit: peer.credit.released,
            slot: peer.conn.remote_slot,
            ..Repr::default()
        }
    }

    fn transmit_peer(&mut self, link: &mut L, p: usize, now: u64, budget: usize) -> usize {
        let state = self.peers[p].conn.state;
        let mut sent = self.transmit_handshake(link, p, now);
        if state != PeerState::Connected {
            // The first frame of the connection rides right behind its first Connect (its
            // window is 1 until the peer's answer): the peer takes it once the Connect has
            // set the connection up, a round trip before the answer would let it go. Lost
            // or ahead of the Connect, it is resent once connected.
            // Only a message charged to the first credit rides (queued by isend while
            // connecting): not the frames requeued from a session the peer retired.
            let peer = &self.peers[p];
            if state == PeerState::Connecting
                && peer.conn.connect_tries > 0
                && peer.credit.used > 0
                && peer.stream.q.unacked.is_empty()
                && peer.stream.has_new()
            {
                sent += self.transmit_stream(link, p, now, budget);
                // Its ack waits for the handshake (the Connect may be resent meanwhile): it
                // gives no RTT sample, as if resent (Karn).
                let s = &mut self.peers[p].stream;
                if !s.q.unacked.is_empty() {
                    for d in s.q.unacked.iter_mut() {
                        d.retries = d.retries.max(1);
                    }
                }
            }
            return sent;
        }
        // A peer visited only for its ack (the common case with many peers, each sending
        // now and then) skips the stream's transmit pass and the move of the stream.
        if self.peers[p].stream.has_tx() {
            sent += self.transmit_stream(link, p, now, budget);
        }
        // The retransmit timer's probe, behind everything sent so far.
        if self.peers[p].stream.probe && self.tx.len() < budget {
            let id = self.peers[p].stream.probe_id.wrapping_add(1);
            let h = Repr {
                msg_id: id as u32,
                ..self.header(p, Kind::Probe)
            };
            if self.emit(link, h, None) {
                sent += 1;
                let s = &mut self.peers[p].stream;
                s.probe = false;
                s.probe_id = id;
                s.last_rto = now;
            }
        }
        let quiet = self.idle_ack_at().is_some_and(|t| now >= t);
        let stream = &self.peers[p].stream;
        let ack = plain_ack_due(stream, quiet, now) || stream.probe_reply;
        if ack && self.tx.len() < budget {
            // The selective ack only when frames are missing: an ack without it reads as
            // "nothing held beyond the cumulative ack".
            let gaps = !stream.q.reorder.is_empty();
            if !gaps && !stream.probe_reply {
                // The common ack, under the compact header.
                if self.emit_short_ack(link, p) {
                    sent += 1;
                    self.stats.acks_sent += 1;
                    self.peers[p].stream.acked(self.ack_busy);
                }
                return sent;
            }
            let mut h = Repr {
                length: if gaps {
                    wire::ACK_PAYLOAD_LEN as u32
                } else {
                    0
                },
                // The longest this node holds an ack from now on (wire version 8).
                seq: self.ack_hold_announced_us(),
                ..self.header(p, Kind::Ack)
            };
            if stream.probe_reply {
                h.flags |= wire::FLAG_PROBE_REPLY;
                h.msg_id = stream.probe_echo as u32;
            }
            let mut payload = [0u8; wire::ACK_PAYLOAD_LEN];
            if gaps {
                self.peers[p].stream.sack().emit(&mut payload);
            }
            if self.emit(link, h, gaps.then_some(&payload[..])) {
                sent += 1;
                self.stats.acks_sent += 1;
                self.peers[p].stream.acked(self.ack_busy);
                self.peers[p].stream.probe_reply = false;
            }
        }
        sent
    }

    /// The visit of a connected peer owed nothing but its plain ack: nothing to send or
    /// resend, nothing missing, no probe, probe reply or handshake frame owed (with many
    /// peers, each sending now and then, nearly every visit). The ack `transmit_peer` would
    /// send, with the peer's entry looked up once and the frame written whole
    /// ([`wire::write_short_ack`]). `None`: not such a visit, or no ack due yet.
    #[inline]
    fn ack_only(&mut self, link: &mut L, p: usize, now: u64) -> Option<usize> {
        let quiet = self.idle_ack_at().is_some_and(|t| now >= t);
        let flags = self.ck_flag() as u8;
        let (hold_us, busy) = (self.ack_hold_announced_us(), self.ack_busy);
        let Engine {
            peers,
            tx,
            stats,
            mac,
            ..
        } = self;
        let peer = peers.get_mut(p)?;
        let (conn, stream) = (&peer.conn, &peer.stream);
        if conn.state != PeerState::Connected
            || conn.connect_ack_owed
            || stream.probe
            || stream.probe_reply
            || !stream.q.reorder.is_empty()
            || !stream.q.resend.is_empty()
            || stream.has_new()
            || !plain_ack_due(stream, quiet, now)
        {
            return None;
        }
        let Some(buf) = short_ack_frame(link, peer, *mac, flags, hold_us) else {
            stats.tx_no_buffers += 1;
            return Some(0);
        };
        let stream = &mut peer.stream;
        // Headers as for every frame, the padding to the minimum not counted.
        stats.tx_bytes += wire::COMPACT_OVERHEAD as u64;
        stats.acks_sent += 1;
        tx.push(buf);
        stream.acked(busy);
        Some(1)
    }

    /// The peers the receive path marked for an ack (`Engine::quick_acks`): each one's ack
    /// sent if that is all its visit would do and the peer is quiet after it, what
    /// `ack_only`, `Peer::quiet` and `went_quiet` find and do for it in the pass over the
    /// active peers, with one look at the peer; the others go on to that pass (still marked
    /// active). The same frames as that pass would send, in the same burst.
    fn quick_acks(&mut self, link: &mut L, now: u64, budget: usize) -> usize {
        let mut sent = 0;
        let mut quick = std::mem::take(&mut self.quick_acks);
        for &p in &quick {
            if self.quick_ack(link, p, budget) {
                sent += 1;
                // Quiet now (`went_quiet`, written out: it was left out of line here).
                let peer = &mut self.peers[p];
                if !peer.in_armed && self.cfg.session_idle_ns != 0 && !peer.conn.retire_queued {
                    peer.conn.retire_queued = true;
                    self.retire_check.push_back((p, now));
                }
            } else {
                self.active.push(p);
            }
        }
        quick.clear();
        self.quick_acks = quick;
        sent
    }

    /// Peer `p`'s ack, if its visit would send that and nothing else and leave it quiet
    /// (then it is off the active peers); false: leave it to the pass over the active peers
    /// (as also when the burst is full or the link has no buffer: that pass counts it).
    #[inline(always)]
    pub(super) fn quick_ack(&mut self, link: &mut L, p: usize, budget: usize) -> bool {
        let flags = self.ck_flag() as u8;
        let (hold_us, busy) = (self.ack_hold_announced_us(), self.ack_busy);
        let Engine {
            peers,
            tx,
            stats,
            mac,
            ..
        } = self;
        let peer = &mut peers[p];
        let s = &peer.stream;
        // No collection allocated: nothing queued, resent or held out of order either (what
        // `ack_only` asks of the stream's queues, without looking into each).
        if tx.len() >= budget
            || peer.conn.state != PeerState::Connected
            || peer.conn.connect_ack_owed
            || !s.ack_now
            || s.probe
            || s.probe_reply
            || peer.msgs.in_eager.is_some()
            || peer.holds_collections()
        {
            return false;
        }
        debug_assert!(s.q.reorder.is_empty() && s.q.resend.is_empty() && !s.has_new());
        let Some(buf) = short_ack_frame(link, peer, *mac, flags, hold_us) else {
            return false;
        };
        stats.tx_bytes += wire::COMPACT_OVERHEAD as u64;
        stats.acks_sent += 1;
        tx.push(buf);
        peer.stream.acked(busy);
        peer.in_active = false;
        true
    }

    /// The stream's (re)transmissions to peer `p`, within its window.
    fn transmit_stream(&mut self, link: &mut L, p: usize, now: u64, budget: usize) -> usize {
        let peer = &self.peers[p];
        let limit = self.cfg.window.min(peer.conn.remote_window as u32) as usize;
        // Under a quarter of the peer's grant left: the frames ask for their acks at once,
        // which bring the credit back (wire::FLAG_ACK_NOW).
        let low_credit = peer.credit.avail() < peer.credit.grant / 4;
        // The stream is taken out while it drives the burst: building a frame needs the
        // engine (the send's buffer, the copy engine, a failed send's completion), never
        // the stream itself.
        let header = self.header(p, Kind::Ping);
        let mut stream = std::mem::take(&mut self.peers[p].stream);
        let out = stream.transmit(
            &mut Burst {
                engine: self,
                link,
                header,
                budget,
            },
            now,
            limit,
            low_credit,
        );
        self.peers[p].stream = stream;
        self.stats.retransmits += out.retransmits;
        out.frames
    }

    /// Connect (resent with backoff while connecting) and ConnectAck (once owed).
    fn transmit_handshake(&mut self, link: &mut L, p: usize, now: u64) -> usize {
        let mut sent = 0;
        let state = self.peers[p].conn.state;
        if state == PeerState::Connecting {
            let conn = &self.peers[p].conn;
            let backoff =
                (self.cfg.rto_initial_ns << conn.connect_tries.min(12)).min(self.cfg.rto_max_ns);
            if conn.connect_tries == 0 || now.saturating_sub(conn.connect_sent) >= backoff {
                let h = Repr {
                    src_session: self.session,
                    dst_session: 0,
                    seq: self.peers[p].stream.isn(),
                    length: wire::CONNECT_PAYLOAD_LEN as u32,
                    ..self.header(p, Kind::Connect)
                };
                let payload = self.connect_payload(p);
                sent += self.emit(link, h, Some(&payload)) as usize;
                let conn = &mut self.peers[p].conn;
                conn.connect_sent = now;
                conn.connect_tries = conn.connect_tries.saturating_add(1);
            }
        }
        if self.peers[p].conn.connect_ack_owed && state == PeerState::Connected {
            // The node's session (its incarnation), this side's stream start, and (in `ack`,
            // the peer having taken nothing yet) the start of the peer's that it answers.
            let h = Repr {
                src_session: self.session,
                dst_session: self.peers[p].conn.remote_session,
                seq: self.peers[p].stream.isn(),
                length: wire::CONNECT_PAYLOAD_LEN as u32,
                ..self.header(p, Kind::ConnectAck)
            };
            let payload = self.connect_payload(p);
            if self.emit(link, h, Some(&payload)) {
                sent += 1;
                self.peers[p].conn.connect_ack_owed = false;
            }
        }
        sent
    }

    /// What this side offers peer `p` in the handshake (taking its grant from the store on
    /// first use).
    fn connect_payload(&mut self, p: usize) -> [u8; wire::CONNECT_PAYLOAD_LEN] {
        let c = ConnectRepr {
            max_frame: self.cfg.max_frame as u32,
            window: self.cfg.window,
            eager_credit: self.grant_for_new_peer(p),
            max_ack_delay_us: (self.cfg.max_ack_delay_ns / 1_000) as u32,
            // The peer's frames name this slot: its state found without the index.
            slot: p as u32 + 1,
        };
        let mut payload = [0u8; wire::CONNECT_PAYLOAD_LEN];
        c.emit(&mut payload);
        payload
    }

    /// Builds the frame a sequenced descriptor stands for, under `header` (the peer's).
    #[inline(never)]
    fn emit_desc(&mut self, link: &mut L, header: &Repr, d: &TxDesc) -> Emit {
        // A small message goes under the compact header the first time only: resent, it
        // carries the full one (both sessions, its message id), so that a receiver that
        // restarted meanwhile can tell the sender.
        let kind = if d.kind == Kind::Small && d.retries > 0 {
            Kind::Eager
        } else {
            d.kind
        };
        if kind == Kind::Small {
            return self.emit_small(link, header, d);
        }
        let mut h = Repr {
            kind: Some(kind),
            flags: d.flags | self.ck_flag(),
            seq: d.seq,
            msg_id: d.msg_id,
            frag_index: d.frag_index,
            frag_count: d.frag_count,
            offset: d.offset,
            total: d.total,
            ..*header
        };
        let mut src = None;
        if let Some(id) = d.req
            && let Some(Req {
                ep,
                kind: ReqKind::Send(s),
            }) = self.reqs.get(id)
        {
            h.src_ep = *ep;
            h.dst_ep = s.dst_ep;
            h.match_bits = s.bits;
            h.src_rank = s.rank;
            if matches!(d.kind, Kind::Eager | Kind::Small | Kind::PullData) {
                h.length = d.len;
                src = Some(s.buf);
            }
        } else if d.req.is_some() {
            return Emit::Gone;
        }
        let head = h.payload_offset();
        let len = head + h.length as usize;
        // A first transmission from a buffer the link can send from goes in place (see
        // `in_place`); a resend is copied.
        let placed = match src {
            Some(sb) if d.retries == 0 => {
                self.in_place(link, h.dst_mac, head, &sb, d.offset, h.length as usize)
            }
            _ => None,
        };
        let mut buf = match placed {
            Some(b) => b,
            None => {
                let Some(mut buf) = link.alloc_tx(len.max(wire::MIN_FRAME)) else {
                    self.stats.tx_no_buffers += 1;
                    return Emit::NoBuffer;
                };
                // Rendezvous data is read with the rest of the burst, unless the checksum
                // must cover it (it is filled here, over what is read) or the copier reads
                // as cheaply frame by frame.
                if let (Some(sb), Some(req)) = (src, d.req)
                    && d.kind == Kind::PullData
                    && !self.payload_ck
                    && self.copy.reads_in_batches()
                {
                    self.reads.push(PendingRead {
                        frame: self.tx.len(),
                        at: head,
                        len: len - head,
                        src: sb,
                        off: d.offset,
                        req,
                    });
                } else if let Some(sb) = src
                    && let Err(e) = self.copy.read(&sb, d.offset, &mut buf.as_mut()[head..len])
                {
                    if let Some(id) = d.req {
                        self.finish(id, Err(Error::Copy(e.0)));
                    }
                    return Emit::Gone;
                }
                buf
            }
        };
        h.emit(buf.as_mut());
        Frame::new_unchecked(buf.as_mut()).fill_checksum();
        self.stats.tx_bytes += len as u64;
        self.tx.push(buf);
        Emit::Sent
    }

    /// Reads the payloads of the burst's rendezvous frames: each run of frames that continue
    /// one another in the same buffer with one `read_vectored`. A run that fails fails its
    /// send, and its frames are taken out of the burst (the stream resends their sequence
    /// numbers as no-op frames, as for any send that failed with frames out).
    fn read_payloads(&mut self) {
        let reads = std::mem::take(&mut self.reads);
        let mut failed: Vec<usize> = Vec::new();
        let mut i = 0;
        while i < reads.len() {
            let first = &reads[i];
            let mut j = i + 1;
            let mut end = first.off + first.len as u64;
            while j < reads.len()
                && reads[j].req == first.req
                && reads[j].src == first.src
                && reads[j].off == end
            {
                end += reads[j].len as u64;
                j += 1;
            }
            let run = &reads[i..j];
            // The run's frames, in order (their indices increase): disjoint borrows of `tx`.
            let mut outs: smallvec::SmallVec<[&mut [u8]; 32]> = smallvec::SmallVec::new();
            let mut next = run.iter().peekable();
            for (k, buf) in self.tx.iter_mut().enumerate() {
                let Some(r) = next.peek() else { break };
                if r.frame == k {
                    outs.push(&mut buf.as_mut()[r.at..r.at + r.len]);
                    next.next();
                }
            }
            if let Err(e) = self.copy.read_vectored(&first.src, first.off, &mut outs) {
                failed.extend(run.iter().map(|r| r.frame));
                let req = first.req;
                drop(outs);
                self.finish(req, Err(Error::Copy(e.0)));
            }
            i = j;
        }
        if !failed.is_empty() {
            let mut k = 0;
            self.tx.retain(|_| {
                k += 1;
                !failed.contains(&(k - 1))
            });
        }
        // Keep the allocation for the next burst.
        let mut reads = reads;
        reads.clear();
        self.reads = reads;
    }

    /// A small message's first transmission: the compact header written straight from the
    /// peer's header and the send (no full header built for it).
    #[inline(never)]
    fn emit_small(&mut self, link: &mut L, header: &Repr, d: &TxDesc) -> Emit {
        let Some(Req {
            ep,
            kind: ReqKind::Send(s),
        }) = d.req.and_then(|id| self.reqs.get(id))
        else {
            return Emit::Gone;
        };
        let (src_ep, buf_ref) = (*ep, s.buf);
        let h = wire::SmallHeader {
            dst_mac: header.dst_mac,
            src_mac: header.src_mac,
            flags: (d.flags | self.ck_flag()) as u8,
            length: d.len as u8,
            dst_ep: s.dst_ep,
            src_ep,
            tag: wire::session_tag(header.src_session, header.dst_session),
            seq: d.seq,
            ack: header.ack,
            credit: header.credit,
            src_rank: s.rank,
            match_bits: s.bits,
            slot: header.slot,
        };
        let head = wire::COMPACT_OVERHEAD;
        let len = head + d.len as usize;
        let mut buf = match self.in_place(link, h.dst_mac, head, &buf_ref, d.offset, d.len as usize)
        {
            Some(b) => b,
            None => {
                let Some(mut buf) = link.alloc_tx(len.max(wire::MIN_FRAME)) else {
                    self.stats.tx_no_buffers += 1;
                    return Emit::NoBuffer;
                };
                if let Err(e) = self
                    .copy
                    .read(&buf_ref, d.offset, &mut buf.as_mut()[head..len])
                {
                    if let Some(id) = d.req {
                        self.finish(id, Err(Error::Copy(e.0)));
                    }
                    return Emit::Gone;
                }
                buf
            }
        };
        h.emit(buf.as_mut());
        wire::fill_small_checksum(buf.as_mut());
        self.stats.tx_bytes += len as u64;
        self.tx.push(buf);
        Emit::Sent
    }

    /// A frame of `head` header bytes whose `len`-byte payload is `src` at `off`, sent in
    /// place (the link's frame points at the bytes; nothing is copied), when the copy engine
    /// and the link can and it pays: not when the frame's checksum covers its payload (the
    /// engine would read every byte anyway), not to this node (the loopback hands frames to
    /// the receive side as one piece), not for an empty payload. Every other length goes in
    /// place, so that the engine copies no payload byte on its way out (two CPU copies in
    /// all: the sender's into its channel, the receiver's out of the frame); the second mbuf
    /// costs nothing measurable below a cache line either (NetPIPE 1-48 B over `tigon run`,
    /// 12 interleaved pairs: 2.53 against 2.55 us one-way when such payloads were copied).
    ///
    /// Only first transmissions come here: a frame that sits in a transmit queue has gone
    /// to the port before anything sent after it, so before the peer can acknowledge it and
    /// its send complete (which gives the buffer back to its rank). Resends are copied.
    #[inline]
    pub(super) fn in_place(
        &mut self,
        link: &mut L,
        dst: MacAddr,
        head: usize,
        src: &BufRef,
        off: u64,
        len: usize,
    ) -> Option<L::TxBuf> {
        if len == 0 || self.payload_ck || dst == self.mac {
            return None;
        }
        let r = self.copy.tx_ref(src, off, len)?;
        let buf = link.alloc_tx_ref(head, r)?;
        self.stats.tx_in_place_bytes += len as u64;
        Some(buf)
    }

    /// A standalone ack with nothing selective and no probe reply: a [`Kind::ShortAck`],
    /// written straight from the peer's state.
    fn emit_short_ack(&mut self, link: &mut L, p: usize) -> bool {
        let Some(mut buf) = link.alloc_tx(wire::MIN_FRAME) else {
            self.stats.tx_no_buffers += 1;
            return false;
        };
        let peer = &self.peers[p];
        let flags = self.ck_flag() as u8;
        let fields = ack_fields(peer, self.ack_hold_announced_us());
        if !wire::write_short_ack(buf.as_mut(), peer.mac, self.mac, flags, fields) {
            // A link buffer shorter than it was asked for: as if it had none.
            self.stats.tx_no_buffers += 1;
            return false;
        }
        // Headers (and payload) as for every frame, the padding to the minimum not counted.
        self.stats.tx_bytes += wire::COMPACT_OVERHEAD as u64;
        self.tx.push(buf);
        true
    }

    /// The flag that makes a frame's checksum cover its payload, if this link needs it.
    pub(super) fn ck_flag(&self) -> u16 {
        if self.payload_ck {
            wire::FLAG_PAYLOAD_CK
        } else {
            0
        }
    }

    /// Emits an unsequenced frame (connect, ack, reset).
    fn emit(&mut self, link: &mut L, mut h: Repr, payload: Option<&[u8]>) -> bool {
        h.flags |= self.ck_flag();
        let len = wire::OVERHEAD + h.length as usize;
        let Some(mut buf) = link.alloc_tx(len.max(wire::MIN_FRAME)) else {
            self.stats.tx_no_buffers += 1;
            return false;
        };
        let b = buf.as_mut();
        h.emit(b);
        if let Some(pl) = payload {
            b[wire::OVERHEAD..len].copy_from_slice(&pl[..h.length as usize]);
        }
        Frame::new_unchecked(buf.as_mut()).fill_checksum();
        self.stats.tx_bytes += len as u64;
        self.tx.push(buf);
        true
    }
}

/// `peer`'s plain ack (its session tag, cumulative ack and released credit, and `hold_us`,
/// the longest this node holds an ack from now on) written whole into a fresh link buffer
/// ([`wire::write_short_ack`]). `None`: the link has no buffer, or gave one shorter than
/// asked for.
#[inline]
fn short_ack_frame<L: Link>(
    link: &mut L,
    peer: &super::peer::Peer<L::Frame>,
    mac: MacAddr,
    flags: u8,
    hold_us: u32,
) -> Option<L::TxBuf> {
    let mut buf = link.alloc_tx(wire::MIN_FRAME)?;
    let fields = ack_fields(peer, hold_us);
    wire::write_short_ack(buf.as_mut(), peer.mac, mac, flags, fields).then_some(buf)
}

/// What `peer`'s plain ack says, `hold_us` announced.
#[inline(always)]
fn ack_fields<F: 'static>(peer: &super::peer::Peer<F>, hold_us: u32) -> wire::AckFields {
    wire::AckFields {
        tag: wire::session_tag(peer.conn.local, peer.conn.remote),
        hold_us,
        ack: peer.stream.rcv_next,
        credit: peer.credit.released,
        slot: peer.conn.remote_slot,
    }
}

/// Whether a standalone ack goes to a peer now, probes aside: one is due (`ack_every` frames
/// owed, a gap, or its delay over), or acks owed wait for a link that has been `idle` long
/// enough (`Config::ack_idle_ns`: a reply may carry them instead).
#[inline]
fn plain_ack_due<F: 'static>(stream: &super::stream::Stream<F>, idle: bool, now: u64) -> bool {
    stream.ack_due_at(now) || idle && stream.ack_due.is_some()
}
