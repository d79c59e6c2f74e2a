//! No node has the all-zero address: the engine marks a retired session's free slot with it.
//! A frame claiming it as its source is dropped as malformed (a Connect from it once set up a
//! session in the retired slot, which the next new peer was then given on top), and a send
//! to it is refused with a clear error.

use tigon_engine::link::Link;
use tigon_engine::memlink::{self, MemLink};
use tigon_engine::wire::{self, ConnectRepr, Frame, Kind, MacAddr, Repr};
use tigon_engine::*;

type Eng = Engine<MemLink, CpuCopy<HeapMemory>>;

const A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const ZERO: MacAddr = MacAddr([0; 6]);

/// A Connect from `src` to `dst` (session `session`), as a far node would send it.
fn connect(src: MacAddr, dst: MacAddr, session: u32) -> Vec<u8> {
    let h = Repr {
        dst_mac: dst,
        src_mac: src,
        kind: Some(Kind::Connect),
        src_session: session,
        dst_session: 0,
        seq: 0,
        length: wire::CONNECT_PAYLOAD_LEN as u32,
        ..Repr::default()
    };
    let mut p = [0u8; wire::CONNECT_PAYLOAD_LEN];
    ConnectRepr {
        max_frame: 1514,
        window: 64,
        eager_credit: 0,
        max_ack_delay_us: 0,
        slot: 0,
    }
    .emit(&mut p);
    let at = h.payload_offset();
    let mut buf = vec![0; (at + p.len()).max(wire::MIN_FRAME)];
    h.emit(&mut buf);
    buf[at..at + p.len()].copy_from_slice(&p);
    Frame::new_unchecked(&mut buf[..]).fill_checksum();
    buf
}

/// Engine A on one end of an in-memory link (sessions idle for 5 ms retired), the far end
/// and A's clock.
struct Bench {
    e: Eng,
    la: MemLink,
    far: MemLink,
    now: u64,
}

impl Bench {
    fn new() -> Bench {
        let (la, far) = memlink::pair(A, MacAddr([2, 0, 0, 0, 0, 2]), 1514, 64);
        let cfg = Config {
            peer_timeout_ns: 2_000_000,
            session_idle_ns: 5_000_000,
            ..Config::default()
        };
        let mut e = Eng::new(cfg, A, 1514, CpuCopy::new(HeapMemory::default())).unwrap();
        e.open_endpoint(Some(0)).unwrap();
        Bench {
            e,
            la,
            far,
            now: 1_000,
        }
    }

    /// A runs for `ns` of its time; returns the frames it sent meanwhile.
    fn run(&mut self, ns: u64) -> Vec<Vec<u8>> {
        let end = self.now + ns;
        let mut out = Vec::new();
        while self.now < end {
            self.now += 50_000;
            self.e.poll(&mut self.la, self.now);
            let mut rx = Vec::new();
            self.far.rx_burst(&mut rx, 64);
            out.extend(rx.iter().map(|f| f.as_ref().to_vec()));
        }
        out
    }

    /// A Connect from `src` arrives at A, which then runs for 0.5 ms; returns what A sent.
    fn connect_from(&mut self, src: MacAddr, session: u32) -> Vec<Vec<u8>> {
        self.far.tx_burst(&mut vec![connect(src, A, session)]);
        self.run(500_000)
    }
}

#[test]
fn a_connect_from_the_zero_address_is_dropped_after_a_retirement() {
    let mut a = Bench::new();
    // Node B connects, then goes quiet: A retires its session, and B's slot is free.
    let b = MacAddr([2, 0, 0, 0, 0, 0xb]);
    let out = a.connect_from(b, 0xb0b);
    assert!(out.iter().any(|f| f[..6] == b.0), "A answers B: {out:?}");
    a.run(20_000_000);
    assert_eq!(a.e.stats.sessions_retired, 1, "{:?}", a.e.stats);
    assert_eq!(a.e.stats.peers, 0);
    let malformed = a.e.stats.drop_malformed;

    // A Connect from the zero address: dropped, nothing answered, no session.
    let out = a.connect_from(ZERO, 0x2e0);
    assert_eq!(a.e.stats.drop_malformed, malformed + 1, "{:?}", a.e.stats);
    assert!(out.is_empty(), "A answered the zero address: {out:?}");
    assert_eq!(a.e.stats.peers, 0);

    // Node C takes the free slot, and is answered.
    let c = MacAddr([2, 0, 0, 0, 0, 0xc]);
    let out = a.connect_from(c, 0xc0c);
    assert!(out.iter().any(|f| f[..6] == c.0), "{out:?}");
    assert_eq!(a.e.stats.peers, 1);
}

#[test]
fn a_send_to_the_zero_address_is_refused() {
    let Bench { mut e, .. } = Bench::new();
    let buf = e.copy_engine_mut().mem.insert(vec![1; 8]);
    let to = EndpointAddr::new(ZERO, 0);
    let err = e
        .isend(0, to, 7, 0, buf, SendMode::Standard)
        .expect_err("a send to 00:00:00:00:00:00");
    assert!(
        matches!(err, Error::Invalid(_)) && err.to_string().contains("00:00:00:00:00:00"),
        "{err}"
    );
    let err = e
        .isend_to(0, Dest::from(to), 7, 0, buf, SendMode::Standard)
        .expect_err("a send to 00:00:00:00:00:00");
    assert!(matches!(err, Error::Invalid(_)), "{err}");
    assert_eq!(e.stats.peers, 0);
    assert_eq!(e.stats.sends_posted, 0);
}
