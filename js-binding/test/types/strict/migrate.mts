// A Node project typed as strictly as TypeScript allows, without the DOM lib
// (`lib: ["ES2022"]`, `@types/node`, `exactOptionalPropertyTypes`, `skipLibCheck:
// false`), written as `@types/opossum` users write it. Checked with the TypeScript
// the package builds with and with TypeScript 4.9, the oldest the README names.
import CircuitBreaker, { Collapser, SharedStore } from 'fusewire';
import { once } from 'node:events';

interface User { id: string; name: string }
const getUser = async (id: string): Promise<User> => ({ id, name: 'n' });

// A cache transport never decides the result type: the action does (found by review:
// one passed inline made `fire()` resolve to `unknown`, or to `any`).
const cache: CircuitBreaker.MemoryCache = { get: () => undefined, set: () => {}, flush: () => {} };
const viaMemoryCache = new CircuitBreaker(getUser, { cache: true, cacheTransport: cache });
class AnyCache {
  get(k: string): any { return k; } // eslint-disable-line @typescript-eslint/no-explicit-any
  set(k: string, v: unknown, t: number): void { void k; void v; void t; }
  flush(): void {}
}
const viaAnyCache = new CircuitBreaker(getUser, { cache: true, cacheTransport: new AnyCache() });
class MapCache implements CircuitBreaker.CacheTransport {
  private m = new Map<unknown, unknown>();
  get(key: unknown): unknown { return this.m.get(key); }
  set(key: unknown, value: unknown): void { this.m.set(key, value); }
  flush(): void { this.m.clear(); }
}
const explicit = new CircuitBreaker<[string], User>(async (id) => ({ id, name: 'x' }), { cacheTransport: new MapCache() });
export async function names(): Promise<string[]> {
  const a = await viaMemoryCache.fire('1');
  const b = await viaAnyCache.fire('1');
  // @ts-expect-error: `b` is a User, not `any`
  const n: number = b;
  void n;
  return [a.name, b.name, (await explicit.fire('2')).name];
}

// Options may hold `undefined` (a config value that is not set), as in @types/opossum.
const fromEnv: number | undefined = process.env['TIMEOUT'] === undefined ? undefined : Number(process.env['TIMEOUT']);
const options: CircuitBreaker.Options = { timeout: fromEnv, name: undefined, errorFilter: undefined, cacheGetKey: undefined };
const withOptions = new CircuitBreaker(getUser, options);
void new Collapser(async (ids: readonly string[]) => ids.map((id) => ({ id, name: id })), { windowMs: undefined, breaker: undefined });
// A batch function may take a per-batch signal.
void new Collapser(async (ids: readonly string[], _ctx: unknown, signal: AbortSignal) => {
  signal.throwIfAborted();
  return ids.map((id) => ({ id, name: id }));
});
// So may the core's schema, shared state's options and newStatus's (found by review).
const mode: 'normal' | undefined = process.env['MODE'] === undefined ? undefined : 'normal';
void new CircuitBreaker(getUser, {
  fusewire: { breaker: { mode, open: { max_ms: fromEnv } }, metrics: undefined },
  shared: { store: new SharedStore(), flush_ms: fromEnv, sync_ms: undefined },
  status: CircuitBreaker.newStatus({ rollingCountBuckets: fromEnv, stats: undefined }),
});

// Listeners are checked against the event's arguments.
const s = new CircuitBreaker(async (x: number) => String(x));
s.on('success', (result: string, latencyMs: number) => { void result; void latencyMs; });
s.on('failure', (err: Error, latencyMs: number, args: [number]) => { void err; void latencyMs; void args; });
s.once('newListener', (event, listener) => { void event; void listener; });
// @ts-expect-error: a misspelt event
s.on('opne', () => {});
// @ts-expect-error: the result is a string
s.on('success', (result: number) => { void result; });
// @ts-expect-error: the latency is a number
s.on('failure', (err: Error, latencyMs: string) => { void err; void latencyMs; });
// @ts-expect-error: the arguments are [number]
s.on('fire', (args: [string]) => { void args; });
s.emit('anything', 1);
// As with @types/opossum, the other listener methods take any name too.
for (const name of ['open', 'close'] as string[]) {
  const h = (): void => {};
  s.once(name, h);
  s.addListener(name, h);
  s.removeListener(name, h);
  s.off(name, h);
}
s.healthCheck(async () => {}, process.env['HEALTH_MS']);

// A breaker of any action is still a CircuitBreaker, and an EventEmitter to node:events.
const anyBreaker: CircuitBreaker = withOptions;
export async function opened(): Promise<void> { await once(anyBreaker, 'open'); }
