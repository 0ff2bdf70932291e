//! One Envoy worker (or the main thread): its VM, the HTTP streams it serves with
//! Envoy's call order, failure policy, ticks, callouts and queue notifications. Each
//! worker lives on its own OS thread ([`WorkerThread`]).

use std::collections::{BTreeMap, BinaryHeap};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::env::{Env, LogRecord};
use crate::headers::HeaderMap;
use crate::types::{
    flags, FailurePolicy, LocalReply, LocalReplySource, Outcome, RecordDetail, Request,
    ResetReason, StreamRecord, UpstreamReply,
};
use crate::vm::{FinalInfo, Phase, StreamData, Vm, WasmModule};

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
    Tick {
        gen: u64,
    },
    CallDone {
        token: u32,
        timed_out: bool,
    },
    QueueReady {
        queue: u32,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    Active,
    PausedReqHeaders,
    PausedReqBody,
    Upstream,
    PausedRespHeaders,
    PausedRespBody,
}

enum Due {
    Response,
    Reset,
    Timeout,
}

struct Ctl {
    ctx: u32,
    st: St,
    req: Request,
    reply: UpstreamReply,
    rec: StreamRecord,
    bypass: bool,
    due: Option<Due>,
    sent_ns: u64,
    in_response: bool,
    resp: Option<(HeaderMap, Vec<u8>)>,
    flags: u64,
    details: String,
    backend_latency: Option<u64>,
}

enum Flow {
    Continue,
    Pause,
    Stop,
}

/// A worker's VM and streams. Lives on its worker thread.
pub(crate) struct WorkerVm {
    env: Arc<Env>,
    index: usize,
    name: String,
    module: WasmModule,
    vm: Option<Vm>,
    failed_at: u64,
    ctls: BTreeMap<u64, Box<Ctl>>,
    /// Keep full stream records (headers, bodies, callbacks) or summaries.
    full: bool,
}

impl WorkerVm {
    /// Clones a VM for this worker and runs its root lifecycle.
    pub fn new(
        env: Arc<Env>,
        module: WasmModule,
        index: usize,
        name: String,
    ) -> anyhow::Result<Self> {
        let mut vm = Vm::new(&module, env.clone(), index, &name)?;
        vm.start_root()
            .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        let full = env.records == RecordDetail::Full;
        Ok(WorkerVm {
            env,
            index,
            name,
            module,
            vm: Some(vm),
            failed_at: 0,
            ctls: BTreeMap::new(),
            full,
        })
    }

    /// Whether the VM is alive (not failed).
    pub fn alive(&self) -> bool {
        self.vm.is_some()
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

    /// Handles one event at the current clock time.
    pub fn handle(&mut self, ev: Event) {
        match ev {
            Event::Start { id, req, reply } => self.start(id, *req, *reply),
            Event::Upstream { id } => self.upstream(id),
            Event::DownstreamReset { id } => self.downstream_reset(id),
            Event::Tick { gen } => {
                let Some(vm) = self.vm.as_mut() else { return };
                let d = vm.store.data();
                if d.tick_gen != gen || d.tick_period_ms == 0 {
                    return;
                }
                let r = vm.on_tick();
                if let Err(e) = r {
                    return self.fail(e);
                }
                if let Some(vm) = self.vm.as_ref() {
                    let d = vm.store.data();
                    if d.tick_gen == gen && d.tick_period_ms > 0 {
                        self.post(
                            self.now() + d.tick_period_ms as u64 * 1_000_000,
                            Event::Tick { gen },
                        );
                    }
                }
                self.pump();
            }
            Event::CallDone { token, timed_out } => {
                let Some(vm) = self.vm.as_mut() else { return };
                let Some(call) = vm.store.data_mut().calls.remove(&token) else {
                    return;
                };
                if call.context_id != 1 && !vm.store.data().streams.contains_key(&call.context_id) {
                    return;
                }
                let resp = match (timed_out, call.reply) {
                    (
                        false,
                        UpstreamReply::Response {
                            status,
                            headers,
                            body,
                            ..
                        },
                    ) => {
                        let mut h = HeaderMap::new();
                        h.add(":status", status.to_string().as_bytes());
                        for (k, v) in &headers {
                            h.add(k, v.as_bytes());
                        }
                        Some((h, body.into_bytes(), HeaderMap::new()))
                    }
                    _ => None,
                };
                if let Err(e) = vm.on_http_call_response(call.context_id, token, resp) {
                    return self.fail(e);
                }
                self.pump();
            }
            Event::QueueReady { queue } => {
                let Some(vm) = self.vm.as_mut() else { return };
                if let Err(e) = vm.on_queue_ready(queue) {
                    return self.fail(e);
                }
                self.pump();
            }
        }
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
            local_reply: None,
            response_status: None,
            response_headers: None,
            response_body: vec![],
            callbacks: vec![],
            code_details: String::new(),
            response_flags: 0,
        };
        if let Some(t) = req.client_timeout_ns {
            self.post(now + t, Event::DownstreamReset { id });
        }
        let mut ctl = Ctl {
            ctx: 0,
            st: St::Active,
            req,
            reply,
            rec,
            bypass: false,
            due: None,
            sent_ns: 0,
            in_response: false,
            resp: None,
            flags: 0,
            details: String::new(),
            backend_latency: None,
        };
        if self.vm.is_none() && self.env.plugin.failure_policy == FailurePolicy::FailReload {
            let backoff = self.env.plugin.reload_backoff_ms * 1_000_000;
            if now >= self.failed_at + backoff {
                self.reload();
            }
        }
        let Some(vm) = self.vm.as_mut() else {
            self.ctls.insert(id, Box::new(ctl));
            return self.vm_unavailable(id);
        };
        let ctx = vm.next_context_id();
        ctl.ctx = ctx;
        ctl.rec.context_id = ctx;
        let mut headers = ctl.req.header_map();
        headers.add("x-request-id", request_id(self.env.seed, id).as_bytes());
        let data = StreamData {
            route_name: route.as_ref().map(|r| r.name.clone()).unwrap_or_default(),
            cluster_name: route
                .as_ref()
                .map(|r| r.cluster.clone())
                .unwrap_or_default(),
            request_id: request_id(self.env.seed, id),
            start_wall_ns: self.env.clock.wall(),
            req_headers: headers,
            ..StreamData::default()
        };
        vm.store.data_mut().streams.insert(ctx, data);
        if self.full {
            ctl.rec.callbacks.push("on_context_create".into());
        }
        self.ctls.insert(id, Box::new(ctl));
        let r = self.vm.as_mut().map(|vm| vm.on_context_create(ctx));
        if let Some(Err(e)) = r {
            self.fail(e);
            return;
        }
        self.req_headers(id);
    }

    fn reload(&mut self) {
        self.log(2, "FAIL_RELOAD: re-cloning the VM".into());
        match Vm::new(&self.module, self.env.clone(), self.index, &self.name) {
            Ok(mut vm) => match vm.start_root() {
                Ok(()) => self.vm = Some(vm),
                Err(e) => {
                    self.log(5, format!("reload failed: {e}"));
                    self.failed_at = self.now();
                }
            },
            Err(e) => {
                self.log(5, format!("reload failed: {e:#}"));
                self.failed_at = self.now();
            }
        }
    }

    /// The VM is gone: FAIL_OPEN skips the filter, otherwise 503 `wasm_fail_stream`.
    fn vm_unavailable(&mut self, id: u64) {
        let Some(ctl) = self.ctls.get_mut(&id) else {
            return;
        };
        ctl.bypass = true;
        if self.env.plugin.failure_policy == FailurePolicy::FailOpen {
            match ctl.st {
                _ if ctl.in_response => self.complete(id),
                St::Active | St::PausedReqHeaders | St::PausedReqBody => self.send_upstream(id),
                St::PausedRespHeaders | St::PausedRespBody => self.complete(id),
                St::Upstream => {}
            }
        } else {
            match ctl.st {
                St::Upstream if !ctl.in_response => {}
                _ => {
                    let lr = LocalReply {
                        source: LocalReplySource::WasmFailure,
                        status: 503,
                        details: "wasm_fail_stream".into(),
                        headers: vec![],
                        body: String::new(),
                        grpc_status: None,
                    };
                    ctl.st = St::Active;
                    ctl.rec.local_reply = Some(lr.clone());
                    ctl.details = lr.details.clone();
                    let mut h = HeaderMap::new();
                    h.add(":status", b"503");
                    ctl.resp = Some((h, vec![]));
                    self.complete(id);
                }
            }
        }
    }

    /// A guest trap: the VM is lost (shared data is kept); in-flight streams follow
    /// the failure policy.
    fn fail(&mut self, msg: String) {
        self.log(5, format!("wasm VM failed: {msg}"));
        self.vm = None;
        self.failed_at = self.now();
        let ids: Vec<u64> = self.ctls.keys().copied().collect();
        for id in ids {
            if let Some(ctl) = self.ctls.get_mut(&id) {
                if !ctl.bypass {
                    self.vm_unavailable(id);
                }
            }
        }
    }

    /// Calls one stream callback and applies its effects.
    fn call(&mut self, id: u64, phase: Phase, n: usize, eos: bool) -> Flow {
        let Some(ctl) = self.ctls.get_mut(&id) else {
            return Flow::Stop;
        };
        if ctl.bypass {
            return Flow::Continue;
        }
        let ctx = ctl.ctx;
        if self.full {
            ctl.rec.callbacks.push(phase_name(phase).into());
        }
        ctl.st = St::Active;
        let Some(vm) = self.vm.as_mut() else {
            self.vm_unavailable(id);
            return Flow::Stop;
        };
        let r = vm.on_stream(phase, ctx, n, eos);
        let action = match r {
            Ok(a) => a,
            Err(e) => {
                self.fail(e);
                return match self.ctls.get(&id) {
                    Some(c) if c.st == St::Active && c.bypass => Flow::Continue,
                    _ => Flow::Stop,
                };
            }
        };
        let Some(s) = self
            .vm
            .as_mut()
            .and_then(|vm| vm.store.data_mut().streams.get_mut(&ctx))
        else {
            return Flow::Stop;
        };
        s.continue_request = false;
        s.continue_response = false;
        if std::mem::take(&mut s.close) {
            self.close(id);
            return Flow::Stop;
        }
        if let Some(lr) = s.local_reply.take() {
            self.local_reply(id, lr);
            return Flow::Stop;
        }
        if action == crate::abi::ACTION_CONTINUE {
            Flow::Continue
        } else {
            Flow::Pause
        }
    }

    fn set_st(&mut self, id: u64, st: St) {
        if let Some(c) = self.ctls.get_mut(&id) {
            c.st = st;
        }
    }

    fn req_headers(&mut self, id: u64) {
        let Some(ctl) = self.ctls.get(&id) else {
            return;
        };
        let n = ctl.req.headers.len() + 5;
        let eos = ctl.req.body.is_empty();
        match self.call(id, Phase::RequestHeaders, n, eos) {
            Flow::Continue => self.req_body(id),
            Flow::Pause => self.set_st(id, St::PausedReqHeaders),
            Flow::Stop => {}
        }
    }

    fn req_body(&mut self, id: u64) {
        let Some(ctl) = self.ctls.get(&id) else {
            return;
        };
        if ctl.req.body.is_empty() || ctl.bypass {
            return self.send_upstream(id);
        }
        let (ctx, body) = (ctl.ctx, ctl.req.body.clone());
        let len = body.len();
        if let Some(s) = self
            .vm
            .as_mut()
            .and_then(|vm| vm.store.data_mut().streams.get_mut(&ctx))
        {
            s.req_body = body;
        }
        match self.call(id, Phase::RequestBody, len, true) {
            Flow::Continue => self.send_upstream(id),
            Flow::Pause => self.set_st(id, St::PausedReqBody),
            Flow::Stop => {}
        }
    }

    fn stream_data(&mut self, ctx: u32) -> Option<&mut StreamData> {
        self.vm.as_mut()?.store.data_mut().streams.get_mut(&ctx)
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
        let headers = match (bypass, self.stream_data(ctx)) {
            (false, Some(s)) => {
                if let Some(c) = &cluster {
                    s.upstream_address = Some(c.address.clone());
                    s.upstream_port = c.port;
                }
                s.req_headers.clone()
            }
            _ => {
                let mut h = self.ctls[&id].req.header_map();
                h.add("x-request-id", request_id(self.env.seed, id).as_bytes());
                h
            }
        };
        if cluster.is_none() {
            return self.router_reply(id, 503, "cluster_not_found", flags::NO_CLUSTER_FOUND, "");
        }
        let Some(ctl) = self.ctls.get_mut(&id) else {
            return;
        };
        ctl.rec.sent_upstream = true;
        if self.full {
            ctl.rec.upstream_request_headers = Some(headers);
        }
        ctl.st = St::Upstream;
        ctl.sent_ns = now;
        let timeout = route.timeout_ms * 1_000_000;
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
            _ => (None, 0),
        };
        let has_due = due.is_some();
        ctl.due = due;
        if has_due {
            self.post(at, Event::Upstream { id });
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
        match due {
            Some(Due::Response) => {
                let UpstreamReply::Response {
                    status,
                    headers,
                    body,
                    ..
                } = ctl.reply.clone()
                else {
                    return;
                };
                ctl.rec.upstream_status = Some(status);
                ctl.details = "via_upstream".into();
                let mut h = HeaderMap::new();
                h.add(":status", status.to_string().as_bytes());
                for (k, v) in &headers {
                    h.add(k, v.as_bytes());
                }
                self.response(id, h, body.into_bytes());
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

    fn router_reply(&mut self, id: u64, status: u16, details: &str, flag: u64, body: &str) {
        let Some(ctl) = self.ctls.get_mut(&id) else {
            return;
        };
        ctl.flags |= flag;
        let lr = LocalReply {
            source: LocalReplySource::Router,
            status,
            details: details.into(),
            headers: vec![("content-type".into(), "text/plain".into())],
            body: body.into(),
            grpc_status: None,
        };
        self.local_reply(id, lr);
    }

    /// A local reply (filter or router): travels through the filter's response phase,
    /// unless the response phase is already running (then it replaces the response).
    fn local_reply(&mut self, id: u64, lr: LocalReply) {
        let Some(ctl) = self.ctls.get_mut(&id) else {
            return;
        };
        if ctl
            .rec
            .local_reply
            .as_ref()
            .is_some_and(|l| l.source == LocalReplySource::Filter)
            && ctl.in_response
        {
            return; // a second local reply for the same stream is ignored
        }
        ctl.details = lr.details.clone();
        ctl.due = None;
        let is_grpc = ctl.req.headers.iter().any(|(k, v)| {
            k.eq_ignore_ascii_case("content-type") && v.starts_with("application/grpc")
        });
        let mut h = HeaderMap::new();
        let body = match lr.grpc_status {
            // Envoy answers a gRPC request with a trailers-only gRPC response.
            Some(g) if is_grpc => {
                h.add(":status", b"200");
                h.add("content-type", b"application/grpc");
                h.add("grpc-status", g.to_string().as_bytes());
                if !lr.body.is_empty() {
                    h.add("grpc-message", lr.body.as_bytes());
                }
                for (k, v) in &lr.headers {
                    h.add(k, v.as_bytes());
                }
                Vec::new()
            }
            _ => {
                h.add(":status", lr.status.to_string().as_bytes());
                for (k, v) in &lr.headers {
                    h.add(k, v.as_bytes());
                }
                if !lr.body.is_empty() {
                    h.add("content-length", lr.body.len().to_string().as_bytes());
                }
                lr.body.clone().into_bytes()
            }
        };
        let replace = ctl.in_response;
        ctl.rec.local_reply = Some(lr);
        if replace {
            ctl.resp = Some((h, body));
            self.complete(id);
        } else {
            self.response(id, h, body);
        }
    }

    fn response(&mut self, id: u64, headers: HeaderMap, body: Vec<u8>) {
        let Some(ctl) = self.ctls.get_mut(&id) else {
            return;
        };
        ctl.in_response = true;
        ctl.st = St::Active;
        let ctx = ctl.ctx;
        let bypass = ctl.bypass;
        let status = headers.get_str(":status").and_then(|s| s.parse().ok());
        let (n, eos) = (headers.len(), body.is_empty());
        ctl.resp = Some((headers.clone(), body.clone()));
        if bypass {
            return self.complete(id);
        }
        if let Some(s) = self.stream_data(ctx) {
            s.resp_headers = Some(headers);
            s.resp_body = body;
            s.response_code = status;
        }
        match self.call(id, Phase::ResponseHeaders, n, eos) {
            Flow::Continue => self.resp_body(id),
            Flow::Pause => self.set_st(id, St::PausedRespHeaders),
            Flow::Stop => {}
        }
    }

    fn resp_body(&mut self, id: u64) {
        let Some(ctl) = self.ctls.get(&id) else {
            return;
        };
        let ctx = ctl.ctx;
        let len = self
            .stream_data(ctx)
            .map(|s| s.resp_body.len())
            .unwrap_or(0);
        if len == 0 {
            return self.complete(id);
        }
        match self.call(id, Phase::ResponseBody, len, true) {
            Flow::Continue => self.complete(id),
            Flow::Pause => self.set_st(id, St::PausedRespBody),
            Flow::Stop => {}
        }
    }

    /// The response is complete: record what the client saw, then end the stream.
    fn complete(&mut self, id: u64) {
        let Some(ctl) = self.ctls.get(&id) else {
            return;
        };
        let ctx = ctl.ctx;
        let bypass = ctl.bypass;
        let from_vm = if bypass {
            None
        } else {
            self.stream_data(ctx)
                .and_then(|s| Some((s.resp_headers.clone()?, std::mem::take(&mut s.resp_body))))
        };
        let Some(ctl) = self.ctls.get_mut(&id) else {
            return;
        };
        let (h, b) = from_vm.or_else(|| ctl.resp.clone()).unwrap_or_default();
        ctl.rec.response_status = h.get_str(":status").and_then(|s| s.parse().ok());
        if self.full {
            ctl.rec.response_headers = Some(h);
            ctl.rec.response_body = b;
        } else {
            // Summary records keep only what reports classify by.
            let keep = h
                .pairs()
                .iter()
                .filter(|(k, _)| k == crate::report::TAG_HEADER || k == "grpc-status");
            ctl.rec.response_headers = Some(HeaderMap::from_pairs(
                keep.map(|(k, v)| (k.as_str(), v.as_slice())),
            ));
        }
        ctl.rec.outcome = match ctl.rec.local_reply.as_ref().map(|l| l.source) {
            Some(LocalReplySource::Filter) => Outcome::LocalReply,
            Some(LocalReplySource::WasmFailure) => Outcome::FailClosed,
            Some(LocalReplySource::Router) => Outcome::UpstreamFailed,
            None => match ctl.rec.upstream_status {
                Some(s) if s < 500 => Outcome::UpstreamOk,
                _ => Outcome::UpstreamFailed,
            },
        };
        self.end(id);
    }

    fn close(&mut self, id: u64) {
        if let Some(ctl) = self.ctls.get_mut(&id) {
            ctl.rec.outcome = Outcome::ClosedByFilter;
            ctl.details = "wasm_close_stream".into();
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
        ctl.rec.outcome = Outcome::DownstreamReset;
        ctl.flags |= flags::DOWNSTREAM_CONNECTION_TERMINATION;
        if ctl.details.is_empty() || ctl.details == "via_upstream" {
            ctl.details = "downstream_remote_disconnect".into();
        }
        ctl.rec.response_status = None;
        ctl.rec.response_headers = None;
        self.end(id);
    }

    /// on_log, then on_done, then on_delete (Envoy's HTTP order); records the stream.
    fn end(&mut self, id: u64) {
        let now = self.now();
        let Some(mut ctl) = self.ctls.remove(&id) else {
            return;
        };
        ctl.rec.end_ns = now;
        ctl.rec.code_details = ctl.details.clone();
        ctl.rec.response_flags = ctl.flags;
        if !ctl.bypass {
            let info = FinalInfo {
                code_details: ctl.details.clone(),
                flags: ctl.flags,
                duration_ns: now - ctl.rec.start_ns,
                backend_latency_ns: ctl.backend_latency,
            };
            let ctx = ctl.ctx;
            if let Some(s) = self.stream_data(ctx) {
                s.final_info = Some(info);
            }
            for (phase, name) in [
                (Phase::Log, "on_log"),
                (Phase::Done, "on_done"),
                (Phase::None, "on_delete"),
            ] {
                let Some(vm) = self.vm.as_mut() else { break };
                if self.full {
                    ctl.rec.callbacks.push(name.into());
                }
                if let Err(e) = vm.on_end(phase, ctx) {
                    ctl.bypass = true;
                    self.ctls.insert(id, ctl);
                    self.fail(e);
                    let Some(c) = self.ctls.remove(&id) else {
                        return;
                    };
                    self.env.bus.finish(c.rec);
                    return;
                }
            }
            if let Some(vm) = self.vm.as_mut() {
                vm.store.data_mut().streams.remove(&ctx);
            }
        }
        self.env.bus.finish(ctl.rec);
    }

    /// Applies effects that root/callout callbacks left on paused or waiting streams
    /// (local replies, continue, close via `proxy_set_effective_context`).
    fn pump(&mut self) {
        loop {
            let mut acted = false;
            let ids: Vec<u64> = self.ctls.keys().copied().collect();
            for id in ids {
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
                    if let Some(c) = self.ctls.get_mut(&id) {
                        if c.st == St::Upstream {
                            c.in_response = false;
                        }
                    }
                    self.local_reply(id, lr);
                    acted = true;
                } else if std::mem::take(&mut s.continue_request) {
                    match st {
                        St::PausedReqHeaders => self.req_body(id),
                        St::PausedReqBody => self.send_upstream(id),
                        _ => continue,
                    }
                    acted = true;
                } else if std::mem::take(&mut s.continue_response) {
                    match st {
                        St::PausedRespHeaders => self.resp_body(id),
                        St::PausedRespBody => self.complete(id),
                        _ => continue,
                    }
                    acted = true;
                }
            }
            if !acted {
                break;
            }
        }
    }
}

fn phase_name(p: Phase) -> &'static str {
    match p {
        Phase::RequestHeaders => "on_request_headers",
        Phase::RequestBody => "on_request_body",
        Phase::ResponseHeaders => "on_response_headers",
        Phase::ResponseBody => "on_response_body",
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
    ) -> anyhow::Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = mpsc::channel::<anyhow::Result<()>>();
        let handle = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                let mut w = match WorkerVm::new(env, module, index, name) {
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
    /// planned request has finished (or, with `stop`, until the flag is set). Returns events left over (e.g. future ticks).
    pub fn run_local(
        &mut self,
        mut plan: std::collections::VecDeque<(u64, u64, Request, UpstreamReply)>,
        mut queue: Vec<(u64, Event)>,
        stop: Option<Arc<std::sync::atomic::AtomicBool>>,
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
                if *at <= now {
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
