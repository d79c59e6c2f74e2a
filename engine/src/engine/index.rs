//! The peer table's index: a peer's slot by its MAC in O(1), in 4 bytes per bucket. Open
//! addressing with linear probing over a power-of-two table kept at most half full; the
//! buckets hold slot numbers only, and a probe compares the MAC of the peer in the slot (the
//! peer is read next anyway). 65,536 peers: 131,072 buckets, 8 bytes per peer (a std
//! `HashMap<MacAddr, usize>` takes 34).

use crate::wire::MacAddr;

const EMPTY: u32 = u32::MAX;

#[derive(Debug, Default)]
pub(super) struct PeerIndex {
    buckets: Vec<u32>,
    len: usize,
}

/// Fibonacci hashing of the 48-bit address: the multiply spreads every byte into the top
/// bits, and the top bits pick the bucket (a MAC's last bytes vary, its vendor prefix does
/// not). Not the bits from 32 up: those mix only the product's low 43 bits, and addresses
/// that differ in their last bytes (bits 24-47 here) then share a few buckets (1,024 nodes
/// numbered in the last two bytes fell into 32 of 2,048: probes of ~30 slots).
#[inline]
fn bucket(mac: MacAddr, mask: usize) -> usize {
    bucket_of_word(mac.word(), mask)
}

/// [`bucket`] of the address whose [`MacAddr::word`] is `v`.
#[inline]
fn bucket_of_word(v: u64, mask: usize) -> usize {
    // `mask` is 2^k - 1 with k >= 4 (at least 16 buckets): the top k bits.
    let k = usize::BITS - mask.leading_zeros();
    (v.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - k)) as usize & mask
}

impl PeerIndex {
    /// The slot of the peer with address `mac`; `mac_of` gives a slot's address.
    #[inline]
    pub(super) fn get(&self, mac: MacAddr, mac_of: impl Fn(usize) -> MacAddr) -> Option<usize> {
        if self.buckets.is_empty() {
            return None;
        }
        let mask = self.buckets.len() - 1;
        let mut b = bucket(mac, mask);
        loop {
            let s = self.buckets[b];
            if s == EMPTY {
                return None;
            }
            if mac_of(s as usize) == mac {
                return Some(s as usize);
            }
            b = (b + 1) & mask;
        }
    }

    /// For reading ahead: asks the processor for the bucket the lookup of the address whose
    /// [`MacAddr::word`] is `w` starts at (see `tigon_shm::mem::prefetch`); that bucket
    /// (`None`: the index is empty).
    #[inline]
    pub(super) fn prefetch_word(&self, w: u64) -> Option<usize> {
        let mask = self.buckets.len().checked_sub(1)?;
        let b = bucket_of_word(w, mask);
        tigon_shm::mem::prefetch(&self.buckets[b]);
        Some(b)
    }

    /// Records `slot` as the peer with address `mac` (not in the index yet).
    pub(super) fn insert(&mut self, mac: MacAddr, slot: usize, mac_of: impl Fn(usize) -> MacAddr) {
        if (self.len + 1) * 2 > self.buckets.len() {
            let n = (self.buckets.len() * 2).max(16);
            let old = std::mem::replace(&mut self.buckets, vec![EMPTY; n]);
            for s in old.into_iter().filter(|&s| s != EMPTY) {
                self.place(mac_of(s as usize), s);
            }
        }
        self.place(mac, slot as u32);
        self.len += 1;
    }

    fn place(&mut self, mac: MacAddr, slot: u32) {
        let mask = self.buckets.len() - 1;
        let mut b = bucket(mac, mask);
        while self.buckets[b] != EMPTY {
            b = (b + 1) & mask;
        }
        self.buckets[b] = slot;
    }

    /// Forgets the peer with address `mac` (backward-shift deletion: the probe sequences of
    /// the entries after it stay unbroken, with no tombstones).
    pub(super) fn remove(&mut self, mac: MacAddr, mac_of: impl Fn(usize) -> MacAddr) -> bool {
        if self.buckets.is_empty() {
            return false;
        }
        let mask = self.buckets.len() - 1;
        let mut b = bucket(mac, mask);
        loop {
            let s = self.buckets[b];
            if s == EMPTY {
                return false;
            }
            if mac_of(s as usize) == mac {
                break;
            }
            b = (b + 1) & mask;
        }
        let mut hole = b;
        let mut next = (b + 1) & mask;
        while self.buckets[next] != EMPTY {
            let s = self.buckets[next];
            let home = bucket(mac_of(s as usize), mask);
            // Move `s` into the hole if its home is not in (hole, next] (cyclically).
            let dist_home = next.wrapping_sub(home) & mask;
            let dist_hole = next.wrapping_sub(hole) & mask;
            if dist_home >= dist_hole {
                self.buckets[hole] = s;
                hole = next;
            }
            next = (next + 1) & mask;
        }
        self.buckets[hole] = EMPTY;
        self.len -= 1;
        true
    }

    /// Bytes the index holds.
    pub(super) fn bytes(&self) -> usize {
        self.buckets.capacity() * size_of::<u32>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac(i: usize) -> MacAddr {
        MacAddr([2, 0, 0, (i >> 16) as u8, (i >> 8) as u8, i as u8])
    }

    /// Mean and longest probe (slots read to find an entry) over every entry.
    fn probes(ix: &PeerIndex, mac_of: impl Fn(usize) -> MacAddr) -> (f64, usize) {
        let mask = ix.buckets.len() - 1;
        let d: Vec<usize> = (0..ix.buckets.len())
            .filter(|&b| ix.buckets[b] != EMPTY)
            .map(|b| (b.wrapping_sub(bucket(mac_of(ix.buckets[b] as usize), mask)) & mask) + 1)
            .collect();
        (
            d.iter().sum::<usize>() as f64 / d.len() as f64,
            d.iter().copied().max().unwrap_or(0),
        )
    }

    #[test]
    fn addresses_numbered_in_their_last_bytes_spread_over_the_buckets() {
        // Nodes numbered in the last one, two or three bytes, one vendor prefix; at sizes
        // just under and at a power of two (the table half full).
        let schemes: [fn(usize) -> MacAddr; 3] = [
            mac,
            |i| MacAddr([0x0c, 0x42, 0xa1, 0x10 + (i >> 8) as u8, 0, i as u8]),
            |i| MacAddr([2, 1, 0, 0, i as u8, (i >> 8) as u8]),
        ];
        for (k, scheme) in schemes.iter().enumerate() {
            for n in [200, 1000, 1024, 4096, 40_000] {
                let macs: Vec<MacAddr> = (0..n).map(scheme).collect();
                let mut ix = PeerIndex::default();
                for (i, &m) in macs.iter().enumerate() {
                    ix.insert(m, i, |s| macs[s]);
                }
                let (mean, max) = probes(&ix, |s| macs[s]);
                assert!(
                    mean < 2.5 && max < 64,
                    "scheme {k}, {n}: mean {mean:.1}, max {max}"
                );
            }
        }
    }

    #[test]
    fn finds_inserts_and_removes_among_many() {
        let n = 70_000;
        let macs: Vec<MacAddr> = (0..n).map(mac).collect();
        let mut ix = PeerIndex::default();
        for i in 0..n {
            assert_eq!(ix.get(macs[i], |s| macs[s]), None);
            ix.insert(macs[i], i, |s| macs[s]);
        }
        assert!(ix.bytes() <= 4 * 4 * n);
        assert!((0..n).all(|i| ix.get(macs[i], |s| macs[s]) == Some(i)));
        // Remove every third; the rest stay found, the removed are gone.
        for i in (0..n).step_by(3) {
            assert!(ix.remove(macs[i], |s| macs[s]));
        }
        for i in 0..n {
            let want = (i % 3 != 0).then_some(i);
            assert_eq!(ix.get(macs[i], |s| macs[s]), want, "peer {i}");
        }
        assert!(!ix.remove(macs[0], |s| macs[s]));
        assert_eq!(ix.get(mac(n + 5), |s| macs[s]), None);
    }

    /// The read-ahead asks for the bucket a lookup starts at (an empty index has none): for
    /// most peers, at half load, the bucket holding their own slot.
    #[test]
    fn the_read_ahead_asks_for_the_bucket_a_lookup_starts_at() {
        assert_eq!(PeerIndex::default().prefetch_word(mac(1).word()), None);
        let n = 5_000;
        let macs: Vec<MacAddr> = (0..n).map(mac).collect();
        let mut ix = PeerIndex::default();
        for (i, &m) in macs.iter().enumerate() {
            ix.insert(m, i, |s| macs[s]);
        }
        let mask = ix.buckets.len() - 1;
        let mut owners = 0;
        for (i, &m) in macs.iter().enumerate() {
            let b = ix.prefetch_word(m.word()).expect("a bucket");
            assert_eq!(b, bucket(m, mask));
            if ix.buckets[b] as usize == i {
                owners += 1;
            }
        }
        // Half full: most peers own the bucket their probe starts at.
        assert!(owners > n / 2, "{owners} of {n}");
    }
}
