//! The whole flow under arbitrary host behaviour: the input is a program of host
//! steps — keys, starts, completions, cancels, forged permits and tickets, polls,
//! operator forces, reconfigures, time moving any way (backwards too), and a store
//! that answers late, never, twice, out of order, with foreign or corrupt bytes or
//! wrong tokens, workers whose clocks disagree (by up to the end of time) — run
//! against 1–3 engines (local, shared on a sync store, shared on an async store). Nothing may panic (fuzz builds check arithmetic overflow), a
//! host's I/O round always ends, the bulkhead limit holds process-wide, and after a
//! drained `poll` the next deadline lies ahead.
#![no_main]

use fusewire_core::shared::memory::{MemoryStore, Rules};
use fusewire_core::shared::{IoId, OwnedAnswer};
use fusewire_core::*;
use libfuzzer_sys::fuzz_target;

const MS: u64 = 1_000_000;

/// Policies the program picks from; every one has a bulkhead limit of 2 (checked).
const CONFIGS: [&str; 5] = [
    // Pool with a queue, timeouts, N probes, exponential open with jitter.
    r#"{"bulkhead": {"isolation": "pool", "max_concurrent": 2, "max_queue": 3,
        "queue_rejection_threshold": 3, "max_wait_ms": 50, "fallback_max_concurrent": 1},
        "execution": {"timeout_ms": 40},
        "breaker": {"error_percentage": {"request_volume_threshold": 2},
                    "half_open": {"permitted_probes": 2, "success_threshold": 2, "probe_timeout_ms": 30},
                    "open": {"schedule": "exponential", "sleep_window_ms": 20, "max_ms": 200,
                             "jitter_percentage": 50}},
        "keys": {"max_keys": 3, "idle_ms": 1000}}"#,
    // Semaphore, every trip rule, slow start, warm-up, small windows.
    r#"{"bulkhead": {"max_concurrent": 2},
        "breaker": {"consecutive_failures": {"enabled": true, "threshold": 2},
                    "slow_call": {"enabled": true, "duration_threshold_ms": 5,
                                  "rate_threshold_percentage": 50, "request_volume_threshold": 2},
                    "adaptive_throttle": {"enabled": true, "k": 1.5},
                    "open": {"schedule": "ladder", "ladder_ms": [10, 30, 90]},
                    "slow_start": {"ramp_ms": 100, "initial_percentage": 20},
                    "warm_up_ms": 15},
        "metrics": {"rolling_window_ms": 100, "rolling_buckets": 4,
                    "percentile_window_ms": 200, "percentile_buckets": 2},
        "keys": {"max_keys": 2, "idle_ms": 1500}}"#,
    // Pool without a queue (thread-pool rejections), no timeout, opossum's rate rule.
    r#"{"bulkhead": {"isolation": "pool", "max_concurrent": 2, "max_queue": 0},
        "execution": {"timeout_enabled": false},
        "breaker": {"error_percentage": {"request_volume_threshold": 0, "threshold_percentage": 50,
                                         "denominator": "all_calls", "comparison": "above"},
                    "half_open": {"reset_window_on_close": false}},
        "metrics": {"percentiles_enabled": false}}"#,
    // Semaphore, metrics only (never refuses on the breaker).
    r#"{"bulkhead": {"max_concurrent": 2}, "breaker": {"mode": "metrics_only"},
        "keys": {"max_keys": 1, "idle_ms": 1000}}"#,
    // A pinned phase, reached by reconfiguring an open key too (found by review: its
    // wake stayed due for good).
    r#"{"bulkhead": {"max_concurrent": 2}, "breaker": {"mode": "disabled"}}"#,
];
const LIMIT: u32 = 2;
const NAMES: [&str; 5] = ["a", "b", "c", "d", "a"];

/// Reads the program.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn small(&mut self, n: usize) -> usize {
        self.byte().map_or(0, |b| b as usize % n.max(1))
    }
    fn u64(&mut self) -> u64 {
        let mut v = 0u64;
        for _ in 0..8 {
            v = (v << 8) | u64::from(self.byte().unwrap_or(0));
        }
        v
    }
}

/// A store request answered later (async) or held back by the program.
struct Pending {
    worker: usize,
    id: IoId,
    answer: OwnedAnswer,
}

struct World {
    engines: Vec<Engine>,
    policy: Vec<PolicyId>,
    store: MemoryStore,
    asynchronous: bool,
    now: u64,
    /// The latest `now` so far.
    high: u64,
    rand: u64,
    keys: Vec<Vec<KeyId>>,
    permits: Vec<(usize, Permit)>,
    tickets: Vec<(usize, Ticket)>,
    fallbacks: Vec<(usize, FallbackPermit)>,
    pending: Vec<Pending>,
    /// Answers given, kept to be given again (duplicates, stale ids).
    replays: Vec<Pending>,
    /// Stored bytes were damaged or forged answers given (slot ledgers may be lost).
    damaged: bool,
    /// Each worker's clock against `now` (ns; the worker reads `now + skew`).
    skew: Vec<i64>,
    /// Some worker's clock was set more than 1 s away (past the parting that op 3
    /// allows): leases of workers behind look expired to one ahead, and their slots
    /// are taken back (documented: the lease is the clocks' tolerance).
    skewed: bool,
}

impl World {
    /// Worker `w`'s clock.
    fn now_of(&self, w: usize) -> u64 {
        let s = self.skew.get(w).copied().unwrap_or(0);
        if s >= 0 {
            self.now.saturating_add(s as u64)
        } else {
            self.now.saturating_sub(s.unsigned_abs())
        }
    }

    /// The host's loop at `now`: store requests and polling until neither has work.
    fn drive(&mut self, w: usize) {
        let (now, rand) = (self.now_of(w), self.rand);
        let mut rounds = 0;
        loop {
            let Some(e) = self.engines.get_mut(w) else {
                return;
            };
            while let Some(io) = e.poll_io(now, rand) {
                let (id, answer) = (io.id, self.store.exec(&io));
                if self.asynchronous {
                    self.pending.push(Pending {
                        worker: w,
                        id,
                        answer,
                    });
                } else {
                    e.io_done(id, answer.as_answer(), now, rand);
                    self.replays.push(Pending {
                        worker: w,
                        id,
                        answer,
                    });
                }
                rounds += 1;
                assert!(rounds < 10_000, "endless I/O round");
            }
            self.collect(w);
            if !self.engines[w].has_io() {
                break;
            }
        }
        let e = &self.engines[w];
        if let Some(d) = e.next_deadline() {
            assert!(d > now, "a drained host loop left work due at {d} <= {now}");
        }
    }

    fn collect(&mut self, w: usize) {
        let (now, rand) = (self.now_of(w), self.rand);
        let Some(e) = self.engines.get_mut(w) else {
            return;
        };
        let mut n = 0;
        while let Some(ev) = e.poll(now, rand) {
            if trace() {
                eprintln!("  event {ev:?}");
            }
            if let Event::Dequeued { permit, .. } = ev {
                self.permits.push((w, permit));
            }
            n += 1;
            assert!(n < 100_000, "endless poll");
        }
    }

    /// Moves time on, ticking every worker every 50 ms on the way, as Envoy's timer
    /// does (a worker not ticked for `lease_ttl_ms` is taken for dead and its slots
    /// are reclaimed: documented, not checked here).
    fn advance(&mut self, by: u64) {
        let end = self.now.saturating_add(by);
        while self.now < end {
            self.now = self.now.saturating_add(50 * MS).min(end);
            for w in 0..self.engines.len() {
                self.drive(w);
            }
        }
    }

    /// The bulkhead limit per store key: across the process on a sync store (unless
    /// the program damaged the key's bytes: its slot ledger is lost, documented), per
    /// worker on an async one (a worker may decide alone for a while).
    fn check_limit(&self) {
        let mut held: Vec<(&str, u32)> = Vec::new();
        for (e, ks) in self.engines.iter().zip(&self.keys) {
            let mut seen: Vec<KeyId> = Vec::new();
            for &k in ks {
                if seen.contains(&k) {
                    continue;
                }
                seen.push(k);
                let n = e.in_flight(k).unwrap_or(0);
                assert!(n <= LIMIT, "worker holds {n} > {LIMIT}");
                let Some(name) = e.store_key(k) else { continue };
                match held.iter_mut().find(|(s, _)| *s == name) {
                    Some((_, total)) => *total += n,
                    None => held.push((name, n)),
                }
            }
        }
        if !self.asynchronous && !self.damaged && !self.skewed {
            for (name, n) in held {
                assert!(n <= LIMIT, "process holds {n} > {LIMIT} of {name}");
            }
        }
    }
}

/// `FUZZ_TRACE=1`: prints the program's steps and events (to read a crash).
fn trace() -> bool {
    std::env::var_os("FUZZ_TRACE").is_some()
}

fn outcome(b: u8) -> Outcome {
    match b % 5 {
        0 => Outcome::Success,
        1 => Outcome::Failure,
        2 => Outcome::Timeout,
        3 => Outcome::BadRequest,
        _ => Outcome::Cancelled,
    }
}

fuzz_target!(|data: &[u8]| {
    let mut p = Bytes(data);
    let mode = p.small(4);
    let workers = if mode == 0 { 1 } else { 1 + p.small(3) };
    let shared = SharedConfig {
        mode: if mode == 3 {
            config::SyncMode::Async
        } else {
            config::SyncMode::Sync
        },
        sync_ms: match p.small(3) {
            0 if mode != 3 => Some(0),
            1 => Some(20),
            _ => None,
        },
        flush_ms: 10,
        stale_ms: 2_500,
        lease_ttl_ms: 3_000,
        heartbeat_ms: 1_000,
        ..SharedConfig::default()
    };
    let rules = [Rules::Envoy, Rules::Kong, Rules::Script][p.small(3)];
    let first = p.small(CONFIGS.len());
    let mut engines = Vec::new();
    let mut policy = Vec::new();
    for w in 0..workers {
        let mut e = if mode == 0 {
            Engine::local()
        } else {
            Engine::shared(shared.clone(), 0x9E37 * (w as u64 + 1)).expect("valid shared config")
        };
        let cfg = Config::from_json(CONFIGS[first]).expect("valid config");
        policy.push(e.add_policy("p", cfg).expect("valid policy"));
        engines.push(e);
    }
    let mut world = World {
        engines,
        policy,
        store: MemoryStore::new(if mode == 3 { Rules::Script } else { rules }),
        asynchronous: mode == 3,
        now: 1_000_000 * MS,
        high: 1_000_000 * MS,
        rand: 0,
        keys: vec![Vec::new(); workers],
        permits: Vec::new(),
        tickets: Vec::new(),
        fallbacks: Vec::new(),
        pending: Vec::new(),
        replays: Vec::new(),
        damaged: false,
        skew: vec![0; workers],
        skewed: false,
    };
    let mut steps = 0;
    while let Some(op) = p.byte() {
        steps += 1;
        if steps > 400 {
            break;
        }
        let w = p.small(workers);
        world.rand = world
            .rand
            .wrapping_mul(6364136223846793005)
            .wrapping_add(u64::from(op));
        let (now, rand) = (world.now_of(w), world.rand);
        if trace() {
            eprintln!("step {steps}: op {} worker {w} now {}", op % 20, now / MS);
        }
        match op % 20 {
            // Time: forward by small or large steps, now and then backwards.
            0 | 1 => world.advance((p.small(250) as u64) * MS),
            2 => world.advance(p.u64() % (10_000 * MS)),
            // Back by at most 1 s below the latest time: each engine keeps its clock
            // monotonic, so workers' clocks part by up to that much (below the
            // lease, as workers of one process, which share a clock, never do).
            3 if p.small(4) != 0 => {
                world.now = world
                    .now
                    .saturating_sub((p.small(50) as u64) * MS)
                    .max(world.high - 1_000 * MS)
            }
            // One worker's clock set apart from the others', from 0.5 s (within the
            // lease) to a year and to the end of time, either way.
            3 => {
                const YEAR: i64 = 365 * 86_400_000 * MS as i64;
                let by = [
                    500 * MS as i64,
                    11_000 * MS as i64,
                    3_600_000 * MS as i64,
                    YEAR,
                    i64::MAX,
                    0,
                ][p.small(6)];
                let by = if p.small(2) == 0 { by } else { -by };
                world.skew[w] = by;
                world.skewed |= by.unsigned_abs() > 1_000 * MS;
            }
            // Keys (new names past max_keys go to the overflow key).
            4 => {
                for (i, name) in NAMES.iter().enumerate() {
                    let k = world.engines[w].key(world.policy[w], name, now);
                    if trace() {
                        let e = &world.engines[w];
                        eprintln!(
                            "  key {name:?}: {k:?} -> {:?}",
                            k.and_then(|k| e.store_key(k))
                        );
                    }
                    if let Some(k) = k {
                        let ks = &mut world.keys[w];
                        if ks.len() <= i {
                            ks.resize(i + 1, k);
                        }
                        ks[i] = k;
                    }
                }
            }
            // Calls.
            5..=7 => {
                let i = p.small(NAMES.len());
                if let Some(&k) = world.keys[w].get(i) {
                    world.engines[w].prepare(k, now);
                    world.drive(w);
                    let started = world.engines[w].start(k, now, rand);
                    if trace() {
                        let e = &world.engines[w];
                        eprintln!(
                            "  start {:?} on {:?}: {started:?}, in flight {:?}, slots {:?}",
                            NAMES[i],
                            e.store_key(k),
                            e.in_flight(k),
                            e.slots_held(k)
                        );
                    }
                    match started {
                        Start::Running(pm) => world.permits.push((w, pm)),
                        Start::Queued(t) => world.tickets.push((w, t)),
                        Start::Refused(_) => {}
                    }
                }
            }
            8 | 9 => {
                if !world.permits.is_empty() {
                    let (pw, pm) = world.permits.swap_remove(p.small(world.permits.len()));
                    let o = outcome(p.byte().unwrap_or(0));
                    let now = world.now_of(pw);
                    if let Some(e) = world.engines.get_mut(pw) {
                        let _ = e.complete(pm, o, now, rand);
                    }
                }
            }
            10 => {
                if !world.permits.is_empty() {
                    let (pw, pm) = world.permits.swap_remove(p.small(world.permits.len()));
                    let now = world.now_of(pw);
                    if let Some(e) = world.engines.get_mut(pw) {
                        if p.byte().unwrap_or(0) % 2 == 0 {
                            e.stop_timer(&pm);
                            e.restart_timer(&pm, now);
                        }
                        let _ = e.cancel(pm, now, rand);
                    }
                }
            }
            11 => {
                if !world.tickets.is_empty() {
                    let (tw, t) = world.tickets.swap_remove(p.small(world.tickets.len()));
                    let now = world.now_of(tw);
                    if let Some(e) = world.engines.get_mut(tw) {
                        let _ = e.cancel_ticket(t, now);
                    }
                }
            }
            // Forged or replayed integers from an FFI host.
            12 => {
                let raw = match p.small(3) {
                    0 => p.u64(),
                    1 => world.permits.first().map_or(0, |(_, pm)| pm.id().to_raw()),
                    _ => world
                        .tickets
                        .first()
                        .map_or(7, |(_, t)| t.id().to_raw() ^ 1),
                };
                let e = &mut world.engines[w];
                let _ = e.complete(Permit::from_raw(raw), outcome(op), now, rand);
                let _ = e.cancel_ticket(Ticket::from_raw(raw.wrapping_add(1)), now);
                let _ = e.snapshot(KeyId::from_raw(raw), now);
                let _ = e.in_flight(KeyId::from_raw(raw));
            }
            // Polling, the host's timer.
            13 => world.drive(w),
            // The store: deliver, drop, duplicate, corrupt.
            14 => {
                if !world.pending.is_empty() {
                    let Pending { worker, id, answer } =
                        world.pending.remove(p.small(world.pending.len()));
                    let answer = match p.small(6) {
                        0 => OwnedAnswer::Failed(p.byte().unwrap_or(0).into()),
                        1 => OwnedAnswer::Found(
                            p.0.get(..p.small(64)).unwrap_or(&[]).to_vec(),
                            p.u64(),
                        ),
                        2 => OwnedAnswer::Conflict(None, p.byte().unwrap_or(0) % 2 == 0),
                        _ => answer,
                    };
                    let now = world.now_of(worker);
                    if let Some(e) = world.engines.get_mut(worker) {
                        e.io_done(id, answer.as_answer(), now, rand);
                    }
                    world.replays.push(Pending { worker, id, answer });
                    world.drive(worker);
                }
            }
            15 => {
                if !world.pending.is_empty() {
                    world.pending.remove(p.small(world.pending.len())); // lost
                }
                if !world.replays.is_empty() {
                    let r = &world.replays[p.small(world.replays.len())];
                    let now = world.now_of(r.worker);
                    if let Some(e) = world.engines.get_mut(r.worker) {
                        e.io_done(r.id, r.answer.as_answer(), now, rand);
                    }
                }
            }
            16 => {
                let keys: Vec<String> = world.store.keys().iter().map(|s| s.to_string()).collect();
                if !keys.is_empty() {
                    let key = &keys[p.small(keys.len())];
                    let mut bytes = world.store.raw_get(key).unwrap_or(&[]).to_vec();
                    if !bytes.is_empty() {
                        let at = p.small(bytes.len());
                        bytes[at] ^= p.byte().unwrap_or(1) | 1;
                        if p.small(2) == 0 {
                            bytes.truncate(p.small(bytes.len() + 1));
                        }
                    }
                    world.store.raw_set(key, &bytes);
                    world.damaged = true;
                }
            }
            // Operators and hosts.
            17 => {
                if let Some(&k) = world.keys[w].get(p.small(NAMES.len())) {
                    let to = [Phase::Open, Phase::Closed, Phase::HalfOpen][p.small(3)];
                    world.engines[w].force(k, to, now, rand);
                }
            }
            18 => {
                let cfg = Config::from_json(CONFIGS[p.small(CONFIGS.len())]).expect("valid");
                let pid = world.policy[w];
                world.engines[w].set_policy(pid, cfg).expect("valid");
            }
            _ => {
                if let Some(&k) = world.keys[w].get(p.small(NAMES.len())) {
                    let e = &mut world.engines[w];
                    match p.small(3) {
                        0 => {
                            if let Some(f) = e.start_fallback(k, now) {
                                world.fallbacks.push((w, f));
                            }
                        }
                        1 => {
                            if !world.fallbacks.is_empty() {
                                let (fw, f) =
                                    world.fallbacks.swap_remove(p.small(world.fallbacks.len()));
                                let now = world.now_of(fw);
                                if let Some(e) = world.engines.get_mut(fw) {
                                    e.finish_fallback(f, op % 2 == 0, now);
                                }
                            }
                        }
                        _ => e.record(k, EventKind::Collapsed, now),
                    }
                    let _ = world.engines[w].snapshot(k, now);
                }
            }
        }
        world.high = world.high.max(world.now);
        world.drive(w);
        world.check_limit();
    }
});
