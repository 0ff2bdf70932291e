/**
 * `Collapser`: DataLoader's API on the core's request collapser and request cache.
 * Loads within a batch window become one call of the batch function, run through a
 * `CircuitBreaker` (its timeout, bulkhead, fallback — for the whole batch when it is
 * open); each result maps back to its load. The core decides batching, the cache's
 * contents and sharing; this class keeps the callers and the payloads.
 */
import { CircuitBreaker, thenable, type Options } from './breaker.js';
import { ById } from './byid.js';
import { now } from './clock.js';
import type { CoreConfig } from './config.js';
import { F_REARM, K, KIND_MASK, f64s, lost, out, outView, putKey, served, tell, type Exports } from './engine.js';
import { describe, optionError, ourError } from './errors.js';
import { tagged } from './key.js';
import { CACHE_BYTES, FOR_COLLAPSER, MAX_CACHE_ENTRIES, MAX_MS, bool, fn, int, merge, ms, walk, withoutUndefined } from './options.js';

/**
 * A thenable value as one promise, taken on once (as DataLoader's load promise does):
 * every load, follower and cache hit resolving with the thenable itself would call
 * its `then` again — a query builder runs its query each time (found by review).
 */
function adopted<T>(v: T): T {
  return thenable(v) && !(v instanceof Promise) ? Promise.resolve(v) as T : v;
}

/**
 * The batch function: one result (or Error) per key, in order. `context`: the
 * context of the `forRequest` loader whose loads these are (`undefined` for the
 * collapser's own loads); `this` is that loader (or the collapser), as DataLoader
 * calls it with the loader. `signal`: given to a function that declares it (three
 * parameters, by its `length`: one whose earlier parameters have defaults gets
 * `undefined`), aborted when the breaker times the batch out, to cancel its work.
 */
export type BatchFn<K, V, X = unknown> = (
  this: Collapser<K, V, unknown, X> | RequestLoader<K, V, X>,
  keys: K[],
  context: X | undefined,
  signal: AbortSignal,
) => PromiseLike<ArrayLike<V | Error>> | ArrayLike<V | Error>;

/** `C`: what `cacheKeyFn` returns (DataLoader's third type parameter; default: the key's type). */
export interface CollapserOptions<K, V, C = K> {
  /** How long a batch collects loads after its first one, in ms (default 10, Hystrix's; 0: until the current job's promise jobs ran, as DataLoader). */
  windowMs?: number | undefined;
  /** Keys per batch at most (default 1000; `Infinity`, DataLoader's default, is the core's largest batch: 100 000); a full batch runs once the code that loaded it returns. */
  maxBatchSize?: number | undefined;
  /** Memoise results per key, failures included, until `clear` (DataLoader's `cache`, default true). */
  cache?: boolean | undefined;
  /** Cached keys at most (default 10000, at most 16 777 215; the core evicts with SIEVE), and at most 256 MiB of keys counting 256 B an entry (`breaker.fusewire.cache.max_bytes` sets another). */
  cacheSize?: number | undefined;
  /**
   * The cache key of a key (default: the key itself). Keys of different types never
   * share one (`1` and `'1'` are two keys); objects are compared by their JSON (a
   * `Map`, a `Set` or a class without `toJSON` is `{}`: pass this for such keys). A
   * cache key of more than 64 KiB is neither de-duplicated nor cached.
   */
  cacheKeyFn?: ((key: K) => C) | undefined;
  /**
   * Options of the breaker the batch function runs through (opossum's, plus
   * `fusewire`), with the Collapser's defaults: `volumeThreshold` 20 (a batch is one
   * call), `name` the Collapser's name or `'collapser'`. Its own `cache` and `coalesce`
   * are refused (the Collapser caches each key itself).
   */
  breaker?: (Omit<Options<[K[]], ArrayLike<V | Error>>, 'cache' | 'coalesce'> & {
    cache?: false | undefined;
    coalesce?: false | undefined;
  }) | undefined;
  /** A name (DataLoader's, for tools; also the breaker's name unless `breaker.name` is given); `null` by default. */
  name?: string | null | undefined;
}

/**
 * The loads of one scope: the collapser's own (the core's global scope) or one
 * `forRequest` loader's (a request scope: batches and cache entries of its own).
 */
interface Scope {
  /** The collapser key of its batches ('' for the collapser's own). */
  tag: string;
  /** The core's cache scope (0: global; -1: none, so loads bypass the cache). */
  cache: number;
  /** The exports of the instance whose core `cache` is a scope of (see `_rescope`). */
  x: Exports;
  /** Cache leads in flight by cache key. */
  inflight: Map<string, number>;
  /** The waits of each cache key (`clear` finds a key's own, not all: found by review). */
  waitsOf: Map<string, Set<number>>;
  /** `this` of the batch function and of `cacheKeyFn`, and the batch function's `context`. */
  self: object;
  context: unknown;
  /** Shut down: loads reject. */
  closed: boolean;
  /**
   * Cache hits waiting for this scope's batch being formed: they settle with its
   * results, as DataLoader's do, so code that awaited a hit and then loads joins the
   * batch of the code that awaited a miss (found by review: `load((await
   * users.load(id)).id)` split into a batch for the hits and one for the misses).
   * Per scope: a request's hits wait for no other request's batch (found by review).
   */
  hits: (() => void)[];
  /**
   * The hits made while a batch now full was forming: they settle with it (its flush
   * comes in a microtask); hits made after it filled wait for the next batch, or for
   * none, as DataLoader's go to its next batch (found by review: they waited for the
   * full batch's function).
   */
  fullHits: (() => void)[];
  /** `hits` has a settling scheduled. */
  hitsQueued: boolean;
  /** Its loads waiting in the core's batches. */
  waiting: number;
}

/** A scope's state. */
function scope(tag: string, cache: number, x: Exports, self: object, context: unknown): Scope {
  return { tag, cache, x, inflight: new Map(), waitsOf: new Map(), self, context, closed: false, hits: [], fullHits: [], hitsQueued: false, waiting: 0 };
}

/** One `load(key)`: its scope, its key, its cache key and its promise's settlers. */
interface Load<K, V> {
  s: Scope;
  key: K;
  ck: string;
  resolve: (v: V) => void;
  reject: (e: unknown) => void;
}

/** A load waiting for a load of the same key in flight (the cache's flight). */
interface Wait<K, V> extends Load<K, V> {
  id: number;
}

interface Item<K, V> extends Load<K, V> {
  lead: number;
  /** Loads that joined this (leading) load and keep its result after a `clear`. */
  also?: { resolve: (v: V) => void; reject: (e: unknown) => void }[];
}

/** The rejection of a load made once the collapser is shut down. */
function shutDown(): Error {
  return ourError('The collapser has been shut down.', 'ESHUTDOWN');
}

/** The rejection of a load made on a request loader once it is shut down. */
function loaderShutDown(): Error {
  return ourError('The request loader has been shut down.', 'ESHUTDOWN');
}

/** What a dropped request loader leaves to close: its collapser and its core scopes. */
interface Dropped {
  c: Collapser<never, never, never, never>;
  cache: number;
  x: Exports;
}

/**
 * Closes the cache scopes of request loaders dropped without `shutdown()` (they hold
 * no load then: a waiting load holds its loader). Where the platform has none, a
 * dropped loader's cache entries stay until evicted.
 */
const dropped = typeof FinalizationRegistry === 'function'
  ? new FinalizationRegistry<Dropped>((d) => d.c._drop(d.cache, d.x))
  : undefined;

/** The request loaders with a cache open at most, per collapser (the core's largest `cache.max_scopes`). */
const MAX_REQUESTS = 1_000_000;

/**
 * DataLoader's batch moment: after the promise jobs queued so far, then
 * `process.nextTick` (`setImmediate` / `setTimeout` elsewhere, and where those throw:
 * Next.js's Edge runtime defines Node's APIs to throw — found by review, a batch
 * never ran).
 */
function postPromiseJobs(f: () => void): void {
  // Read off globalThis: Next.js warns at build time of every `process.nextTick` in
  // code bound for its Edge runtime.
  const proc = (globalThis as { process?: { nextTick?: (f: () => void) => void } }).process;
  if (ticks && typeof proc?.nextTick === 'function') {
    const tick = proc.nextTick.bind(proc);
    void Promise.resolve().then(() => {
      try {
        tick(f);
      } catch (e) {
        // One that throws is taken as unusable (Next.js's Edge runtime); the stack
        // running out says nothing about it.
        if (!(e instanceof RangeError)) ticks = false;
        postPromiseJobs(f);
      }
    });
    return;
  }
  if (immediates && typeof globalThis.setImmediate === 'function') {
    try {
      globalThis.setImmediate(f);
      return;
    } catch (e) {
      if (!(e instanceof RangeError)) immediates = false;
    }
  }
  setTimeout(f);
}
let ticks = true;
let immediates = true;

/** The core's largest batch (`collapser.max_batch_size`): what `maxBatchSize: Infinity` means. */
const MAX_BATCH = 100_000;

/**
 * `maxBatchSize`, as DataLoader reads it: any number >= 1 (a batch holds fewer keys
 * than it, so 2.5 means 3); past the core's largest batch, that (as `Infinity`).
 */
function batchSize(v: unknown): number {
  if (v === undefined) return 1000;
  if (typeof v !== 'number' || !(v >= 1)) {
    throw optionError('options.maxBatchSize', `must be a number >= 1 (Infinity: the largest batch, ${MAX_BATCH}), got ${describe(v)}`);
  }
  return Math.min(Math.ceil(v), MAX_BATCH);
}

const KNOWN = new Set(['windowMs', 'maxBatchSize', 'cache', 'cacheSize', 'cacheKeyFn', 'breaker', 'name']);

/** DataLoader's `isArrayLike`: an array or an object with a `length` and its last index. */
/** DataLoader's TypeError for a batch result that is not one value per key (or the fallback's). */
function badBatch(values: unknown, keys: number, fallback: boolean): TypeError {
  const got = arrayLike(values)
    ? ` of the same length as the Array of keys (${keys} keys, ${values.length} values)`
    : `: got ${describe(values)}`;
  if (fallback) return new TypeError(`Collapser: the breaker's fallback must return an Array${got}`);
  return new TypeError('Collapser must be constructed with a function which accepts Array<key> and returns ' +
    `Promise<Array<value>>, but the function did not return a Promise of an Array${got}.`);
}

function arrayLike(x: unknown): x is ArrayLike<unknown> {
  if (typeof x !== 'object' || x === null) return false;
  const n = (x as { length?: unknown }).length;
  return typeof n === 'number' && (n === 0 || (n > 0 && Object.prototype.hasOwnProperty.call(x, n - 1)));
}

function isPlain(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * DataLoader-style batching and caching through a circuit breaker. `C`: what
 * `cacheKeyFn` returns (DataLoader's third type parameter).
 */
export class Collapser<K = unknown, V = unknown, C = K, X = unknown> {
  /** The breaker every batch runs through (events, stats, `fallback((keys, err) => values)`). */
  readonly breaker: CircuitBreaker<[K[]], ArrayLike<V | Error>>;
  /** The `name` option (`null` when not given, as DataLoader's). */
  readonly name: string | null;
  private _h: number;
  private readonly _cache: boolean;
  private readonly _window: number;
  private readonly _keyFn: ((key: K) => unknown) | undefined;
  /** The collapser's own loads (the global scope). */
  private readonly _global: Scope;
  /** The scope of each batch's keys, for the batch function's `this` and `context`. */
  private readonly _scopeOf = new WeakMap<K[], Scope>();
  /** Each running batch's signal, where the batch function takes one. */
  private _signals: WeakMap<K[], AbortController> | undefined;
  /** Request loaders made so far (each one's batches are keyed by its number). */
  private _requests = 0;
  /** Values the breaker's fallback gave (never cached). */
  private readonly _fallen = new WeakSet<object>();
  private readonly _items = new ById<Item<K, V>>();
  private readonly _waits = new ById<Wait<K, V>>();
  /** The leading item of each cache lead in flight. */
  private readonly _leads = new ById<Item<K, V>>();
  /** Cached results by entry id: the value, or the Error of a failed load. */
  private readonly _payloads = new ById<{ ok: boolean; value: unknown }>();
  private _flushQueued = false;
  private _fullQueued = false;
  /** The exports of the instance its breaker's core is in. */
  private get _x(): Exports {
    return this.breaker._w;
  }

  /**
   * Whether the instance its breaker's core is in is gone (lost, or replaced: a
   * Collapser's breaker keeps the lost one, see `_rebind`): loads batch here, uncached.
   */
  private _gone(): boolean {
    return lost || this.breaker._w !== served;
  }

  /** Loads batched by this wrapper once the instance is lost (see `_lost`), and the batch size. */
  private _bare: Item<K, V>[] = [];
  private readonly _max: number;
  /** `shutdown()` was called: loads from here on reject (those its last batches make too). */
  private _closing = false;
  /** A flush is running its batches; `shutdown()` called meanwhile lets it finish first. */
  private _flushing = false;
  private _shutdownAfterFlush = false;

  constructor(batchFn: BatchFn<K, V, X>, options: CollapserOptions<K, V, C> | null = {}) {
    if (typeof batchFn !== 'function') {
      throw new TypeError(`batchFn: must be a function of an array of keys, got ${describe(batchFn)}`);
    }
    // `null` is no options, as DataLoader reads it.
    options ??= {};
    if (!isPlain(options)) throw optionError('options', `must be an object, got ${describe(options)}`);
    for (const k of Object.keys(options)) {
      if (!KNOWN.has(k)) {
        throw optionError(`options.${k}`, `not a Collapser option (known: ${[...KNOWN].join(', ')})`);
      }
    }
    const name = options.name;
    if (name !== undefined && name !== null && typeof name !== 'string') {
      throw optionError('options.name', `must be a string, got ${describe(name)}`);
    }
    this.name = name ?? null;
    // Whole numbers in the core's ranges, checked here as the breaker's options are
    // (the core's own check names a u32 for numbers past 2^32).
    // Fractional milliseconds round up, as every breaker duration (found by review: an
    // integer was required).
    const windowMs = Math.ceil(ms('windowMs', options.windowMs) ?? 10);
    const maxBatchSize = batchSize(options.maxBatchSize);
    this._max = maxBatchSize;
    this._cache = bool('cache', options.cache) ?? true;
    const cacheSize = int('cacheSize', options.cacheSize, 1, MAX_CACHE_ENTRIES) ?? 10_000;
    this._keyFn = fn<(key: K) => C>('cacheKeyFn', options.cacheKeyFn);
    const bo = options.breaker ?? {};
    if (!isPlain(bo)) throw optionError('options.breaker', `must be an object (breaker options), got ${describe(bo)}`);
    // The breaker's own cache and coalescing key a call by its arguments, a batch's
    // keys: a stored batch would outlive `clear()`, and one request's batch would be
    // served to another with the same keys (found by review: another user's values).
    for (const k of ['cache', 'coalesce'] as const) {
      if (bo[k] !== undefined && bo[k] !== false) {
        throw optionError(`options.breaker.${k}`,
          'not for a Collapser\'s breaker: it would store whole batches by their keys (outliving clear(), and shared between request loaders); the Collapser caches each key itself (options.cache, options.cacheSize)');
      }
    }
    const ours: CoreConfig = {
      // A batch is one call: collapsed loads must not dilute its error rate.
      breaker: { error_percentage: { denominator: 'total' } },
      // Batches are keyed by request loader ('' for the collapser's own loads).
      collapser: { window_ms: windowMs, max_batch_size: maxBatchSize, max_items: 10_000_000, max_key_bytes: 16, max_scopes: 0 },
      cache: this._cache
        ? {
            // Bytes too, as a breaker's cache (found by a security review: 64 KiB keys
            // an attacker chose took 640 MiB of wasm memory at the default cacheSize).
            max_entries: cacheSize, max_bytes: CACHE_BYTES, ttl_ms: 0, cache_failures: true, failure_ttl_ms: MAX_MS,
            on_leader_failure: 'fail_followers', max_waiters: 1_000_000, max_wait_ms: MAX_MS,
            max_key_bytes: 65_536, max_scopes: MAX_REQUESTS,
          }
        : null,
    };
    // Checked before the merge (an own `__proto__` would become its prototype: found by review).
    if (isPlain(bo.fusewire)) walk(bo.fusewire, 'breaker.fusewire', new Set());
    const fw = isPlain(bo.fusewire) ? merge(ours as Record<string, unknown>, bo.fusewire) : ours;
    // A batch is one call: Hystrix's volume threshold (20) keeps one failed batch
    // from opening the breaker (opossum's default of 0 would).
    // (`volumeThreshold: undefined` made it opossum's 0.)
    const breakerOptions = { name: this.name ?? 'collapser', volumeThreshold: 20, ...withoutUndefined(bo), fusewire: fw as CoreConfig };
    // Its `fusewire` carries the collapser and its cache. Not enumerable: a copy of
    // `breaker.options` makes a plain breaker.
    Object.defineProperty(breakerOptions, FOR_COLLAPSER, { value: true });
    try {
      this.breaker = new CircuitBreaker<[K[]], ArrayLike<V | Error>>(
        // Called as a method of the loader the loads came from (DataLoader calls it
        // with the loader as `this`), with its context.
        (keys: K[]) => {
          const s = this._scopeOf.get(keys) ?? this._global;
          const self = s.self as Collapser<K, V, unknown, X>;
          const ac = this._signals?.get(keys);
          return (ac === undefined
            ? (batchFn as (this: unknown, k: K[], c: X | undefined) => unknown).call(self, keys, s.context as X | undefined)
            : batchFn.call(self, keys, s.context as X | undefined, ac.signal)) as PromiseLike<ArrayLike<V | Error>>;
        },
        breakerOptions,
      );
    } catch (e) {
      if (e instanceof TypeError) {
        // Name the Collapser's options, not the breaker's mapping of them.
        const rename: [RegExp, string][] = [
          [/^options\.fusewire\.collapser\.window_ms/, 'options.windowMs'],
          [/^options\.fusewire\.collapser\.max_batch_size/, 'options.maxBatchSize'],
          [/^options\.fusewire\.cache\.max_entries/, 'options.cacheSize'],
        ];
        const hit = rename.find(([re]) => re.test(e.message));
        throw new TypeError(hit !== undefined ? e.message.replace(hit[0], hit[1]) : e.message.replace(/^options\./, 'options.breaker.'));
      }
      throw e;
    }
    this._h = this.breaker._h;
    this._global = scope('', 0, this._x, this, undefined);
    this.breaker._onLost = () => this._lost();
    // A new instance: the breaker takes a core in it once no load waits in the lost
    // one (`_lost` sends them all); batches still running settle apart (see `_run`),
    // and what the lost core's leads and cached values were goes.
    this.breaker._holds = () => this._items.size !== 0 || this._waits.size !== 0;
    this.breaker._onRebind = () => {
      this._h = this.breaker._h;
      this._payloads.clear();
      this._leads.clear();
      this._global.inflight.clear();
      this._global.waitsOf.clear();
      this._global.x = this._x;
    };
    // Shut down directly (`collapser.breaker.shutdown()`): loads waiting for their
    // window reject, loads joined to a load in flight get its result (found by
    // review: both stayed pending for good once the window timer was cancelled).
    this.breaker._onShutdown = () => this._abandon();
    const fallen = this._fallen;
    // Known by the batch's keys (an array: always an object), not by the value: a
    // fallback's `null` or `undefined` was blamed on the batch function (found by
    // review), and a shared array given by a fallback matched other batches.
    this.breaker._onFallbackValue = (_v, args) => {
      fallen.add(args[0] as object);
    };
    this._window = windowMs;
    this.breaker._onTick = (t) => this._flush(t);
    // A batch result that is not one value per key fails the batch in the breaker, so
    // it counts as a failure and the fallback answers (found by review: it counted as
    // a success, and the breaker never opened). Checked where the breaker settles the
    // call: no promise job added (DataLoader's settle timing).
    // A batch function declaring a signal gets one per batch, aborted at its timeout
    // (not the breaker's abortController, which stays aborted until a transition).
    if (batchFn.length >= 3) {
      const signals = new WeakMap<K[], AbortController>();
      this._signals = signals;
      this.breaker._onTimedOut = (args, err) => signals.get(args[0] as K[])?.abort(err);
    }
    this.breaker._failsWith = (values, args) => {
      const n = (args[0] as unknown[]).length;
      return arrayLike(values) && values.length === n ? undefined : badBatch(values, n, false);
    };
  }

  /** Loads one key (batched with the other loads of the window). `null` and `undefined` are not keys: a TypeError, as in DataLoader. */
  load(key: K): Promise<V> {
    return this._load(this._global, key);
  }

  /**
   * A loader for one request (DataLoader's per-request loader, without its cost): its
   * loads batch and cache among themselves only, and its batches run through this
   * collapser's breaker, which so sees every request's. `context` is passed to the
   * batch function with the loader's batches (`this` is the loader). Shut it down when
   * the request ends (or drop it: its cache is then freed after garbage collection).
   */
  forRequest(...context: undefined extends X ? [context?: X] : [context: X]): RequestLoader<K, V, X> {
    return new RequestLoader<K, V, X>(this, context[0] as X);
  }

  /**
   * The loader whose batch `keys` is — a request loader, or this collapser for its
   * own loads (and for any other array) — for the breaker's fallback and events,
   * which get the keys only.
   */
  loaderOf(keys: readonly K[]): RequestLoader<K, V, X> | this {
    const s = this._scopeOf.get(keys as K[]);
    return s !== undefined ? (s.self as RequestLoader<K, V, X>) : this;
  }

  /** @internal The scope of a new request loader (`RequestLoader`'s constructor). */
  _open(loader: RequestLoader<K, V, X>, context: X | undefined): Scope {
    if (this._closing || this.breaker.isShutdown) throw shutDown();
    let cache = -1;
    if (this._cache && !this._gone()) {
      cache = this._x.fw_cache_scope(this._h, -1, now());
      if (cache < 0 && !this._gone()) {
        throw new RangeError('Collapser.forRequest: every request scope of the cache is taken (its max_scopes, ' +
          `${MAX_REQUESTS} unless options.breaker.fusewire.cache sets another); shut request loaders down when their request ends`);
      }
    }
    const tag = (++this._requests).toString(36);
    if (cache > 0) dropped?.register(loader, { c: this as never, cache, x: this._x }, loader);
    return scope(tag, cache, this._x, loader, context);
  }

  /**
   * A request scope made on an instance since replaced (before the loss, or while lost):
   * its cache scope is opened in the core taken since (or none: then uncached).
   */
  private _rescope(s: Scope): void {
    if (s !== this._global && this._cache) {
      // (Asked first: a throw here leaves the scope as it was, of the lost instance.)
      const cache = this._x.fw_cache_scope(this._h, -1, now());
      dropped?.unregister(s.self);
      // Its leads and waits were the lost core's.
      s.inflight.clear();
      s.waitsOf.clear();
      // None left (`max_scopes`): this loader's loads go uncached.
      s.cache = cache;
      if (cache > 0) dropped?.register(s.self, { c: this as never, cache, x: this._x }, s.self);
    }
    s.x = this._x;
  }

  /**
   * A wait that loads its key itself now (with `lead`, as the key's load). Where that
   * throws (the stack's end) the lead goes back and the load fails with the error, as
   * in `_load` (found by review: the lead stayed in `_leads`, the load pending, for good).
   */
  private _requeue(wt: Wait<K, V>, lead: number, t: number): void {
    try {
      this._add({ s: wt.s, key: wt.key, ck: wt.ck, lead, resolve: wt.resolve, reject: wt.reject }, t);
    } catch (e) {
      if (lead >= 0) this._giveUp(wt.s, wt.ck, lead, t);
      wt.reject(e);
    }
  }

  /** @internal Loads `key` in scope `s`. */
  _load(s: Scope, key: K): Promise<V> {
    if (key === null || key === undefined) {
      throw new TypeError(`The loader.load() function must be called with a value, but got: ${String(key)}.`);
    }
    if (this._closing || this.breaker.isShutdown) return Promise.reject(shutDown());
    if (s.closed) return Promise.reject(loaderShutDown());
    if (this._gone() && (lost || !this.breaker._rebind())) {
      tell();
      return new Promise<V>((resolve, reject) => this._batchBare({ s, key, ck: '', lead: -1, resolve, reject }));
    }
    if (s.x !== this._x) this._rescope(s);
    const h = this._h;
    const t = now();
    let lead = -1;
    let ck = '';
    if (this._cache) {
      try {
        ck = this._cacheKey(s, key);
      } catch (e) {
        return Promise.reject(e);
      }
      const r = this._x.fw_cache_lookup(h, 0, s.cache, putKey(ck), t);
      const kind = r & KIND_MASK;
      // (Without a call where it can be: one can run out of stack with a lead taken.)
      const id = (outView.length !== 0 ? outView : out())[0]!;
      if (kind === 1) {
        const p = this._payloads.get(id);
        if (p !== undefined) {
          this._x.fw_record(h, K.RESPONSE_FROM_CACHE, 1, t);
          // Settled with a promise of the value, as DataLoader's cached promise is
          // adopted: two promise jobs after the batch's own loads.
          return new Promise<V>((resolve) => this._hit(s, () => resolve(p.ok ? Promise.resolve(p.value as V) : Promise.reject(p.value))));
        }
      } else if (kind === 3) {
        return new Promise<V>((resolve, reject) => this._wait({ id, s, key, ck, resolve, reject }));
      } else if (kind === 2) {
        lead = id;
      }
    }
    let p: Promise<V> | undefined;
    let queued = false;
    try {
      p = new Promise<V>((resolve, reject) => {
        this._add({ s, key, ck, lead, resolve, reject }, t);
        queued = true;
      });
    } finally {
      // Not queued (the stack ran out: found by a stack-limit fuzzer, the key then
      // stayed "loading" for good): its lead goes back; the load fails with the error.
      if (!queued && lead >= 0) this._giveUp(s, ck, lead, t);
    }
    return p;
  }

  /**
   * A cache hit settles with its scope's batch being formed, or, with none, at
   * DataLoader's moment for a batch of hits alone (after the promise jobs queued so far).
   */
  private _hit(s: Scope, settle: () => void): void {
    s.hits.push(settle);
    if (s.hitsQueued) return;
    s.hitsQueued = true;
    postPromiseJobs(() => {
      s.hitsQueued = false;
      // A batch is being formed: its flush takes them.
      if (s.waiting === 0 || this.breaker.isShutdown) this._settleHits(this._takeHits(s));
    });
  }

  /** The scope's hits to settle now (`fullOnly`: those of its batches now full only). */
  private _takeHits(s: Scope, fullOnly = false): (() => void)[] | undefined {
    // Never the scope's own arrays: a batch in flight holding one got the hits pushed
    // there later, settled them early, and again with theirs (found by review: a
    // cached Error's second `resolve(Promise.reject(…))` was an unhandled rejection).
    let hits: (() => void)[] | undefined;
    if (s.fullHits.length !== 0) {
      hits = s.fullHits;
      s.fullHits = [];
    }
    if (!fullOnly && s.hits.length !== 0) {
      hits = hits === undefined ? s.hits : hits.concat(s.hits);
      s.hits = [];
    }
    return hits;
  }

  private _settleHits(hits: (() => void)[] | undefined): void {
    if (hits !== undefined) for (const settle of hits) settle();
  }

  /** A lead taken for a load that was not queued: it fails, as its load does. */
  private _giveUp(s: Scope, ck: string, lead: number, t: number): void {
    try {
      if (s.inflight.get(ck) === lead) s.inflight.delete(ck);
      this._leads.delete(lead);
      this._x.fw_cache_cancel(this._h, 0, lead, 1, t);
      this._events(t);
    } catch {
      // At the stack's end again.
    }
  }

  /**
   * Loads many keys (an array or an array-like object); each result is the value of its
   * load or what it was rejected with (DataLoader's `loadMany`). Anything else is a
   * TypeError, thrown as DataLoader's is.
   */
  loadMany(keys: ArrayLike<K>): Promise<(V | Error)[]> {
    return this._loadMany(this._global, keys);
  }

  /** @internal */
  _loadMany(s: Scope, keys: ArrayLike<K>): Promise<(V | Error)[]> {
    if (!arrayLike(keys)) {
      throw new TypeError(`The loader.loadMany() function must be called with Array<key> but got: ${String(keys)}.`);
    }
    const loads: Promise<V | Error>[] = [];
    for (let i = 0; i < keys.length; i++) loads.push(this._load(s, keys[i]!).catch((e: unknown) => e as Error));
    return Promise.all(loads);
  }

  /** Forgets the cached result of `key` (a load in flight still answers the loads made before; a later load loads it again). */
  clear(key: K): this {
    this._clear(this._global, key);
    return this;
  }

  /** @internal */
  _clear(s: Scope, key: K): void {
    // (A scope of an instance since replaced holds nothing of the new one.)
    if (this._cache && !this.breaker.isShutdown && !s.closed && s.x === this._x) {
      const t = now();
      const ck = this._cacheKey(s, key);
      const lead = s.inflight.get(ck);
      if (lead !== undefined) this._detach(s, ck, lead, t);
      this._x.fw_cache_invalidate(this._h, 0, s.cache, putKey(ck), t);
      this._events(t);
    }
  }

  /** Forgets every cached result (loads in flight still answer the loads made before; later loads load again). */
  clearAll(): this {
    this._clearAll(this._global);
    return this;
  }

  /** @internal */
  _clearAll(s: Scope): void {
    if (this._cache && !this.breaker.isShutdown && !s.closed && s.x === this._x) {
      const t = now();
      for (const [ck, lead] of [...s.inflight]) this._detach(s, ck, lead, t);
      this._x.fw_cache_clear(this._h, 0, s.cache, t);
      this._events(t);
    }
  }

  /**
   * Caches `value` for `key` unless the key is cached or loading (an Error caches a
   * failure; a promise is kept as it is: loads get what it settles with). A key
   * cleared while its load runs is neither (DataLoader's `clear(key).prime(key,
   * value)` after a mutation): later loads get `value`, and the running load's
   * result, when it comes, answers only the loads made before the `clear`.
   */
  prime(key: K, value: V | PromiseLike<V> | Error): this {
    this._prime(this._global, key, value);
    return this;
  }

  /** @internal */
  _prime(s: Scope, key: K, value: V | PromiseLike<V> | Error): void {
    if (!this._cache || this.breaker.isShutdown || s.closed) return;
    // Nothing to prime in a lost instance; a scope of one since replaced is opened in
    // the core taken since.
    if (this._gone() && (lost || !this.breaker._rebind())) return;
    if (s.x !== this._x) this._rescope(s);
    value = adopted(value);
    const h = this._h;
    const t = now();
    const ck = this._cacheKey(s, key);
    const r = this._x.fw_cache_lookup(h, 0, s.cache, putKey(ck), t);
    const kind = r & KIND_MASK;
    const id = out()[0]!;
    if (kind === 2) {
      this._settle(id, !(value instanceof Error), value, t);
      this._events(t);
    } else if (kind === 3) {
      // Loading: the load's result is the key's (as DataLoader's cached promise).
      this._x.fw_cache_cancel(h, 0, id, 0, t);
    }
  }

  /**
   * Key `ck` was cleared while lead `lead` loads it: the loads that joined that load
   * keep its result, and the cache lets go of it, so a later load loads the key again
   * and a `prime` caches at once, as in DataLoader (found by review: later loads
   * joined the load from before the clear, and a `prime` after them answered them).
   * The lead's result, when it comes, answers only its own callers.
   */
  private _detach(s: Scope, ck: string, lead: number, t: number): void {
    const it = this._leads.get(lead);
    const ids = s.waitsOf.get(ck);
    if (it !== undefined && ids !== undefined) {
      for (const id of [...ids]) {
        const wt = this._waits.get(id);
        if (wt === undefined) continue;
        this._unwait(wt);
        this._x.fw_cache_cancel(this._h, 0, wt.id, 0, t);
        (it.also ??= []).push(wt);
      }
    }
    // No waiter left: the flight ends, not handed on; settling the lead does nothing now.
    this._x.fw_cache_cancel(this._h, 0, lead, 1, t);
    s.inflight.delete(ck);
  }

  private _wait(wt: Wait<K, V>): void {
    this._waits.set(wt.id, wt);
    let ids = wt.s.waitsOf.get(wt.ck);
    if (ids === undefined) wt.s.waitsOf.set(wt.ck, (ids = new Set()));
    ids.add(wt.id);
  }

  private _unwait(wt: Wait<K, V>): void {
    this._waits.delete(wt.id);
    const ids = wt.s.waitsOf.get(wt.ck);
    if (ids !== undefined && ids.delete(wt.id) && ids.size === 0) wt.s.waitsOf.delete(wt.ck);
  }

  /** The cache key of `key`; a TypeError when it has none (a symbol, a function, a throwing toJSON). */
  private _cacheKey(s: Scope, key: K): string {
    const f = this._keyFn;
    let ck: string | undefined;
    try {
      // DataLoader calls it with the loader as `this`.
      ck = tagged(f === undefined ? key : f.call(s.self, key));
    } catch (e) {
      const why = (e instanceof Error ? e.message : String(e)).split('\n')[0];
      throw new TypeError(f === undefined
        ? `the key ${describe(key)} has no JSON (${why}); pass cacheKeyFn`
        : `cacheKeyFn: threw for the key ${describe(key)}: ${why}`);
    }
    if (ck === undefined) {
      throw new TypeError(f === undefined
        ? `the key ${describe(key)} has no cache key (a symbol or a function); pass cacheKeyFn`
        : `cacheKeyFn: must return a string, number or JSON value for the key ${describe(key)}`);
    }
    return ck;
  }

  /**
   * Shuts the collapser down. Loads still waiting for their batch window go now, as
   * the last batches through the breaker, and a load waiting on another load of its
   * key gets that one's result: a load made before `shutdown()` settles as it would
   * have (found by review: they were rejected, and a prefetch nobody awaited, then
   * `shutdown()` in a request's `finally`, ended the process with an unhandled
   * rejection; DataLoader has no shutdown). Then the breaker shuts down; batches
   * running still answer their loads. Loads made after it reject with `ESHUTDOWN`.
   */
  shutdown(): void {
    // Once: a batch function or listener calling it again while the last batches go
    // out does not cut them short.
    if (this._closing) return;
    this._closing = true;
    if (this.breaker.isShutdown) {
      this._abandon();
      return;
    }
    const pending = this._takePending();
    this._payloads.clear();
    this._global.inflight.clear();
    // Running batches still answer their loads (and those they kept), as DataLoader's.
    this._leads.clear();
    this._runAll(pending);
    this._settleHits(this._takeHits(this._global));
    this.breaker._keepAlive(false);
    // Called from a batch function: the batches its flush took run first (found by
    // review: they were rejected with ESHUTDOWN, other requests' batches among them).
    if (this._flushing) this._shutdownAfterFlush = true;
    else this.breaker.shutdown();
  }

  /**
   * The breaker was shut down (`collapser.breaker.shutdown()`) under loads waiting for
   * their batch: they reject with `ESHUTDOWN`, cache hits settle (found by review:
   * both stayed pending for good).
   */
  private _abandon(): void {
    const err = shutDown();
    const pending = this._takePending();
    for (const it of pending) {
      it.reject(err);
      for (const a of it.also ?? []) a.reject(err);
    }
    this._settleAllHits(pending);
  }

  /** Settles the hits of the collapser's scope and of the scopes of `items` (the others' are scheduled). */
  private _settleAllHits(items: Item<K, V>[]): void {
    this._settleHits(this._takeHits(this._global));
    for (const it of items) this._settleHits(this._takeHits(it.s));
  }

  /**
   * Takes the loads waiting for their batch window, and those waiting on another load
   * of their key: these join that load if it is in flight (its result answers them
   * too), else they are taken as loads of their own.
   */
  private _takePending(): Item<K, V>[] {
    const pending = [...this._items.values()];
    this._items.clear();
    for (const it of pending) it.s.waiting = 0;
    for (const wt of [...this._waits.values()]) {
      this._unwait(wt);
      this._join(wt, pending);
    }
    return pending;
  }

  /** A wait taken from the cache: it joins its key's load if that is in flight, else goes to `pending` as a load of its own. */
  private _join(wt: Wait<K, V>, pending: Item<K, V>[]): void {
    const lead = wt.s.inflight.get(wt.ck);
    const it = lead === undefined ? undefined : this._leads.get(lead);
    if (it !== undefined) (it.also ??= []).push(wt);
    else pending.push({ s: wt.s, key: wt.key, ck: wt.ck, lead: -1, resolve: wt.resolve, reject: wt.reject });
  }

  /**
   * Runs `items` now, as batches of their scope of at most `maxBatchSize` keys (in
   * order); each scope's hits settle with its first.
   */
  private _runAll(items: Item<K, V>[]): void {
    const byScope = new Map<Scope, Item<K, V>[]>();
    for (const it of items) {
      const list = byScope.get(it.s);
      if (list === undefined) byScope.set(it.s, [it]);
      else list.push(it);
    }
    for (const [s, list] of byScope) {
      for (let i = 0; i < list.length; i += this._max) {
        this._run(list.slice(i, i + this._max), undefined, i === 0 ? this._takeHits(s) : undefined);
      }
    }
  }

  /**
   * @internal Shuts request scope `s` down (`RequestLoader.shutdown`): its cache is
   * freed (a load waiting on another load of its key gets that one's result); its
   * loads waiting for their batch window are sent when it ends.
   */
  _close(s: Scope): void {
    if (s.closed) return;
    s.closed = true;
    dropped?.unregister(s.self);
    if (s.cache <= 0 || this.breaker.isShutdown || this._gone() || s.x !== this._x) return;
    const h = this._h;
    const t = now();
    const waits: Wait<K, V>[] = [];
    for (const ids of s.waitsOf.values()) for (const id of ids) {
      const wt = this._waits.get(id);
      if (wt !== undefined) waits.push(wt);
    }
    const pending: Item<K, V>[] = [];
    for (const wt of waits) {
      this._unwait(wt);
      this._x.fw_cache_cancel(h, 0, wt.id, 0, t);
      this._join(wt, pending);
    }
    this._x.fw_cache_scope(h, s.cache, t);
    this._events(t);
    // (Normally none: a wait's lead is in flight or in a batch.)
    for (const it of pending) this._add(it, t);
  }

  /** @internal A request loader was dropped without `shutdown()`: its cache scope closes (it holds no load). */
  _drop(cache: number, x: Exports): void {
    if (this.breaker.isShutdown || this._gone() || x !== this._x) return;
    try {
      const t = now();
      this._x.fw_cache_scope(this._h, cache, t);
      this._events(t);
    } catch {
      // Never out of a finaliser.
    }
  }

  /**
   * The instance is lost (see `lose` in engine.ts): loads waiting for their batch
   * window, and those waiting on another load of their key, go now; from here on
   * loads are batched per tick, uncached.
   */
  private _lost(): void {
    const pending = this._takePending();
    for (const it of pending) this._batchBare(it);
    this._settleAllHits(pending);
  }

  /** Once the instance is lost: `item` joins the batch that runs after this tick's loads. */
  private _batchBare(item: Item<K, V>): void {
    if (this._bare.push(item) > 1) return;
    postPromiseJobs(() => {
      const all = this._bare;
      this._bare = [];
      this._runAll(all);
    });
  }

  private _add(item: Item<K, V>, t: number): void {
    if (item.lead >= 0) {
      item.s.inflight.set(item.ck, item.lead);
      this._leads.set(item.lead, item);
    }
    const tag = item.s.tag;
    const r = this._x.fw_col_add(this._h, tag === '' ? 0 : putKey(tag), t);
    const kind = r & KIND_MASK;
    if (kind === 1 || kind === 2) {
      this._items.set(out()[0]!, item);
      item.s.waiting++;
      if (kind === 2) {
        const s = item.s;
        if (s.hits.length !== 0) {
          for (const h of s.hits) s.fullHits.push(h);
          s.hits = [];
        }
        // Full: it runs right after the code that loaded (never inside `load()`,
        // which DataLoader never does either), with the batches due by then.
        if (!this._fullQueued) {
          this._fullQueued = true;
          queueMicrotask(() => {
            this._fullQueued = false;
            this._flush(now(), true);
          });
        }
      } else if (this._window === 0) {
        if (!this._flushQueued) {
          this._flushQueued = true;
          // DataLoader's moment: after the promise jobs queued so far, then a tick.
          postPromiseJobs(() => {
            this._flushQueued = false;
            this._flush(now());
          });
        }
      } else {
        // Loads wait on the window timer alone: it must keep the process alive.
        this.breaker._keepAlive(true);
        if ((r & F_REARM) !== 0) this.breaker._after(F_REARM, t);
      }
      return;
    }
    // Not collapsed (too many items pending): run it as a batch of one.
    this._run([item], undefined);
  }

  /**
   * Runs every batch due now (`fullOnly`: only the full ones; the others wait for
   * their window). The batches are taken first and run after: loads made by a batch
   * function form a new batch, with its own window (DataLoader's rule).
   */
  private _flush(t: number, fullOnly = false): void {
    if (this.breaker.isShutdown) {
      this._abandon();
      return;
    }
    this._events(t);
    const due: [Item<K, V>[], number][] = [];
    for (let guard = 0; guard < 1_000_000; guard++) {
      const batch = this._x.fw_col_poll(this._h, t, fullOnly ? 1 : 0);
      if (batch < 0) break;
      const n = this._x.fw_col_items(this._h, batch);
      const items: Item<K, V>[] = [];
      const base = this._x.fw_table() >>> 3;
      const table = f64s();
      for (let i = 0; i < n; i++) {
        const id = table[base + i]!;
        const it = this._items.get(id);
        if (it !== undefined) {
          this._items.delete(id);
          it.s.waiting--;
          items.push(it);
        }
      }
      this._x.fw_record(this._h, K.COLLAPSED, items.length, t);
      due.push([items, batch]);
    }
    if (this._items.size === 0) this.breaker._keepAlive(false);
    // Each scope's hits so far settle with the first of its batches.
    const outer = this._flushing;
    this._flushing = true;
    try {
      for (const [items, batch] of due) {
        const s = items[0]?.s;
        this._run(items, batch, s === undefined ? undefined : this._takeHits(s, fullOnly));
      }
    } finally {
      this._flushing = outer;
      if (!outer && this._shutdownAfterFlush) {
        this._shutdownAfterFlush = false;
        this.breaker.shutdown();
      }
    }
  }

  /** Runs one batch; `hits`: cache hits that settle with its results, first (DataLoader's order). */
  private _run(items: Item<K, V>[], batch: number | undefined, hits?: (() => void)[]): void {
    const keys = items.map((i) => i.key);
    // The exports of the core whose batch and leads these are (a new instance since:
    // the results still answer the loads, and nothing reaches the new core).
    const x = this._x;
    const s = items[0]?.s;
    // (A WeakMap entry per batch costs ≈ 10 % of a load alone: request batches only.)
    if (s !== undefined && s !== this._global) this._scopeOf.set(keys, s);
    this._signals?.set(keys, new AbortController());
    let fired: Promise<ArrayLike<V | Error>>;
    try {
      fired = this.breaker.fire(keys);
    } catch (e) {
      // A breaker listener threw (`fire`, `reject`…): these loads fail with it, the
      // other batches of the flush still run.
      this._settleHits(hits);
      this._failed(items, batch, e, x);
      return;
    }
    fired.then((values) => {
      this._settleHits(hits);
      if (!arrayLike(values) || values.length !== keys.length) {
        // Said of the breaker's fallback where it gave them (found by review: the batch
        // function was blamed for what the fallback returned).
        this._failed(items, batch, badBatch(values, keys.length, this._fallen.has(keys)), x);
      } else {
        this._done(items, batch, values, this._fallen.has(keys), x);
      }
    }, (e: unknown) => {
      this._settleHits(hits);
      this._failed(items, batch, e, x);
    });
  }

  private _failed(items: Item<K, V>[], batch: number | undefined, e: unknown, x: Exports): void {
    const mine = x === this._x;
    if (batch !== undefined && mine && !this.breaker.isShutdown) this._x.fw_col_fail(this._h, batch);
    // Only the cache needs the time (leads, events): a clock read is not free.
    const t = this._cache ? now() : 0;
    for (const it of items) {
      it.reject(e);
      for (const a of it.also ?? []) a.reject(e);
      // A failed batch is not cached (DataLoader): the followers get it, then it is forgotten.
      if (it.lead >= 0 && mine) {
        this._landed(it);
        // Not when the key was primed meanwhile (the lead is stale): the primed value stays.
        const settled = this._settle(it.lead, false, e, t);
        this._events(t);
        if (settled && !this.breaker.isShutdown) this._x.fw_cache_invalidate(this._h, 0, it.s.cache, putKey(it.ck), t);
      }
    }
    this._events(t);
  }

  /** `fallback`: the values came from the breaker's fallback: given to this batch's loads and their followers, never cached. */
  private _done(items: Item<K, V>[], batch: number | undefined, values: ArrayLike<V | Error>, fallback: boolean,
    x: Exports): void {
    const mine = x === this._x;
    // Only the cache needs the time (leads, events): a clock read is not free.
    const t = this._cache ? now() : 0;
    for (let i = 0; i < items.length; i++) {
      const it = items[i]!;
      let v: unknown;
      let ok: boolean;
      try {
        v = adopted(values[i] as V | Error);
        ok = !(v instanceof Error);
      } catch (e) {
        // A value whose `then` getter throws (a strict Proxy): that load fails with it,
        // as DataLoader's `resolve` would (found by review: the rest of the batch, and
        // later loads of its keys, waited for good).
        v = e;
        ok = false;
      }
      if (batch !== undefined && mine && !this.breaker.isShutdown) this._x.fw_col_complete(this._h, batch, i, ok ? 1 : 0);
      if (ok) it.resolve(v as V);
      else it.reject(v);
      for (const a of it.also ?? []) {
        if (ok) a.resolve(v as V);
        else a.reject(v);
      }
      if (it.lead >= 0 && mine) {
        this._landed(it);
        const settled = this._settle(it.lead, ok, v, t);
        if (settled && fallback) {
          this._events(t);
          if (!this.breaker.isShutdown) this._x.fw_cache_invalidate(this._h, 0, it.s.cache, putKey(it.ck), t);
        }
      }
    }
    if (batch !== undefined && mine && !this.breaker.isShutdown) this._x.fw_col_fail(this._h, batch);
    this._events(t);
  }

  /** A lead's result arrived: no longer in flight (a cleared one was let go already). */
  private _landed(it: Item<K, V>): void {
    if (it.s.inflight.get(it.ck) === it.lead) it.s.inflight.delete(it.ck);
    this._leads.delete(it.lead);
  }

  /** Fills (or fails) a cache lead with `value`, keeping its payload (events: `_events`); false for a stale lead. */
  private _settle(lead: number, ok: boolean, value: unknown, t: number): boolean {
    if (this.breaker.isShutdown) return false;
    const r = this._x.fw_cache_settle(this._h, 0, lead, ok ? 1 : 0, t);
    if (r < 0) return false;
    const entry = out()[0]!;
    if (entry >= 0) this._payloads.set(entry, { ok, value });
    return true;
  }

  /** The cache's events: followers served or promoted, entries removed. */
  private _events(t: number): void {
    if (!this._cache || this.breaker.isShutdown) return;
    const h = this._h;
    for (let guard = 0; guard < 1_000_000; guard++) {
      const ev = this._x.fw_cache_poll(h, 0, t);
      if (ev <= 0) return;
      const o = out();
      const a = o[0]!;
      const b = o[1]!;
      if (ev === 1) {
        const wt = this._waits.get(a);
        const p = this._payloads.get(b);
        if (wt !== undefined) {
          this._unwait(wt);
          if (p !== undefined) {
            if (p.ok) wt.resolve(p.value as V);
            else wt.reject(p.value);
          }
          else this._requeue(wt, -1, t);
        }
      } else if (ev === 2 || ev === 3) {
        const wt = this._waits.get(a);
        if (wt === undefined) {
          if (ev === 2) this._x.fw_cache_cancel(h, 0, a, 1, t);
          continue;
        }
        this._unwait(wt);
        this._requeue(wt, ev === 2 ? a : -1, t);
      } else if (ev === 4) {
        this._payloads.delete(a);
      }
    }
  }
}

/**
 * A loader for one request, made by `Collapser.forRequest`: DataLoader's API, with
 * batches and a cache of its own; its batches run through the collapser's breaker.
 */
export class RequestLoader<K = unknown, V = unknown, X = unknown> {
  /** The collapser it loads through. */
  readonly collapser: Collapser<K, V, unknown, X>;
  /** The context given to `forRequest`, passed to the batch function with this loader's batches. */
  readonly context: X;
  /** @internal */
  readonly _s: Scope;

  /** A loader for one request of `collapser` (what `collapser.forRequest(context)` makes). */
  constructor(collapser: Collapser<K, V, unknown, X>, context: X) {
    if (!(collapser instanceof Collapser)) {
      throw new TypeError(`collapser: must be a Collapser, got ${describe(collapser)}`);
    }
    this.collapser = collapser;
    this.context = context;
    this._s = collapser._open(this, context);
  }

  /** The collapser's `name` (`null` when not given). */
  get name(): string | null {
    return this.collapser.name;
  }

  /** The breaker every batch runs through: the collapser's, shared by all its request loaders. */
  get breaker(): CircuitBreaker<[K[]], ArrayLike<V | Error>> {
    return this.collapser.breaker;
  }

  /** Loads one key, batched with this request's other loads of the window. */
  load(key: K): Promise<V> {
    return this.collapser._load(this._s, key);
  }

  /** Loads many keys; each result is the value of its load or what it was rejected with. */
  loadMany(keys: ArrayLike<K>): Promise<(V | Error)[]> {
    return this.collapser._loadMany(this._s, keys);
  }

  /** Forgets this request's cached result of `key`. */
  clear(key: K): this {
    this.collapser._clear(this._s, key);
    return this;
  }

  /** Forgets every cached result of this request. */
  clearAll(): this {
    this.collapser._clearAll(this._s);
    return this;
  }

  /** Caches `value` for `key` in this request, unless the key is cached or loading (see `Collapser.prime`). */
  prime(key: K, value: V | PromiseLike<V> | Error): this {
    this.collapser._prime(this._s, key, value);
    return this;
  }

  /**
   * Ends the request: loads made before it are still answered (a load waiting on
   * another load of its key gets that one's result); its cached values are let go
   * at once; loads made after it reject with `ESHUTDOWN`. The collapser and its
   * breaker go on.
   */
  shutdown(): void {
    this.collapser._close(this._s);
  }
}
