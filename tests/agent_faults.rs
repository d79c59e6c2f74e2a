//! Faults: clients killed mid-transfer (100 in a row), the agent killed or terminated under
//! its clients, a client writing garbage into its request ring, a client of a uid the agent
//! does not allow, a port that makes frames up (net_null), one that takes none, and
//! connections to the control socket that trickle, say nothing or never end their request.

mod common;
use common::*;
use std::time::{Duration, Instant};

/// One agent on a memif port nobody connects to (the fault tests that need no wire).
fn lone_agent(dir: &TestDir, name: &str, lcore: u32, extra: &[&str]) -> Agent {
    let port = format!(
        "net_memif0,role=server,socket={}",
        dir.join(&format!("{name}-memif.sock")).display()
    );
    Agent::start(dir, name, &port, lcore, None, extra)
}

/// An agent on `net_null0` (a node whose ranks only talk among themselves, as in issue 15's
/// intra-node set-up): DPDK's null driver makes up a burst of frames at every receive call
/// unless told `no-rx=1`, which the agent now asks for; before, the engine dropped hundreds of
/// millions of them as foreign and its ranks' one-way latency tripled.
#[test]
fn a_null_port_gives_the_engine_no_made_up_frames() {
    let dir = TestDir::new("null");
    let a = Agent::start(&dir, "a", "net_null0", 0, None, &[]);
    exchange(&dir, "own", &[(&a, &a)], &[]);
    let s = a.stats();
    assert_eq!(num(&s, "/port/ipackets"), 0, "{s}");
    assert_eq!(num(&s, "/drops/foreign"), 0, "{s}");
    assert_eq!(num(&s, "/messages/failed"), 0, "{s}");
    // Asked for explicitly, the made-up frames come, and are dropped as foreign.
    let dir = TestDir::new("null-rx");
    let a = Agent::start(&dir, "a", "net_null0,no-rx=0", 0, None, &[]);
    exchange(&dir, "own", &[(&a, &a)], &[]);
    let s = a.stats();
    assert!(num(&s, "/drops/foreign") > 0, "{s}");
}

/// Under `--wire udp`, a port that takes no frame (a memif server nobody connects to, as a
/// NIC whose link is down): the frames it refuses, already encapsulated (here the ARP
/// requests for the destination), wait in the engine's queue, which counts the
/// back-pressure and builds no more meanwhile; the agent goes on serving, and a send to the
/// node that never answers fails as unreachable after the peer timeout. (They used to wait in
/// the link's own queue, unseen by the engine: `tx_backpressure` stayed 0, and with each ARP
/// retry the queue grew for as long as the link was down.)
#[test]
fn a_port_that_takes_nothing_holds_udp_frames_back_and_the_send_fails_unreachable() {
    let dir = TestDir::new("udp-refused");
    let a = lone_agent(
        &dir,
        "a",
        0,
        &[
            "--wire",
            "udp",
            "--ip",
            "10.77.0.1/24",
            "--peer-timeout-ms",
            "2000",
        ],
    );
    let c = tigon_client::Client::attach(&a.socket).expect("attach to a");
    let to: tigon_engine::Dest = "udp:10.77.0.2:7470/0".parse().expect("an address");
    let bits = tigon_engine::matching::match_bits(1, 1);
    let s = c
        .isend(to, bits, 0, b"hello", tigon_engine::SendMode::Standard)
        .expect("isend");
    let r = c.wait(s);
    assert!(
        matches!(&r, Err(tigon_client::Error::Failed { status, .. })
            if *status == tigon_engine::channel::status::PEER_UNREACHABLE),
        "{r:?}"
    );
    let st = a.stats();
    assert!(num(&st, "/link/udp/arp_requests_sent") >= 2, "{st}");
    assert!(num(&st, "/frames/tx_backpressure") > 0, "{st}");
    assert_eq!(num(&st, "/port/opackets"), 0, "{st}");
}

#[test]
fn sigkill_clients_mid_transfer_100_times() {
    let dir = TestDir::new("kill100");
    let (mut a, mut b) = memif_pair(&dir, &[]);
    // A first exchange brings the memif link up and everything that starts lazily.
    exchange(&dir, "before", &[(&a, &b)], &[]);
    let fds = (a.fds(), b.fds());
    let mode = [
        "exchange",
        "--sizes",
        "16M,1M,40k,100",
        "--rounds",
        "100000",
    ];
    let mut rng: u64 = 0x2545_f491_4f6c_dd1d;
    let mut moved = num(&a.stats(), "/frames/tx_bytes") + num(&b.stats(), "/frames/tx_bytes");
    let t = Instant::now();
    for i in 0..100 {
        let (v, w) = (format!("v{i}"), format!("w{i}"));
        // The victim and its partner, on either agent, in turn.
        let (x, y) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let mut pv = Peer::spawn(&dir, x, &v, Some(&w), 0, &mode);
        let mut pw = Peer::spawn(&dir, y, &w, Some(&v), 1, &mode);
        // Kill only once bytes of this pair are on the move ...
        let started = eventually(Duration::from_secs(30), || {
            let n = num(&a.stats(), "/frames/tx_bytes") + num(&b.stats(), "/frames/tx_bytes");
            n > moved + (1 << 20)
        });
        if !started {
            for g in [&a, &b] {
                eprintln!("agent {} stats: {}", g.name, g.stats_now());
            }
            for p in [&pv, &pw] {
                eprintln!("peer {}: {}{}", p.name, p.stdout(), p.stderr());
            }
            panic!("iteration {i}: no transfer started in 30 s");
        }
        // ... and at a random point of it.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_millis(rng % 30));
        pv.kill();
        pw.kill();
        moved = num(&a.stats(), "/frames/tx_bytes") + num(&b.stats(), "/frames/tx_bytes");
    }
    println!("100 kills in {:?}", t.elapsed());
    for x in [&mut a, &mut b] {
        assert!(x.alive(), "agent {} died:\n{}", x.name, x.log_tail());
        let gone = eventually(Duration::from_secs(10), || num(&x.stats(), "/clients") == 0);
        let s = x.stats();
        assert!(gone, "agent {}: clients left: {s}", x.name);
        println!("agent {}: {s}", x.name);
        // One victim and one partner per kill, one on each agent; and the first exchange.
        assert_eq!(num(&s, "/serve/clients_reclaimed"), 101, "{s}");
        assert_eq!(num(&s, "/serve/clients_attached_total"), 101, "{s}");
        assert_eq!(num(&s, "/serve/inflight"), 0, "{s}");
        assert_eq!(num(&s, "/serve/clients_disconnected_garbage"), 0, "{s}");
    }
    // Every channel and socket of the dead is closed.
    assert!(
        eventually(Duration::from_secs(5), || a.fds() <= fds.0
            && b.fds() <= fds.1),
        "file descriptors {fds:?} before, {:?} after",
        (a.fds(), b.fds())
    );
    // The agents go on serving.
    exchange(&dir, "after", &[(&a, &b), (&b, &a)], &[]);
}

#[test]
fn agent_sigkill_fails_pending_and_new_operations_within_2s() {
    let dir = TestDir::new("akill");
    let mut a = lone_agent(&dir, "a", 0, &[]);
    let mut h = Peer::spawn(&dir, &a, "h", None, 1, &["hold"]);
    h.wait_line(Duration::from_secs(30), |l| l == "holding");
    // A pending receive, and a pending 1 MiB send to `h` (which never receives it).
    let mut o = Peer::spawn(&dir, &a, "o", Some("h"), 0, &["orphan"]);
    o.wait_line(Duration::from_secs(30), |l| l == "posted");
    std::thread::sleep(Duration::from_millis(100));
    a.kill();
    let t = Instant::now();
    let line = o.wait_line(Duration::from_secs(10), |l| l.starts_with('{'));
    let took = t.elapsed();
    println!("orphan: {line} after {took:?}");
    let v: serde_json::Value = serde_json::from_str(&line).expect("orphan's report");
    assert_eq!(v["pending_failed"], true, "{v}");
    assert_eq!(v["send_failed"], true, "{v}");
    assert_eq!(v["new_failed"], true, "{v}");
    assert!(took < Duration::from_secs(2), "the error took {took:?}");
    o.wait_ok(Duration::from_secs(10));
    h.kill();
    // Nothing of the dead agent stands in the way of the next one on the same socket: no
    // hugepage files (it runs --in-memory), a stale socket file replaced.
    let left: Vec<_> = std::fs::read_dir("/dev/hugepages")
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    let left: Vec<_> = left
        .iter()
        .filter(|n| n.to_string_lossy().starts_with("tigon-"))
        .collect();
    assert!(left.is_empty(), "hugepage files left: {left:?}");
    let a = lone_agent(&dir, "a", 0, &[]);
    exchange(&dir, "again", &[(&a, &a)], &[]);
}

#[test]
fn agent_sigterm_exits_0_removes_its_socket_and_fails_its_clients() {
    let dir = TestDir::new("aterm");
    let mut a = lone_agent(&dir, "a", 0, &[]);
    let mut o = Peer::spawn(&dir, &a, "o", None, 0, &["orphan"]);
    o.wait_line(Duration::from_secs(30), |l| l == "posted");
    // A second agent on the same socket refuses to start (and leaves the first alone).
    let second = std::process::Command::new(TIGON)
        .args(["agent", "--port", "net_null0", "--socket"])
        .arg(&a.socket)
        .output()
        .expect("running a second agent");
    let err = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{err}");
    assert!(err.contains("already serving"), "{err}");
    assert!(a.alive());
    let status = a.terminate(Duration::from_secs(10));
    assert_eq!(status.code(), Some(0), "{status}\n{}", a.log_tail());
    assert!(!a.socket.exists(), "{} left behind", a.socket.display());
    let line = o.wait_line(Duration::from_secs(2), |l| l.starts_with('{'));
    let v: serde_json::Value = serde_json::from_str(&line).expect("orphan's report");
    assert_eq!(v["pending_failed"], true, "{v}");
    assert_eq!(v["new_failed"], true, "{v}");
    println!("orphan: {v}");
    o.wait_ok(Duration::from_secs(10));
}

#[test]
fn garbage_client_is_disconnected_and_the_others_are_served() {
    let dir = TestDir::new("garbage");
    let a = lone_agent(&dir, "a", 0, &[]);
    let mode = ["exchange", "--sizes", SIZES, "--rounds", "3"];
    let mut x = Peer::spawn(&dir, &a, "x", Some("y"), 0, &mode);
    let mut y = Peer::spawn(&dir, &a, "y", Some("x"), 1, &mode);
    let mut g = Peer::spawn(&dir, &a, "g", None, 2, &["garbage"]);
    let out = g.wait_ok(Duration::from_secs(30));
    assert!(out.contains("disconnected"), "{out}");
    x.wait_ok(Duration::from_secs(120));
    y.wait_ok(Duration::from_secs(120));
    let s = a.stats();
    println!("agent: {s}");
    assert_eq!(num(&s, "/serve/clients_disconnected_garbage"), 1, "{s}");
    assert!(
        a.log_tail().contains("disconnecting it"),
        "{}",
        a.log_tail()
    );
    // And afterwards.
    exchange(&dir, "after", &[(&a, &a)], &[]);
    assert!(eventually(Duration::from_secs(5), || num(
        &a.stats(),
        "/clients"
    ) == 0));
    assert_eq!(num(&a.stats(), "/serve/inflight"), 0);
}

const NOBODY: &[&str] = &[
    "setpriv",
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
];

#[test]
fn client_of_a_uid_not_allowed_is_refused() {
    let dir = TestDir::new("uid");
    // Peers running as nobody publish their addresses here too.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.addr(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let a = lone_agent(&dir, "a", 0, &[]);
    let mut p = Peer::spawn_with(NOBODY, &dir, &a.socket, "n", None, 0, &["hold"]);
    let e = p.wait(Duration::from_secs(30));
    assert_eq!(e.status.code(), Some(1), "{e:?}");
    assert!(
        e.stderr.contains("uid 65534 is not allowed"),
        "stderr: {}",
        e.stderr
    );
    println!("refused: {}", e.stderr.trim());
    let s = a.stats();
    assert_eq!(num(&s, "/serve/clients_attached_total"), 0, "{s}");
    assert!(a.log_tail().contains("refused client"), "{}", a.log_tail());

    // The same uid, allowed by a configuration file, attaches and exchanges with root.
    let cfg = dir.join("agent.json");
    std::fs::write(&cfg, r#"{ "allow-uid": [0, 65534], "idle": "yield" }"#).unwrap();
    let b = lone_agent(&dir, "b", 1, &["--config", cfg.to_str().unwrap()]);
    let mode = ["exchange", "--sizes", "0,100,40k,1M"];
    let mut peers = [
        Peer::spawn_with(NOBODY, &dir, &b.socket, "n2", Some("r2"), 0, &mode),
        Peer::spawn(&dir, &b, "r2", Some("n2"), 1, &mode),
    ];
    for out in wait_peers("nobody", &mut peers, &[&b], Duration::from_secs(120)) {
        println!("nobody and root: {}", out.trim());
    }
    println!("agent b: {}", b.stats());
}

/// The control socket is anyone's to connect to (the uid is checked on attach): a client
/// that says nothing, one that trickles a byte at a time and one that sends a request line
/// without end must hold up no one else and cost the agent no memory beyond a request's
/// bound. Before, connections were read one at a time with a timeout that each byte
/// restarted (a trickler held `tigon stats` and every attach off for as long as it went on),
/// and a line was read whole however long (1.5 GB sent raised the agent's RSS by as much).
#[test]
fn slow_silent_and_endless_requests_hold_up_no_one() {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = TestDir::new("ctlslow");
    let a = lone_agent(&dir, "a", 0, &[]);
    let silent: Vec<UnixStream> = (0..5)
        .map(|_| UnixStream::connect(&a.socket).expect("connect"))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let trickler = {
        let mut s = UnixStream::connect(&a.socket).expect("connect");
        let stop = stop.clone();
        std::thread::spawn(move || {
            // Kept up until the others were served (past `stats`' minute of patience if they
            // are not), a byte every 300 ms; then what the agent answered.
            while !stop.load(Ordering::Relaxed) {
                if s.write_all(b" ").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(300));
            }
            let mut reply = String::new();
            let _ = s.read_to_string(&mut reply);
            reply
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let before = a.stats();
    println!("served beside 5 silent connections and a trickling one: {before}");
    stop.store(true, Ordering::Relaxed);
    let reply = trickler.join().expect("trickler");
    assert!(
        reply.contains("no complete request line within 2 s"),
        "the trickler got: {reply:?}"
    );
    // A request line without end: refused once past the bound, the connection closed.
    let mut endless = UnixStream::connect(&a.socket).expect("connect");
    let chunk = vec![b'x'; 64 << 10];
    for _ in 0..16 {
        if endless.write_all(&chunk).is_err() {
            break;
        }
    }
    let mut reply = String::new();
    let _ = endless.read_to_string(&mut reply);
    assert!(reply.contains("longer than 4096 bytes"), "reply: {reply:?}");
    drop(silent);
    // And a client still attaches and exchanges afterwards.
    exchange(&dir, "after", &[(&a, &a)], &[]);
    assert_eq!(num(&a.stats(), "/serve/clients_attached_total"), 2);
}

/// A path that is not a socket, named as the agent's `--socket` (a typo, the config file),
/// is refused and left as it was: the agent removed whatever lay there that no agent
/// answered on, so the file was gone after the agent ran.
#[test]
fn a_file_named_as_the_socket_is_refused_and_kept() {
    let dir = TestDir::new("sockfile");
    let file = dir.join("agent.json");
    std::fs::write(&file, "precious\n").unwrap();
    let sub = dir.join("a-directory");
    std::fs::create_dir(&sub).unwrap();
    // The agent's exit status and stderr with `path` as its socket.
    let agent_on = |path: &std::path::Path| {
        let out = std::process::Command::new(TIGON)
            .args(["agent", "--port", "net_null0", "--socket"])
            .arg(path)
            .output()
            .expect("running the agent");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), err)
    };
    for path in [&file, &sub] {
        let (code, err) = agent_on(path);
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains("exists and is not a socket"), "{err}");
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "precious\n");
    assert!(sub.is_dir());
    // A symbolic link (dangling, or to a socket): said to be one, and kept (before: "exists
    // and is not a socket", which misled when it named a live agent's socket).
    let link = dir.join("link.sock");
    std::os::unix::fs::symlink(dir.join("nowhere.sock"), &link).unwrap();
    let (code, err) = agent_on(&link);
    assert!(
        code == Some(1) && err.contains("is a symbolic link"),
        "{err}"
    );
    assert!(
        std::fs::symlink_metadata(&link).is_ok(),
        "the link was removed"
    );
}

/// `--max-clients`: the agent serves that many ranks at once and refuses one more with an
/// error naming the option (each attach takes a channel of shared memory: before, nothing
/// bounded how many one allowed user could take). A rank that leaves makes room again.
#[test]
fn attaches_past_max_clients_are_refused_by_name() {
    let dir = TestDir::new("max-clients");
    let a = Agent::start(&dir, "a", "net_null0", 0, None, &["--max-clients", "2"]);
    let c1 = tigon_client::Client::attach(&a.socket).expect("first rank");
    let _c2 = tigon_client::Client::attach(&a.socket).expect("second rank");
    let e = tigon_client::Client::attach(&a.socket)
        .err()
        .expect("a third rank is refused")
        .to_string();
    assert!(e.contains("max-clients") && e.contains("2 ranks"), "{e}");
    let st = a.stats();
    assert_eq!(num(&st, "/serve/refused_max_clients"), 1, "{st}");
    assert_eq!(num(&st, "/serve/clients"), 2, "{st}");
    drop(c1);
    assert!(
        eventually(Duration::from_secs(10), || num(
            &a.stats(),
            "/serve/clients"
        ) == 1),
        "{}",
        a.stats()
    );
    let _c3 = tigon_client::Client::attach(&a.socket).expect("room again");
}
