//! Deterministic-clock tests of every breaker rule (time in ns, simulated).

use fusewire_core::breaker::open_duration_ns;
use fusewire_core::config::{BreakerMode, Comparison, Denominator, OpenSchedule};
use fusewire_core::{
    CircuitBreaker, Config, EventKind, Outcome, Phase, ShortCircuit, TransitionReason,
};

const MS: u64 = 1_000_000;
const T0: u64 = 1_000 * MS;

fn cb(config: Config) -> CircuitBreaker {
    config.validate().expect("valid test config");
    CircuitBreaker::new(config, T0)
}

/// Runs one call that finishes immediately with `outcome` at `now`.
fn call(b: &mut CircuitBreaker, now: u64, outcome: Outcome) -> Result<(), ShortCircuit> {
    let p = b.try_acquire(now, 0)?;
    b.record(p, outcome, now, 0);
    Ok(())
}

/// The breaker is open, and its last transition was for `reason`.
fn assert_tripped(b: &mut CircuitBreaker, reason: TransitionReason) {
    assert_eq!(b.phase(), Phase::Open);
    assert_eq!(b.take_transition().map(|t| t.reason), Some(reason));
}

fn calls(b: &mut CircuitBreaker, now: u64, ok: u32, failed: u32) {
    for _ in 0..ok {
        call(b, now, Outcome::Success).expect("admitted");
    }
    for _ in 0..failed {
        call(b, now, Outcome::Failure).expect("admitted");
    }
}

#[test]
fn trips_at_error_threshold_with_enough_volume() {
    let mut b = cb(Config::default());
    calls(&mut b, T0, 10, 9);
    assert_eq!(b.phase(), Phase::Closed);
    call(&mut b, T0 + MS, Outcome::Failure).unwrap();
    assert_eq!(b.phase(), Phase::Open, "20 calls at 50 % errors trips");
    let t = b.take_transition().unwrap();
    assert_eq!((t.from, t.to), (Phase::Closed, Phase::Open));
    assert_eq!(t.reason, TransitionReason::ErrorPercentage);
    assert_eq!(b.try_acquire(T0 + 2 * MS, 0), Err(ShortCircuit::Open));
}

#[test]
fn no_trip_below_error_threshold() {
    let mut b = cb(Config::default());
    calls(&mut b, T0, 11, 9);
    assert_eq!(b.health(T0).total, 20);
    assert!(b.health(T0).error_percentage < 50.0);
    assert_eq!(b.phase(), Phase::Closed);
}

#[test]
fn no_trip_under_low_volume() {
    let mut b = cb(Config::default());
    calls(&mut b, T0, 0, 19);
    assert_eq!(
        b.phase(),
        Phase::Closed,
        "19 failures < volume threshold 20"
    );
    calls(&mut b, T0, 0, 1);
    assert_eq!(b.phase(), Phase::Open);
}

#[test]
fn failures_outside_the_rolling_window_do_not_count() {
    let mut b = cb(Config::default());
    calls(&mut b, T0, 0, 19);
    // 10 s later the window has rolled past all of them.
    calls(&mut b, T0 + 10_000 * MS, 0, 1);
    assert_eq!(b.health(T0 + 10_000 * MS).total, 1);
    assert_eq!(b.phase(), Phase::Closed);
}

#[test]
fn timeouts_and_rejections_count_as_errors() {
    let mut b = cb(Config::default());
    for _ in 0..10 {
        call(&mut b, T0, Outcome::Success).unwrap();
        call(&mut b, T0, Outcome::Timeout).unwrap();
    }
    assert_eq!(b.phase(), Phase::Open);

    let mut b = cb(Config::default());
    calls(&mut b, T0, 10, 0);
    for _ in 0..9 {
        b.record_event(EventKind::SemaphoreRejected, T0, 0);
    }
    assert_eq!(b.phase(), Phase::Closed);
    b.record_event(EventKind::ThreadPoolRejected, T0, 0);
    assert_eq!(b.phase(), Phase::Open);
}

#[test]
fn bad_requests_and_short_circuits_are_not_errors() {
    let mut b = cb(Config::default());
    calls(&mut b, T0, 5, 0);
    for _ in 0..30 {
        call(&mut b, T0, Outcome::BadRequest).unwrap();
    }
    let h = b.health(T0);
    assert_eq!((h.total, h.errors), (5, 0));
    assert_eq!(h.count(EventKind::BadRequest), 30);
    assert_eq!(b.phase(), Phase::Closed);

    let mut b = cb(Config::default());
    calls(&mut b, T0, 0, 20);
    for _ in 0..100 {
        assert!(b.try_acquire(T0, 0).is_err());
    }
    let h = b.health(T0);
    assert_eq!(h.total, 20, "short-circuits are not in the total");
    assert_eq!(h.count(EventKind::ShortCircuited), 100);
}

#[test]
fn single_probe_after_sleep_window_then_close() {
    let mut b = cb(Config::default());
    calls(&mut b, T0, 0, 20);
    assert_eq!(b.next_deadline(), Some(T0 + 5_000 * MS));
    assert_eq!(b.try_acquire(T0 + 4_999 * MS, 0), Err(ShortCircuit::Open));
    let probe = b
        .try_acquire(T0 + 5_000 * MS, 0)
        .expect("probe after sleep window");
    assert!(probe.is_probe());
    assert_eq!(b.phase(), Phase::HalfOpen);
    assert_eq!(
        b.try_acquire(T0 + 5_000 * MS, 0),
        Err(ShortCircuit::ProbesExhausted),
        "only one probe"
    );
    let t = b
        .record(probe, Outcome::Success, T0 + 5_010 * MS, 0)
        .unwrap();
    assert_eq!((t.from, t.to), (Phase::HalfOpen, Phase::Closed));
    assert_eq!(b.health(T0 + 5_010 * MS).total, 0, "window reset on close");
    call(&mut b, T0 + 5_011 * MS, Outcome::Success).unwrap();
}

#[test]
fn several_sleep_windows_before_closing() {
    let mut b = cb(Config::default());
    calls(&mut b, T0, 0, 20);
    let mut now = T0;
    for _ in 0..3 {
        now += 5_000 * MS;
        let p = b.try_acquire(now, 0).expect("probe");
        let t = b.record(p, Outcome::Failure, now + MS, 0).unwrap();
        assert_eq!(
            (t.to, t.reason),
            (Phase::Open, TransitionReason::ProbeFailed)
        );
        now += MS;
        assert_eq!(b.try_acquire(now + 4_999 * MS, 0), Err(ShortCircuit::Open));
    }
    now += 5_000 * MS;
    let p = b.try_acquire(now, 0).expect("probe");
    b.record(p, Outcome::Success, now, 0);
    assert_eq!(b.phase(), Phase::Closed);
}

#[test]
fn consecutive_failures_rule() {
    let mut c = Config::default();
    c.breaker.error_percentage.enabled = false;
    c.breaker.consecutive_failures.enabled = true;
    c.breaker.consecutive_failures.threshold = 3;
    let mut b = cb(c);
    calls(&mut b, T0, 0, 2);
    call(&mut b, T0, Outcome::Success).unwrap();
    calls(&mut b, T0, 0, 2);
    assert_eq!(b.phase(), Phase::Closed, "a success resets the run");
    call(&mut b, T0, Outcome::Timeout).unwrap();
    assert_tripped(&mut b, TransitionReason::ConsecutiveFailures);
}

#[test]
fn slow_call_rate_rule() {
    let mut c = Config::default();
    c.breaker.error_percentage.enabled = false;
    c.breaker.slow_call.enabled = true;
    c.breaker.slow_call.duration_threshold_ms = 100;
    c.breaker.slow_call.rate_threshold_percentage = 50.0;
    c.breaker.slow_call.request_volume_threshold = 10;
    let mut b = cb(c);
    for i in 0..10u64 {
        let p = b.try_acquire(T0, 0).unwrap();
        let latency = if i < 4 { 150 * MS } else { 10 * MS };
        b.record(p, Outcome::Success, T0 + latency, 0);
    }
    assert_eq!(b.phase(), Phase::Closed, "40 % slow");
    let p = b.try_acquire(T0, 0).unwrap();
    b.record(p, Outcome::Success, T0 + 100 * MS, 0);
    assert_eq!(b.health(T0 + 100 * MS).slow, 5);
    assert_eq!(b.phase(), Phase::Closed, "5 of 11 slow");
    let p = b.try_acquire(T0, 0).unwrap();
    b.record(p, Outcome::Success, T0 + 200 * MS, 0);
    assert_tripped(&mut b, TransitionReason::SlowCallRate); // 6 of 12 slow
}

#[test]
fn slow_probe_counts_as_failed() {
    let mut c = Config::default();
    c.breaker.slow_call.enabled = true;
    c.breaker.slow_call.duration_threshold_ms = 100;
    let mut b = cb(c);
    calls(&mut b, T0, 0, 20);
    let now = T0 + 5_000 * MS;
    let p = b.try_acquire(now, 0).unwrap();
    b.record(p, Outcome::Success, now + 150 * MS, 0);
    assert_eq!(b.phase(), Phase::Open);
}

#[test]
fn adaptive_throttle_rejects_probabilistically_and_ignores_its_own_rejections() {
    let mut c = Config::default();
    c.breaker.error_percentage.enabled = false;
    c.breaker.adaptive_throttle.enabled = true;
    c.breaker.adaptive_throttle.k = 2.0;
    let mut b = cb(c);
    // 10 successes, 90 failures: p = (100 - 2*10) / 101 = 0.792. A draw near 1
    // is never throttled.
    for i in 0..100 {
        let permit = b.try_acquire(T0, u64::MAX).expect("admitted");
        let outcome = if i < 10 {
            Outcome::Success
        } else {
            Outcome::Failure
        };
        b.record(permit, outcome, T0, 0);
    }
    let p = (100.0 - 20.0) / 101.0;
    let below = ((p * 0.99) * (1u64 << 53) as f64) as u64;
    let above = ((p * 1.01) * (1u64 << 53) as f64) as u64;
    // The throttle draws from rand.rotate_left(32) >> 11.
    let rand_for = |u53: u64| (u53 << 11).rotate_right(32);
    assert_eq!(
        b.try_acquire(T0, rand_for(below)),
        Err(ShortCircuit::Throttled)
    );
    let permit = b
        .try_acquire(T0, rand_for(above))
        .expect("admitted above p");
    b.record(permit, Outcome::Success, T0, 0);
    // Its own rejections do not feed back: hammering it changes nothing.
    let before = b.health(T0);
    for _ in 0..1_000 {
        let _ = b.try_acquire(T0, rand_for(0));
    }
    let after = b.health(T0);
    assert_eq!(before.total, after.total);
    assert_eq!(after.count(EventKind::ShortCircuited), 1_001);
    assert_eq!(b.phase(), Phase::Closed, "the throttle has no states");
    // When the backend recovers, the rejection probability falls to zero.
    calls(&mut b, T0 + 11_000 * MS, 10, 0);
    assert!(b.try_acquire(T0 + 11_000 * MS, rand_for(0)).is_ok());
}

#[test]
fn half_open_with_several_probes_and_success_threshold() {
    let mut c = Config::default();
    c.breaker.half_open.permitted_probes = 3;
    c.breaker.half_open.success_threshold = 2;
    let mut b = cb(c);
    calls(&mut b, T0, 0, 20);
    let now = T0 + 5_000 * MS;
    let p1 = b.try_acquire(now, 0).unwrap();
    let p2 = b.try_acquire(now, 0).unwrap();
    let p3 = b.try_acquire(now, 0).unwrap();
    assert_eq!(b.try_acquire(now, 0), Err(ShortCircuit::ProbesExhausted));
    assert!(b.record(p1, Outcome::Success, now, 0).is_none());
    assert_eq!(b.phase(), Phase::HalfOpen);
    let t = b.record(p2, Outcome::Success, now, 0).unwrap();
    assert_eq!(t.to, Phase::Closed);
    // p3 is from the half-open generation: ignored by the breaker.
    assert!(b.record(p3, Outcome::Failure, now, 0).is_none());
    assert_eq!(b.phase(), Phase::Closed);
}

#[test]
fn any_failed_probe_reopens() {
    let mut c = Config::default();
    c.breaker.half_open.permitted_probes = 3;
    c.breaker.half_open.success_threshold = 3;
    let mut b = cb(c);
    calls(&mut b, T0, 0, 20);
    let now = T0 + 5_000 * MS;
    let p1 = b.try_acquire(now, 0).unwrap();
    let p2 = b.try_acquire(now, 0).unwrap();
    b.record(p1, Outcome::Success, now, 0);
    let t = b.record(p2, Outcome::Failure, now, 0).unwrap();
    assert_eq!(t.to, Phase::Open);
}

#[test]
fn hung_probe_lease_expires_and_reopens() {
    let mut c = Config::default();
    c.breaker.half_open.probe_timeout_ms = 2_000;
    let mut b = cb(c);
    calls(&mut b, T0, 0, 20);
    let now = T0 + 5_000 * MS;
    let hung = b.try_acquire(now, 0).unwrap();
    assert_eq!(b.next_deadline(), Some(now + 2_000 * MS));
    assert!(b.poll(now + 1_999 * MS, 0).is_none());
    let t = b.poll(now + 2_000 * MS, 0).unwrap();
    assert_eq!(
        (t.to, t.reason),
        (Phase::Open, TransitionReason::ProbeLeaseExpired)
    );
    // The hung probe's late answer is from an old generation: ignored.
    assert!(b
        .record(hung, Outcome::Success, now + 3_000 * MS, 0)
        .is_none());
    assert_eq!(b.phase(), Phase::Open);
    // Next sleep window, a new probe gets through and can close.
    let later = now + 2_000 * MS + 5_000 * MS;
    let p = b.try_acquire(later, 0).unwrap();
    b.record(p, Outcome::Success, later, 0);
    assert_eq!(b.phase(), Phase::Closed);
}

#[test]
fn late_results_from_earlier_generations_are_ignored() {
    let mut b = cb(Config::default());
    let old = b.try_acquire(T0, 0).unwrap();
    calls(&mut b, T0, 0, 20);
    assert_eq!(b.phase(), Phase::Open);
    let now = T0 + 5_000 * MS;
    let _probe = b.try_acquire(now, 0).unwrap();
    // A success from the closed generation must not close the breaker.
    assert!(b.record(old, Outcome::Success, now, 0).is_none());
    assert_eq!(b.phase(), Phase::HalfOpen);
}

#[test]
fn exponential_schedule_grows_caps_and_resets_after_close() {
    let mut c = Config::default();
    c.breaker.open.schedule = OpenSchedule::Exponential;
    c.breaker.open.sleep_window_ms = 1_000;
    c.breaker.open.multiplier = 2.0;
    c.breaker.open.max_ms = 5_000;
    let mut b = cb(c);
    calls(&mut b, T0, 0, 20);
    let mut now = T0;
    let mut seen = vec![];
    for _ in 0..5 {
        let until = b.state().open_until();
        seen.push((until - now) / MS);
        now = until;
        let p = b.try_acquire(now, 0).unwrap();
        b.record(p, Outcome::Failure, now, 0);
    }
    assert_eq!(seen, vec![1_000, 2_000, 4_000, 5_000, 5_000]);
    now = b.state().open_until();
    let p = b.try_acquire(now, 0).unwrap();
    b.record(p, Outcome::Success, now, 0);
    assert_eq!(b.state().open_step(), 0);
    calls(&mut b, now, 0, 20);
    assert_eq!(b.state().open_until() - now, 1_000 * MS, "schedule reset");
}

#[test]
fn ladder_schedule_and_jitter() {
    let mut c = Config::default();
    c.breaker.open.schedule = OpenSchedule::Ladder;
    c.breaker.open.ladder_ms = vec![5_000, 10_000, 60_000, 300_000];
    let steps: Vec<u64> = (0..6)
        .map(|s| open_duration_ns(&c.breaker.open, s, 0) / MS)
        .collect();
    // rand = 0 with no jitter: exact steps.
    assert_eq!(
        steps,
        vec![5_000, 10_000, 60_000, 300_000, 300_000, 300_000]
    );
    c.breaker.open.jitter_percentage = 20.0;
    let lo = open_duration_ns(&c.breaker.open, 0, 0) / MS;
    let hi = open_duration_ns(&c.breaker.open, 0, u64::MAX) / MS;
    let mid = open_duration_ns(&c.breaker.open, 0, 1 << 63) / MS;
    assert_eq!(lo, 4_000);
    assert!((5_999..=6_000).contains(&hi), "{hi}");
    assert_eq!(mid, 5_000);
}

#[test]
fn slow_start_ramps_admission_after_close() {
    let mut c = Config::default();
    c.breaker.slow_start.ramp_ms = 10_000;
    c.breaker.slow_start.initial_percentage = 10.0;
    let mut b = cb(c);
    calls(&mut b, T0, 0, 20);
    let closed = T0 + 5_000 * MS;
    let p = b.try_acquire(closed, 0).unwrap();
    b.record(p, Outcome::Success, closed, 0);
    assert_eq!(b.phase(), Phase::Closed);
    let u = |x: f64| ((x * (1u64 << 53) as f64) as u64) << 11;
    // Right after closing 10 % get through.
    assert!(b.try_acquire(closed, u(0.05)).is_ok());
    assert_eq!(b.try_acquire(closed, u(0.2)), Err(ShortCircuit::SlowStart));
    // Halfway: 55 %.
    let half = closed + 5_000 * MS;
    assert!(b.try_acquire(half, u(0.5)).is_ok());
    assert_eq!(b.try_acquire(half, u(0.6)), Err(ShortCircuit::SlowStart));
    // After the ramp everything passes.
    assert!(b.try_acquire(closed + 10_000 * MS, u(0.999)).is_ok());
    assert_eq!(b.state().ramp_started_at(), None);
}

#[test]
fn forced_open_rejects_everything() {
    let mut c = Config::default();
    c.breaker.mode = BreakerMode::ForcedOpen;
    let mut b = cb(c);
    assert_eq!(b.try_acquire(T0, 0), Err(ShortCircuit::ForcedOpen));
    assert_eq!(b.health(T0).count(EventKind::ShortCircuited), 1);
}

#[test]
fn forced_closed_admits_everything_but_keeps_computing() {
    let mut c = Config::default();
    c.breaker.mode = BreakerMode::ForcedClosed;
    let mut b = cb(c);
    calls(&mut b, T0, 0, 50);
    assert_eq!(b.phase(), Phase::Closed);
    assert_eq!(b.health(T0).errors, 50);
    assert_eq!(b.health(T0).error_percentage, 100.0);
}

#[test]
fn disabled_breaker_is_a_noop_but_metrics_still_count() {
    let mut c = Config::default();
    c.breaker.mode = BreakerMode::Disabled;
    let mut b = cb(c);
    calls(&mut b, T0, 0, 50);
    assert_eq!(b.phase(), Phase::Closed);
    assert!(b.take_transition().is_none());
    assert_eq!(b.window().cumulative_count(EventKind::Failure), 50);
}

#[test]
fn metrics_only_runs_the_state_machine_but_admits_everything() {
    let mut c = Config::default();
    c.breaker.mode = BreakerMode::MetricsOnly;
    let mut b = cb(c);
    calls(&mut b, T0, 0, 20);
    assert_eq!(b.phase(), Phase::Open, "transition is reported");
    for _ in 0..5 {
        call(&mut b, T0 + MS, Outcome::Failure).expect("still admitted");
    }
    assert_eq!(b.state().shadow_rejections(), 5);
    assert_eq!(b.health(T0 + MS).count(EventKind::ShortCircuited), 0);
}

#[test]
fn clock_stepping_backwards_is_no_time_passing() {
    let mut b = cb(Config::default());
    calls(&mut b, T0 + 3_000 * MS, 0, 20);
    assert_eq!(b.phase(), Phase::Open);
    // The clock jumps back 3 s: nothing panics, nothing expires, still open.
    assert_eq!(b.try_acquire(T0, 0), Err(ShortCircuit::Open));
    assert!(b.poll(0, 0).is_none());
    let p = b.try_acquire(T0 + 8_000 * MS, 0).unwrap();
    // Recorded "before" it was issued: latency saturates at zero.
    b.record(p, Outcome::Success, 0, 0);
    assert_eq!(b.phase(), Phase::Closed);
    let h = b.health(0);
    assert_eq!(
        h.total, 0,
        "window reset at close; clock back in time is fine"
    );
}

#[test]
fn reconfigure_keeps_state_and_counts() {
    let mut b = cb(Config::default());
    calls(&mut b, T0, 3, 7);
    let mut c = Config::default();
    c.metrics.rolling_window_ms = 20_000;
    c.metrics.rolling_buckets = 40;
    c.breaker.error_percentage.request_volume_threshold = 5;
    b.reconfigure(c);
    let h = b.health(T0);
    assert_eq!((h.total, h.errors), (10, 7));
    // Tripping now follows the new volume threshold.
    call(&mut b, T0 + MS, Outcome::Failure).unwrap();
    assert_eq!(b.phase(), Phase::Open);
    // And state survives another reconfig.
    b.reconfigure(Config::default());
    assert_eq!(b.phase(), Phase::Open);
}

/// Hystrix evaluates health on every snapshot, resilience4j after every call: a
/// success that brings the volume up to the threshold trips a breaker whose error
/// rate is already at its threshold (found by review: it stayed closed until the
/// next failure, which might never come).
#[test]
fn a_success_that_reaches_the_volume_trips_the_breaker() {
    let mut b = cb(Config::default());
    calls(&mut b, T0, 0, 10);
    calls(&mut b, T0, 9, 0);
    assert_eq!(b.phase(), Phase::Closed, "19 calls: under the volume");
    call(&mut b, T0, Outcome::Success).unwrap();
    assert_eq!(b.phase(), Phase::Open, "20 calls at 50 % errors");
    let t = b.take_transition().unwrap();
    assert_eq!(t.reason, TransitionReason::ErrorPercentage);
}

/// A rate below the threshold stays so as successes arrive: no trip at the volume.
#[test]
fn a_success_reaching_the_volume_under_the_rate_does_not_trip() {
    let mut b = cb(Config::default());
    calls(&mut b, T0, 0, 9);
    calls(&mut b, T0, 11, 0);
    assert_eq!(b.health(T0).total, 20);
    assert_eq!(b.phase(), Phase::Closed);
}

/// opossum's rule (`all_calls`, strictly above) runs on failures only, as opossum does.
#[test]
fn opossum_rule_is_checked_on_errors_only() {
    let mut c = Config::default();
    c.breaker.error_percentage.denominator = Denominator::AllCalls;
    c.breaker.error_percentage.comparison = Comparison::Above;
    let mut b = cb(c);
    calls(&mut b, T0, 0, 11);
    calls(&mut b, T0, 9, 0);
    assert_eq!(b.phase(), Phase::Closed, "20 fires, 55 %: no failure since");
    call(&mut b, T0, Outcome::Failure).unwrap();
    assert_eq!(b.phase(), Phase::Open);
}

/// opossum's rule computes `failures / fires * 100` in floating point: at 7 failures of
/// 100 fires that is 7.000000000000001, over a threshold of 7, and opossum trips; so
/// does this rule now (found by review: computed as `failures * 100 / fires`, exactly 7,
/// it did not).
#[test]
fn opossum_rule_rounds_as_opossum_does() {
    let mut c = Config::default();
    c.breaker.error_percentage.denominator = Denominator::AllCalls;
    c.breaker.error_percentage.comparison = Comparison::Above;
    c.breaker.error_percentage.threshold_percentage = 7.0;
    let mut b = cb(c);
    calls(&mut b, T0, 93, 6);
    assert_eq!(b.phase(), Phase::Closed);
    call(&mut b, T0, Outcome::Failure).unwrap();
    assert_eq!(
        b.phase(),
        Phase::Open,
        "7 / 100 * 100 > 7 in floating point"
    );
}

/// resilience4j checks the slow-call rate after every call: a fast call that brings
/// the executions up to the volume trips at a 50 % slow rate.
#[test]
fn a_fast_call_that_reaches_the_volume_trips_the_slow_call_rule() {
    let mut c = Config::default();
    c.breaker.error_percentage.enabled = false;
    c.breaker.slow_call.enabled = true;
    c.breaker.slow_call.duration_threshold_ms = 100;
    c.breaker.slow_call.rate_threshold_percentage = 50.0;
    c.breaker.slow_call.request_volume_threshold = 10;
    let mut b = cb(c);
    for _ in 0..5 {
        let p = b.try_acquire(T0, 0).unwrap();
        b.record(p, Outcome::Success, T0 + 200 * MS, 0);
    }
    for i in 0..5 {
        assert_eq!(b.phase(), Phase::Closed, "{} executions", 5 + i);
        let p = b.try_acquire(T0 + 300 * MS, 0).unwrap();
        b.record(p, Outcome::Success, T0 + 301 * MS, 0);
    }
    assert_tripped(&mut b, TransitionReason::SlowCallRate);
}

/// A 0 % threshold trips on the first error (or slow call) once the volume is
/// reached — never on none (found by review: the slow-call rule tripped with 0 slow
/// calls).
#[test]
fn zero_thresholds_need_an_error_or_a_slow_call() {
    let mut c = Config::default();
    c.breaker.error_percentage.threshold_percentage = 0.0;
    c.breaker.error_percentage.request_volume_threshold = 5;
    c.breaker.slow_call.enabled = true;
    c.breaker.slow_call.rate_threshold_percentage = 0.0;
    c.breaker.slow_call.request_volume_threshold = 5;
    let mut b = cb(c);
    calls(&mut b, T0, 20, 0);
    b.record_event(EventKind::BadRequest, T0, 0);
    let p = b.try_acquire(T0, 0).unwrap();
    b.record(p, Outcome::BadRequest, T0, 0);
    assert_eq!(b.phase(), Phase::Closed, "no error, no slow call");
    call(&mut b, T0, Outcome::Failure).unwrap();
    assert_eq!(b.phase(), Phase::Open, "the first error");
}

/// Review of the above: errors seen during the warm-up count once it is over, so a
/// success after it that brings the volume up trips (the check during the warm-up
/// returned before it could note them).
#[test]
fn errors_from_the_warm_up_trip_on_the_success_that_reaches_the_volume() {
    let mut c = Config::default();
    c.breaker.warm_up_ms = 1_000;
    let mut b = cb(c);
    calls(&mut b, T0, 0, 10);
    assert_eq!(b.phase(), Phase::Closed, "warming up");
    calls(&mut b, T0 + 1_500 * MS, 9, 0);
    assert_eq!(b.phase(), Phase::Closed, "19 calls");
    call(&mut b, T0 + 1_500 * MS, Outcome::Success).unwrap();
    assert_eq!(b.phase(), Phase::Open, "20 calls at 50 % errors");
}

/// The window before its first bucket leaves (at T0 + 10 s): 100 successes at T0,
/// `failed` failures 5 s later, `ok` successes at 9 s; still closed.
fn before_the_roll(b: &mut CircuitBreaker, failed: u32, ok: u32) {
    calls(b, T0, 100, 0);
    calls(b, T0 + 5_000 * MS, 0, failed);
    calls(b, T0 + 9_000 * MS, ok, 0);
    assert_eq!(b.phase(), Phase::Closed);
}

/// Calls leaving the window can raise its error rate with no new error: the next
/// success runs the rules (resilience4j checks after every call, Hystrix on every
/// health snapshot). Before, the breaker stayed closed at 50 % until the next error.
#[test]
fn a_success_after_calls_left_the_window_trips_at_the_rate() {
    for cold in [false, true] {
        let mut c = Config::default();
        // The slow-call rule (never met here) sends every success down the full path.
        c.breaker.slow_call.enabled = cold;
        c.breaker.slow_call.duration_threshold_ms = 60_000;
        let mut b = cb(c);
        before_the_roll(&mut b, 10, 9);
        assert_eq!(b.phase(), Phase::Closed, "10 errors in 119 calls");
        // 10 s on, the first bucket (100 successes) leaves: 10 errors in 20 calls.
        call(&mut b, T0 + 10_500 * MS, Outcome::Success).unwrap();
        assert_eq!(b.health(T0 + 10_500 * MS).total, 20);
        assert_tripped(&mut b, TransitionReason::ErrorPercentage);
    }
}

/// A roll that drops calls from a window whose rate stays under the threshold trips
/// nothing, and opossum's rule (checked on errors only) ignores rolls.
#[test]
fn calls_leaving_the_window_trip_nothing_under_the_rate_or_with_opossums_rule() {
    let mut b = cb(Config::default());
    before_the_roll(&mut b, 9, 10);
    call(&mut b, T0 + 10_500 * MS, Outcome::Success).unwrap();
    assert_eq!(b.phase(), Phase::Closed, "9 errors in 20 calls");

    let mut c = Config::default();
    c.breaker.error_percentage.denominator = Denominator::AllCalls;
    c.breaker.error_percentage.comparison = Comparison::Above;
    let mut b = cb(c);
    before_the_roll(&mut b, 11, 9);
    call(&mut b, T0 + 10_500 * MS, Outcome::Success).unwrap();
    assert_eq!(
        b.phase(),
        Phase::Closed,
        "opossum: no failure since the roll"
    );
    call(&mut b, T0 + 10_500 * MS, Outcome::Failure).unwrap();
    assert_eq!(b.phase(), Phase::Open);
}

/// The adaptive throttle reads the window at admission (which rolls it): the success
/// recorded next still runs the rules.
#[test]
fn a_roll_made_by_the_throttles_admission_read_still_checks() {
    for throttle in [false, true] {
        let mut c = Config::default();
        c.breaker.adaptive_throttle.enabled = throttle;
        let mut b = cb(c);
        before_the_roll(&mut b, 11, 9);
        assert_eq!(b.phase(), Phase::Closed);
        // rand = MAX: the throttle's draw (p = 2/21 at 11 errors in 20) admits.
        let now = T0 + 10_500 * MS;
        let p = b.try_acquire(now, u64::MAX).expect("admitted");
        b.record(p, Outcome::Success, now, u64::MAX);
        assert_eq!(b.health(now).total, 21, "11 errors in 21 = 52 %");
        assert_eq!(b.phase(), Phase::Open, "throttle={throttle}");
    }
}

/// opossum's `all_calls` rule is checked on errors only, also when another rule makes
/// a success check.
#[test]
fn opossums_rule_never_trips_on_a_success_with_the_slow_call_rule_on() {
    for slow_rule in [false, true] {
        let mut c = Config::default();
        c.breaker.error_percentage.denominator = Denominator::AllCalls;
        c.breaker.error_percentage.comparison = Comparison::AtOrAbove;
        c.breaker.slow_call.enabled = slow_rule; // never met: 60 s threshold
        let mut b = cb(c);
        before_the_roll(&mut b, 10, 9);
        call(&mut b, T0 + 10_500 * MS, Outcome::Success).unwrap();
        assert_eq!(
            b.phase(),
            Phase::Closed,
            "slow_call={slow_rule}: all_calls is checked on errors only"
        );
    }
}

/// A bucket leaving that holds no call whose leaving can raise a rate (here a bad
/// request) makes no success check: a kept window over the threshold (opossum's
/// `reset_window_on_close: false`) still waits for the next failure.
#[test]
fn only_calls_that_can_raise_a_rate_leaving_make_a_success_check() {
    for with_bad_request in [false, true] {
        let mut c = Config::default();
        c.breaker.half_open.reset_window_on_close = false;
        let mut b = cb(c);
        if with_bad_request {
            call(&mut b, T0, Outcome::BadRequest).unwrap();
        }
        calls(&mut b, T0 + 1_000 * MS, 8, 0);
        calls(&mut b, T0 + 2_000 * MS, 0, 12);
        assert_eq!(b.phase(), Phase::Open, "12 errors in 20");
        call(&mut b, T0 + 7_000 * MS, Outcome::Success).unwrap(); // probe
        assert_eq!(b.phase(), Phase::Closed, "kept window: 9 ok, 12 failed");
        // 10 s after T0 the bucket at T0 leaves (empty, or one bad request).
        call(&mut b, T0 + 10_000 * MS, Outcome::Success).unwrap();
        assert_eq!(b.health(T0 + 10_000 * MS).total, 22);
        assert_eq!(
            b.phase(),
            Phase::Closed,
            "bad_request={with_bad_request}: same counts, a success never trips a kept window"
        );
    }
}

/// A reconfigure that shrinks the window (calls leave it) or lowers the threshold
/// under the window's rate: the next success trips.
#[test]
fn a_reconfigured_window_over_the_threshold_trips_on_the_next_success() {
    // (a) the window shrinks from 20 s to 10 s: 100 successes leave it.
    let mut c = Config::default();
    c.metrics.rolling_window_ms = 20_000;
    c.metrics.rolling_buckets = 20;
    c.metrics.percentile_window_ms = 20_000;
    c.metrics.percentile_buckets = 20;
    let mut b = cb(c.clone());
    calls(&mut b, T0, 100, 0);
    calls(&mut b, T0 + 15_000 * MS, 0, 11);
    calls(&mut b, T0 + 16_000 * MS, 9, 0);
    let mut c2 = c.clone();
    c2.metrics.rolling_window_ms = 10_000;
    c2.metrics.rolling_buckets = 10;
    c2.validate().unwrap();
    b.reconfigure(c2);
    call(&mut b, T0 + 16_100 * MS, Outcome::Success).unwrap();
    assert_eq!(b.health(T0 + 16_100 * MS).total, 21, "11 errors in 21");
    let shrunk = b.phase();
    // (b) the threshold drops from 60 % to 50 % over a window at 55 %.
    let mut c = Config::default();
    c.breaker.error_percentage.threshold_percentage = 60.0;
    let mut b = cb(c.clone());
    calls(&mut b, T0, 9, 11);
    let mut c2 = c;
    c2.breaker.error_percentage.threshold_percentage = 50.0;
    b.reconfigure(c2);
    call(&mut b, T0 + 100 * MS, Outcome::Success).unwrap();
    assert_eq!((shrunk, b.phase()), (Phase::Open, Phase::Open));
}

/// A roll made by recording a non-call event (a fallback) still makes the next
/// success check.
#[test]
fn a_roll_made_by_a_non_call_event_still_checks() {
    let mut b = cb(Config::default());
    before_the_roll(&mut b, 11, 9);
    b.record_event(EventKind::FallbackSuccess, T0 + 10_200 * MS, 0);
    call(&mut b, T0 + 10_500 * MS, Outcome::Success).unwrap();
    assert_eq!(b.phase(), Phase::Open);
}

// ---- the standalone breaker's accessors (found by mutation testing) -------------

/// `config` is the config in force (the latest `reconfigure`'s); `percentiles_ns`
/// reports the calls' latencies; `memory_bytes` is the breaker state plus its window,
/// for the breaker and its circuit alike, and grows with the window's buckets.
#[test]
fn the_standalone_breaker_reports_its_config_latencies_and_size() {
    let mut b = cb(Config::default());
    assert_eq!(b.config(), &Config::default());
    for ms in [10, 20, 30, 40] {
        let p = b.try_acquire(T0, 0).unwrap();
        b.record(p, Outcome::Success, T0 + ms * MS, 0);
    }
    let p = b.percentiles_ns(T0 + 50 * MS);
    assert_eq!((p.count, p.p0, p.p100), (4, 10 * MS, 40 * MS));
    assert_eq!(p.mean, (25 * MS) as f64);
    assert_eq!(p, b.snapshot(T0 + 50 * MS).latency_ns);

    let size = |b: &CircuitBreaker| {
        let inline = std::mem::size_of::<fusewire_core::BreakerState>();
        assert_eq!(b.memory_bytes(), inline + b.window().memory_bytes());
        assert_eq!(b.memory_bytes(), b.circuit().memory_bytes());
        b.memory_bytes()
    };
    let small = size(&b);
    let big = Config::from_json(r#"{"metrics": {"rolling_buckets": 1000}}"#).unwrap();
    b.reconfigure(big.clone());
    assert_eq!(b.config(), &big);
    assert!(size(&b) > small);
}

/// Found by a review of the strategies (2026-12-07): `permitted_probes` lowered while
/// half-open, below the probes already issued, with none of them out, left no turn to
/// take and none to come back: the breaker refused every call, half-open, for good.
/// The turn starts over (a new generation of probes).
#[test]
fn probes_lowered_mid_half_open_do_not_wedge_it() {
    let mut c = Config::default();
    c.breaker.half_open.permitted_probes = 2;
    c.breaker.half_open.success_threshold = 2;
    let mut b = cb(c.clone());
    calls(&mut b, T0, 0, 20);
    let now = T0 + 5_000 * MS;
    call(&mut b, now, Outcome::Success).expect("the first probe");
    assert_eq!(b.phase(), Phase::HalfOpen);
    c.breaker.half_open.permitted_probes = 1;
    c.breaker.half_open.success_threshold = 1;
    c.validate().expect("valid");
    b.reconfigure(c);
    call(&mut b, now + MS, Outcome::Success).expect("a probe under the new config");
    assert_eq!(b.phase(), Phase::Closed);
}

/// Found by a review of the strategies (2026-12-07): a sleep window changed while open
/// took effect only at the next trip. As Hystrix reads it at each check, the open
/// period runs on the new one from when it began.
#[test]
fn a_new_sleep_window_applies_to_the_open_period() {
    let mut c = Config::default();
    c.breaker.open.sleep_window_ms = 300_000;
    let mut b = cb(c.clone());
    calls(&mut b, T0, 0, 20);
    assert_eq!(b.phase(), Phase::Open);
    let now = T0 + 10_000 * MS;
    assert_eq!(call(&mut b, now, Outcome::Success), Err(ShortCircuit::Open));
    c.breaker.open.sleep_window_ms = 5_000;
    b.reconfigure(c.clone());
    call(&mut b, now, Outcome::Success).expect("5 s passed since it opened: a probe");
    assert_eq!(b.phase(), Phase::Closed);
    // Lengthened, it holds longer; an unchanged schedule leaves the period alone.
    calls(&mut b, now, 0, 20);
    c.breaker.open.sleep_window_ms = 60_000;
    b.reconfigure(c.clone());
    assert_eq!(
        call(&mut b, now + 30_000 * MS, Outcome::Success),
        Err(ShortCircuit::Open)
    );
    b.reconfigure(c);
    call(&mut b, now + 60_000 * MS, Outcome::Success).expect("60 s: a probe");
}
