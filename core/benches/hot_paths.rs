//! Hot-path benchmarks, with the `recloser` and `failsafe` crates doing the
//! equivalent work in the same run. Also prints memory per key.
//!
//! Run: `cargo bench -p fusewire-core --bench hot_paths`

use criterion::Criterion;
use fusewire_core::shared::memory::{MemoryStore, Rules};
use fusewire_core::{CircuitBreaker, Config, Engine, Outcome, SharedConfig, Start};
use std::hint::black_box;
use std::time::Duration;

const MS: u64 = 1_000_000;

fn closed_breaker() -> CircuitBreaker {
    CircuitBreaker::new(Config::default(), 0)
}

fn open_breaker() -> CircuitBreaker {
    let mut cb = closed_breaker();
    for _ in 0..20 {
        let p = cb.try_acquire(0, 0).expect("closed");
        cb.record(p, Outcome::Failure, 0, 0);
    }
    assert!(cb.try_acquire(0, 0).is_err());
    cb
}

fn recloser_breaker() -> recloser::Recloser {
    recloser::Recloser::custom()
        .error_rate(0.5)
        .closed_len(20)
        .half_open_len(1)
        .open_wait(Duration::from_secs(3600))
        .build()
}

fn closed_path(c: &mut Criterion) {
    let mut g = c.benchmark_group("closed_admit_record");
    g.bench_function("fusewire", |b| {
        let mut cb = closed_breaker();
        let mut now = 0u64;
        b.iter(|| {
            // 1 µs of simulated time per call: buckets roll as in production.
            now += 1_000;
            let p = cb.try_acquire(black_box(now), now).expect("closed");
            black_box(cb.record(p, Outcome::Success, now + 20 * MS, now));
        })
    });
    g.bench_function("fusewire_with_clock", |b| {
        // What a native host pays: one monotonic clock read per call, as the peers
        // read the clock themselves.
        let mut cb = closed_breaker();
        let origin = std::time::Instant::now();
        b.iter(|| {
            let now = origin.elapsed().as_nanos() as u64;
            let p = cb.try_acquire(now, now).expect("closed");
            black_box(cb.record(p, Outcome::Success, now, now));
        })
    });
    g.bench_function("recloser", |b| {
        let r = recloser_breaker();
        b.iter(|| black_box(r.call(|| Ok::<u32, ()>(black_box(1)))))
    });
    g.bench_function("failsafe", |b| {
        let cb = failsafe::Config::new().build();
        b.iter(|| {
            use failsafe::CircuitBreaker as _;
            black_box(cb.call(|| Ok::<u32, ()>(black_box(1))))
        })
    });
    g.finish();
}

/// The whole flow (breaker + bulkhead + deadline + key table) per call.
fn engine_path(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine_start_complete");
    let cfg = Config::from_json(r#"{"bulkhead": {"max_concurrent": 64}}"#).expect("valid");
    g.bench_function("local", |b| {
        let mut e = Engine::local();
        let p = e.add_policy("p", cfg.clone()).expect("valid");
        let k = e.key(p, "k", 0).expect("policy");
        let mut now = 0u64;
        b.iter(|| {
            now += 1_000;
            let Start::Running(permit) = e.start(black_box(k), now, now) else {
                panic!("admitted")
            };
            black_box(e.complete(permit, Outcome::Success, now + 20 * MS, now));
        })
    });
    g.bench_function("local_with_clock", |b| {
        let mut e = Engine::local();
        let p = e.add_policy("p", cfg.clone()).expect("valid");
        let k = e.key(p, "k", 0).expect("policy");
        let origin = std::time::Instant::now();
        b.iter(|| {
            let now = origin.elapsed().as_nanos() as u64;
            let Start::Running(permit) = e.start(black_box(k), now, now) else {
                panic!("admitted")
            };
            black_box(e.complete(permit, Outcome::Success, now, now));
        })
    });
    g.bench_function("shared_sync_memory_store", |b| {
        // A sync host: prepare (one read), start, complete, with the in-memory store
        // standing in for Envoy shared data (its copy costs are the host's).
        let mut e = Engine::shared(SharedConfig::default(), 1).expect("valid");
        let p = e.add_policy("p", cfg.clone()).expect("valid");
        let mut store = MemoryStore::new(Rules::Envoy);
        let k = e.key(p, "k", 0).expect("policy");
        let mut now = 0u64;
        let mut drive = |e: &mut Engine, now: u64| {
            while let Some(io) = e.poll_io(now, now) {
                let (id, a) = (io.id, store.exec(&io));
                e.io_done(id, a.as_answer(), now, now);
            }
        };
        b.iter(|| {
            now += 1_000;
            e.prepare(k, now);
            drive(&mut e, now);
            let Start::Running(permit) = e.start(black_box(k), now, now) else {
                panic!("admitted")
            };
            black_box(e.complete(permit, Outcome::Success, now + 20 * MS, now));
            drive(&mut e, now);
            while e.poll(now, now).is_some() {}
        })
    });
    g.finish();
}

fn open_path(c: &mut Criterion) {
    let mut g = c.benchmark_group("open_reject");
    g.bench_function("fusewire", |b| {
        let mut cb = open_breaker();
        let mut now = 0u64;
        b.iter(|| {
            now += 1_000;
            black_box(cb.try_acquire(black_box(now), now).is_err())
        })
    });
    g.bench_function("recloser", |b| {
        let r = recloser_breaker();
        for _ in 0..40 {
            let _ = r.call(|| Err::<u32, ()>(()));
        }
        assert!(matches!(
            r.call(|| Ok::<u32, ()>(1)),
            Err(recloser::Error::Rejected)
        ));
        b.iter(|| black_box(r.call(|| Ok::<u32, ()>(black_box(1)))))
    });
    g.bench_function("failsafe", |b| {
        use failsafe::CircuitBreaker as _;
        let cb = failsafe::Config::new().build();
        for _ in 0..40 {
            let _ = cb.call(|| Err::<u32, ()>(()));
        }
        assert!(matches!(
            cb.call(|| Ok::<u32, ()>(1)),
            Err(failsafe::Error::Rejected)
        ));
        b.iter(|| black_box(cb.call(|| Ok::<u32, ()>(black_box(1)))))
    });
    g.finish();
}

fn filled_breaker() -> CircuitBreaker {
    let mut cb = closed_breaker();
    let mut x = 1u64;
    for i in 0..60_000u64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let now = i * MS;
        let p = cb.try_acquire(now, x).expect("closed");
        cb.record(p, Outcome::Success, now + (1 + (x >> 40) % 200) * MS, x);
    }
    cb
}

fn queries(c: &mut Criterion) {
    let mut g = c.benchmark_group("queries");
    g.bench_function("health_snapshot", |b| {
        let cb = filled_breaker();
        let now = 60_000 * MS;
        b.iter(|| black_box(cb.health(black_box(now))))
    });
    g.bench_function("percentiles", |b| {
        let cb = filled_breaker();
        let now = 60_000 * MS;
        b.iter(|| black_box(cb.percentiles_ns(black_box(now))))
    });
    g.finish();
}

fn main() {
    let cb = filled_breaker();
    println!(
        "memory per key (breaker state + window + histograms): {} bytes (target <= 4096)",
        cb.memory_bytes()
    );
    println!(
        "  breaker state {} B, window {} B",
        std::mem::size_of::<fusewire_core::BreakerState>(),
        cb.window().memory_bytes()
    );
    let mut c = Criterion::default().configure_from_args();
    closed_path(&mut c);
    open_path(&mut c);
    engine_path(&mut c);
    queries(&mut c);
    c.final_summary();
}
