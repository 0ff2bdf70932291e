//! A worker's own trip on an asynchronous store (`Replica::trips_ahead`), found by a
//! review of its first version: where it trips, against a local breaker on the same
//! calls, and that the outcomes it tripped on all reach the store.

mod common;
use common::*;
use fusewire_core::*;

const CFG: &str = r#"{"breaker": {"error_percentage": {"request_volume_threshold": 5, "threshold_percentage": 50}, "open": {"sleep_window_ms": 60000}}}"#;

/// A key whose view is fresh and holds one success (async), or a local key after one
/// success.
fn fresh_key(h: &mut Host) -> KeyId {
    let k = h.key(0, "k");
    if h.mode == Mode::Local {
        assert!(h.call(0, k, Outcome::Success));
        return k;
    }
    h.advance(300);
    assert!(h.call(0, k, Outcome::Success));
    h.advance(1_500);
    assert!(h.engines[0].shared_view(k).is_some(), "a fresh view");
    k
}

/// Runs `seq` (no store answer comes back); returns the index of the first call
/// refused, if any.
fn first_refused(h: &mut Host, k: KeyId, seq: &[Outcome]) -> Option<usize> {
    seq.iter().position(|&o| !h.call(0, k, o))
}

/// Moves the clock without handing any store answer back (drives worker `w` only).
fn step_quiet(h: &mut Host, w: usize, ms: u64) {
    h.now += ms * MS;
    h.drive(w);
}

/// Hands back the answers of worker `w` only; the others stay pending.
fn deliver_only(h: &mut Host, w: usize) {
    let now = h.now;
    let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut h.pending)
        .into_iter()
        .partition(|p| p.0 == w);
    h.pending = rest;
    for (_, id, answer) in mine {
        h.engines[w].io_done(id, answer.as_answer(), now, 0);
        h.drive(w);
    }
}

// ---- 1. a success that brings the volume up (Hystrix `total` denominator) ----------

/// S F F F S: 3 errors in 5 calls (60 %) once the last success reaches the volume.
/// A local breaker trips on that success (`check_on_success`); the async key does not
/// run `trips_ahead` on a success of a key that is not hot (not urgent), so it admits
/// the next call; with no answer, it admits any number of successes.
#[test]
fn a_success_reaching_the_volume_trips_ahead_as_locally() {
    use Outcome::*;
    let seq = [
        Failure, Failure, Failure, Success, Success, Success, Success,
    ];
    let mut l = Host::new(Mode::Local, CFG);
    let kl = fresh_key(&mut l);
    let local = first_refused(&mut l, kl, &seq);
    assert_eq!(
        local,
        Some(4),
        "local: trips on the success that reaches 5 calls"
    );

    let mut h = Host::new(Mode::Async(1), CFG);
    let k = fresh_key(&mut h);
    let ran = first_refused(&mut h, k, &seq);
    assert_eq!(
        ran,
        local,
        "async (no answer yet): phase {:?}",
        h.phase(0, k)
    );
}

// ---- 2. a queued call whose wait ends (`refuse_waiter`) -----------------------------

const POOL: &str = r#"{"bulkhead": {"isolation": "pool", "max_concurrent": 1, "max_queue": 1, "queue_rejection_threshold": 1, "max_wait_ms": 100},
    "execution": {"timeout_enabled": false},
    "breaker": {"error_percentage": {"request_volume_threshold": 5, "threshold_percentage": 50}, "open": {"sleep_window_ms": 60000}}}"#;

/// Waits that end in THREAD_POOL_REJECTED (errors) until the breaker opens; returns
/// how many.
fn expired_waits_until_open(h: &mut Host, k: KeyId) -> usize {
    for n in 1..=10 {
        match h.start(0, k) {
            Start::Queued(_) => {}
            s => panic!("wait {n}: {s:?}"),
        }
        step_quiet(h, 0, 200); // the wait ends (no store answer comes back)
        if h.phase(0, k) == Phase::Open {
            return n;
        }
    }
    99
}

#[test]
fn expired_waits_trip_ahead_as_locally() {
    let mut l = Host::new(Mode::Local, POOL);
    let kl = fresh_key(&mut l);
    let Start::Running(_held) = l.start(0, kl) else {
        panic!()
    };
    let local = expired_waits_until_open(&mut l, kl);
    assert_eq!(local, 4);

    let mut h = Host::new(Mode::Async(1), POOL);
    let k = fresh_key(&mut h);
    let Start::Running(_held) = h.start(0, k) else {
        panic!()
    };
    let n = expired_waits_until_open(&mut h, k);
    assert_eq!(n, local, "async: expired waits before the key opens");
}

// ---- 3. `all_calls` denominator with calls in flight (shared: outcomes only) --------------------------------

const ALL: &str = r#"{"breaker": {"error_percentage": {"request_volume_threshold": 5, "threshold_percentage": 50, "denominator": "all_calls"}, "open": {"sleep_window_ms": 60000}},
    "execution": {"timeout_enabled": false}}"#;

/// Five calls held in flight, then failures. A local breaker counts running calls in
/// opossum's denominator (6 failures: 6 / (7 + 5)); a shared window holds outcomes
/// only (documented), so the key trips at the fourth — and its write agrees: the
/// store ends open, with no `close` after the `open` (a trip ahead that counted the
/// running calls and a write that did not would flap).
#[test]
fn all_calls_on_a_shared_key_counts_outcomes_only_and_the_write_agrees() {
    let run = |mode, answers: bool| {
        let mut h = Host::new(mode, ALL);
        let k = fresh_key(&mut h);
        let _ = transitions(&mut h, 0);
        let held: Vec<_> = (0..5)
            .map(|_| match h.start(0, k) {
                Start::Running(p) => p,
                s => panic!("{s:?}"),
            })
            .collect();
        let mut n = None;
        for i in 0..12 {
            if !h.call(0, k, Outcome::Failure) {
                n = Some(i);
                break;
            }
            if answers {
                h.deliver();
            }
        }
        if mode != Mode::Local {
            h.advance(1_000);
            let stored = h.engines[0].shared_view(k).map(|v| v.breaker.phase());
            assert_eq!(stored, Some(Phase::Open), "answers {answers}");
        }
        assert_eq!(transitions(&mut h, 0), vec![(Phase::Closed, Phase::Open)]);
        drop(held);
        n
    };
    assert_eq!(run(Mode::Local, false), Some(6));
    assert_eq!(run(Mode::Async(1), false), Some(4), "no answer yet");
    assert_eq!(
        run(Mode::Async(1), true),
        Some(4),
        "answers after every call"
    );
}

// ---- 4. checks expected to hold ------------------------------------------------------

const CONSEC: &str = r#"{"breaker": {"error_percentage": {"enabled": false}, "consecutive_failures": {"enabled": true, "threshold": 5}, "open": {"sleep_window_ms": 60000}}}"#;

#[test]
fn consecutive_failures_trip_ahead_as_locally_whatever_the_answers() {
    use Outcome::*;
    let seq = [
        Failure, Failure, Success, Failure, Failure, Failure, Failure, Failure, Failure, Failure,
    ];
    let mut l = Host::new(Mode::Local, CONSEC);
    let kl = fresh_key(&mut l);
    let local = first_refused(&mut l, kl, &seq);
    assert_eq!(local, Some(8));
    for every in 0..=6 {
        let mut h = Host::new(Mode::Async(1), CONSEC);
        let k = fresh_key(&mut h);
        let mut got = None;
        for (i, &o) in seq.iter().enumerate() {
            if !h.call(0, k, o) {
                got = Some(i);
                break;
            }
            if every != 0 && (i + 1) % every == 0 {
                h.deliver();
            }
        }
        assert_eq!(got, local, "answers every {every}");
    }
}

/// Replies lost (the writes land, their answers fail): a read settles them from the
/// receipt; the pending outcomes are not counted twice.
#[test]
fn lost_replies_do_not_trip_early() {
    use Outcome::*;
    let mut h = Host::new(Mode::Async(1), CFG);
    let k = fresh_key(&mut h);
    h.store.replies_lost = Some(7);
    assert!(h.call(0, k, Failure));
    h.deliver(); // in doubt
    h.store.replies_lost = None;
    h.advance(1_500); // the read settles it: landed
    assert!(h.call(0, k, Failure)); // S F F: 3 calls
    assert!(h.call(0, k, Success)); // 4 calls, 2 errors
    assert!(h.call(0, k, Success)); // 5 calls, 40 %
    assert_eq!(h.phase(0, k), Phase::Closed);
    assert!(h.call(0, k, Failure)); // 6 calls, 3 errors: 50 % trips
    assert_eq!(h.phase(0, k), Phase::Open);
    let _ = transitions(&mut h, 0);
    h.advance(2_000);
    assert_eq!(
        h.engines[0].shared_view(k).unwrap().breaker.phase(),
        Phase::Open
    );
    assert_eq!(transitions(&mut h, 0), vec![]);
}

/// Outvoted: worker 1's successes landed after worker 0's last read; worker 0 trips
/// ahead, its write merged with them does not trip: back to the fleet's closed state,
/// one `open` and one `close`, calls admitted again.
#[test]
fn an_outvoted_trip_goes_back_to_the_fleets_state() {
    use Outcome::*;
    let mut h = Host::new(Mode::Async(2), CFG);
    let k0 = fresh_key(&mut h);
    let k1 = h.key(1, "k");
    h.advance(300);
    let _ = transitions(&mut h, 0);
    for _ in 0..20 {
        assert!(h.call(1, k1, Success));
    }
    for _ in 0..5 {
        step_quiet(&mut h, 1, 100);
        deliver_only(&mut h, 1);
    }
    assert!(
        h.engines[1]
            .shared_view(k1)
            .unwrap()
            .window
            .counts_at(h.now)
            .success
            >= 20
    );
    let ran = first_refused(&mut h, k0, &[Failure; 6]);
    assert_eq!(ran, Some(4), "worker 0 trips ahead on its own view");
    assert_eq!(transitions(&mut h, 0), vec![(Phase::Closed, Phase::Open)]);
    h.advance(500);
    assert_eq!(h.phase(0, k0), Phase::Closed);
    assert_eq!(transitions(&mut h, 0), vec![(Phase::Open, Phase::Closed)]);
    assert!(h.call(0, k0, Success));
}

/// The store goes down right after the trip: the key stays open on its local breaker,
/// and when the store answers again it ends open with no event repeated.
#[test]
fn a_trip_ahead_while_the_store_is_down() {
    let mut h = Host::new(Mode::Async(1), CFG);
    let k = fresh_key(&mut h);
    let _ = transitions(&mut h, 0);
    h.store.down = Some(1);
    let ran = first_refused(&mut h, k, &[Outcome::Failure; 8]);
    assert_eq!(ran, Some(4));
    h.advance(3_000); // within the rolling window
    assert_eq!(h.phase(0, k), Phase::Open);
    h.store.down = None;
    h.advance(3_000);
    assert_eq!(h.phase(0, k), Phase::Open);
    assert_eq!(
        h.engines[0].shared_view(k).unwrap().breaker.phase(),
        Phase::Open
    );
    let t = transitions(&mut h, 0);
    assert_eq!(t, vec![(Phase::Closed, Phase::Open)]);
}

/// The same with a stale view (the store down): the local breaker decides, but a wait
/// that ends never runs its rules (`refuse_waiter` only records into the replica).
#[test]
fn expired_waits_trip_the_local_breaker_of_a_stale_key() {
    let mut h = Host::new(Mode::Async(1), POOL);
    let k = fresh_key(&mut h);
    h.store.down = Some(1);
    h.advance(12_000); // stale: the local breaker decides (window: the first S gone)
    assert!(h.call(0, k, Outcome::Success));
    let Start::Running(_held) = h.start(0, k) else {
        panic!()
    };
    let n = expired_waits_until_open(&mut h, k);
    assert_eq!(
        n, 4,
        "expired waits before the stale key's local breaker opens"
    );
}

/// metrics_only: every call runs. The async key trips ahead (local state, generation
/// g+1) and keeps admitting calls under that generation: their outcomes reset the
/// delta to g+1, dropping the unwritten failures of g, and a delta of a generation
/// the store never had is not merged: the fleet never trips, the key reports `close`.
#[test]
fn metrics_only_trip_ahead_does_not_lose_the_failures() {
    const M: &str = r#"{"breaker": {"mode": "metrics_only", "error_percentage": {"request_volume_threshold": 5, "threshold_percentage": 50}, "open": {"sleep_window_ms": 60000}}}"#;
    let run = |mode| {
        let mut h = Host::new(mode, M);
        let k = fresh_key(&mut h);
        let _ = transitions(&mut h, 0);
        for _ in 0..8 {
            assert!(h.call(0, k, Outcome::Failure));
        }
        h.advance(1_000);
        let stored = h.engines[0].shared_view(k).map(|v| {
            let c = v.window.counts_at(h.now);
            (v.breaker.phase(), c.failure)
        });
        (transitions(&mut h, 0), h.phase(0, k), stored)
    };
    let local = run(Mode::Local);
    assert_eq!(
        local,
        (vec![(Phase::Closed, Phase::Open)], Phase::Open, None)
    );
    let (t, phase, stored) = run(Mode::Async(1));
    assert_eq!((t, phase), (local.0, local.1), "stored {stored:?}");
    assert_eq!(
        stored,
        Some((Phase::Open, 8)),
        "the fleet has every failure"
    );
}

/// Normal mode, the same root cause: the local breaker's half-open probe (generation
/// g+2, a generation the store never had) resets the delta before the write carrying
/// the tripping failures went out (its answer slower than the open period): those
/// failures never reach the store and the fleet never trips.
#[test]
fn a_local_probe_before_the_write_lands_does_not_drop_the_failures() {
    const C: &str = r#"{"breaker": {"error_percentage": {"request_volume_threshold": 5, "threshold_percentage": 50}, "open": {"sleep_window_ms": 200}}}"#;
    let mut h = Host::new(Mode::Async(1), C);
    let k = fresh_key(&mut h);
    assert_eq!(first_refused(&mut h, k, &[Outcome::Failure; 6]), Some(4));
    step_quiet(&mut h, 0, 300); // the local open period ends, no answer yet
    assert!(h.call(0, k, Outcome::Failure), "the local probe runs");
    h.advance(1_000);
    let c = h.engines[0].shared_view(k).unwrap().window.counts_at(h.now);
    assert_eq!(c.failure, 5, "every failure reaches the store");
}
