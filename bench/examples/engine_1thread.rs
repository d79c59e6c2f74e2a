//! Both engines in one thread over a memlink: the instruction count per small message
//! (`valgrind --tool=callgrind target/release/examples/engine_1thread 200000`) without idle polling.
use tigon_engine::matching::match_bits;
use tigon_engine::memlink;
use tigon_engine::*;

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let (ma, mb) = (MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]));
    let (mut la, mut lb) = memlink::pair(ma, mb, 1514, 4096);
    let cfg = Config::default();
    let mut a: Engine<_, CpuCopy<HeapMemory>> =
        Engine::new(cfg.clone(), ma, 1514, CpuCopy::new(HeapMemory::default())).unwrap();
    let mut b: Engine<_, CpuCopy<HeapMemory>> =
        Engine::new(cfg, mb, 1514, CpuCopy::new(HeapMemory::default())).unwrap();
    a.open_endpoint(Some(0)).unwrap();
    let bb = b.open_endpoint(Some(0)).unwrap();
    let depth = 64;
    let sbufs: Vec<BufRef> = (0..depth)
        .map(|_| a.copy_engine_mut().mem.insert(vec![1; 64]))
        .collect();
    let rbufs: Vec<BufRef> = (0..depth)
        .map(|_| b.copy_engine_mut().mem.insert(vec![0; 64]))
        .collect();
    let spec = MatchSpec::mpi(1, ANY_SOURCE, ANY_TAG);
    let mut rslot = tigon_engine::fasthash::FastMap::default();
    for r in &rbufs {
        rslot.insert(b.irecv(0, spec, *r).unwrap(), *r);
    }
    let mut free = sbufs.clone();
    let mut sslot = tigon_engine::fasthash::FastMap::default();
    let (mut sent, mut got, mut now) = (0u64, 0u64, 0u64);
    while got < n {
        while sent < n
            && let Some(s) = free.pop()
        {
            sslot.insert(
                a.isend(0, bb, match_bits(1, 0), 0, s, SendMode::Standard)
                    .unwrap(),
                s,
            );
            sent += 1;
        }
        now += 500;
        a.poll(&mut la, now);
        b.poll(&mut lb, now);
        while let Some(c) = a.pop_completion() {
            free.push(sslot.remove(&c.req).unwrap());
        }
        while let Some(c) = b.pop_completion() {
            got += 1;
            let r = rslot.remove(&c.req).unwrap();
            rslot.insert(b.irecv(0, spec, r).unwrap(), r);
        }
    }
    println!("{n} messages");
}
