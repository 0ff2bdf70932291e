//! Zero heap allocations on the hot paths, counted with a counting allocator.

use fusewire_core::cache::{CacheEvent, Lookup, ScopeId};
use fusewire_core::collapser::{self, Add};
use fusewire_core::{
    CacheConfig, CircuitBreaker, Collapser, CollapserConfig, Config, Engine, Outcome, Phase,
    RequestCache, Start,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations(f: impl FnOnce()) -> usize {
    let before = ALLOCS.with(|c| c.get());
    f();
    ALLOCS.with(|c| c.get()) - before
}

const MS: u64 = 1_000_000;

#[test]
fn hot_paths_do_not_allocate() {
    // The counter itself must see allocations, or this test proves nothing.
    assert!(allocations(|| drop(std::hint::black_box(vec![1u8; 16]))) >= 1);

    let mut b = CircuitBreaker::new(Config::default(), 0);
    let n = allocations(|| {
        // 100k calls over 100 s of simulated time: buckets roll many times.
        for i in 0..100_000u64 {
            let now = i * MS;
            let p = b.try_acquire(now, i).unwrap();
            b.record(p, Outcome::Success, now + (i % 50) * MS, i);
        }
    });
    assert_eq!(n, 0, "closed-path admit + record");

    let n = allocations(|| {
        let _ = b.health(100_000 * MS);
        let _ = b.percentiles_ns(100_000 * MS);
        let _ = b.snapshot(100_000 * MS);
    });
    assert_eq!(n, 0, "snapshot and percentile query");

    let now = 200_000 * MS;
    for _ in 0..20 {
        let p = b.try_acquire(now, 0).unwrap();
        b.record(p, Outcome::Failure, now, 0);
    }
    assert_eq!(b.phase(), Phase::Open);
    let n = allocations(|| {
        for i in 0..100_000u64 {
            assert!(b.try_acquire(now + i * 10_000, i).is_err());
        }
    });
    assert_eq!(n, 0, "open-path reject");

    // The engine's flow: breaker + bulkhead + deadline + key lookup, after warm-up.
    let mut e = Engine::local();
    let cfg = Config::from_json(r#"{"bulkhead": {"max_concurrent": 8}}"#).unwrap();
    let p = e.add_policy("p", cfg).unwrap();
    let k = e.key(p, "k", 0).unwrap();
    let run = |e: &mut Engine, from: u64, n: u64| {
        for i in from..from + n {
            let now = i * MS;
            let Start::Running(permit) = e.start(k, now, i) else {
                panic!("admitted")
            };
            e.complete(permit, Outcome::Success, now + MS / 2, i);
            while e.poll(now, i).is_some() {}
            let _ = e.key(p, "k", now);
        }
    };
    run(&mut e, 0, 1_000);
    let n = allocations(|| run(&mut e, 1_000, 10_000));
    assert_eq!(n, 0, "engine start + complete + poll + key lookup");

    // A known name longer than the kept length is shortened on the stack (found by
    // review: each lookup built the short form in a new String).
    let long = "a".repeat(300);
    let k = e.key(p, &long, 20_000 * MS).unwrap();
    let n = allocations(|| assert_eq!(e.key(p, &long, 20_001 * MS), Some(k)));
    assert_eq!(n, 0, "lookup of a long name");
}

/// Request cache on a warm cache: a hit is allocation-free, and so is a miss that
/// leads, fills and evicts (freed slots keep their key buffers, the hash table and
/// the event queue keep their capacity).
#[test]
fn warm_cache_lookups_do_not_allocate() {
    let cfg = CacheConfig {
        max_entries: 1_000,
        ttl_ms: 0,
        ..CacheConfig::default()
    };
    let key = |i: u64| {
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&i.to_le_bytes());
        k
    };
    let fill = |c: &mut RequestCache, i: u64| {
        let Lookup::Lead(l) = c.lookup(ScopeId::GLOBAL, &key(i), i) else {
            panic!("miss")
        };
        let _ = c.fill(l, 64, i);
        while let Some(ev) = c.poll(i) {
            assert!(matches!(ev, CacheEvent::Removed { .. }));
        }
    };
    let mut c = RequestCache::new(cfg, 1).unwrap();
    for i in 0..500 {
        fill(&mut c, i);
    }
    let n = allocations(|| {
        for i in 0..100_000u64 {
            let Lookup::Hit { .. } = c.lookup(ScopeId::GLOBAL, &key(i % 500), i) else {
                panic!("hit")
            };
        }
    });
    assert_eq!(n, 0, "cache lookup hit");

    // Warm up at the bound, then misses of new keys, each evicting one entry.
    for i in 500..5_000 {
        fill(&mut c, i);
    }
    let n = allocations(|| {
        for i in 5_000..50_000 {
            fill(&mut c, i);
        }
    });
    assert_eq!(n, 0, "cache lookup miss + fill + eviction at the bound");
    assert_eq!(c.stats().entries, 1_000);
}

/// Collapser add + flush + per-item completion, for batches up to 64 items (freed
/// batches keep listings of that size).
#[test]
fn warm_collapser_batches_do_not_allocate() {
    let cfg = CollapserConfig {
        max_batch_size: 32,
        ..CollapserConfig::default()
    };
    let mut c = Collapser::new(cfg, 1).unwrap();
    let run = |c: &mut Collapser, from: u64, n: u64| {
        for i in from..from + n {
            let now = i * 1_000;
            match c.add(collapser::ScopeId::GLOBAL, &(i % 8).to_le_bytes(), now) {
                Add::Queued(_) | Add::Full(_) => {}
                Add::Refused(r) => panic!("{r:?}"),
            }
            while let Some(b) = c.poll(now) {
                for idx in 0..c.items(b).len() as u32 {
                    let _ = c.complete_item(b, idx, true);
                }
            }
        }
    };
    run(&mut c, 0, 10_000);
    let n = allocations(|| run(&mut c, 10_000, 100_000));
    assert_eq!(n, 0, "collapser add + flush + complete_item");
}
