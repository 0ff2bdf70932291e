//! Exercises the core's whole API so nothing is dead-code-eliminated before the
//! import section is inspected.

use fusewire_core::bulkhead::{Acquire, Bulkhead};
use fusewire_core::registry::{Registry, Start};
use fusewire_core::{BreakerState, CircuitBreaker, Config, EventKind, Outcome, Window};

const CONFIG: &str = r#"{"breaker": {"open": {"schedule": "exponential", "jitter_percentage": 10},
  "adaptive_throttle": {"enabled": true}, "slow_start": {"ramp_ms": 1000}}}"#;

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
    sum += cb.health(now).total + cb.percentiles(now).p99;
    let mut w = Window::new(&config.metrics, now);
    w.record_execution(EventKind::Success, 5, false, now);
    w.merge(cb.window());
    let bytes = postcard::to_allocvec(&(cb.state(), &w)).unwrap_or_default();
    if let Ok((s, _)) = postcard::from_bytes::<(BreakerState, Window)>(&bytes) {
        sum += u64::from(s.generation());
    }
    let mut pool = Bulkhead::new(config.bulkhead.clone());
    if let Acquire::Granted(p) = pool.try_acquire(now) {
        let _ = pool.release(p, now);
    }
    let mut r = Registry::new();
    if let Ok(id) = r.register("k", "g", None, config, now) {
        if let Start::Running(c) = r.start(id, now, rand) {
            let _ = r.complete(c, Outcome::Timeout, now + 1, rand);
        }
        while r.poll(now + 5_000_000_000, rand).is_some() {}
        sum += r.next_deadline().unwrap_or(0);
    }
    sum + bytes.len() as u64
}
