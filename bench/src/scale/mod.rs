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
    /// rounds' ratios, each of two counts measured one right after the other.
    pub rate_ratio: f64,
    /// Each round's ratio, in the order run.
    pub round_ratios: Vec<f64>,
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
    /// seconds it took until A received them all and paid every ack it held for them (once
    /// the traffic stops, A's loop runs idle and sends them: counted here, not left to the
    /// next phase), and the seconds of it engine A worked.
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
        while !self.a.nothing_to_send() {
            self.step()?;
            if last.elapsed().as_secs() >= 60 {
                return Err("acks still held a minute after the traffic".into());
            }
        }
        Ok((start.elapsed().as_secs_f64(), (self.a_ns - a0) as f64 / 1e9))
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

/// Measures one peer count; `messages` per traffic phase.
pub fn run_case(n: usize, messages: usize, opts: &Options) -> Result<Row, String> {
    let rss0 = rss_bytes();
    let t = Instant::now();
    let mut p = Pair::new(n, opts)?;
    // Every endpoint's first message sets its peer up (lazily, on both ends).
    let mut next = 0;
    p.traffic(n, || {
        next += 1;
        next - 1
    })?;
    let setup_s = t.elapsed().as_secs_f64();
    // Idle: delayed acks go out, and peers idle for `credit_idle_ns` (100 ms) give their
    // queues' buffers back; then measure. 150 ms of A's clock (its own time, nearly all of
    // an idle loop's); a virtual clock (under callgrind) for 150 ms of the wall's, as ever.
    let idle = Instant::now();
    let a0 = p.a_ns;
    let idle_done = |p: &Pair| match p.vclock {
        Some(_) => idle.elapsed().as_millis() >= 150,
        None => p.a_ns - a0 >= 150_000_000 || idle.elapsed().as_secs() >= 2,
    };
    while !idle_done(&p) {
        p.step()?;
    }
    let rss_per_peer_bytes = rss_bytes().saturating_sub(rss0) as f64 / n as f64;
    let per_peer = |e: &Eng| {
        let (peers, bytes) = e.peer_memory();
        bytes as f64 / peers.max(1) as f64
    };
    let idle_peer_bytes = per_peer(&p.a);

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let a_sent = p.a.stats.tx_frames;
    let (wall, secs) = p.traffic(messages, || rng.below(n))?;
    let msgs_per_s = messages as f64 / secs;
    let loop_msgs_per_s = messages as f64 / wall;
    let a_frames_per_msg = (p.a.stats.tx_frames - a_sent) as f64 / messages as f64;
    let hot = HOT.min(n);
    let a_sent = p.a.stats.tx_frames;
    let (_, secs_hot) = p.traffic(messages, || {
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
    Ok(Row {
        peers: n,
        setup_s,
        msgs_per_s,
        msgs_per_s_hot: messages as f64 / secs_hot,
        loop_msgs_per_s,
        a_frames_per_msg,
        a_frames_per_msg_hot,
        idle_peer_bytes,
        active_peer_bytes,
        rss_per_peer_bytes,
        rss_bytes: rss_bytes(),
        p50_us: hist.value_at_quantile(0.5) as f64 / 1e3,
        p99_us: hist.value_at_quantile(0.99) as f64 / 1e3,
        retransmits: p.a.stats.retransmits,
    })
}

/// Runs every peer count in `peers` (ascending), `messages` per traffic phase, `rounds` times
/// over: the counts of a round one right after the other, so that the host's slow spells
/// (this VM's rate of one count moves by up to a fifth between runs) fall on both ends of a
/// ratio alike, and the median of the rounds' ratios is the figure.
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
    let mut all = Vec::new();
    for k in 1..=rounds {
        let mut rows = Vec::new();
        for &n in peers {
            report::progress(&format!("bench scale: round {k}/{rounds}, {n} peers"));
            rows.push(run_case(n, messages, opts)?);
        }
        all.push(rows);
    }
    report::progress_done();
    let round_ratios: Vec<f64> = all
        .iter()
        .map(|rows| match (rows.first(), rows.last()) {
            (Some(f), Some(l)) if f.msgs_per_s > 0.0 => l.msgs_per_s / f.msgs_per_s,
            _ => 0.0,
        })
        .collect();
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
         loop's, the simulated nodes' work included.\n\
         Rows: the first round's (a fresh process), its msgs/s the median of the rounds'.\n\
         msgs/s at the most peers / at the fewest, per round: {}; median {:.2} (target >= 0.90)\n\
         reproduce: {}",
        nodes::Nodes::bytes_per_node(),
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
    }

    /// From 4,096 peers on, engine A reads each frame's peer ahead of handling it (rx.rs,
    /// `receive_warm`; in a debug build it checks that the bucket it read ahead for each
    /// frame is that frame's): every message still arrives, none resent.
    #[test]
    fn a_run_past_the_read_ahead_threshold_completes() {
        let r = super::run(&[4_200], 20_000, 1, &Default::default()).unwrap();
        assert_eq!(r.rows[0].retransmits, 0, "{:?}", r.rows[0]);
    }
}
