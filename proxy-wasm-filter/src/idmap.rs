//! A map from Envoy context ids to values: open addressing with Fibonacci hashing
//! (the host hands out ids in sequence; the multiplication scatters them, so a run
//! of live ids never forms one long probe cluster), linear probing, backward-shift
//! deletion. Expected O(1) per lookup, insert and removal at any number of live
//! streams, and a fraction of a hash map's code in the .wasm.

/// Open-addressing map keyed by `u32` context ids.
#[derive(Debug)]
pub struct IdMap<V> {
    /// Power-of-two length (or empty); at most half full.
    slots: Vec<Option<(u32, V)>>,
    len: usize,
}

impl<V> Default for IdMap<V> {
    fn default() -> Self {
        IdMap {
            slots: Vec::new(),
            len: 0,
        }
    }
}

impl<V> IdMap<V> {
    #[inline(always)]
    fn mask(&self) -> usize {
        self.slots.len().wrapping_sub(1)
    }

    /// Where `id`'s probe run starts: the top bits of `id × 2^32/φ`.
    #[inline(always)]
    fn home(&self, id: u32) -> usize {
        let bits = self.slots.len().trailing_zeros();
        if bits == 0 {
            return 0;
        }
        (id.wrapping_mul(0x9E37_79B9) >> (32 - bits)) as usize
    }

    /// The slot holding `id`, if any.
    #[inline(always)]
    fn find(&self, id: u32) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.mask();
        let mut i = self.home(id);
        loop {
            match self.slots.get(i)? {
                Some((k, _)) if *k == id => return Some(i),
                Some(_) => i = (i + 1) & mask,
                None => return None,
            }
        }
    }

    /// The value of `id`.
    #[inline(always)]
    pub fn get(&self, id: u32) -> Option<&V> {
        let i = self.find(id)?;
        self.slots.get(i)?.as_ref().map(|(_, v)| v)
    }

    /// The value of `id`, mutably.
    #[inline(always)]
    pub fn get_mut(&mut self, id: u32) -> Option<&mut V> {
        let i = self.find(id)?;
        self.slots.get_mut(i)?.as_mut().map(|(_, v)| v)
    }

    /// Inserts or replaces; returns the old value.
    pub fn insert(&mut self, id: u32, v: V) -> Option<V> {
        if let Some(i) = self.find(id) {
            let e = self.slots.get_mut(i)?.as_mut()?;
            return Some(core::mem::replace(&mut e.1, v));
        }
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let mask = self.mask();
        let mut i = self.home(id);
        while let Some(Some(_)) = self.slots.get(i) {
            i = (i + 1) & mask;
        }
        if let Some(e) = self.slots.get_mut(i) {
            *e = Some((id, v));
            self.len += 1;
        }
        None
    }

    /// Removes `id`; the entries after it in its probe run move back (no tombstones).
    pub fn remove(&mut self, id: u32) -> Option<V> {
        let mut hole = self.find(id)?;
        let (_, v) = self.slots.get_mut(hole)?.take()?;
        self.len -= 1;
        let mask = self.mask();
        let mut i = (hole + 1) & mask;
        while let Some(Some((k, _))) = self.slots.get(i) {
            let home = self.home(*k);
            // Move back unless its home lies cyclically in (hole, i].
            if (i.wrapping_sub(home) & mask) >= (i.wrapping_sub(hole) & mask) {
                let moved = self.slots.get_mut(i).and_then(Option::take);
                if let Some(e) = self.slots.get_mut(hole) {
                    *e = moved;
                }
                hole = i;
            }
            i = (i + 1) & mask;
        }
        Some(v)
    }

    fn grow(&mut self) {
        let cap = (self.slots.len() * 2).max(16);
        let old = core::mem::take(&mut self.slots);
        self.slots.resize_with(cap, || None);
        self.len = 0;
        for (k, v) in old.into_iter().flatten() {
            self.insert(k, v);
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::IdMap;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u32, u8),
        Remove(u32),
        Get(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Small ids collide in a small table; large ones wrap around its end.
        let id = prop_oneof![0u32..64, (u32::MAX - 40)..=u32::MAX, any::<u32>()];
        prop_oneof![
            (id.clone(), any::<u8>()).prop_map(|(k, v)| Op::Insert(k, v)),
            id.clone().prop_map(Op::Remove),
            id.prop_map(Op::Get),
        ]
    }

    proptest! {
        #[test]
        fn behaves_like_a_btreemap(ops in proptest::collection::vec(op(), 0..400)) {
            let mut m = IdMap::default();
            let mut model = BTreeMap::new();
            for o in ops {
                match o {
                    Op::Insert(k, v) => prop_assert_eq!(m.insert(k, v), model.insert(k, v)),
                    Op::Remove(k) => prop_assert_eq!(m.remove(k), model.remove(&k)),
                    Op::Get(k) => prop_assert_eq!(m.get(k), model.get(&k)),
                }
                prop_assert_eq!(m.len(), model.len());
                for (k, v) in &model {
                    prop_assert_eq!(m.get(*k), Some(v));
                }
            }
        }
    }

    #[test]
    fn a_sliding_window_of_streams_stays_small() {
        let mut m = IdMap::default();
        for id in 0..100_000u32 {
            m.insert(id, id);
            if id >= 50 {
                assert_eq!(m.remove(id - 50), Some(id - 50));
            }
        }
        assert_eq!(m.len(), 50);
        assert!(m.slots.len() <= 128, "{}", m.slots.len());
        *m.get_mut(99_999).unwrap() += 1;
        assert_eq!(m.get(99_999), Some(&100_000));
    }
}
