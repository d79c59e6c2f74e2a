//! MPI matching: (communicator context, source rank, tag) encoded as 64-bit match bits plus a
//! source rank, with ANY_SOURCE and ANY_TAG.
//!
//! Match bits hold the context in the high 32 bits and the tag (as u32) in the low 32. ANY_TAG
//! ignores the tag's low 31 bits but still requires its sign bit to be clear, so a wildcard
//! receive never matches the negative tags Open MPI's collectives use.

/// Tag wildcard.
pub const ANY_TAG: i32 = -1;
/// Source wildcard.
pub const ANY_SOURCE: i32 = -1;

const TAG_SIGN: u64 = 1 << 31;
const CONTEXT_MASK: u64 = 0xffff_ffff_0000_0000;

/// Match bits of a message on `context` with `tag`.
pub fn match_bits(context: u32, tag: i32) -> u64 {
    ((context as u64) << 32) | (tag as u32 as u64)
}

/// Splits match bits into (context, tag).
pub fn split_bits(bits: u64) -> (u32, i32) {
    ((bits >> 32) as u32, bits as u32 as i32)
}

/// What a receive or probe accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatchSpec {
    pub bits: u64,
    /// Bits of `bits` that must be equal.
    pub mask: u64,
    /// Required source rank; `None` for ANY_SOURCE.
    pub source: Option<u32>,
}

impl MatchSpec {
    /// The spec of an MPI receive; `source` and `tag` may be the wildcards.
    pub fn mpi(context: u32, source: i32, tag: i32) -> Self {
        let (bits, mask) = if tag == ANY_TAG {
            ((context as u64) << 32, CONTEXT_MASK | TAG_SIGN)
        } else {
            (match_bits(context, tag), u64::MAX)
        };
        let source = if source == ANY_SOURCE {
            None
        } else {
            Some(source as u32)
        };
        MatchSpec { bits, mask, source }
    }

    /// Exactly these bits from anyone.
    pub fn exact(bits: u64) -> Self {
        MatchSpec {
            bits,
            mask: u64::MAX,
            source: None,
        }
    }

    #[inline]
    pub fn matches(&self, bits: u64, source: u32) -> bool {
        (bits ^ self.bits) & self.mask == 0 && self.source.is_none_or(|s| s == source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards() {
        let any = MatchSpec::mpi(5, ANY_SOURCE, ANY_TAG);
        assert!(any.matches(match_bits(5, 0), 3));
        assert!(any.matches(match_bits(5, i32::MAX), 9));
        assert!(
            !any.matches(match_bits(5, -2), 3),
            "ANY_TAG must not match negative tags"
        );
        assert!(!any.matches(match_bits(6, 1), 3), "other communicator");
        let neg = MatchSpec::mpi(5, 2, -7);
        assert!(neg.matches(match_bits(5, -7), 2));
        assert!(!neg.matches(match_bits(5, -7), 3));
        assert_eq!(split_bits(match_bits(77, -7)), (77, -7));
    }
}
