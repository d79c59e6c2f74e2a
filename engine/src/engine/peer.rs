//! One peer: a remote NODE (its agent), shared by every local and remote endpoint that talk
//! to each other over it, in the parts each layer owns: the connection ([`Conn`], conn.rs), the
//! reliable stream ([`Stream`], stream.rs), eager credit ([`Credit`], credit.rs) and the
//! messages in flight ([`Msgs`], proto/). Open-MX keeps a session per partner node and EMP a
//! MAC and two sequence numbers per remote host: reliability, sessions and credit scale with the
//! nodes, not with the ranks (1,000 nodes x 64 ranks are 1,000 peers here, not 64,000). What
//! MPI matching needs of a rank pair — the endpoints and the sender's rank — rides in every
//! message's header, and message ids are per node, so nothing is kept per pair of ranks.

use super::lazy::{Empty, Lazy, give_back};
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
    // hot: read by the receive path and a delayed ack's visit
    /// When the peer was last heard from; while connecting, when the connect began (its
    /// deadline runs from there).
    pub(super) last_rx: u64,
    /// This connection's ids, this side's and the peer's: each a mix of the node's session
    /// and the sequence number its stream starts at (random per connection). Every frame but
    /// the handshake carries them, so that nothing of an earlier connection between the
    /// same two incarnations (one was retired) passes for this one: not its frames, nor its
    /// acks.
    pub(super) local: u32,
    pub(super) remote: u32,
    /// The peer's slot of this node + 1, from its Connect or ConnectAck (0: not known yet):
    /// every frame to it carries it (`Repr::slot`), so that it finds this node's state
    /// without a lookup by address.
    pub(super) remote_slot: u32,
    pub(super) state: PeerState,
    pub(super) connect_ack_owed: bool,
    /// In the engine's retirement queue (one entry per peer at most).
    pub(super) retire_queued: bool,
    // cold
    pub(super) connect_tries: u8,
    /// The peer node's session (its incarnation: new with every engine).
    pub(super) remote_session: u32,
    /// Payload bytes per frame to this peer (at most 65,535: 16 bits keep the peer in its
    /// three lines with `remote_slot`).
    pub(super) frag: u16,
    /// The peer's reorder window in frames (at most 65,535, as `frag`).
    pub(super) remote_window: u16,
    pub(super) connect_sent: u64,
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
    /// Operations in progress with the peer, by message id, and those waiting for the
    /// connection.
    pub(super) q: Lazy<MsgQueues>,
    /// The eager message arriving now (its fragments come in order).
    pub(super) in_eager: Option<InEager>,
    pub(super) next_msg_id: u32,
    /// Bytes asked of the peer by Pull and not arrived yet, over all its messages: bounded
    /// by the frame window the peer may have in flight to us (more only queues at the
    /// sender, and spreads its reads and our writes over every message at once).
    pub(super) pull_inflight: u32,
}

/// The collections of [`Msgs`], allocated together (as the stream's: stream.rs, `Queues`).
#[derive(Debug, Default)]
pub(super) struct MsgQueues {
    /// Rendezvous receives pulling from the peer.
    pub(super) pulls: HashMap<u32, ReqId>,
    /// Synchronous and rendezvous sends, until they complete: the receiver names them by
    /// message id (Matched, Pull, Fin). A standard eager send is not here (no hash on the
    /// small-message path): its frames' descriptors in the stream name it.
    pub(super) sends: HashMap<u32, ReqId>,
    /// Messages waiting for the connection, in order.
    pub(super) waiting: VecDeque<ReqId>,
}

impl MsgQueues {
    /// Drops the buffers of the empty collections (the others are in use).
    fn give_back_empty(&mut self) {
        give_back(&mut self.pulls);
        give_back(&mut self.sends);
        give_back(&mut self.waiting);
    }
}

impl Empty for MsgQueues {
    const EMPTY: &'static Self = &MsgQueues {
        pulls: HashMap::with_hasher(std::hash::BuildHasherDefault::new()),
        sends: HashMap::with_hasher(std::hash::BuildHasherDefault::new()),
        waiting: VecDeque::new(),
    };
    fn heap_bytes(&self) -> usize {
        self.pulls.heap_bytes() + self.sends.heap_bytes() + self.waiting.heap_bytes()
    }
    fn is_clear(&self) -> bool {
        self.pulls.is_empty() && self.sends.is_empty() && self.waiting.is_empty()
    }
}

/// Laid out by hand (`repr(C)`, here and in each part), in three 64-byte lines (`align(64)`:
/// every entry of the peer table starts a line). With thousands of peers, each sending now
/// and then, a peer is out of the caches when its message arrives, and again when its delayed
/// ack falls due; each line either visit reads is a miss. Both read the first line (the
/// connection, the address, the message queues' pointer and the eager message's tag) and the
/// last (the stream's receive side and acks, the credit), never the middle one (the cold
/// parts of the messages and the stream): two lines each, where the 248-byte entries of
/// before, at any 8-byte offset of a line, cost the receive path 3 and the ack visit 4.1.
/// The collections behind two pointers (stream.rs, `Queues`; [`MsgQueues`]) and the ack's
/// due time in 8 bytes (`Due`) are what make it fit. `layout` below checks the lines.
#[derive(Debug)]
#[repr(C, align(64))]
pub(super) struct Peer<F> {
    pub(super) conn: Conn,
    /// In the engine's `armed` list: the timers visit it.
    pub(super) in_armed: bool,
    pub(super) mac: MacAddr,
    /// In the engine's `active` list (so marking is O(1)).
    pub(super) in_active: bool,
    pub(super) msgs: Msgs,
    pub(super) stream: Stream<F>,
    pub(super) credit: Credit,
}

impl<F: 'static> Peer<F> {
    /// The lines the receive path of a small message (fast.rs, `on_small`) and the visit of
    /// a delayed ack (mod.rs, `delayed_acks_due`; tx.rs, `quick_ack`) read and write: the
    /// first and the last (see [`Peer`]).
    pub(super) const HOT: [std::ops::Range<usize>; 2] = [0..64, 128..192];

    /// Asks the processor for the peer's [`Peer::HOT`] lines, without waiting for them: the
    /// read-aheads of a receive burst (rx.rs, `receive_warm`) and of the acks falling due
    /// (mod.rs, `warm_due_acks`).
    #[inline(always)]
    pub(super) fn warm(&self) {
        for r in Self::HOT {
            tigon_shm::mem::prefetch_bytes(self, r);
        }
    }

    pub(super) fn new(mac: MacAddr, frag: usize) -> Self {
        let frag = frag.min(u16::MAX as usize) as u16;
        Peer {
            mac,
            in_active: false,
            in_armed: false,
            conn: Conn {
                state: PeerState::Idle,
                remote_session: 0,
                local: 0,
                remote: 0,
                remote_slot: 0,
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
                q: Lazy::default(),
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
                    || !s.q.unacked.is_empty()
                    || !s.q.reorder.is_empty()
                    || !self.msgs.q.waiting.is_empty()
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
            && s.q.unacked.is_empty()
            && s.q.reorder.is_empty()
            && self.msgs.q.waiting.is_empty()
            && self.waiting_on_peer()
    }

    /// An idle peer gives back its empty collections (a peer that carried one large message
    /// held ~400 KiB of descriptors ever after); they are allocated again on use. Only empty
    /// ones: a peer with no session is never timed, so it counts as idle with frames still
    /// queued, and dropping those would leave the stream's count of queued control frames
    /// past its queue.
    pub(super) fn shrink(&mut self) {
        if let Some(q) = self.stream.q.get_mut() {
            q.give_back_empty();
        }
        self.stream.q.release_if_clear();
        if let Some(q) = self.msgs.q.get_mut() {
            q.give_back_empty();
        }
        self.msgs.q.release_if_clear();
    }

    /// Whether any of its collections is allocated (`shrink` has something to give back):
    /// two pointers looked at, on every transmit pass of a peer that has gone quiet.
    #[inline]
    pub(super) fn holds_collections(&self) -> bool {
        self.stream.q.allocated() || self.msgs.q.allocated()
    }

    /// Bytes this peer holds: the struct and its collections (by capacity).
    pub(super) fn bytes(&self) -> usize {
        size_of::<Self>() + self.stream.q.bytes() + self.msgs.q.bytes()
    }

    /// The standard eager sends whose frames are queued or unacknowledged (each once per
    /// frame; the caller dedups).
    pub(super) fn eager_sends(&self) -> impl Iterator<Item = ReqId> + '_ {
        let s = &self.stream;
        s.q.pending
            .iter()
            .chain(s.q.unacked.iter())
            .filter(|d| matches!(d.kind, Kind::Eager | Kind::Small))
            .filter_map(|d| d.req)
    }

    /// Operations wait on the peer: sends, pulls, or an eager message half arrived.
    pub(super) fn waiting_on_peer(&self) -> bool {
        !self.msgs.q.sends.is_empty()
            || !self.msgs.q.pulls.is_empty()
            || self.msgs.in_eager.is_some()
    }
}

#[cfg(test)]
mod tests {
    /// An idle peer's whole state is this struct (its collections are unallocated) plus 8
    /// bytes of index: within the 256-byte budget per idle peer of issue 12, in three lines.
    #[test]
    fn an_idle_peer_fits_the_budget() {
        assert_eq!(size_of::<super::Peer<Vec<u8>>>(), 192);
        assert_eq!(align_of::<super::Peer<Vec<u8>>>(), 64);
        let p: super::Peer<Vec<u8>> =
            super::Peer::new(crate::wire::MacAddr([2, 0, 0, 0, 0, 1]), 1400);
        assert_eq!(p.bytes(), size_of::<super::Peer<Vec<u8>>>());
        assert!(!p.holds_collections());
    }

    /// The fields the receive path of a small message reads and writes (fast.rs, `on_small`)
    /// and those of a delayed ack's visit (mod.rs, `delayed_acks_due`; tx.rs, `quick_ack`)
    /// lie in the peer's [`Peer::HOT`](super::Peer::HOT) lines, two of its three: `Peer`'s
    /// layout, which a field added or moved can undo.
    #[test]
    fn the_hot_fields_lie_in_two_lines() {
        use std::mem::offset_of as at;
        type P = super::Peer<Vec<u8>>;
        let both = [
            (at!(P, mac), 6),
            (at!(P, in_active), 1),
            (at!(P, conn.state), 1),
            (at!(P, conn.local), 4),
            (at!(P, conn.remote), 4),
            // the hint every frame to the peer carries (the ack visit's frame, too)
            (at!(P, conn.remote_slot), 4),
            (at!(P, credit.released), 4),
            (at!(P, stream.rcv_next), 4),
            (at!(P, stream.q), 8),
            (at!(P, stream.ack_due), 8),
            (at!(P, stream.ack_now), 1),
            (at!(P, stream.ack_queued), 1),
            (at!(P, stream.hold_long), 1),
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
            (at!(P, msgs.q), 8),
        ];
        let hot = P::HOT;
        for (o, b) in [&both[..], &rx[..], &ack[..]].concat() {
            assert!(
                hot.iter().any(|r| r.start <= o && o + b <= r.end),
                "a hot field at {o}..{} lies outside {hot:?}",
                o + b
            );
        }
        assert!(hot.iter().all(|r| r.start % 64 == 0 && r.len() == 64));
        assert_eq!(size_of::<Option<super::InEager>>(), 32);
    }
}
