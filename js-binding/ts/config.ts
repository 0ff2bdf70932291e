/**
 * The core's one config schema (fusewire-core `Config`, snake_case JSON), as
 * TypeScript types; every field is optional. Pass it as `options.fusewire` to
 * configure what opossum's options cannot express: it is merged over what the opossum
 * options (and their defaults) map to — a field left out keeps that value, not the
 * core's default (README, "How opossum's options map onto the core") — and validated
 * by the core. Counts, sizes and durations (ms) are whole numbers.
 */

export type BreakerMode = 'normal' | 'forced_open' | 'forced_closed' | 'disabled' | 'metrics_only';
export type OpenSchedule = 'fixed' | 'exponential' | 'ladder';

/** `T` with every field, deeply, optional and taking `undefined` (not given). */
type Loose<T> = T extends readonly unknown[] ? T
  : T extends object ? { [K in keyof T]?: Loose<T[K]> | undefined } : T;

/** The core's config: every field optional and taking `undefined` (not given). */
export type CoreConfig = Loose<CoreConfigFields>;

interface CoreConfigFields {
  breaker?: {
    /** Overall mode (default `normal`). */
    mode?: BreakerMode;
    /** Hystrix error-percentage rule (opossum's rule, with `denominator: 'all_calls'`, `comparison: 'above'`). */
    error_percentage?: {
      enabled?: boolean;
      request_volume_threshold?: number;
      threshold_percentage?: number;
      /** `total` (Hystrix: success + failure + timeout + rejections) or `all_calls` (opossum's `fires`). */
      denominator?: 'total' | 'all_calls';
      /** `at_or_above` (Hystrix) or `above` (opossum). */
      comparison?: 'at_or_above' | 'above';
    };
    /** Trip after this many failures in a row. */
    consecutive_failures?: { enabled?: boolean; threshold?: number };
    /** Trip when the share of slow calls reaches a rate. */
    slow_call?: {
      enabled?: boolean;
      duration_threshold_ms?: number;
      rate_threshold_percentage?: number;
      request_volume_threshold?: number;
    };
    /** Google-SRE adaptive throttling (probabilistic client-side rejection). */
    adaptive_throttle?: { enabled?: boolean; k?: number };
    /** How long the breaker stays open: fixed, exponential with a cap, or a ladder; with jitter. */
    open?: {
      schedule?: OpenSchedule;
      sleep_window_ms?: number;
      multiplier?: number;
      max_ms?: number;
      ladder_ms?: number[];
      jitter_percentage?: number;
    };
    /** N probes in half-open, successes needed to close, probe lease. */
    half_open?: {
      permitted_probes?: number;
      success_threshold?: number;
      probe_timeout_ms?: number;
      reset_window_on_close?: boolean;
    };
    /** Admission ramp after closing. */
    slow_start?: { ramp_ms?: number; initial_percentage?: number };
    /** No trip during the first `warm_up_ms` (opossum's `allowWarmUp`). */
    warm_up_ms?: number;
  };
  metrics?: {
    rolling_window_ms?: number;
    rolling_buckets?: number;
    percentile_window_ms?: number;
    percentile_buckets?: number;
    /** Keep latency histograms for percentiles (opossum's `rollingPercentilesEnabled`). */
    percentiles_enabled?: boolean;
  };
  execution?: { timeout_enabled?: boolean; timeout_ms?: number };
  /** Concurrency limit; `null`: none. `isolation: 'pool'` adds a bounded wait queue with a max wait. */
  bulkhead?: {
    isolation?: 'semaphore' | 'pool';
    max_concurrent?: number;
    max_queue?: number;
    queue_rejection_threshold?: number;
    max_wait_ms?: number;
    fallback_max_concurrent?: number;
  } | null;
  keys?: { max_keys?: number; idle_ms?: number };
  /** The request cache: turns the cache on, as `cache: true` does, over what `cacheTTL` / `cacheSize` map to. */
  cache?: CoreCacheConfig | null;
  /**
   * The request collapser: the `Collapser` class's (set from its own options; its
   * `breaker.fusewire.collapser` is merged over them). A `CircuitBreaker` refuses it.
   */
  collapser?: CoreCollapserConfig | null;
}

/** The core's `CacheConfig` (core defaults in brackets; a breaker's come from `cacheTTL` / `cacheSize`). */
export interface CoreCacheConfig {
  /** Entries at most, keys in flight included [10 000]. */
  max_entries?: number | undefined;
  /** Bytes at most: keys plus the sizes of values [16 MiB]. */
  max_bytes?: number | undefined;
  /** How long a result is served (ms; 0: until evicted) [60 000]. */
  ttl_ms?: number | undefined;
  /** Whether failures are kept too [false]. */
  cache_failures?: boolean | undefined;
  /** How long a kept failure is served (ms) [1 000]. */
  failure_ttl_ms?: number | undefined;
  /** Callers waiting on a failed leader: fail with it, or the first runs the call again ['fail_followers']. */
  on_leader_failure?: 'fail_followers' | 'promote' | undefined;
  /** Callers waiting per key in flight; 0: no de-duplication [1 000; a CircuitBreaker's must be 0: its in-flight de-duplication is `coalesce`]. */
  max_waiters?: number | undefined;
  /** A call in flight longer than this abandons its waiters (ms) [10 000]. */
  max_wait_ms?: number | undefined;
  /** Longest cacheable key in bytes; longer keys bypass the cache [1 024]. */
  max_key_bytes?: number | undefined;
  /** Request scopes open at once; 0: global only [10 000]. */
  max_scopes?: number | undefined;
}

/** The core's `CollapserConfig` (core defaults in brackets; the `Collapser` class sets its own). */
export interface CoreCollapserConfig {
  /** How long a batch collects loads after its first (ms) [10]. */
  window_ms?: number | undefined;
  /** Loads per batch; a full batch runs at once [1 000]. */
  max_batch_size?: number | undefined;
  /** Loads not yet answered, over all batches [100 000]. */
  max_items?: number | undefined;
  /** Longest collapser key in bytes [1 024]. */
  max_key_bytes?: number | undefined;
  /** Request scopes open at once; 0: global only [10 000]. */
  max_scopes?: number | undefined;
}

/**
 * The core's `SharedConfig`: how breakers keep one state across workers. Its `mode`
 * comes from the store (`sync` for a `SharedStore`, `async` for an async store such
 * as `RedisStore`), not from these options.
 */
export interface CoreSharedConfig {
  /** Prefix of every store key (breakers with the same name and namespace share state). */
  namespace?: string | undefined;
  cas_attempts?: number | undefined;
  lease_ttl_ms?: number | undefined;
  heartbeat_ms?: number | undefined;
  /** Healthy outcomes are merged into the shared state at most this often (ms). */
  flush_ms?: number | undefined;
  /** A worker re-reads a key's shared state when its view is older (ms): 100 with a `SharedStore`, 1000 with an async store such as `RedisStore`; 0 (`SharedStore` only): before every call. */
  sync_ms?: number | null | undefined;
  /** A view the store has not confirmed for this long is stale: the breaker then decides locally (ms, ≥ 2 × `sync_ms`). */
  stale_ms?: number | undefined;
}
