//! JSON bytes → Config → validate: never panics; a valid config round-trips
//! through JSON unchanged and can drive a breaker, a bulkhead and the registry.
#![no_main]

use fusewire_core::registry::{Registry, Start};
use fusewire_core::{CircuitBreaker, Config, Outcome};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(config) = Config::from_json_bytes(data) else {
        return;
    };
    assert!(config.validate().is_ok());
    let again = Config::from_json(&config.to_json()).expect("a valid config round-trips");
    assert_eq!(again, config);

    // Any valid config drives the engine without panicking.
    let mut cb = CircuitBreaker::new(config.clone(), u64::MAX - 1_000);
    for i in 0..50u64 {
        let now = u64::MAX - 1_000 + i;
        if let Ok(p) = cb.try_acquire(now, i.wrapping_mul(0x9e37_79b9_7f4a_7c15)) {
            cb.record(p, if i % 2 == 0 { Outcome::Failure } else { Outcome::Timeout }, now, i);
        }
        let _ = cb.poll(now, i);
    }
    let _ = cb.percentiles(u64::MAX);
    cb.reconfigure(Config::default());
    let mut r = Registry::new();
    if let Ok(id) = r.register("k", "g", None, config, 0) {
        for i in 0..20u64 {
            if let Start::Running(c) = r.start(id, i, i) {
                let _ = r.complete(c, Outcome::Success, i + 1, i);
            }
        }
        while r.poll(u64::MAX, 7).is_some() {}
    }
});
