//! `tigon bench scale --pair`: the poll loops of two full engines over the in-memory link,
//! engine B's N endpoints sending 8-byte messages to engine A's one (one peer each way: the
//! peers of an engine are remote nodes). What `make bench-instr` counts: the instructions
//! per small message through both engines, send side and receive side.

use super::{CTX, DEPTH, Eng, HOT, Posted, Rng, SIZE};
use std::time::Instant;
use tigon_engine::matching::match_bits;
use tigon_engine::memlink::{self, MemLink};
use tigon_engine::*;

struct Pair {
    a: Eng,
    b: Eng,
    la: MemLink,
    lb: MemLink,
    dest: EndpointAddr,
    t0: Instant,
    /// A's posted receives (see [`Posted`]).
    posted: Posted,
    /// B's send buffer, per endpoint reused (sends of one endpoint are in order).
    send_buf: BufRef,
    in_flight: usize,
}

impl Pair {
    fn new(n: usize) -> Result<Pair, String> {
        let max_frame = 1514;
        let (ma, mb) = (MacAddr([2, 0, 0, 0, 1, 1]), MacAddr([2, 0, 0, 0, 1, 2]));
        let (la, lb) = memlink::pair(ma, mb, max_frame, 4096);
        let cfg = Config::default();
        let mk = |mac| {
            Eng::new(
                cfg.clone(),
                mac,
                max_frame,
                CpuCopy::new(HeapMemory::default()),
            )
            .map_err(|e| format!("engine: {e}"))
        };
        let (mut a, mut b) = (mk(ma)?, mk(mb)?);
        let dest = a.open_endpoint(Some(0)).map_err(|e| e.to_string())?;
        for i in 0..n {
            b.open_endpoint(Some(i as u16))
                .map_err(|e| format!("endpoint {i}: {e}"))?;
        }
        let send_buf = b.copy_engine_mut().mem.insert(vec![7; SIZE]);
        let mut p = Pair {
            a,
            b,
            la,
            lb,
            dest,
            t0: Instant::now(),
            posted: Default::default(),
            send_buf,
            in_flight: 0,
        };
        for _ in 0..DEPTH {
            let buf = p.a.copy_engine_mut().mem.insert(vec![0; SIZE]);
            p.posted.post(&mut p.a, buf)?;
        }
        Ok(p)
    }

    fn send(&mut self, from: usize) -> Result<(), String> {
        self.b
            .isend(
                from as u16,
                self.dest,
                match_bits(CTX, 1),
                from as u32,
                self.send_buf,
                SendMode::Standard,
            )
            .map_err(|e| e.to_string())?;
        self.in_flight += 1;
        Ok(())
    }

    /// Polls both engines once; returns the messages A received (receives re-posted).
    fn step(&mut self) -> Result<usize, String> {
        let now = self.t0.elapsed().as_nanos() as u64;
        self.b.poll(&mut self.lb, now);
        self.a.poll(&mut self.la, now);
        while let Some(c) = self.b.pop_completion() {
            c.result.map_err(|e| format!("send failed: {e}"))?;
            self.in_flight -= 1;
        }
        let mut got = 0;
        while let Some(c) = self.a.pop_completion() {
            c.result.map_err(|e| format!("receive failed: {e}"))?;
            got += 1;
            let buf = self.posted.take(c.req)?;
            self.posted.post(&mut self.a, buf)?;
        }
        Ok(got)
    }

    /// Sends `count` messages, `DEPTH` in flight, from endpoints `pick` chooses; returns the
    /// seconds it took until A received them all. Never inlined: `make bench-instr` counts
    /// the instructions of this function alone (callgrind `--toggle-collect`), leaving out
    /// the phases that poll for a wall-clock time.
    #[inline(never)]
    fn traffic(&mut self, count: usize, mut pick: impl FnMut() -> usize) -> Result<f64, String> {
        let start = Instant::now();
        let (mut sent, mut got) = (0, 0);
        let mut last = Instant::now();
        while got < count {
            while sent < count && self.in_flight < DEPTH {
                self.send(pick())?;
                sent += 1;
            }
            got += self.step()?;
            if last.elapsed().as_secs() >= 60 {
                return Err(format!("stuck: {got} of {count} messages after a minute"));
            }
            if got > 0 {
                last = Instant::now();
            }
        }
        // Let the last sends complete (acks) before the next phase.
        while self.in_flight > 0 {
            self.step()?;
        }
        Ok(start.elapsed().as_secs_f64())
    }
}

/// Sets up `n` endpoints on B, then runs the uniform and the bursty traffic phases of
/// `messages` each; returns the two rates (msgs/s).
pub fn run(n: usize, messages: usize) -> Result<(f64, f64), String> {
    let mut p = Pair::new(n)?;
    let mut next = 0;
    p.traffic(n, || {
        next += 1;
        next - 1
    })?;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let secs = p.traffic(messages, || rng.below(n))?;
    let hot = HOT.min(n);
    let secs_hot = p.traffic(messages, || {
        if rng.below(10) < 9 {
            rng.below(hot)
        } else {
            rng.below(n)
        }
    })?;
    Ok((messages as f64 / secs, messages as f64 / secs_hot))
}
