//! What the engine needs from a port: bursts of frames in and out.

use crate::wire::MacAddr;
use core::any::Any;

/// Payload bytes that lie in memory the link may transmit from in place (no copy): `len`
/// bytes at `offset` of `mem`. The copy engine finds them ([`crate::CopyEngine::tx_ref`]),
/// the link attaches them to a frame ([`Link::alloc_tx_ref`]); `mem` is whatever the two
/// agree on (the agent's registered channel memory), opaque to the engine.
#[derive(Clone, Copy)]
pub struct TxRef<'a> {
    pub mem: &'a (dyn Any + Send + Sync),
    pub offset: usize,
    pub len: usize,
}

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
    /// A transmit buffer whose first `head` bytes are writable (through `AsMut`, which
    /// reaches those bytes only) and whose payload is `payload`, attached in place: the
    /// frame is `head + payload.len` bytes, its payload read by the port when it sends it,
    /// not copied now. `None` when this link cannot (then the engine copies the payload
    /// into an [`Link::alloc_tx`] buffer). The payload's memory must not change until the
    /// frame has gone out.
    fn alloc_tx_ref(&mut self, _head: usize, _payload: TxRef<'_>) -> Option<Self::TxBuf> {
        None
    }
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
