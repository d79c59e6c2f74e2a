//! A peer of another wire version fails the operations addressed to it at connect, with an
//! error that says so, instead of leaving them to the peer deadline.

mod common;
use common::*;
use tigon_engine::link::Link;
use tigon_engine::matching::match_bits;
use tigon_engine::sim::Faults;
use tigon_engine::wire::{self, ConnectRepr, Frame, Kind, Repr};
use tigon_engine::*;

/// A handshake frame from node 1's endpoint 0 to node 0's endpoint 0, of wire `version`.
fn handshake(kind: Kind, version: u8, src_session: u32, dst_session: u32) -> Vec<u8> {
    let r = Repr {
        dst_mac: mac(0),
        src_mac: mac(1),
        kind: Some(kind),
        src_session,
        dst_session,
        length: wire::CONNECT_PAYLOAD_LEN as u32,
        ..Repr::default()
    };
    let mut buf = vec![0u8; wire::OVERHEAD + wire::CONNECT_PAYLOAD_LEN];
    r.emit(&mut buf);
    ConnectRepr {
        max_frame: 1514,
        window: 64,
        eager_credit: 1 << 16,
        max_ack_delay_us: 0,
        slot: 0,
    }
    .emit(&mut buf[wire::OVERHEAD..]);
    // Its checksum is its own: over its version byte (a version-1 frame's is another
    // function altogether).
    buf[wire::ETH_HEADER_LEN] = version;
    Frame::new_unchecked(&mut buf[..]).fill_checksum();
    buf
}

/// A world where node 1 is scripted by hand (its engine never polls).
fn world() -> (World, EndpointAddr, ReqId) {
    let mut w = World::new(2, Faults::default(), 5, Config::default());
    w.nodes[0].eng.open_endpoint(Some(0)).unwrap();
    let old = EndpointAddr::new(mac(1), 0);
    let buf = w.mem(0).insert(vec![1; 100]);
    let s = w.nodes[0]
        .eng
        .isend(0, old, match_bits(1, 1), 0, buf, SendMode::Standard)
        .unwrap();
    (w, old, s)
}

fn poll0(w: &mut World) {
    let n = &mut w.nodes[0];
    n.eng.poll(&mut n.port, w.now);
    w.now += 1_000;
    w.net.set_time(w.now);
}

/// What node 0 sent to node 1 since the last call.
fn sent_to_1(w: &mut World) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    w.nodes[1].port.rx_burst(&mut out, 64);
    out
}

#[test]
fn old_peer_connecting_fails_our_sends_to_it_at_once_and_hears_a_reset() {
    // Every earlier version (the one before this, 5: pulled data under the full header).
    for theirs in 1..wire::VERSION {
        let (mut w, old, s) = world();
        poll0(&mut w);
        // Our connect request went out in this version.
        let out = sent_to_1(&mut w);
        assert!(out.iter().any(|f| f[wire::ETH_HEADER_LEN] == wire::VERSION
            && f[wire::ETH_HEADER_LEN + 1] == Kind::Connect as u8));
        // The older peer cannot read it; it connects to us in its own version.
        let mut f = vec![handshake(Kind::Connect, theirs, 0x1234, 0)];
        w.nodes[1].port.tx_burst(&mut f);
        w.net.set_time(w.now);
        let start = w.now;
        poll0(&mut w);
        poll0(&mut w);
        let c = w.nodes[0]
            .eng
            .pop_completion()
            .expect("the send failed at once");
        assert_eq!(c.req, s);
        assert_eq!(c.result, Err(Error::WireVersion(old, theirs)));
        let msg = c.result.unwrap_err().to_string();
        assert!(
            msg.contains(&format!("wire version {theirs}"))
                && msg.contains(&format!("version {}", wire::VERSION)),
            "{msg}"
        );
        assert!(w.now - start < w.cfg.rto_min_ns, "not after a timeout");
        assert_eq!(w.nodes[0].eng.stats.peer_version_mismatch, 1);
        // It is answered with a Reset of this version, addressed to it.
        let out = sent_to_1(&mut w);
        let reset = out
            .iter()
            .find(|f| f[wire::ETH_HEADER_LEN + 1] == Kind::Reset as u8)
            .expect("a reset to the old peer");
        assert_eq!(reset[wire::ETH_HEADER_LEN], wire::VERSION);
        let r = Repr::parse(&Frame::new_checked(&reset[..]).unwrap()).unwrap();
        assert_eq!((r.dst_mac, r.dst_ep, r.dst_session), (mac(1), 0, 0x1234));
    }
}

#[test]
fn newer_peer_refusing_our_connect_fails_the_send_with_its_version() {
    let (mut w, newer, s) = world();
    poll0(&mut w);
    let connect = sent_to_1(&mut w)
        .into_iter()
        .find(|f| f[wire::ETH_HEADER_LEN + 1] == Kind::Connect as u8)
        .expect("connect sent");
    let ours = Repr::parse(&Frame::new_checked(&connect[..]).unwrap()).unwrap();
    // A peer of the next version answers with a Reset of its version.
    let newer_version = wire::VERSION + 1;
    let mut f = vec![handshake(
        Kind::Reset,
        newer_version,
        0x777,
        ours.src_session,
    )];
    w.nodes[1].port.tx_burst(&mut f);
    w.net.set_time(w.now);
    poll0(&mut w);
    let c = w.nodes[0]
        .eng
        .pop_completion()
        .expect("the send failed at once");
    assert_eq!(c.req, s);
    assert_eq!(c.result, Err(Error::WireVersion(newer, newer_version)));
    // Nothing answers a Reset: no exchange of refusals.
    poll0(&mut w);
    assert!(
        sent_to_1(&mut w)
            .iter()
            .all(|f| f[wire::ETH_HEADER_LEN + 1] != Kind::Reset as u8)
    );
}

#[test]
fn a_frame_of_ours_with_a_damaged_version_byte_is_no_other_version() {
    let (mut w, _, _) = world();
    poll0(&mut w);
    let mut f = handshake(Kind::Connect, wire::VERSION, 0x1234, 0);
    f[wire::ETH_HEADER_LEN] ^= 0x08;
    w.nodes[1].port.tx_burst(&mut vec![f]);
    w.net.set_time(w.now);
    poll0(&mut w);
    assert!(
        w.nodes[0].eng.pop_completion().is_none(),
        "the send lives on"
    );
    assert_eq!(w.nodes[0].eng.stats.peer_version_mismatch, 0);
    assert_eq!(w.nodes[0].eng.stats.drop_checksum, 1);
}

#[test]
fn peers_of_this_version_send_small_messages_under_the_compact_header() {
    let mut w = World::new(
        2,
        Faults {
            delay_ns: 5_000,
            ..Faults::default()
        },
        6,
        Config::default(),
    );
    w.nodes[0].eng.open_endpoint(Some(0)).unwrap();
    let b = w.nodes[1].eng.open_endpoint(Some(0)).unwrap();
    let round = |w: &mut World, n: usize, len: usize| {
        let before = w.nodes[0].eng.stats.tx_bytes;
        let mut sends = Vec::new();
        for k in 0..n {
            let buf = w.mem(0).insert(pattern(0, k as u32, len));
            sends.push(
                w.nodes[0]
                    .eng
                    .isend(0, b, match_bits(1, 1), 0, buf, SendMode::Standard)
                    .unwrap(),
            );
            let rb = w.mem(1).insert(vec![0; len]);
            w.nodes[1]
                .eng
                .irecv(0, MatchSpec::mpi(1, 0, 1), rb)
                .unwrap();
        }
        w.run_until(100_000, |w| {
            w.nodes.iter().all(|n| n.eng.pending_ops() == 0)
        });
        while w.nodes[0].eng.pop_completion().is_some() {}
        while w.nodes[1].eng.pop_completion().is_some() {}
        w.nodes[0].eng.stats.tx_bytes - before
    };
    round(&mut w, 1, 8); // connect
    assert_eq!(w.nodes[0].eng.stats.retransmits, 0);
    // One-way traffic: node 0 sends data frames only (acks come from node 1).
    assert_eq!(
        round(&mut w, 100, 8),
        100 * (wire::COMPACT_OVERHEAD + 8) as u64,
        "8-byte messages: 46-byte header"
    );
    assert_eq!(
        round(&mut w, 10, 300),
        10 * (wire::OVERHEAD + 300) as u64,
        "past 255 bytes: the full header"
    );
    assert_eq!(w.nodes[0].eng.stats.retransmits, 0);
}

#[test]
fn acks_with_nothing_missing_go_under_the_compact_header() {
    let mut w = World::new(
        2,
        Faults {
            delay_ns: 5_000,
            ..Faults::default()
        },
        7,
        Config::default(),
    );
    w.nodes[0].eng.open_endpoint(Some(0)).unwrap();
    let b = w.nodes[1].eng.open_endpoint(Some(0)).unwrap();
    let round = |w: &mut World, n: usize| {
        for k in 0..n {
            let buf = w.mem(0).insert(pattern(0, k as u32, 8));
            w.nodes[0]
                .eng
                .isend(0, b, match_bits(1, 1), 0, buf, SendMode::Standard)
                .unwrap();
            let rb = w.mem(1).insert(vec![0; 8]);
            w.nodes[1]
                .eng
                .irecv(0, MatchSpec::mpi(1, 0, 1), rb)
                .unwrap();
            // One message at a time: each is acknowledged on its own.
            w.run_until(100_000, |w| {
                w.nodes.iter().all(|n| n.eng.pending_ops() == 0)
            });
        }
    };
    round(&mut w, 1); // connect
    let s0 = w.nodes[1].eng.stats.clone();
    round(&mut w, 20);
    let s = &w.nodes[1].eng.stats;
    let acks = s.acks_sent - s0.acks_sent;
    assert!(acks >= 20, "{acks} acks");
    // One-way traffic: node 1 sends acks only, each a compact header.
    assert_eq!(s.tx_frames - s0.tx_frames, acks);
    assert_eq!(
        s.tx_bytes - s0.tx_bytes,
        acks * wire::COMPACT_OVERHEAD as u64
    );
    assert_eq!(w.nodes[0].eng.stats.retransmits, 0);
    // Every one of them taken by node 0 (none dropped as another session's).
    assert_eq!(w.nodes[0].eng.stats.rx_frames, s.tx_frames);
    assert_eq!(w.nodes[0].eng.stats.drop_stale, 0);
}
