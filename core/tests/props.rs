//! Property tests against small reference models, and merge laws.

use fusewire_core::config::MetricsConfig;
use fusewire_core::{CircuitBreaker, Config, EventKind, Histogram, Outcome, Phase, Window};
use proptest::prelude::*;

const MS: u64 = 1_000_000;

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        4 => Just(Outcome::Success),
        4 => Just(Outcome::Failure),
        1 => Just(Outcome::Timeout),
        1 => Just(Outcome::BadRequest),
    ]
}

/// Reference model of the Hystrix error-percentage breaker with defaults:
/// 10 s window in 1 s buckets, volume 20, 50 %, sleep 5 s, one probe.
#[derive(Default)]
struct Model {
    phase: Phase,
    open_until: u64,
    probe_out: bool,
    /// (epoch, is_error) of counted events since the last close.
    events: Vec<(u64, bool)>,
    current: u64,
    /// The last check found the rate at its threshold, short only of the volume: a
    /// success checks again (it adds volume).
    short: bool,
    /// Successes left the window since the last counted call: the next call checks
    /// again (the rate can rise without an error).
    dropped: bool,
}

impl Model {
    fn live(&self) -> (u64, u64) {
        let from = (self.current + 1).saturating_sub(10);
        let live = self.events.iter().filter(|(e, _)| *e >= from);
        let (mut total, mut errors) = (0, 0);
        for (_, err) in live {
            total += 1;
            errors += u64::from(*err);
        }
        (total, errors)
    }

    fn record(&mut self, now: u64, outcome: Outcome) {
        self.current = self.current.max(now / (1_000 * MS));
        let err = match outcome {
            Outcome::Success => false,
            Outcome::BadRequest => return,
            _ => true,
        };
        self.events.push((self.current, err));
    }

    /// Returns whether the call was admitted.
    fn call(&mut self, now: u64, outcome: Outcome) -> bool {
        let before = (self.current + 1).saturating_sub(10);
        self.current = self.current.max(now / (1_000 * MS));
        let from = (self.current + 1).saturating_sub(10);
        self.dropped |= self
            .events
            .iter()
            .any(|&(e, err)| !err && e >= before && e < from);
        let probe = match self.phase {
            Phase::Closed => false,
            Phase::Open if now >= self.open_until => {
                self.phase = Phase::HalfOpen;
                self.probe_out = true;
                true
            }
            Phase::Open => return false,
            Phase::HalfOpen if !self.probe_out => {
                self.probe_out = true;
                true
            }
            Phase::HalfOpen => return false,
        };
        self.record(now, outcome);
        if probe {
            self.probe_out = false;
            match outcome {
                Outcome::Success => {
                    self.phase = Phase::Closed;
                    self.events.clear();
                    self.short = false;
                    self.dropped = false;
                }
                // A caller's mistake says nothing about the upstream: the probe
                // turn is given back and the breaker stays half-open.
                Outcome::BadRequest => {}
                Outcome::Failure | Outcome::Timeout => {
                    self.phase = Phase::Open;
                    self.open_until = now + 5_000 * MS;
                    self.short = false;
                }
                _ => {}
            }
        } else if outcome != Outcome::Success || self.short || self.dropped {
            self.dropped = false;
            let (total, errors) = self.live();
            let rate = errors > 0 && errors * 100 >= 50 * total;
            self.short = rate && total < 20;
            if total >= 20 && rate {
                self.phase = Phase::Open;
                self.open_until = now + 5_000 * MS;
            }
        }
        true
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn error_percentage_breaker_matches_reference_model(
        // Mostly short gaps, so 20 calls land in one 10 s window and the breaker trips,
        // probes and reopens in most cases (with gaps of 0..1 500 ms only 1 case in 10 tripped).
        steps in prop::collection::vec(
            (prop_oneof![7 => 0u64..200, 2 => 0u64..1_500, 1 => 0u64..7_000], outcome()),
            1..400,
        )
    ) {
        let mut b = CircuitBreaker::new(Config::default(), 0);
        let mut m = Model::default();
        let mut now = 0;
        for (dt, outcome) in steps {
            now += dt * MS;
            let admitted = match b.try_acquire(now, 0) {
                Ok(p) => {
                    b.record(p, outcome, now, 0);
                    true
                }
                Err(_) => false,
            };
            prop_assert_eq!(admitted, m.call(now, outcome), "at {} ms", now / MS);
            prop_assert_eq!(b.phase(), m.phase, "at {} ms", now / MS);
            if b.phase() == Phase::Closed {
                let h = b.health(now);
                prop_assert_eq!((h.total, h.errors), m.live());
            }
        }
    }

    #[test]
    fn window_matches_reference_model(
        steps in prop::collection::vec((-3_000i64..4_000, 0usize..13, prop::bool::ANY), 1..300),
        buckets in prop::sample::select(vec![1u32, 2, 5, 10, 20]),
    ) {
        let cfg = MetricsConfig {
            rolling_window_ms: 10_000,
            rolling_buckets: buckets,
            ..MetricsConfig::default()
        };
        let bucket_ns = 10_000 * MS / u64::from(buckets);
        let mut w = Window::new(&cfg, 0);
        let mut events: Vec<(u64, usize)> = vec![];
        let mut current = 0u64;
        let mut now: u64 = 0;
        for (dt, kind, query) in steps {
            // The host clock may step backwards.
            now = now.saturating_add_signed(dt * MS as i64);
            current = current.max(now / bucket_ns);
            let from = (current + 1).saturating_sub(u64::from(buckets));
            if query {
                let h = w.health(now);
                for k in EventKind::ALL {
                    let want = events.iter().filter(|(e, kk)| *e >= from && *kk == k.index()).count() as u64;
                    prop_assert_eq!(h.count(k), want, "{}", k.name());
                }
            } else {
                w.record(EventKind::ALL[kind], now);
                events.push((current, kind));
            }
            prop_assert_eq!(w.cumulative().iter().sum::<u64>(), events.len() as u64);
        }
    }

    #[test]
    fn window_merge_is_associative_and_commutative(
        a in prop::collection::vec((0u64..30_000, 0usize..13, 0u64..5_000_000), 0..60),
        b in prop::collection::vec((0u64..30_000, 0usize..13, 0u64..5_000_000), 0..60),
        c in prop::collection::vec((0u64..30_000, 0usize..13, 0u64..5_000_000), 0..60),
    ) {
        let cfg = Config::default().metrics;
        let build = |mut ev: Vec<(u64, usize, u64)>| {
            ev.sort_by_key(|e| e.0);
            let mut w = Window::new(&cfg, 0);
            for (t, k, lat) in ev {
                if k < 3 {
                    w.record_call(EventKind::ALL[k], lat * 1_000, lat % 3 == 0, (lat % 17) as u32, t * MS);
                } else {
                    w.record(EventKind::ALL[k], t * MS);
                }
            }
            w
        };
        let (wa, wb, wc) = (build(a), build(b), build(c));
        let mut ab = wa.clone();
        ab.merge(&wb);
        let mut ba = wb.clone();
        ba.merge(&wa);
        prop_assert_eq!(&ab, &ba);
        let sum: Vec<u64> = wa.cumulative().iter().zip(wb.cumulative()).map(|(x, y)| x + y).collect();
        prop_assert_eq!(ab.cumulative().to_vec(), sum, "cumulative counts add");
        let mut ab_c = ab.clone();
        ab_c.merge(&wc);
        let mut bc = wb.clone();
        bc.merge(&wc);
        let mut a_bc = wa.clone();
        a_bc.merge(&bc);
        prop_assert_eq!(&ab_c, &a_bc);
        // Merging with an empty window changes nothing that is live.
        let mut e = ab_c.clone();
        e.merge(&Window::new(&cfg, 0));
        prop_assert_eq!(&e, &ab_c);
    }

    #[test]
    fn histogram_merge_laws_and_exactness(
        a in prop::collection::vec(0u64..u64::MAX / 2, 0..100),
        b in prop::collection::vec(1u64..100_000_000_000, 0..100),
        c in prop::collection::vec(1u64..1_000_000, 0..100),
    ) {
        let build = |v: &[u64]| {
            let mut h = Histogram::new();
            for &x in v {
                h.record(x);
            }
            h
        };
        let (ha, hb, hc) = (build(&a), build(&b), build(&c));
        let mut ab = ha.clone();
        ab.merge(&hb);
        let mut ba = hb.clone();
        ba.merge(&ha);
        prop_assert_eq!(&ab, &ba);
        let mut ab_c = ab.clone();
        ab_c.merge(&hc);
        let mut bc = hb.clone();
        bc.merge(&hc);
        let mut a_bc = ha.clone();
        a_bc.merge(&bc);
        prop_assert_eq!(&ab_c, &a_bc);
        let all: Vec<u64> = a.iter().chain(&b).chain(&c).copied().collect();
        prop_assert_eq!(&ab_c, &build(&all));
    }
}

/// A breaker state with a trip, an open schedule step and a failure run behind it.
fn tripped_state() -> fusewire_core::BreakerState {
    let mut cb = CircuitBreaker::new(Config::default(), 0);
    for _ in 0..20 {
        let p = cb.try_acquire(0, 0).unwrap();
        cb.record(p, Outcome::Failure, 0, 0);
    }
    cb.state().clone()
}

#[test]
fn breaker_state_round_trips_through_its_wire_encoding() {
    use fusewire_core::shared::codec::{Reader, Wire};
    let state = tripped_state();
    assert_eq!(state.phase(), Phase::Open);
    let mut bytes = Vec::new();
    state.put(&mut bytes);
    let mut r = Reader::new(&bytes);
    assert_eq!(
        fusewire_core::BreakerState::take(&mut r).as_ref(),
        Some(&state)
    );
    assert!(r.is_empty());
}

proptest! {
    /// Damaged or random bytes never panic the decoder; whatever decodes re-encodes
    /// to bytes that decode to the same state.
    #[test]
    fn decoding_corrupt_breaker_bytes_never_panics(
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        noise in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        use fusewire_core::shared::codec::{Reader, Wire};
        use fusewire_core::BreakerState;
        let mut bytes = Vec::new();
        tripped_state().put(&mut bytes);
        for (i, x) in flips {
            let i = i.index(bytes.len());
            bytes[i] ^= x;
        }
        for b in [&bytes, &noise] {
            if let Some(s) = BreakerState::take(&mut Reader::new(b)) {
                let mut again = Vec::new();
                s.put(&mut again);
                prop_assert_eq!(BreakerState::take(&mut Reader::new(&again)), Some(s));
            }
        }
    }
}
