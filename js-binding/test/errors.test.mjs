// Bad input: every option with a wrong type or an out-of-range value throws a
// TypeError naming the option and the reason (the core's message for ranges), and
// nothing — hostile options, hostile arguments, hostile numbers straight into the
// wasm exports — can make the one shared wasm instance trap.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { describe, test } from 'node:test';

import CircuitBreaker, { Collapser, SharedStore } from 'fusewire';

const require = createRequire(import.meta.url);
const pkgDir = dirname(require.resolve('fusewire/package.json'));
const engine = require(join(pkgDir, 'dist', 'cjs', 'engine.js'));
const ok = async (x) => x;

function typeError(options, message) {
  assert.throws(() => new CircuitBreaker(ok, options), (e) => {
    assert.equal(e.name, 'TypeError', `${e.name}: ${e.message}`);
    if (message instanceof RegExp) assert.match(e.message, message);
    else assert.equal(e.message, message);
    return true;
  });
}

describe('TypeErrors name the option and the reason', () => {
  test('ranges: the core\'s messages under opossum\'s names', () => {
    typeError({ errorThresholdPercentage: 150 }, 'options.errorThresholdPercentage: must be a number in 0..=100, got 150');
    typeError({ errorThresholdPercentage: -1 }, 'options.errorThresholdPercentage: must be a number in 0..=100, got -1');
    typeError({ resetTimeout: -5 }, 'options.resetTimeout: must be in 0..=31536000000 ms, got -5');
    typeError({ resetTimeout: 1e15 }, /^options\.resetTimeout: must be in 0\.\.=31536000000 ms, got 1000000000000000$/);
    typeError({ timeout: -1 }, 'options.timeout: must be in 0..=31536000000 ms, got -1');
    typeError({ timeout: -5 }, 'options.timeout: must be in 0..=31536000000 ms, got -5');
    typeError({ timeout: 1e20 }, 'options.timeout: must be in 0..=31536000000 ms, got 100000000000000000000');
    typeError({ cacheTTL: -1 }, 'options.cacheTTL: must be in 0..=31536000000 ms, got -1');
    typeError({ coalesceTTL: 1e13 }, 'options.coalesceTTL: must be in 0..=31536000000 ms, got 10000000000000');
    // The option named is the one given (found by review: rollingCountBuckets 0 and 3.5
    // were blamed on rollingCountTimeout, others came with the JSON parser's words).
    typeError({ rollingCountBuckets: 0 }, 'options.rollingCountBuckets: must be an integer in 1..=1000, got 0');
    typeError({ rollingCountBuckets: 3.5 }, 'options.rollingCountBuckets: must be an integer in 1..=1000, got 3.5');
    typeError({ rollingCountBuckets: 5000, rollingCountTimeout: 10_000 }, 'options.rollingCountBuckets: must be an integer in 1..=1000, got 5000');
    typeError({ rollingCountTimeout: 0 }, 'options.rollingCountTimeout: must be in 1..=31536000000 ms, got 0');
    typeError({ rollingCountTimeout: -10 }, 'options.rollingCountTimeout: must be in 1..=31536000000 ms, got -10');
    typeError({ rollingCountTimeout: 5, rollingCountBuckets: 10 },
      'options.rollingCountTimeout: must be at least rollingCountBuckets (10) ms: each bucket is floor(rollingCountTimeout / rollingCountBuckets) whole ms, got 5');
    typeError({ capacity: 0 }, 'options.capacity: must be an integer of at least 1, or Infinity (unbounded), got 0');
    typeError({ capacity: -3 }, 'options.capacity: must be an integer of at least 1, or Infinity (unbounded), got -3');
    typeError({ capacity: 1.5 }, 'options.capacity: must be an integer of at least 1, or Infinity (unbounded), got 1.5');
    typeError({ capacity: -Infinity }, 'options.capacity: must be a finite number, got -Infinity');
    typeError({ volumeThreshold: -1 }, 'options.volumeThreshold: must be an integer in 0..=4294967295, got -1');
    typeError({ volumeThreshold: 1.5 }, 'options.volumeThreshold: must be an integer in 0..=4294967295, got 1.5');
    typeError({ volumeThreshold: 2 ** 40 }, 'options.volumeThreshold: must be an integer in 0..=4294967295, got 1099511627776');
    typeError({ cache: true, cacheSize: 2.5 }, 'options.cacheSize: must be an integer in 1..=16777215, got 2.5');
    typeError({ coalesce: true, coalesceSize: 0 }, 'options.coalesceSize: must be an integer in 1..=16777215, got 0');
    typeError({ cache: true, cacheSize: 2 ** 24 }, 'options.cacheSize: must be an integer in 1..=16777215, got 16777216');
    // opossum's default cache bound (2^24 − 1), spelled out by opossum code, is taken (found by review: the bound was 10 000 000).
    new CircuitBreaker(ok, { cache: true, cacheSize: 2 ** 24 - 1, coalesce: true, coalesceSize: 2 ** 24 - 1 }).shutdown();
    // Fractional milliseconds are taken (opossum passes them to setTimeout), rounded up.
    for (const o of [{ timeout: 1.5 }, { resetTimeout: 2.5 }, { rollingCountTimeout: 10_000.5 }, { cacheTTL: 0.5, cache: true },
      { coalesceTTL: 99.9, coalesce: true }, { allowWarmUp: true, rollingCountTimeout: 999.5 }, { capacity: Infinity }]) {
      new CircuitBreaker(ok, o).shutdown();
    }
  });

  test('types', () => {
    typeError({ timeout: '1000' }, 'options.timeout: must be a number, got "1000"');
    typeError({ timeout: NaN }, 'options.timeout: must be a finite number, got NaN');
    typeError({ timeout: Infinity }, 'options.timeout: must be a finite number, got Infinity (false turns the timeout off)');
    typeError({ timeout: true }, 'options.timeout: must be a number, got true');
    typeError({ resetTimeout: Infinity }, 'options.resetTimeout: must be a finite number, got Infinity');
    typeError({ errorThresholdPercentage: '50' }, 'options.errorThresholdPercentage: must be a number, got "50"');
    typeError({ rollingCountTimeout: {} }, 'options.rollingCountTimeout: must be a number, got an object');
    typeError({ volumeThreshold: 10n }, 'options.volumeThreshold: must be a number, got 10n (a BigInt)');
    typeError({ allowWarmUp: 'yes' }, 'options.allowWarmUp: must be a boolean, got "yes"');
    typeError({ enabled: 1 }, 'options.enabled: must be a boolean, got 1');
    typeError({ enableSnapshots: 'no' }, 'options.enableSnapshots: must be a boolean, got "no"');
    typeError({ autoRenewAbortController: 0 }, 'options.autoRenewAbortController: must be a boolean, got 0');
    typeError({ cache: 'true' }, 'options.cache: must be a boolean, got "true"');
    typeError({ coalesce: 1 }, 'options.coalesce: must be a boolean, got 1');
    typeError({ errorFilter: true }, 'options.errorFilter: must be a function, got true');
    typeError({ cacheGetKey: 'k' }, 'options.cacheGetKey: must be a function, got "k"');
    typeError({ name: 42 }, 'options.name: must be a string, got 42');
    typeError({ group: {} }, 'options.group: must be a string, got an object');
    typeError({ cacheTTL: 'x' }, 'options.cacheTTL: must be a number, got "x"');
    typeError({ coalesceTTL: NaN }, 'options.coalesceTTL: must be a finite number, got NaN');
    typeError({ coalesceResetOn: 'error' }, /^options\.coalesceResetOn: must be an array of/);
    typeError({ coalesceResetOn: ['error', 'success', 'timeout', 'foobar'] }, 'options.coalesceResetOn[3]: must be "error", "success" or "timeout", got "foobar"');
    typeError({ state: 'open' }, 'options.state: must be an object (toJSON().state), got "open"');
    typeError({ status: 7 }, 'options.status: must be a Status or a stats object, got 7');
    typeError({ abortController: { abort: 1 } }, 'options.abortController: must be an AbortController (with an `abort()` method), got an object');
    assert.throws(() => new CircuitBreaker(ok, 'options'), { name: 'TypeError', message: 'options: must be an object, got "options"' });
  });

  test('an array given properties is an options object, as opossum reads it (found in real code: it threw)', () => {
    const options = [];
    options.name = 'fetch-origin';
    options.timeout = 1000;
    const b = new CircuitBreaker(ok, options);
    assert.equal(b.name, 'fetch-origin');
    assert.equal(b.options, options);
    assert.equal(b.options.timeout, 1000);
    b.shutdown();
  });

  test('null means "not given", as opossum\'s ?? reads it; opossum\'s defaults are written into options', () => {
    const options = { timeout: null, resetTimeout: null, errorThresholdPercentage: null, errorFilter: null,
      rollingPercentilesEnabled: null, state: null, status: null, capacity: null, name: null };
    const b = new CircuitBreaker(ok, options);
    assert.equal(b.options, options, 'the object given');
    assert.equal(options.timeout, 10_000);
    assert.equal(options.resetTimeout, 30_000);
    assert.equal(options.errorThresholdPercentage, 50);
    assert.equal(options.rollingCountTimeout, 10_000);
    assert.equal(options.rollingCountBuckets, 10);
    assert.equal(options.rollingPercentilesEnabled, true);
    assert.equal(options.capacity, Number.MAX_SAFE_INTEGER);
    assert.equal(typeof options.errorFilter, 'function');
    assert.equal(typeof options.cacheGetKey, 'function');
    assert.equal(options.cacheTTL, 0);
    assert.equal(options.enableSnapshots, true);
    assert.equal(options.coalesce, false);
    assert.equal(options.coalesceTTL, 10_000);
    assert.deepEqual(options.coalesceResetOn, []);
    b.shutdown();
    // Values given stay; timeout: false stays false; the filled object builds the same breaker.
    const given = { timeout: false, resetTimeout: 500 };
    const c = new CircuitBreaker(ok, given);
    assert.equal(given.timeout, false);
    assert.equal(given.resetTimeout, 500);
    assert.equal(given.coalesceTTL, false);
    const again = new CircuitBreaker(ok, given);
    const state = (x) => ({ ...x.toJSON().state, lastTimerAt: 0 });
    assert.deepEqual(state(again), state(c));
    c.shutdown();
    again.shutdown();
    // A frozen options object is read, not written.
    const frozen = Object.freeze({ resetTimeout: 100 });
    new CircuitBreaker(ok, frozen).shutdown();
    assert.equal(frozen.timeout, undefined);
    // Also with autoRenewAbortController: the renewed controller is the breaker's own
    // (found by review: writing it to the frozen options threw, at construction and
    // from inside a transition).
    for (const given of [{ autoRenewAbortController: true }, { autoRenewAbortController: true, abortController: new AbortController() }]) {
      const f = Object.freeze(given);
      const b = new CircuitBreaker(ok, f);
      const first = b.getAbortController();
      assert.ok(first instanceof AbortController);
      first.abort();
      b.open();
      b.close();
      assert.notEqual(b.getAbortController(), first);
      assert.equal(b.getSignal().aborted, false);
      assert.equal(f.abortController, given.abortController);
      b.shutdown();
    }
    typeError({ cache: true, cacheTransport: null }, /^options\.cacheTransport/);
  });

  test('the core schema under options.fusewire', () => {
    typeError({ fusewire: { breaker: { half_open: { permitted_probes: 0 } } } },
      'options.fusewire.breaker.half_open.permitted_probes: must be in 1..=16, got 0');
    typeError({ fusewire: { breaker: { mode: 'sideways' } } }, /^options\.fusewire\.breaker\.mode: unknown value `sideways`/);
    typeError({ fusewire: { breaker: { nope: 1 } } }, /^options\.fusewire\.breaker\.nope: unknown field `nope`/);
    typeError({ fusewire: { execution: { timeout_ms: 'slow' } } }, /^options\.fusewire\.execution\.timeout_ms: invalid type: string "slow", expected a whole number ≥ 0$/);
    typeError({ fusewire: { breaker: { error_percentage: { threshold_percentage: NaN } } } },
      'options.fusewire.breaker.error_percentage.threshold_percentage: must be a finite number, got NaN');
    typeError({ fusewire: { bulkhead: { max_queue: 3 } } }, /^options\.fusewire\.bulkhead\.max_queue: a wait queue needs "isolation": "pool"/);
    typeError({ fusewire: { breaker: { open: { ladder_ms: [100, -1] } } } }, /^options\.fusewire\.breaker\.open\.ladder_ms\[1\]: invalid value/);
    typeError({ fusewire: 'fast' }, 'options.fusewire: must be an object (the core config schema), got "fast"');
    typeError({ fusewire: { breaker: { mode: () => 1 } } }, 'options.fusewire.breaker.mode: must be plain JSON data, got a function');
    // Found by a security review: an own `__proto__` (JSON.parse makes one) became the
    // merged config's prototype, and the options read through it were undefined.
    typeError(JSON.parse('{"fusewire": {"breaker": {"__proto__": {"mode": "forced_open"}}}}'),
      'options.fusewire.breaker.__proto__: unknown field');
    const cyclic = {};
    cyclic.self = cyclic;
    typeError({ fusewire: { breaker: cyclic } }, /^options\.fusewire\.breaker\.self\.self/);
  });

  test('shared options', () => {
    typeError({ name: 'x', shared: {} }, 'options.shared.store: must be a SharedStore or a RedisStore, got undefined');
    typeError({ name: 'x', shared: { store: {} } }, 'options.shared.store: must be a SharedStore or a RedisStore, got an object');
    const store = new SharedStore({ entries: 8 });
    typeError({ name: 'x', shared: { store, namespace: 'has space' } }, /^options\.shared\.namespace: must be 1\.\.=64 characters/);
    typeError({ name: 'x', shared: { store, cas_attempts: 0 } }, 'options.shared.cas_attempts: must be in 1..=1000, got 0');
    assert.throws(() => new CircuitBreaker(async () => 1, { shared: { store } }),
      { name: 'TypeError', message: 'options.name: a shared breaker needs a name (the same in every worker)' });
    // Found by review: '' fell back to the action's name, and a buffer got "an object".
    assert.throws(() => new CircuitBreaker(async function named() { return 1; }, { name: '', shared: { store } }),
      { name: 'TypeError', message: 'options.name: a shared breaker needs a name (the same in every worker)' });
    // Found by review: lone surrogates became U+FFFD in the store, 'q\ud800' and 'q\udc00' one breaker.
    typeError({ name: 'q\ud800', shared: { store } },
      "options.name: a shared breaker's name must be well-formed Unicode, got a lone surrogate at index 1");
    typeError({ name: '\udc00q', shared: { store } },
      "options.name: a shared breaker's name must be well-formed Unicode, got a lone surrogate at index 0");
    new CircuitBreaker(async () => 1, { name: 'q\ud83d\ude00', shared: { store } }).shutdown();
    typeError({ name: 'x', shared: { store: store.buffer } },
      'options.shared.store: must be a SharedStore or a RedisStore, got a SharedArrayBuffer (in a worker, pass SharedStore.from(buffer))');
    typeError({ name: 'x', shared: { store, mode: 'async' } },
      "options.shared.mode: must be left out (the store sets it: 'sync' for a SharedStore), got \"async\"");
    assert.throws(() => new SharedStore({ entries: 0 }), { name: 'TypeError', message: 'options.entries: must be an integer in 1..=1048576, got 0' });
    assert.throws(() => new SharedStore(new SharedArrayBuffer(128)), { name: 'TypeError', message: 'fusewire: the buffer is not a SharedStore' });
  });
});

const HOSTILE = [NaN, Infinity, -Infinity, -1, -0, 0, 0.5, 1e300, -1e300, 2 ** 53 + 2, 2 ** 64,
  Number.MIN_VALUE, Number.MAX_VALUE, '', 'x', '10', true, false, null, {}, [], [1, 2],
  () => 1, Symbol('s'), 10n, new Date(0), Object.create(null), { valueOf: () => { throw new Error('valueOf'); } }];
const OPTIONS = ['timeout', 'resetTimeout', 'errorThresholdPercentage', 'rollingCountTimeout',
  'rollingCountBuckets', 'rollingPercentilesEnabled', 'volumeThreshold', 'capacity', 'allowWarmUp',
  'errorFilter', 'enabled', 'name', 'group', 'abortController', 'autoRenewAbortController', 'cache',
  'cacheTTL', 'cacheSize', 'cacheGetKey', 'cacheTransport', 'coalesce', 'coalesceTTL', 'coalesceSize',
  'coalesceResetOn', 'enableSnapshots', 'rotateBucketController', 'state', 'status', 'fusewire', 'shared'];

function show(v) {
  try {
    return typeof v === 'symbol' || typeof v === 'bigint' ? String(v) : JSON.stringify(v) ?? String(v);
  } catch {
    return Object.prototype.toString.call(v);
  }
}

/** A healthy breaker still works: the instance is not poisoned. */
async function healthy() {
  const b = new CircuitBreaker(async (x) => x * 2, { name: 'canary' });
  assert.equal(await b.fire(21), 42);
  b.open();
  await assert.rejects(b.fire(1), { code: 'EOPENBREAKER' });
  b.close();
  assert.equal(b.stats.successes, 1);
  b.shutdown();
}

describe('unknown options are ignored, as in opossum, with a warning (found by a cockatiel user\'s review)', () => {
  test('one FusewireWarning per name, with the option meant where it is a typo or cockatiel\'s name', async () => {
    const seen = [];
    const listen = (w) => { if (w.name === 'FusewireWarning') seen.push(w.message); };
    process.on('warning', listen);
    try {
      const opts = { timout: 5, halfOpenAfter: 1000, resetTimeotu: 1, ErrorThresholdPercentage: 3, valueOf: 1, zzTop: 1 };
      new CircuitBreaker(async () => 1, opts).shutdown();
      new CircuitBreaker(async () => 1, { timout: 5 }).shutdown();
      // opossum's own options, fusewire's, the ones a breaker fills in, and an array's indices: no warning.
      const known = new CircuitBreaker(async () => 1, Object.assign([1], { timeout: 10, coalesceCache: undefined, stats: undefined, fusewire: {} }));
      new CircuitBreaker(async () => 1, known.options).shutdown();
      known.shutdown();
      await new Promise((r) => setImmediate(r)); // process warnings are emitted on the next tick
    } finally {
      process.off('warning', listen);
    }
    const ours = (name, like) => `fusewire: options.${name} is not an option of CircuitBreaker and is ignored${like ? ` (did you mean ${like}?)` : ''}`;
    assert.deepEqual(seen, [ours('timout', 'timeout'), ours('halfOpenAfter', 'resetTimeout'), ours('resetTimeotu', 'resetTimeout'),
      ours('ErrorThresholdPercentage', 'errorThresholdPercentage'), ours('valueOf'), ours('zzTop')]);
  });
});

describe('the core\'s config warnings: settings that validate but do not do what they seem to', () => {
  test('each warns once per breaker name, naming the option; opossum\'s options and the defaults draw none', async () => {
    const seen = [];
    const listen = (w) => { if (w.name === 'FusewireWarning') seen.push(w.message); };
    process.on('warning', listen);
    try {
      const make = (name, fusewire, extra = {}) => new CircuitBreaker(async () => 1, { name, fusewire, ...extra }).shutdown();
      make('queued', { bulkhead: { isolation: 'pool', max_queue: 32 } });
      make('queued', { bulkhead: { isolation: 'pool', max_queue: 32 } }); // once per name
      make('slow', { breaker: { slow_call: { enabled: true } } }); // 60 s, opossum's timeout 10 s
      make('probe', { breaker: { half_open: { probe_timeout_ms: 500 } } }, { timeout: 3000 });
      // A Collapser's breaker: the option is the Collapser's (found by review).
      new Collapser(async (keys) => keys, { name: 'batched', breaker: { fusewire: { breaker: { slow_call: { enabled: true } } } } }).shutdown();
      // None for these.
      make('fine', { bulkhead: { isolation: 'pool', max_queue: 32, queue_rejection_threshold: 32 },
        breaker: { slow_call: { enabled: true, duration_threshold_ms: 2000 } } });
      make('untimed', { breaker: { slow_call: { enabled: true } } }, { timeout: false });
      new CircuitBreaker(async () => 1, { capacity: 3, timeout: 100, resetTimeout: 50, allowWarmUp: true }).shutdown();
      new CircuitBreaker(async () => 1).shutdown();
      new Collapser(async (keys) => keys).shutdown();
      await new Promise((r) => setImmediate(r));
    } finally {
      process.off('warning', listen);
    }
    assert.deepEqual(seen, [
      'fusewire: breaker "queued": options.fusewire.bulkhead.max_queue: queue_rejection_threshold (5 unless set, as in Hystrix) caps the queue below it: set both',
      'fusewire: breaker "slow": options.fusewire.breaker.slow_call.duration_threshold_ms: above the call timeout: a call that slow times out instead, unless it answers between its deadline and the timer',
      'fusewire: breaker "probe": options.fusewire.breaker.half_open.probe_timeout_ms: below the call timeout: a probe still running then reopens the breaker, though it may yet succeed',
      'fusewire: breaker "batched": options.breaker.fusewire.breaker.slow_call.duration_threshold_ms: above the call timeout: a call that slow times out instead, unless it answers between its deadline and the timer',
    ]);
  });
});

describe('breakers made per request (found by a load test: breakers of one name per request, a failing upstream, no trip and no word)', () => {
  test('the 100th breaker of one name within a minute warns, once; unnamed ones and 99 do not', async () => {
    const seen = [];
    const listen = (w) => { if (w.name === 'FusewireWarning') seen.push(w.message); };
    process.on('warning', listen);
    try {
      for (let i = 0; i < 99; i++) new CircuitBreaker(async () => 1, { name: 'ninety-nine' }).shutdown();
      for (let i = 0; i < 150; i++) new CircuitBreaker(async () => 1).shutdown(); // random names
      async function fetchUser() { return 1; }
      for (let i = 0; i < 150; i++) new CircuitBreaker(fetchUser).shutdown(); // the action's name
      // Shared breakers of one name share one window: no warning.
      const store = new SharedStore();
      for (let i = 0; i < 150; i++) new CircuitBreaker(async () => 1, { name: 'shared-one', shared: { store } }).shutdown();
      await new Promise((r) => setImmediate(r));
    } finally {
      process.off('warning', listen);
    }
    assert.deepEqual(seen, ['fusewire: 100 breakers named "fetchUser" were made within a minute: each counts only its own ' +
      'calls, so a breaker made per request never opens. Make one per upstream and reuse it (a Collapser per request: ' +
      'collapser.forRequest())']);
  });
});

describe('an errorFilter that throws (found by review: its exception was lost)', () => {
  test('the error counts as a failure, and the breaker warns once', async () => {
    const seen = [];
    const listen = (w) => { if (w.name === 'FusewireWarning') seen.push(w.message); };
    process.on('warning', listen);
    try {
      const b = new CircuitBreaker(async () => { throw new Error('503'); },
        { name: 'filtered', volumeThreshold: 100, errorFilter: () => { throw new TypeError('filter bug'); } });
      for (let i = 0; i < 3; i++) await assert.rejects(b.fire(), { message: '503' });
      assert.equal(b.stats.failures, 3);
      b.shutdown();
      await new Promise((r) => setImmediate(r));
    } finally {
      process.off('warning', listen);
    }
    assert.deepEqual(seen, ['fusewire: breaker "filtered": errorFilter threw (filter bug); the error counts as a failure']);
  });

  test('the texts warned once are bounded: past 1000 the memory starts over (found by review: a breaker per request grew it for good)', async () => {
    let seen = 0;
    const listen = (w) => { if (w.name === 'FusewireWarning' && w.message.startsWith('fusewire: breaker "warned-')) seen++; };
    process.on('warning', listen);
    try {
      const fire = async (i) => {
        const b = new CircuitBreaker(async () => { throw new Error('503'); },
          { name: `warned-${i}`, errorFilter: () => { throw new TypeError('bug'); } });
        await assert.rejects(b.fire());
        b.shutdown();
      };
      for (let i = 0; i <= 1000; i++) await fire(i);
      await fire(0); // forgotten by now: told again
      await fire(1000); // remembered: not told
      await new Promise((r) => setImmediate(r));
    } finally {
      process.off('warning', listen);
    }
    assert.equal(seen, 1002);
  });
});

describe('the wasm instance survives hostile input', () => {
  test('every option with every hostile value', async () => {
    const before = engine.w.fw_live();
    let made = 0;
    for (const name of OPTIONS) {
      for (const v of HOSTILE) {
        let b;
        try {
          b = new CircuitBreaker(ok, { [name]: v });
          made++;
        } catch (e) {
          if (!(e instanceof TypeError)) {
            assert.fail(`options.${name} = ${show(v)}: ${e?.constructor?.name} ${e?.message}`);
          }
        }
        if (b !== undefined) {
          await b.fire(1).catch(() => {});
          void b.stats;
          b.shutdown();
        }
      }
      // Hostile values inside the core schema too.
      for (const v of HOSTILE) {
        try {
          new CircuitBreaker(ok, { fusewire: { breaker: { [name]: v } } }).shutdown();
        } catch (e) {
          assert.ok(e instanceof TypeError, `${e?.message}`);
        }
      }
    }
    assert.ok(made > 0);
    assert.equal(engine.w.fw_live(), before, 'every breaker made was freed');
    await healthy();
  });

  test('hostile arguments to every method', async () => {
    const b = new CircuitBreaker(async (...a) => a.length, { timeout: 50 });
    for (const v of HOSTILE) {
      await b.fire(v).catch(() => {});
      await b.call(v, v).catch(() => {});
      await b.fireWithSignal(v, v).catch(() => {});
      try { b.fallback(v); } catch (e) { assert.ok(e instanceof TypeError); }
      try { b.healthCheck(v, v); } catch (e) { assert.ok(e instanceof TypeError); }
      try { b.healthCheck(async () => {}, v); } catch (e) { assert.ok(e instanceof TypeError); }
      b.emit('snapshot', v);
      void b.toJSON();
      void b.status.window;
    }
    b.open();
    b.close();
    b.disable();
    b.enable();
    b.clearCache();
    b.shutdown();
    b.shutdown();
    await b.fire(1).catch((e) => assert.equal(e.code, 'ESHUTDOWN'));
    await healthy();
  });

  test('hostile options and keys for the Collapser', async () => {
    for (const name of ['windowMs', 'maxBatchSize', 'cache', 'cacheSize', 'cacheKeyFn', 'breaker', 'name']) {
      for (const v of HOSTILE) {
        try {
          const c = new Collapser(async (keys) => keys, { [name]: v });
          await c.load(1).catch(() => {});
          c.shutdown();
        } catch (e) {
          if (!(e instanceof TypeError)) assert.fail(`options.${name} = ${show(v)}: ${e?.constructor?.name} ${e?.message}`);
        }
      }
    }
    const c = new Collapser(async (keys) => keys.map(() => 1), { windowMs: 0 });
    for (const v of HOSTILE) {
      try {
        await c.load(v).catch(() => {});
      } catch (e) {
        // null and undefined are not keys: thrown, as DataLoader's.
        if (!(e instanceof TypeError) || (v !== null && v !== undefined)) throw e;
      }
      // A key without a cache key (a symbol, a function…) is a TypeError, never a trap.
      for (const op of [() => c.prime(v, v), () => c.clear(v)]) {
        try {
          op();
        } catch (e) {
          if (!(e instanceof TypeError)) assert.fail(`key ${show(v)}: ${e?.constructor?.name} ${e?.message}`);
        }
      }
    }
    await c.loadMany(HOSTILE.filter((v) => v !== null && v !== undefined).slice(0, 5)).catch(() => {});
    for (const v of HOSTILE) {
      try {
        await c.loadMany(v).catch(() => {});
      } catch (e) {
        if (!(e instanceof TypeError)) throw e;
      }
    }
    // Request loaders: any context; hostile keys as above.
    for (const v of HOSTILE) {
      const r = c.forRequest(v);
      for (const op of [() => r.load(v), () => r.loadMany(v), () => r.prime(v, v), () => r.clear(v)]) {
        try {
          await op()?.catch?.(() => {});
        } catch (e) {
          if (!(e instanceof TypeError)) assert.fail(`request key ${show(v)}: ${e?.constructor?.name} ${e?.message}`);
        }
      }
      r.clearAll();
      if (typeof v === 'number' && v % 2 === 0) r.shutdown();
    }
    c.clearAll();
    c.shutdown();
    await healthy();
  });

  test('hostile numbers straight into every export', async () => {
    const w = engine.w;
    const live = new CircuitBreaker(ok, { name: 'target' });
    const h = live._h;
    const nums = [NaN, Infinity, -Infinity, -1, -0, 0.5, 1e300, -1e300, 2 ** 53, 2 ** 53 + 2, 2 ** 64,
      2 ** 31, 2 ** 32 - 1, 2 ** 32, -(2 ** 31), h, h + 1, h + (1 << 20), Number.MAX_VALUE];
    const fns = Object.keys(w).filter((k) => k.startsWith('fw_') && typeof w[k] === 'function');
    assert.ok(fns.length >= 30, `${fns.length} exports`);
    for (const f of fns) {
      if (f === 'fw_seed') continue;
      const arity = w[f].length;
      for (const a of nums) {
        for (const b of [0, 1, a, -1]) {
          const args = Array.from({ length: arity }, (_, i) => (i === 0 && f !== 'fw_scratch' && f !== 'fw_check' ? h : i % 2 ? a : b));
          try {
            w[f](...args);
          } catch (e) {
            assert.fail(`${f}(${args.join(', ')}) threw ${e?.constructor?.name}: ${e?.message}`);
          }
          const args2 = Array.from({ length: arity }, () => a);
          try {
            w[f](...args2);
          } catch (e) {
            assert.fail(`${f}(${args2.join(', ')}) threw ${e?.constructor?.name}: ${e?.message}`);
          }
        }
      }
      // Values that cannot become numbers throw in JS before entering wasm (no trap).
      if (arity > 0) {
        for (const bad of [10n, Symbol('s')]) {
          assert.throws(() => w[f](bad, bad, bad, bad, bad, bad, bad), TypeError);
        }
      }
    }
    live.shutdown();
    await healthy();
  });
});

describe('SharedStore misuse throws instead of making a private store (found by review)', () => {
  test('SharedStore.from takes the SharedArrayBuffer of a store, nothing else', () => {
    const store = new SharedStore({ entries: 4 });
    const fromMessage = (got) => new RegExp(`^fusewire: SharedStore\\.from\\(buffer\\): buffer must be the SharedArrayBuffer of a SharedStore \\(pass \`store\\.buffer\`.*got ${got}$`);
    for (const [arg, got] of [
      [store, 'a SharedStore \\(pass its `\\.buffer`\\)'],
      [undefined, 'undefined'],
      [null, 'null'],
      [new ArrayBuffer(4096), 'an ArrayBuffer \\(not shared memory\\)'],
      [new Uint8Array(store.buffer), 'a Uint8Array \\(pass the SharedArrayBuffer itself\\)'],
      [{ buffer: store.buffer }, 'an object'],
      ['buffer', '"buffer"'],
    ]) {
      assert.throws(() => SharedStore.from(arg), (e) => {
        assert.equal(e.name, 'TypeError');
        assert.match(e.message, fromMessage(got));
        return true;
      });
    }
    // The right argument: a view of the same memory.
    const view = SharedStore.from(store.buffer);
    assert.equal(view.buffer, store.buffer);
    assert.equal(view.capacity, 4);
  });

  test('the constructor: unknown option keys and buffers that are not shared are TypeErrors', () => {
    assert.throws(() => new SharedStore({ entires: 5 }),
      { name: 'TypeError', message: 'options.entires: not a SharedStore option (they are entries, keyBytes, valueBytes, ttlMs)' });
    assert.throws(() => new SharedStore({ entries: 5, valuebytes: 64 }),
      { name: 'TypeError', message: 'options.valuebytes: not a SharedStore option (they are entries, keyBytes, valueBytes, ttlMs)' });
    const store = new SharedStore({ entries: 4 });
    assert.throws(() => new SharedStore(store), { name: 'TypeError', message: /^options: must be an options object or a SharedArrayBuffer .*got a SharedStore \(pass its `\.buffer`\)$/ });
    assert.throws(() => new SharedStore(new ArrayBuffer(64)), { name: 'TypeError', message: /got an ArrayBuffer \(not shared memory\)$/ });
    // Still accepted: no options, an empty object, the three options, a store's buffer.
    assert.equal(new SharedStore().capacity, 1024);
    assert.equal(new SharedStore({}).capacity, 1024);
    assert.equal(new SharedStore({ entries: 2, keyBytes: 16, valueBytes: 512 }).capacity, 2);
    assert.equal(new SharedStore(store.buffer).capacity, 4);
  });

  test('a SharedArrayBuffer from another realm (vm context) is recognised', async () => {
    const { runInNewContext } = await import('node:vm');
    const store = new SharedStore({ entries: 3 });
    const foreign = runInNewContext('new SharedArrayBuffer(8)');
    assert.throws(() => SharedStore.from(foreign), { name: 'TypeError', message: 'fusewire: the buffer is not a SharedStore' });
    const copy = runInNewContext('(b) => b', {})(store.buffer);
    assert.equal(SharedStore.from(copy).capacity, 3);
  });
});
