//! [`Engine`]: the one protected-call flow every host drives — Hystrix's command flow
//! as a sans-IO state machine, in the shape of quinn-proto.
//!
//! ```text
//! key(policy, name) ─ prepare(key) ─ [poll_io ⇄ io_done]* ─ start(key) ─┬─ Refused(refusal) → fall back
//!                                                                         ├─ Queued(ticket)   → poll(): Dequeued(permit) / Refused
//!                                                                         └─ Running(permit)  → complete(permit, outcome) | cancel(permit)
//! poll(now) → TimedOut, Dequeued, Refused, Transition, KeyExpired, Store   next_deadline() → when to poll
//! ```
//!
//! One engine holds many policies (a [`Config`] each) and their keys. Per key it runs
//! the breaker on the rolling window, the bulkhead with its wait queue, the fallback
//! limit and every call's deadline; a key's state is **local** (one host thread) or
//! **shared** through the host's CAS store (`SharedConfig`), with the same semantics.
//! In shared mode the engine never touches a store: [`Engine::poll_io`] says what to
//! read or write and [`Engine::io_done`] takes the store's answer.
//!
//! Time is `now: u64` ns on any clock, passed to every call; a clock that steps
//! backwards counts as no time passing. Randomness is a `u64` per call.

pub mod calls;
pub mod events;
pub mod keys;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

pub use calls::{CallId, FallbackPermit, Permit, Ticket};
pub use events::{Cause, Completion, Event, Refusal, Start};
pub use keys::KeyId;

use crate::breaker::{BreakerState, Pass, Phase, RawPass, Transition, TransitionReason, NO_PROBE};
use crate::circuit::{Circuit, Load, Snapshot};
use crate::config::{
    BreakerMode, Config, ConfigError, Isolation, SharedConfig, SyncMode, MAX_KEY_LEN,
};
use crate::event::{EventKind, Outcome};
use crate::keyindex::{self, KeyIndex};
use crate::shared::io::{Answer, Io, IoId, Op, LOST};
use crate::shared::replica::{leased, Ctx, Replica};
use crate::time::{ms_to_ns, Monotonic, Nanos};
use crate::window::HealthSnapshot;
use calls::{Call, Calls, Deadlines};
use keys::{Linked, Links, Lru, MAX_TABLE_KEYS};

/// A registered policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PolicyId(pub u32);

/// Most policies one engine holds.
pub const MAX_POLICIES: usize = 4096;

/// Keys a sweep looks at per policy and `poll` (bounds a poll's work per policy).
const SWEEP_PER_POLL: usize = 64;

#[derive(Debug)]
struct Policy {
    name: Box<str>,
    config: Config,
    /// Key name → key slot, by a seeded hash of the name ([`Engine::with_seed`]).
    index: KeyIndex,
    lru: Lru,
    count: u32,
    overflow: Option<u32>,
    timeouts: Deadlines,
    waits: Deadlines,
}

#[derive(Debug)]
struct KeyEntry {
    generation: u32,
    live: bool,
    policy: u32,
    name: Box<str>,
    circuit: Circuit,
    in_flight: u32,
    queued: u32,
    queue: VecDeque<CallId>,
    fallbacks: u32,
    late: u64,
    last_used: Nanos,
    links: Links,
    wake: Nanos,
    stamp: u32,
    io_queued: bool,
    /// The phase the host was last told (see [`tell`]).
    told: Phase,
    replica: Option<Box<Replica>>,
}

impl Linked for KeyEntry {
    fn links(&mut self) -> &mut Links {
        &mut self.links
    }
}

/// The engine. See the module documentation.
#[derive(Debug)]
pub struct Engine {
    clock: Monotonic,
    owner: u64,
    /// The store protocol's knobs (defaults for a local engine, never used there).
    shared: SharedConfig,
    is_shared: bool,
    policies: Vec<Policy>,
    keys: Vec<KeyEntry>,
    free_keys: Vec<u32>,
    calls: Calls,
    events: VecDeque<Event>,
    wakes: BinaryHeap<Reverse<(Nanos, u32, u32)>>,
    /// The earliest wake scheduled since the host last took it ([`Engine::take_new_wake`]).
    new_wake: Nanos,
    stamp: u32,
    io_queue: VecDeque<u32>,
    io_seq: u32,
    due: Vec<(u32, u32)>,
    /// Seeds the key-name hash ([`Engine::with_seed`]).
    seed: u64,
}

/// Hands the turn of a probe that never ran back to the breaker that admitted it: the
/// store's (a pass on a store lease), or the key's own.
#[inline(never)]
fn give_back(k: &mut KeyEntry, cfg: &Config, raw: RawPass, now: Nanos, rand: u64) {
    match k.replica.as_deref_mut() {
        // Where it came from: a store lease, or the local breaker (a stale view).
        Some(rep) if leased(raw).is_some() => rep.return_probe(raw, now),
        _ => {
            let _ = k.circuit.state.on_result(
                &cfg.breaker,
                &mut k.circuit.window,
                Pass::from_raw(raw),
                Outcome::Cancelled,
                now,
                rand,
            );
        }
    }
}

/// Names up to this many bytes are keys as they are ([`bounded_name`]).
pub const SHORT_NAME: usize = MAX_KEY_LEN - 17;

/// `now + ms`, saturating below `Nanos::MAX` (which means "no deadline"): a call
/// started near the end of time still times out.
fn deadline_after(now: Nanos, ms: u64) -> Nanos {
    now.saturating_add(ms_to_ns(ms)).min(Nanos::MAX - 1)
}

/// `name` if it has at most [`SHORT_NAME`] bytes, else its head and `~` + 16 hex digits
/// of a 64-bit FNV-1a hash of the whole name (197–[`MAX_KEY_LEN`] bytes): long names
/// that share a prefix (URL-style keys) stay apart, and no name kept as it is can
/// spell another's shortened form (found by a security review: a 200-byte name, kept,
/// equal to a long name's shortened one shared its breaker). The hash is not
/// collision-resistant: names an attacker chooses should not be long.
pub fn bounded_name(name: &str) -> std::borrow::Cow<'_, str> {
    if name.len() <= SHORT_NAME {
        return std::borrow::Cow::Borrowed(name);
    }
    let mut buf = [0; MAX_KEY_LEN];
    std::borrow::Cow::Owned(bounded(name, &mut buf).into())
}

/// [`bounded_name`] written into `buf` when shortened: no allocation (a lookup of a
/// known long name allocated each time: found by review).
fn bounded<'a>(name: &'a str, buf: &'a mut [u8; MAX_KEY_LEN]) -> &'a str {
    if name.len() <= SHORT_NAME {
        return name;
    }
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let mut end = SHORT_NAME;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    let (head, tail) = buf.split_at_mut(end);
    head.copy_from_slice(name.as_bytes().get(..end).unwrap_or_default());
    let mut len = end;
    for (i, b) in tail.iter_mut().take(17).enumerate() {
        // '~' then 16 hex digits, by hand: no hex formatter in the `.wasm`.
        let digit = (hash >> (60 - 4 * i.saturating_sub(1))) as u8 & 15;
        *b = match i {
            0 => b'~',
            _ if digit < 10 => b'0' + digit,
            _ => b'a' + digit - 10,
        };
        len += 1;
    }
    core::str::from_utf8(buf.get(..len).unwrap_or_default()).unwrap_or_default()
}

macro_rules! ctx {
    ($self:ident, $k:expr, $cfg:expr, $now:expr, $rand:expr) => {
        Ctx {
            config: $cfg,
            shared: &$self.shared,
            owner: $self.owner,
            in_flight: $k.in_flight,
            waiters: $k.queued,
            now: $now,
            rand: $rand,
        }
    };
}

impl Engine {
    /// An engine whose keys keep local state (one host thread).
    pub fn local() -> Self {
        Engine {
            clock: Monotonic::default(),
            owner: 0,
            shared: SharedConfig::default(),
            is_shared: false,
            policies: Vec::new(),
            keys: Vec::new(),
            free_keys: Vec::new(),
            calls: Calls::default(),
            events: VecDeque::new(),
            wakes: BinaryHeap::new(),
            new_wake: Nanos::MAX,
            stamp: 0,
            io_queue: VecDeque::new(),
            io_seq: 0,
            due: Vec::new(),
            seed: 0,
        }
    }

    /// Seeds the hash that finds keys by name with 64 bits the host makes unguessable
    /// (its randomness, or at least a nanosecond start time): key
    /// names often come from requests, and without a secret seed a client could pick
    /// thousands of names on one probe chain and slow every lookup (found by review).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// An engine whose keys keep process-wide state in the host's CAS store.
    /// `owner` identifies this worker in bulkhead ledgers: it must differ between the
    /// workers sharing a store (a counter in the store, or 64 random bits).
    pub fn shared(config: SharedConfig, owner: u64) -> Result<Self, ConfigError> {
        config.validate()?;
        let mut e = Engine::local();
        e.owner = owner;
        e.shared = config;
        e.is_shared = true;
        Ok(e)
    }

    /// The shared-state config, if the engine is shared.
    pub fn shared_config(&self) -> Option<&SharedConfig> {
        self.is_shared.then_some(&self.shared)
    }

    /// This worker's owner id in bulkhead ledgers (shared engines).
    pub fn owner(&self) -> u64 {
        self.owner
    }

    // ---- policies and keys ----------------------------------------------------

    /// Registers a policy (validated; errors name the field and the reason).
    pub fn add_policy(&mut self, name: &str, config: Config) -> Result<PolicyId, ConfigError> {
        config.validate()?;
        if self.policies.iter().any(|p| &*p.name == name) {
            return Err(ConfigError::new(
                "name",
                text!("duplicate policy {}", crate::json::Quoted(name)),
            ));
        }
        if self.policies.len() >= MAX_POLICIES {
            return Err(ConfigError::new(
                "name",
                text!("at most {MAX_POLICIES} policies"),
            ));
        }
        // One policy is the common case (a JS breaker is an engine of one): no room
        // for three more (≈ 1.5 KB). Later ones grow the vector as usual.
        if self.policies.capacity() == 0 {
            self.policies = Vec::with_capacity(1);
        }
        self.policies.push(Policy {
            name: name.into(),
            config,
            index: KeyIndex::default(),
            lru: Lru::default(),
            count: 0,
            overflow: None,
            timeouts: Deadlines::default(),
            waits: Deadlines::default(),
        });
        Ok(PolicyId(self.policies.len() as u32 - 1))
    }

    /// Bytes one key of a policy with `config` holds at most: its entry, name, breaker,
    /// window and histograms, and on shared state its replica (two delta windows and
    /// its view of the stored one). For hosts that bound a key table by memory
    /// (`keys.max_keys` of them per policy, and an overflow key).
    pub fn key_bytes(config: &Config, shared: bool) -> usize {
        let local =
            core::mem::size_of::<KeyEntry>() + MAX_KEY_LEN + Circuit::new(config, 0).memory_bytes();
        if !shared {
            return local;
        }
        let wire = crate::shared::WireWindow::new(config, 0).0.heap_bytes()
            + core::mem::size_of::<crate::shared::WireWindow>();
        // The view's name and ledger: a stored name and one slot count per worker.
        local + core::mem::size_of::<Replica>() + 3 * wire + 2 * MAX_KEY_LEN + 1024
    }

    /// The policy called `name`.
    pub fn policy(&self, name: &str) -> Option<PolicyId> {
        self.policies
            .iter()
            .position(|p| &*p.name == name)
            .map(|i| PolicyId(i as u32))
    }

    /// A policy's config.
    pub fn config(&self, id: PolicyId) -> Option<&Config> {
        self.policies.get(id.0 as usize).map(|p| &p.config)
    }

    /// Applies a new config to a policy at run time, keeping every key's state and
    /// counters (windows are re-bucketed); calls in flight keep their deadlines.
    pub fn set_policy(&mut self, id: PolicyId, config: Config) -> Result<(), ConfigError> {
        config.validate()?;
        let Some(p) = self.policies.get_mut(id.0 as usize) else {
            return Err(ConfigError::new("", "unknown policy"));
        };
        let rescheduled = p.config.breaker.open != config.breaker.open;
        p.config = config;
        let cfg = &p.config;
        let mut keys = Vec::new();
        for (i, k) in self.keys.iter_mut().enumerate() {
            if k.live && k.policy == id.0 {
                keys.push(i as u32);
                k.circuit.reconfigure(cfg);
                if rescheduled {
                    k.circuit.state.reschedule(&cfg.breaker);
                }
                if let Some(r) = k.replica.as_deref_mut() {
                    let (w, n) = crate::ring::geometry(
                        ms_to_ns(cfg.metrics.rolling_window_ms),
                        cfg.metrics.rolling_buckets,
                    );
                    r.delta.window.0.rebucket(w, n);
                    r.sent.window.0.rebucket(w, n);
                    r.reconfigured();
                }
            }
        }
        let now = self.clock.now();
        for i in keys {
            let k = self.keys.get(i as usize);
            if k.is_some_and(|k| k.queued > 0 || k.replica.is_some()) {
                self.dequeue(i, now, now, 0);
                // Shared keys read the store again (the ledger under the new limit).
                self.queue_io(i);
            }
            // Wakes under the new mode: a pinned phase has none, one that runs again
            // wakes at its open period's end or probe leases.
            self.after(i, now);
        }
        Ok(())
    }

    /// The key `name` of `policy`, created if new. Names longer than
    /// [`SHORT_NAME`] bytes are shortened ([`bounded_name`]). Past `keys.max_keys` live keys a new name gets
    /// the policy's overflow key (unless the least recently used key is idle, which
    /// then expires); so does a new name when the whole table (every policy's keys)
    /// is full. `None` for an unknown policy, or when the overflow key itself cannot
    /// be made then (the table holds 2^21 entries).
    pub fn key(&mut self, policy: PolicyId, name: &str, now: Nanos) -> Option<KeyId> {
        let now = self.clock.advance(now);
        let mut buf = [0; MAX_KEY_LEN];
        let name = bounded(name, &mut buf);
        let hash = keyindex::hash(self.seed, u64::from(policy.0), name.as_bytes());
        let keys = &self.keys;
        let p = self.policies.get(policy.0 as usize)?;
        let named = |i: u32| keys.get(i as usize).is_some_and(|k| *k.name == *name);
        if let Some(i) = p.index.find(hash, named) {
            return self.id_of(i);
        }
        if p.count >= p.config.keys.max_keys {
            self.sweep(policy.0, now, 1);
            let p = self.policies.get(policy.0 as usize)?;
            if p.count >= p.config.keys.max_keys {
                return self.overflow_key(policy.0, now);
            }
        }
        // The whole table full, or no memory to index one more name: the overflow
        // key, as past `max_keys` (found by review).
        if !self.policies.get_mut(policy.0 as usize)?.index.reserve() {
            return self.overflow_key(policy.0, now);
        }
        let Some(i) = self.new_key(policy.0, name, false, now) else {
            return self.overflow_key(policy.0, now);
        };
        let keys = &mut self.keys;
        let p = self.policies.get_mut(policy.0 as usize)?;
        p.index.insert(hash, i);
        p.count += 1;
        p.lru.push_front(keys, i);
        self.id_of(i)
    }

    fn overflow_key(&mut self, policy: u32, now: Nanos) -> Option<KeyId> {
        if let Some(i) = self.policies.get(policy as usize)?.overflow {
            return self.id_of(i);
        }
        let name = text!("{}/~overflow", self.policies.get(policy as usize)?.name);
        let i = self.new_key(policy, &name, true, now)?;
        self.policies.get_mut(policy as usize)?.overflow = Some(i);
        self.id_of(i)
    }

    fn new_key(&mut self, policy: u32, name: &str, overflow: bool, now: Nanos) -> Option<u32> {
        let p = self.policies.get(policy as usize)?;
        let replica = self.is_shared.then(|| {
            Box::new(Replica::new(
                name,
                &p.name,
                overflow,
                &p.config,
                &self.shared,
                now,
            ))
        });
        let circuit = Circuit::new(&p.config, now);
        let entry = KeyEntry {
            generation: 0,
            live: true,
            policy,
            name: name.into(),
            told: circuit.state.phase(),
            circuit,
            in_flight: 0,
            queued: 0,
            queue: VecDeque::new(),
            fallbacks: 0,
            late: 0,
            last_used: now,
            links: Links::default(),
            wake: Nanos::MAX,
            stamp: 0,
            io_queued: false,
            replica,
        };
        let i = match self.free_keys.pop() {
            Some(i) => {
                let slot = self.keys.get_mut(i as usize)?;
                let generation = slot.generation;
                *slot = entry;
                slot.generation = generation;
                i
            }
            None => {
                if self.keys.len() as u32 >= MAX_TABLE_KEYS {
                    return None;
                }
                // As for policies: a first key takes room for one.
                if self.keys.capacity() == 0 {
                    self.keys = Vec::with_capacity(1);
                }
                self.keys.push(entry);
                self.keys.len() as u32 - 1
            }
        };
        self.queue_io(i);
        Some(i)
    }

    fn id_of(&self, i: u32) -> Option<KeyId> {
        let k = self.keys.get(i as usize)?;
        k.live.then_some(KeyId {
            index: i,
            generation: k.generation,
        })
    }

    fn live(&self, key: KeyId) -> Option<&KeyEntry> {
        self.keys
            .get(key.index as usize)
            .filter(|k| k.live && k.generation == key.generation)
    }

    /// A key's name.
    pub fn key_name(&self, key: KeyId) -> Option<&str> {
        self.live(key).map(|k| &*k.name)
    }

    /// Whether `key` is its policy's overflow key: the one the names past
    /// `keys.max_keys` live keys share.
    pub fn is_overflow(&self, key: KeyId) -> bool {
        self.live(key).is_some_and(|k| {
            self.policies
                .get(k.policy as usize)
                .is_some_and(|p| p.overflow == Some(key.index))
        })
    }

    /// The policy a key belongs to.
    pub fn key_policy(&self, key: KeyId) -> Option<PolicyId> {
        self.live(key).map(|k| PolicyId(k.policy))
    }

    /// Every live key (overflow keys included), in table order.
    pub fn keys(&self) -> impl Iterator<Item = KeyId> + '_ {
        self.keys
            .iter()
            .enumerate()
            .filter(|(_, k)| k.live)
            .map(|(i, k)| KeyId {
                index: i as u32,
                generation: k.generation,
            })
    }

    #[inline]
    fn touch(&mut self, i: u32, now: Nanos) {
        let Some(k) = self.keys.get_mut(i as usize) else {
            return;
        };
        k.last_used = now;
        let policy = k.policy;
        let Some(p) = self.policies.get_mut(policy as usize) else {
            return;
        };
        if p.lru.head != i && p.overflow != Some(i) {
            p.lru.unlink(&mut self.keys, i);
            p.lru.push_front(&mut self.keys, i);
        }
    }

    /// Whether a key unused for `idle_ms` may expire: nothing running, queued or
    /// waiting to be written, and a breaker (a shared key's: its last view) that is
    /// closed, or whose open period ended `idle_ms` ago. Local keys: found by review,
    /// an open breaker expired and came back closed before its open period ended, and
    /// then a half-open one as soon as it half-opened; tripped keys that went quiet
    /// must still go, else they would fill `max_keys` for good. Shared keys (their
    /// state is in the store): found by review, an open key expired before it
    /// half-opened, and the host, told nothing more, reported it open for good.
    fn idle(k: &KeyEntry, now: Nanos, idle_ns: Nanos) -> bool {
        let state = &k.circuit.state;
        k.in_flight == 0
            && k.queued == 0
            && k.fallbacks == 0
            && k.replica.as_deref().is_none_or(Replica::is_quiet)
            && match state.phase() {
                Phase::Closed => true,
                _ => now >= state.open_until().saturating_add(idle_ns),
            }
    }

    /// Expires idle least-recently-used keys of `policy` (at most `budget` looked at).
    fn sweep(&mut self, policy: u32, now: Nanos, budget: usize) {
        for _ in 0..budget {
            let Some(p) = self.policies.get(policy as usize) else {
                return;
            };
            let tail = p.lru.tail;
            let idle_ns = ms_to_ns(p.config.keys.idle_ms);
            let Some(k) = self.keys.get(tail as usize) else {
                return;
            };
            if now < k.last_used.saturating_add(idle_ns) {
                return;
            }
            if !Self::idle(k, now, idle_ns) {
                // Busy but unused for long (a hung call): look at it again later.
                self.touch(tail, now);
                continue;
            }
            self.expire_key(tail);
        }
    }

    fn expire_key(&mut self, i: u32) {
        let Some(k) = self.keys.get_mut(i as usize) else {
            return;
        };
        let id = KeyId {
            index: i,
            generation: k.generation,
        };
        k.live = false;
        k.generation = k.generation.wrapping_add(1);
        k.replica = None;
        k.queue = VecDeque::new();
        let policy = k.policy;
        let name = core::mem::take(&mut k.name);
        if let Some(p) = self.policies.get_mut(policy as usize) {
            p.lru.unlink(&mut self.keys, i);
            p.index.remove(
                keyindex::hash(self.seed, u64::from(policy), name.as_bytes()),
                i,
            );
            p.count = p.count.saturating_sub(1);
        }
        self.free_keys.push(i);
        self.events.push_back(Event::KeyExpired { key: id });
    }

    // ---- the call flow ------------------------------------------------------

    /// Before [`Engine::start`] on a shared key: asks for the store reads the decision
    /// wants (a read when the view is older than `sync_ms`, plus the lease or slot
    /// the call is about to need). A sync host then drives [`Engine::poll_io`] so the
    /// answers land before `start`; an async host may skip it (`start` asks for the
    /// due refresh itself: admission never waits). A no-op on local keys.
    pub fn prepare(&mut self, key: KeyId, now: Nanos) {
        self.prepare_for(key, now, true);
    }

    /// Before reading a shared key's phase or status: asks for a read when the view
    /// is older than `sync_ms`, and for nothing an admission would need (a probe
    /// lease taken for a read is a turn no call uses, held until the next flush).
    /// Drive [`Engine::poll_io`] after, as for [`Engine::prepare`]. A no-op on local keys.
    pub fn refresh(&mut self, key: KeyId, now: Nanos) {
        self.prepare_for(key, now, false);
    }

    fn prepare_for(&mut self, key: KeyId, now: Nanos, admitting: bool) {
        let now = self.clock.advance(now);
        let Some(k) = live_mut(&mut self.keys, key) else {
            return;
        };
        let Some(p) = self.policies.get(k.policy as usize) else {
            return;
        };
        let ctx = ctx!(self, k, &p.config, now, 0);
        if let Some(r) = k.replica.as_deref_mut() {
            r.prepare(&ctx, admitting);
        }
        self.queue_io(key.index);
    }

    /// Before a host lets a shared key go (shutdown, a process about to exit, a
    /// reloaded config's old instance): asks to write its pending outcomes now rather
    /// than at the next `flush_ms`, and to give back the bulkhead slots it holds
    /// beyond its calls in flight and its unused probe leases (other workers get them
    /// at once, not after `lease_ttl_ms`); drive [`Engine::poll_io`] after. A no-op on
    /// local keys and when nothing is held or pending; an asynchronous store's answer
    /// may come after the host has moved on.
    pub fn flush(&mut self, key: KeyId, now: Nanos) {
        let now = self.clock.advance(now);
        let Some(k) = live_mut(&mut self.keys, key) else {
            return;
        };
        let in_flight = k.in_flight;
        if let Some(r) = k.replica.as_deref_mut() {
            r.let_go(in_flight, now);
        }
        self.queue_io(key.index);
    }

    /// Whether `key` has no outcome left to write and no store request in flight:
    /// after [`Engine::flush`], a host that lets the key go drives the store until
    /// this holds (or it gives up). True for local and unknown keys.
    pub fn flushed(&self, key: KeyId) -> bool {
        self.live(key)
            .is_none_or(|k| k.replica.as_deref().is_none_or(Replica::is_flushed))
    }

    /// Whether `key` holds nothing in the store either: [`Engine::flushed`], and no
    /// bulkhead slot, slot reserve or probe lease held, so a host may let it go
    /// without a word to the store. True for local and unknown keys.
    pub fn quiet(&self, key: KeyId) -> bool {
        self.live(key)
            .is_none_or(|k| k.replica.as_deref().is_none_or(Replica::is_quiet))
    }

    /// Starts a call on `key`: the breaker (circuit check), then the bulkhead
    /// (capacity check, queue), then the deadline. A refusal is already recorded.
    /// O(1), no allocation on the closed path.
    pub fn start(&mut self, key: KeyId, now: Nanos, rand: u64) -> Start {
        let now = self.clock.advance(now);
        let i = key.index;
        let Some(k) = live_mut(&mut self.keys, key) else {
            return Start::Refused(Refusal {
                event: EventKind::ShortCircuited,
                cause: Cause::UnknownKey,
            });
        };
        let Some(p) = self.policies.get_mut(k.policy as usize) else {
            return Start::Refused(Refusal {
                event: EventKind::ShortCircuited,
                cause: Cause::UnknownKey,
            });
        };
        let cfg = &p.config;
        let shared = &self.shared;
        let ctx = Ctx {
            config: cfg,
            shared,
            owner: self.owner,
            in_flight: k.in_flight,
            waiters: k.queued,
            now,
            rand,
        };
        // Whether the replica's view decides (tested once: nothing below moves it).
        let mut fresh = false;
        let (r, t) = match k.replica.as_deref_mut() {
            Some(rep) => {
                if shared.mode == SyncMode::Async {
                    // Admission never waits on an async store: asking for the due
                    // refresh here saves the host its `prepare` call.
                    rep.prepare_async(&ctx);
                }
                fresh = rep.fresh(&ctx) && !rep.forcing();
                rep.admit(&ctx, fresh, &mut k.circuit)
            }
            None => k
                .circuit
                .state
                .admit(&cfg.breaker, &mut k.circuit.window, now, rand),
        };
        if let Some(t) = t {
            tell(&mut self.events, &mut k.told, key, t);
        }
        let pass = match r {
            Ok(pass) => pass,
            Err(reason) => {
                k.circuit.record_event(EventKind::ShortCircuited, now);
                // A refusal the shared view decided is the fleet's; one the local
                // breaker decided (no fresh view, or ahead of the store) stays local:
                // carried into the shared window it would dilute the error rate the
                // merged state trips on (opossum's denominator counts refusals; a
                // trip ahead was then outvoted by its own refusals).
                if let Some(rep) = k.replica.as_deref_mut().filter(|_| fresh) {
                    rep.record_refusal(EventKind::ShortCircuited, now);
                }
                self.after(i, now);
                self.touch(i, now);
                return Start::Refused(Refusal::short_circuit(reason));
            }
        };
        if let Some(b) = &cfg.bulkhead {
            // The shared ledger decides while the view is fresh. A store that fails
            // (full, a key too long for it, down) leaves the bulkhead per worker, as
            // the breaker is: refusing every call would turn a store problem into an
            // outage, and the refusals into a trip. Without a fresh view for another
            // reason (a lost race for a new key's slot) the call is refused.
            let (shared_free, degraded) = match (&k.replica, shared.mode) {
                (Some(rep), SyncMode::Sync) if rep.fresh(&ctx) => {
                    (Some(rep.has_free_slot(&ctx, b.max_concurrent)), false)
                }
                (Some(rep), SyncMode::Sync) if !rep.store_failing() => (Some(false), true),
                _ => (None, false),
            };
            let has_slot = shared_free.unwrap_or(k.in_flight < b.max_concurrent);
            if !has_slot || k.queued > 0 {
                let raw = pass.into_raw();
                let probe = raw.1 != NO_PROBE;
                if probe {
                    // The probe never reaches the upstream: hand its turn back.
                    give_back(k, cfg, raw, now, rand);
                }
                let cap = b.queue_capacity();
                if b.isolation == Isolation::Pool && cap > 0 && !probe && k.queued < cap {
                    let deadline = deadline_after(now, b.max_wait_ms);
                    let Some(id) = self.calls.insert(Call::Queued {
                        key: i,
                        pass: raw,
                        deadline,
                    }) else {
                        return Start::Refused(Refusal {
                            event: EventKind::ThreadPoolRejected,
                            cause: Cause::Degraded,
                        });
                    };
                    k.queue.push_back(id);
                    k.queued += 1;
                    p.waits.push(b.max_wait_ms, deadline, id);
                    self.after(i, now);
                    self.touch(i, now);
                    return Start::Queued(Ticket(id));
                }
                let event = match b.isolation {
                    Isolation::Semaphore => EventKind::SemaphoreRejected,
                    Isolation::Pool => EventKind::ThreadPoolRejected,
                };
                let cause = if degraded {
                    Cause::Degraded
                } else if b.isolation == Isolation::Pool && cap > 0 && k.queued >= cap {
                    // (A probe is never queued: refused with room in the queue, it
                    // is refused for the slots.)
                    Cause::QueueFull
                } else {
                    Cause::BulkheadFull
                };
                let transition =
                    count_refusal(&mut k.circuit, k.replica.as_deref_mut(), fresh, &ctx, event);
                if let Some(t) = transition {
                    tell(&mut self.events, &mut k.told, key, t);
                }
                self.after(i, now);
                self.touch(i, now);
                return Start::Refused(Refusal { event, cause });
            }
        }
        let raw = pass.into_raw();
        let exec = &cfg.execution;
        let deadline = if exec.timeout_enabled {
            deadline_after(now, exec.timeout_ms)
        } else {
            Nanos::MAX
        };
        let Some(id) = self.calls.insert(Call::Running {
            key: i,
            pass: raw,
            deadline,
        }) else {
            // No room for the call: a probe's turn goes back (found by review: it
            // stayed out until its lease expired, refusing every call meanwhile).
            if raw.1 != NO_PROBE {
                give_back(k, cfg, raw, now, rand);
            }
            return Start::Refused(Refusal {
                event: EventKind::SemaphoreRejected,
                cause: Cause::Degraded,
            });
        };
        k.in_flight += 1;
        if deadline != Nanos::MAX {
            p.timeouts.push(exec.timeout_ms, deadline, id);
        }
        // A plain pass on a closed key leaves its wake and I/O as they were (a shared
        // key's replica says whether it asked for anything): the hot path skips them.
        if t.is_some()
            || raw.1 != NO_PROBE
            || k.circuit.state.phase() != Phase::Closed
            || k.replica.as_deref().is_some_and(|r| !(fresh && r.idle()))
        {
            self.after(i, now);
        }
        self.touch(i, now);
        Start::Running(Permit(id))
    }

    /// Hands a permit back with the call's outcome at `now` (latency = now − the
    /// time the call got its slot). A timed-out call's result is [`Completion::Late`]:
    /// counted, never moving the breaker. Frees the slot (a queued call may get it:
    /// see [`Engine::poll`]). O(1), no allocation.
    pub fn complete(
        &mut self,
        permit: Permit,
        outcome: Outcome,
        now: Nanos,
        rand: u64,
    ) -> Completion {
        let now = self.clock.advance(now);
        let id = permit.0;
        match self.calls.get(id) {
            Some(Call::Running { key, pass, .. }) => {
                self.calls.remove(id);
                self.clean_timeouts(key);
                self.record_end(key, pass, outcome, now, rand);
                self.dequeue(key, now, now, rand);
                Completion::OnTime
            }
            Some(Call::Expired {
                key,
                key_generation,
            }) => {
                self.calls.remove(id);
                // Not if the key expired meanwhile (another key may hold its entry), nor
                // for a cancel: no result arrived (found by review).
                if let Some(k) = self.keys.get_mut(key as usize) {
                    if k.live && k.generation == key_generation && outcome != Outcome::Cancelled {
                        k.late = k.late.saturating_add(1);
                    }
                }
                Completion::Late
            }
            _ => Completion::Unknown,
        }
    }

    /// Ends a running call without a verdict (the caller went away): counts nowhere,
    /// frees the slot, gives a probe turn back. Same as completing with
    /// [`Outcome::Cancelled`].
    pub fn cancel(&mut self, permit: Permit, now: Nanos, rand: u64) -> Completion {
        self.complete(permit, Outcome::Cancelled, now, rand)
    }

    /// Gives up a queued call (the caller went away): counts nowhere. Returns whether
    /// it was still queued.
    pub fn cancel_ticket(&mut self, ticket: Ticket, now: Nanos) -> bool {
        let now = self.clock.advance(now);
        let id = ticket.0;
        let Some(Call::Queued { key, .. }) = self.calls.get(id) else {
            return false;
        };
        self.calls.remove(id);
        if let Some(k) = self.keys.get_mut(key as usize) {
            k.queued = k.queued.saturating_sub(1);
        }
        self.compact_queue(key);
        self.clean_waits(key);
        self.after(key, now);
        true
    }

    /// Stops a running call's deadline clock (e.g. its response has started): it can
    /// no longer time out; it still holds its slot until completed.
    pub fn stop_timer(&mut self, permit: &Permit) {
        if let Some(Call::Running { key, pass, .. }) = self.calls.get(permit.0) {
            self.calls.set(
                permit.0,
                Call::Running {
                    key,
                    pass,
                    deadline: Nanos::MAX,
                },
            );
            self.clean_timeouts(key);
        }
    }

    /// Starts a running call's deadline clock (again) at `now`, stopped or not: its
    /// policy's timeout counts from `now` (e.g. a host that stopped it at admission
    /// starts it once the request has been sent in full, where Envoy's route timeout
    /// starts). A call whose deadline has passed is left to time out; a policy
    /// without a timeout has none.
    pub fn restart_timer(&mut self, permit: &Permit, now: Nanos) {
        let now = self.clock.advance(now);
        let Some(Call::Running {
            key,
            pass,
            deadline,
        }) = self.calls.get(permit.0)
        else {
            return;
        };
        if deadline <= now {
            return;
        }
        let Some(policy) = self.keys.get(key as usize).map(|k| k.policy) else {
            return;
        };
        let Some(p) = self.policies.get_mut(policy as usize) else {
            return;
        };
        let exec = &p.config.execution;
        if !exec.timeout_enabled {
            return;
        }
        let timeout_ms = exec.timeout_ms;
        let deadline = deadline_after(now, timeout_ms);
        self.calls.set(
            permit.0,
            Call::Running {
                key,
                pass,
                deadline,
            },
        );
        // The old entry no longer matches the call's deadline: it is skipped, and
        // cleaned off the front so `next_deadline` stays exact.
        p.timeouts.push(timeout_ms, deadline, permit.0);
        self.clean_timeouts(key);
    }

    /// The outcome of one call that held a slot: metrics, breaker, shared delta.
    fn record_end(&mut self, key: u32, pass: RawPass, outcome: Outcome, now: Nanos, rand: u64) {
        let Some(k) = self.keys.get_mut(key as usize) else {
            return;
        };
        let Some(p) = self.policies.get(k.policy as usize) else {
            return;
        };
        let cfg = &p.config;
        let concurrency = k.in_flight;
        k.in_flight = k.in_flight.saturating_sub(1);
        let ctx = ctx!(self, k, cfg, now, rand);
        let mut quiet = false;
        let t = match k.replica.as_deref_mut() {
            Some(rep) if rep.fresh(&ctx) && !rep.behind() => {
                // The shared state decides; the local window keeps the metrics.
                let was_dirty = rep.is_dirty();
                let urgent = rep.record(&ctx, pass, outcome);
                // Counted into a delta whose flush is already scheduled, nothing
                // else asked for: the wake and I/O stay as they are.
                quiet = was_dirty && !urgent && ctx.waiters == 0 && rep.idle();
                k.circuit
                    .record_metrics(cfg, pass.2, outcome, concurrency, now);
                // A probe's result, an error, a slow call, or a success that brings a
                // rule up to its volume (as a local breaker's `check_on_success`):
                // one compare and one flag on the quiet path.
                if pass.1 != NO_PROBE {
                    let ahead = rep.probe_ahead(&ctx);
                    move_ahead(&mut k.circuit, rep, ahead)
                } else if rep.ahead_due() {
                    let ahead = rep.trips_ahead(&ctx, outcome.is_error());
                    let t = move_ahead(&mut k.circuit, rep, ahead);
                    // A trip on a quiet success: its wake and write are scheduled below.
                    quiet &= t.is_none();
                    t
                } else {
                    None
                }
            }
            rep => {
                let load = Load {
                    in_flight: concurrency,
                    queued: k.queued,
                };
                // A store lease's pass settles the local breaker's copy of that lease.
                let local = leased(pass).unwrap_or(pass);
                let t = k
                    .circuit
                    .record(cfg, Pass::from_raw(local), outcome, load, now, rand);
                if let Some(rep) = rep {
                    rep.record(&ctx, pass, outcome);
                    if t.is_some() {
                        rep.moved_locally();
                    }
                }
                t
            }
        };
        let id = KeyId {
            index: key,
            generation: k.generation,
        };
        if let Some(t) = t {
            tell(&mut self.events, &mut k.told, id, t);
        }
        // A local key left closed has no wake (its breaker's timers are open-phase
        // ones) and no I/O: nothing to schedule.
        let quiet = quiet || (k.replica.is_none() && k.circuit.state.phase() == Phase::Closed);
        if !quiet {
            self.after(key, now);
        }
    }

    /// Hands free slots of `key` to its waiters, oldest first. A waiter whose wait
    /// ended by `at` (the time the slot fell free) is refused instead; without a
    /// bulkhead (removed by `set_policy`) every waiter runs.
    fn dequeue(&mut self, key: u32, now: Nanos, at: Nanos, rand: u64) {
        loop {
            let Some(k) = self.keys.get_mut(key as usize) else {
                return;
            };
            if k.queued == 0 {
                return;
            }
            let Some(p) = self.policies.get_mut(k.policy as usize) else {
                return;
            };
            let has_slot = match (&p.config.bulkhead, &k.replica, self.shared.mode) {
                (None, _, _) => true,
                (Some(b), Some(rep), SyncMode::Sync) => {
                    let ctx = ctx!(self, k, &p.config, now, 0);
                    // (A held reserve is safe without a fresh view; a failing
                    // store leaves the limit per worker, as at admission.)
                    if rep.fresh(&ctx) || !rep.store_failing() {
                        rep.has_free_slot(&ctx, b.max_concurrent)
                    } else {
                        k.in_flight < b.max_concurrent
                    }
                }
                (Some(b), _, _) => k.in_flight < b.max_concurrent,
            };
            if !has_slot {
                return;
            }
            let Some(id) = k.queue.pop_front() else {
                k.queued = 0;
                return;
            };
            let Some(Call::Queued { pass, deadline, .. }) = self.calls.get(id) else {
                continue; // cancelled or expired: skip
            };
            if deadline <= at {
                self.refuse_waiter(id, key, now, rand);
                continue;
            }
            let exec = &p.config.execution;
            let deadline = if exec.timeout_enabled {
                deadline_after(now, exec.timeout_ms)
            } else {
                Nanos::MAX
            };
            // Execution starts now: latency and slow-call checks count from here.
            let pass = (pass.0, pass.1, now);
            self.calls.set(
                id,
                Call::Running {
                    key,
                    pass,
                    deadline,
                },
            );
            k.queued -= 1;
            k.in_flight += 1;
            if deadline != Nanos::MAX {
                p.timeouts.push(exec.timeout_ms, deadline, id);
            }
            let kid = KeyId {
                index: key,
                generation: k.generation,
            };
            self.events.push_back(Event::Dequeued {
                key: kid,
                permit: Permit(id),
            });
            self.clean_waits(key);
        }
    }

    fn clean_timeouts(&mut self, key: u32) {
        let Some(policy) = self.keys.get(key as usize).map(|k| k.policy) else {
            return;
        };
        let calls = &self.calls;
        if let Some(p) = self.policies.get_mut(policy as usize) {
            p.timeouts.clean(calls, false);
        }
    }

    fn clean_waits(&mut self, key: u32) {
        let Some(policy) = self.keys.get(key as usize).map(|k| k.policy) else {
            return;
        };
        let calls = &self.calls;
        if let Some(p) = self.policies.get_mut(policy as usize) {
            p.waits.clean(calls, true);
        }
    }

    // ---- fallbacks and other events --------------------------------------------

    /// Asks for a fallback slot (`bulkhead.fallback_max_concurrent`); `None` means
    /// `FALLBACK_REJECTION` was recorded. Without a bulkhead fallbacks are unlimited.
    pub fn start_fallback(&mut self, key: KeyId, now: Nanos) -> Option<FallbackPermit> {
        let now = self.clock.advance(now);
        let k = live_mut(&mut self.keys, key)?;
        let p = self.policies.get(k.policy as usize)?;
        if let Some(b) = &p.config.bulkhead {
            if k.fallbacks >= b.fallback_max_concurrent {
                k.circuit.record_event(EventKind::FallbackRejection, now);
                return None;
            }
        }
        let id = self.calls.insert(Call::Fallback { key: key.index })?;
        k.fallbacks += 1;
        Some(FallbackPermit(id))
    }

    /// Ends a fallback: `FALLBACK_SUCCESS` or `FALLBACK_FAILURE`.
    pub fn finish_fallback(&mut self, permit: FallbackPermit, ok: bool, now: Nanos) {
        let now = self.clock.advance(now);
        let Some(Call::Fallback { key }) = self.calls.get(permit.0) else {
            return;
        };
        self.calls.remove(permit.0);
        if let Some(k) = self.keys.get_mut(key as usize) {
            k.fallbacks = k.fallbacks.saturating_sub(1);
            let kind = if ok {
                EventKind::FallbackSuccess
            } else {
                EventKind::FallbackFailure
            };
            k.circuit.record_event(kind, now);
        }
    }

    /// Counts an event that is not a call's outcome (`FALLBACK_MISSING`,
    /// `RESPONSE_FROM_CACHE`, `COLLAPSED`, …); never moves the breaker.
    pub fn record(&mut self, key: KeyId, kind: EventKind, now: Nanos) {
        let now = self.clock.advance(now);
        if let Some(k) = live_mut(&mut self.keys, key) {
            k.circuit.record_event(kind, now);
            self.touch(key.index, now);
        }
    }

    /// Counts `n` events of `kind` at once (a host restoring saved counts); never
    /// moves the breaker.
    pub fn record_n(&mut self, key: KeyId, kind: EventKind, n: u32, now: Nanos) {
        let now = self.clock.advance(now);
        if let Some(k) = live_mut(&mut self.keys, key) {
            k.circuit.window.record_n(kind, n, now);
            self.touch(key.index, now);
        }
    }

    /// Forces a key's breaker open or closed (an operator's `open()` / `close()`), or
    /// half-open (a host restoring a saved state); process-wide for a shared key
    /// (written through the store). Nothing in a mode that pins the phase
    /// (`forced_open`, `forced_closed`, `disabled`).
    pub fn force(&mut self, key: KeyId, to: Phase, now: Nanos, rand: u64) {
        let now = self.clock.advance(now);
        let Some(k) = live_mut(&mut self.keys, key) else {
            return;
        };
        let Some(p) = self
            .policies
            .get(k.policy as usize)
            .filter(|p| p.config.breaker.mode.runs_state_machine())
        else {
            return;
        };
        let t = k.circuit.force(&p.config, to, now, rand);
        if let Some(t) = t {
            tell(&mut self.events, &mut k.told, key, t);
        }
        if let Some(r) = k.replica.as_deref_mut() {
            r.force(to, now);
        }
        self.after(key.index, now);
        // A use of the key: it stays `idle_ms` in the forced phase.
        self.touch(key.index, now);
    }

    // ---- time ----------------------------------------------------------------

    /// Advances time: deadlines (TIMEOUT), queue waits, breaker transitions, shared
    /// flushes and refreshes, idle keys. Call until it returns `None`, then again at
    /// [`Engine::next_deadline`].
    pub fn poll(&mut self, now: Nanos, rand: u64) -> Option<Event> {
        if let Some(e) = self.events.pop_front() {
            return Some(e);
        }
        if self
            .next_deadline()
            .is_none_or(|d| d > now.max(self.clock.now()))
        {
            return None;
        }
        let now = self.clock.advance(now);
        self.expire_due(now, rand);
        self.run_wakes(now, rand);
        for p in 0..self.policies.len() as u32 {
            self.sweep(p, now, SWEEP_PER_POLL);
        }
        self.events.pop_front()
    }

    /// Call timeouts and queue-wait ends due at `now`, in the order they fell due (a
    /// late poll decides as a timely one would: a slot freed at 1050 ms does not go to
    /// a waiter whose wait ended at 1000 ms).
    fn expire_due(&mut self, now: Nanos, rand: u64) {
        // Queue heads in the order they fall due: deadline, then timeouts before waits,
        // then policy. The earliest queue is drained while its head stays before every
        // other queue's (the next head of all), so a burst of N expiries over P policies
        // costs O(N + P per switch of queue), not O(N·P) (found by review). An expiry
        // adds entries only to its own policy's timeouts (a dequeued call), which the
        // drain re-reads.
        loop {
            // (deadline, 0 timeouts / 1 waits, policy): the first and next heads.
            let mut first = (Nanos::MAX, 2u8, usize::MAX);
            let mut next = first;
            for (i, p) in self.policies.iter().enumerate() {
                for (kind, d) in [(0, p.timeouts.next()), (1, p.waits.next())] {
                    let Some(d) = d else { continue };
                    let head = (d, kind, i);
                    if head < first {
                        next = first;
                        first = head;
                    } else if head < next {
                        next = head;
                    }
                }
            }
            let (d, kind, pi) = first;
            if pi == usize::MAX || d > now {
                return; // no queue holds a due entry
            }
            while let Some(h) = self.policies.get(pi).and_then(|p| match kind {
                0 => p.timeouts.next(),
                _ => p.waits.next(),
            }) {
                if h > now || (h, kind, pi) >= next {
                    break;
                }
                if kind == 0 {
                    self.expire_call(pi, h, now, rand);
                } else {
                    self.expire_wait(pi, now, rand);
                }
            }
            if next.2 == usize::MAX || next.0 > now {
                return; // the drained queue was the only one with a due entry
            }
        }
    }

    /// Times out the call at the head of policy `pi`'s timeouts (due at `at`).
    fn expire_call(&mut self, pi: usize, at: Nanos, now: Nanos, rand: u64) {
        let Some((d, id)) = self
            .policies
            .get_mut(pi)
            .and_then(|p| p.timeouts.pop_due(now))
        else {
            return;
        };
        if let Some(Call::Running {
            key,
            pass,
            deadline,
        }) = self.calls.get(id)
        {
            if deadline == d {
                let key_generation = self.keys.get(key as usize).map_or(0, |k| k.generation);
                self.calls.expire(id, key, key_generation);
                if self.keys.get(key as usize).is_some() {
                    // Before the transition the timeout may cause (the order hosts
                    // report them in).
                    let kid = KeyId {
                        index: key,
                        generation: key_generation,
                    };
                    self.events
                        .push_back(Event::TimedOut { key: kid, call: id });
                }
                // It lasted until its deadline, however late the host polled (found
                // by review: a timer 5 s late made a 1 s timeout a 6 s slow call).
                let (generation, probe, started) = pass;
                let pass = (generation, probe, started.wrapping_add(now.wrapping_sub(d)));
                self.record_end(key, pass, Outcome::Timeout, now, rand);
                self.dequeue(key, now, at, rand);
            }
        }
        self.clean_timeouts_of(pi);
    }

    fn clean_timeouts_of(&mut self, pi: usize) {
        let calls = &self.calls;
        if let Some(p) = self.policies.get_mut(pi) {
            p.timeouts.clean(calls, false);
        }
    }

    /// Ends the wait at the head of policy `pi`'s waits (`THREAD_POOL_REJECTED`).
    fn expire_wait(&mut self, pi: usize, now: Nanos, rand: u64) {
        let Some((d, id)) = self.policies.get_mut(pi).and_then(|p| p.waits.pop_due(now)) else {
            return;
        };
        if let Some(Call::Queued { key, deadline, .. }) = self.calls.get(id) {
            if deadline == d {
                self.refuse_waiter(id, key, now, rand);
            }
        }
        self.clean_waits_of(pi);
    }

    /// Refuses queued call `id` of `key` whose wait ended (`THREAD_POOL_REJECTED`,
    /// `WaitExpired`): it counts as an error.
    fn refuse_waiter(&mut self, id: CallId, key: u32, now: Nanos, rand: u64) {
        self.calls.remove(id);
        let Some(k) = self.keys.get_mut(key as usize) else {
            return;
        };
        k.queued = k.queued.saturating_sub(1);
        let Some(p) = self.policies.get(k.policy as usize) else {
            return;
        };
        let event = EventKind::ThreadPoolRejected;
        let ctx = ctx!(self, k, &p.config, now, rand);
        let fresh = k
            .replica
            .as_deref()
            .is_some_and(|r| r.fresh(&ctx) && !r.forcing());
        let t = count_refusal(&mut k.circuit, k.replica.as_deref_mut(), fresh, &ctx, event);
        let kid = KeyId {
            index: key,
            generation: k.generation,
        };
        self.events.push_back(Event::Refused {
            key: kid,
            call: id,
            refusal: Refusal {
                event,
                cause: Cause::WaitExpired,
            },
        });
        if let Some(t) = t {
            tell(&mut self.events, &mut k.told, kid, t);
        }
        self.compact_queue(key);
        self.after(key, now);
    }

    fn clean_waits_of(&mut self, pi: usize) {
        let calls = &self.calls;
        if let Some(p) = self.policies.get_mut(pi) {
            p.waits.clean(calls, true);
        }
    }

    /// Drops the ids of calls that left `key`'s queue (cancelled, refused) once they
    /// outnumber the waiting ones: the queue stays O(waiting), amortised O(1).
    fn compact_queue(&mut self, key: u32) {
        let Some(k) = self.keys.get_mut(key as usize) else {
            return;
        };
        if k.queue.len() > 2 * k.queued as usize + 16 {
            let calls = &self.calls;
            k.queue
                .retain(|&id| matches!(calls.get(id), Some(Call::Queued { .. })));
        }
    }

    fn run_wakes(&mut self, now: Nanos, rand: u64) {
        // Take every due wake first: work re-armed for `now` runs at the next poll.
        let mut due = core::mem::take(&mut self.due);
        due.clear();
        while let Some(&Reverse((d, i, stamp))) = self.wakes.peek() {
            if d > now {
                break;
            }
            self.wakes.pop();
            due.push((i, stamp));
        }
        for &(i, stamp) in &due {
            let Some(k) = self.keys.get_mut(i as usize) else {
                continue;
            };
            if !k.live || k.stamp != stamp {
                continue;
            }
            k.wake = Nanos::MAX;
            if let Some(seq) = k.replica.as_deref().and_then(|r| r.lost(&self.shared, now)) {
                let lost = Answer::Failed { code: LOST };
                self.io_done(IoId::new(i, seq), lost, now, rand);
            }
            let Some(k) = self.keys.get_mut(i as usize) else {
                continue;
            };
            let Some(p) = self.policies.get(k.policy as usize) else {
                continue;
            };
            let cfg = &p.config;
            let ctx = ctx!(self, k, cfg, now, rand);
            let id = KeyId {
                index: i,
                generation: k.generation,
            };
            // The local breaker's timers run while it decides (no fresh view, a
            // forced phase or a local move not written yet).
            match k.replica.as_deref_mut() {
                Some(rep) if rep.fresh(&ctx) && !rep.forcing() => rep.tick(&ctx),
                rep => {
                    if let Some(rep) = rep {
                        rep.tick(&ctx);
                    }
                    if let Some(t) = k.circuit.poll(cfg, now, rand) {
                        tell(&mut self.events, &mut k.told, id, t);
                    }
                }
            }
            self.after(i, now);
        }
        self.due = due;
    }

    /// Re-arms a key's wake-up and queues its store request, after anything changed.
    fn after(&mut self, i: u32, now: Nanos) {
        let Some(k) = self.keys.get_mut(i as usize) else {
            return;
        };
        let Some(p) = self.policies.get(k.policy as usize) else {
            return;
        };
        let cfg = &p.config;
        let ctx = ctx!(self, k, cfg, now, 0);
        let wake = match k.replica.as_deref() {
            Some(rep) => {
                let own = if rep.fresh(&ctx) && !rep.forcing() {
                    None
                } else {
                    k.circuit.state.next_deadline(&cfg.breaker)
                };
                match (rep.next_wake(&ctx), own) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            }
            None => k.circuit.state.next_deadline(&cfg.breaker),
        };
        let shared = k.replica.is_some();
        if let Some(w) = wake {
            self.wake_at(i, w);
        }
        if shared {
            self.queue_io(i);
        }
    }

    /// Schedules key `i`'s wake at `w` unless one comes earlier.
    fn wake_at(&mut self, i: u32, w: Nanos) {
        let Some(k) = self.keys.get_mut(i as usize) else {
            return;
        };
        if w < k.wake {
            self.stamp = self.stamp.wrapping_add(1);
            k.stamp = self.stamp;
            k.wake = w;
            self.wakes.push(Reverse((w, i, self.stamp)));
            self.new_wake = self.new_wake.min(w);
        }
    }

    /// An event already decided (by `start`, `complete`, `io_done`, ...) without
    /// running time-driven work: what a host drains right after a call; `poll` (on its
    /// timer) does the rest.
    pub fn take_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The earliest time [`Engine::poll`] has work (`None`: nothing scheduled).
    pub fn next_deadline(&self) -> Option<Nanos> {
        let mut next: Option<Nanos> = None;
        let mut fold = |d: Option<Nanos>| {
            if let Some(d) = d {
                next = Some(next.map_or(d, |n: Nanos| n.min(d)));
            }
        };
        if !self.events.is_empty() {
            fold(Some(self.clock.now()));
        }
        for p in &self.policies {
            fold(p.timeouts.next());
            fold(p.waits.next());
            if let Some(k) = self.keys.get(p.lru.tail as usize) {
                fold(Some(
                    k.last_used.saturating_add(ms_to_ns(p.config.keys.idle_ms)),
                ));
            }
        }
        fold(self.wakes.peek().map(|r| r.0 .0));
        next
    }

    // ---- shared-store I/O ---------------------------------------------------------

    fn queue_io(&mut self, i: u32) {
        if let Some(k) = self.keys.get_mut(i as usize) {
            if !k.io_queued && k.replica.as_deref().is_some_and(Replica::wants_io) {
                k.io_queued = true;
                self.io_queue.push_back(i);
            }
        }
    }

    /// The earliest key wake (shared-state flush, heartbeat, breaker timer, ...)
    /// scheduled since the last call, then forgets it: a host whose timer is armed at
    /// or before it, with no new call deadline or event, need not scan
    /// [`Engine::next_deadline`]. O(1).
    #[inline]
    pub fn take_new_wake(&mut self) -> Option<Nanos> {
        let w = core::mem::replace(&mut self.new_wake, Nanos::MAX);
        (w != Nanos::MAX).then_some(w)
    }

    /// Whether [`Engine::poll`] has events queued already (a host that polls only
    /// when something happened checks this after `start` / `complete`). O(1).
    #[inline]
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Whether a store request is waiting for [`Engine::poll_io`].
    #[inline]
    pub fn has_io(&self) -> bool {
        !self.io_queue.is_empty()
    }

    /// The next store request for the host, if any (at most one per key in flight).
    /// Perform it and report the answer with [`Engine::io_done`].
    pub fn poll_io(&mut self, now: Nanos, rand: u64) -> Option<Io<'_>> {
        let now = self.clock.advance(now);
        let found = loop {
            let i = self.io_queue.pop_front()?;
            let Some(k) = self.keys.get_mut(i as usize) else {
                continue;
            };
            k.io_queued = false;
            if !k.live {
                continue;
            }
            let Some(p) = self.policies.get(k.policy as usize) else {
                continue;
            };
            let cfg = &p.config;
            let ctx = ctx!(self, k, cfg, now, rand);
            let Some(rep) = k.replica.as_deref_mut() else {
                continue;
            };
            self.io_seq = self.io_seq.wrapping_add(1);
            let seq = self.io_seq;
            if let Some(kind) = rep.next_op(&ctx, seq) {
                break (i, seq, kind);
            }
        };
        let (i, seq, kind) = found;
        // An asynchronous store's answer may never come: a wake gives the request up
        // (`Replica::lost`). A synchronous one answers before the host polls again (a
        // wake per request there filled the heap: found by review).
        if self.shared.mode == SyncMode::Async {
            self.wake_at(i, now.saturating_add(ms_to_ns(self.shared.stale_ms)));
        }
        let rep = self.keys.get(i as usize)?.replica.as_deref()?;
        let op = match kind {
            None => Op::Read,
            Some(expect) => Op::Write {
                value: rep.written(),
                expect,
            },
        };
        Some(Io {
            id: IoId::new(i, seq),
            key: rep.store_key(),
            op,
        })
    }

    /// The store's answer to request `id` (stale or unknown ids are ignored). An
    /// asynchronous store's request not answered within `stale_ms` is given up as
    /// failed (an [`Issue::Stale`](crate::shared::io::Issue::Stale) event) and the key asks again; its answer is then
    /// ignored.
    pub fn io_done(&mut self, id: IoId, answer: Answer<'_>, now: Nanos, rand: u64) {
        let now = self.clock.advance(now);
        if !id.in_range() {
            return;
        }
        let i = id.key_index();
        let Some(k) = self.keys.get_mut(i as usize) else {
            return;
        };
        if !k.live {
            return;
        }
        let Some(p) = self.policies.get(k.policy as usize) else {
            return;
        };
        let cfg = &p.config;
        let ctx = ctx!(self, k, cfg, now, rand);
        let Some(rep) = k.replica.as_deref_mut() else {
            return;
        };
        if !rep.awaits(id.seq()) {
            return;
        }
        let forcing = rep.force_pending();
        let fx = rep.on_answer(&ctx, answer);
        // While a forced phase is being written, a view read meanwhile is older than
        // the force: the write will bring the forced phase (and the local breaker
        // keeps it until then). So is one met before the outcomes the local breaker
        // moved on are written.
        let older = (forcing && !fx.written) || rep.behind();
        // Whether the view decides now: only then are its transitions this worker's
        // (a view that does not decide — stale, or read while writes fail: it lacks
        // the outcomes the local breaker counted — is told when it decides again;
        // found by a fleet stress test: told at once and again then, `open` twice).
        let decides = !older && rep.fresh_at(&self.shared, now);
        let kid = KeyId {
            index: i,
            generation: k.generation,
        };
        if decides {
            for t in fx.transitions {
                tell(&mut self.events, &mut k.told, kid, t);
            }
            // The local breaker mirrors the last view, the state a stale key falls
            // back to (also after this worker's own writes, or it would fall back to
            // an older one), and a view that differs from what the host was told ends
            // with one more transition (its own trip undone by the merged state, a
            // phase met on adopting a view, a view adopted while it did not decide).
            let told = k.told;
            if let Some(v) = rep
                .view()
                .filter(|v| fx.adopted || fx.written || v.breaker.phase() != told)
            {
                k.circuit.state = v.breaker.clone();
                // The local rules never saw this window: should the view go stale,
                // the local breaker's first success runs them.
                k.circuit.state.check_next_success();
                let observed = Transition {
                    from: k.told,
                    to: v.breaker.phase(),
                    at: now,
                    generation: v.breaker.generation(),
                    reason: TransitionReason::Observed,
                };
                tell(&mut self.events, &mut k.told, kid, observed);
            }
        }
        if let Some(issue) = fx.issue {
            self.events.push_back(Event::Store { key: kid, issue });
        }
        // Serve waiters after every answer, not only when slots were granted: a new
        // ledger view may show room freed by other workers after the limit was
        // lowered (see `Replica::has_free_slot`). A no-op without waiters.
        self.dequeue(i, now, now, rand);
        self.after(i, now);
    }

    // ---- status (side-effect free) ---------------------------------------------------

    /// Everything a dashboard shows for `key` at `now` (a shared key reports the
    /// process-wide phase and health from its view). No side effects.
    pub fn snapshot(&self, key: KeyId, now: Nanos) -> Option<Snapshot> {
        let k = self.live(key)?;
        let cfg = &self.policies.get(k.policy as usize)?.config;
        let mut s = k.circuit.snapshot(cfg, k.in_flight, k.queued, now);
        if let (Some(v), Some(rep)) = (self.deciding_view(k, now), k.replica.as_deref()) {
            s.phase = v.breaker.reported_phase(cfg.breaker.mode);
            s.would_admit = v.breaker.would_admit(&cfg.breaker, now);
            s.rejecting = !s.would_admit && s.phase != Phase::Closed;
            s.generation = v.breaker.generation();
            // The kinds the store shares are the fleet's, as this worker knows them
            // (its own outcomes count at once, not when their write lands); the rest
            // (fallbacks, cache hits, collapsed calls) and latencies are this
            // worker's own (found by review: `fallbacks` and `cacheHits` read 0 once
            // the view decided, and counts went down when it began to).
            let c = rep.known_counts(v, now, false);
            let mut counts = s.health.counts;
            let fleet = c.health().counts;
            for kind in SHARED_KINDS {
                counts[kind.index()] = fleet[kind.index()];
            }
            s.health = HealthSnapshot::from_counts(&counts, u64::from(c.slow));
        }
        Some(s)
    }

    /// The rolling health `key`'s trip rules read at `now`: the fleet's, from the shared
    /// view while it decides, else the key's own window (lighter than [`Engine::snapshot`]:
    /// no percentiles). No side effects.
    pub fn health(&self, key: KeyId, now: Nanos) -> Option<HealthSnapshot> {
        let k = self.live(key)?;
        Some(match (self.deciding_view(k, now), k.replica.as_deref()) {
            (Some(v), Some(rep)) => rep.known_counts(v, now, false).health(),
            _ => k.circuit.window.health_at(now),
        })
    }

    /// The shared view, if it decides admissions at `now` (a stale view does not:
    /// the key runs on its local breaker, and status reports that one).
    fn deciding_view<'a>(
        &self,
        k: &'a KeyEntry,
        now: Nanos,
    ) -> Option<&'a crate::shared::KeyState> {
        k.replica
            .as_deref()
            .filter(|r| !r.forcing() && r.fresh_at(&self.shared, now.max(self.clock.now())))
            .and_then(Replica::view)
    }

    /// A key's phase as reported (`forced_open` → Open). No side effects.
    pub fn phase(&self, key: KeyId) -> Option<Phase> {
        let k = self.live(key)?;
        let mode = self.policies.get(k.policy as usize)?.config.breaker.mode;
        Some(match self.deciding_view(k, self.clock.now()) {
            Some(v) => v.breaker.reported_phase(mode),
            None => k.circuit.state.reported_phase(mode),
        })
    }

    /// Whether `key`'s breaker would let a call started at `now` run (Hystrix's
    /// `allowRequest()` as a pure query): false while open — its period not over, or
    /// forced — and while half-open with every probe out (a lease this worker holds for
    /// its next call is not out). The bulkhead and the random
    /// refusals (adaptive throttle, slow-start ramp) are not asked. No side effects.
    pub fn would_admit(&self, key: KeyId, now: Nanos) -> Option<bool> {
        let k = self.live(key)?;
        let cfg = &self.policies.get(k.policy as usize)?.config.breaker;
        Some(match (self.deciding_view(k, now), k.replica.as_deref()) {
            // A probe lease this worker was granted ahead of its admission is its own.
            (Some(v), Some(rep)) => {
                v.breaker.would_admit(cfg, now)
                    || (v.breaker.phase() == Phase::HalfOpen
                        && rep.holds_probe(v.breaker.generation()))
            }
            _ => k.circuit.state.would_admit(cfg, now),
        })
    }

    /// The breaker state that decides admissions of `key` now: the shared view of a
    /// shared key while it is fresh, else the key's local state. No side effects.
    pub fn breaker_state(&self, key: KeyId) -> Option<&crate::BreakerState> {
        let k = self.live(key)?;
        Some(match self.deciding_view(k, self.clock.now()) {
            Some(v) => &v.breaker,
            None => &k.circuit.state,
        })
    }

    /// How long from `now` until `key`'s breaker lets calls through again, where the
    /// breaker knows: the rest of its open period (a `Retry-After` for refused
    /// callers). `None` when it is not open, or when its mode is not `normal`
    /// (`forced_open` has no end; the others refuse nothing), or when `key` is not
    /// live (see [`Engine::phase`] to tell them apart). Half-open is `None`: a probe's
    /// result decides. No side effects.
    pub fn retry_after(&self, key: KeyId, now: Nanos) -> Option<Nanos> {
        let k = self.live(key)?;
        let mode = self.policies.get(k.policy as usize)?.config.breaker.mode;
        let b = self
            .deciding_view(k, self.clock.now())
            .map_or(&k.circuit.state, |v| &v.breaker);
        (mode == BreakerMode::Normal && b.phase() == Phase::Open)
            .then(|| b.open_until().saturating_sub(now))
    }

    /// Calls of `key` holding a slot (executing); queued calls are not counted.
    pub fn in_flight(&self, key: KeyId) -> Option<u32> {
        self.live(key).map(|k| k.in_flight)
    }

    /// Calls of `key` waiting in its queue.
    pub fn queued(&self, key: KeyId) -> Option<u32> {
        self.live(key).map(|k| k.queued)
    }

    /// Results of `key` that arrived after their call timed out.
    pub fn late_results(&self, key: KeyId) -> Option<u64> {
        self.live(key).map(|k| k.late)
    }

    /// Bulkhead slots this worker holds for a shared key in the store's ledger
    /// (in flight plus its local reserve).
    pub fn slots_held(&self, key: KeyId) -> Option<u32> {
        self.live(key)?.replica.as_deref().map(Replica::slots_held)
    }

    /// The key's local breaker and window.
    pub fn circuit(&self, key: KeyId) -> Option<&Circuit> {
        self.live(key).map(|k| &k.circuit)
    }

    /// The shared state as last read (shared keys only).
    pub fn shared_view(&self, key: KeyId) -> Option<&crate::shared::KeyState> {
        self.live(key)?.replica.as_deref()?.view()
    }

    /// The store key a shared key lives under (once its slot is known).
    pub fn store_key(&self, key: KeyId) -> Option<&str> {
        self.live(key)?.replica.as_deref().map(Replica::store_key)
    }

    /// Live keys of a policy (overflow excluded).
    pub fn key_count(&self, policy: PolicyId) -> Option<u32> {
        self.policies.get(policy.0 as usize).map(|p| p.count)
    }
}

impl Default for Engine {
    fn default() -> Self {
        Engine::local()
    }
}

/// The event kinds a shared key's window holds (bulkhead rejections of both kinds in
/// one count, reported as semaphore rejections).
const SHARED_KINDS: [EventKind; 7] = [
    EventKind::Success,
    EventKind::Failure,
    EventKind::Timeout,
    EventKind::SemaphoreRejected,
    EventKind::ThreadPoolRejected,
    EventKind::ShortCircuited,
    EventKind::BadRequest,
];

/// Counts a bulkhead or queue refusal (an error) of a key: into its fresh view's
/// delta (which may trip ahead of the store), or on its local breaker, which then
/// decides (`fresh`: the view decides).
fn count_refusal(
    c: &mut Circuit,
    rep: Option<&mut Replica>,
    fresh: bool,
    ctx: &Ctx,
    event: EventKind,
) -> Option<Transition> {
    let now = ctx.now;
    match rep {
        Some(rep) if fresh => {
            c.record_event(event, now);
            rep.record_refusal(event, now);
            let ahead = rep.trips_ahead(ctx, true);
            move_ahead(c, rep, ahead)
        }
        rep => {
            let load = ctx.in_flight + ctx.waiters;
            let t = c.record_rejection(ctx.config, event, load, now, ctx.rand);
            if let Some(rep) = rep {
                rep.record_refusal(event, now);
                if t.is_some() {
                    rep.moved_locally();
                }
            }
            t
        }
    }
}

/// A shared key's view moved ahead of the store on this worker's outcomes
/// ([`Replica::trips_ahead`], [`Replica::probe_ahead`]): its local breaker takes that
/// state and decides until the write carrying them lands.
fn move_ahead(
    c: &mut Circuit,
    rep: &mut Replica,
    ahead: Option<(BreakerState, Transition)>,
) -> Option<Transition> {
    let (state, t) = ahead?;
    c.state = state;
    rep.moved_locally();
    Some(t)
}

/// Queues a transition of `key` for the host as a step from the phase it was last
/// told, `told` (a restatement of that phase is dropped): whichever part of the
/// engine made it — the local breaker, the shared view, an operator's force — the
/// host sees one unbroken chain of phases per key, each announced once.
fn tell(events: &mut VecDeque<Event>, told: &mut Phase, key: KeyId, t: Transition) {
    if t.to == *told {
        return;
    }
    events.push_back(Event::Transition {
        key,
        transition: Transition { from: *told, ..t },
    });
    *told = t.to;
}

/// The live entry of `key` (a stale or forged id finds nothing).
fn live_mut(keys: &mut [KeyEntry], key: KeyId) -> Option<&mut KeyEntry> {
    keys.get_mut(key.index as usize)
        .filter(|k| k.live && k.generation == key.generation)
}
