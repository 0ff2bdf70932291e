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

#[derive(Clone, Debug)]
enum Step {
    Call {
        w: usize,
        failure: bool,
    },
    /// A call that holds its slot until a later `End` (a probe that hangs).
    Hold {
        w: usize,
    },
    End {
        failure: bool,
    },
    Advance {
        ms: u64,
    },
    Deliver,
    Store(Fault),
    /// The store restarted empty.
    Clear,
    Force {
        w: usize,
        open: bool,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0..3usize, prop::bool::weighted(0.6)).prop_map(|(w, failure)| Step::Call { w, failure }),
        1 => (0..3usize).prop_map(|w| Step::Hold { w }),
        1 => prop::bool::ANY.prop_map(|failure| Step::End { failure }),
        4 => (1..1_500u64).prop_map(|ms| Step::Advance { ms }),
        2 => Just(Step::Deliver),
        1 => prop_oneof![
            Just(Fault::Healthy),
            Just(Fault::RepliesLost),
            Just(Fault::WritesDown),
            Just(Fault::Down),
        ]
        .prop_map(Step::Store),
        1 => Just(Step::Clear),
        1 => (0..3usize, prop::bool::ANY).prop_map(|(w, open)| Step::Force { w, open }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Found by a Redis fleet stress test (Redis killed mid-probe, restarted empty): a
    /// worker was told `HalfOpen → Open` twice, once from a view that did not decide
    /// and again when it did. Whatever the store does, each worker is told one
    /// unbroken chain of phases: every transition starts where the last one ended.
    #[test]
    fn each_worker_is_told_one_chain_of_phases(steps in prop::collection::vec(step(), 1..200)) {
        let json = r#"{"breaker": {"error_percentage": {"request_volume_threshold": 4},
                                   "open": {"sleep_window_ms": 1000},
                                   "half_open": {"permitted_probes": 2}},
                       "execution": {"timeout_enabled": false}}"#;
        let shared = config::SharedConfig {
            sync_ms: Some(200),
            stale_ms: 1_000,
            flush_ms: 300,
            ..config::SharedConfig::default()
        };
        let mut h = Host::with_shared(Mode::Async(3), json, shared);
        let keys = h.keys("k");
        let mut told = [Phase::Closed; 3];
        let mut held = Vec::new();
        for s in steps {
            match s {
                Step::Call { w, failure } => {
                    let outcome = if failure { Outcome::Failure } else { Outcome::Success };
                    let _ = h.call(w, keys[w], outcome);
                }
                Step::Hold { w } => {
                    if let Start::Running(p) = h.start(w, keys[w]) {
                        held.push((w, p));
                    }
                }
                Step::End { failure } => {
                    if let Some((w, p)) = held.pop() {
                        let outcome = if failure { Outcome::Failure } else { Outcome::Success };
                        let _ = h.complete(w, p, outcome);
                    }
                }
                Step::Advance { ms } => h.advance(ms),
                Step::Deliver => h.deliver(),
                Step::Store(f) => {
                    h.store.replies_lost = matches!(f, Fault::RepliesLost).then_some(10);
                    h.store.writes_down = matches!(f, Fault::WritesDown).then_some(11);
                    h.store.down = matches!(f, Fault::Down).then_some(12);
                }
                Step::Clear => h.store.clear(),
                Step::Force { w, open } => {
                    let (now, to) = (h.now, if open { Phase::Open } else { Phase::Closed });
                    h.engines[w].force(keys[w], to, now, 0);
                    h.drive(w);
                }
            }
            for (w, last) in told.iter_mut().enumerate() {
                for e in h.take_events(w) {
                    if let Event::Transition { transition: t, .. } = e {
                        prop_assert!(
                            t.from == *last && t.to != t.from,
                            "worker {}: told {:?}, then {:?} -> {:?} ({:?})",
                            w, *last, t.from, t.to, t.reason
                        );
                        *last = t.to;
                    }
                }
            }
        }
        // Healed, every worker was told the phase it reports.
        h.store.replies_lost = None;
        h.store.writes_down = None;
        h.store.down = None;
        h.advance(3_000);
        for (w, last) in told.iter_mut().enumerate() {
            for e in h.take_events(w) {
                if let Event::Transition { transition: t, .. } = e {
                    prop_assert!(t.from == *last && t.to != t.from, "worker {}", w);
                    *last = t.to;
                }
            }
            prop_assert_eq!(*last, h.phase(w, keys[w]), "worker {}: told what it reports", w);
        }
    }
}
