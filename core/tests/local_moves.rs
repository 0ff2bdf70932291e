//! A process whose local breaker moved (it tripped before its first view of the
//! shared state) decides on it only until a write carrying what it moved on has
//! landed; then the fleet's state decides again — also when that write's reply was
//! lost and its receipt, read back, tells it landed (found by review: the key stayed
//! on its local breaker for good, open while the fleet had closed).

mod common;
use common::*;
use fusewire_core::*;

const CFG: &str = r#"{"breaker": {"error_percentage": {"request_volume_threshold": 5, "denominator": "all_calls", "comparison": "above"}, "open": {"sleep_window_ms": 60000}}}"#;

/// Worker 0 trips locally before its first view; the write carrying the trip lands
/// but its reply is lost (`lose`), so the next read settles it from the receipt.
/// Worker 1 then closes the fleet's breaker. Returns worker 0's phase 2 s later and
/// whether its next call runs.
fn scenario(lose: bool) -> (Phase, bool, Option<Phase>) {
    let mut h = Host::new(Mode::Async(2), CFG);
    let k0 = h.key(0, "k");
    for _ in 0..10 {
        let _ = h.call(0, k0, Outcome::Failure);
    }
    assert_eq!(h.phase(0, k0), Phase::Open);
    if lose {
        h.store.replies_lost = Some(7);
    }
    // The probe read answers; the claim write (carrying the failures) goes out.
    h.deliver();
    h.deliver();
    h.store.replies_lost = None;
    h.advance(2_000);
    let stored = h.engines[0].shared_view(k0).map(|v| v.breaker.phase());
    // Another worker (an operator, or its own probes) closes the fleet's breaker.
    let k1 = h.key(1, "k");
    h.advance(500);
    assert_eq!(
        h.phase(1, k1),
        Phase::Open,
        "lose={lose}: worker 1 sees the trip"
    );
    let now = h.now;
    h.engines[1].force(k1, Phase::Closed, now, 0);
    h.drive(1);
    h.advance(2_000);
    assert_eq!(h.phase(1, k1), Phase::Closed);
    let phase = h.phase(0, k0);
    let ran = h.call(0, k0, Outcome::Success);
    (phase, ran, stored)
}

#[test]
fn the_fleet_decides_again_once_the_local_trip_is_written() {
    let (phase, ran, stored) = scenario(false);
    assert_eq!(stored, Some(Phase::Open));
    assert_eq!(phase, Phase::Closed, "worker 0 follows the fleet");
    assert!(ran);
}

#[test]
fn the_fleet_decides_again_when_that_write_is_known_only_by_its_receipt() {
    let (phase, ran, stored) = scenario(true);
    assert_eq!(stored, Some(Phase::Open), "the trip reached the store");
    assert_eq!(phase, Phase::Closed, "worker 0 follows the fleet");
    assert!(ran, "worker 0 admits a call on a closed fleet breaker");
}
