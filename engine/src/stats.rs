//! Counters the engine keeps; the agent reports them as JSON.

use crate::wire;

/// Engine counters. All cumulative except `peers`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Peer nodes known now (each one session): a retired session no longer counts, and
    /// counts again once set up anew.
    pub peers: u64,
    pub rx_frames: u64,
    pub tx_frames: u64,
    pub tx_bytes: u64,
    pub acks_sent: u64,
    /// Times the engine began holding acks up to the busy delay (thousands of peers owing
    /// one at once: `Config::max_ack_delay_busy_ns`).
    pub ack_busy_spells: u64,
    pub retransmits: u64,
    /// Retransmit timer expiries (each resends a few of the oldest frames).
    pub rto_events: u64,
    pub rx_duplicates: u64,
    pub rx_out_of_order: u64,
    /// In-order frames refused because the unexpected store was full.
    pub rx_stalled: u64,
    pub drop_truncated: u64,
    pub drop_checksum: u64,
    pub drop_malformed: u64,
    pub drop_foreign: u64,
    pub drop_not_ours: u64,
    pub drop_no_endpoint: u64,
    pub drop_stale: u64,
    pub drop_unknown_msg: u64,
    pub tx_no_buffers: u64,
    /// Payload bytes sent in place from the senders' buffers (frames that point at them,
    /// [`crate::Link::alloc_tx_ref`]): bytes the engine did not copy.
    pub tx_in_place_bytes: u64,
    /// Payload bytes of unexpected eager messages copied from their frames into the
    /// unexpected store (a CPU copy of the engine's own, outside the copy engine).
    pub unexpected_copied_bytes: u64,
    /// Eager-sized sends that went by rendezvous because the peer's eager credit was short.
    pub credit_fallbacks: u64,
    /// Grants of more eager credit sent to peers, and requests to give credit back.
    pub credit_grants: u64,
    pub credit_reclaims: u64,
    pub tx_backpressure: u64,
    /// Transmit visits that left new frames queued because the peer's window was full: the
    /// sender waited for acks (on a lossless link, more asked of it than its window holds).
    pub tx_window_full: u64,
    pub peer_restarts: u64,
    /// Sends refused because their address named an earlier incarnation of the node than
    /// the one connected (`Engine::check_incarnation`; with `Engine::isend_to`, once the
    /// node's start answered on the session, or another start than the named one did).
    pub stale_addresses: u64,
    /// Sessions retired here after `session_idle_ns` idle, and sessions a peer had retired
    /// that this side started anew (its frames resent in the new session).
    pub sessions_retired: u64,
    pub sessions_renewed: u64,
    pub peer_timeouts: u64,
    /// Handshakes from peers of another wire version (their operations failed at once).
    pub peer_version_mismatch: u64,
    pub sends_posted: u64,
    pub sends_completed: u64,
    pub recvs_posted: u64,
    pub recvs_completed: u64,
    pub ops_failed: u64,
    pub eager_sent: u64,
    pub rndv_sent: u64,
    pub unexpected: u64,
    pub unexpected_bytes_peak: u64,
}

impl Stats {
    /// Counts a frame refused by the parser, by cause.
    pub fn drop(&mut self, e: wire::Error) {
        match e {
            wire::Error::Truncated => self.drop_truncated += 1,
            wire::Error::Checksum => self.drop_checksum += 1,
            wire::Error::EtherType | wire::Error::Version => self.drop_foreign += 1,
            wire::Error::Type | wire::Error::Malformed => self.drop_malformed += 1,
        }
    }
}
