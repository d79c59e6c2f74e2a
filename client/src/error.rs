//! Why a client call failed, and the agent's status codes as messages.

use std::io;
use tigon_engine::channel::status;

/// Why a client call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// No agent at the socket, or the handshake failed.
    Attach(String),
    /// The agent died or shut down; every pending and later operation fails with this.
    AgentGone(String),
    /// The operation failed in the engine (peer unreachable, restarted, bad buffer...).
    Failed { status: u32, message: String },
    /// A request handle that is not pending (completed already, or never issued).
    BadRequest,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Error::Attach(m) => write!(f, "cannot attach to the tigon agent: {m}"),
            Error::AgentGone(m) => write!(f, "tigon agent gone: {m}"),
            Error::Failed { message, .. } => f.write_str(message),
            Error::BadRequest => f.write_str("no such pending request"),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

pub(crate) fn status_message(s: u32) -> &'static str {
    match s {
        status::CANCELLED => "cancelled",
        status::PEER_UNREACHABLE => "peer unreachable (no acknowledgement within the deadline)",
        status::PEER_RESTARTED => "peer restarted; the operation was lost with it",
        status::COPY_FAILED => "the agent could not read or write the buffer",
        status::INVALID => "invalid request",
        status::SHUTDOWN => "the agent is shutting down",
        _ => "operation failed",
    }
}

pub(crate) fn io_err(e: io::Error) -> Error {
    Error::Failed {
        status: status::INVALID,
        message: e.to_string(),
    }
}
