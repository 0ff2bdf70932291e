//! A closed breaker never stays closed, right after a call's result, while one of its
//! own trip rules (`breaker::trip_reason` on its own window) holds — under random
//! rule configs, clock gaps (calls leaving the window), overlapping calls (results of
//! an earlier generation among them), reconfigures. `reset_window_on_close: false`
//! (opossum's) keeps the errors of the period before a trip by design: held at `true`.

use fusewire_core::breaker::trip_reason;
use fusewire_core::{CircuitBreaker, Config, Outcome, Pass, Phase};
use proptest::prelude::*;

const MS: u64 = 1_000_000;

#[derive(Clone, Debug)]
struct Rules {
    ep: bool,
    volume: u32,
    pct: u32,
    above: bool,
    consecutive: Option<u32>,
    slow: Option<(u64, u32, u32)>,
    reset_on_close: bool,
    window_ms: u64,
    buckets: u32,
}

fn rules() -> impl Strategy<Value = Rules> {
    (
        any::<bool>(),
        0..8u32,
        prop_oneof![Just(0u32), Just(50), Just(100), 1..100u32],
        any::<bool>(),
        prop::option::of(1..5u32),
        prop::option::of((1..50u64, 1..=100u32, 0..6u32)),
        any::<bool>(),
        prop_oneof![Just(1_000u64), Just(2_500), Just(10_000)],
        prop::sample::select(vec![1u32, 2, 4, 5, 10]),
    )
        .prop_map(
            |(ep, volume, pct, above, consecutive, slow, _reset, window_ms, buckets)| Rules {
                ep,
                volume,
                pct,
                above,
                consecutive,
                slow,
                reset_on_close: true,
                window_ms,
                buckets,
            },
        )
}

fn config(r: &Rules) -> Config {
    let (se, sd, sr, sv) = r
        .slow
        .map_or((false, 60_000, 100, 100), |(d, p, v)| (true, d, p, v));
    Config::from_json(&format!(
        r#"{{"breaker": {{
              "error_percentage": {{"enabled": {}, "request_volume_threshold": {}, "threshold_percentage": {},
                                   "comparison": "{}"}},
              "consecutive_failures": {{"enabled": {}, "threshold": {}}},
              "slow_call": {{"enabled": {}, "duration_threshold_ms": {}, "rate_threshold_percentage": {},
                             "request_volume_threshold": {}}},
              "half_open": {{"reset_window_on_close": {}}},
              "open": {{"sleep_window_ms": 300}}}},
            "metrics": {{"rolling_window_ms": {}, "rolling_buckets": {}}}}}"#,
        r.ep, r.volume, r.pct, if r.above { "above" } else { "at_or_above" },
        r.consecutive.is_some(), r.consecutive.unwrap_or(1),
        se, sd, sr, sv, r.reset_on_close, r.window_ms, r.buckets,
    ))
    .unwrap_or_else(|e| panic!("{r:?}: {e}"))
}

#[derive(Clone, Debug)]
enum Op {
    Start,
    End {
        pick: usize,
        outcome: Outcome,
        lat_ms: u64,
    },
    Advance {
        ms: u64,
    },
    Poll,
    Reconfigure(Rules),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => Just(Op::Start),
        6 => (any::<usize>(), prop_oneof![4 => Just(Outcome::Success), 4 => Just(Outcome::Failure),
                                        1 => Just(Outcome::Timeout), 1 => Just(Outcome::BadRequest),
                                        1 => Just(Outcome::Cancelled)], 0..80u64)
            .prop_map(|(pick, outcome, lat_ms)| Op::End { pick, outcome, lat_ms }),
        3 => prop_oneof![0..100u64, 0..3_000u64].prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Poll),
        1 => rules().prop_map(Op::Reconfigure),
    ]
}

fn run(r: Rules, ops: Vec<Op>, sequential: bool) -> Result<(), TestCaseError> {
    let mut cfg = config(&r);
    let mut b = CircuitBreaker::new(cfg.clone(), 0);
    let mut now = 1_000 * MS;
    let mut running: Vec<Pass> = vec![];
    for (step, op) in ops.into_iter().enumerate() {
        match op {
            Op::Start => {
                if sequential && !running.is_empty() {
                    continue;
                }
                if let Ok(p) = b.try_acquire(now, step as u64) {
                    running.push(p);
                }
            }
            Op::End {
                pick,
                outcome,
                lat_ms,
            } if !running.is_empty() => {
                let p = running.remove(pick % running.len());
                // An earlier generation's result never moves the breaker itself; the
                // next current one judges the window it left (`breaker_edges.rs`).
                let stale = p.generation() != b.state().generation();
                now += lat_ms * MS;
                b.record(p, outcome, now, step as u64);
                if b.phase() == Phase::Closed && !stale && outcome != Outcome::Cancelled {
                    let h = b.health(now);
                    let c = b.state().consecutive_failures();
                    let why = trip_reason(&cfg.breaker, c, &h, false);
                    prop_assert!(
                        why.is_none(),
                        "step {}: closed after {:?} while {:?} holds: {:?}, run {}",
                        step,
                        outcome,
                        why,
                        h,
                        c
                    );
                }
            }
            Op::Advance { ms } => now += ms * MS,
            Op::Poll => {
                let _ = b.poll(now, 0);
            }
            Op::Reconfigure(r) => {
                cfg = config(&r);
                b.reconfigure(cfg.clone());
            }
            _ => {}
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn closed_breaker_never_ignores_a_rule_that_holds_sequential(r in rules(), ops in prop::collection::vec(op(), 1..200)) {
        run(r, ops, true)?;
    }

    #[test]
    fn closed_breaker_never_ignores_a_rule_that_holds_overlapping(r in rules(), ops in prop::collection::vec(op(), 1..200)) {
        run(r, ops, false)?;
    }
}
