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

/// Reads of send buffers, counted: how many calls, how many frames' payloads; reads of the
/// buffer `bad` fail.
struct CountingReads {
    inner: CpuCopy<HeapMemory>,
    bad: u64,
    vectored_calls: u64,
    vectored_frames: u64,
}

impl CopyEngine<Vec<u8>> for CountingReads {
    fn copy_from_frame(
        &mut self,
        frame: Vec<u8>,
        range: Range<usize>,
        dst: &BufRef,
        off: u64,
    ) -> Result<bool, CopyError> {
        self.inner.copy_from_frame(frame, range, dst, off)
    }
    fn write(&mut self, dst: &BufRef, off: u64, src: &[u8]) -> Result<(), CopyError> {
        CopyEngine::<Vec<u8>>::write(&mut self.inner, dst, off, src)
    }
    fn read(&mut self, src: &BufRef, off: u64, out: &mut [u8]) -> Result<(), CopyError> {
        if src.region == self.bad {
            return Err(CopyError("send buffer gone".into()));
        }
        CopyEngine::<Vec<u8>>::read(&mut self.inner, src, off, out)
    }
    fn read_vectored(
        &mut self,
        src: &BufRef,
        off: u64,
        outs: &mut [&mut [u8]],
    ) -> Result<(), CopyError> {
        self.vectored_calls += 1;
        self.vectored_frames += outs.len() as u64;
        if src.region == self.bad {
            return Err(CopyError("send buffer gone".into()));
        }
        CopyEngine::<Vec<u8>>::read_vectored(&mut self.inner, src, off, outs)
    }
    fn poll_completed(&mut self, done: &mut Vec<Result<(), CopyError>>) {
        CopyEngine::<Vec<u8>>::poll_completed(&mut self.inner, done)
    }
}

/// Rendezvous data is read for a whole burst of frames at once (one `read_vectored` per run
/// of a message's frames), with the right bytes; a send whose buffer cannot be read fails
/// with the copy error and takes nothing else down, its frames never sent with stale bytes.
#[test]
fn rendezvous_frames_are_read_per_burst_and_a_failed_read_fails_only_its_send() {
    let net = SimNet::new(Faults::default(), 3);
    let mut pa = net.port(common::mac(0), 9014);
    let mut pb = net.port(common::mac(1), 9014);
    // No payload checksum: the frames' payloads may be read after their headers are built.
    let cfg = Config {
        payload_checksum: Some(false),
        ..Config::default()
    };
    let reads = CountingReads {
        inner: CpuCopy::new(HeapMemory::default()),
        bad: u64::MAX,
        vectored_calls: 0,
        vectored_frames: 0,
    };
    let mut a: Engine<SimPort, CountingReads> =
        Engine::new(cfg.clone(), common::mac(0), 9014, reads).unwrap();
    let mut b: Engine<SimPort, CpuCopy<HeapMemory>> = Engine::new(
        cfg,
        common::mac(1),
        9014,
        CpuCopy::new(HeapMemory::default()),
    )
    .unwrap();
    a.open_endpoint(Some(0)).unwrap();
    let bb = b.open_endpoint(Some(0)).unwrap();
    const N: usize = 1 << 20;
    let mut recvs = Vec::new();
    for tag in [1, 2] {
        let buf = b.copy_engine_mut().mem.insert(vec![0; N]);
        recvs.push((b.irecv(0, MatchSpec::mpi(1, 0, tag), buf).unwrap(), buf));
    }
    let good = a.copy_engine_mut().inner.mem.insert(pattern(0, 1, N));
    let bad = a.copy_engine_mut().inner.mem.insert(pattern(0, 2, N));
    let s_good = a
        .isend(0, bb, match_bits(1, 1), 0, good, SendMode::Standard)
        .unwrap();
    let s_bad = a
        .isend(0, bb, match_bits(1, 2), 0, bad, SendMode::Standard)
        .unwrap();
    // The RTS carries no payload: the bad buffer fails once its data is pulled.
    a.copy_engine_mut().bad = bad.region;
    let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
    let mut now = 1;
    while got_a.len() < 2 || !got_b.iter().any(|c: &Completion| c.req == recvs[0].0) {
        now += 1_000;
        net.set_time(now);
        a.poll(&mut pa, now);
        b.poll(&mut pb, now);
        while let Some(c) = a.pop_completion() {
            got_a.push(c);
        }
        while let Some(c) = b.pop_completion() {
            got_b.push(c);
        }
        assert!(now < 10_000_000_000, "stuck: {got_a:?} {got_b:?}");
    }
    let ok = got_a.iter().find(|c| c.req == s_good).unwrap();
    assert!(ok.result.is_ok(), "{ok:?}");
    let failed = got_a.iter().find(|c| c.req == s_bad).unwrap();
    assert!(matches!(failed.result, Err(Error::Copy(_))), "{failed:?}");
    let r = got_b.iter().find(|c| c.req == recvs[0].0).unwrap();
    assert!(r.result.is_ok(), "{r:?}");
    assert!(b.copy_engine().mem.get(&recvs[0].1).unwrap() == &pattern(0, 1, N));
    // Nothing of the bad buffer reached the receiver as data.
    assert!(
        b.copy_engine()
            .mem
            .get(&recvs[1].1)
            .unwrap()
            .iter()
            .all(|&x| x == 0)
    );
    let c = a.copy_engine();
    assert!(
        c.vectored_frames >= 2 * c.vectored_calls,
        "several frames per read: {} frames in {} calls",
        c.vectored_frames,
        c.vectored_calls
    );
    assert!(
        c.vectored_frames * 8900 >= N as u64,
        "every frame of the good message"
    );
}
