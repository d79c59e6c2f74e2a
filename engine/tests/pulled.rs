//! Pulled rendezvous data travels under its own header (wire version 6, `wire::PullHeader`,
//! 42 bytes): every fragment as large as the frame allows, its payload right behind the
//! header; and a receiver that does not know the connection answers a fragment with a Reset
//! that names the sender's connection (the header carries both sessions).

mod common;
use common::*;
use tigon_engine::link::Link;
use tigon_engine::matching::match_bits;
use tigon_engine::sim::{Faults, SimNet, SimPort};
use tigon_engine::wire::{self, Frame, Kind, PullHeader, Repr};
use tigon_engine::*;

/// A link that keeps a copy of every frame it receives.
struct Tap {
    port: SimPort,
    seen: Vec<Vec<u8>>,
}

impl Link for Tap {
    type Frame = Vec<u8>;
    type TxBuf = Vec<u8>;
    fn rx_burst(&mut self, out: &mut Vec<Vec<u8>>, max: usize) {
        let n = out.len();
        self.port.rx_burst(out, max);
        self.seen.extend(out[n..].iter().cloned());
    }
    fn alloc_tx(&mut self, len: usize) -> Option<Vec<u8>> {
        self.port.alloc_tx(len)
    }
    fn tx_burst(&mut self, frames: &mut Vec<Vec<u8>>) {
        self.port.tx_burst(frames)
    }
    fn max_frame(&self) -> usize {
        self.port.max_frame()
    }
    fn mac(&self) -> MacAddr {
        self.port.mac()
    }
    fn frame_check(&self) -> bool {
        self.port.frame_check()
    }
}

fn engine<L: Link>(cfg: &Config, mac: MacAddr) -> Engine<L, CpuCopy<HeapMemory>> {
    Engine::new(
        cfg.clone(),
        mac,
        cfg.max_frame,
        CpuCopy::new(HeapMemory::default()),
    )
    .unwrap()
}

#[test]
fn pulled_data_fills_every_frame_under_the_pull_header() {
    for payload_checksum in [false, true] {
        let net = SimNet::new(Faults::default(), 3);
        let cfg = Config {
            payload_checksum: Some(payload_checksum),
            ..Config::default()
        };
        let mut pa = net.port(mac(0), cfg.max_frame);
        let mut tb = Tap {
            port: net.port(mac(1), cfg.max_frame),
            seen: Vec::new(),
        };
        let mut a = engine::<SimPort>(&cfg, mac(0));
        let mut b = engine::<Tap>(&cfg, mac(1));
        a.open_endpoint(Some(0)).unwrap();
        let dst = b.open_endpoint(Some(0)).unwrap();
        // Three blocks, the last a short one; no block a whole number of frames.
        let len = 2 * cfg.pull_block + 37_856;
        let data = pattern(0, 0, len);
        let sb = a.copy_engine_mut().mem.insert(data.clone());
        let rb = b.copy_engine_mut().mem.insert(vec![0; len]);
        let s = a
            .isend(0, dst, match_bits(1, 0), 0, sb, SendMode::Standard)
            .unwrap();
        let r = b.irecv(0, MatchSpec::mpi(1, 0, 0), rb).unwrap();
        let (mut sent, mut got) = (false, false);
        let mut now = 1_000;
        for _ in 0..100_000 {
            if sent && got {
                break;
            }
            now += 1_000;
            net.set_time(now);
            a.poll(&mut pa, now);
            b.poll(&mut tb, now);
            while let Some(c) = a.pop_completion() {
                assert_eq!((c.req, c.result), (s, Ok(Outcome::Sent)));
                sent = true;
            }
            while let Some(c) = b.pop_completion() {
                assert_eq!(c.req, r);
                assert!(c.result.is_ok(), "{:?}", c.result);
                got = true;
            }
        }
        assert!(sent && got, "the message went through");
        assert!(b.copy_engine_mut().mem.get(&rb).unwrap()[..] == data[..]);
        let frag = cfg.max_frame - wire::PULL_OVERHEAD;
        assert_eq!(frag, 1458, "at MTU 1500");
        let mut pulled: Vec<(PullHeader, &[u8])> = tb
            .seen
            .iter()
            .filter(|f| Frame::new_unchecked(&f[..]).is_pull())
            .map(|f| (PullHeader::parse(f).unwrap(), &f[..]))
            .collect();
        pulled.sort_by_key(|(h, _)| h.offset);
        // The fragments tile the message, each block's cut into the fewest frames, each
        // frame no longer than the link's and its payload right behind the header.
        let blocks = len.div_ceil(cfg.pull_block);
        let frames: usize = (0..blocks)
            .map(|i| {
                (len - i * cfg.pull_block)
                    .min(cfg.pull_block)
                    .div_ceil(frag)
            })
            .sum();
        assert_eq!(pulled.len(), frames, "no fragment resent or lost");
        let mut at = 0;
        for (h, f) in &pulled {
            let (off, n) = (h.offset as usize, h.length as usize);
            assert_eq!(off, at, "contiguous");
            assert!(n == frag || (off + n) % cfg.pull_block == 0 || off + n == len);
            assert_eq!(f.len(), (wire::PULL_OVERHEAD + n).max(wire::MIN_FRAME));
            assert!(f.len() <= cfg.max_frame);
            assert_eq!(
                f[wire::PULL_OVERHEAD..wire::PULL_OVERHEAD + n],
                data[off..off + n]
            );
            assert_eq!(
                h.flags as u16 & wire::FLAG_PAYLOAD_CK != 0,
                payload_checksum
            );
            at += n;
        }
        assert_eq!(at, len);
        assert_eq!(a.stats.retransmits + b.stats.retransmits, 0);
    }
}

#[test]
fn a_fragment_for_a_connection_the_receiver_does_not_know_is_answered_with_a_reset() {
    let net = SimNet::new(Faults::default(), 4);
    let cfg = Config::default();
    let mut stranger = net.port(mac(0), cfg.max_frame);
    let mut pb = net.port(mac(1), cfg.max_frame);
    let mut b = engine::<SimPort>(&cfg, mac(1));
    b.open_endpoint(Some(0)).unwrap();
    let h = PullHeader {
        dst_mac: mac(1),
        src_mac: mac(0),
        flags: 0,
        src_session: 0xabc,
        dst_session: 0xdef,
        seq: 7,
        ack: 0,
        credit: 0,
        msg_id: 1,
        length: 100,
        offset: 0,
    };
    let mut f = vec![0u8; wire::PULL_OVERHEAD + 100];
    h.emit(&mut f);
    wire::fill_pull_checksum(&mut f);
    stranger.tx_burst(&mut vec![f]);
    net.set_time(2_000);
    b.poll(&mut pb, 2_000);
    b.poll(&mut pb, 3_000);
    assert_eq!(b.stats.drop_stale, 1);
    let mut out = Vec::new();
    net.set_time(4_000);
    stranger.rx_burst(&mut out, 16);
    let resets: Vec<Repr> = out
        .iter()
        .filter_map(|f| Repr::parse(&Frame::new_checked(&f[..]).ok()?).ok())
        .filter(|r| r.kind == Some(Kind::Reset))
        .collect();
    assert_eq!(resets.len(), 1, "{out:?}");
    assert_eq!((resets[0].dst_mac, resets[0].dst_session), (mac(0), 0xabc));
}
