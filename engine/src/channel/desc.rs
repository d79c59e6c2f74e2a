//! A descriptor's bytes: the request a client writes and the completion the engine writes
//! back into it.

use crate::addr::EndpointAddr;
use crate::wire::MacAddr;

/// A descriptor's size in the channel: its two cache lines, the request's and the
/// completion's (256 bytes until channel version 7, half of them reserved: a channel holds
/// 16,384 descriptors by default, 2 MiB at this size).
pub const DESC_LEN: usize = 128;
/// The bytes of a descriptor that hold fields.
pub const DESC_USED: usize = 128;
/// The request's line: what the client writes and the engine reads, except the handle of
/// MRecv and Cancel, read from the other line. The completion's fields all lie in the other
/// line (channel version 8), so that each line crosses between the rank's core and the
/// engine's once each way per operation. (Before, the engine wrote two fields into the
/// request's line, taking it from the rank's cache: the rank missed on both lines of every
/// completion, and the engine read both lines of every request.)
pub const REQUEST_LINE: usize = 64;
const _: () = assert!(D_LEASE + 16 <= DESC_USED && DESC_USED <= DESC_LEN);
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
    // ---- completion ----
    pub status: u32,
    pub info_rank: u32,
    pub info_bits: u64,
    /// Length of the message as sent.
    pub info_len: u64,
    /// Bytes delivered into the buffer; for an MProbe, bytes of the message already at the
    /// node (all of them: its MRecv completes without waiting for the network).
    pub received: u64,
    pub truncated: bool,
    /// A receive with [`FLAG_LEASE`]: 0, or 1 + the lease whose frame holds the payload at
    /// `lease_off` of the agent's receive memory (give it back on the lease ring).
    pub lease: u32,
    pub lease_off: u64,
    /// The engine's copy of `user` in the completion (a client that scribbled over its
    /// descriptor meanwhile does not change it).
    pub echo: u64,
}

// Byte offsets in a descriptor of the fields the engine writes back (see [`Desc::emit`]),
// all in the completion's line.
const D_USER: usize = 8;
pub(super) const D_HANDLE: usize = 64;
/// status, info_rank, info_bits, info_len and received, in this order, up to byte 104.
pub(super) const D_RESULT: usize = 72;
/// lease (u32) and, at +8, lease_off (u64).
const D_LEASE: usize = 104;
const D_TRUNCATED: usize = 108;
const D_ECHO: usize = 120;
const _: () = assert!(D_HANDLE >= REQUEST_LINE && D_ECHO + 8 <= DESC_USED);

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
        self.completion().emit_line(b);
    }

    /// The completion fields of this descriptor.
    fn completion(&self) -> Completion {
        Completion {
            user: self.echo,
            status: self.status,
            info_rank: self.info_rank,
            info_bits: self.info_bits,
            info_len: self.info_len,
            received: self.received,
            truncated: self.truncated,
            handle: Some(self.handle),
            lease: self.lease,
            lease_off: self.lease_off,
        }
    }

    /// Parses any descriptor's bytes; validity of the fields is the reader's business.
    pub fn parse(b: &[u8; DESC_LEN]) -> Desc {
        Desc {
            op: b[0],
            flags: b[1],
            truncated: b[D_TRUNCATED] != 0,
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
            status: u32_at(b, D_RESULT),
            info_rank: u32_at(b, D_RESULT + 4),
            info_bits: u64_at(b, D_RESULT + 8),
            info_len: u64_at(b, D_RESULT + 16),
            received: u64_at(b, D_RESULT + 24),
            lease: u32_at(b, D_LEASE),
            lease_off: u64_at(b, D_LEASE + 8),
            echo: u64_at(b, D_ECHO),
        }
    }
}

/// What the engine writes back into a request's descriptor; the request's own fields stay as
/// the client wrote them.
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

impl Completion {
    /// A completion with only a status.
    pub fn status(status: u32) -> Completion {
        Completion {
            status,
            ..Completion::default()
        }
    }

    /// Writes the completion's fields, all but the handle, at their places in descriptor
    /// bytes `b`: the completion's line from [`D_RESULT`] on.
    pub(super) fn emit_line(&self, b: &mut [u8; DESC_LEN]) {
        let r = D_RESULT;
        b[r..r + 4].copy_from_slice(&self.status.to_le_bytes());
        b[r + 4..r + 8].copy_from_slice(&self.info_rank.to_le_bytes());
        b[r + 8..r + 16].copy_from_slice(&self.info_bits.to_le_bytes());
        b[r + 16..r + 24].copy_from_slice(&self.info_len.to_le_bytes());
        b[r + 24..r + 32].copy_from_slice(&self.received.to_le_bytes());
        b[D_LEASE..D_LEASE + 4].copy_from_slice(&self.lease.to_le_bytes());
        b[D_TRUNCATED] = self.truncated as u8;
        b[D_LEASE + 8..D_LEASE + 16].copy_from_slice(&self.lease_off.to_le_bytes());
        b[D_ECHO..D_ECHO + 8].copy_from_slice(&self.user.to_le_bytes());
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
            status: u32::MAX,
            info_rank: u32::MAX,
            info_bits: u64::MAX,
            info_len: u64::MAX,
            received: u64::MAX,
            truncated: true,
            lease: u32::MAX,
            lease_off: u64::MAX,
            echo: u64::MAX,
        };
        let mut b = [0u8; DESC_LEN];
        d.emit(&mut b);
        assert!(b[DESC_USED..].iter().all(|&x| x == 0));
        let mut used = [0u8; DESC_LEN];
        used[..DESC_USED].copy_from_slice(&b[..DESC_USED]);
        assert_eq!(Desc::parse(&used), d);
    }
}
