//! Where the allocator gets wasm memory, and what happens when it runs short.
//!
//! talc takes memory grown in steps of at least an eighth of its size (and 1 MiB), not
//! page by page: every `memory.grow` replaces the JS `ArrayBuffer` and V8 answers with
//! a collection of the whole JS heap, so with many breakers alive each creation paid
//! for all of them (the 40 000th took 1.5 ms). Near the limit a step halves until it
//! fits.
//!
//! A failed allocation aborts, and the trap would poison every breaker of the process.
//! So growth past [`LIMIT`] (4 GiB less 128 MiB by default) marks memory as low: the
//! exports then refuse what would keep memory (a new breaker, a cache entry, a
//! collapser item) and the reserve serves the calls in flight. Past the limit memory
//! grows only by what an allocation needs; the mark lifts once what is allocated is
//! 4 MiB below the limit again (talc reuses what was freed before it grows again).

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

/// 64 KiB wasm pages.
const PAGE: usize = 64 * 1024;
/// Pages past which memory is low.
static LIMIT: AtomicUsize = AtomicUsize::new(65_536 - 2_048);
static LOW: AtomicBool = AtomicBool::new(false);

/// Whether memory grew past the limit and what is allocated has not dropped well
/// below it since (see [`relieve`]; looked at here, when an export asks, however the
/// memory was freed: a breaker, a call table or queue emptied by calls ending).
pub fn low() -> bool {
    if LOW.load(Relaxed) {
        relieve();
    }
    LOW.load(Relaxed)
}

/// How far below the limit what is allocated must drop for the low mark to lift.
const RELIEF: usize = 4 << 20;

/// Lifts the low mark (memory was freed) once what is allocated is [`RELIEF`] bytes
/// below the limit. (Lifting it on any freeing — an empty cache cleared, one breaker
/// freed — let each free-then-insert cycle grow memory into the reserve until an
/// allocation failed: found by review. Counting free heap bytes instead is fooled by
/// fragments too small for what comes next.)
fn relieve() {
    if allocated().saturating_add(RELIEF) <= LIMIT.load(Relaxed) * PAGE {
        LOW.store(false, Relaxed);
    }
}

/// Bytes allocated and not freed (kept by [`Counted`]).
static ALLOCATED: AtomicUsize = AtomicUsize::new(0);
/// Bytes allocated now (none counted off wasm, where [`Counted`] is not the allocator).
fn allocated() -> usize {
    ALLOCATED.load(Relaxed)
}

/// An allocator that keeps [`ALLOCATED`] (for [`relieve`]).
#[cfg(all(target_family = "wasm", not(target_feature = "atomics")))]
pub struct Counted<A>(pub A);

// SAFETY: every call is `A`'s; only the count is added.
#[cfg(all(target_family = "wasm", not(target_feature = "atomics")))]
unsafe impl<A: core::alloc::GlobalAlloc> core::alloc::GlobalAlloc for Counted<A> {
    unsafe fn alloc(&self, layout: core::alloc::Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { self.0.alloc(layout) };
        if !p.is_null() {
            ALLOCATED.fetch_add(layout.size(), Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: core::alloc::Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { self.0.dealloc(ptr, layout) };
        ALLOCATED.fetch_sub(layout.size(), Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: core::alloc::Layout, new: usize) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { self.0.realloc(ptr, layout, new) };
        if !p.is_null() {
            ALLOCATED.fetch_add(new, Relaxed);
            ALLOCATED.fetch_sub(layout.size(), Relaxed);
        }
        p
    }
}

/// Sets the limit in MiB (tests; at most 4 095: 4 GiB in bytes wraps to 0 on wasm32,
/// and the low mark would never lift); lifts the low mark.
pub fn set_limit(mib: u32) {
    LIMIT.store((mib.min(4_095) as usize) * 16, Relaxed);
    LOW.store(false, Relaxed);
}

#[cfg(all(target_family = "wasm", not(target_feature = "atomics")))]
mod source {
    use core::alloc::Layout;
    use core::arch::wasm32::{memory_grow, memory_size};
    use core::ptr::NonNull;

    use talc::base::binning::Binning;
    use talc::base::Talc;
    use talc::source::Source;

    use super::{Relaxed, LIMIT, LOW, PAGE};

    /// Grows wasm memory geometrically and extends talc's one heap over it.
    #[derive(Debug)]
    pub struct Heap {
        end: Option<NonNull<u8>>,
    }

    impl Heap {
        /// No memory claimed yet.
        pub const fn new() -> Self {
            Heap { end: None }
        }
    }

    // SAFETY: allocates nothing; the grown pages are claimed or extended exactly once.
    unsafe impl Source for Heap {
        fn acquire<B: Binning>(talc: &mut Talc<Self, B>, layout: Layout) -> Result<(), ()> {
            // Enough for the allocation with talc's chunk and heap overheads (generous:
            // an extension too small would only come back for more).
            let need = (layout.size() + layout.align() + 256).div_ceil(PAGE);
            let size = memory_size::<0>();
            let room = LIMIT.load(Relaxed).saturating_sub(size);
            let mut pages = need.max(size / 8).max(16);
            if pages > room {
                if need <= room {
                    pages = room;
                } else {
                    // Past the limit: only what this allocation needs (an eighth of
                    // memory here left room that lifted the mark again at once).
                    LOW.store(true, Relaxed);
                    pages = need;
                }
            }
            let prev = loop {
                match memory_grow::<0>(pages) {
                    usize::MAX if pages > need => pages = (pages / 2).max(need),
                    usize::MAX => return Err(()),
                    prev => break prev,
                }
            };
            let base = (prev * PAGE) as *mut u8;
            let end = base.wrapping_add(pages * PAGE);
            if let Some(old_end) = talc.source.end.take() {
                if old_end.as_ptr() == base {
                    // SAFETY: the pages from the old end on were just grown, unused.
                    talc.source.end = Some(unsafe { talc.extend(old_end, end) });
                    return Ok(());
                }
            }
            // SAFETY: the grown pages belong to no one else.
            talc.source.end = unsafe { talc.claim(base, pages * PAGE) };
            Ok(())
        }
    }
}

#[cfg(all(target_family = "wasm", not(target_feature = "atomics")))]
pub use source::Heap;
