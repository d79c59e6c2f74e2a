//! Arbitrary frames fed to a live engine (with a posted receive and an open connection) never
//! panic it. The checksum is fixed up so the fuzzer reaches the protocol, not just the parser.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tigon_engine::sim::{Faults, SimNet};
use tigon_engine::wire::Frame;
use tigon_engine::*;

fuzz_target!(|data: &[u8]| {
    let net = SimNet::new(Faults::default(), 1);
    let (ma, mb) = (MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]));
    let mut pb = net.port(mb, 1514);
    let mut fuzzer = net.port(ma, 1514);
    let mut e: Engine<_, CpuCopy<HeapMemory>> =
        Engine::new(Config::default(), mb, 1514, CpuCopy::new(HeapMemory::default())).unwrap();
    e.open_endpoint(Some(0)).unwrap();
    let buf = e.copy_engine_mut().mem.insert(vec![0; 4096]);
    e.irecv(0, MatchSpec::mpi(0, ANY_SOURCE, ANY_TAG), buf).unwrap();
    for chunk in data.split(|&b| b == 0xff).take(64) {
        let mut f = chunk.to_vec();
        // Any frame that holds its header (full, compact or pull) gets a valid checksum.
        if f.len() >= Frame::new_unchecked(&f[..]).payload_offset() {
            f[..6].copy_from_slice(&mb.0);
            Frame::new_unchecked(&mut f[..]).fill_checksum();
        }
        Link::tx_burst(&mut fuzzer, &mut vec![f]);
        e.poll(&mut pb, 1_000);
    }
});
