//! `tigon bench ...`: measurements printed as tables, saved as JSON under `target/bench/`.

use clap::{Args, Subcommand};
use tigon_bench::{dma, engine, report};

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
            let p = report::save_json(&report::out_dir(), "dma", &r)
                .map_err(|e| format!("saving results: {e}"))?;
            println!("json: {}", p.display());
            Ok(())
        }
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
