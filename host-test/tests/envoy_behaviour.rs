//! Fixture-based tests: what the host observed when the probe module ran.

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use fusewire_host_test::clock::VIRTUAL_EPOCH_NS;
use fusewire_host_test::*;

fn probe() -> &'static WasmModule {
    static M: OnceLock<WasmModule> = OnceLock::new();
    M.get_or_init(|| common::fixture("probe"))
}

fn harness(workers: usize, configuration: &str) -> Harness {
    harness_with(HarnessConfig {
        workers,
        plugin: PluginConfig {
            configuration: configuration.into(),
            ..Default::default()
        },
        ..Default::default()
    })
}

fn harness_with(cfg: HarnessConfig) -> Harness {
    Harness::new(probe(), cfg).expect("harness")
}

fn get(h: &mut Harness, worker: usize, path: &str) -> StreamRecord {
    h.request(worker, Request::get(path), UpstreamReply::status(200))
}

fn shared_text(h: &Harness, key: &str) -> String {
    String::from_utf8_lossy(&h.shared_data(key).expect(key).0).into_owned()
}

#[test]
fn header_round_trip_lowercases_and_edits() {
    let mut h = harness(2, "");
    let r = h.request(
        1,
        Request::get("/x")
            .header("X-In", "hi")
            .header("x-remove-me", "1")
            .header("X-Replace", "a")
            .header("x-replace", "b"),
        UpstreamReply::status(200).with_header("X-Up", "1"),
    );
    let up = r.upstream_request_headers.clone().expect("sent upstream");
    assert_eq!(up.get_str("x-echo").as_deref(), Some("hi"));
    assert_eq!(up.get_str("x-in").as_deref(), Some("hi"));
    assert!(up
        .pairs()
        .iter()
        .all(|(k, _)| k.chars().all(|c| !c.is_ascii_uppercase())));
    assert_eq!(up.get("x-remove-me"), None);
    assert_eq!(
        up.pairs().iter().filter(|(k, _)| k == "x-replace").count(),
        1
    );
    assert_eq!(up.get_str("x-replace").as_deref(), Some("replaced"));
    assert_eq!(
        up.get_str("x-probe-ctx").as_deref(),
        Some("2"),
        "first stream context id is 2"
    );
    assert_eq!(up.get_str(":path").as_deref(), Some("/x"));
    assert_eq!(r.response_header("x-probe-resp").as_deref(), Some("200"));
    assert_eq!(r.response_header("x-probe-req-path").as_deref(), Some("/x"));
    assert_eq!(r.response_header("x-up").as_deref(), Some("1"));
    assert_eq!(r.outcome, Outcome::UpstreamOk);
}

/// Envoy `Context::getHeaderMapPairs` (source/extensions/common/wasm/context.cc): a map
/// that does not exist in the phase reads as OK with no pairs (value reads of it are
/// BAD_ARGUMENT: see envoy_fidelity.rs).
#[test]
fn maps_missing_in_phase_read_as_empty_pairs() {
    let mut h = harness(1, "");
    let r = get(&mut h, 0, "/probe/maps");
    assert_eq!(
        r.body_text(),
        "response_headers=0 call_headers=0 request_headers=0"
    );
}

#[test]
fn misused_calls_return_statuses_not_traps() {
    let mut h = harness(1, "");
    let r = get(&mut h, 0, "/probe/misuse");
    assert_eq!(r.body_text(), "log_oob=6 log_level=2 pairs_oob=6 key_oob=6");
    assert!(h.worker_alive(0));
}

#[test]
fn cas_mismatch_changes_nothing() {
    let mut h = harness(1, "");
    let r = get(&mut h, 0, "/probe/cas");
    let body = r.body_text();
    assert!(
        body.starts_with("mismatch=Err(CasMismatch) after_mismatch=a ok=Ok(()) value=c"),
        "{body}"
    );
}

#[test]
fn global_cas_counter_starts_at_1_and_is_shared_by_all_keys() {
    let mut h = harness(2, "");
    // 4 configures (canary, 2 workers, main) each wrote "configures" once: tokens 1..=4.
    assert_eq!(h.shared_data("configures").unwrap().1, 4);
    let r = get(&mut h, 0, "/probe/cas");
    // cas-k: insert → 5, failed CAS takes no token, update → 6.
    assert!(r.body_text().ends_with("cas=5 cas2=6"), "{}", r.body_text());
    // The probe's on_log then wrote "log-/probe/cas" → 7; the next write anywhere → 8.
    assert_eq!(h.shared_data("log-/probe/cas").unwrap().1, 7);
    assert_eq!(h.set_shared_data("other", Some(b"v"), 0), Status::Ok);
    assert_eq!(h.shared_data("other").unwrap().1, 8);
    // Wrap-around skips 0.
    h.process().shared.set_last_cas(u32::MAX);
    assert_eq!(h.set_shared_data("other", Some(b"w"), 0), Status::Ok);
    assert_eq!(h.shared_data("other").unwrap().1, 1);
}

#[test]
fn empty_value_is_stored_absent_key_is_not_found() {
    let mut h = harness(1, "");
    let r = get(&mut h, 0, "/probe/empty");
    assert_eq!(
        r.body_text(),
        "set=Ok(()) value=None cas_some=true absent=None/None"
    );
    assert_eq!(h.shared_data("empty-k").map(|v| v.0), Some(vec![]));
}

#[test]
fn absent_key_with_cas_envoy_inserts_kong_refuses() {
    let mut h = harness(1, "");
    assert_eq!(
        get(&mut h, 0, "/probe/absent-cas").body_text(),
        "set=Ok(()) stored=true"
    );
    let mut k = harness_with(HarnessConfig {
        workers: 1,
        cas_mode: CasMode::Kong,
        ..Default::default()
    });
    assert_eq!(
        get(&mut k, 0, "/probe/absent-cas").body_text(),
        "set=Err(CasMismatch) stored=false"
    );
}

#[test]
fn on_configure_runs_n_plus_2_times_with_root_context_1() {
    let h = harness(3, "a=1");
    let calls = h.lifecycle();
    let configures: Vec<_> = calls
        .iter()
        .filter(|c| c.callback == "proxy_on_configure")
        .collect();
    assert_eq!(configures.len(), 5);
    assert!(configures
        .iter()
        .all(|c| c.context_id == 1 && c.result == Some(1)));
    let vms: Vec<&str> = configures.iter().map(|c| c.vm.as_str()).collect();
    assert_eq!(vms, ["canary", "worker-0", "worker-1", "worker-2", "main"]);
    assert!(calls
        .iter()
        .filter(|c| c.callback == "proxy_on_vm_start")
        .all(|c| c.context_id == 1));
    assert!(
        !calls.iter().any(|c| c.vm == "base"),
        "the base VM only runs _initialize"
    );
    assert_eq!(shared_text(&h, "configures"), "5");
    let logs = h.logs();
    assert!(logs
        .iter()
        .any(|l| l.message == "on_configure config=Some(\"a=1\")"));
}

#[test]
fn plugin_config_exists_only_during_on_configure() {
    let mut h = harness(1, "x=1");
    assert_eq!(
        get(&mut h, 0, "/probe/config").body_text(),
        "config=Ok(None)"
    );
}

#[test]
fn canary_rejection_and_trap_fail_the_config() {
    let e = Harness::new(
        probe(),
        HarnessConfig {
            plugin: PluginConfig {
                configuration: "reject_configure=1".into(),
                ..Default::default()
            },
            ..Default::default()
        },
    );
    assert!(format!("{:#}", e.err().expect("rejected")).contains("on_configure returned false"));
    let e = Harness::new(
        probe(),
        HarnessConfig {
            plugin: PluginConfig {
                configuration: "trap_configure=1".into(),
                ..Default::default()
            },
            ..Default::default()
        },
    );
    assert!(format!("{:#}", e.err().expect("trapped")).contains("canary"));
}

#[test]
fn on_log_runs_before_on_done() {
    let mut h = harness(1, "");
    let r = get(&mut h, 0, "/x");
    assert_eq!(
        r.callbacks,
        [
            "on_context_create",
            "on_request_headers",
            "on_response_headers",
            "on_log",
            "on_done",
            "on_delete"
        ]
    );
    let logs: Vec<String> = h.logs().into_iter().map(|l| l.message).collect();
    let log_at = logs.iter().position(|m| m == "on_log 2").expect("on_log");
    let done_at = logs.iter().position(|m| m == "on_done 2").expect("on_done");
    assert!(log_at < done_at);
}

#[test]
fn a_vm_memory_stops_growing_at_its_cap() {
    // Envoy caps a VM's memory at 1 GiB (proxy-wasm-cpp-host limits.h); past the cap
    // `memory.grow` fails and the guest sees out-of-memory.
    let mut h = harness(1, "");
    assert_eq!(get(&mut h, 0, "/probe/alloc-200mb").body_text(), "alloc=ok");
    let mut h = harness_with(HarnessConfig {
        workers: 1,
        max_vm_memory_bytes: 128 << 20,
        ..Default::default()
    });
    assert_eq!(
        get(&mut h, 0, "/probe/alloc-200mb").body_text(),
        "alloc=failed"
    );
    assert!(h.worker_alive(0), "a failed try_reserve is not a trap");
}

#[test]
fn a_local_reply_with_malformed_header_pairs_is_sent_without_them() {
    // cpp-host's `send_local_response` reads bad pairs as none (`PairsUtil::toPairs`)
    // and returns OK: the reply goes out.
    let mut h = harness(1, "");
    let r = get(&mut h, 0, "/probe/bad-pairs");
    assert_eq!(
        (r.outcome, r.response_status, r.body_text().as_str()),
        (Outcome::LocalReply, Some(418), "still sent")
    );
    assert_eq!(r.code_details, "bad_pairs");
    let logs: Vec<String> = h.logs().into_iter().map(|l| l.message).collect();
    assert!(logs.iter().any(|l| l == "bad-pairs status=0"), "{logs:?}");
}

#[test]
fn local_reply_travels_through_the_response_phase() {
    let mut h = harness(1, "");
    let r = get(&mut h, 0, "/probe/local");
    assert_eq!(r.outcome, Outcome::LocalReply);
    assert!(
        !r.sent_upstream,
        "Continue after send_local_response is ignored"
    );
    assert_eq!(r.response_status, Some(429));
    assert_eq!(r.response_header("x-fusewire").as_deref(), Some("rejected"));
    assert_eq!(
        r.response_header("x-probe-resp").as_deref(),
        Some("429"),
        "filter saw its own reply"
    );
    assert_eq!(r.body_text(), "rejected");
    assert_eq!(
        r.local_reply.as_ref().map(|l| l.source),
        Some(LocalReplySource::Filter)
    );
    assert!(r.callbacks.contains(&"on_response_headers".to_string()));
    assert!(r.callbacks.contains(&"on_response_body".to_string()));
}

#[test]
fn grpc_local_reply_is_trailers_only_for_grpc_requests() {
    let mut h = harness(1, "");
    let r = h.request(
        0,
        Request::get("/probe/grpc-reject")
            .method("POST")
            .header("content-type", "application/grpc"),
        UpstreamReply::status(200),
    );
    assert_eq!(r.response_status, Some(200));
    assert_eq!(r.response_header("grpc-status").as_deref(), Some("14"));
    assert_eq!(
        r.response_header("grpc-message").as_deref(),
        Some("rejected")
    );
    assert_eq!(
        r.response_header("content-type").as_deref(),
        Some("application/grpc")
    );
    assert_eq!(report::classify(&r), report::Class::RejectedLocally);
    let plain = get(&mut h, 0, "/probe/grpc-reject");
    assert_eq!(plain.response_header("grpc-status"), None);
    assert_eq!(plain.body_text(), "rejected");
}

#[test]
fn metrics_follow_envoy_rules() {
    let mut h = harness(2, "");
    let body = get(&mut h, 0, "/probe/metrics").body_text();
    assert_eq!(
        body,
        "inc0=Err(BadArgument) incneg=Err(BadArgument) inc2=Ok(()) rec3=Ok(()) counter=Ok(5) \
         gneg=Ok(()) gauge=Ok(6) hrec=Ok(()) hget=Err(BadArgument) unknown=Err(NotFound) \
         gwrap=Ok(18446744073709551612)",
        "gauges are u64 and wrap below 0 (Envoy Gauge::sub)"
    );
    // The stat behind a name is process-wide: worker 1 adds to the same counter.
    get(&mut h, 1, "/probe/metrics");
    assert_eq!(
        h.metric("probe.counter"),
        Some(MetricValue::Counter { value: 10 })
    );
    assert_eq!(h.metric("probe.requests").map(|m| m.scalar()), Some(2));
    let stats = h.stats_text();
    assert!(stats.contains("wasmcustom.probe.counter: 10\n"), "{stats}");
    let prom = h.prometheus_text();
    assert!(
        prom.contains("# TYPE probe_counter counter\nprobe_counter{} 10\n"),
        "{prom}"
    );
    assert!(prom.contains("probe_histogram_count{} 2\n"), "{prom}");
}

#[test]
fn trap_under_fail_closed_answers_503_and_keeps_other_workers() {
    let mut h = harness(2, "");
    let r = get(&mut h, 0, "/probe/trap");
    assert_eq!(r.outcome, Outcome::FailClosed);
    assert_eq!(r.response_status, Some(503));
    assert_eq!(r.code_details, "wasm_fail_stream");
    assert!(!h.worker_alive(0));
    let r = get(&mut h, 0, "/x");
    assert_eq!(
        (r.outcome, r.response_status),
        (Outcome::FailClosed, Some(503))
    );
    assert!(r.callbacks.is_empty() && !r.sent_upstream);
    assert!(h.worker_alive(1));
    assert_eq!(get(&mut h, 1, "/x").outcome, Outcome::UpstreamOk);
    assert!(h
        .logs()
        .iter()
        .any(|l| l.level == 5 && l.message.contains("wasm VM failed")));
}

#[test]
fn trap_under_fail_open_skips_the_filter() {
    let mut h = harness_with(HarnessConfig {
        workers: 1,
        plugin: PluginConfig {
            failure_policy: FailurePolicy::FailOpen,
            ..Default::default()
        },
        ..Default::default()
    });
    // The trapping stream itself fails closed (its context is in the failed VM) ...
    let r = get(&mut h, 0, "/probe/trap");
    assert_eq!(
        (r.outcome, r.response_status),
        (Outcome::FailClosed, Some(503))
    );
    assert!(!r.sent_upstream);
    // ... new streams skip the filter.
    let r = get(&mut h, 0, "/x");
    assert_eq!(r.outcome, Outcome::UpstreamOk);
    assert!(r.callbacks.is_empty());
    assert_eq!(
        r.upstream_request_headers
            .as_ref()
            .unwrap()
            .get("x-probe-ctx"),
        None
    );
    assert_eq!(r.response_header("x-probe-resp"), None);
}

/// cpp-host `CHECK_FAIL` after the VM call (src/context.cc): the stream that trapped
/// fails closed unless the legacy `fail_open` bool is set — `failure_policy: FAIL_OPEN`
/// does not change that.
#[test]
fn trap_in_the_response_phase_follows_the_policy() {
    for (policy, legacy, status, outcome) in [
        (FailurePolicy::FailOpen, true, 200, Outcome::UpstreamOk),
        (FailurePolicy::FailOpen, false, 503, Outcome::FailClosed),
        (FailurePolicy::FailClosed, false, 503, Outcome::FailClosed),
    ] {
        let mut h = harness_with(HarnessConfig {
            workers: 1,
            plugin: PluginConfig {
                failure_policy: policy,
                fail_open: legacy,
                ..Default::default()
            },
            ..Default::default()
        });
        let r = get(&mut h, 0, "/probe/trap-response");
        assert_eq!(
            (r.response_status, r.outcome),
            (Some(status), outcome),
            "{policy:?}"
        );
        assert!(r.sent_upstream, "{policy:?}: forwarded exactly once");
        assert_eq!(r.response_header("x-probe-resp"), None, "{policy:?}");
        assert!(!h.worker_alive(0));
        assert_eq!(h.take_records().len(), 1, "{policy:?}: one completion");
    }
}

#[test]
fn trap_under_fail_reload_recreates_the_vm_and_keeps_shared_data() {
    let mut h = harness_with(HarnessConfig {
        workers: 1,
        plugin: PluginConfig {
            failure_policy: FailurePolicy::FailReload,
            reload_backoff_ms: 1000,
            ..Default::default()
        },
        ..Default::default()
    });
    h.set_shared_data("keep", Some(b"me"), 0);
    assert_eq!(get(&mut h, 0, "/probe/trap").outcome, Outcome::FailClosed);
    // Within the backoff (counted from the load at t=0): fail closed.
    assert_eq!(get(&mut h, 0, "/x").outcome, Outcome::FailClosed);
    // The jittered backoff is in [1 s, 1.5 s).
    h.run_for(Duration::from_millis(1500));
    let r = get(&mut h, 0, "/x");
    assert_eq!(r.outcome, Outcome::UpstreamOk);
    assert!(h.worker_alive(0));
    assert_eq!(
        r.upstream_request_headers
            .unwrap()
            .get_str("x-probe-ctx")
            .as_deref(),
        Some("2"),
        "fresh VM: root context 1, first stream 2"
    );
    assert_eq!(shared_text(&h, "keep"), "me");
    assert_eq!(
        shared_text(&h, "configures"),
        "4",
        "canary + worker + main + reload"
    );
}

#[test]
fn config_reload_with_same_vm_id_keeps_shared_data() {
    let h1 = harness(2, "");
    let process = h1.process().clone();
    let h2 = Harness::with_process(
        process,
        probe(),
        HarnessConfig {
            workers: 2,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(shared_text(&h2, "configures"), "8");
    let h3 = Harness::with_process(
        h1.process().clone(),
        probe(),
        HarnessConfig {
            workers: 2,
            plugin: PluginConfig {
                vm_id: "other".into(),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(shared_text(&h3, "configures"), "4");
}

#[test]
fn ticks_fire_per_vm_on_schedule_and_canary_ticks_never_fire() {
    let mut h = harness(2, "tick_ms=100");
    h.run_for(Duration::from_millis(1000));
    // worker-0, worker-1 and main: 10 ticks each in 1 s.
    assert_eq!(h.metric("probe.ticks").map(|m| m.scalar()), Some(30));
}

#[test]
fn paused_stream_resumed_from_tick_via_effective_context() {
    let mut h = harness(1, "tick_ms=100");
    let id = h.submit(
        0,
        Request::get("/probe/pause"),
        UpstreamReply::status(200).after_ms(10),
    );
    h.run_for(Duration::from_millis(500));
    let r = h.record(id).expect("finished").clone();
    assert_eq!(r.outcome, Outcome::UpstreamOk);
    assert_eq!(
        r.latency_ns(),
        110_000_000,
        "resumed at the 100 ms tick, then 10 ms upstream"
    );
}

#[test]
fn local_reply_from_tick_while_waiting() {
    let mut h = harness(1, "tick_ms=50");
    let id = h.submit(
        0,
        Request::get("/probe/pause-timeout"),
        UpstreamReply::status(200),
    );
    h.run_for(Duration::from_millis(200));
    let r = h.record(id).expect("finished").clone();
    assert_eq!(r.outcome, Outcome::LocalReply);
    assert_eq!(r.response_status, Some(504));
    assert_eq!(r.response_header("x-fusewire").as_deref(), Some("timeout"));
    assert_eq!(r.response_header("x-probe-resp").as_deref(), Some("504"));
    assert_eq!(r.latency_ns(), 50_000_000);
}

#[test]
fn local_reply_from_tick_cancels_the_upstream_request() {
    let mut h = harness(1, "tick_ms=50");
    let id = h.submit(
        0,
        Request::get("/probe/watch"),
        UpstreamReply::status(200).after_ms(1000),
    );
    assert!(h.run_until_idle(Duration::from_secs(5)));
    let r = h.record(id).expect("finished").clone();
    assert!(r.sent_upstream);
    assert_eq!(r.upstream_status, None, "the upstream answer never arrived");
    assert_eq!(
        (r.outcome, r.response_status),
        (Outcome::LocalReply, Some(504))
    );
    assert_eq!(r.response_header("x-probe-resp").as_deref(), Some("504"));
    assert_eq!(r.latency_ns(), 50_000_000);
    h.run_for(Duration::from_secs(2));
    assert_eq!(
        h.take_records().len(),
        1,
        "no second completion when the upstream reply is due"
    );
}

#[test]
fn http_call_to_simulated_cluster() {
    let mut h = harness_with(HarnessConfig {
        workers: 1,
        clusters: vec![ClusterConfig {
            http_call_reply: UpstreamReply::status(201)
                .after_ms(5)
                .with_body("callout-body"),
            ..Default::default()
        }],
        ..Default::default()
    });
    let r = get(&mut h, 0, "/probe/callout");
    assert_eq!(r.response_status, Some(200));
    assert_eq!(
        r.response_header("x-callout-status").as_deref(),
        Some("201")
    );
    assert_eq!(r.body_text(), "callout-body");
    assert_eq!(r.latency_ns(), 5_000_000);
    // No trailers: the map does not exist (Envoy `getConstMap` → null → BAD_ARGUMENT 2).
    assert_eq!(
        r.response_header("x-callout-trailer").as_deref(),
        Some("!2")
    );
    let r = get(&mut h, 0, "/probe/callout-bad");
    assert_eq!(
        r.body_text(),
        "unknown_cluster=Err(BadArgument) missing_headers=Err(BadArgument)"
    );
}

/// Envoy's async client: a callout that times out is answered by its router with 504
/// "upstream request timeout", delivered as a normal response
/// (source/common/router/router.cc `onUpstreamTimeoutAbort`).
#[test]
fn http_call_timeout_arrives_as_a_504_response() {
    let mut h = harness_with(HarnessConfig {
        workers: 1,
        clusters: vec![ClusterConfig {
            http_call_reply: UpstreamReply::hang(),
            ..Default::default()
        }],
        ..Default::default()
    });
    let r = get(&mut h, 0, "/probe/callout");
    assert_eq!(
        r.response_header("x-callout-status").as_deref(),
        Some("504")
    );
    assert_eq!(r.body_text(), "upstream request timeout");
    assert_eq!(r.latency_ns(), 1_000_000_000);
    assert_eq!(
        r.response_header("x-callout-trailer").as_deref(),
        Some("!2")
    );
}

/// A callout answered with trailers: the trailer map exists and serves them.
#[test]
fn http_call_trailers_are_served_when_the_response_had_them() {
    let mut h = harness_with(HarnessConfig {
        workers: 1,
        clusters: vec![ClusterConfig {
            http_call_reply: UpstreamReply::status(200).with_trailer("x-t", "7"),
            ..Default::default()
        }],
        ..Default::default()
    });
    let r = get(&mut h, 0, "/probe/callout");
    assert_eq!(r.response_header("x-callout-trailer").as_deref(), Some("7"));
}

#[test]
fn properties_use_envoy_attribute_names() {
    let mut h = harness(1, "");
    let body = get(&mut h, 0, "/probe/props").body_text();
    // The default route is unnamed, as Envoy's routes are unless given a name: its
    // name is "" with OK, handed back as pointer 0 / length 0, which the SDK reads as
    // no value.
    assert_eq!(
        body,
        "cluster=backend route=<none> plugin=fusewire root_id=fusewire vm_id=fusewire-v1 path=/probe/props \
         method=GET code=<none> flat=<none> bare_cluster=<none> node=fusewire-host-test node_bytes=40 top_node=<none>"
    );
    get(&mut h, 0, "/ok");
    assert_eq!(
        shared_text(&h, "log-/ok"),
        "code=200 flags=0 details=via_upstream duration_set=true"
    );
}

#[test]
fn upstream_reset_becomes_router_503_through_the_filter() {
    let mut h = harness(1, "");
    let r = h.request(
        0,
        Request::get("/reset"),
        UpstreamReply::reset().after_ms(3),
    );
    assert_eq!(
        (r.outcome, r.response_status),
        (Outcome::UpstreamFailed, Some(503))
    );
    assert_eq!(r.response_header("x-probe-resp").as_deref(), Some("503"));
    assert_eq!(
        r.local_reply.as_ref().map(|l| l.source),
        Some(LocalReplySource::Router)
    );
    assert_eq!(r.response_flags, flags::UPSTREAM_REMOTE_RESET);
    assert_eq!(
        shared_text(&h, "log-/reset"),
        "code=503 flags=16 details=upstream_reset_before_response_started{remote_reset} duration_set=true"
    );
}

#[test]
fn every_reset_reason_has_envoys_flag_and_details() {
    let mut h = harness(1, "");
    for (reason, flag) in [
        (ResetReason::RemoteReset, flags::UPSTREAM_REMOTE_RESET),
        (
            ResetReason::ConnectionFailure,
            flags::UPSTREAM_CONNECTION_FAILURE,
        ),
        (
            ResetReason::ConnectionTermination,
            flags::UPSTREAM_CONNECTION_TERMINATION,
        ),
        (ResetReason::Overflow, flags::UPSTREAM_OVERFLOW),
        (ResetReason::NoHealthyUpstream, flags::NO_HEALTHY_UPSTREAM),
    ] {
        let r = h.request(0, Request::get("/r"), UpstreamReply::reset_with(reason));
        assert_eq!(
            (r.response_status, r.response_flags),
            (Some(503), flag),
            "{reason:?}"
        );
        assert_eq!(r.code_details, reason.envoy().1);
        assert_eq!(
            r.response_header("x-probe-resp").as_deref(),
            Some("503"),
            "through the filter"
        );
        let logged = shared_text(&h, "log-/r");
        assert!(
            logged.starts_with(&format!(
                "code=503 flags={flag} details={}",
                reason.envoy().1
            )),
            "{logged}"
        );
    }
}

#[test]
fn no_route_is_a_router_404() {
    let mut h = harness_with(HarnessConfig {
        workers: 1,
        routes: vec![RouteConfig {
            prefix: "/api".into(),
            ..Default::default()
        }],
        ..Default::default()
    });
    let r = get(&mut h, 0, "/other");
    assert_eq!(
        (r.response_status, r.response_flags),
        (Some(404), flags::NO_ROUTE_FOUND)
    );
    assert!(!r.sent_upstream);
    assert_eq!(r.code_details, "route_not_found");
    assert_eq!(r.response_header("x-probe-resp").as_deref(), Some("404"));
    // No route: `xds.route_name` and `xds.cluster_name` are NOT_FOUND, not empty.
    let r = get(&mut h, 0, "/probe/props");
    assert!(
        r.body_text().starts_with("cluster=<none> route=<none> "),
        "{}",
        r.body_text()
    );
}

#[test]
fn a_route_to_an_unknown_cluster_has_no_cluster_name() {
    // Envoy keeps no cluster info for a route whose cluster does not exist
    // (`ActiveStream::refreshCachedRoute`), so `xds.cluster_name` is NOT_FOUND while
    // `xds.route_name` is the route's; the router then answers 503 NC.
    let mut h = harness_with(HarnessConfig {
        workers: 1,
        routes: vec![RouteConfig {
            name: "ghost".into(),
            cluster: "missing".into(),
            ..Default::default()
        }],
        ..Default::default()
    });
    let r = get(&mut h, 0, "/probe/props");
    assert!(
        r.body_text().starts_with("cluster=<none> route=ghost "),
        "{}",
        r.body_text()
    );
    let r = get(&mut h, 0, "/other");
    assert_eq!(
        (r.response_status, r.response_flags),
        (Some(503), flags::NO_CLUSTER_FOUND)
    );
}

#[test]
fn route_timeout_answers_504() {
    let mut h = harness_with(HarnessConfig {
        workers: 1,
        routes: vec![RouteConfig {
            timeout_ms: 100,
            ..Default::default()
        }],
        ..Default::default()
    });
    let r = h.request(
        0,
        Request::get("/slow"),
        UpstreamReply::status(200).after_ms(500),
    );
    assert_eq!(
        (r.response_status, r.response_flags),
        (Some(504), flags::UPSTREAM_REQUEST_TIMEOUT)
    );
    assert_eq!(r.latency_ns(), 100_000_000);
    let r = h.request(0, Request::get("/hang"), UpstreamReply::hang());
    assert_eq!(r.code_details, "upstream_response_timeout");
}

#[test]
fn client_reset_ends_the_stream_without_a_response() {
    let mut h = harness_with(HarnessConfig {
        workers: 1,
        routes: vec![RouteConfig {
            timeout_ms: 0,
            ..Default::default()
        }],
        ..Default::default()
    });
    let r = h.request(
        0,
        Request::get("/hang").client_timeout_ms(50),
        UpstreamReply::hang(),
    );
    assert_eq!(r.outcome, Outcome::DownstreamReset);
    assert_eq!(r.response_status, None);
    assert_eq!(
        r.callbacks,
        [
            "on_context_create",
            "on_request_headers",
            "on_log",
            "on_done",
            "on_delete"
        ]
    );
    assert_eq!(r.response_flags, flags::DOWNSTREAM_CONNECTION_TERMINATION);
    // An HTTP/2 client resets its stream instead: Envoy's connection manager sets DR.
    let r = h.request(
        0,
        Request::get("/hang").http2().client_timeout_ms(50),
        UpstreamReply::hang(),
    );
    assert_eq!(r.outcome, Outcome::DownstreamReset);
    assert_eq!(r.response_flags, flags::DOWNSTREAM_REMOTE_RESET);
}

#[test]
fn close_stream_resets_with_wasm_close_stream() {
    let mut h = harness(1, "");
    let r = get(&mut h, 0, "/probe/close");
    assert_eq!(
        (r.outcome, r.code_details.as_str()),
        (Outcome::ClosedByFilter, "wasm_close_stream")
    );
    assert!(!r.sent_upstream);
}

#[test]
fn bodies_can_be_read_and_replaced() {
    let mut h = harness(1, "");
    let r = h.request(
        0,
        Request::get("/probe/body").method("POST").body(b"abc"),
        UpstreamReply::status(200).with_body("hello"),
    );
    assert_eq!(r.body_text(), "HELLO");
    assert!(r.callbacks.contains(&"on_request_body".to_string()));
    // Envoy `Buffer::copyFrom(0, 3, "XY")`: drain 3 bytes, prepend (the SDK's
    // `set_http_response_body(0, 3, ..)` trapped on BAD_ARGUMENT here).
    let r = h.request(
        0,
        Request::get("/probe/body-head"),
        UpstreamReply::status(200).with_body("abcdef"),
    );
    assert_eq!(r.body_text(), "XYdef");
}

/// Envoy `Context::getMap`: in the response body callback at the stream's end, a
/// response without trailers gets a trailer map (`addEncodedTrailers`) that follows
/// the body to the client; in an earlier body chunk there is none (BAD_ARGUMENT).
#[test]
fn trailers_can_be_added_at_the_end_of_the_body() {
    let mut h = harness(1, "");
    let r = h.request(
        0,
        Request::get("/probe/add-trailer"),
        UpstreamReply::status(200).with_body("abc"),
    );
    assert!(h
        .logs()
        .iter()
        .any(|l| l.message == "add-trailer eos=true status=0"));
    assert_eq!(
        r.response_trailers
            .as_ref()
            .and_then(|t| t.get_str("x-added"))
            .as_deref(),
        Some("end")
    );
}

/// cpp-host `set_header_map_pairs` decodes with `PairsUtil::toPairs`, which gives no
/// pairs for a malformed or oversized map, and sets that: the map is emptied and the
/// call is OK (the harness answered BAD_ARGUMENT and left the map, on which the SDK
/// traps).
#[test]
fn malformed_pairs_set_an_empty_map() {
    let mut h = harness(1, "");
    let r = h.request(
        0,
        Request::get("/probe/bad-trailer-pairs"),
        UpstreamReply::status(200)
            .with_body("abc")
            .with_trailer("x-a", "1"),
    );
    assert!(h
        .logs()
        .iter()
        .any(|l| l.message == "bad-trailer-pairs status=0"));
    assert_eq!(r.response_trailers.map(|t| t.is_empty()), Some(true));
}

/// A gRPC failure arrives as a 200 with a `grpc-status`: one that Envoy maps to a 5xx
/// (`grpcToHttpStatus`) is an upstream failure in records and reports; the caller's
/// mistakes (NOT_FOUND) are not (found by review: every gRPC answer was upstream_ok).
#[test]
fn grpc_failures_are_upstream_failures() {
    let mut h = harness(1, "");
    let r = h.request(0, Request::grpc("/pkg.Svc/Call"), UpstreamReply::grpc(14));
    assert_eq!(
        (r.upstream_status, r.upstream_grpc_status, r.outcome),
        (Some(200), Some(14), Outcome::UpstreamFailed)
    );
    let r = h.request(0, Request::grpc("/pkg.Svc/Call"), UpstreamReply::grpc(5));
    assert_eq!(r.outcome, Outcome::UpstreamOk);
    let r = h.request(0, Request::grpc("/pkg.Svc/Call"), UpstreamReply::grpc(0));
    assert_eq!(r.outcome, Outcome::UpstreamOk);
}

#[test]
fn shared_queue_notifies_the_registering_vm() {
    let mut h = harness(2, "");
    get(&mut h, 0, "/probe/enqueue");
    get(&mut h, 1, "/probe/enqueue");
    // Notifications are asynchronous (posted to the owner's thread).
    assert_eq!(h.metric("probe.queue_msgs").map(|m| m.scalar()), Some(1));
    h.run_for(Duration::from_millis(1));
    assert_eq!(h.metric("probe.queue_msgs").map(|m| m.scalar()), Some(2));
    // No vm_id: the caller's own VM id (cpp-host `lookupSharedQueue`).
    get(&mut h, 1, "/probe/enqueue-own");
    h.run_for(Duration::from_millis(1));
    assert_eq!(h.metric("probe.queue_msgs").map(|m| m.scalar()), Some(3));
}

#[test]
fn virtual_time_is_what_the_guest_sees() {
    let mut h = harness(1, "");
    h.run_for(Duration::from_millis(1234));
    let body = get(&mut h, 0, "/probe/time").body_text();
    assert_eq!(body, format!("time={}", VIRTUAL_EPOCH_NS + 1_234_000_000));
}

#[test]
fn wasm32_unknown_unknown_module_loads_and_runs() {
    let m = WasmModule::from_file(common::fixture_path("noop", "wasm32-unknown-unknown")).unwrap();
    let mut h = Harness::new(
        &m,
        HarnessConfig {
            workers: 2,
            ..Default::default()
        },
    )
    .unwrap();
    let r = h.request(1, Request::get("/x"), UpstreamReply::status(204));
    assert_eq!(
        (r.outcome, r.response_status),
        (Outcome::UpstreamOk, Some(204))
    );
}

#[test]
fn non_proxy_wasm_module_is_refused() {
    let e = WasmModule::from_bytes(b"\0asm\x01\0\0\0", "empty")
        .err()
        .expect("refused");
    assert!(
        e.to_string().contains("not a proxy-wasm ABI 0.2.1 module"),
        "{e}"
    );
}

/// Envoy provides only proxy-wasm-cpp-host's WASI subset (`FOR_ALL_WASI_FUNCTIONS`):
/// a module importing another WASI function (Rust's `std::thread::sleep` imports
/// `poll_oneoff`) fails to load (found by review: the harness provided four more).
#[test]
fn a_module_importing_wasi_outside_envoys_subset_is_refused() {
    for name in [
        "poll_oneoff",
        "sched_yield",
        "clock_res_get",
        "fd_fdstat_set_flags",
    ] {
        let module = b"wasi_snapshot_preview1";
        let mut imports = vec![1, module.len() as u8];
        imports.extend_from_slice(module);
        imports.push(name.len() as u8);
        imports.extend_from_slice(name.as_bytes());
        imports.extend_from_slice(&[0, 0]); // a function of type 0
        let mut bytes = b"\0asm\x01\0\0\0".to_vec();
        bytes.extend_from_slice(&[1, 4, 1, 0x60, 0, 0]); // type 0: () -> ()
        bytes.extend_from_slice(&[2, imports.len() as u8]);
        bytes.extend_from_slice(&imports);
        // Function 1 of type 0, exported as the ABI marker, with an empty body.
        let abi = b"proxy_abi_version_0_2_1";
        bytes.extend_from_slice(&[3, 2, 1, 0, 7, abi.len() as u8 + 4, 1, abi.len() as u8]);
        bytes.extend_from_slice(abi);
        bytes.extend_from_slice(&[0, 1, 10, 4, 1, 2, 0, 0x0b]);
        let e = WasmModule::from_bytes(&bytes, "wasi-extra")
            .err()
            .expect("refused");
        assert!(
            e.to_string()
                .contains(&format!("missing import: wasi_snapshot_preview1.{name}")),
            "{e}"
        );
    }
}

/// A module exporting neither `malloc` nor `proxy_on_memory_allocate` fails its VM,
/// as cpp-host's `getFunctions` ("Wasm module is missing malloc function."): the host
/// could hand it no header or body (the harness started it, and failed each call).
#[test]
fn a_module_without_an_allocator_fails_to_start() {
    let abi = b"proxy_abi_version_0_2_1";
    let mut bytes = b"\0asm\x01\0\0\0".to_vec();
    bytes.extend_from_slice(&[1, 4, 1, 0x60, 0, 0]); // type 0: () -> ()
    bytes.extend_from_slice(&[3, 2, 1, 0, 7, abi.len() as u8 + 4, 1, abi.len() as u8]);
    bytes.extend_from_slice(abi);
    bytes.extend_from_slice(&[0, 0, 10, 4, 1, 2, 0, 0x0b]);
    let m = WasmModule::from_bytes(&bytes, "no-malloc").expect("compiles");
    let e = Harness::new(&m, HarnessConfig::default())
        .err()
        .expect("refused");
    assert!(
        format!("{e:#}").contains("missing malloc function"),
        "{e:#}"
    );
}

#[test]
fn concurrent_cas_increments_from_8_worker_threads_lose_nothing() {
    for cas_mode in [CasMode::Envoy, CasMode::Kong] {
        let mut h = harness_with(HarnessConfig {
            workers: 8,
            clock: ClockMode::Real,
            cas_mode,
            ..Default::default()
        });
        assert_eq!(h.set_shared_data("count", Some(b"0"), 0), Status::Ok);
        let per = 400;
        let lists = (0..8)
            .map(|_| {
                (0..per)
                    .map(|_| (0, Request::get("/probe/incr"), UpstreamReply::status(200)))
                    .collect()
            })
            .collect();
        let records = h.run_parallel(lists).unwrap();
        assert_eq!(records.len(), 8 * per);
        assert!(records.iter().all(|r| r.outcome == Outcome::UpstreamOk));
        let workers: std::collections::BTreeSet<usize> = records.iter().map(|r| r.worker).collect();
        assert_eq!(workers.len(), 8);
        assert_eq!(
            shared_text(&h, "count"),
            (8 * per).to_string(),
            "{cas_mode:?}"
        );
        eprintln!(
            "{cas_mode:?}: CAS retries under contention: {:?}",
            h.metric("probe.cas_retries")
        );
    }
}

#[test]
fn main_thread_vm_keeps_running_during_parallel_runs() {
    let mut h = harness_with(HarnessConfig {
        workers: 2,
        clock: ClockMode::Real,
        ..Default::default()
    });
    // The main-thread VM registered the queue last, so it owns the notifications.
    let mut list = vec![(
        0,
        Request::get("/probe/enqueue"),
        UpstreamReply::status(200),
    )];
    list.extend((1..20).map(|i| {
        (
            i * 10_000_000,
            Request::get("/x"),
            UpstreamReply::status(200).after_ms(5),
        )
    }));
    let records = h.run_parallel(vec![list]).unwrap();
    assert_eq!(records.len(), 20);
    assert_eq!(
        h.metric("probe.queue_msgs").map(|m| m.scalar()),
        Some(1),
        "main VM handled the queue during the run"
    );
}

#[test]
fn parallel_runs_can_cap_the_streams_in_flight() {
    for (cap, overlapping) in [(1usize, false), (usize::MAX, true)] {
        let mut h = harness_with(HarnessConfig {
            workers: 1,
            clock: ClockMode::Real,
            ..Default::default()
        });
        let list = (0..6)
            .map(|_| {
                (
                    0,
                    Request::get("/x"),
                    UpstreamReply::status(200).after_ms(2),
                )
            })
            .collect();
        let mut records = h.run_parallel_capped(vec![list], cap).unwrap();
        assert_eq!(records.len(), 6);
        records.sort_by_key(|r| r.start_ns);
        let overlap = records.windows(2).any(|w| w[1].start_ns < w[0].end_ns);
        assert_eq!(overlap, overlapping, "cap {cap}: {records:?}");
    }
}
