//! The plugin JSON: a list of policies, each embedding the core's config schema
//! (`breaker`, `metrics`, `execution`, `bulkhead`), plus matching, keys, failure
//! classification and the fallback reply. Parsed and validated in one step; every
//! error names the field path and the reason.

use std::collections::BTreeMap;

use fusewire_core::config::{BreakerConfig, BulkheadConfig, ExecutionConfig, MetricsConfig};
use fusewire_core::shared::{BreakerParams, SharedParams};
use fusewire_core::{Config, ConfigError};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use crate::classify::{Classifier, FlagSet, GrpcEntry, GrpcSet, StatusEntry, StatusSet};
use crate::matcher::{HeaderCond, KeySpec, Matcher};

/// Top level of the plugin JSON.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlugin {
    #[serde(default = "d_tick_ms")]
    tick_ms: u64,
    #[serde(default)]
    metrics_prefix: Option<String>,
    #[serde(default)]
    shared: RawShared,
    policies: Vec<RawPolicy>,
}

fn d_tick_ms() -> u64 {
    100
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawShared {
    cas_attempts: u32,
    lease_ttl_ms: u64,
    heartbeat_ms: u64,
}

impl Default for RawShared {
    fn default() -> Self {
        let d = SharedParams::default();
        RawShared {
            cas_attempts: d.cas_attempts,
            lease_ttl_ms: d.lease_ttl_ms,
            heartbeat_ms: d.heartbeat_ms,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    #[serde(default)]
    name: String,
    #[serde(rename = "match", default)]
    matcher: RawMatch,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    max_keys: Option<u32>,
    #[serde(default)]
    breaker: BreakerConfig,
    #[serde(default)]
    metrics: MetricsConfig,
    #[serde(default)]
    execution: ExecutionConfig,
    #[serde(default)]
    timeout: TimeoutMode,
    #[serde(default)]
    bulkhead: Option<BulkheadConfig>,
    #[serde(default)]
    failure: RawFailure,
    #[serde(default)]
    bad_request: RawBadRequest,
    #[serde(default)]
    fallback: RawFallback,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawMatch {
    route: OneOrMany,
    cluster: OneOrMany,
    path_prefix: OneOrMany,
    method: OneOrMany,
    headers: Vec<RawHeader>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    #[default]
    None,
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::None => Vec::new(),
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHeader {
    name: String,
    #[serde(default)]
    exact: Option<String>,
    #[serde(default)]
    prefix: Option<String>,
    #[serde(default)]
    present: Option<bool>,
}

/// Where a policy's timeout is enforced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeoutMode {
    /// Envoy's own route timeout; its response flag `UT` counts as TIMEOUT.
    /// `execution` is ignored.
    #[default]
    Route,
    /// The filter's tick scan: a call still waiting for response headers after
    /// `execution.timeout_ms` gets a 504 local reply and counts as TIMEOUT.
    Tick,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawFailure {
    status: Vec<StatusEntry>,
    grpc_status: Vec<GrpcEntry>,
    response_flags: Vec<String>,
    timeout_flags: Vec<String>,
    resets: bool,
}

impl Default for RawFailure {
    fn default() -> Self {
        RawFailure {
            status: vec![StatusEntry::Text("5xx".into())],
            grpc_status: ["DEADLINE_EXCEEDED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS"]
                .iter()
                .map(|s| GrpcEntry::Name(s.to_string()))
                .collect(),
            response_flags: ["UF", "UO", "URX", "UH", "UC"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            timeout_flags: vec!["UT".into()],
            resets: true,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawBadRequest {
    status: Vec<StatusEntry>,
}

impl Default for RawBadRequest {
    fn default() -> Self {
        RawBadRequest {
            status: vec![StatusEntry::Text("4xx".into())],
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawFallback {
    status: u32,
    timeout_status: u32,
    headers: BTreeMap<String, String>,
    body: String,
    grpc: bool,
}

impl Default for RawFallback {
    fn default() -> Self {
        RawFallback {
            status: 503,
            timeout_status: 504,
            headers: BTreeMap::new(),
            body: String::new(),
            grpc: true,
        }
    }
}

/// Why the filter answered instead of the upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Breaker open (or throttled).
    ShortCircuited,
    /// Bulkhead full.
    Rejected,
    /// Deadline passed (tick mode).
    Timeout,
}

impl Reason {
    /// Value of the `x-fusewire` header.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::ShortCircuited => "short-circuited",
            Reason::Rejected => "rejected",
            Reason::Timeout => "timeout",
        }
    }
}

/// A prepared local reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// HTTP status.
    pub status: u32,
    /// Headers, `x-fusewire` included.
    pub headers: Vec<(String, String)>,
    /// Body (`{reason}` already substituted).
    pub body: Vec<u8>,
    /// gRPC status for gRPC requests (UNAVAILABLE, or DEADLINE_EXCEEDED on timeout).
    pub grpc_status: u32,
}

/// The fallback replies of a policy, one per reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fallback {
    /// For short-circuits.
    pub short_circuited: Reply,
    /// For bulkhead rejections.
    pub rejected: Reply,
    /// For tick timeouts.
    pub timeout: Reply,
    /// Whether gRPC requests get a trailers-only gRPC error instead.
    pub grpc: bool,
}

impl Fallback {
    /// The reply for `reason`.
    pub fn reply(&self, reason: Reason) -> &Reply {
        match reason {
            Reason::ShortCircuited => &self.short_circuited,
            Reason::Rejected => &self.rejected,
            Reason::Timeout => &self.timeout,
        }
    }
}

/// A bulkhead wait queue (per key, per worker).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Queue {
    /// Waiting calls per key and worker: min(`max_queue`, `queue_rejection_threshold`).
    pub capacity: u32,
    /// A call still waiting after this long gets the `rejected` fallback.
    pub max_wait_ms: u64,
}

/// A validated policy.
#[derive(Clone, Debug)]
pub struct Policy {
    /// Unique name.
    pub name: String,
    /// Which requests it applies to.
    pub matcher: Matcher,
    /// How the key is built.
    pub key: KeySpec,
    /// Distinct keys this worker tracks for the policy; later ones share the
    /// `<policy>/~overflow` key.
    pub max_keys: u32,
    /// The core config (breaker, metrics, execution, bulkhead).
    pub core: Config,
    /// Shared breaker parameters derived from `core`.
    pub params: BreakerParams,
    /// Where timeouts are enforced.
    pub timeout: TimeoutMode,
    /// Max in flight per key across all workers, if the policy has a bulkhead.
    pub bulkhead: Option<u32>,
    /// The bulkhead's wait queue, if `bulkhead.max_queue > 0`.
    pub queue: Option<Queue>,
    /// Failure classification.
    pub classifier: Classifier,
    /// Fallback replies.
    pub fallback: Fallback,
}

impl Policy {
    /// Tick-mode deadline in ms, if any.
    pub fn tick_timeout_ms(&self) -> Option<u64> {
        (self.timeout == TimeoutMode::Tick && self.core.execution.timeout_enabled)
            .then_some(self.core.execution.timeout_ms)
    }
}

/// The validated plugin config.
#[derive(Clone, Debug)]
pub struct Plugin {
    /// Tick period (ms): timeout scan, delta flush, heartbeats.
    pub tick_ms: u64,
    /// Metric name prefix.
    pub metrics_prefix: String,
    /// Shared-state knobs.
    pub shared: SharedParams,
    /// Policies, first match wins.
    pub policies: Vec<Policy>,
}

/// One step of a path into the JSON document.
enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

fn render_path(base: &str, segs: &[Seg]) -> String {
    let mut p = base.to_string();
    for s in segs {
        match s {
            Seg::Key(k) => {
                if !p.is_empty() {
                    p.push('.');
                }
                p.push_str(k);
            }
            Seg::Index(i) => p.push_str(&format!("[{i}]")),
        }
    }
    p
}

/// `leaf` nested along `segs`, with nothing else beside it.
fn isolate(segs: &[Seg], leaf: &Value) -> Value {
    let mut v = leaf.clone();
    for s in segs.iter().rev() {
        v = match s {
            Seg::Key(k) => {
                let mut m = serde_json::Map::new();
                m.insert((*k).to_string(), v);
                Value::Object(m)
            }
            Seg::Index(_) => Value::Array(vec![v]),
        };
    }
    v
}

/// Deserializes `T` from `v`; on failure, finds the deepest member that fails on its
/// own (every other member left out) and reports its path. This gives field-path
/// errors without a path-tracking deserializer (which would double the .wasm size).
fn typed<T: DeserializeOwned>(v: &Value, base: &str) -> Result<T, ConfigError> {
    let first = match T::deserialize(v) {
        Ok(t) => return Ok(t),
        Err(e) => e.to_string(),
    };
    let mut segs: Vec<Seg> = Vec::new();
    let mut node = v;
    let mut reason = first;
    'descend: loop {
        let children: Vec<(Seg, &Value)> = match node {
            Value::Object(m) => m.iter().map(|(k, c)| (Seg::Key(k.as_str()), c)).collect(),
            Value::Array(a) => a
                .iter()
                .enumerate()
                .map(|(i, c)| (Seg::Index(i), c))
                .collect(),
            _ => break,
        };
        for (seg, child) in children {
            segs.push(seg);
            if let Err(e) = T::deserialize(&isolate(&segs, child)) {
                let msg = e.to_string();
                // Leaving siblings out can only add "missing field" errors.
                if !msg.starts_with("missing field") {
                    reason = msg;
                    node = child;
                    continue 'descend;
                }
            }
            segs.pop();
        }
        break;
    }
    Err(err(render_path(base, &segs), reason))
}

fn err(path: String, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        path,
        reason: reason.into(),
    }
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

fn valid_header_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_:.".contains(&b))
}

impl Plugin {
    /// Parses and validates the plugin JSON.
    pub fn parse(json: &[u8]) -> Result<Plugin, ConfigError> {
        let doc: Value =
            serde_json::from_slice(json).map_err(|e| err(String::new(), e.to_string()))?;
        let raw: RawPlugin = typed(&doc, "")?;
        if raw.tick_ms == 0 || raw.tick_ms > 60_000 {
            return Err(err(
                "tick_ms".into(),
                format!("must be in 1..=60000, got {}", raw.tick_ms),
            ));
        }
        let prefix = raw.metrics_prefix.unwrap_or_else(|| "fusewire".into());
        if !valid_name(&prefix) {
            return Err(err(
                "metrics_prefix".into(),
                "must be 1..=64 characters of [A-Za-z0-9_.-]",
            ));
        }
        if prefix.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(err(
                "metrics_prefix".into(),
                "must not start with a digit (Prometheus drops such names)",
            ));
        }
        let s = raw.shared;
        if s.cas_attempts == 0 || s.cas_attempts > 1000 {
            return Err(err(
                "shared.cas_attempts".into(),
                format!("must be in 1..=1000, got {}", s.cas_attempts),
            ));
        }
        if s.heartbeat_ms == 0 {
            return Err(err("shared.heartbeat_ms".into(), "must be at least 1"));
        }
        if s.lease_ttl_ms < 2 * s.heartbeat_ms || s.lease_ttl_ms < 2 * raw.tick_ms {
            return Err(err(
                "shared.lease_ttl_ms".into(),
                format!(
                    "must be at least twice heartbeat_ms ({}) and twice tick_ms ({}), got {}",
                    s.heartbeat_ms, raw.tick_ms, s.lease_ttl_ms
                ),
            ));
        }
        if raw.policies.len() > 256 {
            return Err(err(
                "policies".into(),
                format!("at most 256 policies, got {}", raw.policies.len()),
            ));
        }
        let mut policies = Vec::with_capacity(raw.policies.len());
        for (i, p) in raw.policies.into_iter().enumerate() {
            let at = |f: &str| format!("policies[{i}].{f}");
            let policy = compile_policy(p, &at)?;
            if policies.iter().any(|q: &Policy| q.name == policy.name) {
                return Err(err(
                    at("name"),
                    format!("duplicate policy name {:?}", policy.name),
                ));
            }
            policies.push(policy);
        }
        Ok(Plugin {
            tick_ms: raw.tick_ms,
            metrics_prefix: prefix,
            shared: SharedParams {
                cas_attempts: s.cas_attempts,
                lease_ttl_ms: s.lease_ttl_ms,
                heartbeat_ms: s.heartbeat_ms,
            },
            policies,
        })
    }
}

fn compile_policy(p: RawPolicy, at: &dyn Fn(&str) -> String) -> Result<Policy, ConfigError> {
    if p.name.is_empty() {
        return Err(err(at("name"), "is required"));
    }
    if !valid_name(&p.name) {
        return Err(err(
            at("name"),
            format!(
                "must be 1..=64 characters of [A-Za-z0-9_.-], got {:?}",
                p.name
            ),
        ));
    }
    // Core schema: validated by the core itself, paths prefixed with the policy's.
    let has_bulkhead = p.bulkhead.is_some();
    let core = Config {
        breaker: p.breaker,
        metrics: p.metrics,
        execution: p.execution,
        bulkhead: p.bulkhead.unwrap_or_default(),
    };
    core.validate().map_err(|e| err(at(&e.path), e.reason))?;
    let queue = (has_bulkhead && core.bulkhead.max_queue > 0).then(|| Queue {
        capacity: core
            .bulkhead
            .max_queue
            .min(core.bulkhead.queue_rejection_threshold),
        max_wait_ms: core.bulkhead.max_wait_ms,
    });
    if queue.is_some_and(|q| q.capacity == 0) {
        return Err(err(
            at("bulkhead.queue_rejection_threshold"),
            "must be at least 1 when max_queue > 0 (it caps the queue)",
        ));
    }
    // Match.
    let m = p.matcher;
    let mut matcher = Matcher {
        routes: m.route.into_vec(),
        clusters: m.cluster.into_vec(),
        path_prefixes: m.path_prefix.into_vec(),
        methods: m.method.into_vec(),
        headers: Vec::new(),
    };
    for (j, pp) in matcher.path_prefixes.iter().enumerate() {
        if !pp.starts_with('/') {
            return Err(err(
                at(&format!("match.path_prefix[{j}]")),
                format!("must start with '/', got {pp:?}"),
            ));
        }
    }
    for (j, me) in matcher.methods.iter().enumerate() {
        if me.is_empty() || !me.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(err(
                at(&format!("match.method[{j}]")),
                format!("must be an upper-case HTTP method, got {me:?}"),
            ));
        }
    }
    for (j, h) in m.headers.into_iter().enumerate() {
        let hp = |f: &str| at(&format!("match.headers[{j}].{f}"));
        if !valid_header_name(&h.name) {
            return Err(err(
                hp("name"),
                format!("must be a lower-case header name, got {:?}", h.name),
            ));
        }
        let cond = match (h.exact, h.prefix, h.present) {
            (Some(e), None, None) => HeaderCond::Exact(e),
            (None, Some(pf), None) => HeaderCond::Prefix(pf),
            (None, None, Some(b)) => HeaderCond::Present(b),
            _ => {
                return Err(err(
                    at(&format!("match.headers[{j}]")),
                    "needs exactly one of exact, prefix, present",
                ))
            }
        };
        matcher.headers.push((h.name, cond));
    }
    // Key.
    let key =
        KeySpec::parse(p.key.as_deref().unwrap_or("policy")).map_err(|r| err(at("key"), r))?;
    let max_keys = p.max_keys.unwrap_or(100);
    if max_keys == 0 || max_keys > 10_000 {
        return Err(err(
            at("max_keys"),
            format!("must be in 1..=10000, got {max_keys}"),
        ));
    }
    // Classification.
    let f = p.failure;
    let classifier = Classifier {
        failure_status: StatusSet::parse(&f.status)
            .map_err(|(j, r)| err(at(&format!("failure.status[{j}]")), r))?,
        failure_grpc: GrpcSet::parse(&f.grpc_status)
            .map_err(|(j, r)| err(at(&format!("failure.grpc_status[{j}]")), r))?,
        failure_flags: FlagSet::parse(&f.response_flags)
            .map_err(|(j, r)| err(at(&format!("failure.response_flags[{j}]")), r))?,
        timeout_flags: FlagSet::parse(&f.timeout_flags)
            .map_err(|(j, r)| err(at(&format!("failure.timeout_flags[{j}]")), r))?,
        resets_are_failures: f.resets,
        bad_request_status: StatusSet::parse(&p.bad_request.status)
            .map_err(|(j, r)| err(at(&format!("bad_request.status[{j}]")), r))?,
    };
    // Fallback.
    let fb = p.fallback;
    for (field, s) in [("status", fb.status), ("timeout_status", fb.timeout_status)] {
        if !(200..=599).contains(&s) {
            return Err(err(
                at(&format!("fallback.{field}")),
                format!("must be in 200..=599, got {s}"),
            ));
        }
    }
    for name in fb.headers.keys() {
        if !valid_header_name(name) || name.starts_with(':') || name == "x-fusewire" {
            return Err(err(
                at(&format!("fallback.headers.{name}")),
                "must be a lower-case header name, not a pseudo-header nor x-fusewire",
            ));
        }
    }
    if fb.body.len() > 64 * 1024 {
        return Err(err(at("fallback.body"), "must be at most 64 KiB"));
    }
    let reply = |reason: Reason, status: u32, grpc_status: u32| {
        let mut headers: Vec<(String, String)> = fb
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        headers.push(("x-fusewire".into(), reason.as_str().into()));
        Reply {
            status,
            headers,
            body: fb.body.replace("{reason}", reason.as_str()).into_bytes(),
            grpc_status,
        }
    };
    let fallback = Fallback {
        short_circuited: reply(Reason::ShortCircuited, fb.status, 14),
        rejected: reply(Reason::Rejected, fb.status, 14),
        timeout: reply(Reason::Timeout, fb.timeout_status, 4),
        grpc: fb.grpc,
    };
    let params = BreakerParams::from_config(&core);
    Ok(Policy {
        name: p.name,
        matcher,
        key,
        max_keys,
        params,
        timeout: p.timeout,
        bulkhead: has_bulkhead.then_some(core.bulkhead.max_concurrent),
        queue,
        core,
        classifier,
        fallback,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Plugin, ConfigError> {
        Plugin::parse(s.as_bytes())
    }

    fn fails(s: &str, path: &str, reason_part: &str) {
        let e = parse(s).expect_err("must fail");
        assert_eq!(e.path, path, "{e}");
        assert!(e.reason.contains(reason_part), "{e}");
    }

    #[test]
    fn defaults() {
        let p = parse(r#"{"policies":[{"name":"a"}]}"#).unwrap();
        assert_eq!(p.tick_ms, 100);
        assert_eq!(p.metrics_prefix, "fusewire");
        let a = &p.policies[0];
        assert_eq!(a.matcher, Matcher::default());
        assert!(a.key.is_static());
        assert_eq!(a.timeout, TimeoutMode::Route);
        assert_eq!(a.tick_timeout_ms(), None);
        assert_eq!(a.bulkhead, None);
        assert!(a.classifier.failure_status.contains(503));
        assert!(!a.classifier.failure_status.contains(404));
        assert!(a.classifier.bad_request_status.contains(404));
        assert!(a.classifier.failure_grpc.contains(14));
        assert!(a.classifier.timeout_flags.intersects(FlagSet::one("UT")));
        assert!(a.classifier.failure_flags.intersects(FlagSet::one("UO")));
        assert!(a.classifier.resets_are_failures);
        assert_eq!(a.fallback.short_circuited.status, 503);
        assert_eq!(a.fallback.timeout.status, 504);
        assert_eq!(
            a.fallback.rejected.headers,
            vec![("x-fusewire".to_string(), "rejected".to_string())]
        );
        // Hystrix defaults from the core schema.
        assert_eq!(a.core.breaker.error_percentage.request_volume_threshold, 20);
        assert_eq!(a.core.breaker.open.sleep_window_ms, 5000);
    }

    #[test]
    fn full_policy() {
        let p = parse(
            r#"{"tick_ms": 50, "metrics_prefix": "fw", "shared": {"cas_attempts": 4},
            "policies": [{
              "name": "orders",
              "match": {"cluster": ["orders", "orders-canary"], "path_prefix": "/orders",
                        "method": "GET", "headers": [{"name": "x-tier", "exact": "gold"}]},
              "key": "{cluster}/{method}",
              "breaker": {"error_percentage": {"request_volume_threshold": 10}},
              "execution": {"timeout_ms": 250},
              "timeout": "tick",
              "bulkhead": {"max_concurrent": 3},
              "failure": {"status": ["5xx", 429], "grpc_status": ["UNAVAILABLE"], "resets": false},
              "bad_request": {"status": ["400-403"]},
              "fallback": {"status": 503, "headers": {"content-type": "application/json"},
                           "body": "{\"error\":\"{reason}\"}"}
            }]}"#,
        )
        .unwrap();
        let o = &p.policies[0];
        assert_eq!(o.matcher.clusters.len(), 2);
        assert_eq!(o.matcher.methods, vec!["GET"]);
        assert_eq!(o.tick_timeout_ms(), Some(250));
        assert_eq!(o.bulkhead, Some(3));
        assert_eq!(o.queue, None);
        assert!(o.classifier.failure_status.contains(429));
        assert!(!o.classifier.bad_request_status.contains(404));
        assert_eq!(o.fallback.timeout.body, br#"{"error":"timeout"}"#);
        assert_eq!(
            o.params.breaker.error_percentage.request_volume_threshold,
            10
        );
        assert_eq!(p.shared.cas_attempts, 4);
    }

    #[test]
    fn queue_capacity_is_capped_by_the_rejection_threshold() {
        let p =
            parse(r#"{"policies":[{"name":"a","bulkhead":{"max_queue":50,"max_wait_ms":200}}]}"#)
                .unwrap();
        assert_eq!(
            p.policies[0].queue,
            Some(Queue {
                capacity: 5,
                max_wait_ms: 200
            })
        );
    }

    #[test]
    fn errors_name_the_field() {
        fails(r#"{}"#, "", "missing field `policies`");
        fails(
            r#"{"policies":[{"name":"a","bogus":1}]}"#,
            "policies[0].bogus",
            "unknown field `bogus`",
        );
        fails(
            r#"{"policies":[{"name":"a","breaker":{"half_open":{"permitted_probes":0}}}]}"#,
            "policies[0].breaker.half_open.permitted_probes",
            "must be in 1..=16",
        );
        fails(
            r#"{"policies":[{"name":"a","breaker":{"open":{"sleep_window_ms":"x"}}}]}"#,
            "policies[0].breaker.open.sleep_window_ms",
            "invalid type",
        );
        fails(
            r#"{"policies":[{"name":"a"},{"name":"a"}]}"#,
            "policies[1].name",
            "duplicate",
        );
        fails(
            r#"{"policies":[{"name":"a b"}]}"#,
            "policies[0].name",
            "[A-Za-z0-9_.-]",
        );
        fails(
            r#"{"policies":[{"name":"a","match":{"method":["get"]}}]}"#,
            "policies[0].match.method[0]",
            "upper-case",
        );
        fails(
            r#"{"policies":[{"name":"a","match":{"path_prefix":"api"}}]}"#,
            "policies[0].match.path_prefix[0]",
            "start with '/'",
        );
        fails(
            r#"{"policies":[{"name":"a","match":{"headers":[{"name":"x","exact":"1","present":true}]}}]}"#,
            "policies[0].match.headers[0]",
            "exactly one",
        );
        fails(
            r#"{"policies":[{"name":"a","match":{"headers":[{"name":"X-A","present":true}]}}]}"#,
            "policies[0].match.headers[0].name",
            "lower-case",
        );
        fails(
            r#"{"policies":[{"name":"a","key":"{host}"}]}"#,
            "policies[0].key",
            "unknown placeholder",
        );
        fails(
            r#"{"policies":[{"name":"a","failure":{"status":["5xx","6xx"]}}]}"#,
            "policies[0].failure.status[1]",
            "100..=599",
        );
        fails(
            r#"{"policies":[{"name":"a","failure":{"response_flags":["UF","NOPE"]}}]}"#,
            "policies[0].failure.response_flags[1]",
            "unknown Envoy response flag",
        );
        fails(
            r#"{"policies":[{"name":"a","failure":{"grpc_status":[99]}}]}"#,
            "policies[0].failure.grpc_status[0]",
            "0..=16",
        );
        fails(
            r#"{"policies":[{"name":"a","bad_request":{"status":["abc"]}}]}"#,
            "policies[0].bad_request.status[0]",
            "class",
        );
        fails(
            r#"{"policies":[{"name":"a","fallback":{"status":99}}]}"#,
            "policies[0].fallback.status",
            "200..=599",
        );
        fails(
            r#"{"policies":[{"name":"a","fallback":{"headers":{"x-fusewire":"x"}}}]}"#,
            "policies[0].fallback.headers.x-fusewire",
            "x-fusewire",
        );
        fails(
            r#"{"policies":[{"name":"a","timeout":"soon"}]}"#,
            "policies[0].timeout",
            "unknown variant",
        );
        fails(
            r#"{"policies":[{"name":"a","bulkhead":{"max_concurrent":0}}]}"#,
            "policies[0].bulkhead.max_concurrent",
            "at least 1",
        );
        fails(
            r#"{"policies":[{"name":"a","bulkhead":{"max_queue":5,"queue_rejection_threshold":0}}]}"#,
            "policies[0].bulkhead.queue_rejection_threshold",
            "at least 1",
        );
        fails(r#"{"tick_ms":0,"policies":[]}"#, "tick_ms", "1..=60000");
        fails(
            r#"{"shared":{"lease_ttl_ms":10},"policies":[]}"#,
            "shared.lease_ttl_ms",
            "twice",
        );
        fails(
            r#"{"metrics_prefix":"9x","policies":[]}"#,
            "metrics_prefix",
            "digit",
        );
        fails(
            r#"{"policies":[{"name":"a","max_keys":0}]}"#,
            "policies[0].max_keys",
            "1..=10000",
        );
        fails("not json", "", "expected");
        fails(
            r#"{"policies":[{"name":"a"},{"key":"route"}]}"#,
            "policies[1].name",
            "required",
        );
    }

    #[test]
    fn example_file_is_valid() {
        let text = include_str!("../../examples/fusewire.json");
        let p = Plugin::parse(text.as_bytes())
            .unwrap_or_else(|e| panic!("examples/fusewire.json: {e}"));
        assert!(!p.policies.is_empty());
    }
}

#[cfg(test)]
mod fuzz {
    use super::Plugin;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    const EXAMPLE: &str = include_str!("../../examples/fusewire.json");

    const WORDS: &[&str] = &[
        "policies",
        "name",
        "match",
        "key",
        "breaker",
        "bulkhead",
        "failure",
        "fallback",
        "status",
        "headers",
        "route",
        "cluster",
        "path_prefix",
        "method",
        "exact",
        "present",
        "open",
        "half_open",
        "permitted_probes",
        "ladder_ms",
        "schedule",
        "max_queue",
        "timeout",
        "execution",
        "metrics",
        "rolling_buckets",
        "grpc_status",
        "tick_ms",
        "shared",
        "lease_ttl_ms",
        "body",
        "mode",
        "5xx",
        "{cluster}",
        "ladder",
        "tick",
    ];

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(|f| json!(f)),
            prop::sample::select(WORDS).prop_map(Value::from),
            ".{0,8}".prop_map(Value::from),
        ];
        leaf.prop_recursive(6, 64, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
                prop::collection::vec((prop::sample::select(WORDS), inner), 0..6).prop_map(|kv| {
                    Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
                }),
            ]
        })
    }

    proptest! {
        #[test]
        fn never_panics_on_bytes(b in prop::collection::vec(any::<u8>(), 0..400)) {
            let _ = Plugin::parse(&b);
        }

        #[test]
        fn never_panics_on_a_mutated_example(
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut b = EXAMPLE.as_bytes().to_vec();
            let i = at.index(b.len());
            b[i] = byte;
            let _ = Plugin::parse(&b);
            let _ = Plugin::parse(&b[..cut.index(b.len())]);
        }

        #[test]
        fn never_panics_on_schema_shaped_json(policy in arb_json(), top in arb_json()) {
            let doc = json!({"policies": [policy]});
            let _ = Plugin::parse(doc.to_string().as_bytes());
            let _ = Plugin::parse(top.to_string().as_bytes());
        }
    }
}
