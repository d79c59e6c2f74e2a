//! Sends whose address names an earlier incarnation of their node than the session held
//! (see [`crate::Dest`]): asked of the node before they go.
//!
//! An incarnation is a start time, so an earlier one is usually an address that outlived its
//! node's engine (a rank of an old job): the send must fail rather than reach the current
//! start's endpoint of the same id. But it is also what a node restarted after its clock was
//! stepped back publishes: then the session held is with a start that is gone, and the send
//! is for the new one. The numbers cannot tell the two apart; the node can. The session held
//! is probed: an answer on it says that start is alive (the address is stale: the send fails
//! with `PeerRestarted`); a Reset or a Connect from another start voids the session, and the
//! sends that named that start go to it on a new session, in the order they were made.

use super::Engine;
use super::peer::PeerState;
use super::request::{Req, ReqKind, SendReq};
use super::types::{Error, ReqId, SendMode};
use crate::addr::{Dest, EndpointAddr};
use crate::copy::{BufRef, CopyEngine};
use crate::link::Link;

/// What a send's address names against the session held with its node.
enum Named {
    Same,
    Later,
    Earlier,
}

/// A send held while its node is asked which start it is.
#[derive(Debug, Clone, Copy)]
pub(super) struct Held {
    id: ReqId,
    dest: EndpointAddr,
    /// The incarnation the send's address named.
    named: u32,
    /// The session's incarnation when the send came (the one probed).
    session: u32,
    /// When it came: an answer on the session after this says that start is alive.
    since: u64,
}

impl<L: Link, C: CopyEngine<L::Frame>> Engine<L, C> {
    /// Sends `buf` to `dest`, checking the incarnation its address names first: as
    /// [`Engine::isend`] after [`Engine::check_incarnation`], except that an address naming
    /// an earlier incarnation than the session's is not refused at once: the send waits
    /// while the node is asked (see the module's text), then goes or fails with
    /// `PeerRestarted`.
    pub fn isend_to(
        &mut self,
        ep: u16,
        dest: Dest,
        bits: u64,
        rank: u32,
        buf: BufRef,
        mode: SendMode,
    ) -> Result<ReqId, Error> {
        let addr = dest.addr;
        super::conn::check_dest(addr.mac)?;
        // Sends to a start already being asked about wait behind the first (MPI's order).
        let behind = !self.verifying.is_empty()
            && self
                .verifying
                .iter()
                .any(|h| h.dest.mac == addr.mac && h.named == dest.incarnation);
        if !behind {
            match self.session_named(addr, dest.incarnation) {
                Named::Same => return self.isend(ep, addr, bits, rank, buf, mode),
                Named::Later => {
                    self.check_incarnation(addr, dest.incarnation)?;
                    return self.isend(ep, addr, bits, rank, buf, mode);
                }
                Named::Earlier => {}
            }
        }
        self.eps.get(ep)?;
        let p = self.peer_for(addr.mac);
        let session = self.peers[p].conn.remote_session;
        let id = self.reqs.alloc(Req {
            ep,
            // Its message id is given when it is released (`release_held`).
            kind: ReqKind::Send(SendReq::new(
                p,
                addr.ep,
                0,
                buf,
                bits,
                rank,
                mode == SendMode::Synchronous,
            )),
        });
        self.stats.sends_posted += 1;
        self.verifying.push(Held {
            id,
            dest: addr,
            named: dest.incarnation,
            session,
            since: self.now,
        });
        self.probe_session(p);
        Ok(id)
    }

    /// How `incarnation` compares with the session held with `addr`'s node (`Same`: no
    /// session, none named, or that one).
    fn session_named(&mut self, addr: EndpointAddr, incarnation: u32) -> Named {
        if incarnation == 0 {
            return Named::Same;
        }
        let Some(p) = self.find_peer(addr.mac) else {
            return Named::Same;
        };
        let conn = &self.peers[p].conn;
        if conn.state != PeerState::Connected || conn.remote_session == incarnation {
            Named::Same
        } else if crate::addr::newer(incarnation, conn.remote_session) {
            Named::Later
        } else {
            Named::Earlier
        }
    }

    /// Asks peer `p`'s start whether it is there (the retransmit timer's probe: answered on
    /// the session by a live start, with a Reset by another).
    fn probe_session(&mut self, p: usize) {
        self.peers[p].stream.probe = true;
        self.mark_active(p);
    }

    /// Keeps the held sends `keep` says to keep, in order; `keep` may release or fail the
    /// others (sends held meanwhile stay behind them).
    fn sweep_held(&mut self, mut keep: impl FnMut(&mut Self, &Held) -> bool) {
        if self.verifying.is_empty() {
            return;
        }
        let mut held = std::mem::take(&mut self.verifying);
        held.retain(|h| keep(self, h));
        held.append(&mut self.verifying);
        self.verifying = held;
    }

    /// Node `mac` answered as start `now_session` on a new session: the sends held for it
    /// that named that start go to it, in order; the others fail with `PeerRestarted` (their
    /// start is gone).
    pub(super) fn resolve_held(&mut self, mac: crate::wire::MacAddr, now_session: u32) {
        self.sweep_held(|e, h| {
            if h.dest.mac != mac {
                return true;
            }
            if h.named == now_session {
                e.release_held(h.id, mac);
            } else {
                e.stats.stale_addresses += 1;
                e.finish(h.id, Err(Error::PeerRestarted(h.dest)));
            }
            false
        });
    }

    /// A held send whose start answered: queued to its node as [`Engine::isend`] queues one
    /// that waits for the connection.
    fn release_held(&mut self, id: ReqId, mac: crate::wire::MacAddr) {
        let p = self.peer_for(mac);
        let msgs = &mut self.peers[p].msgs;
        let msg_id = msgs.next_msg_id;
        msgs.next_msg_id = msgs.next_msg_id.wrapping_add(1).max(1);
        if let Some(s) = self.reqs.send_mut(id) {
            s.peer = p;
            s.msg_id = msg_id;
        }
        if self.peers[p].conn.state == PeerState::Idle {
            self.start_connect(p, self.now);
        }
        self.peers[p].msgs.q.waiting.push_back(id);
        if self.peers[p].conn.state == PeerState::Connected {
            self.flush_waiting(p);
        }
        self.mark_active(p);
    }

    /// The timers' look at the held sends: a start that answered on the session it was asked
    /// on is alive (its sends fail: their addresses are stale); a session that ended meanwhile
    /// without a new start saying so fails them too; one that stays silent is asked again
    /// every retransmit timeout, and its sends fail as unreachable after the peer timeout.
    pub(super) fn held_timers(&mut self, now: u64) {
        let (rto, timeout) = (self.cfg.rto_min_ns, self.cfg.peer_timeout_ns);
        self.sweep_held(|e, h| {
            let p = e.find_peer(h.dest.mac);
            let conn = p.map(|p| &e.peers[p].conn);
            let same = conn
                .is_some_and(|c| c.state == PeerState::Connected && c.remote_session == h.session);
            let err = if same && conn.is_some_and(|c| c.last_rx > h.since) {
                e.stats.stale_addresses += 1;
                Error::PeerRestarted(h.dest)
            } else if !same {
                Error::PeerRestarted(h.dest)
            } else if now.saturating_sub(h.since) >= timeout {
                Error::PeerUnreachable(h.dest)
            } else {
                if let Some(p) = p
                    && now.saturating_sub(e.peers[p].stream.last_rto.max(h.since)) >= rto
                {
                    e.probe_session(p);
                }
                return true;
            };
            e.finish(h.id, Err(err));
            false
        });
    }

    /// Local endpoint `ep` is closing: its held sends fail.
    pub(super) fn fail_held_of(&mut self, ep: u16) {
        self.sweep_held(|e, h| {
            if e.reqs.get(h.id).is_some_and(|r| r.ep == ep) {
                e.finish(h.id, Err(Error::EndpointClosed));
                return false;
            }
            true
        });
    }

    /// Sends held while their nodes are asked which start they are.
    pub fn held_sends(&self) -> usize {
        self.verifying.len()
    }
}
