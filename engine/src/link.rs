//! What the engine needs from a port: bursts of frames in and out.

use crate::wire::MacAddr;

/// A port the poll loop drives. The agent implements it over a DPDK port; tests over [`crate::sim`].
///
/// Frames addressed to the link's own MAC must come back on its own receive side: that is how
/// two endpoints of one node talk without touching the wire.
pub trait Link {
    /// A received frame, owned until the engine drops it (an mbuf in the agent).
    type Frame: AsRef<[u8]> + 'static;
    /// A frame being built for transmission.
    type TxBuf: AsRef<[u8]> + AsMut<[u8]>;

    /// Appends received frames to `out`: up to `max` per source the link reads from (a
    /// link with a loopback for its own frames may give up to `max` of each).
    fn rx_burst(&mut self, out: &mut Vec<Self::Frame>, max: usize);
    /// A transmit buffer of exactly `len` bytes, or `None` when out of buffers (backpressure).
    fn alloc_tx(&mut self, len: usize) -> Option<Self::TxBuf>;
    /// Sends frames from the front of `frames`, removing those sent; the rest stay queued.
    fn tx_burst(&mut self, frames: &mut Vec<Self::TxBuf>);
    /// Largest frame, Ethernet header included, that this link carries (MTU + 14).
    fn max_frame(&self) -> usize;
    /// This port's address.
    fn mac(&self) -> MacAddr;
    /// Whether the link itself rejects corrupted frames: Ethernet's FCS on a real wire, or
    /// memory (memif, veth, an in-process link). Where it does not, the engine checksums
    /// payloads as well as headers unless told otherwise (`Config::payload_checksum`).
    fn frame_check(&self) -> bool {
        true
    }
}
