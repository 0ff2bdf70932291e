//! Generation-checked slots: the storage behind every handle of the request cache and
//! the collapser. A slot's id is `(slot, generation)`; its raw form is a number below
//! 2^53 (JS hosts keep it as a plain number). Freeing a slot bumps its generation, so
//! a stale id never matches again, and a raw number at or above 2^53 (forged) never
//! matches at all. Freed values stay in place, so their buffers (key bytes, item
//! lists) are reused without allocating.

/// Bits of the slot number in a raw id (16 777 216 slots at most).
pub(crate) const SLOT_BITS: u32 = 24;
const SLOT_MASK: u64 = (1 << SLOT_BITS) - 1;
/// Bits of the generation (53 − 24).
const GEN_MASK: u32 = (1 << 29) - 1;
/// The generation of an id built from a forged raw number: matches no slot.
const FORGED: u32 = u32::MAX;
/// Most slots of one slab.
pub(crate) const MAX_SLOTS: u32 = 1 << SLOT_BITS;
/// "No slot" in intrusive links.
pub(crate) const NIL: u32 = u32::MAX;

/// A slot and its generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Id {
    pub(crate) slot: u32,
    pub(crate) generation: u32,
}

impl Id {
    pub(crate) fn to_raw(self) -> u64 {
        u64::from(self.generation & GEN_MASK) << SLOT_BITS | u64::from(self.slot)
    }

    pub(crate) fn from_raw(raw: u64) -> Self {
        Id {
            slot: (raw & SLOT_MASK) as u32,
            generation: if raw >> 53 != 0 {
                FORGED
            } else {
                (raw >> SLOT_BITS) as u32
            },
        }
    }
}

/// Defines a public, `Copy` id type over [`Id`] with raw conversions.
macro_rules! public_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub(crate) crate::slab::Id);

        impl $name {
            /// The plain number (below 2^53).
            pub fn to_raw(self) -> u64 {
                self.0.to_raw()
            }

            /// From [`Self::to_raw`]; any number is accepted and checked on use
            /// (stale or forged numbers are reported unknown, never trusted).
            pub fn from_raw(raw: u64) -> Self {
                $name(crate::slab::Id::from_raw(raw))
            }
        }
    };
}
pub(crate) use public_id;

/// Defines a move-only handle over a public id type (hand it back exactly once).
macro_rules! move_only {
    ($(#[$doc:meta])* $name:ident($id:ident)) => {
        $(#[$doc])*
        #[derive(Debug, PartialEq, Eq)]
        pub struct $name(pub(crate) $id);

        impl $name {
            /// Its id.
            pub fn id(&self) -> $id {
                self.0
            }

            /// The plain number, for FFI hosts.
            pub fn into_raw(self) -> u64 {
                self.0.to_raw()
            }

            /// Rebuilds the handle from [`Self::into_raw`]; checked on use.
            pub fn from_raw(raw: u64) -> Self {
                $name($id::from_raw(raw))
            }
        }
    };
}
pub(crate) use move_only;

#[derive(Clone, Debug)]
struct Slot<T> {
    generation: u32,
    live: bool,
    value: T,
}

/// Slots of `T` with a free list. Values of freed slots are kept (for reuse).
#[derive(Clone, Debug)]
pub(crate) struct Slab<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    len: u32,
    /// The generation of a slot made anew: above that of every slot [`Slab::shed`]
    /// dropped, so no id of those matches the new one.
    floor: u32,
}

/// Whether `bytes` can be allocated now: probed (allocated and given back). Hosts
/// use it before growing a buffer of their own (a failed allocation aborts).
#[inline(never)]
pub fn can_allocate(bytes: usize) -> bool {
    let Ok(layout) = std::alloc::Layout::from_size_align(bytes.max(1), 16) else {
        return false;
    };
    // SAFETY: `layout` has a non-zero size; the block, if any, is freed at once with
    // the layout it was allocated with.
    let p = unsafe { std::alloc::alloc(layout) };
    if p.is_null() {
        return false;
    }
    // SAFETY: `p` points to at least one writable byte. The write keeps the probe:
    // an allocation whose block is never used may be elided, and then this said
    // true whatever the allocator would have answered (found in a release build:
    // the out-of-memory tests passed only in debug).
    unsafe { core::ptr::write_volatile(p, 0) };
    // SAFETY: as above.
    unsafe { std::alloc::dealloc(p, layout) };
    true
}

/// Whether a full table of `cap` slots of `size` bytes can double: probed. A failed
/// allocation would abort (trap a `.wasm`, and every breaker it serves: found by a
/// security review, a cache doubling past 4 M entries).
#[inline(never)]
pub(crate) fn can_double(cap: usize, size: usize) -> bool {
    can_allocate(cap.max(4) * 2 * size)
}

/// Puts `slot` on a free list. Freeing must not abort for want of memory (found by
/// review: free lists grow as slots are freed): a slot the list cannot take stays
/// unused.
#[inline(never)]
pub(crate) fn push_free(free: &mut Vec<u32>, slot: u32) {
    if free.len() < free.capacity() || can_double(free.len(), 4) {
        free.push(slot);
    }
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
            floor: 0,
        }
    }
}

impl<T: Default> Slab<T> {
    /// Takes a slot (a freed one first) and hands its old value to `init`, which
    /// resets it. `None` when `limit` slots are live (or the id space is used up), or
    /// when the memory to grow is not there ([`can_double`]).
    pub(crate) fn insert(&mut self, limit: u32, init: impl FnOnce(&mut T)) -> Option<Id> {
        if self.len >= limit.min(MAX_SLOTS) {
            return None;
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => self.new_slot()?,
        };
        let s = self.slots.get_mut(slot as usize)?;
        s.live = true;
        init(&mut s.value);
        self.len += 1;
        Some(Id {
            slot,
            generation: s.generation,
        })
    }

    /// A slot at the end, if its memory is there.
    #[cold]
    fn new_slot(&mut self) -> Option<u32> {
        let cap = self.slots.capacity();
        if self.slots.len() == cap && !can_double(cap, core::mem::size_of::<Slot<T>>()) {
            return None;
        }
        self.slots.push(Slot {
            generation: self.floor,
            live: false,
            value: T::default(),
        });
        Some(self.slots.len() as u32 - 1)
    }
}

impl<T> Slab<T> {
    /// The live value of `id`.
    pub(crate) fn get(&self, id: Id) -> Option<&T> {
        self.slots
            .get(id.slot as usize)
            .filter(|s| s.live && s.generation == id.generation)
            .map(|s| &s.value)
    }

    /// The live value of `id`, mutably.
    pub(crate) fn get_mut(&mut self, id: Id) -> Option<&mut T> {
        self.slots
            .get_mut(id.slot as usize)
            .filter(|s| s.live && s.generation == id.generation)
            .map(|s| &mut s.value)
    }

    /// The live value in `slot` (intrusive links name slots).
    pub(crate) fn at(&self, slot: u32) -> Option<&T> {
        self.slots
            .get(slot as usize)
            .filter(|s| s.live)
            .map(|s| &s.value)
    }

    /// The live value in `slot`, mutably.
    pub(crate) fn at_mut(&mut self, slot: u32) -> Option<&mut T> {
        self.slots
            .get_mut(slot as usize)
            .filter(|s| s.live)
            .map(|s| &mut s.value)
    }

    /// The id and the live value in `slot`, mutably.
    #[inline]
    pub(crate) fn entry_at(&mut self, slot: u32) -> Option<(Id, &mut T)> {
        self.slots
            .get_mut(slot as usize)
            .filter(|s| s.live)
            .map(|s| {
                (
                    Id {
                        slot,
                        generation: s.generation,
                    },
                    &mut s.value,
                )
            })
    }

    /// The id of the live value in `slot`.
    pub(crate) fn id_at(&self, slot: u32) -> Option<Id> {
        self.slots
            .get(slot as usize)
            .filter(|s| s.live)
            .map(|s| Id {
                slot,
                generation: s.generation,
            })
    }

    /// Frees `slot` (its ids become stale); the value stays for reuse.
    pub(crate) fn remove_at(&mut self, slot: u32) -> bool {
        match self.slots.get_mut(slot as usize) {
            Some(s) if s.live => {
                s.live = false;
                s.generation = s.generation.wrapping_add(1) & GEN_MASK;
                push_free(&mut self.free, slot);
                self.len -= 1;
                true
            }
            _ => false,
        }
    }

    /// Gives back the memory of freed slots (after a mass removal such as a cache
    /// clear): their values' buffers, and the whole table when no slot is live.
    pub(crate) fn shed(&mut self)
    where
        T: Default,
    {
        if self.len == 0 {
            for s in &self.slots {
                self.floor = self.floor.max(s.generation);
            }
            *self = Slab {
                floor: self.floor,
                ..Slab::default()
            };
            return;
        }
        for s in self.slots.iter_mut().filter(|s| !s.live) {
            s.value = T::default();
        }
    }

    /// Live slots.
    pub(crate) fn len(&self) -> u32 {
        self.len
    }

    /// Every slot's value, live or freed (for memory accounting).
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().map(|s| &s.value)
    }

    /// Heap bytes of the slot table itself (values' own buffers not included).
    pub(crate) fn table_bytes(&self) -> usize {
        self.slots.capacity() * core::mem::size_of::<Slot<T>>()
            + self.free.capacity() * core::mem::size_of::<u32>()
    }
}

/// Index of the "newer" link in a link pair.
pub(crate) const NEWER: usize = 0;
/// Index of the "older" link in a link pair.
pub(crate) const OLDER: usize = 1;

/// A value on up to two intrusive doubly-linked lists (link pair `k` = `[newer,
/// older]` slots, [`NIL`] at the ends).
pub(crate) trait Linked {
    /// The link pairs, mutably.
    fn links(&mut self) -> &mut [[u32; 2]; 2];
}

/// The ends of one intrusive list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct List {
    pub(crate) newest: u32,
    pub(crate) oldest: u32,
}

/// An empty list.
pub(crate) const EMPTY: List = List {
    newest: NIL,
    oldest: NIL,
};

impl Default for List {
    fn default() -> Self {
        EMPTY
    }
}

/// Opens a scope in `scopes` (the cache's or the collapser's: a scope is the list of
/// what it holds; slot 0, opened first, is the global scope): its id, or `None` when
/// `max` scopes besides the global one are open.
pub(crate) fn open_scope(scopes: &mut Slab<List>, max: u32) -> Option<Id> {
    scopes.insert(max.saturating_add(1), |s| *s = EMPTY)
}

/// Puts `slot` at the newest end of `list` (on link pair `k`).
pub(crate) fn push_newest<T: Linked>(slab: &mut Slab<T>, list: &mut List, slot: u32, k: usize) {
    let old = list.newest;
    if let Some(n) = slab.at_mut(slot) {
        n.links()[k] = [NIL, old];
    }
    match slab.at_mut(old) {
        Some(o) => o.links()[k][NEWER] = slot,
        None => list.oldest = slot,
    }
    list.newest = slot;
}

/// Takes `slot` off `list` (on link pair `k`); a value not on it leaves it intact.
pub(crate) fn unlink<T: Linked>(slab: &mut Slab<T>, list: &mut List, slot: u32, k: usize) {
    let Some(n) = slab.at_mut(slot) else { return };
    let [newer, older] = n.links()[k];
    n.links()[k] = [NIL, NIL];
    match slab.at_mut(newer) {
        Some(x) => x.links()[k][OLDER] = older,
        None if list.newest == slot => list.newest = older,
        None => {}
    }
    match slab.at_mut(older) {
        Some(x) => x.links()[k][NEWER] = newer,
        None if list.oldest == slot => list.oldest = newer,
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_generation_checked_below_2_pow_53_and_forgeries_never_match() {
        let mut s: Slab<u8> = Slab::default();
        let a = s.insert(10, |v| *v = 1).unwrap();
        assert!(a.to_raw() < 1 << 53);
        assert_eq!(s.get(Id::from_raw(a.to_raw())), Some(&1));
        assert!(s.remove_at(a.slot));
        assert_eq!(s.get(a), None, "stale");
        let b = s.insert(10, |v| *v = 2).unwrap();
        assert_eq!(b.slot, a.slot);
        assert_ne!(b, a);
        assert_eq!(s.get(b), Some(&2));
        assert_eq!(s.get(Id::from_raw(b.to_raw() | 1 << 60)), None, "forged");
        assert_eq!(s.get(Id::from_raw(u64::MAX)), None);
        assert!(s.insert(1, |_| {}).is_none(), "limit");
    }

    #[test]
    fn shed_drops_freed_buffers_and_an_empty_table_and_stale_ids_stay_stale() {
        let mut s: Slab<Vec<u8>> = Slab::default();
        let ids: Vec<Id> = (0..8u8)
            .map(|i| s.insert(100, |v| v.extend_from_slice(&[i; 1000])).unwrap())
            .collect();
        for id in &ids {
            if id.slot != 2 {
                assert!(s.remove_at(id.slot));
            }
        }
        let held = |s: &Slab<Vec<u8>>| s.values().map(Vec::capacity).sum::<usize>();
        assert_eq!(held(&s), 8000);
        s.shed();
        assert_eq!(held(&s), 1000, "only the live slot's buffer is kept");
        assert_eq!(s.get(ids[2]).map(Vec::len), Some(1000));
        assert!(s.remove_at(2));
        let table = s.table_bytes();
        s.shed();
        assert_eq!(
            (s.values().count(), held(&s)),
            (0, 0),
            "no live slot: the table went"
        );
        assert!(s.table_bytes() < table);
        let fresh: Vec<Id> = (0..8).map(|_| s.insert(100, |_| {}).unwrap()).collect();
        assert_eq!(s.len(), 8);
        for old in &ids {
            assert_eq!(s.get(*old), None, "{old:?} matched a new slot");
        }
        assert!(fresh.iter().all(|f| s.get(*f).is_some()));
        assert!(fresh
            .iter()
            .all(|f| ids.iter().all(|o| o.generation < f.generation)));
    }

    #[derive(Debug, Default)]
    struct Node {
        links: [[u32; 2]; 2],
    }

    impl Linked for Node {
        fn links(&mut self) -> &mut [[u32; 2]; 2] {
            &mut self.links
        }
    }

    /// Found by mutation testing: a slot is freed once (a second `remove_at` is
    /// refused, and the slot is handed out once), and unlinking a value that is not on
    /// a list leaves the list intact, at either end.
    #[test]
    fn a_slot_is_freed_once_and_unlinking_a_stranger_leaves_a_list_intact() {
        let mut s: Slab<u8> = Slab::default();
        let a = s.insert(10, |_| {}).unwrap();
        assert!(s.remove_at(a.slot));
        assert!(!s.remove_at(a.slot), "twice");
        assert_eq!(s.len(), 0);
        let b = s.insert(10, |_| {}).unwrap();
        let c = s.insert(10, |_| {}).unwrap();
        assert_ne!(b.slot, c.slot, "the freed slot was handed out once");

        let mut nodes: Slab<Node> = Slab::default();
        let mut list = EMPTY;
        let ids: Vec<u32> = (0..3)
            .map(|_| nodes.insert(10, |n| n.links = [[NIL; 2]; 2]).unwrap().slot)
            .collect();
        for &n in &ids[..2] {
            push_newest(&mut nodes, &mut list, n, 0);
        }
        let stranger = ids[2];
        unlink(&mut nodes, &mut list, stranger, 0);
        assert_eq!(
            list,
            List {
                newest: ids[1],
                oldest: ids[0]
            }
        );
        unlink(&mut nodes, &mut list, ids[1], 0);
        unlink(&mut nodes, &mut list, ids[0], 0);
        assert_eq!(list, EMPTY);
    }
}
