//! The routable wire: tigon frames inside UDP/IPv4, and what a host needs to send them.
//!
//! Raw Ethernet (EtherType [`crate::wire::ETHERTYPE`]) never leaves one layer-2 domain. With
//! `--wire udp` the same tigon header travels as the payload of a UDP datagram, so frames cross
//! routers and cloud VPCs, as RoCE v2 does for InfiniBand transport.
//!
//! - [`eth`], [`arp`], [`ipv4`], [`udp`], [`icmp`]: checked views and `Repr`s in the style of
//!   [`crate::wire`]: parsing is total (any bytes give a value or an [`Error`]), emitting writes
//!   exactly what parsing reads.
//! - [`encap`]: the encapsulation itself and the host duties that come with an IP address
//!   (ARP for its own address and next hops, ICMP echo), as pure functions over byte slices.
//! - [`link`]: a [`crate::Link`] adapter that puts any Ethernet link under the engine in UDP
//!   mode; the node agent does the same inside its DPDK port link.
//!
//! The engine names a node by a 6-byte [`crate::MacAddr`]. In UDP mode that name is the node's
//! IPv4 address and UDP port ([`node_id`]): the engine is unchanged, and the modex carries
//! exactly the IP address and port.

pub mod arp;
pub mod encap;
pub mod eth;
pub mod icmp;
pub mod ipv4;
pub mod link;
pub mod udp;

use crate::wire::MacAddr;
use core::fmt;
use std::net::Ipv4Addr;

/// Why a packet was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Shorter than its headers, or than the length a header announces.
    Truncated,
    /// A field holds a value this host does not handle (an IP version, a hardware type...).
    Unsupported,
    /// The header checksum does not match.
    Checksum,
    /// A field is out of range (an IP header length below 20, a UDP length below 8...).
    Malformed,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            Error::Truncated => "packet truncated",
            Error::Unsupported => "unsupported packet type",
            Error::Checksum => "header checksum mismatch",
            Error::Malformed => "malformed header field",
        })
    }
}

impl std::error::Error for Error {}

/// The UDP port tigon listens on by default (unassigned by IANA).
pub const DEFAULT_PORT: u16 = 7470;
/// Bytes UDP/IPv4 adds in front of the tigon header, compared with raw Ethernet.
pub const UDP_OVERHEAD: usize = ipv4::HEADER_LEN + udp::HEADER_LEN;

/// The engine's 6-byte name of a node reached over UDP: its IPv4 address, then its port.
pub fn node_id(ip: Ipv4Addr, port: u16) -> MacAddr {
    let o = ip.octets();
    let p = port.to_be_bytes();
    MacAddr([o[0], o[1], o[2], o[3], p[0], p[1]])
}

/// The IPv4 address and UDP port in a node name made by [`node_id`].
pub fn node_addr(id: MacAddr) -> (Ipv4Addr, u16) {
    let b = id.0;
    (
        Ipv4Addr::new(b[0], b[1], b[2], b[3]),
        u16::from_be_bytes([b[4], b[5]]),
    )
}

/// The Internet checksum (RFC 1071) of `data`, folded, not yet complemented, starting from
/// `sum` (so pseudo-headers can be added first).
pub fn ones_sum(data: &[u8], mut sum: u32) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum
}

/// The complemented checksum to store in a header.
pub fn checksum(data: &[u8]) -> u16 {
    !(ones_sum(data, 0) as u16)
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_id_round_trip() {
        let ip = Ipv4Addr::new(10, 71, 1, 2);
        assert_eq!(node_addr(node_id(ip, 7470)), (ip, 7470));
    }

    #[test]
    fn rfc1071_example() {
        // The example of RFC 1071 section 3: the sum of these words is 0xddf2.
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(ones_sum(&d, 0), 0xddf2);
        assert_eq!(checksum(&d), !0xddf2);
    }
}
