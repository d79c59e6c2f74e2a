//! The reliable in-order stream to one peer: sequence numbers, cumulative and selective acks,
//! the reorder buffer, the RTT estimate and retransmit bookkeeping.
//!
//! The stream knows frames only as descriptors ([`TxDesc`]) and builds none itself: a
//! [`FrameSource`] turns a descriptor into a frame, so resending never reaches into the
//! operation a frame belongs to.

use super::lazy::Lazy;
use super::types::ReqId;
use crate::config::Config;
use crate::wire::{self, AckRepr, Kind};
use std::collections::{BTreeMap, VecDeque};

/// Frames resent when the retransmit timer fires again without the cumulative ack having
/// moved (the first expiry resends only the oldest frame: after a stall of either side, the
/// ack it draws shows what really is missing, and selective acks fill those holes).
const RTO_BURST: usize = 8;

/// Wrapping sequence comparison: `a` before `b`.
#[inline]
fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// What became of a descriptor handed to a [`FrameSource`].
pub(super) enum Emit {
    Sent,
    /// The link had no frame buffer: nothing happened, try again later.
    NoBuffer,
    /// Its operation failed or is gone: the frame is not sent.
    Gone,
}

/// Builds the frames the stream asks for, into a transmit burst.
pub(super) trait FrameSource {
    /// Whether the burst has room for another frame.
    fn room(&self) -> bool;
    /// Builds and queues the frame `d` stands for.
    fn emit(&mut self, d: &TxDesc) -> Emit;
}

/// Smoothed round-trip time and its variation (RFC 6298), in ns up to 4.29 s (u32: a peer
/// keeps this per session, and an RTT beyond seconds is a dead peer, not a sample).
#[derive(Debug, Default)]
pub(super) struct Rtt {
    /// Smoothed RTT in ns, at least 1 once sampled (0: no sample yet).
    srtt: u32,
    rttvar: u32,
}

impl Rtt {
    fn valid(&self) -> bool {
        self.srtt != 0
    }
    /// The smoothed RTT (0: no sample yet).
    pub(super) fn srtt(&self) -> u64 {
        self.srtt as u64
    }
    fn sample(&mut self, r: u64) {
        let r = r.clamp(1, u32::MAX as u64);
        if !self.valid() {
            self.srtt = r as u32;
            self.rttvar = (r / 2) as u32;
        } else {
            let (srtt, rttvar) = (self.srtt as u64, self.rttvar as u64);
            let d = srtt.abs_diff(r);
            self.rttvar = ((3 * rttvar + d) / 4) as u32;
            self.srtt = ((7 * srtt + r) / 8).max(1) as u32;
        }
    }
    /// The retransmit timeout of a frame whose ack the receiver may hold for up to
    /// `ack_delay` (the peer's advertised delay, or 0 for a frame flagged `FLAG_ACK_NOW`): the
    /// RTT estimate's bound plus that delay (QUIC's PTO does the same with max_ack_delay).
    fn rto(&self, c: &Config, ack_delay: u64) -> u64 {
        let rto = if !self.valid() {
            c.rto_initial_ns
        } else {
            (self.srtt as u64 + 4 * self.rttvar as u64).clamp(c.rto_min_ns, c.rto_max_ns)
        };
        rto + ack_delay
    }
}

/// Takes the request of each eager frame an ack acknowledges, as the stream retires the
/// frame (a trait, not a closure: the engine's taker is always inlined into the ack's walk).
pub(super) trait TakeAcked {
    fn take(&mut self, id: ReqId);
}

impl TakeAcked for Vec<ReqId> {
    fn take(&mut self, id: ReqId) {
        self.push(id);
    }
}

/// What an ack's newly acknowledged frames give the RTT estimate: the newest first
/// transmission among them sent after the last timeout.
pub(super) struct Sample {
    since: u64,
    newest: Option<u64>,
}

impl Sample {
    /// Frame `d` is newly acknowledged: its eager send's request is handed to `done`.
    #[inline]
    fn newly_acked(&mut self, d: &TxDesc, done: &mut impl TakeAcked) {
        if d.retries == 0 && d.first_sent >= self.since {
            self.newest = Some(self.newest.map_or(d.first_sent, |t| t.max(d.first_sent)));
        }
        if matches!(d.kind, Kind::Eager | Kind::Small)
            && let Some(id) = d.req
        {
            done.take(id);
        }
    }
}

/// Where an arriving sequenced frame falls relative to the next one expected.
pub(super) enum Arrival {
    /// The next in order: deliver it.
    Next,
    /// Ahead, within the window: hold it until the gap fills.
    Ahead,
    /// Already delivered (our ack was lost) or beyond the window.
    Stale,
}

/// What one transmit pass of the stream sent.
pub(super) struct Sent {
    pub(super) frames: usize,
    pub(super) retransmits: u64,
}

/// What the retransmit timer found.
pub(super) struct RtoScan {
    /// A frame has gone unacknowledged past the peer deadline.
    pub(super) dead: bool,
    /// Frames were queued for resending.
    pub(super) fired: bool,
}

/// Laid out by hand (`repr(C)`, with [`Peer`](super::peer::Peer)'s order): the fields the
/// receive path of a small message and the visit of a delayed ack read are the last 29
/// bytes, which fall in the peer's last cache line (peer.rs, `Peer`); the rest first.
#[derive(Debug)]
#[repr(C)]
pub(super) struct Stream<F> {
    // cold: the transmit side's sequence and timers
    /// When the last probe went out: frames sent before it give no RTT sample, and those of
    /// them its reply does not acknowledge are lost.
    pub(super) last_rto: u64,
    rtt: Rtt,
    /// Number of the latest probe sent (its reply echoes it: the reply to an earlier probe
    /// says nothing of the frames sent since); on the receiving side, the number to echo.
    pub(super) probe_id: u16,
    pub(super) probe_echo: u16,
    pub(super) next_seq: u32,
    n_ctl: u32,
    /// Doublings of the retransmit timeout since the cumulative ack last moved.
    rto_backoff: u32,
    /// Longest the peer holds an ack (µs, advertised at connect: `ConnectRepr`
    /// `max_ack_delay_us`; the protocol's limit until then).
    peer_ack_delay_us: u16,
    /// In the engine's keepalive queue (`Engine::waits`; one entry per peer at most, but
    /// for a slot reused after a retirement).
    pub(super) keepalive_queued: bool,
    // hot: what a delayed ack's visit asks (no collection allocated) and the receive path
    // reads and writes
    /// In the engine's queue of delayed acks (`Engine::ack_timers`; as `keepalive_queued`).
    pub(super) ack_queued: bool,
    /// The retransmit timer fired: a probe is to be sent.
    pub(super) probe: bool,
    pub(super) ack_now: bool,
    /// A probe arrived: the next standalone ack answers it.
    pub(super) probe_reply: bool,
    /// This side's last standalone ack to the peer announced the busy hold
    /// (`Config::max_ack_delay_busy_ns`, wire version 8): its acks may be held that long.
    pub(super) hold_long: bool,
    pub(super) rcv_next: u32,
    ack_owed: u32,
    /// The queues of frames to send, unacknowledged, to resend and held out of order.
    pub(super) q: Lazy<Queues<F>>,
    pub(super) ack_due: Due,
}

impl<F> Default for Stream<F> {
    fn default() -> Self {
        Stream {
            next_seq: 0,
            q: Lazy::default(),
            n_ctl: 0,
            rtt: Rtt::default(),
            rto_backoff: 0,
            last_rto: 0,
            probe: false,
            probe_reply: false,
            hold_long: false,
            probe_id: 0,
            probe_echo: 0,
            rcv_next: 0,
            ack_owed: 0,
            ack_due: Due::NONE,
            ack_now: false,
            keepalive_queued: false,
            ack_queued: false,
            peer_ack_delay_us: (wire::ACK_DELAY_LIMIT_NS / 1_000) as u16,
        }
    }
}

impl<F: 'static> Stream<F> {
    /// Forgets the sequence state of a dead incarnation (the RTT estimate is kept: the path
    /// is the same).
    pub(super) fn reset(&mut self) {
        self.q.release();
        self.n_ctl = 0;
        self.next_seq = 0;
        self.forget_sequence();
    }

    /// Forgets what was sent and received in a session: the unacknowledged and reordered
    /// frames, the receive point, owed acks and probes.
    fn forget_sequence(&mut self) {
        if let Some(q) = self.q.get_mut() {
            q.unacked = VecDeque::new();
            q.resend = VecDeque::new();
            q.reorder = BTreeMap::new();
        }
        self.q.release_if_clear();
        self.rcv_next = 0;
        self.ack_owed = 0;
        self.ack_due = Due::NONE;
        self.ack_now = false;
        self.probe = false;
        self.probe_reply = false;
        // A new session starts from the delay advertised at connect.
        self.hold_long = false;
    }

    /// Starts a session's streams: this side's numbers from `isn` (random: frames of an
    /// earlier session between the same nodes fall outside the window), the peer's from
    /// `rcv_isn` once known.
    pub(super) fn start(&mut self, isn: u32) {
        self.next_seq = isn;
    }

    /// The first sequence number of this side's stream in this session (what Connect and
    /// ConnectAck carry): until the peer is connected it acknowledges nothing, so it is the
    /// oldest frame unacknowledged, or the next to send.
    pub(super) fn isn(&self) -> u32 {
        self.q.unacked.front().map_or(self.next_seq, |d| d.seq)
    }

    /// The peer forgot the session (it retired it): the frames it never acknowledged go
    /// back in front of their queues, in order, for a new session; the sequence state is
    /// forgotten.
    pub(super) fn requeue_unacked(&mut self) {
        let old: Vec<TxDesc> = self
            .q
            .unacked
            .iter()
            .filter(|d| !d.acked)
            .copied()
            .collect();
        self.forget_sequence();
        for d in old.into_iter().rev() {
            self.unqueue(TxDesc {
                retries: 0,
                queued: false,
                ..d
            });
        }
        self.rto_backoff = 0;
    }

    /// Frames to send or resend.
    pub(super) fn has_tx(&self) -> bool {
        !self.q.resend.is_empty() || self.probe || self.has_new()
    }

    /// New frames to send (not resends).
    pub(super) fn has_new(&self) -> bool {
        !self.q.pending.is_empty() || !self.q.ctl_bulk.is_empty()
    }

    /// Queues a new frame behind those of its class.
    pub(super) fn queue(&mut self, d: TxDesc) {
        match d.kind {
            Kind::Eager | Kind::Small | Kind::Rts => self.q.pending.push_back(d),
            Kind::PullData => self.q.ctl_bulk.push_back(d),
            _ => {
                // Behind the other control frames, ahead of all bulk data (few control
                // frames wait at a time: the insert moves those).
                self.q.ctl_bulk.insert(self.n_ctl as usize, d);
                self.n_ctl += 1;
            }
        }
    }

    /// Queues the `count` frames of a pulled block behind the bulk data already queued, frame
    /// `i` made by `frame(i)` (one reservation, and none of `queue`'s sorting per frame: a
    /// block is about a hundred frames).
    #[inline]
    pub(super) fn queue_bulk(&mut self, count: u32, mut frame: impl FnMut(u32) -> TxDesc) {
        let q = &mut self.q.ctl_bulk;
        q.reserve(count as usize);
        for i in 0..count {
            let d = frame(i);
            debug_assert!(d.kind == Kind::PullData);
            q.push_back(d);
        }
    }

    /// Queues a new message frame (Eager, Small, Rts) behind the others.
    #[inline]
    pub(super) fn queue_message(&mut self, d: TxDesc) {
        debug_assert!(matches!(d.kind, Kind::Eager | Kind::Small | Kind::Rts));
        self.q.pending.push_back(d);
    }

    /// Puts back a frame `next_new` gave, in front of its class.
    fn unqueue(&mut self, d: TxDesc) {
        match d.kind {
            Kind::Eager | Kind::Small | Kind::Rts => self.q.pending.push_front(d),
            Kind::PullData => self.q.ctl_bulk.insert(self.n_ctl as usize, d),
            _ => {
                self.q.ctl_bulk.push_front(d);
                self.n_ctl += 1;
            }
        }
    }

    /// The next new frame: control first, then messages, then bulk data.
    fn next_new(&mut self) -> Option<TxDesc> {
        if self.n_ctl > 0 {
            self.n_ctl -= 1;
            return self.q.ctl_bulk.pop_front();
        }
        self.q
            .pending
            .pop_front()
            .or_else(|| self.q.ctl_bulk.pop_front())
    }

    // ---- acknowledgements -----------------------------------------------------------------

    /// Takes a cumulative ack (every frame before `ack`) and an optional selective ack of the
    /// frames after it. Hands `done` the request of each eager frame newly acknowledged, in
    /// sequence order (its send may complete: handled as the frame is retired, with no list
    /// in between); the newest frame acknowledged that was sent once feeds the
    /// RTT estimate. Frames below the highest selectively acked one are scheduled for
    /// resending. The cost follows what moved: an ack that acknowledges nothing new costs a
    /// comparison, a selective ack its set bits.
    pub(super) fn on_ack(
        &mut self,
        ack: u32,
        sack: Option<&AckRepr>,
        probe_reply: Option<u16>,
        now: u64,
        rto_min_ns: u64,
        done: &mut impl TakeAcked,
    ) {
        let Some(front) = self.q.unacked.front() else {
            return;
        };
        // One sample per ack, from the newest frame it acknowledges that went out once and
        // after the last timeout (Karn): older frames acknowledged with it waited behind a
        // hole or a lost ack, and their age would inflate the estimate — and with it the
        // timeout, which would make them older still.
        let mut sample = Sample {
            since: self.last_rto,
            newest: None,
        };
        if seq_lt(front.seq, ack) {
            self.rto_backoff = 0;
            // `unacked` holds consecutive sequence numbers: the first `n` are acknowledged.
            let n = (ack.wrapping_sub(front.seq) as usize).min(self.q.unacked.len());
            for d in self.q.unacked.range(..n) {
                if !d.acked
                    && matches!(d.kind, Kind::Eager | Kind::Small)
                    && let Some(id) = d.req
                {
                    done.take(id);
                }
            }
            // The sample: frames are numbered as they are first sent, so the newest sent
            // once among them is the last one sent once (found from the end, not kept as a
            // running maximum over every frame). Only if that frame asked for its ack at
            // once: any other ack may have been held by the receiver for up to
            // the delay it advertised, which would read as round-trip time (and the timeout,
            // which adds that delay already, would count it twice).
            if let Some(d) = self
                .q
                .unacked
                .range(..n)
                .rev()
                .find(|d| !d.acked && d.retries == 0)
                && d.first_sent >= sample.since
                && d.flags & wire::FLAG_ACK_NOW != 0
            {
                sample.newest = Some(d.first_sent);
            }
            self.q.unacked.drain(..n);
        }
        if let Some(s) = sack {
            self.on_sack(ack, s, now, rto_min_ns, &mut sample, done);
        }
        if probe_reply == Some(self.probe_id) {
            // The receiver took every frame that arrived before the latest probe: those sent
            // before it and still unacknowledged were lost. (Rare: only after a timeout.)
            let probe = self.last_rto;
            let q = &mut *self.q;
            for d in q.unacked.iter_mut() {
                if !d.acked && !d.queued && d.last_sent <= probe {
                    d.queued = true;
                    q.resend.push_back(d.seq);
                }
            }
        }
        if let Some(sent) = sample.newest {
            self.rtt.sample(now.saturating_sub(sent));
        }
    }

    /// The delay the peer advertised at connect or announced in its latest standalone ack
    /// (µs): the longest it holds an ack.
    pub(super) fn set_peer_ack_delay(&mut self, us: u32) {
        self.peer_ack_delay_us = us.min((wire::ACK_DELAY_LIMIT_NS / 1_000) as u32) as u16;
    }

    /// A round-trip sample taken outside the stream (the handshake's).
    pub(super) fn rtt_sample(&mut self, r: u64) {
        self.rtt.sample(r);
    }

    /// Whether `ack` lies between the first frame not acknowledged and the next to send:
    /// an ack of this stream (the handshake's answer, before any ack moved it).
    pub(super) fn acks_within(&self, ack: u32) -> bool {
        let start = self.isn();
        ack.wrapping_sub(start) <= self.next_seq.wrapping_sub(start)
    }

    /// Whether cumulative ack `ack` acknowledges a frame not acknowledged yet.
    #[inline]
    pub(super) fn acks_new(&self, ack: u32) -> bool {
        self.q.unacked.front().is_some_and(|d| seq_lt(d.seq, ack))
    }

    /// The selective part of an ack: visits its set bits only.
    fn on_sack(
        &mut self,
        ack: u32,
        s: &AckRepr,
        now: u64,
        rto_min_ns: u64,
        sample: &mut Sample,
        done: &mut impl TakeAcked,
    ) {
        let Some(base) = self.q.unacked.front().map(|d| d.seq) else {
            return;
        };
        // `unacked` holds consecutive sequence numbers: frame `seq` is at `seq - base`.
        let mut highest = None;
        for (w, &word) in s.sack.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let b = bits.trailing_zeros();
                bits &= bits - 1;
                let seq = ack.wrapping_add(1 + w as u32 * 64 + b);
                let i = seq.wrapping_sub(base) as usize;
                let Some(d) = self.q.unacked.get_mut(i) else {
                    continue;
                };
                highest = Some(i);
                if !d.acked {
                    d.acked = true;
                    sample.newly_acked(d, done);
                }
            }
        }
        // Everything below the highest selectively acked frame and not acked itself was
        // lost: resend it now, at most once per round trip. (Only while frames are missing:
        // on a lossless link no ack has bits set.)
        if let Some(h) = highest {
            let rtt = self.rtt.srtt().max(rto_min_ns / 2);
            let q = &mut *self.q;
            for d in q.unacked.iter_mut().take(h) {
                if !d.acked && !d.queued && now.saturating_sub(d.last_sent) >= rtt {
                    d.queued = true;
                    q.resend.push_back(d.seq);
                }
            }
        }
    }

    // ---- receive order --------------------------------------------------------------------

    pub(super) fn arrival(&self, seq: u32, window: u32) -> Arrival {
        let d = seq.wrapping_sub(self.rcv_next);
        if d == 0 {
            Arrival::Next
        } else if (d as i32) > 0 && d < window {
            Arrival::Ahead
        } else {
            Arrival::Stale
        }
    }

    /// Holds a frame that arrived ahead of a gap; `false` if it is held already. Either way
    /// the sender is told at once what is missing.
    pub(super) fn hold(&mut self, seq: u32, f: F) -> bool {
        self.ack_now = true;
        if let std::collections::btree_map::Entry::Vacant(e) = self.q.reorder.entry(seq) {
            e.insert(f);
            true
        } else {
            false
        }
    }

    /// A stale frame arrived: the sender missed our ack, so send one at once.
    pub(super) fn ack_soon(&mut self) {
        self.ack_now = true;
    }

    /// The next frame in order was delivered.
    pub(super) fn advance(&mut self) {
        self.rcv_next = self.rcv_next.wrapping_add(1);
        self.ack_owed += 1;
    }

    /// The held frame that is next in order, if the gap before it has filled.
    pub(super) fn take_held(&mut self) -> Option<F> {
        // Nearly always nothing is held (no gap): no tree walk for it (and no reorder
        // buffer allocated for it).
        if self.q.reorder.is_empty() {
            return None;
        }
        let n = self.rcv_next;
        self.q.reorder.remove(&n)
    }

    /// After delivering in order: ack at once every `ack_every` frames or while a gap remains,
    /// otherwise within `ack_delay_ns` (or with the next frame out, or when the loop runs
    /// idle).
    pub(super) fn schedule_ack(&mut self, now: u64, ack_every: u32, ack_delay_ns: u64) {
        if self.ack_owed >= ack_every || !self.q.reorder.is_empty() {
            self.ack_now = true;
        } else if self.ack_due.is_none() {
            self.ack_due = Due::at(now + ack_delay_ns);
        }
    }

    /// Whether a standalone ack is due.
    pub(super) fn ack_due_at(&self, now: u64) -> bool {
        self.ack_now || self.ack_due.get().is_some_and(|t| now >= t)
    }

    /// The selective ack of the frames held beyond the gap.
    pub(super) fn sack(&self) -> AckRepr {
        let mut a = AckRepr::default();
        for &s in self.q.reorder.keys() {
            a.set(s.wrapping_sub(self.rcv_next).wrapping_sub(1));
        }
        a
    }

    /// A standalone ack went out, announcing the busy hold or not (`hold_long`: what it
    /// said is what this side may hold the peer's next acks for, wire version 8).
    pub(super) fn acked(&mut self, hold_long: bool) {
        self.ack_owed = 0;
        self.ack_due = Due::NONE;
        self.ack_now = false;
        self.hold_long = hold_long;
    }

    // ---- transmit -------------------------------------------------------------------------

    /// Resends what was lost, then sends pending frames while fewer than `limit` are
    /// unacknowledged, as long as `src` has room. Sequenced frames carry the ack, so an ack
    /// owed is then paid. A frame asks the receiver for its ack at once
    /// (`wire::FLAG_ACK_NOW`: not held up to the peer's ack delay) when it is a
    /// retransmission (loss recovery waits on it), when it fills the window to three quarters
    /// or to the end (the ack frees the window before the sender stalls on it), and while
    /// `low_credit` (the sender's eager credit is nearly used up: the ack returns it). Only
    /// such frames (and the handshake) give round-trip samples.
    pub(super) fn transmit(
        &mut self,
        src: &mut impl FrameSource,
        now: u64,
        limit: usize,
        low_credit: bool,
    ) -> Sent {
        let mut out = Sent {
            frames: 0,
            retransmits: 0,
        };
        let mut piggybacked = false;
        // Retransmissions first: they hold up the receiver's in-order delivery.
        while src.room() && !self.q.resend.is_empty() {
            let Some(seq) = self.q.resend.pop_front() else {
                break;
            };
            let Some(front) = self.q.unacked.front() else {
                continue;
            };
            let i = seq.wrapping_sub(front.seq) as usize;
            let Some(d) = self.q.unacked.get_mut(i) else {
                continue;
            };
            d.queued = false;
            if d.acked {
                continue;
            }
            // Counted as a retry while it is built (a small message resent takes the full
            // header).
            let d = TxDesc {
                retries: d.retries + 1,
                flags: d.flags | wire::FLAG_ACK_NOW,
                ..*d
            };
            match src.emit(&d) {
                Emit::Sent => {
                    if let Some(x) = self.q.unacked.get_mut(i) {
                        x.retries += 1;
                        x.last_sent = now;
                    }
                    out.retransmits += 1;
                    out.frames += 1;
                    piggybacked = true;
                }
                Emit::NoBuffer => {
                    // Out of frames: try again next pass, nothing counted as sent.
                    if let Some(x) = self.q.unacked.get_mut(i) {
                        x.queued = true;
                    }
                    self.q.resend.push_front(seq);
                    break;
                }
                Emit::Gone => {
                    // Its operation failed after the frame went out: the receiver still needs
                    // the sequence number, so it becomes a no-op frame.
                    if let Some(x) = self.q.unacked.get_mut(i) {
                        *x = TxDesc {
                            seq,
                            first_sent: x.first_sent,
                            last_sent: x.last_sent,
                            queued: true,
                            ..TxDesc::new(Kind::Ping, 0)
                        };
                    }
                    self.q.resend.push_front(seq);
                }
            }
        }
        while src.room() && self.q.unacked.len() < limit {
            let Some(mut d) = self.next_new() else {
                break;
            };
            d.seq = self.next_seq;
            d.first_sent = now;
            d.last_sent = now;
            let n = self.q.unacked.len() + 1;
            if low_credit || n == limit || n == limit - limit / 4 {
                d.flags |= wire::FLAG_ACK_NOW;
            }
            // The sequence number is taken only once the frame is built: a frame that finds
            // no buffer must not leave a hole that the receiver would buffer everything
            // behind (holding the very buffers the sender is short of). A frame whose
            // operation failed meanwhile is dropped unnumbered.
            match src.emit(&d) {
                Emit::Sent => {
                    self.next_seq = self.next_seq.wrapping_add(1);
                    self.q.unacked.push_back(d);
                    out.frames += 1;
                    piggybacked = true;
                }
                Emit::NoBuffer => {
                    self.unqueue(d);
                    break;
                }
                Emit::Gone => {}
            }
        }
        if piggybacked {
            self.ack_owed = 0;
            self.ack_due = Due::NONE;
            if self.q.reorder.is_empty() {
                self.ack_now = false;
            }
        }
        out
    }

    // ---- timers ---------------------------------------------------------------------------

    /// The retransmit timer, one per stream, on the oldest frame not acknowledged: its cost
    /// does not grow with the frames in flight. It resends nothing itself: it has a probe sent
    /// (an unsequenced "acknowledge now", behind every frame sent before it), whose reply
    /// says what really is missing. A receiver that was only slow (descheduled, its queue
    /// full of our frames) answers once it has taken them, so a stall costs no retransmission
    /// and no duplicate; lost frames are resent on the reply. The timeout doubles with each
    /// probe until the cumulative ack moves. A frame unacknowledged for longer than
    /// `timeout` means the peer is dead.
    pub(super) fn rto_scan(&mut self, now: u64, cfg: &Config, timeout: u64) -> RtoScan {
        let mut scan = RtoScan {
            dead: false,
            fired: false,
        };
        // Frames at the front are acknowledged selectively only in the rare case of an ack
        // lost behind a later one: skip a few at most.
        let Some(oldest) = self.q.unacked.iter().take(RTO_BURST).position(|d| !d.acked) else {
            return scan;
        };
        let d = &self.q.unacked[oldest];
        if now.saturating_sub(d.first_sent) > timeout {
            scan.dead = true;
            return scan;
        }
        // The receiver may hold the ack of a frame not flagged for an ack at once; once a
        // probe is out (backed off), the probe's answer is never held.
        let held = if d.flags & wire::FLAG_ACK_NOW != 0 || self.rto_backoff > 0 {
            0
        } else {
            self.peer_ack_delay_us as u64 * 1_000
        };
        let wait = (self.rtt.rto(cfg, held) << self.rto_backoff.min(16)).min(cfg.rto_max_ns);
        if self.probe || now.saturating_sub(d.last_sent.max(self.last_rto)) < wait {
            return scan;
        }
        self.probe = true;
        self.rto_backoff += 1;
        scan.fired = true;
        scan
    }
}

mod queues;
pub(super) use queues::{Due, Queues, TxDesc};

#[cfg(test)]
mod tests;
