use super::*;

fn sample() -> Repr {
    Repr {
        dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
        src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
        kind: Some(Kind::Eager),
        flags: FLAG_SYNC,
        dst_ep: 7,
        src_ep: 3,
        src_session: 0xdead_beef,
        dst_session: 0x1234_5678,
        seq: 42,
        ack: 41,
        msg_id: 9,
        src_rank: 70_000,
        frag_index: 1,
        frag_count: 3,
        length: 5,
        credit: 100,
        match_bits: 0x0000_0001_ffff_fffe,
        offset: 10,
        total: 20,
        tag: 0,
        slot: 0x0002_0003,
    }
}

/// A small message under the compact header.
fn small() -> Repr {
    Repr {
        kind: Some(Kind::Small),
        flags: 0,
        msg_id: 0,
        frag_index: 0,
        frag_count: 1,
        offset: 0,
        length: 8,
        total: 8,
        ..sample()
    }
}

#[test]
fn a_short_ack_is_a_minimum_frame_that_round_trips_and_is_checked() {
    let r = Repr {
        dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
        src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
        kind: Some(Kind::ShortAck),
        flags: FLAG_PAYLOAD_CK,
        tag: 0xdead_beef,
        seq: 40_000,
        ack: 77,
        credit: 0x1_0000,
        ..Repr::default()
    };
    let mut buf = vec![0u8; 128];
    let n = r.emit(&mut buf);
    assert_eq!(n, MIN_FRAME);
    Frame::new_unchecked(&mut buf[..n]).fill_checksum();
    let f = Frame::new_checked(&buf[..n]).unwrap();
    assert!(f.is_compact() && !f.is_small() && f.payload().is_empty());
    assert_eq!(Repr::parse(&f).unwrap(), r);
    assert!(!Kind::ShortAck.is_sequenced());
    for bit in 0..COMPACT_OVERHEAD * 8 {
        let mut b = buf[..n].to_vec();
        b[bit / 8] ^= 1 << (bit % 8);
        let got = Frame::new_checked(&b[..]).and_then(|f| Repr::parse(&f));
        assert!(got.is_err(), "bit {bit}: {got:?}");
    }
}

#[test]
fn a_short_ack_written_whole_is_the_frame_emit_and_fill_make() {
    for flags in [0, FLAG_PAYLOAD_CK as u8] {
        let (dst, src) = (MacAddr([2, 0, 0, 0, 0, 2]), MacAddr([2, 0, 0, 0, 0, 1]));
        let mut a = vec![0xa5u8; 128];
        let f = AckFields {
            tag: 0xdead_beef,
            hold_us: 5_000,
            ack: 77,
            credit: 0x1_0203,
            slot: 0x0001_0001,
        };
        let n = short_ack(&mut a, dst, src, flags, f);
        fill_small_checksum(&mut a[..n]);
        let mut b = vec![0x5au8; 128];
        assert!(write_short_ack(&mut b, dst, src, flags, f));
        assert_eq!(a[..MIN_FRAME], b[..MIN_FRAME]);
        let f = Frame::new_checked(&b[..MIN_FRAME]).unwrap();
        let r = Repr::parse(&f).unwrap();
        assert_eq!(
            (r.kind, r.tag, r.seq, r.ack, r.credit, r.slot),
            (
                Some(Kind::ShortAck),
                0xdead_beef,
                5_000,
                77,
                0x1_0203,
                0x0001_0001
            )
        );
    }
    assert!(!write_short_ack(
        &mut [0u8; MIN_FRAME - 1],
        MacAddr::BROADCAST,
        MacAddr::BROADCAST,
        0,
        AckFields::default()
    ));
}

#[test]
fn small_message_header_is_46_bytes_and_round_trips() {
    const { assert!(COMPACT_LEN <= 46) };
    let r = small();
    let mut buf = vec![0u8; 256];
    let n = r.emit(&mut buf);
    assert_eq!(n, MIN_FRAME.max(ETH_HEADER_LEN + 46 + 8));
    buf[COMPACT_OVERHEAD..COMPACT_OVERHEAD + 8].copy_from_slice(b"8 bytes!");
    Frame::new_unchecked(&mut buf[..n]).fill_checksum();
    let f = Frame::new_checked(&buf[..n]).unwrap();
    assert_eq!(f.payload(), b"8 bytes!");
    let p = Repr::parse(&f).unwrap();
    // The sessions travel as their tag.
    assert_eq!(p.tag, session_tag(r.src_session, r.dst_session));
    assert_eq!(
        p,
        Repr {
            src_session: 0,
            dst_session: 0,
            tag: p.tag,
            ..r
        }
    );
    assert_ne!(
        session_tag(r.src_session, r.dst_session),
        session_tag(r.src_session ^ 1, r.dst_session)
    );
    assert_ne!(
        session_tag(r.src_session, r.dst_session),
        session_tag(r.src_session, r.dst_session ^ 1)
    );
}

#[test]
fn every_header_bit_flip_of_a_small_frame_is_caught() {
    let r = small();
    let mut buf = vec![0u8; 128];
    let n = r.emit(&mut buf);
    Frame::new_unchecked(&mut buf[..n]).fill_checksum();
    for bit in 0..(COMPACT_OVERHEAD * 8) {
        let mut b = buf[..n].to_vec();
        b[bit / 8] ^= 1 << (bit % 8);
        assert!(
            Frame::new_checked(&b[..]).is_err(),
            "bit {bit} flip undetected"
        );
    }
}

#[test]
fn every_two_bit_flip_in_the_headers_of_a_small_frame_less_than_63_bits_apart_is_caught() {
    // The rotate-add chain (version 5): two flips in one word change that word (caught);
    // flips in words k apart meet in the chain only when 63 * k bits apart.
    let r = small();
    let mut buf = vec![0u8; 128];
    let n = r.emit(&mut buf);
    Frame::new_unchecked(&mut buf[..n]).fill_checksum();
    let bits = COMPACT_OVERHEAD * 8;
    for x in 0..bits {
        for y in x + 1..bits.min(x + 63) {
            let mut b = buf[..n].to_vec();
            b[x / 8] ^= 1 << (x % 8);
            b[y / 8] ^= 1 << (y % 8);
            assert!(
                Frame::new_checked(&b[..]).is_err(),
                "bits {x} and {y} flipped undetected"
            );
        }
    }
}

#[test]
fn the_compact_header_is_little_endian() {
    let mut buf = vec![0u8; 128];
    let n = small().emit(&mut buf);
    Frame::new_unchecked(&mut buf[..n]).fill_checksum();
    let h = SmallHeader::parse(&buf[..n]).expect("valid");
    assert_eq!(buf[field::small::SEQ], h.seq.to_le_bytes());
    assert_eq!(buf[field::small::SRC_RANK], h.src_rank.to_le_bytes());
    assert_eq!(buf[field::small::MATCH_BITS], h.match_bits.to_le_bytes());
    let ck = u32::from_le_bytes(buf[field::small::CHECKSUM].try_into().unwrap());
    assert_eq!(ck, small_checksum(&buf[..COMPACT_OVERHEAD]));
    // The header-only form (every length known at compile time) is the same function.
    let head: &[u8; COMPACT_OVERHEAD] = buf.first_chunk().unwrap();
    assert_eq!(ck, small_header_checksum(head));
}

/// Found by the `frame` fuzz target (its seed of a small message): a header parsed from a
/// compact frame carries the frame's session tag, its sessions 0; emitted again it must keep
/// that tag, not write the tag of sessions 0 and 0.
#[test]
fn a_parsed_small_frame_re_emits_to_the_same_frame() {
    let mut buf = vec![0u8; 128];
    let n = small().emit(&mut buf);
    buf[COMPACT_OVERHEAD..COMPACT_OVERHEAD + 8].copy_from_slice(b"8 bytes!");
    Frame::new_unchecked(&mut buf[..n]).fill_checksum();
    let parsed = Repr::parse(&Frame::new_checked(&buf[..n]).unwrap()).unwrap();
    assert_eq!((parsed.src_session, parsed.dst_session), (0, 0));
    let mut again = vec![0u8; 128];
    assert_eq!(parsed.emit(&mut again), n);
    again[COMPACT_OVERHEAD..COMPACT_OVERHEAD + 8].copy_from_slice(b"8 bytes!");
    Frame::new_unchecked(&mut again[..n]).fill_checksum();
    assert_eq!(again[..n], buf[..n]);
    assert_eq!(
        Repr::parse(&Frame::new_checked(&again[..n]).unwrap()),
        Ok(parsed)
    );
}

#[test]
fn a_small_frame_read_directly_agrees_with_the_checked_parse() {
    let mut buf = vec![0u8; 128];
    let n = small().emit(&mut buf);
    buf[COMPACT_OVERHEAD..COMPACT_OVERHEAD + 8].copy_from_slice(b"8 bytes!");
    buf[field::small::FLAGS] = FLAG_PAYLOAD_CK as u8;
    Frame::new_unchecked(&mut buf[..n]).fill_checksum();
    let full = Repr::parse(&Frame::new_checked(&buf[..n]).unwrap()).unwrap();
    assert_eq!(SmallHeader::parse(&buf[..n]).unwrap().repr(), full);
    // Every fault gives the error the checked parse gives: a flipped bit anywhere (the
    // payload is covered), a cut frame, a full-header frame.
    for bit in 0..n * 8 {
        let mut b = buf[..n].to_vec();
        b[bit / 8] ^= 1 << (bit % 8);
        let want = Frame::new_checked(&b[..]).and_then(|f| Repr::parse(&f));
        match SmallHeader::parse(&b) {
            Ok(h) => assert_eq!(Ok(h.repr()), want, "bit {bit}"),
            Err(e) if b[field::KIND] == Kind::Small as u8 => {
                assert_eq!(Err(e), want.map(|_| ()), "bit {bit}")
            }
            Err(e) => assert_eq!(e, Error::Type, "bit {bit}"),
        }
    }
    for cut in 0..n {
        assert_eq!(
            SmallHeader::parse(&buf[..cut]).map(|h| h.repr()),
            Frame::new_checked(&buf[..cut]).and_then(|f| Repr::parse(&f)),
            "cut at {cut}"
        );
    }
    let mut full_frame = vec![0u8; 128];
    sample().emit(&mut full_frame);
    assert_eq!(SmallHeader::parse(&full_frame), Err(Error::Type));
    // The sender's fill of a small frame's checksum is the general one, with the
    // payload covered or not, at every payload length.
    for len in [0, 1, 7, 8, 9, 74, 75, 200, 255] {
        for ck in [0, FLAG_PAYLOAD_CK] {
            let r = Repr {
                flags: ck,
                length: len,
                total: len as u64,
                ..small()
            };
            let mut a = vec![0x5au8; 400];
            let n = r.emit(&mut a);
            let mut b = a.clone();
            Frame::new_unchecked(&mut a[..n]).fill_checksum();
            fill_small_checksum(&mut b[..n]);
            assert_eq!(a, b, "length {len}, flags {ck}");
            assert!(SmallHeader::parse(&b[..n]).is_ok());
        }
    }
}

#[test]
fn another_version_is_refused_as_such() {
    let mut buf = vec![0u8; 128];
    let n = sample().emit(&mut buf);
    Frame::new_unchecked(&mut buf[..n]).fill_checksum();
    buf[ETH_HEADER_LEN] = 1;
    assert_eq!(Frame::new_checked(&buf[..n]).unwrap_err(), Error::Version);
}

#[test]
fn round_trip() {
    let r = sample();
    let mut buf = vec![0u8; 256];
    let n = r.emit(&mut buf);
    buf[OVERHEAD..OVERHEAD + 5].copy_from_slice(b"hello");
    let mut f = Frame::new_unchecked(&mut buf[..n]);
    f.fill_checksum();
    let f = Frame::new_checked(&buf[..n]).unwrap();
    assert_eq!(Repr::parse(&f).unwrap(), r);
    assert_eq!(f.payload(), b"hello");
}

#[test]
fn every_single_bit_flip_is_caught() {
    let mut r = sample();
    r.flags |= FLAG_PAYLOAD_CK;
    let mut buf = vec![0u8; 128];
    let n = r.emit(&mut buf);
    buf[OVERHEAD..OVERHEAD + 5].copy_from_slice(b"hello");
    Frame::new_unchecked(&mut buf[..n]).fill_checksum();
    for bit in 0..(n * 8) {
        let mut b = buf[..n].to_vec();
        b[bit / 8] ^= 1 << (bit % 8);
        // Flips in the padding past the payload are not part of the frame's contents.
        if bit / 8 >= OVERHEAD + 5 {
            continue;
        }
        assert!(
            Frame::new_checked(&b[..]).is_err(),
            "bit {bit} flip undetected"
        );
    }
}

#[test]
fn without_payload_checksum_the_headers_are_still_checked() {
    let r = sample();
    let mut buf = vec![0u8; 128];
    let n = r.emit(&mut buf);
    buf[OVERHEAD..OVERHEAD + 5].copy_from_slice(b"hello");
    Frame::new_unchecked(&mut buf[..n]).fill_checksum();
    for bit in 0..(n * 8) {
        let mut b = buf[..n].to_vec();
        b[bit / 8] ^= 1 << (bit % 8);
        let res = Frame::new_checked(&b[..]);
        if bit / 8 < OVERHEAD {
            assert!(res.is_err(), "header bit {bit} flip undetected");
        } else {
            // The payload is the link's to protect (FCS, memory).
            assert!(res.is_ok(), "payload bit {bit} flip refused");
        }
    }
    // The same frame with the flag: the checksum differs and the payload is covered.
    let mut b2 = buf[..n].to_vec();
    let mut f = Frame::new_unchecked(&mut b2[..]);
    f.set_flags(r.flags | FLAG_PAYLOAD_CK);
    f.fill_checksum();
    b2[OVERHEAD] ^= 1;
    assert_eq!(Frame::new_checked(&b2[..]).unwrap_err(), Error::Checksum);
}

#[test]
fn short_and_foreign_frames_refused() {
    assert_eq!(
        Frame::new_checked(&[0u8; 10][..]).unwrap_err(),
        Error::Truncated
    );
    let mut buf = vec![0u8; 128];
    let n = sample().emit(&mut buf);
    buf[12] = 0x08;
    assert_eq!(Frame::new_checked(&buf[..n]).unwrap_err(), Error::EtherType);
}

#[test]
fn fragment_fields_validated() {
    let mut r = sample();
    r.frag_index = 3;
    let mut buf = vec![0u8; 128];
    let n = r.emit(&mut buf);
    Frame::new_unchecked(&mut buf[..n]).fill_checksum();
    let f = Frame::new_checked(&buf[..n]).unwrap();
    assert_eq!(Repr::parse(&f).unwrap_err(), Error::Malformed);
}

#[test]
fn mac_text() {
    let m: MacAddr = "02:00:0a:ff:00:01".parse().unwrap();
    assert_eq!(m.to_string(), "02:00:0a:ff:00:01");
    assert!("02:00".parse::<MacAddr>().is_err());
    assert!("zz:00:0a:ff:00:01".parse::<MacAddr>().is_err());
}

#[test]
fn a_mac_word_is_equal_exactly_when_the_addresses_are() {
    let base = MacAddr([2, 0, 0x0a, 0xff, 0, 1]);
    assert_eq!(base.word(), 0x0100_ff0a_0002);
    assert_eq!(MacAddr::BROADCAST.word(), 0xffff_ffff_ffff);
    for i in 0..6 {
        for bit in 0..8 {
            let mut m = base;
            m.0[i] ^= 1 << bit;
            assert_ne!(m.word(), base.word(), "byte {i} bit {bit}");
            assert_eq!(m.word() == base.word(), m == base);
        }
    }
}

/// A fragment of pulled data (the pull header).
fn pulled() -> Repr {
    Repr {
        kind: Some(Kind::PullData),
        // Not carried by the pull header.
        slot: 0,
        flags: 0,
        dst_ep: 0,
        src_ep: 0,
        src_rank: 0,
        match_bits: 0,
        frag_index: 0,
        frag_count: 1,
        msg_id: 0x0102_0304,
        offset: 0x0000_0123_4567_89a0,
        length: 5,
        total: 0x0000_0123_4567_89a0 + 5,
        ..sample()
    }
}

/// A pull frame with `payload` behind its header, its checksum filled.
fn pull_frame(r: &Repr, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; PULL_OVERHEAD + payload.len().max(64)];
    let n = r.emit(&mut buf);
    buf[PULL_OVERHEAD..PULL_OVERHEAD + payload.len()].copy_from_slice(payload);
    buf.truncate(n);
    Frame::new_unchecked(&mut buf[..]).fill_checksum();
    buf
}

#[test]
fn pulled_data_header_is_42_bytes_little_endian_and_round_trips() {
    const { assert!(PULL_LEN == 42 && PULL_OVERHEAD == ETH_HEADER_LEN + 42) };
    let r = pulled();
    let buf = pull_frame(&r, b"hello");
    assert_eq!(buf.len(), MIN_FRAME.max(PULL_OVERHEAD + 5));
    let f = Frame::new_checked(&buf[..]).unwrap();
    assert!(f.is_pull() && !f.is_compact() && !f.is_small());
    assert_eq!(f.payload(), b"hello");
    assert_eq!(Repr::parse(&f).unwrap(), r);
    assert_eq!(r.payload_offset(), PULL_OVERHEAD);
    let h = PullHeader::parse(&buf).unwrap();
    assert_eq!(h.repr(), r);
    assert_eq!(buf[field::pull::SRC_SESSION], r.src_session.to_le_bytes());
    assert_eq!(buf[field::pull::DST_SESSION], r.dst_session.to_le_bytes());
    assert_eq!(buf[field::pull::SEQ], r.seq.to_le_bytes());
    assert_eq!(buf[field::pull::MSG_ID], r.msg_id.to_le_bytes());
    assert_eq!(buf[field::pull::LENGTH], 5u16.to_le_bytes());
    assert_eq!(buf[field::pull::OFFSET], r.offset.to_le_bytes());
    let ck = u32::from_le_bytes(buf[field::pull::CHECKSUM].try_into().unwrap());
    let head: &[u8; PULL_OVERHEAD] = buf.first_chunk().unwrap();
    assert_eq!(ck, pull_header_checksum(head));
    assert_eq!(
        ck,
        checksum(&buf[..PULL_OVERHEAD], field::pull::CHECKSUM.start)
    );
}

#[test]
fn every_header_bit_flip_and_close_pair_of_a_pull_frame_is_caught() {
    for ck in [0, FLAG_PAYLOAD_CK] {
        let r = Repr {
            flags: ck,
            ..pulled()
        };
        let buf = pull_frame(&r, b"hello");
        // The payload is covered only with the flag (the link protects it otherwise).
        let covered = if ck != 0 {
            PULL_OVERHEAD + 5
        } else {
            PULL_OVERHEAD
        };
        for bit in 0..buf.len() * 8 {
            let mut b = buf.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            let got = Frame::new_checked(&b[..]).and_then(|f| Repr::parse(&f));
            if bit / 8 < covered {
                assert!(got.is_err(), "flags {ck}: bit {bit} flip undetected");
            } else if bit / 8 < PULL_OVERHEAD + 5 {
                assert!(got.is_ok(), "flags {ck}: payload bit {bit} flip refused");
            }
        }
    }
    // Two flips less than 63 bits apart (as for the compact header: the same chain).
    let buf = pull_frame(&pulled(), b"");
    let bits = PULL_OVERHEAD * 8;
    for x in 0..bits {
        for y in x + 1..bits.min(x + 63) {
            let mut b = buf.clone();
            b[x / 8] ^= 1 << (x % 8);
            b[y / 8] ^= 1 << (y % 8);
            assert!(
                Frame::new_checked(&b[..]).is_err(),
                "bits {x} and {y} flipped undetected"
            );
        }
    }
}

#[test]
fn a_pull_frame_read_directly_agrees_with_the_checked_parse() {
    for ck in [0, FLAG_PAYLOAD_CK] {
        let r = Repr {
            flags: ck,
            ..pulled()
        };
        let buf = pull_frame(&r, b"hello");
        let n = buf.len();
        // Every fault gives the error the checked parse gives: a flipped bit anywhere, a
        // cut frame.
        for bit in 0..n * 8 {
            let mut b = buf.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            let want = Frame::new_checked(&b[..]).and_then(|f| Repr::parse(&f));
            match PullHeader::parse(&b) {
                Ok(h) => assert_eq!(Ok(h.repr()), want, "bit {bit}"),
                Err(e) if b[field::KIND] == Kind::PullData as u8 => {
                    assert_eq!(Err(e), want.map(|_| ()), "bit {bit}")
                }
                Err(e) => assert_eq!(e, Error::Type, "bit {bit}"),
            }
        }
        for cut in 0..n {
            assert_eq!(
                PullHeader::parse(&buf[..cut]).map(|h| h.repr()),
                Frame::new_checked(&buf[..cut]).and_then(|f| Repr::parse(&f)),
                "cut at {cut}"
            );
        }
    }
    let mut full_frame = vec![0u8; 128];
    sample().emit(&mut full_frame);
    assert_eq!(PullHeader::parse(&full_frame), Err(Error::Type));
    // The sender's fill of the checksum is the general one, payload covered or not.
    for len in [0u32, 1, 2, 7, 8, 69, 70, 71, 200, 1456] {
        for ck in [0, FLAG_PAYLOAD_CK] {
            let r = Repr {
                flags: ck,
                length: len,
                total: pulled().offset + len as u64,
                ..pulled()
            };
            let mut a = vec![0x5au8; PULL_OVERHEAD + 1500];
            let n = r.emit(&mut a);
            let mut b = a.clone();
            Frame::new_unchecked(&mut a[..n]).fill_checksum();
            fill_pull_checksum(&mut b[..n]);
            assert_eq!(a, b, "length {len}, flags {ck}");
            assert_eq!(PullHeader::parse(&b[..n]).map(|h| h.repr()), Ok(r));
        }
    }
}

#[test]
fn a_pull_frame_without_a_session_or_past_the_end_of_memory_is_malformed() {
    for r in [
        Repr {
            src_session: 0,
            ..pulled()
        },
        Repr {
            offset: u64::MAX - 2,
            total: 0,
            ..pulled()
        },
    ] {
        let buf = pull_frame(&r, b"hello");
        let f = Frame::new_checked(&buf[..]).unwrap();
        assert_eq!(Repr::parse(&f), Err(Error::Malformed));
        assert_eq!(PullHeader::parse(&buf), Err(Error::Malformed));
    }
}
