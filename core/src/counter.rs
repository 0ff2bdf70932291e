//! Saturating counter updates whose common path is a plain increment and an
//! unconditional store: unlike `saturating_add` (a conditional move) or
//! `checked_add` (a conditional store), repeated updates of one counter chain
//! only through the increment itself. A wrap to zero is repaired on a cold path.

/// Adds 1 unless the counter is already at `u32::MAX`.
#[inline(always)]
pub(crate) fn increment(c: &mut u32) {
    // Store unconditionally (keeps the store off the branch), repair on wrap.
    let v = c.wrapping_add(1);
    *c = v;
    if v == 0 {
        saturated(c);
    }
}

#[cold]
#[inline(never)]
fn saturated(c: &mut u32) {
    *c = u32::MAX;
}
