//! Zero heap allocations on the hot paths, counted with a counting allocator.

use fusewire_core::bulkhead::{Acquire, Bulkhead};
use fusewire_core::registry::{Registry, Start};
use fusewire_core::{CircuitBreaker, Config, Outcome, Phase};
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
        let _ = b.percentiles(100_000 * MS);
        let _ = b.rolling_max_concurrency(100_000 * MS);
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

    let mut pool = Bulkhead::new(Config::default().bulkhead);
    let n = allocations(|| {
        for i in 0..10_000 {
            let Acquire::Granted(p) = pool.try_acquire(i) else {
                panic!()
            };
            assert!(pool.release(p, i).is_none());
        }
    });
    assert_eq!(n, 0, "bulkhead acquire + release");

    let mut r = Registry::new();
    let id = r
        .register("k", "g", None, Config::default(), 0)
        .expect("valid");
    let n = allocations(|| {
        for i in 0..10_000u64 {
            let Start::Running(c) = r.start(id, i * MS, i) else {
                panic!()
            };
            r.complete(c, Outcome::Success, i * MS + 1, i);
        }
    });
    assert_eq!(n, 0, "registry start + complete (with deadline tracking)");
}
