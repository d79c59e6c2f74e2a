//! Serving clients from the engine core: requests popped from each channel become engine
//! operations; engine completions go back on the channel under the same descriptor indices.
//!
//! One request's walk: popped from the client's ring with its descriptor index, read once
//! into a [`Request`](tigon_engine::channel::Request), its buffer resolved
//! ([`Channel::take_request`], [`Served::requests`]) → an engine operation ([`ops::start`]) →
//! later, its outcome as a [`Completion`] pushed on the completion ring under that index
//! ([`Served::completions`]).
//!
//! Clients are untrusted. A request is copied out of shared memory once and validated
//! before anything uses it; an index out of range, an index already in flight, an unknown
//! operation, a corrupted ring, or a buffer reference outside the client's memory
//! disconnects that client, and the agent goes on serving the others.

use super::memory::{self, ClientCopy, ClientMem};
use super::ops::{self, Started};
use std::sync::Arc;
use tigon_engine::channel::{Channel, Completion, CompletionEntry, Request, Submitted, status};
use tigon_engine::fasthash::FastMap;
use tigon_engine::{CopyEngine, EndpointAddr, Engine, Link, ReqId};

struct InFlight {
    user: u32,
    req: Option<ReqId>,
    /// Its buffers' token (see `memory`): disarmed when it completes or is abandoned.
    token: u32,
}

struct Client {
    generation: u32,
    ch: Channel,
    ep: u16,
    inflight: Vec<Option<InFlight>>,
    /// Completions written but not on the ring yet: those of one pass go on it together
    /// (the client sees a receive and the synchronous send it matched complete at once), and
    /// wait here while the ring is full (cannot happen with a correct client).
    outbox: Vec<CompletionEntry>,
    /// Completions queued since the client was last woken.
    pushed: bool,
}

/// Counters the agent reports.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct ServeStats {
    pub clients: u64,
    pub clients_attached_total: u64,
    /// Attaches refused because `--max-clients` ranks were attached already.
    pub refused_max_clients: u64,
    pub clients_reclaimed: u64,
    pub clients_disconnected_garbage: u64,
    pub requests: u64,
    pub completions: u64,
    pub ring_full: u64,
    pub inflight: u64,
    /// Futex wake-ups of clients blocked waiting for completions.
    pub client_wakeups: u64,
    /// Payload bytes of receives completed (the bytes delivered to ranks).
    pub payload_bytes_received: u64,
    /// Payload bytes departed clients had copied with their CPU (see [`Served::client_copied`]).
    pub departed_client_copied: u64,
    /// Receives completed with their frame lent to the client (read where it arrived).
    pub leases: u64,
}

/// Every client of the agent.
pub struct Served {
    clients: Vec<Option<Client>>,
    by_req: FastMap<ReqId, (u32, u32)>,
    next_generation: u32,
    pub stats: ServeStats,
    /// Clients disconnected for misbehaving since the last look: (handle, reason).
    pub evicted: Vec<(u64, String)>,
    /// Clients served at once (`--max-clients`); one more is refused.
    pub max_clients: usize,
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
    /// No client yet; `max_clients` served at once.
    pub fn new(max_clients: usize) -> Served {
        // No `Default`: a limit of 0 would refuse every client.
        Served {
            clients: Vec::new(),
            by_req: FastMap::default(),
            next_generation: 0,
            stats: ServeStats::default(),
            evicted: Vec::new(),
            max_clients,
        }
    }

    /// Whether any client is attached.
    pub fn has_clients(&self) -> bool {
        self.clients.iter().any(Option::is_some)
    }

    /// Adds a client: opens its endpoint and registers its memory (`maps_rx`: it was given
    /// the receive memory to map, so frames may be lent to it). Returns (handle, address):
    /// the handle names this client only, even after its slot is reused (see [`handle`]).
    pub fn attach<L: Link, C: CopyEngine<L::Frame> + ClientCopy>(
        &mut self,
        eng: &mut Engine<L, C>,
        ch: Channel,
        pid: i32,
        ext: Option<Arc<tigon_pmd::ExtMem>>,
        maps_rx: bool,
    ) -> Result<(u64, EndpointAddr), String> {
        let attached = self.clients.iter().filter(|c| c.is_some()).count();
        if attached >= self.max_clients {
            self.stats.refused_max_clients += 1;
            let ranks = if attached == 1 { "rank" } else { "ranks" };
            return Err(format!(
                "this node's agent serves {attached} {ranks} already, as many as its \
                 max-clients allows: raise \"max-clients\" (--max-clients) or run fewer ranks \
                 on this node"
            ));
        }
        let addr = eng.open_endpoint(None).map_err(|e| e.to_string())?;
        // Before the client hears of its channel: it reads this once, when it attaches.
        ch.set_lends_fragments(maps_rx && eng.copy_engine_mut().clients().lend_large);
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
                armed: FastMap::default(),
                region: ch.region.clone(),
                pid,
                ext,
                leases: Default::default(),
                fragments: maps_rx.then(|| ch.clone()),
            },
        );
        let n = ch.geo.n_desc as usize;
        let c = Client {
            generation,
            ch,
            ep: addr.ep,
            inflight: (0..n).map(|_| None).collect(),
            outbox: Vec::new(),
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
        self.stats.departed_client_copied += c.ch.client_copied();
        let held = c.inflight.iter().filter(|f| f.is_some()).count() as u64;
        self.stats.inflight -= held;
        eng.copy_engine_mut().clients().remove(slot);
        self.by_req.retain(|_, (s, _)| *s != slot);
        self.stats.clients -= 1;
        self.stats.clients_reclaimed += 1;
    }

    /// Payload bytes the clients, attached and departed, copied with their own CPUs (what
    /// they report in their channel header).
    pub fn client_copied(&self) -> u64 {
        let attached: u64 = self
            .clients
            .iter()
            .flatten()
            .map(|c| c.ch.client_copied())
            .sum();
        attached + self.stats.departed_client_copied
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

    /// Takes requests from every client's ring (and the leases it gives back); returns how
    /// many.
    pub fn requests<L: Link, C: CopyEngine<L::Frame> + ClientCopy>(
        &mut self,
        eng: &mut Engine<L, C>,
        burst: usize,
    ) -> usize {
        let mut n = 0;
        for slot in 0..self.clients.len() as u32 {
            if let Err(why) = self.give_backs(eng, slot) {
                self.evict(eng, slot, why);
                continue;
            }
            for _ in 0..burst {
                let Some(c) = self.clients[slot as usize].as_ref() else {
                    break;
                };
                let (idx, submitted) = match c.ch.take_request() {
                    Ok(Some(x)) => x,
                    Ok(None) => break,
                    Err(e) => {
                        self.evict(eng, slot, e.to_string());
                        break;
                    }
                };
                n += 1;
                self.stats.requests += 1;
                if let Err(why) = self.request(eng, slot, idx, submitted) {
                    self.evict(eng, slot, why);
                    break;
                }
            }
        }
        if n > 0 {
            self.publish();
            self.wake_clients();
        }
        n
    }

    /// The leases client `slot` gave back: their frames go back to the pool.
    fn give_backs<L: Link, C: CopyEngine<L::Frame> + ClientCopy>(
        &mut self,
        eng: &mut Engine<L, C>,
        slot: u32,
    ) -> Result<(), String> {
        let Some(c) = self.clients[slot as usize].as_ref() else {
            return Ok(());
        };
        // At most a ring's worth per pass (the ring holds no more).
        for _ in 0..tigon_engine::channel::LEASE_SLOTS {
            match c.ch.leases.pop() {
                Ok(Some(id)) => eng.copy_engine_mut().clients().give_back(slot, id)?,
                Ok(None) => break,
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(())
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
        submitted: Result<Submitted, String>,
    ) -> Result<(), String> {
        let c = self.clients[slot as usize].as_mut().expect("present");
        let Submitted { user, request } = submitted.map_err(|e| invalid(&e))?;
        if c.inflight[idx as usize].is_some() {
            return Err(invalid(&format!("descriptor {idx} submitted twice")));
        }
        if let Request::Cancel {
            target,
            abandon: true,
        } = request
        {
            // The target's tag is the one this request carries (as for a cancel).
            let status = match c.inflight.get(target as usize) {
                Some(Some(t)) if t.user == user => {
                    eng.copy_engine_mut().clients().disarm(slot, t.token);
                    status::OK
                }
                _ => status::NO_MATCH,
            };
            c.inflight[idx as usize] = Some(InFlight {
                user,
                req: None,
                token: 0,
            });
            self.stats.inflight += 1;
            self.finish(eng, slot, idx, Completion::status(status));
            return Ok(());
        }
        let token = eng
            .copy_engine_mut()
            .clients()
            .arm(slot, idx, u64::from(user));
        c.inflight[idx as usize] = Some(InFlight {
            user,
            req: None,
            token,
        });
        self.stats.inflight += 1;
        let inflight = &c.inflight;
        let started = ops::start(
            eng,
            c.ep,
            request,
            |payload| memory::bufref(slot, token, payload),
            // A cancel names a descriptor of this client, with the tag it was submitted with.
            |target| match inflight.get(target as usize) {
                Some(Some(t)) if t.user == user => t.req,
                _ => None,
            },
        );
        match started {
            Started::Pending(r) => {
                self.by_req.insert(r, (slot, idx));
                if let Some(f) = c.inflight[idx as usize].as_mut() {
                    f.req = Some(r);
                }
            }
            Started::Done(done) => self.finish(eng, slot, idx, done),
        }
        Ok(())
    }

    /// Queues the result of the request under descriptor index `idx` for its client's
    /// completion ring. From here on nothing of the agent touches the request's buffers.
    fn finish<L: Link, C: CopyEngine<L::Frame> + ClientCopy>(
        &mut self,
        eng: &mut Engine<L, C>,
        slot: u32,
        idx: u32,
        done: Completion,
    ) {
        let Some(c) = self.clients.get_mut(slot as usize).and_then(Option::as_mut) else {
            return;
        };
        let Some(f) = c.inflight[idx as usize].take() else {
            return;
        };
        let clients = eng.copy_engine_mut().clients();
        clients.disarm(slot, f.token);
        // A received frame lent to the client: the completion says where its payload is.
        let (lease, lease_off) = clients.take_lease(slot, f.token);
        self.stats.inflight -= 1;
        self.stats.completions += 1;
        if done.status == status::OK {
            // Sends and probes complete with nothing received.
            self.stats.payload_bytes_received += done.received;
        }
        // The client's own tag, as its request carried it (kept here since: the client may
        // have reused the request's ring slot meanwhile).
        let done = Completion {
            user: f.user,
            lease,
            lease_off,
            ..done
        };
        if lease != 0 {
            self.stats.leases += 1;
        }
        c.outbox.push(done.entry(idx));
    }

    /// Puts every client's finished descriptors on its completion ring, each client's all at
    /// once.
    fn publish(&mut self) {
        for c in self.clients.iter_mut().flatten() {
            if c.outbox.is_empty() {
                continue;
            }
            let n = c.ch.publish(&c.outbox).unwrap_or(0);
            if n < c.outbox.len() {
                self.stats.ring_full += 1;
            }
            c.outbox.drain(..n);
            c.pushed |= n > 0;
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
            // Operations of a departed client find no one to tell.
            if let Some((slot, idx)) = self.by_req.remove(&comp.req) {
                self.finish(eng, slot, idx, ops::completed(comp.result));
            }
        }
        self.publish();
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
