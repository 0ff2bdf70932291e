// tsc --noEmit: a CommonJS consumer (a .cts file under NodeNext, so index.d.cts) using
// named and default imports. These crashed tsc ("Debug Failure.") when the default
// export was a const whose namespace had type aliases named as its values (found by review).
import CircuitBreaker, {
  CircuitBreaker as Named, Collapser, PERCENTILES, SharedStore, Status, isOurError, ready, version,
  type BreakerMode, type CollapserOptions, type Options, type SharedStoreOptions, type Stats,
} from 'fusewire';
import * as all from 'fusewire';
import Required = require('fusewire');

const b = new CircuitBreaker(async (x: number) => x * 2, { timeout: 100 });
const p: Promise<number> = b.fire(2);
const asNamed: Named<[number], number> = b;
const fromNamed: CircuitBreaker<[number], number> = new Named(async (x: number) => x);
const fromRequired: Required<[number], number> = new Required(async (x: number) => x);
const sameClass: typeof CircuitBreaker = CircuitBreaker.default && all.default && all.CircuitBreaker && Required.CircuitBreaker;
// Values: named, as properties of the default export and of the namespace import.
const storeOptions: SharedStoreOptions = { entries: 8 };
const store: SharedStore = new SharedStore(storeOptions);
const viaDefault: CircuitBreaker.SharedStore = CircuitBreaker.SharedStore.from(store.buffer);
const viaAll: all.SharedStore = new all.SharedStore();
const viaRequired: Required.SharedStore = new Required.SharedStore();
const status: Status = b.status;
const primed: CircuitBreaker.Status = CircuitBreaker.newStatus({ stats: { fires: 1 } });
const statusClass: typeof Status = CircuitBreaker.Status;
const loader = new Collapser(async (keys: number[]) => keys.map(String), { windowMs: 5 } satisfies CollapserOptions<number, string>);
const typedLoader: CircuitBreaker.Collapser<number, string> = loader;
const ours: boolean = isOurError(null) && CircuitBreaker.isOurError(null) && all.isOurError(null) && Required.isOurError(null);
const loaded: Promise<void> = ready;
const v: string = version + CircuitBreaker.version;
const p99: number = PERCENTILES[6] + CircuitBreaker.PERCENTILES[0];
// Types: named, and as CircuitBreaker.X.
const o: Options = { timeout: 1 };
const o2: CircuitBreaker.Options<[number], number> = { timeout: 1, errorFilter: (e: unknown, n: number) => n > 0 };
const s: Stats = b.stats;
const s2: CircuitBreaker.Stats = s;
const mode: BreakerMode & CircuitBreaker.BreakerMode = 'normal';
b.on('timeout', (err, ms, args) => { const first: number = args[0]; void [err, ms, first]; });
// @ts-expect-error: fire's arguments are typed
b.fire('x');
// @ts-expect-error: SharedStore.from takes the store's buffer, not the store
SharedStore.from(store);
void [p, asNamed, fromNamed, fromRequired, sameClass, viaDefault, viaAll, viaRequired, status, primed, statusClass,
  typedLoader, ours, loaded, v, p99, o, o2, s2, mode];
b.shutdown();
loader.shutdown();
