// tsc --noEmit over the whole public API (ESM consumer).
import CircuitBreaker, {
  CircuitBreaker as Named, Collapser, RequestLoader, SharedStore, Status, isOurError, ready, load, version,
  type CacheKey, type CacheTransport, type CircuitBreakerError, type CollapserOptions, type CoreCacheConfig, type CoreCollapserConfig, type CoreConfig,
  type Options, type Refusal, type Stats, type TransitionReason, type WasmSource,
} from 'fusewire';
import { register, metricName } from 'fusewire/prometheus';
import * as client from 'prom-client';

await ready;
const options: Options<[string, number], { id: string }> = {
  timeout: 3000,
  resetTimeout: 30_000,
  errorThresholdPercentage: 50,
  rollingCountTimeout: 10_000,
  rollingCountBuckets: 10,
  rollingPercentilesEnabled: true,
  volumeThreshold: 5,
  capacity: 10,
  allowWarmUp: false,
  errorFilter: (err: { status?: number }, id: string, n: number) => err.status === 404 && id.length > n,
  enabled: true,
  name: 'users',
  group: 'api',
  abortController: new AbortController(),
  autoRenewAbortController: true,
  cache: false,
  cacheTTL: 0,
  cacheSize: 100,
  cacheGetKey: (id: string, n: number) => `${id}:${n}`,
  coalesce: false,
  coalesceTTL: 1000,
  coalesceSize: 100,
  coalesceResetOn: ['error', 'timeout'],
  enableSnapshots: true,
  state: { closed: true },
  status: { successes: 1 },
  fusewire: {
    breaker: {
      half_open: { permitted_probes: 3, success_threshold: 2 },
      open: { schedule: 'exponential', multiplier: 2, max_ms: 60_000, jitter_percentage: 10 },
      slow_start: { ramp_ms: 5000 },
      consecutive_failures: { enabled: true, threshold: 5 },
    },
    bulkhead: { isolation: 'pool', max_concurrent: 4, max_queue: 8, max_wait_ms: 500 },
  } satisfies CoreConfig,
};
const b = new CircuitBreaker(async (id: string, n: number) => ({ id: id.repeat(n) }), options);
const r: { id: string } = await b.fire('x', 2);
const r2: { id: string } = await b.call({}, 'y', 1);
const r3: { id: string } = await b.fireWithSignal(new AbortController().signal, 'z', 1);
b.fallback((id: string, n: number, err: Error) => ({ id: `${id}${n}${err.message}` }));
b.fallback(new Named(async () => ({ id: 'other' })));
b.fallback(null).fallback(undefined); // removes it, as in opossum
// cacheGetKey may return any key, not only a string: keys are told apart by type.
const byNumber = new CircuitBreaker(async (id: number) => id * 2, { cache: true, cacheGetKey: (id: number) => id });
const byObject = new CircuitBreaker(async (id: string, n: number) => id.repeat(n),
  { coalesce: true, cacheGetKey: (id: string, n: number) => ({ id, n }) });
const keys: CacheKey[] = ['k', 1, 1n, true, null, undefined, { id: 'k' }, [1, 2]];
// A transport written for opossum's string keys still fits.
const strings: CacheTransport<number> = {
  get(key: string) {
    return key.length;
  },
  set(_key: string, _value: unknown, _expiresAt: number) {},
  flush() {},
};
new CircuitBreaker(async (id: number) => id, { cache: true, cacheTransport: strings, cacheGetKey: (id: number) => `${id}` }).shutdown();
byNumber.shutdown();
byObject.shutdown();
void keys;
b.on('success', (result: { id: string }, latency: number) => void [result.id, latency]);
b.on('failure', (err: unknown, latency: number, args: [string, number]) => void [err, latency, args[0]]);
// The breaker's ETIMEDOUT, or a fireWithSignal signal's TimeoutError (a DOMException).
b.on('timeout', (err: Error, latency: number) => void [err.name, latency]);
b.on('timeout', (err) => void (isOurError(err) ? err.code : err.code + 1));
b.on('reject', (err: CircuitBreakerError) => {
  const why: Refusal | undefined = err.refusal;
  void [err.code, (err.retryAfter ?? 0) + 1, why];
});
b.on('halfOpen', (resetTimeout: number) => void resetTimeout);
b.on('open', (reason: TransitionReason) => void reason);
b.on('close', () => undefined);
b.on('semaphoreLocked', (err: CircuitBreakerError) => void err);
b.on('fire', (args: [string, number]) => void args);
b.on('snapshot', (s: Stats) => void s.fires);
b.on('store', (i) => void i.issue);
for (const e of ['open', 'close', 'fallback', 'cacheHit', 'cacheMiss', 'coalesceCacheHit',
  'coalesceCacheMiss', 'healthCheckFailed', 'shutdown'] as const) b.on(e, () => {});
const flags: boolean[] = [b.opened, b.closed, b.halfOpen, b.pendingClose, b.enabled, b.warmUp, b.isShutdown];
const s: Stats = b.stats;
const st: Status = b.status;
const n: number = s.fires + s.failures + s.successes + s.rejects + s.timeouts + s.fallbacks + s.cacheHits +
  s.cacheMisses + s.coalesceCacheHits + s.coalesceCacheMisses + s.semaphoreRejections + s.latencyMean +
  (s.percentiles[0.5] ?? 0) + b.volumeThreshold + st.window.length;
const j = b.toJSON();
const restored = new CircuitBreaker(async () => 1, { state: j.state });
b.open();
b.close();
b.disable();
b.enable();
b.clearCache();
const landed: Promise<boolean> = b.flush();
void landed;
const loading: Promise<void> = load();
void loading;
const src: WasmSource = new Uint8Array(0);
void src;
b.healthCheck(async () => {}, 1000);
const sig: AbortSignal | undefined = b.getSignal();
const ac: AbortController | undefined = b.getAbortController();
const ours: boolean = CircuitBreaker.isOurError(new Error()) || isOurError(null);
// Both are type guards: the error's `code` is known after the check.
const caught: unknown = new Error();
if (CircuitBreaker.isOurError(caught)) {
  const code: 'EOPENBREAKER' | 'ETIMEDOUT' | 'ESEMLOCKED' | 'ESHUTDOWN' = caught.code;
  void code;
}
if (isOurError(caught)) void caught.code;
const fresh: Status = CircuitBreaker.newStatus({ stats: { successes: 2 } });
// @ts-expect-error: a Status is made by a breaker (its constructor is private)
new Status();
const store = new SharedStore({ entries: 16, ttlMs: 3_600_000 });
const shared = new CircuitBreaker(async () => 1, { name: 'x', shared: { store, namespace: 'app' } });
const view: SharedStore = SharedStore.from(store.buffer);
const unregister: () => void = register({ client, prefix: 'app', labels: true });
const unregister2: () => void = register({ client, registers: [new client.Registry()] });
// @ts-expect-error: the prom-client module, not any object
register({ client: { register: client.register } });
const name: string = metricName('a', 'b', 'c') + b.name + b.group + version;
// DataLoader 2.2.3's types: a third type parameter, what cacheKeyFn returns (default: the key's type).
const copts: CollapserOptions<number, string, string> = { windowMs: 5, maxBatchSize: 50, cache: true, cacheSize: 100,
  cacheKeyFn: (k: number) => String(k), breaker: { timeout: 1000, fusewire: { bulkhead: { max_concurrent: 2 } } }, name: 'users' };
const loader = new Collapser<number, string, string>(async (keys: number[]) => keys.map(String), copts);
const byObj = new Collapser(async (keys: { id: number }[]) => keys.map((k) => k.id), { cacheKeyFn: (k) => k.id });
const inferred: Collapser<{ id: number }, number, number> = byObj;
const plain: Collapser<number, string> = new Collapser(async (keys: number[]) => keys.map(String), { cacheKeyFn: (k: number) => k + 1 });
// @ts-expect-error: cacheKeyFn returns C (here string), as DataLoader's
new Collapser<number, string, string>(async (keys: number[]) => keys.map(String), { cacheKeyFn: (k: number) => k });
// @ts-expect-error: with two type arguments C is K, as DataLoader's
const twoArgs: CollapserOptions<number, string> = { cacheKeyFn: (k: number) => String(k) };
const one: string = await loader.load(1);
const many: (string | Error)[] = await loader.loadMany([1, 2]);
const loaderName: string | null = loader.name;
loader.clear(1).clearAll().prime(3, 'three').prime(4, new Error('no')).prime(5, Promise.resolve('five'));
// @ts-expect-error: a promise of V only
loader.prime(6, Promise.resolve(6));
loader.breaker.fallback((keys: number[]) => keys.map(() => 'fallback'));
// Request loaders: the batch function's second argument is the request's context.
const perRequest = new Collapser(async (keys: number[], ctx: { user: string } | undefined) => keys.map((k) => `${ctx?.user}:${k}`), { windowMs: 0 });
const req: RequestLoader<number, string, { user: string }> = perRequest.forRequest({ user: 'ann' });
const mine: string = await req.load(1);
const mineMany: (string | Error)[] = await req.loadMany([1, 2]);
req.clear(1).clearAll().prime(2, 'two');
const ctxBack: { user: string } = req.context;
const sameBreaker: boolean = req.breaker === perRequest.breaker && req.collapser === perRequest;
// @ts-expect-error: the context's type
perRequest.forRequest({ user: 1 });
// @ts-expect-error: a context is required where its type does not take undefined
perRequest.forRequest();
// `this` is the loader; the fallback finds the request of a batch with loaderOf.
const withThis = new Collapser<number, string, number, { user: string }>(async function (keys) {
  const who: string = this instanceof RequestLoader ? this.context.user : 'itself';
  return keys.map((k) => `${who}:${k}`);
});
withThis.breaker.fallback((keys: number[]) => {
  const from = withThis.loaderOf(keys);
  const who: string = from instanceof RequestLoader ? from.context.user : 'itself';
  return keys.map(() => who);
});
const untyped = new Collapser(async (keys: number[]) => keys.map(String));
const anyContext = untyped.forRequest();
req.shutdown();
anyContext.shutdown();
perRequest.shutdown();
withThis.shutdown();
untyped.shutdown();
void [mine, mineMany, ctxBack, sameBreaker];
loader.shutdown();
byObj.shutdown();
plain.shutdown();
void [inferred, twoArgs];
void [r, r2, r3, flags, n, restored, sig, ac, ours, fresh, shared, view, unregister, unregister2, name, one, many, loaderName];
b.shutdown();
// @ts-expect-error: fire's arguments are typed
b.fire(1, 2);
// @ts-expect-error: unknown options are errors
new CircuitBreaker(async () => 1, { timeoutt: 5 });
// @ts-expect-error: the core schema is typed
new CircuitBreaker(async () => 1, { fusewire: { breaker: { mode: 'sideways' } } });

// The action alone decides the types: options typed `Options` (no type arguments) do
// not turn the result into `unknown`.
interface User { id: number; name: string }
async function getUser(id: number): Promise<User> {
  return { id, name: `u${id}` };
}
const plainOptions: Options = { timeout: 1000, errorThresholdPercentage: 50, resetTimeout: 30_000 };
const users = new CircuitBreaker(getUser, plainOptions);
const user: User = await users.fire(1);
// @ts-expect-error: still typed by the action
users.fire('1');
// The default import is also a namespace of the types, as in CommonJS (and @types/opossum).
const nsOptions: CircuitBreaker.Options = { timeout: 1000 };
const typed: CircuitBreaker<[number], User> = new CircuitBreaker(getUser, nsOptions);
const nsStats: CircuitBreaker.Stats = typed.stats;
const nsState: CircuitBreaker.State = typed.toJSON().state;
const nsStatus: CircuitBreaker.StatusOptions = { stats: nsStats, enableSnapshots: false };
// errorFilter may return any value: a truthy one filters, as in opossum.
new CircuitBreaker(getUser, {
  errorFilter: (err: { response?: { status: number } }) => err.response && err.response.status < 500 && err.response,
  capacity: Infinity,
}).shutdown();
// fireWithSignal: the signal the breaker appends is not one of the caller's arguments.
const fetcher = new CircuitBreaker(async (url: string, signal: AbortSignal) => ({ url, aborted: signal.aborted }));
const fetched: { url: string; aborted: boolean } = await fetcher.fireWithSignal(new AbortController().signal, 'https://x');
// @ts-expect-error: the url is still required
fetcher.fireWithSignal(new AbortController().signal);
// @ts-expect-error: nor may the caller pass a signal of its own in the action's place
fetcher.fireWithSignal(new AbortController().signal, 'https://x', new AbortController().signal);
const optional = new CircuitBreaker(async (url: string, signal?: AbortSignal) => url + String(signal?.aborted));
const viaOptional: string = await optional.fireWithSignal(new AbortController().signal, 'https://x');
// A last parameter that merely accepts a signal (`object`, `EventTarget`) is the
// caller's: it is kept (found by review: it was dropped).
const withOpts = new CircuitBreaker(async (url: string, opts: object) => url + Object.keys(opts).length);
const viaOpts: string = await withOpts.fireWithSignal(new AbortController().signal, 'https://x', {});
// @ts-expect-error: `opts` is required
withOpts.fireWithSignal(new AbortController().signal, 'https://x');
void viaOpts;
// healthCheck takes a function returning a plain value too (or a promise).
users.healthCheck(() => true, 1000);
users.healthCheck(async function () {
  await this.fire(1);
});
const nsCache: CircuitBreaker.MemoryCache<number> = { get: () => 1, set: () => {}, flush: () => {} };
// The cache and collapser sections are typed field by field (found by review: any object passed).
const cacheSection: CoreCacheConfig = { max_entries: 100, ttl_ms: 1000, on_leader_failure: 'promote' };
// @ts-expect-error: a count is a number
const badCache: CoreCacheConfig = { max_entries: 'lots' };
// @ts-expect-error: not one of the core's leader-failure rules
const badRule: CoreConfig = { cache: { on_leader_failure: 'retry' } };
// @ts-expect-error: not a field of the core's collapser
const badCollapser: CoreCollapserConfig = { window: 10 };
void [cacheSection, badCache, badRule, badCollapser];
void [user, nsStats, nsState, nsStatus, fetched, viaOptional, nsCache];
users.shutdown();
typed.shutdown();
fetcher.shutdown();
optional.shutdown();
