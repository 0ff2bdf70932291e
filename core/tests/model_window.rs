//! Window vs a naive list-of-epochs model under arbitrary record / record_call /
//! health / health_at / reset / reconfigure / merge, clock moving both ways.

use fusewire_core::config::MetricsConfig;
use fusewire_core::ring::geometry;
use fusewire_core::{EventKind, Window};
use proptest::prelude::*;

const MS: u64 = 1_000_000;

/// One ring as a list of (epoch, kind) — every event ever recorded that is still
/// kept — with the ring's rules written the naive way.
#[derive(Clone, Debug)]
struct RingM {
    w: u64,
    n: u64,
    cur: u64,
    ev: Vec<(u64, usize)>,
}

impl RingM {
    fn new(window_ms: u64, buckets: u32, now: u64) -> Self {
        let (w, n) = geometry(window_ms * MS, buckets);
        RingM {
            w,
            n: n as u64,
            cur: now / w,
            ev: vec![],
        }
    }
    fn from(&self) -> u64 {
        (self.cur + 1).saturating_sub(self.n)
    }
    fn advance(&mut self, now: u64) {
        self.cur = self.cur.max(now / self.w);
        let from = self.from();
        self.ev.retain(|e| e.0 >= from);
    }
    fn record(&mut self, now: u64, kind: usize) {
        self.advance(now);
        self.ev.push((self.cur, kind));
    }
    /// Live count of `kind` as seen at `now` without moving (`health_at`).
    fn count_at(&self, now: u64, kind: Option<usize>) -> u64 {
        let top = self.cur.max(now / self.w);
        let from = (top + 1).saturating_sub(self.n);
        self.ev
            .iter()
            .filter(|e| e.0 >= from && e.0 <= self.cur && kind.is_none_or(|k| k == e.1))
            .count() as u64
    }
    /// `Ring::rebucket`: each live bucket moves by its start time.
    fn rebucket(&mut self, w2: u64, n2: u64) {
        if (w2, n2) == (self.w, self.n) {
            return;
        }
        let from = self.from();
        let cur2 = self.cur.saturating_mul(self.w) / w2;
        let from2 = (cur2 + 1).saturating_sub(n2);
        let w = self.w;
        self.ev = self
            .ev
            .iter()
            .filter(|e| e.0 >= from && e.0 <= self.cur)
            .map(|&(e, k)| (e.saturating_mul(w) / w2, k))
            .filter(|e| e.0 >= from2)
            .collect();
        self.cur = cur2;
        self.w = w2;
        self.n = n2;
    }
    /// `Ring::merge`: `other` re-bucketed into this geometry, then aligned by epoch.
    fn merge(&mut self, other: &RingM) {
        let mut o = other.clone();
        o.rebucket(self.w, self.n);
        self.cur = self.cur.max(o.cur);
        self.ev.extend(o.ev);
        let from = self.from();
        self.ev.retain(|e| e.0 >= from);
    }
}

#[derive(Clone, Debug)]
struct Model {
    counters: RingM,
    latency: RingM,
    cumulative: [u64; 13],
}

impl Model {
    fn new(cfg: &MetricsConfig, now: u64) -> Self {
        Model {
            counters: RingM::new(cfg.rolling_window_ms, cfg.rolling_buckets, now),
            latency: RingM::new(cfg.percentile_window_ms, cfg.percentile_buckets, now),
            cumulative: [0; 13],
        }
    }
}

fn cfg(rw: u64, rb: u32, pw: u64, pb: u32) -> MetricsConfig {
    MetricsConfig {
        rolling_window_ms: rw,
        rolling_buckets: rb,
        percentile_window_ms: pw,
        percentile_buckets: pb,
        percentiles_enabled: true,
    }
}

fn geometry_strategy() -> impl Strategy<Value = (u64, u32)> {
    (
        prop_oneof![Just(1_000u64), Just(3_000), Just(10_000), 1u64..20_000],
        1u32..12,
    )
}

#[derive(Clone, Debug)]
enum Op {
    Record {
        dt: i64,
        kind: usize,
    },
    Call {
        dt: i64,
        kind: usize,
    },
    Health {
        dt: i64,
    },
    Reset,
    Reconfigure {
        rw: (u64, u32),
        pw: (u64, u32),
    },
    Merge {
        rw: (u64, u32),
        pw: (u64, u32),
        offset: i64,
        events: Vec<(u64, usize)>,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let dt = prop_oneof![6 => -500i64..2_500, 1 => -30_000i64..60_000];
    prop_oneof![
        6 => (dt.clone(), 0usize..13).prop_map(|(dt, kind)| Op::Record { dt, kind }),
        4 => (dt.clone(), 0usize..3).prop_map(|(dt, kind)| Op::Call { dt, kind }),
        3 => dt.prop_map(|dt| Op::Health { dt }),
        1 => Just(Op::Reset),
        2 => (geometry_strategy(), geometry_strategy()).prop_map(|(rw, pw)| Op::Reconfigure { rw, pw }),
        2 => (geometry_strategy(), geometry_strategy(), -20_000i64..5_000,
              prop::collection::vec((0u64..3_000, 0usize..3), 0..10))
            .prop_map(|(rw, pw, offset, events)| Op::Merge { rw, pw, offset, events }),
    ]
}

fn at(now: u64, dt: i64) -> u64 {
    now.saturating_add_signed(dt * MS as i64)
}

fn check(w: &Window, m: &Model, now: u64) -> Result<(), TestCaseError> {
    let h = w.health_at(now);
    for k in EventKind::ALL {
        prop_assert_eq!(
            h.count(k),
            m.counters.count_at(now, Some(k.index())),
            "health_at {}",
            k.name()
        );
    }
    prop_assert_eq!(
        w.percentiles_at(now).count,
        m.latency.count_at(now, None),
        "latency count"
    );
    prop_assert_eq!(w.cumulative(), m.cumulative, "cumulative");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn window_matches_naive_model_under_reconfigure_reset_and_merge(
        rw in geometry_strategy(),
        pw in geometry_strategy(),
        start in 0u64..100_000,
        ops in prop::collection::vec(op(), 1..120),
    ) {
        let mut now = start * MS;
        let c = cfg(rw.0, rw.1, pw.0, pw.1);
        let mut w = Window::new(&c, now);
        let mut m = Model::new(&c, now);
        for op in ops {
            match op {
                Op::Record { dt, kind } => {
                    now = at(now, dt);
                    w.record(EventKind::ALL[kind], now);
                    m.counters.record(now, kind);
                    m.latency.advance(now);
                    m.cumulative[kind] += 1;
                }
                Op::Call { dt, kind } => {
                    now = at(now, dt);
                    w.record_call(EventKind::ALL[kind], 5 * MS, false, 1, now);
                    m.counters.record(now, kind);
                    m.latency.record(now, kind);
                    m.cumulative[kind] += 1;
                }
                Op::Health { dt } => {
                    now = at(now, dt);
                    let h = w.health(now);
                    m.counters.advance(now);
                    m.latency.advance(now);
                    for k in EventKind::ALL {
                        prop_assert_eq!(h.count(k), m.counters.count_at(now, Some(k.index())), "health {}", k.name());
                    }
                }
                Op::Reset => {
                    w.reset_counts();
                    m.counters.ev.clear();
                }
                Op::Reconfigure { rw, pw } => {
                    let c = cfg(rw.0, rw.1, pw.0, pw.1);
                    w.reconfigure(&c);
                    let (cw, cn) = geometry(c.rolling_window_ms * MS, c.rolling_buckets);
                    m.counters.rebucket(cw, cn as u64);
                    let (lw, ln) = geometry(c.percentile_window_ms * MS, c.percentile_buckets);
                    m.latency.rebucket(lw, ln as u64);
                }
                Op::Merge { rw, pw, offset, events } => {
                    let c = cfg(rw.0, rw.1, pw.0, pw.1);
                    let t0 = at(now, offset);
                    let mut o = Window::new(&c, t0);
                    let mut om = Model::new(&c, t0);
                    for (dt, kind) in events {
                        let t = t0 + dt * MS;
                        o.record_call(EventKind::ALL[kind], 5 * MS, false, 1, t);
                        om.counters.record(t, kind);
                        om.latency.record(t, kind);
                        om.cumulative[kind] += 1;
                    }
                    w.merge(&o);
                    m.counters.merge(&om.counters);
                    m.latency.merge(&om.latency);
                    for (a, b) in m.cumulative.iter_mut().zip(om.cumulative) {
                        *a += b;
                    }
                }
            }
            check(&w, &m, now)?;
        }
    }
}
