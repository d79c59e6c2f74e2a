//! The MPI test programs of tests/mpi/*.c, run with `mpirun --mca pml cm --mca mtl tigon`
//! over two `tigon agent`s joined by memif (ranks spread over both agents), plus the
//! component's behaviour without an agent, a rank killed mid-transfer, and NetPIPE.
//!
//! Each test starts its own agents (pinned to lcores 0 and 1): nextest runs them one at a
//! time (test group `dpdk-pinned` in .config/nextest.toml).

mod common;

use common::{Agents, Mpirun, program};
use std::time::Duration;

/// Runs `name` on `np` ranks over two fresh agents and checks it printed `OK name`.
fn run(name: &str, np: usize, args: &[&str]) -> Agents {
    let prog = program(name);
    let agents = Agents::start(&format!("{name}{np}"));
    let mut m = Mpirun::new(np, &agents);
    m.args = args.iter().map(|s| s.to_string()).collect();
    let r = m.run(&prog);
    if r.status != Some(0) {
        for i in 0..2 {
            eprintln!(
                "agent {i} log:\n{}\nagent {i} stats: {}",
                agents.log(i),
                agents.stats(i)
            );
        }
    }
    r.assert_ok(name);
    agents
}

#[test]
fn p2p_basic_2_ranks() {
    let agents = run("p2p_basic", 2, &[]);
    // The traffic really went through the agents.
    for i in 0..2 {
        let s = agents.stats(i);
        let sends = s["messages"]["sends"].as_u64().unwrap_or(0);
        assert!(sends > 10, "agent {i} carried {sends} sends: {s}");
    }
}

/// With `mpi_add_procs_cutoff` above the job size, Open MPI passes every process to add_procs
/// at MPI_Init (by default, 0, it adds only some and the MTL looks the others up on first use).
#[test]
fn p2p_basic_all_procs_added_at_init() {
    let prog = program("p2p_basic");
    let agents = Agents::start("addall");
    let mut m = Mpirun::new(3, &agents);
    m.mca = vec![("mpi_add_procs_cutoff".into(), "1024".into())];
    m.run(&prog).assert_ok("p2p_basic");
}

#[test]
fn p2p_basic_4_ranks() {
    // Two ranks per agent: neighbours on the same node talk through the agent's loopback.
    run("p2p_basic", 4, &[]);
}

#[test]
fn order_2_ranks() {
    run("order", 2, &["2000"]);
}

#[test]
fn order_3_ranks() {
    run("order", 3, &["1000"]);
}

#[test]
fn sizes_up_to_16_mib() {
    run("sizes", 2, &[]);
}

#[test]
fn unexpected_flood_3_ranks() {
    run("unexpected", 3, &["3000"]);
}

#[test]
fn ssend() {
    run("ssend", 2, &[]);
}

#[test]
fn probe_mprobe_3_ranks() {
    run("probe", 3, &[]);
}

/// Issue 13 without mpi4py: matched probes, synchronous sends and receives freed while
/// active, to self and across the nodes.
#[test]
fn sync_probe_free_2_ranks() {
    run("sync_probe_free", 2, &["2"]);
}

/// The same with two ranks per node: also to a rank of the same node (the agent's loopback).
#[test]
fn sync_probe_free_4_ranks() {
    run("sync_probe_free", 4, &["1"]);
}

#[test]
fn truncate() {
    run("truncate", 2, &[]);
}

#[test]
fn cancel() {
    run("cancel", 2, &[]);
}

#[test]
fn datatypes() {
    run("datatypes", 2, &[]);
}

/// Data that does not start at the buffer argument (MPI_BOTTOM with absolute addresses, a
/// lower bound not 0) through every send and receive flavour, and MPI_Alltoallw over
/// MPI_BOTTOM: Open MPI 4.1.4 gives an MTL the buffer argument of a persistent contiguous
/// send, not its data (mpi4py's testAlltoallwBottom received nothing).
#[test]
fn lower_bound_and_bottom_3_ranks() {
    run("lower_bound", 3, &[]);
}

#[test]
fn communicators_4_ranks() {
    run("comms", 4, &[]);
}

#[test]
fn collectives_3_ranks() {
    run("collectives", 3, &[]);
}

#[test]
fn collectives_4_ranks() {
    run("collectives", 4, &[]);
}

#[test]
fn thread_multiple_4_threads() {
    run("threads", 2, &["200"]);
}

/// A rank killed in the middle of a transfer ends the job with an error, not a hang, and the
/// agents serve the next job.
#[test]
fn rank_killed_mid_transfer() {
    let prog = program("peer_death");
    let mut agents = Agents::start_with("death", 10_000);
    let mut m = Mpirun::new(2, &agents);
    m.timeout = Duration::from_secs(120);
    let r = m.run(&prog);
    assert!(
        !r.timed_out && r.status != Some(0),
        "the job should fail promptly: {}",
        r.text()
    );
    assert!(agents.alive(), "an agent died with the rank");
    // Without mpirun's own abort (--enable-recovery keeps the job going when a process dies),
    // the survivor's MPI_Send returns an error once the peer times out: no hang.
    let mut m = Mpirun::new(2, &agents);
    m.timeout = Duration::from_secs(120);
    m.extra = vec!["--enable-recovery".into()];
    let r = m.run(&prog);
    assert!(
        !r.timed_out
            && r.stderr
                .contains("rank 0: MPI_Send to the dead rank failed"),
        "the survivor should get an MPI error: {}",
        r.text()
    );
    // Its reason in one line of its own as well: ORTE's forwarding of the help message
    // loses it now and then when the rank ends right after it.
    assert!(
        r.text().contains("mtl:tigon: tigon transfer failed on"),
        "{}",
        r.text()
    );
    assert!(agents.alive(), "an agent died with the rank");
    let next = Mpirun::new(2, &agents).run(&program("p2p_basic"));
    next.assert_ok("p2p_basic");
}

/// No agent: the component declines (with its reason at verbosity 1) and ob1 runs the job.
#[test]
fn declines_without_agent() {
    let prog = program("p2p_basic");
    let dir = std::env::temp_dir().join(format!("tigon-mtl-none-{}", std::process::id()));
    let sock = dir.join("nobody.sock");
    let m = Mpirun {
        np: 2,
        args: Vec::new(),
        mca: vec![
            ("mtl_tigon_verbose".into(), "1".into()),
            ("btl".into(), "self,tcp".into()),
        ],
        timeout: Duration::from_secs(120),
        tigon: false,
        sockets: vec![sock.clone()],
        env: Vec::new(),
        extra: Vec::new(),
    };
    let r = m.run(&prog);
    r.assert_ok("p2p_basic");
    let all = format!("{}{}", r.stdout, r.stderr);
    assert!(
        all.contains("mtl:tigon: not used: cannot attach to the tigon agent")
            && all.contains(&sock.display().to_string()),
        "the reason should be printed at verbosity 1: {}",
        r.text()
    );
}

/// `--mca mtl tigon` (with or without `--mca pml cm`) and no agent: MPI_Init fails and says
/// why.
#[test]
fn explicit_request_without_agent_fails() {
    let prog = program("p2p_basic");
    let sock = std::env::temp_dir().join("tigon-mtl-none/nobody.sock");
    for with_cm in [true, false] {
        let mut m = Mpirun {
            np: 2,
            args: Vec::new(),
            mca: vec![("mtl".into(), "tigon".into())],
            timeout: Duration::from_secs(120),
            tigon: false,
            sockets: vec![sock.clone()],
            env: Vec::new(),
            extra: Vec::new(),
        };
        if with_cm {
            m.mca.push(("pml".into(), "cm".into()));
        }
        let r = m.run(&prog);
        let all = format!("{}{}", r.stdout, r.stderr);
        assert!(
            !r.timed_out && r.status != Some(0) && !r.stdout.contains("OK p2p_basic"),
            "MPI_Init should fail (pml cm: {with_cm}): {}",
            r.text()
        );
        // The help message comes through mpirun's show_help forwarding, which Open MPI 4.1.4
        // sometimes garbles when several processes fail at once ("Data unpack would read past
        // end of buffer"); the component's own one-line reason always gets out.
        assert!(
            (all.contains("The tigon MTL was explicitly requested")
                || all.contains("MPI_Init fails: tigon was requested but cannot be used"))
                && all.contains("cannot attach to the tigon agent")
                && all.contains(&sock.display().to_string()),
            "the reason should be printed (pml cm: {with_cm}): {}",
            r.text()
        );
    }
}

/// NetPIPE's integrity check (`NPopenmpi -i`) over tigon, 1 B to 4 MiB.
#[test]
fn netpipe_integrity() {
    // Looked for, not run: `NPopenmpi -h` is an MPI singleton, and left its Open MPI
    // session directory (`/tmp/ompi.<host>.<uid>/jf.*`) behind.
    let on_path = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("NPopenmpi").is_file()));
    assert!(
        on_path,
        "NPopenmpi missing: apt-get install netpipe-openmpi"
    );
    let agents = Agents::start("netpipe");
    let out = agents.dir.join("np.out");
    let mut m = Mpirun::new(2, &agents);
    m.args = vec![
        "-i".into(),
        "-u".into(),
        (4 << 20).to_string(),
        "-o".into(),
        out.display().to_string(),
    ];
    m.timeout = Duration::from_secs(300);
    let r = m.run(std::path::Path::new("NPopenmpi"));
    let all = format!("{}{}", r.stdout, r.stderr);
    assert!(
        r.status == Some(0) && all.contains("Integrity check passed"),
        "NetPIPE integrity check: {}",
        r.text()
    );
}

/// An agent killed and started again (as systemd restarts it) while its peer kept running:
/// the next job runs at once. The peer still holds its session with the killed agent; the
/// new job's ranks send by addresses that name the new start (the modex carries each
/// agent's incarnation), so the peer sets up a new session instead of sending on the dead
/// one and failing the job's messages with it.
#[test]
fn a_job_right_after_an_agent_restart() {
    let prog = program("p2p_basic");
    let mut agents = Agents::start("restart");
    Mpirun::new(2, &agents).run(&prog).assert_ok("p2p_basic");
    let before = agents.stats(0);
    for round in 0..2 {
        agents.restart(1);
        let r = Mpirun::new(2, &agents).run(&prog);
        if r.status != Some(0) {
            eprintln!(
                "after restart {}: agent 0: {}\nagent 1 log:\n{}",
                round + 1,
                agents.stats(0),
                agents.log(1)
            );
        }
        r.assert_ok("p2p_basic");
    }
    let s = agents.stats(0);
    let failed = |s: &serde_json::Value| s["messages"]["failed"].as_u64().unwrap_or(0);
    assert_eq!(failed(&s), failed(&before), "agent 0: {s}");
    assert!(
        s["peer_events"]["restarts"].as_u64().unwrap_or(0) >= 2,
        "agent 0 saw both restarts: {s}"
    );
}

/// The same with the restarted agent's clock stepped back ten minutes (as NTP does to a clock
/// that ran ahead): its start, the incarnation its ranks' addresses name, is earlier than the
/// one agent 0 still holds a session with. Agent 0 asks the node (a probe on the old
/// session, answered by a Reset from the new start) instead of refusing the sends as stale,
/// and the job runs.
#[test]
fn a_job_right_after_an_agent_restart_with_its_clock_stepped_back() {
    let prog = program("p2p_basic");
    let mut agents = Agents::start("restart-back");
    Mpirun::new(2, &agents).run(&prog).assert_ok("p2p_basic");
    agents.restart_env(1, &[("TIGON_TEST_CLOCK_STEP_MS", "-600000")]);
    let r = Mpirun::new(2, &agents).run(&prog);
    if r.status != Some(0) {
        eprintln!(
            "agent 0: {}\nagent 1 log:\n{}",
            agents.stats(0),
            agents.log(1)
        );
    }
    r.assert_ok("p2p_basic");
    let s = agents.stats(0);
    assert_eq!(
        s["peer_events"]["stale_addresses"].as_u64(),
        Some(0),
        "agent 0: {s}"
    );
    assert!(
        s["peer_events"]["restarts"].as_u64().unwrap_or(0) >= 1,
        "agent 0 saw the restart: {s}"
    );
    // The test hook says so in the agent's log (an environment inherited unseen would
    // otherwise move a production agent's start time silently).
    let log = agents.log(1);
    assert!(
        log.contains("TIGON_TEST_CLOCK_STEP_MS=-600000") && log.contains("test hook"),
        "agent 1 log:\n{log}"
    );
}

/// Issue 17: ranks whose agents both run `--wire udp` talk through UDP/IPv4 on memif; agents
/// that disagree on the wire fail MPI_Init with both encapsulations named, at once (not by a
/// peer timeout).
#[test]
fn wire_udp_and_a_wire_mismatch() {
    let prog = program("p2p_basic");
    let udp = |ip: &'static str| -> [&'static str; 4] { ["--wire", "udp", "--ip", ip] };
    let (a, b) = (udp("10.71.1.1/24"), udp("10.71.1.2/24"));
    let agents = Agents::start_args("wire-udp", 30_000, [&a, &b]);
    let r = Mpirun::new(2, &agents).run(&prog);
    r.assert_ok("p2p_basic");
    for i in 0..2 {
        let s = agents.stats(i);
        assert!(
            s["link"]["udp"]["arp_learned"].as_u64().unwrap_or(0) >= 1,
            "agent {i}: {s}"
        );
    }
    drop(agents);
    let agents = Agents::start_args("wire-mismatch", 30_000, [&a, &[]]);
    let mut m = Mpirun::new(2, &agents);
    m.timeout = Duration::from_secs(60);
    let r = m.run(&prog);
    let text = r.text();
    assert!(r.status != Some(0), "the job must fail: {text}");
    // Each failing rank's own stderr line (not only mpirun's show_help forwarding, which Open
    // MPI 4.1.4 sometimes garbles when both ranks fail at once).
    assert!(
        text.contains("mtl:tigon: no tigon address for process")
            && text.contains("runs --wire udp")
            && text.contains("runs --wire ether")
            && text.contains("same --wire"),
        "{text}"
    );
}
