//! A rank's attachment to its node agent: the operations callers post, and waiting for them.

use crate::desc::{direct, recv_desc, send_desc};
use crate::error::{Error, Result, io_err};
use crate::ops::{Done, Notified, RecvInto, Req, Status};
use crate::pending::{Inner, Pending};
use crate::wait::Backoff;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use tigon_engine::channel::{self, Channel, Desc, NO_DATA, Op, status};
use tigon_engine::{Dest, EndpointAddr, MatchSpec, SendMode};

/// A rank's attachment to its node agent.
pub struct Client {
    inner: Mutex<Inner>,
    addr: Dest,
    addr_text: String,
    eager_limit: u64,
    data_size: u64,
    agent_pid: i32,
    /// The channel, for sleeping outside the lock.
    waiter: Channel,
    /// It maps the node's receive memory and the agent lends fragments of large messages
    /// (`--lend-large`): only then does it say when it polls (a clock read and a store per
    /// poll, for nothing otherwise).
    lends: bool,
}

/// A client says it polls at most this often (a store the agent's core reads).
const MARK_POLLED_EVERY_NS: u64 = 2_000;

impl Client {
    /// A client over `inner`'s channel (see [`Client::attach`]).
    pub(crate) fn new(
        inner: Inner,
        addr: Dest,
        addr_text: String,
        eager_limit: u64,
        agent_pid: i32,
    ) -> Client {
        let waiter = inner.ch.clone();
        Client {
            lends: inner.rx.is_some() && inner.ch.lends_fragments(),
            data_size: inner.ch.geo.data_size as u64,
            inner: Mutex::new(inner),
            addr,
            addr_text,
            eager_limit,
            agent_pid,
            waiter,
        }
    }

    /// This endpoint's address.
    pub fn addr(&self) -> EndpointAddr {
        self.addr.addr
    }
    /// This endpoint's address with its node's incarnation: what a peer sends to (a send to
    /// a bare [`EndpointAddr`] goes to whatever incarnation of the node answers).
    pub fn dest(&self) -> Dest {
        self.addr
    }
    /// This endpoint's address as the agent wrote it, for the modex: `MAC/ID@INCARNATION`
    /// with raw Ethernet, `udp:IP:PORT/ID@INCARNATION` with `--wire udp` (see [`Dest`]).
    pub fn addr_text(&self) -> &str {
        &self.addr_text
    }
    /// Largest payload that fits a channel data buffer.
    pub fn data_size(&self) -> u64 {
        self.data_size
    }
    pub fn eager_limit(&self) -> u64 {
        self.eager_limit
    }
    pub fn agent_pid(&self) -> i32 {
        self.agent_pid
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends `data` (copied into the channel, so the caller may reuse it at once).
    pub fn isend(
        &self,
        dest: impl Into<Dest>,
        bits: u64,
        rank: u32,
        data: &[u8],
        mode: SendMode,
    ) -> Result<Req> {
        let dest: Dest = dest.into();
        if data.len() as u64 <= self.data_size {
            let mut g = self.lock();
            if let Some(di) = g.alloc_data()? {
                let off = g.ch.data_offset(di).map_err(io_err)?;
                g.ch.region.write(off, data).map_err(io_err)?;
                g.ch.count_client_copy(data.len() as u64);
                let d = send_desc(dest, bits, rank, data.len() as u64, mode, di, 0, 0);
                return g.submit(
                    d,
                    Pending::Send {
                        data: Some(di),
                        _keep: None,
                    },
                );
            }
        }
        // No channel buffer (too long, or none free): the engine reads a copy of its own.
        self.count_copied(data.len() as u64);
        self.isend_vec(dest, bits, rank, data.to_vec(), mode)
    }

    /// Counts `n` payload bytes this process copied with its CPU outside the client (the
    /// MTL's copy of a received payload into the user's buffer): `tigon stats` reports the
    /// ranks' copies per payload byte.
    pub fn count_copied(&self, n: u64) {
        self.lock().ch.count_client_copy(n);
    }

    /// Sends `data`, which the engine reads in place: nothing is copied on this core.
    pub fn isend_vec(
        &self,
        dest: impl Into<Dest>,
        bits: u64,
        rank: u32,
        data: Vec<u8>,
        mode: SendMode,
    ) -> Result<Req> {
        let dest: Dest = dest.into();
        let d = send_desc(
            dest,
            bits,
            rank,
            data.len() as u64,
            mode,
            NO_DATA,
            channel::FLAG_DIRECT,
            data.as_ptr() as u64,
        );
        self.lock().submit(
            d,
            Pending::Send {
                data: None,
                _keep: Some(data),
            },
        )
    }

    /// Sends `len` bytes at `addr` of this process, read in place by the engine.
    ///
    /// The bytes must stay valid and unchanged until the send completes, or garbage is sent
    /// (this process's memory is only read, by another process).
    pub fn isend_raw(
        &self,
        dest: impl Into<Dest>,
        bits: u64,
        rank: u32,
        addr: *const u8,
        len: usize,
        mode: SendMode,
    ) -> Result<Req> {
        let dest: Dest = dest.into();
        let d = send_desc(
            dest,
            bits,
            rank,
            len as u64,
            mode,
            NO_DATA,
            channel::FLAG_DIRECT,
            addr as u64,
        );
        self.lock().submit(
            d,
            Pending::Send {
                data: None,
                _keep: None,
            },
        )
    }

    /// Posts a receive for messages matching `spec`.
    pub fn irecv(&self, spec: MatchSpec, into: RecvInto) -> Result<Req> {
        let mut g = self.lock();
        let mut d = recv_desc(spec);
        let (data, keep, raw) = match into {
            RecvInto::Channel(cap) => {
                if cap > self.data_size {
                    return Err(Error::Failed {
                        status: status::INVALID,
                        message: format!(
                            "channel receive of {cap} bytes exceeds the {}-byte data buffers",
                            self.data_size
                        ),
                    });
                }
                let backoff = Backoff::new();
                let di = loop {
                    if let Some(di) = g.alloc_data()? {
                        break di;
                    }
                    drop(g);
                    backoff.idle(&self.waiter);
                    g = self.lock();
                    g.progress();
                };
                d.data_idx = di;
                d.len = cap;
                (Some(di), None, None)
            }
            into => {
                let (keep, raw) = direct(&mut d, into);
                (None, keep, raw)
            }
        };
        g.submit(
            d,
            Pending::Recv {
                data,
                keep,
                raw,
                lease: false,
            },
        )
    }

    /// Looks for a matching message without receiving it. Blocks for one round trip through
    /// the engine; `Some` carries its status.
    pub fn iprobe(&self, spec: MatchSpec) -> Result<Option<Status>> {
        let r = self.probe_req(spec, Op::Probe)?;
        match self.wait(r)? {
            Done::Probed { found } => Ok(found.map(|(s, _)| s)),
            _ => Err(Error::BadRequest),
        }
    }

    /// Like [`Client::iprobe`], but takes the message: receive it with [`Client::imrecv`].
    pub fn improbe(&self, spec: MatchSpec) -> Result<Option<(Status, u64)>> {
        let r = self.probe_req(spec, Op::MProbe)?;
        match self.wait(r)? {
            Done::Probed { found } => Ok(found),
            _ => Err(Error::BadRequest),
        }
    }

    fn probe_req(&self, spec: MatchSpec, op: Op) -> Result<Req> {
        let mut d = Desc {
            op: op as u8,
            match_bits: spec.bits,
            mask: spec.mask,
            data_idx: NO_DATA,
            ..Desc::default()
        };
        match spec.source {
            Some(s) => d.rank = s,
            None => d.flags |= channel::FLAG_ANY_SOURCE,
        }
        self.lock().submit(d, Pending::Probe)
    }

    /// Receives the message `handle` from [`Client::improbe`].
    pub fn imrecv(&self, handle: u64, into: RecvInto) -> Result<Req> {
        // Same as a receive, with the handle instead of a match.
        let r = self.irecv_with(Op::MRecv, handle, into)?;
        Ok(r)
    }

    /// Like [`Client::irecv`] into a channel buffer of `cap` bytes, but never waits for one:
    /// when every data buffer is in use (or `cap` exceeds [`Client::data_size`]) the receive
    /// goes to `fallback` instead, which must not be a channel receive. A rank may post many
    /// receives before its peers can send; waiting for a buffer there could deadlock.
    /// Returns the request and whether it went through the channel.
    pub fn irecv_or(&self, spec: MatchSpec, cap: u64, fallback: RecvInto) -> Result<(Req, bool)> {
        let d = recv_desc(spec);
        self.recv_or(d, cap, fallback, false)
    }

    /// [`Client::irecv_or`], but a payload that comes through a channel buffer stays there:
    /// the receive completes as [`Done::ReceivedInChannel`], whose lease
    /// [`Client::take_lease`] copies straight into the caller's buffer (one copy, not two).
    pub fn irecv_or_lease(
        &self,
        spec: MatchSpec,
        cap: u64,
        fallback: RecvInto,
    ) -> Result<(Req, bool)> {
        let d = recv_desc(spec);
        self.recv_or(d, cap, fallback, true)
    }

    /// [`Client::imrecv_or`] with the lease of [`Client::irecv_or_lease`].
    pub fn imrecv_or_lease(
        &self,
        handle: u64,
        cap: u64,
        fallback: RecvInto,
    ) -> Result<(Req, bool)> {
        let d = Desc {
            op: Op::MRecv as u8,
            handle,
            data_idx: NO_DATA,
            ..Desc::default()
        };
        self.recv_or(d, cap, fallback, true)
    }

    /// Copies a leased payload into `dst` (as much as fits; `None`: nothing, the program no
    /// longer wants it) and gives its channel buffer back. Returns the bytes copied; a lease
    /// taken already yields 0.
    pub fn take_lease(&self, lease: &crate::ops::Lease, dst: Option<&mut [u8]>) -> Result<usize> {
        self.lock().take_lease(lease, dst)
    }

    /// [`Client::imrecv`] with the buffer choice of [`Client::irecv_or`].
    pub fn imrecv_or(&self, handle: u64, cap: u64, fallback: RecvInto) -> Result<(Req, bool)> {
        let d = Desc {
            op: Op::MRecv as u8,
            handle,
            data_idx: NO_DATA,
            ..Desc::default()
        };
        self.recv_or(d, cap, fallback, false)
    }

    fn recv_or(
        &self,
        mut d: Desc,
        cap: u64,
        fallback: RecvInto,
        lease: bool,
    ) -> Result<(Req, bool)> {
        let mut g = self.lock();
        if cap <= self.data_size
            && let Some(di) = g.alloc_data()?
        {
            d.data_idx = di;
            d.len = cap;
            if lease && g.rx.is_some() {
                // The payload may stay in the frame it arrived in, which we read there.
                d.flags |= tigon_engine::channel::FLAG_LEASE;
            }
            let r = g.submit(
                d,
                Pending::Recv {
                    data: Some(di),
                    keep: None,
                    raw: None,
                    lease,
                },
            )?;
            return Ok((r, true));
        }
        let (keep, raw) = match fallback {
            RecvInto::Channel(_) => {
                return Err(Error::Failed {
                    status: status::INVALID,
                    message: "the fallback of a channel receive cannot be the channel".into(),
                });
            }
            into => direct(&mut d, into),
        };
        let r = g.submit(
            d,
            Pending::Recv {
                data: None,
                keep,
                raw,
                lease: false,
            },
        )?;
        Ok((r, false))
    }

    fn irecv_with(&self, op: Op, handle: u64, into: RecvInto) -> Result<Req> {
        let mut g = self.lock();
        let mut d = Desc {
            op: op as u8,
            handle,
            data_idx: NO_DATA,
            ..Desc::default()
        };
        let (data, keep, raw) = match into {
            RecvInto::Channel(cap) => {
                let di = g.alloc_data()?.ok_or(Error::Failed {
                    status: status::INVALID,
                    message: "no free data buffer".into(),
                })?;
                d.data_idx = di;
                d.len = cap.min(self.data_size);
                (Some(di), None, None)
            }
            into => {
                let (keep, raw) = direct(&mut d, into);
                (None, keep, raw)
            }
        };
        g.submit(
            d,
            Pending::Recv {
                data,
                keep,
                raw,
                lease: false,
            },
        )
    }

    /// Asks to cancel a pending receive. `Ok(true)`: it was cancelled (and completes with an
    /// error); `Ok(false)`: it had already matched.
    pub fn cancel(&self, target: Req) -> Result<bool> {
        let d = Desc {
            op: Op::Cancel as u8,
            handle: target.idx as u64,
            user: target.generation,
            data_idx: NO_DATA,
            ..Desc::default()
        };
        let r = self.lock().submit(d, Pending::Cancel)?;
        match self.wait(r)? {
            Done::CancelResult { cancelled } => Ok(cancelled),
            _ => Err(Error::BadRequest),
        }
    }

    /// Asks the agent to abandon a pending operation: from the answer on, the agent reads
    /// and writes none of its memory, while the operation goes on (a receive still takes its
    /// message) and completes as usual, perhaps with an error. For MPI_Request_free of an
    /// active receive, whose buffer the program may reuse at once. `Ok(false)`: it had
    /// finished already.
    pub fn abandon(&self, target: Req) -> Result<bool> {
        {
            let mut g = self.lock();
            // No fragment lent from now on is copied into its buffer.
            if let Some(s) = g.slots.get_mut(target.idx as usize)
                && s.generation == target.generation
                && let Some(Pending::Recv { raw, .. }) = &mut s.what
            {
                *raw = None;
            }
        }
        let d = Desc {
            op: Op::Cancel as u8,
            flags: channel::FLAG_ABANDON,
            handle: target.idx as u64,
            user: target.generation,
            data_idx: NO_DATA,
            ..Desc::default()
        };
        let r = self.lock().submit(d, Pending::Cancel)?;
        match self.wait(r)? {
            Done::CancelResult { cancelled } => Ok(cancelled),
            _ => Err(Error::BadRequest),
        }
    }

    /// Moves completions out of the channel; returns how many arrived.
    pub fn progress(&self) -> usize {
        self.lock().progress()
    }

    /// The result of `r` if it has finished (the handle is then spent).
    pub fn test(&self, r: Req) -> Result<Option<Done>> {
        let mut g = self.lock();
        g.progress();
        g.take(r)
    }

    /// Sleeps until the agent queues a completion for this client, at most `timeout` (at
    /// once if one is queued). For callers that drive progress themselves, like the MTL.
    pub fn sleep_until_completion(&self, timeout: Duration) {
        self.waiter.wait_completions(timeout);
    }

    /// Says this process waits for its operations now, polling (a wait loop, not a program
    /// computing between tests): while it keeps saying so, the agent may lend it the frames
    /// of its large receives to copy ([`tigon_engine::channel::Fragment`]) instead of
    /// writing them into its memory from the engine's core. Cheap: a clock read, and a
    /// store every few µs.
    pub fn polling(&self) {
        if !self.lends {
            return;
        }
        let now = tigon_shm::signals::monotonic_ns();
        if now.saturating_sub(self.waiter.polled()) >= MARK_POLLED_EVERY_NS {
            self.waiter.mark_polled(now);
        }
    }

    /// Whether saying when it polls matters: the agent lends this process fragments of its
    /// large receives while it polls (see [`Client::polling`]).
    pub fn lends(&self) -> bool {
        self.lends
    }

    /// Says this process no longer waits (a wait of it got what it waited for): no frames
    /// are lent to it until it polls again.
    pub fn not_polling(&self) {
        if self.lends && self.waiter.polled() != 0 {
            self.waiter.mark_polled(0);
        }
    }

    /// Waits for `r`: polls (copying what the agent lends meanwhile) while things happen,
    /// then, after the idle time of [`crate::set_wait_policy`], sleeps until the agent
    /// queues completions.
    pub fn wait(&self, r: Req) -> Result<Done> {
        let mut backoff = Backoff::new();
        loop {
            self.polling();
            let mut g = self.lock();
            let n = g.progress();
            if let Some(d) = g.take(r)? {
                return Ok(d);
            }
            drop(g);
            if n > 0 {
                backoff = Backoff::new();
            } else {
                backoff.idle(&self.waiter);
            }
        }
    }

    /// Test hook: pushes out-of-range and duplicate descriptor indices onto the request
    /// ring, as a buggy or hostile client would.
    #[doc(hidden)]
    pub fn inject_garbage(&self) -> std::result::Result<(), String> {
        let g = self.lock();
        for v in [u32::MAX, g.ch.geo.n_desc + 7, 0, 0] {
            g.ch.requests.push(v).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// From now on, `r`'s completion is delivered by [`Client::drain`] with `ctx` instead of
    /// by `test` / `wait` (for callers that track requests themselves, like the MTL).
    pub fn notify(&self, r: Req, ctx: u64) -> Result<()> {
        let mut g = self.lock();
        let slot = g.slots.get_mut(r.idx as usize).ok_or(Error::BadRequest)?;
        if slot.generation != r.generation || slot.what.is_none() {
            return Err(Error::BadRequest);
        }
        match slot.done.take() {
            Some(result) => {
                slot.what = None;
                g.free_desc.push(r.idx);
                g.ready.push_back(Notified {
                    ctx,
                    req: r,
                    result,
                });
            }
            None => slot.ctx = Some(ctx),
        }
        Ok(())
    }

    /// Progresses and moves every finished notified request into `out`; returns how many,
    /// plus the lent fragments it copied (work done too).
    pub fn drain(&self, out: &mut Vec<Notified>) -> usize {
        let mut g = self.lock();
        let n = g.progress();
        let done = g.ready.len();
        out.extend(g.ready.drain(..));
        // Completions count once: as notified, or as left for `test`.
        done.max(n)
    }

    /// Operations not yet finished.
    pub fn pending(&self) -> usize {
        self.lock()
            .slots
            .iter()
            .filter(|s| s.what.is_some() && s.done.is_none())
            .count()
    }
}
