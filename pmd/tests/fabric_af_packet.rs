//! 100 000 frames of random sizes (60..=9000 B) from one network namespace to another over
//! a veth pair (MTU 9000), through net_af_packet on both ends, arrive byte-identical.
//! (af_packet in DPDK 22.11 refuses `rte_eth_dev_set_mtu(9000)`: its frames follow the
//! kernel interface's MTU and the ring's framesz instead.)
//! The kernel may drop frames (the receiving packet socket's ring overflows when the receiver
//! falls behind, e.g. on a busy machine): those are counted and printed, with the veth
//! counters that show where they went; corruption or duplication is never allowed. (DPDK
//! 22.11's af_packet does not report the socket's drops in `imissed`.)

use std::time::Duration;

use tigon_pmd::testbed::{Endpoint, Stream, VethPair, unique_tag};

#[test]
fn af_packet_100k_random_frames_between_two_namespaces() {
    let tag = unique_tag();
    let veth = VethPair::new(&tag, 9000).expect("netns + veth (needs root and iproute2)");
    let count = 100_000u64;
    // Ring frames of 9216 B hold a 9014-byte frame plus the TPACKET header; the receiving
    // pool's mbufs must hold a whole ring frame (af_packet does not chain on rx).
    let common = |ifc: &str, lcore: &str, pfx: &str| -> Vec<String> {
        vec![
            "--dev".into(),
            format!("net_af_packet0,iface={ifc},framesz=9216,blocksz=36864,framecnt=2048"),
            "--lcore".into(),
            lcore.into(),
            "--prefix".into(),
            format!("tt-{pfx}-{tag}"),
            "--count".into(),
            count.to_string(),
            "--min".into(),
            "60".into(),
            "--max".into(),
            "9000".into(),
            "--seed".into(),
            "7".into(),
            "--data-room".into(),
            tigon_pmd::JUMBO_DATA_ROOM.to_string(),
        ]
    };
    let mut recv = vec!["recv".to_string()];
    recv.extend(common(&veth.b, "0", "ar"));
    let mut send = vec!["send".to_string()];
    send.extend(common(&veth.a, "1", "as"));
    // Transmit chained mbufs (2 KiB segments): exercises multi-segment tx.
    send.extend([
        "--tx-data-room".into(),
        tigon_pmd::DEFAULT_DATA_ROOM.to_string(),
    ]);
    let stream = Stream {
        program: env!("CARGO_BIN_EXE_tigon-frames").into(),
        prefix_args: vec![],
        receiver: Endpoint {
            netns: Some(veth.ns_b.name().to_string()),
            args: recv,
        },
        sender: Endpoint {
            netns: Some(veth.ns_a.name().to_string()),
            args: send,
        },
        timeout: Duration::from_secs(300),
    };
    let res = stream.run();
    let k = veth.counters();
    let (a, b) = (veth.a.clone(), veth.b.clone());
    drop(veth);
    let (got, sent) = res.expect("af_packet stream");
    println!("af_packet: {} | {}", got.to_line(), sent.to_line());
    println!(
        "af_packet: {} frames received, {} lost, {} corrupted, {:.0} frames/s, {:.2} Gbit/s",
        got.received,
        got.lost,
        got.corrupted,
        got.frames_per_sec(),
        got.gbit_per_sec()
    );
    println!(
        "af_packet: kernel: {} frames left {a} ({} dropped), {} reached {b} ({} dropped); \
         frames that reached the interface but not the receiver overflowed its socket ring",
        k.a_tx_packets, k.a_tx_dropped, k.b_rx_packets, k.b_rx_dropped
    );
    assert_eq!(sent.sent, count, "sender did not send everything");
    assert_eq!(got.corrupted, 0, "corrupted frames");
    assert_eq!(got.duplicates, 0, "duplicated frames");
    assert_eq!(got.received + got.lost, count);
    assert!(got.received > 0, "nothing arrived");
    assert!(
        k.b_rx_packets == 0 || k.b_rx_packets >= got.received,
        "the receiver got more frames than its interface saw: {k:?}"
    );
}
