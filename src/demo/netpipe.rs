//! The NetPIPE demo: `NPopenmpi` between two ranks over tigon (two emulated nodes), ob1/tcp
//! on loopback, ob1/tcp between two network namespaces over veth, and ob1/vader, in
//! interleaved runs (tigon, tcp, tcp veth, vader, then again: a quiet or busy moment of the
//! machine touches all of them), with the median of each figure over the runs and tigon's
//! ratio to the better TCP peer.

use super::peers::{self, TcpVeth};
use super::{DemoArgs, DemoWire};
use crate::fabric::{Cluster, ClusterOpts, FabricKind, WireKind};

/// One NetPIPE result line: message size, Mbit/s, one-way time in seconds.
#[derive(Debug, Clone, Copy)]
pub struct NpPoint {
    pub bytes: usize,
    pub mbps: f64,
    pub secs: f64,
}

/// Reads NetPIPE's `-o` output.
pub fn parse_netpipe(text: &str) -> Vec<NpPoint> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some(NpPoint {
                bytes: f.next()?.parse().ok()?,
                mbps: f.next()?.parse().ok()?,
                secs: f.next()?.parse().ok()?,
            })
        })
        .collect()
}

fn at(points: &[NpPoint], bytes: usize) -> Option<NpPoint> {
    points.iter().copied().find(|p| p.bytes == bytes)
}

/// Runs one NetPIPE job (its output into `out`, mpirun's into `out`.log), as `tigon run`
/// waits for its jobs: stopped on Ctrl-C / SIGTERM, no rank left behind.
fn run_netpipe(
    mut cmd: std::process::Command,
    out: &std::path::Path,
    what: &str,
    keep: &[u32],
) -> Result<Vec<NpPoint>, String> {
    eprintln!("{what} ...");
    let log = out.with_extension("log");
    let f = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let f2 = f.try_clone().map_err(|e| e.to_string())?;
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(f)
        .stderr(f2)
        .spawn()
        .map_err(|e| format!("{what}: {e} (install openmpi-bin, netpipe-openmpi)"))?;
    let st = crate::run::wait_job(&mut child, keep)?;
    if tigon_shm::signals::terminating() {
        return Err(format!("{what}: interrupted"));
    }
    if !st.success() {
        return Err(format!(
            "{what} failed ({st}):\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        ));
    }
    let text =
        std::fs::read_to_string(out).map_err(|e| format!("{what}: {}: {e}", out.display()))?;
    let pts = parse_netpipe(&text);
    if pts.is_empty() {
        return Err(format!("{what}: NetPIPE wrote no results"));
    }
    Ok(pts)
}

/// One run's figures as a line of the demo's log: latency, bandwidth and the host's mode
/// when its round began.
fn round_line(what: &str, f: &RunFigures, host: &tigon_bench::host::Host) -> String {
    let show = |v: Option<f64>, unit: &str| v.map_or("-".to_string(), |x| format!("{x:.2} {unit}"));
    format!(
        "{what}: latency 1/8/64 B {}, bandwidth >= 1 MiB {} (host when the round began: {host})",
        show(f.small_latency_us(), "us"),
        show(f.large_bandwidth().map(|b| b / 1e3), "Gb/s"),
    )
}

/// One run's figures.
#[derive(Debug, Clone)]
struct RunFigures {
    points: Vec<NpPoint>,
}

impl RunFigures {
    /// Mean one-way time at 1, 8 and 64 B, in microseconds.
    fn small_latency_us(&self) -> Option<f64> {
        let v: Vec<f64> = [1, 8, 64]
            .iter()
            .filter_map(|&b| at(&self.points, b))
            .map(|p| p.secs * 1e6)
            .collect();
        (v.len() == 3).then(|| v.iter().sum::<f64>() / 3.0)
    }

    /// The median bandwidth over the sizes of at least 1 MiB, in Mbit/s.
    fn large_bandwidth(&self) -> Option<f64> {
        median(
            self.points
                .iter()
                .filter(|p| p.bytes >= 1 << 20)
                .map(|p| p.mbps)
                .collect(),
        )
    }
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// A scratch directory for the runs' output and the rsh agent, removed on drop.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new() -> Result<Scratch, String> {
        let d =
            std::env::temp_dir().join(format!("tigon-demo-{}", tigon_pmd::testbed::unique_tag()));
        std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        Ok(Scratch(d))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn demo(a: &DemoArgs) -> Result<(), String> {
    let np_args = |out: &std::path::Path| -> Vec<String> {
        ["NPopenmpi", "-u", &a.upper.to_string(), "-p", "0", "-o"]
            .iter()
            .map(|s| s.to_string())
            .chain([out.display().to_string()])
            .collect()
    };
    let wires = a
        .wire
        .unwrap_or(if a.fabric == FabricKind::Routed {
            DemoWire::Udp
        } else {
            DemoWire::Ether
        })
        .kinds();
    if a.fabric == FabricKind::Routed && wires.contains(&WireKind::Ether) {
        return Err("--fabric routed: raw Ethernet cannot cross the router; use --wire udp".into());
    }
    let cols = columns(&wires);
    let host = tigon_bench::host::probe();
    println!(
        "tigon demo: NetPIPE between two ranks: tigon (two emulated nodes, {:?}, {}), Open \
         MPI's TCP path (loopback; two network namespaces over veth) and vader; {} interleaved \
         run(s) each",
        a.fabric,
        wires
            .iter()
            .map(wire_name)
            .collect::<Vec<_>>()
            .join(" and "),
        a.runs
    );
    // The peers run with no agent up: a busy engine would take a core from them. So the
    // emulated nodes come up for each tigon run and go before the peers'.
    let scratch = Scratch::new()?;
    let veth = TcpVeth::new(&scratch.0)?;
    let mut runs: Vec<Vec<RunFigures>> = vec![Vec::new(); cols.len()];
    let mut failures: Vec<String> = Vec::new();
    let mut stats = None;
    for r in 0..a.runs {
        // The host's cross-core speed flips between modes here within minutes, and tigon's
        // hand-offs between cores follow it: each round says which mode it began in, and
        // its figures follow (see `round_line`).
        let host = tigon_bench::host::probe();
        for k in round_order(&cols, r as usize) {
            let col = &cols[k];
            if tigon_shm::signals::terminating() {
                return Err("interrupted".into());
            }
            let out = scratch.0.join(format!("np-{k}-{r}.out"));
            let prog = np_args(&out);
            let what = format!("run {}/{}: NetPIPE over {}", r + 1, a.runs, col.name());
            let result = match *col {
                Column::Tigon(wire) => {
                    let opts = ClusterOpts {
                        nodes: 2,
                        fabric: a.fabric,
                        loss: 0,
                        dma: false,
                        mtu: 9000,
                        wire,
                        agent_args: Vec::new(),
                        layout: a.layout,
                        memif_zero_copy: a.memif_zero_copy,
                    };
                    let cluster = Cluster::start(&opts)?;
                    if r == 0 && k == 0 {
                        println!("tigon: {}", cluster.layout.describe());
                    }
                    let cmd = crate::run::mpirun_command(&cluster, 2, &[], &prog)?;
                    let res = run_netpipe(cmd, &out, &what, &cluster.agent_pids());
                    stats = tigon_client::agent_stats(&cluster.nodes[0].socket).ok();
                    res
                }
                Column::TcpLo => {
                    run_netpipe(peers::tcp_loopback(&prog, &scratch.0)?, &out, &what, &[])
                }
                Column::TcpVeth => run_netpipe(veth.command(&prog)?, &out, &what, &[]),
                Column::Vader => run_netpipe(peers::vader(&prog, &scratch.0)?, &out, &what, &[]),
            };
            match result {
                Ok(points) => {
                    let f = RunFigures { points };
                    println!("{}", round_line(&what, &f, &host));
                    runs[k].push(f);
                }
                // tigon must work; a peer that fails is reported and left out.
                Err(e) if matches!(col, Column::Tigon(_)) => return Err(e),
                Err(e) => failures.push(e),
            }
        }
    }
    drop(veth);
    print_table(a, &cols, &runs);
    for f in &failures {
        println!("peer failed: {f}");
    }
    if let Some(s) = stats {
        println!(
            "tigon agent (node 0, last run): {} frames sent, {} received, {} retransmits",
            s["frames"]["tx"], s["frames"]["rx"], s["retransmits"]
        );
    }
    let mut args = format!("--runs {}", a.runs);
    if a.fabric != FabricKind::Memif {
        args += &format!(" --fabric {}", format!("{:?}", a.fabric).to_lowercase());
    }
    if let Some(w) = a.wire {
        args += &format!(" --wire {}", format!("{w:?}").to_lowercase());
    }
    let zc = if a.memif_zero_copy {
        ""
    } else {
        " --memif-zero-copy false"
    };
    // Before and after the runs: a mode that flipped meanwhile shows.
    println!("{}", tigon_bench::host::line(&host));
    println!("{}", tigon_bench::host::line(&tigon_bench::host::probe()));
    println!(
        "reproduce: tigon demo {args}{zc}   (one run: tigon run{zc} -np 2 -- NPopenmpi -u {} -p 0)",
        a.upper
    );
    Ok(())
}

/// A column of the table, in the order of each round: tigon over each encapsulation asked
/// for, then the peers.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Column {
    Tigon(WireKind),
    TcpLo,
    TcpVeth,
    Vader,
}

impl Column {
    fn name(&self) -> String {
        match self {
            Column::Tigon(w) => format!("tigon {}", wire_name(w)),
            Column::TcpLo => "ob1/tcp lo".into(),
            Column::TcpVeth => "ob1/tcp veth".into(),
            Column::Vader => "ob1/vader".into(),
        }
    }
}

fn wire_name(w: &WireKind) -> &'static str {
    match w {
        WireKind::Ether => "ether",
        WireKind::Udp => "udp",
    }
}

/// The columns of round `r` in the order they run: as `cols`, but with two tigon wires the
/// second goes first every other round, so that neither always runs first in its round (the
/// host's speed drifts within minutes here: see `paired_ratio`).
fn round_order(cols: &[Column], r: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..cols.len()).collect();
    let both = cols
        .iter()
        .filter(|c| matches!(c, Column::Tigon(_)))
        .count()
        == 2;
    if both && r % 2 == 1 {
        order.swap(0, 1);
    }
    order
}

/// `f`'s ratio between the runs of columns `num` and `den` in the same round (run back to
/// back, a few seconds apart), over the rounds: the host's cross-core speed flips between
/// modes within minutes here, which moves both runs of a round alike but can put the median of
/// each column in different modes; a ratio per round cancels it.
struct Paired {
    /// The median of the rounds' ratios.
    median: Option<f64>,
    /// Rounds whose ratio is a loss for `num` (`worse`), and rounds with both figures: a
    /// median just inside or outside a tolerance means more when nearly every round agrees.
    worse: usize,
    rounds: usize,
}

fn paired_ratio(
    runs: &[Vec<RunFigures>],
    num: usize,
    den: usize,
    f: &dyn Fn(&RunFigures) -> Option<f64>,
    worse: &dyn Fn(f64) -> bool,
) -> Paired {
    let ratios: Vec<f64> = runs[num]
        .iter()
        .zip(&runs[den])
        .filter_map(|(n, d)| match (f(n), f(d)) {
            (Some(n), Some(d)) if d > 0.0 => Some(n / d),
            _ => None,
        })
        .collect();
    Paired {
        worse: ratios.iter().filter(|&&r| worse(r)).count(),
        rounds: ratios.len(),
        median: median(ratios),
    }
}

fn columns(wires: &[WireKind]) -> Vec<Column> {
    let mut c: Vec<Column> = wires.iter().map(|&w| Column::Tigon(w)).collect();
    c.extend([Column::TcpLo, Column::TcpVeth, Column::Vader]);
    c
}

/// The medians side by side, with tigon's ratio to the better TCP peer and the targets; with
/// both encapsulations, also UDP's ratio to raw Ethernet (issue "A routable wire": within 5 %).
fn print_table(a: &DemoArgs, cols: &[Column], runs: &[Vec<RunFigures>]) {
    let med = |k: usize, f: &dyn Fn(&RunFigures) -> Option<f64>| -> Option<f64> {
        median(runs[k].iter().filter_map(f).collect())
    };
    let col = |c: Column| cols.iter().position(|&x| x == c);
    let tigons: Vec<(usize, WireKind)> = cols
        .iter()
        .enumerate()
        .filter_map(|(k, c)| match c {
            Column::Tigon(w) => Some((k, *w)),
            _ => None,
        })
        .collect();
    let both = tigons.len() == 2;
    println!();
    let mut head = format!("{:<26}", "median of runs");
    for c in cols {
        head += &format!(" {:>12}", c.name());
    }
    for (_, w) in &tigons {
        head += &format!(
            " {:>9}",
            if both {
                format!("{}/tcp", wire_name(w))
            } else {
                "vs tcp".into()
            }
        );
    }
    if both {
        head += &format!(" {:>9}", "udp/ether");
    }
    println!("{head}");
    // `lower`: smaller is better (latency); the ratio is against the better TCP figure.
    // Returns each tigon column's ratio to TCP, then UDP's to raw Ethernet (with both).
    let row = |label: &str, f: &dyn Fn(&RunFigures) -> Option<f64>, unit: &str, lower: bool| {
        let v: Vec<Option<f64>> = (0..cols.len()).map(|k| med(k, f)).collect();
        let at_col = |c: Column| col(c).and_then(|k| v[k]);
        let tcp = match (at_col(Column::TcpLo), at_col(Column::TcpVeth)) {
            (Some(x), Some(y)) => Some(if lower { x.min(y) } else { x.max(y) }),
            (x, y) => x.or(y),
        };
        let over = |t: Option<f64>, p: Option<f64>| match (t, p) {
            (Some(t), Some(p)) if p > 0.0 => Some(t / p),
            _ => None,
        };
        let mut ratios: Vec<Option<f64>> = tigons.iter().map(|&(k, _)| over(v[k], tcp)).collect();
        if both {
            ratios.push(over(v[tigons[1].0], v[tigons[0].0]));
        }
        let cell = |x: Option<f64>| match x {
            Some(x) if unit == "us" => format!("{x:.2} us"),
            Some(x) => format!("{x:.0} Mb/s"),
            None => "-".into(),
        };
        let mut line = format!("{label:<26}");
        for x in &v {
            line += &format!(" {:>12}", cell(*x));
        }
        for r in &ratios {
            line += &format!(" {:>9}", r.map_or("-".into(), |r| format!("{r:.2}")));
        }
        println!("{line}");
        ratios
    };
    for b in [1usize, 8, 64] {
        row(
            &format!("latency {b} B"),
            &|r: &RunFigures| at(&r.points, b).map(|p| p.secs * 1e6),
            "us",
            true,
        );
    }
    let lat = row(
        "latency, mean of 1/8/64 B",
        &RunFigures::small_latency_us,
        "us",
        true,
    );
    for b in [64usize << 10, 1 << 20, 4 << 20] {
        if b > a.upper {
            continue;
        }
        let label = if b >= 1 << 20 {
            format!("bandwidth {} MiB", b >> 20)
        } else {
            format!("bandwidth {} KiB", b >> 10)
        };
        row(
            &label,
            &|r: &RunFigures| at(&r.points, b).map(|p| p.mbps),
            "Mb/s",
            false,
        );
    }
    let bw = row(
        "bandwidth, sizes >= 1 MiB",
        &RunFigures::large_bandwidth,
        "Mb/s",
        false,
    );
    println!(
        "(NetPIPE's one-way time; \"/tcp\" is tigon / the better of the two TCP peers: < 1 is \
         better for latency, > 1 for bandwidth)"
    );
    // A ratio with `digits` decimals and whether it meets its target.
    let verdict = |r: Option<f64>, ok: &dyn Fn(f64) -> bool, digits: usize| match r {
        Some(r) if ok(r) => format!("{r:.digits$}, met"),
        Some(r) => format!("{r:.digits$}, missed"),
        None => "not measured".into(),
    };
    for (i, (_, w)) in tigons.iter().enumerate() {
        println!(
            "targets{}: small-message latency <= 0.75x TCP: {}; bandwidth >= 1 MiB >= 1.2x TCP: {}",
            if both {
                format!(" (tigon {})", wire_name(w))
            } else {
                String::new()
            },
            verdict(lat[i], &|r| r <= 0.75, 2),
            verdict(bw[i], &|r| r >= 1.2, 2)
        );
    }
    if both {
        // Within 5 %: no more than 5 % slower (being faster is no miss). Judged on the rounds'
        // own ratios (each round runs both wires back to back, in alternating order), the
        // ratio of the medians above shown beside it.
        let (e, u) = (tigons[0].0, tigons[1].0);
        let plat = paired_ratio(runs, u, e, &RunFigures::small_latency_us, &|r| r > 1.0);
        let pbw = paired_ratio(runs, u, e, &RunFigures::large_bandwidth, &|r| r < 1.0);
        // Three decimals: these sit near their bounds (0.9465 is a miss, not "0.95").
        let shown = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.3}"));
        println!(
            "udp/ether per round (median of the rounds' ratios): latency {} (udp slower in {} \
             of {} rounds), bandwidth >= 1 MiB {} (lower in {} of {}); ratio of the medians: \
             {}, {}",
            shown(plat.median),
            plat.worse,
            plat.rounds,
            shown(pbw.median),
            pbw.worse,
            pbw.rounds,
            shown(lat[2]),
            shown(bw[2])
        );
        println!(
            "target: udp within 5 % of raw Ethernet on {:?}, per round: latency {}; bandwidth >= 1 MiB {}",
            a.fabric,
            verdict(plat.median, &|r| r <= 1.05, 3),
            verdict(pbw.median, &|r| r >= 0.95, 3)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_wires_run_tigon_over_each_before_the_peers() {
        use Column::*;
        let c = columns(&DemoWire::Both.kinds());
        assert_eq!(
            c,
            vec![
                Tigon(WireKind::Ether),
                Tigon(WireKind::Udp),
                TcpLo,
                TcpVeth,
                Vader
            ]
        );
        assert_eq!(c[1].name(), "tigon udp");
        let one = columns(&DemoWire::Udp.kinds());
        assert_eq!(one[0], Tigon(WireKind::Udp));
        assert_eq!(one.len(), 4);
        // The two wires take turns going first; the peers keep their places.
        assert_eq!(round_order(&c, 0), vec![0, 1, 2, 3, 4]);
        assert_eq!(round_order(&c, 1), vec![1, 0, 2, 3, 4]);
        assert_eq!(round_order(&one, 1), vec![0, 1, 2, 3]);
    }

    #[test]
    fn udp_against_ether_round_by_round() {
        let run = |lat_us: f64, mbps: f64| RunFigures {
            points: parse_netpipe(&format!(
                "1 1.0 {s}\n8 8.0 {s}\n64 64.0 {s}\n1048576 {mbps} 0.001\n",
                s = lat_us / 1e6
            )),
        };
        // Round 1 in a slow mode, rounds 2 and 3 in a fast one; udp 2 %, 0 % and 4 % slower.
        let ether = vec![run(3.0, 30_000.0), run(2.0, 40_000.0), run(2.0, 40_000.0)];
        let udp = vec![run(3.06, 29_400.0), run(2.0, 40_000.0), run(2.08, 38_400.0)];
        let runs = vec![ether, udp];
        let slower = |r: f64| r > 1.0;
        let lat = paired_ratio(&runs, 1, 0, &RunFigures::small_latency_us, &slower);
        let m = lat.median.unwrap();
        assert!((m - 1.02).abs() < 1e-9, "{m}");
        assert_eq!((lat.worse, lat.rounds), (2, 3));
        let lower = |r: f64| r < 1.0;
        let bw = paired_ratio(&runs, 1, 0, &RunFigures::large_bandwidth, &lower);
        let m = bw.median.unwrap();
        assert!((m - 0.98).abs() < 1e-9, "{m}");
        assert_eq!((bw.worse, bw.rounds), (2, 3));
        let none = paired_ratio(
            &[vec![], vec![]],
            1,
            0,
            &RunFigures::large_bandwidth,
            &lower,
        );
        assert_eq!((none.median, none.worse, none.rounds), (None, 0, 0));
    }

    #[test]
    fn raw_ethernet_over_the_routed_fabric_is_refused_before_anything_starts() {
        for wire in [Some(DemoWire::Ether), Some(DemoWire::Both)] {
            let a = DemoArgs {
                ports: false,
                upper: 64,
                fabric: FabricKind::Routed,
                frames: 1,
                min: 60,
                wire,
                max: 9000,
                runs: 1,
                layout: crate::fabric::LayoutKind::Auto,
                memif_zero_copy: true,
            };
            let e = demo(&a).expect_err("refused");
            assert!(e.contains("--wire udp"), "{e}");
        }
    }

    #[test]
    fn figures_of_a_run() {
        let text = "1 1.0 0.000002\n8 8.0 0.000004\n64 64.0 0.000006\n1048576 9000.0 0.001\n\
                    2097152 7000.0 0.002\n4194304 8000.0 0.004\n";
        let r = RunFigures {
            points: parse_netpipe(text),
        };
        assert!((r.small_latency_us().unwrap() - 4.0).abs() < 1e-9);
        assert_eq!(r.large_bandwidth(), Some(8000.0));
        assert_eq!(median(vec![3.0, 1.0]), Some(2.0));
        assert_eq!(median(vec![]), None);
        let partial = RunFigures {
            points: parse_netpipe("1 1.0 0.000002\n"),
        };
        assert_eq!(
            partial.small_latency_us(),
            None,
            "a missing size is no figure"
        );
        let fast = tigon_bench::host::Host {
            cross_core_rtt_ns: Some(70.4),
            op_ns: 1.0,
        };
        assert_eq!(
            round_line("run 1/3: NetPIPE over tigon", &r, &fast),
            "run 1/3: NetPIPE over tigon: latency 1/8/64 B 4.00 us, bandwidth >= 1 MiB 8.00 Gb/s \
             (host when the round began: cross-core round trip 70 ns, 1.00 ns per dependent \
             multiply-add)"
        );
        let one = tigon_bench::host::Host {
            cross_core_rtt_ns: None,
            op_ns: 1.0,
        };
        assert!(
            round_line("x", &partial, &one)
                .ends_with("latency 1/8/64 B -, bandwidth >= 1 MiB - (host when the round began: no cross-core figure (one CPU, or CPU 1 busy), 1.00 ns per dependent multiply-add)")
        );
    }
}
