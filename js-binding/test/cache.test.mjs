// opossum's cache and coalesce options on the core's request caches (cacheTransport
// stays pluggable).
import assert from 'node:assert/strict';
import { getEventListeners } from 'node:events';
import { afterEach, describe, test } from 'node:test';

import { CircuitBreaker } from 'fusewire';

import { deferred, fakeTime, flush, record } from './helpers.mjs';

let clock;
afterEach(() => {
  clock?.restore();
  clock = undefined;
});

function counted(options) {
  const calls = [];
  const b = new CircuitBreaker(async (x) => {
    calls.push(x);
    if (String(x).startsWith('fail')) throw new Error(`failed ${x}`);
    return `v:${x}:${calls.length}`;
  }, options);
  return { b, calls };
}

describe('cache', () => {
  test('arguments with no JSON key reject the call instead of throwing from fire (found by review)', async () => {
    for (const options of [{ cache: true }, { coalesce: true }]) {
      const { b, calls } = counted(options);
      const cycle = {};
      cycle.self = cycle;
      let p;
      assert.doesNotThrow(() => { p = b.fire(cycle); });
      await assert.rejects(p, { name: 'TypeError', message: /^cacheGetKey: the arguments have no JSON key \(.*circular.*\); pass cacheGetKey$/ });
      await assert.rejects(b.fire(1n), { name: 'TypeError', message: /BigInt/ });
      assert.deepEqual(calls, []);
      assert.equal(await b.fire('a'), 'v:a:1', 'the breaker goes on');
      assert.equal(b.stats.failures, 0);
      b.shutdown();
    }
  });

  test('the first successful result per key is served from the cache', async () => {
    const { b, calls } = counted({ cache: true });
    const log = record(b, ['cacheHit', 'cacheMiss', 'fire', 'success']);
    assert.equal(await b.fire('a'), 'v:a:1');
    assert.equal(await b.fire('a'), 'v:a:1', 'served from the cache');
    assert.equal(await b.fire('b'), 'v:b:2');
    assert.deepEqual(calls, ['a', 'b']);
    assert.deepEqual(log.map((e) => e[0]),
      ['fire', 'cacheMiss', 'success', 'fire', 'cacheHit', 'fire', 'cacheMiss', 'success']);
    const s = b.stats;
    assert.equal(s.cacheHits, 1);
    assert.equal(s.cacheMisses, 2);
    assert.equal(s.fires, 3, 'a cache hit is a fire');
    b.clearCache();
    assert.equal(await b.fire('a'), 'v:a:3', 'clearCache empties it');
    b.shutdown();
  });

  test('failures are not cached; cacheGetKey; cacheTTL; cacheSize', async () => {
    clock = fakeTime();
    const { b, calls } = counted({ cache: true, cacheTTL: 1000, errorThresholdPercentage: 100,
      cacheGetKey: (x) => String(x).slice(0, 1) });
    await assert.rejects(b.fire('fail1'));
    await assert.rejects(b.fire('fail2'), /failed fail2/, 'the failure was not cached');
    assert.equal(await b.fire('x1'), 'v:x1:3');
    assert.equal(await b.fire('x2'), 'v:x1:3', 'same key (first character)');
    clock.tick(1001);
    assert.equal(await b.fire('x3'), 'v:x3:4', 'expired after cacheTTL');
    b.shutdown();
    const { b: small, calls: c2 } = counted({ cache: true, cacheSize: 2 });
    for (const k of ['a', 'b', 'c', 'a', 'b', 'c']) await small.fire(k);
    assert.ok(c2.length > 3 && c2.length <= 6, `bounded at 2 entries: ${c2.length} calls`);
    small.shutdown();
    void calls;
  });

  test('a key too large for the scratch buffer runs uncached, never throws (found by a security review: fire() threw synchronously)', async () => {
    const { b, calls } = counted({ cache: true, coalesce: true });
    const huge = 'k'.repeat(6_000_000);
    let p;
    assert.doesNotThrow(() => { p = b.fire(huge); });
    assert.match(await p, /^v:k+:1$/);
    assert.match(await b.fire(huge), /^v:k+:2$/, 'not kept: it runs again');
    assert.equal(await b.fire('small'), 'v:small:3');
    assert.equal(await b.fire('small'), 'v:small:3', 'the cache still works');
    assert.equal(calls.length, 3);
    b.shutdown();
  });

  test('a cache holds max_bytes of keys plus 256 B an entry (found by a security review: unique short keys could fill the .wasm)', async () => {
    // 10 entries of short keys fit in 10 × (256 + key) bytes; the 11th evicts one.
    const { b, calls } = counted({ cache: true, fusewire: { cache: { max_bytes: 10 * 270, max_key_bytes: 64 } } });
    for (let i = 0; i < 10; i++) await b.fire(`k${i}`);
    for (let i = 0; i < 10; i++) await b.fire(`k${i}`);
    assert.equal(calls.length, 10, 'the ten are kept');
    for (let i = 10; i < 40; i++) await b.fire(`k${i}`);
    const before = calls.length;
    for (let i = 0; i < 40; i++) await b.fire(`k${i}`);
    assert.ok(calls.length - before >= 25, `at most about ten kept of 40: ${calls.length - before} ran again`);
    b.shutdown();
  });

  test('a custom cacheTransport decides hits (opossum\'s pluggable cache)', async () => {
    const map = new Map();
    const ops = [];
    const transport = {
      get: (k) => {
        ops.push(['get', k]);
        return map.get(k)?.value;
      },
      set: (k, v, expiresAt) => {
        ops.push(['set', k, expiresAt]);
        map.set(k, { value: v, expiresAt });
      },
      flush: () => {
        ops.push(['flush']);
        map.clear();
      },
    };
    const { b, calls } = counted({ cache: true, cacheTransport: transport });
    assert.equal(await b.fire(1), 'v:1:1');
    await flush();
    assert.equal(await b.fire(1), 'v:1:1');
    assert.deepEqual(calls, [1]);
    assert.deepEqual(ops.map((o) => o[0]), ['get', 'set', 'get']);
    assert.equal(ops[1][1], '[1]', 'the default key is JSON.stringify(args)');
    assert.equal(ops[1][2], 0, 'cacheTTL 0: no expiry');
    b.clearCache();
    assert.deepEqual(ops.at(-1), ['flush']);
    assert.equal(b.stats.cacheHits, 1);
    assert.equal(b.stats.cacheMisses, 1);
    b.shutdown();
  });

  test('keys from cacheGetKey that differ never share an entry: 1 and \'1\', two objects (found by review: String() merged them)', async () => {
    const { b, calls } = counted({ cache: true, cacheGetKey: (x) => x });
    assert.equal(await b.fire(1), 'v:1:1');
    assert.equal(await b.fire('1'), 'v:1:2', '\'1\' is not 1');
    assert.equal(await b.fire(1), 'v:1:1');
    assert.equal(await b.fire('1'), 'v:1:2');
    const ka = { id: 'a' };
    const kb = { id: 'b' };
    assert.equal(await b.fire(ka), 'v:[object Object]:3');
    assert.equal(await b.fire(kb), 'v:[object Object]:4', 'another object is another key');
    assert.equal(await b.fire(ka), 'v:[object Object]:3');
    assert.equal(calls.length, 4);
    b.shutdown();
    const gates = [];
    const c = new CircuitBreaker((x) => {
      const d = deferred();
      gates.push([x, d]);
      return d.promise;
    }, { coalesce: true, cacheGetKey: (x) => x });
    const p = [c.fire(1), c.fire('1'), c.fire(1)];
    assert.deepEqual(gates.map((g) => g[0]), [1, '1'], 'coalesced by key: 1 and \'1\' apart');
    gates.forEach(([x, d]) => d.resolve(typeof x));
    assert.deepEqual(await Promise.all(p), ['number', 'string', 'number']);
    c.shutdown();
    const keys = [];
    const map = new Map();
    const transport = {
      get: (k) => {
        keys.push(k);
        return map.get(k);
      },
      set: (k, v) => map.set(k, v),
      flush: () => map.clear(),
    };
    const { b: t } = counted({ cache: true, cacheTransport: transport, cacheGetKey: (x) => x });
    assert.equal(await t.fire(1), 'v:1:1');
    assert.equal(await t.fire('1'), 'v:1:2');
    assert.deepEqual(keys, [1, '1'], 'a custom transport gets the key as returned');
    t.shutdown();
  });


  test('every distinct string key keeps its own entry: ASCII up to 64 characters and longer, accented, astral, lone surrogates (found by this test: UTF-8 has no lone surrogate, and \'\\ud800\' and \'\\udc00\' were one key)', async () => {
    const { b, calls } = counted({ cache: true, cacheGetKey: (x) => x });
    const long = 'k'.repeat(64);
    const keys = [
      'e', 'é', 'e\u0301', long, `${long}x`, `${long}y`, `${long}é`, `${'é'.repeat(40)}`, `${'é'.repeat(40)}e`,
      '😀', '😁', `a${'😀'.repeat(30)}`, '\ud800', '\udc00', '\ufffd', 'a\ud800b', '\udc00\ud800', 'a\u007f', 'a\u0080', '',
      // As long in bytes as UTF-8 would make it (found by review: within the 64 KiB key bound).
      `${'k'.repeat(40_000)}\ud800`,
    ];
    for (const k of keys) await b.fire(k);
    assert.equal(calls.length, keys.length, 'each key ran once');
    for (const [i, k] of keys.entries()) {
      assert.equal(await b.fire(k), `v:${k}:${i + 1}`, `key ${JSON.stringify(k)} is served its own result`);
    }
    assert.equal(calls.length, keys.length, 'then every one was a hit');
    b.shutdown();
  });
  test('stats read in a custom transport\'s cacheMiss and cacheHit listeners count that event (found by review: one behind)', async () => {
    const map = new Map();
    const transport = { get: (k) => map.get(k), set: (k, v) => map.set(k, v), flush: () => map.clear() };
    const { b } = counted({ cache: true, cacheTransport: transport });
    const seen = [];
    b.on('cacheMiss', () => seen.push(['cacheMiss', b.stats.fires, b.stats.cacheMisses]));
    b.on('cacheHit', () => seen.push(['cacheHit', b.stats.fires, b.stats.cacheHits]));
    await b.fire('a');
    await flush();
    await b.fire('a');
    assert.deepEqual(seen, [['cacheMiss', 1, 1], ['cacheHit', 2, 1]]);
    b.shutdown();
  });
});

describe('coalesce', () => {
  test('followers waiting when the breaker shuts down get the leader\'s result (found by review: they never settled)', async () => {
    let release;
    const b = new CircuitBreaker((x) => new Promise((r) => {
      release = () => r(`v${x}`);
    }), { coalesce: true });
    const leader = b.fire(1);
    const follower = b.fire(1);
    b.shutdown();
    release();
    assert.equal(await leader, 'v1');
    assert.equal(await follower, 'v1');
  });

  test('concurrent calls with one key share one call', async () => {
    const gates = [];
    const b = new CircuitBreaker((x) => {
      const d = deferred();
      gates.push([x, d]);
      return d.promise;
    }, { coalesce: true, coalesceTTL: 1 });
    const log = record(b, ['coalesceCacheHit', 'coalesceCacheMiss']);
    const p1 = b.fire('k');
    const p2 = b.fire('k');
    const p3 = b.fire('other');
    assert.equal(gates.length, 2, 'one call for k, one for other');
    gates[0][1].resolve('shared');
    gates[1][1].resolve('own');
    assert.deepEqual(await Promise.all([p1, p2, p3]), ['shared', 'shared', 'own']);
    assert.deepEqual(log.map((e) => e[0]), ['coalesceCacheMiss', 'coalesceCacheHit', 'coalesceCacheMiss']);
    const s = b.stats;
    assert.equal(s.coalesceCacheHits, 1);
    assert.equal(s.coalesceCacheMisses, 2);
    b.shutdown();
  });

  test('a failure is shared with the followers; coalesceTTL; coalesceResetOn', async () => {
    clock = fakeTime();
    const { b, calls } = counted({ coalesce: true, coalesceTTL: 500 });
    const [r1, r2] = await Promise.allSettled([b.fire('fail'), b.fire('fail')]);
    assert.equal(r1.reason.message, 'failed fail');
    assert.equal(r2.reason.message, 'failed fail', 'the follower got the leader\'s failure');
    assert.equal(calls.length, 1);
    assert.equal(await b.fire('x'), 'v:x:2');
    assert.equal(await b.fire('x'), 'v:x:2', 'kept for coalesceTTL');
    clock.tick(501);
    assert.equal(await b.fire('x'), 'v:x:3', 'after coalesceTTL: a new call');
    b.shutdown();
    const { b: r, calls: c } = counted({ coalesce: true, coalesceTTL: 10_000, coalesceResetOn: ['success', 'error'] });
    assert.equal(await r.fire('y'), 'v:y:1');
    assert.equal(await r.fire('y'), 'v:y:2', 'reset on success');
    await assert.rejects(r.fire('fail'));
    await assert.rejects(r.fire('fail'));
    assert.equal(c.length, 4, 'reset on error');
    r.shutdown();
  });

  test('shutdown() lets go of every cached value, though the breaker is still referenced (found by review: 500 shut-down breakers kept 95 MB of cached results)', async () => {
    const b = new CircuitBreaker(async (k) => ({ k, big: 'x'.repeat(1000) }), { cache: true, cacheSize: 1000 });
    for (let i = 0; i < 200; i++) await b.fire(`k${i}`);
    const held = () => b._payloads[0].size + b._payloads[1].size; // (white-box: what the wrapper holds)
    assert.ok(held() >= 200, `cached: ${held()}`);
    b.shutdown();
    assert.equal(held(), 0);
  });

  test('clearCache() while a coalesced call runs: later calls start a new one, the ones that joined keep its result (found by review: they still joined it)', async () => {
    const gates = [];
    const b = new CircuitBreaker((x) => {
      const d = deferred();
      gates.push(d);
      return d.promise;
    }, { coalesce: true });
    const log = record(b, ['coalesceCacheHit', 'coalesceCacheMiss']);
    const lead = b.fire('k');
    const joined = b.fire('k');
    b.clearCache();
    const fresh = b.fire('k');
    assert.equal(gates.length, 2, 'a new call after clearCache()');
    const again = b.fire('k');
    assert.equal(gates.length, 2, 'which later calls join');
    gates[0].resolve('old');
    gates[1].resolve('new');
    assert.deepEqual(await Promise.all([lead, joined, fresh, again]), ['old', 'old', 'new', 'new']);
    assert.equal(await b.fire('k'), 'new', 'the new call\'s result is the one kept');
    assert.deepEqual(log.map((e) => e[0]),
      ['coalesceCacheMiss', 'coalesceCacheHit', 'coalesceCacheMiss', 'coalesceCacheHit', 'coalesceCacheHit']);
    b.shutdown();
  });

  test('stats read in coalesceCacheMiss and coalesceCacheHit listeners count that event (found by review: one behind)', async () => {
    const gates = [];
    const b = new CircuitBreaker(() => {
      const d = deferred();
      gates.push(d);
      return d.promise;
    }, { coalesce: true });
    const seen = [];
    b.on('coalesceCacheMiss', () => seen.push(['miss', b.stats.fires, b.stats.coalesceCacheMisses]));
    b.on('coalesceCacheHit', () => seen.push(['hit', b.stats.fires, b.stats.coalesceCacheHits]));
    const p = [b.fire('k'), b.fire('k')];
    gates[0].resolve(1);
    await Promise.all(p);
    assert.deepEqual(seen, [['miss', 1, 1], ['hit', 2, 1]]);
    b.shutdown();
  });

  test('cache and coalesce together', async () => {
    const { b, calls } = counted({ cache: true, coalesce: true });
    const [a, c] = await Promise.all([b.fire('k'), b.fire('k')]);
    assert.equal(a, c);
    assert.equal(await b.fire('k'), a);
    assert.equal(calls.length, 1);
    assert.ok(b.stats.cacheHits + b.stats.coalesceCacheHits >= 2);
    b.shutdown();
  });

  test('a cacheMiss listener that reads stats does not make the cache serve another key (found by review)', async () => {
    const delay = (ms) => new Promise((r) => setTimeout(r, ms));
    const b = new CircuitBreaker((k) => delay(k === 'a' ? 30 : 10).then(() => `value-of-${k}`), { cache: true });
    const other = new CircuitBreaker(async () => 1);
    b.on('cacheMiss', () => {
      void b.stats;
      void other.stats;
    });
    assert.deepEqual(await Promise.all([b.fire('a'), b.fire('b')]), ['value-of-a', 'value-of-b']);
    assert.deepEqual([await b.fire('a'), await b.fire('b')], ['value-of-a', 'value-of-b']);
    assert.equal(b.stats.cacheHits, 2);
    b.shutdown();
    other.shutdown();
  });
});

describe('coalesce: a leader refused or gone is not shared (found by review)', () => {
  /** A breaker whose calls settle when the test says (gates[i] for the i-th call). */
  function gatedBreaker(options) {
    const gates = [];
    const b = new CircuitBreaker((x) => {
      const d = deferred();
      gates.push({ x, ...d });
      return d.promise;
    }, options);
    return { b, gates };
  }
  const outcome = (p) => p.then((v) => ({ ok: v }), (e) => ({ err: e.code ?? e.message }));

  test('a short-circuited call is neither shared nor kept: a call arriving while open gets its own reject; after closing the action runs', async () => {
    const { b, calls } = counted({ coalesce: true, coalesceTTL: 60_000 });
    const log = record(b, ['coalesceCacheHit', 'coalesceCacheMiss', 'reject']);
    b.open();
    const both = await Promise.all([outcome(b.fire('k')), outcome(b.fire('k'))]);
    assert.deepEqual(both, [{ err: 'EOPENBREAKER' }, { err: 'EOPENBREAKER' }]);
    assert.deepEqual(log.map((e) => e[0]), ['coalesceCacheMiss', 'reject', 'coalesceCacheMiss', 'reject'],
      'as opossum: the second call is a miss with its own reject, not a coalesced hit');
    assert.equal(b.stats.coalesceCacheHits, 0);
    assert.equal(b.stats.rejects, 2);
    b.close();
    assert.equal(await b.fire('k'), 'v:k:1', 'the rejection was not kept for the key');
    assert.deepEqual(calls, ['k']);
    b.shutdown();
  });

  test('nor is its fallback\'s value', async () => {
    const { b, calls } = counted({ coalesce: true, coalesceTTL: 60_000 });
    b.fallback(() => 'FALLBACK');
    b.open();
    assert.equal(await b.fire('k'), 'FALLBACK');
    b.close();
    assert.equal(await b.fire('k'), 'v:k:1');
    assert.deepEqual(calls, ['k']);
    b.shutdown();
  });

  test('a call refused by the bulkhead (ESEMLOCKED) is neither shared nor kept', async () => {
    const { b, gates } = gatedBreaker({ coalesce: true, capacity: 1, coalesceTTL: 60_000 });
    const busy = b.fire('a');
    assert.deepEqual(await outcome(b.fire('k')), { err: 'ESEMLOCKED' });
    gates[0].resolve('A');
    assert.equal(await busy, 'A');
    const again = b.fire('k');
    assert.equal(gates.length, 2, 'a new call for the key');
    gates[1].resolve('K');
    assert.equal(await again, 'K');
    b.shutdown();
  });

  test('timeout: false: a hung leader holds its key for coalesceTTL at most; then its follower and later calls run anew', async () => {
    clock = fakeTime();
    const { b, gates } = gatedBreaker({ coalesce: true, coalesceTTL: 50, timeout: false });
    const leader = outcome(b.fire('k')); // hangs for good
    const follower = outcome(b.fire('k'));
    clock.tick(40);
    assert.equal(gates.length, 1, 'within coalesceTTL: shared');
    clock.tick(20);
    await flush();
    assert.equal(gates.length, 2, 'past it: the follower runs its own call');
    const later = outcome(b.fire('k'));
    const joined = outcome(b.fire('k'));
    await flush();
    assert.equal(gates.length, 3, 'a later call leads anew, and is shared');
    gates[1].resolve('F');
    gates[2].resolve('L');
    assert.deepEqual(await follower, { ok: 'F' });
    assert.deepEqual([await later, await joined], [{ ok: 'L' }, { ok: 'L' }]);
    gates[0].resolve('late');
    assert.deepEqual(await leader, { ok: 'late' }, 'the hung call still answers its own caller');
    b.shutdown();
  });

  test('a leader refused from the bulkhead queue: its follower runs its own call', async () => {
    clock = fakeTime();
    const { b, gates } = gatedBreaker({ coalesce: true, timeout: false,
      fusewire: { bulkhead: { isolation: 'pool', max_concurrent: 1, max_queue: 2, max_wait_ms: 50 } } });
    const busy = b.fire('a');
    const leader = outcome(b.fire('k')); // queued
    const follower = outcome(b.fire('k')); // joins it
    clock.tick(60);
    assert.deepEqual(await leader, { err: 'ESEMLOCKED' });
    assert.equal(gates.length, 1, 'the follower is queued in its turn, not failed');
    gates[0].resolve('A');
    await busy;
    await flush();
    assert.equal(gates.length, 2);
    gates[1].resolve('K');
    assert.deepEqual(await follower, { ok: 'K' });
    b.shutdown();
  });

  test('a leader aborted by its own signal: its followers are not failed; the first one leads', async () => {
    const { b, gates } = gatedBreaker({ coalesce: true, timeout: 1000 });
    const log = record(b, ['failure', 'success']);
    const ac = new AbortController();
    const leader = outcome(b.fireWithSignal(ac.signal, 'k'));
    const f1 = outcome(b.fire('k'));
    const f2 = outcome(b.fire('k'));
    ac.abort(new Error('client went away'));
    assert.deepEqual(await leader, { err: 'client went away' });
    assert.equal(gates.length, 2, 'the first follower runs its own call');
    gates[1].resolve('v2');
    assert.deepEqual(await Promise.all([f1, f2]), [{ ok: 'v2' }, { ok: 'v2' }]);
    assert.equal(await b.fire('k'), 'v2', 'its result is the one kept');
    assert.equal(gates.length, 2);
    assert.equal(b.stats.failures, 0, 'the abort counts nowhere');
    assert.deepEqual(log.map((e) => e[0]), ['success']);
    b.shutdown();
  });

  test('a leader aborted without followers: nothing kept, the next call runs', async () => {
    const { b, gates } = gatedBreaker({ coalesce: true, timeout: 1000 });
    const ac = new AbortController();
    const leader = outcome(b.fireWithSignal(ac.signal, 'k'));
    ac.abort(new Error('gone'));
    assert.deepEqual(await leader, { err: 'gone' });
    await flush();
    const next = b.fire('k');
    assert.equal(gates.length, 2);
    gates[1].resolve('v');
    assert.equal(await next, 'v');
    b.shutdown();
  });

  test('a follower\'s own signal: aborted while it waits, it rejects at once with the reason, and only it', async () => {
    const { b, gates } = gatedBreaker({ coalesce: true, timeout: 1000 });
    const leader = outcome(b.fire('k'));
    const ac = new AbortController();
    const quitter = outcome(b.fireWithSignal(ac.signal, 'k'));
    const stays = new AbortController();
    const other = outcome(b.fireWithSignal(stays.signal, 'k'));
    ac.abort(new Error('follower gave up'));
    const first = await Promise.race([quitter, flush(50).then(() => 'still waiting')]);
    assert.deepEqual(first, { err: 'follower gave up' });
    gates[0].resolve('v');
    assert.deepEqual(await Promise.all([leader, other]), [{ ok: 'v' }, { ok: 'v' }]);
    assert.equal(gates.length, 1);
    assert.equal(getEventListeners(stays.signal, 'abort').length, 0, 'a follower served is unbound from its signal');
    assert.equal(getEventListeners(ac.signal, 'abort').length, 0);
    b.shutdown();
  });

  test('a leader aborted after its first follower aborted: the next follower leads', async () => {
    const { b, gates } = gatedBreaker({ coalesce: true, timeout: 1000 });
    const lead = new AbortController();
    const leader = outcome(b.fireWithSignal(lead.signal, 'k'));
    const gone = new AbortController();
    const f1 = outcome(b.fireWithSignal(gone.signal, 'k'));
    const f2 = outcome(b.fire('k'));
    gone.abort(new Error('f1 gone'));
    lead.abort(new Error('leader gone'));
    assert.deepEqual(await Promise.all([leader, f1]), [{ err: 'leader gone' }, { err: 'f1 gone' }]);
    assert.equal(gates.length, 2);
    gates[1].resolve('v');
    assert.deepEqual(await f2, { ok: 'v' });
    b.shutdown();
  });

  test('followers promoted while the breaker is open each get their own reject (no recursion per follower)', async () => {
    const { b, gates } = gatedBreaker({ coalesce: true, timeout: false });
    const ac = new AbortController();
    const leader = outcome(b.fireWithSignal(ac.signal, 'k'));
    const followers = [];
    for (let i = 0; i < 20_000; i++) followers.push(outcome(b.fire('k')));
    let rejects = 0;
    b.on('reject', () => rejects++);
    b.open();
    ac.abort(new Error('gone'));
    assert.deepEqual(await leader, { err: 'gone' });
    const all = await Promise.all(followers);
    assert.ok(all.every((o) => o.err === 'EOPENBREAKER'));
    assert.equal(rejects, 20_000);
    assert.equal(gates.length, 1);
    b.close();
    const next = b.fire('k');
    assert.equal(gates.length, 2, 'nothing kept');
    gates[1].resolve('v');
    assert.equal(await next, 'v');
    b.shutdown();
  });
});
