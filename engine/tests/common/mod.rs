//! A few engines on a simulated segment, driven in virtual time.
#![allow(dead_code)]

use tigon_engine::sim::{Faults, SimNet, SimPort};
use tigon_engine::*;

pub type Eng = Engine<SimPort, CpuCopy<HeapMemory>>;
/// An engine on the in-memory link (tests that pass frames by hand).
pub type MemEng = Engine<tigon_engine::memlink::MemLink, CpuCopy<HeapMemory>>;

/// An engine at `mac` on the in-memory link (frames up to 1514 bytes, the default
/// configuration), its endpoint 0 open.
pub fn mem_engine(mac: MacAddr) -> MemEng {
    let mut e = MemEng::new(
        Config::default(),
        mac,
        1514,
        CpuCopy::new(HeapMemory::default()),
    )
    .unwrap();
    e.open_endpoint(Some(0)).unwrap();
    e
}

pub struct Node {
    pub eng: Eng,
    pub port: SimPort,
}

pub struct World {
    pub net: SimNet,
    pub nodes: Vec<Node>,
    pub now: u64,
    pub cfg: Config,
}

pub fn mac(i: usize) -> MacAddr {
    let n = i + 1;
    MacAddr([2, 0, 0, 0, (n >> 8) as u8, n as u8])
}

impl World {
    pub fn new(n: usize, faults: Faults, seed: u64, cfg: Config) -> World {
        let net = SimNet::new(faults, seed);
        let mut w = World {
            net,
            nodes: Vec::new(),
            now: 1_000,
            cfg,
        };
        for i in 0..n {
            w.add_node(i, seed.wrapping_add(i as u64 * 7919));
        }
        w
    }

    /// (Re)creates node `i` with a fresh engine: a restart, as far as its peers can tell.
    pub fn add_node(&mut self, i: usize, seed: u64) {
        let port = self.net.port(mac(i), self.cfg.max_frame);
        let mut eng = Eng::new(
            self.cfg.clone(),
            mac(i),
            self.cfg.max_frame,
            CpuCopy::new(HeapMemory::default()),
        )
        .unwrap();
        eng.seed(seed);
        let node = Node { eng, port };
        if i < self.nodes.len() {
            self.nodes[i] = node;
        } else {
            self.nodes.push(node);
        }
    }

    pub fn mem(&mut self, i: usize) -> &mut HeapMemory {
        &mut self.nodes[i].eng.copy_engine_mut().mem
    }

    /// One round: every node polls once, then virtual time moves on.
    pub fn step(&mut self) -> usize {
        let mut work = 0;
        for n in self.nodes.iter_mut() {
            work += n.eng.poll(&mut n.port, self.now);
        }
        // Busy: 1 µs per round. Idle: jump to the next arrival or timer granularity.
        let dt = if work > 0 {
            1_000
        } else {
            match self.net.next_arrival() {
                Some(t) if t > self.now => (t - self.now).min(50_000),
                _ => 50_000,
            }
        };
        self.now += dt;
        self.net.set_time(self.now);
        work
    }

    /// Steps until `done` holds; panics after `max_steps`.
    pub fn run_until(&mut self, max_steps: usize, mut done: impl FnMut(&mut World) -> bool) {
        for _ in 0..max_steps {
            if done(self) {
                return;
            }
            self.step();
        }
        panic!(
            "condition not reached within {max_steps} steps (virtual time {} ms)",
            self.now / 1_000_000
        );
    }

    /// Steps until node `i` reports a completion for `req`.
    pub fn wait(&mut self, i: usize, req: ReqId, max_steps: usize) -> Completion {
        let mut got = None;
        self.run_until(max_steps, |w| {
            let mut keep = Vec::new();
            while let Some(c) = w.nodes[i].eng.pop_completion() {
                if c.req == req {
                    got = Some(c);
                } else {
                    keep.push(c);
                }
            }
            assert!(keep.is_empty(), "unexpected completions {keep:?}");
            got.is_some()
        });
        got.unwrap()
    }
}

/// The bytes message `idx` from `sender` carries: a pattern no other message shares.
pub fn pattern(sender: u32, idx: u32, len: usize) -> Vec<u8> {
    let mut x: u64 = ((sender as u64) << 32 | idx as u64) ^ 0x9e37_79b9_7f4a_7c15;
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        for b in x.to_le_bytes() {
            if v.len() < len {
                v.push(b);
            }
        }
    }
    v
}
