//! Payloads of control frames: the selective-ack bitmap and the handshake's offer.

use super::{Error, OVERHEAD};

/// Payload of a standalone ack: which frames past the cumulative ack arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AckRepr {
    /// Bit i set: sequence number `ack + 1 + i` was received.
    pub sack: [u64; SACK_WORDS],
}

/// Words of the selective-ack bitmap: 256 frames past the cumulative ack.
pub const SACK_WORDS: usize = 4;
pub const SACK_BITS: u32 = (SACK_WORDS * 64) as u32;
pub const ACK_PAYLOAD_LEN: usize = SACK_WORDS * 8;

impl AckRepr {
    pub fn parse(p: &[u8]) -> Result<AckRepr, Error> {
        if p.len() < ACK_PAYLOAD_LEN {
            return Err(Error::Truncated);
        }
        let mut sack = [0u64; SACK_WORDS];
        for (i, w) in sack.iter_mut().enumerate() {
            *w = u64::from_be_bytes(p[i * 8..i * 8 + 8].try_into().expect("8"));
        }
        Ok(AckRepr { sack })
    }
    pub fn emit(&self, p: &mut [u8]) {
        for (i, w) in self.sack.iter().enumerate() {
            p[i * 8..i * 8 + 8].copy_from_slice(&w.to_be_bytes());
        }
    }
    /// Whether `ack + 1 + i` is marked.
    pub fn has(&self, i: u32) -> bool {
        i < SACK_BITS && self.sack[(i / 64) as usize] & (1 << (i % 64)) != 0
    }
    pub fn set(&mut self, i: u32) {
        if i < SACK_BITS {
            self.sack[(i / 64) as usize] |= 1 << (i % 64);
        }
    }
}

/// Payload of a connect request or answer: the limits each side announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConnectRepr {
    /// Largest frame (Ethernet header included) the sender can receive.
    pub max_frame: u32,
    /// Frames the sender accepts in flight from this peer (its reorder window).
    pub window: u32,
    /// Eager bytes the sender reserves for this peer in its unexpected store.
    pub eager_credit: u32,
    /// Longest the sender holds an ack owed while its loop is busy, in µs (wire version 7;
    /// the peer's retransmit timeout adds it; taken as at most `ACK_DELAY_LIMIT_NS`).
    pub max_ack_delay_us: u32,
    /// The slot under which the sender keeps the receiver, + 1: every later frame to the
    /// sender carries it ([`super::Repr::slot`], version 9).
    pub slot: u32,
}

pub const CONNECT_PAYLOAD_LEN: usize = 20;

impl ConnectRepr {
    pub fn parse(p: &[u8]) -> Result<ConnectRepr, Error> {
        if p.len() < CONNECT_PAYLOAD_LEN {
            return Err(Error::Truncated);
        }
        let u = |i: usize| u32::from_be_bytes(p[i..i + 4].try_into().expect("4"));
        let r = ConnectRepr {
            max_frame: u(0),
            window: u(4),
            eager_credit: u(8),
            max_ack_delay_us: u(12),
            slot: u(16),
        };
        if (r.max_frame as usize) < OVERHEAD + 64 || r.window == 0 {
            return Err(Error::Malformed);
        }
        Ok(r)
    }
    pub fn emit(&self, p: &mut [u8]) {
        p[0..4].copy_from_slice(&self.max_frame.to_be_bytes());
        p[4..8].copy_from_slice(&self.window.to_be_bytes());
        p[8..12].copy_from_slice(&self.eager_credit.to_be_bytes());
        p[12..16].copy_from_slice(&self.max_ack_delay_us.to_be_bytes());
        p[16..20].copy_from_slice(&self.slot.to_be_bytes());
    }
}
