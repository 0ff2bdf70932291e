//! A stored state whose times no config allows — an open period or probe lease ending
//! far past what the reader's config gives (four times its longest, and a minute more)
//! — is brought in when read, and written back so: found by a security review, one
//! forged write (`open_until` = `u64::MAX`, the checksum recomputed) kept a whole
//! fleet open for good, every process writing it back. A peer's longer period, on
//! another config during a rollout, stands (found by the review of that fix). So are
//! a warm-up ending past that bound of the reader's `warm_up_ms`, a slow-start ramp
//! starting after the reader's now (a writer's clock ahead), and probes counted out
//! that no lease holds.

mod common;
use common::*;
use fusewire_core::shared::codec::{self, Kind};
use fusewire_core::shared::memory::Rules;
use fusewire_core::shared::KeyState;
use fusewire_core::*;

const CFG: &str = r#"{"breaker": {"error_percentage": {"request_volume_threshold": 5}, "open": {"sleep_window_ms": 5000}}}"#;

/// Two workers' key `k`, warmed: the host, the keys, the store key and its state.
fn warmed(mode: Mode) -> (Host, Vec<KeyId>, String, KeyState) {
    let mut h = Host::new(mode, CFG);
    let keys = h.keys("k");
    h.warm(&keys);
    let sk = h.engines[0].store_key(keys[0]).expect("bound").to_string();
    let s = codec::decode(Kind::KeyState, h.store.raw_get(&sk).expect("written")).expect("valid");
    (h, keys, sk, s)
}

#[test]
fn a_forged_open_period_ends_when_the_readers_config_says() {
    for mode in [
        Mode::Async(2),
        Mode::Shared(Rules::Envoy, 2),
        Mode::Shared(Rules::Kong, 2),
    ] {
        let (mut h, keys, sk, mut s) = warmed(mode);
        // Someone who can write the key opens it for a year, checksum and all.
        let year = config(r#"{"breaker": {"open": {"sleep_window_ms": 31536000000}}}"#);
        let mut window = Window::new(&year.metrics, h.now);
        s.breaker
            .force(&year.breaker, &mut window, Phase::Open, h.now, 0)
            .expect("opened");
        h.store.raw_set(&sk, &codec::encode(Kind::KeyState, &s));
        h.advance(1_000);
        for (w, &k) in keys.iter().enumerate() {
            assert!(!h.call(w, k, Outcome::Success), "{mode:?} worker {w}: open");
            h.deliver();
            let wait = h.engines[w].retry_after(k, h.now).expect("open");
            assert!(
                wait <= 65_000 * MS,
                "{mode:?} worker {w}: {wait} ns, not a year"
            );
        }
        // Written back brought in: the store heals.
        h.advance(1_000);
        let stored: KeyState =
            codec::decode(Kind::KeyState, h.store.raw_get(&sk).expect("written")).expect("valid");
        assert!(
            stored.breaker.open_until() <= h.now + 65_000 * MS,
            "{mode:?}: the store holds the forged period still"
        );
        // The fleet probes once that bound is over, and closes.
        h.advance(64_500);
        let mut probed = 0;
        for _ in 0..20 {
            probed += u32::from(h.call(0, keys[0], Outcome::Success));
            h.deliver();
            h.advance(100);
        }
        assert!(probed >= 1, "{mode:?}: no probe went through");
        h.advance(2_000);
        for (w, &k) in keys.iter().enumerate() {
            assert!(
                h.call(w, k, Outcome::Success),
                "{mode:?} worker {w}: admitted"
            );
            h.deliver();
            assert_eq!(h.phase(w, k), Phase::Closed, "{mode:?} worker {w}");
        }
    }
}

#[test]
fn a_peers_longer_open_period_stands() {
    for mode in [Mode::Async(2), Mode::Shared(Rules::Envoy, 2)] {
        let mut h = Host::new(mode, CFG);
        let keys = h.keys("k");
        h.warm(&keys);
        // Worker 0 runs the new config (open 60 s), worker 1 still the old (5 s).
        let new = config(
            r#"{"breaker": {"error_percentage": {"request_volume_threshold": 5}, "open": {"sleep_window_ms": 60000}}}"#,
        );
        h.engines[0].set_policy(h.policy, new).expect("valid");
        for _ in 0..40 {
            if !h.call(0, keys[0], Outcome::Failure) {
                break;
            }
            h.deliver();
        }
        assert_eq!(h.phase(0, keys[0]), Phase::Open, "{mode:?}");
        h.advance(1_000);
        assert!(
            !h.call(1, keys[1], Outcome::Success),
            "{mode:?}: worker 1 refuses"
        );
        h.deliver();
        h.advance(1_000);
        for (w, &k) in keys.iter().enumerate() {
            let wait = h.engines[w].retry_after(k, h.now).expect("open");
            assert!(wait > 55_000 * MS, "{mode:?} worker {w}: cut to {wait} ns");
        }
    }
}

#[test]
fn a_forged_window_past_any_clock_is_reset() {
    // A stored window whose current bucket starts past u64::MAX ns (no clock reads
    // that) is damaged bytes: reset, and the fleet trips on what follows (found by a
    // review: one at epoch u64::MAX kept the breaker closed through 40 failures).
    for mode in [
        Mode::Async(2),
        Mode::Shared(Rules::Envoy, 2),
        Mode::Shared(Rules::Kong, 2),
    ] {
        let (mut h, keys, sk, mut s) = warmed(mode);
        let (w, n) = (s.window.0.width_ns(), s.window.0.len());
        s.window.0 =
            fusewire_core::ring::Ring::from_parts(w, u64::MAX, vec![Default::default(); n]);
        let forged = codec::encode(Kind::KeyState, &s);
        assert!(
            codec::decode::<KeyState>(Kind::KeyState, &forged).is_err(),
            "refused when read"
        );
        h.store.raw_set(&sk, &forged);
        let mut opened = false;
        for _ in 0..40 {
            for (w, &k) in keys.iter().enumerate() {
                let _ = h.call(w, k, Outcome::Failure);
                h.deliver();
            }
            h.advance(100);
            opened |= keys
                .iter()
                .enumerate()
                .any(|(w, &k)| h.phase(w, k) == Phase::Open);
        }
        assert!(opened, "{mode:?}: 80 failures trip it");
    }
}

const S: i64 = 1_000 * MS as i64;

fn modes() -> [Mode; 3] {
    [
        Mode::Shared(Rules::Envoy, 2),
        Mode::Shared(Rules::Kong, 2),
        Mode::Async(2),
    ]
}

/// A key made by a worker whose clock is an hour ahead, with a 10 s warm-up
/// (opossum's `allowWarmUp`): a warm-up ending past the bound (70 s for 10 s) of a
/// reader's clock ends there (found by review: 200 of 200 failing calls ran an hour
/// on, the breaker closed; 6 without the skew).
#[test]
fn a_warm_up_from_a_clock_ahead_ends_within_the_bound() {
    let json = r#"{"breaker": {"warm_up_ms": 10000, "error_percentage": {"request_volume_threshold": 5}}}"#;
    for mode in modes() {
        let mut h = Host::new(mode, json);
        h.skew[1] = 3_600 * S;
        let _k1 = h.key(1, "k");
        h.deliver();
        h.advance(200);
        let k0 = h.key(0, "k");
        h.deliver();
        h.advance(75_000);
        let mut ran = 0;
        for _ in 0..200 {
            ran += u32::from(h.call(0, k0, Outcome::Failure));
            h.deliver();
            h.advance(50);
        }
        assert!(ran < 50, "{mode:?}: {ran} of 200 failing calls ran");
    }
}

/// A valid state whose warm-up ends at the end of time is brought in.
#[test]
fn a_forged_warm_up_ends_when_the_readers_config_says() {
    for mode in modes() {
        let (mut h, keys, sk, mut s) = warmed(mode);
        let year = config(r#"{"breaker": {"warm_up_ms": 31536000000}}"#);
        s.breaker.start_warm_up(&year.breaker, u64::MAX - 1);
        h.store.raw_set(&sk, &codec::encode(Kind::KeyState, &s));
        // Read within a second; no warm-up configured: it ends a minute after.
        h.advance(1_000);
        for (w, &k) in keys.iter().enumerate() {
            let _ = h.call(w, k, Outcome::Success);
            h.deliver();
        }
        h.advance(61_000);
        let mut ran = 0;
        for _ in 0..200 {
            for (w, &k) in keys.iter().enumerate() {
                ran += u32::from(h.call(w, k, Outcome::Failure));
                h.deliver();
            }
            h.advance(50);
        }
        assert!(ran < 100, "{mode:?}: {ran} of 400 failing calls ran");
        let stored: KeyState =
            codec::decode(Kind::KeyState, h.store.raw_get(&sk).expect("written")).expect("valid");
        assert!(!stored.breaker.warming_up(h.now), "{mode:?}");
    }
}

/// A worker whose clock is an hour ahead closes the breaker: the ramp it starts is
/// in everyone else's future, and starts when they read it (found by review: 30 s
/// after the close, the other worker admitted 0 of 100 healthy calls).
#[test]
fn a_ramp_from_a_clock_ahead_starts_when_read() {
    let json = r#"{"breaker": {"error_percentage": {"request_volume_threshold": 5},
        "slow_start": {"ramp_ms": 10000, "initial_percentage": 10}}}"#;
    for mode in modes() {
        let mut h = Host::new(mode, json);
        h.skew[1] = 3_600 * S;
        let k0 = h.key(0, "k");
        h.deliver();
        let k1 = h.key(1, "k");
        h.deliver();
        for _ in 0..10 {
            let _ = h.call(0, k0, Outcome::Failure);
            h.deliver();
        }
        h.advance(6_500);
        for _ in 0..20 {
            let _ = h.call(1, k1, Outcome::Success);
            h.deliver();
            h.advance(100);
        }
        h.advance(500);
        assert_eq!(
            h.phase(1, k1),
            Phase::Closed,
            "{mode:?}: worker 1 closed it"
        );
        // Worker 0 reads the close (a call), then 30 s pass: a 10 s ramp is over.
        let _ = h.call(0, k0, Outcome::Success);
        h.deliver();
        h.advance(1_000);
        h.set_rand(u64::MAX / 2);
        h.advance(30_000);
        let mut ran = 0;
        for _ in 0..100 {
            ran += u32::from(h.call(0, k0, Outcome::Success));
            h.deliver();
            h.advance(100);
        }
        assert_eq!(
            ran, 100,
            "{mode:?}: 30 s after the close, a 10 s ramp is over"
        );
    }
}

/// Half-open with probes counted out but no lease held: none can come back, so the
/// count is brought in (found by review: 0 of 400 healthy calls ran in 20 minutes).
#[test]
fn forged_probes_out_without_leases_are_not_out() {
    use fusewire_core::shared::codec::{crc32, put_varint, Wire, MAGIC};
    for mode in modes() {
        let (mut h, keys, sk, s) = warmed(mode);
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC);
        out.push(4);
        out.push(1);
        s.name.put(&mut out);
        s.touched_at.put(&mut out);
        out.push(2); // half-open
        put_varint(&mut out, u64::from(s.breaker.generation()) + 3);
        put_varint(&mut out, h.now); // opened_at
        put_varint(&mut out, h.now); // open_until
        put_varint(&mut out, 1); // open_step
        put_varint(&mut out, 0); // consecutive failures
        put_varint(&mut out, 0); // no leases held
        put_varint(&mut out, 5); // probes_issued
        put_varint(&mut out, 0); // probe_successes
        out.push(0); // no ramp
        put_varint(&mut out, 0); // shadow rejections
        out.push(0); // no warm-up
        s.window.put(&mut out);
        s.ledger.put(&mut out);
        let c = crc32(&out);
        out.extend_from_slice(&c.to_le_bytes());
        let forged: KeyState = codec::decode(Kind::KeyState, &out).expect("decodes");
        assert_eq!(forged.breaker.probes_issued(), 5);
        h.store.raw_set(&sk, &out);
        h.advance(1_000);
        let mut ran = 0;
        for _ in 0..10 {
            for (w, &k) in keys.iter().enumerate() {
                ran += u32::from(h.call(w, k, Outcome::Success));
                h.deliver();
            }
            h.advance(100);
        }
        assert!(ran >= 10, "{mode:?}: {ran} of 20 healthy calls ran");
        assert_eq!(h.phase(0, keys[0]), Phase::Closed, "{mode:?}");
    }
}
