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
    let mut w = World::new(2, Faults::default(), 21, Config::default());
    w.nodes[0].eng.set_incarnation(OLD);
    w.nodes[1].eng.set_incarnation(200);
    let a = w.nodes[0].eng.open_endpoint(Some(0)).unwrap();
    w.nodes[1].eng.open_endpoint(Some(0)).unwrap();
    b_to_a(&mut w, a, 1, 100_000);
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
    w.nodes[0].eng.set_incarnation(NEW);
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
