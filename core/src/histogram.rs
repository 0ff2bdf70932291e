//! Fixed-memory, mergeable, log-bucketed latency histogram.
//!
//! Values (nanoseconds) map to bins with a cubically interpolated base-2 logarithm
//! (DDSketch's fast mapping: no `ln` call on the hot path). With
//! [`BINS_PER_OCTAVE`] = 18 every bin spans a value ratio of at most
//! `exp(0.7 / 18) = 1.0397`, so reporting the bin's harmonic midpoint is within
//! [`RELATIVE_ERROR`] (1.95 %) of every value in it.
//!
//! Memory is fixed: [`BINS`] counters anchored at the highest occupied bin (a
//! "collapsing-lowest" dense store). Values spanning up to `2^(BINS/18)` ≈ 470×
//! below the maximum keep full accuracy; anything lower is folded into the lowest
//! bin, so only low quantiles can lose accuracy, never the tail. Minimum, maximum,
//! count and sum are kept exactly, so p0, p100 and the mean are exact.
//!
//! The stored form is canonical (the anchor is a function of the maximum), so
//! [`Histogram::merge`] is exact, associative and commutative: merging histograms
//! equals recording all their values into one.

use serde::{Deserialize, Serialize};

/// Bins per octave of the interpolated logarithm.
pub const BINS_PER_OCTAVE: f64 = 18.0;
/// Number of counters per histogram.
pub const BINS: usize = 160;
/// Guaranteed relative error of every quantile within the dense range.
pub const RELATIVE_ERROR: f64 = 0.0195;

const A: f64 = 6.0 / 35.0;
const B: f64 = -3.0 / 5.0;
const C: f64 = 10.0 / 7.0;

/// Bin index of a value (values below 1 count as 1).
#[inline]
pub fn bin_index(value: u64) -> u16 {
    // v = 2^exp * (1 + s) with s in [0, 1), read straight from the f64 bits.
    let bits = (value.max(1) as f64).to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let s = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | 0x3ff0_0000_0000_0000) - 1.0;
    let l = exp as f64 + ((A * s + B) * s + C) * s;
    (l * BINS_PER_OCTAVE) as u16
}

/// Inverse of the interpolated logarithm: the value where bin `index` starts.
pub fn bin_lower_bound(index: u32) -> f64 {
    let x = f64::from(index) / BINS_PER_OCTAVE;
    let e = x.floor();
    let p = x - e;
    // Solve P(s) = p on [0, 1]; P is strictly increasing, so bisect.
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if ((A * mid + B) * mid + C) * mid < p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (1.0 + 0.5 * (lo + hi)) * 2f64.powi(e as i32)
}

/// The value reported for bin `index`: within [`RELATIVE_ERROR`] of all its values.
pub fn bin_value(index: u32) -> f64 {
    let lo = bin_lower_bound(index);
    let hi = bin_lower_bound(index + 1);
    2.0 * lo * hi / (lo + hi)
}

/// A latency histogram with exact count, sum, min and max.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Histogram {
    count: u64,
    sum: u64,
    min: u64,
    max: u64,
    /// Bin index of `bins[0]`; always `max(0, highest occupied index - (BINS - 1))`.
    offset: u16,
    #[serde(with = "crate::arrays")]
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
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
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
            offset: 0,
            bins: [0; BINS],
        }
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sum of the values (saturating).
    pub fn sum(&self) -> u64 {
        self.sum
    }

    /// Smallest value, if any.
    pub fn min(&self) -> Option<u64> {
        (self.count > 0).then_some(self.min)
    }

    /// Largest value, if any.
    pub fn max(&self) -> Option<u64> {
        (self.count > 0).then_some(self.max)
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        *self = Self::new();
    }

    /// Records one value. O(1), no allocation (a rare re-anchoring is O(BINS)).
    #[inline]
    pub fn record(&mut self, value: u64) {
        let i = bin_index(value);
        if self.count == 0 {
            self.offset = i.saturating_sub(BINS as u16 - 1);
        } else if usize::from(i) >= usize::from(self.offset) + BINS {
            self.reanchor(i - (BINS as u16 - 1));
        }
        let slot = usize::from(i.saturating_sub(self.offset));
        self.bins[slot] = self.bins[slot].saturating_add(1);
        self.count += 1;
        self.sum = self.sum.saturating_add(value);
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    /// Moves the anchor up to `new_offset`, folding lower bins into bin 0.
    #[cold]
    fn reanchor(&mut self, new_offset: u16) {
        if new_offset <= self.offset {
            return;
        }
        let shift = usize::from(new_offset - self.offset);
        if shift >= BINS {
            let total = self.bins.iter().fold(0u32, |a, &b| a.saturating_add(b));
            self.bins = [0; BINS];
            self.bins[0] = total;
        } else {
            let folded = self.bins[..=shift]
                .iter()
                .fold(0u32, |a, &b| a.saturating_add(b));
            self.bins.copy_within(shift.., 0);
            self.bins[BINS - shift..].fill(0);
            self.bins[0] = folded;
        }
        self.offset = new_offset;
    }

    /// Adds `other` into `self`: exact, associative and commutative.
    pub fn merge(&mut self, other: &Self) {
        if other.count == 0 {
            return;
        }
        if self.count == 0 {
            self.clone_from(other);
            return;
        }
        let offset = self.offset.max(other.offset);
        self.reanchor(offset);
        let shift = usize::from(offset - other.offset);
        for (j, &c) in other.bins.iter().enumerate() {
            let slot = j.saturating_sub(shift);
            self.bins[slot] = self.bins[slot].saturating_add(c);
        }
        self.count = self.count.saturating_add(other.count);
        self.sum = self.sum.saturating_add(other.sum);
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// Nearest-rank quantile `q` (0..=100) in nanoseconds; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        if q <= 0.0 {
            return self.min;
        }
        if q >= 100.0 {
            return self.max;
        }
        let rank = ((q / 100.0) * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0u64;
        for (j, &c) in self.bins.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                let v = bin_value(u32::from(self.offset) + j as u32);
                // max/min rather than clamp: never panics, even on decoded garbage.
                return (v.round() as u64).max(self.min).min(self.max);
            }
        }
        self.max
    }

    /// Mean in nanoseconds (0 when empty).
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }

    /// The standard percentile set.
    pub fn percentiles(&self) -> Percentiles {
        let q = |p| self.quantile(p);
        Percentiles {
            count: self.count,
            mean: self.mean(),
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
