//! The IPv4 header (RFC 791). tigon sends no options and never fragments: DF is always set,
//! the engine fragments messages itself; received fragments are refused.

use super::{Error, be16};
use std::net::Ipv4Addr;

/// Header length without options (what tigon sends).
pub const HEADER_LEN: usize = 20;
const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const FRAG_OFFSET: u16 = 0x1fff;
/// Time to live of tigon's packets: enough for any data-centre path.
pub const TTL: u8 = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Repr {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub protocol: u8,
    /// Bytes after the header (the total length minus the header length).
    pub payload_len: usize,
    pub ttl: u8,
    /// Header length in bytes (20 plus options); emitting always writes 20.
    pub header_len: usize,
    pub dont_fragment: bool,
}

impl Ipv4Repr {
    /// Parses the header of the packet `b` (header, payload, maybe Ethernet padding after).
    pub fn parse(b: &[u8]) -> Result<Ipv4Repr, Error> {
        let h = b.get(..HEADER_LEN).ok_or(Error::Truncated)?;
        if h[0] >> 4 != 4 {
            return Err(Error::Unsupported);
        }
        let ihl = usize::from(h[0] & 0xf) * 4;
        if ihl < HEADER_LEN {
            return Err(Error::Malformed);
        }
        let total = usize::from(be16(h, 2));
        if total < ihl {
            return Err(Error::Malformed);
        }
        if total > b.len() {
            return Err(Error::Truncated);
        }
        if super::ones_sum(&b[..ihl], 0) != 0xffff {
            return Err(Error::Checksum);
        }
        let frag = be16(h, 6);
        if frag & (FLAG_MF | FRAG_OFFSET) != 0 {
            // A fragment: tigon never sends them, so this is not ours to reassemble.
            return Err(Error::Unsupported);
        }
        Ok(Ipv4Repr {
            src: Ipv4Addr::new(h[12], h[13], h[14], h[15]),
            dst: Ipv4Addr::new(h[16], h[17], h[18], h[19]),
            protocol: h[9],
            payload_len: total - ihl,
            ttl: h[8],
            header_len: ihl,
            dont_fragment: frag & FLAG_DF != 0,
        })
    }

    /// Writes a 20-byte header with DF set and its checksum into `b[..20]`.
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = 0x45;
        b[1] = 0;
        let total = (HEADER_LEN + self.payload_len) as u16;
        b[2..4].copy_from_slice(&total.to_be_bytes());
        // Identification only matters for reassembly, which DF rules out (RFC 6864).
        b[4..6].copy_from_slice(&[0, 0]);
        let df = if self.dont_fragment { FLAG_DF } else { 0 };
        b[6..8].copy_from_slice(&df.to_be_bytes());
        b[8] = self.ttl;
        b[9] = self.protocol;
        b[10..12].copy_from_slice(&[0, 0]);
        b[12..16].copy_from_slice(&self.src.octets());
        b[16..20].copy_from_slice(&self.dst.octets());
        let ck = super::checksum(&b[..HEADER_LEN]);
        b[10..12].copy_from_slice(&ck.to_be_bytes());
    }
}
