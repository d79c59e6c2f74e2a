//! `tigon bench engine`: messages and frames per second through the engine's poll loop, one
//! thread (core) per side, over a lossless in-memory link.

use crate::report;
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tigon_engine::matching::match_bits;
use tigon_engine::memlink::{self, MemLink};
use tigon_engine::*;

/// One measured case.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub class: String,
    pub size: usize,
    pub mtu: usize,
    /// Messages kept in flight.
    pub depth: usize,
    pub messages: u64,
    pub seconds: f64,
    pub msgs_per_s: f64,
    pub frames_per_s: f64,
    pub gbit_per_s: f64,
    pub retransmits: u64,
    /// Frames received twice (a false retransmit, on this lossless link).
    pub duplicates: u64,
    /// User-space instructions per message per side (the two engine threads' counts over
    /// the messages, halved), where the CPU's counter can be read; `None` elsewhere (then
    /// `make bench-instr` counts them with callgrind).
    pub instr_per_msg: Option<f64>,
    /// The share of the row's time that the less fortunate side's thread was on its core
    /// (from the thread's `/proc/thread-self/schedstat`), `None` where the kernel does not
    /// say. Each side spins on its own core: well below 1, other processes took the core
    /// (a build on this 2-core machine) and the row measures the sharing, not the engine.
    pub on_cpu: Option<f64>,
}

/// A thread's time on a CPU and waiting for one (ns), from the scheduler's statistics.
#[derive(Clone, Copy)]
struct Sched {
    run_ns: u64,
    wait_ns: u64,
}

impl Sched {
    fn now() -> Option<Sched> {
        let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
        let mut it = s.split_whitespace().map(|x| x.parse::<u64>().ok());
        Some(Sched {
            run_ns: it.next()??,
            wait_ns: it.next()??,
        })
    }
    /// On-CPU share between `self` (earlier) and `later`: run / (run + wait).
    fn share(self, later: Sched) -> f64 {
        let run = later.run_ns.saturating_sub(self.run_ns) as f64;
        let wait = later.wait_ns.saturating_sub(self.wait_ns) as f64;
        if run + wait > 0.0 {
            run / (run + wait)
        } else {
            1.0
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub command: String,
    pub cores: usize,
    pub rows: Vec<Row>,
    pub small_msgs_per_s_target: f64,
    pub small_target_met: bool,
    /// Why no row has an instruction count (no CPU counter here), if none has.
    pub instr_unavailable: Option<String>,
}

type Eng = Engine<MemLink, CpuCopy<HeapMemory>>;

fn clock(t0: Instant) -> u64 {
    t0.elapsed().as_nanos() as u64
}

/// The machine's cores, read once before any thread is pinned (a pinned thread's
/// `available_parallelism` is its own mask: 1).
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Pins the calling thread to `core` when the machine has it: one side per core, as on a
/// node where the engine owns its core. Says so when it cannot.
fn pin(core: usize) {
    if core < cores()
        && let Err(e) = tigon_shm::process::set_affinity(&[core])
    {
        eprintln!("bench engine: cannot pin a thread to core {core}: {e}");
    }
}

/// Sends `count` messages of `size` bytes from one engine to another, `depth` in flight.
pub fn run_case(class: &str, size: usize, count: u64, mtu: usize, depth: usize) -> Row {
    let max_frame = mtu + 14;
    let cfg = Config {
        max_frame,
        ..Config::default()
    };
    let (ma, mb) = (MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]));
    let (mut la, mut lb) = memlink::pair(ma, mb, max_frame, 4096);
    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let cfg_b = cfg.clone();
    let stop_b = stop.clone();
    let receiver = std::thread::spawn(move || {
        pin(1);
        let mut e: Eng =
            Engine::new(cfg_b, mb, max_frame, CpuCopy::new(HeapMemory::default())).expect("config");
        e.open_endpoint(Some(0)).expect("endpoint");
        let bufs: Vec<BufRef> = (0..depth)
            .map(|_| e.copy_engine_mut().mem.insert(vec![0; size]))
            .collect();
        let spec = MatchSpec::mpi(1, ANY_SOURCE, ANY_TAG);
        let mut slot = tigon_engine::fasthash::FastMap::default();
        for b in &bufs {
            slot.insert(e.irecv(0, spec, *b).expect("irecv"), *b);
        }
        let mut got = 0u64;
        let mut first = None;
        let ctr = tigon_shm::perf::InstrCounter::this_thread().ok();
        let i0 = ctr.as_ref().and_then(|c| c.read().ok());
        let s0 = Sched::now();
        while got < count {
            e.poll(&mut lb, clock(t0));
            while let Some(c) = e.pop_completion() {
                assert!(c.result.is_ok(), "receive failed: {:?}", c.result);
                first.get_or_insert_with(Instant::now);
                got += 1;
                let b = slot.remove(&c.req).expect("known receive");
                if got + (depth as u64) <= count + depth as u64 {
                    slot.insert(e.irecv(0, spec, b).expect("irecv"), b);
                }
            }
        }
        let instr = i0.zip(ctr.and_then(|c| c.read().ok())).map(|(a, b)| b - a);
        let on_cpu = s0.zip(Sched::now()).map(|(a, b)| a.share(b));
        // Keep acknowledging until the sender has seen its completions.
        while !stop_b.load(Ordering::Relaxed) {
            e.poll(&mut lb, clock(t0));
        }
        (e.stats.clone(), first, instr, on_cpu)
    });
    pin(0);
    let mut e: Eng =
        Engine::new(cfg, ma, max_frame, CpuCopy::new(HeapMemory::default())).expect("config");
    e.open_endpoint(Some(0)).expect("endpoint");
    let dest = EndpointAddr::new(mb, 0);
    let bufs: Vec<BufRef> = (0..depth)
        .map(|i| e.copy_engine_mut().mem.insert(vec![i as u8; size]))
        .collect();
    let mut free: Vec<BufRef> = bufs.clone();
    let mut slot = tigon_engine::fasthash::FastMap::default();
    let (mut posted, mut done) = (0u64, 0u64);
    let start = Instant::now();
    let mut last_report = Instant::now();
    let ctr = tigon_shm::perf::InstrCounter::this_thread().ok();
    let i0 = ctr.as_ref().and_then(|c| c.read().ok());
    let s0 = Sched::now();
    while done < count {
        while posted < count
            && let Some(b) = free.pop()
        {
            let id = e
                .isend(0, dest, match_bits(1, 0), 0, b, SendMode::Standard)
                .expect("isend");
            slot.insert(id, b);
            posted += 1;
        }
        e.poll(&mut la, clock(t0));
        while let Some(c) = e.pop_completion() {
            assert!(c.result.is_ok(), "send failed: {:?}", c.result);
            free.push(slot.remove(&c.req).expect("known send"));
            done += 1;
        }
        if last_report.elapsed() > Duration::from_millis(200) {
            last_report = Instant::now();
            report::progress(&format!("bench engine: {class} {size} B: {done}/{count}"));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let instr = i0.zip(ctr.and_then(|c| c.read().ok())).map(|(a, b)| b - a);
    let on_cpu = s0.zip(Sched::now()).map(|(a, b)| a.share(b));
    stop.store(true, Ordering::Relaxed);
    let (rstats, _, rinstr, ron_cpu) = receiver.join().expect("receiver thread");
    let frames = e.stats.tx_frames + rstats.tx_frames;
    Row {
        class: class.into(),
        size,
        mtu,
        depth,
        messages: count,
        seconds: secs,
        msgs_per_s: count as f64 / secs,
        frames_per_s: frames as f64 / secs,
        gbit_per_s: (count as f64 * size as f64 * 8.0) / secs / 1e9,
        retransmits: e.stats.retransmits + rstats.retransmits,
        duplicates: e.stats.rx_duplicates + rstats.rx_duplicates,
        instr_per_msg: instr
            .zip(rinstr)
            .map(|(a, b)| (a + b) as f64 / 2.0 / count as f64),
        on_cpu: on_cpu.zip(ron_cpu).map(|(a, b)| a.min(b)),
    }
}

/// Runs the standard cases; `scale` multiplies the message counts (1.0 by default).
pub fn run(mtu: usize, scale: f64) -> Report {
    cores();
    let n = |c: f64| ((c * scale) as u64).max(10);
    let cases = [
        ("small", 8usize, n(2_000_000.0), 256usize),
        ("small", 64, n(2_000_000.0), 256),
        ("medium", 16 * 1024, n(100_000.0), 64),
        // Rendezvous rows keep just enough messages in flight to keep the pipe full; more
        // only multiply the buffers both sides stream through, and the row measures the
        // memory instead of the engine. 1 MiB: two (one pulled while the next one's RTS
        // waits; a message is about one pull budget, so one alone leaves a gap at each end:
        // 93-97 against 102-108 Gbit/s). 4 MiB: one, about three pull budgets long already;
        // a second doubles each end's working set to 2 x (4 MiB sent + 4 MiB received),
        // which leaves this VM's L3 (42-96 against 98-103 Gbit/s two-deep, session 10; 8 x
        // 1 MiB and 4 x 4 MiB ran at 50-90 % of the 2-deep rate), while the 16 KiB rows'
        // buffers stay in L2.
        ("large", 1 << 20, n(2_000.0), 2),
        ("large", 4 << 20, n(500.0), 1),
    ];
    let mut rows = Vec::new();
    for (class, size, count, depth) in cases {
        rows.push(run_case(class, size, count, mtu, depth));
    }
    report::progress_done();
    let small = rows
        .iter()
        .filter(|r| r.class == "small")
        .map(|r| r.msgs_per_s)
        .fold(0.0, f64::max);
    let instr_unavailable = rows.iter().all(|r| r.instr_per_msg.is_none()).then(|| {
        match tigon_shm::perf::InstrCounter::this_thread() {
            Ok(_) => "the counter could not be read".to_string(),
            Err(e) => format!("no CPU instruction counter here (perf_event_open: {e})"),
        }
    });
    Report {
        command: format!("tigon bench engine --mtu {mtu}"),
        cores: cores(),
        rows,
        small_msgs_per_s_target: 10e6,
        small_target_met: small >= 10e6,
        instr_unavailable,
    }
}

/// Retransmits over every row (the link is lossless: each is a false timeout).
pub fn total_retransmits(r: &Report) -> u64 {
    r.rows.iter().map(|x| x.retransmits).sum()
}

/// The slower rendezvous row's Gbit/s over the 16 KiB eager row's.
pub fn rndv_over_eager(r: &Report) -> Option<f64> {
    let eager = r.rows.iter().find(|x| x.size == 16 * 1024)?.gbit_per_s;
    let rndv = r
        .rows
        .iter()
        .filter(|x| x.size >= 1 << 20)
        .map(|x| x.gbit_per_s)
        .fold(f64::INFINITY, f64::min);
    (eager > 0.0 && rndv.is_finite()).then(|| rndv / eager)
}

/// The largest instructions per small message per side, where the CPU counter gave them.
pub fn small_instr(r: &Report) -> Option<f64> {
    r.rows
        .iter()
        .filter(|x| x.class == "small")
        .filter_map(|x| x.instr_per_msg)
        .reduce(f64::max)
}

/// The best small-message rate (msgs/s), what the target is about.
pub fn best_small(r: &Report) -> f64 {
    r.rows
        .iter()
        .filter(|x| x.class == "small")
        .map(|x| x.msgs_per_s)
        .fold(0.0, f64::max)
}

/// The report as a terminal table.
pub fn render(r: &Report) -> String {
    let rows: Vec<Vec<String>> = r
        .rows
        .iter()
        .map(|x| {
            vec![
                x.class.clone(),
                x.size.to_string(),
                x.depth.to_string(),
                x.messages.to_string(),
                report::si(x.msgs_per_s),
                report::si(x.frames_per_s),
                format!("{:.2}", x.gbit_per_s),
                x.retransmits.to_string(),
                x.duplicates.to_string(),
                x.instr_per_msg
                    .map_or_else(|| "n/a".to_string(), |i| format!("{i:.0}")),
                x.on_cpu
                    .map_or_else(|| "n/a".to_string(), |c| format!("{:.0}%", c * 100.0)),
            ]
        })
        .collect();
    let mut s = report::table(
        &[
            "class",
            "bytes",
            "depth",
            "messages",
            "msgs/s",
            "frames/s",
            "Gbit/s",
            "retransmits",
            "duplicates",
            "instr/msg/side",
            "on-cpu",
        ],
        &rows,
    );
    if let Some(why) = &r.instr_unavailable {
        s.push_str(&format!(
            "\n\ninstr/msg/side: {why}; `make bench-instr` counts them with callgrind"
        ));
    }
    if r.rows.iter().any(|x| x.on_cpu.is_some_and(|c| c < 0.9)) {
        s.push_str(
            "\n\non-cpu: the share of a row's time its busier-waiting side spent on its core; \
             below 90%, other processes took the cores and the rates measure the sharing \
             (run again on a quiet machine)",
        );
    }
    let best = best_small(r);
    s.push_str(&format!(
        "\n\ntarget: >= 10 M small messages/s per core: {} ({} msgs/s; {} cores here)\nreproduce: {}",
        if r.small_target_met { "met" } else { "not met" },
        report::si(best),
        r.cores,
        r.command
    ));
    s
}
