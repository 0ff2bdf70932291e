//! Rolling metrics: a ring of epoch-stamped counter buckets (health window) and a
//! ring of epoch-stamped latency histograms (percentile window).
//!
//! A bucket's epoch is `now / bucket_ns`. A bucket is live while its epoch lies in
//! `(current - buckets, current]`, where `current` is the highest epoch seen; an
//! expired bucket is reset in place when its slot is reused. Running totals are
//! kept for the live counter buckets, so recording and reading the health
//! snapshot are O(1) and allocation-free. A clock that steps backwards records
//! into the current bucket ("no time passed").
//!
//! The window is plain data (serde, `Clone`, `PartialEq`) so hosts can share it
//! across workers; [`Window::merge`] is exact, associative and commutative for
//! windows of the same geometry.

use crate::config::MetricsConfig;
use crate::event::{EventKind, EVENT_KINDS};
use crate::histogram::{Histogram, Percentiles};
use crate::time::{ms_to_ns, Nanos};
use serde::{Deserialize, Serialize};

/// One counter bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterBucket {
    /// `start_time / bucket_ns`.
    pub epoch: u64,
    /// Events per [`EventKind`] index.
    pub counts: [u32; EVENT_KINDS],
    /// Executions at or above the slow-call threshold.
    pub slow: u32,
    /// Highest concurrency observed during the bucket.
    pub max_concurrency: u32,
}

impl CounterBucket {
    fn join(&mut self, other: &Self) {
        if other.epoch > self.epoch {
            *self = *other;
        } else if other.epoch == self.epoch {
            for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
                *a = a.saturating_add(*b);
            }
            self.slow = self.slow.saturating_add(other.slow);
            self.max_concurrency = self.max_concurrency.max(other.max_concurrency);
        }
    }
}

/// One percentile bucket: the latencies of executions that started in it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencyBucket {
    /// `start_time / bucket_ns`.
    pub epoch: u64,
    /// Execution latencies (ns).
    pub latency: Histogram,
}

impl LatencyBucket {
    fn join(&mut self, other: &Self) {
        if other.epoch > self.epoch {
            self.clone_from(other);
        } else if other.epoch == self.epoch {
            self.latency.merge(&other.latency);
        }
    }
}

/// Rolling counts over the health window, as read by the breaker rules.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
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
}

impl HealthSnapshot {
    /// Builds the snapshot from raw counts.
    pub fn from_counts(counts: &[u64; EVENT_KINDS], slow: u64) -> Self {
        let c = |k: EventKind| counts[k.index()];
        let executions = c(EventKind::Success) + c(EventKind::Failure) + c(EventKind::Timeout);
        let errors = c(EventKind::Failure)
            + c(EventKind::Timeout)
            + c(EventKind::SemaphoreRejected)
            + c(EventKind::ThreadPoolRejected);
        let total = c(EventKind::Success) + errors;
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
        }
    }

    /// Live count of one kind.
    pub fn count(&self, kind: EventKind) -> u64 {
        self.counts[kind.index()]
    }
}

/// The rolling health counts a breaker reads and resets: implemented by [`Window`]
/// and by the counters-only [`crate::shared::window::SharedWindow`], so one
/// [`crate::BreakerState`] state machine runs on either.
pub trait Health {
    /// Live counts over the health window at `now`.
    fn health(&mut self, now: Nanos) -> HealthSnapshot;
    /// Forgets the health counts (the breaker closed).
    fn reset_counts(&mut self);
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

/// The rolling window of one command key.
///
/// Serialised without its derived caches; deserialising re-derives them and
/// repairs inconsistent input (zero bucket length, no buckets, totals that do
/// not match the buckets), so decoded bytes can never make it panic.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(from = "WindowData")]
pub struct Window {
    bucket_ns: u64,
    current: u64,
    /// Cached `(current + 1) * bucket_ns` and `current % buckets` (no division on
    /// the hot path); always derived from `current`.
    #[serde(skip)]
    current_end: u64,
    #[serde(skip)]
    current_slot: u32,
    buckets: Vec<CounterBucket>,
    /// Sum of the live buckets other than the current one (live totals = past +
    /// current bucket), so recording touches only the current bucket.
    past: [u64; EVENT_KINDS],
    past_slow: u64,
    /// Counts of expired or reset buckets; cumulative = retired + live totals.
    retired: [u64; EVENT_KINDS],
    latency_bucket_ns: u64,
    latency_current: u64,
    #[serde(skip)]
    latency_end: u64,
    /// `min(current_end, latency_end)`: one comparison guards both rings.
    #[serde(skip)]
    next_roll: u64,
    #[serde(skip)]
    latency_slot: u32,
    latency: Vec<LatencyBucket>,
}

/// The serialised form of [`Window`] (same fields, in order, without caches).
#[derive(Deserialize)]
struct WindowData {
    bucket_ns: u64,
    current: u64,
    buckets: Vec<CounterBucket>,
    past: [u64; EVENT_KINDS],
    past_slow: u64,
    retired: [u64; EVENT_KINDS],
    latency_bucket_ns: u64,
    latency_current: u64,
    latency: Vec<LatencyBucket>,
}

impl From<WindowData> for Window {
    fn from(d: WindowData) -> Self {
        let mut w = Window {
            bucket_ns: d.bucket_ns.max(1),
            current: d.current,
            current_end: 0,
            current_slot: 0,
            buckets: d.buckets,
            past: d.past,
            past_slow: d.past_slow,
            retired: d.retired,
            latency_bucket_ns: d.latency_bucket_ns.max(1),
            latency_current: d.latency_current,
            latency_end: 0,
            next_roll: 0,
            latency_slot: 0,
            latency: d.latency,
        };
        if w.buckets.is_empty() {
            w.buckets.push(CounterBucket::default());
        }
        if w.latency.is_empty() {
            w.latency.push(LatencyBucket::default());
        }
        w.sync_cache();
        let cumulative = w.cumulative();
        w.recompute_totals();
        w.set_cumulative(&cumulative);
        w
    }
}

fn geometry(window_ms: u64, buckets: u32) -> (u64, usize) {
    let n = buckets.max(1) as usize;
    let ns = (ms_to_ns(window_ms) / n as u64).max(1);
    (ns, n)
}

impl Window {
    /// An empty window shaped by `config`, positioned at `now`.
    pub fn new(config: &MetricsConfig, now: Nanos) -> Self {
        let (bucket_ns, n) = geometry(config.rolling_window_ms, config.rolling_buckets);
        let (latency_bucket_ns, ln) =
            geometry(config.percentile_window_ms, config.percentile_buckets);
        let mut w = Self {
            bucket_ns,
            current: now / bucket_ns,
            current_end: 0,
            current_slot: 0,
            buckets: vec![CounterBucket::default(); n],
            past: [0; EVENT_KINDS],
            past_slow: 0,
            retired: [0; EVENT_KINDS],
            latency_bucket_ns,
            latency_current: now / latency_bucket_ns,
            latency_end: 0,
            next_roll: 0,
            latency_slot: 0,
            latency: vec![LatencyBucket::default(); ln],
        };
        w.sync();
        w
    }

    /// Recomputes the cached bucket bounds and slots, and stamps the current slots.
    fn sync(&mut self) {
        self.sync_cache();
        self.stamp_current();
    }

    /// Recomputes the cached bucket bounds and slots from the current epochs.
    fn sync_cache(&mut self) {
        self.current_end = (self.current.saturating_add(1)).saturating_mul(self.bucket_ns);
        self.current_slot = (self.current % self.buckets.len().max(1) as u64) as u32;
        self.latency_end =
            (self.latency_current.saturating_add(1)).saturating_mul(self.latency_bucket_ns);
        self.latency_slot = (self.latency_current % self.latency.len().max(1) as u64) as u32;
        self.next_roll = self.current_end.min(self.latency_end);
    }

    fn stamp_current(&mut self) {
        // Invariant: the current slots carry the current epochs (so the hot path
        // never stores an epoch). A slot with another epoch is stale: reset it.
        if let Some(b) = self.buckets.get_mut(self.current_slot as usize) {
            if b.epoch != self.current {
                for (r, c) in self.retired.iter_mut().zip(&b.counts) {
                    *r = r.saturating_add(u64::from(*c));
                }
                *b = CounterBucket {
                    epoch: self.current,
                    ..CounterBucket::default()
                };
            }
        }
        if let Some(b) = self.latency.get_mut(self.latency_slot as usize) {
            if b.epoch != self.latency_current {
                *b = LatencyBucket {
                    epoch: self.latency_current,
                    ..LatencyBucket::default()
                };
            }
        }
    }

    /// Counter-bucket length in nanoseconds.
    pub fn bucket_ns(&self) -> u64 {
        self.bucket_ns
    }

    /// Highest counter epoch seen.
    pub fn current_epoch(&self) -> u64 {
        self.current
    }

    /// The counter buckets (ring order, slot = epoch % len).
    pub fn buckets(&self) -> &[CounterBucket] {
        &self.buckets
    }

    /// The latency buckets (ring order, slot = epoch % len).
    pub fn latency_buckets(&self) -> &[LatencyBucket] {
        &self.latency
    }

    /// The current bucket (its slot always carries the current epoch).
    #[inline(always)]
    fn current_bucket(&self) -> Option<&CounterBucket> {
        self.buckets.get(self.current_slot as usize)
    }

    /// Live totals: past buckets plus the current one. O(event kinds).
    #[inline]
    fn totals(&self) -> ([u64; EVENT_KINDS], u64) {
        let mut t = self.past;
        let mut slow = self.past_slow;
        if let Some(b) = self.current_bucket() {
            for (t, c) in t.iter_mut().zip(&b.counts) {
                *t = t.wrapping_add(u64::from(*c));
            }
            slow = slow.wrapping_add(u64::from(b.slow));
        }
        (t, slow)
    }

    /// Counts since the window was created (never reset), per [`EventKind`] index.
    pub fn cumulative(&self) -> [u64; EVENT_KINDS] {
        let mut c = self.retired;
        for (c, t) in c.iter_mut().zip(self.totals().0.iter()) {
            *c = c.saturating_add(*t);
        }
        c
    }

    /// Sets `retired` so that the cumulative counts equal `cumulative`.
    fn set_cumulative(&mut self, cumulative: &[u64; EVENT_KINDS]) {
        let totals = self.totals().0;
        for ((r, c), t) in self.retired.iter_mut().zip(cumulative).zip(&totals) {
            *r = c.saturating_sub(*t);
        }
    }

    /// Cumulative count of one kind.
    pub fn cumulative_count(&self, kind: EventKind) -> u64 {
        self.cumulative()[kind.index()]
    }

    #[inline(always)]
    fn slot(&self) -> usize {
        self.current_slot as usize
    }

    /// Moves the counter ring forward to `now`, expiring buckets. O(1) amortised;
    /// a single comparison while `now` stays in the current bucket.
    #[inline(always)]
    fn roll(&mut self, now: Nanos) {
        if now >= self.current_end {
            self.roll_slow(now);
        }
    }

    #[cold]
    #[inline(never)]
    fn roll_slow(&mut self, now: Nanos) {
        let e = now / self.bucket_ns;
        if e > self.current {
            self.roll_to(e);
        }
    }

    fn roll_to(&mut self, e: u64) {
        // The current bucket becomes a past one.
        let (past, past_slow) = self.totals();
        self.past = past;
        self.past_slow = past_slow;
        let n = self.buckets.len() as u64;
        let steps = (e - self.current).min(n);
        for ep in (e - steps + 1)..=e {
            let slot = (ep % n) as usize;
            let b = &mut self.buckets[slot];
            for ((t, r), c) in self
                .past
                .iter_mut()
                .zip(self.retired.iter_mut())
                .zip(&b.counts)
            {
                *t = t.saturating_sub(u64::from(*c));
                *r = r.saturating_add(u64::from(*c));
            }
            self.past_slow = self.past_slow.saturating_sub(u64::from(b.slow));
            *b = CounterBucket {
                epoch: ep,
                ..CounterBucket::default()
            };
        }
        self.current = e;
        self.sync();
    }

    #[inline(always)]
    fn roll_latency(&mut self, now: Nanos) {
        if now >= self.latency_end {
            self.roll_latency_slow(now);
        }
    }

    #[cold]
    #[inline(never)]
    fn roll_latency_slow(&mut self, now: Nanos) {
        let e = now / self.latency_bucket_ns;
        if e > self.latency_current {
            let n = self.latency.len() as u64;
            let steps = (e - self.latency_current).min(n);
            for ep in (e - steps + 1)..=e {
                let b = &mut self.latency[(ep % n) as usize];
                b.epoch = ep;
                b.latency.clear();
            }
            self.latency_current = e;
            self.sync();
        }
    }

    /// Counts one event at `now`. O(1), no allocation.
    #[inline(always)]
    pub fn record(&mut self, kind: EventKind, now: Nanos) {
        self.roll(now);
        let slot = self.slot();
        if let Some(b) = self.buckets.get_mut(slot) {
            crate::counter::increment(&mut b.counts[kind.index()]);
        }
    }

    /// Counts one execution outcome with its latency (ns); `slow` marks it for the
    /// slow-call rule. O(1), no allocation.
    #[inline(always)]
    pub fn record_execution(&mut self, kind: EventKind, latency_ns: u64, slow: bool, now: Nanos) {
        self.record_call(kind, latency_ns, slow, 0, now);
    }

    /// [`Window::record_execution`] plus the concurrency the call ran at (for the
    /// rolling maximum), in one bucket access. O(1), no allocation.
    #[inline(always)]
    pub fn record_call(
        &mut self,
        kind: EventKind,
        latency_ns: u64,
        slow: bool,
        concurrency: u32,
        now: Nanos,
    ) {
        if now >= self.next_roll {
            self.roll_both(now);
        }
        let slot = self.slot();
        if let Some(b) = self.buckets.get_mut(slot) {
            crate::counter::increment(&mut b.counts[kind.index()]);
            if concurrency > b.max_concurrency {
                b.max_concurrency = concurrency;
            }
            if slow {
                crate::counter::increment(&mut b.slow);
            }
        }
        if let Some(b) = self.latency.get_mut(self.latency_slot as usize) {
            b.latency.record(latency_ns);
        }
    }

    #[cold]
    #[inline(never)]
    fn roll_both(&mut self, now: Nanos) {
        self.roll(now);
        self.roll_latency(now);
    }

    /// Adds one latency sample (ns) to the percentile window. O(1), no allocation.
    #[inline(always)]
    pub fn record_latency(&mut self, latency_ns: u64, now: Nanos) {
        self.roll_latency(now);
        if let Some(b) = self.latency.get_mut(self.latency_slot as usize) {
            b.latency.record(latency_ns);
        }
    }

    /// Notes the current concurrency for the rolling maximum.
    #[inline]
    pub fn observe_concurrency(&mut self, concurrency: u32, now: Nanos) {
        self.roll(now);
        let slot = self.slot();
        if let Some(b) = self.buckets.get_mut(slot) {
            b.max_concurrency = b.max_concurrency.max(concurrency);
        }
    }

    /// The health counts at `now`. O(1), no allocation.
    #[inline]
    pub fn health(&mut self, now: Nanos) -> HealthSnapshot {
        self.roll(now);
        let (totals, slow) = self.totals();
        HealthSnapshot::from_counts(&totals, slow)
    }

    /// Live count of one kind at `now`. O(1).
    #[inline]
    pub fn rolling_count(&mut self, kind: EventKind, now: Nanos) -> u64 {
        self.roll(now);
        let k = kind.index();
        let current = self.current_bucket().map_or(0, |b| u64::from(b.counts[k]));
        self.past[k].wrapping_add(current)
    }

    /// Highest concurrency seen in the live buckets.
    pub fn rolling_max_concurrency(&mut self, now: Nanos) -> u32 {
        self.roll(now);
        self.buckets
            .iter()
            .map(|b| b.max_concurrency)
            .max()
            .unwrap_or(0)
    }

    /// All live latencies merged into one histogram (no allocation).
    pub fn latency_histogram(&mut self, now: Nanos) -> Histogram {
        self.roll_latency(now);
        let mut h = Histogram::new();
        for b in &self.latency {
            h.merge(&b.latency);
        }
        h
    }

    /// Latency percentiles over the percentile window.
    pub fn percentiles(&mut self, now: Nanos) -> Percentiles {
        self.latency_histogram(now).percentiles()
    }

    /// Clears the live health counters (the breaker does this when it closes).
    /// Cumulative counts and latencies are kept.
    pub fn reset_counts(&mut self) {
        let cumulative = self.cumulative();
        for b in &mut self.buckets {
            let epoch = b.epoch;
            *b = CounterBucket {
                epoch,
                ..CounterBucket::default()
            };
        }
        self.past = [0; EVENT_KINDS];
        self.past_slow = 0;
        self.set_cumulative(&cumulative);
    }

    fn recompute_totals(&mut self) {
        let n = self.buckets.len() as u64;
        let live_from = self.current.saturating_add(1).saturating_sub(n);
        let mut totals = [0u64; EVENT_KINDS];
        let mut slow = 0;
        for b in &mut self.buckets {
            if b.epoch < live_from || b.epoch > self.current {
                *b = CounterBucket::default();
                continue;
            }
            if b.epoch == self.current {
                continue;
            }
            for (t, c) in totals.iter_mut().zip(b.counts.iter()) {
                *t = t.wrapping_add(u64::from(*c));
            }
            slow = u64::wrapping_add(slow, u64::from(b.slow));
        }
        self.past = totals;
        self.past_slow = slow;
        self.sync();
        let ln = self.latency.len() as u64;
        let live_from = self.latency_current.saturating_add(1).saturating_sub(ln);
        for b in &mut self.latency {
            if b.epoch < live_from || b.epoch > self.latency_current {
                *b = LatencyBucket::default();
            }
        }
    }

    /// Whether `other` has the same bucket geometry (mergeable slot by slot).
    pub fn same_geometry(&self, other: &Self) -> bool {
        self.bucket_ns == other.bucket_ns
            && self.buckets.len() == other.buckets.len()
            && self.latency_bucket_ns == other.latency_bucket_ns
            && self.latency.len() == other.latency.len()
    }

    /// Adds `other` into `self`, aligned by epoch: buckets of the same epoch add,
    /// the newer epoch replaces an older one in the same slot, and buckets that are
    /// stale for the merged current epoch are dropped. Cumulative counts add.
    /// Exact, associative and commutative for windows of the same geometry; a
    /// window of another geometry is re-bucketed into this one first.
    pub fn merge(&mut self, other: &Self) {
        if !self.same_geometry(other) {
            let mut o = other.clone();
            o.rebucket(
                self.bucket_ns,
                self.buckets.len(),
                self.latency_bucket_ns,
                self.latency.len(),
            );
            self.merge(&o);
            return;
        }
        let mut cumulative = self.cumulative();
        for (a, b) in cumulative.iter_mut().zip(other.cumulative().iter()) {
            *a = a.saturating_add(*b);
        }
        self.current = self.current.max(other.current);
        self.latency_current = self.latency_current.max(other.latency_current);
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            a.join(b);
        }
        for (a, b) in self.latency.iter_mut().zip(other.latency.iter()) {
            a.join(b);
        }
        self.recompute_totals();
        self.set_cumulative(&cumulative);
    }

    /// Applies a new metrics config, keeping counts: live buckets are re-bucketed
    /// by their start time into the new geometry.
    pub fn reconfigure(&mut self, config: &MetricsConfig) {
        let (bns, n) = geometry(config.rolling_window_ms, config.rolling_buckets);
        let (lns, ln) = geometry(config.percentile_window_ms, config.percentile_buckets);
        if bns != self.bucket_ns
            || n != self.buckets.len()
            || lns != self.latency_bucket_ns
            || ln != self.latency.len()
        {
            self.rebucket(bns, n, lns, ln);
        }
    }

    fn rebucket(&mut self, bns: u64, n: usize, lns: u64, ln: usize) {
        let cumulative = self.cumulative();
        let old_n = self.buckets.len() as u64;
        let live_from = self.current.saturating_add(1).saturating_sub(old_n);
        let start_ns = self.current.saturating_mul(self.bucket_ns);
        let mut buckets = vec![CounterBucket::default(); n];
        let current = start_ns / bns;
        for b in &self.buckets {
            if b.epoch < live_from || b.epoch > self.current {
                continue;
            }
            let mut moved = *b;
            moved.epoch = b.epoch.saturating_mul(self.bucket_ns) / bns;
            if moved.epoch.saturating_add(n as u64) <= current {
                continue;
            }
            buckets[(moved.epoch % n as u64) as usize].join(&moved);
        }
        let old_ln = self.latency.len() as u64;
        let llive_from = self
            .latency_current
            .saturating_add(1)
            .saturating_sub(old_ln);
        let lstart = self.latency_current.saturating_mul(self.latency_bucket_ns);
        let latency_current = lstart / lns;
        let mut latency = vec![LatencyBucket::default(); ln];
        for b in &self.latency {
            if b.epoch < llive_from || b.epoch > self.latency_current {
                continue;
            }
            let mut moved = b.clone();
            moved.epoch = b.epoch.saturating_mul(self.latency_bucket_ns) / lns;
            if moved.epoch.saturating_add(ln as u64) <= latency_current {
                continue;
            }
            latency[(moved.epoch % ln as u64) as usize].join(&moved);
        }
        self.bucket_ns = bns;
        self.current = current;
        self.buckets = buckets;
        self.latency_bucket_ns = lns;
        self.latency_current = latency_current;
        self.latency = latency;
        self.recompute_totals();
        self.set_cumulative(&cumulative);
    }

    /// Bytes this window occupies (inline + heap).
    pub fn memory_bytes(&self) -> usize {
        core::mem::size_of::<Self>()
            + self.buckets.capacity() * core::mem::size_of::<CounterBucket>()
            + self.latency.capacity() * core::mem::size_of::<LatencyBucket>()
    }
}
