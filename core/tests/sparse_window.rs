//! A shared window with few calls writes every outcome at once: successes no longer
//! wait for `flush_ms` while another worker's failures go at once, so a fleet does
//! not trip on failures whose successes are still on their way (found by review: 7
//! serverless instances served one success each, 3 others failed once each — 30 %
//! against a 50 % threshold — and the fleet opened on a healthy upstream).

mod common;
use common::*;
use fusewire_core::shared::memory::Rules;
use fusewire_core::*;

const CFG: &str = r#"{"breaker": {"error_percentage": {"request_volume_threshold": 3, "threshold_percentage": 50}, "open": {"sleep_window_ms": 60000}}}"#;

/// Redis's flush (`fusewire/redis` sets `flush_ms` 1 000).
fn shared(mode: Mode) -> Host {
    let cfg = SharedConfig {
        flush_ms: 1_000,
        ..SharedConfig::default()
    };
    Host::with_shared(mode, CFG, cfg)
}

/// Worker 1 serves 7 successes, then worker 0 fails 3 calls, all within one flush
/// interval; returns worker 0's phase and the writes worker 1 made.
fn seven_successes_then_three_failures(h: &mut Host) -> (Phase, u64) {
    let k0 = h.key(0, "k");
    let k1 = h.key(1, "k");
    h.advance(300);
    let before = h.store.writes;
    for _ in 0..7 {
        assert!(h.call(1, k1, Outcome::Success));
        h.deliver();
    }
    let writes = h.store.writes - before;
    for _ in 0..3 {
        assert!(h.call(0, k0, Outcome::Failure));
        h.deliver();
    }
    (h.phase(0, k0), writes)
}

#[test]
fn a_sparse_window_gets_the_fleets_successes_before_its_failures_trip_it() {
    for mode in [
        Mode::Async(2),
        Mode::Shared(Rules::Envoy, 2),
        Mode::Shared(Rules::Kong, 2),
    ] {
        let mut h = shared(mode);
        let (phase, writes) = seven_successes_then_three_failures(&mut h);
        assert_eq!(phase, Phase::Closed, "{mode:?}: 3 failures in 10 calls");
        assert!(writes >= 1, "{mode:?}: the successes were written");
        h.advance(3_000);
        for w in 0..2 {
            let k = h.key(w, "k");
            assert_eq!(h.phase(w, k), Phase::Closed, "{mode:?}: worker {w}");
        }
    }
}

/// Past 20 calls the eager writes stop: a busy healthy key writes once per flush
/// again, not once per call.
#[test]
fn a_window_past_20_calls_writes_once_per_flush() {
    for mode in [Mode::Async(1), Mode::Shared(Rules::Envoy, 1)] {
        let mut h = shared(mode);
        let k = h.key(0, "k");
        h.advance(300);
        for _ in 0..40 {
            assert!(h.call(0, k, Outcome::Success));
            h.deliver();
        }
        h.advance(1_200);
        let before = h.store.writes;
        for _ in 0..100 {
            assert!(h.call(0, k, Outcome::Success));
            h.deliver();
        }
        assert_eq!(h.store.writes - before, 0, "{mode:?}: held for the flush");
        h.advance(1_200);
        assert!(h.store.writes - before <= 2, "{mode:?}: one flush");
    }
}

/// Found by review: a bad request adds no volume, so a flood of 4xx on a quiet key kept
/// the window sparse and wrote every one of them.
#[test]
fn bad_requests_on_a_sparse_window_wait_for_the_flush() {
    for mode in [Mode::Async(1), Mode::Shared(Rules::Envoy, 1)] {
        let mut h = shared(mode);
        let k = h.key(0, "k");
        h.advance(300);
        let before = h.store.writes;
        for _ in 0..100 {
            assert!(h.call(0, k, Outcome::BadRequest));
            h.deliver();
        }
        let w = h.store.writes - before;
        assert!(w <= 2, "{mode:?}: {w} writes for 100 bad requests");
    }
}

/// Found by review: the rule was read when a state was decoded, not when a read found
/// the same state later — after a lull that emptied the window, successes still
/// waited for the flush and the fleet tripped on 3 failures in 10 calls.
#[test]
fn after_a_lull_the_sparse_rule_applies_at_once() {
    for mode in [Mode::Async(2), Mode::Shared(Rules::Envoy, 2)] {
        let mut h = shared(mode);
        let (k0, k1) = (h.key(0, "k"), h.key(1, "k"));
        h.advance(300);
        for _ in 0..30 {
            assert!(h.call(0, k0, Outcome::Success));
            assert!(h.call(1, k1, Outcome::Success));
            h.deliver();
        }
        h.advance(1_200);
        h.advance(15_000); // the window empties; reads go on
        let (phase, writes) = seven_successes_then_three_failures(&mut h);
        assert_eq!(
            phase,
            Phase::Closed,
            "{mode:?}: 3 failures in 10 calls ({writes} success writes)"
        );
    }
}
