//! Exercises the core's whole API so nothing is dead-code-eliminated before the
//! import section is inspected: the engine on local and on shared state (driven
//! through the in-memory store), the breaker, windows and the codec.

use fusewire_core::shared::memory::{MemoryStore, Rules};
use fusewire_core::{
    BreakerState, CircuitBreaker, Config, Engine, EventKind, Outcome, SharedConfig, Start, Window,
};

const CONFIG: &str = r#"{"breaker": {"open": {"schedule": "exponential", "jitter_percentage": 10},
  "adaptive_throttle": {"enabled": true}, "slow_start": {"ramp_ms": 1000}},
  "bulkhead": {"isolation": "pool", "max_concurrent": 2, "max_queue": 2}}"#;

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
            let outcome = if i % 3 == 0 { Outcome::Failure } else { Outcome::Success };
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
            let outcome = if i % 3 == 0 { Outcome::Failure } else { Outcome::Success };
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
    let bytes = postcard::to_allocvec(&(cb.state(), &w)).unwrap_or_default();
    if let Ok((s, _)) = postcard::from_bytes::<(BreakerState, Window)>(&bytes) {
        sum += u64::from(s.generation());
    }
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
