//! Rendezvous messages waiting unexpected when their sender restarts: found by the
//! `engine_rx` fuzz target (a panic, `VecDeque::insert` index out of bounds in
//! `Stream::queue`). The RTSs of the dead incarnation stayed in the store; a receive matching
//! one later queued a Pull to the peer, now idle (never sent: nothing times an idle peer);
//! once the idle peer's queues were given back (`Peer::shrink`) with that Pull still counted
//! as queued control, the next control frame queued for the peer panicked the engine. And
//! had the peer's new incarnation connected, the Pull would have asked it for a message id
//! of its own, another message. Likewise a synchronous eager message of the dead
//! incarnation: its Matched would complete the new incarnation's send of the same id.

mod common;
use common::*;
use tigon_engine::matching::match_bits;
use tigon_engine::sim::Faults;
use tigon_engine::*;

#[test]
fn rendezvous_messages_of_a_restarted_sender_leave_the_store() {
    let mut w = World::new(2, Faults::default(), 11, Config::default());
    let a = w.nodes[0].eng.open_endpoint(Some(0)).unwrap();
    let b = w.nodes[1].eng.open_endpoint(Some(0)).unwrap();
    let len = 4 * Config::default().rndv_threshold;
    // Two rendezvous messages from B wait at A, unexpected.
    for tag in [1, 2] {
        let buf = w.mem(1).insert(pattern(1, tag as u32, len));
        w.nodes[1]
            .eng
            .isend(0, a, match_bits(0, tag), 1, buf, SendMode::Standard)
            .unwrap();
    }
    let waiting = |w: &World, tag: i32| {
        w.nodes[0]
            .eng
            .iprobe(0, MatchSpec::mpi(0, 1, tag))
            .unwrap()
            .is_some()
    };
    w.run_until(100_000, |w| waiting(w, 1) && waiting(w, 2));

    // B restarts. A learns it from the Reset B's new incarnation answers A's next frame with.
    w.add_node(1, 4242);
    w.nodes[1].eng.open_endpoint(Some(0)).unwrap();
    let buf = w.mem(0).insert(vec![7; 8]);
    let s = w.nodes[0]
        .eng
        .isend(0, b, match_bits(0, 9), 0, buf, SendMode::Standard)
        .unwrap();
    let c = w.wait(0, s, 1_000_000);
    assert_eq!(c.result.map(|_| ()), Err(Error::PeerRestarted(b)));
    assert!(
        !waiting(&w, 1) && !waiting(&w, 2),
        "the dead incarnation's RTSs are no longer offered"
    );

    // Receives posted for them stay pending; the engine stays whole while the peer idles
    // past the time its queues are given back, and after.
    let rb = w.mem(0).insert(vec![0; len]);
    let r1 = w.nodes[0]
        .eng
        .irecv(0, MatchSpec::mpi(0, 1, 1), rb)
        .unwrap();
    let idle = Config::default().credit_idle_ns;
    let until = w.now + 2 * idle;
    w.run_until(1_000_000, |w| w.now > until);
    let rb2 = w.mem(0).insert(vec![0; len]);
    let r2 = w.nodes[0]
        .eng
        .irecv(0, MatchSpec::mpi(0, 1, 2), rb2)
        .unwrap();
    let until = w.now + 2 * idle;
    w.run_until(1_000_000, |w| w.now > until);
    assert!(w.nodes[0].eng.is_pending(r1) && w.nodes[0].eng.is_pending(r2));
    assert!(w.nodes[0].eng.pop_completion().is_none());
    assert_eq!(
        w.nodes[1].eng.stats.drop_unknown_msg, 0,
        "no Pull for an old message reached the new incarnation"
    );

    // The new incarnation's own messages go through.
    let data = pattern(1, 3, len);
    let sb = w.mem(1).insert(data.clone());
    let s3 = w.nodes[1]
        .eng
        .isend(0, a, match_bits(0, 3), 1, sb, SendMode::Standard)
        .unwrap();
    let rb3 = w.mem(0).insert(vec![0; len]);
    let r3 = w.nodes[0]
        .eng
        .irecv(0, MatchSpec::mpi(0, 1, 3), rb3)
        .unwrap();
    assert!(w.wait(0, r3, 2_000_000).result.is_ok());
    assert_eq!(w.mem(0).get(&rb3), Some(&data));
    assert!(w.wait(1, s3, 2_000_000).result.is_ok());
}

/// Read off the same path as the fuzzer's find: an eager synchronous message of the dead
/// incarnation, received after the peer came back, must not tell the new incarnation it was
/// matched (message ids start over with each incarnation: the new one's synchronous send of
/// the same id would complete unmatched), nor release credit the new session never gave.
#[test]
fn a_restarted_senders_synchronous_message_in_the_store_reports_to_nobody() {
    let mut w = World::new(2, Faults::default(), 12, Config::default());
    let a = w.nodes[0].eng.open_endpoint(Some(0)).unwrap();
    w.nodes[1].eng.open_endpoint(Some(0)).unwrap();
    let ssend = |w: &mut World, tag: i32| {
        let buf = w.mem(1).insert(pattern(1, tag as u32, 64));
        w.nodes[1]
            .eng
            .isend(0, a, match_bits(0, tag), 1, buf, SendMode::Synchronous)
            .unwrap()
    };
    let waiting = |w: &World, tag: i32| {
        w.nodes[0]
            .eng
            .iprobe(0, MatchSpec::mpi(0, 1, tag))
            .unwrap()
            .is_some()
    };
    ssend(&mut w, 1);
    w.run_until(100_000, |w| waiting(w, 1));
    // B restarts; its new incarnation's first synchronous send has the same message id.
    w.add_node(1, 777);
    w.nodes[1].eng.open_endpoint(Some(0)).unwrap();
    let s7 = ssend(&mut w, 7);
    w.run_until(100_000, |w| waiting(w, 7));
    // A receives the old message: it is whole at A, so it is delivered.
    let rb = w.mem(0).insert(vec![0; 64]);
    let r1 = w.nodes[0]
        .eng
        .irecv(0, MatchSpec::mpi(0, 1, 1), rb)
        .unwrap();
    assert!(w.wait(0, r1, 100_000).result.is_ok());
    assert_eq!(w.mem(0).get(&rb), Some(&pattern(1, 1, 64)));
    let until = w.now + 50_000_000;
    w.run_until(1_000_000, |w| w.now > until);
    assert!(
        w.nodes[1].eng.is_pending(s7),
        "the new incarnation's synchronous send completed before anything matched it"
    );
    // Matched for real, it completes.
    let rb7 = w.mem(0).insert(vec![0; 64]);
    let r7 = w.nodes[0]
        .eng
        .irecv(0, MatchSpec::mpi(0, 1, 7), rb7)
        .unwrap();
    assert!(w.wait(0, r7, 100_000).result.is_ok());
    assert!(w.wait(1, s7, 1_000_000).result.is_ok());
}
