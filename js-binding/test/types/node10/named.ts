// tsc --noEmit with `moduleResolution: "node"` (node10), `module: "commonjs"`: named
// imports (values and types), the default import and CircuitBreaker.X. Named value
// imports crashed tsc ("Debug Failure."; found by review). Also compiled without
// esModuleInterop (tsconfig.nointerop.json): the default import is require('fusewire').default.
import CircuitBreaker, { CircuitBreaker as Named, Collapser, SharedStore, Status, isOurError, ready, version } from 'fusewire';
import type { Options, SharedStore as StoreType, Stats } from 'fusewire';
import * as all from 'fusewire';
import Required = require('fusewire');

const b = new CircuitBreaker(async (id: number) => ({ id }), { timeout: 1000 });
const r: Promise<{ id: number }> = b.fire(1);
const n: Named<[number], { id: number }> = b;
const store: StoreType = new SharedStore({ entries: 4 });
const view: CircuitBreaker.SharedStore = CircuitBreaker.SharedStore.from(store.buffer);
const view2: all.SharedStore = new all.SharedStore();
const req = new Required(async () => 1);
const reqStore: Required.SharedStore = new Required.SharedStore();
const status: Status = CircuitBreaker.newStatus();
const status2: CircuitBreaker.Status = status;
const loader: CircuitBreaker.Collapser<number, string> = new Collapser(async (k: number[]) => k.map(String));
const o: Options & CircuitBreaker.Options = { resetTimeout: 10 };
const s: Stats & CircuitBreaker.Stats = b.stats;
const ok: boolean = isOurError(null) && CircuitBreaker.isOurError(null) && all.isOurError(null);
const loaded: Promise<void> = ready;
const v: string = version;
// @ts-expect-error: fire's arguments are typed
b.fire('1');
void [r, n, view, view2, req, reqStore, status2, loader, o, s, ok, loaded, v];
