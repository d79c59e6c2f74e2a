//! Received frames lent to ranks: over a memif pair (receive pools in memory the ranks map
//! read-only), a small message that meets a posted receive is read by its rank where it
//! arrived, not copied into the rank's channel first; the rank gives the frame back once it
//! has copied the payload out, and a rank that leaves holding frames gives them all back.

mod common;
use common::*;
use tigon_client::{Client, Done, RecvInto, Req, Status};
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
    // Without --lend-large no fragment is lent: the clients need not say when they poll.
    let c = Client::attach(&b.socket).expect("attach to b");
    assert!(
        !c.lends(),
        "a client of an agent that does not lend keeps its polled word"
    );
    drop(c);
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

fn big(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(2_654_435_761)
                .rotate_left(seed as u32) as u8
        })
        .collect()
}

/// Copies of a large message's payload at the receiving node: lent to the rank, which copied
/// them (`lent_bytes`, counted as the rank's), and written by the engine (`direct_bytes`).
fn lent_and_written(b: &Agent) -> (u64, u64, u64) {
    let s = b.stats();
    (
        num(&s, "/copies/lent_bytes"),
        num(&s, "/copies/direct_bytes"),
        num(&s, "/copies/rank_bytes"),
    )
}

fn held(b: &Agent) -> u64 {
    num(&b.stats(), "/copies/leases_held")
}

/// A receiver whose waits poll to the end (never nap: a transfer slowed by other work on
/// the machine must not make it sleep, and so stop being lent frames, before they come).
fn polling_receiver(b: &Agent) -> Client {
    tigon_client::set_wait_policy(false, None);
    Client::attach(&b.socket).expect("attach to b")
}

/// A rendezvous message whose rank waits for it: the engine lends the frames it arrives in
/// to the rank, which copies them into its buffer on its own core (the engine then copies
/// each byte once, reading the sender's buffer, not three times); every byte reaches the
/// buffer once, by the rank or by the engine, and every frame goes back.
#[test]
fn a_large_message_is_copied_by_the_rank_that_waits_for_it() {
    let dir = TestDir::new("lend-large");
    let (a, b) = memif_pair(&dir, &["--lend-large"]);
    let tx = Client::attach(&a.socket).expect("attach to a");
    let rx = polling_receiver(&b);
    // A client of a lending agent is told so at attach (then it says when it polls).
    assert!(rx.lends(), "the agent lends, the client does not know");
    let len = 4 << 20;
    let data = big(len, 1);
    let (status, lent, rank) = until_lent(&b, || {
        let (r, s) = post_large(&tx, &rx, &data, len);
        let (status, v) = received(&rx, r);
        assert!(v == data, "payload differs");
        tx.wait(s).expect("send completes");
        (status, len)
    });
    assert!(!status.truncated);
    assert_eq!(status.received, len as u64);
    assert_eq!(rank, lent, "the rank counts what it copied: {}", b.stats());
    assert!(
        eventually(std::time::Duration::from_secs(5), || held(&b) == 0),
        "frames still lent: {}",
        b.stats()
    );
}

/// Runs `transfer` (one large message to a polling rank of `b`; it checks the payload and
/// returns the status and the bytes that reach the buffer) until `b` lent some of its
/// frames, at most 5 times; in each, every byte that reached the buffer was lent or written,
/// once. Returns the last status, and the bytes lent and copied by ranks over all tries.
/// Lending needs the receiving thread to run while the frames come in: on a machine
/// overloaded by other tests it may not, for a whole transfer (then the engine rightly
/// writes every byte); five such in a row are a lending that does not work.
fn until_lent(b: &Agent, mut transfer: impl FnMut() -> (Status, usize)) -> (Status, u64, u64) {
    for _ in 0..5 {
        let (lent0, written0, _) = lent_and_written(b);
        let (status, reached) = transfer();
        let (lent, written, rank) = lent_and_written(b);
        assert_eq!(
            (lent - lent0) + (written - written0),
            reached as u64,
            "{}",
            b.stats()
        );
        if lent > lent0 {
            return (status, lent, rank);
        }
    }
    panic!(
        "nothing lent to a waiting rank in 5 transfers: {}",
        b.stats()
    );
}

/// A receive into a buffer shorter than the message: what fits is delivered, lent or not,
/// and the status says truncated.
#[test]
fn a_truncated_large_receive_gets_what_fits_and_says_so() {
    let dir = TestDir::new("lend-trunc");
    let (a, b) = memif_pair(&dir, &["--lend-large"]);
    let tx = Client::attach(&a.socket).expect("attach to a");
    let rx = polling_receiver(&b);
    let (len, cap) = (3 << 20, (1 << 20) + 5);
    let data = big(len, 2);
    until_lent(&b, || {
        let (r, s) = post_large(&tx, &rx, &data, cap);
        let (status, v) = received(&rx, r);
        assert!(status.truncated, "{status:?}");
        assert_eq!((status.len, status.received), (len as u64, cap as u64));
        assert!(v[..] == data[..cap], "payload differs");
        tx.wait(s).expect("send completes");
        (status, cap)
    });
}

/// A rank that stops polling in the middle of a transfer (it computes) no longer gets frames
/// lent: the engine writes the rest into its buffer, the transfer goes on without it (the
/// send completes while the rank does nothing), and the rank, back in MPI, copies what it
/// was lent before and has the whole message.
#[test]
fn a_rank_that_stops_polling_mid_transfer_does_not_stall_it() {
    let dir = TestDir::new("lend-stop");
    let (a, b) = memif_pair(&dir, &["--lend-large"]);
    let tx = Client::attach(&a.socket).expect("attach to a");
    let rx = polling_receiver(&b);
    let len = 32 << 20;
    let data = big(len, 3);
    let (r, s) = post_large(&tx, &rx, &data, len);
    // Poll until the first lent frames are copied, then stop.
    let t0 = std::time::Instant::now();
    loop {
        rx.polling();
        if rx.progress() > 0 {
            break;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "nothing lent in a minute: {}",
            b.stats()
        );
    }
    tx.wait(s)
        .expect("the send completes while the receiver computes");
    let (lent, written, _) = lent_and_written(&b);
    assert!(lent > 0 && written > 0, "{}", b.stats());
    assert!(
        num(&b.stats(), "/copies/unlent_fragments/not_polling") > 0,
        "the engine did not notice the rank stopped polling: {}",
        b.stats()
    );
    let (status, v) = received(&rx, r);
    assert_eq!(status.received, len as u64);
    assert!(v == data, "payload differs");
    let (lent, written, _) = lent_and_written(&b);
    assert_eq!(lent + written, len as u64, "{}", b.stats());
    assert!(
        eventually(std::time::Duration::from_secs(5), || held(&b) == 0),
        "{}",
        b.stats()
    );
}

/// A rank killed while it holds lent frames of a large receive (it polled, never copied)
/// gives them all back; the transfer did not wait for it (bounded lending: past its lease
/// slots the engine wrote the rest).
#[test]
fn a_rank_killed_holding_lent_frames_gives_them_back() {
    let dir = TestDir::new("lend-kill");
    let (a, b) = memif_pair(&dir, &["--lend-large"]);
    let mut p = Peer::spawn(&dir, &b, "rx", None, 0, &["hold-lent"]);
    p.wait_line(std::time::Duration::from_secs(30), |l| l == "holding");
    let addr = std::fs::read_to_string(dir.addr().join("rx")).expect("peer address");
    let to: tigon_engine::Dest = addr.trim().parse().expect("an endpoint address");
    let tx = Client::attach(&a.socket).expect("attach to a");
    let s = tx
        .isend_vec(
            to,
            match_bits(1, 999),
            0,
            big(16 << 20, 4),
            SendMode::Standard,
        )
        .expect("isend");
    tx.wait(s)
        .expect("the send completes while the receiver holds lent frames");
    let h = held(&b);
    assert!(
        h > 0 && h <= tigon_engine::channel::LEASE_SLOTS as u64,
        "{h} frames held: {}",
        b.stats()
    );
    p.kill();
    assert!(
        eventually(std::time::Duration::from_secs(10), || held(&b) == 0
            && num(&b.stats(), "/clients") == 0),
        "frames still lent after the rank died: {}",
        b.stats()
    );
    assert_eq!(
        num(&b.stats(), "/serve/clients_disconnected_garbage"),
        0,
        "{}",
        b.stats()
    );
}

/// `rx` posts a receive of `cap` bytes (context 3, source 0, tag 9) and `tx` sends it `data`.
fn post_large(tx: &Client, rx: &Client, data: &[u8], cap: usize) -> (Req, Req) {
    let r = rx
        .irecv(MatchSpec::mpi(3, 0, 9), RecvInto::Vec(vec![0; cap]))
        .expect("irecv");
    // The receiver says it polls before the first fragment can arrive, as a rank that posts
    // and then waits does (its wait loop would say it only once it runs): a test thread
    // descheduled between the send and its wait (CI's parallel tests) had every fragment
    // written by the engine, none lent (`unlent_fragments.not_polling` 721 of 721).
    rx.polling();
    let s = tx
        .isend_vec(
            rx.addr(),
            match_bits(3, 9),
            0,
            data.to_vec(),
            SendMode::Standard,
        )
        .expect("isend");
    (r, s)
}

/// Waits for receive `r` of `rx`: its status and the bytes it got.
fn received(rx: &Client, r: Req) -> (Status, Vec<u8>) {
    match rx.wait(r).expect("receive completes") {
        Done::Received {
            status,
            data: Some(v),
        } => (status, v),
        other => panic!("completed as {other:?}"),
    }
}
