//! Rolling window and latency histogram: expiry, totals, percentiles, accuracy.

use fusewire_core::config::MetricsConfig;
use fusewire_core::histogram::{bin_index, bin_lower_bound, bin_value, RELATIVE_ERROR};
use fusewire_core::{EventKind, Histogram, Window};

const MS: u64 = 1_000_000;
const US: u64 = 1_000;

/// A small deterministic generator (splitmix64) for test data.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn exact_quantile(sorted: &[u64], q: f64) -> u64 {
    if q <= 0.0 {
        return sorted[0];
    }
    let rank = (q * sorted.len() as f64 / 100.0).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

#[test]
fn every_bin_is_within_the_relative_error_bound() {
    // From 1 ns to beyond 60 s, every bin's representative is within
    // RELATIVE_ERROR of both its edges (hence of every value inside).
    let last = u32::from(bin_index(120_000 * MS));
    for i in 0..=last {
        let lo = bin_lower_bound(i);
        let hi = bin_lower_bound(i + 1);
        let v = bin_value(i);
        assert!(hi > lo);
        assert!((v - lo) / lo <= RELATIVE_ERROR, "bin {i}");
        assert!((hi - v) / hi <= RELATIVE_ERROR, "bin {i}");
    }
    const { assert!(RELATIVE_ERROR <= 0.02) };
}

#[test]
fn values_map_to_bins_that_represent_them_within_two_percent() {
    let mut rng = Rng(7);
    for _ in 0..200_000 {
        // Log-uniform over 1 µs .. 60 s.
        let v = (US as f64 * (60_000_000f64).powf(rng.unit())) as u64;
        let rep = bin_value(u32::from(bin_index(v)));
        let err = (rep - v as f64).abs() / v as f64;
        assert!(err <= RELATIVE_ERROR, "value {v} -> {rep} ({err})");
    }
}

#[test]
fn quantiles_are_within_two_percent_of_exact() {
    let mut rng = Rng(42);
    // Distributions spanning up to ~400x, at scales from 1 µs to 60 s.
    for &(base, span) in &[
        (US, 400.0),
        (50 * US, 100.0),
        (MS, 400.0),
        (3 * MS, 20.0),
        (100 * MS, 300.0),
        (1_000 * MS, 60.0),
    ] {
        for &n in &[1usize, 7, 100, 5_000] {
            let mut h = Histogram::new();
            let mut values = Vec::with_capacity(n);
            for _ in 0..n {
                let v = (base as f64 * f64::powf(span, rng.unit() * rng.unit())) as u64;
                h.record(v);
                values.push(v);
            }
            values.sort_unstable();
            for q in [0.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 100.0] {
                let exact = exact_quantile(&values, q) as f64;
                let got = h.quantile(q) as f64;
                let err = (got - exact).abs() / exact;
                assert!(
                    err <= 0.02,
                    "base {base} span {span} n {n} q {q}: {got} vs {exact} ({err})"
                );
            }
            let mean = values.iter().sum::<u64>() as f64 / n as f64;
            assert!((h.mean() - mean).abs() < 1e-6 * mean.max(1.0));
            assert_eq!(h.min(), values.first().copied());
            assert_eq!(h.max(), values.last().copied());
        }
    }
}

#[test]
fn tail_stays_accurate_when_low_values_are_folded() {
    // 1 µs and 10 s in one histogram: far beyond the dense span. The low values
    // fall below it; the tail stays exact to 2 % and p0 stays exact.
    let mut h = Histogram::new();
    for _ in 0..900 {
        h.record(US);
    }
    for i in 0..100 {
        h.record(10_000 * MS + i * MS);
    }
    assert_eq!(h.quantile(0.0), US);
    let p99 = h.quantile(99.0) as f64;
    let exact = (10_000 * MS + 89 * MS) as f64;
    assert!((p99 - exact).abs() / exact <= 0.02, "{p99} vs {exact}");
    assert_eq!(h.quantile(100.0), 10_099 * MS);
}

/// Found by review: one 1 s timeout among 990 calls of 0.5 ms read p25…p99 as
/// 2.2 ms (everything 470× below the maximum folded into one bin). Below the dense
/// range values keep their octave, and the exact minimum bounds the lowest.
#[test]
fn an_outlier_far_above_the_rest_keeps_the_quantiles_below_it() {
    let mut h = Histogram::new();
    for _ in 0..990 {
        h.record(500 * US);
    }
    for _ in 0..10 {
        h.record(1_000 * MS);
    }
    for q in [25.0, 50.0, 75.0, 90.0, 99.0] {
        assert_eq!(h.quantile(q), 500 * US, "p{q}");
    }
    assert_eq!(h.quantile(99.5), 1_000 * MS);

    // Spread calls (0.2–2 ms, log-uniform) and 1 % at 10 s: 5 000–50 000× apart.
    let mut rng = Rng(7);
    let mut h = Histogram::new();
    let mut values = Vec::new();
    for i in 0..2_000 {
        let v = if i % 100 == 0 {
            10_000 * MS
        } else {
            (200.0 * US as f64 * 10f64.powf(rng.unit())) as u64
        };
        h.record(v);
        values.push(v);
    }
    values.sort_unstable();
    for q in [25.0, 50.0, 75.0, 90.0, 95.0] {
        let exact = exact_quantile(&values, q) as f64;
        let got = h.quantile(q) as f64;
        assert!(
            (got / exact).max(exact / got) <= 2f64.sqrt() * 1.001,
            "p{q}: {got} vs {exact}: within its octave"
        );
    }
}

#[test]
fn histogram_merge_equals_recording_everything_in_one() {
    let mut rng = Rng(3);
    let mut all = Histogram::new();
    let mut parts = [Histogram::new(), Histogram::new(), Histogram::new()];
    for i in 0..3_000 {
        let v = (US as f64 * (1e7f64).powf(rng.unit())) as u64;
        all.record(v);
        parts[i % 3].record(v);
    }
    let mut merged = Histogram::new();
    for p in &parts {
        merged.merge(p);
    }
    assert_eq!(merged, all);
}

fn metrics(window_ms: u64, buckets: u32) -> MetricsConfig {
    MetricsConfig {
        rolling_window_ms: window_ms,
        rolling_buckets: buckets,
        percentile_window_ms: 60_000,
        percentile_buckets: 4,
        percentiles_enabled: true,
    }
}

#[test]
fn buckets_expire_as_the_window_rolls() {
    let mut w = Window::new(&metrics(10_000, 10), 0);
    for s in 0..10u64 {
        for _ in 0..=s {
            w.record(EventKind::Success, s * 1_000 * MS);
        }
    }
    assert_eq!(w.health_at(9_999 * MS).count(EventKind::Success), 55);
    // At 10 s the bucket of second 0 (1 event) expires.
    assert_eq!(w.health_at(10_000 * MS).count(EventKind::Success), 54);
    assert_eq!(w.health_at(15_500 * MS).count(EventKind::Success), 55 - 21);
    assert_eq!(w.health_at(100_000 * MS).count(EventKind::Success), 0);
    assert_eq!(w.cumulative_count(EventKind::Success), 55);
}

#[test]
fn all_event_kinds_are_counted_and_health_is_derived() {
    let mut w = Window::new(&metrics(10_000, 10), 0);
    for (i, k) in EventKind::ALL.iter().enumerate() {
        for _ in 0..=i {
            w.record(*k, MS);
        }
    }
    let h = w.health(MS);
    for (i, k) in EventKind::ALL.iter().enumerate() {
        assert_eq!(h.count(*k), i as u64 + 1, "{}", k.name());
    }
    // success 1, failure 2, timeout 3, semaphore 5, pool 6.
    assert_eq!(h.total, 1 + 2 + 3 + 5 + 6);
    assert_eq!(h.errors, 2 + 3 + 5 + 6);
    assert!((h.error_percentage - 1600.0 / 17.0).abs() < 1e-9);
}

#[test]
fn rolling_max_concurrency() {
    let mut w = Window::new(&metrics(10_000, 10), 0);
    w.record_call(EventKind::Success, 0, false, 3, 0);
    w.record_call(EventKind::Success, 0, false, 9, 2_000 * MS);
    w.record_call(EventKind::Success, 0, false, 4, 5_000 * MS);
    assert_eq!(w.rolling_max_concurrency_at(5_000 * MS), 9);
    assert_eq!(w.rolling_max_concurrency_at(12_000 * MS), 4);
}

#[test]
fn percentile_window_rolls_separately() {
    let mut w = Window::new(&metrics(10_000, 10), 0);
    w.record_call(EventKind::Success, 5 * MS, false, 0, 0);
    w.record_call(EventKind::Success, 50 * MS, false, 0, 20_000 * MS);
    let p = w.percentiles_at(20_000 * MS);
    assert_eq!((p.count, p.p0, p.p100), (2, 5 * MS, 50 * MS));
    // 60 s in 4 buckets of 15 s: at 60 s the first bucket has expired.
    let p = w.percentiles_at(60_000 * MS);
    assert_eq!((p.count, p.p0), (1, 50 * MS));
    assert_eq!(w.percentiles_at(200_000 * MS).count, 0);
}

#[test]
fn disabled_percentiles_keep_no_histograms_and_counts_stay_exact() {
    use fusewire_core::{CircuitBreaker, Config, Outcome, Phase};
    let off = MetricsConfig {
        percentiles_enabled: false,
        ..metrics(10_000, 10)
    };
    let mut on = Window::new(&metrics(10_000, 10), 0);
    let mut w = Window::new(&off, 0);
    for (i, t) in [0u64, 3_000, 12_000, 70_000, 75_000]
        .into_iter()
        .enumerate()
    {
        let kind = [EventKind::Success, EventKind::Failure][i % 2];
        on.record_call(kind, 7 * MS, false, 3, t * MS);
        w.record_call(kind, 7 * MS, false, 3, t * MS);
    }
    assert_eq!(w.percentiles_at(75_000 * MS).count, 0);
    assert_eq!(on.percentiles_at(75_000 * MS).count, 2);
    assert_eq!(w.health_at(75_000 * MS), on.health_at(75_000 * MS));
    assert_eq!(w.cumulative(), on.cumulative());
    assert_eq!(w.rolling_max_concurrency_at(75_000 * MS), 3);
    // About 3 KB per key go with the histograms.
    assert!(
        w.memory_bytes() + 2_500 < on.memory_bytes(),
        "{} vs {}",
        w.memory_bytes(),
        on.memory_bytes()
    );

    // Turned on later: an empty latency ring from the current bucket on; off again:
    // gone. The counts survive both.
    w.reconfigure(&metrics(10_000, 10));
    w.record_call(EventKind::Success, 9 * MS, false, 1, 76_000 * MS);
    let p = w.percentiles_at(76_000 * MS);
    assert_eq!((p.count, p.p0), (1, 9 * MS));
    w.reconfigure(&off);
    assert_eq!(w.percentiles_at(76_000 * MS).count, 0);
    assert_eq!(w.health_at(76_000 * MS).count(EventKind::Success), 2);
    // Windows with and without histograms merge their counts.
    let mut m = on.clone();
    m.merge(&w);
    assert_eq!(m.health_at(76_000 * MS).count(EventKind::Success), 3);
    assert_eq!(m.percentiles_at(76_000 * MS).count, 2);

    // The slow-call rule reads each call's latency, not the histograms.
    let mut cfg = Config::default();
    cfg.metrics.percentiles_enabled = false;
    cfg.breaker.error_percentage.enabled = false;
    cfg.breaker.slow_call.enabled = true;
    cfg.breaker.slow_call.duration_threshold_ms = 100;
    cfg.breaker.slow_call.request_volume_threshold = 5;
    cfg.validate().unwrap();
    let mut cb = CircuitBreaker::new(cfg, 0);
    for i in 0..5u64 {
        let p = cb.try_acquire(i * MS, 0).unwrap();
        cb.record(p, Outcome::Success, i * MS + 200 * MS, 0);
    }
    assert_eq!(cb.phase(), Phase::Open);
    assert_eq!(cb.snapshot(300 * MS).latency_ns.count, 0);
}

#[test]
fn window_merge_is_epoch_aligned() {
    let c = metrics(10_000, 10);
    let mut a = Window::new(&c, 0);
    let mut b = Window::new(&c, 0);
    let mut both = Window::new(&c, 0);
    let ea = [
        (0, EventKind::Success),
        (3_000, EventKind::Failure),
        (9_000, EventKind::Timeout),
    ];
    let eb = [
        (1_000, EventKind::Success),
        (3_500, EventKind::Failure),
        (12_000, EventKind::Success),
    ];
    for (t, k) in ea {
        a.record(k, t * MS);
    }
    for (t, k) in eb {
        b.record(k, t * MS);
    }
    let mut all: Vec<_> = ea.iter().chain(eb.iter()).copied().collect();
    all.sort_by_key(|e| e.0);
    for (t, k) in all {
        both.record(k, t * MS);
    }
    let mut m = a.clone();
    m.merge(&b);
    assert_eq!(m, both, "merge equals recording into one window");
    // Buckets at 0 s and 1 s are stale for b's current epoch (12 s): dropped.
    assert_eq!(m.health_at(12_000 * MS).count(EventKind::Success), 1);
    assert_eq!(m.health_at(12_000 * MS).count(EventKind::Failure), 2);
    assert_eq!(m.cumulative_count(EventKind::Success), 3);
}

#[test]
fn reconfigure_rebuckets_live_counts() {
    let mut w = Window::new(&metrics(10_000, 10), 0);
    for s in 0..10u64 {
        w.record(EventKind::Failure, s * 1_000 * MS + 10 * MS);
    }
    w.reconfigure(&metrics(10_000, 5));
    assert_eq!(w.health_at(9_999 * MS).count(EventKind::Failure), 10);
    w.reconfigure(&metrics(20_000, 20));
    assert_eq!(w.health_at(9_999 * MS).count(EventKind::Failure), 10);
    assert_eq!(w.cumulative_count(EventKind::Failure), 10);
    // Shrinking the window drops what falls outside it.
    w.reconfigure(&metrics(4_000, 4));
    assert_eq!(w.health_at(9_999 * MS).count(EventKind::Failure), 4);
}

#[test]
fn clock_going_backwards_records_into_the_current_bucket() {
    let mut w = Window::new(&metrics(10_000, 10), 5_000 * MS);
    w.record(EventKind::Success, 5_000 * MS);
    w.record(EventKind::Success, 0);
    w.record_call(EventKind::Success, 0, false, 0, 1);
    assert_eq!(w.health_at(0).count(EventKind::Success), 3);
    assert_eq!(w.health_at(14_999 * MS).count(EventKind::Success), 3);
    assert_eq!(w.health_at(15_000 * MS).count(EventKind::Success), 0);
}

#[test]
fn snapshot_gathers_health_latency_and_concurrency() {
    use fusewire_core::{CircuitBreaker, Config, Outcome, Phase};
    let mut cb = CircuitBreaker::new(Config::default(), 0);
    let a = cb.try_acquire(0, 0).unwrap();
    let b = cb.try_acquire(0, 0).unwrap();
    cb.record(a, Outcome::Success, 10 * MS, 0);
    let s = cb.snapshot(10 * MS);
    assert_eq!(s.phase, Phase::Closed);
    assert_eq!(s.in_flight, 1);
    assert_eq!(s.rolling_max_concurrency, 2);
    assert_eq!(s.health.total, 1);
    assert_eq!(s.latency_ns.p50, 10 * MS);
    assert_eq!(s.cumulative[EventKind::Success.index()], 1);
    cb.record(b, Outcome::Failure, 30 * MS, 0);
    let s = cb.snapshot(30 * MS);
    assert_eq!(
        (s.in_flight, s.health.errors, s.latency_ns.p100),
        (0, 1, 30 * MS)
    );
}

#[test]
fn bin_edge_table_is_the_rounded_logarithm() {
    use fusewire_core::histogram::{BINS_PER_OCTAVE, BOUNDS};
    for (k, &b) in BOUNDS.iter().enumerate() {
        let ideal = 2048.0 * (2f64.powf(k as f64 / f64::from(BINS_PER_OCTAVE)) - 1.0);
        assert_eq!(f64::from(b), ideal.round(), "edge {k}");
    }
    // Indices are monotone in the value and consistent with the edges.
    let mut last = 0;
    for v in (1u64..200_000).chain((0..2_000).map(|i| (1u64 << 20) + i * 997)) {
        let i = u32::from(bin_index(v));
        assert!(i >= last, "monotone at {v}");
        last = i;
        assert!(
            bin_lower_bound(i) <= v as f64 && (v as f64) < bin_lower_bound(i + 1),
            "{v}"
        );
    }
    assert_eq!(bin_index(0), bin_index(1));
    assert!(u32::from(bin_index(u64::MAX)) < 64 * BINS_PER_OCTAVE);
}

/// Found by review: the rank was `ceil((q / 100) · count)`, and 7 / 100 · 100 is
/// 7.000000000000001 in floating point: the 7th percentile of 1..=100 ms read 8 ms.
#[test]
fn a_quantile_takes_its_exact_rank() {
    let mut h = Histogram::new();
    for ms in 1..=100u64 {
        h.record(ms * 1_000_000);
    }
    for (q, want) in [(7.0, 7), (14.0, 14), (28.0, 28), (50.0, 50)] {
        let got = h.quantile(q) as f64 / 1e6;
        assert!(
            (got - want as f64).abs() / want as f64 <= RELATIVE_ERROR,
            "p{q}: {got} ms, want {want} ms"
        );
    }
}
