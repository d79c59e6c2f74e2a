//! Collections a peer holds only while it is busy: `Lazy<T>` is one word, empty until the
//! first change allocates the collection (or a group of them, as a stream's queues), and
//! given back by [`Lazy::release`] when the peer goes idle. Reading an empty one allocates
//! nothing (it reads a shared empty collection), so 65,536 idle peers hold no collections at
//! all.

use crate::fasthash::FastMap;
use std::collections::{BTreeMap, VecDeque};
use std::hash::BuildHasherDefault;
use std::ops::{Deref, DerefMut};

/// A collection type with a shared empty value to read while none is allocated.
pub(super) trait Empty: Default + 'static {
    const EMPTY: &'static Self;
    /// Bytes the collection's buffers hold (by capacity), beyond its own struct.
    fn heap_bytes(&self) -> usize;
    /// Whether it holds nothing (a group: none of its collections does).
    fn is_clear(&self) -> bool;
}

impl<T: 'static> Empty for VecDeque<T> {
    const EMPTY: &'static Self = &VecDeque::new();
    fn heap_bytes(&self) -> usize {
        self.capacity() * size_of::<T>()
    }
    fn is_clear(&self) -> bool {
        self.is_empty()
    }
}

impl<K: 'static, V: 'static> Empty for FastMap<K, V> {
    const EMPTY: &'static Self = &FastMap::with_hasher(BuildHasherDefault::new());
    fn heap_bytes(&self) -> usize {
        // hashbrown: one control byte per bucket beside each entry
        self.capacity() * (size_of::<(K, V)>() + 1)
    }
    fn is_clear(&self) -> bool {
        self.is_empty()
    }
}

impl<K: 'static, V: 'static> Empty for BTreeMap<K, V> {
    const EMPTY: &'static Self = &BTreeMap::new();
    fn heap_bytes(&self) -> usize {
        // a leaf node holds up to 11 entries; count the entries and their keys' overhead
        self.len() * (size_of::<K>() + size_of::<V>() + 8)
    }
    fn is_clear(&self) -> bool {
        self.is_empty()
    }
}

/// Drops the buffer of collection `c` if it is empty (one of a group in use: the group stays).
pub(super) fn give_back<T: Empty>(c: &mut T) {
    if c.is_clear() {
        *c = T::default();
    }
}

/// A collection allocated on first change (see the module doc).
#[derive(Debug)]
pub(super) struct Lazy<T>(Option<Box<T>>);

impl<T> Default for Lazy<T> {
    fn default() -> Self {
        Lazy(None)
    }
}

impl<T: Empty> Lazy<T> {
    /// Gives the collection and its buffers back (it reads empty after).
    pub(super) fn release(&mut self) {
        self.0 = None;
    }

    /// Gives it back if it holds nothing (a group: once every collection in it is empty).
    pub(super) fn release_if_clear(&mut self) {
        if self.0.as_ref().is_some_and(|c| c.is_clear()) {
            self.0 = None;
        }
    }

    /// The collection if allocated, to change without allocating it.
    #[inline]
    pub(super) fn get_mut(&mut self) -> Option<&mut T> {
        self.0.as_deref_mut()
    }

    /// Whether the collection is allocated (empty or not).
    #[inline]
    pub(super) fn allocated(&self) -> bool {
        self.0.is_some()
    }

    /// Heap bytes held: the collection's struct and its buffers.
    pub(super) fn bytes(&self) -> usize {
        self.0
            .as_ref()
            .map_or(0, |c| size_of::<T>() + c.heap_bytes())
    }
}

impl<T: Empty> Deref for Lazy<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        match &self.0 {
            Some(c) => c,
            None => T::EMPTY,
        }
    }
}

impl<T: Empty> DerefMut for Lazy<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        self.0.get_or_insert_with(Box::default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_allocate_nothing_and_release_gives_the_collection_back() {
        let mut q: Lazy<VecDeque<u64>> = Lazy::default();
        assert!(q.is_empty() && q.front().is_none());
        assert_eq!(q.bytes(), 0);
        q.push_back(7);
        assert_eq!(q.front(), Some(&7));
        assert!(q.bytes() >= size_of::<VecDeque<u64>>() + 8);
        q.release();
        assert!(q.is_empty());
        assert_eq!(q.bytes(), 0);
        assert_eq!(size_of::<Lazy<VecDeque<u64>>>(), 8);
    }
}
