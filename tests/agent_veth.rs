//! Two `tigon agent`s in two network namespaces joined by a veth pair (af_packet: real
//! Ethernet frames through the kernel), two clients on each: every message of 0 B … 16 MiB
//! arrives byte-identical; and the same through a bridge that drops 20% of the frames at
//! random in each direction (nftables; see `LossyWire` for where the drop must happen).
//! And the same veth pair through AF_XDP ports (`net_af_xdp`: an XDP program hands frames
//! to the agent's socket before the kernel's stack sees them), the port a cloud VM's NIC
//! gets without unbinding it from its kernel driver.

mod common;
use common::*;
use tigon_pmd::testbed::{VethPair, unique_tag};

#[test]
fn veth_two_namespaces_two_clients_each() {
    let dir = TestDir::new("veth");
    let (_veth, a, b) = veth_pair(&dir, &[]);
    exchange(&dir, "unexp", &[(&a, &b), (&a, &b)], &[]);
    exchange(&dir, "pre", &[(&a, &b), (&b, &a)], &["--prepost"]);
    for x in [&a, &b] {
        let s = x.stats();
        assert_eq!(num(&s, "/messages/failed"), 0, "{s}");
        assert_eq!(num(&s, "/serve/inflight"), 0, "{s}");
        println!("agent {}: {s}", x.name);
    }
}

#[test]
fn af_xdp_two_namespaces_two_clients_each() {
    let dir = TestDir::new("vxdp");
    let (_veth, a, b) = veth_pair_on(&dir, "net_af_xdp0", &[]);
    exchange(&dir, "unexp", &[(&a, &b), (&a, &b)], &[]);
    exchange(&dir, "pre", &[(&a, &b), (&b, &a)], &["--prepost"]);
    for x in [&a, &b] {
        let s = x.stats();
        println!("agent {}: {s}", x.name);
        assert_eq!(num(&s, "/messages/failed"), 0, "{s}");
        assert_eq!(num(&s, "/serve/inflight"), 0, "{s}");
        // The frames went through the AF_XDP port, both ways.
        assert!(num(&s, "/port/ipackets") > 1000, "{s}");
        assert!(num(&s, "/port/opackets") > 1000, "{s}");
    }
}

/// The same over UDP/IPv4 (`--wire udp`): the agents resolve each other with ARP through
/// their AF_XDP sockets, then carry the exchanges in UDP datagrams.
#[test]
fn af_xdp_udp_wire() {
    let dir = TestDir::new("vxdpu");
    let veth = VethPair::new(&unique_tag(), 1500).expect("netns + veth (needs root)");
    let agent = |name: &str, ifc: &str, lcore: u32, ns: &str, ip: &str| {
        let port = format!("net_af_xdp0,iface={ifc}");
        Agent::start(
            &dir,
            name,
            &port,
            lcore,
            Some(ns),
            &["--wire", "udp", "--ip", ip],
        )
    };
    let a = agent("a", &veth.a, 0, veth.ns_a.name(), "10.77.0.1/24");
    let b = agent("b", &veth.b, 1, veth.ns_b.name(), "10.77.0.2/24");
    exchange(&dir, "udp", &[(&a, &b), (&b, &a)], &[]);
    for x in [&a, &b] {
        let s = x.stats();
        println!("agent {}: {s}", x.name);
        assert_eq!(num(&s, "/messages/failed"), 0, "{s}");
        assert!(num(&s, "/port/ipackets") > 1000, "{s}");
        // The peer's MAC came from an ARP reply through the AF_XDP socket.
        assert!(num(&s, "/link/udp/arp_learned") >= 1, "{s}");
    }
}

/// A second agent on an interface whose queue an AF_XDP socket already holds fails at once
/// with a message that says so, before DPDK touches the interface; the first agent serves on
/// (DPDK's driver, failing to attach, used to detach the first agent's XDP program); and
/// once the first is killed, a new agent takes the interface over.
#[test]
fn af_xdp_interface_taken_by_another_agent_is_a_clear_error() {
    let dir = TestDir::new("vxdp2");
    let (veth, a, b) = veth_pair_on(&dir, "net_af_xdp0", &[]);
    let o = std::process::Command::new("ip")
        .args(["netns", "exec", veth.ns_a.name(), TIGON, "agent", "--port"])
        .arg(format!("net_af_xdp0,iface={}", veth.a))
        .arg("--socket")
        .arg(dir.join("second.sock"))
        .args(["--lcore", "1", "--idle", "yield"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("tigon agent");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "the second agent started: {err}");
    assert!(err.contains("is taken by another tigon agent"), "{err}");
    assert!(!dir.join("second.sock").exists(), "{err}");
    exchange(&dir, "after", &[(&a, &b)], &[]);
    assert_eq!(num(&a.stats(), "/messages/failed"), 0);
    // A killed agent leaves its XDP program on the interface and its claim nowhere: an agent
    // started there again takes the interface over and serves, at once: B still holds its
    // session with the killed agent, and its ranks' sends name the new start's incarnation
    // (their addresses), so B sets up a new session instead of sending on the dead one.
    let mut a = a;
    a.kill();
    let a = Agent::start(
        &dir,
        "a2",
        &format!("net_af_xdp0,iface={}", veth.a),
        0,
        Some(veth.ns_a.name()),
        &[],
    );
    exchange(&dir, "again", &[(&a, &b), (&b, &a)], &[]);
    assert_eq!(num(&a.stats(), "/messages/failed"), 0);
    assert_eq!(num(&b.stats(), "/messages/failed"), 0);
    assert!(
        num(&b.stats(), "/peer_events/restarts") >= 1,
        "{}",
        b.stats()
    );
}

#[test]
fn veth_20_percent_loss_two_clients_each() {
    let dir = TestDir::new("vloss");
    let wire = LossyWire::new(20);
    let (a, b) = wire.agents(&dir, &[]);
    exchange(&dir, "lossy", &[(&a, &b), (&b, &a)], &[]);
    let (sa, sb) = (a.stats(), b.stats());
    println!("agent a: {sa}\nagent b: {sb}");
    let dropped = wire.dropped();
    let sent = num(&sa, "/port/opackets") + num(&sb, "/port/opackets");
    let got = num(&sa, "/port/ipackets") + num(&sb, "/port/ipackets");
    println!("nft dropped {dropped} of {sent} frames; {got} arrived");
    // The loss was real: about a fifth of the frames never reached the other port ...
    assert!(dropped > sent / 10, "nft dropped {dropped} of {sent}");
    assert!(got < sent - sent / 10, "{got} of {sent} frames arrived");
    // ... and the engines repaired it.
    assert!(num(&sa, "/retransmits") > 0, "{sa}");
    assert!(num(&sb, "/retransmits") > 0, "{sb}");
    for s in [&sa, &sb] {
        assert_eq!(num(s, "/messages/failed"), 0, "{s}");
    }
}
