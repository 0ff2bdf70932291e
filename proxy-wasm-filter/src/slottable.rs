//! Per-call values addressed by the engine's call ids (O(1), no hashing).

use fusewire_core::CallId;

/// Values addressed by the engine's call ids: a vector indexed by the id's dense
/// slot, each entry keeping the whole id so a stale id finds nothing. O(1).
#[derive(Clone, Debug)]
pub struct SlotTable<V> {
    items: Vec<Option<(u64, V)>>,
}

impl<V> Default for SlotTable<V> {
    fn default() -> Self {
        SlotTable { items: Vec::new() }
    }
}

impl<V: Copy> SlotTable<V> {
    /// The value stored for `id`.
    pub fn get(&self, id: CallId) -> Option<V> {
        match self.items.get(id.slot()) {
            Some(Some((r, v))) if *r == id.to_raw() => Some(*v),
            _ => None,
        }
    }

    /// Stores `v` for the id, replacing what an older id of the slot left.
    pub fn insert(&mut self, id: CallId, v: V) {
        let (slot, raw) = (id.slot(), id.to_raw());
        if self.items.len() <= slot {
            self.items.resize_with(slot + 1, || None);
        }
        if let Some(e) = self.items.get_mut(slot) {
            *e = Some((raw, v));
        }
    }

    /// Removes the value of the id (not a newer id's).
    pub fn remove(&mut self, id: CallId) -> Option<V> {
        let e = self.items.get_mut(id.slot())?;
        match e {
            Some((r, v)) if *r == id.to_raw() => {
                let v = *v;
                *e = None;
                Some(v)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{CallId, SlotTable};

    #[test]
    fn slot_table_checks_the_whole_id() {
        let id = |generation: u64, slot: u64| CallId::from_raw(generation << 22 | slot);
        let mut t = SlotTable::default();
        t.insert(id(1, 3), 7u32);
        assert_eq!(t.get(id(1, 3)), Some(7));
        assert_eq!(t.get(id(2, 3)), None, "a newer id of the slot");
        assert_eq!(t.get(id(0, 9)), None);
        assert_eq!(t.remove(id(2, 3)), None);
        t.insert(id(2, 3), 8);
        assert_eq!(t.remove(id(1, 3)), None, "the old id leaves the new value");
        assert_eq!(t.remove(id(2, 3)), Some(8));
        assert_eq!(t.get(id(2, 3)), None);
    }
}
