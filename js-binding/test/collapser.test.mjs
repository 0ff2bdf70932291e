// Collapser: DataLoader's API (load, loadMany, clear, clearAll, prime) on the core's
// collapser and cache, every batch through a CircuitBreaker.
import assert from 'node:assert/strict';
import { afterEach, describe, test } from 'node:test';

import { CircuitBreaker, Collapser } from 'fusewire';

import { fakeTime, flush } from './helpers.mjs';

let clock;
afterEach(() => {
  clock?.restore();
  clock = undefined;
});

function loader(options = {}, fn) {
  const batches = [];
  const c = new Collapser(async (keys) => {
    batches.push(keys);
    if (fn) return fn(keys);
    return keys.map((k) => (String(k).startsWith('bad') ? new Error(`no ${k}`) : `v:${k}`));
  }, options);
  return { c, batches };
}

describe('Collapser', () => {
  for (const windowMs of [0, 10]) {
    test(`a cache hit settles with the batch being formed, so what follows hits and misses is one batch (windowMs ${windowMs})`, async () => {
      // The GraphQL shape: each resolver awaits its user, then loads its posts (found
      // by a DataLoader user's review: hits settled at once, and the posts of cached
      // users went in a batch of their own).
      const users = new Collapser(async (ids) => ids.map((id) => ({ id })), { windowMs });
      const postBatches = [];
      const posts = new Collapser(async (ids) => {
        postBatches.push(ids);
        return ids.map((id) => `p${id}`);
      }, { windowMs });
      await users.load(1);
      const got = await Promise.all([1, 2, 3].map(async (id) => posts.load((await users.load(id)).id)));
      assert.deepEqual(got, ['p1', 'p2', 'p3']);
      assert.deepEqual(postBatches.map((b) => [...b].sort()), [[1, 2, 3]]);
      // A hit with no batch being formed settles at DataLoader's moment, alone.
      assert.deepEqual(await users.load(2), { id: 2 });
      users.shutdown();
      posts.shutdown();
    });
  }

  test('shutdown: loads still waiting for their window go as a last batch; later loads reject with ESHUTDOWN', async () => {
    const { c, batches } = loader({ windowMs: 50, maxBatchSize: 2 });
    // A prefetch nobody awaits, then shutdown() in a request's `finally` (found by
    // review: the loads were rejected, unhandled, and the process exited).
    const prefetch = c.load(1);
    const more = [c.load(2), c.load(3)];
    c.shutdown();
    assert.deepEqual(batches, [[1, 2], [3]], 'sent at once, in batches of maxBatchSize');
    assert.equal(await prefetch, 'v:1');
    assert.deepEqual(await Promise.all(more), ['v:2', 'v:3']);
    await assert.rejects(c.load(4), (e) => e.code === 'ESHUTDOWN' && CircuitBreaker.isOurError(e) &&
      e.message === 'The collapser has been shut down.');
    c.shutdown();
    assert.deepEqual(batches, [[1, 2], [3]], 'a second shutdown does nothing');
  });

  test('shutdown: nothing stays pending — loads its last batches make, a second shutdown inside them, a breaker shut down first', async () => {
    const settled = (p) => p.then((v) => `ok ${v}`, (e) => `err ${e.code}`);
    // A batch function loading from its own loader while shutdown() sends the last
    // batches (found by review: those loads stayed pending for good).
    let n = 0;
    const a = new Collapser((ks) => {
      const inner = n++ === 1 ? [settled(a.load('new')), settled(a.load('x'))] : [];
      innerLoads.push(...inner);
      return ks.map((k) => `v${k}`);
    }, { windowMs: 10 });
    const innerLoads = [];
    await a.load('x');
    const outer = settled(a.load('b'));
    a.shutdown();
    assert.deepEqual(await Promise.all([outer, ...innerLoads]), ['ok vb', 'err ESHUTDOWN', 'err ESHUTDOWN']);
    // shutdown() called again by a batch function: the other last batches still go.
    const b = new Collapser((ks) => { b.shutdown(); return ks.map((k) => `v${k}`); }, { windowMs: 10, maxBatchSize: 1 });
    const three = ['b', 'c', 'd'].map((k) => settled(b.load(k)));
    b.shutdown();
    assert.deepEqual(await Promise.all(three), ['ok vb', 'ok vc', 'ok vd']);
    // The breaker shut down under a waiting load and a cache hit: the load rejects,
    // the hit settles (both stayed pending).
    const c = new Collapser(async (ks) => ks.map((k) => `v${k}`), { windowMs: 10 });
    await c.load('a');
    const miss = settled(c.load('b'));
    const hit = settled(c.load('a'));
    c.breaker.shutdown();
    c.shutdown();
    assert.deepEqual(await Promise.all([miss, hit]), ['err ESHUTDOWN', 'ok va']);
  });

  test('a thenable value is taken on once, as DataLoader does: its then runs once for the load, its followers and later hits (found by review: a query builder ran again for each)', async () => {
    let runs = 0;
    const q = (id) => ({ then(res) { runs++; res(`v${id}`); } });
    const c = new Collapser(async (ks) => ks.map(q), { windowMs: 0 });
    assert.deepEqual(await Promise.all([c.load(1), c.load(1)]), ['v1', 'v1']);
    assert.equal(await c.load(1), 'v1');
    assert.equal(runs, 1);
    c.prime(2, q(2));
    assert.equal(await c.load(2), 'v2');
    assert.equal(await c.load(2), 'v2');
    assert.equal(runs, 2);
    c.shutdown();
  });

  test('a cache hit made after a batch filled does not wait for that batch (found by review: it waited for the full batch\'s function, as DataLoader\'s next batch does not)', async () => {
    let release;
    const c = new Collapser(async (ks) => {
      if (ks[0] === 'b') await new Promise((r) => { release = r; });
      return ks;
    }, { windowMs: 0, maxBatchSize: 1 });
    assert.equal(await c.load('a'), 'a'); // cached
    const b = c.load('b'); // a miss: fills a batch, whose function waits
    let hit = false;
    const a = c.load('a').then((v) => { hit = true; return v; });
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(hit, true, 'the hit settled while the full batch still runs');
    assert.equal(await a, 'a');
    release();
    assert.equal(await b, 'b');
    c.shutdown();
  });

  test('the cache is bounded in bytes as a breaker\'s is, and the breaker\'s fusewire.cache.max_bytes sets another (found by a security review: 2^40)', async () => {
    const { c } = loader();
    assert.equal(c.breaker.options.fusewire.cache.max_bytes, 256 * 2 ** 20);
    c.shutdown();
    // Two keys of 1 KiB (plus 256 B an entry each) over a bound of 2 000 bytes: the
    // first is evicted, and loads again.
    const { c: small, batches } = loader({ windowMs: 0, breaker: { fusewire: { cache: { max_bytes: 2_000, max_key_bytes: 1_100 } } } });
    const [a, b] = ['a'.repeat(1024), 'b'.repeat(1024)];
    await small.load(a);
    await small.load(b);
    await small.load(b);
    await small.load(a);
    assert.equal(batches.length, 3, 'a loaded twice, b once');
    small.shutdown();
    // An own `__proto__` (JSON.parse makes one) is refused by name before the merge.
    assert.throws(() => new Collapser(async (k) => k, { breaker: JSON.parse('{"fusewire": {"cache": {"__proto__": null}}}') }),
      { name: 'TypeError', message: 'options.breaker.fusewire.cache.__proto__: unknown field' });
  });

  test('a fallback of the wrong length is named as the fallback, not the batch function', async () => {
    const c = new Collapser(async (ks) => ks.map(String), { windowMs: 0 });
    c.breaker.fallback(() => ['only one']);
    c.breaker.open();
    const got = await Promise.allSettled([c.load(1), c.load(2)]);
    for (const r of got) {
      assert.equal(r.status, 'rejected');
      assert.equal(r.reason.message, "Collapser: the breaker's fallback must return an Array of the same length as the Array of keys (2 keys, 1 values)");
    }
    c.shutdown();
    // A fallback answering null (a logging fallback returns nothing): named too (found
    // by review: the batch function was blamed).
    const d = new Collapser(async () => { throw new Error('down'); }, { windowMs: 0 });
    d.breaker.fallback(() => null);
    await assert.rejects(d.load(1), { message: /^Collapser: the breaker's fallback must return an Array/ });
    d.shutdown();
    // `null` options are no options, as in DataLoader.
    const e = new Collapser(async (ks) => ks, null);
    assert.equal(await e.load(3), 3);
    e.shutdown();
  });

  test('shutdown: a load waiting on another load of its key in flight gets that result', async () => {
    let release;
    const gate = new Promise((r) => { release = r; });
    const { c, batches } = loader({ windowMs: 0 }, async (keys) => { await gate; return keys.map((k) => `v:${k}`); });
    const first = c.load('a');
    await new Promise((r) => setImmediate(r)); // its batch is running
    assert.deepEqual(batches, [['a']]);
    const second = c.load('a');
    c.shutdown();
    release();
    assert.deepEqual(await Promise.all([first, second]), ['v:a', 'v:a']);
    assert.deepEqual(batches, [['a']], 'no second batch');
  });

  test('loads within the window become one batch; results map back in order', async () => {
    const { c, batches } = loader({ windowMs: 0 });
    const got = await Promise.all([c.load(1), c.load(2), c.load(3)]);
    assert.deepEqual(got, ['v:1', 'v:2', 'v:3']);
    assert.deepEqual(batches, [[1, 2, 3]]);
    c.shutdown();
  });

  test('a time window (fake time) and maxBatchSize', async () => {
    clock = fakeTime();
    const { c, batches } = loader({ windowMs: 20, maxBatchSize: 3 });
    const ps = [1, 2, 3, 4].map((k) => c.load(k));
    assert.deepEqual(batches, [], 'never inside load() (found by review: the batch function ran in the third load)');
    await flush();
    assert.deepEqual(batches, [[1, 2, 3]], 'a full batch runs once the loading code returns');
    clock.tick(19);
    await flush();
    assert.equal(batches.length, 1);
    clock.tick(2);
    await flush();
    assert.deepEqual(batches, [[1, 2, 3], [4]], 'the rest after the window');
    assert.deepEqual(await Promise.all(ps), ['v:1', 'v:2', 'v:3', 'v:4']);
    c.shutdown();
  });

  test('the cache: repeated keys load once; clear, clearAll, prime; per-key errors are cached', async () => {
    const { c, batches } = loader({ windowMs: 0 });
    assert.deepEqual(await Promise.all([c.load('a'), c.load('a'), c.load('b')]), ['v:a', 'v:a', 'v:b']);
    assert.deepEqual(batches, [['a', 'b']], 'a repeated key joins the first load');
    assert.equal(await c.load('a'), 'v:a');
    assert.equal(batches.length, 1, 'cached');
    c.clear('a');
    assert.equal(await c.load('a'), 'v:a');
    assert.equal(batches.length, 2);
    c.prime('p', 'primed');
    assert.equal(await c.load('p'), 'primed');
    c.prime('p', 'ignored');
    assert.equal(await c.load('p'), 'primed', 'prime does not overwrite');
    await assert.rejects(c.load('bad1'), /no bad1/);
    await assert.rejects(c.load('bad1'), /no bad1/);
    assert.equal(batches.length, 3, 'a per-key Error is cached');
    c.clearAll();
    assert.equal(await c.load('b'), 'v:b');
    assert.equal(batches.length, 4);
    const many = await c.loadMany(['b', 'bad2', 'c']);
    assert.equal(many[0], 'v:b');
    assert.ok(many[1] instanceof Error);
    assert.equal(many[2], 'v:c');
    c.shutdown();
  });

  test('cache: false sends every load; a failed batch fails its loads and is not cached', async () => {
    let fail = true;
    const { c, batches } = loader({ windowMs: 0, cache: false, breaker: { errorThresholdPercentage: 100 } }, (keys) => {
      if (fail) throw new Error('batch down');
      return keys.map(String);
    });
    await assert.rejects(Promise.all([c.load(1), c.load(1)]), /batch down/);
    fail = false;
    assert.deepEqual(await Promise.all([c.load(1), c.load(1)]), ['1', '1']);
    assert.deepEqual(batches, [[1, 1], [1, 1]]);
    c.shutdown();
    const { c: cached, batches: b2 } = loader({ windowMs: 0, breaker: { errorThresholdPercentage: 100 } }, (keys) => {
      if (b2.length === 1) throw new Error('first batch fails');
      return keys.map(String);
    });
    await assert.rejects(cached.load('k'));
    assert.equal(await cached.load('k'), 'k', 'a failed batch was not cached');
    cached.shutdown();
  });

  test('breaker options given as undefined keep the Collapser\'s defaults (found by review: volumeThreshold: undefined was opossum\'s 0)', async () => {
    const c = new Collapser(async () => { throw new Error('down'); },
      { name: 'users', windowMs: 0, cache: false, breaker: { volumeThreshold: undefined, name: undefined } });
    await assert.rejects(c.load(1), /down/);
    assert.equal(c.breaker.closed, true, 'one failed batch of 20 needed');
    assert.equal(c.breaker.name, 'users');
    c.shutdown();
  });

  test('a batch function declaring a signal gets one per batch, aborted when the breaker times the batch out (a fallback answering or not)', async () => {
    clock = fakeTime();
    const turn = () => new Promise((r) => setImmediate(r)); // the batch's process.nextTick
    const signals = [];
    const c = new Collapser((keys, context, signal) => {
      signals.push(signal);
      return new Promise((resolve, reject) => {
        signal.addEventListener('abort', () => reject(signal.reason));
        if (keys[0] === 2) resolve(keys.map(String));
      });
    }, { windowMs: 0, cache: false, breaker: { timeout: 50 } });
    const first = c.load(1);
    await turn();
    assert.equal(signals.length, 1, 'the batch runs');
    assert.equal(signals[0].aborted, false);
    clock.tick(50);
    await assert.rejects(first, { code: 'ETIMEDOUT' });
    assert.equal(signals[0].aborted, true, 'the hung batch was told');
    assert.equal(signals[0].reason.code, 'ETIMEDOUT');
    const second = c.load(2);
    await turn();
    assert.equal(await second, '2');
    assert.equal(signals[1].aborted, false, 'its own signal');
    c.breaker.fallback((keys) => keys.map(() => 'fallback'));
    const third = c.load(3);
    await turn();
    clock.tick(50);
    assert.equal(await third, 'fallback');
    assert.equal(signals[2].aborted, true, 'told though the fallback answered');
    c.shutdown();
    // Two parameters: no signal made (DataLoader's batch functions).
    let args;
    const plain = new Collapser(async (...a) => { args = a.length; return a[0].map(String); }, { windowMs: 0 });
    const p = plain.load(1);
    await turn();
    assert.equal(await p, '1');
    assert.equal(args, 2);
    plain.shutdown();
  });

  test('the batch runs through a breaker: it trips, and its fallback serves the whole batch', async () => {
    const { c } = loader({ windowMs: 0, cache: false, breaker: { volumeThreshold: 1 } }, () => {
      throw new Error('down');
    });
    await assert.rejects(c.load(1), /down/);
    assert.equal(c.breaker.opened, true, 'one failed batch of one call');
    await assert.rejects(c.load(3), { code: 'EOPENBREAKER' });
    c.breaker.fallback((keys) => keys.map((k) => `fallback:${k}`));
    assert.deepEqual(await Promise.all([c.load(4), c.load(5)]), ['fallback:4', 'fallback:5']);
    assert.ok(c.breaker.stats.coalesceCacheHits >= 2, 'collapsed loads are counted');
    c.shutdown();
  });

  test('a wrong batch result length is an error; bad options are TypeErrors', async () => {
    const { c } = loader({ windowMs: 0 }, () => ['only one']);
    await assert.rejects(Promise.all([c.load(1), c.load(2)]), /same length/);
    c.shutdown();
    assert.throws(() => new Collapser(42), TypeError);
    assert.throws(() => new Collapser(async () => [], { windowMs: 'x' }), { message: 'options.windowMs: must be a number, got "x"' });
    const batchSize = 'options.maxBatchSize: must be a number >= 1 (Infinity: the largest batch, 100000), got';
    assert.throws(() => new Collapser(async () => [], { maxBatchSize: 0 }), { message: `${batchSize} 0` });
    assert.throws(() => new Collapser(async () => [], { maxBatchSize: 0.5 }), { message: `${batchSize} 0.5` });
    assert.throws(() => new Collapser(async () => [], { maxBatchSize: NaN }), { message: `${batchSize} NaN` });
    assert.throws(() => new Collapser(async () => [], { maxBatchSize: null }), { message: `${batchSize} null` });
    assert.throws(() => new Collapser(async () => [], { maxBatchSize: '2' }), { message: `${batchSize} "2"` });
    assert.throws(() => new Collapser(async () => [], { maxBatchSize: -Infinity }), { message: `${batchSize} -Infinity` });
    assert.throws(() => new Collapser(async () => [], { windowMs: -1 }), { message: 'options.windowMs: must be in 0..=31536000000 ms, got -1' });
    assert.throws(() => new Collapser(async () => [], { cacheSize: 0 }), { message: 'options.cacheSize: must be an integer in 1..=16777215, got 0' });
    assert.throws(() => new Collapser(async () => [], { breaker: { timeout: 'x' } }), { message: 'options.breaker.timeout: must be a number, got "x"' });
    // As DataLoader: thrown from the call, not a rejected promise.
    assert.throws(() => new Collapser(async () => []).loadMany('x'), TypeError);
    assert.throws(() => new Collapser(async () => []).load(null),
      { name: 'TypeError', message: 'The loader.load() function must be called with a value, but got: null.' });
    assert.throws(() => new Collapser(async () => [], { name: 7 }), { message: 'options.name: must be a string, got 7' });
    assert.throws(() => new Collapser(async () => [], { batch: false }),
      { name: 'TypeError', message: /^options\.batch: not a Collapser option \(known: windowMs/ });
  });

  test('numeric options past the core\'s ranges (past 2^32 too) are named with their range, as the breaker\'s (found by review)', () => {
    const range = (o, message) => assert.throws(() => new Collapser(async () => [], o), { name: 'TypeError', message });
    range({ cacheSize: 2 ** 32 }, 'options.cacheSize: must be an integer in 1..=16777215, got 4294967296');
    range({ cacheSize: 2 ** 24 }, 'options.cacheSize: must be an integer in 1..=16777215, got 16777216');
    range({ windowMs: 2 ** 53 }, 'options.windowMs: must be in 0..=31536000000 ms, got 9007199254740992');
    // A fraction of a millisecond rounds up, as every breaker duration (found by review).
    for (const o of [{ cacheSize: 2 ** 24 - 1 }, { maxBatchSize: 100_000 }, { windowMs: 31_536_000_000 }, { windowMs: 1.5 }]) {
      new Collapser(async () => [], o).shutdown();
    }
  });

  test('maxBatchSize as DataLoader reads it: a fraction rounds up (a batch holds fewer keys than it), past the largest batch is the largest (found running DataLoader\'s tests)', async () => {
    const { c, batches } = loader({ windowMs: 0, maxBatchSize: 2.5 });
    await Promise.all([1, 2, 3, 4, 5, 6, 7].map((k) => c.load(k)));
    assert.deepEqual(batches, [[1, 2, 3], [4, 5, 6], [7]]);
    c.shutdown();
    for (const maxBatchSize of [100_001, 2 ** 32, Number.MAX_VALUE]) {
      const { c: big, batches: b } = loader({ windowMs: 0, maxBatchSize });
      const keys = Array.from({ length: 1500 }, (_, i) => i);
      await Promise.all(keys.map((k) => big.load(k)));
      assert.deepEqual(b.map((x) => x.length), [1500], String(maxBatchSize));
      big.shutdown();
    }
  });

  test('cacheKeyFn runs with the loader as `this`, as DataLoader\'s (found running DataLoader\'s tests)', async () => {
    let that;
    const c = new Collapser(async (keys) => keys, { windowMs: 0, cacheKeyFn(k) { that = this; return k; } });
    assert.equal(await c.load(1), 1);
    assert.equal(that, c);
    c.shutdown();
  });

  test('a batch result that is not an array says what it got; a wrong length says both lengths', async () => {
    const { c } = loader({ windowMs: 0 }, () => null);
    await assert.rejects(c.load(1), { name: 'TypeError', message: /did not return a Promise of an Array: got null\.$/ });
    c.shutdown();
    const { c: short } = loader({ windowMs: 0 }, () => ['only one']);
    await assert.rejects(Promise.all([short.load(1), short.load(2)]),
      { name: 'TypeError', message: /of the same length as the Array of keys \(2 keys, 1 values\)\.$/ });
    short.shutdown();
  });

  test('prime(key, promise): loads get what it settles with (DataLoader 2.2.3 types it so)', async () => {
    const { c, batches } = loader({ windowMs: 0 });
    c.prime('p', Promise.resolve('from a promise'));
    c.prime('q', Promise.reject(new Error('rejected promise')));
    assert.equal(await c.load('p'), 'from a promise');
    await assert.rejects(c.load('q'), /rejected promise/);
    assert.equal(batches.length, 0);
    c.shutdown();
  });

  test('maxBatchSize: Infinity (DataLoader\'s default) is accepted: one batch of every load in the window', async () => {
    const { c, batches } = loader({ windowMs: 0, maxBatchSize: Infinity });
    const keys = Array.from({ length: 2500 }, (_, i) => i);
    const got = await Promise.all(keys.map((k) => c.load(k)));
    assert.equal(got.length, 2500);
    assert.deepEqual(batches.map((b) => b.length), [2500], 'beyond the default 1000');
    c.shutdown();
  });

  test('a batch function that loads while a full batch runs: the load joins the batch still collecting (as in DataLoader)', async () => {
    const seen = [];
    const c = new Collapser(async (keys) => {
      seen.push([...keys]);
      if (keys.includes(1)) void c.load(99);
      return keys.map((k) => k * 10);
    }, { windowMs: 0, maxBatchSize: 2 });
    assert.deepEqual(await Promise.all([c.load(1), c.load(2), c.load(3)]), [10, 20, 30]);
    await flush();
    assert.deepEqual(seen, [[1, 2], [3, 99]], 'DataLoader gives the same batches');
    c.shutdown();
  });

  // Found by review (DataLoader parity).
  test('keys of different types never share a result; cacheKeyFn may return a number', async () => {
    const { c, batches } = loader({ windowMs: 0 });
    // Lone surrogates too: UTF-8 has none (found by a test: '\ud800', '\udc00' and
    // '\ufffd' were one key).
    const keys = [1, '1', NaN, 'null', Infinity, 1n, '1n', true, 'true', '\ud800', '\udc00', '\ufffd', 'é', 'e\u0301'];
    const got = await Promise.all(keys.map((k) => c.load(k)));
    assert.deepEqual(got, keys.map((k) => `v:${String(k)}`));
    assert.equal(batches[0].length, keys.length, 'every key sent');
    assert.equal(await c.load(-0), 'v:0', '-0 is 0, as in a Map');
    const byId = loader({ windowMs: 0, cacheKeyFn: (k) => k.id });
    assert.deepEqual(await Promise.all([byId.c.load({ id: 1 }), byId.c.load({ id: 1, x: 2 })]), ['v:[object Object]', 'v:[object Object]']);
    assert.equal(byId.batches[0].length, 1, 'one id, one key');
    await assert.rejects(c.load(Symbol('s')), { name: 'TypeError', message: /has no cache key/ });
    const cycle = {};
    cycle.self = cycle;
    await assert.rejects(c.load(cycle), { name: 'TypeError', message: /^the key an object has no JSON \(.*circular.*\); pass cacheKeyFn$/ });
    c.shutdown();
    byId.c.shutdown();
  });

  test('a batch result that is not one value per key is a failed batch to the breaker: it opens, and its fallback answers (found by review: it counted as a success)', async () => {
    const c = new Collapser(async (keys) => ({ rows: keys }), {
      windowMs: 0, breaker: { volumeThreshold: 1, errorThresholdPercentage: 1 },
    });
    const first = await Promise.allSettled([c.load(1), c.load(2)]);
    assert.deepEqual(first.map((r) => r.status), ['rejected', 'rejected']);
    assert.match(first[0].reason.message, /^Collapser must be constructed with a function which accepts Array<key> and returns Promise<Array<value>>, but the function did not return a Promise of an Array: got/);
    assert.equal(c.breaker.stats.failures, 1);
    assert.equal(c.breaker.stats.successes, 0);
    assert.equal(c.breaker.opened, true);
    c.breaker.fallback((keys) => keys.map(() => null));
    assert.deepEqual(await Promise.all([c.load(3), c.load(4)]), [null, null], 'the fallback answers the open breaker\'s batches');
    const short = new Collapser(async (keys) => keys.slice(1), { windowMs: 0, breaker: { volumeThreshold: 1, errorThresholdPercentage: 1 } });
    short.breaker.fallback((keys) => keys.map((k) => `fb:${k}`));
    assert.deepEqual(await Promise.all([short.load(1), short.load(2)]), ['fb:1', 'fb:2'], 'too few values: the fallback answers at once');
    c.shutdown();
    short.shutdown();
  });

  test('one failed batch does not open the breaker; fallback values are never cached', async () => {
    let up = false;
    const { c, batches } = loader({ windowMs: 0 }, (keys) => {
      if (!up) throw new Error('down');
      return keys.map((k) => `v:${k}`);
    });
    await assert.rejects(c.load(1), /down/);
    assert.equal(c.breaker.opened, false, 'Hystrix volume threshold (20 batches)');
    c.breaker.fallback((keys) => keys.map(() => null));
    c.breaker.open();
    assert.deepEqual(await Promise.all([c.load(1), c.load(1), c.load(2)]), [null, null, null]);
    up = true;
    c.breaker.close();
    assert.deepEqual(await Promise.all([c.load(1), c.load(2)]), ['v:1', 'v:2'], 'loaded again, not the cached fallback');
    assert.deepEqual(batches.at(-1), [1, 2]);
    c.shutdown();
  });

  test('windowMs 0 batches as DataLoader: after the promise jobs, then a tick', async () => {
    const { c, batches } = loader({ windowMs: 0 });
    const later = async (n, k) => {
      for (let i = 0; i < n; i++) await null;
      return c.load(k);
    };
    const ps = [c.load('a'), later(1, 'b'), later(3, 'c'), later(20, 'd'),
      new Promise((r) => process.nextTick(() => r(c.load('e'))))];
    await Promise.all(ps);
    assert.deepEqual(batches, [['a', 'b', 'c', 'd', 'e']]);
    c.shutdown();
  });

  test('clear() or clearAll() while a load is in flight: its callers get it, then it is forgotten', async () => {
    for (const how of ['clear', 'clearAll']) {
      let value = 'old';
      let release;
      const { c, batches } = loader({ windowMs: 0 }, async (keys) => {
        const read = value; // what the source held when the batch read it
        await new Promise((r) => { release = r; });
        return keys.map(() => read);
      });
      const first = c.load('u');
      await new Promise((r) => setTimeout(r, 5));
      value = 'new';
      if (how === 'clear') c.clear('u');
      else c.clearAll();
      release();
      assert.equal(await first, 'old');
      const again = c.load('u');
      await new Promise((r) => setTimeout(r, 5));
      release();
      assert.equal(await again, 'new', `${how}: loaded again`);
      assert.equal(batches.length, 2);
      c.shutdown();
    }
  });

  test('clear(key).prime(key, value) while the key loads: loads made before the clear keep the load\'s result, later ones get the primed value', async () => {
    for (const how of ['clear', 'clearAll']) {
      let release;
      const { c, batches } = loader({ windowMs: 0 }, async (keys) => {
        await new Promise((r) => { release = r; });
        return keys.map(() => 'loaded');
      });
      const p1 = c.load(1);
      const p2 = c.load(1); // joins the load in flight
      await new Promise((r) => setTimeout(r, 5));
      const p3 = c.load(1); // joins it while it runs
      if (how === 'clear') c.clear(1).prime(1, 'primed');
      else c.clearAll().prime(1, 'primed');
      assert.equal(await c.load(1), 'primed', `${how}: a load after the prime`);
      release();
      assert.deepEqual(await Promise.all([p1, p2, p3]), ['loaded', 'loaded', 'loaded'], how);
      assert.equal(await c.load(1), 'primed', `${how}: the prime stays cached`);
      assert.equal(batches.length, 1);
      c.shutdown();
    }
  });

  test('a load after clear(key) while the key loads loads it again, as in DataLoader; a prime then finds it loading (found by review: it joined the load from before the clear, and the prime answered it)', async () => {
    for (const how of ['clear', 'clearAll']) {
      const releases = [];
      let n = 0;
      const { c, batches } = loader({ windowMs: 0 }, async (keys) => {
        const round = ++n;
        await new Promise((r) => releases.push(r));
        return keys.map(() => `loaded ${round}`);
      });
      const p1 = c.load(1);
      await new Promise((r) => setTimeout(r, 5));
      if (how === 'clear') c.clear(1);
      else c.clearAll();
      const p2 = c.load(1); // a load of its own
      const p3 = c.load(1); // joins p2's
      c.prime(1, new Error('primed')); // the key is loading: no effect
      await new Promise((r) => setTimeout(r, 5));
      assert.equal(batches.length, 2, how);
      for (const r of releases) r();
      assert.deepEqual(await Promise.all([p1, p2, p3]), ['loaded 1', 'loaded 2', 'loaded 2'], how);
      assert.equal(await c.load(1), 'loaded 2', `${how}: the second load is cached`);
      assert.equal(batches.length, 2);
      c.shutdown();
    }
  });

  test('a breaker listener that throws when a batch fires fails that batch only; every load settles', async () => {
    const { c, batches } = loader({ windowMs: 0, maxBatchSize: 2 }, async (keys) => keys.map((k) => `v${k}`));
    let once = true;
    c.breaker.on('fire', () => {
      if (once) {
        once = false;
        throw new Error('listener');
      }
    });
    const loads = [1, 2, 3, 4, 5].map((k) => c.load(k).then((v) => v, (e) => e.message));
    assert.deepEqual(await Promise.all(loads), ['listener', 'listener', 'v3', 'v4', 'v5']);
    assert.deepEqual(batches, [[3, 4], [5]]);
    c.shutdown();
  });
});

test('a copy of a Collapser breaker\'s options makes a plain breaker (found by review: the internal mark came along)', async () => {
  const c = new Collapser(async (keys) => keys);
  const copy = { ...c.breaker.options };
  assert.throws(() => new CircuitBreaker(async () => 1, copy),
    { name: 'TypeError', message: /^options\.fusewire\.collapser: a CircuitBreaker has no collapser/ });
  assert.deepEqual(await c.loadMany([1, 2]), [1, 2]);
  c.shutdown();
});

describe('found by review: cached errors and odd values', () => {
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  /** Records unhandled rejections while `f` runs (and a little after). */
  async function unhandledDuring(f) {
    const seen = [];
    const on = (e) => seen.push(e);
    process.on('unhandledRejection', on);
    try {
      await f();
      await sleep(30);
    } finally {
      process.off('unhandledRejection', on);
    }
    return seen;
  }

  test('a cached Error hit in a full batch settles once, while another batch is in flight (it settled early and again: an unhandled rejection)', async () => {
    for (const request of [false, true]) {
      const users = new Collapser(async (ids) => {
        await sleep(5);
        return ids.map((id) => (id === 0 ? new Error('not found') : { id }));
      }, { windowMs: 0, maxBatchSize: 2 });
      const l = request ? users.forRequest() : users;
      const seen = await unhandledDuring(async () => {
        await l.load(0).catch(() => {}); // the Error is cached
        const first = l.load(1); // a batch in flight
        await sleep(1);
        const got = await Promise.allSettled([l.load(2), l.load(0), l.load(3), first]);
        assert.deepEqual(got.map((r) => r.status), ['fulfilled', 'rejected', 'fulfilled', 'fulfilled']);
        assert.equal(got[1].reason.message, 'not found');
      });
      assert.deepEqual(seen, [], `request loader: ${request}`);
      users.shutdown();
    }
  });

  test('a value whose then getter throws fails its own load only, as in DataLoader (the batch, and later loads of its keys, waited for good)', async () => {
    const strict = (o) => new Proxy(o, {
      get(t, p) {
        if (!(p in t)) throw new Error(`unknown property ${String(p)}`);
        return t[p];
      },
    });
    const l = new Collapser(async (ids) => ids.map((id) => (id === 1 ? strict({ id }) : { id })), { windowMs: 0 });
    const seen = await unhandledDuring(async () => {
      const got = await Promise.race([
        Promise.allSettled([l.load(1), l.load(2), l.load(3)]),
        sleep(200).then(() => 'pending'),
      ]);
      assert.notEqual(got, 'pending');
      assert.deepEqual(got.map((r) => r.status), ['rejected', 'fulfilled', 'fulfilled']);
      assert.equal(got[0].reason.message, 'unknown property then');
      assert.deepEqual(await l.load(2), { id: 2 }, 'a later load of its batch\'s keys');
    });
    assert.deepEqual(seen, []);
    l.shutdown();
  });
});
