//! The rank side of tigon: attach to the node agent over its Unix socket, receive a shared
//! memory channel, and post sends, receives, probes and cancels that the agent's engine core
//! carries out. No DPDK here.
//!
//! Thread-safe (MPI_THREAD_MULTIPLE): one lock guards the channel's free lists and pending
//! table; the engine does the protocol work, so the critical sections are short.
//!
//! Small payloads travel through the channel's data buffers (one copy on each side). Large
//! ones do not: the engine reads and writes this process's memory directly
//! (`process_vm_readv` / `process_vm_writev`, allowed with `PR_SET_PTRACER`), so the rank's
//! core does no per-byte work while a large transfer runs.
//!
//! The rooms, each importing only those below it: `attach` (the control socket) → `client`
//! (the operations) → `desc` (the descriptors it writes), `pending` (the client's half of the
//! channel) → `wait` (how a waiting thread passes time), `ops` (handles and results),
//! `error`.

mod attach;
mod client;
mod desc;
mod error;
mod ops;
mod pending;
pub mod proto;
#[cfg(test)]
mod tests;
mod wait;

pub use attach::agent_stats;
pub use client::Client;
pub use error::{Error, Result};
pub use ops::{Done, Lease, Notified, RecvInto, Req, Status};
use std::path::PathBuf;
/// A receive buffer of this process ([`RecvInto::Raw`]).
pub use tigon_shm::RecvBuf;
pub use wait::set_wait_policy;

/// Where agents put their sockets unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/tigon/agent.sock";

/// The socket to use: `$TIGON_SOCKET`, else (unset or empty) [`DEFAULT_SOCKET`].
pub fn default_socket() -> PathBuf {
    std::env::var_os("TIGON_SOCKET")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(DEFAULT_SOCKET), PathBuf::from)
}
