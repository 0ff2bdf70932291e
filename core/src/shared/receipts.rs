//! Write receipts: each writer's last write to a key (a sequence number and when),
//! kept in the key's state on an asynchronous store. A writer is one worker's replica
//! of one key (the owner id mixed with the key's hash: replicas of several keys of
//! one worker may share a slot, the overflow slot). A reply can be lost after its
//! write landed (a partition, a store pause, a host stall past the op timeout); the
//! writer's next read then tells from its receipt whether the write landed, so the
//! outcomes it carried are neither counted twice nor lost.
//!
//! Receipts expire with the lease TTL, as ledger entries do: a write still in doubt
//! past it is taken as not landed.

use super::codec::{Reader, Wire};
use super::ledger::MAX_OWNERS;

/// One writer's last write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Receipt {
    /// The writer: its owner (worker or process) id mixed with its key's hash.
    pub writer: u64,
    /// The write's sequence number (per writer).
    pub seq: u32,
    /// The writer's clock when it wrote (ns).
    pub at: u64,
}

/// The receipts of one key, at most one per writer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Receipts {
    entries: Vec<Receipt>,
}

/// On the wire: `(writer, seq, at)`.
impl Wire for Receipt {
    fn put(&self, out: &mut Vec<u8>) {
        self.writer.put(out);
        self.seq.put(out);
        self.at.put(out);
    }

    fn take(r: &mut Reader<'_>) -> Option<Self> {
        Some(Receipt {
            writer: u64::take(r)?,
            seq: u32::take(r)?,
            at: u64::take(r)?,
        })
    }
}

/// On the wire: the receipts as a sequence.
impl Wire for Receipts {
    fn put(&self, out: &mut Vec<u8>) {
        self.entries.put(out);
    }

    fn take(r: &mut Reader<'_>) -> Option<Self> {
        Vec::take(r).map(|entries| Receipts { entries })
    }
}

impl Receipts {
    /// No receipts.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Forgets every receipt (a synchronous store never loses a reply).
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// The sequence number of `writer`'s last write, if its receipt is kept.
    pub fn seq(&self, writer: u64) -> Option<u32> {
        self.entries
            .iter()
            .find(|e| e.writer == writer)
            .map(|e| e.seq)
    }

    /// Records `writer`'s write `seq` at `now`, dropping receipts older than `ttl`.
    /// False when [`MAX_OWNERS`] other writers wrote within `ttl` (no receipt kept).
    pub fn stamp(&mut self, writer: u64, seq: u32, now: u64, ttl: u64) -> bool {
        let mut i = 0;
        while let Some(e) = self.entries.get(i) {
            if e.writer == writer || now.abs_diff(e.at) >= ttl {
                self.entries.swap_remove(i);
            } else {
                i += 1;
            }
        }
        let room = self.entries.len() < MAX_OWNERS;
        if room {
            self.entries.push(Receipt {
                writer,
                seq,
                at: now,
            });
        }
        room
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_receipt_per_writer_expiring_with_the_ttl() {
        let mut r = Receipts::default();
        assert!(r.stamp(1, 7, 100, 50));
        assert!(r.stamp(2, 3, 120, 50));
        assert!(r.stamp(1, 8, 130, 50));
        assert_eq!((r.seq(1), r.seq(2), r.seq(3)), (Some(8), Some(3), None));
        // Owner 2's receipt is 50 ns old at 170: dropped by the next stamp.
        assert!(r.stamp(1, 9, 170, 50));
        assert_eq!((r.seq(1), r.seq(2)), (Some(9), None));
    }

    #[test]
    fn a_full_table_keeps_no_new_receipt() {
        let mut r = Receipts::default();
        for writer in 0..MAX_OWNERS as u64 {
            assert!(r.stamp(writer, 1, 10, 1_000));
        }
        assert!(!r.stamp(u64::MAX, 1, 10, 1_000));
        assert_eq!(r.seq(u64::MAX), None);
        // A writer already kept is updated.
        assert!(r.stamp(5, 2, 11, 1_000));
        assert_eq!(r.seq(5), Some(2));
        assert!(!r.stamp(u64::MAX, 1, 12, 1_000));
    }
}
