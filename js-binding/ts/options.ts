/**
 * opossum's options → the core's config schema. This file checks the *types* of
 * the options (the core cannot see a function or NaN through JSON) and maps their
 * names; every range and rule is checked by the core, whose messages are reported
 * under the option's name (`options.errorThresholdPercentage: must be a number in
 * 0..=100, got 150`).
 * @internal
 */
import type { CoreConfig, CoreSharedConfig } from './config.js';
import { configError, lost, out, putScratch, w } from './engine.js';
import { describe, optionError, warn } from './errors.js';
import { AsyncStore } from './async-store.js';

/** Set (to true) in the options of a `Collapser`'s breaker, whose `fusewire` carries the collapser and its cache. @internal */
export const FOR_COLLAPSER: unique symbol = Symbol('fusewire.forCollapser');

/** One year: the core's longest duration. */
export const MAX_MS = 365 * 24 * 3600 * 1000;
/** The core's `shared.lease_ttl_ms` default. */
const DEFAULT_LEASE_TTL_MS = 30_000;
/** `keys.idle_ms` of a breaker with a shared store (10 min). */
const SHARED_IDLE_MS = 600_000;

/** Where each core path comes from when it was mapped from an opossum option. */
const ORIGIN: Record<string, string> = {
  'execution.timeout_ms': 'timeout',
  'breaker.half_open.probe_timeout_ms': 'timeout',
  'breaker.open.sleep_window_ms': 'resetTimeout',
  'breaker.error_percentage.threshold_percentage': 'errorThresholdPercentage',
  'breaker.error_percentage.request_volume_threshold': 'volumeThreshold',
  'metrics.rolling_window_ms': 'rollingCountTimeout',
  'metrics.percentile_window_ms': 'rollingCountTimeout',
  'metrics.rolling_buckets': 'rollingCountBuckets',
  'metrics.percentile_buckets': 'rollingCountBuckets',
  'metrics.percentiles_enabled': 'rollingPercentilesEnabled',
  'breaker.warm_up_ms': 'rollingCountTimeout',
  'bulkhead.max_concurrent': 'capacity',
  'cache.ttl_ms': 'cacheTTL',
  'cache.max_entries': 'cacheSize',
  'coalesce.ttl_ms': 'coalesceTTL',
  'coalesce.failure_ttl_ms': 'coalesceTTL',
  'coalesce.max_entries': 'coalesceSize',
};

/** What the wrapper keeps from the options (everything else went to the core). */
export interface Parsed {
  config: CoreConfig;
  configJson: string;
  sharedJson: string;
  /** The core `CacheConfig` of the coalescing cache ('' without `coalesce`). */
  coalesceJson: string;
  /** Whether the breaker caches (`cache: true` or an `options.fusewire.cache` section). */
  cache: boolean;
  /** Outcomes that end coalescing early (opossum's `coalesceResetOn`). */
  coalesceResetOn: string[];
  /** Effective call timeout (ms), false when disabled. */
  timeout: number | false;
  resetTimeout: number;
  rollingCountTimeout: number;
  rollingCountBuckets: number;
  volumeThreshold: number;
  warmUp: boolean;
  /** Paths set through `options.fusewire` / `options.shared` (error messages). */
  fusewirePaths: Set<string>;
  /** Core paths `options.fusewire` set through another (`derived`): the one set. */
  derivedFrom: Map<string, string>;
  /** The cache's time to live (ms, 0: none), for a custom `cacheTransport`. */
  cacheTtl: number;
  sharedPaths: Set<string>;
  /** A `Collapser`'s breaker: its options are the Collapser's `options.breaker`. */
  forCollapser: boolean;
}

type Obj = Record<string, unknown>;

function isPlain(v: unknown): v is Obj {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return false;
  const p = Object.getPrototypeOf(v) as unknown;
  return p === Object.prototype || p === null;
}

/** A finite number option (or undefined). */
export function num(name: string, v: unknown): number | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'number') throw optionError(`options.${name}`, `must be a number, got ${describe(v)}`);
  if (!Number.isFinite(v)) throw optionError(`options.${name}`, `must be a finite number, got ${describe(v)}`);
  return v;
}

/**
 * A duration option in milliseconds (or undefined): `min..=MAX_MS`, as the core's
 * durations. Fractional milliseconds are accepted (a timer takes them): the core
 * gets them rounded up (`Math.ceil`), never to 0.
 */
export function ms(name: string, v: unknown, min = 0): number | undefined {
  const n = num(name, v);
  if (n === undefined) return undefined;
  if (!(n >= min && n <= MAX_MS)) throw optionError(`options.${name}`, `must be in ${min}..=${MAX_MS} ms, got ${describe(n)}`);
  return n;
}

/** An integer option in `lo..=hi` (or undefined). */
export function int(name: string, v: unknown, lo: number, hi: number): number | undefined {
  const n = num(name, v);
  if (n === undefined) return undefined;
  if (!Number.isInteger(n) || n < lo || n > hi) {
    throw optionError(`options.${name}`, `must be an integer in ${lo}..=${hi}, got ${describe(n)}`);
  }
  return n;
}

/** The core's largest `metrics.rolling_buckets` (fusewire-core `MAX_BUCKETS`). */
const MAX_BUCKETS = 1000;
/**
 * The bytes an opossum-style cache (and coalescing) keeps at most: keys plus 256 B an
 * entry (lib `ENTRY_BYTES`), about a million short keys. opossum's is unbounded; here
 * one `.wasm` serves every breaker of the process, and an attacker's unique keys must
 * not fill it (found by a security review). `fusewire.cache.max_bytes` sets another.
 */
export const CACHE_BYTES = 256 * 2 ** 20;
/** The core's largest `cache.max_entries`: 2^24 − 1, opossum's default `cacheSize`. */
export const MAX_CACHE_ENTRIES = 16_777_215;

/** A boolean option (or undefined). */
export function bool(name: string, v: unknown): boolean | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'boolean') throw optionError(`options.${name}`, `must be a boolean, got ${describe(v)}`);
  return v;
}

/** A function option (or undefined). */
export function fn<F>(name: string, v: unknown): F | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'function') throw optionError(`options.${name}`, `must be a function, got ${describe(v)}`);
  return v as F;
}

/** A string option (or undefined). */
export function str(name: string, v: unknown): string | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'string') throw optionError(`options.${name}`, `must be a string, got ${describe(v)}`);
  return v;
}

/** Checks a JSON-bound value: plain data only, finite numbers; collects the paths set. */
/** `o` without the fields given as `undefined`: those are not given (found by review: spread over defaults, they hid them). */
export function withoutUndefined(o: Obj): Obj {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));
}

export function walk(v: unknown, path: string, set: Set<string>, depth = 0): void {
  if (depth > 16) throw optionError(`options.${path}`, 'nested too deeply');
  if (v === null || typeof v === 'string' || typeof v === 'boolean') {
    set.add(path);
    return;
  }
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) throw optionError(`options.${path}`, `must be a finite number, got ${describe(v)}`);
    set.add(path);
    return;
  }
  if (Array.isArray(v)) {
    if (v.length > 1024) throw optionError(`options.${path}`, `must have at most 1024 items, got ${v.length}`);
    set.add(path);
    v.forEach((x, i) => walk(x, `${path}[${i}]`, set, depth + 1));
    return;
  }
  if (isPlain(v)) {
    set.add(path);
    for (const [k, x] of Object.entries(v)) {
      // An own `__proto__` (from JSON.parse) would become the merged config's
      // prototype, not a field (found by a security review): no field has the name.
      if (k === '__proto__') throw optionError(`options.${path}.__proto__`, 'unknown field');
      if (x !== undefined) walk(x, `${path}.${k}`, set, depth + 1);
    }
    return;
  }
  throw optionError(`options.${path}`, `must be plain JSON data, got ${describe(v)}`);
}

/** Deep merge of plain objects (arrays and scalars replace; undefined is skipped). */
export function merge(base: Obj, over: Obj): Obj {
  const out: Obj = { ...base };
  for (const [k, v] of Object.entries(over)) {
    if (v === undefined) continue;
    const b = out[k];
    out[k] = isPlain(b) && isPlain(v) ? merge(b, v) : v;
  }
  return out;
}

function get(o: unknown, path: string): unknown {
  let cur = o;
  for (const part of path.split('.')) {
    if (!isPlain(cur)) return undefined;
    cur = cur[part];
  }
  return cur;
}

/** Maps a core error path to the option it came from. */
function blame(path: string, fusewirePaths: Set<string>, sharedPaths: Set<string>, from: Map<string, string>): string {
  const source = from.get(path);
  if (source !== undefined) return `options.fusewire.${source}`;
  if (path.startsWith('shared.')) {
    void sharedPaths;
    return `options.${path}`;
  }
  if (path.startsWith('coalesce.')) return `options.${ORIGIN[path] ?? 'coalesce'}`;
  const base = path.replace(/\[\d+\]$/, '');
  if (fusewirePaths.has(`fusewire.${path}`) || fusewirePaths.has(`fusewire.${base}`)) {
    return `options.fusewire.${path}`;
  }
  const o = ORIGIN[path];
  if (o !== undefined) return `options.${o}`;
  return path === '' ? 'options.fusewire' : `options.fusewire.${path}`;
}

/** Validates `config` (an object of the core schema) with the core; throws a TypeError. */
export function checkCore(config: unknown, label: string): void {
  let json: string;
  try {
    json = JSON.stringify(config);
  } catch (e) {
    throw optionError(label, `cannot be serialised as JSON (${(e as Error).message})`);
  }
  const [len] = putScratch([json]);
  if (w.fw_check(len!) !== 0) {
    const { path, reason } = configError();
    throw optionError(path === '' ? label : `${label}.${path}`, reason);
  }
}

/**
 * Maps opossum's options (already defaulted as opossum defaults them) to the core
 * schema, merges `options.fusewire` over it, and serialises both sections. Throws a
 * TypeError for a bad type; the core's range checks run in `create`.
 */
export function parse(options: Obj, forCollapser = false): Parsed {
  const timeoutOpt = options['timeout'];
  let timeout: number | false;
  if (timeoutOpt === undefined) timeout = 10_000;
  else if (timeoutOpt === false || timeoutOpt === 0) timeout = false;
  else if (timeoutOpt === Infinity) {
    // (opossum's timer fires at once for it: every call timed out.)
    throw optionError('options.timeout', 'must be a finite number, got Infinity (false turns the timeout off)');
  } else timeout = Math.ceil(ms('timeout', timeoutOpt)!);
  const resetTimeout = ms('resetTimeout', options['resetTimeout']) ?? 30_000;
  const threshold = num('errorThresholdPercentage', options['errorThresholdPercentage']) ?? 50;
  const rollingCountTimeout = ms('rollingCountTimeout', options['rollingCountTimeout'], 1) ?? 10_000;
  const rollingCountBuckets = int('rollingCountBuckets', options['rollingCountBuckets'], 1, MAX_BUCKETS) ?? 10;
  const percentiles = bool('rollingPercentilesEnabled', options['rollingPercentilesEnabled']) ?? true;
  const volumeThreshold = int('volumeThreshold', options['volumeThreshold'], 0, 0xffff_ffff) ?? 0;
  // Infinity: unbounded, as opossum's default (it takes any non-integer for that).
  const capOpt = options['capacity'];
  const capacity = capOpt === Infinity ? undefined : num('capacity', capOpt);
  if (capacity !== undefined && !(Number.isInteger(capacity) && capacity >= 1)) {
    throw optionError('options.capacity', `must be an integer of at least 1, or Infinity (unbounded), got ${describe(capacity)}`);
  }
  const state = options['state'];
  const warmUp = (bool('allowWarmUp', options['allowWarmUp']) ?? false) ||
    (isPlain(state) && state['warmUp'] === true);

  // Whole milliseconds (the core's unit); opossum buckets are floor(T / B) long.
  const width = Math.floor(rollingCountTimeout / rollingCountBuckets);
  if (width === 0) {
    throw optionError('options.rollingCountTimeout',
      `must be at least rollingCountBuckets (${rollingCountBuckets}) ms: each bucket is ` +
      `floor(rollingCountTimeout / rollingCountBuckets) whole ms, got ${rollingCountTimeout}`);
  }
  const window = width * rollingCountBuckets;
  const [percentileWindow, percentileBuckets] = latencyWindow(window, rollingCountBuckets);
  const probeTimeout = timeout === false ? MAX_MS : timeout;
  const base: CoreConfig = {
    breaker: {
      mode: 'normal',
      error_percentage: {
        enabled: true,
        request_volume_threshold: volumeThreshold,
        threshold_percentage: threshold,
        denominator: 'all_calls',
        comparison: 'above',
      },
      open: { schedule: 'fixed', sleep_window_ms: Math.ceil(resetTimeout) },
      half_open: {
        permitted_probes: 1,
        success_threshold: 1,
        probe_timeout_ms: probeTimeout,
        reset_window_on_close: false,
      },
      warm_up_ms: warmUp ? Math.ceil(rollingCountTimeout) : 0,
    },
    metrics: {
      rolling_window_ms: window,
      rolling_buckets: rollingCountBuckets,
      percentile_window_ms: percentileWindow,
      percentile_buckets: percentileBuckets,
      // Off: the core keeps no latency histograms (less memory, a cheaper fire).
      percentiles_enabled: percentiles,
    },
    execution: timeout === false
      // opossum's default, should `options.fusewire` turn the timeout on.
      ? { timeout_enabled: false, timeout_ms: 10_000 }
      : { timeout_enabled: true, timeout_ms: timeout },
    bulkhead: capacity === undefined || capacity > 0xffff_ffff
      ? null
      : {
          isolation: 'semaphore',
          max_concurrent: capacity,
          max_queue: 0,
          fallback_max_concurrent: 0xffff_ffff,
        },
    // A local breaker keeps its key (its window is its stats); a shared one lets it
    // expire after 10 idle minutes, so it stops syncing (the store keeps the state;
    // the next fire or status read revives it).
    keys: { max_keys: 1, idle_ms: options['shared'] === undefined ? MAX_MS : SHARED_IDLE_MS },
  };

  // opossum's cache: the first successful result per key, for cacheTTL (0: until
  // evicted), cacheSize entries; no in-flight sharing (that is `coalesce`). A custom
  // cacheTransport replaces it (opossum's pluggable transport).
  const fw = options['fusewire'];
  if (!forCollapser && isPlain(fw) && fw['collapser'] !== undefined && fw['collapser'] !== null) {
    throw optionError('options.fusewire.collapser',
      'a CircuitBreaker has no collapser: batch loads with the Collapser class (its options windowMs, maxBatchSize, …)');
  }
  // A `cache` section in `options.fusewire` turns the cache on, as `cache: true` does
  // (found by review: it was taken and did nothing), unless `cache: false` is given;
  // the Collapser's is its own.
  const cache = bool('cache', options['cache']) ??
    (!forCollapser && isPlain(fw) && isPlain(fw['cache']));
  const cacheTTL = ms('cacheTTL', options['cacheTTL']);
  const cacheSize = num('cacheSize', options['cacheSize']);
  const coreCache = cache && options['cacheTransport'] === undefined;
  if (coreCache) {
    (base as Obj)['cache'] = {
      max_entries: int('cacheSize', cacheSize, 1, MAX_CACHE_ENTRIES) ?? MAX_CACHE_ENTRIES,
      max_bytes: CACHE_BYTES,
      ttl_ms: Math.ceil(cacheTTL ?? 0),
      cache_failures: false,
      max_waiters: 0,
      max_key_bytes: 65_536,
      max_scopes: 0,
    };
  }
  const coalesce = bool('coalesce', options['coalesce']) ?? false;
  // false: no expiry (what opossum writes back when `timeout` is false).
  const cttl = options['coalesceTTL'];
  const coalesceTTL = cttl === false ? 0 : ms('coalesceTTL', cttl);
  const coalesceSize = num('coalesceSize', options['coalesceSize']);
  const ro = options['coalesceResetOn'];
  if (ro !== undefined && !Array.isArray(ro)) {
    throw optionError('options.coalesceResetOn', `must be an array of "error", "success", "timeout", got ${describe(ro)}`);
  }
  // opossum drops other entries silently; a misspelt one would never reset: refused, by index.
  const bad = ro === undefined ? -1 : (ro as unknown[]).findIndex((x) => x !== 'error' && x !== 'success' && x !== 'timeout');
  if (bad >= 0) {
    throw optionError(`options.coalesceResetOn[${bad}]`, `must be "error", "success" or "timeout", got ${describe((ro as unknown[])[bad])}`);
  }
  const coalesceResetOn = (ro as string[] | undefined) ?? [];
  let coalesceJson = '';
  if (coalesce) {
    // opossum's coalesce: concurrent calls with one key share the first call's
    // result, which is kept for coalesceTTL (default: timeout); coalesceResetOn
    // ends that early. On the core's cache: followers wait for the leader.
    const ttl = Math.ceil(coalesceTTL ?? (timeout === false ? 0 : timeout));
    coalesceJson = JSON.stringify({
      max_entries: int('coalesceSize', coalesceSize, 1, MAX_CACHE_ENTRIES) ?? MAX_CACHE_ENTRIES,
      max_bytes: CACHE_BYTES,
      ttl_ms: ttl,
      // Kept as opossum keeps them; `coalesceResetOn` forgets each kind after its
      // followers got it (errors and timeouts apart: `Breaker._lead1`).
      cache_failures: true,
      failure_ttl_ms: ttl > 0 ? ttl : MAX_MS,
      on_leader_failure: 'fail_followers',
      max_waiters: 1_000_000,
      // Without a timeout nothing else ends a hung leader: its followers wait at most
      // coalesceTTL, then run their own calls, and the key takes a new leader (found by
      // review: a hung call held its key for good; opossum's calls after coalesceTTL
      // start anew).
      max_wait_ms: timeout === false && ttl > 0 ? ttl : MAX_MS,
      max_key_bytes: 65_536,
      max_scopes: 0,
    });
  }

  const fusewirePaths = new Set<string>();
  const derivedFrom = new Map<string, string>();
  let config = base as Obj;
  if (fw !== undefined) {
    if (!isPlain(fw)) throw optionError('options.fusewire', `must be an object (the core config schema), got ${describe(fw)}`);
    walk(fw, 'fusewire', fusewirePaths);
    config = merge(config, fw);
    config = derived(config, fusewirePaths, warmUp, derivedFrom);
  }
  // A breaker's cache answers hits only: calls waiting for a call in flight are
  // `coalesce` (found by review: `max_waiters` was taken, and its waiters ran anyway).
  const mw = isPlain(config['cache']) ? (config['cache'] as Obj)['max_waiters'] : undefined;
  if (coreCache && !forCollapser && mw !== undefined && mw !== 0) {
    throw optionError('options.fusewire.cache.max_waiters',
      `must be 0 on a CircuitBreaker (calls wait for one in flight with coalesce: true), got ${describe(mw)}`);
  }
  // A custom cacheTransport is the cache: the core keeps none; nor with `cache: false`
  // (found by review: a `fusewire.cache` section made one nothing used).
  if ((cache && options['cacheTransport'] !== undefined) || (!cache && !forCollapser)) config = merge(config, { cache: null });

  const sharedPaths = new Set<string>();
  let sharedJson = '';
  const shared = options['shared'];
  if (shared !== undefined) {
    if (!isPlain(shared) && !(typeof shared === 'object' && shared !== null)) {
      throw optionError('options.shared', `must be an object ({ store, ...shared config }), got ${describe(shared)}`);
    }
    const { store: _store, ...rest } = shared as Obj;
    walk(rest, 'shared', sharedPaths);
    // The store decides the mode: another one given would be overridden unseen.
    const mode = _store instanceof AsyncStore ? 'async' : 'sync';
    if (rest['mode'] !== undefined && rest['mode'] !== mode) {
      const kind = _store instanceof AsyncStore ? 'a RedisStore' : 'a SharedStore';
      throw optionError('options.shared.mode', `must be left out (the store sets it: '${mode}' for ${kind}), got ${describe(rest['mode'])}`);
    }
    // A SharedStore answers at once (sync mode); an AsyncStore (Redis) later: async
    // mode, with the store's defaults under the user's options.
    // (`flush_ms: undefined` hid the store's 1000 ms: the core's 100 ms applied.)
    const sc: CoreSharedConfig & { mode: 'sync' | 'async' } = _store instanceof AsyncStore
      ? { ..._store._defaults(), ...(withoutUndefined(rest) as CoreSharedConfig), mode: 'async' }
      : { ...(rest as CoreSharedConfig), mode: 'sync' };
    sharedJson = JSON.stringify(sc);
    // A SharedStore gives an entry not written for its ttlMs to a new name: a breaker
    // in use writes more often than its lease (its heartbeat), so a lease within half
    // of it keeps a live breaker's entry.
    const storeTtl = (_store as { _ttlMs?: unknown } | undefined)?._ttlMs;
    // (One that is not a number is the core's to name.)
    const given = sc.lease_ttl_ms;
    const lease = given === undefined ? DEFAULT_LEASE_TTL_MS : given;
    if (typeof storeTtl === 'number' && typeof lease === 'number' && lease * 2 > storeTtl) {
      throw optionError('options.shared.lease_ttl_ms',
        `must be at most half the store's ttlMs (${storeTtl} ms), got ${describe(lease)}${given === undefined ? ' (the default)' : ''}`);
    }
    // `timeout: false` lets a probe run for ever (as in opossum). Shared, its probe
    // lease would then hold every process half-open, refusing every call, once its
    // process died (found by review): it lasts the call timeout set through
    // `options.fusewire`, else the shared lease, as a dead process's bulkhead slots
    // do. (A probe running longer reopens the breaker.)
    if (get(config, 'breaker.half_open.probe_timeout_ms') === MAX_MS &&
        !fusewirePaths.has('fusewire.breaker.half_open.probe_timeout_ms')) {
      const exec = get(config, 'execution.timeout_enabled') === false ? undefined : get(config, 'execution.timeout_ms');
      const bound = typeof exec === 'number' ? exec : lease;
      // Not an integer: the core names the option that is wrong.
      if (Number.isInteger(bound)) config = merge(config, { breaker: { half_open: { probe_timeout_ms: bound } } });
    }
  }

  const configJson = JSON.stringify(config);
  const effTimeout = get(config, 'execution.timeout_enabled') === false
    ? false
    : (get(config, 'execution.timeout_ms') as number);
  // The values in effect, where `options.fusewire` set them: the `halfOpen` event's
  // argument, a restored open state, the snapshot interval.
  const open = get(config, 'breaker.open');
  const ladder = get(config, 'breaker.open.ladder_ms');
  const firstOpen = isPlain(open) && open['schedule'] === 'ladder' && Array.isArray(ladder) ? ladder[0] : get(config, 'breaker.open.sleep_window_ms');
  const rolling = get(config, 'metrics.rolling_window_ms');
  const buckets = get(config, 'metrics.rolling_buckets');
  const native = (path: string): boolean => fusewirePaths.has(`fusewire.${path}`);
  const cacheTtl = get(isPlain(fw) ? fw : undefined, 'cache.ttl_ms');
  return {
    config: config as CoreConfig,
    configJson,
    sharedJson,
    coalesceJson,
    cache,
    coalesceResetOn,
    timeout: effTimeout,
    resetTimeout: native('breaker.open') && typeof firstOpen === 'number' ? firstOpen : resetTimeout,
    rollingCountTimeout: native('metrics') && typeof rolling === 'number' ? rolling : rollingCountTimeout,
    rollingCountBuckets: native('metrics') && typeof buckets === 'number' ? buckets : rollingCountBuckets,
    volumeThreshold,
    warmUp,
    fusewirePaths,
    derivedFrom,
    cacheTtl: native('cache.ttl_ms') && typeof cacheTtl === 'number' ? cacheTtl : cacheTTL ?? 0,
    sharedPaths,
    forCollapser,
  };
}

/**
 * Latency percentiles over the counts' window, in at most 5 histogram buckets (each
 * bucket is a 0.7 KB histogram; the counters keep their bucket count): whole groups
 * of count buckets where their number allows, so a latency leaves with its counts;
 * else the window (less a few ms) in equal parts. (Found by review: 7, 11 or 13
 * buckets kept one histogram, and every latency left at once.)
 */
function latencyWindow(window: number, buckets: number): [number, number] {
  if (buckets <= 5) return [window, buckets];
  const parts = [5, 4, 3, 2];
  const b = parts.find((d) => buckets % d === 0) ?? parts.find((d) => window % d === 0) ?? 5;
  return [window - (window % b), b];
}

/**
 * The settings opossum's options derive from one another, following what
 * `options.fusewire` set in their place (found by review): a call timeout set there
 * turns the timeout on and is the probe timeout too, unless those are set as well; a
 * window set there is the warm-up of `allowWarmUp` and, in at most 5 buckets, the
 * latency percentiles' window.
 */
function derived(config: Obj, paths: Set<string>, warmUp: boolean, from: Map<string, string>): Obj {
  const set = (path: string): boolean => paths.has(`fusewire.${path}`);
  let out = config;
  if (set('execution.timeout_ms') && !set('execution.timeout_enabled')) {
    out = merge(out, { execution: { timeout_enabled: true } });
  }
  if ((set('execution.timeout_ms') || set('execution.timeout_enabled')) && !set('breaker.half_open.probe_timeout_ms')) {
    const on = get(out, 'execution.timeout_enabled') !== false;
    const t = on ? get(out, 'execution.timeout_ms') : MAX_MS;
    if (typeof t === 'number') out = merge(out, { breaker: { half_open: { probe_timeout_ms: t } } });
    // A bad value is reported under the option that was set (found by review).
    if (on) from.set('breaker.half_open.probe_timeout_ms', 'execution.timeout_ms');
  }
  // The latency window follows a window set there (found by review: percentiles
  // stayed on opossum's 10 s while the counts covered the window set).
  const rolling = set('metrics.rolling_window_ms') || set('metrics.rolling_buckets');
  if (rolling && !set('metrics.percentile_window_ms') && !set('metrics.percentile_buckets')) {
    const [ms, n] = [get(out, 'metrics.rolling_window_ms'), get(out, 'metrics.rolling_buckets')];
    if (Number.isInteger(ms) && Number.isInteger(n) && (n as number) > 0) {
      const [pw, pb] = latencyWindow(ms as number, n as number);
      out = merge(out, { metrics: { percentile_window_ms: pw, percentile_buckets: pb } });
      from.set('metrics.percentile_window_ms', 'metrics.rolling_window_ms');
      from.set('metrics.percentile_buckets', 'metrics.rolling_buckets');
    }
  }
  if (warmUp && set('metrics.rolling_window_ms') && !set('breaker.warm_up_ms')) {
    out = merge(out, { breaker: { warm_up_ms: get(out, 'metrics.rolling_window_ms') } });
    from.set('breaker.warm_up_ms', 'metrics.rolling_window_ms');
  }
  return out;
}

/** Creates the engine for `parsed` (the core validates); throws a TypeError naming the option. */
export function create(parsed: Parsed, name: string, owner: [number, number], now: number): number {
  const [cl, sl, nl, ql] = putScratch([parsed.configJson, parsed.sharedJson, name, parsed.coalesceJson]);
  const h = w.fw_create(cl!, sl!, nl!, ql!, owner[0], owner[1], now);
  if (h < 0 && !lost) {
    const { path, reason } = configError();
    // Not the options' fault: the one wasm instance is full.
    if (path === '' && (reason === 'wasm memory is full' || reason === 'too many breakers alive')) {
      throw new RangeError(`fusewire: ${reason}`);
    }
    throw optionError(blame(path, parsed.fusewirePaths, parsed.sharedPaths, parsed.derivedFrom), reason);
  }
  // The core's config warnings, a bit each (its `ConfigWarning` order; the words
  // are here, not in the .wasm: its size budget).
  const found = h >= 0 && !lost ? out()[0]! : 0;
  for (const [bit, path, why] of CONFIG_WARNINGS) {
    if ((found & bit) === 0) continue;
    const at = blame(path, parsed.fusewirePaths, parsed.sharedPaths, parsed.derivedFrom);
    // (A Collapser's errors are renamed where it catches them; a warning is not caught.)
    const option = parsed.forCollapser ? at.replace(/^options\./, 'options.breaker.') : at;
    warn(`fusewire: breaker ${JSON.stringify(name)}: ${option}: ${why}`);
  }
  return h;
}

/** The core's `ConfigWarning`s: bit, path, and why. */
const CONFIG_WARNINGS: readonly (readonly [number, string, string])[] = [
  [1, 'bulkhead.max_queue', 'queue_rejection_threshold (5 unless set, as in Hystrix) caps the queue below it: set both'],
  [2, 'breaker.slow_call.duration_threshold_ms', 'above the call timeout: a call that slow times out instead, unless it answers between its deadline and the timer'],
  [4, 'breaker.half_open.probe_timeout_ms', 'below the call timeout: a probe still running then reopens the breaker, though it may yet succeed'],
];
