//! Idle sessions are retired (`Config::session_idle_ns`) and come back on the next message,
//! on a link that loses, duplicates and reorders: whichever side retired, and whichever side
//! speaks first, every message arrives exactly once, intact and in order, and no operation
//! fails.

mod common;
use common::*;
use tigon_engine::matching::match_bits;
use tigon_engine::sim::Faults;
use tigon_engine::*;

const CTX: u32 = 4;

fn faults() -> Faults {
    Faults {
        loss: 0.03,
        duplicate: 0.03,
        reorder: 0.05,
        delay_ns: 5_000,
        reorder_ns: 30_000,
        ..Faults::default()
    }
}

fn cfg(session_idle_ms: u64) -> Config {
    Config {
        peer_timeout_ns: 20_000_000,
        credit_idle_ns: 5_000_000,
        session_idle_ns: session_idle_ms * 1_000_000,
        ..Config::default()
    }
}

/// Node 0 and node 1 each send `n` messages (small, eager and rendezvous sizes, some
/// synchronous) to the other's endpoint 0 at once; the receives take them in order (ANY_TAG,
/// one source), and each must hold the message of its own index.
fn exchange(w: &mut World, round: u32, n: u32) {
    let mut want = Vec::new();
    let mut left = 0;
    for node in 0..2usize {
        let other = 1 - node;
        let dst = EndpointAddr::new(mac(other), 0);
        for k in 0..n {
            let len = match k % 4 {
                0 => 40,
                1 => 3_000,
                2 => 50_000,
                _ => 0,
            };
            let tag = round * 1000 + k;
            let buf = w.mem(node).insert(pattern(node as u32, tag, len));
            let mode = if k % 5 == 4 {
                SendMode::Synchronous
            } else {
                SendMode::Standard
            };
            w.nodes[node]
                .eng
                .isend(0, dst, match_bits(CTX, tag as i32), node as u32, buf, mode)
                .unwrap();
            let rb = w.mem(other).insert(vec![0xee; len]);
            let r = w.nodes[other]
                .eng
                .irecv(0, MatchSpec::mpi(CTX, node as i32, ANY_TAG), rb)
                .unwrap();
            want.push((other, r, rb, pattern(node as u32, tag, len), tag));
            left += 2;
        }
    }
    let mut got = std::collections::HashMap::new();
    w.run_until(5_000_000, |w| {
        for i in 0..2 {
            while let Some(c) = w.nodes[i].eng.pop_completion() {
                match c.result {
                    Ok(o) => {
                        got.insert((i, c.req), o);
                    }
                    Err(e) => panic!("node {i}: operation failed: {e}"),
                }
                left -= 1;
            }
        }
        left == 0
    });
    for (i, r, rb, data, tag) in want {
        match got.get(&(i, r)) {
            Some(Outcome::Received { info, .. }) => {
                assert_eq!(info.match_bits, match_bits(CTX, tag as i32), "out of order");
            }
            o => panic!("receive {r:?}: {o:?}"),
        }
        assert!(
            w.mem(i).get(&rb).unwrap() == &data,
            "message {tag} corrupted"
        );
    }
}

/// Steps idle until virtual time `ms` later.
fn idle(w: &mut World, ms: u64) {
    let until = w.now + ms * 1_000_000;
    w.run_until(10_000_000, |w| w.now >= until);
}

#[test]
fn idle_sessions_are_retired_and_a_new_one_carries_the_next_messages() {
    let mut w = World::new(2, faults(), 31, cfg(50));
    for i in 0..2 {
        w.nodes[i].eng.open_endpoint(Some(0)).unwrap();
    }
    exchange(&mut w, 1, 20);
    idle(&mut w, 150);
    for i in 0..2 {
        let s = &w.nodes[i].eng.stats;
        assert_eq!(s.sessions_retired, 1, "node {i}: {s:?}");
        assert_eq!(s.peers, 0, "node {i}: no peer node known once retired");
        assert_eq!(w.nodes[i].eng.armed_peers(), 0);
        assert_eq!(
            w.nodes[i].eng.credit_granted_bytes(),
            0,
            "grants given back"
        );
    }
    // Both forgot: the next messages set a new session up, and reuse the retired slot.
    exchange(&mut w, 2, 20);
    for i in 0..2 {
        let e = &w.nodes[i].eng;
        assert_eq!(e.stats.peers, 1, "node {i}: the new session counts once");
        assert_eq!(e.peer_memory().0, 1, "node {i}: the retired slot is reused");
        assert_eq!(e.stats.ops_failed, 0);
    }
}

#[test]
fn a_session_retired_by_one_side_is_renewed_by_the_other_without_loss_or_duplicates() {
    // Node 1 retires after 50 ms; node 0 never does and still holds the session.
    let mut w = World::new(2, faults(), 47, cfg(0));
    w.cfg = cfg(50);
    w.add_node(1, 4242);
    for i in 0..2 {
        w.nodes[i].eng.open_endpoint(Some(0)).unwrap();
    }
    exchange(&mut w, 1, 20);
    for round in 2..5 {
        idle(&mut w, 150);
        // Both speak at once: node 0 in the session node 1 forgot (answered by a Reset),
        // node 1 with a new Connect (its stream starts elsewhere: node 0 sees a new session).
        exchange(&mut w, round, 24);
    }
    let (a, b) = (&w.nodes[0].eng.stats, &w.nodes[1].eng.stats);
    assert_eq!(a.sessions_retired, 0);
    assert_eq!(b.sessions_retired, 3, "{b:?}");
    assert!(a.sessions_renewed >= 3, "{a:?}");
    assert_eq!(a.ops_failed + b.ops_failed, 0);
    assert_eq!(a.peer_restarts + b.peer_restarts, 0);
}

#[test]
fn a_session_idle_time_shorter_than_the_peer_timeout_is_refused() {
    let c = Config {
        session_idle_ns: 1_000_000,
        ..cfg(0)
    };
    assert!(c.validate().is_err());
    assert!(cfg(50).validate().is_ok() && cfg(0).validate().is_ok());
}
