//! Config schema: defaults, JSON round trip, errors that name field and reason.

use fusewire_core::config::{BreakerMode, OpenSchedule};
use fusewire_core::Config;

#[test]
fn empty_object_gives_hystrix_defaults() {
    let c = Config::from_json("{}").unwrap();
    assert_eq!(c, Config::default());
    assert_eq!(c.breaker.mode, BreakerMode::Normal);
    assert_eq!(c.breaker.error_percentage.request_volume_threshold, 20);
    assert_eq!(c.breaker.error_percentage.threshold_percentage, 50.0);
    assert_eq!(c.breaker.open.sleep_window_ms, 5_000);
    assert_eq!(c.breaker.open.schedule, OpenSchedule::Fixed);
    assert_eq!(c.breaker.half_open.permitted_probes, 1);
    assert_eq!(c.metrics.rolling_window_ms, 10_000);
    assert_eq!(c.metrics.rolling_buckets, 10);
    assert_eq!(c.execution.timeout_ms, 1_000);
    assert_eq!(c.bulkhead, None, "no bulkhead unless configured");
    let b = fusewire_core::config::BulkheadConfig::default();
    assert_eq!(b.max_concurrent, 10);
    assert_eq!(b.fallback_max_concurrent, 10);
    assert_eq!(b.queue_rejection_threshold, 5);
}

#[test]
fn json_round_trips() {
    let json = r#"{
        "breaker": {
            "mode": "metrics_only",
            "error_percentage": {"threshold_percentage": 25},
            "consecutive_failures": {"enabled": true, "threshold": 7},
            "open": {"schedule": "ladder", "ladder_ms": [1000, 2000], "jitter_percentage": 10},
            "half_open": {"permitted_probes": 4, "success_threshold": 3},
            "slow_start": {"ramp_ms": 30000}
        },
        "metrics": {"rolling_window_ms": 20000, "rolling_buckets": 20, "percentiles_enabled": false},
        "execution": {"timeout_ms": 250},
        "bulkhead": {"isolation": "pool", "max_concurrent": 100, "max_queue": 50, "queue_rejection_threshold": 40},
        "keys": {"max_keys": 500, "idle_ms": 60000}
    }"#;
    let c = Config::from_json(json).unwrap();
    assert_eq!(c.breaker.mode, BreakerMode::MetricsOnly);
    assert_eq!(c.breaker.error_percentage.threshold_percentage, 25.0);
    assert_eq!(c.breaker.error_percentage.request_volume_threshold, 20);
    assert_eq!(c.breaker.open.ladder_ms, vec![1000, 2000]);
    assert_eq!(c.breaker.half_open.success_threshold, 3);
    assert_eq!(c.execution.timeout_ms, 250);
    assert!(!c.metrics.percentiles_enabled);
    assert_eq!(c.bulkhead.as_ref().map(|b| b.queue_capacity()), Some(40));
    assert_eq!(c.keys.max_keys, 500);
    let again = Config::from_json(&c.to_json()).unwrap();
    assert_eq!(again, c);
}

fn err(json: &str) -> (String, String) {
    let e = Config::from_json(json).unwrap_err();
    assert!(!e.reason.is_empty());
    assert!(e.to_string().contains(&e.reason));
    (e.path, e.reason)
}

#[test]
fn unknown_fields_are_rejected_with_their_path() {
    let (path, reason) = err(r#"{"breaker": {"half_open": {"permited_probes": 2}}}"#);
    assert_eq!(path, "breaker.half_open.permited_probes");
    assert!(reason.contains("unknown field"), "{reason}");
    assert!(
        reason.contains("permitted_probes"),
        "suggests the valid names: {reason}"
    );
    let (path, _) = err(r#"{"brekaer": {}}"#);
    assert_eq!(path, "brekaer");
}

#[test]
fn wrong_types_name_the_field() {
    let (path, reason) = err(r#"{"execution": {"timeout_ms": "fast"}}"#);
    assert_eq!(path, "execution.timeout_ms");
    assert!(reason.contains("invalid type"), "{reason}");
    let (path, _) = err(r#"{"breaker": {"mode": "sometimes"}}"#);
    assert_eq!(path, "breaker.mode");
    let (path, _) = err(r#"{"metrics": {"rolling_buckets": -1}}"#);
    assert_eq!(path, "metrics.rolling_buckets");
    let (path, _) = err(r#"{"metrics": {"percentiles_enabled": 0}}"#);
    assert_eq!(path, "metrics.percentiles_enabled");
    let (_, reason) = err("{");
    assert!(reason.contains("EOF"), "{reason}");
}

#[test]
fn invalid_values_name_the_field_and_reason() {
    let cases = [
        (
            r#"{"breaker": {"half_open": {"permitted_probes": 0}}}"#,
            "breaker.half_open.permitted_probes",
        ),
        (
            r#"{"breaker": {"half_open": {"permitted_probes": 2, "success_threshold": 3}}}"#,
            "breaker.half_open.success_threshold",
        ),
        (
            r#"{"breaker": {"error_percentage": {"threshold_percentage": 101}}}"#,
            "breaker.error_percentage.threshold_percentage",
        ),
        (
            r#"{"breaker": {"consecutive_failures": {"enabled": true, "threshold": 0}}}"#,
            "breaker.consecutive_failures.threshold",
        ),
        (
            r#"{"breaker": {"adaptive_throttle": {"k": 0.5}}}"#,
            "breaker.adaptive_throttle.k",
        ),
        (
            r#"{"breaker": {"open": {"schedule": "ladder", "ladder_ms": []}}}"#,
            "breaker.open.ladder_ms",
        ),
        (
            r#"{"breaker": {"open": {"ladder_ms": [1, 99999999999999]}}}"#,
            "breaker.open.ladder_ms[1]",
        ),
        (
            r#"{"breaker": {"open": {"schedule": "exponential", "max_ms": 10}}}"#,
            "breaker.open.max_ms",
        ),
        (
            r#"{"breaker": {"open": {"multiplier": 0.5}}}"#,
            "breaker.open.multiplier",
        ),
        (
            // Grown from 0, an exponential open period stays 0 (found by review).
            r#"{"breaker": {"open": {"schedule": "exponential", "sleep_window_ms": 0}}}"#,
            "breaker.open.sleep_window_ms",
        ),
        (
            r#"{"metrics": {"rolling_window_ms": 10000, "rolling_buckets": 3}}"#,
            "metrics.rolling_buckets",
        ),
        (
            r#"{"metrics": {"percentile_window_ms": 0}}"#,
            "metrics.percentile_window_ms",
        ),
        (
            r#"{"execution": {"timeout_ms": 0}}"#,
            "execution.timeout_ms",
        ),
        (
            r#"{"bulkhead": {"max_concurrent": 0}}"#,
            "bulkhead.max_concurrent",
        ),
        (r#"{"bulkhead": {"max_queue": 5}}"#, "bulkhead.max_queue"),
        (
            r#"{"bulkhead": {"isolation": "pool", "max_queue": 5, "queue_rejection_threshold": 0}}"#,
            "bulkhead.queue_rejection_threshold",
        ),
        (r#"{"keys": {"max_keys": 0}}"#, "keys.max_keys"),
        (r#"{"keys": {"idle_ms": 10}}"#, "keys.idle_ms"),
    ];
    for (json, want) in cases {
        let (path, reason) = err(json);
        assert_eq!(path, want, "{json}: {reason}");
    }
    let (_, reason) = err(r#"{"metrics": {"rolling_window_ms": 10000, "rolling_buckets": 3}}"#);
    assert!(reason.contains("divide"), "{reason}");
}

#[test]
fn shared_config_is_validated_in_core() {
    use fusewire_core::SharedConfig;
    assert_eq!(
        SharedConfig::from_json("{}").unwrap(),
        SharedConfig::default()
    );
    let bad = |json: &str, path: &str, part: &str| {
        let e = SharedConfig::from_json(json).unwrap_err();
        assert_eq!(e.path, path, "{e}");
        assert!(e.reason.contains(part), "{e}");
    };
    bad(r#"{"cas_attempts": 0}"#, "cas_attempts", "1..=1000");
    bad(r#"{"lease_ttl_ms": 10}"#, "lease_ttl_ms", "twice");
    bad(r#"{"namespace": "a b"}"#, "namespace", "[A-Za-z0-9_.-]");
    bad(
        r#"{"mode": "async", "sync_ms": 5000, "stale_ms": 6000}"#,
        "stale_ms",
        "twice sync_ms",
    );
    bad(r#"{"mode": "async", "sync_ms": 0}"#, "sync_ms", "1..=");
    bad(
        r#"{"sync_ms": 6000, "stale_ms": 10000}"#,
        "stale_ms",
        "twice sync_ms (6000)",
    );
    // sync_ms: the mode's default unless set; 0 (sync mode): before every admission.
    let sync = SharedConfig::from_json(r#"{"sync_ms": 0}"#).unwrap();
    assert_eq!(sync.sync_ms(), 0);
    assert_eq!(SharedConfig::default().sync_ms(), 100);
    let asy = SharedConfig::from_json(r#"{"mode": "async"}"#).unwrap();
    assert_eq!(asy.sync_ms(), 1_000);
    bad(r#"{"mode": "sometimes"}"#, "mode", "unknown value");
    bad(r#"{"heartbeat": 1}"#, "heartbeat", "unknown field");
    let e = SharedConfig::from_json(r#"{"cas_attempts": 0}"#)
        .unwrap_err()
        .within("shared");
    assert_eq!(
        e.to_string(),
        "shared.cas_attempts: must be in 1..=1000, got 0"
    );
}
