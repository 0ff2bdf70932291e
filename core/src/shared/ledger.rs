//! Cross-worker bulkhead: a ledger of in-flight slots per owner (one owner per worker
//! VM), each entry stamped with its owner's last heartbeat (host time, ns).
//!
//! An owner always writes its *true* local in-flight count for the key (not a delta),
//! so the ledger heals itself: if an entry was reclaimed while its owner was alive, the
//! owner's next write puts the right number back. An entry whose heartbeat is further
//! than the lease TTL from the reader's clock (in either direction: the host clock is a
//! wall clock) belongs to a crashed or stuck VM and no longer counts.

use super::codec::{Reader, Wire};

/// Most owners one ledger holds; acquiring when it is full of live owners is refused.
pub const MAX_OWNERS: usize = 256;

/// One owner's slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotEntry {
    /// The owner (worker VM) id.
    pub owner: u64,
    /// Slots it holds now.
    pub count: u32,
    /// Its clock when it last wrote the entry (ns).
    pub heartbeat: u64,
}

/// The slot ledger of one key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlotLedger {
    entries: Vec<SlotEntry>,
}

/// On the wire: `(owner, count, heartbeat)`.
impl Wire for SlotEntry {
    fn put(&self, out: &mut Vec<u8>) {
        self.owner.put(out);
        self.count.put(out);
        self.heartbeat.put(out);
    }

    fn take(r: &mut Reader<'_>) -> Option<Self> {
        Some(SlotEntry {
            owner: u64::take(r)?,
            count: u32::take(r)?,
            heartbeat: u64::take(r)?,
        })
    }
}

/// On the wire: the entries as a sequence.
impl Wire for SlotLedger {
    fn put(&self, out: &mut Vec<u8>) {
        self.entries.put(out);
    }

    fn take(r: &mut Reader<'_>) -> Option<Self> {
        Vec::take(r).map(|entries| SlotLedger { entries })
    }
}

impl SlotLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        SlotLedger::default()
    }

    /// Whether `e` still counts at `now` under `ttl`.
    pub fn is_live(e: &SlotEntry, now: u64, ttl: u64) -> bool {
        now.abs_diff(e.heartbeat) < ttl
    }

    /// Slots held by live owners other than `except`.
    pub fn others_in_flight(&self, except: u64, now: u64, ttl: u64) -> u64 {
        self.entries
            .iter()
            .filter(|e| e.owner != except && Self::is_live(e, now, ttl))
            .map(|e| e.count as u64)
            .sum()
    }

    /// Slots held by every live owner.
    pub fn in_flight(&self, now: u64, ttl: u64) -> u64 {
        self.entries
            .iter()
            .filter(|e| Self::is_live(e, now, ttl))
            .map(|e| e.count as u64)
            .sum()
    }

    /// The entry of `owner`, if any.
    pub fn entry(&self, owner: u64) -> Option<&SlotEntry> {
        self.entries.iter().find(|e| e.owner == owner)
    }

    /// Sets `owner`'s count to `held + more` if the live total stays within `max`,
    /// else to as many as fit (never below `held`, which the owner really holds).
    /// Returns the owner's new count. Drops expired entries first.
    pub fn acquire(
        &mut self,
        owner: u64,
        held: u32,
        more: u32,
        max: u32,
        now: u64,
        ttl: u64,
    ) -> u32 {
        self.prune(now, ttl);
        let others = self.others_in_flight(owner, now, ttl);
        let room = u64::from(max).saturating_sub(others);
        let want = u64::from(held) + u64::from(more);
        let count = want.min(room).max(u64::from(held)) as u32;
        if self.set(owner, count, now) {
            count
        } else {
            held
        }
    }

    /// Writes `owner`'s true count (0 removes the entry) with a fresh heartbeat.
    /// Returns false only when the ledger is full of other live owners.
    pub fn set(&mut self, owner: u64, count: u32, now: u64) -> bool {
        if let Some(i) = self.entries.iter().position(|e| e.owner == owner) {
            if count == 0 {
                self.entries.swap_remove(i);
            } else if let Some(e) = self.entries.get_mut(i) {
                e.count = count;
                e.heartbeat = now;
            }
            return true;
        }
        if count == 0 {
            return true;
        }
        if self.entries.len() >= MAX_OWNERS {
            return false;
        }
        self.entries.push(SlotEntry {
            owner,
            count,
            heartbeat: now,
        });
        true
    }

    /// Removes entries that are empty or whose lease expired. Returns how many slots
    /// were reclaimed from expired owners.
    pub fn prune(&mut self, now: u64, ttl: u64) -> u64 {
        let mut reclaimed = 0;
        self.entries.retain(|e| {
            let keep = e.count > 0 && Self::is_live(e, now, ttl);
            if !keep {
                reclaimed += e.count as u64;
            }
            keep
        });
        reclaimed
    }

    /// Number of entries (live or not).
    pub fn owners(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_is_global_and_crashed_owner_is_reclaimed() {
        let mut l = SlotLedger::new();
        assert_eq!(l.acquire(1, 0, 2, 3, 0, 1000), 2);
        assert_eq!(l.acquire(2, 0, 5, 3, 0, 1000), 1, "only what fits");
        assert_eq!(l.acquire(3, 0, 1, 3, 0, 1000), 0, "full");
        // Owner 2 crashed: its heartbeat ages past the TTL.
        l.set(1, 2, 999);
        assert_eq!(l.acquire(3, 0, 1, 3, 999, 1000), 0);
        assert_eq!(l.acquire(3, 0, 1, 3, 1000, 1000), 1);
        assert_eq!(l.entry(2), None);
        assert_eq!(l.in_flight(1000, 1000), 3);
        // Release to 0 removes the entry.
        assert!(l.set(3, 0, 1001));
        assert_eq!(l.owners(), 1);
    }

    #[test]
    fn clock_far_behind_or_ahead_expires_entry() {
        let mut l = SlotLedger::new();
        l.set(1, 5, 1_000_000);
        assert_eq!(l.in_flight(1_000_500, 1000), 5);
        assert_eq!(l.in_flight(999_500, 1000), 5);
        assert_eq!(l.in_flight(10, 1000), 0);
    }

    #[test]
    fn reclaimed_live_owner_heals_on_its_next_write() {
        let mut l = SlotLedger::new();
        l.set(1, 2, 0);
        assert_eq!(l.prune(5000, 1000), 2);
        assert_eq!(l.acquire(1, 2, 1, 10, 5000, 1000), 3);
        assert_eq!(l.entry(1).map(|e| e.count), Some(3));
        // An owner never drops below what it really holds, even over the limit.
        l.set(2, 9, 5000);
        assert_eq!(l.acquire(1, 3, 1, 10, 5000, 1000), 3);
    }
}
