//! Frame parsing is total: any bytes give a header or an error, never a panic, and whatever
//! parses re-emits to the same header and checks again once its checksum is filled. A small
//! message's header and a fragment of pulled data's, read directly (the receive paths' fast
//! reads), agree with the checked parse; so do the two ways of writing a short ack. The ack
//! (selective-ack bitmap) and connect payloads parse from any bytes and round-trip.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tigon_engine::MacAddr;
use tigon_engine::wire::{
    AckFields, AckRepr, CONNECT_PAYLOAD_LEN, ConnectRepr, Frame, Kind, MIN_FRAME, PullHeader, Repr,
    SmallHeader, fill_small_checksum, short_ack, write_short_ack,
};

fuzz_target!(|data: &[u8]| {
    let checked = Frame::new_checked(data).and_then(|f| Repr::parse(&f));
    if Frame::new_unchecked(data).is_small() {
        assert_eq!(SmallHeader::parse(data).map(|h| h.repr()), checked);
    } else {
        assert!(SmallHeader::parse(data).is_err());
    }
    if Frame::new_unchecked(data).is_pull() {
        assert_eq!(PullHeader::parse(data).map(|h| h.repr()), checked);
    } else {
        assert!(PullHeader::parse(data).is_err());
    }
    if let Ok(f) = Frame::new_checked(data)
        && let Ok(r) = Repr::parse(&f)
    {
        // The payload as it was, behind the re-emitted header; checksummed, the frame checks.
        let payload = f.payload();
        let mut buf = vec![0u8; (r.payload_offset() + payload.len()).max(128)];
        let n = r.emit(&mut buf);
        let again =
            Repr::parse(&Frame::new_unchecked(&buf[..])).expect("re-parse of an emitted header");
        assert_eq!(again, r);
        if r.kind != Some(Kind::ShortAck) {
            let at = r.payload_offset();
            buf[at..at + payload.len()].copy_from_slice(payload);
            buf.truncate(n.max(at + payload.len()));
            Frame::new_unchecked(&mut buf[..]).fill_checksum();
            let f2 = Frame::new_checked(&buf[..]).expect("an emitted, checksummed frame checks");
            assert_eq!(Repr::parse(&f2), Ok(r));
        }
        let _ = AckRepr::parse(f.payload());
        let _ = ConnectRepr::parse(f.payload());
    }
    if let Ok(a) = AckRepr::parse(data) {
        let mut b = [0u8; 32];
        a.emit(&mut b);
        assert_eq!(AckRepr::parse(&b), Ok(a));
        assert_eq!(
            (0..300).filter(|&i| a.has(i)).count() as u32,
            a.sack.iter().map(|w| w.count_ones()).sum()
        );
    }
    if let Ok(c) = ConnectRepr::parse(data) {
        let mut b = [0u8; CONNECT_PAYLOAD_LEN];
        c.emit(&mut b);
        assert_eq!(ConnectRepr::parse(&b), Ok(c));
    }
    // A short ack of fields from the input: the in-line writer and the general one agree,
    // and the result parses back to those fields.
    if let Some(h) = data.first_chunk::<33>() {
        let mac = |at: usize| MacAddr(h[at..at + 6].try_into().expect("6"));
        let word = |at: usize| u32::from_le_bytes(h[at..at + 4].try_into().expect("4"));
        let (dst, src, flags) = (mac(0), mac(6), h[12]);
        let f = AckFields {
            tag: word(13),
            hold_us: word(17),
            ack: word(21),
            credit: word(25),
            slot: word(29),
        };
        let mut a = [0u8; MIN_FRAME];
        let mut b = [0u8; MIN_FRAME];
        assert!(write_short_ack(&mut a, dst, src, flags, f));
        assert_eq!(short_ack(&mut b, dst, src, flags, f), MIN_FRAME);
        fill_small_checksum(&mut b);
        assert_eq!(a, b);
        let r =
            Repr::parse(&Frame::new_checked(&a[..]).expect("a short ack checks")).expect("parses");
        assert_eq!(
            (r.kind, r.tag, r.seq, r.ack, r.credit, r.slot),
            (
                Some(Kind::ShortAck),
                f.tag,
                f.hold_us,
                f.ack,
                f.credit,
                f.slot
            )
        );
    }
});
