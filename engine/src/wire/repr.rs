//! [`Repr`]: a frame's header parsed into plain fields (any of the three header forms), and
//! emitted back into a frame.

use super::*;

/// The parsed header of a frame: everything but the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repr {
    pub dst_mac: MacAddr,
    pub src_mac: MacAddr,
    pub kind: Option<Kind>,
    pub flags: u16,
    pub dst_ep: u16,
    pub src_ep: u16,
    pub src_session: u32,
    pub dst_session: u32,
    /// A sequenced frame's number; in a standalone ack ([`Kind::Ack`], [`Kind::ShortAck`]),
    /// the longest its sender holds an ack from now on, in µs (version 8).
    pub seq: u32,
    pub ack: u32,
    pub msg_id: u32,
    pub src_rank: u32,
    pub frag_index: u32,
    pub frag_count: u32,
    pub length: u32,
    pub credit: u32,
    pub match_bits: u64,
    pub offset: u64,
    pub total: u64,
    /// A [`Kind::Small`] frame's [`session_tag`] (its sessions read 0).
    pub tag: u32,
    /// Where the receiver keeps the sender: its peer slot + 1, as the receiver told at
    /// connect ([`ConnectRepr`] `slot`); 0 where not known (a `Connect`, a frame riding
    /// behind it). A hint only: the receiver checks the slot's address (version 9). Not in
    /// a [`Kind::PullData`] frame (no room in its header; its peer is looked up).
    pub slot: u32,
}

impl Repr {
    /// Parses a checked frame and validates fields that depend on its kind.
    pub fn parse<T: AsRef<[u8]>>(f: &Frame<T>) -> Result<Repr, Error> {
        let kind = f.kind().ok_or(Error::Type)?;
        if kind == Kind::Small {
            return Ok(Self::parse_small(f));
        }
        if kind == Kind::ShortAck {
            // The compact header's ack fields; nothing of a message.
            let r = Self::parse_small(f);
            return Ok(Repr {
                dst_mac: r.dst_mac,
                src_mac: r.src_mac,
                kind: Some(Kind::ShortAck),
                flags: r.flags,
                tag: r.tag,
                seq: r.seq,
                ack: r.ack,
                credit: r.credit,
                slot: r.slot,
                ..Repr::default()
            });
        }
        if kind == Kind::PullData {
            // A checked frame of this kind holds the pull header.
            let b: &[u8; PULL_OVERHEAD] = f.buf.as_ref().first_chunk().ok_or(Error::Truncated)?;
            let h = PullHeader::read(b);
            h.validate()?;
            return Ok(h.repr());
        }
        // One length check for the whole header (a checked frame of this kind holds it),
        // none per field: this runs for every frame of a large message.
        let b: &[u8; OVERHEAD] = f
            .buf
            .as_ref()
            .get(..OVERHEAD)
            .and_then(|h| h.try_into().ok())
            .ok_or(Error::Truncated)?;
        let r = Repr {
            dst_mac: MacAddr(get(b, field::DST_MAC)),
            src_mac: MacAddr(get(b, field::SRC_MAC)),
            kind: Some(kind),
            flags: u16::from_be_bytes(get(b, field::FLAGS)),
            dst_ep: u16::from_be_bytes(get(b, field::DST_EP)),
            src_ep: u16::from_be_bytes(get(b, field::SRC_EP)),
            src_session: u32::from_be_bytes(get(b, field::SRC_SESSION)),
            dst_session: u32::from_be_bytes(get(b, field::DST_SESSION)),
            seq: u32::from_be_bytes(get(b, field::SEQ)),
            ack: u32::from_be_bytes(get(b, field::ACK)),
            msg_id: u32::from_be_bytes(get(b, field::MSG_ID)),
            src_rank: u32::from_be_bytes(get(b, field::SRC_RANK)),
            frag_index: u32::from_be_bytes(get(b, field::FRAG_INDEX)),
            frag_count: u32::from_be_bytes(get(b, field::FRAG_COUNT)),
            length: u32::from_be_bytes(get(b, field::LENGTH)),
            credit: u32::from_be_bytes(get(b, field::CREDIT)),
            match_bits: u64::from_be_bytes(get(b, field::MATCH_BITS)),
            offset: u64::from_be_bytes(get(b, field::OFFSET)),
            total: u64::from_be_bytes(get(b, field::TOTAL)),
            tag: 0,
            slot: u32::from_be_bytes(get(b, field::SLOT)),
        };
        if r.src_session == 0 {
            return Err(Error::Malformed);
        }
        match kind {
            Kind::Eager
                if r.frag_count == 0
                    || r.frag_index >= r.frag_count
                    || r.offset
                        .checked_add(r.length as u64)
                        .is_none_or(|e| e > r.total) =>
            {
                return Err(Error::Malformed);
            }
            Kind::Pull if r.offset.checked_add(r.total).is_none() => return Err(Error::Malformed),
            _ => {}
        }
        Ok(r)
    }

    /// A checked [`Kind::Small`] frame: one whole message, fragment 0 of 1.
    fn parse_small<T: AsRef<[u8]>>(f: &Frame<T>) -> Repr {
        // One length check up front (the frame was checked: it holds the compact header),
        // none per field.
        let b: &[u8; COMPACT_OVERHEAD] = f.buf.as_ref()[..COMPACT_OVERHEAD]
            .try_into()
            .expect("checked frame");
        SmallHeader::read(b).repr()
    }

    /// Bytes of headers in front of the payload of this frame.
    pub fn payload_offset(&self) -> usize {
        match self.kind {
            Some(Kind::Small | Kind::ShortAck) => COMPACT_OVERHEAD,
            Some(Kind::PullData) => PULL_OVERHEAD,
            _ => OVERHEAD,
        }
    }

    /// Writes the headers (not the payload) into `buf` and returns the frame length,
    /// [`Repr::payload_offset`] + `length` padded to [`MIN_FRAME`]. The checksum must be
    /// filled after the payload. A [`Kind::Small`] frame gets the compact header (its
    /// flags must fit a byte, its length [`COMPACT_MAX_PAYLOAD`]), a [`Kind::PullData`]
    /// frame the pull header (flags in a byte, length up to [`PULL_MAX_PAYLOAD`]; its
    /// endpoint, match and fragment fields are not carried).
    pub fn emit(&self, buf: &mut [u8]) -> usize {
        if self.kind == Some(Kind::Small) {
            return self.emit_small(buf);
        }
        if self.kind == Some(Kind::PullData) {
            debug_assert!(self.length as usize <= PULL_MAX_PAYLOAD && self.flags <= 0xff);
            return PullHeader {
                dst_mac: self.dst_mac,
                src_mac: self.src_mac,
                flags: self.flags as u8,
                src_session: self.src_session,
                dst_session: self.dst_session,
                seq: self.seq,
                ack: self.ack,
                credit: self.credit,
                msg_id: self.msg_id,
                length: self.length as u16,
                offset: self.offset,
            }
            .emit(buf);
        }
        if self.kind == Some(Kind::ShortAck) {
            return short_ack(
                buf,
                self.dst_mac,
                self.src_mac,
                self.flags as u8,
                AckFields {
                    tag: self.tag,
                    hold_us: self.seq,
                    ack: self.ack,
                    credit: self.credit,
                    slot: self.slot,
                },
            );
        }
        // One length check for the whole header, none per field (every frame of a large
        // message is built here).
        let b: &mut [u8; OVERHEAD] = (&mut buf[..OVERHEAD])
            .try_into()
            .expect("a header's length");
        put(b, field::DST_MAC, self.dst_mac.0);
        put(b, field::SRC_MAC, self.src_mac.0);
        put(b, field::ETHERTYPE, ETHERTYPE.to_be_bytes());
        b[field::VERSION] = VERSION;
        b[field::KIND] = self.kind.unwrap_or(Kind::Ack) as u8;
        put(b, field::FLAGS, self.flags.to_be_bytes());
        put(b, field::DST_EP, self.dst_ep.to_be_bytes());
        put(b, field::SRC_EP, self.src_ep.to_be_bytes());
        put(b, field::SRC_SESSION, self.src_session.to_be_bytes());
        put(b, field::DST_SESSION, self.dst_session.to_be_bytes());
        put(b, field::SEQ, self.seq.to_be_bytes());
        put(b, field::ACK, self.ack.to_be_bytes());
        put(b, field::MSG_ID, self.msg_id.to_be_bytes());
        put(b, field::SRC_RANK, self.src_rank.to_be_bytes());
        put(b, field::FRAG_INDEX, self.frag_index.to_be_bytes());
        put(b, field::FRAG_COUNT, self.frag_count.to_be_bytes());
        put(b, field::LENGTH, self.length.to_be_bytes());
        put(b, field::CREDIT, self.credit.to_be_bytes());
        put(b, field::MATCH_BITS, self.match_bits.to_be_bytes());
        put(b, field::OFFSET, self.offset.to_be_bytes());
        put(b, field::TOTAL, self.total.to_be_bytes());
        put(b, field::CHECKSUM, [0; 4]);
        put(b, field::SLOT, self.slot.to_be_bytes());
        Self::pad(buf, OVERHEAD + self.length as usize)
    }

    fn emit_small(&self, buf: &mut [u8]) -> usize {
        debug_assert!(self.length as usize <= COMPACT_MAX_PAYLOAD && self.flags <= 0xff);
        SmallHeader {
            dst_mac: self.dst_mac,
            src_mac: self.src_mac,
            flags: self.flags as u8,
            length: self.length as u8,
            dst_ep: self.dst_ep,
            src_ep: self.src_ep,
            // A header parsed from a compact frame has its tag, not the sessions (both read
            // 0; a connection's never are): it re-emits to the frame it came from.
            tag: if self.src_session == 0 && self.dst_session == 0 {
                self.tag
            } else {
                session_tag(self.src_session, self.dst_session)
            },
            seq: self.seq,
            ack: self.ack,
            credit: self.credit,
            src_rank: self.src_rank,
            match_bits: self.match_bits,
            slot: self.slot,
        }
        .emit(buf)
    }

    /// Zero padding up to [`MIN_FRAME`]; the frame's length.
    pub(super) fn pad(buf: &mut [u8], len: usize) -> usize {
        if len < MIN_FRAME {
            buf[len..MIN_FRAME].fill(0);
            MIN_FRAME
        } else {
            len
        }
    }
}
