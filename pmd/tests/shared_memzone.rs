//! DPDK's own memory shared read-only (`ExtMem::shared_memzone`), as a process with a memif
//! zero-copy port shares its receive frames: a memzone in the first memseg list whose bytes
//! another mapping of the list's file shows, through a descriptor that cannot write, and a
//! pool whose frames lie there. Its own EAL (`--in-memory --single-file-segments`, as the
//! agent starts it for such a port), so a file of its own. And that file's descriptor, which
//! memif's zero-copy client closes under the EAL when it connects, put back.

use std::io::Write;
use std::sync::OnceLock;

use tigon_pmd::{
    DEFAULT_DATA_ROOM, Eal, ExtMem, Hugepages, JUMBO_DATA_ROOM, Mempool, MemsegFd, MemsegFdState,
    Port, PortConfig,
};
use tigon_shm::ReadOnlyRegion;

fn eal() -> Eal {
    static EAL: OnceLock<Eal> = OnceLock::new();
    EAL.get_or_init(|| {
        Eal::builder()
            .file_prefix(format!("tt-mz-{}", std::process::id()))
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

#[test]
fn a_memzone_is_shared_read_only_and_holds_a_pools_frames() {
    let eal = eal();
    // Hugepages are needed (scripts/setup.sh reserves some): without, this says so.
    let mem = ExtMem::shared_memzone(&eal, "tt_frames", 5 << 20).expect("shared memzone");
    assert!(mem.is_dpdk_memory() && mem.is_registered());
    let page = mem.page_size();
    assert_eq!(mem.len(), 6 << 20, "whole pages");
    assert_eq!(mem.file_offset() % page as u64, 0, "mappable");
    assert_eq!(mem.as_ptr() as usize % page, 0, "aligned");

    // Another mapping of the file at that offset (as a rank maps it) shows the same bytes.
    let ro = ReadOnlyRegion::from_fd_at(
        mem.fd().try_clone_to_owned().unwrap(),
        mem.file_offset(),
        mem.len(),
    )
    .expect("map the memzone's range of DPDK's file");
    let far = mem.len() - 100;
    mem.write_at(far, b"last page").unwrap();
    mem.write_at(3, b"first page").unwrap();
    let mut b = [0u8; 10];
    ro.read(3, &mut b).unwrap();
    assert_eq!(&b, b"first page");
    ro.read(far, &mut b[..9]).unwrap();
    assert_eq!(&b[..9], b"last page");

    // The descriptor passed on cannot write the file.
    let mut f = std::fs::File::from(mem.fd().try_clone_to_owned().unwrap());
    assert!(f.write(b"x").is_err(), "a read-only descriptor");

    // A pool over it: every frame's bytes in the shared range.
    let p = Mempool::with_external_data(&eal, "tt_rx", 511, DEFAULT_DATA_ROOM, &mem)
        .expect("pool over DPDK memory");
    let base = mem.as_ptr() as usize;
    let mut held = Vec::new();
    for i in 0..511u32 {
        let mut m = p.alloc().expect("alloc");
        let data = m.append(64).expect("room");
        data.fill(i as u8);
        let at = data.as_ptr() as usize;
        assert!(
            at >= base && at + 64 <= base + mem.len(),
            "frame in the memzone"
        );
        let mut seen = [0u8; 64];
        ro.read(at - base, &mut seen).unwrap();
        assert_eq!(seen, [i as u8; 64], "the other mapping sees frame {i}");
        held.push(m);
    }
    drop(held);
    assert_eq!(p.in_use(), 0);

    // Too large a pool for it is refused, not spilled outside.
    assert!(Mempool::with_external_data(&eal, "tt_big", 4095, JUMBO_DATA_ROOM, &mem).is_err());
    // Bad names are refused.
    assert!(ExtMem::shared_memzone(&eal, "", 1 << 20).is_err());
    assert!(ExtMem::shared_memzone(&eal, &"n".repeat(40), 1 << 20).is_err());
}

/// DPDK 22.11's memif zero-copy client closes the EAL's own descriptor of its first memseg
/// list's file when it connects (`memif_connect`); `MemsegFd` puts the file back under the
/// EAL's number, so the EAL does not go on using a number that names some other file.
#[test]
fn a_zero_copy_memif_connection_closes_dpdks_memory_file_and_it_is_put_back() {
    let eal = eal();
    let fd = MemsegFd::first_list(&eal).expect("the first list's file");
    assert_eq!(fd.restore(), MemsegFdState::Intact, "nothing closed it yet");
    let sock = std::env::temp_dir().join(format!("tt-mz-{}.sock", std::process::id()));
    let pool = |n: &str| Mempool::new(&eal, n, 1023, DEFAULT_DATA_ROOM).expect("pool");
    let (pa, pb) = (pool("tt_mif_a"), pool("tt_mif_b"));
    let port = |dev: &str, p: &Mempool| {
        Port::open(
            &eal,
            &format!("{dev},socket={}", sock.display()),
            p,
            &PortConfig::default(),
        )
        .expect("memif port")
    };
    let a = port("net_memif0,role=server", &pa);
    let b = port("net_memif1,role=client,zero-copy=yes", &pb);
    let t0 = std::time::Instant::now();
    while !b.link().is_ok_and(|l| l.up) {
        assert!(t0.elapsed().as_secs() < 10, "memif never connected");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // Connected: the EAL's descriptor is gone (nothing in this process opened another in
    // between to take its number), and comes back.
    assert_eq!(fd.restore(), MemsegFdState::Restored);
    assert_eq!(fd.restore(), MemsegFdState::Intact);
    let again = MemsegFd::first_list(&eal).expect("the list's file again");
    assert_eq!(
        again.number(),
        fd.number(),
        "the EAL's number names its file"
    );
    // Not closed: DPDK 22.11's memif can crash EAL's interrupt thread when a port is closed
    // while that thread handles a control message of the pair (SIGSEGV in eal-intr-thread
    // inside memif's message handling, 1 run in ~20 under parallel tests, also with the
    // client closed first and the server's link seen down); the process ends here anyway.
    std::mem::forget(b);
    std::mem::forget(a);
}
