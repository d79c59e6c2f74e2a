//! Timers, scanned every quarter of the minimum retransmit timeout: connect deadlines,
//! retransmits, keepalives to quiet peers that operations wait on, peer deadlines, credit
//! reclaim; and how long an idle loop may sleep without missing one of them.

use super::Engine;
use super::peer::PeerState;
use super::stream::TxDesc;
use super::types::Error;
use crate::copy::CopyEngine;
use crate::link::Link;
use crate::wire::Kind;

/// How often the timers look at trimming the request slab.
const TRIM_EVERY_NS: u64 = 1_000_000_000;

impl<L: Link, C: CopyEngine<L::Frame>> Engine<L, C> {
    /// Runs the timers if a scan is due.
    pub(super) fn timers(&mut self, now: u64) {
        if now.wrapping_sub(self.last_timer_scan) < self.cfg.rto_min_ns / 4 {
            return;
        }
        self.last_timer_scan = now;
        self.held_timers(now);
        // A slab grown by a burst of requests gives its memory back once they are over
        // (looked at once a second: a look may walk a quarter of the slab).
        if now.saturating_sub(self.last_trim) >= TRIM_EVERY_NS {
            self.last_trim = now;
            self.reqs.trim();
        }
        // A reclaim round goes on where the last pass left it; a new one starts under
        // pressure, at most every quarter of the idle time.
        if self.reclaim_cursor != 0 {
            self.reclaim_idle_credit(now);
        } else if self.credit_pressure
            && now.saturating_sub(self.last_reclaim) >= self.cfg.credit_idle_ns / 4
        {
            self.credit_pressure = false;
            self.last_reclaim = now;
            self.reclaim_idle_credit(now);
        }
        // Only armed peers: the cost follows the peers with something in flight, not the
        // number of peers (65,536 idle peers cost nothing here).
        // The list keeps its buffer: the peers still armed stay in it, in place, and those
        // armed meanwhile are added behind them (no allocation per pass).
        let mut armed = std::mem::take(&mut self.armed);
        for &p in &armed {
            self.peer_timers(p, now);
        }
        armed.retain(|&p| {
            let peer = &mut self.peers[p];
            if peer.timed() && !peer.only_waits() {
                return true;
            }
            peer.in_armed = false;
            self.after_timers(p, now);
            false
        });
        armed.append(&mut self.armed);
        self.armed = armed;
        // Peers that operations only wait on: looked at once per keepalive period, not every
        // pass (10,000 synchronous or rendezvous sends waiting for their match cost nothing
        // here until then).
        while let Some(&(p, due)) = self.waits.front() {
            if due > now {
                break;
            }
            self.waits.pop_front();
            let peer = &mut self.peers[p];
            peer.stream.keepalive_queued = false;
            if peer.in_armed {
                // Busy again meanwhile: the passes visit it.
                continue;
            }
            self.peer_timers(p, now);
            if self.peers[p].timed() && !self.peers[p].only_waits() {
                self.peers[p].in_armed = true;
                self.armed.push(p);
            } else {
                self.after_timers(p, now);
            }
        }
        while let Some(&(p, since)) = self.went_idle.front() {
            if now.saturating_sub(since) < self.cfg.credit_idle_ns {
                break;
            }
            self.went_idle.pop_front();
            let peer = &mut self.peers[p];
            if !peer.in_armed && !peer.timed() {
                peer.shrink();
            }
        }
        // Sessions idle for `session_idle_ns` are retired. One that cannot be yet and is idle
        // now (busy meanwhile, or its messages still in the store) is checked again that
        // long from now; a busy one when it next goes idle.
        while let Some(&(p, since)) = self.retire_check.front() {
            if now.saturating_sub(since) < self.cfg.session_idle_ns {
                break;
            }
            self.retire_check.pop_front();
            self.peers[p].conn.retire_queued = false;
            if self.retirable(p, now) {
                self.retire(p);
            } else if !self.peers[p].in_armed
                && self.peers[p].conn.state == PeerState::Connected
                && self.peers[p].mac != self.mac
            {
                self.peers[p].conn.retire_queued = true;
                self.retire_check.push_back((p, now));
            }
        }
    }

    /// Peer `p`, not armed, after its timers ran: queued for its next keepalive if
    /// operations still wait on it; otherwise it went quiet: its buffers are given back
    /// later, if any (a peer that only received holds none: no second visit, which with many
    /// peers would be a cache miss per message), and its session's retirement is checked
    /// (at most one entry per peer).
    fn after_timers(&mut self, p: usize, now: u64) {
        let peer = &mut self.peers[p];
        if peer.timed() {
            self.wait_keepalive(p, now);
            return;
        }
        if peer.holds_collections() {
            self.went_idle.push_back((p, now));
        }
        if self.cfg.session_idle_ns != 0 && !peer.conn.retire_queued {
            peer.conn.retire_queued = true;
            self.retire_check.push_back((p, now));
        }
    }

    /// Queues peer `p` (operations only wait on it) for a look a keepalive period from now.
    pub(super) fn wait_keepalive(&mut self, p: usize, now: u64) {
        let period = self.keepalive_period();
        let s = &mut self.peers[p].stream;
        if !s.keepalive_queued {
            s.keepalive_queued = true;
            self.waits.push_back((p, now + period));
        }
    }

    /// How often a peer that operations wait on is looked at: the keepalive goes out once it
    /// has been quiet for a quarter of the peer timeout, so at most a sixteenth late.
    fn keepalive_period(&self) -> u64 {
        (self.cfg.peer_timeout_ns / 16).max(self.cfg.rto_min_ns / 4)
    }

    fn peer_timers(&mut self, p: usize, now: u64) {
        let timeout = self.cfg.peer_timeout_ns;
        let peer = &mut self.peers[p];
        match peer.conn.state {
            PeerState::Idle => return,
            PeerState::Connecting => {
                if now.saturating_sub(peer.conn.last_rx) > timeout {
                    self.stats.peer_timeouts += 1;
                    self.reset_peer(p, Error::PeerUnreachable);
                }
                return;
            }
            PeerState::Connected => {}
        }
        if peer.stream.ack_due.get().is_some_and(|t| now >= t) {
            self.mark_active(p);
        }
        let peer = &mut self.peers[p];
        let rto = peer.stream.rto_scan(now, &self.cfg, timeout);
        let mut dead = rto.dead;
        let mut any = false;
        if rto.fired {
            self.stats.rto_events += 1;
            any = true;
        }
        // Operations waiting on a peer that has gone quiet: make it answer, so a dead or
        // restarted peer is noticed (by the deadline, or by its reset).
        if peer.waiting_on_peer()
            && peer.stream.q.unacked.is_empty()
            && !peer.stream.has_new()
            && now.saturating_sub(peer.conn.last_rx) > timeout / 4
        {
            peer.stream.queue(TxDesc::new(Kind::Ping, 0));
            peer.conn.last_rx = now;
            any = true;
        }
        // A receiver waiting on data from a silent peer gives up too.
        if !dead
            && (!peer.msgs.q.pulls.is_empty() || peer.msgs.in_eager.is_some())
            && now.saturating_sub(peer.conn.last_rx) > timeout
        {
            dead = true;
        }
        if dead {
            self.stats.peer_timeouts += 1;
            self.reset_peer(p, Error::PeerUnreachable);
        } else if any {
            self.mark_active(p);
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
        // A peer marked active and not armed has not been through a transmit pass since:
        // what it has to send goes out at the next poll.
        if !self.quick_acks.is_empty() || self.active.iter().any(|&p| !self.peers[p].in_armed) {
            return 0;
        }
        let scan = self.cfg.rto_min_ns / 4;
        if !self.verifying.is_empty() {
            return scan;
        }
        let mut budget = self
            .waits
            .front()
            .map_or(u64::MAX, |&(_, due)| due.saturating_sub(now).max(scan));
        // The first delayed ack of each queue (in due order), or all of them once the link
        // is quiet.
        for &a in self.ack_timers.iter().filter_map(|q| q.front()) {
            // Its tick may be up to one early, never late: the loop wakes at most a tick early.
            let due = now.saturating_add(a.wait(now));
            let t = self.idle_ack_at().map_or(due, |q| q.min(due));
            budget = budget.min(t.saturating_sub(now));
        }
        for p in self.armed.iter().map(|&p| &self.peers[p]) {
            match p.conn.state {
                PeerState::Idle => continue,
                PeerState::Connecting => budget = budget.min(scan),
                PeerState::Connected => {}
            }
            let s = &p.stream;
            if s.ack_now || p.conn.connect_ack_owed || s.has_tx() {
                return 0;
            }
            if let Some(t) = s.ack_due.get() {
                let t = self.idle_ack_at().map_or(t, |q| q.min(t));
                budget = budget.min(t.saturating_sub(now));
            }
            if !s.q.unacked.is_empty() || p.waiting_on_peer() {
                budget = budget.min(scan);
            }
        }
        budget
    }
}
