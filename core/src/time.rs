//! Host time as the core sees it: `u64` nanoseconds on a monotonic clock.
//!
//! The core never reads a clock. Hosts pass `now` into every call. A clock that
//! steps backwards is tolerated: every elapsed-time computation saturates at zero,
//! so a backwards step is treated as "no time has passed".

/// Nanoseconds on the host's monotonic clock.
pub type Nanos = u64;

/// Nanoseconds per millisecond.
pub const NANOS_PER_MS: u64 = 1_000_000;

/// Converts a config duration in milliseconds to nanoseconds (saturating).
#[inline]
pub const fn ms_to_ns(ms: u64) -> Nanos {
    mul_sat(ms, NANOS_PER_MS)
}

/// `a × b`, saturating. `u64::saturating_mul` becomes a 128-bit multiply call on
/// wasm32 (`__multi3`); operands below 2^32 (nearly all) take one native multiply.
#[inline]
pub(crate) const fn mul_sat(a: u64, b: u64) -> u64 {
    if (a | b) >> 32 == 0 {
        a * b
    } else if b != 0 && a > u64::MAX / b {
        u64::MAX
    } else {
        a * b
    }
}

/// The latest time a component was given: a clock that steps backwards holds it
/// where it was, so deadlines and expiries never run backwards.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Monotonic(Nanos);

impl Monotonic {
    /// Takes `now` into account; returns the latest time seen.
    #[inline]
    pub fn advance(&mut self, now: Nanos) -> Nanos {
        if now > self.0 {
            self.0 = now;
        }
        self.0
    }

    /// The latest time seen.
    #[inline]
    pub fn now(self) -> Nanos {
        self.0
    }
}

/// Time elapsed from `since` to `now`; zero when the clock stepped backwards.
#[inline]
pub const fn elapsed(now: Nanos, since: Nanos) -> Nanos {
    now.saturating_sub(since)
}

/// Maps an injected random `u64` to a uniform `f64` in `[0, 1)`.
#[inline]
pub fn unit_f64(rand: u64) -> f64 {
    (rand >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::mul_sat;

    #[test]
    fn mul_sat_matches_saturating_mul() {
        let xs = [
            0,
            1,
            7,
            1 << 31,
            (1 << 32) - 1,
            1 << 32,
            1 << 40,
            u64::MAX / 3,
            u64::MAX,
        ];
        for a in xs {
            for b in xs {
                assert_eq!(mul_sat(a, b), a.saturating_mul(b), "{a} × {b}");
            }
        }
    }
}
