//! `tigon bench ...`: measurements printed as tables, saved as JSON under `target/bench/`.

use clap::{Args, Subcommand};
use std::time::Duration;
use tigon_bench::mpi::{self, Transport};
use tigon_bench::{dma, engine, plot, report, scale};

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    which: Which,
}

#[derive(Subcommand)]
enum Which {
    /// CPU memcpy against a dmadev, 64 B .. 4 MiB: throughput, submitting-core time, crossover.
    Dma {
        /// The dmadev (dma_skeleton0 here; an IOAT/DSA PCI address on real nodes).
        #[arg(long, default_value = "dma_skeleton0")]
        dma: String,
        /// Bytes copied per size and method.
        #[arg(long, default_value_t = 256 << 20)]
        budget: u64,
    },
    /// The seeds' MPI measurements (LogP, bandwidth, availability, double buffering, EMP's
    /// loop) under tigon (two emulated nodes), ob1/tcp and ob1/vader, with ratios and targets.
    Mpi {
        /// Fewer sizes and iterations (a few minutes in all).
        #[arg(long)]
        quick: bool,
        /// Transports to run, of tigon,tcp,vader.
        #[arg(long, default_value = "tigon,tcp,vader")]
        only: String,
        /// LogP and bandwidth message sizes, e.g. 0,64,1K,64K,4M (default: the program's list).
        #[arg(long)]
        sizes: Option<String>,
        /// Measurements to run, of logp,bw,avail,dbuf,emp (comma-separated) [default: all].
        #[arg(long, value_parser = parse_tests)]
        tests: Option<String>,
        /// Wall time per measurement in ms, at least 1 (default 40 with --quick, else 250).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        budget_ms: Option<u64>,
        /// Fabric between tigon's two emulated nodes.
        #[arg(long, value_enum, default_value_t = crate::fabric::FabricKind::Memif)]
        fabric: crate::fabric::FabricKind,
        /// memif: the client node's port in memif's zero-copy mode (see `tigon run
        /// --memif-zero-copy`).
        #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
        memif_zero_copy: bool,
        /// Where tigon's engines run (see `tigon run --layout`): on a machine with too few
        /// CPUs for a busy engine core besides one per rank, `dedicated` gives each rank a
        /// CPU of its own, shared with a yielding agent (double buffering's producer and
        /// consumer then overlap, as with Open MPI's ranks).
        #[arg(long, value_enum, default_value_t = crate::fabric::LayoutKind::Auto)]
        layout: crate::fabric::LayoutKind,
        /// Give up on a transport when its program prints nothing for this long (s, at least 1).
        #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
        stall_timeout: u64,
    },
    /// Messages and frames per second through the engine's poll loop over an in-memory link,
    /// one thread per side.
    Engine {
        /// MTU of the simulated link (1500 or 9000).
        #[arg(long, default_value_t = 1500, value_parser = crate::cli::parse_mtu)]
        mtu: u16,
        /// Multiplies the message counts, above 0 (use < 1 for a quick look).
        #[arg(long, default_value_t = 1.0, value_parser = parse_scale)]
        scale: f64,
    },
    /// One engine serving many peers (in-memory link): set-up time, memory per idle and
    /// active peer, msgs/s with uniform and bursty traffic, latency through the loop.
    Scale {
        /// Peer counts to measure, ascending, each 1 ..= 65536.
        #[arg(long, value_delimiter = ',', default_value = "2,1024,16384,65536")]
        peers: Vec<usize>,
        /// Messages per traffic phase: about 1.5 s of engine A's time, and 150 messages per
        /// peer at 65,536 (the busy ack hold in its steady state). The uniform phase runs in
        /// 10 chunks of a tenth of it, the counts taking turns chunk by chunk.
        #[arg(long, default_value_t = 10_000_000)]
        messages: usize,
        /// Times every count is measured; a round's ratio is the median of its chunks', the
        /// figure the median round's (this VM's pace moves by up to a fifth within a second).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Two full engines instead, one peer each way: engine B's N endpoints send to
        /// engine A's one (what `make bench-instr` counts, both sides of a message).
        #[arg(long)]
        pair: bool,
        /// Engine A's longest ack hold while busy, in µs (`Config::max_ack_delay_ns`;
        /// default: the engine's).
        #[arg(long)]
        max_ack_delay_us: Option<u64>,
        /// Engine A's longest ack hold while thousands of peers owe one at once, in µs
        /// (`Config::max_ack_delay_busy_ns`; default: the engine's; taken as
        /// --max-ack-delay-us where shorter: equal to it, the busy hold is off).
        #[arg(long)]
        max_ack_delay_busy_us: Option<u64>,
        /// Engine A's clock moves at its native pace per poll and message, not with the
        /// wall clock (for instruction counts under callgrind: `scripts/bench-instr.sh`).
        #[arg(long)]
        virtual_clock: bool,
        /// The simulated nodes name no slot in their frames (wire version 9's hint): engine
        /// A looks every frame's sender up by address, as before; to see what the hint is
        /// worth.
        #[arg(long)]
        no_slot_hint: bool,
    },
}

/// The measurements of `tigon bench mpi`: the `--tests` of the program in `bench/mpi/`
/// (see `main.c`).
const MPI_TESTS: &[&str] = &["logp", "bw", "avail", "dbuf", "emp"];

/// `--tests`: a comma-separated subset of [`MPI_TESTS`] (the program would silently run none
/// of a name it does not know).
fn parse_tests(s: &str) -> Result<String, String> {
    let names: Vec<&str> = s.split(',').map(str::trim).collect();
    match names.iter().find(|n| !MPI_TESTS.contains(n)) {
        Some(bad) => Err(format!(
            "unknown measurement `{bad}`: use a comma-separated subset of {} (e.g. --tests logp,bw)",
            MPI_TESTS.join(",")
        )),
        None => Ok(names.join(",")),
    }
}

/// `--scale`: a positive factor.
fn parse_scale(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1000.0 => Ok(v),
        _ => Err("a factor above 0, at most 1000 (e.g. --scale 0.1 for a quick look)".into()),
    }
}

pub fn run(a: BenchArgs) -> Result<(), String> {
    // The host's mode before and after (see tigon_bench::host): figures from its slow mode
    // are not comparable with those from its fast one.
    let host = tigon_bench::host::probe();
    let r = run_one(a);
    println!("{}", tigon_bench::host::line(&host));
    println!("{}", tigon_bench::host::line(&tigon_bench::host::probe()));
    r
}

fn run_one(a: BenchArgs) -> Result<(), String> {
    match a.which {
        Which::Dma { dma: dev, budget } => {
            let mut b = tigon_pmd::Eal::builder()
                .lcores("0-1")
                .main_lcore(0)
                .file_prefix(format!("tigon-bench-{}", std::process::id()))
                .in_memory(true)
                .no_pci(!dev.contains(':') || dev.starts_with("dma_"))
                .iova_mode(tigon_pmd::IovaMode::Va)
                .log_level("*:warning");
            if !dev.contains(':') {
                b = b.vdev(dev.clone());
            }
            let eal = b.init().map_err(|e| e.to_string())?;
            let r = dma::run(&eal, &dev, budget)?;
            println!("{}", dma::render(&r));
            let p = report::save_report(
                &report::out_dir(),
                "dma",
                r.command.clone(),
                env!("TIGON_GIT_REV"),
                &[],
                &r,
            )
            .map_err(|e| format!("saving results: {e}"))?;
            println!("json: {}", p.display());
            Ok(())
        }
        Which::Engine { mtu, scale } => {
            let r = engine::run(mtu as usize, scale);
            println!("{}", engine::render(&r));
            let ratio = engine::rndv_over_eager(&r);
            let instr = engine::small_instr(&r);
            let targets = [
                report::Target::check(
                    "small messages >= 10 M/s per core",
                    Some(engine::best_small(&r)),
                    r.small_msgs_per_s_target,
                    false,
                    format!("{} msgs/s", report::si(engine::best_small(&r))),
                ),
                report::Target::check(
                    "0 retransmits in every row (lossless link)",
                    Some(engine::total_retransmits(&r) as f64),
                    0.0,
                    true,
                    format!("{} retransmits", engine::total_retransmits(&r)),
                ),
                report::Target::check(
                    "rendezvous (1 MiB, 4 MiB) Gbit/s >= 16 KiB eager",
                    ratio,
                    1.0,
                    false,
                    ratio.map_or("n/a".into(), |v| format!("{v:.2} x the eager rate")),
                ),
                report::Target::check(
                    "<= 600 instructions per small message per side",
                    instr,
                    600.0,
                    true,
                    instr.map_or_else(
                        || "no CPU counter here: make bench-instr".into(),
                        |v| format!("{v:.0}"),
                    ),
                ),
            ];
            let p = report::save_report(
                &report::out_dir(),
                "engine",
                r.command.clone(),
                env!("TIGON_GIT_REV"),
                &targets,
                &r,
            )
            .map_err(|e| format!("saving results: {e}"))?;
            println!("json: {}", p.display());
            Ok(())
        }
        Which::Scale {
            peers,
            messages,
            rounds,
            pair,
            max_ack_delay_us,
            max_ack_delay_busy_us,
            virtual_clock,
            no_slot_hint,
        } => {
            if messages == 0 {
                return Err("--messages 0: use at least 1".into());
            }
            if pair {
                for &n in &peers {
                    if n == 0 || n > u16::MAX as usize {
                        return Err(format!("--peers {n} --pair: use 1 ..= 65535 endpoints"));
                    }
                    let (uniform, hot) = scale::pair::run(n, messages)?;
                    println!(
                        "two engines, {n} endpoints: {} msgs/s uniform, {} msgs/s hot",
                        report::si(uniform),
                        report::si(hot)
                    );
                }
                return Ok(());
            }
            for (name, v) in [
                ("max-ack-delay-us", max_ack_delay_us),
                ("max-ack-delay-busy-us", max_ack_delay_busy_us),
            ] {
                let limit = tigon_engine::wire::ACK_DELAY_LIMIT_NS / 1_000;
                if v.is_some_and(|us| us > limit) {
                    return Err(format!("--{name}: 0 to {limit}"));
                }
            }
            let opts = scale::Options {
                max_ack_delay_us,
                max_ack_delay_busy_us,
                virtual_clock,
                no_slot_hint,
            };
            let r = scale::run(&peers, messages, rounds, &opts)?;
            println!("{}", scale::render(&r));
            let idle = r.rows.last().map(|x| x.idle_peer_bytes);
            let targets = [
                report::Target::check(
                    "msgs/s at the most peers >= 0.9 x at the fewest",
                    Some(r.rate_ratio),
                    0.9,
                    false,
                    format!("{:.2}", r.rate_ratio),
                ),
                report::Target::check(
                    "idle peer <= 256 B",
                    idle,
                    256.0,
                    true,
                    format!("{:.0} B", idle.unwrap_or(0.0)),
                ),
            ];
            let p = report::save_report(
                &report::out_dir(),
                "scale",
                r.command.clone(),
                env!("TIGON_GIT_REV"),
                &targets,
                &r,
            )
            .map_err(|e| format!("saving results: {e}"))?;
            println!("json: {}", p.display());
            Ok(())
        }
        Which::Mpi {
            quick,
            only,
            sizes,
            tests,
            budget_ms,
            fabric,
            memif_zero_copy,
            layout,
            stall_timeout,
        } => {
            let opts = mpi::Opts {
                quick,
                sizes: sizes.as_deref().map(mpi::parse_sizes).transpose()?,
                tests,
                budget_ms,
            };
            run_mpi(
                &opts,
                &mpi::parse_only(&only)?,
                fabric,
                memif_zero_copy,
                layout,
                Duration::from_secs(stall_timeout),
            )
        }
    }
}

/// `tigon bench mpi`: the program under each transport in turn, then tables, JSON, plots.
fn run_mpi(
    opts: &mpi::Opts,
    only: &[Transport],
    fabric: crate::fabric::FabricKind,
    memif_zero_copy: bool,
    layout: crate::fabric::LayoutKind,
    stall: Duration,
) -> Result<(), String> {
    let dir = report::out_dir();
    report::progress("bench mpi: compiling the benchmark program with mpicc");
    let bin = mpi::compile(&dir)?;
    let mut program = vec![bin.display().to_string()];
    program.extend(mpi::program_args(opts));
    tigon_shm::signals::install().map_err(|e| e.to_string())?;
    let mut results = Vec::new();
    for &t in only {
        if tigon_shm::signals::terminating() {
            break;
        }
        let res = match t {
            Transport::Tigon => run_tigon(&program, fabric, memif_zero_copy, layout, stall),
            _ => {
                let mut cmd = mpi::ob1_command(t, &[]);
                // Open MPI's session directory in one of the bench's own, removed after the
                // run: mpirun leaves it behind when the run is cut short (stalled, or the
                // bench stopped), as it does under `tigon run` (run.rs).
                let session =
                    std::env::temp_dir().join(format!("tigon-bench-ompi-{}", std::process::id()));
                cmd.args(["--mca", "orte_tmpdir_base"])
                    .arg(&session)
                    .args(&program);
                // The same malloc as tigon's ranks get from `tigon rank-exec` (huge pages):
                // mpirun's local ranks inherit its environment.
                let current = std::env::var("GLIBC_TUNABLES").ok();
                if let Some(t) = crate::run::huge_malloc_tunables(current.as_deref()) {
                    cmd.env("GLIBC_TUNABLES", t);
                }
                let line = mpi::command_line(&cmd);
                let (recs, err, secs) = mpi::run_program(t.label(), cmd, stall);
                let _ = std::fs::remove_dir_all(&session);
                let mut r = mpi::summarize(t, line, &recs);
                r.error = err;
                r.seconds = secs;
                r
            }
        };
        if let Some(e) = &res.error {
            eprintln!("bench mpi: {}: {e}", res.label);
        }
        results.push(res);
    }
    let mut rep = mpi::MpiReport {
        quick: opts.quick,
        transports: results,
        plots: Vec::new(),
    };
    let targets = mpi::targets(&rep.transports);
    match plot::mpi_figures(&rep, &dir) {
        Ok(files) => rep.plots = files,
        Err(e) => eprintln!("bench mpi: plots: {e}"),
    }
    println!("{}", mpi::render(&rep, &targets));
    let mut command = String::from("tigon bench mpi");
    for a in std::env::args().skip(3) {
        command.push(' ');
        command.push_str(&a);
    }
    let p = report::save_report(
        &dir,
        "mpi",
        command.clone(),
        env!("TIGON_GIT_REV"),
        &targets,
        &rep,
    )
    .map_err(|e| format!("saving results: {e}"))?;
    println!("json: {}", p.display());
    if !rep.plots.is_empty() {
        println!(
            "plots: {}",
            rep.plots
                .iter()
                .filter(|p| p.extension().is_some_and(|e| e == "svg"))
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" ")
        );
        println!("       (and the same as .png)");
    }
    println!("reproduce: {command}");
    if rep.transports.iter().all(|r| r.error.is_some()) {
        return Err("every transport failed".into());
    }
    Ok(())
}

/// The program under tigon: two agents (emulated nodes), one rank on each.
fn run_tigon(
    program: &[String],
    fabric: crate::fabric::FabricKind,
    memif_zero_copy: bool,
    layout: crate::fabric::LayoutKind,
    stall: Duration,
) -> mpi::TransportResult {
    use crate::fabric::{Cluster, ClusterOpts};
    let failed = |line: String, e: String| {
        let mut r = mpi::summarize(Transport::Tigon, line, &[]);
        r.error = Some(e);
        r
    };
    report::progress("bench mpi: tigon: starting two agents");
    let opts = ClusterOpts {
        nodes: 2,
        fabric,
        loss: 0,
        dma: false,
        mtu: 9000,
        wire: crate::fabric::WireKind::Ether,
        // A shared machine can starve an agent for seconds; this run measures speed, not how
        // soon a dead peer is detected (the tests do that).
        agent_args: vec!["--peer-timeout-ms".into(), "30000".into()],
        layout,
        memif_zero_copy,
    };
    let cluster = match Cluster::start(&opts) {
        Ok(c) => c,
        Err(e) => return failed(String::new(), format!("starting the agents: {e}")),
    };
    let cmd = match crate::run::mpirun_command(&cluster, 2, &[], program) {
        Ok(c) => c,
        Err(e) => return failed(String::new(), e),
    };
    let line = mpi::command_line(&cmd);
    let (recs, err, secs) = mpi::run_program(Transport::Tigon.label(), cmd, stall);
    let mut r = mpi::summarize(Transport::Tigon, line, &recs);
    r.error = err;
    r.seconds = secs;
    let stats = node_stats(&cluster);
    if r.error.is_none() {
        r.copies = copies_per_byte(&cluster, &stats);
    }
    if !stats.is_empty() {
        r.agent_stats = Some(serde_json::Value::Array(stats));
    }
    if r.error.is_some() {
        for (i, n) in cluster.nodes.iter().enumerate() {
            let log = std::fs::read_to_string(&n.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(10).collect();
            eprintln!(
                "bench mpi: agent {i} log (last lines):\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
    }
    drop(cluster);
    r
}

/// Every node's `tigon stats`.
fn node_stats(cluster: &crate::fabric::Cluster) -> Vec<serde_json::Value> {
    cluster
        .nodes
        .iter()
        .filter_map(|n| tigon_client::agent_stats(&n.socket).ok())
        .collect()
}

/// CPU copies per payload byte at 64 B (eager) and 4 MiB (rendezvous): a short NetPIPE job
/// of each size on the cluster, the agents' copy counters before and after.
fn copies_per_byte(
    cluster: &crate::fabric::Cluster,
    before: &[serde_json::Value],
) -> Vec<mpi::CopyRow> {
    let sum = |st: &[serde_json::Value], keys: &[&str]| -> u64 {
        st.iter()
            .flat_map(|s| {
                keys.iter()
                    .map(move |k| s["copies"][*k].as_u64().unwrap_or(0))
            })
            .sum()
    };
    let mut rows = Vec::new();
    let mut prev = before.to_vec();
    for (size, reps) in [(64usize, 2000), (4 << 20, 20)] {
        let out = cluster.dir.join(format!("np-copies-{size}.out"));
        let prog: Vec<String> = [
            "NPopenmpi".to_string(),
            "-p".into(),
            "0".into(),
            "-l".into(),
            size.to_string(),
            "-u".into(),
            size.to_string(),
            "-n".into(),
            reps.to_string(),
            "-o".into(),
            out.display().to_string(),
        ]
        .into();
        report::progress(&format!("bench mpi: tigon: copies at {size} B (NetPIPE)"));
        let Ok(mut cmd) = crate::run::mpirun_command(cluster, 2, &[], &prog) else {
            break;
        };
        let ok = cmd
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        let now = node_stats(cluster);
        if !ok || now.len() != prev.len() {
            eprintln!("bench mpi: the NetPIPE job counting copies at {size} B failed");
            break;
        }
        let d = |keys: &[&str]| sum(&now, keys).saturating_sub(sum(&prev, keys)) as f64;
        let payload = d(&["payload_bytes"]);
        if payload > 0.0 {
            rows.push(mpi::CopyRow {
                size,
                engine: d(&["cpu_bytes", "direct_bytes"]) / payload,
                ranks: d(&["rank_bytes"]) / payload,
            });
        }
        prev = now;
    }
    rows
}
