//! A client's request as an engine operation, and the engine's answer as the completion the
//! client reads: the one place that speaks both the channel's vocabulary and the engine's.

use tigon_engine::channel::{Completion, Payload, Request, status};
use tigon_engine::{
    BufRef, CopyEngine, Engine, Error, Link, MessageHandle, MsgInfo, Outcome, ReqId, SendMode,
};

/// What starting a request gave.
pub enum Started {
    /// An engine operation; its outcome comes later from `Engine::pop_completion`.
    Pending(ReqId),
    /// The answer at once: probes, cancels, and operations the engine refused.
    Done(Completion),
}

/// Starts `request` on endpoint `ep`. `buf` turns the request's payload into the engine's
/// reference to it; `cancellable` gives the engine request in descriptor `target`, if the
/// client may cancel it.
pub fn start<L: Link, C: CopyEngine<L::Frame>>(
    eng: &mut Engine<L, C>,
    ep: u16,
    request: Request,
    buf: impl Fn(Payload) -> BufRef,
    cancellable: impl Fn(u32) -> Option<ReqId>,
) -> Started {
    let started = match request {
        Request::Send {
            dest,
            match_bits,
            rank,
            sync,
            payload,
        } => {
            let mode = if sync {
                SendMode::Synchronous
            } else {
                SendMode::Standard
            };
            eng.isend_to(ep, dest, match_bits, rank, buf(payload), mode)
        }
        Request::Recv { spec, payload } => eng.irecv(ep, spec, buf(payload)),
        Request::MRecv { handle, payload } => {
            eng.imrecv(ep, MessageHandle::from_u64(handle), buf(payload))
        }
        Request::Probe { spec } => {
            let found = eng.iprobe(ep, spec).map(|o| o.map(|info| (info, 0)));
            return Started::Done(probed(found));
        }
        Request::MProbe { spec } => {
            let found = eng.improbe(ep, spec);
            let arrived = matches!(found, Ok(Some((h, _))) if eng.message_arrived(h));
            let mut done = probed(found.map(|o| o.map(|(h, info)| (info, h.as_u64()))));
            if arrived {
                // As good as here (Engine::message_arrived): the client may wait for its
                // MRecv, which needs nothing of the sending rank.
                done.received = done.info_len;
            }
            return Started::Done(done);
        }
        // Abandoning is the agent's business (serve.rs), not the engine's: as a cancel here.
        Request::Cancel { target, .. } => {
            let cancelled = cancellable(target).is_some_and(|r| eng.cancel(r));
            return Started::Done(Completion::status(if cancelled {
                status::OK
            } else {
                status::NO_MATCH
            }));
        }
    };
    match started {
        Ok(r) => Started::Pending(r),
        Err(e) => Started::Done(Completion::status(error_status(&e))),
    }
}

/// The completion of a probe: what it found (with its message handle), or nothing.
fn probed(found: Result<Option<(MsgInfo, u64)>, Error>) -> Completion {
    match found {
        Ok(Some((info, handle))) => Completion {
            status: status::OK,
            info_rank: info.src_rank,
            info_bits: info.match_bits,
            info_len: info.len,
            handle,
            ..Completion::default()
        },
        Ok(None) => Completion::status(status::NO_MATCH),
        Err(_) => Completion::status(status::INVALID),
    }
}

/// The completion of an engine operation.
pub fn completed(result: Result<Outcome, Error>) -> Completion {
    match result {
        Ok(Outcome::Sent) => Completion::status(status::OK),
        Ok(Outcome::Received {
            info,
            received,
            truncated,
        }) => Completion {
            status: status::OK,
            info_rank: info.src_rank,
            info_bits: info.match_bits,
            info_len: info.len,
            received,
            truncated,
            ..Completion::default()
        },
        Err(e) => Completion::status(error_status(&e)),
    }
}

fn error_status(e: &Error) -> u32 {
    match e {
        // No status of its own: to the rank, a peer of another release is unreachable (the
        // agent's log says why).
        Error::PeerUnreachable(_) | Error::WireVersion(..) => status::PEER_UNREACHABLE,
        Error::PeerRestarted(_) => status::PEER_RESTARTED,
        Error::Copy(_) => status::COPY_FAILED,
        Error::Cancelled => status::CANCELLED,
        Error::EndpointClosed => status::SHUTDOWN,
        Error::Invalid(_) => status::INVALID,
    }
}
