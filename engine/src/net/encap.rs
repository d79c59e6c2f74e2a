//! The UDP/IPv4 encapsulation and the host duties of an address: pure functions over frames.
//!
//! Transmit: the engine builds an Ethernet-shaped tigon frame (its 14-byte header names the
//! destination and source nodes by [`super::node_id`]) behind [`super::UDP_OVERHEAD`] bytes of
//! headroom; [`UdpEncap::encap`] reads the names, then writes Ethernet, IPv4 and UDP headers in
//! place over the headroom and the engine's header, so the payload is never moved.
//! Receive: [`UdpEncap::decap`] checks the headers and writes the engine's Ethernet-shaped
//! header back in front of the tigon header, again in place. ARP requests for our address and
//! ICMP echo requests are turned into their replies in place.

use super::arp::{self, ArpRepr};
use super::eth::{self, EthRepr};
use super::icmp::{self, IcmpRepr};
use super::ipv4::{self, Ipv4Repr};
use super::udp::{self, UdpRepr};
use super::{UDP_OVERHEAD, be16, node_addr, node_id};
use crate::wire::{ETH_HEADER_LEN, ETHERTYPE, MIN_FRAME, MacAddr};
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::ops::Range;

/// An agent's place on an IP network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpConfig {
    /// The agent's own IPv4 address.
    pub ip: Ipv4Addr,
    /// Prefix length of its subnet (peers inside it are reached directly).
    pub prefix: u8,
    /// Next hop for peers outside the subnet; without one they are unreachable.
    pub gateway: Option<Ipv4Addr>,
    /// The UDP port tigon uses on every node of the cluster.
    pub port: u16,
    /// The port's Ethernet address.
    pub mac: MacAddr,
    /// Compute UDP checksums (else 0, "none", which IPv4 allows: used when the tigon header
    /// check and the link's frame check cover the datagram).
    pub udp_checksum: bool,
    /// How long a resolved neighbour is trusted before it is asked again (ns).
    pub neighbour_ttl_ns: u64,
    /// Least time between two ARP requests for the same address (ns).
    pub arp_retry_ns: u64,
    /// The NIC fills in the IPv4 header checksum (the frame must be marked for it).
    pub ip_checksum_offload: bool,
    /// The NIC computes the UDP checksum (with `udp_checksum`); the field holds the
    /// pseudo-header sum until then.
    pub udp_checksum_offload: bool,
}

impl UdpConfig {
    pub fn new(ip: Ipv4Addr, prefix: u8, mac: MacAddr) -> Self {
        UdpConfig {
            ip,
            prefix,
            gateway: None,
            port: super::DEFAULT_PORT,
            mac,
            udp_checksum: true,
            neighbour_ttl_ns: 30_000_000_000,
            arp_retry_ns: 200_000_000,
            ip_checksum_offload: false,
            udp_checksum_offload: false,
        }
    }

    fn mask(&self) -> u32 {
        match self.prefix {
            0 => 0,
            p => u32::MAX << (32 - u32::from(p.min(32))),
        }
    }

    /// Where a packet to `dst` goes first: `dst` itself on our subnet, else the gateway.
    pub fn next_hop(&self, dst: Ipv4Addr) -> Option<Ipv4Addr> {
        let m = self.mask();
        if u32::from(dst) & m == u32::from(self.ip) & m {
            Some(dst)
        } else {
            self.gateway
        }
    }
}

/// What became of a received frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rx {
    /// A tigon frame for the engine: these bytes of the buffer, now Ethernet-shaped.
    Tigon(Range<usize>),
    /// The buffer now holds a reply (ARP or ICMP echo) to send back, first `len` bytes.
    Reply(usize),
    /// Consumed (an ARP reply learned, ...) or not ours: nothing to do.
    Done,
    /// Refused: malformed or corrupted.
    Bad,
}

/// What became of a frame to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tx {
    /// Headers written: send the whole buffer.
    Send,
    /// The next hop's Ethernet address is not known yet; `request` says an ARP request should
    /// go out now (see [`UdpEncap::arp_request`]). Hold the frame or drop it.
    Unresolved { next_hop: Ipv4Addr, request: bool },
    /// No route (off-subnet without a gateway), or not addressable over UDP.
    Unroutable,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct EncapStats {
    pub arp_requests_sent: u64,
    pub arp_replies_sent: u64,
    pub arp_learned: u64,
    pub icmp_echo_replies: u64,
    /// IP packets for another address, other protocols, other UDP ports.
    pub not_ours: u64,
    /// Malformed or corrupted packets (bad header or UDP checksum).
    pub bad: u64,
    pub unroutable: u64,
}

struct Neighbour {
    mac: Option<MacAddr>,
    /// When the mapping was learned (valid for `neighbour_ttl_ns`).
    learned: u64,
    last_request: Option<u64>,
}

/// The headers of the destination the last frame went to, ready to copy. Most frames go where
/// the one before went (a message's fragments, a ping-pong's answers), so the route, the
/// neighbour lookup (a SipHash) and the IPv4 header's sum are done once per destination, not
/// once per frame.
struct Route {
    /// The engine's name of the destination node.
    dst: MacAddr,
    dst_ip: Ipv4Addr,
    /// Ethernet, IPv4 and UDP headers as [`UdpEncap::encap`] writes them, with the IPv4 total
    /// length and checksum, the UDP source port and length zero.
    hdr: [u8; HEADERS],
    /// One's complement sum of the IPv4 header in `hdr` (so the checksum is this sum plus the
    /// total length).
    ip_sum: u32,
    /// The next hop's mapping is fresh before this time.
    until: u64,
}

pub struct UdpEncap {
    cfg: UdpConfig,
    /// The engine's name of this node ([`UdpEncap::node_id`]).
    me: MacAddr,
    neighbours: HashMap<Ipv4Addr, Neighbour>,
    route: Option<Route>,
    pub stats: EncapStats,
}

impl UdpEncap {
    pub fn new(cfg: UdpConfig) -> Self {
        UdpEncap {
            cfg,
            me: node_id(cfg.ip, cfg.port),
            neighbours: HashMap::new(),
            route: None,
            stats: EncapStats::default(),
        }
    }

    pub fn config(&self) -> &UdpConfig {
        &self.cfg
    }

    /// What a frame [`UdpEncap::encap`] sent asks of the NIC: (IPv4 header checksum, UDP
    /// checksum).
    pub fn offloads(&self) -> (bool, bool) {
        let c = &self.cfg;
        (
            c.ip_checksum_offload,
            c.udp_checksum && c.udp_checksum_offload,
        )
    }

    /// This node's name for the engine.
    pub fn node_id(&self) -> MacAddr {
        self.me
    }

    /// The Ethernet address known for `ip`, if still fresh at `now`.
    pub fn neighbour(&self, ip: Ipv4Addr, now: u64) -> Option<MacAddr> {
        let n = self.neighbours.get(&ip)?;
        let fresh = now.saturating_sub(n.learned) < self.cfg.neighbour_ttl_ns;
        n.mac.filter(|_| fresh)
    }

    fn learn(&mut self, ip: Ipv4Addr, mac: MacAddr, now: u64) {
        self.stats.arp_learned += 1;
        // The next hop's address may have changed: the headers are built again.
        self.route = None;
        let n = self.neighbours.entry(ip).or_insert(Neighbour {
            mac: None,
            learned: now,
            last_request: None,
        });
        n.mac = Some(mac);
        n.learned = now;
    }

    /// Writes the UDP/IPv4 headers for the tigon frame at `frame[UDP_OVERHEAD..]`.
    pub fn encap(&mut self, frame: &mut [u8], now: u64) -> Tx {
        self.encap_chained(frame, 0, now)
    }

    /// [`Self::encap`] for a frame whose first `frame.len()` bytes are followed by `tail_len`
    /// more in other buffers (a payload sent in place): the lengths count them. A UDP checksum
    /// computed here would have to read them, so such a frame goes only where the checksum is
    /// zero or the NIC's; otherwise it is refused (counted as unroutable).
    pub fn encap_chained(&mut self, frame: &mut [u8], tail_len: usize, now: u64) -> Tx {
        let eng = UDP_OVERHEAD;
        if tail_len > 0 && self.cfg.udp_checksum && !self.cfg.udp_checksum_offload {
            self.stats.unroutable += 1;
            return Tx::Unroutable;
        }
        if frame.len() < eng + ETH_HEADER_LEN {
            self.stats.unroutable += 1;
            return Tx::Unroutable;
        }
        let dst = MacAddr(frame[eng..eng + 6].try_into().expect("6 bytes"));
        let cached = self
            .route
            .as_ref()
            .is_some_and(|r| r.dst == dst && now < r.until);
        if !cached && let Err(tx) = self.resolve(dst, now) {
            return tx;
        }
        let r = self.route.as_ref().expect("resolved");
        // The UDP source port spreads (source endpoint, destination endpoint) pairs over ECMP
        // paths; one pair always takes one port, so its frames stay in order.
        let eps = frame.get(eng + ETH_HEADER_LEN + 4..eng + ETH_HEADER_LEN + 8);
        let src_port = eps.map_or(0xc000, |e| entropy_port([e[0], e[1], e[2], e[3]]));
        let dgram_len = frame.len() + tail_len - ETH_HEADER_LEN - ipv4::HEADER_LEN;
        let h = &mut frame[..HEADERS];
        h.copy_from_slice(&r.hdr);
        let total = (ipv4::HEADER_LEN + dgram_len) as u16;
        h[IP + 2..IP + 4].copy_from_slice(&total.to_be_bytes());
        if !self.cfg.ip_checksum_offload {
            // Left zero for the NIC otherwise.
            let ck = !fold(r.ip_sum + u32::from(total));
            h[IP + 10..IP + 12].copy_from_slice(&ck.to_be_bytes());
        }
        h[UDP..UDP + 2].copy_from_slice(&src_port.to_be_bytes());
        h[UDP + 4..UDP + 6].copy_from_slice(&(dgram_len as u16).to_be_bytes());
        let dst_ip = r.dst_ip;
        let dgram = &mut frame[UDP..];
        match (self.cfg.udp_checksum, self.cfg.udp_checksum_offload) {
            (true, true) => udp::fill_pseudo_header_sum(dgram, self.cfg.ip, dst_ip),
            (true, false) => udp::fill_checksum(dgram, self.cfg.ip, dst_ip),
            (false, _) => {}
        }
        Tx::Send
    }

    /// Finds the next hop towards the node `dst` and its Ethernet address, and keeps the
    /// headers of frames to it in `self.route`; or says why a frame to it cannot go now.
    fn resolve(&mut self, dst: MacAddr, now: u64) -> Result<(), Tx> {
        if dst == MacAddr::BROADCAST {
            self.stats.unroutable += 1;
            return Err(Tx::Unroutable);
        }
        let (dst_ip, dst_port) = node_addr(dst);
        let Some(hop) = self.cfg.next_hop(dst_ip) else {
            self.stats.unroutable += 1;
            return Err(Tx::Unroutable);
        };
        let Some(hop_mac) = self.neighbour(hop, now) else {
            let retry = self.cfg.arp_retry_ns;
            let n = self.neighbours.entry(hop).or_insert(Neighbour {
                mac: None,
                learned: 0,
                last_request: None,
            });
            let request = n
                .last_request
                .is_none_or(|t| now.saturating_sub(t) >= retry);
            if request {
                n.last_request = Some(now);
            }
            return Err(Tx::Unresolved {
                next_hop: hop,
                request,
            });
        };
        let learned = self.neighbours.get(&hop).map_or(0, |n| n.learned);
        let mut hdr = [0u8; HEADERS];
        EthRepr {
            dst: hop_mac,
            src: self.cfg.mac,
            ethertype: eth::ETHERTYPE_IPV4,
        }
        .emit(&mut hdr);
        Ipv4Repr {
            src: self.cfg.ip,
            dst: dst_ip,
            protocol: udp::PROTOCOL,
            payload_len: 0,
            ttl: ipv4::TTL,
            header_len: ipv4::HEADER_LEN,
            dont_fragment: true,
        }
        .emit(&mut hdr[IP..]);
        // Total length and checksum are the frame's.
        hdr[IP + 2..IP + 4].fill(0);
        hdr[IP + 10..IP + 12].fill(0);
        UdpRepr {
            src_port: 0,
            dst_port,
            payload_len: 0,
            checksum: 0,
        }
        .emit(&mut hdr[UDP..]);
        hdr[UDP + 4..UDP + 6].fill(0);
        self.route = Some(Route {
            dst,
            dst_ip,
            ip_sum: super::ones_sum(&hdr[IP..UDP], 0),
            hdr,
            until: learned.saturating_add(self.cfg.neighbour_ttl_ns),
        });
        Ok(())
    }

    /// Handles a received frame, rewriting it in place (see [`Rx`]).
    pub fn decap(&mut self, frame: &mut [u8], now: u64) -> Rx {
        match self.tigon_datagram(frame) {
            Some(r) => Rx::Tigon(r),
            None => self.decap_any(frame, now),
        }
    }

    /// [`Self::decap`] for any frame: ARP, ICMP, IPv4 with options, datagrams with a UDP
    /// checksum, and all that is not ours or is malformed. Out of line: inlined, its
    /// register saves were paid by every frame the one-pass check takes.
    #[inline(never)]
    fn decap_any(&mut self, frame: &mut [u8], now: u64) -> Rx {
        let Ok(e) = EthRepr::parse(frame) else {
            self.stats.bad += 1;
            return Rx::Bad;
        };
        match e.ethertype {
            eth::ETHERTYPE_ARP => self.on_arp(frame, now),
            eth::ETHERTYPE_IPV4 => self.on_ipv4(frame, e),
            _ => {
                self.stats.not_ours += 1;
                Rx::Done
            }
        }
    }

    /// The common case, checked in one pass over fixed offsets: an unfragmented IPv4
    /// datagram without options to our address and port, its header checksum right, its UDP
    /// checksum zero. Such a frame is made the engine's as [`Self::on_ipv4`] makes it (the
    /// same range, the same bytes); anything else (`None`) takes the general path, which
    /// handles and counts it.
    fn tigon_datagram(&self, frame: &mut [u8]) -> Option<Range<usize>> {
        let h: &[u8; HEADERS] = frame.get(..HEADERS)?.try_into().ok()?;
        let ours = be16(h, 12) == eth::ETHERTYPE_IPV4
            && h[IP] == 0x45
            && be16(h, IP + 6) & 0x3fff == 0
            && h[IP + 9] == udp::PROTOCOL
            && h[IP + 16..IP + 20] == self.cfg.ip.octets()
            && be16(h, UDP + 2) == self.cfg.port
            && be16(h, UDP + 6) == 0;
        if !ours {
            return None;
        }
        let total = usize::from(be16(h, IP + 2));
        let udp_len = usize::from(be16(h, UDP + 4));
        let fits = udp_len >= udp::HEADER_LEN
            && udp_len + ipv4::HEADER_LEN <= total
            && IP + total <= frame.len();
        let ip_hdr: &[u8; ipv4::HEADER_LEN] = h[IP..UDP].try_into().expect("20 bytes");
        if !fits || sum_20(ip_hdr) != 0xffff {
            return None;
        }
        let mut src = [0u8; 6];
        src[..4].copy_from_slice(&h[IP + 12..IP + 16]);
        src[4..].copy_from_slice(&self.cfg.port.to_be_bytes());
        // The engine's Ethernet-shaped header right before the tigon header (over the end
        // of the IPv4 header and the UDP header).
        let start = HEADERS - ETH_HEADER_LEN;
        let e = &mut frame[start..HEADERS];
        e[..6].copy_from_slice(&self.me.0);
        e[6..12].copy_from_slice(&src);
        e[12..].copy_from_slice(&ETHERTYPE.to_be_bytes());
        Some(start..UDP + udp_len)
    }

    fn on_arp(&mut self, frame: &mut [u8], now: u64) -> Rx {
        let Ok(a) = ArpRepr::parse(&frame[ETH_HEADER_LEN..]) else {
            self.stats.bad += 1;
            return Rx::Bad;
        };
        let for_us = a.target_ip == self.cfg.ip;
        // RFC 826: refresh a mapping we hold from any ARP packet (so a replaced node's
        // gratuitous ARP is picked up at once), add one only when addressed to us.
        if a.sender_ip != Ipv4Addr::UNSPECIFIED
            && (for_us
                || self
                    .neighbours
                    .get(&a.sender_ip)
                    .is_some_and(|n| n.mac.is_some()))
        {
            self.learn(a.sender_ip, a.sender_mac, now);
        }
        if !(for_us && a.op == arp::OP_REQUEST) {
            return Rx::Done;
        }
        self.stats.arp_replies_sent += 1;
        Rx::Reply(self.emit_arp(frame, arp::OP_REPLY, a.sender_mac, a.sender_ip))
    }

    fn on_ipv4(&mut self, frame: &mut [u8], e: EthRepr) -> Rx {
        let Ok(ip) = Ipv4Repr::parse(&frame[ETH_HEADER_LEN..]) else {
            self.stats.bad += 1;
            return Rx::Bad;
        };
        if ip.dst != self.cfg.ip {
            self.stats.not_ours += 1;
            return Rx::Done;
        }
        let l4 = ETH_HEADER_LEN + ip.header_len;
        let end = l4 + ip.payload_len;
        match ip.protocol {
            udp::PROTOCOL => {}
            icmp::PROTOCOL => return self.on_icmp(frame, e, ip, l4..end),
            _ => {
                self.stats.not_ours += 1;
                return Rx::Done;
            }
        }
        let dgram = &frame[l4..end];
        let Ok(u) = UdpRepr::parse(dgram) else {
            self.stats.bad += 1;
            return Rx::Bad;
        };
        if u.dst_port != self.cfg.port {
            self.stats.not_ours += 1;
            return Rx::Done;
        }
        if !udp::checksum_ok(&dgram[..udp::HEADER_LEN + u.payload_len], ip.src, ip.dst) {
            self.stats.bad += 1;
            return Rx::Bad;
        }
        // The engine's view: its Ethernet-shaped header right before the tigon header. The
        // sender's name uses the cluster's port: source ports carry flow entropy instead.
        let start = l4 + udp::HEADER_LEN - ETH_HEADER_LEN;
        let stop = l4 + udp::HEADER_LEN + u.payload_len;
        EthRepr {
            dst: self.node_id(),
            src: node_id(ip.src, self.cfg.port),
            ethertype: ETHERTYPE,
        }
        .emit(&mut frame[start..]);
        Rx::Tigon(start..stop)
    }

    fn on_icmp(&mut self, frame: &mut [u8], e: EthRepr, ip: Ipv4Repr, l4: Range<usize>) -> Rx {
        let Ok(req) = IcmpRepr::parse(&frame[l4.clone()]) else {
            self.stats.bad += 1;
            return Rx::Bad;
        };
        if req.kind != icmp::ECHO_REQUEST || ip.header_len != ipv4::HEADER_LEN {
            self.stats.not_ours += 1;
            return Rx::Done;
        }
        self.stats.icmp_echo_replies += 1;
        // Answer the way it came: to the sender's Ethernet address (a router's, off-subnet).
        EthRepr {
            dst: e.src,
            src: self.cfg.mac,
            ethertype: eth::ETHERTYPE_IPV4,
        }
        .emit(frame);
        Ipv4Repr {
            src: self.cfg.ip,
            dst: ip.src,
            ttl: ipv4::TTL,
            ..ip
        }
        .emit(&mut frame[ETH_HEADER_LEN..]);
        IcmpRepr {
            kind: icmp::ECHO_REPLY,
            ..req
        }
        .emit(&mut frame[l4.clone()]);
        Rx::Reply(l4.end)
    }

    fn emit_arp(&self, b: &mut [u8], op: u16, to: MacAddr, to_ip: Ipv4Addr) -> usize {
        let len = MIN_FRAME.min(b.len());
        b[..len].fill(0);
        let eth_dst = if op == arp::OP_REQUEST && to == MacAddr([0; 6]) {
            MacAddr::BROADCAST
        } else {
            to
        };
        EthRepr {
            dst: eth_dst,
            src: self.cfg.mac,
            ethertype: eth::ETHERTYPE_ARP,
        }
        .emit(b);
        ArpRepr {
            op,
            sender_mac: self.cfg.mac,
            sender_ip: self.cfg.ip,
            target_mac: to,
            target_ip: to_ip,
        }
        .emit(&mut b[ETH_HEADER_LEN..]);
        len
    }

    /// Writes a broadcast ARP request for `target` into `b` (at least [`MIN_FRAME`] bytes);
    /// returns its length.
    pub fn arp_request(&mut self, target: Ipv4Addr, b: &mut [u8]) -> usize {
        self.stats.arp_requests_sent += 1;
        self.emit_arp(b, arp::OP_REQUEST, MacAddr([0; 6]), target)
    }

    /// Writes a gratuitous ARP (a request for our own address) into `b`: sent at start so
    /// neighbours that knew another MAC for this address learn the new one.
    pub fn gratuitous_arp(&mut self, b: &mut [u8]) -> usize {
        self.stats.arp_requests_sent += 1;
        let len = self.emit_arp(b, arp::OP_REQUEST, MacAddr([0; 6]), self.cfg.ip);
        b[..6].copy_from_slice(&MacAddr::BROADCAST.0);
        len
    }
}

/// Where the IPv4 and UDP headers start in a frame, and where they end.
const IP: usize = ETH_HEADER_LEN;
const UDP: usize = IP + ipv4::HEADER_LEN;
const HEADERS: usize = UDP + udp::HEADER_LEN;

/// Folds a one's complement sum to 16 bits (not complemented).
#[inline]
fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The one's complement sum of a 20-byte header, folded: 0xffff when its checksum is right.
/// Summed by 32-bit words (RFC 1071: any word size gives the same folded sum).
#[inline(always)]
fn sum_20(h: &[u8; ipv4::HEADER_LEN]) -> u16 {
    let mut s = 0u64;
    for w in h.chunks_exact(4) {
        s += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    }
    let s = (s & 0xffff_ffff) + (s >> 32);
    let s = (s & 0xffff_ffff) + (s >> 32);
    fold((s as u32 & 0xffff) + (s as u32 >> 16))
}

/// A UDP source port in the dynamic range (49152–65535) from the two endpoint ids.
fn entropy_port(eps: [u8; 4]) -> u16 {
    let mut h = u32::from_be_bytes(eps).wrapping_mul(0x9e37_79b1);
    h ^= h >> 15;
    0xc000 | (h as u16 & 0x3fff)
}

/// Bytes the encapsulation needs in front of the engine's frame.
pub const HEADROOM: usize = UDP_OVERHEAD;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hw(i: u8) -> MacAddr {
        MacAddr([2, 0, 0, 0, 0, i])
    }

    /// An encapsulation at 10.71.1.1 that knows 10.71.1.2 (hw 2) and the router 10.71.1.254
    /// (hw 0xfe), with the checksum settings `ck` (UDP checksum, IPv4 offload, UDP offload).
    fn encap_with(ck: (bool, bool, bool)) -> UdpEncap {
        let mut c = UdpConfig::new(Ipv4Addr::new(10, 71, 1, 1), 24, hw(1));
        c.gateway = Some(Ipv4Addr::new(10, 71, 1, 254));
        (
            c.udp_checksum,
            c.ip_checksum_offload,
            c.udp_checksum_offload,
        ) = ck;
        let mut e = UdpEncap::new(c);
        e.learn(Ipv4Addr::new(10, 71, 1, 2), hw(2), 0);
        e.learn(Ipv4Addr::new(10, 71, 1, 254), hw(0xfe), 0);
        e
    }

    /// The headers written field by field, as the encapsulation wrote them before it kept
    /// them per destination.
    fn reference(e: &UdpEncap, frame: &mut [u8], tail_len: usize, hop_mac: MacAddr) {
        let c = *e.config();
        let (dst_ip, dst_port) = node_addr(MacAddr(frame[28..34].try_into().unwrap()));
        let eps = &frame[UDP_OVERHEAD + 18..UDP_OVERHEAD + 22];
        let src_port = entropy_port([eps[0], eps[1], eps[2], eps[3]]);
        let dgram_len = frame.len() + tail_len - 34;
        EthRepr {
            dst: hop_mac,
            src: c.mac,
            ethertype: eth::ETHERTYPE_IPV4,
        }
        .emit(frame);
        Ipv4Repr {
            src: c.ip,
            dst: dst_ip,
            protocol: udp::PROTOCOL,
            payload_len: dgram_len,
            ttl: ipv4::TTL,
            header_len: ipv4::HEADER_LEN,
            dont_fragment: true,
        }
        .emit(&mut frame[14..]);
        if c.ip_checksum_offload {
            frame[24..26].fill(0);
        }
        let dgram = &mut frame[34..];
        UdpRepr {
            src_port,
            dst_port,
            payload_len: dgram_len - 8,
            checksum: 0,
        }
        .emit(dgram);
        match (c.udp_checksum, c.udp_checksum_offload) {
            (true, true) => udp::fill_pseudo_header_sum(dgram, c.ip, dst_ip),
            (true, false) => udp::fill_checksum(dgram, c.ip, dst_ip),
            (false, _) => {}
        }
    }

    fn engine_frame(dst: MacAddr, eps: [u8; 4], payload: usize) -> Vec<u8> {
        let mut f = vec![0xa5; UDP_OVERHEAD + 64 + payload];
        f[UDP_OVERHEAD..UDP_OVERHEAD + 6].copy_from_slice(&dst.0);
        f[UDP_OVERHEAD + 18..UDP_OVERHEAD + 22].copy_from_slice(&eps);
        f
    }

    proptest! {
        /// Frames to a destination whose headers are kept (the same one again) and to others
        /// (on the subnet, through the router) get exactly the field-by-field headers.
        #[test]
        fn kept_headers_equal_headers_written_field_by_field(
            sends in proptest::collection::vec((0u8..3, any::<[u8; 4]>(), 0usize..9000, 0usize..9000), 1..12),
            ck in any::<(bool, bool, bool)>(),
        ) {
            let mut e = encap_with(ck);
            let peers = [
                (node_id(Ipv4Addr::new(10, 71, 1, 2), 7470), hw(2)),
                (node_id(Ipv4Addr::new(10, 71, 2, 9), 7470), hw(0xfe)),
                (node_id(Ipv4Addr::new(10, 71, 1, 2), 7471), hw(2)),
            ];
            for (p, eps, len, tail) in sends {
                let (dst, hop) = peers[usize::from(p)];
                let tail = if ck.0 && !ck.2 { 0 } else { tail };
                let mut got = engine_frame(dst, eps, len);
                let mut want = got.clone();
                prop_assert_eq!(e.encap_chained(&mut got, tail, 5), Tx::Send);
                reference(&e, &mut want, tail, hop);
                prop_assert_eq!(got, want);
            }
        }

        /// A received datagram taken by the one-pass check becomes exactly what the general
        /// path makes of it; whatever that check refuses, the general path alone decides.
        #[test]
        fn the_one_pass_check_agrees_with_the_general_path(
            len in 0usize..300,
            flips in proptest::collection::vec((0usize..48, any::<u8>()), 0..3),
            pad in 0usize..8,
        ) {
            let mut a = encap_with((false, false, false));
            let mut b = UdpEncap::new(UdpConfig::new(Ipv4Addr::new(10, 71, 1, 2), 24, hw(2)));
            let mut f = engine_frame(b.node_id(), [0, 1, 0, 2], len);
            prop_assert_eq!(a.encap(&mut f, 1), Tx::Send);
            f.resize(f.len() + pad, 0);
            prop_assert!(b.tigon_datagram(&mut f.clone()).is_some(), "a clean datagram takes it");
            for (at, x) in flips {
                f[at] ^= x;
            }
            let mut general = f.clone();
            let want = b.decap_any(&mut general, 1);
            if let Some(r) = b.tigon_datagram(&mut f) {
                prop_assert_eq!(Rx::Tigon(r.clone()), want);
                prop_assert_eq!(&f[r.clone()], &general[r]);
            }
        }

        #[test]
        fn sum_20_is_the_rfc1071_sum(h in any::<[u8; 20]>()) {
            prop_assert_eq!(sum_20(&h), super::super::ones_sum(&h, 0) as u16);
        }
    }

    /// A new address learned for the next hop (a replaced node) takes effect at once, and
    /// kept headers are not used past the neighbour's timeout.
    #[test]
    fn kept_headers_follow_the_neighbour_cache() {
        let mut e = encap_with((false, false, false));
        let peer = Ipv4Addr::new(10, 71, 1, 2);
        let dst = node_id(peer, 7470);
        let mut f = engine_frame(dst, [0; 4], 10);
        assert_eq!(e.encap(&mut f, 1), Tx::Send);
        assert_eq!(&f[..6], &hw(2).0);
        e.learn(peer, hw(3), 2);
        let mut f = engine_frame(dst, [0; 4], 10);
        assert_eq!(e.encap(&mut f, 3), Tx::Send);
        assert_eq!(&f[..6], &hw(3).0, "the new address");
        let ttl = e.config().neighbour_ttl_ns;
        let mut f = engine_frame(dst, [0; 4], 10);
        assert_eq!(e.encap(&mut f, 2 + ttl - 1), Tx::Send);
        let mut f = engine_frame(dst, [0; 4], 10);
        assert_eq!(
            e.encap(&mut f, 2 + ttl),
            Tx::Unresolved {
                next_hop: peer,
                request: true
            },
            "asked again once the mapping is stale"
        );
    }
}
