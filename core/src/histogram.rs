//! Fixed-memory, mergeable, log-bucketed latency histogram.
//!
//! Values (nanoseconds) map to bins of a base-2 logarithm with
//! [`BINS_PER_OCTAVE`] = 18 bins per octave, computed with integers only: the
//! octave is the position of the highest set bit, the bin inside the octave comes
//! from a 2048-entry table indexed by the next 11 bits (bin edges are aligned to
//! those 2048 cells). Every bin spans a value ratio of at most 1.0395, so its
//! harmonic midpoint is within [`RELATIVE_ERROR`] (1.94 %) of every value in it;
//! with integer-nanosecond rounding, reported quantiles of values ≥ 1 µs are
//! within 2 % of the exact sample quantile.
//!
//! Memory is fixed: [`BINS`] counters. The top [`DENSE`] ones hold the bins up to the
//! maximum's at full resolution (values within 2^(151/18) ≈ 334× of the maximum keep
//! the 2 % bound); below them, [`COARSE`] counters hold one octave each (the part of
//! the dense range's first octave below it, then 7 whole octaves: 128–256× further),
//! reported at the octave's geometric middle (within 41 %), never below the exact
//! minimum; anything lower folds into the lowest. One 1 s timeout among 0.5 ms calls
//! thus leaves p50 within its octave, where a dense-only store folded everything
//! 470× below the maximum into one bin and read p50 as 2.2 ms. Minimum, maximum,
//! count and sum are kept exactly, so p0, p100 and the mean are exact.
//!
//! The stored form is canonical (the dense range is a function of the maximum, and
//! each coarse counter a fixed set of bins below it), so [`Histogram::merge`] is
//! exact, associative and commutative: merging histograms equals recording all
//! their values into one.

/// Bins per octave.
pub const BINS_PER_OCTAVE: u32 = 18;
/// Number of counters per histogram.
pub const BINS: usize = COARSE + DENSE;
/// Counters of one octave each below the dense range (the highest: the part of the
/// dense range's first octave below it).
pub const COARSE: usize = 8;
/// Counters at full resolution, up to the maximum's bin.
pub const DENSE: usize = 152;
/// Where the dense range starts when the maximum is in bin `top`.
const fn dense_start(top: u16) -> u16 {
    top.saturating_sub(DENSE as u16 - 1)
}
/// Guaranteed relative error of a bin's reported value vs any value in the bin.
pub const RELATIVE_ERROR: f64 = 0.0194;

/// Bin edges inside an octave, in 1/2048ths of the octave's start:
/// `BOUNDS[k] = round(2048 * (2^(k/18) - 1))`, plus the next octave's start.
pub const BOUNDS: [u16; 19] = [
    0, 80, 164, 251, 341, 435, 532, 634, 739, 848, 962, 1080, 1203, 1331, 1463, 1601, 1744, 1893,
    2048,
];

const fn sub_bins() -> [u8; 2048] {
    let mut table = [0u8; 2048];
    let mut m = 0;
    let mut k = 0;
    while m < 2048 {
        while k + 1 < BINS_PER_OCTAVE as usize && BOUNDS[k + 1] as usize <= m {
            k += 1;
        }
        table[m] = k as u8;
        m += 1;
    }
    table
}

/// Bin inside the octave for each of the 2048 mantissa cells.
static SUB_BIN: [u8; 2048] = sub_bins();

/// Anchor value of an empty histogram (every index is outside its dense range).
const EMPTY: u16 = u16::MAX;

/// Bin index of a value (values below 1 count as 1). Integer-only, branch-free.
#[inline(always)]
pub fn bin_index(value: u64) -> u16 {
    let v = value | u64::from(value == 0);
    let lz = v.leading_zeros();
    let octave = 63 - lz;
    // The 11 bits below the leading one, as a cell in 0..2048.
    let cell = ((v << lz) >> 52) & 0x7ff;
    (octave * BINS_PER_OCTAVE + u32::from(SUB_BIN[cell as usize])) as u16
}

/// The value where bin `index` starts.
pub fn bin_lower_bound(index: u32) -> f64 {
    let octave = index / BINS_PER_OCTAVE;
    let k = (index % BINS_PER_OCTAVE) as usize;
    // 2^octave, built from its exponent bits (no `powi` call in the module).
    let two_to_octave = f64::from_bits(u64::from(octave.min(1024) + 1023) << 52);
    two_to_octave * (1.0 + f64::from(BOUNDS[k]) / 2048.0)
}

/// The value reported for bin `index`: within [`RELATIVE_ERROR`] of all its values.
pub fn bin_value(index: u32) -> f64 {
    let lo = bin_lower_bound(index);
    let hi = bin_lower_bound(index + 1);
    2.0 * lo * hi / (lo + hi)
}

/// A latency histogram with exact count, sum, min and max.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Histogram {
    sum: u64,
    min: u64,
    max: u64,
    /// Bin index of `bins[COARSE]` (the dense range's start: a function of the
    /// maximum), or `u16::MAX` when empty.
    offset: u16,
    /// `bins[COARSE - 1 - m]`: the bins below `offset` in the octave `m` below
    /// `offset`'s (`bins[0]` also holds everything lower); then the dense bins.
    bins: [u32; BINS],
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

/// Quantiles reported by [`Histogram::percentiles`] (and snapshot structs).
pub const QUANTILES: [f64; 9] = [0.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 100.0];

/// Latency percentiles in nanoseconds (all zero when empty).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Percentiles {
    /// Values recorded.
    pub count: u64,
    /// Mean (exact).
    pub mean: f64,
    /// Minimum (exact).
    pub p0: u64,
    /// 25th percentile.
    pub p25: u64,
    /// Median.
    pub p50: u64,
    /// 75th percentile.
    pub p75: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 95th percentile.
    pub p95: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.5th percentile.
    pub p99_5: u64,
    /// Maximum (exact).
    pub p100: u64,
}

impl Histogram {
    /// An empty histogram.
    pub const fn new() -> Self {
        Self {
            sum: 0,
            min: u64::MAX,
            max: 0,
            offset: EMPTY,
            bins: [0; BINS],
        }
    }

    /// Values recorded (the sum of the bins; O(BINS)).
    pub fn count(&self) -> u64 {
        self.bins.iter().map(|&c| u64::from(c)).sum()
    }

    /// Sum of the values (saturating).
    pub fn sum(&self) -> u64 {
        self.sum
    }

    /// Smallest value, if any.
    pub fn min(&self) -> Option<u64> {
        (!self.is_empty()).then_some(self.min)
    }

    /// Largest value, if any.
    pub fn max(&self) -> Option<u64> {
        (!self.is_empty()).then_some(self.max)
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.offset == EMPTY
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        *self = Self::new();
    }

    /// Records one value. O(1), no allocation (a rare re-anchoring is O(BINS)).
    #[inline(always)]
    pub fn record(&mut self, value: u64) {
        let i = bin_index(value);
        let slot = u32::from(i).wrapping_sub(u32::from(self.offset)) as usize;
        if slot < DENSE {
            crate::counter::increment(&mut self.bins[COARSE + slot]);
        } else {
            self.record_outside(i);
        }
        // The u64 sum cannot overflow in practice (2^64 ns is 584 years of latency
        // in one bucket); wrapping keeps the hot path short and never panics.
        self.sum = self.sum.wrapping_add(value);
        // Branches, not `min`/`max`: almost never taken, so no store and no
        // loop-carried dependency through memory.
        if value < self.min {
            self.min = value;
        }
        if value > self.max {
            self.max = value;
        }
    }

    /// First value, a new maximum bin, or a value below the dense range.
    #[cold]
    #[inline(never)]
    fn record_outside(&mut self, i: u16) {
        if self.offset == EMPTY {
            self.bins = [0; BINS];
            self.offset = dense_start(i);
        } else if i >= self.offset.saturating_add(DENSE as u16) {
            self.reanchor(dense_start(i));
        }
        let slot = self.slot_of(i);
        self.bins[slot] = self.bins[slot].saturating_add(1);
    }

    /// The counter of bin `i` (at or below the dense range's top).
    fn slot_of(&self, i: u16) -> usize {
        if i >= self.offset {
            return (COARSE + usize::from(i - self.offset)).min(BINS - 1);
        }
        let per = BINS_PER_OCTAVE as u16;
        let below = usize::from(self.offset / per - i / per);
        (COARSE - 1).saturating_sub(below)
    }

    /// Moves the dense range up to `new_offset`: dense bins that leave it join their
    /// octave's coarse counter, coarse ones move down, the lowest fold.
    #[cold]
    fn reanchor(&mut self, new_offset: u16) {
        if new_offset <= self.offset {
            return;
        }
        let old = core::mem::replace(&mut self.bins, [0; BINS]);
        let old_offset = core::mem::replace(&mut self.offset, new_offset);
        let per = BINS_PER_OCTAVE as u16;
        let old_oct = old_offset / per;
        for (k, &c) in old.iter().enumerate().take(COARSE) {
            // Its octave, `COARSE - 1 - k` below the old dense start's (saturating:
            // the octaves below 0 are empty).
            let oct = (old_oct + k as u16 + 1).saturating_sub(COARSE as u16);
            let slot = self.slot_of(oct * per);
            self.bins[slot] = self.bins[slot].saturating_add(c);
        }
        for (j, &c) in old.iter().enumerate().skip(COARSE) {
            let slot = self.slot_of(old_offset + (j - COARSE) as u16);
            self.bins[slot] = self.bins[slot].saturating_add(c);
        }
    }

    /// Adds `other` into `self`: exact, associative and commutative.
    pub fn merge(&mut self, other: &Self) {
        if other.is_empty() {
            return;
        }
        if self.is_empty() {
            self.clone_from(other);
            return;
        }
        let mut other = other.clone();
        let offset = self.offset.max(other.offset);
        self.reanchor(offset);
        other.reanchor(offset);
        for (a, &b) in self.bins.iter_mut().zip(other.bins.iter()) {
            *a = a.saturating_add(b);
        }
        self.sum = self.sum.wrapping_add(other.sum);
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// Nearest-rank quantile `q` (0..=100) in nanoseconds; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        self.quantile_of(self.count(), q)
    }

    fn quantile_of(&self, count: u64, q: f64) -> u64 {
        if self.is_empty() || count == 0 {
            return 0;
        }
        if q <= 0.0 {
            return self.min;
        }
        if q >= 100.0 {
            return self.max;
        }
        // q·count first: (q / 100)·count rounds 7 % of 100 to 7.000000000000001, and
        // its ceiling to the 8th sample (found by review).
        let rank = (q * count as f64 / 100.0).ceil().max(1.0) as u64;
        let mut seen = 0u64;
        for (j, &c) in self.bins.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                let v = match j.checked_sub(COARSE) {
                    Some(d) => bin_value(u32::from(self.offset) + d as u32),
                    None => {
                        // The geometric middle of its octave (below the dense range):
                        // within 41 % of its values.
                        let per = BINS_PER_OCTAVE;
                        let oct = (u32::from(self.offset) / per + j as u32 + 1)
                            .saturating_sub(COARSE as u32);
                        let lo = bin_lower_bound(oct * per);
                        let hi = bin_lower_bound((oct + 1) * per)
                            .min(bin_lower_bound(u32::from(self.offset)));
                        (lo * hi.max(lo)).sqrt()
                    }
                };
                // max/min rather than clamp: never panics, even on decoded garbage.
                return (v.round() as u64).max(self.min).min(self.max);
            }
        }
        self.max
    }

    /// Mean in nanoseconds (0 when empty).
    pub fn mean(&self) -> f64 {
        Self::mean_of(self.sum, self.count())
    }

    fn mean_of(sum: u64, count: u64) -> f64 {
        if count == 0 {
            0.0
        } else {
            sum as f64 / count as f64
        }
    }

    /// The standard percentile set.
    pub fn percentiles(&self) -> Percentiles {
        let count = self.count();
        let q = |p| self.quantile_of(count, p);
        Percentiles {
            count,
            mean: Self::mean_of(self.sum, count),
            p0: q(QUANTILES[0]),
            p25: q(QUANTILES[1]),
            p50: q(QUANTILES[2]),
            p75: q(QUANTILES[3]),
            p90: q(QUANTILES[4]),
            p95: q(QUANTILES[5]),
            p99: q(QUANTILES[6]),
            p99_5: q(QUANTILES[7]),
            p100: q(QUANTILES[8]),
        }
    }
}
