//! Frame formats: checked views over byte slices plus `Repr`s that parse and emit them.
//!
//! A tigon frame is an Ethernet II frame with EtherType [`ETHERTYPE`] whose payload starts with
//! a tigon header followed by the message payload: the full 80-byte header; for a small
//! eager message in one frame ([`Kind::Small`]) and the short ack a 46-byte compact one; for
//! a fragment of pulled rendezvous data ([`Kind::PullData`]) a 42-byte one of its own. Every
//! version of the format starts with the version byte and the kind byte, so a frame of
//! another version is recognised as such. The full header's integers are big-endian, the
//! compact and pull headers' little-endian (see `small.rs`, `pull.rs`). Parsing is total:
//! any byte slice yields either a value or an [`Error`], never a panic.

use core::fmt;

mod checksum;
mod form;
mod ids;
mod mac;
mod payload;
mod pull;
mod repr;
mod small;
pub use checksum::{checksum, pull_header_checksum, small_checksum, small_header_checksum};
use form::Form;
pub use ids::{conn_id, session_tag, slot_hint};
pub use mac::MacAddr;
pub use payload::{
    ACK_PAYLOAD_LEN, AckRepr, CONNECT_PAYLOAD_LEN, ConnectRepr, SACK_BITS, SACK_WORDS,
};
pub use pull::{PullHeader, fill_pull_checksum};
pub use repr::Repr;
pub use small::{AckFields, SmallHeader, fill_small_checksum, short_ack, write_short_ack};

/// IEEE 802 "Local Experimental EtherType 1": free for protocols that never leave the fabric.
pub const ETHERTYPE: u16 = 0x88b5;
/// Wire version this build speaks. Frames of another version are refused; a peer speaking
/// another one fails the operations addressed to it at connect
/// (`Error::WireVersion`). Version 2: the compact header, the checksum over the headers
/// only unless [`FLAG_PAYLOAD_CK`]. Version 3: the compact ack ([`Kind::ShortAck`]).
/// Version 4: the first frame of a connection rides right behind its `Connect` (its
/// destination connection id still 0), paid for by [`FIRST_CREDIT`]. Version 5: the compact
/// header's integers are little-endian, and the checksum of frames up to 128 bytes is a
/// rotate-add chain instead of a multiply per word (the small-message and ack paths'
/// cost). Version 6: [`Kind::PullData`] under a 42-byte little-endian header of its own
/// (`pull.rs`; the rendezvous receiver's per-frame cost, and 38 more payload bytes a frame).
/// Version 7: a receiver may hold an ack while its loop is busy for up to the delay it
/// advertises at connect ([`ConnectRepr`] `max_ack_delay_us`, 16 bytes), and acknowledges a
/// frame flagged [`FLAG_ACK_NOW`] at once; a sender's retransmit timeout allows for that
/// delay (a version-6 peer would time out on it). Version 8: a standalone ack ([`Kind::Ack`],
/// [`Kind::ShortAck`]) carries in its `seq` field the longest its sender holds an ack from
/// now on (µs: [`Repr::seq`]); a node serving thousands of peers that each send now and then
/// holds them longer (`Config::max_ack_delay_busy_ns`), once it has told the peer so.
/// Version 9: every frame but a pull fragment carries the slot under which its receiver
/// keeps the sender ([`Repr::slot`], told at connect in [`ConnectRepr`] `slot`, 20 bytes;
/// the compact header grows to 46 bytes): the receiver finds the sender's state
/// straight from the frame, a lookup by address only where the hint is 0 or names another
/// peer (with 65,536 peers the index's bucket was a cache miss of its own on every frame,
/// and the peer's state could be asked for only once it had come).
pub const VERSION: u8 = 9;

/// The most a node may hold an ack owed while its loop is busy (`Config::max_ack_delay_ns`,
/// advertised at connect, and what its standalone acks announce since): an ack owed goes out
/// with the next frame to the peer, every `ack_every` frames, once the receiver's loop runs
/// idle, or at the latest that long after the frame that opened it. A sender's retransmit
/// timeout adds the peer's delay to the round-trip estimate, so a held ack never looks like a
/// loss; a sender that needs its ack sooner flags the frame [`FLAG_ACK_NOW`]. A peer
/// advertising more is taken at this.
pub const ACK_DELAY_LIMIT_NS: u64 = 50_000_000;

/// Eager credit every connection starts with, known to both sides before the handshake
/// completes: a node's grant is never less, so the first small message to a node goes right
/// behind the `Connect` instead of a round trip later (a `ConnectAck`'s `ack` may then
/// acknowledge it already). The largest compact message and the receiver's store overhead
/// per message (255 + 64 bytes).
pub const FIRST_CREDIT: u32 = 320;
/// Ethernet II header length (no VLAN tag).
pub const ETH_HEADER_LEN: usize = 14;
/// tigon header length (the full form).
pub const HEADER_LEN: usize = 80;
/// Bytes in front of the payload of a frame with the full header.
pub const OVERHEAD: usize = ETH_HEADER_LEN + HEADER_LEN;
/// Length of the compact header of [`Kind::Small`] frames.
pub const COMPACT_LEN: usize = 46;
/// Bytes in front of the payload of a [`Kind::Small`] frame.
pub const COMPACT_OVERHEAD: usize = ETH_HEADER_LEN + COMPACT_LEN;
/// Longest payload a [`Kind::Small`] frame carries (its length field is one byte).
pub const COMPACT_MAX_PAYLOAD: usize = 255;
/// Length of the header of [`Kind::PullData`] frames.
pub const PULL_LEN: usize = 42;
/// Bytes in front of the payload of a [`Kind::PullData`] frame.
pub const PULL_OVERHEAD: usize = ETH_HEADER_LEN + PULL_LEN;
/// Longest payload a [`Kind::PullData`] frame carries (its length field is 16 bits).
pub const PULL_MAX_PAYLOAD: usize = u16::MAX as usize;
/// Shortest frame a NIC sends (without FCS); shorter frames are padded.
pub const MIN_FRAME: usize = 60;

/// Why a frame was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Shorter than the headers, or shorter than the payload length it announces.
    Truncated,
    /// Not our EtherType.
    EtherType,
    /// Another wire version.
    Version,
    /// Unknown frame type.
    Type,
    /// The checksum does not match the contents: corrupted on the way.
    Checksum,
    /// A field is out of range for its type (e.g. a fragment index past the count).
    Malformed,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let s = match self {
            Error::Truncated => "frame truncated",
            Error::EtherType => "not a tigon frame (EtherType)",
            Error::Version => "unsupported tigon wire version",
            Error::Type => "unknown frame type",
            Error::Checksum => "checksum mismatch (corrupted frame)",
            Error::Malformed => "malformed header field",
        };
        f.write_str(s)
    }
}

impl std::error::Error for Error {}

/// Frame types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Handshake request: carries the sender's session and limits ([`ConnectRepr`]).
    Connect = 1,
    /// Handshake answer: the responder's session and limits; `dst_session` echoes the request.
    ConnectAck = 2,
    /// One fragment of an eager message.
    Eager = 3,
    /// Rendezvous request to send: match bits and total length, no payload.
    Rts = 4,
    /// Receiver asks the sender for the block `[offset, offset + total)` of message `msg_id`.
    Pull = 5,
    /// One fragment of a pulled block, under a header of its own (`pull.rs`, [`PullHeader`]):
    /// both sessions, sequence, ack, credit, message id, length and offset; no endpoints,
    /// match bits or fragment fields (the receiver finds the pull by its message id).
    PullData = 6,
    /// The receiver matched the synchronous eager message `msg_id`.
    Matched = 7,
    /// The receiver holds every byte it wants of rendezvous message `msg_id`.
    Fin = 8,
    /// Standalone acknowledgement with a selective-ack bitmap ([`AckRepr`]).
    Ack = 9,
    /// "I do not know the session you addressed": tells a peer we restarted.
    Reset = 10,
    /// Keepalive while operations wait on a silent peer; acknowledged like any sequenced frame.
    Ping = 11,
    /// Receiver → sender: `total` more bytes of eager credit; with [`FLAG_RETURN`], a request
    /// to give back up to `total` bytes of unused credit.
    Grant = 12,
    /// Sender → receiver: `total` bytes of eager credit given back (answers a returning Grant).
    GrantReturn = 13,
    /// A whole eager message of at most [`COMPACT_MAX_PAYLOAD`] bytes in one frame, under the
    /// 40-byte compact header: no message id (not synchronous), no fragment fields, and one
    /// 32-bit tag of both sessions ([`session_tag`]) instead of the two. Sent on a message's
    /// first transmission only: a retransmission carries the full header, so a receiver that
    /// restarted meanwhile can answer it with a Reset.
    Small = 14,
    /// The sender's retransmit timer fired: "acknowledge now" (unsequenced, no payload). The
    /// receiver answers with an Ack flagged [`FLAG_PROBE_REPLY`] once it has taken every
    /// frame that arrived before the probe, so the sender resends only what is missing: a
    /// receiver that was merely slow (descheduled) costs no retransmission.
    Probe = 15,
    /// A standalone ack under the compact header of [`Kind::Small`] (no payload): the tag of
    /// both sessions, the cumulative ack and the credit released; the other fields zero. For
    /// the common ack, with nothing selective to say and no probe to answer (those go in an
    /// [`Kind::Ack`]): 60 bytes on the wire instead of 94, a third of the checksum.
    ShortAck = 16,
}

impl Kind {
    pub fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Connect,
            2 => Kind::ConnectAck,
            3 => Kind::Eager,
            4 => Kind::Rts,
            5 => Kind::Pull,
            6 => Kind::PullData,
            7 => Kind::Matched,
            8 => Kind::Fin,
            9 => Kind::Ack,
            10 => Kind::Reset,
            11 => Kind::Ping,
            12 => Kind::Grant,
            13 => Kind::GrantReturn,
            14 => Kind::Small,
            15 => Kind::Probe,
            16 => Kind::ShortAck,
            _ => return None,
        })
    }

    /// Frames that take a sequence number and are delivered reliably, in order.
    pub fn is_sequenced(self) -> bool {
        !matches!(
            self,
            Kind::Connect
                | Kind::ConnectAck
                | Kind::Ack
                | Kind::Reset
                | Kind::Probe
                | Kind::ShortAck
        )
    }
}

/// Header flag: the sender wants to know when the message is matched (MPI_Ssend).
pub const FLAG_SYNC: u16 = 1 << 0;
/// Header flag on an RTS: the message was small enough for eager, but the sender lacked the
/// credit (the receiver may grant more).
pub const FLAG_NO_CREDIT: u16 = 1 << 1;
/// Header flag on a Grant: give credit back instead of taking more.
pub const FLAG_RETURN: u16 = 1 << 2;
/// Header flag: the checksum covers the payload too, not only the headers. Set by a sender on
/// a link without a frame check of its own (`Config::payload_checksum`); Ethernet's FCS and
/// memory links (memif) make the per-byte pass redundant.
pub const FLAG_PAYLOAD_CK: u16 = 1 << 3;
/// Header flag on an Ack: it answers a [`Kind::Probe`]; the frames sent before the probe and
/// acknowledged neither cumulatively nor selectively did not arrive.
pub const FLAG_PROBE_REPLY: u16 = 1 << 5;
/// Header flag on any sequenced frame (full, compact or pull header): acknowledge it at once,
/// do not hold the ack (wire version 7). Set on retransmissions, on the frames that bring the
/// sender's window or eager credit near its end (and on a probe's answer: a probe is always
/// answered at once).
pub const FLAG_ACK_NOW: u16 = 1 << 6;
/// Header flag on a Fin: no endpoint here takes message `msg_id` (never open, or closed):
/// the send fails instead of completing.
pub const FLAG_NO_ENDPOINT: u16 = 1 << 4;

mod field {
    use core::ops::Range;
    // Ethernet
    pub const DST_MAC: Range<usize> = 0..6;
    pub const SRC_MAC: Range<usize> = 6..12;
    pub const ETHERTYPE: Range<usize> = 12..14;
    // tigon header, relative to the frame start
    const H: usize = super::ETH_HEADER_LEN;
    pub const VERSION: usize = H;
    pub const KIND: usize = H + 1;
    pub const FLAGS: Range<usize> = H + 2..H + 4;
    pub const DST_EP: Range<usize> = H + 4..H + 6;
    pub const SRC_EP: Range<usize> = H + 6..H + 8;
    pub const SRC_SESSION: Range<usize> = H + 8..H + 12;
    pub const DST_SESSION: Range<usize> = H + 12..H + 16;
    pub const SEQ: Range<usize> = H + 16..H + 20;
    pub const ACK: Range<usize> = H + 20..H + 24;
    pub const MSG_ID: Range<usize> = H + 24..H + 28;
    pub const SRC_RANK: Range<usize> = H + 28..H + 32;
    pub const FRAG_INDEX: Range<usize> = H + 32..H + 36;
    pub const FRAG_COUNT: Range<usize> = H + 36..H + 40;
    pub const LENGTH: Range<usize> = H + 40..H + 44;
    pub const CREDIT: Range<usize> = H + 44..H + 48;
    pub const MATCH_BITS: Range<usize> = H + 48..H + 56;
    pub const OFFSET: Range<usize> = H + 56..H + 64;
    pub const TOTAL: Range<usize> = H + 64..H + 72;
    pub const CHECKSUM: Range<usize> = H + 72..H + 76;
    pub const SLOT: Range<usize> = H + 76..H + 80;
    /// The compact header of `Kind::Small` (version and kind as above).
    pub mod small {
        use core::ops::Range;
        const H: usize = crate::wire::ETH_HEADER_LEN;
        pub const FLAGS: usize = H + 2;
        pub const LENGTH: usize = H + 3;
        pub const DST_EP: Range<usize> = H + 4..H + 6;
        pub const SRC_EP: Range<usize> = H + 6..H + 8;
        pub const TAG: Range<usize> = H + 8..H + 12;
        pub const SEQ: Range<usize> = H + 12..H + 16;
        pub const ACK: Range<usize> = H + 16..H + 20;
        pub const CREDIT: Range<usize> = H + 20..H + 24;
        pub const SRC_RANK: Range<usize> = H + 24..H + 28;
        pub const MATCH_BITS: Range<usize> = H + 28..H + 36;
        /// Zero (version 9). With the checksum 4 bytes into a word of the chain and the
        /// slot behind it, every two bits flipped under 63 apart in the header stay caught
        /// (`checksum.rs`: two flips in consecutive words of the chain 63 bits apart there
        /// can cancel, and a flip that the final multiply carries to bit 62 or 63 alone
        /// changes one bit of the checksum; the checksum right behind the match bits with
        /// the slot behind it, or the slot in front of it, put such pairs 31 to 55 bits
        /// apart).
        pub const RESERVED: Range<usize> = H + 36..H + 38;
        pub const CHECKSUM: Range<usize> = H + 38..H + 42;
        /// The slot hint (version 9; [`crate::wire::Repr::slot`]).
        pub const SLOT: Range<usize> = H + 42..H + 46;
    }
    /// The header of `Kind::PullData` (version and kind as above).
    pub mod pull {
        use core::ops::Range;
        const H: usize = crate::wire::ETH_HEADER_LEN;
        pub const FLAGS: usize = H + 2;
        pub const RESERVED: usize = H + 3;
        pub const SRC_SESSION: Range<usize> = H + 4..H + 8;
        pub const DST_SESSION: Range<usize> = H + 8..H + 12;
        pub const SEQ: Range<usize> = H + 12..H + 16;
        pub const ACK: Range<usize> = H + 16..H + 20;
        pub const CREDIT: Range<usize> = H + 20..H + 24;
        pub const MSG_ID: Range<usize> = H + 24..H + 28;
        pub const OFFSET: Range<usize> = H + 28..H + 36;
        pub const LENGTH: Range<usize> = H + 36..H + 38;
        /// Last, behind 52 bytes hashed (6 words and 4 bytes: see `checksum.rs`,
        /// `short_checksum`, for why the last word's length matters).
        pub const CHECKSUM: Range<usize> = H + 38..H + 42;
    }
}

#[inline]
fn be16(b: &[u8], r: core::ops::Range<usize>) -> u16 {
    u16::from_be_bytes(b[r].try_into().expect("2"))
}
#[inline]
fn be32(b: &[u8], r: core::ops::Range<usize>) -> u32 {
    u32::from_be_bytes(b[r].try_into().expect("4"))
}
#[inline]
fn le16(b: &[u8], r: core::ops::Range<usize>) -> u16 {
    u16::from_le_bytes(b[r].try_into().expect("2"))
}
#[inline]
fn le32(b: &[u8], r: core::ops::Range<usize>) -> u32 {
    u32::from_le_bytes(b[r].try_into().expect("4"))
}

/// Field `r` of a full header (`N` bytes: the range's length; in line, with a constant range
/// the index is checked at compile time).
#[inline(always)]
fn get<const N: usize>(b: &[u8; OVERHEAD], r: core::ops::Range<usize>) -> [u8; N] {
    b[r].try_into().expect("a field's width")
}

/// Writes field `r` of a full header (see [`get`]).
#[inline(always)]
fn put<const N: usize>(b: &mut [u8; OVERHEAD], r: core::ops::Range<usize>, v: [u8; N]) {
    b[r].copy_from_slice(&v);
}

/// A checked view over a whole frame (Ethernet header included).
///
/// Field getters never panic once [`Frame::new_checked`] succeeded; setters need a buffer of at
/// least [`OVERHEAD`] bytes.
#[derive(Debug, Clone, Copy)]
pub struct Frame<T: AsRef<[u8]>> {
    buf: T,
}

macro_rules! getters {
    ($($(#[$doc:meta])* $name:ident, $set:ident, $ty:ty, $f:ident;)*) => {
        impl<T: AsRef<[u8]>> Frame<T> {
            $($(#[$doc])* #[inline]
            pub fn $name(&self) -> $ty {
                let b = &self.buf.as_ref()[field::$f];
                <$ty>::from_be_bytes(b.try_into().expect("field width"))
            })*
        }
        impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
            $(#[inline]
            pub fn $set(&mut self, v: $ty) {
                self.buf.as_mut()[field::$f].copy_from_slice(&v.to_be_bytes());
            })*
        }
    };
}

getters! {
    /// EtherType of the Ethernet header.
    ethertype, set_ethertype, u16, ETHERTYPE;
    /// Flags, see `FLAG_*`.
    flags, set_flags, u16, FLAGS;
    /// Endpoint id of the destination on its node.
    dst_ep, set_dst_ep, u16, DST_EP;
    /// Endpoint id of the sender on its node.
    src_ep, set_src_ep, u16, SRC_EP;
    /// Random session of the sending node; changes when it restarts.
    src_session, set_src_session, u32, SRC_SESSION;
    /// Session of the destination node as the sender knows it (0 in a connect request).
    dst_session, set_dst_session, u32, DST_SESSION;
    /// Sequence number in the sender→destination stream (sequenced kinds only).
    seq, set_seq, u32, SEQ;
    /// Cumulative ack: the next sequence number the sender expects from the destination.
    ack, set_ack, u32, ACK;
    /// Sender-chosen message id (eager, RTS, pull data) or the id a control frame refers to.
    msg_id, set_msg_id, u32, MSG_ID;
    /// MPI rank of the message's sender in the job, carried for matching.
    src_rank, set_src_rank, u32, SRC_RANK;
    /// Index of this fragment in its message (eager) or block (pull data).
    frag_index, set_frag_index, u32, FRAG_INDEX;
    /// Number of fragments of the message (eager) or block (pull data).
    frag_count, set_frag_count, u32, FRAG_COUNT;
    /// Payload bytes carried by this frame.
    length, set_length, u32, LENGTH;
    /// Cumulative eager-credit bytes the sender has released to the destination (wrapping).
    credit, set_credit, u32, CREDIT;
    /// 64-bit match bits: communicator context in the high half, tag in the low half.
    match_bits, set_match_bits, u64, MATCH_BITS;
    /// Byte offset of this frame's payload in its message (eager, pull data) or block start (pull).
    offset, set_offset, u64, OFFSET;
    /// Total message length (eager, RTS) or block length (pull).
    total, set_total, u64, TOTAL;
    /// Checksum over the header (this field as zero) and payload.
    checksum, set_checksum, u32, CHECKSUM;
    /// The receiver's slot of the sender + 1, a lookup hint ([`Repr::slot`]; version 9).
    slot, set_slot, u32, SLOT;
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps a buffer without checks; accessors may panic on a short buffer.
    pub fn new_unchecked(buf: T) -> Self {
        Frame { buf }
    }

    /// Wraps a buffer after checking lengths, EtherType, version, kind and checksum.
    pub fn new_checked(buf: T) -> Result<Self, Error> {
        let f = Frame { buf };
        f.check()?;
        Ok(f)
    }

    fn check(&self) -> Result<(), Error> {
        let b = self.buf.as_ref();
        if b.len() < ETH_HEADER_LEN + 2 {
            return Err(Error::Truncated);
        }
        if self.ethertype() != ETHERTYPE {
            return Err(Error::EtherType);
        }
        if b[field::VERSION] != VERSION {
            return Err(Error::Version);
        }
        if Kind::from_u8(b[field::KIND]).is_none() {
            return Err(Error::Type);
        }
        // The header's form, found once for every field below.
        let form = Form::of(b);
        let head = form.head();
        if b.len() < head {
            return Err(Error::Truncated);
        }
        let len = form.payload_len(b);
        if b.len() - head < len {
            return Err(Error::Truncated);
        }
        let ck = form.checksum_field();
        let stored = if form.little_endian() {
            le32(b, ck.clone())
        } else {
            be32(b, ck.clone())
        };
        let covered = if form.flags(b) & FLAG_PAYLOAD_CK != 0 {
            head + len
        } else {
            head
        };
        if checksum(&b[..covered], ck.start) != stored {
            return Err(Error::Checksum);
        }
        Ok(())
    }

    /// Whether this is a [`Kind::Small`] frame (compact header).
    #[inline]
    pub fn is_small(&self) -> bool {
        self.buf.as_ref().get(field::KIND) == Some(&(Kind::Small as u8))
    }

    /// Whether this frame has the compact header ([`Kind::Small`], [`Kind::ShortAck`]).
    #[inline]
    pub fn is_compact(&self) -> bool {
        Form::of(self.buf.as_ref()) == Form::Compact
    }

    /// Whether this is a [`Kind::PullData`] frame (the pull header).
    #[inline]
    pub fn is_pull(&self) -> bool {
        self.buf.as_ref().get(field::KIND) == Some(&(Kind::PullData as u8))
    }

    /// Where the payload starts: after the Ethernet and the full, compact or pull header.
    #[inline]
    pub fn payload_offset(&self) -> usize {
        Form::of(self.buf.as_ref()).head()
    }

    /// Payload bytes the header announces (a frame shorter than its header: panics; see
    /// [`Frame`]).
    #[inline]
    pub fn payload_len(&self) -> usize {
        let b = self.buf.as_ref();
        Form::of(b).payload_len(b)
    }

    pub fn into_inner(self) -> T {
        self.buf
    }
    pub fn dst_mac(&self) -> MacAddr {
        MacAddr(self.buf.as_ref()[field::DST_MAC].try_into().expect("6"))
    }
    pub fn src_mac(&self) -> MacAddr {
        MacAddr(self.buf.as_ref()[field::SRC_MAC].try_into().expect("6"))
    }
    pub fn version(&self) -> u8 {
        self.buf.as_ref()[field::VERSION]
    }
    /// Frame kind; `None` only on an unchecked frame.
    pub fn kind(&self) -> Option<Kind> {
        Kind::from_u8(self.buf.as_ref()[field::KIND])
    }
    /// The payload announced by the header's length.
    pub fn payload(&self) -> &[u8] {
        let b = self.buf.as_ref();
        let head = self.payload_offset();
        let end = (head + self.payload_len()).min(b.len());
        &b[head.min(end)..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    pub fn set_dst_mac(&mut self, m: MacAddr) {
        self.buf.as_mut()[field::DST_MAC].copy_from_slice(&m.0);
    }
    pub fn set_src_mac(&mut self, m: MacAddr) {
        self.buf.as_mut()[field::SRC_MAC].copy_from_slice(&m.0);
    }
    pub fn set_version(&mut self, v: u8) {
        self.buf.as_mut()[field::VERSION] = v;
    }
    pub fn set_kind(&mut self, k: Kind) {
        self.buf.as_mut()[field::KIND] = k as u8;
    }
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let head = self.payload_offset();
        &mut self.buf.as_mut()[head..]
    }
    /// Computes and stores the checksum over the headers and, with [`FLAG_PAYLOAD_CK`] set,
    /// the `length` payload bytes (as many of them as the buffer holds).
    pub fn fill_checksum(&mut self) {
        let b = self.buf.as_ref();
        let form = Form::of(b);
        let ck = form.checksum_field();
        let head = form.head();
        let covered = if form.flags(b) & FLAG_PAYLOAD_CK != 0 {
            head + form.payload_len(b)
        } else {
            head
        };
        let c = checksum(&b[..covered.min(b.len())], ck.start);
        let c = if form.little_endian() {
            c.to_le_bytes()
        } else {
            c.to_be_bytes()
        };
        self.buf.as_mut()[ck].copy_from_slice(&c);
    }
}

#[cfg(test)]
mod tests;
