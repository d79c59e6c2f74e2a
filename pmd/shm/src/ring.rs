//! A single-producer single-consumer ring of 32-bit indices inside a [`Region`], each with
//! an optional payload of [`PAYLOAD`] bytes in its slot ([`Ring::with_payload`]).
//!
//! Layout at `off`: the producer's count (u32) on its own cache line, the consumer's count on
//! the next, then `cap` slots of 8 bytes (a whole line each with a payload: the entry and
//! what it says cross between the cores as one line, not as a slot and then the record the
//! slot names). Counts run freely and wrap; `cap` is a power of two.
//! A slot holds its value and the producer's count just after it was pushed (`seq`, the high
//! 32 bits), so the consumer learns of an entry from the slot alone: one cache line comes over
//! from the producer's core per entry, where reading the producer's count first and then the
//! slot took two, one after the other (measured between the two vCPUs of this VM, ping-pong
//! over two rings: 307 ns one way before, 163 ns with slots that say they are full; medians).
//! The producer reads the consumer's count only when its last look says the ring is full.
//! The consumer reads slots only (an empty ring is one line to poll); the counts stay for
//! [`Ring::len`] and the producer's room. The peer is untrusted: a count that claims more
//! entries than the ring holds is corruption to the producer, a slot without the entry
//! expected there is no entry to the consumer, and every popped value must still be validated
//! by the caller.

use crate::region::Region;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

const LINE: usize = 64;
const SLOT: usize = 8;
/// Bytes of payload in a slot of a ring made by [`Ring::with_payload`]: the rest of the slot's
/// cache line after its entry word.
pub const PAYLOAD: usize = LINE - SLOT;

/// One end (producer or consumer) of a ring.
#[derive(Debug)]
pub struct Ring {
    region: Arc<Region>,
    off: usize,
    cap: u32,
    /// Bytes per slot: [`SLOT`], or a whole line with a payload.
    slot_len: usize,
    /// The producer's last look at the consumer's count (this process's memory, not the
    /// region's): while it leaves room, a push reads nothing the consumer writes. Older than
    /// the real count is always safe (less room than there is); a clone starts from it.
    seen_cons: AtomicU32,
}

impl Clone for Ring {
    fn clone(&self) -> Ring {
        Ring {
            region: self.region.clone(),
            off: self.off,
            cap: self.cap,
            slot_len: self.slot_len,
            seen_cons: AtomicU32::new(self.seen_cons.load(Ordering::Relaxed)),
        }
    }
}

/// The peer wrote counts no correct peer could have written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrupt;

impl std::fmt::Display for Corrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("ring indices corrupted by the peer")
    }
}

/// A slot's contents: the entry `v` pushed at count `pos` (its `seq` is `pos + 1`).
#[inline]
fn entry(pos: u32, v: u32) -> u64 {
    (u64::from(pos.wrapping_add(1)) << 32) | u64::from(v)
}

impl Ring {
    /// Bytes a ring of `cap` slots occupies.
    pub fn bytes(cap: u32) -> usize {
        2 * LINE + cap as usize * SLOT
    }

    /// Bytes a ring of `cap` slots with payloads occupies.
    pub fn bytes_with_payload(cap: u32) -> usize {
        2 * LINE + cap as usize * LINE
    }

    /// A ring at `off` in `region`; both sides must agree on `off` and `cap`. The region's
    /// bytes there must be zero when the ring is first used (a fresh or cleared region).
    pub fn new(region: Arc<Region>, off: usize, cap: u32) -> io::Result<Ring> {
        Self::make(region, off, cap, SLOT)
    }

    /// A ring whose entries carry [`PAYLOAD`] bytes each, in their slot's line
    /// ([`Ring::push_all_with`], [`Ring::pop_with`]); [`Ring::bytes_with_payload`] long.
    pub fn with_payload(region: Arc<Region>, off: usize, cap: u32) -> io::Result<Ring> {
        Self::make(region, off, cap, LINE)
    }

    fn make(region: Arc<Region>, off: usize, cap: u32, slot_len: usize) -> io::Result<Ring> {
        if !cap.is_power_of_two() || !off.is_multiple_of(LINE) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ring: capacity must be a power of two, offset line-aligned",
            ));
        }
        // The whole ring in bounds.
        region.atomic_u64(off + 2 * LINE + (cap as usize - 1) * slot_len + slot_len - SLOT)?;
        Ok(Ring {
            region,
            off,
            cap,
            slot_len,
            seen_cons: AtomicU32::new(0),
        })
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
    /// Byte offset of the slot of position `i`.
    #[inline]
    fn slot_off(&self, i: u32) -> usize {
        self.off + 2 * LINE + (i & (self.cap - 1)) as usize * self.slot_len
    }
    fn slot(&self, i: u32) -> &AtomicU64 {
        self.region
            .atomic_u64(self.slot_off(i))
            .expect("checked at construction")
    }

    pub fn capacity(&self) -> u32 {
        self.cap
    }

    /// Producer: room for how many more entries after `head`, looking at the consumer's
    /// count only when the last look leaves none.
    #[inline]
    fn room(&self, head: u32, want: u32) -> Result<u32, Corrupt> {
        let used = head.wrapping_sub(self.seen_cons.load(Ordering::Relaxed));
        if used < self.cap && self.cap - used >= want {
            return Ok(self.cap - used);
        }
        let tail = self.cons().load(Ordering::Acquire);
        self.seen_cons.store(tail, Ordering::Relaxed);
        let used = head.wrapping_sub(tail);
        if used > self.cap {
            return Err(Corrupt);
        }
        Ok(self.cap - used)
    }

    /// Producer: appends `v`; `Ok(false)` when full (backpressure: try again later).
    pub fn push(&self, v: u32) -> Result<bool, Corrupt> {
        let head = self.prod().load(Ordering::Relaxed);
        if self.room(head, 1)? == 0 {
            return Ok(false);
        }
        self.slot(head).store(entry(head, v), Ordering::Release);
        self.prod().store(head.wrapping_add(1), Ordering::Release);
        Ok(true)
    }

    /// Producer: appends as many of `vs` as fit, in order, and publishes them at once (the
    /// consumer sees all of them or none: the first slot is written last); returns how many.
    pub fn push_all(&self, vs: &[u32]) -> Result<usize, Corrupt> {
        self.publish(vs.len(), |_, i| vs[i])
    }

    /// Producer: puts up to `count` entries on the ring at once, `fill(pos, i)` writing what
    /// entry `i` carries into its slot (position `pos`) and returning its value; the entries'
    /// words are stored last first, then the count, so the consumer sees all or none.
    #[inline]
    fn publish(
        &self,
        count: usize,
        mut fill: impl FnMut(u32, usize) -> u32,
    ) -> Result<usize, Corrupt> {
        let head = self.prod().load(Ordering::Relaxed);
        let want = count.min(self.cap as usize) as u32;
        let n = count.min(self.room(head, want)? as usize);
        for i in (0..n).rev() {
            let pos = head.wrapping_add(i as u32);
            let v = fill(pos, i);
            self.slot(pos).store(entry(pos, v), Ordering::Release);
        }
        if n > 0 {
            self.prod()
                .store(head.wrapping_add(n as u32), Ordering::Release);
        }
        Ok(n)
    }

    /// Consumer: takes the oldest entry, if any. Only the slot is read: a slot without the
    /// entry expected there is no entry yet (the peer's counts are not looked at, so a
    /// consumer polling an empty ring reads one line, and nothing a peer writes to the counts
    /// makes it misbehave); the value must still be validated by the caller.
    pub fn pop(&self) -> Result<Option<u32>, Corrupt> {
        Ok(self.take(|_| ()))
    }

    /// Consumer: the oldest entry's value, `read(pos)` reading what else its slot carries
    /// before the slot is given back; `None` while the slot holds no new entry.
    #[inline]
    fn take(&self, read: impl FnOnce(u32)) -> Option<u32> {
        let tail = self.cons().load(Ordering::Relaxed);
        let seq = tail.wrapping_add(1);
        let x = self.slot(tail).load(Ordering::Acquire);
        if (x >> 32) as u32 != seq {
            return None;
        }
        read(tail);
        self.cons().store(seq, Ordering::Release);
        Some(x as u32)
    }

    /// Producer, on a ring made by [`Ring::with_payload`]: [`Ring::push_all`] of entries
    /// with their payloads, each written into its slot before the slot's entry word.
    pub fn push_all_with(&self, vs: &[(u32, [u8; PAYLOAD])]) -> Result<usize, Corrupt> {
        debug_assert_eq!(self.slot_len, LINE, "a ring without payloads");
        self.publish(vs.len(), |pos, i| {
            let (v, p) = &vs[i];
            self.region
                .write(self.slot_off(pos) + SLOT, p)
                .expect("checked at construction");
            *v
        })
    }

    /// Consumer, on a ring made by [`Ring::with_payload`]: [`Ring::pop`], the entry's payload
    /// into `payload` (one line read for both). A peer that rewrites a slot while it is read
    /// can give a torn payload, never an out-of-bounds read: the caller validates it.
    pub fn pop_with(&self, payload: &mut [u8; PAYLOAD]) -> Result<Option<u32>, Corrupt> {
        debug_assert_eq!(self.slot_len, LINE, "a ring without payloads");
        Ok(self.take(|pos| {
            self.region
                .read(self.slot_off(pos) + SLOT, payload)
                .expect("checked at construction")
        }))
    }

    /// Entries waiting (as seen by either side, by the counts: the consumer's may be ahead
    /// of the producer's for a moment, which is none waiting).
    pub fn len(&self) -> u32 {
        let d = self
            .prod()
            .load(Ordering::Acquire)
            .wrapping_sub(self.cons().load(Ordering::Acquire)) as i32;
        d.clamp(0, self.cap as i32) as u32
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
        // A peer scribbling over the producer count: the consumer reads slots only, and the
        // slots hold no new entry.
        r.atomic_u32(0).unwrap().store(1000, Ordering::Release);
        assert_eq!(ring.pop(), Ok(None));
        assert_eq!(ring.len(), 8, "a count past the ring is clamped");
        assert!(Ring::new(r.clone(), 0, 6).is_err());
        assert!(Ring::new(r, 4000, 64).is_err());
    }

    /// A ring of 8 slots at the start of a fresh region.
    fn ring8() -> (Arc<Region>, Ring) {
        let r = Arc::new(Region::create("ring", 4096, false).unwrap());
        let p = Ring::new(r.clone(), 0, 8).unwrap();
        (r, p)
    }

    /// The consumer believes slots, not counts: a count moved without its slot is no entry;
    /// a slot rewritten with another position's sequence number is none either.
    #[test]
    fn only_a_slot_holding_the_expected_entry_is_taken() {
        let (r, p) = ring8();
        let c = p.clone();
        assert!(p.push(7).unwrap());
        assert_eq!(c.pop().unwrap(), Some(7));
        // The producer's count moved on, its slot did not.
        r.atomic_u32(0).unwrap().store(2, Ordering::Release);
        assert_eq!(c.pop(), Ok(None));
        // A slot rewritten with another position's sequence number.
        let (r, p) = ring8();
        assert!(p.push(1).unwrap());
        let slot = r.atomic_u64(2 * LINE).unwrap();
        slot.store(slot.load(Ordering::Relaxed) + (5 << 32), Ordering::Release);
        assert_eq!(p.clone().pop(), Ok(None));
        // Written back right, it is taken.
        slot.store(entry(0, 1), Ordering::Release);
        assert_eq!(p.clone().pop(), Ok(Some(1)));
    }

    /// While its last look at the consumer's count leaves room, a push does not read that
    /// count again (the line stays on the consumer's core); once it would be full, it does.
    #[test]
    fn the_producer_reads_the_consumers_count_only_when_short_of_room() {
        let (r, p) = ring8();
        let c = p.clone();
        assert!(p.push(0).unwrap());
        assert_eq!(c.pop().unwrap(), Some(0));
        // A count no consumer could write: not seen while the ring has room by the last look.
        r.atomic_u32(LINE).unwrap().store(1000, Ordering::Release);
        // Room for 8 by the count last read (0), 7 of them left after the first push.
        for i in 1..8 {
            assert!(p.push(i).unwrap());
        }
        // Full by that count: now it looks, and sees the garbage.
        assert_eq!(p.push(8), Err(Corrupt));
    }

    /// Over many laps (sequence numbers of every slot rewritten many times) and wrapping
    /// counts, values come out in order, once each.
    #[test]
    fn laps_and_wrapping_counts() {
        let r = Arc::new(Region::create("ring", 4096, false).unwrap());
        // Counts just short of wrapping, as after 2^32 - 5 entries; slots as that many
        // entries leave them.
        let start = u32::MAX - 5;
        r.atomic_u32(0).unwrap().store(start, Ordering::Release);
        r.atomic_u32(LINE).unwrap().store(start, Ordering::Release);
        for k in 0..8u32 {
            let pos = start.wrapping_sub(8).wrapping_add(k);
            let i = (pos & 7) as usize;
            r.atomic_u64(2 * LINE + i * SLOT)
                .unwrap()
                .store(entry(pos, 99), Ordering::Release);
        }
        let p = Ring::new(r.clone(), 0, 8).unwrap();
        let c = p.clone();
        assert_eq!(c.pop().unwrap(), None, "old laps' entries are not new ones");
        let mut next = 0;
        for v in 0..100u32 {
            assert!(p.push(v).unwrap());
            if v % 3 == 2 {
                while let Some(x) = c.pop().unwrap() {
                    assert_eq!(x, next);
                    next += 1;
                }
            }
        }
        while let Some(x) = c.pop().unwrap() {
            assert_eq!(x, next);
            next += 1;
        }
        assert_eq!(next, 100);
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

    /// Payloads travel with their entries, in order, over laps; a slot's payload is read
    /// only with its entry (a stale slot gives neither).
    #[test]
    fn payloads_ride_in_their_slots() {
        let r = Arc::new(Region::create("ring", 4096, false).unwrap());
        assert!(
            Ring::with_payload(r.clone(), 0, 64).is_err(),
            "past the region"
        );
        let p = Ring::with_payload(r.clone(), 0, 8).unwrap();
        let c = p.clone();
        let mut got = [0u8; PAYLOAD];
        assert_eq!(c.pop_with(&mut got), Ok(None));
        let mut next = 0u32;
        for lap in 0..5u32 {
            let batch: Vec<(u32, [u8; PAYLOAD])> = (0..6)
                .map(|k| {
                    let v = lap * 6 + k;
                    (v, [v as u8; PAYLOAD])
                })
                .collect();
            assert_eq!(p.push_all_with(&batch).unwrap(), 6);
            while let Some(v) = c.pop_with(&mut got).unwrap() {
                assert_eq!(v, next);
                assert_eq!(got, [next as u8; PAYLOAD]);
                next += 1;
            }
        }
        assert_eq!(next, 30);
        // Full: what does not fit stays with the caller.
        let batch: Vec<(u32, [u8; PAYLOAD])> = (0..10).map(|v| (v, [1; PAYLOAD])).collect();
        assert_eq!(p.push_all_with(&batch).unwrap(), 8);
        // A slot's entry word rewritten with another lap's sequence number: no entry, and
        // the payload buffer is left alone.
        let tail = r.atomic_u32(LINE).unwrap().load(Ordering::Relaxed);
        let slot = r.atomic_u64(2 * LINE + (tail & 7) as usize * LINE).unwrap();
        slot.store(slot.load(Ordering::Relaxed) + (8 << 32), Ordering::Release);
        got = [7; PAYLOAD];
        assert_eq!(c.pop_with(&mut got), Ok(None));
        assert_eq!(got, [7; PAYLOAD]);
    }
}
