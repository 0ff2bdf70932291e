//! A map kept as a sorted `Vec`: O(log n) lookup, O(n) insert and remove, and far
//! less code in the .wasm than a hash map (the module has a size budget).

use std::borrow::Borrow;

/// Sorted-vector map.
#[derive(Clone, Debug)]
pub struct VecMap<K, V> {
    items: Vec<(K, V)>,
}

impl<K, V> Default for VecMap<K, V> {
    fn default() -> Self {
        VecMap { items: Vec::new() }
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
        self.items.get(i).map(|(_, v)| v)
    }

    /// The value of `k`, mutably.
    pub fn get_mut<Q: Ord + ?Sized>(&mut self, k: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
    {
        let i = self.find(k).ok()?;
        self.items.get_mut(i).map(|(_, v)| v)
    }

    /// Inserts or replaces; returns the old value.
    pub fn insert(&mut self, k: K, v: V) -> Option<V> {
        match self.find(&k) {
            Ok(i) => self
                .items
                .get_mut(i)
                .map(|slot| std::mem::replace(&mut slot.1, v)),
            Err(i) => {
                self.items.insert(i, (k, v));
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
        Some(self.items.remove(i).1)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.items.iter().map(|(k, v)| (k, v))
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
        let keys: Vec<u32> = m.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, vec![3, 5, 9]);
        assert_eq!(m.len(), 3);
        let mut s: VecMap<String, u8> = VecMap::default();
        s.insert("b".into(), 1);
        assert_eq!(s.get("b"), Some(&1));
    }
}
