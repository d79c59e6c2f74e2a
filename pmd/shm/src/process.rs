//! Process lifetimes for launchers (`tigon run`, `tigon demo`): children that die with their
//! parent even when it is SIGKILLed, a launcher that adopts its orphaned grandchildren so it
//! can reap them before it exits, and the CPU affinity of a process about to exec a rank.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Makes the process `cmd` spawns receive `sig` when the thread that spawns it exits (a
/// launcher killed by SIGKILL included: the kernel sends it). The setting survives `exec`
/// (`ip netns exec`, which execs in place, passes it on to the agent it runs), but not
/// `fork`: grandchildren need their own (see [`set_parent_death_signal`]).
pub fn die_with_parent(cmd: &mut Command, sig: libc::c_int) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the forked child before exec; it only calls prctl,
    // getppid and kill, which are async-signal-safe, and allocates nothing (an io::Error from
    // a raw errno does not allocate).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl: nobody would signal us then.
            if libc::getppid() != parent {
                libc::kill(libc::getpid(), sig);
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Asks for `sig` when this process's parent (the thread that forked it) exits.
pub fn set_parent_death_signal(sig: libc::c_int) -> io::Result<()> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes plain integers and affects only this process.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// This process's parent pid.
pub fn parent_pid() -> u32 {
    // SAFETY: getppid has no arguments and cannot fail.
    unsafe { libc::getppid() as u32 }
}

/// Makes this process the reaper of its orphaned descendants (PR_SET_CHILD_SUBREAPER): a rank
/// whose mpirun died becomes this process's child, which it can then kill and reap instead of
/// leaving it to init.
pub fn set_child_subreaper() -> io::Result<()> {
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER) takes plain integers and affects only this process.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reaps `pid` if it is a child of this process that has exited; true if it was reaped (or is
/// no child of ours: nothing to wait for).
pub fn try_reap(pid: u32) -> bool {
    let mut status = 0;
    // SAFETY: waitpid on one pid with WNOHANG writes only `status`, which we own.
    let r = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) };
    r != 0
}

/// Sends `sig` to `pid` (errors ignored: it may have exited).
pub fn signal(pid: u32, sig: libc::c_int) {
    if pid == 0 || pid > i32::MAX as u32 {
        return; // 0 and negative pids name process groups, never meant here
    }
    // SAFETY: kill takes plain integers; a positive pid names one process.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

/// Whether a process `pid` exists (a zombie counts: it has not been reaped yet).
pub fn exists(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: kill with signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Restricts this process to `cpus` (inherited across exec).
pub fn set_affinity(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: cpu_set_t is a plain bit array; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        if c >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("CPU {c} is beyond CPU_SETSIZE"),
            ));
        }
        // SAFETY: c < CPU_SETSIZE, checked above.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: sched_setaffinity reads `set`, which is initialised and of the size passed.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The CPUs the calling thread may run on.
pub fn affinity() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is a plain bit array; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: sched_getaffinity writes at most the size passed into `set`, which we own.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: c < CPU_SETSIZE; CPU_ISSET only reads the set.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Lets this process end the way SIGPIPE ends a C program (`tigon stats | head -1`): restores
/// the default action, which Rust's runtime replaced by "ignore", and raises it.
pub fn die_of_sigpipe() -> ! {
    // SAFETY: resetting a signal's disposition to the default and raising it take plain
    // integers.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
    // SIGPIPE may be blocked by whoever started us: exit with the shell's code for it.
    std::process::exit(128 + libc::SIGPIPE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn exists_sees_self_and_not_a_reaped_child() {
        assert!(exists(std::process::id()));
        let mut c = Command::new("true").spawn().expect("spawn true");
        let pid = c.id();
        c.wait().expect("wait");
        assert!(!exists(pid), "reaped child {pid} still exists");
    }

    #[test]
    fn a_child_dies_with_its_spawning_thread() {
        // A thread spawns `sleep` with the death signal and exits: the child is killed.
        let t = std::thread::spawn(|| {
            let mut cmd = Command::new("sleep");
            cmd.arg("60");
            die_with_parent(&mut cmd, libc::SIGKILL);
            cmd.spawn().expect("spawn sleep")
        });
        let mut child = t.join().expect("thread");
        let deadline = Instant::now() + Duration::from_secs(30);
        let st = loop {
            if let Some(st) = child.try_wait().expect("try_wait") {
                break Some(st);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            st.and_then(|s| s.signal()),
            Some(libc::SIGKILL),
            "sleep should have been killed when its parent thread exited"
        );
    }
}
