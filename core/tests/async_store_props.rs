//! Property test of the shared layer on an asynchronous store (a Redis host) against
//! the simplest model there is: every call a worker ran is counted exactly once in the
//! stored window, whatever the store did meanwhile — replies lost after their write
//! landed, writes refused, the store down — once it answers again.

mod common;

use common::*;
use fusewire_core::*;
use proptest::prelude::*;

/// What the store does from now on.
#[derive(Clone, Copy, Debug)]
enum Fault {
    Healthy,
    /// Writes land, their replies are lost.
    RepliesLost,
    /// Writes are refused; reads answer.
    WritesDown,
    /// Every request fails.
    Down,
}

#[derive(Clone, Debug)]
enum Op {
    Call { w: usize, failure: bool },
    Advance { ms: u64 },
    Deliver,
    Store(Fault),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..3usize, prop::bool::weighted(0.2)).prop_map(|(w, failure)| Op::Call { w, failure }),
        3 => (1..700u64).prop_map(|ms| Op::Advance { ms }),
        2 => Just(Op::Deliver),
        1 => prop_oneof![
            Just(Fault::Healthy),
            Just(Fault::RepliesLost),
            Just(Fault::WritesDown),
            Just(Fault::Down),
        ]
        .prop_map(Op::Store),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_call_is_counted_once_whatever_the_store_did(ops in prop::collection::vec(op(), 1..250)) {
        // No trip (a huge volume threshold) and a window nothing rolls out of: the
        // stored counts are then exactly the calls run.
        let json = r#"{"breaker": {"error_percentage": {"request_volume_threshold": 1000000}},
                       "metrics": {"rolling_window_ms": 600000, "rolling_buckets": 60}}"#;
        let mut h = Host::new(Mode::Async(3), json);
        let keys = h.keys("k");
        let (mut ok, mut failed) = (0u32, 0u32);
        for op in ops {
            match op {
                Op::Call { w, failure } => {
                    let outcome = if failure { Outcome::Failure } else { Outcome::Success };
                    prop_assert!(h.call(w, keys[w], outcome), "the breaker never trips");
                    if failure { failed += 1 } else { ok += 1 }
                }
                Op::Advance { ms } => h.advance(ms),
                Op::Deliver => h.deliver(),
                Op::Store(f) => {
                    h.store.replies_lost = matches!(f, Fault::RepliesLost).then_some(10);
                    h.store.writes_down = matches!(f, Fault::WritesDown).then_some(11);
                    h.store.down = matches!(f, Fault::Down).then_some(12);
                }
            }
        }
        h.store.replies_lost = None;
        h.store.writes_down = None;
        h.store.down = None;
        h.advance(30_000);
        let sk = h.engines[0].store_key(keys[0]).expect("bound").to_string();
        let bytes = h.store.raw_get(&sk).expect("written");
        let st: shared::KeyState =
            shared::codec::decode(shared::codec::Kind::KeyState, bytes).expect("valid");
        let c = st.window.counts_at(h.now);
        prop_assert_eq!((c.success, c.failure), (ok, failed));
        for (w, (engine, key)) in h.engines.iter().zip(&keys).enumerate() {
            prop_assert!(engine.flushed(*key), "worker {} settled", w);
        }
    }
}
