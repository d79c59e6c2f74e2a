//! A small message under the compact header is taken only when it is addressed to this node
//! (or broadcast): its destination is checked as one integer on the fast path.

mod common;
use common::{MemEng as Eng, mem_engine as engine};
use tigon_engine::link::Link;
use tigon_engine::matching::match_bits;
use tigon_engine::memlink;
use tigon_engine::wire::{self, Kind, MacAddr};
use tigon_engine::*;

#[test]
fn a_small_frame_for_another_node_is_dropped_and_a_broadcast_one_taken() {
    let (ma, mb) = (MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]));
    let (mut la, mut lb) = memlink::pair(ma, mb, 1514, 64);
    let (mut a, mut b) = (engine(ma), engine(mb));
    let dst = EndpointAddr::new(ma, 0);
    let mut now = 1_000;
    // A first message sets the connection up both ways.
    let sb = b.copy_engine_mut().mem.insert(b"first!!!".to_vec());
    b.isend(0, dst, match_bits(1, 0), 7, sb, SendMode::Standard)
        .unwrap();
    let ra = a.copy_engine_mut().mem.insert(vec![0; 8]);
    a.irecv(0, MatchSpec::mpi(1, 7, 0), ra).unwrap();
    for _ in 0..20 {
        now += 1_000;
        b.poll(&mut lb, now);
        a.poll(&mut la, now);
    }
    assert!(a.pop_completion().unwrap().result.is_ok());
    // The next one goes under the compact header: B sends it, and it is taken off the link
    // by hand.
    let sb = b.copy_engine_mut().mem.insert(b"second!!".to_vec());
    b.isend(0, dst, match_bits(1, 1), 7, sb, SendMode::Standard)
        .unwrap();
    now += 1_000;
    b.poll(&mut lb, now);
    let mut frames = Vec::new();
    la.rx_burst(&mut frames, 32);
    let small = frames
        .iter()
        .find(|f| f.as_ref()[wire::ETH_HEADER_LEN + 1] == Kind::Small as u8)
        .expect("a small frame")
        .as_ref()
        .to_vec();
    let ra = a.copy_engine_mut().mem.insert(vec![0; 8]);
    a.irecv(0, MatchSpec::mpi(1, 7, 1), ra).unwrap();
    // Frames handed to A through a link of their own.
    let (mut inject, mut la2) = memlink::pair(mb, ma, 1514, 64);
    let mut send = |a: &mut Eng, dst: MacAddr| {
        let mut f = small.clone();
        f[..6].copy_from_slice(&dst.0);
        wire::fill_small_checksum(&mut f);
        inject.tx_burst(&mut vec![f]);
        a.poll(&mut la2, now);
    };
    for other in [[2, 0, 0, 0, 0, 3], [3, 0, 0, 0, 0, 1], [2, 0, 0, 0, 1, 1]] {
        let before = a.stats.drop_not_ours;
        send(&mut a, MacAddr(other));
        assert_eq!(a.stats.drop_not_ours, before + 1, "to {other:?}");
        assert!(a.pop_completion().is_none());
    }
    send(&mut a, MacAddr::BROADCAST);
    let c = a.pop_completion().expect("the broadcast frame is taken");
    assert!(c.result.is_ok());
    assert_eq!(a.copy_engine().mem.get(&ra).unwrap()[..], b"second!!"[..]);
}
