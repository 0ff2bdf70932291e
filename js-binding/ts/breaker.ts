/**
 * `CircuitBreaker`: opossum's API on the fusewire core.
 *
 * This class writes no breaker, window, bulkhead or timeout rule. It turns a
 * `fire()` into the core's flow — `start` → run the action → `complete` — and the
 * core's verdicts and events back into Promises and opossum's events:
 *
 * - one or two wasm calls per `fire` (start, complete), numbers only, the clock read
 *   once per call;
 * - one timer per breaker, armed at the core's `next_deadline` (the earliest call
 *   deadline, the end of the open period, a queue wait, a shared flush) — never a
 *   timer per call, never a per-instance `setInterval`;
 * - events are polled from the core only when a call says some are queued.
 */
import { epoch, fired, now, recheck, ref, TimerSlot, unref, wallNow, type Timer } from './clock.js';
import type { CoreConfig, CoreSharedConfig } from './config.js';
import type { Emitter, Listener } from './emitter.js';
import {
  BAD_REQUEST, CANCELLED, EV_DEQUEUED, lost, onLost, onRevive, served, tell, type Exports, EV_NONE, EV_REFUSED, EV_STORE, EV_TIMED_OUT,
  EV_TRANSITION, F_ANY, F_EVENTS, F_IO, F_REARM, FAILURE, K, KIND_MASK, KIND_NAMES, OK, QUEUED, REFUSED,
  RUNNING, S, TIMEOUT, bytes, io, loaded, nextIo, notLoaded, out, outView, putKey, putScratchBytes, w,
} from './engine.js';
import { brand, describe, isOurError, kindOf, optionError, ourError, warn, type CircuitBreakerError, type Refusal } from './errors.js';
import { tagged } from './key.js';
import { FOR_COLLAPSER, bool, create, fn, num, parse, str, type Parsed } from './options.js';
import { EventEmitter, REQUEST_TIMERS, listening, ready } from './platform.js';
import {
  CACHE_MISSES, COALESCE_MISSES, FAILURES, FIRES, PERCENTILES, Status, countPerBucket, emptyBucket, extraCounts, markOpen, readStats,
  readWindow, type Bucket, type ExtraCounts, type Stats, type StatusSource,
} from './status.js';
import { FAIL_INTERNAL, SharedStore, sharedStoreStatus } from './store.js';
import { AsyncStore, FAIL_REFUSED, deliver } from './async-store.js';
import { ById } from './byid.js';

/**
 * A cache key, as `cacheGetKey` returns it: keys of different types never share an
 * entry (`1` and `'1'` are two keys, as in opossum's `Map`); objects are compared by
 * their JSON. A symbol, a function or an object without JSON rejects the call with a
 * `TypeError`, unless only a custom `cacheTransport` sees the key.
 */
export type CacheKey = string | number | bigint | boolean | object | null | undefined;

/** opossum's cache transport: what `options.cacheTransport` must implement (it gets keys as `cacheGetKey` returns them). */
export interface CacheTransport<R = unknown> {
  get(key: CacheKey): Promise<R> | R | undefined;
  set(key: CacheKey, value: Promise<R> | R, expiresAt: number): void;
  flush(): void;
  delete?(key: CacheKey): void;
}

/** @types/opossum's name for the cache transport interface (`CacheTransport = MemoryCache` there). */
export type MemoryCache<R = unknown> = CacheTransport<R>;

/** What `toJSON().state` holds and `options.state` restores. */
export interface BreakerStateJSON {
  name?: string;
  enabled?: boolean;
  closed?: boolean;
  open?: boolean;
  halfOpen?: boolean;
  warmUp?: boolean;
  shutdown?: boolean;
  lastTimerAt?: number;
}

/** Breakers of several workers sharing one state (see `SharedStore`). */
export interface SharedOptions extends CoreSharedConfig {
  /** The store every worker's breaker of this name uses (`SharedStore`: synchronous; an `AsyncStore` such as `RedisStore` from `fusewire/redis`: async mode). */
  store: SharedStore | AsyncStore;
}

/**
 * `T`, not used to infer type arguments: the action alone decides `TI` and `TR`
 * (TypeScript's `NoInfer`, in a form TypeScript 4.7+ understands).
 */
export type NoInferOf<T> = [T][T extends any ? 0 : never]; // eslint-disable-line @typescript-eslint/no-explicit-any

/**
 * The arguments `fireWithSignal` takes for an action of arguments `TI`: without the
 * trailing `AbortSignal` parameter the breaker appends (`(url: string, signal:
 * AbortSignal) => …` takes `[url: string]`, also with `signal?: AbortSignal`); a last
 * parameter typed `unknown` or `any` may be given or left to the breaker; anything
 * else (`object`, `EventTarget`, …) is `TI` as it is (found by review: those were
 * dropped too).
 */
export type SignalArgs<TI extends unknown[]> = TI extends [...infer A, infer L]
  ? (unknown extends L ? A | TI : ([L] extends [AbortSignal | undefined] ? A : TI))
  : TI;

/**
 * A breaker's action, typed as a method is (its parameters checked bivariantly), so a
 * breaker of any action is still a `CircuitBreaker`.
 */
export type Action<TI extends unknown[]> = { action(...args: TI): unknown }['action'];

/** The options: opossum's, with opossum's names and defaults, plus fusewire's. */
export interface Options<TI extends unknown[] = unknown[], TR = any> { // eslint-disable-line @typescript-eslint/no-explicit-any
  /** Milliseconds a call may run before it fails with `ETIMEDOUT` (default 10000; `false` or 0: none). */
  timeout?: number | false | undefined;
  /** Milliseconds the breaker stays open before it lets a probe through (default 30000). */
  resetTimeout?: number | undefined;
  /** Error percentage above which the breaker opens (default 50). */
  errorThresholdPercentage?: number | undefined;
  /** Length of the rolling window in ms (default 10000). */
  rollingCountTimeout?: number | undefined;
  /** Buckets of the rolling window (default 10). */
  rollingCountBuckets?: number | undefined;
  /** Whether `stats` reports latency percentiles (default true; false: -1). */
  rollingPercentilesEnabled?: boolean | undefined;
  /** Calls in the window before the breaker may open (default 0). */
  volumeThreshold?: number | undefined;
  /** Concurrent calls at most (default unbounded); more fail with `ESEMLOCKED`. */
  capacity?: number | undefined;
  /** No opening during the first `rollingCountTimeout` (default false). */
  allowWarmUp?: boolean | undefined;
  /** An error it returns a truthy value for is not a failure (the call still rejects). */
  // Callbacks of the call's arguments have a method's type (checked bivariantly), so a breaker of
  // any action is still a `CircuitBreaker` (`let b: CircuitBreaker = new CircuitBreaker(readFile)`).
  errorFilter?: { f(err: any, ...args: TI): unknown }['f'] | undefined; // eslint-disable-line @typescript-eslint/no-explicit-any
  /** Whether the breaker protects calls (default true; false: the action runs unprotected). */
  enabled?: boolean | undefined;
  /** Name in stats and metrics (default: the action's name, else a random id). */
  name?: string | undefined;
  /** Group (default: the name). */
  group?: string | undefined;
  /** Aborted when a call times out (opossum's breaker-wide controller). */
  abortController?: AbortController | undefined;
  /** Renew `abortController` on half-open and close once it was aborted (default false). */
  autoRenewAbortController?: boolean | undefined;
  /** Cache the first successful result per cache key (default false). */
  cache?: boolean | undefined;
  /** Cache entry lifetime in ms (default 0: forever). */
  cacheTTL?: number | undefined;
  /** Entries of the built-in cache at most. */
  cacheSize?: number | undefined;
  /** The cache key of a call (default `JSON.stringify(args)`); not only a string (see `CacheKey`). */
  cacheGetKey?: { f(...args: TI): CacheKey }['f'] | undefined;
  /** Where results are cached (default: in memory). */
  // `any`, as in opossum's types: the action alone decides the result type (found by
  // review: a `MemoryCache` passed inline made `fire()` resolve to `unknown`).
  cacheTransport?: CacheTransport<any> | undefined; // eslint-disable-line @typescript-eslint/no-explicit-any
  /** Share one in-flight call among concurrent calls with the same key (default false). */
  coalesce?: boolean | undefined;
  /**
   * How long a coalesced result is shared, in ms (default: `timeout`); `false`: no
   * expiry (what opossum writes back when `timeout` is false).
   */
  coalesceTTL?: number | false | undefined;
  /** Entries of the coalescing cache at most. */
  coalesceSize?: number | undefined;
  /** Outcomes that end sharing early. */
  coalesceResetOn?: ('error' | 'success' | 'timeout')[] | undefined;
  /** @deprecated opossum's: ignored, with opossum's warning; use `errorThresholdPercentage`. */
  maxFailures?: number | undefined;
  /** Whether `snapshot` events are emitted (default true; only while someone listens). */
  enableSnapshots?: boolean | undefined;
  /** Accepted for opossum code (buckets roll by time here; see README). */
  rotateBucketController?: { on(ev: string, fn: Listener): unknown; removeListener(ev: string, fn: Listener): unknown } | undefined;
  /** Restores `toJSON().state`. */
  state?: BreakerStateJSON | undefined;
  /** Primes the window with saved `stats` (or another breaker's `status`). */
  status?: Status | Partial<Stats> | undefined;
  /** fusewire: the core's config schema, merged over what the options above map to. */
  fusewire?: CoreConfig | undefined;
  /** fusewire: keep one state for this name across workers (`worker_threads`). */
  shared?: SharedOptions | undefined;
}

/** Why a breaker changed state (the core's `TransitionReason`). */
export type TransitionReason = 'error_percentage' | 'consecutive_failures' | 'slow_call_rate' | 'open_elapsed' |
  'probes_succeeded' | 'probe_failed' | 'probe_lease_expired' | 'forced' | 'observed';

/** Listeners of each event, with opossum's arguments. */
export interface CircuitBreakerEvents<TI extends unknown[] = unknown[], TR = unknown> {
  fire: (args: TI) => void;
  /**
   * The action's result; as in opossum, also the error when `errorFilter` passed it
   * (then `result` is that error, whatever `TR` says).
   */
  success: (result: TR, latencyMs: number) => void;
  failure: (error: any, latencyMs: number, args: TI) => void; // eslint-disable-line @typescript-eslint/no-explicit-any
  /**
   * The breaker's `ETIMEDOUT` error; or, for a call whose `fireWithSignal` signal timed
   * out, that signal's reason (a `DOMException` named `TimeoutError`, whose `code` is a
   * number: `isOurError` is false for it).
   */
  timeout: (error: CircuitBreakerError | (Error & { name: 'TimeoutError'; code: number }), latencyMs: number, args: TI) => void;
  reject: (error: CircuitBreakerError) => void;
  /**
   * fusewire passes why (opossum passes nothing): the trip rule, `probe_failed`,
   * `probe_lease_expired`, `forced` (`open()`), or `observed` (another worker or
   * process opened the shared breaker).
   */
  open: (reason: TransitionReason) => void;
  halfOpen: (resetTimeout: number) => void;
  /** fusewire passes why: `probes_succeeded`, `forced` (`close()`) or `observed`. */
  close: (reason: TransitionReason) => void;
  fallback: (result: unknown, error: any) => void; // eslint-disable-line @typescript-eslint/no-explicit-any
  semaphoreLocked: (error: CircuitBreakerError, latencyMs: number) => void;
  cacheHit: () => void;
  cacheMiss: () => void;
  coalesceCacheHit: () => void;
  coalesceCacheMiss: () => void;
  healthCheckFailed: (error: any) => void; // eslint-disable-line @typescript-eslint/no-explicit-any
  shutdown: () => void;
  snapshot: (stats: Stats) => void;
  /** fusewire: a shared-store problem (the breaker already degraded as documented). */
  store: (issue: { issue: 'invalid' | 'contended' | 'failed' | 'stale'; status: number; message: string }) => void;
}

type Phase = 0 | 1 | 2;
const CLOSED = 0;
const OPEN = 1;
const HALF_OPEN = 2;
const STORE_ISSUES = ['invalid', 'contended', 'failed', 'stale'] as const;
/** The core's decode errors (shared/codec.rs `DecodeError`, in lib.rs `decode_code`'s order). */
const DECODE = ['truncated state bytes', 'state bytes longer than the 64 KiB limit', 'not fusewire state (bad magic)',
  'state written by newer schema v', 'state written by unsupported schema v', 'state of another kind (',
  'state checksum mismatch (corrupt bytes)', 'state payload does not parse'];

/** A store issue in words (shared/io.rs `Issue`'s `Display`: the .wasm sends codes only). */
function storeText(issue: (typeof STORE_ISSUES)[number], status: number, what: number, n: number): string {
  switch (issue) {
    case 'invalid': {
      const d = (DECODE[what] ?? 'unreadable bytes') + (what === 3 || what === 4 ? n : what === 5 ? `${n})` : '');
      return `unreadable state (${d}), reset`;
    }
    case 'contended': return 'CAS contended, degraded for this round';
    case 'failed': return `store failed with status ${status}`;
    default: return 'shared state not confirmed (no answer within stale_ms, or writes failing): running on the local breaker';
  }
}
/** Why a call was refused, by the core's cause code (lib.rs `cause_code`). */
const REFUSALS: readonly (Refusal | undefined)[] = ['open', 'forced_open', 'probes_exhausted', 'throttled', 'slow_start',
  'bulkhead_full', 'queue_full', 'wait_expired', 'degraded', 'no_key'];
const SLOTS = 4_194_304; // call ids: slot = id mod 2^22
/** The core's transition reasons (`TransitionReason::name`, by lib.rs `reason_code`). */
const REASONS: readonly TransitionReason[] = ['error_percentage', 'consecutive_failures', 'slow_call_rate',
  'open_elapsed', 'probes_succeeded', 'probe_failed', 'probe_lease_expired', 'forced', 'observed'];
/** `TransitionReason::Observed` (lib.rs `reason_code`). */
const REASON_OBSERVED = 8;

type AnyBreaker = CircuitBreaker<any, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
/** A weak reference where the platform has them (a strong one elsewhere). */
export type Ref = { deref(): AnyBreaker | undefined };
const weak = typeof WeakRef === 'function'
  ? (b: AnyBreaker): Ref => new WeakRef(b)
  : (b: AnyBreaker): Ref => ({ deref: () => b });
/**
 * Live breakers (for `fusewire/prometheus`), held weakly: a breaker dropped without
 * `shutdown()` is collected and its core key freed. @internal
 */
export const registry: Set<Ref> = new Set();
/** The breakers of `registry` still alive. @internal */
export function liveBreakers(): AnyBreaker[] {
  const all: AnyBreaker[] = [];
  for (const r of registry) {
    const b = r.deref();
    if (b !== undefined && !b.isShutdown) all.push(b);
  }
  return all;
}
/**
 * Called when a breaker dropped without `shutdown()` has been collected, with its
 * handle (its core still there, freed right after), its `_ref` and the exports of
 * its instance: an exporter
 * reads its final counts. @internal
 */
export const reapers: Set<(h: number, ref: Ref, x: Exports) => void> = new Set();
// Once the instance is lost, what waited on it runs (see `lose`).
onLost.add(() => {
  try {
    // Calls whose settling threw (see `strays`): settled, unprotected, with the rest.
    if (strays.n !== 0) returnStrays(now());
  } catch {
    // Each part is guarded; this is for what is not.
  }
  for (const b of liveBreakers()) {
    try {
      b._lost();
    } catch {
      // (Each part of `_lost` is guarded; this is for what is not.)
    }
  }
});

// A new instance replaced the lost one: each breaker takes a core in it (see `_rebind`).
onRevive.add(() => {
  for (const b of liveBreakers()) {
    try {
      b._rebind();
    } catch {
      // It passes calls through until its next call tries again.
    }
  }
});

/** Called when a breaker is created (true) or shut down (false). @internal */
export const watchers: Set<(b: CircuitBreaker<any, any>, live: boolean) => void> = new Set(); // eslint-disable-line @typescript-eslint/no-explicit-any

/**
 * The timers that hold their breaker weakly (the far one of `_arm`, the snapshot
 * timer): cleared when it is collected (found by a soak review: each dropped breaker
 * left its far timer, 24.8 days, on the heap).
 */
type WeakTimers = { far: TimerSlot; snap: TimerSlot };

const finalizer = typeof FinalizationRegistry === 'function'
  ? new FinalizationRegistry<{ h: number; x: Exports; ref: Ref; timers: WeakTimers }>(({ h, x, ref, timers }) => {
      registry.delete(ref);
      timers.far.cancel();
      timers.snap.cancel();
      for (const f of reapers) {
        try {
          f(h, ref, x);
        } catch {
          // An exporter's failure must not keep the core key.
        }
      }
      // (Exports of an instance since replaced answer without it.)
      x.fw_free(h);
    })
  : undefined;

/** Breakers made per name within the last minute, for `madeAgain`. */
const made = new Map<string, { n: number; since: number }>();

/**
 * A breaker made per request never opens: each counts only its own calls (found by a
 * load test: 2 000 calls to a failing upstream through breakers of one name, no trip
 * and no word). The 100th breaker of one name within a minute warns, once per name.
 */
function madeAgain(name: string, t: number): void {
  let m = made.get(name);
  if (m === undefined || t - m.since > 60_000) {
    if (made.size >= 1_000) made.clear(); // names that come and go: bounded
    m = { n: 0, since: t };
    made.set(name, m);
  }
  if (++m.n === 100) {
    warn(`fusewire: 100 breakers named ${JSON.stringify(name)} were made within a minute: each counts only its own ` +
      'calls, so a breaker made per request never opens. Make one per upstream and reuse it ' +
      '(a Collapser per request: collapser.forRequest())');
  }
}

function nextName(): string {
  // opossum's random id shape.
  return 'xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx'.replace(/[xy]/g, (c) => {
    const r = (Math.random() * 16) | 0;
    return (c === 'x' ? r : (r & 0x3) | 0x8).toString(16);
  });
}

/**
 * The resolving functions of the promise `new Promise(capture)` has just made: one
 * module-level executor instead of a closure per call.
 */
const noop = (): void => {};

/** Whether `setImmediate` works here (false once it threw: see `_enter`). */
let immediates = true;
const captured: { resolve: (v: unknown) => void; reject: (e: unknown) => void } = {
  resolve: noop,
  reject: noop,
};
/** The captured functions, handed over (kept, they would hold the last call's result). */
function release(): void {
  captured.resolve = noop;
  captured.reject = noop;
}
function capture(resolve: (v: unknown) => void, reject: (e: unknown) => void): void {
  captured.resolve = resolve;
  captured.reject = reject;
}

/**
 * The first error a listener threw while the breaker settled a batch of core events.
 * The batch still runs to its end (every call settles, every transition is told), and
 * the error is thrown after it, where a single `emit` would have thrown it.
 */
interface Sink {
  threw: boolean;
  error: unknown;
}

function guarded(sink: Sink, f: () => void): void {
  try {
    f();
  } catch (e) {
    if (!sink.threw) {
      sink.threw = true;
      sink.error = e;
    }
  }
}

/** Whether an abort reason says the caller's deadline passed (`AbortSignal.timeout`). */
function deadline(reason: unknown): boolean {
  return typeof reason === 'object' && reason !== null &&
    ((reason as { name?: unknown }).name === 'TimeoutError' ||
      // A breaker's own timeout, through the per-call signal it handed on (found by
      // review: a breaker called inside another's action never counted the outer
      // one's timeouts, and never opened on a hung upstream).
      (isOurError(reason) && (reason as { code?: unknown }).code === 'ETIMEDOUT'));
}

/** @internal Whether `v` has a callable `then` (a promise or any thenable). */
export function thenable(v: unknown): v is PromiseLike<unknown> {
  return v !== null && (typeof v === 'object' || typeof v === 'function') &&
    typeof (v as { then?: unknown }).then === 'function';
}

/** Longest a shut-down breaker on an async store drives its last flush (ms). */
const CLOSE_MS = 5000;

/**
 * A coalescing leader in flight (`_leading`): its lead of the coalescing cache, its
 * promise (what its followers share) and key. `gone`: the leader went away (aborted,
 * or refused by the bulkhead queue) and gave its lead to its followers: its outcome
 * is neither shared nor kept.
 */
interface Flight {
  lead: number;
  p: Promise<unknown>;
  key: string;
  gone: boolean;
  /** How the leader's action ended, for `coalesceResetOn` (its fallback may turn a failure into a value). */
  ended?: 'success' | 'error' | 'timeout';
}

/** A coalescing follower waiting for its key's leader (`_waits`, by caller id). */
interface Waiter {
  id: number;
  context: unknown;
  args: unknown[];
  signal: AbortSignal | undefined;
  key: string;
  /** What a success of its own call (run if its leader went away) stores in the cache. */
  store: ((v: unknown) => void) | undefined;
  resolve: (v: unknown) => void;
  reject: (e: unknown) => void;
  /** Bound to `signal` while it waits. */
  onAbort: (() => void) | undefined;
}

/**
 * Entries of `strays`, a ring: one noted while the one it reuses is still pending
 * replaces it. (32 were not enough: a recursion settling calls frame by frame at the
 * stack's end noted more, and the calls whose entries were replaced stayed stuck.)
 */
const STRAYS = 256;
const STRAY_MASK = STRAYS - 1;

/**
 * What the core handed out for a call whose setup threw (a listener, the stack's end),
 * to go back: the catch notes it here — stores into preallocated arrays call nothing,
 * so they work where the stack has run out — then tries `_giveBack`; what that cannot
 * do, the next call or tick of any breaker of the realm does. Its slot or queue place
 * counts nowhere (the core ignores an id it no longer holds: ids carry a generation),
 * its cache lead fails, its coalescing lead passes on. `ids`: a queue place as −id − 1,
 * NaN when free; `leads`: the cache and coalescing lead of each (−1: none). @internal
 */
const strays = {
  n: 0,
  owners: new Array<AnyBreaker | undefined>(STRAYS).fill(undefined),
  ids: new Float64Array(STRAYS).fill(NaN),
  leads: new Float64Array(2 * STRAYS).fill(-1),
  /** The exports each was noted under: given back only to that instance's core. */
  xs: new Array<Exports | undefined>(STRAYS).fill(undefined),
  /** A call to reject once given back, and with what (settling it threw part-way). */
  calls: new Array<Call | undefined>(STRAYS).fill(undefined),
  errors: new Array<unknown>(STRAYS).fill(undefined),
  /** Breakers whose events may not have been taken (see `_ok`), to poll again. */
  polls: new Array<AnyBreaker | undefined>(STRAYS).fill(undefined),
};

/** @internal `strays` (for tests: read through a function, the hot path reads a module const). */
export function strayState(): typeof strays {
  return strays;
}

/** Gives back every stray left (see `strays`). */
function returnStrays(t: number): void {
  const noted = strays.n;
  let left = false;
  for (let i = 0; i < STRAYS; i++) {
    strays.owners[i]?._giveBack(i, t);
    if (strays.ids[i] === strays.ids[i]) left = true;
    const b = strays.polls[i];
    if (b !== undefined) {
      try {
        b._poll(t);
        strays.polls[i] = undefined;
      } catch {
        left = true;
      }
    }
  }
  // (Strays noted meanwhile wait for the next turn.)
  if (!left && strays.n === noted) strays.n = 0;
}

/** One admitted (or queued) call. @internal */
class Call {
  done = false;
  queued = false;
  /** A lead of the request cache this call's success fills (-1: none). */
  lead = -1;
  /** The coalescing flight this call leads (its outcome is shared), if any. */
  flight: Flight | undefined = undefined;
  /** A custom cache transport's `set` for this call's success. */
  store: ((v: unknown) => void) | undefined = undefined;
  t0: number;
  ctl: AbortController | undefined = undefined;
  signal: AbortSignal | undefined = undefined;
  onAbort: (() => void) | undefined = undefined;
  /** Its own timer at its deadline, where timers die with their request (workerd). */
  timer: unknown = undefined;
  /** The exports of the instance it was admitted by: its id is that core's only. */
  readonly x: Exports;
  constructor(
    readonly cb: CircuitBreaker<any, any>, // eslint-disable-line @typescript-eslint/no-explicit-any
    public id: number,
    t0: number,
    readonly context: unknown,
    /** The action's arguments (with `fireWithSignal`, the call's own signal last). */
    public args: unknown[],
    readonly resolve: (v: unknown) => void,
    readonly reject: (e: unknown) => void,
  ) {
    this.t0 = t0;
    this.x = cb._w;
  }

  // Settling threw part-way: only where the stack ran out (a listener's throw is the
  // call's rejection), as when a thenable settles it deep in a recursion (found by
  // review: its slot stayed taken for good, the queued call behind it never ran, and
  // neither call settled). What the core still counts for it goes back and it rejects
  // with the error — noted first, with no call (see `strays`).
  ok = (v: unknown): void => {
    try {
      this.cb._ok(this, v);
    } catch (e) {
      const i = strays.n++ & STRAY_MASK;
      strays.owners[i] = this.cb;
      strays.xs[i] = this.x;
      strays.ids[i] = this.id;
      strays.leads[2 * i] = this.lead;
      strays.leads[2 * i + 1] = -1;
      this.lead = -1;
      strays.calls[i] = this;
      strays.errors[i] = e;
      returnStrays(now()); // with any noted deeper (see `_drain`)
    }
  };

  err = (e: unknown): void => {
    try {
      this.cb._err(this, e);
    } catch (x) {
      const i = strays.n++ & STRAY_MASK; // as in `ok`
      strays.owners[i] = this.cb;
      strays.xs[i] = this.x;
      strays.ids[i] = this.id;
      strays.leads[2 * i] = this.lead;
      strays.leads[2 * i + 1] = -1;
      this.lead = -1;
      strays.calls[i] = this;
      strays.errors[i] = x;
      returnStrays(now()); // with any noted deeper (see `_drain`)
    }
  };
}

/**
 * Rejects call `c` with `e`, later where the stack has run out (a throw from here would
 * reach `_protected`, which would give back what the call still owns).
 */
function reject(c: Call, e: unknown): void {
  try {
    c.reject(e);
  } catch {
    try {
      queueMicrotask(() => c.reject(e));
    } catch {
      // Nothing left to do it with.
    }
  }
}

/**
 * A call's arguments as its fallback gets them: with `fireWithSignal`, the caller's
 * signal last, not the call's own, which ends with the call (found by review: after a
 * timeout, a fallback fetching with the signal it was given was aborted at once).
 */
function callerArgs(c: Call): unknown[] {
  if (c.ctl === undefined) return c.args;
  const args = c.args.slice();
  args[args.length - 1] = c.signal;
  return args;
}

/** `toJSON().state` by @types/opossum's name (`CircuitBreaker.State`): every field set. */
export type State = Required<BreakerStateJSON>;

/**
 * What `CircuitBreaker.newStatus` takes (@types/opossum's `StatusOptions`): `stats`
 * primes the counters; `rollingCountBuckets` sets the length of its `window`;
 * `rollingCountTimeout` changes nothing (the `Status` it makes is a fixed snapshot, to
 * pass as a breaker's `options.status`).
 */
export interface StatusOptions {
  /** Counters to start from (those not given are 0). */
  stats?: Partial<Stats> | undefined;
  rollingCountBuckets?: number | undefined;
  rollingCountTimeout?: number | undefined;
  /** The status's `rollingPercentilesEnabled` (default true). */
  rollingPercentilesEnabled?: boolean | undefined;
  /** The status's `enableSnapshots` (default true). */
  enableSnapshots?: boolean | undefined;
  rotateBucketController?: Options['rotateBucketController'] | undefined;
}

/** opossum-compatible circuit breaker on the fusewire core. */
// (A `StatusSource` for its `Status`: checked where it is passed as one, not with
// `implements`, which would name the internal type in the published declarations.)
export class CircuitBreaker<TI extends unknown[] = unknown[], TR = unknown>
  extends (EventEmitter as new () => Emitter) {
  /** Whether `error` was made by a breaker (`EOPENBREAKER`, `ETIMEDOUT`, `ESEMLOCKED`, `ESHUTDOWN`). */
  static isOurError(error: unknown): error is CircuitBreakerError {
    return isOurError(error);
  }

  /** A `Status` primed with `options.stats`, to pass as another breaker's `options.status`. */
  static newStatus(options: StatusOptions = {}): Status {
    // As opossum's: counters not given are 0; the window has `rollingCountBuckets`
    // buckets, the first holding the stats as given; the stats read latency as no
    // sample yet (0, or -1 with percentiles disabled). (Found by review: the window
    // was empty, `percentiles` `{}`.)
    const given = options.stats ?? {};
    const enabled = options.rollingPercentilesEnabled !== false;
    const none = enabled ? 0 : -1;
    const percentiles: Record<string, number> = {};
    for (const p of PERCENTILES) percentiles[p] = none;
    const stats = { ...emptyBucket(), ...given, percentiles, latencyTimes: [], latencyMean: none } as Stats;
    const n = options.rollingCountBuckets;
    const buckets = typeof n === 'number' && Number.isSafeInteger(n) && n > 0 && n <= 10_000 ? n : 10;
    const window = [{ ...emptyBucket(), ...given } as Bucket];
    for (let i = 1; i < buckets; i++) window.push(emptyBucket());
    const src: StatusSource = {
      _h: -1,
      _w: served,
      _now: now,
      _percentilesEnabled: enabled,
      _snapshotsEnabled: options.enableSnapshots !== false,
      _bucketMs: 1000,
      _buckets: buckets,
      _extra: extraCounts(0),
      _final: { stats, window },
    };
    return new Status(src);
  }

  /** The options (opossum keeps the object it was given; so does this). */
  readonly options: Options<TI, TR>;
  /** @internal */ _h: number;
  /** @internal */ readonly _percentilesEnabled: boolean;
  /** @internal Whether its state is shared (a store): its window's counts are the store's. */
  get _sharedState(): boolean {
    return this._store !== undefined;
  }
  /** @internal */ readonly _snapshotsEnabled: boolean;
  /** @internal */ readonly _bucketMs: number;
  /** @internal */ readonly _buckets: number;
  /** @internal */ readonly _extra: ExtraCounts;
  /** @internal */ _final: { stats: Stats; window: Bucket[] } | undefined = undefined;
  /** @internal Transitions this breaker saw, for metrics. */
  readonly _transitions = { opened: 0, halfOpened: 0, closed: 0 };
  /** @internal Calls whose caller went away (aborted, not by its deadline), for metrics: the core counts them nowhere. */
  readonly _cancelled = { count: 0 };
  /** @internal The cumulative counts `status` primed the breaker with (not its own calls). */
  _primed: number[] | undefined;
  /** This breaker in `registry`. */
  /** @internal */ readonly _ref: Ref = weak(this);
  private readonly _weakTimers: WeakTimers = { far: new TimerSlot(), snap: new TimerSlot() };

  private _action: (...args: TI) => unknown;
  private readonly _name: string;
  private readonly _group: string;
  private readonly _parsed: Parsed;
  private readonly _errorFilter: (err: unknown, ...args: TI) => unknown;
  private readonly _store: SharedStore | AsyncStore | undefined;
  /** Whether `_store` is a synchronous store (asked before every admission). */
  private readonly _syncStore: boolean = false;
  private readonly _status: Status;
  private readonly _createdAtWall: number;
  /** When it was made (monotonic ms): `snapshot` events keep opossum's phase from here. */
  private readonly _bornAt: number;
  private _enabled: boolean;
  private _shutdown = false;
  /** Inside `shutdown()`'s `shutdown` event. */
  private _stopping = false;
  private _fallbackFn: ((...args: unknown[]) => unknown) | undefined = undefined;
  /** The timer at the core's next deadline (within a timer's reach). */
  private readonly _timer = new TimerSlot();
  /** The core deadline (ms) the timer was last armed for. */
  private _due = 0;
  /** The clock's `epoch` when the timer was armed. */
  private _armEpoch = 0;
  /** When the armed timer fires: `_due`, or a far timer's reach. */
  private _firesAt = 0;
  /** `open()` / `close()` calls so far: queued transitions from before one are stale. */
  private _forces = 0;
  /**
   * The state word the getters report while a call's own events are emitted before
   * the transition they caused (-1: read the core). opossum emits `timeout`,
   * `failure` and `semaphoreLocked` before it opens; the core has already moved on.
   */
  private _view = -1;
  /**
   * After `shutdown()` on a `SharedStore` with calls still running: they hold
   * process-wide bulkhead slots, so the core key lives until the last one ends (each
   * gives its slot back then), and is freed after it.
   */
  private _lingering = false;
  /**
   * The deadlines of calls the core no longer keeps (after `shutdown()`, or of a lost
   * instance: see `_lateTick`), apart from the core's timer, which a new core re-arms.
   */
  private readonly _lateTimer = new TimerSlot();
  /** While lingering: the core's next time-driven work (see `_lingerStep`). */
  private readonly _lingerTimer = new TimerSlot();
  /** After `shutdown()` on an async store: the last flush being driven (`done`: `flush()` calls waiting on it). */
  private _closing: { until: number; timer: TimerSlot; release: () => void; done: ((ok: boolean) => void)[]; held: boolean } |
    undefined = undefined;
  /**
   * `flush()` calls waiting for an async store, each with the writes sent before it
   * was called: see `_settleFlushes`.
   */
  private _flushes: { sent: number; resolve: (ok: boolean) => void }[] | undefined = undefined;
  /** Writes sent to an async store so far, and the latest that landed. */
  private _writes = 0;
  private _landed = 0;
  /** Whether the last flush after `shutdown()` landed everything (a later `flush()` says so). */
  private _closedOk = true;
  /** Bounds the wait of `_flushes` to `CLOSE_MS`. */
  private readonly _flushTimer = new TimerSlot();
  private _busy = 0;
  /** @internal The exports of the instance its core is in (see `_rebind`). */
  _w: Exports;

  private _calls: (Call | undefined)[] = [];
  /** `healthCheck` intervals, each with the `clearInterval` that goes with it. */
  private _health: [Timer, (t: never) => void][] = [];
  private _cache: CacheTransport<TR> | undefined = undefined;
  private readonly _onTimer = (): void => this._tick();
  /** @internal The Collapser's hook: runs on every timer tick. */
  _onTick: ((t: number) => void) | undefined = undefined;
  /** @internal Whether the timer must keep the process alive (loads waiting for a batch window). */
  _hold = false;
  /** A `Collapser` batch waits on the timer. */
  private _waiting = false;
  /**
   * A check of the calls in flight is scheduled (see `_enter`): by this immediate,
   * with the clock's `epoch` then, cancelled with the `clearImmediate` of the
   * `setImmediate` used (found by review: a fake's handle given to Node's own stopped
   * every later immediate of the process).
   */
  private _checking = false;
  private _checkEpoch = 0;
  private _immediate: unknown = undefined;
  private _unschedule: ((h: never) => void) | undefined = undefined;
  private readonly _check = (): void => {
    this._checking = false;
    this._refHold();
  };
  /** @internal The Collapser's hook: told each value a fallback resolved with. */
  _onFallbackValue: ((v: unknown, args: unknown[]) => void) | undefined = undefined;
  private readonly _hooks: Listener;
  private readonly _unhooks: Listener;

  constructor(action: (...args: TI) => TR | PromiseLike<TR>, options: NoInferOf<Options<TI, TR>> = {}) {
    super();
    if (typeof action !== 'function') {
      throw new TypeError(
        action === undefined || action === null
          ? 'No action provided. Cannot construct a CircuitBreaker without an invocable action.'
          : `action: must be a function, got ${describe(action)}`,
      );
    }
    // Any object, as opossum reads it (real code passes an array given properties).
    if (typeof options !== 'object' || options === null) {
      throw optionError('options', `must be an object, got ${describe(options)}`);
    }
    if (!loaded()) throw notLoaded();
    unknownOptions(options as Record<string, unknown>);
    this.options = options;
    this._action = action;
    const o = opossumView(options as Record<string, unknown>);
    this._parsed = parse(o, (options as Record<PropertyKey, unknown>)[FOR_COLLAPSER] === true);
    const named = str('name', o['name']) || action.name;
    const name = named || nextName();
    this._name = name;
    this._group = str('group', o['group']) || name;
    this._errorFilter = fn<(err: unknown, ...args: TI) => unknown>('errorFilter', o['errorFilter']) ?? (() => false);
    this._percentilesEnabled = this._parsed.config.metrics?.percentiles_enabled !== false;
    const enableSnapshots = bool('enableSnapshots', o['enableSnapshots']) ?? true;
    this._snapshotsEnabled = enableSnapshots;
    this._enabled = bool('enabled', o['enabled']) ?? true;
    const autoRenew = bool('autoRenewAbortController', o['autoRenewAbortController']) ?? false;
    const ac = o['abortController'];
    if (ac !== undefined && (typeof ac !== 'object' || ac === null || typeof (ac as AbortController).abort !== 'function')) {
      throw optionError('options.abortController', `must be an AbortController (with an \`abort()\` method), got ${describe(ac)}`);
    }
    if (autoRenew && ac === undefined) this._renewController();
    const rbc = o['rotateBucketController'];
    if (rbc !== undefined && (typeof rbc !== 'object' || rbc === null ||
        typeof (rbc as { on?: unknown }).on !== 'function')) {
      throw optionError('options.rotateBucketController', `must be an EventEmitter, got ${describe(rbc)}`);
    }
    this._setupCache(o);
    // The store, if shared.
    const shared = o['shared'] as Record<string, unknown> | undefined;
    if (shared !== undefined) {
      let st = shared['store'];
      // Another copy of fusewire (bundled into a dependency, or another version):
      // its SharedStore is used through its memory, whose layout version is checked
      // (found by review: refused as "an object").
      if (!(st instanceof SharedStore) && kindOf(st) === 'SharedStore') {
        st = SharedStore.from((st as { buffer: SharedArrayBuffer }).buffer);
      }
      if (!(st instanceof SharedStore) && !(st instanceof AsyncStore)) {
        const sab = typeof SharedArrayBuffer === 'function' && st instanceof SharedArrayBuffer;
        throw optionError('options.shared.store', `must be a SharedStore or a RedisStore, got ${sab
          ? 'a SharedArrayBuffer (in a worker, pass SharedStore.from(buffer))'
          : kindOf(st) === 'AsyncStore'
            ? 'a RedisStore of another copy of fusewire (a bundled copy, or another version): make it with the fusewire that makes this breaker'
            : describe(st)}`);
      }
      if ((o['name'] === undefined && action.name === '') || o['name'] === '') {
        throw optionError('options.name', 'a shared breaker needs a name (the same in every worker)');
      }
      // Names go to the store as UTF-8, where a lone surrogate is U+FFFD: two such
      // names would share one fleet breaker (found by review).
      const lone = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.exec(name);
      if (lone !== null) {
        throw optionError('options.name', `a shared breaker's name must be well-formed Unicode, got a lone surrogate at index ${lone.index}`);
      }
      this._store = st;
      this._syncStore = this._store instanceof SharedStore;
    }
    const cfg = this._parsed.config;
    const buckets = cfg.metrics?.rolling_buckets ?? 10;
    this._buckets = buckets;
    this._extra = extraCounts(buckets);
    this._bucketMs = (cfg.metrics?.rolling_window_ms ?? 10_000) / Math.max(1, buckets);
    const st = o['state'];
    if (st !== undefined && (typeof st !== 'object' || st === null)) {
      throw optionError('options.state', `must be an object (toJSON().state), got ${describe(st)}`);
    }
    const pre = o['status'];
    if (pre !== undefined && (typeof pre !== 'object' || pre === null)) {
      throw optionError('options.status', `must be a Status or a stats object, got ${describe(pre)}`);
    }
    const owner = this._store?.nextOwner() ?? 0;
    const t = now();
    this._bornAt = t;
    this._createdAtWall = wallNow();
    this._w = served;
    this._h = create(this._parsed, name, [owner >>> 0, Math.floor(Math.random() * 0x1_0000_0000) >>> 0], t);
    this._status = new Status(this);
    try {
      this._restore(o, t);
    } catch (e) {
      this._w.fw_free(this._h);
      throw e;
    }
    if (!this._shutdown) finalizer?.register(this, { h: this._h, x: this._w, ref: this._ref, timers: this._weakTimers }, this);
    // Snapshots only while someone listens.
    this._hooks = (ev: string | symbol) => {
      // Armed at once (the listener is added right after this), so its ticks come before
      // those of timers the caller arms next, as with opossum's interval.
      if (ev === 'snapshot' && enableSnapshots) this._snapshots(true);
    };
    this._unhooks = (ev: string | symbol) => {
      // Not while shutting down (its listeners go then): no task is left behind.
      if (ev === 'snapshot' && !this._shutdown) queueMicrotask(() => this._snapshots());
    };
    this._hook();
    if (this._shutdown) return;
    registry.add(this._ref);
    for (const f of watchers) f(this, true);
    // (Not a shared breaker: those of one name share one window.)
    if (named !== '' && this._store === undefined) madeAgain(name, t);
    // An asynchronous store is read at once, not at the first call (found by review:
    // a breaker not fired yet did no reads, so a process started during an outage ran
    // its whole first burst on its local breaker, all of it to the failing upstream).
    if (this._store instanceof AsyncStore) this._refresh(t);
    if (o['maxFailures'] !== undefined) {
      console.error('options.maxFailures is deprecated. Please use options.errorThresholdPercentage');
    }
    // opossum writes its defaults into the options object it was given.
    const p = this._parsed;
    const given = options as Record<string, unknown>;
    fill(given, 'timeout', p.timeout);
    fill(given, 'resetTimeout', p.resetTimeout);
    fill(given, 'errorThresholdPercentage', 50);
    fill(given, 'rollingCountTimeout', p.rollingCountTimeout);
    fill(given, 'rollingCountBuckets', p.rollingCountBuckets);
    fill(given, 'rollingPercentilesEnabled', this._percentilesEnabled);
    fill(given, 'capacity', Number.MAX_SAFE_INTEGER);
    fill(given, 'errorFilter', this._errorFilter);
    fill(given, 'cacheTTL', 0);
    fill(given, 'cacheGetKey', defaultKey);
    fill(given, 'enableSnapshots', enableSnapshots);
    fill(given, 'coalesce', false);
    fill(given, 'coalesceTTL', p.timeout);
    fill(given, 'coalesceResetOn', p.coalesceResetOn);
    // opossum writes this key even when it is not given (as undefined).
    if (!('rotateBucketController' in given)) fill(given, 'rotateBucketController', undefined);
  }

  // ---- getters -----------------------------------------------------------------------

  /** @internal */
  _now(): number {
    return now();
  }

  private _phase(): number {
    if (this._shutdown) return -1;
    if (this._view >= 0) return this._view;
    if (this._w !== served) this._rebind();
    const t = now();
    this._refresh(t);
    return this._w.fw_state(this._h, t);
  }

  /**
   * @internal A shared breaker reads the store before its state, `stats` or metrics
   * are read (a `SharedStore` at once: a trip by another worker shows; a `RedisStore`
   * asks, for the next read; found by review: an idle worker's `stats` read 0 for good).
   */
  _refresh(t: number): void {
    if (this._store !== undefined && !this._shutdown) this._after(this._w.fw_prepare(this._h, 0, t), t);
  }

  /** The breaker's name. */
  get name(): string {
    return this._name;
  }

  /** The breaker's group. */
  get group(): string {
    return this._group;
  }

  /** The protected function (opossum's `action`); calls that start running after an assignment run the new one. */
  get action(): Action<TI> {
    return this._action;
  }

  set action(fn: Action<TI>) {
    if (typeof fn !== 'function') throw new TypeError(`action: must be a function, got ${describe(fn)}`);
    this._action = fn;
  }

  /**
   * opossum's `semaphore`, to read: `count` is the free slots of `capacity`
   * (`Number.MAX_SAFE_INTEGER` unbounded), `test()` whether one is free. Slots are
   * taken and given back by the breaker's own calls, so it has no `take` / `release`.
   * A shared breaker counts its own calls only (other workers' are in the store).
   */
  get semaphore(): { readonly count: number; test(): boolean } {
    const free = (): number => {
      // The bulkhead in effect, with the core's default limit; without one, `capacity`
      // (past the core's limit it runs unbounded, but reads back as opossum's), unless
      // `options.fusewire.bulkhead` set none (found by review).
      const b = this._parsed.config.bulkhead;
      const cap = this.options.capacity;
      const limit = b !== undefined && b !== null ? b.max_concurrent ?? 10
        : !this._parsed.fusewirePaths.has('fusewire.bulkhead') && typeof cap === 'number' && cap >= 1 &&
          cap < Number.MAX_SAFE_INTEGER ? Math.floor(cap) : Number.MAX_SAFE_INTEGER;
      if (this._shutdown || this._w.fw_snapshot(this._h, now()) !== 0) return limit;
      return Math.max(0, limit - out()[S.IN_FLIGHT]!);
    };
    return { get count() { return free(); }, test: () => free() > 0 };
  }

  /** Whether the breaker is closed (calls flow). */
  get closed(): boolean {
    const s = this._phase();
    return s >= 0 && (s & 3) === CLOSED;
  }

  /** Whether the breaker is open (calls fail fast). */
  get opened(): boolean {
    const s = this._phase();
    return s >= 0 && (s & 3) === OPEN;
  }

  /** Whether the breaker is half-open (a probe decides). */
  get halfOpen(): boolean {
    const s = this._phase();
    return s >= 0 && (s & 3) === HALF_OPEN;
  }

  /** Half-open and the probe has not been let through yet. */
  get pendingClose(): boolean {
    const s = this._phase();
    return s >= 0 && (s & 4) !== 0;
  }

  /** Whether the warm-up (`allowWarmUp`) is still running. */
  get warmUp(): boolean {
    const s = this._phase();
    return s >= 0 && (s & 8) !== 0;
  }

  /** Whether the breaker protects calls. */
  get enabled(): boolean {
    return this._enabled;
  }

  /** Whether `shutdown()` was called. */
  get isShutdown(): boolean {
    return this._shutdown;
  }

  /** Calls in the window before the breaker may open. */
  get volumeThreshold(): number {
    return this._parsed.config.breaker?.error_percentage?.request_volume_threshold ?? 0;
  }

  /** The rolling status (stats, window, `snapshot` events). */
  get status(): Status {
    return this._status;
  }

  /** Totals over the rolling window (same as `status.stats`). */
  get stats(): Stats {
    return readStats(this);
  }

  /** The breaker-wide AbortController's signal, if any. */
  getSignal(): AbortSignal | undefined {
    return this._controller()?.signal;
  }

  /** The breaker-wide AbortController, if any. */
  getAbortController(): AbortController | undefined {
    return this._controller();
  }

  /** opossum's JSON form; `options.state` restores `state`. */
  toJSON(): { state: Required<BreakerStateJSON>; status: Stats } {
    let lastTimerAt = this._createdAtWall;
    if (!this._shutdown && this._w.fw_snapshot(this._h, now()) === 0) {
      const o = out();
      const openedAt = o[S.OPENED_AT]!;
      if (o[S.GENERATION]! > 0 && openedAt > 0) lastTimerAt = wallNow() - (now() - openedAt);
    }
    return {
      state: {
        name: this._name,
        enabled: this._enabled,
        closed: this.closed,
        open: this.opened,
        halfOpen: this.halfOpen,
        warmUp: this.warmUp,
        shutdown: this._shutdown,
        lastTimerAt,
      },
      status: this.stats,
    };
  }

  // ---- operator actions ---------------------------------------------------------------

  /** Opens the breaker (no-op if open); it half-opens after `resetTimeout`. */
  open(): void {
    this._force(OPEN);
  }

  /** Closes the breaker (no-op if closed). */
  close(): void {
    this._force(CLOSED);
  }

  /** Calls run unprotected (no breaker, timeout, capacity, cache or fallback) until `enable()`. */
  disable(): void {
    this._enabled = false;
  }

  /** Protects calls again. */
  enable(): void {
    if (!this._shutdown) this._enabled = true;
  }

  /**
   * Sets the fallback: a function of `(...args, error)` or another breaker; `null` or
   * `undefined` removes it. `fire()` then resolves to what it returns, whatever its
   * type (as in opossum: `TR` describes the action's result only).
   */
  fallback(func: ((...args: any[]) => unknown) | CircuitBreaker<any, any> | null | undefined): this { // eslint-disable-line @typescript-eslint/no-explicit-any
    if (!func) {
      // opossum keeps whatever it is given and runs a fallback only when it is truthy.
      this._fallbackFn = undefined;
    } else if (func instanceof CircuitBreaker || kindOf(func) === 'CircuitBreaker') {
      // Also one of another copy of fusewire (found by review: refused as "an object").
      const other = func as CircuitBreaker<unknown[], unknown>;
      this._fallbackFn = (...args: unknown[]) => other.fire(...args);
    } else if (typeof func === 'function') {
      this._fallbackFn = func;
    } else {
      throw new TypeError(`fallback: must be a function or a CircuitBreaker, got ${describe(func)}`);
    }
    return this;
  }

  /**
   * Empties the cache and the coalescing table. A coalesced call in flight is no
   * longer shared: later calls start a new one (the calls that joined it still get
   * its result), as when opossum flushes its coalescing cache.
   */
  clearCache(): void {
    this._cache?.flush();
    if (this._shutdown) return;
    const t = now();
    if (this._leading.size > 0) this._detach(t);
    for (const which of [0, 1]) {
      if ((this._cached & (which + 1)) === 0) continue;
      this._w.fw_cache_clear(this._h, which, 0, t);
      this._cacheEvents(which, t);
    }
  }

  /**
   * Runs `func` every `interval` ms (default 5000); a rejection (or a throw) emits
   * `healthCheckFailed` and opens the breaker. `func` may return a promise or a plain value.
   */
  healthCheck(func: (this: this) => unknown, interval?: number | string): void {
    // A numeric string is a number, as opossum's `isNaN` check and `setInterval` take
    // it (found by review: `healthCheck(f, process.env.HC_MS)` threw here).
    // `'0'` or blanks are 0, the default, as a number 0 is (opossum checks every 1 ms).
    const given: unknown = interval || 5000;
    const n = typeof given === 'string' ? Number(given) : given;
    if (typeof func !== 'function') throw new TypeError('Health check function must be a function');
    if (typeof n !== 'number' || Number.isNaN(n)) throw new TypeError('Health check interval must be a number');
    const iv = n || 5000;
    if (iv < 0) throw new TypeError(`Health check interval must not be negative, got ${iv}`);
    // A shut-down breaker arms nothing (found by review: the interval ran for good,
    // keeping the breaker from being collected; opossum's does the same).
    if (this._shutdown) return;
    const check = (): void => {
      if (this._shutdown) return;
      // Called at once, as opossum does (the first check runs inside `healthCheck()`);
      // a check that throws, or returns no promise, fails or passes as its value does.
      let p: Promise<unknown>;
      try {
        p = Promise.resolve(func.apply(this));
      } catch (e) {
        p = Promise.reject(e);
      }
      p.catch((e: unknown) => {
        if (this._shutdown) return;
        this._emitOwn('healthCheckFailed', e);
        this.open();
      });
    };
    const t = globalThis.setInterval(check, Math.min(Math.max(iv, 1), 2_147_483_647)) as unknown as Timer;
    unref(t);
    this._health.push([t, globalThis.clearInterval as (t: never) => void]);
    check();
  }

  /**
   * Writes this breaker's pending outcomes to its shared store now — without it
   * successes go at the next `shared.flush_ms` (errors go at once) — and gives back
   * the bulkhead slots and probe leases it holds beyond its running calls. Resolves
   * `true` once a write carrying the outcomes pending now has landed (calls made
   * meanwhile are not waited for), `false` if the store failed (a `store` event says
   * why) or after 5 s; the outcomes left go with a later write. Await it before a
   * serverless platform freezes the instance. Resolves `true` at once with no
   * `shared` store; after `shutdown()`, when its last flush ends (whether it landed).
   */
  flush(): Promise<boolean> {
    const store = this._store;
    if (store === undefined) return Promise.resolve(true);
    const c = this._closing;
    if (c !== undefined) {
      c.held = true;
      ref(c.timer.timer);
      return new Promise((r) => c.done.push(r));
    }
    if (this._shutdown) return Promise.resolve(this._closedOk);
    const h = this._h;
    const t = now();
    // Writes sent before now may have been built before now: the first sent from
    // here on carries what is pending now.
    const sent = this._writes;
    try {
      this._after(this._w.fw_flush(h, t), t);
    } catch (e) {
      // A listener threw on an event the write caused: the write still went out.
      return Promise.reject(e);
    }
    // A synchronous store answered already; an async one answers later.
    if (this._w.fw_flushed(h) === 1 || !(store instanceof AsyncStore)) return Promise.resolve(this._w.fw_flushed(h) === 1);
    if (this._landed > sent) return Promise.resolve(true);
    return new Promise((resolve) => {
      if (this._flushes === undefined) {
        this._flushes = [];
        // Held: a script awaiting it must not exit before it settles.
        this._flushTimer.arm(() => this._settleFlushes(false), CLOSE_MS, true);
      }
      this._flushes.push({ sent, resolve });
    });
  }

  /**
   * Settles the waiting `flush()` calls: all with `ok`; else each whose outcomes have
   * landed — a write sent after it was called landed, or nothing is left to write (a
   * breaker that keeps serving always has more: found by review, `flush()` waited its
   * full 5 s there and said false).
   */
  private _settleFlushes(ok?: boolean): void {
    const waiting = this._flushes;
    if (waiting === undefined) return;
    const idle = this._w.fw_flushed(this._h) === 1;
    const done = ok === undefined ? waiting.filter((f) => idle || this._landed > f.sent) : waiting;
    if (done.length === 0) return;
    const left = waiting.filter((f) => !done.includes(f));
    this._flushes = left.length === 0 ? undefined : left;
    if (left.length === 0) this._flushTimer.cancel();
    for (const f of done) f.resolve(ok ?? true);
  }

  /** @internal Numbers a write to the async store about to be sent. */
  _writeSent(): number {
    return ++this._writes;
  }

  /** @internal Write `seq` landed. */
  _writeLanded(seq: number): void {
    if (seq > this._landed) this._landed = seq;
  }

  /** Shuts the breaker down: emits `shutdown`, removes listeners, stops timers; later calls fail with `ESHUTDOWN`. */
  shutdown(): void {
    // A `shutdown` listener may call shutdown() again: that call does nothing (it
    // would emit again without end, and shut down twice under the outer call).
    if (this._shutdown || this._stopping) return;
    this._stopping = true;
    try {
      this._emitOwn('shutdown');
    } finally {
      this._stopping = false;
    }
    this.disable();
    const stats = this.stats;
    const window = this.status.window;
    const t = now();
    if (this._store !== undefined) {
      // A shared breaker writes its pending outcomes now (an async store's answers
      // come after shutdown: see `_closeStep`).
      this._io(this._w.fw_flush(this._h, t), t);
    }
    this._shutdown = true;
    super.removeAllListeners();
    this._status.removeAllListeners();
    this._timer.cancel();
    this._weakTimers.far.cancel();
    if (this._checking) {
      // Moot now: the running calls' timer (`_adrift`) holds the process itself.
      this._checking = false;
      this._unschedule?.(this._immediate as never);
    }
    this._weakTimers.snap.cancel();
    for (const [t, clear] of this._health) clear(t as never);
    this._health = [];
    this.clearCache();
    // (`clearCache()` leaves the core's tables alone once shut down: the cached
    // values go here, or a shut-down breaker still referenced kept them all: found by
    // a review, 95 MB for 500 breakers.)
    for (const p of this._payloads) p.clear();
    if (this._busy === 0) this._calls = [];
    const store = this._store;
    this._lingering = store !== undefined && !(store instanceof AsyncStore) && this._busy > 0;
    // Coalescing followers share their leader's result (the leader's call still
    // settles after shutdown, as in opossum); without a leader they reject.
    for (const waiter of this._waits.values()) {
      this._take(waiter.id);
      waiter.resolve(this._leading.get(waiter.key)?.p ??
        Promise.reject(ourError('The circuit has been shutdown.', 'ESHUTDOWN')));
    }
    this._waits.clear();
    this._leading.clear();
    if (this._busy > 0) this._adrift(t);
    this._final = { stats, window };
    registry.delete(this._ref);
    for (const f of watchers) f(this, false);
    // A lingering key stays registered: a call that never ends must not keep it.
    if (!this._lingering || this._busy === 0) finalizer?.unregister(this);
    const flushes = (this._flushes ?? []).map((f) => f.resolve);
    this._flushes = undefined;
    this._flushTimer.cancel();
    if (this._lingering && this._busy > 0) {
      // Freed by `_forget` when the last running call ends.
      this._lingerStep();
    } else {
      this._lingering = false;
      this._close(flushes.splice(0));
    }
    // (A lingering SharedStore key writes as each call ends: nothing to wait for.)
    for (const r of flushes) r(true);
    this._onShutdown?.();
  }

  /**
   * Frees the core key once its last flush is in: at once when it is, else through
   * `_closeStep` (`done` resolve then). A SharedStore's last write can fail too (a
   * lock held by another thread) and is retried after the core's backoff (found by
   * review: the key was freed at once, its outcomes and spare slots lost).
   */
  private _close(done: ((ok: boolean) => void)[]): void {
    const store = this._store;
    if (store === undefined || this._w.fw_flushed(this._h) === 1) {
      this._w.fw_free(this._h);
      for (const r of done) r(true);
      return;
    }
    const timer = new TimerSlot();
    // A SharedStore's retry comes within milliseconds (a lock held by another thread):
    // it holds the process or worker, within `CLOSE_MS` (found by review: a worker
    // ending right after `shutdown()` lost the outcomes of its last write). A RedisStore's
    // holds it once someone awaits the end.
    const sync = !(store instanceof AsyncStore);
    const c = { until: now() + CLOSE_MS, timer, release: () => {}, done, held: sync || done.length !== 0 };
    // Someone awaits the end (`flush()`, the store's `close()`): the timer holds the process.
    const hold = (): void => {
      c.held = true;
      ref(timer.timer);
    };
    if (store instanceof AsyncStore) c.release = store._hold(hold);
    this._closing = c;
    this._closeStep();
  }

  /**
   * @internal After `shutdown()`, a breaker on a shared store drives its last flush —
   * a write that met another process's write is merged and sent again, when the core
   * says — until every outcome landed, the store failed, or `CLOSE_MS` passed; then
   * it is freed. No event is emitted meanwhile.
   */
  _closeStep(): void {
    const c = this._closing;
    if (c === undefined) return;
    c.timer.cancel();
    const h = this._h;
    const t = now();
    if (t < c.until && this._w.fw_flushed(h) === 0) {
      // The core's time-driven work (a retry after its backoff) queues the next
      // request: run it. Without it a refused last write was never sent again
      // (found by review).
      this._runDue(t);
      if (this._w.fw_flushed(h) === 0) {
        // Wait for the answer, or the core's next retry time, within the bound.
        const d = this._w.fw_next(h);
        const left = c.until - t;
        c.timer.arm(() => this._closeStep(), d < 0 ? left : Math.min(Math.max(d - t, 1), left), c.held);
        return;
      }
    }
    this._closing = undefined;
    c.release();
    const ok = this._w.fw_flushed(h) === 1;
    this._closedOk = ok;
    this._w.fw_free(h);
    for (const r of c.done) r(ok);
  }

  /**
   * After `shutdown()` on a `SharedStore` with calls still running: the core's
   * time-driven work goes on until the last of them ends — the heartbeat that keeps
   * their slots' lease (found by review: the slots lapsed after `lease_ttl_ms` while
   * the calls ran, and other workers went past the limit). Its events are dropped.
   */
  private _lingerStep(): void {
    const slot = this._lingerTimer;
    slot.cancel();
    if (!this._lingering) return;
    const h = this._h;
    const t = now();
    this._runDue(t);
    const d = this._w.fw_next(h);
    if (d >= 0) slot.arm(() => this._lingerStep(), Math.max(d - t, 1), false);
  }

  /**
   * After `shutdown()`: runs the core's time-driven work due at `t` and the store
   * requests it queues; its events are dropped (nothing is emitted after shutdown).
   */
  private _runDue(t: number): void {
    const h = this._h;
    if (this._w.fw_next(h) <= t) {
      for (let guard = 0; guard < 10_000; guard++) {
        const ev = this._w.fw_poll(h, t);
        if (ev === EV_NONE || ev < 0) break;
      }
    }
    if (this._w.fw_has_io(h) === 1) this._io(F_IO, t);
  }

  /** @internal A store answer after `shutdown()` (see `_closeStep`). */
  _closingAnswer(id: number, kind: number, token: number, value: Uint8Array | undefined, flag: number): void {
    const c = this._closing;
    if (c === undefined) return;
    deliver(this._w, this._h, id, kind, token, value, flag, now());
    // A failed request: the store is not answering; stop, so the process can exit
    // (the outcomes of a write that failed stay unsent: whether it landed would take a
    // read, see the core's write receipts). A write Redis refused as late did not
    // land and Redis answers: the core sends it again, within the bound.
    if (kind === 4 && flag !== FAIL_REFUSED) c.until = 0;
    this._closeStep();
  }

  /**
   * At `shutdown()`: a queued call, which will never get a slot now, rejects with
   * `ESHUTDOWN`; a running call keeps its deadline — opossum's per-call timeout timer
   * outlives shutdown, so a hung action still times out (see `_lateTick`). The core is
   * freed; its deadline for a call is when the call got its slot (`t0`) plus the
   * effective `execution.timeout_ms`. One timer, holding the process while such calls
   * run, as before shutdown. `run`: the instance is lost (see `_lost`): a queued call
   * runs now, and then keeps its deadline too.
   */
  private _adrift(t: number, run = false): void {
    const timeout = this._parsed.timeout;
    const calls = this._calls;
    const late: Call[] = [];
    let left = this._busy;
    // Slots are id mod 2^22 and ids grow: the calls in flight are the newest.
    for (let i = calls.length - 1; i >= 0 && left > 0; i--) {
      const c = calls[i];
      if (c === undefined || c.done) continue;
      left--;
      if (c.queued && run) {
        // The instance is lost: the call runs now, unprotected.
        c.queued = false;
        c.t0 = t;
        this._exec(c);
        if (!c.done && timeout !== false) late.push(c);
      } else if (c.queued) {
        c.done = true;
        this._forget(c);
        c.reject(ourError('The circuit has been shutdown.', 'ESHUTDOWN'));
      } else if (timeout !== false) {
        late.push(c);
      }
    }
    if (late.length === 0) return;
    // One list (a loss, then a shutdown, each adds theirs).
    for (const c of late) {
      if (this._lateLive.has(c)) continue;
      this._lateLive.add(c);
      this._late.push(c);
    }
    this._late.sort((a, b) => a.t0 - b.t0);
    this._refHold();
    this._lateTick(t);
  }

  /**
   * The running calls whose deadline the core keeps no more, by start (see
   * `_lateTick`; ended ones leave lazily), and those of them still running.
   */
  private _late: Call[] = [];
  private readonly _lateLive = new Set<Call>();

  /** Call `c` ended: once none of `_late` runs, nothing is left to time out or hold the process for. */
  private _lateEnded(c: Call): void {
    if (!this._lateLive.delete(c) || this._lateLive.size !== 0) return;
    this._late.length = 0;
    this._lateTimer.cancel();
  }

  /**
   * After `shutdown()`: times out the running calls past their deadline as before it
   * (`timeout`, `errorFilter`, `success` or `failure`, the fallback, aborting the
   * call's signal and `options.abortController`), as opossum's per-call timer does:
   * its events reach listeners added since, nothing is counted (opossum removed every
   * listener, its own counters too). Re-arms for the next deadline; a listener's error
   * is thrown after the batch, as from the timer before shutdown.
   */
  private _lateTick(t: number): void {
    this._lateTimer.cancel();
    const late = this._late;
    const timeout = this._parsed.timeout;
    if (timeout === false) return;
    const sink: Sink = { threw: false, error: undefined };
    // Each due call is taken off first (a listener's `shutdown()` adds calls, in order).
    while (late.length > 0 && (late[0]!.done || late[0]!.t0 + timeout <= t)) {
      const c = late.shift()!;
      if (c.done) continue;
      const s = this._timedOutCall(c, t, sink);
      if (s !== undefined) guarded(sink, s);
    }
    // Holding the process, as opossum's per-call timers do.
    if (late.length > 0) this._lateTimer.arm(() => this._lateTick(now()), late[0]!.t0 + timeout - t, true);
    if (sink.threw) throw sink.error;
  }

  /**
   * Emits `event`. opossum keeps its stats in listeners of its own events, so an
   * event emitted from outside the breaker counts there (a gateway records a proxied
   * 502 with `emit('failure', err)`): here too, in the current bucket — see
   * `EMITTED`. The breaker's own events do not come through here.
   */
  override emit(event: string | symbol, ...args: unknown[]): boolean {
    const counts = typeof event === 'string' && !this._shutdown ? EMITTED.get(event) : undefined;
    if (counts !== undefined) {
      const t = now();
      const [kind, col, fires, failures] = counts;
      if (kind >= 0) this._w.fw_record(this._h, kind, 1, t);
      if (col >= 0) countPerBucket(this, col, t);
      if (fires !== 0) countPerBucket(this, FIRES, t, fires);
      if (failures !== 0) countPerBucket(this, FAILURES, t, failures);
    }
    return super.emit(event, ...args);
  }

  /** Emits one of the breaker's own events (counted already). */
  private _emitOwn(event: string, ...args: unknown[]): boolean {
    return super.emit(event, ...args);
  }

  /**
   * The events listened to: first the 13 opossum's own listeners count (tools such
   * as opossum-prometheus wire a counter to each name listed), then the rest, without
   * fusewire's own `newListener` / `removeListener` hooks.
   */
  override eventNames(): (string | symbol)[] {
    const names = super.eventNames();
    if (this._shutdown) return names;
    const hook = (f: Listener): boolean => f === this._hooks || f === this._unhooks;
    return [...EMITTED_NAMES, ...names.filter((n) => !EMITTED_NAMES.includes(n as string) &&
      !((n === 'newListener' || n === 'removeListener') && this.listeners(n).every(hook)))];
  }

  /** Removes listeners (fusewire keeps its own snapshot hooks). */
  override removeAllListeners(event?: string | symbol): this {
    // Node's emitter tells "no argument" (every event) from an explicit `undefined`
    // (the event named undefined) by `arguments.length`.
    if (event === undefined) super.removeAllListeners();
    else super.removeAllListeners(event);
    if (!this._shutdown && (event === undefined || event === 'newListener' || event === 'removeListener')) {
      this._hook();
    }
    return this;
  }

  // ---- firing -------------------------------------------------------------------------------

  /** Runs the action through the breaker (with `this` = the action, as opossum's `fire`). */
  fire(...args: TI): Promise<TR> {
    // Through a subclass's own `call`, as opossum's `fire` is (found by review: a
    // subclass instrumenting `call` was skipped).
    if (this.call !== ownCall) return this.call(this._action, ...args);
    return this._fire(this._action, args, undefined) as Promise<TR>;
  }

  /** Runs the action with `this` = `context`. */
  call(context: unknown, ...args: TI): Promise<TR> {
    return this._fire(context, args, undefined) as Promise<TR>;
  }

  /**
   * fusewire: runs the action bound to the caller's `signal`. The action gets a
   * per-call signal as an extra last argument, aborted when `signal` aborts or the
   * call times out. An aborted call counts nowhere (a probe gives its turn back) and
   * rejects with `signal.reason`. `args` are the action's arguments without that
   * trailing signal (for an action `(url, signal: AbortSignal)`, just the url).
   */
  fireWithSignal(signal: AbortSignal, ...args: SignalArgs<TI>): Promise<TR> {
    if (typeof signal !== 'object' || signal === null || typeof signal.addEventListener !== 'function') {
      return Promise.reject(new TypeError(`fireWithSignal: signal must be an AbortSignal, got ${describe(signal)}`));
    }
    // The arguments as the action gets them, signal last (the caller's until the call
    // runs, then its own): `errorFilter`, `cacheGetKey`, the fallback and the events
    // see what the action's type says (found by review: they saw one argument less,
    // and a fallback found the error one place earlier than after `fire`).
    // At the place the action declares for it: optional parameters left out before it
    // are `undefined` (found by review: with `(url, opts?, signal?)`, the signal became
    // `opts`). A parameter with a default value ends `length`: pass those.
    const a = args as unknown[];
    while (a.length < this._action.length - 1) a.push(undefined);
    a.push(signal);
    return this._fire(this._action, args, signal) as Promise<TR>;
  }

  private _fire(context: unknown, args: unknown[], signal: AbortSignal | undefined): Promise<unknown> {
    if (this._shutdown) {
      return Promise.reject(ourError('The circuit has been shutdown.', 'ESHUTDOWN'));
    }
    // Refused before its `fire` event: an aborted call counts nowhere, not even in a
    // `fire` listener's `stats.fires` (found by review).
    // (Bound to an instance since replaced: a new core first, where it can take one.)
    const bound = !lost && (this._w === served || this._rebind());
    if (signal?.aborted === true && this._enabled && bound) return Promise.reject(signal.reason);
    // Skipped without a listener: `emit` copies its arguments into an array.
    if (listening(this, 'fire')) this._told('fire', args);
    if (!this._enabled || !bound) {
      if (lost) tell();
      return this._bare(context, args);
    }
    if (this._cached === 0) return this._protected(context, args, signal, -1);
    return this._fireCached(context, args, signal);
  }

  /** Runs the action unprotected (disabled, or the instance is lost). */
  private _bare(context: unknown, args: unknown[]): Promise<unknown> {
    try {
      return Promise.resolve(this._action.apply(context, args as TI));
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /**
   * @internal The instance is lost (see `lose`): what waited on it runs now,
   * unprotected — queued calls, coalescing followers (on their leader's promise), a
   * collapser's loads; the timer stops (the core has no deadline left to keep).
   */
  _lost(): void {
    this._timer.cancel();
    this._weakTimers.far.cancel();
    this._keepAlive(false);
    // Queued calls run; running calls keep their deadline (as after `shutdown()`).
    const parts = [
      () => this._adrift(now(), true),
      () => {
        for (const waiter of [...this._waits.values()]) {
          this._take(waiter.id);
          const flight = this._leading.get(waiter.key);
          waiter.resolve(flight !== undefined && !flight.gone ? flight.p : this._bare(waiter.context, waiter.args));
        }
      },
      () => this._onLost?.(),
    ];
    // One that throws (a listener of a timed-out call) does not keep the others from running.
    let error: { e: unknown } | undefined;
    for (const f of parts) {
      try {
        f();
      } catch (e) {
        error ??= { e };
      }
    }
    if (error !== undefined) throw error.e;
  }

  /**
   * @internal A new instance replaced the lost one (see `revive` in engine.ts): the
   * breaker takes a new core in it, made from its options — closed, counts at zero (a
   * shared breaker reads its store again). What it ran on the lost one settles apart,
   * unprotected: each call, fallback and give-back keeps the exports it came from
   * (its ids are the lost core's), calls time out on `_lateTimer`, coalescing flights
   * are let go (their followers already have the leader's promise). A Collapser's
   * breaker waits while a load of it waits in the lost core (`_holds`; none does once
   * `_lost` ran); its next call tries again. Returns whether it is bound to the
   * current instance.
   */
  _rebind(): boolean {
    if (this._w === served) return true;
    if (lost || this._shutdown || this._holds?.() === true) return false;
    const t = now();
    const owner = this._store?.nextOwner() ?? 0;
    let h: number;
    try {
      h = create(this._parsed, this._name, [owner >>> 0, Math.floor(Math.random() * 0x1_0000_0000) >>> 0], t);
    } catch (e) {
      // Options the core refuses (given while the instance was lost, unchecked then),
      // or no room: it passes calls through, and is asked again at its next call.
      warn(`fusewire: breaker ${JSON.stringify(this._name)} passes calls through, unprotected: the new WebAssembly instance refuses it (${e instanceof Error ? e.message : String(e)})`);
      return false;
    }
    this._w = served;
    this._h = h;
    this._calls = [];
    // Its calls of the lost instance time out on `_lateTimer`, which holds the process.
    this._busy = 0;
    this._refHold();
    for (const flight of this._leading.values()) flight.gone = true;
    this._leading.clear();
    this._waits.clear();
    for (const p of this._payloads) p.clear();
    this._view = -1;
    this._armEpoch = -1;
    // `flush()` calls waiting on writes of the lost core: those never land.
    const flushes = this._flushes ?? [];
    this._flushes = undefined;
    this._flushTimer.cancel();
    this._landed = this._writes;
    finalizer?.unregister(this);
    finalizer?.register(this, { h, x: served, ref: this._ref, timers: this._weakTimers }, this);
    if (this._store instanceof AsyncStore) this._refresh(t);
    for (const f of flushes) f.resolve(false);
    this._onRebind?.();
    return true;
  }

  /** @internal A Collapser's: whether it still holds ids of the lost instance (see `_rebind`). */
  _holds: (() => boolean) | undefined = undefined;

  /** @internal A Collapser's: the breaker took a new core. */
  _onRebind: (() => void) | undefined = undefined;

  /** @internal What a collapser on this breaker does once the instance is lost. */
  _onLost: (() => void) | undefined = undefined;

  /** @internal What a collapser on this breaker does once it is shut down (no wasm call). */
  _onShutdown: (() => void) | undefined = undefined;

  /**
   * Emits an event of a call the core has not counted yet (`fire`, `cacheMiss`,
   * `coalesceCacheMiss`; `args` for `fire`): its listeners see it in `stats.fires`,
   * as opossum's, whose own `fire` listener runs first. Calls made while disabled
   * are not counted.
   */
  private _told(event: string, args?: unknown[]): void {
    const x = this._extra;
    const n = this._enabled ? 1 : 0;
    x.firing += n;
    try {
      if (args !== undefined) this._emitOwn(event, args);
      else this._emitOwn(event);
    } finally {
      x.firing -= n;
    }
  }

  /**
   * The call through the core's flow: start → run / queue / refuse. `lead`: a cache
   * lead it settles; `lead1`: a coalescing lead (of key `key1`) it leads: its outcome
   * is shared unless the call is refused or goes away (then the lead passes on).
   */
  private _protected(context: unknown, args: unknown[], signal: AbortSignal | undefined, lead: number,
    store?: (v: unknown) => void, lead1 = -1, key1 = ''): Promise<unknown> {
    const t = now();
    const h = this._h;
    // A sync store answers the refresh before the decision; an async one is asked by
    // `start` itself (admission never waits on it). The answers may schedule a wake
    // (a granted slot's heartbeat) that `start` no longer reports: its REARM is kept
    // (found by a stress test: with `timeout: false` nothing else armed the timer,
    // so held slots were never released or renewed).
    let r: number;
    try {
      if (strays.n !== 0) returnStrays(t);
      const pre = this._syncStore ? this._io(this._w.fw_prepare(h, 1, t), t) & F_REARM : 0;
      // A timer armed through fake timers since gone never fires: armed again (found by
      // review: the core took it as armed, and later calls never timed out).
      r = this._w.fw_start(h, t) | pre | (this._armEpoch === epoch ? 0 : F_REARM);
    } catch (e) {
      // Before the core decided (the stack's end): the leads it was given go back.
      if (lead >= 0) this._settleLead(0, lead, false, undefined);
      if (lead1 >= 0) this._giveUp1(lead1, undefined);
      throw e;
    }
    if (lost) {
      // Lost just now (see `lose`): this call runs as every later one will.
      tell();
      const p = this._bare(context, args);
      if (lead1 >= 0) this._lead1(lead1, p, key1);
      return p;
    }
    const kind = r & KIND_MASK;
    if (kind === RUNNING || kind === QUEUED) {
      // Read without a call where it can be (one can run out of stack here).
      const o = outView;
      const id = o.length !== 0 ? o[0]! : out()[0]!;
      try {
        if ((r & F_ANY) !== 0) this._after(r, t);
        // Each returns once the call is made (it owns what the core handed out), or
        // throws before.
        return kind === RUNNING
          ? this._run(id, t, context, args, signal, lead, store, lead1, key1)
          : this._queue(id, t, context, args, signal, lead, store, lead1, key1);
      } catch (e) {
        // A listener of a transition this start told threw (found by review: a
        // `halfOpen` listener that threw left the probe's slot taken for good), or the
        // stack ran out (found by a stack-limit fuzzer): the call does not run, and what
        // the core handed out goes back — noted first, with no call (one could fail).
        const i = strays.n++ & STRAY_MASK;
        strays.owners[i] = this;
        strays.xs[i] = this._w;
        strays.ids[i] = kind === QUEUED ? -id - 1 : id;
        strays.leads[2 * i] = lead;
        strays.leads[2 * i + 1] = lead1;
        this._giveBack(i, t);
        throw e;
      }
    }
    // Read before the leads are settled: their wasm calls write the result area
    // (found by review: with `cache: true`, `retryAfter` was a cache entry's id).
    const wait = r >= 0 ? out()[0]! : -1;
    if (lead >= 0) this._settleLead(0, lead, false, undefined);
    // A refused call's outcome is its own (opossum's `call()` returns before keeping
    // it for coalescing): its followers, if any, lead in its place.
    if (lead1 >= 0) this._giveUp1(lead1, undefined);
    if (r < 0) return Promise.reject(ourError('The circuit has been shutdown.', 'ESHUTDOWN'));
    // Refused.
    const event = (r >> 4) & 0xf;
    if (event === K.SHORT_CIRCUITED) {
      if ((r & F_ANY) !== 0) this._after(r, t);
      const err = ourError('Breaker is open', 'EOPENBREAKER');
      err.refusal = REFUSALS[(r >> 8) & 0xf];
      if (wait >= 0) err.retryAfter = Math.ceil(wait);
      this._emitOwn('reject', err);
      return this._fallback(err, args) ?? Promise.reject(err);
    }
    // Bulkhead: opossum's order is semaphoreLocked, failure, open, fallback.
    const err = ourError('Semaphore locked', 'ESEMLOCKED');
    err.refusal = REFUSALS[(r >> 8) & 0xf];
    const own = (): void => {
      const u = this._extra.unseen;
      u[0]++; // its `semaphoreLocked` listeners do not see the failure yet
      try {
        this._emitOwn('semaphoreLocked', err, 0);
      } finally {
        u[0]--;
      }
      this._emitOwn('failure', err, 0, args);
    };
    try {
      if ((r & F_ANY) !== 0) this._after(r, t, own);
      else own();
    } catch (e) {
      // opossum emits these inside the call's promise: a listener's error rejects
      // the call (found by review: it was thrown out of `fire()`).
      return Promise.reject(e);
    }
    return this._fallback(err, args) ?? Promise.reject(err);
  }

  private _run(id: number, t0: number, context: unknown, args: unknown[], signal: AbortSignal | undefined,
    lead: number, store: ((v: unknown) => void) | undefined, lead1: number, key1: string): Promise<unknown> {
    let p: Promise<unknown> | undefined;
    let c: Call | undefined;
    let entered = false;
    try {
      p = new Promise(capture);
      c = new Call(this, id, t0, context, args, captured.resolve, captured.reject);
      release();
      c.lead = lead;
      c.store = store;
      // Before the action runs: one that aborts its own call at once gives the lead up.
      if (lead1 >= 0) c.flight = this._lead1(lead1, p, key1);
      this._enter();
      entered = true;
      if (REQUEST_TIMERS) this._ownTimer(c);
      if (signal !== undefined) this._bind(c, signal, false);
    } catch (e) {
      // The stack ran out before the call was set up (found by a stack-limit fuzzer:
      // its slot stayed taken for good, every later call refused ESEMLOCKED). With no
      // call made, `_protected` gives back what the core handed out.
      if (c === undefined) throw e;
      this._drop(c, entered);
      const i = strays.n++ & STRAY_MASK;
      strays.owners[i] = this;
      strays.xs[i] = this._w;
      strays.ids[i] = id;
      strays.leads[2 * i] = -1; // `c.lead` was settled by `_drop`
      strays.leads[2 * i + 1] = c.flight === undefined ? lead1 : -1;
      this._giveBack(i, t0);
      reject(c, e);
      return p!;
    }
    try {
      this._exec(c);
    } catch (e) {
      // Only at the stack's end (`_exec` settles what the action does): the call
      // fails with it, and its slot goes back if the core still counts it (the core
      // ignores an id it no longer holds).
      const i = strays.n++ & STRAY_MASK;
      strays.owners[i] = this;
      strays.xs[i] = this._w;
      strays.ids[i] = id;
      strays.leads[2 * i] = -1;
      strays.leads[2 * i + 1] = -1;
      if (!c.done) this._drop(c, true);
      this._giveBack(i, t0);
      reject(c, e);
    }
    return p;
  }

  /** A call the core queued: it waits for its turn (see `_drain`), or for its signal. */
  private _queue(id: number, t: number, context: unknown, args: unknown[], signal: AbortSignal | undefined,
    lead: number, store: ((v: unknown) => void) | undefined, lead1: number, key1: string): Promise<unknown> {
    let p: Promise<unknown> | undefined;
    let c: Call | undefined;
    let entered = false;
    try {
      p = new Promise(capture);
      c = new Call(this, id, t, context, args, captured.resolve, captured.reject);
      release();
      c.queued = true;
      c.lead = lead;
      c.store = store;
      if (lead1 >= 0) c.flight = this._lead1(lead1, p, key1);
      this._enter();
      entered = true;
      this._calls[id % SLOTS] = c;
      if (signal !== undefined) this._bind(c, signal, true);
    } catch (e) {
      if (c === undefined) throw e;
      this._drop(c, entered);
      const i = strays.n++ & STRAY_MASK;
      strays.owners[i] = this;
      strays.xs[i] = this._w;
      strays.ids[i] = -id - 1;
      strays.leads[2 * i] = -1;
      strays.leads[2 * i + 1] = c.flight === undefined ? lead1 : -1;
      this._giveBack(i, t);
      reject(c, e);
      return p!;
    }
    return p;
  }

  /**
   * @internal Takes the core's events again (see `strays.polls`). Not after
   * `shutdown()`: its events are dropped there, and arming would cancel the timer
   * that times out the calls still running (found by review).
   */
  _poll(t: number): void {
    if (!this._shutdown) this._after(F_ANY, t);
  }

  /**
   * @internal Gives back stray `i` (this breaker's) now, if it can (see `strays`). Its
   * entry is cleared last: cut short (the stack's end), it is tried again whole, and
   * each step is harmless twice (the core ignores an id or lead it no longer holds;
   * a settled call ignores a rejection).
   */
  _giveBack(i: number, t: number): void {
    try {
      const v = strays.ids[i]!;
      if (v !== v) return;
      const queued = v < 0;
      const id = queued ? -v - 1 : v;
      // Noted under an instance since replaced: nothing of it reaches the new core.
      const mine = strays.xs[i] === this._w;
      let r = this._shutdown || !mine ? 0 : queued ? this._w.fw_cancel_ticket(this._h, id, t) : this._w.fw_complete(this._h, id, CANCELLED, t);
      // A queue place given its turn since is a slot under the same id (found by
      // review: given back as a ticket only, it stayed taken for good).
      if (queued && !this._shutdown && mine && r >= 0 && (r & 1) === 0) r |= this._w.fw_complete(this._h, id, CANCELLED, t) & ~3;
      const c = strays.calls[i];
      if (c !== undefined) {
        if (!c.done) this._drop(c, true);
        c.reject(strays.errors[i]);
      }
      const lead = strays.leads[2 * i]!;
      const lead1 = strays.leads[2 * i + 1]!;
      if (lead >= 0 && mine) this._settleLead(0, lead, false, undefined);
      if (lead1 >= 0 && mine) this._giveUp1(lead1, undefined);
      strays.ids[i] = NaN;
      strays.owners[i] = undefined;
      strays.xs[i] = undefined;
      strays.calls[i] = strays.errors[i] = undefined;
      strays.leads[2 * i] = strays.leads[2 * i + 1] = -1;
      if (r > 0 && (r & F_ANY) !== 0) {
        // Events the give-back made (a queued call's turn) are not lost where the
        // stack runs out taking them: polled again (see `_ok`).
        const k = strays.n++ & STRAY_MASK;
        strays.polls[k] = this;
        this._after(r, t);
        strays.polls[k] = undefined;
      }
    } catch {
      // At the stack's end: left to the next call or tick.
    }
  }

  /** @internal Takes call `c`, whose setup or settling threw, out of the breaker's books. */
  _drop(c: Call, entered: boolean): void {
    try {
      c.done = true;
      const lead = c.lead;
      c.lead = -1;
      const i = c.id % SLOTS;
      if (this._calls[i] === c) this._calls[i] = undefined;
      if (c.timer !== undefined) globalThis.clearTimeout(c.timer as never);
      if (c.signal !== undefined && c.onAbort !== undefined) c.signal.removeEventListener('abort', c.onAbort);
      // (A call of a lost instance is in no count or cache of this core: see `_rebind`.)
      const mine = c.x === this._w;
      if (entered && mine && --this._busy === 0 && this._hold) this._refHold();
      if (this._lateLive.size !== 0) this._lateEnded(c);
      if (lead >= 0 && mine) this._settleLead(0, lead, false, undefined);
    } catch {
      // At the stack's end: what is left of it stays.
    }
  }

  /** Runs the action of an admitted call. */
  private _exec(c: Call): void {
    let r: unknown;
    try {
      r = this._action.apply(c.context, c.args as TI);
    } catch (e) {
      this._err(c, e);
      return;
    }
    let then: unknown;
    try {
      then = r !== null && (typeof r === 'object' || typeof r === 'function') ? (r as { then?: unknown }).then : undefined;
      if (typeof then === 'function') {
        // Not when the action ended it already (aborted its own signal): a dead entry
        // in the table stopped the scan after `shutdown()` short of a live call
        // (found by review: that call never timed out).
        if (!c.done) this._calls[c.id % SLOTS] = c;
        // (`r.then`, not `then.call`: 5 % of a fire faster.)
        (r as PromiseLike<unknown>).then(c.ok, c.err);
        return;
      }
    } catch (e) {
      // A result whose `then` throws, or whose `then` getter does (a Proxy): the call
      // fails with that, as `await` would fail it.
      this._err(c, e);
      return;
    }
    this._ok(c, r);
  }

  /**
   * @internal A resolved value that is a failure all the same (a Collapser's batch
   * result that is not one value per key): the error to fail the call with.
   */
  _failsWith: ((v: unknown, args: unknown[]) => Error | undefined) | undefined = undefined;
  /** @internal A `Collapser`'s: told of a call its timeout ended (after the call settled). */
  _onTimedOut: ((args: unknown[], err: Error) => void) | undefined = undefined;

  /** @internal The action resolved. */
  _ok(c: Call, v: unknown): void {
    if (c.done) return;
    if (this._failsWith !== undefined) {
      const bad = this._failsWith(v, c.args);
      if (bad !== undefined) {
        this._err(c, bad);
        return;
      }
    }
    c.done = true;
    if (c.flight !== undefined) c.flight.ended = 'success';
    const lead = c.lead;
    c.lead = -1;
    this._forget(c);
    c.lead = lead;
    if (this._shutdown) {
      // As opossum's: told to listeners added since, counted nowhere.
      try {
        if (listening(this, 'success')) this._emitOwn('success', v, now() - c.t0);
      } catch (e) {
        this._threw(c, e);
        return;
      }
      c.resolve(v);
      return;
    }
    const t = now();
    // (A call of an instance since replaced is unknown to this core.)
    const r = c.x === this._w ? this._w.fw_complete(this._h, c.id, OK, t) : 2;
    if (r < 0 || (r & 3) !== 0) {
      // Unknown to the core (the breaker was reset under it): settle quietly.
      c.resolve(v);
      return;
    }
    // opossum closes a half-open breaker from its own `success` listener, which runs
    // before the user's: `close` comes before `success`. (Guarded here, off the quiet
    // path: a try block in the promise reaction itself costs ≈ 4 % of a fire.)
    const heard = listening(this, 'success');
    let after = (r & F_ANY) !== 0;
    if (after || heard) {
      try {
        if (after) {
          this._after(r, t);
          after = false;
        }
        if (heard) this._emitOwn('success', v, t - c.t0);
      } catch (e) {
        // A listener threw, or the stack ran out before the core's events were taken
        // (found by review: a call the core dequeued then never ran). Where `_after`
        // threw, the breaker is polled again by the next call or tick of any breaker
        // — noted with no call (see `strays`).
        if (after) strays.polls[strays.n++ & STRAY_MASK] = this;
        this._threw(c, e);
        return;
      }
    }
    if (c.lead >= 0) this._settleLead(0, c.lead, true, Promise.resolve(v));
    c.lead = -1;
    if (c.store !== undefined) {
      try {
        c.store(v);
      } catch {
        // A failing cache transport does not fail the call.
      }
    }
    c.resolve(v);
  }

  /**
   * Whether `errorFilter` lets the error pass (a bad request, not a failure). One
   * that throws does not: the error counts as a failure, and a warning (the
   * breaker's first) says why (found by review: the filter's exception was lost).
   */
  private _filters(e: unknown, args: unknown[]): boolean {
    try {
      return Boolean(this._errorFilter(e, ...(args as TI)));
    } catch (thrown) {
      if (!this._filterThrew) {
        this._filterThrew = true;
        const why = (thrown instanceof Error ? thrown.message : String(thrown)).split('\n')[0];
        warn(`fusewire: breaker ${JSON.stringify(this._name)}: errorFilter threw (${why}); the error counts as a failure`);
      }
      return false;
    }
  }

  /** Whether a store issue nobody listened for has been warned of (once per breaker). */
  private _storeWarned = false;

  /** Whether `errorFilter` has thrown (warned once). */
  private _filterThrew = false;

  /** Half-open and close transitions so far (where `autoRenewAbortController` renews). */
  private _renewals = 0;

  /** A renewed AbortController that frozen options could not take. */
  private _ownController: AbortController | undefined;

  /** The breaker-wide AbortController: `options.abortController`, or its renewal. */
  private _controller(): AbortController | undefined {
    return this._ownController ?? this.options.abortController;
  }

  /**
   * A new breaker-wide AbortController, written to `options.abortController` as opossum
   * does, or kept here when the options are frozen (found by review: the write threw
   * from inside a transition).
   */
  private _renewController(): void {
    const ac = new AbortController();
    try {
      this.options.abortController = ac;
      this._ownController = undefined;
    } catch {
      this._ownController = ac;
    }
  }

  /** @internal The action failed. */
  _err(c: Call, e: unknown): void {
    if (c.done) return;
    c.done = true;
    if (c.flight !== undefined) c.flight.ended = 'error';
    this._forget(c);
    // Any truthy value filters, as opossum tests it (`if (errorFilter(…))`).
    const filtered = this._filters(e, c.args);
    const t = now();
    // After shutdown the core is gone: as in opossum, the events go to listeners
    // added since and the fallback runs, but nothing is counted.
    const r = this._shutdown ? 0 : c.x === this._w ? this._w.fw_complete(this._h, c.id, filtered ? BAD_REQUEST : FAILURE, t) : 2;
    if (r < 0 || (r & 3) !== 0) {
      c.reject(e);
      return;
    }
    const latency = t - c.t0;
    let fb: Promise<unknown> | undefined;
    let after = (r & F_ANY) !== 0;
    try {
      if (filtered) {
        if (after) {
          this._after(r, t);
          after = false;
        }
        this._emitOwn('success', e, latency);
        c.reject(e);
        return;
      }
      // Its listeners see the state before the failure's transition (see `_drain`).
      if (after) {
        this._after(r, t, () => this._emitOwn('failure', e, latency, c.args));
        after = false;
      } else {
        this._emitOwn('failure', e, latency, c.args);
      }
      fb = this._fallback(e, callerArgs(c));
    } catch (x) {
      // A listener threw: the call rejects with that error. (Or the stack ran out:
      // where `_after` threw, polled again, as in `_ok`.)
      if (after) strays.polls[strays.n++ & STRAY_MASK] = this;
      this._threw(c, x);
      return;
    }
    if (fb !== undefined) c.resolve(fb);
    else c.reject(e);
  }

  /**
   * @internal A listener threw while call `c` settled: the call's promise rejects with
   * that error (as a throw inside opossum's promise chain makes it); a cache lead the
   * call held is settled as failed, so its followers do not wait forever.
   */
  _threw(c: Call, e: unknown): void {
    if (c.lead >= 0) {
      const lead = c.lead;
      c.lead = -1;
      try {
        this._settleLead(0, lead, false, undefined);
      } catch {
        // A cache listener threw too; the call still rejects with the first error.
      }
    }
    c.reject(e);
  }

  private _forget(c: Call): void {
    if (c.lead >= 0) {
      // Settled by _ok before it gets here; any other end is not a cacheable success.
      const lead = c.lead;
      c.lead = -1;
      const x = c.x;
      queueMicrotask(() => {
        // Not once the breaker took a core in a new instance.
        if (this._w === x) this._settleLead(0, lead, false, undefined);
      });
    }
    const i = c.id % SLOTS;
    if (this._calls[i] === c) this._calls[i] = undefined;
    if (c.timer !== undefined) globalThis.clearTimeout(c.timer as never);
    // (`_busy` counts this core's calls: see `_rebind`.)
    if (c.x === this._w && --this._busy === 0 && this._hold) this._refHold();
    if (this._lateLive.size !== 0) this._lateEnded(c);
    if (this._lingering) this._letGo(c);
    if (c.signal !== undefined && c.onAbort !== undefined) {
      c.signal.removeEventListener('abort', c.onAbort);
    }
  }

  /**
   * After `shutdown()` on a `SharedStore`: call `c` ended, so its slot (or its place
   * in the queue) goes back to the process at once; after the last, the pending
   * writes go out and the core key is freed. Counts nowhere, as after any shutdown.
   */
  private _letGo(c: Call): void {
    const h = this._h;
    const t = now();
    if (c.x !== this._w) {
      // A call of a lost instance: nothing of it is in this core.
    } else if (c.queued) this._w.fw_cancel_ticket(h, c.id, t);
    else this._w.fw_complete(h, c.id, CANCELLED, t);
    this._io(this._w.fw_flush(h, t), t);
    // (Inside `shutdown()` itself — a call past its deadline — it frees the key.)
    if (this._busy > 0 || this._final === undefined) return;
    this._lingering = false;
    this._lingerTimer.cancel();
    finalizer?.unregister(this);
    this._close([]);
  }

  /**
   * A call starts. While calls with a timeout are in flight the one timer is ref'd,
   * as opossum's per-call timeout timer is: a hung action times out instead of the
   * process exiting under it. Checked once the event loop turns (a call that ends in
   * its own turn never touches the timer's ref: toggling it per call cost ~20 %).
   */
  private _enter(): void {
    // Node's `setImmediate`, looked up now (a fake saved at load would never run once
    // real timers are back; browsers have none, and no timer holds anything there).
    // One scheduled through fake timers since gone never runs: scheduled again.
    if (this._busy++ === 0 && !this._hold && (!this._checking || this._checkEpoch !== epoch) &&
        immediates && typeof globalThis.setImmediate === 'function') {
      try {
        this._immediate = globalThis.setImmediate(this._check);
      } catch (e) {
        // One that throws (Next.js's Edge runtime defines Node's APIs to throw: found
        // by review, a breaker's first call threw): none, as in a browser. (The stack
        // running out says nothing about it.)
        if (!(e instanceof RangeError)) immediates = false;
        return;
      }
      this._checking = true;
      this._checkEpoch = epoch;
      this._unschedule = globalThis.clearImmediate;
    }
  }

  /** Binds a call to the caller's signal. */
  private _bind(c: Call, signal: AbortSignal, queued: boolean): void {
    c.ctl = new AbortController();
    // The caller's signal, last in the arguments, becomes the call's own.
    const args = c.args.slice();
    args[args.length - 1] = c.ctl.signal;
    c.args = args;
    c.signal = signal;
    void queued;
    c.onAbort = () => {
      if (c.done) return;
      c.done = true;
      // Noted first, with no call: an abort made where the stack has run out can stop
      // this handler anywhere (found by a stack-limit fuzzer), and what the call held
      // then goes back by the next call or tick (see `strays`).
      const i = strays.n++ & STRAY_MASK;
      const noted = c.queued ? -c.id - 1 : c.id;
      strays.owners[i] = this;
      strays.xs[i] = c.x;
      strays.ids[i] = noted;
      strays.leads[2 * i] = c.lead;
      strays.leads[2 * i + 1] = c.flight === undefined ? -1 : c.flight.lead;
      let sink: Sink;
      try {
        sink = this._aborted(c, signal);
      } catch {
        reject(c, signal.reason);
        return;
      }
      if (strays.owners[i] === this && strays.ids[i] === noted) {
        strays.ids[i] = NaN;
        strays.owners[i] = undefined;
        strays.leads[2 * i] = strays.leads[2 * i + 1] = -1;
      }
      if (sink.threw) throw sink.error; // a listener's error, as from the timer
    };
    signal.addEventListener('abort', c.onAbort, { once: true });
  }

  /** Call `c` was aborted through `signal` (see `_bind`): the listeners' first error is in the sink. */
  private _aborted(c: Call, signal: AbortSignal): Sink {
    const t = now();
    this._forget(c);
    const reason: unknown = signal.reason;
    // The caller's own deadline (`AbortSignal.timeout`) passed with no answer: a
    // TIMEOUT, as the Envoy filter counts a gRPC client's `grpc-timeout`. Any other
    // abort (the caller went away) counts nowhere.
    // (A call of a lost instance, since replaced, counts nowhere: see `_rebind`.)
    const mine = c.x === this._w;
    const late = !c.queued && !this._shutdown && mine && deadline(reason);
    if (!late && !this._shutdown && mine) this._cancelled.count++;
    let r = 0;
    if (!this._shutdown && mine) {
      r = c.queued
        ? this._w.fw_cancel_ticket(this._h, c.id, t)
        : this._w.fw_complete(this._h, c.id, late ? TIMEOUT : CANCELLED, t);
      // A queue place given its turn before its event was told is a slot under the
      // same id: given back as one.
      if (c.queued && r >= 0 && (r & 1) === 0) r |= this._w.fw_complete(this._h, c.id, CANCELLED, t) & ~3;
    }
    const sink: Sink = { threw: false, error: undefined };
    if (late && r >= 0 && (r & 3) === 0) {
      // opossum's order for a timeout: `timeout`, `failure`, then any transition.
      const latency = t - c.t0;
      const u = this._extra.unseen;
      u[0]++; // its `timeout` listeners do not see the failure yet
      guarded(sink, () => this._emitOwn('timeout', reason, latency, c.args));
      u[0]--;
      // `errorFilter` is asked, as for the breaker's own timeout (found by review: it
      // was not, though the README says it is).
      const filtered = this._filters(reason, c.args);
      guarded(sink, () => {
        if (filtered) this._emitOwn('success', reason, latency);
        else this._emitOwn('failure', reason, latency, c.args);
      });
    }
    // The action is told before its slot goes to a queued call (found by a stress
    // test: the next action started while this one had not been told to stop).
    c.ctl?.abort(reason);
    if (r >= 0 && (r & F_ANY) !== 0) guarded(sink, () => this._after(r, t));
    c.reject(reason);
    // A coalescing leader going away is not a failure of the call: its followers
    // are not failed by it, the first one leads now.
    const f = c.flight;
    if (f !== undefined) {
      c.flight = undefined;
      this._giveUp1(f.lead, f);
    }
    return sink;
  }

  /** Runs the fallback: a promise of its result, or undefined without one. */
  private _fallback(err: unknown, args: unknown[], fx: Exports = this._w): Promise<unknown> | undefined {
    const f = this._fallbackFn;
    if (f === undefined) return undefined;
    const h = this._h;
    // After shutdown (a call that was running then): it runs uncounted, as opossum's.
    const live = !this._shutdown;
    const fid = live ? fx.fw_fallback(h, now()) : -1;
    if (live && fid < 0) return undefined; // the fallback limit refused it (FALLBACK_REJECTION)
    let result: unknown;
    try {
      result = f.apply(f, [...args, err]);
    } catch (e) {
      this._fallbackDone(fid, 0, fx);
      return Promise.reject(e);
    }
    let promised = false;
    let broken: { e: unknown } | undefined;
    try {
      promised = thenable(result);
    } catch (e) {
      // A result whose `then` getter throws fails the fallback (found by review: its
      // slot under `fallback_max_concurrent` stayed taken); `fallback` is emitted
      // first, and the call rejects with it, as opossum's `Promise.resolve` does.
      broken = { e };
      this._fallbackDone(fid, 0, fx);
    }
    // Counted before `fallback` is emitted (opossum counts it in its own listener);
    // a promise is counted as running until it settles.
    let p: Promise<unknown> | undefined;
    if (promised) {
      const x = this._extra;
      p = Promise.resolve(result);
      if (fid >= 0) {
        x.fallingBack++;
        p.then(() => {
          x.fallingBack--;
          this._fallbackDone(fid, 1, fx);
        }, () => {
          x.fallingBack--;
          this._fallbackDone(fid, 0, fx);
        });
      }
    } else if (broken === undefined) {
      this._fallbackDone(fid, 1, fx);
    }
    try {
      this._emitOwn('fallback', result, err);
    } catch (e) {
      // As opossum: a `fallback` listener's error is the call's rejection, not a throw
      // out of `fire()` (found by review).
      return Promise.reject(e);
    }
    if (broken !== undefined) return Promise.reject(broken.e);
    const seen = this._onFallbackValue;
    if (seen !== undefined) {
      if (p !== undefined) {
        return p.then((v) => {
          seen(v, args);
          return v;
        });
      }
      seen(result, args);
    }
    return p ?? Promise.resolve(result);
  }

  /**
   * Records fallback `fid`'s outcome, unless the core is gone (`shutdown()`) or is not
   * the one of exports `x`, which gave it (a new instance since: see `_rebind`).
   */
  private _fallbackDone(fid: number, ok: 0 | 1, x: Exports): void {
    if (fid >= 0 && !this._shutdown && x === this._w) this._w.fw_fallback_done(this._h, fid, ok, now());
  }

  // ---- the core's events, timer and store --------------------------------------------

  /** @internal Keeps the process alive while something waits on the timer alone. */
  _keepAlive(on: boolean): void {
    this._waiting = on;
    this._refHold();
  }

  /** The timer holds the process while a batch waits on it or calls with a timeout run. */
  private _refHold(): void {
    const on = this._waiting || (this._busy > 0 && this._parsed.timeout !== false);
    if (this._hold === on) return;
    this._hold = on;
    // A weak far timer cannot hold the process: armed strongly instead (found by
    // review: a call with `timeout: 3e9` let the process exit).
    if (on && this._timer.timer === undefined && this._weakTimers.far.timer !== undefined) this._arm(now());
    else if (on) ref(this._timer.timer);
    else unref(this._timer.timer);
  }

  /**
   * @internal Handles the flags of a core call: store I/O, events, the timer. `own`
   * emits the events of the call that made it, before the transitions it caused.
   */
  _after(flags: number, t: number, own?: () => void): void {
    if ((flags & F_IO) !== 0) flags |= this._io(flags, t);
    try {
      if ((flags & F_EVENTS) !== 0) this._drain(t, own);
      else own?.();
    } finally {
      // A listener that threw does not leave the breaker without its timer.
      if ((flags & F_REARM) !== 0) this._arm(t);
      if (this._flushes !== undefined) this._settleFlushes();
    }
  }

  /** Drives the store requests of a shared breaker; returns the flags they left. */
  private _io(flags: number, t: number): number {
    const store = this._store;
    if (store === undefined || (flags & F_IO) === 0) return flags & ~F_IO;
    // An asynchronous store (Redis): requests go out now, answers come back later.
    if (store instanceof AsyncStore) return store._pump(this, t);
    const h = this._h;
    let acc = 0;
    for (let i = 0; i < 256; i++) {
      const op = nextIo(this._w, h, t);
      if (op === 0) break;
      let f: number;
      try {
        const a = store.exec(op, bytes(), io.keyAt, io.keyLen, io.expect, io.valueAt, io.valueLen);
        if (a.len > 0) putScratchBytes(store.value.subarray(0, a.len));
        f = this._w.fw_io_done(h, io.id, a.kind, a.token, a.len, a.flag, t);
      } catch {
        // Never out of a fire(): the request fails, the core degrades and backs off.
        f = this._w.fw_io_done(h, io.id, 4, -1, 0, FAIL_INTERNAL, t);
      }
      if (f < 0) break;
      acc |= f;
    }
    return acc & ~F_IO;
  }

  /**
   * Takes every queued event and emits them call by call (see `_emitInOrder`:
   * opossum's timeout, failure, open, fallback).
   */
  private _drain(t: number, own?: () => void): void {
    let evs: number[] | undefined;
    // A listener's call into this breaker drains again, inside: the outer's are back after.
    const outer = this._evs;
    try {
      evs = this._drainEvents(t, own);
      this._evs = outer;
    } catch (e) {
      // A listener threw (see `sink`), or the stack ran out: the calls of the events
      // taken from the core that may not have settled go back and reject — noted
      // first, with no call (found by review: a dequeued call whose event was lost
      // never ran, and kept the slot its turn gave it for good). What was done of
      // them is not done again (see `_giveBack`).
      evs ??= this._evs;
      this._evs = outer;
      for (let m = 0; evs !== undefined && m < evs.length; m += 4) {
        const ev = evs[m];
        if (ev !== EV_DEQUEUED && ev !== EV_TIMED_OUT && ev !== EV_REFUSED) continue;
        const id = evs[m + 1]!;
        const c = this._calls[id % SLOTS];
        // A dequeued call that started settles itself (it may be running); a timed
        // out or refused one may have settled: then a rejection is ignored.
        if (c === undefined || c.id !== id || (ev === EV_DEQUEUED && (c.done || !c.queued))) continue;
        const j = strays.n++ & STRAY_MASK;
        strays.owners[j] = this;
        strays.xs[j] = this._w;
        strays.ids[j] = id;
        strays.leads[2 * j] = c.lead;
        strays.leads[2 * j + 1] = -1;
        c.lead = -1;
        strays.calls[j] = c;
        strays.errors[j] = e;
      }
      try {
        if (strays.n !== 0) returnStrays(t);
      } catch {
        // At the stack's end still: a catch further up, or the next call or tick.
      }
      throw e;
    }
  }

  /** The events `_drain` took from the core, kept where a throw can find them. */
  private _evs: number[] | undefined = undefined;

  /** `_drain`'s work: returns the events it took (handled), if any. */
  private _drainEvents(t: number, own?: () => void): number[] | undefined {
    const h = this._h;
    let evs: number[] | undefined;
    this._evs = undefined;
    const sink: Sink = { threw: false, error: undefined };
    for (let guard = 0; guard < 100_000; guard++) {
      const ev = this._w.fw_poll(h, t);
      if (ev === EV_NONE || ev < 0) break;
      // Kept without a call where it can be (one can run out of stack here).
      const o = outView.length !== 0 ? outView : out();
      if (evs === undefined) this._evs = evs = [];
      const k = evs.length;
      evs[k] = ev;
      evs[k + 1] = o[0]!;
      evs[k + 2] = o[1]!;
      evs[k + 3] = o[2]!;
      if (ev === EV_STORE) {
        const issue = STORE_ISSUES[o[0]!] ?? 'failed';
        const status = o[1]!;
        let text = storeText(issue, status, o[2]!, o[3]!);
        if (issue === 'failed' && this._store instanceof SharedStore) text += ` (${sharedStoreStatus(status)})`;
        else if (issue === 'failed' && this._store instanceof AsyncStore) {
          const why = this._store._describe(status);
          if (why !== undefined) text += ` (${why})`;
        } else if (issue === 'stale' && this._store instanceof AsyncStore) {
          const why = this._store._describeStale();
          if (why !== undefined) text += ` (${why})`;
        }
        // The round gave up: what is left goes with a later write.
        if (issue !== 'invalid') this._settleFlushes(false);
        if (issue !== 'contended' && !listening(this, 'store') && !this._storeWarned) {
          // Unheard, the first one is a process warning (found by an on-call review:
          // a store failing for hours said nothing). Lost CAS races are a busy fleet's
          // everyday: not warned.
          this._storeWarned = true;
          warn(`fusewire: breaker ${JSON.stringify(this._name)}: shared store: ${issue}: ${text} (listen for 'store' events to see every issue)`);
        }
        guarded(sink, () => this._emitOwn('store', { issue, status, message: text }));
      }
    }
    if (evs === undefined) {
      if (own !== undefined) guarded(sink, own);
    } else {
      this._emitInOrder(evs, t, sink, own);
    }
    // A listener threw: every event above was still handled; its error goes on. (So
    // did a handler that could not start, at the stack's end: `_drain` finds its
    // event in `_evs`.)
    if (sink.threw) throw sink.error;
    return evs;
  }

  /**
   * Emits the queued events in the core's order (a call's event comes right before
   * the transition it caused), call by call as opossum does: the call's events
   * (`timeout`, `failure`, `semaphoreLocked`), the transitions right after it, then
   * its settling (fallback, rejection, a dequeued call starting). `own` is the call
   * that made the core call, first. Listeners of a call's events see the state
   * before the next transition (opossum opens after emitting them).
   */
  private _emitInOrder(evs: number[], t: number, sink: Sink, own?: () => void): void {
    const h = this._h;
    const prev = this._view;
    const st = this._w.fw_state(h, t);
    const flags = st >= 0 ? st & 8 : 0;
    const n = evs.length;
    // The outcomes of the calls not emitted yet, as opossum's counters would show them.
    const u = this._extra.unseen;
    const saved: [number, number, number] = [u[0], u[1], u[2]];
    const forces = this._forces;
    const kept = (m: number): boolean => {
      const id = evs[m + 1]!;
      const c = this._calls[id % SLOTS];
      return c !== undefined && c.id === id && !c.done;
    };
    const count = (m: number, d: number): void => {
      if (evs[m] === EV_TIMED_OUT && kept(m)) {
        u[0] += d;
        u[1] += d;
      } else if (evs[m] === EV_REFUSED && kept(m)) {
        u[0] += d;
        u[2] += d;
      }
    };
    for (let m = 0; m < n; m += 4) count(m, 1);
    let i = 0;
    // What the getters report from position m on: the state before the next
    // transition (none left: the core's own state). Found in one backward pass (a
    // forward scan per event made 80 000 calls timing out at once cost 7 s).
    const views = new Array<number>(n / 4 + 1);
    let v = prev;
    views[n / 4] = v;
    for (let m = n - 4; m >= 0; m -= 4) {
      if (evs[m] === EV_TRANSITION && evs[m + 1] !== evs[m + 2]) v = evs[m + 1]! | flags;
      views[m / 4] = v;
    }
    const viewAt = (m: number): number => views[m / 4] ?? prev;
    const segment = (emit: () => (() => void) | undefined): void => {
      try {
        this._view = viewAt(i);
        const settle = emit();
        for (; i < n && evs[i] === EV_TRANSITION; i += 4) {
          // A listener forced the breaker open or closed: the transitions queued
          // before it are history (its own events were emitted by then).
          if (this._forces !== forces) continue;
          const from = evs[i + 1]! as Phase;
          const to = evs[i + 2]! as Phase;
          this._view = viewAt(i + 4);
          const reason = evs[i + 3]!;
          guarded(sink, () => this._transition(from, to, reason));
        }
        this._view = viewAt(i);
        if (settle !== undefined) guarded(sink, settle);
      } finally {
        this._view = prev;
      }
    };
    segment(() => {
      if (own !== undefined) guarded(sink, own);
      return undefined;
    });
    try {
      while (i < n) {
        const ev = evs[i]!;
        const a = evs[i + 1]!;
        const c = evs[i + 3]!;
        const m = i;
        i += 4;
        segment(() => {
          count(m, -1);
          if (ev === EV_TIMED_OUT) return this._timedOut(a, t, sink);
          if (ev === EV_REFUSED) return this._queueRefused(a, c, t, sink);
          if (ev === EV_DEQUEUED) {
            const call = this._calls[a % SLOTS];
            if (call !== undefined && call.id === a && !call.done) {
              return () => {
                try {
                  call.t0 = t;
                  call.queued = false;
                  this._exec(call);
                } catch (e) {
                  // Its start threw (the stack's end; found by review: the slot its
                  // turn gave it stayed taken for good and it never settled): as
                  // `Call.ok` does, it goes back and rejects.
                  const j = strays.n++ & STRAY_MASK;
                  strays.owners[j] = this;
                  strays.xs[j] = this._w;
                  strays.ids[j] = call.id;
                  strays.leads[2 * j] = call.lead;
                  strays.leads[2 * j + 1] = -1;
                  call.lead = -1;
                  strays.calls[j] = call;
                  strays.errors[j] = e;
                  returnStrays(t);
                  throw e;
                }
              };
            }
          }
          return undefined;
        });
      }
    } finally {
      u[0] = saved[0];
      u[1] = saved[1];
      u[2] = saved[2];
    }
  }

  /** `reason`: the core's code (lib.rs `reason_code`); 8 = made by another process's breaker. */
  private _transition(from: Phase, to: Phase, reason: number): void {
    if (from === to) return;
    const ac = this._controller();
    // Counted (for fusewire/prometheus) where it was made, as the Envoy filter counts:
    // a shared trip is one `opened`, not one per worker that saw it.
    const own = reason !== REASON_OBSERVED ? 1 : 0;
    if (to === OPEN) {
      this._transitions.opened += own;
      markOpen(this, now(), true);
      this._emitOwn('open', REASONS[reason]);
    } else if (to === HALF_OPEN) {
      // A shared breaker that meets the fleet half-open (it joined then, or was not
      // looking while the fleet was open) tells its listeners the open it missed: they
      // see opossum's order, open before halfOpen.
      if (from === CLOSED) {
        // Its listeners see the breaker open, as they would have then.
        const view = this._view;
        this._view = OPEN;
        markOpen(this, now(), true);
        try {
          this._emitOwn('open', 'observed');
        } finally {
          this._view = view;
        }
      }
      this._transitions.halfOpened += own;
      this._renewals++;
      if (this.options.autoRenewAbortController === true && ac?.signal.aborted === true) {
        this._renewController();
      }
      this._emitOwn('halfOpen', this._parsed.resetTimeout);
    } else {
      this._transitions.closed += own;
      this._renewals++;
      if (this.options.autoRenewAbortController === true && ac?.signal.aborted === true) {
        this._renewController();
      }
      markOpen(this, now(), false);
      this._emitOwn('close', REASONS[reason]);
    }
  }

  private _timedOut(id: number, t: number, sink: Sink): (() => void) | undefined {
    const c = this._calls[id % SLOTS];
    if (c === undefined || c.id !== id) return undefined;
    return this._timedOutCall(c, t, sink);
  }

  /** `_timedOut` of call `c` (also one the core no longer knows: see `_lateTick`). */
  private _timedOutCall(c: Call, t: number, sink: Sink): (() => void) | undefined {
    if (c.done) return undefined;
    c.done = true;
    if (c.flight !== undefined) c.flight.ended = 'timeout';
    this._forget(c);
    const latency = t - c.t0;
    // opossum's message names `options.timeout` as given (10.5, not the 11 ms it runs).
    const ms = this._parsed.timeout === false ? 0 : this._parsed.timeout;
    const given = this.options.timeout;
    const err = ourError(`Timed out after ${typeof given === 'number' && Math.ceil(given) === ms ? given : ms}ms`, 'ETIMEDOUT');
    const u = this._extra.unseen;
    u[0]++; // its `timeout` listeners do not see the failure yet
    guarded(sink, () => this._emitOwn('timeout', err, latency, c.args));
    u[0]--;
    const filtered = this._filters(err, c.args);
    guarded(sink, () => {
      if (filtered) this._emitOwn('success', err, latency);
      else this._emitOwn('failure', err, latency, c.args);
    });
    const renewals = this._renewals;
    return () => {
      try {
        // (Through the call's own exports: a call of a lost instance gets none, as while lost.)
        const fb = filtered ? undefined : this._fallback(err, callerArgs(c), c.x);
        if (fb !== undefined) c.resolve(fb);
        else c.reject(err);
      } catch (x) {
        // A `fallback` listener threw: the call rejects with its error, which also
        // surfaces from the timer.
        this._threw(c, x);
        throw x;
      } finally {
        // (Not for a call of a lost instance: the controller is the new core's calls'.)
        const ac = c.x === this._w ? this._controller() : undefined;
        ac?.abort();
        // A half-open or close since the timeout (on the same tick) comes after this
        // abort in opossum's order, and renews the controller there (found by a
        // differential fuzzer: the probe got an aborted signal).
        if (this.options.autoRenewAbortController === true && ac !== undefined && this._renewals !== renewals) {
          this._renewController();
        }
        c.ctl?.abort(err);
        this._onTimedOut?.(c.args, err);
      }
    };
  }

  private _queueRefused(id: number, cause: number, t: number, sink: Sink): (() => void) | undefined {
    const c = this._calls[id % SLOTS];
    if (c === undefined || c.id !== id || c.done) return undefined;
    c.done = true;
    this._forget(c);
    const latency = t - c.t0;
    const waited = cause === 7 ? `: waited ${Math.round(latency)}ms in the queue` : '';
    const err = ourError(`Semaphore locked${waited}`, 'ESEMLOCKED');
    err.refusal = REFUSALS[cause];
    const u = this._extra.unseen;
    u[0]++;
    guarded(sink, () => this._emitOwn('semaphoreLocked', err, latency));
    u[0]--;
    guarded(sink, () => this._emitOwn('failure', err, latency, c.args));
    return () => {
      // Refused, as one refused at once: not shared, its followers lead in its place.
      const f = c.flight;
      if (f !== undefined) {
        c.flight = undefined;
        this._giveUp1(f.lead, f);
      }
      let fb: Promise<unknown> | undefined;
      try {
        fb = this._fallback(err, callerArgs(c));
      } catch (x) {
        this._threw(c, x); // a `fallback` listener threw (see `_timedOut`)
        throw x;
      }
      if (fb !== undefined) c.resolve(fb);
      else c.reject(err);
    };
  }

  /**
   * Where a timer dies with the request that set it (workerd): a running call's own
   * timer at its deadline, set in its caller's request, runs the breaker's due work
   * (found by review: the breaker's one timer, set in an earlier request, never
   * fired, and a hung call of the next request ran for good).
   */
  private _ownTimer(c: Call): void {
    const timeout = this._parsed.timeout;
    if (timeout === false) return;
    try {
      c.timer = globalThis.setTimeout(this._onCallTimer, timeout + 1);
    } catch {
      // Refused outside a request (workerd's global scope): the breaker's timer stands.
    }
  }

  private readonly _onCallTimer = (): void => {
    this._timer.cancel();
    this._tick();
  };

  /** (Re)arms the one timer at the core's next deadline. */
  private _arm(t: number): void {
    // Taken as armed once it is (found by a stack-limit fuzzer: set first, a throw
    // before the timer existed left the core's deadlines without one for good).
    this._armEpoch = -1;
    this._timer.cancel();
    this._weakTimers.far.cancel();
    // The snapshot timer, armed through fake timers since gone, is armed again.
    if (this._weakTimers.snap.stale) {
      this._weakTimers.snap.cancel();
      this._snapshots();
    }
    if (this._shutdown) return;
    const d = this._w.fw_next(this._h);
    if (d < 0) {
      this._armEpoch = epoch;
      return;
    }
    this._due = d;
    const delay = d - t;
    // Where the clock is when the timer fires (`fired`: Jest's legacy timers).
    this._firesAt = t + Math.min(delay, 2_147_483_647);
    if ((delay > 2_147_483_647 || this._idleShared()) && !this._hold) {
      // Further than a timer reaches (24.8 days: e.g. idle-key expiry): a timer at its
      // reach acts on nothing due and re-arms (found by review: with no timer, the core
      // took the far deadline as armed, and a process up for a year stopped timing out
      // calls and half-opening). It holds the breaker weakly: a dropped one is collected.
      // (Calls with a timeout that far hold it, and the process: strongly, below.)
      // So does the timer of a shared breaker with nothing running and everything
      // written: its deadlines are the store's housekeeping (reads, the key's idle
      // expiry, 10 min), which a dropped breaker needs no more (found by a lifecycle
      // review: 5 000 dropped ones lived 10 min, and Redis ones read it every second).
      const self = this._ref as { deref(): { _onTimer(): void } | undefined };
      const far = this._weakTimers.far;
      far.arm(() => {
        far.timer = undefined;
        self.deref()?._onTimer();
      }, delay, false);
      this._armEpoch = epoch;
      return;
    }
    this._timer.arm(this._onTimer, delay, this._hold);
    // Refused (workerd outside a request): the next call arms it.
    if (this._timer.timer !== undefined) this._armEpoch = epoch;
  }

  /**
   * A shared breaker with no call running or queued, every outcome written and no
   * bulkhead slot or reserve held (found by review: one collected with a reserve
   * kept it from the other workers until `lease_ttl_ms`).
   */
  private _idleShared(): boolean {
    return this._store !== undefined && this._busy === 0 && this._w.fw_quiet(this._h) === 1;
  }

  private _tick(): void {
    this._timer.timer = undefined;
    if (this._shutdown) return;
    if (strays.n !== 0) returnStrays(now());
    // The deadline it was armed for has come, whatever a clock of coarser resolution
    // reads (Node fires timers up to 1 ms early); a timer firing far earlier (a busy
    // event loop, or faked timers the clock does not follow yet: looked for again)
    // acts at the clock's time and re-arms.
    let n = now();
    if (this._due - n > 1) {
      recheck();
      fired(this._firesAt);
      n = now();
    }
    const t = this._due - n <= 1 ? Math.max(n, this._due) : n;
    try {
      if ((this._cached & 1) !== 0 && this._cache === undefined) this._cacheEvents(0, t);
      if ((this._cached & 2) !== 0) this._cacheEvents(1, t);
      this._onTick?.(t);
      if (this._store !== undefined) this._io(this._w.fw_has_io(this._h) === 1 ? F_IO : 0, t);
      this._drain(t);
      if (this._store !== undefined) {
        const more = this._w.fw_has_io(this._h) === 1 ? F_IO : 0;
        if (more !== 0) {
          this._io(more, t);
          this._drain(t);
        }
      }
    } finally {
      // A listener that threw (its error goes on) does not leave the breaker without
      // its timer: later deadlines still fire.
      this._arm(t);
    }
  }

  private _force(phase: Phase): void {
    // Bound to an instance since replaced: `open()` forces the new core; none taken
    // yet (calls of the lost one still run, their deadlines on the timer), nothing to force.
    if (this._w !== served && !this._rebind()) return;
    if (this._shutdown) return;
    this._forces++;
    const t = now();
    if (this._store !== undefined) this._io(this._w.fw_prepare(this._h, 0, t), t);
    const r = this._w.fw_force(this._h, phase, t);
    if (r >= 0) this._after(r | F_REARM, t);
  }

  // ---- construction helpers ------------------------------------------------------------

  private _restore(o: Record<string, unknown>, t: number): void {
    const st = o['state'];
    if (st !== undefined) {
      const s = st as BreakerStateJSON;
      // As opossum: a restored state decides `enabled` (`options.enabled` is not read
      // then; found by review).
      this._enabled = s.enabled !== false;
      const closed = s.closed !== false;
      const half = s.halfOpen === true;
      if (!closed) {
        if (half) {
          this._w.fw_force(this._h, HALF_OPEN, t);
        } else {
          const last = s.lastTimerAt;
          if (typeof last === 'number' && wallNow() - last > this._parsed.resetTimeout) {
            this._w.fw_force(this._h, HALF_OPEN, t);
            // opossum's constructor goes half-open through `_halfOpen()`, which renews
            // an aborted controller (found by review: the probe got an aborted signal).
            // Not for a restored `halfOpen: true` (opossum does not renew there).
            const ac = this._controller();
            if (this.options.autoRenewAbortController === true && ac?.signal.aborted === true) {
              this._renewController();
            }
          } else {
            this._w.fw_force(this._h, OPEN, t);
          }
        }
      }
    }
    const pre = o['status'];
    if (pre !== undefined) {
      // Also a Status of another copy of fusewire (found by review: it primed nothing).
      const stats: Partial<Stats> = pre instanceof Status || kindOf(pre) === 'Status'
        ? (pre as Status).stats : (pre as Partial<Stats>);
      this._prime(stats, t);
      if (this._w.fw_snapshot(this._h, t) === 0) {
        const o = out();
        this._primed = KIND_NAMES.map((_, k) => o[S.CUMULATIVE + k]!);
      }
    }
    // Restored transitions are not announced (no one listens yet); arm the timer.
    while (this._w.fw_poll(this._h, t) > 0) { /* drop */ }
    this._arm(t);
    if (typeof st === 'object' && st !== null && (st as BreakerStateJSON).shutdown === true) {
      this.shutdown();
    }
  }

  private _prime(s: Partial<Stats>, t: number): void {
    const n = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) && v > 0 ? Math.min(Math.floor(v), 0xffff_ffff) : 0);
    const timeouts = n(s.timeouts);
    const sem = n(s.semaphoreRejections);
    const counts: [number, number][] = [
      [K.SUCCESS, n(s.successes)],
      [K.FAILURE, Math.max(0, n(s.failures) - timeouts - sem)],
      [K.TIMEOUT, timeouts],
      [K.SEMAPHORE_REJECTED, sem],
      [K.SHORT_CIRCUITED, n(s.rejects)],
      [K.FALLBACK_SUCCESS, n(s.fallbacks)],
      [K.RESPONSE_FROM_CACHE, n(s.cacheHits)],
      [K.COLLAPSED, n(s.coalesceCacheHits)],
    ];
    for (const [k, v] of counts) if (v > 0) this._w.fw_record(this._h, k, v, t);
    countPerBucket(this, CACHE_MISSES, t, n(s.cacheMisses));
    countPerBucket(this, COALESCE_MISSES, t, n(s.coalesceCacheMisses));
    // Read back as given: `fires` (derived from the outcomes here; opossum counts each
    // fire) and `failures` when fewer than `timeouts` + `semaphoreRejections`.
    const failures = Math.max(n(s.failures), timeouts + sem);
    if (s.failures !== undefined) countPerBucket(this, FAILURES, t, n(s.failures) - failures);
    const derived = n(s.successes) + failures + n(s.rejects) + n(s.cacheHits) + n(s.coalesceCacheHits);
    if (s.fires !== undefined) countPerBucket(this, FIRES, t, n(s.fires) - derived);
  }

  /** @internal Adds the snapshot hooks to the breaker and its status, once each. */
  _hook(): void {
    if (this._shutdown) return;
    for (const em of [this, this._status] as Emitter[]) {
      if (!em.listeners('newListener').includes(this._hooks)) em.on('newListener', this._hooks);
      if (!em.listeners('removeListener').includes(this._unhooks)) em.on('removeListener', this._unhooks);
    }
  }

  /** Runs the snapshot timer while anyone listens for `snapshot` (`adding`: a listener is being added). */
  private _snapshots(adding = false): void {
    const listening = !this._shutdown && (this.options.enableSnapshots !== false) &&
      (adding || this.listenerCount('snapshot') > 0 || this._status.listenerCount('snapshot') > 0);
    const slot = this._weakTimers.snap;
    if (!listening) {
      slot.cancel();
      return;
    }
    if (slot.timer !== undefined) return;
    const every = Math.max(1, Math.floor(this._parsed.rollingCountTimeout / Math.max(1, this._parsed.rollingCountBuckets)));
    // opossum's interval runs from the breaker's creation: a listener added later
    // hears the next tick of that phase, not one a whole interval after it joined;
    // from there every `every` ms (a timer may fire a little early by the clock, so
    // the phase is not read again after a tick). The timer holds the breaker weakly:
    // a dropped one is collected, its listeners with it (opossum's interval keeps it
    // for good; found by a soak review).
    const self = this._ref as { deref(): CircuitBreaker<TI, TR> | undefined };
    const tick = (): void => {
      const b = self.deref();
      if (b === undefined) return;
      slot.timer = undefined;
      if (b._shutdown) return;
      slot.arm(tick, every, false);
      const stats = b.stats;
      b._status.emit('snapshot', stats);
      b._emitOwn('snapshot', stats);
      b._snapshots(); // stops it if no one listens any more
    };
    // Whole milliseconds: a clock continued across sources is fractional, and a
    // hair under the phase must not make the first tick a millisecond late.
    slot.arm(tick, every - (Math.round(now() - this._bornAt) % every), false);
  }

  // ---- cache and coalescing (on the core's request caches) -------------------------------

  /** 0: neither; 1: the cache; 2: coalescing; 3: both. */
  private _cached = 0;
  /** Payloads (the host keeps them; the core indexes them): cache 0 and 1, by entry id. */
  private readonly _payloads: [ById<Promise<unknown>>, ById<Promise<unknown>>] = [new ById(), new ById()];
  /** Each coalescing leader in flight, by key (for `clearCache`, `shutdown`). */
  private readonly _leading = new Map<string, Flight>();
  /** Followers of the coalescing cache waiting for a leader, by caller id (`id`). */
  private readonly _waits = new ById<Waiter>();
  /** Bit `which`: `_cacheEvents(which)` is running (a nested call leaves the events to it). */
  private _polling = 0;

  private _setupCache(o: Record<string, unknown>): void {
    const cache = this._parsed.cache;
    fn('cacheGetKey', o['cacheGetKey']);
    const tr = o['cacheTransport'];
    if (cache && tr !== undefined) {
      const t = tr as CacheTransport<TR>;
      if (typeof tr !== 'object' || tr === null || typeof t.get !== 'function' ||
          typeof t.set !== 'function' || typeof t.flush !== 'function') {
        throw new TypeError('options.cacheTransport should be an object with `get`, `set` and `flush` methods');
      }
      this._cache = t;
    }
    this._cached = (cache ? 1 : 0) | (this._parsed.coalesceJson !== '' ? 2 : 0);
  }

  private _fireCached(context: unknown, args: unknown[], signal: AbortSignal | undefined): Promise<unknown> {
    // The leads taken that no call owns yet (`_protected` takes them over). Locals,
    // not an object: one allocated per call cost a cache hit 4 %.
    let got0 = -1;
    let got1 = -1;
    try {
      // opossum keeps what `cacheGetKey` returns as a Map key: a custom transport gets it
      // as it is; the core's index gets it tagged by type (1 and '1' are two keys).
      const own = this.options.cacheGetKey;
      let raw: unknown;
      if (own !== undefined && own !== defaultKey) raw = own.apply(this, args as TI);
      else {
        try {
          // Without the signal `fireWithSignal` put last: not part of what is asked.
          raw = defaultKey(...(signal === undefined ? args : args.slice(0, -1)));
        } catch (e) {
          // A call whose arguments have no JSON (a cycle, a BigInt): rejected, not
          // thrown (found by review: `fire()` threw).
          return Promise.reject(new TypeError(
            `cacheGetKey: the arguments have no JSON key (${(e instanceof Error ? e.message : String(e)).split('\n')[0]}); pass cacheGetKey`));
        }
      }
      const tr = this._cache;
      let key = '';
      if ((this._cached & 2) !== 0 || tr === undefined) {
        const k = tagged(raw);
        if (k === undefined) {
          return Promise.reject(new TypeError(`cacheGetKey: must return a string, number or JSON value, got ${describe(raw)}`));
        }
        key = k;
      }
      const h = this._h;
      const t = now();
      let lead0 = -1;
      let store: ((v: unknown) => void) | undefined;
      if ((this._cached & 1) !== 0) {
        if (tr !== undefined) {
          // A custom transport (opossum's pluggable cache): it decides hits.
          const cached = tr.get(raw as CacheKey);
          if (cached) {
            // Counted before the event (opossum counts in its own listener, first).
            this._w.fw_record(h, K.RESPONSE_FROM_CACHE, 1, t);
            this._emitOwn('cacheHit');
            return Promise.resolve(cached);
          }
          countPerBucket(this, CACHE_MISSES, t);
          this._told('cacheMiss');
          const ttl = this._parsed.cacheTtl;
          // opossum caches the action's successful result (never a fallback's).
          store = (v) => tr.set(raw as CacheKey, Promise.resolve(v) as Promise<TR>, ttl > 0 ? wallNow() + ttl : 0);
        } else {
          const r = this._w.fw_cache_lookup(h, 0, 0, putKey(key), t);
          const kind = r & KIND_MASK;
          if (kind === 1) {
            const p = this._payloads[0].get(out()[0]!);
            if (p !== undefined) {
              this._w.fw_record(h, K.RESPONSE_FROM_CACHE, 1, t);
              this._emitOwn('cacheHit');
              return p;
            }
          }
          // Read before the event: a listener calling into any breaker reuses `out`.
          // (Without a call where it can be: one can run out of stack.)
          if (kind === 2) got0 = lead0 = (outView.length !== 0 ? outView : out())[0]!;
          // Another call of this key is running (no lead): a success still fills the
          // key, as every success does in opossum (unless one arrived first).
          else if (kind === 4) store = (v) => this._offer(key, v);
          countPerBucket(this, CACHE_MISSES, t);
          this._told('cacheMiss');
        }
      }
      let p: Promise<unknown>;
      if ((this._cached & 2) !== 0) {
        const r = this._w.fw_cache_lookup(h, 1, 0, putKey(key), t);
        const kind = r & KIND_MASK;
        const id = (outView.length !== 0 ? outView : out())[0]!;
        if (kind === 2) got1 = id;
        // A new flight's wait bound (`coalesceTTL` with `timeout: false`) wants a timer.
        if ((r & F_REARM) !== 0) this._arm(t);
        if (kind === 1 && this._payloads[1].has(id)) {
          this._w.fw_record(h, K.COLLAPSED, 1, t);
          this._emitOwn('coalesceCacheHit');
          if (lead0 >= 0) this._settleLead(0, lead0, false, undefined);
          return this._payloads[1].get(id)!;
        }
        if (kind === 3) {
          this._w.fw_record(h, K.COLLAPSED, 1, t);
          this._emitOwn('coalesceCacheHit');
          if (lead0 >= 0) {
            this._settleLead(0, lead0, false, undefined);
            // Should it run its own call after all (its leader went away), its success
            // fills the cache as any success does.
            store = (v) => this._offer(key, v);
          }
          return this._wait(id, context, args, signal, key, store);
        }
        countPerBucket(this, COALESCE_MISSES, t);
        this._told('coalesceCacheMiss');
        const lead1 = got1;
        got0 = got1 = -1; // `_protected`'s from here
        p = lead1 >= 0
          ? this._protected(context, args, signal, lead0, store, lead1, key)
          : this._protected(context, args, signal, lead0, store);
      } else {
        got0 = -1;
        p = this._protected(context, args, signal, lead0, store);
      }
      return p;
    } catch (e) {
      // A `cacheMiss` / `coalesceCacheMiss` listener threw, or the stack ran out, with
      // a lead taken and no call to settle it (found by review: that key's later calls
      // waited on it for good): the leads go back. (One function with the lookups: split
      // in two, V8 inlined less, and a cached fire took 8 % longer.)
      if (got0 >= 0) this._settleLead(0, got0, false, undefined);
      if (got1 >= 0) this._giveUp1(got1, undefined);
      throw e;
    }
  }

  /**
   * A coalescing follower: waits for its key's leader (`_cacheEvents`), or for its own
   * `signal`: aborted, it leaves the flight and rejects with `signal.reason`.
   */
  private _wait(id: number, context: unknown, args: unknown[], signal: AbortSignal | undefined, key: string,
    store: ((v: unknown) => void) | undefined): Promise<unknown> {
    return new Promise((resolve, reject) => {
      const waiter: Waiter = { id, context, args, signal, key, store, resolve, reject, onAbort: undefined };
      if (signal !== undefined) {
        waiter.onAbort = () => {
          if (this._take(id) !== waiter) return;
          // `false` when its wait already ended (an event for it is queued): that event
          // then finds no waiter and is handled as for a follower gone (a lead passes on).
          if (!this._shutdown) this._w.fw_cache_cancel(this._h, 1, id, 0, now());
          reject(signal.reason);
        };
        signal.addEventListener('abort', waiter.onAbort, { once: true });
      }
      this._waits.set(id, waiter);
    });
  }

  /** Takes follower `id` out of `_waits`, unbound from its signal. */
  private _take(id: number): Waiter | undefined {
    const waiter = this._waits.get(id);
    if (waiter === undefined) return undefined;
    this._waits.delete(id);
    if (waiter.onAbort !== undefined) {
      waiter.signal!.removeEventListener('abort', waiter.onAbort);
      waiter.onAbort = undefined;
    }
    return waiter;
  }

  /** A coalescing lead: settles when the leader's promise does (followers share it). */
  private _lead1(lead: number, p: Promise<unknown>, key: string): Flight {
    const reset = this._parsed.coalesceResetOn;
    const flight: Flight = { lead, p, key, gone: false };
    this._leading.set(key, flight);
    p.then(
      // `coalesceResetOn` looks at how the action ended, as opossum's does, not at
      // what the call settled with (found by a differential fuzzer: a failure its
      // fallback answered was kept under 'error' and shared with every caller).
      () => {
        if (this._leading.get(key) === flight) this._leading.delete(key);
        if (flight.gone) return; // its followers lead in its place (`_giveUp1`)
        this._settleLead(1, lead, true, p, reset.includes(flight.ended ?? 'success') ? key : undefined);
      },
      (e: unknown) => {
        if (this._leading.get(key) === flight) this._leading.delete(key);
        if (flight.gone) return;
        const timeout = isOurError(e) && (e as CircuitBreakerError).code === 'ETIMEDOUT';
        this._settleLead(1, lead, false, p, reset.includes(flight.ended ?? (timeout ? 'timeout' : 'error')) ? key : undefined);
      },
    );
    return flight;
  }

  /**
   * A coalescing leader was refused (short-circuited, by the bulkhead) or went away
   * (its signal aborted): its outcome is neither shared nor kept; the core hands the
   * lead to the first follower (`_cacheEvents`: it runs its own call), or ends the
   * flight without followers.
   */
  private _giveUp1(lead: number, flight: Flight | undefined): void {
    if (flight !== undefined) {
      // Let go already (`_detach`, `_rebind`): its lead is not this core's to give.
      if (flight.gone) return;
      flight.gone = true;
      if (this._leading.get(flight.key) === flight) this._leading.delete(flight.key);
    }
    if (this._shutdown) return;
    const t = now();
    this._w.fw_cache_cancel(this._h, 1, lead, 1, t);
    this._cacheEvents(1, t);
  }

  /** A call that bypassed the cache succeeded with `v`: the core decides whether it is kept. */
  private _offer(key: string, v: unknown): void {
    if (this._shutdown) return;
    const t = now();
    const r = this._w.fw_cache_offer(this._h, 0, 0, putKey(key), t);
    if (r < 0) return;
    const p = Promise.resolve(v);
    this._payloads[0].set(out()[0]!, p);
    if ((r & F_REARM) !== 0) this._arm(t);
    this._cacheEvents(0, t);
  }

  /**
   * Fills (ok) or fails a lead of cache `which`, keeping `payload` under the entry;
   * `forget`: the key to drop right after its followers got the result
   * (`coalesceResetOn`).
   */
  private _settleLead(which: number, lead: number, ok: boolean, payload: Promise<unknown> | undefined,
    forget?: string): void {
    if (this._shutdown) return;
    const h = this._h;
    const t = now();
    const r = this._w.fw_cache_settle(h, which, lead, ok ? 1 : 0, t);
    if (r >= 0) {
      const entry = out()[0]!;
      if (entry >= 0 && payload !== undefined) {
        this._payloads[which]!.set(entry, payload);
        payload.catch(() => {}); // followers and later hits handle it
      }
      if ((r & F_REARM) !== 0) this._arm(t);
    }
    this._cacheEvents(which, t);
    if (forget !== undefined) {
      this._w.fw_cache_invalidate(h, which, 0, putKey(forget), t);
      this._cacheEvents(which, t);
    }
  }

  /**
   * `clearCache()` with coalesced calls in flight: the core keeps a flight through
   * `clear`, opossum forgets it. Its followers get its promise now (as opossum's
   * already hold it), then the lead is given up, so the next lookup of the key leads
   * a new call; the old lead's settling is then stale (ignored by the core).
   */
  private _detach(t: number): void {
    const h = this._h;
    for (const waiter of this._waits.values()) {
      const flight = this._leading.get(waiter.key);
      if (flight === undefined) continue;
      this._take(waiter.id);
      this._w.fw_cache_cancel(h, 1, waiter.id, 0, t);
      waiter.resolve(flight.p);
    }
    for (const flight of this._leading.values()) {
      // Its settling is stale: never sent (a core taken since would read its lead as its own).
      flight.gone = true;
      this._w.fw_cache_cancel(h, 1, flight.lead, 1, t);
    }
    this._leading.clear();
  }

  /**
   * A follower runs its own call (its leader went away, or its result is gone); with
   * `lead`, it leads the key's flight now. A listener that throws rejects it (and hands
   * the lead on), not the other followers.
   */
  private _runWaiter(waiter: Waiter, lead: number): Promise<unknown> {
    try {
      return lead >= 0
        ? this._protected(waiter.context, waiter.args, waiter.signal, -1, waiter.store, lead, waiter.key)
        : this._protected(waiter.context, waiter.args, waiter.signal, -1, waiter.store);
    } catch (e) {
      // Never led (or already given up: then this is a no-op); the loop takes the event.
      if (lead >= 0 && !this._shutdown) this._w.fw_cache_cancel(this._h, 1, lead, 1, now());
      return Promise.reject(e);
    }
  }

  /**
   * Takes the events of cache `which`: followers served, promoted, abandoned; entries
   * removed. Not re-entered: a nested call (a promoted follower refused in turn gives
   * its lead to the next one) leaves its events to the loop running, in their order.
   */
  private _cacheEvents(which: number, t: number): void {
    const bit = 1 << which;
    if ((this._polling & bit) !== 0) return;
    this._polling |= bit;
    try {
      this._pollCache(which, t);
    } finally {
      this._polling &= ~bit;
    }
  }

  private _pollCache(which: number, t: number): void {
    const h = this._h;
    for (let guard = 0; guard < 1_000_000; guard++) {
      const ev = this._w.fw_cache_poll(h, which, t);
      if (ev <= 0) return;
      const o = out();
      if (ev === 1) {
        const payload = this._payloads[which]!.get(o[1]!);
        const waiter = this._take(o[0]!);
        if (waiter !== undefined) waiter.resolve(payload ?? this._runWaiter(waiter, -1));
      } else if (ev === 2) {
        const lead = o[0]!;
        const waiter = this._take(lead);
        if (waiter === undefined) {
          // That follower is gone: the next one leads.
          this._w.fw_cache_cancel(h, which, lead, 1, t);
          continue;
        }
        waiter.resolve(this._runWaiter(waiter, lead));
      } else if (ev === 3) {
        const waiter = this._take(o[0]!);
        if (waiter !== undefined) waiter.resolve(this._runWaiter(waiter, -1));
      } else if (ev === 4) {
        this._payloads[which]!.delete(o[0]!);
      }
    }
  }
}

/** The options a breaker reads: opossum's (also those it reads and fusewire ignores) and fusewire's. */
const OPTION_NAMES = new Set(['timeout', 'resetTimeout', 'errorThresholdPercentage', 'rollingCountTimeout',
  'rollingCountBuckets', 'rollingPercentilesEnabled', 'volumeThreshold', 'capacity', 'allowWarmUp', 'errorFilter',
  'enabled', 'name', 'group', 'abortController', 'autoRenewAbortController', 'cache', 'cacheTTL', 'cacheSize',
  'cacheGetKey', 'cacheTransport', 'coalesce', 'coalesceTTL', 'coalesceSize', 'coalesceResetOn', 'coalesceCache',
  'maxFailures', 'enableSnapshots', 'rotateBucketController', 'state', 'status', 'stats', 'fusewire', 'shared']);
/** cockatiel's names for what an option here sets. */
const COCKATIEL = new Map([['halfOpenAfter', 'resetTimeout'], ['breaker', 'fusewire.breaker'],
  ['threshold', 'errorThresholdPercentage'], ['duration', 'rollingCountTimeout'], ['minimumRps', 'volumeThreshold']]);

/**
 * Warns once per name about an option no breaker reads (a typo, another library's
 * name): ignored, as opossum ignores it, but not unseen (found by review: `timout`
 * and cockatiel's `halfOpenAfter` changed nothing without a word).
 */
function unknownOptions(options: Record<string, unknown>): void {
  for (const k in options) {
    if (OPTION_NAMES.has(k) || /^\d+$/.test(k)) continue;
    const lower = k.toLowerCase();
    let like = COCKATIEL.get(k);
    for (const n of OPTION_NAMES) if (like === undefined && near(lower, n.toLowerCase())) like = n;
    warn(`fusewire: options.${k} is not an option of CircuitBreaker and is ignored${like === undefined ? '' : ` (did you mean ${like}?)`}`);
  }
}

/** Whether `a` becomes `b` by one edit: a letter added, dropped, changed or two swapped. */
function near(a: string, b: string): boolean {
  if (a === b) return true;
  if (Math.abs(a.length - b.length) > 1) return false;
  let i = 0;
  while (i < a.length && a[i] === b[i]) i++;
  if (a.length === b.length) {
    return a.slice(i + 1) === b.slice(i + 1) || (a[i] === b[i + 1] && a[i + 1] === b[i] && a.slice(i + 2) === b.slice(i + 2));
  }
  return a.length > b.length ? a.slice(i + 1) === b.slice(i) : a.slice(i) === b.slice(i + 1);
}

/**
 * The options as opossum reads them: `null` means "not given" (opossum uses `??`),
 * except for `cacheTransport`, which opossum checks for `undefined` only.
 */
function opossumView(options: Record<string, unknown>): Record<string, unknown> {
  let o = options;
  for (const k in options) {
    if (options[k] === null && k !== 'cacheTransport') {
      if (o === options) o = { ...options };
      delete o[k];
    }
  }
  return o;
}

/** Sets `o[k]` to `v` unless the caller set it (a frozen options object is left alone). */
function fill(o: Record<string, unknown>, k: string, v: unknown): void {
  if (o[k] !== undefined && o[k] !== null) return;
  try {
    o[k] = v;
  } catch {
    // Frozen or sealed options: nothing to write back.
  }
}

/**
 * An event emitted from outside the breaker, as opossum's listeners count it: the core
 * event kind recorded (-1: none), the column kept beside the core (`CACHE_MISSES`,
 * `COALESCE_MISSES`; -1: none), then what to take back from `fires` and `failures`,
 * which the core derives from the kinds (opossum counts a `fire` only when one is
 * emitted, and a `timeout` or `semaphoreLocked` is not a `failure` until that is
 * emitted too).
 */
const EMITTED = new Map<string, readonly [number, number, number, number]>([
  ['success', [K.SUCCESS, -1, -1, 0]],
  ['failure', [K.FAILURE, -1, -1, 0]],
  ['fallback', [K.FALLBACK_SUCCESS, -1, 0, 0]],
  ['timeout', [K.TIMEOUT, -1, -1, -1]],
  ['fire', [-1, -1, 1, 0]],
  ['reject', [K.SHORT_CIRCUITED, -1, -1, 0]],
  ['cacheHit', [K.RESPONSE_FROM_CACHE, -1, -1, 0]],
  ['cacheMiss', [-1, CACHE_MISSES, 0, 0]],
  ['coalesceCacheHit', [K.COLLAPSED, -1, -1, 0]],
  ['coalesceCacheMiss', [-1, COALESCE_MISSES, 0, 0]],
  ['semaphoreLocked', [K.SEMAPHORE_REJECTED, -1, -1, -1]],
]);
/** opossum's `eventNames()` of a new breaker, in its order. */
const EMITTED_NAMES = ['success', 'failure', 'fallback', 'timeout', 'fire', 'reject', 'cacheHit', 'cacheMiss',
  'coalesceCacheHit', 'coalesceCacheMiss', 'open', 'close', 'semaphoreLocked'];

brand(CircuitBreaker, 'CircuitBreaker');

/** The class's own `call` (`fire` goes through an override of it). */
const ownCall = CircuitBreaker.prototype.call;

function defaultKey(...args: unknown[]): string {
  return JSON.stringify(args);
}

/** The events of an emitter itself (Node's `EventEmitter`). */
export interface EmitterEvents {
  newListener: (event: string | symbol, listener: Listener) => void;
  removeListener: (event: string | symbol, listener: Listener) => void;
}

/** The events a breaker's listeners may name. */
export type BreakerEventMap<TI extends unknown[] = unknown[], TR = unknown> = CircuitBreakerEvents<TI, TR> & EmitterEvents;

/**
 * Typed events (overloads merged into the class), as `@types/opossum` types them: `on`
 * takes an event's name and a listener of its arguments only, so `on('opne', …)` or a
 * `success` listener of another result type does not compile (found by review: a
 * catch-all overload let both through); `once`, `off` and the rest check a known
 * name's listener and, as the `EventEmitter` methods opossum's types inherit, take any
 * other name too.
 */
export interface CircuitBreaker<TI extends unknown[] = unknown[], TR = unknown> {
  on<E extends keyof BreakerEventMap<TI, TR>>(event: E, listener: BreakerEventMap<TI, TR>[E]): this;
  once<E extends keyof BreakerEventMap<TI, TR>>(event: E, listener: BreakerEventMap<TI, TR>[E]): this;
  once(event: string | symbol, listener: Listener): this;
  addListener<E extends keyof BreakerEventMap<TI, TR>>(event: E, listener: BreakerEventMap<TI, TR>[E]): this;
  addListener(event: string | symbol, listener: Listener): this;
  prependListener<E extends keyof BreakerEventMap<TI, TR>>(event: E, listener: BreakerEventMap<TI, TR>[E]): this;
  prependListener(event: string | symbol, listener: Listener): this;
  prependOnceListener<E extends keyof BreakerEventMap<TI, TR>>(event: E, listener: BreakerEventMap<TI, TR>[E]): this;
  prependOnceListener(event: string | symbol, listener: Listener): this;
  off<E extends keyof BreakerEventMap<TI, TR>>(event: E, listener: BreakerEventMap<TI, TR>[E]): this;
  off(event: string | symbol, listener: Listener): this;
  removeListener<E extends keyof BreakerEventMap<TI, TR>>(event: E, listener: BreakerEventMap<TI, TR>[E]): this;
  removeListener(event: string | symbol, listener: Listener): this;
  emit<E extends keyof CircuitBreakerEvents<TI, TR>>(event: E, ...args: Parameters<CircuitBreakerEvents<TI, TR>[E]>): boolean;
  emit(event: string | symbol, ...args: unknown[]): boolean;
}

export { ready };
