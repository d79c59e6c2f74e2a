//! A single-producer single-consumer ring of 32-bit indices inside a [`Region`].
//!
//! Layout at `off`: the producer's count (u32) on its own cache line, the consumer's count on
//! the next, then `cap` slots. Counts run freely and wrap; `cap` is a power of two. The peer
//! is untrusted: a count that claims more entries than the ring holds is reported as
//! corruption, and every popped value must still be validated by the caller.

use crate::region::Region;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

const LINE: usize = 64;

/// One end (producer or consumer) of a ring.
#[derive(Debug, Clone)]
pub struct Ring {
    region: Arc<Region>,
    off: usize,
    cap: u32,
}

/// The peer wrote counts no correct peer could have written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrupt;

impl std::fmt::Display for Corrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("ring indices corrupted by the peer")
    }
}

impl Ring {
    /// Bytes a ring of `cap` slots occupies.
    pub fn bytes(cap: u32) -> usize {
        2 * LINE + cap as usize * 4
    }

    /// A ring at `off` in `region`; both sides must agree on `off` and `cap`.
    pub fn new(region: Arc<Region>, off: usize, cap: u32) -> io::Result<Ring> {
        if !cap.is_power_of_two() || !off.is_multiple_of(LINE) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ring: capacity must be a power of two, offset line-aligned",
            ));
        }
        region.atomic_u32(off + 2 * LINE + (cap as usize - 1) * 4)?; // whole ring in bounds
        Ok(Ring { region, off, cap })
    }

    fn prod(&self) -> &AtomicU32 {
        self.region
            .atomic_u32(self.off)
            .expect("checked at construction")
    }
    fn cons(&self) -> &AtomicU32 {
        self.region
            .atomic_u32(self.off + LINE)
            .expect("checked at construction")
    }
    fn slot(&self, i: u32) -> &AtomicU32 {
        self.region
            .atomic_u32(self.off + 2 * LINE + (i & (self.cap - 1)) as usize * 4)
            .expect("checked at construction")
    }

    pub fn capacity(&self) -> u32 {
        self.cap
    }

    /// Producer: appends `v`; `Ok(false)` when full (backpressure: try again later).
    pub fn push(&self, v: u32) -> Result<bool, Corrupt> {
        let head = self.prod().load(Ordering::Relaxed);
        let tail = self.cons().load(Ordering::Acquire);
        let used = head.wrapping_sub(tail);
        if used > self.cap {
            return Err(Corrupt);
        }
        if used == self.cap {
            return Ok(false);
        }
        self.slot(head).store(v, Ordering::Relaxed);
        self.prod().store(head.wrapping_add(1), Ordering::Release);
        Ok(true)
    }

    /// Producer: appends as many of `vs` as fit, in order, and publishes them at once (the
    /// consumer sees all of them or none); returns how many.
    pub fn push_all(&self, vs: &[u32]) -> Result<usize, Corrupt> {
        let head = self.prod().load(Ordering::Relaxed);
        let tail = self.cons().load(Ordering::Acquire);
        let used = head.wrapping_sub(tail);
        if used > self.cap {
            return Err(Corrupt);
        }
        let n = vs.len().min((self.cap - used) as usize);
        for (i, &v) in vs[..n].iter().enumerate() {
            self.slot(head.wrapping_add(i as u32))
                .store(v, Ordering::Relaxed);
        }
        if n > 0 {
            self.prod()
                .store(head.wrapping_add(n as u32), Ordering::Release);
        }
        Ok(n)
    }

    /// Consumer: takes the oldest entry, if any.
    pub fn pop(&self) -> Result<Option<u32>, Corrupt> {
        let tail = self.cons().load(Ordering::Relaxed);
        let head = self.prod().load(Ordering::Acquire);
        let avail = head.wrapping_sub(tail);
        if avail > self.cap {
            return Err(Corrupt);
        }
        if avail == 0 {
            return Ok(None);
        }
        let v = self.slot(tail).load(Ordering::Relaxed);
        self.cons().store(tail.wrapping_add(1), Ordering::Release);
        Ok(Some(v))
    }

    /// Entries waiting (as seen by either side).
    pub fn len(&self) -> u32 {
        self.prod()
            .load(Ordering::Acquire)
            .wrapping_sub(self.cons().load(Ordering::Acquire))
            .min(self.cap)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_full_and_corrupt() {
        let r = Arc::new(Region::create("ring", 4096, false).unwrap());
        let ring = Ring::new(r.clone(), 0, 8).unwrap();
        for i in 0..8 {
            assert!(ring.push(i).unwrap());
        }
        assert!(
            !ring.push(99).unwrap(),
            "full ring must refuse, not overwrite"
        );
        for i in 0..8 {
            assert_eq!(ring.pop().unwrap(), Some(i));
        }
        assert_eq!(ring.pop().unwrap(), None);
        // A peer scribbling over the producer count.
        r.atomic_u32(0).unwrap().store(1000, Ordering::Release);
        assert_eq!(ring.pop(), Err(Corrupt));
        assert!(Ring::new(r.clone(), 0, 6).is_err());
        assert!(Ring::new(r, 4000, 64).is_err());
    }

    #[test]
    fn push_all_publishes_what_fits_at_once() {
        let r = Arc::new(Region::create("ring", 4096, false).unwrap());
        let ring = Ring::new(r.clone(), 0, 8).unwrap();
        assert!(ring.push(100).unwrap());
        assert_eq!(ring.push_all(&[]).unwrap(), 0);
        assert_eq!(ring.push_all(&[0, 1, 2]).unwrap(), 3);
        assert_eq!(ring.len(), 4);
        // Only four more fit: the rest is left to the caller.
        assert_eq!(ring.push_all(&[3, 4, 5, 6, 7, 8]).unwrap(), 4);
        assert_eq!(ring.push_all(&[9]).unwrap(), 0);
        let got: Vec<u32> = std::iter::from_fn(|| ring.pop().unwrap()).collect();
        assert_eq!(got, [100, 0, 1, 2, 3, 4, 5, 6]);
        r.atomic_u32(0).unwrap().store(1000, Ordering::Release);
        assert_eq!(ring.push_all(&[1]), Err(Corrupt));
    }

    /// A consumer never sees part of a batch.
    #[test]
    fn push_all_is_seen_whole() {
        let r = Arc::new(Region::create("ring", 8192, false).unwrap());
        let p = Ring::new(r.clone(), 0, 64).unwrap();
        let c = p.clone();
        let batches = 20_000u32;
        let t = std::thread::spawn(move || {
            let mut b = 0;
            while b < batches {
                let v = [b * 3, b * 3 + 1, b * 3 + 2];
                if p.capacity() - p.len() >= 3 {
                    assert_eq!(p.push_all(&v).unwrap(), 3);
                    b += 1;
                } else {
                    std::thread::yield_now();
                }
            }
        });
        let mut want = 0;
        while want < batches * 3 {
            let n = c.len();
            assert_eq!(n % 3, 0, "a batch seen in part");
            for _ in 0..n {
                assert_eq!(c.pop().unwrap(), Some(want));
                want += 1;
            }
            if n == 0 {
                std::thread::yield_now();
            }
        }
        t.join().unwrap();
    }

    #[test]
    fn two_threads_in_order() {
        let r = Arc::new(Region::create("ring", 8192, false).unwrap());
        let p = Ring::new(r.clone(), 0, 64).unwrap();
        let c = p.clone();
        let n = 200_000u32;
        let t = std::thread::spawn(move || {
            let mut i = 0;
            while i < n {
                if p.push(i).unwrap() {
                    i += 1;
                } else {
                    std::thread::yield_now();
                }
            }
        });
        let mut want = 0;
        while want < n {
            match c.pop().unwrap() {
                Some(v) => {
                    assert_eq!(v, want);
                    want += 1;
                }
                None => std::thread::yield_now(),
            }
        }
        t.join().unwrap();
    }
}
