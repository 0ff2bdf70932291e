//! The two clocks: virtual (deterministic, advanced by the scheduler) and real.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Which clock a harness runs on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClockMode {
    /// Deterministic simulated time: starts at [`VIRTUAL_EPOCH_NS`], moves only when
    /// the scheduler jumps to the next event. Host calls take zero time.
    #[default]
    Virtual,
    /// Wall-clock time; upstream latencies are real waits.
    Real,
}

/// Wall-clock reading of virtual time 0: 2026-01-01T00:00:00Z.
pub const VIRTUAL_EPOCH_NS: u64 = 1_767_225_600_000_000_000;

/// The monotonic clock guests read (WASI clock 1) at time 0: Envoy serves it from its
/// steady clock, which counts from the machine's boot — three days here, so a guest
/// never meets a monotonic reading near 0 that Envoy would not give it.
pub const MONOTONIC_BASE_NS: u64 = 3 * 86_400 * 1_000_000_000;

/// A harness clock. `now()` is nanoseconds since the harness started.
#[derive(Debug)]
pub struct Clock {
    mode: ClockMode,
    virt: AtomicU64,
    start: Instant,
    epoch_ns: u64,
    /// Steps of the wall clock so far ([`Clock::step_wall`]), ns.
    wall_steps: AtomicI64,
}

impl Clock {
    /// A clock at time 0.
    pub fn new(mode: ClockMode) -> Self {
        let epoch_ns = match mode {
            ClockMode::Virtual => VIRTUAL_EPOCH_NS,
            ClockMode::Real => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0),
        };
        Clock {
            mode,
            virt: AtomicU64::new(0),
            start: Instant::now(),
            epoch_ns,
            wall_steps: AtomicI64::new(0),
        }
    }

    /// The mode.
    pub fn mode(&self) -> ClockMode {
        self.mode
    }

    /// Nanoseconds since the harness started (monotonic).
    pub fn now(&self) -> u64 {
        match self.mode {
            ClockMode::Virtual => self.virt.load(Ordering::Acquire),
            ClockMode::Real => self.start.elapsed().as_nanos() as u64,
        }
    }

    /// Wall-clock nanoseconds since the Unix epoch (moved by [`Clock::step_wall`]).
    pub fn wall(&self) -> u64 {
        (self.epoch_ns + self.now()).saturating_add_signed(self.wall_steps.load(Ordering::Acquire))
    }

    /// What a guest's monotonic clock (WASI clock 1) reads: [`Clock::now`] from
    /// [`MONOTONIC_BASE_NS`]; wall-clock steps do not move it.
    pub fn monotonic(&self) -> u64 {
        MONOTONIC_BASE_NS + self.now()
    }

    /// Steps the wall clock by `delta_ns` (either way), as NTP, a resumed VM or an
    /// operator does; time itself, the monotonic clock and the scheduler go on.
    pub fn step_wall(&self, delta_ns: i64) {
        self.wall_steps.fetch_add(delta_ns, Ordering::AcqRel);
    }

    /// Moves virtual time forward to `t` (never backwards); no-op on the real clock.
    pub fn advance_to(&self, t: u64) {
        if self.mode == ClockMode::Virtual {
            self.virt.fetch_max(t, Ordering::AcqRel);
        }
    }
}

/// A small deterministic PRNG (SplitMix64), seeded explicitly everywhere.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Fills `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let b = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&b[..chunk.len()]);
        }
    }
}
