// A lost instance: a call into the wasm instance that throws (a trap, or the caller's
// stack running out inside it) may leave its memory half-updated, and that instance
// serves every breaker of the process. Found while probing what a trap does: one `fire()` at the stack
// limit left the core's busy flag set, and every breaker of the process refused every
// call as shut down (ESHUTDOWN), for good. Now the instance is dropped and every
// breaker passes calls through, and nothing that waited on it hangs — unless the
// instance was idle when the call threw (the stack ran out on the way in): then the
// throw goes on to the caller and the instance serves on. Each case runs in a child
// process: losing the instance is for the life of a realm.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { test } from 'node:test';

const require = createRequire(import.meta.url);
const pkgDir = dirname(require.resolve('fusewire/package.json'));

/** Runs `body` (an async function's body, with `fusewire` and `engine` in scope) in a child; returns its JSON result and stderr. */
function child(body) {
  const script = `
    const fusewire = require(${JSON.stringify(join(pkgDir, 'dist', 'index.cjs'))});
    const engine = require(${JSON.stringify(join(pkgDir, 'dist', 'cjs', 'engine.js'))});
    const { CircuitBreaker, Collapser } = fusewire;
    const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
    // Exits when done: a clearTimeout that ran out of stack inside Node can leave
    // Node's count of live timers up, and the process waiting for good.
    (async () => { ${body} })().then((v) => { console.log(JSON.stringify(v)); process.exit(0); }, (e) => { console.error(e); process.exit(3); });
  `;
  const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 120_000 });
  assert.equal(r.status, 0, `child failed (${r.status} ${r.signal ?? ''}):\n${r.stderr}`);
  return { out: JSON.parse(r.stdout.trim().split('\n').at(-1)), stderr: r.stderr };
}

test('a fire() at the stack limit loses the instance; every breaker then passes calls through', () => {
  const { out, stderr } = child(`
    // (A sync action: with an async one and a timeout, 2 runs in 10 never lost it in
    // 1 000 rounds once only a busy instance is lost.)
    const b = new CircuitBreaker((x) => x, { capacity: 2, timeout: false, volumeThreshold: 1e9 });
    // A pool of one with a queue: two calls wait for the slot when the instance goes.
    const slow = new CircuitBreaker((x) => new Promise((r) => setTimeout(() => r(x), 30)),
      { capacity: 1, fusewire: { bulkhead: { isolation: 'pool', max_queue: 10 } } });
    const waiting = [slow.fire('a'), slow.fire('b'), slow.fire('c')];
    // Calls at every depth down to the stack's end: some run out of stack inside the
    // instance, which is then lost (a few hundred rounds at most: each round ends
    // somewhere else).
    function deep() {
      try { deep(); } catch {}
      try { b.fire(1).catch(() => {}); } catch {}
    }
    let rounds = 0;
    let broken = false; // before: every call refused as shut down
    while (!engine.lost && !broken && rounds < 1000) {
      deep();
      rounds++;
      broken = await b.fire(0).then(() => false, (e) => e.code === 'ESHUTDOWN');
    }
    const lost = engine.lost;
    const queued = await Promise.all(waiting);
    const after = [];
    for (let i = 0; i < 100; i++) after.push(await b.fire(i));
    const fresh = new CircuitBreaker(async (x) => x * 2, { errorThresholdPercentage: 10 });
    const failing = new CircuitBreaker(async () => { throw new Error('down'); }, {});
    let failures = 0;
    for (let i = 0; i < 30; i++) await failing.fire().catch((e) => { if (e.message === 'down') failures++; });
    return { lost, broken, rounds, queued, after: after.reduce((a, v) => a + v, 0), fresh: await fresh.fire(21),
      failures, opened: failing.opened, code: await slow.fire('d') };
  `);
  assert.equal(out.lost, true, `the instance was lost (after ${out.rounds} rounds)`);
  assert.deepEqual(out.queued, ['a', 'b', 'c'], 'the calls queued in the instance ran');
  assert.equal(out.after, 4950, 'later calls get their own results (before: ESHUTDOWN)');
  assert.equal(out.fresh, 42, 'a breaker made after the loss works, unprotected');
  assert.equal(out.failures, 30, 'failures reach the caller; nothing opens (passed through)');
  assert.equal(out.opened, false);
  assert.equal(out.code, 'd');
  const told = stderr.split('\n').filter((l) => l.includes('fusewire: the WebAssembly instance failed'));
  assert.equal(told.length, 1, `told once:\n${stderr}`);
  assert.match(told[0], /RangeError: Maximum call stack size exceeded.*passes calls through unprotected/);
});

// Found by measuring what the loss above was: in 12 of 16 runs the instance was idle
// when it was given up — the stack had run out on the way into it, before it did
// anything. Such a throw is now thrown on, as from any call there.
test('a throw on the way into the instance, before it does anything, does not lose it', () => {
  const { out } = child(`
    const b = new CircuitBreaker(async (x) => x, { volumeThreshold: 2, errorThresholdPercentage: 50 });
    await b.fire(1);
    // An argument converted to a number on the way in, throwing as an exhausted stack does.
    const bad = { valueOf() { throw new RangeError('Maximum call stack size exceeded'); } };
    let thrown = '';
    try {
      engine.w.fw_next(bad);
    } catch (e) {
      thrown = e.message;
    }
    const lost = engine.lost;
    const failing = new CircuitBreaker(async () => { throw new Error('down'); }, { volumeThreshold: 2 });
    for (let i = 0; i < 3; i++) await failing.fire().catch(() => {});
    return { thrown, lost, ok: await b.fire(2), stats: b.stats.successes, opened: failing.opened };
  `);
  assert.equal(out.thrown, 'Maximum call stack size exceeded', 'thrown on to the caller');
  assert.equal(out.lost, false, 'before: lost, and every breaker passed calls through');
  assert.equal(out.ok, 2);
  assert.equal(out.stats, 2, 'still counting');
  assert.equal(out.opened, true, 'still protecting');
});

test('a real recursion loses the instance only where it was busy (its state maybe half-updated), and always then', () => {
  // Before: 6 of 10 such runs lost it idle (this breaker's), so 5 runs pass by chance 1 % of
  // the time; and 1 run in 15 (Node 24) left it busy and not lost: \`instanceof\` in the
  // guard threw at the stack's end before the state changed, and calls were refused as
  // shut down.
  let lostRuns = 0;
  for (let run = 0; run < 5; run++) {
    const { out } = child(`
      const b = new CircuitBreaker((x) => x, { capacity: 2, timeout: false, volumeThreshold: 1e9 });
      function deep() {
        try { deep(); } catch {}
        try { b.fire(1).catch(() => {}); } catch {}
      }
      let rounds = 0;
      let shut = 0;
      while (!engine.lost && !shut && rounds < 1000) {
        deep();
        rounds++;
        await b.fire(0).catch((e) => { if (e.code === 'ESHUTDOWN') shut++; });
      }
      // Nothing reaches the instance once lost: its flag is as the throw left it.
      return { lost: engine.lost, busy: engine.busy(), rounds, shut };
    `);
    assert.equal(out.shut, 0, `run ${run}: a call refused as shut down (after ${out.rounds} rounds)`);
    assert.equal(out.busy, out.lost, `run ${run}: ${out.lost ? 'lost while idle' : 'busy and not lost'}, after ${out.rounds} rounds`);
    if (out.lost) lostRuns++;
  }
  // Else the rule above was never put to the test.
  assert.ok(lostRuns > 0, 'no run lost the instance');
});

test('what waits on the instance when it is lost settles: calls in flight, queued, coalesced, collapsed', () => {
  const { out } = child(`
    const results = {};
    const track = (name, p) => p.then((v) => { results[name] = v; }, (e) => { results[name] = 'error: ' + e.message; });
    let ran = 0;
    const slow = new CircuitBreaker((x) => { ran++; return new Promise((r) => setTimeout(() => r(x), 20)); },
      { capacity: 1, fusewire: { bulkhead: { isolation: 'pool', max_queue: 10 } } });
    track('running', slow.fire('r'));
    track('queued', slow.fire('q'));
    // Coalescing: one leader, two followers waiting for it.
    let led = 0;
    const co = new CircuitBreaker((k) => { led++; return new Promise((r) => setTimeout(() => r('v' + k), 20)); },
      { coalesce: true });
    track('leader', co.fire(1));
    track('follower1', co.fire(1));
    track('follower2', co.fire(1));
    // A collapser: two loads waiting for their window, a third joining a load of its key.
    const batches = [];
    const col = new Collapser(async (keys, ctx) => { batches.push(ctx === undefined ? [...keys] : [ctx, ...keys]); return keys.map((k) => k * 10); }, { windowMs: 50 });
    track('load1', col.load(1));
    track('load2', col.load(2));
    track('load2again', col.load(2));
    // A request loader's load waiting for its window.
    const req = col.forRequest('req');
    track('reqLoad', req.load(5));
    // A call that fails after the loss: its caller gets its error.
    const failing = new CircuitBreaker(() => new Promise((_, j) => setTimeout(() => j(new Error('late')), 20)),
      { capacity: 1, fusewire: { bulkhead: { isolation: 'pool', max_queue: 10 } } });
    track('failInFlight', failing.fire());
    track('failQueued', failing.fire());
    engine.lose(new Error('injected'));
    await sleep(200);
    // After: a collapser batches per tick (one batch for these three, uncached).
    track('after1', col.load(3));
    track('after2', col.load(4));
    track('after3', col.load(3));
    // A request loader made after the loss batches apart too; its shutdown is a no-op.
    const late = col.forRequest('late');
    track('lateLoad', late.load(6));
    track('reqAfter', req.load(7));
    late.shutdown();
    await sleep(50);
    return { results, ran, led, batches, stats: slow.stats.fires };
  `);
  assert.deepEqual(out.results, {
    running: 'r', queued: 'q', leader: 'v1', follower1: 'v1', follower2: 'v1',
    load1: 10, load2: 20, load2again: 20, failInFlight: 'error: late', failQueued: 'error: late',
    after1: 30, after2: 40, after3: 30, reqLoad: 50, lateLoad: 60, reqAfter: 70,
  });
  assert.equal(out.ran, 2);
  assert.equal(out.led, 1, 'the followers shared their leader\'s call');
  assert.deepEqual(out.batches, [[1, 2], ['req', 5], [3, 4, 3], ['late', 6], ['req', 7]],
    'the waiting loads went as one batch per loader; later ones batch per tick and loader');
});

test('a breaker made after the loss, its events, and its getters do not throw; the loss is a metric', () => {
  const { out } = child(`
    const client = require(${JSON.stringify(require.resolve('prom-client'))});
    const { register } = require(${JSON.stringify(join(pkgDir, 'dist', 'prometheus.cjs'))});
    register({ client });
    const before = await client.register.getSingleMetricAsString('fusewire_instance_lost');
    engine.lose(new Error('injected'));
    await sleep(0);
    const metric = await client.register.getSingleMetricAsString('fusewire_instance_lost');
    const b = new CircuitBreaker(async (x) => x, { name: 'after', cache: true, coalesce: true, timeout: 50 });
    const seen = [];
    for (const ev of ['fire', 'success', 'failure', 'reject', 'open']) b.on(ev, () => seen.push(ev));
    const v = await b.fire(7);
    const hung = new CircuitBreaker(() => new Promise(() => {}), { timeout: 10 });
    const raced = await Promise.race([hung.fire().then(() => 'settled', () => 'rejected'), sleep(60).then(() => 'still running')]);
    b.open();
    const whileOpen = await b.fire(8);
    return { v, whileOpen, seen, stats: b.stats.fires, json: typeof JSON.stringify(b.toJSON()), status: b.status.window.length >= 0,
      closed: b.closed, raced, before, metric };
  `);
  assert.match(out.before, /^fusewire_instance_lost 0$/m);
  assert.match(out.metric, /^fusewire_instance_lost 1$/m);
  assert.equal(out.v, 7);
  assert.equal(out.whileOpen, 8, 'nothing refuses: the breaker holds no state');
  assert.deepEqual(out.seen, ['fire', 'fire']);
  assert.equal(out.stats, 0, 'nothing is counted');
  assert.equal(out.raced, 'still running', 'no timeouts either (documented)');
});

// Found by review: lost anywhere but in fire() or load() (a getter at the stack's end),
// nothing released what waited on the instance until some other fire().
test('lost in a getter at the stack limit: what waited is released without another call', () => {
  const { out } = child(`
    const within = (p, ms) => Promise.race([p.then((v) => v, (e) => 'error: ' + e.message), sleep(ms).then(() => 'HUNG')]);
    const pool = new CircuitBreaker((x) => new Promise((r) => setTimeout(() => r(x), 30)),
      { capacity: 1, fusewire: { bulkhead: { isolation: 'pool', max_queue: 10 } } });
    const running = pool.fire('running');
    const queued = pool.fire('queued');
    const co = new CircuitBreaker((k) => new Promise((r) => setTimeout(() => r('v' + k), 30)), { coalesce: true });
    const leader = co.fire(1);
    const follower = co.fire(1);
    const col = new Collapser(async (keys) => keys.map((k) => k * 10), { windowMs: 50 });
    const load = col.load(1);
    const probe = new CircuitBreaker(async () => 1);
    function deep() { try { deep(); } catch {} try { probe.toJSON(); } catch {} }
    let rounds = 0;
    while (!engine.lost && rounds < 1000) { deep(); rounds++; }
    return { lost: engine.lost, got: await Promise.all([within(running, 1000), within(queued, 1000),
      within(leader, 1000), within(follower, 1000), within(load, 1000)]) };
  `);
  assert.equal(out.lost, true);
  assert.deepEqual(out.got, ['running', 'queued', 'v1', 'v1', 10]);
});

// Found by review: one breaker's queued call whose action returned a thenable with a
// throwing `then` stopped the release of every other breaker; calls admitted before
// the loss never timed out; the exported counters dropped to 0.
test('after the loss: one bad action does not hold the others, admitted calls keep their timeout, counters stay', () => {
  const { out } = child(`
    const within = (p, ms) => Promise.race([p.then((v) => v, (e) => 'error: ' + (e.code ?? e.message)), sleep(ms).then(() => 'HUNG')]);
    const client = require(${JSON.stringify(require.resolve('prom-client'))});
    require(${JSON.stringify(join(pkgDir, 'dist', 'prometheus.cjs'))}).register({ client });
    const pool = { capacity: 1, fusewire: { bulkhead: { isolation: 'pool', max_queue: 10 } } };
    let n = 0;
    const a = new CircuitBreaker(() => (n++ === 0 ? new Promise((r) => setTimeout(() => r('a0'), 30))
      : { then() { throw new Error('bad thenable'); } }), { ...pool, name: 'a' });
    const b = new CircuitBreaker((x) => new Promise((r) => setTimeout(() => r(x), 30)), pool);
    const hung = new CircuitBreaker(() => new Promise(() => {}), { timeout: 100, name: 'hung', volumeThreshold: 5 });
    await hung.fire().catch(() => {});
    await client.register.metrics(); // a scrape before the loss
    const a0 = a.fire(); const a1 = a.fire();
    const b0 = b.fire('b0'); const b1 = b.fire('b1');
    const h = hung.fire();
    engine.lose(new Error('injected'));
    const got = await Promise.all([within(a0, 500), within(a1, 500), within(b0, 500), within(b1, 500), within(h, 500)]);
    const text = await client.register.metrics();
    const line = (name) => text.split('\\n').find((l) => l.startsWith(name + ' '));
    return { got, timeouts: line('fusewire_hung_timeout'), state: line('fusewire_hung_breaker_state') };
  `);
  assert.deepEqual(out.got, ['a0', 'error: bad thenable', 'b0', 'b1', 'error: ETIMEDOUT']);
  assert.equal(out.timeouts, 'fusewire_hung_timeout 1', 'the counter keeps its value at the last scrape');
  assert.equal(out.state, 'fusewire_hung_breaker_state 0', 'nothing refuses');
});
