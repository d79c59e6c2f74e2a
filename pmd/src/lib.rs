//! tigon's port layer: a safe Rust API over the system DPDK (22.11). The only crate of the
//! workspace that touches DPDK; every `unsafe` block says why it is sound.
//!
//! - [`Eal`]: one initialisation per process ([`EalBuilder`]); cleanup when the last handle
//!   (held by every pool, port and dmadev) drops.
//! - [`Mempool`] / [`Mbuf`]: owned mbufs, chains for multi-segment frames, external-buffer
//!   mbufs over [`ExtMem`] (memory registered with `rte_extmem_register`, or mapped only,
//!   or a memzone of DPDK's memory other processes may map read-only).
//! - [`Port`]: an ethdev from devargs (PCI, `net_memif`, `net_af_packet`, `net_af_xdp`,
//!   `net_ring`, `net_null`) with burst rx/tx.
//! - [`DmaDev`]: copy offload on a dmadev.
//! - [`frames`]: the checked frame stream used by the fabric tests and `tigon demo`;
//!   [`testbed`]: network namespaces, veth pairs and two-process runs for them.

#![deny(clippy::undocumented_unsafe_blocks)]

mod devargs;
mod dma;
mod eal;
mod error;
mod extmem;
pub mod frames;
mod intr;
mod mbuf;
mod mempool;
mod memzone;
mod port;
pub mod testbed;

pub use devargs::pci_address;
pub use dma::{Completed, DmaDev, DmaStats, DmaStatus};
pub use eal::{
    Eal, EalBuilder, Hugepages, IovaMode, NO_HUGE_DEFAULT_MB, NO_HUGE_ENV, check_hugepages,
};
pub use error::{Error, Result};
pub use extmem::ExtMem;
pub use mbuf::Mbuf;
pub use mempool::{DEFAULT_DATA_ROOM, HEADROOM, JUMBO_DATA_ROOM, MAX_NAME_LEN, Mempool};
pub use memzone::{MemsegFd, MemsegFdState};
pub use port::{Link, MEMIF_BSIZE, Port, PortConfig, PortStats};
