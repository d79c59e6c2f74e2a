//! The control socket: attaching to the agent (the channel and doorbell it passes over), and
//! asking it for its counters.

use crate::client::Client;
use crate::error::{Error, Result};
use crate::pending::Inner;
use crate::proto::{self, Reply, Request};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tigon_engine::EndpointAddr;
use tigon_engine::channel::Channel;
use tigon_shm::wake::EventFd;
use tigon_shm::{ReadOnlyRegion, Region};

/// The scheduler slice asked for by attaching threads (EEVDF's minimum is 100 µs).
const SCHED_SLICE_NS: u64 = 100_000;

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
        let (fd, bell, rx_fd) = (fds.next(), fds.next(), fds.next());
        let text = std::str::from_utf8(&buf[..n]).map_err(|_| err("reply not UTF-8".into()))?;
        let reply: Reply = serde_json::from_str(text.trim())
            .map_err(|e| err(format!("bad reply `{text}`: {e}")))?;
        let (address, region_len, agent_pid, eager_limit, rx_len, rx_offset) = match reply {
            Reply::Attached {
                address,
                region_len,
                agent_pid,
                eager_limit,
                rx_len,
                rx_offset,
            } => (
                address,
                region_len,
                agent_pid,
                eager_limit,
                rx_len,
                rx_offset,
            ),
            Reply::Error { message } => return Err(err(message)),
            r => return Err(err(format!("unexpected reply {r:?}"))),
        };
        let fd = fd.ok_or_else(|| err("the agent sent no channel".into()))?;
        let bell = EventFd::from_fd(bell.ok_or_else(|| err("the agent sent no doorbell".into()))?);
        let region = Region::from_fd(fd, region_len as usize)
            .map_err(|e| err(format!("mapping the channel: {e}")))?;
        let ch = Channel::open(Arc::new(region)).map_err(|e| err(e.to_string()))?;
        // The node's receive memory, read-only: without it every payload comes through a
        // data buffer (one more copy in the agent), nothing else changes.
        let rx = match rx_fd {
            Some(fd) if rx_len > 0 => {
                ReadOnlyRegion::from_fd_at(fd, rx_offset, rx_len as usize).ok()
            }
            _ => None,
        };
        let addr: EndpointAddr = address.parse().map_err(err)?;
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
