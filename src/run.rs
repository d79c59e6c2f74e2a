//! `tigon run`: an MPI job over emulated nodes on this machine, with the tigon MTL selected.
//!
//! Nothing outlives it. The agents and mpirun get a parent-death signal (so even a SIGKILLed
//! `tigon run` takes them along), each rank is started through `tigon rank-exec`, which asks
//! for SIGKILL when its mpirun dies, and `tigon run` adopts orphaned ranks (a child
//! subreaper) so that it can kill and reap them before it exits. The agents run in process
//! groups of their own: a terminal's Ctrl-C reaches `tigon run` (and mpirun and the ranks, in
//! its group), which then stops the job, reads the agents' counters and stops the agents.

use crate::cli::say;
use crate::cli::{parse_mtu, parse_nodes, parse_np, parse_percent};
use crate::fabric::{Cluster, ClusterOpts, FabricKind, LayoutKind, OMPI_COMPONENT_DIR, WireKind};
use clap::Args;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Emulated nodes (one agent each; memif links 2 at most).
    #[arg(long, default_value_t = 2, value_parser = parse_nodes)]
    pub nodes: usize,
    /// How the nodes are linked.
    #[arg(long, value_enum, default_value_t = FabricKind::Memif)]
    pub fabric: FabricKind,
    /// The agents' encapsulation: ether (raw Ethernet) or udp (UDP/IPv4, routable)
    /// [default: udp with --fabric routed, else ether].
    #[arg(long, value_enum)]
    pub wire: Option<WireKind>,
    /// Percent of the frames each node sends that the wire drops, 0 to 100 (veth and routed:
    /// at the bridge or router ingress).
    #[arg(long, value_name = "PCT", default_value_t = 0, value_parser = parse_percent)]
    pub loss: u32,
    /// Write the frames crossing the fabric's middle (the bridge, or the router's subnet-1
    /// side) to this pcap file with tcpdump, for Wireshark (veth with a bridge, or routed).
    #[arg(long, value_name = "FILE")]
    pub capture: Option<PathBuf>,
    /// Agents offload receive copies to a dmadev (dma_skeleton).
    #[arg(long)]
    pub dma: bool,
    /// memif: the client node's port in memif's zero-copy mode, so the wire copies each
    /// frame once (on the server's side), as a NIC's DMA would; needs hugepages (without
    /// them the port copies). DPDK 22.11's zero-copy port sends only from DPDK's memory,
    /// where that node's agent keeps 4 ranks' channels: the engine copies the small payloads
    /// of any further rank there; `false`: both ports copy, the wire twice per frame.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub memif_zero_copy: bool,
    /// MTU of the fabric: 9000 (jumbo frames: the emulated fabric carries them; a sixth of
    /// the frames per byte) or 1500 (what an unconfigured switch carries).
    #[arg(long, default_value_t = 9000, value_parser = parse_mtu)]
    pub mtu: u16,
    /// MPI ranks, spread over the nodes in blocks (`-np` as with mpirun).
    #[arg(long = "np", short = 'n', default_value_t = 2, value_parser = parse_np)]
    pub np: usize,
    /// Extra `mpirun` options (repeatable), e.g. --mpirun-arg=--tag-output.
    #[arg(long = "mpirun-arg", allow_hyphen_values = true)]
    pub mpirun_args: Vec<String>,
    /// Extra agent options (repeatable), e.g. --agent-arg=--peer-timeout-ms=30000.
    #[arg(long = "agent-arg", allow_hyphen_values = true)]
    pub agent_args: Vec<String>,
    /// Where the nodes' engines run: shared (one agent, every node's engine in one busy
    /// poll loop on CPU 0, ranks on the other CPUs), dedicated (an agent per node, each on
    /// its own CPU), or auto: dedicated when the machine has 2 CPUs per node, else shared.
    #[arg(long, value_enum, default_value_t = LayoutKind::Auto)]
    pub layout: LayoutKind,
    /// When the job ends (also on failure or Ctrl-C), print each agent's counters to stderr
    /// before the agents stop: one line `tigon run: agent I stats: JSON` per agent (the JSON
    /// of `tigon stats`), and with --loss `tigon run: node I loss rule dropped N frames`.
    #[arg(long)]
    pub stats: bool,
    /// The MPI program and its arguments (after `--`, or after the last option).
    #[arg(
        value_name = "PROGRAM",
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub program: Vec<String>,
}

/// Options of `tigon run` that take a value: the word after one is not the program.
const VALUE_OPTS: &[&str] = &[
    "--nodes",
    "--fabric",
    "--wire",
    "--layout",
    "--loss",
    "--mtu",
    "--np",
    "-n",
    "-np",
    "--mpirun-arg",
    "--agent-arg",
    "--capture",
    "--memif-zero-copy",
];

/// mpirun users type `-np N`, clap's short options are one letter: rewrites `-np` among the
/// options of `tigon run` (`args` after the subcommand) to `--np`, stopping at the program.
pub fn mpirun_style(args: &mut [std::ffi::OsString]) {
    let mut i = 0;
    while i < args.len() {
        let a = args[i].to_string_lossy().into_owned();
        if a == "--" || !a.starts_with('-') {
            break;
        }
        if a == "-np" {
            args[i] = "--np".into();
        }
        i += if VALUE_OPTS.contains(&a.as_str()) {
            2
        } else {
            1
        };
    }
}

/// Ranks of node `i` when `np` ranks are spread over `nodes` in blocks.
pub fn ranks_on(i: usize, np: usize, nodes: usize) -> usize {
    np / nodes + usize::from(i < np % nodes)
}

/// The program as mpirun will start it: a path with a `/`, or a command on PATH, that exists
/// and is executable; said here, before any node starts, rather than by every rank.
/// The agent options `tigon run` sets itself, and the option of its own that sets each (an
/// `--agent-arg` repeating one made the agent refuse to start: "cannot be used multiple
/// times").
const RUN_SETS: &[(&str, &str)] = &[
    ("--lcore", "the layout (--layout) places the engines"),
    ("--idle", "the layout (--layout) decides"),
    ("--mtu", "use tigon run --mtu"),
    ("--port", "tigon run makes the nodes' ports (--fabric)"),
    ("--socket", "tigon run makes the nodes' sockets"),
    ("--config", "tigon run writes the agents' configuration"),
    ("--node", "tigon run makes the nodes (--nodes)"),
    ("--wire", "use tigon run --wire"),
    ("--ip", "tigon run numbers the nodes (--wire udp)"),
    ("--gateway", "tigon run routes the nodes (--fabric routed)"),
    ("--dma", "use tigon run --dma"),
    ("--netns", "tigon run makes the namespaces (--fabric veth)"),
];

/// Refuses an `--agent-arg` that names an option `tigon run` sets itself.
pub fn check_agent_args(args: &[String]) -> Result<(), String> {
    for a in args {
        let name = a.split('=').next().unwrap_or(a);
        if let Some((opt, how)) = RUN_SETS.iter().find(|(o, _)| *o == name) {
            return Err(format!(
                "--agent-arg={a}: tigon run sets the agents' {opt} itself ({how})"
            ));
        }
    }
    Ok(())
}

pub fn check_program(program: &str) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        p.is_file()
            && p.metadata()
                .is_ok_and(|m| m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let p = PathBuf::from(program);
        if !p.exists() {
            return Err(format!(
                "program `{program}` not found: no such file (check the path, or build it first)"
            ));
        }
        if !executable(&p) {
            return Err(format!(
                "program `{program}` is not an executable file (chmod +x {program})"
            ));
        }
        return Ok(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| executable(p))
        .ok_or_else(|| {
            format!(
                "program `{program}` not found on PATH (a program in this directory is ./{program})"
            )
        })
}

/// The `mpirun` command running `program` with the MTL over `cluster`. mpirun dies with this
/// process; each rank is started through `tigon rank-exec`, which dies with mpirun and pins
/// the rank off its agent's core.
pub fn mpirun_command(
    cluster: &Cluster,
    np: usize,
    extra: &[String],
    program: &[String],
) -> Result<Command, String> {
    let dir = mtl_dir(&cluster.dir).ok_or_else(|| match std::env::var_os("TIGON_MTL_DIR") {
        Some(d) => format!(
            "TIGON_MTL_DIR={}: no mca_mtl_tigon.so there (name the directory holding it, or unset it)",
            Path::new(&d).display()
        ),
        None => "mca_mtl_tigon.so not found (build it with `make build`, or set TIGON_MTL_DIR to the directory holding it)".to_string(),
    })?;
    let exe = std::env::current_exe().map_err(|e| format!("locating tigon: {e}"))?;
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
    .args(["--mca", "mpi_yield_when_idle", "1"]);
    // Open MPI's shared-memory files in the cluster's own directory (removed with it), where
    // the program does not choose one.
    let shm = cluster.shm_dir();
    if !extra
        .iter()
        .any(|a| a.contains("btl_vader_backing_directory"))
        && std::fs::create_dir_all(&shm).is_ok()
    {
        cmd.args(["--mca", "btl_vader_backing_directory"]).arg(&shm);
    }
    // Open MPI's session directory (`ompi.<host>.<uid>/pid.<mpirun's pid>/`, its PMIx
    // segments among it) in the cluster's directory too, where the program does not choose
    // one: mpirun removes it when it finishes, but not when a job is interrupted (Ctrl-C
    // at the terminal, `tigon demo` stopped: seen left in /tmp each time), and the
    // cluster's directory goes with the run (or with the next run, after a SIGKILL). The
    // ranks' own TMPDIR stays the user's. One directory per mpirun: two jobs started at once
    // over one cluster (`tigon soak`) both create `ompi.<host>.<uid>` there, and Open MPI
    // 4.1.4 fails the one whose mkdir loses the race ("File exists", orte_init failed: seen
    // once in a fresh-clone CI run of the soak test).
    if !extra.iter().any(|a| a.contains("orte_tmpdir_base")) {
        static JOBS: AtomicUsize = AtomicUsize::new(0);
        let own = cluster
            .dir
            .join(format!("orte.{}", JOBS.fetch_add(1, Ordering::Relaxed)));
        let base = if std::fs::create_dir_all(&own).is_ok() {
            own
        } else {
            cluster.dir.clone()
        };
        cmd.args(["--mca", "orte_tmpdir_base"]).arg(base);
    }
    cmd.args(extra);
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
            .arg(format!("TIGON_SOCKET={}", node.socket.display()))
            .arg(&exe)
            .arg("rank-exec")
            .args(["--owner", &std::process::id().to_string()]);
        // Keep the ranks off busy engines' cores, and a node's ranks off its own agent's
        // core, as on a real node: a rank that shares it is preempted by its engine on every
        // request it makes (measured here: an 8-byte MPI_Isend 18 us on the same core,
        // 3.3 us on the other one).
        if let Some(cpus) = rank_cpus(cluster, node.lcore) {
            cmd.args(["--cpus", &cpus]);
        }
        cmd.arg("--").args(program);
    }
    // mpirun gets SIGTERM when this process dies (it then stops its ranks and removes its
    // session directory).
    tigon_shm::process::die_with_parent(&mut cmd, libc::SIGTERM);
    Ok(cmd)
}

/// The CPUs of a rank whose agent's engine runs on `lcore`, as a list (`0,2,3`): those the
/// layout leaves to the ranks when the engines busy-poll, else all but `lcore`. None on a
/// single CPU or with TIGON_RUN_PIN=0.
fn rank_cpus(cluster: &Cluster, lcore: usize) -> Option<String> {
    if std::env::var_os("TIGON_RUN_PIN").is_some_and(|v| v == "0") {
        return None;
    }
    let l = &cluster.layout;
    if l.spin && !l.rank_cpus.is_empty() {
        let v: Vec<String> = l.rank_cpus.iter().map(usize::to_string).collect();
        return Some(v.join(","));
    }
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    let others: Vec<String> = (0..n)
        .filter(|&c| c != lcore)
        .map(|c| c.to_string())
        .collect();
    (!others.is_empty()).then(|| others.join(","))
}

/// `tigon rank-exec`: how mpirun starts each rank of `tigon run`.
#[derive(Args, Debug)]
pub struct RankExecArgs {
    /// The `tigon run` that launched the job: when the rank's parent is this process, its
    /// mpirun died before the rank started (the orphan was adopted), and the rank does not
    /// start.
    #[arg(long)]
    pub owner: Option<u32>,
    /// CPUs the rank may run on (comma-separated).
    #[arg(long)]
    pub cpus: Option<String>,
    /// The program and its arguments.
    #[arg(required = true, num_args = 1.., last = true)]
    pub program: Vec<String>,
}

/// Asks for SIGKILL when mpirun dies, restricts the CPUs, and becomes the rank's program.
/// Returns only on failure.
pub fn rank_exec(a: RankExecArgs) -> Result<(), String> {
    tigon_shm::process::set_parent_death_signal(libc::SIGKILL)
        .map_err(|e| format!("rank-exec: parent-death signal: {e}"))?;
    let parent = tigon_shm::process::parent_pid();
    if parent == 1 || Some(parent) == a.owner {
        return Err("rank-exec: mpirun is gone; not starting the rank".into());
    }
    if let Some(list) = &a.cpus {
        let cpus: Vec<usize> = list
            .split(',')
            .map(|c| c.trim().parse::<usize>())
            .collect::<Result<_, _>>()
            .map_err(|_| format!("rank-exec --cpus {list}: CPU numbers, comma-separated"))?;
        tigon_shm::process::set_affinity(&cpus)
            .map_err(|e| format!("rank-exec --cpus {list}: {e}"))?;
    }
    let mut cmd = Command::new(&a.program[0]);
    if let Some(t) = huge_malloc_tunables(std::env::var("GLIBC_TUNABLES").ok().as_deref()) {
        cmd.env("GLIBC_TUNABLES", t);
    }
    let err = cmd.args(&a.program[1..]).exec();
    Err(format!("cannot start `{}`: {err}", a.program[0]))
}

/// The rank's `GLIBC_TUNABLES` with glibc's malloc asked to put its large allocations on
/// transparent huge pages, each setting added unless the rank chose it already (None: nothing
/// to add). The agent reads and writes a large message's buffer with
/// `process_vm_readv/writev`, which walk and pin the buffer page by page: on 4 KiB pages that
/// walk costs the engine core more than the copy itself (perf, 4 MiB NetPIPE:
/// `follow_page_pte`, `__get_user_pages`, `gup_put_folio` 35 % of its samples), on a 2 MiB
/// page it is one step.
/// - `glibc.malloc.hugetlb=1`: `madvise(MADV_HUGEPAGE)` on malloc's mmap chunks and heap,
///   which this kernel's THP setting `madvise` waits for.
/// - `glibc.malloc.mmap_threshold` at its largest (32 MiB) and `glibc.malloc.trim_threshold`
///   twice that (what glibc itself sets once it has freed a 32 MiB chunk): a buffer under
///   32 MiB comes from the heap, whose 2 MiB-aligned stretches are huge pages, not from a
///   mapping of its own, which is too small or unaligned for any (a 1 MiB one never has
///   one). A 1 MiB NetPIPE message cost the engine 75-80 µs in each of `process_vm_readv`
///   and `process_vm_writev` on 4 KiB pages and 27-36 µs on the heap's huge pages: the
///   "fixed cost" of about 100 µs per large message (issue 15). Freed memory stays in the
///   heap up to the trim threshold, as with the memory hooks of MPI libraries that keep
///   buffers registered.
pub fn huge_malloc_tunables(current: Option<&str>) -> Option<String> {
    const WANTED: [(&str, &str); 3] = [
        ("glibc.malloc.hugetlb", "1"),
        ("glibc.malloc.mmap_threshold", "33554432"),
        ("glibc.malloc.trim_threshold", "67108864"),
    ];
    let current = current.unwrap_or("");
    let set: Vec<&str> = current
        .split(':')
        .filter_map(|kv| kv.split('=').next())
        .collect();
    let add: Vec<String> = WANTED
        .iter()
        .filter(|(k, _)| !set.contains(k))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if add.is_empty() {
        return None;
    }
    let mut all: Vec<String> = current
        .split(':')
        .filter(|kv| !kv.is_empty())
        .map(str::to_string)
        .collect();
    all.extend(add);
    Some(all.join(":"))
}

/// Exit code for a child's status: its code, or 128 + the signal that ended it.
fn exit_code(st: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code()
        .unwrap_or_else(|| 128 + st.signal().unwrap_or(libc::SIGTERM))
}

/// Children of this process, read from /proc (this process is a subreaper: orphaned ranks
/// are among them).
fn children() -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .flat_map(|t| {
            std::fs::read_to_string(t.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|k| k.parse::<u32>().ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Kills and reaps the children of this process that are not in `keep` (ranks whose mpirun
/// is gone), waiting up to a few seconds for them.
pub fn reap_orphans(keep: &[u32]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left: Vec<u32> = children()
            .into_iter()
            .filter(|p| !keep.contains(p))
            .collect();
        if left.is_empty() || Instant::now() > deadline {
            return;
        }
        for &p in &left {
            tigon_shm::process::signal(p, libc::SIGKILL);
            tigon_shm::process::try_reap(p);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits for a job's mpirun. On Ctrl-C / SIGTERM (the flag of `tigon_shm::signals`) it gives
/// mpirun SIGTERM and 5 s to stop its ranks, then SIGKILL. Then kills and reaps any rank left
/// (children of this process but `keep`, the agents). Returns mpirun's status.
pub fn wait_job(child: &mut Child, keep: &[u32]) -> Result<ExitStatus, String> {
    let mut stop_at: Option<Instant> = None;
    let status = loop {
        if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
            break st;
        }
        if tigon_shm::signals::terminating() {
            match stop_at {
                None => {
                    tigon_shm::process::signal(child.id(), libc::SIGTERM);
                    stop_at = Some(Instant::now());
                }
                Some(t) if t.elapsed() > Duration::from_secs(5) => {
                    let _ = child.kill();
                }
                _ => {}
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    reap_orphans(keep);
    Ok(status)
}

/// Sets up a launcher: signal flags for Ctrl-C / SIGTERM and the adoption of orphans.
pub fn launcher_setup() -> Result<(), String> {
    tigon_shm::signals::install().map_err(|e| e.to_string())?;
    tigon_shm::process::set_child_subreaper().map_err(|e| format!("PR_SET_CHILD_SUBREAPER: {e}"))
}

pub fn run(a: RunArgs) -> Result<i32, String> {
    check_program(&a.program[0])?;
    check_agent_args(&a.agent_args)?;
    launcher_setup()?;
    let opts = ClusterOpts {
        nodes: a.nodes,
        fabric: a.fabric,
        loss: a.loss,
        dma: a.dma,
        mtu: a.mtu,
        wire: a.wire.unwrap_or(if a.fabric == FabricKind::Routed {
            WireKind::Udp
        } else {
            WireKind::Ether
        }),
        agent_args: a.agent_args.clone(),
        layout: a.layout,
        memif_zero_copy: a.memif_zero_copy,
    };
    let mut cluster = match Cluster::start(&opts) {
        Ok(c) => c,
        // Ctrl-C / SIGTERM while the nodes came up (what was up is torn down): the same
        // status as a job interrupted later, with the reason said.
        Err(e) if tigon_shm::signals::terminating() => {
            say!("tigon: {e}");
            return Ok(INTERRUPTED);
        }
        Err(e) => return Err(e),
    };
    if a.stats {
        say!("tigon run: {}", cluster.layout.describe());
    }
    if let Some(f) = &a.capture {
        cluster.capture(f)?;
    }
    let mut cmd = mpirun_command(&cluster, a.np, &a.mpirun_args, &a.program)?;
    log::debug!("{cmd:?}");
    // Ctrl-C while the nodes came up: do not start the job.
    if tigon_shm::signals::terminating() {
        return Ok(INTERRUPTED);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("starting mpirun: {e} (install openmpi-bin)"))?;
    let status = wait_job(&mut child, &cluster.keep_pids())?;
    if a.stats {
        let mut all = Vec::new();
        for (i, n) in cluster.nodes.iter().enumerate() {
            match tigon_client::agent_stats(&n.socket) {
                Ok(v) => {
                    say!("tigon run: agent {i} stats: {v}");
                    all.push(v);
                }
                Err(e) => say!("tigon run: agent {i} stats: unavailable ({e})"),
            }
            if let Some(d) = n.dropped() {
                say!("tigon run: node {i} loss rule dropped {d} frames");
            }
        }
        if let Some(line) = copies_line(&all) {
            say!("tigon run: {line}");
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

/// The job's CPU copies per payload byte delivered, by the engines and by the ranks, from
/// every node's `tigon stats` (None when nothing was delivered).
pub fn copies_line(stats: &[serde_json::Value]) -> Option<String> {
    let sum = |key: &str| -> u64 {
        stats
            .iter()
            .map(|s| s["copies"][key].as_u64().unwrap_or(0))
            .sum()
    };
    let payload = sum("payload_bytes");
    if payload == 0 {
        return None;
    }
    let engines = (sum("cpu_bytes") + sum("direct_bytes")) as f64 / payload as f64;
    let ranks = sum("rank_bytes") as f64 / payload as f64;
    Some(format!(
        "CPU copies per payload byte: {:.2} (engines {engines:.2}, ranks {ranks:.2}) over {payload} \
         payload bytes delivered; dmadev {} bytes",
        engines + ranks,
        sum("dma_bytes")
    ))
}

/// Exit code of a job stopped by Ctrl-C / SIGTERM (the shell's 128 + SIGINT).
pub const INTERRUPTED: i32 = 130;

/// Where `mca_mtl_tigon.so` lives: $TIGON_MTL_DIR; in a cargo build tree, the
/// `libmca_mtl_tigon.so` cargo left next to `tigon` (a directory under `scratch` gets a link
/// with the name Open MPI looks for); else next to this executable (or in its `ompi/`
/// subdirectory), or Open MPI's own component directory. The build's own library comes
/// before the copies: a copy in `ompi/` (the MTL's tests make one) or in Open MPI's directory
/// (an install) may be older than the build, and a job would then run old code.
pub fn mtl_dir(scratch: &Path) -> Option<PathBuf> {
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf));
    if let Some(d) = std::env::var_os("TIGON_MTL_DIR") {
        // Checked here: Open MPI 4.1.4 handed a component path whose first directory does
        // not exist fails with "unknown option --allow-run-as-root".
        let d = PathBuf::from(d);
        return d.join("mca_mtl_tigon.so").is_file().then_some(d);
    }
    let lib = exe_dir.as_ref().map(|d| d.join("libmca_mtl_tigon.so"));
    if let Some(lib) = lib.filter(|l| l.exists()) {
        let dir = scratch.join("ompi");
        // A cluster running several jobs (tigon soak) asks again: the link is there.
        if !dir.join("mca_mtl_tigon.so").exists() {
            std::fs::create_dir_all(&dir).ok()?;
            std::os::unix::fs::symlink(&lib, dir.join("mca_mtl_tigon.so")).ok()?;
            // The component prints its messages from the help file next to it.
            std::fs::write(dir.join("help-mtl-tigon.txt"), MTL_HELP).ok()?;
        }
        return Some(dir);
    }
    let mut c: Vec<PathBuf> = Vec::new();
    if let Some(d) = &exe_dir {
        c.push(d.join("ompi"));
        c.push(d.clone());
    }
    c.push(OMPI_COMPONENT_DIR.into());
    c.into_iter().find(|d| d.join("mca_mtl_tigon.so").exists())
}

/// The component's help file (`opal_show_help` texts), put next to a linked build.
const MTL_HELP: &str = include_str!("../ompi-mtl/help-mtl-tigon.txt");

#[cfg(test)]
mod tests {
    use super::*;

    fn rewrite(words: &[&str]) -> Vec<String> {
        let mut v: Vec<std::ffi::OsString> = words.iter().map(Into::into).collect();
        mpirun_style(&mut v);
        v.iter().map(|s| s.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn ranks_ask_malloc_for_huge_pages_unless_they_chose() {
        const ALL: &str = "glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=33554432:\
                           glibc.malloc.trim_threshold=67108864";
        let t = huge_malloc_tunables;
        assert_eq!(t(None).as_deref(), Some(ALL));
        assert_eq!(t(Some("")).as_deref(), Some(ALL));
        assert_eq!(
            t(Some("glibc.malloc.arena_max=2")),
            Some(format!("glibc.malloc.arena_max=2:{ALL}"))
        );
        assert_eq!(
            t(Some("glibc.malloc.hugetlb=0")).as_deref(),
            Some(
                "glibc.malloc.hugetlb=0:glibc.malloc.mmap_threshold=33554432:\
                 glibc.malloc.trim_threshold=67108864"
            ),
            "the rank's own choice stays, the rest is added"
        );
        assert_eq!(
            t(Some(
                "glibc.malloc.mmap_threshold=131072:glibc.malloc.hugetlb=2"
            ))
            .as_deref(),
            Some(
                "glibc.malloc.mmap_threshold=131072:glibc.malloc.hugetlb=2:\
                 glibc.malloc.trim_threshold=67108864"
            )
        );
        assert_eq!(t(Some(ALL)), None, "all chosen: nothing to change");
        assert_eq!(
            t(Some("glibc.malloc.hugetlb_x=1"))
                .as_deref()
                .map(|s| s.contains(":glibc.malloc.hugetlb=1")),
            Some(true),
            "another tunable whose name starts the same is not hugetlb"
        );
    }

    #[test]
    fn np_is_rewritten_among_options_only() {
        assert_eq!(rewrite(&["-np", "2", "./p"]), ["--np", "2", "./p"]);
        assert_eq!(
            rewrite(&["--nodes", "3", "-np", "4", "--", "./p", "-np", "1"]),
            ["--nodes", "3", "--np", "4", "--", "./p", "-np", "1"]
        );
        // The program's own -np stays, with or without `--`.
        assert_eq!(
            rewrite(&["--stats", "./p", "-np", "1"]),
            ["--stats", "./p", "-np", "1"]
        );
        assert_eq!(
            rewrite(&["--mpirun-arg", "-np", "-np", "2", "p"]),
            ["--mpirun-arg", "-np", "--np", "2", "p"]
        );
    }

    #[test]
    fn missing_programs_are_named() {
        let e = check_program("./surely-not-here-18").unwrap_err();
        assert!(e.contains("`./surely-not-here-18` not found"), "{e}");
        let e = check_program("surely-not-on-path-18").unwrap_err();
        assert!(e.contains("not found on PATH"), "{e}");
        let plain = std::env::temp_dir().join(format!("tigon-not-exec-{}", std::process::id()));
        std::fs::write(&plain, b"#!/bin/sh\n").expect("write");
        let e = check_program(plain.to_str().unwrap()).unwrap_err();
        let _ = std::fs::remove_file(&plain);
        assert!(e.contains("not an executable"), "{e}");
        assert!(check_program("true").is_ok());
    }

    #[test]
    fn ranks_spread_in_blocks() {
        let v: Vec<usize> = (0..3).map(|i| ranks_on(i, 7, 3)).collect();
        assert_eq!(v, [3, 2, 2]);
    }
}
