// tsc --noEmit with `moduleResolution: "node"` (node10), which reads no `exports`: the
// subpaths resolve through package.json's `typesVersions`.
import CircuitBreaker from 'fusewire';
import * as client from 'prom-client';
import { register } from 'fusewire/prometheus';
import { RedisStore } from 'fusewire/redis';

const b = new CircuitBreaker(async (id: number) => ({ id }), { timeout: 1000 });
const r: Promise<{ id: number }> = b.fire(1);
const o: CircuitBreaker.Options = { resetTimeout: 10 };
const unregister: () => void = register({ client });
const store: typeof RedisStore = RedisStore;
void [r, o, unregister, store];
