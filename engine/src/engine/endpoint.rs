//! Local endpoints: each with its queues of posted receives and unexpected messages, both in
//! arrival order (MPI's matching order). Sessions are the node's (see peer.rs).

use super::types::{Error, ReqId};
use std::collections::VecDeque;

#[derive(Debug)]
pub(super) struct Endpoint {
    pub(super) posted: VecDeque<ReqId>,
    /// Keys into the unexpected store.
    pub(super) unexpected: VecDeque<u64>,
}

/// Endpoints by id.
#[derive(Debug, Default)]
pub(super) struct Endpoints(Vec<Option<Endpoint>>);

impl Endpoints {
    pub(super) fn get(&self, ep: u16) -> Result<&Endpoint, Error> {
        self.0
            .get(ep as usize)
            .and_then(Option::as_ref)
            .ok_or(Error::Invalid("endpoint"))
    }
    pub(super) fn get_mut(&mut self, ep: u16) -> Result<&mut Endpoint, Error> {
        self.0
            .get_mut(ep as usize)
            .and_then(Option::as_mut)
            .ok_or(Error::Invalid("endpoint"))
    }

    /// A free id to open: `id` if it is free, or the lowest free one.
    pub(super) fn free_id(&mut self, id: Option<u16>) -> Result<u16, Error> {
        let id = match id {
            Some(i) => i as usize,
            None => self
                .0
                .iter()
                .position(Option::is_none)
                .unwrap_or(self.0.len()),
        };
        if id > u16::MAX as usize {
            return Err(Error::Invalid("endpoint id (all in use)"));
        }
        if self.0.len() <= id {
            self.0.resize_with(id + 1, || None);
        }
        if self.0[id].is_some() {
            return Err(Error::Invalid("endpoint id (already open)"));
        }
        Ok(id as u16)
    }

    /// Opens free id `id` (from [`Endpoints::free_id`]).
    pub(super) fn open(&mut self, id: u16) {
        self.0[id as usize] = Some(Endpoint {
            posted: VecDeque::new(),
            unexpected: VecDeque::new(),
        });
    }

    pub(super) fn close(&mut self, ep: u16) -> Option<Endpoint> {
        self.0.get_mut(ep as usize)?.take()
    }
}
