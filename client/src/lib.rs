//! The rank side of tigon: attach to the node agent over its Unix socket, receive a shared
//! memory channel, and post sends, receives, probes and cancels that the agent's engine core
//! carries out. No DPDK here.
//!
//! Thread-safe (MPI_THREAD_MULTIPLE): one lock guards the channel's free lists and pending
//! table; the engine does the protocol work, so the critical sections are short.
//!
//! Small payloads travel through the channel's data buffers (one copy on each side). Large
//! ones do not: the engine reads and writes this process's memory directly
//! (`process_vm_readv` / `process_vm_writev`, allowed with `PR_SET_PTRACER`), so the rank's
//! core does no per-byte work while a large transfer runs.

pub mod proto;

use proto::{Reply, Request};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tigon_engine::channel::{self, Channel, Desc, NO_DATA, Op, status};
use tigon_engine::{EndpointAddr, MatchSpec, SendMode};
use tigon_shm::Region;
use tigon_shm::wake::EventFd;

/// Where agents put their sockets unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/tigon/agent.sock";

/// The socket to use: `$TIGON_SOCKET`, else [`DEFAULT_SOCKET`].
pub fn default_socket() -> PathBuf {
    std::env::var_os("TIGON_SOCKET").map_or_else(|| PathBuf::from(DEFAULT_SOCKET), PathBuf::from)
}

/// Why a client call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// No agent at the socket, or the handshake failed.
    Attach(String),
    /// The agent died or shut down; every pending and later operation fails with this.
    AgentGone(String),
    /// The operation failed in the engine (peer unreachable, restarted, bad buffer...).
    Failed { status: u32, message: String },
    /// A request handle that is not pending (completed already, or never issued).
    BadRequest,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Error::Attach(m) => write!(f, "cannot attach to the tigon agent: {m}"),
            Error::AgentGone(m) => write!(f, "tigon agent gone: {m}"),
            Error::Failed { message, .. } => f.write_str(message),
            Error::BadRequest => f.write_str("no such pending request"),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

fn status_message(s: u32) -> &'static str {
    match s {
        status::CANCELLED => "cancelled",
        status::PEER_UNREACHABLE => "peer unreachable (no acknowledgement within the deadline)",
        status::PEER_RESTARTED => "peer restarted; the operation was lost with it",
        status::COPY_FAILED => "the agent could not read or write the buffer",
        status::INVALID => "invalid request",
        status::SHUTDOWN => "the agent is shutting down",
        _ => "operation failed",
    }
}

/// A pending operation. Handles are only meaningful to the client that issued them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Req {
    idx: u32,
    generation: u32,
}

/// What a receive (or probe) learned about its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub source: u32,
    pub match_bits: u64,
    /// Length as sent.
    pub len: u64,
    /// Bytes delivered; for [`Client::improbe`], bytes already at the node (`len` when the
    /// message is whole there: its receive then takes one pass of the agent, no network).
    pub received: u64,
    pub truncated: bool,
}

/// A finished operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Done {
    Sent,
    /// `data`: the payload, for receives into the channel or into a `Vec` the client owned.
    Received {
        status: Status,
        data: Option<Vec<u8>>,
    },
    /// A probe: the message it found, if any, and the handle for `mrecv` (mprobe only).
    Probed {
        found: Option<(Status, u64)>,
    },
    /// A cancel request: whether the target was cancelled (it then completes with an error).
    CancelResult {
        cancelled: bool,
    },
}

/// A finished operation that was given a context with [`Client::notify`].
#[derive(Debug)]
pub struct Notified {
    pub ctx: u64,
    /// The operation's handle: a caller that reuses contexts checks it is the operation it
    /// expects.
    pub req: Req,
    pub result: Result<Done>,
}

/// Where a receive's bytes go.
#[derive(Debug)]
pub enum RecvInto {
    /// A channel data buffer (capacity at most [`Client::data_size`]); returned in [`Done`].
    Channel(u64),
    /// A buffer the client owns, written directly by the engine; returned in [`Done`].
    Vec(Vec<u8>),
    /// Raw memory of this process, written directly by the engine. Built only by
    /// [`RecvInto::raw`].
    Raw { addr: u64, len: u64 },
}

impl RecvInto {
    /// Memory at `addr` of `len` bytes, to be written by the agent while the receive is
    /// pending.
    ///
    /// # Safety
    /// The memory must stay valid, and untouched by this process, until the receive completes.
    pub unsafe fn raw(addr: *mut u8, len: usize) -> RecvInto {
        RecvInto::Raw {
            addr: addr as u64,
            len: len as u64,
        }
    }
}

enum Pending {
    Send {
        data: Option<u32>,
        _keep: Option<Vec<u8>>,
    },
    Recv {
        data: Option<u32>,
        keep: Option<Vec<u8>>,
    },
    Probe,
    Cancel,
}

struct Slot {
    generation: u32,
    /// Completion goes to the ready queue under this context instead of waiting for `test`.
    ctx: Option<u64>,
    what: Option<Pending>,
    done: Option<Result<Done>>,
}

struct Inner {
    ch: Channel,
    /// The agent's doorbell, rung when a request is queued while the engine sleeps.
    bell: EventFd,
    sock: UnixStream,
    free_desc: Vec<u32>,
    free_data: Vec<u32>,
    slots: Vec<Slot>,
    dead: Option<String>,
    last_check: Instant,
    ready: std::collections::VecDeque<Notified>,
}

/// A rank's attachment to its node agent.
pub struct Client {
    inner: Mutex<Inner>,
    addr: EndpointAddr,
    eager_limit: u64,
    data_size: u64,
    agent_pid: i32,
    /// The channel, for sleeping outside the lock.
    waiter: Channel,
}

/// A receive descriptor for `spec` (no buffer yet).
fn recv_desc(spec: MatchSpec) -> Desc {
    let mut d = Desc {
        op: Op::Recv as u8,
        match_bits: spec.bits,
        mask: spec.mask,
        data_idx: NO_DATA,
        ..Desc::default()
    };
    match spec.source {
        Some(s) => d.rank = s,
        None => d.flags |= channel::FLAG_ANY_SOURCE,
    }
    d
}

/// The scheduler slice asked for by attaching threads (EEVDF's minimum is 100 µs).
const SCHED_SLICE_NS: u64 = 100_000;

const LIVENESS_EVERY: Duration = Duration::from_millis(20);

/// How a caller that waits on the engine passes time: it polls for a while (an answer
/// usually comes within microseconds), then sleeps on the channel's futex until the engine
/// queues a completion (the engine wakes it: about 2 µs), a couple of milliseconds at most so
/// liveness checks go on.
///
/// Never `sched_yield` or timed naps: on EEVDF kernels (Linux 6.6+) every yield pushes the
/// caller's virtual deadline a slice further, so a thread that yielded through a wait is
/// then starved for seconds by busy neighbours on its core; a timed sleep costs 25 µs or
/// more however short it is asked to be; and polling holds the core the engine may need.
struct Backoff(Instant);

const SPIN_BEFORE_SLEEP: Duration = Duration::from_micros(20);
const SLEEP_AT_MOST: Duration = Duration::from_millis(2);

impl Backoff {
    fn new() -> Self {
        Backoff(Instant::now())
    }
    fn idle(&self, ch: &Channel) {
        if self.0.elapsed() < SPIN_BEFORE_SLEEP {
            std::hint::spin_loop();
        } else {
            ch.wait_completions(SLEEP_AT_MOST);
        }
    }
}

impl Client {
    /// Attaches to the agent listening at `socket`.
    pub fn attach(socket: &Path) -> Result<Client> {
        let err = |m: String| Error::Attach(m);
        let sock = UnixStream::connect(socket).map_err(|e| {
            err(format!(
                "{}: {e} (is `tigon agent` running? `tigon doctor` checks a node)",
                socket.display()
            ))
        })?;
        sock.set_read_timeout(Some(Duration::from_secs(45)))
            .map_err(|e| err(e.to_string()))?;
        let mut line = serde_json::to_vec(&Request::Attach {
            version: proto::VERSION,
        })
        .expect("serialize");
        line.push(b'\n');
        (&sock)
            .write_all(&line)
            .map_err(|e| err(format!("sending attach: {e}")))?;
        let mut buf = vec![0u8; 4096];
        let (n, fds) = tigon_shm::sock::recv_with_fds(&sock, &mut buf)
            .map_err(|e| err(format!("reading reply: {e}")))?;
        let mut fds = fds.into_iter();
        let (fd, bell) = (fds.next(), fds.next());
        let text = std::str::from_utf8(&buf[..n]).map_err(|_| err("reply not UTF-8".into()))?;
        let reply: Reply = serde_json::from_str(text.trim())
            .map_err(|e| err(format!("bad reply `{text}`: {e}")))?;
        let (address, region_len, agent_pid, eager_limit) = match reply {
            Reply::Attached {
                address,
                region_len,
                agent_pid,
                eager_limit,
            } => (address, region_len, agent_pid, eager_limit),
            Reply::Error { message } => return Err(err(message)),
            r => return Err(err(format!("unexpected reply {r:?}"))),
        };
        let fd = fd.ok_or_else(|| err("the agent sent no channel".into()))?;
        let bell = EventFd::from_fd(bell.ok_or_else(|| err("the agent sent no doorbell".into()))?);
        let region = Region::from_fd(fd, region_len as usize)
            .map_err(|e| err(format!("mapping the channel: {e}")))?;
        let ch = Channel::open(Arc::new(region)).map_err(|e| err(e.to_string()))?;
        let addr: EndpointAddr = address.parse().map_err(err)?;
        // Let the agent read and write our buffers for large messages.
        tigon_shm::remote::allow_ptracer(agent_pid)
            .map_err(|e| err(format!("PR_SET_PTRACER: {e}")))?;
        sock.set_nonblocking(true).map_err(|e| err(e.to_string()))?;
        // A short scheduler slice: woken by the engine, this thread preempts whatever polls
        // on its core instead of waiting out that one's slice (EEVDF; ignored elsewhere).
        // Best effort: older kernels or seccomp filters refuse it, and nothing else changes.
        let _ = tigon_shm::wake::set_sched_slice_ns(SCHED_SLICE_NS);
        let geo = ch.geo;
        let waiter = ch.clone();
        Ok(Client {
            inner: Mutex::new(Inner {
                free_desc: (0..geo.n_desc).rev().collect(),
                free_data: (0..geo.n_data).rev().collect(),
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
                ready: std::collections::VecDeque::new(),
            }),
            addr,
            eager_limit,
            data_size: geo.data_size as u64,
            agent_pid,
            waiter,
        })
    }

    /// This endpoint's address (text form for the modex: `addr().to_string()`).
    pub fn addr(&self) -> EndpointAddr {
        self.addr
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
        dest: EndpointAddr,
        bits: u64,
        rank: u32,
        data: &[u8],
        mode: SendMode,
    ) -> Result<Req> {
        if data.len() as u64 <= self.data_size {
            let mut g = self.lock();
            if let Some(di) = g.alloc_data()? {
                let off = g.ch.data_offset(di).map_err(io_err)?;
                g.ch.region.write(off, data).map_err(io_err)?;
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
        self.isend_vec(dest, bits, rank, data.to_vec(), mode)
    }

    /// Sends `data`, which the engine reads in place: nothing is copied on this core.
    pub fn isend_vec(
        &self,
        dest: EndpointAddr,
        bits: u64,
        rank: u32,
        data: Vec<u8>,
        mode: SendMode,
    ) -> Result<Req> {
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
        dest: EndpointAddr,
        bits: u64,
        rank: u32,
        addr: *const u8,
        len: usize,
        mode: SendMode,
    ) -> Result<Req> {
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
        let (data, keep) = match into {
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
                (Some(di), None)
            }
            RecvInto::Vec(mut v) => {
                d.flags |= channel::FLAG_DIRECT;
                d.addr = v.as_mut_ptr() as u64;
                d.len = v.len() as u64;
                (None, Some(v))
            }
            RecvInto::Raw { addr, len } => {
                d.flags |= channel::FLAG_DIRECT;
                d.addr = addr;
                d.len = len;
                (None, None)
            }
        };
        g.submit(d, Pending::Recv { data, keep })
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
        self.recv_or(d, cap, fallback)
    }

    /// [`Client::imrecv`] with the buffer choice of [`Client::irecv_or`].
    pub fn imrecv_or(&self, handle: u64, cap: u64, fallback: RecvInto) -> Result<(Req, bool)> {
        let d = Desc {
            op: Op::MRecv as u8,
            handle,
            data_idx: NO_DATA,
            ..Desc::default()
        };
        self.recv_or(d, cap, fallback)
    }

    fn recv_or(&self, mut d: Desc, cap: u64, fallback: RecvInto) -> Result<(Req, bool)> {
        let mut g = self.lock();
        if cap <= self.data_size
            && let Some(di) = g.alloc_data()?
        {
            d.data_idx = di;
            d.len = cap;
            let r = g.submit(
                d,
                Pending::Recv {
                    data: Some(di),
                    keep: None,
                },
            )?;
            return Ok((r, true));
        }
        let keep = match fallback {
            RecvInto::Channel(_) => {
                return Err(Error::Failed {
                    status: status::INVALID,
                    message: "the fallback of a channel receive cannot be the channel".into(),
                });
            }
            RecvInto::Vec(mut v) => {
                d.flags |= channel::FLAG_DIRECT;
                d.addr = v.as_mut_ptr() as u64;
                d.len = v.len() as u64;
                Some(v)
            }
            RecvInto::Raw { addr, len } => {
                d.flags |= channel::FLAG_DIRECT;
                d.addr = addr;
                d.len = len;
                None
            }
        };
        let r = g.submit(d, Pending::Recv { data: None, keep })?;
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
        let (data, keep) = match into {
            RecvInto::Channel(cap) => {
                let di = g.alloc_data()?.ok_or(Error::Failed {
                    status: status::INVALID,
                    message: "no free data buffer".into(),
                })?;
                d.data_idx = di;
                d.len = cap.min(self.data_size);
                (Some(di), None)
            }
            RecvInto::Vec(mut v) => {
                d.flags |= channel::FLAG_DIRECT;
                d.addr = v.as_mut_ptr() as u64;
                d.len = v.len() as u64;
                (None, Some(v))
            }
            RecvInto::Raw { addr, len } => {
                d.flags |= channel::FLAG_DIRECT;
                d.addr = addr;
                d.len = len;
                (None, None)
            }
        };
        g.submit(d, Pending::Recv { data, keep })
    }

    /// Asks to cancel a pending receive. `Ok(true)`: it was cancelled (and completes with an
    /// error); `Ok(false)`: it had already matched.
    pub fn cancel(&self, target: Req) -> Result<bool> {
        let d = Desc {
            op: Op::Cancel as u8,
            handle: target.idx as u64,
            user: target.generation as u64,
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
        let d = Desc {
            op: Op::Cancel as u8,
            flags: channel::FLAG_ABANDON,
            handle: target.idx as u64,
            user: target.generation as u64,
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

    /// Waits for `r`: polls for 20 µs, then sleeps until the agent queues completions.
    pub fn wait(&self, r: Req) -> Result<Done> {
        let backoff = Backoff::new();
        loop {
            if let Some(d) = self.test(r)? {
                return Ok(d);
            }
            backoff.idle(&self.waiter);
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

    /// Progresses and moves every finished notified request into `out`; returns how many.
    pub fn drain(&self, out: &mut Vec<Notified>) -> usize {
        let mut g = self.lock();
        g.progress();
        let n = g.ready.len();
        out.extend(g.ready.drain(..));
        n
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

#[allow(clippy::too_many_arguments)]
fn send_desc(
    dest: EndpointAddr,
    bits: u64,
    rank: u32,
    len: u64,
    mode: SendMode,
    data_idx: u32,
    flags: u8,
    addr: u64,
) -> Desc {
    let sync = if mode == SendMode::Synchronous {
        channel::FLAG_SYNC
    } else {
        0
    };
    Desc {
        op: Op::Send as u8,
        flags: flags | sync,
        data_idx,
        len,
        addr,
        match_bits: bits,
        mask: u64::MAX,
        rank,
        peer: Some(dest),
        ..Desc::default()
    }
}

fn io_err(e: io::Error) -> Error {
    Error::Failed {
        status: status::INVALID,
        message: e.to_string(),
    }
}

impl Inner {
    fn check_alive(&mut self) -> Result<()> {
        if let Some(m) = &self.dead {
            return Err(Error::AgentGone(m.clone()));
        }
        Ok(())
    }

    fn alloc_data(&mut self) -> Result<Option<u32>> {
        self.check_alive()?;
        Ok(self.free_data.pop())
    }

    fn submit(&mut self, mut d: Desc, what: Pending) -> Result<Req> {
        if let Err(e) = self.check_alive() {
            self.release(&what);
            return Err(e);
        }
        let backoff = Backoff::new();
        let idx = loop {
            if let Some(i) = self.free_desc.pop() {
                break i;
            }
            // Every descriptor is in flight: wait for completions (backpressure).
            if self.progress() == 0 {
                backoff.idle(&self.ch);
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
            d.user = generation as u64;
        }
        self.ch.write_desc(idx, &d).map_err(io_err)?;
        // A ring has a slot per descriptor: it cannot be full while we hold a free descriptor.
        match self.ch.requests.push(idx) {
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

    fn release(&mut self, what: &Pending) {
        if let Pending::Send { data: Some(di), .. } | Pending::Recv { data: Some(di), .. } = what {
            self.free_data.push(*di);
        }
    }

    fn take(&mut self, r: Req) -> Result<Option<Done>> {
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

    fn kill(&mut self, why: String) {
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

    fn progress(&mut self) -> usize {
        if self.dead.is_some() {
            return 0;
        }
        let mut n = 0;
        loop {
            let idx = match self.ch.completions.pop() {
                Ok(Some(i)) => i,
                Ok(None) => break,
                Err(e) => {
                    self.kill(e.to_string());
                    break;
                }
            };
            n += 1;
            if let Err(e) = self.complete(idx) {
                self.kill(e);
                break;
            }
        }
        if n == 0 && self.last_check.elapsed() >= LIVENESS_EVERY {
            self.last_check = Instant::now();
            self.check_agent();
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

    fn complete(&mut self, idx: u32) -> std::result::Result<(), String> {
        let d = self.ch.read_desc(idx).map_err(|e| e.to_string())?;
        let slot = self
            .slots
            .get_mut(idx as usize)
            .ok_or("completion index out of range")?;
        if slot.what.is_none()
            || slot.done.is_some()
            || (d.op != Op::Cancel as u8 && d.user != slot.generation as u64)
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
            (Pending::Recv { data, keep }, status::OK) => {
                let bytes = match (data, keep) {
                    (Some(di), _) => {
                        let mut v =
                            vec![0u8; d.received.min(self.ch.geo.data_size as u64) as usize];
                        let off = self.ch.data_offset(*di).map_err(|e| e.to_string())?;
                        self.ch
                            .region
                            .read(off, &mut v)
                            .map_err(|e| e.to_string())?;
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

/// Asks the agent at `socket` for its counters.
pub fn agent_stats(socket: &Path) -> std::result::Result<serde_json::Value, String> {
    let s = UnixStream::connect(socket).map_err(|e| format!("{}: {e}", socket.display()))?;
    // A busy engine answers late; an unreachable agent fails at connect.
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .map_err(|e| e.to_string())?;
    let mut line = serde_json::to_vec(&Request::Stats).expect("serialize");
    line.push(b'\n');
    (&s).write_all(&line).map_err(|e| e.to_string())?;
    let mut r = BufReader::new(&s);
    let mut text = String::new();
    r.read_line(&mut text).map_err(|e| e.to_string())?;
    match serde_json::from_str::<Reply>(&text).map_err(|e| format!("bad reply `{text}`: {e}"))? {
        Reply::Stats { stats } => Ok(stats),
        Reply::Error { message } => Err(message),
        r => Err(format!("unexpected reply {r:?}")),
    }
}
