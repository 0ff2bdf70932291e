//! Issue 8: the harness behaves like Envoy in what a filter can observe — gRPC shapes,
//! trailers, header and attribute lifetimes, response-phase local replies, failure
//! policies, cross-stream effects, callouts. Each test names the Envoy /
//! proxy-wasm-cpp-host source it follows (read from the upstream sources; see the
//! fidelity table in host-test/README.md).

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use fusewire_host_test::grpc::GrpcReply;
use fusewire_host_test::*;

fn probe() -> &'static WasmModule {
    static M: OnceLock<WasmModule> = OnceLock::new();
    M.get_or_init(|| common::fixture("probe"))
}

fn harness_with(cfg: HarnessConfig) -> Harness {
    Harness::new(probe(), cfg).expect("harness")
}

fn one() -> Harness {
    harness_with(HarnessConfig {
        workers: 1,
        ..Default::default()
    })
}

fn with_plugin(plugin: PluginConfig) -> Harness {
    harness_with(HarnessConfig {
        workers: 1,
        plugin,
        ..Default::default()
    })
}

fn shared_text(h: &Harness, key: &str) -> String {
    String::from_utf8_lossy(&h.shared_data(key).expect(key).0).into_owned()
}

/// The probe's observation line for `phase` of the stream at `path`.
fn obs(h: &Harness, path: &str, phase: &str) -> String {
    let all = shared_text(h, &format!("obs-{path}"));
    all.lines()
        .find(|l| l.starts_with(&format!("{phase}:")))
        .unwrap_or_else(|| panic!("no {phase} in {all}"))
        .to_string()
}

fn reply(status: u16) -> Request {
    Request::grpc("/probe/reply").header("x-probe-status", &status.to_string())
}

// ---- 1. gRPC and trailers ----------------------------------------------------------

/// Envoy `Http::Utility::prepareLocalReply` (source/common/http/utility.cc) with
/// `Grpc::Utility::httpToGrpcStatus` (source/common/grpc/status.cc) and
/// `PercentEncoding::encode`: a filter's local reply to a gRPC request is trailers-only,
/// `:status 200`, grpc-status mapped from the HTTP status unless the filter supplied
/// one, grpc-message percent-encoded, no content-length, no body.
#[test]
fn grpc_local_reply_maps_the_http_status_and_percent_encodes() {
    let mut h = one();
    for (status, grpc) in [
        (404, "12"),
        (503, "14"),
        (429, "14"),
        (500, "2"),
        (401, "16"),
    ] {
        let r = h.request(0, reply(status), UpstreamReply::status(200));
        assert_eq!(r.response_status, Some(200), "{status}");
        assert_eq!(
            r.response_header("grpc-status").as_deref(),
            Some(grpc),
            "{status}"
        );
        assert_eq!(
            r.response_header("content-type").as_deref(),
            Some("application/grpc")
        );
        assert!(r.response_body.is_empty() && r.response_header("content-length").is_none());
        assert_eq!(r.grpc_status(), grpc.parse().ok());
    }
    let r = h.request(
        0,
        reply(503).header("x-probe-body", "50% off~"),
        UpstreamReply::status(200),
    );
    assert_eq!(
        r.response_header("grpc-message").as_deref(),
        Some("50%25 off%7E")
    );
    let r = h.request(
        0,
        reply(503).header("x-probe-add", "grpc-status=8"),
        UpstreamReply::status(200),
    );
    assert_eq!(
        r.response_header("grpc-status").as_deref(),
        Some("8"),
        "filter header wins"
    );
    let r = h.request(
        0,
        reply(503).header("x-probe-grpc", "4"),
        UpstreamReply::status(200),
    );
    assert_eq!(
        r.response_header("grpc-status").as_deref(),
        Some("4"),
        "explicit grpc status"
    );
    // grpc-web is not gRPC: a plain HTTP reply.
    let r = h.request(
        0,
        Request::get("/probe/reply")
            .header("content-type", "application/grpc-web")
            .header("x-probe-status", "503"),
        UpstreamReply::status(200),
    );
    assert_eq!(
        (r.response_status, r.response_header("grpc-status")),
        (Some(503), None)
    );
}

/// Envoy `Router::Filter::onUpstreamReset` / `onUpstreamTimeoutAbort` → `sendLocalReply`
/// with no gRPC status (source/common/router/router.cc), and `Context::failStream`
/// (source/extensions/common/wasm/context.cc, UNAVAILABLE): every router and
/// fail-closed reply to a gRPC request is trailers-only; a route timeout is 14.
#[test]
fn grpc_router_and_fail_closed_replies_are_trailers_only() {
    let mut h = harness_with(HarnessConfig {
        workers: 1,
        routes: vec![RouteConfig {
            timeout_ms: 100,
            ..Default::default()
        }],
        ..Default::default()
    });
    let g = || Request::grpc("/svc/M");
    let r = h.request(0, g(), UpstreamReply::reset());
    assert_eq!((r.response_status, r.grpc_status()), (Some(200), Some(14)));
    assert_eq!(
        r.response_header("grpc-message").as_deref(),
        Some(
            "upstream connect error or disconnect/reset before headers. reset reason: remote reset"
        )
    );
    assert_eq!(
        r.response_header("x-probe-resp").as_deref(),
        Some("200"),
        "filter saw it"
    );
    assert_eq!(r.outcome, Outcome::UpstreamFailed);
    let r = h.request(0, g(), UpstreamReply::hang());
    assert_eq!((r.response_status, r.grpc_status()), (Some(200), Some(14)));
    assert_eq!(r.response_flags, flags::UPSTREAM_REQUEST_TIMEOUT);
    assert_eq!(
        r.response_header("grpc-message").as_deref(),
        Some("upstream request timeout")
    );
    let r = h.request(
        0,
        g(),
        UpstreamReply::reset_with(ResetReason::NoHealthyUpstream),
    );
    assert_eq!(r.grpc_status(), Some(14));
    let r = h.request(0, Request::grpc("/probe/trap"), UpstreamReply::status(200));
    assert_eq!(r.outcome, Outcome::FailClosed);
    assert_eq!((r.response_status, r.grpc_status()), (Some(200), Some(14)));
    assert_eq!(
        r.response_header("grpc-message"),
        None,
        "failStream has no body"
    );
}

/// Envoy `Context::encodeTrailers` / `getMap(ResponseTrailers)`
/// (source/extensions/common/wasm/context.cc): an upstream gRPC response carries
/// grpc-status in the response trailers, delivered to `on_http_response_trailers`
/// with map 3 live (readable and writable); a trailers-only answer has it in the
/// headers and no trailers callback.
#[test]
fn upstream_grpc_status_arrives_in_the_response_trailers() {
    let mut h = one();
    let r = h.request(0, Request::grpc("/svc/M"), UpstreamReply::grpc(14));
    assert_eq!(r.response_status, Some(200));
    assert_eq!(r.response_header("grpc-status"), None);
    assert_eq!(r.response_trailer("grpc-status").as_deref(), Some("14"));
    assert_eq!(r.grpc_status(), Some(14));
    assert_eq!(
        r.response_trailer("x-probe-trailer").as_deref(),
        Some("seen grpc-status=14"),
        "the filter read and extended the trailers"
    );
    assert!(r.callbacks.contains(&"on_response_trailers".to_string()));
    assert_eq!(
        r.outcome,
        Outcome::UpstreamFailed,
        "HTTP 200, but UNAVAILABLE: a 503 by Envoy's grpcToHttpStatus"
    );
    let r = h.request(
        0,
        Request::grpc("/svc/M"),
        UpstreamReply::grpc_trailers_only(8),
    );
    assert_eq!(r.response_header("grpc-status").as_deref(), Some("8"));
    assert_eq!(r.response_trailers, None);
    assert!(!r.callbacks.contains(&"on_response_trailers".to_string()));
}

/// Envoy `Context::decodeTrailers` (map 1 live there) and the filter manager's frame
/// order: request trailers reach `on_http_request_trailers` after the body and go
/// upstream as the filter left them.
#[test]
fn request_trailers_reach_the_filter_and_the_upstream() {
    let mut h = one();
    let r = h.request(
        0,
        Request::grpc("/svc/M").trailer("x-req-trailer", "abc"),
        UpstreamReply::grpc(0),
    );
    let cb: Vec<&str> = r.callbacks.iter().map(String::as_str).collect();
    assert_eq!(
        cb,
        [
            "on_context_create",
            "on_request_headers",
            "on_request_body",
            "on_request_trailers",
            "on_response_headers",
            "on_response_body",
            "on_response_trailers",
            "on_log",
            "on_done",
            "on_delete"
        ]
    );
    let t = r.upstream_request_trailers.expect("trailers upstream");
    assert_eq!(t.get_str("x-req-trailer").as_deref(), Some("ABC"));
}

/// Envoy `Context::grpcCall` / `grpcStream` (source/extensions/common/wasm/context.cc:
/// a cluster name as service, unknown → PARSE_FAILURE) and the gRPC callbacks
/// (`onGrpcReceiveWrapper`, `onGrpcCloseWrapper`): OK + a token, then
/// `on_grpc_receive` (call success) or `on_grpc_close` with `proxy_get_status`; a
/// stream gets initial metadata, message, trailing metadata, close. Callbacks go to
/// the root context (cpp-host src/exports.cc `grpc_call`: `root_context()`).
#[test]
fn grpc_calls_and_streams_answer_through_callbacks() {
    let cluster = |reply: GrpcReply| ClusterConfig {
        grpc_reply: reply,
        ..Default::default()
    };
    let mut h = harness_with(HarnessConfig {
        workers: 1,
        clusters: vec![cluster(GrpcReply {
            latency_ns: 3_000_000,
            response: "pong".into(),
            initial_metadata: vec![("k".into(), "v".into())],
            trailing_metadata: vec![("t".into(), "w".into())],
            ..Default::default()
        })],
        ..Default::default()
    });
    let r = h.request(
        0,
        Request::get("/probe/grpc-call"),
        UpstreamReply::status(200),
    );
    assert_eq!(r.response_header("x-grpc-status").as_deref(), Some("0"));
    assert_eq!(r.body_text(), "pong");
    assert_eq!(r.latency_ns(), 3_000_000);
    assert!(h
        .lifecycle()
        .iter()
        .any(|c| c.callback == "proxy_on_grpc_receive" && c.context_id == 1));
    let r = h.request(
        0,
        Request::get("/probe/grpc-stream"),
        UpstreamReply::status(200),
    );
    assert_eq!(
        r.body_text(),
        "initial n=1 k=Some(\"v\"); message pong; trailing n=1 t=Some(\"w\"); close 0 status=(0,None)"
    );
    let r = h.request(
        0,
        Request::get("/probe/grpc-call-bad"),
        UpstreamReply::status(200),
    );
    assert_eq!(r.body_text(), "err=ParseFailure");
    let before = h.lifecycle().len();
    let r = h.request(
        0,
        Request::get("/probe/grpc-cancel"),
        UpstreamReply::status(200),
    );
    assert_eq!(r.body_text(), "cancelled");
    h.run_for(Duration::from_millis(10));
    assert_eq!(
        h.lifecycle().len(),
        before,
        "a cancelled call never calls back"
    );

    let mut h = harness_with(HarnessConfig {
        workers: 1,
        clusters: vec![cluster(GrpcReply {
            status: 7,
            message: "denied".into(),
            ..Default::default()
        })],
        ..Default::default()
    });
    let r = h.request(
        0,
        Request::get("/probe/grpc-call"),
        UpstreamReply::status(200),
    );
    assert_eq!(r.response_header("x-grpc-status").as_deref(), Some("7"));
    assert_eq!(
        r.response_header("x-grpc-message").as_deref(),
        Some("denied")
    );
}

// ---- 2. Header and attribute lifetimes ------------------------------------------------

/// Envoy `Context::decodeHeaders` / `encodeHeaders` (the map pointer is dropped once the
/// callback returns Continue), `getConstMap` (access-log maps in `on_log`, NOT_FOUND for
/// a missing one there), `getHeaderMapPairs` (OK + empty for a missing map),
/// `getMap`/`getHeaderMapSize` (BAD_ARGUMENT), and the expression context's
/// `RequestWrapper` (header-derived `request.*` only from a live map)
/// (source/extensions/common/wasm/context.cc, source/extensions/filters/common/expr/
/// context.cc). Codes: 0 OK, 1 NOT_FOUND, 2 BAD_ARGUMENT.
#[test]
fn header_maps_and_request_attributes_follow_envoys_lifetimes() {
    let mut h = one();
    h.request(
        0,
        Request::get("/probe/observe"),
        UpstreamReply::status(200),
    );
    let p = "/probe/observe";
    let req = obs(&h, p, "req_headers");
    assert!(
        req.starts_with("req_headers: m0=0 m1=2 m2=2 m3=2 p0=0/")
            && req.ends_with("size0=0 a0=0 path=/probe/observe code=!1 details=!1 flags=0"),
        "{req}"
    );
    assert_eq!(
        obs(&h, p, "resp_headers"),
        "resp_headers: m0=2 m1=2 m2=0 m3=2 p0=0/0 size0=2 a0=2 path=!1 code=200 details=via_upstream flags=0"
    );
    let log = obs(&h, p, "log");
    assert!(
        log.starts_with("log: m0=0 m1=1 m2=0 m3=1 p0=0/")
            && log.ends_with(
                "size0=2 a0=2 path=/probe/observe code=200 details=via_upstream flags=0"
            ),
        "readable again (not writable) in on_log: {log}"
    );
    assert_eq!(
        obs(&h, p, "done"),
        "done: m0=2 m1=2 m2=2 m3=2 p0=0/0 size0=2 a0=2 path=!1 code=200 details=via_upstream flags=0"
    );
}

/// The same observation with `strict_lifetimes: false`: maps stay readable and
/// writable until the stream is deleted (the harness's old, looser rules).
#[test]
fn lenient_lifetimes_keep_every_map_readable() {
    let mut h = harness_with(HarnessConfig {
        workers: 1,
        strict_lifetimes: false,
        ..Default::default()
    });
    h.request(
        0,
        Request::get("/probe/observe"),
        UpstreamReply::status(200),
    );
    let p = "/probe/observe";
    let resp = obs(&h, p, "resp_headers");
    assert!(
        resp.starts_with("resp_headers: m0=0 m1=2 m2=0 m3=2"),
        "{resp}"
    );
    assert!(resp.contains("path=/probe/observe"), "{resp}");
    let done = obs(&h, p, "done");
    assert!(done.starts_with("done: m0=0 m1=1 m2=0 m3=1"), "{done}");
}

/// Envoy `FilterManager::sendLocalReply` sets the details before the filter chain runs,
/// while `response.code` is only in the stream info once the headers are encoded:
/// absent in the filter's `on_http_response_headers` for its own local reply.
#[test]
fn local_reply_code_is_absent_in_the_filters_response_headers() {
    let mut h = one();
    let r = h.request(
        0,
        Request::get("/probe/observe-reply"),
        UpstreamReply::status(200),
    );
    assert_eq!(r.response_status, Some(418));
    let p = "/probe/observe-reply";
    let resp = obs(&h, p, "resp_headers");
    // The SDK sends no details: Envoy records them as "" (set, empty).
    assert!(resp.ends_with("code=!1 details= flags=0"), "{resp}");
    let req = obs(&h, p, "req_headers");
    assert!(req.contains("m0=0"), "{req}");
    assert!(obs(&h, p, "log").ends_with("code=418 details= flags=0"));
}

/// cpp-host `convertVmCallResultToFilterHeadersStatus` (src/context.cc): a headers
/// StopIteration is turned into StopAllIterationAndWatermark ("the former breaks all
/// assumptions about HTTP processing"; Envoy's `allow_on_headers_stop_iteration` is
/// off by default), so the body is not delivered while the headers are stopped; after
/// `continueStream` it is.
#[test]
fn headers_stop_iteration_holds_the_body_until_continued() {
    let mut h = one();
    let p = "/probe/observe-stop-headers";
    let a = h.submit(0, Request::get(p).body(b"abc"), UpstreamReply::status(200));
    h.run_for(Duration::from_millis(5));
    let seen = |h: &Harness| {
        h.shared_data(&format!("obs-{p}"))
            .is_some_and(|(v, _)| String::from_utf8_lossy(&v).contains("req_body:"))
    };
    assert!(!seen(&h), "no body callback while the headers are stopped");
    assert!(h.record(a).is_none(), "still paused");
    h.request(
        0,
        Request::get("/probe/release"),
        UpstreamReply::status(200),
    );
    h.run_until_idle(Duration::from_secs(1));
    assert!(h.record(a).expect("released").sent_upstream);
    assert!(seen(&h), "the body follows the continue");
}

/// With the plugin's `allow_on_headers_stop_iteration` (Envoy 1.35+) a headers
/// StopIteration stops that frame only: the body still reaches the filter, and the
/// body's Continue sends the request on, headers and body, with no `continue_stream`.
#[test]
fn allow_on_headers_stop_iteration_delivers_the_body_to_a_stopped_stream() {
    let mut h = with_plugin(PluginConfig {
        allow_on_headers_stop_iteration: true,
        ..Default::default()
    });
    let p = "/probe/observe-stop-headers";
    let r = h.request(0, Request::get(p).body(b"abc"), UpstreamReply::status(200));
    assert!(r.sent_upstream, "{r:?}");
    assert_eq!(r.response_status, Some(200));
    obs(&h, p, "req_body");
}

/// Envoy `Context::continueStream` drops the request map at once; with the trailers:
/// `getConstMap(RequestTrailers)` is nullptr in the access-log phase (NOT_FOUND), the
/// response trailers are readable there.
#[test]
fn continue_stream_drops_the_request_map_and_trailers_follow_their_frames() {
    let mut h = one();
    let a = h.submit(
        0,
        Request::get("/probe/observe-stop-headers"),
        UpstreamReply::status(200),
    );
    h.run_for(Duration::from_millis(5));
    h.request(
        0,
        Request::get("/probe/release"),
        UpstreamReply::status(200),
    );
    h.run_until_idle(Duration::from_secs(1));
    assert!(h.record(a).expect("released").sent_upstream);
    let resp = obs(&h, "/probe/observe-stop-headers", "resp_headers");
    assert!(resp.starts_with("resp_headers: m0=2"), "{resp}");

    h.request(
        0,
        Request::grpc("/probe/observe-trailers").trailer("x-req-trailer", "t"),
        UpstreamReply::grpc(0),
    );
    let p = "/probe/observe-trailers";
    assert!(obs(&h, p, "req_trailers").starts_with("req_trailers: m0=2 m1=0 m2=2 m3=2"));
    assert!(obs(&h, p, "resp_trailers").starts_with("resp_trailers: m0=2 m1=2 m2=2 m3=0"));
    assert!(obs(&h, p, "log").starts_with("log: m0=0 m1=1 m2=0 m3=0"));
}

// ---- 3. Local reply from the response phase -----------------------------------------

/// Envoy `DownstreamFilterManager::sendDirectLocalReply` (source/common/http/
/// filter_manager.cc): a local reply once the response is in the encoder chain replaces
/// it and goes straight to the client, without running the filter's callbacks again.
#[test]
fn local_reply_from_the_response_phase_replaces_the_upstream_response() {
    let mut h = one();
    let r = h.request(
        0,
        Request::get("/probe/reply-in-response").header("x-probe-status", "299"),
        UpstreamReply::status(200).with_body("upstream"),
    );
    assert_eq!(r.upstream_status, Some(200));
    assert_eq!(r.response_status, Some(299));
    assert_eq!(r.body_text(), "replaced");
    assert_eq!(r.response_header("x-fusewire").as_deref(), Some("replaced"));
    assert_eq!(
        r.response_header("content-type").as_deref(),
        Some("text/plain")
    );
    assert_eq!(
        r.response_header("x-probe-resp"),
        None,
        "no second response phase"
    );
    assert_eq!(r.outcome, Outcome::LocalReply);
    assert_eq!(
        r.callbacks
            .iter()
            .filter(|c| *c == "on_response_headers")
            .count(),
        1
    );
    assert!(!r.callbacks.contains(&"on_response_body".to_string()));
    let r = h.request(
        0,
        Request::grpc("/probe/reply-in-response").header("x-probe-status", "503"),
        UpstreamReply::grpc(0),
    );
    assert_eq!((r.response_status, r.grpc_status()), (Some(200), Some(14)));
    assert_eq!(r.response_trailers, None, "trailers-only");
}

// ---- 4. Failure policies ----------------------------------------------------------------

/// Envoy `PluginConfig::createContext` (source/extensions/common/wasm/wasm.cc: a failed
/// VM under FAIL_OPEN skips the filter for new streams) and cpp-host `CHECK_FAIL`
/// (src/context.cc: streams with a context in the failed VM read the legacy
/// `plugin_->fail_open_`, false with `failure_policy`, → `failStream`): the trapping
/// stream and in-flight ones get 503 `wasm_fail_stream`; a stream paused in the VM is
/// never resumed and ends at the stream idle timeout.
#[test]
fn fail_open_fails_in_flight_streams_and_skips_new_ones() {
    let mut h = with_plugin(PluginConfig {
        failure_policy: FailurePolicy::FailOpen,
        ..Default::default()
    });
    let parked = h.submit(0, Request::get("/probe/park"), UpstreamReply::status(200));
    let waiting = h.submit(
        0,
        Request::get("/x"),
        UpstreamReply::status(200).after_ms(100),
    );
    h.run_for(Duration::from_millis(10));
    let trap = h.request(0, Request::get("/probe/trap"), UpstreamReply::status(200));
    assert_eq!(
        (trap.outcome, trap.code_details.as_str()),
        (Outcome::FailClosed, "wasm_fail_stream")
    );
    let new = h.request(0, Request::get("/y"), UpstreamReply::status(200));
    assert_eq!(new.outcome, Outcome::UpstreamOk);
    assert!(new.callbacks.is_empty(), "filter skipped");
    h.run_for(Duration::from_millis(200));
    let w = h.record(waiting).expect("waiting finished").clone();
    assert_eq!(w.upstream_status, Some(200));
    assert_eq!(
        (w.outcome, w.response_status, w.code_details.as_str()),
        (Outcome::FailClosed, Some(503), "wasm_fail_stream")
    );
    assert!(h.record(parked).is_none(), "never resumed");
    assert!(h.run_until_idle(Duration::from_secs(400)));
    let p = h.record(parked).expect("idle timeout").clone();
    assert_eq!(
        p.latency_ns(),
        300_000_000_000,
        "default stream_idle_timeout 300 s"
    );
    assert_eq!(p.response_status, Some(503));
    assert_ne!(p.response_flags & flags::STREAM_IDLE_TIMEOUT, 0);
}

/// The legacy `fail_open: true` (cpp-host `CHECK_FAIL` returns the open result): the
/// trapping and in-flight streams continue without the filter; a paused one still
/// waits for the idle timeout (504 `stream_idle_timeout`).
#[test]
fn legacy_fail_open_lets_in_flight_streams_continue() {
    let mut h = with_plugin(PluginConfig {
        fail_open: true,
        ..Default::default()
    });
    let parked = h.submit(0, Request::get("/probe/park"), UpstreamReply::status(200));
    let waiting = h.submit(
        0,
        Request::get("/x"),
        UpstreamReply::status(200).after_ms(100),
    );
    h.run_for(Duration::from_millis(10));
    let trap = h.request(0, Request::get("/probe/trap"), UpstreamReply::status(200));
    assert_eq!(
        (trap.outcome, trap.response_status),
        (Outcome::UpstreamOk, Some(200))
    );
    assert!(trap.sent_upstream);
    assert!(h.run_until_idle(Duration::from_secs(400)));
    assert_eq!(
        h.record(waiting).map(|r| r.outcome),
        Some(Outcome::UpstreamOk)
    );
    let p = h.record(parked).expect("idle timeout").clone();
    assert_eq!(
        (p.outcome, p.response_status, p.code_details.as_str()),
        (Outcome::IdleTimeout, Some(504), "stream_idle_timeout")
    );
    assert_eq!(p.body_text(), "stream timeout");
}

/// cpp-host `CHECK_FAIL_HTTP` with the legacy `fail_open`: a trap creating a stream's
/// context leaves that stream to go on without the filter (it hung in the harness:
/// found by review).
#[test]
fn legacy_fail_open_lets_a_stream_whose_context_trapped_continue() {
    let mut h = with_plugin(PluginConfig {
        fail_open: true,
        ..Default::default()
    });
    let armed = h.request(
        0,
        Request::get("/probe/trap-next-create"),
        UpstreamReply::status(200),
    );
    assert_eq!(armed.body_text(), "armed");
    let r = h.request(
        0,
        Request::get("/x"),
        UpstreamReply::status(200).with_body("up"),
    );
    assert_eq!(
        (r.outcome, r.response_status),
        (Outcome::UpstreamOk, Some(200)),
        "{r:?}"
    );
    assert!(r.sent_upstream);
    assert_eq!(r.response_body, b"up");
}

/// Without the legacy `fail_open`, a stream whose context creation trapped gets the
/// failure policy's 503 and never goes upstream (also with a slow client, whose
/// stream outlives the reply: found by review, it was sent upstream after its 503).
#[test]
fn a_stream_whose_context_trapped_fails_closed() {
    let mut h = with_plugin(PluginConfig {
        failure_policy: FailurePolicy::FailClosed,
        ..Default::default()
    });
    h.request(
        0,
        Request::get("/probe/trap-next-create"),
        UpstreamReply::status(200),
    );
    let r = h.request(
        0,
        Request::get("/x").download_ms(50),
        UpstreamReply::status(200),
    );
    assert_eq!(
        (r.response_status, r.code_details.as_str()),
        (Some(503), "wasm_fail_stream"),
        "{r:?}"
    );
    assert!(!r.sent_upstream, "{r:?}");
}

/// Envoy `PluginConfig::maybeReloadHandleIfNeeded` (source/extensions/common/wasm/
/// wasm.cc) with `JitteredLowerBoundBackOffStrategy` (source/common/common/
/// backoff_strategy.cc: `[base, 1.5 × base)`): the backoff counts from the last load,
/// so a VM that ran longer than the backoff is re-cloned on the very next request.
#[test]
fn fail_reload_backs_off_from_the_last_load() {
    let mut h = with_plugin(PluginConfig {
        failure_policy: FailurePolicy::FailReload,
        reload_backoff_ms: 1000,
        ..Default::default()
    });
    h.run_for(Duration::from_secs(10));
    assert_eq!(
        h.request(0, Request::get("/probe/trap"), UpstreamReply::status(200))
            .outcome,
        Outcome::FailClosed
    );
    let r = h.request(0, Request::get("/x"), UpstreamReply::status(200));
    assert_eq!(
        r.outcome,
        Outcome::UpstreamOk,
        "10 s since the load: reloaded at once"
    );
    assert!(h.worker_alive(0));
    // Now the last load is recent: a second trap backs off for at least 1 s.
    h.request(0, Request::get("/probe/trap"), UpstreamReply::status(200));
    h.run_for(Duration::from_millis(999));
    assert_eq!(
        h.request(0, Request::get("/x"), UpstreamReply::status(200))
            .outcome,
        Outcome::FailClosed
    );
    h.run_for(Duration::from_millis(501));
    assert_eq!(
        h.request(0, Request::get("/x"), UpstreamReply::status(200))
            .outcome,
        Outcome::UpstreamOk
    );
}

/// cpp-host `getOrCreateThreadLocalPlugin` (src/wasm.cc: a failed configure returns no
/// plugin handle) and Envoy `PluginConfig::createContext` (null handle → no filter): a
/// worker whose on_configure returns false runs without the filter.
#[test]
fn worker_whose_configure_fails_runs_without_the_filter() {
    // configures: canary 1, worker-0 2, worker-1 3 (rejected), main 4 (rejected).
    let mut h = harness_with(HarnessConfig {
        workers: 2,
        plugin: PluginConfig {
            configuration: "reject_configure_from=3".into(),
            ..Default::default()
        },
        ..Default::default()
    });
    let r0 = h.request(0, Request::get("/x"), UpstreamReply::status(200));
    assert_eq!(r0.response_header("x-probe-resp").as_deref(), Some("200"));
    let r1 = h.request(1, Request::get("/probe/trap"), UpstreamReply::status(200));
    assert_eq!(r1.outcome, Outcome::UpstreamOk);
    assert!(r1.callbacks.is_empty() && r1.response_header("x-probe-resp").is_none());
}

/// Envoy `ConnectionManagerImpl::ActiveStream::onIdleTimeout` (source/common/http/
/// conn_manager_impl.cc): flag SI, `sendLocalReply(504 "stream timeout",
/// stream_idle_timeout)` through the filter chain; the timeout is configurable.
#[test]
fn stream_idle_timeout_ends_a_stream_paused_forever() {
    let mut h = harness_with(HarnessConfig {
        workers: 1,
        stream_idle_timeout_ms: 2_000,
        ..Default::default()
    });
    let r = h.request(0, Request::get("/probe/park"), UpstreamReply::status(200));
    assert_eq!(r.latency_ns(), 2_000_000_000);
    assert_eq!(
        (r.outcome, r.response_status),
        (Outcome::IdleTimeout, Some(504))
    );
    assert_eq!(r.response_flags, flags::STREAM_IDLE_TIMEOUT);
    assert_eq!(
        r.response_header("x-probe-resp").as_deref(),
        Some("504"),
        "through the filter"
    );
    assert_eq!(
        r.local_reply.map(|l| l.source),
        Some(LocalReplySource::ConnectionManager)
    );
}

/// The same timer on a client that sends nothing more of its request: Envoy's idle
/// timer is reset only by activity, and `maybeRequestTimeoutCode` answers 408 while
/// the request is not received in full (source/common/http/utility.cc).
#[test]
fn stream_idle_timeout_on_a_stalled_upload_answers_408() {
    let mut h = harness_with(HarnessConfig {
        workers: 1,
        stream_idle_timeout_ms: 2_000,
        ..Default::default()
    });
    let stalled = Request::get("/upload")
        .method("POST")
        .body(b"x")
        .upload_ms(5_000);
    let r = h.request(0, stalled, UpstreamReply::status(200));
    assert_eq!(r.latency_ns(), 2_000_000_000);
    assert_eq!(r.response_status, Some(408));
    assert_eq!(r.response_flags, flags::STREAM_IDLE_TIMEOUT);
    assert!(!r.sent_upstream || r.upstream_status.is_none());
    // Sent within the timeout: it goes through, also when the upstream then takes
    // longer than what was left of the upload's idle time (the body's arrival resets
    // the timer).
    let quick = Request::get("/upload")
        .method("POST")
        .body(b"x")
        .upload_ms(1_000);
    let r = h.request(0, quick, UpstreamReply::status(200).after_ms(1_500));
    assert_eq!(r.response_status, Some(200));
}

// ---- 5. Cross-stream effects --------------------------------------------------------------

/// Envoy `Context::continueStream` / `sendLocalResponse` queue `addAfterVmCallAction`,
/// run by cpp-host `DeferAfterCallActions` right after the calling callback returns
/// (src/context.cc): a stream resumed or answered from another stream's callback moves
/// at that moment, not at the next tick (this harness has no tick configured).
#[test]
fn cross_stream_effects_apply_right_after_the_calling_callback() {
    let mut h = one();
    let a = h.submit(
        0,
        Request::get("/probe/park"),
        UpstreamReply::status(200).after_ms(10),
    );
    h.run_for(Duration::from_millis(50));
    h.request(
        0,
        Request::get("/probe/release"),
        UpstreamReply::status(200),
    );
    h.run_until_idle(Duration::from_secs(1));
    let ra = h.record(a).expect("resumed").clone();
    assert_eq!(ra.outcome, Outcome::UpstreamOk);
    assert_eq!(
        ra.latency_ns(),
        60_000_000,
        "resumed at 50 ms, then 10 ms upstream"
    );

    let b = h.submit(0, Request::get("/probe/park"), UpstreamReply::status(200));
    h.run_for(Duration::from_millis(5));
    let t = h.now_ns();
    h.request(
        0,
        Request::get("/probe/release-reply"),
        UpstreamReply::status(200),
    );
    let rb = h.record(b).expect("answered").clone();
    assert_eq!((rb.response_status, rb.end_ns), (Some(299), t));
    assert_eq!(rb.response_header("x-probe-resp").as_deref(), Some("299"));
}

/// cpp-host `exports::send_local_response` raises `Wasm::stopNextIteration(true)`, a
/// flag of the whole VM read by `convertVmCallResultTo*Status` before it is cleared
/// (`~DeferAfterCallActions`): a local reply sent to another stream also stops the
/// calling stream, whatever it returned — nothing resumes it but the idle timeout.
#[test]
fn a_local_reply_to_another_stream_stops_the_calling_stream() {
    let mut h = one();
    let b = h.submit(0, Request::get("/probe/park"), UpstreamReply::status(200));
    h.run_for(Duration::from_millis(5));
    let c = h.submit(
        0,
        Request::get("/probe/release-reply"),
        UpstreamReply::status(200),
    );
    h.run_for(Duration::from_millis(50));
    assert_eq!(h.record(b).expect("answered").response_status, Some(299));
    assert!(h.record(c).is_none(), "its Continue was read as a stop");
    h.run_until_idle(Duration::from_secs(400));
    let rc = h.record(c).expect("timed out").clone();
    assert!(!rc.sent_upstream);
    assert_eq!(rc.response_status, Some(504), "stream idle timeout");
}

// ---- 6. Callouts ---------------------------------------------------------------------------

/// cpp-host `exports::http_call` (src/exports.cc: `contextOrEffectiveContext()->
/// root_context()`): the call belongs to the root context, its callback gets the root
/// context id and still comes after the stream that made it has ended.
#[test]
fn http_call_belongs_to_the_root_context() {
    let mut h = harness_with(HarnessConfig {
        workers: 1,
        clusters: vec![ClusterConfig {
            http_call_reply: UpstreamReply::status(200).after_ms(5),
            ..Default::default()
        }],
        ..Default::default()
    });
    let r = h.request(
        0,
        Request::get("/probe/callout-then-reply"),
        UpstreamReply::status(200),
    );
    assert_eq!(r.body_text(), "dispatched=true");
    let calls = |h: &Harness| {
        h.lifecycle()
            .into_iter()
            .filter(|c| c.callback == "proxy_on_http_call_response")
            .collect::<Vec<_>>()
    };
    assert!(calls(&h).is_empty());
    h.run_for(Duration::from_millis(10));
    let c = calls(&h);
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].vm.as_str(), c[0].context_id), ("worker-0", 1));
}

/// Envoy's async client router replies (source/common/router/router.cc) reach
/// `Context::onHttpCallSuccess` as normal responses: reset → 503 "upstream connect
/// error …", timeout → 504 "upstream request timeout"; an inline failure (no healthy
/// host) makes `httpCall` return INTERNAL_FAILURE and no callback follows.
#[test]
fn callout_failures_arrive_as_responses_or_inline() {
    let with = |reply: UpstreamReply| {
        harness_with(HarnessConfig {
            workers: 1,
            clusters: vec![ClusterConfig {
                http_call_reply: reply,
                ..Default::default()
            }],
            ..Default::default()
        })
    };
    let mut h = with(UpstreamReply::reset().after_ms(2));
    let r = h.request(
        0,
        Request::get("/probe/callout"),
        UpstreamReply::status(200),
    );
    assert_eq!(
        r.response_header("x-callout-status").as_deref(),
        Some("503")
    );
    assert_eq!(
        r.body_text(),
        "upstream connect error or disconnect/reset before headers. reset reason: remote reset"
    );
    let mut h = with(UpstreamReply::reset_with(ResetReason::NoHealthyUpstream));
    let r = h.request(
        0,
        Request::get("/probe/callout"),
        UpstreamReply::status(200),
    );
    assert_eq!(
        (r.response_status, r.body_text().as_str()),
        (Some(500), "err=InternalFailure")
    );
    h.run_for(Duration::from_secs(2));
    assert!(!h
        .lifecycle()
        .iter()
        .any(|c| c.callback == "proxy_on_http_call_response"));
}

// ---- 7. Small ones -----------------------------------------------------------------------

/// Envoy `prepareLocalReply` (text/plain + content-length with a body, neither without)
/// and `ConnectionManagerUtility::mutateRequestHeaders` (x-forwarded-proto).
#[test]
fn local_reply_content_type_and_forwarded_proto() {
    let mut h = one();
    let r = h.request(0, Request::get("/probe/local"), UpstreamReply::status(200));
    assert_eq!(
        r.response_header("content-type").as_deref(),
        Some("text/plain")
    );
    assert_eq!(r.response_header("content-length").as_deref(), Some("8"));
    let r = h.request(
        0,
        Request::get("/probe/reply").header("x-probe-status", "204"),
        UpstreamReply::status(200),
    );
    assert_eq!(r.response_header("content-type"), None);
    let r = h.request(0, Request::get("/up"), UpstreamReply::status(200));
    let up = r.upstream_request_headers.expect("sent");
    assert_eq!(up.get_str("x-forwarded-proto").as_deref(), Some("http"));
}

/// cpp-host `WasmBase::startVm` restricts host calls while the start functions run
/// (`setRestrictedCallback`): logging, WASI output, args, environment, clocks and
/// randomness pass; any other call traps (`restricted_callback`) and the VM fails to
/// start (found by review: the harness answered them).
#[test]
fn host_calls_during_initialize_are_restricted_as_envoys() {
    let h = one();
    assert!(h
        .logs()
        .iter()
        .any(|l| l.vm == "worker-0" && l.message == "init clock=true"));
    for (name, args) in [
        ("proxy_get_current_time_nanoseconds", 1),
        ("proxy_set_effective_context", 1),
        ("proxy_get_buffer_bytes", 5),
    ] {
        let e = Harness::new(&initializer_calling(name, args), HarnessConfig::default())
            .err()
            .expect("refused");
        assert!(
            format!("{e:#}").contains(&format!("restricted_callback: env.{name}")),
            "{name}: {e:#}"
        );
    }
    // `proxy_log` is allowed.
    let h = Harness::new(
        &initializer_calling("proxy_log", 3),
        HarnessConfig::default(),
    );
    assert!(
        h.is_ok(),
        "{:#}",
        h.err().map(|e| format!("{e:#}")).unwrap_or_default()
    );
}

/// cpp-host `ContextBase::onStart` sets `temp_plugin_` around the root context's
/// creation, so Envoy serves the plugin configuration there (and in on_configure), not
/// in on_vm_start (found by review: NOT_FOUND here).
#[test]
fn plugin_configuration_is_served_at_the_roots_creation() {
    let h = with_plugin(PluginConfig {
        configuration: "{\"x\": 1}".into(),
        ..Default::default()
    });
    assert!(h
        .logs()
        .iter()
        .any(|l| l.vm == "worker-0" && l.message == "root create plugin_config_bytes=8"));
}

/// A module whose `_initialize` calls `env.<name>` with `args` zero arguments (i32),
/// dropping its i32 result; with the ABI marker, memory and an allocator.
fn initializer_calling(name: &str, args: usize) -> WasmModule {
    fn section(id: u8, content: &[u8]) -> Vec<u8> {
        let mut s = vec![id];
        let mut n = content.len();
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            s.push(if n == 0 { b } else { b | 0x80 });
            if n == 0 {
                break;
            }
        }
        s.extend_from_slice(content);
        s
    }
    fn name_bytes(v: &mut Vec<u8>, n: &str) {
        v.push(n.len() as u8);
        v.extend_from_slice(n.as_bytes());
    }
    // Types: 0 () -> (), 1 (i32) -> i32, 2 (i32 × args) -> i32.
    let mut types = vec![3, 0x60, 0, 0, 0x60, 1, 0x7f, 1, 0x7f, 0x60, args as u8];
    types.extend(std::iter::repeat_n(0x7f, args));
    types.extend_from_slice(&[1, 0x7f]);
    let mut imports = vec![1];
    name_bytes(&mut imports, "env");
    name_bytes(&mut imports, name);
    imports.extend_from_slice(&[0, 2]);
    // Functions 1 (marker), 2 (_initialize), 3 (malloc); one memory page.
    let funcs = [3, 0, 0, 1];
    let memory = [1, 0, 1];
    let mut exports = vec![4];
    for (n, kind, index) in [
        ("proxy_abi_version_0_2_1", 0, 1),
        ("_initialize", 0, 2),
        ("malloc", 0, 3),
        ("memory", 2, 0),
    ] {
        name_bytes(&mut exports, n);
        exports.extend_from_slice(&[kind, index]);
    }
    let mut init = vec![0];
    for _ in 0..args {
        init.extend_from_slice(&[0x41, 0]); // i32.const 0
    }
    init.extend_from_slice(&[0x10, 0, 0x1a, 0x0b]); // call 0, drop, end
    let mut code = vec![3, 2, 0, 0x0b, init.len() as u8];
    code.extend_from_slice(&init);
    code.extend_from_slice(&[4, 0, 0x41, 0, 0x0b]); // malloc: i32.const 0
    let mut bytes = b"\0asm\x01\0\0\0".to_vec();
    for (id, content) in [
        (1, types),
        (2, imports),
        (3, funcs.to_vec()),
        (5, memory.to_vec()),
        (7, exports),
        (10, code),
    ] {
        bytes.extend(section(id, &content));
    }
    WasmModule::from_bytes(&bytes, name).expect("compiles")
}

/// Envoy `Context::setProperty` (NOT_FOUND without stream info), `sendLocalResponse`
/// and `continueStream` (OK and nothing without decoder callbacks),
/// `getHeaderMapPairs` (OK + empty) in a root context (on_configure).
#[test]
fn root_context_calls_are_as_loose_as_envoys() {
    let h = one();
    assert!(h.logs().iter().any(|l| l.vm == "worker-0"
        && l.message == "root set_property=1 local_reply=0 continue=0 pairs=(0, 0) value=!2"));
}

/// Envoy's bootstrap wasm service with `singleton: true`
/// (source/extensions/bootstrap/wasm/config.cc): one plugin on the main thread.
#[test]
fn singleton_service_runs_one_vm_on_the_main_thread() {
    let mut h = harness_with(HarnessConfig {
        workers: 2,
        singleton: true,
        plugin: PluginConfig {
            configuration: "tick_ms=100".into(),
            ..Default::default()
        },
        ..Default::default()
    });
    let vms: Vec<String> = h
        .lifecycle()
        .into_iter()
        .filter(|c| c.callback == "proxy_on_configure")
        .map(|c| c.vm)
        .collect();
    assert_eq!(vms, ["canary", "main"]);
    h.run_for(Duration::from_secs(1));
    assert_eq!(h.metric("probe.ticks").map(|m| m.scalar()), Some(10));
    let r = h.request(0, Request::get("/x"), UpstreamReply::status(200));
    assert!(r.callbacks.is_empty() && r.outcome == Outcome::UpstreamOk);
}

// ---- config reload -----------------------------------------------------------------

/// The probe's `/probe/vm` answer on `worker`: the serving root context, its config and
/// the VM's guest globals.
fn vm_state(h: &mut Harness, worker: usize) -> String {
    let r = h.request(
        worker,
        Request::get("/probe/vm"),
        UpstreamReply::status(200),
    );
    String::from_utf8_lossy(&r.response_body).into_owned()
}

fn plugin(configuration: &str) -> PluginConfig {
    PluginConfig {
        configuration: configuration.into(),
        ..Default::default()
    }
}

/// Lifecycle calls made after the first `from`, as `vm callback context` strings.
fn calls_since(h: &Harness, from: usize) -> Vec<String> {
    h.lifecycle()[from..]
        .iter()
        .map(|c| format!("{} {} {}", c.vm, c.callback, c.context_id))
        .collect()
}

/// cpp-host `createWasm` (src/wasm.cc: the base VM is found again by
/// `makeVmKey(vm_id, vm configuration, code)`), `getOrCreateThreadLocalPlugin` →
/// `getOrCreateThreadLocalWasm` (the thread-local VM with that key is reused) →
/// `WasmBase::start` (a root context for the new plugin key, id from
/// `allocContextId`; `ContextBase::onStart`: context create + on_vm_start) →
/// `configure`; `~PluginHandleBase` → `WasmBase::startShutdown(old key)`: on_done,
/// then on_delete of the old root. No start function runs again (`initialize()` is not
/// called on a reused VM), so guest memory and globals carry over.
#[test]
fn reload_with_unchanged_code_reuses_each_workers_vm() {
    let mut h = harness_with(HarnessConfig {
        workers: 2,
        plugin: plugin("a=1"),
        ..Default::default()
    });
    vm_state(&mut h, 0);
    assert_eq!(
        vm_state(&mut h, 0),
        "root=1 config=a=1 inits=1 vm_starts=1 configures=1 requests=2"
    );
    let (logs, calls) = (h.logs().len(), h.lifecycle().len());
    assert_eq!(h.reload(probe(), plugin("a=2")).unwrap(), Reload::ReusedVms);
    // Worker 0: root 1, streams 2 and 3, so the new root context is 4; the stream 5.
    // Memory carried over (requests, configures), `_initialize` did not run again,
    // on_vm_start did (on the new root context, as cpp-host's onStart).
    assert_eq!(
        vm_state(&mut h, 0),
        "root=4 config=a=2 inits=1 vm_starts=2 configures=2 requests=3"
    );
    assert_eq!(
        vm_state(&mut h, 1),
        "root=2 config=a=2 inits=1 vm_starts=2 configures=2 requests=1"
    );
    let after = calls_since(&h, calls);
    for (vm, new) in [("worker-0", 4), ("worker-1", 2), ("main", 2)] {
        let mine: Vec<_> = after
            .iter()
            .filter(|c| c.starts_with(&format!("{vm} ")))
            .cloned()
            .collect();
        assert_eq!(
            mine,
            [
                format!("{vm} proxy_on_context_create {new}"),
                format!("{vm} proxy_on_vm_start {new}"),
                format!("{vm} proxy_on_configure {new}"),
                format!("{vm} proxy_on_done 1"),
                format!("{vm} proxy_on_delete 1"),
            ],
            "{after:?}"
        );
    }
    // The canary ran on a throwaway clone (which does run the start functions).
    assert!(after.contains(&"canary proxy_on_configure 1".to_string()));
    let inits: Vec<_> = h.logs()[logs..]
        .iter()
        .filter(|l| l.message.starts_with("init "))
        .map(|l| l.vm.clone())
        .collect();
    assert_eq!(inits, ["canary"], "no worker VM re-ran _initialize");
    assert_eq!(
        shared_text(&h, "configures"),
        "8",
        "canary + 2 workers + main, twice"
    );
}

/// `PluginHandleBase` is held by every stream context of the plugin (cpp-host
/// `ContextBase::plugin_handle_`), so the old root context is shut down only when its
/// last in-flight stream has ended; timers are per root context (Envoy
/// `Wasm::setTimerPeriod(root_context_id)`) and end with it.
#[test]
fn reload_retires_the_old_root_context_after_its_streams() {
    let mut h = harness_with(HarnessConfig {
        workers: 1,
        plugin: plugin("tick_ms=100"),
        ..Default::default()
    });
    let slow = h.submit(
        0,
        Request::get("/slow"),
        UpstreamReply::status(200).after_ms(500),
    );
    h.run_for(Duration::from_millis(50));
    let calls = h.lifecycle().len();
    assert_eq!(
        h.reload(probe(), plugin("tick_ms=100;v=2")).unwrap(),
        Reload::ReusedVms
    );
    let during = calls_since(&h, calls);
    assert!(
        !during.iter().any(|c| c == "worker-0 proxy_on_done 1"),
        "stream 2 still holds the old plugin: {during:?}"
    );
    assert!(during.contains(&"main proxy_on_done 1".to_string()));
    // New streams belong to the new root (3); the old one finishes on root 1.
    assert!(vm_state(&mut h, 0).starts_with("root=3 config=tick_ms=100;v=2 "));
    let rec = h.run_until_complete(slow).unwrap();
    assert_eq!(rec.outcome, Outcome::UpstreamOk);
    assert_eq!(rec.context_id, 2);
    let after = calls_since(&h, calls);
    let done = after.iter().position(|c| c == "worker-0 proxy_on_done 1");
    let delete = after.iter().position(|c| c == "worker-0 proxy_on_delete 1");
    assert!(done.is_some() && delete > done, "{after:?}");
    // One timer per live root context: 2 VMs × 10 ticks per second, the old roots'
    // timers are gone.
    let ticks = |h: &Harness| match h.metric("probe.ticks") {
        Some(MetricValue::Counter { value }) => value,
        other => panic!("{other:?}"),
    };
    let before = ticks(&h);
    h.run_for(Duration::from_millis(1000));
    assert_eq!(ticks(&h) - before, 20);
}

/// A different VM key (`makeVmKey`: code, vm_id or vm configuration changed) finds no
/// base or thread-local VM: a new base VM, canary, and fresh clones with root context
/// 1; the old plugin's root context is shut down.
#[test]
fn reload_with_changed_code_clones_fresh_vms() {
    let mut h = harness_with(HarnessConfig {
        workers: 1,
        plugin: plugin("a=1"),
        ..Default::default()
    });
    vm_state(&mut h, 0);
    // The same module with one more custom section: other bytes, same behaviour.
    let path = common::fixture_path("probe", "wasm32-wasip1");
    let mut bytes = std::fs::read(path).unwrap();
    bytes.extend_from_slice(&[0, 5, 4, b'b', b'u', b'i', b'l']);
    let rebuilt = WasmModule::from_bytes(&bytes, "probe-rebuilt").unwrap();
    let calls = h.lifecycle().len();
    assert_eq!(h.reload(&rebuilt, plugin("a=2")).unwrap(), Reload::FreshVms);
    assert_eq!(
        vm_state(&mut h, 0),
        "root=1 config=a=2 inits=1 vm_starts=1 configures=1 requests=1"
    );
    let after = calls_since(&h, calls);
    assert!(
        after.contains(&"worker-0 proxy_on_done 1".to_string()),
        "{after:?}"
    );
    assert!(after.contains(&"canary proxy_on_configure 1".to_string()));
    // Same code, other vm configuration: also a new VM key.
    let p = PluginConfig {
        vm_configuration: "vm=2".into(),
        ..plugin("a=2")
    };
    assert_eq!(h.reload(&rebuilt, p).unwrap(), Reload::FreshVms);
    assert_eq!(
        vm_state(&mut h, 0),
        "root=1 config=a=2 inits=1 vm_starts=1 configures=1 requests=1"
    );
    // A fresh VM cannot take over streams in flight.
    h.submit(
        0,
        Request::get("/slow"),
        UpstreamReply::status(200).after_ms(500),
    );
    h.run_for(Duration::from_millis(10));
    assert!(h.reload(probe(), plugin("a=3")).is_err());
    assert!(h.run_until_idle(Duration::from_secs(1)));
    assert_eq!(h.reload(probe(), plugin("a=3")).unwrap(), Reload::FreshVms);
}

/// cpp-host `createWasm` applies `WasmHandleBase::canary` for every plugin even when
/// the base VM is reused, cached per plugin key (`plugin_canary_cache_`); a rejected
/// config leaves the running one alone. The same plugin key on the same VM key finds
/// the existing thread-local plugin handle (`getOrCreateThreadLocalPlugin`): nothing
/// is called.
#[test]
fn reload_runs_the_canary_for_each_new_plugin_config() {
    let mut h = harness_with(HarnessConfig {
        workers: 1,
        plugin: plugin("a=1"),
        ..Default::default()
    });
    let canary_calls = |h: &Harness, from: usize| {
        calls_since(h, from)
            .iter()
            .filter(|c| c.starts_with("canary "))
            .count()
    };
    let calls = h.lifecycle().len();
    let e = h.reload(probe(), plugin("reject_configure=1")).unwrap_err();
    assert!(e.to_string().contains("rejected by the canary"), "{e}");
    assert_eq!(
        calls_since(&h, calls),
        [
            "canary proxy_on_context_create 1",
            "canary proxy_on_vm_start 1",
            "canary proxy_on_configure 1"
        ]
    );
    assert!(vm_state(&mut h, 0).starts_with("root=1 config=a=1 "));
    // The rejection is cached: no canary again.
    let calls = h.lifecycle().len();
    assert!(h.reload(probe(), plugin("reject_configure=1")).is_err());
    assert_eq!(canary_calls(&h, calls), 0);
    // A new config: canary, then a new root context (3) on the reused VM.
    let calls = h.lifecycle().len();
    assert_eq!(h.reload(probe(), plugin("a=2")).unwrap(), Reload::ReusedVms);
    assert_eq!(canary_calls(&h, calls), 3);
    assert!(vm_state(&mut h, 0).starts_with("root=3 config=a=2 "));
    // Back to the first config: its canary result is cached, the workers still get a
    // new root context (the old handle for it was released).
    let calls = h.lifecycle().len();
    assert_eq!(h.reload(probe(), plugin("a=1")).unwrap(), Reload::ReusedVms);
    assert_eq!(canary_calls(&h, calls), 0);
    assert!(vm_state(&mut h, 0).starts_with("root=5 config=a=1 "));
    // The same plugin again: nothing runs.
    let calls = h.lifecycle().len();
    assert_eq!(
        h.reload(probe(), plugin("a=1")).unwrap(),
        Reload::SamePlugin
    );
    assert_eq!(calls_since(&h, calls), Vec::<String>::new());
    assert!(vm_state(&mut h, 0).starts_with("root=5 config=a=1 "));
    // Any other field of the PluginConfig makes another plugin (Envoy's
    // `PluginKeyTest.ConfigDifferencesProduceDistinctKeys`): canary, new root context.
    let p = PluginConfig {
        failure_policy: FailurePolicy::FailOpen,
        ..plugin("a=1")
    };
    assert_eq!(h.reload(probe(), p).unwrap(), Reload::ReusedVms);
    let st = vm_state(&mut h, 0);
    assert!(
        st.starts_with("root=8 config=a=1 "),
        "a new root context: {st}"
    );
    let p = PluginConfig {
        failure_policy: FailurePolicy::FailOpen,
        allow_on_headers_stop_iteration: true,
        ..plugin("a=1")
    };
    assert_eq!(h.reload(probe(), p).unwrap(), Reload::ReusedVms);
}

/// Envoy `DownstreamFilterManager::sendLocalReply`: once non-100 response headers
/// went to the client, "Prior headers have already been sent" — the stream is reset
/// (LocalReset), nothing is replaced (the harness used to replace the response).
#[test]
fn a_local_reply_after_the_response_headers_were_sent_resets_the_stream() {
    let mut h = one();
    let r = h.request(
        0,
        Request::get("/probe/reply-in-body"),
        UpstreamReply::status(200).with_body("upstream body"),
    );
    assert_eq!(r.outcome, Outcome::ResetAfterHeaders);
    assert_eq!(
        r.response_status,
        Some(200),
        "the client saw the upstream's headers"
    );
    assert_ne!(r.response_flags & flags::LOCAL_RESET, 0);
}

/// A streamed response (`body_after_ms`): the filter sees the headers when they
/// arrive (its body buffer empty, no end of stream) and the body later, as Envoy's
/// codec hands frames on when they come.
#[test]
fn a_streamed_body_reaches_the_filter_after_its_headers() {
    let mut h = one();
    let t0 = h.now_ns();
    let r = h.request(
        0,
        Request::get("/probe/observe-stream"),
        UpstreamReply::status(200)
            .with_body("upstream body")
            .after_ms(100)
            .body_after_ms(500),
    );
    assert_eq!(r.outcome, Outcome::UpstreamOk, "{r:?}");
    assert_eq!(r.response_body, b"upstream body");
    assert_eq!((r.end_ns - t0) / 1_000_000, 600);
    let field = |line: &str, k: &str| -> String {
        let v = line
            .split(' ')
            .find_map(|f| f.strip_prefix(&format!("{k}=")));
        v.unwrap_or_else(|| panic!("{k} in {line}")).to_string()
    };
    let (hd, bd) = (
        obs(&h, "/probe/observe-stream", "stream-headers"),
        obs(&h, "/probe/observe-stream", "stream-body"),
    );
    assert_eq!(
        (field(&hd, "body"), field(&hd, "eos")),
        ("0".into(), "false".into()),
        "{hd}"
    );
    assert_eq!(
        (field(&bd, "body"), field(&bd, "eos")),
        ("13".into(), "true".into()),
        "{bd}"
    );
    let t = |l: &str| field(l, "t").parse::<u64>().unwrap();
    assert_eq!(t(&bd) - t(&hd), 500, "the body 500 ms after the headers");
}

/// Envoy `Router::Filter::onResponseTimeout`: the route timeout runs until the upstream
/// response is complete; once the headers went to the client its local reply resets
/// the stream (flag UT).
#[test]
fn the_route_timeout_cuts_a_streamed_body_short() {
    let mut h = harness_with(HarnessConfig {
        workers: 1,
        routes: vec![RouteConfig {
            timeout_ms: 300,
            ..Default::default()
        }],
        ..Default::default()
    });
    let t0 = h.now_ns();
    let r = h.request(
        0,
        Request::get("/probe/body"),
        UpstreamReply::status(200)
            .with_body("upstream body")
            .after_ms(100)
            .body_after_ms(500),
    );
    assert_eq!(r.outcome, Outcome::ResetAfterHeaders, "{r:?}");
    assert_eq!(r.response_status, Some(200));
    assert_ne!(r.response_flags & flags::UPSTREAM_REQUEST_TIMEOUT, 0);
    assert_eq!((r.end_ns - t0) / 1_000_000, 300);
}
