//! Exactly N half-open probes fleet-wide, in a seeded random simulation: three workers
//! start, complete (success, failure, cancel) and time out calls while the clock jumps
//! by up to a sleep window, on a synchronous store (Envoy and Kong rules). Written by a
//! review, which also ran it on an asynchronous store whose answers come late: there,
//! where the round trip is as long as the sleep window, a worker whose trip was still
//! being written half-opens its local breaker and runs a probe of its own, and the
//! store's lease then runs a second one (7 of 600 runs; a known limit, in the core's
//! README: refusing that probe cost 101 B of the npm package's gzipped `.wasm`, over
//! its budget).

mod common;
use common::*;
use fusewire_core::shared::memory::Rules;
use fusewire_core::*;

/// xorshift64: the same runs on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One run: an error if an open breaker admitted a call or more than `probes` calls
/// admitted half-open in one generation ran at once.
fn run(seed: u64, mode: Mode, probes: u32) -> Result<(), String> {
    let json = format!(
        r#"{{"breaker": {{"error_percentage": {{"request_volume_threshold": 3}},
            "open": {{"sleep_window_ms": 1000}},
            "half_open": {{"permitted_probes": {probes}, "success_threshold": {probes},
                           "probe_timeout_ms": 4000}}}},
            "execution": {{"timeout_ms": 3000}}}}"#
    );
    let mut h = Host::new(mode, &json);
    let n = mode.workers();
    let keys = h.keys("k");
    h.deliver();
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    // (worker, permit, the generation it was admitted half-open in)
    let mut running: Vec<(usize, Permit, Option<u32>)> = Vec::new();
    for step in 0..600 {
        h.set_rand(rng.next());
        match rng.below(10) {
            0..=3 => {
                let w = rng.below(n as u64) as usize;
                if let Start::Running(p) = h.start(w, keys[w]) {
                    let b = h.engines[w]
                        .breaker_state(keys[w])
                        .ok_or("a key without a breaker")?;
                    let tag = match b.phase() {
                        Phase::HalfOpen => Some(b.generation()),
                        Phase::Open => {
                            return Err(format!("step {step}: w{w} admitted while open"))
                        }
                        Phase::Closed => None,
                    };
                    running.push((w, p, tag));
                    if let Some(g) = tag {
                        let c = running.iter().filter(|r| r.2 == Some(g)).count();
                        if c > probes as usize {
                            return Err(format!("step {step}: {c} probes of generation {g}"));
                        }
                    }
                }
            }
            4..=6 if !running.is_empty() => {
                let i = rng.below(running.len() as u64) as usize;
                let (w, p, _) = running.swap_remove(i);
                let o = match rng.below(4) {
                    0 => Outcome::Failure,
                    1 => Outcome::Cancelled,
                    _ => Outcome::Success,
                };
                let o = if rng.below(3) == 0 {
                    Outcome::Failure
                } else {
                    o
                };
                let _ = h.complete(w, p, o);
            }
            7 => h.deliver(),
            _ => {
                h.now += [10, 50, 100, 300, 1000][rng.below(5) as usize] * MS;
                for w in 0..n {
                    h.drive(w);
                }
                h.deliver();
                for w in 0..n {
                    for e in h.take_events(w) {
                        if let Event::TimedOut { call, .. } = e {
                            running.retain(|r| !(r.0 == w && r.1.id() == call));
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

#[test]
fn never_more_than_n_probes_across_workers() {
    let mut fails = Vec::new();
    for (mode, seeds) in [
        (Mode::Shared(Rules::Kong, 3), 300),
        (Mode::Shared(Rules::Envoy, 3), 300),
    ] {
        for probes in [1, 2] {
            for seed in 1..seeds {
                if let Err(e) = run(seed, mode, probes) {
                    fails.push(format!("{mode:?}, {probes} probes, seed {seed}: {e}"));
                }
            }
        }
    }
    assert!(fails.is_empty(), "{}", fails.join("\n"));
}
