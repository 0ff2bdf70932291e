//! The fleet's consecutive-failure run: a success recorded before an outage on one
//! worker, written at its flush after other workers' errors, does not end the run
//! they began (found by a review through the Envoy harness: 4 workers in turn, a
//! threshold of 5, tripped after 7–11 failures in a row; one worker after 5).

mod common;
use common::*;
use fusewire_core::shared::memory::Rules;
use fusewire_core::*;

const CFG: &str = r#"{"breaker": {"error_percentage": {"enabled": false}, "consecutive_failures": {"enabled": true, "threshold": 5}}}"#;

/// Healthy calls in turn over the workers, `gap_ms` apart, then failing ones: after
/// how many failures the worker that made the last one saw the breaker open (other
/// workers learn of a trip up to `sync_ms` later, not measured here).
fn failures_until_open(mode: Mode, gap_ms: u64) -> usize {
    let mut h = Host::new(mode, CFG);
    let n = mode.workers();
    let keys = h.keys("k");
    for i in 0..40 {
        assert!(h.call(i % n, keys[i % n], Outcome::Success));
        h.advance(gap_ms);
    }
    for i in 0..40 {
        assert!(
            h.call(i % n, keys[i % n], Outcome::Failure),
            "failure {i} refused before a trip"
        );
        if h.phase(i % n, keys[i % n]) == Phase::Open {
            return i + 1;
        }
        h.advance(gap_ms);
    }
    40
}

#[test]
fn a_success_flushed_after_other_workers_errors_does_not_end_their_run() {
    for gap in [100, 25, 10] {
        assert_eq!(failures_until_open(Mode::Local, gap), 5);
        // Before: 8 at 25 ms (the last successes, flushed after the first errors,
        // reset the run).
        assert_eq!(
            failures_until_open(Mode::Shared(Rules::Envoy, 4), gap),
            5,
            "sync store, calls {gap} ms apart"
        );
        // An asynchronous store adds its round trips (each process trips ahead on
        // its own outcomes and sees the others' a read later).
        let ran = failures_until_open(Mode::Async(4), gap);
        assert!(
            (5..=8).contains(&ran),
            "async store, calls {gap} ms apart: {ran}"
        );
    }
}
