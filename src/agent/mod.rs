//! `tigon agent`: the node agent. A DPDK primary process whose main lcore runs the engine's
//! poll loop (rx burst → demux → protocol → tx burst → timers → copy completions, then the
//! clients' rings), while a control thread attaches clients and serves stats.
//!
//! The rooms: [`args`] (options and settings) → [`control`] (the socket thread) and
//! [`engine_loop`] (the engine thread, on DPDK brought up by [`dpdk`]), which serves clients
//! ([`serve`]: one request read from its channel, started as an engine operation by [`ops`],
//! completed back into the channel) over the port ([`link`]), copying payloads ([`copy`]) to
//! and from client memory ([`memory`]), idling by [`idle`]'s policy and reporting [`stats`];
//! [`notify`] tells systemd when it serves.

mod args;
mod control;
mod copy;
mod dpdk;
mod engine_loop;
mod idle;
mod lease;
mod link;
mod memory;
mod nodes;
mod notify;
mod ops;
mod serve;
mod slots;
mod stats;

pub use args::{AgentArgs, read_config};
use control::{Cmd, Control};
use engine_loop::ToControl;
pub use nodes::describe as describe_nodes;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::{Arc, mpsc};

pub fn run(args: AgentArgs) -> Result<(), String> {
    let a = args.merge()?;
    let nodes = nodes::plan(&a)?;
    tigon_shm::signals::install().map_err(|e| format!("signal handlers: {e}"))?;
    // The control threads start before DPDK pins this thread to the engine's lcore: one per
    // node, each on its node's socket with its own doorbell.
    let mut up = Up::default();
    let mut ends = Vec::new();
    for n in &nodes {
        let s = &n.settings;
        let listener = match bind(&s.socket) {
            Ok(l) => l,
            Err(e) => {
                up.stop();
                return Err(e);
            }
        };
        up.sockets.push(s.socket.clone());
        let (cmd_tx, cmd_rx) = mpsc::channel::<Cmd>();
        let (evict_tx, evict_rx) = mpsc::channel::<u64>();
        let bell = match tigon_shm::wake::EventFd::new() {
            Ok(b) => Arc::new(b),
            Err(e) => {
                up.stop();
                return Err(format!("the agent's doorbell: {e}"));
            }
        };
        let slots = Arc::new(std::sync::OnceLock::new());
        let control = Control {
            slots: slots.clone(),
            bell: bell.clone(),
            listener,
            allow_uids: s.allow_uids.clone(),
            geometry: s.geometry,
            eager_limit: s.engine.rndv_threshold as u64,
            hugetlb: !s.no_huge,
            cmds: cmd_tx,
            evicted: evict_rx,
        };
        match std::thread::Builder::new()
            .name("tigon-control".into())
            .spawn(move || control.run(tigon_shm::signals::terminating))
        {
            Ok(t) => up.threads.push(t),
            Err(e) => {
                up.stop();
                return Err(e.to_string());
            }
        }
        ends.push((cmd_rx, evict_tx, slots));
        up.bells.push(bell);
    }
    let controls = ends
        .into_iter()
        .zip(&up.bells)
        .map(|((cmds, evicted, slots), bell)| ToControl {
            cmds,
            evicted,
            bell,
            slots,
        })
        .collect();
    let result = engine_loop::run(&nodes, controls);
    up.stop();
    result
}

/// What the agent has set up around its engine loop, taken down by [`Up::stop`].
#[derive(Default)]
struct Up {
    threads: Vec<std::thread::JoinHandle<()>>,
    /// The sockets this agent bound (and only those: never another agent's).
    sockets: Vec<std::path::PathBuf>,
    bells: Vec<Arc<tigon_shm::wake::EventFd>>,
}

impl Up {
    /// Stops the control threads and removes the sockets.
    fn stop(&mut self) {
        tigon_shm::signals::request_termination();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        for s in self.sockets.drain(..) {
            let _ = std::fs::remove_file(s);
        }
    }
}

fn bind(socket: &Path) -> Result<UnixListener, String> {
    // Only the default's directory (/run/tigon) is made here; any other must exist (checked
    // by the settings): a typo must not leave directories behind.
    if socket == Path::new(tigon_client::DEFAULT_SOCKET)
        && let Some(dir) = socket.parent()
    {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    if let Ok(m) = std::fs::symlink_metadata(socket) {
        // Only a socket is ever removed: a path mistyped into --socket (the config file, a
        // log) is refused, never deleted.
        use std::os::unix::fs::FileTypeExt;
        if m.file_type().is_symlink() {
            // Binding through a link is not possible, and the link is not ours to remove.
            return Err(format!(
                "{} is a symbolic link: name the socket's own path (the agent makes the socket \
                 there; a link to a running agent's socket is not needed by clients either, \
                 which take its path through --mca mtl_tigon_socket or TIGON_SOCKET)",
                socket.display()
            ));
        }
        if !m.file_type().is_socket() {
            return Err(format!(
                "{} exists and is not a socket: name a path for the agent's socket (a socket a stopped agent left is replaced)",
                socket.display()
            ));
        }
        if std::os::unix::net::UnixStream::connect(socket).is_ok() {
            return Err(format!("an agent is already serving {}", socket.display()));
        }
        let _ = std::fs::remove_file(socket);
    }
    let l = UnixListener::bind(socket).map_err(|e| {
        let fix = match e.raw_os_error() {
            Some(libc::EROFS | libc::EACCES | libc::EPERM) => {
                ": put the socket in a directory this agent may write (--socket; /run/tigon is \
                 the default)"
            }
            _ => "",
        };
        format!("binding {}: {e}{fix}", socket.display())
    })?;
    // Anyone may connect: the uid check (SO_PEERCRED against --allow-uid) is what admits or
    // refuses a client, with a message that says why. A socket only its owner could open
    // would refuse every other uid with a bare EACCES, whatever --allow-uid says.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o666))
        .map_err(|e| format!("chmod {}: {e}", socket.display()))?;
    Ok(l)
}
