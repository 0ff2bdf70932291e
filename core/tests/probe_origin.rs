//! A probe the local breaker issued while a worker's view did not decide (its store
//! requests failing) never settles the store's lease of the same generation and slot,
//! which another worker holds (found by review: its cancel ended that lease, and a
//! second probe ran fleet-wide while the first still did, N = 1).

mod common;
use common::*;
use fusewire_core::shared::codec::{decode, Kind};
use fusewire_core::shared::memory::Rules;
use fusewire_core::shared::{KeyState, OwnedAnswer};
use fusewire_core::*;

const JSON: &str = r#"{"breaker": {"error_percentage": {"request_volume_threshold": 5},
    "half_open": {"probe_timeout_ms": 60000}}, "execution": {"timeout_ms": 20000}}"#;

/// Worker `w`'s store requests all fail (a partition of that worker only).
fn drive_failing(h: &mut Host, w: usize) {
    let now = h.now_of(w);
    for _ in 0..16 {
        while let Some(io) = h.engines[w].poll_io(now, 0) {
            let id = io.id;
            h.engines[w].io_done(id, OwnedAnswer::Failed(5).as_answer(), now, 0);
        }
        while h.engines[w].poll(now, 0).is_some() {}
        if !h.engines[w].has_io() {
            break;
        }
    }
}

/// `ms` of time in steps of 100 ms; worker 1 cut off from the store if `partitioned`.
fn step(h: &mut Host, ms: u64, partitioned: bool) {
    let end = h.now + ms * MS;
    while h.now < end {
        h.now = (h.now + 100 * MS).min(end);
        h.deliver();
        h.drive(0);
        h.deliver();
        if partitioned {
            drive_failing(h, 1)
        } else {
            h.drive(1);
            h.deliver();
        }
    }
}

/// The stored breaker.
fn stored(h: &Host, k: KeyId) -> BreakerState {
    let sk = h.engines[0].store_key(k).unwrap().to_string();
    let s: KeyState = decode(Kind::KeyState, h.store.raw_get(&sk).unwrap()).unwrap();
    s.breaker
}

/// Starts a call on worker `w`, letting time pass (store answers) until one runs.
fn try_start(h: &mut Host, w: usize, k: KeyId) -> Option<Permit> {
    for _ in 0..10 {
        let s = h.start(w, k);
        h.deliver();
        if let Start::Running(p) = s {
            return Some(p);
        }
        step(h, 100, false);
    }
    None
}

#[test]
fn a_local_probe_never_settles_another_workers_store_lease() {
    for mode in [
        Mode::Shared(Rules::Envoy, 2),
        Mode::Shared(Rules::Kong, 2),
        Mode::Async(2),
    ] {
        let mut h = Host::new(mode, JSON);
        let keys = h.keys("k");
        h.deliver();
        for _ in 0..6 {
            let _ = h.call(0, keys[0], Outcome::Failure);
            h.deliver();
        }
        step(&mut h, 1_500, false);
        assert_eq!(stored(&h, keys[0]).phase(), Phase::Open, "{mode:?}");
        assert!(
            try_start(&mut h, 1, keys[1]).is_none(),
            "{mode:?}: worker 1 sees it open"
        );
        // Worker 1 is cut off past `stale_ms`: its local breaker decides.
        step(&mut h, 11_000, true);
        // Worker 0 takes the fleet's only probe lease; its probe keeps running.
        let p0 = try_start(&mut h, 0, keys[0]).expect("worker 0 probes");
        let b = stored(&h, keys[0]);
        assert_eq!(
            (b.phase(), b.probes_issued()),
            (Phase::HalfOpen, 1),
            "{mode:?}"
        );
        let (generation, lease) = (b.generation(), b.probe_leases()[0]);
        assert_ne!(lease, 0, "{mode:?}");
        // Worker 1, still cut off, half-opens locally into the same generation and
        // runs a probe of its own in the same slot.
        let now1 = h.now_of(1);
        let s1 = h.engines[1].start(keys[1], now1, 0);
        drive_failing(&mut h, 1);
        let Start::Running(p1) = s1 else {
            panic!("{mode:?}: worker 1's local probe: {s1:?}")
        };
        // The store answers worker 1 again (past an asynchronous store's backoff);
        // its probe's caller goes away.
        let heal = if matches!(mode, Mode::Async(_)) {
            10_000
        } else {
            1_000
        };
        step(&mut h, heal, false);
        let _ = h.complete(1, p1, Outcome::Cancelled);
        h.deliver();
        step(&mut h, 300, false);
        let b = stored(&h, keys[0]);
        assert_eq!(
            (b.generation(), b.probes_issued(), b.probe_leases()[0]),
            (generation, 1, lease),
            "{mode:?}: worker 0's lease stays out"
        );
        assert!(
            try_start(&mut h, 1, keys[1]).is_none(),
            "{mode:?}: no second probe while worker 0's runs (N = 1)"
        );
        // Worker 0's probe fails: the fleet reopens.
        let _ = h.complete(0, p0, Outcome::Failure);
        h.deliver();
        step(&mut h, 300, false);
        assert_eq!(stored(&h, keys[0]).phase(), Phase::Open, "{mode:?}");
        assert!(try_start(&mut h, 1, keys[1]).is_none(), "{mode:?}");
        assert_eq!(h.phase(1, keys[1]), Phase::Open, "{mode:?}");
    }
}
