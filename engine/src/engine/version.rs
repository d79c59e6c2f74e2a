//! A peer that speaks another wire version. Every version starts its header with the version
//! and kind bytes, and versions 1 to 3 share the full header's endpoint fields, so the
//! handshake frames of another version can still be read that far: the operations addressed to
//! such a peer fail with [`Error::WireVersion`] at connect instead of waiting out the peer
//! deadline, and a connect request of another version is answered with a Reset of this one,
//! which a peer of a later version reads the same way.

use super::Engine;
use super::types::Error;
use crate::addr::EndpointAddr;
use crate::copy::CopyEngine;
use crate::link::Link;
use crate::wire::{self, Kind, MacAddr, Repr};

/// Offsets every version so far shares (in the frame, Ethernet header included).
const VERSION: usize = wire::ETH_HEADER_LEN;
const KIND: usize = wire::ETH_HEADER_LEN + 1;
const DST_EP: usize = wire::ETH_HEADER_LEN + 4;
const SRC_EP: usize = wire::ETH_HEADER_LEN + 6;
const SRC_SESSION: usize = wire::ETH_HEADER_LEN + 8;

impl<L: Link, C: CopyEngine<L::Frame>> Engine<L, C> {
    /// A frame of our EtherType but another version.
    pub(super) fn on_other_version(&mut self, b: &[u8]) {
        if b.len() < SRC_SESSION + 4 {
            self.stats.drop(wire::Error::Version);
            return;
        }
        // A frame of ours with its version byte damaged on the way is no peer of another
        // version: with our version put back, it checks.
        let mut ours = b.to_vec();
        ours[VERSION] = wire::VERSION;
        if wire::Frame::new_checked(&ours[..]).is_ok() {
            self.stats.drop(wire::Error::Checksum);
            return;
        }
        self.stats.drop(wire::Error::Version);
        let Some(kind) = Kind::from_u8(b[KIND]) else {
            return;
        };
        if !matches!(kind, Kind::Connect | Kind::ConnectAck | Kind::Reset) {
            return;
        }
        let mac = |r: core::ops::Range<usize>| MacAddr(b[r].try_into().expect("6"));
        let (dst_mac, src_mac) = (mac(0..6), mac(6..12));
        if dst_mac != self.mac || src_mac == self.mac {
            return;
        }
        let be16 = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        let (dst_ep, src_ep) = (be16(DST_EP), be16(SRC_EP));
        // Sessions are the node's: the answer names this node's incarnation.
        let my_session = self.session;
        let theirs = b[VERSION];
        if kind == Kind::Connect {
            let src_session =
                u32::from_be_bytes(b[SRC_SESSION..SRC_SESSION + 4].try_into().expect("4"));
            self.resets.push(Repr {
                dst_mac: src_mac,
                src_mac: self.mac,
                kind: Some(Kind::Reset),
                dst_ep: src_ep,
                src_ep: dst_ep,
                src_session: my_session,
                dst_session: src_session,
                ..Repr::default()
            });
        }
        if let Some(p) = self.peer_of(src_mac) {
            self.stats.peer_version_mismatch += 1;
            self.reset_peer(p, move |a: EndpointAddr| Error::WireVersion(a, theirs));
        }
    }
}
