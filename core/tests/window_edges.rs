//! Edges of the rolling window that the metrics tests leave open (found by mutation
//! testing of `core/src/window.rs`). Simulated clock, time in ns.

use fusewire_core::config::MetricsConfig;
use fusewire_core::window::HealthSnapshot;
use fusewire_core::{
    Circuit, CircuitBreaker, Config, EventKind, Outcome, Phase, TransitionReason, Window,
};

const MS: u64 = 1_000_000;
const T0: u64 = 1_000 * MS;

#[test]
fn troubled_means_errors_or_slow_calls() {
    let mut counts = [0u64; fusewire_core::event::EVENT_KINDS];
    counts[EventKind::Success.index()] = 5;
    assert!(!HealthSnapshot::from_counts(&counts, 0).is_troubled());
    assert!(HealthSnapshot::from_counts(&counts, 1).is_troubled());
    counts[EventKind::Failure.index()] = 1;
    assert!(HealthSnapshot::from_counts(&counts, 0).is_troubled());
}

/// `counter_buckets_at` lists the non-empty buckets only, not the empty current one.
#[test]
fn counter_buckets_skip_empty_buckets() {
    let mut w = Window::new(&MetricsConfig::default(), T0);
    w.record(EventKind::Failure, T0);
    w.record(EventKind::Success, T0 + 2_000 * MS);
    w.health(T0 + 3_500 * MS);
    let buckets: Vec<_> = w
        .counter_buckets_at(T0 + 3_500 * MS)
        .map(|(start, b)| (start, b.counts[EventKind::Failure.index()]))
        .collect();
    assert_eq!(buckets.len(), 2, "{buckets:?}");
    assert!(buckets.contains(&(T0, 1)));
    assert!(buckets.contains(&(T0 + 2_000 * MS, 0)));
}

/// Re-bucketing the percentile window keeps the recorded latencies.
#[test]
fn reconfiguring_the_percentile_window_keeps_latencies() {
    let mut w = Window::new(&MetricsConfig::default(), T0);
    for i in 1..=10 {
        w.record_call(EventKind::Success, i * MS, false, 1, T0 + i * MS);
    }
    let before = w.percentiles_at(T0 + 20 * MS);
    assert_eq!(before.count, 10);
    let config = MetricsConfig {
        percentile_buckets: 6,
        ..MetricsConfig::default()
    };
    w.reconfigure(&config);
    assert_eq!(w.percentiles_at(T0 + 20 * MS), before);
}

/// Failures that were not slow leaving the window raise the slow-call rate with no
/// new slow call: the next (fast) success runs the rules and trips.
#[test]
fn fast_failures_leaving_the_window_raise_the_slow_call_rate() {
    let mut c = Config::default();
    c.breaker.error_percentage.enabled = false;
    c.breaker.slow_call.enabled = true;
    c.breaker.slow_call.duration_threshold_ms = 100;
    c.breaker.slow_call.rate_threshold_percentage = 50.0;
    c.breaker.slow_call.request_volume_threshold = 4;
    c.validate().unwrap();
    let mut b = CircuitBreaker::new(c, T0);
    for _ in 0..4 {
        let p = b.try_acquire(T0, 0).unwrap();
        assert_eq!(b.record(p, Outcome::Failure, T0, 0), None);
    }
    let at = T0 + 5_000 * MS;
    for _ in 0..3 {
        let p = b.try_acquire(at, 0).unwrap();
        assert_eq!(b.record(p, Outcome::Success, at + 150 * MS, 0), None);
    }
    assert_eq!(b.phase(), Phase::Closed, "3 slow of 7");
    // The failures' bucket has left: 3 slow of 3, then of 4 with this success.
    let at = T0 + 10_500 * MS;
    let p = b.try_acquire(at, 0).unwrap();
    let t = b.record(p, Outcome::Success, at, 0).expect("rules ran");
    assert_eq!(t.reason, TransitionReason::SlowCallRate);
}

/// Windows merge slot by slot only with both rings' geometry equal.
#[test]
fn same_geometry_compares_both_rings() {
    let base = MetricsConfig::default();
    let w = Window::new(&base, T0);
    assert!(w.same_geometry(&Window::new(&base, T0 + 60_000 * MS)));
    let counters = MetricsConfig {
        rolling_buckets: 5,
        ..base.clone()
    };
    assert!(!w.same_geometry(&Window::new(&counters, T0)));
    let latency = MetricsConfig {
        percentile_buckets: 6,
        ..base
    };
    assert!(!w.same_geometry(&Window::new(&latency, T0)));
}

/// A window's size is its inline part plus both rings' slot vectors.
#[test]
fn memory_bytes_adds_inline_and_heap_parts() {
    for percentiles_enabled in [true, false] {
        let config = MetricsConfig {
            percentiles_enabled,
            ..MetricsConfig::default()
        };
        let w = Window::new(&config, T0);
        assert_eq!(
            w.memory_bytes(),
            std::mem::size_of::<Window>() + w.counters().heap_bytes() + w.latency().heap_bytes()
        );
        assert!(w.counters().heap_bytes() > 0);
    }
}

/// An operator's forced close resets the window's health counts (with
/// `reset_window_on_close`), keeping the cumulative ones.
#[test]
fn forced_close_resets_the_health_window() {
    let config = Config::default();
    let mut c = Circuit::new(&config, T0);
    for _ in 0..3 {
        c.record_event(EventKind::Failure, T0);
    }
    assert!(c.force(&config, Phase::Open, T0, 0).is_some());
    assert_eq!(c.window.health_at(T0).errors, 3);
    let t = c.force(&config, Phase::Closed, T0 + MS, 0).unwrap();
    assert_eq!(t.reason, TransitionReason::Forced);
    assert_eq!(c.window.health_at(T0 + MS).total, 0);
    assert_eq!(c.window.cumulative_count(EventKind::Failure), 3);
}

/// A bucket counter at `u32::MAX` stays there on one more event (it does not wrap
/// to 0), on both recording paths.
#[test]
fn a_full_counter_saturates_instead_of_wrapping() {
    let mut w = Window::new(&MetricsConfig::default(), T0);
    w.record_n(EventKind::Failure, u32::MAX, T0);
    w.record(EventKind::Failure, T0);
    w.record_n(EventKind::Success, u32::MAX, T0);
    w.record_call(EventKind::Success, MS, false, 1, T0);
    let h = w.health(T0);
    assert_eq!(h.count(EventKind::Failure), u64::from(u32::MAX));
    assert_eq!(h.count(EventKind::Success), u64::from(u32::MAX));
}

/// At the clock's last instant the current bucket's end saturates at `u64::MAX`: the
/// bucket must not be counted again on each record (found by review: three failures
/// at `u64::MAX` read as nine).
#[test]
fn the_last_instant_of_time_counts_each_event_once() {
    let mut w = Window::new(&MetricsConfig::default(), u64::MAX);
    for _ in 0..3 {
        w.record(EventKind::Failure, u64::MAX);
    }
    assert_eq!(w.health(u64::MAX).count(EventKind::Failure), 3);
    assert_eq!(w.health(u64::MAX).count(EventKind::Failure), 3);
    assert_eq!(w.health_at(u64::MAX).count(EventKind::Failure), 3);
}

/// A pass rebuilt from its raw parts and handed back twice does not take the in-flight
/// count below zero (found by review: it read `u32::MAX`, and an `all_calls` error
/// rate divided by 4 billion never tripped).
#[test]
fn a_pass_handed_back_twice_leaves_in_flight_at_zero() {
    let mut cb = CircuitBreaker::new(Config::default(), 0);
    let raw = cb.try_acquire(0, 0).unwrap().into_raw();
    let _ = cb.record(fusewire_core::Pass::from_raw(raw), Outcome::Success, 1, 0);
    let _ = cb.record(fusewire_core::Pass::from_raw(raw), Outcome::Success, 2, 0);
    assert_eq!(cb.in_flight(), 0);
    assert!(cb.snapshot(2).rolling_max_concurrency <= 1);
}
