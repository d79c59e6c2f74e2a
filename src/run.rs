//! `tigon run`: an MPI job over emulated nodes on this machine, with the tigon MTL selected.

use crate::fabric::{Cluster, ClusterOpts, FabricKind, OMPI_COMPONENT_DIR, mtl_dir};
use clap::Args;
use std::process::Command;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Emulated nodes (one agent each).
    #[arg(long, default_value_t = 2)]
    pub nodes: usize,
    /// How the nodes are linked.
    #[arg(long, value_enum, default_value_t = FabricKind::Memif)]
    pub fabric: FabricKind,
    /// Percent of frames dropped at each node's ingress (veth only).
    #[arg(long, default_value_t = 0)]
    pub loss: u32,
    /// Agents offload receive copies to a dmadev (dma_skeleton).
    #[arg(long)]
    pub dma: bool,
    /// MTU of the fabric (1500 or 9000).
    #[arg(long, default_value_t = 1500)]
    pub mtu: u16,
    /// MPI ranks, spread over the nodes in blocks.
    #[arg(long = "np", short = 'n', default_value_t = 2)]
    pub np: usize,
    /// Extra `mpirun` options (repeatable), e.g. --mpirun-arg=--tag-output.
    #[arg(long = "mpirun-arg", allow_hyphen_values = true)]
    pub mpirun_args: Vec<String>,
    /// Extra agent options (repeatable), e.g. --agent-arg=--peer-timeout-ms=30000.
    #[arg(long = "agent-arg", allow_hyphen_values = true)]
    pub agent_args: Vec<String>,
    /// When the job ends (also on failure or Ctrl-C), print each agent's counters to stderr
    /// before the agents stop: one line `tigon run: agent I stats: JSON` per agent (the JSON
    /// of `tigon stats`), and with --loss `tigon run: node I loss rule dropped N frames`.
    #[arg(long)]
    pub stats: bool,
    /// The MPI program and its arguments.
    #[arg(last = true, required = true)]
    pub program: Vec<String>,
}

/// Ranks of node `i` when `np` ranks are spread over `nodes` in blocks.
pub fn ranks_on(i: usize, np: usize, nodes: usize) -> usize {
    np / nodes + usize::from(i < np % nodes)
}

/// The `mpirun` command running `program` with the MTL over `cluster`.
pub fn mpirun_command(
    cluster: &Cluster,
    np: usize,
    extra: &[String],
    program: &[String],
) -> Result<Command, String> {
    let dir = mtl_dir(&cluster.dir).ok_or(
        "mca_mtl_tigon.so not found (build it with `make build`, or set TIGON_MTL_DIR to the directory holding it)",
    )?;
    let mut cmd = Command::new("mpirun");
    cmd.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "--bind-to",
        "none",
    ])
    .args(["--mca", "pml", "cm", "--mca", "mtl", "tigon"])
    .args(["--mca", "mca_base_component_path"])
    .arg(format!("{}:{OMPI_COMPONENT_DIR}", dir.display()))
    .args(["--mca", "mpi_yield_when_idle", "1"])
    .args(extra);
    let n = cluster.nodes.len();
    let mut first = true;
    for (i, node) in cluster.nodes.iter().enumerate() {
        let k = ranks_on(i, np, n);
        if k == 0 {
            continue;
        }
        if !first {
            cmd.arg(":");
        }
        first = false;
        cmd.args(["-np", &k.to_string(), "-x"])
            .arg(format!("TIGON_SOCKET={}", node.socket.display()));
        // Keep a node's ranks off its own agent's core, as on a real node: a rank that
        // shares it is preempted by its engine on every request it makes (measured here:
        // an 8-byte MPI_Isend 18 us on the same core, 3.3 us on the other one).
        if let Some(cpus) = cpus_except(node.lcore) {
            cmd.args(["taskset", "-c", &cpus]);
        }
        cmd.args(program);
    }
    Ok(cmd)
}

/// This machine's CPUs but `lcore`, as a taskset list; None on a single CPU or with
/// TIGON_RUN_PIN=0.
fn cpus_except(lcore: usize) -> Option<String> {
    if std::env::var_os("TIGON_RUN_PIN").is_some_and(|v| v == "0") {
        return None;
    }
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    let others: Vec<String> = (0..n)
        .filter(|&c| c != lcore)
        .map(|c| c.to_string())
        .collect();
    (!others.is_empty()).then(|| others.join(","))
}

/// Processes descended from `pid` (through /proc/PID/task/TID/children).
fn descendants(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let kids = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            for k in kids
                .split_whitespace()
                .filter_map(|k| k.parse::<u32>().ok())
            {
                out.push(k);
                todo.push(k);
            }
        }
    }
    out
}

fn kill(sig: &str, pids: &[u32]) {
    if pids.is_empty() {
        return;
    }
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .args(pids.iter().map(u32::to_string))
        .stderr(std::process::Stdio::null())
        .status();
}

/// Exit code for a child's status: its code, or 128 + the signal that ended it.
fn exit_code(st: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code()
        .unwrap_or_else(|| 128 + st.signal().unwrap_or(libc::SIGTERM))
}

pub fn run(a: RunArgs) -> Result<i32, String> {
    if a.np == 0 {
        return Err("-np must be at least 1".into());
    }
    tigon_shm::signals::install().map_err(|e| e.to_string())?;
    let opts = ClusterOpts {
        nodes: a.nodes,
        fabric: a.fabric,
        loss: a.loss,
        dma: a.dma,
        mtu: a.mtu,
        agent_args: a.agent_args.clone(),
    };
    let cluster = Cluster::start(&opts)?;
    let mut cmd = mpirun_command(&cluster, a.np, &a.mpirun_args, &a.program)?;
    log::debug!("{cmd:?}");
    // Ctrl-C while the nodes came up: do not start the job.
    if tigon_shm::signals::terminating() {
        return Ok(INTERRUPTED);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("starting mpirun: {e} (install openmpi-bin)"))?;
    // Wait for the job; on Ctrl-C / SIGTERM give mpirun a moment to stop its ranks, then kill
    // it and whatever it started (ranks it left behind would spin against stopped agents).
    let mut stop_at: Option<Instant> = None;
    let status = loop {
        if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
            break st;
        }
        if tigon_shm::signals::terminating() {
            match stop_at {
                None => {
                    kill("TERM", &[child.id()]);
                    stop_at = Some(Instant::now());
                }
                Some(t) if t.elapsed() > Duration::from_secs(5) => {
                    let mut all = descendants(child.id());
                    all.push(child.id());
                    kill("KILL", &all);
                }
                _ => {}
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if a.stats {
        for (i, n) in cluster.nodes.iter().enumerate() {
            match tigon_client::agent_stats(&n.socket) {
                Ok(v) => eprintln!("tigon run: agent {i} stats: {v}"),
                Err(e) => eprintln!("tigon run: agent {i} stats: unavailable ({e})"),
            }
            if let Some(d) = n.dropped() {
                eprintln!("tigon run: node {i} loss rule dropped {d} frames");
            }
        }
    }
    drop(cluster);
    // An interrupted job says so (mpirun's own status after our SIGTERM is 1, or even 0).
    Ok(if tigon_shm::signals::terminating() {
        INTERRUPTED
    } else {
        exit_code(status)
    })
}

/// Exit code of a job stopped by Ctrl-C / SIGTERM (the shell's 128 + SIGINT).
const INTERRUPTED: i32 = 130;
