// Collapser.forRequest(): DataLoader's per-request loader (batches and a cache of its
// own) on one long-lived Collapser, whose breaker sees every request's batches.
// (test/dataloader-diff.test.mjs runs every DataLoader scenario on request loaders too.)
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { describe, test } from 'node:test';

import { CircuitBreaker, Collapser, RequestLoader } from 'fusewire';

const require = createRequire(import.meta.url);

/** A collapser whose batches are logged: `[context, this, keys]`. */
function users(options = { windowMs: 0 }) {
  const batches = [];
  const c = new Collapser(async function (ids, ctx) {
    batches.push([ctx, this, [...ids]]);
    return ids.map((id) => `${ctx?.user ?? 'global'}:${id}`);
  }, options);
  return { c, batches };
}

describe('Collapser.forRequest', () => {
  test('request loaders batch and cache apart; the batch function gets the request\'s context, with the loader as `this`', async () => {
    const { c, batches } = users();
    const ann = c.forRequest({ user: 'ann' });
    const bob = c.forRequest({ user: 'bob' });
    assert.ok(ann instanceof RequestLoader);
    assert.deepEqual(ann.context, { user: 'ann' });
    assert.equal(ann.collapser, c);
    assert.equal(ann.breaker, c.breaker, 'one breaker');
    const got = await Promise.all([ann.load(1), bob.load(1), ann.load(2), c.load(1), bob.load(1)]);
    assert.deepEqual(got, ['ann:1', 'bob:1', 'ann:2', 'global:1', 'bob:1']);
    assert.equal(batches.length, 3, 'one batch per loader');
    const of = (self) => batches.filter(([, t]) => t === self).map(([ctx, , ids]) => [ctx?.user, ids]);
    assert.deepEqual(of(ann), [['ann', [1, 2]]]);
    assert.deepEqual(of(bob), [['bob', [1]]], 'a repeated key is sent once');
    assert.deepEqual(of(c), [[undefined, [1]]], 'the collapser\'s own loads: no context, the collapser as `this`');
    // Each request's cache is its own.
    batches.length = 0;
    assert.deepEqual(await Promise.all([ann.load(1), bob.load(2), c.load(1)]), ['ann:1', 'bob:2', 'global:1']);
    assert.deepEqual(batches.map(([ctx, , ids]) => [ctx?.user, ids]), [['bob', [2]]]);
    assert.deepEqual(await ann.loadMany([2, 3]), ['ann:2', 'ann:3']);
    c.shutdown();
  });

  test('one breaker for every request: failing batches of any request open it for all; its fallback answers whole batches', async () => {
    let down = true;
    const c = new Collapser(async (ids) => {
      if (down) throw new Error('down');
      return ids.map((id) => `v${id}`);
    }, { windowMs: 0, breaker: { volumeThreshold: 3, errorThresholdPercentage: 50, resetTimeout: 60_000 } });
    for (let i = 0; i < 3; i++) await assert.rejects(c.forRequest().load(i), /down/);
    down = false;
    await assert.rejects(c.forRequest().load(9), (e) => e.code === 'EOPENBREAKER');
    assert.equal(c.breaker.opened, true);
    assert.equal(c.breaker.stats.failures, 3);
    c.breaker.fallback((keys) => keys.map((k) => `fallback ${k}`));
    const r = c.forRequest();
    assert.deepEqual(await Promise.all([r.load(1), r.load(2)]), ['fallback 1', 'fallback 2']);
    // A fallback's values are not cached: the request's next load asks again.
    c.breaker.close();
    assert.equal(await r.load(1), 'v1');
    c.shutdown();
  });

  test('clear, clearAll and prime are the request\'s own; the collapser\'s clear and clearAll leave the requests\' caches', async () => {
    let sent = [];
    const c = new Collapser(async (ids) => {
      sent.push(...ids);
      return ids.map((id) => `v${id}`);
    }, { windowMs: 0 });
    const a = c.forRequest();
    const b = c.forRequest();
    const all = () => Promise.all([a.load(1), b.load(1), c.load(1)]);
    await all();
    assert.deepEqual(sent.sort(), [1, 1, 1]);
    sent = [];
    assert.equal(a.clear(1), a);
    await all();
    assert.deepEqual(sent, [1], 'only a\'s');
    sent = [];
    c.clear(1);
    await all();
    assert.deepEqual(sent, [1], 'only the collapser\'s');
    sent = [];
    c.clearAll();
    await all();
    assert.deepEqual(sent, [1], 'only the collapser\'s');
    sent = [];
    assert.equal(b.clearAll(), b);
    await all();
    assert.deepEqual(sent, [1], 'only b\'s');
    sent = [];
    assert.equal(a.prime(5, 'primed'), a);
    assert.equal(await a.load(5), 'primed');
    assert.equal(await b.load(5), 'v5');
    assert.deepEqual(sent, [5]);
    c.shutdown();
  });

  test('shutdown(): loads made before it are answered (a repeated key\'s too), later ones reject with ESHUTDOWN, its cache is let go; the collapser goes on', async () => {
    const { c } = users();
    const r = c.forRequest({ user: 'ann' });
    assert.equal(await r.load(1), 'ann:1');
    assert.equal(c._payloads.size, 1, 'one cached value');
    const waiting = r.load(2);
    const repeated = r.load(2);
    r.shutdown();
    assert.equal(c._payloads.size, 0, 'the request\'s cached value is let go');
    assert.deepEqual(await Promise.all([waiting, repeated]), ['ann:2', 'ann:2']);
    assert.equal(c._payloads.size, 0, 'what its last batch loaded is not cached');
    await assert.rejects(r.load(3), (e) => e.code === 'ESHUTDOWN' && CircuitBreaker.isOurError(e) &&
      e.message === 'The request loader has been shut down.');
    r.shutdown();
    assert.equal(r.prime(4, 'x').clear(4).clearAll(), r, 'a no-op once shut down');
    assert.equal(await c.load(3), 'global:3');
    assert.equal(await c.forRequest({ user: 'bob' }).load(3), 'bob:3');
    c.shutdown();
  });

  test('a request\'s cache hit waits for no other request\'s batch (found by review: it waited for whichever batch flushed next, and for it to finish)', async () => {
    const c = new Collapser(async (ids, ctx) => (ctx?.hang ? new Promise(() => {}) : ids), { windowMs: 0, breaker: { timeout: false } });
    const a = c.forRequest({});
    const b = c.forRequest({ hang: true });
    assert.equal(await a.load(1), 1);
    void b.load(2);
    let hit = false;
    void a.load(1).then(() => { hit = true; });
    for (let i = 0; i < 5 && !hit; i++) await new Promise((r) => setImmediate(r));
    assert.equal(hit, true, 'the hit settled at DataLoader\'s moment');
    c.shutdown();
  });

  test('a hit settles with its own request\'s batch: code that awaited a hit and then loads joins its request\'s next batch, as with a DataLoader per request', async () => {
    const batches = [];
    const c = new Collapser(async (ids, ctx) => {
      batches.push(`${ctx.name}:[${[...ids].sort((x, y) => x - y)}]`);
      if (ctx.name === 'b') await new Promise((r) => setTimeout(r, 20));
      return ids;
    }, { windowMs: 0 });
    const a = c.forRequest({ name: 'a' });
    const b = c.forRequest({ name: 'b' });
    await a.load(1);
    batches.length = 0;
    await Promise.all([b.load(5), a.load(1).then(() => a.load(10)), a.load(2).then(() => a.load(20))]);
    assert.deepEqual(batches.sort(), ['a:[10,20]', 'a:[2]', 'b:[5]'], 'a\'s 10 and 20 in one batch (DataLoader per request: the same)');
    c.shutdown();
  });

  test('loaderOf(keys): the breaker\'s fallback finds the request of a batch', async () => {
    const c = new Collapser(async () => {
      throw new Error('down');
    }, { windowMs: 0 });
    c.breaker.fallback((keys) => {
      const from = c.loaderOf(keys);
      return keys.map((k) => `${from === c ? 'collapser' : from.context.user}:${k}`);
    });
    const r = c.forRequest({ user: 'ann' });
    assert.deepEqual(await Promise.all([r.load(1), c.load(2)]), ['ann:1', 'collapser:2']);
    assert.equal(c.loaderOf([1]), c, 'an array of no request loader\'s batch');
    c.shutdown();
  });

  test('the breaker\'s own cache and coalesce are refused on a Collapser (found by review: coalescing served one request\'s batch to another with the same keys)', () => {
    for (const k of ['cache', 'coalesce']) {
      assert.throws(() => new Collapser(async (ids) => ids, { breaker: { [k]: true } }),
        (e) => e instanceof TypeError && e.message.startsWith(`options.breaker.${k}: not for a Collapser's breaker`));
    }
    new Collapser(async (ids) => ids, { breaker: { cache: false, coalesce: false } }).shutdown();
  });

  test('collapser.breaker.shutdown(): loads waiting for their window reject with ESHUTDOWN, a hit waiting with them settles, a load joined to a load in flight gets its result (found by review: all stayed pending)', async () => {
    let release;
    const c = new Collapser(async (ids) => {
      if (ids.includes('slow')) await new Promise((r) => { release = r; });
      return ids.map((i) => `v${i}`);
    }, { windowMs: 10 });
    const r = c.forRequest();
    assert.equal(await r.load(1), 'v1');
    const slow = c.load('slow');
    while (release === undefined) await new Promise((done) => setTimeout(done, 5));
    const joined = c.load('slow');
    const waiting = r.load(2);
    const hit = r.load(1);
    c.breaker.shutdown();
    await assert.rejects(waiting, (e) => e.code === 'ESHUTDOWN');
    assert.equal(await hit, 'v1');
    release();
    assert.deepEqual(await Promise.all([slow, joined]), ['vslow', 'vslow']);
  });

  test('collapser.shutdown() from a batch function: the other batches of its flush still run (found by review: another request\'s batch was rejected)', async () => {
    const c = new Collapser(async (ids, ctx) => {
      if (ctx?.name === 'a') c.shutdown();
      return ids.map((i) => `${ctx?.name}:${i}`);
    }, { windowMs: 0 });
    const a = c.forRequest({ name: 'a' });
    const b = c.forRequest({ name: 'b' });
    assert.deepEqual(await Promise.all([a.load(1), b.load(1)]), ['a:1', 'b:1']);
    await assert.rejects(b.load(2), (e) => e.code === 'ESHUTDOWN');
    assert.equal(c.breaker.isShutdown, true);
  });

  test('a shut-down collapser: forRequest throws ESHUTDOWN, its request loaders\' loads reject', async () => {
    const { c } = users();
    const r = c.forRequest();
    c.shutdown();
    assert.throws(() => c.forRequest(), (e) => e.code === 'ESHUTDOWN');
    await assert.rejects(r.load(1), (e) => e.code === 'ESHUTDOWN');
  });

  test('new RequestLoader(collapser, context) is forRequest; anything but a Collapser is a TypeError', async () => {
    const { c, batches } = users();
    const r = new RequestLoader(c, { user: 'ann' });
    assert.equal(await r.load(1), 'ann:1');
    assert.equal(batches[0][1], r);
    for (const bad of [undefined, null, {}, c.breaker, 'users']) {
      assert.throws(() => new RequestLoader(bad), (e) => e instanceof TypeError && /^collapser: must be a Collapser, got /.test(e.message));
    }
    c.shutdown();
  });

  test('with cache: false, request loaders still batch apart', async () => {
    const { c, batches } = users({ windowMs: 0, cache: false });
    const a = c.forRequest({ user: 'a' });
    const b = c.forRequest({ user: 'b' });
    assert.deepEqual(await Promise.all([a.load(1), b.load(1), a.load(1)]), ['a:1', 'b:1', 'a:1']);
    assert.deepEqual(batches.map(([ctx, , ids]) => [ctx.user, ids]).sort(), [['a', [1, 1]], ['b', [1]]]);
    a.shutdown();
    c.shutdown();
  });

  test('loads of many requests in one window: each request\'s keys in its own batches, maxBatchSize each', async () => {
    const { c, batches } = users({ windowMs: 0, maxBatchSize: 2 });
    const rs = Array.from({ length: 50 }, (_, i) => c.forRequest({ user: `u${i}` }));
    const got = await Promise.all(rs.flatMap((r) => [r.load(1), r.load(2), r.load(3)]));
    assert.deepEqual(got, rs.flatMap((r) => [`${r.context.user}:1`, `${r.context.user}:2`, `${r.context.user}:3`]));
    assert.equal(batches.length, 100);
    for (const [ctx, self, ids] of batches) {
      assert.equal(self.context, ctx);
      assert.ok(ids.length <= 2);
    }
    c.shutdown();
  });

  test('request loaders dropped without shutdown() let their cache go after garbage collection; one kept keeps its own', () => {
    const script = `
      const { Collapser } = require(${JSON.stringify(require.resolve('fusewire'))});
      const c = new Collapser(async (ids) => ids.map((id) => ({ id, pad: 'x'.repeat(1000) })), { windowMs: 0 });
      let sent = 0;
      const counted = new Collapser(async (ids) => { sent += ids.length; return ids; }, { windowMs: 0 });
      (async () => {
        const kept = counted.forRequest();
        await kept.load('k');
        async function request(i) {
          const r = c.forRequest();
          await r.loadMany([i, i + 1, i + 2]);
          await counted.forRequest().load(i);
        }
        for (let i = 0; i < 2000; i++) await request(i);
        const before = c._payloads.size;
        for (let round = 0; round < 50 && (c._payloads.size > 0 || counted._payloads.size > 1); round++) {
          gc();
          await new Promise((r) => setTimeout(r, 10));
        }
        const sentBefore = sent;
        await kept.load('k');
        console.log(JSON.stringify({ before, after: c._payloads.size, counted: counted._payloads.size, keptHit: sent === sentBefore }));
      })();
    `;
    const r = spawnSync(process.execPath, ['--expose-gc', '-e', script], { encoding: 'utf8', timeout: 120_000 });
    assert.equal(r.status, 0, r.stderr);
    const { before, after, counted, keptHit } = JSON.parse(r.stdout.trim());
    assert.ok(before > 0, `${before} values cached before the collection`);
    assert.equal(after, 0, 'every dropped loader\'s values let go');
    assert.equal(counted, 1, 'the kept loader\'s value stays');
    assert.equal(keptHit, true, 'and is still served from its cache');
  });
});
