//! SIGINT / SIGTERM / SIGHUP as a flag the agent's and the launchers' loops poll.

use std::sync::atomic::{AtomicBool, Ordering};

static TERM: AtomicBool = AtomicBool::new(false);

extern "C" fn on_term(_sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    TERM.store(true, Ordering::SeqCst);
}

/// Installs handlers for SIGINT, SIGTERM and SIGHUP that set the flag [`terminating`]
/// reads. SIGHUP (the terminal or ssh session of `tigon run` closed) stops the same clean
/// way: by default it would kill the process before it removed what it made.
pub fn install() -> std::io::Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction with a handler that only stores to an atomic.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = on_term as *const () as usize;
        // SAFETY: sa is fully initialised; sigemptyset on its mask.
        unsafe { libc::sigemptyset(&mut sa.sa_mask) };
        // SAFETY: installing a valid handler for a catchable signal.
        if unsafe { libc::sigaction(sig, &sa, std::ptr::null_mut()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether SIGINT, SIGTERM or SIGHUP arrived.
pub fn terminating() -> bool {
    TERM.load(Ordering::SeqCst)
}

/// Sets the flag as a signal would (for shutdown paths that are not signals).
pub fn request_termination() {
    TERM.store(true, Ordering::SeqCst);
}

/// CPU time this thread has consumed, in nanoseconds (CLOCK_THREAD_CPUTIME_ID): what a
/// benchmark charges to the core that submits work.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `ts`, which we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC in nanoseconds: a time two processes of this machine can compare (a
/// rank says when it last polled, its agent checks how long ago that was).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `ts`, which we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sets this thread's timer slack (how late the kernel may wake a sleeping thread), so an
/// engine that naps when idle wakes within about `ns`.
pub fn set_timer_slack_ns(ns: u64) {
    // SAFETY: prctl(PR_SET_TIMERSLACK) takes plain integers and affects only this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong) };
}

/// Sets this thread's nice value (Linux: priority is per thread). Lowering it below 0 needs
/// CAP_SYS_NICE.
pub fn set_thread_nice(nice: i32) -> std::io::Result<()> {
    // SAFETY: gettid has no arguments and cannot fail.
    let tid = unsafe { libc::gettid() };
    // SAFETY: setpriority takes plain integers; PRIO_PROCESS with a thread id affects only
    // that thread.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
