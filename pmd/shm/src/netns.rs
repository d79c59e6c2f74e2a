//! Entering a named network namespace (`ip netns add NAME`, bound at /run/netns/NAME) for a
//! moment: a socket keeps the namespace it was created in, so an agent hosting several
//! emulated nodes opens each node's af_packet port inside that node's namespace and then
//! returns. Only the calling thread moves (setns of a network namespace is per thread).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// The calling thread inside another network namespace until this is dropped.
pub struct NetnsGuard {
    home: File,
}

impl NetnsGuard {
    /// Moves the calling thread into the network namespace `name` (a name under
    /// /run/netns, as `ip netns` makes, or a path to a namespace file).
    pub fn enter(name: &str) -> io::Result<NetnsGuard> {
        let path = if name.contains('/') {
            name.to_string()
        } else {
            format!("/run/netns/{name}")
        };
        let target = File::open(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("network namespace {path}: {e}")))?;
        // The thread's own namespace (not the process's: another thread may have moved).
        let home = File::open("/proc/thread-self/ns/net")?;
        setns(&target)?;
        Ok(NetnsGuard { home })
    }
}

impl Drop for NetnsGuard {
    fn drop(&mut self) {
        if let Err(e) = setns(&self.home) {
            // Staying in the other namespace would put every later socket of this thread
            // there: nothing sensible can go on.
            panic!("returning to the thread's network namespace: {e}");
        }
    }
}

fn setns(ns: &File) -> io::Result<()> {
    // SAFETY: setns takes an fd we own for the call's duration and a namespace type; it
    // changes only the calling thread's network namespace.
    let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_namespace_is_named() {
        let e = NetnsGuard::enter("tigon-no-such-ns")
            .err()
            .expect("no such namespace");
        assert!(e.to_string().contains("/run/netns/tigon-no-such-ns"), "{e}");
    }

    #[test]
    fn entering_and_leaving_restores_the_namespace() {
        let name = format!("tigon-nstest-{}", std::process::id());
        let ip = |args: &[&str]| std::process::Command::new("ip").args(args).status();
        assert!(
            ip(&["netns", "add", &name]).unwrap().success(),
            "ip netns add (root)"
        );
        let link = || std::fs::read_link("/proc/thread-self/ns/net").unwrap();
        let home = link();
        let inside = NetnsGuard::enter(&name).map(|g| (link(), g));
        let _ = ip(&["netns", "delete", &name]);
        let (there, guard) = inside.expect("setns (root)");
        assert_ne!(there, home, "the thread moved");
        drop(guard);
        assert_eq!(link(), home, "and came back");
    }
}
