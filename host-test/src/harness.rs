//! [`Harness`]: one plugin loaded the way Envoy loads it (base VM, canary, one VM per
//! worker plus the main thread, each on its own OS thread), driven by a scheduler.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context as _};
use serde::{Deserialize, Serialize};

use crate::abi::Status;
use crate::clock::{Clock, ClockMode};
use crate::env::{Bus, Env, LifecycleCall, LogRecord, Process};
use crate::shared::CasMode;
use crate::stats::MetricValue;
use crate::types::{
    ClusterConfig, PluginConfig, RecordDetail, Request, RouteConfig, StreamRecord, UpstreamReply,
};
use crate::vm::{Vm, WasmModule};
use crate::worker::{Event, EventQueue, Scheduled, WorkerThread};

/// How to build a harness.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HarnessConfig {
    /// Number of Envoy worker threads (each gets its own VM). The main thread's VM
    /// is extra (index `workers`).
    pub workers: usize,
    /// Virtual (deterministic) or real time.
    pub clock: ClockMode,
    /// Shared-data CAS rules.
    pub cas_mode: CasMode,
    /// The wasm filter config.
    pub plugin: PluginConfig,
    /// Routes, first prefix match wins. Default: one unnamed route for "/" → "backend" (Envoy's routes have no name unless given one).
    pub routes: Vec<RouteConfig>,
    /// Clusters. Default: one cluster "backend".
    pub clusters: Vec<ClusterConfig>,
    /// Seed for WASI random_get, request ids and anything else random in the host.
    pub seed: u64,
    /// Level `proxy_get_log_level` reports (0 trace .. 5 critical; Envoy default 2 info).
    pub log_level: i32,
    /// Full stream records (default) or cheaper summaries.
    pub records: RecordDetail,
    /// Envoy's header-map and attribute lifetimes (default true): the request headers
    /// only until `on_http_request_headers` continues (again in `on_log`), no stream
    /// map in `on_done`/`on_delete`, header-derived `request.*` attributes only while
    /// the request headers are live. false: a map, once it exists, stays readable and
    /// writable until the stream is deleted (the harness before issue 8).
    pub strict_lifetimes: bool,
    /// The connection manager's `stream_idle_timeout` in ms (Envoy default 300 000; 0
    /// disables): a stream paused in the filter (or waiting on an upstream with no
    /// route timeout) that long gets 504 `stream_idle_timeout`.
    pub stream_idle_timeout_ms: u64,
    /// Bootstrap (`envoy.bootstrap.wasm`, `singleton: true`) service: one VM on the
    /// main thread only; worker threads run no filter (requests pass untouched).
    pub singleton: bool,
    /// Largest linear memory of a VM in bytes (proxy-wasm-cpp-host's
    /// `PROXY_WASM_HOST_MAX_WASM_MEMORY_SIZE_BYTES`, 1 GiB): `memory.grow` past it fails,
    /// so the guest's allocator sees an out-of-memory as it would in Envoy.
    pub max_vm_memory_bytes: u64,
}

impl Default for HarnessConfig {
    fn default() -> Self {
        HarnessConfig {
            workers: 2,
            clock: ClockMode::Virtual,
            cas_mode: CasMode::Envoy,
            plugin: PluginConfig::default(),
            routes: vec![RouteConfig::default()],
            clusters: vec![ClusterConfig::default()],
            seed: 1,
            log_level: 2,
            records: RecordDetail::Full,
            strict_lifetimes: true,
            stream_idle_timeout_ms: 300_000,
            singleton: false,
            max_vm_memory_bytes: 1 << 30,
        }
    }
}

/// What [`Harness::reload`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reload {
    /// Same VM key, new plugin key: each thread-local VM got a new root context.
    ReusedVms,
    /// Same VM key and plugin key: the existing plugin handles were kept, nothing ran.
    SamePlugin,
    /// Another VM key: new base VM and fresh clones.
    FreshVms,
}

/// cpp-host `PluginBase::key()`: root_id, plugin configuration and Envoy's
/// `createPluginKey`, which (in current Envoy: `PluginKeyTest.ConfigDifferencesProduceDistinctKeys`)
/// covers every field of the `PluginConfig` but `vm_config` — name, failure policy,
/// legacy `fail_open`, reload backoff, `allow_on_headers_stop_iteration`. Traffic
/// direction and listener metadata are fixed here.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PluginKey(
    String,
    String,
    String,
    crate::FailurePolicy,
    bool,
    u64,
    bool,
);

impl PluginKey {
    fn of(p: &PluginConfig) -> Self {
        PluginKey(
            p.root_id.clone(),
            p.configuration.clone(),
            p.name.clone(),
            p.failure_policy,
            p.fail_open,
            p.reload_backoff_ms,
            p.allow_on_headers_stop_iteration,
        )
    }
}

/// `WasmHandleBase::canary`: a throwaway clone (start functions, context create,
/// on_vm_start, on_configure), destroyed afterwards.
/// A rejection names what the plugin logged at warn or above, as Envoy's log shows
/// the canary's own lines before its "Unable to create Wasm HTTP filter".
fn canary(module: &WasmModule, env: &Arc<Env>) -> anyhow::Result<()> {
    // Only this canary's lines (an earlier config's canary logged before these).
    let before = env.process.logs().len();
    let mut canary = Vm::new(module, env.clone(), usize::MAX, "canary").context("canary VM")?;
    canary.start_root(&env.plugin).map_err(|e| {
        let said: Vec<String> = env
            .process
            .logs()
            .into_iter()
            .skip(before)
            .filter(|l| l.vm == "canary" && l.level >= 3)
            .map(|l| l.message)
            .collect();
        if said.is_empty() {
            anyhow::anyhow!("plugin config rejected by the canary VM: {e}")
        } else {
            anyhow::anyhow!(
                "plugin config rejected by the canary VM: {e}; it logged: {}",
                said.join("; ")
            )
        }
    })?;
    Ok(())
}

/// A loaded plugin with its worker VMs, driven by a time-ordered event scheduler.
///
/// Every event (request start, upstream reply, tick, callout reply, queue
/// notification) is dispatched to the OS thread of the worker it belongs to, one at
/// a time, in (time, sequence) order — so a virtual-clock run is deterministic. For
/// truly parallel load use [`Harness::run_parallel`] (real clock).
pub struct Harness {
    env: Arc<Env>,
    workers: Vec<WorkerThread>,
    /// The base VM (`_initialize` only), kept while its VM key is in use.
    _base: Vm,
    /// The code loaded now (part of the VM key).
    module: WasmModule,
    /// The base VM's canary results by plugin key (cpp-host
    /// `WasmHandleBase::plugin_canary_cache_`).
    canaries: Vec<(PluginKey, bool)>,
    queue: EventQueue,
    seq: u64,
    next_id: u64,
    finished: u64,
    records: BTreeMap<u64, StreamRecord>,
}

impl Harness {
    /// Loads `module` in a fresh simulated Envoy process.
    pub fn new(module: &WasmModule, cfg: HarnessConfig) -> anyhow::Result<Self> {
        Self::with_process(Process::new(), module, cfg)
    }

    /// Loads `module` in an existing process: plugins with the same vm_id share its
    /// shared data (config reload, side-by-side versions), stats are shared too.
    pub fn with_process(
        process: Arc<Process>,
        module: &WasmModule,
        cfg: HarnessConfig,
    ) -> anyhow::Result<Self> {
        if cfg.workers == 0 {
            bail!("workers: must be at least 1");
        }
        let n = cfg.workers;
        let env = Arc::new(Env {
            process,
            plugin: cfg.plugin.clone(),
            cas_mode: cfg.cas_mode,
            clock: Arc::new(Clock::new(cfg.clock)),
            clusters: cfg
                .clusters
                .iter()
                .map(|c| (c.name.clone(), c.clone()))
                .collect(),
            routes: cfg.routes.clone(),
            bus: Arc::new(Bus {
                inbox: (0..=n).map(|_| Mutex::new(Vec::new())).collect(),
                completed: Mutex::new(Vec::new()),
            }),
            seed: cfg.seed,
            log_level: cfg.log_level,
            records: cfg.records,
            strict_lifetimes: cfg.strict_lifetimes,
            stream_idle_timeout_ns: cfg.stream_idle_timeout_ms.saturating_mul(1_000_000),
            max_vm_memory_bytes: cfg.max_vm_memory_bytes,
        });
        let base = Vm::new(module, env.clone(), usize::MAX, "base").context("base VM")?;
        canary(module, &env)?;
        let mut workers = Vec::with_capacity(n + 1);
        for i in 0..n {
            workers.push(WorkerThread::spawn(
                env.clone(),
                module.clone(),
                i,
                format!("worker-{i}"),
                !cfg.singleton,
            )?);
        }
        workers.push(WorkerThread::spawn(
            env.clone(),
            module.clone(),
            n,
            "main".into(),
            true,
        )?);
        let mut h = Harness {
            env,
            workers,
            _base: base,
            module: module.clone(),
            canaries: vec![(PluginKey::of(&cfg.plugin), true)],
            queue: EventQueue::new(),
            seq: 0,
            next_id: 0,
            finished: 0,
            records: BTreeMap::new(),
        };
        h.collect();
        Ok(h)
    }

    /// Loads a new plugin config into this harness's listener, as an xDS update of the
    /// filter config does in Envoy; routes, clusters, clock and stream state carry on.
    ///
    /// Same VM key (cpp-host `makeVmKey(vm_id, vm configuration, code)`; the code is
    /// compared by content): the base VM is reused; the canary (a configure on a
    /// throwaway clone, `WasmHandleBase::canary`) runs for every plugin key not seen by
    /// this base before; every worker (and the main thread) keeps its VM — guest
    /// memory and globals carry over, no `_initialize`/`main` — and gets a new root
    /// context with the next context id: context create, on_vm_start (cpp-host runs it
    /// for every new root context), on_configure with the new config. The old root
    /// context then gets on_done and on_delete (the old plugin handle is released), once
    /// its in-flight streams have ended. Same plugin key too (name, root_id and plugin
    /// configuration unchanged): `getOrCreateThreadLocalPlugin` finds the existing
    /// plugin handle, nothing is called ([`Reload::SamePlugin`]).
    ///
    /// Other VM key: a new base VM, canary, and a fresh clone per worker (start
    /// functions, root context 1), as [`Harness::with_process`]; the old root context
    /// gets on_done/on_delete and its VM is dropped. This needs no stream in flight.
    ///
    /// Err (the harness keeps its old config): the canary rejected the config or
    /// trapped, the module could not be instantiated, or (changed VM key) streams are
    /// still in flight.
    pub fn reload(&mut self, module: &WasmModule, plugin: PluginConfig) -> anyhow::Result<Reload> {
        let old = &self.env.plugin;
        let same_vm = module.same_code(&self.module)
            && plugin.vm_id == old.vm_id
            && plugin.vm_configuration == old.vm_configuration;
        let key = PluginKey::of(&plugin);
        let env = Arc::new(self.env.with_plugin(plugin));
        if same_vm && key == PluginKey::of(old) {
            let env2 = env.clone();
            for w in &self.workers {
                let env = env2.clone();
                w.exec(move |vm| vm.swap_env(env));
            }
            self.env = env;
            self.collect();
            return Ok(Reload::SamePlugin);
        }
        if !same_vm && self.in_flight() > 0 {
            bail!(
                "reload with a new VM key (code, vm_id or vm configuration changed) needs no \
                 stream in flight ({} are): run_until_idle first",
                self.in_flight()
            );
        }
        let new_base = if same_vm {
            None
        } else {
            Some(Vm::new(module, env.clone(), usize::MAX, "base").context("base VM")?)
        };
        let cached = if same_vm {
            self.canaries.iter().find(|(k, _)| *k == key).map(|c| c.1)
        } else {
            None
        };
        let ok = match cached {
            Some(true) => true,
            Some(false) => bail!("plugin config rejected by the canary VM (cached)"),
            None => match canary(module, &env) {
                Ok(()) => true,
                Err(e) => {
                    if same_vm {
                        self.canaries.push((key, false));
                    }
                    return Err(e);
                }
            },
        };
        if let Some(base) = new_base {
            self._base = base;
            self.canaries.clear();
        }
        if cached.is_none() {
            self.canaries.push((key, ok));
        }
        for w in &self.workers {
            let (env, module) = (env.clone(), module.clone());
            w.exec(move |vm| vm.reload(env, module, same_vm));
        }
        self.env = env;
        self.module = module.clone();
        self.collect();
        Ok(if same_vm {
            Reload::ReusedVms
        } else {
            Reload::FreshVms
        })
    }

    /// The simulated Envoy process (shared data, stats, logs, lifecycle log).
    pub fn process(&self) -> &Arc<Process> {
        &self.env.process
    }

    /// Number of worker VMs (the main thread's VM is index `workers()`).
    pub fn workers(&self) -> usize {
        self.workers.len() - 1
    }

    /// Current time, ns since start.
    pub fn now_ns(&self) -> u64 {
        self.env.clock.now()
    }

    /// Steps the wall clock the guests read (`proxy_get_current_time_nanoseconds`,
    /// WASI clock 0) by `delta_ns`, either way: NTP correcting a drift, a VM resumed
    /// after a migration, an operator. Time, the monotonic clock (WASI clock 1) and
    /// every scheduled event go on unmoved.
    pub fn step_wall_clock(&self, delta_ns: i64) {
        self.env.clock.step_wall(delta_ns);
    }

    /// The clock mode.
    pub fn clock_mode(&self) -> ClockMode {
        self.env.clock.mode()
    }

    fn push(&mut self, at: u64, worker: usize, ev: Event) {
        self.seq += 1;
        self.queue.push(Scheduled {
            at,
            seq: self.seq,
            worker,
            ev,
        });
    }

    /// Moves events posted by VMs into the queue (worker order → deterministic) and
    /// finished streams into the records.
    fn collect(&mut self) {
        for w in 0..self.workers.len() {
            for (at, ev) in self.env.bus.take(w) {
                self.push(at, w, ev);
            }
        }
        let done = std::mem::take(
            &mut *self
                .env
                .bus
                .completed
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for r in done {
            self.finished += 1;
            self.records.insert(r.id, r);
        }
    }

    /// Starts a request on `worker` now; returns its stream id.
    pub fn submit(&mut self, worker: usize, req: Request, reply: UpstreamReply) -> u64 {
        let now = self.now_ns();
        self.submit_at(now, worker, req, reply)
    }

    /// Starts a request on `worker` at time `at_ns` (ns since start).
    pub fn submit_at(
        &mut self,
        at_ns: u64,
        worker: usize,
        req: Request,
        reply: UpstreamReply,
    ) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let w = worker.min(self.workers.len() - 1);
        self.push(
            at_ns,
            w,
            Event::Start {
                id,
                req: Box::new(req),
                reply: Box::new(reply),
            },
        );
        id
    }

    /// Dispatches the next event if it is due at or before `limit_ns`; false when
    /// there is none (the clock is not moved then).
    pub fn step(&mut self, limit_ns: u64) -> bool {
        if self.queue.peek().is_none_or(|s| s.at > limit_ns) {
            return false;
        }
        let Some(s) = self.queue.pop() else {
            return false;
        };
        match self.env.clock.mode() {
            ClockMode::Virtual => self.env.clock.advance_to(s.at),
            ClockMode::Real => {
                let now = self.now_ns();
                if s.at > now {
                    std::thread::sleep(Duration::from_nanos(s.at - now));
                }
            }
        }
        let ev = s.ev;
        self.workers[s.worker].exec(move |w| w.handle(ev));
        self.collect();
        true
    }

    /// Runs every event due up to `t_ns`, then moves the clock to `t_ns`.
    pub fn run_until(&mut self, t_ns: u64) {
        while self.step(t_ns) {}
        match self.env.clock.mode() {
            ClockMode::Virtual => self.env.clock.advance_to(t_ns),
            ClockMode::Real => {
                let now = self.now_ns();
                if t_ns > now {
                    std::thread::sleep(Duration::from_nanos(t_ns - now));
                }
            }
        }
    }

    /// Runs for `d` from now (virtual: instantly; ticks fire on schedule).
    pub fn run_for(&mut self, d: Duration) {
        let t = self.now_ns() + d.as_nanos() as u64;
        self.run_until(t);
    }

    /// Runs events until no stream is in flight (ticks alone do not keep it running),
    /// for at most `max` of clock time; returns whether everything finished.
    pub fn run_until_idle(&mut self, max: Duration) -> bool {
        let limit = self.now_ns() + max.as_nanos() as u64;
        while self.in_flight() > 0 {
            if !self.step(limit) {
                break;
            }
        }
        self.in_flight() == 0
    }

    /// Runs until stream `id` has finished (at most 1 h of clock time).
    pub fn run_until_complete(&mut self, id: u64) -> Option<StreamRecord> {
        let limit = self.now_ns() + 3_600_000_000_000;
        while !self.records.contains_key(&id) {
            if !self.step(limit) {
                break;
            }
        }
        self.records.get(&id).cloned()
    }

    /// Runs one request to completion on `worker` and returns what was observed.
    /// Panics if it does not finish within 1 h of clock time (a hang with no route
    /// timeout and no client timeout).
    pub fn request(&mut self, worker: usize, req: Request, reply: UpstreamReply) -> StreamRecord {
        let id = self.submit(worker, req, reply);
        self.run_until_complete(id)
            .unwrap_or_else(|| panic!("stream {id} did not finish within 1 h"))
    }

    /// A finished stream's record.
    pub fn record(&self, id: u64) -> Option<&StreamRecord> {
        self.records.get(&id)
    }

    /// Removes and returns every finished stream record, in id order.
    pub fn take_records(&mut self) -> Vec<StreamRecord> {
        std::mem::take(&mut self.records).into_values().collect()
    }

    /// Time of the next scheduled event, if any.
    pub fn next_event_ns(&self) -> Option<u64> {
        self.queue.peek().map(|s| s.at)
    }

    /// Streams submitted but not finished yet.
    pub fn in_flight(&self) -> usize {
        (self.next_id - self.finished) as usize
    }

    /// Shared data under this plugin's vm_id.
    pub fn shared_data(&self, key: &str) -> Option<(Vec<u8>, u32)> {
        self.env.process.shared.get(&self.env.plugin.vm_id, key)
    }

    /// Writes shared data under this plugin's vm_id with the harness's CAS rules.
    pub fn set_shared_data(&self, key: &str, value: Option<&[u8]>, cas: u32) -> Status {
        self.env
            .process
            .shared
            .set(self.env.cas_mode, &self.env.plugin.vm_id, key, value, cas)
    }

    /// Current value of the stat behind metric `name`.
    pub fn metric(&self, name: &str) -> Option<MetricValue> {
        self.env.process.stats.value(name)
    }

    /// `/stats`-style text for all metrics (`wasmcustom.<name>: <value>`).
    pub fn stats_text(&self) -> String {
        self.env.process.stats.stats_text()
    }

    /// `/stats/prometheus` text for all metrics.
    pub fn prometheus_text(&self) -> String {
        self.env.process.stats.prometheus_text()
    }

    /// Guest log lines.
    pub fn logs(&self) -> Vec<LogRecord> {
        self.env.process.logs()
    }

    /// Root-context lifecycle calls (context create, on_vm_start, on_configure) made so far.
    pub fn lifecycle(&self) -> Vec<LifecycleCall> {
        self.env.process.lifecycle()
    }

    /// Whether worker `w`'s VM is alive (false after a trap until a FAIL_RELOAD).
    pub fn worker_alive(&self, w: usize) -> bool {
        self.workers[w].exec(|vm| vm.alive())
    }

    /// Metric definitions worker `w`'s VM has made: Envoy keeps every one (an id →
    /// stat entry) for the VM's life, a repeated name too.
    pub fn metric_definitions(&self, w: usize) -> usize {
        self.workers[w].exec(|vm| vm.metric_definitions())
    }

    /// Real clock only: every worker thread runs its own list of requests at the same
    /// time (offsets in ns from the call), each on its own event loop; the main thread
    /// VM and workers without a list keep running their own events (ticks, queue
    /// notifications) meanwhile. Returns when all requests have finished, with their
    /// records.
    pub fn run_parallel(
        &mut self,
        per_worker: Vec<Vec<(u64, Request, UpstreamReply)>>,
    ) -> anyhow::Result<Vec<StreamRecord>> {
        self.run_parallel_capped(per_worker, usize::MAX)
    }

    /// [`Harness::run_parallel`] with at most `cap` streams in flight per worker: a
    /// request whose offset has passed waits for a stream to end (`cap` 1: back to
    /// back).
    pub fn run_parallel_capped(
        &mut self,
        per_worker: Vec<Vec<(u64, Request, UpstreamReply)>>,
        cap: usize,
    ) -> anyhow::Result<Vec<StreamRecord>> {
        if self.env.clock.mode() != ClockMode::Real {
            bail!("run_parallel needs the real clock (clock = \"real\")");
        }
        if per_worker.len() > self.workers() {
            bail!(
                "run_parallel: {} request lists for {} workers",
                per_worker.len(),
                self.workers()
            );
        }
        let start = self.now_ns();
        let mut pending: Vec<Vec<(u64, Event)>> =
            (0..self.workers.len()).map(|_| Vec::new()).collect();
        for s in std::mem::take(&mut self.queue)
            .into_sorted_vec()
            .into_iter()
            .rev()
        {
            pending[s.worker].push((s.at, s.ev));
        }
        let first = self.next_id;
        let mut rxs = Vec::new();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let n_lists = per_worker.len();
        let mut idle = Vec::new();
        for (w, slot) in pending.iter_mut().enumerate().skip(n_lists) {
            let queue = std::mem::take(slot);
            let flag = stop.clone();
            idle.push((
                w,
                self.workers[w]
                    .submit(move |vm| vm.run_local(VecDeque::new(), queue, Some(flag), usize::MAX)),
            ));
        }
        for (w, list) in per_worker.into_iter().enumerate() {
            let mut plan: Vec<(u64, u64, Request, UpstreamReply)> = Vec::with_capacity(list.len());
            for (off, req, reply) in list {
                plan.push((start + off, self.next_id, req, reply));
                self.next_id += 1;
            }
            plan.sort_by_key(|p| p.0);
            let queue = std::mem::take(&mut pending[w]);
            let plan: VecDeque<_> = plan.into();
            rxs.push((
                w,
                self.workers[w].submit(move |vm| vm.run_local(plan, queue, None, cap.max(1))),
            ));
        }
        for (w, rx) in rxs {
            let rest = rx
                .recv()
                .map_err(|_| anyhow::anyhow!("worker {w} panicked"))?;
            pending[w].extend(rest);
        }
        stop.store(true, std::sync::atomic::Ordering::Release);
        for (w, rx) in idle {
            let rest = rx.recv().map_err(|_| anyhow::anyhow!("VM {w} panicked"))?;
            pending[w].extend(rest);
        }
        for (w, evs) in pending.into_iter().enumerate() {
            for (at, ev) in evs {
                self.push(at, w, ev);
            }
        }
        let last = self.next_id;
        let done = std::mem::take(
            &mut *self
                .env
                .bus
                .completed
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        let mut out = Vec::with_capacity((last - first) as usize);
        for r in done {
            self.finished += 1;
            if (first..last).contains(&r.id) {
                out.push(r);
            } else {
                self.records.insert(r.id, r);
            }
        }
        self.collect();
        out.sort_by_key(|r| r.id);
        Ok(out)
    }
}
