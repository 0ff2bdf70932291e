//! The proxy-wasm contexts: one [`Root`] per VM (config, tick) and one [`Stream`] per
//! HTTP request. Both share the VM's [`Worker`], which holds the core's
//! [`Engine`]: every resilience decision is the engine's; this module translates
//! Envoy's callbacks, headers and shared data into engine calls and back.

use std::cell::RefCell;
use std::rc::Rc;

use fusewire_core::{
    Engine, Event, EventKind, KeyId, Nanos, Outcome, Permit, PolicyId, Start, Ticket,
    TransitionReason,
};

use crate::classify::{FlagSet, Observed};
use crate::config::{Plugin, Policy, Reason, Reply};
use crate::host::{self, Level};
use crate::matcher::RequestView;
use crate::metrics::{Extra, KeyMetrics};
use crate::vecmap::VecMap;

/// What a stream callback tells the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Go on with the next filter.
    Continue,
    /// Stop iteration (ignored by Envoy after a local reply).
    Pause,
}

/// A stream's call as the worker tracks it.
enum Call {
    /// Holding a slot; forwarded upstream.
    Running {
        key: KeyId,
        permit: Permit,
        started: Nanos,
        obs: Observed,
    },
    /// Paused in its request headers, waiting for a slot.
    Queued { ticket: Ticket },
    /// Answered by the filter after it started (timed out or its wait expired); a
    /// timed-out call still holds its permit for the late result.
    Answered { permit: Option<Permit> },
}

/// Per-VM state shared by the root and every stream context.
#[derive(Default)]
pub struct Worker {
    engine: Option<Engine>,
    plugin: Option<Rc<Plugin>>,
    policies: Vec<PolicyId>,
    calls: VecMap<u32, (Call, bool)>,
    by_call: VecMap<u64, u32>,
    metrics: Vec<KeyMetrics>,
    metric_names: VecMap<String, usize>,
    metric_counts: Vec<usize>,
    key_metrics: VecMap<u64, usize>,
    rng: u64,
    owner: Option<u64>,
    key_buf: String,
}

/// A process-unique id for this VM's ledger entries: the next value of a counter in
/// shared data (VMs of one Envoy share no randomness: in tests they even share the
/// clock). Falls back to `rand` if the counter cannot be updated.
fn owner_id(namespace: &str, rand: u64) -> u64 {
    use fusewire_core::shared::{Expect, Io, Op, OwnedAnswer};
    let key = format!("{namespace}/owners");
    for _ in 0..16 {
        let read = Io {
            id: fusewire_core::shared::IoId::from_raw(0),
            key: &key,
            op: Op::Read,
        };
        let (n, expect) = match host::shared_data(&read) {
            OwnedAnswer::Found(v, t) => {
                let n = <[u8; 8]>::try_from(v.as_slice()).map_or(0, u64::from_le_bytes);
                (n, Expect::Token(t))
            }
            OwnedAnswer::NotFound => (0, Expect::Absent),
            _ => break,
        };
        let next = (n + 1).to_le_bytes();
        let write = Io {
            op: Op::Write {
                value: &next,
                expect,
            },
            ..read
        };
        if let OwnedAnswer::Written(_) = host::shared_data(&write) {
            return n + 1;
        }
    }
    rand | 1 << 63
}

/// Distinct key names that get their own metrics per policy (Envoy stats are never
/// freed): past this, keys share the policy's `~overflow` metrics.
fn metric_cap(policy: &Policy) -> usize {
    policy.core.keys.max_keys as usize + 1
}

impl Worker {
    fn now(&self) -> Nanos {
        // Wall clock; the engine treats a backward step as no time passing.
        host::now_ns().unwrap_or(0)
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

    /// Installs a validated config. The engine (and every key's state, which lives in
    /// shared data anyway) is kept while the shared knobs are unchanged; policies are
    /// matched by name.
    fn configure(&mut self, plugin: Plugin) -> bool {
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
            match Engine::shared(plugin.shared.clone(), owner) {
                Ok(e) => self.engine = Some(e),
                Err(e) => {
                    host::log(Level::Error, &format!("fusewire: shared.{e}"));
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
                    host::log(Level::Error, &format!("fusewire: policy {:?}: {e}", p.name));
                    return false;
                }
            }
        }
        self.plugin = Some(Rc::new(plugin));
        true
    }

    /// The metrics slot of `key` of policy `pi` (defined on first use; past the cap
    /// the policy's keys share its `~overflow` metrics).
    fn metrics_of(&mut self, key: KeyId, pi: usize, policy: &Policy) -> Option<usize> {
        if let Some(&i) = self.key_metrics.get(&key.to_raw()) {
            return Some(i);
        }
        let mut name = self.engine.as_ref()?.key_name(key)?.to_string();
        if self.metric_names.get(&name).is_none() {
            if self.metric_counts.len() <= pi {
                self.metric_counts.resize(pi + 1, 0);
            }
            let n = self.metric_counts.get_mut(pi)?;
            if *n >= metric_cap(policy) {
                name = format!("{}/~overflow", policy.name);
            } else {
                *n += 1;
            }
        }
        let i = match self.metric_names.get(&name) {
            Some(&i) => i,
            None => {
                let prefix = self
                    .plugin
                    .as_ref()
                    .map_or("fusewire", |p| p.metrics_prefix.as_str());
                self.metrics.push(KeyMetrics::define(prefix, &name));
                let i = self.metrics.len() - 1;
                self.metric_names.insert(name, i);
                i
            }
        };
        self.key_metrics.insert(key.to_raw(), i);
        Some(i)
    }

    fn metrics(&mut self, key: KeyId) -> Option<&mut KeyMetrics> {
        let i = *self.key_metrics.get(&key.to_raw())?;
        self.metrics.get_mut(i)
    }

    /// Performs the engine's shared-data requests, then reports its events.
    fn settle(&mut self, now: Nanos) {
        let rand = self.rand();
        let Some(engine) = self.engine.as_mut() else {
            return;
        };
        while let Some(io) = engine.poll_io(now, rand) {
            let (id, answer) = (io.id, host::shared_data(&io));
            engine.io_done(id, answer.as_answer(), now, rand);
        }
        while let Some(ev) = self.engine.as_mut().and_then(|e| e.poll(now, rand)) {
            self.event(ev, now);
        }
    }

    fn event(&mut self, ev: Event, now: Nanos) {
        match ev {
            Event::TimedOut { key, call } => {
                let Some(&ctx) = self.by_call.get(&call.to_raw()) else {
                    return;
                };
                let Some((c, grpc)) = self.calls.remove(&ctx) else {
                    return;
                };
                let Call::Running { permit, .. } = c else {
                    self.calls.insert(ctx, (c, grpc));
                    return;
                };
                self.calls.insert(
                    ctx,
                    (
                        Call::Answered {
                            permit: Some(permit),
                        },
                        grpc,
                    ),
                );
                if let Some(m) = self.metrics(key) {
                    m.event(EventKind::Timeout);
                    m.in_flight(-1);
                }
                self.reply_to(ctx, key, Reason::Timeout, grpc);
            }
            Event::Dequeued { key, permit } => {
                let Some(&ctx) = self.by_call.get(&permit.id().to_raw()) else {
                    let _ = self.engine.as_mut().map(|e| e.cancel(permit, now, 0));
                    return;
                };
                let grpc = self.calls.get(&ctx).is_some_and(|c| c.1);
                let obs = Observed::default();
                self.calls.insert(
                    ctx,
                    (
                        Call::Running {
                            key,
                            permit,
                            started: now,
                            obs,
                        },
                        grpc,
                    ),
                );
                if let Some(m) = self.metrics(key) {
                    m.in_flight(1);
                }
                if host::set_effective_context(ctx) == host::OK {
                    let s = host::continue_request();
                    if s != host::OK {
                        host::log(
                            Level::Warn,
                            &format!("fusewire: continue_stream failed ({s})"),
                        );
                    }
                }
            }
            Event::Refused { key, call, refusal } => {
                let Some(&ctx) = self.by_call.get(&call.to_raw()) else {
                    return;
                };
                let grpc = self.calls.get(&ctx).is_some_and(|c| c.1);
                self.calls
                    .insert(ctx, (Call::Answered { permit: None }, grpc));
                if let Some(m) = self.metrics(key) {
                    m.event(refusal.event);
                }
                self.reply_to(ctx, key, Reason::Rejected, grpc);
            }
            Event::Transition { key, transition: t } => {
                let here = t.reason != TransitionReason::Observed;
                if let Some(m) = self.metrics(key) {
                    m.transition(t.to, here);
                }
                if here {
                    let name = self
                        .engine
                        .as_ref()
                        .and_then(|e| e.key_name(key))
                        .unwrap_or("?");
                    host::log(
                        Level::Info,
                        &format!(
                            "fusewire: breaker {name:?} {} ({})",
                            t.to.name(),
                            t.reason.name()
                        ),
                    );
                }
            }
            Event::KeyExpired { key } => {
                self.key_metrics.remove(&key.to_raw());
            }
            Event::Store { key, issue } => {
                let name = self
                    .engine
                    .as_ref()
                    .and_then(|e| e.key_name(key))
                    .unwrap_or("?");
                host::log(
                    Level::Warn,
                    &format!("fusewire: key {name:?}: shared data: {issue}"),
                );
            }
        }
    }

    /// Answers stream `ctx` (not the current one) with the policy's fallback.
    fn reply_to(&mut self, ctx: u32, key: KeyId, reason: Reason, grpc: bool) {
        if host::set_effective_context(ctx) != host::OK {
            return;
        }
        if let Some(m) = self.metrics(key) {
            m.event(EventKind::FallbackSuccess);
        }
        let Some(policy) = self.policy_of(key) else {
            return;
        };
        self.send_reply(policy.fallback.reply(reason), grpc && policy.fallback.grpc);
    }

    fn policy_of(&self, key: KeyId) -> Option<&Policy> {
        let pid = self.engine.as_ref()?.key_policy(key)?;
        let i = self.policies.iter().position(|p| *p == pid)?;
        self.plugin.as_ref()?.policies.get(i)
    }

    fn send_reply(&self, reply: &Reply, grpc: bool) {
        let mut pairs: Vec<(&str, &str)> = reply
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        if grpc {
            pairs.retain(|(k, _)| *k != "content-type");
            pairs.push(("content-type", "application/grpc"));
        }
        let mut buf = Vec::new();
        host::serialize_map(&pairs, &mut buf);
        let grpc_status = if grpc { reply.grpc_status as i32 } else { -1 };
        let body: &[u8] = if grpc { &[] } else { &reply.body };
        let s = host::send_local_response(reply.status, "fusewire", body, &buf, grpc_status);
        if s != host::OK {
            host::log(
                Level::Warn,
                &format!("fusewire: send_local_response failed ({s})"),
            );
        }
    }

    /// Request headers: match a policy, find the key, ask the engine.
    fn start(&mut self, ctx: u32) -> Action {
        let Some(plugin) = self.plugin.clone() else {
            return Action::Continue;
        };
        let mut view = HostView::default();
        let Some(pi) = plugin
            .policies
            .iter()
            .position(|p| p.matcher.matches(&mut view))
        else {
            return Action::Continue; // no policy: untouched
        };
        let (Some(policy), Some(&pid)) = (plugin.policies.get(pi), self.policies.get(pi)) else {
            return Action::Continue;
        };
        policy
            .key
            .render(&policy.name, &mut view, &mut self.key_buf);
        let now = self.now();
        let rand = self.rand();
        let grpc = policy.fallback.grpc && is_grpc();
        let Some(engine) = self.engine.as_mut() else {
            return Action::Continue;
        };
        let Some(key) = engine.key(pid, &self.key_buf, now) else {
            return Action::Continue;
        };
        engine.prepare(key, now);
        self.settle(now);
        let Some(m) = self.metrics_of(key, pi, policy) else {
            return Action::Continue;
        };
        let Some(engine) = self.engine.as_mut() else {
            return Action::Continue;
        };
        let action = match engine.start(key, now, rand) {
            Start::Running(permit) => {
                self.by_call.insert(permit.id().to_raw(), ctx);
                let obs = Observed::default();
                self.calls.insert(
                    ctx,
                    (
                        Call::Running {
                            key,
                            permit,
                            started: now,
                            obs,
                        },
                        grpc,
                    ),
                );
                if let Some(m) = self.metrics.get_mut(m) {
                    m.in_flight(1);
                }
                Action::Continue
            }
            Start::Queued(ticket) => {
                self.by_call.insert(ticket.id().to_raw(), ctx);
                self.calls.insert(ctx, (Call::Queued { ticket }, grpc));
                Action::Pause
            }
            Start::Refused(r) => {
                if let Some(m) = self.metrics.get_mut(m) {
                    m.event(r.event);
                    m.event(EventKind::FallbackSuccess);
                }
                let reason = if r.is_short_circuit() {
                    Reason::ShortCircuited
                } else {
                    Reason::Rejected
                };
                // Events handled above may have pointed the host at another stream.
                host::set_effective_context(ctx);
                self.send_reply(policy.fallback.reply(reason), grpc);
                Action::Pause
            }
        };
        self.settle(now);
        action
    }

    /// Response headers (and trailers): what the upstream said.
    fn observe(&mut self, ctx: u32, map: u32) {
        let Some((Call::Running { permit, obs, .. }, _)) = self.calls.get_mut(&ctx) else {
            return; // our own reply, or not ours
        };
        if map == host::RESPONSE_HEADERS {
            obs.status = host::header_number(map, ":status");
            if let Some(e) = self.engine.as_mut() {
                e.stop_timer(permit); // the response started in time
            }
        }
        if let Some(g) = host::header_number(map, "grpc-status") {
            obs.grpc = Some(g);
        }
    }

    /// `on_log` (or, as a last resort, `on_done` / drop): classify, complete, release.
    fn finish(&mut self, ctx: u32) {
        let Some((call, _)) = self.calls.remove(&ctx) else {
            return;
        };
        let now = self.now();
        let rand = self.rand();
        let Some(engine) = self.engine.as_mut() else {
            return;
        };
        match call {
            Call::Running {
                key,
                permit,
                started,
                mut obs,
            } => {
                self.by_call.remove(&permit.id().to_raw());
                if obs.needs_flags() {
                    if let Some(f) = host::property(b"response\0flags") {
                        obs.flags = FlagSet::from_property(&f);
                    }
                }
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
            }
            Call::Queued { ticket, .. } => {
                self.by_call.remove(&ticket.id().to_raw());
                engine.cancel_ticket(ticket, now);
            }
            Call::Answered { permit } => {
                if let Some(p) = permit {
                    self.by_call.remove(&p.id().to_raw());
                    engine.cancel(p, now, rand); // the late result of a timed-out call
                }
            }
        }
        self.settle(now);
    }

    /// Tick: deadlines, shared flushes and heartbeats, metrics.
    fn tick(&mut self) {
        let now = self.now();
        self.settle(now);
        for m in &mut self.metrics {
            m.flush();
        }
    }
}

/// [`RequestView`] over host calls, caching the properties it read.
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

fn is_grpc() -> bool {
    host::header(host::REQUEST_HEADERS, "content-type")
        .is_some_and(|v| v.starts_with(b"application/grpc"))
}

/// The root context of a VM.
#[derive(Default)]
pub struct Root {
    worker: Rc<RefCell<Worker>>,
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
            Ok(_) | Err(host::NOT_FOUND) => b"{\"policies\":[]}".to_vec(),
            Err(s) => {
                host::log(
                    Level::Error,
                    &format!("fusewire: cannot read plugin configuration (status {s})"),
                );
                return false;
            }
        };
        let plugin = match Plugin::parse(&bytes) {
            Ok(p) => p,
            Err(e) => {
                host::log(
                    Level::Error,
                    &format!("fusewire: invalid plugin configuration: {e}"),
                );
                return false;
            }
        };
        let (tick, n) = (
            plugin.tick_ms.min(u64::from(u32::MAX)) as u32,
            plugin.policies.len(),
        );
        let Ok(mut w) = self.worker.try_borrow_mut() else {
            return false;
        };
        if !w.configure(plugin) {
            return false;
        }
        let s = host::set_tick_period_ms(tick);
        if s != host::OK {
            host::log(
                Level::Warn,
                &format!("fusewire: set_tick_period failed ({s}): no deadlines or flushes"),
            );
        }
        host::log(Level::Info, &format!("fusewire: configured {n} policies"));
        true
    }

    /// `on_tick`.
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
            started: false,
        }
    }
}

/// The context of one HTTP stream.
pub struct Stream {
    worker: Rc<RefCell<Worker>>,
    ctx: u32,
    started: bool,
}

impl Stream {
    fn with<R: Default>(&self, f: impl FnOnce(&mut Worker) -> R) -> R {
        self.worker
            .try_borrow_mut()
            .map(|mut w| f(&mut w))
            .unwrap_or_default()
    }

    /// Request headers: match, admit (breaker, bulkhead) or answer with the fallback.
    pub fn on_http_request_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        if std::mem::replace(&mut self.started, true) {
            return Action::Continue;
        }
        let ctx = self.ctx;
        self.worker
            .try_borrow_mut()
            .map_or(Action::Continue, |mut w| w.start(ctx))
    }

    /// Response headers: the upstream status (own replies are skipped).
    pub fn on_http_response_headers(
        &mut self,
        _num_headers: usize,
        _end_of_stream: bool,
    ) -> Action {
        let ctx = self.ctx;
        self.with(|w| w.observe(ctx, host::RESPONSE_HEADERS));
        Action::Continue
    }

    /// Response trailers: `grpc-status` of a normal gRPC response.
    pub fn on_http_response_trailers(&mut self, _num_trailers: usize) -> Action {
        let ctx = self.ctx;
        self.with(|w| w.observe(ctx, host::RESPONSE_TRAILERS));
        Action::Continue
    }

    /// `on_log` (Envoy: before `on_done`): classify with the final flags, record, release.
    pub fn on_log(&mut self) {
        let ctx = self.ctx;
        self.with(|w| w.finish(ctx));
    }

    /// `on_done`: finish if not finished yet.
    pub fn on_done(&mut self) -> bool {
        self.on_log();
        true
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // Last resort (on_delete without on_log/on_done): never leak a slot.
        self.on_log();
    }
}
