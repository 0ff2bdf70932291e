// The `edge-light` entry (Next.js's Edge runtime, Vercel Edge Functions): the .wasm
// imported as `./fusewire.wasm?module` — a loader hook stands in for Next's bundler,
// which turns that import into a compiled WebAssembly.Module — in a process whose
// Node APIs throw as Next's Edge sandbox defines them (`setImmediate`,
// `clearImmediate`, `process.nextTick`, `process.emitWarning`). Found by a Next.js
// review: the edge got the browser build (compiling from bytes is refused there; a
// module-scope breaker threw "still loading"), and every breaker's first fire()
// threw synchronously, its shutdown() too, and a Collapser never ran its batch.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { pathToFileURL } from 'node:url';

const require = createRequire(import.meta.url);
const pkg = dirname(require.resolve('fusewire/package.json'));
const exportsMap = require(join(pkg, 'package.json')).exports['.'];

const hook = 'data:text/javascript,' + encodeURIComponent(`
export async function load(url, context, next) {
  if (!url.endsWith('.wasm?module')) return next(url, context);
  return {
    format: 'module',
    shortCircuit: true,
    source: 'import { readFileSync } from "node:fs"; export default new WebAssembly.Module(readFileSync(new URL(import.meta.url)));',
  };
}`);

const script = `
import { register } from 'node:module';
register(${JSON.stringify(hook)});
const edge = (name) => () => { throw new Error('A Node.js API is used (' + name + ') which is not supported in the Edge Runtime.'); };
globalThis.setImmediate = edge('setImmediate');
globalThis.clearImmediate = edge('clearImmediate');
process.nextTick = edge('process.nextTick');
process.emitWarning = edge('process.emitWarning');
const warned = [];
console.warn = (m) => warned.push(String(m));
const { CircuitBreaker, Collapser, ready } = await import(${JSON.stringify(pathToFileURL(join(pkg, exportsMap['edge-light'].default)).href)});
const out = {};
// Module scope, no await ready.
const b = new CircuitBreaker(async (x) => x * 2, { timeout: 50, timout: 1 });
const hung = new CircuitBreaker(() => new Promise(() => {}), { timeout: 30 });
try {
  const p = b.fire(21);
  out.first = await p;
} catch (e) {
  out.first = 'threw ' + e.message;
}
out.second = await b.fire(2);
out.timeout = await hung.fire().then(() => 'resolved', (e) => e.code);
const c = new Collapser(async (keys) => keys.map((k) => k + 1), { windowMs: 0 });
out.batch = await Promise.race([c.loadMany([1, 2]), new Promise((r) => setTimeout(() => r('hung'), 1000))]);
try {
  b.shutdown();
  hung.shutdown();
  c.clearAll();
  out.shutdown = 'ok';
} catch (e) {
  out.shutdown = 'threw ' + e.message;
}
out.ready = await Promise.race([ready.then(() => 'resolved'), new Promise((r) => setTimeout(() => r('pending'), 100))]);
out.warned = warned.some((w) => w.startsWith('FusewireWarning:') && w.includes('timout'));
console.log(JSON.stringify(out));
`;

test('the edge-light condition comes before browser', () => {
  const conditions = Object.keys(exportsMap);
  assert.ok(conditions.indexOf('edge-light') < conditions.indexOf('browser'), conditions.join());
});

test('in an Edge sandbox: a module-scope breaker runs with no await, its first call does not throw, timeouts, batches, shutdown and warnings work', () => {
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 20_000 });
  assert.equal(r.status, 0, r.stderr);
  const out = JSON.parse(r.stdout.trim().split('\n').pop());
  assert.deepEqual(out, {
    first: 42, second: 4, timeout: 'ETIMEDOUT', batch: [2, 3], shutdown: 'ok', ready: 'resolved', warned: true,
  });
});
