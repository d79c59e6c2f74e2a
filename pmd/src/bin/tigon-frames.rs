//! One end of a checked frame stream over a DPDK port (see `tigon_pmd::frames`); the
//! fabric tests run two of these.
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = tigon_pmd::frames::cli_main(&args) {
        eprintln!("tigon-frames: {e}");
        std::process::exit(1);
    }
}
