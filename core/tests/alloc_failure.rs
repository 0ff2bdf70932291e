//! A cache or a collapser that cannot get the memory to grow refuses what would need
//! it; it never aborts (found by a security review: a cache doubling
//! its slots past 4 M entries asked for ≈ 800 MB at once, the allocation failed, and
//! the `.wasm` trapped, taking every breaker of the process with it). Here the
//! allocator fails every allocation larger than a limit set per test thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use fusewire_core::cache::{Bypass, Lookup, ScopeId};
use fusewire_core::collapser::{self, Add};
use fusewire_core::{Collapser, Config, RequestCache};

struct Failing;

thread_local! {
    /// Allocations larger than this many bytes fail on this thread.
    static LIMIT: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn allowed(size: usize) -> bool {
    LIMIT.try_with(|l| size <= l.get()).unwrap_or(true)
}

unsafe impl GlobalAlloc for Failing {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !allowed(layout.size()) {
            return std::ptr::null_mut();
        }
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !allowed(new_size) {
            return std::ptr::null_mut();
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Failing = Failing;

/// Runs `f` with allocations over `bytes` failing.
fn limited<T>(bytes: usize, f: impl FnOnce() -> T) -> T {
    LIMIT.with(|l| l.set(bytes));
    let r = f();
    LIMIT.with(|l| l.set(usize::MAX));
    r
}

const MS: u64 = 1_000_000;
const T0: u64 = 1_000 * MS;
const G: ScopeId = ScopeId::GLOBAL;

fn config(json: &str) -> Config {
    Config::from_json(json).unwrap_or_else(|e| panic!("test config: {e}"))
}

#[test]
fn a_cache_that_cannot_grow_bypasses_and_keeps_its_entries() {
    let cfg = config(r#"{"cache": {"max_entries": 1000000, "max_bytes": 1000000000}}"#);
    let mut c = RequestCache::new(cfg.cache.expect("cache"), 7).expect("valid");
    let key = |i: u32| format!("key-{i}").into_bytes();
    let filled = limited(256 * 1024, || {
        for i in 0..1_000_000u32 {
            match c.lookup(G, &key(i), T0) {
                Lookup::Lead(l) => {
                    c.fill(l, 0, T0);
                }
                Lookup::Bypass(Bypass::Full) => return i,
                other => panic!("key {i}: {other:?}"),
            }
        }
        panic!("never refused: the limit is not reached");
    });
    assert!(filled > 1_000, "{filled} entries before the limit");
    // What it kept still answers; with memory back it grows again.
    for i in [0, filled / 2, filled - 1] {
        assert!(
            matches!(c.lookup(G, &key(i), T0), Lookup::Hit { .. }),
            "key {i}"
        );
    }
    assert!(matches!(c.lookup(G, &key(filled), T0), Lookup::Lead(_)));
}

#[test]
fn a_collapser_that_cannot_grow_refuses_items() {
    let cfg = config(r#"{"collapser": {"max_items": 1000000, "max_batch_size": 100000}}"#);
    let mut c = Collapser::new(cfg.collapser.expect("collapser"), 7).expect("valid");
    let refused = limited(256 * 1024, || {
        (0..1_000_000u32).find(|i| {
            matches!(
                c.add(
                    collapser::ScopeId::GLOBAL,
                    format!("key-{i}").as_bytes(),
                    T0
                ),
                Add::Refused(_)
            )
        })
    });
    let refused = refused.expect("refused once it could not grow");
    assert!(refused > 1_000, "{refused} items before the limit");
    assert!(matches!(
        c.add(collapser::ScopeId::GLOBAL, b"later", T0),
        Add::Queued(_)
    ));
}

/// An item that finds no room opens no batch: none is flushed empty (found by review).
#[test]
fn an_item_refused_for_want_of_memory_leaves_no_empty_batch() {
    let cfg = config(
        r#"{"collapser": {"max_items": 1000000, "max_batch_size": 100000, "window_ms": 10}}"#,
    );
    let mut c = Collapser::new(cfg.collapser.expect("collapser"), 7).expect("valid");
    let g = collapser::ScopeId::GLOBAL;
    let refused_b = limited(256 * 1024, || {
        let mut n = 0;
        while !matches!(c.add(g, b"a", T0), Add::Refused(_)) {
            n += 1;
            assert!(n < 1_000_000, "never refused");
        }
        matches!(c.add(g, b"b", T0), Add::Refused(_))
    });
    assert!(refused_b, "b found no room either");
    let mut batches = Vec::new();
    while let Some(b) = c.poll(T0 + 20 * MS) {
        batches.push((c.batch_key(b).map(<[u8]>::to_vec), c.items(b).len()));
    }
    assert!(!batches.is_empty());
    assert!(
        batches.iter().all(|(_, n)| *n > 0),
        "an empty batch was flushed: {batches:?}"
    );
}

/// Freeing never aborts for want of memory (found by review: the free list grew as
/// slots were freed): 100 000 calls end with allocations over 64 KiB failing.
#[test]
fn calls_end_with_memory_short() {
    let mut e = fusewire_core::Engine::local();
    let p = e
        .add_policy("p", config(r#"{"execution": {"timeout_enabled": false}}"#))
        .expect("policy");
    let k = e.key(p, "k", T0).expect("key");
    let permits: Vec<_> = (0..100_000)
        .map(|_| match e.start(k, T0, 0) {
            fusewire_core::Start::Running(p) => p,
            other => panic!("{other:?}"),
        })
        .collect();
    limited(64 * 1024, || {
        for p in permits {
            e.complete(p, fusewire_core::Outcome::Success, T0 + MS, 0);
        }
    });
    assert_eq!(e.in_flight(k), Some(0));
    // Slots the free list could not take stay unused; new calls still run.
    assert!(matches!(
        e.start(k, T0 + 2 * MS, 0),
        fusewire_core::Start::Running(_)
    ));
}
