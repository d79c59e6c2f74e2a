//! Every frame but a pull fragment names the slot under which its receiver keeps the sender
//! (`Repr::slot`, told at connect: wire version 9), so that the receiver finds the sender's
//! state without a lookup by address. A hint is only a hint: one that is 0, names no peer, or
//! names another peer changes nothing about where the frame goes.

mod common;
use common::{MemEng as Eng, mem_engine as engine};
use tigon_engine::link::Link;
use tigon_engine::matching::match_bits;
use tigon_engine::memlink::{self, MemLink};
use tigon_engine::wire::{self, Kind, MacAddr};
use tigon_engine::*;

/// `from` sends `payload` to `to`'s endpoint 0 (tag `tag`, rank `rank`), which receives it:
/// both polled on their link until it completes.
fn message(
    (from, lf): (&mut Eng, &mut MemLink),
    (to, lt): (&mut Eng, &mut MemLink),
    rank: u32,
    tag: i32,
    payload: &[u8],
    now: &mut u64,
) {
    let dst = EndpointAddr::new(to.mac(), 0);
    let s = from.copy_engine_mut().mem.insert(payload.to_vec());
    from.isend(0, dst, match_bits(1, tag), rank, s, SendMode::Standard)
        .unwrap();
    let r = to.copy_engine_mut().mem.insert(vec![0; payload.len()]);
    to.irecv(0, MatchSpec::mpi(1, rank as i32, tag), r).unwrap();
    for _ in 0..50 {
        *now += 1_000;
        from.poll(lf, *now);
        to.poll(lt, *now);
    }
    let c = to.pop_completion().expect("the message arrives");
    assert!(c.result.is_ok(), "{c:?}");
    assert_eq!(to.copy_engine().mem.get(&r).unwrap()[..], payload[..]);
    while from.pop_completion().is_some() {}
}

/// The next compact frame `from` sends for a message to `to`, taken off the link by hand.
fn small_frame(
    from: &mut Eng,
    lf: &mut MemLink,
    lt: &mut MemLink,
    to: MacAddr,
    now: u64,
) -> Vec<u8> {
    let s = from.copy_engine_mut().mem.insert(b"hinted!!".to_vec());
    from.isend(
        0,
        EndpointAddr::new(to, 0),
        match_bits(1, 9),
        5,
        s,
        SendMode::Standard,
    )
    .unwrap();
    from.poll(lf, now);
    let mut frames = Vec::new();
    lt.rx_burst(&mut frames, 32);
    frames
        .iter()
        .find(|f| f.as_ref()[wire::ETH_HEADER_LEN + 1] == Kind::Small as u8)
        .expect("a small frame")
        .as_ref()
        .to_vec()
}

#[test]
fn a_frame_finds_its_sender_by_the_slot_it_names_and_a_wrong_hint_changes_nothing() {
    let (ma, mb, mc) = (
        MacAddr([2, 0, 0, 0, 0, 1]),
        MacAddr([2, 0, 0, 0, 0, 2]),
        MacAddr([2, 0, 0, 0, 0, 3]),
    );
    // A talks to B on one link and to C on another (A polls whichever it is handed).
    let (mut la, mut lb) = memlink::pair(ma, mb, 1514, 64);
    let (mut la_c, mut lc) = memlink::pair(ma, mc, 1514, 64);
    let (mut a, mut b, mut c) = (engine(ma), engine(mb), engine(mc));
    let mut now = 1_000;
    message(
        (&mut b, &mut lb),
        (&mut a, &mut la),
        7,
        0,
        b"from b!!",
        &mut now,
    );
    message(
        (&mut c, &mut lc),
        (&mut a, &mut la_c),
        8,
        0,
        b"from c!!",
        &mut now,
    );
    // Both name A's slot of them: distinct, and not 0 (no hint) once connected.
    let fb = small_frame(&mut b, &mut lb, &mut la, ma, now);
    let fc = small_frame(&mut c, &mut lc, &mut la_c, ma, now);
    let (hb, hc) = (wire::slot_hint(&fb), wire::slot_hint(&fc));
    assert!(hb.is_some() && hc.is_some() && hb != hc, "{hb:?} {hc:?}");
    // B's frame with C's slot, with none, and with one past any peer: each time B's message
    // to A, taken once, whole (the first copy; the others are duplicates of it).
    let at = wire::ETH_HEADER_LEN + 42;
    let r = a.copy_engine_mut().mem.insert(vec![0; 8]);
    let rid = a.irecv(0, MatchSpec::mpi(1, 5, 9), r).unwrap();
    let (mut inject, mut la2) = memlink::pair(mb, ma, 1514, 64);
    for hint in [hc.unwrap(), 0, 0x00ff_ffff] {
        let mut f = fb.clone();
        f[at..at + 4].copy_from_slice(&hint.to_le_bytes());
        wire::fill_small_checksum(&mut f);
        assert_eq!(wire::slot_hint(&f), (hint != 0).then_some(hint));
        let (stale, dups) = (a.stats.drop_stale, a.stats.rx_duplicates);
        inject.tx_burst(&mut vec![f]);
        now += 1_000;
        a.poll(&mut la2, now);
        assert_eq!(
            a.stats.drop_stale, stale,
            "hint {hint:#x}: the sender was found"
        );
        if hint == hc.unwrap() {
            let done = a.pop_completion().expect("taken as B's message");
            assert_eq!(done.req, rid);
            let Ok(Outcome::Received { info, .. }) = done.result else {
                panic!("{done:?}");
            };
            assert_eq!((info.source.mac, info.src_rank), (mb, 5));
            assert_eq!(a.copy_engine().mem.get(&r).unwrap()[..], b"hinted!!"[..]);
        } else {
            assert_eq!(
                a.stats.rx_duplicates,
                dups + 1,
                "hint {hint:#x}: B's, a duplicate"
            );
            assert!(a.pop_completion().is_none());
        }
    }
    // C's own frame, unharmed, is C's message.
    let r = a.copy_engine_mut().mem.insert(vec![0; 8]);
    let rid = a.irecv(0, MatchSpec::mpi(1, 5, 9), r).unwrap();
    let (mut inject_c, mut la3) = memlink::pair(mc, ma, 1514, 64);
    inject_c.tx_burst(&mut vec![fc]);
    now += 1_000;
    a.poll(&mut la3, now);
    let done = a.pop_completion().expect("C's message");
    let Ok(Outcome::Received { info, .. }) = done.result else {
        panic!("{done:?}");
    };
    assert_eq!((done.req, info.source.mac), (rid, mc));
    assert_eq!(a.copy_engine().mem.get(&r).unwrap()[..], b"hinted!!"[..]);
}
