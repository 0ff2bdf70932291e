//! A test host for the engine: one engine (local state) or several engines sharing an
//! in-memory CAS store (shared state), driven the way a real host drives them, with
//! a simulated clock.

#![allow(dead_code)]

use fusewire_core::shared::memory::{MemoryStore, Rules};
use fusewire_core::shared::Io;
use fusewire_core::*;

pub const MS: u64 = 1_000_000;
pub const T0: u64 = 1_000_000 * MS;

/// A host clock gone wrong, for the time-jump ops of the model proptests: back by
/// half (`to` 0), a year ahead (1), to 2^63 (2), a second before the end of time
/// (3), or to its end.
pub fn jump(now: u64, to: u8) -> u64 {
    match to {
        0 => now / 2,
        1 => now.saturating_add(365 * 86_400_000 * MS),
        2 => u64::MAX / 2,
        3 => u64::MAX - 1_000 * MS,
        _ => u64::MAX,
    }
}

/// Where keys keep their state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One engine, local state.
    Local,
    /// `workers` engines on one store with these CAS rules (sync hosts).
    Shared(Rules, usize),
    /// `workers` engines on one store answered asynchronously (a Redis host).
    Async(usize),
}

impl Mode {
    pub fn workers(self) -> usize {
        match self {
            Mode::Local => 1,
            Mode::Shared(_, n) | Mode::Async(n) => n,
        }
    }

    /// Every mode the one suite runs against.
    pub fn all() -> [Mode; 3] {
        [
            Mode::Local,
            Mode::Shared(Rules::Envoy, 4),
            Mode::Shared(Rules::Kong, 4),
        ]
    }
}

pub struct Host {
    pub mode: Mode,
    pub engines: Vec<Engine>,
    pub store: MemoryStore,
    pub now: u64,
    pub policy: PolicyId,
    pub events: Vec<Vec<Event>>,
    /// Requests in flight to the store (async mode): (worker, id, answer).
    pub pending: Vec<(usize, shared::IoId, shared::OwnedAnswer)>,
    /// Each worker's clock offset from `now` (ns): workers whose clocks disagree.
    pub skew: Vec<i64>,
    rand: u64,
    json: String,
    shared: SharedConfig,
}

pub fn config(json: &str) -> Config {
    Config::from_json(json).unwrap_or_else(|e| panic!("test config: {e}"))
}

/// The sync-mode view refresh interval (`SharedConfig::sync_ms()` by default): the
/// longest another worker's change goes unseen.
pub const SYNC_MS: u64 = 100;

impl Host {
    pub fn new(mode: Mode, json: &str) -> Host {
        Self::with_shared(mode, json, SharedConfig::default())
    }

    pub fn with_shared(mode: Mode, json: &str, mut shared: SharedConfig) -> Host {
        let rules = match mode {
            Mode::Shared(r, _) => r,
            _ => Rules::Script,
        };
        if let Mode::Async(_) = mode {
            shared.mode = config::SyncMode::Async;
        }
        let engines = Self::engines(mode, json, &shared, 0);
        Host {
            mode,
            engines,
            store: MemoryStore::new(rules),
            now: T0,
            policy: PolicyId(0),
            events: (0..mode.workers()).map(|_| Vec::new()).collect(),
            pending: Vec::new(),
            skew: vec![0; mode.workers()],
            rand: 0,
            json: json.to_string(),
            shared,
        }
    }

    /// Fresh engines (worker ids offset by `epoch`, as new VMs get new ids).
    fn engines(mode: Mode, json: &str, shared: &SharedConfig, epoch: u64) -> Vec<Engine> {
        let cfg = config(json);
        (0..mode.workers())
            .map(|w| {
                let mut e = match mode {
                    Mode::Local => Engine::local(),
                    _ => {
                        let seed = 0x9E37_79B9 * (w as u64 + 1) + (epoch << 40);
                        Engine::shared(shared.clone(), seed).unwrap()
                    }
                };
                e.add_policy("svc", cfg.clone()).unwrap();
                e
            })
            .collect()
    }

    /// A config reload: every engine is replaced by a new one (new worker ids) with
    /// the same policy name, config and namespace; the store keeps its state.
    pub fn reload(&mut self, epoch: u64) {
        self.engines = Self::engines(self.mode, &self.json, &self.shared, epoch);
        self.events = (0..self.engines.len()).map(|_| Vec::new()).collect();
        self.pending.clear();
    }

    /// Worker `w`'s clock: `now` moved by its skew.
    pub fn now_of(&self, w: usize) -> u64 {
        let skew = self.skew.get(w).copied().unwrap_or(0);
        self.now.saturating_add_signed(skew)
    }

    /// Worker `w` crashes: its engine is dropped with whatever it held (slots,
    /// leases, unwritten counts); later workers shift down by one.
    pub fn crash(&mut self, w: usize) {
        drop(self.engines.remove(w));
        self.events.remove(w);
        if w < self.skew.len() {
            self.skew.remove(w);
        }
        self.pending.retain(|p| p.0 != w);
        for p in &mut self.pending {
            if p.0 > w {
                p.0 -= 1;
            }
        }
    }

    /// Process-wide in-flight count of a key (one id per worker).
    pub fn in_flight(&self, keys: &[KeyId]) -> u32 {
        self.engines
            .iter()
            .zip(keys)
            .map(|(e, k)| e.in_flight(*k).expect("live key"))
            .sum()
    }

    pub fn rand(&mut self) -> u64 {
        // A fixed draw keeps tests deterministic; tests that need randomness set it.
        self.rand
    }

    pub fn set_rand(&mut self, r: u64) {
        self.rand = r;
    }

    pub fn key(&mut self, w: usize, name: &str) -> KeyId {
        let now = self.now_of(w);
        let k = self.engines[w].key(self.policy, name, now).expect("policy");
        self.drive(w);
        k
    }

    /// Performs every store request of worker `w` (sync modes: at once; async mode:
    /// they wait in `pending` until `deliver`).
    ///
    /// Polling may queue new store requests (a flush, a release): they are performed
    /// too, until the worker has nothing left to do at `now`.
    pub fn drive(&mut self, w: usize) {
        let now = self.now_of(w);
        let rand = self.rand;
        for _ in 0..16 {
            while let Some(io) = self.engines[w].poll_io(now, rand) {
                let (id, answer) = (io.id, self.store.exec(&io));
                if let Mode::Async(_) = self.mode {
                    self.pending.push((w, id, answer));
                    continue;
                }
                self.engines[w].io_done(id, answer.as_answer(), now, rand);
            }
            self.collect(w);
            if !self.engines[w].has_io() {
                break;
            }
        }
    }

    /// Async mode: hands every pending answer back.
    pub fn deliver(&mut self) {
        let rand = self.rand;
        for (w, id, answer) in std::mem::take(&mut self.pending) {
            let now = self.now_of(w);
            self.engines[w].io_done(id, answer.as_answer(), now, rand);
            self.drive(w);
        }
    }

    fn collect(&mut self, w: usize) {
        let now = self.now_of(w);
        let rand = self.rand;
        while let Some(e) = self.engines[w].poll(now, rand) {
            self.events[w].push(e);
        }
    }

    pub fn start(&mut self, w: usize, key: KeyId) -> Start {
        let now = self.now_of(w);
        let rand = self.rand;
        self.engines[w].prepare(key, now);
        self.drive(w);
        let s = self.engines[w].start(key, now, rand);
        self.drive(w);
        s
    }

    pub fn complete(&mut self, w: usize, p: Permit, outcome: Outcome) -> Completion {
        let now = self.now_of(w);
        let rand = self.rand;
        let c = self.engines[w].complete(p, outcome, now, rand);
        self.drive(w);
        c
    }

    /// One call that ends at once with `outcome`; true if it ran.
    pub fn call(&mut self, w: usize, key: KeyId, outcome: Outcome) -> bool {
        match self.start(w, key) {
            Start::Running(p) => {
                assert_eq!(self.complete(w, p, outcome), Completion::OnTime);
                true
            }
            Start::Queued(t) => panic!("unexpected queue: {t:?}"),
            Start::Refused(_) => false,
        }
    }

    /// Advances the clock by `ms`, ticking every worker every 100 ms on the way (as
    /// Envoy's timer does), driving their store requests.
    pub fn advance(&mut self, ms: u64) {
        let end = self.now + ms * MS;
        while self.now < end {
            self.now = (self.now + 100 * MS).min(end);
            for w in 0..self.engines.len() {
                self.drive(w);
            }
            if let Mode::Async(_) = self.mode {
                self.deliver();
            }
        }
    }

    pub fn take_events(&mut self, w: usize) -> Vec<Event> {
        self.collect(w);
        std::mem::take(&mut self.events[w])
    }

    pub fn phase(&self, w: usize, key: KeyId) -> Phase {
        self.engines[w].phase(key).expect("live key")
    }

    pub fn snapshot(&self, w: usize, key: KeyId) -> Snapshot {
        self.engines[w]
            .snapshot(key, self.now_of(w))
            .expect("live key")
    }

    /// Every worker's key for `name`.
    pub fn keys(&mut self, name: &str) -> Vec<KeyId> {
        (0..self.engines.len()).map(|w| self.key(w, name)).collect()
    }

    /// Fills the shared window of `keys` past its sparse size ([`shared::SPARSE_CALLS`]
    /// successes by worker 0, then one by each other worker, each written and its
    /// answer read): from there healthy outcomes wait for the flush, as on a busy
    /// key. Returns the successes it added.
    pub fn warm(&mut self, keys: &[KeyId]) -> u32 {
        for _ in 0..shared::SPARSE_CALLS {
            assert!(self.call(0, keys[0], Outcome::Success));
            self.deliver();
        }
        for (w, &k) in keys.iter().enumerate().skip(1) {
            assert!(self.call(w, k, Outcome::Success));
            self.deliver();
        }
        self.advance(self.shared.flush_ms + 100);
        shared::SPARSE_CALLS as u32 + keys.len() as u32 - 1
    }

    pub fn store_keys(&self) -> Vec<&str> {
        self.store.keys()
    }
}

/// Runs `f` against every mode.
/// Worker `w`'s transitions since the last take, as (from, to).
pub fn transitions(h: &mut Host, w: usize) -> Vec<(Phase, Phase)> {
    h.take_events(w)
        .into_iter()
        .filter_map(|e| match e {
            Event::Transition { transition: t, .. } => Some((t.from, t.to)),
            _ => None,
        })
        .collect()
}

pub fn each_mode(f: impl Fn(Mode)) {
    for m in Mode::all() {
        f(m);
    }
}

pub fn io_key<'a>(io: &'a Io<'a>) -> &'a str {
    io.key
}
