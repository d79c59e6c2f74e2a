//! Seed inputs for each target, built by the engine's own emit functions (and, for
//! `engine_rx`, by the engines themselves): valid frames and exchanges, so that the fuzzer
//! mutates from inside the protocol instead of first guessing its way past the checksum.
//! Made afresh on every run (`examples/seeds.rs`), so they follow the wire version.

use crate::duet::{self, op};
use crate::put_record;
use std::net::Ipv4Addr;
use tigon_engine::MacAddr;
use tigon_engine::channel::{Desc, FLAG_DIRECT, FLAG_LEASE, FLAG_SYNC, NO_DATA, Op};
use tigon_engine::net::arp::{self, ArpRepr};
use tigon_engine::net::encap::{HEADROOM, UdpConfig};
use tigon_engine::net::eth::{self, EthRepr};
use tigon_engine::net::icmp::{self, IcmpRepr};
use tigon_engine::net::ipv4::{self, Ipv4Repr};
use tigon_engine::net::udp::{self, UdpRepr};
use tigon_engine::net::{DEFAULT_PORT, node_id};
use tigon_engine::wire::{
    AckFields, AckRepr, ConnectRepr, FLAG_ACK_NOW, FLAG_PAYLOAD_CK, FLAG_SYNC as WIRE_SYNC, Frame,
    Kind, Repr, short_ack,
};

/// The addresses the `net` target's encapsulation has (and its neighbours').
pub const NET_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub const NET_GW: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 254);
pub const NET_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
pub const NET_PEER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
pub const NET_PEER_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

/// The `net` target's encapsulation settings.
pub fn net_config() -> UdpConfig {
    UdpConfig {
        gateway: Some(NET_GW),
        ..UdpConfig::new(NET_IP, 24, NET_MAC)
    }
}

/// Seeds of target `name`, or `None` for a target without any.
pub fn of(name: &str) -> Option<Vec<Vec<u8>>> {
    Some(match name {
        "frame" => frames(),
        "engine_rx" => engine_rx(),
        "net" => net(),
        "channel" => channel(),
        _ => return None,
    })
}

/// A whole frame of header `r` with `payload`, its checksum filled.
fn frame(r: Repr, payload: &[u8]) -> Vec<u8> {
    let r = Repr {
        length: payload.len() as u32,
        ..r
    };
    let mut b = vec![0u8; 128 + payload.len()];
    let n = r.emit(&mut b);
    let at = r.payload_offset();
    b[at..at + payload.len()].copy_from_slice(payload);
    b.truncate(n);
    Frame::new_unchecked(&mut b[..]).fill_checksum();
    b
}

/// One frame of every kind and header form.
pub fn frames() -> Vec<Vec<u8>> {
    let base = Repr {
        dst_mac: duet::HW[1],
        src_mac: duet::HW[0],
        dst_ep: 0,
        src_ep: 3,
        src_session: 0x1234_5678,
        dst_session: 0x9abc_def0,
        seq: 7,
        ack: 5,
        msg_id: 2,
        src_rank: 1,
        frag_count: 1,
        credit: 4096,
        match_bits: 42,
        ..Repr::default()
    };
    let mut connect = [0u8; tigon_engine::wire::CONNECT_PAYLOAD_LEN];
    ConnectRepr {
        max_frame: 1514,
        window: 1024,
        eager_credit: 1 << 20,
        max_ack_delay_us: 5000,
        slot: 1,
    }
    .emit(&mut connect);
    let mut sack = AckRepr::default();
    for i in [0, 3, 64, 255] {
        sack.set(i);
    }
    let mut ack = [0u8; 32];
    sack.emit(&mut ack);
    let k = |kind| Repr {
        kind: Some(kind),
        ..base
    };
    let mut out = vec![
        frame(
            Repr {
                dst_session: 0,
                ..k(Kind::Connect)
            },
            &connect,
        ),
        frame(k(Kind::ConnectAck), &connect),
        frame(k(Kind::Ack), &ack),
        frame(
            Repr {
                total: 300,
                ..k(Kind::Eager)
            },
            &[0x5a; 300],
        ),
        frame(
            Repr {
                frag_index: 1,
                frag_count: 3,
                offset: 1400,
                total: 3000,
                flags: WIRE_SYNC | FLAG_PAYLOAD_CK,
                ..k(Kind::Eager)
            },
            &[1; 1400],
        ),
        frame(
            Repr {
                total: 1 << 20,
                ..k(Kind::Rts)
            },
            &[],
        ),
        frame(
            Repr {
                offset: 8192,
                total: 8192,
                ..k(Kind::Pull)
            },
            &[],
        ),
        frame(
            Repr {
                offset: 4096,
                ..k(Kind::PullData)
            },
            &[7; 1000],
        ),
        frame(
            Repr {
                flags: FLAG_PAYLOAD_CK | FLAG_ACK_NOW,
                ..k(Kind::PullData)
            },
            &[9; 64],
        ),
        frame(k(Kind::Small), b"eight by"),
        frame(
            Repr {
                flags: FLAG_PAYLOAD_CK,
                ..k(Kind::Small)
            },
            &[3; 255],
        ),
        frame(k(Kind::Matched), &[]),
        frame(k(Kind::Fin), &[]),
        frame(k(Kind::Reset), &[]),
        frame(k(Kind::Ping), &[]),
        frame(
            Repr {
                total: 65536,
                ..k(Kind::Grant)
            },
            &[],
        ),
        frame(k(Kind::GrantReturn), &[]),
        frame(k(Kind::Probe), &[]),
    ];
    let mut sa = vec![0u8; 60];
    short_ack(
        &mut sa,
        duet::HW[1],
        duet::HW[0],
        0,
        AckFields {
            tag: 0x5151,
            hold_us: 5_000,
            ack: 9,
            credit: 1000,
            slot: 3,
        },
    );
    Frame::new_unchecked(&mut sa[..]).fill_checksum();
    out.push(sa);
    out
}

/// Exchanges between the two engines, over both wires: every message class each way,
/// unexpected and posted, synchronous, rendezvous, mutated, dropped and replayed frames, a
/// forged Connect and a close of the endpoint mid-transfer.
pub fn engine_rx() -> Vec<Vec<u8>> {
    use op::*;
    let step = |n: usize, exp: u8| -> Vec<u8> { [STEP, exp].repeat(n) };
    // (size class, tag) per message; classes index duet::SIZES.
    let exchange = |sizes: &[u8], recv_first: bool, sync: bool| -> Vec<u8> {
        let mut v = Vec::new();
        for (t, &s) in sizes.iter().enumerate() {
            let recv = [RECV | B_SIDE, s, t as u8];
            let send = [SEND | if sync { FLAG1 } else { 0 }, s, t as u8];
            if recv_first {
                v.extend(recv);
                v.extend(send);
            } else {
                v.extend(send);
                v.extend(step(2, 10));
                v.extend(recv);
            }
        }
        v.extend(step(24, 12));
        v
    };
    let mut connect = [0u8; tigon_engine::wire::CONNECT_PAYLOAD_LEN];
    ConnectRepr {
        max_frame: 1514,
        window: 64,
        eager_credit: 64 << 10,
        max_ack_delay_us: 5000,
        slot: 1,
    }
    .emit(&mut connect);
    let forged = frame(
        Repr {
            dst_mac: duet::HW[1],
            src_mac: duet::HW[0],
            kind: Some(Kind::Connect),
            src_session: 0x0bad_cafe,
            seq: 100,
            ..Repr::default()
        },
        &connect,
    );
    let mut forge = vec![INJECT | FLAG2];
    put_record(&mut forge, &forged);
    forge.extend(exchange(&[2], true, false));
    let mut mutated = [RECV | B_SIDE, 10, 0, SEND, 10, 0].to_vec();
    for _ in 0..12 {
        // Two mutations of the next A → B frame, checksums fixed; then a plain step.
        mutated.extend([FORWARD | FLAG2, 2, 60, 0, 0x01, 20, 0, 0x80]);
        mutated.extend(step(1, 10));
    }
    mutated.extend(step(24, 14));
    let mut lossy = [RECV | B_SIDE, 9, 1, SEND, 9, 1].to_vec();
    for _ in 0..6 {
        lossy.extend([FORWARD | FLAG1, 0, FORWARD | B_SIDE, 0, REPLAY | B_SIDE, 0]);
        lossy.extend(step(1, 21));
    }
    lossy.extend(step(24, 22));
    let mut closing = exchange(&[11], true, false);
    closing.truncate(8);
    closing.extend([PROBE | B_SIDE | FLAG1, CANCEL, 0]);
    closing.extend(step(24, 20));
    let bodies = [
        exchange(&[1, 2, 4], true, false),
        exchange(&[2, 3, 5], false, false),
        exchange(&[6, 7, 8], true, true),
        exchange(&[9, 10], true, false),
        exchange(&[10, 11], false, false),
        [
            exchange(&[2], true, false),
            [PROBE | B_SIDE].to_vec(),
            exchange(&[9], false, false),
        ]
        .concat(),
        forge,
        mutated,
        lossy,
        closing,
    ];
    let mut out = Vec::new();
    for wire in [0u8, 1] {
        for b in &bodies {
            out.push([&[wire][..], b].concat());
        }
    }
    out
}

/// An Ethernet frame of `ethertype` from `src` to `dst` around `payload`.
fn eth(dst: MacAddr, src: MacAddr, ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; eth::HEADER_LEN + payload.len()];
    EthRepr {
        dst,
        src,
        ethertype,
    }
    .emit(&mut b);
    b[eth::HEADER_LEN..].copy_from_slice(payload);
    b
}

fn arp(op: u16, from: (MacAddr, Ipv4Addr), to: (MacAddr, Ipv4Addr)) -> Vec<u8> {
    let mut p = [0u8; arp::LEN];
    ArpRepr {
        op,
        sender_mac: from.0,
        sender_ip: from.1,
        target_mac: to.0,
        target_ip: to.1,
    }
    .emit(&mut p);
    eth(to.0, from.0, eth::ETHERTYPE_ARP, &p)
}

/// An IPv4 packet from `src` to us carrying `l4` of `protocol`.
fn ip(src: Ipv4Addr, protocol: u8, l4: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; ipv4::HEADER_LEN + l4.len()];
    Ipv4Repr {
        src,
        dst: NET_IP,
        protocol,
        payload_len: l4.len(),
        ttl: ipv4::TTL,
        header_len: ipv4::HEADER_LEN,
        dont_fragment: true,
    }
    .emit(&mut p);
    p[ipv4::HEADER_LEN..].copy_from_slice(l4);
    eth(NET_MAC, NET_PEER_MAC, eth::ETHERTYPE_IPV4, &p)
}

/// A UDP datagram to tigon's port carrying the tigon part (from the version byte) of `f`.
fn udp_tigon(src: Ipv4Addr, f: &[u8]) -> Vec<u8> {
    let body = &f[eth::HEADER_LEN..];
    let mut d = vec![0u8; udp::HEADER_LEN + body.len()];
    UdpRepr {
        src_port: 0xc123,
        dst_port: DEFAULT_PORT,
        payload_len: body.len(),
        checksum: 0,
    }
    .emit(&mut d);
    d[udp::HEADER_LEN..].copy_from_slice(body);
    udp::fill_checksum(&mut d, src, NET_IP);
    ip(src, udp::PROTOCOL, &d)
}

/// Records for the `net` target (op byte, then a length-prefixed frame; see its source):
/// ARP both ways, gratuitous ARP, ping, tigon datagrams from on- and off-subnet, and engine
/// frames to encapsulate for a resolved, an unresolved and an off-subnet node.
pub fn net() -> Vec<Vec<u8>> {
    let peer = (NET_PEER_MAC, NET_PEER);
    let us = (NET_MAC, NET_IP);
    let gw = (MacAddr([2, 0, 0, 0, 0, 0xfe]), NET_GW);
    let mut echo = vec![0u8; icmp::HEADER_LEN + 32];
    echo[icmp::HEADER_LEN..].fill(0x61);
    IcmpRepr {
        kind: icmp::ECHO_REQUEST,
        code: 0,
        ident: 1,
        seq: 1,
    }
    .emit(&mut echo);
    let tigon = frames();
    // An engine frame to send: its Ethernet-shaped header names the destination node.
    let to_node = |ip: Ipv4Addr| {
        let mut f = vec![0u8; HEADROOM];
        let mut t = tigon[9].clone();
        t[..6].copy_from_slice(&node_id(ip, DEFAULT_PORT).0);
        t[6..12].copy_from_slice(&node_id(NET_IP, DEFAULT_PORT).0);
        f.extend(t);
        f
    };
    let rec = |op: u8, f: &[u8]| {
        let mut v = vec![op];
        put_record(&mut v, f);
        v
    };
    let gratuitous = {
        let mut f = arp(arp::OP_REQUEST, peer, (MacAddr([0; 6]), NET_PEER));
        f[..6].copy_from_slice(&MacAddr::BROADCAST.0);
        f
    };
    let mut out = vec![
        rec(0, &arp(arp::OP_REQUEST, peer, us)),
        [
            rec(2, &to_node(NET_PEER)),
            rec(0, &arp(arp::OP_REPLY, peer, us)),
            rec(2, &to_node(NET_PEER)),
            rec(2 | 40 << 2, &to_node(NET_PEER)),
        ]
        .concat(),
        [
            rec(2, &to_node(Ipv4Addr::new(10, 7, 0, 9))),
            rec(0, &arp(arp::OP_REPLY, gw, us)),
            rec(3, &to_node(Ipv4Addr::new(10, 7, 0, 9))),
        ]
        .concat(),
        [rec(0, &arp(arp::OP_REPLY, peer, us)), rec(0, &gratuitous)].concat(),
        rec(0, &ip(NET_PEER, icmp::PROTOCOL, &echo)),
    ];
    for (i, t) in tigon.iter().enumerate() {
        let src = if i % 2 == 0 {
            NET_PEER
        } else {
            Ipv4Addr::new(10, 7, 0, 9)
        };
        out.push(rec(0, &udp_tigon(src, t)));
    }
    out
}

/// Requests for the `channel` target: each operation, through a data buffer, direct and
/// leased, in a request ring's slots (the target's input layout is in its source: ring
/// counts, lease slots, then request slots).
pub fn channel() -> Vec<Vec<u8>> {
    let peer = tigon_engine::EndpointAddr::new(MacAddr([2, 0, 0, 0, 0, 2]), 1);
    let descs = [
        Desc {
            op: Op::Send as u8,
            flags: FLAG_SYNC,
            data_idx: 1,
            len: 100,
            peer: Some(peer),
            ..Desc::default()
        },
        Desc {
            op: Op::Recv as u8,
            flags: FLAG_LEASE,
            data_idx: 2,
            len: 512,
            ..Desc::default()
        },
        Desc {
            op: Op::Recv as u8,
            flags: FLAG_DIRECT,
            data_idx: NO_DATA,
            addr: 0x7000_0000,
            len: 1 << 20,
            ..Desc::default()
        },
        Desc {
            op: Op::MProbe as u8,
            ..Desc::default()
        },
        Desc {
            op: Op::MRecv as u8,
            data_idx: 0,
            len: 64,
            handle: 5,
            ..Desc::default()
        },
        Desc {
            op: Op::Cancel as u8,
            handle: 1,
            ..Desc::default()
        },
    ];
    // The geometry a client finds in its header: 8 descriptors, 4 data buffers of 1 KiB.
    let mut v = [8u32, 4, 1024].map(u32::to_le_bytes).concat();
    // Request ring: 6 entries queued; lease ring: 2 given back (its slots' low words).
    for w in [6u32, 0, 2, 0, 3, 0, 70, 0] {
        v.extend_from_slice(&w.to_le_bytes());
    }
    // Request slots: the entry word (descriptor index, then its sequence number: the
    // position + 1), then the request.
    for (i, d) in descs.iter().enumerate() {
        v.extend_from_slice(&(i as u32).to_le_bytes());
        v.extend_from_slice(&(i as u32 + 1).to_le_bytes());
        v.extend_from_slice(&d.emit());
    }
    vec![v]
}
