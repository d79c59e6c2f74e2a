//! The client's half of the channel, under the client's lock: free descriptors and data
//! buffers, the operations in flight, submitting requests and taking completions, and noticing
//! that the agent is gone.

use crate::error::{Error, Result, io_err, status_message};
use crate::ops::{Done, Notified, Req, Status};
use crate::wait::Backoff;
use std::collections::VecDeque;
use std::io::{self, Read};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};
use tigon_engine::channel::{self, Channel, Completion, Desc, Op, status};
use tigon_shm::signals::monotonic_ns;
use tigon_shm::wake::EventFd;
use tigon_shm::{ReadOnlyRegion, RecvBuf};

const LIVENESS_EVERY: Duration = Duration::from_millis(20);
/// Empty progress calls per look at the clock for `LIVENESS_EVERY`.
const CLOCK_EVERY: u32 = 4;
/// Leases given back on the lease ring at once, at most.
const GIVE_BACK_BATCH: usize = 32;

pub(crate) enum Pending {
    Send {
        data: Option<u32>,
        _keep: Option<Vec<u8>>,
    },
    Recv {
        data: Option<u32>,
        keep: Option<Vec<u8>>,
        /// Memory of this process the receive writes (see [`crate::RecvInto::Raw`]); `None`
        /// once abandoned: lent fragments are then given back uncopied.
        raw: Option<RecvBuf>,
        /// The payload of a channel receive stays in its buffer for the caller to take.
        lease: bool,
    },
    Probe,
    Cancel,
}

pub(crate) struct Slot {
    pub(crate) generation: u32,
    /// Completion goes to the ready queue under this context instead of waiting for `test`.
    pub(crate) ctx: Option<u64>,
    pub(crate) what: Option<Pending>,
    pub(crate) done: Option<Result<Done>>,
}

pub(crate) struct Inner {
    pub(crate) ch: Channel,
    /// The agent's doorbell, rung when a request is queued while the engine sleeps.
    pub(crate) bell: EventFd,
    pub(crate) sock: UnixStream,
    pub(crate) free_desc: Vec<u32>,
    pub(crate) free_data: Vec<u32>,
    /// Data buffers holding a payload until its [`crate::Lease`] is taken.
    pub(crate) leased: Vec<bool>,
    pub(crate) slots: Vec<Slot>,
    pub(crate) dead: Option<String>,
    pub(crate) last_check: Instant,
    /// Empty progress calls since the clock was last read for `last_check`.
    pub(crate) empty_calls: u32,
    pub(crate) ready: VecDeque<Notified>,
    /// The node's receive memory, mapped read-only: payloads of frames the agent lends.
    pub(crate) rx: Option<ReadOnlyRegion>,
    /// The agent lends this client fragments of large messages (`--lend-large`) and it
    /// can read them: only then is the lent ring polled (twice a progress call otherwise,
    /// for nothing).
    takes_fragments: bool,
}

/// How long a request may wait for a free descriptor while none of the requests in flight
/// completes, before it fails: a minute, far past any wait on a peer that computes, long
/// before a user gives up on a job that hangs.
pub(crate) const DESC_STALL: Duration = Duration::from_secs(60);

impl Inner {
    /// A fresh client state over `ch`: every descriptor and data buffer free.
    pub(crate) fn new(
        ch: Channel,
        bell: EventFd,
        sock: UnixStream,
        rx: Option<ReadOnlyRegion>,
    ) -> Inner {
        let geo = ch.geo;
        let takes_fragments = rx.is_some() && ch.lends_fragments();
        Inner {
            free_desc: (0..geo.n_desc).rev().collect(),
            free_data: (0..geo.n_data).rev().collect(),
            leased: vec![false; geo.n_data as usize],
            slots: (0..geo.n_desc)
                .map(|_| Slot {
                    generation: 0,
                    ctx: None,
                    what: None,
                    done: None,
                })
                .collect(),
            ch,
            bell,
            sock,
            dead: None,
            last_check: Instant::now(),
            empty_calls: 0,
            ready: VecDeque::new(),
            takes_fragments,
            rx,
        }
    }

    pub(crate) fn check_alive(&mut self) -> Result<()> {
        if let Some(m) = &self.dead {
            return Err(Error::AgentGone(m.clone()));
        }
        Ok(())
    }

    pub(crate) fn alloc_data(&mut self) -> Result<Option<u32>> {
        self.check_alive()?;
        Ok(self.free_data.pop())
    }

    pub(crate) fn submit(&mut self, mut d: Desc, what: Pending) -> Result<Req> {
        if let Err(e) = self.check_alive() {
            self.release(&what);
            return Err(e);
        }
        // Started at the first wait only: no clock read for a submit that finds a descriptor.
        let mut backoff: Option<Backoff> = None;
        let idx = loop {
            if let Some(i) = self.free_desc.pop() {
                break i;
            }
            // Every descriptor is in flight: wait for completions (backpressure). Those in
            // flight may all wait on this process's later calls (receives posted before a
            // barrier, synchronous sends before the receiver's turn): then none ever comes,
            // and the wait ends in an error that says so instead of hanging.
            if self.progress() == 0 {
                let b = backoff.get_or_insert_with(Backoff::new);
                if b.waited() >= DESC_STALL {
                    self.release(&what);
                    return Err(Error::Failed {
                        status: status::INVALID,
                        message: format!(
                            "this process has {} requests outstanding, as many as its channel to the agent holds, and none completed for {} s: they wait on its later calls. Raise the agent's `channel-requests`, or post fewer requests at once",
                            self.ch.geo.n_desc,
                            DESC_STALL.as_secs()
                        ),
                    });
                }
                b.idle(&self.ch);
            } else {
                backoff = None;
            }
            if let Err(e) = self.check_alive() {
                self.release(&what);
                return Err(e);
            }
        };
        let slot = &mut self.slots[idx as usize];
        slot.generation = slot.generation.wrapping_add(1);
        slot.what = Some(what);
        slot.done = None;
        slot.ctx = None;
        let generation = slot.generation;
        if d.op != Op::Cancel as u8 {
            d.user = generation;
        }
        // A ring has a slot per descriptor: it cannot be full while we hold a free descriptor.
        match self.ch.submit(idx, &d) {
            Ok(true) => {
                if self.ch.engine_asleep() {
                    self.bell.ring();
                }
                Ok(Req { idx, generation })
            }
            _ => {
                self.kill("request ring corrupted".into());
                Err(Error::AgentGone("request ring corrupted".into()))
            }
        }
    }

    pub(crate) fn release(&mut self, what: &Pending) {
        if let Pending::Send { data: Some(di), .. } | Pending::Recv { data: Some(di), .. } = what {
            self.free_data.push(*di);
        }
    }

    /// Copies a leased payload into `dst` (as much as fits; none with `None`), frees its
    /// buffer, and returns the bytes copied. A lease taken already yields 0.
    pub(crate) fn take_lease(
        &mut self,
        lease: &crate::ops::Lease,
        dst: Option<&mut [u8]>,
    ) -> Result<usize> {
        let di = lease.di;
        match self.leased.get_mut(di as usize) {
            Some(l) if *l => *l = false,
            _ => return Ok(0),
        }
        let mut n = 0;
        let copied = match (dst, lease.rx, &self.rx) {
            // Straight from the frame the agent lent (one copy in all on this side).
            (Some(dst), Some((_, off)), Some(rx)) => {
                n = dst.len().min(lease.len as usize);
                rx.read(off as usize, &mut dst[..n]).map_err(io_err)
            }
            (Some(dst), None, _) => {
                n = dst.len().min(lease.len as usize);
                self.ch
                    .data_offset(di)
                    .and_then(|off| self.ch.region.read(off, &mut dst[..n]))
                    .map_err(io_err)
            }
            // The agent lends frames only to clients that map its receive memory.
            (Some(_), Some(_), None) => Err(Error::Failed {
                status: status::INVALID,
                message: "the agent lent a received frame to a process that cannot read it".into(),
            }),
            (None, ..) => Ok(()),
        };
        self.free_data.push(di);
        if let Some((id, _)) = lease.rx {
            // The frame goes back to the agent (its ring holds every lease we can hold).
            let _ = self.ch.leases.push(id);
        }
        copied?;
        self.ch.count_client_copy(n as u64);
        Ok(n)
    }

    pub(crate) fn take(&mut self, r: Req) -> Result<Option<Done>> {
        let Some(slot) = self.slots.get_mut(r.idx as usize) else {
            return Err(Error::BadRequest);
        };
        if slot.generation != r.generation || slot.what.is_none() {
            return Err(Error::BadRequest);
        }
        let Some(done) = slot.done.take() else {
            self.check_alive()?;
            return Ok(None);
        };
        slot.what = None;
        self.free_desc.push(r.idx);
        done.map(Some)
    }

    pub(crate) fn kill(&mut self, why: String) {
        if self.dead.is_some() {
            return;
        }
        for (i, s) in self.slots.iter_mut().enumerate() {
            if s.what.is_some() && s.done.is_none() {
                let e = Err(Error::AgentGone(why.clone()));
                match s.ctx {
                    Some(ctx) => {
                        s.what = None;
                        self.ready.push_back(Notified {
                            ctx,
                            req: Req {
                                idx: i as u32,
                                generation: s.generation,
                            },
                            result: e,
                        });
                        self.free_desc.push(i as u32);
                    }
                    None => s.done = Some(e),
                }
            }
        }
        self.dead = Some(why);
    }

    /// Takes completions (and copies the fragments lent meanwhile); returns how many of
    /// both.
    pub(crate) fn progress(&mut self) -> usize {
        if self.dead.is_some() {
            return 0;
        }
        let mut n = self.take_fragments();
        loop {
            let (idx, c) = match self.ch.take_completion() {
                Ok(Some(x)) => x,
                Ok(None) => break,
                Err(e) => {
                    self.kill(e.to_string());
                    break;
                }
            };
            // Every fragment the agent lent for it went on the lent ring before its index
            // went on this one: copied before it completes.
            n += 1 + self.take_fragments();
            if let Err(e) = self.complete(idx, &c) {
                self.kill(e);
                break;
            }
        }
        // Whether the agent still lives, every `LIVENESS_EVERY`: the clock read only every
        // `CLOCK_EVERY` empty calls (a wait loop makes millions, each a clock read otherwise:
        // 2 % of a one-way when two ranks share a core and yield to each other).
        if n == 0 {
            self.empty_calls += 1;
            if self.empty_calls >= CLOCK_EVERY {
                self.empty_calls = 0;
                if self.last_check.elapsed() >= LIVENESS_EVERY {
                    self.last_check = Instant::now();
                    self.check_agent();
                }
            }
        }
        n
    }

    /// Copies the fragments of large receives the agent lent (see
    /// `tigon_engine::channel::Fragment`) into their receive buffers and gives the frames
    /// back, in batches; returns how many.
    fn take_fragments(&mut self) -> usize {
        if !self.takes_fragments {
            return 0;
        }
        let Inner { ch, rx, slots, .. } = self;
        let Some(rx) = rx.as_ref() else {
            return 0;
        };
        let (mut n, mut copied, mut given) = (0, 0u64, [0u32; GIVE_BACK_BATCH]);
        let mut broken = None;
        loop {
            let id = match ch.lent.pop() {
                Ok(Some(id)) => id,
                Ok(None) => break,
                Err(e) => {
                    broken = Some(e.to_string());
                    break;
                }
            };
            match ch.fragment(id) {
                Ok(f) => copied += place(rx, slots, &f),
                Err(e) => {
                    broken = Some(format!("the agent lent {e}"));
                    break;
                }
            }
            given[n % GIVE_BACK_BATCH] = id;
            n += 1;
            if n.is_multiple_of(GIVE_BACK_BATCH) {
                // The lease ring holds every lease this client can hold: never full.
                let _ = ch.leases.push_all(&given);
            }
        }
        if n == 0 {
            if let Some(why) = broken {
                self.kill(why);
            }
            return 0;
        }
        let _ = ch.leases.push_all(&given[..n % GIVE_BACK_BATCH]);
        ch.count_client_copy(copied);
        // Copying took a while: still polling, if the caller was before.
        let now = monotonic_ns();
        if now.saturating_sub(ch.polled()) < channel::POLLED_WITHIN_NS {
            ch.mark_polled(now);
        }
        if let Some(why) = broken {
            self.kill(why);
        }
        n
    }

    /// The agent's end of the socket closes when it exits, however it exits.
    fn check_agent(&mut self) {
        let mut b = [0u8; 64];
        match (&self.sock).read(&mut b) {
            Ok(0) => self.kill("the agent closed the connection".into()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => self.kill(format!("control socket: {e}")),
        }
        if self.dead.is_none() && self.ch.agent_state() == channel::STATE_SHUTDOWN {
            self.kill("the agent is shutting down".into());
        }
    }

    fn complete(&mut self, idx: u32, d: &Completion) -> std::result::Result<(), String> {
        let slot = self
            .slots
            .get_mut(idx as usize)
            .ok_or("completion index out of range")?;
        if slot.what.is_none()
            || slot.done.is_some()
            || (!matches!(slot.what, Some(Pending::Cancel)) && d.user != slot.generation)
        {
            return Err(format!(
                "the agent completed descriptor {idx}, which was not pending"
            ));
        }
        let what = slot.what.take().expect("checked");
        let st = Status {
            source: d.info_rank,
            match_bits: d.info_bits,
            len: d.info_len,
            received: d.received,
            truncated: d.truncated,
        };
        let fail = |s: u32| {
            Err(Error::Failed {
                status: s,
                message: status_message(s).into(),
            })
        };
        let result = match (&what, d.status) {
            (Pending::Send { .. }, status::OK) => Ok(Done::Sent),
            (
                Pending::Recv {
                    data: Some(di),
                    lease: true,
                    ..
                },
                status::OK,
            ) => {
                // Left where the engine put it (its data buffer, or the frame it arrived in
                // when the agent lent it): the caller copies it once, into its buffer.
                let len = d.received.min(self.ch.geo.data_size as u64);
                if let Some(l) = self.leased.get_mut(*di as usize) {
                    *l = true;
                }
                let rx = (d.lease != 0).then(|| (d.lease - 1, d.lease_off));
                Ok(Done::ReceivedInChannel {
                    status: st.clone(),
                    lease: crate::ops::Lease { di: *di, len, rx },
                })
            }
            (Pending::Recv { data, keep, .. }, status::OK) => {
                let bytes = match (data, keep) {
                    (Some(di), _) => {
                        let mut v =
                            vec![0u8; d.received.min(self.ch.geo.data_size as u64) as usize];
                        let off = self.ch.data_offset(*di).map_err(|e| e.to_string())?;
                        self.ch
                            .region
                            .read(off, &mut v)
                            .map_err(|e| e.to_string())?;
                        self.ch.count_client_copy(v.len() as u64);
                        Some(v)
                    }
                    (None, Some(_)) => None, // filled below from `keep`
                    (None, None) => None,
                };
                Ok(Done::Received {
                    status: st.clone(),
                    data: bytes,
                })
            }
            (Pending::Probe, status::OK) => Ok(Done::Probed {
                found: Some((st.clone(), d.handle)),
            }),
            (Pending::Probe, status::NO_MATCH) => Ok(Done::Probed { found: None }),
            (Pending::Cancel, s) => Ok(Done::CancelResult {
                cancelled: s == status::OK,
            }),
            (_, s) => fail(s),
        };
        let result = match (result, what) {
            (
                Ok(Done::Received { status, data: None }),
                Pending::Recv {
                    keep: Some(mut v), ..
                },
            ) => {
                v.truncate(status.received as usize);
                Ok(Done::Received {
                    status,
                    data: Some(v),
                })
            }
            // The buffer goes back when the lease is taken.
            (r @ Ok(Done::ReceivedInChannel { .. }), _) => r,
            (r, w) => {
                self.release(&w);
                r
            }
        };
        let slot = &mut self.slots[idx as usize];
        if let Some(ctx) = slot.ctx {
            let req = Req {
                idx,
                generation: slot.generation,
            };
            self.free_desc.push(idx);
            self.ready.push_back(Notified { ctx, req, result });
        } else {
            slot.what = Some(Pending::Probe); // keeps the slot pending until `take`
            slot.done = Some(result);
        }
        Ok(())
    }
}

/// Copies fragment `f` out of the receive memory into the buffer of the receive it names,
/// if that receive is still in flight and its buffer the client's to write (not abandoned);
/// returns the bytes copied.
fn place(rx: &ReadOnlyRegion, slots: &mut [Slot], f: &channel::Fragment) -> u64 {
    let Some(slot) = slots.get_mut(f.desc as usize) else {
        return 0;
    };
    if slot.generation as u64 != f.user || slot.done.is_some() {
        return 0;
    }
    let (len, at) = (f.len as usize, f.msg_off as usize);
    let ok = match &mut slot.what {
        Some(Pending::Recv { raw: Some(b), .. }) => {
            rx.copy_to(f.rx_off as usize, len, b, at).is_ok()
        }
        Some(Pending::Recv { keep: Some(v), .. }) => at
            .checked_add(len)
            .and_then(|end| v.get_mut(at..end))
            .is_some_and(|dst| rx.read(f.rx_off as usize, dst).is_ok()),
        _ => false,
    };
    if ok { len as u64 } else { 0 }
}
