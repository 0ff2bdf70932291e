/**
 * opossum's `Status` on the core's rolling window: `stats` (the window's totals and
 * latency percentiles) and `window` (its buckets), read from the core on demand —
 * O(buckets), whatever the traffic, where opossum concatenates and sorts every
 * latency sample of the window on each read.
 */
import { K, S, out, w } from './engine.js';
import type { Emitter } from './emitter.js';
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
}

/** Totals over the rolling window (opossum's `stats`). */
export interface Stats extends Bucket {
  /** Latency (ms) at 0, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 1; -1 when disabled. */
  percentiles: Record<string, number>;
  /** Mean latency (ms); -1 when percentiles are disabled. */
  latencyMean: number;
}

/** Extra counts the cache and collapser keep outside the core's event kinds. @internal */
export interface ExtraCounts {
  cacheMisses: number;
  coalesceCacheMisses: number;
  /**
   * Calls told to `fire` (or `cacheMiss`, `coalesceCacheMiss`) listeners right now,
   * not yet started in the core: opossum counts a fire in its own `fire` listener,
   * so the user's listeners already see it in `stats.fires`.
   */
  firing: number;
  /** Fallbacks whose promise has not settled yet (opossum counts a fallback when it emits `fallback`). */
  fallingBack: number;
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
  _now(): number;
  readonly _percentilesEnabled: boolean;
  readonly _bucketMs: number;
  readonly _buckets: number;
  readonly _extra: ExtraCounts;
  readonly _final?: { stats: Stats; window: Bucket[] } | undefined;
  /** Misses of the core caches (cache, coalescing), since creation. */
  _misses?(): [number, number];
  /** Puts back the breaker's own listeners after a `removeAllListeners`. */
  _hook?(): void;
}

/** @internal Stats of breaker `src` at `now`. */
export function readStats(src: StatusSource): Stats {
  if (src._final !== undefined) return { ...src._final.stats };
  const now = src._now();
  const s = emptyBucket() as Stats;
  if (w.fw_snapshot(src._h, now) !== 0) {
    s.latencyMean = src._percentilesEnabled ? 0 : -1;
    for (const p of PERCENTILES) s.percentiles[p] = src._percentilesEnabled ? 0 : -1;
    return s;
  }
  const o = out();
  fromCounts(s, o, S.COUNTS);
  // opossum counts a call when it fires: the running and queued ones too.
  s.fires += o[S.IN_FLIGHT]! + o[S.QUEUED]! + src._extra.firing;
  s.fallbacks += src._extra.fallingBack;
  const [m0, m1] = src._misses?.() ?? [0, 0];
  s.cacheMisses = src._extra.cacheMisses + m0;
  s.coalesceCacheMisses = src._extra.coalesceCacheMisses + m1;
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
  const n = w.fw_buckets(src._h, now);
  const width = src._bucketMs;
  const out: Bucket[] = [];
  const rows = new Map<number, number>();
  if (n > 0) {
    const table = new Float64Array(w.memory.buffer, w.fw_table(), n * 14);
    for (let r = 0; r < n; r++) rows.set(Math.round(table[r * 14]! / width), r);
    const newest = Math.floor(now / width);
    for (let i = 0; i < src._buckets; i++) {
      const b = emptyBucket();
      const r = rows.get(newest - i);
      if (r !== undefined) fromCounts(b, table, r * 14 + 1);
      out.push(b);
    }
  } else {
    for (let i = 0; i < src._buckets; i++) out.push(emptyBucket());
  }
  return out;
}

/**
 * A breaker's rolling status (opossum's `Status`): `stats`, `window`, and the
 * `snapshot` event (emitted once per bucket interval while someone listens).
 */
export class Status extends (EventEmitter as new () => Emitter) {
  /** @internal */
  readonly _src: StatusSource;

  /** @internal */
  constructor(src: StatusSource) {
    super();
    this._src = src;
  }

  /** Totals over the rolling window. */
  get stats(): Stats {
    return readStats(this._src);
  }

  /** The window's buckets, newest first. */
  get window(): Bucket[] {
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
