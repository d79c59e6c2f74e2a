//! One test per MPI matching rule, over a clean simulated link.

mod common;
use common::*;
use tigon_engine::matching::match_bits;
use tigon_engine::sim::Faults;
use tigon_engine::*;

const CTX: u32 = 3;

fn world() -> World {
    World::new(
        2,
        Faults {
            delay_ns: 5_000,
            ..Faults::default()
        },
        1,
        Config::default(),
    )
}

fn open(w: &mut World) -> (EndpointAddr, EndpointAddr) {
    let a = w.nodes[0].eng.open_endpoint(Some(0)).unwrap();
    let b = w.nodes[1].eng.open_endpoint(Some(0)).unwrap();
    (a, b)
}

fn send(
    w: &mut World,
    from: usize,
    to: EndpointAddr,
    rank: u32,
    tag: i32,
    data: Vec<u8>,
    mode: SendMode,
) -> ReqId {
    let buf = w.mem(from).insert(data);
    w.nodes[from]
        .eng
        .isend(0, to, match_bits(CTX, tag), rank, buf, mode)
        .unwrap()
}

fn recv(w: &mut World, at: usize, src: i32, tag: i32, cap: usize) -> (ReqId, BufRef) {
    let buf = w.mem(at).insert(vec![0; cap]);
    (
        w.nodes[at]
            .eng
            .irecv(0, MatchSpec::mpi(CTX, src, tag), buf)
            .unwrap(),
        buf,
    )
}

fn received(c: &Completion) -> (MsgInfo, u64, bool) {
    match &c.result {
        Ok(Outcome::Received {
            info,
            received,
            truncated,
        }) => (*info, *received, *truncated),
        r => panic!("not a receive: {r:?}"),
    }
}

/// Drains completions of node `i` until every id in `ids` has completed; returns them by id order.
fn wait_all(w: &mut World, i: usize, ids: &[ReqId]) -> Vec<Completion> {
    let mut got: Vec<Option<Completion>> = vec![None; ids.len()];
    w.run_until(200_000, |w| {
        while let Some(c) = w.nodes[i].eng.pop_completion() {
            let k = ids
                .iter()
                .position(|&r| r == c.req)
                .expect("completion of an unknown request");
            got[k] = Some(c);
        }
        got.iter().all(Option::is_some)
    });
    got.into_iter().map(Option::unwrap).collect()
}

#[test]
fn wildcards_match_any_source_and_any_tag() {
    let mut w = world();
    let (_, b) = open(&mut w);
    let s = send(&mut w, 0, b, 5, 42, b"hello".to_vec(), SendMode::Standard);
    let (r, buf) = recv(&mut w, 1, ANY_SOURCE, ANY_TAG, 16);
    let c = wait_all(&mut w, 1, &[r]);
    let (info, n, trunc) = received(&c[0]);
    assert_eq!(
        (info.src_rank, info.match_bits, n, trunc),
        (5, match_bits(CTX, 42), 5, false)
    );
    assert_eq!(&w.mem(1).get(&buf).unwrap()[..5], b"hello");
    assert!(wait_all(&mut w, 0, &[s])[0].result.is_ok());
}

#[test]
fn any_tag_never_matches_negative_tags() {
    let mut w = world();
    let (_, b) = open(&mut w);
    send(
        &mut w,
        0,
        b,
        0,
        -5,
        b"collective".to_vec(),
        SendMode::Standard,
    );
    send(&mut w, 0, b, 0, 9, b"user".to_vec(), SendMode::Standard);
    let (r, buf) = recv(&mut w, 1, ANY_SOURCE, ANY_TAG, 16);
    let c = wait_all(&mut w, 1, &[r]);
    assert_eq!(
        received(&c[0]).0.match_bits,
        match_bits(CTX, 9),
        "ANY_TAG took the negative tag"
    );
    assert_eq!(&w.mem(1).get(&buf).unwrap()[..4], b"user");
    let (r2, buf2) = recv(&mut w, 1, 0, -5, 16);
    let c = wait_all(&mut w, 1, &[r2]);
    assert_eq!(received(&c[0]).1, 10);
    assert_eq!(&w.mem(1).get(&buf2).unwrap()[..10], b"collective");
}

#[test]
fn non_overtaking_order_across_classes() {
    // Same source, same tag: a large rendezvous message sent first must match first even
    // though the small ones behind it are much quicker to deliver.
    let mut w = world();
    let (_, b) = open(&mut w);
    let sizes = [100_000usize, 10, 40_000, 0, 3_000, 1_000_000, 1];
    for (i, &n) in sizes.iter().enumerate() {
        send(
            &mut w,
            0,
            b,
            0,
            1,
            pattern(0, i as u32, n),
            SendMode::Standard,
        );
    }
    let mut rs = Vec::new();
    for _ in &sizes {
        rs.push(recv(&mut w, 1, 0, 1, 1 << 20));
    }
    let ids: Vec<ReqId> = rs.iter().map(|r| r.0).collect();
    let cs = wait_all(&mut w, 1, &ids);
    for (i, (c, (_, buf))) in cs.iter().zip(&rs).enumerate() {
        let (_, n, _) = received(c);
        assert_eq!(n as usize, sizes[i], "message {i} matched out of order");
        assert_eq!(
            &w.mem(1).get(buf).unwrap()[..sizes[i]],
            &pattern(0, i as u32, sizes[i])[..]
        );
    }
}

#[test]
fn probe_reports_without_consuming() {
    let mut w = world();
    let (_, b) = open(&mut w);
    assert_eq!(
        w.nodes[1]
            .eng
            .iprobe(0, MatchSpec::mpi(CTX, ANY_SOURCE, ANY_TAG))
            .unwrap(),
        None
    );
    send(&mut w, 0, b, 7, 3, vec![1; 5000], SendMode::Standard);
    let mut info = None;
    w.run_until(100_000, |w| {
        info = w.nodes[1].eng.iprobe(0, MatchSpec::mpi(CTX, 7, 3)).unwrap();
        info.is_some()
    });
    let info = info.unwrap();
    assert_eq!((info.src_rank, info.len), (7, 5000));
    assert!(
        w.nodes[1]
            .eng
            .iprobe(0, MatchSpec::mpi(CTX, 6, 3))
            .unwrap()
            .is_none(),
        "wrong source matched"
    );
    // Still there after probing.
    assert!(
        w.nodes[1]
            .eng
            .iprobe(0, MatchSpec::mpi(CTX, 7, ANY_TAG))
            .unwrap()
            .is_some()
    );
    let (r, buf) = recv(&mut w, 1, 7, 3, 5000);
    wait_all(&mut w, 1, &[r]);
    assert_eq!(w.mem(1).get(&buf).unwrap(), &vec![1; 5000]);
}

#[test]
fn mprobe_then_mrecv_takes_that_message() {
    let mut w = world();
    let (_, b) = open(&mut w);
    send(&mut w, 0, b, 1, 8, b"first".to_vec(), SendMode::Standard);
    send(
        &mut w,
        0,
        b,
        1,
        8,
        pattern(1, 2, 200_000),
        SendMode::Standard,
    );
    let mut h = None;
    w.run_until(100_000, |w| {
        h = w.nodes[1]
            .eng
            .improbe(0, MatchSpec::mpi(CTX, ANY_SOURCE, 8))
            .unwrap();
        h.is_some()
    });
    let (h1, info1) = h.unwrap();
    assert_eq!(info1.len, 5);
    // The first message is no longer visible to probes or receives.
    let mut h = None;
    w.run_until(100_000, |w| {
        h = w.nodes[1]
            .eng
            .improbe(0, MatchSpec::mpi(CTX, ANY_SOURCE, 8))
            .unwrap();
        h.is_some()
    });
    let (h2, info2) = h.unwrap();
    assert_eq!(info2.len, 200_000);
    // Receive them in the opposite order.
    let b2 = w.mem(1).insert(vec![0; 200_000]);
    let r2 = w.nodes[1].eng.imrecv(0, h2, b2).unwrap();
    let b1 = w.mem(1).insert(vec![0; 8]);
    let r1 = w.nodes[1].eng.imrecv(0, h1, b1).unwrap();
    wait_all(&mut w, 1, &[r1, r2]);
    assert_eq!(&w.mem(1).get(&b1).unwrap()[..5], b"first");
    assert_eq!(w.mem(1).get(&b2).unwrap(), &pattern(1, 2, 200_000));
    assert!(
        w.nodes[1].eng.imrecv(0, h1, b1).is_err(),
        "a handle is good once"
    );
}

#[test]
fn cancel_unmatched_receive_only() {
    let mut w = world();
    let (_, b) = open(&mut w);
    let (r, _) = recv(&mut w, 1, 0, 77, 16);
    assert!(w.nodes[1].eng.cancel(r));
    let c = wait_all(&mut w, 1, &[r]);
    assert_eq!(c[0].result, Err(Error::Cancelled));
    // The cancelled receive must not take a later message.
    send(&mut w, 0, b, 0, 77, b"late".to_vec(), SendMode::Standard);
    let (r2, buf) = recv(&mut w, 1, 0, 77, 16);
    wait_all(&mut w, 1, &[r2]);
    assert_eq!(&w.mem(1).get(&buf).unwrap()[..4], b"late");
    assert!(
        !w.nodes[1].eng.cancel(r2),
        "a completed receive cannot be cancelled"
    );
}

#[test]
fn truncation_reports_incoming_length() {
    for len in [100usize, 20_000, 300_000] {
        let mut w = world();
        let (_, b) = open(&mut w);
        send(&mut w, 0, b, 0, 1, pattern(0, 0, len), SendMode::Standard);
        let (r, buf) = recv(&mut w, 1, 0, 1, 64);
        let c = wait_all(&mut w, 1, &[r]);
        let (info, n, trunc) = received(&c[0]);
        assert!(trunc, "{len}: truncation not reported");
        assert_eq!((info.len, n), (len as u64, 64));
        assert_eq!(w.mem(1).get(&buf).unwrap(), &pattern(0, 0, len)[..64]);
    }
}

#[test]
fn small_messages_meet_posted_receives_in_and_out_of_queue_order() {
    // Receives posted before the messages arrive: a message for the front receive, one for a
    // receive further back (the front one does not match it), an empty one, a truncated one.
    let mut w = world();
    let (_, b) = open(&mut w);
    let (r5, buf5) = recv(&mut w, 1, 2, 5, 64);
    let (r7, buf7) = recv(&mut w, 1, 2, 7, 4);
    let (rany, bufany) = recv(&mut w, 1, -1, -1, 16);
    send(&mut w, 0, b, 2, 7, b"abcdefgh".to_vec(), SendMode::Standard);
    send(&mut w, 0, b, 2, 5, Vec::new(), SendMode::Standard);
    send(&mut w, 0, b, 9, 9, pattern(0, 1, 10), SendMode::Standard);
    let c = wait_all(&mut w, 1, &[r5, r7, rany]);
    let (info, n, trunc) = received(&c[1]);
    assert_eq!((info.len, n, trunc, info.src_rank), (8, 4, true, 2));
    assert_eq!(&w.mem(1).get(&buf7).unwrap()[..], b"abcd");
    let (info, n, trunc) = received(&c[0]);
    assert_eq!((info.len, n, trunc), (0, 0, false));
    assert_eq!(w.mem(1).get(&buf5).unwrap(), &vec![0u8; 64]);
    let (info, n, trunc) = received(&c[2]);
    assert_eq!((info.len, n, trunc, info.src_rank), (10, 10, false, 9));
    assert_eq!(info.match_bits, match_bits(CTX, 9));
    assert_eq!(
        &w.mem(1).get(&bufany).unwrap()[..10],
        &pattern(0, 1, 10)[..]
    );
    // Receives complete in the order their messages arrive: the match further back in the
    // queue first.
    let mut w = world();
    let (_, b) = open(&mut w);
    let (first, second) = (recv(&mut w, 1, 2, 5, 8).0, recv(&mut w, 1, 2, 7, 8).0);
    send(&mut w, 0, b, 2, 7, b"x".to_vec(), SendMode::Standard);
    send(&mut w, 0, b, 2, 5, b"y".to_vec(), SendMode::Standard);
    let mut got = Vec::new();
    w.run_until(200_000, |w| {
        while let Some(c) = w.nodes[1].eng.pop_completion() {
            got.push(c.req);
        }
        got.len() == 2
    });
    assert_eq!(got, [second, first]);
}

#[test]
fn synchronous_send_completes_only_after_match() {
    for len in [10usize, 5_000, 100_000] {
        let mut w = world();
        let (_, b) = open(&mut w);
        let s = send(
            &mut w,
            0,
            b,
            0,
            4,
            pattern(0, 1, len),
            SendMode::Synchronous,
        );
        // Long enough for every frame to be delivered and acknowledged many times over.
        for _ in 0..20_000 {
            w.step();
        }
        assert!(
            w.nodes[0].eng.is_pending(s),
            "{len}: Ssend completed before the receiver matched"
        );
        assert!(w.nodes[0].eng.pop_completion().is_none());
        let (r, _) = recv(&mut w, 1, 0, 4, len);
        wait_all(&mut w, 1, &[r]);
        assert!(wait_all(&mut w, 0, &[s])[0].result.is_ok());
    }
}

#[test]
fn standard_eager_send_completes_without_a_receive() {
    let mut w = world();
    let (_, b) = open(&mut w);
    let s = send(&mut w, 0, b, 0, 4, vec![9; 1000], SendMode::Standard);
    assert!(wait_all(&mut w, 0, &[s])[0].result.is_ok());
    assert_eq!(w.nodes[1].eng.unexpected_bytes(), 1000);
}

/// Between two endpoints of one node, a send that waits for its receiver (synchronous eager,
/// or rendezvous) completes in the same step as the receive, queued right behind it: whoever
/// sees the receive done finds the send done too (mpi4py's testManyISSendAndRecv).
#[test]
fn local_send_completes_right_behind_its_receive() {
    for (len, mode, posted_first) in [
        (10usize, SendMode::Synchronous, false),
        (10, SendMode::Synchronous, true),
        (5_000, SendMode::Synchronous, false),
        (5_000, SendMode::Synchronous, true),
        (100_000, SendMode::Synchronous, false),
        (100_000, SendMode::Standard, true),
    ] {
        let mut w = World::new(1, Faults::default(), 1, Config::default());
        w.nodes[0].eng.open_endpoint(Some(0)).unwrap();
        let b = w.nodes[0].eng.open_endpoint(Some(1)).unwrap();
        let rbuf = w.mem(0).insert(vec![0; len]);
        let spec = MatchSpec::mpi(CTX, 0, 4);
        let mut r = None;
        if posted_first {
            r = Some(w.nodes[0].eng.irecv(1, spec, rbuf).unwrap());
        }
        let s = send(&mut w, 0, b, 0, 4, pattern(0, 2, len), mode);
        if !posted_first {
            // Let the message (or its RTS) arrive before the receive is posted.
            for _ in 0..2_000 {
                w.step();
            }
            assert!(
                w.nodes[0].eng.is_pending(s),
                "{len}: send done before a receive"
            );
            r = Some(w.nodes[0].eng.irecv(1, spec, rbuf).unwrap());
        }
        let r = r.unwrap();
        let mut seen = Vec::new();
        w.run_until(200_000, |w| {
            while let Some(c) = w.nodes[0].eng.pop_completion() {
                assert!(c.result.is_ok(), "{len}: {c:?}");
                seen.push(c.req);
            }
            // Checked once per step: both or neither.
            seen.contains(&r) || seen.contains(&s)
        });
        assert_eq!(
            seen,
            [r, s],
            "{len} {mode:?}: receive then send, in one step"
        );
        assert_eq!(w.mem(0).get(&rbuf).unwrap(), &pattern(0, 2, len)[..]);
    }
}

/// An mprobed message says whether all of it is at the node: an eager one once its last
/// fragment is in, a rendezvous one never (its bytes are pulled by the receive).
#[test]
fn mprobed_message_says_whether_it_has_arrived() {
    for (len, whole) in [
        (0usize, true),
        (100, true),
        (20_000, true),
        (100_000, false),
    ] {
        let mut w = world();
        let (_, b) = open(&mut w);
        send(&mut w, 0, b, 0, 4, pattern(0, 3, len), SendMode::Standard);
        let spec = MatchSpec::mpi(CTX, 0, 4);
        let mut found = None;
        w.run_until(200_000, |w| {
            found = w.nodes[1].eng.improbe(0, spec).unwrap();
            found.is_some()
        });
        let (h, info) = found.unwrap();
        assert_eq!(info.len, len as u64);
        if whole {
            w.run_until(200_000, |w| w.nodes[1].eng.message_arrived(h));
        } else {
            for _ in 0..2_000 {
                w.step();
            }
            assert!(!w.nodes[1].eng.message_arrived(h), "{len}: rendezvous");
        }
        let buf = w.mem(1).insert(vec![0; len]);
        let r = w.nodes[1].eng.imrecv(0, h, buf).unwrap();
        assert!(
            !w.nodes[1].eng.message_arrived(h),
            "received: no longer mprobed"
        );
        if whole {
            // All here: the receive completes at once, without a step.
            let c = w.nodes[1]
                .eng
                .pop_completion()
                .expect("completed in imrecv");
            assert_eq!((c.req, received(&c).1), (r, len as u64));
        } else {
            assert!(wait_all(&mut w, 1, &[r])[0].result.is_ok());
        }
        assert_eq!(w.mem(1).get(&buf).unwrap(), &pattern(0, 3, len)[..]);
    }
}

#[test]
fn rendezvous_messages_from_one_peer_are_pulled_one_after_another() {
    // Four 4 MiB messages matched at once: the receiver pulls a frame window's worth from
    // the peer over all of them, the oldest first, so the first completes after about its
    // own bytes (not after every message has been pulled in parallel, which would spread
    // both sides' copies over 16 MiB of buffers at once and queue them all at the sender).
    let mut w = world();
    let (_, b) = open(&mut w);
    const LEN: usize = 4 << 20;
    let mut rs = Vec::new();
    for i in 0..4 {
        rs.push(recv(&mut w, 1, 0, 1, LEN));
        send(&mut w, 0, b, 0, 1, pattern(0, i, LEN), SendMode::Standard);
    }
    let first = rs[0].0;
    let mut copied_at_first = None;
    let mut done = 0;
    w.run_until(2_000_000, |w| {
        while let Some(c) = w.nodes[1].eng.pop_completion() {
            received(&c);
            if c.req == first {
                let copy = w.nodes[1].eng.copy_engine();
                copied_at_first = Some(CopyEngine::<Vec<u8>>::copied_bytes(copy).1);
            }
            done += 1;
        }
        done == 4
    });
    let copied = copied_at_first.expect("first receive completed");
    assert!(
        copied <= (LEN + (2 << 20)) as u64,
        "{copied} bytes had arrived when the first 4 MiB message completed"
    );
    for (i, (_, buf)) in rs.iter().enumerate() {
        assert_eq!(w.mem(1).get(buf).unwrap(), &pattern(0, i as u32, LEN));
    }
}

/// An eager credit that one 12,000-byte unexpected message uses up.
fn credit_starved() -> Config {
    Config {
        unexpected_bytes: 16 << 10,
        eager_credit_initial: 16 << 10,
        eager_credit_floor: 16 << 10,
        eager_credit: 16 << 10,
        ..Config::default()
    }
}

/// Node 0's endpoint 0 sends `to` two messages: a synchronous one of 12,000 bytes (tag 3) that
/// takes the credit and stays unexpected (its send waits for the receive at the end), then
/// one of 20,000 bytes (tag 4) with no credit left, which goes by rendezvous. Returns both
/// sends and node `at`'s endpoint `ep`'s mprobe of the second.
fn send_one_without_credit(
    w: &mut World,
    to: EndpointAddr,
    at: usize,
    ep: u16,
) -> (ReqId, ReqId, MessageHandle) {
    let first = send(w, 0, to, 0, 3, pattern(0, 1, 12_000), SendMode::Synchronous);
    let second = send(w, 0, to, 0, 4, pattern(0, 2, 20_000), SendMode::Standard);
    let mut found = None;
    w.run_until(200_000, |w| {
        found = w.nodes[at]
            .eng
            .improbe(ep, MatchSpec::mpi(CTX, 0, 4))
            .unwrap();
        found.is_some()
    });
    assert!(
        w.nodes[0].eng.stats.credit_fallbacks >= 1,
        "the second message went by rendezvous"
    );
    let (h, info) = found.unwrap();
    assert_eq!(info.len, 20_000);
    (first, second, h)
}

/// A message from an endpoint of this node is at the node even when it goes by rendezvous
/// (here an eager-sized one whose sender had no credit left): the engine reads its bytes
/// itself, so a receive of it never waits on another node, and the mprobe says so (the MTL
/// then receives it within MPI_Imrecv, as it does a whole eager message).
#[test]
fn an_mprobed_message_from_this_node_has_arrived_even_by_rendezvous() {
    let mut w = World::new(1, Faults::default(), 1, credit_starved());
    w.nodes[0].eng.open_endpoint(Some(0)).unwrap();
    let b = w.nodes[0].eng.open_endpoint(Some(1)).unwrap();
    let (first, second, h) = send_one_without_credit(&mut w, b, 0, 1);
    assert!(
        w.nodes[0].eng.message_arrived(h),
        "from this node: at the node"
    );
    let buf = w.mem(0).insert(vec![0; 20_000]);
    let r = w.nodes[0].eng.imrecv(1, h, buf).unwrap();
    let done = wait_all(&mut w, 0, &[r, second]);
    assert!(done.iter().all(|c| c.result.is_ok()), "{done:?}");
    assert_eq!(w.mem(0).get(&buf).unwrap(), &pattern(0, 2, 20_000)[..]);
    let b1 = w.mem(0).insert(vec![0; 12_000]);
    let r1 = w.nodes[0]
        .eng
        .irecv(1, MatchSpec::mpi(CTX, 0, 3), b1)
        .unwrap();
    assert!(
        wait_all(&mut w, 0, &[r1, first])
            .iter()
            .all(|c| c.result.is_ok())
    );
    assert_eq!(w.mem(0).get(&b1).unwrap(), &pattern(0, 1, 12_000)[..]);
}

/// An eager-sized message from another node that went by rendezvous for lack of credit is as
/// good as here too: its receive needs only the sending engine (one pull), never the sending
/// rank, so the mprobe says it has arrived and the MTL may receive it within MPI_Imrecv.
#[test]
fn an_mprobed_eager_sized_message_without_credit_has_arrived() {
    let delay = Faults {
        delay_ns: 5_000,
        ..Faults::default()
    };
    let mut w = World::new(2, delay, 1, credit_starved());
    let (_, b) = open(&mut w);
    let (first, second, h) = send_one_without_credit(&mut w, b, 1, 0);
    assert!(
        w.nodes[1].eng.message_arrived(h),
        "eager-sized: as good as here"
    );
    let buf = w.mem(1).insert(vec![0; 20_000]);
    let r = w.nodes[1].eng.imrecv(0, h, buf).unwrap();
    assert!(wait_all(&mut w, 1, &[r])[0].result.is_ok());
    assert_eq!(w.mem(1).get(&buf).unwrap(), &pattern(0, 2, 20_000)[..]);
    let (r1, b1) = recv(&mut w, 1, 0, 3, 12_000);
    assert!(wait_all(&mut w, 1, &[r1])[0].result.is_ok());
    assert_eq!(w.mem(1).get(&b1).unwrap(), &pattern(0, 1, 12_000)[..]);
    let sent = wait_all(&mut w, 0, &[first, second]);
    assert!(sent.iter().all(|c| c.result.is_ok()), "{sent:?}");
}

/// The count of operations in flight (the agent asks for it on every pass of its loop)
/// follows the requests as they start and end, whatever the size the request slab grew to.
#[test]
fn pending_ops_counts_the_requests_in_flight() {
    let mut w = world();
    let (_, b) = open(&mut w);
    let recvs: Vec<ReqId> = (0..200).map(|t| recv(&mut w, 1, 5, t, 16).0).collect();
    assert_eq!(w.nodes[1].eng.pending_ops(), 200);
    let sends: Vec<ReqId> = (0..150)
        .map(|t| send(&mut w, 0, b, 5, t, vec![t as u8; 8], SendMode::Standard))
        .collect();
    assert_eq!(w.nodes[0].eng.pending_ops(), 150);
    wait_all(&mut w, 1, &recvs[..150]);
    wait_all(&mut w, 0, &sends);
    assert_eq!(
        w.nodes[1].eng.pending_ops(),
        50,
        "the receives with no message"
    );
    assert_eq!(w.nodes[0].eng.pending_ops(), 0, "every send acknowledged");
    // A freed slot taken again counts once.
    recv(&mut w, 1, 5, 999, 16);
    assert_eq!(w.nodes[1].eng.pending_ops(), 51);
}
