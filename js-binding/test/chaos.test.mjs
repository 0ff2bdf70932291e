// Random programs against the whole wrapper on sinon's fake clock: breakers with a
// random mix of options (timeouts, capacity or a queued bulkhead, cache, coalesce,
// warm-up, errorFilter, fallbacks that throw, N probes, growing open periods) fired
// with actions that succeed, fail, throw, hang or answer late, callers that abort,
// and operators that open, close, disable, enable, clear the cache and shut down
// while calls run — one breaker alone, or two of one name sharing a SharedStore.
// Whatever the program does: every call settles (a hung action is ended by its
// timeout), with a value or an Error; nothing is left unhandled; the bulkhead has
// all its slots back at rest; and a shut-down breaker leaves no timer behind. Calls
// that never settled are the bug class reviews found most often here.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import FakeTimers from '@sinonjs/fake-timers';
import fc from 'fast-check';
import { CircuitBreaker, Collapser, SharedStore } from 'fusewire';

const CODES = new Set(['EOPENBREAKER', 'ETIMEDOUT', 'ESEMLOCKED', 'ESHUTDOWN', 'ABORT_ERR']);

const optionsArb = fc.record({
  timeout: fc.oneof(fc.constant(false), fc.integer({ min: 5, max: 80 })),
  resetTimeout: fc.integer({ min: 10, max: 300 }),
  errorThresholdPercentage: fc.integer({ min: 1, max: 100 }),
  volumeThreshold: fc.integer({ min: 0, max: 4 }),
  rollingCountTimeout: fc.constantFrom(100, 1000),
  rollingCountBuckets: fc.constantFrom(2, 10),
  allowWarmUp: fc.boolean(),
  limit: fc.oneof(
    fc.constant({}),
    fc.integer({ min: 1, max: 3 }).map((capacity) => ({ capacity })),
    fc.record({
      max_concurrent: fc.integer({ min: 1, max: 3 }),
      max_queue: fc.integer({ min: 0, max: 3 }),
      max_wait_ms: fc.integer({ min: 0, max: 60 }),
    }).map(({ max_concurrent, max_queue, max_wait_ms }) => ({
      fusewire: {
        bulkhead: {
          isolation: 'pool', max_concurrent, max_queue, queue_rejection_threshold: max_queue, max_wait_ms,
        },
      },
    })),
  ),
  cache: fc.oneof(fc.constant(false), fc.integer({ min: 0, max: 100 })),
  coalesce: fc.oneof(fc.constant(false), fc.integer({ min: 1, max: 100 })),
  probes: fc.integer({ min: 1, max: 3 }),
  exponential: fc.boolean(),
  filter: fc.boolean(),
  fallback: fc.constantFrom('none', 'value', 'throws', 'async', 'rejects'),
  signal: fc.boolean(),
  // Two breakers of one name on one SharedStore (the worker_threads model, in one
  // thread), or one local breaker.
  shared: fc.boolean(),
});

const opArb = fc.oneof(
  {
    weight: 24,
    arbitrary: fc.record({
      fire: fc.constantFrom('ok', 'fail', 'bad', 'throw', 'hang', 'sync'),
      key: fc.integer({ min: 0, max: 2 }),
      which: fc.integer({ min: 0, max: 1 }),
      ms: fc.integer({ min: 0, max: 60 }),
      abortAfter: fc.option(fc.integer({ min: 0, max: 60 }), { nil: undefined }),
    }),
  },
  { weight: 12, arbitrary: fc.record({ tick: fc.integer({ min: 0, max: 150 }) }) },
  {
    weight: 3,
    arbitrary: fc.record({
      operator: fc.constantFrom('open', 'close', 'disable', 'enable', 'clearCache'),
      which: fc.integer({ min: 0, max: 1 }),
    }),
  },
  { weight: 1, arbitrary: fc.record({ operator: fc.constant('shutdown'), which: fc.integer({ min: 0, max: 1 }) }) },
);

/** What a rejection must be: an Error (never a bare value), ours or the action's. */
function checkError(e, where) {
  assert.ok(e instanceof Error, `${where}: rejected with ${String(e)}`);
  if (CircuitBreaker.isOurError(e)) assert.ok(CODES.has(e.code), `${where}: code ${e.code}`);
}

/**
 * Runs `program(clock, shutdowns)` on sinon's fake clock, then runs what the program
 * pushed on `shutdowns` (last first) and checks that nothing is left: no timer, no
 * unhandled rejection.
 */
async function onFakeClock(program) {
  const clock = FakeTimers.install({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date', 'performance'] });
  const unhandled = [];
  const onUnhandled = (e) => unhandled.push(e);
  process.on('unhandledRejection', onUnhandled);
  const shutdowns = [];
  const shutAll = () => { for (const s of [...shutdowns].reverse()) s(); };
  try {
    await program(clock, shutdowns);
    shutAll();
    await clock.tickAsync(1);
    assert.equal(clock.countTimers(), 0, 'what was shut down leaves no timer');
    assert.deepEqual(unhandled, [], 'nothing unhandled');
  } finally {
    shutAll();
    process.off('unhandledRejection', onUnhandled);
    clock.uninstall();
  }
}

/** Follows `promise`: the record says whether it settled, and with what error. */
function watch(promise, op) {
  const rec = { settled: false, op };
  promise.then(() => { rec.settled = true; }, (e) => { rec.settled = true; rec.error = e; });
  return rec;
}

async function run(opts, ops) {
  await onFakeClock(async (clock, shutdowns) => {
    const bs = [];
    const options = {
      timeout: opts.timeout,
      resetTimeout: opts.resetTimeout,
      errorThresholdPercentage: opts.errorThresholdPercentage,
      volumeThreshold: opts.volumeThreshold,
      rollingCountTimeout: opts.rollingCountTimeout,
      rollingCountBuckets: opts.rollingCountBuckets,
      allowWarmUp: opts.allowWarmUp,
      ...(opts.limit.capacity === undefined ? {} : { capacity: opts.limit.capacity }),
      ...(opts.cache === false ? {} : { cache: true, cacheTTL: opts.cache }),
      ...(opts.coalesce === false ? {} : { coalesce: true, coalesceTTL: opts.coalesce }),
      ...(opts.filter ? { errorFilter: (e) => e.message === 'bad' } : {}),
      ...(opts.signal ? { abortController: new AbortController(), autoRenewAbortController: true } : {}),
      fusewire: {
        ...opts.limit.fusewire,
        breaker: {
          half_open: { permitted_probes: opts.probes, success_threshold: opts.probes },
          ...(opts.exponential ? { open: { schedule: 'exponential', max_ms: 1000, jitter_percentage: 20 } } : {}),
        },
      },
    };
    const store = opts.shared ? new SharedStore() : undefined;
    const make = () => new CircuitBreaker((how, key, ms) => {
      switch (how) {
        case 'sync': return key;
        case 'throw': throw new Error('thrown');
        case 'hang': return new Promise(() => {});
        default:
          return new Promise((resolve, reject) => setTimeout(() => {
            if (how === 'ok') resolve(key);
            else reject(new Error(how === 'bad' ? 'bad' : 'boom'));
          }, ms));
      }
    }, store === undefined ? options : { ...options, name: 'chaos', shared: { store } });
    for (let i = 0; i < (opts.shared ? 2 : 1); i++) {
      const b = make();
      if (opts.fallback !== 'none') {
        b.fallback((...args) => {
          if (opts.fallback === 'throws') throw new Error('fallback threw');
          if (opts.fallback === 'rejects') return Promise.reject(new Error('fallback rejected'));
          if (opts.fallback === 'async') return Promise.resolve('fb');
          return `fb:${args.length}`;
        });
      }
      bs.push(b);
      shutdowns.push(() => b.shutdown());
    }
    const capacity = bs[0].semaphore.count;
    const calls = [];
    for (const op of ops) {
      const b = bs[op.which % bs.length];
      if (op.fire !== undefined) {
        // A hung action needs a timeout to end; without one (or on a disabled
        // breaker, which calls the action as it is, as opossum's does) it answers
        // late instead.
        const how = op.fire === 'hang' && (opts.timeout === false || !b.enabled) ? 'ok' : op.fire;
        let p;
        if (op.abortAfter !== undefined) {
          const ac = new AbortController();
          setTimeout(() => ac.abort(), op.abortAfter);
          p = b.fireWithSignal(ac.signal, how, op.key, op.ms);
        } else {
          p = b.fire(how, op.key, op.ms);
        }
        calls.push(watch(p, op));
      } else if (op.tick !== undefined) {
        await clock.tickAsync(op.tick);
      } else {
        b[op.operator]();
      }
    }
    // Everything due: the longest answer, timeout, wait and open period are far less.
    await clock.tickAsync(5_000);
    const open = calls.filter((c) => !c.settled);
    assert.deepEqual(open.map((c) => c.op), [], 'every call settles');
    calls.forEach((c, i) => c.error === undefined || checkError(c.error, `call ${i}`));
    for (const b of bs) assert.equal(b.semaphore.count, capacity, 'every bulkhead slot is back');
  });
}

test('random programs: every call settles, nothing unhandled, slots back, no timer left', async () => {
  await fc.assert(
    fc.asyncProperty(optionsArb, fc.array(opArb, { minLength: 1, maxLength: 60 }), run),
    { numRuns: Number(process.env.CHAOS_RUNS ?? 500) },
  );
});

// The same for the Collapser: batch functions that answer, fail, throw, hang (ended
// by the breaker's timeout), answer with the wrong length or late, batches that open
// the breaker (with or without a fallback), request loaders made and shut down while
// their loads wait, clear / clearAll / prime, and the collapser or its breaker shut
// down while batches run. Every load settles; nothing is unhandled; no timer is left.
const collapserArb = fc.record({
  windowMs: fc.constantFrom(0, 5, 20),
  maxBatchSize: fc.integer({ min: 1, max: 4 }),
  cache: fc.boolean(),
  timeout: fc.oneof(fc.constant(false), fc.integer({ min: 5, max: 60 })),
  volumeThreshold: fc.integer({ min: 0, max: 3 }),
  fallback: fc.constantFrom('none', 'values', 'throws'),
});

const collapserOpArb = fc.oneof(
  {
    weight: 10,
    arbitrary: fc.record({
      load: fc.array(fc.integer({ min: 0, max: 5 }), { minLength: 1, maxLength: 4 }),
      loader: fc.integer({ min: 0, max: 2 }), // 0: the collapser, else a request loader
      batch: fc.constantFrom('ok', 'fail', 'throw', 'hang', 'short', 'late'),
    }),
  },
  { weight: 6, arbitrary: fc.record({ tick: fc.integer({ min: 0, max: 80 }) }) },
  {
    weight: 3,
    arbitrary: fc.record({
      call: fc.constantFrom('clear', 'clearAll', 'prime', 'endRequest', 'newRequest'),
      loader: fc.integer({ min: 0, max: 2 }),
      key: fc.integer({ min: 0, max: 5 }),
    }),
  },
  { weight: 1, arbitrary: fc.record({ shutdown: fc.constantFrom('collapser', 'breaker') }) },
);

async function runCollapser(opts, ops) {
  await onFakeClock(async (clock, shutdowns) => {
    // How the next batch answers (set by the load op that starts it; a hung batch
    // needs the breaker's timeout, else it answers late).
    let how = 'ok';
    const c = new Collapser(async (keys) => {
      const now = how === 'hang' && opts.timeout === false ? 'late' : how;
      switch (now) {
        case 'fail': return Promise.reject(new Error('batch failed'));
        case 'throw': throw new Error('batch threw');
        case 'hang': return new Promise(() => {});
        case 'short': return keys.slice(1);
        case 'late': await new Promise((r) => setTimeout(r, 30)); return keys.map((k) => `v:${k}`);
        default: return keys.map((k) => (k === 5 ? new Error('no 5') : `v:${k}`));
      }
    }, {
      windowMs: opts.windowMs,
      maxBatchSize: opts.maxBatchSize,
      cache: opts.cache,
      breaker: { timeout: opts.timeout, volumeThreshold: opts.volumeThreshold, resetTimeout: 50 },
    });
    if (opts.fallback !== 'none') {
      c.breaker.fallback((keys) => {
        if (opts.fallback === 'throws') throw new Error('fallback threw');
        return keys.map(() => null);
      });
    }
    shutdowns.push(() => c.shutdown());
    const loaders = [c, c.forRequest({ n: 1 }), c.forRequest({ n: 2 })];
    for (const l of loaders.slice(1)) shutdowns.push(() => l.shutdown());
    const loads = [];
    for (const op of ops) {
      if (op.load !== undefined) {
        how = op.batch;
        const l = loaders[op.loader];
        for (const k of op.load) {
          let p;
          try {
            p = l.load(k);
          } catch (e) {
            p = Promise.reject(e);
          }
          loads.push(watch(p, op));
        }
      } else if (op.tick !== undefined) {
        await clock.tickAsync(op.tick);
      } else if (op.call !== undefined) {
        const l = loaders[op.loader];
        try {
          if (op.call === 'endRequest') {
            if (l !== c) l.shutdown();
          } else if (op.call === 'newRequest') {
            if (op.loader !== 0) {
              const l2 = c.forRequest({ n: op.loader });
              loaders[op.loader] = l2;
              shutdowns.push(() => l2.shutdown());
            }
          } else if (op.call === 'prime') {
            l.prime(op.key, `primed:${op.key}`);
          } else if (op.call === 'clear') {
            l.clear(op.key);
          } else {
            l.clearAll();
          }
        } catch (e) {
          // A request loader of a shut-down collapser is refused (ESHUTDOWN).
          checkError(e, op.call);
          assert.equal(e.code, 'ESHUTDOWN', `${op.call}: ${e.message}`);
        }
      } else if (op.shutdown === 'collapser') {
        c.shutdown();
      } else {
        c.breaker.shutdown();
      }
    }
    await clock.tickAsync(5_000);
    const open = loads.filter((l) => !l.settled);
    assert.deepEqual(open.map((l) => l.op), [], 'every load settles');
    loads.forEach((l, i) => l.error === undefined || checkError(l.error, `load ${i}`));
  });
}

test('Collapser random programs: every load settles, nothing unhandled, no timer left', async () => {
  await fc.assert(
    fc.asyncProperty(collapserArb, fc.array(collapserOpArb, { minLength: 1, maxLength: 40 }), runCollapser),
    { numRuns: Number(process.env.CHAOS_RUNS ?? 300) },
  );
});
