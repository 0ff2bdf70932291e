//! The process-wide state of one key: the core's breaker state machine
//! ([`BreakerState`]) on a counters-only [`SharedWindow`], plus what a worker
//! accumulates between writes ([`Delta`]).
//!
//! Every method is a pure function of the state value, the parameters, `now` (host
//! time, ns) and an injected random `u64`, so any worker can decode the shared bytes,
//! run the core logic (admission, probes, trip rules, open schedule with jitter,
//! slow start, adaptive throttle, modes) and write them back with the CAS token it
//! read. Probe leases are the core's: a permit's generation and probe slot identify
//! the lease process-wide.

use serde::{Deserialize, Serialize};

use super::window::{Counts, SharedWindow, MAX_BUCKETS};
use crate::breaker::{BreakerState, Outcome, Permit};
use crate::config::{BreakerConfig, Config};
use crate::time::{ms_to_ns, Nanos};
use crate::{Phase, Rejection, Transition};

/// A core [`Permit`]'s raw parts (generation, probe slot, start), as
/// [`Permit::into_raw`] gives them: the form a permit takes across workers.
pub type RawPermit = (u32, u8, Nanos);

/// What the shared breaker logic runs with: the core breaker config and the shape of
/// the counters-only window.
#[derive(Clone, Debug, PartialEq)]
pub struct BreakerParams {
    /// The core breaker config (rules, open schedule, half-open, slow start, mode).
    pub breaker: BreakerConfig,
    /// Window bucket width (ns).
    pub bucket_ns: u64,
    /// Window bucket count.
    pub buckets: usize,
}

impl BreakerParams {
    /// The shared-state parameters of a validated config.
    ///
    /// The shared window keeps at most [`MAX_BUCKETS`] buckets: a finer
    /// `metrics.rolling_buckets` is coarsened to that many (same window length).
    pub fn from_config(c: &Config) -> Self {
        let window_ns = ms_to_ns(c.metrics.rolling_window_ms).max(1);
        let buckets = (c.metrics.rolling_buckets.max(1) as usize).min(MAX_BUCKETS);
        BreakerParams {
            breaker: c.breaker.clone(),
            bucket_ns: (window_ns / buckets as u64).max(1),
            buckets,
        }
    }
}

/// The consecutive-failure run a worker accumulated since its last flush: its
/// composition is associative, so workers' runs merge into the shared
/// [`BreakerState::consecutive_failures`] under CAS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Streak {
    /// Whether a success or bad request was seen (it resets the shared run).
    pub reset: bool,
    /// Errors since the last success (or since the last flush if none).
    pub errors: u32,
}

impl Streak {
    /// Records a success or a bad request (either ends a run of failures).
    #[inline]
    pub fn success(&mut self) {
        self.reset = true;
        self.errors = 0;
    }

    /// Records a failure or timeout.
    #[inline]
    pub fn error(&mut self) {
        self.errors = self.errors.saturating_add(1);
    }

    /// Applies this streak after `shared` consecutive errors.
    pub fn apply(&self, shared: u32) -> u32 {
        if self.reset {
            self.errors
        } else {
            shared.saturating_add(self.errors)
        }
    }

    /// Composes `self` then `later` (associative, not commutative: order matters).
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

/// What one worker recorded since its last flush.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delta {
    /// Breaker generation the events were admitted under; a delta from another
    /// generation is dropped (results of an earlier generation are ignored).
    pub generation: u32,
    /// Window counts.
    pub window: SharedWindow,
    /// Consecutive-error streak.
    pub streak: Streak,
}

impl Delta {
    /// Empty delta for a window shape and generation.
    pub fn new(generation: u32, bucket_ns: u64, buckets: usize) -> Self {
        Delta {
            generation,
            window: SharedWindow::new(bucket_ns, buckets),
            streak: Streak::default(),
        }
    }

    /// Nothing to flush.
    pub fn is_empty(&self) -> bool {
        self.window.is_clear() && self.streak == Streak::default()
    }

    /// Forgets everything and adopts `generation`.
    pub fn reset(&mut self, generation: u32) {
        self.generation = generation;
        self.window.clear();
        self.streak = Streak::default();
    }
}

/// The shared state of one key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyState {
    /// The core breaker state (phase, generation, open schedule, probe leases,
    /// consecutive failures, slow-start ramp). Stored without a pending transition:
    /// every writer takes it and reports it.
    pub breaker: BreakerState,
    /// The rolling window (counters only).
    pub window: SharedWindow,
}

impl KeyState {
    /// A closed breaker (generation 0) with an empty window.
    pub fn new(p: &BreakerParams) -> Self {
        KeyState {
            breaker: BreakerState::new(),
            window: SharedWindow::new(p.bucket_ns, p.buckets),
        }
    }

    /// Current phase.
    pub fn phase(&self) -> Phase {
        self.breaker.phase()
    }

    /// Adapts a state written under other parameters: a window of another shape is
    /// replaced by an empty one (the breaker phase is kept). Returns true if changed.
    pub fn conform(&mut self, p: &BreakerParams) -> bool {
        if self.window.has_shape(p.bucket_ns, p.buckets) {
            return false;
        }
        self.window = SharedWindow::new(p.bucket_ns, p.buckets);
        true
    }

    /// The core's transitions report themselves by return value; none stays stored.
    fn settle(&mut self, t: Option<Transition>) -> Option<Transition> {
        let _ = self.breaker.take_transition();
        t
    }

    /// Core admission ([`BreakerState::admit`]) on this state: returns the permit's
    /// raw parts (generation, probe slot, start) or the rejection, and the transition
    /// it made (open → half-open, or a hung probe reopening).
    pub fn admit(
        &mut self,
        p: &BreakerParams,
        now: Nanos,
        rand: u64,
    ) -> (Result<RawPermit, Rejection>, Option<Transition>) {
        let generation = self.breaker.generation();
        let r = self.breaker.admit(&p.breaker, &mut self.window, now, rand);
        let r = r.map(Permit::into_raw);
        let t = self.breaker.take_transition();
        let t = t.filter(|_| self.breaker.generation() != generation);
        (r, t)
    }

    /// Core result handling ([`BreakerState::on_result`]) for a permit rebuilt from its
    /// raw parts; the window must already hold the outcome. Returns the transition.
    pub fn on_result(
        &mut self,
        p: &BreakerParams,
        permit: RawPermit,
        outcome: Outcome,
        now: Nanos,
        rand: u64,
    ) -> Option<Transition> {
        let (generation, probe, started_at) = permit;
        let permit = Permit::from_raw(generation, probe, started_at);
        let t = self
            .breaker
            .on_result(&p.breaker, &mut self.window, permit, outcome, now, rand);
        self.settle(t)
    }

    /// Time-driven transitions ([`BreakerState::poll`]): open → half-open, expired
    /// probe leases reopen.
    pub fn poll(&mut self, p: &BreakerParams, now: Nanos, rand: u64) -> Option<Transition> {
        let t = self.breaker.poll(&p.breaker, now, rand);
        self.settle(t)
    }

    /// Folds a worker's delta in (window merge, consecutive-failure run) and evaluates
    /// the core trip rules ([`BreakerState::check_trip`]). A delta from another
    /// generation or of another window shape is dropped. Returns the transition if any.
    pub fn merge_delta(
        &mut self,
        p: &BreakerParams,
        delta: &Delta,
        now: Nanos,
        rand: u64,
    ) -> Option<Transition> {
        if delta.generation != self.breaker.generation() || !self.window.merge(&delta.window) {
            return None;
        }
        let run = delta.streak.apply(self.breaker.consecutive_failures());
        self.breaker.set_consecutive_failures(run);
        let t = self
            .breaker
            .check_trip(&p.breaker, &mut self.window, now, rand);
        self.settle(t)
    }

    /// Whether the state shows trouble (not closed, a failure run, errors or slow
    /// calls in the window): then every outcome is written at once.
    pub fn is_hot(&self, now: Nanos) -> bool {
        let c = self.window.snapshot(now);
        self.breaker.phase() != Phase::Closed
            || self.breaker.consecutive_failures() > 0
            || c.errors() > 0
            || c.slow > 0
    }

    /// Window snapshot at `now`.
    pub fn snapshot(&self, now: Nanos) -> Counts {
        self.window.snapshot(now)
    }
}
