//! The shared-memory channel between a rank (client) and its node agent's engine.
//!
//! One region per client, created by the agent and passed to the client as a memfd:
//!
//! ```text
//! [header 4 KiB][request ring][completion ring][lease ring][lent ring][fragments][data: n_data × data_size]
//! ```
//!
//! Rings carry descriptor indices, never pointers. Descriptor indices and data buffers belong
//! to the client, which keeps their free lists in its own memory (nothing to contend on): it
//! pushes a request ([`Desc`]) on the request ring under a free index (after filling a data
//! buffer, for small payloads); the engine reads it once into a [`Request`] (validated, its
//! buffer resolved), works, and pushes the index back on the completion ring with its
//! [`Completion`]. Both rings carry their entries in their slots, a cache line each, so each
//! side reads one line per entry from the other's core. Each index sits in at
//! most one ring at a time and rings have a slot per descriptor, so a ring can never overflow.
//! Large payloads do not pass through data buffers: the engine reads and writes the rank's
//! own memory (`addr`, with [`FLAG_DIRECT`]), or, while the client polls, lend it the frames
//! they arrived in, fragment by fragment ([`Fragment`], the lent ring), for it to copy.
mod desc;
mod layout;
mod request;

pub use desc::{
    Completion, CompletionEntry, Desc, FLAG_ABANDON, FLAG_ANY_SOURCE, FLAG_DIRECT, FLAG_LEASE,
    FLAG_SYNC, NO_DATA, Op, status,
};
pub use layout::{FRAGMENT_LEN, Geometry, HEADER_LEN, LEASE_SLOTS};
pub use request::{Payload, Request, Submitted};

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering, fence};
use tigon_shm::ring::{Corrupt, PAYLOAD};
use tigon_shm::{Region, Ring};

/// A request taken off the ring by [`Channel::take_request`]: its descriptor index, and the
/// request or why it is none.
pub type Taken = (u32, Result<Submitted, String>);

pub const MAGIC: u64 = u64::from_be_bytes(*b"TIGONCH1");
/// 3: MProbe reports the bytes already at the node; Cancel may abandon instead.
/// 4: leases of received frames (`FLAG_LEASE`, the lease ring, `Desc::lease`).
/// 5: fragments of large messages lent to a polling client (the lent ring, the fragment
/// table, the polled word), 128 lease slots.
/// 6: ring slots of 8 bytes that carry their entry's sequence number (`tigon_shm::Ring`).
/// 7: descriptors of 128 bytes (their used bytes; 256 before), so the 16,384 of a channel
/// take 2 MiB.
/// 8: the request in a descriptor's first line, the completion (with `Desc::echo` and
/// `truncated`) in its second: the engine no longer writes the request's line; the polled
/// word on a header line of its own.
/// 9: the completion in its completion-ring slot (a line per slot, `Ring::with_payload`),
/// not in the descriptor: one line crosses to the rank per completion, where the slot and
/// then the descriptor's line crossed one after the other.
/// 10: the request in its request-ring slot too: no descriptors in the region.
pub const VERSION: u32 = 10;

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
/// Payload bytes the client has copied with its CPU (into channel buffers to send, out of
/// them and of its own staging to receive): the rank's share of `tigon stats`' copies.
const H_CLIENT_COPIED: usize = 64;
/// When the client last polled in a wait (`tigon_shm::signals::monotonic_ns`; 0: never): the
/// engine lends it the fragments of large messages only while this is recent. A line of its
/// own: the engine reads it for every fragment it lends, and beside the copy counter (as
/// until channel version 8) each such read made the rank's next count of a copy, a locked
/// add, wait for the line to come back (10 % of the ranks' CPU in a 4 KiB ping-pong whose
/// frames were lent).
const H_POLLED: usize = 128;
/// A client that said it polled this recently (see [`Channel::mark_polled`]) is waiting in a
/// loop (which polls every few µs, or yields to another rank of its core for a while): the
/// fragments of its large receives may be lent to it. Past this it computes, and the engine
/// writes them into its memory instead. (A client that sleeps, or whose wait got what it
/// waited for, says so at once: [`Channel::wait_completions`], the MTL's progress.)
pub const POLLED_WITHIN_NS: u64 = 200_000;
/// 1 when the agent may lend this client fragments of large messages (`--lend-large`): only
/// then does its polled word mean anything, and only then does the client keep it.
const H_LENDS: usize = 80;

/// A fragment of a large message lent to the client: `len` bytes at `rx_off` of the node's
/// receive memory belong at `msg_off` of the receive in descriptor `desc`, whose request
/// carried `user`. The client copies them there and gives the lease back on the lease ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fragment {
    pub desc: u32,
    pub len: u32,
    pub user: u64,
    pub msg_off: u64,
    pub rx_off: u64,
}

impl Fragment {
    fn emit(&self) -> [u8; FRAGMENT_LEN] {
        let mut b = [0u8; FRAGMENT_LEN];
        b[0..4].copy_from_slice(&self.desc.to_le_bytes());
        b[4..8].copy_from_slice(&self.len.to_le_bytes());
        b[8..16].copy_from_slice(&self.user.to_le_bytes());
        b[16..24].copy_from_slice(&self.msg_off.to_le_bytes());
        b[24..32].copy_from_slice(&self.rx_off.to_le_bytes());
        b
    }
    fn parse(b: &[u8; FRAGMENT_LEN]) -> Fragment {
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8"));
        Fragment {
            desc: u32::from_le_bytes(b[0..4].try_into().expect("4")),
            len: u32::from_le_bytes(b[4..8].try_into().expect("4")),
            user: u64_at(8),
            msg_off: u64_at(16),
            rx_off: u64_at(24),
        }
    }
}

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
    /// Client → engine: leases given back (`Desc::lease` - 1, or a fragment's lease id).
    pub leases: Ring,
    /// Engine → client: fragment leases (ids into the fragment table).
    pub lent: Ring,
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
            requests: Ring::with_payload(region.clone(), geo.req_ring_off(), geo.n_desc)?,
            completions: Ring::with_payload(region.clone(), geo.cmp_ring_off(), geo.n_desc)?,
            leases: Ring::new(region.clone(), geo.lease_ring_off(), LEASE_SLOTS)?,
            lent: Ring::new(region.clone(), geo.lent_ring_off(), LEASE_SLOTS)?,
            region,
            geo,
        })
    }

    /// Client: submits request `d` under descriptor index `idx` (`Ok(false)`: the ring is
    /// full, which it cannot be while the client holds a free index).
    pub fn submit(&self, idx: u32, d: &Desc) -> Result<bool, Corrupt> {
        Ok(self.requests.push_all_with(&[(idx, d.emit())])? == 1)
    }

    /// Byte offset of data buffer `idx` in the region.
    pub fn data_offset(&self, idx: u32) -> io::Result<usize> {
        self.geo.data_buffer_off(idx)
    }

    /// Engine: the oldest request, read once (one line), with its descriptor index, or why
    /// it is not one (a client that submits such a thing is broken or hostile).
    pub fn take_request(&self) -> Result<Option<Taken>, Corrupt> {
        let mut b = [0u8; PAYLOAD];
        let Some(idx) = self.requests.pop_with(&mut b)? else {
            return Ok(None);
        };
        let submitted = if idx >= self.geo.n_desc {
            Err(format!("descriptor index {idx} out of range"))
        } else {
            let d = Desc::parse(&b);
            Request::parse(&d, &self.geo).map(|request| Submitted {
                user: d.user,
                request,
            })
        };
        Ok(Some((idx, submitted)))
    }

    /// Engine: puts as many of `entries` on the completion ring as fit, in order, at once;
    /// returns how many.
    pub fn publish(&self, entries: &[CompletionEntry]) -> Result<usize, Corrupt> {
        self.completions.push_all_with(entries)
    }

    /// Client: the oldest completion, with its descriptor index (one line read); validity
    /// of its fields is the caller's business.
    pub fn take_completion(&self) -> Result<Option<(u32, Completion)>, Corrupt> {
        let mut b = [0u8; PAYLOAD];
        Ok(self
            .completions
            .pop_with(&mut b)?
            .map(|idx| (idx, Completion::parse_entry(&b))))
    }

    /// Engine: lends the client fragment `f` under lease `id` (its entry written, then the
    /// id on the lent ring, which holds every lease id: it cannot be full).
    pub fn lend_fragment(&self, id: u32, f: &Fragment) -> io::Result<()> {
        let at = self.fragment_off(id)?;
        self.region.write(at, &f.emit())?;
        match self.lent.push(id) {
            Ok(true) => Ok(()),
            Ok(false) => Err(io::Error::other("lent ring full")),
            Err(e) => Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
        }
    }

    /// Client: the fragment lent under lease `id` (popped from the lent ring).
    pub fn fragment(&self, id: u32) -> io::Result<Fragment> {
        let mut b = [0u8; FRAGMENT_LEN];
        self.region.read(self.fragment_off(id)?, &mut b)?;
        Ok(Fragment::parse(&b))
    }

    fn fragment_off(&self, id: u32) -> io::Result<usize> {
        if id >= LEASE_SLOTS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("lease {id} out of range"),
            ));
        }
        Ok(self.geo.fragment_table_off() + id as usize * FRAGMENT_LEN)
    }

    /// Client: says it polls now (`now`: `tigon_shm::signals::monotonic_ns`).
    pub fn mark_polled(&self, now: u64) {
        if let Ok(a) = self.region.atomic_u64(H_POLLED) {
            a.store(now, Ordering::Relaxed);
        }
    }

    /// Agent, before the client attaches: whether it may lend this client fragments.
    pub fn set_lends_fragments(&self, lends: bool) {
        self.word(H_LENDS).store(lends as u32, Ordering::Release);
    }

    /// Client: whether the agent may lend it fragments, so that its polled word is read.
    pub fn lends_fragments(&self) -> bool {
        self.word(H_LENDS).load(Ordering::Acquire) != 0
    }

    /// Engine: when the client last said it polled (0: never).
    pub fn polled(&self) -> u64 {
        self.region
            .atomic_u64(H_POLLED)
            .map_or(0, |a| a.load(Ordering::Relaxed))
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
    /// Client: counts `n` payload bytes it copied with its CPU.
    pub fn count_client_copy(&self, n: u64) {
        if let Ok(a) = self.region.atomic_u64(H_CLIENT_COPIED) {
            a.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        }
    }
    /// Payload bytes the client says it copied with its CPU (a client's word: reported, never
    /// trusted for anything else).
    pub fn client_copied(&self) -> u64 {
        self.region
            .atomic_u64(H_CLIENT_COPIED)
            .map_or(0, |a| a.load(std::sync::atomic::Ordering::Relaxed))
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
        // Asleep, it copies nothing: no frames are lent to it meanwhile.
        if self.polled() != 0 {
            self.mark_polled(0);
        }
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
    fn a_request_crosses_in_its_slot_and_the_layout_holds() {
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
        assert_eq!(agent.take_request(), Ok(None));
        assert_eq!(client.submit(10, &d), Ok(true));
        let (i, got) = agent.take_request().unwrap().unwrap();
        assert_eq!(i, 10);
        let got = got.unwrap();
        assert_eq!(got.user, 99);
        assert_eq!(got.request, Request::parse(&d, &geo).unwrap());
        assert_eq!(agent.take_request(), Ok(None));
        assert!(agent.data_offset(8).is_err());
        assert!(geo.data_off() + 8 * 32 * 1024 <= region.len());
        assert!(geo.fragment_table_off() + LEASE_SLOTS as usize * FRAGMENT_LEN <= geo.data_off());
    }

    fn pair(geo: Geometry) -> (Channel, Channel) {
        let region = Arc::new(Region::create("ch", geo.len(), false).unwrap());
        let agent = Channel::init(region.clone(), geo, 1, 2).unwrap();
        let client = Channel::open(Arc::new(
            Region::from_fd(region.fd().try_clone().unwrap(), geo.len()).unwrap(),
        ))
        .unwrap();
        (agent, client)
    }

    const GEO: Geometry = Geometry {
        n_desc: 16,
        n_data: 4,
        data_size: 1024,
    };

    /// What a broken client submits is an error for that request, not for the channel: an
    /// index out of range, an unknown operation; an MRecv's handle crosses with it.
    #[test]
    fn bad_requests_are_refused_one_by_one() {
        let (agent, client) = pair(GEO);
        let recv = Desc {
            op: Op::Recv as u8,
            data_idx: 1,
            user: 4,
            len: 100,
            rank: 2,
            ..Desc::default()
        };
        let mrecv = Desc {
            op: Op::MRecv as u8,
            handle: 0xfeed,
            ..recv
        };
        let junk = Desc {
            op: 42,
            ..Desc::default()
        };
        for (i, d) in [(16, &recv), (4, &junk), (3, &mrecv)] {
            assert_eq!(client.submit(i, d), Ok(true));
        }
        let (i, r) = agent.take_request().unwrap().unwrap();
        assert_eq!(i, 16);
        assert!(r.unwrap_err().contains("descriptor index 16 out of range"));
        let (_, r) = agent.take_request().unwrap().unwrap();
        assert_eq!(r.unwrap_err(), "unknown operation 42");
        let (_, r) = agent.take_request().unwrap().unwrap();
        assert!(matches!(
            r.unwrap().request,
            Request::MRecv {
                handle: 0xfeed,
                payload: Payload::Buffer { len: 100, .. }
            }
        ));
        // The ring has a slot per descriptor index: full only for a client that reuses one.
        for i in 0..GEO.n_desc {
            assert_eq!(client.submit(i, &recv), Ok(true));
        }
        assert_eq!(client.submit(0, &recv), Ok(false));
    }

    /// A completion reaches the client whole through its ring slot, in order, published
    /// only when the engine says so.
    #[test]
    fn a_completion_rides_in_its_ring_slot() {
        let (agent, client) = pair(GEO);
        let done = Completion {
            user: 3,
            status: status::OK,
            info_rank: 8,
            info_bits: 0x66,
            info_len: 4096,
            received: 64,
            truncated: true,
            handle: 0x1234,
            lease: 7,
            lease_off: 0x9_0000,
        };
        assert_eq!(client.take_completion(), Ok(None));
        let e = done.entry(5);
        let e2 = Completion::status(status::NO_MATCH).entry(6);
        assert_eq!(agent.publish(&[e, e2]), Ok(2));
        assert_eq!(client.take_completion(), Ok(Some((5, done))));
        let (i, c) = client.take_completion().unwrap().unwrap();
        assert_eq!((i, c.status, c.user, c.lease), (6, status::NO_MATCH, 0, 0));
        assert_eq!(client.take_completion(), Ok(None));
        // The ring has a slot per descriptor: never full for a correct client.
        let all: Vec<_> = (0..GEO.n_desc).map(|i| done.entry(i)).collect();
        assert_eq!(agent.publish(&all), Ok(GEO.n_desc as usize));
        assert_eq!(agent.publish(&all[..1]), Ok(0));
    }

    /// A fragment goes from the engine to the client through its table entry and the lent
    /// ring; a lease id out of range is refused.
    #[test]
    fn a_fragment_lease_reaches_the_client() {
        let (agent, client) = pair(GEO);
        let f = Fragment {
            desc: 3,
            len: 8948,
            user: 0x1_0000_0002,
            msg_off: 1 << 22,
            rx_off: 0x12_3456,
        };
        agent.lend_fragment(LEASE_SLOTS - 1, &f).unwrap();
        assert_eq!(client.lent.pop().unwrap(), Some(LEASE_SLOTS - 1));
        assert_eq!(client.fragment(LEASE_SLOTS - 1).unwrap(), f);
        assert!(agent.lend_fragment(LEASE_SLOTS, &f).is_err());
        assert!(client.fragment(LEASE_SLOTS).is_err());
        assert_eq!(agent.polled(), 0);
        client.mark_polled(77);
        assert_eq!(agent.polled(), 77);
    }

    #[test]
    fn garbage_region_refused() {
        let r = Arc::new(Region::create("junk", 1 << 16, false).unwrap());
        assert!(Channel::open(r).is_err());
    }
}
