//! Chaos mode for the MPI tests (issue 13): the C programs of tests/mpi/ while a busy loop
//! holds every CPU and a helper freezes the agents at random (SIGSTOP for 1-8 ms every
//! 2-20 ms), then the MTL and client once under valgrind's memcheck in the same conditions.
//! Nothing is timed: every program must print its OK, no process may crash, and the agents
//! must still run at the end.
//!
//! Two agents pinned to lcores 0 and 1 per test: nextest runs these one at a time with the
//! other MPI tests (test group `dpdk-pinned`).

mod common;

use common::{Agents, BusyLoops, Freezer, Mpirun, Run, program};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// A crash shows up in mpirun's output however the job ended.
fn assert_no_crash(r: &Run, what: &str) {
    let all = format!("{}{}", r.stdout, r.stderr);
    for sign in [
        "Process received signal",
        "Segmentation fault",
        "exited on signal",
        "core dumped",
    ] {
        assert!(
            !all.contains(sign),
            "{what}: a process crashed: {}",
            r.text()
        );
    }
}

fn seed() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.subsec_nanos())
}

/// The programs that exercise matching, synchronous sends, probes, cancels and freed requests,
/// 2 to 4 ranks, sized to take seconds each on a quiet machine.
const JOBS: &[(&str, usize, &[&str])] = &[
    ("sync_probe_free", 2, &["6"]),
    ("sync_probe_free", 4, &["3"]),
    ("p2p_basic", 4, &[]),
    ("ssend", 2, &[]),
    ("probe", 3, &[]),
    ("cancel", 2, &[]),
    ("truncate", 2, &[]),
    ("order", 3, &["1000"]),
    ("unexpected", 3, &["1000"]),
    ("sizes", 2, &[]),
    ("datatypes", 2, &[]),
    ("comms", 4, &[]),
    ("collectives", 3, &[]),
    ("threads", 2, &["100"]),
];

#[test]
fn mpi_programs_with_busy_cores_and_frozen_agents() {
    let progs: Vec<_> = JOBS.iter().map(|(n, _, _)| program(n)).collect();
    let mut agents = Agents::start("chaos");
    let busy = BusyLoops::start();
    let seed = seed();
    let freezer = Freezer::start(agents.pids(), seed);
    for ((name, np, args), prog) in JOBS.iter().zip(&progs) {
        let mut m = Mpirun::new(*np, &agents);
        m.args = args.iter().map(|s| s.to_string()).collect();
        // Generous: a hang still fails, slowness does not.
        m.timeout = Duration::from_secs(600);
        let r = m.run(prog);
        let what = format!("{name} on {np} ranks (freezer seed {seed})");
        assert_no_crash(&r, &what);
        if r.status != Some(0) {
            for i in 0..2 {
                eprintln!("agent {i} log:\n{}", agents.log(i));
            }
        }
        r.assert_ok(name);
        assert!(agents.alive(), "{what}: an agent died");
    }
    let frozen = freezer.finish();
    drop(busy);
    assert!(frozen > 0, "the agents were never frozen");
    eprintln!("chaos: {} jobs, agents frozen {frozen} times", JOBS.len());
}

/// Open MPI's suppressions (its own libraries' known reports), where Debian puts them.
const OMPI_SUPP: &str = "/usr/share/openmpi/openmpi-valgrind.supp";

/// sync_probe_free's ranks under memcheck, in chaos: an invalid read or write, or a free of
/// something not allocated, anywhere in the rank (the MTL's completions, the client's channel
/// handling, the freed-request hook) fails the job. Uninitialised-value reports are off: the
/// agent fills receive buffers with process_vm_writev, which valgrind cannot see.
#[test]
fn mtl_under_memcheck_with_busy_cores_and_frozen_agents() {
    let valgrind = Command::new("valgrind").arg("--version").output();
    assert!(
        valgrind.is_ok_and(|o| o.status.success()),
        "valgrind missing: apt-get install valgrind (scripts/setup.sh installs it)"
    );
    assert!(Path::new(OMPI_SUPP).exists(), "{OMPI_SUPP} missing");
    let prog = program("sync_probe_free");
    let agents = Agents::start("memcheck");
    let _busy = BusyLoops::start();
    let seed = seed();
    let freezer = Freezer::start(agents.pids(), seed);
    let mut m = Mpirun::new(2, &agents);
    m.timeout = Duration::from_secs(900);
    m.args = [
        "--error-exitcode=97",
        "--undef-value-errors=no",
        "--errors-for-leak-kinds=none",
        &format!("--suppressions={OMPI_SUPP}"),
        prog.to_str().expect("utf-8 path"),
        "1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let r = m.run(Path::new("valgrind"));
    let what = format!("sync_probe_free under memcheck (freezer seed {seed})");
    assert_no_crash(&r, &what);
    assert!(
        !r.stderr.contains("Invalid write") && !r.stderr.contains("Invalid read"),
        "{what}: memcheck found invalid accesses: {}",
        r.text()
    );
    r.assert_ok("sync_probe_free");
    assert_eq!(
        r.stderr.matches("ERROR SUMMARY: 0 errors").count(),
        2,
        "{what}: both ranks ran under memcheck, without errors: {}",
        r.text()
    );
    assert!(freezer.finish() > 0, "the agents were never frozen");
}
