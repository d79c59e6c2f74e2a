//! Peers that restart or vanish, receivers that fall behind, and bytes from nowhere.

mod common;
use common::*;
use proptest::prelude::*;
use tigon_engine::matching::match_bits;
use tigon_engine::sim::Faults;
use tigon_engine::wire::{self, Kind, Repr};
use tigon_engine::*;

fn quick_cfg() -> Config {
    Config {
        peer_timeout_ns: 50_000_000,
        ..Config::default()
    }
}

#[test]
fn peer_restart_mid_transfer_fails_old_then_new_session_works() {
    let mut w = World::new(
        2,
        Faults {
            delay_ns: 5_000,
            ..Faults::default()
        },
        3,
        quick_cfg(),
    );
    w.nodes[0].eng.open_endpoint(Some(0)).unwrap();
    let b = w.nodes[1].eng.open_endpoint(Some(0)).unwrap();
    let data = pattern(0, 0, 8 << 20);
    let buf = w.mem(0).insert(data.clone());
    let s = w.nodes[0]
        .eng
        .isend(0, b, match_bits(1, 1), 0, buf, SendMode::Standard)
        .unwrap();
    let rb = w.mem(1).insert(vec![0; 8 << 20]);
    w.nodes[1]
        .eng
        .irecv(0, MatchSpec::mpi(1, 0, 1), rb)
        .unwrap();
    // Let part of it through, then restart node 1: a new engine, a new session.
    w.run_until(1_000_000, |w| w.nodes[1].eng.stats.rx_frames > 500);
    w.add_node(1, 999);
    w.nodes[1].eng.open_endpoint(Some(0)).unwrap();
    let c = w.wait(0, s, 2_000_000);
    assert_eq!(
        c.result,
        Err(Error::PeerRestarted(b)),
        "the old transfer must fail, not hang"
    );
    assert!(
        w.now < 40_000_000,
        "restart detected by session, before the unreachable deadline"
    );
    // A new message to the restarted peer goes through with a fresh connection.
    let buf = w.mem(0).insert(pattern(0, 1, 100_000));
    let s2 = w.nodes[0]
        .eng
        .isend(0, b, match_bits(1, 1), 0, buf, SendMode::Standard)
        .unwrap();
    let rb = w.mem(1).insert(vec![0; 100_000]);
    let r = w.nodes[1]
        .eng
        .irecv(0, MatchSpec::mpi(1, 0, 1), rb)
        .unwrap();
    assert!(w.wait(1, r, 2_000_000).result.is_ok());
    assert_eq!(w.mem(1).get(&rb).unwrap(), &pattern(0, 1, 100_000));
    assert!(w.wait(0, s2, 2_000_000).result.is_ok());
}

#[test]
fn vanished_peer_fails_every_operation_within_the_deadline() {
    let cfg = quick_cfg();
    let deadline = cfg.peer_timeout_ns;
    let mut w = World::new(
        2,
        Faults {
            delay_ns: 5_000,
            ..Faults::default()
        },
        4,
        cfg,
    );
    let a = w.nodes[0].eng.open_endpoint(Some(0)).unwrap();
    let b = w.nodes[1].eng.open_endpoint(Some(0)).unwrap();
    // A transfer in each direction: node 0 sends big, and pulls a big one from node 1.
    let buf = w.mem(0).insert(vec![1; 4 << 20]);
    let s = w.nodes[0]
        .eng
        .isend(0, b, match_bits(1, 1), 0, buf, SendMode::Standard)
        .unwrap();
    let buf1 = w.mem(1).insert(vec![2; 4 << 20]);
    w.nodes[1]
        .eng
        .isend(0, a, match_bits(1, 2), 1, buf1, SendMode::Standard)
        .unwrap();
    let rb = w.mem(0).insert(vec![0; 4 << 20]);
    let r = w.nodes[0]
        .eng
        .irecv(0, MatchSpec::mpi(1, 1, 2), rb)
        .unwrap();
    let rb1 = w.mem(1).insert(vec![0; 4 << 20]);
    w.nodes[1]
        .eng
        .irecv(0, MatchSpec::mpi(1, 0, 1), rb1)
        .unwrap();
    w.run_until(1_000_000, |w| w.nodes[0].eng.stats.rx_frames > 300);
    let gone_at = w.now;
    w.net.set_down(common::mac(1), true);
    w.nodes.truncate(1);
    let mut failed = Vec::new();
    w.run_until(10_000_000, |w| {
        while let Some(c) = w.nodes[0].eng.pop_completion() {
            failed.push(c);
        }
        failed.len() == 2
    });
    for c in &failed {
        assert!([s, r].contains(&c.req));
        assert_eq!(c.result, Err(Error::PeerUnreachable(b)));
    }
    let took = w.now - gone_at;
    assert!(
        took <= deadline + deadline / 2,
        "failed after {took} ns, deadline {deadline} ns"
    );
    // A new send to the dead peer fails too, within the deadline again.
    let buf = w.mem(0).insert(vec![1; 10]);
    let s3 = w.nodes[0]
        .eng
        .isend(0, b, match_bits(1, 1), 0, buf, SendMode::Standard)
        .unwrap();
    assert_eq!(
        w.wait(0, s3, 10_000_000).result,
        Err(Error::PeerUnreachable(b))
    );
}

#[test]
fn full_unexpected_store_throttles_the_sender_and_loses_nothing() {
    // A tiny store: 64 KiB for everyone, 16 KiB of eager credit per peer.
    let cfg = Config {
        unexpected_bytes: 64 << 10,
        eager_credit: 16 << 10,
        unexpected_count: 64,
        ..Config::default()
    };
    let mut w = World::new(
        2,
        Faults {
            delay_ns: 5_000,
            loss: 0.05,
            ..Faults::default()
        },
        5,
        cfg.clone(),
    );
    w.nodes[0].eng.open_endpoint(Some(0)).unwrap();
    let b = w.nodes[1].eng.open_endpoint(Some(0)).unwrap();
    let n = 500;
    let mut sends = Vec::new();
    for k in 0..n {
        let len = [100, 3000, 20_000, 60_000][k % 4];
        let buf = w.mem(0).insert(pattern(0, k as u32, len));
        sends.push(
            w.nodes[0]
                .eng
                .isend(0, b, match_bits(1, 5), 0, buf, SendMode::Standard)
                .unwrap(),
        );
    }
    // The receiver posts nothing for a long while.
    for _ in 0..200_000 {
        w.step();
        assert!(
            w.nodes[1].eng.unexpected_bytes() <= cfg.unexpected_bytes,
            "store over its bound"
        );
    }
    let st = &w.nodes[1].eng.stats;
    assert!(st.unexpected_bytes_peak <= cfg.unexpected_bytes);
    let sent_eager = w.nodes[0].eng.stats.eager_sent;
    assert!(
        sent_eager < n as u64,
        "credits exhausted: later messages must go by rendezvous"
    );
    // Then it receives everything, in order, intact.
    let mut recvs = Vec::new();
    for k in 0..n {
        let len = [100, 3000, 20_000, 60_000][k % 4];
        let rb = w.mem(1).insert(vec![0; len]);
        recvs.push((
            w.nodes[1]
                .eng
                .irecv(0, MatchSpec::mpi(1, 0, 5), rb)
                .unwrap(),
            rb,
            k,
            len,
        ));
    }
    let mut done = 0;
    w.run_until(5_000_000, |w| {
        while let Some(c) = w.nodes[1].eng.pop_completion() {
            assert!(c.result.is_ok(), "{:?}", c.result);
            done += 1;
        }
        done == n
    });
    for (_, rb, k, len) in recvs {
        assert!(
            w.mem(1).get(&rb).unwrap() == &pattern(0, k as u32, len),
            "message {k}"
        );
    }
    let mut sent = 0;
    w.run_until(5_000_000, |w| {
        while let Some(c) = w.nodes[0].eng.pop_completion() {
            assert!(c.result.is_ok());
            sent += 1;
        }
        sent == n
    });
    assert_eq!(w.nodes[1].eng.unexpected_bytes(), 0);
}

/// A well-formed frame header aimed at node 1's endpoint 0, for the fuzzers to mutate.
fn header_frame(kind: u8, fields: [u32; 8], len: u16, payload: &[u8]) -> Vec<u8> {
    let kind = Kind::from_u8(kind % 16).or(Some(Kind::Eager));
    // The compact header of a small message has a one-byte length and flags, the pull
    // header one-byte flags and a 16-bit length.
    let (small, max) = match kind {
        Some(Kind::Small) => (true, wire::COMPACT_MAX_PAYLOAD as u32),
        Some(Kind::PullData) => (true, wire::PULL_MAX_PAYLOAD as u32),
        _ => (false, u32::MAX),
    };
    let r = Repr {
        dst_mac: common::mac(1),
        src_mac: common::mac(0),
        kind,
        flags: if small {
            fields[0] as u8 as u16
        } else {
            fields[0] as u16
        },
        dst_ep: 0,
        src_ep: 0,
        src_session: fields[1] | 1,
        dst_session: fields[2],
        seq: fields[3] % 4,
        ack: fields[4],
        msg_id: fields[5] % 4,
        src_rank: 0,
        frag_index: fields[6] % 4,
        frag_count: fields[7] % 5,
        length: (len as u32).min(payload.len() as u32).min(max),
        credit: fields[4],
        match_bits: fields[5] as u64,
        offset: fields[6] as u64 % 3000,
        total: fields[7] as u64 % 100_000,
        tag: fields[2],
        // Any slot at all: a hint naming no peer, or another one, changes nothing.
        slot: fields[3],
    };
    let head = r.payload_offset();
    let mut buf = vec![0; (head + payload.len()).max(wire::MIN_FRAME)];
    r.emit(&mut buf);
    buf[head..head + payload.len()].copy_from_slice(payload);
    wire::Frame::new_unchecked(&mut buf[..]).fill_checksum();
    buf
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    /// Random bytes and random well-checksummed headers never panic the engine, and it still
    /// delivers a real message afterwards.
    #[test]
    fn garbage_frames_never_panic(raw in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..20),
                                  forged in proptest::collection::vec((any::<u8>(), any::<[u32; 8]>(), any::<u16>(),
                                      proptest::collection::vec(any::<u8>(), 0..200)), 0..40)) {
        let mut w = World::new(2, Faults::default(), 6, Config::default());
        w.nodes[0].eng.open_endpoint(Some(0)).unwrap();
        let b = w.nodes[1].eng.open_endpoint(Some(0)).unwrap();
        let rb = w.mem(1).insert(vec![0; 64]);
        let r = w.nodes[1].eng.irecv(0, MatchSpec::mpi(1, 0, 1), rb).unwrap();
        let mut port = w.net.port(MacAddr([2, 0, 0, 0, 0, 9]), 1514);
        let mut frames: Vec<Vec<u8>> = raw;
        for (k, f, l, p) in forged {
            frames.push(header_frame(k, f, l, &p));
        }
        for mut f in frames {
            if f.len() >= 6 {
                f[..6].copy_from_slice(&common::mac(1).0);
            }
            <_ as Link>::tx_burst(&mut port, &mut vec![f]);
            w.step();
        }
        let buf = w.mem(0).insert(b"still alive".to_vec());
        w.nodes[0].eng.isend(0, b, match_bits(1, 1), 0, buf, SendMode::Standard).unwrap();
        prop_assert!(w.wait(1, r, 1_000_000).result.is_ok());
    }
}
