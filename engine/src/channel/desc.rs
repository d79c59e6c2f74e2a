//! A request's bytes as the client puts them in its request-ring slot, and a completion's
//! as the engine puts them in its completion-ring slot (channel version 10: a line each, read
//! by the other side in one miss; there are no descriptors in the region any more, only their
//! indices, which name requests).

use crate::addr::EndpointAddr;
use crate::wire::MacAddr;
use tigon_shm::ring::PAYLOAD;

/// "No data buffer" in [`Desc::data_idx`].
pub const NO_DATA: u32 = u32::MAX;

/// Operations a client asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    Send = 1,
    Recv = 2,
    Probe = 3,
    MProbe = 4,
    MRecv = 5,
    Cancel = 6,
}

impl Op {
    pub fn from_u8(v: u8) -> Option<Op> {
        Some(match v {
            1 => Op::Send,
            2 => Op::Recv,
            3 => Op::Probe,
            4 => Op::MProbe,
            5 => Op::MRecv,
            6 => Op::Cancel,
            _ => return None,
        })
    }
}

/// Payload lives at `addr` in the client's own address space, not in a data buffer.
pub const FLAG_DIRECT: u8 = 1;
/// Synchronous send (MPI_Ssend).
pub const FLAG_SYNC: u8 = 2;
/// Receive/probe from any source (`src_rank` ignored).
pub const FLAG_ANY_SOURCE: u8 = 4;
/// Cancel: do not cancel the target, abandon it: the engine no longer touches its memory
/// (MPI_Request_free of an active receive), while the operation itself goes on.
pub const FLAG_ABANDON: u8 = 8;

/// Receive (through a data buffer): the client can read the payload where the frame
/// arrived, in the agent's receive memory it maps read-only; the completion may then name a
/// lease (`Desc::lease`) instead of filling the data buffer.
pub const FLAG_LEASE: u8 = 16;

/// Completion status codes.
pub mod status {
    pub const OK: u32 = 0;
    /// Probe: nothing matched.
    pub const NO_MATCH: u32 = 1;
    pub const CANCELLED: u32 = 2;
    pub const PEER_UNREACHABLE: u32 = 3;
    pub const PEER_RESTARTED: u32 = 4;
    pub const COPY_FAILED: u32 = 5;
    pub const INVALID: u32 = 6;
    /// The agent is shutting down.
    pub const SHUTDOWN: u32 = 7;
}

/// One request as the client writes it (its descriptor: the index it goes with names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Desc {
    pub op: u8,
    pub flags: u8,
    /// Data buffer holding the payload (send) or receiving it (receive), or [`NO_DATA`]
    /// (always, with [`FLAG_DIRECT`]: the slot carries `addr` in its place).
    pub data_idx: u32,
    /// Echoed untouched in the completion: the client's own tag for the request.
    pub user: u32,
    /// Send length, or receive capacity.
    pub len: u64,
    /// Client address of the payload with [`FLAG_DIRECT`] (0 without).
    pub addr: u64,
    /// The match bits (0 for MRecv and Cancel, whose slot carries `handle` in their place).
    pub match_bits: u64,
    pub mask: u64,
    /// Receive filter (unless [`FLAG_ANY_SOURCE`]) or the sender's rank.
    pub rank: u32,
    pub peer: Option<EndpointAddr>,
    /// A send: the incarnation of `peer`'s node its address named (`crate::Dest`; 0: any).
    pub peer_incarnation: u32,
    /// Message handle (mprobe → mrecv) or the descriptor index to cancel (0 for the other
    /// operations).
    pub handle: u64,
}

// Byte offsets of a request's fields in its ring slot's payload ([`PAYLOAD`] bytes). Two
// places hold one of two fields, by the request: `addr` or `data_idx`, `handle` or
// `match_bits` (no operation uses both of a pair).
const R_OP: usize = 0;
const R_FLAGS: usize = 1;
const R_HAS_PEER: usize = 3;
const R_USER: usize = 4;
const R_LEN: usize = 8;
const R_ADDR_OR_DATA: usize = 16;
const R_BITS_OR_HANDLE: usize = 24;
const R_MASK: usize = 32;
const R_RANK: usize = 40;
const R_INCARNATION: usize = 44;
const R_MAC: usize = 48;
const R_EP: usize = 54;
const _: () = assert!(R_EP + 2 <= PAYLOAD);

// Byte offsets of a completion's fields in its ring slot's payload (see
// [`Completion::emit_entry`]).
const C_STATUS: usize = 0;
const C_TRUNCATED: usize = 2;
const C_INFO_RANK: usize = 4;
const C_LEASE: usize = 8;
const C_USER: usize = 12;
const C_INFO_BITS: usize = 16;
const C_INFO_LEN: usize = 24;
const C_RECEIVED: usize = 32;
const C_LEASE_OFF: usize = 40;
const C_HANDLE: usize = 48;
const _: () = assert!(C_HANDLE + 8 <= PAYLOAD);

fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8"))
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4"))
}

/// Whether operation `op` names a message or a request by [`Desc::handle`] (in the place of
/// the match bits, which it has none of).
fn uses_handle(op: u8) -> bool {
    op == Op::MRecv as u8 || op == Op::Cancel as u8
}

impl Desc {
    /// The request's bytes, as they ride in its request-ring slot.
    pub fn emit(&self) -> [u8; PAYLOAD] {
        let mut b = [0u8; PAYLOAD];
        b[R_OP] = self.op;
        b[R_FLAGS] = self.flags;
        b[R_HAS_PEER] = self.peer.is_some() as u8;
        b[R_USER..R_USER + 4].copy_from_slice(&self.user.to_le_bytes());
        b[R_LEN..R_LEN + 8].copy_from_slice(&self.len.to_le_bytes());
        let where_ = if self.flags & FLAG_DIRECT != 0 {
            self.addr
        } else {
            u64::from(self.data_idx)
        };
        b[R_ADDR_OR_DATA..R_ADDR_OR_DATA + 8].copy_from_slice(&where_.to_le_bytes());
        let bits = if uses_handle(self.op) {
            self.handle
        } else {
            self.match_bits
        };
        b[R_BITS_OR_HANDLE..R_BITS_OR_HANDLE + 8].copy_from_slice(&bits.to_le_bytes());
        b[R_MASK..R_MASK + 8].copy_from_slice(&self.mask.to_le_bytes());
        b[R_RANK..R_RANK + 4].copy_from_slice(&self.rank.to_le_bytes());
        b[R_INCARNATION..R_INCARNATION + 4].copy_from_slice(&self.peer_incarnation.to_le_bytes());
        if let Some(p) = self.peer {
            b[R_MAC..R_MAC + 6].copy_from_slice(&p.mac.0);
            b[R_EP..R_EP + 2].copy_from_slice(&p.ep.to_le_bytes());
        }
        b
    }

    /// Parses any request's bytes; validity of the fields is the reader's business (a data
    /// buffer index past 32 bits reads as [`NO_DATA`]).
    pub fn parse(b: &[u8; PAYLOAD]) -> Desc {
        let (op, flags) = (b[R_OP], b[R_FLAGS]);
        let where_ = u64_at(b, R_ADDR_OR_DATA);
        let (addr, data_idx) = if flags & FLAG_DIRECT != 0 {
            (where_, NO_DATA)
        } else {
            (0, u32::try_from(where_).unwrap_or(NO_DATA))
        };
        let bits = u64_at(b, R_BITS_OR_HANDLE);
        let (match_bits, handle) = if uses_handle(op) {
            (0, bits)
        } else {
            (bits, 0)
        };
        Desc {
            op,
            flags,
            data_idx,
            user: u32_at(b, R_USER),
            len: u64_at(b, R_LEN),
            addr,
            match_bits,
            mask: u64_at(b, R_MASK),
            rank: u32_at(b, R_RANK),
            peer: (b[R_HAS_PEER] != 0).then(|| {
                EndpointAddr::new(
                    MacAddr(b[R_MAC..R_MAC + 6].try_into().expect("6")),
                    u16::from_le_bytes([b[R_EP], b[R_EP + 1]]),
                )
            }),
            peer_incarnation: u32_at(b, R_INCARNATION),
            handle,
        }
    }
}

/// What the engine hands back for a request, in its completion-ring slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Completion {
    /// The request's [`Desc::user`].
    pub user: u32,
    pub status: u32,
    pub info_rank: u32,
    pub info_bits: u64,
    pub info_len: u64,
    pub received: u64,
    pub truncated: bool,
    /// The message handle an MProbe found (0: none).
    pub handle: u64,
    /// 1 + the lease holding a received payload, or 0 (see [`Desc::lease`]).
    pub lease: u32,
    pub lease_off: u64,
}

/// A completion as it goes on the completion ring: its descriptor's index, and its fields
/// ([`Completion::emit_entry`]).
pub type CompletionEntry = (u32, [u8; PAYLOAD]);

impl Completion {
    /// A completion with only a status.
    pub fn status(status: u32) -> Completion {
        Completion {
            status,
            ..Completion::default()
        }
    }

    /// The completion's bytes, as they ride in its completion-ring slot (statuses are
    /// under 2^16: [`status`]).
    pub fn emit_entry(&self) -> [u8; PAYLOAD] {
        let mut b = [0u8; PAYLOAD];
        let st = u16::try_from(self.status).unwrap_or(u16::MAX);
        b[C_STATUS..C_STATUS + 2].copy_from_slice(&st.to_le_bytes());
        b[C_TRUNCATED] = self.truncated as u8;
        b[C_INFO_RANK..C_INFO_RANK + 4].copy_from_slice(&self.info_rank.to_le_bytes());
        b[C_LEASE..C_LEASE + 4].copy_from_slice(&self.lease.to_le_bytes());
        b[C_USER..C_USER + 4].copy_from_slice(&self.user.to_le_bytes());
        b[C_INFO_BITS..C_INFO_BITS + 8].copy_from_slice(&self.info_bits.to_le_bytes());
        b[C_INFO_LEN..C_INFO_LEN + 8].copy_from_slice(&self.info_len.to_le_bytes());
        b[C_RECEIVED..C_RECEIVED + 8].copy_from_slice(&self.received.to_le_bytes());
        b[C_LEASE_OFF..C_LEASE_OFF + 8].copy_from_slice(&self.lease_off.to_le_bytes());
        b[C_HANDLE..C_HANDLE + 8].copy_from_slice(&self.handle.to_le_bytes());
        b
    }

    /// Parses a completion-ring slot's payload; validity of the fields is the reader's
    /// business.
    pub fn parse_entry(b: &[u8; PAYLOAD]) -> Completion {
        Completion {
            user: u32_at(b, C_USER),
            status: u32::from(u16::from_le_bytes([b[C_STATUS], b[C_STATUS + 1]])),
            info_rank: u32_at(b, C_INFO_RANK),
            info_bits: u64_at(b, C_INFO_BITS),
            info_len: u64_at(b, C_INFO_LEN),
            received: u64_at(b, C_RECEIVED),
            truncated: b[C_TRUNCATED] != 0,
            handle: u64_at(b, C_HANDLE),
            lease: u32_at(b, C_LEASE),
            lease_off: u64_at(b, C_LEASE_OFF),
        }
    }

    /// Its entry on the completion ring, for descriptor `idx`.
    pub fn entry(&self, idx: u32) -> CompletionEntry {
        (idx, self.emit_entry())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field of a request survives its slot, a field of each shared place on either
    /// side of it.
    #[test]
    fn a_request_round_trips_through_its_slot() {
        let all = Desc {
            op: Op::Send as u8,
            flags: !FLAG_DIRECT,
            data_idx: u32::MAX - 1,
            user: u32::MAX,
            len: u64::MAX,
            addr: 0,
            match_bits: u64::MAX - 2,
            mask: u64::MAX,
            rank: u32::MAX,
            peer: Some(EndpointAddr::new(MacAddr([0xff; 6]), u16::MAX)),
            peer_incarnation: u32::MAX,
            handle: 0,
        };
        assert_eq!(Desc::parse(&all.emit()), all);
        let direct_mrecv = Desc {
            op: Op::MRecv as u8,
            flags: FLAG_DIRECT,
            data_idx: NO_DATA,
            addr: u64::MAX - 3,
            handle: u64::MAX - 4,
            len: 9,
            ..Desc::default()
        };
        assert_eq!(Desc::parse(&direct_mrecv.emit()), direct_mrecv);
        // A data buffer index past 32 bits is none.
        let mut b = all.emit();
        b[R_ADDR_OR_DATA..R_ADDR_OR_DATA + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert_eq!(Desc::parse(&b).data_idx, NO_DATA);
    }

    /// A completion's fields round-trip through its ring slot's payload, none overlapping
    /// another.
    #[test]
    fn a_completion_fits_its_ring_slot() {
        let all = Completion {
            user: u32::MAX - 1,
            status: u32::from(u16::MAX - 2),
            info_rank: u32::MAX - 3,
            info_bits: u64::MAX - 4,
            info_len: u64::MAX - 5,
            received: u64::MAX - 6,
            truncated: true,
            handle: u64::MAX - 9,
            lease: u32::MAX - 7,
            lease_off: u64::MAX - 8,
        };
        assert_eq!(Completion::parse_entry(&all.emit_entry()), all);
        let one = Completion {
            received: 5,
            ..Completion::default()
        };
        assert_eq!(Completion::parse_entry(&one.emit_entry()), one);
        assert_eq!(one.entry(3), (3, one.emit_entry()));
    }
}
