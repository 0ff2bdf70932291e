//! Writers whose clocks disagree by more than the window (another machine's clock, a
//! process started before an NTP step): outcomes recorded once a writer has the
//! stored window count into that window's current bucket ("no time passed"), so a
//! writer 15 s behind or ahead of a 10 s window still trips the fleet with the
//! others. Regression guards for the core's side of a review of clock steps (the
//! Envoy filter's side: `proxy-wasm-filter/tests/clock_steps.rs`).

mod common;
use common::*;
use fusewire_core::shared::memory::Rules;
use fusewire_core::*;

/// Opens on 50 % of 20 calls in a 10 s window.
const CFG: &str = r#"{"breaker": {"error_percentage":
    {"request_volume_threshold": 20, "threshold_percentage": 50}}}"#;

/// Worker `w` makes `n` calls ending with `outcome`, its clock `skew_ms` off the
/// host's, and writes them to the store.
fn calls(h: &mut Host, w: usize, k: KeyId, n: usize, outcome: Outcome, skew_ms: i64) {
    let real = h.now;
    h.now = real.saturating_add_signed(skew_ms * MS as i64);
    for _ in 0..n {
        let _ = h.call(w, k, outcome);
    }
    h.advance(1_100); // past flush_ms: the delta is written
    h.deliver();
    h.now = real.saturating_add(1_100 * MS);
}

/// Worker `w` makes its key with its clock `skew_ms` off the host's.
fn skewed_key(h: &mut Host, w: usize, skew_ms: i64) -> KeyId {
    let real = h.now;
    h.now = real.saturating_add_signed(skew_ms * MS as i64);
    let k = h.key(w, "k");
    h.now = real;
    k
}

fn failures(h: &Host, w: usize, k: KeyId, now: u64) -> u64 {
    h.engines[w]
        .health(k, now)
        .map_or(0, |s| s.counts[EventKind::Failure.index()])
}

#[test]
fn a_writer_a_window_behind_still_counts() {
    for mode in [Mode::Shared(Rules::Envoy, 2), Mode::Async(2)] {
        let mut h = Host::new(mode, CFG);
        let keys = [h.key(0, "k"), skewed_key(&mut h, 1, -15_000)];
        calls(&mut h, 0, keys[0], 5, Outcome::Success, 0);
        // Worker 1's clock is 15 s behind (the window is 10 s).
        calls(&mut h, 1, keys[1], 30, Outcome::Failure, -15_000);
        calls(&mut h, 0, keys[0], 1, Outcome::Success, 0);
        let n = failures(&h, 0, keys[0], h.now);
        assert!(n >= 15, "{mode:?}: the behind writer's failures count: {n}");
        assert_eq!(
            h.phase(0, keys[0]),
            Phase::Open,
            "{mode:?}: the fleet trips"
        );
    }
}

#[test]
fn a_writer_a_window_ahead_leaves_the_others_counting() {
    for mode in [Mode::Shared(Rules::Envoy, 2), Mode::Async(2)] {
        let mut h = Host::new(mode, CFG);
        let keys = [h.key(0, "k"), skewed_key(&mut h, 1, 15_000)];
        // Worker 1's clock is 15 s ahead: the stored window moves there.
        calls(&mut h, 1, keys[1], 5, Outcome::Success, 15_000);
        calls(&mut h, 0, keys[0], 30, Outcome::Failure, 0);
        calls(&mut h, 1, keys[1], 1, Outcome::Success, 15_000);
        let ahead = h.now + 15_000 * MS;
        let n = failures(&h, 1, keys[1], ahead);
        assert!(n >= 15, "{mode:?}: worker 0's failures count: {n}");
        assert_eq!(
            h.phase(1, keys[1]),
            Phase::Open,
            "{mode:?}: the fleet trips"
        );
    }
}
