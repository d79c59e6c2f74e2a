//! Connections to peer nodes: the peer table (by MAC), the handshake (Connect / ConnectAck
//! carrying each node's session, frame size, window and eager grant), restarts and resets.
//! A session belongs to a pair of nodes, whatever the ranks on them: the first message to a
//! node sets it up, and every later message between any of their endpoints rides on it.

use super::Engine;
use super::peer::{EagerTarget, InEager, Peer, PeerState};
use super::request::ReqKind;
use super::types::{Error, ReqId};
use crate::addr::EndpointAddr;
use crate::copy::CopyEngine;
use crate::link::Link;
use crate::wire::{self, ConnectRepr, Frame, Kind, MacAddr, Repr, conn_id};

/// The address of a retired session's slot until it is reused. No node has it: frames from
/// it are dropped (rx.rs, `on_frame`) and sends to it refused (`Engine::isend`).
pub(super) const RETIRED: MacAddr = MacAddr([0; 6]);

/// A send's destination `mac`, refused if it is [`RETIRED`]'s (no node has it).
pub(super) fn check_dest(mac: MacAddr) -> Result<(), Error> {
    if mac == RETIRED {
        return Err(Error::Invalid(
            "destination: no node has the address 00:00:00:00:00:00",
        ));
    }
    Ok(())
}

impl<L: Link, C: CopyEngine<L::Frame>> Engine<L, C> {
    /// The peer node `mac`, added on first use.
    pub(super) fn peer_for(&mut self, mac: MacAddr) -> usize {
        debug_assert!(mac != RETIRED, "no peer has the all-zero address");
        if let Some(p) = self.find_peer(mac) {
            return p;
        }
        let frag = self.cfg.max_frame - wire::OVERHEAD;
        // The slot of a retired session if there is one.
        let p = if let Some(p) = self.free.pop() {
            self.peers[p] = Peer::new(mac, frag);
            p
        } else {
            if self.peers.len() == self.peers.capacity() {
                self.grow_peers();
            }
            self.peers.push(Peer::new(mac, frag));
            self.peers.len() - 1
        };
        let peers = &self.peers;
        self.peer_index.insert(mac, p, |q| peers[q].mac);
        self.stats.peers += 1;
        self.last_peer = p;
        p
    }

    /// Doubles the peer table's room. A large table is read at random (a peer per message):
    /// on huge pages its misses cost no TLB miss on top (65,536 peers: 12 MB, 3,072 small
    /// pages). The new table is advised for huge pages before anything is written to it,
    /// then the peers are moved in: pages first touched after the advice are huge from the
    /// start. (Advised after `Vec`'s own growth, the pages the reallocation had moved over
    /// stayed small: 6 of the 16 MB were huge at 65,536 peers.)
    #[cold]
    fn grow_peers(&mut self) {
        let cap = (self.peers.capacity() * 2).max(16);
        let mut grown = Vec::with_capacity(cap);
        tigon_shm::mem::advise_huge(&grown);
        grown.append(&mut self.peers);
        self.peers = grown;
    }

    /// The peer node `mac`, if known: the one last looked up if it is that node (no hash),
    /// else from the table.
    #[inline]
    pub(super) fn find_peer(&mut self, mac: MacAddr) -> Option<usize> {
        // The last one looked up may have been retired since (its address then RETIRED).
        if self.peers.get(self.last_peer).is_some_and(|p| p.mac == mac) && mac != RETIRED {
            return Some(self.last_peer);
        }
        let p = self.peer_of(mac)?;
        self.last_peer = p;
        Some(p)
    }

    /// The peer node `mac`, found in the slot its frame names (`Repr::slot`: this node's
    /// slot of the sender + 1, told at connect) when that slot holds it: no lookup by
    /// address. Else (no hint, a stale one, one from a sender that lies) as
    /// [`Engine::find_peer`].
    #[inline]
    pub(super) fn find_peer_hinted(&mut self, mac: MacAddr, slot: u32) -> Option<usize> {
        let s = (slot as usize).wrapping_sub(1);
        if self.peers.get(s).is_some_and(|p| p.mac == mac) && mac != RETIRED {
            return Some(s);
        }
        self.find_peer(mac)
    }

    /// Puts peer `p` on the list the next transmit pass visits: it has frames to send or an
    /// ack owed. The pass arms it for the timers if anything of it is still timed after it
    /// (`settle`): a peer whose ack went out in the same poll as the frame it acknowledges
    /// (with many peers, each sending now and then, nearly all of them) costs no timer visit.
    pub(super) fn mark_active(&mut self, p: usize) {
        let peer = &mut self.peers[p];
        if !peer.in_active {
            peer.in_active = true;
            self.active.push(p);
        }
    }

    /// After a transmit pass visited peer `p`: armed for the timers if anything of it is timed
    /// (or it holds buffers to give back later: the timers queue that when they disarm it);
    /// otherwise it went quiet, and its session's retirement check is queued (once per
    /// quiet spell).
    pub(super) fn settle(&mut self, p: usize, now: u64) {
        let peer = &mut self.peers[p];
        if peer.in_armed {
            return;
        }
        if peer.timed() && peer.only_waits() {
            self.wait_keepalive(p, now);
        } else if peer.timed() || peer.holds_collections() {
            peer.in_armed = true;
            self.armed.push(p);
        } else {
            self.went_quiet(p, now);
        }
    }

    /// Peer `p` has nothing timed and holds no buffers after a transmit pass: unless the
    /// timers still visit it, its session's retirement check is queued (once per quiet spell).
    #[inline]
    pub(super) fn went_quiet(&mut self, p: usize, now: u64) {
        let peer = &mut self.peers[p];
        if !peer.in_armed && self.cfg.session_idle_ns != 0 && !peer.conn.retire_queued {
            peer.conn.retire_queued = true;
            self.retire_check.push_back((p, now));
        }
    }

    pub(super) fn start_connect(&mut self, p: usize, now: u64) {
        use rand::Rng;
        let isn = self.rng.r#gen::<u32>();
        self.peers[p].stream.start(isn);
        let peer = &mut self.peers[p];
        // The first credit is known before the peer's grant (`wire::FIRST_CREDIT`); one
        // frame may ride behind the Connect (tx.rs), and it names no connection of the peer's
        // yet (a renewed session forgets the old one).
        peer.credit.grant = wire::FIRST_CREDIT;
        let conn = &mut peer.conn;
        conn.remote = 0;
        conn.remote_slot = 0;
        conn.remote_window = 1;
        conn.local = conn_id(self.session, isn);
        conn.state = PeerState::Connecting;
        conn.last_rx = now;
        conn.connect_sent = 0;
        conn.connect_tries = 0;
        self.mark_active(p);
    }

    /// The handshake is done: the peer's session `session`, its stream starting at
    /// `peer_isn`, its limits `c`.
    fn accept(&mut self, p: usize, session: u32, peer_isn: u32, c: ConnectRepr, now: u64) {
        use rand::Rng;
        self.grant_for_new_peer(p);
        if self.peers[p].conn.state == PeerState::Idle {
            // Answering a Connect: this side's stream starts now (a side that sent its own
            // Connect started it then).
            let isn = self.rng.r#gen::<u32>();
            self.peers[p].stream.start(isn);
            self.peers[p].conn.local = conn_id(self.session, isn);
        }
        let max_frame = self.cfg.max_frame.min(c.max_frame as usize);
        let peer = &mut self.peers[p];
        peer.stream.rcv_next = peer_isn;
        peer.conn.remote = conn_id(session, peer_isn);
        peer.conn.remote_slot = c.slot;
        peer.conn.state = PeerState::Connected;
        peer.conn.remote_session = session;
        peer.conn.frag = (max_frame - wire::OVERHEAD).min(u16::MAX as usize) as u16;
        peer.conn.remote_window = c.window.min(u16::MAX as u32) as u16;
        peer.conn.last_rx = now;
        peer.stream.set_peer_ack_delay(c.max_ack_delay_us);
        // A peer of this version grants at least the first credit (already spent, maybe).
        peer.credit.grant = c.eager_credit.max(wire::FIRST_CREDIT);
        self.flush_waiting(p);
        self.mark_active(p);
    }

    pub(super) fn on_connect(&mut self, r: Repr, from: MacAddr, f: &[u8], now: u64) {
        let Ok(c) = ConnectRepr::parse(Frame::new_unchecked(f).payload()) else {
            self.stats.drop_malformed += 1;
            return;
        };
        let p = self.peer_for(from);
        let conn = &self.peers[p].conn;
        let restarted = conn.state == PeerState::Connected && conn.remote_session != r.src_session;
        if restarted {
            self.stats.peer_restarts += 1;
            self.reset_peer(p, Error::PeerRestarted);
        } else if conn.state == PeerState::Connected && conn_id(r.src_session, r.seq) != conn.remote
        {
            // The same incarnation of the peer, a stream starting elsewhere: not a copy of
            // the Connect this session began with, but a new session (the peer retired ours).
            self.renew_session(p);
        }
        if self.peers[p].conn.state != PeerState::Connected {
            self.accept(p, r.src_session, r.seq, c, now);
        }
        self.peers[p].conn.connect_ack_owed = true;
        self.mark_active(p);
        if restarted {
            self.resolve_held(from, r.src_session);
        }
    }

    pub(super) fn on_connect_ack(&mut self, r: Repr, from: MacAddr, f: &[u8], now: u64) {
        if r.dst_session != self.session {
            self.stats.drop_stale += 1;
            return;
        }
        let Ok(c) = ConnectRepr::parse(Frame::new_unchecked(f).payload()) else {
            self.stats.drop_malformed += 1;
            return;
        };
        let Some(p) = self.peer_of(from) else {
            return;
        };
        match self.peers[p].conn.state {
            // An answer to this Connect, not to an earlier one: its ack is where our stream
            // starts, or past the frame that rode behind the Connect (random starts: an
            // earlier connection's answer falls elsewhere).
            PeerState::Connecting if !self.peers[p].stream.acks_within(r.ack) => {
                self.stats.drop_stale += 1;
            }
            PeerState::Connecting => {
                // The handshake's round trip is the stream's first RTT sample (the answer
                // goes at once), if the Connect went once (Karn).
                let conn = &self.peers[p].conn;
                if conn.connect_tries == 1 {
                    let rtt = now.saturating_sub(conn.connect_sent);
                    self.peers[p].stream.rtt_sample(rtt);
                }
                self.accept(p, r.src_session, r.seq, c, now);
                // What the peer took of what rode along, and the credit it released.
                self.on_ack(p, r.ack, r.credit, None, None, now);
            }
            PeerState::Connected if self.peers[p].conn.remote_session != r.src_session => {
                self.stats.peer_restarts += 1;
                self.reset_peer(p, Error::PeerRestarted);
                self.accept(p, r.src_session, r.seq, c, now);
                self.resolve_held(from, r.src_session);
            }
            _ => {}
        }
    }

    /// A Reset from node `from`: a new incarnation of a connected peer voids the old one;
    /// the same incarnation says it retired the session, and a new one starts.
    pub(super) fn on_reset(&mut self, r: Repr, from: MacAddr, now: u64) {
        let Some(p) = self.peer_of(from) else {
            return;
        };
        let conn = &self.peers[p].conn;
        if conn.state != PeerState::Connected || r.dst_session != conn.local {
            // About another connection (an earlier one, or a copy): nothing of this one.
            return;
        }
        if conn.remote_session != r.src_session {
            self.stats.peer_restarts += 1;
            self.reset_peer(p, Error::PeerRestarted);
            self.resolve_held(from, r.src_session);
        } else {
            self.renew_session(p);
            self.start_connect(p, now);
        }
    }

    /// Peer `p` retired the session (a Reset from its same incarnation, or a Connect that
    /// starts a new stream). It retires only a session with nothing in flight, idle for
    /// longer than the peer timeout, so every frame of ours it never acknowledged was sent
    /// after it forgot the session and was refused: those go again, in order, in the new
    /// session, ahead of what was still queued. Credit starts over both ways (the grant it
    /// gave is gone; a message already charged to it is not charged again).
    pub(super) fn renew_session(&mut self, p: usize) {
        self.stats.sessions_renewed += 1;
        let peer = &mut self.peers[p];
        peer.stream.requeue_unacked();
        peer.conn.state = PeerState::Idle;
        peer.conn.connect_ack_owed = false;
        self.grants_total -= peer.credit.reset() as u64;
        self.mark_active(p);
    }

    /// Whether peer `p`'s session may be retired now: idle both ways for `session_idle_ns`,
    /// nothing queued, unacknowledged, owed or waiting, no message of it in the store.
    pub(super) fn retirable(&self, p: usize, now: u64) -> bool {
        let peer = &self.peers[p];
        let idle = self.cfg.session_idle_ns;
        idle != 0
            && peer.mac != self.mac
            && peer.mac != RETIRED
            && !peer.in_active
            && !peer.in_armed
            && !peer.timed()
            && peer.conn.state != PeerState::Connecting
            && !peer.conn.connect_ack_owed
            && !peer.credit.reclaiming
            && !self.unex.holds_from(p)
            && now.saturating_sub(peer.conn.last_rx) >= idle
    }

    /// Forgets peer `p`'s session and frees its slot (see `Config::session_idle_ns`).
    pub(super) fn retire(&mut self, p: usize) {
        let mac = self.peers[p].mac;
        self.grants_total -= self.peers[p].credit.reset() as u64;
        let peers = &self.peers;
        self.peer_index.remove(mac, |q| peers[q].mac);
        let frag = self.cfg.max_frame - wire::OVERHEAD;
        self.peers[p] = Peer::new(RETIRED, frag);
        self.free.push(p);
        // `peers` counts the peer nodes known now: a session retired and set up again later
        // counts once.
        self.stats.peers = self.stats.peers.saturating_sub(1);
        self.stats.sessions_retired += 1;
    }

    /// Checks a send's destination against the incarnation its address named (see
    /// [`crate::Dest`]; 0: not known, nothing to check), before the send. Connected to an
    /// earlier incarnation of that node, this side has not heard yet that it restarted (its
    /// next frame would have been refused, and the Reset would then have failed every
    /// message queued to the node, this one with them): the session is void now, its
    /// operations fail with `PeerRestarted`, and the send sets up a session with the new
    /// incarnation. Connected to a later one, the address outlived its node's engine: the
    /// send fails with `PeerRestarted` rather than reach the new incarnation's endpoint of
    /// the same id. Not connected (or connecting): whatever answers is the node. (The
    /// agent sends with [`Engine::isend_to`], which asks the node before refusing an
    /// earlier incarnation: a start after a clock stepped back has one too.)
    pub fn check_incarnation(&mut self, dest: EndpointAddr, incarnation: u32) -> Result<(), Error> {
        if incarnation == 0 {
            return Ok(());
        }
        let Some(p) = self.find_peer(dest.mac) else {
            return Ok(());
        };
        let conn = &self.peers[p].conn;
        if conn.state != PeerState::Connected || conn.remote_session == incarnation {
            return Ok(());
        }
        if crate::addr::newer(incarnation, conn.remote_session) {
            self.stats.peer_restarts += 1;
            self.reset_peer(p, Error::PeerRestarted);
            self.resolve_held(dest.mac, incarnation);
            Ok(())
        } else {
            self.stats.stale_addresses += 1;
            Err(Error::PeerRestarted(dest))
        }
    }

    /// Tells the sender of `r` that it addressed an earlier incarnation of this node.
    pub(super) fn send_reset(&mut self, r: Repr) {
        // Resets are rare; they go out through a one-off peer-less path in `transmit`.
        self.resets.push(Repr {
            dst_mac: r.src_mac,
            src_mac: self.mac,
            kind: Some(Kind::Reset),
            dst_ep: r.src_ep,
            src_ep: r.dst_ep,
            src_session: self.session,
            dst_session: r.src_session,
            ..Repr::default()
        });
    }

    /// The remote endpoint request `id` talks to over peer node `mac`: a send's destination,
    /// a receive's source.
    pub(super) fn remote_of(&self, id: ReqId, mac: MacAddr) -> EndpointAddr {
        match self.reqs.get(id).map(|r| &r.kind) {
            Some(ReqKind::Send(s)) => EndpointAddr::new(mac, s.dst_ep),
            Some(ReqKind::Recv(r)) => r.info.map_or(EndpointAddr::new(mac, 0), |i| i.source),
            None => EndpointAddr::new(mac, 0),
        }
    }

    /// Fails everything in flight with peer node `p` (each operation with `why` of the remote
    /// endpoint it talked to) and forgets the session.
    pub(super) fn reset_peer(&mut self, p: usize, why: impl Fn(EndpointAddr) -> Error) {
        let peer = &mut self.peers[p];
        let mac = peer.mac;
        let mut failed: Vec<ReqId> = peer.eager_sends().collect();
        let msgs = &mut peer.msgs;
        failed.extend(msgs.q.waiting.iter().copied());
        failed.extend(msgs.q.sends.values().copied());
        failed.extend(msgs.q.pulls.values().copied());
        if let Some(InEager {
            target: EagerTarget::Req(r),
            ..
        }) = msgs.in_eager
        {
            failed.push(r);
        }
        let in_store = match msgs.in_eager {
            Some(InEager {
                target: EagerTarget::Store(u),
                ..
            }) => Some(u),
            _ => None,
        };
        msgs.q.release();
        msgs.pull_inflight = 0;
        msgs.in_eager = None;
        peer.stream.reset();
        peer.conn.connect_ack_owed = false;
        peer.conn.state = PeerState::Idle;
        peer.conn.remote_session = 0;
        self.grants_total -= peer.credit.reset() as u64;
        // A half-arrived unexpected message from the dead incarnation: drop it, and fail
        // whoever had claimed it. Its rendezvous messages go too: their data stayed with the
        // dead sender, and a Pull for one would ask the peer's next incarnation for a message
        // id of its own (or wait on an idle peer forever).
        let dead = in_store.into_iter().chain(self.unex.rts_from(p));
        for u in dead.collect::<Vec<_>>() {
            if let Some(c) = self.unex.get(u).and_then(|x| x.claimed) {
                failed.push(c);
            }
            if let Some(ep) = self.unex.get(u).map(|x| x.ep)
                && let Ok(e) = self.eps.get_mut(ep)
            {
                e.unexpected.retain(|&x| x != u);
            }
            self.unex.probed.retain(|_, x| *x != u);
            self.unex.remove(u);
        }
        self.unex.orphan_from(p);
        failed.sort_unstable_by_key(|r| r.as_u64());
        failed.dedup();
        for r in failed {
            let e = why(self.remote_of(r, mac));
            self.finish(r, Err(e));
        }
        // Copies of the failed receives stay in the FIFO: it mirrors the copy engine's queue
        // one for one, and their completions find no request.
    }

    /// Local endpoint `ep` is closing: its operations with every peer node fail; the senders
    /// of messages it was pulling are told (FIN flagged NO_ENDPOINT), so that they fail too
    /// instead of waiting. The sessions stay: the node's other endpoints use them. Only the
    /// peers with something in flight are visited: those are armed for the timers, or marked
    /// active and not through a transmit pass yet (65,536 quiet peers cost nothing here).
    pub(super) fn fail_endpoint_ops(&mut self, ep: u16) {
        self.fail_held_of(ep);
        let mine = |e: &Self, id: ReqId| e.reqs.get(id).is_some_and(|r| r.ep == ep);
        let waits = self.waits.iter().map(|&(p, _)| p);
        let mut busy: Vec<usize> = self
            .armed
            .iter()
            .chain(&self.active)
            .copied()
            .chain(waits)
            .collect();
        busy.sort_unstable();
        busy.dedup();
        for p in busy {
            let peer = &self.peers[p];
            if !peer.waiting_on_peer()
                && peer.msgs.q.waiting.is_empty()
                && !peer.stream.has_new()
                && peer.stream.q.unacked.is_empty()
            {
                continue;
            }
            let m = &peer.msgs;
            let mut sends: Vec<ReqId> = peer.eager_sends().collect();
            sends.extend(m.q.sends.values().copied());
            sends.extend(m.q.waiting.iter().copied());
            sends.retain(|&id| mine(self, id));
            let pulls: Vec<(u32, ReqId)> =
                m.q.pulls
                    .iter()
                    .map(|(&k, &v)| (k, v))
                    .filter(|&(_, id)| mine(self, id))
                    .collect();
            if let Some(ie) = self.peers[p].msgs.in_eager.as_mut()
                && let EagerTarget::Req(id) = ie.target
                && self.reqs.get(id).is_some_and(|r| r.ep == ep)
            {
                ie.target = EagerTarget::Discard;
                sends.push(id);
            }
            sends.sort_unstable_by_key(|r| r.as_u64());
            sends.dedup();
            for id in sends {
                self.finish(id, Err(Error::EndpointClosed));
            }
            let any_pull = !pulls.is_empty();
            for (msg_id, id) in pulls {
                self.end_pull(id);
                self.finish(id, Err(Error::EndpointClosed));
                self.refuse_msg(p, msg_id);
            }
            if any_pull {
                // The budget they held goes to the other endpoints' pulls.
                self.pump_pulls(p);
            }
        }
    }

    /// Tells the sender of message `msg_id` over peer `p` that no endpoint here takes it.
    pub(super) fn refuse_msg(&mut self, p: usize, msg_id: u32) {
        self.stats.drop_no_endpoint += 1;
        if self.peers[p].conn.state == PeerState::Connected {
            let mut d = super::stream::TxDesc::new(Kind::Fin, msg_id);
            d.flags = wire::FLAG_NO_ENDPOINT;
            self.peers[p].stream.q.pending.push_back(d);
            self.mark_active(p);
        }
    }
}
