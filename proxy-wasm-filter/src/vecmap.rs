//! A map kept as a sorted `Vec` with tombstones: O(log n) lookup; inserts of
//! increasing keys append; removals leave a tombstone and the vector is compacted
//! once half of it is dead. For the small, slowly changing tables (metric names,
//! stored responses, collapse waits); per-stream tables are `IdMap` and `SlotTable`.
//! Far less code in the .wasm than a hash map (the module has a size budget).

use std::borrow::Borrow;

/// Sorted-vector map with tombstones.
#[derive(Clone, Debug)]
pub struct VecMap<K, V> {
    items: Vec<(K, Option<V>)>,
    dead: usize,
}

impl<K, V> Default for VecMap<K, V> {
    fn default() -> Self {
        VecMap {
            items: Vec::new(),
            dead: 0,
        }
    }
}

impl<K: Ord, V> VecMap<K, V> {
    fn find<Q: Ord + ?Sized>(&self, k: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
    {
        self.items.binary_search_by(|(x, _)| x.borrow().cmp(k))
    }

    /// The value of `k`.
    pub fn get<Q: Ord + ?Sized>(&self, k: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        let i = self.find(k).ok()?;
        self.items.get(i)?.1.as_ref()
    }

    /// The value of `k`, mutably.
    pub fn get_mut<Q: Ord + ?Sized>(&mut self, k: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
    {
        let i = self.find(k).ok()?;
        self.items.get_mut(i)?.1.as_mut()
    }

    /// Inserts or replaces; returns the old value.
    pub fn insert(&mut self, k: K, v: V) -> Option<V> {
        match self.find(&k) {
            Ok(i) => {
                let slot = &mut self.items.get_mut(i)?.1;
                let old = slot.replace(v);
                if old.is_none() {
                    self.dead = self.dead.saturating_sub(1);
                }
                old
            }
            Err(i) => {
                self.items.insert(i, (k, Some(v)));
                None
            }
        }
    }

    /// Removes `k`.
    pub fn remove<Q: Ord + ?Sized>(&mut self, k: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        let i = self.find(k).ok()?;
        let v = self.items.get_mut(i)?.1.take()?;
        self.dead += 1;
        if self.dead * 2 > self.items.len() {
            self.items.retain(|(_, v)| v.is_some());
            self.dead = 0;
        }
        Some(v)
    }

    /// Number of live entries.
    pub fn len(&self) -> usize {
        self.items.len() - self.dead
    }

    /// True when no entry is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Live entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.items
            .iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
    }

    /// Slots held, tombstones included (for tests of the compaction).
    pub fn capacity_used(&self) -> usize {
        self.items.len()
    }
}

#[cfg(test)]
mod tests {
    use super::VecMap;

    #[test]
    fn behaves_like_a_map() {
        let mut m = VecMap::default();
        assert!(m.is_empty());
        for k in [5u32, 1, 9, 3] {
            assert_eq!(m.insert(k, k * 10), None);
        }
        assert_eq!(m.insert(3, 31), Some(30));
        assert_eq!(m.get(&3), Some(&31));
        assert_eq!(m.get(&4), None);
        *m.get_mut(&9).unwrap() += 1;
        assert_eq!(m.remove(&1), Some(10));
        assert_eq!(m.remove(&1), None);
        assert_eq!(m.get(&1), None);
        let keys: Vec<u32> = m.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, vec![3, 5, 9]);
        assert_eq!(m.len(), 3);
        assert_eq!(m.insert(1, 11), None, "reuses the tombstone");
        assert_eq!(m.len(), 4);
        let mut s: VecMap<String, u8> = VecMap::default();
        s.insert("b".into(), 1);
        assert_eq!(s.get("b"), Some(&1));
    }

    #[test]
    fn tombstones_are_compacted() {
        let mut m = VecMap::default();
        for id in 0..1000u32 {
            m.insert(id, id);
        }
        for id in (0..1000u32).step_by(3) {
            assert_eq!(m.remove(&id), Some(id));
        }
        for id in 0..1000u32 {
            assert_eq!(m.get(&id).is_some(), id % 3 != 0, "{id}");
        }
        for id in 0..1000u32 {
            m.remove(&id);
        }
        assert!(m.is_empty());
        assert!(m.capacity_used() < 10, "compacted: {}", m.capacity_used());
    }
}
