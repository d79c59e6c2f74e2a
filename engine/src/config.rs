//! Runtime parameters of the protocol.

/// Everything tunable; [`Config::default`] suits a 1500-byte MTU fabric.
#[derive(Debug, Clone)]
pub struct Config {
    /// Largest frame to send, Ethernet header included (MTU + 14); clamped to the link's and
    /// the peer's at connect.
    pub max_frame: usize,
    /// Messages longer than this go by rendezvous (RTS, then the receiver pulls).
    pub rndv_threshold: usize,
    /// Bytes the receiver asks for in one pull request.
    pub pull_block: usize,
    /// Pull requests kept outstanding per peer node, at least (over all the messages pulled
    /// from it, oldest message first): as many as fill the frame window to the sender, the
    /// next asked as soon as a block's worth of bytes has arrived.
    pub pull_outstanding: usize,
    /// Sequenced frames in flight per peer (and the receiver's reorder window).
    pub window: u32,
    /// Eager bytes (plus 64 per message) a peer may hold in the unexpected store at most. A
    /// peer starts with `eager_credit_initial`; its grant doubles up to this bound while it
    /// sends eager-sized messages without credit. Without credit a message goes by
    /// rendezvous, which needs none: a sender never waits for credit.
    pub eager_credit: u32,
    /// Eager credit granted at connect while less than half the store is granted; past
    /// that, new peers get `eager_credit_floor`, so that a store of 256 MiB covers 1,024
    /// peers at 128 KiB and then 65,536 more at 2 KiB (enough for a few dozen small messages
    /// in flight; grants grow for the peers that talk).
    pub eager_credit_initial: u32,
    pub eager_credit_floor: u32,
    /// When the store's grants are exhausted, peers that sent no eager message for this long
    /// are asked to give their credit back; a peer with nothing in flight for this long gives
    /// its queues' buffers back.
    pub credit_idle_ns: u64,
    /// Bytes of the unexpected store, shared by all peers' grants.
    pub unexpected_bytes: u64,
    /// Unexpected eager messages held at most; past it, the stream from the sender stalls (it
    /// retransmits).
    pub unexpected_count: usize,
    /// Unexpected messages of one frame held as that frame (each keeps a buffer of the
    /// link's receive pool: set it well under the pool's size); past it, they are copied
    /// out of their frames into the store's own memory.
    pub unexpected_frames: usize,
    /// Unexpected rendezvous requests (RTS, header only, no credit needed) held at most; past
    /// it, the stream from the sender stalls.
    pub unexpected_rts: usize,
    /// Received frames are acknowledged with the next frame out to their peer, once
    /// `ack_every` of them wait, at once when flagged `wire::FLAG_ACK_NOW` (or a gap shows),
    /// when the loop runs idle (`ack_idle_ns`), and within this delay at the latest — however
    /// quiet the peer: while the loop is busy, a peer that sends now and then (thousands of
    /// peers each sending every few ms) has its acks coalesce over its frames instead of one
    /// ack frame per message. Advertised to every peer at connect, whose retransmit timeout
    /// allows for it; at most `wire::ACK_DELAY_LIMIT_NS`. An ack held frees only the sender's retransmit copies
    /// and returns credit: sends do not wait on it (the MTL completes small standard sends
    /// at once; synchronous sends complete on Matched, rendezvous on Fin), and a sender
    /// short of window or credit flags its frame for an ack at once.
    pub max_ack_delay_ns: u64,
    /// The longest an ack is held while at least `ack_busy_peers` peers owe one at once
    /// (thousands of peers, each sending less than once per `max_ack_delay_ns`: each ack
    /// would cover one message, an ack frame per message received). Told to each peer in
    /// this node's acks before it applies to that peer (wire version 8: a sender's
    /// retransmit timeout allows for it); back to `max_ack_delay_ns` once fewer than half as
    /// many owe one. The cost: a sparse sender's lost last frame is found that much later.
    /// At most `wire::ACK_DELAY_LIMIT_NS`; taken as `max_ack_delay_ns` where shorter.
    pub max_ack_delay_busy_ns: u64,
    /// See `max_ack_delay_busy_ns`; `usize::MAX`: never.
    pub ack_busy_peers: usize,
    pub ack_every: u32,
    /// Acks owed go out once the link has been quiet this long (nothing received): long
    /// enough for a rank to answer what it just got (a ping-pong's reply carries the ack, so
    /// each message costs one frame, not two), short against `max_ack_delay_ns`.
    pub ack_idle_ns: u64,
    /// Retransmit timeout bounds; the timeout itself comes from the measured RTT. The floor
    /// is what a lossless link may take beyond the RTT estimate without a loss: a full
    /// window queued in a ring (1,024 frames of 1.5 KB at 25 Gbit/s: 0.5 ms) or a poll loop
    /// descheduled for a moment. Losses are mostly repaired by selective acks within a
    /// round trip; the timer is for the tail of a burst, so a floor of 1 ms costs little.
    pub rto_min_ns: u64,
    pub rto_max_ns: u64,
    pub rto_initial_ns: u64,
    /// A frame unacknowledged this long fails every operation with its peer.
    pub peer_timeout_ns: u64,
    /// A session with a peer node that has carried nothing either way for this long, with
    /// nothing in flight, is retired (within about twice this time: it is checked once per
    /// idle spell): its state is forgotten and its slot reused. A peer that
    /// still holds the session learns it on its next frame (answered by a Reset) or from a
    /// new Connect, and starts a new session, resending what the retired one never took.
    /// 0: never. More than `peer_timeout_ns` (so that whatever the peer sent before has been
    /// acknowledged or given up).
    pub session_idle_ns: u64,
    /// Frames handled per poll step in each direction (received: up to four bursts when the
    /// link holds them, rx.rs `RX_BURSTS`).
    pub burst: usize,
    /// Checksum payloads, not only headers: `None` (the default) does so only on links
    /// without a frame check of their own (`Link::frame_check`: not on Ethernet, whose FCS
    /// covers the wire, nor on memory links such as memif).
    pub payload_checksum: Option<bool>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_frame: 1514,
            rndv_threshold: 32 * 1024,
            pull_block: 128 * 1024,
            pull_outstanding: 4,
            window: 1024,
            eager_credit: 4 << 20,
            eager_credit_initial: 128 << 10,
            eager_credit_floor: 2 << 10,
            credit_idle_ns: 100_000_000,
            unexpected_bytes: 256 << 20,
            unexpected_count: 1 << 16,
            unexpected_frames: 1024,
            unexpected_rts: 1 << 20,
            max_ack_delay_ns: 5_000_000,
            max_ack_delay_busy_ns: 40_000_000,
            ack_busy_peers: 4096,
            ack_every: 16,
            ack_idle_ns: 8_000,
            rto_min_ns: 1_000_000,
            rto_max_ns: 200_000_000,
            rto_initial_ns: 2_000_000,
            peer_timeout_ns: 5_000_000_000,
            session_idle_ns: 60_000_000_000,
            burst: 32,
            payload_checksum: None,
        }
    }
}

impl Config {
    /// Defaults for a 9000-byte MTU.
    pub fn jumbo() -> Self {
        Config {
            max_frame: 9014,
            ..Config::default()
        }
    }

    /// Checks the parameters against each other.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_frame < crate::wire::OVERHEAD + 64 {
            return Err(format!(
                "max_frame {} leaves no room for payload",
                self.max_frame
            ));
        }
        if self.pull_block == 0 || self.pull_outstanding == 0 {
            return Err("pull_block and pull_outstanding must be positive".into());
        }
        if self.window == 0 || self.window > crate::wire::SACK_BITS * 4 {
            return Err(format!("window must be 1..={}", crate::wire::SACK_BITS * 4));
        }
        if self.session_idle_ns != 0 && self.session_idle_ns <= self.peer_timeout_ns {
            return Err(format!(
                "session idle time ({} ms) must be longer than the peer timeout ({} ms), or 0",
                self.session_idle_ns / 1_000_000,
                self.peer_timeout_ns / 1_000_000
            ));
        }
        if self.max_ack_delay_ns > crate::wire::ACK_DELAY_LIMIT_NS {
            return Err(format!(
                "max_ack_delay_ns ({}) is past the protocol's bound, wire::ACK_DELAY_LIMIT_NS ({})",
                self.max_ack_delay_ns,
                crate::wire::ACK_DELAY_LIMIT_NS
            ));
        }
        if self.max_ack_delay_busy_ns > crate::wire::ACK_DELAY_LIMIT_NS {
            return Err(format!(
                "max_ack_delay_busy_ns ({}) is past the protocol's bound, wire::ACK_DELAY_LIMIT_NS ({})",
                self.max_ack_delay_busy_ns,
                crate::wire::ACK_DELAY_LIMIT_NS
            ));
        }
        if self.rto_min_ns == 0 || self.rto_min_ns > self.rto_max_ns {
            return Err("rto_min_ns must be positive and at most rto_max_ns".into());
        }
        Ok(())
    }
}
