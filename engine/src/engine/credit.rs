//! Eager credit: each peer may send eager messages up to the grant this side gave it from the
//! unexpected store. Grants start small, double for a peer that runs short (it sent an
//! eager-sized message by rendezvous, flagged NO_CREDIT), and are asked back from idle peers
//! when the store runs out. The receiver releases credit as it consumes messages (the
//! cumulative `credit` field of every header).

use super::Engine;
use super::peer::PeerState;
use super::stream::{Due, TxDesc};
use crate::copy::CopyEngine;
use crate::link::Link;
use crate::wire::{self, Kind, Repr};

impl<L: Link, C: CopyEngine<L::Frame>> Engine<L, C> {
    /// What a new peer is granted: the full initial grant while less than half the store is
    /// granted, the floor after that (thousands of peers then still start with eager credit,
    /// and the ones that talk grow theirs).
    fn initial_grant(&self) -> u32 {
        let full = self.cfg.eager_credit_initial.min(self.cfg.eager_credit);
        if self.grants_total < self.cfg.unexpected_bytes / 2 {
            full
        } else {
            self.cfg.eager_credit_floor.min(full)
        }
    }

    /// The grant a peer gets with the handshake, taken from the store once per session.
    pub(super) fn grant_for_new_peer(&mut self, p: usize) -> u32 {
        if !self.peers[p].credit.granted {
            self.peers[p].credit.granted = true;
            let left = self.cfg.unexpected_bytes.saturating_sub(self.grants_total);
            // Never below the credit every connection starts with (a little beyond the
            // store, if it is exhausted: at most that much per peer).
            let g = ((self.initial_grant() as u64).min(left) as u32).max(wire::FIRST_CREDIT);
            self.peers[p].credit.given = g;
            self.grants_total += g as u64;
        }
        self.peers[p].credit.given
    }

    /// Peer `p` sent an eager-sized message by rendezvous for lack of credit: double its grant
    /// (up to `eager_credit`) from what the store has left. When the store is exhausted, idle
    /// peers are asked for theirs at the next timer pass.
    pub(super) fn grow_grant(&mut self, p: usize) {
        let max = self.cfg.eager_credit;
        let given = self.peers[p].credit.given;
        if given >= max || self.peers[p].credit.reclaiming {
            return;
        }
        let floor = self.cfg.eager_credit_floor.max(1);
        let want = given.max(floor).min(max - given) as u64;
        let left = self.cfg.unexpected_bytes.saturating_sub(self.grants_total);
        if left < want {
            self.credit_pressure = true;
        }
        let give = want.min(left) as u32;
        if give == 0 {
            return;
        }
        self.peers[p].credit.given += give;
        self.grants_total += give as u64;
        self.stats.credit_grants += 1;
        self.peers[p].stream.queue(TxDesc {
            total: give as u64,
            ..TxDesc::new(Kind::Grant, 0)
        });
        self.mark_active(p);
    }

    /// The store's grants are exhausted: ask every peer that sent no eager message for
    /// `credit_idle_ns` to give its credit back (it answers with what it is not using). One
    /// call visits at most `RECLAIM_SCAN` peers from where the last one stopped (the next timer
    /// pass goes on with the round), so no timer pass costs time in proportion to the number
    /// of peers.
    pub(super) fn reclaim_idle_credit(&mut self, now: u64) {
        const RECLAIM_SCAN: usize = 1024;
        let idle = self.cfg.credit_idle_ns;
        let start = self.reclaim_cursor;
        let end = (start + RECLAIM_SCAN).min(self.peers.len());
        for p in start..end {
            let peer = &mut self.peers[p];
            if peer.conn.state != PeerState::Connected
                || peer.credit.reclaiming
                || peer.credit.given == 0
                || now.saturating_sub(peer.credit.last_eager_rx) < idle
            {
                continue;
            }
            peer.credit.reclaiming = true;
            peer.stream.queue(TxDesc {
                flags: wire::FLAG_RETURN,
                total: peer.credit.given as u64,
                ..TxDesc::new(Kind::Grant, 0)
            });
            self.stats.credit_reclaims += 1;
            self.mark_active(p);
        }
        self.reclaim_cursor = if end >= self.peers.len() { 0 } else { end };
    }

    /// The receiver is done with an eager message: return its credit; tell a synchronous sender.
    pub(super) fn release_credit(&mut self, p: usize, cost: u32, sync: bool, msg_id: u32) {
        let Some(told_long) = self.peers.get(p).map(|q| q.stream.hold_long) else {
            return;
        };
        let hold = self.ack_hold_ns(told_long);
        let peer = &mut self.peers[p];
        peer.credit.released = peer.credit.released.wrapping_add(cost);
        // The released credit rides on the next ack, which goes out with traffic, by the
        // burst, or when the loop runs idle: not a standalone ack per message; at the end of
        // this burst to a peer that asked for its acks at once (it runs short of credit).
        if std::mem::take(&mut peer.credit.asked) {
            peer.stream.ack_soon();
            self.mark_active(p);
        } else if peer.stream.ack_due.is_none() {
            peer.stream.ack_due = Due::at(self.now + hold);
            self.mark_active(p);
        }
        if sync && self.finish_local_send(p, msg_id, Kind::Matched) {
            self.mark_active(p);
            return;
        }
        let peer = &mut self.peers[p];
        if sync && peer.conn.state == PeerState::Connected {
            peer.stream.queue(TxDesc::new(Kind::Matched, msg_id));
        }
        self.mark_active(p);
    }

    /// A Grant: more credit from the peer, or (flagged RETURN) a request to give back what
    /// this side is not using (credit in flight stays ours until released).
    pub(super) fn on_grant(&mut self, p: usize, r: &Repr) {
        let amount = r.total.min(u32::MAX as u64) as u32;
        let peer = &mut self.peers[p];
        if r.flags & wire::FLAG_RETURN != 0 {
            let back = amount.min(peer.credit.avail());
            peer.credit.grant = peer.credit.grant.wrapping_sub(back);
            peer.stream.queue(TxDesc {
                total: back as u64,
                ..TxDesc::new(Kind::GrantReturn, 0)
            });
            self.mark_active(p);
        } else {
            peer.credit.grant = peer.credit.grant.wrapping_add(amount);
        }
    }

    /// The peer gave back (part of) the grant this side asked back.
    pub(super) fn on_grant_return(&mut self, p: usize, r: &Repr) {
        let credit = &mut self.peers[p].credit;
        let back = (r.total.min(u32::MAX as u64) as u32).min(credit.given);
        credit.given -= back;
        credit.reclaiming = false;
        self.grants_total -= back as u64;
    }
}
