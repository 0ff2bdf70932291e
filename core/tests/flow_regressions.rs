//! Regressions found by review of the flow (simulated clock, no sleeps): each failed
//! before its fix.
use fusewire_core::*;

const MS: u64 = 1_000_000;
const T0: u64 = 1_000_000 * MS;

fn engine(json: &str) -> (Engine, PolicyId) {
    let mut e = Engine::local();
    let p = e
        .add_policy("svc", Config::from_json(json).unwrap())
        .unwrap();
    (e, p)
}

fn running(s: Start) -> Permit {
    match s {
        Start::Running(p) => p,
        other => panic!("expected Running, got {other:?}"),
    }
}

fn queued(s: Start) -> Ticket {
    match s {
        Start::Queued(t) => t,
        other => panic!("expected Queued, got {other:?}"),
    }
}

fn drain(e: &mut Engine, now: u64) -> Vec<Event> {
    let mut v = Vec::new();
    while let Some(ev) = e.poll(now, 0) {
        v.push(ev);
    }
    v
}

/// Snapshot::rolling_max_concurrency is "Highest concurrency in the health window",
/// yet calls still executing are not counted: it is sampled only when a call ends.
#[test]
fn rolling_max_concurrency_ignores_running_calls() {
    let (mut e, p) = engine(r#"{"execution":{"timeout_enabled":false}}"#);
    let k = e.key(p, "a", T0).unwrap();
    let _held: Vec<Permit> = (0..3).map(|_| running(e.start(k, T0, 0))).collect();
    let s = e.snapshot(k, T0 + MS).unwrap();
    assert_eq!(s.in_flight, 3);
    assert!(
        s.rolling_max_concurrency >= s.in_flight,
        "rolling max concurrency {} < {} calls executing right now",
        s.rolling_max_concurrency,
        s.in_flight
    );
}

/// Removing the bulkhead at run time (unlimited concurrency) leaves the queued calls
/// waiting; they are then refused THREAD_POOL_REJECTED (counted as errors), while new
/// calls run at once, overtaking them.
#[test]
fn set_policy_without_bulkhead_strands_queued_calls() {
    let with = r#"{"execution":{"timeout_enabled":false},
        "bulkhead":{"isolation":"pool","max_concurrent":1,"max_queue":5,"max_wait_ms":1000}}"#;
    let (mut e, p) = engine(with);
    let k = e.key(p, "a", T0).unwrap();
    let _a = running(e.start(k, T0, 0));
    let t = queued(e.start(k, T0, 0));
    let t_id = t.id();
    let mut cfg = Config::from_json(with).unwrap();
    cfg.bulkhead = None;
    e.set_policy(p, cfg).unwrap();
    // A new call runs at once (no bulkhead) ...
    let _c = running(e.start(k, T0 + MS, 0));
    // ... but the call that was waiting first is still queued,
    let evs = drain(&mut e, T0 + MS);
    let dequeued = evs
        .iter()
        .any(|ev| matches!(ev, Event::Dequeued { permit, .. } if permit.id() == t_id));
    let later = drain(&mut e, T0 + 1001 * MS);
    assert!(
        dequeued,
        "queued call not served after the bulkhead was removed; queued={:?}; later: {later:?}",
        e.queued(k)
    );
}

/// A queued call whose max wait already passed gets the slot when a running call
/// completes before the host's poll: the dequeue never looks at the wait deadline.
#[test]
fn dequeue_hands_slot_to_call_whose_wait_expired() {
    let (mut e, p) = engine(
        r#"{"execution":{"timeout_enabled":false},
        "bulkhead":{"isolation":"pool","max_concurrent":1,"max_queue":5,"max_wait_ms":100}}"#,
    );
    let k = e.key(p, "a", T0).unwrap();
    let a = running(e.start(k, T0, 0));
    let t = queued(e.start(k, T0, 0)); // wait deadline T0 + 100 ms
    let t_id = t.id();
    // The running call finishes at 150 ms; the wait ended at 100 ms.
    assert_eq!(
        e.complete(a, Outcome::Success, T0 + 150 * MS, 0),
        Completion::OnTime
    );
    let evs = drain(&mut e, T0 + 150 * MS);
    let got_slot = evs
        .iter()
        .any(|ev| matches!(ev, Event::Dequeued { permit, .. } if permit.id() == t_id));
    assert!(
        !got_slot,
        "a call that had waited 150 ms (max_wait_ms 100) was dequeued: {evs:?}"
    );
}

/// Same, via poll itself: when one poll covers both a running call's timeout (at
/// 1050 ms) and an earlier wait expiry (at 1000 ms), the timeout is processed first
/// and frees its slot for the waiter whose wait had already ended.
#[test]
fn poll_processes_timeouts_before_earlier_wait_expiries() {
    let (mut e, p) = engine(
        r#"{"execution":{"timeout_ms":1000},
        "bulkhead":{"isolation":"pool","max_concurrent":1,"max_queue":5,"max_wait_ms":100}}"#,
    );
    let k = e.key(p, "a", T0).unwrap();
    let _a = running(e.start(k, T0 + 50 * MS, 0)); // deadline T0 + 1050 ms
    let t = queued(e.start(k, T0 + 900 * MS, 0)); // wait ends T0 + 1000 ms
    let t_id = t.id();
    let evs = drain(&mut e, T0 + 1100 * MS);
    let got_slot = evs
        .iter()
        .any(|ev| matches!(ev, Event::Dequeued { permit, .. } if permit.id() == t_id));
    assert!(
        !got_slot,
        "wait expired at 1000 ms, slot freed at 1050 ms: {evs:?}"
    );
}

/// A raw permit number at or above 2^53 (forged: into_raw never produces one) aliases
/// a live permit and completes it; the slab ids of the cache/collapser reject these.
#[test]
fn forged_raw_ids_above_2_pow_53_alias_live_handles() {
    let (mut e, p) = engine("{}");
    let k = e.key(p, "a", T0).unwrap();
    let a = running(e.start(k, T0, 0));
    let raw = a.into_raw();
    assert!(raw < 1 << 53);
    let forged = raw | 1 << 60;
    let c = e.complete(Permit::from_raw(forged), Outcome::Failure, T0 + MS, 0);
    let forged_key = KeyId::from_raw(k.to_raw() | 1 << 60);
    assert_eq!(
        (c, e.key_name(forged_key)),
        (Completion::Unknown, None),
        "forged numbers were trusted"
    );
}

/// A late result of a call whose key expired is credited to whatever key now holds
/// the table slot.
#[test]
fn late_result_is_credited_to_an_unrelated_key_after_expiry() {
    let (mut e, p) = engine(r#"{"execution":{"timeout_ms":1000},"keys":{"idle_ms":1000}}"#);
    let a_key = e.key(p, "a", T0).unwrap();
    let a = running(e.start(a_key, T0, 0));
    let mut now = T0 + 1000 * MS;
    let mut evs = drain(&mut e, now); // TimedOut
    now += 5000 * MS;
    evs.extend(drain(&mut e, now));
    assert!(
        evs.iter().any(|ev| matches!(ev, Event::KeyExpired { .. })),
        "{evs:?}"
    );
    let b_key = e.key(p, "b", now).unwrap();
    // The late result of "a" arrives.
    let c = e.complete(a, Outcome::Success, now, 0);
    assert_eq!(
        e.late_results(b_key),
        Some(0),
        "key \"b\" never ran a call but reports a late result (completion {c:?})"
    );
}

/// The timed-out call's late result is Unknown (and not counted) as soon as any other
/// call started while every table slot was in use, even in a nearly empty table.
#[test]
fn late_result_lost_after_one_more_call() {
    let (mut e, p) = engine(r#"{"execution":{"timeout_ms":1000}}"#);
    let k = e.key(p, "a", T0).unwrap();
    let a = running(e.start(k, T0, 0));
    drain(&mut e, T0 + 1000 * MS); // a TimedOut
    let b = running(e.start(k, T0 + 1001 * MS, 0));
    let c = e.complete(a, Outcome::Success, T0 + 1002 * MS, 0);
    let _ = e.complete(b, Outcome::Success, T0 + 1002 * MS, 0);
    assert_eq!(
        (c, e.late_results(k)),
        (Completion::Late, Some(1)),
        "README: a timed-out call's result, when it comes, is Late: counted"
    );
}

/// Found by a review against Hystrix: a timeout polled late (the host's timer fired
/// 29 s after the deadline: a blocked event loop, a suspended VM) was recorded with
/// the poll's latency, 30 s for a 1 s timeout. A timeout lasts its deadline.
#[test]
fn a_timeout_polled_late_records_its_deadline_as_its_latency() {
    let (mut e, p) = engine(r#"{"execution": {"timeout_ms": 1000}}"#);
    let k = e.key(p, "k", T0).unwrap();
    let _p = running(e.start(k, T0, 0));
    let ev = drain(&mut e, T0 + 30_000 * MS);
    assert!(ev.iter().any(|e| matches!(e, Event::TimedOut { .. })));
    let s = e.snapshot(k, T0 + 30_000 * MS).unwrap();
    assert_eq!(s.latency_ns.p100, 1_000 * MS);
}

/// The same review: a 1 s timeout polled 5 s late counted as a call slower than the
/// 5 s slow-call threshold, and the slow-call rule alone tripped the breaker.
#[test]
fn a_timeout_polled_late_is_not_a_slow_call() {
    let (mut e, p) = engine(
        r#"{"breaker": {"error_percentage": {"enabled": false},
             "slow_call": {"enabled": true, "duration_threshold_ms": 5000,
                           "rate_threshold_percentage": 100.0, "request_volume_threshold": 1}},
            "execution": {"timeout_ms": 1000}}"#,
    );
    let k = e.key(p, "k", T0).unwrap();
    let _p = running(e.start(k, T0, 0));
    drain(&mut e, T0 + 6_000 * MS);
    assert_eq!(e.health(k, T0 + 6_000 * MS).unwrap().slow, 0);
    assert_eq!(e.phase(k), Some(Phase::Closed));
}
