//! The port layer against real DPDK vdevs (net_ring, net_null, net_memif): mbufs and
//! chains, external buffers, ports, statistics, MTU, and the errors a user gets for bad
//! input. All tests share one EAL (DPDK initialises once per process), so this file is
//! correct both under nextest (one process per test) and plain `cargo test` (threads).

use std::sync::{Arc, OnceLock};

use tigon_pmd::{
    DEFAULT_DATA_ROOM, Eal, Error, ExtMem, Hugepages, Mbuf, Mempool, Port, PortConfig,
    check_hugepages,
};

/// A vdev whose probe fails during EAL init (no such interface): init still succeeds.
const BROKEN_VDEV: &str = "net_af_packet7,iface=tigon-nosuch0";

fn eal() -> Eal {
    static EAL: OnceLock<Eal> = OnceLock::new();
    EAL.get_or_init(|| {
        Eal::builder()
            .file_prefix(format!("tt-port-{}", std::process::id()))
            .in_memory(true)
            .no_pci(true)
            .vdev(BROKEN_VDEV)
            .log_level("warning")
            .init()
            .expect("EAL init")
    })
    .clone()
}

fn pool(name: &str, n: u32) -> Mempool {
    Mempool::new(&eal(), name, n, DEFAULT_DATA_ROOM).expect("mempool")
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn frame(pool: &Mempool, bytes: &[u8]) -> Mbuf {
    let mut m = pool.alloc().expect("alloc");
    m.extend_from_slice(|| pool.alloc(), bytes).expect("extend");
    m
}

#[test]
fn second_eal_init_is_an_error() {
    let _eal = eal();
    let err = Eal::builder()
        .in_memory(true)
        .init()
        .expect_err("second init");
    assert!(matches!(err, Error::EalAlreadyInitialized), "{err:?}");
    assert!(err.to_string().contains("only once per process"));
    assert!(Eal::current().is_some());
}

#[test]
fn missing_hugepage_mount_is_reported_with_the_fix() {
    let dir = std::env::temp_dir().join(format!("tigon-not-huge-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let err = check_hugepages(Some(&dir)).expect_err("a tmp dir is no hugetlbfs");
    let msg = err.to_string();
    println!("{msg}");
    assert!(matches!(err, Error::Hugepages(_)));
    assert!(msg.contains("not a hugetlbfs mount"), "{msg}");
    assert!(msg.contains("mount -t hugetlbfs"), "{msg}");
    assert!(msg.contains("--no-huge"), "{msg}");
    // The builder refuses before touching DPDK (so it cannot consume the one init).
    let err = Eal::builder()
        .hugepages(Hugepages::Required)
        .huge_dir(&dir)
        .init()
        .expect_err("builder must refuse");
    assert!(matches!(err, Error::Hugepages(_)), "{err:?}");
    // Explicitly without hugepages there is nothing to check.
    let args = Eal::builder()
        .hugepages(Hugepages::Off)
        .eal_args()
        .expect("args");
    assert!(args.iter().any(|a| a == "--no-huge"));
    let _ = std::fs::remove_dir(&dir);
}

#[test]
fn wrong_devargs_are_reported_with_the_devargs() {
    let eal = eal();
    let p = pool("bad_devargs", 255);
    let cfg = PortConfig::default();
    for devargs in [
        "net_nosuchdriver0,foo=bar",
        "net_memif5,role=emperor",
        BROKEN_VDEV,
        "net_af_packet7",
        "",
    ] {
        let err = Port::open(&eal, devargs, &p, &cfg).expect_err(devargs);
        let msg = err.to_string();
        println!("{devargs:?}: {msg}");
        assert!(matches!(err, Error::PortNotFound { .. }), "{err:?}");
        assert!(msg.contains(&format!("`{devargs}`")), "{msg}");
    }
}

#[test]
fn exhausted_pool_is_an_error_not_a_crash() {
    let p = pool("tiny", 63);
    let mut held = Vec::new();
    for _ in 0..63 {
        held.push(p.alloc().expect("pool has 63 mbufs"));
    }
    let err = p.alloc().expect_err("64th alloc");
    println!("{err}");
    assert!(
        matches!(err, Error::PoolExhausted { size: 63, .. }),
        "{err:?}"
    );
    let mut bulk = Vec::new();
    assert!(p.alloc_bulk(2, &mut bulk).is_err());
    assert!(bulk.is_empty());
    // A frame that needs more segments than the pool has left fails cleanly too.
    held.pop();
    let mut m = p.alloc().expect("one mbuf back");
    assert!(matches!(
        m.extend_from_slice(|| p.alloc(), &pattern(5000, 1)),
        Err(Error::PoolExhausted { .. })
    ));
    drop(m);
    drop(held);
    assert_eq!(p.in_use(), 0);
    assert_eq!(p.available(), 63);
}

#[test]
fn mbuf_chains_clones_and_frees() {
    let p = pool("chains", 255);
    let bytes = pattern(9000, 3);
    let mut m = frame(&p, &bytes);
    assert_eq!(m.len(), 9000);
    assert!(m.nb_segs() >= 5, "9000 B in 2 KiB mbufs is a chain");
    assert_eq!(m.to_vec(), bytes);
    assert_eq!(m.segments().map(<[u8]>::len).sum::<usize>(), 9000);
    let mut part = vec![0u8; 3000];
    assert_eq!(m.copy_to_slice(1500, &mut part), 3000);
    assert_eq!(part, bytes[1500..4500]);

    // Clone shares every segment; mutation is refused while shared; both frees are fine.
    let in_use = p.in_use();
    let c = m.try_clone().expect("clone");
    assert_eq!(m.refcnt(), 2);
    assert!(!m.is_unique());
    assert!(matches!(m.append(1), Err(Error::Shared)));
    assert!(matches!(m.data_mut(), Err(Error::Shared)));
    assert_eq!(p.in_use(), in_use, "a clone allocates nothing");
    drop(c);
    assert!(m.is_unique());
    m.data_mut().expect("unique again")[0] = 0xAB;

    // prepend / adj / trim / chain.
    m.prepend(14).expect("headroom").fill(0x11);
    assert_eq!(m.len(), 9014);
    m.adj(14).expect("adj");
    // The last 2 KiB segment holds 9000 - 4 * 2048 = 808 bytes: trim works within it.
    assert!(m.trim(1000).is_err());
    m.trim(800).expect("trim");
    assert_eq!(m.len(), 8200);
    let tail = frame(&p, &pattern(100, 9));
    m.chain(tail).expect("chain");
    assert_eq!(m.len(), 8300);
    assert_eq!(m.to_vec()[8200..], pattern(100, 9)[..]);
    assert!(m.keep(0..10).is_err(), "keep cuts one-segment frames only");
    drop(m);

    // keep: a range of a one-segment frame, as adj then trim would leave it.
    let bytes = pattern(1500, 4);
    let mut a = frame(&p, &bytes);
    let mut b = frame(&p, &bytes);
    a.keep(42..1000).expect("keep");
    b.adj(42).expect("adj");
    b.trim(500).expect("trim");
    assert_eq!(
        (a.len(), a.headroom(), a.tailroom()),
        (958, b.headroom(), b.tailroom())
    );
    assert_eq!(a.to_vec(), bytes[42..1000]);
    assert!(a.keep(0..959).is_err(), "past the end");
    #[allow(clippy::reversed_empty_ranges)]
    let backwards = 10..5;
    assert!(
        a.keep(backwards).is_err(),
        "a range that ends before it starts"
    );
    let shared = a.try_clone().expect("clone");
    assert!(matches!(a.keep(1..2), Err(Error::Shared)));
    drop((a, b, shared));
    assert_eq!(p.in_use(), 0, "every segment went back to the pool");
}

#[test]
fn ring_port_loopback_carries_chained_and_external_frames() {
    let eal = eal();
    let p = pool("ring_rx", 1023);
    let mut port = Port::open(&eal, "net_ring3", &p, &PortConfig::default()).expect("net_ring");
    assert_eq!(port.driver(), "net_ring");
    let link = port.link().expect("link");
    assert!(link.up, "{link:?}");
    println!("net_ring3: mac {:02x?}, {link:?}", port.mac().expect("mac"));

    // External memory: frames straight from a registered region.
    let mem = ExtMem::new(&eal, 1 << 20).expect("extmem");
    port.dma_map(&mem).expect("dma map");
    let ext_bytes = pattern(1400, 5);
    mem.write_at(4096, &ext_bytes).expect("write");
    let ext = p.alloc_extbuf(&mem, 4096, 1400).expect("extbuf mbuf");
    assert!(ext.is_external());
    assert_eq!(ext.to_vec(), ext_bytes);
    assert!(
        Arc::strong_count(&mem) >= 3,
        "the mbuf keeps the region alive"
    );

    let frames: Vec<Vec<u8>> = vec![pattern(60, 1), pattern(1500, 2), pattern(9000, 3)];
    let mut tx: Vec<Mbuf> = frames.iter().map(|f| frame(&p, f)).collect();
    tx.push(ext);
    let n = tx.len();
    assert_eq!(port.tx_burst(0, &mut tx), n);
    assert!(tx.is_empty());
    let mut rx = Vec::new();
    assert_eq!(port.rx_burst(0, &mut rx, 32), n);
    for (m, want) in rx.iter().zip(frames.iter().chain([&ext_bytes])) {
        assert_eq!(&m.to_vec(), want);
    }
    drop(rx);
    // The last mbuf on the external buffer is gone: its reference to the region too.
    assert_eq!(Arc::strong_count(&mem), 2, "port mapping + ours");
    let st = port.stats().expect("stats");
    println!("{st:?}");
    assert_eq!(st.opackets, n as u64);
    assert_eq!(st.ipackets, n as u64);
    port.reset_stats().expect("reset");
    drop(port);
    assert_eq!(Arc::strong_count(&mem), 1);
    assert_eq!(p.in_use(), 0);
}

#[test]
fn null_port_probes_sends_and_receives() {
    let eal = eal();
    let p = pool("null_rx", 1023);
    let mut port = Port::open(&eal, "net_null4", &p, &PortConfig::default()).expect("net_null");
    let mut tx = vec![frame(&p, &pattern(64, 0)), frame(&p, &pattern(3000, 0))];
    assert_eq!(port.tx_burst(0, &mut tx), 2);
    let mut rx = Vec::new();
    assert!(
        port.rx_burst(0, &mut rx, 8) > 0,
        "net_null always has frames"
    );
    drop(rx);
    assert!(port.stats().expect("stats").opackets >= 2);
}

#[test]
fn memif_takes_mtu_1500_and_refuses_9000_with_a_clear_error() {
    let eal = eal();
    let p = pool("memif_mtu", 1023);
    let sock = format!("/tmp/tigon-mtu-{}.sock", std::process::id());
    let devargs = format!("net_memif6,role=server,socket={sock}");
    let mut port = Port::open(
        &eal,
        &devargs,
        &p,
        &PortConfig {
            mtu: Some(1500),
            ..Default::default()
        },
    )
    .expect("memif with MTU 1500");
    assert_eq!(port.mtu().expect("mtu"), 1500);
    assert!(!port.link().expect("link").up, "no peer yet");
    let err = port.set_mtu(9000).expect_err("memif refuses 9000");
    println!("{err}");
    assert!(
        matches!(
            err,
            Error::Mtu {
                requested: 9000,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("bsize"));
    drop(port);
    let _ = std::fs::remove_file(&sock);
}

#[test]
fn external_memory_on_ordinary_pages_carries_frames() {
    let eal = eal();
    let p = pool("ext_small", 255);
    let mem = ExtMem::with_hugepages(&eal, 10_000, false).expect("4 KiB-page region");
    assert_eq!(mem.page_size(), 4096);
    assert_eq!(mem.len(), 12_288, "rounded up to whole pages");
    assert!(mem.iova(0).is_some());
    // A frame spanning a page boundary.
    let bytes = pattern(3000, 7);
    mem.write_at(3000, &bytes).expect("write");
    let mut port = Port::open(&eal, "net_ring8", &p, &PortConfig::default()).expect("net_ring");
    port.dma_map(&mem).expect("dma map");
    let mut tx = vec![p.alloc_extbuf(&mem, 3000, 3000).expect("extbuf")];
    assert_eq!(port.tx_burst(0, &mut tx), 1);
    let mut rx = Vec::new();
    assert_eq!(port.rx_burst(0, &mut rx, 4), 1);
    assert_eq!(rx[0].to_vec(), bytes);
    // Out-of-range attachments are refused.
    assert!(p.alloc_extbuf(&mem, 12_000, 1000).is_err());
    assert!(mem.write_at(12_000, &[0; 1000]).is_err());
}

#[test]
fn header_mbuf_chained_to_an_external_payload() {
    let eal = eal();
    let p = pool("ext_chain", 255);
    let mem = ExtMem::new(&eal, 1 << 16).expect("region");
    let payload = pattern(5000, 4);
    mem.write_at(0, &payload).expect("write");
    let mut ext = p.alloc_extbuf(&mem, 0, 5000).expect("extbuf");
    // The shared-memory bytes are not writable through the mbuf.
    assert!(matches!(ext.data_mut(), Err(Error::Shared)));
    assert!(matches!(ext.append(1), Err(Error::Shared)));
    let mut hdr = frame(&p, &[0xAA; 14]);
    hdr.chain(ext).expect("header + payload");
    assert_eq!(hdr.len(), 5014);
    assert_eq!(hdr.nb_segs(), 2);
    // Appending after an external segment starts a fresh pool segment.
    hdr.extend_from_slice(|| p.alloc(), &[0xBB; 100])
        .expect("trailer");
    assert_eq!(hdr.nb_segs(), 3);
    let all = hdr.to_vec();
    assert_eq!(all[..14], [0xAA; 14]);
    assert_eq!(all[14..5014], payload[..]);
    assert_eq!(all[5014..], [0xBB; 100]);
    // A shared tail cannot be chained (its other handle would see foreign metadata).
    let t = frame(&p, &[1, 2, 3]);
    let t2 = t.try_clone().expect("clone");
    assert!(matches!(hdr.chain(t), Err(Error::Shared)));
    drop(t2);
    drop(hdr);
    assert_eq!(Arc::strong_count(&mem), 1);
    assert_eq!(p.in_use(), 0);
}

#[test]
fn rss_over_udp_where_the_driver_offers_it_one_queue_where_not() {
    let eal = eal();
    let p = pool("rss_rx", 2047);
    let rss = PortConfig {
        rx_queues: 4,
        rss_udp: true,
        ..Default::default()
    };
    // net_null reports RSS hash functions (its flow_type_rss_offloads): four queues, RSS on.
    let mut null = Port::open(&eal, "net_null7", &p, &rss).expect("net_null with 4 rx queues");
    assert_eq!(null.rx_queues(), 4);
    assert_ne!(null.rss(), 0, "net_null offers RSS over UDP/IPv4");
    for q in 0..4 {
        let mut rx = Vec::new();
        assert!(null.rx_burst(q, &mut rx, 4) > 0, "queue {q} is polled");
    }
    // Without RSS asked for, the queues asked for are plain queues, and more than the driver
    // has is an error, not a silent cut.
    let plain = PortConfig {
        rss_udp: false,
        ..rss.clone()
    };
    let null2 = Port::open(&eal, "net_null8", &p, &plain).expect("net_null");
    assert_eq!((null2.rx_queues(), null2.rss()), (4, 0));
    let too_many = PortConfig {
        rx_queues: u16::MAX,
        ..plain.clone()
    };
    assert!(Port::open(&eal, "net_null9", &p, &too_many).is_err());
    // memif offers no RSS: one queue, whatever was asked (with RSS, queues are an upper bound).
    let sock = format!("/tmp/tigon-rss-{}.sock", std::process::id());
    let memif = Port::open(
        &eal,
        &format!("net_memif7,role=server,socket={sock}"),
        &p,
        &rss,
    )
    .expect("memif");
    assert_eq!((memif.rx_queues(), memif.rss()), (1, 0));
    drop(memif);
    let _ = std::fs::remove_file(&sock);
}

/// An external-buffer mbuf keeps its region mapped until its last handle is freed (its
/// shared info lives in the mbuf's own buffer, not in an allocation), and goes back to its
/// pool as an ordinary mbuf with its whole data room.
#[test]
fn external_buffer_outlives_its_owner_and_returns_a_whole_mbuf() {
    let eal = eal();
    let p = pool("ext_life", 63);
    let mem = ExtMem::new(&eal, 1 << 16).expect("region");
    let payload = pattern(1000, 9);
    mem.write_at(4000, &payload).expect("write");
    let weak = Arc::downgrade(&mem);
    let frames: Vec<Mbuf> = (0..8)
        .map(|_| p.alloc_extbuf(&mem, 4000, 1000).expect("extbuf"))
        .collect();
    assert_eq!(
        Arc::strong_count(&mem),
        9,
        "one reference per attached mbuf"
    );
    let clone = frames[0].try_clone().expect("clone");
    drop(mem);
    // The owner is gone; the mbufs still read the region.
    assert!(frames.iter().all(|m| m.to_vec() == payload));
    drop(frames);
    assert_eq!(clone.to_vec(), payload, "a clone keeps the buffer");
    assert!(weak.upgrade().is_some());
    drop(clone);
    assert!(weak.upgrade().is_none(), "the last free unmaps the region");
    assert_eq!(p.in_use(), 0);
    // Reused, the mbufs are direct again with their whole room (nothing of the shared
    // info placed there is left in the way).
    let room = (DEFAULT_DATA_ROOM - tigon_pmd::HEADROOM) as usize;
    let mut all: Vec<Mbuf> = (0..63).map(|_| p.alloc().expect("alloc")).collect();
    for (i, m) in all.iter_mut().enumerate() {
        assert!(!m.is_external());
        m.append(room as u16)
            .expect("whole room")
            .copy_from_slice(&pattern(room, i as u8));
    }
    for (i, m) in all.iter().enumerate() {
        assert_eq!(m.to_vec(), pattern(room, i as u8));
    }
}

/// A pool whose data rooms lie in a region: its mbufs' bytes are in the region (as another
/// process mapping it sees them), writable through the mbufs, and the pool keeps the region
/// until it is gone.
#[test]
fn pool_with_external_data_keeps_its_frames_in_the_region() {
    let eal = eal();
    let mem = ExtMem::new(&eal, 4 << 20).expect("region");
    let p = Mempool::with_external_data(&eal, "ext_rx", 255, DEFAULT_DATA_ROOM, &mem)
        .expect("pool over the region");
    assert!(Arc::ptr_eq(p.external_data().expect("its region"), &mem));
    assert!(
        Mempool::with_external_data(&eal, "ext_big", 1 << 16, DEFAULT_DATA_ROOM, &mem).is_err(),
        "more data rooms than the region holds"
    );
    let bytes = pattern(1500, 3);
    let base = mem.as_ptr() as usize;
    let mut all = Vec::new();
    for _ in 0..255 {
        let mut r = p.alloc().expect("alloc from the region's pool");
        r.append(1500)
            .expect("the pool's own memory is writable")
            .copy_from_slice(&bytes);
        let at = r.data().as_ptr() as usize;
        assert!(
            at >= base && at + 1500 <= base + mem.len(),
            "data in the region"
        );
        let mut seen = vec![0u8; 1500];
        mem.read_at(at - base, &mut seen).unwrap();
        assert_eq!(seen, bytes, "the region shows the frame");
        all.push(r);
    }
    assert!(p.alloc().is_err(), "255 mbufs");
    drop(all);
    assert_eq!(p.in_use(), 0);
    let weak = Arc::downgrade(&mem);
    drop(mem);
    assert!(weak.upgrade().is_some(), "the pool holds its region");
    drop(p);
    assert!(weak.upgrade().is_none(), "freed with the pool");
}
