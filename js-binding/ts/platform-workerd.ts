/**
 * Edge runtimes that load a `.wasm` as a module (Cloudflare Workers / workerd, the
 * `workerd` export condition): they forbid compiling WebAssembly from bytes and
 * fetching at load, so the bundler (wrangler) turns `import … from './fusewire.wasm'`
 * into a compiled `WebAssembly.Module`, instantiated here at once: `ready` is
 * resolved (found by review: the browser build could not load there at all).
 * @internal
 */
import wasm from './fusewire.wasm';
import { instantiate } from './engine.js';

export { EventEmitter, listening } from './browser-emitter.js';

export const platform = 'workerd';

/**
 * Whether a timer dies with the request that set it: yes in workerd (a breaker's one
 * timer, set in one request, never fired for a call of the next: each call with a
 * deadline sets its own too).
 */
export const REQUEST_TIMERS = true;

instantiate(wasm);

/** Resolved: the module is instantiated at load. */
export const ready: Promise<void> = Promise.resolve();
