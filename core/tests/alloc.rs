//! Zero heap allocations on the hot paths, counted with a counting allocator.

use fusewire_core::{CircuitBreaker, Config, Engine, Outcome, Phase, Start};
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
}
