//! Edges of the rolling ring that its unit tests leave open (found by mutation
//! testing of `core/src/ring.rs`).

use fusewire_core::ring::{Bucket, Ring, Slot};

/// A bucket that is a plain count.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct N(u32);

impl Bucket for N {
    fn join(&mut self, o: &Self) {
        self.0 += o.0;
    }
    fn is_empty(&self) -> bool {
        self.0 == 0
    }
}

/// A decoded slot whose epoch fits its index but has left the window is emptied:
/// it is never handed to `expired` as if it had been live.
#[test]
fn from_parts_empties_a_slot_that_left_the_window() {
    let stale = Slot {
        epoch: 2,
        bucket: N(3),
    };
    let mut r = Ring::from_parts(10, 5, vec![stale, Slot::default()]);
    assert!(r.is_clear(), "{:?}", r.slots());
    r.roll(60, |b| panic!("nothing live expires, got {b:?}"));
}

/// Same geometry means the same bucket width and the same bucket count.
#[test]
fn same_geometry_needs_width_and_length() {
    let r: Ring<N> = Ring::new(10, 3, 0);
    assert!(r.same_geometry(&Ring::new(10, 3, 1_000)));
    assert!(!r.same_geometry(&Ring::new(10, 4, 0)));
    assert!(!r.same_geometry(&Ring::new(20, 3, 0)));
}

/// Merging a ring of another length re-buckets it first: its counts land by epoch,
/// not by slot index.
#[test]
fn merge_rebuckets_a_ring_of_another_length() {
    let mut a: Ring<N> = Ring::new(10, 3, 90);
    a.current_mut().unwrap().0 = 1;
    let mut b: Ring<N> = Ring::new(10, 6, 80);
    b.current_mut().unwrap().0 = 2;
    b.roll(90, |_| {});
    b.current_mut().unwrap().0 = 4;
    a.merge(&b);
    assert_eq!(a.len(), 3);
    let mut live: Vec<_> = a
        .live_at(90)
        .filter(|s| !s.bucket.is_empty())
        .map(|s| (s.epoch, s.bucket.0))
        .collect();
    live.sort();
    assert_eq!(live, [(8, 2), (9, 5)]);
}

/// Re-bucketing to a new width with the same bucket count still moves the buckets.
#[test]
fn rebucket_to_a_new_width_with_the_same_length() {
    let mut r: Ring<N> = Ring::new(10, 4, 30);
    r.current_mut().unwrap().0 = 1;
    r.roll(40, |_| {});
    r.current_mut().unwrap().0 = 2;
    r.rebucket(20, 4);
    assert_eq!(r.width_ns(), 20);
    assert_eq!(r.current_epoch(), 2);
    let live: Vec<_> = r
        .live_at(40)
        .filter(|s| !s.bucket.is_empty())
        .map(|s| (s.epoch, s.bucket.0))
        .collect();
    assert_eq!(live, [(1, 1), (2, 2)]);
}

mod merge_at {
    //! `Ring::merge_at` against a small model: live buckets as (epoch, count) pairs.
    use super::N;
    use fusewire_core::ring::Ring;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// A ring built by recording `adds` (time step, count) from `t0`.
    fn build(w: u64, n: usize, t0: u64, adds: &[(u64, u32)]) -> Ring<N> {
        let mut r = Ring::new(w, n, t0);
        let mut t = t0;
        for &(dt, c) in adds {
            t = t.saturating_add(dt);
            r.roll(t, |_: &N| {});
            r.current_mut().unwrap().0 += c;
        }
        r
    }

    fn live(r: &Ring<N>) -> BTreeMap<u64, u32> {
        r.live_at(r.current_epoch() * r.width_ns())
            .filter(|s| s.bucket.0 != 0)
            .map(|s| (s.epoch, s.bucket.0))
            .collect()
    }

    /// The rule, said plainly.
    fn model(s: &Ring<N>, o: &Ring<N>, now: u64, still: Option<u64>) -> (u64, BTreeMap<u64, u32>) {
        let n = s.len() as u64;
        let here = now / s.width_ns();
        let mut cur = s.current_epoch();
        let back = match still {
            Some(t) => {
                let floor = (t / s.width_ns()).max(n - 1);
                if cur >= floor + n {
                    (cur - floor) / n * n
                } else {
                    0
                }
            }
            None => 0,
        };
        cur -= back;
        let by = cur.saturating_sub(here);
        let top = cur.max(o.current_epoch() + by);
        let mut out = BTreeMap::new();
        let shifted_s = live(s).into_iter().map(|(e, c)| (e - back, c));
        let shifted_o = live(o).into_iter().map(|(e, c)| (e + by, c));
        for (e, c) in shifted_s.chain(shifted_o) {
            if e + n > top {
                *out.entry(e).or_insert(0) += c;
            }
        }
        (top, out)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn matches_the_model(
            n in 1usize..8,
            s0 in 0u64..400,
            s_adds in prop::collection::vec((0u64..40, 1u32..5), 0..12),
            w0 in 0u64..400,
            w_adds in prop::collection::vec((0u64..40, 1u32..5), 0..12),
            still in prop::option::of(0u64..1_000),
        ) {
            let w = 10;
            let s = build(w, n, s0, &s_adds);
            let o = build(w, n, w0, &w_adds);
            // The writer's clock reads its last record's time (or later).
            let now = w0 + w_adds.iter().map(|a| a.0).sum::<u64>();
            let still = still.map(|t| t.min(now));
            let (top, want) = model(&s, &o, now, still);
            let mut got = s.clone();
            got.merge_at(&o, now, still);
            prop_assert_eq!(got.current_epoch(), top);
            prop_assert_eq!(live(&got), want);
            // Nothing the writer brings from its last ring is lost when it is behind
            // (and the ring stays where it is).
            if s.current_epoch() >= now / w && still.is_none() {
                let brought: u32 = live(&o).values().sum();
                let kept: u32 = live(&s).values().sum();
                prop_assert_eq!(live(&got).values().sum::<u32>(), brought + kept);
            }
        }
    }
}
