//! `Engine::retry_after`: how long a refused caller should wait — the rest of the
//! open period, the same on every worker of a shared key, and exactly when the
//! breaker lets a call through again (jittered, growing durations included).

mod common;
use common::*;
use fusewire_core::*;

/// Trips on the first failure; open 4–6 s (5 s ± 20 %), doubling per trip.
const CFG: &str = r#"{"breaker": {
    "error_percentage": {"request_volume_threshold": 1, "threshold_percentage": 50},
    "open": {"schedule": "exponential", "sleep_window_ms": 5000, "multiplier": 2,
             "max_ms": 60000, "jitter_percentage": 20}}}"#;

fn retry_after(h: &Host, w: usize, k: KeyId) -> Option<u64> {
    h.engines[w].retry_after(k, h.now)
}

/// Whether worker `w` admits a call on `k` now (the call succeeds at once).
fn admits(h: &mut Host, w: usize, k: KeyId) -> bool {
    let ok = h.call(w, k, Outcome::Success);
    h.deliver();
    ok
}

#[test]
fn a_refused_caller_is_told_when_the_breaker_lets_calls_through() {
    each_mode(|mode| {
        let mut h = Host::new(mode, CFG);
        let keys = h.keys("k");
        assert_eq!(retry_after(&h, 0, keys[0]), None, "{mode:?}: closed");
        assert!(h.call(0, keys[0], Outcome::Failure));
        h.deliver();
        h.advance(1_000);
        // Every worker refuses, and names the same moment.
        let mut told = Vec::new();
        for (w, &k) in keys.iter().enumerate() {
            assert!(!admits(&mut h, w, k), "{mode:?}: worker {w} refuses");
            told.push(retry_after(&h, w, k).expect("open"));
        }
        let wait = told[0];
        assert!(told.iter().all(|&t| t == wait), "{mode:?}: {told:?}");
        // 4–6 s open, 1 s of it gone.
        assert!(
            (3_000 * MS..=5_000 * MS).contains(&wait),
            "{mode:?}: {wait}"
        );
        // 1 ns before that moment worker 0 still refuses, and says 1 ns.
        let end = h.now + wait;
        h.advance((wait - 1) / MS);
        while h.now + 1 < end {
            h.now += 1;
        }
        assert_eq!(retry_after(&h, 0, keys[0]), Some(1), "{mode:?}");
        assert!(!admits(&mut h, 0, keys[0]), "{mode:?}: still open");
        // At that moment it lets a probe through, and says nothing more.
        h.now = end;
        assert!(admits(&mut h, 0, keys[0]), "{mode:?}: the probe");
        assert_eq!(retry_after(&h, 0, keys[0]), None, "{mode:?}: closed again");
    });
}

#[test]
fn the_second_trip_names_its_longer_open_period() {
    each_mode(|mode| {
        let mut h = Host::new(mode, CFG);
        let k = h.key(0, "k");
        assert!(h.call(0, k, Outcome::Failure));
        h.deliver();
        h.advance(7_000);
        // Half-open: the probe fails and the breaker opens for 8–12 s.
        assert!(h.call(0, k, Outcome::Failure), "{mode:?}: the probe");
        h.deliver();
        assert_eq!(h.phase(0, k), Phase::Open, "{mode:?}");
        let wait = retry_after(&h, 0, k).expect("open");
        assert!(
            (8_000 * MS..=12_000 * MS).contains(&wait),
            "{mode:?}: {wait}"
        );
    });
}

#[test]
fn half_open_and_forced_modes_name_no_moment() {
    let half_open = r#"{"breaker": {"error_percentage": {"request_volume_threshold": 1},
        "open": {"sleep_window_ms": 1000}}}"#;
    let mut h = Host::new(Mode::Local, half_open);
    let k = h.key(0, "k");
    assert!(h.call(0, k, Outcome::Failure));
    h.advance(1_000);
    let Start::Running(probe) = h.start(0, k) else {
        panic!("the probe runs");
    };
    assert_eq!(h.phase(0, k), Phase::HalfOpen);
    assert!(!admits(&mut h, 0, k), "the probe is out");
    assert_eq!(retry_after(&h, 0, k), None, "its result decides");
    h.complete(0, probe, Outcome::Success);

    for mode in ["forced_open", "metrics_only"] {
        let cfg = format!(
            r#"{{"breaker": {{"mode": "{mode}", "error_percentage": {{"request_volume_threshold": 1}}}}}}"#
        );
        let mut h = Host::new(Mode::Local, &cfg);
        let k = h.key(0, "k");
        let _ = h.call(0, k, Outcome::Failure);
        assert_eq!(h.phase(0, k), Phase::Open, "{mode}");
        assert_eq!(retry_after(&h, 0, k), None, "{mode}");
    }
}
