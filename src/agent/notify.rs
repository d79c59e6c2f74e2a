//! systemd's readiness protocol (sd_notify(3)) without libsystemd: a datagram such as
//! `READY=1` to the Unix socket named by `$NOTIFY_SOCKET` (a path, or an abstract name when
//! it starts with `@`). The unit is `Type=notify`, so `systemctl start tigon-agent` returns
//! once the agent serves, and `tigon doctor` right after it finds the agent answering.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixDatagram;

/// Sends `state` (`READY=1`, `STOPPING=1`, `STATUS=...`, newline-separated) to the service
/// manager, if there is one; says why not otherwise.
pub fn notify(state: &str) -> Result<bool, String> {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(false);
    };
    let send = || -> std::io::Result<()> {
        let sock = UnixDatagram::unbound()?;
        match path.as_bytes().strip_prefix(b"@") {
            Some(name) => {
                use std::os::linux::net::SocketAddrExt;
                let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                sock.send_to_addr(state.as_bytes(), &addr)?;
            }
            None => {
                sock.send_to(state.as_bytes(), &path)?;
            }
        };
        Ok(())
    };
    send()
        .map(|()| true)
        .map_err(|e| format!("NOTIFY_SOCKET {}: {e}", path.to_string_lossy()))
}

/// [`notify`], a failure logged (the agent serves anyway; systemd then times the start out).
pub fn tell(state: &str) {
    if let Err(e) = notify(state) {
        log::warn!("telling systemd {state:?}: {e}");
    }
}
