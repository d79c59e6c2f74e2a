//! [`UdpLink`]: any Ethernet [`Link`] carrying the engine's frames in UDP/IPv4.
//!
//! The engine sees an ordinary link whose node address is [`super::node_id`] of the agent's
//! IP and port; below, frames are encapsulated in place ([`UdpEncap`]), ARP and ICMP echo are
//! answered, and frames waiting for a next hop's address are held a short while. A frame
//! whose next hop never answers is dropped: the engine resends, then fails the peer as
//! unreachable exactly as it fails a dead one.

use super::encap::{HEADROOM, Rx, Tx, UdpConfig, UdpEncap};
use crate::link::Link;
use crate::wire::{MIN_FRAME, MacAddr};
use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::ops::Range;

/// Frames held while their next hop is resolved, at most.
const HELD_MAX: usize = 256;

/// A received tigon frame: the engine's bytes of the lower link's frame.
pub struct UdpRxFrame<F> {
    frame: F,
    range: Range<usize>,
}

impl<F: AsRef<[u8]>> AsRef<[u8]> for UdpRxFrame<F> {
    fn as_ref(&self) -> &[u8] {
        &self.frame.as_ref()[self.range.clone()]
    }
}

/// A frame being built: the engine writes behind the encapsulation's headroom.
pub struct UdpTxFrame<B>(B);

impl<B: AsRef<[u8]>> AsRef<[u8]> for UdpTxFrame<B> {
    fn as_ref(&self) -> &[u8] {
        &self.0.as_ref()[HEADROOM..]
    }
}

impl<B: AsMut<[u8]>> AsMut<[u8]> for UdpTxFrame<B> {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.0.as_mut()[HEADROOM..]
    }
}

pub struct UdpLink<L: Link, C> {
    inner: L,
    encap: UdpEncap,
    clock: C,
    rx: Vec<L::Frame>,
    out: Vec<L::TxBuf>,
    held: VecDeque<(Ipv4Addr, u64, L::TxBuf)>,
    /// Frames dropped because their next hop did not answer ARP in time (or no route).
    pub dropped_unresolved: u64,
}

impl<L, C> UdpLink<L, C>
where
    L: Link,
    L::Frame: AsMut<[u8]>,
    C: Fn() -> u64,
{
    /// Puts `inner` under the UDP encapsulation `cfg` (its `mac` is taken from `inner`) and
    /// announces the address with a gratuitous ARP. `clock` gives nanoseconds.
    pub fn new(inner: L, mut cfg: UdpConfig, clock: C) -> Self {
        cfg.mac = inner.mac();
        let mut link = UdpLink {
            inner,
            encap: UdpEncap::new(cfg),
            clock,
            rx: Vec::new(),
            out: Vec::new(),
            held: VecDeque::new(),
            dropped_unresolved: 0,
        };
        if let Some(mut b) = link.inner.alloc_tx(MIN_FRAME) {
            link.encap.gratuitous_arp(b.as_mut());
            link.out.push(b);
        }
        link
    }

    pub fn encap(&self) -> &UdpEncap {
        &self.encap
    }

    pub fn inner(&self) -> &L {
        &self.inner
    }

    fn send_arp(&mut self, hop: Ipv4Addr) {
        if let Some(mut b) = self.inner.alloc_tx(MIN_FRAME) {
            self.encap.arp_request(hop, b.as_mut());
            self.out.push(b);
        }
    }

    /// Held frames whose next hop is now known are encapsulated, in order; those whose next
    /// hop stayed silent past two ARP retries are dropped (the engine's retransmits ask again).
    fn release_held(&mut self, now: u64) {
        let give_up = 2 * self.encap.config().arp_retry_ns + 1;
        for _ in 0..self.held.len() {
            let Some((hop, since, b)) = self.held.pop_front() else {
                break;
            };
            if self.encap.neighbour(hop, now).is_some() {
                self.encap_one(b, now);
            } else if now.saturating_sub(since) > give_up {
                self.dropped_unresolved += 1;
            } else {
                self.held.push_back((hop, since, b));
            }
        }
    }

    fn encap_one(&mut self, mut b: L::TxBuf, now: u64) {
        match self.encap.encap(b.as_mut(), now) {
            Tx::Send => self.out.push(b),
            Tx::Unresolved { next_hop, request } => {
                if request {
                    self.send_arp(next_hop);
                }
                if self.held.len() < HELD_MAX {
                    self.held.push_back((next_hop, now, b));
                } else {
                    self.dropped_unresolved += 1;
                }
            }
            Tx::Unroutable => self.dropped_unresolved += 1,
        }
    }
}

impl<L, C> Link for UdpLink<L, C>
where
    L: Link,
    L::Frame: AsMut<[u8]>,
    C: Fn() -> u64,
{
    type Frame = UdpRxFrame<L::Frame>;
    type TxBuf = UdpTxFrame<L::TxBuf>;

    fn rx_burst(&mut self, out: &mut Vec<Self::Frame>, max: usize) {
        let now = (self.clock)();
        self.inner.rx_burst(&mut self.rx, max);
        for mut f in self.rx.drain(..) {
            match self.encap.decap(f.as_mut(), now) {
                Rx::Tigon(range) => out.push(UdpRxFrame { frame: f, range }),
                Rx::Reply(len) => {
                    if let Some(mut b) = self.inner.alloc_tx(len.max(MIN_FRAME)) {
                        let o = b.as_mut();
                        o[..len].copy_from_slice(&f.as_ref()[..len]);
                        o[len..].fill(0);
                        self.out.push(b);
                    }
                }
                Rx::Done | Rx::Bad => {}
            }
        }
        // Answers (ARP, ping) and frames an ARP reply just resolved go out now: the engine
        // calls `tx_burst` only when it has frames of its own, and a node that only
        // receives has none until the sender's held frames reach it.
        self.release_held(now);
        if !self.out.is_empty() {
            self.inner.tx_burst(&mut self.out);
        }
    }

    fn alloc_tx(&mut self, len: usize) -> Option<Self::TxBuf> {
        self.inner.alloc_tx(len + HEADROOM).map(UdpTxFrame)
    }

    fn tx_burst(&mut self, frames: &mut Vec<Self::TxBuf>) {
        let now = (self.clock)();
        // Held frames first, in order.
        self.release_held(now);
        for UdpTxFrame(b) in frames.drain(..) {
            self.encap_one(b, now);
        }
        self.inner.tx_burst(&mut self.out);
        // What the lower link did not take (out of descriptors) is already encapsulated: it
        // waits in `out` for the next burst.
    }

    fn max_frame(&self) -> usize {
        self.inner.max_frame() - HEADROOM
    }

    fn mac(&self) -> MacAddr {
        self.encap.node_id()
    }

    fn frame_check(&self) -> bool {
        self.inner.frame_check()
    }
}

/// The engine-facing address of a node with this configuration.
pub fn node_of(cfg: &UdpConfig) -> MacAddr {
    super::node_id(cfg.ip, cfg.port)
}
