//! The engine's [`Link`] over a DPDK port, with a loopback for frames between two endpoints
//! of this node (they never touch the wire).

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::sync::Arc;
use tigon_engine::net::UDP_OVERHEAD;
use tigon_engine::net::encap::{EncapStats, Rx, Tx, UdpConfig, UdpEncap};
use tigon_engine::wire::MIN_FRAME;
use tigon_engine::{Link, MacAddr, TxRef};
use tigon_pmd::{ExtMem, Mbuf, Mempool, Port};

/// Frames queued on the loopback at most: each holds a tx buffer until the engine reads it.
const LOOPBACK_RING: usize = 512;

/// A received frame: the mbuf itself when it is one segment, else its bytes gathered.
pub enum RxFrame {
    Mbuf(Mbuf),
    Flat(Vec<u8>),
}

impl AsRef<[u8]> for RxFrame {
    fn as_ref(&self) -> &[u8] {
        match self {
            RxFrame::Mbuf(m) => m.data(),
            RxFrame::Flat(v) => v,
        }
    }
}

/// A frame being built: a fresh, unshared mbuf (its payload maybe chained), whose first
/// `skip` bytes are kept for the UDP/IPv4 headers (`--wire udp`; 0 on raw Ethernet). The
/// engine sees the bytes behind them. Or, `wired`, a frame ready for the wire that the
/// port did not take: handed back to the engine's queue as it is, to be offered again.
pub struct TxFrame {
    m: Mbuf,
    skip: usize,
    wired: bool,
}

impl AsRef<[u8]> for TxFrame {
    fn as_ref(&self) -> &[u8] {
        &self.m.data()[self.skip..]
    }
}

impl AsMut<[u8]> for TxFrame {
    fn as_mut(&mut self) -> &mut [u8] {
        // Checked when allocated; the mbuf is not shared before it is sent.
        &mut self.m.data_mut().expect("fresh tx mbuf is unique")[self.skip..]
    }
}

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct LinkStats {
    /// Receive queues the engine polls (more than one: RSS over UDP/IPv4).
    pub rx_queues: u16,
    /// The RSS hash functions in use (DPDK's RTE_ETH_RSS_* bits; 0: no RSS).
    pub rss_hf: u64,
    pub loopback_frames: u64,
    pub rx_chained: u64,
    pub tx_alloc_failures: u64,
    /// `--wire udp`: the encapsulation's counters (ARP, ICMP, packets not ours or bad).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp: Option<UdpStats>,
}

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct UdpStats {
    pub arp_requests_sent: u64,
    pub arp_replies_sent: u64,
    pub arp_learned: u64,
    pub icmp_echo_replies: u64,
    pub not_ours: u64,
    pub bad: u64,
    /// Frames dropped because the next hop did not answer ARP, or there was no route.
    pub unresolved_drops: u64,
    /// Raw-Ethernet tigon frames received: a peer runs `--wire ether`.
    pub wire_mismatch: u64,
}

/// Frames held while their next hop is resolved, at most.
const HELD_MAX: usize = 256;

/// `--wire udp`: the encapsulation and the frames waiting for a next hop's address.
struct Udp {
    encap: UdpEncap,
    held: VecDeque<(Ipv4Addr, u64, Mbuf)>,
    /// The engine loop's clock at its current pass ([`PortLink::set_clock`]), for the
    /// neighbour cache, ARP retries and held frames: milliseconds matter there, so the
    /// link reads no clock of its own (two reads per message and hop, ~50 ns).
    now: u64,
    unresolved_drops: u64,
    wire_mismatch: u64,
}

pub struct PortLink {
    pub port: Port,
    pool: Mempool,
    mac: MacAddr,
    max_frame: usize,
    loopback: VecDeque<RxFrame>,
    rx: Vec<Mbuf>,
    tx: Vec<Mbuf>,
    udp: Option<Udp>,
    /// Bytes in front of each engine frame for the UDP/IPv4 headers (0 on raw Ethernet),
    /// reserved when the frame is allocated: the frame then starts where a raw-Ethernet
    /// frame does, at the mbuf's usual headroom (16-byte aligned), and the port's copy of it
    /// (memif's `rte_memcpy`) takes its aligned path. Written into the headroom
    /// instead (28 bytes in front), the frame started 4 bytes off: memif's transmit copy
    /// took ~50 % more instructions per 9000-byte frame (callgrind).
    skip: usize,
    /// Frames may be header + payload chains (`Port::tx_chains`; with `--wire udp` only
    /// where the UDP checksum reads no payload): see [`Link::alloc_tx_ref`].
    chains: bool,
    pub stats: LinkStats,
}

impl PortLink {
    pub fn new(port: Port, tx_pool: Mempool, mac: MacAddr, max_frame: usize) -> Self {
        let stats = LinkStats {
            rx_queues: port.rx_queues(),
            rss_hf: port.rss(),
            ..LinkStats::default()
        };
        PortLink {
            pool: tx_pool,
            mac,
            max_frame,
            loopback: VecDeque::new(),
            rx: Vec::new(),
            tx: Vec::new(),
            udp: None,
            skip: 0,
            chains: port.tx_chains(),
            port,
            stats,
        }
    }

    /// Puts the engine's frames in UDP/IPv4 (`--wire udp`): the engine's node address becomes
    /// the IP address and port, and a gratuitous ARP announces this node.
    pub fn with_udp(mut self, mut cfg: UdpConfig) -> Self {
        cfg.mac = self.mac;
        let mut u = Udp {
            encap: UdpEncap::new(cfg),
            held: VecDeque::new(),
            now: 0,
            unresolved_drops: 0,
            wire_mismatch: 0,
        };
        if let Some(mut m) = self.small_frame() {
            let b = m.data_mut().expect("fresh tx mbuf is unique");
            u.encap.gratuitous_arp(b);
            self.tx.push(m);
        }
        // A payload sent in place (a chain) needs a UDP checksum that reads nothing: zero
        // (the link's frame check and the tigon header check cover the datagram) or the
        // NIC's.
        self.chains &= !u.encap.config().udp_checksum || u.encap.offloads().1;
        self.udp = Some(u);
        self.skip = UDP_OVERHEAD;
        self.max_frame -= UDP_OVERHEAD;
        self.port.tx_burst(0, &mut self.tx);
        self
    }

    /// The engine loop's clock (ns) for this pass: what `--wire udp`'s neighbour cache, ARP
    /// retries and held frames count time by. Called before each [`Engine::poll`].
    ///
    /// [`Engine::poll`]: tigon_engine::Engine::poll
    pub fn set_clock(&mut self, now: u64) {
        if let Some(u) = self.udp.as_mut() {
            u.now = now;
        }
    }

    /// The engine's name for this node: the port's MAC, or with `--wire udp` IP + port.
    pub fn node_addr(&self) -> MacAddr {
        self.udp.as_ref().map_or(self.mac, |u| u.encap.node_id())
    }

    /// An endpoint's address as the modex carries it: `MAC/ID`, or `udp:IP:PORT/ID`, then
    /// `@` and the node's incarnation (`tigon_engine::Dest`).
    pub fn addr_text(&self, a: tigon_engine::EndpointAddr, incarnation: u32) -> String {
        let node = match self.udp {
            Some(_) => tigon_engine::addr::udp_text(a),
            None => a.to_string(),
        };
        format!("{node}@{incarnation:08x}")
    }

    /// The link's counters, with `--wire udp`'s.
    pub fn stats(&self) -> LinkStats {
        let mut out = self.stats.clone();
        if let Some(u) = &self.udp {
            let EncapStats {
                arp_requests_sent,
                arp_replies_sent,
                arp_learned,
                icmp_echo_replies,
                not_ours,
                bad,
                unroutable,
            } = u.encap.stats;
            out.udp = Some(UdpStats {
                arp_requests_sent,
                arp_replies_sent,
                arp_learned,
                icmp_echo_replies,
                not_ours,
                bad,
                unresolved_drops: u.unresolved_drops + unroutable,
                wire_mismatch: u.wire_mismatch,
            });
        }
        out
    }

    fn small_frame(&mut self) -> Option<Mbuf> {
        let mut m = self.pool.alloc().ok()?;
        m.append(MIN_FRAME as u16).ok()?;
        Some(m)
    }

    /// A received frame under `--wire udp`: the engine's part of it, an answer sent back, or
    /// nothing.
    fn decap(&mut self, mut m: Mbuf) -> Option<Mbuf> {
        let u = self.udp.as_mut()?;
        let now = u.now;
        let Ok(data) = m.data_mut() else {
            return None;
        };
        if data.get(12..14) == Some(&tigon_engine::wire::ETHERTYPE.to_be_bytes()[..]) {
            if u.wire_mismatch == 0 {
                log::warn!(
                    "a raw-Ethernet tigon frame arrived from {}: this agent runs --wire udp; \
                     every agent of a job must use the same --wire",
                    MacAddr(data[6..12].try_into().expect("6 bytes"))
                );
            }
            u.wire_mismatch += 1;
            return None;
        }
        let len = data.len();
        match u.encap.decap(data, now) {
            Rx::Tigon(r) => {
                m.keep(r).ok()?;
                Some(m)
            }
            Rx::Reply(n) => {
                if m.trim((len - n) as u16).is_ok() {
                    self.tx.push(m);
                }
                None
            }
            Rx::Done | Rx::Bad => None,
        }
    }

    /// Encapsulates the engine's frame `m` for the wire: queued to send, held until its next
    /// hop answers ARP, or dropped. The headers go in the bytes kept in front of the
    /// engine's frame when it was allocated (`skip`): the frame is not moved.
    fn encap(&mut self, mut m: Mbuf) {
        let Some(u) = self.udp.as_mut() else {
            self.tx.push(m);
            return;
        };
        let now = u.now;
        let total = m.len();
        let Ok(b) = m.data_mut() else {
            u.unresolved_drops += 1;
            return;
        };
        let tail = total - b.len();
        match u.encap.encap_chained(b, tail, now) {
            Tx::Send => {
                mark_offloads(&u.encap, &mut m);
                self.tx.push(m);
            }
            Tx::Unresolved { next_hop, request } => {
                if u.held.len() < HELD_MAX {
                    u.held.push_back((next_hop, now, m));
                } else {
                    u.unresolved_drops += 1;
                }
                if request && let Some(mut a) = self.small_frame() {
                    let u = self.udp.as_mut().expect("udp");
                    u.encap
                        .arp_request(next_hop, a.data_mut().expect("fresh tx mbuf is unique"));
                    self.tx.push(a);
                }
            }
            Tx::Unroutable => u.unresolved_drops += 1,
        }
    }

    /// Frames whose next hop is now known go out; those waiting past two ARP retries are
    /// dropped (the engine resends, and fails the peer if it stays silent).
    fn release_held(&mut self) {
        let Some(u) = self.udp.as_mut() else {
            return;
        };
        if u.held.is_empty() {
            return;
        }
        let now = u.now;
        let give_up = 2 * u.encap.config().arp_retry_ns + 1;
        for _ in 0..u.held.len() {
            let Some((hop, since, mut m)) = u.held.pop_front() else {
                break;
            };
            if u.encap.neighbour(hop, now).is_some() {
                // Its header bytes were kept when it was allocated; they are written now.
                let total = m.len();
                let b = m.data_mut().expect("held tx mbuf is unique");
                let tail = total - b.len();
                match u.encap.encap_chained(b, tail, now) {
                    Tx::Send => {
                        mark_offloads(&u.encap, &mut m);
                        self.tx.push(m);
                    }
                    _ => u.unresolved_drops += 1,
                }
            } else if now.saturating_sub(since) > give_up {
                u.unresolved_drops += 1;
            } else {
                u.held.push_back((hop, since, m));
            }
        }
    }
}

/// Asks the NIC for the checksums the encapsulation left to it (where the port offloads them).
fn mark_offloads(encap: &UdpEncap, m: &mut Mbuf) {
    let (ip, udp) = encap.offloads();
    if ip || udp {
        m.offload_ipv4_udp_checksums(ip, udp);
    }
}

impl Link for PortLink {
    type Frame = RxFrame;
    type TxBuf = TxFrame;

    fn rx_burst(&mut self, out: &mut Vec<RxFrame>, max: usize) {
        // Up to `max` frames from each source: the loopback (frames this node sent itself)
        // must not starve the port, nor the port the loopback, whose frames hold tx buffers.
        let start = out.len();
        while out.len() - start < max {
            match self.loopback.pop_front() {
                Some(f) => out.push(f),
                None => break,
            }
        }
        // Every receive queue (RSS spreads UDP flows over them; each endpoint pair's frames
        // stay on one queue), each up to `max`, so none starves.
        for q in 0..self.port.rx_queues() {
            self.port.rx_burst(q, &mut self.rx, max);
        }
        let mut rx = std::mem::take(&mut self.rx);
        for m in rx.drain(..) {
            if m.nb_segs() != 1 {
                // Chained frames are rare (a jumbo frame in small buffers): gathered, then
                // (with --wire udp) dropped, the engine resends.
                self.stats.rx_chained += 1;
                if self.udp.is_none() {
                    out.push(RxFrame::Flat(m.to_vec()));
                }
                continue;
            }
            if self.udp.is_none() {
                out.push(RxFrame::Mbuf(m));
            } else if let Some(m) = self.decap(m) {
                out.push(RxFrame::Mbuf(m));
            }
        }
        self.rx = rx;
        if let Some(u) = &self.udp {
            // ARP replies may have resolved held frames; answers (ARP, ping) go out now.
            // (Looked at here: this runs on every pass of a spinning engine.)
            if !u.held.is_empty() {
                self.release_held();
            }
            if !self.tx.is_empty() {
                // What the driver does not take waits in `tx` for the next burst.
                self.port.tx_burst(0, &mut self.tx);
            }
        }
    }

    fn alloc_tx(&mut self, len: usize) -> Option<TxFrame> {
        let Ok(len16) = u16::try_from(len + self.skip) else {
            return None;
        };
        let mut m = match self.pool.alloc() {
            Ok(m) => m,
            Err(_) => {
                self.stats.tx_alloc_failures += 1;
                return None;
            }
        };
        if m.append(len16).is_err() || m.data_mut().is_err() {
            self.stats.tx_alloc_failures += 1;
            return None;
        }
        Some(TxFrame {
            m,
            skip: self.skip,
            wired: false,
        })
    }

    fn alloc_tx_ref(&mut self, head: usize, payload: TxRef<'_>) -> Option<TxFrame> {
        if !self.chains {
            return None;
        }
        let mem = payload.mem.downcast_ref::<Arc<ExtMem>>()?;
        // A memif zero-copy port passes only DPDK memory its peer maps: a channel there,
        // not one in a memfd (the engine then copies, and counts it).
        if !self.port.sends_in_place(mem) {
            return None;
        }
        let (Ok(head), Ok(len)) = (u16::try_from(head + self.skip), u16::try_from(payload.len))
        else {
            return None;
        };
        let mut m = match self.pool.alloc() {
            Ok(m) => m,
            Err(_) => {
                self.stats.tx_alloc_failures += 1;
                return None;
            }
        };
        m.append(head).ok()?;
        // The payload's mbuf points into the channel; it holds the region mapped until the
        // port has sent (and freed) it.
        let tail = match self.pool.alloc_extbuf(mem, payload.offset, len) {
            Ok(t) => t,
            Err(_) => {
                self.stats.tx_alloc_failures += 1;
                return None;
            }
        };
        m.chain(tail).ok()?;
        Some(TxFrame {
            m,
            skip: self.skip,
            wired: false,
        })
    }

    fn tx_burst(&mut self, frames: &mut Vec<TxFrame>) {
        self.release_held();
        let mut refused = Vec::new();
        let me = self.node_addr();
        for f in frames.drain(..) {
            if f.wired {
                self.tx.push(f.m);
            } else if f.as_ref().get(..6) != Some(&me.0[..]) {
                self.encap(f.m);
            } else if self.loopback.len() < LOOPBACK_RING && refused.is_empty() {
                self.stats.loopback_frames += 1;
                // The receive side reads a frame as one piece (the engine sends nothing to
                // this node in place; a chain would be gathered here), without the bytes
                // kept for headers.
                let TxFrame { mut m, skip, .. } = f;
                let f = if m.nb_segs() == 1 && (skip == 0 || m.adj(skip as u16).is_ok()) {
                    RxFrame::Mbuf(m)
                } else {
                    RxFrame::Flat(m.to_vec().split_off(skip))
                };
                self.loopback.push_back(f);
            } else {
                // A full loopback ring pushes back like a full driver ring (and keeps its
                // order: once one frame waits, the rest of this burst's loopback waits too).
                refused.push(f);
            }
        }
        self.port.tx_burst(0, &mut self.tx);
        // What the driver did not take waits for the next burst, in order, in the engine's
        // queue, encapsulated or not: the engine sees the port's back-pressure (and counts
        // it) and builds no more frames meanwhile. Kept in this link's queue instead (as
        // with --wire udp before), they were sent as far as the engine knew, and a port
        // slower than the engine (af_packet) let that queue grow to every peer's window.
        frames.extend(refused);
        frames.extend(self.tx.drain(..).map(|m| TxFrame {
            m,
            skip: 0,
            wired: true,
        }));
    }

    fn max_frame(&self) -> usize {
        self.max_frame
    }

    fn mac(&self) -> MacAddr {
        self.node_addr()
    }
}
