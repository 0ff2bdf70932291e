/**
 * Edge runtimes that load a `.wasm` as a module (Cloudflare Workers / workerd, the
 * `workerd` condition; Next.js's Edge runtime and Vercel Edge, the `edge-light`
 * condition): they forbid compiling WebAssembly from bytes and fetching at load, so
 * their bundler turns the entry's `.wasm` import into a compiled
 * `WebAssembly.Module`, which the entry hands to [`load`] before any code of the
 * app runs: `ready` is resolved by then (found by review: the browser build could
 * not load there at all). One build (`dist/edge.js`) serves both entries, which
 * differ only in how they spell that import.
 * @internal
 */
import { instantiate, loaded as isLoaded } from './engine.js';
import type { WasmSource } from './platform.js';

export type { WasmSource } from './platform.js';

export { EventEmitter, listening } from './browser-emitter.js';

export const platform = 'edge';

/**
 * Whether a timer dies with the request that set it: yes in workerd (a breaker's one
 * timer, set in one request, never fired for a call of the next: each call with a
 * deadline sets its own too).
 */
export const REQUEST_TIMERS = true;

let loaded: () => void = () => {};

/** Resolved once the entry has handed over the module (before the app's code runs). */
export const ready: Promise<void> = new Promise((resolve) => {
  loaded = resolve;
});

/**
 * Instantiates the module the entry imported (a compiled `WebAssembly.Module`: these
 * runtimes refuse to compile bytes). Resolves at once once loaded.
 */
export function load(source?: WasmSource): Promise<void> {
  if (isLoaded()) return Promise.resolve();
  if (!(source instanceof WebAssembly.Module)) {
    return Promise.reject(new TypeError('fusewire: load(source): this runtime takes a compiled WebAssembly.Module ' +
      '(import wasm from "fusewire/fusewire.wasm"), not bytes or a URL'));
  }
  instantiate(source);
  loaded();
  return Promise.resolve();
}
