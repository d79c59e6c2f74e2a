//! Sending in place: a link that can send a payload where it lies (`Link::alloc_tx_ref`) gets
//! a message's first transmission as a header plus a reference to the send buffer, read only
//! when the frame goes out; resends, short payloads, frames to this node and frames whose
//! checksum covers the payload are copied as before. Over a lossy, duplicating, reordering
//! segment every message still arrives intact.

mod common;
use common::pattern;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use tigon_engine::matching::match_bits;
use tigon_engine::sim::{Faults, SimNet, SimPort};
use tigon_engine::*;

/// Message memory in shared regions (what a rank's channel is to the agent), so that a frame
/// can hold on to the bytes it points at.
type Shared = Arc<Mutex<Vec<u8>>>;

#[derive(Default)]
struct SharedCopy {
    regions: Vec<Shared>,
    /// Bytes read to build frames (the copies sending in place saves).
    read_bytes: u64,
}

impl SharedCopy {
    fn insert(&mut self, data: Vec<u8>) -> BufRef {
        let len = data.len() as u64;
        self.regions.push(Arc::new(Mutex::new(data)));
        BufRef::new(self.regions.len() as u64, 0, len)
    }
    fn region(&self, b: &BufRef) -> Result<&Shared, CopyError> {
        (b.region as usize)
            .checked_sub(1)
            .and_then(|i| self.regions.get(i))
            .ok_or_else(|| CopyError("no such buffer".into()))
    }
    fn bytes(&self, b: &BufRef) -> Vec<u8> {
        self.region(b).unwrap().lock().unwrap().clone()
    }
}

impl CopyEngine<Vec<u8>> for SharedCopy {
    fn copy_from_frame(
        &mut self,
        frame: Vec<u8>,
        range: Range<usize>,
        dst: &BufRef,
        off: u64,
    ) -> Result<bool, CopyError> {
        self.write(dst, off, &frame[range])?;
        Ok(true)
    }
    fn write(&mut self, dst: &BufRef, off: u64, src: &[u8]) -> Result<(), CopyError> {
        let mut m = self.region(dst)?.lock().unwrap();
        m.get_mut(off as usize..off as usize + src.len())
            .ok_or_else(|| CopyError("overrun".into()))?
            .copy_from_slice(src);
        Ok(())
    }
    fn read(&mut self, src: &BufRef, off: u64, out: &mut [u8]) -> Result<(), CopyError> {
        {
            let m = self.region(src)?.lock().unwrap();
            out.copy_from_slice(
                m.get(off as usize..off as usize + out.len())
                    .ok_or_else(|| CopyError("overrun".into()))?,
            );
        }
        self.read_bytes += out.len() as u64;
        Ok(())
    }
    fn poll_completed(&mut self, _done: &mut Vec<Result<(), CopyError>>) {}
    fn tx_ref(&self, src: &BufRef, off: u64, len: usize) -> Option<TxRef<'_>> {
        let end = off.checked_add(len as u64)?;
        (end <= src.len).then_some(())?;
        Some(TxRef {
            mem: self.region(src).ok()?,
            offset: (src.addr + off) as usize,
            len,
        })
    }
}

/// A frame being built: its header, and the payload it points at (if sent in place).
struct PlacedFrame {
    head: Vec<u8>,
    tail: Option<(Shared, Range<usize>)>,
}

impl AsRef<[u8]> for PlacedFrame {
    fn as_ref(&self) -> &[u8] {
        &self.head
    }
}

impl AsMut<[u8]> for PlacedFrame {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.head
    }
}

/// A simulated port that sends in place like the agent's DPDK port: the payload is read when
/// the frame goes out. It checks frames (no corruption is simulated here), like memif.
struct PlacingPort {
    inner: SimPort,
    in_place_frames: u64,
}

impl Link for PlacingPort {
    type Frame = Vec<u8>;
    type TxBuf = PlacedFrame;

    fn rx_burst(&mut self, out: &mut Vec<Vec<u8>>, max: usize) {
        self.inner.rx_burst(out, max)
    }
    fn alloc_tx(&mut self, len: usize) -> Option<PlacedFrame> {
        Some(PlacedFrame {
            head: self.inner.alloc_tx(len)?,
            tail: None,
        })
    }
    fn alloc_tx_ref(&mut self, head: usize, payload: TxRef<'_>) -> Option<PlacedFrame> {
        let mem = payload.mem.downcast_ref::<Shared>()?;
        self.in_place_frames += 1;
        Some(PlacedFrame {
            head: vec![0; head],
            tail: Some((mem.clone(), payload.offset..payload.offset + payload.len)),
        })
    }
    fn tx_burst(&mut self, frames: &mut Vec<PlacedFrame>) {
        let mut out: Vec<Vec<u8>> = frames
            .drain(..)
            .map(|f| {
                let mut v = f.head;
                if let Some((mem, r)) = f.tail {
                    v.extend_from_slice(&mem.lock().unwrap()[r]);
                }
                v
            })
            .collect();
        self.inner.tx_burst(&mut out);
    }
    fn max_frame(&self) -> usize {
        self.inner.max_frame()
    }
    fn mac(&self) -> MacAddr {
        self.inner.mac()
    }
}

type Eng = Engine<PlacingPort, SharedCopy>;

fn node(net: &SimNet, i: usize, cfg: &Config) -> (Eng, PlacingPort) {
    let port = PlacingPort {
        inner: net.port(common::mac(i), 1514),
        in_place_frames: 0,
    };
    let mut e = Eng::new(cfg.clone(), common::mac(i), 1514, SharedCopy::default()).unwrap();
    e.seed(11 + i as u64);
    (e, port)
}

/// Sends `sizes` from node 0 to node 1 and, for each size, from one endpoint of node 0 to
/// another; returns both engines and node 0's port once every message has arrived intact.
fn exchange(faults: Faults, cfg: Config, sizes: &[usize]) -> (Eng, Eng, PlacingPort) {
    let net = SimNet::new(faults, 5);
    let (mut a, mut pa) = node(&net, 0, &cfg);
    let (mut b, mut pb) = node(&net, 1, &cfg);
    a.open_endpoint(Some(0)).unwrap();
    let a1 = a.open_endpoint(Some(1)).unwrap();
    let bb = b.open_endpoint(Some(0)).unwrap();
    let mut recvs = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let buf = b.copy_engine_mut().insert(vec![0; n]);
        let r = b.irecv(0, MatchSpec::mpi(1, 0, 2), buf).unwrap();
        recvs.push((false, r, buf, pattern(0, i as u32, n)));
        let buf = a.copy_engine_mut().insert(vec![0; n]);
        let r = a.irecv(1, MatchSpec::mpi(1, 0, 3), buf).unwrap();
        recvs.push((true, r, buf, pattern(1, i as u32, n)));
    }
    for (i, &n) in sizes.iter().enumerate() {
        let buf = a.copy_engine_mut().insert(pattern(0, i as u32, n));
        a.isend(0, bb, match_bits(1, 2), 0, buf, SendMode::Standard)
            .unwrap();
        let buf = a.copy_engine_mut().insert(pattern(1, i as u32, n));
        a.isend(0, a1, match_bits(1, 3), 0, buf, SendMode::Standard)
            .unwrap();
    }
    let mut done = 0;
    let mut sent = 0;
    let mut now = 1_000;
    while done < recvs.len() || sent < 2 * sizes.len() {
        now += 1_000;
        net.set_time(now);
        a.poll(&mut pa, now);
        b.poll(&mut pb, now);
        for (local, e) in [(true, &mut a), (false, &mut b)] {
            while let Some(c) = e.pop_completion() {
                assert!(c.result.is_ok(), "{:?}", c.result);
                if let Some(r) = recvs.iter().find(|r| r.0 == local && r.1 == c.req) {
                    assert!(
                        e.copy_engine().bytes(&r.2) == r.3,
                        "payload of a {}-byte message",
                        r.3.len()
                    );
                    done += 1;
                } else {
                    sent += 1;
                }
            }
        }
        assert!(now < 60_000_000_000, "stuck: {done} received, {sent} sent");
    }
    (a, b, pa)
}

const SIZES: [usize; 9] = [1, 63, 64, 200, 255, 256, 1000, 1400, 20_000];

/// Bytes of `sizes` a node sends to another node in place: every non-empty payload.
fn placeable(sizes: &[usize]) -> u64 {
    sizes.iter().filter(|&&n| n > 0).map(|&n| n as u64).sum()
}

fn frame_checked() -> Config {
    Config {
        payload_checksum: Some(false),
        ..Config::default()
    }
}

#[test]
fn first_transmissions_go_in_place_and_arrive_intact() {
    let (a, _, pa) = exchange(Faults::default(), frame_checked(), &SIZES);
    let total: u64 = SIZES.iter().map(|&n| n as u64).sum();
    assert!(pa.in_place_frames >= 7, "{} frames", pa.in_place_frames);
    // Lossless: every payload to the other node went in place; what was read is
    // everything sent to this node (loopback).
    assert_eq!(a.stats.tx_in_place_bytes, placeable(&SIZES));
    assert_eq!(a.stats.retransmits, 0);
    assert_eq!(
        a.copy_engine().read_bytes,
        2 * total - placeable(&SIZES),
        "bytes copied into frames"
    );
}

#[test]
fn resends_are_copied_and_everything_arrives_over_a_lossy_wire() {
    let faults = Faults {
        loss: 0.2,
        duplicate: 0.05,
        reorder: 0.1,
        reorder_ns: 20_000,
        delay_ns: 2_000,
        ..Faults::default()
    };
    let (a, _, _) = exchange(faults, frame_checked(), &SIZES);
    assert!(a.stats.retransmits > 0, "the wire lost nothing");
    assert_eq!(
        a.stats.tx_in_place_bytes,
        placeable(&SIZES),
        "first transmissions only"
    );
    let total: u64 = SIZES.iter().map(|&n| n as u64).sum();
    assert!(
        a.copy_engine().read_bytes > 2 * total - placeable(&SIZES),
        "resends read their payload"
    );
}

#[test]
fn a_payload_checksum_reads_every_payload() {
    let cfg = Config {
        payload_checksum: Some(true),
        ..Config::default()
    };
    let (a, _, pa) = exchange(Faults::default(), cfg, &SIZES);
    assert_eq!(pa.in_place_frames, 0);
    assert_eq!(a.stats.tx_in_place_bytes, 0);
    let total: u64 = SIZES.iter().map(|&n| n as u64).sum();
    assert_eq!(a.copy_engine().read_bytes, 2 * total);
}
