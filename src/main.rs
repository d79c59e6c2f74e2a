//! `tigon`: the node agent, the job launcher, the demo, the benchmarks and the stats client.

use clap::{Parser, Subcommand};

mod bench;
mod demo;

#[derive(Parser)]
#[command(name = "tigon", version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("TIGON_GIT_REV"), ")"))]
#[command(about = "MPI point-to-point messaging over plain Ethernet with kernel bypass")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Port-level demo: frames over a memif pair and over af_packet on a veth pair.
    Demo(demo::DemoArgs),
    /// Benchmarks (`tigon bench engine`, ...).
    Bench(bench::BenchArgs),
    /// One end of a checked frame stream over a DPDK port (used by `demo`; see
    /// `tigon frames --help`).
    #[command(hide = true)]
    Frames {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<String>,
    },
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Demo(a) => demo::run(a),
        Cmd::Bench(a) => bench::run(a),
        Cmd::Frames { args } => tigon_pmd::frames::cli_main(&args),
    };
    if let Err(e) = res {
        eprintln!("tigon: {e}");
        std::process::exit(1);
    }
}
