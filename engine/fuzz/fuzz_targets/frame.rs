//! Frame parsing is total: any bytes give a header or an error, never a panic, and whatever
//! parses re-emits to the same header. A small message's header and a fragment of pulled
//! data's, read directly (the receive paths' fast reads), agree with the checked parse.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tigon_engine::wire::{AckRepr, ConnectRepr, Frame, PullHeader, Repr, SmallHeader};

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
        let mut buf = vec![0u8; data.len().max(128)];
        r.emit(&mut buf);
        let again = Repr::parse(&Frame::new_unchecked(&buf[..])).expect("re-parse of an emitted header");
        assert_eq!(again, r);
        let _ = AckRepr::parse(f.payload());
        let _ = ConnectRepr::parse(f.payload());
    }
});
