//! Drives one command key through healthy → outage → recovery on a simulated
//! clock and prints the breaker's transitions and the rolling stats.
//!
//! Run: `cargo run --release -p fusewire-core --example outage`

use fusewire_core::{Config, Engine, Event, EventKind, Outcome, Permit, Phase, Start};

const MS: u64 = 1_000_000;

/// splitmix64: the host's injected randomness.
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

/// The simulated backend: what a call started at `t` does.
fn backend(t: u64, rng: &mut Rng) -> (u64, Outcome) {
    let secs = t / (1_000 * MS);
    let jitter = (rng.unit() * 10.0) as u64;
    match secs {
        // Outage: most calls hang past the 1 s timeout, the rest fail fast.
        20..=44 => {
            if rng.unit() < 0.7 {
                (3_000 * MS, Outcome::Success)
            } else {
                ((5 + jitter) * MS, Outcome::Failure)
            }
        }
        // Healthy: ~20 ms, 1 % errors, a slow tail.
        _ => {
            let slow = if rng.unit() < 0.02 { 150 } else { 0 };
            let outcome = if rng.unit() < 0.01 {
                Outcome::Failure
            } else {
                Outcome::Success
            };
            ((15 + jitter + slow) * MS, outcome)
        }
    }
}

fn phase_name(p: Phase) -> &'static str {
    p.name()
}

fn main() {
    let config = Config::from_json(
        r#"{
          "breaker": {
            "open": {"schedule": "exponential", "sleep_window_ms": 2000, "max_ms": 8000,
                     "jitter_percentage": 10},
            "half_open": {"permitted_probes": 3, "success_threshold": 3},
            "slow_start": {"ramp_ms": 5000}
          },
          "metrics": {"rolling_window_ms": 10000, "rolling_buckets": 10},
          "execution": {"timeout_ms": 1000},
          "bulkhead": {"max_concurrent": 100}
        }"#,
    )
    .expect("valid config");
    let mut engine = Engine::local();
    let policy = engine
        .add_policy("UserService", config)
        .expect("valid config");
    let key = engine.key(policy, "GetUser", 0).expect("policy exists");
    let mut rng = Rng(2024);
    // (finish time, call, outcome) of calls in flight.
    let mut inflight: Vec<(u64, Permit, Outcome)> = vec![];
    let mut refused = 0u64;

    println!("fusewire-core outage demo: 50 req/s against one key; outage from 20 s to 45 s");
    println!("  config: 10 s window, 50 % / 20 requests, open 2 s doubling to 8 s (±10 % jitter),");
    println!("          3 probes must succeed, 5 s slow-start ramp, 1 s timeout\n");
    println!(
        "{:>6} | {:<9} | {:>5} {:>5} {:>5} {:>6} {:>6} | {:>6} | {:>8} {:>8} {:>8} | {:>4}",
        "t (s)",
        "phase",
        "ok",
        "fail",
        "tmo",
        "short",
        "cum",
        "err %",
        "p50 ms",
        "p99 ms",
        "max ms",
        "conc"
    );
    let end = 75_000 * MS;
    let mut t = 0;
    while t <= end {
        // Finish calls due now (a timed-out call's late result is discarded).
        inflight.sort_by_key(|c| std::cmp::Reverse(c.0));
        while inflight.last().is_some_and(|c| c.0 <= t) {
            let Some((_, permit, outcome)) = inflight.pop() else {
                break;
            };
            let _ = engine.complete(permit, outcome, t, rng.next());
        }
        // A new request every 20 ms.
        if t % (20 * MS) == 0 {
            match engine.start(key, t, rng.next()) {
                Start::Running(permit) => {
                    let (latency, outcome) = backend(t, &mut rng);
                    inflight.push((t + latency, permit, outcome));
                }
                Start::Queued(_) => {}
                Start::Refused(_) => refused += 1,
            }
        }
        // Timeouts, transitions (by calls or by time).
        while let Some(ev) = engine.poll(t, rng.next()) {
            if let Event::Transition { transition: tr, .. } = ev {
                println!(
                    "{:>6.2} | {:>9} -> {:<9} ({:?}, generation {})",
                    t as f64 / 1e9,
                    phase_name(tr.from),
                    phase_name(tr.to),
                    tr.reason,
                    tr.generation
                );
            }
        }
        if t % (2_500 * MS) == 0 && t > 0 {
            let s = engine.snapshot(key, t).expect("live key");
            let h = s.health;
            let p = s.latency_ns;
            let cum = s.cumulative.iter().sum::<u64>();
            println!(
                "{:>6.1} | {:<9} | {:>5} {:>5} {:>5} {:>6} {:>6} | {:>6.1} | {:>8.1} {:>8.1} {:>8.1} | {:>4}",
                t as f64 / 1e9,
                phase_name(s.phase),
                h.count(EventKind::Success),
                h.count(EventKind::Failure),
                h.count(EventKind::Timeout),
                h.count(EventKind::ShortCircuited),
                cum,
                h.error_percentage,
                p.p50 as f64 / 1e6,
                p.p99 as f64 / 1e6,
                p.p100 as f64 / 1e6,
                s.rolling_max_concurrency
            );
        }
        t += MS;
    }
    let s = engine.snapshot(key, t).expect("live key");
    println!("\ncumulative counts since start:");
    for k in EventKind::ALL {
        let n = s.cumulative[k.index()];
        if n > 0 {
            println!("  {:<20} {n}", k.name());
        }
    }
    println!("  refused before running: {refused}");
    println!(
        "  late results discarded: {}",
        engine.late_results(key).unwrap_or(0)
    );
    println!("  final phase: {}", phase_name(s.phase));
    if let Some(c) = engine.circuit(key) {
        println!(
            "  memory per key (breaker + window + histograms): {} bytes",
            c.memory_bytes()
        );
    }
}
