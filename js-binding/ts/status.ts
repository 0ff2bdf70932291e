/**
 * opossum's `Status` on the core's rolling window: `stats` (the window's totals and
 * latency percentiles) and `window` (its buckets), read from the core on demand —
 * O(buckets), whatever the traffic, where opossum concatenates and sorts every
 * latency sample of the window on each read.
 */
import { K, S, out, type Exports } from './engine.js';
import type { Emitter } from './emitter.js';
import { brand } from './errors.js';
import { EventEmitter } from './platform.js';

/** The percentiles opossum reports (keys of `stats.percentiles`). */
export const PERCENTILES = [0, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 1] as const;

/** Counts of one window bucket (opossum's bucket shape). */
export interface Bucket {
  failures: number;
  fallbacks: number;
  successes: number;
  rejects: number;
  fires: number;
  timeouts: number;
  cacheHits: number;
  cacheMisses: number;
  coalesceCacheHits: number;
  coalesceCacheMisses: number;
  semaphoreRejections: number;
  /** Always `{}` per bucket (opossum computes percentiles over the whole window only). */
  percentiles: Record<string, number>;
  /** Always empty: latencies live in fixed-memory histograms (see `stats.percentiles`). */
  latencyTimes: number[];
  /** In `window` only, as opossum's: whether the last `open` / `close` in this bucket was an open (absent: neither). */
  isCircuitBreakerOpen?: boolean;
}

/** The rolling window's buckets, newest first (opossum's `status.window`). */
export type Window = Bucket[];

/** Totals over the rolling window (opossum's `stats`). */
export interface Stats extends Bucket {
  /** Latency (ms) at 0, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 1; -1 when disabled. */
  percentiles: Record<string, number>;
  /** Mean latency (ms); -1 when percentiles are disabled. */
  latencyMean: number;
}

/** Extra counts the cache and collapser keep outside the core's event kinds. @internal */
export interface ExtraCounts {
  /**
   * Counts per bucket the core does not keep: a ring of the window's buckets,
   * `[bucket number, cacheMisses, coalesceCacheMisses, fires, failures, open]` each —
   * cache and coalescing misses (the core has no miss event kind), what makes primed
   * stats (`options.status`) read back as given where the core derives them
   * differently (`fires`; `failures` below `timeouts` + `semaphoreRejections`), and
   * the last `open` (1) or `close` (2) emitted in the bucket (opossum's
   * `isCircuitBreakerOpen`; 0: neither).
   */
  perBucket: number[];
  /**
   * Calls told to `fire` (or `cacheMiss`, `coalesceCacheMiss`) listeners right now,
   * not yet started in the core: opossum counts a fire in its own `fire` listener,
   * so the user's listeners already see it in `stats.fires`.
   */
  firing: number;
  /** Fallbacks whose promise has not settled yet (opossum counts a fallback when it emits `fallback`). */
  fallingBack: number;
  /**
   * Outcomes the core has counted whose events are not emitted yet, `[failures,
   * timeouts, semaphoreRejections]`: opossum counts each in its own listener of the
   * event, so a `timeout` listener does not see the failure yet, nor the calls that
   * time out after it on the same tick.
   */
  unseen: [number, number, number];
}

/** @internal */
export function extraCounts(buckets: number): ExtraCounts {
  const perBucket: number[] = [];
  for (let i = 0; i < Math.max(1, buckets); i++) perBucket.push(-1, 0, 0, 0, 0, 0);
  return { perBucket, firing: 0, fallingBack: 0, unseen: [0, 0, 0] };
}

/** Columns of `ExtraCounts.perBucket`. @internal */
export const CACHE_MISSES = 0;
export const COALESCE_MISSES = 1;
export const FIRES = 2;
export const FAILURES = 3;
export const OPEN = 4;
const STRIDE = 6;

/** @internal Adds `n` to column `col` (`CACHE_MISSES` …) of the bucket of `t`. */
export function countPerBucket(src: StatusSource, col: number, t: number, n = 1): void {
  src._extra.perBucket[rowAt(src, t) + 1 + col]! += n;
}

/** @internal Marks the bucket of `t`: the breaker was opened (`open`) or closed in it. */
export function markOpen(src: StatusSource, t: number, open: boolean): void {
  src._extra.perBucket[rowAt(src, t) + 1 + OPEN] = open ? 1 : 2;
}

/** The ring row of the bucket of `t`, taken over (zeroed) if it held an older bucket. */
function rowAt(src: StatusSource, t: number): number {
  const b = Math.floor(t / src._bucketMs);
  const m = src._extra.perBucket;
  const i = slot(b, m);
  if (m[i] !== b) {
    m[i] = b;
    m.fill(0, i + 1, i + STRIDE);
  }
  return i;
}

/** Where bucket number `b` is in the ring `m`. */
function slot(b: number, m: number[]): number {
  const n = m.length / STRIDE;
  return (((b % n) + n) % n) * STRIDE;
}

/** Adds the counts kept here for bucket number `b` to `into`. */
function addPerBucket(src: StatusSource, b: number, into: Bucket): void {
  const m = src._extra.perBucket;
  const i = slot(b, m);
  if (m[i] !== b) return;
  into.cacheMisses += m[i + 1 + CACHE_MISSES]!;
  into.coalesceCacheMisses += m[i + 1 + COALESCE_MISSES]!;
  into.fires += m[i + 1 + FIRES]!;
  into.failures += m[i + 1 + FAILURES]!;
}

/**
 * Adds what the core has not recorded yet to the current bucket: the calls running,
 * queued or being told to `fire` listeners (opossum counts a fire when it fires),
 * and the fallbacks whose promise is pending (counted when `fallback` is emitted).
 */
function addInProgress(src: StatusSource, b: Bucket, o: ArrayLike<number>): void {
  const x = src._extra;
  b.fires += o[S.IN_FLIGHT]! + o[S.QUEUED]! + x.firing;
  b.fallbacks += x.fallingBack;
}

/** @internal */
export function emptyBucket(): Bucket {
  return {
    failures: 0, fallbacks: 0, successes: 0, rejects: 0, fires: 0, timeouts: 0,
    cacheHits: 0, cacheMisses: 0, coalesceCacheHits: 0, coalesceCacheMisses: 0,
    semaphoreRejections: 0, percentiles: {}, latencyTimes: [],
  };
}

/** Fills opossum's counters from the core's counts per event kind (`c[k]`). @internal */
export function fromCounts(b: Bucket, c: ArrayLike<number>, base: number): Bucket {
  const n = (k: number) => c[base + k]!;
  b.successes = n(K.SUCCESS) + n(K.BAD_REQUEST);
  b.semaphoreRejections = n(K.SEMAPHORE_REJECTED) + n(K.THREAD_POOL_REJECTED);
  b.timeouts = n(K.TIMEOUT);
  b.failures = n(K.FAILURE) + b.timeouts + b.semaphoreRejections;
  b.rejects = n(K.SHORT_CIRCUITED);
  b.fallbacks = n(K.FALLBACK_SUCCESS) + n(K.FALLBACK_FAILURE);
  b.cacheHits = n(K.RESPONSE_FROM_CACHE);
  b.coalesceCacheHits = n(K.COLLAPSED);
  b.fires = b.successes + b.failures + b.rejects + b.cacheHits + b.coalesceCacheHits;
  return b;
}

/** What a `Status` reads (its breaker). @internal */
export interface StatusSource {
  readonly _h: number;
  /** The exports of the instance its core is in. */
  readonly _w: Exports;
  _now(): number;
  readonly _percentilesEnabled: boolean;
  /** Whether `snapshot` events are emitted (opossum's `enableSnapshots`). */
  readonly _snapshotsEnabled: boolean;
  readonly _bucketMs: number;
  readonly _buckets: number;
  readonly _extra: ExtraCounts;
  readonly _final?: { stats: Stats; window: Bucket[] } | undefined;
  /** Puts back the breaker's own listeners after a `removeAllListeners`. */
  _hook?(): void;
  /** Reads a shared breaker's store first. */
  _refresh?(t: number): void;
}

/** @internal Stats of breaker `src` at `now`. */
export function readStats(src: StatusSource): Stats {
  if (src._final !== undefined) return { ...src._final.stats };
  const now = src._now();
  src._refresh?.(now);
  const s = emptyBucket() as Stats;
  if (src._w.fw_snapshot(src._h, now) !== 0) {
    s.latencyMean = src._percentilesEnabled ? 0 : -1;
    for (const p of PERCENTILES) s.percentiles[p] = src._percentilesEnabled ? 0 : -1;
    return s;
  }
  const o = out();
  fromCounts(s, o, S.COUNTS);
  addInProgress(src, s, o);
  // Outcomes whose events are not emitted yet (totals only: which bucket holds them
  // is the core's business).
  const u = src._extra.unseen;
  s.failures -= u[0];
  s.timeouts -= u[1];
  s.semaphoreRejections -= u[2];
  const newest = Math.floor(now / src._bucketMs);
  for (let i = 0; i < src._buckets; i++) addPerBucket(src, newest - i, s);
  if (src._percentilesEnabled) {
    PERCENTILES.forEach((p, i) => {
      s.percentiles[p] = o[S.PERCENTILES + i]!;
    });
    s.latencyMean = o[S.MEAN]!;
  } else {
    for (const p of PERCENTILES) s.percentiles[p] = -1;
    s.latencyMean = -1;
  }
  return s;
}

/** @internal The window's buckets, newest first, `rollingCountBuckets` long. */
export function readWindow(src: StatusSource): Bucket[] {
  if (src._final !== undefined) return src._final.window.map((b) => ({ ...b }));
  const now = src._now();
  src._refresh?.(now);
  const n = src._w.fw_buckets(src._h, now);
  const width = src._bucketMs;
  const buckets: Bucket[] = [];
  const rows = new Map<number, number>();
  const table = n > 0 ? new Float64Array(src._w.memory.buffer, src._w.fw_table(), n * 14) : undefined;
  if (table !== undefined) for (let r = 0; r < n; r++) rows.set(Math.round(table[r * 14]! / width), r);
  const newest = Math.floor(now / width);
  for (let i = 0; i < src._buckets; i++) {
    const b = emptyBucket();
    const r = rows.get(newest - i);
    if (table !== undefined && r !== undefined) fromCounts(b, table, r * 14 + 1);
    addPerBucket(src, newest - i, b);
    const m = src._extra.perBucket;
    const at = slot(newest - i, m);
    // As opossum's bucket: set only in a bucket where the breaker opened or closed.
    if (m[at] === newest - i && m[at + 1 + OPEN] !== 0) b.isCircuitBreakerOpen = m[at + 1 + OPEN] === 1;
    buckets.push(b);
  }
  // The current bucket: the calls and fallbacks in progress (read after the table:
  // `fw_snapshot` reuses the core's output).
  if (buckets.length > 0 && src._w.fw_snapshot(src._h, now) === 0) addInProgress(src, buckets[0]!, out());
  return buckets;
}

/**
 * A breaker's rolling status (opossum's `Status`): `stats`, `window`, and the
 * `snapshot` event (emitted once per bucket interval while someone listens).
 */
export class Status extends (EventEmitter as new () => Emitter) {
  /** @internal Not enumerable: `JSON.stringify(status)` shows what opossum's shows. */
  declare readonly _src: StatusSource;
  /** Whether `stats` reports latency percentiles (opossum's `rollingPercentilesEnabled`). */
  readonly rollingPercentilesEnabled: boolean;
  /** Whether `snapshot` events are emitted (opossum's `enableSnapshots`). */
  readonly enableSnapshots: boolean;

  /** @internal */
  constructor(src: StatusSource) {
    super();
    Object.defineProperty(this, '_src', { value: src });
    this.rollingPercentilesEnabled = src._percentilesEnabled;
    this.enableSnapshots = src._snapshotsEnabled;
  }

  /** Totals over the rolling window. */
  get stats(): Stats {
    return readStats(this._src);
  }

  /** The window's buckets, newest first. */
  get window(): Window {
    return readWindow(this._src);
  }

  /** Removes listeners (the breaker keeps its own snapshot hooks). */
  override removeAllListeners(event?: string | symbol): this {
    // Node's emitter tells "no argument" (every event) from an explicit `undefined`.
    if (event === undefined) super.removeAllListeners();
    else super.removeAllListeners(event);
    if (event === undefined || event === 'newListener' || event === 'removeListener') this._src._hook?.();
    return this;
  }
}

brand(Status, 'Status');
