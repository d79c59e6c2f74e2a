//! `cargo run --release -p tigon-bench --example engine [-- MTU SCALE]`: the engine benchmark
//! without the rest of the `tigon` binary.
fn main() {
    let mut a = std::env::args().skip(1);
    let mtu = a.next().and_then(|s| s.parse().ok()).unwrap_or(1500);
    let scale = a.next().and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let r = tigon_bench::engine::run(mtu, scale);
    println!("{}", tigon_bench::engine::render(&r));
}
