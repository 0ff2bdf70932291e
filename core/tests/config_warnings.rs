//! `Config::warnings`: settings that validate but do not do what they seem to. Each
//! warning's claim is shown on the engine (local and shared state), and the settings
//! that fix it draw no warning.

mod common;

use common::*;
use fusewire_core::*;

fn paths(json: &str) -> Vec<&'static str> {
    Config::from_json(json)
        .unwrap()
        .warnings()
        .map(ConfigWarning::path)
        .collect()
}

fn running(s: Start) -> Permit {
    match s {
        Start::Running(p) => p,
        other => panic!("expected a running call, got {other:?}"),
    }
}

#[test]
fn defaults_and_usual_settings_draw_none() {
    for json in [
        "{}",
        r#"{"bulkhead": {}}"#,
        r#"{"bulkhead": {"isolation": "pool", "max_queue": 5}}"#,
        r#"{"bulkhead": {"isolation": "pool", "max_queue": 50, "queue_rejection_threshold": 50}}"#,
        r#"{"breaker": {"slow_call": {"enabled": true, "duration_threshold_ms": 1000}}}"#,
        // No timeout in the core (the filter's route timeouts): nothing to compare.
        r#"{"breaker": {"slow_call": {"enabled": true}, "half_open": {"probe_timeout_ms": 10}},
            "execution": {"timeout_enabled": false}}"#,
        // A pinned breaker never probes, nor trips on slow calls (found by review).
        r#"{"breaker": {"mode": "forced_open", "half_open": {"probe_timeout_ms": 10}}}"#,
        r#"{"breaker": {"mode": "forced_closed", "slow_call": {"enabled": true}}}"#,
    ] {
        assert_eq!(paths(json), Vec::<&str>::new(), "{json}");
    }
}

#[test]
fn a_queue_capped_by_its_threshold_says_so() {
    let c = Config::from_json(r#"{"bulkhead": {"isolation": "pool", "max_queue": 100}}"#).unwrap();
    assert_eq!(c.bulkhead.as_ref().map(|b| b.queue_capacity()), Some(5));
    let w: Vec<_> = c.warnings().collect();
    assert_eq!(w, [ConfigWarning::QueueCapped]);
    assert_eq!(
        w[0].to_string(),
        "bulkhead.max_queue: queue_rejection_threshold (5 unless set, as in Hystrix) caps the queue below it: set both"
    );
}

#[test]
fn every_warning_at_once() {
    let json = r#"{"bulkhead": {"isolation": "pool", "max_queue": 9, "queue_rejection_threshold": 3},
                   "breaker": {"slow_call": {"enabled": true},
                               "half_open": {"probe_timeout_ms": 999}}}"#;
    assert_eq!(
        paths(json),
        [
            "bulkhead.max_queue",
            "breaker.slow_call.duration_threshold_ms",
            "breaker.half_open.probe_timeout_ms"
        ]
    );
}

/// 20 calls that time out at the 1 s deadline, the error-percentage rule off: whether
/// the slow-call rule (100 % of 20) trips.
fn slow_rule_trips(threshold_ms: u64, m: Mode) -> bool {
    let cfg = format!(
        r#"{{"breaker": {{"error_percentage": {{"enabled": false}},
                         "slow_call": {{"enabled": true, "duration_threshold_ms": {threshold_ms},
                                        "rate_threshold_percentage": 100, "request_volume_threshold": 20}}}},
            "execution": {{"timeout_ms": 1000}}}}"#
    );
    let mut h = Host::new(m, &cfg);
    let keys = h.keys("k");
    for _ in 0..20 {
        let _ = running(h.start(0, keys[0]));
    }
    h.advance(1_100);
    h.phase(0, keys[0]) == Phase::Open
}

#[test]
fn a_slow_call_threshold_above_the_timeout_is_never_met() {
    each_mode(|m| {
        assert!(
            slow_rule_trips(1_000, m),
            "{m:?}: timeouts are slow at the timeout"
        );
        assert!(!slow_rule_trips(1_001, m), "{m:?}: and never slow above it");
    });
    assert_eq!(
        paths(r#"{"breaker": {"slow_call": {"enabled": true, "duration_threshold_ms": 1001}}}"#),
        ["breaker.slow_call.duration_threshold_ms"]
    );
    assert!(paths(
        r#"{"breaker": {"slow_call": {"enabled": true, "duration_threshold_ms": 1000}}}"#
    )
    .is_empty());
}

/// A probe that answers after 1.5 s, within its 2 s call timeout: the phase after it.
fn after_slow_probe(probe_timeout_ms: u64, m: Mode) -> Phase {
    let cfg = format!(
        r#"{{"breaker": {{"half_open": {{"probe_timeout_ms": {probe_timeout_ms}}}}},
            "execution": {{"timeout_ms": 2000}}}}"#
    );
    let mut h = Host::new(m, &cfg);
    let keys = h.keys("k");
    for i in 0..20 {
        let w = i % h.engines.len();
        assert!(h.call(w, keys[w], Outcome::Failure));
    }
    h.advance(5_000);
    let probe = running(h.start(0, keys[0]));
    h.advance(1_500);
    let _ = h.complete(0, probe, Outcome::Success);
    h.phase(0, keys[0])
}

#[test]
fn a_probe_lease_shorter_than_the_timeout_reopens_a_probe_that_succeeds() {
    each_mode(|m| {
        assert_eq!(after_slow_probe(2_000, m), Phase::Closed, "{m:?}");
        assert_eq!(
            after_slow_probe(1_000, m),
            Phase::Open,
            "{m:?}: given up at 1 s"
        );
    });
    assert_eq!(
        paths(
            r#"{"breaker": {"half_open": {"probe_timeout_ms": 1999}}, "execution": {"timeout_ms": 2000}}"#
        ),
        ["breaker.half_open.probe_timeout_ms"]
    );
}
