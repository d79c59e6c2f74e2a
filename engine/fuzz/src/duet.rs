//! Two engines and a man in the middle: the `engine_rx` target's harness.
//!
//! Engine A and engine B sit on two simulated segments; every frame either sends lands in a
//! queue of the harness (a tap port with the other's address), and reaches the other side
//! only when the fuzz input says so: unchanged, mutated (with its checksums fixed or not),
//! dropped, replayed from earlier, or replaced by a frame of the input's own. The input also
//! drives both engines' API (sends and receives of every size class, cancels, probes, an
//! endpoint closed and reopened) and time (from a nanosecond to half a minute, so every timer
//! fires), over raw Ethernet or UDP/IPv4 (`UdpLink`, ARP included). Everything is seeded:
//! one input always runs the same way, and frames captured from one run (the seeds) are
//! valid in the next. Checked: nothing panics, and no request completes twice.

use crate::Input;
use std::collections::VecDeque;
use std::net::Ipv4Addr;
use tigon_engine::matching::match_bits;
use tigon_engine::net::encap::UdpConfig;
use tigon_engine::net::link::UdpLink;
use tigon_engine::net::{UDP_OVERHEAD, ipv4, node_id, udp};
use tigon_engine::sim::{Faults, SimNet, SimPort};
use tigon_engine::wire::{ETH_HEADER_LEN, ETHERTYPE, Frame};
use tigon_engine::*;

type Clock = Box<dyn Fn() -> u64>;
type ULink = UdpLink<SimPort, Clock>;
type Eng<L> = Engine<L, CpuCopy<HeapMemory>>;

/// Ethernet addresses of A and B (their node names too, over raw Ethernet).
pub const HW: [MacAddr; 2] = [MacAddr([2, 0, 0, 0, 0, 0xa]), MacAddr([2, 0, 0, 0, 0, 0xb])];
/// IPv4 addresses of A and B over UDP (one /24).
pub const IP: [Ipv4Addr; 2] = [Ipv4Addr::new(10, 9, 0, 1), Ipv4Addr::new(10, 9, 0, 2)];
/// Message sizes a send or receive picks from (`u8 % len`): empty, compact, one frame,
/// several frames, rendezvous (past [`config`]'s threshold), several pulled blocks.
pub const SIZES: [usize; 12] = [
    0, 1, 8, 64, 255, 256, 1000, 1500, 3000, 5000, 20_000, 70_000,
];
/// Most operations one input runs.
const MAX_OPS: usize = 512;
/// Frames kept for replays, per direction.
const HISTORY: usize = 32;

/// Operations, the low 3 bits of an op byte; bit 3 picks the side (0: A acts, or the
/// frame goes A → B; 1: the other way), bits 4 and up are flags.
pub mod op {
    /// Deliver a frame of the input's own (u16 length, bytes). Flag 1: give it the
    /// Ethernet addresses of the direction; flag 2: fix its checksums.
    pub const INJECT: u8 = 0;
    /// Take the oldest queued frame: u8 count (mod 8) of (u16 position, u8 xor) mutations.
    /// Flag 1: drop it instead; flag 2: fix its checksums after mutating.
    pub const FORWARD: u8 = 1;
    /// Deliver again the frame forwarded `u8` frames ago.
    pub const REPLAY: u8 = 2;
    /// Send: u8 size class, u8 tag. Flag 1: synchronous.
    pub const SEND: u8 = 3;
    /// Post a receive: u8 size class, u8 tag. Flag 1: any source and tag.
    pub const RECV: u8 = 4;
    /// Forward every queued frame both ways, poll both, then let 2^(u8 % 36) ns pass.
    pub const STEP: u8 = 5;
    /// Cancel the side's outstanding request number `u8` (mod their count).
    pub const CANCEL: u8 = 6;
    /// Matched probe and receive of whatever waits unexpected. Flag 1: close the endpoint
    /// and open it again instead.
    pub const PROBE: u8 = 7;
    pub const B_SIDE: u8 = 8;
    pub const FLAG1: u8 = 16;
    pub const FLAG2: u8 = 32;
}

/// The engines' configuration: small thresholds, windows and stores, so that a short input
/// reaches rendezvous, pulled blocks, credit exhaustion and a full unexpected store.
pub fn config() -> Config {
    Config {
        rndv_threshold: 4096,
        pull_block: 8192,
        pull_outstanding: 2,
        window: 64,
        eager_credit: 64 << 10,
        eager_credit_initial: 16 << 10,
        eager_credit_floor: 2 << 10,
        unexpected_bytes: 256 << 10,
        unexpected_count: 64,
        unexpected_frames: 64,
        unexpected_rts: 64,
        peer_timeout_ns: 200_000_000,
        session_idle_ns: 1_000_000_000,
        ..Config::default()
    }
}

/// Two of them, built once per input: their sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Node {
    Eth { eng: Eng<SimPort>, link: SimPort },
    Udp { eng: Eng<ULink>, link: ULink },
}

/// Runs `$body` with `$e` the node's engine and `$l` its link, whatever the wire.
macro_rules! with {
    ($n:expr, |$e:ident, $l:ident| $body:expr) => {
        match $n {
            Node::Eth { eng: $e, link: $l } => $body,
            Node::Udp { eng: $e, link: $l } => $body,
        }
    };
}

struct Side {
    node: Node,
    /// The segment it sits on, and the harness's port there (the other side's address).
    net: SimNet,
    tap: SimPort,
    /// Frames it sent, not yet forwarded.
    sent: VecDeque<Vec<u8>>,
    /// Frames forwarded to it, latest last.
    history: VecDeque<Vec<u8>>,
    outstanding: Vec<ReqId>,
    /// Requests that completed successfully.
    done_ok: usize,
    /// The other side's engine address.
    peer: EndpointAddr,
}

pub struct Duet {
    sides: [Side; 2],
    udp: bool,
    now: u64,
}

impl Duet {
    /// A and B, unconnected, each with endpoint 0 open; over UDP/IPv4 when `udp`.
    pub fn new(udp: bool) -> Duet {
        let mk = |i: usize| -> (Node, SimNet, SimPort) {
            let net = SimNet::new(Faults::default(), 1);
            let cfg = config();
            let port = net.port(HW[i], cfg.max_frame + if udp { UDP_OVERHEAD } else { 0 });
            let tap = net.port(HW[1 - i], 1 << 16);
            let copy = CpuCopy::new(HeapMemory::default());
            let node = if udp {
                let clock_net = net.clone();
                let clock: Clock = Box::new(move || clock_net.now());
                let link = UdpLink::new(port, UdpConfig::new(IP[i], 24, HW[i]), clock);
                let eng = Eng::new(cfg, link.mac(), link.max_frame(), copy).expect("config");
                Node::Udp { eng, link }
            } else {
                let eng = Eng::new(cfg, HW[i], port.max_frame(), copy).expect("config");
                Node::Eth { eng, link: port }
            };
            (node, net, tap)
        };
        let name = |i: usize| {
            if udp {
                node_id(IP[i], tigon_engine::net::DEFAULT_PORT)
            } else {
                HW[i]
            }
        };
        let sides = [0, 1].map(|i| {
            let (mut node, net, tap) = mk(i);
            with!(&mut node, |e, _l| {
                e.seed(0x5eed + i as u64);
                e.open_endpoint(Some(0)).expect("endpoint 0");
            });
            Side {
                node,
                net,
                tap,
                sent: VecDeque::new(),
                history: VecDeque::new(),
                outstanding: Vec::new(),
                done_ok: 0,
                peer: EndpointAddr::new(name(1 - i), 0),
            }
        });
        let mut d = Duet {
            sides,
            udp,
            now: 1_000_000,
        };
        d.tick(0);
        d
    }

    /// Runs a whole fuzz input: a wire byte (bit 0: UDP), then operations ([`op`]).
    /// Returns how many requests completed successfully on each side.
    pub fn run(data: &[u8]) -> [usize; 2] {
        let mut input = Input::new(data);
        let Some(wire) = input.u8() else {
            return [0, 0];
        };
        let mut d = Duet::new(wire & 1 == 1);
        for _ in 0..MAX_OPS {
            let Some(o) = input.u8() else { break };
            if d.op(o, &mut input).is_none() {
                break;
            }
        }
        d.settle();
        d.sides.each_ref().map(|s| s.done_ok)
    }

    /// One operation; `None` when the input ran out in its middle.
    fn op(&mut self, o: u8, input: &mut Input) -> Option<()> {
        let side = usize::from(o & op::B_SIDE != 0);
        let (f1, f2) = (o & op::FLAG1 != 0, o & op::FLAG2 != 0);
        match o & 7 {
            op::INJECT => {
                let len = usize::from(input.u16()? % 2048);
                let mut f = input.bytes(len).to_vec();
                if f1 && f.len() >= 12 {
                    f[..6].copy_from_slice(&HW[1 - side].0);
                    f[6..12].copy_from_slice(&HW[side].0);
                }
                if f2 {
                    self.fix(&mut f);
                }
                self.deliver(side, f);
            }
            op::FORWARD => {
                let n = input.u8()? % 8;
                let mut muts = Vec::new();
                for _ in 0..n {
                    muts.push((input.u16()?, input.u8()?));
                }
                if let Some(mut f) = self.sides[side].sent.pop_front()
                    && !f1
                {
                    for (at, x) in muts {
                        if !f.is_empty() {
                            let i = usize::from(at) % f.len();
                            f[i] ^= x;
                        }
                    }
                    if f2 {
                        self.fix(&mut f);
                    }
                    self.deliver(side, f);
                }
            }
            op::REPLAY => {
                let back = usize::from(input.u8()?);
                let h = &self.sides[1 - side].history;
                if let Some(f) = h
                    .len()
                    .checked_sub(1 + back % h.len().max(1))
                    .map(|i| h[i].clone())
                {
                    self.deliver(side, f);
                }
            }
            op::SEND => {
                let (size, tag) = (input.u8()?, input.u8()?);
                self.send(side, size, tag, f1);
            }
            op::RECV => {
                let (size, tag) = (input.u8()?, input.u8()?);
                self.recv(side, size, tag, f1);
            }
            op::STEP => {
                let dt = 1u64 << (input.u8()? % 36);
                self.forward_all();
                self.tick(dt);
            }
            op::CANCEL => {
                let k = usize::from(input.u8()?);
                let s = &mut self.sides[side];
                if !s.outstanding.is_empty() {
                    let id = s.outstanding[k % s.outstanding.len()];
                    with!(&mut s.node, |e, _l| {
                        e.cancel(id);
                    });
                }
            }
            _ => self.probe(side, f1),
        }
        self.tick(1_000);
        Some(())
    }

    fn send(&mut self, side: usize, size: u8, tag: u8, sync: bool) {
        let len = SIZES[usize::from(size) % SIZES.len()];
        let s = &mut self.sides[side];
        let data: Vec<u8> = (0..len).map(|i| (i as u8) ^ tag).collect();
        let mode = if sync {
            SendMode::Synchronous
        } else {
            SendMode::Standard
        };
        let bits = match_bits(0, i32::from(tag));
        let peer = s.peer;
        if let Ok(id) = with!(&mut s.node, |e, _l| {
            let buf = e.copy_engine_mut().mem.insert(data);
            e.isend(0, peer, bits, side as u32, buf, mode)
        }) {
            s.outstanding.push(id);
        }
    }

    fn recv(&mut self, side: usize, size: u8, tag: u8, any: bool) {
        let len = SIZES[usize::from(size) % SIZES.len()];
        let s = &mut self.sides[side];
        let spec = if any {
            MatchSpec::mpi(0, ANY_SOURCE, ANY_TAG)
        } else {
            MatchSpec::mpi(0, (1 - side) as i32, i32::from(tag))
        };
        if let Ok(id) = with!(&mut s.node, |e, _l| {
            let buf = e.copy_engine_mut().mem.insert(vec![0; len]);
            e.irecv(0, spec, buf)
        }) {
            s.outstanding.push(id);
        }
    }

    fn probe(&mut self, side: usize, reopen: bool) {
        let s = &mut self.sides[side];
        let got = with!(&mut s.node, |e, _l| {
            if reopen {
                e.close_endpoint(0);
                let _ = e.open_endpoint(Some(0));
                None
            } else {
                match e.improbe(0, MatchSpec::mpi(0, ANY_SOURCE, ANY_TAG)) {
                    Ok(Some((h, info))) => {
                        let len = (info.len as usize).min(1 << 20);
                        let buf = e.copy_engine_mut().mem.insert(vec![0; len]);
                        e.imrecv(0, h, buf).ok()
                    }
                    _ => None,
                }
            }
        });
        s.outstanding.extend(got);
    }

    /// Hands `f` to side `to`'s engine, as if the other side had sent it.
    fn deliver(&mut self, to: usize, f: Vec<u8>) {
        let s = &mut self.sides[to];
        s.history.push_back(f.clone());
        if s.history.len() > HISTORY {
            s.history.pop_front();
        }
        s.tap.tx_burst(&mut vec![f]);
    }

    fn forward_all(&mut self) {
        for from in 0..2 {
            while let Some(f) = self.sides[from].sent.pop_front() {
                self.deliver(1 - from, f);
            }
        }
    }

    /// Polls both engines, collects what they sent and their completions, then lets `dt`
    /// nanoseconds pass.
    fn tick(&mut self, dt: u64) {
        let now = self.now;
        for s in &mut self.sides {
            s.net.set_time(now);
            let done = with!(&mut s.node, |e, l| {
                e.poll(l, now);
                let mut done = Vec::new();
                while let Some(c) = e.pop_completion() {
                    done.push(c.req);
                    s.done_ok += usize::from(c.result.is_ok());
                }
                done
            });
            for id in done {
                let Some(k) = s.outstanding.iter().position(|&o| o == id) else {
                    panic!("request {id:?} completed but was not outstanding (twice?)");
                };
                s.outstanding.swap_remove(k);
            }
        }
        for from in 0..2 {
            // What side `from` sent lands on its segment's tap.
            let mut got = Vec::new();
            self.sides[from].tap.rx_burst(&mut got, usize::MAX);
            self.sides[from].sent.extend(got);
        }
        self.now += dt;
    }

    /// Lets the exchange run to its end: everything forwarded, then time for the retransmit,
    /// ack, peer-timeout and session-idle timers.
    fn settle(&mut self) {
        for i in 0..64 {
            self.forward_all();
            self.tick(if i < 48 { 100_000 } else { 100_000_000 });
        }
    }

    /// Gives `f` valid checksums where it has their headers: the tigon header's (as the
    /// receiving engine will see the frame), and over UDP also the IPv4 header's and the
    /// datagram's.
    fn fix(&self, f: &mut [u8]) {
        if !self.udp {
            fix_tigon(f);
            return;
        }
        let l3 = ETH_HEADER_LEN;
        let (Some(h), true) = (f.get(l3..l3 + ipv4::HEADER_LEN), f.len() >= l3 + 28) else {
            return;
        };
        let src = Ipv4Addr::new(h[12], h[13], h[14], h[15]);
        let dst = Ipv4Addr::new(h[16], h[17], h[18], h[19]);
        let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
        let ihl = usize::from(h[0] & 0xf) * 4;
        if ihl < ipv4::HEADER_LEN || f.len() < l3 + ihl + udp::HEADER_LEN {
            return;
        }
        f[l3 + 10..l3 + 12].fill(0);
        let ck = tigon_engine::net::checksum(&f[l3..l3 + ihl]);
        f[l3 + 10..l3 + 12].copy_from_slice(&ck.to_be_bytes());
        let l4 = l3 + ihl;
        let tigon = l4 + udp::HEADER_LEN;
        // The engine's view of the tigon frame: its Ethernet-shaped header names the nodes.
        let port = tigon_engine::net::DEFAULT_PORT;
        let mut view = Vec::with_capacity(f.len() - tigon + ETH_HEADER_LEN);
        view.extend_from_slice(&node_id(dst, port).0);
        view.extend_from_slice(&node_id(src, port).0);
        view.extend_from_slice(&ETHERTYPE.to_be_bytes());
        view.extend_from_slice(&f[tigon..]);
        fix_tigon(&mut view);
        f[tigon..].copy_from_slice(&view[ETH_HEADER_LEN..]);
        let ulen = usize::from(u16::from_be_bytes([f[l4 + 4], f[l4 + 5]]));
        let end = (l3 + total).min(f.len());
        if ulen >= udp::HEADER_LEN && l4 + ulen <= end {
            udp::fill_checksum(&mut f[l4..l4 + ulen], src, dst);
        }
    }
}

/// Fills the checksum of an Ethernet-shaped tigon frame that holds its header.
pub fn fix_tigon(f: &mut [u8]) {
    if f.len() >= Frame::new_unchecked(&f[..]).payload_offset() {
        Frame::new_unchecked(&mut f[..]).fill_checksum();
    }
}
