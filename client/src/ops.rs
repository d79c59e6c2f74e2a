//! What callers hold and get back: request handles, receive statuses, finished operations
//! and where a receive's bytes go.

use crate::error::Result;

/// A pending operation. Handles are only meaningful to the client that issued them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Req {
    pub(crate) idx: u32,
    pub(crate) generation: u32,
}

/// What a receive (or probe) learned about its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub source: u32,
    pub match_bits: u64,
    /// Length as sent.
    pub len: u64,
    /// Bytes delivered; for [`Client::improbe`], bytes already at the node (`len` when the
    /// message is whole there: its receive then takes one pass of the agent, no network).
    pub received: u64,
    pub truncated: bool,
}

/// A finished operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Done {
    Sent,
    /// `data`: the payload, for receives into the channel or into a `Vec` the client owned.
    Received {
        status: Status,
        data: Option<Vec<u8>>,
    },
    /// A receive posted with [`Client::irecv_or_lease`] that went through a channel buffer:
    /// the payload stays there until [`Client::take_lease`] copies it out (once, straight
    /// into the caller's memory) and frees the buffer.
    ReceivedInChannel {
        status: Status,
        lease: Lease,
    },
    /// A probe: the message it found, if any, and the handle for `mrecv` (mprobe only).
    Probed {
        found: Option<(Status, u64)>,
    },
    /// A cancel request: whether the target was cancelled (it then completes with an error).
    CancelResult {
        cancelled: bool,
    },
}

/// A payload held in a channel buffer for its receiver (see [`Done::ReceivedInChannel`]).
/// Taking it twice takes nothing the second time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub(crate) di: u32,
    pub(crate) len: u64,
    /// The payload is not in the data buffer but in a frame the agent lent: (lease, offset
    /// in its receive memory).
    pub(crate) rx: Option<(u32, u64)>,
}

impl Lease {
    /// The payload's length.
    pub fn len(&self) -> u64 {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A finished operation that was given a context with [`Client::notify`].
#[derive(Debug)]
pub struct Notified {
    pub ctx: u64,
    /// The operation's handle: a caller that reuses contexts checks it is the operation it
    /// expects.
    pub req: Req,
    pub result: Result<Done>,
}

/// Where a receive's bytes go.
#[derive(Debug)]
pub enum RecvInto {
    /// A channel data buffer (capacity at most [`Client::data_size`]); returned in [`Done`].
    Channel(u64),
    /// A buffer the client owns, written directly by the engine; returned in [`Done`].
    Vec(Vec<u8>),
    /// Memory of this process, written directly by the engine, or, while the caller waits
    /// for it, by the client from frames the agent lends (its `RecvBuf` is the caller's word
    /// that the memory stays valid and untouched until the receive completes).
    Raw(tigon_shm::RecvBuf),
}
