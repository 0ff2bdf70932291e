//! RequestCache vs a naive model: a Vec in FIFO order with visited bits and a hand
//! (SIEVE), TTLs, byte/entry bounds, scopes. Every lookup's verdict, every hit's
//! entry id and every `Removed` event (entry and reason, in order) must match.

use fusewire_core::cache::{Bypass, CacheEvent, EntryId, Lookup, Removal, ScopeId};
use fusewire_core::config::{CacheConfig, LeaderFailure};
use fusewire_core::RequestCache;
use proptest::prelude::*;

const MS: u64 = 1_000_000;

#[derive(Clone, Debug)]
struct E {
    scope: u32,
    key: u8,
    id: EntryId,
    failure: bool,
    visited: bool,
    at: u64,
    size: u64,
}

struct M {
    cfg: CacheConfig,
    q: Vec<E>,
    hand: Option<(u32, u8)>,
    now: u64,
    events: Vec<(EntryId, Removal)>,
}

fn key_bytes(k: u8) -> Vec<u8> {
    vec![b'a' + k; 1 + (k as usize % 3)]
}

impl M {
    fn bytes(&self) -> u64 {
        self.q.iter().map(|e| e.size).sum()
    }
    fn expired(&self, e: &E) -> bool {
        let ttl = if e.failure {
            self.cfg.failure_ttl_ms
        } else {
            self.cfg.ttl_ms
        } * MS;
        ttl != 0 && self.now.saturating_sub(e.at) >= ttl
    }
    fn pos(&self, scope: u32, key: u8) -> Option<usize> {
        self.q.iter().position(|e| e.scope == scope && e.key == key)
    }
    fn remove(&mut self, p: usize, why: Removal) {
        let e = &self.q[p];
        if self.hand == Some((e.scope, e.key)) {
            self.hand = self.q.get(p + 1).map(|n| (n.scope, n.key));
        }
        let e = self.q.remove(p);
        self.events.push((e.id, why));
    }
    fn evict_one(&mut self) -> bool {
        if self.q.is_empty() {
            return false;
        }
        let mut p = self.hand.and_then(|(s, k)| self.pos(s, k)).unwrap_or(0);
        for _ in 0..2 * self.q.len() + 2 {
            let expired = self.expired(&self.q[p]);
            if expired || !self.q[p].visited {
                self.hand = Some((self.q[p].scope, self.q[p].key));
                self.remove(
                    p,
                    if expired {
                        Removal::Expired
                    } else {
                        Removal::Evicted
                    },
                );
                return true;
            }
            self.q[p].visited = false;
            p = (p + 1) % self.q.len();
        }
        false
    }
    /// A miss: room for a flight of `klen` bytes. `false`: bypass.
    fn lead(&mut self, klen: u64) -> bool {
        if klen > self.cfg.max_bytes || self.cfg.max_entries == 0 {
            return false;
        }
        while self.q.len() as u32 >= self.cfg.max_entries
            || self.bytes() + klen > self.cfg.max_bytes
        {
            if !self.evict_one() {
                return false;
            }
        }
        true
    }
    /// The leader's result: (cached).
    fn settle(&mut self, scope: u32, key: u8, id: EntryId, payload: u64, failure: bool) -> bool {
        let klen = key_bytes(key).len() as u64;
        let mut cached =
            (!failure || self.cfg.cache_failures) && klen + payload <= self.cfg.max_bytes;
        if cached {
            while self.bytes() + klen + payload > self.cfg.max_bytes
                || self.q.len() as u32 + 1 > self.cfg.max_entries
            {
                if !self.evict_one() {
                    cached = false;
                    break;
                }
            }
        }
        if cached {
            self.q.push(E {
                scope,
                key,
                id,
                failure,
                visited: false,
                at: self.now,
                size: klen + payload,
            });
        } else {
            self.events.push((id, Removal::NotCached));
        }
        cached
    }
}

#[derive(Clone, Debug)]
enum Op {
    Lookup {
        scope: usize,
        key: u8,
        payload: u8,
        fail: bool,
    },
    Get {
        scope: usize,
        key: u8,
    },
    Offer {
        scope: usize,
        key: u8,
        payload: u8,
    },
    Invalidate {
        scope: usize,
        key: u8,
    },
    Clear {
        scope: usize,
    },
    Open,
    Close {
        scope: usize,
    },
    Stale {
        key: u8,
    },
    Advance {
        ms: u16,
        back: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (0..3usize, 0..8u8, 0..60u8, prop::bool::weighted(0.2))
            .prop_map(|(scope, key, payload, fail)| Op::Lookup { scope, key, payload, fail }),
        2 => (0..3usize, 0..8u8).prop_map(|(scope, key)| Op::Get { scope, key }),
        2 => (0..3usize, 0..8u8, 0..60u8).prop_map(|(scope, key, payload)| Op::Offer { scope, key, payload }),
        1 => (0..3usize, 0..8u8).prop_map(|(scope, key)| Op::Invalidate { scope, key }),
        1 => (0..3usize).prop_map(|scope| Op::Clear { scope }),
        1 => Just(Op::Open),
        1 => (0..3usize).prop_map(|scope| Op::Close { scope }),
        1 => (0..8u8).prop_map(|key| Op::Stale { key }),
        3 => (0..200u16, prop::bool::weighted(0.1)).prop_map(|(ms, back)| Op::Advance { ms, back }),
    ]
}

fn config() -> impl Strategy<Value = CacheConfig> {
    (
        1..6u32,
        prop_oneof![Just(20u64), Just(60), Just(150), Just(100_000)],
        prop_oneof![Just(0u64), Just(40), Just(150)],
        any::<bool>(),
        prop_oneof![Just(30u64), Just(500)],
    )
        .prop_map(
            |(max_entries, max_bytes, ttl_ms, cache_failures, failure_ttl_ms)| CacheConfig {
                max_entries,
                max_bytes,
                ttl_ms,
                cache_failures,
                failure_ttl_ms,
                on_leader_failure: LeaderFailure::FailFollowers,
                max_waiters: 4,
                max_wait_ms: 10_000,
                max_key_bytes: 8,
                max_scopes: 2,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn cache_matches_a_naive_sieve_ttl_scope_model(cfg in config(), ops in prop::collection::vec(op(), 1..150)) {
        let mut c = RequestCache::new(cfg.clone(), 42).unwrap();
        let mut m = M { cfg, q: vec![], hand: None, now: 0, events: vec![] };
        let mut t = 1_000 * MS;
        // Open scopes: (id, model tag); index 0 is the global scope.
        let mut scopes: Vec<(ScopeId, u32)> = vec![(ScopeId::GLOBAL, 0)];
        let mut closed: Vec<ScopeId> = vec![];
        let mut tags = 0u32;
        for (step, op) in ops.into_iter().enumerate() {
            if !matches!(op, Op::Advance { .. } | Op::Open) {
                m.now = m.now.max(t);
            }
            match op {
                Op::Lookup { scope, key, payload, fail } => {
                    let (sid, tag) = scopes[scope % scopes.len()];
                    let kb = key_bytes(key);
                    let got = c.lookup(sid, &kb, t);
                    let expect_hit = match m.pos(tag, key) {
                        Some(p) if !m.expired(&m.q[p]) => {
                            m.q[p].visited = true;
                            Some((m.q[p].id, m.q[p].failure))
                        }
                        Some(p) => {
                            m.remove(p, Removal::Expired);
                            None
                        }
                        None => None,
                    };
                    match (got, expect_hit) {
                        (Lookup::Hit { entry, failure }, Some(want)) => prop_assert_eq!((entry, failure), want, "step {}", step),
                        (Lookup::Lead(l), None) => {
                            prop_assert!(m.lead(kb.len() as u64), "step {}: model bypasses", step);
                            let s = if fail { c.fail(l, payload.into(), t) } else { c.fill(l, payload.into(), t) }.expect("live lead");
                            let id = s.entry.expect("no followers: an entry");
                            let cached = m.settle(tag, key, id, payload.into(), fail);
                            prop_assert_eq!(s.cached, cached, "step {}: cached", step);
                        }
                        (Lookup::Bypass(b), None) => prop_assert!(b == Bypass::Full && !m.lead(kb.len() as u64), "step {}: {:?}", step, b),
                        (other, want) => prop_assert!(false, "step {}: got {:?}, model {:?}", step, other, want),
                    }
                }
                Op::Get { scope, key } => {
                    let (sid, tag) = scopes[scope % scopes.len()];
                    let want = match m.pos(tag, key) {
                        Some(p) if !m.expired(&m.q[p]) => {
                            m.q[p].visited = true;
                            Some(m.q[p].id)
                        }
                        _ => None,
                    };
                    prop_assert_eq!(c.get(sid, &key_bytes(key), t), want, "step {}: get", step);
                }
                Op::Offer { scope, key, payload } => {
                    let (sid, tag) = scopes[scope % scopes.len()];
                    let kb = key_bytes(key);
                    let got = c.offer(sid, &kb, payload.into(), t);
                    let proceed = match m.pos(tag, key) {
                        Some(p) if !m.expired(&m.q[p]) => false,
                        Some(p) => {
                            m.remove(p, Removal::Expired);
                            true
                        }
                        None => true,
                    };
                    if proceed && m.lead(kb.len() as u64) {
                        let s = got.expect("offer kept");
                        let cached = m.settle(tag, key, s.entry.expect("an entry"), payload.into(), false);
                        prop_assert_eq!(s.cached, cached, "step {}: offer cached", step);
                    } else {
                        prop_assert!(got.is_none(), "step {}: offer {:?}", step, got);
                    }
                }
                Op::Invalidate { scope, key } => {
                    let (sid, tag) = scopes[scope % scopes.len()];
                    let want = match m.pos(tag, key) {
                        Some(p) => {
                            m.remove(p, Removal::Invalidated);
                            true
                        }
                        None => false,
                    };
                    prop_assert_eq!(c.invalidate(sid, &key_bytes(key), t), want, "step {}: invalidate", step);
                }
                Op::Clear { scope } => {
                    let (sid, tag) = scopes[scope % scopes.len()];
                    c.clear(sid, t);
                    while let Some(p) = m.q.iter().position(|e| e.scope == tag) {
                        m.remove(p, Removal::Cleared);
                    }
                }
                Op::Open => {
                    if let Some(s) = c.open_scope() {
                        tags += 1;
                        scopes.push((s, tags));
                    }
                    prop_assert!(scopes.len() <= 3, "max_scopes");
                }
                Op::Close { scope } if scopes.len() > 1 => {
                    let (sid, tag) = scopes.remove(1 + scope % (scopes.len() - 1));
                    prop_assert!(c.close_scope(sid, t));
                    while let Some(p) = m.q.iter().position(|e| e.scope == tag) {
                        m.remove(p, Removal::ScopeClosed);
                    }
                    closed.push(sid);
                }
                Op::Stale { key } if !closed.is_empty() => {
                    let sid = closed[key as usize % closed.len()];
                    let got = c.lookup(sid, &key_bytes(key), t);
                    prop_assert!(matches!(got, Lookup::Bypass(Bypass::UnknownScope)), "step {}: stale scope {:?}", step, got);
                    prop_assert_eq!(c.get(sid, &key_bytes(key), t), None);
                    prop_assert!(!c.invalidate(sid, &key_bytes(key), t));
                }
                Op::Advance { ms, back } => {
                    t = if back { t.saturating_sub(u64::from(ms) * MS) } else { t + u64::from(ms) * MS };
                }
                _ => {}
            }
            m.now = m.now.max(t); // poll advances the clock
            let got: Vec<(EntryId, Removal)> = std::iter::from_fn(|| c.poll(t))
                .map(|e| match e {
                    CacheEvent::Removed { entry, reason } => (entry, reason),
                    other => panic!("step {step}: unexpected {other:?}"),
                })
                .collect();
            prop_assert_eq!(&got, &m.events, "step {}: removals", step);
            m.events.clear();
            let s = c.stats();
            prop_assert_eq!(s.entries as usize, m.q.len(), "step {}: entries", step);
            prop_assert_eq!(s.bytes, m.bytes(), "step {}: bytes", step);
            for e in &m.q {
                prop_assert!(c.contains(e.id));
            }
        }
    }
}
