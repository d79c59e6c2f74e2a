//! The control thread: accepts clients on the Unix socket, checks their credentials, creates
//! their channel and passes it over, answers stats requests, and notices clients that die
//! (their end of the socket closes) so the engine reclaims what they held.

use super::slots::{self, Slots, Taken};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
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

impl Control {
    /// Runs until `stop()` says so; then drops every client socket (clients see EOF).
    pub fn run(self, stop: impl Fn() -> bool) {
        let _ = self.listener.set_nonblocking(true);
        let mut clients: HashMap<u64, UnixStream> = HashMap::new();
        while !stop() {
            match self.listener.accept() {
                Ok((s, _)) => {
                    if let Some((slot, s)) = self.handle(s) {
                        clients.insert(slot, s);
                    }
                    continue;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => log::warn!("accept: {e}"),
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

    fn handle(&self, s: UnixStream) -> Option<(u64, UnixStream)> {
        let _ = s.set_nonblocking(false);
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
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
        let mut line = String::new();
        if BufReader::new(&s).read_line(&mut line).is_err() {
            return None;
        }
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
                    log::warn!(
                        "refused client pid {} uid {}: not in --allow-uid",
                        cred.pid,
                        cred.uid
                    );
                    send_line(
                        &s,
                        &Reply::Error {
                            message: format!(
                                "uid {} is not allowed to use this agent (see --allow-uid)",
                                cred.uid
                            ),
                        },
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

    /// Offers the client the slot `offer` (if any) and reads its answer: the slot's mapping
    /// when it took it. A slot not taken is free again.
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
            let mut line = String::new();
            BufReader::new(s).read_line(&mut line).ok()?;
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
