//! tigon's engine: a reliable, matched message protocol over Ethernet frames.
//!
//! Pure Rust with no DPDK types: the node agent drives it over a DPDK port, the tests over the
//! simulated link in [`sim`]. One [`Engine`] serves any number of local endpoints; each
//! endpoint talks to its peers through a reliable in-order frame stream (per-peer sequence
//! numbers, piggybacked and selective acks, RTT-based retransmit) that carries three message
//! classes: small and medium eager messages, and large rendezvous messages the receiver pulls
//! in blocks, several outstanding.

pub mod addr;
pub mod channel;
pub mod config;
pub mod copy;
mod engine;
pub mod fasthash;
pub mod link;
pub mod matching;
pub mod memlink;
pub mod net;
pub mod sim;
pub mod stats;
pub mod wire;

pub use addr::{Dest, EndpointAddr};
pub use config::Config;
pub use copy::{BufRef, CopyEngine, CopyError, CpuCopy, HeapMemory, Memory};
pub use engine::{Completion, Engine, Error, MessageHandle, MsgInfo, Outcome, ReqId, SendMode};
pub use link::{Link, TxRef};
pub use matching::{ANY_SOURCE, ANY_TAG, MatchSpec};
pub use stats::Stats;
pub use wire::MacAddr;
