//! A node restarted while a peer still held a session with its earlier start: the peer's next
//! frame on that session is refused (stale session) and the Reset that answers it fails every
//! message queued to the node, those addressed to the new start's ranks among them (seen with
//! two agents: a new job's messages failed with "peer restarted" while its ranks on the
//! restarted node waited for them). A send names the incarnation its address was published
//! with (`Dest`, `Engine::check_incarnation`): a later one than the session's voids the
//! session before the send, an earlier one (an address that outlived its node's engine) fails
//! the send at once.

mod common;
use common::*;
use tigon_engine::matching::match_bits;
use tigon_engine::sim::Faults;
use tigon_engine::*;

const OLD: u32 = 100;
const NEW: u32 = 300;

/// B's 64-byte message of tag `tag` to A's endpoint 0, received there; both wait for it
/// (within `steps`). Returns the receive's buffer.
fn b_to_a(w: &mut World, a: EndpointAddr, tag: i32, steps: usize) -> BufRef {
    let buf = w.mem(1).insert(pattern(1, tag as u32, 64));
    let s = w.nodes[1]
        .eng
        .isend(0, a, match_bits(0, tag), 1, buf, SendMode::Standard)
        .unwrap();
    let rb = w.mem(0).insert(vec![0; 64]);
    let r = w.nodes[0]
        .eng
        .irecv(0, MatchSpec::mpi(0, 1, tag), rb)
        .unwrap();
    assert!(w.wait(0, r, steps).result.is_ok());
    assert!(w.wait(1, s, steps).result.is_ok());
    rb
}

/// Two nodes, A (0, incarnation `OLD`) and B (1), connected; B's synchronous send to A's
/// endpoint 0 (tag 2) waits for a receive that A's first start never posts. Then A restarts
/// as incarnation `NEW` with endpoint 0 open again. Returns A's endpoint and B's pending send.
fn restarted() -> (World, EndpointAddr, ReqId) {
    restarted_as(OLD, NEW)
}

/// Two nodes, A (0, incarnation `incarnation`) and B (1), endpoint 0 open on each, connected
/// by B's first message (tag 1) to A's endpoint, which it returns.
fn connected(cfg: Config, incarnation: u32) -> (World, EndpointAddr) {
    let mut w = World::new(2, Faults::default(), 21, cfg);
    w.nodes[0].eng.set_incarnation(incarnation);
    w.nodes[1].eng.set_incarnation(200);
    let a = w.nodes[0].eng.open_endpoint(Some(0)).unwrap();
    w.nodes[1].eng.open_endpoint(Some(0)).unwrap();
    b_to_a(&mut w, a, 1, 100_000);
    (w, a)
}

/// As [`restarted`], A's starts being incarnations `first` and `second`.
fn restarted_as(first: u32, second: u32) -> (World, EndpointAddr, ReqId) {
    let (mut w, a) = connected(Config::default(), first);
    let two = w.mem(1).insert(pattern(1, 2, 64));
    let pending = w.nodes[1]
        .eng
        .isend(0, a, match_bits(0, 2), 1, two, SendMode::Synchronous)
        .unwrap();
    for _ in 0..1_000 {
        w.step();
    }
    assert!(w.nodes[1].eng.is_pending(pending));
    w.add_node(0, 77);
    w.nodes[0].eng.set_incarnation(second);
    assert_eq!(w.nodes[0].eng.open_endpoint(Some(0)).unwrap(), a);
    (w, a, pending)
}

/// B's completions until it has `n`.
fn completions(w: &mut World, n: usize) -> Vec<Completion> {
    let mut got = Vec::new();
    w.run_until(1_000_000, |w| {
        while let Some(c) = w.nodes[1].eng.pop_completion() {
            got.push(c);
        }
        got.len() >= n
    });
    got
}

#[test]
fn a_send_to_a_later_start_of_its_node_voids_the_old_session_and_gets_through() {
    let (mut w, a, pending) = restarted();
    // B's new rank sends to A's new rank, by the address A's new start published.
    w.nodes[1].eng.check_incarnation(a, NEW).unwrap();
    let data = pattern(1, 3, 64);
    let buf = w.mem(1).insert(data.clone());
    let s = w.nodes[1]
        .eng
        .isend(0, a, match_bits(0, 3), 1, buf, SendMode::Standard)
        .unwrap();
    let rb = w.mem(0).insert(vec![0; 64]);
    let r = w.nodes[0]
        .eng
        .irecv(0, MatchSpec::mpi(0, 1, 3), rb)
        .unwrap();
    assert!(w.wait(0, r, 1_000_000).result.is_ok());
    assert_eq!(w.mem(0).get(&rb), Some(&data));
    let mut got = completions(&mut w, 2);
    got.sort_by_key(|c| c.req != pending);
    assert_eq!(
        (got[0].req, got[0].result.clone().map(|_| ())),
        (pending, Err(Error::PeerRestarted(a))),
        "the old start's message fails"
    );
    assert_eq!(got[1].req, s);
    assert!(
        got[1].result.is_ok(),
        "the new start's message goes through"
    );
    assert_eq!(w.nodes[1].eng.stats.peer_restarts, 1);
    assert_eq!(
        w.nodes[0].eng.stats.drop_stale, 0,
        "nothing went out on the void session"
    );

    // An address of A's first start, used now (by a rank that outlived it): refused at once,
    // and the session with the new start stays.
    assert_eq!(
        w.nodes[1].eng.check_incarnation(a, OLD),
        Err(Error::PeerRestarted(a))
    );
    assert_eq!(w.nodes[1].eng.stats.stale_addresses, 1);
    w.nodes[1].eng.check_incarnation(a, NEW).unwrap();
    b_to_a(&mut w, a, 4, 1_000_000);
    assert_eq!(w.nodes[1].eng.stats.peer_restarts, 1);
}

/// What the incarnation is for: without it (an address that names none), the new start's
/// message rides the void session, is refused, and fails with the old start's.
#[test]
fn without_the_incarnation_the_message_fails_with_the_void_session() {
    let (mut w, a, pending) = restarted();
    w.nodes[1].eng.check_incarnation(a, 0).unwrap();
    let buf = w.mem(1).insert(pattern(1, 3, 64));
    let s = w.nodes[1]
        .eng
        .isend(0, a, match_bits(0, 3), 1, buf, SendMode::Standard)
        .unwrap();
    let got = completions(&mut w, 2);
    for c in &got {
        assert!([pending, s].contains(&c.req));
        assert_eq!(c.result.clone().map(|_| ()), Err(Error::PeerRestarted(a)));
    }
    assert!(w.nodes[0].eng.stats.drop_stale > 0);
}

/// B's `n` 64-byte messages of tag `tag` to A's endpoint 0 by `dest` (`Engine::isend_to`),
/// message i carrying `pattern(1, 100 + i, 64)`, then A's `n` receives of that tag; returns
/// the sends and the receives with their buffers.
fn b_sends_to(w: &mut World, dest: Dest, tag: i32, n: u32) -> (Vec<ReqId>, Vec<(ReqId, BufRef)>) {
    let sends = (0..n)
        .map(|i| {
            let buf = w.mem(1).insert(pattern(1, 100 + i, 64));
            w.nodes[1]
                .eng
                .isend_to(0, dest, match_bits(0, tag), 1, buf, SendMode::Standard)
                .unwrap()
        })
        .collect();
    let recvs = (0..n)
        .map(|_| {
            let rb = w.mem(0).insert(vec![0; 64]);
            let r = w.nodes[0]
                .eng
                .irecv(0, MatchSpec::mpi(0, 1, tag), rb)
                .unwrap();
            (r, rb)
        })
        .collect();
    (sends, recvs)
}

/// A restarted after its clock was stepped back: its new start's incarnation is earlier than
/// the one B's session holds. A send naming the new start is not refused as a stale address:
/// B asks the node (a probe on the old session, which the new start answers with a Reset),
/// then the send and the one made behind it go to the new start, in order; the old start's
/// pending message fails.
#[test]
fn a_send_to_a_start_with_an_earlier_clock_reaches_it_after_asking_the_node() {
    let (mut w, a, pending) = restarted_as(NEW, OLD);
    let dest = Dest {
        addr: a,
        incarnation: OLD,
    };
    let (sends, recvs) = b_sends_to(&mut w, dest, 5, 2);
    assert_eq!(
        w.nodes[1].eng.held_sends(),
        2,
        "held while the node is asked"
    );
    let mut at_a = Vec::new();
    w.run_until(1_000_000, |w| {
        while let Some(c) = w.nodes[0].eng.pop_completion() {
            at_a.push(c);
        }
        at_a.len() >= 2
    });
    for c in &at_a {
        assert!(
            recvs.iter().any(|&(r, _)| r == c.req) && c.result.is_ok(),
            "{c:?}"
        );
    }
    let mut got = completions(&mut w, 3);
    let order = [pending, sends[0], sends[1]];
    got.sort_by_key(|c| order.iter().position(|&r| r == c.req));
    let results: Vec<_> = got
        .iter()
        .map(|c| (c.req, c.result.clone().map(|_| ())))
        .collect();
    assert_eq!(
        results,
        vec![
            (pending, Err(Error::PeerRestarted(a))),
            (sends[0], Ok(())),
            (sends[1], Ok(())),
        ]
    );
    // Same tag: MPI's order decides which receive takes which message.
    for (i, &(_, rb)) in recvs.iter().enumerate() {
        assert_eq!(
            w.mem(0).get(&rb),
            Some(&pattern(1, 100 + i as u32, 64)),
            "message {i}"
        );
    }
    assert_eq!(w.nodes[1].eng.held_sends(), 0);
    assert_eq!(w.nodes[1].eng.stats.stale_addresses, 0);
    assert_eq!(w.nodes[1].eng.stats.peer_restarts, 1);
}

/// The other reading of an earlier incarnation: an address of a start that is gone, its node
/// running a later one that answers on the session. The send is held, the probe answered,
/// and the send fails (`PeerRestarted`) without reaching the later start; the session stays.
#[test]
fn a_send_by_a_stale_address_fails_once_the_live_start_answers() {
    let (mut w, a) = connected(Config::default(), NEW);
    let stale = Dest {
        addr: a,
        incarnation: OLD,
    };
    let (sends, recvs) = b_sends_to(&mut w, stale, 6, 1);
    assert_eq!(w.nodes[1].eng.held_sends(), 1);
    let got = completions(&mut w, 1);
    assert_eq!(
        (got[0].req, got[0].result.clone().map(|_| ())),
        (sends[0], Err(Error::PeerRestarted(a)))
    );
    assert_eq!(w.nodes[1].eng.stats.stale_addresses, 1);
    assert_eq!(w.nodes[1].eng.stats.peer_restarts, 0, "the session stays");
    for _ in 0..10_000 {
        w.step();
    }
    assert!(
        w.nodes[0].eng.is_pending(recvs[0].0),
        "the message never reached the live start"
    );
    assert_eq!(w.nodes[0].eng.stats.unexpected, 0);
    // The live start's own address still works.
    let live = Dest {
        addr: a,
        incarnation: NEW,
    };
    let (sends, recvs) = b_sends_to(&mut w, live, 7, 1);
    assert!(w.wait(0, recvs[0].0, 1_000_000).result.is_ok());
    assert!(w.wait(1, sends[0], 1_000_000).result.is_ok());
}

/// Nothing answers the question (the node is gone, or its link dead): the held send is asked
/// again every retransmit timeout and fails as unreachable after the peer timeout, as any
/// send to a dead peer does; nothing hangs.
#[test]
fn a_held_send_to_a_silent_node_fails_as_unreachable() {
    let cfg = Config {
        peer_timeout_ns: 200_000_000,
        session_idle_ns: 0,
        ..Config::default()
    };
    let (mut w, a) = connected(cfg, NEW);
    w.net.set_faults(Faults {
        loss: 1.0,
        ..Faults::default()
    });
    let stale = Dest {
        addr: a,
        incarnation: OLD,
    };
    let (sends, _) = b_sends_to(&mut w, stale, 8, 1);
    let t0 = w.now;
    let got = completions(&mut w, 1);
    assert_eq!(
        (got[0].req, got[0].result.clone().map(|_| ())),
        (sends[0], Err(Error::PeerUnreachable(a)))
    );
    assert!(
        w.now - t0 >= 200_000_000,
        "failed only after the peer timeout"
    );
    assert_eq!(w.nodes[1].eng.held_sends(), 0);
}
