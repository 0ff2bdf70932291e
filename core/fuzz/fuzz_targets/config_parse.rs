//! JSON bytes → Config → validate: never panics; a valid config round-trips
//! through JSON unchanged and can drive a breaker and the engine (local and shared).
#![no_main]

use fusewire_core::shared::memory::{MemoryStore, Rules};
use fusewire_core::{CircuitBreaker, Config, Engine, Outcome, SharedConfig, Start};
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
    let _ = cb.percentiles_ns(u64::MAX);
    cb.reconfigure(Config::default());
    let mut store = MemoryStore::new(Rules::Kong);
    for mut e in [Engine::local(), Engine::shared(SharedConfig::default(), 3).expect("valid")] {
        let p = e.add_policy("p", config.clone()).expect("validated");
        for i in 0..20u64 {
            let Some(k) = e.key(p, if i % 3 == 0 { "x" } else { "y" }, i) else { continue };
            e.prepare(k, i);
            while let Some(io) = e.poll_io(i, i) {
                let (id, a) = (io.id, store.exec(&io));
                e.io_done(id, a.as_answer(), i, i);
            }
            match e.start(k, i, i) {
                Start::Running(c) => {
                    let _ = e.complete(c, Outcome::Failure, i + 1, i);
                }
                Start::Queued(t) => {
                    let _ = e.cancel_ticket(t, i);
                }
                Start::Refused(_) => {}
            }
        }
        while e.poll(u64::MAX / 2, 7).is_some() {}
        let _ = e.set_policy(p, Config::default());
    }
});
