//! dma_skeleton copies of 1 000 random sizes (1 B ..= 4 MiB) land byte-identical, and ring
//! indices (u16) advance by one per copy and per completion, modulo wrap-around (checked
//! across a wrap with 70 000 small copies). One EAL for this file (one test), so the file
//! is also correct under plain `cargo test`.

use std::sync::Arc;

use rand::{Rng, SeedableRng, rngs::SmallRng};
use tigon_pmd::{DEFAULT_DATA_ROOM, DmaDev, Eal, ExtMem, IovaMode, Mempool};

const MIB: usize = 1 << 20;
const SLOTS: usize = 4;

fn wait_all(dma: &mut DmaDev, next_done: &mut u16) {
    let mut spins = 0u64;
    while dma.in_flight() > 0 {
        let c = dma.completed(64);
        assert!(!c.has_error, "dma_skeleton reported a failed copy");
        if c.count == 0 {
            spins += 1;
            assert!(spins < 200_000_000, "copies never completed");
            std::thread::yield_now();
            continue;
        }
        // Completions arrive in order: the last index moves by exactly `count`.
        let expect = next_done.wrapping_add(c.count - 1);
        assert_eq!(c.last_idx, expect, "completion index not monotonic");
        *next_done = c.last_idx.wrapping_add(1);
    }
}

#[test]
fn dma_skeleton_copies_random_sizes_byte_identical() {
    let eal = Eal::builder()
        .file_prefix(format!("tt-dma-{}", std::process::id()))
        .in_memory(true)
        .no_pci(true)
        .iova_mode(IovaMode::Va)
        .vdev("dma_skeleton")
        .log_level("warning")
        .init()
        .expect("EAL");
    let mut dma = DmaDev::open(&eal, "dma_skeleton", 1024).expect("dma_skeleton");
    println!("dmadev {} ({} descriptors)", dma.name(), dma.nb_desc());

    let src: Arc<ExtMem> = ExtMem::new(&eal, 8 * MIB).expect("source region");
    let dst: Arc<ExtMem> = ExtMem::new(&eal, SLOTS * 4 * MIB).expect("destination region");
    println!("regions: {src:?} {dst:?}");
    let mut rng = SmallRng::seed_from_u64(0x7160);
    let mut noise = vec![0u8; src.len()];
    rng.fill(&mut noise[..]);
    src.write_at(0, &noise).expect("fill source");

    let mut sizes: Vec<usize> = (0..998).map(|_| rng.gen_range(1..=4 * MIB)).collect();
    sizes.extend([1, 4 * MIB]);
    let mut next_idx: Option<u16> = None;
    let mut next_done: u16 = 0;
    let (mut want, mut got) = (Vec::new(), Vec::new());
    for (i, chunk) in sizes.chunks(SLOTS).enumerate() {
        let mut batch = Vec::new();
        for (slot, &len) in chunk.iter().enumerate() {
            let src_off = rng.gen_range(0..=src.len() - len);
            let dst_off = slot * 4 * MIB;
            dst.fill(dst_off, len, 0xEE).expect("poison");
            let idx = dma
                .copy(&src, src_off, &dst, dst_off, len as u32, false)
                .expect("enqueue");
            match next_idx {
                Some(n) => assert_eq!(idx, n, "enqueue index not monotonic"),
                None => next_done = idx,
            }
            next_idx = Some(idx.wrapping_add(1));
            batch.push((src_off, dst_off, len));
        }
        dma.submit().expect("submit");
        wait_all(&mut dma, &mut next_done);
        for (src_off, dst_off, len) in batch {
            want.resize(len, 0);
            got.resize(len, 0);
            src.read_at(src_off, &mut want).expect("read source");
            dst.read_at(dst_off, &mut got).expect("read destination");
            assert!(
                want == got,
                "copy {i}: {len} B from {src_off} differ at byte {:?}",
                want.iter().zip(&got).position(|(a, b)| a != b)
            );
        }
    }
    println!("{} copies of 1 B ..= 4 MiB verified", sizes.len());

    // Ring indices wrap at 65 536: keep going past it with small copies.
    let before = next_idx.unwrap_or(0);
    for n in 0..70_000u32 {
        let len = 1 + (n % 64);
        let idx = loop {
            match dma.copy(&src, (n as usize * 64) % MIB, &dst, 0, len, n % 32 == 31) {
                Ok(idx) => break idx,
                Err(_) => {
                    // Ring full: drain and retry.
                    dma.submit().expect("submit");
                    wait_all(&mut dma, &mut next_done);
                }
            }
        };
        assert_eq!(Some(idx), next_idx, "enqueue index not monotonic");
        next_idx = Some(idx.wrapping_add(1));
    }
    dma.submit().expect("submit");
    wait_all(&mut dma, &mut next_done);
    // Every step above was checked to be +1 (mod 2^16); this many steps crossed 65535 -> 0.
    assert!(before as u32 + 70_000 > 65_536);
    assert_eq!(next_idx, Some(before.wrapping_add(70_000u32 as u16)));
    let st = dma.stats().expect("stats");
    println!("stats after wrap: {st:?}");
    assert_eq!(st.errors, 0);
    assert_eq!(st.submitted, st.completed);
    assert_eq!(st.completed, sizes.len() as u64 + 70_000);

    // A received frame (chained mbufs) copied into a region, minus its 14-byte header: one
    // operation per segment; the mbuf goes back to its pool when the copies complete.
    let pool = Mempool::new(&eal, "dma_frames", 255, DEFAULT_DATA_ROOM).expect("pool");
    let frame: Vec<u8> = (0..9000u32).map(|i| (i * 7 + 3) as u8).collect();
    let mut m = pool.alloc().expect("mbuf");
    m.extend_from_slice(|| pool.alloc(), &frame).expect("frame");
    assert!(m.nb_segs() > 1);
    dst.fill(MIB, 9000, 0xEE).expect("poison");
    let idx = dma
        .copy_from_mbuf(m, 14, &dst, MIB)
        .expect("copy from mbuf");
    assert_eq!(
        Some(idx.wrapping_sub(4)),
        next_idx,
        "one index per segment (5 segments)"
    );
    next_idx = Some(idx.wrapping_add(1));
    dma.submit().expect("submit");
    wait_all(&mut dma, &mut next_done);
    got.resize(9000 - 14, 0);
    dst.read_at(MIB, &mut got).expect("read");
    assert!(got[..] == frame[14..], "mbuf payload copy differs");
    assert_eq!(
        pool.in_use(),
        0,
        "the mbuf was freed after its copies completed"
    );
    assert_eq!(next_done, next_idx.unwrap_or(0));

    // A copy outside a region is refused up front, not handed to the device.
    let err = dma
        .copy(&src, src.len() - 10, &dst, 0, 100, true)
        .expect_err("out-of-range copy must fail");
    println!("out-of-range copy: {err}");
}
