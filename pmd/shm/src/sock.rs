//! Unix-socket plumbing of the attach handshake: peer credentials and fd passing.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// Credentials of the process at the other end of `s`, from the kernel (SO_PEERCRED).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
}

/// This process's effective user id (whom its peers are compared with).
pub fn euid() -> u32 {
    // SAFETY: geteuid has no failure mode and touches no memory.
    unsafe { libc::geteuid() }
}

pub fn peer_cred(s: &UnixStream) -> io::Result<PeerCred> {
    let mut c = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `c`, which is that large.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut c as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(PeerCred {
        pid: c.pid,
        uid: c.uid,
        gid: c.gid,
    })
}

/// Sends `data` with `fd` attached (SCM_RIGHTS).
pub fn send_with_fd(s: &UnixStream, data: &[u8], fd: &OwnedFd) -> io::Result<()> {
    send_with_fds(s, data, &[fd.as_fd()])
}

/// At most this many descriptors travel with one message.
pub const MAX_FDS: usize = 4;

/// Sends `data` with `fds` (at most [`MAX_FDS`]) attached (SCM_RIGHTS).
pub fn send_with_fds(s: &UnixStream, data: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    if fds.is_empty() || fds.len() > MAX_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "1 to 4 descriptors per message",
        ));
    }
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let payload = std::mem::size_of_val(fds) as u32;
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(payload) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    // SAFETY: zeroed msghdr is a valid initial value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space;
    // SAFETY: msg_control points at `space` bytes we own, so the first header and its
    // `fds.len()` descriptors fit.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(payload) as usize;
        let data = libc::CMSG_DATA(c).cast::<i32>();
        for (i, fd) in fds.iter().enumerate() {
            std::ptr::write_unaligned(data.add(i), fd.as_raw_fd());
        }
    }
    // SAFETY: msg describes valid buffers for the duration of the call.
    let n = unsafe { libc::sendmsg(s.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if (n as usize) < data.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "short send of the attach reply",
        ));
    }
    Ok(())
}

/// Receives up to `buf.len()` bytes and at most one passed fd.
pub fn recv_with_fd(s: &UnixStream, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    let (n, fds) = recv_with_fds(s, buf)?;
    Ok((n, fds.into_iter().next()))
}

/// Receives up to `buf.len()` bytes and the descriptors passed with them (at most
/// [`MAX_FDS`]).
pub fn recv_with_fds(s: &UnixStream, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: pure size computation.
    let space = unsafe { libc::CMSG_SPACE((MAX_FDS * std::mem::size_of::<i32>()) as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    // SAFETY: zeroed msghdr is a valid initial value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space;
    // SAFETY: msg describes buffers we own; MSG_CMSG_CLOEXEC keeps the fds out of children.
    let n = unsafe { libc::recvmsg(s.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: walking the control headers the kernel wrote into cbuf, within msg_controllen;
    // each SCM_RIGHTS header holds (cmsg_len - CMSG_LEN(0)) / 4 descriptors now ours.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let count = ((*c).cmsg_len - libc::CMSG_LEN(0) as usize) / 4;
                let data = libc::CMSG_DATA(c).cast::<i32>();
                for i in 0..count {
                    let raw = std::ptr::read_unaligned(data.add(i));
                    fds.push(OwnedFd::from_raw_fd(raw));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, fds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn cred_and_fd_pass() {
        let (a, b) = UnixStream::pair().unwrap();
        let c = peer_cred(&a).unwrap();
        assert_eq!(c.pid, std::process::id() as i32);
        let r = crate::Region::create("x", 4096, false).unwrap();
        r.write(0, b"via fd").unwrap();
        send_with_fd(&a, b"hi", r.fd()).unwrap();
        let mut buf = [0u8; 8];
        let (n, fd) = recv_with_fd(&b, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"hi");
        let r2 = crate::Region::from_fd(fd.unwrap(), 4096).unwrap();
        let mut out = [0u8; 6];
        r2.read(0, &mut out).unwrap();
        assert_eq!(&out, b"via fd");
        (&a).write_all(b"x").unwrap();
        let mut one = [0u8; 1];
        (&b).read_exact(&mut one).unwrap();
    }
}
