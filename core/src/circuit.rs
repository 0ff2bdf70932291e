//! [`CircuitBreaker`]: one command key's breaker state, rolling window and config,
//! with the host-facing call protocol (admit → run → record).

use crate::breaker::{BreakerState, Outcome, Permit, Phase, Rejection, Transition};
use crate::config::Config;
use crate::event::EventKind;
use crate::histogram::Percentiles;
use crate::time::{ms_to_ns, Nanos};
use crate::window::{HealthSnapshot, Window};
use serde::{Deserialize, Serialize};

/// Everything a dashboard shows for one key, at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Breaker phase.
    pub phase: Phase,
    /// Breaker generation.
    pub generation: u32,
    /// Rolling health counts (health window).
    pub health: HealthSnapshot,
    /// Execution-latency percentiles (percentile window), nanoseconds.
    pub latency: Percentiles,
    /// Highest concurrency in the health window.
    pub rolling_max_concurrency: u32,
    /// Calls admitted and not yet recorded.
    pub in_flight: u32,
    /// Counts since start, per [`EventKind`] index.
    pub cumulative: [u64; crate::event::EVENT_KINDS],
}

/// A command key's breaker and metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct CircuitBreaker {
    config: Config,
    slow_ns: u64,
    state: BreakerState,
    window: Window,
    /// Permits issued and permits handed back (in flight = difference). Two
    /// counters, each only ever incremented, keep admit and record independent.
    admitted: u32,
    completed: u32,
}

impl CircuitBreaker {
    /// A closed breaker with an empty window at `now`. The config should have
    /// passed [`Config::validate`].
    pub fn new(config: Config, now: Nanos) -> Self {
        let window = Window::new(&config.metrics, now);
        Self::from_parts(config, BreakerState::new(), window)
    }

    /// Rebuilds a breaker from stored state (e.g. decoded shared state).
    pub fn from_parts(config: Config, state: BreakerState, window: Window) -> Self {
        let slow_ns = ms_to_ns(config.breaker.slow_call.duration_threshold_ms);
        Self {
            config,
            slow_ns,
            state,
            window,
            admitted: 0,
            completed: 0,
        }
    }

    /// The active config.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The persistent breaker state.
    pub fn state(&self) -> &BreakerState {
        &self.state
    }

    /// Mutable breaker state (for hosts that replace it from shared storage).
    pub fn state_mut(&mut self) -> &mut BreakerState {
        &mut self.state
    }

    /// The rolling window.
    pub fn window(&self) -> &Window {
        &self.window
    }

    /// Mutable rolling window (for hosts that merge shared deltas into it).
    pub fn window_mut(&mut self) -> &mut Window {
        &mut self.window
    }

    /// Current phase (without advancing time; see [`CircuitBreaker::poll`]).
    pub fn phase(&self) -> Phase {
        self.state.phase()
    }

    /// Calls admitted and not yet recorded.
    #[inline(always)]
    pub fn in_flight(&self) -> u32 {
        self.admitted.wrapping_sub(self.completed)
    }

    /// Asks to run one call at `now`. On `Err`, `SHORT_CIRCUITED` has been recorded
    /// and the caller should fall back. O(1), no allocation.
    #[inline(always)]
    pub fn try_acquire(&mut self, now: Nanos, rand: u64) -> Result<Permit, Rejection> {
        match self
            .state
            .admit(&self.config.breaker, &mut self.window, now, rand)
        {
            Ok(p) => {
                self.admitted = self.admitted.wrapping_add(1);
                Ok(p)
            }
            Err(r) => {
                self.window.record(EventKind::ShortCircuited, now);
                Err(r)
            }
        }
    }

    /// Hands back a permit with the call's outcome at `now`; latency is
    /// `now - permit.started_at()`. Returns the transition it caused, if any.
    /// Every result is counted in the window; a result from an earlier generation
    /// (a late answer from before a transition) never moves the breaker.
    /// O(1), no allocation.
    #[inline(always)]
    pub fn record(
        &mut self,
        permit: Permit,
        outcome: Outcome,
        now: Nanos,
        rand: u64,
    ) -> Option<Transition> {
        // The concurrency this call ran at: the peak between two completions is
        // seen by the next completion, so the rolling maximum is exact.
        let concurrency = self.in_flight();
        self.completed = self.completed.wrapping_add(1);
        let latency = now.saturating_sub(permit.started_at());
        let slow = outcome.executed() && latency >= self.slow_ns;
        if outcome.executed() {
            self.window
                .record_call(outcome.event(), latency, slow, concurrency, now);
        } else {
            self.window.record(outcome.event(), now);
        }
        self.state.on_result(
            &self.config.breaker,
            &mut self.window,
            permit,
            outcome,
            now,
            rand,
        )
    }

    /// Counts an event that is not a call outcome (fallback results, cache hits,
    /// collapsed calls, bulkhead rejections of calls that never got a permit).
    /// Rejections count as errors, so this may trip the breaker.
    #[inline]
    pub fn record_event(&mut self, kind: EventKind, now: Nanos, rand: u64) -> Option<Transition> {
        self.window.record(kind, now);
        if matches!(
            kind,
            EventKind::SemaphoreRejected | EventKind::ThreadPoolRejected
        ) {
            return self
                .state
                .check_trip(&self.config.breaker, &mut self.window, now, rand);
        }
        None
    }

    /// Time-driven transitions (open period over, probe lease expired).
    pub fn poll(&mut self, now: Nanos, rand: u64) -> Option<Transition> {
        self.state.poll(&self.config.breaker, now, rand)
    }

    /// When [`CircuitBreaker::poll`] next has work to do.
    pub fn next_deadline(&self) -> Option<Nanos> {
        self.state.next_deadline()
    }

    /// Takes the most recent transition (each is returned once).
    pub fn take_transition(&mut self) -> Option<Transition> {
        self.state.take_transition()
    }

    /// Rolling health counts at `now`. O(1).
    pub fn health(&mut self, now: Nanos) -> HealthSnapshot {
        self.window.health(now)
    }

    /// Latency percentiles over the percentile window.
    pub fn percentiles(&mut self, now: Nanos) -> Percentiles {
        self.window.percentiles(now)
    }

    /// Health, percentiles, concurrency and cumulative counts at `now` (no
    /// allocation; O(buckets × histogram bins) for the percentiles).
    pub fn snapshot(&mut self, now: Nanos) -> Snapshot {
        Snapshot {
            phase: self.state.phase(),
            generation: self.state.generation(),
            health: self.window.health(now),
            latency: self.window.percentiles(now),
            rolling_max_concurrency: self.window.rolling_max_concurrency(now),
            in_flight: self.in_flight(),
            cumulative: self.window.cumulative(),
        }
    }

    /// Highest concurrency in the live buckets.
    pub fn rolling_max_concurrency(&mut self, now: Nanos) -> u32 {
        self.window.rolling_max_concurrency(now)
    }

    /// Applies a new config, keeping counters and state (the window is
    /// re-bucketed when its geometry changes). The config should be validated.
    pub fn reconfigure(&mut self, config: Config) {
        self.window.reconfigure(&config.metrics);
        self.slow_ns = ms_to_ns(config.breaker.slow_call.duration_threshold_ms);
        self.config = config;
    }

    /// Bytes per key: breaker state + window + histograms (inline and heap),
    /// excluding the config.
    pub fn memory_bytes(&self) -> usize {
        core::mem::size_of::<BreakerState>() + self.window.memory_bytes()
    }
}
