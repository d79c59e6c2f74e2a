//! The copy FIFO: message bytes go from frames into receive buffers through the copy engine
//! (a CPU copy, or a DMA device that finishes later). The FIFO mirrors the engine's queue one
//! for one, so receives complete in the order their data arrived.

use super::Engine;
use super::request::{RecvReq, RecvState};
use super::types::{Error, Outcome, ReqId};
use crate::copy::{BufRef, CopyEngine};
use crate::link::Link;

impl<L: Link, C: CopyEngine<L::Frame>> Engine<L, C> {
    /// Copies `range` of frame `f` into `buf` at `off` for receive `id`.
    pub(super) fn submit_copy(
        &mut self,
        id: ReqId,
        f: L::Frame,
        range: core::ops::Range<usize>,
        buf: BufRef,
        off: u64,
    ) {
        match self.copy.copy_from_frame(f, range, &buf, off) {
            Ok(true) if self.copy_fifo.is_empty() => {}
            Ok(done) => {
                self.copy_fifo.push_back((id, done));
                if let Some(r) = self.reqs.recv_mut(id) {
                    r.copies += 1;
                }
            }
            Err(e) => self.fail_recv(id, Error::Copy(e.0)),
        }
    }

    /// Completes an eager receive whose bytes have all arrived, once its copies are done. While
    /// earlier copies are still in the device, it queues behind them: receives complete in the
    /// order their data arrived.
    pub(super) fn try_finish_recv(&mut self, id: ReqId) {
        let fifo_busy = !self.copy_fifo.is_empty();
        let Some(r) = self.reqs.recv_mut(id) else {
            return;
        };
        match r.state {
            RecvState::Eager if r.arrived && r.copies == 0 => {
                if fifo_busy {
                    r.copies += 1;
                    self.copy_fifo.push_back((id, true));
                } else {
                    self.finish_recv_now(id);
                }
            }
            RecvState::Pulling { .. } => self.maybe_finish_pull(id),
            _ => {}
        }
    }

    fn finish_recv_now(&mut self, id: ReqId) {
        let Some(r) = self.reqs.recv_mut(id) else {
            return;
        };
        let info = r.info.expect("matched");
        let (received, truncated) = (r.received, info.len > r.buf.len);
        self.finish(
            id,
            Ok(Outcome::Received {
                info,
                received,
                truncated,
            }),
        );
    }

    /// Takes the copy engine's finished copies; completes the receives at the head of the
    /// FIFO whose copies are all done. Returns how many copies retired.
    pub(super) fn copy_completions(&mut self) -> usize {
        if self.copy_fifo.is_empty() {
            return 0;
        }
        let mut outcomes = std::mem::take(&mut self.copy_done);
        self.copy.poll_completed(&mut outcomes);
        let mut it = outcomes.drain(..);
        let mut failed: smallvec::SmallVec<[(ReqId, String); 4]> = smallvec::SmallVec::new();
        for entry in self.copy_fifo.iter_mut() {
            if entry.1 {
                continue;
            }
            let Some(o) = it.next() else { break };
            entry.1 = true;
            if let Err(e) = o {
                failed.push((entry.0, e.0));
            }
        }
        drop(it);
        self.copy_done = outcomes;
        for (id, e) in failed {
            self.fail_recv(id, Error::Copy(e));
        }
        let mut work = 0;
        while let Some(&(id, true)) = self.copy_fifo.front() {
            self.copy_fifo.pop_front();
            work += 1;
            if let Some(r) = self.reqs.recv_mut(id) {
                r.copies -= 1;
                if r.copies == 0 && r.arrived {
                    match r.state {
                        RecvState::Eager => self.finish_recv_now(id),
                        _ => self.maybe_finish_pull(id),
                    }
                }
            }
        }
        work
    }

    /// Fails a receive that matched a message. A rendezvous sender is still told FIN (the
    /// message reached this node; the failure is the receiving rank's to see).
    fn fail_recv(&mut self, id: ReqId, e: Error) {
        let pull = match self.reqs.recv_mut(id) {
            Some(RecvReq {
                state: RecvState::Pulling { peer, msg_id, .. },
                ..
            }) => Some((*peer, *msg_id)),
            _ => None,
        };
        self.end_pull(id);
        self.finish(id, Err(e));
        if let Some((peer, msg_id)) = pull {
            self.send_fin(peer, msg_id);
            self.pump_pulls(peer);
        }
    }
}
