// CommonJS: require('fusewire') is the class (as require('opossum') is), ready to use
// synchronously; the ESM entry is the same instance.
const assert = require('node:assert/strict');
const { test } = require('node:test');

test('require() gives the class, usable at once', async () => {
  const CircuitBreaker = require('fusewire');
  assert.equal(typeof CircuitBreaker, 'function');
  const b = new CircuitBreaker(async (x) => x + 1);
  assert.equal(await b.fire(1), 2);
  assert.equal(CircuitBreaker.CircuitBreaker, CircuitBreaker);
  assert.equal(CircuitBreaker.default, CircuitBreaker);
  assert.equal(typeof CircuitBreaker.SharedStore, 'function');
  assert.equal(typeof CircuitBreaker.Status, 'function');
  assert.equal(typeof CircuitBreaker.isOurError, 'function');
  assert.ok(CircuitBreaker.ready instanceof Promise);
  await CircuitBreaker.ready;
  const { CircuitBreaker: Named, SharedStore } = require('fusewire');
  assert.equal(Named, CircuitBreaker);
  assert.ok(new SharedStore({ entries: 4 }).buffer instanceof SharedArrayBuffer);
  b.shutdown();
});

test('the ESM entry is the same instance', async () => {
  const esm = await import('fusewire');
  const cjs = require('fusewire');
  assert.equal(esm.default, cjs);
  assert.equal(esm.CircuitBreaker, cjs);
  assert.equal(esm.SharedStore, cjs.SharedStore);
  const b = new esm.CircuitBreaker(async () => 1);
  assert.ok(b instanceof cjs);
  b.shutdown();
});

test('fusewire/prometheus loads both ways', async () => {
  const p = require('fusewire/prometheus');
  assert.equal(typeof p.register, 'function');
  const e = await import('fusewire/prometheus');
  assert.equal(e.register, p.register);
  assert.equal(p.metricName('fusewire', 'orders/GET:é', 'success'), 'fusewire_orders_GET___success');
});

test("index.d.cts declares exactly require('fusewire')'s properties as values", () => {
  const { readFileSync } = require('node:fs');
  const { dirname, join } = require('node:path');
  const dist = join(dirname(require.resolve('fusewire/package.json')), 'dist');
  const dts = readFileSync(join(dist, 'index.d.cts'), 'utf8');
  const declared = [...dts.matchAll(/export import (\w+) = fw\.\1;/g)].map((m) => m[1]);
  assert.match(dts, /export \{ CircuitBreaker as default, CircuitBreaker \};/);
  const CircuitBreaker = require('fusewire');
  const runtime = Object.keys(require(join(dist, 'cjs', 'index.js'))).filter((k) => k !== 'default' && k !== 'CircuitBreaker');
  assert.deepEqual([...declared].sort(), [...runtime].sort());
  for (const k of declared) assert.ok(Object.prototype.hasOwnProperty.call(CircuitBreaker, k), k);
});
