//! The process-wide state of one key: breaker phase, probe leases, open schedule and the
//! rolling window, plus the transition logic that runs on it under CAS.
//!
//! Every method is a pure function of the state value, the parameters, `now_ms` and an
//! injected random number, so any worker can decode the shared bytes, apply its change
//! and write them back with the CAS token it read.

use serde::{Deserialize, Serialize};

use super::window::{Counts, SharedWindow};

/// The trip rules, evaluated on the shared window; any enabled rule can open the
/// breaker (the same rules as `crate::config::BreakerConfig`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rules {
    /// Hystrix: total ≥ `volume` and error % ≥ `threshold_pct`.
    pub error_percentage: Option<Threshold>,
    /// gobreaker: this many consecutive errors (failure or timeout).
    pub consecutive_failures: Option<u32>,
    /// resilience4j: total ≥ `volume` and slow % ≥ `threshold_pct`.
    pub slow_call: Option<Threshold>,
    /// A completed call at or over this latency is slow (ms).
    pub slow_call_ms: u64,
    /// Google-SRE adaptive throttling: K (stateless, probabilistic, closed phase only).
    pub adaptive_k: Option<f64>,
}

/// A rate rule: minimum volume and a percentage.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Threshold {
    /// Minimum calls in the window.
    pub volume: u32,
    /// Percentage (0..=100) at or above which the rule fires.
    pub pct: f64,
}

impl Threshold {
    fn fires(&self, part: u64, total: u64) -> bool {
        total > 0 && total >= self.volume as u64 && part as f64 * 100.0 >= self.pct * total as f64
    }
}

/// How long the breaker stays open after its n-th consecutive trip.
#[derive(Clone, Debug, PartialEq)]
pub enum OpenSchedule {
    /// Always `ms`.
    Fixed {
        /// Sleep window.
        ms: u64,
    },
    /// `base_ms · multiplier^(n−1)`, at most `max_ms`.
    Exponential {
        /// First sleep window.
        base_ms: u64,
        /// Growth factor (≥ 1).
        multiplier: f64,
        /// Cap.
        max_ms: u64,
    },
    /// The n-th entry (the last one repeats).
    Ladder {
        /// Sleep windows in order; never empty once validated.
        steps_ms: Vec<u64>,
    },
}

/// Operating mode overrides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Normal breaker.
    Normal,
    /// Reject every call (short-circuit), keep computing.
    ForcedOpen,
    /// Allow every call, keep computing (never trips).
    ForcedClosed,
    /// Metrics only: computes and reports transitions it would make, never rejects.
    MetricsOnly,
    /// No breaker at all.
    Disabled,
}

/// Everything the shared breaker logic needs from a policy's config.
#[derive(Clone, Debug, PartialEq)]
pub struct BreakerParams {
    /// Trip rules.
    pub rules: Rules,
    /// Open duration per trip.
    pub open: OpenSchedule,
    /// ± jitter applied to each open duration, in percent (0..=100).
    pub jitter_pct: u32,
    /// Probes admitted process-wide per half-open generation (≥ 1).
    pub probes: u32,
    /// Successful probes needed to close (1..=probes).
    pub probe_successes: u32,
    /// A probe not finished by then counts as failed (its lease expires).
    pub probe_timeout_ms: u64,
    /// After closing, admitted share rises linearly to 100 % over this (0 = off).
    pub slow_start_ms: u64,
    /// Admitted share (0..=100) right after closing.
    pub slow_start_initial_pct: f64,
    /// Override mode.
    pub mode: Mode,
    /// Window bucket width.
    pub bucket_ms: u32,
    /// Window bucket count.
    pub buckets: usize,
}

/// Breaker phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// Calls flow.
    Closed,
    /// Calls are short-circuited until `open_until_ms`.
    Open,
    /// Probes only.
    HalfOpen,
}

impl Phase {
    /// Gauge value: 0 closed, 1 open, 2 half-open.
    pub fn gauge(self) -> u8 {
        match self {
            Phase::Closed => 0,
            Phase::Open => 1,
            Phase::HalfOpen => 2,
        }
    }
}

/// One probe lease held by some worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeLease {
    /// Lease id (owner id in the high bits, a local counter in the low bits).
    pub id: u64,
    /// The probe counts as failed after this (ms, writer's clock).
    pub deadline_ms: u64,
}

/// Consecutive-error bookkeeping a worker accumulated since its last flush.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Streak {
    /// Whether a success was seen (it resets the shared streak).
    pub reset: bool,
    /// Errors since the last success (or since the last flush if none).
    pub errors: u32,
}

impl Streak {
    /// Records a success.
    #[inline]
    pub fn success(&mut self) {
        self.reset = true;
        self.errors = 0;
    }

    /// Records an error (failure or timeout).
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
    pub fn new(generation: u32, bucket_ms: u32, buckets: usize) -> Self {
        Delta {
            generation,
            window: SharedWindow::new(bucket_ms, buckets),
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
    /// Current phase.
    pub phase: Phase,
    /// Bumped on every phase change.
    pub generation: u32,
    /// When the current phase began (writer's clock).
    pub since_ms: u64,
    /// End of the current open period.
    pub open_until_ms: u64,
    /// Trips since the last successful close (drives the open schedule).
    pub trips: u32,
    /// Last close time, for slow start (0 = never).
    pub closed_at_ms: u64,
    /// Probes handed out in this half-open generation.
    pub probes_issued: u32,
    /// Successful probes in this half-open generation.
    pub probes_succeeded: u32,
    /// Outstanding probe leases.
    pub leases: Vec<ProbeLease>,
    /// Shared consecutive-error count.
    pub consecutive_errors: u32,
    /// The rolling window.
    pub window: SharedWindow,
}

/// Why a call was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reject {
    /// Breaker open (or half-open with every probe handed out, or forced open).
    Open,
    /// Adaptive throttle or slow-start ramp shed it.
    Throttled,
}

/// Outcome of [`KeyState::decide`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Admit; no write needed.
    Allow,
    /// Reject; no write needed.
    Reject(Reject),
    /// A probe lease must be taken (a state change): call [`KeyState::take_probe`]
    /// on a copy and CAS it in.
    Probe,
}

/// A transition, reported so the host can log and count it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// Closed → Open (or half-open → open).
    Opened,
    /// Open → half-open.
    HalfOpened,
    /// Half-open → closed.
    Closed,
}

impl KeyState {
    /// A closed breaker with an empty window.
    pub fn new(p: &BreakerParams, now_ms: u64) -> Self {
        KeyState {
            phase: Phase::Closed,
            generation: 1,
            since_ms: now_ms,
            open_until_ms: 0,
            trips: 0,
            closed_at_ms: 0,
            probes_issued: 0,
            probes_succeeded: 0,
            leases: Vec::new(),
            consecutive_errors: 0,
            window: SharedWindow::new(p.bucket_ms, p.buckets),
        }
    }

    /// Adapts a state written under other parameters: a window of another shape is
    /// replaced by an empty one (the breaker phase is kept). Returns true if changed.
    pub fn conform(&mut self, p: &BreakerParams) -> bool {
        if self.window.has_shape(p.bucket_ms, p.buckets) {
            return false;
        }
        self.window = SharedWindow::new(p.bucket_ms, p.buckets);
        true
    }

    /// Read-only admission check. `rand` is a uniformly random u32 from the host.
    pub fn decide(&self, p: &BreakerParams, now_ms: u64, rand: u32) -> Decision {
        match p.mode {
            Mode::Disabled | Mode::ForcedClosed | Mode::MetricsOnly => return Decision::Allow,
            Mode::ForcedOpen => return Decision::Reject(Reject::Open),
            Mode::Normal => {}
        }
        match self.phase {
            Phase::Closed => {
                if p.slow_start_ms > 0 && self.closed_at_ms > 0 {
                    let elapsed = now_ms.saturating_sub(self.closed_at_ms);
                    if elapsed < p.slow_start_ms {
                        let init = p.slow_start_initial_pct.clamp(0.0, 100.0) * 10.0;
                        let admit =
                            init + (1000.0 - init) * elapsed as f64 / p.slow_start_ms as f64;
                        if shed(1000 - (admit as u32).min(1000), rand) {
                            return Decision::Reject(Reject::Throttled);
                        }
                    }
                }
                if let Some(k) = p.rules.adaptive_k {
                    let c = self.window.snapshot(now_ms);
                    if shed(adaptive_reject_permille(&c, k), rand.rotate_left(16)) {
                        return Decision::Reject(Reject::Throttled);
                    }
                }
                Decision::Allow
            }
            Phase::Open => {
                if now_ms >= self.open_until_ms {
                    Decision::Probe
                } else {
                    Decision::Reject(Reject::Open)
                }
            }
            Phase::HalfOpen => {
                if self.probes_issued < p.probes.max(1) {
                    Decision::Probe
                } else if self.lease_expired(now_ms) {
                    // Handled as a probe failure by `expire`; the caller writes it.
                    Decision::Probe
                } else {
                    Decision::Reject(Reject::Open)
                }
            }
        }
    }

    fn lease_expired(&self, now_ms: u64) -> bool {
        self.leases.iter().any(|l| now_ms >= l.deadline_ms)
    }

    /// Takes a probe lease with id `lease_id` if one is available (moving Open →
    /// half-open when the sleep window has passed). Returns the generation the probe
    /// belongs to, or None if no probe is available now (the caller rejects).
    /// `transition` reports a phase change.
    pub fn take_probe(
        &mut self,
        p: &BreakerParams,
        now_ms: u64,
        lease_id: u64,
        rand: u32,
        transition: &mut Option<Transition>,
    ) -> Option<u32> {
        if p.mode != Mode::Normal {
            return None;
        }
        if let Some(t) = self.expire(p, now_ms, rand) {
            *transition = Some(t);
        }
        if self.phase == Phase::Open && now_ms >= self.open_until_ms {
            self.enter(Phase::HalfOpen, now_ms);
            *transition = Some(Transition::HalfOpened);
        }
        if self.phase != Phase::HalfOpen || self.probes_issued >= p.probes.max(1) {
            return None;
        }
        self.probes_issued += 1;
        self.leases.push(ProbeLease {
            id: lease_id,
            deadline_ms: now_ms.saturating_add(p.probe_timeout_ms.max(1)),
        });
        Some(self.generation)
    }

    /// Expired probe leases count as failed probes: half-open → open. Returns the
    /// transition if any.
    pub fn expire(&mut self, p: &BreakerParams, now_ms: u64, rand: u32) -> Option<Transition> {
        if self.phase == Phase::HalfOpen && self.lease_expired(now_ms) {
            self.trip(p, now_ms, rand);
            return Some(Transition::Opened);
        }
        None
    }

    /// Reports a probe's result. Ignored unless `generation` is current and the lease
    /// is still held. Returns the transition if any.
    pub fn probe_result(
        &mut self,
        p: &BreakerParams,
        generation: u32,
        lease_id: u64,
        success: bool,
        now_ms: u64,
        rand: u32,
    ) -> Option<Transition> {
        if generation != self.generation || self.phase != Phase::HalfOpen {
            return None;
        }
        let i = self.leases.iter().position(|l| l.id == lease_id)?;
        self.leases.swap_remove(i);
        if !success {
            self.trip(p, now_ms, rand);
            return Some(Transition::Opened);
        }
        self.probes_succeeded += 1;
        if self.probes_succeeded >= p.probe_successes.clamp(1, p.probes.max(1)) {
            self.enter(Phase::Closed, now_ms);
            self.trips = 0;
            self.closed_at_ms = now_ms.max(1);
            self.consecutive_errors = 0;
            self.window.clear();
            return Some(Transition::Closed);
        }
        None
    }

    /// Releases a probe lease without a verdict (e.g. the caller's own fallback or a
    /// bad request): the slot becomes available to another probe.
    pub fn probe_abandon(&mut self, generation: u32, lease_id: u64) -> bool {
        if generation != self.generation || self.phase != Phase::HalfOpen {
            return false;
        }
        match self.leases.iter().position(|l| l.id == lease_id) {
            Some(i) => {
                self.leases.swap_remove(i);
                self.probes_issued = self.probes_issued.saturating_sub(1);
                true
            }
            None => false,
        }
    }

    /// Folds a worker's delta in and evaluates the trip rule. A delta from another
    /// generation or of another window shape is dropped. Returns the transition if any.
    pub fn merge_delta(
        &mut self,
        p: &BreakerParams,
        delta: &Delta,
        now_ms: u64,
        rand: u32,
    ) -> Option<Transition> {
        if delta.generation != self.generation {
            return None;
        }
        if !self.window.merge(&delta.window) {
            return None;
        }
        self.consecutive_errors = delta.streak.apply(self.consecutive_errors);
        self.evaluate(p, now_ms, rand)
    }

    /// Applies the trip rule to the current window (closed phase only).
    pub fn evaluate(&mut self, p: &BreakerParams, now_ms: u64, rand: u32) -> Option<Transition> {
        if self.phase != Phase::Closed || !matches!(p.mode, Mode::Normal | Mode::MetricsOnly) {
            return None;
        }
        if !self.should_trip(p, now_ms) {
            return None;
        }
        self.trip(p, now_ms, rand);
        Some(Transition::Opened)
    }

    /// Whether the trip rule fires on the current window.
    pub fn should_trip(&self, p: &BreakerParams, now_ms: u64) -> bool {
        let r = &p.rules;
        if let Some(n) = r.consecutive_failures {
            if self.consecutive_errors >= n.max(1) {
                return true;
            }
        }
        if r.error_percentage.is_none() && r.slow_call.is_none() {
            return false;
        }
        let c = self.window.snapshot(now_ms);
        r.error_percentage
            .is_some_and(|t| t.fires(c.errors(), c.total()))
            || r.slow_call
                .is_some_and(|t| t.fires(c.slow as u64, c.total()))
    }

    fn trip(&mut self, p: &BreakerParams, now_ms: u64, rand: u32) {
        self.trips = self.trips.saturating_add(1);
        let base = open_ms(&p.open, self.trips);
        let jitter = base * p.jitter_pct.min(100) as u64 / 100;
        // rand maps to [-jitter, +jitter].
        let offset = if jitter == 0 {
            0
        } else {
            (rand as u64 % (2 * jitter + 1)) as i128 - jitter as i128
        };
        let dur = (base as i128 + offset).max(1) as u64;
        self.enter(Phase::Open, now_ms);
        self.open_until_ms = now_ms.saturating_add(dur);
        self.consecutive_errors = 0;
    }

    fn enter(&mut self, phase: Phase, now_ms: u64) {
        self.phase = phase;
        self.generation = self.generation.wrapping_add(1).max(1);
        self.since_ms = now_ms;
        self.probes_issued = 0;
        self.probes_succeeded = 0;
        self.leases.clear();
    }

    /// Window snapshot at `now_ms`.
    pub fn snapshot(&self, now_ms: u64) -> Counts {
        self.window.snapshot(now_ms)
    }
}

/// Open duration for the `n`-th consecutive trip (n ≥ 1).
pub fn open_ms(s: &OpenSchedule, n: u32) -> u64 {
    match s {
        OpenSchedule::Fixed { ms } => *ms,
        OpenSchedule::Exponential {
            base_ms,
            multiplier,
            max_ms,
        } => {
            let exp = n.saturating_sub(1).min(64) as i32;
            let ms = *base_ms as f64 * multiplier.max(1.0).powi(exp);
            if ms.is_finite() && ms < *max_ms as f64 {
                ms as u64
            } else {
                *max_ms
            }
        }
        OpenSchedule::Ladder { steps_ms } => {
            let i = (n.saturating_sub(1) as usize).min(steps_ms.len().saturating_sub(1));
            steps_ms.get(i).copied().unwrap_or(5000)
        }
    }
}

/// SRE adaptive throttle: rejection probability in permille.
pub fn adaptive_reject_permille(c: &Counts, k: f64) -> u32 {
    let requests = c.total() as f64;
    let accepts = c.success as f64;
    let p = (requests - k * accepts) / (requests + 1.0);
    if p > 0.0 {
        (p * 1000.0).min(1000.0) as u32
    } else {
        0
    }
}

/// True with probability `permille`/1000 given a uniform `rand`.
#[inline]
pub fn shed(permille: u32, rand: u32) -> bool {
    permille > 0 && (rand % 1000) < permille
}
