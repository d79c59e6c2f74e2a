//! Received frames lent to ranks: a small message that meets a receive whose rank maps the
//! node's receive memory (read-only) is not copied into the rank's data buffer; its frame is
//! held here, the completion names where its payload lies, and the rank copies it straight
//! into its own buffer and gives the lease back on its channel's lease ring; so do the
//! frames of a large message for a rank that polls for it (`lend_now`, named on the lent
//! ring). What a rank holds is bounded (`LEASE_SLOTS` each, and the agent's `LeaseBudget`
//! over all), and goes back to the pool when the rank leaves, however it left.

use super::link::RxFrame;
use tigon_engine::channel::LEASE_SLOTS;

/// One client's lent frames.
pub struct Leases {
    frames: Vec<Option<RxFrame>>,
    free: Vec<u32>,
    /// Leases of operations whose completion is not written yet: (token, lease, offset of
    /// the payload in the receive memory).
    pending: Vec<(u32, u32, u64)>,
}

impl Default for Leases {
    fn default() -> Self {
        Leases {
            frames: (0..LEASE_SLOTS).map(|_| None).collect(),
            free: (0..LEASE_SLOTS).rev().collect(),
            pending: Vec::with_capacity(LEASE_SLOTS as usize),
        }
    }
}

impl Leases {
    /// Holds `frame` for the operation `token`, its payload at `off`; gives it back when all
    /// slots are taken.
    pub fn lend(&mut self, token: u32, frame: RxFrame, off: u64) -> Result<(), RxFrame> {
        let Some(id) = self.free.pop() else {
            return Err(frame);
        };
        self.frames[id as usize] = Some(frame);
        self.pending.push((token, id, off));
        Ok(())
    }

    /// Holds `frame` under a lease the client is told of at once (a fragment of a large
    /// message, named on the lent ring rather than in a completion); gives it back when all
    /// slots are taken.
    pub fn lend_now(&mut self, frame: RxFrame) -> Result<u32, RxFrame> {
        let Some(id) = self.free.pop() else {
            return Err(frame);
        };
        self.frames[id as usize] = Some(frame);
        Ok(id)
    }

    /// Takes back lease `id` granted by [`Leases::lend_now`] that could not be told to the
    /// client after all.
    pub fn unlend(&mut self, id: u32) -> Option<RxFrame> {
        let f = self.frames.get_mut(id as usize).and_then(Option::take)?;
        self.free.push(id);
        Some(f)
    }

    /// The lease taken for operation `token`, if any: (lease, offset).
    pub fn take_pending(&mut self, token: u32) -> Option<(u32, u64)> {
        let i = self.pending.iter().position(|p| p.0 == token)?;
        let (_, id, off) = self.pending.swap_remove(i);
        Some((id, off))
    }

    /// The client gives lease `id` back: its frame returns to the pool. A lease it does not
    /// hold is an error (the client is broken or hostile).
    pub fn give_back(&mut self, id: u32) -> Result<(), String> {
        let held = self
            .frames
            .get_mut(id as usize)
            .and_then(Option::take)
            .ok_or_else(|| format!("gave back lease {id}, which it does not hold"))?;
        if self.pending.iter().any(|p| p.1 == id) {
            // Not told yet: put it back, the client cannot know this lease.
            self.frames[id as usize] = Some(held);
            return Err(format!("gave back lease {id} before it was granted"));
        }
        drop(held);
        self.free.push(id);
        Ok(())
    }

    /// Frames held now.
    pub fn held(&self) -> usize {
        LEASE_SLOTS as usize - self.free.len()
    }
}

/// The agent's bound on frames lent to all its clients: the receive pool must keep mbufs for
/// the port while clients hold leases (past the bound, payloads are copied as before).
#[derive(Debug, Clone, Copy)]
pub struct LeaseBudget {
    pub max: usize,
    pub held: usize,
}

impl LeaseBudget {
    /// A quarter of a receive pool of `pool` mbufs.
    pub fn for_pool(pool: u32) -> Self {
        LeaseBudget {
            max: pool as usize / 4,
            held: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(b: u8) -> RxFrame {
        RxFrame::Flat(vec![b; 8])
    }

    #[test]
    fn leases_are_bounded_named_once_and_given_back_once() {
        let mut l = Leases::default();
        for i in 0..LEASE_SLOTS {
            assert!(l.lend(i + 1, frame(i as u8), i as u64 * 64).is_ok());
        }
        assert_eq!(l.held(), LEASE_SLOTS as usize);
        assert!(l.lend(999, frame(0), 0).is_err(), "all slots taken");
        // Not granted yet (no completion written): refused.
        assert!(l.give_back(0).is_err());
        let (id, off) = l.take_pending(5).expect("operation 5 has a lease");
        assert_eq!(off, 4 * 64);
        assert!(l.take_pending(5).is_none(), "named once");
        assert!(l.give_back(id).is_ok());
        assert!(l.give_back(id).is_err(), "given back once");
        assert!(l.give_back(LEASE_SLOTS).is_err(), "out of range");
        assert_eq!(l.held(), LEASE_SLOTS as usize - 1);
        assert!(l.lend(1000, frame(1), 0).is_ok(), "its slot serves again");
    }

    /// A fragment's lease is granted at once (given back without a completion first), from
    /// the same slots as small messages'.
    #[test]
    fn fragment_leases_share_the_slots_and_are_granted_at_once() {
        let mut l = Leases::default();
        let a = l.lend_now(frame(1)).ok().expect("a free slot");
        assert!(l.lend(1, frame(2), 0).is_ok());
        let b = l.lend_now(frame(3)).ok().expect("a free slot");
        assert_ne!(a, b);
        assert_eq!(l.held(), 3);
        assert!(l.give_back(a).is_ok(), "no completion needed");
        assert!(l.unlend(b).is_some());
        assert!(l.unlend(b).is_none());
        assert!(l.give_back(b).is_err(), "taken back already");
        assert_eq!(l.held(), 1);
        while l.lend_now(frame(0)).is_ok() {}
        assert_eq!(l.held(), LEASE_SLOTS as usize);
    }
}
