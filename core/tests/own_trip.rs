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

const SHORT: &str = r#"{"breaker": {"error_percentage": {"request_volume_threshold": 5, "threshold_percentage": 50}, "open": {"sleep_window_ms": 500}}}"#;

/// A lone process, tripped, whose open period is over: returns its key with a probe
/// running and no store answer pending.
fn probing(h: &mut Host) -> (KeyId, Permit) {
    let k = fresh_key(h);
    assert_eq!(failures_until_refused(h, k, 0), 4);
    h.advance(1_000);
    let _ = transitions(h, 0);
    for _ in 0..20 {
        if let Start::Running(p) = h.start(0, k) {
            h.deliver();
            assert!(h.pending.is_empty());
            return (k, p);
        }
        h.advance(100);
    }
    panic!("no probe ran");
}

/// Found by review (Redis 200 ms away): a failed probe's `open` came a round trip
/// after its `failure` (its fallback ran while the breaker read half-open, where
/// opossum emits `open` first), and a probe that closed the breaker was followed by
/// refused calls until the write landed. The probe's result moves the local breaker
/// at once; the write makes it the fleet's.
#[test]
fn a_probe_result_moves_a_lone_process_before_its_write_lands() {
    let mut h = Host::new(Mode::Async(1), SHORT);
    let (k, p) = probing(&mut h);
    let _ = transitions(&mut h, 0);
    let now = h.now;
    h.engines[0].complete(p, Outcome::Failure, now, 0);
    assert_eq!(transitions(&mut h, 0), vec![(Phase::HalfOpen, Phase::Open)]);
    assert!(!h.call(0, k, Outcome::Success), "open at once");
    h.advance(300);
    assert_eq!(
        h.engines[0].shared_view(k).map(|v| v.breaker.phase()),
        Some(Phase::Open),
        "the write reopened the fleet's breaker"
    );
    assert_eq!(transitions(&mut h, 0), vec![]);

    let mut h = Host::new(Mode::Async(1), SHORT);
    let (k, p) = probing(&mut h);
    let _ = transitions(&mut h, 0);
    let now = h.now;
    h.engines[0].complete(p, Outcome::Success, now, 0);
    assert_eq!(
        transitions(&mut h, 0),
        vec![(Phase::HalfOpen, Phase::Closed)]
    );
    assert!(h.call(0, k, Outcome::Success), "closed at once");
    h.advance(300);
    assert_eq!(
        h.engines[0].shared_view(k).map(|v| v.breaker.phase()),
        Some(Phase::Closed)
    );
    assert!(h.call(0, k, Outcome::Success));
    assert_eq!(transitions(&mut h, 0), vec![]);
}

/// Two probes of one process reach a success threshold of two together, before the
/// write carrying them lands.
#[test]
fn a_lone_processs_probes_close_it_together() {
    const TWO: &str = r#"{"breaker": {"error_percentage": {"request_volume_threshold": 5, "threshold_percentage": 50}, "open": {"sleep_window_ms": 500},
        "half_open": {"permitted_probes": 2, "success_threshold": 2}}}"#;
    let mut h = Host::new(Mode::Async(1), TWO);
    let (k, p1) = probing(&mut h);
    let mut p2 = None;
    for _ in 0..20 {
        if let Start::Running(p) = h.start(0, k) {
            p2 = Some(p);
            break;
        }
        h.advance(100);
    }
    let p2 = p2.expect("a second probe");
    h.deliver();
    assert!(h.pending.is_empty());
    let _ = transitions(&mut h, 0);
    let now = h.now;
    h.engines[0].complete(p1, Outcome::Success, now, 0);
    assert_eq!(transitions(&mut h, 0), vec![]);
    h.engines[0].complete(p2, Outcome::Success, now, 0);
    assert_eq!(
        transitions(&mut h, 0),
        vec![(Phase::HalfOpen, Phase::Closed)]
    );
    h.advance(300);
    assert_eq!(
        h.engines[0].shared_view(k).map(|v| v.breaker.phase()),
        Some(Phase::Closed)
    );
    assert_eq!(transitions(&mut h, 0), vec![]);
}
