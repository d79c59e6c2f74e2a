//! The compact header of [`Kind::Small`] frames (and of [`Kind::ShortAck`]): written straight
//! from a sender's state and read in place, without the full [`Repr`]. Its integers are
//! little-endian (wire version 5), as the hosts that run tigon hold them: written and read
//! without a byte swap per field (the full header stays big-endian).

use super::*;

/// The fields of a [`Kind::Small`] frame's compact header, for a sender that builds one
/// straight from its own state (no full [`Repr`] on the small-message path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmallHeader {
    pub dst_mac: MacAddr,
    pub src_mac: MacAddr,
    pub flags: u8,
    pub length: u8,
    pub dst_ep: u16,
    pub src_ep: u16,
    /// [`session_tag`] of the sender's and the receiver's sessions.
    pub tag: u32,
    pub seq: u32,
    pub ack: u32,
    pub credit: u32,
    pub src_rank: u32,
    pub match_bits: u64,
    /// The receiver's slot of the sender + 1 (0: not known; [`Repr::slot`]).
    pub slot: u32,
}

/// The checks every compact header's parse starts with, in [`Frame::new_checked`]'s order
/// (the same error for the same fault): room for version and kind, EtherType, version, kind.
#[inline(always)]
pub(super) fn check_prefix(b: &[u8], kind: Kind) -> Result<(), Error> {
    if b.len() < ETH_HEADER_LEN + 2 {
        return Err(Error::Truncated);
    }
    if be16(b, field::ETHERTYPE) != ETHERTYPE {
        return Err(Error::EtherType);
    }
    if b[field::VERSION] != VERSION {
        return Err(Error::Version);
    }
    if b[field::KIND] != kind as u8 {
        return Err(Error::Type);
    }
    Ok(())
}

impl SmallHeader {
    /// Checks a [`Kind::Small`] frame as [`Frame::new_checked`] does (lengths, EtherType,
    /// version, kind, checksum; the same error for the same fault) and reads its compact
    /// header: the receive path's read of a small message, with no full [`Repr`] built.
    #[inline]
    pub fn parse(b: &[u8]) -> Result<SmallHeader, Error> {
        use field::small as s;
        check_prefix(b, Kind::Small)?;
        // One length check for the whole header (a fixed-size view), none per field.
        let h: &[u8; COMPACT_OVERHEAD] = b.first_chunk().ok_or(Error::Truncated)?;
        let len = h[s::LENGTH] as usize;
        if b.len() - COMPACT_OVERHEAD < len {
            return Err(Error::Truncated);
        }
        let ck = if h[s::FLAGS] as u16 & FLAG_PAYLOAD_CK != 0 {
            small_checksum(&b[..COMPACT_OVERHEAD + len])
        } else {
            small_header_checksum(h)
        };
        if ck != le32(h, s::CHECKSUM) {
            return Err(Error::Checksum);
        }
        Ok(Self::read(h))
    }

    /// The fields of a compact header (no checks).
    #[inline]
    pub(super) fn read(b: &[u8; COMPACT_OVERHEAD]) -> SmallHeader {
        use field::small as s;
        SmallHeader {
            dst_mac: MacAddr(b[field::DST_MAC].try_into().expect("6")),
            src_mac: MacAddr(b[field::SRC_MAC].try_into().expect("6")),
            flags: b[s::FLAGS],
            length: b[s::LENGTH],
            dst_ep: le16(b, s::DST_EP),
            src_ep: le16(b, s::SRC_EP),
            tag: le32(b, s::TAG),
            seq: le32(b, s::SEQ),
            ack: le32(b, s::ACK),
            credit: le32(b, s::CREDIT),
            src_rank: le32(b, s::SRC_RANK),
            match_bits: u64::from_le_bytes(b[s::MATCH_BITS].try_into().expect("8")),
            slot: le32(b, s::SLOT),
        }
    }

    /// The full header this compact one stands for: one whole message, fragment 0 of 1, its
    /// sessions as their tag (both read 0), no message id.
    pub fn repr(&self) -> Repr {
        let length = self.length as u32;
        Repr {
            dst_mac: self.dst_mac,
            src_mac: self.src_mac,
            kind: Some(Kind::Small),
            flags: self.flags as u16,
            dst_ep: self.dst_ep,
            src_ep: self.src_ep,
            tag: self.tag,
            seq: self.seq,
            ack: self.ack,
            credit: self.credit,
            src_rank: self.src_rank,
            match_bits: self.match_bits,
            frag_index: 0,
            frag_count: 1,
            length,
            total: length as u64,
            slot: self.slot,
            ..Repr::default()
        }
    }

    /// Writes the Ethernet and compact headers (checksum zero, to be filled after the
    /// payload) into `buf` and returns the frame length, padded to [`MIN_FRAME`].
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> usize {
        use field::small as s;
        let (head, _) = buf.split_at_mut(COMPACT_OVERHEAD);
        // A fixed-size view: one length check, none per field.
        let b: &mut [u8; COMPACT_OVERHEAD] = head.try_into().expect("split");
        b[field::DST_MAC].copy_from_slice(&self.dst_mac.0);
        b[field::SRC_MAC].copy_from_slice(&self.src_mac.0);
        b[field::ETHERTYPE].copy_from_slice(&ETHERTYPE.to_be_bytes());
        b[field::VERSION] = VERSION;
        b[field::KIND] = Kind::Small as u8;
        b[s::FLAGS] = self.flags;
        b[s::LENGTH] = self.length;
        b[s::DST_EP].copy_from_slice(&self.dst_ep.to_le_bytes());
        b[s::SRC_EP].copy_from_slice(&self.src_ep.to_le_bytes());
        b[s::TAG].copy_from_slice(&self.tag.to_le_bytes());
        b[s::SEQ].copy_from_slice(&self.seq.to_le_bytes());
        b[s::ACK].copy_from_slice(&self.ack.to_le_bytes());
        b[s::CREDIT].copy_from_slice(&self.credit.to_le_bytes());
        b[s::SRC_RANK].copy_from_slice(&self.src_rank.to_le_bytes());
        b[s::MATCH_BITS].copy_from_slice(&self.match_bits.to_le_bytes());
        b[s::RESERVED].fill(0);
        b[s::SLOT].copy_from_slice(&self.slot.to_le_bytes());
        b[s::CHECKSUM].fill(0);
        Repr::pad(buf, COMPACT_OVERHEAD + self.length as usize)
    }
}

/// Fills the checksum of a [`Kind::Small`] frame whose headers and payload are written
/// (what [`Frame::fill_checksum`] does, without finding out the header's form first).
#[inline(always)]
pub fn fill_small_checksum(frame: &mut [u8]) {
    use field::small as s;
    let Some(h) = frame.first_chunk::<COMPACT_OVERHEAD>() else {
        return;
    };
    let c = if h[s::FLAGS] as u16 & FLAG_PAYLOAD_CK != 0 {
        small_checksum(&frame[..(COMPACT_OVERHEAD + h[s::LENGTH] as usize).min(frame.len())])
    } else {
        small_header_checksum(h)
    };
    frame[s::CHECKSUM].copy_from_slice(&c.to_le_bytes());
}

/// What a [`Kind::ShortAck`] says: the sessions' tag, the cumulative ack and credit
/// released, and, in the sequence number's place, the longest its sender holds an ack from
/// now on (µs; wire version 8); and the receiver's slot of its sender (version 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AckFields {
    pub tag: u32,
    pub hold_us: u32,
    pub ack: u32,
    pub credit: u32,
    pub slot: u32,
}

/// Writes a [`Kind::ShortAck`] (checksum zero, to be filled) into `buf`; returns the frame
/// length ([`MIN_FRAME`]).
pub fn short_ack(
    buf: &mut [u8],
    dst_mac: MacAddr,
    src_mac: MacAddr,
    flags: u8,
    a: AckFields,
) -> usize {
    let n = SmallHeader {
        dst_mac,
        src_mac,
        flags,
        length: 0,
        dst_ep: 0,
        src_ep: 0,
        tag: a.tag,
        seq: a.hold_us,
        ack: a.ack,
        credit: a.credit,
        src_rank: 0,
        match_bits: 0,
        slot: a.slot,
    }
    .emit(buf);
    buf[field::KIND] = Kind::ShortAck as u8;
    n
}

/// Writes a whole [`Kind::ShortAck`] frame, its checksum filled, into the first [`MIN_FRAME`]
/// bytes of `buf` (false, nothing written, if `buf` is shorter): the frame of an ack-only
/// visit, with every offset and length known at compile time (one length check, the fields
/// the ack does not use written as zero words, the checksum over a fixed 60 bytes). The same
/// bytes as [`short_ack`] then [`fill_small_checksum`]. Always in line: out of line, its
/// call cost a tenth of what it saved.
#[inline(always)]
pub fn write_short_ack(
    buf: &mut [u8],
    dst_mac: MacAddr,
    src_mac: MacAddr,
    flags: u8,
    a: AckFields,
) -> bool {
    use field::small as s;
    let Some(b) = buf.first_chunk_mut::<MIN_FRAME>() else {
        return false;
    };
    b[field::DST_MAC].copy_from_slice(&dst_mac.0);
    b[field::SRC_MAC].copy_from_slice(&src_mac.0);
    b[field::ETHERTYPE].copy_from_slice(&ETHERTYPE.to_be_bytes());
    b[field::VERSION] = VERSION;
    b[field::KIND] = Kind::ShortAck as u8;
    b[s::FLAGS] = flags;
    b[s::LENGTH] = 0;
    // Endpoints zero, then the tag.
    b[s::DST_EP.start..s::TAG.start].fill(0);
    b[s::TAG].copy_from_slice(&a.tag.to_le_bytes());
    b[s::SEQ].copy_from_slice(&a.hold_us.to_le_bytes());
    b[s::ACK].copy_from_slice(&a.ack.to_le_bytes());
    b[s::CREDIT].copy_from_slice(&a.credit.to_le_bytes());
    // Source rank, match bits, the checksum field and the padding: zero; then the slot.
    b[s::SRC_RANK.start..].fill(0);
    b[s::SLOT].copy_from_slice(&a.slot.to_le_bytes());
    let head: &[u8; COMPACT_OVERHEAD] = b.first_chunk().expect("a minimum frame holds the header");
    // The payload is empty: with or without FLAG_PAYLOAD_CK the checksum covers the headers.
    let c = small_header_checksum(head);
    b[s::CHECKSUM].copy_from_slice(&c.to_le_bytes());
    true
}
