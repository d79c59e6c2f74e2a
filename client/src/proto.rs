//! The control-socket messages between a client and its agent: one JSON object per line.

use serde::{Deserialize, Serialize};

/// Client → agent.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Create my channel and endpoint; the reply carries the channel's memfd.
    Attach { version: u32 },
    /// The agent's counters as JSON.
    Stats,
    /// The answer to [`Reply::Offer`]: whether this client opened the agent's memory file
    /// for reading and writing (then its channel lies there).
    Take { ok: bool },
}

/// Agent → client.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    Attached {
        /// The endpoint's address, as it travels through the modex.
        address: String,
        region_len: u64,
        agent_pid: i32,
        /// Messages up to this size go eagerly (the agent's rendezvous threshold).
        eager_limit: u64,
        /// Bytes of the node's receive memory, passed as a third fd for the client to map
        /// read-only (0: none; received payloads then always come through data buffers).
        #[serde(default)]
        rx_len: u64,
        /// Where that memory starts in the fd's file (a multiple of its page size: DPDK's
        /// own memory is one file per memseg list).
        #[serde(default)]
        rx_offset: u64,
        /// Where the channel starts in the agent's memory file the client opened (after
        /// [`Reply::Offer`]); no channel fd is passed then. `None`: the first fd is the
        /// channel's memfd.
        #[serde(default)]
        channel_offset: Option<u64>,
    },
    /// Before `Attached`: a channel in the agent's DPDK memory, the file behind descriptor
    /// `fd` of the agent, whose (device, inode) are `dev`, `ino`, if the client can open it
    /// for writing through `/proc/<agent>/fd/<fd>` itself (the kernel lets only processes
    /// that may inspect the agent do so); the client answers with [`Request::Take`].
    Offer {
        fd: i32,
        dev: u64,
        ino: u64,
    },
    Stats {
        stats: serde_json::Value,
    },
    Error {
        message: String,
    },
}

/// Protocol version of the attach handshake and channel layout: the channel's version times
/// 100 plus the handshake's revision (1: the receive memory's `rx_offset`, which a client
/// that ignores it would map wrong; 2: the channel offered in the agent's memory file,
/// `Offer` / `Take`, which a client that ignores it would never answer).
pub const VERSION: u32 = tigon_engine::channel::VERSION * 100 + 2;
