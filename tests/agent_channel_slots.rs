//! Channels in DPDK's memory (issue 15): a node whose memif port runs in zero-copy mode can
//! send only DPDK's own memory, so its agent keeps a few channel slots there. A rank of the
//! agent's user that can open the agent's memory file gets one, and its small payloads go
//! out from where it wrote them (the engine copies nothing). When the slots are taken, ranks
//! get memfd channels and the engine copies their payloads (counted); a slot goes to a new
//! rank once its last one's process has exited; ranks of another user are never offered one.

mod common;
use common::*;
use std::time::Duration;
use tigon_client::{Client, Done, RecvInto};
use tigon_engine::matching::match_bits;
use tigon_engine::{MatchSpec, SendMode};

/// The slots a zero-copy node has (`src/agent/slots.rs` `SLOTS`).
const SLOTS: u64 = 4;
const N: usize = 10;
const SIZE: usize = 100;

fn payload(seed: usize) -> Vec<u8> {
    (0..SIZE).map(|b| (b * 13 + seed * 7) as u8).collect()
}

/// `N` messages of `SIZE` bytes from `tx` to `rx`, each checked where it arrives.
fn send_some(tx: &Client, rx: &Client, seed: usize) {
    for i in 0..N {
        let r = rx
            .irecv(MatchSpec::mpi(5, 0, i as i32), RecvInto::Vec(vec![0; SIZE]))
            .expect("irecv");
        let s = tx
            .isend(
                rx.addr(),
                match_bits(5, i as i32),
                0,
                &payload(seed + i),
                SendMode::Standard,
            )
            .expect("isend");
        tx.wait(s).expect("send completes");
        match rx.wait(r).expect("receive completes") {
            Done::Received { data: Some(d), .. } => {
                assert_eq!(&d[..], &payload(seed + i)[..], "message {i} of seed {seed}")
            }
            other => panic!("message {i} completed as {other:?}"),
        }
    }
}

/// (payload bytes sent in place, bytes the engine copied) at `b`.
fn tx_counts(b: &Agent) -> (u64, u64) {
    let s = b.stats();
    (
        num(&s, "/copies/tx_in_place_bytes"),
        num(&s, "/copies/cpu_bytes"),
    )
}

fn held(b: &Agent) -> u64 {
    num(&b.stats(), "/channel_slots/held")
}

#[test]
fn small_payloads_leave_a_zero_copy_node_from_channels_in_dpdk_memory() {
    let dir = TestDir::new("slots");
    let (a, b) = memif_pair_roles(&dir, "server", "client,zero-copy=yes", &[]);
    let s = b.stats();
    assert_eq!(num(&s, "/channel_slots/total"), SLOTS, "{s}");
    assert_eq!(num(&s, "/channel_slots/held"), 0, "{s}");
    assert!(
        a.stats()["channel_slots"].is_null(),
        "the server copies: no slots"
    );
    let rx = Client::attach(&a.socket).expect("attach to a");

    // A rank of this user gets a slot: its payloads go out in place, nothing copied.
    let tx = Client::attach(&b.socket).expect("attach to b");
    assert_eq!(held(&b), 1);
    send_some(&tx, &rx, 0);
    let total = (N * SIZE) as u64;
    assert_eq!(tx_counts(&b), (total, 0), "{}", b.stats());

    // Three more ranks (processes) take the other slots; a fifth gets a memfd channel, whose
    // payloads the engine copies (and counts).
    let mut holds: Vec<Peer> = (0..SLOTS as usize - 1)
        .map(|i| Peer::spawn(&dir, &b, &format!("hold{i}"), None, 0, &["hold"]))
        .collect();
    assert!(
        eventually(Duration::from_secs(30), || num(&b.stats(), "/clients")
            == SLOTS),
        "{}",
        b.stats()
    );
    assert_eq!(held(&b), SLOTS);
    let memfd = Client::attach(&b.socket).expect("a fifth rank attaches");
    send_some(&memfd, &rx, 100);
    assert_eq!(tx_counts(&b), (total, total), "{}", b.stats());

    // One holder exits: once it is gone (and nothing holds its slot) the next rank gets it.
    holds[0].kill();
    assert!(
        eventually(Duration::from_secs(30), || held(&b) == SLOTS - 1),
        "{}",
        b.stats()
    );
    let again = Client::attach(&b.socket).expect("attach after a holder left");
    assert_eq!(held(&b), SLOTS);
    send_some(&again, &rx, 200);
    assert_eq!(tx_counts(&b), (2 * total, total), "{}", b.stats());

    // A rank that detaches while its process lives keeps its slot (the process still maps
    // it): the next rank gets a memfd channel.
    drop(tx);
    assert!(
        eventually(Duration::from_secs(10), || num(&b.stats(), "/clients")
            == SLOTS),
        "{}",
        b.stats()
    );
    assert_eq!(held(&b), SLOTS, "held by this process: {}", b.stats());
    let late = Client::attach(&b.socket).expect("attach after a detach");
    send_some(&late, &rx, 300);
    assert_eq!(tx_counts(&b), (2 * total, 2 * total), "{}", b.stats());
    for p in &mut holds {
        p.kill();
    }
    let s = b.stats();
    assert_eq!(num(&s, "/serve/clients_disconnected_garbage"), 0, "{s}");
}

const NOBODY: &[&str] = &[
    "setpriv",
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
];

/// A rank of another user is not offered a slot (it could not open the agent's memory
/// file anyway): it gets a memfd channel and exchanges as before, every size.
#[test]
fn a_rank_of_another_user_keeps_its_memfd_channel() {
    let dir = TestDir::new("slots-uid");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.addr(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let (a, b) = memif_pair_roles(
        &dir,
        "server",
        "client,zero-copy=yes",
        &["--allow-uid", "0,65534"],
    );
    let mode = ["exchange", "--sizes", "0,100,40k,1M"];
    let mut peers = [
        Peer::spawn_with(NOBODY, &dir, &b.socket, "n", Some("r"), 0, &mode),
        Peer::spawn(&dir, &a, "r", Some("n"), 1, &mode),
    ];
    for out in wait_peers("nobody", &mut peers, &[&a, &b], Duration::from_secs(120)) {
        println!("nobody and root: {}", out.trim());
    }
    let s = b.stats();
    assert_eq!(num(&s, "/channel_slots/held"), 0, "{s}");
    // Its 100 B payload went out of a memfd channel: copied by the engine.
    assert!(num(&s, "/copies/cpu_bytes") >= 100, "{s}");
}

/// The handshake as a rank that cannot open the agent's memory file goes through it: it
/// declines the offer (`take` false) and gets a memfd channel passed as before, and the
/// slot is free again.
#[test]
fn a_declined_offer_gives_a_memfd_channel_and_frees_the_slot() {
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    use tigon_client::proto::{Reply, Request, VERSION};
    let dir = TestDir::new("slots-decline");
    let (_a, b) = memif_pair_roles(&dir, "server", "client,zero-copy=yes", &[]);
    let s = UnixStream::connect(&b.socket).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let send = |r: &Request| {
        let mut line = serde_json::to_vec(r).unwrap();
        line.push(b'\n');
        (&s).write_all(&line).unwrap();
    };
    let recv = || {
        let mut buf = vec![0u8; 4096];
        let (n, fds) = tigon_shm::sock::recv_with_fds(&s, &mut buf).expect("reply");
        let r: Reply = serde_json::from_slice(&buf[..n]).expect("a reply");
        (r, fds)
    };
    send(&Request::Attach { version: VERSION });
    let (offer, fds) = recv();
    assert!(matches!(offer, Reply::Offer { .. }), "{offer:?}");
    assert!(fds.is_empty(), "an offer passes no descriptor");
    // (No stats now: the control thread waits for the answer.)
    send(&Request::Take { ok: false });
    let (attached, fds) = recv();
    let Reply::Attached {
        channel_offset,
        region_len,
        ..
    } = attached
    else {
        panic!("{attached:?}");
    };
    assert_eq!(channel_offset, None);
    assert_eq!(fds.len(), 3, "channel, doorbell, receive memory");
    let link = std::fs::read_link(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&fds[0])
    ))
    .unwrap();
    assert!(
        link.to_string_lossy().contains("tigon-ch-"),
        "the channel's memfd: {link:?}"
    );
    assert!(region_len > 0);
    assert_eq!(held(&b), 0, "given back: {}", b.stats());
    assert_eq!(num(&b.stats(), "/clients"), 1);
}
