//! Where the allocator gets wasm memory: talc, on memory grown in steps of at least
//! an eighth of its size (and 1 MiB), not page by page.
//!
//! talc's own `WasmGrowAndExtend` grows the memory by the pages one allocation needs.
//! Every `memory.grow` replaces the JS `ArrayBuffer` and V8 answers with a garbage
//! collection of the whole JS heap, so with many breakers alive each creation paid for
//! all of them: the 40 000th took 1.5 ms (73 µs for the first 5 000).

use core::alloc::Layout;
use core::arch::wasm32::{memory_grow, memory_size};
use core::ptr::NonNull;

use talc::base::binning::Binning;
use talc::base::Talc;
use talc::source::Source;

const PAGE: usize = 64 * 1024;

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
        let step = need.max(memory_size::<0>() / 8).max(16);
        let (prev, pages) = match memory_grow::<0>(step) {
            usize::MAX => match memory_grow::<0>(need) {
                usize::MAX => return Err(()),
                prev => (prev, need),
            },
            prev => (prev, step),
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
