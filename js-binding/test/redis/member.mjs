// One process of a test fleet (fleet.test.mjs forks several): `BREAKERS` breakers
// named `NAME`, each on its own RedisStore over one ioredis client, driven through
// IPC. Reports what it saw: outcomes, call latencies, transitions, store events.
import { performance } from 'node:perf_hooks';
import Redis from 'ioredis';
import { CircuitBreaker } from 'fusewire';
import { RedisStore } from 'fusewire/redis';

const env = process.env;
const opts = JSON.parse(env.OPTIONS ?? '{}');
const shared = JSON.parse(env.SHARED ?? '{}');
const cluster = env.REDIS_CLUSTER ? env.REDIS_CLUSTER.split(',').map((p) => ({ host: '127.0.0.1', port: Number(p) })) : null;
const client = cluster
  ? new Redis.Cluster(cluster)
  : new Redis({ port: Number(env.REDIS_PORT) }); // ioredis defaults: offline queue, resend on reconnect
client.on('error', () => {}); // reconnects on its own; the store counts the failures
const timeoutMs = Number(env.TIMEOUT_MS ?? 150);
const count = Number(env.BREAKERS ?? 1);
const stores = [];
const members = [];
let execs = 0;
let held = [];

for (let i = 0; i < count; i++) {
  const store = new RedisStore({ client, timeoutMs, prefix: env.PREFIX ?? '' });
  stores.push(store);
  const m = { seen: [], issues: {} };
  m.b = new CircuitBreaker(async (x) => {
    execs++;
    if (x === 'hold') await new Promise((r) => held.push(r));
    if (x === 'fail') throw new Error('upstream down');
    return x;
  }, { name: env.NAME, timeout: false, ...opts, shared: { store, ...shared } });
  for (const e of ['open', 'halfOpen', 'close']) m.b.on(e, () => m.seen.push(e));
  m.b.on('store', (s) => { m.issues[s.issue] = (m.issues[s.issue] ?? 0) + 1; });
  members.push(m);
}
await Promise.all(stores.map((s) => s.ready));

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const phase = (b) => (b.opened ? 'open' : b.halfOpen ? 'halfOpen' : 'closed');

/**
 * Fires `n` calls per breaker (`arg`), `gap` ms apart. `waited` counts the calls that
 * let an event-loop turn pass before settling: the actions settle in microtasks, so
 * such a call waited on I/O (Redis). A turn, not a time bound: a GC pause or a busy
 * machine makes a call slow but not waiting.
 */
async function fire({ n, arg = 'ok', gap = 0, parallel = false }) {
  const out = { ok: 0, failed: 0, rejected: 0, waited: 0, maxMs: 0 };
  const one = async (b) => {
    const t0 = performance.now();
    let turned = false;
    const turn = setImmediate(() => { turned = true; });
    try {
      await b.fire(arg);
      out.ok++;
    } catch (e) {
      if (e.code === 'EOPENBREAKER') out.rejected++;
      else out.failed++;
    }
    clearImmediate(turn);
    if (turned) out.waited++;
    out.maxMs = Math.max(out.maxMs, performance.now() - t0);
  };
  for (let i = 0; i < n; i++) {
    if (parallel) await Promise.all(members.map((m) => one(m.b)));
    else for (const m of members) await one(m.b);
    if (gap > 0) await sleep(gap);
  }
  return out;
}

/** Fires 'hold' calls every `gap` ms for `ms`: how many actions ran (probes). */
async function probe({ ms, gap = 10 }) {
  const before = execs;
  const end = performance.now() + ms;
  const pending = [];
  while (performance.now() < end) {
    for (const m of members) pending.push(m.b.fire('hold').catch(() => {}));
    await sleep(gap);
  }
  const ran = execs - before;
  return { ran, wait: Promise.all(pending) };
}

let probing;
process.on('message', async (msg) => {
  let r;
  try {
    if (msg.op === 'fire') r = await fire(msg);
    else if (msg.op === 'probe') {
      const p = await probe(msg);
      probing = p.wait;
      r = { ran: p.ran };
    } else if (msg.op === 'release') {
      for (const f of held) f();
      held = [];
      await probing;
      r = {};
    } else if (msg.op === 'state') {
      r = {
        members: members.map((m) => {
          const s = m.b.stats;
          return { phase: phase(m.b), seen: m.seen, issues: m.issues, successes: s.successes, failures: s.failures };
        }),
        stores: stores.map((s) => s.stats),
        execs,
      };
    } else if (msg.op === 'stop') {
      for (const m of members) m.b.shutdown();
      await Promise.all(stores.map((s) => s.close()));
      await client.quit().catch(() => client.disconnect());
      r = { stats: stores.map((s) => s.stats) };
      process.send({ id: msg.id, r });
      process.disconnect(); // the process must now exit on its own: nothing left running
      return;
    }
  } catch (e) {
    r = { error: String(e && e.stack) };
  }
  process.send({ id: msg.id, r });
});
process.send({ ready: true });
