//! Multi-worker behaviour of the shared layer on an in-memory store with Envoy
//! (lenient) and Kong (strict) CAS rules, plus merge properties.

use super::codec::{self, Kind};
use super::handle::*;
use super::state::*;
use super::store::{MemoryStore, SharedStore};
use super::window::{Event, SharedWindow};
use crate::config::Config;
use crate::time::ms_to_ns as ms;
use crate::{Phase, Rejection, TransitionReason};
use proptest::prelude::*;

/// The cluster's injected randomness: `unit_f64` ≈ 0.76 for both halves, the draw
/// the old `u32` constant 7 gave the throttle (752 ‰), so feeding calls are admitted
/// while the throttle's probability stays below that.
const RAND: u64 = 0xC28F_5C28_C28F_5C28;

fn params(json: &str) -> BreakerParams {
    BreakerParams::from_config(&Config::from_json(json).expect("valid test config"))
}

struct Cluster {
    store: MemoryStore,
    workers: Vec<KeyHandle>,
    sp: SharedParams,
    p: BreakerParams,
    seq: u64,
}

impl Cluster {
    fn new(strict: bool, n: usize, p: BreakerParams) -> Self {
        Cluster {
            store: MemoryStore::new(strict),
            workers: (0..n).map(|_| KeyHandle::new("svc", &p)).collect(),
            sp: SharedParams::default(),
            p,
            seq: 0,
        }
    }

    /// Admission on worker `w` at `now_ms` (test times are in ms).
    fn admit(&mut self, w: usize, now_ms: u64) -> Admission {
        self.seq += 1;
        let (a, _) = self.workers[w].admit(&mut self.store, &self.sp, &self.p, ms(now_ms), RAND);
        a
    }

    /// Admits and completes one call on worker `w`; returns whether it was admitted.
    fn call(&mut self, w: usize, now_ms: u64, outcome: Outcome) -> bool {
        let now = ms(now_ms);
        match self.admit(w, now_ms) {
            Admission::Allowed { generation, probe } => {
                let h = &mut self.workers[w];
                if let Some(slot) = probe {
                    h.probe_done(
                        &mut self.store,
                        &self.sp,
                        &self.p,
                        Probe { generation, slot },
                        outcome,
                        ms(1),
                        now,
                        RAND,
                    );
                }
                if h.record(&self.p, generation, outcome, ms(1), now) {
                    h.flush(&mut self.store, &self.sp, &self.p, now, RAND);
                }
                true
            }
            Admission::Rejected(_) => {
                self.workers[w].record_rejection(now, false);
                false
            }
        }
    }

    fn tick(&mut self, now_ms: u64) {
        let now = ms(now_ms);
        for (i, h) in self.workers.iter_mut().enumerate() {
            h.tick(&mut self.store, &self.sp, &self.p, i as u64 + 1, now, RAND);
        }
    }

    fn shared(&mut self) -> KeyState {
        let bytes = self
            .store
            .raw_get("fusewire/v1/state/svc")
            .expect("state written");
        codec::decode(Kind::KeyState, bytes).expect("decodes")
    }
}

const HYSTRIX: &str = r#"{"breaker":{"half_open":{"permitted_probes":2,"success_threshold":2}}}"#;

fn both_modes(f: impl Fn(bool)) {
    f(false);
    f(true);
}

#[test]
fn trips_exactly_at_volume_threshold_across_four_workers() {
    both_modes(|strict| {
        let mut c = Cluster::new(strict, 4, params(HYSTRIX));
        for i in 0..19 {
            assert!(c.call(i % 4, 1000, Outcome::Failure), "call {i} admitted");
        }
        assert_eq!(c.shared().phase(), Phase::Closed, "19 calls < volume 20");
        assert!(c.call(19 % 4, 1000, Outcome::Failure));
        assert_eq!(c.shared().phase(), Phase::Open);
        // Every worker rejects on its very next request.
        for w in 0..4 {
            assert_eq!(
                c.admit(w, 1001),
                Admission::Rejected(Rejection::Open),
                "worker {w}"
            );
        }
    });
}

#[test]
fn below_threshold_never_trips_with_batched_successes() {
    both_modes(|strict| {
        let mut c = Cluster::new(strict, 4, params("{}"));
        // 40 % errors, round robin; successes are only written when hot or on tick.
        let mut now = 0;
        for i in 0..200u64 {
            now += 10;
            let o = if i % 5 < 2 {
                Outcome::Failure
            } else {
                Outcome::Success
            };
            assert!(c.call((i % 4) as usize, now, o), "call {i} admitted");
            if i % 25 == 0 {
                c.tick(now);
            }
        }
        assert_eq!(c.shared().phase(), Phase::Closed);
    });
}

#[test]
fn healthy_traffic_writes_only_on_tick() {
    let mut c = Cluster::new(false, 4, params("{}"));
    for i in 0..1000 {
        c.call(i % 4, 5, Outcome::Success);
    }
    assert_eq!(c.store.writes, 0);
    c.tick(10);
    assert_eq!(c.store.writes, 4);
    assert_eq!(c.shared().snapshot(ms(10)).success, 1000);
}

#[test]
fn half_open_admits_exactly_the_permitted_probes_then_closes() {
    both_modes(|strict| {
        let mut c = Cluster::new(strict, 4, params(HYSTRIX));
        for i in 0..20 {
            c.call(i % 4, 0, Outcome::Failure);
        }
        assert_eq!(c.shared().phase(), Phase::Open);
        assert_eq!(c.admit(0, 4_999), Admission::Rejected(Rejection::Open));
        // After the sleep window: many attempts from every worker, exactly 2 probes.
        let mut probes = vec![];
        for i in 0..40 {
            if let Admission::Allowed { generation, probe } = c.admit(i % 4, 5_000 + i as u64) {
                probes.push((i % 4, generation, probe.expect("a probe")));
            }
        }
        assert_eq!(probes.len(), 2, "{probes:?}");
        assert_eq!(c.shared().phase(), Phase::HalfOpen);
        for (w, generation, slot) in probes {
            let h = &mut c.workers[w];
            let probe = Probe { generation, slot };
            h.probe_done(
                &mut c.store,
                &c.sp,
                &c.p,
                probe,
                Outcome::Success,
                1,
                5_100,
                7,
            );
        }
        assert_eq!(c.shared().phase(), Phase::Closed);
        assert!(c.shared().snapshot(ms(5_100)).is_empty());
        for w in 0..4 {
            assert!(matches!(
                c.admit(w, 5_200),
                Admission::Allowed { probe: None, .. }
            ));
        }
    });
}

#[test]
fn hung_probe_expires_and_reopens_and_late_results_are_ignored() {
    let p = params(r#"{"breaker":{"half_open":{"probe_timeout_ms":1000}}}"#);
    let mut c = Cluster::new(false, 4, p);
    for i in 0..20 {
        c.call(i % 4, 0, Outcome::Failure);
    }
    let Admission::Allowed { generation, probe } = c.admit(1, 5_000) else {
        panic!("probe expected")
    };
    let slot = probe.expect("probe");
    assert_eq!(
        c.admit(2, 5_500),
        Admission::Rejected(Rejection::ProbesExhausted)
    );
    // The probe hangs: at its deadline the next tick reopens the breaker.
    c.tick(6_000);
    let s = c.shared();
    assert_eq!(s.phase(), Phase::Open);
    assert_eq!(s.breaker.open_step(), 2);
    // Its late success belongs to an earlier generation: ignored.
    let h = &mut c.workers[1];
    let probe = Probe { generation, slot };
    h.probe_done(
        &mut c.store,
        &c.sp,
        &c.p,
        probe,
        Outcome::Success,
        1,
        6_001,
        7,
    );
    assert_eq!(c.shared().phase(), Phase::Open);
    // A late failure from before the trip is ignored too.
    let old = c.shared().breaker.generation() - 3;
    c.workers[0].record(&c.p, old, Outcome::Failure, ms(1), ms(6_002));
    c.workers[0].flush(&mut c.store, &c.sp, &c.p, ms(6_002), 7);
    assert_eq!(c.shared().snapshot(ms(6_002)).failure, 20);
}

#[test]
fn consecutive_failures_across_workers_reset_by_any_success() {
    let p = params(
        r#"{"breaker":{"error_percentage":{"enabled":false},
            "consecutive_failures":{"enabled":true,"threshold":5}}}"#,
    );
    both_modes(|strict| {
        let mut c = Cluster::new(strict, 4, p.clone());
        for i in 0..4 {
            c.call(i, 0, Outcome::Failure);
        }
        c.call(0, 1, Outcome::Success);
        for i in 0..4 {
            c.call(i, 2, Outcome::Failure);
        }
        assert_eq!(c.shared().phase(), Phase::Closed);
        c.call(1, 3, Outcome::Timeout);
        assert_eq!(c.shared().phase(), Phase::Open);
    });
}

#[test]
fn exponential_open_schedule_grows_and_resets_after_close() {
    let p = params(
        r#"{"breaker":{"open":{"schedule":"exponential","sleep_window_ms":1000,"max_ms":3000}}}"#,
    );
    let mut c = Cluster::new(false, 2, p);
    for i in 0..20 {
        c.call(i % 2, 0, Outcome::Failure);
    }
    assert_eq!(c.shared().breaker.open_until(), ms(1000));
    assert!(c.call(0, 1000, Outcome::Failure)); // probe fails
    assert_eq!(c.shared().breaker.open_until(), ms(3000));
    assert!(c.call(1, 3000, Outcome::Failure));
    assert_eq!(c.shared().breaker.open_until(), ms(3000 + 3000)); // capped
    assert!(c.call(1, 6000, Outcome::Success));
    assert_eq!(c.shared().phase(), Phase::Closed);
    assert_eq!(c.shared().breaker.open_step(), 0);
}

#[test]
fn bulkhead_limit_holds_across_workers_and_crashed_worker_is_reclaimed() {
    both_modes(|strict| {
        let p = params("{}");
        let mut c = Cluster::new(strict, 4, p);
        let sp = SharedParams {
            lease_ttl_ms: 1000,
            heartbeat_ms: 300,
            ..Default::default()
        };
        c.sp = sp;
        let mut held = [0u32; 4];
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        for step in 0..2000u64 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let w = (rng % 4) as usize;
            if rng.is_multiple_of(3) && held[w] > 0 {
                c.workers[w].release_slot(&mut c.store, &c.sp, w as u64 + 1, ms(step));
                held[w] -= 1;
            } else {
                let (s, _) =
                    c.workers[w].acquire_slot(&mut c.store, &c.sp, w as u64 + 1, 5, ms(step));
                if s == Slot::Granted {
                    held[w] += 1;
                }
            }
            assert!(held.iter().sum::<u32>() <= 5, "step {step}: {held:?}");
            let global = c.workers[0].global_in_flight(&mut c.store, ms(step), 1000);
            assert_eq!(global, Some(held.iter().sum::<u32>() as u64));
        }
        // Worker 3 crashes holding slots; the others release everything.
        for (w, h) in held.iter_mut().enumerate().take(3) {
            while *h > 0 {
                c.workers[w].release_slot(&mut c.store, &c.sp, w as u64 + 1, ms(2000));
                *h -= 1;
            }
        }
        let crashed = held[3] as u64;
        assert_eq!(
            c.workers[0].global_in_flight(&mut c.store, ms(2000), 1000),
            Some(crashed)
        );
        // Past the lease TTL (last heartbeat ≤ 1999) its slots no longer count.
        assert_eq!(
            c.workers[0].global_in_flight(&mut c.store, ms(3000), 1000),
            Some(0)
        );
        let (s, _) = c.workers[0].acquire_slot(&mut c.store, &c.sp, 1, 5, ms(3000));
        assert_eq!(s, Slot::Granted);
    });
}

#[test]
fn corrupt_truncated_and_future_state_is_reported_and_replaced() {
    let p = params("{}");
    for damage in 0..3 {
        let mut c = Cluster::new(false, 2, p.clone());
        c.call(0, 0, Outcome::Failure);
        let mut bytes = c
            .store
            .raw_get("fusewire/v1/state/svc")
            .expect("written")
            .to_vec();
        match damage {
            0 => bytes[6] ^= 0x40,
            1 => bytes.truncate(5),
            _ => bytes[2] = codec::SCHEMA_VERSION + 1,
        }
        c.store.raw_set("fusewire/v1/state/svc", &bytes);
        let (a, r) = c.workers[1].admit(&mut c.store, &c.sp, &c.p, ms(1), 7);
        assert!(matches!(a, Admission::Allowed { .. }));
        assert!(
            matches!(r.issue, Some(Issue::Invalid(_))),
            "{damage}: {r:?}"
        );
        // The next write replaces it with a valid state.
        c.call(1, 2, Outcome::Failure);
        assert_eq!(c.shared().snapshot(ms(2)).failure, 1);
    }
}

#[test]
fn reload_with_new_window_shape_keeps_breaker_phase() {
    let mut c = Cluster::new(false, 1, params("{}"));
    for _ in 0..20 {
        c.call(0, 0, Outcome::Failure);
    }
    let p2 = params(r#"{"metrics":{"rolling_window_ms":20000,"rolling_buckets":20}}"#);
    c.p = p2.clone();
    c.workers[0].reconfigure(&p2);
    assert_eq!(c.admit(0, 10), Admission::Rejected(Rejection::Open));
    let mut s = c.shared();
    assert!(s.conform(&p2));
    assert_eq!(s.phase(), Phase::Open);
}

#[test]
fn forced_and_metrics_only_modes() {
    let mut c = Cluster::new(false, 1, params(r#"{"breaker":{"mode":"forced_open"}}"#));
    assert_eq!(c.admit(0, 0), Admission::Rejected(Rejection::ForcedOpen));
    let mut c = Cluster::new(false, 1, params(r#"{"breaker":{"mode":"metrics_only"}}"#));
    for _ in 0..25 {
        assert!(c.call(0, 0, Outcome::Failure));
    }
    assert_eq!(
        c.shared().phase(),
        Phase::Open,
        "metrics-only reports the trip"
    );
    assert!(c.call(0, 1, Outcome::Failure), "but still admits");
}

fn window_from(events: &[(u64, u8)]) -> SharedWindow {
    let mut w = SharedWindow::new(100, 8);
    for &(t, e) in events {
        let e = match e % 4 {
            0 => Event::Success,
            1 => Event::Failure,
            2 => Event::Timeout,
            _ => Event::Rejected,
        };
        w.record(t, e);
    }
    w
}

fn events() -> impl Strategy<Value = Vec<(u64, u8)>> {
    proptest::collection::vec((0u64..3000, any::<u8>()), 0..40)
}

proptest! {
    #[test]
    fn window_merge_is_commutative(a in events(), b in events()) {
        let (wa, wb) = (window_from(&a), window_from(&b));
        let mut ab = wa.clone();
        ab.merge(&wb);
        let mut ba = wb.clone();
        ba.merge(&wa);
        prop_assert_eq!(ab, ba);
    }

    #[test]
    fn window_merge_is_associative(a in events(), b in events(), c in events()) {
        let (wa, wb, wc) = (window_from(&a), window_from(&b), window_from(&c));
        let mut left = wa.clone();
        left.merge(&wb);
        left.merge(&wc);
        let mut bc = wb.clone();
        bc.merge(&wc);
        let mut right = wa.clone();
        right.merge(&bc);
        prop_assert_eq!(left, right);
    }

    #[test]
    fn merging_split_recordings_equals_recording_all(events in events(), split in any::<u64>()) {
        // Events recorded in time order, spread over two workers, then merged, give
        // the same snapshot as one window that saw them all.
        let mut sorted = events.clone();
        sorted.sort_by_key(|e| e.0);
        let all = window_from(&sorted);
        let (x, y): (Vec<_>, Vec<_>) =
            sorted.iter().enumerate().partition(|(i, _)| (split >> (i % 64)) & 1 == 0);
        let x: Vec<_> = x.into_iter().map(|(_, e)| *e).collect();
        let y: Vec<_> = y.into_iter().map(|(_, e)| *e).collect();
        let mut merged = window_from(&x);
        merged.merge(&window_from(&y));
        let now = sorted.last().map(|e| e.0).unwrap_or(0);
        prop_assert_eq!(merged.snapshot(now), all.snapshot(now));
    }

    #[test]
    fn streak_composition_is_associative(a in any::<(bool, u8)>(), b in any::<(bool, u8)>(), c in any::<(bool, u8)>(), start in 0u32..100) {
        let s = |(r, e): (bool, u8)| Streak { reset: r, errors: e as u32 };
        let (a, b, c) = (s(a), s(b), s(c));
        prop_assert_eq!(a.then(&b).then(&c), a.then(&b.then(&c)));
        prop_assert_eq!(a.then(&b).apply(start), b.apply(a.apply(start)));
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = codec::decode::<KeyState>(Kind::KeyState, &bytes);
        let _ = codec::decode::<super::SlotLedger>(Kind::SlotLedger, &bytes);
    }

    #[test]
    fn state_roundtrips(fails in 0u32..50, now in 0u64..1_000_000) {
        let p = params("{}");
        let now = ms(now);
        let mut s = KeyState::new(&p);
        for _ in 0..fails { s.window.record(now, Event::Failure); }
        let mut d = Delta::new(0, p.bucket_ns, p.buckets);
        d.window.record(now, Event::Failure);
        s.merge_delta(&p, &d, now, 3);
        let bytes = codec::encode(Kind::KeyState, &s).expect("encodes");
        prop_assert!(bytes.len() < 200, "compact: {} bytes", bytes.len());
        prop_assert_eq!(codec::decode::<KeyState>(Kind::KeyState, &bytes), Ok(s));
    }
}

#[test]
fn store_contract_matches_envoy_and_kong() {
    let mut lenient = MemoryStore::new(false);
    lenient
        .set("k", b"a", 99)
        .expect("absent key inserted even with a cas (Envoy)");
    lenient.set("k", b"b", 0).expect("cas 0 overwrites (Envoy)");
    let mut strict = MemoryStore::new(true);
    assert!(strict.set("k", b"a", 99).is_err());
    strict.set("k", b"a", 0).expect("create");
    assert!(
        strict.set("k", b"b", 0).is_err(),
        "cas 0 on an existing key (Kong)"
    );
}

#[test]
fn adaptive_throttle_sheds_in_proportion_and_excludes_its_own_rejections() {
    let p = params(
        r#"{"breaker":{"error_percentage":{"enabled":false},
            "adaptive_throttle":{"enabled":true,"k":1.5}}}"#,
    );
    let mut c = Cluster::new(false, 2, p);
    // 100 calls, 20 successes: p = (100 - 1.5·20) / 101 ≈ 69 %.
    for i in 0..100 {
        let o = if i % 5 == 0 {
            Outcome::Success
        } else {
            Outcome::Failure
        };
        assert!(c.call(i % 2, 10, o));
    }
    c.tick(20);
    let mut shed = 0;
    for r in 0..1000u32 {
        let (a, _) = c.workers[0].admit(
            &mut c.store,
            &c.sp,
            &c.p,
            ms(30),
            (r as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        if matches!(a, Admission::Rejected(Rejection::Throttled)) {
            shed += 1;
            c.workers[0].record_rejection(ms(30), false);
        }
    }
    assert!((600..780).contains(&shed), "shed {shed} of 1000");
    // Its own rejections are short-circuits: never fed back into requests.
    c.tick(40);
    let s = c.shared();
    assert_eq!(s.snapshot(ms(40)).total(), 100);
    assert!(s.snapshot(ms(40)).short_circuited >= 600);
    assert_eq!(s.phase(), Phase::Closed);
}

#[test]
fn slow_start_ramps_admissions_after_close() {
    let p = params(r#"{"breaker":{"slow_start":{"ramp_ms":1000,"initial_percentage":10}}}"#);
    let mut c = Cluster::new(false, 1, p);
    for _ in 0..20 {
        c.call(0, 0, Outcome::Failure);
    }
    assert!(c.call(0, 5_000, Outcome::Success), "probe closes it");
    assert_eq!(c.shared().phase(), Phase::Closed);
    let admitted = |c: &mut Cluster, now: u64| {
        (0..1000u32)
            .filter(|r| {
                let (a, _) = c.workers[0].admit(
                    &mut c.store,
                    &c.sp,
                    &c.p,
                    ms(now),
                    (*r as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                );
                matches!(a, Admission::Allowed { .. })
            })
            .count()
    };
    let early = admitted(&mut c, 5_000);
    let mid = admitted(&mut c, 5_500);
    let done = admitted(&mut c, 6_000);
    assert!((50..200).contains(&early), "{early}");
    assert!((450..650).contains(&mid), "{mid}");
    assert_eq!(done, 1000);
}

#[test]
fn skewed_and_backward_clocks_between_workers_still_trip_and_reject() {
    both_modes(|strict| {
        let mut c = Cluster::new(strict, 4, params(HYSTRIX));
        // Worker clocks differ by up to ±400 ms, and worker 2 steps back by 3 s.
        let skew = [0i64, 400, -3_000, -400];
        let t = |w: usize, base: u64| (base as i64 + 10_000 + skew[w]) as u64;
        for i in 0..20 {
            assert!(c.call(i % 4, t(i % 4, 100), Outcome::Failure));
        }
        assert_eq!(c.shared().phase(), Phase::Open, "all 20 failures counted");
        for w in 0..4 {
            assert_eq!(
                c.admit(w, t(w, 200)),
                Admission::Rejected(Rejection::Open),
                "worker {w}"
            );
        }
        // After the sleep window by every clock, probes flow and close it.
        for w in 0..4 {
            c.call(w, t(w, 9_000), Outcome::Success);
        }
        assert_eq!(c.shared().phase(), Phase::Closed);
    });
}

#[test]
fn slow_probe_is_a_failed_probe_and_bad_request_probe_succeeds() {
    // The core's semantics: a slow probe reopens; a bad request is a successful probe.
    let p = params(
        r#"{"breaker":{"slow_call":{"enabled":true,"duration_threshold_ms":100,
            "rate_threshold_percentage":100,"request_volume_threshold":1000}}}"#,
    );
    let mut c = Cluster::new(false, 1, p);
    for _ in 0..20 {
        c.call(0, 0, Outcome::Failure);
    }
    let probe_at = |c: &mut Cluster, now: u64, outcome: Outcome, latency_ms: u64| {
        let Admission::Allowed { generation, probe } = c.admit(0, now) else {
            panic!("probe expected at {now}")
        };
        let probe = Probe {
            generation,
            slot: probe.expect("a probe"),
        };
        let h = &mut c.workers[0];
        h.probe_done(
            &mut c.store,
            &c.sp,
            &c.p,
            probe,
            outcome,
            ms(latency_ms),
            ms(now),
            RAND,
        )
    };
    let r = probe_at(&mut c, 5_000, Outcome::Success, 150);
    assert_eq!(
        r.transition.map(|t| t.reason),
        Some(TransitionReason::ProbeFailed)
    );
    assert_eq!(c.shared().phase(), Phase::Open);
    let r = probe_at(&mut c, 15_000, Outcome::BadRequest, 5);
    assert_eq!(r.transition.map(|t| t.to), Some(Phase::Closed));
}

#[test]
fn encoded_size_of_typical_states() {
    // A closed key with 10 busy 1 s buckets, an open one and a half-open one with a
    // probe out, on a wall clock in ns (the shared-state schema v1 with ms times:
    // 146, 111 and 121 bytes).
    let p = params("{}");
    let now0 = ms(1_764_000_000_000);
    let mut s = KeyState::new(&p);
    for b in 0..10 {
        let t = now0 + ms(b * 1000);
        for i in 0..100 {
            s.window.record(t + ms(i), Event::Success);
        }
        for i in 0..3 {
            s.window.record(t + ms(i), Event::Failure);
        }
    }
    let closed = codec::encode(Kind::KeyState, &s).expect("encodes").len();
    let mut o = KeyState::new(&p);
    let mut d = Delta::new(0, p.bucket_ns, p.buckets);
    for _ in 0..20 {
        d.window.record(now0, Event::Failure);
    }
    o.merge_delta(&p, &d, now0, RAND);
    assert_eq!(o.phase(), Phase::Open);
    let open = codec::encode(Kind::KeyState, &o).expect("encodes").len();
    let mut h = o.clone();
    let (r, _) = h.admit(&p, now0 + ms(5_000), RAND);
    assert!(matches!(r, Ok((_, 0, _))), "{r:?}");
    let bytes = codec::encode(Kind::KeyState, &h).expect("encodes");
    assert_eq!(
        codec::decode::<KeyState>(Kind::KeyState, &bytes),
        Ok(h.clone())
    );
    let half_open = bytes.len();
    println!("encoded KeyState: closed {closed} B, open {open} B, half-open {half_open} B");
    assert!(closed <= 200 && open <= 200 && half_open <= 200);
}
