// Two copies of fusewire in one process (one bundled into a dependency, or two
// versions installed): `instanceof` fails across them, so a SharedStore, a breaker
// given as a fallback and a Status given to prime another breaker are recognised by a
// Symbol.for mark instead (found by a library author's review: each was refused as
// "an object", or primed nothing).
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, test } from 'node:test';

import * as client from 'prom-client';
import { CircuitBreaker, SharedStore } from 'fusewire';
import { register } from 'fusewire/prometheus';

const require = createRequire(import.meta.url);
const tmp = mkdtempSync(join(tmpdir(), 'fusewire-copies-'));
after(() => rmSync(tmp, { recursive: true, force: true }));
cpSync(dirname(require.resolve('fusewire/package.json')), join(tmp, 'copy'), { recursive: true });
const other = require(join(tmp, 'copy', 'dist', 'index.cjs'));
const otherRedis = require(join(tmp, 'copy', 'dist', 'redis.cjs'));
const otherPrometheus = require(join(tmp, 'copy', 'dist', 'prometheus.cjs'));

test('the other copy is another module: its classes are not ours', () => {
  assert.notEqual(other.CircuitBreaker, CircuitBreaker);
  assert.ok(!(new other.SharedStore({ entries: 4 }) instanceof SharedStore));
});

test('a SharedStore of another copy is used through its memory: one breaker across both copies', async () => {
  const store = new other.SharedStore({ entries: 8 });
  const fail = async () => { throw new Error('down'); };
  const ours = new CircuitBreaker(fail, { name: 'pay', shared: { store } });
  const theirs = new other.CircuitBreaker(fail, { name: 'pay', shared: { store } });
  await ours.fire().catch(() => {});
  assert.equal(ours.opened, true);
  await assert.rejects(theirs.fire(), { code: 'EOPENBREAKER' }, 'the trip is seen through the other copy');
  ours.shutdown();
  theirs.shutdown();
});

test('a breaker of another copy is a fallback; its Status primes a breaker; its RedisStore is refused by name', async () => {
  const backup = new other.CircuitBreaker(async (x) => `backup ${x}`);
  const b = new CircuitBreaker(async () => { throw new Error('down'); }, { volumeThreshold: 100 });
  b.fallback(backup);
  assert.equal(await b.fire('a'), 'backup a');
  for (let i = 0; i < 3; i++) await backup.fire(i);
  const primed = new CircuitBreaker(async () => 1, { status: backup.status });
  assert.equal(primed.stats.fires, 4, 'the other copy\'s counts');
  assert.throws(() => new CircuitBreaker(async () => 1, { name: 'r', shared: { store: Object.create(otherRedis.RedisStore.prototype) } }),
    { name: 'TypeError', message: /^options\.shared\.store: must be a SharedStore or a RedisStore, got a RedisStore of another copy of fusewire/ });
  for (const x of [b, backup, primed]) x.shutdown();
});

test('both copies register on one prom-client registry: the second warns about the names taken instead of throwing', async () => {
  const seen = [];
  const listen = (w) => { if (w.name === 'FusewireWarning') seen.push(w.message); };
  process.on('warning', listen);
  const registry = new client.Registry();
  const ours = register({ client, registers: [registry] });
  let theirs;
  try {
    assert.doesNotThrow(() => { theirs = otherPrometheus.register({ client, registers: [registry] }); });
    const a = new CircuitBreaker(async () => 1, { name: 'ours' });
    const b = new other.CircuitBreaker(async () => 1, { name: 'theirs' });
    await a.fire();
    await b.fire();
    const text = await registry.metrics();
    assert.match(text, /^fusewire_ours_success 1$/m);
    assert.match(text, /^fusewire_theirs_success 1$/m);
    a.shutdown();
    b.shutdown();
    await new Promise((r) => setImmediate(r));
  } finally {
    process.off('warning', listen);
    ours();
    theirs?.();
  }
  assert.ok(seen.some((m) => m.startsWith('fusewire/prometheus: metric fusewire_breakers not registered')), seen.join('\n'));
});
