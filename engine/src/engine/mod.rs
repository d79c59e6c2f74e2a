//! The engine: one state machine for a node, no I/O of its own. [`Engine::poll`] drives it
//! over a [`Link`] (frames in and out) and a [`CopyEngine`] (message bytes).
//!
//! The rooms, from the bottom up: state with no knowledge of the engine —
//! `types` (the public types), `request` (the request slab), `endpoint`, `unexpected`
//! (the store of early messages), `stream` (the reliable in-order stream to a peer) and
//! `peer` (a peer in the parts each layer owns) — then this file (the [`Engine`] struct,
//! its accessors and the poll loop), then the engine's behaviour by concern, each an
//! `impl Engine` block that reads and changes its own part: `api` (the MPI-shaped calls),
//! `conn` (handshake, sessions, the peer table, resets), `credit`, `proto` (the eager
//! and rendezvous message state machines), `copyq` (the copy FIFO), `rx` (demux and
//! dispatch), `fast` (the small-message fast path: a send queued as its frame, a received
//! frame matched and completed in one pass, a send completed by its ack), `tx` (building and
//! sending frames) and `timers`.

mod api;
mod conn;
mod copyq;
mod credit;
mod endpoint;
mod fast;
mod index;
mod lazy;
mod peer;
mod proto;
mod pulled;
mod request;
mod rx;
mod stream;
mod timers;
mod tx;
mod types;
mod unexpected;
mod verify;
mod version;

pub use types::{Completion, Error, MessageHandle, MsgInfo, Outcome, ReqId, SendMode};

use crate::config::Config;
use crate::copy::{CopyEngine, CopyError};
use crate::link::Link;
use crate::stats::Stats;
use crate::wire::{MacAddr, Repr};
use endpoint::Endpoints;
use peer::Peer;
use request::Requests;
use std::collections::VecDeque;

/// A random non-zero session (0 means "not known yet" on the wire).
fn new_session(rng: &mut rand::rngs::SmallRng) -> u32 {
    use rand::Rng;
    rng.gen_range(1..=u32::MAX)
}

/// Delayed acks between the read-ahead of a peer whose ack falls due and its visit
/// (`delayed_acks_due`).
const ACK_AHEAD: usize = 8;

/// The clock's unit in [`AckTimer`]: 1,024 ns.
const ACK_TICK_NS: u64 = 1 << 10;
/// The furthest ahead an [`AckTimer`] can fall due, in ticks: an ack is never held longer
/// than `wire::ACK_DELAY_LIMIT_NS`.
const ACK_AHEAD_MAX: u32 = crate::wire::ACK_DELAY_LIMIT_NS.div_ceil(ACK_TICK_NS) as u32 + 1;

/// An entry of the delayed-ack queue (`Engine::ack_timers`): the peer's slot and when its ack
/// falls due, in 32-bit ticks of [`ACK_TICK_NS`] (rounded down: the tick comes up to one
/// early, and the exact time, the peer's `ack_due`, decides), wrapping like sequence
/// numbers. Half the bytes of a `(usize, u64)`: the queue holds an entry for nearly every
/// peer that sent in the last ack delay.
#[derive(Debug, Clone, Copy)]
struct AckTimer {
    slot: u32,
    due: u32,
}

impl AckTimer {
    fn new(slot: usize, due_ns: u64) -> Self {
        // A slot past u32 would be a peer table of 4 billion entries (a terabyte of peers).
        debug_assert!(slot <= u32::MAX as usize);
        AckTimer {
            slot: slot as u32,
            due: (due_ns / ACK_TICK_NS) as u32,
        }
    }

    fn slot(self) -> usize {
        self.slot as usize
    }

    /// Whether its tick has come at `now` (`wait(now) == 0`, in fewer instructions: asked of
    /// every delayed ack).
    #[inline]
    fn come(self, now: u64) -> bool {
        let ahead = self.due.wrapping_sub((now / ACK_TICK_NS) as u32);
        ahead.wrapping_sub(1) >= ACK_AHEAD_MAX
    }

    /// Nanoseconds from `now` until its tick (0: come). A due time more than the longest
    /// ack delay ahead cannot have been queued: it is one that fell due so long ago (a loop
    /// stalled for half the 32-bit range, ~37 minutes) that the ticks wrapped, and it is due.
    #[inline]
    fn wait(self, now: u64) -> u64 {
        let ahead = self.due.wrapping_sub((now / ACK_TICK_NS) as u32);
        if ahead == 0 || ahead > ACK_AHEAD_MAX {
            0
        } else {
            (ahead as u64 * ACK_TICK_NS).saturating_sub(now % ACK_TICK_NS)
        }
    }
}

/// The protocol engine for one node: any number of local endpoints over one link.
pub struct Engine<L: Link, C: CopyEngine<L::Frame>> {
    cfg: Config,
    mac: MacAddr,
    /// `mac` as one integer ([`MacAddr::word`]): every received small frame's destination
    /// is compared with it.
    mac_word: u64,
    eps: Endpoints,
    /// This node's random session, new with every engine: a peer that sees it change knows
    /// this node restarted and its earlier operations are lost.
    session: u32,
    /// Remote nodes: one reliable session each, whatever the number of ranks on either side.
    peers: Vec<Peer<L::Frame>>,
    peer_index: index::PeerIndex,
    /// The peer last looked up by address (a send's or a received frame's): traffic comes in
    /// runs to and from one node, and a MAC compare is cheaper than hashing it each time.
    /// Checked against the table, so it never names a wrong peer.
    last_peer: usize,
    /// Peers with frames to send or acks owed.
    active: Vec<usize>,
    /// The list's other buffer: a transmit pass walks one while peers are marked in the
    /// other, and keeps both (no allocation per pass).
    active_spare: Vec<usize>,
    /// Peers marked by the receive path for the ack of a message from a quiet peer (fast.rs),
    /// marked active (`Peer::in_active`) but on this list instead: the transmit pass sends
    /// each one's ack with one look at the peer when that is all its visit would do (with
    /// many peers, each sending now and then, nearly always), and visits the others as it
    /// visits every active peer (tx.rs, `quick_acks`).
    quick_acks: Vec<usize>,
    /// Peers owing a delayed ack and nothing else to send, with when it falls due, off the
    /// active list meanwhile, in two queues: those held `max_ack_delay_ns` and those held
    /// the busy delay (`max_ack_delay_busy_ns`), each in due order (one delay for all in
    /// it): a peer that sends often keeps an ack owed nearly all the time, and on the list
    /// it would be visited by every transmit pass until then (16 hot peers: 16 visits a
    /// poll). Once its ack is due,
    /// or the link has gone quiet (`ack_idle_ns`), `poll` writes the ack (`delayed_acks_due`)
    /// or puts the peer back on the active list. 8 bytes an entry ([`AckTimer`]): with
    /// 65,536 peers each sending now and then, nearly every peer has one queued.
    ack_timers: [VecDeque<AckTimer>; 2],
    /// Acks are held up to the busy delay (to the peers told so): at least `ack_busy_peers`
    /// peers owed one at once, and not fewer than half as many since.
    ack_busy: bool,
    /// Peers with anything timed soon (a connect, frames unacknowledged, an ack due): every
    /// timer pass and the sleep budget visit these, never every peer.
    armed: Vec<usize>,
    /// Peers timed only because operations wait on them (`Peer::only_waits`), and when to
    /// look at them next (a keepalive period from when they were queued: in order).
    waits: VecDeque<(usize, u64)>,
    /// Peers that went idle, and when: their queues' buffers are given back once they have
    /// stayed idle for `credit_idle_ns` (a peer talked to again soon keeps them).
    went_idle: VecDeque<(usize, u64)>,
    /// Peers whose buffers were given back, and when: their sessions are retired once idle
    /// for `session_idle_ns` (timers.rs); their slots are reused (`free`).
    retire_check: VecDeque<(usize, u64)>,
    free: Vec<usize>,
    reqs: Requests,
    unex: unexpected::Store<L::Frame>,
    /// Bytes of the unexpected store granted to peers as eager credit.
    grants_total: u64,
    /// A peer asked for more eager credit than the store had left: reclaim from idle peers at
    /// the next timer pass.
    credit_pressure: bool,
    copy: C,
    /// Pulling receives with bytes not asked yet, oldest first, all peers: a peer's next
    /// block is asked for its oldest, so its messages arrive one after another (kept here,
    /// not per peer: few receives pull at a time, and an idle peer holds nothing for them).
    pull_wait: VecDeque<ReqId>,
    /// Copies in submission order: the receive they belong to, and whether finished.
    copy_fifo: VecDeque<(ReqId, bool)>,
    copy_done: Vec<Result<(), CopyError>>,
    completions: VecDeque<Completion>,
    /// Frames received and not handled yet: between polls, the last frames of a receive
    /// that left more in the link, their peers already read ahead (rx.rs, `receive_warm`).
    rx: Vec<L::Frame>,
    tx: Vec<L::TxBuf>,
    /// Payloads of frames in `tx` still to be read (rendezvous data, read for the whole burst
    /// at once just before it goes: see `tx.rs`).
    reads: Vec<tx::PendingRead>,
    resets: Vec<Repr>,
    /// Sends whose address named an earlier start of their node than the session's, held
    /// while the node is asked which start it is (verify.rs).
    verifying: Vec<verify::Held>,
    /// Eager sends whose acknowledged frames wait for the protocol's look once the stream is
    /// done with the ack (rx.rs, `on_new_ack`), once per frame, and whether the frame was
    /// counted off its send already (kept to reuse its buffer).
    acked: Vec<(ReqId, bool)>,
    rng: rand::rngs::SmallRng,
    last_timer_scan: u64,
    /// When idle peers were last asked for their credit (at most every `credit_idle_ns / 4`).
    last_reclaim: u64,
    /// When the request slab was last trimmed (see `Requests::trim`).
    last_trim: u64,
    /// Where the reclaim round under way goes on (0: none under way).
    reclaim_cursor: usize,
    /// Time of the latest poll.
    now: u64,
    /// Frames sent carry a checksum over their payload too (`Config::payload_checksum`,
    /// resolved against the link at each transmit pass).
    payload_ck: bool,
    /// Since when the polls have received nothing (`None` while frames arrive): acks owed
    /// go out once the link has been quiet for `Config::ack_idle_ns`.
    idle_since: Option<u64>,
    pub stats: Stats,
}

impl<L: Link, C: CopyEngine<L::Frame>> Engine<L, C> {
    /// An engine for a link with address `mac`, copying with `copy`.
    pub fn new(
        mut cfg: Config,
        mac: MacAddr,
        link_max_frame: usize,
        copy: C,
    ) -> Result<Self, String> {
        use rand::SeedableRng;
        cfg.max_frame = cfg.max_frame.min(link_max_frame);
        cfg.validate()?;
        // The busy hold is never the shorter one.
        cfg.max_ack_delay_busy_ns = cfg.max_ack_delay_busy_ns.max(cfg.max_ack_delay_ns);
        let mut rng = rand::rngs::SmallRng::from_entropy();
        Ok(Engine {
            cfg,
            mac,
            mac_word: mac.word(),
            session: new_session(&mut rng),
            eps: Endpoints::default(),
            peers: Vec::new(),
            peer_index: index::PeerIndex::default(),
            last_peer: 0,
            active: Vec::new(),
            active_spare: Vec::new(),
            quick_acks: Vec::new(),
            ack_timers: [VecDeque::new(), VecDeque::new()],
            ack_busy: false,
            armed: Vec::new(),
            waits: VecDeque::new(),
            went_idle: VecDeque::new(),
            retire_check: VecDeque::new(),
            free: Vec::new(),
            reqs: Requests::default(),
            unex: unexpected::Store::default(),
            grants_total: 0,
            credit_pressure: false,
            copy,
            pull_wait: VecDeque::new(),
            copy_fifo: VecDeque::new(),
            copy_done: Vec::new(),
            completions: VecDeque::new(),
            rx: Vec::new(),
            tx: Vec::new(),
            reads: Vec::new(),
            resets: Vec::new(),
            verifying: Vec::new(),
            acked: Vec::new(),
            rng,
            last_timer_scan: 0,
            last_reclaim: 0,
            last_trim: 0,
            reclaim_cursor: 0,
            now: 0,
            payload_ck: true,
            idle_since: None,
            stats: Stats::default(),
        })
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }
    pub fn copy_engine(&self) -> &C {
        &self.copy
    }
    pub fn copy_engine_mut(&mut self) -> &mut C {
        &mut self.copy
    }
    pub fn mac(&self) -> MacAddr {
        self.mac
    }

    /// The slot of peer node `mac`, if known.
    #[inline]
    fn peer_of(&self, mac: MacAddr) -> Option<usize> {
        let peers = &self.peers;
        self.peer_index.get(mac, |p| peers[p].mac)
    }

    /// This node's incarnation: its session, which peers see in the handshake and ranks
    /// publish with their addresses ([`crate::Dest`]).
    pub fn incarnation(&self) -> u32 {
        self.session
    }

    /// Sets this node's incarnation (before any traffic): the agent's is its start time
    /// ([`crate::addr::incarnation_of`]), so that peers can tell an address of a later start
    /// from a stale one; left alone, it is random (engines that publish no addresses).
    pub fn set_incarnation(&mut self, session: u32) {
        self.session = session.max(1);
    }

    /// Seeds the session generator (tests want reproducible runs); the node's session is
    /// drawn again from it. Call before any traffic.
    pub fn seed(&mut self, seed: u64) {
        use rand::SeedableRng;
        self.rng = rand::rngs::SmallRng::seed_from_u64(seed);
        self.session = new_session(&mut self.rng);
    }

    /// One non-blocking step: rx burst → demux → protocol → tx burst → timers → copy
    /// completions. Returns how much work it did (0: idle). `now` is a monotonic time in ns.
    pub fn poll(&mut self, link: &mut L, now: u64) -> usize {
        self.now = now;
        let held = self.ack_timers[0].len() + self.ack_timers[1].len();
        if held != 0 && self.peers.len() >= rx::WARM_PEERS {
            self.warm_due_acks(now);
        }
        self.update_ack_busy(held);
        // rx burst → demux → protocol (rx.rs, then conn.rs, credit.rs, proto/)
        let rx = self.receive(link, now);
        // Acks owed go out with traffic, every `ack_every` frames, or once the passes have
        // found nothing to receive for `ack_idle_ns`: a busy loop acknowledges by the burst,
        // not by a timer, and a request answered at once (a ping-pong's reply) carries the
        // ack instead of a frame of its own.
        if rx.frames == 0 {
            self.idle_since.get_or_insert(now);
        } else {
            self.idle_since = None;
        }
        let acks = if held == 0 {
            0
        } else {
            self.delayed_acks_due(link, now)
        };
        // tx burst (tx.rs; the stream picks the frames)
        let sent = self.transmit(link, now);
        // timers (timers.rs), once the receive queue is drained: with frames still waiting
        // (acks among them, after a stall of this thread) they would resend what has been
        // acknowledged already
        if rx.drained {
            self.timers(now);
        }
        // copy completions (copyq.rs)
        let copied = self.copy_completions();
        rx.frames + acks + sent + copied
    }

    /// When the acks owed are sent because the link went quiet (`Config::ack_idle_ns`), if
    /// it is quiet now.
    #[inline]
    fn idle_ack_at(&self) -> Option<u64> {
        self.idle_since
            .map(|t| t.saturating_add(self.cfg.ack_idle_ns))
    }

    /// Whether acks are held up to the busy delay: `held` peers owe a delayed ack now. On at
    /// `ack_busy_peers` of them, off below half as many (not back and forth around one
    /// count).
    #[inline]
    fn update_ack_busy(&mut self, held: usize) {
        let n = self.cfg.ack_busy_peers;
        if held >= n {
            self.stats.ack_busy_spells += !self.ack_busy as u64;
            self.ack_busy = true;
        } else if held < n / 2 {
            self.ack_busy = false;
        }
    }

    /// The longest the ack of a frame just received may be held, by what the peer was told
    /// (`Stream::hold_long`): the busy delay only once both the engine is busy and its last
    /// standalone ack to the peer said so.
    #[inline]
    fn ack_hold_ns(&self, told_long: bool) -> u64 {
        if told_long && self.ack_busy {
            self.cfg.max_ack_delay_busy_ns
        } else {
            self.cfg.max_ack_delay_ns
        }
    }

    /// What a standalone ack announces (µs, wire version 8): the longest this node holds an
    /// ack from now on; with `Stream::hold_long` set to match by the caller.
    #[inline]
    fn ack_hold_announced_us(&self) -> u32 {
        let ns = if self.ack_busy {
            self.cfg.max_ack_delay_busy_ns
        } else {
            self.cfg.max_ack_delay_ns
        };
        (ns / 1_000) as u32
    }

    /// Peer `p` owes a delayed ack and, for now, nothing else: queued to be visited once the
    /// ack is due (`ack_timers`), not on the active list until then.
    #[inline]
    fn delay_ack(&mut self, p: usize) {
        let s = &mut self.peers[p].stream;
        if let Some(due) = s.ack_due.get()
            && !s.ack_queued
        {
            s.ack_queued = true;
            let q = self.ack_queue_of(due);
            self.ack_timers[q].push_back(AckTimer::new(p, due));
        }
    }

    /// The delayed-ack queue for an ack due at `due`: the busy delay's if further away than
    /// the other delay reaches (each queue stays in due order).
    #[inline]
    fn ack_queue_of(&self, due: u64) -> usize {
        (due > self.now.saturating_add(self.cfg.max_ack_delay_ns)) as usize
    }

    /// Asks the processor for the first [`ACK_AHEAD`] peers whose delayed acks are due now
    /// (the first `delayed_acks_due` will take after this poll's receive burst), without
    /// waiting for them; each visit there asks for the peer `ACK_AHEAD` entries on. With
    /// many peers an ack falls due `max_ack_delay_ns` after its peer was last touched, long
    /// gone from the caches (65,536 peers: 12 MB of state); visited one after another, each
    /// would stall the loop on its misses (the largest single cost of the 65,536-peer rate,
    /// seen by perf). Asked for before the receive burst, their misses overlap with each
    /// other and with the burst's work. Not all of two bursts' worth at once (up to 64
    /// peers, 128 lines): the processor cannot keep that many requests, nor those of the
    /// receive burst's read-ahead behind them (rx.rs, `receive_warm`).
    #[inline(never)]
    fn warm_due_acks(&self, now: u64) {
        for q in &self.ack_timers {
            for &t in q.iter().take(ACK_AHEAD) {
                if !t.come(now) {
                    break;
                }
                if let Some(peer) = self.peers.get(t.slot()) {
                    peer.warm();
                }
            }
        }
    }

    /// The delayed acks due now (or all of them, once the link has gone quiet). Each is
    /// written here, into this poll's burst, when that is all its peer's visit would do
    /// (tx.rs, `quick_ack`: with many peers, each sending now and then, nearly always): no
    /// second look at the peer in a list of its own; any other peer goes on the active list
    /// for the transmit pass. A peer whose ack went out meanwhile (with a frame, or alone)
    /// owes none; one owing a later ack by now (the earlier went out, and a frame came
    /// since) is queued again for that one. At most what one transmit pass sends (two
    /// bursts) is taken per poll: with thousands of acks held when the loop runs idle, the
    /// active list would otherwise hold them all, and each pass would walk all of it to
    /// send two bursts' worth (quadratic in the acks held); the rest stay queued, in order,
    /// for the next polls.
    /// Returns the acks written.
    fn delayed_acks_due(&mut self, link: &mut L, now: u64) -> usize {
        let quiet = self.idle_ack_at().is_some_and(|t| now >= t);
        let mut written = 0;
        let budget = self.cfg.burst * 2;
        let mut room = budget;
        // As the transmit pass sets it (the link's, unless configured).
        self.payload_ck = self.cfg.payload_checksum.unwrap_or(!link.frame_check());
        for q in 0..self.ack_timers.len() {
            while let Some(&t) = self.ack_timers[q].front() {
                if (!quiet && !t.come(now)) || room == 0 {
                    break;
                }
                self.ack_timers[q].pop_front();
                // The peer `ACK_AHEAD` entries on, read ahead while this one is visited (the
                // first ones were asked for at the start of the poll: `warm_due_acks`).
                if self.peers.len() >= rx::WARM_PEERS
                    && let Some(&u) = self.ack_timers[q].get(ACK_AHEAD - 1)
                    && u.come(now)
                    && let Some(peer) = self.peers.get(u.slot())
                {
                    peer.warm();
                }
                let p = t.slot();
                let s = &mut self.peers[p].stream;
                s.ack_queued = false;
                match s.ack_due.get() {
                    Some(d) if d > now && !quiet => {
                        s.ack_queued = true;
                        if AckTimer::new(p, d).due == t.due {
                            // This ack, its tick come but not its time (under a tick away):
                            // it stays first.
                            self.ack_timers[q].push_front(t);
                            break;
                        }
                        // A later ack owed (the one queued went out, and a frame came since).
                        let later = self.ack_queue_of(d);
                        self.ack_timers[later].push_back(AckTimer::new(p, d));
                    }
                    Some(_) => {
                        s.ack_now = true;
                        room -= 1;
                        if self.peers[p].in_active {
                            // Its visit in this poll's transmit pass sends it.
                            continue;
                        }
                        if self.quick_ack(link, p, budget) {
                            written += 1;
                            self.went_quiet(p, now);
                        } else {
                            self.peers[p].in_active = true;
                            self.active.push(p);
                        }
                    }
                    None => {}
                }
            }
        }
        written
    }

    /// Retires a request and queues its completion.
    fn finish(&mut self, id: ReqId, result: Result<Outcome, Error>) {
        let Some(req) = self.reqs.retire(id) else {
            return;
        };
        if let Some((peer, msg_id, buf, by_id)) = req.send {
            if by_id && let Some(p) = self.peers.get_mut(peer) {
                p.msgs.q.sends.remove(&msg_id);
            }
            self.copy.release(&buf);
            self.stats.sends_completed += 1;
        } else {
            self.stats.recvs_completed += 1;
        }
        if result.is_err() {
            self.stats.ops_failed += 1;
        }
        self.completions.push_back(Completion {
            req: id,
            ep: req.ep,
            result,
        });
    }

    /// The next finished operation, in completion order.
    pub fn pop_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    /// Whether `id` is still pending.
    pub fn is_pending(&self, id: ReqId) -> bool {
        self.reqs.get(id).is_some()
    }

    /// Operations still in flight (sends, receives) — for idle decisions and tests.
    pub fn pending_ops(&self) -> usize {
        self.reqs.live()
    }

    /// Bytes of the unexpected store granted to peers as eager credit right now.
    pub fn credit_granted_bytes(&self) -> u64 {
        self.grants_total
    }

    /// Whether acks are held up to the busy delay now (to the peers told so): at least
    /// `Config::ack_busy_peers` peers owed one at once.
    pub fn ack_busy(&self) -> bool {
        self.ack_busy
    }

    /// Peers every timer pass visits now (those with anything in flight): idle peers, and
    /// peers that operations only wait on, cost no work per pass.
    pub fn armed_peers(&self) -> usize {
        self.armed.len()
    }

    /// Whether no peer has a frame or an ack waiting to go out: none on the active list, none
    /// in the delayed-ack queue (acks held go out when due, or once the loop has run idle for
    /// `Config::ack_idle_ns`, at most two bursts a poll). Frames unacknowledged are not
    /// counted.
    pub fn nothing_to_send(&self) -> bool {
        self.active.is_empty()
            && self.quick_acks.is_empty()
            && self.ack_timers.iter().all(VecDeque::is_empty)
    }

    /// Peers in the keepalive queue: operations wait on them, nothing else is timed; each
    /// is looked at once per keepalive period (`peer_timeout_ns / 16`).
    pub fn waiting_peers(&self) -> usize {
        self.waits.len()
    }

    /// Peers known, and the bytes of engine memory they hold: each peer's state and queue
    /// buffers (by capacity) and its entry in the peer table.
    pub fn peer_memory(&self) -> (usize, usize) {
        let index = self.peer_index.bytes();
        let peers = self.peers.iter().map(Peer::bytes).sum::<usize>()
            + (self.peers.capacity() - self.peers.len()) * std::mem::size_of::<Peer<L::Frame>>();
        (self.peers.len(), peers + index)
    }

    /// Bytes held by unexpected messages right now.
    pub fn unexpected_bytes(&self) -> u64 {
        self.unex.bytes()
    }

    /// Unexpected messages held as the frame they came in right now (each keeps a buffer of
    /// the link's receive pool; at most `Config::unexpected_frames`).
    pub fn unexpected_frames(&self) -> usize {
        self.unex.frames()
    }
}

#[cfg(test)]
mod tests {
    use super::{ACK_TICK_NS, AckTimer};

    /// A queued ack's tick comes at its time or up to a tick before (the exact time, the
    /// peer's, decides), also where the 32-bit ticks wrap; one whose time passed so long ago
    /// that they wrapped past it has come, not 37 minutes away.
    #[test]
    fn an_ack_timer_comes_at_its_time_or_a_tick_before() {
        for base in [0, 5_000_000_123, (1u64 << 42) - 3_000_000, 1u64 << 50] {
            let due = base + 5_000_000;
            let t = AckTimer::new(7, due);
            assert_eq!(t.slot(), 7);
            let tick = due / ACK_TICK_NS * ACK_TICK_NS;
            assert_eq!(t.wait(base), tick - base);
            assert!(t.wait(base) <= due - base && t.wait(base) + ACK_TICK_NS > due - base);
            assert!(
                t.wait(tick - 1) == 1 && t.wait(tick) == 0 && t.wait(due) == 0,
                "{base}"
            );
            assert_eq!(t.wait(due + 10_000_000), 0);
            for at in [
                base,
                tick - 1,
                tick,
                due,
                due + 10_000_000,
                tick + (1u64 << 31) * 1024,
            ] {
                assert_eq!(t.come(at), t.wait(at) == 0, "{base} {at}");
            }
            // half the tick range later: the ticks read as if it were ahead, and it has come
            assert_eq!(t.wait(tick + (1u64 << 31) * ACK_TICK_NS), 0);
            assert_eq!(t.wait(tick + (3u64 << 30) * ACK_TICK_NS), 0);
        }
    }
}
