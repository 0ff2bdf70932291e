//! A process on an asynchronous store (Redis) trips on its own failures as soon as a
//! local breaker would, though its writes are still on their way: its view of the
//! shared state lags its own outcomes by a round trip or more (found by review: a
//! single process needed about ten failures where the rule said five).

mod common;
use common::*;
use fusewire_core::*;

const CFG: &str = r#"{"breaker": {"error_percentage": {"request_volume_threshold": 5, "threshold_percentage": 50}, "open": {"sleep_window_ms": 60000}}}"#;

/// Calls failing back to back while no store answer comes back; returns how many ran.
fn failures_until_refused(h: &mut Host, k: KeyId, answer_every: usize) -> usize {
    for n in 0..50 {
        if !h.call(0, k, Outcome::Failure) {
            return n;
        }
        if answer_every != 0 && (n + 1) % answer_every == 0 {
            h.deliver();
        }
    }
    50
}

fn fresh_key(h: &mut Host) -> KeyId {
    let k = h.key(0, "k");
    // The first read answers: the view is fresh and decides.
    h.advance(300);
    assert!(h.call(0, k, Outcome::Success));
    h.advance(1_500);
    assert!(h.engines[0].shared_view(k).is_some(), "a fresh view");
    k
}

/// Where a local breaker trips on the same calls: one success and four failures (4
/// of 5 errors, volume 5).
fn local_reference() -> usize {
    let mut h = Host::new(Mode::Local, CFG);
    let k = h.key(0, "k");
    assert!(h.call(0, k, Outcome::Success));
    let n = failures_until_refused(&mut h, k, 0);
    assert_eq!(n, 4);
    n
}

#[test]
fn a_lone_process_trips_on_its_own_failures_with_its_writes_out() {
    let mut h = Host::new(Mode::Async(1), CFG);
    let k = fresh_key(&mut h);
    let ran = failures_until_refused(&mut h, k, 0);
    assert_eq!(
        ran,
        local_reference(),
        "the rule trips where a local breaker does"
    );
    assert_eq!(h.phase(0, k), Phase::Open);
    let t = transitions(&mut h, 0);
    assert_eq!(t, vec![(Phase::Closed, Phase::Open)]);
    // The write carrying them lands: the fleet's state is open too, no second event.
    h.advance(1_000);
    assert_eq!(
        h.engines[0].shared_view(k).map(|v| v.breaker.phase()),
        Some(Phase::Open)
    );
    assert_eq!(h.phase(0, k), Phase::Open);
    assert!(!h.call(0, k, Outcome::Success));
    assert_eq!(transitions(&mut h, 0), vec![]);
}

#[test]
fn a_lone_process_trips_at_the_rule_whatever_the_answers_interleave() {
    for every in 1..=6 {
        let mut h = Host::new(Mode::Async(1), CFG);
        let k = fresh_key(&mut h);
        let ran = failures_until_refused(&mut h, k, every);
        assert_eq!(ran, local_reference(), "answers after every {every} calls");
    }
}

#[test]
fn the_fleet_still_outvotes_a_trip_its_successes_dilute() {
    // Worker 1's successes are in the store; worker 0's five failures are not enough.
    let mut h = Host::new(Mode::Async(2), CFG);
    let k0 = fresh_key(&mut h);
    let k1 = h.key(1, "k");
    h.advance(300);
    for _ in 0..20 {
        assert!(h.call(1, k1, Outcome::Success));
    }
    h.advance(2_500);
    assert!(h.call(0, k0, Outcome::Success));
    h.advance(2_500);
    for _ in 0..5 {
        assert!(h.call(0, k0, Outcome::Failure));
    }
    assert_eq!(h.phase(0, k0), Phase::Closed, "5 errors in 27 calls");
    assert_eq!(transitions(&mut h, 0), vec![]);
}

/// What a shared key's snapshot counts (`stats` in the npm package): the kinds the
/// store shares are the fleet's window as this worker knows it — its own outcomes
/// count at once, not when their write lands, and never go down when it does — and
/// the rest (fallbacks, cache hits) are its own (found by review: `fallbacks` and
/// `cacheHits` read 0 once the view decided). Refusals its local breaker decided
/// ahead of the store stay its own: in the fleet's window they would dilute the
/// error rate (opossum's `all_calls` denominator counts them).
#[test]
fn a_shared_keys_snapshot_counts_its_own_outcomes_at_once_and_keeps_its_own_kinds() {
    let mut h = Host::new(Mode::Async(1), CFG);
    let k = fresh_key(&mut h);
    let count = |h: &Host, kind: EventKind| h.snapshot(0, k).health.count(kind);
    assert_eq!(count(&h, EventKind::Success), 1, "the flushed success");
    for _ in 0..3 {
        assert!(h.call(0, k, Outcome::Success));
    }
    let now = h.now;
    h.engines[0].record(k, EventKind::FallbackSuccess, now);
    h.engines[0].record(k, EventKind::ResponseFromCache, now);
    assert_eq!(
        count(&h, EventKind::Success),
        4,
        "its own successes count at once"
    );
    assert_eq!(count(&h, EventKind::FallbackSuccess), 1);
    assert_eq!(count(&h, EventKind::ResponseFromCache), 1);
    // A trip ahead (4 errors of 8), then refusals while its write is out.
    let ran = failures_until_refused(&mut h, k, 0);
    assert_eq!(ran, 4);
    for _ in 0..6 {
        assert!(!h.call(0, k, Outcome::Failure));
    }
    let before = h.snapshot(0, k).health;
    assert_eq!(before.count(EventKind::Failure), 4);
    assert_eq!(before.count(EventKind::ShortCircuited), 7);
    h.advance(1_000);
    assert_eq!(
        h.engines[0].shared_view(k).map(|v| v.breaker.phase()),
        Some(Phase::Open),
        "the write landed"
    );
    let after = h.snapshot(0, k).health;
    assert_eq!(
        after.count(EventKind::ShortCircuited),
        0,
        "the fleet's window"
    );
    for kind in [
        EventKind::Success,
        EventKind::Failure,
        EventKind::FallbackSuccess,
        EventKind::ResponseFromCache,
    ] {
        assert_eq!(after.count(kind), before.count(kind), "{kind:?}");
    }
}
