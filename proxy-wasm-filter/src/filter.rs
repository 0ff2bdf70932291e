//! The proxy-wasm contexts: one [`Root`] per plugin (config, tick, and the callbacks of
//! its HTTP streams), holding the plugin's [`Worker`] with the core's
//! [`Engine`]: every resilience decision is the engine's; this module translates
//! Envoy's callbacks, headers and shared data into engine calls and back.

use fusewire_core::json::Quoted;
use std::rc::Rc;

use fusewire_core::cache::{CacheEvent, Lead, Lookup, ScopeId, Wait};
use fusewire_core::{
    Cause, Engine, Event, EventKind, KeyId, Nanos, Outcome, Permit, Phase, PolicyId, ShortCircuit,
    Start, Ticket, TransitionReason,
};

use crate::classify::{grpc_timeout, FlagSet, Observed};
use crate::config::{Plugin, Policy, Reason, Reply};
use crate::host::{self, Level};
use crate::idmap::IdMap;
use crate::matcher::{KeySpec, Part, RequestView};
use crate::metrics::{self, Extra, KeyMetrics, MetricsTable};
use crate::replay::{
    any_directive, private, replay_headers, replayable, Capture, Replay, Response, UNSHARED,
};
use crate::slottable::SlotTable;
use crate::vecmap::VecMap;

/// What a stream callback tells the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Go on with the next filter.
    Continue,
    /// Stop iteration (ignored by Envoy after a local reply).
    Pause,
}

/// A stream as the worker tracks it, from its context's creation to `on_log`.
enum Call {
    /// Created; its request headers not seen yet.
    New,
    /// Nothing held: no policy matched, answered at once, or its call ended with its
    /// response (until `on_log`).
    Passed,
    /// Holding a slot; forwarded upstream. A collapse leader settles `lead` with the
    /// captured response; `capture` also feeds the stale copy.
    Running {
        key: KeyId,
        permit: Permit,
        started: Nanos,
        obs: Observed,
        req: Request,
        lead: Option<Lead>,
        /// Boxed, as `failed`: only collapse and stale policies capture, and the
        /// call table moves every entry it stores.
        capture: Option<Box<Capture>>,
        /// A failed response for `lead`'s waiters, handed over in `finish`: after the
        /// permit is completed, so a promoted waiter finds the slot free.
        failed: Option<Box<Response>>,
        /// `lead`'s waiters go upstream on their own once the call ends (its
        /// response is not for them; a bulkhead's slot is then free for them).
        unshared: bool,
    },
    /// Paused in its request headers until its body has arrived (policy `pi`'s
    /// `admit_after_body`): nothing held, nothing counted. `bytes`: body bytes seen.
    Awaiting { pi: usize, bytes: u64 },
    /// Paused in its request headers, waiting for a slot.
    Queued {
        ticket: Ticket,
        req: Request,
        lead: Option<Lead>,
    },
    /// Paused in its request headers, waiting for its collapse leader's response.
    Following {
        key: KeyId,
        wait: Wait,
        req: Request,
    },
    /// Answered by the filter after it started (timed out, its wait expired, a
    /// collapsed reply); a timed-out call still holds its permit for the late result.
    Answered { permit: Option<Permit> },
}

/// What a call needs to be answered again later: its policy, request key (for
/// collapsing and stale copies) and whether it is gRPC.
#[derive(Clone, Debug, Default)]
struct Request {
    pi: usize,
    key: Vec<u8>,
    /// A gRPC request (`content-type: application/grpc*`).
    rpc: bool,
    /// It gets gRPC-shaped fallbacks (a gRPC request and `fallback.grpc`).
    grpc: bool,
    /// A GET of a policy with stale-if-error.
    get: bool,
    /// It carries `authorization` or `cookie`: its response is never kept as a stale
    /// copy (another client would get it).
    creds: bool,
    /// The whole request reached the filter (its end of stream): a `tick` deadline
    /// counts from there, as Envoy's route timeout does.
    sent: bool,
    /// The client's own deadline (`grpc-timeout`, ns; 0: none).
    grpc_timeout: u64,
    /// When that deadline, counted from when the upstream had the whole request, has
    /// passed, less 5 % for the header's travel (0: not running with its request
    /// sent). A client reset after it is a TIMEOUT: queue time and a slow upload are
    /// not the upstream's.
    deadline: Nanos,
}

impl Request {
    /// Starts the client-deadline clock: the upstream has the whole request now.
    fn sent_at(&mut self, now: Nanos) {
        let t = self.grpc_timeout;
        if t > 0 {
            self.deadline = now.saturating_add(t - t / 20).max(1);
        }
    }
}

/// The request key of stale copies: `key` without its credentials mark, which only
/// collapsing needs (a copy is kept from anonymous requests only, and served to every
/// GET: found by review, credentialed ones never found it).
fn stale_key(key: &[u8]) -> &[u8] {
    key.split_last().map_or(&[], |(_, k)| k)
}

/// Per-VM state shared by the root and every stream context.
#[derive(Default)]
pub struct Worker {
    engine: Option<Engine>,
    plugin: Option<Rc<Plugin>>,
    policies: Vec<PolicyId>,
    calls: IdMap<Call>,
    by_call: SlotTable<u32>,
    by_wait: VecMap<(usize, u64), u32>,
    replays: Vec<Replay>,
    metrics: MetricsTable,
    metric_names: VecMap<String, usize>,
    key_metrics: VecMap<u64, usize>,
    /// The last `(key, slot)` of `key_metrics` looked up.
    last_metrics: LastMetrics,
    rng: u64,
    owner: Option<u64>,
    /// [`clock_offset`], once agreed (None: time is the wall clock).
    clock: Option<u64>,
    key_buf: String,
    /// Per policy: its key, when the key template does not depend on the request.
    static_keys: Vec<Option<KeyId>>,
    /// Per policy: whether this worker has logged that its key table is full.
    overflow_told: Vec<bool>,
    /// A request awaiting its body (`admit_after_body`) has had a body callback here.
    bodies_seen: bool,
    /// While no body has: when the first request began awaiting its body, and its
    /// policy (the warning below is due 5 s later).
    awaiting_since: Option<(Nanos, usize)>,
    /// The warning that no body reached the filter has been logged.
    no_body_told: bool,
    /// Some policy keeps collapse stores (their events are drained in `settle`).
    collapses: bool,
    /// Collapse events are being handled: a nested `settle` leaves new ones to that
    /// loop (a refused, promoted waiter promotes the next one: handled in turn, not
    /// by recursion, which would exhaust the stack with many waiters).
    collapsing: bool,
    /// The stream whose callback is running, while Envoy reads its returned action.
    current: Option<u32>,
    /// The host logs `Debug` (read on configure and every tick): requests no policy
    /// matches are logged with the names they were matched on.
    debug: bool,
    /// Local replies for other streams decided in `current`'s callback: Envoy's stop
    /// flag is the VM's, so a reply sent there would also stop `current`. Sent from
    /// the next callback whose action Envoy ignores (`on_log`, the tick).
    deferred: Vec<Deferred>,
}

/// A local reply kept for [`Worker::deferred`].
struct Deferred {
    ctx: u32,
    status: u32,
    body: Rc<Vec<u8>>,
    headers: Rc<Vec<u8>>,
    grpc_status: i32,
    details: &'static str,
}

/// The last key whose metrics slot was looked up, and that slot.
#[derive(Clone, Copy)]
struct LastMetrics(u64, usize);

impl Default for LastMetrics {
    fn default() -> Self {
        NO_METRICS
    }
}

/// No key ([`KeyId`]s are below 2^53).
const NO_METRICS: LastMetrics = LastMetrics(u64::MAX, 0);

/// Agrees a number with every VM of the process through shared data at `key`: reads
/// it and, when `next(read)` is Some, writes that under CAS (again after a conflict).
/// Returns the number written, or the one read when `next` keeps it; None when the
/// store cannot be used.
fn agree(key: &str, next: impl Fn(Option<u64>) -> Option<u64>) -> Option<u64> {
    use fusewire_core::shared::{Expect, Io, Op, OwnedAnswer};
    for _ in 0..16 {
        let read = Io {
            id: fusewire_core::shared::IoId::from_raw(0),
            key,
            op: Op::Read,
        };
        let (now, expect) = match host::shared_data(&read) {
            OwnedAnswer::Found(v, t) => (
                <[u8; 8]>::try_from(v.as_slice())
                    .ok()
                    .map(u64::from_le_bytes),
                Expect::Token(t),
            ),
            OwnedAnswer::NotFound => (None, Expect::Absent),
            _ => return None,
        };
        let Some(want) = next(now) else {
            return now;
        };
        let bytes = want.to_le_bytes();
        let write = Io {
            op: Op::Write {
                value: &bytes,
                expect,
            },
            ..read
        };
        if let OwnedAnswer::Written(_) = host::shared_data(&write) {
            return Some(want);
        }
    }
    None
}

/// A process-unique id for this VM's ledger entries: the next value of a counter in
/// shared data (VMs of one Envoy share no randomness: in tests they even share the
/// clock). Falls back to `rand` if the counter cannot be updated. Two VMs that both
/// find the counter absent do not both take 1: the first write creates it, the second
/// is refused and reads again ([`fusewire_core::shared::Expect::proxy_wasm_set`]).
fn owner_id(namespace: &str, rand: u64) -> u64 {
    agree(&fusewire_core::text!("{namespace}/owners"), |n| {
        Some(n.unwrap_or(0) + 1)
    })
    .unwrap_or(rand | 1 << 63)
}

/// What every VM of the process adds to the host's monotonic clock to keep time: the
/// wall clock less the monotonic one when the first VM started, agreed through shared
/// data. Time then never steps with the wall clock, is one timeline for VMs started
/// before and after a step, and reads as wall-clock time, as earlier releases (which
/// kept time on the wall clock) stored it while both run side by side during a config
/// drain. None without a monotonic clock: time is the wall clock.
fn clock_offset() -> Option<u64> {
    let mono = host::monotonic_ns()?;
    // Without a wall-clock reading nothing is proposed (a 0 stored would hold every
    // VM on the since-boot clock): an offset already agreed is taken, else 0 for now.
    let guess = host::wall_ns().map(|w| w.saturating_sub(mono));
    let agreed = agree(CLOCK_KEY, |o| o.is_none().then_some(guess).flatten());
    Some(agreed.or(guess).unwrap_or(0))
}

/// Where the VMs of a process agree [`clock_offset`] (versioned, as every key whose
/// meaning old and new code might read differently during a drain).
const CLOCK_KEY: &str = "fusewire/clock/v1";

/// Distinct key names that get their own metrics per policy (Envoy stats are never
/// freed): past this, keys share the policy's `~overflow` metrics.
fn metric_cap(policy: &Policy) -> usize {
    policy.core.keys.max_keys as usize + 1
}

impl Worker {
    #[inline(always)]
    fn now(&self) -> Nanos {
        // The monotonic clock where the host has one (see `clock_offset`): on the wall
        // clock a step back froze every breaker and deadline for its length, a step
        // forward timed out every call in flight (found by a review of clock steps).
        match (self.clock, host::monotonic_ns()) {
            (Some(offset), Some(t)) => t.saturating_add(offset),
            _ => host::wall_ns().unwrap_or(0),
        }
    }

    #[inline(always)]
    fn rand(&mut self) -> u64 {
        // xorshift64*
        if self.rng == 0 {
            self.rng = host::wall_ns().unwrap_or(0x9E37_79B9_7F4A_7C15) | 1;
        }
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Installs a validated config. The engine (and every key's state, which lives in
    /// shared data anyway) is kept while the shared knobs are unchanged; policies are
    /// matched by name.
    fn configure(&mut self, plugin: Plugin) -> bool {
        self.debug = host::debug_enabled();
        if self.clock.is_none() {
            self.clock = clock_offset();
        }
        let rand = self.rand();
        let same = self
            .engine
            .as_ref()
            .is_some_and(|e| e.shared_config() == Some(&plugin.shared));
        if !same {
            let owner = self
                .owner
                .unwrap_or_else(|| owner_id(&plugin.shared.namespace, rand));
            self.owner = Some(owner);
            // Key names come from requests: the name hash is seeded (see `with_seed`)
            // with the host's randomness where there is some (wasip1), else from the
            // draw above, a function of the VM's start time (no second draw: the
            // harness's runs stay as they were; found by review).
            let seed = host::random_u64().unwrap_or(rand.rotate_left(29) ^ 0x9e37_79b9_7f4a_7c15);
            match Engine::shared(plugin.shared.clone(), owner) {
                Ok(e) => self.engine = Some(e.with_seed(seed)),
                Err(e) => {
                    host::log(Level::Error, &fusewire_core::text!("fusewire: shared.{e}"));
                    return false;
                }
            }
        }
        let Some(engine) = self.engine.as_mut() else {
            return false;
        };
        self.policies.clear();
        for p in &plugin.policies {
            let id = match engine.policy(&p.name) {
                Some(id) => engine.set_policy(id, p.core.clone()).map(|()| id),
                None => engine.add_policy(&p.name, p.core.clone()),
            };
            match id {
                Ok(id) => self.policies.push(id),
                Err(e) => {
                    host::log(
                        Level::Error,
                        &fusewire_core::text!("fusewire: policy {}: {e}", Quoted(&p.name)),
                    );
                    return false;
                }
            }
        }
        // Stored responses are per worker and cheap to lose: a reload starts them anew.
        let seed = self.rand();
        self.replays = plugin
            .policies
            .iter()
            .map(|p| Replay::new(p, seed))
            .collect();
        self.collapses = self.replays.iter().any(|r| r.collapse.is_some());
        self.static_keys = vec![None; plugin.policies.len()];
        self.overflow_told = vec![false; plugin.policies.len()];
        self.by_wait = VecMap::default();
        self.plugin = Some(Rc::new(plugin));
        true
    }

    /// The metrics slot of `key` of `policy` (defined on first use; past the VM's cap
    /// the policy's keys share its `~overflow` metrics: see [`metrics::own_stats`]).
    fn metrics_of(&mut self, key: KeyId, policy: &Policy) -> Option<usize> {
        if let Some(i) = self.metrics_slot(key) {
            return Some(i);
        }
        let mut name = self.engine.as_ref()?.key_name(key)?.to_string();
        let prefix = self
            .plugin
            .as_ref()
            .map_or("fusewire", |p| p.metrics_prefix.as_str());
        // The cap is per metrics prefix too: two plugins of one VM (Istio's CLIENT and
        // SERVER) with policies of one name but their own prefixes write apart (found
        // by review: they shared one cap).
        if self.metric_names.get(&name).is_none()
            && !metrics::own_stats(
                &fusewire_core::text!("{prefix} {}", policy.name),
                &fusewire_core::text!("{prefix} {name}"),
                metric_cap(policy),
            )
        {
            name = fusewire_core::text!("{}/~overflow", policy.name);
        }
        let i = match self.metric_names.get(&name) {
            Some(&i) => i,
            None => {
                let m = KeyMetrics::define(prefix, &name);
                // A breaker that never transitions (`forced_open`) still reports its phase.
                if let Some(phase) = self.engine.as_ref().and_then(|e| e.phase(key)) {
                    m.state(phase);
                }
                let i = self.metrics.push(m);
                self.metric_names.insert(name, i);
                i
            }
        };
        self.key_metrics.insert(key.to_raw(), i);
        Some(i)
    }

    /// The metrics slot of `key`, if defined (the last key asked for is remembered:
    /// a request asks for its key's slot several times).
    #[inline(always)]
    fn metrics_slot(&mut self, key: KeyId) -> Option<usize> {
        let raw = key.to_raw();
        if self.last_metrics.0 == raw {
            return Some(self.last_metrics.1);
        }
        let i = *self.key_metrics.get(&raw)?;
        self.last_metrics = LastMetrics(raw, i);
        Some(i)
    }

    #[inline(always)]
    fn metrics(&mut self, key: KeyId) -> Option<&mut KeyMetrics> {
        let i = self.metrics_slot(key)?;
        self.metrics.get_mut(i)
    }

    /// Performs the engine's shared-data requests, then reports the events it decided
    /// (`timed`: also run time-driven work, on the tick) and the collapse events of
    /// every policy.
    fn settle_with(&mut self, now: Nanos, timed: bool) {
        // Quiet (the common case after a healthy call): nothing to perform or report.
        let busy = |e: &Engine| timed || e.has_io() || e.has_events();
        if self.engine.as_ref().is_some_and(busy) {
            self.drain_engine(now, timed);
        }
        if !self.collapses || std::mem::replace(&mut self.collapsing, true) {
            return;
        }
        let mut more = true;
        while more {
            more = false;
            for pi in 0..self.replays.len() {
                while let Some(ev) = self.replays.get_mut(pi).and_then(|r| r.poll(now)) {
                    more = true;
                    self.collapse_event(pi, ev, now);
                }
            }
        }
        self.collapsing = false;
    }

    /// The engine's store requests and events (`timed`: with its time-driven work).
    fn drain_engine(&mut self, now: Nanos, timed: bool) {
        let rand = self.rand();
        let Some(engine) = self.engine.as_mut() else {
            return;
        };
        while let Some(io) = engine.poll_io(now, rand) {
            let (id, answer) = (io.id, host::shared_data(&io));
            engine.io_done(id, answer.as_answer(), now, rand);
        }
        loop {
            let ev = match self.engine.as_mut() {
                Some(e) if timed => e.poll(now, rand),
                Some(e) => e.take_event(),
                None => None,
            };
            let Some(ev) = ev else { break };
            self.event(ev, now);
            if let Some(e) = self.engine.as_mut() {
                // Events may have queued store requests (a waiter's slot).
                while let Some(io) = e.poll_io(now, rand) {
                    let (id, answer) = (io.id, host::shared_data(&io));
                    e.io_done(id, answer.as_answer(), now, rand);
                }
            }
        }
    }

    fn event(&mut self, ev: Event, now: Nanos) {
        match ev {
            Event::TimedOut { key, call } => {
                // A stream in another state keeps it (a mismatch drops nothing).
                let Some(ctx) = self.by_call.get(call) else {
                    return;
                };
                if !matches!(self.calls.get(ctx), Some(Call::Running { .. })) {
                    return;
                }
                let Some(Call::Running {
                    permit,
                    req,
                    lead,
                    started,
                    ..
                }) = self.calls.remove(ctx)
                else {
                    return;
                };
                self.calls.insert(
                    ctx,
                    Call::Answered {
                        permit: Some(permit),
                    },
                );
                if let Some(m) = self.metrics(key) {
                    m.event(EventKind::Timeout);
                    // Its latency is the time it was given (found by review: left out,
                    // the slowest calls were missing from `latency_ms`).
                    m.latency(now.saturating_sub(started) / 1_000_000);
                    m.in_flight(-1);
                }
                let why = Why {
                    reason: Reason::Timeout,
                    details: "fusewire_timeout",
                };
                self.fall_back(ctx, key, why, &req, lead, now);
            }
            Event::Dequeued { key, permit } => {
                let ctx = self.by_call.get(permit.id());
                let queued = |c: u32| matches!(self.calls.get(c), Some(Call::Queued { .. }));
                let Some(ctx) = ctx.filter(|&c| queued(c)) else {
                    // Nobody waits for the slot: it goes back.
                    let _ = self.engine.as_mut().map(|e| e.cancel(permit, now, 0));
                    return;
                };
                let Some(Call::Queued { req, lead, .. }) = self.calls.remove(ctx) else {
                    return;
                };
                self.run(ctx, key, permit, req, lead, now);
                if let Some(m) = self.metrics(key) {
                    m.in_flight(1);
                }
                self.resume(ctx);
            }
            Event::Refused { key, call, refusal } => {
                let Some(ctx) = self.by_call.get(call) else {
                    return;
                };
                if !matches!(self.calls.get(ctx), Some(Call::Queued { .. })) {
                    return;
                }
                let Some(Call::Queued { req, lead, .. }) = self.calls.remove(ctx) else {
                    return;
                };
                self.calls.insert(ctx, Call::Answered { permit: None });
                if let Some(m) = self.metrics(key) {
                    m.event(refusal.event);
                }
                let why = Why {
                    reason: Reason::Rejected,
                    details: details(refusal.cause),
                };
                self.fall_back(ctx, key, why, &req, lead, now);
            }
            Event::Transition { key, transition: t } => {
                let here = t.reason != TransitionReason::Observed;
                if let Some(m) = self.metrics(key) {
                    m.transition(t.to, here);
                }
                if let (true, Some(e)) = (here, self.engine.as_ref()) {
                    let name = e.key_name(key).unwrap_or("?");
                    let mut msg = fusewire_core::text!(
                        "fusewire: breaker {} {} ({})",
                        Quoted(name),
                        t.to.name(),
                        t.reason.name()
                    );
                    // The figures behind an opening by a rate rule (found by an
                    // on-call review: a bulkhead's rejections tripped a healthy
                    // upstream's breaker, and nothing said so).
                    let h = (t.to == Phase::Open).then(|| e.health(key, now)).flatten();
                    match (t.reason, h) {
                        (TransitionReason::ErrorPercentage, Some(h)) => {
                            let n = |k: EventKind| h.counts.get(k.index()).copied().unwrap_or(0);
                            let rejected =
                                n(EventKind::SemaphoreRejected) + n(EventKind::ThreadPoolRejected);
                            msg = fusewire_core::text!(
                                "{msg}: {} errors in {} calls, {rejected} of them bulkhead rejections",
                                h.errors, h.total
                            );
                        }
                        (TransitionReason::SlowCallRate, Some(h)) => {
                            msg = fusewire_core::text!(
                                "{msg}: {} slow calls in {}",
                                h.slow,
                                h.executions
                            );
                        }
                        _ => {}
                    }
                    host::log(Level::Info, &msg);
                }
            }
            Event::KeyExpired { key } => {
                self.key_metrics.remove(&key.to_raw());
                self.last_metrics = NO_METRICS;
            }
            Event::Store { key, issue } => {
                let name = self
                    .engine
                    .as_ref()
                    .and_then(|e| e.key_name(key))
                    .unwrap_or("?");
                host::log(
                    Level::Warn,
                    &fusewire_core::text!("fusewire: key {}: shared data: {issue}", Quoted(name)),
                );
            }
        }
    }

    /// A waiter's collapse leader answered (or went away).
    fn collapse_event(&mut self, pi: usize, ev: CacheEvent, now: Nanos) {
        let id = match &ev {
            CacheEvent::Ready { wait, .. } | CacheEvent::Abandoned { wait, .. } => wait.to_raw(),
            CacheEvent::Promoted { lead } => lead.id().to_raw(),
            CacheEvent::Removed { .. } => return,
        };
        let Some(ctx) = self.by_wait.remove(&(pi, id)) else {
            if let CacheEvent::Promoted { lead } = ev {
                let _ = self
                    .replays
                    .get_mut(pi)
                    .and_then(|r| r.collapse.as_mut())
                    .map(|c| c.cancel_lead(lead, now));
            }
            return;
        };
        let Some(Call::Following { key, req, .. }) = self.calls.remove(ctx) else {
            return;
        };
        match ev {
            CacheEvent::Ready { entry, .. } => {
                let fan = self
                    .replays
                    .get_mut(pi)
                    .and_then(|r| r.collapsed(entry, now));
                let Some(fan) = fan else {
                    self.admit(ctx, key, req, None, now, true);
                    return;
                };
                self.calls.insert(ctx, Call::Answered { permit: None });
                if let Some(e) = self.engine.as_mut() {
                    e.record(key, EventKind::Collapsed, now);
                }
                if let Some(m) = self.metrics(key) {
                    m.event(EventKind::Collapsed);
                }
                // Every waiter holds the same bytes, not a copy.
                if self.deferring(ctx) {
                    self.deferred.push(Deferred {
                        ctx,
                        status: fan.status,
                        body: fan.body.clone(),
                        headers: fan.headers.clone(),
                        grpc_status: -1,
                        details: "fusewire_collapsed",
                    });
                } else if host::set_effective_context(ctx) == host::OK {
                    local_response(
                        fan.status,
                        &fan.body,
                        &fan.headers,
                        -1,
                        "fusewire_collapsed",
                    );
                }
            }
            // A range or conditional request never leads (see `start`), promoted
            // either: its 206 or 304 would answer every plain request waiting (found
            // by a security review). It runs alone; the next waiter is promoted.
            CacheEvent::Promoted { lead } if self.conditional(ctx) => {
                if let Some(c) = self.replays.get_mut(pi).and_then(|r| r.collapse.as_mut()) {
                    c.cancel_lead(lead, now);
                }
                self.admit(ctx, key, req, None, now, true);
            }
            CacheEvent::Promoted { lead } => {
                if let Some(m) = self.metrics(key) {
                    m.extra(Extra::CollapseLeader);
                }
                self.admit(ctx, key, req, Some(lead), now, true);
            }
            _ => {
                self.admit(ctx, key, req, None, now, true);
            }
        }
    }

    /// Answers stream `ctx` with a stale copy if one is fresh enough, else with the
    /// policy's fallback; a collapse leader hands the same reply to its waiters.
    fn fall_back(
        &mut self,
        ctx: u32,
        key: KeyId,
        why: Why,
        req: &Request,
        lead: Option<Lead>,
        now: Nanos,
    ) {
        let Some(plugin) = self.plugin.clone() else {
            return;
        };
        let Some(policy) = plugin.policies.get(req.pi) else {
            return;
        };
        let response = match self.fresh_copy(req, now) {
            Some(r) if !req.grpc => {
                let age = now.saturating_sub(r.at) / 1_000_000_000;
                self.send_response(ctx, &r, "stale", Some(age), "fusewire_stale");
                if let Some(m) = self.metrics(key) {
                    m.extra(Extra::StaleServed);
                }
                // Its waiters get it as the stale copy it is (until 2026-12-06 as
                // `collapsed`, with the upstream's `age` only: found by review).
                Response { stale: true, ..r }
            }
            _ => {
                let grpc = req.grpc && policy.fallback.grpc;
                let reply = policy.fallback.reply(why.reason);
                let wait = self.retry_after(reply, key, grpc, now);
                let mut headers = reply.headers.clone();
                if let Some(w) = wait {
                    headers.push(("retry-after".to_string(), w));
                }
                self.send_reply(
                    ctx,
                    why.details,
                    reply.status,
                    &headers,
                    &reply.body,
                    grpc.then_some(reply.grpc_status),
                );
                if let Some(m) = self.metrics(key) {
                    m.event(EventKind::FallbackSuccess);
                }
                Response {
                    status: reply.status,
                    headers,
                    body: reply.body.clone(),
                    at: now,
                    stale: false,
                }
            }
        };
        if let (Some(lead), Some(r)) = (lead, self.replays.get_mut(req.pi)) {
            // Waiters get the same reply, or (retry) the next one goes upstream.
            r.settle(lead, &req.key, Some(response), false, now);
        }
    }

    /// `retry-after` for `reply` (seconds, rounded up) while the breaker of `key` is
    /// open: the rest of its open period, on a 503 or 429 that does not set one.
    fn retry_after(&self, reply: &Reply, key: KeyId, grpc: bool, now: Nanos) -> Option<String> {
        if grpc
            || !matches!(reply.status, 429 | 503)
            || reply.headers.iter().any(|(k, _)| k == "retry-after")
        {
            return None;
        }
        let wait = self.engine.as_ref()?.retry_after(key, now)?;
        Some(wait.div_ceil(1_000_000_000).to_string())
    }

    fn policy_of(&self, key: KeyId) -> Option<&Policy> {
        let pid = self.engine.as_ref()?.key_policy(key)?;
        let i = self.policies.iter().position(|p| *p == pid)?;
        self.plugin.as_ref()?.policies.get(i)
    }

    fn send_reply(
        &mut self,
        ctx: u32,
        details: &'static str,
        status: u32,
        headers: &[(String, String)],
        body: &Rc<Vec<u8>>,
        grpc: Option<u32>,
    ) {
        let mut pairs: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        if grpc.is_some() {
            pairs.retain(|(k, _)| *k != "content-type");
            pairs.push(("content-type", "application/grpc"));
        }
        let mut buf = Vec::new();
        host::serialize_map(&pairs, &mut buf);
        let body = if grpc.is_some() {
            Rc::default()
        } else {
            body.clone()
        };
        self.reply(
            ctx,
            status,
            body,
            buf,
            grpc.map_or(-1, |g| g as i32),
            details,
        );
    }

    /// Replays a stored response on stream `ctx`, tagged `x-fusewire: <tag>` (and
    /// `age`, in seconds, for a stale copy).
    fn send_response(
        &mut self,
        ctx: u32,
        r: &Response,
        tag: &str,
        age: Option<u64>,
        details: &'static str,
    ) {
        let headers = replay_headers(r, tag, age);
        self.reply(ctx, r.status, r.body.clone(), headers, -1, details);
    }

    /// Whether a reply for stream `ctx` waits for [`Worker::send_deferred`]: it was
    /// decided in another stream's callback, which Envoy would stop too.
    fn deferring(&self, ctx: u32) -> bool {
        self.current.is_some_and(|c| c != ctx)
    }

    /// Sends a local reply on stream `ctx` now, or keeps it (see [`Worker::deferring`]);
    /// `details` is its response code details (`%RESPONSE_CODE_DETAILS%` in Envoy's
    /// access log).
    fn reply(
        &mut self,
        ctx: u32,
        status: u32,
        body: Rc<Vec<u8>>,
        headers: Vec<u8>,
        grpc_status: i32,
        details: &'static str,
    ) {
        if self.deferring(ctx) {
            self.deferred.push(Deferred {
                ctx,
                status,
                body,
                headers: Rc::new(headers),
                grpc_status,
                details,
            });
        } else if host::set_effective_context(ctx) == host::OK {
            local_response(status, &body, &headers, grpc_status, details);
        }
    }

    /// Sends the deferred replies of streams still waiting for them.
    #[inline(always)]
    fn send_deferred(&mut self) {
        if !self.deferred.is_empty() {
            self.send_deferred_now();
        }
    }

    #[inline(never)]
    fn send_deferred_now(&mut self) {
        for d in std::mem::take(&mut self.deferred) {
            let waiting = matches!(self.calls.get(d.ctx), Some(Call::Answered { .. }));
            if waiting && host::set_effective_context(d.ctx) == host::OK {
                local_response(d.status, &d.body, &d.headers, d.grpc_status, d.details);
            }
        }
    }

    /// Whether paused stream `ctx`'s request is a range or conditional one (read through
    /// its effective context, then the running callback's again; one that cannot be
    /// read is taken as one).
    fn conditional(&self, ctx: u32) -> bool {
        let found = host::set_effective_context(ctx) != host::OK
            || CONDITIONAL
                .iter()
                .any(|h| host::header(host::REQUEST_HEADERS, h, |_| ()).is_some());
        if let Some(c) = self.current {
            host::set_effective_context(c);
        }
        found
    }

    /// Continues paused stream `ctx` — unless its own callback is running: its
    /// returned action continues it (a `continue_stream` there re-enters Envoy).
    fn resume(&self, ctx: u32) {
        if self.current != Some(ctx) && host::set_effective_context(ctx) == host::OK {
            let s = host::continue_request();
            if s != host::OK {
                host::log(
                    Level::Warn,
                    &fusewire_core::text!("fusewire: continue_stream failed ({s})"),
                );
            }
            // The running callback's own stream again: it may still read its
            // properties (`response.flags` in `finish`).
            if let Some(c) = self.current {
                host::set_effective_context(c);
            }
        }
    }

    /// Request headers: match a policy, find the key, collapse onto an identical
    /// request in flight, or ask the engine. `awaited`: the headers of a request that
    /// awaited its body (`admit_after_body`), started now that the body is in (`end`)
    /// or `max_bytes` of it: it had a body, so it neither collapses nor waits again.
    fn start(&mut self, ctx: u32, end: bool, awaited: bool) -> Action {
        match self.calls.get_mut(ctx) {
            Some(c) if matches!(c, Call::New) => *c = Call::Passed,
            _ => return Action::Continue, // started already, or not ours
        }
        let Some(plugin) = self.plugin.clone() else {
            return Action::Continue;
        };
        let mut view = HostView::default();
        let Some(pi) = plugin
            .policies
            .iter()
            .position(|p| p.matcher.matches(&mut view))
        else {
            // No policy: untouched. At debug level, say what it was matched on (found
            // by an Istio operator's review: a policy naming a cluster the request
            // did not have protected nothing, and nothing said why).
            if self.debug {
                // Rendered as a key is (`{:?}` of a string brings ≈ 9 KB of tables).
                let said = KeySpec {
                    parts: vec![
                        Part::Lit("fusewire: no policy matched: cluster ".into()),
                        Part::Cluster,
                        Part::Lit(", route ".into()),
                        Part::Route,
                        Part::Lit(", authority ".into()),
                        Part::Authority,
                    ],
                };
                let mut msg = String::new();
                said.render("", &mut view, &mut msg);
                host::log(Level::Debug, &msg);
            }
            return Action::Continue;
        };
        let (Some(policy), Some(&pid)) = (plugin.policies.get(pi), self.policies.get(pi)) else {
            return Action::Continue;
        };
        let now = self.now();
        let rpc = is_grpc();
        // Collapsing and stale copies are for reads: no gRPC, no request body.
        let reads = policy.collapse.is_some() || policy.stale.is_some();
        let method = (reads && !rpc && end && !awaited)
            .then(|| view.header(":method"))
            .flatten();
        let mut req = Request {
            pi,
            rpc,
            grpc: policy.fallback.grpc && rpc,
            get: policy.stale.is_some() && method.as_deref() == Some("GET"),
            creds: false,
            key: Vec::new(),
            sent: end,
            grpc_timeout: 0,
            deadline: 0,
        };
        if rpc && policy.classifier.client_deadline {
            // A 0 is no deadline, as Envoy's router reads it. One under
            // `client_deadline_min_ms` counts nowhere: a client could declare
            // `grpc-timeout: 1n`, reset, and open a healthy upstream's breaker (found by
            // a security review; a floor by default kept hung upstreams from tripping
            // for clients with short deadlines, found by a gRPC review).
            if let Some(t) = view
                .header("grpc-timeout")
                .and_then(|v| grpc_timeout(v.as_bytes()))
                .filter(|&t| t >= policy.classifier.client_deadline_min)
            {
                req.grpc_timeout = t;
            }
        }
        let mut no_store = false;
        if method.is_some() {
            // Found by a security review: `x-api-key`, a client certificate, or a JWT
            // payload header (Envoy's jwt_authn and Istio remove `authorization` once
            // checked) made requests one client's that were collapsed.
            // A request that asks no cache to store its response (`cache-control:
            // no-store`, RFC 9111 §5.2.1.5) is treated the same (found by an HTTP
            // review: its response was kept and served to other clients), on any of
            // its `cache-control` lines.
            no_store = view
                .header_all("cache-control")
                .is_some_and(|v| any_directive(&v, UNSHARED.get(..1).unwrap_or_default()));
            req.creds = no_store
                || policy
                    .credential_headers
                    .iter()
                    .any(|h| view.header(h).is_some());
        }
        let mut request_key = String::new();
        if let Some((spec, m)) = policy
            .collapse
            .as_ref()
            .map(|c| &c.key)
            .or(policy.stale.as_ref().map(|s| &s.key))
            .zip(method.as_deref())
        {
            spec.render_exact(&policy.name, &mut view, &mut request_key);
            // The method is always part of the key: a GET never follows a HEAD. So are
            // the cluster and route Envoy chose: one path can reach two subsets (Istio
            // routes `end-user: jason` to v2) or two rewrites (found by an HTTP review:
            // a v2 client got v1's response). And whether it carried credentials: with
            // `allow_credentials` an anonymous request never follows a credentialed
            // one.
            for part in [Some(m.to_string()), view.cluster(), view.route()] {
                request_key.push('\0');
                request_key.push_str(part.as_deref().unwrap_or("-"));
            }
            request_key.push(if req.creds { '\x01' } else { '\x02' });
            req.key = request_key.into_bytes();
        }
        // A request that asks no cache to store its response never collapses, whatever
        // `allow_credentials` says (found by an HTTP review: it did with it on).
        let collapsible = !no_store
            && policy
            .collapse
            .as_ref()
            .zip(method.as_ref())
            .is_some_and(|(c, m)| c.methods.contains(m) && (c.allow_credentials || !req.creds))
            // A precondition a leader's 200 does not answer (412 is due when it
            // fails: found by an HTTP review) neither leads nor follows.
            && !["if-match", "if-unmodified-since"]
                .iter()
                .any(|h| view.header(h).is_some());
        let Some(engine) = self.engine.as_mut() else {
            return Action::Continue;
        };
        // A key that does not depend on the request is looked up once (again after it
        // expired: the id then names no live key of the policy).
        let known = self.static_keys.get(pi).copied().flatten();
        let key = match known.filter(|&k| engine.key_policy(k) == Some(pid)) {
            Some(k) => k,
            None => {
                policy
                    .key
                    .render(&policy.name, &mut view, &mut self.key_buf);
                let Some(k) = engine.key(pid, &self.key_buf, now) else {
                    return Action::Continue;
                };
                if engine.is_overflow(k) {
                    if let Some(told @ false) = self.overflow_told.get_mut(pi) {
                        // Once per worker and configuration (found by an on-call
                        // review: tenants sharing the overflow breaker said nothing).
                        *told = true;
                        host::log(
                            Level::Warn,
                            &fusewire_core::text!(
                                "fusewire: key table full (keys.max_keys): new names share {}",
                                Quoted(engine.key_name(k).unwrap_or("?"))
                            ),
                        );
                    }
                }
                // Not the overflow key a full table hands out: a key named otherwise.
                let own = policy.key.is_static() && engine.key_name(k) == Some(&self.key_buf);
                if let Some(s) = self.static_keys.get_mut(pi) {
                    *s = own.then_some(k);
                }
                k
            }
        };
        if self.metrics_of(key, policy).is_none() {
            return Action::Continue;
        }
        let mut lead = None;
        if collapsible {
            let lookup = self
                .replays
                .get_mut(pi)
                .and_then(|r| r.collapse.as_mut())
                .map(|c| c.lookup(ScopeId::GLOBAL, &req.key, now));
            match lookup {
                Some(Lookup::Wait(wait)) => {
                    self.by_wait.insert((pi, wait.id().to_raw()), ctx);
                    self.calls.insert(ctx, Call::Following { key, wait, req });
                    return Action::Pause;
                }
                // A range or conditional request never leads: its 206, 304 or 412 is
                // not the resource a plain request asks for. (It may follow: a full
                // 200 answers it too.) Checked here only, a header read each.
                Some(Lookup::Lead(l)) if CONDITIONAL.iter().any(|h| view.header(h).is_some()) => {
                    if let Some(c) = self.replays.get_mut(pi).and_then(|r| r.collapse.as_mut()) {
                        c.cancel_lead(l, now);
                    }
                }
                Some(Lookup::Lead(l)) => {
                    if let Some(m) = self.metrics(key) {
                        m.extra(Extra::CollapseLeader);
                    }
                    lead = Some(l);
                }
                _ => {}
            }
        }
        if !end
            && !awaited
            && policy.admit_after_body.is_some()
            && !upgrade(&mut view)
            && self.passes_breaker(key, now)
        {
            // Started once the body is in (`body_arrived`): an upload that stalls
            // holds no slot and no probe. A breaker that refuses now answers now.
            self.calls.insert(ctx, Call::Awaiting { pi, bytes: 0 });
            if !self.bodies_seen && self.awaiting_since.is_none() {
                self.awaiting_since = Some((now, pi));
            }
            return Action::Pause;
        }
        match self.admit(ctx, key, req, lead, now, false) {
            true => Action::Continue,
            false => Action::Pause,
        }
    }

    /// More of an awaiting request's body (`admit_after_body`): it is admitted at the
    /// body's end, or once `max_bytes` are in. Sizes add up: whether Envoy reports a
    /// chunk or what it buffered so far, the sum is never below what arrived, so the
    /// admission never waits past `max_bytes` (kept under Envoy's buffer limit, where
    /// flow control would stall the upload until a timeout ends it).
    fn body_arrived(&mut self, ctx: u32, size: usize, end: bool) -> Action {
        let Some(Call::Awaiting { pi, bytes }) = self.calls.get_mut(ctx) else {
            return Action::Continue;
        };
        *bytes = bytes.saturating_add(size as u64);
        self.bodies_seen = true;
        self.awaiting_since = None;
        let max = self
            .plugin
            .as_ref()
            .and_then(|p| p.policies.get(*pi))
            .and_then(|p| p.admit_after_body)
            .unwrap_or(0);
        if !end && *bytes < max {
            return Action::Pause;
        }
        // Matched, keyed and started from its headers (readable while they are
        // stopped) as if they had just arrived: a reload or a key that expired during
        // the upload changes nothing (found by review: an expired key let the request
        // past its policy).
        self.calls.insert(ctx, Call::New);
        self.start(ctx, end, true)
    }

    /// A request of policy `pi` ended awaiting its body, or has awaited it for 5 s,
    /// none of it having reached the filter. Once per worker, unless this worker has
    /// seen bodies arrive: without `allow_on_headers_stop_iteration` Envoy holds every
    /// body back, and every upload of the policy hangs until a timeout ends it (found
    /// by review: warned only when the first one ended, at Envoy's 5-minute idle
    /// timeout).
    fn no_body(&mut self, pi: usize) {
        if self.bodies_seen || self.no_body_told {
            return;
        }
        self.no_body_told = true;
        let name = self.plugin.as_ref().and_then(|p| p.policies.get(pi));
        host::log(
            Level::Warn,
            &fusewire_core::text!(
                "fusewire: policy {}: admit_after_body: no request body has reached the filter (a request ended, or waited 5 s, without one): a client that stalled, or Envoy without allow_on_headers_stop_iteration: true (1.35+), which holds every body back",
                Quoted(name.map_or("?", |p| p.name.as_str()))
            ),
        );
    }

    /// Whether `key`'s breaker would let a call through now (its view refreshed,
    /// asking for nothing: `prepare` would take this worker a probe lease or a slot
    /// for a call that may stall — found by review, every other worker was refused).
    fn passes_breaker(&mut self, key: KeyId, now: Nanos) -> bool {
        if let Some(e) = self.engine.as_mut() {
            e.refresh(key, now);
        }
        self.settle(now);
        self.engine
            .as_ref()
            .and_then(|e| e.would_admit(key, now))
            .unwrap_or(true)
    }

    /// Asks the engine to run stream `ctx` on `key`; `resume`: the stream is paused
    /// (a waiter released later), so it is continued or answered from a root callback.
    /// True if the call runs now.
    fn admit(
        &mut self,
        ctx: u32,
        key: KeyId,
        req: Request,
        lead: Option<Lead>,
        now: Nanos,
        resume: bool,
    ) -> bool {
        let rand = self.rand();
        let Some(engine) = self.engine.as_mut() else {
            return false;
        };
        engine.prepare(key, now);
        self.settle(now);
        let Some(engine) = self.engine.as_mut() else {
            return false;
        };
        let start = engine.start(key, now, rand);
        let running = matches!(start, Start::Running(_));
        match start {
            Start::Running(permit) => {
                self.run(ctx, key, permit, req, lead, now);
                if let Some(m) = self.metrics(key) {
                    m.in_flight(1);
                }
                if resume {
                    self.resume(ctx);
                }
            }
            Start::Queued(ticket) => {
                self.by_call.insert(ticket.id(), ctx);
                self.calls.insert(ctx, Call::Queued { ticket, req, lead });
            }
            Start::Refused(r) => {
                if let Some(m) = self.metrics(key) {
                    m.event(r.event);
                }
                let reason = if r.is_short_circuit() {
                    Reason::ShortCircuited
                } else {
                    Reason::Rejected
                };
                let why = Why {
                    reason,
                    details: details(r.cause),
                };
                // Answered, so a deferred reply finds it waiting (a promoted collapse
                // waiter is out of the table here: found by review, it hung).
                self.calls.insert(ctx, Call::Answered { permit: None });
                self.fall_back(ctx, key, why, &req, lead, now);
            }
        }
        self.settle(now);
        // Its own ticket may have been dequeued in `settle`: the caller continues it.
        running || matches!(self.calls.get(ctx), Some(Call::Running { .. }))
    }

    fn run(
        &mut self,
        ctx: u32,
        key: KeyId,
        permit: Permit,
        req: Request,
        lead: Option<Lead>,
        now: Nanos,
    ) {
        self.by_call.insert(permit.id(), ctx);
        let mut req = req;
        if req.sent {
            req.sent_at(now);
        } else if let Some(e) = self.engine.as_mut() {
            // Its deadline starts once the request has been sent in full.
            e.stop_timer(&permit);
        }
        let limit = self
            .plugin
            .as_ref()
            .and_then(|p| p.policies.get(req.pi))
            .map_or(0, |p| {
                let c = p
                    .collapse
                    .as_ref()
                    .filter(|_| lead.is_some())
                    .map_or(0, |c| c.max_body_bytes);
                let s = p
                    .stale
                    .as_ref()
                    .filter(|_| req.get)
                    .map_or(0, |s| s.max_body_bytes);
                c.max(s)
            });
        let capture = (limit > 0).then(|| Capture::new(limit));
        let obs = Observed::default();
        self.calls.insert(
            ctx,
            Call::Running {
                key,
                permit,
                started: now,
                obs,
                req,
                lead,
                capture: capture.map(Box::new),
                failed: None,
                unshared: false,
            },
        );
    }

    /// Response headers (and trailers): what the upstream said.
    fn observe(&mut self, ctx: u32, map: u32, end: bool) {
        if map == host::RESPONSE_HEADERS {
            let Some(Call::Running { permit, obs, .. }) = self.calls.get_mut(ctx) else {
                return; // our own reply, or not ours
            };
            obs.status = host::header_number(map, ":status");
            if let Some(e) = self.engine.as_mut() {
                e.stop_timer(permit); // the response started in time
            }
            let status = obs.status;
            if self.replace_failure(ctx, status) {
                return;
            }
        }
        let Some(Call::Running {
            obs,
            capture,
            req,
            lead,
            ..
        }) = self.calls.get_mut(ctx)
        else {
            return;
        };
        let mut release = false;
        if map == host::RESPONSE_HEADERS {
            if let Some(c) = capture.as_mut() {
                c.response.status = obs.status.unwrap_or(0);
                // Headers that could not be read are not known to be shareable.
                let got = host::header_pairs(map);
                let unread = got.is_none();
                let headers = got.unwrap_or_default();
                // The request key (collapse and stale share one) must hold every
                // header the response varies on, or another client's representation
                // (gzip, another language) would be replayed.
                let key = self
                    .plugin
                    .as_ref()
                    .and_then(|p| p.policies.get(req.pi))
                    .and_then(|p| {
                        p.collapse
                            .as_ref()
                            .map(|c| &c.key)
                            .or(p.stale.as_ref().map(|s| &s.key))
                    });
                // A private response is not handed to waiters either (found by a
                // security review: a `cache-control: private` reply to one user's
                // request reached an anonymous client that followed it).
                // Such a response is neither replayed nor kept: its waiters go
                // upstream now, not when its body ends (an event stream's, never).
                release = unread
                    || private(&headers, false)
                    || headers
                        .iter()
                        .any(|(k, v)| k == "vary" && !key.is_some_and(|key| key.covers_vary(v)));
                c.response.headers = headers.into_iter().filter(|(k, _)| replayable(k)).collect();
                // A body announced past the limit is not waited for either.
                if host::header_number(map, "content-length").is_some_and(|n| !c.fits(n as usize)) {
                    c.give_up();
                }
                release |= c.too_large;
                // Without waiters only a shared 2xx is worth its bytes (a stale copy).
                if lead.is_none() && !storable(c.response.status) {
                    *capture = None;
                }
            }
        }
        if req.rpc {
            if let Some(g) = host::header_number(map, "grpc-status") {
                obs.grpc = Some(g);
            }
            if map == host::RESPONSE_HEADERS {
                obs.grpc_response = grpc_typed(map);
            }
        }
        let ended = end || map == host::RESPONSE_TRAILERS;
        if ended {
            obs.end(req.rpc);
        }
        if release {
            self.release_waiters(ctx);
        }
        if ended {
            self.publish(ctx);
            self.end_call(ctx);
        }
    }

    /// The response on stream `ctx` will not be handed to its leader's waiters (one
    /// client's, varying on a header the key lacks, or too large to hold): it is no
    /// longer captured, and they go upstream on their own — now, or when the leader's
    /// call ends where it holds what they need (a bulkhead slot; a breaker not closed:
    /// the leader may be its probe, found by review: they were refused) or fails (its
    /// failure counts first).
    fn release_waiters(&mut self, ctx: u32) {
        let now = self.now();
        let Some(Call::Running {
            key,
            req,
            lead,
            capture,
            unshared,
            obs,
            ..
        }) = self.calls.get_mut(ctx)
        else {
            return;
        };
        *capture = None;
        let policy = self.plugin.as_ref().and_then(|p| p.policies.get(req.pi));
        let failed = |p: &Policy| {
            obs.status
                .is_some_and(|s| p.classifier.failure_status.contains(s))
        };
        if policy.is_none_or(|p| p.core.bulkhead.is_some() || failed(p))
            || self.engine.as_ref().and_then(|e| e.phase(*key)) != Some(Phase::Closed)
        {
            *unshared = true;
        } else if let (Some(lead), Some(r)) = (lead.take(), self.replays.get_mut(req.pi)) {
            r.release(lead, &req.key, now);
            self.settle(now);
        }
    }

    /// A GET's kept copy of policy `req.pi`, if one is no older than `max_stale_ms`.
    fn fresh_copy(&mut self, req: &Request, now: Nanos) -> Option<Response> {
        let max = (self.plugin.as_ref())
            .and_then(|p| p.policies.get(req.pi))
            .and_then(|p| p.stale.as_ref())
            .filter(|_| req.get)?
            .max_stale_ms
            .saturating_mul(1_000_000);
        let r = self
            .replays
            .get_mut(req.pi)?
            .stale(stale_key(&req.key), now)?;
        (now.saturating_sub(r.at) <= max).then(|| r.clone())
    }

    /// A response on stream `ctx` whose status the policy counts as a failure
    /// (`failure.status`) — the upstream's, or Envoy's router's for a reset, a connect
    /// failure or a route timeout — is replaced, as [`Worker::fall_back`] answers a
    /// refused call: by a kept copy no older than `max_stale_ms` or the fallback reply
    /// (`x-fusewire: failure`; for a route timeout the timeout reply), with
    /// `fallback.on_upstream_error`, as Hystrix runs a command's fallback on failure
    /// (not for gRPC: its failures are in `grpc-status`, and the reply would be one
    /// too); or, with `stale.on_upstream_error`, a GET's 500, 502, 503 or 504 by a
    /// kept copy only, as RFC 5861's `stale-if-error` does. The call counts as it
    /// would have; a collapse leader's waiters get the same reply, at once (found by
    /// review: they waited for the next tick), or the next one leads (`"retry"`).
    /// Whether a reply was sent.
    fn replace_failure(&mut self, ctx: u32, status: Option<u32>) -> bool {
        let Some(Call::Running { req, key, .. }) = self.calls.get(ctx) else {
            return false;
        };
        let key = *key;
        let Some(policy) = (self.plugin.as_ref())
            .and_then(|p| p.policies.get(req.pi))
            .filter(|p| status.is_some_and(|s| p.classifier.failure_status.contains(s)))
        else {
            return false;
        };
        let fallback = !req.rpc && policy.fallback.failure.is_some();
        let stale = req.get
            && matches!(status, Some(500 | 502 | 503 | 504))
            && policy.stale.as_ref().is_some_and(|st| st.on_upstream_error);
        // The router's reply to a route timeout (flag `UT`) gets the timeout reply, as a
        // tick timeout does (found by review: it got the failure reply).
        let flags = fallback
            .then(|| host::property(b"response\0flags", FlagSet::from_property))
            .flatten();
        let why = match flags.is_some_and(|f| policy.classifier.timeout_flags.intersects(f)) {
            true => Why {
                reason: Reason::Timeout,
                details: "fusewire_timeout",
            },
            false => Why {
                reason: Reason::Failure,
                details: "fusewire_failure",
            },
        };
        let req = req.clone();
        let now = self.now();
        if !(fallback || stale && self.fresh_copy(&req, now).is_some()) {
            return false;
        }
        let Some(Call::Running {
            obs, capture, lead, ..
        }) = self.calls.get_mut(ctx)
        else {
            return false;
        };
        // The upstream's response ends here for the filter: its body is not read.
        obs.ended = true;
        if let Some(f) = flags {
            obs.flags = f;
        }
        *capture = None;
        // Its waiters are settled with the reply, after the permit is completed.
        let lead = lead.take();
        self.end_call(ctx);
        self.fall_back(ctx, key, why, &req, lead, now);
        self.settle(now);
        true
    }

    /// A response body chunk.
    fn body(&mut self, ctx: u32, size: usize, end: bool) {
        let Some(Call::Running {
            capture, obs, req, ..
        }) = self.calls.get_mut(ctx)
        else {
            return;
        };
        let mut release = false;
        if let Some(c) = capture.as_mut() {
            if c.fits(size) {
                host::response_body(size, |b| match b {
                    Some(b) => c.body(b),
                    None => c.give_up(),
                });
            } else {
                c.give_up();
            }
            release = c.too_large;
        }
        if end {
            obs.end(req.rpc);
        }
        if release {
            self.release_waiters(ctx);
        }
        if end {
            self.publish(ctx);
            self.end_call(ctx);
        }
    }

    /// The whole response arrived: hand it to the waiters and keep the stale copy.
    fn publish(&mut self, ctx: u32) {
        let Some(Call::Running {
            obs,
            req,
            lead,
            capture,
            failed,
            ..
        }) = self.calls.get_mut(ctx)
        else {
            return;
        };
        // Nothing captured: no stale copy to keep and no waiter to hand it to (a
        // leader still in `lead` is settled by `finish`).
        let Some(mut cap) = capture.take() else {
            return;
        };
        let obs = *obs;
        let Some(plugin) = self.plugin.clone() else {
            return;
        };
        let Some(policy) = plugin.policies.get(req.pi) else {
            return;
        };
        let ok = matches!(
            policy.classifier.classify(&obs),
            Outcome::Success | Outcome::BadRequest
        );
        if !ok {
            // Waiters get the failure (or the next one leads) once the call is
            // complete; a failure is never kept as a stale copy.
            *failed = Some(Box::new(cap.take_response()));
            return;
        }
        let (lead, pi) = (lead.take(), req.pi);
        let req_key = req.key.clone();
        let get = req.get && !req.creds;
        let now = self.now();
        let mut r = cap.take_response();
        r.at = now;
        let Some(replay) = self.replays.get_mut(pi) else {
            return;
        };
        if get && storable(r.status) && policy.stale.is_some() && !private(&r.headers, true) {
            replay.keep(stale_key(&req_key), r.clone(), now);
        }
        if let Some(lead) = lead {
            replay.settle(lead, &req_key, Some(r), true, now);
        }
        self.settle(now);
    }

    /// The response's end of stream: the upstream call is over, so it is finished
    /// now — its slot, latency and verdict do not wait for the client to take the
    /// response (a slow client or a large download is not a slow upstream). The
    /// stream stays the root's until `on_log`, which sends the replies deferred here.
    fn end_call(&mut self, ctx: u32) {
        if let Some(c) = self.calls.get_mut(ctx) {
            let call = core::mem::replace(c, Call::Passed);
            self.finish_call(call);
        }
    }

    /// `on_log` (or, as a last resort, `on_done` / drop): [`Worker::finish_call`] of
    /// a call its response did not end.
    fn finish(&mut self, ctx: u32) {
        if let Some(call) = self.calls.remove(ctx) {
            self.finish_call(call);
        }
    }

    /// Classifies, completes, releases.
    fn finish_call(&mut self, call: Call) {
        if let Call::Awaiting { pi, bytes: 0 } = call {
            self.no_body(pi);
        }
        // An upload that never ended (`Awaiting`) was never admitted: counts nowhere.
        if matches!(call, Call::New | Call::Passed | Call::Awaiting { .. }) {
            return;
        }
        let now = self.now();
        let rand = self.rand();
        match call {
            Call::Running {
                key,
                permit,
                started,
                mut obs,
                req,
                lead,
                failed,
                unshared,
                ..
            } => {
                self.by_call.remove(permit.id());
                obs.request_incomplete = !req.sent;
                if obs.needs_flags() {
                    if let Some(f) = host::property(b"response\0flags", FlagSet::from_property) {
                        obs.flags = f;
                    }
                }
                obs.past_deadline = req.deadline != 0 && now >= req.deadline;
                let outcome = self
                    .policy_of(key)
                    .map_or(Outcome::Cancelled, |p| p.classifier.classify(&obs));
                if let Some(e) = self.engine.as_mut() {
                    e.complete(permit, outcome, now, rand);
                }
                if let Some(m) = self.metrics(key) {
                    match outcome.event() {
                        Some(k) => m.event(k),
                        None => m.extra(Extra::Cancelled),
                    }
                    if obs.status.is_some() {
                        m.latency(now.saturating_sub(started) / 1_000_000);
                    }
                    m.in_flight(-1);
                }
                if let (Some(lead), Some(r)) = (lead, self.replays.get_mut(req.pi)) {
                    if unshared {
                        r.release(lead, &req.key, now);
                    } else {
                        // A failed response goes to the waiters (or the next one
                        // leads, a slot now free); without a complete response the
                        // next one leads.
                        r.settle(lead, &req.key, failed.map(|b| *b), false, now);
                    }
                }
            }
            Call::Queued { ticket, req, lead } => {
                self.by_call.remove(ticket.id());
                if let Some(e) = self.engine.as_mut() {
                    e.cancel_ticket(ticket, now);
                }
                if let (Some(lead), Some(r)) = (lead, self.replays.get_mut(req.pi)) {
                    r.settle(lead, &req.key, None, false, now);
                }
            }
            Call::Following { wait, req, .. } => {
                self.by_wait.remove(&(req.pi, wait.id().to_raw()));
                if let Some(c) = self
                    .replays
                    .get_mut(req.pi)
                    .and_then(|r| r.collapse.as_mut())
                {
                    c.cancel_wait(wait, now);
                }
            }
            Call::Answered { permit } => {
                if let Some(p) = permit {
                    self.by_call.remove(p.id());
                    if let Some(e) = self.engine.as_mut() {
                        e.cancel(p, now, rand); // the late result of a timed-out call
                    }
                }
            }
            Call::New | Call::Passed | Call::Awaiting { .. } => {}
        }
        self.settle(now);
    }

    fn settle(&mut self, now: Nanos) {
        self.settle_with(now, false);
    }

    /// The plugin instance goes away (a reloaded config's old root, a VM shutdown):
    /// its outcomes are written, the slots and probe leases it holds beyond its calls
    /// in flight given back, its metrics handed to the host — its ticks stop with it.
    fn let_go(&mut self) {
        let now = self.now();
        if let Some(e) = self.engine.as_mut() {
            let keys: Vec<KeyId> = e.keys().collect();
            for k in keys {
                e.flush(k, now);
            }
        }
        self.settle(now);
        self.metrics.flush();
    }

    /// Tick: deadlines, shared flushes and heartbeats, collapse waits, metrics.
    fn tick(&mut self) {
        self.debug = host::debug_enabled();
        let now = self.now();
        if let Some((since, pi)) = self.awaiting_since {
            if now.saturating_sub(since) >= 5_000_000_000 {
                self.awaiting_since = None;
                self.no_body(pi);
            }
        }
        for r in &mut self.replays {
            r.tick(now);
        }
        self.settle_with(now, true);
        self.metrics.flush();
    }
}

/// `proxy_send_local_response` on the effective stream.
/// Request headers that make a request partial or conditional: its answer (206, 304,
/// 412) is not the resource a plain request asks for. (`if-range` counts only with
/// `range`.)
const CONDITIONAL: [&str; 5] = [
    "range",
    "if-none-match",
    "if-modified-since",
    "if-match",
    "if-unmodified-since",
];

/// A response worth keeping as a stale copy: a 2xx that is the whole resource (not a
/// 206 part).
fn storable(status: u32) -> bool {
    (200..300).contains(&status) && status != 206
}

fn local_response(status: u32, body: &[u8], headers: &[u8], grpc_status: i32, details: &str) {
    let s = host::send_local_response(status, details, body, headers, grpc_status);
    if s != host::OK {
        host::log(
            Level::Warn,
            &fusewire_core::text!("fusewire: send_local_response failed ({s})"),
        );
    }
}

/// Why the filter answers a call itself: which fallback reply, and the response code
/// details it goes with.
#[derive(Clone, Copy)]
struct Why {
    reason: Reason,
    details: &'static str,
}

/// The response code details of a reply to a call refused for `cause`.
fn details(cause: Cause) -> &'static str {
    match cause {
        Cause::ShortCircuit(ShortCircuit::Open) => "fusewire_open",
        Cause::ShortCircuit(ShortCircuit::ForcedOpen) => "fusewire_forced_open",
        Cause::ShortCircuit(ShortCircuit::ProbesExhausted) => "fusewire_probes_exhausted",
        Cause::ShortCircuit(ShortCircuit::Throttled) => "fusewire_throttled",
        Cause::ShortCircuit(ShortCircuit::SlowStart) => "fusewire_slow_start",
        Cause::BulkheadFull => "fusewire_bulkhead_full",
        Cause::QueueFull => "fusewire_queue_full",
        Cause::WaitExpired => "fusewire_wait_expired",
        Cause::Degraded => "fusewire_degraded",
        Cause::UnknownKey => "fusewire_unknown_key",
    }
}

/// [`RequestView`] over host calls, caching the properties it read.
#[derive(Default)]
struct HostView {
    route: Option<Option<String>>,
    cluster: Option<Option<String>>,
    /// The request's header map, read once by the first `header_all`.
    headers: Option<Option<Vec<u8>>>,
}

impl HostView {
    /// Every value of request header `name` (see [`host::values_in`]).
    fn values(&mut self, name: &str, exact: bool) -> Option<String> {
        let raw = self
            .headers
            .get_or_insert_with(|| host::header_map_bytes(host::REQUEST_HEADERS));
        match raw {
            Some(raw) => host::values_in(raw, name, exact),
            None => host::header(host::REQUEST_HEADERS, name, |b| {
                let mut s = String::new();
                host::push_text(&mut s, b, exact);
                s
            }),
        }
    }
}

impl RequestView for HostView {
    fn header(&mut self, name: &str) -> Option<String> {
        host::header(host::REQUEST_HEADERS, name, host::text)
    }
    fn header_all(&mut self, name: &str) -> Option<String> {
        self.values(name, false)
    }
    fn header_exact(&mut self, name: &str) -> Option<String> {
        self.values(name, true)
    }
    fn route(&mut self) -> Option<String> {
        self.route
            .get_or_insert_with(|| host::property(b"xds\0route_name", host::text))
            .clone()
    }
    fn cluster(&mut self) -> Option<String> {
        self.cluster
            .get_or_insert_with(|| host::property(b"xds\0cluster_name", host::text))
            .clone()
    }
}

/// An upgrade (WebSocket, `CONNECT`): its headers come without an end of stream and no
/// body follows before the upstream answers, so it is admitted at its headers.
fn upgrade(view: &mut HostView) -> bool {
    view.header("upgrade").is_some() || view.header(":method").as_deref() == Some("CONNECT")
}

/// Whether the request is gRPC by its `content-type` ([`grpc_typed`]).
fn is_grpc() -> bool {
    grpc_typed(host::REQUEST_HEADERS)
}

/// Envoy's rule (`Grpc::Common::hasGrpcContentType`) on the map's `content-type`:
/// `application/grpc` or `application/grpc+<subtype>`; `application/grpc-web` is not
/// gRPC.
fn grpc_typed(map: u32) -> bool {
    host::header(map, "content-type", |v| {
        let base = b"application/grpc";
        v.strip_prefix(base)
            .is_some_and(|rest| matches!(rest.first(), None | Some(b'+')))
    })
    .unwrap_or(false)
}

/// The root context of a plugin: its worker, and the callbacks of its streams (a
/// stream is a context id in the worker's call table).
#[derive(Default)]
pub struct Root {
    worker: Worker,
    /// `on_delete` ran while streams were live: dropped once they are finished.
    pub deleted: bool,
}

impl Root {
    /// A root context with an empty worker.
    pub fn new() -> Self {
        Self::default()
    }

    /// `on_vm_start`: nothing to do (state lives in shared data, never reset here).
    pub fn on_vm_start(&mut self, _vm_configuration_size: usize) -> bool {
        true
    }

    /// `on_configure`: parse and install the plugin JSON; false (config rejected) on
    /// any error, logged with the field path. Runs N + 2 times: never resets state.
    pub fn on_configure(&mut self, _plugin_configuration_size: usize) -> bool {
        let bytes = match host::plugin_configuration() {
            Ok(b) if !b.iter().all(u8::is_ascii_whitespace) => b,
            Ok(_) | Err(host::NOT_FOUND) => {
                // Accepted (a filter with nothing to do), but never silently.
                host::log(
                    Level::Warn,
                    "fusewire: no plugin configuration: no policies, every request passes",
                );
                b"{\"policies\":[]}".to_vec()
            }
            Err(s) => {
                host::log(
                    Level::Error,
                    &fusewire_core::text!(
                        "fusewire: cannot read plugin configuration (status {s})"
                    ),
                );
                return false;
            }
        };
        let plugin = match Plugin::parse(&bytes) {
            Ok(p) => p,
            Err(e) => {
                host::log(
                    Level::Error,
                    &fusewire_core::text!("fusewire: invalid plugin configuration: {e}"),
                );
                return false;
            }
        };
        let (tick, n, warnings) = (
            plugin.tick_ms.min(u64::from(u32::MAX)) as u32,
            plugin.policies.len(),
            plugin.warnings(),
        );
        if !self.worker.configure(plugin) {
            return false;
        }
        // Only for a configuration taken (found by review: logged, then refused).
        for w in warnings {
            host::log(Level::Warn, &fusewire_core::text!("fusewire: {w}"));
        }
        let s = host::set_tick_period_ms(tick);
        if s != host::OK {
            host::log(
                Level::Warn,
                &fusewire_core::text!(
                    "fusewire: set_tick_period failed ({s}): no deadlines or flushes"
                ),
            );
        }
        // No policy: every request passes untouched, as with an empty configuration
        // (found by review: a template rendering an empty list was told at info).
        let (level, none) = match n {
            0 => (Level::Warn, ": every request passes untouched"),
            _ => (Level::Info, ""),
        };
        host::log(
            level,
            &fusewire_core::text!("fusewire: configured {n} policies{none}"),
        );
        true
    }

    /// `on_tick`.
    pub fn on_tick(&mut self) {
        self.worker.tick();
        self.worker.send_deferred();
    }

    /// Runs a stream callback whose returned action Envoy reads (see
    /// [`Worker::deferred`]).
    #[inline(always)]
    fn in_stream<T>(&mut self, ctx: u32, f: impl FnOnce(&mut Worker) -> T) -> T {
        self.worker.current = Some(ctx);
        let r = f(&mut self.worker);
        self.worker.current = None;
        r
    }

    /// A stream context `ctx` of this root.
    pub fn create_stream(&mut self, ctx: u32) {
        self.worker.calls.insert(ctx, Call::New);
    }

    /// Whether stream `ctx` is this root's and not finished.
    pub fn holds(&self, ctx: u32) -> bool {
        self.worker.calls.get(ctx).is_some()
    }

    /// Whether every stream of this root is finished.
    pub fn is_idle(&self) -> bool {
        self.worker.calls.is_empty()
    }

    /// `on_done` of the root (its plugin is released), and again before it is
    /// dropped: see [`Worker::let_go`].
    pub fn on_done(&mut self) {
        self.worker.let_go();
        self.worker.send_deferred();
    }

    /// Request headers: match, admit (breaker, bulkhead) or answer with the fallback.
    pub fn on_http_request_headers(&mut self, ctx: u32, end_of_stream: bool) -> Action {
        self.in_stream(ctx, |w| w.start(ctx, end_of_stream, false))
    }

    /// Request body or trailers: held while the stream waits (queued for a slot, or
    /// following a collapse leader) — without this, Envoy would take the body's
    /// Continue as resuming the stream and send it upstream past the bulkhead; with
    /// `admit_after_body`, what admits an awaiting request (`size`: the chunk's bytes).
    ///
    /// `end`: the request is sent in full; a running call's deadline starts again
    /// there, as Envoy's route timeout does (a slow upload is not a slow upstream).
    pub fn on_http_request_data(&mut self, ctx: u32, size: usize, end: bool) -> Action {
        if matches!(self.worker.calls.get(ctx), Some(Call::Awaiting { .. })) {
            return self.in_stream(ctx, |w| w.body_arrived(ctx, size, end));
        }
        let w = &mut self.worker;
        let now = w.now();
        match w.calls.get_mut(ctx) {
            Some(Call::Queued { req, .. } | Call::Following { req, .. }) => {
                req.sent |= end;
                Action::Pause
            }
            // Its reply waits in `deferred`: the request must not go upstream first.
            Some(Call::Answered { .. }) if w.deferred.iter().any(|d| d.ctx == ctx) => Action::Pause,
            // Sent in full; before its response started, its deadline starts now.
            Some(Call::Running {
                permit, req, obs, ..
            }) if end && !req.sent => {
                req.sent = true;
                if obs.status.is_none() {
                    req.sent_at(now);
                    if let Some(e) = w.engine.as_mut() {
                        e.restart_timer(permit, now);
                    }
                }
                Action::Continue
            }
            _ => Action::Continue,
        }
    }

    /// Response headers: the upstream status (own replies are skipped).
    pub fn on_http_response_headers(&mut self, ctx: u32, end_of_stream: bool) -> Action {
        self.in_stream(ctx, |w| {
            w.observe(ctx, host::RESPONSE_HEADERS, end_of_stream)
        });
        Action::Continue
    }

    /// Response body: kept (up to the limit) for collapse waiters and stale copies.
    pub fn on_http_response_body(&mut self, ctx: u32, size: usize, end_of_stream: bool) -> Action {
        self.in_stream(ctx, |w| w.body(ctx, size, end_of_stream));
        Action::Continue
    }

    /// Response trailers: `grpc-status` of a normal gRPC response.
    pub fn on_http_response_trailers(&mut self, ctx: u32) -> Action {
        self.in_stream(ctx, |w| w.observe(ctx, host::RESPONSE_TRAILERS, true));
        Action::Continue
    }

    /// `on_log` (Envoy: before `on_done`; also `on_done` and `on_delete`, whichever
    /// comes first): classify with the final flags, record, release. Later calls for
    /// `ctx` find nothing.
    pub fn finish_stream(&mut self, ctx: u32) {
        self.worker.finish(ctx);
        self.worker.send_deferred();
    }
}
