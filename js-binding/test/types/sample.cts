// tsc --noEmit: a CommonJS consumer (import = require).
import CircuitBreaker = require('fusewire');

const b = new CircuitBreaker(async (x: number) => x * 2, { timeout: 100 });
const p: Promise<number> = b.fire(2);
const o: CircuitBreaker.Options = { resetTimeout: 10 };
const s: CircuitBreaker.Stats = b.stats;
const store: CircuitBreaker.SharedStore = new CircuitBreaker.SharedStore();
const ready: Promise<void> = CircuitBreaker.ready;
const ours: boolean = CircuitBreaker.isOurError(null);
void [p, o, s, store, ready, ours];
