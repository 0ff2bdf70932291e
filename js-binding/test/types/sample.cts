// tsc --noEmit: a CommonJS consumer (import = require).
import CircuitBreaker = require('fusewire');
import client = require('prom-client');
import prometheus = require('fusewire/prometheus');

const b = new CircuitBreaker(async (x: number) => x * 2, { timeout: 100 });
const p: Promise<number> = b.fire(2);
const o: CircuitBreaker.Options = { resetTimeout: 10 };
const s: CircuitBreaker.Stats = b.stats;
const store: CircuitBreaker.SharedStore = new CircuitBreaker.SharedStore();
const ready: Promise<void> = CircuitBreaker.ready;
const ours: boolean = CircuitBreaker.isOurError(null);
const unregister: () => void = prometheus.register({ client });
// Options without type arguments leave the action's types alone.
const fromOptions: Promise<number> = new CircuitBreaker(async (x: number) => x * 3, o).fire(1);
// @types/opossum code: a variable of the bare type holds a breaker of any action (the
// callbacks of the call's arguments are checked bivariantly), `Window`, `maxFailures`.
let any: CircuitBreaker = b;
any = new CircuitBreaker(async (path: string, enc?: 'utf8') => path + enc, {
  errorFilter: (e, path) => path === '', cacheGetKey: (path) => path,
});
const w: CircuitBreaker.Window = any.status.window;
const deprecated: CircuitBreaker.Options = { maxFailures: 5 };
// @types/opossum's names for the saved state and newStatus's options.
const state: CircuitBreaker.State = b.toJSON().state;
const statusOptions: CircuitBreaker.StatusOptions = { stats: { fires: 1 }, rollingCountBuckets: 10 };
const primed: CircuitBreaker.Status = CircuitBreaker.newStatus(statusOptions);
// @types/opossum's MemoryCache: the cache transport interface.
const transport: CircuitBreaker.MemoryCache = { get: (k) => void k, set: () => {}, flush: () => {} };
const cached = new CircuitBreaker(async (x: number) => x, { cache: true, cacheTransport: transport });
void [p, o, s, store, ready, ours, unregister, fromOptions, w, deprecated, state, primed, cached];
