//! The Ethernet II header: destination, source, EtherType (no VLAN tag).

use super::Error;
use crate::wire::MacAddr;

pub const HEADER_LEN: usize = 14;
pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_ARP: u16 = 0x0806;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthRepr {
    pub dst: MacAddr,
    pub src: MacAddr,
    pub ethertype: u16,
}

impl EthRepr {
    pub fn parse(b: &[u8]) -> Result<EthRepr, Error> {
        let h = b.get(..HEADER_LEN).ok_or(Error::Truncated)?;
        let mut dst = [0u8; 6];
        let mut src = [0u8; 6];
        dst.copy_from_slice(&h[0..6]);
        src.copy_from_slice(&h[6..12]);
        Ok(EthRepr {
            dst: MacAddr(dst),
            src: MacAddr(src),
            ethertype: super::be16(h, 12),
        })
    }

    /// Writes the header into the first [`HEADER_LEN`] bytes of `b` (which must hold them).
    pub fn emit(&self, b: &mut [u8]) {
        b[0..6].copy_from_slice(&self.dst.0);
        b[6..12].copy_from_slice(&self.src.0);
        b[12..14].copy_from_slice(&self.ethertype.to_be_bytes());
    }
}
