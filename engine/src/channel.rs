//! The shared-memory channel between a rank (client) and its node agent's engine.
//!
//! One region per client, created by the agent and passed to the client as a memfd:
//!
//! ```text
//! [header 4 KiB][request ring][completion ring][descriptors: n_desc × 256 B][data: n_data × data_size]
//! ```
//!
//! Rings carry descriptor indices, never pointers. Descriptors and data buffers belong to the
//! client, which keeps their free lists in its own memory (nothing to contend on): it fills a
//! descriptor (and, for small payloads, a data buffer), pushes the index on the request ring;
//! the engine copies the descriptor out once, validates it, works, writes the result into the
//! same descriptor and pushes the index back on the completion ring. Each index sits in at
//! most one ring at a time and rings have a slot per descriptor, so a ring can never overflow.
//! Large payloads do not pass through data buffers: the engine reads and writes the rank's
//! own memory (`addr`, with [`FLAG_DIRECT`]).

use crate::addr::EndpointAddr;
use crate::wire::MacAddr;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering, fence};
use tigon_shm::{Region, Ring};

pub const MAGIC: u64 = u64::from_be_bytes(*b"TIGONCH1");
pub const VERSION: u32 = 2;
pub const HEADER_LEN: usize = 4096;
pub const DESC_LEN: usize = 256;
/// "No data buffer" in [`Desc::data_idx`].
pub const NO_DATA: u32 = u32::MAX;

/// Operations a client asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    Send = 1,
    Recv = 2,
    Probe = 3,
    MProbe = 4,
    MRecv = 5,
    Cancel = 6,
}

impl Op {
    pub fn from_u8(v: u8) -> Option<Op> {
        Some(match v {
            1 => Op::Send,
            2 => Op::Recv,
            3 => Op::Probe,
            4 => Op::MProbe,
            5 => Op::MRecv,
            6 => Op::Cancel,
            _ => return None,
        })
    }
}

/// Payload lives at `addr` in the client's own address space, not in a data buffer.
pub const FLAG_DIRECT: u8 = 1;
/// Synchronous send (MPI_Ssend).
pub const FLAG_SYNC: u8 = 2;
/// Receive/probe from any source (`src_rank` ignored).
pub const FLAG_ANY_SOURCE: u8 = 4;

/// Completion status codes.
pub mod status {
    pub const OK: u32 = 0;
    /// Probe: nothing matched.
    pub const NO_MATCH: u32 = 1;
    pub const CANCELLED: u32 = 2;
    pub const PEER_UNREACHABLE: u32 = 3;
    pub const PEER_RESTARTED: u32 = 4;
    pub const COPY_FAILED: u32 = 5;
    pub const INVALID: u32 = 6;
    /// The agent is shutting down.
    pub const SHUTDOWN: u32 = 7;
}

/// One descriptor: a request as the client writes it, with the completion fields the engine
/// fills in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Desc {
    pub op: u8,
    pub flags: u8,
    /// Data buffer holding the payload (send) or receiving it (receive), or [`NO_DATA`].
    pub data_idx: u32,
    /// Echoed untouched: the client's own tag for the request.
    pub user: u64,
    /// Send length, or receive capacity.
    pub len: u64,
    /// Client address of the payload with [`FLAG_DIRECT`].
    pub addr: u64,
    pub match_bits: u64,
    pub mask: u64,
    /// Receive filter (unless [`FLAG_ANY_SOURCE`]) or the sender's rank.
    pub rank: u32,
    pub peer: Option<EndpointAddr>,
    /// Message handle (mprobe → mrecv) or the descriptor index to cancel.
    pub handle: u64,
    // ---- completion ----
    pub status: u32,
    pub info_rank: u32,
    pub info_bits: u64,
    /// Length of the message as sent.
    pub info_len: u64,
    /// Bytes delivered into the buffer.
    pub received: u64,
    pub truncated: bool,
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8"))
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4"))
}

impl Desc {
    pub fn emit(&self, b: &mut [u8; DESC_LEN]) {
        b.fill(0);
        b[0] = self.op;
        b[1] = self.flags;
        b[2] = self.truncated as u8;
        b[3] = self.peer.is_some() as u8;
        b[4..8].copy_from_slice(&self.data_idx.to_le_bytes());
        b[8..16].copy_from_slice(&self.user.to_le_bytes());
        b[16..24].copy_from_slice(&self.len.to_le_bytes());
        b[24..32].copy_from_slice(&self.addr.to_le_bytes());
        b[32..40].copy_from_slice(&self.match_bits.to_le_bytes());
        b[40..48].copy_from_slice(&self.mask.to_le_bytes());
        b[48..52].copy_from_slice(&self.rank.to_le_bytes());
        if let Some(p) = self.peer {
            b[56..62].copy_from_slice(&p.mac.0);
            b[62..64].copy_from_slice(&p.ep.to_le_bytes());
        }
        b[64..72].copy_from_slice(&self.handle.to_le_bytes());
        b[72..76].copy_from_slice(&self.status.to_le_bytes());
        b[76..80].copy_from_slice(&self.info_rank.to_le_bytes());
        b[80..88].copy_from_slice(&self.info_bits.to_le_bytes());
        b[88..96].copy_from_slice(&self.info_len.to_le_bytes());
        b[96..104].copy_from_slice(&self.received.to_le_bytes());
    }

    /// Parses any 256 bytes; validity of the fields is the reader's business.
    pub fn parse(b: &[u8; DESC_LEN]) -> Desc {
        Desc {
            op: b[0],
            flags: b[1],
            truncated: b[2] != 0,
            data_idx: u32_at(b, 4),
            user: u64_at(b, 8),
            len: u64_at(b, 16),
            addr: u64_at(b, 24),
            match_bits: u64_at(b, 32),
            mask: u64_at(b, 40),
            rank: u32_at(b, 48),
            peer: (b[3] != 0).then(|| {
                EndpointAddr::new(
                    MacAddr(b[56..62].try_into().expect("6")),
                    u16::from_le_bytes([b[62], b[63]]),
                )
            }),
            handle: u64_at(b, 64),
            status: u32_at(b, 72),
            info_rank: u32_at(b, 76),
            info_bits: u64_at(b, 80),
            info_len: u64_at(b, 88),
            received: u64_at(b, 96),
        }
    }
}

/// Sizes of a channel, fixed by the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub n_desc: u32,
    pub n_data: u32,
    pub data_size: u32,
}

impl Geometry {
    pub fn req_ring_off(&self) -> usize {
        HEADER_LEN
    }
    pub fn cmp_ring_off(&self) -> usize {
        HEADER_LEN + Ring::bytes(self.n_desc).next_multiple_of(64)
    }
    pub fn desc_off(&self) -> usize {
        (self.cmp_ring_off() + Ring::bytes(self.n_desc)).next_multiple_of(4096)
    }
    pub fn data_off(&self) -> usize {
        (self.desc_off() + self.n_desc as usize * DESC_LEN).next_multiple_of(4096)
    }
    pub fn len(&self) -> usize {
        self.data_off() + self.n_data as usize * self.data_size as usize
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn validate(&self) -> io::Result<()> {
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

// Header fields.
const H_MAGIC: usize = 0;
const H_VERSION: usize = 8;
const H_N_DESC: usize = 12;
const H_N_DATA: usize = 16;
const H_DATA_SIZE: usize = 20;
const H_LEN: usize = 24;
const H_HEARTBEAT: usize = 32;
const H_STATE: usize = 40;
const H_AGENT_PID: usize = 44;
const H_CLIENT_PID: usize = 48;
/// 1 while the engine sleeps: a client that queues a request then rings the agent's doorbell.
const H_ENGINE_ASLEEP: usize = 52;
/// Client threads blocked waiting for completions.
const H_WAITERS: usize = 56;
/// Futex word: bumped by the engine after it queues completions for a waiting client.
const H_CMP_SEQ: usize = 60;

/// Agent state as published in the header.
pub const STATE_RUNNING: u32 = 0;
pub const STATE_SHUTDOWN: u32 = 1;

/// A mapped channel; both sides use the same type.
#[derive(Debug, Clone)]
pub struct Channel {
    pub region: Arc<Region>,
    pub geo: Geometry,
    /// Client → engine.
    pub requests: Ring,
    /// Engine → client.
    pub completions: Ring,
}

impl Channel {
    /// Agent side: lays out a fresh channel in `region`.
    pub fn init(
        region: Arc<Region>,
        geo: Geometry,
        agent_pid: u32,
        client_pid: u32,
    ) -> io::Result<Channel> {
        geo.validate()?;
        if region.len() < geo.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "region too small for the geometry",
            ));
        }
        let r = &region;
        r.write(H_VERSION, &VERSION.to_le_bytes())?;
        r.write(H_N_DESC, &geo.n_desc.to_le_bytes())?;
        r.write(H_N_DATA, &geo.n_data.to_le_bytes())?;
        r.write(H_DATA_SIZE, &geo.data_size.to_le_bytes())?;
        r.write(H_LEN, &(geo.len() as u64).to_le_bytes())?;
        r.write(H_AGENT_PID, &agent_pid.to_le_bytes())?;
        r.write(H_CLIENT_PID, &client_pid.to_le_bytes())?;
        // Magic last: a client never sees a half-written header as valid.
        r.atomic_u64(H_MAGIC)?
            .store(MAGIC, std::sync::atomic::Ordering::Release);
        Self::rings(region, geo)
    }

    /// Client side: validates the header of a region received from the agent.
    pub fn open(region: Arc<Region>) -> io::Result<Channel> {
        let bad =
            |m: &str| io::Error::new(io::ErrorKind::InvalidData, format!("channel header: {m}"));
        if region
            .atomic_u64(H_MAGIC)?
            .load(std::sync::atomic::Ordering::Acquire)
            != MAGIC
        {
            return Err(bad("bad magic"));
        }
        let rd = |o| -> io::Result<u32> {
            let mut b = [0u8; 4];
            region.read(o, &mut b)?;
            Ok(u32::from_le_bytes(b))
        };
        if rd(H_VERSION)? != VERSION {
            return Err(bad("version mismatch between agent and client"));
        }
        let geo = Geometry {
            n_desc: rd(H_N_DESC)?,
            n_data: rd(H_N_DATA)?,
            data_size: rd(H_DATA_SIZE)?,
        };
        geo.validate()?;
        if geo.len() > region.len() {
            return Err(bad("geometry larger than the region"));
        }
        Self::rings(region, geo)
    }

    fn rings(region: Arc<Region>, geo: Geometry) -> io::Result<Channel> {
        Ok(Channel {
            requests: Ring::new(region.clone(), geo.req_ring_off(), geo.n_desc)?,
            completions: Ring::new(region.clone(), geo.cmp_ring_off(), geo.n_desc)?,
            region,
            geo,
        })
    }

    pub fn read_desc(&self, idx: u32) -> io::Result<Desc> {
        let mut b = [0u8; DESC_LEN];
        self.region.read(self.desc_offset(idx)?, &mut b)?;
        Ok(Desc::parse(&b))
    }

    pub fn write_desc(&self, idx: u32, d: &Desc) -> io::Result<()> {
        let mut b = [0u8; DESC_LEN];
        d.emit(&mut b);
        self.region.write(self.desc_offset(idx)?, &b)
    }

    fn desc_offset(&self, idx: u32) -> io::Result<usize> {
        if idx >= self.geo.n_desc {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("descriptor index {idx} out of range"),
            ));
        }
        Ok(self.geo.desc_off() + idx as usize * DESC_LEN)
    }

    /// Byte offset of data buffer `idx` in the region.
    pub fn data_offset(&self, idx: u32) -> io::Result<usize> {
        if idx >= self.geo.n_data {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("data buffer index {idx} out of range"),
            ));
        }
        Ok(self.geo.data_off() + idx as usize * self.geo.data_size as usize)
    }

    pub fn heartbeat(&self) -> u64 {
        self.region
            .atomic_u64(H_HEARTBEAT)
            .map_or(0, |a| a.load(std::sync::atomic::Ordering::Relaxed))
    }
    pub fn beat(&self) {
        if let Ok(a) = self.region.atomic_u64(H_HEARTBEAT) {
            a.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
    pub fn agent_state(&self) -> u32 {
        self.region.atomic_u32(H_STATE).map_or(STATE_SHUTDOWN, |a| {
            a.load(std::sync::atomic::Ordering::Acquire)
        })
    }
    pub fn set_agent_state(&self, s: u32) {
        if let Ok(a) = self.region.atomic_u32(H_STATE) {
            a.store(s, std::sync::atomic::Ordering::Release);
        }
    }

    fn word(&self, off: usize) -> &AtomicU32 {
        // The header is always mapped (a channel is never smaller than HEADER_LEN).
        self.region.atomic_u32(off).expect("channel header word")
    }

    // ---- sleeping and waking (see tigon_shm::wake) ----------------------------------------
    //
    // Both sides publish "I am about to sleep", fence, then look once more before sleeping;
    // the other side makes its change visible, fences, then checks the flag. One of the two
    // always sees the other (a Dekker handshake), so no wake-up is lost.

    /// Engine: marks itself asleep (or awake) in this channel.
    pub fn set_engine_asleep(&self, asleep: bool) {
        self.word(H_ENGINE_ASLEEP)
            .store(asleep as u32, Ordering::SeqCst);
    }

    /// Client, after queueing requests: whether the engine must be rung.
    pub fn engine_asleep(&self) -> bool {
        fence(Ordering::SeqCst);
        self.word(H_ENGINE_ASLEEP).load(Ordering::Relaxed) != 0
    }

    /// Engine, after queueing completions: wakes the client's threads blocked in
    /// [`Channel::wait_completions`], if any. Returns whether it had to.
    pub fn wake_client(&self) -> bool {
        fence(Ordering::SeqCst);
        if self.word(H_WAITERS).load(Ordering::Relaxed) == 0 {
            return false;
        }
        let seq = self.word(H_CMP_SEQ);
        seq.fetch_add(1, Ordering::SeqCst);
        tigon_shm::wake::futex_wake(seq);
        true
    }

    /// Client: blocks until the engine queues a completion or `timeout` passes (returns at
    /// once if one is queued already).
    pub fn wait_completions(&self, timeout: std::time::Duration) {
        let waiters = self.word(H_WAITERS);
        let seq = self.word(H_CMP_SEQ);
        waiters.fetch_add(1, Ordering::SeqCst);
        let before = seq.load(Ordering::SeqCst);
        if self.completions.is_empty() && self.agent_state() == STATE_RUNNING {
            tigon_shm::wake::futex_wait(seq, before, timeout);
        }
        waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn desc_round_trip_and_layout() {
        let geo = Geometry {
            n_desc: 64,
            n_data: 8,
            data_size: 32 * 1024,
        };
        let region = Arc::new(Region::create("ch", geo.len(), false).unwrap());
        let agent = Channel::init(region.clone(), geo, 1, 2).unwrap();
        let client = Channel::open(Arc::new(
            Region::from_fd(region.fd().try_clone().unwrap(), geo.len()).unwrap(),
        ))
        .unwrap();
        let d = Desc {
            op: Op::Send as u8,
            flags: FLAG_SYNC,
            data_idx: 3,
            user: 99,
            len: 1234,
            match_bits: 0xabc,
            mask: u64::MAX,
            rank: 5,
            peer: Some("02:00:00:00:00:01/4".parse().unwrap()),
            ..Desc::default()
        };
        client.write_desc(10, &d).unwrap();
        assert!(client.requests.push(10).unwrap());
        let i = agent.requests.pop().unwrap().unwrap();
        assert_eq!(agent.read_desc(i).unwrap(), d);
        assert!(agent.read_desc(64).is_err());
        assert!(agent.data_offset(8).is_err());
        assert!(geo.data_off() + 8 * 32 * 1024 <= region.len());
    }

    #[test]
    fn garbage_region_refused() {
        let r = Arc::new(Region::create("junk", 1 << 16, false).unwrap());
        assert!(Channel::open(r).is_err());
    }
}
