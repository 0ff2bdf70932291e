//! The process-wide state of one key as it lives in the store ([`KeyState`]: the
//! core's breaker state machine on a compact wire window, plus the bulkhead slot
//! ledger), and what one worker accumulates between writes ([`Delta`]).
//!
//! The wire window is the core's one [`Ring`] with a counters-only bucket
//! ([`Counts`]); it is encoded as its live, non-empty buckets only.

use super::codec::{self, put_varint, Reader, Wire};
use super::ledger::SlotLedger;
use super::receipts::Receipts;
use crate::breaker::BreakerState;
use crate::event::{EventKind, Outcome, EVENT_KINDS};
use crate::ring::{geometry, Bucket, Ring, Slot};
use crate::time::{ms_to_ns, Nanos};
use crate::window::{Health, HealthSnapshot};
use crate::Config;

/// Below this many calls in its window a shared key writes its successes at once
/// ([`KeyState::write_rules`]).
pub const SPARSE_CALLS: u64 = 20;

/// Outcome counters of one wire bucket: what the breaker rules read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// `SUCCESS`.
    pub success: u32,
    /// `FAILURE`.
    pub failure: u32,
    /// `TIMEOUT`.
    pub timeout: u32,
    /// Bulkhead rejections (`SEMAPHORE_REJECTED` + `THREAD_POOL_REJECTED`): errors.
    pub rejected: u32,
    /// `SHORT_CIRCUITED` (never fed back into health).
    pub short_circuited: u32,
    /// `BAD_REQUEST` (never an error).
    pub bad_request: u32,
    /// Executions at or over the slow-call threshold.
    pub slow: u32,
}

impl Counts {
    /// Adds one event of `kind` (kinds the wire window does not keep are ignored).
    #[inline]
    pub fn add(&mut self, kind: EventKind) {
        let c = match kind {
            EventKind::Success => &mut self.success,
            EventKind::Failure => &mut self.failure,
            EventKind::Timeout => &mut self.timeout,
            EventKind::SemaphoreRejected | EventKind::ThreadPoolRejected => &mut self.rejected,
            EventKind::ShortCircuited => &mut self.short_circuited,
            EventKind::BadRequest => &mut self.bad_request,
            _ => return,
        };
        *c = c.saturating_add(1);
    }

    /// failure + timeout + rejected.
    pub fn errors(&self) -> u64 {
        u64::from(self.failure) + u64::from(self.timeout) + u64::from(self.rejected)
    }

    /// success + the errors: the calls a volume rule counts.
    pub fn calls(&self) -> u64 {
        u64::from(self.success) + self.errors()
    }

    /// The counts as the breaker rules read them.
    pub fn health(&self) -> HealthSnapshot {
        let mut c = [0u64; EVENT_KINDS];
        c[EventKind::Success.index()] = u64::from(self.success);
        c[EventKind::Failure.index()] = u64::from(self.failure);
        c[EventKind::Timeout.index()] = u64::from(self.timeout);
        c[EventKind::SemaphoreRejected.index()] = u64::from(self.rejected);
        c[EventKind::ShortCircuited.index()] = u64::from(self.short_circuited);
        c[EventKind::BadRequest.index()] = u64::from(self.bad_request);
        HealthSnapshot::from_counts(&c, u64::from(self.slow))
    }
}

impl Bucket for Counts {
    fn join(&mut self, o: &Self) {
        self.success = self.success.saturating_add(o.success);
        self.failure = self.failure.saturating_add(o.failure);
        self.timeout = self.timeout.saturating_add(o.timeout);
        self.rejected = self.rejected.saturating_add(o.rejected);
        self.short_circuited = self.short_circuited.saturating_add(o.short_circuited);
        self.bad_request = self.bad_request.saturating_add(o.bad_request);
        self.slow = self.slow.saturating_add(o.slow);
    }

    fn is_empty(&self) -> bool {
        *self == Counts::default()
    }
}

/// The wire window: the core [`Ring`] of [`Counts`]. Merge, epochs and re-bucketing
/// are the ring's.
#[derive(Clone, Debug, PartialEq)]
pub struct WireWindow(pub Ring<Counts>);

/// Encoded as `(width_ns, len: u16, current, [(age: u16, counts)])` with only live,
/// non-empty buckets (age = current − epoch): a quiet window costs a few bytes.
impl Wire for WireWindow {
    fn put(&self, out: &mut Vec<u8>) {
        let r = &self.0;
        let current = r.current_epoch();
        r.width_ns().put(out);
        (r.len() as u16).put(out);
        current.put(out);
        let live = || r.live_at(0).filter(|slot| !slot.bucket.is_empty());
        put_varint(out, live().count() as u64);
        for slot in live() {
            ((current - slot.epoch) as u16).put(out);
            slot.bucket.put(out);
        }
    }

    fn take(r: &mut Reader<'_>) -> Option<Self> {
        let width_ns = u64::take(r)?;
        let len = u16::take(r)?;
        // No writer makes more buckets: more is corruption, not an allocation to make
        // (65 535 slots of a few bytes' input).
        if u32::from(len) > crate::ring::MAX_BUCKETS {
            return None;
        }
        let current = u64::take(r)?;
        // A current bucket that starts past u64::MAX ns: no clock reads that, only a
        // forged write (found by review: one at epoch u64::MAX switched the breaker off
        // for good; the bytes are reset as damaged ones are).
        current.checked_mul(width_ns)?;
        let n = u64::from(len.max(1));
        let mut slots = vec![Slot::<Counts>::default(); n as usize];
        for _ in 0..r.len()? {
            let (age, counts) = <(u16, Counts)>::take(r)?;
            let Some(epoch) = current.checked_sub(u64::from(age)) else {
                continue;
            };
            if let Some(s) = slots.get_mut((epoch % n) as usize) {
                *s = Slot {
                    epoch,
                    bucket: counts,
                };
            }
        }
        Some(WireWindow(Ring::from_parts(width_ns, current, slots)))
    }
}

/// On the wire: the seven counters in declaration order.
impl Wire for Counts {
    fn put(&self, out: &mut Vec<u8>) {
        for c in [
            self.success,
            self.failure,
            self.timeout,
            self.rejected,
            self.short_circuited,
            self.bad_request,
            self.slow,
        ] {
            c.put(out);
        }
    }

    fn take(r: &mut Reader<'_>) -> Option<Self> {
        Some(Counts {
            success: u32::take(r)?,
            failure: u32::take(r)?,
            timeout: u32::take(r)?,
            rejected: u32::take(r)?,
            short_circuited: u32::take(r)?,
            bad_request: u32::take(r)?,
            slow: u32::take(r)?,
        })
    }
}

impl WireWindow {
    /// An empty window shaped like `config`'s health window, at `now`.
    pub fn new(config: &Config, now: Nanos) -> Self {
        let (w, n) = geometry(
            ms_to_ns(config.metrics.rolling_window_ms),
            config.metrics.rolling_buckets,
        );
        WireWindow(Ring::new(w, n, now))
    }

    /// Records one event at `now`. O(1).
    #[inline]
    pub fn record(&mut self, kind: EventKind, now: Nanos) {
        self.0.roll(now, |_| {});
        if let Some(c) = self.0.current_mut() {
            c.add(kind);
        }
    }

    /// Records one slow execution at `now`.
    #[inline]
    pub fn record_slow(&mut self, now: Nanos) {
        self.0.roll(now, |_| {});
        if let Some(c) = self.0.current_mut() {
            c.slow = c.slow.saturating_add(1);
        }
    }

    /// Sum of the buckets live at `now`. O(buckets), no allocation.
    pub fn counts_at(&self, now: Nanos) -> Counts {
        let mut sum = Counts::default();
        for s in self.0.live_at(now) {
            sum.join(&s.bucket);
        }
        sum
    }
}

impl Health for WireWindow {
    fn health(&mut self, now: Nanos) -> HealthSnapshot {
        self.0.roll(now, |_| {});
        self.counts_at(now).health()
    }

    fn reset_counts(&mut self) {
        self.0.clear();
    }
}

/// The consecutive-failure run a worker accumulated since its last flush. Its
/// composition is associative, so workers' runs merge into the shared run under CAS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Streak {
    /// Whether a success or bad request was seen (it resets the shared run).
    pub reset: bool,
    /// Errors since the last success (or since the last flush if none).
    pub errors: u32,
}

impl Streak {
    /// Records an outcome: an error extends the run, a success or bad request ends it.
    #[inline]
    pub fn record(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Failure | Outcome::Timeout => self.errors = self.errors.saturating_add(1),
            Outcome::Success | Outcome::BadRequest => {
                self.reset = true;
                self.errors = 0;
            }
            Outcome::Cancelled => {}
        }
    }

    /// Applies this streak after `shared` consecutive errors.
    pub fn apply(&self, shared: u32) -> u32 {
        if self.reset {
            self.errors
        } else {
            shared.saturating_add(self.errors)
        }
    }

    /// Composes `self` then `later` (associative, not commutative).
    pub fn then(&self, later: &Streak) -> Streak {
        if later.reset {
            *later
        } else {
            Streak {
                reset: self.reset,
                errors: self.errors.saturating_add(later.errors),
            }
        }
    }
}

/// What one worker recorded since its last successful write.
#[derive(Clone, Debug, PartialEq)]
pub struct Delta {
    /// Breaker generation the outcomes were admitted under. Counts of an earlier
    /// generation ride along ([`Delta::carry`]): merged, they never move the breaker.
    pub generation: u32,
    /// Window counts.
    pub window: WireWindow,
    /// Consecutive-error streak.
    pub streak: Streak,
    /// What the outcomes of `generation` hold ([`Delta::may_trip`] and the rest):
    /// counts carried from an earlier generation are not in it.
    moves: u8,
}

const ERROR: u8 = 1;
const TRIPS: u8 = 2;
const SUCCESS: u8 = 4;

impl Delta {
    /// An empty delta for `config`'s window shape.
    pub fn new(config: &Config, generation: u32, now: Nanos) -> Self {
        Delta {
            generation,
            window: WireWindow::new(config, now),
            streak: Streak::default(),
            moves: 0,
        }
    }

    /// Records one event of `generation` at `now`. O(1).
    #[inline]
    pub fn record(&mut self, kind: EventKind, now: Nanos) {
        self.window.record(kind, now);
        self.moves |= match kind {
            EventKind::Success => SUCCESS,
            EventKind::Failure
            | EventKind::Timeout
            | EventKind::SemaphoreRejected
            | EventKind::ThreadPoolRejected => ERROR | TRIPS,
            EventKind::BadRequest => TRIPS,
            _ => 0,
        };
    }

    /// Records one slow execution of `generation` at `now`.
    #[inline]
    pub fn record_slow(&mut self, now: Nanos) {
        self.window.record_slow(now);
        self.moves |= TRIPS;
    }

    /// Nothing to write.
    pub fn is_empty(&self) -> bool {
        self.window.0.is_clear() && self.streak == Streak::default()
    }

    /// Whether it holds an outcome the trip rules react to (a failure, timeout,
    /// bulkhead rejection, bad request or slow call). A delta of plain successes or
    /// short-circuits never trips the breaker, as on a local key, where the rules run
    /// on those outcomes only.
    pub fn may_trip(&self) -> bool {
        self.moves & TRIPS != 0
    }

    /// Whether it holds an error (opossum's rule runs only then: see
    /// [`crate::breaker::trip_reason`]).
    pub fn has_error(&self) -> bool {
        self.moves & ERROR != 0
    }

    /// Whether it holds a success (it adds volume: see
    /// [`crate::breaker::short_of_volume`]).
    pub fn has_success(&self) -> bool {
        self.moves & SUCCESS != 0
    }

    /// Adds `other`'s outcomes (of the same generation) after its own.
    pub fn join(&mut self, other: &Delta) {
        self.window.0.merge(&other.window.0);
        self.streak = self.streak.then(&other.streak);
        self.moves |= other.moves;
    }

    /// Moves on to `generation`, a newer one: the counts stay (an earlier
    /// generation's outcomes are counted, as at merge), the streak and what they
    /// would move go.
    pub fn carry(&mut self, generation: u32) {
        self.generation = generation;
        self.streak = Streak::default();
        self.moves = 0;
    }

    /// Forgets everything and adopts `generation`.
    pub fn reset(&mut self, generation: u32) {
        self.carry(generation);
        self.window.0.clear();
    }
}

/// The stored state of one key.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyState {
    /// The key this slot holds (a slot is taken over only when idle).
    pub name: String,
    /// Last time a worker merged into it (ns): idle slots can be taken over.
    pub touched_at: Nanos,
    /// The core breaker state.
    pub breaker: BreakerState,
    /// The rolling window (counters only).
    pub window: WireWindow,
    /// Bulkhead slots per worker.
    pub ledger: SlotLedger,
    /// Each owner's last write (asynchronous stores only; empty otherwise).
    pub receipts: Receipts,
}

/// On the wire: its fields in declaration order; the receipts only when there are
/// any (so a synchronous store's bytes are those of earlier releases).
impl Wire for KeyState {
    fn put(&self, out: &mut Vec<u8>) {
        self.name.put(out);
        self.touched_at.put(out);
        self.breaker.put(out);
        self.window.put(out);
        self.ledger.put(out);
        if !self.receipts.is_empty() {
            self.receipts.put(out);
        }
    }

    fn take(r: &mut Reader<'_>) -> Option<Self> {
        Some(KeyState {
            name: String::take(r)?,
            touched_at: u64::take(r)?,
            breaker: BreakerState::take(r)?,
            window: WireWindow::take(r)?,
            ledger: SlotLedger::take(r)?,
            // Present only when non-empty: one canonical form, so a trailing byte
            // is still detected as corrupt.
            receipts: if r.is_empty() {
                Receipts::default()
            } else {
                Receipts::take(r).filter(|x| !x.is_empty())?
            },
        })
    }

    fn schema(&self) -> u8 {
        if self.receipts.is_empty() {
            codec::MIN_SCHEMA_VERSION
        } else {
            codec::SCHEMA_VERSION
        }
    }
}

impl KeyState {
    /// A closed breaker with an empty window for `name`.
    pub fn new(name: &str, config: &Config, now: Nanos) -> Self {
        let mut breaker = BreakerState::new();
        breaker.start_warm_up(&config.breaker, now);
        KeyState {
            name: name.to_string(),
            touched_at: now,
            breaker,
            window: WireWindow::new(config, now),
            ledger: SlotLedger::new(),
            receipts: Receipts::default(),
        }
    }

    /// Adapts a state written under another window geometry: the window is
    /// re-bucketed (the core's one rule). Returns true if it changed.
    pub fn conform(&mut self, config: &Config) -> bool {
        let (w, n) = geometry(
            ms_to_ns(config.metrics.rolling_window_ms),
            config.metrics.rolling_buckets,
        );
        if self.window.0.width_ns() == w && self.window.0.len() == n {
            return false;
        }
        self.window.0.rebucket(w, n);
        true
    }

    /// When a worker writes its outcomes, read off the state at `now`: whether it is
    /// **hot** — it shows trouble (not closed, a failure run, errors or slow calls in
    /// the window): every outcome is written at once — and whether its window is
    /// **sparse** — fewer than [`SPARSE_CALLS`] calls, where a few successes held for
    /// the next flush are a large share: successes are written at once too. Held
    /// there, other workers' successes were missing when a worker's failures (written
    /// at once) were judged: a fleet tripped on 3 failures in 10 calls, 7 successes
    /// still waiting (found by review). It costs about that many writes per window.
    #[inline(always)]
    pub fn write_rules(&self, now: Nanos) -> (bool, bool) {
        let c = self.window.counts_at(now);
        let hot = self.breaker.phase() != crate::Phase::Closed
            || self.breaker.consecutive_failures() > 0
            || c.errors() > 0
            || c.slow > 0;
        (hot, c.calls() < SPARSE_CALLS)
    }
}

#[cfg(test)]
mod tests {
    use super::codec::{put_varint, Reader, Wire};
    use super::WireWindow;

    /// A window claiming more buckets than any writer makes is refused before its
    /// slots are allocated (found by review: 65 535 slots from a 64 KiB value).
    #[test]
    fn a_window_of_more_buckets_than_the_limit_is_corrupt() {
        let bytes = |len: u64| {
            let mut b = Vec::new();
            for v in [1_000_000, len, 7, 0] {
                put_varint(&mut b, v); // width, buckets, current epoch, no slots
            }
            b
        };
        let take = |b: &[u8]| WireWindow::take(&mut Reader::new(b));
        assert_eq!(take(&bytes(1_000)).map(|w| w.0.len()), Some(1_000));
        assert!(take(&bytes(1_001)).is_none());
        assert!(take(&bytes(65_535)).is_none());
    }
}
