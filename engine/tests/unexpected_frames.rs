//! The unexpected store keeps a message as the frames it came in: nothing is copied when it
//! arrives, and at the match its payload is copied once into the receive's buffer, or its
//! one frame lent to a receiver that takes leases (no copy by the engine at all). Messages
//! past `Config::unexpected_frames` (each held frame keeps a buffer of the receive pool) are
//! copied into the store's memory as before. The copies are counted where `tigon stats`
//! reads them.

mod common;
use common::pattern;
use std::ops::Range;
use tigon_engine::matching::match_bits;
use tigon_engine::sim::{Faults, SimNet, SimPort};
use tigon_engine::*;

/// The CPU copier (which counts the bytes it copies), lending frames to every receive whose
/// whole message fits when `leases` is on, as the agent lends to ranks that map its receive
/// pool.
struct Lending {
    cpu: CpuCopy<HeapMemory>,
    leases: bool,
    /// Frames lent: the receive buffer, the frame and where its payload lies.
    lent: Vec<(BufRef, Vec<u8>, Range<usize>)>,
}

impl CopyEngine<Vec<u8>> for Lending {
    fn copy_from_frame(
        &mut self,
        frame: Vec<u8>,
        range: Range<usize>,
        dst: &BufRef,
        off: u64,
    ) -> Result<bool, CopyError> {
        self.cpu.copy_from_frame(frame, range, dst, off)
    }
    fn lend(&mut self, frame: Vec<u8>, range: Range<usize>, dst: &BufRef) -> Result<(), Vec<u8>> {
        if !self.leases {
            return Err(frame);
        }
        self.lent.push((*dst, frame, range));
        Ok(())
    }
    fn write(&mut self, dst: &BufRef, off: u64, src: &[u8]) -> Result<(), CopyError> {
        <CpuCopy<HeapMemory> as CopyEngine<Vec<u8>>>::write(&mut self.cpu, dst, off, src)
    }
    fn read(&mut self, src: &BufRef, off: u64, out: &mut [u8]) -> Result<(), CopyError> {
        <CpuCopy<HeapMemory> as CopyEngine<Vec<u8>>>::read(&mut self.cpu, src, off, out)
    }
    fn poll_completed(&mut self, _done: &mut Vec<Result<(), CopyError>>) {}
    fn copied_bytes(&self) -> (u64, u64) {
        <CpuCopy<HeapMemory> as CopyEngine<Vec<u8>>>::copied_bytes(&self.cpu)
    }
}

type Eng = Engine<SimPort, Lending>;

struct Pair {
    net: SimNet,
    a: Eng,
    pa: SimPort,
    b: Eng,
    pb: SimPort,
    now: u64,
    dst: EndpointAddr,
}

impl Pair {
    fn new(cfg: Config, leases: bool) -> Pair {
        let net = SimNet::new(Faults::default(), 3);
        let eng = |i: usize| {
            let copy = Lending {
                cpu: CpuCopy::new(HeapMemory::default()),
                leases,
                lent: Vec::new(),
            };
            let mut e = Eng::new(cfg.clone(), common::mac(i), 1514, copy).unwrap();
            e.seed(21 + i as u64);
            (e, net.port(common::mac(i), 1514))
        };
        let (mut a, pa) = eng(0);
        let (mut b, pb) = eng(1);
        a.open_endpoint(Some(0)).unwrap();
        let dst = b.open_endpoint(Some(0)).unwrap();
        Pair {
            net,
            a,
            pa,
            b,
            pb,
            now: 1_000,
            dst,
        }
    }

    fn step(&mut self) {
        self.now += 1_000;
        self.net.set_time(self.now);
        self.a.poll(&mut self.pa, self.now);
        self.b.poll(&mut self.pb, self.now);
        assert!(self.now < 10_000_000_000, "stuck");
    }

    /// Sends message `i` of `n` bytes from a to b, unexpected there.
    fn send(&mut self, i: usize, n: usize, mode: SendMode) -> ReqId {
        let buf = self
            .a
            .copy_engine_mut()
            .cpu
            .mem
            .insert(pattern(0, i as u32, n));
        self.a
            .isend(0, self.dst, match_bits(1, 2), 0, buf, mode)
            .unwrap()
    }

    /// Steps until b holds `bytes` of unexpected messages.
    fn until_stored(&mut self, bytes: u64) {
        while self.b.unexpected_bytes() < bytes {
            self.step();
        }
        assert_eq!(self.b.unexpected_bytes(), bytes);
    }

    /// Posts a receive of `cap` bytes at b; steps until it completes; its outcome and buffer.
    fn receive(&mut self, cap: usize) -> (Outcome, BufRef) {
        let buf = self.b.copy_engine_mut().cpu.mem.insert(vec![0; cap]);
        let r = self.b.irecv(0, MatchSpec::mpi(1, 0, 2), buf).unwrap();
        loop {
            if let Some(c) = self.b.pop_completion() {
                assert_eq!(c.req, r);
                return (c.result.expect("received"), buf);
            }
            self.step();
        }
    }

    /// The bytes receive buffer `buf` holds, or the payload of the frame lent for it.
    fn payload(&self, buf: &BufRef, n: usize) -> Vec<u8> {
        let c = self.b.copy_engine();
        match c.lent.iter().find(|l| l.0 == *buf) {
            Some((_, f, r)) => f[r.clone()].to_vec(),
            None => c.cpu.mem.get(buf).unwrap()[..n].to_vec(),
        }
    }
}

fn frame_checked() -> Config {
    Config {
        payload_checksum: Some(false),
        ..Config::default()
    }
}

fn received(o: &Outcome) -> (u64, bool) {
    match o {
        Outcome::Received {
            received,
            truncated,
            ..
        } => (*received, *truncated),
        o => panic!("not a receive: {o:?}"),
    }
}

#[test]
fn a_message_waits_as_its_frames_and_is_copied_once_at_the_match() {
    let mut p = Pair::new(frame_checked(), false);
    // A small (compact) message, an eager one of one 1,514-byte frame, one of three frames,
    // and a synchronous small one.
    let sizes = [100usize, 1000, 3000, 64];
    let mut sync = None;
    for (i, &n) in sizes.iter().enumerate() {
        if i == 3 {
            sync = Some(p.send(i, n, SendMode::Synchronous));
        } else {
            p.send(i, n, SendMode::Standard);
        }
    }
    p.until_stored(4164);
    assert_eq!(
        p.b.unexpected_frames(),
        6,
        "every frame of the four messages"
    );
    assert_eq!(
        p.b.stats.unexpected_copied_bytes, 0,
        "nothing copied into the store"
    );
    assert_eq!(
        p.b.copy_engine().copied_bytes(),
        (0, 0),
        "nor anywhere else"
    );
    for (i, &n) in sizes.iter().enumerate() {
        let (o, buf) = p.receive(n);
        assert_eq!(received(&o), (n as u64, false));
        assert!(p.payload(&buf, n) == pattern(0, i as u32, n), "message {i}");
    }
    assert_eq!(
        p.b.copy_engine().copied_bytes(),
        (0, 4164),
        "every message copied once at its match"
    );
    assert_eq!(p.b.stats.unexpected_copied_bytes, 0);
    assert_eq!(p.b.unexpected_frames(), 0);
    assert_eq!(p.b.unexpected_bytes(), 0);
    // The synchronous sender learns of the match.
    let sync = sync.unwrap();
    let mut sent = false;
    while !sent {
        p.step();
        while let Some(c) = p.a.pop_completion() {
            assert!(c.result.is_ok());
            sent |= c.req == sync;
        }
    }
}

#[test]
fn a_receiver_that_takes_leases_gets_the_stored_frame_lent() {
    let mut p = Pair::new(frame_checked(), true);
    let sizes = [200usize, 1200, 2500, 300];
    for (i, &n) in sizes.iter().enumerate() {
        p.send(i, n, SendMode::Standard);
    }
    p.until_stored(4200);
    // Whole into buffers that fit, the one-frame messages are lent; the one of two frames is
    // copied out of them into a buffer that takes only 2,000 of its bytes; the last is
    // truncated too, so copied.
    for (i, &n) in sizes.iter().enumerate() {
        let cap = [200, 1200, 2000, 100][i];
        let (o, buf) = p.receive(cap);
        assert_eq!(received(&o), (cap as u64, i >= 2));
        assert!(
            p.payload(&buf, cap) == pattern(0, i as u32, n)[..cap],
            "message {i}"
        );
    }
    let lent: Vec<usize> = p.b.copy_engine().lent.iter().map(|l| l.2.len()).collect();
    assert_eq!(lent, [200, 1200]);
    assert_eq!(p.b.copy_engine().copied_bytes(), (0, 2000 + 100));
    assert_eq!(p.b.stats.unexpected_copied_bytes, 0);
}

#[test]
fn past_the_frame_bound_messages_are_copied_into_the_store() {
    let cfg = Config {
        unexpected_frames: 2,
        ..frame_checked()
    };
    let mut p = Pair::new(cfg, false);
    for i in 0..5 {
        p.send(i, 100, SendMode::Standard);
    }
    p.until_stored(500);
    assert_eq!(
        p.b.unexpected_frames(),
        2,
        "no more frames held than the bound"
    );
    assert_eq!(p.b.stats.unexpected_copied_bytes, 300);
    // Matched in order, whichever way each was kept: the first frees a frame, which the next
    // arrival may take.
    let (o, buf) = p.receive(100);
    assert_eq!(received(&o), (100, false));
    assert!(p.payload(&buf, 100) == pattern(0, 0, 100));
    assert_eq!(p.b.unexpected_frames(), 1);
    p.send(5, 100, SendMode::Standard);
    p.until_stored(500);
    assert_eq!(p.b.unexpected_frames(), 2);
    for i in 1..4 {
        let (o, buf) = p.receive(100);
        assert_eq!(received(&o), (100, false));
        assert!(p.payload(&buf, 100) == pattern(0, i, 100), "message {i}");
    }
    // A message of two frames when only one is free is copied into the store whole.
    assert_eq!(p.b.unexpected_frames(), 1);
    p.send(6, 2000, SendMode::Standard);
    p.until_stored(2200);
    assert_eq!(p.b.unexpected_frames(), 1);
    assert_eq!(p.b.stats.unexpected_copied_bytes, 2300);
    // Those left go when their endpoint closes, frames and all.
    p.b.close_endpoint(0);
    assert_eq!(p.b.unexpected_frames(), 0);
    assert_eq!(p.b.unexpected_bytes(), 0);
}
