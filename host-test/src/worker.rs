//! One Envoy worker (or the main thread): its VM, the HTTP streams it serves with
//! Envoy's filter-manager rules (frame delivery, iteration stops, local replies, trailers,
//! stream idle timeout), failure policy, ticks, callouts and queue notifications. Each
//! worker lives on its own OS thread ([`WorkerThread`]).

use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::ops::Bound;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::clock::Rng;
use crate::env::{Env, LogRecord};
use crate::headers::HeaderMap;
use crate::types::{
    flags, FailurePolicy, LocalReply, LocalReplySource, Outcome, RecordDetail, Request,
    ResetReason, StreamRecord, UpstreamReply,
};
use crate::vm::{FinalInfo, Phase, StartError, StreamData, Vm, WasmModule};

/// Something that happens to a worker at a point in time.
#[derive(Debug, Clone)]
pub(crate) enum Event {
    Start {
        id: u64,
        req: Box<Request>,
        reply: Box<UpstreamReply>,
    },
    Upstream {
        id: u64,
    },
    DownstreamReset {
        id: u64,
    },
    /// The client has received the whole response: the stream ends.
    Delivered {
        id: u64,
    },
    /// The client has sent its body: it reaches the filter.
    Uploaded {
        id: u64,
    },
    /// The rest of a streamed response (`body_after_ns`) arrives, or the route
    /// timeout ends it.
    BodyArrived {
        id: u64,
    },
    IdleTimeout {
        id: u64,
        gen: u64,
    },
    Tick {
        root: u32,
        gen: u64,
    },
    CallDone {
        token: u32,
        timed_out: bool,
    },
    GrpcDone {
        token: u32,
    },
    QueueReady {
        queue: u32,
    },
}

/// A frame of one direction of a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Headers,
    Body,
    Trailers,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    /// Being processed.
    Active,
    /// Request iteration stopped in the filter; frames from `Some(stage)` on are still
    /// to be delivered (a StopAll from the headers), None: all delivered.
    PausedReq(Option<Stage>),
    /// Sent upstream, waiting for its answer.
    Upstream,
    /// Response iteration stopped in the filter.
    PausedResp(Option<Stage>),
    /// The response headers went on; its body is still arriving (`body_after_ns`).
    Streaming,
    /// The response is complete; the client is still receiving it (`download_ns`).
    Delivering,
    /// The request headers went on; the client is still sending its body
    /// (`upload_ns`).
    Uploading,
}

enum Due {
    Response,
    Reset,
    Timeout,
}

/// A response as Envoy holds it (the source when the filter is bypassed or a direct
/// local reply replaced it).
#[derive(Clone, Default)]
struct Resp {
    headers: HeaderMap,
    body: Vec<u8>,
    trailers: Option<HeaderMap>,
}

struct Ctl {
    ctx: u32,
    /// Root context the stream's context belongs to (0 without a context).
    root: u32,
    st: St,
    req: Request,
    reply: UpstreamReply,
    rec: StreamRecord,
    /// The filter is not (any more) in this stream's chain.
    bypass: bool,
    /// The stream's context lives in a VM that failed (Envoy's `isFailed()`).
    failed: bool,
    is_grpc: bool,
    is_head: bool,
    due: Option<Due>,
    sent_ns: u64,
    /// When the route timeout ends the upstream response (`u64::MAX`: none).
    timeout_at: u64,
    /// Sent upstream, its response headers not yet in ([`Process::upstream_peak`]).
    awaiting_upstream: bool,
    /// When the client has sent its whole body (`upload_ns` after the start).
    uploaded_at: u64,
    in_response: bool,
    /// The response headers left the filter chain for the client (Envoy's
    /// `non_100_response_headers_encoded_`): a local reply can only reset now.
    headers_sent: bool,
    resp: Option<Resp>,
    /// A direct local reply replaced the response: ignore the VM's copy.
    direct: bool,
    /// The response in the encoder chain is a local reply.
    local_resp: bool,
    flags: u64,
    details: String,
    /// Envoy has set the response code details (possibly to "").
    details_set: bool,
    backend_latency: Option<u64>,
    idle_gen: u64,
}

impl Ctl {
    /// The stream is reset after its response headers reached the client (`flag`
    /// says why): the client saw the upstream's status and no trailers.
    fn reset_after_headers(&mut self, flag: u64) {
        self.rec.outcome = Outcome::ResetAfterHeaders;
        self.rec.response_status = self
            .resp
            .as_ref()
            .and_then(|r| r.headers.get_str(":status"))
            .and_then(|s| s.parse().ok());
        self.rec.response_trailers = None;
        self.flags |= flag;
    }
}

/// What a filter callback's return value means to the filter manager.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Flow {
    /// Iteration continues.
    Continue,
    /// This frame stopped; later frames are still delivered to the filter.
    StopIteration,
    /// Headers returned StopAll*: nothing more is delivered until continued.
    StopAll,
    /// The stream is done with (local reply sent, closed, failed or gone).
    Stop,
}

/// A worker's VM and streams. Lives on its worker thread.
pub(crate) struct WorkerVm {
    env: Arc<Env>,
    index: usize,
    name: String,
    module: WasmModule,
    vm: Option<Vm>,
    /// Root context id of the plugin in `vm` (new streams are its children).
    root: u32,
    /// When the plugin handle was last (re)loaded (FAIL_RELOAD backoff counts from it).
    last_load: u64,
    /// Configure failed on this worker: Envoy runs it without the filter.
    no_filter: bool,
    /// The worker runs the filter at all (false: bootstrap singleton on a worker).
    filter: bool,
    /// Root contexts of plugin configs replaced by a reload that still have streams in
    /// flight (each stream context holds its plugin handle in Envoy); retired when
    /// their last stream ends.
    draining: Vec<u32>,
    rng: Rng,
    ctls: BTreeMap<u64, Box<Ctl>>,
    /// (context id, stream id) of every stream in `ctls` that has a context: finds the
    /// streams a VM's flagged contexts belong to without scanning all of them.
    by_ctx: BTreeSet<(u32, u64)>,
    /// Keep full stream records (headers, bodies, callbacks) or summaries.
    full: bool,
    pumping: bool,
}

impl WorkerVm {
    /// Clones a VM for this worker and runs its root lifecycle. A clone whose
    /// on_vm_start / on_configure fails or traps leaves the worker without the filter
    /// (Envoy's null plugin handle); `filter = false` starts it without a VM at all.
    pub fn new(
        env: Arc<Env>,
        module: WasmModule,
        index: usize,
        name: String,
        filter: bool,
    ) -> anyhow::Result<Self> {
        let full = env.records == RecordDetail::Full;
        let rng = Rng::new(env.seed ^ 0xFA11 ^ (index as u64).wrapping_mul(0x9E37_79B9));
        let mut w = WorkerVm {
            env: env.clone(),
            index,
            name: name.clone(),
            module: module.clone(),
            vm: None,
            root: 0,
            last_load: env.clock.now(),
            no_filter: !filter,
            filter,
            draining: Vec::new(),
            rng,
            ctls: BTreeMap::new(),
            by_ctx: BTreeSet::new(),
            full,
            pumping: false,
        };
        if !filter {
            return Ok(w);
        }
        let mut vm = Vm::new(&module, env.clone(), index, &name)?;
        match vm.start_root(&env.plugin) {
            Ok(root) => {
                w.root = root;
                w.vm = Some(vm);
            }
            Err(e) => {
                w.no_filter = true;
                w.log(
                    5,
                    format!("{name}: plugin not started ({e}); running without the filter"),
                );
            }
        }
        Ok(w)
    }

    /// Whether the VM is alive (not failed).
    pub fn alive(&self) -> bool {
        self.vm.is_some()
    }

    /// Metric definitions the VM has made (Envoy keeps each for the VM's life).
    pub fn metric_definitions(&self) -> usize {
        self.vm
            .as_ref()
            .map_or(0, |vm| vm.store.data().metric_ids.len())
    }

    fn now(&self) -> u64 {
        self.env.clock.now()
    }

    fn post(&self, at: u64, ev: Event) {
        self.env.bus.post(self.index, at, ev);
    }

    fn log(&self, level: u8, message: String) {
        self.env.process.log(LogRecord {
            time_ns: self.now(),
            vm: self.name.clone(),
            level,
            message,
        });
    }

    fn legacy_fail_open(&self) -> bool {
        self.env.plugin.fail_open
    }

    /// Handles one event at the current clock time.
    pub fn handle(&mut self, ev: Event) {
        match ev {
            Event::Start { id, req, reply } => self.start(id, *req, *reply),
            Event::Upstream { id } => self.upstream(id),
            Event::DownstreamReset { id } => self.downstream_reset(id),
            Event::Delivered { id } => self.end(id),
            Event::Uploaded { id } => {
                if let Some(c) = self.ctls.get_mut(&id) {
                    if c.st == St::Uploading {
                        c.st = St::Active;
                        // The body's arrival is activity: Envoy's idle timer starts over
                        // (found by review: the upload's timer fired while the upstream
                        // answered).
                        self.arm_idle(id);
                        self.run_request(id, Stage::Body);
                    }
                }
            }
            Event::BodyArrived { id } => self.body_arrived(id),
            Event::IdleTimeout { id, gen } => self.idle_timeout(id, gen),
            Event::Tick { root, gen } => {
                let Some(vm) = self.vm.as_mut() else { return };
                let current = |vm: &Vm| {
                    vm.store
                        .data()
                        .ticks
                        .get(&root)
                        .copied()
                        .filter(|&(p, g)| g == gen && p > 0)
                };
                if current(vm).is_none() {
                    return;
                }
                if let Err(e) = vm.on_tick(root) {
                    return self.fail(e, None);
                }
                if let Some((period, _)) = self.vm.as_ref().and_then(current) {
                    self.post(
                        self.now() + period as u64 * 1_000_000,
                        Event::Tick { root, gen },
                    );
                }
            }
            Event::CallDone { token, timed_out } => {
                let Some(vm) = self.vm.as_mut() else { return };
                let Some(call) = vm.store.data_mut().calls.remove(&token) else {
                    return;
                };
                // The call belongs to its root context: delivered even when the stream
                // that made it is gone.
                let resp = crate::callouts::http_call_response(call.reply, timed_out);
                if let Err(e) = vm.on_http_call_response(call.root, token, resp) {
                    return self.fail(e, None);
                }
            }
            Event::GrpcDone { token } => {
                let Some(vm) = self.vm.as_mut() else { return };
                let Some(g) = vm.store.data_mut().grpc.remove(&token) else {
                    return; // cancelled
                };
                let root = g.root;
                for ev in crate::callouts::grpc_events(token, g) {
                    let Some(vm) = self.vm.as_mut() else { return };
                    if let Err(e) = vm.on_grpc(root, token, ev) {
                        return self.fail(e, None);
                    }
                }
            }
            Event::QueueReady { queue } => {
                let Some(vm) = self.vm.as_mut() else { return };
                let root = vm
                    .store
                    .data()
                    .queue_roots
                    .get(&queue)
                    .copied()
                    .unwrap_or(self.root);
                // The registering root context was deleted (a reload): Envoy finds no
                // context for the queue's context id.
                if root != 0 && !vm.store.data().has_context(root) {
                    return;
                }
                if let Err(e) = vm.on_queue_ready(root, queue) {
                    return self.fail(e, None);
                }
            }
        }
        self.pump(None);
        self.finish_shutdowns();
    }

    fn start(&mut self, id: u64, req: Request, reply: UpstreamReply) {
        let now = self.now();
        let route = self.env.route_for(&req.path).cloned();
        let rec = StreamRecord {
            id,
            worker: self.index,
            context_id: 0,
            start_ns: now,
            end_ns: now,
            outcome: Outcome::UpstreamOk,
            sent_upstream: false,
            upstream_request_headers: None,
            upstream_status: None,
            upstream_grpc_status: None,
            local_reply: None,
            response_status: None,
            response_headers: None,
            response_body: vec![],
            callbacks: vec![],
            code_details: String::new(),
            response_flags: 0,
            upstream_request_trailers: None,
            response_trailers: None,
        };
        if let Some(t) = req.client_timeout_ns {
            self.post(now + t, Event::DownstreamReset { id });
        }
        let headers = self.request_headers(id, &req);
        let upload_ns = req.upload_ns;
        let mut ctl = Box::new(Ctl {
            ctx: 0,
            root: 0,
            st: St::Active,
            is_grpc: crate::grpc::is_grpc_request(&headers),
            is_head: req.method.eq_ignore_ascii_case("HEAD"),
            req,
            reply,
            rec,
            bypass: false,
            failed: false,
            due: None,
            sent_ns: 0,
            timeout_at: u64::MAX,
            awaiting_upstream: false,
            uploaded_at: now + upload_ns,
            in_response: false,
            headers_sent: false,
            resp: None,
            direct: false,
            local_resp: false,
            flags: 0,
            details: String::new(),
            details_set: false,
            backend_latency: None,
            idle_gen: 0,
        });
        if self.vm.is_none() && !self.no_filter {
            self.maybe_reload(now);
        }
        match self.vm.as_mut() {
            _ if self.no_filter => ctl.bypass = true,
            // Envoy's createContext on a failed VM: FAIL_OPEN skips the filter, anything
            // else gets a context in the failed VM (which fails the stream closed).
            None if self.env.plugin.failure_policy == FailurePolicy::FailOpen
                || self.env.plugin.fail_open =>
            {
                ctl.bypass = true
            }
            None => ctl.failed = true,
            Some(vm) => {
                let ctx = vm.next_context_id();
                ctl.ctx = ctx;
                ctl.root = self.root;
                ctl.rec.context_id = ctx;
                let data = StreamData {
                    root: self.root,
                    route_name: route.as_ref().map(|r| r.name.clone()),
                    cluster_name: route
                        .as_ref()
                        .filter(|r| self.env.clusters.contains_key(&r.cluster))
                        .map(|r| r.cluster.clone()),
                    start_wall_ns: self.env.clock.wall(),
                    req_headers: headers,
                    req_headers_live: true,
                    ..StreamData::default()
                };
                vm.store.data_mut().streams.insert(ctx, data);
                if self.full {
                    ctl.rec.callbacks.push("on_context_create".into());
                }
            }
        }
        let (ctx, created) = (ctl.ctx, ctl.ctx != 0);
        self.ctls.insert(id, ctl);
        if created {
            self.by_ctx.insert((ctx, id));
            let root = self.root;
            if let Some(Err(e)) = self.vm.as_mut().map(|vm| vm.on_context_create(ctx, root)) {
                // The legacy fail-open: the stream goes on without the filter
                // (cpp-host's `CHECK_FAIL_HTTP` continues; it hung here: found by
                // review); otherwise `fail` answered it (`wasm_fail_stream`).
                let open = self.legacy_fail_open();
                self.fail(e, Some(id));
                if !open {
                    return;
                }
            }
        }
        self.run_request(id, Stage::Headers);
    }

    /// The request header map as Envoy's connection manager hands it to the filters.
    fn request_headers(&self, id: u64, req: &Request) -> HeaderMap {
        let mut h = req.header_map();
        h.add("x-forwarded-proto", b"http");
        h.add("x-request-id", request_id(self.env.seed, id).as_bytes());
        h
    }

    /// FAIL_RELOAD (`PluginConfig::maybeReloadHandleIfNeeded`): each new stream draws
    /// a jittered interval; the VM is re-cloned once that much time has passed since
    /// the last load.
    fn maybe_reload(&mut self, now: u64) {
        if self.env.plugin.failure_policy != FailurePolicy::FailReload || self.env.plugin.fail_open
        {
            return;
        }
        let base = self.env.plugin.reload_backoff_ms.max(2);
        let interval_ms = base + self.rng.next_u64() % (base / 2);
        if now.saturating_sub(self.last_load) < interval_ms * 1_000_000 {
            return;
        }
        self.last_load = now;
        self.log(2, "FAIL_RELOAD: re-cloning the VM".into());
        match Vm::new(&self.module, self.env.clone(), self.index, &self.name) {
            Ok(mut vm) => match vm.start_root(&self.env.plugin) {
                Ok(root) => {
                    self.root = root;
                    self.vm = Some(vm);
                }
                Err(e) => self.log(5, format!("reload failed: {e}")),
            },
            Err(e) => self.log(5, format!("reload failed: {e:#}")),
        }
    }

    /// A config reload on this worker (cpp-host `getOrCreateThreadLocalPlugin` for the
    /// new plugin, then the old plugin handle released).
    ///
    /// `reuse` (same VM key: vm_id + vm configuration + code): the thread-local VM is
    /// kept (`getOrCreateThreadLocalWasm` finds it) unless it failed or the worker had
    /// no plugin handle; a new root context (next context id) gets context create →
    /// on_vm_start → on_configure (`WasmBase::start`, `configure`); guest memory carries
    /// over, no start function runs. Otherwise a fresh clone starts (start functions,
    /// root context 1). Either way the old root context is then shut down
    /// (`~PluginHandleBase` → `WasmBase::startShutdown`: on_done, on_delete) — once
    /// its last in-flight stream has ended.
    pub fn reload(&mut self, env: Arc<Env>, module: WasmModule, reuse: bool) {
        self.env = env.clone();
        self.module = module;
        self.last_load = self.now();
        if !self.filter {
            return;
        }
        let old = (!self.no_filter && self.root != 0).then_some(self.root);
        self.no_filter = false;
        if reuse {
            if let Some(vm) = self.vm.as_mut() {
                vm.store.data_mut().env = env.clone();
                match vm.start_root(&env.plugin) {
                    Ok(root) => self.root = root,
                    Err(StartError::Rejected(e)) => {
                        self.no_filter = true;
                        self.log(
                            5,
                            format!(
                                "{}: plugin not started ({e}); running without the filter",
                                self.name
                            ),
                        );
                    }
                    Err(StartError::Trap(e)) => {
                        self.no_filter = true;
                        self.fail(e, None);
                    }
                }
                if let Some(old) = old {
                    self.draining.push(old);
                    self.retire_if_drained(old);
                } else if self.no_filter {
                    self.vm = None;
                }
                self.pump(None);
                self.finish_shutdowns();
                return;
            }
        }
        // A fresh clone; the old VM (if any) is released after it has started.
        let old_vm = self.vm.take();
        match Vm::new(&self.module, env.clone(), self.index, &self.name) {
            Ok(mut vm) => match vm.start_root(&env.plugin) {
                Ok(root) => {
                    self.root = root;
                    self.vm = Some(vm);
                }
                Err(e) => {
                    self.no_filter = true;
                    self.log(
                        5,
                        format!(
                            "{}: plugin not started ({e}); running without the filter",
                            self.name
                        ),
                    );
                }
            },
            Err(e) => {
                self.no_filter = true;
                self.log(5, format!("{}: VM not created ({e:#})", self.name));
            }
        }
        if let (Some(mut vm), Some(old)) = (old_vm, old) {
            if let Err(e) = vm.shutdown_root(old) {
                self.log(5, format!("wasm VM failed: {e}"));
            }
        }
    }

    /// A reload that keeps the plugin handle (same VM and plugin key): only the
    /// non-key settings (failure policy, ...) change.
    pub fn swap_env(&mut self, env: Arc<Env>) {
        if let Some(vm) = self.vm.as_mut() {
            vm.store.data_mut().env = env.clone();
        }
        self.env = env;
    }

    /// Shuts down draining root `root` once no stream of it is in flight; drops the VM
    /// when nothing in it serves the current config any more.
    fn retire_if_drained(&mut self, root: u32) {
        if self.ctls.values().any(|c| c.ctx != 0 && c.root == root) {
            return;
        }
        self.draining.retain(|&r| r != root);
        let Some(vm) = self.vm.as_mut() else { return };
        if let Err(e) = vm.shutdown_root(root) {
            return self.fail(e, None);
        }
        self.finish_shutdowns();
        if self.no_filter && self.draining.is_empty() {
            // Only the old plugin handle held this VM (the new config has none here).
            self.vm = None;
        }
    }

    /// `on_delete` of root contexts that called `proxy_done` (after that VM call).
    fn finish_shutdowns(&mut self) {
        loop {
            let Some(vm) = self.vm.as_mut() else { return };
            let Some(root) = vm.store.data_mut().done_ready.pop() else {
                return;
            };
            if let Err(e) = vm.delete_root(root) {
                return self.fail(e, None);
            }
        }
    }

    /// A guest trap: the VM is lost (shared data is kept). Streams with a context in it
    /// fail at their next filter callback (503 `wasm_fail_stream`), or with the legacy
    /// `fail_open` continue without the filter; the trapping stream fails at once.
    fn fail(&mut self, msg: String, trapping: Option<u64>) {
        self.log(5, format!("wasm VM failed: {msg}"));
        self.vm = None;
        // Root contexts waiting for their streams die with the VM.
        self.draining.clear();
        let open = self.legacy_fail_open();
        for ctl in self.ctls.values_mut() {
            if !ctl.bypass {
                ctl.failed = true;
                ctl.bypass = open;
            }
        }
        if let Some(id) = trapping.filter(|_| !open) {
            self.fail_stream(id);
        }
    }

    /// Envoy's `Context::failStream`: 503 `wasm_fail_stream` (UNAVAILABLE for gRPC); the
    /// filter sees nothing more of the stream.
    fn fail_stream(&mut self, id: u64) {
        let Some(ctl) = self.ctls.get_mut(&id) else {
            return;
        };
        ctl.bypass = true;
        let lr = LocalReply {
            source: LocalReplySource::WasmFailure,
            status: 503,
            details: "wasm_fail_stream".into(),
            headers: vec![],
            body: String::new(),
            grpc_status: Some(crate::grpc::status::UNAVAILABLE),
        };
        self.local_reply(id, lr);
    }

    fn stream_data(&mut self, ctx: u32) -> Option<&mut StreamData> {
        self.vm.as_mut()?.store.data_mut().streams.get_mut(&ctx)
    }

    /// Calls one stream callback and applies its effects (and those it had on other
    /// streams, right after it returns).
    fn call(&mut self, id: u64, phase: Phase, n: usize, eos: bool) -> Flow {
        let open = self.legacy_fail_open();
        let Some(ctl) = self.ctls.get_mut(&id) else {
            return Flow::Stop;
        };
        if ctl.bypass {
            return Flow::Continue;
        }
        if ctl.failed || self.vm.is_none() {
            // CHECK_FAIL: the context's VM has failed.
            if open {
                ctl.bypass = true;
                return Flow::Continue;
            }
            self.fail_stream(id);
            return Flow::Stop;
        }
        let ctx = ctl.ctx;
        if self.full {
            ctl.rec.callbacks.push(phase_name(phase).into());
        }
        ctl.st = St::Active;
        let Some(vm) = self.vm.as_mut() else {
            return Flow::Stop;
        };
        let action = match vm.on_stream(phase, ctx, n, eos) {
            Ok(a) => a,
            Err(e) => {
                self.fail(e, Some(id));
                return match self.ctls.get(&id) {
                    Some(c) if c.bypass && !c.direct && c.rec.local_reply.is_none() => {
                        Flow::Continue
                    }
                    _ => Flow::Stop,
                };
            }
        };
        // cpp-host `convertVmCallResultTo*Status`: after a local reply on any stream of
        // the VM (the stop flag is the VM's), the calling stream's action is a stop.
        let flow = match vm.store.data().stop_next {
            true => flow_of(phase, STOP_ALL, false),
            false => flow_of(
                phase,
                action,
                self.env.plugin.allow_on_headers_stop_iteration,
            ),
        };
        let cross = vm.store.data().switched_context;
        let Some(s) = self.stream_data(ctx) else {
            return Flow::Stop;
        };
        s.continue_request = false;
        s.continue_response = false;
        if flow == Flow::Continue {
            // Envoy drops its pointer to the frame once the filter continues it.
            match phase {
                Phase::RequestHeaders => s.req_headers_live = false,
                Phase::RequestBody => s.req_body_live = false,
                Phase::RequestTrailers => s.req_trailers_live = false,
                Phase::ResponseHeaders => s.resp_headers_live = false,
                Phase::ResponseBody => s.resp_body_live = false,
                Phase::ResponseTrailers => s.resp_trailers_live = false,
                _ => {}
            }
        }
        let close = std::mem::take(&mut s.close);
        let lr = s.local_reply.take();
        if cross {
            self.pump(Some(id));
        }
        if close {
            self.close(id);
            return Flow::Stop;
        }
        if let Some(lr) = lr {
            self.local_reply(id, lr);
            return Flow::Stop;
        }
        if self.ctls.get(&id).is_none_or(|c| c.st != St::Active) {
            return Flow::Stop;
        }
        flow
    }

    fn set_st(&mut self, id: u64, st: St) {
        if let Some(c) = self.ctls.get_mut(&id) {
            c.st = st;
        }
        // Waiting on the filter, or on a client that sends nothing until its upload
        // ends: Envoy's idle timer runs (reset only by activity on the stream).
        if matches!(st, St::PausedReq(_) | St::PausedResp(_) | St::Uploading) {
            self.arm_idle(id);
        }
    }

    /// Arms Envoy's stream idle timer for a stream that now waits on something.
    fn arm_idle(&mut self, id: u64) {
        let idle = self.env.stream_idle_timeout_ns;
        if idle == 0 {
            return;
        }
        let at = self.now() + idle;
        if let Some(c) = self.ctls.get_mut(&id) {
            c.idle_gen += 1;
            let gen = c.idle_gen;
            self.post(at, Event::IdleTimeout { id, gen });
        }
    }

    /// Delivers the request frames from `from` on; forwards upstream once iteration
    /// continues (a Continue from the last frame delivered, or `continue_stream`).
    fn run_request(&mut self, id: u64, from: Stage) {
        let Some(ctl) = self.ctls.get(&id) else {
            return;
        };
        let (ctx, n) = (ctl.ctx, ctl.req.headers.len() + 6);
        let (body, trailers) = (ctl.req.body.clone(), ctl.req.trailers.clone());
        let mut stopped = false;
        let uploaded_at = ctl.uploaded_at;
        for stage in [Stage::Headers, Stage::Body, Stage::Trailers] {
            if stage_index(stage) < stage_index(from) {
                continue;
            }
            let more = match stage {
                Stage::Headers => false,
                Stage::Body => !body.is_empty(),
                Stage::Trailers => !trailers.is_empty(),
            };
            if more && uploaded_at > self.now() {
                // A slow upload (`upload_ns`): the rest of the request comes later,
                // also to a stream continued before then.
                self.set_st(id, St::Uploading);
                return self.post(uploaded_at, Event::Uploaded { id });
            }
            let flow = match stage {
                Stage::Headers => {
                    let eos = body.is_empty() && trailers.is_empty();
                    self.call(id, Phase::RequestHeaders, n, eos)
                }
                Stage::Body if !body.is_empty() => {
                    if let Some(s) = self.stream_data(ctx) {
                        s.req_body = body.clone();
                        s.req_body_live = true;
                    }
                    self.call(id, Phase::RequestBody, body.len(), trailers.is_empty())
                }
                Stage::Trailers if !trailers.is_empty() => {
                    if let Some(s) = self.stream_data(ctx) {
                        s.req_trailers = Some(pairs_map(&trailers));
                        s.req_trailers_live = true;
                    }
                    self.call(id, Phase::RequestTrailers, trailers.len(), true)
                }
                _ => continue,
            };
            match flow {
                Flow::Stop => return,
                Flow::Continue => stopped = false,
                Flow::StopIteration => stopped = true,
                Flow::StopAll => {
                    let next = next_stage(stage, !body.is_empty(), !trailers.is_empty());
                    return self.set_st(id, St::PausedReq(next));
                }
            }
        }
        if stopped {
            self.set_st(id, St::PausedReq(None));
        } else {
            self.send_upstream(id);
        }
    }

    fn send_upstream(&mut self, id: u64) {
        let now = self.now();
        let Some(ctl) = self.ctls.get(&id) else {
            return;
        };
        let (ctx, bypass) = (ctl.ctx, ctl.bypass);
        let Some(route) = self.env.route_for(&ctl.req.path).cloned() else {
            return self.router_reply(id, 404, "route_not_found", flags::NO_ROUTE_FOUND, "");
        };
        let cluster = self.env.clusters.get(&route.cluster).cloned();
        let original = (
            self.request_headers(id, &ctl.req),
            pairs_map(&ctl.req.trailers),
        );
        let (headers, trailers) = match (bypass, self.stream_data(ctx)) {
            (false, Some(s)) => {
                if let Some(c) = &cluster {
                    s.upstream_address = Some(c.address.clone());
                    s.upstream_port = c.port;
                }
                (s.req_headers.clone(), s.req_trailers.clone())
            }
            _ => (original.0, (!original.1.is_empty()).then_some(original.1)),
        };
        if cluster.is_none() {
            return self.router_reply(id, 503, "cluster_not_found", flags::NO_CLUSTER_FOUND, "");
        }
        let idle = self.env.stream_idle_timeout_ns;
        let Some(ctl) = self.ctls.get_mut(&id) else {
            return;
        };
        ctl.rec.sent_upstream = true;
        if self.full {
            ctl.rec.upstream_request_headers = Some(headers);
            ctl.rec.upstream_request_trailers = trailers;
        }
        ctl.st = St::Upstream;
        ctl.sent_ns = now;
        self.env.process.upstream_sent(&mut ctl.awaiting_upstream);
        let timeout = route.timeout_ms * 1_000_000;
        ctl.timeout_at = if timeout > 0 { now + timeout } else { u64::MAX };
        let (due, at) = match &ctl.reply {
            UpstreamReply::Response { latency_ns, .. }
            | UpstreamReply::Reset { latency_ns, .. }
                if timeout == 0 || *latency_ns <= timeout =>
            {
                let d = if matches!(ctl.reply, UpstreamReply::Reset { .. }) {
                    Due::Reset
                } else {
                    Due::Response
                };
                (Some(d), now + latency_ns)
            }
            _ if timeout > 0 => (Some(Due::Timeout), now + timeout),
            _ => (None, u64::MAX),
        };
        let has_due = due.is_some();
        ctl.due = due;
        if has_due {
            self.post(at, Event::Upstream { id });
        }
        if idle > 0 && at.saturating_sub(now) > idle {
            self.arm_idle(id);
        }
    }

    fn upstream(&mut self, id: u64) {
        let now = self.now();
        let Some(ctl) = self.ctls.get_mut(&id) else {
            return;
        };
        if ctl.st != St::Upstream || ctl.in_response {
            return;
        }
        let due = ctl.due.take();
        ctl.backend_latency = Some(now - ctl.sent_ns);
        self.env.process.upstream_done(&mut ctl.awaiting_upstream);
        match due {
            Some(Due::Response) => {
                let UpstreamReply::Response {
                    status,
                    headers,
                    body,
                    trailers,
                    ..
                } = ctl.reply.clone()
                else {
                    return;
                };
                ctl.rec.upstream_status = Some(status);
                let grpc_status = |pairs: &[(String, String)]| {
                    pairs
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case("grpc-status"))
                        .and_then(|(_, v)| v.parse().ok())
                };
                ctl.rec.upstream_grpc_status = grpc_status(&trailers).or(grpc_status(&headers));
                // A HEAD's response ends at its headers (Envoy's codec reads no body).
                let (body, trailers) = match ctl.is_head {
                    true => (String::new(), Vec::new()),
                    false => (body, trailers),
                };
                let mut h = HeaderMap::new();
                h.add(":status", status.to_string().as_bytes());
                for (k, v) in &headers {
                    h.add(k, v.as_bytes());
                }
                let t = (!trailers.is_empty()).then(|| pairs_map(&trailers));
                ctl.resp = Some(Resp {
                    headers: h,
                    body: body.into_bytes(),
                    trailers: t,
                });
                self.set_info(id, Some("via_upstream"), 0);
                // The router sets the response code before the response filters run.
                let ctx = self.ctls.get(&id).map_or(0, |c| c.ctx);
                if let Some(s) = self.stream_data(ctx) {
                    s.response_code = Some(status);
                }
                self.run_response(id, Stage::Headers);
            }
            Some(Due::Reset) => {
                let reason = match ctl.reply {
                    UpstreamReply::Reset { reason, .. } => reason,
                    _ => ResetReason::RemoteReset,
                };
                let (flag, details, body) = reason.envoy();
                self.router_reply(id, 503, details, flag, body)
            }
            Some(Due::Timeout) => self.router_reply(
                id,
                504,
                "upstream_response_timeout",
                flags::UPSTREAM_REQUEST_TIMEOUT,
                "upstream request timeout",
            ),
            None => {}
        }
    }

    /// Records response details / flags as Envoy's stream info has them from now on.
    fn set_info(&mut self, id: u64, details: Option<&str>, flag: u64) {
        let Some(ctl) = self.ctls.get_mut(&id) else {
            return;
        };
        if let Some(d) = details {
            ctl.details = d.to_string();
            ctl.details_set = true;
        }
        ctl.flags |= flag;
        let (ctx, details, fl) = (ctl.ctx, ctl.details.clone(), ctl.flags);
        let set = ctl.details_set;
        if let Some(s) = self.stream_data(ctx) {
            if set {
                s.code_details = Some(details);
            }
            s.flags = fl;
        }
    }

    fn router_reply(&mut self, id: u64, status: u16, details: &str, flag: u64, body: &str) {
        self.set_info(id, None, flag);
        let lr = LocalReply {
            source: LocalReplySource::Router,
            status,
            details: details.into(),
            headers: vec![],
            body: body.into(),
            grpc_status: None,
        };
        self.local_reply(id, lr);
    }

    /// A stream with no activity for the stream idle timeout (connection manager
    /// `onIdleTimeout`): "stream timeout", details `stream_idle_timeout`, flag SI; 504
    /// once the whole request was received, else 408 (`maybeRequestTimeoutCode`).
    fn idle_timeout(&mut self, id: u64, gen: u64) {
        let Some(ctl) = self.ctls.get(&id) else {
            return;
        };
        let waiting = match ctl.st {
            St::PausedReq(_) | St::PausedResp(_) => true,
            St::Upstream => !ctl.in_response,
            St::Streaming => true,
            St::Uploading => true,
            St::Active | St::Delivering => false,
        };
        if ctl.idle_gen != gen || !waiting {
            return;
        }
        let received = ctl.uploaded_at <= self.now();
        self.set_info(id, None, flags::STREAM_IDLE_TIMEOUT);
        let lr = LocalReply {
            source: LocalReplySource::ConnectionManager,
            status: if received { 504 } else { 408 },
            details: "stream_idle_timeout".into(),
            headers: vec![],
            body: "stream timeout".into(),
            grpc_status: None,
        };
        self.local_reply(id, lr);
    }

    /// A local reply (filter, router, connection manager or wasm failure), as Envoy's
    /// `FilterManager::sendLocalReply`: before the response started it travels the
    /// filter's response phase; once the response is in the encoder chain it replaces
    /// it directly (`sendDirectLocalReply`), without filter callbacks.
    fn local_reply(&mut self, id: u64, lr: LocalReply) {
        let strict = self.env.strict_lifetimes;
        let Some(ctl) = self.ctls.get_mut(&id) else {
            return;
        };
        if ctl.direct
            || ctl.in_response
                && lr.source == LocalReplySource::Filter
                && ctl.local_resp
                && ctl
                    .rec
                    .local_reply
                    .as_ref()
                    .is_some_and(|l| l.source == LocalReplySource::Filter)
        {
            return; // the response was already replaced / a second filter reply
        }
        ctl.due = None;
        // The router resets the upstream request a local reply replaces.
        self.env.process.upstream_done(&mut ctl.awaiting_upstream);
        if ctl.headers_sent {
            // FilterManager::sendLocalReply: "Prior headers have already been sent":
            // the stream is reset (LocalReset); the client saw the upstream's headers.
            ctl.reset_after_headers(flags::LOCAL_RESET);
            ctl.details = lr.details.clone();
            ctl.rec.local_reply = Some(lr);
            return self.end(id);
        }
        let (headers, body) = crate::local_reply::encode(&lr, ctl.is_grpc, ctl.is_head);
        let status = lr.status;
        let details = lr.details.clone();
        ctl.rec.local_reply = Some(lr);
        let resp = Resp {
            headers,
            body,
            trailers: None,
        };
        let direct = ctl.in_response;
        ctl.resp = Some(resp);
        ctl.local_resp = true;
        self.set_info(id, Some(&details), 0);
        if direct {
            if let Some(c) = self.ctls.get_mut(&id) {
                c.direct = true;
            }
            return self.complete(id);
        }
        if !strict {
            let ctx = self.ctls.get(&id).map_or(0, |c| c.ctx);
            if let Some(s) = self.stream_data(ctx) {
                s.response_code = Some(status);
            }
        }
        self.run_response(id, Stage::Headers);
    }

    /// Delivers the response frames from `from` on; completes once iteration continues.
    fn run_response(&mut self, id: u64, from: Stage) {
        let Some(ctl) = self.ctls.get_mut(&id) else {
            return;
        };
        ctl.in_response = true;
        ctl.st = St::Active;
        if from != Stage::Headers {
            ctl.headers_sent = true; // continued past the headers
        }
        let (ctx, bypass) = (ctl.ctx, ctl.bypass);
        let resp = ctl.resp.clone().unwrap_or_default();
        // The upstream's response, cut short by its reset (not a local reply).
        let cut = !ctl.local_resp
            && matches!(
                ctl.reply,
                UpstreamReply::Response {
                    reset_after_headers: true,
                    ..
                }
            );
        let has_trailers = !cut && resp.trailers.as_ref().is_some_and(|t| !t.is_empty());
        let has_body = !resp.body.is_empty();
        // A streamed upstream body arrives after the headers.
        let body_after = match ctl.reply {
            UpstreamReply::Response { body_after_ns, .. }
                if !ctl.local_resp && from == Stage::Headers && (has_body || has_trailers) =>
            {
                body_after_ns
            }
            _ => 0,
        };
        if bypass {
            // Envoy's router resets the stream whether or not a filter runs.
            return if cut {
                self.reset_after_response_started(id)
            } else {
                self.complete(id)
            };
        }
        let mut stopped = false;
        for stage in [Stage::Headers, Stage::Body, Stage::Trailers] {
            if stage_index(stage) < stage_index(from) {
                continue;
            }
            let flow = match stage {
                Stage::Headers => {
                    if let Some(s) = self.stream_data(ctx) {
                        s.resp_headers = Some(resp.headers.clone());
                        s.resp_headers_live = true;
                        s.resp_body = if body_after > 0 {
                            Vec::new()
                        } else {
                            resp.body.clone()
                        };
                    }
                    let eos = !has_body && !has_trailers && !cut;
                    let flow = self.call(id, Phase::ResponseHeaders, resp.headers.len(), eos);
                    if flow != Flow::Stop {
                        self.headers_left_filter(id);
                    }
                    if flow == Flow::Continue {
                        if let Some(c) = self.ctls.get_mut(&id) {
                            c.headers_sent = true;
                        }
                        if body_after > 0 {
                            return self.stream_rest(id, body_after);
                        }
                    } else if body_after > 0 {
                        if let Some(s) = self.stream_data(ctx) {
                            s.resp_body = resp.body.clone();
                        }
                    }
                    flow
                }
                Stage::Body if has_body => {
                    if let Some(s) = self.stream_data(ctx) {
                        s.resp_body_live = true;
                    }
                    self.call(
                        id,
                        Phase::ResponseBody,
                        resp.body.len(),
                        !has_trailers && !cut,
                    )
                }
                Stage::Trailers if has_trailers => {
                    let t = resp.trailers.clone().unwrap_or_default();
                    if let Some(s) = self.stream_data(ctx) {
                        s.resp_trailers = Some(t.clone());
                        s.resp_trailers_live = true;
                    }
                    self.call(id, Phase::ResponseTrailers, t.len(), true)
                }
                _ => continue,
            };
            match flow {
                Flow::Stop => return,
                Flow::Continue => stopped = false,
                Flow::StopIteration => stopped = true,
                Flow::StopAll => {
                    let next = next_stage(stage, has_body, has_trailers);
                    return self.set_st(id, St::PausedResp(next));
                }
            }
        }
        if cut {
            self.reset_after_response_started(id);
        } else if stopped {
            self.set_st(id, St::PausedResp(None));
        } else {
            self.complete(id);
        }
    }

    /// The response headers went on and the body is `after` ns away: it arrives
    /// then, unless the route timeout comes first.
    fn stream_rest(&mut self, id: u64, after: u64) {
        let now = self.now();
        let idle = self.env.stream_idle_timeout_ns;
        let Some(ctl) = self.ctls.get_mut(&id) else {
            return;
        };
        ctl.st = St::Streaming;
        let at = now.saturating_add(after).min(ctl.timeout_at);
        self.post(at, Event::BodyArrived { id });
        // Envoy restarts the idle timer as the headers go out (`encodeHeaders`): an
        // earlier arming (a pause before) must not end the stream (found by review).
        if idle > 0 {
            self.arm_idle(id);
        }
    }

    /// The rest of a streamed response arrives; past the route timeout the router
    /// ends it instead (`onResponseTimeout` once the response started: its local
    /// reply resets the stream).
    fn body_arrived(&mut self, id: u64) {
        let now = self.now();
        let Some(ctl) = self.ctls.get_mut(&id) else {
            return;
        };
        if ctl.st != St::Streaming {
            return;
        }
        ctl.st = St::Active;
        let ctx = ctl.ctx;
        if now >= ctl.timeout_at {
            return self.router_reply(
                id,
                504,
                "upstream_response_timeout",
                flags::UPSTREAM_REQUEST_TIMEOUT,
                "upstream request timeout",
            );
        }
        let body = ctl
            .resp
            .as_ref()
            .map(|r| r.body.clone())
            .unwrap_or_default();
        if let Some(s) = self.stream_data(ctx) {
            s.resp_body = body;
        }
        self.run_response(id, Stage::Body);
    }

    /// The upstream reset after its response started: Envoy's router (`onUpstreamReset`
    /// with `downstream_response_started_`) sets flag UR and resets the downstream
    /// stream; the filter never sees an end of stream, `on_log` follows.
    fn reset_after_response_started(&mut self, id: u64) {
        let Some(ctl) = self.ctls.get_mut(&id) else {
            return;
        };
        ctl.reset_after_headers(flags::UPSTREAM_REMOTE_RESET);
        ctl.details = "upstream_reset_after_response_started{remote_reset}".into();
        self.end(id);
    }

    /// A local reply's code is in the stream info once its headers left the filter.
    fn headers_left_filter(&mut self, id: u64) {
        let Some(ctl) = self.ctls.get(&id) else {
            return;
        };
        if !ctl.local_resp {
            return;
        }
        let ctx = ctl.ctx;
        let status = ctl
            .resp
            .as_ref()
            .and_then(|r| r.headers.get_str(":status"))
            .and_then(|s| s.parse().ok());
        if let Some(s) = self.stream_data(ctx) {
            s.response_code = s.response_code.or(status);
        }
    }

    /// The response is complete: record what the client saw, then end the stream.
    fn complete(&mut self, id: u64) {
        let Some(ctl) = self.ctls.get(&id) else {
            return;
        };
        let (ctx, use_ctl) = (ctl.ctx, ctl.bypass || ctl.direct);
        let held = ctl.resp.clone().unwrap_or_default();
        let from_vm = if use_ctl {
            None
        } else {
            self.stream_data(ctx).and_then(|s| {
                Some(Resp {
                    headers: s.resp_headers.clone()?,
                    body: s.resp_body.clone(),
                    trailers: s.resp_trailers.clone().or(held.trailers.clone()),
                })
            })
        };
        let r = from_vm.unwrap_or(held);
        let status: Option<u16> = r.headers.get_str(":status").and_then(|s| s.parse().ok());
        if let Some(s) = self.stream_data(ctx) {
            s.response_code = s.response_code.or(status);
        }
        let Some(ctl) = self.ctls.get_mut(&id) else {
            return;
        };
        ctl.rec.response_status = status;
        if self.full {
            ctl.rec.response_headers = Some(r.headers);
            ctl.rec.response_body = r.body;
            ctl.rec.response_trailers = r.trailers;
        } else {
            // Summary records keep only what reports classify by.
            let keep = |m: &HeaderMap| {
                HeaderMap::from_pairs(
                    m.pairs()
                        .iter()
                        .filter(|(k, _)| {
                            k == crate::report::TAG_HEADER
                                || k == "grpc-status"
                                || k == "grpc-message"
                        })
                        .map(|(k, v)| (k.as_str(), v.as_slice())),
                )
            };
            ctl.rec.response_headers = Some(keep(&r.headers));
            ctl.rec.response_trailers = r.trailers.as_ref().map(keep);
        }
        ctl.rec.outcome = match ctl.rec.local_reply.as_ref().map(|l| l.source) {
            Some(LocalReplySource::Filter) => Outcome::LocalReply,
            Some(LocalReplySource::WasmFailure) => Outcome::FailClosed,
            Some(LocalReplySource::Router) => Outcome::UpstreamFailed,
            Some(LocalReplySource::ConnectionManager) => Outcome::IdleTimeout,
            None if ctl.rec.upstream_failed() => Outcome::UpstreamFailed,
            None => Outcome::UpstreamOk,
        };
        let download = ctl.req.download_ns;
        if download > 0 {
            ctl.st = St::Delivering;
            self.post(self.now() + download, Event::Delivered { id });
        } else {
            self.end(id);
        }
    }

    fn close(&mut self, id: u64) {
        if let Some(ctl) = self.ctls.get_mut(&id) {
            ctl.rec.outcome = Outcome::ClosedByFilter;
            if ctl.details.is_empty() {
                ctl.details = "wasm_close_stream".into();
            }
            ctl.flags |= flags::LOCAL_RESET;
            ctl.rec.response_status = None;
            ctl.rec.response_headers = None;
        }
        self.end(id);
    }

    fn downstream_reset(&mut self, id: u64) {
        let Some(ctl) = self.ctls.get_mut(&id) else {
            return;
        };
        if matches!(ctl.st, St::Delivering) {
            return; // it has its response (`client_timeout_ns`)
        }
        ctl.rec.outcome = Outcome::DownstreamReset;
        // Envoy: an HTTP/2 stream reset by the client sets DR
        // (DownstreamRemoteReset); a closed HTTP/1 connection sets DC.
        ctl.flags |= if ctl.req.http2 {
            flags::DOWNSTREAM_REMOTE_RESET
        } else {
            flags::DOWNSTREAM_CONNECTION_TERMINATION
        };
        if ctl.details.is_empty() || ctl.details == "via_upstream" {
            ctl.details = "downstream_remote_disconnect".into();
        }
        ctl.rec.response_status = None;
        ctl.rec.response_headers = None;
        ctl.rec.response_trailers = None;
        self.end(id);
    }

    /// on_log, then on_done, then on_delete (Envoy's HTTP order); records the stream.
    fn end(&mut self, id: u64) {
        let now = self.now();
        let Some(mut ctl) = self.ctls.remove(&id) else {
            return;
        };
        self.env.process.upstream_done(&mut ctl.awaiting_upstream);
        self.by_ctx.remove(&(ctl.ctx, id));
        ctl.rec.end_ns = now;
        ctl.rec.code_details = ctl.details.clone();
        ctl.rec.response_flags = ctl.flags;
        let ctx = ctl.ctx;
        if !ctl.bypass && !ctl.failed && ctx != 0 {
            let info = FinalInfo {
                duration_ns: now - ctl.rec.start_ns,
                backend_latency_ns: ctl.backend_latency,
            };
            if let Some(s) = self.stream_data(ctx) {
                s.final_info = Some(info);
                if ctl.details_set || !ctl.details.is_empty() {
                    s.code_details = Some(ctl.details.clone());
                }
                s.flags = ctl.flags;
                s.req_headers_live = false;
                s.req_body_live = false;
                s.req_trailers_live = false;
                s.resp_headers_live = false;
                s.resp_body_live = false;
                s.resp_trailers_live = false;
            }
            for (phase, name) in [
                (Phase::Log, "on_log"),
                (Phase::Done, "on_done"),
                (Phase::Delete, "on_delete"),
            ] {
                let Some(vm) = self.vm.as_mut() else { break };
                if self.full {
                    ctl.rec.callbacks.push(name.into());
                }
                if let Err(e) = vm.on_end(phase, ctx) {
                    self.fail(e, None);
                    break;
                }
            }
            if let Some(vm) = self.vm.as_mut() {
                vm.store.data_mut().streams.remove(&ctx);
            }
        } else if let Some(vm) = self.vm.as_mut() {
            vm.store.data_mut().streams.remove(&ctx);
        }
        self.env.bus.finish(ctl.rec);
        if ctx != 0 && self.draining.contains(&ctl.root) {
            self.retire_if_drained(ctl.root);
        }
    }

    /// Applies effects that callbacks left on other streams (local replies, continue,
    /// close via `proxy_set_effective_context`), right after the callback returned.
    /// `skip`: the stream whose own callback is being handled.
    ///
    /// Passes go over the streams in id order, again until one pass does nothing; only
    /// streams whose context the VM has flagged (`VmState::effects`) are looked at, as
    /// every other stream has nothing to apply.
    fn pump(&mut self, skip: Option<u64>) {
        if self.pumping
            || self
                .vm
                .as_ref()
                .is_none_or(|vm| vm.store.data().effects.is_empty())
        {
            return;
        }
        self.pumping = true;
        loop {
            let mut acted = false;
            let mut after = None;
            while let Some(id) = self.next_flagged(after, skip) {
                after = Some(id);
                let Some(ctl) = self.ctls.get(&id) else {
                    continue;
                };
                if ctl.bypass {
                    continue;
                }
                let (ctx, st) = (ctl.ctx, ctl.st);
                let Some(s) = self.stream_data(ctx) else {
                    continue;
                };
                if std::mem::take(&mut s.close) {
                    self.close(id);
                    acted = true;
                } else if let Some(lr) = s.local_reply.take() {
                    self.local_reply(id, lr);
                    acted = true;
                } else if std::mem::take(&mut s.continue_request) {
                    match st {
                        St::PausedReq(Some(next)) => self.run_request(id, next),
                        St::PausedReq(None) => self.send_upstream(id),
                        _ => continue,
                    }
                    acted = true;
                } else if std::mem::take(&mut s.continue_response) {
                    match st {
                        St::PausedResp(Some(next)) => self.run_response(id, next),
                        St::PausedResp(None) => self.complete(id),
                        _ => continue,
                    }
                    acted = true;
                }
            }
            if !acted {
                break;
            }
        }
        // Keep only the contexts that still carry an effect (bypassed streams, `skip`).
        if let Some(vm) = self.vm.as_mut() {
            let d = vm.store.data_mut();
            let streams = &d.streams;
            d.effects
                .retain(|c| streams.get(c).is_some_and(|s| s.has_effect()));
        }
        self.pumping = false;
    }

    /// The lowest stream id above `after` (other than `skip`) whose context the VM has
    /// flagged.
    fn next_flagged(&self, after: Option<u64>, skip: Option<u64>) -> Option<u64> {
        let vm = self.vm.as_ref()?;
        let mut best: Option<u64> = None;
        for &ctx in &vm.store.data().effects {
            let from = match after {
                Some(a) => Bound::Excluded((ctx, a)),
                None => Bound::Included((ctx, 0)),
            };
            let first = self
                .by_ctx
                .range((from, Bound::Included((ctx, u64::MAX))))
                .map(|&(_, id)| id)
                .find(|&id| Some(id) != skip);
            if let Some(id) = first {
                best = Some(best.map_or(id, |b| b.min(id)));
            }
        }
        best
    }
}

/// FilterHeadersStatus::StopAllIterationAndWatermark.
const STOP_ALL: i32 = 4;

/// How the filter manager reads a callback's return value (cpp-host clamps it).
/// `stop_iteration`: the plugin's `allow_on_headers_stop_iteration`.
fn flow_of(phase: Phase, action: i32, stop_iteration: bool) -> Flow {
    let a = action as u32;
    match phase {
        // FilterHeadersStatus: Continue 0, StopIteration 1, ContinueAndEndStream 2,
        // StopAllIterationAndBuffer 3, StopAllIterationAndWatermark 4 (and above).
        // cpp-host turns StopIteration into StopAllIterationAndWatermark ("the former
        // breaks all assumptions about HTTP processing"; Envoy's
        // `allow_on_headers_stop_iteration` is off by default): no body or trailers
        // callbacks until the stream is continued.
        Phase::RequestHeaders | Phase::ResponseHeaders => match a {
            0 | 2 => Flow::Continue,
            1 if stop_iteration => Flow::StopIteration,
            _ => Flow::StopAll,
        },
        _ if a == 0 => Flow::Continue,
        _ => Flow::StopIteration,
    }
}

fn stage_index(s: Stage) -> u8 {
    match s {
        Stage::Headers => 0,
        Stage::Body => 1,
        Stage::Trailers => 2,
    }
}

/// The frame after `s` that exists, if any.
fn next_stage(s: Stage, body: bool, trailers: bool) -> Option<Stage> {
    match s {
        Stage::Headers if body => Some(Stage::Body),
        Stage::Headers | Stage::Body if trailers => Some(Stage::Trailers),
        _ => None,
    }
}

fn pairs_map(p: &[(String, String)]) -> HeaderMap {
    HeaderMap::from_pairs(p.iter().map(|(k, v)| (k, v.as_bytes())))
}

fn phase_name(p: Phase) -> &'static str {
    match p {
        Phase::RequestHeaders => "on_request_headers",
        Phase::RequestBody => "on_request_body",
        Phase::RequestTrailers => "on_request_trailers",
        Phase::ResponseHeaders => "on_response_headers",
        Phase::ResponseBody => "on_response_body",
        Phase::ResponseTrailers => "on_response_trailers",
        _ => "other",
    }
}

/// A deterministic UUID-shaped request id.
fn request_id(seed: u64, id: u64) -> String {
    let mut r = crate::clock::Rng::new(seed ^ id.wrapping_mul(0x2545_F491_4F6C_DD1D));
    let (a, b) = (r.next_u64(), r.next_u64());
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        b >> 52,
        b & 0xffff_ffff_ffff
    )
}

type Job = Box<dyn FnOnce(&mut WorkerVm) + Send>;

/// A worker VM on its own OS thread; jobs run there one at a time.
pub(crate) struct WorkerThread {
    tx: Option<mpsc::Sender<Job>>,
    handle: Option<JoinHandle<()>>,
}

impl WorkerThread {
    /// Spawns the thread and builds the worker VM on it.
    pub fn spawn(
        env: Arc<Env>,
        module: WasmModule,
        index: usize,
        name: String,
        filter: bool,
    ) -> anyhow::Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = mpsc::channel::<anyhow::Result<()>>();
        let handle = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                let mut w = match WorkerVm::new(env, module, index, name, filter) {
                    Ok(w) => {
                        let _ = ready_tx.send(Ok(()));
                        w
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                while let Ok(job) = rx.recv() {
                    job(&mut w);
                }
            })?;
        ready_rx
            .recv()
            .map_err(|_| anyhow::anyhow!("worker thread died during start"))??;
        Ok(WorkerThread {
            tx: Some(tx),
            handle: Some(handle),
        })
    }

    /// Runs `f` on the worker thread without waiting; the result arrives on the receiver.
    pub fn submit<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut WorkerVm) -> R + Send + 'static,
    ) -> mpsc::Receiver<R> {
        let (tx, rx) = mpsc::sync_channel(1);
        let job: Job = Box::new(move |w| {
            let _ = tx.send(f(w));
        });
        if let Some(t) = &self.tx {
            let _ = t.send(job);
        }
        rx
    }

    /// Runs `f` on the worker thread and waits for its result.
    pub fn exec<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut WorkerVm) -> R + Send + 'static,
    ) -> R {
        self.submit(f)
            .recv()
            .unwrap_or_else(|_| panic!("worker thread panicked"))
    }
}

impl Drop for WorkerThread {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// A scheduled event in a time-ordered queue (ties broken by insertion sequence).
pub(crate) struct Scheduled {
    pub at: u64,
    pub seq: u64,
    pub worker: usize,
    pub ev: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// Min-heap of scheduled events.
pub(crate) type EventQueue = BinaryHeap<Scheduled>;

impl WorkerVm {
    /// Real-time local loop (parallel mode): runs this worker's own events until every
    /// planned request has finished (or, with `stop`, until the flag is set), with at
    /// most `cap` streams in flight. Returns events left over (e.g. future ticks).
    pub fn run_local(
        &mut self,
        mut plan: std::collections::VecDeque<(u64, u64, Request, UpstreamReply)>,
        mut queue: Vec<(u64, Event)>,
        stop: Option<Arc<std::sync::atomic::AtomicBool>>,
        cap: usize,
    ) -> Vec<(u64, Event)> {
        let mut heap = EventQueue::new();
        let mut seq = 0u64;
        for (at, ev) in queue.drain(..) {
            seq += 1;
            heap.push(Scheduled {
                at,
                seq,
                worker: self.index,
                ev,
            });
        }
        loop {
            for (at, ev) in self.env.bus.take(self.index) {
                seq += 1;
                heap.push(Scheduled {
                    at,
                    seq,
                    worker: self.index,
                    ev,
                });
            }
            let now = self.now();
            if let Some((at, _, _, _)) = plan.front() {
                if *at <= now && self.ctls.len() < cap {
                    let (_, id, req, reply) = plan.pop_front().expect("checked");
                    self.handle(Event::Start {
                        id,
                        req: Box::new(req),
                        reply: Box::new(reply),
                    });
                    continue;
                }
            }
            if heap.peek().is_some_and(|s| s.at <= now) {
                let s = heap.pop().expect("checked");
                self.handle(s.ev);
                continue;
            }
            let finished = match &stop {
                // VMs without requests (main thread, idle workers) keep ticking until told.
                Some(flag) => {
                    flag.load(std::sync::atomic::Ordering::Acquire) && self.ctls.is_empty()
                }
                None => plan.is_empty() && self.ctls.is_empty(),
            };
            if finished {
                break;
            }
            let next = plan
                .front()
                .map(|p| p.0)
                .into_iter()
                .chain(heap.peek().map(|s| s.at))
                .min();
            let wait = next
                .map(|n| n.saturating_sub(now))
                .unwrap_or(200_000)
                .min(200_000);
            if wait > 20_000 {
                std::thread::sleep(std::time::Duration::from_nanos(wait));
            } else {
                std::hint::spin_loop();
            }
        }
        let mut rest: Vec<(u64, Event)> = heap
            .into_sorted_vec()
            .into_iter()
            .rev()
            .map(|s| (s.at, s.ev))
            .collect();
        rest.extend(self.env.bus.take(self.index));
        rest
    }
}
