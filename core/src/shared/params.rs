//! Maps the core's [`crate::config::Config`] onto the parameters the shared
//! breaker logic runs with.

use super::state::{BreakerParams, Mode, OpenSchedule, Rules, Threshold};
use super::window::MAX_BUCKETS;
use crate::config::{self, BreakerMode, Config};

impl BreakerParams {
    /// The shared-state parameters of a validated config.
    ///
    /// The shared window keeps at most [`MAX_BUCKETS`] buckets: a finer
    /// `metrics.rolling_buckets` is coarsened to that many (same window length).
    pub fn from_config(c: &Config) -> Self {
        let b = &c.breaker;
        let mode = match b.mode {
            BreakerMode::Normal => Mode::Normal,
            BreakerMode::ForcedOpen => Mode::ForcedOpen,
            BreakerMode::ForcedClosed => Mode::ForcedClosed,
            BreakerMode::Disabled => Mode::Disabled,
            BreakerMode::MetricsOnly => Mode::MetricsOnly,
        };
        let rules = Rules {
            error_percentage: b.error_percentage.enabled.then_some(Threshold {
                volume: b.error_percentage.request_volume_threshold,
                pct: b.error_percentage.threshold_percentage,
            }),
            consecutive_failures: b
                .consecutive_failures
                .enabled
                .then_some(b.consecutive_failures.threshold),
            slow_call: b.slow_call.enabled.then_some(Threshold {
                volume: b.slow_call.request_volume_threshold,
                pct: b.slow_call.rate_threshold_percentage,
            }),
            slow_call_ms: b.slow_call.duration_threshold_ms,
            adaptive_k: b.adaptive_throttle.enabled.then_some(b.adaptive_throttle.k),
        };
        let o = &b.open;
        let open = match o.schedule {
            config::OpenSchedule::Fixed => OpenSchedule::Fixed {
                ms: o.sleep_window_ms,
            },
            config::OpenSchedule::Exponential => OpenSchedule::Exponential {
                base_ms: o.sleep_window_ms,
                multiplier: o.multiplier,
                max_ms: o.max_ms,
            },
            config::OpenSchedule::Ladder => OpenSchedule::Ladder {
                steps_ms: o.ladder_ms.clone(),
            },
        };
        let window_ms = c.metrics.rolling_window_ms.max(1);
        let buckets = (c.metrics.rolling_buckets.max(1) as usize).min(MAX_BUCKETS);
        let bucket_ms = (window_ms / buckets as u64).clamp(1, u32::MAX as u64) as u32;
        BreakerParams {
            rules,
            open,
            jitter_pct: o.jitter_percentage.clamp(0.0, 100.0) as u32,
            probes: b.half_open.permitted_probes.max(1),
            probe_successes: b.half_open.success_threshold.max(1),
            probe_timeout_ms: b.half_open.probe_timeout_ms.max(1),
            slow_start_ms: b.slow_start.ramp_ms,
            slow_start_initial_pct: b.slow_start.initial_percentage,
            mode,
            bucket_ms,
            buckets,
        }
    }
}
