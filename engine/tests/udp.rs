//! The UDP/IPv4 wire on the simulated segment: engines over [`UdpLink`], with loss, through a
//! router, with a silent or replaced neighbour; and the parsers on arbitrary bytes.

use proptest::prelude::*;
use std::net::Ipv4Addr;
use tigon_engine::matching::match_bits;
use tigon_engine::net::arp::{self, ArpRepr};
use tigon_engine::net::encap::{Rx, Tx, UdpConfig, UdpEncap};
use tigon_engine::net::eth::{self, EthRepr};
use tigon_engine::net::icmp::{self, IcmpRepr};
use tigon_engine::net::ipv4::{self, Ipv4Repr};
use tigon_engine::net::link::UdpLink;
use tigon_engine::net::udp::{self, UdpRepr};
use tigon_engine::net::{UDP_OVERHEAD, node_id};
use tigon_engine::sim::{Faults, SimNet, SimPort};
use tigon_engine::*;

type Clock = Box<dyn Fn() -> u64>;
type ULink = UdpLink<SimPort, Clock>;
type Eng = Engine<ULink, CpuCopy<HeapMemory>>;

struct Node {
    eng: Eng,
    link: ULink,
}

fn hw(i: u8) -> MacAddr {
    MacAddr([2, 0x17, 0, 0, 0, i])
}

fn node(net: &SimNet, i: u8, ip: Ipv4Addr, gw: Option<Ipv4Addr>, cfg: &Config) -> Node {
    let port = net.port(hw(i), cfg.max_frame + UDP_OVERHEAD);
    let clock_net = net.clone();
    let mut ucfg = UdpConfig::new(ip, 24, hw(i));
    ucfg.gateway = gw;
    let link = UdpLink::new(port, ucfg, Box::new(move || clock_net.now()) as Clock);
    let mut eng = Eng::new(
        cfg.clone(),
        link.mac(),
        link.max_frame(),
        CpuCopy::new(HeapMemory::default()),
    )
    .unwrap();
    eng.seed(u64::from(i));
    eng.open_endpoint(Some(0)).unwrap();
    Node { eng, link }
}

fn quick_cfg() -> Config {
    Config {
        peer_timeout_ns: 200_000_000,
        ..Config::default()
    }
}

/// Polls every node and `extra` (a router) once per µs of virtual time on `nets`.
fn step(nodes: &mut [Node], nets: &[&SimNet], now: &mut u64, extra: &mut dyn FnMut()) {
    for n in nodes.iter_mut() {
        n.eng.poll(&mut n.link, *now);
    }
    extra();
    *now += 1_000;
    for net in nets {
        net.set_time(*now);
    }
}

fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32 ^ seed).wrapping_mul(2_654_435_761) as u8)
        .collect()
}

/// Sends `sizes` from node 0 to node 1 and back, checks every byte, within `steps` rounds.
fn exchange(nodes: &mut [Node], nets: &[&SimNet], sizes: &[usize], extra: &mut dyn FnMut()) {
    let mut now = 1_000;
    let mut pending = Vec::new();
    for (k, &len) in sizes.iter().enumerate() {
        for (from, to) in [(0usize, 1usize), (1, 0)] {
            let data = pattern(k as u32 * 2 + from as u32, len);
            let dst = EndpointAddr::new(nodes[to].link.mac(), 0);
            let sbuf = nodes[from].eng.copy_engine_mut().mem.insert(data.clone());
            let s = nodes[from]
                .eng
                .isend(
                    0,
                    dst,
                    match_bits(0, k as i32),
                    from as u32,
                    sbuf,
                    SendMode::Standard,
                )
                .unwrap();
            let rbuf = nodes[to].eng.copy_engine_mut().mem.insert(vec![0; len]);
            let r = nodes[to]
                .eng
                .irecv(0, MatchSpec::mpi(0, from as i32, k as i32), rbuf)
                .unwrap();
            pending.push((from, s, None));
            pending.push((to, r, Some((rbuf, data))));
        }
    }
    let mut left = pending.len();
    for _ in 0..20_000_000 {
        if left == 0 {
            return;
        }
        step(nodes, nets, &mut now, extra);
        for (i, n) in nodes.iter_mut().enumerate() {
            while let Some(c) = n.eng.pop_completion() {
                let p = pending
                    .iter_mut()
                    .find(|p| p.0 == i && p.1 == c.req)
                    .expect("a completion we asked for");
                assert_eq!(c.result.map(|_| ()), Ok(()), "request {:?}", c.req);
                if let Some((buf, data)) = p.2.take() {
                    assert!(
                        n.eng.copy_engine_mut().mem.get(&buf).map(|v| &v[..]) == Some(&data[..]),
                        "payload"
                    );
                }
                left -= 1;
            }
        }
    }
    panic!("{left} requests still open");
}

#[test]
fn messages_cross_a_lossy_subnet_in_udp() {
    let net = SimNet::new(
        Faults {
            loss: 0.1,
            duplicate: 0.02,
            delay_ns: 5_000,
            ..Faults::default()
        },
        17,
    );
    let cfg = quick_cfg();
    let a = node(&net, 1, Ipv4Addr::new(10, 71, 1, 1), None, &cfg);
    let b = node(&net, 2, Ipv4Addr::new(10, 71, 1, 2), None, &cfg);
    let mut nodes = [a, b];
    exchange(&mut nodes, &[&net], &[8, 4096, 65536, 1 << 20], &mut || {});
    for n in &nodes {
        let s = n.link.encap().stats;
        assert!(s.arp_learned >= 1, "the peer was resolved by ARP: {s:?}");
        assert_eq!(s.unroutable, 0);
    }
}

/// An ICMP echo request from `src` to `dst` (no data).
fn echo_request(from: (MacAddr, Ipv4Addr), to: (MacAddr, Ipv4Addr)) -> Vec<u8> {
    let mut f = vec![0; 14 + 20 + 8];
    EthRepr {
        dst: to.0,
        src: from.0,
        ethertype: eth::ETHERTYPE_IPV4,
    }
    .emit(&mut f);
    Ipv4Repr {
        src: from.1,
        dst: to.1,
        protocol: icmp::PROTOCOL,
        payload_len: 8,
        ttl: 60,
        header_len: 20,
        dont_fragment: false,
    }
    .emit(&mut f[14..]);
    IcmpRepr {
        kind: icmp::ECHO_REQUEST,
        code: 0,
        ident: 1,
        seq: 1,
    }
    .emit(&mut f[34..]);
    f
}

/// Found by the `engine_rx` fuzz target's seeds: `UdpLink` sent its ARP and ping answers only
/// inside `tx_burst`, which the engine calls only when it has frames of its own, so a node
/// that only receives never answered the sender's ARP (nor a ping), and a one-way message
/// failed as "peer unreachable".
#[test]
fn a_node_that_only_receives_answers_arp_and_ping() {
    let net = SimNet::new(Faults::default(), 3);
    let cfg = quick_cfg();
    let (ip_a, ip_b) = (Ipv4Addr::new(10, 71, 1, 1), Ipv4Addr::new(10, 71, 1, 2));
    let mut nodes = [
        node(&net, 1, ip_a, None, &cfg),
        node(&net, 2, ip_b, None, &cfg),
    ];
    let mut now = 1_000;
    let host = (hw(9), Ipv4Addr::new(10, 71, 1, 9));
    let mut pinger = net.port(host.0, 1514);
    pinger.tx_burst(&mut vec![echo_request(host, (hw(2), ip_b))]);
    for _ in 0..3 {
        step(&mut nodes, &[&net], &mut now, &mut || {});
    }
    let mut got = Vec::new();
    pinger.rx_burst(&mut got, 64);
    let replied = got.iter().any(|f| {
        Ipv4Repr::parse(&f[14..]).is_ok_and(|ip| ip.src == ip_b && ip.dst == host.1)
            && IcmpRepr::parse(&f[34..]).is_ok_and(|r| r.kind == icmp::ECHO_REPLY)
    });
    assert!(replied, "no echo reply from an idle node");

    let data = pattern(1, 64);
    let sbuf = nodes[0].eng.copy_engine_mut().mem.insert(data.clone());
    let dst = EndpointAddr::new(nodes[1].link.mac(), 0);
    let s = nodes[0]
        .eng
        .isend(0, dst, match_bits(0, 1), 0, sbuf, SendMode::Standard)
        .unwrap();
    let rbuf = nodes[1].eng.copy_engine_mut().mem.insert(vec![0; 64]);
    let r = nodes[1]
        .eng
        .irecv(0, MatchSpec::mpi(0, 0, 1), rbuf)
        .unwrap();
    let mut left = [Some(s), Some(r)];
    for _ in 0..100_000 {
        step(&mut nodes, &[&net], &mut now, &mut || {});
        for (i, n) in nodes.iter_mut().enumerate() {
            while let Some(c) = n.eng.pop_completion() {
                assert_eq!(left[i], Some(c.req));
                assert_eq!(c.result.map(|_| ()), Ok(()), "node {i}");
                left[i] = None;
            }
        }
        if left == [None, None] {
            let got = nodes[1].eng.copy_engine_mut().mem.get(&rbuf).cloned();
            assert_eq!(got, Some(data));
            return;
        }
    }
    panic!("one-way message not done after 100 ms: {left:?} open");
}

/// A router between two simulated segments: answers ARP for its two addresses, learns hosts
/// from their ARP packets, forwards IPv4 by subnet with the TTL lowered.
struct Router {
    ports: [SimPort; 2],
    ips: [Ipv4Addr; 2],
    hosts: Vec<(Ipv4Addr, MacAddr)>,
    forwarded: u64,
}

impl Router {
    fn side(&self, ip: Ipv4Addr) -> usize {
        usize::from(ip.octets()[2] != self.ips[0].octets()[2])
    }

    fn poll(&mut self) {
        for side in 0..2 {
            let mut frames = Vec::new();
            self.ports[side].rx_burst(&mut frames, 64);
            for mut f in frames {
                let Ok(e) = EthRepr::parse(&f) else { continue };
                if e.ethertype == eth::ETHERTYPE_ARP {
                    let Ok(a) = ArpRepr::parse(&f[14..]) else {
                        continue;
                    };
                    if !self.hosts.iter().any(|h| h.0 == a.sender_ip) {
                        self.hosts.push((a.sender_ip, a.sender_mac));
                    }
                    if a.op == arp::OP_REQUEST && a.target_ip == self.ips[side] {
                        let mac = self.ports[side].mac();
                        EthRepr {
                            dst: a.sender_mac,
                            src: mac,
                            ethertype: eth::ETHERTYPE_ARP,
                        }
                        .emit(&mut f);
                        ArpRepr {
                            op: arp::OP_REPLY,
                            sender_mac: mac,
                            sender_ip: self.ips[side],
                            target_mac: a.sender_mac,
                            target_ip: a.sender_ip,
                        }
                        .emit(&mut f[14..]);
                        self.ports[side].tx_burst(&mut vec![f]);
                    }
                    continue;
                }
                let Ok(ip) = Ipv4Repr::parse(&f[14..]) else {
                    continue;
                };
                let out = self.side(ip.dst);
                let Some(&(_, mac)) = self.hosts.iter().find(|h| h.0 == ip.dst) else {
                    continue;
                };
                assert!(ip.dont_fragment, "tigon sets DF");
                // Lower the TTL and fix the header checksum, as a router does.
                f[14 + 8] -= 1;
                f[24..26].copy_from_slice(&[0, 0]);
                let ck = tigon_engine::net::checksum(&f[14..34]);
                f[24..26].copy_from_slice(&ck.to_be_bytes());
                EthRepr {
                    dst: mac,
                    src: self.ports[out].mac(),
                    ethertype: eth::ETHERTYPE_IPV4,
                }
                .emit(&mut f);
                self.forwarded += 1;
                self.ports[out].tx_burst(&mut vec![f]);
            }
        }
    }
}

#[test]
fn messages_cross_a_router_via_the_gateway() {
    let (na, nb) = (
        SimNet::new(Faults::default(), 1),
        SimNet::new(Faults::default(), 2),
    );
    let cfg = quick_cfg();
    let gw_a = Ipv4Addr::new(10, 71, 1, 254);
    let gw_b = Ipv4Addr::new(10, 71, 2, 254);
    let mut router = Router {
        ports: [na.port(hw(0xa0), 9100), nb.port(hw(0xb0), 9100)],
        ips: [gw_a, gw_b],
        hosts: Vec::new(),
        forwarded: 0,
    };
    let a = node(&na, 1, Ipv4Addr::new(10, 71, 1, 1), Some(gw_a), &cfg);
    let b = node(&nb, 2, Ipv4Addr::new(10, 71, 2, 1), Some(gw_b), &cfg);
    let mut nodes = [a, b];
    exchange(&mut nodes, &[&na, &nb], &[8, 65536, 1 << 20], &mut || {
        router.poll()
    });
    assert!(router.forwarded > 100, "forwarded {}", router.forwarded);
    for n in &nodes {
        assert!(
            n.link
                .encap()
                .neighbour(n.link.encap().config().gateway.unwrap(), 0)
                .is_some()
        );
    }
}

#[test]
fn an_unanswered_arp_fails_the_send_as_unreachable() {
    let net = SimNet::new(Faults::default(), 5);
    let cfg = quick_cfg();
    let mut nodes = [node(&net, 1, Ipv4Addr::new(10, 71, 1, 1), None, &cfg)];
    // 10.71.1.9 does not exist: nobody answers its ARP.
    let ghost = EndpointAddr::new(node_id(Ipv4Addr::new(10, 71, 1, 9), 7470), 0);
    let buf = nodes[0].eng.copy_engine_mut().mem.insert(vec![1; 64]);
    let s = nodes[0]
        .eng
        .isend(0, ghost, match_bits(0, 1), 0, buf, SendMode::Standard)
        .unwrap();
    let mut now = 1_000;
    for _ in 0..2_000_000 {
        step(&mut nodes, &[&net], &mut now, &mut || {});
        if let Some(c) = nodes[0].eng.pop_completion() {
            assert_eq!(c.req, s);
            assert_eq!(c.result.map(|_| ()), Err(Error::PeerUnreachable(ghost)));
            assert!(
                nodes[0].link.encap().stats.arp_requests_sent >= 2,
                "ARP was retried"
            );
            return;
        }
    }
    panic!("the send to a silent address never failed");
}

fn encap_at(ip: [u8; 4], mac: u8) -> UdpEncap {
    let mut c = UdpConfig::new(Ipv4Addr::from(ip), 24, hw(mac));
    c.neighbour_ttl_ns = 1_000_000;
    c.arp_retry_ns = 100_000;
    UdpEncap::new(c)
}

fn arp_frame(op: u16, from: (MacAddr, Ipv4Addr), to: (MacAddr, Ipv4Addr)) -> Vec<u8> {
    let mut f = vec![0; 60];
    EthRepr {
        dst: MacAddr::BROADCAST,
        src: from.0,
        ethertype: eth::ETHERTYPE_ARP,
    }
    .emit(&mut f);
    ArpRepr {
        op,
        sender_mac: from.0,
        sender_ip: from.1,
        target_mac: to.0,
        target_ip: to.1,
    }
    .emit(&mut f[14..]);
    f
}

/// An engine frame behind the encapsulation's headroom, addressed to `dst`.
fn engine_frame(dst: MacAddr, src: MacAddr, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0; UDP_OVERHEAD + 14 + payload.len()];
    EthRepr {
        dst,
        src,
        ethertype: wire::ETHERTYPE,
    }
    .emit(&mut f[UDP_OVERHEAD..]);
    f[UDP_OVERHEAD + 14..].copy_from_slice(payload);
    f
}

#[test]
fn a_replaced_neighbour_is_picked_up_after_the_cache_timeout() {
    let me = Ipv4Addr::new(10, 71, 1, 1);
    let peer = Ipv4Addr::new(10, 71, 1, 2);
    let mut e = encap_at(me.octets(), 1);
    let dst = node_id(peer, 7470);
    let mut f = engine_frame(dst, e.node_id(), &[0x55; 50]);
    assert_eq!(
        e.encap(&mut f, 0),
        Tx::Unresolved {
            next_hop: peer,
            request: true
        }
    );
    assert_eq!(
        e.encap(&mut f.clone(), 10),
        Tx::Unresolved {
            next_hop: peer,
            request: false
        },
        "ARP requests are rate-limited"
    );
    let mut reply = arp_frame(arp::OP_REPLY, (hw(2), peer), (hw(1), me));
    assert_eq!(e.decap(&mut reply, 20), Rx::Done);
    assert_eq!(e.neighbour(peer, 20), Some(hw(2)));
    assert_eq!(e.encap(&mut f, 30), Tx::Send);
    assert_eq!(&f[..6], &hw(2).0, "sent to the resolved MAC");
    // The node is replaced by one with another MAC; its gratuitous ARP was lost. The old
    // mapping holds until it times out, then a fresh request finds the new node.
    assert_eq!(e.neighbour(peer, 999_999), Some(hw(2)));
    let mut f = engine_frame(dst, e.node_id(), &[0x55; 50]);
    assert_eq!(
        e.encap(&mut f, 1_000_020),
        Tx::Unresolved {
            next_hop: peer,
            request: true
        }
    );
    let mut reply = arp_frame(arp::OP_REPLY, (hw(3), peer), (hw(1), me));
    e.decap(&mut reply, 1_000_030);
    assert_eq!(e.neighbour(peer, 1_000_030), Some(hw(3)));
    // And a gratuitous ARP updates a known mapping at once.
    let mut g = arp_frame(arp::OP_REQUEST, (hw(4), peer), (MacAddr([0; 6]), peer));
    assert_eq!(e.decap(&mut g, 1_000_040), Rx::Done);
    assert_eq!(e.neighbour(peer, 1_000_040), Some(hw(4)));
}

#[test]
fn arp_requests_for_our_address_are_answered_others_ignored() {
    let me = Ipv4Addr::new(10, 71, 1, 1);
    let asker = Ipv4Addr::new(10, 71, 1, 7);
    let mut e = encap_at(me.octets(), 1);
    let mut req = arp_frame(arp::OP_REQUEST, (hw(7), asker), (MacAddr([0; 6]), me));
    let Rx::Reply(len) = e.decap(&mut req, 0) else {
        panic!("no ARP reply")
    };
    let eth = EthRepr::parse(&req[..len]).unwrap();
    assert_eq!((eth.dst, eth.src), (hw(7), hw(1)));
    let a = ArpRepr::parse(&req[14..len]).unwrap();
    assert_eq!(
        (a.op, a.sender_mac, a.sender_ip, a.target_ip),
        (arp::OP_REPLY, hw(1), me, asker)
    );
    let mut other = arp_frame(
        arp::OP_REQUEST,
        (hw(7), asker),
        (MacAddr([0; 6]), Ipv4Addr::new(10, 71, 1, 3)),
    );
    assert_eq!(e.decap(&mut other, 0), Rx::Done);
    assert_eq!(
        e.neighbour(asker, 0),
        Some(hw(7)),
        "learned from the request addressed to us"
    );
}

#[test]
fn ping_is_answered_and_foreign_packets_ignored() {
    let me = Ipv4Addr::new(10, 71, 1, 1);
    let pinger = Ipv4Addr::new(10, 71, 9, 9);
    let mut e = encap_at(me.octets(), 1);
    let data = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut f = vec![0; 14 + 20 + 8 + data.len()];
    EthRepr {
        dst: hw(1),
        src: hw(0xa0),
        ethertype: eth::ETHERTYPE_IPV4,
    }
    .emit(&mut f);
    let ip = Ipv4Repr {
        src: pinger,
        dst: me,
        protocol: icmp::PROTOCOL,
        payload_len: 8 + data.len(),
        ttl: 60,
        header_len: 20,
        dont_fragment: false,
    };
    ip.emit(&mut f[14..]);
    f[42..].copy_from_slice(data);
    IcmpRepr {
        kind: icmp::ECHO_REQUEST,
        code: 0,
        ident: 0x1234,
        seq: 7,
    }
    .emit(&mut f[34..]);
    let mut other = f.clone();
    let Rx::Reply(len) = e.decap(&mut f, 0) else {
        panic!("no echo reply")
    };
    assert_eq!(len, f.len());
    assert_eq!(
        EthRepr::parse(&f).unwrap().dst,
        hw(0xa0),
        "back the way it came"
    );
    let rip = Ipv4Repr::parse(&f[14..]).unwrap();
    assert_eq!((rip.src, rip.dst), (me, pinger));
    let r = IcmpRepr::parse(&f[34..]).unwrap();
    assert_eq!((r.kind, r.ident, r.seq), (icmp::ECHO_REPLY, 0x1234, 7));
    assert_eq!(&f[42..], data);
    // The same packet for another address is not ours.
    Ipv4Repr {
        dst: Ipv4Addr::new(10, 71, 1, 2),
        ..ip
    }
    .emit(&mut other[14..]);
    assert_eq!(e.decap(&mut other, 0), Rx::Done);
    assert_eq!(e.stats.not_ours, 1);
}

#[test]
fn encapsulated_frames_are_well_formed_udp_ipv4() {
    let me = Ipv4Addr::new(10, 71, 1, 1);
    let peer = Ipv4Addr::new(10, 71, 1, 2);
    let mut a = encap_at(me.octets(), 1);
    let mut b = encap_at(peer.octets(), 2);
    let mut reply = arp_frame(arp::OP_REPLY, (hw(2), peer), (hw(1), me));
    a.decap(&mut reply, 0);
    let mut ports = std::collections::HashSet::new();
    for eps in 0..64u8 {
        let mut payload = [0u8; 60];
        payload[4..8].copy_from_slice(&[0, eps, 0, 1]);
        let mut f = engine_frame(node_id(peer, 7470), a.node_id(), &payload);
        let original = f[UDP_OVERHEAD..].to_vec();
        assert_eq!(a.encap(&mut f, 1), Tx::Send);
        let ip = Ipv4Repr::parse(&f[14..]).unwrap();
        assert!(ip.dont_fragment && ip.protocol == udp::PROTOCOL);
        assert_eq!((ip.src, ip.dst, ip.payload_len), (me, peer, f.len() - 34));
        let u = UdpRepr::parse(&f[34..]).unwrap();
        assert_eq!(u.dst_port, 7470);
        assert!(u.src_port >= 0xc000, "an ephemeral source port");
        assert!(udp::checksum_ok(&f[34..], me, peer) && u.checksum != 0);
        ports.insert(u.src_port);
        // Padded as a NIC would: the receiver must cut at the IP length.
        f.resize(f.len().max(60) + 4, 0);
        let Rx::Tigon(range) = b.decap(&mut f, 1) else {
            panic!("not delivered")
        };
        let got = &f[range];
        assert_eq!(
            &got[14..],
            &original[14..],
            "the tigon frame arrives unchanged"
        );
        let e = EthRepr::parse(got).unwrap();
        assert_eq!(
            (e.dst, e.src, e.ethertype),
            (b.node_id(), a.node_id(), wire::ETHERTYPE)
        );
        // Same pair, same port: order per pair holds on an ECMP fabric.
        let mut again = engine_frame(node_id(peer, 7470), a.node_id(), &payload);
        a.encap(&mut again, 1);
        assert_eq!(UdpRepr::parse(&again[34..]).unwrap().src_port, u.src_port);
    }
    assert!(
        ports.len() > 32,
        "endpoint pairs spread over source ports: {}",
        ports.len()
    );
    // A corrupted datagram is refused by its UDP checksum.
    let mut f = engine_frame(node_id(peer, 7470), a.node_id(), &[7; 40]);
    a.encap(&mut f, 1);
    let last = f.len() - 1;
    f[last] ^= 0x10;
    assert_eq!(b.decap(&mut f, 1), Rx::Bad);
}

proptest! {
    #[test]
    fn parsers_and_decap_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = EthRepr::parse(&bytes);
        let _ = ArpRepr::parse(&bytes);
        let _ = Ipv4Repr::parse(&bytes);
        let _ = UdpRepr::parse(&bytes);
        let _ = IcmpRepr::parse(&bytes);
        let mut e = encap_at([10, 71, 1, 1], 1);
        let mut b = bytes.clone();
        match e.decap(&mut b, 0) {
            Rx::Tigon(r) => prop_assert!(r.start <= r.end && r.end <= b.len()),
            Rx::Reply(n) => prop_assert!(n <= b.len()),
            Rx::Done | Rx::Bad => {}
        }
        // Frames shaped like ours, with random contents behind valid-looking headers.
        let mut f = bytes.clone();
        if f.len() >= 34 {
            f[12..14].copy_from_slice(&eth::ETHERTYPE_IPV4.to_be_bytes());
            f[14] = 0x45;
            let _ = e.decap(&mut f, 0);
        }
        let mut t = vec![0u8; UDP_OVERHEAD];
        t.extend_from_slice(&bytes);
        let _ = e.encap(&mut t, 0);
    }

    #[test]
    fn headers_round_trip(src in any::<u32>(), dst in any::<u32>(), len in 0usize..9000,
                          sp in any::<u16>(), dp in any::<u16>(), ttl in 1u8..) {
        let ip = Ipv4Repr {
            src: Ipv4Addr::from(src),
            dst: Ipv4Addr::from(dst),
            protocol: udp::PROTOCOL,
            payload_len: len,
            ttl,
            header_len: ipv4::HEADER_LEN,
            dont_fragment: true,
        };
        let mut b = vec![0u8; 20 + len];
        ip.emit(&mut b);
        prop_assert_eq!(Ipv4Repr::parse(&b).unwrap(), ip);
        let u = UdpRepr { src_port: sp, dst_port: dp, payload_len: len.saturating_sub(8), checksum: 0 };
        let mut d = vec![0u8; 8 + u.payload_len];
        u.emit(&mut d);
        prop_assert_eq!(UdpRepr::parse(&d).unwrap(), u);
        udp::fill_checksum(&mut d, ip.src, ip.dst);
        prop_assert!(udp::checksum_ok(&d, ip.src, ip.dst));
    }
}

/// With checksum offload the encapsulation leaves the IPv4 checksum zero and the pseudo-header
/// sum in the UDP field; a NIC completing both (done here as the NIC does) gives a datagram
/// the receiver accepts.
#[test]
fn checksum_offload_leaves_what_the_nic_completes() {
    let me = Ipv4Addr::new(10, 71, 1, 1);
    let peer = Ipv4Addr::new(10, 71, 1, 2);
    let mut c = UdpConfig::new(me, 24, hw(1));
    c.ip_checksum_offload = true;
    c.udp_checksum_offload = true;
    let mut a = UdpEncap::new(c);
    assert_eq!(a.offloads(), (true, true));
    let mut b = encap_at(peer.octets(), 2);
    let mut reply = arp_frame(arp::OP_REPLY, (hw(2), peer), (hw(1), me));
    a.decap(&mut reply, 0);
    let mut f = engine_frame(node_id(peer, 7470), a.node_id(), &[9; 100]);
    assert_eq!(a.encap(&mut f, 1), Tx::Send);
    assert_eq!(&f[24..26], &[0, 0], "IPv4 checksum left to the NIC");
    assert!(
        Ipv4Repr::parse(&f[14..]).is_err(),
        "not valid before the NIC"
    );
    // The NIC: IPv4 header checksum, then the UDP checksum over the datagram starting from
    // the pseudo-header sum in the field.
    let ck = tigon_engine::net::checksum(&f[14..34]);
    f[24..26].copy_from_slice(&ck.to_be_bytes());
    let seed = u32::from(u16::from_be_bytes([f[40], f[41]]));
    f[40..42].copy_from_slice(&[0, 0]);
    let sum = tigon_engine::net::ones_sum(&f[34..], seed);
    let udp_ck = match !(sum as u16) {
        0 => 0xffff,
        x => x,
    };
    f[40..42].copy_from_slice(&udp_ck.to_be_bytes());
    assert!(udp::checksum_ok(&f[34..], me, peer));
    assert!(matches!(b.decap(&mut f, 1), Rx::Tigon(_)));
}
