//! [`RequestCache`]: the index and the rules of a request cache, sans-IO — the host
//! keeps the payloads (keyed by [`EntryId`]), the core decides what is stored, shared,
//! evicted and expired.
//!
//! ```text
//! lookup(scope, key) ─┬─ Hit { entry, failure } → serve the host's payload for `entry`
//!                     ├─ Lead(lead)  → run the call (through the Engine), then
//!                     │                fill(lead, bytes) | fail(lead, bytes) | cancel_lead(lead)
//!                     ├─ Wait(wait)  → poll(): Ready { wait, entry } | Promoted { lead } | Abandoned
//!                     └─ Bypass(why) → run the call without the cache
//! poll(now) → Ready, Promoted, Abandoned, Removed { entry } (drop that payload)
//! ```
//!
//! - **Keys** are host bytes (at most `max_key_bytes`). The index stores a seeded
//!   64-bit hash *and* the key bytes, so two keys never share an entry.
//! - **Scopes**: [`ScopeId::GLOBAL`] (entries live until their TTL, eviction or
//!   [`RequestCache::clear`]) or a request scope from [`RequestCache::open_scope`]
//!   (Hystrix's `HystrixRequestContext`): its entries are visible only through it,
//!   and [`RequestCache::close_scope`] drops them. Every entry also has the TTL.
//! - **Bounds**: at most `max_entries` entries (in-flight keys included) and
//!   `max_bytes` bytes, counted as key bytes plus the payload size the host reports.
//! - **Eviction: SIEVE** (Zhang et al., NSDI '24): one FIFO queue, one "visited" bit
//!   per entry and a hand that walks from the oldest entry, clearing visited bits and
//!   evicting the first unvisited (or expired) entry. A hit only sets the bit — no list
//!   relinking as in LRU — so the hit path is one store, O(1) and allocation-free, and
//!   on web and key-value traces SIEVE misses less than LRU (one-hit wonders leave
//!   quickly; popular entries survive without being moved). S3-FIFO reaches similar
//!   hit ratios but needs three queues and a ghost queue of evicted keys (more memory
//!   per key and more code in a `.wasm`).
//! - **In-flight de-duplication**: a lookup of a key that has no entry makes the
//!   caller the **leader** (it runs the call); later lookups of that key are
//!   **followers** (they wait, at most `max_waiters` per key). When the leader fills
//!   the entry, every follower gets [`CacheEvent::Ready`] with the entry id. A failed
//!   leader: the failure is cached only with `cache_failures` (then with
//!   `failure_ttl_ms`); followers get the failure (`Ready { failure: true }`) or, with
//!   `on_leader_failure: promote`, the first follower becomes the leader
//!   ([`CacheEvent::Promoted`]) — unless `cache_failures` is on: the failure is then
//!   the entry every follower gets. A cancelled follower leaves; a cancelled leader hands
//!   leadership to the first follower (a caller going away is not a failure of the
//!   call, so nobody else is failed by it). A flight running longer than
//!   `max_wait_ms` from its first leader's start (promotions do not restart it) is
//!   abandoned: its followers get [`CacheEvent::Abandoned`] (a safety net; normally
//!   the leader's own call timeout ends it first).
//! - **Payload life**: every [`EntryId`] handed out (by `fill`, `fail` or a `Ready`
//!   event) is later named by exactly one [`CacheEvent::Removed`], after every `Ready`
//!   that names it; keep the payload until then. An uncached result (too large, or a
//!   failure that is not cached) is removed right after its followers got it.
//! - **Handles**: [`Lead`] and [`Wait`] are move-only; every id has a raw form below
//!   2^53 and is generation-checked: stale or forged ids are ignored, never trusted.
//!
//! Record `RESPONSE_FROM_CACHE` with [`crate::Engine::record`] for every hit and for
//! every follower served by `Ready`. Expired entries are dropped lazily (on lookup, or
//! when the eviction hand reaches them); the bounds hold regardless.

use std::collections::VecDeque;

use crate::config::{CacheConfig, ConfigError, LeaderFailure};
use crate::keyindex::{hash, KeyIndex};
use crate::slab::{
    move_only, open_scope, public_id, push_newest, unlink, Id, Linked, List, Slab, EMPTY,
    MAX_SLOTS, NEWER, NIL,
};
use crate::time::{ms_to_ns, Monotonic, Nanos};

public_id!(
    /// A cache entry (a stored result); the host keeps the payload under it until the
    /// entry's [`CacheEvent::Removed`].
    EntryId
);
public_id!(
    /// A request scope, or [`ScopeId::GLOBAL`]. Scope ids belong to the cache that
    /// opened them.
    ScopeId
);
public_id!(
    /// A caller of [`RequestCache::lookup`] that leads or waits.
    CallerId
);
move_only!(
    /// The leader of a key's flight: run the call, then hand this back exactly once
    /// with [`RequestCache::fill`], [`RequestCache::fail`] or
    /// [`RequestCache::cancel_lead`].
    #[must_use = "a lead must be filled, failed or cancelled"]
    Lead(CallerId)
);
move_only!(
    /// A follower waiting for a key's leader; its wait ends with one
    /// [`CacheEvent`] naming [`Wait::id`], or [`RequestCache::cancel_wait`].
    #[must_use = "a wait must be waited on or cancelled"]
    Wait(CallerId)
);

impl ScopeId {
    /// The global scope (always open).
    pub const GLOBAL: ScopeId = ScopeId(Id {
        slot: 0,
        generation: 0,
    });
}

/// Key bytes a freed entry's buffer keeps for the next key of its slot.
pub(crate) const KEEP_KEY_BYTES: usize = 256;

/// The verdict of [`RequestCache::lookup`].
#[derive(Debug, PartialEq, Eq)]
#[must_use]
pub enum Lookup {
    /// A stored result: serve the payload kept under `entry` (a cached failure when
    /// `failure`). Record `RESPONSE_FROM_CACHE`.
    Hit {
        /// The entry.
        entry: EntryId,
        /// Whether it is a cached failure.
        failure: bool,
    },
    /// No entry and no flight: run the call, then settle the lead.
    Lead(Lead),
    /// A leader is running this key's call: wait for its result (see [`CacheEvent`]).
    Wait(Wait),
    /// The cache cannot take part: run the call without it.
    Bypass(Bypass),
}

/// Why a lookup bypassed the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bypass {
    /// The scope is closed, stale or forged.
    UnknownScope,
    /// The key is longer than `max_key_bytes`.
    KeyTooLong,
    /// The key's flight already has `max_waiters` followers.
    TooManyWaiters,
    /// No room: the in-flight keys alone fill `max_entries` or `max_bytes` (nothing
    /// evicted would make room), or the memory to grow is not there.
    Full,
}

/// What [`RequestCache::fill`] / [`RequestCache::fail`] did with the leader's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settled {
    /// Where the result is kept for followers and later hits; keep the payload under
    /// it until its [`CacheEvent::Removed`]. `None`: nobody else gets this result (a
    /// failure in `promote` mode; the first follower leads now).
    pub entry: Option<EntryId>,
    /// Whether it stays in the cache for later lookups.
    pub cached: bool,
    /// Followers handed this result (one [`CacheEvent::Ready`] each).
    pub followers: u32,
}

/// Why a follower's wait ended without a result: run the call yourself or fall back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Abandon {
    /// The flight ran longer than `max_wait_ms`.
    WaitExpired,
    /// Its request scope was closed.
    ScopeClosed,
}

/// Why an entry left the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removal {
    /// Evicted by SIEVE to stay within `max_entries` / `max_bytes`.
    Evicted,
    /// Its TTL passed.
    Expired,
    /// Its request scope was closed.
    ScopeClosed,
    /// [`RequestCache::invalidate`].
    Invalidated,
    /// [`RequestCache::clear`].
    Cleared,
    /// Never cached (too large, or an uncached failure): its followers have it.
    NotCached,
}

/// Something [`RequestCache::poll`] reports, in causal order.
#[derive(Debug, PartialEq, Eq)]
pub enum CacheEvent {
    /// A follower's wait ended with the leader's result, kept under `entry`. Record
    /// `RESPONSE_FROM_CACHE`.
    Ready {
        /// The follower ([`Wait::id`]).
        wait: CallerId,
        /// The entry holding the result.
        entry: EntryId,
        /// Whether the result is a failure.
        failure: bool,
    },
    /// The leader failed (`promote` mode) or went away: this follower (same id as its
    /// wait) leads now. If that caller is gone too, hand the lead back with
    /// [`RequestCache::cancel_lead`].
    Promoted {
        /// Permission (and duty) to run the call.
        lead: Lead,
    },
    /// A follower's wait ended without a result.
    Abandoned {
        /// The follower.
        wait: CallerId,
        /// Why.
        reason: Abandon,
    },
    /// An entry left the cache: drop its payload.
    Removed {
        /// The entry.
        entry: EntryId,
        /// Why.
        reason: Removal,
    },
}

/// Counters and sizes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Entries, in-flight keys included (≤ `max_entries`).
    pub entries: u32,
    /// Key bytes plus reported payload bytes (≤ `max_bytes`).
    pub bytes: u64,
    /// Keys with a leader running.
    pub flights: u32,
    /// Followers waiting.
    pub followers: u32,
    /// Open request scopes.
    pub scopes: u32,
    /// Lookups answered from an entry.
    pub hits: u64,
    /// Lookups that became leaders.
    pub misses: u64,
    /// Lookups that became followers.
    pub joins: u64,
    /// Lookups that bypassed the cache.
    pub bypasses: u64,
    /// Entries evicted.
    pub evictions: u64,
    /// Entries expired.
    pub expirations: u64,
}

/// Link pair of the SIEVE queue (ready entries) or the flight list (pending keys).
const QUEUE: usize = 0;
/// Link pair of a request scope's list.
const SCOPE: usize = 1;

#[derive(Debug, Default)]
struct Node {
    ready: bool,
    failure: bool,
    visited: bool,
    scope: u32,
    hash: u64,
    key: Vec<u8>,
    /// Payload bytes counted in `bytes` (ready and cached only).
    payload: u64,
    /// Pending: when the first leader started (a promoted follower keeps it); ready:
    /// when it was filled.
    at: Nanos,
    links: [[u32; 2]; 2],
    leader: u32,
    first: u32,
    last: u32,
    waiters: u32,
}

#[derive(Clone, Copy, Debug, Default)]
struct Caller {
    node: u32,
    leader: bool,
    prev: u32,
    next: u32,
}

impl Linked for Node {
    fn links(&mut self) -> &mut [[u32; 2]; 2] {
        &mut self.links
    }
}

/// The request cache index. See the module documentation.
#[derive(Debug)]
pub struct RequestCache {
    config: CacheConfig,
    ttl_ns: Nanos,
    failure_ttl_ns: Nanos,
    max_wait_ns: Nanos,
    seed: u64,
    clock: Monotonic,
    nodes: Slab<Node>,
    callers: Slab<Caller>,
    scopes: Slab<List>,
    index: KeyIndex,
    queue: List,
    hand: u32,
    flights: List,
    entries: u32,
    bytes: u64,
    flight_count: u32,
    /// Key bytes of the flights (in `bytes`; no eviction frees them).
    flight_bytes: u64,
    follower_count: u32,
    events: VecDeque<CacheEvent>,
    stats: CacheStats,
}

impl RequestCache {
    /// A cache with `config` (validated; error paths start with `cache.`). `seed`:
    /// 64 random bits from the host (keys may be attacker-chosen); any value works.
    pub fn new(config: CacheConfig, seed: u64) -> Result<Self, ConfigError> {
        config.validate().map_err(|e| e.within("cache"))?;
        let mut scopes = Slab::default();
        // Slot 0, generation 0: the global scope.
        let _ = open_scope(&mut scopes, 0);
        let mut c = RequestCache {
            ttl_ns: 0,
            failure_ttl_ns: 0,
            max_wait_ns: 0,
            config,
            seed,
            clock: Monotonic::default(),
            nodes: Slab::default(),
            callers: Slab::default(),
            scopes,
            index: KeyIndex::default(),
            queue: EMPTY,
            hand: NIL,
            flights: EMPTY,
            entries: 0,
            bytes: 0,
            flight_count: 0,
            flight_bytes: 0,
            follower_count: 0,
            events: VecDeque::new(),
            stats: CacheStats::default(),
        };
        c.derive();
        Ok(c)
    }

    fn derive(&mut self) {
        self.ttl_ns = ms_to_ns(self.config.ttl_ms);
        self.failure_ttl_ns = ms_to_ns(self.config.failure_ttl_ms);
        self.max_wait_ns = ms_to_ns(self.config.max_wait_ms);
    }

    /// The config in force.
    pub fn config(&self) -> &CacheConfig {
        &self.config
    }

    /// Applies a new config at run time: entries, flights and followers stay; TTLs
    /// and `max_wait_ms` apply to them at once; lower bounds evict now (an excess of
    /// in-flight keys, which cannot be evicted, drains as they settle).
    pub fn set_config(&mut self, config: CacheConfig, now: Nanos) -> Result<(), ConfigError> {
        config.validate().map_err(|e| e.within("cache"))?;
        let now = self.clock.advance(now);
        self.config = config;
        self.derive();
        while self.entries > self.config.max_entries || self.bytes > self.config.max_bytes {
            if !self.evict_one(now) {
                break;
            }
        }
        Ok(())
    }

    // ---- scopes ---------------------------------------------------------------

    /// Opens a request scope; `None` when `max_scopes` are open (use the global scope
    /// or no cache for that request).
    pub fn open_scope(&mut self) -> Option<ScopeId> {
        open_scope(&mut self.scopes, self.config.max_scopes).map(ScopeId)
    }

    /// Closes a request scope: its entries are removed ([`Removal::ScopeClosed`]), its
    /// flights end (followers get [`Abandon::ScopeClosed`]; the leaders' leads go
    /// stale). `false` for the global scope and unknown scopes.
    pub fn close_scope(&mut self, scope: ScopeId, now: Nanos) -> bool {
        self.clock.advance(now);
        if scope.0.slot == 0 || self.scopes.get(scope.0).is_none() {
            return false;
        }
        while let Some(slot) = self.scopes.get(scope.0).map(|s| s.oldest) {
            let Some(ready) = self.nodes.at(slot).map(|n| n.ready) else {
                break;
            };
            if ready {
                self.remove_entry(slot, Removal::ScopeClosed);
            } else {
                self.drop_flight(slot, Abandon::ScopeClosed);
            }
        }
        self.scopes.remove_at(scope.0.slot)
    }

    // ---- lookups --------------------------------------------------------------

    fn expired(&self, n: &Node, now: Nanos) -> bool {
        let ttl = if n.failure {
            self.failure_ttl_ns
        } else {
            self.ttl_ns
        };
        ttl != 0 && now.saturating_sub(n.at) >= ttl
    }

    fn find(&self, scope: u32, key: &[u8]) -> (u64, Option<u32>) {
        let h = hash(self.seed, u64::from(scope), key);
        let nodes = &self.nodes;
        let found = self.index.find(h, |s| {
            nodes
                .at(s)
                .is_some_and(|n| n.scope == scope && n.key.as_slice() == key)
        });
        (h, found)
    }

    /// Looks `key` up in `scope` at `now`. A hit is O(1) and allocation-free (one
    /// hash, one probe, one key compare, one bit set). See [`Lookup`].
    pub fn lookup(&mut self, scope: ScopeId, key: &[u8], now: Nanos) -> Lookup {
        let now = self.clock.advance(now);
        if self.scopes.get(scope.0).is_none() {
            return self.bypass(Bypass::UnknownScope);
        }
        if key.len() > self.config.max_key_bytes as usize {
            return self.bypass(Bypass::KeyTooLong);
        }
        let sc = scope.0.slot;
        let (h, found) = self.find(sc, key);
        if let Some(slot) = found {
            let (ttl, failure_ttl) = (self.ttl_ns, self.failure_ttl_ns);
            let Some((id, n)) = self.nodes.entry_at(slot) else {
                return self.bypass(Bypass::Full);
            };
            let ready = n.ready;
            let ttl = if n.failure { failure_ttl } else { ttl };
            let expired = ttl != 0 && now.saturating_sub(n.at) >= ttl;
            if ready && !expired {
                n.visited = true;
                let failure = n.failure;
                self.stats.hits += 1;
                return Lookup::Hit {
                    entry: EntryId(id),
                    failure,
                };
            }
            if ready {
                self.stats.expirations += 1;
                self.remove_entry(slot, Removal::Expired);
            } else {
                return self.follow(slot);
            }
        }
        let lookup = self.lead(sc, h, key, now);
        if matches!(lookup, Lookup::Lead(_)) {
            self.stats.misses += 1;
        }
        lookup
    }

    /// The ready, unexpired entry of `key` in `scope`, if any — counted as a hit, as
    /// [`RequestCache::lookup`] counts one — while a miss registers nothing: no lead,
    /// and nothing evicted to make room for one. For a host that reads a store it
    /// fills elsewhere (the filter's stale copies: a lookup per miss evicted a kept
    /// copy, so with `max_entries` 1 none was ever served). O(1).
    pub fn get(&mut self, scope: ScopeId, key: &[u8], now: Nanos) -> Option<EntryId> {
        let now = self.clock.advance(now);
        self.scopes.get(scope.0)?;
        let slot = self.find(scope.0.slot, key).1?;
        let n = self.nodes.at(slot)?;
        if !n.ready || self.expired(n, now) {
            return None;
        }
        let (id, n) = self.nodes.entry_at(slot)?;
        n.visited = true;
        self.stats.hits += 1;
        Some(EntryId(id))
    }

    /// The successful result of a call that did not lead its key (its lookup was a
    /// [`Lookup::Bypass`], e.g. `max_waiters` reached): kept as if a leader had
    /// delivered it while the key has no ready entry — a flight still in progress
    /// gets it (its followers too; its leader's own result is then stale), an absent
    /// or expired key gets a new entry. A ready entry is left alone: the first result
    /// to arrive is kept. `None`: nothing kept (a ready entry, a key too long, no
    /// room); a payload over `max_bytes` settles a flight uncached
    /// (`Settled { cached: false }`).
    pub fn offer(
        &mut self,
        scope: ScopeId,
        key: &[u8],
        payload_bytes: u64,
        now: Nanos,
    ) -> Option<Settled> {
        let now = self.clock.advance(now);
        if self.scopes.get(scope.0).is_none() || key.len() > self.config.max_key_bytes as usize {
            return None;
        }
        let sc = scope.0.slot;
        let (h, found) = self.find(sc, key);
        if let Some(slot) = found {
            let n = self.nodes.at(slot)?;
            if !n.ready {
                let lead = Lead(CallerId(self.callers.id_at(n.leader)?));
                return self.settle(lead, payload_bytes, false, now);
            }
            if !self.expired(n, now) {
                return None;
            }
            self.stats.expirations += 1;
            self.remove_entry(slot, Removal::Expired);
        }
        match self.lead(sc, h, key, now) {
            Lookup::Lead(lead) => self.settle(lead, payload_bytes, false, now),
            _ => {
                // Full: not a lookup, so not a bypass in the stats.
                self.stats.bypasses = self.stats.bypasses.saturating_sub(1);
                None
            }
        }
    }

    fn bypass(&mut self, why: Bypass) -> Lookup {
        self.stats.bypasses += 1;
        Lookup::Bypass(why)
    }

    fn follow(&mut self, slot: u32) -> Lookup {
        let Some(n) = self.nodes.at(slot) else {
            return self.bypass(Bypass::Full);
        };
        if n.waiters >= self.config.max_waiters {
            return self.bypass(Bypass::TooManyWaiters);
        }
        let last = n.last;
        let Some(id) = self.callers.insert(MAX_SLOTS, |c| {
            *c = Caller {
                node: slot,
                leader: false,
                prev: last,
                next: NIL,
            }
        }) else {
            return self.bypass(Bypass::Full);
        };
        match self.callers.at_mut(last) {
            Some(c) => c.next = id.slot,
            None => {
                if let Some(n) = self.nodes.at_mut(slot) {
                    n.first = id.slot;
                }
            }
        }
        if let Some(n) = self.nodes.at_mut(slot) {
            n.last = id.slot;
            n.waiters += 1;
        }
        self.follower_count += 1;
        self.stats.joins += 1;
        Lookup::Wait(Wait(CallerId(id)))
    }

    fn lead(&mut self, scope: u32, h: u64, key: &[u8], now: Nanos) -> Lookup {
        let klen = key.len() as u64;
        // Flights alone leave no room: evicting every entry would not make it (found
        // by review: it did, then refused all the same).
        if self.flight_bytes.saturating_add(klen) > self.config.max_bytes
            || self.flight_count >= self.config.max_entries
        {
            return self.bypass(Bypass::Full);
        }
        while self.entries >= self.config.max_entries
            || self.bytes.saturating_add(klen) > self.config.max_bytes
        {
            if !self.evict_one(now) {
                return self.bypass(Bypass::Full);
            }
        }
        // Room in the index first: past it, nothing can fail but the slabs' growth.
        if !self.index.reserve() {
            return self.bypass(Bypass::Full);
        }
        let Some(caller) = self.callers.insert(MAX_SLOTS, |c| *c = Caller::default()) else {
            return self.bypass(Bypass::Full);
        };
        let Some(node) = self.nodes.insert(MAX_SLOTS, |n| {
            n.ready = false;
            n.failure = false;
            n.visited = false;
            n.scope = scope;
            n.hash = h;
            n.key.clear();
            n.key.extend_from_slice(key);
            n.payload = 0;
            n.at = now;
            n.links = [[NIL; 2]; 2];
            n.leader = caller.slot;
            n.first = NIL;
            n.last = NIL;
            n.waiters = 0;
        }) else {
            self.callers.remove_at(caller.slot);
            return self.bypass(Bypass::Full);
        };
        if let Some(c) = self.callers.at_mut(caller.slot) {
            *c = Caller {
                node: node.slot,
                leader: true,
                prev: NIL,
                next: NIL,
            };
        }
        self.index.insert(h, node.slot);
        push_newest(&mut self.nodes, &mut self.flights, node.slot, QUEUE);
        if scope != 0 {
            if let Some(s) = self.scopes.at_mut(scope) {
                push_newest(&mut self.nodes, s, node.slot, SCOPE);
            }
        }
        self.entries += 1;
        self.bytes += klen;
        self.flight_count += 1;
        self.flight_bytes += klen;
        Lookup::Lead(Lead(CallerId(caller)))
    }

    // ---- settling -------------------------------------------------------------

    /// The leader's node, if `lead` is a live leader.
    fn lead_node(&self, lead: &Lead) -> Option<u32> {
        let c = self.callers.get(lead.0 .0)?;
        let n = self.nodes.at(c.node)?;
        (c.leader && !n.ready && n.leader == lead.0 .0.slot).then_some(c.node)
    }

    /// The leader's call succeeded with a payload of `payload_bytes`: it is stored
    /// (unless larger than the bounds allow) and every follower gets it. `None`: the
    /// lead is stale (its flight was abandoned or its scope closed) or forged.
    pub fn fill(&mut self, lead: Lead, payload_bytes: u64, now: Nanos) -> Option<Settled> {
        self.settle(lead, payload_bytes, false, now)
    }

    /// The leader's call failed (error payload of `payload_bytes`). Cached only with
    /// `cache_failures`; followers get the failure, or with `on_leader_failure:
    /// promote` the first follower leads instead. `None`: stale or forged lead.
    pub fn fail(&mut self, lead: Lead, payload_bytes: u64, now: Nanos) -> Option<Settled> {
        self.settle(lead, payload_bytes, true, now)
    }

    fn settle(&mut self, lead: Lead, payload: u64, failure: bool, now: Nanos) -> Option<Settled> {
        let now = self.clock.advance(now);
        let slot = self.lead_node(&lead)?;
        self.callers.remove_at(lead.0 .0.slot);
        let has_followers = self.nodes.at(slot).is_some_and(|n| n.waiters > 0);
        let promote = failure
            && !self.config.cache_failures
            && self.config.on_leader_failure == LeaderFailure::Promote;
        if promote && has_followers {
            self.promote(slot);
            return Some(Settled {
                entry: None,
                cached: false,
                followers: 0,
            });
        }
        unlink(&mut self.nodes, &mut self.flights, slot, QUEUE);
        self.flight_count -= 1;
        self.flight_bytes -= self.nodes.at(slot).map_or(0, |n| n.key.len() as u64);
        let id = EntryId(self.nodes.id_at(slot)?);
        let mut followers = 0;
        let mut next = NIL;
        if let Some(n) = self.nodes.at_mut(slot) {
            n.ready = true;
            n.failure = failure;
            n.visited = false;
            n.at = now;
            n.payload = 0;
            next = n.first;
            n.first = NIL;
            n.last = NIL;
            followers = n.waiters;
            n.waiters = 0;
        }
        while let Some(c) = self.callers.at(next).copied() {
            if let Some(wait) = self.callers.id_at(next) {
                self.events.push_back(CacheEvent::Ready {
                    wait: CallerId(wait),
                    entry: id,
                    failure,
                });
            }
            self.callers.remove_at(next);
            next = c.next;
        }
        self.follower_count -= followers;
        let klen = self.nodes.at(slot).map_or(0, |n| n.key.len() as u64);
        // What the flights hold stays whatever is evicted: only evict where it helps.
        let mut cached = (!failure || self.config.cache_failures)
            && (self.flight_bytes.saturating_add(klen)).saturating_add(payload)
                <= self.config.max_bytes
            && self.flight_count < self.config.max_entries;
        if cached {
            while self.bytes.saturating_add(payload) > self.config.max_bytes
                || self.entries > self.config.max_entries
            {
                if !self.evict_one(now) {
                    cached = false;
                    break;
                }
            }
        }
        if cached {
            if let Some(n) = self.nodes.at_mut(slot) {
                n.payload = payload;
            }
            self.bytes += payload;
            push_newest(&mut self.nodes, &mut self.queue, slot, QUEUE);
        } else {
            self.remove_entry(slot, Removal::NotCached);
        }
        Some(Settled {
            entry: Some(id),
            cached,
            followers,
        })
    }

    /// The first follower of `slot` leads now. The flight keeps its start: the
    /// followers' `max_wait_ms` counts from the first leader's start, so a run of
    /// failing leaders cannot hold them one leader's call after another.
    fn promote(&mut self, slot: u32) {
        let Some(first) = self.nodes.at(slot).map(|n| n.first) else {
            return;
        };
        let Some(c) = self.callers.at(first).copied() else {
            return;
        };
        self.unlink_follower(slot, first, c);
        if let Some(cm) = self.callers.at_mut(first) {
            cm.leader = true;
            cm.prev = NIL;
            cm.next = NIL;
        }
        if let Some(n) = self.nodes.at_mut(slot) {
            n.leader = first;
        }
        if let Some(id) = self.callers.id_at(first) {
            self.events.push_back(CacheEvent::Promoted {
                lead: Lead(CallerId(id)),
            });
        }
    }

    fn unlink_follower(&mut self, slot: u32, at: u32, c: Caller) {
        match self.callers.at_mut(c.prev) {
            Some(p) => p.next = c.next,
            None => {
                if let Some(n) = self.nodes.at_mut(slot) {
                    n.first = c.next;
                }
            }
        }
        match self.callers.at_mut(c.next) {
            Some(x) => x.prev = c.prev,
            None => {
                if let Some(n) = self.nodes.at_mut(slot) {
                    n.last = c.prev;
                }
            }
        }
        if let Some(n) = self.nodes.at_mut(slot) {
            n.waiters -= 1;
        }
        if let Some(cm) = self.callers.at_mut(at) {
            cm.prev = NIL;
            cm.next = NIL;
        }
        self.follower_count -= 1;
    }

    /// The leader went away without a result: the first follower leads now
    /// ([`CacheEvent::Promoted`]); with no followers the flight ends. `false`: stale
    /// or forged lead.
    pub fn cancel_lead(&mut self, lead: Lead, now: Nanos) -> bool {
        self.clock.advance(now);
        let Some(slot) = self.lead_node(&lead) else {
            return false;
        };
        self.callers.remove_at(lead.0 .0.slot);
        if self.nodes.at(slot).is_some_and(|n| n.waiters > 0) {
            self.promote(slot);
        } else {
            self.remove_node(slot);
        }
        true
    }

    /// A follower went away: it leaves the flight. `false`: its wait already ended
    /// (an event for it is queued, or it was promoted), or the id is stale or forged.
    pub fn cancel_wait(&mut self, wait: Wait, now: Nanos) -> bool {
        self.clock.advance(now);
        let Some(c) = self.callers.get(wait.0 .0).copied() else {
            return false;
        };
        if c.leader {
            return false;
        }
        self.unlink_follower(c.node, wait.0 .0.slot, c);
        self.callers.remove_at(wait.0 .0.slot)
    }

    // ---- removal --------------------------------------------------------------

    /// Frees a node: index, lists, counts (no event).
    fn remove_node(&mut self, slot: u32) {
        let Some(n) = self.nodes.at(slot) else { return };
        let (h, scope, ready, size) = (n.hash, n.scope, n.ready, n.key.len() as u64 + n.payload);
        self.index.remove(h, slot);
        if ready {
            if self.hand == slot {
                self.hand = n.links[QUEUE][NEWER];
            }
            unlink(&mut self.nodes, &mut self.queue, slot, QUEUE);
        } else {
            unlink(&mut self.nodes, &mut self.flights, slot, QUEUE);
            self.flight_count -= 1;
            self.flight_bytes -= size;
        }
        if scope != 0 {
            if let Some(s) = self.scopes.at_mut(scope) {
                unlink(&mut self.nodes, s, slot, SCOPE);
            }
        }
        self.entries -= 1;
        self.bytes -= size;
        // A long key's buffer is not kept for the slot's next key: kept, every slot
        // ever used could hold one, memory past `max_bytes` (found by review).
        if let Some(n) = self.nodes.at_mut(slot) {
            if n.key.capacity() > KEEP_KEY_BYTES {
                n.key = Vec::new();
            }
        }
        self.nodes.remove_at(slot);
    }

    fn remove_entry(&mut self, slot: u32, reason: Removal) {
        let Some(id) = self.nodes.id_at(slot) else {
            return;
        };
        self.remove_node(slot);
        self.events.push_back(CacheEvent::Removed {
            entry: EntryId(id),
            reason,
        });
    }

    /// Ends a pending flight: followers are abandoned, the lead goes stale.
    fn drop_flight(&mut self, slot: u32, reason: Abandon) {
        let Some(n) = self.nodes.at_mut(slot) else {
            return;
        };
        let (leader, mut next, waiters) = (n.leader, n.first, n.waiters);
        n.first = NIL;
        n.last = NIL;
        n.waiters = 0;
        self.callers.remove_at(leader);
        while let Some(c) = self.callers.at(next).copied() {
            if let Some(wait) = self.callers.id_at(next) {
                self.events.push_back(CacheEvent::Abandoned {
                    wait: CallerId(wait),
                    reason,
                });
            }
            self.callers.remove_at(next);
            next = c.next;
        }
        self.follower_count -= waiters;
        self.remove_node(slot);
    }

    /// SIEVE: evicts one ready entry (the first unvisited or expired one from the
    /// hand). `false` when no entry is ready.
    fn evict_one(&mut self, now: Nanos) -> bool {
        let mut p = if self.nodes.at(self.hand).is_some_and(|n| n.ready) {
            self.hand
        } else {
            self.queue.oldest
        };
        // Two passes at most: the first clears every visited bit.
        let bound = 2 * u64::from(self.entries) + 2;
        for _ in 0..bound {
            let Some(n) = self.nodes.at(p) else {
                return false;
            };
            let expired = self.expired(n, now);
            if !n.visited || expired {
                self.hand = p;
                if expired {
                    self.stats.expirations += 1;
                    self.remove_entry(p, Removal::Expired);
                } else {
                    self.stats.evictions += 1;
                    self.remove_entry(p, Removal::Evicted);
                }
                return true;
            }
            let newer = n.links[QUEUE][NEWER];
            if let Some(n) = self.nodes.at_mut(p) {
                n.visited = false;
            }
            p = if newer == NIL {
                self.queue.oldest
            } else {
                newer
            };
        }
        false
    }

    /// Removes the entry for `key` in `scope` ([`Removal::Invalidated`]); a flight for
    /// it is not affected. Whether there was one.
    pub fn invalidate(&mut self, scope: ScopeId, key: &[u8], now: Nanos) -> bool {
        self.clock.advance(now);
        if self.scopes.get(scope.0).is_none() {
            return false;
        }
        let (_, found) = self.find(scope.0.slot, key);
        match found {
            Some(slot) if self.nodes.at(slot).is_some_and(|n| n.ready) => {
                self.remove_entry(slot, Removal::Invalidated);
                true
            }
            _ => false,
        }
    }

    /// Removes every entry of `scope` ([`Removal::Cleared`]); flights go on, and so
    /// do the other scopes. O(entries of every scope).
    pub fn clear(&mut self, scope: ScopeId, now: Nanos) {
        self.clock.advance(now);
        if self.scopes.get(scope.0).is_none() {
            return;
        }
        let mut slot = self.queue.oldest;
        while let Some(n) = self.nodes.at(slot) {
            let (next, ours) = (n.links[QUEUE][NEWER], n.scope == scope.0.slot);
            if ours {
                self.remove_entry(slot, Removal::Cleared);
            }
            slot = next;
        }
        // Freed slots keep their key buffers for reuse; a clear gives them back.
        self.nodes.shed();
        self.index.shed();
    }

    /// Whether `entry` is still stored (an expired entry not yet swept is: a hit no
    /// longer returns it).
    pub fn contains(&self, entry: EntryId) -> bool {
        self.nodes.get(entry.0).is_some_and(|n| n.ready)
    }

    // ---- time -----------------------------------------------------------------

    /// The next event: queued ones first, then flights past `max_wait_ms` (their
    /// followers are abandoned). Call until `None`, then again at
    /// [`RequestCache::next_deadline`].
    pub fn poll(&mut self, now: Nanos) -> Option<CacheEvent> {
        if let Some(e) = self.events.pop_front() {
            return Some(e);
        }
        let now = self.clock.advance(now);
        while let Some(at) = self.nodes.at(self.flights.oldest).map(|n| n.at) {
            if at.saturating_add(self.max_wait_ns) > now {
                break;
            }
            let slot = self.flights.oldest;
            self.drop_flight(slot, Abandon::WaitExpired);
        }
        let e = self.events.pop_front();
        // A burst (a clear, a shrinking reconfigure) queued many: give that back.
        if e.is_none() && self.events.capacity() > 4096 {
            self.events = VecDeque::new();
        }
        e
    }

    /// When [`RequestCache::poll`] has work: now if events are queued, else the
    /// oldest flight's `max_wait_ms` deadline (`None`: nothing scheduled).
    pub fn next_deadline(&self) -> Option<Nanos> {
        if !self.events.is_empty() {
            return Some(self.clock.now());
        }
        self.nodes
            .at(self.flights.oldest)
            .map(|n| n.at.saturating_add(self.max_wait_ns))
    }

    /// Counters and sizes.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            entries: self.entries,
            bytes: self.bytes,
            flights: self.flight_count,
            followers: self.follower_count,
            scopes: self.scopes.len() - 1,
            ..self.stats
        }
    }

    /// Heap bytes the index holds (slots, key buffers, hash table, callers, scopes,
    /// queued events); the payloads are the host's.
    pub fn memory_bytes(&self) -> usize {
        self.nodes.table_bytes()
            + self.nodes.values().map(|n| n.key.capacity()).sum::<usize>()
            + self.callers.table_bytes()
            + self.scopes.table_bytes()
            + self.index.memory_bytes()
            + self.events.capacity() * core::mem::size_of::<CacheEvent>()
    }
}
