//! Rendezvous keeps the sender's window from filling: the receiver asks for no more than the
//! frames the sender may have in flight hold, so on a lossless link the sender never waits
//! for acks with pulled data queued behind a full window.

mod common;
use common::*;
use tigon_engine::matching::match_bits;
use tigon_engine::sim::Faults;
use tigon_engine::*;

#[test]
fn pulled_messages_never_fill_the_senders_window_on_a_lossless_link() {
    // Lossless, a frame 5 us on the wire (as timers.rs's lossless link).
    let faults = Faults {
        delay_ns: 5_000,
        ..Faults::default()
    };
    let mut w = World::new(2, faults, 5, Config::default());
    w.nodes[0].eng.open_endpoint(Some(0)).unwrap();
    let dst = w.nodes[1].eng.open_endpoint(Some(0)).unwrap();
    let len = 4 << 20;
    let mut ops = Vec::new();
    for k in 0..2u32 {
        let data = pattern(0, k, len);
        let buf = w.mem(0).insert(data.clone());
        let s = w.nodes[0]
            .eng
            .isend(0, dst, match_bits(1, k as i32), 0, buf, SendMode::Standard)
            .unwrap();
        let rb = w.mem(1).insert(vec![0; len]);
        let r = w.nodes[1]
            .eng
            .irecv(0, MatchSpec::mpi(1, 0, k as i32), rb)
            .unwrap();
        ops.push((s, r, rb, data));
    }
    for (s, r, rb, data) in ops {
        assert!(w.wait(1, r, 1_000_000).result.is_ok());
        assert!(w.wait(0, s, 1_000_000).result.is_ok());
        assert!(w.mem(1).get(&rb).unwrap()[..] == data[..], "message bytes");
    }
    let st = &w.nodes[0].eng.stats;
    assert!(
        st.tx_frames > 5_000,
        "the data went in frames: {}",
        st.tx_frames
    );
    assert_eq!(st.tx_window_full, 0, "sender waited on a full window");
    assert_eq!(st.retransmits, 0);
}
