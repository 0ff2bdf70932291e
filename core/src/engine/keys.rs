//! The key table: key name → slot, generation-checked [`KeyId`]s, and an LRU order per
//! policy for idle expiry.
//!
//! The name index is a small open-addressing hash table (FNV-1a, linear probing,
//! tombstones): lookups of known keys allocate nothing, and it costs far less code
//! in a `.wasm` than `std`'s `HashMap`.

const INDEX_BITS: u32 = 21;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;

/// A key's address: table slot and generation. Its raw form is a number below 2^53;
/// a stale (expired key) or forged number is detected, never trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl KeyId {
    /// The plain number (below 2^53).
    pub fn to_raw(self) -> u64 {
        u64::from(self.generation) << INDEX_BITS | u64::from(self.index)
    }

    /// From [`KeyId::to_raw`]; checked on use (one at or above 2^53, which `to_raw`
    /// never gives, matches no key).
    pub fn from_raw(raw: u64) -> Self {
        if raw >> (INDEX_BITS + 32) != 0 {
            return KeyId {
                index: u32::MAX,
                generation: u32::MAX,
            };
        }
        KeyId {
            index: (raw & INDEX_MASK) as u32,
            generation: (raw >> INDEX_BITS) as u32,
        }
    }
}

/// Most keys one engine holds at once (all policies, overflow keys included).
pub const MAX_TABLE_KEYS: u32 = 1 << INDEX_BITS;

/// FNV-1a, 64 bit: stable across processes and versions (shared slots use it too).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

const EMPTY: u32 = u32::MAX;
const TOMB: u32 = u32::MAX - 1;

/// Name → slot index, per policy.
#[derive(Clone, Debug, Default)]
pub(crate) struct NameIndex {
    buckets: Vec<u32>,
    used: usize,
    tombs: usize,
}

impl NameIndex {
    /// Finds `name`; `name_of(i)` gives the name of slot `i`.
    pub(crate) fn get<'a>(&self, name: &str, name_of: impl Fn(u32) -> &'a str) -> Option<u32> {
        if self.buckets.is_empty() {
            return None;
        }
        let mask = self.buckets.len() - 1;
        let mut i = fnv1a(name.as_bytes()) as usize & mask;
        for _ in 0..self.buckets.len() {
            match self.buckets.get(i).copied() {
                Some(EMPTY) | None => return None,
                Some(TOMB) => {}
                Some(k) if name_of(k) == name => return Some(k),
                Some(_) => {}
            }
            i = (i + 1) & mask;
        }
        None
    }

    /// Inserts `slot` under `name` (absent before).
    pub(crate) fn insert<'a>(&mut self, name: &str, slot: u32, name_of: impl Fn(u32) -> &'a str) {
        if (self.used + self.tombs + 1) * 4 > self.buckets.len() * 3 {
            self.grow(&name_of);
        }
        let mask = self.buckets.len() - 1;
        let mut i = fnv1a(name.as_bytes()) as usize & mask;
        loop {
            match self.buckets.get_mut(i) {
                Some(b) if *b == EMPTY || *b == TOMB => {
                    if *b == TOMB {
                        self.tombs -= 1;
                    }
                    *b = slot;
                    self.used += 1;
                    return;
                }
                Some(_) => i = (i + 1) & mask,
                None => return,
            }
        }
    }

    /// Removes `slot` (stored under `name`).
    pub(crate) fn remove(&mut self, name: &str, slot: u32) {
        if self.buckets.is_empty() {
            return;
        }
        let mask = self.buckets.len() - 1;
        let mut i = fnv1a(name.as_bytes()) as usize & mask;
        for _ in 0..self.buckets.len() {
            match self.buckets.get_mut(i) {
                Some(b) if *b == slot => {
                    *b = TOMB;
                    self.used -= 1;
                    self.tombs += 1;
                    return;
                }
                Some(b) if *b == EMPTY => return,
                _ => {}
            }
            i = (i + 1) & mask;
        }
    }

    fn grow<'a>(&mut self, name_of: &impl Fn(u32) -> &'a str) {
        let old = core::mem::take(&mut self.buckets);
        let live = |b: u32| b != EMPTY && b != TOMB;
        let n = old.iter().filter(|&&b| live(b)).count();
        let cap = ((n + 1) * 2).next_power_of_two().max(8);
        self.buckets = vec![EMPTY; cap];
        self.used = 0;
        self.tombs = 0;
        for &k in old.iter().filter(|&&b| live(b)) {
            let name = name_of(k);
            let mask = cap - 1;
            let mut i = fnv1a(name.as_bytes()) as usize & mask;
            while self.buckets.get(i).is_some_and(|&b| b != EMPTY) {
                i = (i + 1) & mask;
            }
            if let Some(b) = self.buckets.get_mut(i) {
                *b = k;
                self.used += 1;
            }
        }
    }
}

/// A doubly linked list threaded through key slots (`prev`/`next` live in the keys).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lru {
    pub(crate) head: u32,
    pub(crate) tail: u32,
}

impl Default for Lru {
    fn default() -> Self {
        Lru {
            head: NIL,
            tail: NIL,
        }
    }
}

/// No slot.
pub(crate) const NIL: u32 = u32::MAX;

/// Links of one key in its policy's [`Lru`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Links {
    pub(crate) prev: u32,
    pub(crate) next: u32,
}

impl Default for Links {
    fn default() -> Self {
        Links {
            prev: NIL,
            next: NIL,
        }
    }
}

/// Something threaded on an [`Lru`].
pub(crate) trait Linked {
    /// Its links.
    fn links(&mut self) -> &mut Links;
}

fn links<T: Linked>(items: &mut [T], i: u32) -> Option<&mut Links> {
    items.get_mut(i as usize).map(Linked::links)
}

impl Lru {
    /// Puts `i` at the head (most recently used).
    pub(crate) fn push_front<T: Linked>(&mut self, items: &mut [T], i: u32) {
        let head = self.head;
        if let Some(l) = links(items, i) {
            *l = Links {
                prev: NIL,
                next: head,
            };
        }
        match links(items, head) {
            Some(h) => h.prev = i,
            None => self.tail = i,
        }
        self.head = i;
    }

    /// Unlinks `i`.
    pub(crate) fn unlink<T: Linked>(&mut self, items: &mut [T], i: u32) {
        let Some(&mut Links { prev, next }) = links(items, i) else {
            return;
        };
        match links(items, prev) {
            Some(p) => p.next = next,
            None => self.head = next,
        }
        match links(items, next) {
            Some(n) => n.prev = prev,
            None => self.tail = prev,
        }
        if let Some(l) = links(items, i) {
            *l = Links::default();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_ids_round_trip_below_2_pow_53() {
        let k = KeyId {
            index: MAX_TABLE_KEYS - 1,
            generation: u32::MAX,
        };
        assert!(k.to_raw() < 1 << 53);
        assert_eq!(KeyId::from_raw(k.to_raw()), k);
    }

    #[test]
    fn index_insert_find_remove_grow() {
        let names: Vec<String> = (0..1000).map(|i| format!("k{i}")).collect();
        let mut ix = NameIndex::default();
        for (i, n) in names.iter().enumerate() {
            ix.insert(n, i as u32, |k| names[k as usize].as_str());
        }
        for (i, n) in names.iter().enumerate() {
            assert_eq!(ix.get(n, |k| names[k as usize].as_str()), Some(i as u32));
        }
        for (i, n) in names.iter().enumerate().step_by(2) {
            ix.remove(n, i as u32);
        }
        for (i, n) in names.iter().enumerate() {
            let want = (i % 2 == 1).then_some(i as u32);
            assert_eq!(ix.get(n, |k| names[k as usize].as_str()), want);
        }
        assert_eq!(ix.get("nope", |k| names[k as usize].as_str()), None);
    }
}
