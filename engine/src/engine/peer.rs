//! One peer: a remote NODE (its agent), shared by every local and remote endpoint that talk
//! to each other over it, in the parts each layer owns: the connection ([`Conn`], conn.rs), the
//! reliable stream ([`Stream`], stream.rs), eager credit ([`Credit`], credit.rs) and the
//! messages in flight ([`Msgs`], proto/). Open-MX keeps a session per partner node and EMP a
//! MAC and two sequence numbers per remote host: reliability, sessions and credit scale with the
//! nodes, not with the ranks (1,000 nodes x 64 ranks are 1,000 peers here, not 64,000). What
//! MPI matching needs of a rank pair — the endpoints and the sender's rank — rides in every
//! message's header, and message ids are per node, so nothing is kept per pair of ranks.

use super::lazy::Lazy;
use super::stream::Stream;
use super::types::ReqId;
use crate::fasthash::FastMap as HashMap;
use crate::wire::{self, Kind, MacAddr};
use std::collections::VecDeque;

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub(super) enum PeerState {
    Idle,
    Connecting,
    Connected,
}

/// The connection: handshake state, the peer node's session and what it negotiated. Laid out
/// with [`Peer`]'s order (`repr(C)`).
#[derive(Debug)]
#[repr(C)]
pub(super) struct Conn {
    /// Payload bytes per frame to this peer.
    pub(super) frag: u32,
    /// This connection's ids, this side's and the peer's: each a mix of the node's session
    /// and the sequence number its stream starts at (random per connection). Every frame but
    /// the handshake carries them, so that nothing of an earlier connection between the
    /// same two incarnations (one was retired) passes for this one: not its frames, nor its
    /// acks.
    pub(super) local: u32,
    pub(super) connect_sent: u64,
    /// When the peer was last heard from; while connecting, when the connect began (its
    /// deadline runs from there).
    pub(super) last_rx: u64,
    pub(super) remote: u32,
    pub(super) remote_window: u32,
    pub(super) connect_ack_owed: bool,
    pub(super) connect_tries: u8,
    pub(super) state: PeerState,
    /// In the engine's retirement queue (one entry per peer at most).
    pub(super) retire_queued: bool,
    /// The peer node's session (its incarnation: new with every engine).
    pub(super) remote_session: u32,
}

impl Conn {
    /// Payload bytes per frame of pulled data to this peer: its header
    /// ([`wire::PULL_OVERHEAD`]) is shorter than the full one that `frag` is cut for.
    #[inline]
    pub(super) fn pull_frag(&self) -> u32 {
        (self.frag as usize + wire::OVERHEAD - wire::PULL_OVERHEAD).min(wire::PULL_MAX_PAYLOAD)
            as u32
    }
}

/// Credit an eager message costs beyond its bytes: the store's per-message overhead.
const RTS_COST: u32 = 64;

/// Credit one eager message costs the receiver's store.
pub(super) fn eager_cost(len: u64) -> u32 {
    len as u32 + RTS_COST
}

/// Eager credit both ways: what the peer granted this side (and how much of it is in use),
/// and what this side granted the peer from its unexpected store. Laid out with [`Peer`]'s
/// order (`repr(C)`).
#[derive(Debug, Default)]
#[repr(C)]
pub(super) struct Credit {
    /// When this side last received the first frame of an eager message from the peer: credit
    /// of peers quiet for `credit_idle_ns` may be asked back.
    pub(super) last_eager_rx: u64,
    // what we granted the peer
    /// Eager credit this side granted the peer.
    pub(super) given: u32,
    // what the peer granted us
    pub(super) grant: u32,
    /// A request to give credit back is on its way; no second one until it is answered.
    pub(super) reclaiming: bool,
    /// The connect-time grant has been taken from the store (once per session).
    pub(super) granted: bool,
    /// The peer asked for an ack at once (`FLAG_ACK_NOW`: mostly a sender short of credit)
    /// since this side last released credit: credit released later (a message matched out
    /// of the unexpected store) is then acked at the end of the burst, not after the ack
    /// delay, which would keep a sender waiting for credit up to that long.
    pub(super) asked: bool,
    /// The cumulative bytes the peer has released back (from the `credit` header field).
    pub(super) released_seen: u32,
    /// The cumulative bytes this side released back to the peer (sent as `credit`).
    pub(super) released: u32,
    pub(super) used: u32,
}

impl Credit {
    /// Eager bytes this side may still send the peer.
    pub(super) fn avail(&self) -> u32 {
        self.grant
            .wrapping_add(self.released_seen)
            .wrapping_sub(self.used)
    }

    /// The peer's cumulative released count arrived; true if it moved (more credit).
    pub(super) fn on_released(&mut self, credit: u32) -> bool {
        let more = (credit.wrapping_sub(self.released_seen) as i32) > 0;
        if more {
            self.released_seen = credit;
        }
        more
    }

    /// Forgets the session's credit both ways; returns what this side had granted, for the
    /// store to take back.
    pub(super) fn reset(&mut self) -> u32 {
        let given = self.given;
        self.grant = 0;
        self.released_seen = 0;
        self.used = 0;
        self.released = 0;
        self.given = 0;
        self.reclaiming = false;
        self.granted = false;
        given
    }
}

/// Where the fragments of the eager message being received from a peer go. Its tag is its
/// first byte (`repr(u8)`), and the only niche of an [`InEager`]: whether a peer has an eager
/// message arriving is that byte, the first of `Msgs::in_eager`.
#[derive(Debug, Clone, Copy)]
#[repr(u8)]
pub(super) enum EagerTarget {
    Req(ReqId),
    Store(u64),
    /// Addressed to an endpoint not open here: the fragments are dropped, the credit released.
    Discard,
}

#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub(super) struct InEager {
    pub(super) target: EagerTarget,
    pub(super) msg_id: u32,
    pub(super) next_frag: u32,
    pub(super) total: u64,
}

/// The messages in flight with the peer node, by message id (one id space per node pair and
/// direction: a message's fragments are contiguous in the node's stream). Laid out with
/// [`Peer`]'s order (`repr(C)`).
#[derive(Debug)]
#[repr(C)]
pub(super) struct Msgs {
    /// The eager message arriving now (its fragments come in order).
    pub(super) in_eager: Option<InEager>,
    /// Rendezvous receives pulling from the peer.
    pub(super) pulls: Lazy<HashMap<u32, ReqId>>,
    /// Synchronous and rendezvous sends, until they complete: the receiver names them by
    /// message id (Matched, Pull, Fin). A standard eager send is not here (no hash on the
    /// small-message path): its frames' descriptors in the stream name it.
    pub(super) sends: Lazy<HashMap<u32, ReqId>>,
    /// Messages waiting for the connection, in order.
    pub(super) waiting: Lazy<VecDeque<ReqId>>,
    pub(super) next_msg_id: u32,
    /// Bytes asked of the peer by Pull and not arrived yet, over all its messages: bounded
    /// by the frame window the peer may have in flight to us (more only queues at the
    /// sender, and spreads its reads and our writes over every message at once).
    pub(super) pull_inflight: u32,
}

/// Laid out by hand (`repr(C)`, here and in each part): with thousands of peers, each sending
/// now and then, a peer is out of the caches when its message arrives, and again when its
/// delayed ack falls due; each 64-byte line either visit reads is a miss. The fields the
/// receive path of a small message reads and writes lie in bytes 56..185 (about 3 lines of a
/// peer at any offset: the table's 248-byte entries fall at every 8-byte offset of a line),
/// those of a delayed ack's visit in 32..240 (about 4); the rest at the ends. Before, the
/// receive path read bytes 0..192 and the ack visit 0..240 (3.9 and 4.6 lines). The order
/// was searched for the fewest lines per message (the ack visit weighed at its 0.57 per
/// message with 65,536 uniform senders); `layout` below checks the spans.
#[derive(Debug)]
#[repr(C)]
pub(super) struct Peer<F> {
    pub(super) stream: Stream<F>,
    /// In the engine's `armed` list: the timers visit it.
    pub(super) in_armed: bool,
    pub(super) mac: MacAddr,
    /// In the engine's `active` list (so marking is O(1)).
    pub(super) in_active: bool,
    pub(super) credit: Credit,
    pub(super) conn: Conn,
    pub(super) msgs: Msgs,
}

impl<F: 'static> Peer<F> {
    /// The bytes the receive path of a small message reads and writes (fast.rs, `on_small`):
    /// what the read-ahead of a receive burst asks for (rx.rs, `receive_warm`).
    pub(super) const RX_HOT: std::ops::Range<usize> =
        std::mem::offset_of!(Self, stream.rcv_next)..std::mem::offset_of!(Self, msgs.in_eager) + 1;
    /// The bytes a delayed ack's visit reads and writes (mod.rs, `delayed_acks_due`; tx.rs,
    /// `quick_ack`): what the read-ahead of the acks falling due asks for (`warm_due_acks`).
    pub(super) const ACK_HOT: std::ops::Range<usize> =
        std::mem::offset_of!(Self, stream.ctl_bulk)..std::mem::offset_of!(Self, msgs.waiting) + 8;

    pub(super) fn new(mac: MacAddr, frag: usize) -> Self {
        let frag = frag as u32;
        Peer {
            mac,
            in_active: false,
            in_armed: false,
            conn: Conn {
                state: PeerState::Idle,
                remote_session: 0,
                local: 0,
                remote: 0,
                frag,
                remote_window: 1,
                connect_sent: 0,
                connect_tries: 0,
                retire_queued: false,
                connect_ack_owed: false,
                last_rx: 0,
            },
            stream: Stream::default(),
            credit: Credit::default(),
            msgs: Msgs {
                next_msg_id: 1,
                waiting: Lazy::default(),
                sends: Lazy::default(),
                pulls: Lazy::default(),
                pull_inflight: 0,
                in_eager: None,
            },
        }
    }

    /// Whether anything of this peer is timed: a connect in progress, frames to send or
    /// unacknowledged, an ack owed, operations waiting on it.
    #[inline]
    pub(super) fn timed(&self) -> bool {
        let s = &self.stream;
        match self.conn.state {
            PeerState::Idle => false,
            PeerState::Connecting => true,
            PeerState::Connected => {
                s.ack_now
                    || s.ack_due.is_some()
                    || self.conn.connect_ack_owed
                    || s.has_tx()
                    || !s.unacked.is_empty()
                    || !s.reorder.is_empty()
                    || !self.msgs.waiting.is_empty()
                    || self.waiting_on_peer()
            }
        }
    }

    /// Connected, with nothing timed and no collection allocated: nothing queued, in flight,
    /// held or waited on, no ack owed. Ten fields looked at, where `timed` and
    /// `holds_collections` look at more (through each collection): the transmit pass asks
    /// this of every peer it visits, and with many peers nearly every visit is a quiet
    /// peer's (its one ack sent).
    #[inline]
    pub(super) fn quiet(&self) -> bool {
        let s = &self.stream;
        self.conn.state == PeerState::Connected
            && !s.ack_now
            && s.ack_due.is_none()
            && !s.probe
            && !s.probe_reply
            && !self.conn.connect_ack_owed
            && self.msgs.in_eager.is_none()
            && !self.holds_collections()
    }

    /// Timed only because operations wait on it (a synchronous or rendezvous send waiting
    /// for its match, a pull, an eager message half arrived), with nothing in flight or due:
    /// its only timers are the keepalive and the deadline, seconds away, so it waits in the
    /// engine's keepalive queue instead of being visited by every timer pass.
    #[inline]
    pub(super) fn only_waits(&self) -> bool {
        let s = &self.stream;
        self.conn.state == PeerState::Connected
            && !s.ack_now
            && s.ack_due.is_none()
            && !self.conn.connect_ack_owed
            && !s.has_tx()
            && s.unacked.is_empty()
            && s.reorder.is_empty()
            && self.msgs.waiting.is_empty()
            && self.waiting_on_peer()
    }

    /// An idle peer gives back its empty collections (a peer that carried one large message
    /// held ~400 KiB of descriptors ever after); they are allocated again on use. Only empty
    /// ones: a peer with no session is never timed, so it counts as idle with frames still
    /// queued, and dropping those would leave the stream's count of queued control frames
    /// past its queue.
    pub(super) fn shrink(&mut self) {
        macro_rules! release_empty {
            ($($c:expr),*) => {$(
                if $c.is_empty() {
                    $c.release();
                }
            )*};
        }
        let s = &mut self.stream;
        release_empty!(s.pending, s.ctl_bulk, s.unacked, s.resend, s.reorder);
        let m = &mut self.msgs;
        release_empty!(m.waiting, m.sends, m.pulls);
    }

    /// Whether any of its collections is allocated (`shrink` has something to give back):
    /// eight pointers looked at, on every transmit pass of a peer that has gone quiet.
    #[inline]
    pub(super) fn holds_collections(&self) -> bool {
        let s = &self.stream;
        let m = &self.msgs;
        s.pending.allocated()
            || s.ctl_bulk.allocated()
            || s.unacked.allocated()
            || s.resend.allocated()
            || s.reorder.allocated()
            || m.waiting.allocated()
            || m.sends.allocated()
            || m.pulls.allocated()
    }

    /// Bytes this peer holds: the struct and its collections (by capacity).
    pub(super) fn bytes(&self) -> usize {
        let s = &self.stream;
        let m = &self.msgs;
        size_of::<Self>()
            + s.pending.bytes()
            + s.ctl_bulk.bytes()
            + s.unacked.bytes()
            + s.resend.bytes()
            + s.reorder.bytes()
            + m.waiting.bytes()
            + m.sends.bytes()
            + m.pulls.bytes()
    }

    /// The standard eager sends whose frames are queued or unacknowledged (each once per
    /// frame; the caller dedups).
    pub(super) fn eager_sends(&self) -> impl Iterator<Item = ReqId> + '_ {
        let s = &self.stream;
        s.pending
            .iter()
            .chain(s.unacked.iter())
            .filter(|d| matches!(d.kind, Kind::Eager | Kind::Small))
            .filter_map(|d| d.req)
    }

    /// Operations wait on the peer: sends, pulls, or an eager message half arrived.
    pub(super) fn waiting_on_peer(&self) -> bool {
        !self.msgs.sends.is_empty() || !self.msgs.pulls.is_empty() || self.msgs.in_eager.is_some()
    }
}

#[cfg(test)]
mod tests {
    /// An idle peer's whole state is this struct (its collections are unallocated) plus 8
    /// bytes of index: the 256-byte budget per idle peer of issue 12.
    #[test]
    fn an_idle_peer_fits_the_budget() {
        assert!(size_of::<super::Peer<Vec<u8>>>() <= 248);
        let p: super::Peer<Vec<u8>> =
            super::Peer::new(crate::wire::MacAddr([2, 0, 0, 0, 0, 1]), 1400);
        assert_eq!(p.bytes(), size_of::<super::Peer<Vec<u8>>>());
        assert!(!p.holds_collections());
    }

    /// 64-byte lines that fields at `(offset, bytes)` of a peer span, averaged over the eight
    /// offsets in a line that a 248-byte table entry starts at.
    fn lines(fields: &[(usize, usize)]) -> f64 {
        let mut n = 0;
        for base in (0..64).step_by(8) {
            let mut l: Vec<usize> = fields
                .iter()
                .flat_map(|&(o, b)| (base + o) / 64..=(base + o + b - 1) / 64)
                .collect();
            l.sort_unstable();
            l.dedup();
            n += l.len();
        }
        n as f64 / 8.0
    }

    /// The fields the receive path of a small message reads and writes (fast.rs, `on_small`)
    /// span about 3 lines of a peer, and those of a delayed ack's visit (mod.rs,
    /// `delayed_acks_due`; tx.rs, `quick_ack`) about 4: `Peer`'s layout, which a field added
    /// or moved can undo.
    #[test]
    fn the_hot_fields_lie_together() {
        use std::mem::offset_of as at;
        type P = super::Peer<Vec<u8>>;
        let both = [
            (at!(P, mac), 6),
            (at!(P, in_active), 1),
            (at!(P, conn.state), 1),
            (at!(P, conn.local), 4),
            (at!(P, conn.remote), 4),
            (at!(P, credit.released), 4),
            (at!(P, stream.rcv_next), 4),
            (at!(P, stream.unacked), 8),
            (at!(P, stream.reorder), 8),
            (at!(P, stream.ack_due), 16),
            (at!(P, stream.ack_now), 1),
            (at!(P, stream.ack_queued), 1),
            // `Option<InEager>`'s niche, `EagerTarget`'s tag: its first byte
            (at!(P, msgs.in_eager), 1),
        ];
        let rx = [
            (at!(P, conn.last_rx), 8),
            (at!(P, credit.released_seen), 4),
            (at!(P, credit.last_eager_rx), 8),
        ];
        let ack = [
            (at!(P, in_armed), 1),
            (at!(P, conn.connect_ack_owed), 1),
            (at!(P, conn.retire_queued), 1),
            (at!(P, stream.probe), 1),
            (at!(P, stream.probe_reply), 1),
            (at!(P, stream.pending), 8),
            (at!(P, stream.ctl_bulk), 8),
            (at!(P, stream.resend), 8),
            (at!(P, msgs.waiting), 8),
            (at!(P, msgs.sends), 8),
            (at!(P, msgs.pulls), 8),
        ];
        let rx_all = [&both[..], &rx[..]].concat();
        let ack_all = [&both[..], &ack[..]].concat();
        // ... and within what the read-aheads ask for
        let within = |f: &[(usize, usize)], r: std::ops::Range<usize>| {
            f.iter().all(|&(o, b)| r.start <= o && o + b <= r.end)
        };
        assert!(within(&rx_all, P::RX_HOT), "{:?}", P::RX_HOT);
        assert!(within(&ack_all, P::ACK_HOT), "{:?}", P::ACK_HOT);
        let rx_lines = lines(&rx_all);
        let ack_lines = lines(&ack_all);
        assert!(rx_lines <= 3.0, "receive path: {rx_lines} lines");
        assert!(ack_lines <= 4.125, "delayed ack: {ack_lines} lines");
        assert_eq!(size_of::<Option<super::InEager>>(), 32);
    }
}
