//! Found by review: two ways a shared key lost or kept what it should not.
//! - A key bound to the overflow slot re-probes for a slot of its own after
//!   `heartbeat_ms`; finding none, it reads the overflow slot back. Where that slot
//!   still held its own last write, it took the bytes for the view it had just
//!   dropped, and its next write was a fresh state over every key's counts and
//!   every worker's bulkhead slots there.
//! - `set_policy` taking the bulkhead away from a key holding a slot kept that slot
//!   for good: the key wrote every `flush_ms` and never went quiet.

mod common;
use common::*;
use fusewire_core::shared::codec::{decode, Kind};
use fusewire_core::shared::memory::Rules;
use fusewire_core::shared::KeyState;
use fusewire_core::*;

const OVERFLOW: &str = "fusewire/v3/svc/~overflow";

fn stored(h: &Host) -> KeyState {
    let raw = h
        .store
        .raw_get(OVERFLOW)
        .expect("the overflow slot is written");
    decode(Kind::KeyState, raw).expect("a key state")
}

const ONE_SLOT: &str = r#"{"keys": {"max_keys": 1, "idle_ms": 3600000},
    "metrics": {"rolling_window_ms": 60000},
    "breaker": {"error_percentage": {"request_volume_threshold": 1000}},
    "execution": {"timeout_enabled": false}"#;

#[test]
fn a_reprobe_back_into_the_overflow_slot_keeps_its_counts() {
    let json = format!("{ONE_SLOT}}}");
    for mode in [
        Mode::Shared(Rules::Kong, 2),
        Mode::Shared(Rules::Envoy, 2),
        Mode::Async(2),
    ] {
        let mut h = Host::new(mode, &json);
        let a = h.key(0, "a"); // takes the only slot
        h.advance(300);
        assert!(h.call(0, a, Outcome::Success));
        h.advance(300);
        let b = h.key(1, "b"); // none left: the overflow slot
        h.advance(300);
        assert_eq!(h.engines[1].store_key(b), Some(OVERFLOW), "{mode:?}");
        for _ in 0..10 {
            assert!(h.call(1, b, Outcome::Success));
            h.deliver();
        }
        h.advance(2_000);
        assert_eq!(stored(&h).window.counts_at(h.now).success, 10, "{mode:?}");
        // Past the re-probe wait: the next admission looks for a slot again.
        h.advance(6_000);
        let _ = h.call(1, b, Outcome::Failure);
        h.advance(3_000);
        let c = stored(&h).window.counts_at(h.now);
        assert_eq!(
            (c.success, c.failure),
            (10, 1),
            "{mode:?}: after the re-probe"
        );
    }
}

#[test]
fn a_reprobe_back_into_the_overflow_slot_keeps_its_bulkhead() {
    let json = format!(r#"{ONE_SLOT}, "bulkhead": {{"max_concurrent": 1}}}}"#);
    let mut h = Host::new(Mode::Shared(Rules::Kong, 3), &json);
    let a = h.key(0, "a"); // takes the only slot
    assert!(h.call(0, a, Outcome::Success));
    let b = h.key(1, "b"); // overflow
    let c = h.key(2, "c"); // overflow
    h.now += 1_000 * MS;
    let Start::Running(_held) = h.start(2, c) else {
        panic!("c runs")
    };
    h.now += 1_000 * MS;
    // Worker 1 writes last (a refusal is written at once).
    assert!(matches!(h.start(1, b), Start::Refused(_)));
    assert_eq!(stored(&h).ledger.owners(), 1, "c's slot in the ledger");
    h.now += 3_500 * MS; // past b's re-probe wait, before c's heartbeat
    for _ in 0..3 {
        assert!(
            matches!(h.start(1, b), Start::Refused(_)),
            "c holds the overflow slot's only bulkhead slot"
        );
        h.now += 10 * MS;
    }
    assert_eq!(stored(&h).ledger.owners(), 1, "c's slot is still there");
}

#[test]
fn a_bulkhead_taken_away_frees_its_slot_and_the_key_goes_quiet() {
    let with = r#"{"bulkhead": {"max_concurrent": 10}, "execution": {"timeout_enabled": false}, "keys": {"idle_ms": 2000}}"#;
    let without = r#"{"execution": {"timeout_enabled": false}, "keys": {"idle_ms": 2000}}"#;
    let mut h = Host::new(Mode::Shared(Rules::Envoy, 1), with);
    let k = h.key(0, "k");
    let Start::Running(p) = h.start(0, k) else {
        panic!("runs")
    };
    assert_eq!(h.engines[0].slots_held(k), Some(1));
    h.engines[0]
        .set_policy(h.policy, config(without))
        .expect("a valid policy");
    h.drive(0);
    assert_eq!(h.complete(0, p, Outcome::Success), Completion::OnTime);
    h.advance(1_000);
    let before = h.store.writes;
    h.advance(10_000);
    let writes = h.store.writes - before;
    let expired = h
        .take_events(0)
        .iter()
        .any(|e| matches!(e, Event::KeyExpired { .. }));
    assert!(writes < 5, "{writes} writes in 10 s idle");
    assert!(expired, "the idle key expires");
}
