//! One worker's replica of one key's shared state: the last view read from the store,
//! what this worker has not written yet, and the compare-and-set protocol that merges
//! it — as a state machine driven by the engine, which relays store requests and
//! answers between it and the host.
//!
//! Writes are read-modify-write under CAS: [`Replica::next_op`] builds the new state
//! from the freshest view plus the pending changes ([`Replica::apply`]); a conflict
//! re-reads (or adopts the current value the store returned) and tries again, at most
//! `cas_attempts` times; then the round degrades: no lease → the call is refused, no
//! slot → refused, the delta and probe results are kept for the next round.
//!
//! **Slots.** A key lives in one of `keys.max_keys` store slots of its policy
//! (`<namespace>/v3/<policy>/<n>`), found from the FNV-1a hash of its name (at most
//! [`PROBE_LIMIT`] slots, in [`slot_index`]'s order), or in the policy's overflow
//! slot. A slot names the key it holds; a slot idle for `keys.idle_ms` may be taken over by another
//! key. So the store never holds more than `max_keys + 1` entries per policy, however
//! many distinct keys a high-cardinality template produces, across reloads too.

use super::codec::{self, DecodeError, Kind};
use super::io::{Answer, Expect, Issue, LOST};
use super::state::{Counts, Delta, KeyState};
use crate::breaker::{
    BreakerState, Pass, RawPass, ShortCircuit, Transition, TransitionReason, LEASED, NO_PROBE,
};
use crate::circuit::Circuit;
use crate::config::{BreakerMode, Config, SharedConfig, SyncMode};
use crate::engine::keys::fnv1a;
use crate::event::{EventKind, Outcome};
use crate::ring::Bucket;
use crate::time::{ms_to_ns, Nanos};
use crate::window::{Health, HealthSnapshot};
use crate::Phase;

/// Slots probed for a new key before it goes to the overflow slot (reads made once,
/// when a worker first binds the key).
pub const PROBE_LIMIT: u32 = 32;
/// Name of the overflow slot (and of the key its state names).
pub const OVERFLOW: &str = "~overflow";
/// Version of the store-key layout (`<namespace>/v3/...`): a layout change bumps it,
/// so old and new code running side by side during a config drain never meet.
/// (Changing the probe order of [`slot_index`] is not such a change: the slots hold
/// the same states, named by their keys.)
pub const LAYOUT: &str = "v3";

/// The slot (`0..max_keys`) that key `name` probes at `step`. In a table no larger
/// than [`PROBE_LIMIT`], every slot in turn from the FNV-1a hash of its name; in a
/// larger one, the hash and the step mixed (splitmix64's finaliser), so each step is an
/// independent draw and keys whose first slots collide part ways (linear probing grew
/// runs of taken slots: with 8 probes, 6 % of 900 live keys found no free slot among
/// 1 000).
pub fn slot_index(name: &str, step: u32, max_keys: u32) -> u32 {
    let h = fnv1a(name.as_bytes());
    let n = u64::from(max_keys.max(1));
    if max_keys <= PROBE_LIMIT {
        return (h.wrapping_add(u64::from(step)) % n) as u32;
    }
    (spread(h ^ u64::from(step) << 32) % n) as u32
}

/// Everything a replica needs from its engine for one step.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ctx<'a> {
    pub config: &'a Config,
    pub shared: &'a SharedConfig,
    pub owner: u64,
    /// Local calls of the key holding a slot.
    pub in_flight: u32,
    /// Local calls of the key waiting for a slot.
    pub waiters: u32,
    pub now: Nanos,
    pub rand: u64,
}

impl Ctx<'_> {
    fn bulkhead_shared(&self) -> Option<u32> {
        match (self.shared.mode, &self.config.bulkhead) {
            (SyncMode::Sync, Some(b)) => Some(b.max_concurrent),
            _ => None,
        }
    }
}

/// What one answer changed, for the engine to report.
#[derive(Debug, Default)]
pub(crate) struct Effects {
    pub transitions: Vec<Transition>,
    pub issue: Option<Issue>,
    /// The view was replaced by another worker's state (mirror it locally).
    pub adopted: bool,
    /// This worker's write landed: the view is the state it wrote (mirror it too).
    pub written: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bind {
    /// Reading probe step `step`; `free` is the first claimable slot seen.
    Probing {
        step: u32,
        free: Option<(u32, Expect)>,
    },
    Slot(u32),
    Overflow,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IoState {
    Idle,
    /// Handed to the host as request `seq`.
    InFlight {
        seq: u32,
        write: bool,
        /// When it was handed out.
        at: Nanos,
    },
}

/// A probe lease granted to this worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Lease {
    generation: u32,
    slot: u8,
    /// When its grant reached this worker: unused for `flush_ms` from there, it goes
    /// back. (Counted from the write's time, a store's round trip of `flush_ms` or
    /// more used the time up before any call could take it: half-open never probed.)
    arrived: Nanos,
    /// When the write granting it was built (its deadline in the store counts from
    /// there).
    granted: Nanos,
}

/// What a write would do if it lands.
#[derive(Debug)]
struct Attempt {
    state: KeyState,
    transitions: Vec<Transition>,
    leases: Vec<Lease>,
    /// The probe leases it asked for: asks made while it was out stay (found by a
    /// test against Redis 80 ms away: every ask met a flush in flight, whose landing
    /// forgot it, and a process calling more often than the round trip never probed).
    asked: u32,
    slots: u32,
    probes: usize,
    returns: usize,
    delta: bool,
    /// The receipt the write carries (asynchronous stores).
    receipt: Option<u32>,
    /// The forced phase it carries.
    forced: Option<Phase>,
}

/// One worker's replica of one key.
#[derive(Debug)]
pub(crate) struct Replica {
    name: Box<str>,
    prefix: Box<str>,
    store_key: String,
    bind: Bind,
    view: Option<KeyState>,
    /// What a write now expects to find (valid while `token_known`).
    expect: Expect,
    token_known: bool,
    /// Last time the store confirmed the view (read or write): its answer came.
    read_at: Option<Nanos>,
    /// When the request that confirmed it left: what the view's freshness counts
    /// from (with `read_at` set).
    confirmed_at: Nanos,
    /// The stored window's current epoch as last seen, and since when (this worker's
    /// time) it has not moved: see [`crate::ring::Ring::merge_at`].
    ring_seen: (u64, Nanos),
    /// The `failing_since` whose staleness was reported (`Issue::Stale`, once per run
    /// of failures).
    stale_told: Option<Nanos>,
    /// The status last reported as [`Issue::Failed`] in this run of failures.
    failed_told: Option<u32>,
    /// When writes started failing (a full store, a value too large for it, writes
    /// refused while reads still answer), until one lands or a read finds the key with
    /// nothing of ours pending. Reads alone do not keep such a view fresh: outcomes
    /// that cannot reach the store are decided by the local breaker — at once on a
    /// synchronous store (its failures are not transient), after `stale_ms` on an
    /// asynchronous one.
    write_failed_at: Option<Nanos>,
    /// Bytes of this worker's last write: a read returning them needs no decode.
    written: Vec<u8>,
    written_is_view: bool,
    /// The view shows trouble ([`KeyState::write_rules`]): every outcome goes at once.
    hot: bool,
    /// The view's window is sparse ([`KeyState::write_rules`]): successes go at once.
    sparse: bool,
    pub(crate) delta: Delta,
    /// The part of the delta the write in flight carries: forgotten when it lands,
    /// pending again when it does not. Outcomes recorded while a write is in flight
    /// (an asynchronous store answers later) stay in `delta` for the next write.
    pub(crate) sent: Delta,
    probe_results: Vec<(RawPass, Outcome, Nanos)>,
    lease_returns: Vec<(u32, u8)>,
    leases: Vec<Lease>,
    leases_wanted: u32,
    slots_held: u32,
    slots_wanted: u32,
    release_due: bool,
    /// The bulkhead limit changed since the store last confirmed the view: its
    /// ledger may hold slots granted under the old limit, so no reserve is used
    /// until the next read or write lands (see [`Replica::has_free_slot`]).
    limit_changed: bool,
    poll_due: bool,
    /// An operator's phase, until the write carrying it lands.
    forced: Option<Phase>,
    claim: bool,
    flush_now: bool,
    read_wanted: bool,
    anticipate: bool,
    dirty_at: Option<Nanos>,
    last_heartbeat: Nanos,
    /// After a failed round nothing goes out until then.
    backoff_until: Nanos,
    /// The key's local breaker moved on outcomes the store does not have yet (it
    /// decided while there was no fresh view): 1 until a write is built with them, 2
    /// while that write is out; it decides until the write lands (see
    /// [`Replica::forcing`]).
    behind: u8,
    /// The last outcome recorded may trip the view ahead of the store (an error, a
    /// slow call, or a success while `check_ahead`): [`Replica::trips_ahead`] is due.
    ahead_due: bool,
    /// [`Replica::trips_ahead`] found errors short of a rule's volume: a success
    /// (which adds volume) runs it again, as a local breaker's next success does.
    check_ahead: bool,
    /// When this worker's last call asked for admission, the time since the one
    /// before, and the shorter of the last two such gaps (how long an unused probe
    /// lease is kept: [`Replica::lease_hold`]).
    last_admit: Nanos,
    last_gap: Nanos,
    admit_gap: Nanos,
    /// Searches for a slot that ended in the overflow slot again (each doubles the
    /// wait before the next, up to `idle_ms`).
    reprobes: u8,
    /// Bound to the overflow slot when probing found no free slot: when to look for
    /// one again (never for the policy's own overflow key).
    reprobe_at: Nanos,
    /// After a contended round no write goes out until then; reads go on, so the
    /// view stays within `sync_ms` of the store (a trip elsewhere is seen).
    write_after: Nanos,
    failures: u32,
    /// When the store's current run of failures began (none while it answers).
    failing_since: Option<Nanos>,
    io: IoState,
    attempts: u32,
    attempt: Option<Attempt>,
    /// Sequence number of this worker's last write (its receipt).
    seq: u32,
    /// Mixed into the owner id for this replica's receipts and ledger entry
    /// ([`Replica::me`]): replicas of several keys bound to one slot (the overflow
    /// slot) write one state.
    salt: u64,
    /// A write whose reply was lost: it may have landed. The next read tells from
    /// its receipt; until then its delta stays in `sent`.
    doubt: Option<Attempt>,
}

/// `a` is a later generation than `b` (wrapping).
fn newer(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

impl Replica {
    /// A replica of key `name` of policy `policy`; `overflow` binds it to the
    /// policy's overflow slot at once.
    pub(crate) fn new(
        name: &str,
        policy: &str,
        overflow: bool,
        config: &Config,
        shared: &SharedConfig,
        now: Nanos,
    ) -> Self {
        let prefix = text!("{}/{LAYOUT}/{policy}/", shared.namespace);
        let mut r = Replica {
            name: name.into(),
            prefix: prefix.into(),
            store_key: String::new(),
            bind: if overflow {
                Bind::Overflow
            } else {
                Bind::Probing {
                    step: 0,
                    free: None,
                }
            },
            view: None,
            expect: Expect::Absent,
            token_known: false,
            read_at: None,
            confirmed_at: 0,
            ring_seen: (u64::MAX, 0),
            stale_told: None,
            failed_told: None,
            write_failed_at: None,
            written: Vec::new(),
            written_is_view: false,
            hot: false,
            sparse: true,
            delta: Delta::new(config, 0, now),
            sent: Delta::new(config, 0, now),
            probe_results: Vec::new(),
            lease_returns: Vec::new(),
            leases: Vec::new(),
            leases_wanted: 0,
            slots_held: 0,
            slots_wanted: 0,
            release_due: false,
            limit_changed: false,
            poll_due: false,
            forced: None,
            claim: false,
            flush_now: false,
            read_wanted: true,
            anticipate: false,
            dirty_at: None,
            last_heartbeat: now,
            backoff_until: 0,
            reprobe_at: if overflow { Nanos::MAX } else { 0 },
            last_admit: now,
            last_gap: 0,
            admit_gap: 0,
            reprobes: 0,
            behind: 0,
            ahead_due: false,
            check_ahead: false,
            write_after: 0,
            failures: 0,
            failing_since: None,
            io: IoState::Idle,
            attempts: 0,
            attempt: None,
            // Sequences of a key's earlier replica in this worker (expired, created
            // again) lie far behind: each counts from its creation time.
            seq: (now >> 16) as u32,
            salt: fnv1a(name.as_bytes()),
            doubt: None,
        };
        r.set_store_key();
        r
    }

    fn slot_name(&self) -> &str {
        match self.bind {
            Bind::Overflow => OVERFLOW,
            _ => &self.name,
        }
    }

    fn probe_index(&self, step: u32, max_keys: u32) -> u32 {
        slot_index(&self.name, step, max_keys)
    }

    fn set_store_key(&mut self) {
        use core::fmt::Write;
        self.store_key.clear();
        self.store_key.push_str(&self.prefix);
        match self.bind {
            Bind::Overflow => self.store_key.push_str(OVERFLOW),
            Bind::Slot(i) => {
                let _ = write!(self.store_key, "{i}");
            }
            Bind::Probing { .. } => {}
        }
    }

    fn set_probe_key(&mut self, step: u32, max_keys: u32) {
        use core::fmt::Write;
        let i = self.probe_index(step, max_keys);
        self.store_key.clear();
        self.store_key.push_str(&self.prefix);
        let _ = write!(self.store_key, "{i}");
    }

    /// The store key of the key's slot (meaningful once bound).
    pub(crate) fn store_key(&self) -> &str {
        &self.store_key
    }

    /// The bytes of the pending write.
    pub(crate) fn written(&self) -> &[u8] {
        &self.written
    }

    /// The store failed this key's last request, or its writes fail (a full store, a
    /// key or value too large for it): the key runs on local state, its bulkhead too.
    pub(crate) fn store_failing(&self) -> bool {
        self.failures > 0 || self.write_failed_at.is_some()
    }

    /// The last view of the shared state, if any.
    pub(crate) fn view(&self) -> Option<&KeyState> {
        self.view.as_ref()
    }

    /// Whether this worker holds a probe lease of breaker generation `generation` no
    /// call has used yet (its next admission takes it).
    pub(crate) fn holds_probe(&self, generation: u32) -> bool {
        self.leases.iter().any(|l| l.generation == generation)
    }

    /// The counts of view `v`'s window at `now` with this worker's outcomes the store
    /// does not have yet (the write in flight, the delta): the fleet's window as this
    /// worker knows it. `same`: only outcomes of the view's generation (those that may
    /// move its breaker).
    pub(crate) fn known_counts(&self, v: &KeyState, now: Nanos, same: bool) -> Counts {
        let g = v.breaker.generation();
        let mut counts = v.window.counts_at(now);
        for d in [&self.sent, &self.delta] {
            if !same || d.generation == g {
                counts.join(&d.window.counts_at(now));
            }
        }
        counts
    }

    /// Whether decisions come from the shared view (bound, and confirmed by the store
    /// within `stale_ms`); otherwise the key runs on its local breaker.
    #[inline]
    pub(crate) fn fresh(&self, ctx: &Ctx) -> bool {
        self.fresh_at(ctx.shared, ctx.now)
    }

    /// [`Replica::fresh`] for status queries (no config at hand).
    #[inline]
    pub(crate) fn fresh_at(&self, shared: &SharedConfig, now: Nanos) -> bool {
        let stale = ms_to_ns(shared.stale_ms);
        self.view.is_some()
            && !matches!(self.bind, Bind::Probing { .. })
            && self.read_at.is_some()
            && now.saturating_sub(self.confirmed_at) <= stale
            // After a failed write the view stays in charge until its retry failed too
            // (two failed rounds in a row), at most `stale_ms`: then the outcomes are
            // not reaching the fleet and the local breaker, fed by them all along,
            // decides (found by review: an outage of Redis and the upstream together
            // tripped only after `stale_ms`). One transient failure changes nothing:
            // the fleet's probe leases still decide half-open.
            && self.write_failed_at.is_none_or(|t| {
                shared.mode == SyncMode::Async
                    && now.saturating_sub(t) <= stale
                    && self.failures < 2
            })
    }

    /// Slots this worker holds in the ledger.
    pub(crate) fn slots_held(&self) -> u32 {
        self.slots_held
    }

    /// Before an admission (`admitting`) or a status read: asks for a read when the
    /// view is older than `sync_ms`; before an admission, a sync host with a recent
    /// view asks only for the lease or slot the admission is about to need.
    pub(crate) fn prepare(&mut self, ctx: &Ctx, admitting: bool) {
        match ctx.shared.mode {
            SyncMode::Sync => {
                self.reprobe(ctx);
                let due = self
                    .read_at
                    .is_none_or(|t| ctx.now.saturating_sub(t) >= ms_to_ns(ctx.shared.sync_ms()));
                if due || self.view.is_none() {
                    self.read_wanted = true;
                    self.anticipate |= admitting;
                } else if admitting {
                    self.anticipate(ctx);
                }
            }
            SyncMode::Async => self.prepare_async(ctx),
        }
    }

    /// A key in the overflow slot looks for a slot of its own again after
    /// `heartbeat_ms`, then after twice as long each time it found none, up to
    /// `idle_ms` (slots free up as other keys go idle: found by review, keys
    /// renamed by a new key template stayed in the overflow slot, sharing one breaker
    /// and bulkhead, for as long as they had traffic) — when the shared breaker there
    /// is closed and nothing of this worker's is pending or held in it, so the move
    /// loses nothing and changes no phase (a slot found starts closed).
    #[inline(always)]
    fn reprobe(&mut self, ctx: &Ctx) {
        // One compare on the admission path; the rest only for overflow keys.
        if self.bind == Bind::Overflow {
            self.reprobe_overflow(ctx);
        }
    }

    #[inline(never)]
    fn reprobe_overflow(&mut self, ctx: &Ctx) {
        if ctx.now >= self.reprobe_at
            && self.is_quiet()
            && self
                .view
                .as_ref()
                .is_some_and(|v| v.breaker.phase() == Phase::Closed)
        {
            self.restart_probing();
        }
    }

    /// How long a probe lease granted to this worker is kept unused before it goes
    /// back (and at the latest [`Replica::lease_due`]): twice the shorter of the gaps
    /// between its last three calls, at least `flush_ms`. A worker whose calls come
    /// further apart than `flush_ms` keeps its lease until its next call (found by
    /// review: with calls 1.5 s apart and `flush_ms` 1 000, every call was refused and
    /// each lease went back before the next call: half-open never probed); a stray
    /// call after a long quiet, or one whose calls stopped, gives it back soon.
    fn lease_hold(&self, ctx: &Ctx) -> Nanos {
        self.admit_gap
            .saturating_mul(2)
            .max(ms_to_ns(ctx.shared.flush_ms))
    }

    /// The latest an unused lease goes back, counted from its grant (its deadline in
    /// the store counts from there, not from when the grant reached this worker):
    /// `flush_ms` before that deadline, or at half of the probe timeout if that is
    /// later. A probe started late in the hold has less of the probe timeout left:
    /// one that outruns its lease reopens the breaker.
    fn lease_due(&self, ctx: &Ctx, l: &Lease) -> Nanos {
        let deadline = ms_to_ns(ctx.config.breaker.half_open.probe_timeout_ms);
        let keep = deadline
            .saturating_sub(ms_to_ns(ctx.shared.flush_ms))
            .max(deadline / 2);
        l.granted.saturating_add(keep)
    }

    /// [`Replica::prepare`] for an asynchronous store: asks for the due refresh.
    #[inline]
    pub(crate) fn prepare_async(&mut self, ctx: &Ctx) {
        self.reprobe(ctx);
        let due = self
            .read_at
            .is_none_or(|t| ctx.now.saturating_sub(t) >= ms_to_ns(ctx.shared.sync_ms()));
        if due && ctx.now >= self.backoff_until {
            self.read_wanted = true;
        }
    }

    /// Breaker admission from the shared view (or the local breaker when there is no
    /// fresh view). A probe needs a lease granted through the store: without one the
    /// call is refused and a lease is requested for the next call.
    /// `fresh`: [`Replica::fresh`] at `ctx`, as the caller has just tested it.
    pub(crate) fn admit(
        &mut self,
        ctx: &Ctx,
        fresh: bool,
        local: &mut Circuit,
    ) -> (Result<Pass, ShortCircuit>, Option<Transition>) {
        self.anticipate = false;
        let cfg = &ctx.config.breaker;
        let now = ctx.now;
        let gap = now.saturating_sub(self.last_admit);
        self.admit_gap = gap.min(self.last_gap);
        self.last_gap = gap;
        self.last_admit = now;
        if !fresh {
            return local.state.admit(cfg, &mut local.window, now, ctx.rand);
        }
        let Some(view) = self.view.as_mut() else {
            return local.state.admit(cfg, &mut local.window, now, ctx.rand);
        };
        let b = &view.breaker;
        if cfg.mode == BreakerMode::Normal
            && b.phase() == Phase::Closed
            && b.ramp_started_at().is_none()
            && !cfg.adaptive_throttle.enabled
        {
            return (Ok(Pass::new(b.generation(), NO_PROBE, now)), None);
        }
        let generation = b.generation();
        let mut trial = b.clone();
        let (r, _) = trial.admit(cfg, &mut view.window, now, ctx.rand);
        if trial.phase() == Phase::HalfOpen
            && matches!(cfg.mode, BreakerMode::Normal | BreakerMode::MetricsOnly)
        {
            let g = trial.generation();
            self.leases.retain(|l| l.generation == g);
            if let Some(l) = self.leases.pop() {
                return (Ok(Pass::new(l.generation, l.slot | LEASED, now)), None);
            }
            if matches!(&r, Ok(p) if p.is_probe()) {
                self.leases_wanted = self.leases_wanted.max(1);
            }
            if cfg.mode == BreakerMode::MetricsOnly {
                return (Ok(Pass::new(g, NO_PROBE, now)), None);
            }
            return (Err(ShortCircuit::ProbesExhausted), None);
        }
        match r {
            Ok(p) if !p.is_probe() && trial.generation() == generation => {
                // Only the ramp's end (or a shadow count) changed: local, no write.
                view.breaker = trial;
                (Ok(p), None)
            }
            Ok(p) => {
                // Not reachable for a plain pass; never run a probe without a lease.
                let _ = p.into_raw();
                (Err(ShortCircuit::ProbesExhausted), None)
            }
            Err(e) => {
                if trial.generation() != generation {
                    // A hung probe lease reopened the breaker: write it.
                    self.poll_due = true;
                }
                (Err(e), None)
            }
        }
    }

    /// Records an admitted call's outcome (the pass's raw parts); returns whether it
    /// must be written at once (an error, a slow call, a probe, a hot key).
    pub(crate) fn record(&mut self, ctx: &Ctx, pass: RawPass, outcome: Outcome) -> bool {
        let now = ctx.now;
        let (generation, _, started_at) = pass;
        let mut urgent = false;
        if let Some(lease) = leased(pass) {
            self.probe_results.push((lease, outcome, now));
            urgent = true;
        }
        // A generation only the local breaker has (a trip ahead, a move while the
        // view did not decide) is not the store's: its outcomes count under the
        // view's (found by review: a delta reset to it dropped the unwritten outcomes
        // that moved it, and a delta of a generation the store never had is never
        // merged).
        let generation = match &self.view {
            Some(v) if newer(generation, v.breaker.generation()) => v.breaker.generation(),
            _ => generation,
        };
        if generation != self.delta.generation {
            if newer(generation, self.delta.generation) || self.delta.is_empty() {
                // The counts of the earlier generation are still to be written
                // (found by review: reset here, they were lost).
                self.delta.carry(generation);
            } else {
                // From an earlier generation: never moves the breaker.
                return self.mark(now, urgent);
            }
        }
        let mut slow = false;
        if let Some(kind) = outcome.event() {
            self.delta.record(kind, now);
            self.delta.streak.record(outcome);
            let sc = &ctx.config.breaker.slow_call;
            if sc.enabled
                && kind != EventKind::BadRequest
                && now.saturating_sub(started_at) >= ms_to_ns(sc.duration_threshold_ms)
            {
                self.delta.record_slow(now);
                slow = true;
                urgent = true;
            }
        }
        self.ahead_due =
            outcome.is_error() || slow || (self.check_ahead && outcome == Outcome::Success);
        // (Not a bad request or a cancelled call: they add no volume, and a 4xx flood
        // would write each one: found by review.)
        urgent |= outcome.is_error() || self.hot || (self.sparse && outcome == Outcome::Success);
        if self.surplus_goes_back(ctx) {
            self.release_due = true;
            urgent = true;
        }
        self.mark(now, urgent)
    }

    /// After a call gave its slot back: whether the slots held beyond the calls in
    /// flight (a reserve: the next calls need no write) go back to the ledger at once
    /// — when the ledger this worker last saw is a quarter full or more. Kept until
    /// the next flush, the reserves of several workers added up past the limit and
    /// refused calls while the process had room (found by a host-test stress run: a
    /// limit of 10 across 8 workers, 6 in flight on average, refused 36 % of calls
    /// where one semaphore refuses 5 %; now 5.1 %). Below a quarter the reserve
    /// stays: a busy key with room to spare writes once per flush, not per call.
    fn surplus_goes_back(&self, ctx: &Ctx) -> bool {
        // Kept while 4 × the slots in use (as seen) < max.
        ctx.bulkhead_shared().is_some_and(|max| {
            self.slots_held > ctx.in_flight && !self.has_free_slot(ctx, max.saturating_sub(1) / 4)
        })
    }

    /// Asynchronous stores: whether the view, with this worker's outcomes the store
    /// does not have yet (those of the write in flight and the delta), trips now
    /// (`error`: the last outcome is an error) — and the state the local breaker then
    /// decides on until the write carrying them lands ([`Replica::moved_locally`]).
    /// The view lags this worker's own outcomes by a round trip or more (found by
    /// review: a lone process on Redis ran about ten failing calls where the rule
    /// said five, and any number while no answer came back). The write still decides
    /// for the fleet: merged with other workers' successes it may not trip.
    pub(crate) fn trips_ahead(
        &mut self,
        ctx: &Ctx,
        error: bool,
    ) -> Option<(BreakerState, Transition)> {
        self.ahead_due = false;
        self.check_ahead = false;
        if ctx.shared.mode != SyncMode::Async || self.forced.is_some() {
            return None;
        }
        let v = self.view.as_ref()?;
        let g = v.breaker.generation();
        if v.breaker.phase() != Phase::Closed || self.delta.generation != g {
            return None;
        }
        let now = ctx.now;
        let counts = self.known_counts(v, now, true);
        let mut run = v.breaker.consecutive_failures();
        if self.sent.generation == g {
            run = self.sent.streak.apply(run);
        }
        let mut trial = v.breaker.clone();
        trial.set_consecutive_failures(self.delta.streak.apply(run));
        let cfg = &ctx.config.breaker;
        // As in `apply`: a shared window holds outcomes only (no calls running).
        let t = trial.check_trip(cfg, &mut Pending(counts), now, ctx.rand, error);
        // Short of a volume (or warming up): the next success runs the rules again.
        self.check_ahead = t.is_none() && trial.check_on_success();
        let t = t?;
        // The write carrying them goes at once (a success that tripped is not urgent).
        self.flush_now = true;
        Some((trial, t))
    }

    /// Asynchronous stores: this worker's probe result applied to the view ahead of
    /// the store (a failed probe reopens it, the last success it needs closes it) —
    /// the state the local breaker decides on until the write carrying the result
    /// lands. Without it the transition came a round trip later: after the call's
    /// `failure` its fallback ran while the breaker still read half-open (opossum
    /// emits `open` first), and a process whose probe closed the breaker refused its
    /// next call (found by review, with Redis 200 ms away).
    pub(crate) fn probe_ahead(&self, ctx: &Ctx) -> Option<(BreakerState, Transition)> {
        if ctx.shared.mode != SyncMode::Async || self.forced.is_some() {
            return None;
        }
        let v = self.view.as_ref()?;
        if v.breaker.phase() != Phase::HalfOpen {
            return None;
        }
        let mut trial = v.breaker.clone();
        let mut window = Pending(self.known_counts(v, ctx.now, true));
        let cfg = &ctx.config.breaker;
        // Every result of this worker's the store does not have yet, as `apply` will
        // (two probes of one worker reach a success threshold of two together).
        let mut moved = None;
        for &(pass, outcome, at) in &self.probe_results {
            let p = Pass::from_raw(pass);
            moved = trial
                .on_result(cfg, &mut window, p, outcome, at.max(pass.2), ctx.rand)
                .or(moved);
        }
        Some((trial, moved?))
    }

    /// [`Replica::trips_ahead`] is due after the outcome just recorded.
    #[inline(always)]
    pub(crate) fn ahead_due(&self) -> bool {
        self.ahead_due
    }

    /// Records a refusal (`SHORT_CIRCUITED` or a bulkhead rejection, which is an
    /// error and so is written at once).
    pub(crate) fn record_refusal(&mut self, kind: EventKind, now: Nanos) {
        if self.delta.is_empty() {
            if let Some(v) = &self.view {
                self.delta.reset(v.breaker.generation());
            }
        }
        self.delta.record(kind, now);
        let urgent = matches!(
            kind,
            EventKind::SemaphoreRejected | EventKind::ThreadPoolRejected
        );
        self.mark(now, urgent);
    }

    /// Whether a held slot is free for one more local call: held beyond the calls in
    /// flight (a reserve), and the ledger last seen within `max`. The ledger holds
    /// more than `max` when slots were granted under a higher limit (the limit was
    /// lowered by a reconfiguration) or a reclaimed entry healed: a reserve is then
    /// not used until it is released on the next tick and slots are acquired again
    /// under CAS. While the total seen is within `max` (under the current limit),
    /// other workers can only acquire what is left beside this worker's entry, so
    /// a reserve is safe even with a view that is not fresh (a call timing out in
    /// `poll`).
    pub(crate) fn has_free_slot(&self, ctx: &Ctx, max: u32) -> bool {
        if self.slots_held <= ctx.in_flight || self.limit_changed {
            return false;
        }
        let ttl = ms_to_ns(ctx.shared.lease_ttl_ms);
        self.view.as_ref().is_none_or(|v| {
            v.ledger.others_in_flight(self.me(ctx), ctx.now, ttl) + u64::from(self.slots_held)
                <= u64::from(max)
        })
    }

    /// This replica's id in the state's receipts and slot ledger: the worker's, salted
    /// with the key's name, so keys of one worker bound to one slot (the overflow
    /// slot) each keep their own entry (found by a fuzz target: under one id each
    /// wrote its own count over the other's, and one worker ran 4 calls under a
    /// limit of 2).
    fn me(&self, ctx: &Ctx) -> u64 {
        ctx.owner ^ self.salt
    }

    /// The policy was reconfigured: distrust the ledger seen until the store
    /// confirms it again, and ask for that read now.
    pub(crate) fn reconfigured(&mut self) {
        self.limit_changed = true;
        self.read_wanted = true;
    }

    /// Gives a probe lease back unused (the call never ran).
    pub(crate) fn return_probe(&mut self, pass: RawPass, now: Nanos) {
        if let Some((generation, slot, _)) = leased(pass) {
            self.lease_returns.push((generation, slot));
            self.mark(now, true);
        }
    }

    /// Writes `to` as the key's phase at the next write (at once).
    pub(crate) fn force(&mut self, to: Phase, now: Nanos) {
        self.forced = Some(to);
        self.mark(now, true);
    }

    /// A forced open or closed phase waits to be written: the key's local breaker,
    /// forced at once, decides until the write lands (an operator's `open()` refuses
    /// from that moment, not a round trip later). A forced half-open (a host's
    /// restore) waits for the store: its probes need the fleet's leases.
    #[inline]
    pub(crate) fn forcing(&self) -> bool {
        matches!(self.forced, Some(Phase::Open | Phase::Closed)) || self.behind != 0
    }

    /// The key's local breaker moved (a trip, a close) on outcomes the store does not
    /// have yet: it decides until a write carrying them lands. A view met meanwhile
    /// lacks them (found by review: a process that tripped while its first write was
    /// out met that write's closed state and reported `close`, admitted more failing
    /// calls, then `open` again).
    pub(crate) fn moved_locally(&mut self) {
        self.behind = 1;
    }

    /// Whether the local breaker still decides after [`Replica::moved_locally`].
    pub(crate) fn behind(&self) -> bool {
        self.behind != 0
    }

    /// A forced phase waits to be written.
    #[inline]
    pub(crate) fn force_pending(&self) -> bool {
        self.forced.is_some()
    }

    #[inline]
    fn mark(&mut self, now: Nanos, urgent: bool) -> bool {
        if self.dirty_at.is_none() {
            self.dirty_at = Some(now);
        }
        if urgent {
            self.flush_now = true;
        }
        urgent
    }

    /// Reads the view's write rules at `now` ([`Replica::hot`], [`Replica::sparse`]);
    /// outcomes recorded before a read showed the window sparse go at once.
    fn judge(&mut self, now: Nanos) {
        let Some(v) = self.view.as_ref() else {
            return;
        };
        (self.hot, self.sparse) = v.write_rules(now);
        if self.sparse && !self.delta.is_empty() {
            self.flush_now = true;
        }
    }

    /// Writes what is pending at the next `poll_io` instead of at the next flush, and
    /// gives back what the process holds beyond its `in_flight` calls (a slot
    /// reserve, unused probe leases): a host letting the key go (shutdown, a reload).
    pub(crate) fn let_go(&mut self, in_flight: u32, now: Nanos) {
        if self.dirty_at.is_some() || !self.delta.is_empty() {
            self.flush_now = true;
        }
        if self.slots_held > in_flight {
            self.release_due = true;
        }
        if !self.leases.is_empty() {
            for l in core::mem::take(&mut self.leases) {
                self.lease_returns.push((l.generation, l.slot));
            }
            self.mark(now, true);
        }
    }

    /// Periodic work at `now` (nothing before the backoff of a failed round ends):
    /// flushes due, reserve release and heartbeats, slots for
    /// waiters, unused leases back, time-driven transitions, async refreshes.
    pub(crate) fn tick(&mut self, ctx: &Ctx) {
        let now = ctx.now;
        if now < self.backoff_until {
            return;
        }
        let flush = ms_to_ns(ctx.shared.flush_ms);
        if self.dirty_at.is_some_and(|d| now >= flush_at(ctx, d)) {
            self.flush_now = true;
        }
        if self.slots_held > 0 {
            let reserve = self.slots_held > ctx.in_flight;
            let beat = now.saturating_sub(self.last_heartbeat) >= ms_to_ns(ctx.shared.heartbeat_ms);
            if (reserve && now.saturating_sub(self.last_heartbeat) >= flush) || beat {
                self.release_due = true;
            }
        }
        if ctx.waiters > 0 && self.slots_held <= ctx.in_flight && ctx.bulkhead_shared().is_some() {
            self.slots_wanted = ctx.waiters;
        }
        let mut returned = false;
        let hold = self.lease_hold(ctx);
        let leases = core::mem::take(&mut self.leases);
        for l in leases {
            if now.saturating_sub(l.arrived) >= hold || now >= self.lease_due(ctx, &l) {
                self.lease_returns.push((l.generation, l.slot));
                returned = true;
            } else {
                self.leases.push(l);
            }
        }
        if returned {
            self.mark(now, true);
        }
        if let Some(v) = &self.view {
            if v.breaker
                .next_deadline(&ctx.config.breaker)
                .is_some_and(|d| now >= d)
            {
                self.poll_due = true;
            }
        }
        if ctx.shared.mode == SyncMode::Async
            && now >= self.backoff_until
            && self
                .read_at
                .is_none_or(|t| now.saturating_sub(t) >= ms_to_ns(ctx.shared.sync_ms()))
        {
            self.read_wanted = true;
        }
    }

    /// The next time [`Replica::tick`] has work, if any (never before the backoff
    /// of a failed or contended round ends; nothing already pending counts).
    pub(crate) fn next_wake(&self, ctx: &Ctx) -> Option<Nanos> {
        let flush = ms_to_ns(ctx.shared.flush_ms);
        let mut next: Option<Nanos> = None;
        let mut at = |t: Nanos| next = Some(next.map_or(t, |n: Nanos| n.min(t)));
        if let (Some(d), false) = (self.dirty_at, self.flush_now) {
            at(flush_at(ctx, d));
        }
        if self.slots_held > 0 && !self.release_due {
            // `tick` releases a reserve (slots beyond those in flight) after
            // `flush_ms` and beats every `heartbeat_ms`: wake for the one that
            // applies. (Waking at `flush_ms` while every held slot is in use did
            // nothing and left the wake in the past, so a host polling at
            // `next_deadline()` spun until the heartbeat was due.)
            let heartbeat = ms_to_ns(ctx.shared.heartbeat_ms);
            let wait = if self.slots_held > ctx.in_flight {
                flush.min(heartbeat)
            } else {
                heartbeat
            };
            at(self.last_heartbeat.saturating_add(wait));
        }
        if ctx.waiters > 0 && self.slots_held <= ctx.in_flight && ctx.bulkhead_shared().is_some() {
            // Local calls wait for a slot: `tick` asks the ledger again every
            // `flush_ms` (a slot freed by another worker is used within one tick).
            at(self.read_at.unwrap_or(ctx.now).saturating_add(flush));
        }
        let hold = self.lease_hold(ctx);
        for l in &self.leases {
            at(l.arrived.saturating_add(hold).min(self.lease_due(ctx, l)));
        }
        if !self.poll_due {
            let cfg = &ctx.config.breaker;
            if let Some(d) = self
                .view
                .as_ref()
                .and_then(|v| v.breaker.next_deadline(cfg))
            {
                at(d);
            }
        }
        // All of the above ends in a write: none before a contended round's wait ends.
        let mut next = next.map(|n| n.max(self.write_after));
        let mut at = |t: Nanos| next = Some(next.map_or(t, |n: Nanos| n.min(t)));
        if ctx.shared.mode == SyncMode::Async && !self.read_wanted {
            let sync = ms_to_ns(ctx.shared.sync_ms());
            at(self.read_at.map_or(ctx.now, |t| t.saturating_add(sync)));
        }
        if ctx.now < self.backoff_until && self.io == IoState::Idle && self.io_pending() {
            // A request held back by the backoff goes out when it ends.
            at(self.backoff_until);
        }
        if ctx.now < self.write_after && self.io == IoState::Idle && self.write_wanted() {
            at(self.write_after);
        }
        if let (IoState::InFlight { at: sent, .. }, SyncMode::Async) = (self.io, ctx.shared.mode) {
            // Given up if not answered by then (`Replica::lost`).
            at(sent.saturating_add(ms_to_ns(ctx.shared.stale_ms)));
        }
        next.map(|n| n.max(self.backoff_until))
    }

    /// With a fresh view: whether an admission or a quiet outcome can leave the
    /// key's scheduled wake and I/O as they are — nothing wanted from the store and
    /// no slots held (the reserve's release wake depends on the calls in flight).
    /// Everything [`Replica::next_wake`] reads is then unchanged, or changed only
    /// towards a later wake.
    #[inline]
    pub(crate) fn idle(&self) -> bool {
        self.slots_held == 0 && !self.wants_io()
    }

    /// Whether outcomes are waiting for the next flush (its wake is scheduled).
    #[inline]
    pub(crate) fn is_dirty(&self) -> bool {
        self.dirty_at.is_some()
    }

    #[inline(always)]
    fn write_wanted(&self) -> bool {
        self.leases_wanted > 0
            || self.slots_wanted > 0
            || !self.probe_results.is_empty()
            || !self.lease_returns.is_empty()
            || self.poll_due
            || self.release_due
            || self.forced.is_some()
            || self.claim
            || (self.flush_now && !self.delta.is_empty())
    }

    /// Whether the replica has a request for the host (and none in flight).
    #[inline(always)]
    pub(crate) fn wants_io(&self) -> bool {
        self.io == IoState::Idle && self.io_pending()
    }

    /// Whether a read, a write or a slot search is waiting to be sent.
    #[inline(always)]
    fn io_pending(&self) -> bool {
        self.read_wanted
            || matches!(self.bind, Bind::Probing { .. })
            || self.write_wanted()
            || self.doubt.is_some()
    }

    /// Builds the next request (`seq` identifies it): `Some(None)` a read of
    /// [`Replica::store_key`], `Some(Some(expect))` a write of [`Replica::written`];
    /// `None` when nothing is wanted.
    pub(crate) fn next_op(&mut self, ctx: &Ctx, seq: u32) -> Option<Option<Expect>> {
        // Nothing goes out before the backoff of a failed or contended round ends
        // (a store that fails at once would otherwise be asked again at once, forever);
        // `next_wake` wakes the key when it ends.
        if self.io != IoState::Idle || ctx.now < self.backoff_until {
            return None;
        }
        if let Bind::Probing { step, .. } = self.bind {
            self.set_probe_key(step, ctx.config.keys.max_keys);
            self.io = IoState::InFlight {
                seq,
                write: false,
                at: ctx.now,
            };
            return Some(None);
        }
        let writes = self.write_wanted() && ctx.now >= self.write_after;
        if writes && self.token_known && self.doubt.is_none() {
            self.seq = self.seq.wrapping_add(1);
            let attempt = self.apply(ctx);
            let buf = core::mem::take(&mut self.written);
            self.written = codec::encode_into(Kind::KeyState, &attempt.state, buf);
            self.written_is_view = false;
            if attempt.delta {
                // The delta leaves with this write; what is recorded from now on
                // waits for the next one.
                core::mem::swap(&mut self.delta, &mut self.sent);
                self.delta.reset(self.sent.generation);
                self.flush_now = false;
            }
            self.attempt = Some(attempt);
            if self.behind == 1 {
                self.behind = 2;
            }
            self.io = IoState::InFlight {
                seq,
                write: true,
                at: ctx.now,
            };
            return Some(Some(self.expect));
        }
        if self.read_wanted || writes || self.doubt.is_some() {
            self.io = IoState::InFlight {
                seq,
                write: false,
                at: ctx.now,
            };
            return Some(None);
        }
        None
    }

    /// The request in flight if the host has not answered it within `stale_ms`: it
    /// is given up as failed, and a late answer is ignored (found by review: a host
    /// that dropped one answer — a Redis call abandoned by its own timeout — left the
    /// key off the store for good, never expiring, with nothing reported).
    pub(crate) fn lost(&self, shared: &SharedConfig, now: Nanos) -> Option<u32> {
        match self.io {
            IoState::InFlight { seq, at, .. }
                if shared.mode == SyncMode::Async
                    && now.saturating_sub(at) >= ms_to_ns(shared.stale_ms) =>
            {
                Some(seq)
            }
            _ => None,
        }
    }

    /// Whether `seq` is the request this replica waits for.
    pub(crate) fn awaits(&self, seq: u32) -> bool {
        matches!(self.io, IoState::InFlight { seq: s, .. } if s == seq)
    }

    /// Takes the store's answer to the request in flight.
    pub(crate) fn on_answer(&mut self, ctx: &Ctx, answer: Answer<'_>) -> Effects {
        let mut fx = Effects::default();
        let IoState::InFlight { write, at, .. } = self.io else {
            return fx;
        };
        self.io = IoState::Idle;
        let confirmed = self.read_at;
        if let Bind::Probing { step, free } = self.bind {
            self.on_probe(ctx, step, free, answer, &mut fx);
        } else if write {
            self.on_write(ctx, answer, &mut fx);
        } else {
            self.on_read(ctx, answer, &mut fx);
        }
        // What the answer confirms is as old as the request: freshness counts from
        // when it left (found by review: counted from the answer, a reply held up in a
        // busy host confirmed a view up to `stale_ms` old for `stale_ms` more).
        if self.read_at != confirmed && self.read_at == Some(ctx.now) {
            self.confirmed_at = at.min(ctx.now);
        }
        fx
    }

    fn fail(&mut self, ctx: &Ctx, code: u32, fx: &mut Effects) {
        self.failures = self.failures.saturating_add(1);
        self.failing_since.get_or_insert(ctx.now);
        let base = ms_to_ns(ctx.shared.flush_ms.min(ctx.shared.sync_ms()).max(1));
        let shift = self.failures.min(6);
        let cap = ms_to_ns(ctx.shared.sync_ms()).saturating_mul(8).max(base);
        self.backoff_until = ctx.now.saturating_add((base << shift).min(cap));
        // The failure after which the confirmed view goes stale before the next try
        // says so (once per run of failures: reads that work between failed writes do
        // not start another): the key runs on its local breaker until an answer. A
        // request given up unanswered (`LOST`) says so each time (one per `stale_ms`
        // at most). The first failure of a run with a status names it, stale or not
        // (found by an on-call review: a write too large for the store read as "no
        // answer within stale_ms", its status never told).
        let stale = self.read_at.is_some()
            && self.stale_told != self.failing_since
            && !self.fresh_at(ctx.shared, self.backoff_until);
        // (Stale already at the first failure — a synchronous store — the next one
        // says so.)
        let first = code != LOST && self.failed_told != Some(code);
        fx.issue = Some(if !first && (stale || code == LOST) {
            self.stale_told = self.failing_since;
            Issue::Stale
        } else {
            self.failed_told = Some(code);
            Issue::Failed(code)
        });
        self.give_up_round();
        self.read_wanted = false;
    }

    /// Degraded end of a round: wanted leases and slots are not granted (calls are
    /// refused), everything recorded stays pending for the next round.
    fn give_up_round(&mut self) {
        self.attempts = 0;
        self.attempt = None;
        self.leases_wanted = 0;
        self.slots_wanted = 0;
        self.poll_due = false;
        self.flush_now = false;
        self.anticipate = false;
    }

    fn on_probe(
        &mut self,
        ctx: &Ctx,
        step: u32,
        free: Option<(u32, Expect)>,
        answer: Answer<'_>,
        fx: &mut Effects,
    ) {
        let max_keys = ctx.config.keys.max_keys;
        let index = self.probe_index(step, max_keys);
        let idle = ms_to_ns(ctx.config.keys.idle_ms);
        let mut free = free;
        let mut end = false;
        match answer {
            Answer::Found { value, token } => {
                match codec::decode::<KeyState>(Kind::KeyState, value) {
                    Ok(s) if s.name == *self.name => {
                        self.bind = Bind::Slot(index);
                        self.set_store_key();
                        self.adopt_state(ctx, s, token, fx);
                        if self.anticipate {
                            self.anticipate(ctx);
                        }
                        return;
                    }
                    Ok(s) => {
                        if free.is_none() && s.touched_at.saturating_add(idle) <= ctx.now {
                            free = Some((index, Expect::Token(token)));
                        }
                    }
                    Err(DecodeError::FutureVersion(_)) => {}
                    Err(e) => {
                        fx.issue = Some(Issue::Invalid(e));
                        if free.is_none() {
                            free = Some((index, Expect::Token(token)));
                        }
                    }
                }
            }
            Answer::NotFound => {
                if free.is_none() {
                    free = Some((index, Expect::Absent));
                }
                end = true;
            }
            Answer::Failed { code } => {
                self.fail(ctx, code, fx);
                return;
            }
            Answer::Written { .. } | Answer::Conflict { .. } => {}
        }
        let step = step + 1;
        if !end && step < PROBE_LIMIT.min(max_keys) {
            self.bind = Bind::Probing { step, free };
            return;
        }
        match free {
            Some((i, expect)) => {
                self.bind = Bind::Slot(i);
                self.expect = expect;
                self.token_known = true;
                self.claim = true;
                self.view = Some(KeyState::new(&self.name, ctx.config, ctx.now));
                self.sparse = true; // an empty window
            }
            None => {
                self.bind = Bind::Overflow;
                self.read_wanted = true;
                // Every `heartbeat_ms`, then less often while every slot stays taken
                // (each search reads up to 32 slots; found by review).
                let wait = ms_to_ns(ctx.shared.heartbeat_ms)
                    .saturating_mul(1 << self.reprobes.min(10))
                    .min(ms_to_ns(ctx.config.keys.idle_ms).max(ms_to_ns(ctx.shared.heartbeat_ms)));
                self.reprobes = self.reprobes.saturating_add(1);
                self.reprobe_at = ctx.now.saturating_add(wait);
            }
        }
        self.set_store_key();
        if self.claim && self.anticipate {
            self.anticipate(ctx);
        }
    }

    #[inline(never)]
    fn restart_probing(&mut self) {
        if self.doubt.take().is_some() {
            // The slot holds another state now: whatever landed there is gone.
            self.unsend();
        }
        self.bind = Bind::Probing {
            step: 0,
            free: None,
        };
        self.view = None;
        self.token_known = false;
        // Our last write is no view now (found by review: a key re-probing back into the
        // overflow slot read its own bytes, took them for the view it no longer had,
        // and wrote a fresh state over every key's counts and slots there).
        self.written_is_view = false;
        self.claim = false;
        self.read_at = None;
        self.leases.clear();
    }

    /// A read was answered: the store's failures are over — unless a write of ours
    /// failed and nothing has landed since (found by review: Redis refusing writes,
    /// out of memory, while reads worked; each read reset the count, so the failed
    /// write's retry never counted as the second failure and `failed` came every
    /// 400 ms).
    fn reads_worked(&mut self) {
        if self.write_failed_at.is_none() {
            self.failures = 0;
            self.failing_since = None;
            self.failed_told = None;
        }
    }

    /// Notes the stored window's current epoch, if it moved.
    fn saw_ring(&mut self, s: &KeyState, now: Nanos) {
        let e = s.window.0.current_epoch();
        if e != self.ring_seen.0 {
            self.ring_seen = (e, now);
        }
    }

    fn adopt_state(&mut self, ctx: &Ctx, mut s: KeyState, token: u64, fx: &mut Effects) {
        self.settle_doubt(s.receipts.seq(self.me(ctx)), ctx.now);
        // The store went back in time — an older snapshot restored, a replica promoted
        // behind its primary: its breaker is of an earlier generation than one this
        // worker saw, and its last write is older than that view's (a key made again
        // since, by another worker, is newer: it stands). As for a store restarted
        // empty (`fresh_state`), an open or half-open breaker read within `stale_ms`
        // stays — the breaker only, with this worker's probe results and the probes
        // restarted; the rest is the store's — and is written back (found by review: a
        // restored snapshot closed a tripped fleet, which sent 60 more calls to the
        // failing upstream).
        let stale = ms_to_ns(ctx.shared.stale_ms);
        let back = self.view.as_ref().is_some_and(|v| {
            newer(v.breaker.generation(), s.breaker.generation())
                && v.touched_at > s.touched_at
                && v.breaker.phase() != Phase::Closed
                && self
                    .read_at
                    .is_some_and(|r| ctx.now.saturating_sub(r) <= stale)
        });
        if back {
            self.carry_breaker(ctx, &mut s);
            self.poll_due = true;
        }
        if s.breaker.bound(&ctx.config.breaker, ctx.now) {
            // Written back brought in, so the store heals for every worker.
            self.poll_due = true;
        }
        let before = self
            .view
            .as_ref()
            .map(|v| (v.breaker.phase(), v.breaker.generation()));
        let after = (s.breaker.phase(), s.breaker.generation());
        if let Some((from, g)) = before {
            if g != after.1 && from != after.0 {
                fx.transitions.push(Transition {
                    from,
                    to: after.0,
                    at: ctx.now,
                    generation: after.1,
                    reason: TransitionReason::Observed,
                });
            }
        }
        // Ledger truth: what this owner holds there (a reclaimed entry heals on the
        // next write).
        self.saw_ring(&s, ctx.now);
        self.view = Some(s);
        self.judge(ctx.now);
        self.expect = Expect::Token(token);
        self.token_known = true;
        if !back {
            // (A breaker the store contradicted is not confirmed by this read.)
            self.read_at = Some(ctx.now);
        }
        self.written_is_view = false;
        self.reads_worked();
        // The store holds this key's state: the next write builds on it. (A claim
        // pending from a lost key — another worker re-created it first, and the
        // claim's write conflicted — would otherwise write a fresh state over it
        // and drop that worker's merged outcomes.)
        self.claim = false;
        fx.adopted = true;
    }

    fn on_read(&mut self, ctx: &Ctx, answer: Answer<'_>, fx: &mut Effects) {
        match answer {
            Answer::Found { value, token } => {
                self.read_wanted = false;
                self.limit_changed = false;
                if self.delta.is_empty() && self.attempt.is_none() && self.doubt.is_none() {
                    // Nothing of ours is missing from the stored state: it decides.
                    self.write_failed_at = None;
                }
                self.reads_worked();
                if self.token_known && self.expect == Expect::Token(token) && self.view.is_some() {
                    self.read_at = Some(ctx.now);
                    // The same state, a later time: its window may have emptied (found
                    // by review: after a lull successes still waited for the flush).
                    self.judge(ctx.now);
                } else if self.written_is_view && value == self.written.as_slice() {
                    self.expect = Expect::Token(token);
                    self.token_known = true;
                    self.read_at = Some(ctx.now);
                    self.judge(ctx.now);
                } else {
                    match codec::decode::<KeyState>(Kind::KeyState, value) {
                        Ok(s) if s.name == self.slot_name() => self.adopt_state(ctx, s, token, fx),
                        Err(e @ DecodeError::FutureVersion(_))
                            if matches!(self.bind, Bind::Overflow) =>
                        {
                            // Newer code owns the overflow slot too (every slot was
                            // taken when probing ended here): probing again would loop.
                            // Degrade as on a store failure and read it again later.
                            fx.issue = Some(Issue::Invalid(e));
                            self.failures = self.failures.saturating_add(1);
                            let cap = ms_to_ns(ctx.shared.sync_ms().max(ctx.shared.flush_ms))
                                .saturating_mul(8);
                            self.backoff_until = ctx.now.saturating_add(cap);
                            self.give_up_round();
                            self.read_wanted = false;
                            return;
                        }
                        // The overflow slot always holds the overflow key's state:
                        // another name there is foreign bytes.
                        Ok(_) if matches!(self.bind, Bind::Overflow) => {
                            self.reset_invalid(ctx, DecodeError::Payload, token, fx);
                        }
                        Ok(_) | Err(DecodeError::FutureVersion(_)) => {
                            // Another key took the slot over (ours was idle), or newer
                            // code owns it: find a slot again.
                            self.restart_probing();
                            return;
                        }
                        Err(e) => self.reset_invalid(ctx, e, token, fx),
                    }
                }
            }
            Answer::NotFound => {
                // The store lost the key (restarted empty) or never had it.
                let fresh = self.fresh_state(ctx);
                self.read_wanted = false;
                self.reads_worked();
                self.limit_changed = false;
                self.settle_doubt(None, ctx.now);
                if self
                    .view
                    .as_ref()
                    .is_some_and(|v| v.breaker.phase() != fresh.breaker.phase())
                {
                    fx.adopted = true;
                }
                self.view = Some(fresh);
                self.sparse = true;
                self.expect = Expect::Absent;
                self.token_known = true;
                self.read_at = Some(ctx.now);
                self.claim = true;
                self.slots_held = 0;
                self.leases.clear();
                fx.adopted = true;
            }
            Answer::Failed { code } => {
                self.fail(ctx, code, fx);
                return;
            }
            Answer::Written { .. } | Answer::Conflict { .. } => return,
        }
        if self.anticipate {
            self.anticipate(ctx);
        }
    }

    /// Unreadable bytes in our slot: start from a fresh state, replacing them on the
    /// next write.
    fn reset_invalid(&mut self, ctx: &Ctx, e: DecodeError, token: u64, fx: &mut Effects) {
        self.settle_doubt(None, ctx.now);
        fx.issue = Some(Issue::Invalid(e));
        // Damaged bytes say nothing about the upstream: an open or half-open breaker
        // this worker saw stays so (found by review: it closed the fleet's).
        self.view = Some(self.fresh_state(ctx));
        self.sparse = true;
        self.expect = Expect::Token(token);
        self.token_known = true;
        self.read_at = Some(ctx.now);
        self.claim = true;
        fx.adopted = true;
    }

    /// A sync host reads right before admission: ask now for the lease or slot that
    /// admission is about to need, so the same host call can grant it.
    fn anticipate(&mut self, ctx: &Ctx) {
        let Some(v) = &self.view else { return };
        if v.breaker.phase() == Phase::Closed && ctx.bulkhead_shared().is_none() {
            return; // runs, and needs neither a lease nor a slot (a closed breaker has no timer)
        }
        let cfg = &ctx.config.breaker;
        let mut trial = v.breaker.clone();
        let _ = trial.poll(cfg, ctx.now, ctx.rand);
        let runs = match trial.phase() {
            Phase::Closed => true,
            Phase::Open => false,
            Phase::HalfOpen => {
                let g = trial.generation();
                let held = self.leases.iter().any(|l| l.generation == g);
                if !held && trial.would_admit(cfg, ctx.now) && cfg.mode == BreakerMode::Normal {
                    self.leases_wanted = self.leases_wanted.max(1);
                }
                held || self.leases_wanted > 0
            }
        };
        // A reserve whose release is pending is gone once the write lands (the same
        // write that would grant the slot): ask for one then too, or the admission
        // right after finds no slot while the process has room.
        let held = if self.release_due {
            self.slots_held.min(ctx.in_flight)
        } else {
            self.slots_held
        };
        if runs && ctx.bulkhead_shared().is_some() && held <= ctx.in_flight && ctx.waiters == 0 {
            self.slots_wanted = self.slots_wanted.max(1);
        }
    }

    fn on_write(&mut self, ctx: &Ctx, answer: Answer<'_>, fx: &mut Effects) {
        match answer {
            Answer::Written { token } => {
                let Some(mut a) = self.attempt.take() else {
                    return;
                };
                self.landed(&mut a, ctx.now, false);
                let asked = a.asked;
                fx.transitions = a.transitions;
                self.saw_ring(&a.state, ctx.now);
                self.view = Some(a.state);
                self.judge(ctx.now);
                self.written_is_view = true;
                fx.written = true;
                match token {
                    Some(t) => {
                        self.expect = Expect::Token(t);
                        self.token_known = true;
                    }
                    None => self.token_known = false,
                }
                self.read_at = Some(ctx.now);
                self.leases_wanted = self.leases_wanted.saturating_sub(asked);
                self.slots_wanted = 0;
                self.release_due = false;
                self.limit_changed = false;
                self.poll_due = false;
                self.claim = false;
                self.attempts = 0;
                self.failures = 0;
                self.failing_since = None;
                self.failed_told = None;
            }
            Answer::Conflict { current, absent } => {
                self.attempt = None;
                self.unsend();
                self.attempts += 1;
                if self.attempts < ctx.shared.cas_attempts
                    && self.claim
                    && matches!(self.bind, Bind::Slot(_))
                    && self.read_at.is_none()
                {
                    // Lost the race for a free slot: look again (at most
                    // `cas_attempts` times a round).
                    self.restart_probing();
                    return;
                }
                if self.attempts >= ctx.shared.cas_attempts {
                    fx.issue = Some(Issue::Contended);
                    self.give_up_round();
                    self.token_known = false;
                    let flush = ms_to_ns(ctx.shared.flush_ms);
                    // Writers that lost together must not come back together: an
                    // async store's contended round backs off 0.5–1.5 × `flush_ms`.
                    // Only its writes: reads go on every `sync_ms` (found by a fleet
                    // stress test: with reads held back too, a trip elsewhere went
                    // unseen for up to 1.5 × `flush_ms` and a stale view probed alone).
                    let wait = match ctx.shared.mode {
                        SyncMode::Sync => flush,
                        SyncMode::Async => flush / 2 + ctx.rand % flush.max(1),
                    };
                    self.write_after = ctx.now.saturating_add(wait);
                    return;
                }
                match current {
                    Some((value, token)) => {
                        self.on_read(ctx, Answer::Found { value, token }, fx);
                    }
                    None if absent => self.on_read(ctx, Answer::NotFound, fx),
                    None => self.token_known = false,
                }
            }
            // A read's answer to a write (a host's bug) is a failed write (found by
            // review: its outcomes were neither written nor pending again).
            Answer::Failed { .. } | Answer::Found { .. } | Answer::NotFound => {
                let code = match answer {
                    Answer::Failed { code } => code,
                    _ => LOST,
                };
                // A write carrying a receipt may have landed: the next read tells.
                match self.attempt.take() {
                    Some(a) if a.receipt.is_some() => {
                        self.doubt = Some(a);
                    }
                    _ => self.unsend(),
                }
                self.token_known = false;
                self.write_failed_at.get_or_insert(ctx.now);
                self.fail(ctx, code, fx);
            }
        }
    }

    /// Write `a` landed: what it carried (its delta, probe results, returned leases,
    /// a forced phase) is in the store and forgotten here; the leases and slots it
    /// granted are held. `late`: known from its receipt after its answer was lost —
    /// every outcome recorded since stays pending (an outage's worth, not a round
    /// trip's).
    fn landed(&mut self, a: &mut Attempt, now: Nanos, late: bool) {
        self.write_failed_at = None;
        if self.forced == a.forced {
            self.forced = None;
        }
        // A write built after the local breaker moved has landed (its reply, or its
        // receipt read back after the reply was lost: found by review, the key stayed
        // on its local breaker for good), or what it moved on no longer moves anything
        // (a delta of an older generation is carried below): the store decides again.
        let behind = self.behind;
        self.behind = 0;
        if a.delta {
            let g = a.state.breaker.generation();
            self.sent.reset(g);
            // Kept: outcomes recorded while the write was in flight (flushed on the
            // next tick, or at once if urgent); those of an earlier generation than
            // the store's now are counted and move nothing (found by review: they
            // were dropped).
            if self.delta.is_empty() {
                self.delta.reset(g);
                self.dirty_at = None;
                // A tick during the round trip asked for this write again: left set,
                // the next healthy outcome went out at once, not at its flush.
                self.flush_now = false;
            } else {
                if self.delta.generation != g && !late {
                    self.delta.carry(g);
                }
                self.dirty_at = Some(now);
            }
        }
        self.probe_results
            .drain(..a.probes.min(self.probe_results.len()));
        self.lease_returns
            .drain(..a.returns.min(self.lease_returns.len()));
        if !self.probe_results.is_empty() || !self.lease_returns.is_empty() {
            self.dirty_at.get_or_insert(now);
        }
        for l in &mut a.leases {
            l.arrived = now;
        }
        self.leases.extend(core::mem::take(&mut a.leases));
        if a.slots != self.slots_held || self.release_due {
            self.last_heartbeat = now;
        }
        self.slots_held = a.slots;
        // Built before the move, with the outcomes it moved on still to write: it
        // waits for their write.
        if behind == 1 && !self.delta.is_empty() {
            self.behind = 1;
        }
    }

    /// Ends the doubt about a write whose reply was lost, from the sequence number of
    /// this replica's receipt in the state the store holds now (`None`: no receipt,
    /// or the key's state is gone or unreadable, so the write did not land there):
    /// landed as if its reply had come (unused leases it granted go back on the next
    /// tick), or not, and its delta is pending again.
    #[inline(never)]
    fn settle_doubt(&mut self, stored: Option<u32>, now: Nanos) {
        let Some(mut a) = self.doubt.take() else {
            return;
        };
        if a.receipt.is_some() && stored == a.receipt {
            self.landed(&mut a, now, true);
        } else {
            self.unsend();
        }
    }

    /// The write in flight did not land: the delta it carried is pending again,
    /// ahead of what was recorded since. Of two generations the newer goes on; the
    /// earlier one's counts ride along ([`Delta::carry`]: found by review, they were
    /// dropped).
    fn unsend(&mut self) {
        if self.sent.is_empty() {
            return;
        }
        let (g, later) = (self.sent.generation, self.delta.generation);
        if self.delta.is_empty() || later == g {
            self.sent.join(&self.delta);
            core::mem::swap(&mut self.delta, &mut self.sent);
            self.delta.generation = g;
        } else if newer(g, later) {
            self.delta.carry(g);
            self.sent.join(&self.delta);
            core::mem::swap(&mut self.delta, &mut self.sent);
        } else {
            self.sent.carry(later);
            self.delta.join(&self.sent);
        }
        self.sent.reset(self.delta.generation);
        // Retry as the round would have (a failed round clears it again).
        self.flush_now = true;
    }

    /// A new state for the key (claimed: new, or lost by the store): an empty window
    /// and a closed breaker, except that an open or half-open breaker stays so if the
    /// store confirmed it within `stale_ms` of now or of when the store began failing
    /// (an outage: it is the last state the fleet agreed on) — the upstream it tripped
    /// on has not recovered because the store restarted empty or lost the key (found by
    /// review: a half-open fleet closed at once), while an idle worker's old view says
    /// nothing now. This worker's own probe results settle the leases the view holds
    /// first (a failed probe still reopens); then half-open starts its probes again
    /// under a new generation.
    fn fresh_state(&self, ctx: &Ctx) -> KeyState {
        let mut s = KeyState::new(self.slot_name(), ctx.config, ctx.now);
        let stale = ms_to_ns(ctx.shared.stale_ms);
        let known = self.read_at.is_some_and(|r| {
            ctx.now.saturating_sub(r) <= stale
                || self
                    .failing_since
                    .is_some_and(|f| f.saturating_sub(r) <= stale)
        });
        if known
            && self
                .view
                .as_ref()
                .is_some_and(|v| v.breaker.phase() != Phase::Closed)
        {
            self.carry_breaker(ctx, &mut s);
        }
        s
    }

    /// Puts the view's breaker into `s` (a state the store lost or took back), with
    /// this worker's unwritten probe results; a half-open one restarts its probes.
    fn carry_breaker(&self, ctx: &Ctx, s: &mut KeyState) {
        let Some(v) = self.view.as_ref() else {
            return;
        };
        let b = &ctx.config.breaker;
        s.breaker = v.breaker.clone();
        // (Returned leases need not be: half-open gives every lease up below.)
        for &(pass, outcome, at) in &self.probe_results {
            let p = Pass::from_raw(pass);
            let _ = s
                .breaker
                .on_result(b, &mut s.window, p, outcome, at.max(pass.2), ctx.rand);
        }
        if s.breaker.phase() == Phase::HalfOpen {
            s.breaker.restart_probes();
        }
    }

    /// The state a write would store now, and what it would grant.
    fn apply(&self, ctx: &Ctx) -> Attempt {
        let cfg = ctx.config;
        let now = ctx.now;
        let rand = ctx.rand;
        // A claim's view is already the state to claim (new, or rebuilt once by
        // `fresh_state` when the key was lost or damaged).
        let mut s = match &self.view {
            Some(v) => v.clone(),
            None => self.fresh_state(ctx),
        };
        s.conform(cfg);
        let mut ts = Vec::new();
        let mut push = |t: Option<Transition>| {
            if let Some(t) = t {
                ts.push(t);
            }
        };
        let b = &cfg.breaker;
        let delta = !self.delta.is_empty();
        // A state this write creates (claimed: new, or re-created after the store
        // lost the key) has no history the delta's generation could be older or newer
        // than: the outcomes recorded under the last state are its.
        let same = self.delta.generation == s.breaker.generation()
            || (self.claim && s.breaker.phase() == Phase::Closed);
        if delta && (same || newer(s.breaker.generation(), self.delta.generation)) {
            // Outcomes of an earlier generation (one another worker's trip ended) are
            // counted; they never move the breaker.
            // Still for a window of this worker's time: the clock it is on went quiet.
            let (seen, since) = self.ring_seen;
            let window = ms_to_ns(cfg.metrics.rolling_window_ms);
            let still = (seen == s.window.0.current_epoch() && now.saturating_sub(since) >= window)
                .then_some(since);
            s.window.0.merge_at(&self.delta.window.0, now, still);
        }
        if delta && same {
            let run = self.delta.streak.apply(s.breaker.consecutive_failures());
            s.breaker.set_consecutive_failures(run);
            // Successes add volume: the merged window may now reach a rule's volume
            // threshold at its rate (the flag a local key keeps is not on the wire).
            let volume = self.delta.has_success() && b.volume_rules();
            if self.delta.may_trip() || volume {
                let error = self.delta.has_error();
                push(s.breaker.check_trip(b, &mut s.window, now, rand, error));
            }
        }
        for &(pass, outcome, at) in &self.probe_results {
            let p = Pass::from_raw(pass);
            push(
                s.breaker
                    .on_result(b, &mut s.window, p, outcome, at.max(pass.2), rand),
            );
        }
        for &(generation, slot) in &self.lease_returns {
            let p = Pass::new(generation, slot, now);
            push(
                s.breaker
                    .on_result(b, &mut s.window, p, Outcome::Cancelled, now, rand),
            );
        }
        if let Some(to) = self.forced {
            push(s.breaker.force(b, &mut s.window, to, now, rand));
        }
        push(s.breaker.poll(b, now, rand));
        let mut leases = Vec::new();
        for _ in 0..self.leases_wanted {
            match s.breaker.take_probe(b, now) {
                Ok(p) => {
                    let (generation, slot, _) = p.into_raw();
                    leases.push(Lease {
                        generation,
                        slot,
                        arrived: now,
                        granted: now,
                    });
                }
                Err(_) => break,
            }
        }
        let ttl = ms_to_ns(ctx.shared.lease_ttl_ms);
        let receipt = match ctx.shared.mode {
            SyncMode::Async => s
                .receipts
                .stamp(self.me(ctx), self.seq, now, ttl)
                .then_some(self.seq),
            SyncMode::Sync => {
                s.receipts.clear();
                None
            }
        };
        let slots = match ctx.bulkhead_shared() {
            Some(max) => {
                let keep = if self.release_due {
                    ctx.in_flight
                } else {
                    self.slots_held
                }
                .max(ctx.in_flight);
                s.ledger
                    .acquire(self.me(ctx), keep, self.slots_wanted, max, now, ttl)
            }
            None => {
                // No bulkhead (`set_policy` took it away): nothing is held (found by
                // review: a slot held then was kept for good, written every `flush_ms`,
                // and the key never went quiet).
                s.ledger.prune(now, ttl);
                s.ledger.set(self.me(ctx), 0, now);
                0
            }
        };
        s.touched_at = now;
        Attempt {
            state: s,
            transitions: ts,
            leases,
            asked: self.leases_wanted,
            slots,
            probes: self.probe_results.len(),
            returns: self.lease_returns.len(),
            delta,
            receipt,
            forced: self.forced,
        }
    }

    /// Whether no outcome waits to be written and no request is in flight (slots it
    /// holds may remain).
    pub(crate) fn is_flushed(&self) -> bool {
        self.io == IoState::Idle
            && !self.write_wanted()
            && self.delta.is_empty()
            && self.doubt.is_none()
    }

    /// Whether the replica has nothing in flight or pending, and holds nothing in the
    /// store (it may be dropped).
    pub(crate) fn is_quiet(&self) -> bool {
        self.io == IoState::Idle
            && !self.write_wanted()
            && self.delta.is_empty()
            && self.doubt.is_none()
            && self.slots_held == 0
            && self.leases.is_empty()
    }
}

/// When outcomes pending since `dirty` are flushed: `flush_ms` later; for an
/// asynchronous store up to a quarter earlier, spread by owner and round, so a fleet
/// whose writes became due together (one burst of traffic, timers started at once)
/// does not send them together and lose CAS races to each other in a row.
fn flush_at(ctx: &Ctx, dirty: Nanos) -> Nanos {
    let flush = ms_to_ns(ctx.shared.flush_ms);
    let early = match ctx.shared.mode {
        SyncMode::Sync => 0,
        SyncMode::Async => spread(ctx.owner ^ dirty) % (flush / 4 + 1),
    };
    dirty.saturating_add(flush - early)
}

/// A well-mixed 64-bit value of `x` (splitmix64's finaliser).
fn spread(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The counts of a view with a worker's pending outcomes added: the window a trial
/// trip rule reads ([`Replica::trips_ahead`]).
struct Pending(Counts);

impl Health for Pending {
    fn health(&mut self, _now: Nanos) -> HealthSnapshot {
        self.0.health()
    }

    fn reset_counts(&mut self) {
        self.0 = Counts::default();
    }
}

/// The store lease a pass ran on (its slot unmarked), if it ran on one: a probe the
/// local breaker issued while the view did not decide holds a slot of that breaker
/// only — settled against the store, it ended another worker's lease of the same
/// generation and slot, and one more probe ran fleet-wide (found by review).
pub(crate) fn leased(pass: RawPass) -> Option<RawPass> {
    let (generation, probe, started_at) = pass;
    (probe != NO_PROBE && probe & LEASED != 0).then_some((generation, probe & !LEASED, started_at))
}
