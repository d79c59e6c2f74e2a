//! `tigon`: the node agent, the job launcher, the demo, the benchmarks and the stats client.

use clap::{Parser, Subcommand};

mod agent;
mod bench;
mod cli;
mod demo;
mod doctor;
mod fabric;
mod leftovers;
mod peer;
mod run;
mod soak;

#[derive(Parser)]
#[command(name = "tigon", version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("TIGON_GIT_REV"), ")"))]
#[command(about = "MPI point-to-point messaging over plain Ethernet with kernel bypass")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a node agent: the engine core serving this node's ranks.
    Agent(Box<agent::AgentArgs>),
    /// Run an MPI program over emulated nodes on this machine, with the tigon MTL.
    Run(run::RunArgs),
    /// Print an agent's counters as JSON.
    Stats {
        /// The agent's control socket (default: $TIGON_SOCKET or /run/tigon/agent.sock).
        #[arg(long)]
        socket: Option<std::path::PathBuf>,
    },
    /// A test client of an agent (ping-pong, exchange, fault drills).
    #[command(hide = true)]
    Peer(peer::PeerArgs),
    /// NetPIPE between two emulated nodes, over tigon and over Open MPI's TCP path, side by
    /// side (`--ports`: checked frames over memif and af_packet instead).
    Demo(demo::DemoArgs),
    /// Benchmarks (`tigon bench engine`, ...).
    Bench(bench::BenchArgs),
    /// Soak: MPI stress jobs across two emulated nodes on a lossy wire, a rank killed every
    /// 30 s; fails on any lost message or agent memory growth (`make soak`).
    Soak(soak::SoakArgs),
    /// Check this node (hugepages, NIC, IOMMU, dmadevs, DPDK, Open MPI, the MTL, the agent)
    /// and print the fix for each problem.
    Doctor(doctor::DoctorArgs),
    /// One end of a checked frame stream over a DPDK port (used by `demo`; see
    /// `tigon frames --help`).
    #[command(hide = true)]
    Frames {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<String>,
    },
    /// How `tigon run` starts each rank: dies with its mpirun, pinned off its agent's core
    /// (used by `run`).
    #[command(hide = true)]
    RankExec(run::RankExecArgs),
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    cli::end_quietly_on_broken_pipe();
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "run") {
        run::mpirun_style(&mut args[2..]);
    }
    let cli = Cli::parse_from(args);
    let res = match cli.cmd {
        Cmd::Agent(a) => agent::run(*a),
        Cmd::Run(a) => match run::run(a) {
            Ok(code) => std::process::exit(code),
            Err(e) => Err(e),
        },
        Cmd::Stats { socket } => {
            let path = socket.unwrap_or_else(tigon_client::default_socket);
            tigon_client::agent_stats(&path)
                .map(|v| println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default()))
        }
        Cmd::Peer(a) => peer::run(a),
        Cmd::Demo(a) => match demo::run(a) {
            Ok(code) => std::process::exit(code),
            Err(e) => Err(e),
        },
        Cmd::Bench(a) => bench::run(a),
        Cmd::Soak(a) => match soak::run(a) {
            Ok(code) => std::process::exit(code),
            Err(e) => Err(e),
        },
        Cmd::Doctor(a) => doctor::run(a),
        Cmd::Frames { args } => tigon_pmd::frames::cli_main(&args),
        Cmd::RankExec(a) => match run::rank_exec(a) {
            Ok(()) => Ok(()),
            Err(e) => {
                eprintln!("tigon run: {e}");
                // The shell's status for a command that could not be run.
                std::process::exit(127);
            }
        },
    };
    if let Err(e) = res {
        // The status says it failed even when the message cannot be written.
        cli::say!("tigon: {e}");
        std::process::exit(1);
    }
}
