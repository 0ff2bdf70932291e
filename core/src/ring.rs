//! The one rolling ring every window is built on: `len` buckets of `width_ns`, each
//! stamped with its epoch.
//!
//! Epoch convention (one for the whole crate): a bucket's epoch is
//! `start_time / width_ns`; `current` is the highest epoch seen; a bucket is **live**
//! while its epoch lies in `(current - len, current]`. A clock that steps backwards
//! (or a writer whose clock is behind) counts into the current bucket: no time passed.
//! Every slot that is not live holds an empty bucket, and the slot of `current`
//! always carries the current epoch, so the hot path never checks an epoch.
//!
//! The bucket type is the only thing that differs between the core's metrics window
//! (13 event counters, latency histograms) and the compact wire window of shared
//! state: one ring, one epoch rule, one bucket limit ([`MAX_BUCKETS`]), one merge and
//! one re-bucketing rule.

use crate::time::{mul_sat, Nanos};

/// Largest bucket count of any ring.
pub const MAX_BUCKETS: u32 = 1_000;

/// What a ring holds per slot.
pub trait Bucket: Clone + Default {
    /// Adds `other` (a bucket of the same epoch) into `self`.
    fn join(&mut self, other: &Self);
    /// Whether the bucket holds nothing.
    fn is_empty(&self) -> bool;
}

/// One slot: an epoch and its bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Slot<B> {
    /// `start_time / width_ns` of the bucket.
    pub epoch: u64,
    /// The bucket.
    pub bucket: B,
}

/// A ring of epoch-stamped buckets. Built from stored parts only through
/// [`Ring::from_parts`], so decoded bytes cannot break an invariant.
#[derive(Clone, Debug, PartialEq)]
pub struct Ring<B> {
    width_ns: u64,
    current: u64,
    /// Cached `(current + 1) * width_ns`: the hot path compares `now` against it.
    current_end: u64,
    /// Cached `current % len`.
    current_slot: u32,
    slots: Vec<Slot<B>>,
}

/// Bucket width and count for a window of `window_ns` in `buckets` buckets (clamped
/// to `1..=MAX_BUCKETS` buckets and at least 1 ns each).
pub fn geometry(window_ns: u64, buckets: u32) -> (u64, usize) {
    let n = buckets.clamp(1, MAX_BUCKETS);
    ((window_ns / u64::from(n)).max(1), n as usize)
}

impl<B: Bucket> Ring<B> {
    /// An empty ring whose current epoch is `now`'s.
    pub fn new(width_ns: u64, len: usize, now: Nanos) -> Self {
        let width_ns = width_ns.max(1);
        let len = len.clamp(1, MAX_BUCKETS as usize);
        let mut r = Ring {
            width_ns,
            current: now / width_ns,
            current_end: 0,
            current_slot: 0,
            slots: vec![Slot::default(); len],
        };
        r.sync();
        r
    }

    /// A ring with no buckets, for a window that keeps nothing (percentiles
    /// disabled): nothing is recorded into it, it never needs to roll and it reads
    /// as empty. [`Ring::rebucket`] would give it buckets.
    pub fn off(width_ns: u64) -> Self {
        Ring {
            width_ns: width_ns.max(1),
            current: 0,
            current_end: u64::MAX,
            current_slot: 0,
            slots: Vec::new(),
        }
    }

    /// Rebuilds a ring from stored parts (decoded bytes): the geometry is clamped,
    /// slots that are not live are emptied, and the current slot is stamped, so no
    /// input can break an invariant.
    pub fn from_parts(width_ns: u64, current: u64, slots: Vec<Slot<B>>) -> Self {
        let mut slots = slots;
        slots.truncate(MAX_BUCKETS as usize);
        if slots.is_empty() {
            slots.push(Slot::default());
        }
        let mut r = Ring {
            width_ns: width_ns.max(1),
            current,
            current_end: 0,
            current_slot: 0,
            slots,
        };
        let n = r.slots.len() as u64;
        for (i, s) in r.slots.iter_mut().enumerate() {
            let live = s.epoch <= current && s.epoch.saturating_add(n) > current;
            if !live || s.epoch % n != i as u64 {
                *s = Slot::default();
            }
        }
        r.sync();
        r
    }

    fn sync(&mut self) {
        let n = self.slots.len().max(1) as u64;
        self.current_end = if self.slots.is_empty() {
            u64::MAX
        } else {
            mul_sat(self.current.saturating_add(1), self.width_ns)
        };
        self.current_slot = (self.current % n) as u32;
        let epoch = self.current;
        if let Some(s) = self.slots.get_mut(self.current_slot as usize) {
            if s.epoch != epoch {
                *s = Slot {
                    epoch,
                    bucket: B::default(),
                };
            }
        }
    }

    /// Bucket width (ns).
    pub fn width_ns(&self) -> u64 {
        self.width_ns
    }

    /// Number of buckets.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the ring has no buckets (only [`Ring::off`]).
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The highest epoch seen.
    pub fn current_epoch(&self) -> u64 {
        self.current
    }

    /// End of the current bucket (ns): `roll` has work only at or after it.
    #[inline(always)]
    pub fn current_end(&self) -> Nanos {
        self.current_end
    }

    /// Whether both rings have the same geometry (mergeable slot by slot).
    pub fn same_geometry(&self, other: &Self) -> bool {
        self.width_ns == other.width_ns && self.slots.len() == other.slots.len()
    }

    /// The slots in ring order (slot = epoch % len).
    pub fn slots(&self) -> &[Slot<B>] {
        &self.slots
    }

    /// The current bucket.
    #[inline(always)]
    pub fn current(&self) -> Option<&B> {
        self.slots
            .get(self.current_slot as usize)
            .map(|s| &s.bucket)
    }

    /// The current bucket, mutably (the caller has rolled to `now`).
    #[inline(always)]
    pub fn current_mut(&mut self) -> Option<&mut B> {
        self.slots
            .get_mut(self.current_slot as usize)
            .map(|s| &mut s.bucket)
    }

    /// Moves the ring forward to `now`: every bucket that leaves the window is handed
    /// to `expired` and its slot reset. A `now` at or before the current bucket's end
    /// changes nothing. O(min(steps, len)).
    pub fn roll(&mut self, now: Nanos, mut expired: impl FnMut(&B)) {
        if self.slots.is_empty() {
            return; // `Ring::off`: nothing to move
        }
        let e = now / self.width_ns;
        if e <= self.current {
            return;
        }
        let n = self.slots.len() as u64;
        let steps = (e - self.current).min(n);
        for ep in (e - steps + 1)..=e {
            if let Some(s) = self.slots.get_mut((ep % n) as usize) {
                if !s.bucket.is_empty() {
                    expired(&s.bucket);
                }
                *s = Slot {
                    epoch: ep,
                    bucket: B::default(),
                };
            }
        }
        self.current = e;
        self.sync();
    }

    /// Live buckets as seen at `now` without moving the ring (`&self` queries): the
    /// buckets of `(max(current, now_epoch) - len, current]`.
    pub fn live_at(&self, now: Nanos) -> impl Iterator<Item = &Slot<B>> {
        let top = self.current.max(now / self.width_ns);
        let n = self.slots.len() as u64;
        let from = top.saturating_add(1).saturating_sub(n);
        self.slots
            .iter()
            .filter(move |s| s.epoch >= from && s.epoch <= self.current)
    }

    /// Empties every bucket (epochs kept).
    pub fn clear(&mut self) {
        for s in &mut self.slots {
            s.bucket = B::default();
        }
    }

    /// Whether every bucket is empty.
    pub fn is_clear(&self) -> bool {
        self.slots.iter().all(|s| s.bucket.is_empty())
    }

    /// Adds `other` into `self`, aligned by epoch: buckets of the same epoch join, a
    /// newer epoch replaces an older one in the same slot, and buckets that are not
    /// live for the merged current epoch are dropped. Exact, associative and
    /// commutative for rings of the same geometry; a ring of another geometry is
    /// re-bucketed into this one first.
    pub fn merge(&mut self, other: &Self) {
        self.merge_by(other, 0, 0);
    }

    /// [`Ring::merge`] of `other`, written by a clock that reads `now` (at or after
    /// `other`'s current bucket), which may not be the clock `self` was written by. A
    /// writer behind `self` has its buckets moved forward by the difference: its
    /// outcomes count as of `self`'s current bucket (no time passed, as when a clock
    /// steps back), so the window stays on the clock furthest ahead, and writers far
    /// apart all count while that one writes. `still`: the writer's time since which
    /// `self` has not moved, once that is a ring or more ago (the clock ahead has gone
    /// quiet: another worker's gone, or one wild time). Then a `self` a whole ring or
    /// more ahead of that time is first moved back, by whole rings, to within one ring
    /// of it, each bucket keeping its age, so it rolls on the writer's clock again.
    pub fn merge_at(&mut self, other: &Self, now: Nanos, still: Option<Nanos>) {
        let n = self.slots.len().max(1) as u64;
        let here = now / self.width_ns;
        let back = match still {
            // (Never below epoch n - 1: no live bucket may land before time 0.)
            Some(t) => {
                let floor = (t / self.width_ns).max(n - 1);
                if self.current >= floor.saturating_add(n) {
                    (self.current - floor) / n * n
                } else {
                    0
                }
            }
            None => 0,
        };
        let by = (self.current - back).saturating_sub(here);
        self.merge_by(other, by, back);
    }

    /// [`Ring::merge`] with `other`'s epochs moved forward by `by` and `self`'s back
    /// by `back` (a multiple of its length: each bucket stays in its slot).
    fn merge_by(&mut self, other: &Self, by: u64, back: u64) {
        if self.slots.is_empty() || other.slots.is_empty() {
            return; // an off ring keeps nothing and adds nothing
        }
        if !self.same_geometry(other) {
            let mut o = other.clone();
            o.rebucket(self.width_ns, self.slots.len());
            self.merge_by(&o, by, back);
            return;
        }
        self.current = (self.current - back).max(other.current.saturating_add(by));
        let n = self.slots.len();
        let from = self.current.saturating_add(1).saturating_sub(n as u64);
        // Slot i of `other` lands in slot i + by of `self`: each slot is visited once.
        let mut j = (by % n as u64) as usize;
        for b in &other.slots {
            let Some(a) = self.slots.get_mut(j) else {
                continue;
            };
            j = if j + 1 == n { 0 } else { j + 1 };
            a.epoch = a.epoch.saturating_sub(back);
            // (Moved, an empty bucket is skipped: an unused slot's epoch could take a
            // live one's place. Unmoved, it is taken as ever: merges stay exact.)
            if by == 0 || !b.bucket.is_empty() {
                let e = b.epoch.saturating_add(by);
                if e > a.epoch {
                    *a = Slot {
                        epoch: e,
                        bucket: b.bucket.clone(),
                    };
                } else if e == a.epoch {
                    a.bucket.join(&b.bucket);
                }
            }
            if a.epoch < from {
                *a = Slot::default();
            }
        }
        self.sync();
    }

    /// Moves every live bucket, by its start time, into a ring of a new geometry
    /// (buckets landing in one new bucket join; those older than the new window are
    /// dropped).
    pub fn rebucket(&mut self, width_ns: u64, len: usize) {
        let width_ns = width_ns.max(1);
        let len = len.clamp(1, MAX_BUCKETS as usize);
        if width_ns == self.width_ns && len == self.slots.len() {
            return;
        }
        let start = mul_sat(self.current, self.width_ns);
        let current = start / width_ns;
        let from = current.saturating_add(1).saturating_sub(len as u64);
        let mut slots: Vec<Slot<B>> = vec![Slot::default(); len];
        let old_from = self
            .current
            .saturating_add(1)
            .saturating_sub(self.slots.len() as u64);
        for s in &self.slots {
            if s.epoch < old_from || s.epoch > self.current || s.bucket.is_empty() {
                continue;
            }
            let epoch = mul_sat(s.epoch, self.width_ns) / width_ns;
            if epoch < from {
                continue;
            }
            if let Some(t) = slots.get_mut((epoch % len as u64) as usize) {
                if t.epoch == epoch {
                    t.bucket.join(&s.bucket);
                } else {
                    *t = Slot {
                        epoch,
                        bucket: s.bucket.clone(),
                    };
                }
            }
        }
        self.width_ns = width_ns;
        self.current = current;
        self.slots = slots;
        self.sync();
    }

    /// Bytes of the slot vector.
    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * core::mem::size_of::<Slot<B>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, Default, PartialEq)]
    struct N(u32);
    impl Bucket for N {
        fn join(&mut self, o: &Self) {
            self.0 += o.0;
        }
        fn is_empty(&self) -> bool {
            self.0 == 0
        }
    }

    fn sum(r: &Ring<N>, now: u64) -> u32 {
        r.live_at(now).map(|s| s.bucket.0).sum()
    }

    #[test]
    fn roll_expires_and_backward_clock_counts_into_current() {
        let mut r: Ring<N> = Ring::new(10, 3, 0);
        r.current_mut().unwrap().0 += 1; // epoch 0
        r.roll(25, |_| {});
        r.current_mut().unwrap().0 += 2; // epoch 2
        assert_eq!(sum(&r, 25), 3);
        let mut gone = 0;
        r.roll(30, |b| gone += b.0); // epoch 3: epoch 0 leaves
        assert_eq!(gone, 1);
        assert_eq!(sum(&r, 30), 2);
        r.roll(5, |_| panic!("backwards: nothing expires"));
        assert_eq!(r.current_epoch(), 3);
        // &self reads at a later time see fewer live buckets.
        assert_eq!(sum(&r, 45), 2);
        assert_eq!(sum(&r, 50), 0);
    }

    #[test]
    fn an_off_ring_keeps_nothing_and_never_panics() {
        let mut on: Ring<N> = Ring::new(10, 3, 0);
        on.current_mut().unwrap().0 += 4;
        let mut off: Ring<N> = Ring::off(1);
        assert!(off.current_mut().is_none());
        off.merge(&on);
        assert!(off.is_empty() && off.is_clear());
        let before = on.clone();
        on.merge(&off);
        assert_eq!(on, before);
        off.roll(u64::MAX, |_| panic!("nothing to expire"));
        assert_eq!(off.current_end(), u64::MAX);
        assert_eq!(sum(&off, u64::MAX), 0);
    }

    #[test]
    fn merge_aligns_by_epoch_and_rebucket_keeps_counts() {
        let mut a: Ring<N> = Ring::new(10, 4, 0);
        a.current_mut().unwrap().0 = 1;
        let mut b: Ring<N> = Ring::new(10, 4, 0);
        b.current_mut().unwrap().0 = 2;
        b.roll(10, |_| {});
        b.current_mut().unwrap().0 = 3;
        let mut ab = a.clone();
        ab.merge(&b);
        let mut ba = b.clone();
        ba.merge(&a);
        assert_eq!(ab, ba);
        assert_eq!(sum(&ab, 10), 6);
        ab.rebucket(20, 2);
        assert_eq!(sum(&ab, 10), 6);
        assert_eq!(ab.len(), 2);
    }

    #[test]
    fn a_writer_behind_counts_as_of_the_current_bucket() {
        // The stored ring is at epoch 42; the writer's clock reads epoch 40 and its
        // two buckets are 39 and 40: they land in 41 and 42, in order.
        let mut stored: Ring<N> = Ring::new(10, 4, 420);
        stored.current_mut().unwrap().0 = 1;
        let mut w: Ring<N> = Ring::new(10, 4, 390);
        w.current_mut().unwrap().0 = 2;
        w.roll(400, |_| {});
        w.current_mut().unwrap().0 = 3;
        let mut plain = stored.clone();
        stored.merge_at(&w, 400, None);
        assert_eq!(stored.current_epoch(), 42);
        assert_eq!(
            stored.current().unwrap().0,
            4,
            "the writer's newest joins the current"
        );
        assert_eq!(sum(&stored, 420), 6);
        // Its older bucket is one bucket older: it leaves first.
        stored.roll(450, |_| {});
        assert_eq!(sum(&stored, 450), 4);
        // A plain merge keeps them where the writer's clock put them: they leave
        // two buckets sooner.
        plain.merge(&w);
        assert_eq!(sum(&plain, 420), 6);
        plain.roll(450, |_| {});
        assert_eq!(sum(&plain, 450), 1);
        // A writer on the same clock: the same as a plain merge.
        let mut a: Ring<N> = Ring::new(10, 4, 400);
        a.current_mut().unwrap().0 = 1;
        let mut b = a.clone();
        a.merge_at(&w, 400, None);
        b.merge(&w);
        assert_eq!(a, b);
    }

    #[test]
    fn a_ring_far_ahead_of_the_writer_comes_back_by_whole_rings() {
        // Stored at epoch 1 000 003 (a wild time); the writer's clock reads epoch 10.
        let mut stored: Ring<N> = Ring::new(10, 4, 10_000_020);
        stored.current_mut().unwrap().0 = 5;
        stored.roll(10_000_030, |_| {});
        stored.current_mut().unwrap().0 = 7;
        let mut w: Ring<N> = Ring::new(10, 4, 100);
        w.current_mut().unwrap().0 = 1;
        // Not still: the writer counts as of the ring's current bucket, far ahead.
        let mut kept = stored.clone();
        kept.merge_at(&w, 100, None);
        assert_eq!(kept.current_epoch(), 1_000_003);
        assert_eq!(kept.current().unwrap().0, 8);
        // Still since the writer's 100 (a ring ago or more):
        stored.merge_at(&w, 100, Some(100));
        // Back by 999 992 (a multiple of 4): epoch 11, within a ring of the writer's 10.
        assert_eq!(stored.current_epoch(), 11);
        assert_eq!(sum(&stored, 110), 13, "nothing lost");
        assert_eq!(
            stored.current().unwrap().0,
            8,
            "the writer's outcome is current"
        );
        // It rolls again with the writer's clock: gone a ring after.
        stored.roll(160, |_| {});
        assert_eq!(sum(&stored, 160), 0);
        // Times near u64::MAX neither panic nor lose what the writer brings.
        let mut wild: Ring<N> = Ring::new(10, 4, u64::MAX);
        wild.current_mut().unwrap().0 = 1;
        let mut w: Ring<N> = Ring::new(10, 4, 0);
        w.current_mut().unwrap().0 = 2;
        wild.merge_at(&w, 0, Some(0));
        assert_eq!(sum(&wild, 0), 3);
        // A writer far ahead moves the ring there: what it holds is a ring old.
        let mut ahead: Ring<N> = Ring::new(10, 4, u64::MAX);
        ahead.current_mut().unwrap().0 = 4;
        wild.merge_at(&ahead, u64::MAX, None);
        assert_eq!(sum(&wild, u64::MAX), 4);
    }

    #[test]
    fn from_parts_repairs_garbage() {
        let slots = vec![
            Slot {
                epoch: 99,
                bucket: N(5),
            },
            Slot {
                epoch: 1,
                bucket: N(7),
            },
        ];
        let r = Ring::from_parts(0, 1, slots);
        assert_eq!(r.width_ns(), 1);
        // epoch 99 is ahead of current (dropped); epoch 1 sits in slot 1 (kept).
        assert_eq!(sum(&r, 1), 7);
    }
}
