//! A descriptor's bytes: the request a client writes and the completion the engine writes
//! back into it.

use crate::addr::EndpointAddr;
use crate::wire::MacAddr;
use tigon_shm::ring::PAYLOAD;

/// A descriptor's size in the channel: two cache lines, the request's and the handle's
/// (256 bytes until channel version 7, half of them reserved: a channel holds 16,384
/// descriptors by default, 2 MiB at this size).
pub const DESC_LEN: usize = 128;
/// The bytes of a descriptor that hold fields.
pub const DESC_USED: usize = D_HANDLE + 8;
/// The request's line: what the client writes and the engine reads, except the handle of
/// MRecv and Cancel, read from the other line (which also takes the handle an MProbe found).
/// The completion is not in the descriptor (channel version 9): it rides in its
/// completion-ring slot ([`Completion::emit_entry`]), so the rank reads one line per
/// completion, not the slot and then the line the slot names. (Until version 8 the
/// completion lay in the descriptor's second line; before that, partly in the request's.)
pub const REQUEST_LINE: usize = 64;
const _: () = assert!(DESC_USED <= DESC_LEN && D_HANDLE >= REQUEST_LINE);
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

/// One descriptor: a request as the client writes it, with the completion fields the engine
/// fills in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Desc {
    pub op: u8,
    pub flags: u8,
    /// Data buffer holding the payload (send) or receiving it (receive), or [`NO_DATA`].
    pub data_idx: u32,
    /// Echoed untouched: the client's own tag for the request.
    pub user: u64,
    /// Send length, or receive capacity.
    pub len: u64,
    /// Client address of the payload with [`FLAG_DIRECT`].
    pub addr: u64,
    pub match_bits: u64,
    pub mask: u64,
    /// Receive filter (unless [`FLAG_ANY_SOURCE`]) or the sender's rank.
    pub rank: u32,
    pub peer: Option<EndpointAddr>,
    /// A send: the incarnation of `peer`'s node its address named (`crate::Dest`; 0: any).
    pub peer_incarnation: u32,
    /// Message handle (mprobe → mrecv) or the descriptor index to cancel.
    pub handle: u64,
}

const D_USER: usize = 8;
/// The handle: of the message an MRecv receives or the request a Cancel names (the client
/// writes it), or of the message an MProbe found (the engine writes it).
pub(super) const D_HANDLE: usize = 64;

// Byte offsets of a completion's fields in its ring slot's payload (`tigon_shm::ring::PAYLOAD`
// bytes; see [`Completion::emit_entry`]).
const C_STATUS: usize = 0;
const C_INFO_RANK: usize = 4;
const C_INFO_BITS: usize = 8;
const C_INFO_LEN: usize = 16;
const C_RECEIVED: usize = 24;
const C_LEASE: usize = 32;
const C_TRUNCATED: usize = 36;
const C_LEASE_OFF: usize = 40;
const C_USER: usize = 48;
const _: () = assert!(C_USER + 8 <= PAYLOAD);

fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8"))
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4"))
}

impl Desc {
    pub fn emit(&self, b: &mut [u8; DESC_LEN]) {
        b.fill(0);
        b[0] = self.op;
        b[1] = self.flags;
        b[3] = self.peer.is_some() as u8;
        b[4..8].copy_from_slice(&self.data_idx.to_le_bytes());
        b[D_USER..D_USER + 8].copy_from_slice(&self.user.to_le_bytes());
        b[16..24].copy_from_slice(&self.len.to_le_bytes());
        b[24..32].copy_from_slice(&self.addr.to_le_bytes());
        b[32..40].copy_from_slice(&self.match_bits.to_le_bytes());
        b[40..48].copy_from_slice(&self.mask.to_le_bytes());
        b[48..52].copy_from_slice(&self.rank.to_le_bytes());
        b[52..56].copy_from_slice(&self.peer_incarnation.to_le_bytes());
        if let Some(p) = self.peer {
            b[56..62].copy_from_slice(&p.mac.0);
            b[62..64].copy_from_slice(&p.ep.to_le_bytes());
        }
        b[D_HANDLE..D_HANDLE + 8].copy_from_slice(&self.handle.to_le_bytes());
    }

    /// Parses any descriptor's bytes; validity of the fields is the reader's business.
    pub fn parse(b: &[u8; DESC_LEN]) -> Desc {
        Desc {
            op: b[0],
            flags: b[1],
            data_idx: u32_at(b, 4),
            user: u64_at(b, D_USER),
            len: u64_at(b, 16),
            addr: u64_at(b, 24),
            match_bits: u64_at(b, 32),
            mask: u64_at(b, 40),
            rank: u32_at(b, 48),
            peer: (b[3] != 0).then(|| {
                EndpointAddr::new(
                    MacAddr(b[56..62].try_into().expect("6")),
                    u16::from_le_bytes([b[62], b[63]]),
                )
            }),
            peer_incarnation: u32_at(b, 52),
            handle: u64_at(b, D_HANDLE),
        }
    }
}

/// What the engine hands back for a request: in its completion-ring slot, and a probe's
/// handle in the descriptor (the request's own fields stay as the client wrote them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Completion {
    pub user: u64,
    pub status: u32,
    pub info_rank: u32,
    pub info_bits: u64,
    pub info_len: u64,
    pub received: u64,
    pub truncated: bool,
    /// The message handle a probe found (`None`: the descriptor's handle is left alone).
    pub handle: Option<u64>,
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

    /// The completion's fields but the handle, as they ride in its completion-ring slot.
    pub fn emit_entry(&self) -> [u8; PAYLOAD] {
        let mut b = [0u8; PAYLOAD];
        b[C_STATUS..C_STATUS + 4].copy_from_slice(&self.status.to_le_bytes());
        b[C_INFO_RANK..C_INFO_RANK + 4].copy_from_slice(&self.info_rank.to_le_bytes());
        b[C_INFO_BITS..C_INFO_BITS + 8].copy_from_slice(&self.info_bits.to_le_bytes());
        b[C_INFO_LEN..C_INFO_LEN + 8].copy_from_slice(&self.info_len.to_le_bytes());
        b[C_RECEIVED..C_RECEIVED + 8].copy_from_slice(&self.received.to_le_bytes());
        b[C_LEASE..C_LEASE + 4].copy_from_slice(&self.lease.to_le_bytes());
        b[C_TRUNCATED] = self.truncated as u8;
        b[C_LEASE_OFF..C_LEASE_OFF + 8].copy_from_slice(&self.lease_off.to_le_bytes());
        b[C_USER..C_USER + 8].copy_from_slice(&self.user.to_le_bytes());
        b
    }

    /// Parses a completion-ring slot's payload (`handle` is `None`: a probe's is in the
    /// descriptor); validity of the fields is the reader's business.
    pub fn parse_entry(b: &[u8; PAYLOAD]) -> Completion {
        Completion {
            user: u64_at(b, C_USER),
            status: u32_at(b, C_STATUS),
            info_rank: u32_at(b, C_INFO_RANK),
            info_bits: u64_at(b, C_INFO_BITS),
            info_len: u64_at(b, C_INFO_LEN),
            received: u64_at(b, C_RECEIVED),
            truncated: b[C_TRUNCATED] != 0,
            handle: None,
            lease: u32_at(b, C_LEASE),
            lease_off: u64_at(b, C_LEASE_OFF),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field lies in the bytes the channel copies: a descriptor with all of them set
    /// leaves the reserved rest zero, and survives a copy of its used bytes only.
    #[test]
    fn every_field_lies_in_the_used_bytes() {
        let d = Desc {
            op: Op::Send as u8,
            flags: 0xff,
            data_idx: u32::MAX - 1,
            user: u64::MAX,
            len: u64::MAX,
            addr: u64::MAX,
            match_bits: u64::MAX,
            mask: u64::MAX,
            rank: u32::MAX,
            peer: Some(EndpointAddr::new(MacAddr([0xff; 6]), u16::MAX)),
            peer_incarnation: u32::MAX,
            handle: u64::MAX,
        };
        let mut b = [0u8; DESC_LEN];
        d.emit(&mut b);
        assert!(b[DESC_USED..].iter().all(|&x| x == 0));
        let mut used = [0u8; DESC_LEN];
        used[..DESC_USED].copy_from_slice(&b[..DESC_USED]);
        assert_eq!(Desc::parse(&used), d);
    }

    /// A completion's fields (but the handle, which is the descriptor's) round-trip through
    /// its ring slot's payload, none overlapping another.
    #[test]
    fn a_completion_fits_its_ring_slot() {
        let all = Completion {
            user: u64::MAX - 1,
            status: u32::MAX - 2,
            info_rank: u32::MAX - 3,
            info_bits: u64::MAX - 4,
            info_len: u64::MAX - 5,
            received: u64::MAX - 6,
            truncated: true,
            handle: None,
            lease: u32::MAX - 7,
            lease_off: u64::MAX - 8,
        };
        assert_eq!(Completion::parse_entry(&all.emit_entry()), all);
        let one = Completion {
            received: 5,
            ..Completion::default()
        };
        assert_eq!(Completion::parse_entry(&one.emit_entry()), one);
        let with_handle = Completion {
            handle: Some(9),
            ..one
        };
        assert_eq!(with_handle.emit_entry(), one.emit_entry());
    }
}
