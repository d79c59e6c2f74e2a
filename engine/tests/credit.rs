//! Eager credit with many peers (peer NODES: credit, like the session, is per remote node): a
//! store that cannot give every peer credit still lets every sender through (rendezvous needs
//! none), grants grow for peers that talk, and idle peers give theirs back.

mod common;
use common::*;
use tigon_engine::matching::match_bits;
use tigon_engine::sim::Faults;
use tigon_engine::*;

const CTX: u32 = 9;

/// Node 0 receives; nodes 1..=senders send.
fn world(senders: usize, cfg: Config) -> World {
    World::new(
        senders + 1,
        Faults {
            delay_ns: 5_000,
            ..Faults::default()
        },
        11,
        cfg,
    )
}

/// Nodes 1..=n each send one message of `len` bytes to node 0's endpoint 0 at once (MPI rank
/// i - 1 on node i); node 0 receives them all (posted first, or only once all arrived
/// unexpected), and every byte is checked.
fn fan_in(w: &mut World, n: usize, len: usize, post_first: bool) {
    let dst = w.nodes[0].eng.open_endpoint(Some(0)).unwrap();
    for i in 1..=n {
        w.nodes[i].eng.open_endpoint(Some(0)).unwrap();
    }
    let mut recvs = Vec::new();
    let post = |w: &mut World, recvs: &mut Vec<_>| {
        for i in 0..n {
            let rb = w.mem(0).insert(vec![0; len]);
            let id = w.nodes[0]
                .eng
                .irecv(0, MatchSpec::mpi(CTX, i as i32, 1), rb)
                .unwrap();
            recvs.push((id, rb, i));
        }
    };
    if post_first {
        post(w, &mut recvs);
    }
    let mut sends = Vec::new();
    for i in 0..n {
        let buf = w.mem(i + 1).insert(pattern(i as u32, 0, len));
        sends.push(
            w.nodes[i + 1]
                .eng
                .isend(
                    0,
                    dst,
                    match_bits(CTX, 1),
                    i as u32,
                    buf,
                    SendMode::Standard,
                )
                .unwrap(),
        );
    }
    if !post_first {
        // Everything arrives unexpected (eager data or an RTS) before a receive is posted.
        w.run_until(2_000_000, |w| w.nodes[0].eng.stats.unexpected as usize >= n);
        post(w, &mut recvs);
    }
    let (mut sent, mut got) = (0, 0);
    w.run_until(5_000_000, |w| {
        for i in 1..=n {
            while let Some(c) = w.nodes[i].eng.pop_completion() {
                assert!(c.result.is_ok(), "send failed: {:?}", c.result);
                sent += 1;
            }
        }
        while let Some(c) = w.nodes[0].eng.pop_completion() {
            assert!(c.result.is_ok(), "receive failed: {:?}", c.result);
            got += 1;
        }
        sent == n && got == n
    });
    for (_, rb, i) in recvs {
        assert!(
            w.mem(0).get(&rb).unwrap() == &pattern(i as u32, 0, len),
            "message from node {} corrupted",
            i + 1
        );
    }
}

/// What the sending nodes 1..=n did, summed.
fn senders(w: &World) -> Stats {
    let mut t = Stats::default();
    for n in &w.nodes[1..] {
        let s = &n.eng.stats;
        t.sends_completed += s.sends_completed;
        t.credit_fallbacks += s.credit_fallbacks;
        t.eager_sent += s.eager_sent;
    }
    t
}

#[test]
fn thousand_peers_sending_eager_at_once_all_complete() {
    let mut w = world(1000, Config::default());
    fan_in(&mut w, 1000, 2000, false);
    let rx = &w.nodes[0].eng.stats;
    assert_eq!(rx.peers, 1000);
    assert_eq!(rx.recvs_completed, 1000);
    // The default store (256 MiB) grants every one of 1,000 peers its initial credit.
    let tx = senders(&w);
    assert_eq!(tx.credit_fallbacks, 0);
    assert_eq!(tx.eager_sent, 1000);
    // Once everything is acknowledged and idle for a while, no peer is visited by the
    // timers, and the peers have given their queues' buffers back.
    let idle_until = w.now + 2 * w.cfg.credit_idle_ns;
    w.run_until(1_000_000, |w| w.now > idle_until);
    let e = &w.nodes[0].eng;
    assert_eq!(e.armed_peers(), 0, "idle peers still armed");
    let (peers, bytes) = e.peer_memory();
    assert_eq!(peers, 1000);
    // 192 B of state and 8 B of index per idle peer, and the peer table's growth slack
    // (1,024 slots for 1,000 peers).
    assert!(
        bytes / peers <= 208,
        "{} bytes per idle peer",
        bytes / peers
    );
}

#[test]
fn peers_beyond_the_store_go_by_rendezvous_and_are_counted() {
    // A store that holds the initial grant of 8 peers only: the 9th and later get none.
    let cfg = Config {
        unexpected_bytes: 8 * (16 << 10),
        eager_credit_initial: 16 << 10,
        eager_credit_floor: 16 << 10,
        eager_credit: 64 << 10,
        ..Config::default()
    };
    let mut w = world(100, cfg.clone());
    fan_in(&mut w, 100, 1000, false);
    let tx = senders(&w);
    assert_eq!(tx.sends_completed, 100);
    assert!(
        tx.credit_fallbacks >= 92,
        "peers without credit must fall back to rendezvous, counted: {tx:?}"
    );
    assert!(tx.eager_sent >= 8, "{tx:?}");
    // Every peer is granted at least the first credit (`wire::FIRST_CREDIT`), beyond the
    // store if need be; the store itself never holds more than its size.
    assert!(
        w.nodes[0].eng.credit_granted_bytes()
            <= cfg.unexpected_bytes + 100 * tigon_engine::wire::FIRST_CREDIT as u64
    );
    assert!(w.nodes[0].eng.stats.unexpected_bytes_peak <= cfg.unexpected_bytes);
}

#[test]
fn a_talking_peer_gets_more_credit_and_idle_peers_give_theirs_back() {
    let cfg = Config {
        unexpected_bytes: 4 * (16 << 10),
        eager_credit_initial: 16 << 10,
        eager_credit_floor: 16 << 10,
        eager_credit: 32 << 10,
        credit_idle_ns: 5_000_000,
        ..Config::default()
    };
    let mut w = world(4, cfg.clone());
    let dst = w.nodes[0].eng.open_endpoint(Some(0)).unwrap();
    // Four peer nodes connect and take the whole store with their initial grants.
    for i in 1..=4 {
        w.nodes[i].eng.open_endpoint(Some(0)).unwrap();
        let buf = w.mem(i).insert(vec![1; 10]);
        let s = w.nodes[i]
            .eng
            .isend(0, dst, match_bits(CTX, 2), 0, buf, SendMode::Standard)
            .unwrap();
        let rb = w.mem(0).insert(vec![0; 10]);
        let r = w.nodes[0]
            .eng
            .irecv(0, MatchSpec::mpi(CTX, 0, 2), rb)
            .unwrap();
        w.wait(0, r, 1_000_000);
        w.wait(i, s, 1_000_000);
    }
    assert_eq!(w.nodes[0].eng.credit_granted_bytes(), cfg.unexpected_bytes);
    // Node 1 keeps sending 12 KiB messages, unexpected, more than its 16 KiB grant holds.
    let rounds = 40;
    let mut sends = Vec::new();
    for k in 0..rounds {
        let buf = w.mem(1).insert(pattern(0, k, 12 << 10));
        sends.push(
            w.nodes[1]
                .eng
                .isend(0, dst, match_bits(CTX, 3), 0, buf, SendMode::Standard)
                .unwrap(),
        );
        // Step a while between sends, so that idle time passes for the other three peers.
        for _ in 0..300 {
            w.step();
        }
        if k % 2 == 1 {
            for j in k - 1..=k {
                let rb = w.mem(0).insert(vec![0; 12 << 10]);
                let r = w.nodes[0]
                    .eng
                    .irecv(0, MatchSpec::mpi(CTX, 0, 3), rb)
                    .unwrap();
                w.wait(0, r, 1_000_000);
                assert!(w.mem(0).get(&rb).unwrap() == &pattern(0, j, 12 << 10));
            }
        }
    }
    let mut sent = 0;
    w.run_until(1_000_000, |w| {
        while let Some(c) = w.nodes[1].eng.pop_completion() {
            assert!(c.result.is_ok());
            sent += 1;
        }
        sent == sends.len()
    });
    let rx = &w.nodes[0].eng.stats;
    assert!(
        rx.credit_reclaims >= 1,
        "idle peers must be asked for their credit: {rx:?}"
    );
    assert!(
        rx.credit_grants >= 1,
        "the talker's grant must grow: {rx:?}"
    );
    assert!(w.nodes[0].eng.credit_granted_bytes() <= cfg.unexpected_bytes);
    // With the larger grant, later messages went eager again.
    let tx = &w.nodes[1].eng.stats;
    assert!(
        tx.eager_sent > 1 + 2,
        "after the grant grew, sends must go eager again: {tx:?}"
    );
}
