//! A compact rolling window of outcome counters that merges exactly across workers.
//!
//! Each bucket is stamped with its epoch (`now / bucket_ns`, host time in ns). Merging
//! two windows of the same shape works slot by slot: the newer epoch wins, equal epochs add. That
//! operation is associative and commutative, so per-worker deltas can be folded into the
//! shared window in any order and any grouping with the same result.
//!
//! Host clocks are wall clocks: a worker whose clock is behind writes an older epoch,
//! which is dropped if its slot already holds a newer one (the loss is bounded by the
//! skew); epochs ahead of the reader's clock are still counted, so a clock stepping
//! backwards never hides recent failures.

use serde::{Deserialize, Serialize};

use crate::event::{EventKind, EVENT_KINDS};
use crate::time::Nanos;
use crate::window::{Health, HealthSnapshot};

/// Outcome counters of one bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Upstream call succeeded.
    pub success: u32,
    /// Upstream call failed (classified as failure).
    pub failure: u32,
    /// Call exceeded its deadline.
    pub timeout: u32,
    /// Rejected by the bulkhead (counts as an error, as in Hystrix).
    pub rejected: u32,
    /// Rejected by the breaker (never fed back into its health).
    pub short_circuited: u32,
    /// The caller's fault (e.g. 4xx): reported, never an error.
    pub bad_request: u32,
    /// Executed calls (success, failure, timeout, bad request) at or over the
    /// slow-call threshold.
    pub slow: u32,
}

/// One event kind, for [`Counts::add_one`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// See [`Counts::success`].
    Success,
    /// See [`Counts::failure`].
    Failure,
    /// See [`Counts::timeout`].
    Timeout,
    /// See [`Counts::rejected`].
    Rejected,
    /// See [`Counts::short_circuited`].
    ShortCircuited,
    /// See [`Counts::bad_request`].
    BadRequest,
}

impl Counts {
    /// Adds one event.
    #[inline]
    pub fn add_one(&mut self, event: Event) {
        let c = match event {
            Event::Success => &mut self.success,
            Event::Failure => &mut self.failure,
            Event::Timeout => &mut self.timeout,
            Event::Rejected => &mut self.rejected,
            Event::ShortCircuited => &mut self.short_circuited,
            Event::BadRequest => &mut self.bad_request,
        };
        *c = c.saturating_add(1);
    }

    /// Adds every counter of `other` (saturating, hence associative).
    pub fn add(&mut self, o: &Counts) {
        self.success = self.success.saturating_add(o.success);
        self.failure = self.failure.saturating_add(o.failure);
        self.timeout = self.timeout.saturating_add(o.timeout);
        self.rejected = self.rejected.saturating_add(o.rejected);
        self.short_circuited = self.short_circuited.saturating_add(o.short_circuited);
        self.bad_request = self.bad_request.saturating_add(o.bad_request);
        self.slow = self.slow.saturating_add(o.slow);
    }

    /// Calls that feed the breaker's health: success + failure + timeout + rejected.
    pub fn total(&self) -> u64 {
        self.success as u64 + self.errors()
    }

    /// failure + timeout + rejected.
    pub fn errors(&self) -> u64 {
        self.failure as u64 + self.timeout as u64 + self.rejected as u64
    }

    /// True when no counter is set.
    pub fn is_empty(&self) -> bool {
        *self == Counts::default()
    }

    /// The counts as the core's breaker rules read them (bulkhead rejections are
    /// `SEMAPHORE_REJECTED`).
    pub fn health(&self) -> HealthSnapshot {
        let mut c = [0u64; EVENT_KINDS];
        let mut set = |k: EventKind, v: u32| c[k.index()] = u64::from(v);
        set(EventKind::Success, self.success);
        set(EventKind::Failure, self.failure);
        set(EventKind::Timeout, self.timeout);
        set(EventKind::SemaphoreRejected, self.rejected);
        set(EventKind::ShortCircuited, self.short_circuited);
        set(EventKind::BadRequest, self.bad_request);
        HealthSnapshot::from_counts(&c, u64::from(self.slow))
    }
}

/// One epoch-stamped bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    /// `now / bucket_ns + 1` when the bucket was (re)started; 0 = never used.
    pub epoch: u64,
    /// Its counters.
    pub counts: Counts,
}

/// Largest number of buckets a window may have.
pub const MAX_BUCKETS: usize = 120;

/// Rolling window: `buckets.len()` buckets of `bucket_ns` each.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedWindow {
    bucket_ns: u64,
    buckets: Vec<Bucket>,
}

impl SharedWindow {
    /// An empty window of `buckets` buckets of `bucket_ns` (clamped to 1..=MAX_BUCKETS
    /// and ≥ 1 ns).
    pub fn new(bucket_ns: u64, buckets: usize) -> Self {
        SharedWindow {
            bucket_ns: bucket_ns.max(1),
            buckets: vec![Bucket::default(); buckets.clamp(1, MAX_BUCKETS)],
        }
    }

    /// Bucket width in ns.
    pub fn bucket_ns(&self) -> u64 {
        self.bucket_ns
    }

    /// Number of buckets.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Never true: a window has at least one bucket.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Whether `other` has the same bucket width and count (merge needs it).
    pub fn same_shape(&self, other: &SharedWindow) -> bool {
        self.bucket_ns == other.bucket_ns && self.buckets.len() == other.buckets.len()
    }

    /// Whether the window has the given shape.
    pub fn has_shape(&self, bucket_ns: u64, buckets: usize) -> bool {
        self.bucket_ns == bucket_ns.max(1) && self.buckets.len() == buckets.clamp(1, MAX_BUCKETS)
    }

    fn epoch(&self, now: Nanos) -> u64 {
        // +1 so that epoch 0 always means "never used".
        now / self.bucket_ns + 1
    }

    /// The bucket for `now`, restarted in place if it held an older epoch. O(1).
    #[inline]
    pub fn current(&mut self, now: Nanos) -> Option<&mut Counts> {
        let epoch = self.epoch(now);
        let n = self.buckets.len() as u64;
        let b = self.buckets.get_mut((epoch % n.max(1)) as usize)?;
        if b.epoch < epoch {
            *b = Bucket {
                epoch,
                counts: Counts::default(),
            };
        } else if b.epoch > epoch {
            // Our clock is behind the bucket's writer: count into the newer bucket
            // rather than losing the event.
        }
        Some(&mut b.counts)
    }

    /// Records one event at `now`.
    #[inline]
    pub fn record(&mut self, now: Nanos, event: Event) {
        if let Some(c) = self.current(now) {
            c.add_one(event);
        }
    }

    /// Records one completed call at or over the slow threshold.
    #[inline]
    pub fn record_slow(&mut self, now: Nanos) {
        if let Some(c) = self.current(now) {
            c.slow = c.slow.saturating_add(1);
        }
    }

    /// Sum of the buckets still inside the window at `now` (epochs ahead of `now`
    /// count too). O(buckets), no allocation.
    pub fn snapshot(&self, now: Nanos) -> Counts {
        let epoch = self.epoch(now);
        let oldest = epoch.saturating_sub(self.buckets.len() as u64 - 1).max(1);
        let mut sum = Counts::default();
        for b in &self.buckets {
            if b.epoch >= oldest {
                sum.add(&b.counts);
            }
        }
        sum
    }

    /// Folds `other` in: per slot, the newer epoch wins and equal epochs add.
    /// Windows of another shape are ignored (returns false).
    pub fn merge(&mut self, other: &SharedWindow) -> bool {
        if !self.same_shape(other) {
            return false;
        }
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            if b.epoch > a.epoch {
                *a = *b;
            } else if b.epoch == a.epoch {
                a.counts.add(&b.counts);
            }
        }
        true
    }

    /// Forgets every count (keeps the shape).
    pub fn clear(&mut self) {
        for b in &mut self.buckets {
            *b = Bucket::default();
        }
    }

    /// True when no bucket holds a count.
    pub fn is_clear(&self) -> bool {
        self.buckets.iter().all(|b| b.counts.is_empty())
    }

    /// Slot with a newer epoch than `epoch`'s slot is allowed; used by tests.
    #[cfg(test)]
    pub(crate) fn buckets(&self) -> &[Bucket] {
        &self.buckets
    }
}

impl Health for SharedWindow {
    fn health(&mut self, now: Nanos) -> HealthSnapshot {
        self.snapshot(now).health()
    }

    fn reset_counts(&mut self) {
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::ms_to_ns as ms;

    #[test]
    fn expiry_and_snapshot() {
        let mut w = SharedWindow::new(ms(1000), 10);
        w.record(ms(0), Event::Failure);
        w.record(ms(500), Event::Success);
        w.record(ms(9_999), Event::Success);
        assert_eq!(w.snapshot(ms(9_999)).total(), 3);
        // Bucket 0 leaves the window at 10 s.
        assert_eq!(w.snapshot(ms(10_000)).total(), 1);
        assert_eq!(w.snapshot(ms(10_000)).errors(), 0);
        // Reusing slot 0 restarts it in place.
        w.record(ms(10_000), Event::Timeout);
        assert_eq!(w.snapshot(ms(10_000)).timeout, 1);
        assert_eq!(w.snapshot(ms(10_000)).failure, 0);
    }

    #[test]
    fn clock_behind_still_counts() {
        let mut w = SharedWindow::new(ms(1000), 10);
        w.record(ms(15_000), Event::Success); // epoch 16, slot 6
        w.record(ms(5_000), Event::Failure); // epoch 6, same slot: counted in the newer bucket
        w.record(ms(12_000), Event::Failure); // epoch 13
        assert_eq!(w.snapshot(ms(15_000)).total(), 3);
        // A reader whose clock stepped back still sees the newer buckets.
        assert_eq!(w.snapshot(ms(12_000)).total(), 3);
    }

    #[test]
    fn merge_shape_mismatch_is_refused() {
        let mut a = SharedWindow::new(ms(1000), 10);
        let b = SharedWindow::new(ms(500), 10);
        assert!(!a.merge(&b));
        assert!(a.is_clear());
        assert_eq!(a.buckets().len(), 10);
    }
}
