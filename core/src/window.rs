//! Rolling metrics of one key: a [`Ring`] of counter buckets (the health window) and a
//! [`Ring`] of latency histograms (the percentile window; none when percentiles are
//! disabled).
//!
//! Running totals are kept for the live counter buckets other than the current one,
//! so recording is one counter increment and reading health after a roll is O(event
//! kinds); one comparison on the hot path tells whether either ring must move.
//! `&self` queries (`*_at(now)`) read the window as it would be at `now` without
//! moving it (O(1) while `now` is in the current bucket, O(buckets) otherwise).
//!
//! The window is plain data (`Clone`, `PartialEq`); [`Window::merge`] is exact,
//! associative and commutative for windows of the same geometry.

use crate::config::MetricsConfig;
use crate::event::{EventKind, EVENT_KINDS};
use crate::histogram::{Histogram, Percentiles};
use crate::ring::{geometry, Bucket, Ring};
use crate::time::{ms_to_ns, mul_sat, Nanos};

/// One counter bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CounterBucket {
    /// Events per [`EventKind`] index.
    pub counts: [u32; EVENT_KINDS],
    /// Executions at or above the slow-call threshold.
    pub slow: u32,
    /// Highest concurrency observed during the bucket.
    pub max_concurrency: u32,
}

impl Bucket for CounterBucket {
    fn join(&mut self, other: &Self) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a = a.saturating_add(*b);
        }
        self.slow = self.slow.saturating_add(other.slow);
        self.max_concurrency = self.max_concurrency.max(other.max_concurrency);
    }

    fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// One percentile bucket: the latencies of executions that ended in it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LatencyBucket {
    /// Execution latencies (ns).
    pub latency: Histogram,
}

impl Bucket for LatencyBucket {
    fn join(&mut self, other: &Self) {
        self.latency.merge(&other.latency);
    }

    fn is_empty(&self) -> bool {
        self.latency.is_empty()
    }
}

/// Rolling counts over the health window, as the breaker rules read them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HealthSnapshot {
    /// Live counts per [`EventKind`] index.
    pub counts: [u64; EVENT_KINDS],
    /// success + failure + timeout + rejections (Hystrix's total; no short-circuits).
    pub total: u64,
    /// failure + timeout + rejections.
    pub errors: u64,
    /// `errors / total * 100` (0 when total is 0).
    pub error_percentage: f64,
    /// Slow executions.
    pub slow: u64,
    /// Executions (success + failure + timeout), the slow-call denominator.
    pub executions: u64,
    /// Every call that ended in the window, whatever its verdict: executions, bulkhead
    /// rejections, short-circuits, bad requests, cache hits and collapsed calls
    /// (fallback events are not calls).
    pub calls: u64,
    /// Calls admitted and still running when the snapshot was taken, as the host
    /// reports them (0 unless a rule needs them: the `all_calls` denominator).
    pub running: u64,
}

impl HealthSnapshot {
    /// Builds the snapshot from raw counts.
    pub fn from_counts(counts: &[u64; EVENT_KINDS], slow: u64) -> Self {
        // Saturating: the counts may come from a host (found by review: u64::MAX
        // overflowed).
        let c = |k: EventKind| counts[k.index()];
        let executions = c(EventKind::Success)
            .saturating_add(c(EventKind::Failure))
            .saturating_add(c(EventKind::Timeout));
        let errors = c(EventKind::Failure)
            .saturating_add(c(EventKind::Timeout))
            .saturating_add(c(EventKind::SemaphoreRejected))
            .saturating_add(c(EventKind::ThreadPoolRejected));
        let total = c(EventKind::Success).saturating_add(errors);
        let calls = total
            .saturating_add(c(EventKind::ShortCircuited))
            .saturating_add(c(EventKind::BadRequest))
            .saturating_add(c(EventKind::ResponseFromCache))
            .saturating_add(c(EventKind::Collapsed));
        let error_percentage = if total == 0 {
            0.0
        } else {
            errors as f64 * 100.0 / total as f64
        };
        Self {
            counts: *counts,
            total,
            errors,
            error_percentage,
            slow,
            executions,
            calls,
            running: 0,
        }
    }

    /// Live count of one kind.
    pub fn count(&self, kind: EventKind) -> u64 {
        self.counts[kind.index()]
    }

    /// Whether the window shows trouble: errors or slow calls.
    pub fn is_troubled(&self) -> bool {
        self.errors > 0 || self.slow > 0
    }
}

/// The rolling health counts a breaker reads and resets: implemented by [`Window`]
/// and by the shared state's wire window, so one [`crate::BreakerState`] state
/// machine runs on either.
pub trait Health {
    /// Live counts over the health window at `now` (may move the window forward).
    fn health(&mut self, now: Nanos) -> HealthSnapshot;
    /// Forgets the health counts (the breaker closed).
    fn reset_counts(&mut self);
}

/// The rolling window of one key.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    counters: Ring<CounterBucket>,
    /// Sum of the live counter buckets other than the current one.
    past: [u64; EVENT_KINDS],
    past_slow: u64,
    /// Counts of expired or reset buckets; cumulative = retired + live totals.
    retired: [u64; EVENT_KINDS],
    /// No buckets when percentiles are disabled ([`Ring::off`]).
    latency: Ring<LatencyBucket>,
    /// `min` of both rings' current-bucket ends: one comparison guards both.
    next_roll: Nanos,
    /// Calls whose leaving can raise a rate (a success; for the slow-call rate, a
    /// call that was not slow) left the window since [`Window::take_dropped`].
    dropped: bool,
}

fn ring_geometry(window_ms: u64, buckets: u32) -> (u64, usize) {
    geometry(ms_to_ns(window_ms), buckets)
}

/// The latency ring `config` asks for, positioned at `now`.
fn latency_ring(config: &MetricsConfig, now: Nanos) -> Ring<LatencyBucket> {
    let (w, n) = ring_geometry(config.percentile_window_ms, config.percentile_buckets);
    if config.percentiles_enabled {
        Ring::new(w, n, now)
    } else {
        Ring::off(w)
    }
}

impl Window {
    /// An empty window shaped by `config`, positioned at `now`.
    pub fn new(config: &MetricsConfig, now: Nanos) -> Self {
        let (w, n) = ring_geometry(config.rolling_window_ms, config.rolling_buckets);
        let mut window = Window {
            counters: Ring::new(w, n, now),
            past: [0; EVENT_KINDS],
            past_slow: 0,
            retired: [0; EVENT_KINDS],
            latency: latency_ring(config, now),
            next_roll: 0,
            dropped: false,
        };
        window.sync();
        window
    }

    fn sync(&mut self) {
        self.next_roll = self.counters.current_end().min(self.latency.current_end());
    }

    /// The counter ring.
    pub fn counters(&self) -> &Ring<CounterBucket> {
        &self.counters
    }

    /// The latency ring (no buckets: percentiles disabled).
    pub fn latency(&self) -> &Ring<LatencyBucket> {
        &self.latency
    }

    fn recompute_past(&mut self) {
        let current = self.counters.current_epoch();
        let mut past = [0u64; EVENT_KINDS];
        let mut slow = 0u64;
        for s in self.counters.live_at(0) {
            if s.epoch == current {
                continue;
            }
            for (t, c) in past.iter_mut().zip(&s.bucket.counts) {
                *t = t.saturating_add(u64::from(*c));
            }
            slow = slow.saturating_add(u64::from(s.bucket.slow));
        }
        self.past = past;
        self.past_slow = slow;
        self.sync();
    }

    #[inline(always)]
    fn roll(&mut self, now: Nanos) {
        if now >= self.next_roll {
            self.roll_cold(now);
        }
    }

    #[cold]
    #[inline(never)]
    fn roll_cold(&mut self, now: Nanos) {
        // At the clock's last bucket the end saturates at `u64::MAX`, which `now` can
        // reach without leaving the bucket: the epoch decides (found by review: the
        // bucket was counted again on each record).
        if now >= self.counters.current_end()
            && now / self.counters.width_ns() > self.counters.current_epoch()
        {
            // The current bucket becomes a past one; buckets leaving the window move
            // from the running totals to the retired counts.
            if let Some(b) = self.counters.current() {
                for (t, c) in self.past.iter_mut().zip(&b.counts) {
                    *t = t.saturating_add(u64::from(*c));
                }
                self.past_slow = self.past_slow.saturating_add(u64::from(b.slow));
            }
            let (past, past_slow, retired, dropped) = (
                &mut self.past,
                &mut self.past_slow,
                &mut self.retired,
                &mut self.dropped,
            );
            self.counters.roll(now, |b| {
                for ((t, r), c) in past.iter_mut().zip(retired.iter_mut()).zip(&b.counts) {
                    *t = t.saturating_sub(u64::from(*c));
                    *r = r.saturating_add(u64::from(*c));
                }
                *past_slow = past_slow.saturating_sub(u64::from(b.slow));
                // A success leaving can raise the error rate; a call that was not
                // slow, the slow-call rate (only while slow calls remain).
                let c = |k: EventKind| u64::from(b.counts[k.index()]);
                let executions =
                    c(EventKind::Success) + c(EventKind::Failure) + c(EventKind::Timeout);
                *dropped |=
                    c(EventKind::Success) > 0 || (*past_slow > 0 && executions > u64::from(b.slow));
            });
        }
        self.latency.roll(now, |_| {});
        self.sync();
    }

    /// Whether calls whose leaving can raise a rate left the window since the last
    /// call (then the trip rules must run again: the rate may be over its threshold
    /// with no new error).
    #[inline(always)]
    pub fn take_dropped(&mut self) -> bool {
        // A branch, not `mem::take`: no store on the common path.
        if self.dropped {
            self.dropped = false;
            return true;
        }
        false
    }

    /// Counts one event at `now`. O(1), no allocation.
    #[inline(always)]
    pub fn record(&mut self, kind: EventKind, now: Nanos) {
        self.roll(now);
        if let Some(b) = self.counters.current_mut() {
            crate::counter::increment(&mut b.counts[kind.index()]);
        }
    }

    /// Counts one execution with its latency (ns), whether it was slow, and the
    /// concurrency it ran at (for the rolling maximum). O(1), no allocation.
    #[inline(always)]
    pub fn record_call(
        &mut self,
        kind: EventKind,
        latency_ns: u64,
        slow: bool,
        concurrency: u32,
        now: Nanos,
    ) {
        self.roll(now);
        if let Some(b) = self.counters.current_mut() {
            crate::counter::increment(&mut b.counts[kind.index()]);
            if concurrency > b.max_concurrency {
                b.max_concurrency = concurrency;
            }
            if slow {
                crate::counter::increment(&mut b.slow);
            }
        }
        if let Some(b) = self.latency.current_mut() {
            b.latency.record(latency_ns);
        }
    }

    /// Counts `n` events of `kind` at `now` in one step (hosts restoring saved
    /// counts, e.g. opossum's `status` option). O(1), no allocation.
    pub fn record_n(&mut self, kind: EventKind, n: u32, now: Nanos) {
        self.roll(now);
        if let Some(b) = self.counters.current_mut() {
            let c = &mut b.counts[kind.index()];
            *c = c.saturating_add(n);
        }
    }

    /// The non-empty counter buckets live at `now`, each with its start time (ns), in
    /// ring order (sort by start for a timeline; a bucket missing from the sequence
    /// is empty). Without moving the window.
    pub fn counter_buckets_at(&self, now: Nanos) -> impl Iterator<Item = (Nanos, &CounterBucket)> {
        let width = self.counters.width_ns();
        self.counters
            .live_at(now)
            .filter(|s| !s.bucket.is_empty())
            .map(move |s| (mul_sat(s.epoch, width), &s.bucket))
    }

    /// Live totals (past buckets plus the current one), valid after a roll to `now`.
    #[inline]
    fn totals(&self) -> ([u64; EVENT_KINDS], u64) {
        let mut t = self.past;
        let mut slow = self.past_slow;
        if let Some(b) = self.counters.current() {
            for (t, c) in t.iter_mut().zip(&b.counts) {
                *t = t.saturating_add(u64::from(*c));
            }
            slow = slow.saturating_add(u64::from(b.slow));
        }
        (t, slow)
    }

    /// The health counts at `now` (moves the window). O(event kinds), no allocation.
    #[inline]
    pub fn health(&mut self, now: Nanos) -> HealthSnapshot {
        self.roll(now);
        let (totals, slow) = self.totals();
        HealthSnapshot::from_counts(&totals, slow)
    }

    /// The health counts as they are at `now`, without moving the window.
    pub fn health_at(&self, now: Nanos) -> HealthSnapshot {
        if now < self.counters.current_end() {
            let (totals, slow) = self.totals();
            return HealthSnapshot::from_counts(&totals, slow);
        }
        let mut totals = [0u64; EVENT_KINDS];
        let mut slow = 0u64;
        for s in self.counters.live_at(now) {
            for (t, c) in totals.iter_mut().zip(&s.bucket.counts) {
                *t = t.saturating_add(u64::from(*c));
            }
            slow = slow.saturating_add(u64::from(s.bucket.slow));
        }
        HealthSnapshot::from_counts(&totals, slow)
    }

    /// Highest concurrency in the buckets live at `now`.
    pub fn rolling_max_concurrency_at(&self, now: Nanos) -> u32 {
        self.counters
            .live_at(now)
            .map(|s| s.bucket.max_concurrency)
            .max()
            .unwrap_or(0)
    }

    /// Every latency live at `now`, merged into one histogram (no allocation).
    pub fn latency_at(&self, now: Nanos) -> Histogram {
        let mut h = Histogram::new();
        for s in self.latency.live_at(now) {
            h.merge(&s.bucket.latency);
        }
        h
    }

    /// Latency percentiles (ns) over the percentile window at `now`.
    pub fn percentiles_at(&self, now: Nanos) -> Percentiles {
        self.latency_at(now).percentiles()
    }

    /// Counts since the window was created (never reset), per [`EventKind`] index.
    pub fn cumulative(&self) -> [u64; EVENT_KINDS] {
        let mut c = self.retired;
        let (totals, _) = self.totals();
        for (c, t) in c.iter_mut().zip(totals.iter()) {
            *c = c.saturating_add(*t);
        }
        c
    }

    /// Cumulative count of one kind.
    pub fn cumulative_count(&self, kind: EventKind) -> u64 {
        self.cumulative()[kind.index()]
    }

    /// Clears the live health counters (the breaker does this when it closes).
    /// Cumulative counts and latencies are kept.
    pub fn reset_counts(&mut self) {
        let cumulative = self.cumulative();
        self.counters.clear();
        self.past = [0; EVENT_KINDS];
        self.past_slow = 0;
        self.retired = cumulative;
    }

    /// Adds `other` into `self` (see [`Ring::merge`]); cumulative counts add.
    pub fn merge(&mut self, other: &Self) {
        let mut cumulative = self.cumulative();
        for (a, b) in cumulative.iter_mut().zip(other.cumulative().iter()) {
            *a = a.saturating_add(*b);
        }
        self.counters.merge(&other.counters);
        if !self.latency.is_empty() && !other.latency.is_empty() {
            self.latency.merge(&other.latency);
        }
        self.recompute_past();
        self.set_cumulative(&cumulative);
        self.dropped |= other.dropped;
    }

    fn set_cumulative(&mut self, cumulative: &[u64; EVENT_KINDS]) {
        let (totals, _) = self.totals();
        for ((r, c), t) in self.retired.iter_mut().zip(cumulative).zip(&totals) {
            *r = c.saturating_sub(*t);
        }
    }

    /// Applies a new metrics config, keeping counts: live buckets are re-bucketed by
    /// their start time into the new geometry ([`Ring::rebucket`]). Enabling
    /// percentiles starts an empty latency ring; disabling them drops it.
    pub fn reconfigure(&mut self, config: &MetricsConfig) {
        let cumulative = self.cumulative();
        let (w, n) = ring_geometry(config.rolling_window_ms, config.rolling_buckets);
        let (lw, ln) = ring_geometry(config.percentile_window_ms, config.percentile_buckets);
        self.counters.rebucket(w, n);
        if !config.percentiles_enabled || self.latency.is_empty() {
            let now = mul_sat(self.counters.current_epoch(), self.counters.width_ns());
            self.latency = latency_ring(config, now);
        } else {
            self.latency.rebucket(lw, ln);
        }
        self.recompute_past();
        self.set_cumulative(&cumulative);
    }

    /// Whether `other` has the same geometry (mergeable slot by slot).
    pub fn same_geometry(&self, other: &Self) -> bool {
        self.counters.same_geometry(&other.counters) && self.latency.same_geometry(&other.latency)
    }

    /// Bytes this window occupies (inline + heap).
    pub fn memory_bytes(&self) -> usize {
        core::mem::size_of::<Self>() + self.counters.heap_bytes() + self.latency.heap_bytes()
    }
}

impl Health for Window {
    #[inline(always)]
    fn health(&mut self, now: Nanos) -> HealthSnapshot {
        Window::health(self, now)
    }

    #[inline(always)]
    fn reset_counts(&mut self) {
        Window::reset_counts(self)
    }
}
