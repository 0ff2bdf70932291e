//! The circuit breaker state machine, as plain data plus pure transition logic.
//!
//! [`BreakerState`] holds everything a breaker must persist (phase, generation,
//! open schedule step, probe leases, slow-start start) and has a wire encoding, so the
//! shared-state layer can keep it in a host's store and run the same logic under
//! compare-and-swap. Transitions are returned by value, never stored.
//! Every method takes the config, the rolling window it reads (any [`Health`]:
//! the core's [`crate::Window`] or the shared counters-only window) and the host's
//! `now` (ns) — and, where a decision is random, an injected `rand: u64`.

use crate::config::{
    BreakerConfig, BreakerMode, Comparison, Denominator, OpenConfig, OpenSchedule, MAX_PROBES,
};
use crate::event::{EventKind, Outcome};
use crate::shared::codec::{put_varint, Reader, Wire};
use crate::time::{elapsed, ms_to_ns, unit_f64, Nanos};
use crate::window::{Health, HealthSnapshot};

/// Where the breaker is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    /// A host or operator forced it (`open()` / `close()`, restored state).
    Forced,
    /// Another worker made it; this worker saw it in the shared store.
    Observed,
}

impl TransitionReason {
    /// Snake-case name, e.g. `error_percentage`.
    pub const fn name(self) -> &'static str {
        match self {
            TransitionReason::ErrorPercentage => "error_percentage",
            TransitionReason::ConsecutiveFailures => "consecutive_failures",
            TransitionReason::SlowCallRate => "slow_call_rate",
            TransitionReason::OpenElapsed => "open_elapsed",
            TransitionReason::ProbesSucceeded => "probes_succeeded",
            TransitionReason::ProbeFailed => "probe_failed",
            TransitionReason::ProbeLeaseExpired => "probe_lease_expired",
            TransitionReason::Forced => "forced",
            TransitionReason::Observed => "observed",
        }
    }
}

/// One state change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

/// Why the breaker short-circuited a call (recorded as `SHORT_CIRCUITED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShortCircuit {
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

/// The probe slot of a pass that is not a probe.
pub(crate) const NO_PROBE: u8 = u8::MAX;
/// Marks the probe slot of a pass on a lease the store granted (a shared key's), as
/// opposed to one its local breaker issued: only those settle the store's leases.
pub(crate) const LEASED: u8 = 0x80;

/// The breaker's admission of one call: the generation it was admitted in, its probe
/// slot (if it is a half-open probe) and its start time. Hand it back exactly once
/// with the outcome (it is neither `Clone` nor `Copy`).
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a pass must be handed back with the call's outcome"]
pub struct Pass {
    started_at: Nanos,
    /// `generation | probe << 32 | 1 << 63`: two plain words keep the pass cheap
    /// to move, and the never-zero tag lets `Result<Pass, ShortCircuit>` stay 16 bytes.
    tag: core::num::NonZeroU64,
}

/// A [`Pass`]'s raw parts: generation, probe slot (`u8::MAX`: none), start time.
pub type RawPass = (u32, u8, Nanos);

impl Pass {
    #[inline(always)]
    pub(crate) const fn new(generation: u32, probe: u8, started_at: Nanos) -> Self {
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

    /// Raw parts (generation, probe slot, start), to keep a pass in a call table.
    pub fn into_raw(self) -> RawPass {
        (self.generation(), self.probe(), self.started_at)
    }

    /// Rebuilds a pass from [`Pass::into_raw`]. A stale generation is ignored by the
    /// breaker, and a probe slot that holds no lease changes nothing.
    pub fn from_raw(raw: RawPass) -> Self {
        Self::new(raw.0, raw.1, raw.2)
    }

    /// Probe slot, if this pass is a half-open probe.
    pub fn probe_slot(&self) -> Option<u8> {
        self.is_probe().then(|| self.probe())
    }
}

/// A breaker's persistent state. Plain data: `Clone`, `PartialEq`, [`Wire`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BreakerState {
    phase: Phase,
    generation: u32,
    opened_at: Nanos,
    open_until: Nanos,
    open_step: u32,
    consecutive_failures: u32,
    /// Probe lease deadlines, 0 = slot free.
    probe_leases: [Nanos; MAX_PROBES as usize],
    probes_issued: u32,
    probe_successes: u32,
    /// Start of the slow-start ramp; `None` when no ramp is running.
    ramp_started_at: Option<Nanos>,
    /// Calls the breaker would have rejected in `metrics_only` mode.
    shadow_rejections: u64,
    /// End of the warm-up (`breaker.warm_up_ms` after the key was created): no trip
    /// before it. `None` once over, or when there is none.
    warm_until: Option<Nanos>,
    /// The next success runs the trip rules: the last check found errors short of a
    /// volume threshold (see [`short_of_volume`]; a success adds volume), or calls
    /// left the window since (the error rate can rise without an error). Kept by the
    /// replica that runs the rules; not on the wire.
    check_on_success: bool,
}

/// On the wire (postcard's layout, field by field): the probe leases as a
/// length-prefixed sequence up to the last held lease (one byte when no probe is out).
impl Wire for BreakerState {
    fn put(&self, out: &mut Vec<u8>) {
        self.phase.put(out);
        self.generation.put(out);
        self.opened_at.put(out);
        self.open_until.put(out);
        self.open_step.put(out);
        self.consecutive_failures.put(out);
        let used = self
            .probe_leases
            .iter()
            .rposition(|&d| d != 0)
            .map_or(0, |i| i + 1);
        put_varint(out, used as u64);
        for d in &self.probe_leases[..used] {
            d.put(out);
        }
        self.probes_issued.put(out);
        self.probe_successes.put(out);
        self.ramp_started_at.put(out);
        self.shadow_rejections.put(out);
        self.warm_until.put(out);
    }

    fn take(r: &mut Reader<'_>) -> Option<Self> {
        let phase = Phase::take(r)?;
        let generation = u32::take(r)?;
        let opened_at = u64::take(r)?;
        let open_until = u64::take(r)?;
        let open_step = u32::take(r)?;
        let consecutive_failures = u32::take(r)?;
        let mut probe_leases = [0; MAX_PROBES as usize];
        let used = r.len()?;
        for slot in probe_leases.get_mut(..used)? {
            *slot = u64::take(r)?;
        }
        Some(BreakerState {
            phase,
            generation,
            opened_at,
            open_until,
            open_step,
            consecutive_failures,
            probe_leases,
            probes_issued: u32::take(r)?,
            probe_successes: u32::take(r)?,
            ramp_started_at: Wire::take(r)?,
            shadow_rejections: u64::take(r)?,
            warm_until: Wire::take(r)?,
            check_on_success: false,
        })
    }
}

/// On the wire: the variant index.
impl Wire for Phase {
    fn put(&self, out: &mut Vec<u8>) {
        out.push(*self as u8);
    }

    fn take(r: &mut Reader<'_>) -> Option<Self> {
        match r.byte()? {
            0 => Some(Phase::Closed),
            1 => Some(Phase::Open),
            2 => Some(Phase::HalfOpen),
            _ => None,
        }
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
            // Multiplied step by step up to the cap (no `powi` call in the module).
            let max = cfg.max_ms as f64;
            let mut grown = cfg.sleep_window_ms as f64;
            for _ in 0..step.min(1024) {
                if grown >= max {
                    break;
                }
                grown *= cfg.multiplier;
            }
            grown.min(max)
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
/// counters-only window of [`crate::shared`]). A rule needs at least one error (slow
/// call): a 0 % threshold trips on the first, not on none. `error`: an error prompted
/// the check (opossum's `all_calls` rule runs only then, as opossum checks).
pub fn trip_reason(
    cfg: &BreakerConfig,
    consecutive_failures: u32,
    h: &HealthSnapshot,
    error: bool,
) -> Option<TransitionReason> {
    if cfg.consecutive_failures.enabled
        && consecutive_failures >= cfg.consecutive_failures.threshold
    {
        return Some(TransitionReason::ConsecutiveFailures);
    }
    let ep = &cfg.error_percentage;
    if ep.enabled && (error || ep.over_total()) {
        let (calls, pct) = match ep.denominator {
            Denominator::Total => (h.total, h.error_percentage),
            Denominator::AllCalls => {
                let calls = h.calls.saturating_add(h.running);
                // In opossum's order, `failures / fires * 100`, so a rate at the
                // threshold rounds as opossum's does (7 / 100 · 100 is
                // 7.000000000000001: over 7; found by review).
                let pct = if calls == 0 {
                    0.0
                } else {
                    h.errors as f64 / calls as f64 * 100.0
                };
                (calls, pct)
            }
        };
        let reached = match ep.comparison {
            Comparison::AtOrAbove => pct >= ep.threshold_percentage,
            Comparison::Above => pct > ep.threshold_percentage,
        };
        if calls >= u64::from(ep.request_volume_threshold) && h.errors > 0 && reached {
            return Some(TransitionReason::ErrorPercentage);
        }
    }
    let sc = &cfg.slow_call;
    if sc.enabled
        && h.executions >= u64::from(sc.request_volume_threshold)
        && h.slow > 0
        && h.slow as f64 * 100.0 / h.executions as f64 >= sc.rate_threshold_percentage
    {
        return Some(TransitionReason::SlowCallRate);
    }
    None
}

/// Whether a Hystrix-denominator rule (the error percentage over `total`, or the
/// slow-call rate: [`BreakerConfig::volume_rules`]) has errors (slow calls) but fewer
/// calls than its volume threshold: then a success, which adds volume, runs the rules
/// again (Hystrix checks health on every snapshot, resilience4j after every call).
pub fn short_of_volume(cfg: &BreakerConfig, h: &HealthSnapshot) -> bool {
    let (ep, sc) = (&cfg.error_percentage, &cfg.slow_call);
    (ep.over_total() && h.errors > 0 && h.total < u64::from(ep.request_volume_threshold))
        || (sc.enabled && h.slow > 0 && h.executions < u64::from(sc.request_volume_threshold))
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
) -> Result<(), ShortCircuit> {
    if let Some(start) = *ramp_started_at {
        let ramp = ms_to_ns(cfg.slow_start.ramp_ms);
        let e = elapsed(now, start);
        if ramp == 0 || e >= ramp {
            *ramp_started_at = None;
        } else {
            let init = cfg.slow_start.initial_percentage;
            let share = init + (100.0 - init) * (e as f64 / ramp as f64);
            if unit_f64(rand) * 100.0 >= share {
                return Err(ShortCircuit::SlowStart);
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
            return Err(ShortCircuit::Throttled);
        }
    }
    Ok(())
}

/// What a half-open probe's outcome says about the upstream: `Some(true)` failed
/// (reopen), `Some(false)` succeeded (counts towards closing), `None` says nothing —
/// a cancelled call never reached the upstream, and a bad request (e.g. an HTTP 4xx)
/// is the caller's fault — so the probe turn is given back. A slow probe is a failed
/// probe. (Hystrix reopens on any non-success in half-open, bad requests included;
/// fusewire does not let a caller's mistake hold the breaker open.)
pub const fn probe_verdict(outcome: Outcome, slow: bool) -> Option<bool> {
    match outcome {
        Outcome::Failure | Outcome::Timeout => Some(true),
        Outcome::Success => Some(slow),
        Outcome::BadRequest | Outcome::Cancelled => None,
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
            warm_until: None,
            check_on_success: false,
        }
    }

    /// Current phase of the state machine (see [`BreakerState::reported_phase`] for
    /// what a dashboard should show under a forced mode).
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The phase as the outside world sees it: `forced_open` reports Open (as Hystrix's
    /// `isOpen()` does under forceOpen), `forced_closed` and `disabled` report Closed.
    pub fn reported_phase(&self, mode: BreakerMode) -> Phase {
        match mode {
            BreakerMode::ForcedOpen => Phase::Open,
            BreakerMode::ForcedClosed | BreakerMode::Disabled => Phase::Closed,
            BreakerMode::Normal | BreakerMode::MetricsOnly => self.phase,
        }
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
    /// (several workers' runs under CAS); [`BreakerState::check_trip`] reads it.
    pub fn set_consecutive_failures(&mut self, n: u32) {
        self.consecutive_failures = n;
    }

    /// Probe lease deadlines (0 = free).
    pub fn probe_leases(&self) -> &[Nanos] {
        &self.probe_leases
    }

    /// Whether probe slot `slot` holds a lease.
    pub fn lease_held(&self, slot: u8) -> bool {
        self.probe_leases
            .get(usize::from(slot))
            .is_some_and(|&d| d != 0)
    }

    /// Closed with no ramp running: the fast admission path applies.
    #[inline(always)]
    pub(crate) fn plain_closed(&self) -> bool {
        self.phase == Phase::Closed && self.ramp_started_at.is_none()
    }

    /// Open and still within its open period at `now`.
    #[inline(always)]
    pub(crate) fn plain_open(&self, now: Nanos) -> bool {
        self.phase == Phase::Open && now < self.open_until
    }

    /// Whether a success must run the trip rules (see [`short_of_volume`]).
    #[inline(always)]
    pub(crate) fn check_on_success(&self) -> bool {
        self.check_on_success
    }

    /// The next success runs the trip rules: calls left the rolling window (its rate
    /// may have risen with no new error; resilience4j checks after every call, Hystrix
    /// on every health snapshot), the config changed, or the rules last ran on
    /// another replica's window.
    #[inline]
    pub(crate) fn check_next_success(&mut self) {
        self.check_on_success |= self.phase == Phase::Closed;
    }

    /// A new open schedule: an open period runs on it from when it began, as Hystrix
    /// reads its sleep window at each check (found by review: a 5-minute window
    /// shortened to 5 s still held the breaker open 5 minutes). No jitter.
    pub(crate) fn reschedule(&mut self, cfg: &BreakerConfig) {
        if self.phase == Phase::Open {
            let d = open_duration_ns(&cfg.open, self.open_step.saturating_sub(1), 1 << 63);
            self.open_until = self.opened_at.saturating_add(d);
        }
    }

    /// A success in the closed phase ends any failure run.
    #[inline(always)]
    pub(crate) fn clear_failure_run(&mut self) {
        self.consecutive_failures = 0;
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

    /// Starts the warm-up of a new key at `now` (`breaker.warm_up_ms`; 0: none): no
    /// trip rule opens the breaker before it is over.
    pub fn start_warm_up(&mut self, cfg: &BreakerConfig, now: Nanos) {
        self.warm_until =
            (cfg.warm_up_ms > 0).then(|| now.saturating_add(ms_to_ns(cfg.warm_up_ms)));
    }

    /// Whether the warm-up is still running at `now`.
    pub fn warming_up(&self, now: Nanos) -> bool {
        self.warm_until.is_some_and(|until| now < until)
    }

    /// The next time `poll` has work: end of the open period or the earliest
    /// probe-lease deadline; none in a mode that pins the phase (`poll` then does
    /// nothing: found by review, a pinned open key's wake stayed due for good).
    pub fn next_deadline(&self, cfg: &BreakerConfig) -> Option<Nanos> {
        if !cfg.mode.runs_state_machine() {
            return None;
        }
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
        self.check_on_success = false;
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

    fn close(&mut self, cfg: &BreakerConfig, window: &mut dyn Health, now: Nanos) -> Transition {
        let t = self.transition(Phase::Closed, now, TransitionReason::ProbesSucceeded);
        self.open_step = 0;
        if cfg.half_open.reset_window_on_close {
            window.reset_counts();
        }
        self.ramp_started_at = Some(now);
        t
    }

    /// Time-driven transitions: open → half-open when the open period is over,
    /// half-open → open when a probe lease expired. Cheap when closed.
    pub fn poll(&mut self, cfg: &BreakerConfig, now: Nanos, rand: u64) -> Option<Transition> {
        if !cfg.mode.runs_state_machine() {
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

    /// Whether a call at `now` would be admitted, without changing anything and
    /// ignoring the random parts (adaptive throttle, slow-start ramp): Hystrix's
    /// `allowRequest()` as a pure query.
    pub fn would_admit(&self, cfg: &BreakerConfig, now: Nanos) -> bool {
        match cfg.mode {
            BreakerMode::ForcedOpen => false,
            BreakerMode::ForcedClosed | BreakerMode::Disabled | BreakerMode::MetricsOnly => true,
            BreakerMode::Normal => match self.phase {
                Phase::Closed => true,
                Phase::Open => now >= self.open_until,
                Phase::HalfOpen => {
                    let expired = self.probe_leases.iter().any(|&d| d != 0 && now >= d);
                    !expired
                        && self.probes_issued < cfg.half_open.permitted_probes
                        && self.probe_leases.contains(&0)
                }
            },
        }
    }

    /// Decides whether a call may run at `now`, and returns the transition admission
    /// made (open → half-open, or a hung probe reopening), if any. Rejections are not
    /// counted here; the caller records `SHORT_CIRCUITED`.
    #[inline(always)]
    pub fn admit(
        &mut self,
        cfg: &BreakerConfig,
        window: &mut dyn Health,
        now: Nanos,
        rand: u64,
    ) -> (Result<Pass, ShortCircuit>, Option<Transition>) {
        if cfg.mode == BreakerMode::Normal
            && self.phase == Phase::Closed
            && self.ramp_started_at.is_none()
            && !cfg.adaptive_throttle.enabled
        {
            return (Ok(Pass::new(self.generation, NO_PROBE, now)), None);
        }
        self.admit_cold(cfg, window, now, rand)
    }

    #[cold]
    #[inline(never)]
    fn admit_cold(
        &mut self,
        cfg: &BreakerConfig,
        window: &mut dyn Health,
        now: Nanos,
        rand: u64,
    ) -> (Result<Pass, ShortCircuit>, Option<Transition>) {
        match cfg.mode {
            BreakerMode::Normal => self.decide(cfg, window, now, rand),
            BreakerMode::ForcedOpen => (Err(ShortCircuit::ForcedOpen), None),
            BreakerMode::ForcedClosed | BreakerMode::Disabled => {
                (Ok(Pass::new(self.generation, NO_PROBE, now)), None)
            }
            BreakerMode::MetricsOnly => {
                let (r, t) = self.decide(cfg, window, now, rand);
                match r {
                    Ok(p) => (Ok(p), t),
                    Err(_) => {
                        self.shadow_rejections = self.shadow_rejections.saturating_add(1);
                        (Ok(Pass::new(self.generation, NO_PROBE, now)), t)
                    }
                }
            }
        }
    }

    fn decide(
        &mut self,
        cfg: &BreakerConfig,
        window: &mut dyn Health,
        now: Nanos,
        rand: u64,
    ) -> (Result<Pass, ShortCircuit>, Option<Transition>) {
        let t = self.poll(cfg, now, rand);
        let r = match self.phase {
            Phase::Open => Err(ShortCircuit::Open),
            Phase::HalfOpen => self.take_probe(cfg, now),
            Phase::Closed => admit_closed(
                cfg,
                &mut self.ramp_started_at,
                now,
                || window.health(now),
                rand,
            )
            .map(|()| Pass::new(self.generation, NO_PROBE, now)),
        };
        (r, t)
    }

    /// Half-open again under a new generation, no probe out: a state rebuilt from a
    /// worker's view cannot tell which probes still run, and passes of the old
    /// generation must not settle the new leases (found by review).
    pub(crate) fn restart_probes(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        self.probe_leases = [0; MAX_PROBES as usize];
        self.probes_issued = 0;
        self.probe_successes = 0;
    }

    /// Brings in what a state read from a store cannot honestly hold: an open period
    /// or a probe lease ending far past anything `cfg` gives — past four times its
    /// longest, and a minute more than that, room for peers on another config during
    /// a rollout and for their clocks — end there instead (a forged or damaged state,
    /// `open_until` = `u64::MAX`, kept a fleet open for good: found by a security
    /// review); so does a warm-up, and a slow-start ramp starting after now starts
    /// now (a writer's clock an hour ahead kept a fleet from tripping, or throttled it,
    /// for that hour: found by review); probes issued that are neither successes nor
    /// held leases are not out (half-open refused every call for good). Whether it
    /// changed anything.
    #[inline(never)]
    pub(crate) fn bound(&mut self, cfg: &BreakerConfig, now: Nanos) -> bool {
        // Four times `ms` from now, and a minute more than `ms` if that is later.
        let far = |ms: u64| {
            now.saturating_add(ms_to_ns(
                ms.saturating_mul(4).max(ms.saturating_add(60_000)),
            ))
        };
        let mut changed = false;
        let warm = far(cfg.warm_up_ms);
        if self.warm_until.is_some_and(|w| w > warm) {
            self.warm_until = Some(warm);
            changed = true;
        }
        if self.ramp_started_at.is_some_and(|r| r > now) {
            self.ramp_started_at = Some(now);
            changed = true;
        }
        let held = self.probe_leases.iter().filter(|&&d| d != 0).count() as u32;
        let issued = self.probe_successes.saturating_add(held);
        if self.phase == Phase::HalfOpen && self.probes_issued != issued {
            self.probes_issued = issued;
            changed = true;
        }
        let o = &cfg.open;
        let (ms, t) = match self.phase {
            // Jitter lengthens a period by at most its percentage: 4× covers 100 %.
            Phase::Open => (
                match o.schedule {
                    OpenSchedule::Fixed => o.sleep_window_ms,
                    OpenSchedule::Exponential => o.max_ms.max(o.sleep_window_ms),
                    OpenSchedule::Ladder => {
                        o.ladder_ms.iter().fold(o.sleep_window_ms, |a, &b| a.max(b))
                    }
                },
                core::slice::from_mut(&mut self.open_until),
            ),
            Phase::HalfOpen => (cfg.half_open.probe_timeout_ms, &mut self.probe_leases[..]),
            Phase::Closed => return changed,
        };
        let far = far(ms);
        for d in t {
            if *d > far {
                *d = far;
                changed = true;
            }
        }
        changed
    }

    /// Takes one probe lease (half-open only): the shared layer grants leases
    /// through the store with this, so exactly `permitted_probes` are out per
    /// generation process-wide.
    pub(crate) fn take_probe(
        &mut self,
        cfg: &BreakerConfig,
        now: Nanos,
    ) -> Result<Pass, ShortCircuit> {
        if self.phase != Phase::HalfOpen {
            return Err(ShortCircuit::Open);
        }
        if self.probes_issued >= cfg.half_open.permitted_probes {
            // With none out (issued = successes + leases held), none can come back:
            // `permitted_probes` was lowered below the probes issued (found by review:
            // half-open refused every call for good). The turn starts over.
            if self.probe_successes < self.probes_issued {
                return Err(ShortCircuit::ProbesExhausted);
            }
            self.restart_probes();
        }
        let Some(slot) = self.probe_leases.iter().position(|&d| d == 0) else {
            return Err(ShortCircuit::ProbesExhausted);
        };
        let deadline = now
            .saturating_add(ms_to_ns(cfg.half_open.probe_timeout_ms))
            .max(1);
        self.probe_leases[slot] = deadline;
        self.probes_issued = self.probes_issued.saturating_add(1);
        Ok(Pass::new(self.generation, slot as u8, now))
    }

    /// Applies one call's outcome at `now` (latency = `now - pass.started_at()`).
    /// The window must already hold the outcome (so the rules see it). Results from
    /// an older generation change nothing; a cancelled call only gives a probe turn
    /// back.
    #[inline(always)]
    pub fn on_result(
        &mut self,
        cfg: &BreakerConfig,
        window: &mut dyn Health,
        pass: Pass,
        outcome: Outcome,
        now: Nanos,
        rand: u64,
    ) -> Option<Transition> {
        if outcome == Outcome::Success
            && self.phase == Phase::Closed
            && !cfg.slow_call.enabled
            && !self.check_on_success
            && pass.generation() == self.generation
        {
            self.consecutive_failures = 0;
            return None;
        }
        self.on_result_cold(cfg, window, pass, outcome, now, rand)
    }

    #[inline(never)]
    fn on_result_cold(
        &mut self,
        cfg: &BreakerConfig,
        window: &mut dyn Health,
        pass: Pass,
        outcome: Outcome,
        now: Nanos,
        rand: u64,
    ) -> Option<Transition> {
        if !cfg.mode.runs_state_machine() {
            return None;
        }
        let slow = cfg.slow_call.enabled
            && outcome.executed()
            && elapsed(now, pass.started_at) >= ms_to_ns(cfg.slow_call.duration_threshold_ms);
        if pass.generation() != self.generation {
            // An earlier generation's failure or slow call (admitted before a trip,
            // ended after it) never moves the breaker, but it is in the window: the
            // next call's result runs the rules on it, as Hystrix's next health check
            // would (found by review: a closed breaker stayed over its threshold,
            // every success taking the fast path, until a new failure came).
            if outcome.is_error() || slow {
                self.check_next_success();
            }
            return None;
        }
        match self.phase {
            Phase::Closed => {
                match outcome {
                    Outcome::Success if !slow => {
                        self.consecutive_failures = 0;
                        if !self.check_on_success {
                            return None;
                        }
                    }
                    Outcome::Success | Outcome::BadRequest => self.consecutive_failures = 0,
                    Outcome::Failure | Outcome::Timeout => {
                        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
                    }
                    Outcome::Cancelled => return None,
                }
                let error = matches!(outcome, Outcome::Failure | Outcome::Timeout);
                self.check_trip(cfg, window, now, rand, error)
            }
            Phase::Open => None,
            Phase::HalfOpen => {
                let slot = usize::from(pass.probe());
                if !self.lease_held(pass.probe()) {
                    return None;
                }
                self.probe_leases[slot] = 0;
                let Some(failed) = probe_verdict(outcome, slow) else {
                    self.probes_issued = self.probes_issued.saturating_sub(1);
                    return None;
                };
                if failed {
                    return Some(self.open(cfg, now, rand, TransitionReason::ProbeFailed));
                }
                self.probe_successes = self.probe_successes.saturating_add(1);
                if self.probe_successes >= cfg.half_open.success_threshold {
                    return Some(self.close(cfg, window, now));
                }
                None
            }
        }
    }

    /// Checks the trip rules against the window (closed phase only); `error`: an error
    /// prompted the check (see [`trip_reason`]). Bulkhead rejections count as errors,
    /// so hosts call this after recording one.
    pub fn check_trip(
        &mut self,
        cfg: &BreakerConfig,
        window: &mut dyn Health,
        now: Nanos,
        rand: u64,
        error: bool,
    ) -> Option<Transition> {
        if self.phase != Phase::Closed || !cfg.mode.runs_state_machine() {
            self.check_on_success = false;
            return None;
        }
        if let Some(until) = self.warm_until {
            if now < until {
                // The errors seen now count once it is over: the next success checks.
                self.check_on_success = true;
                return None;
            }
            self.warm_until = None;
        }
        let h = window.health(now);
        let Some(reason) = trip_reason(cfg, self.consecutive_failures, &h, error) else {
            self.check_on_success = short_of_volume(cfg, &h);
            return None;
        };
        Some(self.open(cfg, now, rand, reason))
    }

    /// Forces a transition from outside the rules (an operator's `open()` / `close()`,
    /// or restoring saved state): open now for the schedule's next duration, or close
    /// now with a reset window. Returns the transition (None if already there).
    pub fn force(
        &mut self,
        cfg: &BreakerConfig,
        window: &mut dyn Health,
        to: Phase,
        now: Nanos,
        rand: u64,
    ) -> Option<Transition> {
        if self.phase == to {
            return None;
        }
        Some(match to {
            Phase::Open => self.open(cfg, now, rand, TransitionReason::Forced),
            Phase::Closed => {
                let mut t = self.close(cfg, window, now);
                t.reason = TransitionReason::Forced;
                self.ramp_started_at = None;
                t
            }
            Phase::HalfOpen => self.transition(Phase::HalfOpen, now, TransitionReason::Forced),
        })
    }
}
