// fusewire/redis benchmark (`make bench` runs it after bench.mjs; or `node bench/redis.mjs`):
//   fire cost      the added cost per `fire()` (success path) of a RedisStore breaker
//                  over a local one: the core's extra work in the two wasm calls of a
//                  fire, measured directly, over the whole `await fire()` of a local
//                  breaker; the whole-call A/B beside it, with its A/A control
//   sync CPU       what the syncs cost the process at the defaults (CPU while idle)
//   syncs/s        Redis ops per second of one process at the default intervals
//                  (sync_ms 1000, flush_ms 1000), under load and idle
//   fleet          Redis ops per second for a simulated 100-process fleet (100
//                  breakers of one name, each its own owner/store, 20 calls/s each)
//                  against one local redis-server (INFO commandstats)
// Starts its own redis-server on a free port (Debian's redis-server must be installed).
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(import.meta.url);
const { CircuitBreaker } = require(join(root, 'dist', 'index.cjs'));
const { RedisStore } = require(join(root, 'dist', 'redis.cjs'));
const engine = require(join(root, 'dist', 'cjs', 'engine.js'));
const { now } = require(join(root, 'dist', 'cjs', 'clock.js'));
const { Redis } = require('ioredis');
const quick = process.argv.includes('--quick');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const port = await new Promise((r) => {
  const s = createServer().listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => r(p)); });
});
const server = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
await sleep(300);
const client = new Redis({ port });
const admin = new Redis({ port });

// A loop of `await fire()` on settled promises never yields to the event loop, so
// Redis answers would wait for its end: the store's first read would never land and
// the shared breaker would be measured without its view (the degraded path). Each
// round therefore starts after a turn of the event loop, as a service's calls
// interleave with its I/O.
const turn = () => new Promise((r) => setImmediate(r));

const action = async (x) => x;
const pct = (x) => `${((x - 1) * 100).toFixed(1)} %`;
const store = new RedisStore({ client });
const shared = new CircuitBreaker(action, { name: 'bench-redis', shared: { store } });
const local = new CircuitBreaker(action, { name: 'bench-local' });
const control = new CircuitBreaker(action, { name: 'bench-local-2' });
for (let i = 0; i < 3000; i++) {
  await shared.fire(i);
  await local.fire(i);
  await control.fire(i);
}
await sleep(50); // the store's first answers land: the Redis breaker decides from its view

// 1. Where the added cost lives. `fire` runs the same JavaScript for both kinds of
// breaker: the store is driven only when a wasm call returns a flag asking for it,
// which a settled view does not raise (counted below). What differs is the core's
// work inside the two wasm calls of a fire (`fw_start`, `fw_complete`): view
// freshness, the refresh check, the shared delta. That is measured directly, through
// the exports `fire` calls, with the wrapper's clock reads, in many short interleaved
// rounds in rotating order, against two local breakers (the second one is an A/A
// control showing the method's own bias).
let flagged = 0;
let pairsRun = 0;
function pairs(b, n) {
  const h = b._h;
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) {
    const t = now();
    const r = engine.w.fw_start(h, t);
    const id = engine.out()[0];
    if ((r & engine.F_ANY) !== 0) { flagged++; b._after(r, t); }
    const t2 = now();
    const c = engine.w.fw_complete(h, id, engine.OK, t2);
    if ((c & engine.F_ANY) !== 0) { flagged++; b._after(c, t2); }
  }
  pairsRun += n;
  return Number(process.hrtime.bigint() - t0) / n;
}
const PR = quick ? 20 : 60;
const pl = [];
const ps = [];
const pc = [];
for (let i = 0; i < PR; i++) {
  if (i % 10 === 0) await turn(); // let the store's answers in, as a service's loop does
  const t = [0, 0, 0];
  for (const j of [[0, 1, 2], [1, 2, 0], [2, 0, 1]][i % 3]) t[j] = pairs([local, shared, control][j], 5_000);
  pl.push(t[0]);
  ps.push(t[1] - t[0]);
  pc.push(t[2] - t[0]);
}
const pairLocal = median(pl);
const added = median(ps);
const addedControl = median(pc);
const sharedFlagged = flagged;

// 2. The whole `await fire()` of each: many short rounds (2 000 fires) in rotating
// order, the ratio of each round's times, median over rounds; the control shows how
// far two identical breakers differ measured this way.
async function nsPerFire(b, n) {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) await b.fire(i);
  return Number(process.hrtime.bigint() - t0) / n;
}
const lt = [];
const ratios = [];
const controls = [];
const ROUNDS = quick ? 60 : 300;
const orders = [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 2, 1], [2, 1, 0], [1, 0, 2]];
for (let i = 0; i < ROUNDS; i++) {
  if (i % 20 === 0) await turn();
  // Rotate the order: a later run pays for garbage an earlier one left.
  const t = [0, 0, 0];
  for (const j of orders[i % orders.length]) t[j] = await nsPerFire([local, shared, control][j], 2_000);
  lt.push(t[0]);
  ratios.push(t[1] / t[0]);
  controls.push(t[2] / t[0]);
}
const l = median(lt);
const q = median(ratios);
const c = median(controls);
const share = added / l;
console.log(`fire (success path): a local fire ${l.toFixed(0)} ns; the RedisStore breaker's core work adds ${added.toFixed(1)} ns per fire (wasm start + complete: local ${pairLocal.toFixed(0)} ns; A/A control ${addedControl >= 0 ? '+' : ''}${addedControl.toFixed(1)} ns; ${sharedFlagged} of ${2 * pairsRun} wasm calls raised a store flag) = ${(share * 100).toFixed(1)} % of a local fire`);
const iqr = (xs) => { const v = [...xs].sort((a, b) => a - b); return `${pct(v[Math.floor(v.length / 4)])} … ${pct(v[Math.floor((3 * v.length) / 4)])}`; };
console.log(`  whole call, median of ${ROUNDS} round ratios: RedisStore ${pct(q)} (middle half ${iqr(ratios)}); A/A control ${pct(c)} (middle half ${iqr(controls)})`);

// The syncs' own cost: the process's CPU while idle with the Redis breaker syncing at
// the defaults (an upper bound: everything else idle counts too).
{
  await sleep(1200);
  const u0 = process.cpuUsage();
  const w0 = process.hrtime.bigint();
  const s0 = store.stats;
  await sleep(quick ? 2000 : 4000);
  const u = process.cpuUsage(u0);
  const secs = Number(process.hrtime.bigint() - w0) / 1e9;
  const s1 = store.stats;
  const ops = (s1.reads - s0.reads + s1.writes - s0.writes) / secs;
  console.log(`sync CPU, idle at the defaults: ${((u.user + u.system) / 1000 / secs).toFixed(2)} ms per s (${ops.toFixed(1)} Redis ops/s; the whole process, an upper bound)`);
}

// Syncs per second of one process at the defaults.
const S = quick ? 3 : 6;
async function opsPerSec(b, st, callsPerMs) {
  const before = st.stats;
  const end = Date.now() + S * 1000;
  while (Date.now() < end) {
    for (let i = 0; i < callsPerMs; i++) await b.fire(i);
    await sleep(1);
  }
  const after = st.stats;
  return { reads: (after.reads - before.reads) / S, writes: (after.writes - before.writes) / S };
}
const busy = await opsPerSec(shared, store, 5);
const idle = await opsPerSec(shared, store, 0);
console.log(`one process, defaults (sync_ms 1000, flush_ms 1000): under load ${busy.reads.toFixed(1)} reads/s + ${busy.writes.toFixed(1)} writes/s; idle ${idle.reads.toFixed(1)} reads/s + ${idle.writes.toFixed(1)} writes/s`);
local.shutdown();
control.shutdown();
shared.shutdown();
await store.close();

// A simulated fleet of 100 processes: 100 owners of one breaker, 20 calls/s each.
const P = 100;
const fleet = [];
for (let i = 0; i < P; i++) {
  const st = new RedisStore({ client });
  fleet.push({ st, b: new CircuitBreaker(action, { name: 'bench-fleet', shared: { store: st } }) });
}
await sleep(1500);
const cmds = async () => {
  const info = await admin.info('commandstats');
  let n = 0;
  for (const m of info.matchAll(/cmdstat_(\w+):calls=(\d+)/g)) if (m[1] !== 'info') n += Number(m[2]);
  return n;
};
const c0 = await cmds();
const sent = () => fleet.reduce((a, m) => { const s = m.st.stats; return a + s.reads + s.writes; }, 0);
const o0 = sent();
const t0 = Date.now();
const tick = setInterval(() => { for (const m of fleet) m.b.fire(1); }, 50);
await sleep(S * 1000);
clearInterval(tick);
const secs = (Date.now() - t0) / 1000;
const ops = (await cmds()) - c0;
const reqs = sent() - o0;
const st = fleet.reduce((a, m) => { const s = m.st.stats; a.c += s.conflicts; a.w += s.writes; a.f += s.failures; return a; }, { c: 0, w: 0, f: 0 });
// Redis counts the commands a script calls (TIME, TYPE, HMGET, HSET, PEXPIRE) as well
// as the EVALSHA itself: both figures are given.
console.log(`fleet of ${P} (20 calls/s each, one key): ${(reqs / secs).toFixed(0)} requests/s sent (${(reqs / secs / P).toFixed(1)} per process; ${st.c} of ${st.w} writes conflicted, ${st.f} failed); Redis executed ${(ops / secs).toFixed(0)} commands/s, script calls included`);
// close() waits for each store's last flush (a write still going to a closed client
// fails with EPIPE).
await Promise.all(fleet.map((m) => { m.b.shutdown(); return m.st.close(); }));
await client.quit();
await admin.quit();
server.kill();
