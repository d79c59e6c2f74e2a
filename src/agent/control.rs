//! The control thread: accepts clients on the Unix socket, checks their credentials, creates
//! their channel and passes it over, answers stats requests, and notices clients that die
//! (their end of the socket closes) so the engine reclaims what they held.

use super::slots::{self, Slots, Taken};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tigon_client::proto::{Reply, Request, VERSION};
use tigon_engine::channel::{Channel, Geometry};
use tigon_shm::Region;

/// The engine's answer to an attach: the client's handle, its endpoint's address, and the
/// node's receive memory for the client to map read-only, if it may.
pub type Attached = (u64, String, Option<RxShare>);

/// The node's receive memory as a client maps it: `len` bytes of `fd`'s file at `offset`.
pub struct RxShare {
    pub fd: OwnedFd,
    pub offset: u64,
    pub len: u64,
}

/// What the control thread asks of the engine thread.
pub enum Cmd {
    Attach {
        ch: Channel,
        pid: i32,
        uid: u32,
        /// The channel lies in a slot of DPDK's memory, this one (see `slots`); else the
        /// engine maps its memfd for DPDK itself.
        slot: Option<Arc<tigon_pmd::ExtMem>>,
        /// The client's handle, its address, and the receive memory it may map.
        reply: Sender<Result<Attached, String>>,
    },
    /// A client by the handle `Attach` returned.
    Detach {
        client: u64,
    },
    Stats {
        reply: Sender<serde_json::Value>,
    },
}

pub struct Control {
    pub listener: UnixListener,
    pub allow_uids: Vec<u32>,
    pub geometry: Geometry,
    pub eager_limit: u64,
    pub hugetlb: bool,
    pub cmds: Sender<Cmd>,
    /// Rung after every command, so a sleeping engine takes it at once; clients get a copy.
    pub bell: std::sync::Arc<tigon_shm::wake::EventFd>,
    /// Slots the engine disconnected (garbage): their sockets are closed here.
    pub evicted: Receiver<u64>,
    /// Channels in DPDK's memory, once the engine has reserved them (a node whose port is
    /// memif in zero-copy mode).
    pub slots: Arc<OnceLock<Slots>>,
}

impl Control {
    /// Hands `c` to the engine and wakes it; false if the engine is gone.
    fn send(&self, c: Cmd) -> bool {
        let ok = self.cmds.send(c).is_ok();
        self.bell.ring();
        ok
    }
}

fn send_line(s: &UnixStream, r: &Reply) {
    let mut line = serde_json::to_vec(r).expect("serialize");
    line.push(b'\n');
    let _ = (&*s).write_all(&line);
}

/// The longest request line a client may send (requests are well under 100 bytes): a
/// longer one is refused before it costs the agent memory.
const REQUEST_MAX: usize = 4096;
/// How long a client has to send its whole request line, counted from its connection, and
/// its answer to an offer, counted from the offer; in all, not per byte: a client that
/// trickles or says nothing is cut off then.
const REQUEST_TIME: Duration = Duration::from_secs(2);
/// Connections whose request line is still coming in, at most: past it a new connection is
/// refused at once (each costs a descriptor until its `REQUEST_TIME` runs out).
const PENDING_MAX: usize = 256;

/// A connection whose request line is still coming in. Connections are read side by side,
/// without blocking, so none can hold up another's (a slow or silent client, whatever its
/// uid, is only ever cut off after `REQUEST_TIME`).
struct Pending {
    s: UnixStream,
    cred: tigon_shm::sock::PeerCred,
    line: Vec<u8>,
    deadline: Instant,
}

/// What a pending connection's latest read gave.
enum Got {
    /// Nothing more for now.
    Waiting,
    /// Its request line (without the newline).
    Line(String),
    /// Closed, timed out or refused (any reply already sent).
    Dropped,
}

impl Pending {
    fn read(&mut self, now: Instant) -> Got {
        let mut b = [0u8; 512];
        loop {
            match (&self.s).read(&mut b) {
                Ok(0) => return Got::Dropped,
                Ok(n) => match add_to_line(&mut self.line, &b[..n]) {
                    Err(TooLong) => return self.refuse(too_long()),
                    Ok(false) => {}
                    Ok(true) => {
                        return match String::from_utf8(std::mem::take(&mut self.line)) {
                            Ok(l) => Got::Line(l),
                            Err(_) => self.refuse("bad request: not UTF-8".into()),
                        };
                    }
                },
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return Got::Dropped,
            }
        }
        if now >= self.deadline {
            return self.refuse(format!(
                "no complete request line within {} s",
                REQUEST_TIME.as_secs()
            ));
        }
        Got::Waiting
    }

    fn refuse(&self, message: String) -> Got {
        let _ = self.s.set_nonblocking(false);
        let _ = self.s.set_write_timeout(Some(Duration::from_millis(100)));
        send_line(&self.s, &Reply::Error { message });
        Got::Dropped
    }
}

/// Refuses client `s` (credentials `cred`) for `why` (logged), telling it `message`.
fn refuse(s: &UnixStream, cred: &tigon_shm::sock::PeerCred, why: &str, message: String) {
    log::warn!("refused client pid {} uid {}: {why}", cred.pid, cred.uid);
    send_line(s, &Reply::Error { message });
}

/// A request line past `REQUEST_MAX` bytes.
struct TooLong;

/// Appends `chunk` to `line` up to its first newline (anything after it is dropped: a
/// client sends one line and waits for the answer); whether the line is now complete.
fn add_to_line(line: &mut Vec<u8>, chunk: &[u8]) -> Result<bool, TooLong> {
    let end = chunk.iter().position(|&c| c == b'\n');
    line.extend_from_slice(&chunk[..end.unwrap_or(chunk.len())]);
    if line.len() > REQUEST_MAX {
        return Err(TooLong);
    }
    Ok(end.is_some())
}

fn too_long() -> String {
    format!("bad request: longer than {REQUEST_MAX} bytes")
}

/// Reads one line from `s` (blocking), all of it within `deadline` and at most `REQUEST_MAX`
/// bytes; `None` past either, or on EOF or error.
fn read_line_by(s: &UnixStream, deadline: Instant) -> Option<String> {
    let mut line = Vec::new();
    let mut b = [0u8; 512];
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        if left.is_zero() {
            return None;
        }
        s.set_read_timeout(Some(left)).ok()?;
        match (&*s).read(&mut b) {
            Ok(0) => return None,
            Ok(n) => match add_to_line(&mut line, &b[..n]) {
                Err(TooLong) => return None,
                Ok(false) => {}
                Ok(true) => return String::from_utf8(line).ok(),
            },
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

impl Control {
    /// Runs until `stop()` says so; then drops every client socket (clients see EOF).
    pub fn run(self, stop: impl Fn() -> bool) {
        let _ = self.listener.set_nonblocking(true);
        let mut clients: HashMap<u64, UnixStream> = HashMap::new();
        let mut pending: Vec<Pending> = Vec::new();
        while !stop() {
            let now = Instant::now();
            loop {
                match self.listener.accept() {
                    Ok((s, _)) => {
                        if let Some(p) = self.admit(s, pending.len(), now) {
                            pending.push(p);
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        log::warn!("accept: {e}");
                        break;
                    }
                }
            }
            let mut i = 0;
            while i < pending.len() {
                match pending[i].read(now) {
                    Got::Waiting => i += 1,
                    Got::Dropped => {
                        pending.swap_remove(i);
                    }
                    Got::Line(line) => {
                        let p = pending.swap_remove(i);
                        if let Some((slot, s)) = self.handle(p.s, p.cred, &line) {
                            clients.insert(slot, s);
                        }
                    }
                }
            }
            // A client's socket reading EOF means the process is gone (or dropped us).
            let mut gone = Vec::new();
            for (&slot, s) in &clients {
                let mut b = [0u8; 64];
                match (&*s).read(&mut b) {
                    Ok(0) => gone.push(slot),
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => gone.push(slot),
                }
            }
            for slot in gone {
                clients.remove(&slot);
                self.send(Cmd::Detach { client: slot });
            }
            while let Ok(slot) = self.evicted.try_recv() {
                clients.remove(&slot);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// A new connection: its credentials, read now (the kernel's, not the client's word), and
    /// room to wait for its request line.
    fn admit(&self, s: UnixStream, waiting: usize, now: Instant) -> Option<Pending> {
        let cred = match tigon_shm::sock::peer_cred(&s) {
            Ok(c) => c,
            Err(e) => {
                send_line(
                    &s,
                    &Reply::Error {
                        message: format!("cannot read peer credentials: {e}"),
                    },
                );
                return None;
            }
        };
        if waiting >= PENDING_MAX {
            refuse(
                &s,
                &cred,
                &format!("{PENDING_MAX} others are still sending their requests"),
                format!(
                    "the agent is busy: {PENDING_MAX} connections are still sending their requests; try again"
                ),
            );
            return None;
        }
        s.set_nonblocking(true).ok()?;
        Some(Pending {
            s,
            cred,
            line: Vec::new(),
            deadline: now + REQUEST_TIME,
        })
    }

    /// Answers request `line` of client `s` (credentials `cred`); the client's slot and
    /// socket if it attached.
    fn handle(
        &self,
        s: UnixStream,
        cred: tigon_shm::sock::PeerCred,
        line: &str,
    ) -> Option<(u64, UnixStream)> {
        // Replies are small and the client waits for them: written blocking, briefly.
        let _ = s.set_nonblocking(false);
        let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
        let req: Request = match serde_json::from_str(line.trim()) {
            Ok(r) => r,
            Err(e) => {
                send_line(
                    &s,
                    &Reply::Error {
                        message: format!("bad request: {e}"),
                    },
                );
                return None;
            }
        };
        match req {
            Request::Stats => {
                let (tx, rx) = mpsc::channel();
                self.send(Cmd::Stats { reply: tx });
                let stats = rx
                    .recv_timeout(Duration::from_secs(15))
                    .unwrap_or(serde_json::json!({"error": "engine busy"}));
                send_line(&s, &Reply::Stats { stats });
                None
            }
            Request::Take { .. } => {
                send_line(
                    &s,
                    &Reply::Error {
                        message: "`take` answers an offer; attach first".into(),
                    },
                );
                None
            }
            Request::Attach { version } => {
                if version != VERSION {
                    send_line(
                        &s,
                        &Reply::Error {
                            message: format!(
                                "client speaks version {version}, agent {VERSION}: rebuild one of them"
                            ),
                        },
                    );
                    return None;
                }
                if !self.allow_uids.contains(&cred.uid) {
                    refuse(
                        &s,
                        &cred,
                        "not in --allow-uid",
                        format!(
                            "uid {} is not allowed to use this agent (see --allow-uid)",
                            cred.uid
                        ),
                    );
                    return None;
                }
                // A channel in DPDK's memory is offered to ranks of the agent's own user only
                // (it takes their own open of the agent's memory file; see `slots`).
                let offer = match self.slots.get() {
                    Some(sl) if cred.uid == tigon_shm::sock::euid() => {
                        sl.take(cred.pid).map(|t| (sl, t))
                    }
                    _ => None,
                };
                match self.attach(&s, cred.pid, cred.uid, offer) {
                    Ok(slot) => {
                        let _ = s.set_nonblocking(true);
                        Some((slot, s))
                    }
                    Err(message) => {
                        send_line(&s, &Reply::Error { message });
                        None
                    }
                }
            }
        }
    }

    /// Offers the client the slot `offer` (if any) and reads its answer, which it has
    /// `REQUEST_TIME` to give from the offer on (however long it waited for its turn): the
    /// slot's mapping when it took it. A slot not taken is free again.
    fn offer_slot(
        &self,
        s: &UnixStream,
        offer: Option<(&Slots, Taken)>,
    ) -> Option<(Region, Arc<tigon_pmd::ExtMem>, usize, Geometry)> {
        let (sl, t) = offer?;
        let taken = (|| {
            let (dev, ino) = sl.file_id;
            send_line(
                s,
                &Reply::Offer {
                    fd: sl.fd_number,
                    dev,
                    ino,
                },
            );
            let line = read_line_by(s, Instant::now() + REQUEST_TIME)?;
            match serde_json::from_str::<Request>(line.trim()).ok()? {
                Request::Take { ok: true } => {}
                _ => return None,
            }
            slots::map(&t.mem)
                .map_err(|e| log::warn!("a channel in DPDK memory: {e}; a memfd instead"))
                .ok()
        })();
        match taken {
            Some(region) => Some((region, t.mem, t.index, sl.geometry)),
            None => {
                sl.give_back(t.index);
                None
            }
        }
    }

    fn attach(
        &self,
        s: &UnixStream,
        pid: i32,
        uid: u32,
        offer: Option<(&Slots, Taken)>,
    ) -> Result<u64, String> {
        let (region, slot_mem, geometry) = match self.offer_slot(s, offer) {
            Some((region, mem, index, geo)) => {
                let region = Arc::new(region);
                if let Some(sl) = self.slots.get() {
                    sl.bind(index, &region);
                }
                (region, Some(mem), geo)
            }
            None => {
                let len = self.geometry.len();
                let r = Region::create(&format!("tigon-ch-{pid}"), len, self.hugetlb)
                    .map_err(|e| format!("channel memory: {e}"))?;
                (Arc::new(r), None, self.geometry)
            }
        };
        let channel_offset = slot_mem.as_ref().map(|m| m.file_offset());
        let ch = Channel::init(region, geometry, std::process::id(), pid as u32)
            .map_err(|e| e.to_string())?;
        let region = ch.region.clone();
        let (tx, rx) = mpsc::channel();
        if !self.send(Cmd::Attach {
            ch,
            pid,
            uid,
            slot: slot_mem,
            reply: tx,
        }) {
            return Err("the engine is shutting down".to_string());
        }
        let (slot, address, rx_mem) = rx
            .recv_timeout(Duration::from_secs(30))
            .map_err(|_| "the engine did not answer".to_string())??;
        let reply = Reply::Attached {
            address,
            region_len: region.len() as u64,
            agent_pid: std::process::id() as i32,
            eager_limit: self.eager_limit,
            rx_len: rx_mem.as_ref().map_or(0, |r| r.len),
            rx_offset: rx_mem.as_ref().map_or(0, |r| r.offset),
            channel_offset,
        };
        let mut line = serde_json::to_vec(&reply).expect("serialize");
        line.push(b'\n');
        // A channel in DPDK's memory: the client opened that file itself.
        let mut fds = Vec::with_capacity(3);
        if channel_offset.is_none() {
            fds.push(region.fd().as_fd());
        }
        fds.push(self.bell.fd().as_fd());
        if let Some(r) = &rx_mem {
            fds.push(r.fd.as_fd());
        }
        if let Err(e) = tigon_shm::sock::send_with_fds(s, &line, &fds) {
            self.send(Cmd::Detach { client: slot });
            return Err(format!("passing the channel: {e}"));
        }
        Ok(slot)
    }
}
