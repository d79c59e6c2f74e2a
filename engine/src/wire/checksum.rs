//! The frame checksum: headers always, payloads where the link has no frame check.

use super::{COMPACT_OVERHEAD, OVERHEAD, PULL_OVERHEAD, field};

/// Checksum of a frame but for its 4-byte checksum field at `ck`.
///
/// Up to 128 bytes (headers, small payloads), one rotate-add chain over 64-bit words (two
/// instructions a word: the headers of every frame, small messages and acks, are hashed by
/// it; `short_checksum` below says what it catches), finished by a multiply; longer frames,
/// eight interleaved lanes of rotate-xor-multiply
/// (independent multiplies keep the core's multiplier busy instead of waiting on one chain:
/// several bytes per cycle), combined by a chain that is a bijection of each lane. Every step
/// of either is a bijection of its state for a given word and of the word for a given state,
/// so a single changed word always changes the 64-bit result; the fold to 32 bits leaves a
/// 2^-32 chance for anything else. Over the headers it catches bugs and foreign frames
/// cheaply; over the payload (only where [`FLAG_PAYLOAD_CK`](super::FLAG_PAYLOAD_CK) asks) it
/// stands in for a frame check the link lacks (the simulated link's corruption).
pub fn checksum(frame: &[u8], ck: usize) -> u32 {
    // The common cases, headers only, with every length known at compile time: unrolled,
    // with no copies of partial words.
    if ck == field::CHECKSUM.start && frame.len() == OVERHEAD {
        return short_checksum(&frame[..OVERHEAD], field::CHECKSUM.start);
    }
    if ck == field::small::CHECKSUM.start && frame.len() == COMPACT_OVERHEAD {
        return short_checksum(&frame[..COMPACT_OVERHEAD], field::small::CHECKSUM.start);
    }
    if ck == field::pull::CHECKSUM.start && frame.len() == PULL_OVERHEAD {
        return short_checksum(&frame[..PULL_OVERHEAD], field::pull::CHECKSUM.start);
    }
    if frame.len() <= SHORT {
        return short_checksum(frame, ck);
    }
    checksum_of(frame, ck)
}

/// [`checksum`] of the headers of a [`Kind::PullData`](super::Kind::PullData) frame whose
/// payload it does not cover: every length known at compile time (the rendezvous paths'
/// common case, on both sides).
#[inline(always)]
pub fn pull_header_checksum(head: &[u8; PULL_OVERHEAD]) -> u32 {
    short_checksum(head, field::pull::CHECKSUM.start)
}

/// [`checksum`] of a [`Kind::Small`](super::Kind::Small) frame (its checksum field where the compact header
/// has it), with the field's place known at compile time: the small-message paths' checksum.
#[inline]
pub fn small_checksum(frame: &[u8]) -> u32 {
    if frame.len() <= SHORT {
        short_checksum(frame, field::small::CHECKSUM.start)
    } else {
        checksum_of(frame, field::small::CHECKSUM.start)
    }
}

/// [`small_checksum`] of the compact header alone (a frame whose payload the checksum does
/// not cover): every length known at compile time, the chain unrolled with no partial-word
/// tail to find at run time (the small-message paths' common case, on both sides).
#[inline(always)]
pub fn small_header_checksum(head: &[u8; COMPACT_OVERHEAD]) -> u32 {
    short_checksum(head, field::small::CHECKSUM.start)
}

/// Frames up to this long (headers, small payloads) are hashed by one chain: eight lanes
/// pay for themselves only on longer runs.
const SHORT: usize = 128;

const K: u64 = 0x9e37_79b9_7f4a_7c15;

/// One step of a lane: a bijection of the lane's state for a given word, and of the word for
/// a given state.
#[inline(always)]
fn mix(h: u64, w: u64) -> u64 {
    (h.rotate_left(23) ^ w).wrapping_mul(K)
}

/// The checksum of a short frame: one chain of `h = rotr(h, 1) + word` over its words (the
/// last partial word padded and tagged with its length), the checksum field skipped, then one
/// multiply to spread it before the fold. Each step is a bijection of the state and of the
/// word: a single changed word (so any burst within 8 aligned bytes) always changes the
/// 64-bit chain. The chain is linear, unlike a multiply per word: two flipped bits cancel
/// when the rotation brings them onto one place and they flip opposite ways, which takes bits
/// 63 * k apart in words k apart (under 1 % of the two-bit errors in a compact header; all
/// closer pairs are caught). Ethernet's FCS and memory links guard the wire; this check is
/// for bugs, foreign frames and the simulated link's single-bit corruption, at two
/// instructions a word instead of three (wire version 5: the small-message and ack paths
/// hash a header per frame).
#[inline(always)]
fn short_checksum(frame: &[u8], ck: usize) -> u32 {
    #[inline(always)]
    fn step(h: u64, w: u64) -> u64 {
        h.rotate_right(1).wrapping_add(w)
    }
    #[inline(always)]
    fn run(mut h: u64, bytes: &[u8]) -> u64 {
        let (words, rest) = bytes.as_chunks::<8>();
        for w in words {
            h = step(h, u64::from_le_bytes(*w));
        }
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            h = step(h, u64::from_le_bytes(w) ^ ((rest.len() as u64) << 56));
        }
        h
    }
    let mut h = K ^ frame.len() as u64;
    if frame.len() >= ck + 4 {
        h = run(h, &frame[..ck]);
        h = run(h, &frame[ck + 4..]);
    } else {
        h = run(h, frame);
    }
    h = mix(h, K.rotate_left(31));
    (h ^ (h >> 32)) as u32
}

#[inline(always)]
fn checksum_of(frame: &[u8], ck: usize) -> u32 {
    #[inline(always)]
    fn feed(l: &mut [u64; 8], bytes: &[u8]) {
        let (blocks, rest) = bytes.as_chunks::<64>();
        for q in blocks {
            let (w, _) = q.as_chunks::<8>();
            for k in 0..8 {
                l[k] = mix(l[k], u64::from_le_bytes(w[k]));
            }
        }
        for (k, c) in rest.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            l[k] = mix(l[k], u64::from_le_bytes(w) ^ ((c.len() as u64) << 56));
        }
    }
    let mut l = [
        frame.len() as u64,
        K,
        K.rotate_left(17),
        K.rotate_left(31),
        K.rotate_left(7),
        K.rotate_left(41),
        K.rotate_left(53),
        K.rotate_left(11),
    ];
    // Everything but the checksum field, hashed in place in two runs (no stack copy): the
    // bytes before it, then those after it, each run a bijection of the lanes.
    if frame.len() >= ck + 4 {
        feed(&mut l, &frame[..ck]);
        feed(&mut l, &frame[ck + 4..]);
    } else {
        feed(&mut l, frame);
    }
    let h = l.iter().fold(0, |h, &x| mix(h, x));
    (h ^ (h >> 32)) as u32
}
