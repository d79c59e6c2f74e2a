//! The engine's public types: errors, request and message handles, send modes, and what a
//! finished operation reports.

use crate::addr::EndpointAddr;

/// Why an operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The peer did not acknowledge within the configured deadline.
    PeerUnreachable(EndpointAddr),
    /// The peer restarted (new session): operations with its old incarnation are void.
    PeerRestarted(EndpointAddr),
    /// A message buffer could not be read or written.
    Copy(String),
    /// The receive was cancelled before it matched.
    Cancelled,
    /// The endpoint was closed with the operation pending.
    EndpointClosed,
    /// No such endpoint, request or message handle.
    Invalid(&'static str),
    /// The peer speaks another tigon wire version (the version it sent): the nodes run
    /// different tigon releases.
    WireVersion(EndpointAddr, u8),
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
        match self {
            Error::PeerUnreachable(a) => write!(
                f,
                "peer {a} unreachable (no acknowledgement within the deadline)"
            ),
            Error::PeerRestarted(a) => {
                write!(f, "peer {a} restarted; its earlier operations are lost")
            }
            Error::Copy(s) => write!(f, "{s}"),
            Error::Cancelled => f.write_str("cancelled"),
            Error::EndpointClosed => f.write_str("endpoint closed"),
            Error::Invalid(s) => write!(f, "invalid {s}"),
            Error::WireVersion(a, v) => write!(
                f,
                "peer {a} speaks tigon wire version {v}, this node version {}: run the same \
                 tigon release on every node",
                crate::wire::VERSION
            ),
        }
    }
}

impl std::error::Error for Error {}

/// Identifies a pending operation; stale ids are detected by a generation count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReqId(u64);

impl ReqId {
    pub(super) fn new(index: usize, generation: u32) -> Self {
        ReqId(((generation as u64) << 32) | index as u64)
    }
    pub(super) fn index(self) -> usize {
        (self.0 & 0xffff_ffff) as usize
    }
    pub(super) fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
    pub fn as_u64(self) -> u64 {
        self.0
    }
}

/// A message taken off the unexpected queue by [`Engine::improbe`], to be received with [`Engine::imrecv`].
///
/// [`Engine::improbe`]: super::Engine::improbe
/// [`Engine::imrecv`]: super::Engine::imrecv
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MessageHandle(u64);

impl MessageHandle {
    pub fn as_u64(self) -> u64 {
        self.0
    }
    /// A handle from its number (as it crossed a channel); unknown numbers are refused by
    /// [`Engine::imrecv`].
    ///
    /// [`Engine::imrecv`]: super::Engine::imrecv
    pub fn from_u64(v: u64) -> Self {
        MessageHandle(v)
    }
}

/// MPI send modes that change the protocol. Ready and buffered sends are standard sends here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendMode {
    Standard,
    /// Completes only once the receiver has matched the message.
    Synchronous,
}

/// What a probe or a finished receive reports about a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsgInfo {
    pub source: EndpointAddr,
    pub src_rank: u32,
    pub match_bits: u64,
    /// The message's length as sent.
    pub len: u64,
}

/// The result of a finished operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Sent,
    /// `received` bytes landed; `truncated` when the message was longer than the buffer.
    Received {
        info: MsgInfo,
        received: u64,
        truncated: bool,
    },
}

/// A finished operation, in the order the engine finished them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub req: ReqId,
    pub ep: u16,
    pub result: Result<Outcome, Error>,
}
