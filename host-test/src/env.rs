//! State shared by every VM of one harness: the simulated Envoy process (shared data,
//! stats, logs), the plugin, clusters, the clock and the event bus.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use crate::clock::Clock;
use crate::shared::{CasMode, SharedStore};
use crate::stats::Stats;
use crate::types::{ClusterConfig, PluginConfig, RouteConfig, StreamRecord};
use crate::worker::Event;

/// One guest log line.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LogRecord {
    /// Time (ns since harness start).
    pub time_ns: u64,
    /// VM that logged: `base`, `canary`, `worker-<i>`, `main`.
    pub vm: String,
    /// Level 0 trace .. 5 critical.
    pub level: u8,
    /// Message text.
    pub message: String,
}

/// A lifecycle callback the host made into a VM (root-context calls only).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LifecycleCall {
    /// VM name: `base`, `canary`, `worker-<i>`, `main`.
    pub vm: String,
    /// Export called, e.g. `proxy_on_configure`.
    pub callback: String,
    /// Context id passed.
    pub context_id: u32,
    /// The guest's i32 result, if the export returns one and did not trap.
    pub result: Option<i32>,
}

/// The process-wide parts of a simulated Envoy: shared by all plugins and all harnesses
/// built on the same `Process` (so config reloads with the same vm_id keep shared data).
#[derive(Default)]
pub struct Process {
    /// Shared data and queues.
    pub shared: SharedStore,
    /// Stats behind metrics.
    pub stats: Stats,
    logs: Mutex<VecDeque<LogRecord>>,
    lifecycle: Mutex<Vec<LifecycleCall>>,
    /// 0: no echo; l + 1: echo level >= l.
    echo_level: AtomicU8,
    /// Upstream requests awaiting their response headers, all workers; and the most
    /// at once (see [`Process::upstream_peak`]).
    upstream: AtomicU64,
    upstream_peak: AtomicU64,
}

/// Most log lines kept (older lines are dropped first).
pub const MAX_LOGS: usize = 100_000;

impl Process {
    /// A fresh process.
    pub fn new() -> Arc<Self> {
        let p = Process::default();
        p.echo_level.store(u8::MAX, Ordering::Relaxed);
        Arc::new(p)
    }
    /// Echo guest logs at or above `level` (0..=5) to stderr; None disables echo.
    pub fn set_log_echo(&self, level: Option<u8>) {
        self.echo_level
            .store(level.unwrap_or(u8::MAX), Ordering::Relaxed);
    }
    pub(crate) fn log(&self, rec: LogRecord) {
        if rec.level >= self.echo_level.load(Ordering::Relaxed) {
            eprintln!(
                "[{:>12.6}s {} {}] {}",
                rec.time_ns as f64 / 1e9,
                rec.vm,
                crate::abi::LOG_LEVEL_NAMES
                    .get(rec.level as usize)
                    .unwrap_or(&"?"),
                rec.message
            );
        }
        let mut l = self.logs.lock().unwrap_or_else(|e| e.into_inner());
        if l.len() >= MAX_LOGS {
            l.pop_front();
        }
        l.push_back(rec);
    }
    /// An upstream request was sent (`awaiting`: the stream's mark, now set).
    pub(crate) fn upstream_sent(&self, awaiting: &mut bool) {
        *awaiting = true;
        let n = self.upstream.fetch_add(1, Ordering::SeqCst) + 1;
        self.upstream_peak.fetch_max(n, Ordering::SeqCst);
    }
    /// The stream's upstream request, if `awaiting` (then cleared), got its response
    /// headers or ended without them.
    pub(crate) fn upstream_done(&self, awaiting: &mut bool) {
        if std::mem::take(awaiting) {
            self.upstream.fetch_sub(1, Ordering::SeqCst);
        }
    }
    /// The most upstream requests awaiting their response headers at once, over every
    /// worker, since the process started or the last reset (`reset`). A bulkhead
    /// slot is held for at least that span, so this never exceeds a process-wide
    /// limit, however the workers' threads interleave.
    pub fn upstream_peak(&self, reset: bool) -> u64 {
        match reset {
            true => self
                .upstream_peak
                .swap(self.upstream.load(Ordering::SeqCst), Ordering::SeqCst),
            false => self.upstream_peak.load(Ordering::SeqCst),
        }
    }
    /// Guest log lines so far.
    pub fn logs(&self) -> Vec<LogRecord> {
        let l = self.logs.lock().unwrap_or_else(|e| e.into_inner());
        l.iter().cloned().collect()
    }
    pub(crate) fn lifecycle_call(&self, c: LifecycleCall) {
        self.lifecycle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(c);
    }
    /// Lifecycle (root-context) calls so far, in order.
    pub fn lifecycle(&self) -> Vec<LifecycleCall> {
        self.lifecycle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Per-worker inboxes of scheduled events plus finished stream records.
pub(crate) struct Bus {
    pub inbox: Vec<Mutex<Vec<(u64, Event)>>>,
    pub completed: Mutex<Vec<StreamRecord>>,
}

impl Bus {
    pub fn post(&self, worker: usize, at: u64, ev: Event) {
        if let Some(q) = self.inbox.get(worker) {
            q.lock().unwrap_or_else(|e| e.into_inner()).push((at, ev));
        }
    }
    pub fn take(&self, worker: usize) -> Vec<(u64, Event)> {
        std::mem::take(&mut *self.inbox[worker].lock().unwrap_or_else(|e| e.into_inner()))
    }
    pub fn finish(&self, rec: StreamRecord) {
        self.completed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(rec);
    }
}

/// Everything a VM's host functions can reach.
pub(crate) struct Env {
    pub process: Arc<Process>,
    pub plugin: PluginConfig,
    pub cas_mode: CasMode,
    pub clock: Arc<Clock>,
    pub clusters: HashMap<String, ClusterConfig>,
    pub routes: Vec<RouteConfig>,
    pub bus: Arc<Bus>,
    pub seed: u64,
    pub log_level: i32,
    pub records: crate::types::RecordDetail,
    /// Serve header maps and request attributes only while Envoy does.
    pub strict_lifetimes: bool,
    /// The connection manager's stream idle timeout (0: none).
    pub stream_idle_timeout_ns: u64,
    /// Largest linear memory of a VM.
    pub max_vm_memory_bytes: u64,
}

impl Env {
    /// The same process, clock, bus, routes and clusters with another plugin config
    /// (a config reload).
    pub fn with_plugin(&self, plugin: PluginConfig) -> Env {
        Env {
            process: self.process.clone(),
            plugin,
            cas_mode: self.cas_mode,
            clock: self.clock.clone(),
            clusters: self.clusters.clone(),
            routes: self.routes.clone(),
            bus: self.bus.clone(),
            seed: self.seed,
            log_level: self.log_level,
            records: self.records,
            strict_lifetimes: self.strict_lifetimes,
            stream_idle_timeout_ns: self.stream_idle_timeout_ns,
            max_vm_memory_bytes: self.max_vm_memory_bytes,
        }
    }

    pub fn route_for(&self, path: &str) -> Option<&RouteConfig> {
        self.routes.iter().find(|r| path.starts_with(&r.prefix))
    }
}
