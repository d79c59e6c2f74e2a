//! The operating-system side of tigon's client channels, kept apart from DPDK so that ranks
//! (the MTL) can use it without linking DPDK: shared memory regions with checked atomic and
//! byte access, single-producer single-consumer rings of 32-bit indices, file-descriptor
//! passing with peer credentials, and copies into and out of another process's memory; and
//! hints about the engine's large tables' memory (prefetch, huge pages).
//!
//! Every `unsafe` block of the channel lives here, next to the check that makes it sound.

pub mod clock;
pub mod mem;
pub mod netns;
pub mod perf;
pub mod process;
pub mod region;
pub mod remote;
pub mod ring;
pub mod signals;
pub mod sock;
pub mod wake;

pub use region::{ReadOnlyRegion, RecvBuf, Region};
pub use ring::Ring;
