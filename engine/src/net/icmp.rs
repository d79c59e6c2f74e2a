//! ICMP echo (RFC 792), so `ping` of an agent's address works as users expect.

use super::{Error, be16};

pub const PROTOCOL: u8 = 1;
pub const HEADER_LEN: usize = 8;
pub const ECHO_REPLY: u8 = 0;
pub const ECHO_REQUEST: u8 = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcmpRepr {
    pub kind: u8,
    pub code: u8,
    pub ident: u16,
    pub seq: u16,
}

impl IcmpRepr {
    /// Parses the header of the message `b` (header and data), checking its checksum.
    pub fn parse(b: &[u8]) -> Result<IcmpRepr, Error> {
        let h = b.get(..HEADER_LEN).ok_or(Error::Truncated)?;
        if super::ones_sum(b, 0) != 0xffff {
            return Err(Error::Checksum);
        }
        Ok(IcmpRepr {
            kind: h[0],
            code: h[1],
            ident: be16(h, 4),
            seq: be16(h, 6),
        })
    }

    /// Writes the header into `b[..8]` and the checksum over all of `b` (header and data).
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = self.kind;
        b[1] = self.code;
        b[2..4].copy_from_slice(&[0, 0]);
        b[4..6].copy_from_slice(&self.ident.to_be_bytes());
        b[6..8].copy_from_slice(&self.seq.to_be_bytes());
        let ck = super::checksum(b);
        b[2..4].copy_from_slice(&ck.to_be_bytes());
    }
}
