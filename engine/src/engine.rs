//! The engine: endpoints, peers, the reliable stream per peer, the message state machines, and
//! the poll loop that drives them over a [`Link`].

use crate::addr::EndpointAddr;
use crate::config::Config;
use crate::copy::{BufRef, CopyEngine};
use crate::fasthash::FastMap as HashMap;
use crate::link::Link;
use crate::matching::MatchSpec;
use crate::stats::Stats;
use crate::wire::{self, AckRepr, ConnectRepr, Frame, Kind, MacAddr, Repr};
use std::collections::{BTreeMap, VecDeque};

/// Why an operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The peer did not acknowledge within the configured deadline.
    PeerUnreachable(EndpointAddr),
    /// The peer restarted (new session): operations with its old incarnation are void.
    PeerRestarted(EndpointAddr),
    /// A message buffer could not be read or written.
    Copy(String),
    /// The receive was cancelled before it matched.
    Cancelled,
    /// The endpoint was closed with the operation pending.
    EndpointClosed,
    /// No such endpoint, request or message handle.
    Invalid(&'static str),
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
        match self {
            Error::PeerUnreachable(a) => write!(
                f,
                "peer {a} unreachable (no acknowledgement within the deadline)"
            ),
            Error::PeerRestarted(a) => {
                write!(f, "peer {a} restarted; its earlier operations are lost")
            }
            Error::Copy(s) => write!(f, "{s}"),
            Error::Cancelled => f.write_str("cancelled"),
            Error::EndpointClosed => f.write_str("endpoint closed"),
            Error::Invalid(s) => write!(f, "invalid {s}"),
        }
    }
}

impl std::error::Error for Error {}

/// Identifies a pending operation; stale ids are detected by a generation count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReqId(u64);

impl ReqId {
    fn new(index: usize, generation: u32) -> Self {
        ReqId(((generation as u64) << 32) | index as u64)
    }
    fn index(self) -> usize {
        (self.0 & 0xffff_ffff) as usize
    }
    fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
    pub fn as_u64(self) -> u64 {
        self.0
    }
}

/// A message taken off the unexpected queue by [`Engine::improbe`], to be received with [`Engine::imrecv`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MessageHandle(u64);

impl MessageHandle {
    pub fn as_u64(self) -> u64 {
        self.0
    }
    /// A handle from its number (as it crossed a channel); unknown numbers are refused by
    /// [`Engine::imrecv`].
    pub fn from_u64(v: u64) -> Self {
        MessageHandle(v)
    }
}

/// MPI send modes that change the protocol. Ready and buffered sends are standard sends here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendMode {
    Standard,
    /// Completes only once the receiver has matched the message.
    Synchronous,
}

/// What a probe or a finished receive reports about a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsgInfo {
    pub source: EndpointAddr,
    pub src_rank: u32,
    pub match_bits: u64,
    /// The message's length as sent.
    pub len: u64,
}

/// The result of a finished operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Sent,
    /// `received` bytes landed; `truncated` when the message was longer than the buffer.
    Received {
        info: MsgInfo,
        received: u64,
        truncated: bool,
    },
}

/// A finished operation, in the order the engine finished them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub req: ReqId,
    pub ep: u16,
    pub result: Result<Outcome, Error>,
}

// ---------------------------------------------------------------------------------------------
// Internal state

#[derive(Debug)]
enum RecvState {
    Posted,
    /// Eager data flowing straight into the buffer.
    Eager,
    /// Rendezvous: pulling `want` bytes; `asked` bytes requested so far.
    Pulling {
        peer: usize,
        msg_id: u32,
        want: u64,
        asked: u64,
        got: u64,
    },
    /// Waiting for an unexpected eager message to finish arriving into the store.
    Claimed,
}

#[derive(Debug)]
struct RecvReq {
    spec: MatchSpec,
    buf: BufRef,
    state: RecvState,
    info: Option<MsgInfo>,
    received: u64,
    copies: u32,
    /// Every byte has arrived; the receive completes when `copies` reaches zero.
    arrived: bool,
}

#[derive(Debug)]
struct SendReq {
    peer: usize,
    msg_id: u32,
    buf: BufRef,
    bits: u64,
    rank: u32,
    sync: bool,
    rndv: bool,
    /// Eager frames not yet acknowledged (counted once all are queued).
    unacked: u32,
    queued: bool,
    matched: bool,
    /// Rendezvous only: the receiver sent FIN.
    fin: bool,
}

#[derive(Debug)]
enum ReqKind {
    Send(SendReq),
    Recv(RecvReq),
}

#[derive(Debug)]
struct Req {
    ep: u16,
    kind: ReqKind,
}

#[derive(Debug)]
struct Unexp {
    ep: u16,
    peer: usize,
    msg_id: u32,
    info: MsgInfo,
    sync: bool,
    rndv: bool,
    data: Vec<u8>,
    received: u64,
    cost: u32,
    /// A receive waiting for the rest of the data.
    claimed: Option<ReqId>,
}

/// Where the fragments of the eager message being received from a peer go.
#[derive(Debug, Clone, Copy)]
enum EagerTarget {
    Req(ReqId),
    Store(u64),
}

#[derive(Debug, Clone, Copy)]
struct InEager {
    msg_id: u32,
    total: u64,
    next_frag: u32,
    target: EagerTarget,
}

/// One sequenced frame to (re)build: enough to emit it again with the same sequence number.
#[derive(Debug, Clone, Copy)]
struct TxDesc {
    seq: u32,
    kind: Kind,
    flags: u16,
    req: Option<ReqId>,
    msg_id: u32,
    frag_index: u32,
    frag_count: u32,
    offset: u64,
    len: u32,
    total: u64,
    first_sent: u64,
    last_sent: u64,
    retries: u32,
    acked: bool,
}

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum PeerState {
    Idle,
    Connecting,
    Connected,
}

#[derive(Debug)]
struct Rtt {
    srtt: u64,
    rttvar: u64,
    valid: bool,
}

impl Rtt {
    fn sample(&mut self, r: u64) {
        if !self.valid {
            self.srtt = r;
            self.rttvar = r / 2;
            self.valid = true;
        } else {
            let d = self.srtt.abs_diff(r);
            self.rttvar = (3 * self.rttvar + d) / 4;
            self.srtt = (7 * self.srtt + r) / 8;
        }
    }
    fn rto(&self, c: &Config) -> u64 {
        if !self.valid {
            return c.rto_initial_ns;
        }
        (self.srtt + 4 * self.rttvar).clamp(c.rto_min_ns, c.rto_max_ns)
    }
}

#[derive(Debug)]
struct Peer<F> {
    ep: u16,
    addr: EndpointAddr,
    state: PeerState,
    remote_session: u32,
    /// Payload bytes per frame to this peer.
    frag: usize,
    remote_window: u32,
    connect_sent: u64,
    connect_first: u64,
    connect_tries: u32,
    // transmit side
    next_seq: u32,
    next_msg_id: u32,
    /// Messages waiting for the connection, in order.
    waiting: VecDeque<ReqId>,
    pending: VecDeque<TxDesc>,
    unacked: VecDeque<TxDesc>,
    sends: HashMap<u32, ReqId>,
    credit_grant: u32,
    credit_released_seen: u32,
    credit_used: u32,
    rtt: Rtt,
    // receive side
    rcv_next: u32,
    reorder: BTreeMap<u32, F>,
    ack_owed: u32,
    ack_due: Option<u64>,
    ack_now: bool,
    /// Eager credit this side granted the peer, and the cumulative bytes released back.
    grant_given: u32,
    credit_released: u32,
    in_eager: Option<InEager>,
    pulls: HashMap<u32, ReqId>,
    resend: VecDeque<u32>,
    /// Doublings of the retransmit timeout since the cumulative ack last moved.
    rto_backoff: u32,
    connect_ack_owed: bool,
    last_rx: u64,
    /// In the engine's `active` list (so marking is O(1)).
    in_active: bool,
    /// When this side last received the first frame of an eager message from the peer: credit
    /// of peers quiet for `credit_idle_ns` may be asked back.
    last_eager_rx: u64,
    /// A request to give credit back is on its way; no second one until it is answered.
    reclaiming: bool,
    /// The connect-time grant has been taken from the store (once per session).
    granted: bool,
}

impl<F> Peer<F> {
    fn new(ep: u16, addr: EndpointAddr, frag: usize) -> Self {
        Peer {
            ep,
            addr,
            state: PeerState::Idle,
            remote_session: 0,
            frag,
            remote_window: 1,
            connect_sent: 0,
            connect_first: 0,
            connect_tries: 0,
            next_seq: 0,
            next_msg_id: 1,
            waiting: VecDeque::new(),
            pending: VecDeque::new(),
            unacked: VecDeque::new(),
            sends: HashMap::default(),
            credit_grant: 0,
            credit_released_seen: 0,
            credit_used: 0,
            rtt: Rtt {
                srtt: 0,
                rttvar: 0,
                valid: false,
            },
            rcv_next: 0,
            reorder: BTreeMap::new(),
            ack_owed: 0,
            ack_due: None,
            ack_now: false,
            grant_given: 0,
            credit_released: 0,
            in_eager: None,
            pulls: HashMap::default(),
            resend: VecDeque::new(),
            rto_backoff: 0,
            connect_ack_owed: false,
            last_rx: 0,
            in_active: false,
            last_eager_rx: 0,
            reclaiming: false,
            granted: false,
        }
    }

    fn credit_avail(&self) -> u32 {
        self.credit_grant
            .wrapping_add(self.credit_released_seen)
            .wrapping_sub(self.credit_used)
    }
}

#[derive(Debug)]
struct Endpoint {
    session: u32,
    posted: VecDeque<ReqId>,
    unexpected: VecDeque<u64>,
}

/// Wrapping sequence comparison: `a` before `b`.
#[inline]
fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// Credit one eager message costs the receiver's store.
fn eager_cost(len: u64) -> u32 {
    len as u32 + RTS_COST
}

/// Frames resent when the retransmit timer fires.
const RTO_BURST: usize = 8;

/// Credit an eager message costs beyond its bytes: the store's per-message overhead.
const RTS_COST: u32 = 64;

/// The protocol engine for one node: any number of local endpoints over one link.
pub struct Engine<L: Link, C: CopyEngine<L::Frame>> {
    cfg: Config,
    mac: MacAddr,
    eps: Vec<Option<Endpoint>>,
    peers: Vec<Peer<L::Frame>>,
    peer_index: HashMap<(u16, EndpointAddr), usize>,
    reqs: Vec<(u32, Option<Req>)>,
    free_reqs: Vec<usize>,
    unex: HashMap<u64, Unexp>,
    next_unex: u64,
    unex_bytes: u64,
    /// Unexpected RTSs held (bounded apart from eager messages: they cost no credit).
    unex_rts: usize,
    grants_total: u64,
    /// A peer asked for more eager credit than the store had left: reclaim from idle peers at
    /// the next timer pass.
    credit_pressure: bool,
    mprobed: HashMap<u64, u64>,
    copy: C,
    /// Copies in submission order: the receive they belong to, and whether finished.
    copy_fifo: VecDeque<(ReqId, bool)>,
    copy_done: Vec<Result<(), crate::copy::CopyError>>,
    completions: VecDeque<Completion>,
    rx: Vec<L::Frame>,
    tx: Vec<L::TxBuf>,
    resets: Vec<Repr>,
    /// Peers with frames to send or acks owed.
    active: Vec<usize>,
    scratch: Vec<u8>,
    rng: rand::rngs::SmallRng,
    last_timer_scan: u64,
    /// Time of the latest poll.
    now: u64,
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
        Ok(Engine {
            cfg,
            mac,
            eps: Vec::new(),
            peers: Vec::new(),
            peer_index: HashMap::default(),
            reqs: Vec::new(),
            free_reqs: Vec::new(),
            unex: HashMap::default(),
            next_unex: 1,
            unex_bytes: 0,
            unex_rts: 0,
            grants_total: 0,
            credit_pressure: false,
            mprobed: HashMap::default(),
            copy,
            copy_fifo: VecDeque::new(),
            copy_done: Vec::new(),
            completions: VecDeque::new(),
            rx: Vec::new(),
            tx: Vec::new(),
            resets: Vec::new(),
            active: Vec::new(),
            scratch: Vec::new(),
            rng: rand::rngs::SmallRng::from_entropy(),
            last_timer_scan: 0,
            now: 0,
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

    /// Seeds the session generator (tests want reproducible runs).
    pub fn seed(&mut self, seed: u64) {
        use rand::SeedableRng;
        self.rng = rand::rngs::SmallRng::seed_from_u64(seed);
    }

    // ---- endpoints ------------------------------------------------------------------------

    /// Opens endpoint `id` (or the lowest free one) with a fresh random session.
    pub fn open_endpoint(&mut self, id: Option<u16>) -> Result<EndpointAddr, Error> {
        use rand::Rng;
        let id = match id {
            Some(i) => i as usize,
            None => self
                .eps
                .iter()
                .position(Option::is_none)
                .unwrap_or(self.eps.len()),
        };
        if id > u16::MAX as usize {
            return Err(Error::Invalid("endpoint id (all in use)"));
        }
        if self.eps.len() <= id {
            self.eps.resize_with(id + 1, || None);
        }
        if self.eps[id].is_some() {
            return Err(Error::Invalid("endpoint id (already open)"));
        }
        let session = self.rng.gen_range(1..=u32::MAX);
        self.eps[id] = Some(Endpoint {
            session,
            posted: VecDeque::new(),
            unexpected: VecDeque::new(),
        });
        Ok(EndpointAddr::new(self.mac, id as u16))
    }

    /// Closes an endpoint: its operations fail with [`Error::EndpointClosed`], its peers are forgotten.
    pub fn close_endpoint(&mut self, ep: u16) {
        if self.endpoint(ep).is_err() {
            return;
        }
        let peers: Vec<usize> = (0..self.peers.len())
            .filter(|&p| self.peers[p].ep == ep)
            .collect();
        for p in peers {
            self.reset_peer(p, Error::EndpointClosed);
        }
        let e = self.eps[ep as usize].take().expect("checked");
        for r in e.posted {
            self.finish(r, Err(Error::EndpointClosed));
        }
        for u in e.unexpected {
            self.drop_unexp(u);
        }
        let handles: Vec<u64> = self
            .mprobed
            .iter()
            .filter(|(_, u)| self.unex.get(u).is_some_and(|x| x.ep == ep))
            .map(|(h, _)| *h)
            .collect();
        for h in handles {
            if let Some(u) = self.mprobed.remove(&h) {
                self.drop_unexp(u);
            }
        }
    }

    fn endpoint(&self, ep: u16) -> Result<&Endpoint, Error> {
        self.eps
            .get(ep as usize)
            .and_then(Option::as_ref)
            .ok_or(Error::Invalid("endpoint"))
    }
    fn endpoint_mut(&mut self, ep: u16) -> Result<&mut Endpoint, Error> {
        self.eps
            .get_mut(ep as usize)
            .and_then(Option::as_mut)
            .ok_or(Error::Invalid("endpoint"))
    }

    // ---- requests -------------------------------------------------------------------------

    fn alloc_req(&mut self, r: Req) -> ReqId {
        let i = match self.free_reqs.pop() {
            Some(i) => i,
            None => {
                self.reqs.push((0, None));
                self.reqs.len() - 1
            }
        };
        let slot = &mut self.reqs[i];
        slot.0 = slot.0.wrapping_add(1);
        slot.1 = Some(r);
        ReqId::new(i, slot.0)
    }

    fn req(&self, id: ReqId) -> Option<&Req> {
        let (g, r) = self.reqs.get(id.index())?;
        if *g == id.generation() {
            r.as_ref()
        } else {
            None
        }
    }
    fn req_mut(&mut self, id: ReqId) -> Option<&mut Req> {
        let (g, r) = self.reqs.get_mut(id.index())?;
        if *g == id.generation() {
            r.as_mut()
        } else {
            None
        }
    }
    fn send_mut(&mut self, id: ReqId) -> Option<&mut SendReq> {
        match &mut self.req_mut(id)?.kind {
            ReqKind::Send(s) => Some(s),
            _ => None,
        }
    }
    fn recv_mut(&mut self, id: ReqId) -> Option<&mut RecvReq> {
        match &mut self.req_mut(id)?.kind {
            ReqKind::Recv(r) => Some(r),
            _ => None,
        }
    }

    /// Retires a request and queues its completion.
    fn finish(&mut self, id: ReqId, result: Result<Outcome, Error>) {
        let Some((g, slot)) = self.reqs.get_mut(id.index()) else {
            return;
        };
        if *g != id.generation() {
            return;
        }
        let Some(req) = slot.take() else { return };
        self.free_reqs.push(id.index());
        if let ReqKind::Send(s) = &req.kind {
            if let Some(p) = self.peers.get_mut(s.peer) {
                p.sends.remove(&s.msg_id);
            }
            self.copy.release(&s.buf);
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
        self.req(id).is_some()
    }

    // ---- peers ----------------------------------------------------------------------------

    fn peer_for(&mut self, ep: u16, addr: EndpointAddr) -> usize {
        if let Some(&p) = self.peer_index.get(&(ep, addr)) {
            return p;
        }
        let frag = self.cfg.max_frame - wire::OVERHEAD;
        self.peers.push(Peer::new(ep, addr, frag));
        let p = self.peers.len() - 1;
        self.peer_index.insert((ep, addr), p);
        self.stats.peers += 1;
        p
    }

    fn mark_active(&mut self, p: usize) {
        let peer = &mut self.peers[p];
        if !peer.in_active {
            peer.in_active = true;
            self.active.push(p);
        }
    }

    /// Fails everything in flight with peer `p` and forgets its connection state.
    fn reset_peer(&mut self, p: usize, why: Error) {
        let peer = &mut self.peers[p];
        let mut failed: Vec<ReqId> = peer.waiting.drain(..).collect();
        failed.extend(peer.sends.values().copied());
        failed.extend(peer.pulls.values().copied());
        if let Some(InEager {
            target: EagerTarget::Req(r),
            ..
        }) = peer.in_eager
        {
            failed.push(r);
        }
        let in_store = match peer.in_eager {
            Some(InEager {
                target: EagerTarget::Store(u),
                ..
            }) => Some(u),
            _ => None,
        };
        peer.pending.clear();
        peer.unacked.clear();
        peer.sends.clear();
        peer.pulls.clear();
        peer.resend.clear();
        peer.connect_ack_owed = false;
        peer.reorder.clear();
        peer.in_eager = None;
        peer.state = PeerState::Idle;
        peer.remote_session = 0;
        peer.next_seq = 0;
        peer.rcv_next = 0;
        peer.ack_owed = 0;
        peer.ack_due = None;
        peer.ack_now = false;
        peer.credit_grant = 0;
        peer.credit_released_seen = 0;
        peer.credit_used = 0;
        peer.credit_released = 0;
        self.grants_total -= peer.grant_given as u64;
        peer.grant_given = 0;
        peer.reclaiming = false;
        peer.granted = false;
        if let Some(u) = in_store {
            // A half-arrived unexpected message from the dead incarnation: drop it, and fail
            // whoever had claimed it.
            if let Some(c) = self.unex.get(&u).and_then(|x| x.claimed) {
                failed.push(c);
            }
            if let Some(ep) = self.unex.get(&u).map(|x| x.ep)
                && let Ok(e) = self.endpoint_mut(ep)
            {
                e.unexpected.retain(|&x| x != u);
            }
            self.mprobed.retain(|_, x| *x != u);
            self.drop_unexp(u);
        }
        for r in failed {
            self.finish(r, Err(why.clone()));
        }
        // Copies of the failed receives stay in the FIFO: it mirrors the copy engine's queue
        // one for one, and their completions find no request.
    }

    fn drop_unexp(&mut self, u: u64) {
        if let Some(x) = self.unex.remove(&u) {
            self.unex_bytes -= x.data.capacity() as u64;
            self.unex_rts -= usize::from(x.rndv);
        }
    }

    // ---- the MPI-shaped API ---------------------------------------------------------------

    /// Starts sending `buf` to `dest` with `bits` (context | tag) from MPI rank `rank`.
    /// Nothing moves until the next [`Engine::poll`].
    pub fn isend(
        &mut self,
        ep: u16,
        dest: EndpointAddr,
        bits: u64,
        rank: u32,
        buf: BufRef,
        mode: SendMode,
    ) -> Result<ReqId, Error> {
        let now = self.now;
        self.endpoint(ep)?;
        let p = self.peer_for(ep, dest);
        let msg_id = {
            let peer = &mut self.peers[p];
            let m = peer.next_msg_id;
            peer.next_msg_id = peer.next_msg_id.wrapping_add(1).max(1);
            m
        };
        let id = self.alloc_req(Req {
            ep,
            kind: ReqKind::Send(SendReq {
                peer: p,
                msg_id,
                buf,
                bits,
                rank,
                sync: mode == SendMode::Synchronous,
                rndv: false,
                unacked: 0,
                queued: false,
                matched: false,
                fin: false,
            }),
        });
        self.peers[p].sends.insert(msg_id, id);
        self.stats.sends_posted += 1;
        self.peers[p].waiting.push_back(id);
        match self.peers[p].state {
            PeerState::Connected => self.flush_waiting(p),
            PeerState::Connecting => {}
            PeerState::Idle => self.start_connect(p, now),
        }
        self.mark_active(p);
        Ok(id)
    }

    fn start_connect(&mut self, p: usize, now: u64) {
        let peer = &mut self.peers[p];
        peer.state = PeerState::Connecting;
        peer.connect_first = now;
        peer.connect_sent = 0;
        peer.connect_tries = 0;
        self.mark_active(p);
    }

    /// Moves the sends that waited for the connection onto the wire queue, in order.
    fn flush_waiting(&mut self, p: usize) {
        while let Some(id) = self.peers[p].waiting.pop_front() {
            self.queue_send(p, id);
        }
    }

    /// Expands a send into frames on the peer's queue: eager while the peer's credit covers
    /// it, rendezvous otherwise.
    fn queue_send(&mut self, p: usize, id: ReqId) {
        let rndv_threshold = self.cfg.rndv_threshold as u64;
        let (frag, avail) = (self.peers[p].frag, self.peers[p].credit_avail());
        let Some(s) = self.send_mut(id) else {
            return;
        };
        let len = s.buf.len;
        let flags = if s.sync { wire::FLAG_SYNC } else { 0 };
        let base = TxDesc {
            seq: 0,
            kind: Kind::Eager,
            flags,
            req: Some(id),
            msg_id: s.msg_id,
            frag_index: 0,
            frag_count: 1,
            offset: 0,
            len: 0,
            total: len,
            first_sent: 0,
            last_sent: 0,
            retries: 0,
            acked: false,
        };
        s.queued = true;
        if len <= rndv_threshold && eager_cost(len) <= avail {
            let count = len.div_ceil(frag as u64).max(1) as u32;
            s.unacked = count;
            let peer = &mut self.peers[p];
            peer.credit_used = peer.credit_used.wrapping_add(eager_cost(len));
            for i in 0..count {
                let off = i as u64 * frag as u64;
                let l = (len - off).min(frag as u64) as u32;
                peer.pending.push_back(TxDesc {
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
            self.peers[p].pending.push_back(TxDesc {
                kind: Kind::Rts,
                flags,
                ..base
            });
            self.stats.rndv_sent += 1;
        }
    }

    /// Posts a receive into `buf` for messages matching `spec`.
    pub fn irecv(&mut self, ep: u16, spec: MatchSpec, buf: BufRef) -> Result<ReqId, Error> {
        let e = self.endpoint(ep)?;
        let hit = e.unexpected.iter().position(|u| {
            self.unex
                .get(u)
                .is_some_and(|x| spec.matches(x.info.match_bits, x.info.src_rank))
        });
        let id = self.alloc_req(Req {
            ep,
            kind: ReqKind::Recv(RecvReq {
                spec,
                buf,
                state: RecvState::Posted,
                info: None,
                received: 0,
                copies: 0,
                arrived: false,
            }),
        });
        self.stats.recvs_posted += 1;
        match hit {
            Some(i) => {
                let u = self
                    .endpoint_mut(ep)?
                    .unexpected
                    .remove(i)
                    .expect("index from position");
                self.deliver_unexp(u, id);
            }
            None => self.endpoint_mut(ep)?.posted.push_back(id),
        }
        Ok(id)
    }

    /// The first unexpected message matching `spec`, left in place.
    pub fn iprobe(&self, ep: u16, spec: MatchSpec) -> Result<Option<MsgInfo>, Error> {
        let e = self.endpoint(ep)?;
        Ok(e.unexpected
            .iter()
            .filter_map(|u| self.unex.get(u))
            .find(|x| spec.matches(x.info.match_bits, x.info.src_rank))
            .map(|x| x.info))
    }

    /// Like [`Engine::iprobe`], but removes the message: only [`Engine::imrecv`] can receive it.
    pub fn improbe(
        &mut self,
        ep: u16,
        spec: MatchSpec,
    ) -> Result<Option<(MessageHandle, MsgInfo)>, Error> {
        let e = self.endpoint(ep)?;
        let Some(i) = e.unexpected.iter().position(|u| {
            self.unex
                .get(u)
                .is_some_and(|x| spec.matches(x.info.match_bits, x.info.src_rank))
        }) else {
            return Ok(None);
        };
        let u = self
            .endpoint_mut(ep)?
            .unexpected
            .remove(i)
            .expect("index from position");
        self.mprobed.insert(u, u);
        Ok(Some((MessageHandle(u), self.unex[&u].info)))
    }

    /// Whether every byte of the message `msg` (from [`Engine::improbe`]) is at this node, so
    /// that [`Engine::imrecv`] completes it at once instead of waiting for the network.
    pub fn message_arrived(&self, msg: MessageHandle) -> bool {
        self.mprobed
            .get(&msg.0)
            .and_then(|u| self.unex.get(u))
            .is_some_and(|x| !x.rndv && x.received >= x.info.len)
    }

    /// Receives a message taken by [`Engine::improbe`] into `buf`.
    /// Only the endpoint that probed the message may receive it.
    pub fn imrecv(&mut self, ep: u16, msg: MessageHandle, buf: BufRef) -> Result<ReqId, Error> {
        match self.mprobed.get(&msg.0).and_then(|u| self.unex.get(u)) {
            Some(x) if x.ep == ep => {}
            _ => return Err(Error::Invalid("message handle")),
        }
        let u = self
            .mprobed
            .remove(&msg.0)
            .ok_or(Error::Invalid("message handle"))?;
        let x = self.unex.get(&u).ok_or(Error::Invalid("message handle"))?;
        let spec = MatchSpec::exact(x.info.match_bits);
        let id = self.alloc_req(Req {
            ep,
            kind: ReqKind::Recv(RecvReq {
                spec,
                buf,
                state: RecvState::Posted,
                info: None,
                received: 0,
                copies: 0,
                arrived: false,
            }),
        });
        self.stats.recvs_posted += 1;
        self.deliver_unexp(u, id);
        Ok(id)
    }

    /// Cancels a receive that has not matched. True if it was cancelled (its completion says so).
    pub fn cancel(&mut self, id: ReqId) -> bool {
        let Some(req) = self.req(id) else {
            return false;
        };
        let ep = req.ep;
        let ReqKind::Recv(RecvReq {
            state: RecvState::Posted,
            ..
        }) = req.kind
        else {
            return false;
        };
        if let Ok(e) = self.endpoint_mut(ep) {
            e.posted.retain(|&r| r != id);
        }
        self.finish(id, Err(Error::Cancelled));
        true
    }

    /// Hands unexpected message `u` to receive `id`.
    fn deliver_unexp(&mut self, u: u64, id: ReqId) {
        let Some(x) = self.unex.get_mut(&u) else {
            return;
        };
        let info = x.info;
        let (peer, msg_id, rndv) = (x.peer, x.msg_id, x.rndv);
        let r = self.recv_mut(id).expect("fresh receive");
        r.info = Some(info);
        if rndv {
            self.drop_unexp(u);
            self.start_pull(peer, msg_id, id, info.len);
            return;
        }
        let x = &self.unex[&u];
        if x.received < info.len {
            // Still arriving: the rest lands in the store, then the receive takes it all.
            let x = self.unex.get_mut(&u).expect("present");
            x.claimed = Some(id);
            self.recv_mut(id).expect("fresh").state = RecvState::Claimed;
            return;
        }
        self.complete_from_store(u, id);
    }

    /// Copies a fully arrived unexpected message into receive `id` and completes it.
    fn complete_from_store(&mut self, u: u64, id: ReqId) {
        let Some(x) = self.unex.remove(&u) else {
            return;
        };
        self.unex_bytes -= x.data.capacity() as u64;
        let Some(r) = self.recv_mut(id) else { return };
        let n = x.info.len.min(r.buf.len);
        let buf = r.buf;
        let res = self.copy.write(&buf, 0, &x.data[..n as usize]);
        match res {
            Ok(()) => {
                let r = self.recv_mut(id).expect("present");
                r.received = n;
                self.finish(
                    id,
                    Ok(Outcome::Received {
                        info: x.info,
                        received: n,
                        truncated: x.info.len > buf.len,
                    }),
                );
            }
            Err(e) => self.finish(id, Err(Error::Copy(e.0))),
        }
        // After the receive: a synchronous sender on this node completes right behind it.
        self.release_credit(x.peer, x.cost, x.sync, x.msg_id);
    }

    /// The receiver is done with an eager message: return its credit; tell a synchronous sender.
    fn release_credit(&mut self, p: usize, cost: u32, sync: bool, msg_id: u32) {
        let Some(peer) = self.peers.get_mut(p) else {
            return;
        };
        peer.credit_released = peer.credit_released.wrapping_add(cost);
        if peer.ack_due.is_none() {
            peer.ack_due = Some(0);
        }
        if sync && self.finish_local_send(p, msg_id, Kind::Matched) {
            self.mark_active(p);
            return;
        }
        let peer = &mut self.peers[p];
        if sync && peer.state == PeerState::Connected {
            peer.pending.push_back(TxDesc {
                seq: 0,
                kind: Kind::Matched,
                flags: 0,
                req: None,
                msg_id,
                frag_index: 0,
                frag_count: 1,
                offset: 0,
                len: 0,
                total: 0,
                first_sent: 0,
                last_sent: 0,
                retries: 0,
                acked: false,
            });
        }
        self.mark_active(p);
    }

    /// The receiver of message `msg_id` from an endpoint of this node matched it (`Matched`:
    /// a synchronous eager message) or is done with it (`Fin`: rendezvous): its send completes
    /// now, in the same pass as the receive and right behind it, rather than when a frame has
    /// gone round the loopback: a rank that saw its receive complete then finds the send
    /// complete too. False if the sender is on another node (the frame tells it).
    fn finish_local_send(&mut self, p: usize, msg_id: u32, news: Kind) -> bool {
        let (from, ep) = (self.peers[p].addr, self.peers[p].ep);
        if from.mac != self.mac {
            return false;
        }
        // The sender's view of this pair: its endpoint, talking to ours.
        let Some(&q) = self
            .peer_index
            .get(&(from.ep, EndpointAddr::new(self.mac, ep)))
        else {
            return false;
        };
        let Some(&id) = self.peers[q].sends.get(&msg_id) else {
            return false;
        };
        let Some(s) = self.send_mut(id) else {
            return false;
        };
        match news {
            Kind::Fin => s.fin = true,
            _ => s.matched = true,
        }
        self.try_finish_send(id);
        true
    }

    fn start_pull(&mut self, p: usize, msg_id: u32, id: ReqId, total: u64) {
        let Some(r) = self.recv_mut(id) else { return };
        let want = total.min(r.buf.len);
        r.state = RecvState::Pulling {
            peer: p,
            msg_id,
            want,
            asked: 0,
            got: 0,
        };
        self.peers[p].pulls.insert(msg_id, id);
        for _ in 0..self.cfg.pull_outstanding {
            self.ask_block(id);
        }
        // A zero-byte pull (truncated to nothing) finishes at once.
        self.maybe_finish_pull(id);
    }

    /// Queues the next pull request of receive `id`, if any bytes remain unasked.
    fn ask_block(&mut self, id: ReqId) {
        let block = self.cfg.pull_block as u64;
        let Some(r) = self.recv_mut(id) else { return };
        let RecvState::Pulling {
            peer,
            msg_id,
            want,
            asked,
            ..
        } = &mut r.state
        else {
            return;
        };
        if *asked >= *want {
            return;
        }
        let len = (*want - *asked).min(block);
        let (p, m, off) = (*peer, *msg_id, *asked);
        *asked += len;
        self.peers[p].pending.push_back(TxDesc {
            seq: 0,
            kind: Kind::Pull,
            flags: 0,
            req: None,
            msg_id: m,
            frag_index: 0,
            frag_count: 1,
            offset: off,
            len: 0,
            total: len,
            first_sent: 0,
            last_sent: 0,
            retries: 0,
            acked: false,
        });
        self.mark_active(p);
    }

    fn maybe_finish_pull(&mut self, id: ReqId) {
        let Some(r) = self.recv_mut(id) else { return };
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
        self.peers[peer].pulls.remove(&msg_id);
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
    fn send_fin(&mut self, p: usize, msg_id: u32) {
        if !self.finish_local_send(p, msg_id, Kind::Fin) {
            self.peers[p].pending.push_back(desc(Kind::Fin, msg_id));
        }
        self.mark_active(p);
    }

    // ---- the poll loop --------------------------------------------------------------------

    /// One non-blocking step: rx burst → demux → protocol → tx burst → timers → copy
    /// completions. Returns how much work it did (0: idle). `now` is a monotonic time in ns.
    pub fn poll(&mut self, link: &mut L, now: u64) -> usize {
        self.now = now;
        let mut work = 0;
        let mut rx = std::mem::take(&mut self.rx);
        link.rx_burst(&mut rx, self.cfg.burst);
        // A full burst means more frames wait (acks among them, after a stall of this
        // thread): timers wait until the receive queue is drained, or they would resend
        // what has been acknowledged already.
        let drained = rx.len() < self.cfg.burst;
        work += rx.len();
        for f in rx.drain(..) {
            self.on_frame(f, now);
        }
        self.rx = rx;
        work += self.transmit(link, now);
        if drained && now.wrapping_sub(self.last_timer_scan) >= self.cfg.rto_min_ns / 4 {
            self.last_timer_scan = now;
            self.timers(now);
        }
        work += self.copy_completions();
        work
    }

    // ---- receive path ---------------------------------------------------------------------

    fn on_frame(&mut self, f: L::Frame, now: u64) {
        let r = match Frame::new_checked(f.as_ref()).and_then(|fr| Repr::parse(&fr)) {
            Ok(r) => r,
            Err(e) => {
                self.stats.drop(e);
                return;
            }
        };
        self.stats.rx_frames += 1;
        if r.dst_mac != self.mac && r.dst_mac != MacAddr::BROADCAST {
            self.stats.drop_not_ours += 1;
            return;
        }
        let Some(e) = self.eps.get(r.dst_ep as usize).and_then(Option::as_ref) else {
            self.stats.drop_no_endpoint += 1;
            return;
        };
        let my_session = e.session;
        let from = EndpointAddr::new(r.src_mac, r.src_ep);
        let kind = r.kind.expect("parsed");
        match kind {
            Kind::Connect => self.on_connect(r, from, f.as_ref(), now),
            Kind::ConnectAck => self.on_connect_ack(r, from, my_session, f.as_ref(), now),
            Kind::Reset => {
                if r.dst_session != my_session {
                    return;
                }
                if let Some(&p) = self.peer_index.get(&(r.dst_ep, from))
                    && self.peers[p].state == PeerState::Connected
                    && self.peers[p].remote_session != r.src_session
                {
                    self.stats.peer_restarts += 1;
                    self.reset_peer(p, Error::PeerRestarted(from));
                }
            }
            _ => {
                let Some(&p) = self.peer_index.get(&(r.dst_ep, from)) else {
                    self.stats.drop_stale += 1;
                    if r.dst_session != my_session {
                        self.send_reset(r, my_session);
                    }
                    return;
                };
                if r.dst_session != my_session {
                    // Addressed to an earlier incarnation of this endpoint: tell the sender.
                    self.stats.drop_stale += 1;
                    self.send_reset(r, my_session);
                    return;
                }
                if self.peers[p].state != PeerState::Connected
                    || self.peers[p].remote_session != r.src_session
                {
                    self.stats.drop_stale += 1;
                    return;
                }
                if kind == Kind::Ack {
                    let sack = AckRepr::parse(Frame::new_unchecked(f.as_ref()).payload())
                        .unwrap_or_default();
                    self.on_ack(p, r.ack, r.credit, Some(&sack), now);
                } else {
                    self.on_ack(p, r.ack, r.credit, None, now);
                    self.on_sequenced(p, r, f, now);
                }
            }
        }
    }

    fn send_reset(&mut self, r: Repr, my_session: u32) {
        // Resets are rare; they go out through a one-off peer-less path in `transmit`.
        self.resets.push(Repr {
            dst_mac: r.src_mac,
            src_mac: self.mac,
            kind: Some(Kind::Reset),
            dst_ep: r.src_ep,
            src_ep: r.dst_ep,
            src_session: my_session,
            dst_session: r.src_session,
            ..Repr::default()
        });
    }
}

/// What became of a descriptor handed to `emit_desc`.
enum Emit {
    Sent,
    /// The link had no frame buffer: nothing happened, try again later.
    NoBuffer,
    /// Its operation failed or is gone: the frame is not sent.
    Gone,
}

fn desc(kind: Kind, msg_id: u32) -> TxDesc {
    TxDesc {
        seq: 0,
        kind,
        flags: 0,
        req: None,
        msg_id,
        frag_index: 0,
        frag_count: 1,
        offset: 0,
        len: 0,
        total: 0,
        first_sent: 0,
        last_sent: 0,
        retries: 0,
        acked: false,
    }
}

impl<L: Link, C: CopyEngine<L::Frame>> Engine<L, C> {
    // ---- connection handshake -------------------------------------------------------------

    fn grant_for_new_peer(&mut self, p: usize) -> u32 {
        if !self.peers[p].granted {
            self.peers[p].granted = true;
            let left = self.cfg.unexpected_bytes.saturating_sub(self.grants_total);
            let g = (self.initial_grant() as u64).min(left) as u32;
            self.peers[p].grant_given = g;
            self.grants_total += g as u64;
        }
        self.peers[p].grant_given
    }

    fn accept(&mut self, p: usize, session: u32, c: ConnectRepr, now: u64) {
        self.grant_for_new_peer(p);
        let max_frame = self.cfg.max_frame.min(c.max_frame as usize);
        let peer = &mut self.peers[p];
        peer.state = PeerState::Connected;
        peer.remote_session = session;
        peer.frag = max_frame - wire::OVERHEAD;
        peer.remote_window = c.window;
        peer.credit_grant = c.eager_credit;
        peer.last_rx = now;
        self.flush_waiting(p);
        self.mark_active(p);
    }

    fn on_connect(&mut self, r: Repr, from: EndpointAddr, f: &[u8], now: u64) {
        let Ok(c) = ConnectRepr::parse(Frame::new_unchecked(f).payload()) else {
            self.stats.drop_malformed += 1;
            return;
        };
        let p = self.peer_for(r.dst_ep, from);
        let peer = &self.peers[p];
        if peer.state == PeerState::Connected && peer.remote_session != r.src_session {
            self.stats.peer_restarts += 1;
            self.reset_peer(p, Error::PeerRestarted(from));
        }
        if self.peers[p].state != PeerState::Connected {
            self.accept(p, r.src_session, c, now);
        }
        self.peers[p].connect_ack_owed = true;
        self.mark_active(p);
    }

    fn on_connect_ack(&mut self, r: Repr, from: EndpointAddr, my_session: u32, f: &[u8], now: u64) {
        if r.dst_session != my_session {
            self.stats.drop_stale += 1;
            return;
        }
        let Ok(c) = ConnectRepr::parse(Frame::new_unchecked(f).payload()) else {
            self.stats.drop_malformed += 1;
            return;
        };
        let Some(&p) = self.peer_index.get(&(r.dst_ep, from)) else {
            return;
        };
        match self.peers[p].state {
            PeerState::Connecting => self.accept(p, r.src_session, c, now),
            PeerState::Connected if self.peers[p].remote_session != r.src_session => {
                self.stats.peer_restarts += 1;
                self.reset_peer(p, Error::PeerRestarted(from));
                self.accept(p, r.src_session, c, now);
            }
            _ => {}
        }
    }

    // ---- acknowledgements -----------------------------------------------------------------

    fn on_ack(&mut self, p: usize, ack: u32, credit: u32, sack: Option<&AckRepr>, now: u64) {
        let peer = &mut self.peers[p];
        peer.last_rx = now;
        let more_credit = (credit.wrapping_sub(peer.credit_released_seen) as i32) > 0;
        if more_credit {
            peer.credit_released_seen = credit;
        }
        let mut done: smallvec::SmallVec<[TxDesc; 16]> = smallvec::SmallVec::new();
        while let Some(d) = peer.unacked.front() {
            if !seq_lt(d.seq, ack) {
                break;
            }
            let d = peer.unacked.pop_front().expect("front");
            peer.rto_backoff = 0;
            if !d.acked {
                done.push(d);
            }
        }
        if let Some(s) = sack {
            let mut highest = None;
            for (i, d) in peer.unacked.iter_mut().enumerate() {
                let off = d.seq.wrapping_sub(ack).wrapping_sub(1);
                if s.has(off) {
                    highest = Some(i);
                    if !d.acked {
                        d.acked = true;
                        done.push(*d);
                    }
                }
            }
            // Everything below the highest selectively acked frame and not acked itself was
            // lost: resend it now, at most once per round trip.
            if let Some(h) = highest {
                let rtt = peer.rtt.srtt.max(self.cfg.rto_min_ns / 2);
                for d in peer.unacked.iter().take(h) {
                    if !d.acked
                        && now.saturating_sub(d.last_sent) >= rtt
                        && !peer.resend.contains(&d.seq)
                    {
                        peer.resend.push_back(d.seq);
                    }
                }
            }
        }
        if !peer.resend.is_empty() || !peer.pending.is_empty() {
            self.mark_active(p);
        }
        if more_credit && !self.peers[p].waiting.is_empty() {
            self.flush_waiting(p);
            self.mark_active(p);
        }
        for d in done {
            if d.retries == 0 {
                self.peers[p].rtt.sample(now.saturating_sub(d.first_sent));
            }
            if d.kind == Kind::Eager
                && let Some(id) = d.req
                && let Some(s) = self.send_mut(id)
            {
                s.unacked = s.unacked.saturating_sub(1);
                self.try_finish_send(id);
            }
        }
    }

    fn try_finish_send(&mut self, id: ReqId) {
        let Some(s) = self.send_mut(id) else { return };
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

    // ---- the in-order stream --------------------------------------------------------------

    fn on_sequenced(&mut self, p: usize, r: Repr, f: L::Frame, now: u64) {
        let window = self.cfg.window;
        let d = r.seq.wrapping_sub(self.peers[p].rcv_next);
        if d == 0 {
            if !self.process(p, r, f) {
                self.stats.rx_stalled += 1;
                return;
            }
            self.advance(p);
            // Frames that were waiting for this one.
            while let Some(f) = {
                let peer = &mut self.peers[p];
                let n = peer.rcv_next;
                peer.reorder.remove(&n)
            } {
                let Ok(r) = Frame::new_checked(f.as_ref()).and_then(|x| Repr::parse(&x)) else {
                    break;
                };
                if !self.process(p, r, f) {
                    // Put nothing back: the sender retransmits what we could not take.
                    self.stats.rx_stalled += 1;
                    self.peers[p].reorder.clear();
                    break;
                }
                self.advance(p);
            }
            let peer = &mut self.peers[p];
            if peer.ack_owed >= self.cfg.ack_every || !peer.reorder.is_empty() {
                peer.ack_now = true;
            } else if peer.ack_due.is_none() {
                peer.ack_due = Some(now + self.cfg.ack_delay_ns);
            }
        } else if (d as i32) > 0 && d < window {
            let peer = &mut self.peers[p];
            if let std::collections::btree_map::Entry::Vacant(e) = peer.reorder.entry(r.seq) {
                e.insert(f);
                self.stats.rx_out_of_order += 1;
            } else {
                self.stats.rx_duplicates += 1;
            }
            peer.ack_now = true;
        } else {
            // Already delivered (our ack was lost) or beyond the window.
            self.stats.rx_duplicates += 1;
            self.peers[p].ack_now = true;
        }
        self.mark_active(p);
    }

    fn advance(&mut self, p: usize) {
        let peer = &mut self.peers[p];
        peer.rcv_next = peer.rcv_next.wrapping_add(1);
        peer.ack_owed += 1;
    }

    /// Handles one in-order frame. `false`: cannot take it now (store full); it is not consumed.
    fn process(&mut self, p: usize, r: Repr, f: L::Frame) -> bool {
        match r.kind.expect("parsed") {
            Kind::Eager => return self.on_eager(p, r, f),
            Kind::Rts => {
                if r.flags & wire::FLAG_NO_CREDIT != 0 {
                    self.grow_grant(p);
                }
                let ep = self.peers[p].ep;
                let info = MsgInfo {
                    source: self.peers[p].addr,
                    src_rank: r.src_rank,
                    match_bits: r.match_bits,
                    len: r.total,
                };
                if let Some(id) = self.take_posted(ep, info) {
                    self.start_pull(p, r.msg_id, id, r.total);
                } else {
                    if self.unex_rts >= self.cfg.unexpected_rts {
                        return false;
                    }
                    self.add_unexp(Unexp {
                        ep,
                        peer: p,
                        msg_id: r.msg_id,
                        info,
                        sync: false,
                        rndv: true,
                        data: Vec::new(),
                        received: 0,
                        cost: 0,
                        claimed: None,
                    });
                }
            }
            Kind::Pull => {
                let frag = self.peers[p].frag as u64;
                let Some(&id) = self.peers[p].sends.get(&r.msg_id) else {
                    self.stats.drop_unknown_msg += 1;
                    return true;
                };
                let Some(s) = self.send_mut(id) else {
                    return true;
                };
                let total = s.buf.len;
                let end = r.offset.saturating_add(r.total).min(total);
                if !s.rndv || r.offset >= end {
                    self.stats.drop_malformed += 1;
                    return true;
                }
                let count = (end - r.offset).div_ceil(frag) as u32;
                let peer = &mut self.peers[p];
                for i in 0..count {
                    let off = r.offset + i as u64 * frag;
                    peer.pending.push_back(TxDesc {
                        req: Some(id),
                        frag_index: i,
                        frag_count: count,
                        offset: off,
                        len: (end - off).min(frag) as u32,
                        total,
                        ..desc(Kind::PullData, r.msg_id)
                    });
                }
                self.mark_active(p);
            }
            Kind::PullData => {
                let Some(&id) = self.peers[p].pulls.get(&r.msg_id) else {
                    self.stats.drop_unknown_msg += 1;
                    return true;
                };
                let Some(rr) = self.recv_mut(id) else {
                    return true;
                };
                let RecvState::Pulling { want, got, .. } = &mut rr.state else {
                    return true;
                };
                if r.offset + r.length as u64 > *want {
                    self.stats.drop_malformed += 1;
                    return true;
                }
                *got += r.length as u64;
                rr.received += r.length as u64;
                let buf = rr.buf;
                let first = r.frag_index == 0;
                if r.length > 0 {
                    self.submit_copy(
                        id,
                        f,
                        wire::OVERHEAD..wire::OVERHEAD + r.length as usize,
                        buf,
                        r.offset,
                    );
                }
                if first {
                    self.ask_block(id);
                }
                self.maybe_finish_pull(id);
            }
            Kind::Matched => {
                if let Some(&id) = self.peers[p].sends.get(&r.msg_id)
                    && let Some(s) = self.send_mut(id)
                {
                    s.matched = true;
                    self.try_finish_send(id);
                }
            }
            Kind::Fin => {
                if let Some(&id) = self.peers[p].sends.get(&r.msg_id)
                    && let Some(s) = self.send_mut(id)
                {
                    s.fin = true;
                    self.try_finish_send(id);
                }
            }
            Kind::Grant if r.flags & wire::FLAG_RETURN != 0 => {
                // Give back what is not in use (credit in flight stays ours until released).
                let peer = &mut self.peers[p];
                let back = (r.total.min(u32::MAX as u64) as u32).min(peer.credit_avail());
                peer.credit_grant = peer.credit_grant.wrapping_sub(back);
                peer.pending.push_back(TxDesc {
                    total: back as u64,
                    ..desc(Kind::GrantReturn, 0)
                });
                self.mark_active(p);
            }
            Kind::Grant => {
                let peer = &mut self.peers[p];
                peer.credit_grant = peer
                    .credit_grant
                    .wrapping_add(r.total.min(u32::MAX as u64) as u32);
            }
            Kind::GrantReturn => {
                let peer = &mut self.peers[p];
                let back = (r.total.min(u32::MAX as u64) as u32).min(peer.grant_given);
                peer.grant_given -= back;
                peer.reclaiming = false;
                self.grants_total -= back as u64;
            }
            Kind::Connect | Kind::ConnectAck | Kind::Ack | Kind::Reset | Kind::Ping => {}
        }
        true
    }

    /// Peer `p` sent an eager-sized message by rendezvous for lack of credit: double its grant
    /// (up to `eager_credit`) from what the store has left. When the store is exhausted, idle
    /// peers are asked for theirs at the next timer pass.
    fn grow_grant(&mut self, p: usize) {
        let (initial, max) = (self.initial_grant(), self.cfg.eager_credit);
        let given = self.peers[p].grant_given;
        if given >= max || self.peers[p].reclaiming {
            return;
        }
        let want = given.max(initial).min(max - given) as u64;
        let left = self.cfg.unexpected_bytes.saturating_sub(self.grants_total);
        if left < want {
            self.credit_pressure = true;
        }
        let give = want.min(left) as u32;
        if give == 0 {
            return;
        }
        self.peers[p].grant_given += give;
        self.grants_total += give as u64;
        self.stats.credit_grants += 1;
        self.peers[p].pending.push_back(TxDesc {
            total: give as u64,
            ..desc(Kind::Grant, 0)
        });
        self.mark_active(p);
    }

    fn initial_grant(&self) -> u32 {
        self.cfg.eager_credit_initial.min(self.cfg.eager_credit)
    }

    /// The store's grants are exhausted: ask every peer that sent no eager message for
    /// `credit_idle_ns` to give its credit back (it answers with what it is not using).
    fn reclaim_idle_credit(&mut self, now: u64) {
        self.credit_pressure = false;
        let idle = self.cfg.credit_idle_ns;
        for p in 0..self.peers.len() {
            let peer = &mut self.peers[p];
            if peer.state != PeerState::Connected
                || peer.reclaiming
                || peer.grant_given == 0
                || now.saturating_sub(peer.last_eager_rx) < idle
            {
                continue;
            }
            peer.reclaiming = true;
            peer.pending.push_back(TxDesc {
                flags: wire::FLAG_RETURN,
                total: peer.grant_given as u64,
                ..desc(Kind::Grant, 0)
            });
            self.stats.credit_reclaims += 1;
            self.mark_active(p);
        }
    }

    fn take_posted(&mut self, ep: u16, info: MsgInfo) -> Option<ReqId> {
        let e = self.eps.get(ep as usize)?.as_ref()?;
        let i = e.posted.iter().position(|&id| match self.req(id) {
            Some(Req {
                kind: ReqKind::Recv(r),
                ..
            }) => r.spec.matches(info.match_bits, info.src_rank),
            _ => false,
        })?;
        let id = self.eps[ep as usize].as_mut()?.posted.remove(i)?;
        if let Some(r) = self.recv_mut(id) {
            r.info = Some(info);
        }
        Some(id)
    }

    fn add_unexp(&mut self, x: Unexp) -> u64 {
        let u = self.next_unex;
        self.next_unex += 1;
        self.unex_bytes += x.data.capacity() as u64;
        self.unex_rts += usize::from(x.rndv);
        self.stats.unexpected += 1;
        if let Some(e) = self.eps.get_mut(x.ep as usize).and_then(Option::as_mut) {
            e.unexpected.push_back(u);
        }
        self.unex.insert(u, x);
        self.stats.unexpected_bytes_peak = self.stats.unexpected_bytes_peak.max(self.unex_bytes);
        u
    }

    fn on_eager(&mut self, p: usize, r: Repr, f: L::Frame) -> bool {
        let sync = r.flags & wire::FLAG_SYNC != 0;
        if r.frag_index == 0 {
            self.peers[p].last_eager_rx = self.now;
            let ep = self.peers[p].ep;
            let info = MsgInfo {
                source: self.peers[p].addr,
                src_rank: r.src_rank,
                match_bits: r.match_bits,
                len: r.total,
            };
            let target = if let Some(id) = self.take_posted(ep, info) {
                self.recv_mut(id).expect("posted").state = RecvState::Eager;
                EagerTarget::Req(id)
            } else {
                let cost = eager_cost(r.total);
                if self.unex.len() - self.unex_rts >= self.cfg.unexpected_count
                    || self.unex_bytes + r.total > self.cfg.unexpected_bytes
                {
                    return false;
                }
                EagerTarget::Store(self.add_unexp(Unexp {
                    ep,
                    peer: p,
                    msg_id: r.msg_id,
                    info,
                    sync,
                    rndv: false,
                    data: vec![0; r.total as usize],
                    received: 0,
                    cost,
                    claimed: None,
                }))
            };
            self.peers[p].in_eager = Some(InEager {
                msg_id: r.msg_id,
                total: r.total,
                next_frag: 0,
                target,
            });
        }
        let Some(mut ie) = self.peers[p].in_eager else {
            self.stats.drop_malformed += 1;
            return true;
        };
        if ie.msg_id != r.msg_id || ie.next_frag != r.frag_index || ie.total != r.total {
            self.stats.drop_malformed += 1;
            return true;
        }
        ie.next_frag += 1;
        let last = r.frag_index + 1 == r.frag_count;
        self.peers[p].in_eager = if last { None } else { Some(ie) };
        let payload = wire::OVERHEAD..wire::OVERHEAD + r.length as usize;
        match ie.target {
            EagerTarget::Req(id) => {
                let Some(rr) = self.recv_mut(id) else {
                    // The receive failed meanwhile: the message still ends for the sender.
                    if last {
                        self.release_credit(p, eager_cost(r.total), sync, r.msg_id);
                    }
                    return true;
                };
                let cap = rr.buf.len;
                let buf = rr.buf;
                let n = cap.saturating_sub(r.offset).min(r.length as u64);
                rr.received += n;
                if last {
                    rr.arrived = true;
                }
                if n > 0 {
                    self.submit_copy(
                        id,
                        f,
                        payload.start..payload.start + n as usize,
                        buf,
                        r.offset,
                    );
                }
                if last {
                    self.try_finish_recv(id);
                    self.release_credit(p, eager_cost(r.total), sync, r.msg_id);
                }
            }
            EagerTarget::Store(u) => {
                let Some(x) = self.unex.get_mut(&u) else {
                    return true;
                };
                let at = r.offset as usize;
                x.data[at..at + r.length as usize].copy_from_slice(&f.as_ref()[payload]);
                x.received += r.length as u64;
                if last && let Some(id) = x.claimed {
                    self.complete_from_store(u, id);
                }
            }
        }
        true
    }

    fn submit_copy(
        &mut self,
        id: ReqId,
        f: L::Frame,
        range: core::ops::Range<usize>,
        buf: BufRef,
        off: u64,
    ) {
        match self.copy.copy_from_frame(f, range, &buf, off) {
            Ok(true) if self.copy_fifo.is_empty() => {}
            Ok(done) => {
                self.copy_fifo.push_back((id, done));
                if let Some(r) = self.recv_mut(id) {
                    r.copies += 1;
                }
            }
            Err(e) => self.fail_recv(id, Error::Copy(e.0)),
        }
    }

    /// Completes an eager receive whose bytes have all arrived, once its copies are done. While
    /// earlier copies are still in the device, it queues behind them: receives complete in the
    /// order their data arrived.
    fn try_finish_recv(&mut self, id: ReqId) {
        let fifo_busy = !self.copy_fifo.is_empty();
        let Some(r) = self.recv_mut(id) else { return };
        match r.state {
            RecvState::Eager if r.arrived && r.copies == 0 => {
                if fifo_busy {
                    r.copies += 1;
                    self.copy_fifo.push_back((id, true));
                } else {
                    self.finish_recv_now(id);
                }
            }
            RecvState::Pulling { .. } => self.maybe_finish_pull(id),
            _ => {}
        }
    }

    fn finish_recv_now(&mut self, id: ReqId) {
        let Some(r) = self.recv_mut(id) else { return };
        let info = r.info.expect("matched");
        let (received, truncated) = (r.received, info.len > r.buf.len);
        self.finish(
            id,
            Ok(Outcome::Received {
                info,
                received,
                truncated,
            }),
        );
    }

    fn copy_completions(&mut self) -> usize {
        if self.copy_fifo.is_empty() {
            return 0;
        }
        let mut outcomes = std::mem::take(&mut self.copy_done);
        self.copy.poll_completed(&mut outcomes);
        let mut it = outcomes.drain(..);
        let mut failed: smallvec::SmallVec<[(ReqId, String); 4]> = smallvec::SmallVec::new();
        for entry in self.copy_fifo.iter_mut() {
            if entry.1 {
                continue;
            }
            let Some(o) = it.next() else { break };
            entry.1 = true;
            if let Err(e) = o {
                failed.push((entry.0, e.0));
            }
        }
        drop(it);
        self.copy_done = outcomes;
        for (id, e) in failed {
            self.fail_recv(id, Error::Copy(e));
        }
        let mut work = 0;
        while let Some(&(id, true)) = self.copy_fifo.front() {
            self.copy_fifo.pop_front();
            work += 1;
            if let Some(r) = self.recv_mut(id) {
                r.copies -= 1;
                if r.copies == 0 && r.arrived {
                    match r.state {
                        RecvState::Eager => self.finish_recv_now(id),
                        _ => self.maybe_finish_pull(id),
                    }
                }
            }
        }
        work
    }

    /// Fails a receive that matched a message. A rendezvous sender is still told FIN (the
    /// message reached this node; the failure is the receiving rank's to see).
    fn fail_recv(&mut self, id: ReqId, e: Error) {
        let pull = match self.recv_mut(id) {
            Some(RecvReq {
                state: RecvState::Pulling { peer, msg_id, .. },
                ..
            }) => Some((*peer, *msg_id)),
            _ => None,
        };
        self.finish(id, Err(e));
        if let Some((peer, msg_id)) = pull {
            self.peers[peer].pulls.remove(&msg_id);
            self.send_fin(peer, msg_id);
        }
    }

    // ---- transmit path --------------------------------------------------------------------

    fn transmit(&mut self, link: &mut L, now: u64) -> usize {
        let mut sent = 0;
        for r in std::mem::take(&mut self.resets) {
            sent += self.emit(link, None, r, None) as usize;
        }
        let active = std::mem::take(&mut self.active);
        let budget = self.cfg.burst * 2;
        for &p in &active {
            self.peers[p].in_active = false;
            if self.tx.len() >= budget {
                self.mark_active(p);
                continue;
            }
            sent += self.transmit_peer(link, p, now, budget);
            let peer = &self.peers[p];
            let more = peer.state == PeerState::Connecting
                || peer.ack_due.is_some()
                || !peer.resend.is_empty()
                || (peer.state == PeerState::Connected
                    && !peer.pending.is_empty()
                    && (peer.unacked.len() as u32) < self.cfg.window.min(peer.remote_window));
            if more {
                self.mark_active(p);
            }
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

    fn header(&self, p: usize, kind: Kind) -> Repr {
        let peer = &self.peers[p];
        let session = self
            .eps
            .get(peer.ep as usize)
            .and_then(Option::as_ref)
            .map_or(0, |e| e.session);
        Repr {
            dst_mac: peer.addr.mac,
            src_mac: self.mac,
            kind: Some(kind),
            dst_ep: peer.addr.ep,
            src_ep: peer.ep,
            src_session: session,
            dst_session: peer.remote_session,
            ack: peer.rcv_next,
            credit: peer.credit_released,
            ..Repr::default()
        }
    }

    fn transmit_peer(&mut self, link: &mut L, p: usize, now: u64, budget: usize) -> usize {
        let mut sent = 0;
        let state = self.peers[p].state;
        if state == PeerState::Connecting {
            let peer = &self.peers[p];
            let backoff =
                (self.cfg.rto_initial_ns << peer.connect_tries.min(12)).min(self.cfg.rto_max_ns);
            if peer.connect_tries == 0 || now.saturating_sub(peer.connect_sent) >= backoff {
                let grant = self.grant_for_new_peer(p);
                let h = Repr {
                    dst_session: 0,
                    length: wire::CONNECT_PAYLOAD_LEN as u32,
                    ..self.header(p, Kind::Connect)
                };
                let c = ConnectRepr {
                    max_frame: self.cfg.max_frame as u32,
                    window: self.cfg.window,
                    eager_credit: grant,
                };
                c.emit(self.scratch_connect());
                let payload = self.scratch.clone();
                sent += self.emit(link, None, h, Some(&payload)) as usize;
                let peer = &mut self.peers[p];
                peer.connect_sent = now;
                peer.connect_tries += 1;
            }
        }
        if self.peers[p].connect_ack_owed && state == PeerState::Connected {
            let grant = self.grant_for_new_peer(p);
            let h = Repr {
                length: wire::CONNECT_PAYLOAD_LEN as u32,
                ..self.header(p, Kind::ConnectAck)
            };
            let c = ConnectRepr {
                max_frame: self.cfg.max_frame as u32,
                window: self.cfg.window,
                eager_credit: grant,
            };
            c.emit(self.scratch_connect());
            let payload = self.scratch.clone();
            if self.emit(link, None, h, Some(&payload)) {
                sent += 1;
                self.peers[p].connect_ack_owed = false;
            }
        }
        if state != PeerState::Connected {
            return sent;
        }
        let mut piggybacked = false;
        // Retransmissions first: they hold up the receiver's in-order delivery.
        while self.tx.len() < budget {
            let Some(seq) = self.peers[p].resend.pop_front() else {
                break;
            };
            let peer = &mut self.peers[p];
            let Some(front) = peer.unacked.front() else {
                continue;
            };
            let i = seq.wrapping_sub(front.seq) as usize;
            let Some(d) = peer.unacked.get_mut(i) else {
                continue;
            };
            if d.acked {
                continue;
            }
            let d = *d;
            match self.emit_desc(link, p, &d) {
                Emit::Sent => {
                    if let Some(x) = self.peers[p].unacked.get_mut(i) {
                        x.retries += 1;
                        x.last_sent = now;
                    }
                    self.stats.retransmits += 1;
                    sent += 1;
                    piggybacked = true;
                }
                Emit::NoBuffer => {
                    // Out of frames: try again next pass, nothing counted as sent.
                    self.peers[p].resend.push_front(seq);
                    break;
                }
                Emit::Gone => {
                    // Its operation failed after the frame went out: the receiver still needs
                    // the sequence number, so it becomes a no-op frame.
                    if let Some(x) = self.peers[p].unacked.get_mut(i) {
                        *x = TxDesc {
                            seq,
                            first_sent: x.first_sent,
                            last_sent: x.last_sent,
                            ..desc(Kind::Ping, 0)
                        };
                    }
                    self.peers[p].resend.push_front(seq);
                }
            }
        }
        let limit = self.cfg.window.min(self.peers[p].remote_window) as usize;
        while self.tx.len() < budget && self.peers[p].unacked.len() < limit {
            let Some(mut d) = self.peers[p].pending.pop_front() else {
                break;
            };
            if let Some(id) = d.req
                && self.req(id).is_none()
            {
                continue; // its operation failed meanwhile
            }
            d.seq = self.peers[p].next_seq;
            d.first_sent = now;
            d.last_sent = now;
            // The sequence number is taken only once the frame is built: a frame that finds
            // no buffer must not leave a hole that the receiver would buffer everything
            // behind (holding the very buffers the sender is short of).
            match self.emit_desc(link, p, &d) {
                Emit::Sent => {
                    let peer = &mut self.peers[p];
                    peer.next_seq = peer.next_seq.wrapping_add(1);
                    peer.unacked.push_back(d);
                    sent += 1;
                    piggybacked = true;
                }
                Emit::NoBuffer => {
                    self.peers[p].pending.push_front(d);
                    break;
                }
                Emit::Gone => {}
            }
        }
        let peer = &mut self.peers[p];
        if piggybacked {
            peer.ack_owed = 0;
            peer.ack_due = None;
            if peer.reorder.is_empty() {
                peer.ack_now = false;
            }
        }
        let due = peer.ack_now || peer.ack_due.is_some_and(|t| now >= t);
        if due && self.tx.len() < budget {
            let mut a = AckRepr::default();
            for &s in peer.reorder.keys() {
                a.set(s.wrapping_sub(peer.rcv_next).wrapping_sub(1));
            }
            let h = Repr {
                length: wire::ACK_PAYLOAD_LEN as u32,
                ..self.header(p, Kind::Ack)
            };
            let mut payload = [0u8; wire::ACK_PAYLOAD_LEN];
            a.emit(&mut payload);
            if self.emit(link, None, h, Some(&payload)) {
                sent += 1;
                self.stats.acks_sent += 1;
                let peer = &mut self.peers[p];
                peer.ack_owed = 0;
                peer.ack_due = None;
                peer.ack_now = false;
            }
        }
        sent
    }

    fn scratch_connect(&mut self) -> &mut [u8] {
        self.scratch.clear();
        self.scratch.resize(wire::CONNECT_PAYLOAD_LEN, 0);
        &mut self.scratch
    }

    /// Builds the frame a sequenced descriptor stands for.
    fn emit_desc(&mut self, link: &mut L, p: usize, d: &TxDesc) -> Emit {
        let mut h = self.header(p, d.kind);
        h.flags = d.flags;
        h.seq = d.seq;
        h.msg_id = d.msg_id;
        h.frag_index = d.frag_index;
        h.frag_count = d.frag_count;
        h.offset = d.offset;
        h.total = d.total;
        let mut src = None;
        if let Some(id) = d.req
            && let Some(Req {
                kind: ReqKind::Send(s),
                ..
            }) = self.req(id)
        {
            h.match_bits = s.bits;
            h.src_rank = s.rank;
            if matches!(d.kind, Kind::Eager | Kind::PullData) {
                h.length = d.len;
                src = Some(s.buf);
            }
        } else if d.req.is_some() {
            return Emit::Gone;
        }
        let len = wire::OVERHEAD + h.length as usize;
        let Some(mut buf) = link.alloc_tx(len.max(wire::MIN_FRAME)) else {
            self.stats.tx_no_buffers += 1;
            return Emit::NoBuffer;
        };
        let b = buf.as_mut();
        h.emit(b);
        if let Some(sb) = src
            && let Err(e) = self.copy.read(&sb, d.offset, &mut b[wire::OVERHEAD..len])
        {
            if let Some(id) = d.req {
                self.finish(id, Err(Error::Copy(e.0)));
            }
            return Emit::Gone;
        }
        Frame::new_unchecked(buf.as_mut()).fill_checksum();
        self.stats.tx_bytes += len as u64;
        self.tx.push(buf);
        Emit::Sent
    }

    /// Emits an unsequenced frame (connect, ack, reset).
    fn emit(&mut self, link: &mut L, _p: Option<usize>, h: Repr, payload: Option<&[u8]>) -> bool {
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

    // ---- timers ---------------------------------------------------------------------------

    fn timers(&mut self, now: u64) {
        if self.credit_pressure {
            self.reclaim_idle_credit(now);
        }
        let timeout = self.cfg.peer_timeout_ns;
        for p in 0..self.peers.len() {
            let peer = &mut self.peers[p];
            match peer.state {
                PeerState::Idle => continue,
                PeerState::Connecting => {
                    if now.saturating_sub(peer.connect_first) > timeout {
                        let a = peer.addr;
                        self.stats.peer_timeouts += 1;
                        self.reset_peer(p, Error::PeerUnreachable(a));
                    }
                    continue;
                }
                PeerState::Connected => {}
            }
            if peer.ack_due.is_some_and(|t| now >= t) {
                self.mark_active(p);
            }
            let peer = &mut self.peers[p];
            // On a timeout only the oldest few frames go again (a scheduling hiccup or one
            // lost ack must not resend a whole window), and the timeout doubles until the
            // cumulative ack moves; holes further on are filled by selective acks.
            let wait =
                (peer.rtt.rto(&self.cfg) << peer.rto_backoff.min(16)).min(self.cfg.rto_max_ns);
            let mut dead = false;
            let mut any = false;
            let mut fired = 0;
            for d in peer.unacked.iter() {
                if d.acked {
                    continue;
                }
                if now.saturating_sub(d.first_sent) > timeout {
                    dead = true;
                    break;
                }
                if fired < RTO_BURST
                    && now.saturating_sub(d.last_sent) >= wait
                    && !peer.resend.contains(&d.seq)
                {
                    peer.resend.push_back(d.seq);
                    fired += 1;
                }
            }
            if fired > 0 {
                peer.rto_backoff += 1;
                self.stats.rto_events += 1;
                any = true;
            }
            // Operations waiting on a peer that has gone quiet: make it answer, so a dead or
            // restarted peer is noticed (by the deadline, or by its reset).
            let waiting_on_peer =
                !peer.sends.is_empty() || !peer.pulls.is_empty() || peer.in_eager.is_some();
            if waiting_on_peer
                && peer.unacked.is_empty()
                && peer.pending.is_empty()
                && now.saturating_sub(peer.last_rx) > timeout / 4
            {
                peer.pending.push_back(desc(Kind::Ping, 0));
                peer.last_rx = now;
                any = true;
            }
            // A receiver waiting on data from a silent peer gives up too.
            if !dead
                && (!peer.pulls.is_empty() || peer.in_eager.is_some())
                && now.saturating_sub(peer.last_rx) > timeout
            {
                dead = true;
            }
            if dead {
                let a = peer.addr;
                self.stats.peer_timeouts += 1;
                self.reset_peer(p, Error::PeerUnreachable(a));
            } else if any {
                self.mark_active(p);
            }
        }
    }

    /// How long an idle loop may sleep without missing a timer of its own (an ack falling
    /// due, the retransmit scan while frames are unacknowledged, a connect or a waiting
    /// operation's keepalive): 0 means poll again at once, `u64::MAX` nothing timed.
    /// Frames arriving meanwhile are the link's business (it wakes the loop, or the loop
    /// bounds its sleep).
    pub fn sleep_budget_ns(&self, now: u64) -> u64 {
        if !self.copy_fifo.is_empty() || !self.resets.is_empty() || !self.completions.is_empty() {
            return 0;
        }
        let scan = self.cfg.rto_min_ns / 4;
        let mut budget = u64::MAX;
        for p in &self.peers {
            match p.state {
                PeerState::Idle => continue,
                PeerState::Connecting => budget = budget.min(scan),
                PeerState::Connected => {}
            }
            if p.ack_now || p.connect_ack_owed || !p.pending.is_empty() || !p.resend.is_empty() {
                return 0;
            }
            if let Some(t) = p.ack_due {
                budget = budget.min(t.saturating_sub(now));
            }
            if !p.unacked.is_empty()
                || !p.sends.is_empty()
                || !p.pulls.is_empty()
                || p.in_eager.is_some()
            {
                budget = budget.min(scan);
            }
        }
        budget
    }

    /// Operations still in flight (sends, receives) — for idle decisions and tests.
    pub fn pending_ops(&self) -> usize {
        self.reqs.iter().filter(|(_, r)| r.is_some()).count()
    }

    /// Bytes of the unexpected store granted to peers as eager credit right now.
    pub fn credit_granted_bytes(&self) -> u64 {
        self.grants_total
    }

    /// Bytes held by unexpected messages right now.
    pub fn unexpected_bytes(&self) -> u64 {
        self.unex_bytes
    }
}
