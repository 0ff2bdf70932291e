// sinon's fake timers (what Jest's modern timers and Vitest's are built on), as tests
// of breaker code use them (found by a review running one opossum test suite under
// Jest 29/30 and Vitest 3/4): the breaker's clock follows the fake clock whether or
// not `Date` is faked, `setSystemTime` does not move it, real time flows again once
// the fakes are gone (also when they were installed before fusewire loaded), and a
// shut-down breaker leaves no timer behind.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { afterEach, test } from 'node:test';

import FakeTimers from '@sinonjs/fake-timers';
import { CircuitBreaker } from 'fusewire';

import { sleep } from './helpers.mjs';

// What a runner fakes, short of the scheduling node:test itself runs on (setImmediate,
// nextTick, hrtime).
const ALL = ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date', 'performance'];

let clock;
afterEach(() => {
  clock?.uninstall();
  clock = undefined;
});

/** A breaker whose calls fail with 'fail', hang with 'hang', else succeed. */
function breaker(options = {}) {
  return new CircuitBreaker((x) => {
    if (x === 'fail') return Promise.reject(new Error('boom'));
    if (x === 'hang') return new Promise(() => {});
    return Promise.resolve(x);
  }, { resetTimeout: 1000, timeout: 500, ...options });
}

const settle = (p) => p.then((value) => ({ value }), (error) => ({ code: error.code ?? error.message }));

for (const toFake of [ALL, ['setTimeout', 'clearTimeout'], ['setTimeout', 'clearTimeout', 'performance']]) {
  test(`${toFake.join(', ')} faked: the breaker half-opens, times out and rolls its window on the fake clock`, async () => {
    clock = FakeTimers.install({ toFake });
    const b = breaker();
    assert.equal((await settle(b.fire('fail'))).code, 'boom');
    assert.equal(b.opened, true);
    await clock.tickAsync(999);
    assert.equal(b.opened, true, 'still open at 999 ms');
    await clock.tickAsync(1);
    assert.equal(b.halfOpen, true, 'half-open at resetTimeout, with no call');
    assert.equal(await b.fire(1), 1, 'the probe closes it');
    assert.equal(b.closed, true);
    const hung = settle(b.fire('hang'));
    await clock.tickAsync(500);
    assert.equal((await hung).code, 'ETIMEDOUT');
    assert.equal(b.stats.fires, 3);
    await clock.tickAsync(10_000);
    assert.equal(b.stats.fires, 0, 'the window rolled on the fake clock');
    b.shutdown();
  });
}

test('setSystemTime moves neither way: the open period runs on the fake monotonic clock', async () => {
  clock = FakeTimers.install({ toFake: ALL });
  const b = breaker();
  await settle(b.fire('fail'));
  clock.setSystemTime(Date.now() - 3_600_000);
  await clock.tickAsync(1000);
  assert.equal(b.halfOpen, true, 'a Date set back an hour does not hold it open');
  await settle(b.fire('fail'));
  assert.equal(b.opened, true);
  clock.setSystemTime(Date.now() + 3_600_000);
  assert.equal((await settle(b.fire(1))).code, 'EOPENBREAKER', 'a Date set forward an hour does not half-open it');
  b.shutdown();
});

// (A timer armed under the fakes dies with them, in opossum too: a breaker tripped
// under fake timers half-opens on its next call once they are gone.)
test('fakes uninstalled: real time flows again for a breaker made under them', async () => {
  clock = FakeTimers.install({ toFake: ALL });
  const b = breaker({ resetTimeout: 50, timeout: 50 });
  await clock.tickAsync(5000);
  clock.uninstall();
  clock = undefined;
  await settle(b.fire('fail'));
  await sleep(80);
  assert.equal(b.halfOpen, true, 'half-open 50 ms later, real time');
  const hung = await settle(b.fire('hang'));
  assert.equal(hung.code, 'ETIMEDOUT');
  b.shutdown();
});

test('fakes uninstalled: snapshots armed under them run again in real time from the next call', async () => {
  clock = FakeTimers.install({ toFake: ALL });
  const b = breaker({ rollingCountTimeout: 200, rollingCountBuckets: 10 }); // every 20 ms
  let heard = 0;
  b.on('snapshot', () => heard++);
  await clock.tickAsync(100);
  assert.equal(heard, 5, 'on the fake clock');
  clock.uninstall();
  clock = undefined;
  await b.fire(1);
  const t0 = Date.now();
  while (heard < 8 && Date.now() - t0 < 2_000) await sleep(10);
  assert.ok(heard >= 8, `snapshots in real time after the fakes are gone (heard ${heard})`);
  b.shutdown();
});

test('timers armed before fakes came are cancelled with the real clearTimeout (the fake one warns and leaves them running)', () => {
  const require = createRequire(import.meta.url);
  const script = `
    const FakeTimers = require(${JSON.stringify(require.resolve('@sinonjs/fake-timers'))});
    const { CircuitBreaker } = require(${JSON.stringify(require.resolve('fusewire'))});
    const b = new CircuitBreaker(() => new Promise(() => {}), { timeout: 50 });
    b.on('snapshot', () => {});
    b.fire().catch(() => {}); // arms real timers: the call's deadline, snapshots
    const clock = FakeTimers.install({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval'] });
    b.healthCheck(async () => {}, 1000);
    b.shutdown(); // a test's cleanup under fakes
    clock.uninstall();
  `;
  const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 10_000 });
  assert.equal(r.status, 0, r.stderr || `signal ${r.signal}`);
  assert.doesNotMatch(r.stderr, /native timer/);
});

test('a shut-down breaker leaves no fake timer or task behind', async () => {
  clock = FakeTimers.install({ toFake: [...ALL, 'queueMicrotask'] });
  const b = breaker({ timeout: false });
  b.on('snapshot', () => {});
  await b.fire(1);
  b.shutdown();
  assert.equal(clock.countTimers(), 0);
});

test('fakes installed before fusewire loads, then uninstalled: real time flows (found by review: the clock stopped)', () => {
  const require = createRequire(import.meta.url);
  const script = `
    const FakeTimers = require(${JSON.stringify(require.resolve('@sinonjs/fake-timers'))});
    const clock = FakeTimers.install({ toFake: ['setTimeout', 'clearTimeout', 'setImmediate', 'Date', 'performance'] });
    const { CircuitBreaker } = require(${JSON.stringify(require.resolve('fusewire'))});
    clock.uninstall();
    const b = new CircuitBreaker(() => new Promise(() => {}), { timeout: 50, resetTimeout: 50 });
    const started = Date.now();
    b.fire().catch((e) => {
      console.log(e.code, Date.now() - started >= 45);
      b.shutdown();
    });
  `;
  const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 10_000 });
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout.trim(), 'ETIMEDOUT true', 'the hung call times out in real time, keeping the process alive until then');
});

test('fakes gone before shutdown(): immediates still run, and a later hung call holds the process until it times out (found by review: a fake handle given to Node\'s clearImmediate stopped every immediate)', () => {
  const require = createRequire(import.meta.url);
  const script = `
    const FakeTimers = require(${JSON.stringify(require.resolve('@sinonjs/fake-timers'))});
    const { CircuitBreaker } = require(${JSON.stringify(require.resolve('fusewire'))});
    const clock = FakeTimers.install({ toFake: ['setTimeout', 'clearTimeout', 'setImmediate', 'clearImmediate', 'Date', 'performance'] });
    const a = new CircuitBreaker(async () => 1, { timeout: 50 });
    const b = new CircuitBreaker((x) => x === 'hang' ? new Promise(() => {}) : Promise.resolve(x), { timeout: 50 });
    a.fire(); // each schedules its check of the calls in flight through the fakes
    b.fire(1);
    clock.uninstall(); // a test's afterEach
    a.shutdown();
    setImmediate(() => {
      console.log('immediate ran');
      // b's check was scheduled through the fakes: its hung call must still hold the
      // process until it times out.
      b.fire('hang').catch((e) => {
        console.log(e.code);
        b.shutdown();
      });
    });
    setTimeout(() => { console.log('no immediate within 1 s'); process.exit(1); }, 1000).unref();
  `;
  const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 10_000 });
  assert.equal(r.status, 0, r.stderr || `signal ${r.signal}`);
  assert.equal(r.stdout.trim(), 'immediate ran\nETIMEDOUT');
});

test("Jest's legacy timers (a mock setTimeout, no clock): a timer they fire moves the breaker's time to its deadline", async () => {
  const real = { setTimeout: globalThis.setTimeout, clearTimeout: globalThis.clearTimeout };
  const timers = new Map();
  let seq = 0;
  const fake = (fn, ms) => {
    timers.set(++seq, { fn, ms });
    return seq;
  };
  fake._isMockFunction = true; // what jest.fn() carries
  globalThis.setTimeout = fake;
  globalThis.clearTimeout = (id) => timers.delete(id);
  /** Runs the pending timers of at most `ms` (as advanceTimersByTime would, all at once). */
  const advance = (ms) => {
    for (const [id, t] of [...timers]) {
      if (t.ms <= ms) {
        timers.delete(id);
        t.fn();
      }
    }
  };
  try {
    const b = breaker();
    await settle(b.fire('fail'));
    assert.equal(b.opened, true);
    advance(1000);
    assert.equal(b.halfOpen, true, 'half-open when the reset timer fires');
    const hung = settle(b.fire('hang'));
    advance(500);
    assert.equal((await hung).code, 'ETIMEDOUT');
    // An idle breaker's far timer (a timer's reach, 24.8 days, short of its deadline a
    // year away) moves the time by its reach only (found by review: by the year).
    const before = b._now();
    advance(Infinity);
    assert.ok(b._now() - before <= 2_147_483_647 + 1000, `moved ${b._now() - before} ms`);
    b.shutdown();
  } finally {
    Object.assign(globalThis, real);
  }
});

test("a fake clearTimeout that throws once its fakes are gone (Deno std's FakeTime) is survived (found by review: shutdown() and the next fire() threw 'no fake time')", async () => {
  // Deno std's FakeTime, reduced to what the breaker meets: fake timers that need
  // the fake to be installed, and a clearTimeout that throws after restore().
  const real = { setTimeout: globalThis.setTimeout, clearTimeout: globalThis.clearTimeout };
  let installed = true;
  const timers = new Map();
  let next = 1;
  globalThis.setTimeout = (fn, ms) => {
    timers.set(next, { fn, ms });
    return next++;
  };
  globalThis.clearTimeout = (id) => {
    if (!installed) throw new Error('no fake time');
    timers.delete(id);
  };
  let a;
  let b;
  try {
    a = breaker({ timeout: false });
    b = breaker({ timeout: false });
    for (const x of [a, b]) await settle(x.fire('fail')); // open: a resetTimeout timer each
    assert.equal(a.opened && b.opened, true);
    assert.ok(timers.size > 0, 'timers armed through the fake');
  } finally {
    installed = false;
    globalThis.setTimeout = real.setTimeout;
    globalThis.clearTimeout = real.clearTimeout;
  }
  assert.doesNotThrow(() => a.shutdown());
  let p;
  assert.doesNotThrow(() => {
    p = b.fire(1);
  });
  assert.equal((await settle(p)).code, 'EOPENBREAKER');
  b.shutdown();
});
