//! Client memory as the agent's copy engine sees it: resolves [`BufRef`]s into client
//! channels or client address spaces, and moves bytes there with the CPU.
//!
//! A `BufRef` names the client slot, the operation and the kind in `region`, and the byte
//! address in `addr`: an offset in the channel region, or an address in the client process.
//! The operation is a token armed while the client's request is in flight: once the request
//! has completed, or the client abandoned it (MPI_Request_free of an active receive), or the
//! client left, the reference resolves to nothing, so no late copy lands in memory the rank
//! has taken back (or in the memory of whoever got its slot next).

use super::lease::{LeaseBudget, Leases};
use super::link::RxFrame;
use std::sync::Arc;
use tigon_engine::channel::{Channel, Fragment, POLLED_WITHIN_NS, Payload};
use tigon_engine::fasthash::FastMap;
use tigon_engine::{BufRef, CopyError};
use tigon_shm::Region;

const DIRECT: u64 = 1;
/// A data buffer whose client takes leases of received frames (`Payload::Lease`).
const LEASE: u64 = 2;
/// Tokens are 30 bits (bits 2..32 of `region`).
const TOKEN_MASK: u32 = 0x3fff_ffff;

/// The reference the engine carries for `payload` of the operation `token` of client `slot`.
pub fn bufref(slot: u32, token: u32, payload: Payload) -> BufRef {
    let (kind, addr, len) = match payload {
        Payload::Direct { addr, len } => (DIRECT, addr, len),
        Payload::Buffer { offset, len } => (0, offset, len),
        Payload::Lease { offset, len } => (LEASE, offset, len),
    };
    BufRef::new(
        ((slot as u64) << 32) | (((token & TOKEN_MASK) as u64) << 2) | kind,
        addr,
        len,
    )
}

fn slot_token(region: u64) -> (usize, u32) {
    ((region >> 32) as usize, ((region >> 2) as u32) & TOKEN_MASK)
}

/// Copy engines that keep the table of client memory.
pub trait ClientCopy {
    fn clients(&mut self) -> &mut Clients;
}

/// What the copy engine knows of a client.
pub struct ClientMem {
    /// Tokens of the client's operations whose buffers may be touched, with the descriptor
    /// and the client's tag of each (a fragment lent for it names them).
    /// Tokens come from the client, but a client has at most its channel's descriptors
    /// armed, so a bounded map needs no flooding-resistant hash (SipHash was ~1,300
    /// instructions of a 64 B message's serving, with `Served`'s map).
    pub armed: FastMap<u32, (u32, u64)>,
    pub region: Arc<Region>,
    /// The client's process, for direct copies.
    pub pid: i32,
    /// The region as registered with DPDK (when a dmadev may write it).
    pub ext: Option<Arc<tigon_pmd::ExtMem>>,
    /// Received frames lent to the client (see `lease`).
    pub leases: Leases,
    /// The client's channel when it maps the receive memory: the fragments of its large
    /// receives may then be lent to it while it polls ([`Clients::lend_fragment`]).
    pub fragments: Option<Channel>,
}

/// Fragments of large receives not lent to clients that take them, by reason (they were
/// written by the engine instead).
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct Unlent {
    /// The client was not polling (it computes, or sleeps).
    pub not_polling: u64,
    /// It held all its lease slots.
    pub slots_full: u64,
    /// The agent had lent all it may (`LeaseBudget`).
    pub budget: u64,
}

/// Client memory by slot.
pub struct Clients {
    slots: Vec<Option<ClientMem>>,
    next_token: u32,
    /// Frames lent over all clients, and how many may be.
    pub budget: LeaseBudget,
    pub unlent: Unlent,
    /// Fragments of large messages may be lent (`--lend-large`).
    pub lend_large: bool,
}

/// Leases a client may hold when a fragment is lent to it: the rest of its slots stay for
/// small messages, and a rank that copies slower than frames arrive holds few (its receive
/// completes only once it has copied what it holds).
const FRAGMENTS_HELD_MAX: usize = 32;

impl Default for Clients {
    fn default() -> Self {
        Clients {
            slots: Vec::new(),
            next_token: 0,
            budget: LeaseBudget { max: 0, held: 0 },
            unlent: Unlent::default(),
            lend_large: false,
        }
    }
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

    /// Forgets client `slot`; the frames it held go back to the pool.
    pub fn remove(&mut self, slot: u32) -> Option<ClientMem> {
        let m = self.slots.get_mut(slot as usize).and_then(Option::take)?;
        self.budget.held -= m.leases.held();
        Some(m)
    }

    /// Lends `frame` (its payload at `off` of the receive memory) to the client of `b`, a
    /// receive buffer whose client takes leases and whose operation is armed; gives the
    /// frame back when it may not (then it is copied).
    pub fn lend(&mut self, b: &BufRef, frame: RxFrame, off: u64) -> Result<(), RxFrame> {
        if b.region & LEASE == 0 || self.budget.held >= self.budget.max {
            return Err(frame);
        }
        let (slot, token) = slot_token(b.region);
        let Some(m) = self.slots.get_mut(slot).and_then(Option::as_mut) else {
            return Err(frame);
        };
        if !m.armed.contains_key(&token) {
            return Err(frame);
        }
        m.leases.lend(token, frame, off)?;
        self.budget.held += 1;
        Ok(())
    }

    /// Lends `frame`, whose `len` payload bytes lie at `rx_off` of the receive memory and
    /// belong at `off` of `b`, a direct receive buffer, to its client instead of writing them
    /// there: only to a client that maps the receive memory and polls now (it copies them
    /// while it waits), while its operation is armed, within its lease slots and the agent's
    /// budget. Gives the frame back when it may not (then it is written as before).
    pub fn lend_fragment(
        &mut self,
        b: &BufRef,
        off: u64,
        frame: RxFrame,
        rx_off: u64,
        len: u32,
    ) -> Result<(), RxFrame> {
        if b.region & DIRECT == 0 || !self.lend_large {
            return Err(frame);
        }
        let (slot, token) = slot_token(b.region);
        let Some(m) = self.slots.get_mut(slot).and_then(Option::as_mut) else {
            return Err(frame);
        };
        let (Some(ch), Some(&(desc, user))) = (&m.fragments, m.armed.get(&token)) else {
            return Err(frame);
        };
        let polled = ch.polled();
        if polled == 0 {
            // A client that never polled in a wait (or cannot read the frames).
            return Err(frame);
        }
        if tigon_shm::signals::monotonic_ns().saturating_sub(polled) >= POLLED_WITHIN_NS {
            self.unlent.not_polling += 1;
            return Err(frame);
        }
        if self.budget.held >= self.budget.max {
            self.unlent.budget += 1;
            return Err(frame);
        }
        if m.leases.held() >= FRAGMENTS_HELD_MAX {
            self.unlent.slots_full += 1;
            return Err(frame);
        }
        let id = match m.leases.lend_now(frame) {
            Ok(id) => id,
            Err(frame) => {
                self.unlent.slots_full += 1;
                return Err(frame);
            }
        };
        let f = Fragment {
            desc,
            len,
            user,
            msg_off: off,
            rx_off,
        };
        if ch.lend_fragment(id, &f).is_err() {
            // A client that broke its ring gets nothing more (it is disconnected when the
            // engine next reads its rings).
            return Err(m.leases.unlend(id).expect("just lent"));
        }
        self.budget.held += 1;
        Ok(())
    }

    /// The lease taken for the operation `token` of client `slot`, as its completion names
    /// it: (1 + lease, offset), or (0, 0).
    pub fn take_lease(&mut self, slot: u32, token: u32) -> (u32, u64) {
        self.slots
            .get_mut(slot as usize)
            .and_then(Option::as_mut)
            .and_then(|m| m.leases.take_pending(token))
            .map_or((0, 0), |(id, off)| (id + 1, off))
    }

    /// Client `slot` gives lease `id` back.
    pub fn give_back(&mut self, slot: u32, id: u32) -> Result<(), String> {
        let m = self
            .slots
            .get_mut(slot as usize)
            .and_then(Option::as_mut)
            .ok_or("no such client")?;
        m.leases.give_back(id)?;
        self.budget.held -= 1;
        Ok(())
    }

    /// A new token for the operation in descriptor `desc` of client `slot` (tagged `user`
    /// by the client), armed: its buffers resolve until [`Clients::disarm`]. Tokens are
    /// agent-wide (a successor in the slot never holds a departed client's) and skip those
    /// still armed when the counter wraps.
    pub fn arm(&mut self, slot: u32, desc: u32, user: u64) -> u32 {
        let Some(m) = self.slots.get_mut(slot as usize).and_then(Option::as_mut) else {
            return 0;
        };
        loop {
            self.next_token = self.next_token.wrapping_add(1) & TOKEN_MASK;
            if self.next_token != 0 && !m.armed.contains_key(&self.next_token) {
                m.armed.insert(self.next_token, (desc, user));
                return self.next_token;
            }
        }
    }

    /// The operation `token` of client `slot` is over (or abandoned): its buffers no longer
    /// resolve.
    pub fn disarm(&mut self, slot: u32, token: u32) {
        if let Some(m) = self.slots.get_mut(slot as usize).and_then(Option::as_mut) {
            m.armed.remove(&token);
        }
    }

    /// Whether a reference in `region` may still be used.
    pub fn armed(&self, region: u64) -> bool {
        let (slot, token) = slot_token(region);
        self.slots
            .get(slot)
            .and_then(Option::as_ref)
            .is_some_and(|m| m.armed.contains_key(&token))
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
        let (slot, token) = slot_token(b.region);
        let m = self
            .slots
            .get(slot)
            .and_then(Option::as_ref)
            .ok_or_else(|| CopyError("the client of this buffer is gone".into()))?;
        if !m.armed.contains_key(&token) {
            return Err(CopyError(
                "the operation of this buffer is over or abandoned".into(),
            ));
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn client(pid: i32) -> ClientMem {
        ClientMem {
            armed: FastMap::default(),
            region: Arc::new(Region::create("memory-test", 4096, false).unwrap()),
            pid,
            ext: None,
            leases: Leases::default(),
            fragments: None,
        }
    }

    /// A received frame is lent only for a receive whose client takes leases, while its
    /// operation is armed and within the agent's budget; the completion names it once; a
    /// client that leaves gives back what it held.
    #[test]
    fn frames_are_lent_within_bounds_and_given_back() {
        let mut c = Clients {
            budget: LeaseBudget { max: 2, held: 0 },
            ..Clients::default()
        };
        c.insert(1, client(100));
        let t = c.arm(1, 0, 0);
        let buf = Payload::Buffer {
            offset: 128,
            len: 64,
        };
        let lease = Payload::Lease {
            offset: 128,
            len: 64,
        };
        let frame = || RxFrame::Flat(vec![1; 64]);
        assert!(
            c.lend(&bufref(1, t, buf), frame(), 0).is_err(),
            "no leases asked"
        );
        assert!(c.lend(&bufref(1, t, lease), frame(), 4096).is_ok());
        assert!(
            c.resolve(&bufref(1, t, lease), 0, 64).is_ok(),
            "still its buffer"
        );
        assert_eq!(c.take_lease(1, t), (1, 4096));
        assert_eq!(c.take_lease(1, t), (0, 0), "named once");
        let u = c.arm(1, 0, 0);
        assert!(c.lend(&bufref(1, u, lease), frame(), 0).is_ok());
        let w = c.arm(1, 0, 0);
        assert!(c.lend(&bufref(1, w, lease), frame(), 0).is_err(), "budget");
        assert_eq!(c.budget.held, 2);
        assert!(c.give_back(1, 0).is_ok());
        assert!(c.give_back(1, 0).is_err(), "given back twice");
        assert_eq!(c.budget.held, 1);
        c.disarm(1, u);
        let v = c.arm(1, 0, 0);
        c.disarm(1, v);
        assert!(
            c.lend(&bufref(1, v, lease), frame(), 0).is_err(),
            "disarmed"
        );
        c.remove(1);
        assert_eq!(c.budget.held, 0, "the departed client's frame went back");
    }

    /// A reference resolves while its operation is armed, and never after: not once it is
    /// disarmed (completed or abandoned), not for a client that took over the slot.
    #[test]
    fn references_resolve_only_while_their_operation_is_armed() {
        let mut c = Clients::default();
        c.insert(3, client(100));
        let t = c.arm(3, 0, 0);
        let direct = bufref(
            3,
            t,
            Payload::Direct {
                addr: 0x1000,
                len: 64,
            },
        );
        let chan = bufref(
            3,
            t,
            Payload::Buffer {
                offset: 128,
                len: 64,
            },
        );
        assert!(matches!(
            c.resolve(&direct, 8, 8),
            Ok(Target::Direct(100, 0x1008))
        ));
        assert!(matches!(
            c.resolve(&chan, 0, 64),
            Ok(Target::Channel(_, 128))
        ));
        assert!(c.resolve(&chan, 1, 64).is_err(), "overrun");
        let u = c.arm(3, 0, 0);
        assert_ne!(t, u);
        c.disarm(3, t);
        assert!(!c.armed(direct.region));
        assert!(c.resolve(&direct, 0, 1).is_err());
        assert!(c.resolve(&chan, 0, 1).is_err());
        // The other operation of that client is unaffected.
        let other = bufref(
            3,
            u,
            Payload::Direct {
                addr: 0x2000,
                len: 4,
            },
        );
        assert!(c.resolve(&other, 0, 4).is_ok());
        // The client leaves, another takes its slot: the old reference does not resolve in it.
        c.remove(3);
        c.insert(3, client(200));
        assert!(c.resolve(&other, 0, 4).is_err());
        let v = c.arm(3, 0, 0);
        assert!(v != u && v != t, "tokens are not reused across clients");
        assert!(
            c.arm(9, 0, 0) == 0
                && !c.armed(bufref(9, 0, Payload::Direct { addr: 0, len: 0 }).region)
        );
    }
}
