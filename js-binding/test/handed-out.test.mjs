// What the core hands out for a call — a bulkhead slot, a queue place, a cache or
// coalescing lead — goes back when the wrapper's code between the hand-out and the
// call taking it over throws: a listener of an event told there, a `then` that throws,
// or the stack running out (the instance itself not lost). Found by review and by a
// stack-limit fuzzer: each left a slot taken or a key "loading" for good.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { test } from 'node:test';

import { CircuitBreaker } from 'fusewire';

import { sleep } from './helpers.mjs';

const require = createRequire(import.meta.url);
const pkgDir = dirname(require.resolve('fusewire/package.json'));

const within = (p, ms) => Promise.race([p.then((v) => v, (e) => `error: ${e.code ?? e.message}`), sleep(ms).then(() => 'HUNG')]);

test('a halfOpen listener that throws inside fire() does not keep the probe\'s slot', async () => {
  let fail = true;
  const b = new CircuitBreaker(async () => {
    if (fail) throw new Error('down');
    return 'ok';
  }, { resetTimeout: 50, timeout: false, capacity: 1 });
  await b.fire().catch(() => {});
  assert.equal(b.opened, true);
  fail = false;
  let told = 0;
  b.on('halfOpen', () => {
    told++;
    throw new Error('listener');
  });
  // Busy past resetTimeout: the timer cannot run, so fire() finds the transition.
  const until = Date.now() + 80;
  while (Date.now() < until) { /* spin */ }
  assert.throws(() => b.fire(), /listener/, 'the listener\'s error comes out of fire(), as from opossum\'s emit');
  assert.equal(told, 1);
  // Before: the probe's slot stayed taken, and every later call was refused for good.
  assert.equal(await within(b.fire(), 500), 'ok');
  assert.equal(b.closed, true);
});

test('a coalesceCacheMiss or cacheMiss listener that throws does not leave its key waiting', async () => {
  for (const [options, event] of [[{ coalesce: true }, 'coalesceCacheMiss'], [{ cache: true }, 'cacheMiss'],
    [{ cache: true, coalesce: true }, 'cacheMiss'], [{ cache: true, coalesce: true }, 'coalesceCacheMiss']]) {
    let runs = 0;
    const b = new CircuitBreaker(async (k) => {
      runs++;
      return `v${k}`;
    }, options);
    let once = true;
    b.on(event, () => {
      if (once) {
        once = false;
        throw new Error('listener');
      }
    });
    assert.throws(() => b.fire(1), /listener/);
    // Before: the key's lead was never settled, and every later call of it waited on it.
    assert.equal(await within(b.fire(1), 500), 'v1', `${event} with ${JSON.stringify(options)}`);
    assert.equal(await within(b.fire(1), 500), 'v1');
    assert.ok(runs >= 1);
    b.shutdown();
  }
});

test('an action returning a thenable whose then throws fails its call and frees its slot', async () => {
  let n = 0;
  const b = new CircuitBreaker(() => (n++ === 0 ? { then() { throw new Error('bad then'); } } : 'ok'),
    { capacity: 1, timeout: false, volumeThreshold: 10 });
  assert.equal(await within(b.fire(), 500), 'error: bad then');
  assert.equal(await within(b.fire(), 500), 'ok', 'the slot is free again');
  assert.equal(b.stats.failures, 1);
});

/** Runs `body` in a child (calls at the stack's end can lose the instance: then it says so). */
function child(body) {
  const script = `
    const fusewire = require(${JSON.stringify(join(pkgDir, 'dist', 'index.cjs'))});
    const engine = require(${JSON.stringify(join(pkgDir, 'dist', 'cjs', 'engine.js'))});
    const { CircuitBreaker, Collapser } = fusewire;
    const settle = (p, ms) => Promise.race([p.then((v) => v, (e) => 'error: ' + (e.code ?? e.message)),
      new Promise((r) => { const t0 = Date.now(); const spin = () => (Date.now() - t0 > ms ? r('HUNG') : setImmediate(spin)); spin(); })]);
    (async () => { ${body} })().then((v) => { console.log(JSON.stringify(v)); process.exit(0); }, (e) => { console.error(e); process.exit(3); });
  `;
  // (The checks wait with setImmediate: Node's own timer lists can be left broken by a
  // setTimeout that ran out of stack inside Node.)
  for (let attempt = 0; attempt < 8; attempt++) {
    const r = spawnSync(process.execPath, ['--unhandled-rejections=warn', '-e', script], { encoding: 'utf8', timeout: 120_000 });
    assert.equal(r.status, 0, `child failed (${r.status} ${r.signal ?? ''}):\n${r.stderr.slice(-3000)}`);
    const out = JSON.parse(r.stdout.trim().split('\n').at(-1));
    if (!out.lost) return out;
  }
  assert.fail('every attempt lost the instance (covered by lost.test.mjs)');
}

test('fire() at every depth down to the stack limit leaves no slot taken', () => {
  const out = child(`
    const b = new CircuitBreaker((x) => x, { capacity: 2, timeout: false, volumeThreshold: 1e9 });
    function deep() { try { deep(); } catch {} try { b.fire(1).catch(() => {}); } catch {} }
    deep();
    await new Promise((r) => setImmediate(r));
    const lost = engine.lost;
    const got = [];
    for (let i = 0; i < 3; i++) got.push(await settle(b.fire('hello'), 1000));
    return { lost, got, inFlight: b.status.stats.semaphoreRejections >= 0 && b.semaphore.count };
  `);
  // Before: the core kept 2 slots in flight for good; every call was refused ESEMLOCKED.
  assert.deepEqual(out.got, ['hello', 'hello', 'hello']);
  assert.equal(out.inFlight, 2, 'both slots free');
});

test('Collapser loads at every depth down to the stack limit leave no key loading', () => {
  const out = child(`
    // windowMs 0 (the batch goes after the tick): a window timer armed as the stack ran
    // out can sit in a timer list Node itself left broken, which no code of ours mends.
    const c = new Collapser(async (keys) => keys.map((k) => k * 10), { windowMs: 0 });
    let i = 0;
    function deep() { try { deep(); } catch {} try { c.load(i++ % 20).catch(() => {}); } catch {} }
    deep();
    const lost = engine.lost;
    await new Promise((r) => setImmediate(r));
    const got = [];
    for (let k = 0; k < 20; k++) got.push(await settle(c.load(k), 1000));
    return { lost, got };
  `);
  // Before: some keys stayed "loading" for good, even after clearAll().
  assert.deepEqual(out.got, Array.from({ length: 20 }, (_, k) => k * 10));
});

// Found by review: a call settled by a thenable deep in a recursion, where the stack
// ran out part-way through settling it, kept its slot, and the call queued behind it
// never ran (its dequeue event was lost): neither settled, the breaker was stuck.
test('a call settled at the stack limit frees its slot, and the call queued behind it runs', () => {
  // Frames of four sizes: where the stack runs out inside the settling differs.
  for (const pad of [0, 5, 16, 32]) {
    const r = child(`
    const M = 600, pad = ${pad};
    {
      const bs = [], st = [], rel = [];
      for (let j = 0; j < M; j++) {
        const b = new CircuitBreaker((x) => (x === 'hold' ? { then(ok) { rel[j] = ok; } } : x), {
          capacity: 1, timeout: false, volumeThreshold: 1e9,
          fusewire: { bulkhead: { isolation: 'pool', max_queue: 10 } },
        });
        const s = { held: 'pending', queued: 'pending' };
        b.fire('hold').then(() => { s.held = 'ok'; }, () => { s.held = 'error'; });
        b.fire('q').then(() => { s.queued = 'ok'; }, () => { s.queued = 'error'; });
        bs.push(b);
        st.push(s);
      }
      // The held calls are settled one per frame, from the stack's end up.
      const ctx = { next: 0, M, rel };
      const locals = Array.from({ length: pad }, (_, i) => 'let v' + i + ' = n + ' + i + ';').join(' ');
      const sum = Array.from({ length: pad }, (_, i) => 'v' + i).join(' + ') || '0';
      const deep = new Function('ctx', 'return function deep(n) { ' + locals +
        ' try { deep(n + 1); } catch {} if (ctx.next < ctx.M) { const j = ctx.next++; try { ctx.rel[j]("v"); } catch {} } return ' + sum + '; }')(ctx);
      deep(0);
      // What the stack's end left noted goes back at the next call of any breaker.
      await new CircuitBreaker((x) => x, {}).fire(1);
      for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r));
      let settled = 0, stuck = 0;
      for (let j = 0; j < M; j++) {
        // A held call whose thenable could not call into fusewire at all stays
        // pending, as any promise its resolver never reached.
        if (st[j].held === 'pending') continue;
        settled++;
        if (st[j].queued === 'pending' || bs[j].semaphore.count !== 1) stuck++;
      }
      return { lost: engine.lost, settled, stuck };
    }
  `);
    assert.ok(r.settled >= 100, `the recursion settled ${r.settled} held calls (${pad})`);
    // Before: 6 of 201 settled held calls left the queued one pending and the slot taken.
    assert.equal(r.stuck, 0, `frames padded by ${pad}`);
  }
});

// Found by review: a queue place given back later (the stack's end) after the core had
// given it its turn was given back as a ticket only, and its slot stayed taken.
test('a queue place given back after its turn came frees the slot it became', async () => {
  const engine = require(join(pkgDir, 'dist', 'cjs', 'engine.js'));
  let release;
  const b = new CircuitBreaker((x) => (x === 'slow' ? new Promise((r) => { release = () => r(x); }) : Promise.resolve(x)), {
    timeout: false, volumeThreshold: 1e9,
    fusewire: { bulkhead: { isolation: 'pool', max_concurrent: 1, max_queue: 5, queue_rejection_threshold: 5, max_wait_ms: 60000 } },
  });
  const slow = b.fire('slow');
  const w = engine.w;
  const cancel = w.fw_cancel_ticket;
  let stackEnd = true;
  // The stack's end at one point: the first give-back's call into the instance.
  w.fw_cancel_ticket = (...a) => {
    if (stackEnd) {
      stackEnd = false;
      throw new RangeError('Maximum call stack size exceeded');
    }
    return cancel(...a);
  };
  try {
    // A signal whose addEventListener throws: the queued call's setup fails.
    const bad = { addEventListener() { throw new RangeError('Maximum call stack size exceeded'); }, removeEventListener() {}, aborted: false };
    assert.match(await within(b.fireWithSignal(bad, 'q'), 200), /Maximum call stack/);
    release();
    assert.equal(await within(slow, 200), 'slow');
    const got = [];
    for (let i = 0; i < 3; i++) got.push(await within(b.fire(`x${i}`), 300));
    assert.deepEqual(got, ['x0', 'x1', 'x2']);
  } finally {
    w.fw_cancel_ticket = cancel;
    b.shutdown();
  }
});

// Found by review: past 32 noted at once, the count of noted hand-backs never reset.
test('more than 32 hand-backs at once are all given back, and the count resets', () => {
  const b = new CircuitBreaker((x) => x, { timeout: false, volumeThreshold: 1e9 });
  let depth = 0;
  const bad = {
    aborted: false,
    removeEventListener() {},
    addEventListener() {
      if (depth++ < 39) b.fireWithSignal(bad, 'nested').catch(() => {});
      throw new Error('addEventListener');
    },
  };
  b.fireWithSignal(bad, 'outer').catch(() => {});
  b.fire(1);
  const strays = require(join(pkgDir, 'dist', 'cjs', 'breaker.js')).strayState();
  assert.equal(strays.n, 0);
  assert.equal(Array.from(strays.ids).filter((v) => v === v).length, 0, 'none left');
  b.shutdown();
});

// Found by a stack-limit fuzzer: an abort made where the stack has run out stopped the
// breaker's abort handler part-way (its error became an uncaught exception, and what
// the call held stayed held). The stack's end is simulated at one point of the handler.
test('an abort whose handler cannot finish still rejects the call and frees its slot', async () => {
  const engine = require(join(pkgDir, 'dist', 'cjs', 'engine.js'));
  const b = new CircuitBreaker((x, signal) => (x === 'hang' ? new Promise(() => {}) : Promise.resolve(x)),
    { capacity: 1, timeout: false, volumeThreshold: 1e9 });
  const ac = new AbortController();
  const p = b.fireWithSignal(ac.signal, 'hang');
  const w = engine.w;
  const complete = w.fw_complete;
  w.fw_complete = () => {
    throw new RangeError('Maximum call stack size exceeded');
  };
  try {
    ac.abort(new Error('gone'));
  } finally {
    w.fw_complete = complete;
  }
  assert.equal(await within(p, 300), 'error: gone');
  assert.equal(await within(b.fire('next'), 300), 'next', 'the slot is free again');
  b.shutdown();
});

// Found by review: a result whose `then` getter throws (a Proxy) was rejected but
// counted nowhere: no failure, no fallback, as a `then` that throws now is.
test('a result whose then getter throws fails its call as a then that throws does', async () => {
  const hostile = new Proxy({}, { get(_, k) { if (k === 'then') throw new Error('bad getter'); return undefined; } });
  const b = new CircuitBreaker(() => hostile, { capacity: 1, timeout: false, volumeThreshold: 10 });
  const failures = [];
  b.on('failure', (e) => failures.push(e.message));
  b.fallback(() => 'fallback');
  assert.equal(await within(b.fire(), 300), 'fallback');
  assert.deepEqual(failures, ['bad getter']);
  assert.equal(b.stats.failures, 1);
  b.shutdown();
});
