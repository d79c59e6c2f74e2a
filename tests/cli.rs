//! Bad input is refused up front, in one line that names the value, what is allowed and the
//! fix, and nothing is started or created for it; output to a reader that went away ends the
//! CLI quietly (no panic); `--help` says what each option defaults to.
//!
//! One test starts an agent (lcore 0): nextest runs this binary in the `dpdk-pinned` group.

mod common;

use common::{Agent, TIGON, TestDir};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output, Stdio};

fn tigon(args: &[&str]) -> Output {
    Command::new(TIGON)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running tigon")
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The error line of a refused command: the first line of stderr that says what is wrong.
fn error_line(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .find(|l| l.starts_with("error:") || l.starts_with("tigon:"))
        .unwrap_or_default()
        .to_string()
}

/// Refused with a non-zero exit, in one line containing every one of `words`.
fn assert_refused(args: &[&str], words: &[&str]) -> String {
    let o = tigon(args);
    let line = error_line(&o);
    assert!(
        !o.status.success() && words.iter().all(|w| line.contains(w)),
        "`tigon {}` should be refused in one line with {words:?}: {}",
        args.join(" "),
        text(&o)
    );
    line
}

#[test]
fn run_options_are_checked_before_anything_starts() {
    // Before: the nft parser's error, after the namespaces were made.
    let line = assert_refused(
        &["run", "--fabric", "veth", "--loss", "150", "--", "true"],
        &["'150'", "--loss", "0 to 100"],
    );
    assert!(!line.contains("nft"), "{line}");
    assert_refused(
        &["run", "--mtu", "1400", "--", "true"],
        &["'1400'", "1500", "9000"],
    );
    assert_refused(
        &["run", "--nodes", "0", "--", "true"],
        &["'0'", "--nodes", "1 to"],
    );
    assert_refused(&["run", "-np", "0", "--", "true"], &["'0'", "at least 1"]);
    assert_refused(
        &["run", "--memif-zero-copy", "maybe", "--", "true"],
        &["'maybe'", "--memif-zero-copy"],
    );
    // A missing program is named as such, not as the error of a helper meant to start it.
    let line = assert_refused(
        &["run", "-np", "2", "./no-such-program-18"],
        &["`./no-such-program-18` not found"],
    );
    assert!(!line.contains("taskset"), "{line}");
    // A TIGON_MTL_DIR without the component: named (before: mpirun's "unknown option
    // --allow-run-as-root").
    let o = Command::new(TIGON)
        .args(["run", "-np", "2", "--", "true"])
        .env("TIGON_MTL_DIR", "/nonexistent-tigon-mtl")
        .output()
        .expect("running tigon run");
    let line = error_line(&o);
    assert!(
        !o.status.success()
            && line.contains("TIGON_MTL_DIR=/nonexistent-tigon-mtl: no mca_mtl_tigon.so there"),
        "{}",
        text(&o)
    );
    // An agent option tigon run sets itself (the agent refused it twice, after the
    // namespaces were made).
    assert_refused(
        &["run", "--agent-arg=--mtu=1500", "--", "true"],
        &[
            "--agent-arg=--mtu=1500",
            "tigon run sets the agents' --mtu itself",
            "tigon run --mtu",
        ],
    );
    assert_refused(
        &["run", "--agent-arg=--lcore", "--agent-arg=1", "--", "true"],
        &["--lcore", "--layout"],
    );
}

#[test]
fn bench_options_are_checked() {
    // Before: exit 0 and empty results.
    assert_refused(
        &["bench", "mpi", "--tests", "nope"],
        &["'nope'", "logp,bw,avail,dbuf,emp"],
    );
    assert_refused(&["bench", "engine", "--mtu", "1400"], &["'1400'", "1500"]);
    assert_refused(&["bench", "engine", "--scale", "0"], &["'0'", "above 0"]);
    assert_refused(&["demo", "--min", "10"], &["--min 10", "60 <= min"]);
}

#[test]
fn agent_options_are_checked_before_dpdk() {
    let dir = TestDir::new("cli-agent");
    let sock = dir.join("a.sock");
    let sock = sock.to_str().unwrap();
    let port = ["--port", "net_null0", "--socket", sock];
    // Before: a hundred lines of EAL usage.
    let o = tigon(&[&["agent", "--lcore", "99"][..], &port].concat());
    let line = error_line(&o);
    assert!(
        !o.status.success()
            && line.contains("--lcore 99")
            && line.contains("CPUs are")
            && String::from_utf8_lossy(&o.stderr).lines().count() <= 2,
        "{}",
        text(&o)
    );
    // `--no-huge` is a flag (before: "a value is required"): this run gets past it to the
    // next problem.
    let line = assert_refused(
        &[&["agent", "--no-huge", "--lcore", "99"][..], &port].concat(),
        &["--lcore 99"],
    );
    assert!(!line.contains("no-huge"), "{line}");
    // A channel too small or too large for any rank.
    for n in ["10", "100000"] {
        assert_refused(
            &[&["agent", "--channel-requests", n][..], &port].concat(),
            &[&format!("--channel-requests {n}"), "use 64 to 65536"],
        );
    }
    // A socket in a directory that does not exist: refused, and the directory is not made
    // (before: created as root and left behind).
    let missing = format!("/nonexistent-tigon-{}/dir", std::process::id());
    let bad_sock = format!("{missing}/a.sock");
    assert_refused(
        &["agent", "--port", "net_null0", "--socket", &bad_sock],
        &[&bad_sock, "does not exist", "mkdir -p"],
    );
    assert!(
        !std::path::Path::new(&missing).exists(),
        "{missing} was created"
    );
    for (opt, value, allowed) in [
        ("--mtu", "1400", "1500"),
        ("--idle", "busy", "spin"),
        ("--nice", "40", "-20 to 19"),
        ("--peer-timeout-ms", "0", "100 to 3600000"),
        (
            "--session-idle-ms",
            "3000",
            "more than the peer timeout (5000 ms)",
        ),
        ("--session-idle-ms", "99999999999", "0 to 86400000"),
        ("--max-ack-delay-us", "50001", "0 to 50000"),
        ("--max-ack-delay-busy-us", "60000", "0 to 50000"),
        ("--rndv-threshold", "999999999", "0 to 262144"),
        // Negative numbers get the option's range too (before: clap's "invalid digit found
        // in string", or "not in 0..=4294967295" for a range of 64 to 65536).
        ("--rndv-threshold", "-1", "0 to 262144"),
        ("--channel-requests", "-5", "use 64 to 65536"),
        ("--peer-timeout-ms", "-100", "100 to 3600000"),
        ("--lcore", "-1", "CPUs are"),
        ("--mtu", "-1", "1500"),
        ("--max-clients", "0", "use 1 to 65536"),
        ("--idle-poll-us", "0", "1 to 10000"),
        ("--cpu-latency", "-5", "off"),
        ("--dma", "ioat", "dma_skeleton0"),
    ] {
        assert_refused(
            &[&["agent", opt, value][..], &port].concat(),
            &[&format!("{opt} {value}"), allowed],
        );
    }
    assert_refused(&["agent", "--socket", sock], &["--port is required"]);
    assert!(!std::path::Path::new(sock).exists(), "{sock} was bound");
    // The UDP/IPv4 wire's options (issue 17).
    for (args, words) in [
        (&["--wire", "ip"][..], &["--wire ip", "udp"][..]),
        (&["--wire", "udp"][..], &["--wire udp needs --ip"][..]),
        (
            &["--wire", "udp", "--ip", "10.1.0.5/33"][..],
            &["--ip 10.1.0.5/33", "prefix"][..],
        ),
        (
            &["--wire", "udp", "--ip", "10.1.0/24"][..],
            &["--ip 10.1.0/24", "IPv4"][..],
        ),
        (
            &["--wire", "udp", "--ip", "224.0.0.1/24"][..],
            &["unicast"][..],
        ),
        (
            &[
                "--wire",
                "udp",
                "--ip",
                "10.1.0.5/24",
                "--gateway",
                "10.2.0.1",
            ][..],
            &["--gateway 10.2.0.1", "subnet"][..],
        ),
        (
            &["--wire", "udp", "--ip", "10.1.0.5/24", "--udp-port", "0"][..],
            &["--udp-port 0"][..],
        ),
        (
            &["--ip", "10.1.0.5/24"][..],
            &["--ip applies to --wire udp only"][..],
        ),
        (
            &["--rx-queues", "2"][..],
            &["--rx-queues 2", "--wire udp"][..],
        ),
        (
            &["--wire", "udp", "--ip", "10.1.0.5/24", "--rx-queues", "17"][..],
            &["--rx-queues 17"][..],
        ),
    ] {
        assert_refused(&[&["agent"][..], args, &port].concat(), words);
    }
    // Several nodes in one agent: each node's options are checked like the agent's, and
    // what belongs to the whole agent or would clash is refused, all before DPDK starts.
    let node = |port: &str, sock: &str| format!(r#"{{"port":"{port}","socket":"/tmp/{sock}"}}"#);
    let a = node("net_null0", "cli-a.sock");
    let bad_mtu = r#"{"port":"net_null1","socket":"/tmp/cli-b.sock","mtu":1234}"#;
    let lcore = r#"{"port":"net_null1","socket":"/tmp/cli-b.sock","lcore":1}"#;
    let same = node("net_null0", "cli-b.sock");
    let ns = r#"{"port":"net_null1","socket":"/tmp/cli-b.sock","netns":"tigon-no-such-ns"}"#;
    for (second, words) in [
        (bad_mtu, &["node 1: --mtu 1234"][..]),
        (lcore, &["node 1: \"lcore\" belongs to the agent"][..]),
        (&same, &["both name the port `net_null0`"][..]),
        (ns, &["--netns tigon-no-such-ns", "ip netns"][..]),
        ("{port:", &["--node {port:", "JSON"][..]),
    ] {
        assert_refused(&["agent", "--node", &a, "--node", second], words);
    }
}

#[test]
fn help_says_what_options_default_to() {
    let o = tigon(&["agent", "--help"]);
    let help = String::from_utf8_lossy(&o.stdout);
    // Every option's description says its default (or that it has none, or is required).
    let mut opt = String::new();
    let mut desc = String::new();
    let mut missing = Vec::new();
    for l in help.lines().chain(["  --end"]) {
        let t = l.trim_start();
        if t.starts_with("--") || t.starts_with("-h,") {
            if !opt.is_empty()
                && !opt.contains("--help")
                && !opt.contains("--eal")
                && !desc.contains("[default:")
                && !desc.contains("Required")
            {
                missing.push(opt.clone());
            }
            opt = t.to_string();
            desc.clear();
        } else {
            desc.push_str(t);
        }
    }
    assert!(
        o.status.success() && missing.is_empty(),
        "options without a default in `tigon agent --help`: {missing:?}\n{help}"
    );
    let o = tigon(&["--help"]);
    let top = String::from_utf8_lossy(&o.stdout);
    let demo = top
        .lines()
        .find(|l| l.trim_start().starts_with("demo"))
        .unwrap_or("");
    assert!(
        demo.contains("NetPIPE") && !demo.contains("Port-level"),
        "`tigon --help` on demo: {demo}"
    );
}

/// A command whose stdout is a pipe nobody reads any more (`tigon stats | head -1` once
/// head has gone): it must end quietly, as SIGPIPE ends a C program, not panic (exit 101).
fn to_closed_pipe(args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let o = Command::new(TIGON)
        .args(args)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("running tigon");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !err.contains("panicked") && o.status.code() != Some(101),
        "`tigon {}` into a closed pipe: {}",
        args.join(" "),
        text(&o)
    );
    o
}

#[test]
fn a_closed_pipe_ends_the_cli_quietly() {
    let dir = TestDir::new("cli-pipe");
    let port = format!(
        "net_memif0,role=server,socket={}",
        dir.join("m.sock").display()
    );
    let agent = Agent::start(&dir, "a", &port, 0, None, &[]);
    let o = to_closed_pipe(&["stats", "--socket", agent.socket.to_str().unwrap()]);
    assert_eq!(o.status.signal(), Some(libc::SIGPIPE), "{}", text(&o));
    to_closed_pipe(&["doctor", "--socket", agent.socket.to_str().unwrap()]);
    to_closed_pipe(&["--help"]);
    to_closed_pipe(&["agent", "--help"]);
}

/// A socket path where a file or a directory lies (a mistyped `--socket` or `TIGON_SOCKET`)
/// is said to be no socket, not "connection refused"; an empty `TIGON_SOCKET` means the
/// default socket, as the MTL's parameter help says (before: "Invalid argument").
#[test]
fn a_socket_path_that_is_no_socket_is_named_so() {
    let dir = TestDir::new("cli-nosock");
    let file = dir.join("agent.json");
    std::fs::write(&file, "{}\n").unwrap();
    for (path, kind) in [
        (file.to_str().unwrap(), "a file"),
        (dir.join("").to_str().unwrap(), "a directory"),
    ] {
        assert_refused(&["stats", "--socket", path], &["is not a socket but", kind]);
    }
    // A socket no agent listens on (an agent killed leaves its socket), and none at all.
    let stale = dir.join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert_refused(
        &["stats", "--socket", stale.to_str().unwrap()],
        &["no agent is listening there", "tigon agent --socket"],
    );
    let missing = dir.join("missing.sock");
    assert_refused(
        &["stats", "--socket", missing.to_str().unwrap()],
        &["no such socket", "is the agent running"],
    );
    let o = Command::new(TIGON)
        .arg("stats")
        .env("TIGON_SOCKET", "")
        .output()
        .expect("running tigon stats");
    // An agent may serve the default socket here (another test's): answered then.
    assert!(
        o.status.success() || error_line(&o).contains(tigon_client::DEFAULT_SOCKET),
        "{}",
        text(&o)
    );
}

/// A `--config` that is not one small JSON object of options: refused in one line by the
/// agent and the doctor alike. Before, a FIFO blocked forever, `/dev/zero` was read until
/// memory ran out, any size was read whole, and a top-level array got serde's positional
/// "expected struct AgentArgs with 30 elements" (helper-found).
#[test]
fn config_files_that_are_not_one_small_object_are_refused() {
    let dir = TestDir::new("cli-config");
    let array = dir.join("array.json");
    std::fs::write(&array, "[1, 2, 3]\n").unwrap();
    let big = dir.join("big.json");
    std::fs::write(&big, format!("{{\"port\": \"{}\"}}", "a".repeat(2 << 20))).unwrap();
    let fifo = dir.join("fifo.json");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string for the duration of the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    for (file, words) in [
        (
            array.to_str().unwrap(),
            &["one JSON object", "without `--`"][..],
        ),
        (
            big.to_str().unwrap(),
            &["bytes, more than", "at most 1048576"][..],
        ),
        (fifo.to_str().unwrap(), &["not a regular file"][..]),
        ("/dev/zero", &["not a regular file"][..]),
    ] {
        assert_refused(&["agent", "--config", file], words);
        let o = tigon(&["doctor", "--config", file]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            !o.status.success() && words.iter().all(|w| out.contains(w)),
            "doctor --config {file}: {}",
            text(&o)
        );
    }
}
