//! Edges of the latency histogram that the metrics tests leave open (found by
//! mutation testing of `core/src/histogram.rs`).

use fusewire_core::histogram::{BINS, COARSE, DENSE};
use fusewire_core::Histogram;

const US: u64 = 1_000;

/// The histogram's memory is fixed: `COARSE + DENSE` counters plus a few words.
#[test]
fn a_histogram_holds_coarse_plus_dense_counters() {
    assert_eq!(BINS, COARSE + DENSE);
    let size = std::mem::size_of::<Histogram>();
    assert!(size <= 4 * (COARSE + DENSE) + 32, "{size} bytes");
}

/// The sum is exact (the mean is `sum / count`).
#[test]
fn sum_is_the_exact_total_of_the_values() {
    let mut h = Histogram::new();
    assert_eq!(h.sum(), 0);
    for v in [3 * US, 5 * US, 700 * US] {
        h.record(v);
    }
    assert_eq!(h.sum(), 708 * US);
    let mut other = Histogram::new();
    other.record(2 * US);
    h.merge(&other);
    assert_eq!(h.sum(), 710 * US);
}

/// `clear` forgets everything: an empty histogram again.
#[test]
fn clear_forgets_every_value() {
    let mut h = Histogram::new();
    for v in [US, 10 * US, 100 * US] {
        h.record(v);
    }
    h.clear();
    assert!(h.is_empty());
    assert_eq!((h.count(), h.sum(), h.min(), h.max()), (0, 0, None, None));
    assert_eq!(h, Histogram::new());
    h.record(7 * US);
    assert_eq!((h.min(), h.max()), (Some(7 * US), Some(7 * US)));
}
