//! `tigon bench mpi`: one MPI program (`bench/mpi/tigon_bench_mpi.c`, compiled with `mpicc`
//! at run time) run under tigon, under ob1/tcp and under ob1/vader, side by side.
//!
//! The program prints JSON lines (raw per-iteration timings where a distribution matters);
//! this module turns them into the seeds' quantities — LogP (seed 002 Fig. 3), bandwidth three
//! ways (seed 002 Fig. 9), processor availability (seed 001 Fig. 9–11), double buffering
//! (seed 000 Fig. 7), EMP's loop (seed 003 Table 2, Fig. 6) — with hdrhistogram percentiles,
//! tables, ratios tigon/tcp and the targets. Launching (agents for tigon) is the caller's.

use crate::report::{self, Target};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The benchmark program; the binary carries it so a run needs no source tree.
pub const SOURCE: &str = include_str!("../mpi/tigon_bench_mpi.c");

/// Message sizes of LogP and bandwidth when `--sizes` is not given (the program's own lists).
pub const QUICK_SIZES: [usize; 7] = [0, 64, 1024, 16384, 65536, 1 << 20, 4 << 20];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// pml cm + mtl tigon over two agents.
    Tigon,
    /// pml ob1 + btl tcp,self over loopback.
    Tcp,
    /// pml ob1 + btl vader,self: shared memory on one host, the bound.
    Vader,
}

impl Transport {
    pub const ALL: [Transport; 3] = [Transport::Tigon, Transport::Tcp, Transport::Vader];

    pub fn label(self) -> &'static str {
        match self {
            Transport::Tigon => "tigon",
            Transport::Tcp => "ob1/tcp",
            Transport::Vader => "ob1/vader",
        }
    }

    pub fn parse(s: &str) -> Result<Transport, String> {
        match s.trim() {
            "tigon" => Ok(Transport::Tigon),
            "tcp" | "ob1/tcp" => Ok(Transport::Tcp),
            "vader" | "ob1/vader" | "sm" => Ok(Transport::Vader),
            o => Err(format!("unknown transport {o:?} (use tigon, tcp, vader)")),
        }
    }
}

/// `--only tigon,tcp`: the transports in the fixed order tigon, tcp, vader.
pub fn parse_only(s: &str) -> Result<Vec<Transport>, String> {
    let want = s
        .split(',')
        .filter(|x| !x.trim().is_empty())
        .map(Transport::parse)
        .collect::<Result<Vec<_>, _>>()?;
    if want.is_empty() {
        return Err("--only: name at least one of tigon, tcp, vader".into());
    }
    Ok(Transport::ALL
        .into_iter()
        .filter(|t| want.contains(t))
        .collect())
}

/// `--sizes 0,64,1K,4M`: bytes, with K (KiB) and M (MiB) suffixes; sorted, deduplicated.
pub fn parse_sizes(s: &str) -> Result<Vec<usize>, String> {
    let mut v = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (num, mul) = match part.as_bytes()[part.len() - 1] {
            b'k' | b'K' => (&part[..part.len() - 1], 1usize << 10),
            b'm' | b'M' => (&part[..part.len() - 1], 1 << 20),
            _ => (part, 1),
        };
        let n: usize = num
            .parse()
            .map_err(|_| format!("--sizes: {part:?} is not a size (e.g. 0,64,1K,4M)"))?;
        let b = n
            .checked_mul(mul)
            .filter(|b| *b <= 64 << 20)
            .ok_or(format!("--sizes: {part} is above 64 MiB"))?;
        v.push(b);
    }
    if v.is_empty() {
        return Err("--sizes: no sizes".into());
    }
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

#[derive(Debug, Clone)]
pub struct Opts {
    pub quick: bool,
    pub sizes: Option<Vec<usize>>,
    /// Subset of logp,bw,avail,dbuf,emp (all when None).
    pub tests: Option<String>,
    /// Wall time per measurement (ms); the program's default when None.
    pub budget_ms: Option<u64>,
}

/// The program's arguments for `o`.
pub fn program_args(o: &Opts) -> Vec<String> {
    let mut a = Vec::new();
    if o.quick {
        a.push("--quick".to_string());
    }
    if let Some(s) = &o.sizes {
        a.push("--sizes".into());
        a.push(s.iter().map(usize::to_string).collect::<Vec<_>>().join(","));
    }
    if let Some(t) = &o.tests {
        a.push("--tests".into());
        a.push(t.clone());
    }
    if let Some(b) = o.budget_ms {
        a.push("--budget-ms".into());
        a.push(b.to_string());
    }
    a
}

/// Writes the program's source under `dir` and builds it with `mpicc -O2` when the source
/// changed or the binary is missing; returns the binary.
pub fn compile(dir: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let src = dir.join("tigon_bench_mpi.c");
    let bin = dir.join("tigon_bench_mpi");
    let same = std::fs::read_to_string(&src).is_ok_and(|s| s == SOURCE);
    if same && bin.exists() {
        return Ok(bin);
    }
    std::fs::write(&src, SOURCE).map_err(|e| format!("{}: {e}", src.display()))?;
    let out = Command::new("mpicc")
        .args(["-O2", "-Wall", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .map_err(|e| format!("mpicc: {e} (install libopenmpi-dev: `make setup`)"))?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&bin);
        return Err(format!(
            "mpicc {} failed:\n{}",
            src.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(bin)
}

/// `mpirun` for the ob1 transports: two ranks on this host.
pub fn ob1_command(t: Transport, program: &[String]) -> Command {
    let mut c = Command::new("mpirun");
    c.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "--bind-to",
        "none",
        "-np",
        "2",
        "--mca",
        "pml",
        "ob1",
    ]);
    match t {
        Transport::Vader => c.args(["--mca", "btl", "vader,self"]),
        _ => c.args([
            "--mca",
            "btl",
            "tcp,self",
            "--mca",
            "btl_tcp_if_include",
            "lo",
        ]),
    };
    c.args(program);
    c
}

/// A command line as one shell-like string (for the JSON and "reproduce" lines).
pub fn command_line(c: &Command) -> String {
    std::iter::once(c.get_program())
        .chain(c.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

// ---- the program's output ------------------------------------------------------------------

/// One JSON line of the program.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum Record {
    Hello {
        ns_per_unit: f64,
        #[serde(default)]
        host: String,
    },
    Progress {
        msg: String,
    },
    Rtt {
        size: usize,
        half_rtt_ns: Vec<u64>,
    },
    Gap {
        size: usize,
        n: u64,
        total_ns: f64,
    },
    SendOvh {
        size: usize,
        n: u64,
        d_ns: f64,
        total_ns: f64,
        call_ns: Vec<u64>,
    },
    RecvOvh {
        size: usize,
        n: u64,
        d_ns: f64,
        total_ns: f64,
        call_ns: Vec<u64>,
    },
    Bw {
        kind: String,
        size: usize,
        bytes: f64,
        total_ns: f64,
    },
    Avail {
        size: usize,
        poll: u64,
        quiet_ns: f64,
        comm_ns: f64,
        rounds: u64,
        #[serde(default)]
        truncated: u64,
    },
    Dbuf {
        regime: String,
        bsize: usize,
        n: u64,
        bytes: f64,
        total_ns: f64,
        #[serde(rename = "producer_Bps")]
        producer_bps: f64,
        #[serde(rename = "consumer_Bps")]
        consumer_bps: f64,
    },
    Emp {
        compute_us: f64,
        n: u64,
        batch: u64,
        total_ns: f64,
        compute_ns: f64,
        bytes: f64,
        isend_ns: Vec<u64>,
        irecv_ns: Vec<u64>,
        waitall_ns: Vec<u64>,
    },
    Done {},
    Error {
        msg: String,
    },
}

/// Parses the program's stdout; lines that are not records (e.g. Open MPI's own warnings)
/// are returned separately.
pub fn parse_lines(text: &str) -> (Vec<Record>, Vec<String>) {
    let (mut recs, mut other) = (Vec::new(), Vec::new());
    for l in text.lines() {
        match parse_line(l) {
            Some(r) => recs.push(r),
            None if !l.trim().is_empty() => other.push(l.to_string()),
            None => {}
        }
    }
    (recs, other)
}

fn parse_line(l: &str) -> Option<Record> {
    let l = l.trim();
    if !l.starts_with("{\"t\":") {
        return None;
    }
    serde_json::from_str(l).ok()
}

/// Runs `cmd` (an mpirun of the program), showing its progress on stderr; gives up when the
/// program prints nothing for `stall`. Returns the records, and the error if it failed.
pub fn run_program(
    label: &str,
    mut cmd: Command,
    stall: Duration,
) -> (Vec<Record>, Option<String>, f64) {
    let t0 = Instant::now();
    let mut child = match cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            return (
                Vec::new(),
                Some(format!("mpirun: {e} (install openmpi-bin)")),
                0.0,
            );
        }
    };
    let stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let (mut recs, mut other) = (Vec::new(), Vec::new());
    let mut last = Instant::now();
    let mut what = String::from("starting");
    let mut error = None;
    loop {
        match rx.recv_timeout(Duration::from_millis(250)) {
            Ok(line) => {
                last = Instant::now();
                match parse_line(&line) {
                    Some(Record::Progress { msg }) => what = msg,
                    Some(Record::Error { msg }) => error = Some(msg),
                    Some(r) => recs.push(r),
                    None if !line.trim().is_empty() => other.push(line),
                    None => {}
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if last.elapsed() > stall {
                    let _ = child.kill();
                    error = Some(format!(
                        "no progress for {} s during {what}: killed",
                        stall.as_secs()
                    ));
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        report::progress(&format!(
            "bench mpi: {label} [{:.0} s] {what}",
            t0.elapsed().as_secs_f64()
        ));
    }
    let status = child.wait();
    let stderr = err_thread.join().unwrap_or_default();
    let done = recs.iter().any(|r| matches!(r, Record::Done {}));
    if error.is_none() && !done {
        let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        error = Some(format!(
            "mpirun ended ({}) before the program finished; last output:\n{}{}",
            status.map_or("?".into(), |s| s.to_string()),
            other
                .iter()
                .rev()
                .take(5)
                .rev()
                .map(|l| format!("{l}\n"))
                .collect::<String>(),
            tail.join("\n")
        ));
    }
    report::progress_done();
    (recs, error, t0.elapsed().as_secs_f64())
}

// ---- results -------------------------------------------------------------------------------

/// A distribution of per-iteration times in µs (from an hdrhistogram of ns samples).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Pct {
    pub count: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub mean_us: f64,
    pub max_us: f64,
}

pub fn pct(samples_ns: &[u64]) -> Pct {
    let Ok(mut h) = Histogram::<u64>::new(3) else {
        return Pct::default();
    };
    for &s in samples_ns {
        let _ = h.record(s.max(1));
    }
    if h.is_empty() {
        return Pct::default();
    }
    let us = |ns: u64| ns as f64 / 1e3;
    Pct {
        count: h.len(),
        p50_us: us(h.value_at_quantile(0.5)),
        p99_us: us(h.value_at_quantile(0.99)),
        p999_us: us(h.value_at_quantile(0.999)),
        mean_us: h.mean() / 1e3,
        max_us: us(h.max()),
    }
}

/// LogP for one message size (seed 002, Fig. 3).
#[derive(Debug, Clone, Serialize)]
pub struct LogpRow {
    pub size: usize,
    /// One-way time in a ping-pong (code fragment a).
    pub rtt_half: Pct,
    /// Gap: time per message of a stream with nothing between sends, until delivered.
    pub g_us: f64,
    /// Time in MPI_Isend + MPI_Wait per message, with Spin(D) > Idle between them.
    pub o_s: Pct,
    /// Time in MPI_Irecv + MPI_Wait per message, the message having arrived during Spin(D).
    pub o_r: Pct,
    /// The seed's o_s = mean over D of g(D) - D (sender side), and o_r likewise (receiver).
    pub o_s_seed_us: Option<f64>,
    pub o_r_seed_us: Option<f64>,
    /// L = RTT/2 - o_s - o_r (p50s).
    pub l_us: f64,
}

/// Bandwidth three ways (seed 002, Fig. 9), MB/s (10^6 bytes/s).
#[derive(Debug, Clone, Serialize)]
pub struct BwRow {
    pub size: usize,
    pub uni_mb_s: Option<f64>,
    /// size / mean(RTT/2), from the RTT/2 loop.
    pub pingpong_mb_s: Option<f64>,
    /// Both directions together.
    pub bidir_mb_s: Option<f64>,
}

/// Processor availability at one polling factor (seed 001, Fig. 9–11).
#[derive(Debug, Clone, Serialize)]
pub struct AvailRow {
    pub size: usize,
    /// Work units between MPI_Test calls.
    pub poll: u64,
    pub poll_us: f64,
    /// Time of the work with no communication / time of the same work while ping-ponging.
    pub availability: f64,
    /// Both directions, while computing.
    pub bandwidth_mb_s: f64,
    pub effective_mb_s: f64,
    pub rounds: u64,
    /// The comm run hit its wall-time limit; both runs did the work it had done by then.
    pub truncated: bool,
}

/// Double buffering at one buffer size (seed 000, Fig. 7).
#[derive(Debug, Clone, Serialize)]
pub struct DbufRow {
    /// "producer" (the producer is the slow side) or "consumer".
    pub regime: String,
    pub bsize: usize,
    pub rounds: u64,
    pub rate_mb_s: f64,
    /// Fill and sum rates measured alone on their ranks, before communicating.
    pub producer_mb_s: f64,
    pub consumer_mb_s: f64,
    /// rate / min(producer, consumer).
    pub fraction: f64,
}

/// EMP's loop at one amount of compute (seed 003, Table 2, Fig. 6).
#[derive(Debug, Clone, Serialize)]
pub struct EmpRow {
    pub compute_us: f64,
    pub iterations: u64,
    /// Share of the loop's time spent in the compute step.
    pub cpu_fraction: f64,
    /// Payload sent plus received, Mbit/s.
    pub throughput_mbit_s: f64,
    pub isend: Pct,
    pub irecv: Pct,
    pub waitall: Pct,
    /// p50 Waitall / messages received per batch.
    pub waitall_per_msg_us: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct TransportResult {
    pub transport: Transport,
    pub label: String,
    pub mpirun: String,
    pub seconds: f64,
    pub error: Option<String>,
    pub ns_per_work_unit: Option<f64>,
    pub host: String,
    pub logp: Vec<LogpRow>,
    pub bandwidth: Vec<BwRow>,
    pub availability: Vec<AvailRow>,
    pub double_buffering: Vec<DbufRow>,
    pub emp: Vec<EmpRow>,
    /// The agents' counters after the run (tigon only).
    pub agent_stats: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MpiReport {
    pub quick: bool,
    pub transports: Vec<TransportResult>,
    pub plots: Vec<PathBuf>,
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Turns one transport's records into the seeds' quantities.
pub fn summarize(t: Transport, mpirun: String, recs: &[Record]) -> TransportResult {
    let mut r = TransportResult {
        transport: t,
        label: t.label().into(),
        mpirun,
        seconds: 0.0,
        error: None,
        ns_per_work_unit: None,
        host: String::new(),
        logp: Vec::new(),
        bandwidth: Vec::new(),
        availability: Vec::new(),
        double_buffering: Vec::new(),
        emp: Vec::new(),
        agent_stats: None,
    };
    let mut sizes: Vec<usize> = Vec::new();
    for x in recs {
        match x {
            Record::Hello { ns_per_unit, host } => {
                r.ns_per_work_unit = Some(*ns_per_unit);
                r.host = host.clone();
            }
            Record::Rtt { size, .. } | Record::Bw { size, .. } if !sizes.contains(size) => {
                sizes.push(*size)
            }
            _ => {}
        }
    }
    for &size in &sizes {
        let rtt = recs.iter().find_map(|x| match x {
            Record::Rtt {
                size: s,
                half_rtt_ns,
            } if *s == size => Some(half_rtt_ns.as_slice()),
            _ => None,
        });
        if let Some(rtt) = rtt {
            let g = recs.iter().find_map(|x| match x {
                Record::Gap {
                    size: s,
                    n,
                    total_ns,
                } if *s == size && *n > 0 => Some(total_ns / *n as f64 / 1e3),
                _ => None,
            });
            let (mut os, mut or, mut os_seed, mut or_seed) = (vec![], vec![], vec![], vec![]);
            for x in recs {
                match x {
                    Record::SendOvh {
                        size: s,
                        n,
                        d_ns,
                        total_ns,
                        call_ns,
                    } if *s == size && *n > 0 => {
                        os.extend_from_slice(call_ns);
                        os_seed.push((total_ns / *n as f64 - d_ns) / 1e3);
                    }
                    Record::RecvOvh {
                        size: s,
                        n,
                        d_ns,
                        total_ns,
                        call_ns,
                    } if *s == size && *n > 0 => {
                        or.extend_from_slice(call_ns);
                        or_seed.push((total_ns / *n as f64 - d_ns) / 1e3);
                    }
                    _ => {}
                }
            }
            let (rtt_half, o_s, o_r) = (pct(rtt), pct(&os), pct(&or));
            r.logp.push(LogpRow {
                size,
                rtt_half,
                g_us: g.unwrap_or(f64::NAN),
                o_s,
                o_r,
                o_s_seed_us: mean(&os_seed),
                o_r_seed_us: mean(&or_seed),
                l_us: rtt_half.p50_us - o_s.p50_us - o_r.p50_us,
            });
        }
        let bw = |kind: &str| {
            recs.iter().find_map(|x| match x {
                Record::Bw {
                    kind: k,
                    size: s,
                    bytes,
                    total_ns,
                } if k == kind && *s == size && *total_ns > 0.0 => Some(bytes / total_ns * 1e3),
                _ => None,
            })
        };
        let pingpong = rtt.and_then(|v| {
            let m = v.iter().sum::<u64>() as f64 / v.len().max(1) as f64;
            (m > 0.0 && !v.is_empty()).then(|| size as f64 / m * 1e3)
        });
        if bw("uni").is_some() || bw("bidir").is_some() || pingpong.is_some() {
            r.bandwidth.push(BwRow {
                size,
                uni_mb_s: bw("uni"),
                pingpong_mb_s: pingpong,
                bidir_mb_s: bw("bidir"),
            });
        }
    }
    let unit = r.ns_per_work_unit.unwrap_or(f64::NAN);
    for x in recs {
        match x {
            Record::Avail {
                size,
                poll,
                quiet_ns,
                comm_ns,
                rounds,
                truncated,
            } => {
                let availability = quiet_ns / comm_ns;
                let bw = 2.0 * *size as f64 * *rounds as f64 / comm_ns * 1e3;
                r.availability.push(AvailRow {
                    size: *size,
                    poll: *poll,
                    poll_us: *poll as f64 * unit / 1e3,
                    availability,
                    bandwidth_mb_s: bw,
                    effective_mb_s: availability.min(1.0) * bw,
                    rounds: *rounds,
                    truncated: *truncated != 0,
                });
            }
            Record::Dbuf {
                regime,
                bsize,
                n,
                bytes,
                total_ns,
                producer_bps,
                consumer_bps,
            } => {
                let rate = bytes / total_ns * 1e3;
                r.double_buffering.push(DbufRow {
                    regime: regime.clone(),
                    bsize: *bsize,
                    rounds: *n,
                    rate_mb_s: rate,
                    producer_mb_s: producer_bps / 1e6,
                    consumer_mb_s: consumer_bps / 1e6,
                    fraction: rate / (producer_bps.min(*consumer_bps) / 1e6),
                });
            }
            Record::Emp {
                compute_us,
                n,
                batch,
                total_ns,
                compute_ns,
                bytes,
                isend_ns,
                irecv_ns,
                waitall_ns,
            } => {
                let waitall = pct(waitall_ns);
                r.emp.push(EmpRow {
                    compute_us: *compute_us,
                    iterations: *n,
                    cpu_fraction: compute_ns / total_ns,
                    throughput_mbit_s: bytes * 8.0 / total_ns * 1e3,
                    isend: pct(isend_ns),
                    irecv: pct(irecv_ns),
                    waitall,
                    waitall_per_msg_us: waitall.p50_us / (*batch).max(1) as f64,
                });
            }
            _ => {}
        }
    }
    r
}

// ---- targets -------------------------------------------------------------------------------

fn find(rs: &[TransportResult], t: Transport) -> Option<&TransportResult> {
    rs.iter().find(|r| r.transport == t)
}

/// The smallest size both runs measured (at most 1 KiB): "small-message".
fn small_size(a: &TransportResult, b: &TransportResult) -> Option<usize> {
    a.logp
        .iter()
        .map(|r| r.size)
        .filter(|s| *s <= 1024 && b.logp.iter().any(|x| x.size == *s))
        .min()
}

/// The availability operating point: the polling factor with the best effective bandwidth.
pub fn avail_at(r: &TransportResult, size: usize) -> Option<&AvailRow> {
    r.availability
        .iter()
        .filter(|a| a.size == size)
        .max_by(|a, b| a.effective_mb_s.total_cmp(&b.effective_mb_s))
}

/// Peak double-buffering rate as a fraction of min(producer, consumer), worst regime.
pub fn dbuf_peak(r: &TransportResult) -> Option<(f64, String)> {
    let mut worst: Option<(f64, String)> = None;
    for regime in ["producer", "consumer"] {
        let best = r
            .double_buffering
            .iter()
            .filter(|d| d.regime == regime)
            .max_by(|a, b| a.fraction.total_cmp(&b.fraction))?;
        let s = format!(
            "{regime}-bound: {:.0} MB/s of {:.0} at {} B",
            best.rate_mb_s,
            best.producer_mb_s.min(best.consumer_mb_s),
            best.bsize
        );
        if worst.as_ref().is_none_or(|w| best.fraction < w.0) {
            worst = Some((best.fraction, s));
        }
    }
    worst
}

pub fn targets(rs: &[TransportResult]) -> Vec<Target> {
    let (tg, tcp) = (find(rs, Transport::Tigon), find(rs, Transport::Tcp));
    let both = tg.zip(tcp);
    let mut v = Vec::new();

    let small = both.and_then(|(a, b)| {
        let s = small_size(a, b)?;
        let x = a.logp.iter().find(|r| r.size == s)?;
        let y = b.logp.iter().find(|r| r.size == s)?;
        Some((s, x, y))
    });
    v.push(match small {
        Some((s, x, y)) => Target::check(
            "small-message latency <= 0.75x ob1/tcp",
            Some(x.rtt_half.p50_us / y.rtt_half.p50_us),
            0.75,
            true,
            format!(
                "RTT/2 p50 at {s} B: {:.1} us vs {:.1} us ({:.2}x)",
                x.rtt_half.p50_us,
                y.rtt_half.p50_us,
                x.rtt_half.p50_us / y.rtt_half.p50_us
            ),
        ),
        None => Target::check(
            "small-message latency <= 0.75x ob1/tcp",
            None,
            0.75,
            true,
            "needs tigon and tcp runs with a size <= 1 KiB".into(),
        ),
    });

    let big = both.and_then(|(a, b)| {
        let size = a
            .bandwidth
            .iter()
            .filter(|r| r.uni_mb_s.is_some() && b.bandwidth.iter().any(|y| y.size == r.size))
            .map(|r| r.size)
            .max()?;
        let x = a.bandwidth.iter().find(|r| r.size == size)?.uni_mb_s?;
        let y = b.bandwidth.iter().find(|r| r.size == size)?.uni_mb_s?;
        Some((size, x, y))
    });
    v.push(match big {
        Some((size, x, y)) => Target::check(
            "4 MiB bandwidth >= 1.2x ob1/tcp",
            Some(x / y),
            1.2,
            false,
            format!(
                "unidirectional at {}: {x:.0} MB/s vs {y:.0} MB/s ({:.2}x)",
                human_size(size),
                x / y
            ),
        ),
        None => Target::check(
            "4 MiB bandwidth >= 1.2x ob1/tcp",
            None,
            1.2,
            false,
            "needs tigon and tcp bandwidth runs".into(),
        ),
    });

    v.push(match small {
        Some((s, x, y)) => {
            let (a, b) = (x.o_s.p50_us + x.o_r.p50_us, y.o_s.p50_us + y.o_r.p50_us);
            Target::check(
                "o_s + o_r <= 0.2x ob1/tcp",
                Some(a / b),
                0.2,
                true,
                format!("p50 at {s} B: {a:.2} us vs {b:.2} us ({:.2}x)", a / b),
            )
        }
        None => Target::check(
            "o_s + o_r <= 0.2x ob1/tcp",
            None,
            0.2,
            true,
            "needs tigon and tcp LogP runs".into(),
        ),
    });

    let av = tg.and_then(|a| avail_at(a, 1 << 20));
    v.push(Target::check(
        "availability >= 90% at 1 MiB",
        av.map(|a| a.availability * 100.0),
        90.0,
        false,
        av.map_or("needs a tigon availability run".into(), |a| {
            format!(
                "{:.0}% at polling factor {} ({:.0} us), {:.0} MB/s (the best effective bandwidth)",
                a.availability * 100.0,
                a.poll,
                a.poll_us,
                a.bandwidth_mb_s
            )
        }),
    ));

    let db = tg.and_then(dbuf_peak);
    v.push(Target::check(
        "double buffering >= 95% of min(producer, consumer)",
        db.as_ref().map(|d| d.0 * 100.0),
        95.0,
        false,
        db.map_or("needs a tigon double-buffering run".into(), |d| {
            format!("{:.0}%, worst regime {}", d.0 * 100.0, d.1)
        }),
    ));

    let emp = tg.and_then(|a| {
        a.emp
            .iter()
            .max_by(|x, y| x.compute_us.total_cmp(&y.compute_us))
    });
    v.push(Target::check(
        "Waitall <= 5 us per 10 kB message",
        emp.map(|e| e.waitall_per_msg_us),
        5.0,
        true,
        emp.map_or("needs a tigon EMP run".into(), |e| {
            format!(
                "{:.2} us (Waitall p50 {:.1} us / 5 messages, compute {:.0} us per batch)",
                e.waitall_per_msg_us, e.waitall.p50_us, e.compute_us
            )
        }),
    ));
    v
}

// ---- rendering -----------------------------------------------------------------------------

pub fn human_size(b: usize) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} B")
    }
}

fn f(v: f64, prec: usize) -> String {
    if v.is_finite() {
        format!("{v:.prec$}")
    } else {
        "-".into()
    }
}

fn fo(v: Option<f64>, prec: usize) -> String {
    v.map_or("-".into(), |v| f(v, prec))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b.abs() > 0.0 && a.is_finite() && b.is_finite() => {
            format!("{:.2}", a / b)
        }
        _ => "-".into(),
    }
}

pub fn render(rep: &MpiReport, targets: &[Target]) -> String {
    let mut s = String::new();
    let ts = &rep.transports;
    let tg = find(ts, Transport::Tigon);
    let tcp = find(ts, Transport::Tcp);
    for r in ts {
        if let Some(e) = &r.error {
            s.push_str(&format!("{}: FAILED: {e}\n\n", r.label));
        }
    }

    // LogP, one table per transport.
    for r in ts.iter().filter(|r| !r.logp.is_empty()) {
        s.push_str(&format!(
            "LogP over {} (seed 002 Fig. 3; us; o_s, o_r: time in the calls with Spin(D) > Idle \
             between them; (seed) = g(D) - D)\n",
            r.label
        ));
        let rows: Vec<Vec<String>> = r
            .logp
            .iter()
            .map(|x| {
                vec![
                    human_size(x.size),
                    f(x.rtt_half.p50_us, 1),
                    f(x.rtt_half.p99_us, 1),
                    f(x.rtt_half.p999_us, 1),
                    f(x.o_s.p50_us, 2),
                    f(x.o_s.p99_us, 1),
                    fo(x.o_s_seed_us, 2),
                    f(x.o_r.p50_us, 2),
                    f(x.o_r.p99_us, 1),
                    fo(x.o_r_seed_us, 2),
                    f(x.g_us, 2),
                    f(x.l_us, 1),
                ]
            })
            .collect();
        s.push_str(&report::table(
            &[
                "size",
                "RTT/2 p50",
                "p99",
                "p99.9",
                "o_s p50",
                "p99",
                "(seed)",
                "o_r p50",
                "p99",
                "(seed)",
                "g",
                "L",
            ],
            &rows,
        ));
        s.push_str("\n\n");
    }

    // Ratios tigon / tcp.
    if let (Some(a), Some(b)) = (tg, tcp)
        && !a.logp.is_empty()
        && !b.logp.is_empty()
    {
        s.push_str("tigon / ob1/tcp (p50s; < 1 is better for times, > 1 for bandwidth)\n");
        let rows: Vec<Vec<String>> = a
            .logp
            .iter()
            .filter_map(|x| {
                let y = b.logp.iter().find(|y| y.size == x.size)?;
                let bx = a.bandwidth.iter().find(|r| r.size == x.size);
                let by = b.bandwidth.iter().find(|r| r.size == x.size);
                Some(vec![
                    human_size(x.size),
                    ratio(Some(x.rtt_half.p50_us), Some(y.rtt_half.p50_us)),
                    ratio(Some(x.o_s.p50_us), Some(y.o_s.p50_us)),
                    ratio(Some(x.o_r.p50_us), Some(y.o_r.p50_us)),
                    ratio(Some(x.g_us), Some(y.g_us)),
                    ratio(bx.and_then(|r| r.uni_mb_s), by.and_then(|r| r.uni_mb_s)),
                    ratio(
                        bx.and_then(|r| r.pingpong_mb_s),
                        by.and_then(|r| r.pingpong_mb_s),
                    ),
                    ratio(bx.and_then(|r| r.bidir_mb_s), by.and_then(|r| r.bidir_mb_s)),
                ])
            })
            .collect();
        s.push_str(&report::table(
            &[
                "size",
                "RTT/2",
                "o_s",
                "o_r",
                "g",
                "bw uni",
                "bw ping-pong",
                "bw bidir",
            ],
            &rows,
        ));
        s.push_str("\n\n");
    }

    // Bandwidth.
    let with_bw: Vec<&TransportResult> = ts.iter().filter(|r| !r.bandwidth.is_empty()).collect();
    if !with_bw.is_empty() {
        s.push_str("bandwidth, MB/s (seed 002 Fig. 9: unidirectional, ping-pong, simultaneous bidirectional = both directions)\n");
        let mut sizes: Vec<usize> = with_bw
            .iter()
            .flat_map(|r| r.bandwidth.iter().map(|b| b.size))
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        let mut head = vec!["size".to_string()];
        for kind in ["uni", "pp", "bidir"] {
            for r in &with_bw {
                head.push(format!("{kind} {}", r.transport.label_short()));
            }
        }
        let rows: Vec<Vec<String>> = sizes
            .iter()
            .map(|&size| {
                let mut row = vec![human_size(size)];
                for k in 0..3 {
                    for r in &with_bw {
                        let b = r.bandwidth.iter().find(|b| b.size == size);
                        let v = b.and_then(|b| [b.uni_mb_s, b.pingpong_mb_s, b.bidir_mb_s][k]);
                        row.push(fo(v, 0));
                    }
                }
                row
            })
            .collect();
        let head: Vec<&str> = head.iter().map(String::as_str).collect();
        s.push_str(&report::table(&head, &rows));
        s.push_str("\n\n");
    }

    // Availability.
    let with_av: Vec<&TransportResult> = ts.iter().filter(|r| !r.availability.is_empty()).collect();
    if !with_av.is_empty() {
        s.push_str("processor availability (seed 001 Fig. 9-11): polling factor = work units between MPI_Test; avail %, bandwidth MB/s, effective MB/s\n");
        let mut head = vec!["size".to_string(), "poll".into(), "poll us".into()];
        for r in &with_av {
            let l = r.transport.label_short();
            head.extend([format!("avail {l}"), format!("bw {l}"), format!("eff {l}")]);
        }
        let keys: Vec<(usize, u64, f64)> = with_av[0]
            .availability
            .iter()
            .map(|a| (a.size, a.poll, a.poll_us))
            .collect();
        let rows: Vec<Vec<String>> = keys
            .iter()
            .map(|&(size, poll, poll_us)| {
                let mut row = vec![human_size(size), poll.to_string(), f(poll_us, 1)];
                for r in &with_av {
                    match r
                        .availability
                        .iter()
                        .find(|a| a.size == size && a.poll == poll)
                    {
                        Some(a) => row.extend([
                            format!(
                                "{}{}",
                                f(a.availability * 100.0, 0),
                                if a.truncated { "*" } else { "" }
                            ),
                            f(a.bandwidth_mb_s, 0),
                            f(a.effective_mb_s, 0),
                        ]),
                        None => row.extend(["-".into(), "-".into(), "-".into()]),
                    }
                }
                row
            })
            .collect();
        let head: Vec<&str> = head.iter().map(String::as_str).collect();
        s.push_str(&report::table(&head, &rows));
        if ts.iter().flat_map(|r| &r.availability).any(|a| a.truncated) {
            s.push_str(
                "\n* the run hit its time limit: less work than the others, same in both runs",
            );
        }
        s.push_str("\n\n");
    }

    // Double buffering.
    let with_db: Vec<&TransportResult> = ts
        .iter()
        .filter(|r| !r.double_buffering.is_empty())
        .collect();
    if !with_db.is_empty() {
        s.push_str("double buffering (seed 000 Fig. 7): overall MB/s and % of min(producer, consumer) measured alone\n");
        let mut head = vec!["bound".to_string(), "buffer".into()];
        for r in &with_db {
            let l = r.transport.label_short();
            head.extend([format!("MB/s {l}"), format!("% {l}"), format!("min {l}")]);
        }
        let keys: Vec<(String, usize)> = with_db[0]
            .double_buffering
            .iter()
            .map(|d| (d.regime.clone(), d.bsize))
            .collect();
        let rows: Vec<Vec<String>> = keys
            .iter()
            .map(|(regime, bsize)| {
                let mut row = vec![regime.clone(), human_size(*bsize)];
                for r in &with_db {
                    match r
                        .double_buffering
                        .iter()
                        .find(|d| &d.regime == regime && d.bsize == *bsize)
                    {
                        Some(d) => row.extend([
                            f(d.rate_mb_s, 0),
                            f(d.fraction * 100.0, 0),
                            f(d.producer_mb_s.min(d.consumer_mb_s), 0),
                        ]),
                        None => row.extend(["-".into(), "-".into(), "-".into()]),
                    }
                }
                row
            })
            .collect();
        let head: Vec<&str> = head.iter().map(String::as_str).collect();
        s.push_str(&report::table(&head, &rows));
        s.push_str("\n\n");
    }

    // EMP.
    let with_emp: Vec<&TransportResult> = ts.iter().filter(|r| !r.emp.is_empty()).collect();
    if !with_emp.is_empty() {
        s.push_str("EMP's loop (seed 003 Fig. 6): 5 Irecv + 5 Isend of 10 kB, compute, Waitall; CPU fraction computing, Mbit/s sent+received\n");
        let mut head = vec!["compute us".to_string()];
        for r in &with_emp {
            let l = r.transport.label_short();
            head.extend([format!("cpu% {l}"), format!("Mb/s {l}")]);
        }
        let keys: Vec<f64> = with_emp[0].emp.iter().map(|e| e.compute_us).collect();
        let rows: Vec<Vec<String>> =
            keys.iter()
                .map(|&c| {
                    let mut row = vec![f(c, 0)];
                    for r in &with_emp {
                        match r.emp.iter().find(|e| e.compute_us == c) {
                            Some(e) => row
                                .extend([f(e.cpu_fraction * 100.0, 0), f(e.throughput_mbit_s, 0)]),
                            None => row.extend(["-".into(), "-".into()]),
                        }
                    }
                    row
                })
                .collect();
        let head: Vec<&str> = head.iter().map(String::as_str).collect();
        s.push_str(&report::table(&head, &rows));
        s.push_str("\n\n");
        s.push_str("EMP Table 2: us per call (p50 / p99), with no compute and with the most compute (asymptotic)\n");
        let mut rows = Vec::new();
        for r in &with_emp {
            let lo = r
                .emp
                .iter()
                .min_by(|a, b| a.compute_us.total_cmp(&b.compute_us));
            let hi = r
                .emp
                .iter()
                .max_by(|a, b| a.compute_us.total_cmp(&b.compute_us));
            for e in [lo, hi].into_iter().flatten() {
                rows.push(vec![
                    r.label.clone(),
                    f(e.compute_us, 0),
                    format!("{:.2} / {:.1}", e.isend.p50_us, e.isend.p99_us),
                    format!("{:.2} / {:.1}", e.irecv.p50_us, e.irecv.p99_us),
                    format!("{:.1} / {:.1}", e.waitall.p50_us, e.waitall.p99_us),
                    f(e.waitall_per_msg_us, 2),
                ]);
            }
        }
        s.push_str(&report::table(
            &[
                "transport",
                "compute us",
                "MPI_Isend",
                "MPI_Irecv",
                "MPI_Waitall",
                "Waitall/msg",
            ],
            &rows,
        ));
        s.push_str("\n\n");
    }

    for r in ts {
        if let Some(serde_json::Value::Array(st)) = &r.agent_stats {
            for (i, a) in st.iter().enumerate() {
                s.push_str(&format!(
                    "{} agent {i}: {} frames out, {} in, {} retransmits, {} duplicates dropped, longest engine-loop gap {} ms\n",
                    r.label,
                    a["frames"]["tx"],
                    a["frames"]["rx"],
                    a["retransmits"],
                    a["drops"]["duplicates"],
                    a["engine_loop"]["max_gap_us"].as_u64().map_or("?".into(), |u| (u / 1000).to_string()),
                ));
            }
            s.push('\n');
        }
    }
    s.push_str("targets (tigon, this machine, this run):\n");
    s.push_str(&report::render_targets(targets));
    s.push('\n');
    for r in ts {
        s.push_str(&format!("{}: {:.0} s: {}\n", r.label, r.seconds, r.mpirun));
    }
    s
}

impl Transport {
    fn label_short(self) -> &'static str {
        match self {
            Transport::Tigon => "tigon",
            Transport::Tcp => "tcp",
            Transport::Vader => "vader",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_transports_parse() {
        assert_eq!(
            parse_sizes("4M,0,64,1K,64").unwrap(),
            vec![0, 64, 1024, 4 << 20]
        );
        assert!(parse_sizes("12x").is_err());
        assert!(parse_sizes("128M").is_err());
        assert_eq!(
            parse_only("vader,tigon").unwrap(),
            vec![Transport::Tigon, Transport::Vader]
        );
        assert!(parse_only("ib").is_err());
    }

    #[test]
    fn logp_arithmetic_from_records() {
        let text = r#"{"t":"hello","np":2,"quick":1,"budget_ns":1.0,"ns_per_unit":2.0,"host":"h"}
{"t":"progress","msg":"LogP 64 B"}
{"t":"rtt","size":64,"n":4,"total_ns":80000.0,"half_rtt_ns":[10000,10000,10000,10000]}
{"t":"gap","size":64,"n":10,"total_ns":30000.0}
{"t":"send_ovh","size":64,"n":4,"d_ns":5000.0,"total_ns":28000.0,"call_ns":[2000,2000,2000,2000]}
{"t":"recv_ovh","size":64,"n":4,"d_ns":5000.0,"total_ns":32000.0,"call_ns":[3000,3000,3000,3000]}
{"t":"bw","kind":"uni","size":64,"n":10,"bytes":640.0,"total_ns":1000.0}
{"t":"avail","size":1048576,"poll":1000,"work_units":1,"quiet_ns":90.0,"comm_ns":100.0,"rounds":0}
{"t":"done"}
noise from mpirun"#;
        let (recs, other) = parse_lines(text);
        assert_eq!(other, vec!["noise from mpirun".to_string()]);
        let r = summarize(Transport::Tcp, String::new(), &recs);
        let l = &r.logp[0];
        assert_eq!(l.size, 64);
        assert!((l.g_us - 3.0).abs() < 1e-9);
        // o_s (seed) = g(D) - D = 28000/4 - 5000 ns; o_r = 32000/4 - 5000 ns.
        assert!((l.o_s_seed_us.unwrap() - 2.0).abs() < 1e-9);
        assert!((l.o_r_seed_us.unwrap() - 3.0).abs() < 1e-9);
        // L = RTT/2 - o_s - o_r, within hdrhistogram's 3 significant digits.
        assert!((l.l_us - 5.0).abs() < 0.05, "{}", l.l_us);
        let b = &r.bandwidth[0];
        assert!((b.uni_mb_s.unwrap() - 640.0).abs() < 1e-9);
        assert!((b.pingpong_mb_s.unwrap() - 6.4).abs() < 1e-9);
        assert!((r.availability[0].availability - 0.9).abs() < 1e-9);
        assert!((r.availability[0].poll_us - 2.0).abs() < 1e-9);
    }

    #[test]
    fn targets_compare_tigon_with_tcp() {
        let mk = |t, half: u64, bw: f64| TransportResult {
            logp: vec![LogpRow {
                size: 0,
                rtt_half: pct(&[half]),
                g_us: 1.0,
                o_s: pct(&[1000]),
                o_r: pct(&[1000]),
                o_s_seed_us: None,
                o_r_seed_us: None,
                l_us: 0.0,
            }],
            bandwidth: vec![BwRow {
                size: 4 << 20,
                uni_mb_s: Some(bw),
                pingpong_mb_s: None,
                bidir_mb_s: None,
            }],
            ..summarize(t, String::new(), &[])
        };
        let ts = targets(&[
            mk(Transport::Tigon, 5000, 1300.0),
            mk(Transport::Tcp, 10000, 1000.0),
        ]);
        assert_eq!(ts[0].met, Some(true)); // 0.5x latency
        assert_eq!(ts[1].met, Some(true)); // 1.3x bandwidth
        assert_eq!(ts[2].met, Some(false)); // o_s + o_r equal
        assert_eq!(ts[3].met, None); // no availability run
    }
}
