//! The MPI-shaped calls: endpoints, sends, receives, probes and cancellation. Nothing here
//! moves a frame; the next [`Engine::poll`] does.

use super::Engine;
use super::fast;
use super::peer::PeerState;
use super::request::{RecvReq, RecvState, Req, ReqKind, SendReq};
use super::types::{Error, MessageHandle, MsgInfo, ReqId, SendMode};
use crate::addr::EndpointAddr;
use crate::copy::{BufRef, CopyEngine};
use crate::link::Link;
use crate::matching::MatchSpec;

impl<L: Link, C: CopyEngine<L::Frame>> Engine<L, C> {
    /// Opens endpoint `id` (or the lowest free one).
    pub fn open_endpoint(&mut self, id: Option<u16>) -> Result<EndpointAddr, Error> {
        let id = self.eps.free_id(id)?;
        self.eps.open(id);
        Ok(EndpointAddr::new(self.mac, id))
    }

    /// Closes an endpoint: its operations fail with [`Error::EndpointClosed`] (the senders of
    /// messages it was pulling are told); the sessions with peer nodes stay, for the node's
    /// other endpoints.
    pub fn close_endpoint(&mut self, ep: u16) {
        if self.eps.get(ep).is_err() {
            return;
        }
        self.fail_endpoint_ops(ep);
        let e = self.eps.close(ep).expect("checked");
        for r in e.posted {
            self.finish(r, Err(Error::EndpointClosed));
        }
        for u in e.unexpected {
            self.drop_unexp(u);
        }
        let handles: Vec<u64> = self
            .unex
            .probed
            .iter()
            .filter(|(_, u)| self.unex.get(**u).is_some_and(|x| x.ep == ep))
            .map(|(h, _)| *h)
            .collect();
        for h in handles {
            if let Some(u) = self.unex.probed.remove(&h) {
                self.drop_unexp(u);
            }
        }
    }

    /// Drops an unexpected message nobody will receive: its credit goes back to the sender,
    /// and a sender that waits for the receiver (rendezvous, synchronous) is told.
    fn drop_unexp(&mut self, u: u64) {
        let Some(x) = self.unex.remove(u) else {
            return;
        };
        if !x.rndv {
            self.release_credit(x.peer, x.cost, false, x.msg_id);
        }
        if x.rndv || x.sync {
            self.refuse_msg(x.peer, x.msg_id);
        }
    }

    /// Starts sending `buf` to `dest` with `bits` (context | tag) from MPI rank `rank`.
    /// Nothing moves until the next [`Engine::poll`].
    pub fn isend(
        &mut self,
        ep: u16,
        dest: EndpointAddr,
        bits: u64,
        rank: u32,
        buf: BufRef,
        mode: SendMode,
    ) -> Result<ReqId, Error> {
        let now = self.now;
        self.eps.get(ep)?;
        super::conn::check_dest(dest.mac)?;
        // The peer last looked up is usually this one: checked inline, the table (and a new
        // peer's set-up) out of line.
        let p = match self.find_peer(dest.mac) {
            Some(p) => p,
            None => self.peer_for(dest.mac),
        };
        let rndv_threshold = self.cfg.rndv_threshold;
        // The peer's entry borrowed once (the request slab is another field), again only
        // after a connection set-up.
        let mut peer = &mut self.peers[p];
        // The first operation towards a node sets its connection up; its first message may
        // ride right behind the Connect (`fast::small_send`).
        if peer.conn.state == PeerState::Idle {
            self.start_connect(p, now);
            peer = &mut self.peers[p];
        }
        let msg_id = {
            let msgs = &mut peer.msgs;
            let m = msgs.next_msg_id;
            msgs.next_msg_id = msgs.next_msg_id.wrapping_add(1).max(1);
            m
        };
        // A small standard message to a connected peer (the common case) is queued as its
        // frame right here (fast.rs); its request is written once, queued.
        let small = mode == SendMode::Standard && fast::small_send(peer, buf.len, rndv_threshold);
        let id = self.reqs.alloc(Req {
            ep,
            kind: ReqKind::Send(SendReq {
                unacked: small as u32,
                queued: small,
                ..SendReq::new(
                    p,
                    dest.ep,
                    msg_id,
                    buf,
                    bits,
                    rank,
                    mode == SendMode::Synchronous,
                )
            }),
        });
        self.stats.sends_posted += 1;
        if small {
            fast::queue_small(peer, id, msg_id, buf.len);
            self.stats.eager_sent += 1;
            if !peer.in_active {
                self.mark_active(p);
            }
            return Ok(id);
        }
        match self.peers[p].conn.state {
            // Straight onto the wire queue when nothing waits before it.
            PeerState::Connected if self.peers[p].msgs.q.waiting.is_empty() => {
                self.queue_send(p, id)
            }
            PeerState::Connected => {
                self.peers[p].msgs.q.waiting.push_back(id);
                self.flush_waiting(p);
            }
            PeerState::Connecting | PeerState::Idle => self.peers[p].msgs.q.waiting.push_back(id),
        }
        self.mark_active(p);
        Ok(id)
    }

    /// Posts a receive into `buf` for messages matching `spec`.
    pub fn irecv(&mut self, ep: u16, spec: MatchSpec, buf: BufRef) -> Result<ReqId, Error> {
        // The endpoint looked up once (the request slab and the store are other fields).
        let Engine {
            eps, reqs, unex, ..
        } = self;
        let e = eps.get_mut(ep)?;
        // Usually nothing waits unexpected: no search then.
        let hit = if e.unexpected.is_empty() {
            None
        } else {
            e.unexpected.iter().position(|&u| unex.matches(u, &spec))
        };
        let id = reqs.alloc(Req {
            ep,
            kind: ReqKind::Recv(RecvReq::posted(spec, buf)),
        });
        let hit = match hit {
            Some(i) => Some(e.unexpected.remove(i).expect("index from position")),
            None => {
                e.posted.push_back(id);
                None
            }
        };
        self.stats.recvs_posted += 1;
        if let Some(u) = hit {
            self.deliver_unexp(u, id);
        }
        Ok(id)
    }

    /// The first unexpected message matching `spec`, left in place.
    pub fn iprobe(&self, ep: u16, spec: MatchSpec) -> Result<Option<MsgInfo>, Error> {
        let e = self.eps.get(ep)?;
        Ok(e.unexpected
            .iter()
            .filter_map(|&u| self.unex.get(u))
            .find(|x| spec.matches(x.info.match_bits, x.info.src_rank))
            .map(|x| x.info))
    }

    /// Like [`Engine::iprobe`], but removes the message: only [`Engine::imrecv`] can receive it.
    pub fn improbe(
        &mut self,
        ep: u16,
        spec: MatchSpec,
    ) -> Result<Option<(MessageHandle, MsgInfo)>, Error> {
        let e = self.eps.get(ep)?;
        let Some(i) = e
            .unexpected
            .iter()
            .position(|&u| self.unex.matches(u, &spec))
        else {
            return Ok(None);
        };
        let u = self
            .eps
            .get_mut(ep)?
            .unexpected
            .remove(i)
            .expect("index from position");
        self.unex.probed.insert(u, u);
        let info = self.unex.get(u).expect("matched in the store").info;
        Ok(Some((MessageHandle::from_u64(u), info)))
    }

    /// Whether the message `msg` (from [`Engine::improbe`]) is as good as here, so that a
    /// receive of it ([`Engine::imrecv`]) needs nothing of the sending rank and may be waited
    /// for at once (the MTL receives it within `MPI_Imrecv`, as Open MPI's own PMLs do an
    /// eager message): an eager message whose last fragment is in (completed at once); a
    /// message from an endpoint of this node, whose bytes the engine pulls from its sender's
    /// memory itself; an eager-sized message that went by rendezvous because its sender had
    /// no credit left (one round trip to the sending engine, which serves the pull alone).
    /// False for a message past the rendezvous threshold from another node.
    pub fn message_arrived(&self, msg: MessageHandle) -> bool {
        self.unex
            .probed
            .get(&msg.as_u64())
            .and_then(|&u| self.unex.get(u))
            .is_some_and(|x| {
                if x.rndv {
                    self.peers[x.peer].mac == self.mac
                        || x.info.len <= self.cfg.rndv_threshold as u64
                } else {
                    x.received >= x.info.len
                }
            })
    }

    /// Receives a message taken by [`Engine::improbe`] into `buf`.
    /// Only the endpoint that probed the message may receive it.
    pub fn imrecv(&mut self, ep: u16, msg: MessageHandle, buf: BufRef) -> Result<ReqId, Error> {
        let h = msg.as_u64();
        match self.unex.probed.get(&h).and_then(|&u| self.unex.get(u)) {
            Some(x) if x.ep == ep => {}
            _ => return Err(Error::Invalid("message handle")),
        }
        let u = self
            .unex
            .probed
            .remove(&h)
            .ok_or(Error::Invalid("message handle"))?;
        let x = self.unex.get(u).ok_or(Error::Invalid("message handle"))?;
        let spec = MatchSpec::exact(x.info.match_bits);
        let id = self.reqs.alloc(Req {
            ep,
            kind: ReqKind::Recv(RecvReq::posted(spec, buf)),
        });
        self.stats.recvs_posted += 1;
        self.deliver_unexp(u, id);
        Ok(id)
    }

    /// Cancels a receive that has not matched. True if it was cancelled (its completion says so).
    pub fn cancel(&mut self, id: ReqId) -> bool {
        let Some(req) = self.reqs.get(id) else {
            return false;
        };
        let ep = req.ep;
        let ReqKind::Recv(RecvReq {
            state: RecvState::Posted,
            ..
        }) = req.kind
        else {
            return false;
        };
        if let Ok(e) = self.eps.get_mut(ep) {
            e.posted.retain(|&r| r != id);
        }
        self.finish(id, Err(Error::Cancelled));
        true
    }
}
