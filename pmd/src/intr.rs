//! Work done in the EAL's interrupt thread. That thread runs the drivers' control callbacks
//! (memif's control channel: its peer's messages, its hang-up) and DPDK's alarms, one at a
//! time. A port's stop and close from another thread race those callbacks: as both ends of
//! a memif wire shut down at once, the peer's disconnect is handled there (memif's
//! `memif_disconnect`, freeing the connection's queues and regions) while our close runs
//! the same teardown here, and the second free of the same memory ended the agent by
//! SIGSEGV at shutdown (4 of ~190 NetPIPE runs on a machine busy compiling, none of 98 since;
//! core dumps: the interrupt thread in memif, then in the allocator). Run as an alarm's
//! callback, the close takes its turn among those callbacks instead.

use std::ffi::c_void;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tigon_dpdk_sys as sys;

/// How long the caller waits for the interrupt thread to run the job: far longer than it
/// takes (microseconds), short enough that a stuck thread does not hang a shutdown.
const WAIT: Duration = Duration::from_secs(5);

/// A job handed to the interrupt thread, and whether it ran.
struct Job {
    work: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    done: Mutex<bool>,
    cv: Condvar,
}

extern "C" fn run_job(arg: *mut c_void) {
    // SAFETY: `arg` is the reference `run` leaked with `Arc::into_raw` for this one call.
    let job = unsafe { Arc::from_raw(arg as *const Job) };
    let work = job.work.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(w) = work {
        // A panic must not unwind into C: caught, and the job counts as done.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(w));
    }
    *job.done.lock().unwrap_or_else(|e| e.into_inner()) = true;
    job.cv.notify_all();
}

/// Runs `work` in the EAL's interrupt thread and waits for it. Where no alarm can be set (the
/// EAL refuses), it runs here instead. Returns false if the interrupt thread did not get to
/// it within [`WAIT`] (it may still run later; nothing is run twice).
pub(crate) fn run(work: impl FnOnce() + Send + 'static) -> bool {
    let job = Arc::new(Job {
        work: Mutex::new(Some(Box::new(work))),
        done: Mutex::new(false),
        cv: Condvar::new(),
    });
    let arg = Arc::into_raw(job.clone()) as *mut c_void;
    // SAFETY: `run_job` matches the callback type and takes `arg` back exactly once; the
    // alarm fires once.
    let ret = unsafe { sys::rte_eal_alarm_set(1, Some(run_job), arg) };
    if ret != 0 {
        // SAFETY: the alarm was not set, so the callback will never take the reference back.
        drop(unsafe { Arc::from_raw(arg as *const Job) });
        log::debug!("rte_eal_alarm_set: {}", crate::error::strerror(-ret));
        if let Some(w) = job.work.lock().unwrap_or_else(|e| e.into_inner()).take() {
            w();
        }
        return true;
    }
    let done = job.done.lock().unwrap_or_else(|e| e.into_inner());
    let (done, _) = job
        .cv
        .wait_timeout_while(done, WAIT, |d| !*d)
        .unwrap_or_else(|e| e.into_inner());
    *done
}
