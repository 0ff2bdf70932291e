//! The process-wide state of one key: breaker phase, probe leases, open schedule and the
//! rolling window, plus the transition logic that runs on it under CAS.
//!
//! Every method is a pure function of the state value, the parameters, `now_ms` and an
//! injected random number, so any worker can decode the shared bytes, apply its change
//! and write them back with the CAS token it read. The rules themselves are the
//! core's: [`trip_reason`], [`admit_closed`] (slow start, adaptive throttle),
//! [`open_duration_ns`] (schedule and jitter), [`crate::breaker::probe_failed`], the
//! core [`Phase`], [`Rejection`] and [`Transition`].

use serde::{Deserialize, Serialize};

use super::window::{Counts, SharedWindow, MAX_BUCKETS};
use crate::breaker::{admit_closed, open_duration_ns, trip_reason};
use crate::config::{BreakerConfig, BreakerMode, Config};
use crate::time::{ms_to_ns, NANOS_PER_MS};
use crate::{Phase, Rejection, Transition, TransitionReason};

/// What the shared breaker logic runs with: the core breaker config and the shape of
/// the counters-only window.
#[derive(Clone, Debug, PartialEq)]
pub struct BreakerParams {
    /// The core breaker config (rules, open schedule, half-open, slow start, mode).
    pub breaker: BreakerConfig,
    /// Window bucket width.
    pub bucket_ms: u32,
    /// Window bucket count.
    pub buckets: usize,
}

impl BreakerParams {
    /// The shared-state parameters of a validated config.
    ///
    /// The shared window keeps at most [`MAX_BUCKETS`] buckets: a finer
    /// `metrics.rolling_buckets` is coarsened to that many (same window length).
    pub fn from_config(c: &Config) -> Self {
        let window_ms = c.metrics.rolling_window_ms.max(1);
        let buckets = (c.metrics.rolling_buckets.max(1) as usize).min(MAX_BUCKETS);
        let bucket_ms = (window_ms / buckets as u64).clamp(1, u32::MAX as u64) as u32;
        BreakerParams {
            breaker: c.breaker.clone(),
            bucket_ms,
            buckets,
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

/// Outcome of [`KeyState::decide`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Admit; no write needed.
    Allow,
    /// Reject; no write needed.
    Reject(Rejection),
    /// A probe lease must be taken (a state change): call [`KeyState::take_probe`]
    /// on a copy and CAS it in.
    Probe,
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

    /// Read-only admission check. `rand` is a uniformly random u64 from the host.
    pub fn decide(&self, p: &BreakerParams, now_ms: u64, rand: u64) -> Decision {
        match p.breaker.mode {
            BreakerMode::Disabled | BreakerMode::ForcedClosed | BreakerMode::MetricsOnly => {
                return Decision::Allow
            }
            BreakerMode::ForcedOpen => return Decision::Reject(Rejection::ForcedOpen),
            BreakerMode::Normal => {}
        }
        match self.phase {
            Phase::Closed => {
                let mut ramp = (self.closed_at_ms > 0).then(|| ms_to_ns(self.closed_at_ms));
                let health = || self.window.snapshot(now_ms).health();
                match admit_closed(&p.breaker, &mut ramp, ms_to_ns(now_ms), health, rand) {
                    Ok(()) => Decision::Allow,
                    Err(r) => Decision::Reject(r),
                }
            }
            Phase::Open => {
                if now_ms >= self.open_until_ms {
                    Decision::Probe
                } else {
                    Decision::Reject(Rejection::Open)
                }
            }
            Phase::HalfOpen => {
                if self.probes_issued < p.breaker.half_open.permitted_probes.max(1)
                    || self.lease_expired(now_ms)
                {
                    // An expired lease is handled as a failed probe by `expire`; the
                    // caller writes it.
                    Decision::Probe
                } else {
                    Decision::Reject(Rejection::ProbesExhausted)
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
        rand: u64,
        transition: &mut Option<Transition>,
    ) -> Option<u32> {
        if p.breaker.mode != BreakerMode::Normal {
            return None;
        }
        if let Some(t) = self.expire(p, now_ms, rand) {
            *transition = Some(t);
        }
        if self.phase == Phase::Open && now_ms >= self.open_until_ms {
            let t = self.enter(Phase::HalfOpen, now_ms, TransitionReason::OpenElapsed);
            *transition = Some(t);
        }
        if self.phase != Phase::HalfOpen
            || self.probes_issued >= p.breaker.half_open.permitted_probes.max(1)
        {
            return None;
        }
        self.probes_issued += 1;
        self.leases.push(ProbeLease {
            id: lease_id,
            deadline_ms: now_ms.saturating_add(p.breaker.half_open.probe_timeout_ms.max(1)),
        });
        Some(self.generation)
    }

    /// Expired probe leases count as failed probes: half-open → open. Returns the
    /// transition if any.
    pub fn expire(&mut self, p: &BreakerParams, now_ms: u64, rand: u64) -> Option<Transition> {
        if self.phase == Phase::HalfOpen && self.lease_expired(now_ms) {
            return Some(self.trip(p, now_ms, rand, TransitionReason::ProbeLeaseExpired));
        }
        None
    }

    /// Reports a probe's verdict (`failed`, from [`crate::breaker::probe_failed`]).
    /// Ignored unless `generation` is current and the lease is still held. Returns the
    /// transition if any.
    pub fn probe_result(
        &mut self,
        p: &BreakerParams,
        generation: u32,
        lease_id: u64,
        failed: bool,
        now_ms: u64,
        rand: u64,
    ) -> Option<Transition> {
        if generation != self.generation || self.phase != Phase::HalfOpen {
            return None;
        }
        let i = self.leases.iter().position(|l| l.id == lease_id)?;
        self.leases.swap_remove(i);
        if failed {
            return Some(self.trip(p, now_ms, rand, TransitionReason::ProbeFailed));
        }
        self.probes_succeeded = self.probes_succeeded.saturating_add(1);
        if self.probes_succeeded >= p.breaker.half_open.success_threshold.max(1) {
            let t = self.enter(Phase::Closed, now_ms, TransitionReason::ProbesSucceeded);
            self.trips = 0;
            self.closed_at_ms = now_ms.max(1);
            self.window.clear();
            return Some(t);
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
        rand: u64,
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

    /// Applies the core trip rules to the current window (closed phase only).
    pub fn evaluate(&mut self, p: &BreakerParams, now_ms: u64, rand: u64) -> Option<Transition> {
        if self.phase != Phase::Closed
            || !matches!(
                p.breaker.mode,
                BreakerMode::Normal | BreakerMode::MetricsOnly
            )
        {
            return None;
        }
        let reason = self.trip_reason(p, now_ms)?;
        Some(self.trip(p, now_ms, rand, reason))
    }

    /// The core trip rule that fires on the current window, if any.
    pub fn trip_reason(&self, p: &BreakerParams, now_ms: u64) -> Option<TransitionReason> {
        let health = self.window.snapshot(now_ms).health();
        trip_reason(&p.breaker, self.consecutive_errors, &health)
    }

    /// Opens: the open duration is the core schedule's for this trip, with jitter.
    fn trip(
        &mut self,
        p: &BreakerParams,
        now_ms: u64,
        rand: u64,
        reason: TransitionReason,
    ) -> Transition {
        let dur_ns = open_duration_ns(&p.breaker.open, self.trips, rand);
        self.trips = self.trips.saturating_add(1);
        let t = self.enter(Phase::Open, now_ms, reason);
        self.open_until_ms = now_ms.saturating_add((dur_ns / NANOS_PER_MS).max(1));
        t
    }

    fn enter(&mut self, to: Phase, now_ms: u64, reason: TransitionReason) -> Transition {
        let t = Transition {
            from: self.phase,
            to,
            at: ms_to_ns(now_ms),
            generation: self.generation.wrapping_add(1).max(1),
            reason,
        };
        self.phase = to;
        self.generation = t.generation;
        self.since_ms = now_ms;
        self.probes_issued = 0;
        self.probes_succeeded = 0;
        self.consecutive_errors = 0;
        self.leases.clear();
        t
    }

    /// Window snapshot at `now_ms`.
    pub fn snapshot(&self, now_ms: u64) -> Counts {
        self.window.snapshot(now_ms)
    }
}
