//! `tigon bench scale`: one engine serving many peer nodes. Engine A (one endpoint, the node
//! under test) and N simulated remote nodes ([`nodes`]: each a session, sequence numbers and
//! its eager credit, speaking the wire protocol) share an in-memory link and one thread;
//! every remote node sends to A, so A holds N peers (reliability is per remote node). Per N
//! it measures the set-up of N lazily connected peers, the memory they hold when idle, the
//! message rate with traffic spread uniformly and in bursts to a hot set, and the latency of
//! one message through the loop.

mod nodes;
pub mod pair;

use crate::report;
use hdrhistogram::Histogram;
use nodes::Nodes;
use serde::Serialize;
use std::time::Instant;
use tigon_engine::matching::match_bits;
use tigon_engine::memlink::{self, MemLink};
use tigon_engine::*;

type Eng = Engine<MemLink, CpuCopy<HeapMemory>>;

const CTX: u32 = 7;
/// Receives kept posted at A (ANY_SOURCE) and messages kept in flight towards it.
const DEPTH: usize = 256;
const SIZE: usize = 8;
/// Remote nodes that carry most of the bursty traffic.
const HOT: usize = 16;

/// One measured peer count.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub peers: usize,
    pub setup_s: f64,
    /// Uniform traffic: each message from a random one of the N nodes; messages over the
    /// time engine A spent (its poll, completions, receives posted again).
    pub msgs_per_s: f64,
    /// The same over the whole loop's time (the simulated nodes' work included).
    pub loop_msgs_per_s: f64,
    /// Bursty traffic: 9 messages in 10 from a hot set of 16 nodes.
    pub msgs_per_s_hot: f64,
    /// Frames engine A sent per message received in the uniform phase (its acks: one per
    /// message once every peer gets less than a message per ack delay).
    pub a_frames_per_msg: f64,
    /// The same in the bursty phase (the hot nodes' acks coalesce; each message from the
    /// others costs one).
    pub a_frames_per_msg_hot: f64,
    /// Engine memory per idle peer: engine A's own accounting of its peers (each peer's
    /// state and queue buffers by capacity, and its peer-table entry) over N.
    pub idle_peer_bytes: f64,
    /// The same right after every peer has carried traffic.
    pub active_peer_bytes: f64,
    /// Resident memory the N peers added to this process, per peer (engine A's peers, the
    /// simulated nodes' own state, freed-but-kept heap included: an upper bound).
    pub rss_per_peer_bytes: f64,
    pub rss_bytes: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub retransmits: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub command: String,
    /// Per peer count, the first round's row with the rounds' median rates.
    pub rows: Vec<Row>,
    /// msgs/s at the largest peer count over msgs/s at the smallest: the median of the
    /// rounds' ratios, each the median of its chunks' (the counts taking turns, [`CHUNKS`]).
    pub rate_ratio: f64,
    /// Each round's ratio (the median of its chunks'), in the order run.
    pub round_ratios: Vec<f64>,
    /// Each round's chunks' ratios, in the order run ([`CHUNKS`]).
    pub chunk_ratios: Vec<Vec<f64>>,
    /// Every round's rows, in the order run.
    pub rounds: Vec<Vec<Row>>,
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
    la: MemLink,
    far: Nodes,
    /// A's posted receives (see [`Posted`]).
    posted: Posted,
    in_flight: usize,
    /// Nanoseconds engine A has worked (see `step`). Also engine A's clock (unless
    /// `vclock`): the simulated nodes stand for machines of their own, so their work (in
    /// this thread, more than A's own) is no time passing for A, as A's rate is taken over
    /// A's time alone. With the wall clock, A would see each of N nodes send ~2.5 times
    /// more rarely than at its own pace, and hold fewer of their messages under one ack
    /// (65,536 nodes, 2 M messages: 0.70-0.79 ack frames per message instead of 0.53).
    a_ns: u64,
    /// The engine's clock, when virtual (`--virtual-clock`): it moves on by
    /// [`VCLOCK_POLL_NS`] per poll and [`VCLOCK_MSG_NS`] per message A took in the poll
    /// before, A's native pace, whatever the pace of this process (under callgrind, ~50x
    /// slower: A's own time there would be ~50x its native one, and a held ack would cover
    /// far fewer messages than in a native run).
    vclock: Option<(u64, u64)>,
}

/// See [`Pair::vclock`]: ~12 M msgs/s at 256 messages in flight, as measured natively.
const VCLOCK_POLL_NS: u64 = 200;
const VCLOCK_MSG_NS: u64 = 80;

impl Pair {
    fn new(n: usize, opts: &Options) -> Result<Pair, String> {
        let max_frame = 1514;
        let ma = MacAddr([2, 0, 0, 0, 1, 1]);
        let (la, lb) = memlink::pair(ma, nodes::mac_of(0), max_frame, 4096);
        let mut cfg = Config::default();
        if let Some(d) = opts.max_ack_delay_us {
            cfg.max_ack_delay_ns = d * 1_000;
        }
        if let Some(d) = opts.max_ack_delay_busy_us {
            cfg.max_ack_delay_busy_ns = d * 1_000;
        }
        let mut a = Eng::new(cfg, ma, max_frame, CpuCopy::new(HeapMemory::default()))
            .map_err(|e| format!("engine: {e}"))?;
        let dest = a.open_endpoint(Some(0)).map_err(|e| e.to_string())?;
        let mut far = Nodes::new(n, lb, dest, match_bits(CTX, 1), SIZE);
        far.slot_hints = !opts.no_slot_hint;
        let mut p = Pair {
            a,
            la,
            far,
            posted: Default::default(),
            in_flight: 0,
            a_ns: 0,
            vclock: opts.virtual_clock.then_some((0, 0)),
        };
        for _ in 0..DEPTH {
            let buf = p.a.copy_engine_mut().mem.insert(vec![0; SIZE]);
            p.posted.post(&mut p.a, buf)?;
        }
        Ok(p)
    }

    /// Node `from` sends one message, once it has the credit for it.
    fn send(&mut self, from: usize) -> Result<(), String> {
        let mut tries = 0u64;
        while !self.far.can_send(from) {
            self.step()?;
            tries += 1;
            if tries > 10_000_000 {
                return Err(format!("node {from} never got the credit to send"));
            }
        }
        self.far.send(from);
        self.in_flight += 1;
        Ok(())
    }

    /// Polls both sides once; returns the messages A received (receives re-posted).
    fn step(&mut self) -> Result<usize, String> {
        self.far.poll();
        // Engine A's own time: its poll and the calls a rank would make (completions taken,
        // receives posted again); the simulated nodes' work would be on other machines.
        let t = Instant::now();
        let now = match &mut self.vclock {
            Some((now, got)) => {
                *now += VCLOCK_POLL_NS + VCLOCK_MSG_NS * *got;
                *now
            }
            None => self.a_ns,
        };
        self.a.poll(&mut self.la, now);
        let mut got = 0;
        while let Some(c) = self.a.pop_completion() {
            c.result.map_err(|e| format!("receive failed: {e}"))?;
            got += 1;
            self.in_flight -= 1;
            let buf = self.posted.take(c.req)?;
            self.posted.post(&mut self.a, buf)?;
        }
        self.a_ns += t.elapsed().as_nanos() as u64;
        if let Some((_, g)) = &mut self.vclock {
            *g = got as u64;
        }
        Ok(got)
    }

    /// Sends `count` messages, `DEPTH` in flight, from nodes `pick` chooses; returns the
    /// seconds it took until A received them all, and the seconds of it engine A worked.
    /// The acks A holds for them are left held (see [`Pair::drain`]).
    /// Never inlined: `make bench-instr` counts
    /// the instructions of this function alone (callgrind `--toggle-collect`), leaving out
    /// the phases that poll for a wall-clock time.
    #[inline(never)]
    fn traffic(
        &mut self,
        count: usize,
        mut pick: impl FnMut() -> usize,
    ) -> Result<(f64, f64), String> {
        let start = Instant::now();
        let a0 = self.a_ns;
        let (mut sent, mut got) = (0, 0);
        let mut last = Instant::now();
        while got < count {
            while sent < count && self.in_flight < DEPTH {
                self.send(pick())?;
                sent += 1;
            }
            let n = self.step()?;
            got += n;
            // A minute without a message is a stall (the nodes never resend: a frame the
            // engine dropped is a message lost), reported with what the engine counted.
            if n > 0 {
                last = Instant::now();
            } else if last.elapsed().as_secs() >= 60 {
                return Err(format!(
                    "stuck: {got} of {count} messages, none for a minute; engine stats {:?}",
                    self.a.stats
                ));
            }
        }
        Ok((start.elapsed().as_secs_f64(), (self.a_ns - a0) as f64 / 1e9))
    }

    /// Polls until A has paid every ack it holds (once the traffic stops, A's loop runs idle
    /// and sends them); returns the seconds it took and those A worked: a phase's acks are
    /// counted in its time, not left to the next phase.
    fn drain(&mut self) -> Result<(f64, f64), String> {
        let start = Instant::now();
        let a0 = self.a_ns;
        while !self.a.nothing_to_send() {
            self.step()?;
            if start.elapsed().as_secs() >= 60 {
                return Err("acks still held a minute after the traffic".into());
            }
        }
        Ok((start.elapsed().as_secs_f64(), (self.a_ns - a0) as f64 / 1e9))
    }

    /// A phase: [`Pair::traffic`], then [`Pair::drain`]; the two's seconds added.
    fn phase(&mut self, count: usize, pick: impl FnMut() -> usize) -> Result<(f64, f64), String> {
        let (w, s) = self.traffic(count, pick)?;
        let (dw, ds) = self.drain()?;
        Ok((w + dw, s + ds))
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

/// How the bench runs (beyond the peer counts and messages).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Engine A's `Config::max_ack_delay_ns` in µs (default: the engine's default).
    pub max_ack_delay_us: Option<u64>,
    /// Engine A's `Config::max_ack_delay_busy_ns` in µs (default: the engine's default;
    /// taken as `max_ack_delay_us` where shorter: equal to it, the busy hold is off).
    pub max_ack_delay_busy_us: Option<u64>,
    /// Engine A's clock moves at its native pace per poll and message (see `Pair::vclock`),
    /// not with the wall clock: for instruction counts under callgrind.
    pub virtual_clock: bool,
    /// The simulated nodes name no slot in their frames (`Repr::slot` 0): engine A looks
    /// every sender up by address.
    pub no_slot_hint: bool,
}

/// Uniform traffic is measured in this many chunks per round, the peer counts taking turns
/// chunk by chunk: this VM's pace moves by up to a fifth from one second to the next, and
/// chunks a few tenths of a second apart meet the same host far more often than whole
/// phases several seconds apart did (rounds' ratios 0.57-1.10 then).
pub const CHUNKS: usize = 10;

/// One peer count being measured: its pair, set up and idle, and its uniform traffic so far.
struct Case {
    p: Pair,
    n: usize,
    rng: Rng,
    setup_s: f64,
    idle_peer_bytes: f64,
    rss_per_peer_bytes: f64,
    /// The process's resident memory before this case, and after its set-up and idle spell.
    rss_before: u64,
    rss_after: u64,
    /// Uniform traffic: messages, wall and A's seconds, A's frames sent, over every chunk.
    msgs: usize,
    wall: f64,
    secs: f64,
    frames: u64,
}

impl Case {
    /// Sets up `n` lazily connected peers and lets them go idle.
    fn new(n: usize, opts: &Options) -> Result<Case, String> {
        let rss_before = rss_bytes();
        let t = Instant::now();
        let mut p = Pair::new(n, opts)?;
        // Every endpoint's first message sets its peer up (lazily, on both ends).
        let mut next = 0;
        p.phase(n, || {
            next += 1;
            next - 1
        })?;
        let setup_s = t.elapsed().as_secs_f64();
        // Idle: delayed acks go out, and peers idle for `credit_idle_ns` (100 ms) give their
        // queues' buffers back; then measure. 150 ms of A's clock (its own time, nearly all
        // of an idle loop's); a virtual clock (under callgrind) for 150 ms of the wall's.
        let idle = Instant::now();
        let a0 = p.a_ns;
        let idle_done = |p: &Pair| match p.vclock {
            Some(_) => idle.elapsed().as_millis() >= 150,
            None => p.a_ns - a0 >= 150_000_000 || idle.elapsed().as_secs() >= 2,
        };
        while !idle_done(&p) {
            p.step()?;
        }
        let rss_after = rss_bytes();
        let idle_peer_bytes = per_peer(&p.a);
        Ok(Case {
            p,
            n,
            rng: Rng(0x9e37_79b9_7f4a_7c15),
            setup_s,
            idle_peer_bytes,
            rss_per_peer_bytes: rss_after.saturating_sub(rss_before) as f64 / n as f64,
            rss_before,
            rss_after,
            msgs: 0,
            wall: 0.0,
            secs: 0.0,
            frames: 0,
        })
    }

    /// `count` messages of uniform traffic, each from a random one of the N nodes; returns
    /// their rate over A's time. The acks A holds stay held into the next chunk, as in one
    /// long phase (paying them at every chunk's end would add an ack per peer per chunk).
    fn uniform(&mut self, count: usize) -> Result<f64, String> {
        let (n, sent) = (self.n, self.p.a.stats.tx_frames);
        let rng = &mut self.rng;
        let (wall, secs) = self.p.traffic(count, || rng.below(n))?;
        self.msgs += count;
        self.wall += wall;
        self.secs += secs;
        self.frames += self.p.a.stats.tx_frames - sent;
        Ok(count as f64 / secs)
    }

    /// Ends the uniform phase (A's held acks paid, in its time), then measures the bursty
    /// phase and the latency of one message.
    fn finish(mut self, messages: usize, rss_base: u64) -> Result<Row, String> {
        let sent = self.p.a.stats.tx_frames;
        let (wall, secs) = self.p.drain()?;
        self.wall += wall;
        self.secs += secs;
        self.frames += self.p.a.stats.tx_frames - sent;
        let Case {
            mut p, n, mut rng, ..
        } = self;
        let hot = HOT.min(n);
        let a_sent = p.a.stats.tx_frames;
        let (_, secs_hot) = p.phase(messages, || {
            if rng.below(10) < 9 {
                rng.below(hot)
            } else {
                rng.below(n)
            }
        })?;
        let a_frames_per_msg_hot = (p.a.stats.tx_frames - a_sent) as f64 / messages as f64;
        let active_peer_bytes = per_peer(&p.a);

        // One message at a time, from a random endpoint, through both loops.
        let mut hist = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
        for _ in 0..2000 {
            let from = rng.below(n);
            let t = Instant::now();
            p.send(from)?;
            while p.step()? == 0 {}
            hist.record(t.elapsed().as_nanos() as u64).ok();
        }
        let msgs = self.msgs.max(1) as f64;
        Ok(Row {
            peers: n,
            setup_s: self.setup_s,
            msgs_per_s: msgs / self.secs,
            msgs_per_s_hot: messages as f64 / secs_hot,
            loop_msgs_per_s: msgs / self.wall,
            a_frames_per_msg: self.frames as f64 / msgs,
            a_frames_per_msg_hot,
            idle_peer_bytes: self.idle_peer_bytes,
            active_peer_bytes,
            rss_per_peer_bytes: self.rss_per_peer_bytes,
            // The process as it would be with this count alone: its baseline and what this
            // count's set-up added (the other counts' pairs are alive beside it).
            rss_bytes: rss_base + self.rss_after.saturating_sub(self.rss_before),
            p50_us: hist.value_at_quantile(0.5) as f64 / 1e3,
            p99_us: hist.value_at_quantile(0.99) as f64 / 1e3,
            retransmits: p.a.stats.retransmits,
        })
    }
}

/// Engine memory per peer: engine A's own accounting of its peers over their number.
fn per_peer(e: &Eng) -> f64 {
    let (peers, bytes) = e.peer_memory();
    bytes as f64 / peers.max(1) as f64
}

/// One round: every count in `peers` set up (one after the other), their uniform traffic in
/// [`CHUNKS`] chunks of `messages` in all, the counts taking turns chunk by chunk, then each
/// one's bursty phase and latency. Returns the rows and the chunks' ratios of the most peers'
/// rate to the fewest's.
fn round(
    peers: &[usize],
    messages: usize,
    opts: &Options,
    progress: &str,
) -> Result<(Vec<Row>, Vec<f64>), String> {
    let rss_base = rss_bytes();
    let mut cases = Vec::new();
    for &n in peers {
        report::progress(&format!("{progress}, setting up {n} peers"));
        cases.push(Case::new(n, opts)?);
    }
    let chunks = CHUNKS.min(messages);
    let mut ratios = Vec::new();
    for k in 0..chunks {
        report::progress(&format!("{progress}, uniform traffic {}/{chunks}", k + 1));
        // Chunk k's share of `messages` (the first chunks take the remainder).
        let count = messages / chunks + usize::from(k < messages % chunks);
        let mut rates = Vec::new();
        for c in &mut cases {
            rates.push(c.uniform(count)?);
        }
        if let (Some(&f), Some(&l)) = (rates.first(), rates.last())
            && f > 0.0
        {
            ratios.push(l / f);
        }
    }
    let mut rows = Vec::new();
    for c in cases {
        report::progress(&format!("{progress}, bursty traffic, {} peers", c.n));
        rows.push(c.finish(messages, rss_base)?);
    }
    Ok((rows, ratios))
}

/// Runs every peer count in `peers` (ascending), `messages` per traffic phase, `rounds` times
/// over ([`round`]: the counts' uniform traffic interleaved chunk by chunk, so that the
/// host's slow spells fall on both ends of a ratio alike). A round's ratio is the median of
/// its chunks' ratios, and the median of the rounds' is the figure.
pub fn run(
    peers: &[usize],
    messages: usize,
    rounds: usize,
    opts: &Options,
) -> Result<Report, String> {
    if let Some(&n) = peers.iter().find(|&&n| n == 0 || n > 1 << 16) {
        return Err(format!("--peers {n}: use 1 ..= 65536"));
    }
    if rounds == 0 {
        return Err("--rounds 0: use at least 1".into());
    }
    if messages == 0 {
        return Err("--messages 0: use at least 1".into());
    }
    let mut all = Vec::new();
    let mut round_ratios = Vec::new();
    let mut chunk_ratios = Vec::new();
    for k in 1..=rounds {
        let (rows, ratios) = round(
            peers,
            messages,
            opts,
            &format!("bench scale: round {k}/{rounds}"),
        )?;
        all.push(rows);
        round_ratios.push(median(&ratios));
        chunk_ratios.push(ratios);
    }
    report::progress_done();
    let rate_ratio = median(&round_ratios);
    // The first round's rows (memory as a fresh process holds it: later rounds' RSS counts
    // what the allocator kept of the rounds before), with the rounds' median rates.
    let mut rows = all[0].clone();
    for (i, row) in rows.iter_mut().enumerate() {
        let med = |f: fn(&Row) -> f64| median(&all.iter().map(|r| f(&r[i])).collect::<Vec<_>>());
        row.msgs_per_s = med(|r| r.msgs_per_s);
        row.msgs_per_s_hot = med(|r| r.msgs_per_s_hot);
        row.loop_msgs_per_s = med(|r| r.loop_msgs_per_s);
    }
    let list: Vec<String> = peers.iter().map(usize::to_string).collect();
    Ok(Report {
        command: format!(
            "tigon bench scale --peers {} --messages {messages} --rounds {rounds}{}{}{}{}",
            list.join(","),
            opts.max_ack_delay_us
                .map_or(String::new(), |d| format!(" --max-ack-delay-us {d}")),
            opts.max_ack_delay_busy_us
                .map_or(String::new(), |d| format!(" --max-ack-delay-busy-us {d}")),
            if opts.virtual_clock {
                " --virtual-clock"
            } else {
                ""
            },
            if opts.no_slot_hint {
                " --no-slot-hint"
            } else {
                ""
            }
        ),
        rows,
        rate_ratio,
        round_ratios,
        chunk_ratios,
        rounds: all,
    })
}

/// The middle value (the upper one of an even count's two); 0 for none.
fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(0.0)
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
                report::si(x.loop_msgs_per_s),
                format!("{:.2}", x.a_frames_per_msg),
                format!("{:.2}", x.a_frames_per_msg_hot),
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
            "loop msgs/s",
            "A frames/msg",
            "hot",
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
         peer table) per peer. RSS B/peer: what the process grew per peer (engine A, the simulated\n\
         nodes' {} B each, freed heap included). A frames/msg: frames engine A sent per message\n\
         received (its acks), uniform phase; hot: the same, bursty phase. msgs/s: over engine A's\n\
         time (also A's clock: the nodes stand for other machines); loop msgs/s: over the whole\n\
         loop's, the simulated nodes' work included; uniform traffic in {} chunks per round, the\n\
         counts taking turns. RSS MiB: the process's baseline and this count's set-up.\n\
         Rows: the first round's (a fresh process), its msgs/s the median of the rounds'.\n\
         msgs/s at the most peers / at the fewest, per round (the median of its chunks'): {};\n\
         median {:.2} (target >= 0.90)\n\
         reproduce: {}",
        nodes::Nodes::bytes_per_node(),
        CHUNKS,
        r.round_ratios
            .iter()
            .map(|x| format!("{x:.2}"))
            .collect::<Vec<_>>()
            .join(", "),
        r.rate_ratio,
        r.command
    ));
    s
}

/// A's posted receives and their buffers, in posting order: they match (ANY_SOURCE, one
/// tag) and so complete in that order, and the bench's own bookkeeping stays out of the
/// instruction count (`make bench-instr`) as far as it can.
#[derive(Default)]
struct Posted(std::collections::VecDeque<(ReqId, BufRef)>);

impl Posted {
    /// Posts a receive into `buf` at `eng`.
    fn post(&mut self, eng: &mut Eng, buf: BufRef) -> Result<(), String> {
        let id = eng
            .irecv(0, MatchSpec::mpi(CTX, ANY_SOURCE, 1), buf)
            .map_err(|e| e.to_string())?;
        self.0.push_back((id, buf));
        Ok(())
    }

    /// The buffer of completed receive `id`: the oldest posted, unless completions came out
    /// of order.
    fn take(&mut self, id: ReqId) -> Result<BufRef, String> {
        let i = if self.0.front().is_some_and(|&(r, _)| r == id) {
            0
        } else {
            self.0
                .iter()
                .position(|&(r, _)| r == id)
                .ok_or("completion of no receive")?
        };
        Ok(self.0.remove(i).expect("index from position").1)
    }
}

#[cfg(test)]
mod tests {
    /// The simulated nodes speak the engine's wire protocol (handshake, connection ids,
    /// credit): a run that completes without a retransmit says they still do.
    #[test]
    fn a_small_run_completes_over_the_simulated_nodes() {
        let r = super::run(&[3, 64], 2_000, 1, &Default::default()).unwrap();
        for row in &r.rows {
            assert_eq!(row.retransmits, 0, "{row:?}");
            assert!(
                row.msgs_per_s > 0.0
                    && row.a_frames_per_msg > 0.0
                    && row.a_frames_per_msg_hot > 0.0,
                "{row:?}"
            );
        }
        // 64 idle peers: 192 B each and the index (128 buckets of 4 B).
        assert!(r.rows[1].idle_peer_bytes <= 200.0, "{:?}", r.rows[1]);
    }

    /// Rounds: each measures every count; the ratio is the median round's, and each row is
    /// the first round's with the median rates. Bad arguments are refused before anything
    /// runs.
    #[test]
    fn rounds_give_the_median_ratio_and_rows() {
        let r = super::run(&[2, 32], 1_000, 3, &Default::default()).unwrap();
        assert_eq!((r.rounds.len(), r.round_ratios.len()), (3, 3));
        let mut ratios = r.round_ratios.clone();
        ratios.sort_by(f64::total_cmp);
        assert_eq!(r.rate_ratio, ratios[1]);
        // A round's ratio is the median of its chunks' (the counts taking turns).
        assert_eq!(r.chunk_ratios.len(), 3);
        for (round, chunks) in r.round_ratios.iter().zip(&r.chunk_ratios) {
            assert_eq!(chunks.len(), super::CHUNKS);
            assert!(chunks.iter().all(|&x| x > 0.0), "{chunks:?}");
            assert_eq!(*round, super::median(chunks));
        }
        for (i, row) in r.rows.iter().enumerate() {
            let mut rates: Vec<f64> = r.rounds.iter().map(|x| x[i].msgs_per_s_hot).collect();
            rates.sort_by(f64::total_cmp);
            assert_eq!(row.msgs_per_s_hot, rates[1], "{row:?}");
            assert_eq!(row.peers, [2, 32][i]);
            assert_eq!(row.rss_bytes, r.rounds[0][i].rss_bytes);
        }
        assert!(r.command.contains("--rounds 3"), "{}", r.command);
        let none = super::Options::default();
        assert!(super::run(&[2], 1_000, 0, &none).is_err());
        assert!(super::run(&[2, 70_000], 1_000, 1, &none).is_err());
        assert!(super::run(&[2], 0, 1, &none).is_err());
    }

    /// From 4,096 peers on, engine A reads each frame's peer ahead of handling it (rx.rs,
    /// `receive_warm`): every message still arrives, none resent.
    #[test]
    fn a_run_past_the_read_ahead_threshold_completes() {
        let r = super::run(&[4_200], 20_000, 1, &Default::default()).unwrap();
        assert_eq!(r.rows[0].retransmits, 0, "{:?}", r.rows[0]);
    }

    /// From 4,096 peers on, a receive that leaves frames in the link leaves its last frames
    /// (read ahead already) for the next receive, which handles them first, also when the
    /// link has nothing new: every message arrives, each node's in order.
    #[test]
    fn a_receive_leaves_its_last_frames_to_the_next() {
        let mut c = super::Case::new(4_200, &Default::default()).unwrap();
        let p = &mut c.p;
        let ooo = p.a.stats.rx_out_of_order;
        // 50 messages from each of 4 nodes, 200 frames on the link at once.
        for k in 0..200 {
            assert!(p.far.can_send(k % 4), "node {} has no credit", k % 4);
            p.far.send(k % 4);
            p.in_flight += 1;
        }
        let first = p.step().unwrap();
        let most = tigon_engine::Config::default().burst * 4;
        assert!(
            first > 0 && first < most,
            "the first poll handled {first} messages: all it took (at most {most})"
        );
        let mut got = first;
        for _ in 0..4 {
            got += p.step().unwrap();
        }
        assert_eq!(got, 200, "messages received");
        assert_eq!(p.a.stats.rx_out_of_order, ooo, "frames taken out of order");
        assert_eq!(p.a.stats.retransmits, 0);
    }
}
