// Beyond opossum: the core's schema as a second way to configure (N probes, growing
// open durations, slow start, other trip rules, bulkhead with a bounded queue and a
// max wait), and per-call AbortSignals.
import assert from 'node:assert/strict';
import { afterEach, describe, test } from 'node:test';

import { CircuitBreaker, SharedStore } from 'fusewire';

import { deferred, fakeTime, flush, record } from './helpers.mjs';

let clock;
afterEach(() => {
  clock?.restore();
  clock = undefined;
});

function controlled(options = {}) {
  const pending = [];
  const b = new CircuitBreaker((x) => {
    if (x === 'fail') return Promise.reject(new Error('boom'));
    const d = deferred();
    pending.push(d);
    return d.promise;
  }, options);
  return { b, pending };
}

async function settle(p) {
  try {
    return { value: await p };
  } catch (error) {
    return { error };
  }
}

describe('options.fusewire', () => {
  test('the README\'s resilience4j settings trip as resilience4j does: 5 failures then 5 successes open at the 10th call', async () => {
    const breaker = new CircuitBreaker(async (ok) => {
      if (!ok) throw new Error('down');
      return 'up';
    }, {
      timeout: 2000,
      fusewire: {
        breaker: {
          error_percentage: { threshold_percentage: 50, request_volume_threshold: 10,
            denominator: 'total', comparison: 'at_or_above' },
          slow_call: { enabled: true, duration_threshold_ms: 1000, rate_threshold_percentage: 100 },
          half_open: { permitted_probes: 10, success_threshold: 10, probe_timeout_ms: 5000, reset_window_on_close: true },
          open: { sleep_window_ms: 60_000 },
        },
        metrics: { rolling_window_ms: 10_000, rolling_buckets: 10 },
      },
    });
    let seq = '';
    for (const ok of [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1]) {
      seq += await breaker.fire(ok).then(() => 'S', (e) => (e.code === 'EOPENBREAKER' ? 'R' : 'F'));
    }
    assert.equal(seq, 'FFFFFSSSSSR');
    assert.equal(breaker.opened, true);
    breaker.shutdown();
  });

  test('consecutive failures alone trip only with the error rate off, as README says (found by review: its example tripped on the first failure)', async () => {
    const run = async (breaker) => {
      const b = new CircuitBreaker(async (ok) => {
        if (!ok) throw new Error('down');
        return 'up';
      }, { fusewire: { breaker } });
      let seq = '';
      for (const ok of [false, true, false, false, true, false, false, false, false, false, false]) {
        seq += await b.fire(ok).then(() => 'S', (e) => (e.code === 'EOPENBREAKER' ? 'R' : 'F'));
      }
      b.shutdown();
      return seq;
    };
    const consecutive = { enabled: true, threshold: 5 };
    assert.equal(await run({ consecutive_failures: consecutive }), 'FRRRRRRRRRR', 'the 50 % rule trips first');
    assert.equal(await run({ consecutive_failures: consecutive, error_percentage: { enabled: false } }), 'FSFFSFFFFFR',
      'cockatiel\'s ConsecutiveBreaker(5)');
  });

  test('N half-open probes and a success threshold', async () => {
    clock = fakeTime();
    const { b, pending } = controlled({
      resetTimeout: 1000,
      timeout: false,
      fusewire: { breaker: { half_open: { permitted_probes: 3, success_threshold: 2 } } },
    });
    await settle(b.fire('fail'));
    assert.equal(b.opened, true);
    clock.tick(1001);
    assert.equal(b.halfOpen, true);
    const calls = [];
    for (let i = 0; i < 5; i++) calls.push(b.fire(i));
    const rejected = (await Promise.all(calls.slice(3).map(settle))).map((r) => r.error?.code);
    assert.deepEqual(rejected, ['EOPENBREAKER', 'EOPENBREAKER'], 'exactly 3 probes');
    assert.equal(pending.length, 3);
    assert.equal(b.pendingClose, false, 'every probe turn is out');
    pending[0].resolve('a');
    await flush();
    assert.equal(b.halfOpen, true, 'one success of the two needed');
    pending[1].resolve('b');
    await flush();
    assert.equal(b.closed, true);
    pending[2].resolve('c');
    await Promise.all(calls.slice(0, 3));
    b.shutdown();
  });

  test('exponential open durations (and their reset on close)', async () => {
    clock = fakeTime();
    const { b, pending } = controlled({
      resetTimeout: 1000,
      fusewire: { breaker: { open: { schedule: 'exponential', multiplier: 2, max_ms: 3000 } } },
    });
    const halfOpenAfter = async () => {
      let ms = 0;
      while (!b.halfOpen && ms < 10_000) {
        clock.tick(50, 50);
        ms += 50;
      }
      return ms;
    };
    const near = (ms, want, what) => assert.ok(Math.abs(ms - want) <= 50, `${what}: ${ms} ms, want ${want}`);
    await settle(b.fire('fail'));
    near(await halfOpenAfter(), 1000, 'first');
    await settle(b.fire('fail'));
    near(await halfOpenAfter(), 2000, 'doubled');
    await settle(b.fire('fail'));
    near(await halfOpenAfter(), 3000, 'capped');
    const p = b.fire(1);
    pending[0].resolve(1);
    await p;
    assert.equal(b.closed, true);
    await settle(b.fire('fail'));
    near(await halfOpenAfter(), 1000, 'back to the base after closing');
    b.shutdown();
  });

  test('a ladder of open durations with jitter stays within bounds', async () => {
    clock = fakeTime();
    const { b } = controlled({
      fusewire: { breaker: { open: { schedule: 'ladder', ladder_ms: [200, 400], jitter_percentage: 50 } } },
    });
    await settle(b.fire('fail'));
    let ms = 0;
    while (!b.halfOpen) {
      clock.tick(10, 10);
      ms += 10;
    }
    assert.ok(ms >= 100 && ms <= 310, `first open lasted ${ms} ms (200 ± 50 %)`);
    b.shutdown();
  });

  test('consecutive failures as the trip rule', async () => {
    const { b, pending } = controlled({
      timeout: false,
      fusewire: {
        breaker: {
          error_percentage: { enabled: false },
          consecutive_failures: { enabled: true, threshold: 3 },
        },
      },
    });
    for (let i = 0; i < 2; i++) await settle(b.fire('fail'));
    const p = b.fire(1);
    pending[0].resolve(1);
    await p;
    for (let i = 0; i < 2; i++) await settle(b.fire('fail'));
    assert.equal(b.closed, true, 'the run was broken by a success');
    await settle(b.fire('fail'));
    assert.equal(b.opened, true);
    b.shutdown();
  });

  test('slow start: after closing, only a share of calls is admitted at first', async () => {
    clock = fakeTime();
    const b = new CircuitBreaker(async (x) => {
      if (x === 'fail') throw new Error('boom');
      return x;
    }, {
      resetTimeout: 100,
      fusewire: { breaker: { slow_start: { ramp_ms: 10_000, initial_percentage: 10 } } },
    });
    await settle(b.fire('fail'));
    clock.tick(101);
    assert.equal(await b.fire('probe'), 'probe');
    assert.equal(b.closed, true);
    let admitted = 0;
    for (let i = 0; i < 200; i++) if ((await settle(b.fire(i))).value !== undefined) admitted++;
    assert.ok(admitted > 0 && admitted < 80, `${admitted} of 200 admitted right after closing`);
    clock.tick(10_001, 100);
    admitted = 0;
    for (let i = 0; i < 100; i++) if ((await settle(b.fire(i))).value !== undefined) admitted++;
    assert.equal(admitted, 100, 'the ramp is over');
    b.shutdown();
  });

  test('forced modes: forced_open reports open, metrics_only never rejects', async () => {
    const a = new CircuitBreaker(async () => 1, { fusewire: { breaker: { mode: 'forced_open' } } });
    assert.equal(a.opened, true);
    await assert.rejects(a.fire(), { code: 'EOPENBREAKER' });
    const m = new CircuitBreaker(async () => {
      throw new Error('x');
    }, { fusewire: { breaker: { mode: 'metrics_only' } } });
    for (let i = 0; i < 5; i++) await settle(m.fire());
    assert.equal(m.stats.failures, 5, 'every call ran');
    a.shutdown();
    m.shutdown();
  });
});

describe('options.fusewire over the opossum options it replaces (found by a review from the native schema)', () => {
  test('a call timeout set there turns the timeout on and is the probe timeout', async () => {
    clock = fakeTime();
    const { b, pending } = controlled({ timeout: false, resetTimeout: 1000, fusewire: { execution: { timeout_ms: 5000 } } });
    const timedOut = settle(b.fire(1));
    clock.tick(5001);
    assert.equal((await timedOut).error?.code, 'ETIMEDOUT', 'timeout: false gave way to execution.timeout_ms');
    // Opened by the timeout; the probe may take the call timeout (not opossum's 10 s).
    assert.equal(b.opened, true);
    clock.tick(1001);
    assert.equal(b.halfOpen, true);
    const probe = b.fire(2);
    clock.tick(4000);
    pending[1].resolve('slow but healthy');
    assert.equal(await probe, 'slow but healthy');
    assert.equal(b.closed, true, 'a 4 s probe within the 5 s call timeout closes');
    b.shutdown();

    const d = controlled({ resetTimeout: 1000, fusewire: { execution: { timeout_ms: 60_000 } } });
    await settle(d.b.fire('fail'));
    clock.tick(1001);
    const slowProbe = d.b.fire(1);
    clock.tick(15_000);
    d.pending[0].resolve('ok');
    assert.equal(await slowProbe, 'ok');
    assert.equal(d.b.closed, true, 'a 15 s probe closes: opossum\'s default timeout (10 s) is not its limit');
    d.b.shutdown();

    // A bad value is named as the user set it, not as what it was copied to (found by
    // review: `options.timeout` for a probe timeout copied from execution.timeout_ms).
    for (const bad of [0, 1.5, -1]) {
      assert.throws(() => new CircuitBreaker(async () => 1, { fusewire: { execution: { timeout_ms: bad } } }),
        { name: 'TypeError', message: /^options\.fusewire\.execution\.timeout_ms: / }, String(bad));
    }
    assert.throws(() => new CircuitBreaker(async () => 1, { allowWarmUp: true, fusewire: { metrics: { rolling_window_ms: 4e10 } } }),
      { name: 'TypeError', message: /^options\.fusewire\.metrics\.rolling_window_ms: / });
    // `timeout: false` turned on there runs opossum's default timeout, 10 s.
    const e = controlled({ timeout: false, fusewire: { execution: { timeout_enabled: true } } });
    const late = settle(e.b.fire(1));
    clock.tick(9_999);
    await flush();
    assert.equal(e.b.stats.timeouts, 0);
    clock.tick(2);
    assert.equal((await late).error?.code, 'ETIMEDOUT');
    e.b.shutdown();
  });

  test('open and window settings there: the halfOpen argument, restoring an open state, the snapshot interval', async () => {
    clock = fakeTime();
    const b = new CircuitBreaker(async () => {
      throw new Error('x');
    }, { fusewire: { breaker: { open: { sleep_window_ms: 2000 } }, metrics: { rolling_window_ms: 1000, rolling_buckets: 4 } } });
    const log = record(b, ['halfOpen', 'snapshot']);
    await settle(b.fire());
    clock.tick(2001);
    const half = log.find((e) => e[0] === 'halfOpen');
    assert.deepEqual(half?.slice(1), [2000], 'halfOpen carries the open period in effect');
    const snaps = log.filter((e) => e[0] === 'snapshot').length;
    assert.ok(snaps >= 7 && snaps <= 9, `a snapshot per 250 ms bucket over 2 s: ${snaps}`);
    b.shutdown();

    // A saved open state is half-open once the native open period has passed since
    // it opened, and still open before.
    const opened = new CircuitBreaker(async () => 1, { fusewire: { breaker: { mode: 'forced_open' } } });
    const state = { ...opened.toJSON().state, closed: false, open: true, lastTimerAt: Date.now() - 40_000 };
    opened.shutdown();
    const long = new CircuitBreaker(async () => 1, { state, fusewire: { breaker: { open: { sleep_window_ms: 60_000 } } } });
    assert.equal(long.opened, true, '40 s of a 60 s open period');
    const short = new CircuitBreaker(async () => 1, { state, fusewire: { breaker: { open: { sleep_window_ms: 1000 } } } });
    assert.equal(short.halfOpen, true, '40 s past a 1 s open period');
    long.shutdown();
    short.shutdown();
  });

  test('a bulkhead set to none there leaves the semaphore unbounded; a cache section there turns the cache on', async () => {
    const b = new CircuitBreaker(async (x) => x, { capacity: 2, fusewire: { bulkhead: null } });
    assert.equal(b.semaphore.count, Number.MAX_SAFE_INTEGER);
    assert.equal(b.semaphore.test(), true);
    b.shutdown();
    let runs = 0;
    const c = new CircuitBreaker(async (x) => {
      runs++;
      return x;
    }, { fusewire: { cache: { ttl_ms: 60_000 } } });
    const log = record(c, ['cacheHit', 'cacheMiss']);
    assert.deepEqual([await c.fire(1), await c.fire(1), await c.fire(1)], [1, 1, 1]);
    assert.equal(runs, 1);
    assert.deepEqual(log.map((e) => e[0]), ['cacheMiss', 'cacheHit', 'cacheHit']);
    c.shutdown();
    assert.throws(() => new CircuitBreaker(async () => 1, { fusewire: { collapser: { window_ms: 5 } } }),
      { name: 'TypeError', message: /^options\.fusewire\.collapser: a CircuitBreaker has no collapser/ });
    // Found by review: taken, and its waiters ran the action anyway.
    assert.throws(() => new CircuitBreaker(async () => 1, { cache: true, fusewire: { cache: { max_waiters: 5 } } }),
      { name: 'TypeError', message: 'options.fusewire.cache.max_waiters: must be 0 on a CircuitBreaker (calls wait for one in flight with coalesce: true), got 5' });
    new CircuitBreaker(async () => 1, { fusewire: { cache: { max_waiters: 0 } } }).shutdown();
    // Not with `cache: false` (the core then keeps no cache).
    new CircuitBreaker(async () => 1, { cache: false, fusewire: { cache: { max_waiters: 5 } } }).shutdown();
    // `cache: false` keeps it off; a custom transport gets the section's ttl_ms; past
    // the core's limit `capacity` reads back as given (found by review).
    let runs2 = 0;
    const off = new CircuitBreaker(async () => ++runs2, { cache: false, fusewire: { cache: { ttl_ms: 60_000 } } });
    await off.fire();
    await off.fire();
    assert.equal(runs2, 2);
    off.shutdown();
    const sets = [];
    const transport = { get: () => undefined, set: (k, v, expiresAt) => sets.push(expiresAt), flush: () => {} };
    const t = new CircuitBreaker(async (x) => x, { cacheTransport: transport, fusewire: { cache: { ttl_ms: 1000 } } });
    const before = Date.now();
    await t.fire(1);
    await flush();
    assert.equal(sets.length, 1);
    assert.ok(sets[0] >= before + 1000 && sets[0] <= Date.now() + 1000, `expires in 1 s: ${sets[0] - before}`);
    t.shutdown();
    const big = new CircuitBreaker(async () => 1, { capacity: 2 ** 33 });
    assert.equal(big.semaphore.count, 2 ** 33);
    big.shutdown();
  });

  test('open() and close() in a mode that pins the phase do nothing, silently (found by review: open() in forced_closed emitted open)', async () => {
    for (const mode of ['forced_open', 'forced_closed', 'disabled']) {
      const b = new CircuitBreaker(async () => 1, { fusewire: { breaker: { mode } } });
      const log = record(b, ['open', 'close', 'halfOpen']);
      const was = [b.opened, b.closed];
      b.open();
      b.close();
      b.open();
      await flush();
      assert.deepEqual(log, [], mode);
      assert.deepEqual([b.opened, b.closed], was, mode);
      b.shutdown();
    }
  });

  test('queued calls count among the fires the error percentage is taken over', async () => {
    const { b, pending } = controlled({
      timeout: false,
      errorThresholdPercentage: 50,
      fusewire: { bulkhead: { isolation: 'pool', max_concurrent: 1, max_queue: 5, queue_rejection_threshold: 5, max_wait_ms: 60_000 } },
    });
    const calls = [];
    for (let i = 0; i < 8; i++) calls.push(settle(b.fire(i)));
    await flush();
    assert.equal(b.stats.fires, 8);
    assert.equal(b.stats.semaphoreRejections, 2);
    assert.equal(b.closed, true, '2 refusals of 8 fires = 25 %, not above 50 %');
    for (let i = 0; i < 6; i++) {
      pending[i].resolve(i);
      await flush();
    }
    await Promise.all(calls);
    b.shutdown();
  });
});

describe('bulkhead with a bounded wait queue', () => {
  test('queued calls run as slots free up; past the queue: ESEMLOCKED', async () => {
    const { b, pending } = controlled({
      timeout: false,
      fusewire: { bulkhead: { isolation: 'pool', max_concurrent: 1, max_queue: 2, max_wait_ms: 60_000 } },
    });
    const log = record(b, ['semaphoreLocked']);
    const p1 = b.fire(1);
    const p2 = b.fire(2);
    const p3 = b.fire(3);
    const { error } = await settle(b.fire(4));
    assert.equal(error.code, 'ESEMLOCKED');
    assert.equal(log.length, 1);
    assert.equal(pending.length, 1, 'one runs, two wait');
    assert.equal(b.stats.fires, 4);
    pending[0].resolve('one');
    assert.equal(await p1, 'one');
    await flush();
    assert.equal(pending.length, 2, 'the first waiter got the slot');
    pending[1].resolve('two');
    assert.equal(await p2, 'two');
    await flush();
    pending[2].resolve('three');
    assert.equal(await p3, 'three');
    assert.equal(b.stats.semaphoreRejections, 1);
    b.shutdown();
  });

  test('a call waiting in the queue at shutdown rejects with ESHUTDOWN (found by review: it stayed pending forever)', async () => {
    const { b, pending } = controlled({
      timeout: false,
      fusewire: { bulkhead: { isolation: 'pool', max_concurrent: 1, max_queue: 2, max_wait_ms: 60_000 } },
    });
    const running = b.fire(1);
    let error;
    b.fire(2).catch((e) => {
      error = e;
    });
    b.shutdown();
    await flush();
    assert.equal(error?.code, 'ESHUTDOWN');
    assert.equal(pending.length, 1, 'it never ran');
    pending[0].resolve('one');
    assert.equal(await running, 'one', 'the running call settles normally');
  });

  test('a waiter past max_wait_ms fails with ESEMLOCKED', async () => {
    clock = fakeTime();
    const { b, pending } = controlled({
      timeout: false,
      fusewire: { bulkhead: { isolation: 'pool', max_concurrent: 1, max_queue: 4, max_wait_ms: 200 } },
    });
    const log = record(b, ['semaphoreLocked', 'failure']);
    const p1 = b.fire(1);
    const p2 = b.fire(2);
    clock.tick(199);
    assert.equal(log.length, 0);
    clock.tick(2);
    const { error } = await settle(p2);
    assert.equal(error.code, 'ESEMLOCKED');
    assert.match(error.message, /^Semaphore locked: waited 20\dms in the queue$/);
    assert.deepEqual(log.map((e) => e[0]), ['semaphoreLocked', 'failure']);
    pending[0].resolve(1);
    await p1;
    b.shutdown();
  });
});

describe('long uptime', () => {
  // Found by review: a deadline past a timer's reach (2^31 − 1 ms, 24.8 days; a local
  // key's idle expiry is a year away) armed no timer, the core took it as armed, and
  // after a year's uptime calls no longer timed out nor did an open breaker half-open.
  test('after a year idle, a hung call still times out and an open breaker half-opens', async () => {
    clock = fakeTime();
    const DAY = 86_400_000;
    let hang = false;
    const b = new CircuitBreaker((x) => (x === 'fail' ? Promise.reject(new Error('boom'))
      : hang ? new Promise(() => {}) : Promise.resolve(x)), { timeout: 1000, resetTimeout: 30_000 });
    await b.fire(1);
    for (let d = 0; d < 366; d++) {
      clock.tick(DAY, 3_600_000);
      await flush();
    }
    hang = true;
    const hung = settle(b.fire(2));
    clock.tick(1001, 1);
    await flush();
    assert.equal((await hung).error?.code, 'ETIMEDOUT');
    hang = false;
    for (let d = 0; d < 366; d++) {
      clock.tick(DAY, 3_600_000);
      await flush();
    }
    b.open();
    clock.tick(30_001, 1000);
    await flush();
    assert.equal(b.halfOpen, true, 'half-open after resetTimeout');
    b.shutdown();
  });
});

describe('per-call AbortSignal', () => {
  test('abort while running: rejects with the reason, counts nowhere, aborts the action\'s signal', async () => {
    let seen;
    const b = new CircuitBreaker((x, signal) => {
      seen = signal;
      return new Promise(() => {});
    }, { timeout: false });
    const log = record(b, ['success', 'failure']);
    const ac = new AbortController();
    const p = b.fireWithSignal(ac.signal, 'x');
    assert.ok(seen instanceof AbortSignal, 'the action gets a per-call signal last');
    assert.equal(seen.aborted, false);
    ac.abort(new Error('client went away'));
    const { error } = await settle(p);
    assert.equal(error.message, 'client went away');
    assert.equal(seen.aborted, true);
    assert.equal(log.length, 0);
    const s = b.stats;
    assert.equal(s.failures + s.successes, 0, 'a cancelled call is neither');
    b.shutdown();
  });

  test('errorFilter, cacheGetKey, the fallback and the events get the arguments as the action does, signal last (found by review: one argument less than their types said)', async () => {
    const seen = {};
    const b = new CircuitBreaker(async (sku, signal) => {
      seen.action = signal;
      throw new Error(`503 for ${sku}`);
    }, {
      volumeThreshold: 100,
      errorFilter: (err, sku, signal) => {
        seen.filter = [sku, signal];
        return false;
      },
      cache: true,
      cacheGetKey: (sku, signal) => {
        seen.key = [sku, signal];
        return sku;
      },
    });
    b.on('fire', (args) => { seen.fire = args; });
    b.on('failure', (err, ms, args) => { seen.failure = args; });
    b.fallback((sku, signal, err) => `fallback ${sku} ${signal instanceof AbortSignal} ${err.message}`);
    const ac = new AbortController();
    assert.equal(await b.fireWithSignal(ac.signal, 'a'), 'fallback a true 503 for a');
    assert.ok(seen.action instanceof AbortSignal && seen.action !== ac.signal, 'the action gets its own signal');
    assert.deepEqual(seen.filter, ['a', seen.action]);
    assert.deepEqual(seen.failure, ['a', seen.action]);
    // Before the call runs it has no signal of its own: the caller's.
    assert.deepEqual(seen.fire, ['a', ac.signal]);
    assert.deepEqual(seen.key, ['a', ac.signal]);
    // The same fallback finds the error in the same place after `fire`.
    assert.equal(await b.fire('b', new AbortController().signal), 'fallback b true 503 for b');
    // Refused (open): the fallback gets the caller's signal.
    b.open();
    assert.equal(await b.fireWithSignal(ac.signal, 'c'), 'fallback c true Breaker is open');
    // Disabled: the action runs with the caller's signal (it got none).
    b.disable();
    await b.fireWithSignal(ac.signal, 'd').catch(() => {});
    assert.equal(seen.action, ac.signal);
    b.shutdown();
    // The fallback gets the caller's signal, not the call's own, aborted at the timeout
    // (found by review: a fallback fetching with it was cancelled at once).
    const slow = new CircuitBreaker((x, signal) => new Promise(() => {}), { timeout: 20, volumeThreshold: 100 });
    slow.fallback((x, signal, err) => `${x} ${signal === ac.signal} ${signal.aborted} ${err.code}`);
    assert.equal(await slow.fireWithSignal(ac.signal, 'e'), 'e true false ETIMEDOUT');
    slow.shutdown();
  });

  test('an aborted call\'s action is told before a queued call takes its slot (found by a stress test: two actions ran on one slot)', async () => {
    for (const shared of [undefined, { store: new SharedStore({ entries: 8 }) }]) {
      const order = [];
      const b = new CircuitBreaker((name, signal) => new Promise((resolve, reject) => {
        order.push(`${name} starts`);
        const t = setTimeout(() => resolve(name), 20);
        signal.addEventListener('abort', () => {
          clearTimeout(t);
          order.push(`${name} told`);
          reject(signal.reason);
        });
      }), {
        name: 'one-slot', timeout: false,
        fusewire: { bulkhead: { isolation: 'pool', max_concurrent: 1, max_queue: 1, queue_rejection_threshold: 1, max_wait_ms: 1000 } },
        ...(shared === undefined ? {} : { shared }),
      });
      const ac = new AbortController();
      const a = b.fireWithSignal(ac.signal, 'A').catch((e) => e.name);
      const next = b.fireWithSignal(new AbortController().signal, 'B');
      ac.abort();
      assert.deepEqual(await Promise.all([a, next]), ['AbortError', 'B']);
      assert.deepEqual(order, ['A starts', 'A told', 'B starts'], shared === undefined ? 'local' : 'shared');
      b.shutdown();
    }
  });

  test('the caller\'s deadline (a TimeoutError, as from AbortSignal.timeout) counts as a timeout', async () => {
    const b = new CircuitBreaker(() => new Promise(() => {}),
      { timeout: false, volumeThreshold: 4, errorThresholdPercentage: 50, resetTimeout: 60_000 });
    const log = record(b, ['timeout', 'failure', 'open', 'success']);
    const timedOut = () => new DOMException('The operation was aborted due to timeout', 'TimeoutError');
    for (let i = 0; i < 4; i++) {
      const ac = new AbortController();
      const p = b.fireWithSignal(ac.signal, i);
      const reason = timedOut();
      ac.abort(reason);
      assert.equal((await settle(p)).error, reason, 'rejects with the signal\'s reason');
    }
    assert.deepEqual(log.map((e) => e[0]),
      ['timeout', 'failure', 'timeout', 'failure', 'timeout', 'failure', 'timeout', 'failure', 'open']);
    assert.equal(log[0][1].name, 'TimeoutError');
    assert.equal(log[0][3][0], 0, 'the call\'s arguments, as opossum\'s timeout event');
    assert.ok(log[0][3][1] instanceof AbortSignal, 'with the signal the action got last');
    assert.equal(b.stats.timeouts, 4);
    assert.equal(b.opened, true, 'a hung upstream behind callers\' deadlines trips the breaker');
    b.shutdown();

    // Queued, or aborted for another reason: the caller left; nothing counts.
    const q = new CircuitBreaker(() => new Promise(() => {}),
      { timeout: false, fusewire: { bulkhead: { isolation: 'pool', max_concurrent: 1, max_queue: 1 } } });
    void q.fire(0);
    const ac = new AbortController();
    const queued = q.fireWithSignal(ac.signal, 1);
    ac.abort(timedOut());
    await settle(queued);
    const other = new AbortController();
    const running = new CircuitBreaker(() => new Promise(() => {}), { timeout: false });
    const p = running.fireWithSignal(other.signal, 2);
    other.abort(new Error('TimeoutError in the message only'));
    await settle(p);
    for (const x of [q, running]) {
      assert.equal(x.stats.timeouts + x.stats.failures, 0);
      x.shutdown();
    }
  });

  test('an aborted probe gives its turn back', async () => {
    clock = fakeTime();
    const b = new CircuitBreaker((x) => (x === 'fail' ? Promise.reject(new Error('boom')) : new Promise(() => {})),
      { resetTimeout: 100, timeout: false });
    await settle(b.fire('fail'));
    clock.tick(101);
    const ac = new AbortController();
    const probe = b.fireWithSignal(ac.signal, 'x');
    assert.equal(b.pendingClose, false);
    ac.abort();
    await settle(probe);
    assert.equal(b.halfOpen, true);
    assert.equal(b.pendingClose, true, 'the next call may probe');
    b.shutdown();
  });

  test('abort while queued, an already aborted signal, a timeout aborts the call signal', async () => {
    clock = fakeTime();
    const signals = [];
    const b = new CircuitBreaker((x, signal) => {
      signals.push(signal);
      return new Promise(() => {});
    }, { timeout: 100, fusewire: { bulkhead: { isolation: 'pool', max_concurrent: 1, max_queue: 2 } } });
    const first = b.fireWithSignal(new AbortController().signal, 1);
    const ac = new AbortController();
    const queued = b.fireWithSignal(ac.signal, 2);
    ac.abort('nope');
    assert.equal((await settle(queued)).error, 'nope');
    const done = new AbortController();
    done.abort('already');
    assert.equal((await settle(b.fireWithSignal(done.signal, 3))).error, 'already');
    clock.tick(101);
    assert.equal((await settle(first)).error.code, 'ETIMEDOUT');
    assert.equal(signals.length, 1);
    assert.equal(signals[0].aborted, true, 'the timeout aborted the call signal');
    await assert.rejects(b.fireWithSignal('not a signal'), TypeError);
    b.shutdown();
  });
});
