//! The NetPIPE demo: `NPopenmpi` between two ranks over tigon (two emulated nodes), ob1/tcp
//! on loopback, ob1/tcp between two network namespaces over veth, and ob1/vader, in
//! interleaved runs (tigon, tcp, tcp veth, vader, then again: a quiet or busy moment of the
//! machine touches all of them), with the median of each figure over the runs and tigon's
//! ratio to the better TCP peer.

use super::DemoArgs;
use super::peers::{self, TcpVeth};
use crate::fabric::{Cluster, ClusterOpts};

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

/// The transports of the demo, in the order of each round.
const NAMES: [&str; 4] = ["tigon", "ob1/tcp lo", "ob1/tcp veth", "ob1/vader"];

pub fn demo(a: &DemoArgs) -> Result<(), String> {
    let np_args = |out: &std::path::Path| -> Vec<String> {
        ["NPopenmpi", "-u", &a.upper.to_string(), "-p", "0", "-o"]
            .iter()
            .map(|s| s.to_string())
            .chain([out.display().to_string()])
            .collect()
    };
    println!(
        "tigon demo: NetPIPE between two ranks: tigon (two emulated nodes, {:?}), Open MPI's TCP \
         path (loopback; two network namespaces over veth) and vader; {} interleaved run(s) each",
        a.fabric, a.runs
    );
    let opts = ClusterOpts {
        nodes: 2,
        fabric: a.fabric,
        loss: 0,
        dma: false,
        mtu: 9000,
        wire: a.wire,
        agent_args: Vec::new(),
        layout: a.layout,
        memif_zero_copy: false,
    };
    // The peers run with no agent up: a busy engine would take a core from them. So the
    // emulated nodes come up for each tigon run and go before the peers'.
    let scratch = Scratch::new()?;
    let veth = TcpVeth::new(&scratch.0)?;
    let mut runs: Vec<Vec<RunFigures>> = vec![Vec::new(); NAMES.len()];
    let mut failures: Vec<String> = Vec::new();
    let mut stats = None;
    for r in 0..a.runs {
        for (k, name) in NAMES.iter().enumerate() {
            if tigon_shm::signals::terminating() {
                return Err("interrupted".into());
            }
            let out = scratch.0.join(format!("np-{k}-{r}.out"));
            let prog = np_args(&out);
            let what = format!("run {}/{}: NetPIPE over {name}", r + 1, a.runs);
            let result = if k == 0 {
                let cluster = Cluster::start(&opts)?;
                if r == 0 {
                    println!("tigon: {}", cluster.layout.describe());
                }
                let cmd = crate::run::mpirun_command(&cluster, 2, &[], &prog)?;
                let res = run_netpipe(cmd, &out, &what, &cluster.agent_pids());
                stats = tigon_client::agent_stats(&cluster.nodes[0].socket).ok();
                res
            } else {
                let cmd = match k {
                    1 => peers::tcp_loopback(&prog)?,
                    2 => veth.command(&prog)?,
                    _ => peers::vader(&prog)?,
                };
                run_netpipe(cmd, &out, &what, &[])
            };
            match result {
                Ok(points) => runs[k].push(RunFigures { points }),
                // tigon must work; a peer that fails is reported and left out.
                Err(e) if k == 0 => return Err(e),
                Err(e) => failures.push(e),
            }
        }
    }
    drop(veth);
    print_table(a, &runs);
    for f in &failures {
        println!("peer failed: {f}");
    }
    if let Some(s) = stats {
        println!(
            "tigon agent (node 0, last run): {} frames sent, {} received, {} retransmits",
            s["frames"]["tx"], s["frames"]["rx"], s["retransmits"]
        );
    }
    println!(
        "reproduce: make demo   (or: tigon demo --runs {}; one run: tigon run -np 2 -- NPopenmpi -u {} -p 0)",
        a.runs, a.upper
    );
    Ok(())
}

/// The medians side by side, with tigon's ratio to the better TCP peer and the targets.
fn print_table(a: &DemoArgs, runs: &[Vec<RunFigures>]) {
    let med = |k: usize, f: &dyn Fn(&RunFigures) -> Option<f64>| -> Option<f64> {
        median(runs[k].iter().filter_map(f).collect())
    };
    println!();
    println!(
        "{:<26} {:>12} {:>12} {:>12} {:>12} {:>9}",
        "median of runs", NAMES[0], NAMES[1], NAMES[2], NAMES[3], "vs tcp"
    );
    // `lower`: smaller is better (latency); the ratio is against the better TCP figure.
    let row = |label: &str, f: &dyn Fn(&RunFigures) -> Option<f64>, unit: &str, lower: bool| {
        let v: Vec<Option<f64>> = (0..NAMES.len()).map(|k| med(k, f)).collect();
        let tcp = match (v[1], v[2]) {
            (Some(x), Some(y)) => Some(if lower { x.min(y) } else { x.max(y) }),
            (x, y) => x.or(y),
        };
        let ratio = match (v[0], tcp) {
            (Some(t), Some(p)) if p > 0.0 => Some(t / p),
            _ => None,
        };
        let cell = |x: Option<f64>| match x {
            Some(x) if unit == "us" => format!("{x:.2} us"),
            Some(x) => format!("{x:.0} Mb/s"),
            None => "-".into(),
        };
        println!(
            "{label:<26} {:>12} {:>12} {:>12} {:>12} {:>9}",
            cell(v[0]),
            cell(v[1]),
            cell(v[2]),
            cell(v[3]),
            ratio.map_or("-".into(), |r| format!("{r:.2}"))
        );
        ratio
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
        "(NetPIPE's one-way time; \"vs tcp\" is tigon / the better of the two TCP peers: < 1 \
         is better for latency, > 1 for bandwidth)"
    );
    let verdict = |r: Option<f64>, ok: &dyn Fn(f64) -> bool| match r {
        Some(r) if ok(r) => format!("{r:.2}, met"),
        Some(r) => format!("{r:.2}, missed"),
        None => "not measured".into(),
    };
    println!(
        "targets: small-message latency <= 0.75x TCP: {}; bandwidth >= 1 MiB >= 1.2x TCP: {}",
        verdict(lat, &|r| r <= 0.75),
        verdict(bw, &|r| r >= 1.2)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
