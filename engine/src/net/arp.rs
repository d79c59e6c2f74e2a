//! ARP for IPv4 over Ethernet (RFC 826): the only kind a tigon agent speaks.

use super::{Error, be16};
use crate::wire::MacAddr;
use std::net::Ipv4Addr;

/// Length of an Ethernet/IPv4 ARP packet.
pub const LEN: usize = 28;
pub const OP_REQUEST: u16 = 1;
pub const OP_REPLY: u16 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpRepr {
    pub op: u16,
    pub sender_mac: MacAddr,
    pub sender_ip: Ipv4Addr,
    pub target_mac: MacAddr,
    pub target_ip: Ipv4Addr,
}

impl ArpRepr {
    pub fn parse(b: &[u8]) -> Result<ArpRepr, Error> {
        let p = b.get(..LEN).ok_or(Error::Truncated)?;
        // Hardware Ethernet (1), protocol IPv4, lengths 6 and 4: anything else is not ours.
        if be16(p, 0) != 1 || be16(p, 2) != super::eth::ETHERTYPE_IPV4 || p[4] != 6 || p[5] != 4 {
            return Err(Error::Unsupported);
        }
        let op = be16(p, 6);
        if op != OP_REQUEST && op != OP_REPLY {
            return Err(Error::Unsupported);
        }
        let mac = |at: usize| {
            let mut m = [0u8; 6];
            m.copy_from_slice(&p[at..at + 6]);
            MacAddr(m)
        };
        let ip = |at: usize| Ipv4Addr::new(p[at], p[at + 1], p[at + 2], p[at + 3]);
        Ok(ArpRepr {
            op,
            sender_mac: mac(8),
            sender_ip: ip(14),
            target_mac: mac(18),
            target_ip: ip(24),
        })
    }

    /// Writes the packet into the first [`LEN`] bytes of `b`.
    pub fn emit(&self, b: &mut [u8]) {
        b[0..2].copy_from_slice(&1u16.to_be_bytes());
        b[2..4].copy_from_slice(&super::eth::ETHERTYPE_IPV4.to_be_bytes());
        b[4] = 6;
        b[5] = 4;
        b[6..8].copy_from_slice(&self.op.to_be_bytes());
        b[8..14].copy_from_slice(&self.sender_mac.0);
        b[14..18].copy_from_slice(&self.sender_ip.octets());
        b[18..24].copy_from_slice(&self.target_mac.0);
        b[24..28].copy_from_slice(&self.target_ip.octets());
    }
}
