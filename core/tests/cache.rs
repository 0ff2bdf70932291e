//! Request cache: deterministic-time scenarios (simulated clock, no sleeps) and a
//! property test over arbitrary interleavings.

use std::collections::{HashMap, HashSet};

use fusewire_core::cache::{
    Abandon, Bypass, CacheEvent, CallerId, EntryId, Lead, Lookup, Removal, ScopeId, Wait,
};
use fusewire_core::config::{CacheConfig, LeaderFailure};
use fusewire_core::{Config, Engine, EventKind, Outcome, RequestCache, Start};
use proptest::prelude::*;

mod common;

const MS: u64 = 1_000_000;
const T0: u64 = 1_000 * MS;
const G: ScopeId = ScopeId::GLOBAL;

fn cfg(json: &str) -> CacheConfig {
    let c = Config::from_json(&format!(r#"{{"cache": {json}}}"#))
        .unwrap_or_else(|e| panic!("test config: {e}"));
    c.cache.expect("cache section")
}

fn cache(json: &str) -> RequestCache {
    RequestCache::new(cfg(json), 0x5eed).expect("valid")
}

fn lead(l: Lookup) -> Lead {
    match l {
        Lookup::Lead(l) => l,
        other => panic!("expected a lead, got {other:?}"),
    }
}

fn wait(l: Lookup) -> Wait {
    match l {
        Lookup::Wait(w) => w,
        other => panic!("expected a wait, got {other:?}"),
    }
}

fn hit(l: Lookup) -> (EntryId, bool) {
    match l {
        Lookup::Hit { entry, failure } => (entry, failure),
        other => panic!("expected a hit, got {other:?}"),
    }
}

fn events(c: &mut RequestCache, now: u64) -> Vec<CacheEvent> {
    std::iter::from_fn(|| c.poll(now)).collect()
}

#[test]
fn a_filled_entry_is_a_hit_recorded_as_response_from_cache() {
    let mut e = Engine::local();
    let p = e
        .add_policy("p", Config::from_json(r#"{"cache": {}}"#).unwrap())
        .unwrap();
    let k = e.key(p, "GetUser", T0).unwrap();
    let mut c = RequestCache::new(e.config(p).unwrap().cache.clone().unwrap(), 1).unwrap();

    // Miss: the caller leads and runs the call through the engine.
    let l = lead(c.lookup(G, b"user:1", T0));
    let Start::Running(permit) = e.start(k, T0, 0) else {
        panic!("admitted")
    };
    e.complete(permit, Outcome::Success, T0 + MS, 0);
    let s = c.fill(l, 120, T0 + MS).unwrap();
    assert!(s.cached);
    assert_eq!(s.followers, 0);
    let entry = s.entry.unwrap();
    assert!(c.contains(entry));

    // Hits: served from the entry, recorded as RESPONSE_FROM_CACHE.
    for i in 0..5 {
        let (got, failure) = hit(c.lookup(G, b"user:1", T0 + (2 + i) * MS));
        assert_eq!((got, failure), (entry, false));
        e.record(k, EventKind::ResponseFromCache, T0 + 2 * MS);
    }
    let snap = e.snapshot(k, T0 + 10 * MS).unwrap();
    assert_eq!(snap.cumulative[EventKind::ResponseFromCache.index()], 5);
    assert_eq!(snap.cumulative[EventKind::Success.index()], 1);
    let st = c.stats();
    assert_eq!((st.hits, st.misses, st.entries), (5, 1, 1));
    assert_eq!(st.bytes, 120 + 6, "payload + key bytes");
    assert!(events(&mut c, T0 + 10 * MS).is_empty());
}

#[test]
fn many_concurrent_callers_share_one_execution() {
    let mut c = cache("{}");
    let l = lead(c.lookup(G, b"k", T0));
    let waits: Vec<Wait> = (0..1_000)
        .map(|i| wait(c.lookup(G, b"k", T0 + i)))
        .collect();
    let ids: HashSet<CallerId> = waits.iter().map(|w| w.id()).collect();
    assert_eq!(ids.len(), 1_000, "distinct follower ids");
    assert_eq!(c.stats().followers, 1_000);
    assert_eq!(c.stats().flights, 1);
    // Past max_waiters (1 000) followers, a caller runs on its own.
    assert_eq!(
        c.lookup(G, b"k", T0),
        Lookup::Bypass(Bypass::TooManyWaiters)
    );
    let s = c.fill(l, 10, T0 + 5 * MS).unwrap();
    assert_eq!(s.followers, 1_000);
    let entry = s.entry.unwrap();
    let mut served = HashSet::new();
    for ev in events(&mut c, T0 + 5 * MS) {
        match ev {
            CacheEvent::Ready {
                wait,
                entry: got,
                failure: false,
            } => {
                assert_eq!(got, entry);
                assert!(served.insert(wait), "one result per follower");
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(served, ids, "every follower got the leader's entry");
    assert_eq!(c.stats().followers, 0);
    assert_eq!(c.stats().misses, 1, "one execution");
    // A follower whose wait ended cannot cancel any more.
    for w in waits {
        assert!(!c.cancel_wait(w, T0 + 6 * MS));
    }
}

#[test]
fn a_failed_leader_fails_its_followers_and_is_not_cached() {
    let mut c = cache("{}");
    let l = lead(c.lookup(G, b"k", T0));
    let w1 = wait(c.lookup(G, b"k", T0));
    let w2 = wait(c.lookup(G, b"k", T0));
    let s = c.fail(l, 40, T0 + MS).unwrap();
    assert!(!s.cached);
    assert_eq!(s.followers, 2);
    let entry = s.entry.unwrap();
    let evs = events(&mut c, T0 + MS);
    assert_eq!(
        evs,
        vec![
            CacheEvent::Ready {
                wait: w1.id(),
                entry,
                failure: true
            },
            CacheEvent::Ready {
                wait: w2.id(),
                entry,
                failure: true
            },
            CacheEvent::Removed {
                entry,
                reason: Removal::NotCached
            },
        ],
        "followers get the failure before its payload may be dropped"
    );
    assert!(!c.contains(entry));
    assert_eq!(c.stats().entries, 0);
    assert_eq!(c.stats().bytes, 0);
    // The next caller runs the call again.
    let _again = lead(c.lookup(G, b"k", T0 + 2 * MS));
}

#[test]
fn failures_are_cached_only_when_configured_with_their_own_ttl() {
    let mut c = cache(r#"{"cache_failures": true, "failure_ttl_ms": 100, "ttl_ms": 10000}"#);
    let l = lead(c.lookup(G, b"k", T0));
    let s = c.fail(l, 8, T0).unwrap();
    assert!(s.cached);
    let entry = s.entry.unwrap();
    assert_eq!(hit(c.lookup(G, b"k", T0 + 99 * MS)), (entry, true));
    // Past failure_ttl_ms the failure is gone and the call runs again.
    let l = lead(c.lookup(G, b"k", T0 + 100 * MS));
    assert_eq!(
        events(&mut c, T0 + 100 * MS),
        vec![CacheEvent::Removed {
            entry,
            reason: Removal::Expired
        }]
    );
    let s = c.fill(l, 8, T0 + 101 * MS).unwrap();
    let ok = s.entry.unwrap();
    assert_eq!(hit(c.lookup(G, b"k", T0 + 5_000 * MS)), (ok, false));
}

#[test]
fn promote_mode_hands_a_failed_leaders_turn_to_the_next_follower() {
    let mut c = cache(r#"{"on_leader_failure": "promote"}"#);
    assert_eq!(c.config().on_leader_failure, LeaderFailure::Promote);
    let l = lead(c.lookup(G, b"k", T0));
    let w1 = wait(c.lookup(G, b"k", T0));
    let w2 = wait(c.lookup(G, b"k", T0));
    let s = c.fail(l, 8, T0 + MS).unwrap();
    assert_eq!((s.entry, s.cached, s.followers), (None, false, 0));
    let mut evs = events(&mut c, T0 + MS);
    assert_eq!(evs.len(), 1);
    let Some(CacheEvent::Promoted { lead: l2 }) = evs.pop() else {
        panic!("promoted")
    };
    assert_eq!(l2.id(), w1.id(), "the first follower leads, same id");
    assert!(!c.cancel_wait(w1, T0 + MS), "it no longer waits");
    assert_eq!(c.stats().followers, 1);
    // The new leader succeeds: the remaining follower gets it.
    let s = c.fill(l2, 8, T0 + 2 * MS).unwrap();
    assert_eq!(s.followers, 1);
    let entry = s.entry.unwrap();
    assert_eq!(
        events(&mut c, T0 + 2 * MS),
        vec![CacheEvent::Ready {
            wait: w2.id(),
            entry,
            failure: false
        }]
    );
    // A failed leader without followers just ends the flight.
    let l = lead(c.lookup(G, b"other", T0 + 3 * MS));
    let s = c.fail(l, 8, T0 + 3 * MS).unwrap();
    assert!(s.entry.is_some() && !s.cached);
    let _ = lead(c.lookup(G, b"other", T0 + 4 * MS));
}

#[test]
fn a_cancelled_follower_leaves_and_a_cancelled_leader_hands_over() {
    let mut c = cache("{}");
    let l = lead(c.lookup(G, b"k", T0));
    let w1 = wait(c.lookup(G, b"k", T0));
    let w2 = wait(c.lookup(G, b"k", T0));
    let w3 = wait(c.lookup(G, b"k", T0));
    let (w2_id, w3_id) = (w2.id(), w3.id());
    assert!(c.cancel_wait(w2, T0 + MS));
    assert!(
        !c.cancel_wait(Wait::from_raw(w2_id.to_raw()), T0 + MS),
        "twice"
    );
    assert_eq!(c.stats().followers, 2);
    // The leader goes away: the first follower leads; nobody is failed.
    assert!(c.cancel_lead(l, T0 + 2 * MS));
    let mut evs = events(&mut c, T0 + 2 * MS);
    let Some(CacheEvent::Promoted { lead: l2 }) = evs.pop() else {
        panic!("promoted")
    };
    assert!(evs.is_empty());
    assert_eq!(l2.id(), w1.id());
    let s = c.fill(l2, 1, T0 + 3 * MS).unwrap();
    assert_eq!(s.followers, 1);
    assert_eq!(
        events(&mut c, T0 + 3 * MS),
        vec![CacheEvent::Ready {
            wait: w3_id,
            entry: s.entry.unwrap(),
            failure: false
        }]
    );
    // A cancelled leader with no followers ends the flight; no entry, no event.
    let l = lead(c.lookup(G, b"solo", T0));
    assert!(c.cancel_lead(l, T0));
    assert!(events(&mut c, T0).is_empty());
    assert_eq!(c.stats().flights, 0);
    let _ = lead(c.lookup(G, b"solo", T0));
}

#[test]
fn entries_expire_after_their_ttl() {
    let mut c = cache(r#"{"ttl_ms": 1000}"#);
    let l = lead(c.lookup(G, b"k", T0));
    let entry = c.fill(l, 1, T0).unwrap().entry.unwrap();
    assert_eq!(hit(c.lookup(G, b"k", T0 + 999 * MS)).0, entry);
    let _l = lead(c.lookup(G, b"k", T0 + 1_000 * MS));
    assert_eq!(
        events(&mut c, T0 + 1_000 * MS),
        vec![CacheEvent::Removed {
            entry,
            reason: Removal::Expired
        }]
    );
    assert!(!c.contains(entry));

    // ttl 0: no expiry.
    let mut c = cache(r#"{"ttl_ms": 0}"#);
    let l = lead(c.lookup(G, b"k", T0));
    let entry = c.fill(l, 1, T0).unwrap().entry.unwrap();
    assert_eq!(hit(c.lookup(G, b"k", T0 + 1_000_000 * MS)).0, entry);
}

#[test]
fn request_scopes_are_isolated_and_closing_one_drops_its_entries() {
    let mut c = cache("{}");
    let a = c.open_scope().unwrap();
    let b = c.open_scope().unwrap();
    assert_ne!(a, b);
    assert!(a.to_raw() < 1 << 53);
    // One key, three scopes, three entries.
    let la = lead(c.lookup(a, b"k", T0));
    let lb = lead(c.lookup(b, b"k", T0));
    let lg = lead(c.lookup(G, b"k", T0));
    let ea = c.fill(la, 1, T0).unwrap().entry.unwrap();
    let eb = c.fill(lb, 1, T0).unwrap().entry.unwrap();
    let eg = c.fill(lg, 1, T0).unwrap().entry.unwrap();
    assert_eq!(hit(c.lookup(a, b"k", T0)).0, ea);
    assert_eq!(hit(c.lookup(b, b"k", T0)).0, eb);
    assert_eq!(hit(c.lookup(G, b"k", T0)).0, eg);
    // A flight in scope a with a follower, closed with the scope.
    let lf = lead(c.lookup(a, b"pending", T0));
    let wf = wait(c.lookup(a, b"pending", T0));
    assert_eq!(c.stats().scopes, 2);
    assert!(c.close_scope(a, T0 + MS));
    let evs = events(&mut c, T0 + MS);
    assert!(evs.contains(&CacheEvent::Removed {
        entry: ea,
        reason: Removal::ScopeClosed
    }));
    assert!(evs.contains(&CacheEvent::Abandoned {
        wait: wf.id(),
        reason: Abandon::ScopeClosed
    }));
    assert_eq!(evs.len(), 2);
    assert_eq!(c.fill(lf, 1, T0 + MS), None, "the scope's lead is stale");
    assert_eq!(
        c.lookup(a, b"k", T0 + MS),
        Lookup::Bypass(Bypass::UnknownScope)
    );
    assert!(!c.close_scope(a, T0 + MS), "closed twice");
    assert!(!c.close_scope(G, T0 + MS), "the global scope stays");
    // The other scopes are untouched.
    assert_eq!(hit(c.lookup(b, b"k", T0 + MS)).0, eb);
    assert_eq!(hit(c.lookup(G, b"k", T0 + MS)).0, eg);
    assert_eq!(c.stats().scopes, 1);
    // A scope slot reused later is a different scope.
    let a2 = c.open_scope().unwrap();
    assert_ne!(a2, a);
    let _ = lead(c.lookup(a2, b"k", T0 + MS));
}

#[test]
fn scopes_are_bounded() {
    let mut c = cache(r#"{"max_scopes": 2}"#);
    let a = c.open_scope().unwrap();
    let _b = c.open_scope().unwrap();
    assert_eq!(c.open_scope(), None);
    assert!(c.close_scope(a, T0));
    assert!(c.open_scope().is_some());
    let mut c = cache(r#"{"max_scopes": 0}"#);
    assert_eq!(c.open_scope(), None, "global only");
}

#[test]
fn the_entry_bound_holds_and_every_evicted_entry_is_reported() {
    let mut c = cache(r#"{"max_entries": 100}"#);
    let mut handed = HashSet::new();
    let mut removed = HashSet::new();
    for i in 0..1_000u32 {
        let now = T0 + u64::from(i) * MS;
        let l = lead(c.lookup(G, &i.to_le_bytes(), now));
        handed.insert(c.fill(l, 10, now).unwrap().entry.unwrap());
        assert!(c.stats().entries <= 100);
        for ev in events(&mut c, now) {
            let CacheEvent::Removed {
                entry,
                reason: Removal::Evicted,
            } = ev
            else {
                panic!("{ev:?}")
            };
            assert!(removed.insert(entry), "removed once");
        }
    }
    assert_eq!(c.stats().entries, 100);
    assert_eq!(removed.len(), 900);
    assert_eq!(c.stats().evictions, 900);
    assert!(removed.is_subset(&handed));
    assert_eq!(c.stats().bytes, 100 * (10 + 4));
}

#[test]
fn the_byte_bound_holds_and_oversized_results_are_shared_but_not_cached() {
    let mut c = cache(r#"{"max_bytes": 10000, "max_key_bytes": 16}"#);
    for i in 0..100u32 {
        let l = lead(c.lookup(G, &i.to_le_bytes(), T0));
        let s = c.fill(l, 996, T0).unwrap();
        assert!(s.cached);
        assert!(c.stats().bytes <= 10_000);
    }
    assert_eq!(c.stats().entries, 10, "10 × (996 + 4) bytes");
    let _ = events(&mut c, T0);
    // Larger than the whole budget: handed to the followers, then dropped; nothing
    // else is evicted for it.
    let l = lead(c.lookup(G, b"huge", T0));
    // Its key bytes needed room: one entry was evicted for the flight.
    assert!(matches!(
        events(&mut c, T0)[..],
        [CacheEvent::Removed {
            reason: Removal::Evicted,
            ..
        }]
    ));
    let w = wait(c.lookup(G, b"huge", T0));
    let s = c.fill(l, 20_000, T0).unwrap();
    assert!(!s.cached);
    let entry = s.entry.unwrap();
    assert_eq!(
        events(&mut c, T0),
        vec![
            CacheEvent::Ready {
                wait: w.id(),
                entry,
                failure: false
            },
            CacheEvent::Removed {
                entry,
                reason: Removal::NotCached
            }
        ]
    );
    assert_eq!(c.stats().entries, 9);
    // Keys longer than max_key_bytes bypass the cache.
    assert_eq!(
        c.lookup(G, &[0u8; 17], T0),
        Lookup::Bypass(Bypass::KeyTooLong)
    );
}

#[test]
fn sieve_keeps_entries_that_are_hit_and_evicts_one_hit_wonders() {
    let mut c = cache(r#"{"max_entries": 100}"#);
    let hot: Vec<EntryId> = (0..50u32)
        .map(|i| {
            let l = lead(c.lookup(G, format!("hot{i}").as_bytes(), T0));
            c.fill(l, 1, T0).unwrap().entry.unwrap()
        })
        .collect();
    // A scan of 10 000 one-time keys, with the hot keys read in between.
    for i in 0..10_000u32 {
        let l = lead(c.lookup(G, format!("scan{i}").as_bytes(), T0));
        let _ = c.fill(l, 1, T0);
        if i % 20 == 0 {
            for (j, e) in hot.iter().enumerate() {
                assert_eq!(
                    hit(c.lookup(G, format!("hot{j}").as_bytes(), T0)).0,
                    *e,
                    "hot key {j} survived the scan (step {i})"
                );
            }
        }
        let _ = events(&mut c, T0);
    }
    assert!(c.stats().entries <= 100);
}

#[test]
fn a_flight_past_max_wait_abandons_its_followers() {
    let mut c = cache(r#"{"max_wait_ms": 500}"#);
    assert_eq!(c.next_deadline(), None);
    let l = lead(c.lookup(G, b"k", T0));
    let w = wait(c.lookup(G, b"k", T0 + 100 * MS));
    assert_eq!(c.next_deadline(), Some(T0 + 500 * MS));
    assert!(events(&mut c, T0 + 499 * MS).is_empty());
    assert_eq!(
        events(&mut c, T0 + 500 * MS),
        vec![CacheEvent::Abandoned {
            wait: w.id(),
            reason: Abandon::WaitExpired
        }]
    );
    assert_eq!(c.next_deadline(), None);
    assert_eq!(
        c.fill(l, 1, T0 + 600 * MS),
        None,
        "the late leader is stale"
    );
    assert_eq!(c.stats().entries, 0);
    let _ = lead(c.lookup(G, b"k", T0 + 600 * MS));
}

#[test]
fn promotions_keep_the_flights_max_wait() {
    // Found by review: each promotion restarted the flight, so behind failing leaders
    // a follower waited one leader's call after another (8 × max_wait_ms seen).
    for cancelled in [false, true] {
        let mut c = cache(r#"{"max_wait_ms": 500, "on_leader_failure": "promote"}"#);
        let l = lead(c.lookup(G, b"k", T0));
        let w1 = wait(c.lookup(G, b"k", T0 + 100 * MS));
        let w2 = wait(c.lookup(G, b"k", T0 + 200 * MS));
        if cancelled {
            assert!(c.cancel_lead(l, T0 + 400 * MS));
        } else {
            c.fail(l, 1, T0 + 400 * MS).unwrap();
        }
        let Some(CacheEvent::Promoted { lead: l2 }) = events(&mut c, T0 + 400 * MS).pop() else {
            panic!("promoted")
        };
        assert_eq!(l2.id(), w1.id());
        assert_eq!(
            c.next_deadline(),
            Some(T0 + 500 * MS),
            "from the first leader's start"
        );
        assert_eq!(
            events(&mut c, T0 + 500 * MS),
            vec![CacheEvent::Abandoned {
                wait: w2.id(),
                reason: Abandon::WaitExpired
            }]
        );
    }
}

#[test]
fn dedup_can_be_turned_off() {
    let mut c = cache(r#"{"max_waiters": 0}"#);
    let _l = lead(c.lookup(G, b"k", T0));
    assert_eq!(
        c.lookup(G, b"k", T0),
        Lookup::Bypass(Bypass::TooManyWaiters)
    );
}

#[test]
fn a_call_that_did_not_lead_fills_its_key_first_result_wins() {
    let mut c = cache(r#"{"max_waiters": 0}"#);
    // The leader is still running when the bypassed call succeeds: its result fills
    // the flight; the leader's own result is then stale.
    let a = lead(c.lookup(G, b"k", T0));
    assert_eq!(
        c.lookup(G, b"k", T0),
        Lookup::Bypass(Bypass::TooManyWaiters)
    );
    let s = c.offer(G, b"k", 3, T0).expect("kept");
    assert!(s.cached);
    let (e, failure) = hit(c.lookup(G, b"k", T0));
    assert_eq!((Some(e), failure), (s.entry, false));
    assert_eq!(c.fail(a, 0, T0), None, "the leader's result is stale");
    assert_eq!(hit(c.lookup(G, b"k", T0)).0, e);
    // A ready entry stays: the first result to arrive is kept.
    assert_eq!(c.offer(G, b"k", 3, T0), None);
    // The leader failed first (nothing cached): a later success fills the key.
    let b = lead(c.lookup(G, b"j", T0));
    assert_eq!(
        c.lookup(G, b"j", T0),
        Lookup::Bypass(Bypass::TooManyWaiters)
    );
    assert!(c.fail(b, 0, T0).is_some_and(|s| !s.cached));
    let s = c.offer(G, b"j", 3, T0).expect("kept");
    assert_eq!(hit(c.lookup(G, b"j", T0)).0, s.entry.unwrap());
    let st = c.stats();
    assert_eq!((st.flights, st.entries), (0, 2));
    assert_eq!(st.misses, 2, "offers are not lookups");
    // Every entry in flight: an offer keeps nothing, and is no bypass either.
    let mut full = cache(r#"{"max_entries": 1, "max_waiters": 0}"#);
    let _l = lead(full.lookup(G, b"a", T0));
    assert_eq!(full.offer(G, b"b", 1, T0), None);
    assert_eq!(full.stats().bypasses, 0);
}

#[test]
fn when_every_entry_is_in_flight_lookups_bypass() {
    let mut c = cache(r#"{"max_entries": 2}"#);
    let _a = lead(c.lookup(G, b"a", T0));
    let _b = lead(c.lookup(G, b"b", T0));
    assert_eq!(c.lookup(G, b"c", T0), Lookup::Bypass(Bypass::Full));
    assert_eq!(c.stats().bypasses, 1);
}

#[test]
fn invalidate_and_clear() {
    let mut c = cache("{}");
    let s = c.open_scope().unwrap();
    let l = lead(c.lookup(G, b"a", T0));
    let ea = c.fill(l, 1, T0).unwrap().entry.unwrap();
    let l = lead(c.lookup(s, b"b", T0));
    let eb = c.fill(l, 1, T0).unwrap().entry.unwrap();
    let pending = lead(c.lookup(G, b"p", T0));
    assert!(c.invalidate(G, b"a", T0));
    assert!(!c.invalidate(G, b"a", T0));
    assert!(!c.invalidate(G, b"p", T0), "flights are not entries");
    assert_eq!(
        events(&mut c, T0),
        vec![CacheEvent::Removed {
            entry: ea,
            reason: Removal::Invalidated
        }]
    );
    let l = lead(c.lookup(G, b"c", T0));
    let ec = c.fill(l, 1, T0).unwrap().entry.unwrap();
    let t = c.open_scope().unwrap();
    let l = lead(c.lookup(t, b"b", T0));
    let et = c.fill(l, 1, T0).unwrap().entry.unwrap();
    // Clearing one scope leaves the others.
    c.clear(G, T0);
    assert_eq!(
        events(&mut c, T0),
        vec![CacheEvent::Removed {
            entry: ec,
            reason: Removal::Cleared
        }]
    );
    c.clear(s, T0);
    assert_eq!(
        events(&mut c, T0),
        vec![CacheEvent::Removed {
            entry: eb,
            reason: Removal::Cleared
        }]
    );
    assert_eq!(hit(c.lookup(t, b"b", T0)).0, et);
    assert!(c.close_scope(s, T0));
    c.clear(s, T0);
    assert_eq!(events(&mut c, T0), vec![], "a closed scope clears nothing");
    assert_eq!(c.stats().entries, 2, "the flight goes on");
    assert!(c.fill(pending, 1, T0).unwrap().cached);
}

#[test]
fn clear_gives_the_keys_memory_back_and_old_entries_stay_unknown() {
    let mut c = cache(r#"{"max_entries": 100000, "ttl_ms": 0}"#);
    let empty = c.memory_bytes();
    let mut stored = Vec::new();
    for i in 0..20_000u32 {
        let mut key = [0u8; 200];
        key[..4].copy_from_slice(&i.to_le_bytes());
        let l = lead(c.lookup(G, &key, T0));
        stored.push(c.fill(l, 1, T0).unwrap().entry.unwrap());
    }
    let full = c.memory_bytes();
    assert!(full > 20_000 * 200, "{full}");
    c.clear(G, T0);
    assert_eq!(events(&mut c, T0).len(), 20_000);
    let cleared = c.memory_bytes();
    assert!(
        cleared < empty + (64 << 10),
        "kept {cleared} bytes after clear (was {full}, empty {empty})"
    );
    // The slots are made anew: no entry of before the clear is found again.
    for i in 0..20_000u32 {
        let l = lead(c.lookup(G, &i.to_le_bytes(), T0));
        assert!(c.fill(l, 1, T0).unwrap().cached);
    }
    assert!(stored.iter().all(|e| !c.contains(*e)));
}

/// Found by review: when the flights' keys alone left no room for a result, every
/// entry was evicted and the result was not kept all the same.
#[test]
fn entries_are_not_evicted_for_a_result_that_cannot_fit() {
    let mut c = cache(r#"{"max_bytes": 10000, "max_key_bytes": 1000, "ttl_ms": 0}"#);
    let kept: Vec<_> = (0..4u8)
        .map(|i| {
            let l = lead(c.lookup(G, &[i], T0));
            c.fill(l, 499, T0).unwrap().entry.unwrap()
        })
        .collect();
    let leads: Vec<_> = (0..8u8)
        .map(|i| lead(c.lookup(G, &[i + 10; 1000], T0)))
        .collect();
    let mut leads = leads.into_iter();
    let s = c.fill(leads.next().unwrap(), 2_500, T0).unwrap();
    assert!(
        !s.cached,
        "7 000 B of flights' keys leave no room for 3 500 B"
    );
    assert!(
        kept.iter().all(|e| c.contains(*e)),
        "nothing evicted for it"
    );
    // One that fits still evicts what it must.
    let s = c.fill(leads.next().unwrap(), 1_000, T0).unwrap();
    assert!(s.cached);
}

/// Found by review: a freed entry kept its key's buffer for its slot's next key, so
/// slots that once held a long key kept its memory, past `max_bytes`.
#[test]
fn long_keys_leave_no_memory_behind_in_their_slots() {
    let mut c = cache(
        r#"{"max_entries": 1000, "max_bytes": 1048576, "max_key_bytes": 65536, "ttl_ms": 0}"#,
    );
    let key = |i: u32| i.to_le_bytes().to_vec();
    for i in 0..1_000u32 {
        let l = lead(c.lookup(G, &key(i), T0));
        c.fill(l, 1, T0).unwrap();
    }
    for i in 0..1_000u32 {
        let _ = c.invalidate(G, &key(i), T0);
        let mut long = vec![0u8; 60_000];
        long[..4].copy_from_slice(&i.to_le_bytes());
        let l = lead(c.lookup(G, &long, T0));
        c.fill(l, 1, T0).unwrap();
        let _ = c.invalidate(G, &long, T0);
        let l = lead(c.lookup(G, &key(i), T0));
        c.fill(l, 1, T0).unwrap();
        events(&mut c, T0);
    }
    assert_eq!(c.stats().entries, 1_000);
    let kept = c.memory_bytes();
    assert!(
        kept < 2 << 20,
        "{kept} bytes for 1 000 short keys (60 MB before)"
    );
}

#[test]
fn reconfigure_keeps_entries_and_applies_new_bounds_and_ttls() {
    let mut c = cache(r#"{"max_entries": 100, "ttl_ms": 0}"#);
    let mut stored = Vec::new();
    for i in 0..100u32 {
        let l = lead(c.lookup(G, &i.to_le_bytes(), T0));
        stored.push((i, c.fill(l, 1, T0).unwrap().entry.unwrap()));
    }
    let mut next = cfg(r#"{"max_entries": 10, "ttl_ms": 0}"#);
    c.set_config(next.clone(), T0).unwrap();
    assert_eq!(c.stats().entries, 10);
    assert_eq!(
        events(&mut c, T0)
            .iter()
            .filter(|e| matches!(
                e,
                CacheEvent::Removed {
                    reason: Removal::Evicted,
                    ..
                }
            ))
            .count(),
        90
    );
    // A TTL applies to stored entries at once.
    next.ttl_ms = 1_000;
    c.set_config(next, T0).unwrap();
    let survivors: Vec<_> = stored.iter().filter(|(_, e)| c.contains(*e)).collect();
    assert_eq!(survivors.len(), 10);
    let (survivor, entry) = *survivors[0];
    assert_eq!(hit(c.lookup(G, &survivor.to_le_bytes(), T0)).0, entry);
    assert!(matches!(
        c.lookup(G, &survivor.to_le_bytes(), T0 + 1_000 * MS),
        Lookup::Lead(_)
    ));
    // An invalid config is refused with its path; the old one stays.
    let e = c
        .set_config(
            CacheConfig {
                max_entries: 0,
                ..CacheConfig::default()
            },
            T0,
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "cache.max_entries: must be in 1..=16777215, got 0"
    );
    assert_eq!(c.config().max_entries, 10);
}

#[test]
fn stale_and_forged_handles_are_ignored() {
    let mut c = cache("{}");
    let l = lead(c.lookup(G, b"k", T0));
    let raw = l.id().to_raw();
    assert!(raw < 1 << 53);
    let entry = c.fill(l, 1, T0).unwrap().entry.unwrap();
    assert!(entry.to_raw() < 1 << 53);
    assert_eq!(c.fill(Lead::from_raw(raw), 1, T0), None, "filled twice");
    assert!(!c.cancel_lead(Lead::from_raw(raw), T0));
    for forged in [u64::MAX, 1 << 53, raw | 1 << 60, 12_345_678, 0] {
        assert_eq!(c.fill(Lead::from_raw(forged), 1, T0), None);
        assert_eq!(c.fail(Lead::from_raw(forged), 1, T0), None);
        assert!(!c.cancel_lead(Lead::from_raw(forged), T0));
        assert!(!c.cancel_wait(Wait::from_raw(forged), T0));
        assert_eq!(
            c.contains(EntryId::from_raw(forged)),
            forged == entry.to_raw()
        );
        let scope = ScopeId::from_raw(forged | 1);
        assert_eq!(
            c.lookup(scope, b"k", T0),
            Lookup::Bypass(Bypass::UnknownScope)
        );
        assert!(!c.close_scope(scope, T0));
    }
    assert_eq!(hit(c.lookup(G, b"k", T0)).0, entry, "unharmed");
    // A lead's raw number used as a wait (and the reverse) is refused.
    let l = lead(c.lookup(G, b"x", T0));
    let w = wait(c.lookup(G, b"x", T0));
    let (lr, wr) = (l.into_raw(), w.into_raw());
    assert!(!c.cancel_wait(Wait::from_raw(lr), T0));
    assert!(!c.cancel_lead(Lead::from_raw(wr), T0));
    assert_eq!(c.fill(Lead::from_raw(wr), 1, T0), None);
    assert_eq!(c.fill(Lead::from_raw(lr), 1, T0).unwrap().followers, 1);
}

#[test]
fn config_defaults_and_field_path_errors() {
    let c = Config::from_json(r#"{"cache": {}}"#).unwrap();
    let d = c.cache.unwrap();
    assert_eq!(d, CacheConfig::default());
    assert_eq!(d.max_entries, 10_000);
    assert_eq!(d.max_bytes, 16 << 20);
    assert_eq!(d.ttl_ms, 60_000);
    assert!(!d.cache_failures);
    assert_eq!(d.failure_ttl_ms, 1_000);
    assert_eq!(d.on_leader_failure, LeaderFailure::FailFollowers);
    assert_eq!(d.max_waiters, 1_000);
    assert_eq!(d.max_wait_ms, 10_000);
    assert_eq!(d.max_key_bytes, 1_024);
    assert_eq!(d.max_scopes, 10_000);
    assert_eq!(
        Config::from_json("{}").unwrap().cache,
        None,
        "off by default"
    );
    let err = |json: &str| Config::from_json(json).unwrap_err().to_string();
    assert_eq!(
        err(r#"{"cache": {"max_entries": 0}}"#),
        "cache.max_entries: must be in 1..=16777215, got 0"
    );
    assert_eq!(
        err(r#"{"cache": {"max_bytes": 10}}"#),
        "cache.max_bytes: must be at least max_key_bytes (1024), got 10"
    );
    assert_eq!(
        err(r#"{"cache": {"failure_ttl_ms": 0}}"#),
        "cache.failure_ttl_ms: must be in 1..=31536000000 ms, got 0"
    );
    assert!(err(r#"{"cache": {"max_entrys": 1}}"#)
        .starts_with("cache.max_entrys: unknown field `max_entrys`"));
    assert!(err(r#"{"cache": {"on_leader_failure": "retry"}}"#)
        .starts_with("cache.on_leader_failure: unknown value"));
    let round = Config::from_json(r#"{"cache": {"ttl_ms": 5, "cache_failures": true}}"#).unwrap();
    assert_eq!(Config::from_json(&round.to_json()).unwrap(), round);
}

#[test]
fn a_million_distinct_keys_under_a_10_000_entry_limit_stay_bounded() {
    let mut c = cache(r#"{"max_entries": 10000, "ttl_ms": 0}"#);
    let mut peak = 0usize;
    let mut removed = 0u64;
    let mut key = [0u8; 16];
    for i in 0..1_000_000u64 {
        key[..8].copy_from_slice(&i.to_le_bytes());
        let Lookup::Lead(l) = c.lookup(G, &key, T0 + i) else {
            panic!("distinct keys miss")
        };
        let _ = c.fill(l, 100, T0 + i);
        while let Some(ev) = c.poll(T0 + i) {
            assert!(matches!(ev, CacheEvent::Removed { .. }));
            removed += 1;
        }
        if i % 4096 == 0 {
            peak = peak.max(c.memory_bytes());
        }
    }
    let st = c.stats();
    assert_eq!(st.entries, 10_000);
    assert_eq!(removed, 990_000);
    assert!(st.bytes <= 10_000 * 116);
    peak = peak.max(c.memory_bytes());
    println!(
        "1 000 000 distinct keys, max_entries 10 000: index memory {} bytes ({} per entry), host payload bytes counted {}",
        peak,
        peak / 10_000,
        st.bytes
    );
    assert!(
        peak < 4 << 20,
        "index memory stays bounded by the entry limit: {peak} bytes"
    );
}

// ---- property: every caller gets exactly one result; the bounds hold ------------

#[derive(Clone, Debug)]
enum Op {
    Lookup { scope: usize, key: u8 },
    Fill { caller: usize, bytes: u16 },
    Fail { caller: usize, bytes: u16 },
    CancelLead { caller: usize },
    CancelWait { caller: usize },
    Advance { ms: u16 },
    Jump { to: u8 },
    Poll,
    OpenScope,
    CloseScope { scope: usize },
    Invalidate { key: u8 },
    Clear { scope: usize },
    Offer { scope: usize, key: u8, bytes: u16 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3usize, 0..12u8).prop_map(|(scope, key)| Op::Lookup { scope, key }),
        3 => (any::<usize>(), 0..400u16).prop_map(|(caller, bytes)| Op::Fill { caller, bytes }),
        2 => (any::<usize>(), 0..400u16).prop_map(|(caller, bytes)| Op::Fail { caller, bytes }),
        1 => any::<usize>().prop_map(|caller| Op::CancelLead { caller }),
        2 => any::<usize>().prop_map(|caller| Op::CancelWait { caller }),
        2 => (0..300u16).prop_map(|ms| Op::Advance { ms }),
        1 => (0..5u8).prop_map(|to| Op::Jump { to }),
        2 => Just(Op::Poll),
        1 => Just(Op::OpenScope),
        1 => any::<usize>().prop_map(|scope| Op::CloseScope { scope }),
        1 => (0..12u8).prop_map(|key| Op::Invalidate { key }),
        1 => any::<usize>().prop_map(|scope| Op::Clear { scope }),
        2 => (0..3usize, 0..12u8, 0..400u16).prop_map(|(scope, key, bytes)| Op::Offer { scope, key, bytes }),
    ]
}

fn config_strategy() -> impl Strategy<Value = CacheConfig> {
    (
        1..8u32,
        prop_oneof![Just(64u64), Just(600u64), Just(100_000u64)],
        prop_oneof![Just(0u64), Just(200u64), Just(5_000u64)],
        any::<bool>(),
        any::<bool>(),
        0..4u32,
        prop_oneof![Just(100u64), Just(1_000u64)],
    )
        .prop_map(
            |(
                max_entries,
                max_bytes,
                ttl_ms,
                cache_failures,
                promote,
                max_waiters,
                max_wait_ms,
            )| {
                CacheConfig {
                    max_entries,
                    max_bytes,
                    ttl_ms,
                    cache_failures,
                    failure_ttl_ms: 150,
                    on_leader_failure: if promote {
                        LeaderFailure::Promote
                    } else {
                        LeaderFailure::FailFollowers
                    },
                    max_waiters,
                    max_wait_ms,
                    max_key_bytes: 8,
                    max_scopes: 3,
                }
            },
        )
}

/// The host's side: what each caller is doing, and what it has been told.
#[derive(Default)]
struct Model {
    leads: Vec<(usize, Lead)>,
    waits: Vec<(usize, Wait)>,
    /// Callers that got their one result (by caller number).
    done: HashMap<usize, &'static str>,
    callers: usize,
    /// Entries handed out and not yet removed.
    live_entries: HashSet<EntryId>,
    removed: HashSet<EntryId>,
    wait_ids: HashMap<CallerId, usize>,
}

impl Model {
    fn finish(&mut self, caller: usize, how: &'static str) {
        if let Some(prev) = self.done.insert(caller, how) {
            panic!("caller {caller} got two results: {prev} and {how}");
        }
    }

    fn handed(&mut self, e: EntryId) {
        assert!(!self.removed.contains(&e), "{e:?} handed out after removal");
        self.live_entries.insert(e);
    }

    fn event(&mut self, ev: CacheEvent) {
        match ev {
            CacheEvent::Ready { wait, entry, .. } => {
                let caller = self.take_wait(wait);
                assert!(
                    self.live_entries.contains(&entry),
                    "Ready names a live entry"
                );
                self.finish(caller, "ready");
            }
            CacheEvent::Abandoned { wait, .. } => {
                let caller = self.take_wait(wait);
                self.finish(caller, "abandoned");
            }
            CacheEvent::Promoted { lead } => {
                let caller = self.take_wait(lead.id());
                self.leads.push((caller, lead));
            }
            CacheEvent::Removed { entry, .. } => {
                assert!(self.live_entries.remove(&entry), "removed once: {entry:?}");
                self.removed.insert(entry);
            }
        }
    }

    fn take_wait(&mut self, id: CallerId) -> usize {
        let i = self
            .waits
            .iter()
            .position(|(_, w)| w.id() == id)
            .unwrap_or_else(|| panic!("event for a caller that is not waiting: {id:?}"));
        let caller = self.waits.swap_remove(i).0;
        assert_eq!(self.wait_ids.get(&id), Some(&caller));
        caller
    }
}

fn check_bounds(c: &RequestCache) {
    let s = c.stats();
    let cfg = c.config();
    assert!(s.entries <= cfg.max_entries, "{s:?}");
    assert!(s.bytes <= cfg.max_bytes, "{s:?}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn every_caller_gets_exactly_one_result_within_the_bounds(
        config in config_strategy(),
        ops in prop::collection::vec(op(), 1..120),
    ) {
        let mut c = RequestCache::new(config, 7).unwrap();
        let mut m = Model::default();
        let mut scopes = vec![ScopeId::GLOBAL];
        let mut now = T0;
        // The latest time so far: a clock stepping back counts as no time passing,
        // so what is due waits until the clock is past it again.
        let mut high = T0;
        let drain = |c: &mut RequestCache, m: &mut Model, now: u64| {
            while let Some(ev) = c.poll(now) {
                m.event(ev);
            }
        };
        for op in ops {
            match op {
                Op::Lookup { scope, key } => {
                    let s = scopes[scope % scopes.len()];
                    let caller = m.callers;
                    m.callers += 1;
                    let k = [key; 3];
                    match c.lookup(s, &k[..1 + (key as usize % 3)], now) {
                        Lookup::Hit { entry, .. } => {
                            assert!(m.live_entries.contains(&entry), "hit on a live entry");
                            m.finish(caller, "hit");
                        }
                        Lookup::Lead(l) => m.leads.push((caller, l)),
                        Lookup::Wait(w) => {
                            m.wait_ids.insert(w.id(), caller);
                            m.waits.push((caller, w));
                        }
                        Lookup::Bypass(_) => m.finish(caller, "bypass"),
                    }
                }
                Op::Fill { caller, bytes } | Op::Fail { caller, bytes } if !m.leads.is_empty() => {
                    let (who, l) = m.leads.swap_remove(caller % m.leads.len());
                    let settled = if matches!(op, Op::Fill { .. }) {
                        c.fill(l, bytes.into(), now)
                    } else {
                        c.fail(l, bytes.into(), now)
                    };
                    // A stale lead (flight abandoned, scope closed) still has its own
                    // result: the caller ran the call.
                    if let Some(s) = settled {
                        if let Some(e) = s.entry {
                            m.handed(e);
                        }
                    }
                    m.finish(who, "own result");
                }
                Op::CancelLead { caller } if !m.leads.is_empty() => {
                    let (who, l) = m.leads.swap_remove(caller % m.leads.len());
                    let _ = c.cancel_lead(l, now);
                    m.finish(who, "cancelled lead");
                }
                Op::CancelWait { caller } if !m.waits.is_empty() => {
                    let i = caller % m.waits.len();
                    let id = m.waits[i].1.id();
                    let (who, w) = m.waits.swap_remove(i);
                    if c.cancel_wait(w, now) {
                        m.finish(who, "cancelled wait");
                    } else {
                        // Its result is queued: the event will name it.
                        m.waits.push((who, Wait::from_raw(id.to_raw())));
                    }
                }
                Op::Advance { ms } => now = now.saturating_add(u64::from(ms) * MS),
                Op::Jump { to } => now = common::jump(now, to),
                Op::Poll => drain(&mut c, &mut m, now),
                Op::OpenScope => {
                    if let Some(s) = c.open_scope() {
                        scopes.push(s);
                    }
                }
                Op::CloseScope { scope } if scopes.len() > 1 => {
                    let i = 1 + scope % (scopes.len() - 1);
                    let s = scopes.swap_remove(i);
                    assert!(c.close_scope(s, now));
                }
                Op::Invalidate { key } => {
                    let _ = c.invalidate(scopes[0], &[key], now);
                }
                Op::Clear { scope } => c.clear(scopes[scope % scopes.len()], now),
                Op::Offer { scope, key, bytes } => {
                    // A call that bypassed the cache succeeded.
                    let s = scopes[scope % scopes.len()];
                    let k = [key; 3];
                    if let Some(Some(e)) = c.offer(s, &k[..1 + (key as usize % 3)], bytes.into(), now).map(|s| s.entry) {
                        m.handed(e);
                    }
                }
                _ => {}
            }
            high = high.max(now);
            check_bounds(&c);
        }
        // Settle everything left: leads finish (some fail), then time runs out.
        drain(&mut c, &mut m, now);
        let mut round = 0;
        while !m.leads.is_empty() || !m.waits.is_empty() {
            while let Some((who, l)) = m.leads.pop() {
                if let Some(Some(e)) = (if round % 2 == 0 { c.fill(l, 5, now) } else { c.fail(l, 5, now) }).map(|s| s.entry) {
                    m.handed(e);
                }
                m.finish(who, "own result");
            }
            drain(&mut c, &mut m, now);
            now = now.max(high).saturating_add(20_000 * MS);
            drain(&mut c, &mut m, now);
            round += 1;
            prop_assert!(round < 1_000, "settles");
        }
        for i in 0..m.callers {
            prop_assert!(m.done.contains_key(&i), "caller {} got no result", i);
        }
        let s = c.stats();
        prop_assert_eq!((s.flights, s.followers), (0, 0));
        check_bounds(&c);
        // Every entry still handed out is still stored, and the reverse.
        for e in &m.live_entries {
            prop_assert!(c.contains(*e));
        }
        prop_assert_eq!(s.entries as usize, m.live_entries.len());
    }
}

/// Found by a stress run of the filter's stale copies: a read-only host asked with
/// `lookup` and cancelled the lead of a miss, and the lead had evicted a kept entry to
/// make room (with `max_entries` 1, every miss dropped the only copy). `get` reads
/// only: a hit counts, a miss leaves the store as it was.
#[test]
fn get_reads_without_leading_or_evicting() {
    let mut c = cache(r#"{"max_entries": 1, "ttl_ms": 1000}"#);
    let l = lead(c.lookup(G, b"a", T0));
    let entry = c.fill(l, 10, T0).unwrap().entry.unwrap();
    assert_eq!(c.get(G, b"b", T0 + MS), None, "a miss");
    assert!(c.contains(entry), "the kept entry survives a miss");
    assert_eq!(c.get(G, b"a", T0 + 2 * MS), Some(entry));
    let st = c.stats();
    assert_eq!((st.hits, st.misses, st.entries, st.evictions), (1, 1, 1, 0));
    // In flight (a lead, not ready) and expired entries are not served.
    let mut c = cache(r#"{"ttl_ms": 1000}"#);
    let _b = lead(c.lookup(G, b"b", T0));
    assert_eq!(c.get(G, b"b", T0), None, "in flight");
    let l = lead(c.lookup(G, b"c", T0));
    let e = c.fill(l, 1, T0).unwrap().entry.unwrap();
    assert_eq!(c.get(G, b"c", T0 + 999 * MS), Some(e));
    assert_eq!(c.get(G, b"c", T0 + 1_000 * MS), None, "expired");
}

// ---- boundaries and counters (found by mutation testing) -------------------------

/// A lower `max_bytes` evicts until the bytes are within it — and no further: bytes
/// equal to the bound are within it.
#[test]
fn reconfigure_to_a_lower_byte_bound_evicts_down_to_it_and_no_further() {
    let mut c = cache(r#"{"max_bytes": 100000, "ttl_ms": 0}"#);
    // Three entries of 1 000 bytes (a 1-byte key and 999 payload bytes each).
    let stored: Vec<EntryId> = (0..3u8)
        .map(|i| {
            let l = lead(c.lookup(G, &[i], T0));
            c.fill(l, 999, T0).unwrap().entry.unwrap()
        })
        .collect();
    assert_eq!(c.stats().bytes, 3_000);
    c.set_config(cfg(r#"{"max_bytes": 3000, "ttl_ms": 0}"#), T0)
        .unwrap();
    assert!(events(&mut c, T0).is_empty(), "exactly at the bound");
    assert_eq!((c.stats().entries, c.stats().bytes), (3, 3_000));
    c.set_config(cfg(r#"{"max_bytes": 2500, "ttl_ms": 0}"#), T0)
        .unwrap();
    assert_eq!(
        events(&mut c, T0),
        vec![CacheEvent::Removed {
            entry: stored[0],
            reason: Removal::Evicted
        }]
    );
    assert_eq!((c.stats().entries, c.stats().bytes), (2, 2_000));
}

/// A flight whose key bytes bring the total to `max_bytes` exactly fits: nothing is
/// evicted for it; one byte more does not fit.
#[test]
fn a_lead_that_fills_the_byte_bound_exactly_evicts_nothing() {
    let mut c = cache(r#"{"max_bytes": 1024, "max_key_bytes": 64}"#);
    let l = lead(c.lookup(G, b"a", T0));
    let a = c.fill(l, 999, T0).unwrap().entry.unwrap();
    assert_eq!(c.stats().bytes, 1_000);
    let _exact = lead(c.lookup(G, &[7u8; 24], T0));
    assert!(events(&mut c, T0).is_empty());
    assert!(c.contains(a));
    assert_eq!(c.stats().bytes, 1_024);
    let _over = lead(c.lookup(G, b"b", T0));
    assert_eq!(
        events(&mut c, T0),
        vec![CacheEvent::Removed {
            entry: a,
            reason: Removal::Evicted
        }]
    );
}

/// `max_key_bytes` is the longest key the cache takes, for lookups and offers alike;
/// an offer for a closed scope keeps nothing.
#[test]
fn a_key_of_exactly_max_key_bytes_is_cached_and_offers_need_a_known_scope() {
    let mut c = cache(r#"{"max_key_bytes": 16, "max_bytes": 10000}"#);
    let l = lead(c.lookup(G, &[1u8; 16], T0));
    let e = c.fill(l, 1, T0).unwrap().entry.unwrap();
    assert_eq!(hit(c.lookup(G, &[1u8; 16], T0)).0, e);
    let s = c
        .offer(G, &[2u8; 16], 1, T0)
        .expect("a key at the limit is kept");
    assert_eq!(hit(c.lookup(G, &[2u8; 16], T0)).0, s.entry.unwrap());
    assert_eq!(c.offer(G, &[3u8; 17], 1, T0), None, "one byte too long");
    let scope = c.open_scope().unwrap();
    assert!(c.close_scope(scope, T0));
    assert_eq!(c.offer(scope, b"k", 1, T0), None, "a closed scope");
    let st = c.stats();
    assert_eq!((st.entries, st.flights), (2, 0));
}

/// `joins` counts followers; `expirations` counts expired entries however they are
/// found: by a lookup, by an offer, or by the eviction hand (which reports them as
/// expired, not evicted, even when they were hit).
#[test]
fn stats_count_joins_and_every_expiration() {
    let mut c = cache(r#"{"ttl_ms": 1000, "max_entries": 3}"#);
    let l = lead(c.lookup(G, b"a", T0));
    let _w1 = wait(c.lookup(G, b"a", T0));
    let _w2 = wait(c.lookup(G, b"a", T0));
    assert_eq!(c.stats().joins, 2);
    let a = c.fill(l, 1, T0).unwrap().entry.unwrap();
    assert_eq!(events(&mut c, T0).len(), 2, "two Ready");
    // Found expired by a lookup.
    let l = lead(c.lookup(G, b"a", T0 + 1_000 * MS));
    assert_eq!(
        events(&mut c, T0 + 1_000 * MS),
        vec![CacheEvent::Removed {
            entry: a,
            reason: Removal::Expired
        }]
    );
    assert_eq!(c.stats().expirations, 1);
    let a2 = c.fill(l, 1, T0 + 1_000 * MS).unwrap().entry.unwrap();
    // Found expired by an offer.
    let b = c.offer(G, b"b", 1, T0 + 1_000 * MS).unwrap().entry.unwrap();
    assert_eq!(hit(c.lookup(G, b"a", T0 + 1_500 * MS)).0, a2);
    assert!(c.offer(G, b"b", 1, T0 + 2_000 * MS).is_some());
    assert_eq!(
        events(&mut c, T0 + 2_000 * MS),
        vec![CacheEvent::Removed {
            entry: b,
            reason: Removal::Expired
        }]
    );
    assert_eq!(c.stats().expirations, 2);
    // Found expired by the eviction hand: `a2` (the oldest) was hit, yet it expired.
    let l = lead(c.lookup(G, b"c", T0 + 2_000 * MS));
    c.fill(l, 1, T0 + 2_000 * MS).unwrap();
    let _d = lead(c.lookup(G, b"d", T0 + 2_000 * MS));
    assert_eq!(
        events(&mut c, T0 + 2_000 * MS),
        vec![CacheEvent::Removed {
            entry: a2,
            reason: Removal::Expired
        }]
    );
    let st = c.stats();
    assert_eq!((st.expirations, st.evictions), (3, 0));
}

/// SIEVE makes room even when every entry was hit since the hand last passed: one
/// pass clears the bits, and the oldest goes (found by mutation testing: the pass
/// bound is what lets the hand come round).
#[test]
fn a_full_cache_makes_room_when_every_entry_was_hit() {
    let mut c = cache(r#"{"max_entries": 1}"#);
    let l = lead(c.lookup(G, b"a", T0));
    let a = c.fill(l, 1, T0).unwrap().entry.unwrap();
    assert_eq!(hit(c.lookup(G, b"a", T0)).0, a);
    let _b = lead(c.lookup(G, b"b", T0));
    assert_eq!(
        events(&mut c, T0),
        vec![CacheEvent::Removed {
            entry: a,
            reason: Removal::Evicted
        }]
    );

    let mut c = cache(r#"{"max_entries": 2}"#);
    let mut stored = vec![];
    for k in [b"a", b"b"] {
        let l = lead(c.lookup(G, k, T0));
        stored.push(c.fill(l, 1, T0).unwrap().entry.unwrap());
    }
    for k in [b"a", b"b"] {
        let _ = hit(c.lookup(G, k, T0));
    }
    let _c = lead(c.lookup(G, b"c", T0));
    assert_eq!(
        events(&mut c, T0),
        vec![CacheEvent::Removed {
            entry: stored[0],
            reason: Removal::Evicted
        }]
    );
    assert!(c.contains(stored[1]));
}
