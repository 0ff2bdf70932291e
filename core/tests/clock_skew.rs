//! Writers whose clocks disagree (another machine's clock, a process started before an
//! NTP step, `Instant`s of processes started at different times, one wild time). Each
//! worker of the test host keeps its own clock (`Host::skew`), so the engines really
//! see different times. The rule (`Ring::merge_at`): the stored window stays on the
//! clock furthest ahead that writes, and a writer behind it counts as of its current
//! bucket ("no time passed"); once it has stood still for a window of a writer's
//! time (the clock ahead went quiet), it comes back to that writer's clock by whole
//! windows, each bucket keeping its age, and rolls again. Found by a native
//! embedder's review: a worker 11 s behind a 10 s window never reached the shared
//! state, and one write a year ahead switched the breaker off for everyone (the
//! earlier version of these tests moved one shared clock, which each engine's
//! monotonic clock then held at its highest: no skew was left). The Envoy filter's
//! side: `proxy-wasm-filter/tests/clock_steps.rs`.

mod common;
use common::*;
use fusewire_core::shared::memory::Rules;
use fusewire_core::*;

/// Opens on 50 % of 20 calls in a 10 s window.
const CFG: &str = r#"{"breaker": {"error_percentage":
    {"request_volume_threshold": 20, "threshold_percentage": 50}}}"#;

const S: i64 = 1_000 * MS as i64;
const YEAR: i64 = 365 * 24 * 3_600 * S;

fn modes() -> [Mode; 2] {
    [Mode::Shared(Rules::Envoy, 2), Mode::Async(2)]
}

/// Worker `w` makes `n` calls ending with `outcome`; then every write lands.
fn calls(h: &mut Host, w: usize, k: KeyId, n: usize, outcome: Outcome) {
    for _ in 0..n {
        let _ = h.call(w, k, outcome);
    }
    h.advance(1_100); // past flush_ms: the delta is written
    h.deliver();
}

fn failures(h: &Host, w: usize, k: KeyId) -> u64 {
    h.engines[w]
        .health(k, h.now_of(w))
        .map_or(0, |s| s.counts[EventKind::Failure.index()])
}

/// Two workers, worker 1's clock `skew` ns off worker 0's; worker 1 makes the key's
/// stored state.
fn host(mode: Mode, skew: i64) -> (Host, [KeyId; 2]) {
    let mut h = Host::new(mode, CFG);
    h.skew[1] = skew;
    let k1 = h.key(1, "k");
    h.deliver();
    let k0 = h.key(0, "k");
    h.deliver();
    (h, [k0, k1])
}

#[test]
fn a_writer_a_window_behind_still_counts() {
    for mode in modes() {
        let (mut h, k) = host(mode, -15 * S);
        calls(&mut h, 0, k[0], 5, Outcome::Success);
        calls(&mut h, 1, k[1], 30, Outcome::Failure);
        let n = failures(&h, 1, k[1]);
        assert!(n >= 15, "{mode:?}: the behind writer's failures count: {n}");
        assert_eq!(h.phase(1, k[1]), Phase::Open, "{mode:?}: the fleet trips");
        // Worker 0 sees it at its next call (its clock is ahead: see below).
        let first = h.start(0, k[0]);
        h.deliver();
        assert_ne!(h.phase(0, k[0]), Phase::Closed, "{mode:?}: {first:?}");
    }
}

#[test]
fn a_writer_behind_a_key_made_ahead_trips_it() {
    // The review's case: the worker ahead only made the key; the one behind fails
    // 100 times. Before the fix it stayed closed from 11 s of skew on.
    for skew in [11 * S, 15 * S, 3_600 * S, YEAR] {
        for mode in modes() {
            let (mut h, k) = host(mode, skew);
            for _ in 0..5 {
                calls(&mut h, 0, k[0], 20, Outcome::Failure);
            }
            assert!(
                transitions(&mut h, 0).contains(&(Phase::Closed, Phase::Open)),
                "{mode:?}, {} s behind: 100 failures trip it",
                skew / S
            );
        }
    }
}

#[test]
fn a_writer_a_window_ahead_trips_the_fleet_with_the_others() {
    for mode in modes() {
        let (mut h, k) = host(mode, 15 * S);
        // Worker 1's clock is 15 s ahead: the stored window is written there first.
        calls(&mut h, 1, k[1], 5, Outcome::Success);
        calls(&mut h, 0, k[0], 30, Outcome::Failure);
        let n = failures(&h, 0, k[0]);
        assert!(n >= 15, "{mode:?}: worker 0's failures count: {n}");
        assert_eq!(h.phase(0, k[0]), Phase::Open, "{mode:?}: the fleet trips");
        // Worker 1 sees the trip at its next call. Open periods move by the skew:
        // the 5 s one ended 10 s ago by its clock, so it may send a probe.
        let first = h.start(1, k[1]);
        h.deliver();
        assert_ne!(h.phase(1, k[1]), Phase::Closed, "{mode:?}: {first:?}");
    }
}

#[test]
fn one_wild_time_does_not_switch_the_breaker_off() {
    for mode in modes() {
        let (mut h, k) = host(mode, YEAR);
        // One call with a time a year ahead; that worker is never heard from again.
        calls(&mut h, 1, k[1], 1, Outcome::Success);
        h.crash(1);
        calls(&mut h, 0, k[0], 5, Outcome::Success);
        calls(&mut h, 0, k[0], 30, Outcome::Failure);
        assert_eq!(
            h.phase(0, k[0]),
            Phase::Open,
            "{mode:?}: the others' failures still trip it"
        );
    }
}

#[test]
fn after_the_clock_ahead_goes_quiet_the_window_rolls_again() {
    // One wild time a year ahead, or a worker an hour ahead that writes and stops for
    // good: the window stands still on the quiet clock (every outcome since in one
    // bucket) until it comes back to the others' clock and rolls with it.
    for (skew, writes) in [(YEAR, 1), (3_600 * S, 5)] {
        for mode in modes() {
            let (mut h, k) = host(mode, skew);
            calls(&mut h, 1, k[1], writes, Outcome::Success);
            h.crash(1);
            // 30 successes and 5 failures: 14 %, closed.
            calls(&mut h, 0, k[0], 30, Outcome::Success);
            calls(&mut h, 0, k[0], 5, Outcome::Failure);
            assert_eq!(h.phase(0, k[0]), Phase::Closed, "{mode:?}");
            // 20 s later they have left the window: 10 of 20 fail, 50 %, open. Had the
            // window stayed ahead, nothing would have left it: 15 of 55, closed.
            h.advance(20_000);
            calls(&mut h, 0, k[0], 10, Outcome::Success);
            calls(&mut h, 0, k[0], 10, Outcome::Failure);
            assert_eq!(h.phase(0, k[0]), Phase::Open, "{mode:?}: the window rolled");
        }
    }
}

#[test]
fn two_workers_far_apart_both_writing_trip_the_fleet() {
    // From a review of the first version of the rule, which moved the window back to
    // each writer behind, while the writer ahead then took it for a quiet key's and
    // rolled past it: each write undid the other's, and the fleet never tripped.
    for skew in [15 * S, -15 * S, 3_600 * S, YEAR] {
        for mode in modes() {
            let (mut h, k) = host(mode, skew);
            for _ in 0..12 {
                for _ in 0..3 {
                    let _ = h.call(1, k[1], Outcome::Failure);
                }
                let _ = h.call(0, k[0], Outcome::Success);
                h.advance(1_100);
                h.deliver();
            }
            let (t0, t1) = (transitions(&mut h, 0), transitions(&mut h, 1));
            assert!(
                t0.contains(&(Phase::Closed, Phase::Open))
                    || t1.contains(&(Phase::Closed, Phase::Open)),
                "{mode:?}, {} s apart: 75 % of 48 calls trip it: {t0:?} / {t1:?}",
                skew / S
            );
        }
    }
}
