//! One key's breaker and metrics: [`Circuit`] (state + window, driven with the
//! policy's config, as the engine keeps it per key) and [`CircuitBreaker`] (a circuit
//! with its own config and in-flight count: the standalone single-key form).

use crate::breaker::{BreakerState, Pass, Phase, ShortCircuit, Transition, NO_PROBE};
use crate::config::Config;
use crate::event::{EventKind, Outcome, EVENT_KINDS};
use crate::histogram::Percentiles;
use crate::time::{ms_to_ns, Nanos};
use crate::window::{Health, HealthSnapshot, Window};

/// Everything a dashboard shows for one key, at one instant (times in ns).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Snapshot {
    /// Breaker phase as reported (`forced_open` reports Open).
    pub phase: Phase,
    /// Whether the breaker rejects calls now: open with its sleep window not over, or
    /// half-open with no probe turn free. (Hystrix's `isOpen()` stays true until a probe
    /// closes the breaker: that is `phase != Closed`.)
    pub rejecting: bool,
    /// Whether a call now would be admitted by the breaker (ignoring the random
    /// throttle and ramp).
    pub would_admit: bool,
    /// Breaker generation.
    pub generation: u32,
    /// Rolling health counts (health window).
    pub health: HealthSnapshot,
    /// Execution-latency percentiles over the percentile window, in nanoseconds.
    pub latency_ns: Percentiles,
    /// Highest concurrency in the health window (at least `in_flight`).
    pub rolling_max_concurrency: u32,
    /// Calls holding a slot (executing).
    pub in_flight: u32,
    /// Calls waiting in the queue.
    pub queued: u32,
    /// Counts since start, per [`EventKind`] index.
    pub cumulative: [u64; EVENT_KINDS],
    /// Calls a `metrics_only` breaker would have rejected.
    pub shadow_rejections: u64,
}

/// A key's breaker state and rolling window. Every method takes the policy's config.
#[derive(Clone, Debug, PartialEq)]
pub struct Circuit {
    /// The breaker state machine.
    pub state: BreakerState,
    /// The rolling window.
    pub window: Window,
}

impl Circuit {
    /// A closed breaker with an empty window at `now`.
    pub fn new(config: &Config, now: Nanos) -> Self {
        let mut state = BreakerState::new();
        state.start_warm_up(&config.breaker, now);
        Circuit {
            state,
            window: Window::new(&config.metrics, now),
        }
    }

    /// Asks to run one call at `now`; on `Err`, `SHORT_CIRCUITED` is recorded. Also
    /// returns the transition admission made (open → half-open, a hung probe
    /// reopening). O(1), no allocation.
    #[inline(always)]
    pub fn admit(
        &mut self,
        config: &Config,
        now: Nanos,
        rand: u64,
    ) -> (Result<Pass, ShortCircuit>, Option<Transition>) {
        let (r, t) = self
            .state
            .admit(&config.breaker, &mut self.window, now, rand);
        if r.is_err() {
            self.window.record(EventKind::ShortCircuited, now);
        }
        (r, t)
    }

    /// Hands back a pass with the call's outcome at `now`; latency is
    /// `now - pass.started_at()`, `load` the key's calls when it ended. A result from
    /// an earlier generation is counted but never moves the breaker; a cancelled call
    /// counts nowhere. O(1), no allocation.
    #[inline(always)]
    pub fn record(
        &mut self,
        config: &Config,
        pass: Pass,
        outcome: Outcome,
        load: Load,
        now: Nanos,
        rand: u64,
    ) -> Option<Transition> {
        self.record_metrics(config, pass.started_at(), outcome, load.in_flight, now);
        if self.window.take_dropped() {
            self.state.check_next_success();
        }
        // The other calls still running or queued count for the `all_calls` denominator.
        let mut window = Running {
            window: &mut self.window,
            running: load.in_flight.saturating_sub(1) + load.queued,
        };
        self.state
            .on_result(&config.breaker, &mut window, pass, outcome, now, rand)
    }

    /// Counts a call's outcome in the window only (the breaker is decided elsewhere,
    /// e.g. by the shared state): metrics, latency, slow count, concurrency.
    #[inline]
    pub fn record_metrics(
        &mut self,
        config: &Config,
        started_at: Nanos,
        outcome: Outcome,
        concurrency: u32,
        now: Nanos,
    ) {
        if let Some(kind) = outcome.event() {
            let latency = now.saturating_sub(started_at);
            let slow = kind != EventKind::BadRequest
                && config.breaker.slow_call.enabled
                && latency >= ms_to_ns(config.breaker.slow_call.duration_threshold_ms);
            self.window
                .record_call(kind, latency, slow, concurrency, now);
        }
    }

    /// Records a bulkhead rejection (`SEMAPHORE_REJECTED` / `THREAD_POOL_REJECTED`):
    /// it counts as an error, so the trip rules run. `running`: calls of the key still
    /// running or queued (the `all_calls` denominator counts them).
    pub fn record_rejection(
        &mut self,
        config: &Config,
        kind: EventKind,
        running: u32,
        now: Nanos,
        rand: u64,
    ) -> Option<Transition> {
        self.window.record(kind, now);
        self.check_trip(config, running, now, rand, true)
    }

    /// Runs the trip rules now (closed phase only). `running`: calls of the key still
    /// running or queued (the `all_calls` denominator counts them); `error`: an error prompted
    /// the check.
    pub fn check_trip(
        &mut self,
        config: &Config,
        running: u32,
        now: Nanos,
        rand: u64,
        error: bool,
    ) -> Option<Transition> {
        let mut window = Running {
            window: &mut self.window,
            running,
        };
        self.state
            .check_trip(&config.breaker, &mut window, now, rand, error)
    }

    /// Counts an event that is not a call outcome (fallback results, cache hits,
    /// collapsed calls). Never moves the breaker.
    #[inline]
    pub fn record_event(&mut self, kind: EventKind, now: Nanos) {
        self.window.record(kind, now);
    }

    /// Time-driven transitions (open period over, probe lease expired).
    pub fn poll(&mut self, config: &Config, now: Nanos, rand: u64) -> Option<Transition> {
        self.state.poll(&config.breaker, now, rand)
    }

    /// Forces the breaker open or closed (an operator's call or restored state).
    pub fn force(
        &mut self,
        config: &Config,
        to: Phase,
        now: Nanos,
        rand: u64,
    ) -> Option<Transition> {
        self.state
            .force(&config.breaker, &mut self.window, to, now, rand)
    }

    /// The snapshot at `now` (no allocation; O(buckets × histogram bins)).
    pub fn snapshot(&self, config: &Config, in_flight: u32, queued: u32, now: Nanos) -> Snapshot {
        let phase = self.state.reported_phase(config.breaker.mode);
        let would_admit = self.state.would_admit(&config.breaker, now);
        Snapshot {
            phase,
            rejecting: !would_admit && phase != Phase::Closed,
            would_admit,
            generation: self.state.generation(),
            health: self.window.health_at(now),
            latency_ns: self.window.percentiles_at(now),
            // Sampled when calls end, so calls still running count here too (Hystrix
            // samples when a call starts: never below the calls executing now).
            rolling_max_concurrency: self.window.rolling_max_concurrency_at(now).max(in_flight),
            in_flight,
            queued,
            cumulative: self.window.cumulative(),
            shadow_rejections: self.state.shadow_rejections(),
        }
    }

    /// Applies a new config, keeping state and counters (re-bucketing the window).
    pub fn reconfigure(&mut self, config: &Config) {
        self.window.reconfigure(&config.metrics);
        // Calls may have left the window, thresholds moved: the next success checks.
        self.state.check_next_success();
    }

    /// Bytes per key: breaker state + window + histograms.
    pub fn memory_bytes(&self) -> usize {
        core::mem::size_of::<BreakerState>() + self.window.memory_bytes()
    }
}

/// A key's calls as one of them ends.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    /// Calls executing, the ending one included (the rolling maximum concurrency).
    pub in_flight: u32,
    /// Calls waiting in the bulkhead's queue (with the other calls executing, the
    /// `all_calls` denominator counts them).
    pub queued: u32,
}

impl Load {
    /// `in_flight` calls executing, none queued.
    pub fn running(in_flight: u32) -> Self {
        Load {
            in_flight,
            queued: 0,
        }
    }
}

/// The window as the trip rules see it with the calls still running (opossum counts
/// a call when it starts, so its error percentage is taken over those too).
struct Running<'a> {
    window: &'a mut Window,
    running: u32,
}

impl Health for Running<'_> {
    #[inline(always)]
    fn health(&mut self, now: Nanos) -> HealthSnapshot {
        let mut h = self.window.health(now);
        h.running = u64::from(self.running);
        h
    }

    #[inline(always)]
    fn reset_counts(&mut self) {
        self.window.reset_counts();
    }
}

/// A single key's breaker with its own config: admit → run → record. Its `now` must
/// not go backwards: pass a monotonic clock (a step back would restart a slow-start
/// ramp or hold an open period longer). [`crate::Engine`] keeps its own monotonic
/// time and takes any clock.
#[derive(Clone, Debug, PartialEq)]
pub struct CircuitBreaker {
    config: Config,
    circuit: Circuit,
    /// Passes issued and handed back (in flight = difference); two counters, each only
    /// ever incremented, keep admit and record independent.
    admitted: u32,
    completed: u32,
    last: Option<Transition>,
    /// Normal mode, no throttle, no slow-call rule: the closed and open fast paths
    /// apply (decided once per config).
    fast: bool,
}

fn fast(config: &Config) -> bool {
    let b = &config.breaker;
    b.mode == crate::config::BreakerMode::Normal
        && !b.adaptive_throttle.enabled
        && !b.slow_call.enabled
}

impl CircuitBreaker {
    /// A closed breaker with an empty window at `now`. The config should have
    /// passed [`Config::validate`].
    pub fn new(config: Config, now: Nanos) -> Self {
        let circuit = Circuit::new(&config, now);
        Self {
            fast: fast(&config),
            config,
            circuit,
            admitted: 0,
            completed: 0,
            last: None,
        }
    }

    fn note(&mut self, t: Option<Transition>) -> Option<Transition> {
        if t.is_some() {
            self.last = t;
        }
        t
    }

    /// Takes the most recent transition (each is returned once), for hosts that
    /// do not look at every return value.
    pub fn take_transition(&mut self) -> Option<Transition> {
        self.last.take()
    }

    /// The rolling window.
    pub fn window(&self) -> &Window {
        &self.circuit.window
    }

    /// The breaker state.
    pub fn state(&self) -> &BreakerState {
        &self.circuit.state
    }

    /// The active config.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The breaker state and window.
    pub fn circuit(&self) -> &Circuit {
        &self.circuit
    }

    /// Current phase (as reported; see [`BreakerState::reported_phase`]).
    pub fn phase(&self) -> Phase {
        self.circuit.state.reported_phase(self.config.breaker.mode)
    }

    /// Calls admitted and not yet recorded.
    #[inline(always)]
    pub fn in_flight(&self) -> u32 {
        self.admitted.wrapping_sub(self.completed)
    }

    /// Asks to run one call at `now`. On `Err`, `SHORT_CIRCUITED` has been recorded
    /// and the caller should fall back. O(1), no allocation.
    #[inline(always)]
    pub fn try_acquire(&mut self, now: Nanos, rand: u64) -> Result<Pass, ShortCircuit> {
        if self.fast {
            let state = &self.circuit.state;
            if state.plain_closed() {
                self.admitted = self.admitted.wrapping_add(1);
                return Ok(Pass::new(state.generation(), NO_PROBE, now));
            }
            if state.plain_open(now) {
                self.circuit.window.record(EventKind::ShortCircuited, now);
                return Err(ShortCircuit::Open);
            }
        }
        self.try_acquire_cold(now, rand)
    }

    #[inline(never)]
    fn try_acquire_cold(&mut self, now: Nanos, rand: u64) -> Result<Pass, ShortCircuit> {
        let (r, t) = self.circuit.admit(&self.config, now, rand);
        self.note(t);
        if r.is_ok() {
            self.admitted = self.admitted.wrapping_add(1);
        }
        r
    }

    /// Hands back a pass with the call's outcome at `now`; returns the transition it
    /// caused. O(1), no allocation.
    #[inline(always)]
    pub fn record(
        &mut self,
        pass: Pass,
        outcome: Outcome,
        now: Nanos,
        rand: u64,
    ) -> Option<Transition> {
        let concurrency = self.in_flight();
        // A pass rebuilt from its raw parts and handed back twice must not take the
        // count below zero (it read u32::MAX: found by review).
        if concurrency != 0 {
            self.completed = self.completed.wrapping_add(1);
        }
        let state = &self.circuit.state;
        if self.fast
            && outcome == Outcome::Success
            && state.phase() == Phase::Closed
            && !state.check_on_success()
            && pass.generation() == state.generation()
        {
            // The closed-phase success: count it, end any failure run; no rule fires
            // unless calls left the window.
            let latency = now.saturating_sub(pass.started_at());
            let w = &mut self.circuit.window;
            w.record_call(EventKind::Success, latency, false, concurrency, now);
            let dropped = w.take_dropped();
            self.circuit.state.clear_failure_run();
            if dropped {
                return self.recheck(concurrency, now, rand);
            }
            return None;
        }
        let t = self.circuit.record(
            &self.config,
            pass,
            outcome,
            Load::running(concurrency),
            now,
            rand,
        );
        self.note(t)
    }

    /// Calls left the window as a success was counted: the rules that successes
    /// check run now.
    #[cold]
    #[inline(never)]
    fn recheck(&mut self, concurrency: u32, now: Nanos, rand: u64) -> Option<Transition> {
        let t = self.circuit.check_trip(
            &self.config,
            concurrency.saturating_sub(1),
            now,
            rand,
            false,
        );
        self.note(t)
    }

    /// Counts an event that is not a call outcome; a bulkhead rejection
    /// (`SEMAPHORE_REJECTED` / `THREAD_POOL_REJECTED`) counts as an error and may trip.
    pub fn record_event(&mut self, kind: EventKind, now: Nanos, rand: u64) -> Option<Transition> {
        let t = match kind {
            EventKind::SemaphoreRejected | EventKind::ThreadPoolRejected => {
                let running = self.in_flight();
                self.circuit
                    .record_rejection(&self.config, kind, running, now, rand)
            }
            _ => {
                self.circuit.record_event(kind, now);
                None
            }
        };
        self.note(t)
    }

    /// Time-driven transitions (open period over, probe lease expired).
    pub fn poll(&mut self, now: Nanos, rand: u64) -> Option<Transition> {
        let t = self.circuit.poll(&self.config, now, rand);
        self.note(t)
    }

    /// When [`CircuitBreaker::poll`] next has work to do.
    pub fn next_deadline(&self) -> Option<Nanos> {
        self.circuit.state.next_deadline(&self.config.breaker)
    }

    /// Rolling health counts at `now`.
    pub fn health(&self, now: Nanos) -> HealthSnapshot {
        self.circuit.window.health_at(now)
    }

    /// Latency percentiles (ns) over the percentile window.
    pub fn percentiles_ns(&self, now: Nanos) -> Percentiles {
        self.circuit.window.percentiles_at(now)
    }

    /// The snapshot at `now`.
    pub fn snapshot(&self, now: Nanos) -> Snapshot {
        self.circuit
            .snapshot(&self.config, self.in_flight(), 0, now)
    }

    /// Applies a new config, keeping counters and state. The config should be
    /// validated.
    pub fn reconfigure(&mut self, config: Config) {
        self.circuit.reconfigure(&config);
        if config.breaker.open != self.config.breaker.open {
            self.circuit.state.reschedule(&config.breaker);
        }
        self.fast = fast(&config);
        self.config = config;
    }

    /// Bytes per key: breaker state + window + histograms (excluding the config).
    pub fn memory_bytes(&self) -> usize {
        self.circuit.memory_bytes()
    }
}
