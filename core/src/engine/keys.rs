//! The key table's parts: generation-checked [`KeyId`]s and an LRU order per policy
//! for idle expiry. (Names find their slots through [`crate::keyindex`], seeded.)

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

    /// Names a client aimed at one probe chain under one seed spread under another
    /// (the engine hashes names with its seed: `Engine::with_seed`).
    #[test]
    fn names_aimed_at_one_chain_spread_under_another_seed() {
        let hash = |seed, n: &str| crate::keyindex::hash(seed, 0, n.as_bytes()) & 0xff;
        let aimed: Vec<String> = (0u64..)
            .map(|i| format!("c/{i}"))
            .filter(|n| hash(0, n) == 0)
            .take(64)
            .collect();
        let spread: std::collections::HashSet<u64> =
            aimed.iter().map(|n| hash(0x5eed_f00d, n)).collect();
        assert!(spread.len() > 32, "{} buckets", spread.len());
    }
}
