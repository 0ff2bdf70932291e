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
void [p, o, s, store, ready, ours, unregister, fromOptions];
