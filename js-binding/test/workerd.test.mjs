// The `workerd` entry (Cloudflare Workers): the .wasm imported as a module — here a
// loader hook stands in for wrangler, which turns `import … from './fusewire.wasm'`
// into a compiled WebAssembly.Module — and timers that die with the request that set
// them, as workerd's do (found by an edge-runtime review: the browser build could not
// load there, and once forced to, a breaker's one timer set in one request never fired
// for a call of the next, which then ran for good).
import assert from 'node:assert/strict';
import { createRequire, register } from 'node:module';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { pathToFileURL } from 'node:url';

const require = createRequire(import.meta.url);
const pkg = dirname(require.resolve('fusewire/package.json'));
const exportsMap = require(join(pkg, 'package.json')).exports['.'];

register('data:text/javascript,' + encodeURIComponent(`
export async function load(url, context, next) {
  if (!url.endsWith('.wasm')) return next(url, context);
  return {
    format: 'module',
    shortCircuit: true,
    source: 'import { readFileSync } from "node:fs"; export default new WebAssembly.Module(readFileSync(new URL(import.meta.url)));',
  };
}`));

// workerd's timers: one set while a request runs dies when that request ends.
const realSet = globalThis.setTimeout;
let request = 0;
const ended = new Set();
globalThis.setTimeout = (fn, ms, ...args) => {
  const r = request;
  return realSet(() => { if (!ended.has(r)) fn(...args); }, ms);
};
/** Runs `body` as request `r`, which ends (its timers with it) when `body` settles. */
async function inRequest(r, body) {
  request = r;
  try {
    return await body();
  } finally {
    ended.add(r);
  }
}

const { CircuitBreaker, ready } = await import(pathToFileURL(join(pkg, exportsMap.workerd.default)).href);
const sleep = (ms) => new Promise((r) => realSet(r, ms));

test('the workerd condition comes before browser and loads without fetching: ready is resolved', async () => {
  const conditions = Object.keys(exportsMap);
  assert.ok(conditions.indexOf('workerd') < conditions.indexOf('browser'), conditions.join());
  await ready;
  const b = new CircuitBreaker(async (x) => `ok ${x}`);
  assert.equal(await b.fire(1), 'ok 1');
  b.shutdown();
});

test('a call times out in its own request, whatever request set the breaker\'s timer', async () => {
  // Made outside any request (a Worker's global scope), as a module-level breaker is.
  const b = new CircuitBreaker((ms) => new Promise((r) => realSet(() => r(`slept ${ms}`), ms)),
    { timeout: 50, volumeThreshold: 1000 });
  assert.equal(await inRequest(1, () => b.fire(1)), 'slept 1');
  await sleep(20);
  const t0 = Date.now();
  await assert.rejects(inRequest(2, () => b.fire(2_000)), { code: 'ETIMEDOUT' }, 'the next request\'s hung call');
  assert.ok(Date.now() - t0 < 1_500, `timed out at ${Date.now() - t0} ms (the call takes 2 s)`);
  // Overlapping: the slow call's request outlives a quick one that set the timer last.
  const slow = inRequest(3, () => b.fire(400));
  await sleep(5);
  assert.equal(await inRequest(4, () => b.fire(1)), 'slept 1');
  request = 3;
  await assert.rejects(slow, { code: 'ETIMEDOUT' });
  assert.equal(b.stats.timeouts, 2);
  b.shutdown();
});
