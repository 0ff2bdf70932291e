// opossum's API: every option, method, getter, event and transition, on the packed
// tarball (installed into a scratch project), with fake time where time matters.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { dirname } from 'node:path';
import { afterEach, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import CircuitBreaker, { Status, isOurError } from 'fusewire';

import { EVENTS, deferred, fakeTime, flush, record } from './helpers.mjs';

const ok = async (x) => x;
const boom = async () => {
  throw new Error('boom');
};
let clock;
afterEach(() => {
  clock?.restore();
  clock = undefined;
});

/** A breaker whose action fails when called with 'fail', hangs with 'hang'. */
function flaky(options = {}) {
  const hangs = [];
  const b = new CircuitBreaker(async (x) => {
    if (x === 'fail') throw new Error('boom');
    if (x === 'hang') {
      const d = deferred();
      hangs.push(d);
      return d.promise;
    }
    return x;
  }, options);
  return { b, hangs };
}

async function settle(p) {
  try {
    return { value: await p };
  } catch (error) {
    return { error };
  }
}

describe('construction', () => {
  test('defaults, name and group', () => {
    const opts = {};
    const b = new CircuitBreaker(async function fetchUser() {}, opts);
    assert.equal(b.name, 'fetchUser');
    assert.equal(b.group, 'fetchUser');
    assert.equal(b.options, opts, 'keeps the options object');
    assert.equal(b.enabled, true);
    assert.equal(b.closed, true);
    assert.equal(b.opened, false);
    assert.equal(b.halfOpen, false);
    assert.equal(b.pendingClose, false);
    assert.equal(b.warmUp, false);
    assert.equal(b.isShutdown, false);
    assert.equal(b.volumeThreshold, 0);
    const named = new CircuitBreaker(() => 1, { name: 'n', group: 'g', volumeThreshold: 7 });
    assert.equal(named.name, 'n');
    assert.equal(named.group, 'g');
    assert.equal(named.volumeThreshold, 7);
    const anon = new CircuitBreaker(() => 1);
    assert.match(anon.name, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    for (const x of [b, named, anon]) x.shutdown();
  });

  test('an action that is not a function is refused', () => {
    assert.throws(() => new CircuitBreaker(), {
      name: 'TypeError',
      message: 'No action provided. Cannot construct a CircuitBreaker without an invocable action.',
    });
    for (const a of [42, 'x', {}, Promise.resolve(1)]) {
      assert.throws(() => new CircuitBreaker(a), { name: 'TypeError', message: /^action: must be a function/ });
    }
  });

  test('isOurError', async () => {
    assert.equal(CircuitBreaker.isOurError(new Error('x')), false);
    assert.equal(isOurError(null), false);
    const b = new CircuitBreaker(ok);
    b.open();
    const { error } = await settle(b.fire(1));
    assert.equal(error.code, 'EOPENBREAKER');
    assert.equal(CircuitBreaker.isOurError(error), true);
    b.shutdown();
  });
});

describe('fire and call', () => {
  test('action: the protected function, as in opossum; assigning one protects it', async () => {
    const b = new CircuitBreaker(ok);
    assert.equal(b.action, ok);
    b.action = async () => 'other';
    assert.equal(await b.fire(), 'other');
    assert.throws(() => { b.action = 5; }, { name: 'TypeError', message: 'action: must be a function, got 5' });
    assert.equal(await b.fire(), 'other', 'a refused assignment changes nothing');
    b.shutdown();
  });

  test('fire goes through a subclass\'s own call, with the action as this (as in opossum)', async () => {
    const seen = [];
    class Logged extends CircuitBreaker {
      call(context, ...args) {
        seen.push([context === action, ...args]);
        return super.call(context, ...args);
      }
    }
    const action = async function (x) { return [this === action, x]; };
    const b = new Logged(action);
    assert.deepEqual(await b.fire(1), [true, 1]);
    assert.deepEqual(await b.call('ctx', 2), [false, 2]);
    assert.deepEqual(seen, [[true, 1], [false, 2]]);
    b.shutdown();
  });

  test('fire and success listeners added late, removed and added again see exactly their calls', async () => {
    const b = new CircuitBreaker(ok);
    await b.fire(0); // nobody listens: nothing to see
    const seen = [];
    const onFire = (args) => seen.push(['fire', ...args]);
    const onSuccess = (v) => seen.push(['success', v]);
    b.on('fire', onFire);
    b.once('success', onSuccess);
    await b.fire(1);
    await b.fire(2);
    b.removeListener('fire', onFire);
    await b.fire(3);
    b.prependListener('success', onSuccess);
    b.on('fire', onFire);
    await b.fire(4);
    b.removeAllListeners('success');
    await b.fire(5);
    b.removeAllListeners();
    await b.fire(6);
    assert.deepEqual(seen, [['fire', 1], ['success', 1], ['fire', 2], ['fire', 4], ['success', 4], ['fire', 5]]);
    b.shutdown();
  });

  test('a listener that throws while a call settles at once rejects that call', async () => {
    const b = new CircuitBreaker((x) => x);
    b.on('success', () => {
      throw new Error('listener');
    });
    await assert.rejects(b.fire(1), /listener/);
    b.removeAllListeners('success');
    assert.equal(await b.fire(2), 2, 'the breaker still works');
    b.shutdown();
  });

  test('a listener that throws while an async call settles rejects that call (found by review: it never settled)', async () => {
    const b = new CircuitBreaker(async (x) => x);
    b.on('success', () => {
      throw new Error('listener');
    });
    await assert.rejects(b.fire(1), /listener/);
    b.removeAllListeners('success');
    b.on('failure', () => {
      throw new Error('failure listener');
    });
    const failing = new CircuitBreaker(boom);
    failing.on('failure', () => {
      throw new Error('failure listener');
    });
    await assert.rejects(failing.fire(), /failure listener/);
    assert.equal(await b.fire(2), 2, 'the breaker still works');
    b.shutdown();
    failing.shutdown();
  });

  test('removeAllListeners() keeps one set of the breaker\'s own hooks however often it runs (found by review)', async () => {
    clock = fakeTime();
    const b = new CircuitBreaker(ok, { rollingCountTimeout: 1000, rollingCountBuckets: 10 });
    const before = [b.listenerCount('newListener'), b.status.listenerCount('newListener')];
    for (let i = 0; i < 12; i++) b.removeAllListeners();
    for (let i = 0; i < 3; i++) b.removeAllListeners('newListener');
    b.status.removeAllListeners();
    assert.deepEqual([b.listenerCount('newListener'), b.status.listenerCount('newListener')], before);
    assert.equal(b.listenerCount('removeListener'), 1);
    // Snapshots still start once someone listens on the status.
    const got = [];
    b.status.on('snapshot', (s) => got.push(s));
    await flush();
    clock.tick(250);
    assert.ok(got.length >= 2, `snapshots after status.removeAllListeners(): ${got.length}`);
    b.shutdown();
  });

  test('close() from a timeout listener: no stale open after it (found by review)', async () => {
    clock = fakeTime();
    const b = new CircuitBreaker(() => new Promise(() => {}), { timeout: 20, volumeThreshold: 1 });
    const seen = [];
    for (const e of ['timeout', 'failure', 'open', 'close']) b.on(e, () => seen.push(e));
    b.once('timeout', () => b.close());
    b.fire().catch(() => {});
    await flush();
    clock.tick(20);
    await flush();
    // The timeout tripped the breaker; the listener's close() came after: the open
    // it replaced is not emitted, and the state is what the last event said.
    assert.deepEqual(seen, ['timeout', 'close', 'failure']);
    assert.equal(b.closed, true);
    b.shutdown();
  });

  test('a listener that throws on a timer-driven event does not stop the breaker\'s timer', async () => {
    clock = fakeTime();
    const { b } = flaky({ timeout: 100 });
    let throws = 1;
    b.on('timeout', () => {
      if (throws-- > 0) throw new Error('listener');
    });
    const first = settle(b.fire('hang'));
    clock.tick(50);
    const second = settle(b.fire('hang'));
    assert.throws(() => clock.tick(60), /listener/, 'the listener\'s error surfaces from the timer');
    clock.tick(60);
    assert.equal((await second).error?.code, 'ETIMEDOUT', 'the next deadline still fires');
    assert.equal((await first).error?.code, 'ETIMEDOUT', 'the call whose listener threw settled too');
    b.shutdown();
  });

  test('listeners that throw while a batch of calls times out: every call still settles, every event is told (found by review: the rest hung)', async () => {
    clock = fakeTime();
    const { b } = flaky({ timeout: 100, volumeThreshold: 2, errorThresholdPercentage: 50 });
    const seen = [];
    for (const ev of ['timeout', 'failure', 'open']) {
      b.on(ev, () => {
        seen.push(ev);
        throw new Error(`${ev} listener`);
      });
    }
    const calls = [settle(b.fire('hang')), settle(b.fire('hang')), settle(b.fire('hang'))];
    assert.throws(() => clock.tick(110), /timeout listener/, 'the first listener error surfaces from the timer');
    const got = await Promise.all(calls);
    assert.deepEqual(got.map((r) => r.error?.code), ['ETIMEDOUT', 'ETIMEDOUT', 'ETIMEDOUT']);
    assert.deepEqual(seen.filter((e) => e === 'timeout').length, 3, 'each call told its timeout');
    assert.ok(seen.includes('open'), `the trip was told: ${seen}`);
    assert.equal(b.opened, true);
    b.shutdown();
  });

  test('a listener that throws while queued calls are refused: every waiter still settles', async () => {
    clock = fakeTime();
    const { b, hangs } = flaky({ timeout: false, fusewire: { bulkhead: { isolation: "pool", max_concurrent: 1, max_queue: 3, max_wait_ms: 50 } } });
    b.on('semaphoreLocked', () => {
      throw new Error('locked listener');
    });
    const running = settle(b.fire('hang'));
    const waiters = [settle(b.fire(1)), settle(b.fire(2))];
    assert.throws(() => clock.tick(60), /locked listener/);
    const got = await Promise.all(waiters);
    assert.deepEqual(got.map((r) => r.error?.code), ['ESEMLOCKED', 'ESEMLOCKED']);
    hangs[0].resolve('done');
    assert.equal((await running).value, 'done');
    b.shutdown();
  });

  test('a fallback listener that throws while a call times out or a waiter is refused: the call rejects with its error (found by review: it never settled)', async () => {
    clock = fakeTime();
    const outcome = (p) => {
      const r = { settled: false };
      p.then((value) => Object.assign(r, { settled: true, value }), (error) => Object.assign(r, { settled: true, error }));
      return r;
    };
    const { b } = flaky({ timeout: 100 });
    b.fallback(() => 'fallback');
    b.on('fallback', () => {
      throw new Error('fallback listener');
    });
    const timedOut = outcome(b.fire('hang'));
    // As opossum's: the listener's error is the call's rejection only (until
    // 2026-12-07 it was thrown out of the timer too).
    assert.doesNotThrow(() => clock.tick(110));
    await flush();
    assert.ok(timedOut.settled, 'the timed-out call settled');
    assert.match(timedOut.error?.message ?? '', /fallback listener/);

    const { b: q, hangs } = flaky({ timeout: false, fusewire: { bulkhead: { isolation: 'pool', max_concurrent: 1, max_queue: 3, max_wait_ms: 50 } } });
    q.fallback(() => 'fallback');
    q.on('fallback', () => {
      throw new Error('fallback listener');
    });
    const running = settle(q.fire('hang'));
    const waiter = outcome(q.fire(1));
    assert.doesNotThrow(() => clock.tick(60));
    await flush();
    assert.ok(waiter.settled, 'the refused waiter settled');
    assert.match(waiter.error?.message ?? '', /fallback listener/);
    hangs[0].resolve('done');
    assert.equal((await running).value, 'done');
    b.shutdown();
    q.shutdown();
  });

  test('resolves with the result; call() sets this; sync results and throws', async () => {
    const b = new CircuitBreaker(async (a, b2) => a + b2);
    assert.equal(await b.fire(2, 3), 5);
    const ctx = { k: 7 };
    const c = new CircuitBreaker(function (x) {
      return this.k * x;
    });
    assert.equal(await c.call(ctx, 3), 21, 'sync value, this = context');
    const s = new CircuitBreaker(() => {
      throw new Error('sync');
    });
    await assert.rejects(s.fire(), /sync/);
    assert.equal(s.stats.failures, 1);
    const u = new CircuitBreaker(() => undefined);
    assert.equal(await u.fire(), undefined, 'a sync undefined is a success');
    for (const x of [b, c, s, u]) x.shutdown();
  });

  test('`this` in the action: the action itself under fire(), as opossum\'s fire() calls it; the context under call() (found by review: undefined)', async () => {
    const seen = [];
    function action(x) {
      seen.push(this);
      return x;
    }
    const ctx = { k: 1 };
    const b = new CircuitBreaker(action);
    await b.fire(1);
    await b.call(ctx, 2);
    await b.fireWithSignal(new AbortController().signal, 3);
    b.disable();
    await b.fire(4);
    await b.call(ctx, 5);
    const cached = new CircuitBreaker(action, { cache: true });
    await cached.fire(6);
    const coalesced = new CircuitBreaker(action, { coalesce: true });
    await coalesced.fire(7);
    const who = (t) => (t === action ? 'action' : t === ctx ? 'ctx' : String(t));
    assert.deepEqual(seen.map(who), ['action', 'ctx', 'action', 'action', 'ctx', 'action', 'action']);
    for (const x of [b, cached, coalesced]) x.shutdown();
  });

  test('events carry opossum\'s arguments', async () => {
    const b = new CircuitBreaker(async (x) => {
      if (x < 0) throw new Error('neg');
      return x * 2;
    });
    const log = record(b, EVENTS);
    await b.fire(4);
    await settle(b.fire(-1));
    const names = log.map((e) => e[0]);
    assert.deepEqual(names, ['fire', 'success', 'fire', 'failure']);
    assert.deepEqual(log[0], ['fire', [4]]);
    assert.equal(log[1][1], 8);
    assert.equal(typeof log[1][2], 'number');
    assert.ok(log[1][2] >= 0, 'latency in ms');
    assert.equal(log[3][1].message, 'neg');
    assert.equal(typeof log[3][2], 'number');
    assert.deepEqual(log[3][3], [-1]);
    b.shutdown();
  });
});

describe('what listeners see', () => {
  test('a fallback or semaphoreLocked listener that throws rejects the call, as in opossum (found by review: it threw out of fire())', async () => {
    const b = new CircuitBreaker(async () => 1);
    b.fallback(() => 'fb');
    b.on('fallback', () => { throw new Error('fallback listener'); });
    b.open();
    let p;
    assert.doesNotThrow(() => { p = b.fire(); });
    await assert.rejects(p, /^Error: fallback listener$/);
    const c = new CircuitBreaker(() => new Promise(() => {}), { capacity: 1, timeout: false });
    c.on('semaphoreLocked', () => { throw new Error('locked listener'); });
    c.fire();
    let q;
    assert.doesNotThrow(() => { q = c.fire(); });
    await assert.rejects(q, /^Error: locked listener$/);
    b.shutdown();
    c.shutdown();
  });

  test('in timeout, failure and semaphoreLocked listeners the breaker is not open yet, as in opossum (found by review)', async () => {
    clock = fakeTime();
    const { b, hangs } = flaky({ errorThresholdPercentage: 1, timeout: 100, resetTimeout: 1000 });
    const seen = [];
    const look = (br, ev) => br.on(ev, () => seen.push([ev, br.opened, br.closed, br.halfOpen, br.toJSON().state.open]));
    for (const ev of ['timeout', 'failure', 'semaphoreLocked', 'open', 'halfOpen', 'close']) look(b, ev);
    await settle(b.fire('fail'));
    assert.deepEqual(seen, [['failure', false, true, false, false], ['open', true, false, false, true]]);
    seen.length = 0;
    clock.tick(1001);
    await settle(b.fire('fail'));
    assert.deepEqual(seen, [
      ['halfOpen', false, false, true, false],
      ['failure', false, false, true, false],
      ['open', true, false, false, true],
    ], 'a failed probe: still half-open in its failure listener');
    b.close();
    seen.length = 0;
    const p = b.fire('hang');
    clock.tick(101);
    await settle(p);
    assert.deepEqual(seen, [
      ['timeout', false, true, false, false],
      ['failure', false, true, false, false],
      ['open', true, false, false, true],
    ]);
    hangs.forEach((h) => h.resolve(1));
    b.shutdown();
    const { b: c, hangs: running } = flaky({ capacity: 1, errorThresholdPercentage: 1, timeout: false });
    for (const ev of ['failure', 'semaphoreLocked', 'open']) look(c, ev);
    seen.length = 0;
    const first = c.fire('hang');
    await settle(c.fire(1));
    assert.deepEqual(seen, [
      ['semaphoreLocked', false, true, false, false],
      ['failure', false, true, false, false],
      ['open', true, false, false, true],
    ]);
    running[0].resolve(1);
    await first;
    c.shutdown();
  });

  test('stats read in fire, cacheMiss, cacheHit and fallback listeners count that event, as in opossum (found by review: one behind)', async () => {
    const b = new CircuitBreaker(async (x) => x, { cache: true });
    const seen = [];
    b.on('fire', () => seen.push(['fire', b.stats.fires]));
    b.on('cacheMiss', () => seen.push(['cacheMiss', b.stats.fires, b.stats.cacheMisses]));
    b.on('cacheHit', () => seen.push(['cacheHit', b.stats.fires, b.stats.cacheHits]));
    await b.fire(1);
    await b.fire(1);
    assert.deepEqual(seen, [['fire', 1], ['cacheMiss', 1, 1], ['fire', 2], ['cacheHit', 2, 1]]);
    assert.equal(b.stats.fires, 2);
    assert.equal(b.status.stats.cacheHits, 1);
    b.shutdown();

    const f = new CircuitBreaker(boom, { errorThresholdPercentage: 100 });
    const fallbacks = [];
    f.on('fallback', () => fallbacks.push([f.stats.fallbacks, f.stats.failures, f.status.stats.fallbacks]));
    f.fallback(() => 'fb');
    assert.equal(await f.fire(), 'fb');
    const later = deferred();
    f.fallback(() => later.promise);
    const p = f.fire();
    await flush();
    assert.deepEqual(fallbacks, [[1, 1, 1], [2, 2, 2]]);
    assert.equal(f.stats.fallbacks, 2, 'a fallback still running is counted');
    later.resolve('fb later');
    assert.equal(await p, 'fb later');
    await flush();
    assert.equal(f.stats.fallbacks, 2);
    f.shutdown();
  });
});

describe('trip rule', () => {
  test('opens when failures / fires * 100 is above the threshold (strictly)', async () => {
    const { b } = flaky();
    const log = record(b, ['open', 'reject']);
    await b.fire(1);
    await settle(b.fire('fail'));
    assert.equal(b.closed, true, '1 of 2 = 50 %, not above 50');
    await settle(b.fire('fail'));
    assert.equal(b.opened, true, '2 of 3 > 50 %');
    assert.deepEqual(log.map((e) => e[0]), ['open']);
    const { error } = await settle(b.fire(1));
    assert.equal(error.code, 'EOPENBREAKER');
    assert.equal(error.message, 'Breaker is open');
    assert.equal(log[1][0], 'reject');
    assert.equal(log[1][1], error);
    const s = b.stats;
    assert.equal(s.fires, 4, 'rejected calls are fires');
    assert.equal(s.rejects, 1);
    assert.equal(s.failures, 2);
    assert.equal(s.successes, 1);
    b.shutdown();
  });

  test('errorThresholdPercentage and volumeThreshold', async () => {
    const { b } = flaky({ errorThresholdPercentage: 20, volumeThreshold: 5 });
    for (let i = 0; i < 3; i++) await settle(b.fire('fail'));
    assert.equal(b.closed, true, '3 fires < volume 5');
    await b.fire(1);
    await settle(b.fire('fail'));
    assert.equal(b.opened, true, '4 of 5 > 20 %');
    b.shutdown();
    const { b: c } = flaky({ errorThresholdPercentage: 0 });
    await settle(c.fire('fail'));
    assert.equal(c.opened, true, 'any failure is above 0 %');
    c.shutdown();
  });

  test('calls still running count as fires', async () => {
    const { b, hangs } = flaky({ timeout: false });
    const running = [];
    for (let i = 0; i < 4; i++) running.push(b.fire('hang'));
    await settle(b.fire('fail'));
    assert.equal(b.closed, true, '1 failure of 5 fires');
    assert.equal(b.stats.fires, 5);
    for (const h of hangs) h.resolve('late ok');
    await Promise.all(running);
    b.shutdown();
  });

  test('errorFilter: a filtered error is a success that still rejects', async () => {
    const b = new CircuitBreaker(async (code) => {
      const e = new Error(`status ${code}`);
      e.status = code;
      throw e;
    }, { errorFilter: (err, code) => err.status === 404 && code === 404 });
    const log = record(b, ['success', 'failure', 'fallback']);
    b.fallback(() => 'fb');
    const { error } = await settle(b.fire(404));
    assert.equal(error.status, 404);
    assert.deepEqual(log.map((e) => e[0]), ['success'], 'no failure, no fallback');
    assert.equal(log[0][1], error);
    assert.equal(b.stats.failures, 0);
    assert.equal(b.stats.successes, 1);
    assert.equal(await b.fire(500), 'fb');
    assert.equal(b.closed, true, '1 failure of 2 fires = 50 %');
    assert.equal(await b.fire(500), 'fb');
    assert.equal(b.opened, true);
    b.shutdown();
  });
});

describe('errorFilter results', () => {
  test('any truthy value filters, as opossum tests it; on the timeout path too (found by review: only `true` did)', async () => {
    clock = fakeTime();
    for (const v of [1, 'yes', {}, [], true, { status: 404 }]) {
      const b = new CircuitBreaker(boom, { errorFilter: () => v });
      const log = record(b, ['success', 'failure', 'fallback']);
      b.fallback(() => 'fb');
      await assert.rejects(b.fire(), /boom/, `errorFilter → ${JSON.stringify(v)}: the call still rejects`);
      assert.deepEqual(log.map((e) => e[0]), ['success'], `errorFilter → ${JSON.stringify(v)}`);
      assert.equal(b.stats.failures, 0);
      assert.equal(b.stats.successes, 1);
      b.shutdown();
    }
    for (const v of [false, 0, '', null, undefined, NaN]) {
      const b = new CircuitBreaker(boom, { errorFilter: () => v });
      b.fallback(() => 'fb');
      assert.equal(await b.fire(), 'fb', `errorFilter → ${String(v)}: a failure`);
      assert.equal(b.stats.failures, 1);
      b.shutdown();
    }
    // A timeout asks errorFilter too: a truthy answer emits success and skips the fallback.
    const t = new CircuitBreaker(() => new Promise(() => {}), {
      timeout: 100,
      errorFilter: (err) => err.code === 'ETIMEDOUT' && 'slow is fine',
    });
    t.fallback(() => 'fb');
    const log = record(t, ['timeout', 'success', 'failure', 'fallback']);
    const p = settle(t.fire());
    clock.tick(101);
    assert.equal((await p).error?.code, 'ETIMEDOUT');
    assert.deepEqual(log.map((e) => e[0]), ['timeout', 'success']);
    t.shutdown();
  });
});

describe('half-open (timer-driven)', () => {
  test('halfOpen is emitted when resetTimeout elapses, with no call', async () => {
    clock = fakeTime();
    const { b, hangs } = flaky({ resetTimeout: 1000 });
    const log = record(b, ['open', 'halfOpen', 'close']);
    await settle(b.fire('fail'));
    assert.equal(b.opened, true);
    clock.tick(999);
    assert.equal(b.opened, true);
    assert.deepEqual(log.map((e) => e[0]), ['open']);
    clock.tick(2);
    assert.deepEqual(log.map((e) => e[0]), ['open', 'halfOpen'], 'no call needed');
    assert.deepEqual(log[1], ['halfOpen', 1000]);
    assert.equal(b.halfOpen, true);
    assert.equal(b.pendingClose, true);
    // The first call is the probe; others are rejected meanwhile.
    const probe = b.fire('hang');
    assert.equal(b.pendingClose, false);
    const { error } = await settle(b.fire(1));
    assert.equal(error.code, 'EOPENBREAKER');
    hangs[0].resolve('up');
    assert.equal(await probe, 'up');
    assert.equal(b.closed, true);
    assert.deepEqual(log.map((e) => e[0]), ['open', 'halfOpen', 'close']);
    b.shutdown();
  });

  test('a probe\'s success: close comes before success, as in opossum (found by review)', async () => {
    clock = fakeTime();
    const { b } = flaky({ resetTimeout: 1000, errorFilter: (e) => e.message === 'filtered' });
    const log = record(b, ['fire', 'success', 'close', 'open', 'halfOpen']);
    await settle(b.fire('fail'));
    clock.tick(1001);
    await b.fire(1);
    assert.deepEqual(log.map((e) => e[0]), ['fire', 'open', 'halfOpen', 'fire', 'close', 'success']);
    b.shutdown();
  });

  test('open and close carry their reason', async () => {
    clock = fakeTime();
    const { b } = flaky({ resetTimeout: 500 });
    const log = record(b, ['open', 'close']);
    await settle(b.fire('fail'));
    clock.tick(501);
    await settle(b.fire('fail'));
    clock.tick(501);
    await b.fire(1);
    b.open();
    b.close();
    assert.deepEqual(log, [['open', 'error_percentage'], ['open', 'probe_failed'], ['close', 'probes_succeeded'],
      ['open', 'forced'], ['close', 'forced']]);
    b.shutdown();
    const counted = new CircuitBreaker(async () => { throw new Error('x'); },
      { fusewire: { breaker: { error_percentage: { enabled: false }, consecutive_failures: { enabled: true, threshold: 2 } } } });
    const why = [];
    counted.on('open', (r) => why.push(r));
    for (let i = 0; i < 2; i++) await settle(counted.fire());
    assert.deepEqual(why, ['consecutive_failures']);
    counted.shutdown();
  });

  test('a probe success closes, a probe failure reopens', async () => {
    clock = fakeTime();
    const { b } = flaky({ resetTimeout: 500 });
    const log = record(b, ['open', 'halfOpen', 'close']);
    await settle(b.fire('fail'));
    clock.tick(501);
    await settle(b.fire('fail'));
    assert.equal(b.opened, true, 'the failed probe reopened it');
    clock.tick(501);
    assert.equal(b.halfOpen, true);
    assert.equal(await b.fire(7), 7);
    assert.equal(b.closed, true);
    assert.deepEqual(log.map((e) => e[0]), ['open', 'halfOpen', 'open', 'halfOpen', 'close']);
    b.shutdown();
  });

  test('EOPENBREAKER carries retryAfter: ms until the breaker lets calls through; refusal says why', async () => {
    clock = fakeTime();
    const { b, hangs } = flaky({ resetTimeout: 1000 });
    await settle(b.fire('fail'));
    clock.tick(400);
    let { error } = await settle(b.fire(1));
    assert.equal(error.code, 'EOPENBREAKER');
    assert.equal(error.refusal, 'open');
    assert.equal(error.retryAfter, 600);
    clock.tick(599);
    ({ error } = await settle(b.fire(1)));
    assert.equal(error.retryAfter, 1);
    clock.tick(1);
    // Half-open with its probe out: no moment is known.
    const probe = b.fire('hang');
    ({ error } = await settle(b.fire(1)));
    assert.equal(error.code, 'EOPENBREAKER');
    assert.equal(error.refusal, 'probes_exhausted');
    assert.equal('retryAfter' in error, false);
    hangs[0].resolve('up');
    await probe;
    // open() by hand: resetTimeout from then.
    b.open();
    clock.tick(250);
    ({ error } = await settle(b.fire(1)));
    assert.equal(error.retryAfter, 750);
    b.shutdown();
    // With the request cache on, whose wasm calls on a refused call write the result
    // area too (found by review: `retryAfter` was a cache entry's id, 4.7 h).
    const cached = flaky({ resetTimeout: 1000, cache: true }).b;
    await settle(cached.fire('fail'));
    clock.tick(400);
    for (const x of [1, 1, 2]) {
      ({ error } = await settle(cached.fire(x)));
      assert.equal(error.code, 'EOPENBREAKER');
      assert.equal(error.retryAfter, 600);
    }
    cached.shutdown();
    // Held open by the mode: no end.
    const forced = new CircuitBreaker(ok, { fusewire: { breaker: { mode: 'forced_open' } } });
    ({ error } = await settle(forced.fire(1)));
    assert.equal(error.code, 'EOPENBREAKER');
    assert.equal(error.refusal, 'forced_open');
    assert.equal(error.retryAfter, undefined);
    forced.shutdown();
    // A closed breaker's adaptive throttle refuses with the same code (found by an
    // on-call review: "Breaker is open" while `closed` read true, and nothing said why).
    const throttled = new CircuitBreaker(async () => { throw new Error('down'); }, {
      fusewire: { breaker: { error_percentage: { enabled: false }, adaptive_throttle: { enabled: true, k: 1.0 } } },
    });
    const refusals = new Set();
    for (let i = 0; i < 50; i++) {
      ({ error } = await settle(throttled.fire(1)));
      if (error.code === 'EOPENBREAKER') refusals.add(error.refusal);
    }
    assert.deepEqual([...refusals], ['throttled'], 'refused by the throttle alone');
    assert.equal(throttled.closed, true);
    throttled.shutdown();
    // The bulkhead's refusals say which limit.
    const full = new CircuitBreaker(() => new Promise(() => {}), { capacity: 1, timeout: false });
    full.fire();
    ({ error } = await settle(full.fire()));
    assert.equal(error.code, 'ESEMLOCKED');
    assert.equal(error.refusal, 'bulkhead_full');
    full.shutdown();
  });

  test('open() and close() by hand', async () => {
    clock = fakeTime();
    const { b } = flaky({ resetTimeout: 100 });
    const log = record(b, ['open', 'halfOpen', 'close']);
    b.open();
    b.open();
    assert.equal(b.opened, true);
    b.close();
    b.close();
    assert.equal(b.closed, true);
    b.open();
    clock.tick(101);
    assert.equal(b.halfOpen, true, 'a forced open half-opens after resetTimeout');
    b.close();
    assert.deepEqual(log.map((e) => e[0]), ['open', 'close', 'open', 'halfOpen', 'close']);
    b.shutdown();
  });
});

describe('timeout', () => {
  test('ETIMEDOUT after timeout ms; events; the late result is ignored', async () => {
    clock = fakeTime();
    const ac = new AbortController();
    const { b, hangs } = flaky({ timeout: 250, abortController: ac });
    const log = record(b, ['timeout', 'failure', 'success', 'open']);
    const p = b.fire('hang');
    clock.tick(249);
    assert.equal(log.length, 0);
    clock.tick(2);
    const { error } = await settle(p);
    assert.equal(error.code, 'ETIMEDOUT');
    assert.equal(error.message, 'Timed out after 250ms');
    assert.ok(isOurError(error));
    assert.deepEqual(log.map((e) => e[0]), ['timeout', 'failure', 'open']);
    assert.equal(log[0][1], error);
    assert.ok(log[0][2] >= 250 && log[0][2] <= 252, `latency ${log[0][2]}`);
    assert.deepEqual(log[0][3], ['hang']);
    assert.equal(ac.signal.aborted, true, 'the abortController is aborted');
    hangs[0].resolve('too late');
    await flush();
    assert.equal(log.filter((e) => e[0] === 'success').length, 0);
    const s = b.stats;
    assert.equal(s.timeouts, 1);
    assert.equal(s.failures, 1, 'a timeout is a failure');
    b.shutdown();
  });

  test('timeout: false (and 0) disables it', async () => {
    clock = fakeTime();
    for (const timeout of [false, 0]) {
      const { b, hangs } = flaky({ timeout });
      const p = b.fire('hang');
      clock.tick(60_000, 100);
      hangs[0].resolve('done');
      assert.equal(await p, 'done');
      assert.equal(b.stats.timeouts, 0);
      b.shutdown();
    }
  });

  test('the default timeout is 10 s', async () => {
    clock = fakeTime();
    const { b } = flaky();
    const p = b.fire('hang');
    clock.tick(9_990, 10);
    assert.equal(b.stats.timeouts, 0);
    clock.tick(20, 10);
    const { error } = await settle(p);
    assert.equal(error.message, 'Timed out after 10000ms');
    b.shutdown();
  });
});

describe('fractional milliseconds', () => {
  test('timeout and resetTimeout take them, rounded up to whole ms (opossum hands them to setTimeout)', async () => {
    clock = fakeTime();
    const { b } = flaky({ timeout: 10.5, resetTimeout: 2.5 });
    const log = record(b, ['timeout', 'halfOpen']);
    const p = settle(b.fire('hang'));
    clock.tick(10);
    assert.equal(log.length, 0, 'not at 10 ms');
    clock.tick(1);
    const timedOut = (await p).error;
    assert.equal(timedOut?.code, 'ETIMEDOUT');
    assert.equal(timedOut?.message, 'Timed out after 10.5ms', 'as opossum words it: options.timeout as given');
    assert.equal(b.opened, true);
    clock.tick(2);
    assert.equal(b.opened, true, 'still open at 2 ms');
    clock.tick(1);
    assert.equal(b.halfOpen, true, 'half-open at 3 ms');
    assert.deepEqual(log.map((e) => e[0]), ['timeout', 'halfOpen']);
    assert.equal(log[1][1], 2.5, 'halfOpen(resetTimeout) as given, as opossum emits it');
    assert.equal(b.options.timeout, 10.5, 'the options keep what was given');
    b.shutdown();
    // Below 1 ms is 1 ms, not "no timeout".
    const tiny = flaky({ timeout: 0.2 }).b;
    const q = settle(tiny.fire('hang'));
    clock.tick(1);
    assert.equal((await q).error?.code, 'ETIMEDOUT');
    tiny.shutdown();
  });
});

describe('capacity', () => {
  test('ESEMLOCKED past capacity; semaphoreLocked, failure, fallback order', async () => {
    const { b, hangs } = flaky({ capacity: 2, timeout: false });
    const log = record(b, ['semaphoreLocked', 'failure', 'fallback', 'open']);
    const a = b.fire('hang');
    const c = b.fire('hang');
    const { error } = await settle(b.fire(1));
    assert.equal(error.code, 'ESEMLOCKED');
    assert.equal(error.message, 'Semaphore locked');
    assert.deepEqual(log.map((e) => e[0]), ['semaphoreLocked', 'failure']);
    assert.equal(b.stats.semaphoreRejections, 1);
    assert.equal(b.stats.failures, 1, 'a semaphore rejection is a failure');
    b.fallback(() => 'fb');
    assert.equal(await b.fire(1), 'fb');
    assert.deepEqual(log.slice(2).map((e) => e[0]), ['semaphoreLocked', 'failure', 'fallback'],
      '2 failures of 4 fires (2 running) = 50 %: still closed');
    assert.equal(await b.fire(1), 'fb');
    assert.deepEqual(log.slice(5).map((e) => e[0]), ['semaphoreLocked', 'failure', 'open', 'fallback']);
    hangs.forEach((h) => h.resolve(1));
    await Promise.all([a, c]);
    b.shutdown();
  });

  test('semaphore.count: the free slots (opossum\'s semaphore, to read)', async () => {
    const { b, hangs } = flaky({ capacity: 2, timeout: false });
    assert.equal(b.semaphore.count, 2);
    const a = b.fire('hang');
    assert.equal(b.semaphore.count, 1);
    assert.equal(b.semaphore.test(), true);
    const c = b.fire('hang');
    assert.equal(b.semaphore.count, 0);
    assert.equal(b.semaphore.test(), false);
    hangs.forEach((h) => h.resolve(1));
    await Promise.all([a, c]);
    assert.equal(b.semaphore.count, b.options.capacity, 'every slot back, as opossum\'s test checks');
    assert.equal(new CircuitBreaker(ok).semaphore.count, Number.MAX_SAFE_INTEGER, 'unbounded, as opossum\'s default capacity');
    b.shutdown();
  });
});

describe('capacity: Infinity', () => {
  test('is unbounded, as opossum\'s default (found by review: a TypeError)', async () => {
    const { b, hangs } = flaky({ capacity: Infinity, timeout: false });
    const running = Array.from({ length: 100 }, () => b.fire('hang'));
    assert.equal(b.stats.semaphoreRejections, 0);
    hangs.forEach((h) => h.resolve(1));
    await Promise.all(running);
    assert.equal(b.stats.successes, 100);
    b.shutdown();
  });
});

describe('fallback', () => {
  test('gets (...args, err), emits fallback(result, err), resolves the call', async () => {
    const { b } = flaky();
    const log = record(b, ['failure', 'open', 'fallback', 'reject']);
    let got;
    b.fallback((...a) => {
      got = a;
      return 'fallback value';
    });
    assert.equal(await b.fire('fail'), 'fallback value');
    assert.equal(got[0], 'fail');
    assert.equal(got[1].message, 'boom');
    assert.deepEqual(log.map((e) => e[0]), ['failure', 'open', 'fallback'], "opossum's order");
    assert.deepEqual(log[2].slice(1), ['fallback value', got[1]]);
    // Also on rejection.
    assert.equal(await b.fire(1), 'fallback value');
    assert.equal(got[1].code, 'EOPENBREAKER');
    assert.equal(b.stats.fallbacks, 2);
    b.shutdown();
  });

  test('an async fallback, a throwing fallback, a breaker as fallback', async () => {
    const { b } = flaky();
    b.fallback(async () => 'later');
    assert.equal(await b.fire('fail'), 'later');
    b.fallback(() => {
      throw new Error('fb broke');
    });
    await assert.rejects(b.fire('fail'), /fb broke/);
    const other = new CircuitBreaker(async (...a) => `other:${a[0]}`);
    b.fallback(other);
    assert.equal(await b.fire('fail'), 'other:fail');
    assert.throws(() => b.fallback(42), TypeError);
    b.shutdown();
    other.shutdown();
  });

  test('a fallback result whose then getter throws fails the fallback and gives its slot back (found by review: the slot stayed taken)', async () => {
    const b = new CircuitBreaker(async () => { throw new Error('down'); }, {
      fusewire: { breaker: { error_percentage: { enabled: false } }, bulkhead: { max_concurrent: 10, fallback_max_concurrent: 2 } },
    });
    b.fallback(() => ({ get then() { throw new Error('bad then'); } }));
    let told = 0;
    b.on('fallback', () => told++);
    for (let i = 0; i < 3; i++) await assert.rejects(b.fire(1), /bad then/);
    assert.equal(told, 3, 'emitted before the rejection, as opossum does');
    b.fallback(() => 'fb');
    assert.equal(await b.fire(1), 'fb', 'the limit of 2 still has room');
    b.shutdown();
  });

  test('fallback(null) and fallback(undefined) remove the fallback, as in opossum (found by review: they threw)', async () => {
    const { b } = flaky({ errorThresholdPercentage: 100 });
    for (const none of [null, undefined]) {
      b.fallback(() => 'fb');
      assert.equal(await b.fire('fail'), 'fb');
      assert.equal(b.fallback(none), b, 'chainable');
      await assert.rejects(b.fire('fail'), /boom/, `fallback(${none}): no fallback`);
    }
    b.shutdown();
  });
});

describe('warm-up, enable/disable', () => {
  test('allowWarmUp: no opening during the first rollingCountTimeout', async () => {
    clock = fakeTime();
    const { b } = flaky({ allowWarmUp: true, rollingCountTimeout: 1000, rollingCountBuckets: 10 });
    assert.equal(b.warmUp, true);
    for (let i = 0; i < 5; i++) await settle(b.fire('fail'));
    assert.equal(b.closed, true);
    clock.tick(1001);
    assert.equal(b.warmUp, false);
    await settle(b.fire('fail'));
    assert.equal(b.opened, true);
    b.shutdown();
  });

  test('disable(): calls run unprotected; enable() protects again', async () => {
    const { b } = flaky();
    b.open();
    b.disable();
    assert.equal(b.enabled, false);
    assert.equal(await b.fire(3), 3, 'runs although open');
    await assert.rejects(b.fire('fail'), /boom/);
    b.enable();
    assert.equal(b.enabled, true);
    await assert.rejects(b.fire(3), { code: 'EOPENBREAKER' });
    const off = new CircuitBreaker(ok, { enabled: false });
    assert.equal(off.enabled, false);
    off.shutdown();
    b.shutdown();
  });
});

describe('shutdown', () => {
  test('emits shutdown, removes listeners, rejects later calls', async () => {
    const { b } = flaky();
    await b.fire(1);
    let seen = 0;
    b.on('shutdown', () => seen++);
    b.on('success', () => assert.fail('listener survived shutdown'));
    b.shutdown();
    assert.equal(seen, 1);
    assert.equal(b.isShutdown, true);
    assert.equal(b.enabled, false);
    assert.equal(b.closed, false);
    assert.equal(b.opened, false);
    assert.equal(b.listenerCount('success'), 0);
    const { error } = await settle(b.fire(1));
    assert.equal(error.code, 'ESHUTDOWN');
    assert.equal(error.message, 'The circuit has been shutdown.');
    assert.equal(b.stats.successes, 1, 'stats stay readable');
    assert.equal(b.toJSON().state.shutdown, true);
    b.shutdown();
    b.open();
    b.close();
  });

  test('a call running at shutdown still times out, and nothing is counted (found by review: it stayed pending forever)', async () => {
    clock = fakeTime();
    const ac = new AbortController();
    const { b, hangs } = flaky({ timeout: 250, abortController: ac, errorThresholdPercentage: 1 });
    const ended = [];
    const watch = (p, name) => p.then((v) => ended.push([name, v]), (e) => ended.push([name, e]));
    watch(b.fire('hang'), 'first');
    clock.tick(100);
    watch(b.fire('hang'), 'second');
    const before = b.stats;
    b.shutdown();
    const late = record(b, EVENTS);
    clock.tick(149);
    await flush();
    assert.deepEqual(ended, [], 'both run on after shutdown');
    clock.tick(2);
    await flush();
    assert.deepEqual(ended.map((e) => e[0]), ['first'], 'the first call\'s timeout outlived shutdown');
    assert.equal(ended[0][1].code, 'ETIMEDOUT');
    assert.equal(ended[0][1].message, 'Timed out after 250ms');
    assert.ok(isOurError(ended[0][1]));
    assert.equal(ac.signal.aborted, true, 'the abortController is aborted, as on any timeout');
    clock.tick(97);
    await flush();
    assert.equal(ended.length, 1, 'the second call\'s deadline is its own (at 350 ms)');
    clock.tick(2);
    await flush();
    assert.deepEqual(ended.map((e) => e[0]), ['first', 'second']);
    assert.equal(ended[1][1].code, 'ETIMEDOUT');
    hangs.forEach((h) => h.resolve('too late'));
    await flush();
    assert.equal(ended.length, 2);
    assert.deepEqual(late.map((e) => e[0]), ['timeout', 'failure', 'timeout', 'failure'],
      'told to listeners added after shutdown, as opossum\'s per-call timer does');
    assert.deepEqual(b.stats, before, 'nothing counted after shutdown');
    assert.equal(b.isShutdown, true);
    assert.equal(b.opened, false);
  });
});

describe('shutdown: the calls still running', () => {
  test('one that fails or times out after shutdown resolves with the fallback; its events reach listeners added since, as in opossum (found by review: it rejected)', async () => {
    clock = fakeTime();
    const pending = new Map();
    const b = new CircuitBreaker((x) => {
      const d = deferred();
      pending.set(x, d);
      return d.promise;
    }, { timeout: 250, errorFilter: (err, x) => x === 'filtered' });
    b.fallback((x, err) => `fallback ${x}: ${err.code ?? err.message}`);
    const results = {};
    for (const x of ['fails', 'filtered', 'succeeds', 'hangs']) {
      b.fire(x).then((v) => (results[x] = ['resolved', v]), (e) => (results[x] = ['rejected', e.message]));
    }
    const before = b.stats;
    b.shutdown();
    const late = record(b, EVENTS);
    pending.get('fails').reject(new Error('boom'));
    pending.get('filtered').reject(new Error('bad request'));
    pending.get('succeeds').resolve('done');
    await flush();
    clock.tick(251);
    await flush();
    assert.deepEqual(results, {
      fails: ['resolved', 'fallback fails: boom'],
      filtered: ['rejected', 'bad request'],
      succeeds: ['resolved', 'done'],
      hangs: ['resolved', 'fallback hangs: ETIMEDOUT'],
    });
    // opossum's order: failure, fallback; errorFilter's success; success; timeout, failure, fallback.
    assert.deepEqual(late.map((e) => [e[0], e[1] instanceof Error ? e[1].message : e[1]]), [
      ['failure', 'boom'], ['fallback', 'fallback fails: boom'],
      ['success', 'bad request'],
      ['success', 'done'],
      ['timeout', 'Timed out after 250ms'], ['failure', 'Timed out after 250ms'], ['fallback', 'fallback hangs: ETIMEDOUT'],
    ]);
    assert.deepEqual(late[0][3], ['fails'], 'failure gets the call\'s arguments');
    assert.equal(typeof late[0][2], 'number', 'and its latency');
    assert.deepEqual(b.stats, before, 'nothing counted after shutdown');
    assert.equal(b.isShutdown, true);
    const { error } = await settle(b.fire('later'));
    assert.equal(error.code, 'ESHUTDOWN', 'a call made after shutdown is still refused');
  });

  test('a call whose action aborted its own signal does not keep another from timing out after shutdown (found by review: the other never settled)', async () => {
    clock = fakeTime();
    const mine = new AbortController();
    const b = new CircuitBreaker((x) => {
      if (x === 'self') mine.abort();
      return new Promise(() => {});
    }, { timeout: 50 });
    const a = settle(b.fireWithSignal(new AbortController().signal, 'a'));
    const self = settle(b.fireWithSignal(mine.signal, 'self'));
    b.shutdown();
    clock.tick(60);
    await flush();
    assert.equal((await self).error?.name, 'AbortError');
    assert.equal((await a).error?.code, 'ETIMEDOUT', 'the other call timed out at its deadline');
  });
});

describe('per-call signals (found by review, against opossum and the README)', () => {
  test('a caller\'s deadline (AbortSignal.timeout) asks errorFilter, as the breaker\'s own timeout does', async () => {
    const asked = [];
    const b = new CircuitBreaker(() => new Promise(() => {}), {
      errorFilter: (err, x) => {
        asked.push([err.name, x]);
        return true;
      },
    });
    const seen = record(b, ['timeout', 'success', 'failure']);
    const { error } = await settle(b.fireWithSignal(AbortSignal.timeout(20), 1));
    assert.equal(error.name, 'TimeoutError');
    assert.deepEqual(asked, [['TimeoutError', 1]]);
    assert.deepEqual(seen.map((e) => e[0]), ['timeout', 'success']);
    b.shutdown();
  });

  test('a breaker\'s own timeout, handed on through its per-call signal, is a timeout to the breaker inside (found by review: it counted nowhere)', async () => {
    const inner = new CircuitBreaker((id, signal) => new Promise(() => {}), { timeout: 10_000, volumeThreshold: 3 });
    const outer = new CircuitBreaker((id, signal) => inner.fireWithSignal(signal, id), { timeout: 20, volumeThreshold: 1e9 });
    for (let i = 0; i < 3; i++) await settle(outer.fireWithSignal(new AbortController().signal, i));
    assert.equal(inner.stats.timeouts, 3);
    assert.equal(inner.opened, true, 'a hung upstream opens the inner breaker too');
    // Any other abort still counts nowhere.
    const other = new CircuitBreaker((id, signal) => new Promise(() => {}), { timeout: false });
    const ac = new AbortController();
    const p = settle(other.fireWithSignal(ac.signal, 1));
    ac.abort(Object.assign(new Error('gone'), { code: 'ETIMEDOUT' })); // not ours
    await p;
    assert.equal(other.stats.timeouts, 0);
    for (const b of [inner, outer, other]) b.shutdown();
  });

  test('the signal goes where the action declares it: optional parameters left out before it are undefined (found by review)', async () => {
    const b = new CircuitBreaker((url, opts, signal) => [url, opts, signal instanceof AbortSignal]);
    assert.deepEqual(await b.fireWithSignal(new AbortController().signal, 'u'), ['u', undefined, true]);
    assert.deepEqual(await b.fireWithSignal(new AbortController().signal, 'u', { r: 1 }), ['u', { r: 1 }, true]);
    const rest = new CircuitBreaker((...a) => a.length);
    assert.equal(await rest.fireWithSignal(new AbortController().signal, 'u'), 2, 'a rest parameter: right after the arguments');
    b.shutdown();
    rest.shutdown();
  });

  test('an already aborted signal is refused before the fire event: it counts nowhere', async () => {
    const b = new CircuitBreaker(ok);
    const fires = [];
    b.on('fire', () => fires.push(b.stats.fires));
    const ctl = new AbortController();
    ctl.abort();
    await assert.rejects(b.fireWithSignal(ctl.signal, 1), { name: 'AbortError' });
    assert.deepEqual(fires, []);
    assert.equal(b.stats.fires, 0);
    b.shutdown();
  });

  test('a restored open state past resetTimeout is half-open with a renewed controller, as opossum\'s constructor makes it', () => {
    const ac = new AbortController();
    ac.abort();
    const b = new CircuitBreaker(ok, {
      autoRenewAbortController: true, abortController: ac, resetTimeout: 1000,
      state: { closed: false, open: true, halfOpen: false, lastTimerAt: Date.now() - 1e6 },
    });
    assert.equal(b.halfOpen, true);
    assert.equal(b.getSignal().aborted, false, 'the probe gets a live signal');
    b.shutdown();
  });
});

describe('stats and status', () => {
  test('a Status serialises as opossum\'s: its two flags, no internals (found in real code: an endpoint sent it)', () => {
    const b = new CircuitBreaker(async () => 1, { rollingPercentilesEnabled: false });
    assert.deepEqual(Object.keys(b.status), ['_events', '_eventsCount', '_maxListeners', 'rollingPercentilesEnabled', 'enableSnapshots']);
    const json = JSON.parse(JSON.stringify(b.status));
    assert.equal(json.rollingPercentilesEnabled, false);
    assert.equal(json.enableSnapshots, true);
    assert.equal('_src' in json, false);
    assert.deepEqual(JSON.parse(JSON.stringify(CircuitBreaker.newStatus({ enableSnapshots: false }))),
      { _events: {}, _eventsCount: 0, rollingPercentilesEnabled: true, enableSnapshots: false });
    b.shutdown();
  });

  test('the shape of stats; percentiles; latencyTimes', async () => {
    const { b } = flaky();
    for (let i = 0; i < 20; i++) await b.fire(i);
    const s = b.stats;
    for (const k of ['failures', 'fallbacks', 'successes', 'rejects', 'fires', 'timeouts', 'cacheHits',
      'cacheMisses', 'coalesceCacheHits', 'coalesceCacheMisses', 'semaphoreRejections', 'latencyMean']) {
      assert.equal(typeof s[k], 'number', k);
    }
    assert.deepEqual(Object.keys(s.percentiles).map(Number).sort((a, b2) => a - b2),
      [0, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 1]);
    assert.deepEqual(s.latencyTimes, [], 'latencies live in histograms');
    assert.ok(s.percentiles[0] <= s.percentiles[0.5] && s.percentiles[0.5] <= s.percentiles[1]);
    assert.ok(s.latencyMean >= 0);
    assert.equal(s.successes, 20);
    assert.deepEqual(b.status.stats.successes, 20);
    b.shutdown();
    const off = new CircuitBreaker(ok, { rollingPercentilesEnabled: false });
    await off.fire(1);
    assert.equal(off.stats.latencyMean, -1);
    assert.ok(Object.values(off.stats.percentiles).every((v) => v === -1));
    off.shutdown();
    // The core schema's switch does the same (the core then keeps no histograms).
    const off2 = new CircuitBreaker(ok, { fusewire: { metrics: { percentiles_enabled: false } } });
    await off2.fire(1);
    assert.equal(off2.stats.latencyMean, -1);
    assert.equal(off2.stats.percentiles[0.5], -1);
    assert.equal(off2.stats.successes, 1);
    off2.shutdown();
  });

  test('the rolling window: buckets newest first, counts expire', async () => {
    clock = fakeTime();
    const { b } = flaky({ rollingCountTimeout: 1000, rollingCountBuckets: 4 });
    assert.ok(b.status instanceof Status);
    // Start 10 ms into a bucket (buckets are aligned to the clock, not to the breaker).
    clock.tick(250 - (b._now() % 250) + 10);
    await b.fire(1);
    clock.tick(250);
    await settle(b.fire('fail'));
    const win = b.status.window;
    assert.equal(win.length, 4);
    assert.equal(win[0].failures, 1);
    assert.equal(win[1].successes, 1);
    assert.deepEqual(win[0].latencyTimes, []);
    clock.tick(800);
    assert.equal(b.stats.successes, 0, 'the success left the window');
    assert.equal(b.stats.failures, 1);
    clock.tick(300);
    assert.equal(b.stats.fires, 0);
    b.shutdown();
  });

  test('latencies leave the percentile window in steps, whatever the bucket count', async () => {
    // Found by review: with 7, 11 or 13 buckets (no divisor up to 5) the latencies
    // were one histogram, and all of them left at once, anywhere from 0 to 10 s
    // after the last call. In steps of at most a fifth they stay 60 % of the window.
    for (const buckets of [7, 11, 13, 10, 4]) {
      for (let stop = 10_000; stop < 20_000; stop += 1_000) {
        clock = fakeTime();
        const b = new CircuitBreaker(async () => {
          await new Promise((r) => setTimeout(r, 5));
          return 1;
        }, { rollingCountTimeout: 10_000, rollingCountBuckets: buckets });
        for (let t = 0; t < stop; t += 200) {
          const p = b.fire();
          clock.tick(5);
          await p;
          clock.tick(195);
        }
        for (let t = 0; t <= 6_000; t += 250) {
          assert.ok(Math.abs(b.stats.percentiles[0.5] - 5) < 0.1,
            `${buckets} buckets, traffic for ${stop} ms: latencies gone ${t} ms after`);
          clock.tick(250);
        }
        b.shutdown();
        clock.restore();
      }
    }
    clock = undefined;
  });

  test('the rolling window is newest first wherever the ring turns', async () => {
    clock = fakeTime();
    const { b } = flaky({ rollingCountTimeout: 1000, rollingCountBuckets: 4, errorThresholdPercentage: 100 });
    clock.tick(250 - (b._now() % 250) + 10);
    const made = [];
    for (let step = 0; step < 9; step++) {
      const fail = step % 3 === 0;
      await settle(b.fire(fail ? 'fail' : step));
      made.unshift(fail ? 'f' : 's');
      const seen = b.status.window.map((x) => (x.failures ? 'f' : x.successes ? 's' : '-'));
      const want = [...made.slice(0, 4), '-', '-', '-'].slice(0, 4);
      assert.deepEqual(seen, want, `step ${step}`);
      clock.tick(250);
    }
    b.shutdown();
  });

  test('the current bucket counts what is in progress and the cache misses, as opossum\'s (found by review: fires, fallbacks and misses were missing)', async () => {
    clock = fakeTime();
    const fb = deferred();
    const hang = deferred();
    const b = new CircuitBreaker(async (x) => {
      if (x === 'fail') throw new Error('boom');
      if (x === 'hang') return hang.promise;
      return x;
    }, { rollingCountTimeout: 1000, rollingCountBuckets: 4, cache: true, coalesce: true, cacheGetKey: (x) => x });
    b.fallback(() => fb.promise);
    clock.tick(250 - (b._now() % 250) + 10);
    await b.fire('a');
    await b.fire('a');
    clock.tick(250);
    const running = b.fire('hang');
    const failed = b.fire('fail');
    await flush();
    const counts = (bucket) => {
      const { percentiles, latencyTimes, latencyMean, ...rest } = bucket;
      void [percentiles, latencyTimes, latencyMean];
      return rest;
    };
    const zero = {
      failures: 0, fallbacks: 0, successes: 0, rejects: 0, fires: 0, timeouts: 0, cacheHits: 0,
      cacheMisses: 0, coalesceCacheHits: 0, coalesceCacheMisses: 0, semaphoreRejections: 0,
    };
    let win = b.status.window;
    assert.deepEqual(counts(win[0]), { ...zero, fires: 2, failures: 1, fallbacks: 1, cacheMisses: 2, coalesceCacheMisses: 2 },
      'the running call and the pending fallback are in the current bucket, with this bucket\'s misses');
    assert.deepEqual(counts(win[1]), { ...zero, fires: 2, successes: 1, cacheHits: 1, cacheMisses: 1, coalesceCacheMisses: 1 });
    const sum = (w) => w.reduce((acc, x) => {
      for (const k of Object.keys(zero)) acc[k] += x[k];
      return acc;
    }, { ...zero });
    assert.deepEqual(sum(win), counts(b.stats), 'the buckets add up to stats');
    fb.resolve('fallback');
    hang.resolve('late');
    assert.equal(await failed, 'fallback');
    assert.equal(await running, 'late');
    win = b.status.window;
    assert.deepEqual(counts(win[0]), { ...zero, fires: 2, successes: 1, failures: 1, fallbacks: 1, cacheMisses: 2, coalesceCacheMisses: 2 },
      'ended: now counted by the core, once');
    clock.tick(760);
    assert.deepEqual(counts(b.status.window[3]), counts(win[0]), 'the bucket moves down the window');
    assert.deepEqual(counts(b.stats), counts(win[0]), 'the older bucket left the window, its misses too');
    clock.tick(250);
    assert.deepEqual(counts(b.stats), zero);
    assert.deepEqual(sum(b.status.window), zero);
    b.shutdown();
  });

  test('rollingCountTimeout bounds what can trip the breaker', async () => {
    clock = fakeTime();
    const { b } = flaky({ rollingCountTimeout: 1000, rollingCountBuckets: 10, volumeThreshold: 3,
      errorThresholdPercentage: 10 });
    await settle(b.fire('fail'));
    await settle(b.fire('fail'));
    clock.tick(1100);
    await settle(b.fire('fail'));
    assert.equal(b.closed, true, 'the first two failures expired: 1 fire < volume 3');
    b.shutdown();
  });

  test('snapshot events, only while someone listens', async () => {
    clock = fakeTime();
    const { b } = flaky({ rollingCountTimeout: 1000, rollingCountBuckets: 10 });
    const onStatus = [];
    const onBreaker = [];
    const l1 = (s) => onStatus.push(s);
    const l2 = (s) => onBreaker.push(s);
    b.status.on('snapshot', l1);
    b.on('snapshot', l2);
    await flush();
    await b.fire(1);
    clock.tick(100);
    clock.tick(100);
    assert.equal(onStatus.length, 2);
    assert.equal(onBreaker.length, 2);
    assert.equal(onStatus[0].successes, 1);
    b.status.off('snapshot', l1);
    b.off('snapshot', l2);
    await flush();
    clock.tick(500);
    assert.equal(onStatus.length, 2, 'stopped');
    b.shutdown();
    const quiet = new CircuitBreaker(ok, { enableSnapshots: false });
    const got = [];
    quiet.on('snapshot', (s) => got.push(s));
    await flush();
    clock.tick(3000);
    assert.equal(got.length, 0);
    quiet.shutdown();
  });

  test('options.status primes the window; newStatus', async () => {
    const b = new CircuitBreaker(ok, { status: { successes: 5, failures: 3, timeouts: 1, rejects: 2, fallbacks: 1 } });
    const s = b.stats;
    assert.equal(s.successes, 5);
    assert.equal(s.failures, 3);
    assert.equal(s.timeouts, 1);
    assert.equal(s.rejects, 2);
    assert.equal(s.fallbacks, 1);
    // Read back as given (found running opossum's own tests): `fires` (not derived from
    // the outcomes) and `failures`, even when fewer than timeouts + semaphoreRejections.
    clock = fakeTime(); // (the current bucket must not roll before the window is read)
    const given = { fires: 9, successes: 1, failures: 1, timeouts: 1, semaphoreRejections: 1, rejects: 1, fallbacks: 1 };
    const g = new CircuitBreaker(ok, { status: CircuitBreaker.newStatus({ stats: given }) });
    for (const [k, v] of Object.entries(given)) assert.equal(g.stats[k], v, k);
    assert.equal(g.status.window[0].fires, 9, 'in the current bucket');
    await g.fire(1);
    assert.equal(g.stats.fires, 10);
    assert.equal(g.stats.successes, 2);
    g.shutdown();
    const st = CircuitBreaker.newStatus({ stats: { successes: 9 } });
    assert.equal(st.stats.failures, 0, 'counters not given are 0, as in opossum');
    assert.equal(st.stats.semaphoreRejections, 0);
    const c = new CircuitBreaker(ok, { status: st });
    assert.equal(c.stats.successes, 9);
    assert.equal(c.stats.failures, 0);
    // Its window and latency read as opossum's (found by review: the window was empty
    // and `percentiles` `{}`).
    const off = CircuitBreaker.newStatus({ stats: { fires: 3 }, rollingPercentilesEnabled: false });
    assert.equal(off.window.length, 10);
    assert.equal(off.window[0].fires, 3);
    assert.equal(off.window[1].fires, 0);
    assert.equal(off.stats.latencyMean, -1);
    assert.deepEqual(Object.values(off.stats.percentiles), new Array(9).fill(-1));
    const four = CircuitBreaker.newStatus({ stats: { fires: 3 }, rollingCountBuckets: 4 });
    assert.equal(four.window.length, 4);
    assert.equal(four.stats.latencyMean, 0);
    assert.deepEqual(Object.keys(four.stats.percentiles).sort(), ['0', '0.25', '0.5', '0.75', '0.9', '0.95', '0.99', '0.995', '1']);
    b.shutdown();
    c.shutdown();
  });

  test('window buckets carry isCircuitBreakerOpen where the breaker opened or closed, as opossum\'s', async () => {
    clock = fakeTime();
    const { b } = flaky({ rollingCountTimeout: 1000, rollingCountBuckets: 10, resetTimeout: 5000 });
    await b.fire(1);
    assert.equal('isCircuitBreakerOpen' in b.status.window[0], false, 'absent: no open or close in it');
    b.open();
    assert.equal(b.status.window[0].isCircuitBreakerOpen, true);
    clock.tick(100);
    assert.equal('isCircuitBreakerOpen' in b.status.window[0], false, 'a new bucket');
    assert.equal(b.status.window[1].isCircuitBreakerOpen, true);
    b.close();
    assert.equal(b.status.window[0].isCircuitBreakerOpen, false);
    assert.equal('isCircuitBreakerOpen' in b.stats, false, 'not in the totals');
    b.shutdown();
  });

  test('status.rollingPercentilesEnabled and status.enableSnapshots, as opossum has them', () => {
    const a = new CircuitBreaker(ok);
    assert.equal(a.status.rollingPercentilesEnabled, true);
    assert.equal(a.status.enableSnapshots, true);
    const b = new CircuitBreaker(ok, { rollingPercentilesEnabled: false, enableSnapshots: false });
    assert.equal(b.status.rollingPercentilesEnabled, false);
    assert.equal(b.status.enableSnapshots, false);
    a.shutdown();
    b.shutdown();
  });

  test('snapshot events keep the phase of the breaker\'s creation, as opossum\'s interval does', async () => {
    clock = fakeTime();
    const { b } = flaky({ rollingCountTimeout: 1000, rollingCountBuckets: 10 });
    clock.tick(150);
    const at = [];
    const t0 = clock.now() - 150;
    b.on('snapshot', () => at.push(clock.now() - t0));
    await flush();
    clock.tick(300);
    assert.deepEqual(at, [200, 300, 400], 'on the 100 ms ticks since creation, not 100 ms after the listener');
    // A timer may fire a little early by the clock (Node's do, by up to 1 ms): the next
    // tick is still one interval on (found by review: it came 1 ms later, a second snapshot).
    const FakeDate = globalThis.Date;
    globalThis.Date = class extends FakeDate {
      static now() {
        return FakeDate.now() - 0.5;
      }
    };
    try {
      clock.tick(300);
    } finally {
      globalThis.Date = FakeDate;
    }
    assert.deepEqual(at, [200, 300, 400, 500, 600, 700]);
    b.shutdown();
  });

  test('rotateBucketController is accepted', async () => {
    const { EventEmitter } = await import('node:events');
    const rbc = new EventEmitter();
    const b = new CircuitBreaker(ok, { rotateBucketController: rbc });
    rbc.emit('rotate');
    assert.equal(await b.fire(2), 2);
    assert.throws(() => new CircuitBreaker(ok, { rotateBucketController: 5 }), TypeError);
    b.shutdown();
  });
});

describe('toJSON and options.state', () => {
  test('toJSON has opossum\'s shape', async () => {
    const b = new CircuitBreaker(ok, { name: 'j' });
    await b.fire(1);
    const j = b.toJSON();
    assert.deepEqual(Object.keys(j.state).sort(),
      ['closed', 'enabled', 'halfOpen', 'lastTimerAt', 'name', 'open', 'shutdown', 'warmUp']);
    assert.equal(j.state.name, 'j');
    assert.equal(j.state.closed, true);
    assert.equal(typeof j.state.lastTimerAt, 'number');
    assert.equal(j.status.successes, 1);
    assert.doesNotThrow(() => JSON.stringify(b));
    b.shutdown();
  });

  test('restores open, half-open (resetTimeout passed), closed, disabled, shutdown', async () => {
    clock = fakeTime();
    const a = new CircuitBreaker(ok, { resetTimeout: 1000 });
    a.open();
    const saved = a.toJSON().state;
    assert.equal(saved.open, true);
    const b = new CircuitBreaker(ok, { resetTimeout: 1000, state: saved });
    assert.equal(b.opened, true);
    clock.tick(1001);
    const c = new CircuitBreaker(ok, { resetTimeout: 1000, state: saved });
    assert.equal(c.halfOpen, true, 'resetTimeout passed since lastTimerAt');
    const d = new CircuitBreaker(ok, { state: { halfOpen: true, closed: false } });
    assert.equal(d.halfOpen, true);
    assert.equal(d.pendingClose, true);
    const e = new CircuitBreaker(ok, { state: { closed: true, enabled: false } });
    assert.equal(e.closed, true);
    assert.equal(e.enabled, false);
    const f = new CircuitBreaker(ok, { state: { shutdown: true } });
    assert.equal(f.isShutdown, true);
    const g = new CircuitBreaker(ok, { state: { warmUp: true } });
    assert.equal(g.warmUp, true);
    // As opossum: a restored state decides `enabled`, whatever `options.enabled` says
    // (found by review).
    const h = new CircuitBreaker(ok, { enabled: false, state: { closed: true, enabled: true } });
    assert.equal(h.enabled, true);
    const i = new CircuitBreaker(ok, { enabled: false, state: { closed: true } });
    assert.equal(i.enabled, true);
    for (const x of [a, b, c, d, e, g, h, i]) x.shutdown();
  });
});

test('a window set in options.fusewire.metrics is the latency percentiles\' window too (found by review: they stayed on opossum\'s 10 s)', async () => {
  clock = fakeTime();
  const b = new CircuitBreaker(() => new Promise((r) => setTimeout(r, 50, 1)),
    { fusewire: { metrics: { rolling_window_ms: 60_000, rolling_buckets: 60 } } });
  const p = b.fire();
  clock.tick(50);
  await p;
  assert.ok(b.stats.percentiles[0.5] >= 40, `p50 ${b.stats.percentiles[0.5]}`);
  clock.tick(15_000);
  assert.equal(b.stats.successes, 1, 'the counts cover 60 s');
  assert.ok(b.stats.percentiles[0.5] >= 40, `15 s on, p50 ${b.stats.percentiles[0.5]}: the latencies cover 60 s too`);
  b.shutdown();
});

describe('health checks and abort controllers', () => {
  test('healthCheck after shutdown() arms nothing (found by review: its interval ran for good)', async () => {
    clock = fakeTime();
    const b = new CircuitBreaker(ok);
    b.shutdown();
    let calls = 0;
    b.healthCheck(() => { calls++; }, 1000);
    clock.tick(3000);
    await flush();
    assert.equal(calls, 0);
  });

  test('healthCheck: a function returning a plain value (or throwing) works too', async () => {
    clock = fakeTime();
    const b = new CircuitBreaker(ok);
    const failed = [];
    b.on('healthCheckFailed', (e) => failed.push(e));
    let healthy = true;
    b.healthCheck(() => {
      if (!healthy) throw new Error('sick');
      return true;
    }, 1000);
    await flush();
    assert.equal(b.closed, true);
    assert.equal(failed.length, 0);
    healthy = false;
    clock.tick(1000);
    await flush();
    assert.equal(failed[0]?.message, 'sick');
    assert.equal(b.opened, true);
    b.shutdown();
  });

  test('healthCheck: the first check runs inside the call, and a numeric string is an interval (as in opossum)', async () => {
    clock = fakeTime();
    const b = new CircuitBreaker(ok);
    let calls = 0;
    b.healthCheck(async () => { calls++; }, '30');
    assert.equal(calls, 1, 'called before healthCheck() returned');
    clock.tick(30);
    await flush();
    assert.equal(calls, 2, 'every 30 ms');
    clock.tick(30);
    assert.equal(calls, 3);
    b.shutdown();
    // '0' and blanks are the default 5 s, as 0 is (opossum: a check every 1 ms); a
    // negative interval is refused (opossum: every 1 ms too).
    const c = new CircuitBreaker(ok);
    let n = 0;
    c.healthCheck(async () => { n++; }, '0');
    c.healthCheck(async () => { n++; }, '  ');
    clock.tick(4999);
    assert.equal(n, 2);
    clock.tick(1);
    assert.equal(n, 4);
    assert.throws(() => c.healthCheck(async () => {}, -5), { name: 'TypeError', message: 'Health check interval must not be negative, got -5' });
    c.shutdown();
  });

  test('healthCheck: a rejection emits healthCheckFailed and opens', async () => {
    clock = fakeTime();
    const b = new CircuitBreaker(ok);
    const failed = [];
    b.on('healthCheckFailed', (e) => failed.push(e));
    let calls = 0;
    b.healthCheck(async function () {
      calls++;
      assert.equal(this, b);
      if (calls >= 2) throw new Error('unhealthy');
    }, 1000);
    await flush();
    assert.equal(calls, 1);
    assert.equal(b.closed, true);
    clock.tick(1000);
    await flush();
    assert.equal(calls, 2);
    assert.equal(failed.length, 1);
    assert.equal(failed[0].message, 'unhealthy');
    assert.equal(b.opened, true);
    assert.throws(() => b.healthCheck('x'), { name: 'TypeError', message: 'Health check function must be a function' });
    assert.throws(() => b.healthCheck(async () => {}, 'x'), { name: 'TypeError', message: 'Health check interval must be a number' });
    b.shutdown();
    clock.tick(5000);
    await flush();
    assert.equal(calls, 2, 'shutdown stops health checks');
  });

  test('getSignal, getAbortController, autoRenewAbortController', async () => {
    clock = fakeTime();
    const plain = new CircuitBreaker(ok);
    assert.equal(plain.getSignal(), undefined);
    assert.equal(plain.getAbortController(), undefined);
    plain.shutdown();
    assert.throws(() => new CircuitBreaker(ok, { abortController: {} }),
      { name: 'TypeError', message: 'options.abortController: must be an AbortController (with an `abort()` method), got an object' });
    const { b } = flaky({ autoRenewAbortController: true, timeout: 100, resetTimeout: 500 });
    const first = b.getAbortController();
    assert.ok(first instanceof AbortController);
    assert.equal(b.getSignal(), first.signal);
    const p = b.fire('hang');
    clock.tick(101);
    await settle(p);
    assert.equal(first.signal.aborted, true);
    assert.equal(b.opened, true);
    clock.tick(500);
    assert.equal(b.halfOpen, true);
    assert.notEqual(b.getAbortController(), first, 'renewed on half-open');
    assert.equal(b.getSignal().aborted, false);
    b.shutdown();
  });
});

describe('typed errors', () => {
  test('cacheTransport must implement get, set and flush', () => {
    assert.throws(() => new CircuitBreaker(ok, { cache: true, cacheTransport: { get() {} } }), {
      name: 'TypeError',
      message: 'options.cacheTransport should be an object with `get`, `set` and `flush` methods',
    });
  });
});

describe('fake timers installed before fusewire is loaded', () => {
  // jest's `fakeTimers.enableGlobally`, a `--import` setup file with sinon or node:test
  // mock.timers: the fake Date is there before fusewire captures anything. A fresh
  // process, since this one loaded fusewire long ago.
  const script = `
    import { mock } from 'node:test';
    try {
      mock.timers.enable({ apis: ['setTimeout', 'setInterval', 'Date'] });
    } catch (e) {
      console.log(JSON.stringify({ skip: String(e.code ?? e.message) }));
      process.exit(0);
    }
    const { default: CircuitBreaker } = await import('fusewire');
    const out = { open: [] };
    const b = new CircuitBreaker(async () => { throw new Error('down'); }, { resetTimeout: 30000 });
    for (let cycle = 0; cycle < 3; cycle++) {
      await b.fire().catch(() => {});
      let waited = 0;
      while (!b.halfOpen && waited < 200000) {
        mock.timers.tick(1000);
        waited += 1000;
        await new Promise((r) => setImmediate(r));
      }
      out.open.push(waited);
    }
    const w = new CircuitBreaker(async () => 1, { rollingCountTimeout: 1000, rollingCountBuckets: 1 });
    await w.fire();
    out.before = w.stats.fires;
    mock.timers.tick(5000);
    out.after = w.stats.fires;
    b.shutdown();
    w.shutdown();
    console.log(JSON.stringify(out));
  `;

  test('resetTimeout and the rolling window follow the fake clock (found by review: each open period grew by resetTimeout)', (t) => {
    const text = execFileSync(process.execPath, ['--no-warnings', '--input-type=module', '-e', script], {
      cwd: dirname(fileURLToPath(import.meta.url)), // resolves 'fusewire' as the tests do
      encoding: 'utf8',
      timeout: 60_000,
    });
    const out = JSON.parse(text.trim().split('\n').at(-1));
    if (out.skip !== undefined) {
      t.skip(`node:test mock.timers cannot fake Date on Node ${process.versions.node} (${out.skip})`);
      return;
    }
    assert.deepEqual(out.open, [30000, 30000, 30000], 'open for resetTimeout each time');
    assert.equal(out.before, 1);
    assert.equal(out.after, 0, 'the call left the 1 s window 5 fake seconds later');
  });
});

describe('process lifetime', () => {
  const run = (script) => execFileSync(process.execPath, ['--no-warnings', '--input-type=module', '-e', script], {
    cwd: dirname(fileURLToPath(import.meta.url)),
    encoding: 'utf8',
    timeout: 60_000,
  }).trim();

  test('a hung action times out instead of the process exiting under it, as with opossum (found by review)', () => {
    const out = run(`
      import CircuitBreaker from 'fusewire';
      const b = new CircuitBreaker(() => new Promise(() => {}), { timeout: 200 });
      b.fire().then(() => console.log('resolved'), (e) => console.log(e.code));
    `);
    assert.equal(out, 'ETIMEDOUT');
  });

  test('after shutdown() a hung call still times out before the process exits (found by review)', () => {
    const out = run(`
      import CircuitBreaker from 'fusewire';
      const b = new CircuitBreaker(() => new Promise(() => {}), { timeout: 300 });
      b.fire().then(() => console.log('resolved'), (e) => console.log(e.code));
      setTimeout(() => b.shutdown(), 50);
    `);
    assert.equal(out, 'ETIMEDOUT');
  });

  test('after shutdown() a call that ends releases the process at once', () => {
    const t0 = Date.now();
    const out = run(`
      import CircuitBreaker from 'fusewire';
      const b = new CircuitBreaker(() => new Promise((r) => setTimeout(() => r('ok'), 100)), { timeout: 30_000 });
      b.fire().then((v) => console.log(v));
      setTimeout(() => b.shutdown(), 20);
    `);
    assert.equal(out, 'ok');
    assert.ok(Date.now() - t0 < 15_000, 'not held until the 30 s deadline');
  });

  test('a hung call with a timeout past a timer\'s reach (2^31 ms) still holds the process (found by review: it exited at once)', () => {
    const out = run(`
      import CircuitBreaker from 'fusewire';
      const b = new CircuitBreaker(() => new Promise(() => {}), { timeout: 3e9 });
      b.fire().then(() => console.log('resolved'), (e) => console.log(e.code));
      setTimeout(() => { console.log('still running'); process.exit(0); }, 1500).unref();
    `);
    assert.equal(out, 'still running');
  });

  test('without a call in flight, or with timeout: false, the breaker holds nothing', () => {
    const t0 = Date.now();
    const out = run(`
      import CircuitBreaker from 'fusewire';
      const a = new CircuitBreaker(async () => 1, { timeout: 60_000 });
      await a.fire();
      const b = new CircuitBreaker(() => new Promise(() => {}), { timeout: false });
      b.fire();
      a.open();
      console.log('done');
    `);
    assert.equal(out, 'done');
    assert.ok(Date.now() - t0 < 20_000, 'exits promptly');
  });
});
