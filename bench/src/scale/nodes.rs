//! The far side of `tigon bench scale`: N simulated remote nodes behind one in-memory link.
//! Each is a few words of state (its session, the node under test's session, sequence
//! numbers, the eager credit it was granted and has used) and speaks just enough of the
//! wire protocol to send small standard messages to the node under test: `Connect`, then
//! `Small` frames within its credit (flagged for an ack at once when under a quarter of it is
//! left, as the engine's sender does); it reads the `ConnectAck`, the acks (their cumulative
//! credit release) and acknowledges any sequenced frame it is sent. Running N full engines
//! instead would measure N engines; this measures the one engine that holds N peers.

use tigon_engine::memlink::{MemFrame, MemLink};
use tigon_engine::wire::{self, ConnectRepr, Frame, Kind, MacAddr, Repr};
use tigon_engine::{EndpointAddr, Link};

/// Credit one eager message costs (its bytes and the receiver's 64-byte store overhead).
fn eager_cost(len: usize) -> u32 {
    len as u32 + 64
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Idle,
    Connecting,
    Connected,
}

/// One remote node: 32 bytes.
#[derive(Clone, Copy)]
struct Node {
    state: State,
    /// Messages asked for while connecting, sent once connected.
    queued: u16,
    /// The node under test's slot of this node + 1, from its ConnectAck: every frame
    /// carries it (`Repr::slot`). (The node's session is a function of its index:
    /// `session_of`.)
    slot: u32,
    /// The node under test's connection id, from its ConnectAck (its session and the first
    /// sequence number of its stream; this node's stream starts at 0).
    remote: u32,
    next_seq: u32,
    /// Next sequenced frame expected from the node under test (acknowledged in every frame).
    rcv_next: u32,
    grant: u32,
    released: u32,
    used: u32,
}

/// N remote nodes, each with one endpoint (MPI rank = node index).
pub struct Nodes {
    nodes: Vec<Node>,
    link: MemLink,
    /// The node under test: its endpoint all messages go to.
    dest: EndpointAddr,
    bits: u64,
    payload: Vec<u8>,
    rx: Vec<MemFrame>,
    tx: Vec<Vec<u8>>,
    /// Whether the nodes name the slot the node under test gave them in their frames
    /// (`Repr::slot`; else 0: it looks them up by address).
    pub slot_hints: bool,
    /// Frames sent and received (for the report: what the engine under test handled).
    pub frames_out: u64,
    pub frames_in: u64,
}

/// Remote node `i`'s address.
pub fn mac_of(i: usize) -> MacAddr {
    MacAddr([2, 1, 0, (i >> 16) as u8, (i >> 8) as u8, i as u8])
}

/// Node `i`'s session: any non-zero value distinct per node will do.
fn session_of(i: usize) -> u32 {
    (i as u32).wrapping_mul(0x9e37_79b9) | 1
}

fn index_of(m: MacAddr) -> usize {
    (m.0[3] as usize) << 16 | (m.0[4] as usize) << 8 | m.0[5] as usize
}

impl Nodes {
    pub fn new(n: usize, link: MemLink, dest: EndpointAddr, bits: u64, size: usize) -> Nodes {
        let idle = Node {
            state: State::Idle,
            queued: 0,
            slot: 0,
            remote: 0,
            next_seq: 0,
            rcv_next: 0,
            grant: 0,
            released: 0,
            used: 0,
        };
        let nodes = vec![idle; n];
        Nodes {
            nodes,
            link,
            dest,
            bits,
            payload: vec![7; size],
            rx: Vec::new(),
            tx: Vec::new(),
            slot_hints: true,
            frames_out: 0,
            frames_in: 0,
        }
    }

    /// Bytes of this side's state per node (it is in the process's RSS).
    pub fn bytes_per_node() -> usize {
        std::mem::size_of::<Node>()
    }

    /// Whether node `i` may send a message now, or queue one while it connects (false: it
    /// waits for credit the node under test has not released yet).
    pub fn can_send(&self, i: usize) -> bool {
        let n = &self.nodes[i];
        match n.state {
            State::Connected => {
                n.grant.wrapping_add(n.released).wrapping_sub(n.used)
                    >= eager_cost(self.payload.len())
            }
            State::Connecting => n.queued < u16::MAX,
            State::Idle => true,
        }
    }

    /// Node `i` sends one small message to the node under test (connecting first if it has
    /// not yet). Call only where [`Nodes::can_send`] says so.
    pub fn send(&mut self, i: usize) {
        match self.nodes[i].state {
            State::Idle => {
                self.nodes[i].state = State::Connecting;
                self.nodes[i].queued = 1;
                self.connect(i);
            }
            State::Connecting => self.nodes[i].queued += 1,
            State::Connected => self.small(i),
        }
    }

    fn header(&self, i: usize, kind: Kind) -> Repr {
        let n = &self.nodes[i];
        Repr {
            dst_mac: self.dest.mac,
            src_mac: mac_of(i),
            kind: Some(kind),
            // Connection ids (`wire::conn_id`), the handshake's raw sessions set by the caller.
            src_session: wire::conn_id(session_of(i), 0),
            dst_session: n.remote,
            ack: n.rcv_next,
            slot: n.slot,
            ..Repr::default()
        }
    }

    fn connect(&mut self, i: usize) {
        let h = Repr {
            src_session: session_of(i),
            dst_session: 0,
            seq: 0,
            length: wire::CONNECT_PAYLOAD_LEN as u32,
            ..self.header(i, Kind::Connect)
        };
        let mut p = [0u8; wire::CONNECT_PAYLOAD_LEN];
        ConnectRepr {
            max_frame: self.link.max_frame() as u32,
            window: 1024,
            eager_credit: 0,
            // Every frame from the node under test is acknowledged at once.
            max_ack_delay_us: 0,
            // Its frames are found by their address (this side has no table to spare).
            slot: 0,
        }
        .emit(&mut p);
        self.push(h, &p);
    }

    fn small(&mut self, i: usize) {
        let len = self.payload.len();
        let n = &mut self.nodes[i];
        n.used = n.used.wrapping_add(eager_cost(len));
        // Under a quarter of the grant left: the frame asks for its ack at once, which brings
        // the credit back (what the engine's sender does: `wire::FLAG_ACK_NOW`); otherwise
        // the node under test may hold the ack while its loop is busy.
        let left = n.grant.wrapping_add(n.released).wrapping_sub(n.used);
        let flags = if left < n.grant / 4 {
            wire::FLAG_ACK_NOW
        } else {
            0
        };
        let seq = n.next_seq;
        n.next_seq = n.next_seq.wrapping_add(1);
        let h = Repr {
            dst_ep: self.dest.ep,
            src_ep: 0,
            seq,
            src_rank: i as u32,
            match_bits: self.bits,
            length: len as u32,
            total: len as u64,
            flags,
            ..self.header(i, Kind::Small)
        };
        let p = std::mem::take(&mut self.payload);
        self.push(h, &p);
        self.payload = p;
    }

    fn push(&mut self, h: Repr, payload: &[u8]) {
        let len = h.payload_offset() + payload.len();
        let mut buf = self
            .link
            .alloc_tx(len.max(wire::MIN_FRAME))
            .expect("memory link buffers");
        h.emit(&mut buf);
        buf[h.payload_offset()..len].copy_from_slice(payload);
        Frame::new_unchecked(&mut buf[..]).fill_checksum();
        self.tx.push(buf);
    }

    /// Sends what is queued and handles what the node under test sent; returns the frames
    /// received.
    pub fn poll(&mut self) -> usize {
        if !self.tx.is_empty() {
            let before = self.tx.len();
            self.link.tx_burst(&mut self.tx);
            self.frames_out += (before - self.tx.len()) as u64;
        }
        let mut rx = std::mem::take(&mut self.rx);
        self.link.rx_burst(&mut rx, 64);
        let got = rx.len();
        for f in rx.drain(..) {
            self.on_frame(f.as_ref());
        }
        self.rx = rx;
        self.frames_in += got as u64;
        got
    }

    fn on_frame(&mut self, f: &[u8]) {
        let Ok(r) = Frame::new_checked(f).and_then(|x| Repr::parse(&x)) else {
            return;
        };
        let i = index_of(r.dst_mac);
        let Some(kind) = r.kind else { return };
        if i >= self.nodes.len() {
            return;
        }
        match kind {
            Kind::ConnectAck => {
                let Ok(c) = ConnectRepr::parse(Frame::new_unchecked(f).payload()) else {
                    return;
                };
                let n = &mut self.nodes[i];
                if n.state != State::Connecting || r.dst_session != session_of(i) {
                    return;
                }
                n.state = State::Connected;
                n.slot = if self.slot_hints { c.slot } else { 0 };
                n.remote = wire::conn_id(r.src_session, r.seq);
                n.rcv_next = r.seq;
                n.grant = c.eager_credit;
                n.released = r.credit;
                for _ in 0..std::mem::take(&mut n.queued) {
                    self.small(i);
                }
            }
            _ if self.nodes[i].state != State::Connected => {}
            _ => {
                let n = &mut self.nodes[i];
                if (r.credit.wrapping_sub(n.released) as i32) > 0 {
                    n.released = r.credit;
                }
                if kind.is_sequenced() {
                    // Not part of this traffic (the node under test sends only acks), but
                    // acknowledged, so that nothing is resent.
                    if r.seq == n.rcv_next {
                        n.rcv_next = n.rcv_next.wrapping_add(1);
                    }
                    let h = Repr {
                        length: wire::ACK_PAYLOAD_LEN as u32,
                        ..self.header(i, Kind::Ack)
                    };
                    self.push(h, &[0; wire::ACK_PAYLOAD_LEN]);
                }
            }
        }
    }
}
