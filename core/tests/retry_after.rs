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

/// `Engine::would_admit`, the pure query a host asks before it commits a call (the
/// filter's `admit_after_body`): on every worker of a shared key, in every phase, it
/// answers what a start right after it does.
#[test]
fn would_admit_answers_as_the_start_after_it() {
    each_mode(|mode| {
        let mut h = Host::new(mode, CFG);
        let keys = h.keys("k");
        // Worker `w` refreshes its view (as a host does before admission), asks, then
        // starts: the answer must be the start's. Returns the permit of a call that runs.
        let ask_then_start = |h: &mut Host, w: usize, phase: &str| -> Option<Permit> {
            let now = h.now;
            h.engines[w].prepare(keys[w], now);
            h.drive(w);
            h.deliver();
            let said = h.engines[w].would_admit(keys[w], now).expect("live");
            let s = h.start(w, keys[w]);
            h.deliver();
            let shown = format!("{s:?}");
            let ran = match s {
                Start::Running(p) => Some(p),
                _ => None,
            };
            assert_eq!(
                said,
                ran.is_some(),
                "{mode:?}, {phase}, worker {w}: {shown}"
            );
            ran
        };
        for w in 0..keys.len() {
            let p = ask_then_start(&mut h, w, "closed").expect("runs");
            assert_eq!(h.complete(w, p, Outcome::Success), Completion::OnTime);
        }
        h.deliver();
        for _ in 0..keys.len() {
            let _ = h.call(0, keys[0], Outcome::Failure);
        }
        h.deliver();
        h.advance(1_000);
        assert_eq!(h.phase(0, keys[0]), Phase::Open, "{mode:?}");
        for w in 0..keys.len() {
            assert!(ask_then_start(&mut h, w, "open").is_none());
        }
        h.now += retry_after(&h, 0, keys[0]).expect("open");
        // One probe, fleet-wide: the first asker runs it, every later one is refused.
        let probe = ask_then_start(&mut h, 0, "half-open").expect("the probe");
        for w in 0..keys.len() {
            assert!(ask_then_start(&mut h, w, "probe out").is_none());
        }
        assert_eq!(h.complete(0, probe, Outcome::Success), Completion::OnTime);
        h.deliver();
        let p = ask_then_start(&mut h, 0, "closed again").expect("runs");
        h.complete(0, p, Outcome::Success);
    });
    let mut h = Host::new(Mode::Local, r#"{"breaker": {"mode": "forced_open"}}"#);
    let k = h.key(0, "k");
    assert_eq!(
        h.engines[0].would_admit(k, h.now),
        Some(false),
        "forced open"
    );
    assert_eq!(
        h.engines[0].would_admit(KeyId::from_raw(u64::MAX), h.now),
        None
    );
}
