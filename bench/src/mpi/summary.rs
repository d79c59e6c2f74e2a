//! One transport's records turned into the seeds' quantities.

use super::options::Transport;
use super::record::Record;
use hdrhistogram::Histogram;
use serde::Serialize;
use std::path::PathBuf;

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
    /// Both ranks could run only on one CPU, the same: their work takes turns on it, so the
    /// best rate is 1 / (1/producer + 1/consumer), not min(producer, consumer).
    pub one_cpu: bool,
    /// The best rate this placement allows: min(producer, consumer), or with one CPU for
    /// both 1 / (1/producer + 1/consumer); MB/s.
    pub bound_mb_s: f64,
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
    /// CPU copies per payload byte delivered, at a few message sizes (tigon only).
    pub copies: Vec<CopyRow>,
}

/// CPU copies per payload byte of messages of one size, from the agents' counters.
#[derive(Debug, Clone, Serialize)]
pub struct CopyRow {
    pub size: usize,
    pub engine: f64,
    pub ranks: f64,
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
        copies: Vec::new(),
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
                one_cpu,
            } => {
                let rate = bytes / total_ns * 1e3;
                let one_cpu = *one_cpu != 0;
                let bound = if one_cpu {
                    1.0 / (1.0 / producer_bps + 1.0 / consumer_bps)
                } else {
                    producer_bps.min(*consumer_bps)
                };
                r.double_buffering.push(DbufRow {
                    regime: regime.clone(),
                    bsize: *bsize,
                    rounds: *n,
                    rate_mb_s: rate,
                    producer_mb_s: producer_bps / 1e6,
                    consumer_mb_s: consumer_bps / 1e6,
                    fraction: rate / (producer_bps.min(*consumer_bps) / 1e6),
                    one_cpu,
                    bound_mb_s: bound / 1e6,
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

/// The result of transport `t`, if it ran.
pub fn find(rs: &[TransportResult], t: Transport) -> Option<&TransportResult> {
    rs.iter().find(|r| r.transport == t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpi::record::parse_lines;

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

    /// Two ranks pinned to one CPU take turns: producer 200 MB/s and consumer 600 MB/s can
    /// reach 150 MB/s together, 75% of min(p, c); on two CPUs the bound is min(p, c).
    #[test]
    fn double_buffering_bound_follows_the_ranks_cpus() {
        let text = r#"{"t":"dbuf","regime":"producer","bsize":65536,"n":10,"bytes":1.0e6,"total_ns":1.0e7,"producer_Bps":2.0e8,"consumer_Bps":6.0e8,"one_cpu":1}
{"t":"dbuf","regime":"producer","bsize":65536,"n":10,"bytes":1.0e6,"total_ns":1.0e7,"producer_Bps":2.0e8,"consumer_Bps":6.0e8,"one_cpu":0}
{"t":"dbuf","regime":"producer","bsize":65536,"n":10,"bytes":1.0e6,"total_ns":1.0e7,"producer_Bps":2.0e8,"consumer_Bps":6.0e8}"#;
        let (recs, _) = parse_lines(text);
        let r = summarize(Transport::Tigon, String::new(), &recs);
        let d = &r.double_buffering;
        assert_eq!(d.len(), 3);
        assert!(d[0].one_cpu && !d[1].one_cpu && !d[2].one_cpu);
        assert!(
            (d[0].bound_mb_s - 150.0).abs() < 1e-9,
            "{}",
            d[0].bound_mb_s
        );
        assert!((d[1].bound_mb_s - 200.0).abs() < 1e-9);
        // The fraction stays against min(p, c), as the target is set.
        assert!((d[0].rate_mb_s - 100.0).abs() < 1e-9);
        assert!((d[0].fraction - 0.5).abs() < 1e-9);
    }
}
