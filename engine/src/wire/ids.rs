//! How a frame names what it belongs to: its connection (ids made of the nodes' sessions),
//! and the slot under which its receiver keeps the sender.

use super::*;

/// A connection's id on one side, carried as `src_session` / `dst_session` by every frame but
/// the handshake: the node's session mixed with the first sequence number of that side's
/// stream in this connection (random, in the Connect or ConnectAck `seq`). Two connections
/// between the same two incarnations (one was retired) thus never share ids. Never 0.
#[inline]
pub fn conn_id(session: u32, isn: u32) -> u32 {
    let x = (session ^ isn.rotate_left(13)).wrapping_mul(0x9e37_79b1) ^ isn;
    x.max(1)
}

/// The slot hint ([`Repr::slot`]) of a frame, read where its header's form puts it, without
/// any check of the frame (for reading the peer's state ahead: a wrong one costs a useless
/// read); None for a pull fragment, a frame too short to hold it, or a hint of 0.
#[inline(always)]
pub fn slot_hint(f: &[u8]) -> Option<u32> {
    // Each form's field at its constant place: a bounds check and a load (read by way of
    // `Form`, the field's place was worked out at run time: ~25 instructions a frame).
    let k = *f.get(field::KIND)?;
    let s = if k == Kind::Small as u8 || k == Kind::ShortAck as u8 {
        u32::from_le_bytes(f.get(field::small::SLOT)?.try_into().ok()?)
    } else if k == Kind::PullData as u8 {
        return None;
    } else {
        u32::from_be_bytes(f.get(field::SLOT)?.try_into().ok()?)
    };
    (s != 0).then_some(s)
}

/// The tag a compact frame carries instead of the sender's and the receiver's sessions: a
/// bijection of each given the other, so a frame of another incarnation of either side
/// mismatches (but for a 2^-32 chance).
#[inline]
pub fn session_tag(src_session: u32, dst_session: u32) -> u32 {
    src_session ^ dst_session.rotate_left(16) ^ 0x5a5a_a5a5
}
