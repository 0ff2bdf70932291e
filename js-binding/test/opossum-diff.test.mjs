// Differential test: the same scripted scenarios through fusewire and the real opossum 10,
// comparing what a user observes — the ordered events with their arguments (and the
// state and counters their listeners see), the state getters and the stats counters
// after each step, and what each fire() settles with.
//
// Time is node:test's mock.timers (setTimeout, setInterval and Date), enabled afresh
// at 0 for each library's run, so both see the same virtual milliseconds (fusewire's
// clock follows a replaced Date: README "Fake timers"). Time advances 1 ms per tick,
// with the promise jobs of each millisecond run in between, so a timer sees the time
// it was due at (mock.timers gives a timer the time at the end of a tick).
//
// Differences the README documents are encoded as the documented fusewire behaviour
// (`documented`, each citing the README). Differences it does not document are asserted
// as opossum's behaviour in `{ todo }` subtests (`todo`), so the suite passes while they
// stand; the main assertion holds fusewire to its current behaviour everywhere else.
// DIFF=1 prints every difference from opossum (DIFF=<file> appends them to a file).
// Undocumented differences it found on 2026-12-03, and what became of them: listeners
// of `timeout` and `semaphoreLocked` saw the failure already counted, and calls timing
// out on one tick were emitted as one batch (fixed: call by call, each listener sees
// opossum's counters); only the first caller of concurrent cache misses could fill the
// cache (fixed: any success fills it, the first to arrive is kept); `options` lacked
// `rotateBucketController` (fixed); no `options.coalesceCache`, a probe failing after
// close() by hand, and enable() / close() / open() after shutdown() (documented in
// README "Differences from opossum": asserted below as documented).
//
// Outcomes leave the window by buckets whose phase differs between the two (opossum's
// start at construction; fusewire's clock continues from performance.now()): window
// checks are made where both must agree whatever the phase — an outcome d ms old is in
// both windows when d < (buckets − 1) × bucket, in neither when d ≥ rollingCountTimeout.
//
// Skipped when `opossum` cannot be imported (the packed suite's scratch project does not
// install it) or when mock.timers cannot fake `Date` (Node < 20.11; Node 18 too).
import assert from 'node:assert/strict';
import { appendFileSync } from 'node:fs';
import { mock, test } from 'node:test';

import Fusewire from 'fusewire';

let Opossum;
let skip = false;
try {
  Opossum = (await import('opossum')).default;
  if (typeof Opossum !== 'function') throw new Error('opossum has no default export');
} catch (e) {
  skip = `opossum cannot be imported here (${e.code ?? e.message}): the differential test needs it (a devDependency of js-binding)`;
  if (process.env.FUSEWIRE_TEST_ALL === '1') throw new Error(skip); // scripts/test-js.sh installs it: a skip there would hide the test
}
if (skip === false) {
  try {
    mock.timers.enable({ apis: ['setTimeout', 'setInterval', 'Date'] });
  } catch (e) {
    skip = `node:test mock.timers cannot fake Date on Node ${process.versions.node} (${e.code ?? e.message})`;
  } finally {
    try {
      mock.timers.reset();
    } catch {
      // nothing enabled
    }
  }
}

if (skip !== false) test('fusewire against opossum 10 (differential)', { skip }, () => {});

const DIFF = process.env.DIFF;
const say = (line) => {
  if (DIFF === '1') console.log(line);
  else if (DIFF) appendFileSync(DIFF, line + '\n');
};
const EVENTS = [
  'fire', 'success', 'failure', 'timeout', 'reject', 'open', 'halfOpen', 'close', 'fallback',
  'semaphoreLocked', 'cacheHit', 'cacheMiss', 'coalesceCacheHit', 'coalesceCacheMiss',
  'healthCheckFailed', 'shutdown',
];
const COUNTERS = [
  'fires', 'successes', 'failures', 'fallbacks', 'rejects', 'timeouts', 'cacheHits', 'cacheMisses',
  'coalesceCacheHits', 'coalesceCacheMisses', 'semaphoreRejections',
];
const GETTERS = ['opened', 'closed', 'halfOpen', 'pendingClose', 'enabled', 'warmUp', 'isShutdown'];

// ---- observing a breaker ---------------------------------------------------------------

/** A value as a user compares it: errors by class, message, code and isOurError. */
function norm(v, CB, seen = new Set()) {
  if (v instanceof Error) {
    const e = { error: v.constructor.name, message: v.message, ours: CB.isOurError(v) };
    if (v.code !== undefined) e.code = v.code;
    return e;
  }
  if (v !== null && (typeof v === 'object' || typeof v === 'function') && typeof v.then === 'function') {
    return '<promise>';
  }
  if (typeof v === 'function') return '<function>';
  if (typeof v === 'symbol' || typeof v === 'bigint') return String(v);
  if (v !== null && typeof v === 'object') {
    if (seen.has(v)) return '<cycle>';
    seen.add(v);
    const r = Array.isArray(v) ? v.map((x) => norm(x, CB, seen))
      : Object.fromEntries(Object.entries(v).map(([k, x]) => [k, norm(x, CB, seen)]));
    seen.delete(v);
    return r;
  }
  return v;
}

function stateOf(b) {
  if (b.isShutdown) return 'shutdown';
  if (b.opened) return 'open';
  if (b.halfOpen) return b.pendingClose ? 'halfOpen(pending)' : 'halfOpen';
  if (b.closed) return 'closed';
  return '?';
}

function counters(stats) {
  return Object.fromEntries(COUNTERS.map((k) => [k, stats[k]]));
}

function getters(b) {
  return Object.fromEntries(GETTERS.map((k) => [k, b[k]]));
}

/** Lets promise jobs run (and anything queued with setImmediate, which is not faked). */
const drain = () => new Promise((r) => setImmediate(r));
async function jobs(turns = 20) {
  for (let i = 0; i < turns; i++) await Promise.resolve();
}

/**
 * Runs `script` against library `CB` and returns its trace: one entry per step with
 * the events emitted during it ([name, args, state seen by the listener, counters seen
 * by the listener]), the getters, the counters and every fire's outcome so far.
 */
async function run(CB, script) {
  mock.timers.enable({ apis: ['setTimeout', 'setInterval', 'Date'], now: 0 });
  const breakers = [];
  const log = [];
  const results = {};
  const trace = [];
  const ctx = {
    CB,
    b: undefined,
    /** Creates a breaker (the first one is `ctx.b`) and records its events. */
    make(action, options) {
      const b = new CB(action, options);
      breakers.push(b);
      ctx.b ??= b;
      const tag = breakers.length === 1 ? '' : `#${breakers.length}:`;
      for (const n of EVENTS) {
        b.on(n, (...args) => {
          // fusewire's `open` and `close` carry their reason (README): left out here.
          const shown = n === 'open' || n === 'close' ? [] : args;
          log.push([tag + n, norm(shown, CB), stateOf(b), counters(b.stats)]);
        });
      }
      return b;
    },
    /** Fires `b` (default `ctx.b`) and records the outcome under `label`. */
    fire(label, ...args) {
      return ctx.fireOn(ctx.b, label, ...args);
    },
    fireOn(b, label, ...args) {
      results[label] = 'pending';
      const p = b.fire(...args);
      p.then(
        (v) => { results[label] = { value: norm(v, CB) }; },
        (e) => { results[label] = { rejected: norm(e, CB) }; },
      );
      return p;
    },
    /** Advances virtual time by `ms`, `step` ms at a time (1: every timer runs at its due time). */
    async advance(ms, step = 1) {
      for (let left = ms; left > 0; left -= step) {
        mock.timers.tick(Math.min(step, left));
        await jobs();
      }
    },
    now: () => Date.now(),
    /** Records an observation of the step (anything a user could see). */
    note(what, value) {
      log.push(['note:' + what, norm(value, CB)]);
    },
  };
  try {
    for (const [label, step] of script) {
      await step(ctx);
      await jobs();
      await drain();
      const b = ctx.b;
      trace.push({
        step: label,
        events: log.splice(0),
        getters: getters(b),
        stats: counters(b.stats),
        results: { ...results },
      });
    }
  } finally {
    for (const b of breakers) if (!b.isShutdown) b.shutdown();
    mock.timers.reset();
  }
  return trace;
}

// ---- comparing ---------------------------------------------------------------------------

const ASPECTS = ['events', 'getters', 'stats', 'results'];
const clone = (x) => structuredClone(x);

function same(a, b) {
  try {
    assert.deepStrictEqual(a, b);
    return true;
  } catch {
    return false;
  }
}

/**
 * Undocumented differences seen in many scenarios: each `apply` edits an expected
 * trace into what fusewire does now; every scenario whose expectation it changes gets
 * a `{ todo }` subtest asserting opossum's behaviour there.
 */
/** Undocumented differences that show in every scenario (none left). */
const EVERYWHERE = [];

/**
 * One scenario: runs `script` through both libraries and compares fusewire's trace with
 * opossum's, step by step and aspect by aspect (events, getters, stats, results).
 *
 * - `documented(want)`: edits a copy of opossum's trace into the behaviour the README
 *   documents for fusewire (each edit cites the README);
 * - `todo`: undocumented differences, each `{ reason, apply(want) }` (edits the
 *   expectation into what fusewire does now) or `{ reason, mask: [[step, aspect, mode?], …] }`
 *   (cells not asserted; with mode 'any order', masked `events` must still be the same
 *   events in some order). Either way a `{ todo }` subtest asserts opossum's behaviour
 *   in those cells.
 */
function scenario(name, script, { documented, todo = [] } = {}) {
  if (skip !== false) return; // one skipped test says why (below)
  test(name, async (t) => {
    const op = await run(Opossum, script);
    const fw = await run(Fusewire, script);
    assert.deepEqual(fw.map((s) => s.step), op.map((s) => s.step));
    const base = clone(op);
    documented?.(base);
    // Apply the undocumented differences, remembering the cells each one changed.
    let want = base;
    const pending = [];
    for (const d of [...EVERYWHERE, ...todo]) {
      const cells = [];
      if (d.apply !== undefined) {
        const next = clone(want);
        d.apply(next);
        for (let i = 0; i < next.length; i++) {
          for (const a of ASPECTS) if (!same(next[i][a], want[i][a])) cells.push([i, a]);
        }
        want = next;
      }
      for (const [step, a, mode = 'masked'] of d.mask ?? []) {
        const i = want.findIndex((x) => x.step === step);
        assert.ok(i >= 0, `todo names an unknown step: ${step}`);
        cells.push([i, a, mode]);
      }
      if (cells.length > 0) pending.push({ reason: d.reason, cells });
    }
    const masked = (i, a) => pending.flatMap((d) => d.cells).find(([j, b, m]) => m && j === i && b === a)?.[2];
    if (DIFF) {
      const lines = [];
      for (let i = 0; i < want.length; i++) {
        for (const a of ASPECTS) {
          if (same(fw[i][a], base[i][a])) continue;
          const known = pending.some((d) => d.cells.some(([j, b]) => j === i && b === a));
          lines.push(`-- step "${want[i].step}" ${a}${known ? ' (todo)' : ''}`,
            `   fusewire: ${JSON.stringify(fw[i][a])}`, `   expected: ${JSON.stringify(base[i][a])}`);
        }
      }
      if (lines.length > 0) say(`\n### ${name}\n${lines.join('\n')}`);
    }
    for (let i = 0; i < want.length; i++) {
      for (const a of ASPECTS) {
        const m = masked(i, a);
        if (m === undefined) {
          assert.deepStrictEqual(fw[i][a], want[i][a], `step "${want[i].step}": ${a}`);
        } else if (m === 'any order' && a === 'events') {
          const key = (e) => JSON.stringify(e.slice(0, 2));
          assert.deepStrictEqual(fw[i][a].map(key).sort(), want[i][a].map(key).sort(),
            `step "${want[i].step}": the same events, in whatever order`);
        }
      }
    }
    for (const d of pending) {
      await t.test(d.reason, { todo: d.reason }, () => {
        for (const [i, a] of d.cells) {
          assert.deepStrictEqual(fw[i][a], base[i][a], `step "${base[i].step}": ${a} as opossum`);
        }
      });
    }
  });
}

/** The trace entry of step `label`. */
function at(trace, label) {
  const s = trace.find((x) => x.step === label);
  if (s === undefined) throw new Error(`no step ${label}`);
  return s;
}

/** Adds `delta` to the counters of step `label` (its stats, and the counters its events from index `fromEvent` saw) and of every later step. */
function shift(trace, label, delta, fromEvent = 0) {
  let on = false;
  for (const s of trace) {
    const first = s.step === label;
    on ||= first;
    if (!on) continue;
    for (const [k, v] of Object.entries(delta)) s.stats[k] += v;
    s.events.forEach((e, i) => {
      // Only what the first breaker's listeners saw (`#2:` events are another breaker's).
      if (e[3] === undefined || e[0].startsWith('#') || (first && i < fromEvent)) return;
      for (const [k, v] of Object.entries(delta)) e[3][k] += v;
    });
  }
}

// ---- actions -----------------------------------------------------------------------------

/** An action driven by its argument: 'fail…' throws, 'hang' never settles, 'slow:N' resolves after N ms. */
async function act(x) {
  const s = String(x);
  if (s.startsWith('fail')) throw new Error(`failed ${s}`);
  if (s === 'hang') return new Promise(() => {});
  if (s.startsWith('slow:')) {
    const ms = Number(s.slice(5));
    await new Promise((r) => setTimeout(r, ms));
    return `slept ${ms}`;
  }
  if (s.startsWith('slowfail:')) {
    const ms = Number(s.slice(9));
    await new Promise((r) => setTimeout(r, ms));
    throw new Error(`failed after ${ms}`);
  }
  return `ok ${s}`;
}

/** An action whose calls settle when the script says (gates[i] for the i-th call). */
function gated() {
  const gates = [];
  const action = (x) => new Promise((resolve, reject) => {
    gates.push({ x, resolve, reject });
  });
  return { gates, action };
}

// ---- scenarios -------------------------------------------------------------------------

scenario('errorThresholdPercentage with volumeThreshold: opens on the 4th fire at 75 %', [
  ['make', (c) => { c.make(act, { volumeThreshold: 4, errorThresholdPercentage: 50, resetTimeout: 1000 }); }],
  ['ok 1', (c) => { c.fire('a', 'x'); }],
  ['fail 1', (c) => { c.fire('b', 'fail1').catch(() => {}); }],
  ['fail 2 (3 fires < volumeThreshold 4)', (c) => { c.fire('c', 'fail2').catch(() => {}); }],
  ['fail 3 (3/4 = 75 % > 50 %: opens)', (c) => { c.fire('d', 'fail3').catch(() => {}); }],
  ['fire while open: EOPENBREAKER', (c) => { c.fire('e', 'y').catch(() => {}); }],
]);

scenario('errorThresholdPercentage is strict: 50 % does not open, 60 % does', [
  ['make', (c) => { c.make(act, { volumeThreshold: 4, errorThresholdPercentage: 50 }); }],
  ['ok, ok', async (c) => { await c.fire('a', 'x'); await c.fire('b', 'y'); }],
  ['fail, fail (2/4 = 50 %)', async (c) => { await c.fire('c', 'fail').catch(() => {}); await c.fire('d', 'fail').catch(() => {}); }],
  ['fail (3/5 = 60 %)', (c) => { c.fire('e', 'fail').catch(() => {}); }],
]);

scenario('calls still running count in the denominator (opossum counts a fire when it fires)', [
  ['make', (c) => { c.g = gated(); c.make(c.g.action, { errorThresholdPercentage: 40 }); }],
  ['two calls start', (c) => { c.fire('a', 1); c.fire('b', 2); }],
  ['a third fails (1/3 = 33 %)', (c) => { c.fire('c', 3).catch(() => {}); c.g.gates[2].reject(new Error('third')); }],
  ['the first fails (2/3 = 67 %: opens)', (c) => { c.g.gates[0].reject(new Error('first')); }],
  ['the second succeeds while open', (c) => { c.g.gates[1].resolve('late'); }],
]);

scenario('allowWarmUp: no opening during the first rollingCountTimeout', [
  ['make', (c) => { c.make(act, { allowWarmUp: true, rollingCountTimeout: 1000, rollingCountBuckets: 10, resetTimeout: 500 }); }],
  ['t=950: fail ×3 while warming up', async (c) => {
    await c.advance(950);
    for (const l of ['a', 'b', 'c']) await c.fire(l, 'fail').catch(() => {});
  }],
  ['t=999: still warming up', (c) => c.advance(49)],
  ['t=1001: warm-up over', (c) => c.advance(2)],
  ['fail: opens', (c) => { c.fire('d', 'fail').catch(() => {}); }],
]);

scenario('timeout: 50 with a never-settling action, a slow one, and a fast one', [
  ['make', (c) => { c.make(act, { timeout: 50, errorThresholdPercentage: 50 }); }],
  ['ok ×3', async (c) => { for (const l of ['a', 'b', 'c']) await c.fire(l, l); }],
  ['a call that never settles', (c) => { c.fire('hang', 'hang').catch(() => {}); }],
  ['t=49', (c) => c.advance(49)],
  ['t=50: ETIMEDOUT', (c) => c.advance(1)],
  ['slow:80 starts (t=50)', (c) => { c.fire('slow80', 'slow:80').catch(() => {}); }],
  ['t=100: it times out', (c) => c.advance(50)],
  ['t=130: it resolves late (ignored)', (c) => c.advance(30)],
  ['slow:30 succeeds in time (latency 30)', async (c) => { c.fire('slow30', 'slow:30'); await c.advance(30); }],
  ['slowfail:20 fails in time (latency 20)', async (c) => { c.fire('slowfail20', 'slowfail:20').catch(() => {}); await c.advance(20); }],
]);

scenario('timeout: false: a call runs as long as it takes', [
  ['make', (c) => { c.g = gated(); c.make(c.g.action, { timeout: false }); }],
  ['a call starts', (c) => { c.fire('a', 1); }],
  ['t=20000', (c) => c.advance(20000, 100)],
  ['it resolves (latency 20000)', (c) => { c.g.gates[0].resolve('done'); }],
], {
  documented(want) {
    // README "status.window": "A call counts in the bucket it ended in, and in the current
    // one while it runs or waits (opossum: its fire in the bucket it started in)": 20 s
    // later opossum's window has lost the call's fire, fusewire's has not.
    shift(want, 't=20000', { fires: 1 });
  },
});

scenario('resetTimeout → halfOpen; a success closes, a failure reopens; one probe', [
  ['make', (c) => { c.g = gated(); c.make(c.g.action, { resetTimeout: 100, timeout: false }); }],
  ['a failure opens', (c) => { c.fire('a', 1).catch(() => {}); c.g.gates[0].reject(new Error('down')); }],
  ['t=99: still open', (c) => c.advance(99)],
  ['t=100: halfOpen', (c) => c.advance(1)],
  ['a probe starts', (c) => { c.fire('probe1', 2); }],
  ['another call while the probe runs', (c) => { c.fire('b', 3).catch(() => {}); }],
  ['the probe succeeds: close', (c) => { c.g.gates[1].resolve('up'); }],
  ['fail → open again', (c) => { c.fire('c', 4).catch(() => {}); c.g.gates[2].reject(new Error('down again')); }],
  ['t=+100: halfOpen', (c) => c.advance(100)],
  ['the probe fails: reopen', (c) => { c.fire('probe2', 5).catch(() => {}); c.g.gates[3].reject(new Error('still down')); }],
  ['t=+100: halfOpen again', (c) => c.advance(100)],
]);

scenario('fallback: a value, a throwing fallback, an async one, a rejecting async one, a breaker', [
  ['make', (c) => { c.make(act, { errorThresholdPercentage: 99, volumeThreshold: 100 }); }],
  ['value fallback on failure', (c) => { c.b.fallback((x, err) => `fb(${x}, ${err.message})`); c.fire('a', 'fail-a'); }],
  ['throwing fallback', (c) => { c.b.fallback(() => { throw new Error('fb threw'); }); c.fire('b', 'fail-b').catch(() => {}); }],
  ['async fallback', (c) => { c.b.fallback(async (x) => `async fb(${x})`); c.fire('c', 'fail-c'); }],
  ['rejecting async fallback', (c) => { c.b.fallback(async () => { throw new Error('async fb rejected'); }); c.fire('d', 'fail-d').catch(() => {}); }],
  ['a breaker as fallback', (c) => { c.b2 = c.make(async (x) => `b2(${x})`, { name: 'second' }); c.b.fallback(c.b2); c.fire('e', 'fail-e'); }],
  ['fallback removed (null)', (c) => { c.b.fallback(null); c.fire('f', 'fail-f').catch(() => {}); }],
  ['success: no fallback', (c) => { c.b.fallback(() => 'unused'); c.fire('g', 'fine'); }],
], {
  documented(want) {
    // README "Counting": "`fallbacks` counts every fallback that ran, … including one that
    // threw (the core's FALLBACK_FAILURE; opossum counts a fallback that throws
    // synchronously nowhere)". Neither emits `fallback` for it.
    shift(want, 'throwing fallback', { fallbacks: 1 }, Infinity);
  },
});

scenario('fallback on a rejection (open breaker)', [
  ['make', (c) => { c.make(act, { resetTimeout: 1000 }); c.b.fallback((x, err) => `fb(${x}, ${err.code})`); }],
  ['a failure opens; fallback', (c) => { c.fire('a', 'fail'); }],
  ['rejected: fallback with EOPENBREAKER', (c) => { c.fire('b', 'x'); }],
]);

scenario('errorFilter: a filtered error is a success that still rejects, without fallback', [
  ['make', (c) => {
    c.make(act, { errorFilter: (err, x) => err.message.includes('filtered') && x !== 'never', resetTimeout: 100 });
    c.b.fallback(() => 'fallback');
  }],
  ['filtered error', (c) => { c.fire('a', 'fail filtered').catch(() => {}); }],
  ['an unfiltered error (1/2 = 50 %: stays closed), with the fallback', (c) => { c.fire('b', 'fail plain'); }],
  ['another unfiltered error (2/3): opens', (c) => { c.fire('c', 'fail plain'); }],
]);

scenario('errorFilter returning a truthy value that is not `true` (an object, 1, "yes"): not a failure, as opossum tests truthiness', [
  ['make', (c) => {
    const answers = { 'fail obj': { status: 404 }, 'fail one': 1, 'fail yes': 'yes', 'fail empty': '' };
    c.make(act, { errorFilter: (err, x) => answers[x], resetTimeout: 100 });
    c.b.fallback(() => 'fallback');
  }],
  ['an object', (c) => { c.fire('a', 'fail obj').catch(() => {}); }],
  ['1', (c) => { c.fire('b', 'fail one').catch(() => {}); }],
  ['"yes"', (c) => { c.fire('c', 'fail yes').catch(() => {}); }],
  ['"" (falsy): a failure (1/4), with the fallback', (c) => { c.fire('d', 'fail empty'); }],
]);

/** What `this` was in each call of `whoAmI` since the last look. */
let thisSeen = [];
const context = { the: 'context' };
function whoAmI(x) {
  thisSeen.push(this === whoAmI ? 'the action' : this === context ? 'the context' : this === undefined ? 'undefined' : typeof this);
  return `ok ${x}`;
}

scenario('`this` in the action: the action itself under fire(), the context under call(), enabled or not', [
  ['make', (c) => { thisSeen = []; c.make(whoAmI); }],
  ['fire', async (c) => { await c.fire('a', 1); c.note('this', thisSeen.splice(0)); }],
  ['call(context)', async (c) => { await c.b.call(context, 2); c.note('this', thisSeen.splice(0)); }],
  ['disabled: fire and call(context)', async (c) => {
    c.b.disable();
    await c.fire('c', 3);
    await c.b.call(context, 4);
    c.note('this', thisSeen.splice(0));
  }],
], {
  documented(want) {
    // README "Counting": "calls made while disabled are not counted" (opossum counts
    // their `fire`): each of the two disabled calls is one fire fewer from its event on.
    shift(want, 'disabled: fire and call(context)', { fires: -1 }, 0);
    shift(want, 'disabled: fire and call(context)', { fires: -1 }, 1);
  },
});

scenario('capacity: a third concurrent call is refused with ESEMLOCKED', [
  ['make', (c) => { c.g = gated(); c.make(c.g.action, { capacity: 2, timeout: false }); }],
  ['two calls run', (c) => { c.fire('a', 1); c.fire('b', 2); }],
  ['a third: semaphoreLocked, failure (1/3)', (c) => { c.fire('c', 3).catch(() => {}); }],
  ['the first ends', (c) => { c.g.gates[0].resolve('a done'); }],
  ['a fourth runs', (c) => { c.fire('d', 4); }],
  ['with a fallback, a fifth is refused and falls back', (c) => { c.b.fallback((x, err) => `fb ${err.code}`); c.fire('e', 5); }],
  ['all end', (c) => { c.g.gates[1].resolve('b done'); c.g.gates[2].resolve('d done'); }],
]);

scenario('enabled: false, then enable(), then disable()', [
  ['make', (c) => { c.make(act, { enabled: false, errorThresholdPercentage: 25 }); c.b.fallback(() => 'fb'); }],
  ['a failure while disabled: the action\'s error, no fallback', (c) => { c.fire('a', 'fail').catch(() => {}); }],
  ['a success while disabled', (c) => { c.fire('b', 'x'); }],
  ['enable(); a failure opens and falls back', (c) => { c.b.enable(); c.fire('c', 'fail'); }],
  ['disable(): calls run while open', (c) => { c.b.disable(); c.fire('d', 'y'); }],
], {
  documented(want) {
    // README "Counting": "calls made while disabled are not counted" (opossum counts
    // their `fire`). errorThresholdPercentage 25 makes both open on the first failure
    // after enable() (opossum: 1 of 3 fires, fusewire: 1 of 1).
    shift(want, "a failure while disabled: the action's error, no fallback", { fires: -1 });
    shift(want, 'a success while disabled', { fires: -1 });
    shift(want, 'disable(): calls run while open', { fires: -1 });
  },
});

scenario('open() and close() by hand', [
  ['make', (c) => { c.make(act, { resetTimeout: 100 }); }],
  ['open()', (c) => { c.b.open(); }],
  ['open() again: no event', (c) => { c.b.open(); }],
  ['fire: rejected', (c) => { c.fire('a', 'x').catch(() => {}); }],
  ['close()', (c) => { c.b.close(); }],
  ['close() again: no event', (c) => { c.b.close(); }],
  ['fire: runs', (c) => { c.fire('b', 'x'); }],
  ['open(); t=+100: halfOpen', async (c) => { c.b.open(); await c.advance(100); }],
  ['close() from halfOpen', (c) => { c.b.close(); }],
]);

scenario('cache: true with cacheTTL', [
  ['make', (c) => { c.make(act, { cache: true, cacheTTL: 100, errorThresholdPercentage: 99 }); }],
  ['miss', (c) => { c.fire('a', 'k'); }],
  ['hit', (c) => { c.fire('b', 'k'); }],
  ['another key: miss', (c) => { c.fire('c', 'j'); }],
  ['a failure is not cached', async (c) => { await c.fire('d', 'fail').catch(() => {}); c.fire('e', 'fail').catch(() => {}); }],
  ['t=99: hit', async (c) => { await c.advance(99); c.fire('f', 'k'); }],
  ['t=101: expired, miss', async (c) => { await c.advance(2); c.fire('g', 'k'); }],
  ['clearCache(): miss', (c) => { c.b.clearCache(); c.fire('h', 'j'); }],
]);

scenario('coalesce: true: concurrent calls with one key share one call', [
  ['make', (c) => { c.g = gated(); c.make(c.g.action, { coalesce: true, timeout: false }); }],
  ['leader', (c) => { c.fire('a', 'k'); }],
  ['a follower', (c) => { c.fire('b', 'k'); }],
  ['another key', (c) => { c.fire('c', 'j'); }],
  ['the leader resolves', (c) => { c.g.gates[0].resolve('v1'); }],
  ['the other key resolves', (c) => { c.g.gates[1].resolve('v2'); }],
]);

scenario('coalesce with coalesceTTL and a failing leader', [
  ['make', (c) => { c.g = gated(); c.make(c.g.action, { coalesce: true, coalesceTTL: 100, timeout: false, errorThresholdPercentage: 99 }); }],
  ['leader', (c) => { c.fire('a', 'k').catch(() => {}); }],
  ['a follower', (c) => { c.fire('b', 'k').catch(() => {}); }],
  ['t=10: the leader fails', async (c) => { await c.advance(10); c.g.gates[0].reject(new Error('leader failed')); }],
  ['t=50: the failure is still shared', async (c) => { await c.advance(40); c.fire('c', 'k').catch(() => {}); }],
  ['t=120: a new call', async (c) => { await c.advance(70); c.fire('d', 'k'); }],
  ['it resolves', (c) => { c.g.gates[1].resolve('v'); }],
]);

scenario('coalesce: a call short-circuited while open is neither shared nor kept (found by review)', [
  ['make', (c) => { c.make(act, { coalesce: true, coalesceTTL: 10_000, resetTimeout: 100 }); }],
  ['open', (c) => { c.b.open(); }],
  ['two calls while open', (c) => { c.fire('a', 'k').catch(() => {}); c.fire('b', 'k').catch(() => {}); }],
  ['t=150: half-open, the key runs', async (c) => { await c.advance(150); await c.fire('c', 'k'); }],
  ['then shared', (c) => { c.fire('d', 'k'); }],
  ['a fallback', (c) => { c.b.fallback(() => 'FALLBACK'); c.b.open(); c.fire('e', 'j'); }],
  ['closed: the key runs', (c) => { c.b.close(); c.fire('f', 'j'); }],
]);

scenario('rollingCountTimeout / rollingCountBuckets: outcomes leave the window', [
  ['make', (c) => { c.make(act, { rollingCountTimeout: 1000, rollingCountBuckets: 10, volumeThreshold: 10 }); }],
  ['t=0: fail ×2, ok ×1', async (c) => {
    await c.fire('a', 'fail').catch(() => {});
    await c.fire('b', 'fail').catch(() => {});
    await c.fire('c', 'x');
  }],
  ['t=500: ok', async (c) => { await c.advance(500); await c.fire('d', 'x'); }],
  ['t=899: all in the window', (c) => c.advance(399)],
  ['t=1000: the first three left', (c) => c.advance(101)],
  ['t=1399: one left', (c) => c.advance(399)],
  ['t=1500: empty', (c) => c.advance(101)],
]);

scenario('shutdown(): event, getters, later calls, a running call', [
  ['make', (c) => { c.g = gated(); c.make(c.g.action, { timeout: false }); }],
  ['ok', async (c) => { c.fire('a', 1); c.g.gates[0].resolve('one'); }],
  ['a call runs', (c) => { c.fire('b', 2).catch(() => {}); }],
  ['shutdown()', (c) => { c.b.shutdown(); }],
  ['fire after shutdown: ESHUTDOWN', (c) => { c.fire('c', 3).catch(() => {}); }],
  ['the running call ends', (c) => { c.g.gates[1].resolve('two'); }],
]);

scenario('toJSON() shape', [
  ['make', (c) => { c.make(act, { name: 'svc', resetTimeout: 100 }); }],
  ['toJSON closed', (c) => { c.note('toJSON', c.b.toJSON()); }],
  ['t=10: fail, toJSON open', async (c) => { await c.advance(10); await c.fire('a', 'fail').catch(() => {}); c.note('toJSON', c.b.toJSON()); }],
  ['t=110: toJSON halfOpen', async (c) => { await c.advance(100); c.note('toJSON', c.b.toJSON()); }],
], {
  documented(want) {
    for (const s of want) {
      for (const e of s.events) {
        if (e[0] !== 'note:toJSON') continue;
        // README "options.status": "`toJSON().state.lastTimerAt` is the wall-clock time
        // the breaker last opened (opossum: its construction time)" — it opened at t=10.
        if (!e[1].state.closed) e[1].state.lastTimerAt = 10;
        // README: "`latencyTimes` is always `[]`."
        e[1].status.latencyTimes = [];
      }
    }
  },
});

scenario('healthCheck: a failing check opens, every interval', [
  ['make', (c) => { c.make(act, { resetTimeout: 1000 }); }],
  ['healthCheck(ok, 100)', (c) => { c.b.healthCheck(async () => 'fine', 100); }],
  ['t=100', (c) => c.advance(100)],
  ['healthCheck(failing, 100)', (c) => { c.b.healthCheck(async () => { throw new Error('unhealthy'); }, 100); }],
  ['t=+100', (c) => c.advance(100)],
]);

scenario('CircuitBreaker.isOurError on every error', [
  ['make', (c) => { c.g = gated(); c.make(c.g.action, { timeout: 10, capacity: 1, resetTimeout: 1000 }); }],
  ['ETIMEDOUT, ESEMLOCKED', async (c) => {
    const a = c.fire('a', 1).catch((e) => e);
    const b = c.fire('b', 2).catch((e) => e);
    await c.advance(10);
    c.note('isOurError', [c.CB.isOurError(await a), c.CB.isOurError(await b)]);
  }],
  ['EOPENBREAKER, an action error', async (c) => {
    const e1 = await c.fire('c', 3).catch((e) => e);
    c.note('isOurError', [c.CB.isOurError(e1), c.CB.isOurError(new Error('x'))]);
  }],
  ['ESHUTDOWN', async (c) => {
    c.b.shutdown();
    const e = await c.fire('d', 4).catch((x) => x);
    c.note('isOurError', c.CB.isOurError(e));
  }],
]);

// ---- combinations, orders and edges ------------------------------------------------------

scenario('timeouts that open the breaker, with a fallback: timeout, failure, open, fallback', [
  ['make', (c) => { c.make(act, { timeout: 20, resetTimeout: 100 }); c.b.fallback((x, e) => `fb ${e.code}`); }],
  ['two calls hang', (c) => { c.fire('a', 'hang'); c.fire('b', 'hang'); }],
  ['t=20: both time out', (c) => c.advance(20)],
  ['rejected', (c) => { c.fire('c', 'x'); }],
  ['t=120: halfOpen; a probe that hangs', async (c) => { await c.advance(100); c.fire('probe', 'hang'); }],
  ['t=140: the probe times out: reopen', (c) => c.advance(20)],
]);

scenario('capacity refusal that opens the breaker: semaphoreLocked, failure, open, fallback', [
  ['make', (c) => { c.g = gated(); c.make(c.g.action, { capacity: 1, timeout: false, errorThresholdPercentage: 40 }); c.b.fallback((x, e) => `fb ${e.code}`); }],
  ['one runs', (c) => { c.fire('a', 1); }],
  ['refused (1/2 = 50 % > 40 %): opens', (c) => { c.fire('b', 2); }],
  ['the first ends while open', (c) => { c.g.gates[0].resolve('late'); }],
]);

scenario('capacity and timeouts: a timed-out call frees its slot', [
  ['make', (c) => { c.make(act, { capacity: 1, timeout: 10, errorThresholdPercentage: 99 }); }],
  ['one hangs', (c) => { c.fire('a', 'hang').catch(() => {}); }],
  ['t=10: it times out', (c) => c.advance(10)],
  ['the next call runs', (c) => { c.fire('b', 'x'); }],
]);

scenario('after closing from halfOpen the window keeps its counts (rejections in the denominator)', [
  ['make', (c) => { c.make(act, { resetTimeout: 100, rollingCountTimeout: 10000 }); }],
  ['fail: open', (c) => { c.fire('a', 'fail').catch(() => {}); }],
  ['5 rejections', (c) => { for (let i = 0; i < 5; i++) c.fire(`r${i}`, 'x').catch(() => {}); }],
  ['t=100: halfOpen; the probe succeeds: close', async (c) => { await c.advance(100); c.fire('probe', 'x'); }],
  ['fail (2/8 = 25 %): stays closed', (c) => { c.fire('b', 'fail').catch(() => {}); }],
  ['fail ×3 (5/11 = 45 %): closed; one more (6/12 = 50 %): closed; one more (7/13): open', async (c) => {
    for (const l of ['c', 'd', 'e', 'f', 'g']) await c.fire(l, 'fail').catch(() => {});
  }],
]);

scenario('halfOpen ignores volumeThreshold: a failed probe reopens with an empty window', [
  ['make', (c) => { c.make(act, { volumeThreshold: 3, resetTimeout: 2000, rollingCountTimeout: 1000, rollingCountBuckets: 10 }); }],
  ['fail ×3: open', async (c) => { for (const l of ['a', 'b', 'c']) await c.fire(l, 'fail').catch(() => {}); }],
  ['t=2000: halfOpen, window empty', (c) => c.advance(2000, 10)],
  ['the probe fails: reopen', (c) => { c.fire('probe', 'fail').catch(() => {}); }],
  ['t=4000: halfOpen; the probe succeeds: close', async (c) => { await c.advance(2000, 10); c.fire('probe2', 'x'); }],
  ['fail (2 fires in the window < volumeThreshold 3): stays closed', (c) => { c.fire('d', 'fail').catch(() => {}); }],
]);

scenario('errorFilter in halfOpen', [
  ['make', (c) => { c.make(act, { errorFilter: (e) => e.message.includes('filtered'), resetTimeout: 100 }); }],
  ['fail: open', (c) => { c.fire('a', 'fail').catch(() => {}); }],
  ['t=100: halfOpen; a filtered error', async (c) => { await c.advance(100); c.fire('probe', 'fail filtered').catch(() => {}); }],
  ['the next call', (c) => { c.fire('b', 'x').catch(() => {}); }],
], {
  documented(want) {
    // README "errorFilter": "in half-open a filtered error gives the probe turn back
    // (opossum closes the breaker)": still half-open (pending); the next call is the
    // probe and closes it.
    const s1 = at(want, 't=100: halfOpen; a filtered error');
    s1.events = s1.events.filter((e) => e[0] !== 'close');
    s1.events.at(-1)[2] = 'halfOpen(pending)';
    Object.assign(s1.getters, { closed: false, halfOpen: true, pendingClose: true });
    const s2 = at(want, 'the next call');
    s2.events[0][2] = 'halfOpen(pending)';
    s2.events.splice(1, 0, ['close', [], 'closed', { ...s2.events[1][3] }]);
  },
});

scenario('errorFilter accepting ETIMEDOUT: timeout, success; the call rejects, no fallback', [
  ['make', (c) => { c.make(act, { errorFilter: (e) => e.code === 'ETIMEDOUT', timeout: 10 }); c.b.fallback(() => 'fb'); }],
  ['ok ×3', async (c) => { for (const l of ['a', 'b', 'c']) await c.fire(l, l); }],
  ['a call hangs', (c) => { c.fire('d', 'hang').catch(() => {}); }],
  ['t=10: it times out', (c) => c.advance(10)],
], {
  documented(want) {
    // README "errorFilter": "A timeout is always a timeout in the window, though
    // `errorFilter` is still asked (and `success` emitted) as in opossum": it counts as a
    // timeout (a failure), not as opossum's success.
    const s = at(want, 't=10: it times out');
    s.stats.successes -= 1;
    s.stats.failures += 1;
    const success = s.events.find((e) => e[0] === 'success');
    success[3].successes -= 1;
    success[3].failures += 1;
  },
});

scenario('errorFilter accepting ESEMLOCKED', [
  ['make', (c) => { c.g = gated(); c.make(c.g.action, { errorFilter: (e) => e.code === 'ESEMLOCKED', capacity: 1, timeout: false }); c.b.fallback(() => 'fb'); }],
  ['one runs', (c) => { c.fire('a', 1); }],
  ['a second is refused', (c) => { c.fire('b', 2).catch(() => {}); }],
  ['the first ends', (c) => { c.g.gates[0].resolve('done'); }],
], {
  documented(want) {
    // README "errorFilter": "A capacity rejection (`ESEMLOCKED`) is always a failure":
    // `failure` (not opossum's `success`), then the fallback.
    const s = at(want, 'a second is refused');
    const i = s.events.findIndex((e) => e[0] === 'success');
    const [, [err, latency]] = s.events[i];
    const seen = { ...s.events[i][3], successes: s.events[i][3].successes - 1, failures: s.events[i][3].failures + 1 };
    s.events.splice(i, 1, ['failure', [err, latency, [2]], 'closed', seen],
      ['fallback', ['fb', err], 'closed', { ...seen, fallbacks: seen.fallbacks + 1 }]);
    s.results.b = { value: 'fb' };
    at(want, 'the first ends').results.b = { value: 'fb' };
    shift(want, 'a second is refused', { successes: -1, failures: 1, fallbacks: 1 }, Infinity);
  },
});

scenario('cache: hits while open; a fallback result is not cached; the cached value of a failure', [
  ['make', (c) => { c.make(act, { cache: true, resetTimeout: 1000 }); c.b.fallback(() => 'fb'); }],
  ['k: miss, cached', (c) => { c.fire('a', 'k'); }],
  ['fail ×2 (2/3): opens (each falls back)', async (c) => { await c.fire('b', 'fail1'); await c.fire('c', 'fail2'); }],
  ['k while open: hit', (c) => { c.fire('d', 'k'); }],
  ['j while open: miss, reject, fallback (not cached)', (c) => { c.fire('e', 'j'); }],
  ['j again: miss again', (c) => { c.fire('f', 'j'); }],
]);

scenario('coalesce: a result is shared for coalesceTTL, counted from when it arrives', [
  ['make', (c) => { c.g = gated(); c.make(c.g.action, { coalesce: true, coalesceTTL: 1000, timeout: false }); }],
  ['leader + follower', (c) => { c.fire('a', 'k'); c.fire('b', 'k'); }],
  ['t=10: resolves', async (c) => { await c.advance(10); c.g.gates[0].resolve('v'); }],
  ['t=500: a later call shares it', async (c) => { await c.advance(490); c.fire('c', 'k'); }],
  ['t=1005: 1005 ms after the call started, 995 ms after its result', async (c) => {
    await c.advance(505);
    c.fire('d', 'k');
    c.g.gates[1]?.resolve('w');
  }],
], {
  documented(want) {
    // README "Caches": "`coalesceTTL` counts from the moment the result arrives (opossum:
    // from the call's start)": at t=1005 fusewire still shares the t=10 result.
    const s = at(want, 't=1005: 1005 ms after the call started, 995 ms after its result');
    const fire = s.events[0];
    s.events = [fire, ['coalesceCacheHit', [], 'closed', { ...fire[3], coalesceCacheHits: fire[3].coalesceCacheHits + 1 }]];
    s.results.d = { value: 'v' };
    shift(want, 't=1005: 1005 ms after the call started, 995 ms after its result', { coalesceCacheHits: 1, coalesceCacheMisses: -1, successes: -1 }, Infinity);
  },
});

scenario('coalesceResetOn: success ends the sharing when the result arrives', [
  ['make', (c) => { c.g = gated(); c.make(c.g.action, { coalesce: true, coalesceResetOn: ['success'], timeout: false }); }],
  ['leader + follower', (c) => { c.fire('a', 'k'); c.fire('b', 'k'); }],
  ['it resolves; the next call is new', async (c) => { c.g.gates[0].resolve('x'); await jobs(); c.fire('c', 'k'); c.g.gates[1]?.resolve('y'); }],
]);

scenario('coalesce and timeout: coalesceTTL defaults to timeout; coalesceResetOn timeout', [
  ['make', (c) => { c.make(act, { coalesce: true, timeout: 30, coalesceResetOn: ['timeout'], errorThresholdPercentage: 99 }); }],
  ['leader hangs; a follower', (c) => { c.fire('a', 'hang').catch(() => {}); c.fire('b', 'hang').catch(() => {}); }],
  ['t=30: both time out', (c) => c.advance(30)],
  ['a new call', (c) => { c.fire('c', 'hang').catch(() => {}); }],
  ['t=60', (c) => c.advance(30)],
]);

scenario('rollingCountTimeout not a multiple of rollingCountBuckets (1000 / 3)', [
  ['make', (c) => { c.make(act, { rollingCountTimeout: 1000, rollingCountBuckets: 3, volumeThreshold: 100 }); }],
  ['fail', (c) => { c.fire('a', 'fail').catch(() => {}); }],
  ['t=665: in the window', (c) => c.advance(665)],
  ['t=999: out (3 × 333 ms)', (c) => c.advance(334)],
]);

scenario('latency: mean, min, max and median', [
  ['make', (c) => { c.make(act, { timeout: false }); }],
  ['10, 20, 30 ms', async (c) => {
    const a = c.fire('a', 'slow:10');
    const b = c.fire('b', 'slow:20');
    const d = c.fire('c', 'slow:30');
    await c.advance(30);
    await Promise.all([a, b, d]);
    const s = c.b.stats;
    c.note('latency', { mean: s.latencyMean, min: s.percentiles[0], max: s.percentiles[1], medianWithin2pct: Math.abs(s.percentiles[0.5] - 20) <= 0.4 });
  }],
]);

scenario('rollingPercentilesEnabled: false', [
  ['make', (c) => { c.make(act, { rollingPercentilesEnabled: false }); }],
  ['ok', async (c) => { await c.fire('a', 'x'); const s = c.b.stats; c.note('percentiles', { mean: s.latencyMean, p: s.percentiles }); }],
]);

scenario('state option: restore an open breaker from toJSON().state', [
  ['make', (c) => { c.make(act, { resetTimeout: 100 }); }],
  ['fail: open; restore into a second breaker', async (c) => {
    await c.fire('a', 'fail').catch(() => {});
    c.b2 = c.make(act, { resetTimeout: 100, state: c.b.toJSON().state });
    c.note('restored', getters(c.b2));
  }],
  ['it rejects', (c) => { c.fireOn(c.b2, 'b', 'x').catch(() => {}); }],
  ['t=100: both halfOpen', async (c) => { await c.advance(100); c.note('restored', getters(c.b2)); }],
]);

scenario('call(context, ...args) and multiple arguments', [
  ['make', (c) => { c.make(function (a, b) { return Promise.resolve(`${this?.tag}:${a}+${b}`); }, {}); }],
  ['call', (c) => { c.b.call({ tag: 'ctx' }, 1, 2).then((v) => c.note('call', v)); }],
  ['fire', (c) => { c.fire('a', 3, 4); }],
]);

scenario('open() while calls run; the calls end while open', [
  ['make', (c) => { c.g = gated(); c.make(c.g.action, { timeout: false, resetTimeout: 100 }); }],
  ['two run', (c) => { c.fire('a', 1); c.fire('b', 2).catch(() => {}); }],
  ['open()', (c) => { c.b.open(); }],
  ['one succeeds, one fails while open', (c) => { c.g.gates[0].resolve('a'); c.g.gates[1].reject(new Error('b')); }],
  ['t=100: halfOpen', (c) => c.advance(100)],
]);

scenario('shutdown() while halfOpen and with a pending timeout', [
  ['make', (c) => { c.make(act, { timeout: 50, resetTimeout: 100 }); }],
  ['fail: open; t=100 halfOpen', async (c) => { await c.fire('a', 'fail').catch(() => {}); await c.advance(100); }],
  ['a probe hangs; shutdown()', (c) => { c.fire('probe', 'hang').catch(() => {}); c.b.shutdown(); }],
  ['t=150: the probe times out after shutdown', (c) => c.advance(50)],
]);

scenario('synchronous actions: a value, a throw, a promise', [
  ['make', (c) => { c.make((x) => { if (x === 'throw') throw new Error('sync throw'); if (x === 'promise') return Promise.resolve('p'); return 5; }, { errorThresholdPercentage: 99 }); }],
  ['returns 5', (c) => { c.fire('a', 'value'); }],
  ['throws', (c) => { c.fire('b', 'throw').catch(() => {}); }],
  ['returns a promise', (c) => { c.fire('c', 'promise'); }],
]);

scenario('name, group, volumeThreshold getters and the options object', [
  ['make', (c) => {
    const options = { name: 'svc', group: 'grp', volumeThreshold: 7 };
    c.make(act, options);
    c.note('getters', { name: c.b.name, group: c.b.group, volumeThreshold: c.b.volumeThreshold });
    c.note('options', options);
  }],
  ['defaults', (c) => {
    const b = c.make(async function namedAction() {}, undefined);
    c.note('getters', { name: b.name, group: b.group, volumeThreshold: b.volumeThreshold });
    c.note('options', b.options);
  }],
  ['cache and coalesce options', (c) => {
    const b = c.make(act, { cache: true, coalesce: true, timeout: 123 });
    c.note('options', Object.keys(b.options).sort());
    c.note('coalesceTTL', b.options.coalesceTTL);
  }],
], {
  documented(want) {
    // README "Options are read once": "there is no `options.cacheTransport` object for
    // the built-in cache (it lives in the core)".
    const keys = at(want, 'cache and coalesce options').events[0][1];
    keys.splice(keys.indexOf('cacheTransport'), 1);
    // README "Options are read once": "nor `options.coalesceCache` (opossum's
    // coalescing MemoryCache)".
    keys.splice(keys.indexOf('coalesceCache'), 1);
  },
});

scenario('abortController: aborted on a timeout; autoRenewAbortController renews it on halfOpen', [
  ['make', (c) => { c.make(act, { timeout: 10, resetTimeout: 100, autoRenewAbortController: true }); c.sig0 = c.b.getSignal(); c.note('signal', { aborted: c.sig0.aborted }); }],
  ['a call times out: aborted; opens', async (c) => {
    c.fire('a', 'hang').catch(() => {});
    await c.advance(10);
    c.note('signal', { aborted: c.b.getSignal().aborted, same: c.b.getSignal() === c.sig0 });
  }],
  ['t=110: halfOpen: a new controller', async (c) => {
    await c.advance(100);
    c.note('signal', { aborted: c.b.getSignal().aborted, same: c.b.getSignal() === c.sig0, controller: c.b.getAbortController() === c.b.options.abortController });
  }],
]);

// Found by a differential fuzzer: coalesceResetOn judged what the call settled with, so
// a failure its fallback answered counted as a 'success' (kept under ['error'] and
// shared with every caller for coalesceTTL; forgotten under ['success']).
for (const on of ['error', 'success', 'timeout']) {
  scenario(`coalesceResetOn: ['${on}'] looks at how the action ended, not at its fallback's value`, [
    ['make', (c) => {
      c.make(act, { coalesce: true, coalesceResetOn: [on], coalesceTTL: 5000, timeout: 30, errorThresholdPercentage: 99, volumeThreshold: 5 });
      c.b.fallback(() => 'fallback');
    }],
    ['a call fails (its fallback answers), one times out', async (c) => {
      c.fire('a', 'fail-k');
      c.fire('b', 'hang');
      await c.advance(30);
    }],
    ['t=31: the same keys again', async (c) => {
      await c.advance(1);
      c.fire('c', 'fail-k');
      c.fire('d', 'hang');
      await c.advance(30);
    }],
  ]);
}

// Found by a differential fuzzer: a call timing out on the millisecond the breaker
// half-opens aborted the controller after autoRenewAbortController had looked at it,
// so the probe got an aborted signal.
scenario('autoRenewAbortController: a timeout on the half-open millisecond leaves a fresh signal', [
  ['make', (c) => { c.make(act, { timeout: 50, resetTimeout: 50, autoRenewAbortController: true, volumeThreshold: 0 }); }],
  ['opens', async (c) => { c.b.open(); }],
  ['force-closed? no: a call with timeout 50 that will end with the open period', async (c) => {
    c.b.close();
    c.fire('a', 'hang').catch(() => {});
    c.b.open();
  }],
  ['t=50: it times out as the breaker half-opens', async (c) => {
    await c.advance(50);
    c.note('signal', { aborted: c.b.getSignal().aborted });
  }],
]);

scenario('open() while the halfOpen probe runs; the probe then succeeds', [
  ['make', (c) => { c.g = gated(); c.make(c.g.action, { timeout: false, resetTimeout: 100 }); }],
  ['fail: open', (c) => { c.fire('a', 1).catch(() => {}); c.g.gates[0].reject(new Error('x')); }],
  ['t=100: halfOpen; the probe starts', async (c) => { await c.advance(100); c.fire('probe', 2); }],
  ['open()', (c) => { c.b.open(); }],
  ['the probe succeeds', (c) => { c.g.gates[1].resolve('ok'); }],
  ['t=200: halfOpen', (c) => c.advance(100)],
]);

scenario('close() while open, then open() restarts resetTimeout', [
  ['make', (c) => { c.make(act, { resetTimeout: 100 }); }],
  ['fail: open', (c) => { c.fire('a', 'fail').catch(() => {}); }],
  ['t=50: close()', async (c) => { await c.advance(50); c.b.close(); }],
  ['t=60: open()', async (c) => { await c.advance(10); c.b.open(); }],
  ['t=159: still open', (c) => c.advance(99)],
  ['t=160: halfOpen', (c) => c.advance(1)],
]);

scenario('the fallback gets (...args, err) and `this` of the fallback function', [
  ['make', (c) => { c.make(act, {}); c.b.fallback(function (...a) { return { n: a.length, last: a.at(-1)?.message, self: typeof this }; }); }],
  ['fail with 3 args', (c) => { c.fire('a', 'fail', 2, 3); }],
]);

// The warm-up breaker (`c.b`, whose stats each step compares) fires nothing: outcomes
// 999 ms old are in one window and not the other, depending on the bucket phase.
scenario('boundaries: cacheTTL, coalesceTTL and warm-up end at exactly their millisecond', [
  ['make', (c) => {
    c.make(act, { allowWarmUp: true, rollingCountTimeout: 1000, errorThresholdPercentage: 99 });
    c.b1 = c.make(act, { cache: true, cacheTTL: 100 });
    c.g = gated();
    c.b2 = c.make(c.g.action, { coalesce: true, coalesceTTL: 100, timeout: false });
  }],
  ['miss; coalesce leader resolves at once', async (c) => { c.fireOn(c.b1, 'a', 'k'); c.fireOn(c.b2, 'x1', 'k'); c.g.gates[0].resolve('v'); }],
  ['t=99: hits', async (c) => { await c.advance(99); c.fireOn(c.b1, 'b', 'k'); c.fireOn(c.b2, 'x2', 'k'); }],
  ['t=100: expired?', async (c) => { await c.advance(1); c.fireOn(c.b1, 'c', 'k'); c.fireOn(c.b2, 'x3', 'k'); }],
  ['t=999: warming up', async (c) => { await c.advance(899); c.note('warmUp', c.b.warmUp); }],
  ['t=1000: warm-up over?', async (c) => { await c.advance(1); c.note('warmUp', c.b.warmUp); }],
]);

scenario('cache: concurrent misses for one key, the leader\'s result first (README: the first result is kept)', [
  ['make', (c) => { c.g = gated(); c.make(c.g.action, { cache: true, timeout: false }); }],
  ['two concurrent misses', (c) => { c.fire('a', 'k'); c.fire('b', 'k'); }],
  ['the first resolves first', (c) => { c.g.gates[0].resolve('first'); }],
  ['then the second', (c) => { c.g.gates[1].resolve('second'); }],
  ['a hit', (c) => { c.fire('c', 'k'); }],
], {
  documented(want) {
    // README "Caches": "of concurrent misses for one key that all succeed, the first
    // result is kept (opossum keeps the last)".
    at(want, 'a hit').results.c = { value: 'first' };
  },
});

scenario('cache: concurrent misses for one key, the second caller\'s result first', [
  ['make', (c) => { c.g = gated(); c.make(c.g.action, { cache: true, timeout: false }); }],
  ['two concurrent misses', (c) => { c.fire('a', 'k'); c.fire('b', 'k'); }],
  ['the second resolves first', (c) => { c.g.gates[1].resolve('second'); }],
  ['k again: a hit?', (c) => { c.fire('c', 'k'); }],
  ['the first resolves (and a third call, if one ran)', (c) => { c.g.gates[0].resolve('first'); c.g.gates[2]?.resolve('third'); }],
  ['k again', (c) => { c.fire('d', 'k'); }],
], {
  documented(want) {
    // README "Caches": "of concurrent misses for one key that all succeed, the first
    // result to arrive is kept (opossum keeps the last)".
    at(want, 'k again').results.d = { value: 'second' };
  },
});

scenario('cache: concurrent misses for one key, the first fails, the second succeeds', [
  ['make', (c) => { c.g = gated(); c.make(c.g.action, { cache: true, timeout: false, errorThresholdPercentage: 99 }); }],
  ['two concurrent misses', (c) => { c.fire('a', 'k').catch(() => {}); c.fire('b', 'k'); }],
  ['the first fails', (c) => { c.g.gates[0].reject(new Error('first failed')); }],
  ['the second succeeds', (c) => { c.g.gates[1].resolve('second'); }],
  ['k again: a hit?', (c) => { c.fire('c', 'k'); c.g.gates[2]?.resolve('third'); }],
]);

scenario('cache and halfOpen: a hit is no probe; a miss is the probe', [
  ['make', (c) => { c.make(act, { cache: true, resetTimeout: 100 }); }],
  ['k cached; fail ×2 (2/3): opens', async (c) => { await c.fire('a', 'k'); await c.fire('b', 'fail1').catch(() => {}); await c.fire('c', 'fail2').catch(() => {}); }],
  ['t=100: halfOpen; a hit', async (c) => { await c.advance(100); c.fire('d', 'k'); }],
  ['a miss: the probe, closes', (c) => { c.fire('e', 'j'); }],
]);

scenario('close() by hand while the halfOpen probe runs; the probe then fails', [
  ['make', (c) => { c.g = gated(); c.make(c.g.action, { timeout: false, resetTimeout: 100 }); }],
  ['fail: open', (c) => { c.fire('a', 1).catch(() => {}); c.g.gates[0].reject(new Error('x')); }],
  ['t=100: halfOpen; the probe starts', async (c) => { await c.advance(100); c.fire('probe', 2).catch(() => {}); }],
  ['close()', (c) => { c.b.close(); }],
  ['the probe fails (2/2 failures)', (c) => { c.g.gates[1].reject(new Error('probe failed')); }],
], {
  documented(want) {
    // README "Half-open generations": "the same holds for a probe still running when
    // the breaker is closed (or opened) by hand: its result never moves the breaker".
    const s = at(want, 'the probe fails (2/2 failures)');
    s.events = s.events.filter((e) => e[0] !== 'open');
    Object.assign(s.getters, { opened: false, closed: true });
  },
});

scenario('close() by hand keeps the window', [
  ['make', (c) => { c.make(act, { volumeThreshold: 3, resetTimeout: 100 }); }],
  ['ok, fail, fail (2/3): open', async (c) => { await c.fire('a', 'x'); await c.fire('b', 'fail').catch(() => {}); await c.fire('c', 'fail').catch(() => {}); }],
  ['close(); ok', async (c) => { c.b.close(); await c.fire('d', 'x'); }],
  ['fail (3/5 = 60 %): open', (c) => { c.fire('e', 'fail').catch(() => {}); }],
]);

scenario('a call admitted while closed ends after the breaker half-opened', [
  ['make', (c) => { c.g = gated(); c.make(c.g.action, { timeout: false, resetTimeout: 100, errorThresholdPercentage: 40 }); }],
  ['two calls run', (c) => { c.fire('a', 1).catch(() => {}); c.fire('b', 2).catch(() => {}); }],
  ['one fails: open', (c) => { c.g.gates[0].reject(new Error('x')); }],
  ['t=100: halfOpen; the other fails', async (c) => { await c.advance(100); c.g.gates[1].reject(new Error('late')); }],
], {
  documented(want) {
    // README "Half-open generations": "A call admitted before the breaker opened never
    // closes or reopens it when it ends later (opossum: any success while half-open
    // closes, any failure reopens)".
    const s = at(want, 't=100: halfOpen; the other fails');
    s.events = s.events.filter((e) => e[0] !== 'open');
    for (const e of s.events) if (e[0] === 'failure') e[2] = 'halfOpen(pending)';
    Object.assign(s.getters, { opened: false, halfOpen: true, pendingClose: true });
  },
});

scenario('an action that resolves on the very millisecond of its timeout', [
  ['make', (c) => { c.make(act, { timeout: 50, errorThresholdPercentage: 99 }); }],
  ['slow:50', (c) => { c.fire('a', 'slow:50').catch(() => {}); }],
  ['t=50', (c) => c.advance(50)],
]);

scenario('after shutdown(): enable(), close(), open()', [
  ['make', (c) => { c.make(act, {}); }],
  ['shutdown()', (c) => { c.b.shutdown(); }],
  ['enable()', (c) => { c.b.enable(); }],
  ['close()', (c) => { c.b.close(); }],
  ['fire', (c) => { c.fire('a', 'x').catch(() => {}); }],
  ['open()', (c) => { c.b.open(); }],
], {
  documented(want) {
    // README "After `shutdown()`": "`enable()`, `close()` and `open()` do nothing: a
    // shut-down breaker stays shut down (opossum's `close()` and `open()` bring it back)".
    const down = { opened: false, closed: false, halfOpen: false, pendingClose: false, enabled: false, warmUp: false, isShutdown: true };
    const shut = { rejected: { error: 'Error', message: 'The circuit has been shutdown.', ours: true, code: 'ESHUTDOWN' } };
    for (const step of ['enable()', 'close()', 'fire', 'open()']) Object.assign(at(want, step).getters, down);
    for (const step of ['fire', 'open()']) at(want, step).results.a = shut;
  },
});

scenario('coalesceResetOn: error ends the sharing of a failure', [
  ['make', (c) => { c.g = gated(); c.make(c.g.action, { coalesce: true, coalesceResetOn: ['error'], timeout: false, errorThresholdPercentage: 99 }); }],
  ['leader + follower', (c) => { c.fire('a', 'k').catch(() => {}); c.fire('b', 'k').catch(() => {}); }],
  ['the leader fails', (c) => { c.g.gates[0].reject(new Error('leader failed')); }],
  ['the next call is new', (c) => { c.fire('c', 'k'); c.g.gates[1]?.resolve('y'); }],
]);

scenario('coalesceResetOn: [\'error\'] keeps a timed-out result for coalesceTTL (found running opossum\'s README examples)', [
  ['make', (c) => { c.make(act, { coalesce: true, timeout: 30, coalesceTTL: 5000, coalesceResetOn: ['error'], errorThresholdPercentage: 99 }); }],
  ['leader hangs; a follower', (c) => { c.fire('a', 'hang').catch(() => {}); c.fire('b', 'hang').catch(() => {}); }],
  ['t=30: both time out', (c) => c.advance(30)],
  ['a later call gets the kept timeout', (c) => { c.fire('c', 'hang').catch(() => {}); }],
  ['t=60', (c) => c.advance(30)],
]);

scenario('coalesceResetOn: [\'timeout\'] keeps a failure for coalesceTTL', [
  ['make', (c) => { c.g = gated(); c.make(c.g.action, { coalesce: true, coalesceTTL: 5000, coalesceResetOn: ['timeout'], timeout: false, errorThresholdPercentage: 99 }); }],
  ['leader + follower', (c) => { c.fire('a', 'k').catch(() => {}); c.fire('b', 'k').catch(() => {}); }],
  ['the leader fails', (c) => { c.g.gates[0].reject(new Error('leader failed')); }],
  ['a later call gets the kept failure', (c) => { c.fire('c', 'k').catch(() => {}); c.g.gates[1]?.resolve('y'); }],
]);

scenario('no trip without a failure: successes leaving the window do not open it', [
  ['make', (c) => { c.make(act, { rollingCountTimeout: 1000, rollingCountBuckets: 10 }); }],
  ['t=0: ok ×3', async (c) => { for (const l of ['a', 'b', 'c']) await c.fire(l, 'x'); }],
  ['t=500: fail (1/4)', async (c) => { await c.advance(500); c.fire('d', 'fail').catch(() => {}); }],
  ['t=1100: the successes left (1/1 in the window), still closed', (c) => c.advance(600, 10)],
  ['fail (2/2): open', (c) => { c.fire('e', 'fail').catch(() => {}); }],
]);

// Found running real users' opossum code: a gateway records proxied 5xx responses with
// `breaker.emit('failure', err)`, a decorator emits `fallback` itself, and
// opossum-prometheus wires one counter to each name of `eventNames()` (fusewire
// listed only its own `newListener` / `removeListener` hooks: no counter got any event).
scenario('events emitted from outside count as opossum\'s listeners count them; eventNames() lists those', [
  ['make', (c) => {
    c.make(act, { errorThresholdPercentage: 50 });
    c.note('eventNames', c.b.eventNames());
  }],
  ['emit each counted event', (c) => {
    for (const e of ['success', 'fire', 'fallback', 'timeout', 'reject', 'cacheHit', 'cacheMiss',
      'coalesceCacheHit', 'coalesceCacheMiss', 'semaphoreLocked']) c.b.emit(e, new Error(e), 3, []);
  }],
  ['a gateway records two 502s', (c) => {
    c.b.emit('failure', new Error('upstream returned 502'), 12, ['/a']);
    c.b.emit('failure', new Error('upstream returned 502'), 15, ['/b']);
  }],
  ['a call that fails: the recorded failures count toward the trip', (c) => { c.fire('a', 'fail').catch(() => {}); }],
  ['eventNames() with a listener of another event', (c) => {
    c.b.on('custom', () => {});
    c.note('eventNames', c.b.eventNames());
  }],
]);
