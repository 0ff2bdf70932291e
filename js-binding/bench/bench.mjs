// fusewire vs opossum vs cockatiel (and Collapser vs DataLoader), measured in one run
// on the same machine (`make bench`; numbers go into js-binding/README.md).
//
//   success path   ns per `await breaker.fire()` of an action that resolves at once
//   failure path   ns per failing call with 1k / 5k / 20k failures in the window
//   stats          one `stats` read with 20k calls in the window
//   Collapser      per-load overhead (one load at a time) and 10 000 concurrent loads
//   memory         bytes per breaker (JS heap + wasm memory), and µs to create one
//                  while the others stay alive
//   size           the .wasm (raw, gzipped) and the npm tarball
//
// Every library runs with its defaults except where a row says otherwise; times are
// medians of several rounds. Run with Node >= 22 (opossum 10 and cockatiel 4 need it).
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..');
const require = createRequire(import.meta.url);
const fusewire = require(join(root, 'dist', 'index.cjs'));
const engine = require(join(root, 'dist', 'cjs', 'engine.js'));
const Opossum = require('opossum');
const cockatiel = require('cockatiel');
const DataLoader = require('dataloader');

const { CircuitBreaker, Collapser } = fusewire;
const quick = process.argv.includes('--quick');
const rows = [];
const gc = globalThis.gc ?? (() => {});

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

/** ns per call of `fn` (async), `n` calls per round, median of `rounds`. */
async function time(fn, n, rounds = 5) {
  for (let i = 0; i < Math.min(n, 2000); i++) await fn(i); // warm-up
  const per = [];
  for (let r = 0; r < rounds; r++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < n; i++) await fn(i);
    per.push(Number(process.hrtime.bigint() - t0) / n);
  }
  return median(per);
}

/**
 * Median ns per call of each of `fns` (name → function), `n` calls a round, the
 * libraries' rounds interleaved (one after another in each of `rounds` rounds), so a
 * machine slowing down mid-run slows them all (timed back to back, they drifted ±30 %).
 */
async function timeAll(fns, n, rounds = 5) {
  const entries = Object.entries(fns);
  for (const [, fn] of entries) for (let i = 0; i < Math.min(n, 2000); i++) await fn(i); // warm-up
  const per = Object.fromEntries(entries.map(([k]) => [k, []]));
  for (let r = 0; r < rounds; r++) {
    for (const [k, fn] of entries) {
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < n; i++) await fn(i);
      per[k].push(Number(process.hrtime.bigint() - t0) / n);
    }
  }
  return Object.fromEntries(entries.map(([k]) => [k, median(per[k])]));
}

function fmt(ns) {
  return ns >= 10_000 ? `${(ns / 1000).toFixed(1)} µs` : `${ns.toFixed(0)} ns`;
}

function row(what, values, note = '') {
  rows.push({ what, values, note });
  const cells = Object.entries(values).map(([k, v]) => `${k} ${typeof v === 'number' ? fmt(v) : v}`);
  console.log(`${what.padEnd(44)} ${cells.join('   ')}${note ? `   (${note})` : ''}`);
}

const ok = async () => 1;
// One error object for every failure: `new Error()` (its stack trace) costs more than
// any breaker here and would hide the difference.
const boom = new Error('x');
const fail = async () => {
  throw boom;
};

// ---- success path --------------------------------------------------------------
async function successPath() {
  const N = quick ? 20_000 : 200_000;
  const fw = new CircuitBreaker(ok);
  const op = new Opossum(ok);
  const ck = cockatiel.circuitBreaker(cockatiel.handleAll, {
    halfOpenAfter: 10_000,
    breaker: new cockatiel.SamplingBreaker({ threshold: 0.5, duration: 10_000 }),
  });
  const { f, o, c, base } = await timeAll(
    { f: () => fw.fire(), o: () => op.fire(), c: () => ck.execute(ok), base: () => ok() }, N);
  row('success path, ns/call', { fusewire: f, opossum: o, cockatiel: c, 'bare await': base },
    `fusewire ${(o / f).toFixed(1)}× faster than opossum, ${(c / f).toFixed(2)}× vs cockatiel`);
  // opossum's default 10 s timeout arms and clears a timer per call; fusewire keeps one
  // deadline queue. Without a timeout neither does: the comparison without that cost.
  const fwNoTimeout = new CircuitBreaker(ok, { timeout: false });
  const opNoTimeout = new Opossum(ok, { timeout: false });
  const { f2, o2 } = await timeAll({ f2: () => fwNoTimeout.fire(), o2: () => opNoTimeout.fire() }, N);
  row('success path, timeout: false', { fusewire: f2, opossum: o2 },
    `fusewire ${(o2 / f2).toFixed(2)}× opossum's speed`);
  for (const b of [fw, fwNoTimeout]) b.shutdown();
  for (const b of [op, opNoTimeout]) b.shutdown();
  return { f, o, c };
}

// ---- failure path ------------------------------------------------------------------
async function failurePath() {
  const out = {};
  for (const inWindow of [1_000, 5_000, 20_000]) {
    // A breaker that never opens (100 % is not above 100 %), a 60 s window.
    const opts = { errorThresholdPercentage: 100, rollingCountTimeout: 60_000, rollingCountBuckets: 10 };
    const fw = new CircuitBreaker(fail, opts);
    const op = new Opossum(fail, opts);
    const ck = cockatiel.circuitBreaker(cockatiel.handleAll, {
      halfOpenAfter: 10_000,
      breaker: new cockatiel.SamplingBreaker({ threshold: 0.5, duration: 60_000, minimumRps: 1e12 }),
    });
    const swallow = (p) => p.then(() => {}, () => {});
    for (let i = 0; i < inWindow; i++) {
      await swallow(fw.fire());
      await swallow(op.fire());
      await swallow(ck.execute(fail));
    }
    // The same few calls for each (opossum's cost grows with every failure): the
    // window holds about `inWindow` failures for all three throughout.
    const n = inWindow >= 20_000 ? (quick ? 20 : 100) : quick ? 50 : 300;
    const { f, o, c } = await timeAll({
      f: () => swallow(fw.fire()), o: () => swallow(op.fire()), c: () => swallow(ck.execute(fail)),
    }, n, 3);
    row(`failure path, ${inWindow / 1000}k failures in the window`, { fusewire: f, opossum: o, cockatiel: c },
      `fusewire ${(o / f).toFixed(0)}× faster than opossum`);
    if (inWindow === 20_000) {
      // opossum's cost is its latency percentiles (it sorts every latency of the
      // window on each failure): without them.
      const op2 = new Opossum(fail, { ...opts, rollingPercentilesEnabled: false });
      for (let i = 0; i < inWindow; i++) await swallow(op2.fire());
      const { o2 } = await timeAll({ o2: () => swallow(op2.fire()) }, n, 3);
      row('failure path, 20k, opossum without percentiles', { opossum: o2 }, `fusewire ${(o2 / f).toFixed(1)}× faster`);
      out.noPercentiles = o2;
      op2.shutdown();
    }
    out[inWindow] = { f, o, c };
    if (inWindow === 20_000) {
      const sf = await time(async () => fw.stats, quick ? 200 : 2_000, 3);
      const so = await time(async () => op.stats, quick ? 5 : 30, 3);
      row('stats read, 20k calls in the window', { fusewire: sf, opossum: so },
        `${(so / sf).toFixed(0)}× faster`);
      out.stats = { sf, so };
    }
    fw.shutdown();
    op.shutdown();
  }
  return out;
}

// ---- Collapser vs DataLoader -----------------------------------------------------------
async function collapsing() {
  const batchFn = async (keys) => keys.map((k) => k * 2);
  // Per load: one load at a time (each is its own batch).
  const N = quick ? 5_000 : 30_000;
  const col = new Collapser(batchFn, { windowMs: 0, cache: false });
  const dl = new DataLoader(batchFn, { cache: false });
  const c1 = await time((i) => col.load(i), N, 3);
  const d1 = await time((i) => dl.load(i), N, 3);
  row('Collapser per load (one at a time)', { Collapser: c1, DataLoader: d1 });
  // 10 000 concurrent loads, batched.
  const many = async (load) => {
    const keys = Array.from({ length: 10_000 }, (_, i) => i);
    await Promise.all(keys.map(load));
  };
  const cc = new Collapser(batchFn, { windowMs: 0, maxBatchSize: 10_000, cacheSize: 100_000 });
  const dc = new DataLoader(batchFn);
  let r = 0;
  const c2 = await time(() => many((k) => cc.load(k + (r++ * 1e6))), quick ? 3 : 10, 3);
  const d2 = await time(() => many((k) => dc.load(k + (r++ * 1e6))), quick ? 3 : 10, 3);
  row('10 000 concurrent loads, batched (cache on)', { Collapser: c2, DataLoader: d2 },
    `${(c2 / 10_000).toFixed(0)} vs ${(d2 / 10_000).toFixed(0)} ns per load`);
  // A loader per request (DataLoader's GraphQL pattern): make it, load three keys (one
  // repeated) in one batch, end the request. `forRequest()` of one long-lived
  // Collapser, a new Collapser per request, a new DataLoader per request.
  const shared = new Collapser(batchFn, { windowMs: 0 });
  const request = async (l) => {
    await Promise.all([l.load(1), l.load(2), l.load(1)]);
    l.shutdown?.();
  };
  const M = quick ? 2_000 : 10_000;
  const c3 = await time(() => request(shared.forRequest()), M, 3);
  const n3 = await time(() => request(new Collapser(batchFn, { windowMs: 0 })), M / 5, 3);
  const d3 = await time(() => request(new DataLoader(batchFn)), M, 3);
  row('a loader per request (3 loads, 1 batch)', { forRequest: c3, 'new Collapser': n3, DataLoader: d3 });
  // Making one alone (and ending it).
  const c4 = await time(() => shared.forRequest().shutdown(), M * 5, 3);
  const n4 = await time(() => new Collapser(batchFn, { windowMs: 0 }).shutdown(), M / 5, 3);
  const d4 = await time(() => new DataLoader(batchFn), M * 5, 3);
  row('making a loader (and ending it)', { forRequest: c4, 'new Collapser': n4, DataLoader: d4 });
  shared.shutdown();
  col.shutdown();
  cc.shutdown();
  return { c1, d1, c2, d2, c3, n3, d3, c4, n4, d4 };
}

// ---- memory -------------------------------------------------------------------------------
function heap() {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

async function memory() {
  const n = quick ? 1_000 : 10_000;
  const keep = [];
  const h0 = heap();
  const w0 = engine.w.memory.buffer.byteLength;
  let t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) keep.push(new CircuitBreaker(ok, { name: `b${i}` }));
  const fwCreate = Number(process.hrtime.bigint() - t0) / n;
  await Promise.all(keep.map((b) => b.fire()));
  const fwHeap = (heap() - h0) / n;
  const fwWasm = (engine.w.memory.buffer.byteLength - w0) / n;
  for (const b of keep) b.shutdown();
  keep.length = 0;
  const h1 = heap();
  t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) keep.push(new Opossum(ok, { name: `b${i}` }));
  const opCreate = Number(process.hrtime.bigint() - t0) / n;
  await Promise.all(keep.map((b) => b.fire()));
  const opHeap = (heap() - h1) / n;
  for (const b of keep) b.shutdown();
  keep.length = 0;
  const h2 = heap();
  t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) {
    keep.push(cockatiel.circuitBreaker(cockatiel.handleAll, {
      halfOpenAfter: 10_000,
      breaker: new cockatiel.SamplingBreaker({ threshold: 0.5, duration: 10_000 }),
    }));
  }
  const ckCreate = Number(process.hrtime.bigint() - t0) / n;
  await Promise.all(keep.map((b) => b.execute(ok)));
  const ckHeap = (heap() - h2) / n;
  keep.length = 0;
  const kb = (b) => `${(b / 1024).toFixed(1)} KiB`;
  row('memory per breaker', {
    fusewire: `${kb(fwHeap + fwWasm)} (heap ${kb(fwHeap)} + wasm ${kb(fwWasm)})`,
    opossum: kb(opHeap),
    cockatiel: kb(ckHeap),
  }, `${n} breakers, after one call each${globalThis.gc ? '' : '; run with --expose-gc for steadier numbers'}`);
  row('create a breaker, the others alive', { fusewire: fwCreate, opossum: opCreate, cockatiel: ckCreate },
    `mean over ${n}`);
  return { fwHeap, fwWasm, opHeap, ckHeap, fwCreate, opCreate, ckCreate };
}

// ---- package size --------------------------------------------------------------------------
function size() {
  const wasm = readFileSync(join(root, 'dist', 'fusewire.wasm'));
  const gz = gzipSync(wasm, { level: 9 }).length;
  const tgz = readdirSync(root).find((f) => /^fusewire-.*\.tgz$/.test(f));
  const tarball = tgz ? statSync(join(root, tgz)).size : undefined;
  row('package size', {
    '.wasm': `${wasm.length} B`,
    '.wasm gzipped': `${gz} B`,
    tarball: tarball === undefined ? '(run npm pack)' : `${tarball} B`,
  }, 'target: .wasm gzipped ≤ 60 KB');
  return { wasm: wasm.length, gz, tarball };
}

console.log(`fusewire bench on Node ${process.version}${quick ? ' (quick)' : ''}\n`);
// Memory first, while the wasm memory holds nothing else.
const mem = await memory();
const results = {
  success: await successPath(),
  failure: await failurePath(),
  collapsing: await collapsing(),
  memory: mem,
  size: size(),
};
if (process.argv.includes('--json')) console.log(JSON.stringify(results));
