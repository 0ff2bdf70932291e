//! Random traffic through the harness, every filter feature on at once: keyed
//! breakers past `max_keys`, a pool with a queue, tick timeouts, N probes, collapsed
//! forwarding, stale-if-error, fallback replies on upstream errors, admission after
//! the body, gRPC, metrics-only shadowing — under uploads that stall, clients that
//! reset, upstreams that hang, reset or answer in pieces, wall-clock steps and plugin
//! reloads on 4 workers. A trap kills a worker's VM (every later request on it fails
//! closed), so whatever the program does: every worker stays alive, every request
//! ends, none ends in `wasm_fail_stream` or is left paused in the filter, and at
//! rest no key holds a bulkhead slot.
//!
//! Needs the built module (see `tests/host.rs`).

use std::collections::BTreeSet;
use std::sync::OnceLock;
use std::time::Duration;

use fusewire_host_test::*;
use proptest::prelude::*;

mod common;

const MS: u64 = 1_000_000;

/// Three policies; `SLEEP` is replaced so a reload changes a value.
const CONFIG: &str = r#"{
  "tick_ms": 50,
  "shared": {"lease_ttl_ms": 2000, "heartbeat_ms": 500},
  "policies": [
    {
      "name": "api",
      "match": {"path_prefix": "/api"},
      "key": "{header:x-tenant}",
      "keys": {"max_keys": 3, "idle_ms": 1000},
      "breaker": {
        "error_percentage": {"request_volume_threshold": 3, "threshold_percentage": 50},
        "consecutive_failures": {"enabled": true, "threshold": 4},
        "open": {"schedule": "exponential", "sleep_window_ms": SLEEP, "max_ms": 2000, "jitter_percentage": 20},
        "half_open": {"permitted_probes": 2, "success_threshold": 2, "probe_timeout_ms": 300}
      },
      "metrics": {"rolling_window_ms": 2000, "rolling_buckets": 4},
      "execution": {"timeout_ms": 150}, "timeout": "tick",
      "bulkhead": {"isolation": "pool", "max_concurrent": 2, "max_queue": 2,
                   "queue_rejection_threshold": 2, "max_wait_ms": 100, "fallback_max_concurrent": 3},
      "collapse": {"max_waiters": 3, "max_wait_ms": 200, "on_leader_failure": "retry"},
      "stale": {"max_stale_ms": 5000, "max_entries": 4, "max_body_bytes": 64, "on_upstream_error": true},
      "admit_after_body": {"max_bytes": 16},
      "failure": {"status": ["5xx"], "resets": true},
      "bad_request": {"status": ["4xx"]},
      "fallback": {"status": 503, "body": "api: {reason}", "on_upstream_error": true}
    },
    {
      "name": "rpc",
      "match": {"path_prefix": "/rpc"},
      "key": "route",
      "breaker": {"consecutive_failures": {"enabled": true, "threshold": 2},
                  "open": {"sleep_window_ms": SLEEP}},
      "bulkhead": {"max_concurrent": 3},
      "timeout": "route",
      "fallback": {"status": 503, "body": "rpc"}
    },
    {
      "name": "shadow",
      "match": {"path_prefix": "/shadow"},
      "breaker": {"mode": "metrics_only",
                  "slow_call": {"enabled": true, "duration_threshold_ms": 50,
                                "rate_threshold_percentage": 50, "request_volume_threshold": 2}},
      "execution": {"timeout_ms": 100}, "timeout": "tick"
    }
  ]
}"#;

fn config(sleep_ms: u64) -> String {
    CONFIG.replace("SLEEP", &sleep_ms.to_string())
}

/// The module, compiled once for every case.
fn module() -> &'static WasmModule {
    static MODULE: OnceLock<WasmModule> = OnceLock::new();
    MODULE.get_or_init(common::module)
}

#[derive(Clone, Debug)]
enum Step {
    /// A request on `worker`, `after_ms` after the previous one.
    Send {
        worker: usize,
        after_ms: u64,
        req: Shape,
        reply: Reply,
    },
    /// Identical requests on `worker`: `first.len()` at once, then `then.len()`
    /// `gap_ms` later (collapsed forwarding, then stale copies).
    Burst {
        worker: usize,
        req: Shape,
        first: Vec<Reply>,
        gap_ms: u64,
        then: Vec<Reply>,
    },
    /// Runs the clock on.
    Run(u64),
    /// Steps the wall clock (seconds, either way).
    WallClock(i64),
    /// Reloads the plugin with another open duration.
    Reload(u64),
}

#[derive(Clone, Debug)]
struct Shape {
    path: u8,
    tenant: u8,
    method: u8,
    body: u8,
    upload_ms: u64,
    client_timeout_ms: Option<u64>,
    download_ms: u64,
    http2: bool,
}

#[derive(Clone, Debug)]
enum Reply {
    Status {
        status: u16,
        latency_ms: u64,
        body: u8,
        reset_after_headers: bool,
        grpc: Option<u8>,
        /// A streamed body: it arrives this long after the headers.
        body_after_ms: u64,
    },
    Reset(u64, u8),
    Hang,
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        0..6u8,
        0..6u8,
        0..4u8,
        0..3u8,
        prop_oneof![4 => Just(0u64), 1 => 0..400u64],
        prop_oneof![3 => Just(None), 1 => (0..400u64).prop_map(Some)],
        prop_oneof![4 => Just(0u64), 1 => 0..200u64],
        any::<bool>(),
    )
        .prop_map(
            |(path, tenant, method, body, upload_ms, client_timeout_ms, download_ms, http2)| {
                Shape {
                    path,
                    tenant,
                    method,
                    body,
                    upload_ms,
                    client_timeout_ms,
                    download_ms,
                    http2,
                }
            },
        )
}

fn reply() -> impl Strategy<Value = Reply> {
    prop_oneof![
        6 => (
            prop::sample::select(vec![200u16, 200, 204, 404, 429, 500, 502, 503, 504]),
            prop_oneof![3 => 0..30u64, 1 => 0..400u64],
            0..3u8,
            prop::bool::weighted(0.1),
            prop::option::weighted(0.2, 0..17u8),
            prop_oneof![4 => Just(0u64), 1 => 0..300u64],
        )
            .prop_map(
                |(status, latency_ms, body, reset_after_headers, grpc, body_after_ms)| {
                    Reply::Status {
                        status,
                        latency_ms,
                        body,
                        reset_after_headers,
                        grpc,
                        body_after_ms,
                    }
                }
            ),
        1 => (0..200u64, 0..5u8).prop_map(|(ms, r)| Reply::Reset(ms, r)),
        1 => Just(Reply::Hang),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        12 => (prop_oneof![Just(0usize), 0..4usize], prop_oneof![3 => 0..5u64, 1 => 0..300u64], shape(), reply())
            .prop_map(|(worker, after_ms, req, reply)| Step::Send { worker, after_ms, req, reply }),
        3 => (
            0..4usize,
            shape(),
            prop::collection::vec(reply(), 1..5),
            0..1500u64,
            prop::collection::vec(reply(), 0..4),
        )
            .prop_map(|(worker, mut req, first, gap_ms, then)| {
                req.method %= 2; // GET: what collapses and keeps copies
                Step::Burst { worker, req, first, gap_ms, then }
            }),
        2 => (0..1500u64).prop_map(Step::Run),
        1 => prop::sample::select(vec![-3600i64, -5, -1, 1, 5, 3600]).prop_map(Step::WallClock),
        1 => (50..400u64).prop_map(Step::Reload),
    ]
}

/// Whether Envoy holds the request's body back from the filter for good: an upload
/// under `admit_after_body` without `allow_on_headers_stop_iteration` (documented:
/// it waits until a timeout ends it).
fn kept_back(s: &Shape, stop_iteration: bool) -> bool {
    !stop_iteration && matches!(s.path, 0 | 1 | 5) && s.body != 0
}

fn request(s: &Shape) -> Request {
    let path = [
        "/api/a",
        "/api/b?q=1",
        "/rpc/svc/Call",
        "/shadow/x",
        "/other",
        "/api/a",
    ][s.path as usize % 6];
    let mut r = if s.path == 2 {
        Request::grpc(path).header("grpc-timeout", "200m")
    } else {
        Request::get(path).method(["GET", "GET", "POST", "HEAD"][s.method as usize % 4])
    };
    let tenant = match s.tenant {
        0 => None,
        5 => Some("t".repeat(300)),
        n => Some(format!("t{n}")),
    };
    if let Some(t) = tenant {
        r = r.header("x-tenant", &t);
    }
    if s.tenant == 4 {
        r = r.header("authorization", "Bearer x");
    }
    match s.body {
        1 => r = r.body(b"small"),
        2 => r = r.body(&[b'x'; 100]),
        _ => {}
    }
    r = r.upload_ms(s.upload_ms).download_ms(s.download_ms);
    if let Some(ms) = s.client_timeout_ms {
        r = r.client_timeout_ms(ms);
    }
    if s.http2 {
        r = r.http2();
    }
    r
}

fn upstream(r: &Reply) -> UpstreamReply {
    match *r {
        Reply::Status {
            status,
            latency_ms,
            body,
            reset_after_headers,
            grpc,
            body_after_ms,
        } => UpstreamReply::Response {
            status,
            latency_ns: latency_ms * MS,
            headers: if status == 503 {
                vec![("retry-after".into(), "2".into())]
            } else {
                vec![]
            },
            body: ["", "ok", &"b".repeat(100)][body as usize % 3].into(),
            trailers: grpc.map_or(vec![], |g| vec![("grpc-status".into(), g.to_string())]),
            reset_after_headers,
            body_after_ns: body_after_ms * MS,
        },
        Reply::Reset(ms, reason) => UpstreamReply::Reset {
            latency_ns: ms * MS,
            reason: [
                ResetReason::RemoteReset,
                ResetReason::ConnectionFailure,
                ResetReason::ConnectionTermination,
                ResetReason::Overflow,
                ResetReason::NoHealthyUpstream,
            ][reason as usize % 5],
        },
        Reply::Hang => UpstreamReply::Hang,
    }
}

/// The plugin; `stop_iteration`: Envoy 1.35+'s `allow_on_headers_stop_iteration`,
/// which `admit_after_body` needs (without it Envoy holds every body back).
fn plugin(sleep_ms: u64, stop_iteration: bool) -> PluginConfig {
    let mut p = common::harness_config(CasMode::Envoy, &config(sleep_ms), 300).plugin;
    p.allow_on_headers_stop_iteration = stop_iteration;
    p
}

/// Runs the program; returns the `x-fusewire` tags the clients saw, and `in_flight`
/// if the program made an `in_flight` gauge (a key's metrics).
fn run(
    steps: &[Step],
    cas: CasMode,
    stop_iteration: bool,
) -> Result<BTreeSet<String>, TestCaseError> {
    let mut cfg = common::harness_config(cas, &config(200), 300);
    cfg.plugin = plugin(200, stop_iteration);
    cfg.stream_idle_timeout_ms = 5_000;
    let mut h = Harness::new(module(), cfg).expect("plugin loads");
    let mut at = h.now_ns();
    let mut ids = Vec::new();
    for s in steps {
        match s {
            Step::Send {
                worker,
                after_ms,
                req,
                reply,
            } => {
                at += after_ms * MS;
                let id = h.submit_at(at, *worker, request(req), upstream(reply));
                ids.push((id, kept_back(req, stop_iteration)));
            }
            Step::Burst {
                worker,
                req,
                first,
                gap_ms,
                then,
            } => {
                let back = kept_back(req, stop_iteration);
                for r in first {
                    let id = h.submit_at(at, *worker, request(req), upstream(r));
                    ids.push((id, back));
                }
                for r in then {
                    let id = h.submit_at(at + gap_ms * MS, *worker, request(req), upstream(r));
                    ids.push((id, back));
                }
            }
            Step::Run(ms) => {
                at = at.max(h.now_ns()) + ms * MS;
                h.run_until(at);
            }
            Step::WallClock(s) => {
                h.run_until(at);
                h.step_wall_clock(s * 1_000_000_000);
            }
            Step::Reload(sleep_ms) => {
                h.run_until(at);
                h.reload(module(), plugin(*sleep_ms, stop_iteration))
                    .expect("reload");
            }
        }
    }
    // Every stream ends (the stream idle timeout, 5 s, ends any left paused).
    prop_assert!(
        h.run_until_idle(Duration::from_secs(60)),
        "streams still in flight"
    );
    for w in 0..h.workers() {
        prop_assert!(h.worker_alive(w), "worker {w}'s VM died");
    }
    // Nothing leaks: once every stream has ended (and a tick has flushed the
    // gauges), no key holds a slot.
    h.run_for(Duration::from_millis(200));
    let stats = h.stats_text();
    let leaked: Vec<&str> = stats
        .lines()
        .filter(|l| l.contains(".in_flight: ") && !l.ends_with(": 0"))
        .collect();
    prop_assert!(leaked.is_empty(), "slots held at rest: {leaked:?}");
    let mut tags = BTreeSet::new();
    if stats.contains(".in_flight: ") {
        tags.insert("in_flight".into());
    }
    for (id, back) in ids {
        let r = h.record(id).expect("every request has a record");
        if let Some(tag) = r
            .response_headers
            .as_ref()
            .and_then(|m| m.get_str("x-fusewire"))
        {
            tags.insert(tag);
        }
        prop_assert!(
            r.outcome != Outcome::FailClosed && !r.code_details.contains("wasm"),
            "request {id} ended as {:?} ({})",
            r.outcome,
            r.code_details
        );
        prop_assert!(
            r.outcome != Outcome::IdleTimeout || back && !r.sent_upstream,
            "request {id} was left paused in the filter: {r:?}"
        );
    }
    Ok(tags)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_traffic_never_kills_a_worker(
        steps in prop::collection::vec(step(), 1..60),
        kong in any::<bool>(),
        stop_iteration in any::<bool>(),
    ) {
        run(&steps, if kong { CasMode::Kong } else { CasMode::Envoy }, stop_iteration)?;
    }
}

/// The programs reach what they are meant to test: over 60 programs from a fixed
/// seed, clients get every kind of reply the filter makes, and the slot check has
/// gauges to read (in a run of 100, the rarest were stale copies, in 16 programs,
/// and collapsed replies, in 36).
#[test]
fn random_traffic_reaches_every_reply() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let programs = prop::collection::vec(step(), 40..60);
    let mut seen = BTreeSet::new();
    for _ in 0..60 {
        let steps = programs.new_tree(&mut runner).expect("a program").current();
        seen.extend(run(&steps, CasMode::Envoy, true).expect("runs"));
    }
    let all = [
        "collapsed",
        "failure",
        "in_flight",
        "rejected",
        "short-circuited",
        "stale",
        "timeout",
    ];
    assert_eq!(seen, all.map(String::from).into(), "tags seen");
}
