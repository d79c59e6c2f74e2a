//! The control socket: attaching to the agent (the channel and doorbell it passes over), and
//! asking it for its counters.

use crate::client::Client;
use crate::error::{Error, Result};
use crate::pending::Inner;
use crate::proto::{self, Reply, Request};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tigon_engine::Dest;
use tigon_engine::channel::Channel;
use tigon_shm::wake::EventFd;
use tigon_shm::{ReadOnlyRegion, Region};

/// The scheduler slice asked for by attaching threads (EEVDF's minimum is 100 µs).
const SCHED_SLICE_NS: u64 = 100_000;

impl Client {
    /// Attaches to the agent listening at `socket`.
    pub fn attach(socket: &Path) -> Result<Client> {
        let err = |m: String| Error::Attach(m);
        let sock = connect(socket).map_err(|e| {
            err(format!(
                "{e} (is `tigon agent` running? `tigon doctor` checks a node)"
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
        // The agent's memory file, if it offered the channel there and we could open it.
        let mut file: Option<OwnedFd> = None;
        let (reply, fds) = loop {
            let (n, fds) = tigon_shm::sock::recv_with_fds(&sock, &mut buf)
                .map_err(|e| err(format!("reading reply: {e}")))?;
            let text = std::str::from_utf8(&buf[..n]).map_err(|_| err("reply not UTF-8".into()))?;
            let reply: Reply = serde_json::from_str(text.trim())
                .map_err(|e| err(format!("bad reply `{text}`: {e}")))?;
            let Reply::Offer { fd, dev, ino } = reply else {
                break (reply, fds);
            };
            file = open_agent_file(&sock, fd, (dev, ino));
            let mut line =
                serde_json::to_vec(&Request::Take { ok: file.is_some() }).expect("serialize");
            line.push(b'\n');
            (&sock)
                .write_all(&line)
                .map_err(|e| err(format!("answering the agent's offer: {e}")))?;
        };
        let (address, region_len, agent_pid, eager_limit, rx_len, rx_offset, channel_offset) =
            match reply {
                Reply::Attached {
                    address,
                    region_len,
                    agent_pid,
                    eager_limit,
                    rx_len,
                    rx_offset,
                    channel_offset,
                } => (
                    address,
                    region_len,
                    agent_pid,
                    eager_limit,
                    rx_len,
                    rx_offset,
                    channel_offset,
                ),
                Reply::Error { message } => return Err(err(message)),
                r => return Err(err(format!("unexpected reply {r:?}"))),
            };
        let mut fds = fds.into_iter();
        let region = match (channel_offset, file) {
            (Some(offset), Some(file)) => {
                let r = Region::from_fd_at(file, offset, region_len as usize, true)
                    .map_err(|e| err(format!("mapping the channel in the agent's memory: {e}")))?;
                // The agent gives this memory to another rank once we have exited: no child
                // of ours may keep it.
                r.dont_fork()
                    .map_err(|e| err(format!("MADV_DONTFORK on the channel: {e}")))?;
                r
            }
            (Some(_), None) => {
                return Err(err(
                    "the agent placed the channel in a file this process could not open".into(),
                ));
            }
            (None, _) => {
                let fd = fds
                    .next()
                    .ok_or_else(|| err("the agent sent no channel".into()))?;
                Region::from_fd(fd, region_len as usize)
                    .map_err(|e| err(format!("mapping the channel: {e}")))?
            }
        };
        let (bell, rx_fd) = (fds.next(), fds.next());
        let bell = EventFd::from_fd(bell.ok_or_else(|| err("the agent sent no doorbell".into()))?);
        let ch = Channel::open(Arc::new(region)).map_err(|e| err(e.to_string()))?;
        // The node's receive memory, read-only: without it every payload comes through a
        // data buffer (one more copy in the agent), nothing else changes.
        let rx = match rx_fd {
            Some(fd) if rx_len > 0 => {
                ReadOnlyRegion::from_fd_at(fd, rx_offset, rx_len as usize).ok()
            }
            _ => None,
        };
        let addr: Dest = address.parse().map_err(err)?;
        // Let the agent read and write our buffers for large messages.
        tigon_shm::remote::allow_ptracer(agent_pid)
            .map_err(|e| err(format!("PR_SET_PTRACER: {e}")))?;
        sock.set_nonblocking(true).map_err(|e| err(e.to_string()))?;
        // A short scheduler slice: woken by the engine, this thread preempts whatever polls
        // on its core instead of waiting out that one's slice (EEVDF; ignored elsewhere).
        // Best effort: older kernels or seccomp filters refuse it, and nothing else changes.
        let _ = tigon_shm::wake::set_sched_slice_ns(SCHED_SLICE_NS);
        Ok(Client::new(
            Inner::new(ch, bell, sock, rx),
            addr,
            address,
            eager_limit,
            agent_pid,
        ))
    }
}

/// The agent's descriptor `fd` reopened for reading and writing through
/// `/proc/<agent>/fd/<fd>` (the agent being the process at the other end of `sock`), if the
/// kernel lets this process do that and the file is the one the agent named (`id`: device
/// and inode); `None` otherwise.
fn open_agent_file(sock: &UnixStream, fd: i32, id: (u64, u64)) -> Option<OwnedFd> {
    use std::os::unix::fs::MetadataExt;
    let agent = tigon_shm::sock::peer_cred(sock).ok()?.pid;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{agent}/fd/{fd}"))
        .ok()?;
    let m = f.metadata().ok()?;
    ((m.dev(), m.ino()) == id).then(|| f.into())
}

/// Connects to the agent's socket; the error names the path and, where something other
/// than a socket lies there (a file, a directory: a mistyped `TIGON_SOCKET`), says that
/// rather than the kernel's "connection refused".
fn connect(socket: &Path) -> std::result::Result<UnixStream, String> {
    UnixStream::connect(socket).map_err(|e| {
        use std::os::unix::fs::FileTypeExt;
        match std::fs::metadata(socket) {
            Ok(m) if !m.file_type().is_socket() => format!(
                "{} is not a socket but a {}: name the agent's socket (--socket of `tigon agent`, {} by default)",
                socket.display(),
                if m.is_dir() { "directory" } else { "file" },
                crate::DEFAULT_SOCKET
            ),
            // A socket file with no agent behind it: one left by an agent that ended
            // without removing it (killed), or whose agent runs in another namespace.
            Ok(_) if e.kind() == std::io::ErrorKind::ConnectionRefused => format!(
                "{}: no agent is listening there (connection refused: a socket left by an \
                 agent that ended?): start one (`tigon agent --socket {}`), and \
                 `tigon doctor` checks a node",
                socket.display(),
                socket.display()
            ),
            Err(_) if e.kind() == std::io::ErrorKind::NotFound => format!(
                "{}: no such socket: is the agent running, and is this its --socket ({} by \
                 default)?",
                socket.display(),
                crate::DEFAULT_SOCKET
            ),
            _ => format!("{}: {e}", socket.display()),
        }
    })
}

/// Asks the agent at `socket` for its counters.
pub fn agent_stats(socket: &Path) -> std::result::Result<serde_json::Value, String> {
    let s = connect(socket)?;
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
