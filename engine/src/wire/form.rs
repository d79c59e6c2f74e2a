//! Where a frame's fields lie, by the form of its header (full, compact or pull).

use super::*;

/// The form of a frame's header, by its kind byte: where its fields lie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Form {
    /// The 80-byte header, big-endian.
    Full,
    /// The 46-byte compact header ([`Kind::Small`], [`Kind::ShortAck`]), little-endian.
    Compact,
    /// The 42-byte pull header ([`Kind::PullData`]), little-endian.
    Pull,
}

impl Form {
    /// The form of frame `b`'s header (the full one if `b` is too short to say).
    #[inline(always)]
    pub(super) fn of(b: &[u8]) -> Form {
        match b.get(field::KIND).copied() {
            Some(k) if k == Kind::Small as u8 || k == Kind::ShortAck as u8 => Form::Compact,
            Some(k) if k == Kind::PullData as u8 => Form::Pull,
            _ => Form::Full,
        }
    }

    /// Bytes in front of the payload.
    #[inline(always)]
    pub(super) fn head(self) -> usize {
        match self {
            Form::Full => OVERHEAD,
            Form::Compact => COMPACT_OVERHEAD,
            Form::Pull => PULL_OVERHEAD,
        }
    }

    #[inline(always)]
    pub(super) fn checksum_field(self) -> core::ops::Range<usize> {
        match self {
            Form::Full => field::CHECKSUM,
            Form::Compact => field::small::CHECKSUM,
            Form::Pull => field::pull::CHECKSUM,
        }
    }

    #[inline(always)]
    pub(super) fn little_endian(self) -> bool {
        self != Form::Full
    }

    /// The payload length frame `b` announces (`b` holds the header).
    #[inline(always)]
    pub(super) fn payload_len(self, b: &[u8]) -> usize {
        match self {
            Form::Full => be32(b, field::LENGTH) as usize,
            Form::Compact => b[field::small::LENGTH] as usize,
            Form::Pull => le16(b, field::pull::LENGTH) as usize,
        }
    }

    /// The header flags of frame `b` (`b` holds the header).
    #[inline(always)]
    pub(super) fn flags(self, b: &[u8]) -> u16 {
        match self {
            Form::Full => be16(b, field::FLAGS),
            Form::Compact => b[field::small::FLAGS] as u16,
            Form::Pull => b[field::pull::FLAGS] as u16,
        }
    }
}
