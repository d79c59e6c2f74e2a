//! The UDP header (RFC 768).

use super::{Error, be16};
use std::net::Ipv4Addr;

pub const HEADER_LEN: usize = 8;
pub const PROTOCOL: u8 = 17;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpRepr {
    pub src_port: u16,
    pub dst_port: u16,
    /// Payload bytes (the header's length field minus 8).
    pub payload_len: usize,
    /// The checksum field as found; 0 means the sender computed none (allowed over IPv4).
    pub checksum: u16,
}

impl UdpRepr {
    /// Parses the header of a datagram whose bytes (header and payload) are `b`.
    pub fn parse(b: &[u8]) -> Result<UdpRepr, Error> {
        let h = b.get(..HEADER_LEN).ok_or(Error::Truncated)?;
        let len = usize::from(be16(h, 4));
        if len < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if len > b.len() {
            return Err(Error::Truncated);
        }
        Ok(UdpRepr {
            src_port: be16(h, 0),
            dst_port: be16(h, 2),
            payload_len: len - HEADER_LEN,
            checksum: be16(h, 6),
        })
    }

    /// Writes the header into `b[..8]` with a zero checksum (see [`fill_checksum`]).
    pub fn emit(&self, b: &mut [u8]) {
        b[0..2].copy_from_slice(&self.src_port.to_be_bytes());
        b[2..4].copy_from_slice(&self.dst_port.to_be_bytes());
        let len = (self.payload_len + HEADER_LEN) as u16;
        b[4..6].copy_from_slice(&len.to_be_bytes());
        b[6..8].copy_from_slice(&[0, 0]);
    }
}

fn pseudo_sum(src: Ipv4Addr, dst: Ipv4Addr, len: usize) -> u32 {
    let mut p = [0u8; 12];
    p[0..4].copy_from_slice(&src.octets());
    p[4..8].copy_from_slice(&dst.octets());
    p[9] = PROTOCOL;
    p[10..12].copy_from_slice(&(len as u16).to_be_bytes());
    super::ones_sum(&p, 0)
}

/// Stores the pseudo-header sum (folded, not complemented) in the checksum field: what a NIC
/// that offloads the UDP checksum expects there (DPDK's convention), before it adds the rest.
pub fn fill_pseudo_header_sum(dgram: &mut [u8], src: Ipv4Addr, dst: Ipv4Addr) {
    let sum = pseudo_sum(src, dst, dgram.len()) as u16;
    dgram[6..8].copy_from_slice(&sum.to_be_bytes());
}

/// Computes and stores the checksum of the datagram `dgram` (header and payload).
pub fn fill_checksum(dgram: &mut [u8], src: Ipv4Addr, dst: Ipv4Addr) {
    dgram[6..8].copy_from_slice(&[0, 0]);
    let sum = super::ones_sum(dgram, pseudo_sum(src, dst, dgram.len()));
    let ck = !(sum as u16);
    // 0 means "no checksum"; a computed 0 is sent as all ones (RFC 768).
    let ck = if ck == 0 { 0xffff } else { ck };
    dgram[6..8].copy_from_slice(&ck.to_be_bytes());
}

/// Whether the datagram's checksum is absent (0) or right.
pub fn checksum_ok(dgram: &[u8], src: Ipv4Addr, dst: Ipv4Addr) -> bool {
    if dgram.len() < HEADER_LEN || be16(dgram, 6) == 0 {
        return dgram.len() >= HEADER_LEN;
    }
    super::ones_sum(dgram, pseudo_sum(src, dst, dgram.len())) == 0xffff
}
