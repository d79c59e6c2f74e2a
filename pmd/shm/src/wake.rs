//! Sleeping and waking across processes, for a shared core: futexes on words of a shared
//! region, an eventfd doorbell, a poll over several fds with a sub-millisecond timeout, the
//! scheduler's slice, and the CPU-latency QoS request.
//!
//! Why each exists (measured on this project's 2-core VM, Linux 6.18): a thread that polls
//! hogs the core another process needs; a timed sleep costs at least 25 µs however short it
//! is asked to be; a futex or eventfd wake-up costs about 2 µs across cores — but 185 µs
//! when the target core had gone idle in the hypervisor's halt, unless a CPU-latency request
//! of 0 keeps idle cores polling (see [`CpuLatency`]).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Blocks while `*word == expected`, at most `timeout`. Returns early on a wake-up, on a
/// signal, or at once when the word already differs. The word may live in memory shared with
/// other processes (a process-shared futex).
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = timespec(timeout);
    // SAFETY: the futex address is a live, aligned AtomicU32 for the duration of the call; the
    // kernel only reads it and the timespec we own.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wakes every thread blocked in [`futex_wait`] on `word`, in any process.
pub fn futex_wake(word: &AtomicU32) {
    // SAFETY: the address is a live, aligned AtomicU32; FUTEX_WAKE does not touch memory.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

fn timespec(d: Duration) -> libc::timespec {
    libc::timespec {
        tv_sec: d.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    }
}

/// A non-blocking eventfd: the doorbell a client rings when it queues work for a sleeping
/// engine.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: eventfd takes plain flags and returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned by nobody else.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Wraps a descriptor received from the agent. Writes to something that is not an eventfd
    /// fail harmlessly.
    pub fn from_fd(fd: OwnedFd) -> EventFd {
        EventFd(fd)
    }

    pub fn fd(&self) -> &OwnedFd {
        &self.0
    }

    pub fn ring(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a buffer we own; a full counter just fails (EAGAIN).
        unsafe { libc::write(self.0.as_raw_fd(), one.as_ptr().cast(), 8) };
    }

    /// Resets the counter (after a wake-up).
    pub fn drain(&self) {
        let mut b = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a buffer we own; non-blocking.
        unsafe { libc::read(self.0.as_raw_fd(), b.as_mut_ptr().cast(), 8) };
    }
}

/// Waits until one of `fds` (at most 64) is readable or `timeout` passes (nanosecond
/// resolution, unlike epoll_wait). Returns whether any was readable.
pub fn poll_readable(fds: &[BorrowedFd<'_>], timeout: Duration) -> bool {
    let mut p = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; 64];
    let n = fds.len().min(p.len());
    for (slot, fd) in p.iter_mut().zip(fds) {
        slot.fd = fd.as_raw_fd();
        slot.events = libc::POLLIN;
    }
    let ts = timespec(timeout);
    // SAFETY: `p` holds `n` initialised pollfds we own; the timespec is ours; no sigmask.
    let r = unsafe { libc::ppoll(p.as_mut_ptr(), n as libc::nfds_t, &ts, std::ptr::null()) };
    r > 0
}

/// Asks the scheduler (EEVDF, Linux 6.6+) for a time slice of `ns` for this thread: a thread
/// with a shorter slice than the one running preempts it when it wakes. A rank that sleeps
/// in a futex and is woken by its engine then runs at once instead of waiting out the
/// slice of whatever polls on that core. Older kernels ignore the field.
pub fn set_sched_slice_ns(ns: u64) -> io::Result<()> {
    #[repr(C)]
    struct SchedAttr {
        size: u32,
        policy: u32,
        flags: u64,
        nice: i32,
        priority: u32,
        runtime: u64,
        deadline: u64,
        period: u64,
    }
    // SAFETY: getpriority takes plain integers; 0 means the calling thread.
    let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        policy: libc::SCHED_OTHER as u32,
        flags: 0,
        nice,
        priority: 0,
        runtime: ns,
        deadline: 0,
        period: 0,
    };
    // SAFETY: sched_setattr reads `size` bytes of the attr we own; pid 0 is this thread.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0u32) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A held CPU-latency QoS request (/dev/cpu_dma_latency): while it is open with 0, idle
/// cores poll instead of halting, so waking a thread on one takes microseconds, not the
/// hundreds a hypervisor's halt exit costs. Released on drop.
#[derive(Debug)]
pub struct CpuLatency(#[allow(dead_code)] std::fs::File);

impl CpuLatency {
    pub fn request(us: i32) -> io::Result<CpuLatency> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/cpu_dma_latency")?;
        f.write_all(&us.to_ne_bytes())?;
        Ok(CpuLatency(f))
    }
}

/// Duplicates of this process's AF_PACKET sockets (DPDK's af_packet PMD keeps its own):
/// readable when a frame waits in the ring, so an idle engine can sleep on them.
pub fn packet_sockets() -> Vec<OwnedFd> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(fd) = e.file_name().to_str().and_then(|s| s.parse::<RawFd>().ok()) else {
            continue;
        };
        let is_socket = std::fs::read_link(e.path())
            .map(|l| l.to_string_lossy().starts_with("socket:"))
            .unwrap_or(false);
        if !is_socket {
            continue;
        }
        let mut dom: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `dom`; a stale fd number just
        // fails with EBADF or ENOTSOCK.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_DOMAIN,
                (&mut dom as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        if rc == 0 && dom == libc::AF_PACKET {
            // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor (or -1) that we then own.
            let d = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
            if d >= 0 {
                // SAFETY: `d` was just created and is owned by nobody else.
                out.push(unsafe { OwnedFd::from_raw_fd(d) });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    #[test]
    fn futex_wakes_a_waiter_and_times_out() {
        let w = Arc::new(AtomicU32::new(0));
        // Nobody wakes it: it returns by its timeout, the word untouched.
        futex_wait(&w, 0, Duration::from_millis(20));
        assert_eq!(w.load(Ordering::SeqCst), 0);
        // Already different: returns at once.
        futex_wait(&w, 7, Duration::from_secs(10));
        let w2 = w.clone();
        let h = std::thread::spawn(move || {
            while w2.load(Ordering::SeqCst) == 0 {
                futex_wait(&w2, 0, Duration::from_secs(10));
            }
        });
        std::thread::sleep(Duration::from_millis(10));
        w.store(1, Ordering::SeqCst);
        futex_wake(&w);
        h.join().unwrap();
    }

    #[test]
    fn eventfd_doorbell_is_readable_until_drained() {
        let e = EventFd::new().unwrap();
        let fd = [e.fd().as_fd()];
        assert!(!poll_readable(&fd, Duration::from_millis(1)));
        e.ring();
        assert!(poll_readable(&fd, Duration::from_secs(1)));
        e.drain();
        assert!(!poll_readable(&fd, Duration::ZERO));
    }

    #[test]
    fn finds_a_packet_socket_when_one_is_open() {
        let before = packet_sockets();
        // SAFETY: plain socket creation; needs CAP_NET_RAW (the tests run as root).
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
        assert!(
            fd >= 0,
            "AF_PACKET socket (root): {}",
            io::Error::last_os_error()
        );
        let after = packet_sockets();
        assert_eq!(after.len(), before.len() + 1, "the new socket is found");
        // SAFETY: closing the socket we created.
        unsafe { libc::close(fd) };
    }
}
