/**
 * Browser (and bundler) platform: the small EventEmitter, and the `.wasm` compiled
 * asynchronously from `new URL('./fusewire.wasm', import.meta.url)` — the form Vite,
 * webpack 5 and Parcel turn into an emitted asset. Await `ready` before creating
 * breakers.
 * @internal
 */
import { failed, instantiate } from './engine.js';

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

async function load(): Promise<void> {
  let url: URL;
  try {
    url = new URL('./fusewire.wasm', import.meta.url);
  } catch (e) {
    // esbuild's default (iife) output empties `import.meta` (found by review: a bare
    // "Invalid URL").
    throw new Error(`fusewire: cannot locate fusewire.wasm: import.meta.url is ${String(import.meta.url)}; ` +
      'the bundle must be an ES module (esbuild: --format=esm; Rollup, webpack: output format "es" / module). ' +
      HINT, { cause: e });
  }
  let res: Response;
  try {
    res = await fetch(url);
  } catch (e) {
    throw new Error(`fusewire: fetching ${url.href} failed: ${String(e)}. ${HINT}`, { cause: e });
  }
  if (!res.ok) throw new Error(`fusewire: fetching ${url.href} failed: ${res.status}${res.statusText === '' ? '' : ` ${res.statusText}`}. ${HINT}`);
  // The bytes, not compileStreaming: a server that answers another file (an HTML page)
  // with 200 is told apart by the magic word, whatever its content-type says.
  const bytes = await res.arrayBuffer();
  if (!isWasm(bytes)) {
    throw new Error(`fusewire: ${url.href} is not a WebAssembly module (HTTP ${res.status}, content-type ` +
      `${res.headers.get('content-type') ?? 'none'}, ${bytes.byteLength} bytes starting ${preview(bytes)}; ` +
      `a .wasm starts with "\\0asm"): the server answered something else at that URL, typically an HTML page. ${HINT}`);
  }
  let module: WebAssembly.Module;
  try {
    module = await WebAssembly.compile(bytes);
  } catch (e) {
    // A page's Content-Security-Policy without 'wasm-unsafe-eval' refuses to compile.
    const why = /Content.Security.Policy|unsafe-eval|\bCSP\b|disallowed by embedder/i.test(String(e))
      ? "the page's Content-Security-Policy must allow WebAssembly: script-src 'wasm-unsafe-eval'"
      : 'a damaged or truncated file?';
    throw new Error(`fusewire: compiling ${url.href} failed (${why}): ${String(e)}`, { cause: e });
  }
  instantiate(module);
}

/**
 * Resolves when the WebAssembly module is compiled and instantiated; rejects with the
 * cause when it cannot be (a missing or unreachable `.wasm`).
 */
export const ready: Promise<void> = load().catch((e: unknown) => {
  failed(e);
  throw e;
});
// Marked handled here: a page that awaits `ready` later, or never (it creates no
// breaker), gets no unhandled rejection; `await ready` still throws the cause.
ready.catch(() => {});
