//! One worker's handle on one key's process-wide state: cached view, local delta,
//! local slot count, and the CAS round trips that keep them in step with the store.
//!
//! Shared-store traffic per request, by design:
//! - admission: one `get` of the state key; the bytes are decoded only when the CAS
//!   token changed since the last decode;
//! - outcomes: recorded in the local [`Delta`]; written at once (one CAS
//!   read-modify-write) only when they can matter right away — an error, any outcome
//!   while the key is "hot" (errors in the window, a streak, or not closed), a probe's
//!   result — and otherwise on the host's tick ([`KeyHandle::tick`]);
//! - transitions and probe leases: one CAS write each;
//! - bulkhead (only if the policy has one): one CAS write to take a slot and one to
//!   give it back.
//!
//! Every time (`now`, latencies) is host time in ns, as everywhere in the core; the
//! lease TTL and heartbeat of [`SharedParams`] are config values in ms.

use super::codec::{DecodeError, Kind};
use super::ledger::{Acquire, SlotLedger};
use super::state::{BreakerParams, Delta, KeyState};
use super::store::{keys, update, Loaded, SharedStore, StoreError, UpdateError, Updated};
use super::window::Event;
use crate::breaker;
use crate::config::MAX_PROBES;
use crate::time::{ms_to_ns, Nanos};
use crate::{Phase, Rejection, Transition};

/// Knobs of the shared layer (not of any one breaker).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedParams {
    /// CAS attempts per update before giving up (degraded behaviour applies).
    pub cas_attempts: u32,
    /// A slot entry not refreshed for this long belongs to a dead VM and is reclaimed.
    pub lease_ttl_ms: u64,
    /// A worker holding slots refreshes its entry at least this often (on tick).
    pub heartbeat_ms: u64,
}

impl Default for SharedParams {
    fn default() -> Self {
        SharedParams {
            cas_attempts: 8,
            lease_ttl_ms: 30_000,
            heartbeat_ms: 5_000,
        }
    }
}

/// A probe lease held by an admitted half-open call: the core permit's generation
/// and probe slot, unique process-wide (a slot is handed out again only after its
/// holder's result, or in a later generation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Generation the probe belongs to.
    pub generation: u32,
    /// The core's probe slot.
    pub slot: u8,
}

/// The verdict of [`KeyHandle::admit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Go ahead. Report the result with this generation (and probe lease, if any).
    Allowed {
        /// Breaker generation the call was admitted under.
        generation: u32,
        /// Probe slot if this call is a half-open probe (see [`Probe`]).
        probe: Option<u8>,
    },
    /// Rejected by the breaker (recorded as `SHORT_CIRCUITED`).
    Rejected(Rejection),
}

/// The verdict of [`KeyHandle::acquire_slot`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// A slot is held: release it exactly once with [`KeyHandle::release_slot`].
    Granted,
    /// Every slot is in use process-wide.
    Full,
    /// The store could not be updated (contention or host error): rejected, nothing
    /// held.
    Degraded,
}

/// Final outcome of an admitted call, for [`KeyHandle::record`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Upstream success.
    Success,
    /// Upstream failure.
    Failure,
    /// Deadline passed.
    Timeout,
    /// Caller's fault; never an error.
    BadRequest,
    /// No verdict (e.g. the client went away before any response): counts nowhere.
    Cancelled,
}

impl Outcome {
    /// The core outcome (`None` for [`Outcome::Cancelled`]).
    pub const fn core(self) -> Option<breaker::Outcome> {
        match self {
            Outcome::Success => Some(breaker::Outcome::Success),
            Outcome::Failure => Some(breaker::Outcome::Failure),
            Outcome::Timeout => Some(breaker::Outcome::Timeout),
            Outcome::BadRequest => Some(breaker::Outcome::BadRequest),
            Outcome::Cancelled => None,
        }
    }

    /// Whether this is a slow call under `p`: the slow-call rule is on, the call ran
    /// and took at least the threshold (the core's definition).
    pub fn is_slow(self, p: &BreakerParams, latency: Nanos) -> bool {
        let sc = &p.breaker.slow_call;
        sc.enabled
            && self.core().is_some_and(|o| o.executed())
            && latency >= ms_to_ns(sc.duration_threshold_ms)
    }
}

/// Problems the host should log (the handle itself never logs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Issue {
    /// Stored bytes were undecodable; they were (or will be) replaced by a fresh state.
    Invalid(DecodeError),
    /// An update lost every CAS race.
    Contended,
    /// The host store failed with this status.
    Host(u32),
}

/// What a call into the handle changed, for logs and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// A breaker transition this worker performed.
    pub transition: Option<Transition>,
    /// Something to log.
    pub issue: Option<Issue>,
}

/// One worker's handle on one key.
#[derive(Clone, Debug)]
pub struct KeyHandle {
    state_key: String,
    slots_key: String,
    cached: Option<(u32, KeyState)>,
    delta: Delta,
    in_flight: u32,
    ledger_dirty: bool,
    last_heartbeat: Nanos,
    seen_invalid: bool,
}

fn newer(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

impl KeyHandle {
    /// A handle for `key` (the policy's resolved key string).
    pub fn new(key: &str, p: &BreakerParams) -> Self {
        let mut state_key = String::new();
        let mut slots_key = String::new();
        keys::state(key, &mut state_key);
        keys::slots(key, &mut slots_key);
        KeyHandle {
            state_key,
            slots_key,
            cached: None,
            delta: Delta::new(0, p.bucket_ns, p.buckets),
            in_flight: 0,
            ledger_dirty: false,
            last_heartbeat: 0,
            seen_invalid: false,
        }
    }

    /// Shared-data key of the breaker state.
    pub fn state_key(&self) -> &str {
        &self.state_key
    }

    /// Slots this worker holds for the key.
    pub fn local_in_flight(&self) -> u32 {
        self.in_flight
    }

    /// The last decoded shared state, if any.
    pub fn view(&self) -> Option<&KeyState> {
        self.cached.as_ref().map(|c| &c.1)
    }

    /// Adopts a new config's parameters (same key identity): reshapes the local delta
    /// if the window shape changed. The shared state conforms on its next write.
    pub fn reconfigure(&mut self, p: &BreakerParams) {
        if !self.delta.window.has_shape(p.bucket_ns, p.buckets) {
            self.delta = Delta::new(self.delta.generation, p.bucket_ns, p.buckets);
        }
    }

    /// Reads the state key, decoding only when its CAS token changed.
    fn refresh(&mut self, store: &mut impl SharedStore, p: &BreakerParams) -> Report {
        let mut report = Report::default();
        match store.get(&self.state_key) {
            Ok(Some((bytes, cas))) => {
                if !matches!(&self.cached, Some((c, _)) if *c == cas) {
                    match super::codec::decode::<KeyState>(Kind::KeyState, &bytes) {
                        Ok(mut s) => {
                            s.conform(p);
                            self.seen_invalid = false;
                            self.cached = Some((cas, s));
                        }
                        Err(e) => {
                            if !self.seen_invalid {
                                report.issue = Some(Issue::Invalid(e));
                                self.seen_invalid = true;
                            }
                            self.cached = Some((cas, KeyState::new(p)));
                        }
                    }
                }
            }
            Ok(None) => {
                if !matches!(&self.cached, Some((0, _))) {
                    self.cached = Some((0, KeyState::new(p)));
                }
            }
            // Keep the last view: a host failure must not open or close the breaker.
            Err(StoreError::CasMismatch) => {}
            Err(StoreError::Host(s)) => report.issue = Some(Issue::Host(s)),
        }
        // The delta follows the stored generation (a trip elsewhere, or a state that
        // was reset): events of another generation never move the breaker.
        if let Some((_, s)) = &self.cached {
            if s.breaker.generation() != self.delta.generation {
                self.delta.reset(s.breaker.generation());
            }
        }
        report
    }

    /// Breaker admission (the core's [`crate::BreakerState::admit`]): one store
    /// read; a write only when admission changes the state (a probe lease, a
    /// transition).
    ///
    /// Degraded behaviour: if the lease cannot be written (contention, host error) the
    /// call is rejected as if the breaker were open; a host read failure reuses the last
    /// view (or admits when there is none).
    pub fn admit(
        &mut self,
        store: &mut impl SharedStore,
        sp: &SharedParams,
        p: &BreakerParams,
        now: Nanos,
        rand: u64,
    ) -> (Admission, Report) {
        let mut report = self.refresh(store, p);
        let Some((_, s)) = &mut self.cached else {
            let generation = self.delta.generation;
            let probe = None;
            return (Admission::Allowed { generation, probe }, report);
        };
        // Decide on a copy of the cached view (no heap: the breaker state is plain
        // data); only a decision that changes the state goes through CAS.
        let mut trial = s.breaker.clone();
        let r = trial.admit(&p.breaker, &mut s.window, now, rand);
        let r = r.map(breaker::Permit::into_raw);
        let probe_taken =
            matches!(r, Ok((_, slot, _)) if usize::from(slot) < trial.probe_leases().len());
        if !probe_taken && trial.generation() == s.breaker.generation() {
            return match r {
                Ok((generation, _, _)) => (
                    Admission::Allowed {
                        generation,
                        probe: None,
                    },
                    report,
                ),
                Err(rejection) => (Admission::Rejected(rejection), report),
            };
        }
        let res = self.update_state(store, sp, p, Some(&mut report), |s| {
            let reshaped = s.conform(p);
            let (r, t) = s.admit(p, now, rand);
            // Written when admission changed the shared state: a transition or a
            // probe lease (a finished slow-start ramp needs no write).
            let probe = matches!(r, Ok((_, slot, _)) if u32::from(slot) < MAX_PROBES);
            let changed = reshaped || t.is_some() || probe;
            ((r, t), changed)
        });
        let (r, t) = match res {
            Ok(Updated::Written(r)) => {
                self.cached = None;
                r
            }
            Ok(Updated::Unchanged(r, _)) => r,
            Err(e) => {
                report.issue = Some(issue(e));
                (Err(Rejection::Open), None)
            }
        };
        report.transition = t;
        match r {
            Ok((generation, slot, _)) => {
                if generation != self.delta.generation {
                    self.delta.reset(generation);
                }
                let probe =
                    (usize::from(slot) < crate::config::MAX_PROBES as usize).then_some(slot);
                (Admission::Allowed { generation, probe }, report)
            }
            Err(rejection) => (Admission::Rejected(rejection), report),
        }
    }

    /// Records a short-circuit or bulkhead rejection locally (flushed on tick).
    pub fn record_rejection(&mut self, now: Nanos, bulkhead: bool) {
        let e = if bulkhead {
            Event::Rejected
        } else {
            Event::ShortCircuited
        };
        self.delta.window.record(now, e);
    }

    /// Records an admitted call's outcome. Returns true when the delta should be
    /// flushed now (see the module doc); otherwise the tick flushes it. Results from
    /// an earlier generation are dropped.
    pub fn record(
        &mut self,
        p: &BreakerParams,
        generation: u32,
        outcome: Outcome,
        latency: Nanos,
        now: Nanos,
    ) -> bool {
        if generation != self.delta.generation {
            if newer(generation, self.delta.generation) {
                self.delta.reset(generation);
            } else {
                return false;
            }
        }
        let urgent = match outcome {
            Outcome::Success => {
                self.delta.window.record(now, Event::Success);
                self.delta.streak.success();
                false
            }
            Outcome::Failure => {
                self.delta.window.record(now, Event::Failure);
                self.delta.streak.error();
                true
            }
            Outcome::Timeout => {
                self.delta.window.record(now, Event::Timeout);
                self.delta.streak.error();
                true
            }
            Outcome::BadRequest => {
                self.delta.window.record(now, Event::BadRequest);
                // Ends a run of failures, as in the core.
                self.delta.streak.success();
                false
            }
            Outcome::Cancelled => false,
        };
        let slow = outcome.is_slow(p, latency);
        if slow {
            self.delta.window.record_slow(now);
        }
        urgent || slow || self.cached.as_ref().is_some_and(|(_, s)| s.is_hot(now))
    }

    /// Writes the local delta into the shared state (merge + trip evaluation under
    /// CAS). On failure the delta is kept and retried on the next flush.
    pub fn flush(
        &mut self,
        store: &mut impl SharedStore,
        sp: &SharedParams,
        p: &BreakerParams,
        now: Nanos,
        rand: u64,
    ) -> Report {
        let mut report = Report::default();
        if self.delta.is_empty() {
            return report;
        }
        let delta = &self.delta;
        let res = self.update_state(store, sp, p, Some(&mut report), |s| {
            s.conform(p);
            let t = s.merge_delta(p, delta, now, rand);
            let t2 = s.poll(p, now, rand);
            (t.or(t2), true)
        });
        match res {
            Ok(Updated::Written(t)) | Ok(Updated::Unchanged(t, _)) => {
                report.transition = t;
                self.cached = None;
                let g = self.delta.generation;
                self.delta.reset(g);
            }
            Err(e) => report.issue = Some(issue(e)),
        }
        report
    }

    /// Reports a probe's outcome to the core ([`crate::BreakerState::on_result`]): a
    /// failed or slow probe reopens, successes (and bad requests) count towards
    /// closing, and a probe that never ran ([`Outcome::Cancelled`], or a call the
    /// bulkhead refused) gives its turn back. `latency` is the call's (ns).
    #[allow(clippy::too_many_arguments)]
    pub fn probe_done(
        &mut self,
        store: &mut impl SharedStore,
        sp: &SharedParams,
        p: &BreakerParams,
        probe: Probe,
        outcome: Outcome,
        latency: Nanos,
        now: Nanos,
        rand: u64,
    ) -> Report {
        // A probe without a verdict never ran as far as the breaker is concerned: the
        // core gives the turn of a probe the bulkhead refused back.
        let outcome = outcome
            .core()
            .unwrap_or(breaker::Outcome::SemaphoreRejected);
        let permit = (probe.generation, probe.slot, now.saturating_sub(latency));
        let mut report = Report::default();
        let res = self.update_state(store, sp, p, None, |s| {
            // A result changes the state only for a lease still held (it frees
            // the lease or gives it back, and may move the breaker).
            let held = s.breaker.generation() == probe.generation
                && s.phase() == Phase::HalfOpen
                && s.breaker
                    .probe_leases()
                    .get(usize::from(probe.slot))
                    .is_some_and(|&d| d != 0);
            let t = s.on_result(p, permit, outcome, now, rand);
            (t, held || t.is_some())
        });
        match res {
            Ok(Updated::Written(t)) => {
                self.cached = None;
                report.transition = t;
            }
            Ok(Updated::Unchanged(..)) => {}
            // The lease expires at its deadline: degraded, never wedged.
            Err(e) => report.issue = Some(issue(e)),
        }
        report
    }

    /// Takes one bulkhead slot if the process-wide count stays within `max`.
    pub fn acquire_slot(
        &mut self,
        store: &mut impl SharedStore,
        sp: &SharedParams,
        owner: u64,
        max: u32,
        now: Nanos,
    ) -> (Slot, Report) {
        let mut report = Report::default();
        let local = self.in_flight;
        let res = self.update_ledger(store, sp, &mut report, |l| {
            match l.try_acquire(owner, local, max, now, ms_to_ns(sp.lease_ttl_ms)) {
                Acquire::Granted => (true, true),
                Acquire::Full => (false, false),
            }
        });
        match res {
            Ok(Updated::Written(true)) => {
                self.in_flight = local.saturating_add(1);
                self.ledger_dirty = false;
                self.last_heartbeat = now;
                (Slot::Granted, report)
            }
            Ok(_) => (Slot::Full, report),
            Err(e) => {
                report.issue = Some(issue(e));
                (Slot::Degraded, report)
            }
        }
    }

    /// Gives one slot back. The local count drops at once; if the ledger cannot be
    /// written now it overstates this worker's slots (never understates) until the next
    /// tick writes the true count.
    pub fn release_slot(
        &mut self,
        store: &mut impl SharedStore,
        sp: &SharedParams,
        owner: u64,
        now: Nanos,
    ) -> Report {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.write_ledger(store, sp, owner, now)
    }

    fn write_ledger(
        &mut self,
        store: &mut impl SharedStore,
        sp: &SharedParams,
        owner: u64,
        now: Nanos,
    ) -> Report {
        let mut report = Report::default();
        let count = self.in_flight;
        let res = self.update_ledger(store, sp, &mut report, |l| {
            l.prune(now, ms_to_ns(sp.lease_ttl_ms));
            (l.set(owner, count, now), true)
        });
        match res {
            Ok(Updated::Written(true)) | Ok(Updated::Unchanged(true, _)) => {
                self.ledger_dirty = false;
                self.last_heartbeat = now;
            }
            Ok(_) => self.ledger_dirty = true,
            Err(e) => {
                self.ledger_dirty = true;
                report.issue = Some(issue(e));
            }
        }
        report
    }

    /// Periodic work: flush the delta, expire hung probes, refresh this worker's slot
    /// heartbeat (or retry a failed ledger write).
    pub fn tick(
        &mut self,
        store: &mut impl SharedStore,
        sp: &SharedParams,
        p: &BreakerParams,
        owner: u64,
        now: Nanos,
        rand: u64,
    ) -> Report {
        let mut report = self.flush(store, sp, p, now, rand);
        // A fresh view (one read; decoded only if it changed) so hung probes are seen
        // by every worker, not only by those that recently read the key.
        let r = self.refresh(store, p);
        report.issue = report.issue.or(r.issue);
        let hung = matches!(&self.cached, Some((_, s))
            if s.phase() == Phase::HalfOpen && s.breaker.next_deadline().is_some_and(|d| now >= d));
        if hung {
            let res = self.update_state(store, sp, p, None, |s| {
                let t = s.poll(p, now, rand);
                (t, t.is_some())
            });
            match res {
                Ok(Updated::Written(t)) => {
                    self.cached = None;
                    report.transition = report.transition.or(t);
                }
                Ok(_) => {}
                Err(e) => report.issue = Some(issue(e)),
            }
        }
        let heartbeat_due =
            self.in_flight > 0 && now.abs_diff(self.last_heartbeat) >= ms_to_ns(sp.heartbeat_ms);
        if self.ledger_dirty || heartbeat_due {
            let r = self.write_ledger(store, sp, owner, now);
            report.issue = report.issue.or(r.issue);
        }
        report
    }

    /// One CAS update of this key's breaker state (built from `p` where absent or
    /// undecodable). Undecodable bytes are reported in `report` when one is given.
    fn update_state<R>(
        &self,
        store: &mut impl SharedStore,
        sp: &SharedParams,
        p: &BreakerParams,
        mut report: Option<&mut Report>,
        f: impl FnMut(&mut KeyState) -> (R, bool),
    ) -> Result<Updated<R>, UpdateError> {
        let on_invalid = |e| {
            if let Some(r) = report.as_deref_mut() {
                r.issue = Some(Issue::Invalid(e));
            }
        };
        let init = || KeyState::new(p);
        update(
            store,
            &self.state_key,
            Kind::KeyState,
            sp.cas_attempts,
            init,
            on_invalid,
            f,
        )
    }

    /// One CAS update of this key's slot ledger; undecodable bytes are reported in
    /// `report`.
    fn update_ledger<R>(
        &self,
        store: &mut impl SharedStore,
        sp: &SharedParams,
        report: &mut Report,
        f: impl FnMut(&mut SlotLedger) -> (R, bool),
    ) -> Result<Updated<R>, UpdateError> {
        let on_invalid = |e| report.issue = Some(Issue::Invalid(e));
        update(
            store,
            &self.slots_key,
            Kind::SlotLedger,
            sp.cas_attempts,
            SlotLedger::new,
            on_invalid,
            f,
        )
    }

    /// Reads the process-wide in-flight count of the key (live owners only).
    pub fn global_in_flight(
        &self,
        store: &mut impl SharedStore,
        now: Nanos,
        ttl_ms: u64,
    ) -> Option<u64> {
        match super::store::load::<SlotLedger>(store, &self.slots_key, Kind::SlotLedger) {
            Ok(Loaded::Value(l, _)) => Some(l.in_flight(now, ms_to_ns(ttl_ms))),
            Ok(Loaded::Absent) => Some(0),
            _ => None,
        }
    }
}

fn issue(e: UpdateError) -> Issue {
    match e {
        UpdateError::Contended => Issue::Contended,
        UpdateError::Host(s) => Issue::Host(s),
    }
}

/// Allocates a process-unique owner id for a worker VM from the store's sequence key.
/// Falls back to `fallback` (e.g. time ⊕ randomness) if the store cannot be updated.
pub fn allocate_owner(store: &mut impl SharedStore, attempts: u32, fallback: u64) -> u64 {
    let res = update(
        store,
        keys::OWNER_SEQ,
        Kind::Sequence,
        attempts,
        || 0u64,
        |_| {},
        |seq: &mut u64| {
            *seq = seq.wrapping_add(1);
            (*seq, true)
        },
    );
    match res {
        Ok(Updated::Written(id)) => id,
        _ => fallback | (1 << 63),
    }
}
