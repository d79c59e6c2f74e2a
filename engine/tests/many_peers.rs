//! The lossy link with many peers: 10,000 messages among 256 nodes x 4 ranks (1,024
//! endpoints, each engine talking to dozens of peers at once) on a link that loses,
//! duplicates, reorders and corrupts frames. Every message arrives exactly once, intact, in
//! per-sender order, with the right match bits.

mod common;
use common::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use tigon_engine::matching::match_bits;
use tigon_engine::sim::Faults;
use tigon_engine::*;

/// A posted receive: its (sender, receiver) ranks, message index, and buffer.
type PendingRecv = ((usize, usize), usize, BufRef);

const NODES: usize = 256;
const EPS: usize = 4;
const CTX: u32 = 5;

fn size(rng: &mut SmallRng) -> usize {
    match rng.gen_range(0..100) {
        0..=4 => rng.gen_range(32 * 1024..=96 * 1024),
        5..=24 => rng.gen_range(1400..=32 * 1024),
        25..=29 => 0,
        _ => rng.gen_range(1..1400),
    }
}

#[test]
fn ten_thousand_messages_among_1024_ranks_on_256_nodes_hostile_link() {
    let faults = Faults {
        loss: 0.05,
        duplicate: 0.02,
        reorder: 0.05,
        corrupt: 0.01,
        delay_ns: 10_000,
        reorder_ns: 40_000,
    };
    let mut w = World::new(NODES, faults, 21, Config::default());
    let ranks = NODES * EPS;
    let addr: Vec<EndpointAddr> = (0..ranks)
        .map(|r| {
            w.nodes[r / EPS]
                .eng
                .open_endpoint(Some((r % EPS) as u16))
                .unwrap()
        })
        .collect();
    // The plan: 10,000 messages between random ranks on different nodes, in send order per pair.
    let mut rng = SmallRng::seed_from_u64(21);
    let mut plan: HashMap<(usize, usize), Vec<usize>> = HashMap::new();
    for _ in 0..10_000 {
        let s = rng.gen_range(0..ranks);
        let r = loop {
            let r = rng.gen_range(0..ranks);
            if r / EPS != s / EPS {
                break r;
            }
        };
        plan.entry((s, r)).or_default().push(size(&mut rng));
    }
    let mut pairs: Vec<(usize, usize)> = plan.keys().copied().collect();
    pairs.sort();
    // Receives of half the pairs are posted first; the other half find their messages
    // waiting (unexpected eager data or an RTS).
    let mut recvs: HashMap<(usize, ReqId), PendingRecv> = HashMap::new();
    let post = |w: &mut World, recvs: &mut HashMap<_, _>, early: bool| {
        for &(s, r) in pairs.iter().filter(|(s, r)| ((s + r) % 2 == 0) == early) {
            for (k, &len) in plan[&(s, r)].iter().enumerate() {
                let buf = w.mem(r / EPS).insert(vec![0xee; len]);
                let id = w.nodes[r / EPS]
                    .eng
                    .irecv(
                        (r % EPS) as u16,
                        MatchSpec::mpi(CTX, s as i32, ANY_TAG),
                        buf,
                    )
                    .unwrap();
                recvs.insert((r / EPS, id), ((s, r), k, buf));
            }
        }
    };
    post(&mut w, &mut recvs, true);
    let mut sends: HashMap<(usize, ReqId), BufRef> = HashMap::new();
    for &(s, r) in &pairs {
        for (k, &len) in plan[&(s, r)].iter().enumerate() {
            let buf = w.mem(s / EPS).insert(pattern(s as u32, k as u32, len));
            let mode = if k % 7 == 3 {
                SendMode::Synchronous
            } else {
                SendMode::Standard
            };
            let id = w.nodes[s / EPS]
                .eng
                .isend(
                    (s % EPS) as u16,
                    addr[r],
                    match_bits(CTX, (k % 5) as i32),
                    s as u32,
                    buf,
                    mode,
                )
                .unwrap();
            sends.insert((s / EPS, id), buf);
        }
    }
    let total = 2 * 10_000;
    let mut done = 0;
    let mut late_posted = false;
    let mut steps = 0u64;
    while done < total {
        steps += 1;
        assert!(steps < 5_000_000, "no progress: {done}/{total} completions");
        if !late_posted && steps == 2_000 {
            post(&mut w, &mut recvs, false);
            late_posted = true;
        }
        w.step();
        for i in 0..NODES {
            while let Some(c) = w.nodes[i].eng.pop_completion() {
                done += 1;
                match c.result {
                    Ok(Outcome::Sent) => {
                        let buf = sends.remove(&(i, c.req)).expect("unknown send");
                        w.mem(i).take(&buf);
                    }
                    Ok(Outcome::Received { info, received, .. }) => {
                        let ((s, r), k, buf) = recvs.remove(&(i, c.req)).expect("unknown recv");
                        let len = plan[&(s, r)][k];
                        assert_eq!(info.src_rank as usize, s);
                        assert_eq!(info.match_bits, match_bits(CTX, (k % 5) as i32));
                        assert_eq!(received, len as u64);
                        let got = w.mem(i).take(&buf).unwrap();
                        assert!(
                            got == pattern(s as u32, k as u32, len),
                            "message {k} from rank {s} to {r} ({len} B) corrupted or out of order"
                        );
                    }
                    Err(e) => panic!("operation failed: {e}"),
                }
            }
        }
    }
    assert!(sends.is_empty() && recvs.is_empty());
    let st = w.net.stats();
    assert!(st.lost > 0 && st.corrupted > 0 && st.duplicated > 0 && st.reordered > 0);
    // Reliability state is per pair of NODES: each node pair that carried a message holds one
    // peer at each end, however many of their ranks talked.
    let node_pairs: std::collections::HashSet<(usize, usize)> = pairs
        .iter()
        .map(|&(s, r)| ((s / EPS).min(r / EPS), (s / EPS).max(r / EPS)))
        .collect();
    let peers: u64 = w.nodes.iter().map(|n| n.eng.stats.peers).sum();
    assert_eq!(peers, 2 * node_pairs.len() as u64);
    assert!(
        node_pairs.len() < pairs.len(),
        "ranks of a node share sessions"
    );
}
