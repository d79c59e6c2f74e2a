//! `tigon bench scale`: one engine serving many peers. Engine A (one endpoint, the node under
//! test) and engine B (N endpoints, standing for N remote ranks) share an in-memory link and
//! one thread; every B endpoint sends to A, so each engine holds N peers. Per N it measures
//! the set-up of N lazily connected peers, the memory they hold when idle, the message rate
//! with traffic spread uniformly and in bursts to a hot set, and the latency of one message
//! through the loops.

use crate::report;
use hdrhistogram::Histogram;
use serde::Serialize;
use std::time::Instant;
use tigon_engine::matching::match_bits;
use tigon_engine::memlink::{self, MemLink};
use tigon_engine::*;

type Eng = Engine<MemLink, CpuCopy<HeapMemory>>;

const CTX: u32 = 7;
/// Receives kept posted at A (ANY_SOURCE) and sends kept in flight from B.
const DEPTH: usize = 256;
const SIZE: usize = 8;
/// Endpoints of B that carry most of the bursty traffic.
const HOT: usize = 16;

/// One measured peer count.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub peers: usize,
    pub setup_s: f64,
    /// Uniform traffic: each message from a random one of the N endpoints.
    pub msgs_per_s: f64,
    /// Bursty traffic: 9 messages in 10 from a hot set of 16 endpoints.
    pub msgs_per_s_hot: f64,
    /// Engine memory per idle peer: engine A's own accounting of its peers (each peer's
    /// state and queue buffers by capacity, and its peer-table entry) over N.
    pub idle_peer_bytes: f64,
    /// The same right after every peer has carried traffic.
    pub active_peer_bytes: f64,
    /// Resident memory the N peers added to this process, per peer (both ends, engine B's
    /// N endpoints, freed-but-kept heap included: an upper bound).
    pub rss_per_peer_bytes: f64,
    pub rss_bytes: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub retransmits: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub command: String,
    pub rows: Vec<Row>,
    /// msgs/s at the largest peer count over msgs/s at the smallest.
    pub rate_ratio: f64,
}

/// Resident set size of this process (bytes).
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

struct Pair {
    a: Eng,
    b: Eng,
    la: MemLink,
    lb: MemLink,
    dest: EndpointAddr,
    t0: Instant,
    /// A's posted receives and their buffers, in posting order: they match (ANY_SOURCE, one
    /// tag) and so complete in that order, and the bench's own bookkeeping stays out of the
    /// instruction count (`make bench-instr`) as far as it can.
    posted: std::collections::VecDeque<(ReqId, BufRef)>,
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
            p.post(buf)?;
        }
        Ok(p)
    }

    fn post(&mut self, buf: BufRef) -> Result<(), String> {
        let id = self
            .a
            .irecv(0, MatchSpec::mpi(CTX, ANY_SOURCE, 1), buf)
            .map_err(|e| e.to_string())?;
        self.posted.push_back((id, buf));
        Ok(())
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

    /// The buffer of completed receive `id`: the oldest posted, unless completions came out
    /// of order.
    fn take_posted(&mut self, id: ReqId) -> Result<BufRef, String> {
        let i = if self.posted.front().is_some_and(|&(r, _)| r == id) {
            0
        } else {
            self.posted
                .iter()
                .position(|&(r, _)| r == id)
                .ok_or("completion of no receive")?
        };
        Ok(self.posted.remove(i).expect("index from position").1)
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
            let buf = self.take_posted(c.req)?;
            self.post(buf)?;
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

/// A small deterministic generator (xorshift64).
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Measures one peer count; `messages` per traffic phase.
pub fn run_case(n: usize, messages: usize) -> Result<Row, String> {
    let rss0 = rss_bytes();
    let t = Instant::now();
    let mut p = Pair::new(n)?;
    // Every endpoint's first message sets its peer up (lazily, on both ends).
    let mut next = 0;
    p.traffic(n, || {
        next += 1;
        next - 1
    })?;
    let setup_s = t.elapsed().as_secs_f64();
    // Idle: delayed acks go out, and peers idle for `credit_idle_ns` (100 ms) give their
    // queues' buffers back; then measure.
    let idle = Instant::now();
    while idle.elapsed().as_millis() < 150 {
        p.step()?;
    }
    let rss_per_peer_bytes = rss_bytes().saturating_sub(rss0) as f64 / n as f64;
    let per_peer = |e: &Eng| {
        let (peers, bytes) = e.peer_memory();
        bytes as f64 / peers.max(1) as f64
    };
    let idle_peer_bytes = per_peer(&p.a);

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let secs = p.traffic(messages, || rng.below(n))?;
    let msgs_per_s = messages as f64 / secs;
    let hot = HOT.min(n);
    let secs_hot = p.traffic(messages, || {
        if rng.below(10) < 9 {
            rng.below(hot)
        } else {
            rng.below(n)
        }
    })?;
    let active_peer_bytes = per_peer(&p.a);

    // One message at a time, from a random endpoint, through both loops.
    let mut hist = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
    for _ in 0..2000 {
        let from = rng.below(n);
        let t = Instant::now();
        p.send(from)?;
        while p.step()? == 0 {}
        hist.record(t.elapsed().as_nanos() as u64).ok();
        while p.in_flight > 0 {
            p.step()?;
        }
    }
    Ok(Row {
        peers: n,
        setup_s,
        msgs_per_s,
        msgs_per_s_hot: messages as f64 / secs_hot,
        idle_peer_bytes,
        active_peer_bytes,
        rss_per_peer_bytes,
        rss_bytes: rss_bytes(),
        p50_us: hist.value_at_quantile(0.5) as f64 / 1e3,
        p99_us: hist.value_at_quantile(0.99) as f64 / 1e3,
        retransmits: p.a.stats.retransmits + p.b.stats.retransmits,
    })
}

/// Runs every peer count in `peers` (ascending), `messages` per traffic phase.
pub fn run(peers: &[usize], messages: usize) -> Result<Report, String> {
    let mut rows = Vec::new();
    for &n in peers {
        if n == 0 || n > 1 << 16 {
            return Err(format!("--peers {n}: use 1 ..= 65536"));
        }
        report::progress(&format!("bench scale: {n} peers"));
        rows.push(run_case(n, messages)?);
    }
    report::progress_done();
    let rate_ratio = match (rows.first(), rows.last()) {
        (Some(f), Some(l)) if f.msgs_per_s > 0.0 => l.msgs_per_s / f.msgs_per_s,
        _ => 0.0,
    };
    let list: Vec<String> = peers.iter().map(usize::to_string).collect();
    Ok(Report {
        command: format!(
            "tigon bench scale --peers {} --messages {messages}",
            list.join(",")
        ),
        rows,
        rate_ratio,
    })
}

/// The report as a terminal table.
pub fn render(r: &Report) -> String {
    let rows: Vec<Vec<String>> = r
        .rows
        .iter()
        .map(|x| {
            vec![
                x.peers.to_string(),
                format!("{:.2}", x.setup_s),
                report::si(x.msgs_per_s),
                report::si(x.msgs_per_s_hot),
                format!("{:.0}", x.idle_peer_bytes),
                format!("{:.0}", x.active_peer_bytes),
                format!("{:.0}", x.rss_per_peer_bytes),
                format!("{:.1}", x.rss_bytes as f64 / (1 << 20) as f64),
                format!("{:.1}", x.p50_us),
                format!("{:.1}", x.p99_us),
                x.retransmits.to_string(),
            ]
        })
        .collect();
    let mut s = report::table(
        &[
            "peers",
            "setup s",
            "msgs/s",
            "msgs/s hot",
            "B/idle peer",
            "B/active peer",
            "RSS B/peer",
            "RSS MiB",
            "p50 us",
            "p99 us",
            "retransmits",
        ],
        &rows,
    );
    s.push_str(&format!(
        "\n\nB/idle peer, B/active peer: engine A's accounting of its peers (state, queue buffers,\n\
         peer table) per peer. RSS B/peer: what the process grew per peer, both ends and freed heap\n\
         included.\n\
         msgs/s at the most peers / at the fewest: {:.2} (target >= 0.90)\nreproduce: {}",
        r.rate_ratio, r.command
    ));
    s
}
