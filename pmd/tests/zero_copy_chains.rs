//! A memif zero-copy port sends chained frames (a header mbuf and a payload in external
//! memory) as they are when every segment lies in DPDK's memory its peer maps (a memzone
//! reserved before the port), and linearises the others; and no mbuf is lost when a chain
//! meets a ring with one free slot left (DPDK 22.11's `memif_tx_one_zc` took a reference to
//! the head there that it never dropped; `Port::tx_burst` gives it back; 22.11.11 takes none).
//! Its own EAL as the agent starts it for such a port.

use std::sync::OnceLock;

use tigon_pmd::{DEFAULT_DATA_ROOM, Eal, ExtMem, Hugepages, Mbuf, Mempool, Port, PortConfig};

fn eal() -> Eal {
    static EAL: OnceLock<Eal> = OnceLock::new();
    EAL.get_or_init(|| {
        Eal::builder()
            .file_prefix(format!("tt-zcc-{}", std::process::id()))
            .in_memory(true)
            .single_file_segments(true)
            .hugepages(Hugepages::Auto)
            .no_pci(true)
            .log_level("warning")
            .init()
            .expect("EAL init")
    })
    .clone()
}

const HEAD: &[u8; 14] = b"HEADER-BYTES:)";

/// A frame of `HEAD` chained to `len` bytes of `mem` at `off`.
fn chain(pool: &Mempool, mem: &std::sync::Arc<ExtMem>, off: usize, len: u16) -> Mbuf {
    let mut m = pool.alloc().expect("head");
    m.append(HEAD.len() as u16).unwrap().copy_from_slice(HEAD);
    m.chain(pool.alloc_extbuf(mem, off, len).expect("extbuf"))
        .unwrap();
    m
}

/// Frames `a` receives within a few seconds, until `n` came.
fn receive(a: &mut Port, n: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut v = Vec::new();
    let t0 = std::time::Instant::now();
    while got.len() < n && t0.elapsed().as_secs() < 5 {
        a.rx_burst(0, &mut v, 64);
        got.extend(v.drain(..).map(|m| m.to_vec()));
    }
    got
}

#[test]
fn chains_in_dpdk_memory_go_out_in_place_and_none_is_lost_on_a_full_ring() {
    let eal = eal();
    // Reserved before the ports: inside what the zero-copy port offers its peer.
    let mz = ExtMem::shared_memzone(&eal, "tt_zc_slot", 2 << 20).expect("memzone");
    let fd = {
        let r = tigon_shm::Region::create("tt-zc-memfd", 1 << 20, false).unwrap();
        r.fd().try_clone().unwrap()
    };
    let outside = ExtMem::from_fd_unregistered(&eal, fd, 1 << 20, 4096).expect("memfd");
    let sock = std::env::temp_dir().join(format!("tt-zcc-{}.sock", std::process::id()));
    let pool = |n: &str| Mempool::new(&eal, n, 4095, DEFAULT_DATA_ROOM).expect("pool");
    let (pa, pb) = (pool("tt_zcc_a"), pool("tt_zcc_b"));
    let port = |dev: &str, p: &Mempool| {
        Port::open(
            &eal,
            &format!("{dev},socket={}", sock.display()),
            p,
            &PortConfig::default(),
        )
        .expect("memif port")
    };
    let mut a = port("net_memif0,role=server", &pa);
    let mut b = port("net_memif1,role=client,zero-copy=yes", &pb);
    let t0 = std::time::Instant::now();
    while !b.link().is_ok_and(|l| l.up) || !a.link().is_ok_and(|l| l.up) {
        assert!(t0.elapsed().as_secs() < 10, "memif never connected");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(b.tx_chains(), "the zero-copy port sends chains");
    assert!(b.sends_in_place(&mz) && !b.sends_in_place(&outside));
    assert!(
        a.sends_in_place(&outside),
        "a copying port sends any memory"
    );

    // In place: the peer copies the payload when it receives, so a change made after the
    // send shows; the memfd payload was copied at the send (linearised), so it does not.
    mz.write_at(4096, &[1u8; 200]).unwrap();
    outside.write_at(0, &[2u8; 200]).unwrap();
    let mut tx = vec![chain(&pb, &mz, 4096, 200), chain(&pb, &outside, 0, 200)];
    assert_eq!(b.tx_burst(0, &mut tx), 2);
    mz.write_at(4096, &[3u8; 200]).unwrap();
    outside.write_at(0, &[4u8; 200]).unwrap();
    let got = receive(&mut a, 2);
    assert_eq!(got.len(), 2);
    assert_eq!(&got[0][..14], HEAD);
    assert_eq!(got[0][14..], [3u8; 200], "sent from where it lies");
    assert_eq!(got[1][14..], [2u8; 200], "copied when sent");

    // Fill the ring (the server not receiving), drain it, then leave one slot free: a chain
    // then stays unsent, and its head keeps one reference, ours.
    let single = |n: usize| -> Vec<Mbuf> {
        (0..n)
            .map(|_| {
                let mut m = pb.alloc().expect("frame");
                m.append(60).unwrap().fill(9);
                m
            })
            .collect()
    };
    let mut fill = single(2048);
    let ring = b.tx_burst(0, &mut fill);
    assert!(ring >= 64 && !fill.is_empty(), "a full ring took {ring}");
    drop(fill);
    assert_eq!(receive(&mut a, ring).len(), ring);
    let mut almost = single(ring - 1);
    assert_eq!(b.tx_burst(0, &mut almost), ring - 1);
    let mut c = vec![chain(&pb, &mz, 0, 100)];
    assert_eq!(b.tx_burst(0, &mut c), 0, "no room for two segments");
    assert_eq!(
        c[0].refcnt(),
        1,
        "memif's reference to the unsent head given back"
    );
    assert_eq!(receive(&mut a, ring - 1).len(), ring - 1);
    assert_eq!(b.tx_burst(0, &mut c), 1, "sent once there is room");
    assert_eq!(receive(&mut a, 1).len(), 1);
    // The next burst frees what the peer has consumed: every mbuf is back in the pool.
    b.tx_burst(0, &mut Vec::new());
    assert_eq!(pb.in_use(), 0, "no mbuf lost");
    // Not closed: see shared_memzone.rs (DPDK 22.11's memif close race); the process ends.
    std::mem::forget(b);
    std::mem::forget(a);
}
