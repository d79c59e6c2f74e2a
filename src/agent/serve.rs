//! Serving clients from the engine core: requests popped from each channel become engine
//! operations; engine completions are written back into the same descriptors.
//!
//! Clients are untrusted. A descriptor is copied out of shared memory once and validated
//! before anything uses it; an index out of range, an index already in flight, an unknown
//! operation, a corrupted ring, or a buffer reference outside the client's memory
//! disconnects that client, and the agent goes on serving the others.

use super::memory::{self, ClientMem, Clients};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use tigon_engine::channel::{self, Channel, Desc, NO_DATA, Op, status};
use tigon_engine::{
    CopyEngine, EndpointAddr, Engine, Error, Link, MatchSpec, Outcome, ReqId, SendMode,
};

/// Copy engines that keep the table of client memory.
pub trait ClientCopy {
    fn clients(&mut self) -> &mut Clients;
}

struct InFlight {
    user: u64,
    req: Option<ReqId>,
}

struct Client {
    generation: u32,
    ch: Channel,
    ep: u16,
    inflight: Vec<Option<InFlight>>,
    /// Completions the ring could not take yet (cannot happen with a correct client).
    backlog: VecDeque<u32>,
    /// Completions queued since the client was last woken.
    pushed: bool,
}

/// Counters the agent reports.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct ServeStats {
    pub clients: u64,
    pub clients_attached_total: u64,
    pub clients_reclaimed: u64,
    pub clients_disconnected_garbage: u64,
    pub requests: u64,
    pub completions: u64,
    pub ring_full: u64,
    pub inflight: u64,
    /// Futex wake-ups of clients blocked waiting for completions.
    pub client_wakeups: u64,
}

/// Every client of the agent.
#[derive(Default)]
pub struct Served {
    clients: Vec<Option<Client>>,
    by_req: HashMap<ReqId, (u32, u32)>,
    next_generation: u32,
    pub stats: ServeStats,
    /// Clients disconnected for misbehaving since the last look: (handle, reason).
    pub evicted: Vec<(u64, String)>,
}

/// A client's name between the engine and the control thread: its slot and the generation
/// it was attached with.
fn handle(slot: u32, generation: u32) -> u64 {
    (generation as u64) << 32 | slot as u64
}

fn invalid(why: &str) -> String {
    format!("invalid request: {why}")
}

impl Served {
    /// Adds a client: opens its endpoint and registers its memory. Returns (handle, address):
    /// the handle names this client only, even after its slot is reused (see [`handle`]).
    pub fn attach<L: Link, C: CopyEngine<L::Frame> + ClientCopy>(
        &mut self,
        eng: &mut Engine<L, C>,
        ch: Channel,
        pid: i32,
        ext: Option<Arc<tigon_pmd::ExtMem>>,
    ) -> Result<(u64, EndpointAddr), String> {
        let addr = eng.open_endpoint(None).map_err(|e| e.to_string())?;
        let slot = self
            .clients
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.clients.len()) as u32;
        self.next_generation = self.next_generation.wrapping_add(1);
        let generation = self.next_generation;
        eng.copy_engine_mut().clients().insert(
            slot,
            ClientMem {
                generation,
                region: ch.region.clone(),
                pid,
                ext,
            },
        );
        let n = ch.geo.n_desc as usize;
        let c = Client {
            generation,
            ch,
            ep: addr.ep,
            inflight: (0..n).map(|_| None).collect(),
            backlog: VecDeque::new(),
            pushed: false,
        };
        if self.clients.len() <= slot as usize {
            self.clients.resize_with(slot as usize + 1, || None);
        }
        self.clients[slot as usize] = Some(c);
        self.stats.clients += 1;
        self.stats.clients_attached_total += 1;
        Ok((handle(slot, generation), addr))
    }

    /// Removes the client `h` names, if it is still attached (its slot may since have been
    /// evicted and given to another client, whom this must not touch).
    pub fn detach<L: Link, C: CopyEngine<L::Frame> + ClientCopy>(
        &mut self,
        eng: &mut Engine<L, C>,
        h: u64,
    ) {
        let slot = h as u32;
        let current = self.clients.get(slot as usize).and_then(Option::as_ref);
        if current.is_some_and(|c| handle(slot, c.generation) == h) {
            self.detach_slot(eng, slot);
        }
    }

    /// Removes a client and everything it had in flight.
    fn detach_slot<L: Link, C: CopyEngine<L::Frame> + ClientCopy>(
        &mut self,
        eng: &mut Engine<L, C>,
        slot: u32,
    ) {
        let Some(c) = self.clients.get_mut(slot as usize).and_then(Option::take) else {
            return;
        };
        // Closing the endpoint fails its operations; their completions find no client.
        eng.close_endpoint(c.ep);
        let held = c.inflight.iter().filter(|f| f.is_some()).count() as u64;
        self.stats.inflight -= held;
        eng.copy_engine_mut().clients().remove(slot);
        self.by_req.retain(|_, (s, _)| *s != slot);
        self.stats.clients -= 1;
        self.stats.clients_reclaimed += 1;
    }

    pub fn client_count(&self) -> usize {
        self.clients.iter().filter(|c| c.is_some()).count()
    }

    /// Publishes `state` to every client (shutdown notice).
    pub fn set_state(&self, state: u32) {
        for c in self.clients.iter().flatten() {
            c.ch.set_agent_state(state);
            c.ch.wake_client();
        }
    }

    /// Takes requests from every client's ring; returns how many.
    pub fn requests<L: Link, C: CopyEngine<L::Frame> + ClientCopy>(
        &mut self,
        eng: &mut Engine<L, C>,
        burst: usize,
    ) -> usize {
        let mut n = 0;
        for slot in 0..self.clients.len() as u32 {
            for _ in 0..burst {
                let Some(c) = self.clients[slot as usize].as_ref() else {
                    break;
                };
                let idx = match c.ch.requests.pop() {
                    Ok(Some(i)) => i,
                    Ok(None) => break,
                    Err(e) => {
                        self.evict(eng, slot, e.to_string());
                        break;
                    }
                };
                n += 1;
                self.stats.requests += 1;
                if let Err(why) = self.request(eng, slot, idx) {
                    self.evict(eng, slot, why);
                    break;
                }
            }
        }
        if n > 0 {
            self.wake_clients();
        }
        n
    }

    fn evict<L: Link, C: CopyEngine<L::Frame> + ClientCopy>(
        &mut self,
        eng: &mut Engine<L, C>,
        slot: u32,
        why: String,
    ) {
        log::warn!("client {slot}: {why}; disconnecting it");
        self.stats.clients_disconnected_garbage += 1;
        if let Some(c) = self.clients.get(slot as usize).and_then(Option::as_ref) {
            self.evicted.push((handle(slot, c.generation), why));
        }
        self.detach_slot(eng, slot);
    }

    fn request<L: Link, C: CopyEngine<L::Frame> + ClientCopy>(
        &mut self,
        eng: &mut Engine<L, C>,
        slot: u32,
        idx: u32,
    ) -> Result<(), String> {
        let c = self.clients[slot as usize].as_mut().expect("present");
        let d = c.ch.read_desc(idx).map_err(|e| invalid(&e.to_string()))?;
        if c.inflight[idx as usize].is_some() {
            return Err(invalid(&format!("descriptor {idx} submitted twice")));
        }
        let op =
            Op::from_u8(d.op).ok_or_else(|| invalid(&format!("unknown operation {}", d.op)))?;
        let (generation, ep) = (c.generation, c.ep);
        c.inflight[idx as usize] = Some(InFlight {
            user: d.user,
            req: None,
        });
        self.stats.inflight += 1;
        let buf = |d: &Desc, c: &Client| -> Result<tigon_engine::BufRef, String> {
            if d.flags & channel::FLAG_DIRECT != 0 {
                return Ok(memory::bufref(slot, generation, true, d.addr, d.len));
            }
            if d.data_idx == NO_DATA || d.len > c.ch.geo.data_size as u64 {
                return Err(invalid(&format!(
                    "{}-byte payload without a fitting data buffer",
                    d.len
                )));
            }
            let off =
                c.ch.data_offset(d.data_idx)
                    .map_err(|e| invalid(&e.to_string()))?;
            Ok(memory::bufref(slot, generation, false, off as u64, d.len))
        };
        let spec = MatchSpec {
            bits: d.match_bits,
            mask: d.mask,
            source: (d.flags & channel::FLAG_ANY_SOURCE == 0).then_some(d.rank),
        };
        let c = self.clients[slot as usize].as_ref().expect("present");
        let started = match op {
            Op::Send => {
                let dest = d.peer.ok_or_else(|| invalid("send without destination"))?;
                let mode = if d.flags & channel::FLAG_SYNC != 0 {
                    SendMode::Synchronous
                } else {
                    SendMode::Standard
                };
                eng.isend(ep, dest, d.match_bits, d.rank, buf(&d, c)?, mode)
            }
            Op::Recv => eng.irecv(ep, spec, buf(&d, c)?),
            Op::MRecv => eng.imrecv(
                ep,
                tigon_engine::MessageHandle::from_u64(d.handle),
                buf(&d, c)?,
            ),
            Op::Probe | Op::MProbe => {
                let found = if op == Op::Probe {
                    eng.iprobe(ep, spec).map(|o| o.map(|i| (i, 0)))
                } else {
                    eng.improbe(ep, spec)
                        .map(|o| o.map(|(h, i)| (i, h.as_u64())))
                };
                let mut out = d;
                match found {
                    Ok(Some((info, h))) => {
                        out.status = status::OK;
                        out.info_rank = info.src_rank;
                        out.info_bits = info.match_bits;
                        out.info_len = info.len;
                        out.handle = h;
                    }
                    Ok(None) => out.status = status::NO_MATCH,
                    Err(_) => out.status = status::INVALID,
                }
                self.finish(slot, idx, out);
                return Ok(());
            }
            Op::Cancel => {
                let target = d.handle as u32;
                let mut out = d;
                out.status = status::NO_MATCH;
                let c = self.clients[slot as usize].as_ref().expect("present");
                if let Some(Some(t)) = c.inflight.get(target as usize)
                    && t.user == d.user
                    && let Some(r) = t.req
                    && eng.cancel(r)
                {
                    out.status = status::OK;
                }
                self.finish(slot, idx, out);
                return Ok(());
            }
        };
        match started {
            Ok(r) => {
                self.by_req.insert(r, (slot, idx));
                if let Some(Some(f)) = self.clients[slot as usize]
                    .as_mut()
                    .map(|c| &mut c.inflight[idx as usize])
                {
                    f.req = Some(r);
                }
            }
            Err(e) => {
                let mut out = d;
                out.status = error_status(&e);
                self.finish(slot, idx, out);
            }
        }
        Ok(())
    }

    /// Writes the result of descriptor `idx` and hands it back to its client.
    fn finish(&mut self, slot: u32, idx: u32, d: Desc) {
        let Some(c) = self.clients.get_mut(slot as usize).and_then(Option::as_mut) else {
            return;
        };
        if c.inflight[idx as usize].take().is_none() {
            return;
        }
        self.stats.inflight -= 1;
        self.stats.completions += 1;
        if c.ch.write_desc(idx, &d).is_err() {
            return;
        }
        if !c.backlog.is_empty() || !matches!(c.ch.completions.push(idx), Ok(true)) {
            self.stats.ring_full += 1;
            c.backlog.push_back(idx);
        } else {
            c.pushed = true;
        }
    }

    /// Moves engine completions to their clients; returns how many.
    pub fn completions<L: Link, C: CopyEngine<L::Frame> + ClientCopy>(
        &mut self,
        eng: &mut Engine<L, C>,
    ) -> usize {
        let mut n = 0;
        while let Some(comp) = eng.pop_completion() {
            n += 1;
            let Some((slot, idx)) = self.by_req.remove(&comp.req) else {
                continue;
            };
            let Some(c) = self.clients.get(slot as usize).and_then(Option::as_ref) else {
                continue;
            };
            let Ok(mut d) = c.ch.read_desc(idx) else {
                continue;
            };
            // Keep the client's own tag even if it scribbled over the descriptor meanwhile.
            if let Some(Some(f)) = c.inflight.get(idx as usize) {
                d.user = f.user;
            }
            match comp.result {
                Ok(Outcome::Sent) => d.status = status::OK,
                Ok(Outcome::Received {
                    info,
                    received,
                    truncated,
                }) => {
                    d.status = status::OK;
                    d.info_rank = info.src_rank;
                    d.info_bits = info.match_bits;
                    d.info_len = info.len;
                    d.received = received;
                    d.truncated = truncated;
                }
                Err(e) => d.status = error_status(&e),
            }
            self.finish(slot, idx, d);
        }
        for c in self.clients.iter_mut().flatten() {
            while let Some(&i) = c.backlog.front() {
                if !matches!(c.ch.completions.push(i), Ok(true)) {
                    break;
                }
                c.backlog.pop_front();
                c.pushed = true;
            }
        }
        self.wake_clients();
        n
    }

    /// Wakes clients blocked on completions queued for them since the last call.
    fn wake_clients(&mut self) {
        for c in self.clients.iter_mut().flatten() {
            if std::mem::take(&mut c.pushed) && c.ch.wake_client() {
                self.stats.client_wakeups += 1;
            }
        }
    }

    /// Marks the engine asleep (or awake) in every channel. Going to sleep, it returns
    /// whether a request arrived meanwhile (then it must not sleep).
    pub fn set_asleep(&self, asleep: bool) -> bool {
        for c in self.clients.iter().flatten() {
            c.ch.set_engine_asleep(asleep);
        }
        asleep
            && self
                .clients
                .iter()
                .flatten()
                .any(|c| !c.ch.requests.is_empty())
    }

    /// Bumps every channel's heartbeat.
    pub fn beat(&self) {
        for c in self.clients.iter().flatten() {
            c.ch.beat();
        }
    }
}

fn error_status(e: &Error) -> u32 {
    match e {
        Error::PeerUnreachable(_) => status::PEER_UNREACHABLE,
        Error::PeerRestarted(_) => status::PEER_RESTARTED,
        Error::Copy(_) => status::COPY_FAILED,
        Error::Cancelled => status::CANCELLED,
        Error::EndpointClosed => status::SHUTDOWN,
        Error::Invalid(_) => status::INVALID,
    }
}
