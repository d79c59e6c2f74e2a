//! Retransmit timers that do not fire falsely: a sender descheduled for 10 ms takes the acks
//! that waited for it before any timer runs, and a lossless link sees no retransmit at all.

mod common;
use common::*;
use tigon_engine::matching::match_bits;
use tigon_engine::sim::Faults;
use tigon_engine::*;

fn lossless() -> Faults {
    Faults {
        delay_ns: 5_000,
        ..Faults::default()
    }
}

/// Polls node `i` alone once, then moves virtual time on by 1 µs.
fn poll_one(w: &mut World, i: usize) -> usize {
    let n = &mut w.nodes[i];
    let work = n.eng.poll(&mut n.port, w.now);
    w.now += 1_000;
    w.net.set_time(w.now);
    work
}

#[test]
fn sender_descheduled_10ms_takes_its_acks_before_any_timer_fires() {
    // Small bursts: the acks waiting for the sender fill several of them, so a timer run
    // between two bursts would find frames "unacknowledged" for 10 ms.
    let cfg = Config {
        burst: 4,
        ..Config::default()
    };
    let stall = 10_000_000;
    assert!(
        stall > cfg.rto_min_ns * 4,
        "the stall must outlast the timeout"
    );
    let mut w = World::new(2, lossless(), 11, cfg);
    w.nodes[0].eng.open_endpoint(Some(0)).unwrap();
    let b = w.nodes[1].eng.open_endpoint(Some(0)).unwrap();
    // Connect first, so the stall falls on data.
    let buf = w.mem(0).insert(vec![1; 8]);
    let first = w.nodes[0]
        .eng
        .isend(0, b, match_bits(1, 1), 0, buf, SendMode::Standard)
        .unwrap();
    let rb = w.mem(1).insert(vec![0; 8]);
    w.nodes[1]
        .eng
        .irecv(0, MatchSpec::mpi(1, 0, 1), rb)
        .unwrap();
    assert!(w.wait(0, first, 100_000).result.is_ok());

    const N: usize = 600;
    let mut sends = Vec::new();
    for k in 0..N {
        let buf = w.mem(0).insert(pattern(0, k as u32, 64));
        sends.push(
            w.nodes[0]
                .eng
                .isend(0, b, match_bits(1, 2), 0, buf, SendMode::Standard)
                .unwrap(),
        );
        let rb = w.mem(1).insert(vec![0; 64]);
        w.nodes[1]
            .eng
            .irecv(0, MatchSpec::mpi(1, 0, 2), rb)
            .unwrap();
    }
    // The sender puts its window on the wire...
    while w.nodes[0].eng.stats.tx_frames < N as u64 {
        assert!(poll_one(&mut w, 0) > 0, "the sender stopped sending");
    }
    // ...and is descheduled for 10 ms while the receiver takes everything and acknowledges.
    let until = w.now + stall;
    while w.now < until {
        poll_one(&mut w, 1);
    }
    let received = w.nodes[1].eng.stats.recvs_completed;
    assert_eq!(received, N as u64 + 1, "the receiver got every message");
    let acks = w.nodes[1].eng.stats.acks_sent;
    assert!(
        acks as usize > w.nodes[0].eng.config().burst,
        "{acks} acks wait: more than one receive burst"
    );
    // The sender comes back: the acks are taken before the timers look.
    let mut done = 0;
    for _ in 0..10_000 {
        poll_one(&mut w, 0);
        poll_one(&mut w, 1);
        while let Some(c) = w.nodes[0].eng.pop_completion() {
            assert!(c.result.is_ok(), "{c:?}");
            done += 1;
        }
        if done == N {
            break;
        }
    }
    assert_eq!(done, N, "every send completed");
    let s0 = &w.nodes[0].eng.stats;
    assert_eq!(
        (s0.retransmits, s0.rto_events),
        (0, 0),
        "a timer fired on frames whose acks were waiting"
    );
    assert_eq!(w.nodes[1].eng.stats.rx_duplicates, 0);
}

#[test]
fn receiver_descheduled_10ms_costs_a_probe_not_a_retransmission() {
    let mut w = World::new(2, lossless(), 13, Config::default());
    w.nodes[0].eng.open_endpoint(Some(0)).unwrap();
    let b = w.nodes[1].eng.open_endpoint(Some(0)).unwrap();
    let buf = w.mem(0).insert(vec![1; 8]);
    let first = w.nodes[0]
        .eng
        .isend(0, b, match_bits(1, 1), 0, buf, SendMode::Standard)
        .unwrap();
    let rb = w.mem(1).insert(vec![0; 8]);
    w.nodes[1]
        .eng
        .irecv(0, MatchSpec::mpi(1, 0, 1), rb)
        .unwrap();
    assert!(w.wait(0, first, 100_000).result.is_ok());
    const N: usize = 300;
    for k in 0..N {
        let buf = w.mem(0).insert(pattern(0, k as u32, 1000));
        w.nodes[0]
            .eng
            .isend(0, b, match_bits(1, 2), 0, buf, SendMode::Standard)
            .unwrap();
        let rb = w.mem(1).insert(vec![0; 1000]);
        w.nodes[1]
            .eng
            .irecv(0, MatchSpec::mpi(1, 0, 2), rb)
            .unwrap();
    }
    // The receiver is descheduled for 10 ms while the sender keeps polling: its timer fires
    // (more than once, backing off) on frames that sit in the receiver's queue.
    let until = w.now + 10_000_000;
    while w.now < until {
        poll_one(&mut w, 0);
    }
    assert!(w.nodes[0].eng.stats.rto_events > 0, "the timer fired");
    let mut done = 0;
    w.run_until(1_000_000, |w| {
        while let Some(c) = w.nodes[0].eng.pop_completion() {
            assert!(c.result.is_ok(), "{c:?}");
            done += 1;
        }
        done == N
    });
    assert_eq!(
        w.nodes[0].eng.stats.retransmits, 0,
        "the probes' replies showed nothing missing"
    );
    assert_eq!(w.nodes[1].eng.stats.rx_duplicates, 0);
}

#[test]
fn lossless_link_sees_no_retransmit_at_any_size() {
    let mut w = World::new(2, lossless(), 12, Config::default());
    let a = w.nodes[0].eng.open_endpoint(Some(0)).unwrap();
    let b = w.nodes[1].eng.open_endpoint(Some(0)).unwrap();
    let sizes = [0usize, 8, 64, 1500, 16 << 10, 64 << 10, 1 << 20, 4 << 20];
    let mut pending = Vec::new();
    for (k, &len) in sizes.iter().enumerate() {
        for (from, to, dst) in [(0, 1, b), (1, 0, a)] {
            let data = pattern(from as u32, k as u32, len);
            let buf = w.mem(from).insert(data.clone());
            let s = w.nodes[from]
                .eng
                .isend(
                    0,
                    dst,
                    match_bits(1, k as i32),
                    from as u32,
                    buf,
                    SendMode::Standard,
                )
                .unwrap();
            let rb = w.mem(to).insert(vec![0; len]);
            let r = w.nodes[to]
                .eng
                .irecv(0, MatchSpec::mpi(1, from as i32, k as i32), rb)
                .unwrap();
            pending.push((from, s, to, r, rb, data));
        }
    }
    let mut open: Vec<(usize, ReqId)> = pending
        .iter()
        .flat_map(|p| [(p.0, p.1), (p.2, p.3)])
        .collect();
    w.run_until(2_000_000, |w| {
        for i in 0..2 {
            while let Some(c) = w.nodes[i].eng.pop_completion() {
                assert!(c.result.is_ok(), "{c:?}");
                open.retain(|&o| o != (i, c.req));
            }
        }
        open.is_empty()
    });
    for (_, _, to, _, rb, data) in &pending {
        assert!(w.mem(*to).get(rb).unwrap() == data, "message corrupted");
    }
    for n in &w.nodes {
        assert_eq!(n.eng.stats.retransmits, 0);
        assert_eq!(n.eng.stats.rto_events, 0);
        assert_eq!(n.eng.stats.rx_duplicates, 0);
    }
}

/// Synchronous sends to many nodes whose receives are not posted yet: the peers they wait on
/// leave the per-pass timer list for the keepalive queue (each looked at once per
/// keepalive period), the sends still complete once matched, and one to a node that
/// vanishes still fails within the deadline.
#[test]
fn peers_that_operations_only_wait_on_cost_no_timer_pass() {
    const N: usize = 40;
    let cfg = Config {
        peer_timeout_ns: 50_000_000,
        ..Config::default()
    };
    let deadline = cfg.peer_timeout_ns;
    let mut w = World::new(N + 1, lossless(), 8, cfg);
    for n in 0..=N {
        w.nodes[n].eng.open_endpoint(Some(0)).unwrap();
    }
    let mut sends = Vec::new();
    for n in 1..=N {
        let buf = w.mem(0).insert(vec![n as u8; 100]);
        let to = EndpointAddr::new(mac(n), 0);
        sends.push(
            w.nodes[0]
                .eng
                .isend(0, to, match_bits(1, 1), 0, buf, SendMode::Synchronous)
                .unwrap(),
        );
    }
    // Delivered and acknowledged everywhere; then a few timer passes (every 250 us).
    w.run_until(1_000_000, |w| {
        (1..=N).all(|n| w.nodes[n].eng.unexpected_bytes() > 0) && w.nodes[0].eng.armed_peers() == 0
    });
    let t = w.now;
    w.run_until(1_000_000, |w| w.now > t + 2_000_000);
    assert_eq!(w.nodes[0].eng.armed_peers(), 0, "no peer visited per pass");
    assert_eq!(w.nodes[0].eng.waiting_peers(), N);
    assert!(sends.iter().all(|&s| w.nodes[0].eng.is_pending(s)));
    // Past several keepalive periods (a sixteenth of the deadline): still waiting, alive.
    let t = w.now;
    w.run_until(10_000_000, |w| w.now > t + deadline / 2);
    assert!(sends.iter().all(|&s| w.nodes[0].eng.is_pending(s)));
    // The last node vanishes; the others post their receives.
    w.net.set_down(mac(N), true);
    w.nodes.truncate(N);
    let gone_at = w.now;
    for n in 1..N {
        let rb = w.mem(n).insert(vec![0; 100]);
        w.nodes[n]
            .eng
            .irecv(0, MatchSpec::mpi(1, 0, 1), rb)
            .unwrap();
    }
    let mut done = Vec::new();
    w.run_until(10_000_000, |w| {
        while let Some(c) = w.nodes[0].eng.pop_completion() {
            done.push(c);
        }
        done.len() == N
    });
    for c in &done {
        let i = sends.iter().position(|&s| s == c.req).unwrap();
        if i + 1 == N {
            assert_eq!(
                c.result,
                Err(Error::PeerUnreachable(EndpointAddr::new(mac(N), 0)))
            );
        } else {
            assert!(c.result.is_ok(), "{c:?}");
        }
    }
    let took = w.now - gone_at;
    assert!(took <= deadline + deadline / 2, "failed after {took} ns");
}

/// A message answered within `ack_idle_ns` (a ping-pong's reply) has its ack carried by the
/// answer: one frame per message, not two. A message nobody answers is acknowledged once the
/// link has been quiet for `ack_idle_ns`, not at the first pass that finds nothing to receive.
#[test]
fn a_reply_carries_the_ack_and_a_lone_message_is_acked_once_the_link_is_quiet() {
    let cfg = Config::default();
    let quiet = cfg.ack_idle_ns;
    assert!(quiet >= 4_000 && quiet < cfg.max_ack_delay_ns);
    let mut w = World::new(2, lossless(), 11, cfg);
    let a = w.nodes[0].eng.open_endpoint(Some(0)).unwrap();
    let b = w.nodes[1].eng.open_endpoint(Some(0)).unwrap();
    let settle = |w: &mut World| {
        w.run_until(100_000, |w| {
            w.nodes.iter().all(|n| n.eng.pending_ops() == 0)
        });
        for n in w.nodes.iter_mut() {
            while let Some(c) = n.eng.pop_completion() {
                assert!(c.result.is_ok(), "{c:?}");
            }
        }
    };
    let ping = |w: &mut World, k: u32| {
        let buf = w.mem(0).insert(pattern(0, k, 8));
        w.nodes[0]
            .eng
            .isend(0, b, match_bits(1, 1), 0, buf, SendMode::Standard)
            .unwrap();
        let rb = w.mem(1).insert(vec![0; 8]);
        w.nodes[1]
            .eng
            .irecv(0, MatchSpec::mpi(1, 0, 1), rb)
            .unwrap()
    };
    // The connection, and the acks of its set-up, out of the way.
    ping(&mut w, 0);
    settle(&mut w);
    w.run_until(1_000, |w| {
        w.nodes.iter().all(|n| n.eng.stats.retransmits == 0)
    });

    let (acks0, acks1) = (
        w.nodes[0].eng.stats.acks_sent,
        w.nodes[1].eng.stats.acks_sent,
    );
    let frames1 = w.nodes[1].eng.stats.tx_frames;
    for k in 1..=10 {
        let rb = w.mem(0).insert(vec![0; 8]);
        let reply = w.nodes[0]
            .eng
            .irecv(0, MatchSpec::mpi(1, 1, 2), rb)
            .unwrap();
        let r = ping(&mut w, k);
        w.run_until(10_000, |w| !w.nodes[1].eng.is_pending(r));
        // Node 1's rank answers at once.
        let buf = w.mem(1).insert(pattern(1, k, 8));
        w.nodes[1]
            .eng
            .isend(0, a, match_bits(1, 2), 1, buf, SendMode::Standard)
            .unwrap();
        // The next ping goes as soon as the reply is in (its ack rides on that ping).
        w.run_until(10_000, |w| !w.nodes[0].eng.is_pending(reply));
    }
    settle(&mut w);
    let s1 = &w.nodes[1].eng.stats;
    assert_eq!(s1.acks_sent, acks1, "every ping's ack rode on its reply");
    assert_eq!(s1.tx_frames - frames1, 10, "one frame per reply");
    // Node 0's acks rode on its pings, but for the last reply's, which has none to ride on.
    assert_eq!(w.nodes[0].eng.stats.acks_sent - acks0, 1);

    // A lone message: no ack while the link has been quiet for less than `ack_idle_ns`.
    let r = ping(&mut w, 11);
    w.wait(1, r, 10_000);
    let acks1 = w.nodes[1].eng.stats.acks_sent;
    let start = w.now;
    while w.now < start + quiet - 1_000 {
        poll_one(&mut w, 1);
        assert_eq!(
            w.nodes[1].eng.stats.acks_sent, acks1,
            "ack sent before the link was quiet"
        );
    }
    while w.now < start + quiet + 3_000 {
        poll_one(&mut w, 1);
    }
    assert_eq!(
        w.nodes[1].eng.stats.acks_sent,
        acks1 + 1,
        "ack sent once quiet"
    );
    settle(&mut w);
    assert_eq!(w.nodes[0].eng.stats.retransmits, 0);
}
