//! Client memory as the agent's copy engine sees it: resolves [`BufRef`]s into client
//! channels or client address spaces, and moves bytes there with the CPU.
//!
//! A `BufRef` names client slot, slot generation and kind in `region` (so a reference to a
//! departed client's memory fails instead of landing in its successor's), and the byte
//! address in `addr`: an offset in the channel region, or an address in the client process.

use std::sync::Arc;
use tigon_engine::channel::Payload;
use tigon_engine::{BufRef, CopyError};
use tigon_shm::Region;

const DIRECT: u64 = 1;

/// The reference the engine carries for `payload` of client `slot` (generation `generation`).
pub fn bufref(slot: u32, generation: u32, payload: Payload) -> BufRef {
    let (direct, addr, len) = match payload {
        Payload::Direct { addr, len } => (true, addr, len),
        Payload::Buffer { offset, len } => (false, offset, len),
    };
    BufRef::new(
        ((slot as u64) << 32) | ((generation as u64) << 1) | direct as u64,
        addr,
        len,
    )
}

/// Copy engines that keep the table of client memory.
pub trait ClientCopy {
    fn clients(&mut self) -> &mut Clients;
}

/// What the copy engine knows of a client.
pub struct ClientMem {
    pub generation: u32,
    pub region: Arc<Region>,
    /// The client's process, for direct copies.
    pub pid: i32,
    /// The region as registered with DPDK (when a dmadev may write it).
    pub ext: Option<Arc<tigon_pmd::ExtMem>>,
}

/// Client memory by slot.
#[derive(Default)]
pub struct Clients {
    slots: Vec<Option<ClientMem>>,
}

/// Where a resolved reference lands.
#[derive(Clone, Copy)]
pub enum Target<'a> {
    /// Offset `off` in this client's channel region.
    Channel(&'a ClientMem, usize),
    /// Address in the client process.
    Direct(i32, u64),
}

impl Clients {
    pub fn insert(&mut self, slot: u32, m: ClientMem) {
        let s = slot as usize;
        if self.slots.len() <= s {
            self.slots.resize_with(s + 1, || None);
        }
        self.slots[s] = Some(m);
    }

    pub fn remove(&mut self, slot: u32) -> Option<ClientMem> {
        self.slots.get_mut(slot as usize).and_then(Option::take)
    }

    /// Resolves `b` plus `off`, checking `len` bytes fit the reference.
    pub fn resolve(&self, b: &BufRef, off: u64, len: usize) -> Result<Target<'_>, CopyError> {
        let end = off.checked_add(len as u64).filter(|&e| e <= b.len);
        if end.is_none() {
            return Err(CopyError(format!(
                "{len} bytes at {off} overrun a {}-byte buffer",
                b.len
            )));
        }
        let slot = (b.region >> 32) as usize;
        let generation = ((b.region & 0xffff_ffff) >> 1) as u32;
        let m = self
            .slots
            .get(slot)
            .and_then(Option::as_ref)
            .filter(|m| m.generation == generation)
            .ok_or_else(|| CopyError("the client of this buffer is gone".into()))?;
        let at = b
            .addr
            .checked_add(off)
            .ok_or_else(|| CopyError("address overflow".into()))?;
        if b.region & DIRECT != 0 {
            Ok(Target::Direct(m.pid, at))
        } else {
            Ok(Target::Channel(m, at as usize))
        }
    }
}

impl Target<'_> {
    /// CPU write of `src` here.
    pub fn write(&self, src: &[u8]) -> Result<(), CopyError> {
        match *self {
            Target::Channel(m, at) => m
                .region
                .write(at, src)
                .map_err(|e| CopyError(e.to_string())),
            Target::Direct(pid, addr) => tigon_shm::remote::write(pid, addr, src)
                .map_err(|e| CopyError(format!("writing the client's buffer: {e}"))),
        }
    }

    /// CPU read of `out.len()` bytes from here.
    pub fn read(&self, out: &mut [u8]) -> Result<(), CopyError> {
        match *self {
            Target::Channel(m, at) => m.region.read(at, out).map_err(|e| CopyError(e.to_string())),
            Target::Direct(pid, addr) => tigon_shm::remote::read(pid, addr, out)
                .map_err(|e| CopyError(format!("reading the client's buffer: {e}"))),
        }
    }
}
