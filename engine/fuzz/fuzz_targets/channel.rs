//! A rank's side of its shared-memory channel is untrusted: whatever a client writes into
//! the request ring and the lease ring, the agent's reading of them (`Ring::pop`,
//! `Channel::take_request`) gives requests or errors, never a panic, and a request's data
//! buffer always lies inside the region. And a client opening a channel whose header holds
//! any geometry gets a channel or an error.
//!
//! Input: three u32 (n_desc, n_data, data_size) for the client's header; the request ring's
//! producer and consumer counts and the lease ring's (4 × u32); 4 lease slots (u32 each);
//! then up to 8 request slots of `SLOT_LEN` bytes (each an entry word, then the request's
//! bytes).
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};
use tigon_engine::channel::{Channel, Geometry, LEASE_SLOTS, Payload, Request};
use tigon_engine_fuzz::Input;
use tigon_shm::Region;

const GEO: Geometry = Geometry {
    n_desc: 8,
    n_data: 4,
    data_size: 1024,
};
/// Offsets in a ring: producer count, consumer count (each on its own line), slots.
const PROD: usize = 0;
const CONS: usize = 64;
const SLOTS: usize = 128;
/// Bytes of a request-ring slot (a cache line: the entry word and the request).
const SLOT_LEN: usize = 64;

fn region(len: usize) -> Arc<Region> {
    Arc::new(Region::create("tigon-fuzz", len, false).expect("memfd region"))
}

fuzz_target!(|data: &[u8]| {
    static AGENT: OnceLock<Arc<Region>> = OnceLock::new();
    static CLIENT: OnceLock<Arc<Region>> = OnceLock::new();
    let mut input = Input::new(data);
    let mut word = || {
        input
            .u16()
            .zip(input.u16())
            .map(|(lo, hi)| u32::from(lo) | u32::from(hi) << 16)
    };

    // The client side: a header with the input's geometry.
    let client = CLIENT.get_or_init(|| region(1 << 16)).clone();
    client.write(0, &vec![0u8; client.len()]).expect("clear");
    Channel::init(client.clone(), GEO, 1, 2).expect("a valid geometry");
    for at in [12, 16, 20] {
        let w = word().unwrap_or(0);
        client.write(at, &w.to_le_bytes()).expect("header");
    }
    if let Ok(ch) = Channel::open(client) {
        assert!(ch.geo.len() <= ch.region.len());
    }

    // The agent side: rings and descriptors as the client left them.
    let r = AGENT.get_or_init(|| region(GEO.len())).clone();
    r.write(0, &vec![0u8; r.len()]).expect("clear");
    let ch = Channel::init(r.clone(), GEO, 1, 2).expect("a valid geometry");
    let (req, lease) = (GEO.req_ring_off(), GEO.lease_ring_off());
    let counts = [req + PROD, req + CONS, lease + PROD, lease + CONS];
    let lease_slots = (0..4).map(|i| lease + SLOTS + 4 * i);
    for at in counts.into_iter().chain(lease_slots) {
        r.write(at, &word().unwrap_or(0).to_le_bytes())
            .expect("ring");
    }
    for i in 0..GEO.n_desc as usize {
        let slot = input.bytes(SLOT_LEN);
        r.write(req + SLOTS + i * SLOT_LEN, slot)
            .expect("request slot");
    }

    for _ in 0..2 * GEO.n_desc {
        let Ok(Some((_, sub))) = ch.take_request() else {
            break;
        };
        let Ok(sub) = sub else {
            continue;
        };
        let payload = match sub.request {
            Request::Send { payload, .. }
            | Request::Recv { payload, .. }
            | Request::MRecv { payload, .. } => payload,
            _ => continue,
        };
        if let Payload::Buffer { offset, len } | Payload::Lease { offset, len } = payload {
            assert!(
                offset >= GEO.data_off() as u64,
                "buffer at {offset} before the data area"
            );
            assert!(
                offset + len <= r.len() as u64,
                "buffer {offset}+{len} past the region"
            );
        }
    }
    for _ in 0..LEASE_SLOTS {
        let Ok(Some(_)) = ch.leases.pop() else { break };
    }
});
