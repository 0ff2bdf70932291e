//! `admit_after_body`: a request with a body is admitted once its body is in, so
//! uploads that stall (headers sent, body never finished: an untrusted client, a slow
//! mobile link) hold no bulkhead slot and no half-open probe. Each scenario also runs
//! without the option, where the stall does harm, so the tests show what it changes.
//!
//! Needs the built module (see `tests/host.rs`).

use std::time::Duration;

use fusewire_host_test::*;

mod common;
use common::counter;

/// One policy: a bulkhead of 2, one probe, opens on 50 % of 20 calls for 5 s.
/// `ADMIT` is replaced by the option (or nothing).
const CONFIG: &str = r#"{
  "tick_ms": 100,
  "shared": {"lease_ttl_ms": 2000, "heartbeat_ms": 500},
  "policies": [{
    "name": "svc",
    "match": {"path_prefix": "/api"},
    "breaker": {
      "error_percentage": {"request_volume_threshold": 20, "threshold_percentage": 50},
      "open": {"sleep_window_ms": 5000},
      "half_open": {"permitted_probes": 1, "success_threshold": 1, "probe_timeout_ms": 30000}
    },
    "bulkhead": {"max_concurrent": 2},
    "execution": {"timeout_ms": 1000}, "timeout": "tick",
    ADMIT
    "fallback": {"status": 503, "body": "fallback: {reason}"}
  }]
}"#;

/// Envoy with `allow_on_headers_stop_iteration` (what `admit_after_body` needs), the
/// policy with or without the option.
fn harness(admit: bool) -> Harness {
    harness_with(admit, true)
}

fn harness_with(admit: bool, stop_iteration: bool) -> Harness {
    let option = if admit {
        r#""admit_after_body": {},"#
    } else {
        ""
    };
    harness_json(&CONFIG.replace("ADMIT", option), stop_iteration)
}

fn harness_json(json: &str, stop_iteration: bool) -> Harness {
    let mut cfg = common::harness_config(CasMode::Envoy, json, 15_000);
    cfg.plugin.allow_on_headers_stop_iteration = stop_iteration;
    Harness::new(&common::module(), cfg).expect("plugin loads")
}

/// A POST whose body takes `ms` to arrive.
fn upload(ms: u64) -> Request {
    Request::get("/api/upload")
        .method("POST")
        .body(b"payload")
        .upload_ms(ms)
}

fn ok() -> UpstreamReply {
    UpstreamReply::status(200).after_ms(10)
}

fn tag(r: &StreamRecord) -> Option<String> {
    r.response_header("x-fusewire")
}

/// Ten stalled uploads: without the option they fill the bulkhead, and its rejections
/// (errors, as in Hystrix) open the breaker for everyone; with it, other requests run
/// beside them, and each upload runs once its body is in.
#[test]
fn stalled_uploads_hold_no_bulkhead_slot() {
    for admit in [false, true] {
        let mut h = harness(admit);
        let t0 = h.now_ns();
        let uploads: Vec<u64> = (0..10)
            // Their bodies end 100 ms apart: each runs alone (the bulkhead holds 2).
            .map(|i| h.submit_at(t0 + i, i as usize % 4, upload(20_000 + i * 100), ok()))
            .collect();
        h.run_for(Duration::from_millis(50));
        let gets: Vec<StreamRecord> = (0..30)
            .map(|i| h.request(i % 4, Request::get("/api/item"), ok()))
            .collect();
        let served = gets
            .iter()
            .filter(|r| r.response_status == Some(200))
            .count();
        if !admit {
            // What the option is for: the stalled uploads took both slots.
            assert_eq!(served, 0, "without the option: {:?}", gets[0]);
            continue;
        }
        assert_eq!(
            served,
            30,
            "with the option: {:?}",
            gets.iter().find(|r| r.response_status != Some(200))
        );
        h.run_for(Duration::from_millis(22_000));
        for id in uploads {
            let r = h.record(id).expect("upload finished");
            assert!(r.sent_upstream, "admitted once its body was in: {r:?}");
            assert_eq!(r.response_status, Some(200), "{r:?}");
        }
        h.run_for(Duration::from_millis(150));
        assert_eq!(counter(&h, "fusewire.svc.semaphore_rejected"), 0);
        assert_eq!(counter(&h, "fusewire.svc.success"), 40);
        assert_eq!(counter(&h, "fusewire.svc.opened"), 0);
    }
}

/// Trips the breaker: 20 failing GETs.
fn trip(h: &mut Harness) {
    for i in 0..20 {
        h.request(i % 4, Request::get("/api/item"), UpstreamReply::status(503));
    }
    h.run_for(Duration::from_millis(150));
    assert_eq!(counter(h, "fusewire.svc.opened"), 1);
}

/// Half-open admits one probe. An upload that stalls as that probe keeps every other
/// request refused until `probe_timeout_ms` (30 s here); with the option the probe goes
/// to a request that is ready, and the breaker closes.
#[test]
fn a_stalled_upload_does_not_hold_the_half_open_probe() {
    for admit in [false, true] {
        let mut h = harness(admit);
        trip(&mut h);
        h.run_for(Duration::from_millis(5_100));
        let stalled = h.submit(0, upload(20_000), ok());
        h.run_for(Duration::from_millis(10));
        let get = h.request(0, Request::get("/api/item"), ok());
        if !admit {
            assert_eq!(tag(&get).as_deref(), Some("short-circuited"), "{get:?}");
            continue;
        }
        assert_eq!(get.response_status, Some(200), "the probe: {get:?}");
        h.run_for(Duration::from_millis(150));
        assert_eq!(counter(&h, "fusewire.svc.closed"), 1);
        h.run_for(Duration::from_millis(21_000));
        let r = h.record(stalled).expect("upload finished");
        assert_eq!(r.response_status, Some(200), "{r:?}");
    }
}

/// An open breaker answers an upload at its headers: the client is not made to send a
/// body that will be refused, and the upstream never sees it.
#[test]
fn an_open_breaker_answers_an_upload_at_once() {
    let mut h = harness(true);
    trip(&mut h);
    for w in 0..4 {
        let t0 = h.now_ns();
        let r = h.request(w, upload(10_000), ok());
        assert_eq!(tag(&r).as_deref(), Some("short-circuited"), "{r:?}");
        assert!(!r.sent_upstream);
        assert!(
            r.end_ns - t0 < 1_000_000_000,
            "answered at its headers: {r:?}"
        );
    }
}

/// The call's deadline (`timeout: tick`, 1 s) counts from its admission: a 3 s upload
/// answered 500 ms after it is in is a success, one answered 1.5 s after is a timeout.
#[test]
fn the_deadline_counts_from_admission() {
    let mut h = harness(true);
    let r = h.request(0, upload(3_000), UpstreamReply::status(200).after_ms(500));
    assert_eq!(r.response_status, Some(200), "{r:?}");
    let r = h.request(0, upload(3_000), UpstreamReply::status(200).after_ms(1_500));
    assert_eq!(tag(&r).as_deref(), Some("timeout"), "{r:?}");
    h.run_for(Duration::from_millis(150));
    assert_eq!(counter(&h, "fusewire.svc.success"), 1);
    assert_eq!(counter(&h, "fusewire.svc.timeout"), 1);
}

/// A client that gives up during its upload was never admitted: it counts nowhere and
/// leaves nothing behind.
#[test]
fn an_upload_abandoned_before_admission_counts_nowhere() {
    let mut h = harness(true);
    let ids: Vec<u64> = (0..5)
        .map(|i| h.submit(i % 4, upload(10_000).client_timeout_ms(1_000), ok()))
        .collect();
    h.run_for(Duration::from_millis(2_000));
    for id in ids {
        let r = h.record(id).expect("ended");
        assert!(!r.sent_upstream, "{r:?}");
    }
    // Both slots are free: two slow calls run side by side.
    let t0 = h.now_ns();
    let a = h.submit_at(
        t0,
        0,
        Request::get("/api/a"),
        UpstreamReply::status(200).after_ms(300),
    );
    let b = h.submit_at(
        t0,
        1,
        Request::get("/api/b"),
        UpstreamReply::status(200).after_ms(300),
    );
    h.run_for(Duration::from_millis(1_000));
    for id in [a, b] {
        assert_eq!(h.record(id).and_then(|r| r.response_status), Some(200));
    }
    h.run_for(Duration::from_millis(150));
    for event in [
        "success",
        "failure",
        "timeout",
        "semaphore_rejected",
        "short_circuited",
    ] {
        let want = if event == "success" { 2 } else { 0 };
        assert_eq!(
            counter(&h, &format!("fusewire.svc.{event}")),
            want,
            "{event}"
        );
    }
}

/// Without `allow_on_headers_stop_iteration` Envoy holds a stopped request's body back
/// from the filter: an upload under `admit_after_body` never gets through (here
/// Envoy's stream idle timeout ends it), and the filter says what is missing 5 s after
/// the first one began waiting, not when it ends (found by review: 5 minutes later).
/// Requests without a body are admitted at their headers as before.
#[test]
fn without_stop_iteration_uploads_hang_and_the_log_says_why() {
    let said = |h: &Harness| common::logged(h, "allow_on_headers_stop_iteration");
    let mut h = harness_with(true, false);
    let get = h.request(0, Request::get("/api/item"), ok());
    assert_eq!(get.response_status, Some(200), "{get:?}");
    let id = h.submit(0, upload(100), ok());
    h.run_for(Duration::from_millis(4_800));
    assert_eq!(said(&h), Vec::<String>::new(), "not yet");
    h.run_for(Duration::from_millis(400));
    assert_eq!(
        said(&h),
        [
            r#"fusewire: policy "svc": admit_after_body: no request body has reached the filter (a request ended, or waited 5 s, without one): a client that stalled, or Envoy without allow_on_headers_stop_iteration: true (1.35+), which holds every body back"#
        ]
    );
    assert!(h.record(id).is_none(), "still waiting");
    h.run_for(Duration::from_secs(600));
    let r = h.record(id).expect("ended");
    assert!(!r.sent_upstream, "{r:?}");
    assert_eq!(r.code_details, "stream_idle_timeout", "{r:?}");
    assert_eq!(said(&h).len(), 1, "once per worker");
    // Where bodies do arrive, neither a slow upload nor a stalled client's request
    // ending says anything.
    let mut h = harness(true);
    h.request(1, upload(100), ok());
    h.request(1, upload(8_000), ok());
    let r = h.request(1, upload(10_000).client_timeout_ms(1_000), ok());
    assert!(!r.sent_upstream, "{r:?}");
    assert_eq!(said(&h), Vec::<String>::new());
}

/// Checking the breaker at the headers asks the shared state for nothing: a stalled
/// upload on one worker takes no bulkhead slot and no probe lease that the other
/// workers' ready requests then lack (found by review: asking as an admission does
/// reserved both for the stalled upload's worker, and every other worker was refused).
#[test]
fn stalled_uploads_reserve_nothing_for_their_worker() {
    let mut h = harness(true);
    let t0 = h.now_ns();
    for w in 0..2 {
        h.submit_at(t0 + w as u64, w, upload(20_000), ok());
    }
    h.run_for(Duration::from_millis(50));
    let gets: Vec<StreamRecord> = (0..10)
        .map(|i| {
            h.request(
                2 + i % 2,
                Request::get("/api/item"),
                UpstreamReply::status(200).after_ms(300),
            )
        })
        .collect();
    let served = gets
        .iter()
        .filter(|r| r.response_status == Some(200))
        .count();
    assert_eq!(
        served,
        10,
        "{:?}",
        gets.iter().find(|r| r.response_status != Some(200))
    );

    let mut h = harness(true);
    trip(&mut h);
    h.run_for(Duration::from_millis(5_100));
    h.submit(0, upload(20_000), ok());
    h.run_for(Duration::from_millis(10));
    let probe = h.request(1, Request::get("/api/item"), ok());
    assert_eq!(
        probe.response_status,
        Some(200),
        "the probe, on another worker: {probe:?}"
    );
    h.run_for(Duration::from_millis(150));
    assert_eq!(counter(&h, "fusewire.svc.closed"), 1);
}

/// A request is matched and keyed again once its body is in: a key that expired
/// during a long upload is made again, and the breaker and bulkhead apply (found by
/// review: the request went upstream past its policy, counted nowhere).
#[test]
fn a_key_that_expires_during_the_upload_is_made_again() {
    let json = CONFIG
        .replace(
            "ADMIT",
            r#""admit_after_body": {}, "key": "{header:x-tenant}", "keys": {"idle_ms": 1000},"#,
        )
        .replace(r#""max_concurrent": 2"#, r#""max_concurrent": 1"#);
    let mut h = harness_json(&json, true);
    let r = h.request(0, Request::get("/api/x").header("x-tenant", "t1"), ok());
    assert_eq!(r.response_status, Some(200));
    let t0 = h.now_ns();
    let up = || upload(3_000).header("x-tenant", "t1");
    let fail = || UpstreamReply::status(500).after_ms(500);
    let ids = [
        h.submit_at(t0, 0, up(), fail()),
        h.submit_at(t0 + 1, 1, up(), fail()),
    ];
    h.run_for(Duration::from_millis(5_000));
    let sent: Vec<bool> = ids
        .iter()
        .map(|&id| h.record(id).expect("ended").sent_upstream)
        .collect();
    assert_eq!(
        sent.iter().filter(|&&s| s).count(),
        1,
        "a bulkhead of 1: {sent:?}"
    );
    h.run_for(Duration::from_millis(150));
    assert_eq!(counter(&h, "fusewire.t1.failure"), 1);
    assert_eq!(counter(&h, "fusewire.t1.semaphore_rejected"), 1);
}

/// An upgrade (WebSocket) sends no body before the upstream answers: it is admitted
/// at its headers, as without the option.
#[test]
fn an_upgrade_is_admitted_at_its_headers() {
    let mut h = harness(true);
    let ws = upload(2_000)
        .header("upgrade", "websocket")
        .header("connection", "upgrade");
    let id = h.submit(0, ws, ok());
    h.run_for(Duration::from_millis(200));
    assert_eq!(
        counter(&h, "fusewire.svc.in_flight"),
        1,
        "holds its slot while it sends"
    );
    h.run_for(Duration::from_millis(3_000));
    assert!(h.record(id).expect("ended").sent_upstream);
    // An upload without the header holds nothing while it sends.
    let id = h.submit(0, upload(2_000), ok());
    h.run_for(Duration::from_millis(200));
    assert_eq!(counter(&h, "fusewire.svc.in_flight"), 0);
    h.run_for(Duration::from_millis(3_000));
    assert!(h.record(id).expect("ended").sent_upstream);
}

/// A client that stops mid-upload until Envoy's stream idle timeout fires (Envoy
/// answers 408 then: the request was not received in full) is the client's doing:
/// the call counts nowhere (found by review: they counted as bad requests, and as
/// timeouts where the flag was read — the harness answered 504, which tripped a
/// healthy upstream's breaker on 20 such clients). Without `admit_after_body`, where
/// the calls hold their slots while uploading.
#[test]
fn uploads_stalled_past_the_stream_idle_timeout_count_nowhere() {
    let json = CONFIG
        .replace("ADMIT", "")
        .replace(r#""bulkhead": {"max_concurrent": 2},"#, "")
        .replace(
            r#""execution": {"timeout_ms": 1000}, "timeout": "tick","#,
            "",
        );
    let mut cfg = common::harness_config(CasMode::Envoy, &json, 15_000);
    cfg.stream_idle_timeout_ms = 1_000;
    let mut h = Harness::new(&common::module(), cfg).expect("plugin loads");
    let ids: Vec<u64> = (0..20)
        .map(|i| h.submit(i % 4, upload(3_000), ok()))
        .collect();
    h.run_for(Duration::from_millis(4_000));
    for id in ids {
        let r = h.record(id).expect("ended");
        assert_eq!(r.response_status, Some(408), "{r:?}");
        assert_eq!(r.response_flags, flags::STREAM_IDLE_TIMEOUT);
        assert!(!r.sent_upstream || r.upstream_status.is_none());
    }
    assert_eq!(counter(&h, "fusewire.svc.timeout"), 0);
    assert_eq!(counter(&h, "fusewire.svc.cancelled"), 20);
    assert_eq!(counter(&h, "fusewire.svc.opened"), 0);
    // A call after them runs.
    let r = h.request(0, Request::get("/api/x"), ok());
    assert_eq!(r.response_status, Some(200));
}
