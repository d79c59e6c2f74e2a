//! Arbitrary frames, and genuine ones mutated, dropped or replayed, reaching a live engine
//! mid-exchange never panic it, over raw Ethernet and over UDP/IPv4: two engines talk
//! through a man in the middle the input drives (`tigon_engine_fuzz::duet`, which documents
//! the input's operations). Checksums can be fixed up, so the fuzzer reaches the protocol,
//! not just the parser.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    tigon_engine_fuzz::duet::Duet::run(data);
});
