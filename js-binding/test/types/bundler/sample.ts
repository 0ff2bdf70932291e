// tsc --noEmit with `moduleResolution: "bundler"` (Vite, esbuild, webpack projects):
// index.d.mts through the exports map's default condition, no @types/node.
import CircuitBreaker, { CircuitBreaker as Named, Collapser, SharedStore, Status, isOurError, ready } from 'fusewire';
import type { Options, Stats } from 'fusewire';

await ready;
const b = new CircuitBreaker((url: string) => fetch(url).then((r) => r.json() as Promise<{ a: number }>), { timeout: 1000 });
const v: Promise<{ a: number }> = b.fire('/api');
const n: Named<[string], { a: number }> = b;
const back: CircuitBreaker<[string], { a: number }> = n;
const o: Options & CircuitBreaker.Options = { resetTimeout: 10 };
const s: Stats & CircuitBreaker.Stats = b.stats;
const status: Status & CircuitBreaker.Status = CircuitBreaker.newStatus();
const store: CircuitBreaker.SharedStore = new SharedStore({ entries: 4 });
const loader: CircuitBreaker.Collapser<number, string> = new Collapser(async (k: number[]) => k.map(String));
const ours: boolean = isOurError(null) && CircuitBreaker.isOurError(null);
// @ts-expect-error: in the browser build the default export is the bare class (use the named SharedStore)
void CircuitBreaker.SharedStore;
void [v, back, o, s, status, store, loader, ours];
