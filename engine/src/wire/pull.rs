//! The compact header of [`Kind::PullData`] frames (wire version 6): a fragment of a pulled
//! block carries only what its receiver uses — both connection ids, the stream's sequence,
//! ack and credit, the message id, the payload's length and its offset in the message — in
//! 42 bytes instead of the full header's 80, little-endian like the small messages' compact
//! header (`small.rs`). Rendezvous data is most of a large message's frames: this is the
//! header its receiver parses, checks and hashes per frame, and 38 more payload bytes per
//! frame (and its payload starts 8-byte aligned in the frame).
//!
//! Unlike a [`Kind::Small`] frame it names both sessions (not their tag): a receiver that
//! forgot the connection can answer any of them with a Reset, so a resent fragment keeps
//! this header (and its length: a pulled block is cut to this header's fragment size once).

use super::small::check_prefix;
use super::*;

/// The fields of a [`Kind::PullData`] frame: what its sender writes and its receiver reads
/// (the receive path's read of pulled data, with no full [`Repr`] built).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PullHeader {
    pub dst_mac: MacAddr,
    pub src_mac: MacAddr,
    pub flags: u8,
    /// The sender's and the receiver's connection ids (the full header's `src_session`,
    /// `dst_session`).
    pub src_session: u32,
    pub dst_session: u32,
    pub seq: u32,
    pub ack: u32,
    pub credit: u32,
    pub msg_id: u32,
    /// Payload bytes in this frame.
    pub length: u16,
    /// Where they go in the message.
    pub offset: u64,
}

impl PullHeader {
    /// Checks a [`Kind::PullData`] frame as [`Frame::new_checked`] and [`Repr::parse`] do
    /// (lengths, EtherType, version, kind, checksum, then the fields: the same error for
    /// the same fault, in the same order) and reads its header.
    #[inline]
    pub fn parse(b: &[u8]) -> Result<PullHeader, Error> {
        use field::pull as f;
        check_prefix(b, Kind::PullData)?;
        // One length check for the whole header (a fixed-size view), none per field.
        let h: &[u8; PULL_OVERHEAD] = b.first_chunk().ok_or(Error::Truncated)?;
        let len = le16(h, f::LENGTH) as usize;
        if b.len() - PULL_OVERHEAD < len {
            return Err(Error::Truncated);
        }
        let ck = if h[f::FLAGS] as u16 & FLAG_PAYLOAD_CK != 0 {
            checksum(&b[..PULL_OVERHEAD + len], f::CHECKSUM.start)
        } else {
            pull_header_checksum(h)
        };
        if ck != le32(h, f::CHECKSUM) {
            return Err(Error::Checksum);
        }
        let r = Self::read(h);
        r.validate()?;
        Ok(r)
    }

    /// The fields of a header (no checks).
    #[inline]
    pub(super) fn read(b: &[u8; PULL_OVERHEAD]) -> PullHeader {
        use field::pull as f;
        PullHeader {
            dst_mac: MacAddr(b[field::DST_MAC].try_into().expect("6")),
            src_mac: MacAddr(b[field::SRC_MAC].try_into().expect("6")),
            flags: b[f::FLAGS],
            src_session: le32(b, f::SRC_SESSION),
            dst_session: le32(b, f::DST_SESSION),
            seq: le32(b, f::SEQ),
            ack: le32(b, f::ACK),
            credit: le32(b, f::CREDIT),
            msg_id: le32(b, f::MSG_ID),
            length: le16(b, f::LENGTH),
            offset: u64::from_le_bytes(b[f::OFFSET].try_into().expect("8")),
        }
    }

    /// What [`Repr::parse`] refuses of any frame with a session (none: a connect request
    /// only) or of a fragment (one that ends past 2^64).
    #[inline]
    pub(super) fn validate(&self) -> Result<(), Error> {
        if self.src_session == 0 || self.offset.checked_add(self.length as u64).is_none() {
            return Err(Error::Malformed);
        }
        Ok(())
    }

    /// The full header this one stands for: the fragment as one of one, `total` its end
    /// (the fragment and message fields the receiver does not use are not carried).
    pub fn repr(&self) -> Repr {
        let length = self.length as u32;
        Repr {
            dst_mac: self.dst_mac,
            src_mac: self.src_mac,
            kind: Some(Kind::PullData),
            flags: self.flags as u16,
            src_session: self.src_session,
            dst_session: self.dst_session,
            seq: self.seq,
            ack: self.ack,
            credit: self.credit,
            msg_id: self.msg_id,
            frag_index: 0,
            frag_count: 1,
            length,
            offset: self.offset,
            total: self.offset + length as u64,
            ..Repr::default()
        }
    }

    /// Writes the Ethernet and pull headers (checksum zero, to be filled after the payload:
    /// [`fill_pull_checksum`]) into `buf` and returns the frame length, padded to
    /// [`MIN_FRAME`].
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> usize {
        use field::pull as f;
        let (head, _) = buf.split_at_mut(PULL_OVERHEAD);
        // A fixed-size view: one length check, none per field.
        let b: &mut [u8; PULL_OVERHEAD] = head.try_into().expect("split");
        b[field::DST_MAC].copy_from_slice(&self.dst_mac.0);
        b[field::SRC_MAC].copy_from_slice(&self.src_mac.0);
        b[field::ETHERTYPE].copy_from_slice(&ETHERTYPE.to_be_bytes());
        b[field::VERSION] = VERSION;
        b[field::KIND] = Kind::PullData as u8;
        b[f::FLAGS] = self.flags;
        b[f::RESERVED] = 0;
        b[f::SRC_SESSION].copy_from_slice(&self.src_session.to_le_bytes());
        b[f::DST_SESSION].copy_from_slice(&self.dst_session.to_le_bytes());
        b[f::SEQ].copy_from_slice(&self.seq.to_le_bytes());
        b[f::ACK].copy_from_slice(&self.ack.to_le_bytes());
        b[f::CREDIT].copy_from_slice(&self.credit.to_le_bytes());
        b[f::MSG_ID].copy_from_slice(&self.msg_id.to_le_bytes());
        b[f::LENGTH].copy_from_slice(&self.length.to_le_bytes());
        b[f::OFFSET].copy_from_slice(&self.offset.to_le_bytes());
        b[f::CHECKSUM].fill(0);
        Repr::pad(buf, PULL_OVERHEAD + self.length as usize)
    }
}

/// Fills the checksum of a [`Kind::PullData`] frame whose headers and payload are written
/// (what [`Frame::fill_checksum`] does, knowing the header's form).
#[inline(always)]
pub fn fill_pull_checksum(frame: &mut [u8]) {
    use field::pull as f;
    let Some(h) = frame.first_chunk::<PULL_OVERHEAD>() else {
        return;
    };
    let c = if h[f::FLAGS] as u16 & FLAG_PAYLOAD_CK != 0 {
        let end = (PULL_OVERHEAD + le16(h, f::LENGTH) as usize).min(frame.len());
        checksum(&frame[..end], f::CHECKSUM.start)
    } else {
        pull_header_checksum(h)
    };
    frame[f::CHECKSUM].copy_from_slice(&c.to_le_bytes());
}
