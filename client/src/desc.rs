//! The descriptors the client writes: a request as the agent's channel lays it out.

use crate::ops::RecvInto;
use tigon_engine::channel::{self, Desc, NO_DATA, Op};
use tigon_engine::{Dest, MatchSpec, SendMode};
use tigon_shm::RecvBuf;

/// A receive descriptor for `spec` (no buffer yet).
pub(crate) fn recv_desc(spec: MatchSpec) -> Desc {
    let mut d = Desc {
        op: Op::Recv as u8,
        match_bits: spec.bits,
        mask: spec.mask,
        data_idx: NO_DATA,
        ..Desc::default()
    };
    match spec.source {
        Some(s) => d.rank = s,
        None => d.flags |= channel::FLAG_ANY_SOURCE,
    }
    d
}

/// A receive written straight into memory of this process (`RecvInto::Vec` or `Raw`):
/// names it in `d` and returns what the pending receive keeps of it (the Vec, or the raw
/// buffer). Callers handle `RecvInto::Channel` (a data buffer) themselves; given one, this
/// names nothing and keeps nothing.
pub(crate) fn direct(d: &mut Desc, into: RecvInto) -> (Option<Vec<u8>>, Option<RecvBuf>) {
    let (addr, len, kept) = match into {
        RecvInto::Channel(_) => return (None, None),
        RecvInto::Vec(mut v) => (v.as_mut_ptr() as u64, v.len(), (Some(v), None)),
        RecvInto::Raw(b) => (b.addr(), b.len(), (None, Some(b))),
    };
    d.flags |= channel::FLAG_DIRECT;
    d.addr = addr;
    d.len = len as u64;
    kept
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn send_desc(
    dest: Dest,
    bits: u64,
    rank: u32,
    len: u64,
    mode: SendMode,
    data_idx: u32,
    flags: u8,
    addr: u64,
) -> Desc {
    let sync = if mode == SendMode::Synchronous {
        channel::FLAG_SYNC
    } else {
        0
    };
    Desc {
        op: Op::Send as u8,
        flags: flags | sync,
        data_idx,
        len,
        addr,
        match_bits: bits,
        mask: u64::MAX,
        rank,
        peer: Some(dest.addr),
        peer_incarnation: dest.incarnation,
        ..Desc::default()
    }
}
