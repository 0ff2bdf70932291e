//! `memory_bytes` of the request cache and of the collapser is the heap they hold:
//! checked against an allocator that tracks the live heap bytes of the test thread
//! (found by mutation testing: a component left out of the sum, or subtracted, went
//! unnoticed).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use fusewire_core::cache::{Lookup, ScopeId as CacheScope};
use fusewire_core::collapser::{Add, ScopeId as CollapserScope};
use fusewire_core::{CacheConfig, Collapser, CollapserConfig, RequestCache};

struct Tracking;

thread_local! {
    /// Live heap bytes allocated by this thread.
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    let _ = LIVE.try_with(|l| l.set(l.get() + delta));
}

fn live() -> isize {
    LIVE.with(|l| l.get())
}

unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        count(-(layout.size() as isize));
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Tracking = Tracking;

const MS: u64 = 1_000_000;
const T0: u64 = 1_000 * MS;

#[test]
fn the_caches_memory_bytes_is_the_heap_it_holds() {
    let config = CacheConfig {
        ttl_ms: 0,
        ..CacheConfig::default()
    };
    let small = CacheConfig {
        max_entries: 10,
        ..config.clone()
    };
    let base = live();
    let mut c = RequestCache::new(config, 9).unwrap();
    let held = |c: &RequestCache, when: &str| {
        assert_eq!(
            live() - base,
            c.memory_bytes() as isize,
            "memory_bytes {when}"
        );
    };
    held(&c, "when empty");
    // Entries: slots, key buffers, the hash table.
    // (The test itself allocates nothing from here on: the bytes are the cache's.)
    let mut key = [b'k'; 44];
    for i in 0..2_000u32 {
        let len = 5 + i as usize % 40;
        key[len - 4..len].copy_from_slice(&i.to_le_bytes());
        let Lookup::Lead(l) = c.lookup(CacheScope::GLOBAL, &key[..len], T0) else {
            panic!("a miss leads")
        };
        c.fill(l, 10, T0).unwrap();
    }
    held(&c, "with 2 000 entries");
    // Callers: one flight with 900 followers.
    let Lookup::Lead(l) = c.lookup(CacheScope::GLOBAL, b"hot", T0) else {
        panic!("a miss leads")
    };
    for _ in 0..900 {
        assert!(matches!(
            c.lookup(CacheScope::GLOBAL, b"hot", T0),
            Lookup::Wait(_)
        ));
    }
    held(&c, "with 900 followers");
    // Scopes.
    for _ in 0..100 {
        assert!(c.open_scope().is_some());
    }
    held(&c, "with 100 scopes");
    // Queued events: 900 `Ready`, then ~1 990 `Removed` by a shrinking reconfigure.
    c.fill(l, 10, T0).unwrap();
    c.set_config(small, T0).unwrap();
    held(&c, "with ~2 900 queued events");
    let mut n = 0;
    while c.poll(T0).is_some() {
        n += 1;
    }
    assert!(n > 2_800, "{n} events");
    held(&c, "after the events were taken");
}

#[test]
fn the_collapsers_memory_bytes_is_the_heap_it_holds() {
    let config = CollapserConfig {
        max_batch_size: 500,
        ..CollapserConfig::default()
    };
    let mut batches = Vec::with_capacity(1_000);
    let base = live();
    let mut c = Collapser::new(config, 9).unwrap();
    let held = |c: &Collapser, when: &str| {
        assert_eq!(
            live() - base,
            c.memory_bytes() as isize,
            "memory_bytes {when}"
        );
    };
    held(&c, "when empty");
    // Batches with their keys and listings, items, the hash table.
    for i in 0..3_000u32 {
        let key = (i % 700).to_le_bytes();
        assert!(matches!(
            c.add(CollapserScope::GLOBAL, &key, T0),
            Add::Queued(_)
        ));
    }
    held(&c, "with 700 open batches");
    // Full batches queued for the poll.
    let mut full = 0;
    for _ in 0..500 {
        if let Add::Full(_) = c.add(CollapserScope::GLOBAL, b"big", T0) {
            full += 1;
        }
    }
    for _ in 0..500 {
        if let Add::Full(_) = c.add(CollapserScope::GLOBAL, b"big", T0) {
            full += 1;
        }
    }
    assert_eq!(full, 2);
    held(&c, "with two full batches");
    for _ in 0..100 {
        assert!(c.open_scope().is_some());
    }
    held(&c, "with 100 scopes");
    // Handed out and failed: the failed listing is kept in the output buffer.
    while let Some(b) = c.poll(T0 + 10 * MS) {
        batches.push(b);
    }
    assert_eq!(batches.len(), 702);
    held(&c, "with every batch handed out");
    let failed: usize = batches.iter().map(|b| c.fail_batch(*b).len()).sum();
    assert_eq!(failed, 4_000);
    held(&c, "after every batch failed");
}
