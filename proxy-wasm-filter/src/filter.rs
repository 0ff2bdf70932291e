//! The proxy-wasm contexts: one [`Root`] per VM (config, keys, tick) and one
//! [`Stream`] per HTTP request. Both share the VM's [`Worker`].

use crate::vecmap::VecMap;
use std::cell::RefCell;
use std::rc::Rc;

use fusewire_core::shared::handle::allocate_owner;
use fusewire_core::shared::{Admission, Issue, KeyHandle, Outcome, Probe, Report, Slot};
use fusewire_core::time::ms_to_ns;
use fusewire_core::Phase;
/// What a stream callback tells the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Go on with the next filter.
    Continue,
    /// Stop iteration (ignored by Envoy after a local reply).
    Pause,
}

use crate::classify::{FlagSet, Observed, Verdict};
use crate::config::{Plugin, Policy, Reason, Reply};
use crate::host::{self, HostStore, Level};
use crate::matcher::RequestView;
use crate::metrics::{Counter, KeyMetrics};

/// A monotonic millisecond clock built from the host's wall clock: forward steps pass
/// through, backward steps count as no time passing.
#[derive(Clone, Copy, Debug, Default)]
pub struct Clock {
    last_wall: u64,
    mono: u64,
}

impl Clock {
    /// Advances with a wall-clock reading (ms) and returns the monotonic time.
    pub fn advance(&mut self, wall_ms: u64) -> u64 {
        if self.mono == 0 {
            self.mono = wall_ms.max(1);
        } else if wall_ms > self.last_wall {
            self.mono = self.mono.saturating_add(wall_ms - self.last_wall);
        }
        self.last_wall = wall_ms;
        self.mono
    }

    fn now(&mut self) -> u64 {
        match host::now_ns() {
            Some(ns) => self.advance(ns / 1_000_000),
            None => self.mono,
        }
    }
}

/// One key this VM has seen.
struct KeyEntry {
    key: String,
    policy: Rc<Policy>,
    handle: KeyHandle,
    metrics: KeyMetrics,
    last_phase: Option<Phase>,
}

/// A pending tick-mode deadline.
struct Timer {
    deadline_ms: u64,
    fired: bool,
    key: usize,
    generation: u32,
    probe: Option<u8>,
    grpc: bool,
}

/// A call in a bulkhead wait queue (paused in its request headers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Waiter {
    /// Waiting for a slot until `deadline_ms`.
    Waiting {
        key: usize,
        deadline_ms: u64,
        generation: u32,
        grpc: bool,
    },
    /// Got a slot at `at_ms` and was resumed.
    Granted { at_ms: u64 },
    /// Waited too long: answered with the `rejected` fallback.
    Expired,
}

/// Per-VM state shared by the root and every stream context.
#[derive(Default)]
pub struct Worker {
    plugin: Option<Rc<Plugin>>,
    policies: Vec<Rc<Policy>>,
    keys: Vec<KeyEntry>,
    index: Vec<VecMap<String, usize>>,
    owner: Option<u64>,
    rng: u64,
    clock: Clock,
    store: HostStore,
    timers: VecMap<u32, Timer>,
    queued: VecMap<u32, Waiter>,
    key_buf: String,
    map_buf: Vec<u8>,
}

fn log_report(key: &str, r: &Report) {
    match r.issue {
        Some(Issue::Invalid(e)) => host::log(
            Level::Warn,
            &format!("fusewire: shared state of key {key:?} was unreadable ({e}); it is reset"),
        ),
        Some(Issue::Contended) => host::log(
            Level::Warn,
            &format!("fusewire: key {key:?}: shared-data CAS contended; degraded for this call"),
        ),
        Some(Issue::Host(s)) => host::log(
            Level::Warn,
            &format!("fusewire: key {key:?}: shared-data host error status {s}"),
        ),
        None => {}
    }
    if let Some(t) = r.transition {
        let what = match t.to {
            Phase::Open => "opened",
            Phase::HalfOpen => "half-open",
            Phase::Closed => "closed",
        };
        host::log(Level::Info, &format!("fusewire: breaker {key:?} {what}"));
    }
}

impl Worker {
    fn now_ms(&mut self) -> u64 {
        self.clock.now()
    }

    fn rand(&mut self) -> u64 {
        // xorshift64*
        if self.rng == 0 {
            self.rng = host::now_ns().unwrap_or(0x9E37_79B9_7F4A_7C15) | 1;
        }
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn owner(&mut self) -> u64 {
        if let Some(o) = self.owner {
            return o;
        }
        let fallback = host::now_ns().unwrap_or(0) ^ (self.rand() << 20);
        let attempts = self.plugin.as_ref().map_or(8, |p| p.shared.cas_attempts);
        let o = allocate_owner(&mut self.store, attempts, fallback);
        self.owner = Some(o);
        o
    }

    /// Installs a validated config. Keys of unchanged identity (same policy name, same
    /// key template) keep their handle; nothing in shared data is reset.
    fn configure(&mut self, plugin: Plugin) {
        let plugin = Rc::new(plugin);
        self.policies = plugin.policies.iter().cloned().map(Rc::new).collect();
        self.index = vec![VecMap::default(); self.policies.len()];
        for (i, e) in self.keys.iter_mut().enumerate() {
            if let Some((pi, p)) = self
                .policies
                .iter()
                .enumerate()
                .find(|(_, p)| p.name == e.policy.name && p.key == e.policy.key)
            {
                e.handle.reconfigure(&p.params);
                e.policy = p.clone();
                if let Some(ix) = self.index.get_mut(pi) {
                    ix.insert(e.key.clone(), i);
                }
            }
        }
        self.plugin = Some(plugin);
    }

    /// The entry for the key the request maps to under policy `pi`.
    fn entry_for(&mut self, pi: usize, view: &mut HostView) -> Option<usize> {
        let policy = self.policies.get(pi)?.clone();
        if policy.key.is_static() {
            // One key for the whole policy: no rendering, no lookup.
            if let Some((_, &i)) = self.index.get(pi)?.iter().next() {
                return Some(i);
            }
        }
        policy.key.render(&policy.name, view, &mut self.key_buf);
        let index = self.index.get_mut(pi)?;
        if let Some(&i) = index.get(self.key_buf.as_str()) {
            return Some(i);
        }
        if index.len() >= policy.max_keys as usize {
            self.key_buf.clear();
            self.key_buf.push_str(&policy.name);
            self.key_buf.push_str("/~overflow");
            if let Some(&i) = index.get(self.key_buf.as_str()) {
                return Some(i);
            }
        }
        let prefix = self
            .plugin
            .as_ref()
            .map_or("fusewire", |p| p.metrics_prefix.as_str());
        let key = self.key_buf.clone();
        let entry = KeyEntry {
            handle: KeyHandle::new(&key, &policy.params),
            metrics: KeyMetrics::define(prefix, &key),
            key: key.clone(),
            policy,
            last_phase: None,
        };
        let i = self.keys.len();
        self.keys.push(entry);
        index.insert(key, i);
        Some(i)
    }

    fn report(&mut self, ki: usize, r: Report) {
        let Some(e) = self.keys.get_mut(ki) else {
            return;
        };
        if r.issue.is_some() || r.transition.is_some() {
            log_report(&e.key, &r);
        }
        if let Some(t) = r.transition {
            e.metrics.count(match t.to {
                Phase::Open => Counter::Opened,
                Phase::HalfOpen => Counter::HalfOpened,
                Phase::Closed => Counter::Closed,
            });
        }
        let phase = match r.transition {
            Some(t) => Some(t.to),
            None => e.handle.view().map(|s| s.phase()),
        };
        if phase.is_some() && phase != e.last_phase {
            if let Some(p) = phase {
                e.metrics.state(match p {
                    Phase::Closed => 0,
                    Phase::Open => 1,
                    Phase::HalfOpen => 2,
                });
            }
            e.last_phase = phase;
        }
    }

    /// Records an admitted call's verdict, writing at once when it matters.
    fn record(
        &mut self,
        ki: usize,
        generation: u32,
        probe: Option<u8>,
        outcome: Outcome,
        latency_ms: u64,
    ) {
        // The shared layer runs on ns (the core's time); this filter's clock is ms.
        let now = ms_to_ns(self.now_ms());
        let latency = ms_to_ns(latency_ms);
        let rand = self.rand();
        let Some(sp) = self.plugin.as_ref().map(|p| p.shared) else {
            return;
        };
        let Some(e) = self.keys.get_mut(ki) else {
            return;
        };
        let p = e.policy.clone();
        let mut report = Report::default();
        if let Some(slot) = probe {
            let probe = Probe { generation, slot };
            report = e.handle.probe_done(
                &mut self.store,
                &sp,
                &p.params,
                probe,
                outcome,
                latency,
                now,
                rand,
            );
        }
        if e.handle
            .record(&p.params, generation, outcome, latency, now)
        {
            let r = e.handle.flush(&mut self.store, &sp, &p.params, now, rand);
            report.transition = report.transition.or(r.transition);
            report.issue = report.issue.or(r.issue);
        }
        self.report(ki, report);
    }

    /// Answers the current stream with `policy`'s fallback instead of the upstream:
    /// the rejection (a bulkhead refusal, else a short circuit) is recorded on key `ki`
    /// and counted with its fallback.
    fn reject(&mut self, ki: usize, policy: &Policy, bulkhead: bool, now: u64, grpc: bool) {
        let (reason, counter) = if bulkhead {
            (Reason::Rejected, Counter::SemaphoreRejected)
        } else {
            (Reason::ShortCircuited, Counter::ShortCircuited)
        };
        if let Some(e) = self.keys.get_mut(ki) {
            e.handle.record_rejection(ms_to_ns(now), bulkhead);
            e.metrics.count(counter);
            e.metrics.count(Counter::FallbackSuccess);
        }
        self.send_reply(policy.fallback.reply(reason), grpc);
    }

    fn send_reply(&mut self, reply: &Reply, grpc: bool) {
        let mut pairs: Vec<(&str, &str)> = reply
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let details = "fusewire";
        if grpc {
            pairs.retain(|(k, _)| *k != "content-type");
            pairs.push(("content-type", "application/grpc"));
        }
        host::serialize_map(&pairs, &mut self.map_buf);
        let grpc_status = if grpc { reply.grpc_status as i32 } else { -1 };
        let body: &[u8] = if grpc { &[] } else { &reply.body };
        let s = host::send_local_response(reply.status, details, body, &self.map_buf, grpc_status);
        if s != host::OK {
            host::log(
                Level::Warn,
                &format!("fusewire: send_local_response failed with status {s}"),
            );
        }
    }

    /// Serves the bulkhead wait queues in arrival order: a waiter whose key has a free
    /// slot (process-wide) is resumed; one past its max wait gets the `rejected` reply.
    /// Runs on every tick and after every slot this worker releases.
    fn drain_queue(&mut self, now: u64) {
        let Some(sp) = self.plugin.as_ref().map(|p| p.shared) else {
            return;
        };
        let waiting: Vec<(u32, Waiter)> = self
            .queued
            .iter()
            .filter(|(_, w)| matches!(w, Waiter::Waiting { .. }))
            .map(|(c, w)| (*c, *w))
            .collect();
        let mut full: Vec<usize> = Vec::new();
        for (ctx, w) in waiting {
            let Waiter::Waiting {
                key,
                deadline_ms,
                generation,
                grpc,
            } = w
            else {
                continue;
            };
            let Some(policy) = self.keys.get(key).map(|e| e.policy.clone()) else {
                continue;
            };
            if now >= deadline_ms {
                self.queued.insert(ctx, Waiter::Expired);
                if host::set_effective_context(ctx) != host::OK {
                    continue;
                }
                self.reject(key, &policy, true, now, grpc);
                continue;
            }
            let (Some(max), false) = (policy.bulkhead, full.contains(&key)) else {
                continue;
            };
            let owner = self.owner();
            let Some(e) = self.keys.get_mut(key) else {
                continue;
            };
            let (slot, r) = e
                .handle
                .acquire_slot(&mut self.store, &sp, owner, max, ms_to_ns(now));
            self.report(key, r);
            if slot != Slot::Granted {
                full.push(key); // keep FIFO order within the key
                continue;
            }
            if let Some(e) = self.keys.get_mut(key) {
                e.metrics.in_flight(1);
            }
            self.queued.insert(ctx, Waiter::Granted { at_ms: now });
            if let Some(t) = policy.tick_timeout_ms() {
                self.timers.insert(
                    ctx,
                    Timer {
                        deadline_ms: now.saturating_add(t),
                        fired: false,
                        key,
                        generation,
                        probe: None,
                        grpc,
                    },
                );
            }
            if host::set_effective_context(ctx) == host::OK {
                let s = host::continue_request();
                if s != host::OK {
                    host::log(
                        Level::Warn,
                        &format!("fusewire: continue_stream failed with status {s}"),
                    );
                }
            }
        }
    }

    /// Tick: fire due deadlines, flush deltas, expire probes, heartbeat slots.
    fn tick(&mut self) {
        let Some(plugin) = self.plugin.clone() else {
            return;
        };
        let now = self.now_ms();
        // Timeouts.
        let due: Vec<u32> = self
            .timers
            .iter()
            .filter(|(_, t)| !t.fired && now >= t.deadline_ms)
            .map(|(c, _)| *c)
            .collect();
        for ctx in due {
            let Some(t) = self.timers.get_mut(&ctx) else {
                continue;
            };
            t.fired = true;
            let (ki, generation, probe, grpc) = (t.key, t.generation, t.probe, t.grpc);
            if host::set_effective_context(ctx) != host::OK {
                self.timers.remove(&ctx);
                continue;
            }
            let Some(e) = self.keys.get_mut(ki) else {
                continue;
            };
            let reply = e.policy.fallback.reply(Reason::Timeout).clone();
            e.metrics.count(Counter::Timeout);
            e.metrics.count(Counter::FallbackSuccess);
            self.send_reply(&reply, grpc);
            self.record(ki, generation, probe, Outcome::Timeout, 0);
        }
        if !self.queued.is_empty() {
            self.drain_queue(now);
        }
        // Shared-state upkeep.
        let owner = if self.keys.iter().any(|e| e.handle.local_in_flight() > 0) {
            self.owner()
        } else {
            self.owner.unwrap_or(0)
        };
        for ki in 0..self.keys.len() {
            let rand = self.rand();
            let Some(e) = self.keys.get_mut(ki) else {
                continue;
            };
            let p = e.policy.clone();
            let r = e.handle.tick(
                &mut self.store,
                &plugin.shared,
                &p.params,
                owner,
                ms_to_ns(now),
                rand,
            );
            if p.bulkhead.is_some() {
                // The ledger is the truth (it forgets crashed VMs): resync the gauge.
                let ttl = plugin.shared.lease_ttl_ms;
                if let Some(n) = e
                    .handle
                    .global_in_flight(&mut self.store, ms_to_ns(now), ttl)
                {
                    e.metrics.set_in_flight(n);
                }
            }
            e.metrics.flush();
            self.report(ki, r);
        }
    }
}

/// [`RequestView`] over host calls, caching what it read.
#[derive(Default)]
struct HostView {
    route: Option<Option<String>>,
    cluster: Option<Option<String>>,
}

fn text(v: Option<Vec<u8>>) -> Option<String> {
    v.map(|b| String::from_utf8_lossy(&b).into_owned())
}

impl RequestView for HostView {
    fn header(&mut self, name: &str) -> Option<String> {
        text(host::header(host::REQUEST_HEADERS, name))
    }
    fn route(&mut self) -> Option<String> {
        self.route
            .get_or_insert_with(|| text(host::property(b"xds\0route_name")))
            .clone()
    }
    fn cluster(&mut self) -> Option<String> {
        self.cluster
            .get_or_insert_with(|| text(host::property(b"xds\0cluster_name")))
            .clone()
    }
}

/// The root context of a VM.
pub struct Root {
    worker: Rc<RefCell<Worker>>,
}

impl Root {
    /// A root context with an empty worker.
    pub fn new() -> Self {
        Root {
            worker: Rc::new(RefCell::new(Worker::default())),
        }
    }
}

impl Default for Root {
    fn default() -> Self {
        Self::new()
    }
}

impl Root {
    /// `on_vm_start`: nothing to do (state lives in shared data, never reset here).
    pub fn on_vm_start(&mut self, _vm_configuration_size: usize) -> bool {
        true
    }

    /// `on_configure`: parse and install the plugin JSON; false (config rejected) on
    /// any error, logged with the field path. Runs N + 2 times: never resets state.
    pub fn on_configure(&mut self, _plugin_configuration_size: usize) -> bool {
        let bytes = match host::plugin_configuration() {
            Ok(b) => b,
            Err(host::NOT_FOUND) => b"{\"policies\":[]}".to_vec(),
            Err(s) => {
                host::log(
                    Level::Error,
                    &format!("fusewire: cannot read plugin configuration (status {s})"),
                );
                return false;
            }
        };
        let bytes = if bytes.iter().all(|b| b.is_ascii_whitespace()) {
            b"{\"policies\":[]}".to_vec()
        } else {
            bytes
        };
        match Plugin::parse(&bytes) {
            Ok(plugin) => {
                let tick = plugin.tick_ms.min(u32::MAX as u64) as u32;
                let n = plugin.policies.len();
                let Ok(mut w) = self.worker.try_borrow_mut() else {
                    return false;
                };
                w.configure(plugin);
                drop(w);
                let s = host::set_tick_period_ms(tick);
                if s != host::OK {
                    host::log(Level::Warn, &format!("fusewire: set_tick_period failed (status {s}): no tick timeouts or flushes"));
                }
                host::log(Level::Info, &format!("fusewire: configured {n} policies"));
                true
            }
            Err(e) => {
                host::log(
                    Level::Error,
                    &format!("fusewire: invalid plugin configuration: {e}"),
                );
                false
            }
        }
    }

    /// `on_tick`: timeouts, delta flush, probe expiry, slot heartbeats.
    pub fn on_tick(&mut self) {
        if let Ok(mut w) = self.worker.try_borrow_mut() {
            w.tick();
        }
    }

    /// A stream context for `context_id`.
    pub fn create_stream(&self, context_id: u32) -> Stream {
        Stream {
            worker: self.worker.clone(),
            ctx: context_id,
            call: None,
            own_reply: false,
            paused: false,
        }
    }
}

/// An admitted call in flight.
struct Call {
    key: usize,
    generation: u32,
    probe: Option<u8>,
    slot: bool,
    start_ms: u64,
    obs: Observed,
}

/// The context of one HTTP stream.
pub struct Stream {
    worker: Rc<RefCell<Worker>>,
    ctx: u32,
    call: Option<Call>,
    own_reply: bool,
    paused: bool,
}

fn is_grpc() -> bool {
    host::header(host::REQUEST_HEADERS, "content-type")
        .is_some_and(|v| v.starts_with(b"application/grpc"))
}

impl Stream {
    fn start(&mut self) {
        let Ok(mut w) = self.worker.try_borrow_mut() else {
            return;
        };
        let w = &mut *w;
        let Some(plugin) = w.plugin.clone() else {
            return;
        };
        if plugin.policies.is_empty() {
            return;
        }
        let mut view = HostView::default();
        let Some(pi) = w.policies.iter().position(|p| p.matcher.matches(&mut view)) else {
            return; // no policy: untouched
        };
        let Some(ki) = w.entry_for(pi, &mut view) else {
            return;
        };
        let now = w.now_ms();
        let rand = w.rand();
        let Some(e) = w.keys.get(ki) else { return };
        let policy = e.policy.clone();
        let sp = plugin.shared;
        let Some(e) = w.keys.get_mut(ki) else { return };
        let (adm, report) = e
            .handle
            .admit(&mut w.store, &sp, &policy.params, ms_to_ns(now), rand);
        w.report(ki, report);
        let (generation, probe) = match adm {
            Admission::Allowed { generation, probe } => (generation, probe),
            Admission::Rejected(_) => {
                self.own_reply = true;
                w.reject(ki, &policy, false, now, policy.fallback.grpc && is_grpc());
                return;
            }
        };
        let mut slot = false;
        if let Some(max) = policy.bulkhead {
            let owner = w.owner();
            let Some(e) = w.keys.get_mut(ki) else { return };
            let (s, r) = e
                .handle
                .acquire_slot(&mut w.store, &sp, owner, max, ms_to_ns(now));
            w.report(ki, r);
            let waiting = || {
                w.queued
                    .iter()
                    .filter(|(_, q)| matches!(q, Waiter::Waiting { key, .. } if *key == ki))
                    .count()
            };
            if s == Slot::Granted {
                slot = true;
                if let Some(e) = w.keys.get_mut(ki) {
                    e.metrics.in_flight(1);
                }
            } else if let (Slot::Full, None, Some(q)) = (s, probe, policy.queue) {
                if waiting() < q.capacity as usize {
                    // Wait (paused) for a slot; served by `drain_queue`.
                    let grpc = policy.fallback.grpc && is_grpc();
                    w.queued.insert(
                        self.ctx,
                        Waiter::Waiting {
                            key: ki,
                            deadline_ms: now.saturating_add(q.max_wait_ms),
                            generation,
                            grpc,
                        },
                    );
                    self.call = Some(Call {
                        key: ki,
                        generation,
                        probe: None,
                        slot: false,
                        start_ms: now,
                        obs: Observed::default(),
                    });
                    self.paused = true;
                    return;
                }
                self.own_reply = true;
                w.reject(ki, &policy, true, now, policy.fallback.grpc && is_grpc());
                return;
            } else {
                if let Some(slot) = probe {
                    // Hand the probe back: this call never reaches the upstream.
                    let probe = Probe { generation, slot };
                    if let Some(e) = w.keys.get_mut(ki) {
                        let r = e.handle.probe_done(
                            &mut w.store,
                            &sp,
                            &policy.params,
                            probe,
                            // Never ran: the lease is handed back.
                            Outcome::Cancelled,
                            0,
                            ms_to_ns(now),
                            rand,
                        );
                        w.report(ki, r);
                    }
                }
                self.own_reply = true;
                w.reject(ki, &policy, true, now, policy.fallback.grpc && is_grpc());
                return;
            }
        }
        if let Some(t) = policy.tick_timeout_ms() {
            let grpc = policy.fallback.grpc && is_grpc();
            w.timers.insert(
                self.ctx,
                Timer {
                    deadline_ms: now.saturating_add(t),
                    fired: false,
                    key: ki,
                    generation,
                    probe,
                    grpc,
                },
            );
        }
        self.call = Some(Call {
            key: ki,
            generation,
            probe,
            slot,
            start_ms: now,
            obs: Observed::default(),
        });
    }

    /// Ends the call exactly once: classify, record, release the slot.
    fn finish(&mut self) {
        let Some(mut call) = self.call.take() else {
            return;
        };
        let Ok(mut w) = self.worker.try_borrow_mut() else {
            return;
        };
        let w = &mut *w;
        match w.queued.remove(&self.ctx) {
            // Left while waiting (nothing held), or already answered when it expired.
            Some(Waiter::Waiting { .. } | Waiter::Expired) => return,
            Some(Waiter::Granted { at_ms }) => {
                call.slot = true;
                call.start_ms = at_ms;
            }
            None => {}
        }
        let timed_out = w.timers.remove(&self.ctx).is_some_and(|t| t.fired);
        let now = w.now_ms();
        if !timed_out {
            let mut obs = call.obs;
            // Envoy's flags only change the verdict of a 5xx or of no response at all
            // (UF/UO/URX/UH/UC arrive with a 503, UT with a 504, resets without a
            // status): a 1xx–4xx response skips the property read.
            if obs.status.is_none_or(|s| s >= 500) {
                if let Some(f) = host::property(b"response\0flags") {
                    obs.flags = FlagSet::from_property(&f);
                }
            }
            let verdict = match w.keys.get(call.key) {
                Some(e) => e.policy.classifier.classify(&obs),
                None => Verdict::Cancelled,
            };
            let latency = now.saturating_sub(call.start_ms);
            let (outcome, counter) = match verdict {
                Verdict::Success => (Outcome::Success, Counter::Success),
                Verdict::Failure => (Outcome::Failure, Counter::Failure),
                Verdict::Timeout => (Outcome::Timeout, Counter::Timeout),
                Verdict::BadRequest => (Outcome::BadRequest, Counter::BadRequest),
                Verdict::Cancelled => (Outcome::Cancelled, Counter::Cancelled),
            };
            if let Some(e) = w.keys.get_mut(call.key) {
                e.metrics.count(counter);
                if obs.status.is_some() {
                    e.metrics.latency(latency);
                }
            }
            w.record(call.key, call.generation, call.probe, outcome, latency);
        }
        if call.slot {
            let owner = w.owner();
            let Some(sp) = w.plugin.as_ref().map(|p| p.shared) else {
                return;
            };
            if let Some(e) = w.keys.get_mut(call.key) {
                e.metrics.in_flight(-1);
                let r = e
                    .handle
                    .release_slot(&mut w.store, &sp, owner, ms_to_ns(now));
                w.report(call.key, r);
            }
            // A local waiter can have the slot right away.
            if !w.queued.is_empty() {
                w.drain_queue(now);
            }
        }
    }

    fn read_grpc_status(&mut self, map: u32) {
        if let Some(call) = self.call.as_mut() {
            if let Some(v) = host::header(map, "grpc-status") {
                call.obs.grpc = std::str::from_utf8(&v)
                    .ok()
                    .and_then(|s| s.trim().parse().ok());
            }
        }
    }
}

impl Stream {
    /// `on_done` (Envoy: after `on_log`): finish if not finished yet.
    pub fn on_done(&mut self) -> bool {
        self.finish();
        true
    }

    /// Request headers: match, admit (breaker, bulkhead) or answer with the fallback.
    pub fn on_http_request_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        if self.call.is_none() && !self.own_reply {
            self.start();
        }
        if self.own_reply || self.paused {
            Action::Pause
        } else {
            Action::Continue
        }
    }

    /// Response headers: the upstream status (own replies are skipped).
    pub fn on_http_response_headers(
        &mut self,
        _num_headers: usize,
        _end_of_stream: bool,
    ) -> Action {
        if self.own_reply || self.call.is_none() {
            return Action::Continue;
        }
        if let Ok(mut w) = self.worker.try_borrow_mut() {
            if w.queued.get(&self.ctx) == Some(&Waiter::Expired) {
                return Action::Continue; // our own `rejected` reply after waiting
            }
            match w.timers.get(&self.ctx) {
                // Our own timeout reply: not an upstream result.
                Some(t) if t.fired => return Action::Continue,
                // Headers arrived in time: the deadline no longer applies.
                Some(_) => {
                    w.timers.remove(&self.ctx);
                }
                None => {}
            }
        }
        if let Some(call) = self.call.as_mut() {
            call.obs.status = host::header(host::RESPONSE_HEADERS, ":status").and_then(|v| {
                std::str::from_utf8(&v)
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
            });
        }
        self.read_grpc_status(host::RESPONSE_HEADERS);
        Action::Continue
    }

    /// Response trailers: `grpc-status`.
    pub fn on_http_response_trailers(&mut self, _num_trailers: usize) -> Action {
        self.read_grpc_status(host::RESPONSE_TRAILERS);
        Action::Continue
    }

    /// `on_log`: classify with the final response flags, record, release.
    pub fn on_log(&mut self) {
        self.finish();
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // Last resort (on_delete without on_log/on_done): never leak a slot.
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::Clock;

    #[test]
    fn clock_tolerates_backward_steps() {
        let mut c = Clock::default();
        assert_eq!(c.advance(1_000), 1_000);
        assert_eq!(c.advance(1_500), 1_500);
        assert_eq!(c.advance(500), 1_500, "backward step: no time passes");
        assert_eq!(c.advance(700), 1_700, "then time flows again");
        assert_eq!(c.advance(10_700), 11_700);
    }
}
