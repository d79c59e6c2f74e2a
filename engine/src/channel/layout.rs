//! Where things are in a channel's region.

use std::io;
use tigon_shm::Ring;

pub const HEADER_LEN: usize = 4096;
/// Received frames a client may hold at once (leases: payloads it reads where they arrived,
/// in the agent's receive memory, then gives back on the lease ring): small messages, and
/// the fragments of large ones lent while the client polls (a 4 MiB message is 470 jumbo
/// frames; 128 in the client's hands keep it copying while the engine lends the next).
pub const LEASE_SLOTS: u32 = 128;
/// Bytes of one entry of the fragment table (see `Channel::write_fragment`).
pub const FRAGMENT_LEN: usize = 32;

/// Sizes of a channel, fixed by the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Descriptor indices: requests a client may have in flight (and each ring's slots).
    pub n_desc: u32,
    pub n_data: u32,
    pub data_size: u32,
}

impl Geometry {
    pub fn req_ring_off(&self) -> usize {
        HEADER_LEN
    }
    pub fn cmp_ring_off(&self) -> usize {
        HEADER_LEN + Ring::bytes_with_payload(self.n_desc).next_multiple_of(64)
    }
    /// The ring of lease ids the client gives back (see [`LEASE_SLOTS`]).
    pub fn lease_ring_off(&self) -> usize {
        (self.cmp_ring_off() + Ring::bytes_with_payload(self.n_desc)).next_multiple_of(64)
    }
    /// The ring of fragment leases the engine hands the client (lease ids, whose entries
    /// are in the fragment table).
    pub fn lent_ring_off(&self) -> usize {
        (self.lease_ring_off() + Ring::bytes(LEASE_SLOTS)).next_multiple_of(64)
    }
    /// The fragment table: one entry per lease id, written before its id goes on the lent
    /// ring.
    pub fn fragment_table_off(&self) -> usize {
        (self.lent_ring_off() + Ring::bytes(LEASE_SLOTS)).next_multiple_of(64)
    }
    pub fn data_off(&self) -> usize {
        (self.fragment_table_off() + LEASE_SLOTS as usize * FRAGMENT_LEN).next_multiple_of(4096)
    }
    pub fn len(&self) -> usize {
        self.data_off() + self.n_data as usize * self.data_size as usize
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Byte offset of data buffer `idx` in the region.
    pub fn data_buffer_off(&self, idx: u32) -> io::Result<usize> {
        if idx >= self.n_data {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("data buffer index {idx} out of range"),
            ));
        }
        Ok(self.data_off() + idx as usize * self.data_size as usize)
    }
    pub(super) fn validate(&self) -> io::Result<()> {
        if !self.n_desc.is_power_of_two()
            || self.n_desc > 1 << 20
            || self.n_data > 1 << 20
            || self.data_size == 0
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad channel geometry {self:?}"),
            ));
        }
        Ok(())
    }
}
