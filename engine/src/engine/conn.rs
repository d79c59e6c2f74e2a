//! Connections: the peer table, the handshake (Connect / ConnectAck carrying each side's
//! session, frame size, window and eager grant), restarts and resets.

use super::Engine;
use super::peer::{EagerTarget, InEager, Peer, PeerState};
use super::types::{Error, ReqId};
use crate::addr::EndpointAddr;
use crate::copy::CopyEngine;
use crate::link::Link;
use crate::wire::{self, ConnectRepr, Frame, Kind, Repr};

impl<L: Link, C: CopyEngine<L::Frame>> Engine<L, C> {
    /// The peer `addr` of local endpoint `ep`, added on first use.
    pub(super) fn peer_for(&mut self, ep: u16, addr: EndpointAddr) -> usize {
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

    /// Puts peer `p` on the list the next transmit pass visits.
    /// The peer has frames to send or an ack owed; anything it does may also start a timer,
    /// so it is armed too (the timers drop it again once nothing of it is timed).
    pub(super) fn mark_active(&mut self, p: usize) {
        let peer = &mut self.peers[p];
        if !peer.in_active {
            peer.in_active = true;
            self.active.push(p);
        }
        if !peer.in_armed {
            peer.in_armed = true;
            self.armed.push(p);
        }
    }

    pub(super) fn start_connect(&mut self, p: usize, now: u64) {
        let conn = &mut self.peers[p].conn;
        conn.state = PeerState::Connecting;
        conn.connect_first = now;
        conn.connect_sent = 0;
        conn.connect_tries = 0;
        self.mark_active(p);
    }

    fn accept(&mut self, p: usize, session: u32, c: ConnectRepr, now: u64) {
        self.grant_for_new_peer(p);
        let max_frame = self.cfg.max_frame.min(c.max_frame as usize);
        let peer = &mut self.peers[p];
        peer.conn.state = PeerState::Connected;
        peer.conn.remote_session = session;
        peer.conn.frag = max_frame - wire::OVERHEAD;
        peer.conn.remote_window = c.window;
        peer.conn.last_rx = now;
        peer.credit.grant = c.eager_credit;
        self.flush_waiting(p);
        self.mark_active(p);
    }

    pub(super) fn on_connect(&mut self, r: Repr, from: EndpointAddr, f: &[u8], now: u64) {
        let Ok(c) = ConnectRepr::parse(Frame::new_unchecked(f).payload()) else {
            self.stats.drop_malformed += 1;
            return;
        };
        let p = self.peer_for(r.dst_ep, from);
        let conn = &self.peers[p].conn;
        if conn.state == PeerState::Connected && conn.remote_session != r.src_session {
            self.stats.peer_restarts += 1;
            self.reset_peer(p, Error::PeerRestarted(from));
        }
        if self.peers[p].conn.state != PeerState::Connected {
            self.accept(p, r.src_session, c, now);
        }
        self.peers[p].conn.connect_ack_owed = true;
        self.mark_active(p);
    }

    pub(super) fn on_connect_ack(
        &mut self,
        r: Repr,
        from: EndpointAddr,
        my_session: u32,
        f: &[u8],
        now: u64,
    ) {
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
        match self.peers[p].conn.state {
            PeerState::Connecting => self.accept(p, r.src_session, c, now),
            PeerState::Connected if self.peers[p].conn.remote_session != r.src_session => {
                self.stats.peer_restarts += 1;
                self.reset_peer(p, Error::PeerRestarted(from));
                self.accept(p, r.src_session, c, now);
            }
            _ => {}
        }
    }

    /// A Reset from `from`: a new incarnation of a connected peer voids the old one.
    pub(super) fn on_reset(&mut self, r: Repr, from: EndpointAddr, my_session: u32) {
        if r.dst_session != my_session {
            return;
        }
        if let Some(&p) = self.peer_index.get(&(r.dst_ep, from))
            && self.peers[p].conn.state == PeerState::Connected
            && self.peers[p].conn.remote_session != r.src_session
        {
            self.stats.peer_restarts += 1;
            self.reset_peer(p, Error::PeerRestarted(from));
        }
    }

    /// Tells the sender of `r` that it addressed an earlier incarnation of this endpoint.
    pub(super) fn send_reset(&mut self, r: Repr, my_session: u32) {
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

    /// Fails everything in flight with peer `p` and forgets its connection state.
    pub(super) fn reset_peer(&mut self, p: usize, why: Error) {
        let peer = &mut self.peers[p];
        let msgs = &mut peer.msgs;
        let mut failed: Vec<ReqId> = msgs.waiting.drain(..).collect();
        failed.extend(msgs.sends.values().copied());
        failed.extend(msgs.pulls.values().copied());
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
        msgs.sends.clear();
        msgs.pulls.clear();
        msgs.in_eager = None;
        peer.stream.reset();
        peer.conn.connect_ack_owed = false;
        peer.conn.state = PeerState::Idle;
        peer.conn.remote_session = 0;
        self.grants_total -= peer.credit.reset() as u64;
        if let Some(u) = in_store {
            // A half-arrived unexpected message from the dead incarnation: drop it, and fail
            // whoever had claimed it.
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
        for r in failed {
            self.finish(r, Err(why.clone()));
        }
        // Copies of the failed receives stay in the FIFO: it mirrors the copy engine's queue
        // one for one, and their completions find no request.
    }
}
