/**
 * Node.js platform: the EventEmitter base class and the synchronous `.wasm` load, so
 * `new CircuitBreaker()` works right after `require`/`import` (opossum code has no
 * `await init()`). The browser bundle swaps this module for platform-browser.ts.
 * @internal
 */
import { EventEmitter as NodeEmitter } from 'node:events';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, join } from 'node:path';

import type { Emitter } from './emitter.js';
import { instantiate } from './engine.js';
import { version } from './version.js';

/** The base class of breakers and statuses: Node's own EventEmitter. */
export const EventEmitter = NodeEmitter as unknown as new () => Emitter;

export const platform = 'node';

/** Whether a timer dies with the request that set it (edge runtimes): no. */
export const REQUEST_TIMERS = false;

/**
 * Whether `emit(name)` would call a listener: Node's emitter counts its events in
 * `_eventsCount` and keeps them in `_events`, deleting an event's entry with its
 * last listener. Without that table (another emitter) the answer is yes, so nothing
 * is ever skipped wrongly.
 */
export function listening(e: Emitter, name: string): boolean {
  const n = e as unknown as { _events?: Record<string, unknown>; _eventsCount?: number };
  if (n._eventsCount === 0) return false;
  const table = n._events;
  return table === undefined || table[name] !== undefined;
}

/**
 * `FUSEWIRE_WASM`, or undefined where the runtime refuses to read the environment
 * (Deno without `--allow-env`: reading throws `NotCapable`).
 */
function fromEnv(): string | undefined {
  try {
    // Deno asks the user (a prompt in a terminal) before a read it was not granted:
    // only a granted variable is read (found by review: a prompt for a variable
    // hardly anyone sets).
    const deno = (globalThis as { Deno?: { permissions?: { querySync?: (d: object) => { state: string } } } }).Deno;
    const query = deno?.permissions?.querySync;
    if (query !== undefined && query({ name: 'env', variable: 'FUSEWIRE_WASM' }).state !== 'granted') return undefined;
    const path = process.env['FUSEWIRE_WASM'];
    return path === '' ? undefined : path;
  } catch {
    return undefined;
  }
}

/**
 * Where the `.wasm` is: `FUSEWIRE_WASM` (a path) if set; else the package's own
 * `dist/fusewire.wasm`; else, when this code was bundled (esbuild/webpack/rollup for
 * Node, where `__dirname` is the bundle's directory or undefined), a `fusewire.wasm`
 * next to the bundle, next to the entry script or next to the executable (a single
 * executable: Node's SEA, `bun build --compile`, whose entry path is virtual).
 */
function wasmPath(): string {
  const env = fromEnv();
  if (env !== undefined) {
    if (!exists(env)) {
      throw new Error(`fusewire: FUSEWIRE_WASM is ${JSON.stringify(env)}, which does not exist (point it at a copy of fusewire/dist/fusewire.wasm)`);
    }
    return env;
  }
  const dir = typeof __dirname === 'string' ? __dirname : undefined;
  const tried: string[] = [];
  // In the package (dist/cjs), its own dist/fusewire.wasm; else (a bundle) next to
  // this file first, then above it (found by review: a stale file above a bundle
  // won over the one beside it). One probe in the package: Deno refuses a read
  // outside what it granted, even of a file that is not there (found by review:
  // `--allow-read` of the `.wasm` alone failed on the probe before it).
  const own = dir !== undefined && basename(dir) === 'cjs' && basename(dirname(dir)) === 'dist';
  const candidates = dir === undefined || OWN === undefined ? []
    : own ? [OWN]
      : [join(dir, 'fusewire.wasm'), OWN];
  const entry = process.argv[1];
  if (entry !== undefined && entry !== '') candidates.push(join(dirname(entry), 'fusewire.wasm'));
  candidates.push(join(dirname(process.execPath), 'fusewire.wasm'));
  for (const path of candidates) {
    if (tried.includes(path)) continue;
    tried.push(path);
    if (exists(path)) return path;
  }
  const app = fromApp();
  if (app !== undefined && !tried.includes(app)) {
    tried.push(app);
    if (exists(app)) return app;
  }
  if ((globalThis as { Deno?: unknown }).Deno !== undefined && own) {
    // Deno checks the real path: node_modules/.deno/… after `deno install`, its npm
    // cache for `npm:` specifiers (found by review).
    throw new Error(`fusewire: its WebAssembly module could not be read (tried ${tried.join(', ')}): in Deno, ` +
      `grant read access to it (--allow-read=${tried[0]}, the real path, not a symlink), or run with --allow-read`);
  }
  const bun = typeof process.versions['bun'] === 'string';
  throw new Error(`fusewire: its WebAssembly module fusewire.wasm was not found (tried ${tried.join(', ')}). ` +
    (bun
      ? 'In a `bun build --compile` executable (or a Bun bundle), copy node_modules/fusewire/dist/fusewire.wasm next to the executable (or the bundle), or set FUSEWIRE_WASM to its path; '
      : '') +
    'This happens when fusewire is bundled for Node (esbuild --platform=node, webpack target node, Next.js server code) ' +
    'and the app\'s node_modules has no fusewire ' + version + ': ' +
    'mark fusewire as external (esbuild --external:fusewire, webpack externals, Next.js serverExternalPackages: [\'fusewire\']) so it loads from node_modules, ' +
    (dir === undefined
      // An ES module bundle has no __dirname (found by review: told to copy the file
      // next to the bundle, where it was never looked for).
      ? 'or, as this is an ES module bundle (no __dirname), copy node_modules/fusewire/dist/fusewire.wasm next to the entry script ' +
        'or the executable, define __dirname in the bundle (esbuild --banner, tsup shims: true), or set FUSEWIRE_WASM to its path.'
      : 'or copy node_modules/fusewire/dist/fusewire.wasm next to the bundle (or the executable), or set FUSEWIRE_WASM to its path.'));
}

/**
 * The package's own module, spelled so file tracers see it (@vercel/nft: Next.js's
 * `output: 'standalone'` and Vercel's functions left it out, found by review).
 */
const OWN = typeof __dirname === 'string' ? join(__dirname, '..', 'fusewire.wasm') : undefined;

/**
 * Bundled code (Next.js bundles server code, and so does esbuild or webpack for
 * Node) still finds the module in the app's `node_modules`, when that holds this
 * version of fusewire: resolved from the working directory (found by a Next.js
 * review: `next dev`, `next build` and `next start` failed without
 * `serverExternalPackages`).
 */
function fromApp(): string | undefined {
  try {
    const pkg = createRequire(join(process.cwd(), 'index.js')).resolve('fusewire/package.json');
    const found = (JSON.parse(readFileSync(pkg, 'utf8')) as { version?: unknown }).version;
    return found === version ? join(dirname(pkg), 'dist', 'fusewire.wasm') : undefined;
  } catch {
    return undefined;
  }
}

/** Whether `path` exists; false where the runtime refuses to look (Deno without read access there). */
function exists(path: string): boolean {
  try {
    return existsSync(path);
  } catch {
    return false;
  }
}

function compileFile(path: string): WebAssembly.Module {
  try {
    return new WebAssembly.Module(readFileSync(path));
  } catch (e) {
    // Name the file (found by review: a stale or foreign file gave a bare CompileError).
    throw new Error(`fusewire: ${path} is not fusewire's WebAssembly module (${e instanceof Error ? e.message : String(e)}); ` +
      'copy node_modules/fusewire/dist/fusewire.wasm of this version there' +
      (fromEnv() === path ? ', or point FUSEWIRE_WASM at it' : ''), { cause: e });
  }
}

instantiate(compileFile(wasmPath()));

/** Resolved: Node compiles the module synchronously at load. */
export const ready: Promise<void> = Promise.resolve();

/**
 * What [`load`] takes in place of the package's own `.wasm`: a compiled
 * `WebAssembly.Module`, its bytes, a `Response`, a `URL` or a URL string. Written
 * without the DOM lib's names (`BufferSource`, the `WebAssembly` namespace), which a
 * Node project typed with `lib: ["ES2022"]` and `@types/node` does not have (found by
 * review: importing fusewire failed to compile there).
 */
export type WasmSource = WasmModule | ArrayBuffer | ArrayBufferView | Response | URL | string;

/** `WebAssembly.Module` where the lib declares it. */
type WasmModule = typeof globalThis extends { WebAssembly: { Module: abstract new (...args: never[]) => infer M } } ? M : never;

/**
 * Loads the WebAssembly module — in browsers, or again after `ready` rejected (a
 * network error): resolves once breakers can be made. `source` (a compiled
 * `WebAssembly.Module`, the `.wasm` bytes, a `Response` such as one from the Cache
 * API, or a URL) replaces the package's own `.wasm`; it is ignored once the module is
 * loaded. In Node the module is loaded at import: this resolves at once.
 */
export function load(source?: WasmSource): Promise<void> {
  void source;
  return ready;
}
