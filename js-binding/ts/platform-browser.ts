/**
 * Browser (and bundler) platform: the small EventEmitter, and the `.wasm` compiled
 * asynchronously from `new URL('./fusewire.wasm', import.meta.url)` — the form Vite,
 * webpack 5 and Parcel turn into an emitted asset. Await `ready` before creating
 * breakers.
 * @internal
 */
import { failed, instantiate, loaded, onRetry } from './engine.js';
import type { WasmSource } from './platform.js';

export type { WasmSource } from './platform.js';

export { EventEmitter, listening } from './browser-emitter.js';

export const platform = 'browser';

/** Whether a timer dies with the request that set it (edge runtimes): no. */
export const REQUEST_TIMERS = false;

/** What to do when the `.wasm` is not served where this file looks for it. */
const HINT = 'fusewire loads fusewire.wasm from new URL("./fusewire.wasm", import.meta.url), next to its browser build: ' +
  'serve node_modules/fusewire/dist/fusewire.wasm at that URL (copy it next to your bundle if your bundler does not emit it). ' +
  "With Vite, add optimizeDeps: { exclude: ['fusewire'] } to vite.config (the dev server pre-bundles the package into " +
  'node_modules/.vite/deps/, where no .wasm is, and answers index.html there).';

/** Whether `bytes` start with the WebAssembly magic word `\0asm`. */
function isWasm(bytes: ArrayBuffer): boolean {
  const b = new Uint8Array(bytes, 0, Math.min(4, bytes.byteLength));
  return b.length === 4 && b[0] === 0x00 && b[1] === 0x61 && b[2] === 0x73 && b[3] === 0x6d;
}

/** The start of a wrong answer, printable (error messages). */
function preview(bytes: ArrayBuffer): string {
  const text = new TextDecoder('utf-8', { fatal: false }).decode(new Uint8Array(bytes, 0, Math.min(24, bytes.byteLength)));
  return JSON.stringify(text.replace(/[^\x20-\x7e]/g, '.'));
}

/** What to do after a failed fetch. */
const AGAIN = 'await load() (exported by fusewire) to try again, or load(source) with a copy (a Response from the Cache API, the bytes, a WebAssembly.Module)';

/** Compiles `source` — or the package's own `.wasm`, fetched — and instantiates it. */
async function attempt(source?: WasmSource): Promise<void> {
  if (source instanceof WebAssembly.Module) {
    instantiate(source);
    return;
  }
  if (source instanceof ArrayBuffer || ArrayBuffer.isView(source)) {
    instantiate(await compile(source as BufferSource, 'the bytes given to load()'));
    return;
  }
  if (source instanceof Response) {
    instantiate(await compile(await checked(source, source.url || 'the Response given to load()'), source.url || 'the Response given to load()'));
    return;
  }
  let url: URL;
  if (source !== undefined) {
    // A string resolves against the page's (or worker's) address, as fetch() does.
    try {
      url = new URL(String(source), globalThis.location?.href);
    } catch (e) {
      throw new Error(`fusewire: load(source): ${JSON.stringify(String(source))} is not a URL ` +
        `(relative ones resolve against the page's address)`, { cause: e });
    }
    return fetchModule(url);
  }
  try {
    url = new URL('./fusewire.wasm', import.meta.url);
  } catch (e) {
    // esbuild's default (iife) output empties `import.meta` (found by review: a bare
    // "Invalid URL").
    throw new Error(`fusewire: cannot locate fusewire.wasm: import.meta.url is ${String(import.meta.url)}; ` +
      'the bundle must be an ES module (esbuild: --format=esm; Rollup, webpack: output format "es" / module). ' +
      HINT, { cause: e });
  }
  return fetchModule(url);
}

/** Fetches, checks, compiles and instantiates the module at `url`. */
async function fetchModule(url: URL): Promise<void> {
  let res: Response;
  try {
    res = await fetch(url);
  } catch (e) {
    // The network (offline), the page's CSP `connect-src`, or CORS: not where the file
    // is served (found by review: the hint sent users to Vite's settings).
    throw new Error(`fusewire: fetching ${url.href} failed: ${String(e)} (offline, or refused by the page's ` +
      `Content-Security-Policy connect-src or by CORS); ${AGAIN}`, { cause: e });
  }
  if (!res.ok) {
    throw new Error(`fusewire: fetching ${url.href} failed: ${res.status}${res.statusText === '' ? '' : ` ${res.statusText}`}. ` +
      `${HINT} Or ${AGAIN}.`);
  }
  instantiate(await compile(await checked(res, url.href), url.href));
}

/** The bytes of `res`, checked to be WebAssembly. */
async function checked(res: Response, where: string): Promise<ArrayBuffer> {
  // The bytes, not compileStreaming: a server that answers another file (an HTML page)
  // with 200 is told apart by the magic word, whatever its content-type says.
  const bytes = await res.arrayBuffer();
  if (!isWasm(bytes)) {
    throw new Error(`fusewire: ${where} is not a WebAssembly module (HTTP ${res.status}, content-type ` +
      `${res.headers.get('content-type') ?? 'none'}, ${bytes.byteLength} bytes starting ${preview(bytes)}; ` +
      `a .wasm starts with "\\0asm"): the server answered something else at that URL, typically an HTML page. ${HINT}`);
  }
  return bytes;
}

async function compile(bytes: BufferSource, where: string): Promise<WebAssembly.Module> {
  try {
    return await WebAssembly.compile(bytes);
  } catch (e) {
    // A page's Content-Security-Policy without 'wasm-unsafe-eval' refuses to compile.
    const why = /Content.Security.Policy|unsafe-eval|\bCSP\b|disallowed by embedder/i.test(String(e))
      ? "the page's Content-Security-Policy must allow WebAssembly: script-src 'wasm-unsafe-eval'"
      : 'a damaged or truncated file?';
    throw new Error(`fusewire: compiling ${where} failed (${why}): ${String(e)}`, { cause: e });
  }
}

/** The attempt in flight, if any. */
let current: Promise<void> | undefined;
/** When the last failed attempt ended, and the wait before a retry a breaker starts. */
let failedAt = -Infinity;
let backoff = 1_000;

/**
 * Loads the module, or tries again after `ready` rejected (found by review: one
 * failed fetch left fusewire unusable until the page reloaded): resolves once breakers
 * can be made. `source` replaces the package's own `.wasm` — a `WebAssembly.Module`,
 * the bytes, a `Response` (from the Cache API: a service worker offline), or a URL.
 * One attempt at a time: a call during one returns it.
 */
export function load(source?: WasmSource): Promise<void> {
  if (loaded()) return Promise.resolve();
  // A copy given while an attempt runs (the network one `ready` started, offline) is
  // used if that attempt fails (found by review: it was ignored).
  if (current !== undefined) return source === undefined ? current : current.catch(() => load(source));
  const p = attempt(source).then(() => {
    current = undefined;
    backoff = 1_000;
  }, (e: unknown) => {
    current = undefined;
    failedAt = Date.now();
    failed(e);
    throw e;
  });
  // Marked handled here: a page that awaits it later, or never, gets no unhandled
  // rejection; awaiting it still throws the cause.
  p.catch(() => {});
  current = p;
  return p;
}

// A breaker made after a failed load starts another attempt, at most one per `backoff`
// (1 s, doubling to 30 s while they fail).
onRetry(() => {
  if (current !== undefined || Date.now() - failedAt < backoff) return;
  backoff = Math.min(backoff * 2, 30_000);
  void load();
});

/**
 * Resolves when the WebAssembly module is compiled and instantiated; rejects with the
 * cause when it cannot be (a missing or unreachable `.wasm`): then `load()` tries again.
 */
export const ready: Promise<void> = load();
