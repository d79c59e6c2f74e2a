//! A simulated Ethernet segment for tests and benchmarks: seeded loss, duplication,
//! reordering, corruption and delay, in virtual time.

use crate::link::Link;
use crate::wire::{ETH_HEADER_LEN, MacAddr};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::cell::RefCell;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::rc::Rc;

/// How the wire misbehaves. Probabilities are per frame.
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    pub loss: f64,
    pub duplicate: f64,
    /// Probability a frame is held back by up to `reorder_ns` more.
    pub reorder: f64,
    pub corrupt: f64,
    pub delay_ns: u64,
    pub reorder_ns: u64,
}

/// Frame counts of the segment.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimStats {
    pub sent: u64,
    pub delivered: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub corrupted: u64,
}

struct InFlight {
    at: u64,
    order: u64,
    to: MacAddr,
    frame: Vec<u8>,
}

impl PartialEq for InFlight {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.order) == (o.at, o.order)
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, o: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for InFlight {
    fn cmp(&self, o: &Self) -> core::cmp::Ordering {
        // Earliest first in a max-heap.
        (o.at, o.order).cmp(&(self.at, self.order))
    }
}

struct Segment {
    faults: Faults,
    rng: SmallRng,
    now: u64,
    order: u64,
    wire: BinaryHeap<InFlight>,
    inbox: HashMap<MacAddr, VecDeque<Vec<u8>>>,
    stats: SimStats,
    /// Ports unplugged: their frames vanish both ways.
    down: Vec<MacAddr>,
}

/// A shared segment; ports attach to it by MAC.
#[derive(Clone)]
pub struct SimNet(Rc<RefCell<Segment>>);

impl SimNet {
    pub fn new(faults: Faults, seed: u64) -> Self {
        SimNet(Rc::new(RefCell::new(Segment {
            faults,
            rng: SmallRng::seed_from_u64(seed),
            now: 0,
            order: 0,
            wire: BinaryHeap::new(),
            inbox: HashMap::new(),
            stats: SimStats::default(),
            down: Vec::new(),
        })))
    }

    /// A port with address `mac` carrying frames up to `max_frame` bytes.
    pub fn port(&self, mac: MacAddr, max_frame: usize) -> SimPort {
        self.0.borrow_mut().inbox.entry(mac).or_default();
        SimPort {
            net: self.clone(),
            mac,
            max_frame,
        }
    }

    /// Advances virtual time, moving due frames into their inboxes.
    pub fn set_time(&self, now: u64) {
        let mut s = self.0.borrow_mut();
        s.now = now;
        while s.wire.peek().is_some_and(|f| f.at <= now) {
            let f = s.wire.pop().expect("peeked");
            if s.down.contains(&f.to) {
                s.stats.lost += 1;
                continue;
            }
            s.stats.delivered += 1;
            if let Some(q) = s.inbox.get_mut(&f.to) {
                q.push_back(f.frame);
            }
        }
    }

    pub fn now(&self) -> u64 {
        self.0.borrow().now
    }

    /// Earliest time a frame in flight lands, if any.
    pub fn next_arrival(&self) -> Option<u64> {
        self.0.borrow().wire.peek().map(|f| f.at)
    }

    pub fn stats(&self) -> SimStats {
        self.0.borrow().stats
    }

    pub fn set_faults(&self, f: Faults) {
        self.0.borrow_mut().faults = f;
    }

    /// Unplugs (or replugs) a port: frames to and from it are lost.
    pub fn set_down(&self, mac: MacAddr, down: bool) {
        let mut s = self.0.borrow_mut();
        s.down.retain(|m| *m != mac);
        if down {
            s.down.push(mac);
            if let Some(q) = s.inbox.get_mut(&mac) {
                q.clear();
            }
        }
    }

    /// Frames in flight or waiting in inboxes.
    pub fn in_flight(&self) -> usize {
        let s = self.0.borrow();
        s.wire.len() + s.inbox.values().map(VecDeque::len).sum::<usize>()
    }

    fn send(&self, from: MacAddr, frame: Vec<u8>) {
        let to = match frame.get(0..6) {
            Some(d) => MacAddr(d.try_into().expect("6")),
            None => MacAddr::default(),
        };
        if to != MacAddr::BROADCAST {
            return self.send_to(from, to, frame);
        }
        // A broadcast (ARP) reaches every other port, each copy meeting the faults alone.
        let mut ports: Vec<MacAddr> = self.0.borrow().inbox.keys().copied().collect();
        ports.sort();
        for p in ports.into_iter().filter(|p| *p != from) {
            self.send_to(from, p, frame.clone());
        }
    }

    fn send_to(&self, from: MacAddr, to: MacAddr, frame: Vec<u8>) {
        let mut s = self.0.borrow_mut();
        let s = &mut *s;
        s.stats.sent += 1;
        if frame.len() < ETH_HEADER_LEN || s.down.contains(&from) {
            s.stats.lost += 1;
            return;
        }
        let f = s.faults;
        if s.rng.gen_bool(f.loss.clamp(0.0, 1.0)) {
            s.stats.lost += 1;
            return;
        }
        let copies = if s.rng.gen_bool(f.duplicate.clamp(0.0, 1.0)) {
            s.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut fr = frame.clone();
            if s.rng.gen_bool(f.corrupt.clamp(0.0, 1.0)) {
                s.stats.corrupted += 1;
                let i = s.rng.gen_range(0..fr.len());
                fr[i] ^= 1 << s.rng.gen_range(0..8);
            }
            let mut at = s.now + f.delay_ns;
            if f.reorder_ns > 0 && s.rng.gen_bool(f.reorder.clamp(0.0, 1.0)) {
                s.stats.reordered += 1;
                at += s.rng.gen_range(1..=f.reorder_ns);
            }
            s.order += 1;
            let order = s.order;
            if at <= s.now {
                // No delay: straight to the inbox, in order.
                if s.down.contains(&to) {
                    s.stats.lost += 1;
                } else if let Some(q) = s.inbox.get_mut(&to) {
                    s.stats.delivered += 1;
                    q.push_back(fr);
                }
            } else {
                s.wire.push(InFlight {
                    at,
                    order,
                    to,
                    frame: fr,
                });
            }
        }
    }
}

/// One port on a [`SimNet`].
pub struct SimPort {
    net: SimNet,
    mac: MacAddr,
    max_frame: usize,
}

impl Link for SimPort {
    type Frame = Vec<u8>;
    type TxBuf = Vec<u8>;

    fn rx_burst(&mut self, out: &mut Vec<Vec<u8>>, max: usize) {
        let mut s = self.net.0.borrow_mut();
        if let Some(q) = s.inbox.get_mut(&self.mac) {
            for _ in 0..max {
                match q.pop_front() {
                    Some(f) => out.push(f),
                    None => break,
                }
            }
        }
    }
    fn alloc_tx(&mut self, len: usize) -> Option<Vec<u8>> {
        Some(vec![0; len])
    }
    fn tx_burst(&mut self, frames: &mut Vec<Vec<u8>>) {
        for f in frames.drain(..) {
            self.net.send(self.mac, f);
        }
    }
    fn max_frame(&self) -> usize {
        self.max_frame
    }
    fn mac(&self) -> MacAddr {
        self.mac
    }
    /// A simulated wire has no FCS: it corrupts frames on purpose.
    fn frame_check(&self) -> bool {
        false
    }
}
