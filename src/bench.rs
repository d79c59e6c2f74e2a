//! `tigon bench ...`: measurements printed as tables, saved as JSON under `target/bench/`.

use clap::{Args, Subcommand};
use tigon_bench::{engine, report};

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    which: Which,
}

#[derive(Subcommand)]
enum Which {
    /// Messages and frames per second through the engine's poll loop over an in-memory link,
    /// one thread per side.
    Engine {
        /// MTU of the simulated link (1500 or 9000).
        #[arg(long, default_value_t = 1500)]
        mtu: usize,
        /// Multiplies the message counts (use < 1 for a quick look).
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
    },
}

pub fn run(a: BenchArgs) -> Result<(), String> {
    match a.which {
        Which::Engine { mtu, scale } => {
            if mtu != 1500 && mtu != 9000 {
                return Err(format!("--mtu {mtu}: use 1500 or 9000"));
            }
            let r = engine::run(mtu, scale);
            println!("{}", engine::render(&r));
            let p = report::save_json(&report::out_dir(), "engine", &r)
                .map_err(|e| format!("saving results: {e}"))?;
            println!("json: {}", p.display());
            Ok(())
        }
    }
}
