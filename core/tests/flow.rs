#![allow(clippy::needless_range_loop)]
//! The engine's protected-call flow, on a simulated clock, against local state and
//! shared state (4 workers on one store, Envoy and Kong CAS rules): the same
//! assertions hold in every mode.

mod common;

use common::*;
use fusewire_core::config::BreakerMode;
use fusewire_core::*;

const BASE: &str = r#"{"breaker": {"half_open": {"permitted_probes": 2, "success_threshold": 2}}}"#;

fn running(s: Start) -> Permit {
    match s {
        Start::Running(p) => p,
        other => panic!("expected a running call, got {other:?}"),
    }
}

fn refused(s: Start) -> Refusal {
    match s {
        Start::Refused(r) => r,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Trips with 20 failures spread over the workers.
fn trip(h: &mut Host, keys: &[KeyId]) {
    for i in 0..20 {
        let w = i % h.engines.len();
        assert!(h.call(w, keys[w], Outcome::Failure), "call {i} admitted");
    }
}

#[test]
fn trips_at_the_volume_threshold_and_every_worker_rejects() {
    each_mode(|m| {
        let mut h = Host::new(m, BASE);
        let keys = h.keys("orders");
        for i in 0..19 {
            let w = i % h.engines.len();
            assert!(h.call(w, keys[w], Outcome::Failure));
        }
        assert_eq!(h.phase(0, keys[0]), Phase::Closed, "{m:?}: 19 < 20");
        assert!(h.call(0, keys[0], Outcome::Failure));
        let r = refused(h.start(0, keys[0]));
        assert_eq!(
            r.event,
            EventKind::ShortCircuited,
            "{m:?}: the tripping worker at once"
        );
        h.advance(SYNC_MS); // the other workers within one refresh interval
        for w in 0..h.engines.len() {
            let r = refused(h.start(w, keys[w]));
            assert_eq!(r.event, EventKind::ShortCircuited, "{m:?} worker {w}");
            assert_eq!(r.cause, Cause::ShortCircuit(ShortCircuit::Open));
            assert_eq!(h.phase(w, keys[w]), Phase::Open, "{m:?} worker {w}");
        }
        let opened: Vec<_> = h
            .take_events(0)
            .into_iter()
            .filter_map(|e| match e {
                Event::Transition { transition, .. } => Some(transition),
                _ => None,
            })
            .collect();
        assert!(
            opened.iter().any(|t| t.to == Phase::Open),
            "{m:?}: a transition event: {opened:?}"
        );
    });
}

#[test]
fn half_open_admits_exactly_n_probes_across_workers_then_closes() {
    each_mode(|m| {
        let mut h = Host::new(m, BASE);
        let keys = h.keys("k");
        trip(&mut h, &keys);
        h.advance(5_000);
        // Every worker tries twice; exactly two probes run in the whole process.
        let mut probes = Vec::new();
        for round in 0..2 {
            for w in 0..h.engines.len() {
                match h.start(w, keys[w]) {
                    Start::Running(p) => probes.push((w, p)),
                    Start::Refused(r) => {
                        assert_eq!(
                            r.cause,
                            Cause::ShortCircuit(ShortCircuit::ProbesExhausted),
                            "{m:?} round {round} worker {w}"
                        );
                    }
                    Start::Queued(_) => panic!(),
                }
            }
        }
        assert_eq!(probes.len(), 2, "{m:?}");
        for (w, p) in probes {
            assert_eq!(h.complete(w, p, Outcome::Success), Completion::OnTime);
        }
        for w in 0..h.engines.len() {
            h.drive(w);
        }
        h.advance(SYNC_MS);
        for w in 0..h.engines.len() {
            assert!(
                h.call(w, keys[w], Outcome::Success),
                "{m:?}: closed for worker {w}"
            );
            assert_eq!(h.phase(w, keys[w]), Phase::Closed);
        }
    });
}

#[test]
fn failed_probe_reopens_and_hung_probe_lease_expires() {
    each_mode(|m| {
        let cfg = r#"{"breaker": {"half_open": {"probe_timeout_ms": 1000}},
                      "execution": {"timeout_enabled": false}}"#;
        let mut h = Host::new(m, cfg);
        let keys = h.keys("k");
        trip(&mut h, &keys);
        h.advance(5_000);
        let p = running(h.start(0, keys[0]));
        assert_eq!(h.complete(0, p, Outcome::Failure), Completion::OnTime);
        assert_eq!(
            h.phase(0, keys[0]),
            Phase::Open,
            "{m:?}: failed probe reopens"
        );
        h.advance(5_000);
        let hung = running(h.start(0, keys[0]));
        // The probe never answers: its lease expires and the breaker reopens.
        h.advance(1_100);
        for w in 0..h.engines.len() {
            h.drive(w);
        }
        assert_eq!(
            h.phase(0, keys[0]),
            Phase::Open,
            "{m:?}: hung probe reopens"
        );
        // Its late result never moves the breaker.
        h.complete(0, hung, Outcome::Success);
        assert_eq!(h.phase(0, keys[0]), Phase::Open, "{m:?}");
    });
}

#[test]
fn bad_request_probe_gives_its_turn_back() {
    each_mode(|m| {
        let mut h = Host::new(m, r#"{}"#);
        let keys = h.keys("k");
        trip(&mut h, &keys);
        h.advance(5_000);
        let p = running(h.start(0, keys[0]));
        h.complete(0, p, Outcome::BadRequest);
        assert_eq!(
            h.phase(0, keys[0]),
            Phase::HalfOpen,
            "{m:?}: a 4xx says nothing"
        );
        // The turn is free again: the next call probes and closes.
        let p = running(h.start(0, keys[0]));
        h.complete(0, p, Outcome::Success);
        assert_eq!(h.phase(0, keys[0]), Phase::Closed, "{m:?}");
    });
}

#[test]
fn cancelled_probe_gives_its_turn_back() {
    each_mode(|m| {
        let mut h = Host::new(m, r#"{}"#);
        let keys = h.keys("k");
        trip(&mut h, &keys);
        h.advance(5_000);
        let p = running(h.start(0, keys[0]));
        let now = h.now;
        assert_eq!(h.engines[0].cancel(p, now, 0), Completion::OnTime);
        h.drive(0);
        assert_eq!(h.phase(0, keys[0]), Phase::HalfOpen, "{m:?}");
        let p = running(h.start(0, keys[0]));
        h.complete(0, p, Outcome::Success);
        assert_eq!(h.phase(0, keys[0]), Phase::Closed, "{m:?}");
    });
}

#[test]
fn deadlines_time_out_and_late_results_never_move_the_breaker() {
    each_mode(|m| {
        let mut h = Host::new(m, r#"{"execution": {"timeout_ms": 250}}"#);
        let k = h.key(0, "k");
        let p = running(h.start(0, k));
        assert_eq!(
            h.engines[0].next_deadline().map(|d| d - h.now),
            Some(250 * MS)
        );
        h.advance(200);
        assert!(h
            .take_events(0)
            .iter()
            .all(|e| !matches!(e, Event::TimedOut { .. })));
        h.advance(100);
        let ev = h.take_events(0);
        let timed_out: Vec<_> = ev
            .iter()
            .filter(|e| matches!(e, Event::TimedOut { call, .. } if *call == p.id()))
            .collect();
        assert_eq!(timed_out.len(), 1, "{m:?}: {ev:?}");
        assert_eq!(h.engines[0].in_flight(k), Some(0), "slot freed");
        let s = h.snapshot(0, k);
        assert_eq!(s.cumulative[EventKind::Timeout.index()], 1);
        assert_eq!(h.complete(0, p, Outcome::Failure), Completion::Late);
        assert_eq!(h.engines[0].late_results(k), Some(1));
        // A timed-out call the caller gave up on: no result arrived (found by review).
        let gone = running(h.start(0, k));
        h.advance(300);
        let now = h.now_of(0);
        assert_eq!(h.engines[0].cancel(gone, now, 0), Completion::Late);
        assert_eq!(
            h.engines[0].late_results(k),
            Some(1),
            "{m:?}: a cancel is no result"
        );
        let s = h.snapshot(0, k);
        assert_eq!(
            s.cumulative[EventKind::Failure.index()],
            0,
            "late: not counted as a failure"
        );
    });
}

#[test]
fn a_call_event_comes_before_the_transition_it_caused() {
    // Two calls time out in one poll; the second trips: TimedOut, TimedOut, then the
    // transition (hosts emit opossum's timeout, failure, open, fallback per call).
    let mut h = Host::new(
        Mode::Local,
        r#"{"execution": {"timeout_ms": 100},
            "breaker": {"error_percentage": {"request_volume_threshold": 2}}}"#,
    );
    let k = h.key(0, "k");
    let a = running(h.start(0, k));
    let b = running(h.start(0, k));
    h.advance(150);
    let ev = h.take_events(0);
    let order: Vec<_> = ev
        .iter()
        .filter_map(|e| match e {
            Event::TimedOut { call, .. } if *call == a.id() => Some("a"),
            Event::TimedOut { call, .. } if *call == b.id() => Some("b"),
            Event::Transition { transition, .. } if transition.to == Phase::Open => Some("open"),
            _ => None,
        })
        .collect();
    assert_eq!(order, ["a", "b", "open"], "{ev:?}");
}

/// Found by review: a deadline that saturated at `Nanos::MAX` read as "no deadline".
#[test]
fn a_call_started_near_the_end_of_time_still_times_out() {
    let mut e = Engine::local();
    let p = e
        .add_policy("p", config(r#"{"execution": {"timeout_ms": 100}}"#))
        .unwrap();
    let now = u64::MAX - 50_000_000; // 50 ms before the clock's end
    let k = e.key(p, "k", now).unwrap();
    let permit = running(e.start(k, now, 0));
    assert_eq!(e.next_deadline(), Some(u64::MAX - 1));
    let ev: Vec<Event> = std::iter::from_fn(|| e.poll(u64::MAX - 1, 0)).collect();
    assert!(
        ev.iter().any(|x| matches!(x, Event::TimedOut { .. })),
        "{ev:?}"
    );
    assert_eq!(
        e.complete(permit, Outcome::Success, u64::MAX, 0),
        Completion::Late
    );
}

/// A late poll times calls out in the order their deadlines fell, across policies:
/// the earliest queue is drained only while its head stays before every other's.
#[test]
fn a_late_poll_times_out_across_policies_in_deadline_order() {
    let mut e = Engine::local();
    let mut pids = Vec::new();
    for (name, ms) in [("a", 100), ("b", 150), ("c", 120)] {
        let json = format!(r#"{{"execution": {{"timeout_ms": {ms}}}}}"#);
        pids.push(e.add_policy(name, config(&json)).unwrap());
    }
    let keys: Vec<KeyId> = pids.iter().map(|&p| e.key(p, "k", 0).unwrap()).collect();
    let mut calls = Vec::new();
    // Deadlines: a at 100, 130, 160 ms; b at 150, 180 ms; c at 120, 150 ms (b's 150
    // before c's 150: same deadline, policy order). Started in time order (the
    // engine's clock never goes back).
    for (t, k) in [(0, 0), (0, 1), (0, 2), (30, 0), (30, 1), (30, 2), (60, 0)] {
        let permit = running(e.start(keys[k], t * MS, 0));
        calls.push((permit.id(), k, t));
    }
    let timeouts_ms = [100, 150, 120];
    let mut want: Vec<(u64, usize)> = calls
        .iter()
        .map(|&(_, k, t)| (t + timeouts_ms[k], k))
        .collect();
    want.sort();
    let got: Vec<(u64, usize)> = std::iter::from_fn(|| e.poll(1_000 * MS, 0))
        .filter_map(|ev| match ev {
            Event::TimedOut { call, .. } => calls
                .iter()
                .find(|c| c.0 == call)
                .map(|&(_, k, t)| (t + timeouts_ms[k], k)),
            _ => None,
        })
        .collect();
    assert_eq!(got, want);
}

/// A seeded engine finds every key by name, before and after others expire.
#[test]
fn a_seeded_engine_finds_its_keys() {
    let mut e = Engine::local().with_seed(0x9e37_79b9_7f4a_7c15);
    let p = e
        .add_policy("p", config(r#"{"keys": {"max_keys": 5000}}"#))
        .unwrap();
    let names: Vec<String> = (0..3000).map(|i| format!("c/{i}")).collect();
    let ids: Vec<KeyId> = names.iter().map(|n| e.key(p, n, 0).unwrap()).collect();
    for (n, id) in names.iter().zip(&ids) {
        assert_eq!(e.key(p, n, 0), Some(*id), "{n}");
    }
    let other = e.key(p, &"x".repeat(400), 0).unwrap();
    assert_eq!(e.key(p, &"x".repeat(400), 0), Some(other));
    assert_ne!(e.key(p, &format!("{}y", "x".repeat(399)), 0), Some(other));
}

/// Found by review: at `now == u64::MAX` every failure was counted again on each
/// record, and two failures tripped a breaker whose volume threshold is 4.
#[test]
fn the_end_of_time_counts_each_outcome_once() {
    let mut e = Engine::local();
    let p = e
        .add_policy(
            "p",
            config(r#"{"breaker": {"error_percentage": {"request_volume_threshold": 4}}}"#),
        )
        .unwrap();
    let k = e.key(p, "k", u64::MAX).unwrap();
    for _ in 0..3 {
        let permit = running(e.start(k, u64::MAX, 0));
        e.complete(permit, Outcome::Failure, u64::MAX, 0);
    }
    assert_eq!(e.phase(k), Some(Phase::Closed));
    assert_eq!(
        e.health(k, u64::MAX).map(|h| h.count(EventKind::Failure)),
        Some(3)
    );
    let permit = running(e.start(k, u64::MAX, 0));
    e.complete(permit, Outcome::Failure, u64::MAX, 0);
    assert_eq!(e.phase(k), Some(Phase::Open), "the fourth failure trips it");
    // Polling at the last instant ends (a drain bounded by `now` must stop there),
    // with a call due and without.
    let mut t = Engine::local();
    let p = t
        .add_policy("t", config(r#"{"execution": {"timeout_ms": 100}}"#))
        .unwrap();
    let k = t.key(p, "k", u64::MAX - 1).unwrap();
    let _permit = running(t.start(k, u64::MAX - 1, 0));
    let ev: Vec<Event> = std::iter::from_fn(|| t.poll(u64::MAX, 0)).collect();
    assert!(
        ev.iter().any(|x| matches!(x, Event::TimedOut { .. })),
        "{ev:?}"
    );
    let drained = std::iter::from_fn(|| e.poll(u64::MAX, 0))
        .take(1_000)
        .count();
    assert!(drained < 1_000, "poll at the last instant drains");
}

#[test]
fn stopped_timer_never_times_out() {
    let mut h = Host::new(Mode::Local, r#"{"execution": {"timeout_ms": 100}}"#);
    let k = h.key(0, "k");
    let p = running(h.start(0, k));
    h.engines[0].stop_timer(&p);
    assert_eq!(
        h.engines[0].next_deadline().map(|d| d > h.now + 100 * MS),
        Some(true)
    );
    h.advance(1_000);
    assert!(h.take_events(0).is_empty());
    assert_eq!(h.complete(0, p, Outcome::Success), Completion::OnTime);
}

/// A restarted timer runs its whole timeout from the restart (a request sent in full
/// after a slow upload), also one stopped before; a passed deadline is not restarted.
#[test]
fn restarted_timer_times_out_a_timeout_after_the_restart() {
    for mode in [
        Mode::Local,
        Mode::Shared(fusewire_core::shared::memory::Rules::Envoy, 1),
        Mode::Async(1),
    ] {
        let mut h = Host::new(mode, r#"{"execution": {"timeout_ms": 100}}"#);
        let k = h.key(0, "k");
        let p = running(h.start(0, k));
        h.advance(80);
        h.engines[0].restart_timer(&p, h.now);
        if mode == Mode::Local {
            let next = h.engines[0].next_deadline();
            assert_eq!(
                next,
                Some(h.now + 100 * MS),
                "the old deadline is cleaned off"
            );
        }
        h.advance(90); // 170 ms after the start, 90 after the restart
        assert!(h.take_events(0).is_empty(), "{mode:?}: not timed out");
        h.advance(20);
        let ev = h.take_events(0);
        assert!(
            ev.iter().any(|e| matches!(e, Event::TimedOut { .. })),
            "{mode:?}: {ev:?}"
        );
        assert_eq!(h.complete(0, p, Outcome::Success), Completion::Late);

        // Stopped at the start, started later (a request still being sent).
        let p = running(h.start(0, k));
        h.engines[0].stop_timer(&p);
        h.advance(500);
        h.engines[0].restart_timer(&p, h.now);
        h.advance(90);
        assert!(h.take_events(0).is_empty(), "{mode:?}: not timed out");
        h.advance(20);
        assert_eq!(
            h.complete(0, p, Outcome::Success),
            Completion::Late,
            "{mode:?}"
        );

        let late = running(h.start(0, k));
        h.advance(100);
        h.engines[0].restart_timer(&late, h.now); // its deadline has passed
        h.advance(0);
        assert_eq!(
            h.complete(0, late, Outcome::Success),
            Completion::Late,
            "{mode:?}"
        );
    }
}

#[test]
fn permits_are_move_only_raw_ids_are_generation_checked() {
    let mut h = Host::new(Mode::Local, "{}");
    let k = h.key(0, "k");
    let p = running(h.start(0, k));
    let raw = p.into_raw();
    assert!(raw < 1 << 53);
    assert_eq!(
        h.complete(0, Permit::from_raw(raw), Outcome::Success),
        Completion::OnTime
    );
    assert_eq!(
        h.complete(0, Permit::from_raw(raw), Outcome::Success),
        Completion::Unknown,
        "a second completion is refused"
    );
    let q = running(h.start(0, k));
    assert_ne!(q.id().to_raw(), raw, "a reused slot has a new generation");
    assert_eq!(
        h.complete(0, Permit::from_raw(raw ^ 1 << 40), Outcome::Failure),
        Completion::Unknown
    );
    assert_eq!(
        h.complete(0, Permit::from_raw(u64::MAX), Outcome::Failure),
        Completion::Unknown
    );
    assert_eq!(
        h.engines[0].in_flight(k),
        Some(1),
        "forged ids changed nothing"
    );
    h.complete(0, q, Outcome::Success);
    // A forged key id is refused too.
    let bad = KeyId::from_raw(k.to_raw() + (1 << 21));
    assert_eq!(refused(h.start(0, bad)).cause, Cause::UnknownKey);
}

#[test]
fn semaphore_limit_and_queued_calls_are_not_in_flight() {
    each_mode(|m| {
        let cfg = r#"{"bulkhead": {"isolation": "pool", "max_concurrent": 2, "max_queue": 2,
                      "queue_rejection_threshold": 2, "max_wait_ms": 500},
                      "execution": {"timeout_enabled": false}}"#;
        let mut h = Host::new(m, cfg);
        let k = h.key(0, "k");
        let a = running(h.start(0, k));
        let b = running(h.start(0, k));
        let Start::Queued(t1) = h.start(0, k) else {
            panic!("{m:?}: queued")
        };
        let Start::Queued(t2) = h.start(0, k) else {
            panic!("{m:?}: queued")
        };
        let r = refused(h.start(0, k));
        assert_eq!(
            (r.event, r.cause),
            (EventKind::ThreadPoolRejected, Cause::QueueFull)
        );
        assert_eq!(
            h.engines[0].in_flight(k),
            Some(2),
            "{m:?}: queued calls are not executing"
        );
        assert_eq!(h.engines[0].queued(k), Some(2));
        let (id1, id2) = (t1.id(), t2.id());
        // FIFO: the first waiter gets the first free slot, with the same id.
        h.complete(0, a, Outcome::Success);
        let ev = h.take_events(0);
        let got: Vec<CallId> = ev
            .iter()
            .filter_map(|e| match e {
                Event::Dequeued { permit, .. } => Some(permit.id()),
                _ => None,
            })
            .collect();
        assert_eq!(got, vec![id1], "{m:?}: {ev:?}");
        let first = ev.into_iter().find_map(|e| match e {
            Event::Dequeued { permit, .. } => Some(permit),
            _ => None,
        });
        assert_eq!(h.engines[0].in_flight(k), Some(2));
        assert_eq!(
            h.snapshot(0, k).rolling_max_concurrency,
            2,
            "{m:?}: never 3 or 4"
        );
        // The second waiter expires after max_wait_ms.
        h.advance(600);
        let ev = h.take_events(0);
        assert!(
            ev.iter()
                .any(|e| matches!(e, Event::Refused { call, refusal, .. }
                if *call == id2 && refusal.cause == Cause::WaitExpired
                    && refusal.event == EventKind::ThreadPoolRejected)),
            "{m:?}: {ev:?}"
        );
        assert!(!h.engines[0].cancel_ticket(t2, h.now), "already gone");
        drop(t1);
        h.complete(0, b, Outcome::Success);
        h.complete(0, first.expect("dequeued"), Outcome::Success);
        assert_eq!(h.engines[0].in_flight(k), Some(0), "{m:?}");
    });
}

#[test]
fn pool_without_queue_rejects_as_thread_pool_by_configuration() {
    each_mode(|m| {
        let mut h = Host::new(
            m,
            r#"{"bulkhead": {"isolation": "pool", "max_concurrent": 1}}"#,
        );
        let k = h.key(0, "k");
        let _a = running(h.start(0, k));
        let r = refused(h.start(0, k));
        assert_eq!(
            (r.event, r.cause),
            (EventKind::ThreadPoolRejected, Cause::BulkheadFull),
            "{m:?}"
        );
        let mut h = Host::new(m, r#"{"bulkhead": {"max_concurrent": 1}}"#);
        let k = h.key(0, "k");
        let _a = running(h.start(0, k));
        let r = refused(h.start(0, k));
        assert_eq!(r.event, EventKind::SemaphoreRejected, "{m:?}");
    });
}

/// A probe is never queued: with every slot in use it is refused for the slots
/// (`BulkheadFull`), though the queue has room, and its turn goes back.
#[test]
fn probe_refused_by_a_full_pool_is_bulkhead_full() {
    each_mode(|m| {
        let cfg = r#"{"bulkhead": {"isolation": "pool", "max_concurrent": 1, "max_queue": 2,
                      "queue_rejection_threshold": 2}, "execution": {"timeout_enabled": false}}"#;
        let mut h = Host::new(m, cfg);
        let k = h.key(0, "k");
        let a = running(h.start(0, k));
        let now = h.now;
        h.engines[0].force(k, Phase::HalfOpen, now, 0);
        h.drive(0);
        let r = refused(h.start(0, k));
        assert_eq!(
            (r.event, r.cause),
            (EventKind::ThreadPoolRejected, Cause::BulkheadFull),
            "{m:?}"
        );
        assert_eq!(h.engines[0].queued(k), Some(0), "{m:?}: not queued");
        h.complete(0, a, Outcome::Success);
        let p = running(h.start(0, k));
        h.complete(0, p, Outcome::Success);
        assert_eq!(h.phase(0, k), Phase::Closed, "{m:?}: the turn came back");
    });
}

#[test]
fn cancelled_ticket_counts_nowhere_and_frees_its_place() {
    let cfg = r#"{"bulkhead": {"isolation": "pool", "max_concurrent": 1, "max_queue": 1, "queue_rejection_threshold": 1}}"#;
    let mut h = Host::new(Mode::Local, cfg);
    let k = h.key(0, "k");
    let a = running(h.start(0, k));
    let Start::Queued(t) = h.start(0, k) else {
        panic!()
    };
    assert!(h.engines[0].cancel_ticket(t, h.now));
    let Start::Queued(t2) = h.start(0, k) else {
        panic!("the place is free again")
    };
    h.complete(0, a, Outcome::Success);
    let ev = h.take_events(0);
    assert!(ev
        .iter()
        .any(|e| matches!(e, Event::Dequeued { permit, .. } if permit.id() == t2.id())));
    let s = h.snapshot(0, k);
    assert_eq!(s.cumulative[EventKind::ThreadPoolRejected.index()], 0);
}

#[test]
fn forced_open_reports_itself_open() {
    each_mode(|m| {
        let mut h = Host::new(m, r#"{"breaker": {"mode": "forced_open"}}"#);
        let k = h.key(0, "k");
        assert_eq!(h.phase(0, k), Phase::Open, "{m:?}");
        let s = h.snapshot(0, k);
        assert!(s.rejecting && !s.would_admit && s.phase == Phase::Open);
        assert_eq!(
            refused(h.start(0, k)).cause,
            Cause::ShortCircuit(ShortCircuit::ForcedOpen)
        );
    });
}

/// Found by review (the npm package's `open()` in `forced_closed` emitted `open`
/// while the breaker stayed closed): a mode that pins the phase ignores a force — no
/// transition, no write.
#[test]
fn a_pinned_mode_ignores_a_force() {
    for mode in ["forced_open", "forced_closed", "disabled"] {
        each_mode(|m| {
            let json = format!(r#"{{"breaker": {{"mode": "{mode}"}}}}"#);
            let mut h = Host::new(m, &json);
            let k = h.key(0, "k");
            let before = h.phase(0, k);
            h.take_events(0);
            for to in [Phase::Open, Phase::Closed, Phase::HalfOpen, Phase::Open] {
                let now = h.now;
                h.engines[0].force(k, to, now, 0);
                assert_eq!(h.phase(0, k), before, "{m:?} {mode}: forced {to:?}");
            }
            h.advance(10_000);
            let told: Vec<_> = h
                .take_events(0)
                .into_iter()
                .filter(|e| matches!(e, Event::Transition { .. }))
                .collect();
            assert!(told.is_empty(), "{m:?} {mode}: {told:?}");
        });
    }
}

/// Found by review: a mode that pins the phase, set while a key was open, left its
/// wake due for good (a host polling at `next_deadline()` spun). Pinned, nothing is
/// due; back to `normal`, the open period's end wakes it again.
#[test]
fn a_mode_pinned_at_run_time_leaves_nothing_due_and_normal_wakes_again() {
    each_mode(|m| {
        let mut h = Host::new(m, BASE);
        let ks = h.keys("k");
        let k = ks[0];
        trip(&mut h, &ks);
        h.advance(SYNC_MS);
        let r = refused(h.start(0, k));
        assert_eq!(r.event, EventKind::ShortCircuited, "{m:?}: tripped");
        let policy = h.policy;
        for e in &mut h.engines {
            e.set_policy(policy, config(r#"{"breaker": {"mode": "disabled"}}"#))
                .unwrap();
        }
        h.advance(10_000);
        let now = h.now_of(0);
        while h.engines[0].poll(now, 0).is_some() {}
        let due = h.engines[0].next_deadline().filter(|&d| d <= now);
        assert_eq!(due, None, "{m:?}: nothing due once polled");
        for e in &mut h.engines {
            e.set_policy(policy, config(BASE)).unwrap();
        }
        h.advance(200);
        assert_eq!(
            h.phase(0, k),
            Phase::HalfOpen,
            "{m:?}: its open period is long over"
        );
    });
}

#[test]
fn rejecting_is_now_and_the_phase_is_hystrix_is_open() {
    // `rejecting` is true while the sleep window runs and false once a probe may go;
    // Hystrix's `isOpen()` stays true until a probe closes, which is `phase != Closed`
    // (found porting HystrixCircuitBreakerTest: the field was documented as isOpen()).
    each_mode(|m| {
        let mut h = Host::new(m, BASE);
        let keys = h.keys("orders");
        trip(&mut h, &keys);
        let w = 19 % h.engines.len(); // the worker that tripped it (a snapshot reads no store)
        let s = h.snapshot(w, keys[w]);
        assert!(s.rejecting && s.phase == Phase::Open, "{m:?}: {s:?}");
        h.advance(5_000);
        let s = h.snapshot(w, keys[w]);
        assert!(
            !s.rejecting && s.would_admit,
            "{m:?}: a probe may go: {s:?}"
        );
        assert_ne!(s.phase, Phase::Closed, "{m:?}: Hystrix isOpen() still true");
        let probes = [running(h.start(w, keys[w])), running(h.start(w, keys[w]))];
        let s = h.snapshot(w, keys[w]);
        assert!(
            s.rejecting && s.phase == Phase::HalfOpen,
            "{m:?}: both probe turns are taken: {s:?}"
        );
        for p in probes {
            h.complete(w, p, Outcome::Success);
        }
        let s = h.snapshot(w, keys[w]);
        assert!(!s.rejecting && s.phase == Phase::Closed, "{m:?}: {s:?}");
    });
}

#[test]
fn key_bytes_bound_what_a_key_holds_and_grow_with_its_buckets() {
    let small = config("{}");
    let big = config(r#"{"metrics": {"rolling_buckets": 1000, "percentile_buckets": 100}}"#);
    for c in [&small, &big] {
        let mut e = Engine::local();
        let p = e.add_policy("p", c.clone()).expect("valid");
        let k = e.key(p, "k", 0).expect("a key");
        let held = e.circuit(k).expect("live").memory_bytes();
        assert!(Engine::key_bytes(c, false) >= held, "{held}");
        assert!(Engine::key_bytes(c, true) > Engine::key_bytes(c, false));
    }
    // A host bounding 10 000 keys by memory sees the product of keys and buckets.
    let (s, b) = (
        Engine::key_bytes(&small, true),
        Engine::key_bytes(&big, true),
    );
    assert!(b > 20 * s, "{s} {b}");
}

#[test]
fn fallback_limit_and_events() {
    let mut h = Host::new(
        Mode::Local,
        r#"{"bulkhead": {"fallback_max_concurrent": 1}}"#,
    );
    let k = h.key(0, "k");
    let now = h.now;
    let f = h.engines[0].start_fallback(k, now).expect("slot");
    assert!(h.engines[0].start_fallback(k, now).is_none());
    h.engines[0].finish_fallback(f, true, now);
    let f = h.engines[0].start_fallback(k, now).expect("freed");
    h.engines[0].finish_fallback(f, false, now);
    h.engines[0].record(k, EventKind::FallbackMissing, now);
    let c = h.snapshot(0, k).cumulative;
    assert_eq!(c[EventKind::FallbackRejection.index()], 1);
    assert_eq!(c[EventKind::FallbackSuccess.index()], 1);
    assert_eq!(c[EventKind::FallbackFailure.index()], 1);
    assert_eq!(c[EventKind::FallbackMissing.index()], 1);
}

#[test]
fn operator_open_and_close_apply_everywhere() {
    each_mode(|m| {
        let mut h = Host::new(m, "{}");
        let keys = h.keys("k");
        let now = h.now;
        h.engines[0].force(keys[0], Phase::Open, now, 0);
        h.drive(0);
        h.advance(SYNC_MS);
        for w in 0..h.engines.len() {
            assert_eq!(
                refused(h.start(w, keys[w])).event,
                EventKind::ShortCircuited,
                "{m:?} {w}"
            );
        }
        let now = h.now;
        h.engines[0].force(keys[0], Phase::Closed, now, 0);
        h.drive(0);
        h.advance(SYNC_MS);
        for w in 0..h.engines.len() {
            assert!(h.call(w, keys[w], Outcome::Success), "{m:?} {w}");
        }
    });
}

#[test]
fn time_driven_half_open_is_reported_without_a_call() {
    each_mode(|m| {
        let mut h = Host::new(m, "{}");
        let keys = h.keys("k");
        trip(&mut h, &keys);
        h.advance(SYNC_MS);
        // Every worker has seen the trip (a refused call reads the shared state).
        for w in 0..h.engines.len() {
            refused(h.start(w, keys[w]));
            h.take_events(w);
        }
        for w in 0..h.engines.len() {
            let at = h.engines[w].next_deadline().expect("a deadline");
            assert!(at <= h.now + 5_000 * MS, "{m:?} worker {w}");
        }
        h.advance(5_100);
        for w in 0..h.engines.len() {
            let ev = h.take_events(w);
            assert!(
                ev.iter()
                    .any(|e| matches!(e, Event::Transition { transition, .. }
                    if transition.to == Phase::HalfOpen)),
                "{m:?} worker {w}: {ev:?}"
            );
        }
    });
}

#[test]
fn reconfigure_keeps_state_and_counters() {
    each_mode(|m| {
        let mut h = Host::new(m, "{}");
        let k = h.key(0, "k");
        for _ in 0..10 {
            h.call(0, k, Outcome::Failure);
        }
        let c = config(
            r#"{"metrics": {"rolling_window_ms": 20000, "rolling_buckets": 4},
                           "breaker": {"error_percentage": {"request_volume_threshold": 12}}}"#,
        );
        for e in &mut h.engines {
            e.set_policy(PolicyId(0), c.clone()).unwrap();
        }
        assert_eq!(h.snapshot(0, k).health.errors, 10, "{m:?}: counts kept");
        h.call(0, k, Outcome::Failure);
        h.call(0, k, Outcome::Failure);
        assert_eq!(
            h.phase(0, k),
            Phase::Open,
            "{m:?}: the new threshold applies"
        );
        assert!(h.engines[0]
            .set_policy(
                PolicyId(0),
                Config {
                    keys: config::KeysConfig {
                        max_keys: 0,
                        ..Default::default()
                    },
                    ..Config::default()
                }
            )
            .is_err());
    });
}

#[test]
fn key_table_overflow_and_idle_expiry() {
    let cfg = r#"{"keys": {"max_keys": 3, "idle_ms": 60000}}"#;
    let mut h = Host::new(Mode::Local, cfg);
    let real = h.key(0, "real");
    for i in 0..2 {
        h.key(0, &format!("junk-{i}"));
    }
    // Full: new names share the overflow key.
    let o1 = h.key(0, "junk-x");
    let o2 = h.key(0, "junk-y");
    assert_eq!(o1, o2);
    assert_eq!(h.engines[0].key_name(o1), Some("svc/~overflow"));
    // Real traffic keeps its key alive; the junk expires after idle_ms.
    for _ in 0..7 {
        h.advance(10_000);
        h.call(0, real, Outcome::Success);
    }
    let ev = h.take_events(0);
    let expired = ev
        .iter()
        .filter(|e| matches!(e, Event::KeyExpired { .. }))
        .count();
    assert_eq!(expired, 2, "{ev:?}");
    assert!(h.engines[0].key_name(real).is_some(), "used keys stay");
    // Room again: a new key gets its own breaker.
    let fresh = h.key(0, "newcomer");
    assert_ne!(fresh, o1);
    assert_eq!(h.engines[0].key_name(fresh), Some("newcomer"));
    assert_eq!(h.engines[0].key_count(PolicyId(0)), Some(2));
}

/// Found by review: an open local breaker unused for `idle_ms` expired, and its name
/// came back as a fresh, closed breaker before the open period ended. In every mode
/// the trip outlives `idle_ms` (a shared key too: see the test after the next).
#[test]
fn an_open_breaker_outlives_idle_expiry() {
    each_mode(|m| {
        let cfg = r#"{"keys": {"idle_ms": 1000}, "breaker": {"open": {"sleep_window_ms": 60000}}}"#;
        let mut h = Host::new(m, cfg);
        let keys = h.keys("orders");
        trip(&mut h, &keys);
        h.advance(1_500);
        for w in 0..h.engines.len() {
            let k = h.key(w, "orders");
            assert_eq!(
                refused(h.start(w, k)).event,
                EventKind::ShortCircuited,
                "{m:?} worker {w}: still open after idle_ms"
            );
        }
        // Closed again, an unused key expires as before.
        h.advance(60_000);
        for w in 0..h.engines.len() {
            let k = h.key(w, "orders");
            for _ in 0..2 {
                h.call(w, k, Outcome::Success);
            }
        }
        h.advance(1_500);
        let expired = (0..h.engines.len())
            .flat_map(|w| h.take_events(w))
            .filter(|e| matches!(e, Event::KeyExpired { .. }))
            .count();
        assert!(expired >= 1, "{m:?}: a closed idle key expires");
    });
}

/// Review of the above: local keys that tripped and went quiet half-open when their
/// open period ends and then expire, so they cannot fill `max_keys` for good.
#[test]
fn tripped_local_keys_that_go_quiet_expire_after_their_open_period() {
    let cfg = r#"{"keys": {"max_keys": 2, "idle_ms": 1000}, "breaker": {"open": {"sleep_window_ms": 5000}}}"#;
    let mut h = Host::new(Mode::Local, cfg);
    for name in ["a", "b"] {
        let k = h.key(0, name);
        trip(&mut h, &[k]);
    }
    h.advance(2_000);
    assert_eq!(h.engines[0].key_count(PolicyId(0)), Some(2), "open: kept");
    h.advance(6_000);
    assert_eq!(
        h.engines[0].key_count(PolicyId(0)),
        Some(0),
        "past the open period: expired"
    );
    let c = h.key(0, "c");
    assert_eq!(h.engines[0].key_name(c), Some("c"), "room for a new key");
}

/// Review of the above: a key that half-opened unseen (by `poll` at the end of its
/// open period) stays `idle_ms` longer, so a call soon after still finds it half-open
/// with its open schedule; it expired as soon as it half-opened and came back closed.
#[test]
fn a_half_open_local_key_stays_idle_ms_past_its_open_period() {
    let cfg = r#"{"keys": {"idle_ms": 1000}, "breaker": {"open": {"sleep_window_ms": 5000}}}"#;
    let mut h = Host::new(Mode::Local, cfg);
    let k = h.key(0, "a");
    trip(&mut h, &[k]);
    h.advance(5_500);
    let expired = |h: &mut Host| {
        h.take_events(0)
            .iter()
            .any(|e| matches!(e, Event::KeyExpired { .. }))
    };
    assert!(!expired(&mut h), "half-open for 500 ms: kept");
    assert_eq!(h.phase(0, k), Phase::HalfOpen);
    h.advance(1_000);
    assert!(expired(&mut h), "idle_ms past the open period: expired");
}

/// A forced phase is a use of the key: a key forced half-open just before it would
/// have expired stays `idle_ms` longer (it expired at its old time and came back
/// closed, losing the operator's or a restored state's half-open).
#[test]
fn forcing_a_key_keeps_it_idle_ms_longer() {
    each_mode(|m| {
        let cfg = r#"{"keys": {"idle_ms": 1000}}"#;
        let mut h = Host::new(m, cfg);
        let k = h.key(0, "a");
        assert!(h.call(0, k, Outcome::Success));
        h.advance(900);
        let now = h.now;
        h.engines[0].force(k, Phase::HalfOpen, now, 0);
        h.advance(500);
        let expired = |h: &mut Host| {
            h.take_events(0)
                .iter()
                .any(|e| matches!(e, Event::KeyExpired { .. }))
        };
        assert!(!expired(&mut h), "{m:?}: forced 500 ms ago: kept");
        assert_eq!(h.engines[0].phase(k), Some(Phase::HalfOpen), "{m:?}");
        h.advance(1_000);
        assert!(
            expired(&mut h),
            "{m:?}: quiet idle_ms after the force: expired"
        );
    });
}

/// Found by review (Envoy's `breaker_state` gauge read open for good): a shared key
/// that tripped and went quiet expired before its open period ended, and its host,
/// told nothing more, still reported it open. In every mode a quiet tripped key is
/// told it half-opened before it expires.
#[test]
fn a_quiet_tripped_key_is_told_it_half_opened_before_it_expires() {
    each_mode(|m| {
        let cfg = r#"{"keys": {"idle_ms": 1000}, "breaker": {"open": {"sleep_window_ms": 5000}}}"#;
        let mut h = Host::new(m, cfg);
        let keys = h.keys("orders");
        trip(&mut h, &keys);
        h.advance(SYNC_MS);
        for w in 0..h.engines.len() {
            refused(h.start(w, keys[w])); // every worker has seen the trip
        }
        let mut told_open = Vec::new();
        for w in 0..h.engines.len() {
            h.take_events(w);
            told_open.push(h.phase(w, keys[w]) == Phase::Open);
        }
        assert!(
            told_open.iter().all(|&o| o),
            "{m:?}: every worker saw the trip"
        );
        let mut expired = 0;
        for step in 0..80 {
            h.advance(100);
            for (w, told_open) in told_open.iter_mut().enumerate() {
                for e in h.take_events(w) {
                    match e {
                        Event::Transition { transition: t, .. } => {
                            *told_open = t.to == Phase::Open;
                        }
                        Event::KeyExpired { .. } => {
                            assert!(
                                !*told_open,
                                "{m:?} worker {w}: expired while open, at {step}"
                            );
                            expired += 1;
                        }
                        _ => {}
                    }
                }
            }
        }
        assert_eq!(
            expired,
            h.engines.len(),
            "{m:?}: each worker's quiet key expired"
        );
    });
}

#[test]
fn one_million_distinct_keys_stay_within_the_bound() {
    let mut e = Engine::local();
    let p = e
        .add_policy(
            "p",
            config(r#"{"keys": {"max_keys": 10000, "idle_ms": 1000}}"#),
        )
        .unwrap();
    let mut now = T0;
    for i in 0..1_000_000u64 {
        now += 10_000; // 10 µs apart: 10 s in all, so old keys keep expiring
        let k = e.key(p, &format!("user-{i}"), now).unwrap();
        if let Start::Running(permit) = e.start(k, now, 0) {
            e.complete(permit, Outcome::Success, now, 0);
        }
        while e.poll(now, 0).is_some() {}
    }
    assert!(e.key_count(p).unwrap() <= 10_000);
    assert!(e.keys().count() <= 10_001);
}

#[test]
fn metrics_only_mode_admits_everything_but_counts_shadow_rejections() {
    let mut h = Host::new(Mode::Local, r#"{"breaker": {"mode": "metrics_only"}}"#);
    let k = h.key(0, "k");
    for _ in 0..25 {
        assert!(h.call(0, k, Outcome::Failure));
    }
    let s = h.snapshot(0, k);
    assert!(s.shadow_rejections >= 4, "{}", s.shadow_rejections);
    assert_eq!(
        h.engines[0].config(PolicyId(0)).unwrap().breaker.mode,
        BreakerMode::MetricsOnly
    );
}

/// Found by review: names longer than `MAX_KEY_LEN` were cut, so long names that share
/// their first 200 bytes (URL-style keys) shared one breaker. They keep their head and
/// a hash of the whole name.
#[test]
fn long_key_names_that_share_a_prefix_stay_apart() {
    use fusewire_core::config::MAX_KEY_LEN;
    use fusewire_core::engine::{bounded_name, SHORT_NAME};
    assert_eq!(bounded_name("orders"), "orders");
    let head = "é".repeat(MAX_KEY_LEN / 2);
    let short = "s".repeat(SHORT_NAME);
    assert_eq!(bounded_name(&short), short.as_str(), "up to 183 bytes kept");
    // A name kept as it is never spells another's shortened form (found by a
    // security review: a 200-byte name equal to a long name's shortened one shared
    // its breaker).
    let long = bounded_name(&head).into_owned();
    assert_ne!(long, head, "200 bytes: shortened");
    // Also one whose shortened form has its length (183 ASCII bytes + 17).
    let ascii = "a".repeat(MAX_KEY_LEN);
    assert_eq!(bounded_name(&ascii).len(), MAX_KEY_LEN);
    assert_ne!(
        bounded_name(&ascii),
        ascii.as_str(),
        "200 ASCII bytes: shortened"
    );
    // The form is fixed (shared-store keys are named by it, across versions): the
    // head cut at a char boundary, `~`, the name's FNV-1a hash in 16 hex digits,
    // leading zeros kept.
    let fnv = |s: &str| {
        s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    };
    let cut = head.floor_char_boundary(SHORT_NAME);
    assert_eq!(long, format!("{}~{:016x}", &head[..cut], fnv(&head)));
    let zeros = (0..1000)
        .map(|i| format!("{}{i}", "n".repeat(SHORT_NAME)))
        .find(|n| fnv(n) >> 60 == 0)
        .expect("a hash with a leading zero digit");
    assert_eq!(
        bounded_name(&zeros),
        format!("{}~{:016x}", &zeros[..SHORT_NAME], fnv(&zeros))
    );
    assert!(long.len() > SHORT_NAME);
    assert_ne!(
        bounded_name(&long),
        long,
        "its shortened form, given as a name, is shortened again"
    );
    let mut e = Engine::local();
    let p = e.add_policy("p", Config::default()).expect("policy");
    let victim = e.key(p, &head, 0).expect("key");
    let squatter = e.key(p, &long, 0).expect("key");
    assert_ne!(victim, squatter, "two breakers");
    let (a, b) = (format!("{head}/orders"), format!("{head}/payments"));
    let (na, nb) = (bounded_name(&a), bounded_name(&b));
    assert_ne!(na, nb);
    assert!(na.len() <= MAX_KEY_LEN && na.starts_with("éé"), "{na}");
    let mut e = Engine::local();
    let p = e.add_policy("p", Config::default()).expect("policy");
    let (ka, kb) = (e.key(p, &a, 0).expect("key"), e.key(p, &b, 0).expect("key"));
    assert_ne!(ka, kb, "two breakers");
    assert_eq!(e.key(p, &a, 0), Some(ka), "found again");
    assert_eq!(e.key_name(ka), Some(na.as_ref()));
}

/// Calls leaving the rolling window can raise its error rate with no new error: a
/// success after the roll trips at the rate, in every mode.
#[test]
fn a_success_after_calls_left_the_window_trips_at_the_rate() {
    each_mode(|m| {
        let mut h = Host::new(m, BASE);
        let keys = h.keys("k");
        let n = h.engines.len();
        for i in 0..100 {
            assert!(h.call(i % n, keys[i % n], Outcome::Success));
        }
        h.advance(5_000);
        for i in 0..10 {
            assert!(h.call(i % n, keys[i % n], Outcome::Failure));
        }
        h.advance(4_000);
        for i in 0..9 {
            assert!(h.call(i % n, keys[i % n], Outcome::Success));
        }
        h.advance(SYNC_MS);
        assert_eq!(
            h.phase(0, keys[0]),
            Phase::Closed,
            "{m:?}: 10 errors in 119"
        );
        // The first second's 100 successes leave the window: 10 errors in 20 calls.
        h.advance(1_500 - SYNC_MS);
        assert!(h.call(0, keys[0], Outcome::Success));
        h.advance(SYNC_MS);
        for w in 0..n {
            let r = refused(h.start(w, keys[w]));
            assert_eq!(r.event, EventKind::ShortCircuited, "{m:?} worker {w}");
        }
    });
}

fn calls_on_0(h: &mut Host, key: KeyId, n: u32, outcome: Outcome) {
    for _ in 0..n {
        assert!(h.call(0, key, outcome));
    }
}

/// Counts restored with `record_n` can roll the window: the next success still checks.
#[test]
fn a_roll_made_by_restoring_counts_still_checks() {
    for restore in [false, true] {
        let mut h = Host::new(Mode::Local, "{}");
        let k = h.key(0, "k");
        calls_on_0(&mut h, k, 100, Outcome::Success);
        h.advance(5_000);
        calls_on_0(&mut h, k, 11, Outcome::Failure);
        h.advance(4_000);
        calls_on_0(&mut h, k, 9, Outcome::Success);
        h.advance(1_200);
        if restore {
            let now = h.now;
            h.engines[0].record_n(k, EventKind::ResponseFromCache, 1, now);
        }
        h.advance(300);
        assert!(h.call(0, k, Outcome::Success));
        assert_eq!(
            h.phase(0, k),
            Phase::Open,
            "record_n={restore}: 11 errors in 21"
        );
    }
}

/// A shared key's local window keeps the worker's calls while the shared view decides;
/// when the view goes stale the local breaker decides, and its first success runs the
/// rules over that window (11 errors in 21 calls here, against a healthy fleet).
#[test]
fn a_shared_keys_local_breaker_checks_its_window_when_the_view_goes_stale() {
    for roll_while_fresh in [false, true] {
        let shared = SharedConfig {
            stale_ms: 1_000,
            ..SharedConfig::default()
        };
        let mut h = Host::with_shared(
            Mode::Shared(fusewire_core::shared::memory::Rules::Envoy, 2),
            "{}",
            shared,
        );
        let keys = h.keys("k");
        for _ in 0..100 {
            assert!(h.call(0, keys[0], Outcome::Success));
        }
        h.advance(5_000);
        for _ in 0..11 {
            assert!(h.call(0, keys[0], Outcome::Failure));
        }
        h.advance(4_000);
        for _ in 0..8 {
            assert!(h.call(0, keys[0], Outcome::Success));
        }
        for _ in 0..300 {
            assert!(h.call(1, keys[1], Outcome::Success)); // the fleet is healthy
        }
        h.advance(1_200);
        if roll_while_fresh {
            assert!(h.call(0, keys[0], Outcome::Success)); // fresh: rolls the local window
        } else {
            assert!(h.call(1, keys[1], Outcome::Success));
        }
        assert_eq!(h.phase(0, keys[0]), Phase::Closed, "fleet at 11 / 400+");
        // Worker 0 loses the store: no more I/O; 1.3 s later its view is stale.
        let now = h.now + 1_300 * MS;
        let e = &mut h.engines[0];
        let p = match e.start(keys[0], now, 0) {
            Start::Running(p) => p,
            s => panic!("{s:?}"),
        };
        e.complete(p, Outcome::Success, now, 0);
        let local = e.circuit(keys[0]).unwrap().window.health_at(now);
        assert!(local.error_percentage >= 50.0, "{local:?}");
        assert_eq!(
            e.phase(keys[0]),
            Some(Phase::Open),
            "roll_while_fresh={roll_while_fresh}: local window {}/{}",
            local.errors,
            local.total
        );
    }
}

/// `CallId::slot` is dense and reused, as its doc promises a host keeping per-call
/// data in a vector: calls running at once have distinct slots below their count, and
/// a new call takes the slot of one that ended (found by mutation testing).
#[test]
fn call_slots_are_dense_distinct_and_reused() {
    let mut e = Engine::local();
    let p = e.add_policy("p", config("{}")).expect("valid");
    let k = e.key(p, "k", 0).expect("a key");
    let mut permits: Vec<Permit> = (0..3).map(|_| running(e.start(k, 0, 0))).collect();
    let mut slots: Vec<usize> = permits.iter().map(|p| p.id().slot()).collect();
    slots.sort_unstable();
    assert_eq!(slots, [0, 1, 2]);
    let ended = permits.remove(1);
    let (id, slot) = (ended.id(), ended.id().slot());
    assert_eq!(
        e.complete(ended, Outcome::Success, MS, 0),
        Completion::OnTime
    );
    let next = running(e.start(k, 2 * MS, 0));
    assert_eq!(next.id().slot(), slot, "the ended call's slot");
    assert_ne!(next.id(), id, "a new id all the same");
    for p in permits.into_iter().chain([next]) {
        e.complete(p, Outcome::Success, 3 * MS, 0);
    }
}

/// `set_policy` with a new open schedule: a local key's open period runs on it from
/// when it began (as `CircuitBreaker::reconfigure`; a shared key's period is the
/// store's, which keeps its end).
#[test]
fn set_policy_reschedules_a_local_open_period() {
    let mut h = Host::new(
        Mode::Local,
        r#"{"breaker": {"open": {"sleep_window_ms": 300000}}}"#,
    );
    let keys = h.keys("k");
    trip(&mut h, &keys);
    h.advance(10_000);
    assert!(refused(h.start(0, keys[0])).is_short_circuit());
    let cfg = config(r#"{"breaker": {"open": {"sleep_window_ms": 5000}}}"#);
    h.engines[0].set_policy(PolicyId(0), cfg).expect("valid");
    h.drive(0);
    let p = running(h.start(0, keys[0]));
    h.complete(0, p, Outcome::Success);
    assert_eq!(h.phase(0, keys[0]), Phase::Closed);
}
