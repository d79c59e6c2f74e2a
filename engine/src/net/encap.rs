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
use super::{UDP_OVERHEAD, node_addr, node_id};
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

pub struct UdpEncap {
    cfg: UdpConfig,
    neighbours: HashMap<Ipv4Addr, Neighbour>,
    pub stats: EncapStats,
}

impl UdpEncap {
    pub fn new(cfg: UdpConfig) -> Self {
        UdpEncap {
            cfg,
            neighbours: HashMap::new(),
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
        node_id(self.cfg.ip, self.cfg.port)
    }

    /// The Ethernet address known for `ip`, if still fresh at `now`.
    pub fn neighbour(&self, ip: Ipv4Addr, now: u64) -> Option<MacAddr> {
        let n = self.neighbours.get(&ip)?;
        let fresh = now.saturating_sub(n.learned) < self.cfg.neighbour_ttl_ns;
        n.mac.filter(|_| fresh)
    }

    fn learn(&mut self, ip: Ipv4Addr, mac: MacAddr, now: u64) {
        self.stats.arp_learned += 1;
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
        let mut dst_id = [0u8; 6];
        dst_id.copy_from_slice(&frame[eng..eng + 6]);
        let dst_id = MacAddr(dst_id);
        if dst_id == MacAddr::BROADCAST {
            self.stats.unroutable += 1;
            return Tx::Unroutable;
        }
        let (dst_ip, dst_port) = node_addr(dst_id);
        let Some(hop) = self.cfg.next_hop(dst_ip) else {
            self.stats.unroutable += 1;
            return Tx::Unroutable;
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
            return Tx::Unresolved {
                next_hop: hop,
                request,
            };
        };
        // The UDP source port spreads (source endpoint, destination endpoint) pairs over ECMP
        // paths; one pair always takes one port, so its frames stay in order.
        let eps = frame.get(eng + ETH_HEADER_LEN + 4..eng + ETH_HEADER_LEN + 8);
        let src_port = eps.map_or(0xc000, |e| entropy_port([e[0], e[1], e[2], e[3]]));
        let dgram_len = frame.len() + tail_len - ETH_HEADER_LEN - ipv4::HEADER_LEN;
        EthRepr {
            dst: hop_mac,
            src: self.cfg.mac,
            ethertype: eth::ETHERTYPE_IPV4,
        }
        .emit(frame);
        Ipv4Repr {
            src: self.cfg.ip,
            dst: dst_ip,
            protocol: udp::PROTOCOL,
            payload_len: dgram_len,
            ttl: ipv4::TTL,
            header_len: ipv4::HEADER_LEN,
            dont_fragment: true,
        }
        .emit(&mut frame[ETH_HEADER_LEN..]);
        if self.cfg.ip_checksum_offload {
            // Left for the NIC, which wants the field zero.
            frame[ETH_HEADER_LEN + 10..ETH_HEADER_LEN + 12].copy_from_slice(&[0, 0]);
        }
        let dgram = &mut frame[ETH_HEADER_LEN + ipv4::HEADER_LEN..];
        UdpRepr {
            src_port,
            dst_port,
            payload_len: dgram_len - udp::HEADER_LEN,
            checksum: 0,
        }
        .emit(dgram);
        match (self.cfg.udp_checksum, self.cfg.udp_checksum_offload) {
            (true, true) => udp::fill_pseudo_header_sum(dgram, self.cfg.ip, dst_ip),
            (true, false) => udp::fill_checksum(dgram, self.cfg.ip, dst_ip),
            (false, _) => {}
        }
        Tx::Send
    }

    /// Handles a received frame, rewriting it in place (see [`Rx`]).
    pub fn decap(&mut self, frame: &mut [u8], now: u64) -> Rx {
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

/// A UDP source port in the dynamic range (49152–65535) from the two endpoint ids.
fn entropy_port(eps: [u8; 4]) -> u16 {
    let mut h = u32::from_be_bytes(eps).wrapping_mul(0x9e37_79b1);
    h ^= h >> 15;
    0xc000 | (h as u16 & 0x3fff)
}

/// Bytes the encapsulation needs in front of the engine's frame.
pub const HEADROOM: usize = UDP_OVERHEAD;
