//! Hot-path benchmarks, with the `recloser` and `failsafe` crates doing the
//! equivalent work in the same run; the request cache and the collapser. Also prints
//! memory per key and the cache index memory for 1 000 000 keys under a 10 000 limit.
//!
//! Run: `cargo bench -p fusewire-core --bench hot_paths`

use criterion::Criterion;
use fusewire_core::cache::{Lookup, ScopeId};
use fusewire_core::collapser::{self, Add};
use fusewire_core::shared::memory::{MemoryStore, Rules};
use fusewire_core::{
    CacheConfig, CircuitBreaker, Collapser, CollapserConfig, Config, Engine, Outcome, RequestCache,
    SharedConfig, Start,
};
use std::hint::black_box;
use std::time::Duration;

const MS: u64 = 1_000_000;

fn closed_breaker() -> CircuitBreaker {
    CircuitBreaker::new(Config::default(), 0)
}

/// Without latency histograms (`metrics.percentiles_enabled: false`): what recloser
/// and failsafe keep (they have no percentiles).
fn closed_breaker_counts_only() -> CircuitBreaker {
    let mut config = Config::default();
    config.metrics.percentiles_enabled = false;
    CircuitBreaker::new(config, 0)
}

/// Open for an hour, as recloser's below: the measurement stays on the open path (with
/// Hystrix's 5 s it went half-open after 5 M iterations: found by review).
fn open_breaker() -> CircuitBreaker {
    let mut config = Config::default();
    config.breaker.open.sleep_window_ms = 3_600_000;
    let mut cb = CircuitBreaker::new(config, 0);
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
    for (name, make) in [
        ("fusewire", closed_breaker as fn() -> CircuitBreaker),
        ("fusewire_no_percentiles", closed_breaker_counts_only),
    ] {
        g.bench_function(name, |b| {
            let mut cb = make();
            let mut now = 0u64;
            // 1 µs of simulated time per call: buckets roll as in production.
            b.iter(|| closed_call(&mut cb, &mut now))
        });
    }
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
        // A sync host: prepare (a read every sync_ms), start, complete, with the in-memory store
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
            // 1 ns a call: billions of calls stay inside the hour.
            now += 1;
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

/// A 24-byte key (think `GET host/path?id=N`), distinct per `i`.
fn cache_key(i: u64) -> [u8; 24] {
    let mut k = *b"GET /users?id=\0\0\0\0\0\0\0\0\0\0";
    k[14..22].copy_from_slice(&i.to_le_bytes());
    k
}

fn cache_config() -> CacheConfig {
    CacheConfig {
        max_entries: 10_000,
        ttl_ms: 0,
        ..CacheConfig::default()
    }
}

/// Lead + fill of a new key, draining the events (evictions at the bound).
fn cache_insert(c: &mut RequestCache, i: u64) {
    if let Lookup::Lead(l) = c.lookup(ScopeId::GLOBAL, &cache_key(i), i) {
        black_box(c.fill(l, 256, i));
    }
    while let Some(ev) = c.poll(i) {
        black_box(ev);
    }
}

fn cache(c: &mut Criterion) {
    let mut g = c.benchmark_group("cache");
    g.bench_function("lookup_hit", |b| {
        let mut cache = RequestCache::new(cache_config(), 7).expect("valid");
        let keys: Vec<[u8; 24]> = (0..10_000).map(cache_key).collect();
        for i in 0..10_000 {
            cache_insert(&mut cache, i);
        }
        // Cycles through all 10 000 keys: the index (~2 MB) does not fit in L1/L2.
        let mut i = 0usize;
        b.iter(|| {
            i += 1;
            if i == keys.len() {
                i = 0;
            }
            black_box(cache.lookup(ScopeId::GLOBAL, black_box(&keys[i]), 0))
        })
    });
    g.bench_function("lookup_hit_one_hot_key", |b| {
        // The code path alone: the same entry, in cache.
        let mut cache = RequestCache::new(cache_config(), 7).expect("valid");
        for i in 0..10_000 {
            cache_insert(&mut cache, i);
        }
        let key = cache_key(42);
        b.iter(|| black_box(cache.lookup(ScopeId::GLOBAL, black_box(&key), 0)))
    });
    g.bench_function("lookup_miss_insert_evict", |b| {
        // At the 10 000-entry bound: every insert evicts one entry (SIEVE) and
        // reports it.
        let mut cache = RequestCache::new(cache_config(), 7).expect("valid");
        let mut i = 0u64;
        while i < 20_000 {
            cache_insert(&mut cache, i);
            i += 1;
        }
        b.iter(|| {
            i += 1;
            cache_insert(&mut cache, i);
        })
    });
    g.bench_function("dedup_leader_plus_9_followers", |b| {
        // One flight shared by ten callers: a lead, nine waits, a fill, nine Ready
        // events, then a TTL-free entry dropped by invalidate (per iteration).
        let mut cache = RequestCache::new(cache_config(), 7).expect("valid");
        let key = cache_key(1);
        b.iter(|| {
            let Lookup::Lead(l) = cache.lookup(ScopeId::GLOBAL, &key, 0) else {
                panic!("lead")
            };
            for _ in 0..9 {
                let _ = black_box(cache.lookup(ScopeId::GLOBAL, &key, 0));
            }
            black_box(cache.fill(l, 256, 0));
            cache.invalidate(ScopeId::GLOBAL, &key, 0);
            while let Some(ev) = cache.poll(0) {
                black_box(ev);
            }
        })
    });
    g.finish();
}

fn collapser(c: &mut Criterion) {
    let mut g = c.benchmark_group("collapser");
    for size in [10u32, 100] {
        g.bench_function(format!("add_flush_complete_per_item_batch_{size}"), |b| {
            // One iteration = one item: add it; when its batch is full, poll the batch
            // and map every result back (amortised per item).
            let cfg = CollapserConfig {
                max_batch_size: size,
                ..CollapserConfig::default()
            };
            let mut col = Collapser::new(cfg, 7).expect("valid");
            let mut now = 0u64;
            b.iter(|| {
                now += 1_000;
                if let Add::Full(_) = col.add(collapser::ScopeId::GLOBAL, b"GetUsers", now) {
                    while let Some(batch) = col.poll(now) {
                        for i in 0..col.items(batch).len() as u32 {
                            black_box(col.complete_item(batch, i, true));
                        }
                    }
                }
            })
        });
    }
    g.finish();
}

fn cache_memory() {
    let mut cache = RequestCache::new(cache_config(), 7).expect("valid");
    let mut peak = 0;
    for i in 0..1_000_000u64 {
        cache_insert(&mut cache, i);
        if i % 65_536 == 0 {
            peak = cache.memory_bytes().max(peak);
        }
    }
    let st = cache.stats();
    println!(
        "cache: 1 000 000 distinct 24-byte keys under max_entries 10 000: {} entries, index memory {} bytes peak {} ({} B/entry); host payload bytes counted {}",
        st.entries,
        cache.memory_bytes(),
        peak.max(cache.memory_bytes()),
        cache.memory_bytes() / st.entries.max(1) as usize,
        st.bytes
    );
}

/// One closed-path call (admit + record a success), 1 µs of simulated time after the last.
#[inline(always)]
fn closed_call(cb: &mut CircuitBreaker, now: &mut u64) {
    *now += 1_000;
    let p = cb.try_acquire(black_box(*now), *now).expect("closed");
    black_box(cb.record(p, Outcome::Success, *now + 20 * MS, *now));
}

/// Nanoseconds per closed-path call over `n` calls.
fn closed_round(cb: &mut CircuitBreaker, now: &mut u64, n: u32) -> f64 {
    let t = std::time::Instant::now();
    for _ in 0..n {
        closed_call(cb, now);
    }
    t.elapsed().as_nanos() as f64 / f64::from(n)
}

/// The closed path against recloser as a ratio of interleaved rounds (median of 21
/// rounds of 2 M calls each): sequential criterion groups drift apart by ±30 % on a
/// shared machine, a paired ratio does not. Twice: with the default latency
/// histograms, and without (recloser keeps none).
fn closed_path_ratio() {
    let mut cb = closed_breaker();
    let mut counts_only = closed_breaker_counts_only();
    let r = recloser_breaker();
    let (mut now, mut now2) = (0u64, 0u64);
    let n = 2_000_000u32;
    let (mut ratios, mut ratios2) = (Vec::new(), Vec::new());
    let (mut ours, mut ours2, mut theirs) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..21 {
        let a = closed_round(&mut cb, &mut now, n);
        let t = std::time::Instant::now();
        for _ in 0..n {
            let _ = black_box(r.call(|| Ok::<u32, ()>(black_box(1))));
        }
        let b = t.elapsed().as_nanos() as f64 / f64::from(n);
        let c = closed_round(&mut counts_only, &mut now2, n);
        ours.push(a);
        ours2.push(c);
        theirs.push(b);
        ratios.push(b / a);
        ratios2.push(b / c);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "closed path, 21 interleaved rounds: fusewire {:.2} ns, recloser {:.2} ns (medians); recloser / fusewire = {:.2}x (median of rounds)",
        median(&mut ours),
        median(&mut theirs),
        median(&mut ratios)
    );
    println!(
        "  without latency histograms (percentiles_enabled: false): fusewire {:.2} ns; recloser / fusewire = {:.2}x",
        median(&mut ours2),
        median(&mut ratios2)
    );
}

fn main() {
    closed_path_ratio();
    cache_memory();
    let cb = filled_breaker();
    println!(
        "memory per key (breaker state + window + histograms): {} bytes (target <= 4096)",
        cb.memory_bytes()
    );
    println!(
        "  breaker state {} B, window {} B; without latency histograms {} B per key",
        std::mem::size_of::<fusewire_core::BreakerState>(),
        cb.window().memory_bytes(),
        closed_breaker_counts_only().memory_bytes()
    );
    let mut c = Criterion::default().configure_from_args();
    closed_path(&mut c);
    open_path(&mut c);
    engine_path(&mut c);
    queries(&mut c);
    cache(&mut c);
    collapser(&mut c);
    c.final_summary();
}
