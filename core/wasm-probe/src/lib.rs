//! Exercises the core's whole API so nothing is dead-code-eliminated before the
//! import section is inspected: the engine on local and on shared state (driven
//! through the in-memory store), the breaker, windows and the codec, the request
//! cache and the collapser.

use fusewire_core::cache::{self, CacheEvent, Lead, Lookup, Wait};
use fusewire_core::collapser::{self, Add, BatchId};
use fusewire_core::shared::memory::{MemoryStore, Rules};
use fusewire_core::shared::codec::{self, Kind, Reader, Wire};
use fusewire_core::shared::KeyState;
use fusewire_core::{
    BreakerState, CircuitBreaker, Collapser, Config, Engine, EventKind, Outcome, RequestCache,
    SharedConfig, Start, Window,
};

const CONFIG: &str = r#"{"breaker": {"open": {"schedule": "exponential", "jitter_percentage": 10},
  "adaptive_throttle": {"enabled": true}, "slow_start": {"ramp_ms": 1000}},
  "bulkhead": {"isolation": "pool", "max_concurrent": 2, "max_queue": 2},
  "cache": {"max_entries": 16, "cache_failures": true, "on_leader_failure": "promote"},
  "collapser": {"window_ms": 5, "max_batch_size": 4}}"#;

/// The request cache: leads, followers, fills, failures, cancels, scopes, eviction.
fn run_cache(config: &Config, now: u64, rand: u64) -> u64 {
    let Some(cfg) = config.cache.clone() else {
        return 0;
    };
    let Ok(mut c) = RequestCache::new(cfg, rand) else {
        return 0;
    };
    let scope = c.open_scope().unwrap_or(cache::ScopeId::GLOBAL);
    let mut sum = 0u64;
    let mut leads: [Option<Lead>; 4] = [None, None, None, None];
    let mut waits: [Option<Wait>; 4] = [None, None, None, None];
    for i in 0..64u64 {
        let s = if i % 3 == 0 {
            scope
        } else {
            cache::ScopeId::GLOBAL
        };
        let key = [(i % 24) as u8, (rand >> (i % 56)) as u8];
        match c.lookup(s, &key, now + i) {
            Lookup::Hit { entry, .. } => sum += entry.to_raw() & 0xff,
            Lookup::Lead(l) => {
                if let Some(old) = leads[(i % 4) as usize].replace(l) {
                    let r = if i % 5 == 0 {
                        c.fail(old, i, now + i)
                    } else {
                        c.fill(old, i * 8, now + i)
                    };
                    sum += r.map_or(0, |s| u64::from(s.followers));
                }
            }
            Lookup::Wait(w) => {
                if let Some(old) = waits[(i % 4) as usize].replace(w) {
                    sum += u64::from(c.cancel_wait(old, now + i));
                }
            }
            Lookup::Bypass(_) => sum += 1,
        }
        while let Some(ev) = c.poll(now + i) {
            sum += match ev {
                CacheEvent::Promoted { lead } => u64::from(c.cancel_lead(lead, now + i)),
                CacheEvent::Removed { entry, .. } => entry.to_raw() & 1,
                _ => 1,
            };
        }
    }
    let _ = c.invalidate(cache::ScopeId::GLOBAL, &[1, 0], now);
    let _ = c.close_scope(scope, now + 100);
    c.clear(cache::ScopeId::GLOBAL, now + 100);
    while c.poll(now + 20_000_000_000).is_some() {
        sum += 1;
    }
    sum + c.stats().hits + c.memory_bytes() as u64 + c.next_deadline().unwrap_or(0)
}

/// The collapser: adds, cancels, window and full flushes, per-item results, scopes.
fn run_collapser(config: &Config, now: u64, rand: u64) -> u64 {
    let Some(cfg) = config.collapser.clone() else {
        return 0;
    };
    let Ok(mut c) = Collapser::new(cfg, rand) else {
        return 0;
    };
    let scope = c.open_scope().unwrap_or(collapser::ScopeId::GLOBAL);
    let mut sum = 0u64;
    let mut running: Option<BatchId> = None;
    for i in 0..64u64 {
        let s = if i % 4 == 0 {
            scope
        } else {
            collapser::ScopeId::GLOBAL
        };
        match c.add(s, &[(i % 3) as u8], now + i * 1_000_000) {
            Add::Queued(item) if i % 7 == 0 => sum += u64::from(c.cancel(item)),
            Add::Queued(item) | Add::Full(item) => sum += item.to_raw() & 0xff,
            Add::Refused(_) => sum += 1,
        }
        while let Some(b) = c.poll(now + i * 1_000_000) {
            sum += c.items(b).len() as u64 + c.batch_key(b).map_or(0, |k| k.len() as u64);
            let _ = c.complete_item(b, 0, true);
            if let Some(prev) = running.replace(b) {
                sum += c.fail_batch(prev).len() as u64;
            }
        }
    }
    sum += c.close_scope(scope, now).len() as u64;
    sum + c.stats().added + c.memory_bytes() as u64 + c.next_deadline().unwrap_or(0)
}

fn drive(e: &mut Engine, store: &mut MemoryStore, now: u64, rand: u64) -> u64 {
    let mut n = 0;
    while let Some(io) = e.poll_io(now, rand) {
        let (id, a) = (io.id, store.exec(&io));
        e.io_done(id, a.as_answer(), now, rand);
        n += 1;
    }
    while e.poll(now, rand).is_some() {
        n += 1;
    }
    n
}

fn run(e: &mut Engine, store: &mut MemoryStore, now: u64, rand: u64) -> u64 {
    let Some(p) = e.policy("p") else {
        return 0;
    };
    let mut sum = 0;
    for i in 0..64u64 {
        let Some(k) = e.key(p, if i % 2 == 0 { "a" } else { "b" }, now + i) else {
            continue;
        };
        e.prepare(k, now + i);
        sum += drive(e, store, now + i, rand);
        if let Start::Running(permit) = e.start(k, now + i, rand ^ i) {
            let outcome = if i % 3 == 0 {
                Outcome::Failure
            } else {
                Outcome::Success
            };
            let _ = e.complete(permit, outcome, now + i * 1_000, rand);
        }
        if let Some(s) = e.snapshot(k, now + i) {
            sum += s.health.total + s.latency_ns.p99;
        }
        if let Some(f) = e.start_fallback(k, now) {
            e.finish_fallback(f, true, now);
        }
        e.record(k, EventKind::Collapsed, now);
    }
    sum + drive(e, store, now + 10_000_000_000, rand) + e.next_deadline().unwrap_or(0)
}

/// Runs a small scenario; returns a checksum so the work is observable.
#[no_mangle]
pub extern "C" fn fusewire_probe(now: u64, rand: u64) -> u64 {
    let Ok(config) = Config::from_json(CONFIG) else {
        return u64::MAX;
    };
    let mut sum = 0u64;
    let mut cb = CircuitBreaker::new(config.clone(), now);
    for i in 0..64u64 {
        if let Ok(p) = cb.try_acquire(now + i, rand ^ i) {
            let outcome = if i % 3 == 0 {
                Outcome::Failure
            } else {
                Outcome::Success
            };
            if cb.record(p, outcome, now + i * 1_000, rand).is_some() {
                sum += 1;
            }
        }
    }
    let _ = cb.poll(now + 10_000_000_000, rand);
    sum += cb.health(now).total + cb.percentiles_ns(now).p99;
    let mut w = Window::new(&config.metrics, now);
    w.record_call(EventKind::Success, 5, false, 1, now);
    w.merge(cb.window());
    let mut bytes = Vec::new();
    cb.state().put(&mut bytes);
    if let Some(s) = BreakerState::take(&mut Reader::new(&bytes)) {
        sum += u64::from(s.generation());
    }
    let state = KeyState::new("k", &config, now);
    let stored = codec::encode(Kind::KeyState, &state);
    if let Ok(s) = codec::decode::<KeyState>(Kind::KeyState, &stored) {
        sum += s.touched_at;
    }
    sum += run_cache(&config, now, rand) + run_collapser(&config, now, rand);
    let mut store = MemoryStore::new(Rules::Envoy);
    let mut local = Engine::local();
    if local.add_policy("p", config.clone()).is_ok() {
        sum += run(&mut local, &mut store, now, rand);
    }
    if let Ok(mut shared) = Engine::shared(SharedConfig::default(), rand) {
        if shared.add_policy("p", config).is_ok() {
            sum += run(&mut shared, &mut store, now, rand);
        }
    }
    sum + bytes.len() as u64
}
