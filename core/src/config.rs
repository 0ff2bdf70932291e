//! The one configuration schema (snake_case JSON, read by [`crate::json`]) shared by
//! every host.
//!
//! Every struct denies unknown fields and fills omitted fields with Hystrix's
//! defaults, so `{}` is a complete, valid config. [`Config::validate`] and
//! [`SharedConfig::validate`] name the offending field path and the reason, and accept
//! exactly what every host accepts (hosts add only their own sections: Envoy matching
//! and replies, opossum option names).
//!
//! **Units, stated once for the crate:** configuration durations are integer
//! milliseconds in fields ending `_ms`; every API time (`now`, latencies, deadlines,
//! percentiles) is `u64` nanoseconds; percentages are numbers in `0..=100`.

use crate::{json_enum, json_struct};
use core::fmt;

/// Configuration of one policy (every key of a policy shares it): breaker, metrics,
/// timeout, bulkhead and key table.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Config {
    /// Circuit breaker rules.
    pub breaker: BreakerConfig,
    /// Rolling metrics windows.
    pub metrics: MetricsConfig,
    /// Per-call timeout.
    pub execution: ExecutionConfig,
    /// Concurrency limits per key; absent (`null`) = no limit.
    pub bulkhead: Option<BulkheadConfig>,
    /// How many keys the policy may track and when idle ones expire.
    pub keys: KeysConfig,
    /// Request cache (`crate::cache`); absent (`null`) = no cache.
    pub cache: Option<CacheConfig>,
    /// Request collapser (`crate::collapser`); absent (`null`) = no collapsing.
    pub collapser: Option<CollapserConfig>,
}

/// How the breaker behaves overall.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BreakerMode {
    /// Normal operation: the rules decide.
    #[default]
    Normal,
    /// Reject every call (Hystrix `forceOpen`).
    ForcedOpen,
    /// Admit every call; metrics are still computed, the breaker never leaves Closed
    /// (Hystrix `forceClosed`).
    ForcedClosed,
    /// No-op breaker: admit everything, evaluate nothing (Hystrix `enabled=false`).
    /// Metrics are still recorded.
    Disabled,
    /// Shadow mode: the full state machine runs and reports its transitions, but
    /// every call is admitted.
    MetricsOnly,
}

impl BreakerMode {
    /// Whether the state machine runs (`Normal`, `MetricsOnly`): in the other modes the
    /// phase is pinned, and neither the rules nor an operator's force move it.
    pub fn runs_state_machine(self) -> bool {
        matches!(self, BreakerMode::Normal | BreakerMode::MetricsOnly)
    }
}

/// Circuit breaker rules. Any enabled trip rule can open the breaker.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BreakerConfig {
    /// Overall mode.
    pub mode: BreakerMode,
    /// Hystrix error-percentage rule.
    pub error_percentage: ErrorPercentageConfig,
    /// gobreaker-style consecutive-failures rule.
    pub consecutive_failures: ConsecutiveFailuresConfig,
    /// resilience4j-style slow-call-rate rule.
    pub slow_call: SlowCallConfig,
    /// Google-SRE adaptive throttling (client-side, probabilistic, stateless).
    pub adaptive_throttle: AdaptiveThrottleConfig,
    /// How long the breaker stays open.
    pub open: OpenConfig,
    /// Probing in half-open.
    pub half_open: HalfOpenConfig,
    /// Ramp after closing.
    pub slow_start: SlowStartConfig,
    /// No trip rule opens the breaker during the first `warm_up_ms` after a key is
    /// created (opossum's `allowWarmUp`, which warms up for one rolling window);
    /// 0 = no warm-up.
    pub warm_up_ms: u64,
}

impl BreakerConfig {
    /// Whether a success can trip the breaker by adding volume: a rule whose rate is
    /// taken over calls that include successes and that is checked on them (the error
    /// percentage over `total`, the slow-call rate). opossum's `all_calls` rule is
    /// checked on errors only, as opossum does.
    pub fn volume_rules(&self) -> bool {
        self.error_percentage.over_total() || self.slow_call.enabled
    }
}

/// Trip when `calls >= request_volume_threshold` and `errors / calls * 100` reaches
/// `threshold_percentage` (`comparison`), where `calls` is the `denominator`.
/// errors = failure + timeout + rejections; short-circuits are never errors.
#[derive(Clone, Debug, PartialEq)]
pub struct ErrorPercentageConfig {
    /// Whether the rule is active.
    pub enabled: bool,
    /// Minimum calls (counted as `denominator` says) in the rolling window before the
    /// rule may trip.
    pub request_volume_threshold: u32,
    /// Error percentage (0..=100) the rule compares against (the rule needs at least
    /// one error: 0 trips on the first error once the volume is reached).
    pub threshold_percentage: f64,
    /// What the percentage is taken of: `total` (Hystrix) or `all_calls` (opossum).
    pub denominator: Denominator,
    /// `at_or_above` (Hystrix: trip at `>=`) or `above` (opossum: trip at `>`).
    pub comparison: Comparison,
}

impl ErrorPercentageConfig {
    /// Whether the rule is on and takes its percentage over Hystrix's `total`.
    pub fn over_total(&self) -> bool {
        self.enabled && self.denominator == Denominator::Total
    }
}

impl Default for ErrorPercentageConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            request_volume_threshold: 20,
            threshold_percentage: 50.0,
            denominator: Denominator::Total,
            comparison: Comparison::AtOrAbove,
        }
    }
}

/// The calls an error percentage (and its volume threshold) is taken over.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Denominator {
    /// Hystrix's total: success + failure + timeout + bulkhead rejections.
    #[default]
    Total,
    /// Every call the breaker saw (opossum's `fires`): also short-circuited calls,
    /// bad requests, cache hits, collapsed calls, and calls still running.
    AllCalls,
}

/// How the error percentage is compared with `threshold_percentage`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Comparison {
    /// Trip at or above the threshold (Hystrix).
    #[default]
    AtOrAbove,
    /// Trip strictly above the threshold (opossum).
    Above,
}

/// Trip after `threshold` consecutive failures (failure or timeout).
#[derive(Clone, Debug, PartialEq)]
pub struct ConsecutiveFailuresConfig {
    /// Whether the rule is active.
    pub enabled: bool,
    /// Consecutive failures that trip the breaker.
    pub threshold: u32,
}

impl Default for ConsecutiveFailuresConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            threshold: 5,
        }
    }
}

/// Trip when the share of calls slower than `duration_threshold_ms` reaches
/// `rate_threshold_percentage` (with at least `request_volume_threshold` calls).
#[derive(Clone, Debug, PartialEq)]
pub struct SlowCallConfig {
    /// Whether the rule is active.
    pub enabled: bool,
    /// A call at or above this latency counts as slow.
    pub duration_threshold_ms: u64,
    /// Slow-call percentage (0..=100) at or above which the breaker trips (0: on the
    /// first slow call once the volume is reached).
    pub rate_threshold_percentage: f64,
    /// Minimum calls in the rolling window before the rule may trip.
    pub request_volume_threshold: u32,
}

impl Default for SlowCallConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            duration_threshold_ms: 60_000,
            rate_threshold_percentage: 100.0,
            request_volume_threshold: 20,
        }
    }
}

/// Reject locally with probability `max(0, (requests - k * accepts) / (requests + 1))`
/// over the rolling window. The throttle's own rejections are not fed back.
#[derive(Clone, Debug, PartialEq)]
pub struct AdaptiveThrottleConfig {
    /// Whether the throttle is active.
    pub enabled: bool,
    /// Multiplier on accepts; lower is more aggressive (SRE book: 2, go-zero: 1.5).
    pub k: f64,
}

impl Default for AdaptiveThrottleConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            k: 2.0,
        }
    }
}

/// Shape of the open-duration schedule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OpenSchedule {
    /// Always `sleep_window_ms` (Hystrix).
    #[default]
    Fixed,
    /// `sleep_window_ms * multiplier^n`, capped at `max_ms`, for the n-th trip in a row.
    Exponential,
    /// `ladder_ms[n]` for the n-th trip in a row, the last step repeating.
    Ladder,
}

/// How long the breaker stays open before it lets probes through.
#[derive(Clone, Debug, PartialEq)]
pub struct OpenConfig {
    /// Schedule shape.
    pub schedule: OpenSchedule,
    /// Base open duration (Hystrix `sleepWindowInMilliseconds`).
    pub sleep_window_ms: u64,
    /// Growth factor for `exponential`.
    pub multiplier: f64,
    /// Cap for `exponential`.
    pub max_ms: u64,
    /// Steps for `ladder`.
    pub ladder_ms: Vec<u64>,
    /// Random spread of each open duration, ± this percentage (0..=100).
    pub jitter_percentage: f64,
}

impl Default for OpenConfig {
    fn default() -> Self {
        Self {
            schedule: OpenSchedule::Fixed,
            sleep_window_ms: 5_000,
            multiplier: 2.0,
            max_ms: 300_000,
            ladder_ms: vec![5_000, 10_000, 60_000, 300_000],
            jitter_percentage: 0.0,
        }
    }
}

/// Half-open probing.
#[derive(Clone, Debug, PartialEq)]
pub struct HalfOpenConfig {
    /// Calls let through concurrently while half-open (at most 16).
    pub permitted_probes: u32,
    /// Successful probes needed to close; any failed probe reopens.
    pub success_threshold: u32,
    /// A probe with no result after this long counts as failed (lease deadline).
    pub probe_timeout_ms: u64,
    /// Whether closing (probes succeeded, or a forced close) forgets the rolling
    /// health counts (Hystrix: yes; opossum keeps its window, so `false`).
    pub reset_window_on_close: bool,
}

impl Default for HalfOpenConfig {
    fn default() -> Self {
        Self {
            permitted_probes: 1,
            success_threshold: 1,
            probe_timeout_ms: 5_000,
            reset_window_on_close: true,
        }
    }
}

/// Admission ramp after the breaker closes.
#[derive(Clone, Debug, PartialEq)]
pub struct SlowStartConfig {
    /// Ramp length; 0 disables the ramp.
    pub ramp_ms: u64,
    /// Admitted share (0..=100) right after closing; rises linearly to 100.
    pub initial_percentage: f64,
}

impl Default for SlowStartConfig {
    fn default() -> Self {
        Self {
            ramp_ms: 0,
            initial_percentage: 10.0,
        }
    }
}

/// Rolling windows.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricsConfig {
    /// Length of the health/counter window (Hystrix `metrics.rollingStats.timeInMilliseconds`).
    pub rolling_window_ms: u64,
    /// Buckets in the counter window; must divide `rolling_window_ms`.
    pub rolling_buckets: u32,
    /// Length of the latency-percentile window (Hystrix `metrics.rollingPercentile`).
    pub percentile_window_ms: u64,
    /// Buckets in the percentile window; must divide `percentile_window_ms`.
    pub percentile_buckets: u32,
    /// Whether latencies are kept for percentiles (Hystrix
    /// `metrics.rollingPercentile.enabled`). Off: no histograms (about 3 KB less per
    /// key and a cheaper call), percentiles read as empty; the slow-call rule still
    /// works (it reads each call's latency, not the histograms).
    pub percentiles_enabled: bool,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            rolling_window_ms: 10_000,
            rolling_buckets: 10,
            percentile_window_ms: 60_000,
            percentile_buckets: 4,
            percentiles_enabled: true,
        }
    }
}

/// Per-call timeout.
#[derive(Clone, Debug, PartialEq)]
pub struct ExecutionConfig {
    /// Whether calls get a deadline.
    pub timeout_enabled: bool,
    /// Deadline after the call starts running (Hystrix default 1000 ms).
    pub timeout_ms: u64,
}

impl Default for ExecutionConfig {
    fn default() -> Self {
        Self {
            timeout_enabled: true,
            timeout_ms: 1_000,
        }
    }
}

/// How a bulkhead isolates (Hystrix's `execution.isolation.strategy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Isolation {
    /// A counting semaphore: excess calls are `SEMAPHORE_REJECTED` at once; no queue.
    #[default]
    Semaphore,
    /// A pool of slots with an optional bounded wait queue: excess calls are
    /// `THREAD_POOL_REJECTED` (with or without a queue).
    Pool,
}

/// Concurrency limits of one key: slots, an optional wait queue (pool isolation) and
/// the fallback limit.
#[derive(Clone, Debug, PartialEq)]
pub struct BulkheadConfig {
    /// Semaphore or pool (decides the rejection event and whether a queue is allowed).
    pub isolation: Isolation,
    /// Concurrent executions (Hystrix semaphore / core size: 10).
    pub max_concurrent: u32,
    /// Wait-queue capacity; 0 = no queue, excess calls are rejected at once.
    pub max_queue: u32,
    /// Dynamic cap on the queue length (Hystrix `queueSizeRejectionThreshold`: 5).
    pub queue_rejection_threshold: u32,
    /// Longest a call may wait in the queue before it is rejected.
    pub max_wait_ms: u64,
    /// Concurrent fallbacks (Hystrix `fallback.isolation.semaphore.maxConcurrentRequests`).
    pub fallback_max_concurrent: u32,
}

impl Default for BulkheadConfig {
    fn default() -> Self {
        Self {
            isolation: Isolation::Semaphore,
            max_concurrent: 10,
            max_queue: 0,
            queue_rejection_threshold: 5,
            max_wait_ms: 1_000,
            fallback_max_concurrent: 10,
        }
    }
}

impl BulkheadConfig {
    /// Calls that may wait: `min(max_queue, queue_rejection_threshold)`.
    pub fn queue_capacity(&self) -> u32 {
        self.max_queue.min(self.queue_rejection_threshold)
    }
}

/// The key table of a policy.
#[derive(Clone, Debug, PartialEq)]
pub struct KeysConfig {
    /// Distinct keys tracked at once; further keys share the policy's overflow key
    /// until idle ones expire.
    pub max_keys: u32,
    /// A key with no call started for this long and nothing in flight or queued
    /// expires (checked lazily: a sweep finding it busy looks again this long later),
    /// and its shared slot may be taken by another key.
    pub idle_ms: u64,
}

impl Default for KeysConfig {
    fn default() -> Self {
        Self {
            max_keys: 100,
            idle_ms: 600_000,
        }
    }
}

/// What the followers of a failed leader get (request cache).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LeaderFailure {
    /// Every follower gets the leader's failure (Hystrix: concurrent callers share
    /// the in-flight result, whatever it is).
    #[default]
    FailFollowers,
    /// The first follower becomes the leader and runs the call again; the others
    /// keep waiting. Not with `cache_failures`: the failure is then the entry, and
    /// every follower gets it.
    Promote,
}

/// The request cache of a policy (see `crate::cache` for the semantics).
#[derive(Clone, Debug, PartialEq)]
pub struct CacheConfig {
    /// Entries at most, in-flight keys included (default 10 000).
    pub max_entries: u32,
    /// Bytes at most: key bytes plus the payload sizes the host reports (default
    /// 16 MiB).
    pub max_bytes: u64,
    /// How long a stored result is served (default 60 000 ms); 0 = until evicted,
    /// invalidated or its scope closes (Hystrix's request cache, opossum's
    /// `cacheTTL: 0`).
    pub ttl_ms: u64,
    /// Whether failures are stored too (default false: only successes are).
    pub cache_failures: bool,
    /// How long a stored failure is served (default 1 000 ms).
    pub failure_ttl_ms: u64,
    /// Followers of a failed leader: `fail_followers` (default) or `promote`.
    pub on_leader_failure: LeaderFailure,
    /// Followers per in-flight key (default 1 000); 0 turns de-duplication off.
    pub max_waiters: u32,
    /// A flight running longer than this abandons its followers (default 10 000 ms;
    /// a safety net behind the call's own timeout).
    pub max_wait_ms: u64,
    /// Longest cacheable key in bytes (default 1 024); longer keys bypass the cache.
    pub max_key_bytes: u32,
    /// Request scopes open at once (default 10 000); 0 = global scope only.
    pub max_scopes: u32,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            max_entries: 10_000,
            max_bytes: 16 << 20,
            ttl_ms: 60_000,
            cache_failures: false,
            failure_ttl_ms: 1_000,
            on_leader_failure: LeaderFailure::FailFollowers,
            max_waiters: 1_000,
            max_wait_ms: 10_000,
            max_key_bytes: 1_024,
            max_scopes: 10_000,
        }
    }
}

/// The request collapser of a policy (see `crate::collapser` for the semantics).
#[derive(Clone, Debug, PartialEq)]
pub struct CollapserConfig {
    /// How long a batch collects items after its first one (Hystrix
    /// `timerDelayInMilliseconds`, default 10 ms); 0 = flush at the next poll.
    pub window_ms: u64,
    /// Items per batch (Hystrix `maxRequestsInBatch`; Hystrix: unlimited, default
    /// here 1 000 so memory is bounded); a full batch is flushed at once.
    pub max_batch_size: u32,
    /// Items not yet answered, over all batches (default 100 000); past it `add`
    /// refuses (run the call on its own).
    pub max_items: u32,
    /// Longest collapser key in bytes (default 1 024).
    pub max_key_bytes: u32,
    /// Request scopes open at once (default 10 000); 0 = global scope only.
    pub max_scopes: u32,
}

impl Default for CollapserConfig {
    fn default() -> Self {
        Self {
            window_ms: 10,
            max_batch_size: 1_000,
            max_items: 100_000,
            max_key_bytes: 1_024,
            max_scopes: 10_000,
        }
    }
}

// The JSON shape of every type above: field names as written, enums in snake_case.
json_struct!(Config {
    breaker,
    metrics,
    execution,
    bulkhead,
    keys,
    cache,
    collapser
});
json_enum!(BreakerMode { Normal = "normal", ForcedOpen = "forced_open", ForcedClosed = "forced_closed", Disabled = "disabled", MetricsOnly = "metrics_only" });
json_struct!(BreakerConfig {
    mode,
    error_percentage,
    consecutive_failures,
    slow_call,
    adaptive_throttle,
    open,
    half_open,
    slow_start,
    warm_up_ms
});
json_struct!(ErrorPercentageConfig {
    enabled,
    request_volume_threshold,
    threshold_percentage,
    denominator,
    comparison
});
json_enum!(Denominator { Total = "total", AllCalls = "all_calls" });
json_enum!(Comparison { AtOrAbove = "at_or_above", Above = "above" });
json_struct!(ConsecutiveFailuresConfig { enabled, threshold });
json_struct!(SlowCallConfig {
    enabled,
    duration_threshold_ms,
    rate_threshold_percentage,
    request_volume_threshold
});
json_struct!(AdaptiveThrottleConfig { enabled, k });
json_enum!(OpenSchedule { Fixed = "fixed", Exponential = "exponential", Ladder = "ladder" });
json_struct!(OpenConfig {
    schedule,
    sleep_window_ms,
    multiplier,
    max_ms,
    ladder_ms,
    jitter_percentage
});
json_struct!(HalfOpenConfig {
    permitted_probes,
    success_threshold,
    probe_timeout_ms,
    reset_window_on_close
});
json_struct!(SlowStartConfig {
    ramp_ms,
    initial_percentage
});
json_struct!(MetricsConfig {
    rolling_window_ms,
    rolling_buckets,
    percentile_window_ms,
    percentile_buckets,
    percentiles_enabled
});
json_struct!(ExecutionConfig {
    timeout_enabled,
    timeout_ms
});
json_enum!(Isolation { Semaphore = "semaphore", Pool = "pool" });
json_struct!(BulkheadConfig {
    isolation,
    max_concurrent,
    max_queue,
    queue_rejection_threshold,
    max_wait_ms,
    fallback_max_concurrent
});
json_struct!(KeysConfig { max_keys, idle_ms });
json_enum!(LeaderFailure { FailFollowers = "fail_followers", Promote = "promote" });
json_struct!(CacheConfig {
    max_entries,
    max_bytes,
    ttl_ms,
    cache_failures,
    failure_ttl_ms,
    on_leader_failure,
    max_waiters,
    max_wait_ms,
    max_key_bytes,
    max_scopes
});
json_struct!(CollapserConfig {
    window_ms,
    max_batch_size,
    max_items,
    max_key_bytes,
    max_scopes
});
json_enum!(SyncMode { Sync = "sync", Async = "async" });
json_struct!(SharedConfig {
    mode,
    namespace,
    cas_attempts,
    lease_ttl_ms,
    heartbeat_ms,
    flush_ms,
    sync_ms,
    stale_ms
});

fn in_range(path: &str, v: u64, lo: u64, hi: u64) -> Result<(), ConfigError> {
    if v < lo || v > hi {
        return Err(ConfigError::new(
            path,
            text!("must be in {lo}..={hi}, got {v}"),
        ));
    }
    Ok(())
}

/// Largest `cache.max_entries`: 2^24 − 1, opossum's default `cacheSize` (so opossum code
/// that spells its default out is accepted), one below the slab's slot count.
pub const MAX_CACHE_ENTRIES: u32 = (1 << 24) - 1;
/// Largest `cache.max_bytes` (1 TiB).
pub const MAX_CACHE_BYTES: u64 = 1 << 40;
/// Largest `max_key_bytes` of the cache and the collapser.
pub const MAX_CACHE_KEY_BYTES: u32 = 65_536;
/// Largest `max_scopes` of the cache and the collapser.
pub const MAX_SCOPES: u32 = 1_000_000;
/// Largest `collapser.max_items`.
pub const MAX_COLLAPSER_ITEMS: u32 = 10_000_000;

impl CacheConfig {
    /// Checks every field; paths are relative to the section (`Config::validate`
    /// prefixes `cache.`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        in_range(
            "max_entries",
            self.max_entries.into(),
            1,
            MAX_CACHE_ENTRIES.into(),
        )?;
        in_range(
            "max_key_bytes",
            self.max_key_bytes.into(),
            1,
            MAX_CACHE_KEY_BYTES.into(),
        )?;
        in_range("max_bytes", self.max_bytes, 1, MAX_CACHE_BYTES)?;
        if self.max_bytes < u64::from(self.max_key_bytes) {
            return Err(ConfigError::new(
                "max_bytes",
                text!(
                    "must be at least max_key_bytes ({}), got {}",
                    self.max_key_bytes,
                    self.max_bytes
                ),
            ));
        }
        duration("ttl_ms", self.ttl_ms, 0)?;
        duration("failure_ttl_ms", self.failure_ttl_ms, 1)?;
        in_range("max_waiters", self.max_waiters.into(), 0, 1_000_000)?;
        duration("max_wait_ms", self.max_wait_ms, 1)?;
        in_range("max_scopes", self.max_scopes.into(), 0, MAX_SCOPES.into())?;
        Ok(())
    }
}

impl CollapserConfig {
    /// Checks every field; paths are relative to the section (`Config::validate`
    /// prefixes `collapser.`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        duration("window_ms", self.window_ms, 0)?;
        in_range("max_batch_size", self.max_batch_size.into(), 1, 100_000)?;
        in_range(
            "max_items",
            self.max_items.into(),
            1,
            MAX_COLLAPSER_ITEMS.into(),
        )?;
        in_range(
            "max_key_bytes",
            self.max_key_bytes.into(),
            1,
            MAX_CACHE_KEY_BYTES.into(),
        )?;
        in_range("max_scopes", self.max_scopes.into(), 0, MAX_SCOPES.into())?;
        Ok(())
    }
}

/// How an engine keeps its keys' state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyncMode {
    /// The host answers every store request within the same call (Envoy shared data,
    /// a `SharedArrayBuffer`): the state is re-read every `sync_ms` (100 ms; 0: before
    /// each admission), so a trip by any worker is seen by every worker within
    /// `sync_ms`, and bulkhead slots are process-wide.
    #[default]
    Sync,
    /// The host answers later (Redis): decisions come from the last view, refreshed
    /// every `sync_ms` and at once on the events that matter; bulkheads stay local.
    Async,
}

/// Process-wide (shared) state: how the engine talks to the host's CAS store.
#[derive(Clone, Debug, PartialEq)]
pub struct SharedConfig {
    /// Synchronous or asynchronous store.
    pub mode: SyncMode,
    /// Prefix of every store key (several engines with one prefix share state).
    pub namespace: String,
    /// CAS attempts per update before degrading.
    pub cas_attempts: u32,
    /// A bulkhead slot entry not refreshed for this long belongs to a dead worker.
    pub lease_ttl_ms: u64,
    /// A worker holding slots refreshes its entry at least this often.
    pub heartbeat_ms: u64,
    /// Healthy outcomes are merged into the shared state at most this often.
    pub flush_ms: u64,
    /// How often an active key's view is refreshed; `None`: 100 ms in sync mode,
    /// 1 000 ms in async mode (see [`SharedConfig::sync_ms`]). 0 (sync mode only):
    /// before every admission.
    pub sync_ms: Option<u64>,
    /// A view older than this is stale; the key then runs on its local breaker
    /// until the store answers again.
    pub stale_ms: u64,
}

impl Default for SharedConfig {
    fn default() -> Self {
        Self {
            mode: SyncMode::Sync,
            namespace: "fusewire".into(),
            cas_attempts: 8,
            lease_ttl_ms: 30_000,
            heartbeat_ms: 5_000,
            flush_ms: 100,
            sync_ms: None,
            stale_ms: 10_000,
        }
    }
}

impl SharedConfig {
    /// The view refresh interval in effect: `sync_ms`, or the mode's default.
    pub fn sync_ms(&self) -> u64 {
        self.sync_ms.unwrap_or(match self.mode {
            SyncMode::Sync => 100,
            SyncMode::Async => 1_000,
        })
    }
}

/// A config that failed to parse or validate: the field path and the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// Dotted path of the offending field, e.g. `breaker.half_open.permitted_probes`
    /// (empty when the document itself is malformed).
    pub path: String,
    /// What is wrong with it.
    pub reason: String,
}

impl ConfigError {
    /// An error at `path` for `reason`.
    pub fn new(path: &str, reason: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

impl ConfigError {
    /// The same error with `prefix` put in front of its path (`policies[0]` +
    /// `breaker.mode` = `policies[0].breaker.mode`).
    pub fn within(mut self, prefix: &str) -> Self {
        self.path = match (prefix.is_empty(), self.path.is_empty()) {
            (true, _) => self.path,
            (false, true) => prefix.to_string(),
            (false, false) => text!("{prefix}.{}", self.path),
        };
        self
    }
}

/// A setting that is valid but does not do what it seems to (hosts log it at warn
/// level and go on). A host without room for the words takes the kind alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigWarning {
    /// `queue_rejection_threshold` caps the wait queue below `max_queue`.
    QueueCapped,
    /// The slow-call threshold is above the call timeout: a call that slow times out
    /// instead (unless it answers before the host polls its deadline).
    SlowCallPastTimeout,
    /// A half-open probe's lease ends before its call's timeout.
    ProbeLeaseShort,
}

impl ConfigWarning {
    /// Every kind, in bit order (`1 << kind as u32`).
    pub const ALL: [ConfigWarning; 3] = [
        Self::QueueCapped,
        Self::SlowCallPastTimeout,
        Self::ProbeLeaseShort,
    ];

    /// Dotted path of the field, as in [`ConfigError`].
    pub fn path(self) -> &'static str {
        match self {
            Self::QueueCapped => "bulkhead.max_queue",
            Self::SlowCallPastTimeout => "breaker.slow_call.duration_threshold_ms",
            Self::ProbeLeaseShort => "breaker.half_open.probe_timeout_ms",
        }
    }

    /// What it does instead, and what to set.
    pub fn reason(self) -> &'static str {
        match self {
            Self::QueueCapped => {
                "queue_rejection_threshold (5 unless set, as in Hystrix) caps the queue below it: set both"
            }
            Self::SlowCallPastTimeout => {
                "above execution.timeout_ms: a call that slow times out instead, unless it answers between its deadline and the next poll"
            }
            Self::ProbeLeaseShort => {
                "below execution.timeout_ms: a probe still running then reopens the breaker, though it may yet succeed"
            }
        }
    }
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path(), self.reason())
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "{}: {}", self.path, self.reason)
        }
    }
}

impl std::error::Error for ConfigError {}

/// Largest `permitted_probes` (probe leases are tracked in a fixed array).
pub const MAX_PROBES: u32 = 16;
/// Largest bucket count of either window (the one ring limit).
pub const MAX_BUCKETS: u32 = crate::ring::MAX_BUCKETS;
/// Largest `keys.max_keys`.
pub const MAX_KEYS: u32 = 10_000;
/// Longest key name (bytes); the engine shortens longer names (`engine::bounded_name`).
pub const MAX_KEY_LEN: usize = 200;
/// Longest duration accepted anywhere (one year), so `ms * 1e6` never overflows.
pub const MAX_DURATION_MS: u64 = 365 * 24 * 3600 * 1000;

/// Shows an `f64` in an error message without pulling float formatting into `.wasm`
/// builds (integers as integers, else three decimals).
pub(crate) struct Num(pub(crate) f64);

impl fmt::Display for Num {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        if v.is_nan() {
            return f.write_str("NaN");
        }
        if v.is_infinite() || v.abs() >= 1e12 {
            return f.write_str(if v > 0.0 {
                "a huge number"
            } else {
                "a huge negative number"
            });
        }
        let neg = if v < 0.0 { "-" } else { "" };
        // Up to six decimals, trailing zeros dropped (`100.0001` is not shown as the
        // bound `100`); tiny values with a decimal exponent (`1.5e-7`).
        let (mut m, mut e) = (v.abs(), 0u64);
        while m != 0.0 && m < 1e-3 {
            m *= 10.0;
            e += 1;
        }
        if e > 0 {
            while m < 1.0 {
                m *= 10.0;
                e += 1;
            }
        }
        let micro = (m * 1e6).round() as u64;
        // Written piece by piece, without a width: no padding code in the `.wasm`.
        f.write_str(neg)?;
        write!(f, "{}", micro / 1_000_000)?;
        let mut frac = micro % 1_000_000;
        if frac != 0 {
            f.write_str(".")?;
        }
        // Digit by digit until the rest is zero: trailing zeros are dropped.
        while frac != 0 {
            fmt::Write::write_char(f, char::from(b'0' + (frac / 100_000) as u8))?;
            frac = frac % 100_000 * 10;
        }
        if e > 0 {
            write!(f, "e-{e}")?;
        }
        Ok(())
    }
}

fn percentage(path: &str, v: f64) -> Result<(), ConfigError> {
    if !v.is_finite() || !(0.0..=100.0).contains(&v) {
        return Err(ConfigError::new(
            path,
            text!("must be a number in 0..=100, got {}", Num(v)),
        ));
    }
    Ok(())
}

fn duration(path: &str, v: u64, min: u64) -> Result<(), ConfigError> {
    if v < min || v > MAX_DURATION_MS {
        return Err(ConfigError::new(
            path,
            text!("must be in {min}..={MAX_DURATION_MS} ms, got {v}"),
        ));
    }
    Ok(())
}

fn window(path_ms: &str, path_buckets: &str, ms: u64, buckets: u32) -> Result<(), ConfigError> {
    duration(path_ms, ms, 1)?;
    if buckets == 0 || buckets > MAX_BUCKETS {
        return Err(ConfigError::new(
            path_buckets,
            text!("must be in 1..={MAX_BUCKETS}, got {buckets}"),
        ));
    }
    if !ms.is_multiple_of(u64::from(buckets)) {
        return Err(ConfigError::new(
            path_buckets,
            text!("must divide {path_ms} ({ms}) evenly, got {buckets}"),
        ));
    }
    Ok(())
}

impl Config {
    /// Parses JSON and validates it. Errors name the field path and the reason.
    pub fn from_json(json: &str) -> Result<Self, ConfigError> {
        Self::from_json_bytes(json.as_bytes())
    }

    /// Parses JSON bytes and validates them.
    pub fn from_json_bytes(json: &[u8]) -> Result<Self, ConfigError> {
        let config: Config = parse_json(json)?;
        config.validate()?;
        Ok(config)
    }

    /// Writes compact JSON (every field, defaults included).
    pub fn to_json(&self) -> String {
        crate::json::ToJson::to_json(self)
    }

    /// Checks every field; the first problem found is returned.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let b = &self.breaker;
        percentage(
            "breaker.error_percentage.threshold_percentage",
            b.error_percentage.threshold_percentage,
        )?;
        if b.consecutive_failures.enabled && b.consecutive_failures.threshold == 0 {
            return Err(ConfigError::new(
                "breaker.consecutive_failures.threshold",
                "must be at least 1 when the rule is enabled",
            ));
        }
        duration(
            "breaker.slow_call.duration_threshold_ms",
            b.slow_call.duration_threshold_ms,
            0,
        )?;
        percentage(
            "breaker.slow_call.rate_threshold_percentage",
            b.slow_call.rate_threshold_percentage,
        )?;
        let k = b.adaptive_throttle.k;
        if !k.is_finite() || !(1.0..=100.0).contains(&k) {
            return Err(ConfigError::new(
                "breaker.adaptive_throttle.k",
                text!("must be a number in 1..=100, got {}", Num(k)),
            ));
        }
        let o = &b.open;
        // An exponential schedule grows from it: from 0 it stays 0 (found by review).
        let least = u64::from(o.schedule == OpenSchedule::Exponential);
        duration("breaker.open.sleep_window_ms", o.sleep_window_ms, least)?;
        if !o.multiplier.is_finite() || !(1.0..=1000.0).contains(&o.multiplier) {
            return Err(ConfigError::new(
                "breaker.open.multiplier",
                text!("must be a number in 1..=1000, got {}", Num(o.multiplier)),
            ));
        }
        duration("breaker.open.max_ms", o.max_ms, 0)?;
        if o.schedule == OpenSchedule::Exponential && o.max_ms < o.sleep_window_ms {
            return Err(ConfigError::new(
                "breaker.open.max_ms",
                text!(
                    "must be at least sleep_window_ms ({}), got {}",
                    o.sleep_window_ms,
                    o.max_ms
                ),
            ));
        }
        if o.schedule == OpenSchedule::Ladder && o.ladder_ms.is_empty() {
            return Err(ConfigError::new(
                "breaker.open.ladder_ms",
                "must have at least one step when schedule is \"ladder\"",
            ));
        }
        if o.ladder_ms.len() > 64 {
            return Err(ConfigError::new(
                "breaker.open.ladder_ms",
                text!("must have at most 64 steps, got {}", o.ladder_ms.len()),
            ));
        }
        for (i, &step) in o.ladder_ms.iter().enumerate() {
            duration(&text!("breaker.open.ladder_ms[{i}]"), step, 0)?;
        }
        percentage("breaker.open.jitter_percentage", o.jitter_percentage)?;
        let h = &b.half_open;
        if h.permitted_probes == 0 || h.permitted_probes > MAX_PROBES {
            return Err(ConfigError::new(
                "breaker.half_open.permitted_probes",
                text!("must be in 1..={MAX_PROBES}, got {}", h.permitted_probes),
            ));
        }
        if h.success_threshold == 0 || h.success_threshold > h.permitted_probes {
            return Err(ConfigError::new(
                "breaker.half_open.success_threshold",
                text!(
                    "must be in 1..=permitted_probes ({}), got {}",
                    h.permitted_probes,
                    h.success_threshold
                ),
            ));
        }
        duration("breaker.half_open.probe_timeout_ms", h.probe_timeout_ms, 1)?;
        duration("breaker.slow_start.ramp_ms", b.slow_start.ramp_ms, 0)?;
        duration("breaker.warm_up_ms", b.warm_up_ms, 0)?;
        percentage(
            "breaker.slow_start.initial_percentage",
            b.slow_start.initial_percentage,
        )?;
        let m = &self.metrics;
        window(
            "metrics.rolling_window_ms",
            "metrics.rolling_buckets",
            m.rolling_window_ms,
            m.rolling_buckets,
        )?;
        window(
            "metrics.percentile_window_ms",
            "metrics.percentile_buckets",
            m.percentile_window_ms,
            m.percentile_buckets,
        )?;
        duration("execution.timeout_ms", self.execution.timeout_ms, 1)?;
        if let Some(p) = &self.bulkhead {
            if p.max_concurrent == 0 {
                return Err(ConfigError::new(
                    "bulkhead.max_concurrent",
                    "must be at least 1",
                ));
            }
            if p.max_queue > 1_000_000 {
                return Err(ConfigError::new(
                    "bulkhead.max_queue",
                    text!("must be at most 1000000, got {}", p.max_queue),
                ));
            }
            if p.max_queue > 0 && p.isolation == Isolation::Semaphore {
                return Err(ConfigError::new(
                    "bulkhead.max_queue",
                    "a wait queue needs \"isolation\": \"pool\" (a semaphore never queues)",
                ));
            }
            if p.max_queue > 0 && p.queue_rejection_threshold == 0 {
                return Err(ConfigError::new(
                    "bulkhead.queue_rejection_threshold",
                    "must be at least 1 when max_queue > 0 (it caps the queue)",
                ));
            }
            duration("bulkhead.max_wait_ms", p.max_wait_ms, 0)?;
        }
        let k = &self.keys;
        if k.max_keys == 0 || k.max_keys > MAX_KEYS {
            return Err(ConfigError::new(
                "keys.max_keys",
                text!("must be in 1..={MAX_KEYS}, got {}", k.max_keys),
            ));
        }
        duration("keys.idle_ms", k.idle_ms, 1_000)?;
        if let Some(c) = &self.cache {
            c.validate().map_err(|e| e.within("cache"))?;
        }
        if let Some(c) = &self.collapser {
            c.validate().map_err(|e| e.within("collapser"))?;
        }
        Ok(())
    }

    /// Settings that validate but do not do what they seem to: a queue capped below
    /// its `max_queue`, a slow-call threshold above the call timeout, probes given up
    /// before their own deadline. Empty for the defaults.
    pub fn warnings(&self) -> impl Iterator<Item = ConfigWarning> {
        let bits = self.warning_bits();
        ConfigWarning::ALL
            .into_iter()
            .filter(move |w| bits & 1 << *w as u32 != 0)
    }

    /// [`Self::warnings`] as bits (`1 << ConfigWarning as u32`), for hosts that keep
    /// the words themselves.
    pub fn warning_bits(&self) -> u32 {
        let (b, e) = (&self.breaker, &self.execution);
        let queue = self.bulkhead.as_ref().is_some_and(|p| {
            p.isolation == Isolation::Pool && p.queue_rejection_threshold < p.max_queue
        });
        // A pinned breaker neither trips on slow calls nor probes.
        let timed = e.timeout_enabled && b.mode.runs_state_machine();
        let slow = b.slow_call.enabled && b.slow_call.duration_threshold_ms > e.timeout_ms;
        let probe = b.half_open.probe_timeout_ms < e.timeout_ms;
        u32::from(queue) | u32::from(timed && slow) << 1 | u32::from(timed && probe) << 2
    }
}

fn name_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

impl SharedConfig {
    /// Parses JSON and validates it (errors name the field path and the reason).
    pub fn from_json(json: &str) -> Result<Self, ConfigError> {
        let c: SharedConfig = parse_json(json.as_bytes())?;
        c.validate()?;
        Ok(c)
    }

    /// Checks every field; the first problem found is returned. Paths are relative to
    /// the section (hosts prefix them, e.g. `shared.`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !name_ok(&self.namespace) {
            return Err(ConfigError::new(
                "namespace",
                text!(
                    "must be 1..=64 characters of [A-Za-z0-9_.-], got {}",
                    crate::json::Quoted(&self.namespace)
                ),
            ));
        }
        if self.cas_attempts == 0 || self.cas_attempts > 1000 {
            return Err(ConfigError::new(
                "cas_attempts",
                text!("must be in 1..=1000, got {}", self.cas_attempts),
            ));
        }
        duration("heartbeat_ms", self.heartbeat_ms, 1)?;
        duration("flush_ms", self.flush_ms, 1)?;
        let sync_ms = self.sync_ms();
        let floor = if self.mode == SyncMode::Sync { 0 } else { 1 };
        duration("sync_ms", sync_ms, floor)?;
        duration("lease_ttl_ms", self.lease_ttl_ms, 1)?;
        let floor = self.heartbeat_ms.max(self.flush_ms).saturating_mul(2);
        if self.lease_ttl_ms < floor {
            return Err(ConfigError::new(
                "lease_ttl_ms",
                text!(
                    "must be at least twice heartbeat_ms ({}) and twice flush_ms ({}), got {}",
                    self.heartbeat_ms,
                    self.flush_ms,
                    self.lease_ttl_ms
                ),
            ));
        }
        duration("stale_ms", self.stale_ms, 1)?;
        if self.stale_ms < sync_ms.saturating_mul(2) {
            return Err(ConfigError::new(
                "stale_ms",
                text!(
                    "must be at least twice sync_ms ({sync_ms}), got {}",
                    self.stale_ms
                ),
            ));
        }
        Ok(())
    }
}

/// Parses any part of the one schema (or a host's document embedding it) from JSON;
/// errors name the field path (`policies[0].breaker.mode`) and the reason.
pub fn parse_json<T: crate::json::FromJson>(json: &[u8]) -> Result<T, ConfigError> {
    crate::json::from_slice(json)
}

#[cfg(test)]
mod tests {
    use super::Num;

    #[test]
    fn numbers_in_messages() {
        // `format!`, not `to_string()` (another copy of the formatting code in the .wasm).
        let show = |v: f64| format!("{}", Num(v));
        assert_eq!(show(150.0), "150");
        assert_eq!(show(0.5), "0.5");
        assert_eq!(show(-2.25), "-2.25");
        assert_eq!(show(12.3456), "12.3456");
        assert_eq!(show(12.34567891), "12.345679");
        // Found by review: 100.0001 read "got 100", the bound it broke.
        assert_eq!(show(100.0001), "100.0001");
        assert_eq!(show(0.99999), "0.99999");
        assert_eq!(show(1e12), "a huge number");
        assert_eq!(show(f64::NAN), "NaN");
        assert_eq!(show(f64::INFINITY), "a huge number");
        assert_eq!(show(1e-7), "1e-7");
        assert_eq!(show(-2.5e-4), "-2.5e-4");
        assert_eq!(show(0.0), "0");
        // Zeros inside the fraction are kept.
        assert_eq!(show(1.05), "1.05");
        assert_eq!(show(0.005), "0.005");
        assert_eq!(show(7.000001), "7.000001");
        assert_eq!(show(-30.0405), "-30.0405");
    }
}
