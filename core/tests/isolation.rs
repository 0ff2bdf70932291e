//! Bulkhead, timeouts and the registry's call flow, on a simulated clock.

use fusewire_core::bulkhead::{Acquire, Bulkhead};
use fusewire_core::config::BulkheadConfig;
use fusewire_core::registry::{Completion, Event, Registry, Start};
use fusewire_core::timeouts::{Finish, Timeouts};
use fusewire_core::{Config, EventKind, Outcome, Phase};

const MS: u64 = 1_000_000;

fn pool(max: u32, queue: u32, threshold: u32) -> BulkheadConfig {
    BulkheadConfig {
        max_concurrent: max,
        max_queue: queue,
        queue_rejection_threshold: threshold,
        max_wait_ms: 100,
        fallback_max_concurrent: 2,
    }
}

#[test]
fn semaphore_rejects_beyond_max_and_permits_release_once() {
    let mut b = Bulkhead::new(pool(2, 0, 5));
    let Acquire::Granted(p1) = b.try_acquire(0) else {
        panic!()
    };
    let Acquire::Granted(p2) = b.try_acquire(0) else {
        panic!()
    };
    assert_eq!(
        b.try_acquire(0),
        Acquire::Rejected(EventKind::SemaphoreRejected)
    );
    assert!(b.release(p1, 0).is_none());
    assert_eq!(b.state().in_use, 1);
    // `p1` has moved: releasing it again does not compile. The count can't underflow.
    assert!(b.release(p2, 0).is_none());
    assert_eq!(b.state().in_use, 0);
}

#[test]
fn queue_with_rejection_threshold_and_max_wait() {
    let mut b = Bulkhead::new(pool(1, 10, 2));
    let Acquire::Granted(p) = b.try_acquire(0) else {
        panic!()
    };
    let Acquire::Queued(t1) = b.try_acquire(0) else {
        panic!()
    };
    let Acquire::Queued(t2) = b.try_acquire(10 * MS) else {
        panic!()
    };
    assert_eq!(
        b.try_acquire(10 * MS),
        Acquire::Rejected(EventKind::ThreadPoolRejected),
        "queue rejection threshold 2 < max_queue 10"
    );
    assert_eq!(b.next_deadline(), Some(100 * MS));
    // A release hands the slot straight to the first waiter.
    let g = b.release(p, 50 * MS).unwrap();
    assert_eq!(g.ticket, t1);
    assert_eq!(b.state().queued, 1);
    // The second waiter's max wait passes.
    assert!(b.poll_expired(109 * MS).is_none());
    assert_eq!(b.poll_expired(110 * MS), Some(t2));
    assert_eq!(b.state().queued, 0);
    assert!(b.release(g.permit, 120 * MS).is_none());
    assert_eq!(b.state(), Default::default());
}

#[test]
fn cancelled_waiters_leave_the_queue() {
    let mut b = Bulkhead::new(pool(1, 5, 5));
    let Acquire::Granted(p) = b.try_acquire(0) else {
        panic!()
    };
    let Acquire::Queued(t) = b.try_acquire(0) else {
        panic!()
    };
    assert!(b.cancel(t));
    assert!(!b.cancel(t));
    assert!(b.release(p, 0).is_none());
}

#[test]
fn fallback_limit_is_separate() {
    let mut b = Bulkhead::new(pool(1, 0, 5));
    let f1 = b.try_acquire_fallback().unwrap();
    let f2 = b.try_acquire_fallback().unwrap();
    assert!(b.try_acquire_fallback().is_none());
    let Acquire::Granted(_p) = b.try_acquire(0) else {
        panic!("fallbacks do not use execution slots")
    };
    b.release_fallback(f1);
    assert!(b.try_acquire_fallback().is_some());
    b.release_fallback(f2);
}

#[test]
fn timeouts_report_next_deadline_and_discard_late_results() {
    let mut t: Timeouts<&str> = Timeouts::with_capacity(4);
    let a = t.start(300 * MS, "a");
    let b = t.start(100 * MS, "b");
    let c = t.start(200 * MS, "c");
    assert_eq!(t.next_deadline(), Some(100 * MS));
    assert!(t.poll_expired(99 * MS).is_none());
    assert_eq!(t.poll_expired(150 * MS), Some((b, "b")));
    assert!(t.poll_expired(150 * MS).is_none());
    assert_eq!(t.next_deadline(), Some(200 * MS));
    assert_eq!(t.finish(c), Finish::OnTime("c"));
    assert_eq!(t.finish(c), Finish::Unknown, "finished twice");
    assert_eq!(t.next_deadline(), Some(300 * MS));
    assert_eq!(t.finish(b), Finish::Late);
    assert_eq!(t.finish(a), Finish::OnTime("a"));
    assert_eq!(t.next_deadline(), None);
    assert_eq!(t.running(), 0);
    // Slots are reused with a new generation: old handles stay dead.
    let d = t.start(400 * MS, "d");
    assert_ne!(d, a);
    assert_eq!(t.finish(a), Finish::Unknown);
}

fn registry(config: Config) -> (Registry, fusewire_core::registry::CommandId) {
    let mut r = Registry::new();
    let id = r.register("get-user", "users", None, config, 0).unwrap();
    (r, id)
}

#[test]
fn registry_runs_the_hystrix_flow() {
    let (mut r, id) = registry(Config::default());
    assert_eq!(
        r.pool_of(id),
        r.pool_id("users"),
        "pool key defaults to the group key"
    );
    let Start::Running(call) = r.start(id, 0, 0) else {
        panic!()
    };
    assert_eq!(r.next_deadline(), Some(1_000 * MS));
    assert_eq!(
        r.complete(call, Outcome::Success, 5 * MS, 0),
        Completion::Recorded(None)
    );
    assert_eq!(
        r.complete(call, Outcome::Success, 5 * MS, 0),
        Completion::Unknown
    );
    let cb = r.command_mut(id).unwrap();
    assert_eq!(cb.health(5 * MS).count(EventKind::Success), 1);
    assert_eq!(cb.percentiles(5 * MS).p50, 5 * MS);
}

#[test]
fn registry_times_calls_out_and_discards_late_results() {
    let (mut r, id) = registry(Config::default());
    let Start::Running(call) = r.start(id, 0, 0) else {
        panic!()
    };
    assert!(r.poll(999 * MS, 0).is_none());
    assert_eq!(r.poll(1_000 * MS, 0), Some(Event::TimedOut(id, call)));
    assert!(r.poll(1_000 * MS, 0).is_none());
    assert_eq!(
        r.complete(call, Outcome::Success, 1_500 * MS, 0),
        Completion::Late
    );
    let cb = r.command_mut(id).unwrap();
    let h = cb.health(1_500 * MS);
    assert_eq!(
        (h.count(EventKind::Timeout), h.count(EventKind::Success)),
        (1, 0)
    );
    assert_eq!(
        r.pool(r.pool_of(id).unwrap()).unwrap().state().in_use,
        0,
        "slot released at timeout"
    );
}

#[test]
fn registry_rejects_when_full_and_when_open() {
    let mut c = Config::default();
    c.bulkhead.max_concurrent = 1;
    let (mut r, id) = registry(c);
    let Start::Running(_a) = r.start(id, 0, 0) else {
        panic!()
    };
    assert_eq!(
        r.start(id, 0, 0),
        Start::Rejected(EventKind::SemaphoreRejected)
    );
    // 20 rejections at 100 % errors trip the breaker.
    for _ in 0..19 {
        r.start(id, 0, 0);
    }
    while r.poll(0, 0).is_some() {}
    assert_eq!(r.command(id).unwrap().phase(), Phase::Open);
    assert_eq!(
        r.start(id, 0, 0),
        Start::Rejected(EventKind::ShortCircuited)
    );
}

#[test]
fn registry_queue_dequeues_and_expires() {
    let c = Config {
        bulkhead: pool(1, 5, 5),
        ..Config::default()
    };
    let (mut r, id) = registry(c);
    let Start::Running(a) = r.start(id, 0, 0) else {
        panic!()
    };
    let Start::Queued(_, t1) = r.start(id, 0, 0) else {
        panic!()
    };
    let Start::Queued(_, t2) = r.start(id, 50 * MS, 0) else {
        panic!()
    };
    r.complete(a, Outcome::Success, 10 * MS, 0);
    let Some(Event::Dequeued(_, t, b)) = r.poll(10 * MS, 0) else {
        panic!()
    };
    assert_eq!(t, t1);
    assert_eq!(r.poll(149 * MS, 0), None);
    assert_eq!(r.poll(150 * MS, 0), Some(Event::QueueExpired(id, t2)));
    r.complete(b, Outcome::Success, 160 * MS, 0);
    let cb = r.command_mut(id).unwrap();
    let h = cb.health(160 * MS);
    assert_eq!(h.count(EventKind::ThreadPoolRejected), 1);
    assert_eq!(h.count(EventKind::Success), 2);
}

#[test]
fn registry_shares_pools_and_keeps_state_on_reregister() {
    let mut r = Registry::new();
    let a = r.register("a", "g", None, Config::default(), 0).unwrap();
    let b = r
        .register("b", "g", Some("shared"), Config::default(), 0)
        .unwrap();
    let c = r
        .register("c", "other", Some("shared"), Config::default(), 0)
        .unwrap();
    assert_ne!(r.pool_of(a), r.pool_of(b));
    assert_eq!(r.pool_of(b), r.pool_of(c));
    for _ in 0..20 {
        let Start::Running(x) = r.start(a, 0, 0) else {
            panic!()
        };
        r.complete(x, Outcome::Failure, 0, 0);
    }
    assert_eq!(r.command(a).unwrap().phase(), Phase::Open);
    let again = r.register("a", "g", None, Config::default(), 0).unwrap();
    assert_eq!(again, a);
    assert_eq!(r.command(a).unwrap().phase(), Phase::Open);
    let mut bad = Config::default();
    bad.execution.timeout_ms = 0;
    assert_eq!(
        r.register("d", "g", None, bad, 0).unwrap_err().path,
        "execution.timeout_ms"
    );
    assert!(r.command_id("d").is_none());
}

#[test]
fn registry_reports_breaker_transitions_driven_by_time() {
    let (mut r, id) = registry(Config::default());
    for _ in 0..20 {
        let Start::Running(x) = r.start(id, 0, 0) else {
            panic!()
        };
        let _ = r.complete(x, Outcome::Failure, 0, 0);
    }
    assert_eq!(r.next_deadline(), Some(5_000 * MS));
    let Some(Event::Transition(_, t)) = r.poll(5_000 * MS, 0) else {
        panic!()
    };
    assert_eq!(t.to, Phase::HalfOpen);
}

#[test]
fn fallback_rejection_is_recorded() {
    let mut c = Config::default();
    c.bulkhead.fallback_max_concurrent = 1;
    let (mut r, id) = registry(c);
    let f = r.try_fallback(id, 0).unwrap();
    assert!(r.try_fallback(id, 0).is_none());
    r.finish_fallback(id, f, true, 0);
    r.record_event(id, EventKind::FallbackMissing, 0, 0);
    let w = r.command(id).unwrap().window();
    assert_eq!(w.cumulative_count(EventKind::FallbackRejection), 1);
    assert_eq!(w.cumulative_count(EventKind::FallbackSuccess), 1);
    assert_eq!(w.cumulative_count(EventKind::FallbackMissing), 1);
}

#[test]
fn expired_slots_are_reclaimed_when_late_results_never_come() {
    let mut t: Timeouts<u32> = Timeouts::with_capacity(2);
    let a = t.start(10, 1);
    let b = t.start(10, 2);
    assert!(t.poll_expired(10).is_some());
    assert!(t.poll_expired(10).is_some());
    // Neither late result ever arrives; new calls reuse the two expired slots
    // instead of growing the table.
    for i in 0..100 {
        let c1 = t.start(1_000 + i, 3);
        let c2 = t.start(1_000 + i, 3);
        assert_eq!(t.finish(c1), Finish::OnTime(3));
        assert_eq!(t.finish(c2), Finish::OnTime(3));
    }
    assert_eq!(t.finish(a), Finish::Unknown);
    assert_eq!(t.finish(b), Finish::Unknown);
    let c = t.start(5, 4);
    let d = t.start(5, 5);
    let e = t.start(5, 6);
    assert!(t.poll_expired(5).is_some());
    assert_eq!(t.finish(d), Finish::OnTime(5));
    assert_eq!(t.finish(e), Finish::OnTime(6));
    assert_eq!(
        t.finish(c),
        Finish::Late,
        "a late result in time is still reported late"
    );
}
