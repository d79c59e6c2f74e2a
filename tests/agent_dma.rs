//! The dmadev path: agents with `--dma dma_skeleton0` move received payload into channel
//! buffers with the dmadev and deliver the same bytes as the CPU path (every message is
//! checked against the same generated pattern), and their stats show the dmadev bytes.

mod common;
use common::*;

fn check(a: &Agent, b: &Agent) {
    for x in [a, b] {
        let s = x.stats();
        println!("agent {}: {s}", x.name);
        assert!(num(&s, "/copies/dma_bytes") > 0, "{s}");
        assert_eq!(num(&s, "/copies/dma_errors"), 0, "{s}");
        assert_eq!(num(&s, "/messages/failed"), 0, "{s}");
    }
}

#[test]
fn dmadev_jumbo_delivers_the_same_bytes() {
    let dir = TestDir::new("dma9k");
    let (a, b) = memif_pair(&dir, &["--dma", "dma_skeleton0", "--mtu", "9000"]);
    exchange(
        &dir,
        "dma",
        &[(&a, &b), (&b, &a)],
        &["--prepost", "--rounds", "2"],
    );
    check(&a, &b);
}

#[test]
fn dmadev_mtu_1500_low_threshold_delivers_the_same_bytes() {
    let dir = TestDir::new("dma1500");
    let (a, b) = memif_pair(&dir, &["--dma", "dma_skeleton0", "--dma-threshold", "256"]);
    exchange(
        &dir,
        "dma",
        &[(&a, &b), (&b, &a)],
        &["--prepost", "--rounds", "2"],
    );
    // Unexpected messages too (copied from the engine's store, by the CPU).
    exchange(&dir, "dma-unexp", &[(&a, &b)], &[]);
    check(&a, &b);
}
