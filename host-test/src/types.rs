//! Plain data types of the harness API: plugin config, requests, upstream replies,
//! routes, clusters and what the host observed for each stream.

use serde::{Deserialize, Serialize};

use crate::headers::HeaderMap;

/// What Envoy does when the VM has failed (trapped).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FailurePolicy {
    /// Default: requests get a 503 local reply with details `wasm_fail_stream`.
    #[default]
    FailClosed,
    /// The filter is skipped; requests go upstream untouched.
    FailOpen,
    /// The VM is re-cloned on the next request (after the reload backoff); shared data
    /// is kept. Within the backoff requests fail closed.
    FailReload,
}

/// The Envoy `envoy.filters.http.wasm` config of one plugin.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PluginConfig {
    /// `config.name` (property `plugin_name`).
    pub name: String,
    /// `config.root_id` (property `plugin_root_id`).
    pub root_id: String,
    /// `vm_config.vm_id`: the shared-data namespace.
    pub vm_id: String,
    /// `config.configuration` (StringValue, unwrapped): the plugin JSON text.
    pub configuration: String,
    /// `vm_config.configuration` (StringValue, unwrapped).
    pub vm_configuration: String,
    /// `config.failure_policy`.
    pub failure_policy: FailurePolicy,
    /// FAIL_RELOAD: `reload_config.backoff.base_interval` in milliseconds. As Envoy's
    /// `JitteredLowerBoundBackOffStrategy`, each new stream on a failed worker draws an
    /// interval in `[base, 1.5 × base)` and the VM is re-cloned only when that much time
    /// has passed since the worker's last (re)load.
    pub reload_backoff_ms: u64,
    /// The legacy `config.fail_open` bool (Envoy refuses it together with
    /// `failure_policy`). It alone decides what happens to streams that already have a
    /// context in a VM that failed: `true` lets them continue without the filter,
    /// `false` (also with `failure_policy: FAIL_OPEN`) answers them 503
    /// `wasm_fail_stream`. `true` also skips the filter for new streams.
    #[serde(default)]
    pub fail_open: bool,
    /// `config.allow_on_headers_stop_iteration` (Envoy 1.35+): a headers callback's
    /// StopIteration stops only that frame — the body and trailers are still delivered
    /// to the filter, and the headers go on with the first frame it continues. Off (the
    /// default), cpp-host turns it into StopAllIterationAndWatermark.
    #[serde(default)]
    pub allow_on_headers_stop_iteration: bool,
}

impl Default for PluginConfig {
    fn default() -> Self {
        PluginConfig {
            name: "fusewire".into(),
            root_id: "fusewire".into(),
            vm_id: "fusewire-v1".into(),
            configuration: String::new(),
            vm_configuration: String::new(),
            failure_policy: FailurePolicy::FailClosed,
            reload_backoff_ms: 1000,
            fail_open: false,
            allow_on_headers_stop_iteration: false,
        }
    }
}

/// A route: requests matching `prefix` go to `cluster` with a route timeout.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RouteConfig {
    /// Route name (property `xds.route_name`; Envoy routes are unnamed unless set: "",
    /// the default).
    pub name: String,
    /// Path prefix it matches (first match wins; "/" matches everything).
    pub prefix: String,
    /// Target cluster (property `xds.cluster_name`).
    pub cluster: String,
    /// Route timeout in ms (Envoy default 15000; 0 disables). On expiry the router
    /// answers 504 with flag UT and details `upstream_response_timeout`.
    pub timeout_ms: u64,
}

impl Default for RouteConfig {
    fn default() -> Self {
        RouteConfig {
            name: String::new(),
            prefix: "/".into(),
            cluster: "backend".into(),
            timeout_ms: 15_000,
        }
    }
}

/// A simulated upstream cluster (target of routes and of `proxy_http_call`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// Cluster name.
    pub name: String,
    /// Upstream host address (property `upstream.address` is `address:port`).
    pub address: String,
    /// Upstream port (property `upstream.port`).
    pub port: u16,
    /// How the cluster answers `proxy_http_call` callouts.
    pub http_call_reply: UpstreamReply,
    /// How the cluster answers `proxy_grpc_call` / `proxy_grpc_stream` callouts.
    #[serde(default)]
    pub grpc_reply: crate::grpc::GrpcReply,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            name: "backend".into(),
            address: "10.0.0.2".into(),
            port: 8080,
            http_call_reply: UpstreamReply::status(200),
            grpc_reply: crate::grpc::GrpcReply::default(),
        }
    }
}

/// What the upstream does with one request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum UpstreamReply {
    /// Answers `status` after `latency_ns`.
    Response {
        /// HTTP status.
        status: u16,
        /// Virtual/real time until the response arrives.
        #[serde(default)]
        latency_ns: u64,
        /// Extra response headers.
        #[serde(default)]
        headers: Vec<(String, String)>,
        /// Response body.
        #[serde(default)]
        body: String,
        /// Response trailers (delivered to `on_http_response_trailers`; an upstream gRPC
        /// response carries `grpc-status` here).
        #[serde(default)]
        trailers: Vec<(String, String)>,
        /// The upstream resets after the headers and body, before the end of stream:
        /// the router resets the downstream stream (flag UR, details
        /// `upstream_reset_after_response_started{remote_reset}`); no trailers.
        #[serde(default)]
        reset_after_headers: bool,
        /// The body (and trailers) arrive this long after the headers: a streamed
        /// response (a large download, an event stream). Envoy's route timeout still
        /// covers it: a body due past the timeout resets the stream (flag UT) once the
        /// timeout is reached. Only where the filter lets the headers go on at once;
        /// a filter that stops them gets the body with them.
        #[serde(default)]
        body_after_ns: u64,
    },
    /// Resets after `latency_ns`; the router answers 503 with the flag and details of
    /// `reason` (default remote reset, flag UR).
    Reset {
        /// Time until the reset.
        #[serde(default)]
        latency_ns: u64,
        /// What kind of reset.
        #[serde(default)]
        reason: ResetReason,
    },
    /// Never answers (the route timeout, if any, answers 504).
    Hang,
}

impl UpstreamReply {
    /// An immediate response with `status`.
    pub fn status(status: u16) -> Self {
        UpstreamReply::Response {
            status,
            latency_ns: 0,
            headers: vec![],
            body: String::new(),
            trailers: vec![],
            reset_after_headers: false,
            body_after_ns: 0,
        }
    }
    /// A normal gRPC response: `:status 200`, `content-type: application/grpc`, a
    /// one-byte-message body and `grpc-status` in the trailers.
    pub fn grpc(grpc_status: u32) -> Self {
        UpstreamReply::status(200)
            .with_header("content-type", "application/grpc")
            .with_body("\0\0\0\0\0")
            .with_trailer("grpc-status", &grpc_status.to_string())
    }
    /// A trailers-only gRPC response: `grpc-status` in the response headers, no body.
    pub fn grpc_trailers_only(grpc_status: u32) -> Self {
        UpstreamReply::status(200)
            .with_header("content-type", "application/grpc")
            .with_header("grpc-status", &grpc_status.to_string())
    }
    /// An immediate reset.
    pub fn reset() -> Self {
        UpstreamReply::Reset {
            latency_ns: 0,
            reason: ResetReason::RemoteReset,
        }
    }
    /// An immediate reset of the given kind.
    pub fn reset_with(reason: ResetReason) -> Self {
        UpstreamReply::Reset {
            latency_ns: 0,
            reason,
        }
    }
    /// No answer at all.
    pub fn hang() -> Self {
        UpstreamReply::Hang
    }
    /// The same reply arriving after `ms` milliseconds.
    pub fn after_ms(self, ms: u64) -> Self {
        self.after_ns(ms * 1_000_000)
    }
    /// The same reply arriving after `ns` nanoseconds.
    pub fn after_ns(mut self, ns: u64) -> Self {
        match &mut self {
            UpstreamReply::Response { latency_ns, .. }
            | UpstreamReply::Reset { latency_ns, .. } => *latency_ns = ns,
            UpstreamReply::Hang => {}
        }
        self
    }
    /// Adds a response header (no-op for resets and hangs).
    pub fn with_header(mut self, k: &str, v: &str) -> Self {
        if let UpstreamReply::Response { headers, .. } = &mut self {
            headers.push((k.into(), v.into()));
        }
        self
    }
    /// Adds a response trailer (no-op for resets and hangs).
    pub fn with_trailer(mut self, k: &str, v: &str) -> Self {
        if let UpstreamReply::Response { trailers, .. } = &mut self {
            trailers.push((k.into(), v.into()));
        }
        self
    }
    /// The same response cut short: the upstream resets after its headers and body
    /// (no-op for resets and hangs).
    pub fn then_reset(mut self) -> Self {
        if let UpstreamReply::Response {
            reset_after_headers,
            ..
        } = &mut self
        {
            *reset_after_headers = true;
        }
        self
    }
    /// The body (and trailers) arriving `ms` milliseconds after the headers (no-op
    /// for resets and hangs).
    pub fn body_after_ms(mut self, ms: u64) -> Self {
        if let UpstreamReply::Response { body_after_ns, .. } = &mut self {
            *body_after_ns = ms * 1_000_000;
        }
        self
    }
    /// Sets the response body (no-op for resets and hangs).
    pub fn with_body(mut self, b: &str) -> Self {
        if let UpstreamReply::Response { body, .. } = &mut self {
            *body = b.into();
        }
        self
    }
}

/// How an upstream request fails without a response; each maps to the Envoy response
/// flag, details and body the router produces (all answered 503).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResetReason {
    /// Stream reset by the upstream: flag UR (0x10), `{remote_reset}`.
    #[default]
    RemoteReset,
    /// Connection could not be established: flag UF (0x20), `{connection_failure}`.
    ConnectionFailure,
    /// Connection closed before the response: flag UC (0x40), `{connection_termination}`.
    ConnectionTermination,
    /// Cluster circuit breaker overflow: flag UO (0x80), `{overflow}`.
    Overflow,
    /// No healthy host: flag UH (0x2), details `no_healthy_upstream`.
    NoHealthyUpstream,
}

impl ResetReason {
    /// (response flag bit, code details, local reply body) as Envoy's router produces.
    pub fn envoy(self) -> (u64, &'static str, &'static str) {
        match self {
            ResetReason::RemoteReset => (
                0x10,
                "upstream_reset_before_response_started{remote_reset}",
                "upstream connect error or disconnect/reset before headers. reset reason: remote reset",
            ),
            ResetReason::ConnectionFailure => (
                0x20,
                "upstream_reset_before_response_started{connection_failure}",
                "upstream connect error or disconnect/reset before headers. reset reason: connection failure",
            ),
            ResetReason::ConnectionTermination => (
                0x40,
                "upstream_reset_before_response_started{connection_termination}",
                "upstream connect error or disconnect/reset before headers. reset reason: connection termination",
            ),
            ResetReason::Overflow => (
                0x80,
                "upstream_reset_before_response_started{overflow}",
                "upstream connect error or disconnect/reset before headers. reset reason: overflow",
            ),
            ResetReason::NoHealthyUpstream => (0x2, "no_healthy_upstream", "no healthy upstream"),
        }
    }
}

/// A downstream request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// `:method`.
    pub method: String,
    /// `:path`.
    pub path: String,
    /// `:authority`.
    pub authority: String,
    /// Extra headers (after the pseudo-headers): values are bytes, as Envoy's (an
    /// HTTP/1 `obs-text` byte is no UTF-8); text in scenario files.
    #[serde(with = "lossy_pairs")]
    pub headers: Vec<(String, Vec<u8>)>,
    /// Request body (empty: headers end the stream).
    #[serde(with = "lossy_text")]
    pub body: Vec<u8>,
    /// The client resets the stream after this many ns if it has no response yet.
    pub client_timeout_ns: Option<u64>,
    /// Request trailers (delivered to `on_http_request_trailers`).
    #[serde(default)]
    pub trailers: Vec<(String, String)>,
    /// The client speaks HTTP/2: its reset is a stream reset (flag DR), not a
    /// connection termination (DC).
    #[serde(default)]
    pub http2: bool,
    /// The client takes this long to receive the complete response (a slow client or
    /// a large download): the stream ends (`on_log`) only then.
    #[serde(default)]
    pub download_ns: u64,
    /// The client takes this long to send its body (a slow upload): the body and
    /// trailers reach the filter only then; the headers went on at once.
    #[serde(default)]
    pub upload_ns: u64,
}

impl Default for Request {
    fn default() -> Self {
        Request::get("/")
    }
}

impl Request {
    /// A GET for `path`.
    pub fn get(path: &str) -> Self {
        Request {
            method: "GET".into(),
            path: path.into(),
            authority: "example.com".into(),
            headers: vec![],
            body: vec![],
            client_timeout_ns: None,
            download_ns: 0,
            upload_ns: 0,
            trailers: vec![],
            http2: false,
        }
    }
    /// A unary gRPC request: `POST`, `content-type: application/grpc`, `te: trailers`
    /// and a 5-byte empty message as body.
    pub fn grpc(path: &str) -> Self {
        Request::get(path)
            .method("POST")
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(&[0, 0, 0, 0, 0])
    }
    /// Adds a trailer.
    pub fn trailer(mut self, k: &str, v: &str) -> Self {
        self.trailers.push((k.into(), v.into()));
        self
    }
    /// Adds a header.
    pub fn header(self, k: &str, v: &str) -> Self {
        self.header_bytes(k, v.as_bytes())
    }
    /// Adds a header whose value is any bytes (Envoy passes `obs-text`, 0x80–0xFF, on).
    pub fn header_bytes(mut self, k: &str, v: &[u8]) -> Self {
        self.headers.push((k.into(), v.to_vec()));
        self
    }
    /// Sets the method.
    pub fn method(mut self, m: &str) -> Self {
        self.method = m.into();
        self
    }
    /// Sets the body.
    pub fn body(mut self, b: &[u8]) -> Self {
        self.body = b.to_vec();
        self
    }
    /// An HTTP/2 client (its reset sets DR instead of DC).
    pub fn http2(mut self) -> Self {
        self.http2 = true;
        self
    }
    /// The client takes `ms` milliseconds to receive the complete response.
    pub fn download_ms(mut self, ms: u64) -> Self {
        self.download_ns = ms * 1_000_000;
        self
    }
    /// The client takes `ms` milliseconds to send its body.
    pub fn upload_ms(mut self, ms: u64) -> Self {
        self.upload_ns = ms * 1_000_000;
        self
    }
    /// The client gives up (resets) after `ms` milliseconds.
    pub fn client_timeout_ms(mut self, ms: u64) -> Self {
        self.client_timeout_ns = Some(ms * 1_000_000);
        self
    }
    /// The request header map as Envoy builds it (pseudo-headers first).
    pub fn header_map(&self) -> HeaderMap {
        let mut m = HeaderMap::new();
        m.add(":authority", self.authority.as_bytes());
        m.add(":path", self.path.as_bytes());
        m.add(":method", self.method.as_bytes());
        m.add(":scheme", b"http");
        for (k, v) in &self.headers {
            m.add(k, v);
        }
        m
    }
}

/// How much of each stream a harness records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordDetail {
    /// Everything: upstream request headers, response headers and body, callbacks.
    #[default]
    Full,
    /// Outcome, statuses, times, flags, details, the local reply, and only the
    /// `x-fusewire` / `grpc-status` response headers — cheaper (benchmarks, scenarios).
    Summary,
}

/// Who produced a local reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LocalReplySource {
    /// The wasm filter called `proxy_send_local_response`.
    Filter,
    /// Envoy's router (upstream reset → 503, route timeout → 504).
    Router,
    /// Envoy's wasm filter after a VM failure under FAIL_CLOSED (`wasm_fail_stream`).
    WasmFailure,
    /// The connection manager (stream idle timeout: 504 `stream_idle_timeout`).
    ConnectionManager,
}

/// A local reply as sent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LocalReply {
    /// Who sent it.
    pub source: LocalReplySource,
    /// HTTP status.
    pub status: u16,
    /// Response code details.
    pub details: String,
    /// Headers the sender added.
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: String,
    /// gRPC status passed to `proxy_send_local_response` (None for -1).
    #[serde(default)]
    pub grpc_status: Option<u32>,
}

/// How a stream ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Hash, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Upstream answered with a status < 500 (gRPC: a `grpc-status` Envoy maps below
    /// 500, see [`StreamRecord::upstream_failed`]).
    UpstreamOk,
    /// Upstream answered >= 500 (or such a `grpc-status`), reset, or timed out
    /// (router reply).
    UpstreamFailed,
    /// The filter sent a local reply (from any phase).
    LocalReply,
    /// The VM had failed and FAIL_CLOSED answered 503 `wasm_fail_stream`.
    FailClosed,
    /// The client reset the stream before a response.
    DownstreamReset,
    /// The filter called `proxy_close_stream` (details `wasm_close_stream`).
    ClosedByFilter,
    /// A local reply (filter, idle timeout, wasm failure) came after the response
    /// headers had left for the client: Envoy resets the stream (flag LR).
    ResetAfterHeaders,
    /// Nothing happened on the stream for the stream idle timeout (a stream paused in
    /// the filter and never resumed): 504 `stream_idle_timeout`, flag SI.
    IdleTimeout,
}

/// Everything the host observed for one stream.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StreamRecord {
    /// Harness stream id (submission order).
    pub id: u64,
    /// Worker that served it.
    pub worker: usize,
    /// The filter context id (0 when the filter was bypassed/failed before creation).
    pub context_id: u32,
    /// Start time (ns since harness start).
    pub start_ns: u64,
    /// End time.
    pub end_ns: u64,
    /// How it ended.
    pub outcome: Outcome,
    /// Whether the request was forwarded upstream.
    pub sent_upstream: bool,
    /// Request headers as the upstream received them (after the filter).
    pub upstream_request_headers: Option<HeaderMap>,
    /// The upstream's status, when it answered.
    pub upstream_status: Option<u16>,
    /// The upstream's `grpc-status` (trailers, else headers), when it sent one.
    #[serde(default)]
    pub upstream_grpc_status: Option<u32>,
    /// Local reply, if any (filter, router or wasm failure).
    pub local_reply: Option<LocalReply>,
    /// Final status the client saw (None on reset).
    pub response_status: Option<u16>,
    /// Response headers the client saw (after the filter).
    pub response_headers: Option<HeaderMap>,
    /// Response body the client saw.
    #[serde(with = "lossy_text")]
    pub response_body: Vec<u8>,
    /// Filter callbacks in call order, e.g. `on_request_headers`, `on_log`, `on_done`.
    pub callbacks: Vec<String>,
    /// Response code details (`via_upstream`, `wasm_fail_stream`, ...).
    pub code_details: String,
    /// Envoy response flags bit-vector (UT 0x4, UR 0x10, DC 0x4000, ...).
    pub response_flags: u64,
    /// Request trailers as the upstream received them (after the filter).
    #[serde(default)]
    pub upstream_request_trailers: Option<HeaderMap>,
    /// Response trailers the client saw (after the filter); None when the response had
    /// none (a trailers-only gRPC reply carries `grpc-status` in the headers).
    #[serde(default)]
    pub response_trailers: Option<HeaderMap>,
}

impl StreamRecord {
    /// Whether the upstream's answer was a failure: none, a 5xx, or a `grpc-status`
    /// that Envoy maps to a 5xx (`Grpc::Utility::grpcToHttpStatus`: UNKNOWN,
    /// DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS). A gRPC
    /// failure comes as a 200 (found by review: reports counted them as upstream_ok).
    pub fn upstream_failed(&self) -> bool {
        let grpc = self
            .upstream_grpc_status
            .is_some_and(|g| crate::grpc::grpc_to_http_status(g) >= 500);
        self.upstream_status.is_none_or(|s| s >= 500) || grpc
    }
    /// Value of response header `k` the client saw.
    pub fn response_header(&self, k: &str) -> Option<String> {
        self.response_headers.as_ref()?.get_str(k)
    }
    /// Value of response trailer `k` the client saw.
    pub fn response_trailer(&self, k: &str) -> Option<String> {
        self.response_trailers.as_ref()?.get_str(k)
    }
    /// The gRPC status the client saw: `grpc-status` from the trailers, else from the
    /// headers (trailers-only reply).
    pub fn grpc_status(&self) -> Option<u32> {
        self.response_trailer("grpc-status")
            .or_else(|| self.response_header("grpc-status"))?
            .parse()
            .ok()
    }
    /// Latency from start to end in ns.
    pub fn latency_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// Envoy response flag bits (StreamInfo::ResponseFlag).
pub mod flags {
    #![allow(missing_docs)]
    pub const UPSTREAM_REQUEST_TIMEOUT: u64 = 0x4;
    pub const LOCAL_RESET: u64 = 0x8;
    pub const UPSTREAM_REMOTE_RESET: u64 = 0x10;
    pub const UPSTREAM_CONNECTION_FAILURE: u64 = 0x20;
    pub const UPSTREAM_CONNECTION_TERMINATION: u64 = 0x40;
    pub const UPSTREAM_OVERFLOW: u64 = 0x80;
    pub const NO_HEALTHY_UPSTREAM: u64 = 0x2;
    pub const NO_ROUTE_FOUND: u64 = 0x100;
    pub const NO_CLUSTER_FOUND: u64 = 0x100_0000;
    pub const DOWNSTREAM_CONNECTION_TERMINATION: u64 = 0x4000;
    pub const DOWNSTREAM_REMOTE_RESET: u64 = 0x1000_0000;
    pub const STREAM_IDLE_TIMEOUT: u64 = 0x1_0000;
}

/// Serde helper: bytes as (lossy) UTF-8 text.
mod lossy_text {
    pub fn serialize<S: serde::Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&String::from_utf8_lossy(v))
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s: String = serde::Deserialize::deserialize(d)?;
        Ok(s.into_bytes())
    }
}

/// Header pairs with byte values, as text pairs (lossy UTF-8 out).
mod lossy_pairs {
    pub fn serialize<S: serde::Serializer>(
        v: &[(String, Vec<u8>)],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|(k, v)| (k, String::from_utf8_lossy(v))))
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<(String, Vec<u8>)>, D::Error> {
        let pairs: Vec<(String, String)> = serde::Deserialize::deserialize(d)?;
        Ok(pairs
            .into_iter()
            .map(|(k, v)| (k, v.into_bytes()))
            .collect())
    }
}

impl StreamRecord {
    /// The response body as lossy UTF-8 text.
    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.response_body).into_owned()
    }
}
