//! Found by a review from a native Rust host's side (a tokio service driving the
//! engine from the docs):
//! - an asynchronous host that never answers a store request (a Redis call dropped by
//!   its own timeout with no callback, a cancelled future): after `stale_ms` the engine
//!   gives the request up as failed, says so (`Issue::Stale`) and asks again; the late
//!   answer is ignored. One lost answer kept the key off the store for good, never
//!   expiring, with nothing reported. (A synchronous host answers at once: no wake
//!   per request is armed for it, which filled the wake heap 68-fold in a review);
//! - a forged `IoId` at or above 2^53 matched a live request (its high bits dropped);
//! - `HealthSnapshot::from_counts` overflowed on huge host-given counts.

use fusewire_core::config::SyncMode;
use fusewire_core::shared::memory::{MemoryStore, Rules};
use fusewire_core::shared::{IoId, Issue, OwnedAnswer};
use fusewire_core::*;

const MS: u64 = 1_000_000;
const T0: u64 = 1_000_000 * MS;

fn engine(mode: SyncMode, idle_ms: u64) -> (Engine, KeyId) {
    let shared = SharedConfig {
        mode,
        ..Default::default()
    };
    let mut e = Engine::shared(shared, 1).expect("config");
    let cfg = format!(r#"{{"keys": {{"idle_ms": {idle_ms}}}}}"#);
    let p = e
        .add_policy("p", Config::from_json(&cfg).expect("json"))
        .expect("policy");
    let k = e.key(p, "k", T0).expect("key");
    (e, k)
}

/// Runs the engine to `until` at its own deadlines (and every 100 ms, with a call),
/// answering every request from `store`; returns the store issues reported.
fn drive(
    e: &mut Engine,
    k: KeyId,
    store: &mut MemoryStore,
    from: u64,
    until: u64,
    calls: bool,
) -> Vec<Issue> {
    let mut issues = Vec::new();
    let mut now = from;
    while now < until {
        let next = e.next_deadline().unwrap_or(Nanos::MAX);
        now = next.min(now + 100 * MS).max(now + MS).min(until);
        if calls && e.key_name(k).is_some() {
            e.prepare(k, now);
            if let Start::Running(p) = e.start(k, now, 7) {
                let _ = e.complete(p, Outcome::Success, now, 7);
            }
        }
        while let Some(ev) = e.poll(now, 7) {
            if let Event::Store { issue, .. } = ev {
                issues.push(issue);
            }
        }
        while let Some(io) = e.poll_io(now, 7) {
            let id = io.id;
            let a = store.exec(&io);
            e.io_done(id, a.as_answer(), now, 7);
        }
    }
    issues
}

#[test]
fn a_request_never_answered_is_given_up_after_stale_ms_and_the_key_syncs_again() {
    let mode = SyncMode::Async;
    let (mut e, k) = engine(mode, 600_000);
    let mut store = MemoryStore::new(Rules::Script);
    e.prepare(k, T0);
    let lost = e.poll_io(T0, 7).map(|io| io.id).expect("a first read");
    let stale = SharedConfig::default().stale_ms * MS;
    // Until stale_ms, the request is still awaited: nothing new goes out.
    let before = drive(&mut e, k, &mut store, T0, T0 + stale - MS, true);
    assert_eq!(store.writes, 0, "{mode:?}: one request at a time");
    assert!(before.is_empty(), "{mode:?}: {before:?}");
    let issues = drive(
        &mut e,
        k,
        &mut store,
        T0 + stale - MS,
        T0 + stale + 5_000 * MS,
        true,
    );
    assert_eq!(
        issues.first(),
        Some(&Issue::Stale),
        "{mode:?}: the host hears of it"
    );
    assert!(store.writes > 0, "{mode:?}: the key writes again");
    assert!(e.shared_view(k).is_some(), "{mode:?}: and reads");
    // The late answer of the given-up request is ignored.
    let view = e.shared_view(k).cloned();
    let now = T0 + stale + 5_000 * MS;
    e.io_done(lost, OwnedAnswer::NotFound.as_answer(), now, 7);
    assert_eq!(
        e.shared_view(k).cloned(),
        view,
        "{mode:?}: the late answer changes nothing"
    );
}

#[test]
fn a_key_whose_answer_was_lost_still_expires() {
    let mode = SyncMode::Async;
    let (mut e, k) = engine(mode, 1_000);
    let mut store = MemoryStore::new(Rules::Script);
    e.prepare(k, T0);
    assert!(e.poll_io(T0, 7).is_some());
    let stale = SharedConfig::default().stale_ms * MS;
    drive(&mut e, k, &mut store, T0, T0 + stale + 30_000 * MS, false);
    assert_eq!(e.key_name(k), None, "{mode:?}: the idle key expired");
}

#[test]
fn an_io_id_at_or_above_2_pow_53_matches_no_request() {
    let (mut e, k) = engine(SyncMode::Async, 600_000);
    let mut store = MemoryStore::new(Rules::Script);
    e.prepare(k, T0);
    let io = e.poll_io(T0, 7).expect("a read");
    let (raw, answer) = (io.id.to_raw(), store.exec(&io));
    for forged in [raw | 1 << 53, raw | 1 << 60, raw | 1 << 63] {
        e.io_done(IoId::from_raw(forged), answer.as_answer(), T0, 7);
        assert!(
            e.shared_view(k).is_none(),
            "{forged:#x} was taken for {raw:#x}"
        );
    }
    e.io_done(IoId::from_raw(raw), answer.as_answer(), T0, 7);
    assert!(e.shared_view(k).is_some(), "the real id is answered");
}

#[test]
fn a_health_snapshot_of_huge_counts_saturates() {
    let h = HealthSnapshot::from_counts(&[u64::MAX; 13], u64::MAX);
    assert_eq!(
        (h.total, h.errors, h.calls, h.executions),
        (u64::MAX, u64::MAX, u64::MAX, u64::MAX)
    );
}

#[test]
fn a_synchronous_host_gets_no_give_up_wake_per_request() {
    let (mut e, k) = engine(SyncMode::Sync, 60_000);
    let mut store = MemoryStore::new(Rules::Envoy);
    let mut now = T0;
    for _ in 0..10 {
        now += 100 * MS;
        e.refresh(k, now);
        while let Some(io) = e.poll_io(now, 7) {
            let (id, a) = (io.id, store.exec(&io));
            e.io_done(id, a.as_answer(), now, 7);
        }
        while e.poll(now, 7).is_some() {}
    }
    // Found by review: each request armed a wake at now + stale_ms (10 s), polls with
    // nothing to do, and heap entries 68 times the keys. Next is the key's expiry.
    let next = e.next_deadline().expect("the idle key's expiry");
    assert!(
        next >= T0 + 60_000 * MS,
        "a wake {} ms after the start",
        (next - T0) / MS
    );
}
