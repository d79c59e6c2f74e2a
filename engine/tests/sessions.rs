//! Sessions per remote node: every rank pair between two nodes rides on one session, and a
//! message to an endpoint that is not open (or closes while it waits) fails its sender with an
//! error instead of stalling the node's stream.

mod common;
use common::*;
use tigon_engine::matching::match_bits;
use tigon_engine::sim::Faults;
use tigon_engine::*;

const CTX: u32 = 3;
const EPS: u16 = 16;

fn world(faults: Faults) -> World {
    World::new(2, faults, 5, Config::default())
}

#[test]
fn all_rank_pairs_of_two_nodes_share_one_session() {
    let faults = Faults {
        loss: 0.02,
        reorder: 0.02,
        delay_ns: 5_000,
        reorder_ns: 20_000,
        ..Faults::default()
    };
    let mut w = world(faults);
    let a: Vec<EndpointAddr> = (0..EPS)
        .map(|e| w.nodes[0].eng.open_endpoint(Some(e)).unwrap())
        .collect();
    let b: Vec<EndpointAddr> = (0..EPS)
        .map(|e| w.nodes[1].eng.open_endpoint(Some(e)).unwrap())
        .collect();
    // Every endpoint of each node sends to every endpoint of the other: 2 x 16 x 16 messages,
    // small and rendezvous-sized, in both directions at once.
    let mut ops = Vec::new();
    for (node, from, to) in [(0usize, &a, &b), (1, &b, &a)] {
        for (i, _) in from.iter().enumerate() {
            for (j, dst) in to.iter().enumerate() {
                let len = if (i + j) % 3 == 0 { 100_000 } else { 200 };
                let rank = (node * EPS as usize + i) as u32;
                let buf = w.mem(node).insert(pattern(rank, j as u32, len));
                let s = w.nodes[node]
                    .eng
                    .isend(
                        i as u16,
                        *dst,
                        match_bits(CTX, 1),
                        rank,
                        buf,
                        SendMode::Standard,
                    )
                    .unwrap();
                ops.push((node, s, None));
                let other = 1 - node;
                let rb = w.mem(other).insert(vec![0; len]);
                let r = w.nodes[other]
                    .eng
                    .irecv(j as u16, MatchSpec::mpi(CTX, rank as i32, 1), rb)
                    .unwrap();
                ops.push((other, r, Some((rb, pattern(rank, j as u32, len)))));
            }
        }
    }
    let mut left = ops.len();
    let mut done = std::collections::HashMap::new();
    w.run_until(20_000_000, |w| {
        for n in 0..2 {
            while let Some(c) = w.nodes[n].eng.pop_completion() {
                assert!(c.result.is_ok(), "{c:?}");
                done.insert((n, c.req), ());
                left -= 1;
            }
        }
        left == 0
    });
    for (n, id, want) in ops {
        assert!(done.contains_key(&(n, id)));
        if let Some((rb, data)) = want {
            assert!(w.mem(n).get(&rb).unwrap() == &data, "corrupted");
        }
    }
    for n in 0..2 {
        let e = &w.nodes[n].eng;
        assert_eq!(e.stats.peers, 1, "node {n}: one session for 256 rank pairs");
        assert_eq!(e.peer_memory().0, 1);
    }
}

/// Node 0 sends `len` bytes in `mode` to endpoint 9 of node 1, which is not open.
fn send_to_nowhere(len: usize, mode: SendMode) -> Completion {
    let mut w = world(Faults {
        delay_ns: 5_000,
        ..Faults::default()
    });
    w.nodes[0].eng.open_endpoint(Some(0)).unwrap();
    w.nodes[1].eng.open_endpoint(Some(0)).unwrap();
    let nowhere = EndpointAddr::new(mac(1), 9);
    let buf = w.mem(0).insert(vec![1; len]);
    let s = w.nodes[0]
        .eng
        .isend(0, nowhere, match_bits(CTX, 1), 0, buf, mode)
        .unwrap();
    let c = w.wait(0, s, 1_000_000);
    assert!(w.nodes[1].eng.stats.drop_no_endpoint >= 1);
    c
}

#[test]
fn a_message_to_an_endpoint_not_open_fails_its_sender() {
    let nowhere = EndpointAddr::new(mac(1), 9);
    // Rendezvous and synchronous senders wait for the receiver: they must hear it is not there.
    for (len, mode) in [
        (1 << 20, SendMode::Standard),
        (100, SendMode::Synchronous),
        (10_000, SendMode::Synchronous),
    ] {
        let c = send_to_nowhere(len, mode);
        assert_eq!(
            c.result,
            Err(Error::PeerRestarted(nowhere)),
            "{len} B {mode:?}"
        );
    }
}

#[test]
fn closing_an_endpoint_fails_the_senders_it_was_pulling_from_and_keeps_the_session() {
    let mut w = world(Faults {
        delay_ns: 5_000,
        ..Faults::default()
    });
    w.nodes[0].eng.open_endpoint(Some(0)).unwrap();
    let b0 = w.nodes[1].eng.open_endpoint(Some(0)).unwrap();
    let b1 = w.nodes[1].eng.open_endpoint(Some(1)).unwrap();
    // A large transfer to endpoint 0 and an unexpected rendezvous message to it.
    let big = w.mem(0).insert(vec![3; 8 << 20]);
    let s = w.nodes[0]
        .eng
        .isend(0, b0, match_bits(CTX, 1), 0, big, SendMode::Standard)
        .unwrap();
    let waiting = w.mem(0).insert(vec![4; 1 << 20]);
    let s2 = w.nodes[0]
        .eng
        .isend(0, b0, match_bits(CTX, 2), 0, waiting, SendMode::Standard)
        .unwrap();
    let rb = w.mem(1).insert(vec![0; 8 << 20]);
    let r = w.nodes[1]
        .eng
        .irecv(0, MatchSpec::mpi(CTX, 0, 1), rb)
        .unwrap();
    w.run_until(1_000_000, |w| w.nodes[1].eng.stats.rx_frames > 300);
    w.nodes[1].eng.close_endpoint(0);
    let c = w.nodes[1]
        .eng
        .pop_completion()
        .expect("the receive fails at once");
    assert_eq!((c.req, c.result), (r, Err(Error::EndpointClosed)));
    let mut failed = Vec::new();
    w.run_until(1_000_000, |w| {
        while let Some(c) = w.nodes[0].eng.pop_completion() {
            failed.push(c);
        }
        failed.len() == 2
    });
    for c in &failed {
        assert!([s, s2].contains(&c.req));
        assert_eq!(c.result, Err(Error::PeerRestarted(b0)));
    }
    // The session stays for the node's other endpoint.
    let buf = w.mem(0).insert(pattern(0, 7, 50_000));
    let s3 = w.nodes[0]
        .eng
        .isend(0, b1, match_bits(CTX, 3), 0, buf, SendMode::Standard)
        .unwrap();
    let rb = w.mem(1).insert(vec![0; 50_000]);
    let r = w.nodes[1]
        .eng
        .irecv(1, MatchSpec::mpi(CTX, 0, 3), rb)
        .unwrap();
    assert!(w.wait(1, r, 1_000_000).result.is_ok());
    assert!(w.mem(1).get(&rb).unwrap() == &pattern(0, 7, 50_000));
    assert!(w.wait(0, s3, 1_000_000).result.is_ok());
    assert_eq!(w.nodes[0].eng.stats.peers, 1);
    assert_eq!(w.nodes[0].eng.stats.peer_restarts, 0);
}

#[test]
fn closing_an_endpoint_fails_its_sends_to_every_node_whether_queued_or_in_flight() {
    let mut w = World::new(3, Faults::default(), 9, Config::default());
    for n in 0..3 {
        w.nodes[n].eng.open_endpoint(Some(0)).unwrap();
    }
    w.nodes[0].eng.open_endpoint(Some(1)).unwrap();
    let to = |n: usize| EndpointAddr::new(mac(n), 0);
    // To node 1: a synchronous send nobody receives yet, in flight for a while (its peer is
    // armed for the timers), and one from the other endpoint.
    let b = w.mem(0).insert(vec![1; 100]);
    let sync = w.nodes[0]
        .eng
        .isend(0, to(1), match_bits(CTX, 1), 0, b, SendMode::Synchronous)
        .unwrap();
    let keep = w.nodes[0]
        .eng
        .isend(1, to(1), match_bits(CTX, 2), 1, b, SendMode::Standard)
        .unwrap();
    w.run_until(100_000, |w| w.nodes[1].eng.stats.rx_frames >= 2);
    assert!(w.nodes[0].eng.is_pending(sync));
    // To node 2: queued just now, before any poll (its peer is connecting, on the transmit
    // list and not armed yet).
    let queued = w.nodes[0]
        .eng
        .isend(0, to(2), match_bits(CTX, 3), 0, b, SendMode::Standard)
        .unwrap();
    w.nodes[0].eng.close_endpoint(0);
    let mut failed = Vec::new();
    while let Some(c) = w.nodes[0].eng.pop_completion() {
        failed.push((c.req, c.result));
    }
    failed.sort_by_key(|(r, _)| r.as_u64());
    assert_eq!(
        failed,
        [
            (sync, Err(Error::EndpointClosed)),
            (queued, Err(Error::EndpointClosed))
        ]
    );
    assert!(
        w.wait(0, keep, 1_000_000).result.is_ok(),
        "the other endpoint's send"
    );
}

/// The first small message to a node rides right behind the Connect: it is delivered one
/// way after it was sent, a round trip before the handshake's answer would let it go (and
/// its send completes on that answer). A message too large for the first credit waits for
/// the answer.
#[test]
fn the_first_small_message_to_a_node_rides_behind_the_connect() {
    const DELAY: u64 = 200_000;
    for (len, rides) in [(8usize, true), (200, true), (2000, false)] {
        let mut w = World::new(
            2,
            Faults {
                delay_ns: DELAY,
                ..Faults::default()
            },
            11,
            Config::default(),
        );
        w.nodes[0].eng.open_endpoint(Some(0)).unwrap();
        let b = w.nodes[1].eng.open_endpoint(Some(0)).unwrap();
        let rb = w.mem(1).insert(vec![0; len]);
        let r = w.nodes[1]
            .eng
            .irecv(0, MatchSpec::mpi(CTX, 0, 1), rb)
            .unwrap();
        let buf = w.mem(0).insert(pattern(0, 1, len));
        let t0 = w.now;
        let s = w.nodes[0]
            .eng
            .isend(0, b, match_bits(CTX, 1), 0, buf, SendMode::Standard)
            .unwrap();
        let got = w.wait(1, r, 1_000_000);
        let delivered = w.now - t0;
        assert!(got.result.is_ok(), "{got:?}");
        assert_eq!(w.mem(1).get(&rb).unwrap(), &pattern(0, 1, len));
        if rides {
            assert!(
                delivered < 2 * DELAY,
                "{len} B delivered after {delivered} ns: one way is {DELAY}"
            );
        } else {
            assert!(
                delivered >= 3 * DELAY,
                "{len} B delivered after {delivered} ns"
            );
        }
        assert!(w.wait(0, s, 1_000_000).result.is_ok());
        assert_eq!(w.nodes[0].eng.stats.retransmits, 0);
        assert_eq!(w.nodes[1].eng.stats.drop_stale, 0);
    }
}
