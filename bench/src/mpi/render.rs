//! The report as text: a table per measurement, tigon beside the others, then the targets.

use super::options::{Transport, human_size};
use super::summary::{MpiReport, TransportResult, find};
use crate::report::{self, Target};

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
        s.push('\n');
        for r in &with_db {
            if let Some(d) = r.double_buffering.iter().find(|d| d.one_cpu) {
                s.push_str(&format!(
                    "{}: both ranks on one CPU, where the producer's and the consumer's work take \
                     turns: the bound is 1/(1/p + 1/c), {:.0}% of min(p, c) here\n",
                    r.transport.label_short(),
                    d.bound_mb_s / d.producer_mb_s.min(d.consumer_mb_s) * 100.0
                ));
            }
        }
        s.push('\n');
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
    for r in ts {
        for c in &r.copies {
            s.push_str(&format!(
                "{}: CPU copies per payload byte at {}: {:.2} (engines {:.2}, ranks {:.2})\n",
                r.label,
                human_size(c.size),
                c.engine + c.ranks,
                c.engine,
                c.ranks
            ));
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
