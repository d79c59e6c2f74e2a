//! An asynchronous copy engine (completions arrive polls later, in order, like a dmadev's):
//! receives complete only once their copies are done, in the order they were delivered.

mod common;
use common::pattern;
use std::collections::VecDeque;
use std::ops::Range;
use tigon_engine::matching::match_bits;
use tigon_engine::sim::{Faults, SimNet, SimPort};
use tigon_engine::*;

/// Copies larger than `threshold` complete `lag` polls later; smaller ones at once.
struct LaggyCopy {
    mem: HeapMemory,
    threshold: usize,
    lag: u32,
    queue: VecDeque<(u32, Vec<u8>, BufRef, u64)>,
    device_bytes: u64,
    cpu_bytes: u64,
}

impl CopyEngine<Vec<u8>> for LaggyCopy {
    fn copy_from_frame(
        &mut self,
        frame: Vec<u8>,
        range: Range<usize>,
        dst: &BufRef,
        off: u64,
    ) -> Result<bool, CopyError> {
        if range.len() < self.threshold {
            self.write(dst, off, &frame[range])?;
            return Ok(true);
        }
        self.queue
            .push_back((self.lag, frame[range].to_vec(), *dst, off));
        Ok(false)
    }
    fn write(&mut self, dst: &BufRef, off: u64, src: &[u8]) -> Result<(), CopyError> {
        let m = self
            .mem
            .slice_mut(dst)
            .ok_or_else(|| CopyError("no such buffer".into()))?;
        m.get_mut(off as usize..off as usize + src.len())
            .ok_or_else(|| CopyError("overrun".into()))?
            .copy_from_slice(src);
        self.cpu_bytes += src.len() as u64;
        Ok(())
    }
    fn read(&mut self, src: &BufRef, off: u64, out: &mut [u8]) -> Result<(), CopyError> {
        let m = self
            .mem
            .slice(src)
            .ok_or_else(|| CopyError("no such buffer".into()))?;
        out.copy_from_slice(&m[off as usize..off as usize + out.len()]);
        Ok(())
    }
    fn poll_completed(&mut self, done: &mut Vec<Result<(), CopyError>>) {
        for e in self.queue.iter_mut() {
            e.0 = e.0.saturating_sub(1);
        }
        while self.queue.front().is_some_and(|e| e.0 == 0) {
            let (_, data, dst, off) = self.queue.pop_front().unwrap();
            let m = self.mem.slice_mut(&dst).unwrap();
            m[off as usize..off as usize + data.len()].copy_from_slice(&data);
            self.device_bytes += data.len() as u64;
            done.push(Ok(()));
        }
    }

    fn copied_bytes(&self) -> (u64, u64) {
        (self.device_bytes, self.cpu_bytes)
    }
}

#[test]
fn async_copies_complete_receives_in_delivery_order_with_the_right_bytes() {
    let net = SimNet::new(Faults::default(), 1);
    let mut pa = net.port(common::mac(0), 1514);
    let mut pb = net.port(common::mac(1), 1514);
    let mut a: Engine<SimPort, CpuCopy<HeapMemory>> = Engine::new(
        Config::default(),
        common::mac(0),
        1514,
        CpuCopy::new(HeapMemory::default()),
    )
    .unwrap();
    let lag = LaggyCopy {
        mem: HeapMemory::default(),
        threshold: 512,
        lag: 7,
        queue: VecDeque::new(),
        device_bytes: 0,
        cpu_bytes: 0,
    };
    let mut b: Engine<SimPort, LaggyCopy> =
        Engine::new(Config::default(), common::mac(1), 1514, lag).unwrap();
    a.open_endpoint(Some(0)).unwrap();
    let bb = b.open_endpoint(Some(0)).unwrap();
    let sizes = [5000usize, 10, 200_000, 1, 900, 70_000, 0, 3];
    let mut recvs = Vec::new();
    for &n in &sizes {
        let buf = b.copy_engine_mut().mem.insert(vec![0; n]);
        recvs.push((b.irecv(0, MatchSpec::mpi(1, 0, 2), buf).unwrap(), buf));
    }
    for (i, &n) in sizes.iter().enumerate() {
        let buf = a.copy_engine_mut().mem.insert(pattern(0, i as u32, n));
        a.isend(0, bb, match_bits(1, 2), 0, buf, SendMode::Standard)
            .unwrap();
    }
    let mut order = Vec::new();
    let mut now = 1;
    while order.len() < sizes.len() {
        now += 1_000;
        net.set_time(now);
        a.poll(&mut pa, now);
        b.poll(&mut pb, now);
        while let Some(c) = b.pop_completion() {
            assert!(c.result.is_ok(), "{:?}", c.result);
            order.push(recvs.iter().position(|r| r.0 == c.req).unwrap());
        }
        assert!(now < 10_000_000_000, "stuck");
    }
    // Eager messages complete in arrival order even though the small ones were copied at once
    // and the larger ones by the laggy device; rendezvous messages finish after their pulls.
    let eager: Vec<usize> = order
        .iter()
        .copied()
        .filter(|&i| sizes[i] <= 32 * 1024)
        .collect();
    assert_eq!(
        eager,
        vec![0, 1, 3, 4, 6, 7],
        "completions out of delivery order: {order:?}"
    );
    for (i, (_, buf)) in recvs.iter().enumerate() {
        assert!(
            b.copy_engine().mem.get(buf).unwrap() == &pattern(0, i as u32, sizes[i]),
            "message {i}"
        );
    }
    let (dev, cpu) = b.copy_engine().copied_bytes();
    assert!(
        dev > 0 && cpu > 0,
        "both paths used: device {dev}, cpu {cpu}"
    );
}

/// Every queued copy into region `bad` fails; others succeed (like a rank that unmapped its
/// buffer while others behave).
struct FailingCopy {
    inner: LaggyCopy,
    bad: u64,
    verdicts: VecDeque<bool>,
}

impl CopyEngine<Vec<u8>> for FailingCopy {
    fn copy_from_frame(
        &mut self,
        frame: Vec<u8>,
        range: Range<usize>,
        dst: &BufRef,
        off: u64,
    ) -> Result<bool, CopyError> {
        self.verdicts.push_back(dst.region != self.bad);
        if dst.region == self.bad {
            // Queue it like the device would, then fail it at completion.
            self.inner.queue.push_back((1, Vec::new(), *dst, 0));
            return Ok(false);
        }
        let r = self.inner.copy_from_frame(frame, range, dst, off)?;
        if r {
            self.verdicts.pop_back();
        }
        Ok(r)
    }
    fn write(&mut self, dst: &BufRef, off: u64, src: &[u8]) -> Result<(), CopyError> {
        self.inner.write(dst, off, src)
    }
    fn read(&mut self, src: &BufRef, off: u64, out: &mut [u8]) -> Result<(), CopyError> {
        self.inner.read(src, off, out)
    }
    fn poll_completed(&mut self, done: &mut Vec<Result<(), CopyError>>) {
        let before = done.len();
        self.inner.poll_completed(done);
        for d in done[before..].iter_mut() {
            if !self.verdicts.pop_front().unwrap_or(true) {
                *d = Err(CopyError("client memory gone".into()));
            }
        }
    }
}

#[test]
fn a_failed_copy_fails_only_its_receive_and_the_sender_still_completes() {
    let net = SimNet::new(Faults::default(), 2);
    let mut pa = net.port(common::mac(0), 1514);
    let mut pb = net.port(common::mac(1), 1514);
    let mut a: Engine<SimPort, CpuCopy<HeapMemory>> = Engine::new(
        Config::default(),
        common::mac(0),
        1514,
        CpuCopy::new(HeapMemory::default()),
    )
    .unwrap();
    let lag = LaggyCopy {
        mem: HeapMemory::default(),
        threshold: 0,
        lag: 3,
        queue: VecDeque::new(),
        device_bytes: 0,
        cpu_bytes: 0,
    };
    let mut b: Engine<SimPort, FailingCopy> = Engine::new(
        Config::default(),
        common::mac(1),
        1514,
        FailingCopy {
            inner: lag,
            bad: u64::MAX,
            verdicts: VecDeque::new(),
        },
    )
    .unwrap();
    a.open_endpoint(Some(0)).unwrap();
    let bb = b.open_endpoint(Some(0)).unwrap();
    let good = b.copy_engine_mut().inner.mem.insert(vec![0; 100_000]);
    let bad = b.copy_engine_mut().inner.mem.insert(vec![0; 100_000]);
    b.copy_engine_mut().bad = bad.region;
    let r_bad = b.irecv(0, MatchSpec::mpi(1, 0, 1), bad).unwrap();
    let r_good = b.irecv(0, MatchSpec::mpi(1, 0, 2), good).unwrap();
    let mut sends = Vec::new();
    for (tag, n) in [(1, 100_000usize), (2, 100_000)] {
        let buf = a.copy_engine_mut().mem.insert(pattern(0, tag as u32, n));
        sends.push(
            a.isend(0, bb, match_bits(1, tag), 0, buf, SendMode::Standard)
                .unwrap(),
        );
    }
    let (mut got_b, mut got_a) = (Vec::new(), Vec::new());
    let mut now = 1;
    while got_b.len() < 2 || got_a.len() < 2 {
        now += 1_000;
        net.set_time(now);
        a.poll(&mut pa, now);
        b.poll(&mut pb, now);
        while let Some(c) = b.pop_completion() {
            got_b.push(c);
        }
        while let Some(c) = a.pop_completion() {
            got_a.push(c);
        }
        assert!(now < 10_000_000_000, "stuck: {got_a:?} {got_b:?}");
    }
    let bad_c = got_b.iter().find(|c| c.req == r_bad).unwrap();
    assert!(matches!(bad_c.result, Err(Error::Copy(_))), "{bad_c:?}");
    let good_c = got_b.iter().find(|c| c.req == r_good).unwrap();
    assert!(good_c.result.is_ok(), "{good_c:?}");
    assert!(b.copy_engine().inner.mem.get(&good).unwrap() == &pattern(0, 2, 100_000));
    assert!(
        got_a.iter().all(|c| c.result.is_ok()),
        "senders complete: {got_a:?}"
    );
}
