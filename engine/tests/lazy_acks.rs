//! Acks held while the loop is busy (wire version 7, `Config::max_ack_delay_ns`): a peer that
//! sends now and then has its acks coalesce over its messages instead of costing one ack
//! frame each; a frame flagged `FLAG_ACK_NOW` (the sender's window or credit nearly used up,
//! a resend) is acknowledged at once; a sender's retransmit timeout allows for the held ack,
//! so a lossless link sees no retransmission, and a lost last frame is still recovered
//! within the retransmit timeout plus the receiver's ack delay (advertised at connect).

mod common;
use common::*;
use tigon_engine::matching::match_bits;
use tigon_engine::sim::Faults;
use tigon_engine::*;

const CTX: u32 = 9;

fn lossless() -> Faults {
    Faults {
        delay_ns: 5_000,
        ..Faults::default()
    }
}

/// Node `from` sends an 8-byte message with tag `tag` to node `to`'s endpoint 0.
fn send(w: &mut World, from: usize, to: usize, tag: u32) -> ReqId {
    let buf = w.mem(from).insert(pattern(from as u32, tag, 8));
    let dst = EndpointAddr::new(mac(to), 0);
    w.nodes[from]
        .eng
        .isend(
            0,
            dst,
            match_bits(CTX, tag as i32),
            from as u32,
            buf,
            SendMode::Standard,
        )
        .unwrap()
}

/// Node `at` posts `n` receives of any source and tag.
fn post(w: &mut World, at: usize, n: usize) {
    for _ in 0..n {
        let rb = w.mem(at).insert(vec![0; 8]);
        w.nodes[at]
            .eng
            .irecv(0, MatchSpec::mpi(CTX, ANY_SOURCE, ANY_TAG), rb)
            .unwrap();
    }
}

/// Takes node `i`'s completions (all must be successes); returns how many.
fn drain(w: &mut World, i: usize) -> usize {
    let mut n = 0;
    while let Some(c) = w.nodes[i].eng.pop_completion() {
        assert!(c.result.is_ok(), "node {i}: {c:?}");
        n += 1;
    }
    n
}

/// Every node connected to node 0 (one message each, acknowledged) and quiet again.
fn connect_all(w: &mut World) {
    let n = w.nodes.len();
    post(w, 0, n - 1);
    for i in 1..n {
        send(w, i, 0, 0);
    }
    let mut done = 0;
    w.run_until(200_000, |w| {
        done += (0..w.nodes.len()).map(|i| drain(w, i)).sum::<usize>();
        done == 2 * (n - 1)
    });
    for _ in 0..100 {
        w.step();
    }
}

/// 32 nodes each send node 0 a message every 128 us, staggered so that node 0 receives a
/// frame every 4 us: its loop never runs idle, and no peer sends twice within the old 20 us
/// ack delay. Node 0's acks coalesce: one ack frame per `ack_every` messages or per
/// `max_ack_delay_ns`, not one per message; and the senders never time out.
#[test]
fn sparse_peers_under_load_get_one_ack_for_several_messages() {
    let senders = 32;
    let mut w = World::new(senders + 1, lossless(), 21, Config::default());
    for i in 0..=senders {
        w.nodes[i].eng.open_endpoint(Some(0)).unwrap();
    }
    connect_all(&mut w);
    let (acks, frames) = sparse_traffic(&mut w, senders, 120);
    assert!(
        acks <= 0.1 && frames <= 0.1,
        "node 0 sent {acks:.3} acks and {frames:.3} frames per message"
    );
    for i in 1..=senders {
        assert_eq!(w.nodes[i].eng.stats.retransmits, 0, "node {i}");
    }
}

/// Node 0's 32 senders each send a message every 128 us (a frame every 4 us at node 0), in
/// order, `per` each; returns node 0's ack frames and frames per message. Every message is
/// received and every send completes.
fn sparse_traffic(w: &mut World, senders: usize, per: usize) -> (f64, f64) {
    post(w, 0, senders * per);
    let (acks0, frames0) = (
        w.nodes[0].eng.stats.acks_sent,
        w.nodes[0].eng.stats.tx_frames,
    );
    let mut next = w.now;
    let (mut sent, mut got, mut done) = (0, 0, 0);
    w.run_until(4_000_000, |w| {
        if sent < senders * per && w.now >= next {
            send(w, 1 + sent % senders, 0, 1 + sent as u32);
            sent += 1;
            next += 4_000;
        }
        got += drain(w, 0);
        done += (1..=senders).map(|i| drain(w, i)).sum::<usize>();
        got == senders * per && done == senders * per
    });
    let s = &w.nodes[0].eng.stats;
    let n = (senders * per) as f64;
    (
        (s.acks_sent - acks0) as f64 / n,
        (s.tx_frames - frames0) as f64 / n,
    )
}

/// With many peers owing an ack at once (`ack_busy_peers`, 8 here), node 0 holds acks up to
/// the busy delay (4 ms here, against 200 us), but only to a peer it has told so in an ack
/// (wire version 8): its acks coalesce over several times more messages, and no sender's
/// retransmit timer fires, though its timeout by the delay advertised at connect (1 ms +
/// 200 us) is far shorter than the busy hold. Once traffic stops, node 0 leaves the busy hold, says
/// so in its next acks, and a lost last frame is again found within the timeout plus the
/// short delay.
#[test]
fn many_sparse_peers_get_the_busy_hold_announced_before_it_applies() {
    let senders = 32;
    let run = |busy_peers: usize| {
        let cfg = Config {
            max_ack_delay_ns: 200_000,
            max_ack_delay_busy_ns: 4_000_000,
            ack_busy_peers: busy_peers,
            ..Config::default()
        };
        let mut w = World::new(senders + 1, lossless(), 24, cfg);
        for i in 0..=senders {
            w.nodes[i].eng.open_endpoint(Some(0)).unwrap();
        }
        connect_all(&mut w);
        let (acks, _) = sparse_traffic(&mut w, senders, 60);
        let spells = w.nodes[0].eng.stats.ack_busy_spells;
        assert_eq!(spells > 0, busy_peers <= senders, "busy spells: {spells}");
        for i in 1..=senders {
            let s = &w.nodes[i].eng.stats;
            assert_eq!((s.rto_events, s.retransmits), (0, 0), "node {i} timed out");
        }
        (acks, w)
    };
    let (never, _) = run(usize::MAX);
    let (busy, mut w) = run(8);
    assert!(
        never >= 0.3 && busy < never / 3.0,
        "ack frames per message: {never:.3} with the short hold only, {busy:.3} with the busy hold"
    );
    // Quiet again: node 0's acks of the next messages announce the short hold, and a lost
    // last frame of node 1 is recovered within its timeout plus that hold.
    for _ in 0..1_000 {
        w.step();
    }
    assert!(!w.nodes[0].eng.ack_busy());
    let cfg = w.nodes[0].eng.config().clone();
    tail_loss_in(&mut w, &cfg);
}

/// A frame that fills the sender's window to three quarters asks for its ack at once
/// (`FLAG_ACK_NOW`), and gets it even though the receiver's loop is busy and the frames
/// before it had their ack held.
#[test]
fn a_frame_flagged_ack_now_is_acknowledged_at_once() {
    let cfg = Config {
        window: 8,
        ..Config::default()
    };
    let mut w = World::new(2, lossless(), 22, cfg);
    for i in 0..2 {
        w.nodes[i].eng.open_endpoint(Some(0)).unwrap();
    }
    connect_all(&mut w);
    post(&mut w, 0, 8);
    let acks = w.nodes[0].eng.stats.acks_sent;
    let rx = w.nodes[0].eng.stats.rx_frames;
    // Frames 1..=5 of the window, one every 3 us: node 0's loop receives all the time.
    for k in 1..=5 {
        let start = w.now;
        send(&mut w, 1, 0, k);
        w.run_until(100, |w| w.now >= start + 3_000);
    }
    w.run_until(100, |w| w.nodes[0].eng.stats.rx_frames == rx + 5);
    assert_eq!(
        w.nodes[0].eng.stats.acks_sent, acks,
        "the first five frames' ack is held"
    );
    // The sixth fills three quarters of the window: acknowledged as it arrives.
    send(&mut w, 1, 0, 6);
    w.run_until(100, |w| w.nodes[0].eng.stats.rx_frames == rx + 6);
    assert_eq!(
        w.nodes[0].eng.stats.acks_sent,
        acks + 1,
        "acknowledged in the poll that received it"
    );
    w.run_until(100_000, |w| {
        drain(w, 1) == 6 || w.nodes[1].eng.pending_ops() == 0
    });
    assert_eq!(w.nodes[1].eng.stats.retransmits, 0);
}

/// The last frame of a burst is lost: nothing follows it to show the gap, so only the
/// sender's retransmit timer finds it. It fires once the receiver's ack could no longer be
/// held (the round-trip bound plus the delay node 0 advertised), its probe is answered at once,
/// and the frame is resent: recovered within that time, with one retransmission. The frames
/// before it, whose ack was held for up to the delay, are not resent.
#[test]
fn a_lost_last_frame_is_recovered_within_the_timeout_and_the_ack_delay() {
    // The default delay, and a shorter one: the sender times out by the delay its peer
    // advertised at connect, not the protocol's limit.
    for delay in [Config::default().max_ack_delay_ns, 300_000] {
        tail_loss(Config {
            max_ack_delay_ns: delay,
            ..Config::default()
        });
    }
}

fn tail_loss(cfg: Config) {
    let mut w = World::new(2, lossless(), 23, cfg.clone());
    for i in 0..2 {
        w.nodes[i].eng.open_endpoint(Some(0)).unwrap();
    }
    connect_all(&mut w);
    tail_loss_in(&mut w, &cfg);
}

/// Node 1 sends node 0 three messages, then a fourth that is lost: recovered within the
/// retransmit timeout plus node 0's (short) ack delay, with one retransmission.
fn tail_loss_in(w: &mut World, cfg: &Config) {
    let retransmits = w.nodes[1].eng.stats.retransmits;
    post(w, 0, 4);
    for k in 1..=3 {
        send(w, 1, 0, k);
    }
    // Sent in node 1's next poll; lost on the wire (the link drops everything meanwhile).
    w.step();
    let rx = w.nodes[0].eng.stats.rx_frames;
    w.net.set_faults(Faults {
        loss: 1.0,
        ..lossless()
    });
    send(w, 1, 0, 4);
    let sent_at = w.now;
    w.step();
    w.net.set_faults(lossless());
    let mut got = 0;
    w.run_until(1_000_000, |w| {
        got += drain(w, 0);
        got == 4
    });
    let took = w.now - sent_at;
    // Node 1 has a round-trip sample (its handshake), far under the timeout's floor.
    let bound = cfg.rto_min_ns + cfg.max_ack_delay_ns;
    // Beyond it: the timer pass's period (a quarter of the floor) and the resend's trip.
    assert!(
        took <= bound + cfg.rto_min_ns / 2,
        "lost frame recovered after {took} ns (bound {bound} ns)"
    );
    assert!(w.nodes[0].eng.stats.rx_frames > rx + 3);
    assert_eq!(w.nodes[1].eng.stats.retransmits, retransmits + 1);
    // Nothing else timed out: every send completes.
    let mut done = 0;
    w.run_until(1_000_000, |w| {
        done += drain(w, 1);
        done == 4
    });
}

/// A sender running short of credit flags its frames `FLAG_ACK_NOW`; when the messages they
/// carried wait in the receiver's unexpected store and are matched later, the credit they
/// free is acknowledged at once, not held up to the ack delay (50 ms here, with an idle
/// trigger as long: without the flag's memory the sender would wait that long for it).
#[test]
fn credit_freed_by_a_late_match_reaches_a_sender_short_of_it_at_once() {
    let cfg = Config {
        eager_credit: 8 << 10,
        eager_credit_initial: 8 << 10,
        eager_credit_floor: 8 << 10,
        max_ack_delay_ns: 50_000_000,
        ack_idle_ns: 50_000_000,
        ..Config::default()
    };
    let mut w = World::new(2, lossless(), 23, cfg);
    for i in 0..2 {
        w.nodes[i].eng.open_endpoint(Some(0)).unwrap();
    }
    connect_all(&mut w);
    // Six 1 KiB messages nobody receives yet: they use up most of the 8 KiB grant, the last
    // ones flagged ack-now.
    let n = 6;
    let dst = EndpointAddr::new(mac(0), 0);
    let mut sends = Vec::new();
    for tag in 1..=n {
        let buf = w.mem(1).insert(pattern(1, tag, 1024));
        sends.push(
            w.nodes[1]
                .eng
                .isend(
                    0,
                    dst,
                    match_bits(CTX, tag as i32),
                    1,
                    buf,
                    SendMode::Standard,
                )
                .unwrap(),
        );
    }
    let unexpected = w.nodes[0].eng.stats.unexpected;
    w.run_until(10_000, |w| {
        w.nodes[0].eng.stats.unexpected == unexpected + n as u64
    });
    for _ in 0..20 {
        w.step();
    }
    let (acks, t0) = (w.nodes[0].eng.stats.acks_sent, w.now);
    for tag in 1..=n {
        let rb = w.mem(0).insert(vec![0; 1024]);
        w.nodes[0]
            .eng
            .irecv(0, MatchSpec::mpi(CTX, 1, tag as i32), rb)
            .unwrap();
    }
    let mut got = 0;
    w.run_until(1_000, |w| {
        got += drain(w, 0);
        got == n as usize && w.nodes[0].eng.stats.acks_sent > acks
    });
    assert!(
        w.now - t0 < 1_000_000,
        "the freed credit waited {} us for its ack",
        (w.now - t0) / 1000
    );
}
