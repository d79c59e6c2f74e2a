//! Eager messages: the data travels with the message, in fragments that arrive in order. The
//! receiver lands them in a posted receive, or holds the whole message in the unexpected
//! store (paid for by the credit it granted the sender) until a receive is posted. A
//! synchronous send completes when the receiver reports the match (Matched).

use crate::copy::CopyEngine;
use crate::engine::Engine;
use crate::engine::peer::{EagerTarget, InEager, eager_cost};
use crate::engine::request::RecvState;
use crate::engine::types::{Error, Outcome, ReqId};
use crate::engine::unexpected::{Data, Unexp};
use crate::link::Link;
use crate::wire::{self, Repr};
use smallvec::SmallVec;

impl<L: Link, C: CopyEngine<L::Frame>> Engine<L, C> {
    /// One in-order eager fragment. `false`: the store cannot take a new message now.
    pub(super) fn on_eager(&mut self, p: usize, r: &Repr, f: L::Frame) -> bool {
        let sync = r.flags & wire::FLAG_SYNC != 0;
        // The frame, unless the store keeps it as it is.
        let mut f = Some(f);
        let (target, last) = if r.frag_index == 0 {
            let Some(target) = self.start_eager(p, r, sync, &mut f) else {
                return false;
            };
            let msgs = &mut self.peers[p].msgs;
            if r.frag_count == 1 {
                // A message in one frame (every small one): no arrival state to keep.
                if msgs.in_eager.is_some() {
                    msgs.in_eager = None;
                }
                (target, true)
            } else {
                msgs.in_eager = Some(InEager {
                    msg_id: r.msg_id,
                    total: r.total,
                    next_frag: 1,
                    target,
                });
                (target, false)
            }
        } else {
            let Some(mut ie) = self.peers[p].msgs.in_eager else {
                self.stats.drop_malformed += 1;
                return true;
            };
            if ie.msg_id != r.msg_id || ie.next_frag != r.frag_index || ie.total != r.total {
                self.stats.drop_malformed += 1;
                return true;
            }
            ie.next_frag += 1;
            let last = r.frag_index + 1 == r.frag_count;
            self.peers[p].msgs.in_eager = if last { None } else { Some(ie) };
            (ie.target, last)
        };
        let head = r.payload_offset();
        let payload = head..head + r.length as usize;
        let Some(f) = f else {
            // Held by the store, whole: nothing to copy now.
            return true;
        };
        match target {
            EagerTarget::Req(id) => {
                let Some(rr) = self.reqs.recv_mut(id) else {
                    // The receive failed meanwhile: the message still ends for the sender.
                    if last {
                        self.release_credit(p, eager_cost(r.total), sync, r.msg_id);
                    }
                    return true;
                };
                let cap = rr.buf.len;
                let buf = rr.buf;
                let n = cap.saturating_sub(r.offset).min(r.length as u64);
                rr.received += n;
                if last {
                    rr.arrived = true;
                }
                if n > 0 {
                    self.submit_copy(
                        id,
                        f,
                        payload.start..payload.start + n as usize,
                        buf,
                        r.offset,
                    );
                }
                if last {
                    self.try_finish_recv(id);
                    self.release_credit(p, eager_cost(r.total), sync, r.msg_id);
                }
            }
            EagerTarget::Discard => {
                if last {
                    self.release_credit(p, eager_cost(r.total), false, r.msg_id);
                }
            }
            EagerTarget::Store(u) => {
                let Some(x) = self.unex.get_mut(u) else {
                    return true;
                };
                match &mut x.data {
                    Data::Frames { held, .. } => held.push((f, payload)),
                    Data::Bytes(data) => {
                        let at = r.offset as usize;
                        data[at..at + r.length as usize].copy_from_slice(&f.as_ref()[payload]);
                        self.stats.unexpected_copied_bytes += r.length as u64;
                    }
                }
                x.received += r.length as u64;
                if last && let Some(id) = x.claimed {
                    self.complete_from_store(u, id);
                }
            }
        }
        true
    }

    /// The first fragment of a new message: match it to a posted receive or make room for it
    /// in the store; where its fragments go. `None`: the store is full. A message in one
    /// frame is stored as that frame (`f` taken) while the store's frame bound allows: the
    /// link's receive pool must keep buffers for the port.
    fn start_eager(
        &mut self,
        p: usize,
        r: &Repr,
        sync: bool,
        f: &mut Option<L::Frame>,
    ) -> Option<EagerTarget> {
        self.peers[p].credit.last_eager_rx = self.now;
        let ep = r.dst_ep;
        let info = self.msg_info(p, r);
        let target = if self.eps.get(ep).is_err() {
            self.refuse_msg(p, r.msg_id);
            EagerTarget::Discard
        } else if let Some(id) = self.take_posted(ep, info, true) {
            EagerTarget::Req(id)
        } else {
            let cost = eager_cost(r.total);
            if self.unex.eager() >= self.cfg.unexpected_count
                || self.unex.bytes() + r.total > self.cfg.unexpected_bytes
            {
                return None;
            }
            let frames = r.frag_count as usize;
            let held = (frames > 1 || r.length as u64 == r.total)
                && self.unex.frames() + frames <= self.cfg.unexpected_frames;
            let (data, received) = match f.take_if(|_| held) {
                Some(f) => {
                    let head = r.payload_offset();
                    let mut held = SmallVec::new();
                    held.push((f, head..head + r.length as usize));
                    let data = Data::Frames {
                        held,
                        reserved: frames,
                    };
                    (data, r.length as u64)
                }
                None => (Data::Bytes(vec![0; r.total as usize]), 0),
            };
            EagerTarget::Store(self.add_unexp(Unexp {
                ep,
                peer: p,
                msg_id: r.msg_id,
                info,
                sync,
                rndv: false,
                data,
                received,
                cost,
                claimed: None,
            }))
        };
        Some(target)
    }

    /// Copies a fully arrived unexpected message into receive `id` and completes it.
    pub(super) fn complete_from_store(&mut self, u: u64, id: ReqId) {
        let Some(x) = self.unex.remove(u) else {
            return;
        };
        let Some(r) = self.reqs.recv_mut(id) else {
            return;
        };
        let n = x.info.len.min(r.buf.len);
        let buf = r.buf;
        let data = match x.data {
            Data::Bytes(data) => data,
            Data::Frames { mut held, .. } => {
                // Its frames, as they arrived: one whole message in one frame is lent to the
                // receiver if it takes leases (no copy at all); otherwise each is copied
                // once, as a message that meets its receive on arrival.
                r.state = RecvState::Eager;
                r.received = n;
                r.arrived = true;
                if held.len() == 1 && n == x.info.len && n > 0 {
                    let (f, range) = held.pop().expect("one frame");
                    if let Err(f) = self.copy.lend(f, range.clone(), &buf) {
                        held.push((f, range));
                    }
                }
                let mut off = 0u64;
                for (f, range) in held {
                    let take = n.saturating_sub(off).min(range.len() as u64) as usize;
                    let at = off;
                    off += range.len() as u64;
                    if take == 0 {
                        continue;
                    }
                    self.submit_copy(id, f, range.start..range.start + take, buf, at);
                    if self.reqs.recv_mut(id).is_none() {
                        // The copy failed, and the receive with it.
                        break;
                    }
                }
                self.try_finish_recv(id);
                self.release_credit(x.peer, x.cost, x.sync, x.msg_id);
                return;
            }
        };
        let res = self.copy.write(&buf, 0, &data[..n as usize]);
        match res {
            Ok(()) => {
                let r = self.reqs.recv_mut(id).expect("present");
                r.received = n;
                self.finish(
                    id,
                    Ok(Outcome::Received {
                        info: x.info,
                        received: n,
                        truncated: x.info.len > buf.len,
                    }),
                );
            }
            Err(e) => self.finish(id, Err(Error::Copy(e.0))),
        }
        // After the receive: a synchronous sender on this node completes right behind it.
        self.release_credit(x.peer, x.cost, x.sync, x.msg_id);
    }

    /// The receiver matched a synchronous send.
    pub(super) fn on_matched(&mut self, p: usize, msg_id: u32) {
        if let Some(&id) = self.peers[p].msgs.q.sends.get(&msg_id)
            && let Some(s) = self.reqs.send_mut(id)
        {
            s.matched = true;
            self.try_finish_send(id);
        }
    }
}
