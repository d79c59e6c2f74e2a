//! Channels in DPDK's own memory, for a node whose port is memif in zero-copy mode.
//!
//! That port passes its peer only buffers of DPDK's first memseg list, as far as it was in use
//! when the port connected (`tigon_pmd::Port::sends_in_place`). A channel in a memfd is
//! outside it, so the engine copies every small payload sent from there. A few channel slots
//! are reserved in that memory before the port opens (memzones, hugepages); a rank that gets
//! one writes its payloads where the port sends them from, and the engine copies nothing.
//!
//! Who may have one: the slot is part of the file of all of DPDK's memory (every pool, every
//! channel, memif's rings) and a file cannot be opened for a part. The agent never passes it.
//! It names its descriptor (`Reply::Offer`), and the rank opens `/proc/<agent>/fd/<n>` itself
//! for reading and writing, which the kernel allows only a process that may inspect the
//! agent anyway (ptrace access: same user and no more privileges, or `CAP_SYS_PTRACE`; the
//! agent not marked undumpable; what Yama and other security modules say). Ranks of
//! another user are not offered a slot; a rank whose open fails says so (`Request::Take`)
//! and gets a memfd channel, as does every rank once the slots are taken.
//!
//! A slot goes to a new rank only when the old one's process has exited (a rank keeps its
//! mapping past detaching, and maps it `MADV_DONTFORK` so no child inherits it) and nothing of
//! the agent holds it any more: not the engine (its channel), not a frame in flight (an mbuf
//! pointing into it holds the `ExtMem`).

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, Weak};
use tigon_engine::channel::Geometry;
use tigon_pmd::{Eal, ExtMem};
use tigon_shm::Region;

/// Slots per node, and bytes per slot (whole 2 MiB hugepages): 12 hugepages a node. A slot
/// holds a channel's request and completion rings (2 MiB of them at the default
/// `channel-requests`) and the rest in data buffers.
pub const SLOTS: usize = 4;
pub const SLOT_BYTES: usize = 6 << 20;
/// Fewer data buffers than this and a slot is not worth its hugepages.
const MIN_DATA_BUFFERS: u32 = 16;

/// The node's slots.
pub struct Slots {
    /// The geometry of a channel in a slot (fewer data buffers than a memfd channel's).
    pub geometry: Geometry,
    /// The descriptor (in this process) of the file the slots lie in, and that file's
    /// (device, inode) for the rank to check it opened the right one.
    pub fd_number: i32,
    pub file_id: (u64, u64),
    entries: Mutex<Vec<Entry>>,
}

struct Entry {
    mem: Arc<ExtMem>,
    user: Option<User>,
}

impl Entry {
    /// Whether the slot may go to a new rank: never given, or its last user's process has
    /// exited and nothing of the agent holds it (no channel mapping, no frame in flight).
    fn free(&self) -> bool {
        match &self.user {
            None => true,
            Some(u) => {
                u.region.strong_count() == 0 && Arc::strong_count(&self.mem) == 1 && exited(u)
            }
        }
    }
}

/// Whoever had a slot last: its process, and the agent's mapping of its channel.
struct User {
    pid: i32,
    pidfd: Option<OwnedFd>,
    region: Weak<Region>,
}

/// A slot given to one rank.
pub struct Taken {
    pub index: usize,
    pub mem: Arc<ExtMem>,
}

impl Slots {
    /// Reserves `count` slots of `SLOT_BYTES` in DPDK's first memseg list (before the port
    /// opens); `None`, with a log line, when there is no room (the node's ranks then use
    /// memfd channels, as ranks of other users always do).
    pub fn reserve(eal: &Eal, node: usize, count: usize, geo: Geometry) -> Option<Slots> {
        let fixed = Geometry { n_data: 0, ..geo }.len();
        let n_data = (SLOT_BYTES.saturating_sub(fixed) / geo.data_size as usize) as u32;
        if n_data < MIN_DATA_BUFFERS {
            log::info!("no channels in DPDK memory: {SLOT_BYTES} B hold {n_data} data buffers");
            return None;
        }
        let geometry = Geometry { n_data, ..geo };
        let mut entries = Vec::with_capacity(count);
        for i in 0..count {
            match ExtMem::shared_memzone(eal, &format!("tigon_ch{node}_{i}"), SLOT_BYTES) {
                Ok(mem) => entries.push(Entry { mem, user: None }),
                Err(e) => {
                    log::info!(
                        "{i} of {count} channels in DPDK memory (the others' ranks copy each \
                         small payload sent once more, in the agent): {e}"
                    );
                    break;
                }
            }
        }
        let first = entries.first()?;
        let fd_number = first.mem.fd().as_raw_fd();
        let file_id = file_id(first.mem.fd())?;
        log::info!(
            "{} channels in DPDK memory ({} data buffers of {} B each) for ranks that may open \
             this agent's memory file",
            entries.len(),
            n_data,
            geometry.data_size
        );
        Some(Slots {
            geometry,
            fd_number,
            file_id,
            entries: Mutex::new(entries),
        })
    }

    /// A slot for the rank `pid`, if one is free (or its last user is gone).
    pub fn take(&self, pid: i32) -> Option<Taken> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let e = entries.iter_mut().enumerate().find(|(_, e)| e.free());
        let (index, e) = e?;
        e.user = Some(User {
            pid,
            pidfd: pidfd_open(pid),
            region: Weak::new(),
        });
        Some(Taken {
            index,
            mem: e.mem.clone(),
        })
    }

    /// The agent's mapping of the channel in slot `index` (it holds the slot while it lives).
    pub fn bind(&self, index: usize, region: &Arc<Region>) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(u) = entries.get_mut(index).and_then(|e| e.user.as_mut()) {
            u.region = Arc::downgrade(region);
        }
    }

    /// Slot `index` was offered and not used (the rank could not open the file): free again.
    pub fn give_back(&self, index: usize) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = entries.get_mut(index) {
            e.user = None;
        }
    }

    /// How many slots are held: by a rank, or by its process, or by frames in flight.
    pub fn held(&self) -> usize {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.iter().filter(|e| !e.free()).count()
    }

    /// How many slots the node has.
    pub fn total(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// The agent's own read-write mapping of the slot `mem`, zeroed (the last user's channel
/// gone: no stale header, ring index or payload reaches the next one).
pub fn map(mem: &ExtMem) -> Result<Region, String> {
    let path = format!("/proc/self/fd/{}", mem.fd().as_raw_fd());
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| format!("reopening DPDK's memory file: {e}"))?;
    let region = Region::from_fd_at(file.into(), mem.file_offset(), mem.len(), true)
        .map_err(|e| format!("mapping a channel slot: {e}"))?;
    let zeros = [0u8; 64 << 10];
    let mut off = 0;
    while off < region.len() {
        let n = zeros.len().min(region.len() - off);
        region
            .write(off, &zeros[..n])
            .map_err(|e| format!("clearing a channel slot: {e}"))?;
        off += n;
    }
    Ok(region)
}

/// (device, inode) of an open file.
pub fn file_id(fd: impl AsFd) -> Option<(u64, u64)> {
    let f = std::fs::File::from(fd.as_fd().try_clone_to_owned().ok()?);
    let m = f.metadata().ok()?;
    use std::os::unix::fs::MetadataExt;
    Some((m.dev(), m.ino()))
}

/// A descriptor that becomes readable when `pid` exits (`pidfd_open`); `None` if the kernel
/// has none to give (then `exited` asks `kill(pid, 0)`).
fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: plain syscall with integer arguments; returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a fresh descriptor we own.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Whether the process of `u` has exited.
fn exited(u: &User) -> bool {
    match &u.pidfd {
        Some(fd) => {
            let mut p = libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, no wait.
            let n = unsafe { libc::poll(&mut p, 1, 0) };
            n == 1 && p.revents & libc::POLLIN != 0
        }
        None => {
            // SAFETY: signal 0 only checks that the process exists.
            let r = unsafe { libc::kill(u.pid, 0) };
            r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pidfd reads "exited" only once the process is gone (and is reaped or not).
    #[test]
    fn a_user_counts_as_gone_only_once_its_process_has_exited() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let u = User {
            pid,
            pidfd: pidfd_open(pid),
            region: Weak::new(),
        };
        assert!(u.pidfd.is_some(), "pidfd_open on this kernel");
        assert!(!exited(&u));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(exited(&u));
        let by_kill = User {
            pid,
            pidfd: None,
            region: Weak::new(),
        };
        assert!(exited(&by_kill), "reaped: kill(pid, 0) says ESRCH");
    }
}
