//! Two `tigon agent`s in two network namespaces joined by a veth pair (af_packet: real
//! Ethernet frames through the kernel), two clients on each: every message of 0 B … 16 MiB
//! arrives byte-identical; and the same through a bridge that drops 20% of the frames at
//! random in each direction (nftables; see `LossyWire` for where the drop must happen).
//! And the same veth pair through AF_XDP ports (`net_af_xdp`: an XDP program hands frames
//! to the agent's socket before the kernel's stack sees them), the port a cloud VM's NIC
//! gets without unbinding it from its kernel driver.

mod common;
use common::*;

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
