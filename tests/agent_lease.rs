//! Received frames lent to ranks: over a memif pair (receive pools in memory the ranks map
//! read-only), a small message that meets a posted receive is read by its rank where it
//! arrived, not copied into the rank's channel first; the rank gives the frame back once it
//! has copied the payload out, and a rank that leaves holding frames gives them all back.

mod common;
use common::*;
use tigon_client::{Client, Done, RecvInto};
use tigon_engine::matching::match_bits;
use tigon_engine::{MatchSpec, SendMode};

fn payload(i: usize) -> Vec<u8> {
    (0..64 + i).map(|b| (b * 7 + i) as u8).collect()
}

#[test]
fn small_messages_are_read_where_they_arrived_and_a_rank_that_leaves_gives_its_frames_back() {
    let dir = TestDir::new("lease");
    let (a, b) = memif_pair(&dir, &[]);
    lend_and_give_back(&a, &b);
}

/// The same with the receiving node's port in memif's zero-copy mode, whose buffers must be
/// DPDK's own memory: its receive pool is a memzone the rank maps read-only.
#[test]
fn a_zero_copy_memif_client_lends_its_frames_too() {
    let dir = TestDir::new("lease-zc");
    let (a, b) = memif_pair_roles(&dir, "server", "client,zero-copy=yes", &[]);
    lend_and_give_back(&a, &b);
    // And the other way, to the server's pool (a memfd of its own process).
    let tx = Client::attach(&b.socket).expect("attach to b");
    let rx = Client::attach(&a.socket).expect("attach to a");
    let r = rx
        .irecv_or_lease(MatchSpec::mpi(3, 0, 9), 256, RecvInto::Vec(vec![0; 256]))
        .expect("irecv")
        .0;
    let s = tx
        .isend(
            rx.addr(),
            match_bits(3, 9),
            0,
            &payload(7),
            SendMode::Standard,
        )
        .expect("isend");
    tx.wait(s).expect("send completes");
    match rx.wait(r).expect("receive completes") {
        Done::ReceivedInChannel { lease, .. } => {
            let mut out = vec![0u8; 256];
            let got = rx.take_lease(&lease, Some(&mut out)).expect("take");
            assert_eq!(&out[..got], &payload(7)[..]);
        }
        other => panic!("completed as {other:?}"),
    }
    assert!(num(&a.stats(), "/serve/leases") >= 1, "{}", a.stats());
}

/// `a` sends small messages to a rank of `b` that lets them be lent: read where they
/// arrived, half taken, the rest given back when the rank leaves.
fn lend_and_give_back(a: &Agent, b: &Agent) {
    let tx = Client::attach(&a.socket).expect("attach to a");
    let rx = Client::attach(&b.socket).expect("attach to b");
    let n = 40;
    let recvs: Vec<_> = (0..n)
        .map(|_| {
            rx.irecv_or_lease(MatchSpec::mpi(3, 0, 9), 256, RecvInto::Vec(vec![0; 256]))
                .expect("irecv")
                .0
        })
        .collect();
    for i in 0..n {
        let s = tx
            .isend(
                rx.addr(),
                match_bits(3, 9),
                0,
                &payload(i),
                SendMode::Standard,
            )
            .expect("isend");
        tx.wait(s).expect("send completes");
    }
    let mut leases = Vec::new();
    for (i, r) in recvs.into_iter().enumerate() {
        match rx.wait(r).expect("receive completes") {
            Done::ReceivedInChannel { lease, .. } => leases.push((i, lease)),
            other => panic!("receive {i} completed as {other:?}"),
        }
    }
    let s = b.stats();
    let lent = num(&s, "/serve/leases");
    assert!(
        lent >= n as u64 / 2,
        "frames lent for {lent} of {n} receives: {s}"
    );
    assert_eq!(num(&s, "/copies/leases_held"), lent, "{s}");
    // Half the payloads taken (copied out once, the frames given back), in any order...
    for (i, lease) in leases.iter().rev().step_by(2) {
        let mut out = vec![0u8; 256];
        let got = rx.take_lease(lease, Some(&mut out)).expect("take");
        assert_eq!(&out[..got], &payload(*i)[..], "message {i}");
        assert_eq!(
            rx.take_lease(lease, Some(&mut out)).unwrap(),
            0,
            "taken once"
        );
    }
    // ... the other half still held.
    rx.progress();
    let held = |b: &Agent| num(&b.stats(), "/copies/leases_held");
    assert!(
        eventually(std::time::Duration::from_secs(5), || held(b) < lent
            && held(b) > 0),
        "leases given back: {}",
        b.stats()
    );
    // The rank leaves holding the rest: its frames go back to the pool.
    drop(rx);
    assert!(
        eventually(std::time::Duration::from_secs(10), || held(b) == 0
            && num(&b.stats(), "/clients") == 0),
        "frames still lent after the rank left: {}",
        b.stats()
    );
    let s = b.stats();
    assert_eq!(num(&s, "/serve/clients_disconnected_garbage"), 0, "{s}");
    assert_eq!(num(&s, "/messages/failed"), 0, "{s}");
}
