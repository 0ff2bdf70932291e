//! The circuit breaker state machine, as plain data plus pure transition logic.
//!
//! [`BreakerState`] holds everything a breaker must persist (phase, generation,
//! open schedule step, probe leases, slow-start start) and derives serde, so a host
//! can keep it in shared storage and run the same logic under compare-and-swap.
//! Every method takes the config, the rolling window it reads (any [`Health`]:
//! the core's [`crate::Window`] or the shared counters-only window) and the host's
//! `now` (ns) — and, where a decision is random, an injected `rand: u64`.

use crate::config::{BreakerConfig, BreakerMode, OpenConfig, OpenSchedule, MAX_PROBES};
use crate::event::EventKind;
use crate::time::{elapsed, ms_to_ns, unit_f64, Nanos};
use crate::window::{Health, HealthSnapshot};
use serde::{Deserialize, Serialize};

/// Where the breaker is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Calls flow; the trip rules watch the window.
    #[default]
    Closed,
    /// Calls are rejected until the open duration has passed.
    Open,
    /// A limited number of probe calls decide between Closed and Open.
    HalfOpen,
}

impl Phase {
    /// Upper-case name, e.g. `HALF_OPEN`.
    pub const fn name(self) -> &'static str {
        match self {
            Phase::Closed => "CLOSED",
            Phase::Open => "OPEN",
            Phase::HalfOpen => "HALF_OPEN",
        }
    }
}

/// Why a transition happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransitionReason {
    /// Error percentage reached its threshold.
    ErrorPercentage,
    /// Consecutive failures reached their threshold.
    ConsecutiveFailures,
    /// Slow-call rate reached its threshold.
    SlowCallRate,
    /// The open duration passed.
    OpenElapsed,
    /// Enough probes succeeded.
    ProbesSucceeded,
    /// A probe failed (or was slow).
    ProbeFailed,
    /// A probe's lease expired without a result.
    ProbeLeaseExpired,
}

/// One state change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    /// Phase before.
    pub from: Phase,
    /// Phase after.
    pub to: Phase,
    /// Host time of the change.
    pub at: Nanos,
    /// Generation after the change.
    pub generation: u32,
    /// Why.
    pub reason: TransitionReason,
}

/// Why a call was not admitted. Every rejection is recorded as `SHORT_CIRCUITED`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rejection {
    /// Mode is `forced_open`.
    ForcedOpen,
    /// The breaker is open.
    Open,
    /// Half-open and every probe is already out.
    ProbesExhausted,
    /// The adaptive throttle rejected the call.
    Throttled,
    /// The slow-start ramp rejected the call.
    SlowStart,
}

const NO_PROBE: u8 = u8::MAX;

/// Admission to run one call. Hand it back exactly once with the outcome
/// (it is neither `Clone` nor `Copy`).
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a permit must be handed back with the call's outcome"]
pub struct Permit {
    started_at: Nanos,
    /// `generation | probe << 32 | 1 << 63`: two plain words keep the permit cheap
    /// to move, and the never-zero tag lets `Result<Permit, Rejection>` stay 16 bytes.
    tag: core::num::NonZeroU64,
}

impl Permit {
    #[inline(always)]
    const fn new(generation: u32, probe: u8, started_at: Nanos) -> Self {
        let tag = generation as u64 | (probe as u64) << 32 | 1 << 63;
        Self {
            started_at,
            tag: match core::num::NonZeroU64::new(tag) {
                Some(t) => t,
                None => core::num::NonZeroU64::MAX,
            },
        }
    }

    /// Generation the permit was issued in.
    #[inline(always)]
    pub fn generation(&self) -> u32 {
        self.tag.get() as u32
    }

    #[inline(always)]
    fn probe(&self) -> u8 {
        (self.tag.get() >> 32) as u8
    }

    /// Whether this call is a half-open probe.
    pub fn is_probe(&self) -> bool {
        self.probe() != NO_PROBE
    }

    /// Host time the permit was issued.
    pub fn started_at(&self) -> Nanos {
        self.started_at
    }

    /// Raw parts, for hosts that must park a permit across an FFI boundary.
    pub fn into_raw(self) -> (u32, u8, Nanos) {
        (self.generation(), self.probe(), self.started_at)
    }

    /// Rebuilds a permit from [`Permit::into_raw`]. The host must not rebuild the
    /// same permit twice (a stale generation is ignored by the breaker anyway).
    pub fn from_raw(generation: u32, probe: u8, started_at: Nanos) -> Self {
        Self::new(generation, probe, started_at)
    }
}

/// The outcome of an admitted call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// It succeeded.
    Success,
    /// It failed.
    Failure,
    /// It passed its deadline.
    Timeout,
    /// The caller's fault: never an error, never a fallback.
    BadRequest,
    /// Admitted by the breaker, then rejected by a full semaphore bulkhead.
    SemaphoreRejected,
    /// Admitted by the breaker, then rejected by a full pool bulkhead.
    ThreadPoolRejected,
}

impl Outcome {
    /// The event this outcome is counted as.
    pub const fn event(self) -> EventKind {
        match self {
            Outcome::Success => EventKind::Success,
            Outcome::Failure => EventKind::Failure,
            Outcome::Timeout => EventKind::Timeout,
            Outcome::BadRequest => EventKind::BadRequest,
            Outcome::SemaphoreRejected => EventKind::SemaphoreRejected,
            Outcome::ThreadPoolRejected => EventKind::ThreadPoolRejected,
        }
    }

    /// Whether the call actually ran (and so has a meaningful latency).
    pub const fn executed(self) -> bool {
        matches!(
            self,
            Outcome::Success | Outcome::Failure | Outcome::Timeout | Outcome::BadRequest
        )
    }
}

/// A breaker's persistent state. Plain data: serde, `Clone`, `PartialEq`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BreakerState {
    phase: Phase,
    generation: u32,
    opened_at: Nanos,
    open_until: Nanos,
    open_step: u32,
    consecutive_failures: u32,
    /// Probe lease deadlines, 0 = slot free.
    #[serde(with = "leases_serde")]
    probe_leases: [Nanos; MAX_PROBES as usize],
    probes_issued: u32,
    probe_successes: u32,
    /// Start of the slow-start ramp; `None` when no ramp is running.
    ramp_started_at: Option<Nanos>,
    /// Calls the breaker would have rejected in `metrics_only` mode.
    shadow_rejections: u64,
    last_transition: Option<Transition>,
}

/// Probe leases on the wire: only the prefix up to the last held lease, as a
/// length-prefixed sequence (one byte when no probe is out, and a loop rather than
/// sixteen unrolled fields in the decoder).
mod leases_serde {
    use super::{Nanos, MAX_PROBES};
    use serde::de::{Error, SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};

    const N: usize = MAX_PROBES as usize;

    pub fn serialize<S: Serializer>(leases: &[Nanos; N], s: S) -> Result<S::Ok, S::Error> {
        let used = leases.iter().rposition(|&d| d != 0).map_or(0, |i| i + 1);
        s.collect_seq(leases.iter().take(used))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[Nanos; N], D::Error> {
        struct Leases;
        impl<'de> Visitor<'de> for Leases {
            type Value = [Nanos; N];

            fn expecting(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(f, "at most {N} probe lease deadlines")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = [0; N];
                let mut i = 0;
                while let Some(deadline) = seq.next_element::<Nanos>()? {
                    let Some(slot) = out.get_mut(i) else {
                        return Err(A::Error::invalid_length(i + 1, &self));
                    };
                    *slot = deadline;
                    i += 1;
                }
                Ok(out)
            }
        }
        d.deserialize_seq(Leases)
    }
}

impl Default for BreakerState {
    fn default() -> Self {
        Self::new()
    }
}

/// Open duration for the `step`-th trip in a row, with jitter from `rand`.
pub fn open_duration_ns(cfg: &OpenConfig, step: u32, rand: u64) -> Nanos {
    let base_ms = match cfg.schedule {
        OpenSchedule::Fixed => cfg.sleep_window_ms as f64,
        OpenSchedule::Exponential => {
            let grown = cfg.sleep_window_ms as f64 * cfg.multiplier.powi(step.min(1024) as i32);
            grown.min(cfg.max_ms as f64)
        }
        OpenSchedule::Ladder => {
            let last = cfg.ladder_ms.len().saturating_sub(1);
            let i = (step as usize).min(last);
            cfg.ladder_ms.get(i).copied().unwrap_or(cfg.sleep_window_ms) as f64
        }
    };
    let j = cfg.jitter_percentage / 100.0;
    let factor = 1.0 + j * (2.0 * unit_f64(rand) - 1.0);
    let ms = (base_ms * factor).max(0.0);
    (ms * 1_000_000.0).min(u64::MAX as f64 / 2.0) as Nanos
}

/// The trip rule that fires in the closed phase, given the consecutive-failure run
/// and the rolling health counts; `None` when none does. Pure: any host can evaluate
/// it on any window that yields a [`HealthSnapshot`] (the core's [`crate::Window`] or the
/// counters-only window of [`crate::shared`]).
pub fn trip_reason(
    cfg: &BreakerConfig,
    consecutive_failures: u32,
    h: &HealthSnapshot,
) -> Option<TransitionReason> {
    if cfg.consecutive_failures.enabled
        && consecutive_failures >= cfg.consecutive_failures.threshold
    {
        return Some(TransitionReason::ConsecutiveFailures);
    }
    let ep = &cfg.error_percentage;
    if ep.enabled
        && h.total >= u64::from(ep.request_volume_threshold)
        && h.total > 0
        && h.error_percentage >= ep.threshold_percentage
    {
        return Some(TransitionReason::ErrorPercentage);
    }
    let sc = &cfg.slow_call;
    if sc.enabled
        && h.executions >= u64::from(sc.request_volume_threshold)
        && h.executions > 0
        && h.slow as f64 * 100.0 / h.executions as f64 >= sc.rate_threshold_percentage
    {
        return Some(TransitionReason::SlowCallRate);
    }
    None
}

/// Closed-phase admission: the slow-start ramp (started at `*ramp_started_at`,
/// cleared once over), then the adaptive throttle on the counts `health()` returns
/// (read only when the throttle is on). Both draw from `rand`.
pub fn admit_closed(
    cfg: &BreakerConfig,
    ramp_started_at: &mut Option<Nanos>,
    now: Nanos,
    health: impl FnOnce() -> HealthSnapshot,
    rand: u64,
) -> Result<(), Rejection> {
    if let Some(start) = *ramp_started_at {
        let ramp = ms_to_ns(cfg.slow_start.ramp_ms);
        let e = elapsed(now, start);
        if ramp == 0 || e >= ramp {
            *ramp_started_at = None;
        } else {
            let init = cfg.slow_start.initial_percentage;
            let share = init + (100.0 - init) * (e as f64 / ramp as f64);
            if unit_f64(rand) * 100.0 >= share {
                return Err(Rejection::SlowStart);
            }
        }
    }
    if cfg.adaptive_throttle.enabled {
        let h = health();
        let accepts = h.count(EventKind::Success) + h.count(EventKind::BadRequest);
        let requests = h.executions + h.count(EventKind::BadRequest);
        let p =
            (requests as f64 - cfg.adaptive_throttle.k * accepts as f64) / (requests as f64 + 1.0);
        // Use bits of `rand` not consumed by the slow-start draw.
        if p > 0.0 && unit_f64(rand.rotate_left(32)) < p {
            return Err(Rejection::Throttled);
        }
    }
    Ok(())
}

/// Whether a probe with this outcome failed (`None`: it never ran, so it gives its
/// turn back). A slow probe is a failed probe.
pub const fn probe_failed(outcome: Outcome, slow: bool) -> Option<bool> {
    match outcome {
        Outcome::Failure | Outcome::Timeout => Some(true),
        Outcome::Success | Outcome::BadRequest => Some(slow),
        Outcome::SemaphoreRejected | Outcome::ThreadPoolRejected => None,
    }
}

impl BreakerState {
    /// A closed breaker, generation 0.
    pub const fn new() -> Self {
        Self {
            phase: Phase::Closed,
            generation: 0,
            opened_at: 0,
            open_until: 0,
            open_step: 0,
            consecutive_failures: 0,
            probe_leases: [0; MAX_PROBES as usize],
            probes_issued: 0,
            probe_successes: 0,
            ramp_started_at: None,
            shadow_rejections: 0,
            last_transition: None,
        }
    }

    /// Current phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Incremented on every transition; results from older generations are ignored.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// When the breaker last opened.
    pub fn opened_at(&self) -> Nanos {
        self.opened_at
    }

    /// When the current open period ends (meaningful while open).
    pub fn open_until(&self) -> Nanos {
        self.open_until
    }

    /// Trips since the last successful close (selects the open-schedule step).
    pub fn open_step(&self) -> u32 {
        self.open_step
    }

    /// Consecutive failures in the closed phase.
    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures
    }

    /// Sets the consecutive-failure run, for hosts that count it elsewhere and merge
    /// (e.g. several workers' runs under CAS); [`BreakerState::check_trip`] reads it.
    pub fn set_consecutive_failures(&mut self, n: u32) {
        self.consecutive_failures = n;
    }

    /// Probe lease deadlines (0 = free).
    pub fn probe_leases(&self) -> &[Nanos] {
        &self.probe_leases
    }

    /// Probes issued in the current half-open phase.
    pub fn probes_issued(&self) -> u32 {
        self.probes_issued
    }

    /// Successful probes in the current half-open phase.
    pub fn probe_successes(&self) -> u32 {
        self.probe_successes
    }

    /// Start of the running slow-start ramp.
    pub fn ramp_started_at(&self) -> Option<Nanos> {
        self.ramp_started_at
    }

    /// Calls a `metrics_only` breaker would have rejected.
    pub fn shadow_rejections(&self) -> u64 {
        self.shadow_rejections
    }

    /// The most recent transition.
    pub fn last_transition(&self) -> Option<Transition> {
        self.last_transition
    }

    /// Takes the most recent transition (returns it once).
    pub fn take_transition(&mut self) -> Option<Transition> {
        self.last_transition.take()
    }

    /// The next time `poll` has work: end of the open period or the earliest
    /// probe-lease deadline.
    pub fn next_deadline(&self) -> Option<Nanos> {
        match self.phase {
            Phase::Closed => None,
            Phase::Open => Some(self.open_until),
            Phase::HalfOpen => self.probe_leases.iter().copied().filter(|&d| d != 0).min(),
        }
    }

    fn transition(&mut self, to: Phase, now: Nanos, reason: TransitionReason) -> Transition {
        let t = Transition {
            from: self.phase,
            to,
            at: now,
            generation: self.generation.wrapping_add(1),
            reason,
        };
        self.phase = to;
        self.generation = t.generation;
        self.probe_leases = [0; MAX_PROBES as usize];
        self.probes_issued = 0;
        self.probe_successes = 0;
        self.consecutive_failures = 0;
        self.last_transition = Some(t);
        t
    }

    fn open(
        &mut self,
        cfg: &BreakerConfig,
        now: Nanos,
        rand: u64,
        reason: TransitionReason,
    ) -> Transition {
        let t = self.transition(Phase::Open, now, reason);
        self.opened_at = now;
        self.open_until = now.saturating_add(open_duration_ns(&cfg.open, self.open_step, rand));
        self.open_step = self.open_step.saturating_add(1);
        self.ramp_started_at = None;
        t
    }

    fn close(&mut self, window: &mut impl Health, now: Nanos) -> Transition {
        let t = self.transition(Phase::Closed, now, TransitionReason::ProbesSucceeded);
        self.open_step = 0;
        window.reset_counts();
        self.ramp_started_at = Some(now);
        t
    }

    /// Time-driven transitions: open → half-open when the open period is over,
    /// half-open → open when a probe lease expired. Cheap when closed.
    pub fn poll(&mut self, cfg: &BreakerConfig, now: Nanos, rand: u64) -> Option<Transition> {
        if !Self::state_machine_runs(cfg.mode) {
            return None;
        }
        match self.phase {
            Phase::Closed => None,
            Phase::Open if now >= self.open_until => {
                Some(self.transition(Phase::HalfOpen, now, TransitionReason::OpenElapsed))
            }
            Phase::Open => None,
            Phase::HalfOpen => {
                let expired = self.probe_leases.iter().any(|&d| d != 0 && now >= d);
                expired.then(|| self.open(cfg, now, rand, TransitionReason::ProbeLeaseExpired))
            }
        }
    }

    fn state_machine_runs(mode: BreakerMode) -> bool {
        matches!(mode, BreakerMode::Normal | BreakerMode::MetricsOnly)
    }

    /// Decides whether a call may run at `now`. Rejections are not counted here;
    /// the caller records `SHORT_CIRCUITED` (see [`crate::CircuitBreaker`]).
    #[inline(always)]
    pub fn admit(
        &mut self,
        cfg: &BreakerConfig,
        window: &mut impl Health,
        now: Nanos,
        rand: u64,
    ) -> Result<Permit, Rejection> {
        if cfg.mode == BreakerMode::Normal
            && self.phase == Phase::Closed
            && self.ramp_started_at.is_none()
            && !cfg.adaptive_throttle.enabled
        {
            return Ok(Permit::new(self.generation, NO_PROBE, now));
        }
        self.admit_slow(cfg, window, now, rand)
    }

    #[cold]
    #[inline(never)]
    fn admit_slow(
        &mut self,
        cfg: &BreakerConfig,
        window: &mut impl Health,
        now: Nanos,
        rand: u64,
    ) -> Result<Permit, Rejection> {
        let permit = Permit::new(self.generation, NO_PROBE, now);
        match cfg.mode {
            BreakerMode::Normal => self.decide_slow(cfg, window, now, rand),
            BreakerMode::ForcedOpen => Err(Rejection::ForcedOpen),
            BreakerMode::ForcedClosed | BreakerMode::Disabled => Ok(permit),
            BreakerMode::MetricsOnly => match self.decide_slow(cfg, window, now, rand) {
                Ok(p) => Ok(p),
                Err(_) => {
                    self.shadow_rejections = self.shadow_rejections.saturating_add(1);
                    Ok(Permit::new(self.generation, NO_PROBE, now))
                }
            },
        }
    }

    fn decide_slow(
        &mut self,
        cfg: &BreakerConfig,
        window: &mut impl Health,
        now: Nanos,
        rand: u64,
    ) -> Result<Permit, Rejection> {
        self.poll(cfg, now, rand);
        match self.phase {
            Phase::Open => Err(Rejection::Open),
            Phase::HalfOpen => {
                if self.probes_issued >= cfg.half_open.permitted_probes {
                    return Err(Rejection::ProbesExhausted);
                }
                let Some(slot) = self.probe_leases.iter().position(|&d| d == 0) else {
                    return Err(Rejection::ProbesExhausted);
                };
                let deadline = now
                    .saturating_add(ms_to_ns(cfg.half_open.probe_timeout_ms))
                    .max(1);
                self.probe_leases[slot] = deadline;
                self.probes_issued = self.probes_issued.saturating_add(1);
                Ok(Permit::new(self.generation, slot as u8, now))
            }
            Phase::Closed => {
                admit_closed(
                    cfg,
                    &mut self.ramp_started_at,
                    now,
                    || window.health(now),
                    rand,
                )?;
                Ok(Permit::new(self.generation, NO_PROBE, now))
            }
        }
    }

    /// Applies one call's outcome at `now` (latency = `now - permit.started_at()`).
    /// The window must already hold the outcome (so the rules see it). Results from
    /// an older generation change nothing.
    #[inline(always)]
    pub fn on_result(
        &mut self,
        cfg: &BreakerConfig,
        window: &mut impl Health,
        permit: Permit,
        outcome: Outcome,
        now: Nanos,
        rand: u64,
    ) -> Option<Transition> {
        if outcome == Outcome::Success
            && self.phase == Phase::Closed
            && !cfg.slow_call.enabled
            && permit.generation() == self.generation
        {
            self.consecutive_failures = 0;
            return None;
        }
        self.on_result_slow(cfg, window, permit, outcome, now, rand)
    }

    #[inline(never)]
    fn on_result_slow(
        &mut self,
        cfg: &BreakerConfig,
        window: &mut impl Health,
        permit: Permit,
        outcome: Outcome,
        now: Nanos,
        rand: u64,
    ) -> Option<Transition> {
        if permit.generation() != self.generation || !Self::state_machine_runs(cfg.mode) {
            return None;
        }
        let slow = cfg.slow_call.enabled
            && outcome.executed()
            && elapsed(now, permit.started_at) >= ms_to_ns(cfg.slow_call.duration_threshold_ms);
        match self.phase {
            Phase::Closed => {
                match outcome {
                    Outcome::Success if !slow => {
                        self.consecutive_failures = 0;
                        return None;
                    }
                    Outcome::Success | Outcome::BadRequest => {
                        self.consecutive_failures = 0;
                    }
                    Outcome::Failure | Outcome::Timeout => {
                        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
                    }
                    Outcome::SemaphoreRejected | Outcome::ThreadPoolRejected => {}
                }
                self.check_trip(cfg, window, now, rand)
            }
            Phase::Open => None,
            Phase::HalfOpen => {
                let slot = usize::from(permit.probe());
                if slot >= self.probe_leases.len() || self.probe_leases[slot] == 0 {
                    return None;
                }
                self.probe_leases[slot] = 0;
                let Some(failed) = probe_failed(outcome, slow) else {
                    // The probe never ran: give its turn back.
                    self.probes_issued = self.probes_issued.saturating_sub(1);
                    return None;
                };
                if failed {
                    return Some(self.open(cfg, now, rand, TransitionReason::ProbeFailed));
                }
                self.probe_successes = self.probe_successes.saturating_add(1);
                if self.probe_successes >= cfg.half_open.success_threshold {
                    return Some(self.close(window, now));
                }
                None
            }
        }
    }

    /// Checks the trip rules against the window (closed phase only).
    pub fn check_trip(
        &mut self,
        cfg: &BreakerConfig,
        window: &mut impl Health,
        now: Nanos,
        rand: u64,
    ) -> Option<Transition> {
        if self.phase != Phase::Closed || !Self::state_machine_runs(cfg.mode) {
            return None;
        }
        let h = window.health(now);
        let reason = trip_reason(cfg, self.consecutive_failures, &h)?;
        Some(self.open(cfg, now, rand, reason))
    }
}
