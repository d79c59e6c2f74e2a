//! Writes each fuzz target's seed inputs (`tigon_engine_fuzz::seeds`) into `DIR/<target>/`:
//!     cargo run --example seeds -- DIR [TARGET...]
//! `scripts/fuzz.sh` runs it before fuzzing, so the seeds follow the wire version.
use std::path::PathBuf;

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().expect("usage: seeds DIR [TARGET...]"));
    let mut names: Vec<String> = args.collect();
    if names.is_empty() {
        names = ["frame", "engine_rx", "net", "channel"]
            .map(String::from)
            .to_vec();
    }
    for name in names {
        let Some(seeds) = tigon_engine_fuzz::seeds::of(&name) else {
            continue;
        };
        let d = dir.join(&name);
        std::fs::create_dir_all(&d).expect("seed directory");
        for (i, s) in seeds.iter().enumerate() {
            std::fs::write(d.join(format!("seed-{i:02}")), s).expect("seed file");
        }
        println!("{name}: {} seeds in {}", seeds.len(), d.display());
        if name == "engine_rx" {
            // Each exchange seed completes requests on both sides: the seeds reach the protocol.
            let done: Vec<_> = seeds
                .iter()
                .map(|s| tigon_engine_fuzz::duet::Duet::run(s))
                .collect();
            println!("  requests completed (A, B) per seed: {done:?}");
        }
    }
}
