// The wasm instance's memory: grown in steps, so that many breakers alive do not make
// each new one pay for all of them. (Every `memory.grow` replaces the JS ArrayBuffer,
// and V8 answers with a collection of the whole JS heap: grown page by page, the
// 40 000th breaker took 1.5 ms to create, the first 5 000 73 µs each.)
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';

import CircuitBreaker from 'fusewire';

const require = createRequire(import.meta.url);
const pkgDir = dirname(require.resolve('fusewire/package.json'));
const engine = require(join(pkgDir, 'dist', 'cjs', 'engine.js'));

// The views over the memory are made again only when a grow has emptied them (reading
// `memory.buffer` per call cost a cache hit 12 ns): keys written after a grow are the
// keys asked for.
test('cache keys written after the memory grew are the keys asked for', async () => {
  let runs = 0;
  const b = new CircuitBreaker(async (k) => {
    runs++;
    return `v${k}`;
  }, { cache: true });
  assert.equal(await b.fire('a'), 'va');
  const before = engine.bytes().length;
  // A key of 4 M characters (12 MB of scratch): the memory grows, by whatever the tests
  // before made it.
  const big = 'x'.repeat(Math.ceil(engine.bytes().length / 3) + 1_000_000);
  assert.equal(await b.fire(big), `v${big}`);
  assert.ok(engine.bytes().length > before, 'the memory grew');
  // (The big key itself runs uncached: over the cache's 64 KiB key limit.)
  for (const k of ['a', 'b', 'c', 'a', 'b', 'c']) assert.equal(await b.fire(k), `v${k}`);
  assert.equal(runs, 4, 'a, the big key, b and c ran once each; the rest were hits');
  assert.equal(b.stats.cacheHits, 4);
  b.shutdown();
});

test('wasm memory grows by at least an eighth of itself at a time', () => {
  const keep = [];
  let grows = 0;
  let size = engine.bytes().length;
  const start = size;
  for (let i = 0; i < 3000; i++) {
    keep.push(new CircuitBreaker(async () => 1, { name: `memory-${i}` }));
    const now = engine.bytes().length;
    if (now !== size) {
      grows++;
      assert.ok(now - size >= size / 8 - 65536, `grew ${now - size} B at ${size} B`);
      size = now;
    }
  }
  const grown = size - start;
  assert.ok(grown > 3000 * 4096, `3 000 breakers take wasm memory (${grown} B)`);
  // Page by page this was one grow per 64 KiB (≈ 450 here); in steps of ⅛, a few dozen.
  assert.ok(grows <= 40, `${grows} grows for ${grown} B`);
  for (const b of keep) b.shutdown();
});

// Found by review: past 4 GiB an allocation failed, the instance trapped, and every
// breaker of the process was dead for good (ESHUTDOWN); the default cache (10 M
// entries) could get there. Growth past the limit (tests lower it) now refuses what
// would keep memory — a new breaker, a cache entry, a collapser item — and the
// instance serves everything else.
test('wasm memory past its limit: refusals, never a trap', async () => {
  const mib = () => engine.bytes().length / 2 ** 20;
  const bystander = new CircuitBreaker(async (x) => x, { name: 'bystander' });
  let runs = 0;
  const cached = new CircuitBreaker(async (k) => {
    runs++;
    return k.length;
  }, { name: 'filler', cache: true, cacheGetKey: (k) => k });
  engine.w.fw_memory_limit(Math.ceil(mib()) + 8);
  try {
    const pad = 'f'.repeat(60_000);
    let refused;
    for (let i = 0; i < 2_000 && refused === undefined; i++) {
      await cached.fire(`${i}${pad}`);
      try {
        new CircuitBreaker(async () => 1).shutdown();
      } catch (e) {
        refused = e;
      }
    }
    assert.ok(refused instanceof RangeError, `${refused}`);
    assert.equal(refused.message, 'fusewire: wasm memory is full');
    // Cache entries are refused: the call runs each time.
    const before = runs;
    assert.equal(await cached.fire(`again${pad}`), 60_005);
    assert.equal(await cached.fire(`again${pad}`), 60_005);
    assert.equal(runs, before + 2, 'not cached while memory is low');
    assert.equal(await bystander.fire(7), 7, 'other breakers serve on');
    // Memory given back lifts the mark: the cleared cache's keys (≈ 60 KB each).
    cached.clearCache();
    new CircuitBreaker(async () => 1).shutdown();
    assert.equal(await cached.fire(`again${pad}`), 60_005);
    assert.equal(await cached.fire(`again${pad}`), 60_005);
    assert.equal(runs, before + 3, 'cached again');
  } finally {
    engine.w.fw_memory_limit(4096 - 128);
    cached.shutdown();
    bystander.shutdown();
  }
});

test('a freeing that returns little does not lift the low mark (found by review: an empty cache cleared or one breaker freed per insert grew memory into the reserve until it trapped)', async () => {
  const mib = () => engine.bytes().length / 2 ** 20;
  const other = new CircuitBreaker(async (x) => x, { name: 'empty cache', cache: true });
  const filler = new CircuitBreaker((k) => k.length, { name: 'filler', cache: true, cacheGetKey: (k) => k });
  const limit = Math.ceil(mib()) + 8;
  engine.w.fw_memory_limit(limit);
  try {
    const pad = 'f'.repeat(60_000);
    let top = 0;
    let refused = 0;
    for (let i = 0; i < 1_500; i++) {
      await filler.fire(`${i}${pad}`);
      other.clearCache(); // frees nothing
      try {
        new CircuitBreaker(async () => 1, { name: `b${i}` }).shutdown(); // frees one breaker
      } catch (e) {
        assert.equal(e.message, 'fusewire: wasm memory is full');
        refused++;
      }
      top = Math.max(top, mib());
    }
    assert.ok(refused > 0, 'memory reached its limit');
    assert.ok(top < limit + 16, `memory stopped near its limit (${limit} MiB): ${top} MiB`);
  } finally {
    engine.w.fw_memory_limit(4096 - 128);
    filler.shutdown();
    other.shutdown();
  }
});


test('clearCache() gives the keys\' memory back to the instance (found by review: the cleared slots kept their key buffers until the breaker was freed)', async () => {
  const pad = 'k'.repeat(2000);
  const fill = async (b, tag) => {
    for (let i = 0; i < 20_000; i++) await b.fire(`${tag}${i}${pad}`);
  };
  const a = new CircuitBreaker(async () => 1, { cache: true, name: 'clear-a' });
  await fill(a, 'a');
  assert.equal(a.stats.cacheMisses, 20_000);
  a.clearCache();
  const before = engine.bytes().length;
  // 40 MB of keys: without the memory the clear gave back, the instance grows by that.
  const b = new CircuitBreaker(async () => 1, { cache: true, name: 'clear-b' });
  await fill(b, 'b');
  const grown = engine.bytes().length - before;
  assert.ok(grown < 16 << 20, `grew ${grown} B for a second cache of the same size`);
  assert.equal(await a.fire(`a0${pad}`), 1);
  assert.equal(a.stats.cacheHits, 0, 'the cleared entries are gone');
  a.shutdown();
  b.shutdown();
});

test('breakers dropped without shutdown() are collected with their timers, also with a snapshot listener (found by a soak review: each left a 24.8-day timer, ≈ 285 B, and one listening for snapshots was never collected)', () => {
  const script = `
    const { CircuitBreaker } = require(${JSON.stringify(require.resolve('fusewire'))});
    const engine = require(${JSON.stringify(join(pkgDir, 'dist', 'cjs', 'engine.js'))});
    const N = 20000;
    let finalized = 0;
    const fr = new FinalizationRegistry(() => { finalized++; });
    const heap = () => { gc(); gc(); return process.memoryUsage().heapUsed; };
    (async () => {
      // Warm up the paths (code, caches) before the baseline.
      for (let i = 0; i < 1000; i++) { const b = new CircuitBreaker(async () => 1, { timeout: false }); await b.fire(); b.shutdown(); }
      const before = heap();
      for (let i = 0; i < N; i++) {
        const b = new CircuitBreaker(async () => 1, { timeout: false });
        if (i % 2 === 0) b.on('snapshot', () => {});
        await b.fire();
        fr.register(b, i);
      }
      // Finalizers run as tasks after a collection: ours and fusewire's (which frees
      // the core breaker) in any order.
      for (let round = 0; round < 50 && (finalized < N || engine.w.fw_live() > 0); round++) {
        heap();
        await new Promise((r) => setImmediate(r));
      }
      const grown = heap() - before;
      console.log(JSON.stringify({ finalized, live: engine.w.fw_live(), perBreaker: Math.round(grown / N) }));
    })();
  `;
  const r = spawnSync(process.execPath, ['--expose-gc', '-e', script], { encoding: 'utf8', timeout: 120_000 });
  assert.equal(r.status, 0, r.stderr);
  const { finalized, live, perBreaker } = JSON.parse(r.stdout.trim());
  assert.equal(finalized, 20000, 'every dropped breaker collected');
  assert.equal(live, 0, 'their core breakers freed');
  assert.ok(perBreaker < 50, `no timer left behind: ${perBreaker} B of heap per dropped breaker`);
});

test('shared breakers dropped without shutdown() are collected once idle and written, not at their key\'s idle expiry (found by a lifecycle review: 5 000 lived 10 minutes, and Redis ones read it every second)', () => {
  const script = `
    const { CircuitBreaker, SharedStore } = require(${JSON.stringify(require.resolve('fusewire'))});
    const engine = require(${JSON.stringify(join(pkgDir, 'dist', 'cjs', 'engine.js'))});
    const N = 2000;
    let finalized = 0;
    const fr = new FinalizationRegistry(() => { finalized++; });
    const store = new SharedStore();
    // Made in a function of its own: a suspended async frame may keep the last
    // iteration's value in a register (Node 18 kept one of 2 000).
    async function drop(i) {
      const b = new CircuitBreaker(async () => 1, { name: 'users', shared: { store, flush_ms: 50, sync_ms: 50 } });
      fr.register(b, i);
      await b.fire();
    }
    (async () => {
      for (let i = 0; i < N; i++) await drop(i);
      // A few flush periods, with collections: each one's outcome is written, then it goes.
      const t0 = Date.now();
      while (Date.now() - t0 < 5000 && (finalized < N || engine.w.fw_live() > 0)) {
        gc();
        await new Promise((r) => setTimeout(r, 100));
      }
      const kept = new CircuitBreaker(async () => 1, { name: 'users', shared: { store } });
      console.log(JSON.stringify({ finalized, live: engine.w.fw_live(), fires: kept.stats.fires }));
      kept.shutdown();
    })();
  `;
  const r = spawnSync(process.execPath, ['--expose-gc', '-e', script], { encoding: 'utf8', timeout: 120_000 });
  assert.equal(r.status, 0, r.stderr);
  const { finalized, live, fires } = JSON.parse(r.stdout.trim());
  assert.equal(finalized, 2000, 'every dropped shared breaker collected within 5 s');
  assert.equal(live, 1, 'their core breakers freed (the one made to read the store lives)');
  assert.equal(fires, 2000, 'every outcome was written to the store before its breaker went');
});

test('a dropped shared breaker holding bulkhead slots is not collected until it gives them back (found by review: collected with a reserve, it kept 8 of 40 slots from the others until lease_ttl_ms)', () => {
  const script = `
    const { CircuitBreaker, SharedStore } = require(${JSON.stringify(require.resolve('fusewire'))});
    const store = new SharedStore();
    const opts = { name: 'r', capacity: 40,
      shared: { store, flush_ms: 200, sync_ms: 50, heartbeat_ms: 5000, lease_ttl_ms: 30000 } };
    (async () => {
      for (let i = 0; i < 40; i++) await new CircuitBreaker(async () => 1, opts).fire();
      // Collections before the reserves go back (at flush_ms), then well past it.
      for (let i = 0; i < 3; i++) { gc(); await new Promise((r) => setImmediate(r)); }
      await new Promise((r) => setTimeout(r, 20)); gc();
      await new Promise((r) => setTimeout(r, 1000));
      const k = new CircuitBreaker(() => new Promise((r) => setTimeout(r, 100)), opts);
      const res = await Promise.allSettled(Array.from({ length: 40 }, () => k.fire()));
      console.log(JSON.stringify({ refused: res.filter((x) => x.status === 'rejected').length }));
      k.shutdown();
    })();
  `;
  const r = spawnSync(process.execPath, ['--expose-gc', '-e', script], { encoding: 'utf8', timeout: 120_000 });
  assert.equal(r.status, 0, r.stderr);
  assert.deepEqual(JSON.parse(r.stdout.trim()), { refused: 0 }, '40 calls under a capacity of 40, the dropped breakers gone');
});
