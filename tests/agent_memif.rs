//! Two `tigon agent`s joined by a memif pair (a shared-memory wire), two clients on each:
//! every message of 0 B … 16 MiB arrives byte-identical, whether it arrives before its
//! receive is posted (unexpected, found by a probe) or after (pre-posted), at MTU 1500 and
//! 9000. Two clients
//! of one agent talk through the engine's loopback without touching the wire.

mod common;
use common::*;

/// What every agent must show after the clients are gone: nothing held, nothing failed.
fn assert_clean(a: &Agent) {
    assert!(
        eventually(std::time::Duration::from_secs(10), || num(
            &a.stats(),
            "/clients"
        ) == 0),
        "agent {} still has clients: {}",
        a.name,
        a.stats()
    );
    let s = a.stats();
    assert_eq!(num(&s, "/serve/inflight"), 0, "{s}");
    assert_eq!(num(&s, "/messages/failed"), 0, "{s}");
    assert_eq!(num(&s, "/serve/clients_disconnected_garbage"), 0, "{s}");
}

#[test]
fn memif_two_agents_two_clients_each() {
    let dir = TestDir::new("memif");
    let (a, b) = memif_pair(&dir, &[]);
    exchange(&dir, "late", &[(&a, &b), (&a, &b)], &["--late"]);
    exchange(&dir, "pre", &[(&a, &b), (&b, &a)], &["--prepost"]);
    for x in [&a, &b] {
        assert_clean(x);
        let s = x.stats();
        assert_eq!(num(&s, "/serve/clients_attached_total"), 4, "{s}");
        assert!(num(&s, "/messages/rendezvous") > 0, "{s}");
        assert!(num(&s, "/messages/unexpected") > 0, "{s}");
        println!("agent {}: {s}", x.name);
    }
}

#[test]
fn memif_jumbo_two_agents_two_clients_each() {
    let dir = TestDir::new("memif9k");
    let (a, b) = memif_pair(&dir, &["--mtu", "9000"]);
    exchange(&dir, "pre", &[(&a, &b), (&b, &a)], &["--prepost"]);
    for x in [&a, &b] {
        assert_clean(x);
        let s = x.stats();
        // Jumbo frames: far fewer frames than bytes / 1500.
        assert!(
            num(&s, "/frames/tx_bytes") / num(&s, "/frames/tx") > 4000,
            "{s}"
        );
        assert_eq!(num(&s, "/link/rx_chained"), 0, "{s}");
    }
}

#[test]
fn intra_node_clients_talk_through_the_loopback() {
    let dir = TestDir::new("loop");
    let (a, b) = memif_pair(&dir, &[]);
    let (sa0, sb0) = (a.stats(), b.stats());
    exchange(&dir, "loop", &[(&a, &a), (&a, &a)], &[]);
    exchange(&dir, "loop-pre", &[(&a, &a)], &["--prepost"]);
    let (sa, sb) = (a.stats(), b.stats());
    assert_clean(&a);
    assert!(num(&sa, "/link/loopback_frames") > 1000, "{sa}");
    // Nothing went on the wire: the port sent nothing more, the other agent saw nothing.
    assert_eq!(
        num(&sa, "/port/opackets"),
        num(&sa0, "/port/opackets"),
        "{sa0}\n{sa}"
    );
    assert_eq!(
        num(&sb, "/port/ipackets"),
        num(&sb0, "/port/ipackets"),
        "{sb0}\n{sb}"
    );
    assert_eq!(num(&sb, "/frames/rx"), num(&sb0, "/frames/rx"), "{sb}");
    println!("agent a: {sa}");
}

/// A memif client agent whose server agent went away: `tigon stats` says its link is down
/// and `tigon doctor` says so (once the agent has peers), and when a server agent comes back
/// on the same memif socket the client's port connects to it again (restarted while its link
/// stays down: DPDK 22.11's memif client connects only when its port starts), so jobs across
/// the two run again, with the client port copying and in zero-copy mode. Before, the client
/// agent reached no peer until it was restarted too, with only peer timeouts to say so.
#[test]
fn a_memif_client_reconnects_to_a_server_agent_that_comes_back() {
    for role in ["client", "client,zero-copy=yes"] {
        let dir = TestDir::new("relink");
        let (mut a, b) = memif_pair_roles(&dir, "server", role, &[]);
        let up = |s: &serde_json::Value| s.pointer("/port_link/up").and_then(|v| v.as_bool());
        assert_eq!(up(&b.stats()), Some(true), "{}", b.stats());
        // A job ran: the client's agent holds a session with the server's.
        exchange(&dir, "before", &[(&a, &b)], &[]);
        a.kill();
        assert!(
            eventually(std::time::Duration::from_secs(10), || up(&b.stats())
                == Some(false)),
            "{}",
            b.stats()
        );
        let out = std::process::Command::new(TIGON)
            .args(["doctor", "--socket"])
            .arg(&b.socket)
            .output()
            .expect("running the doctor");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("link is DOWN"), "{text}");
        // While the server is away the client says so once and retries quietly: DPDK's
        // memif said "Failed to connect socket" at every retry, once a second.
        assert!(
            eventually(std::time::Duration::from_secs(10), || b
                .log_tail()
                .contains("trying to connect again every 1 s, quietly")),
            "{}",
            b.log_tail()
        );
        std::thread::sleep(std::time::Duration::from_secs(3));
        let dpdk_says = b.log_tail().matches("Failed to connect socket").count();
        assert!(dpdk_says <= 2, "{dpdk_says} times:\n{}", b.log_tail());
        // The server's agent comes back (a new incarnation, the same memif socket).
        let sock = dir.join("memif.sock");
        let port = format!("net_memif0,role=server,socket={}", sock.display());
        let a2 = Agent::start(&dir, "a2", &port, 0, None, &[]);
        assert!(
            eventually(std::time::Duration::from_secs(20), || up(&b.stats())
                == Some(true)),
            "{role}: {}\n{}",
            b.stats(),
            b.log_tail()
        );
        assert!(
            b.log_tail().contains("restarted to connect"),
            "{}",
            b.log_tail()
        );
        exchange(&dir, "after", &[(&a2, &b)], &[]);
        println!("{role}: b after: {}", b.stats());
    }
}
