//! What the agent reports (`tigon stats`, the control socket's `stats` request): its
//! clients, the engine's counters, copies, the link, and where the engine loop's time goes.

use super::copy::AgentCopy;
use super::engine_loop::Layout;
use super::link::PortLink;
use super::serve::Served;
use super::slots::Slots;
use tigon_engine::Engine;

/// Where the engine loop's time goes, worst cases: the longest gap between two iterations
/// (and the CPU time the thread got during it: far less than the gap means it was
/// descheduled or blocked), and the longest engine poll, client serving, control command
/// and idle sleep.
#[derive(Debug, Default, serde::Serialize)]
pub struct LoopGaps {
    max_gap_us: u64,
    max_gap_cpu_us: u64,
    gaps_over_100ms: u64,
    pub max_poll_us: u64,
    pub max_serve_us: u64,
    pub max_cmds_us: u64,
    pub max_sleep_us: u64,
    pub sleeps: u64,
}

impl LoopGaps {
    /// Whether a gap of `ns` would be the longest seen (its CPU time is then worth reading).
    pub fn is_longest(&self, ns: u64) -> bool {
        ns / 1000 > self.max_gap_us
    }

    /// Notes a gap of `ns` between two iterations, of which the thread ran `cpu_ns` (read
    /// only for the longest gap; see [`LoopGaps::is_longest`]).
    pub fn note(&mut self, ns: u64, cpu_ns: u64) {
        if ns / 1000 > self.max_gap_us {
            self.max_gap_us = ns / 1000;
            self.max_gap_cpu_us = cpu_ns / 1000;
        }
        if ns > 100_000_000 {
            self.gaps_over_100ms += 1;
        }
    }
}

/// The agent's counters as JSON. `channel_slots`: the node's channel slots in DPDK memory
/// (`slots`), how many there are and how many a rank has (or had, its process not yet seen
/// gone), `null` without any.
pub fn json(
    eng: &Engine<PortLink, AgentCopy>,
    served: &Served,
    link: &PortLink,
    gaps: &LoopGaps,
    layout: &Layout,
    slots: Option<&Slots>,
) -> serde_json::Value {
    let s = &eng.stats;
    let port = link.port.stats().ok();
    serde_json::json!({
        "clients": served.client_count(),
        "serve": served.stats,
        "peers": s.peers,
        "frames": { "rx": s.rx_frames, "tx": s.tx_frames, "tx_bytes": s.tx_bytes, "acks_sent": s.acks_sent, "tx_backpressure": s.tx_backpressure, "ack_busy_hold": eng.ack_busy(), "ack_busy_spells": s.ack_busy_spells },
        "retransmits": s.retransmits,
        "drops": {
            "checksum": s.drop_checksum, "truncated": s.drop_truncated, "malformed": s.drop_malformed,
            "foreign": s.drop_foreign, "not_ours": s.drop_not_ours, "no_endpoint": s.drop_no_endpoint,
            "stale_session": s.drop_stale, "unknown_message": s.drop_unknown_msg, "duplicates": s.rx_duplicates,
        },
        "ring_full": served.stats.ring_full,
        "copies": copies(eng, served),
        "messages": {
            "sends": s.sends_completed, "recvs": s.recvs_completed, "failed": s.ops_failed, "eager": s.eager_sent,
            "rendezvous": s.rndv_sent, "unexpected": s.unexpected, "unexpected_bytes_peak": s.unexpected_bytes_peak,
        },
        "credit": {
            "fallbacks": s.credit_fallbacks, "grants": s.credit_grants, "reclaims": s.credit_reclaims,
            "stalled": s.rx_stalled,
            "granted_bytes": eng.credit_granted_bytes(),
        },
        "peer_events": { "restarts": s.peer_restarts, "stale_addresses": s.stale_addresses, "timeouts": s.peer_timeouts, "version_mismatch": s.peer_version_mismatch, "sessions_retired": s.sessions_retired, "sessions_renewed": s.sessions_renewed },
        "link": link.stats(),
        "engine_loop": gaps,
        "layout": layout,
        "channel_slots": slots.map(|s| serde_json::json!({ "total": s.total(), "held": s.held() })),
        "port": port.map(|p| serde_json::json!({ "ipackets": p.ipackets, "opackets": p.opackets, "imissed": p.imissed, "ierrors": p.ierrors, "oerrors": p.oerrors, "rx_nombuf": p.rx_nombuf })),
        // Whether the port's link is up now (a memif peer connected, a cable in): the first
        // thing to know when peers time out.
        "port_link": link.port.link().ok().map(|l| serde_json::json!({ "up": l.up, "speed_mbps": l.speed_mbps })),
    })
}

/// Bytes copied, by whom, and per payload byte delivered to this node's ranks. The engine's
/// CPU copies are its memcpys (`cpu_bytes`: the copy engine's, and the unexpected store's,
/// `unexpected_store_bytes`) and the kernel's copies on its core for
/// `process_vm_readv` / `writev` (`direct_bytes`); the dmadev's are not the CPU's. The ranks'
/// are what their clients report (into and out of channel buffers, and out of staging).
/// `tx_in_place_bytes` are payload bytes the port sent straight from channel buffers (no
/// copy by the engine); `leases_held` are received frames lent to ranks now (they read the
/// payload where it arrived; `serve.leases` counts the receives completed so); `lent_bytes`
/// are payload bytes of large messages lent fragment by fragment to ranks waiting for them
/// (the ranks copied them: counted in `rank_bytes`, not the engine's), `unlent_fragments`
/// those written by the engine instead, by reason, for ranks that take them;
/// `unexpected_frames_held` are unexpected messages kept as the frame they came in (copied
/// once, or lent, when they match: not copied into the store).
fn copies(eng: &Engine<PortLink, AgentCopy>, served: &Served) -> serde_json::Value {
    let c = eng.copy_engine();
    let s = &eng.stats;
    let payload = served.stats.payload_bytes_received;
    let engine = c.bytes.cpu + s.unexpected_copied_bytes + c.bytes.direct;
    let ranks = served.client_copied();
    let per = |b: u64| {
        if payload == 0 {
            serde_json::Value::Null
        } else {
            ((b as f64 / payload as f64 * 100.0).round() / 100.0).into()
        }
    };
    serde_json::json!({
        "dma_bytes": c.bytes.dma, "cpu_bytes": c.bytes.cpu + s.unexpected_copied_bytes,
        "unexpected_store_bytes": s.unexpected_copied_bytes, "direct_bytes": c.bytes.direct,
        "dma_errors": c.dma_errors, "rank_bytes": ranks, "payload_bytes": payload,
        "tx_in_place_bytes": eng.stats.tx_in_place_bytes, "lent_bytes": c.bytes.lent,
        "unlent_fragments": c.clients.unlent,
        "leases_held": c.clients.budget.held, "leases_max": c.clients.budget.max,
        "unexpected_frames_held": eng.unexpected_frames(),
        "engine_per_payload_byte": per(engine), "ranks_per_payload_byte": per(ranks),
    })
}
