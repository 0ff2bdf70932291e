// A fleet of Node processes sharing one breaker through Redis (fusewire/redis), against
// redis-servers this file starts (and kills, restarts empty, pauses, fails over to a
// replica, partitions from a process through a TCP proxy) on free local
// ports; scripts/test-redis.sh runs it. Each test forks member.mjs processes.
import assert from 'node:assert/strict';
import { execFileSync, fork, spawn } from 'node:child_process';
import { createServer, connect } from 'node:net';
import { rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import Redis from 'ioredis';
import { CircuitBreaker } from 'fusewire';
import { RedisStore } from 'fusewire/redis';

import { freePort, ping } from './server.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const SYNC_MS = 200;
const STALE_MS = 1000;
const TIMEOUT_MS = 150;
const SHARED = { sync_ms: SYNC_MS, stale_ms: STALE_MS, flush_ms: 50 };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const servers = new Set();
/** A redis-server on `port` (no persistence: a restart starts empty). */
async function redisServer(port, extra = []) {
  const p = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '',
    '--appendonly', 'no', ...extra], { stdio: 'ignore' });
  servers.add(p);
  p.on('exit', () => servers.delete(p));
  for (let i = 0; i < 100; i++) {
    if (await ping(port)) return p;
    await sleep(50);
  }
  throw new Error(`redis-server on ${port} did not start`);
}
async function kill(p) {
  if (p.exitCode !== null || p.signalCode !== null) return;
  const gone = new Promise((r) => p.once('exit', r));
  p.kill('SIGKILL');
  await gone;
}
const proxies = new Set();
/**
 * A TCP proxy on a free local port to the redis-server on port `target`, which the
 * test can switch (`p.target = …`; new connections go there). `drop()` ends every
 * connection through it (ioredis reconnects); `mode = 'blackhole'` is a partition:
 * connections are accepted (and kept) but nothing is forwarded either way;
 * `mode = 'deaf'` forwards requests but drops every reply (writes land, their
 * replies are lost). `delay`: ms each reply is held back (a slow or distant Redis).
 */
async function proxy(target) {
  const conns = new Set();
  const p = { target, mode: 'forward', port: 0, delay: 0 };
  const server = createServer((down) => {
    conns.add(down);
    down.on('error', () => {});
    down.on('close', () => conns.delete(down));
    if (p.mode === 'blackhole') {
      down.resume(); // read and dropped: no answer, no reset
      return;
    }
    const up = connect(p.target, '127.0.0.1');
    conns.add(up);
    up.on('error', () => {});
    up.on('close', () => { conns.delete(up); down.destroy(); });
    down.on('close', () => up.destroy());
    down.on('data', (d) => { if (p.mode !== 'blackhole') up.write(d); });
    const reply = (d) => { if (p.mode === 'forward') down.write(d); };
    // Replies held back by one fixed delay keep their order.
    up.on('data', (d) => { if (p.delay > 0) setTimeout(reply, p.delay, d); else reply(d); });
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  p.port = server.address().port;
  p.drop = () => { for (const c of [...conns]) c.destroy(); };
  p.close = () => new Promise((resolve) => {
    proxies.delete(p);
    p.drop();
    server.close(() => resolve());
  });
  proxies.add(p);
  return p;
}
const children = new Set();
after(async () => {
  for (const c of children) c.kill('SIGKILL');
  for (const p of [...proxies]) await p.close();
  for (const p of [...servers]) await kill(p);
});

/** Forks `n` fleet members (`env`: an object, or `(i) => object` per member); returns handles with `ask(msg)` and `stop()`. */
async function fleet(n, env) {
  const members = [];
  for (let i = 0; i < n; i++) {
    const own = typeof env === 'function' ? env(i) : env;
    const child = fork(join(here, 'member.mjs'), [], {
      env: { ...process.env, TIMEOUT_MS: String(TIMEOUT_MS), SHARED: JSON.stringify(SHARED), ...own },
      // AGE_MS: the process looks that much older (its perf_hooks clock started earlier).
      execArgv: own.AGE_MS ? ['--require', join(here, 'age.cjs')] : [],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    children.add(child);
    child.once('exit', () => children.delete(child));
    let seq = 0;
    const waiting = new Map();
    let ready;
    const isReady = new Promise((r) => { ready = r; });
    child.on('message', (m) => {
      if (m.ready) ready();
      else waiting.get(m.id)?.(m.r);
    });
    const exited = new Promise((r) => child.once('exit', (code, signal) => r({ code, signal })));
    const ask = (msg) => new Promise((resolve, reject) => {
      const id = ++seq;
      waiting.set(id, (r) => (r && r.error ? reject(new Error(r.error)) : resolve(r)));
      child.send({ ...msg, id });
    });
    members.push({ child, ask, isReady, exited });
  }
  await Promise.all(members.map((m) => m.isReady));
  return {
    members,
    all: (msg) => Promise.all(members.map((m) => m.ask(msg))),
    /** Shuts every member down; asserts each exits on its own (no timer, socket or listener left). */
    async stop() {
      const stats = await Promise.all(members.map((m) => m.ask({ op: 'stop' })));
      for (const [i, m] of members.entries()) {
        const t = setTimeout(() => m.child.kill('SIGKILL'), 3000);
        const { code, signal } = await m.exited;
        clearTimeout(t);
        assert.equal(signal, null, `member ${i} had to be killed: something kept it alive after shutdown()`);
        assert.equal(code, 0, `member ${i} exit code`);
      }
      return stats;
    },
  };
}

/** Every member's breakers, flattened. */
async function states(f) {
  const s = await f.all({ op: 'state' });
  return { members: s.flatMap((x) => x.members), stores: s.flatMap((x) => x.stores), execs: s.map((x) => x.execs) };
}

/** Polls until `pred(states)` holds (or `ms` pass); returns the last states and the time it took. */
async function until(f, pred, ms) {
  const t0 = Date.now();
  let s;
  while (Date.now() - t0 < ms) {
    s = await states(f);
    if (pred(s)) return { s, ms: Date.now() - t0 };
    await sleep(50);
  }
  return { s, ms: -1 };
}

/** Polls `fn()` (async) until it is true (or `ms` pass). */
async function waitFor(fn, ms) {
  const t0 = Date.now();
  while (Date.now() - t0 < ms) {
    if (await fn().catch(() => false)) return true;
    await sleep(50);
  }
  return false;
}

const sum = (xs, k) => xs.reduce((n, x) => n + x[k], 0);

const BREAKER = {
  resetTimeout: 1000,
  volumeThreshold: 20,
  errorThresholdPercentage: 50,
  rollingCountTimeout: 30000,
  fusewire: { breaker: { half_open: { permitted_probes: 2, success_threshold: 2, probe_timeout_ms: 10000 } } },
};

describe('fusewire/redis: one breaker for a fleet of processes', { concurrency: false }, () => {
  test('4 processes: their combined traffic trips all, exactly N probes fleet-wide, recovery closes all', async () => {
    const port = await freePort();
    const redis = await redisServer(port);
    const f = await fleet(4, { REDIS_PORT: String(port), NAME: 'upstream', OPTIONS: JSON.stringify(BREAKER) });
    // 6 failures each: 24 fleet-wide ≥ the volume threshold of 20 (no process alone reaches it).
    const fired = await f.all({ op: 'fire', n: 6, arg: 'fail', gap: 5 });
    for (const r of fired) assert.equal(r.waited, 0, `calls waited on I/O (slowest ${r.maxMs} ms)`);
    const tripped = await until(f, (s) => s.members.every((m) => m.phase === 'open'), 3000);
    assert.notEqual(tripped.ms, -1, `not every process opened: ${JSON.stringify(tripped.s.members)}`);
    assert.ok(tripped.ms <= 2 * SYNC_MS + 1000, `the trip took ${tripped.ms} ms to reach every process`);
    for (const m of tripped.s.members) assert.deepEqual(m.seen, ['open']);
    // Half-open: every process keeps firing; exactly 2 actions run fleet-wide.
    await sleep(1100);
    const runs = await f.all({ op: 'probe', ms: 900 });
    assert.equal(sum(runs, 'ran'), 2, `probes ran: ${runs.map((r) => r.ran)}`);
    await f.all({ op: 'release' });
    const closed = await until(f, (s) => s.members.every((m) => m.phase === 'closed'), 3000);
    assert.notEqual(closed.ms, -1, `not every process closed: ${JSON.stringify(closed.s.members)}`);
    for (const m of closed.s.members) assert.deepEqual(m.seen.slice(-1), ['close']);
    const stats = await f.stop();
    for (const s of stats.flatMap((x) => x.stats)) assert.equal(s.pending, 0);
    await kill(redis);
  });

  test('processes started an hour apart share one timeline: the younger one trips both, both half-open after resetTimeout (found by review: each stamped the shared state with its own uptime)', async () => {
    const port = await freePort();
    const redis = await redisServer(port);
    const options = { resetTimeout: 1000, volumeThreshold: 5, errorThresholdPercentage: 50, rollingCountTimeout: 10000 };
    const f = await fleet(2, (i) => ({ REDIS_PORT: String(port), NAME: 'aged', OPTIONS: JSON.stringify(options),
      AGE_MS: i === 0 ? '3600000' : '' }));
    // Only the younger process fails: the older one must see the trip and reject.
    await f.members[1].ask({ op: 'fire', n: 8, arg: 'fail', gap: 5 });
    const tripped = await until(f, (s) => s.members.every((m) => m.phase === 'open'), 3000);
    assert.notEqual(tripped.ms, -1, `not every process opened: ${JSON.stringify(tripped.s.members)}`);
    const older = await f.members[0].ask({ op: 'fire', n: 1 });
    assert.equal(older.rejected, 1, 'the older process rejects while open');
    // Half-open after resetTimeout in both (not an hour early or late).
    const half = await until(f, (s) => s.members.every((m) => m.phase === 'halfOpen'), 3000);
    assert.notEqual(half.ms, -1, `not every process half-opened: ${JSON.stringify(half.s.members)}`);
    await f.stop();
    await kill(redis);
  });

  test('a lone process trips on the call a per-process breaker would, though Redis answers 80 ms later (found by review: its view lagged its own failures, ~10 calls where volumeThreshold said 5, any number while no answer came)', async () => {
    const port = await freePort();
    const redis = await redisServer(port);
    const px = await proxy(port);
    px.delay = 80;
    const clients = [new Redis({ port: px.port }), new Redis({ port: px.port })];
    for (const c of clients) c.on('error', () => {});
    const stores = clients.map((client) => new RedisStore({ client, timeoutMs: 1000 }));
    await Promise.all(stores.map((s) => s.ready));
    const options = { timeout: false, resetTimeout: 10000, volumeThreshold: 5, errorThresholdPercentage: 50 };
    const shared = { sync_ms: 200, stale_ms: 2000, flush_ms: 50 };
    const action = async (x) => {
      if (x === 'fail') throw new Error('upstream down');
      return x;
    };
    const lone = new CircuitBreaker(action, { ...options, name: 'lone', shared: { store: stores[0], ...shared } });
    const local = new CircuitBreaker(action, { ...options, name: 'lone-local' });
    const events = [];
    for (const e of ['open', 'halfOpen', 'close']) lone.on(e, () => events.push(e));
    /** Failing calls one after another until one is refused: how many ran. */
    const ranUntilOpen = async (b) => {
      for (let n = 0; n < 50; n++) {
        try {
          await b.fire('fail');
        } catch (e) {
          if (e.code === 'EOPENBREAKER') return n;
        }
      }
      return 50;
    };
    // A first call, written and read back: the process decides from the shared state.
    for (const b of [lone, local]) assert.equal(await b.fire('ok'), 'ok');
    await sleep(600);
    const ran = await ranUntilOpen(lone);
    assert.equal(ran, await ranUntilOpen(local), 'as many failing calls as a per-process breaker runs');
    assert.deepEqual(events, ['open']);
    // The write carrying them trips the fleet: a second process sees the key open.
    const other = new CircuitBreaker(action, { ...options, name: 'lone', shared: { store: stores[1], ...shared } });
    const seen = await waitFor(async () => {
      await other.fire('ok').catch(() => {});
      return other.opened;
    }, 3000);
    assert.ok(seen, 'the other process sees the trip');
    await sleep(400);
    assert.deepEqual(events, ['open'], 'no flap when the write lands');
    for (const b of [lone, local, other]) b.shutdown();
    for (const s of stores) await s.close();
    for (const c of clients) c.disconnect();
    await px.close();
    await kill(redis);
  });

  test('a lone process behind an 80 ms Redis: a failed probe emits failure, open, then its fallback runs (opossum\'s order); a probe that closes lets the next call run at once (found by review)', async () => {
    const port = await freePort();
    const redis = await redisServer(port);
    const px = await proxy(port);
    px.delay = 80;
    const client = new Redis({ port: px.port });
    client.on('error', () => {});
    const store = new RedisStore({ client, timeoutMs: 1000 });
    await store.ready;
    let healthy = false;
    const b = new CircuitBreaker(async () => {
      if (!healthy) throw new Error('upstream down');
      return 'ok';
    }, { timeout: false, resetTimeout: 300, volumeThreshold: 3, errorThresholdPercentage: 50, name: 'probe-order',
      shared: { store, sync_ms: 200, stale_ms: 2000, flush_ms: 50 } });
    const events = [];
    for (const e of ['open', 'halfOpen', 'close', 'failure', 'success', 'reject']) b.on(e, () => events.push(e));
    b.fallback(() => {
      events.push(`fallback(${b.opened ? 'open' : b.halfOpen ? 'halfOpen' : 'closed'})`);
      return 'fb';
    });
    await sleep(400); // a fresh view
    for (let i = 0; i < 3; i++) await b.fire();
    assert.ok(b.opened);
    /** Fires until a call runs (the first after the open period asks for a lease). */
    const probe = async () => {
      for (let i = 0; i < 40; i++) {
        events.length = 0;
        const before = b.halfOpen;
        const r = await b.fire();
        if (before && !events.includes('reject')) return r;
        await sleep(50);
      }
      throw new Error(`no probe ran: ${events}`);
    };
    await sleep(500);
    await probe();
    const at = events.indexOf('failure');
    assert.deepEqual(events.slice(at), ['failure', 'open', 'fallback(open)'], events.join(' '));
    await sleep(500);
    healthy = true;
    assert.equal(await probe(), 'ok');
    assert.deepEqual(events, ['close', 'success'], 'close before success, as opossum');
    assert.equal(await b.fire(), 'ok', 'the next call runs before Redis confirms');
    b.shutdown();
    await store.close();
    client.disconnect();
    await px.close();
    await kill(redis);
  });

  test('a breaker made after the fleet tripped rejects its first burst (found by review: one not fired yet did no reads, and 10 concurrent calls all ran against the failing upstream)', async () => {
    const port = await freePort();
    const redis = await redisServer(port);
    const clients = [new Redis({ port }), new Redis({ port })];
    for (const c of clients) c.on('error', () => {});
    const stores = clients.map((client) => new RedisStore({ client, timeoutMs: 1000 }));
    await Promise.all(stores.map((s) => s.ready));
    const options = { timeout: false, resetTimeout: 30000, volumeThreshold: 5, errorThresholdPercentage: 50 };
    const shared = { sync_ms: 200, stale_ms: 2000, flush_ms: 50 };
    let upstream = 0;
    const action = async () => {
      upstream++;
      throw new Error('upstream down');
    };
    const a = new CircuitBreaker(action, { ...options, name: 'late', shared: { store: stores[0], ...shared } });
    for (let i = 0; i < 5; i++) await a.fire().catch(() => {});
    assert.ok(a.opened, 'the first process tripped');
    await sleep(300); // its write lands
    const b = new CircuitBreaker(action, { ...options, name: 'late', shared: { store: stores[1], ...shared } });
    await sleep(300); // not fired yet
    upstream = 0;
    const out = await Promise.all(Array.from({ length: 10 }, () => b.fire().then(() => 'S', (e) => (e.code === 'EOPENBREAKER' ? 'R' : 'F'))));
    assert.equal(out.join(''), 'RRRRRRRRRR');
    assert.equal(upstream, 0);
    for (const x of [a, b]) x.shutdown();
    for (const s of stores) await s.close();
    for (const c of clients) c.disconnect();
    await kill(redis);
  });

  test('8 writers flooding CAS conflicts: no call blocks, no delta lost, views converge', async () => {
    const port = await freePort();
    const redis = await redisServer(port);
    const f = await fleet(2, {
      REDIS_PORT: String(port), NAME: 'flood', BREAKERS: '4',
      OPTIONS: JSON.stringify(BREAKER), SHARED: JSON.stringify({ ...SHARED, flush_ms: 5 }),
    });
    const N = 250;
    const fired = await f.all({ op: 'fire', n: N, parallel: true, gap: 8 });
    for (const r of fired) {
      assert.equal(r.ok, N * 4);
      assert.equal(r.waited, 0, `calls waited on I/O (slowest ${r.maxMs} ms)`);
    }
    const total = 8 * N;
    const done = await until(f, (s) => s.members.every((m) => m.successes === total), 5000);
    assert.notEqual(done.ms, -1, `successes seen: ${done.s.members.map((m) => m.successes)} (want ${total})`);
    const conflicts = sum(done.s.stores, 'conflicts');
    assert.ok(conflicts > 0, 'the writers raced');
    console.log(`# CAS flood: ${sum(done.s.stores, 'writes')} writes, ${conflicts} conflicts, ${total} calls, all counted once`);
    await f.stop();
    await kill(redis);
  });

  test('Redis killed mid-run and restarted empty: local breakers decide, calls never block, state converges', async () => {
    const port = await freePort();
    let redis = await redisServer(port);
    const f = await fleet(3, { REDIS_PORT: String(port), NAME: 'outage', OPTIONS: JSON.stringify(BREAKER) });
    await f.all({ op: 'fire', n: 5 });
    await sleep(2 * SYNC_MS);
    await kill(redis);
    // Past the staleness bound every process runs on its local breaker.
    const during = await f.all({ op: 'fire', n: 10, gap: (STALE_MS + 300) / 10 });
    for (const r of during) {
      assert.equal(r.ok, 10, 'closed breakers serve while Redis is down');
      assert.equal(r.waited, 0, `calls waited on I/O with Redis down (slowest ${r.maxMs} ms)`);
    }
    // Process 0's upstream fails: its local breaker (15 successes in its window) trips
    // on its 16th failure — more than half of 20+ calls — alone; the others stay closed.
    const [m0, m1, m2] = f.members;
    const failing = await m0.ask({ op: 'fire', n: 25, arg: 'fail' });
    assert.deepEqual([failing.failed, failing.rejected], [16, 9], 'the local breaker opened on its own window');
    assert.equal(failing.waited, 0, 'calls waited on I/O');
    let s = await states(f);
    assert.deepEqual(s.members.map((m) => m.phase), ['open', 'closed', 'closed']);
    for (const m of s.members) assert.ok((m.issues.failed ?? 0) + (m.issues.stale ?? 0) > 0, JSON.stringify(m.issues));
    assert.ok(sum(s.stores, 'failures') > 0);
    for (const m of [m1, m2]) assert.equal((await m.ask({ op: 'fire', n: 3 })).ok, 3);
    // Redis comes back empty (what it held before is lost): the outage's outcomes,
    // kept in every delta, meet in the new state — 36 successes, 16 failures. The trip
    // rule runs at each merge, so the order decides the phase: process 0's 16 failures
    // of 26 outcomes trip a state holding only them (its errors are written at once),
    // not one that already holds another process's successes. Either way every process
    // ends in the one breaker, each outcome counted once. (The calls process 0's local
    // breaker refused stay local: merged, they would dilute the error rate.)
    redis = await redisServer(port);
    const want = [36, 16];
    const conv = await until(f, (st) => st.members.every((m) => m.phase === st.members[0].phase &&
      m.successes === want[0] && m.failures === want[1]), 8000);
    assert.equal(conv.s?.members[0].seen.at(-1), { closed: 'close', open: 'open', halfOpen: 'halfOpen' }[conv.s?.members[0].phase],
      `process 0 reported where it ended: ${JSON.stringify(conv.s?.members[0])}`);
    assert.notEqual(conv.ms, -1, `did not converge: ${JSON.stringify(conv.s.members)} ${JSON.stringify(conv.s.stores)}`);
    console.log(`# restart: converged ${conv.ms} ms after Redis came back`);
    await f.stop();
    await kill(redis);
  });

  test('Redis paused (SIGSTOP) past the op timeout and the staleness bound: no call blocks, nothing lost or counted twice', async () => {
    const port = await freePort();
    const redis = await redisServer(port);
    const f = await fleet(3, { REDIS_PORT: String(port), NAME: 'paused', OPTIONS: JSON.stringify(BREAKER) });
    await f.all({ op: 'fire', n: 10 });
    const synced = await until(f, (s) => s.members.every((m) => m.successes === 30), 3000);
    assert.notEqual(synced.ms, -1);
    redis.kill('SIGSTOP');
    const during = await f.all({ op: 'fire', n: 10, gap: (STALE_MS + 600) / 10 });
    for (const r of during) {
      assert.equal(r.ok, 10);
      assert.equal(r.waited, 0, `calls waited on I/O with Redis paused (slowest ${r.maxMs} ms)`);
    }
    let s = await states(f);
    assert.ok(sum(s.stores, 'timeouts') > 0, 'ops timed out');
    for (const m of s.members) assert.ok((m.issues.failed ?? 0) > 0, JSON.stringify(m.issues));
    redis.kill('SIGCONT');
    const conv = await until(f, (st) => st.members.every((m) => m.successes === 60), 5000);
    assert.notEqual(conv.ms, -1, `successes: ${conv.s.members.map((m) => m.successes)} (want 60 each)`);
    // Stay exact: no late write lands twice.
    await sleep(3 * SYNC_MS);
    s = await states(f);
    assert.deepEqual(s.members.map((m) => m.successes), [60, 60, 60]);
    console.log(`# SIGSTOP: ${sum(s.stores, 'timeouts')} timeouts, ${sum(s.stores, 'refused')} late writes refused by the script, ${sum(s.stores, 'late')} late answers ignored`);
    await f.stop();
    await kill(redis);
  });

  test('failover to a replica (through a proxy): no call blocks, the replicated state survives, the fleet trips together on the new primary', async () => {
    const [p1, p2] = [await freePort(), await freePort()];
    // The full sync goes over the socket at once (no 5 s wait for more replicas, no RDB file).
    const primary = await redisServer(p1, ['--repl-diskless-sync', 'yes', '--repl-diskless-sync-delay', '0']);
    const replica = await redisServer(p2, ['--replicaof', '127.0.0.1', String(p1), '--repl-diskless-load', 'on-empty-db']);
    const c1 = new Redis({ port: p1, maxRetriesPerRequest: 0, retryStrategy: () => null });
    const c2 = new Redis({ port: p2 });
    c1.on('error', () => {});
    try {
      assert.ok(await waitFor(async () => (await c2.info('replication')).includes('master_link_status:up'), 5000),
        'the replica is linked to the primary');
      const px = await proxy(p1);
      const f = await fleet(3, { REDIS_PORT: String(px.port), NAME: 'failover', OPTIONS: JSON.stringify(BREAKER) });
      await f.all({ op: 'fire', n: 2 });
      const synced = await until(f, (s) => s.members.every((m) => m.successes === 6), 3000);
      assert.notEqual(synced.ms, -1, `successes: ${synced.s.members.map((m) => m.successes)} (want 6 each)`);
      const [key] = await c1.keys('fusewire/v3/failover/*');
      assert.ok(key, 'the breaker has its key on the primary');
      assert.ok(await waitFor(async () => (await c2.hget(key, 't')) === (await c1.hget(key, 't')), 3000),
        'the replica caught up with the primary');
      // Failover: the primary dies while every process keeps firing; once each has seen
      // its store fail, the replica is promoted and the proxy sends every (re)connection
      // to it.
      const base = (await states(f)).stores.map((st) => st.failures);
      await kill(primary);
      const during = f.all({ op: 'fire', n: 6, gap: 100 });
      const noticed = await until(f, (s) => s.stores.every((st, i) => st.failures > base[i]), 4000);
      assert.notEqual(noticed.ms, -1, `not every store failed: ${JSON.stringify(noticed.s.stores)}`);
      await c2.replicaof('NO', 'ONE');
      px.target = p2;
      px.drop();
      for (const r of await during) {
        assert.equal(r.ok, 6, 'closed breakers serve through the failover');
        assert.equal(r.waited, 0, `calls waited on I/O during the failover (slowest ${r.maxMs} ms)`);
      }
      // The state written before the failover was replicated, so it is still there: the
      // new primary's state counts those 6 successes and the 18 fired meanwhile (a
      // Redis restarted empty would have lost the 6).
      const conv = await until(f, (s) => s.members.every((m) => m.phase === 'closed' && m.successes === 24 &&
        m.failures === 0), 6000);
      assert.notEqual(conv.ms, -1, `did not converge: ${JSON.stringify(conv.s.members)} ${JSON.stringify(conv.s.stores)}`);
      let s = conv.s;
      for (const m of s.members) assert.ok((m.issues.failed ?? 0) > 0, `store failures reported: ${JSON.stringify(m.issues)}`);
      assert.ok(sum(s.stores, 'written') > 0);
      // On the new primary the fleet is one breaker again: 11 failures each — alone 8 +
      // 11 < the volume threshold of 20, together 33 of 57 calls — trip all.
      const failing = await f.all({ op: 'fire', n: 11, arg: 'fail', gap: 5 });
      for (const r of failing) assert.equal(r.waited, 0, `calls waited on I/O (slowest ${r.maxMs} ms)`);
      const tripped = await until(f, (st) => st.members.every((m) => m.phase === 'open'), 3000);
      assert.notEqual(tripped.ms, -1, `not every process opened: ${JSON.stringify(tripped.s.members)}`);
      for (const m of tripped.s.members) assert.deepEqual(m.seen, ['open']);
      s = tripped.s;
      console.log(`# failover: every process converged ${conv.ms} ms after the promotion; ${sum(s.stores, 'failures')} failed ops, ` +
        `${sum(s.stores, 'noscript')} NOSCRIPT reloads on the new primary; the trip reached all in ${tripped.ms} ms`);
      await f.stop();
      await px.close();
    } finally {
      c1.disconnect();
      await c2.quit().catch(() => c2.disconnect());
      await kill(replica);
      await kill(primary);
    }
  });

  test('one process partitioned from Redis (blackholed): its local breaker decides, the others keep sharing, it converges when the partition heals', async () => {
    const port = await freePort();
    const redis = await redisServer(port);
    const px = [await proxy(port), await proxy(port), await proxy(port)];
    // A long reset timeout: the healed process must still find the fleet's breaker open.
    const opts = { ...BREAKER, volumeThreshold: 40, resetTimeout: 6000 };
    const f = await fleet(3, (i) => ({ REDIS_PORT: String(px[i].port), NAME: 'partition', OPTIONS: JSON.stringify(opts) }));
    const [m0, m1, m2] = f.members;
    const counts = (s) => s.members.map((m) => [m.successes, m.failures]);
    await Promise.all([m0.ask({ op: 'fire', n: 4 }), m1.ask({ op: 'fire', n: 4 }), m2.ask({ op: 'fire', n: 12 })]);
    const synced = await until(f, (s) => s.members.every((m) => m.successes === 20), 3000);
    assert.notEqual(synced.ms, -1, `successes: ${counts(synced.s)} (want 20 each)`);
    // Process 2's path to Redis goes silent (its connection stays up, nothing comes
    // back: every op runs into the op timeout). It keeps serving past the staleness
    // bound on its local breaker while processes 0 and 1 go on sharing.
    px[2].mode = 'blackhole';
    const [r0, r1, cut] = await Promise.all([m0.ask({ op: 'fire', n: 5, gap: 50 }), m1.ask({ op: 'fire', n: 5, gap: 50 }),
      m2.ask({ op: 'fire', n: 10, gap: (STALE_MS + 300) / 10 })]);
    for (const r of [r0, r1, cut]) assert.equal(r.waited, 0, `calls waited on I/O (slowest ${r.maxMs} ms)`);
    assert.equal(cut.ok, 10, 'the partitioned process serves on its closed local breaker');
    const shared = await until(f, (s) => s.members[0].successes === 30 && s.members[1].successes === 30, 3000);
    assert.notEqual(shared.ms, -1, `the connected processes share: ${counts(shared.s)} (want 30, 30)`);
    let s = shared.s;
    assert.ok(s.stores[2].timeouts > 0, `the partitioned process's ops timed out: ${JSON.stringify(s.stores[2])}`);
    assert.ok((s.members[2].issues.failed ?? 0) > 0 && (s.members[2].issues.stale ?? 0) > 0,
      `failed and stale reported: ${JSON.stringify(s.members[2].issues)}`);
    // Healed (the silent connections are dropped; ioredis reconnects): process 2's 10
    // outcomes of the partition join the fleet's 30 — each once.
    px[2].mode = 'forward';
    px[2].drop();
    const healed = await until(f, (st) => st.members.every((m) => m.successes === 40 && m.failures === 0), 5000);
    assert.notEqual(healed.ms, -1, `did not converge on 40: ${counts(healed.s)} ${JSON.stringify(healed.s.stores)}`);
    await sleep(3 * SYNC_MS);
    s = await states(f);
    assert.deepEqual(counts(s), [[40, 0], [40, 0], [40, 0]], 'nothing lost, nothing counted twice');
    const { timeouts, refused, late } = s.stores[2];
    // Partitioned again: processes 0 and 1 trip the fleet's breaker by their combined
    // traffic (24 failures each: alone 9 + 24 calls < the volume threshold of 40,
    // together 48 of 88) and both see it; process 2 cannot, and keeps serving.
    px[2].mode = 'blackhole';
    px[2].drop();
    const failing = await Promise.all([m0, m1].map((m) => m.ask({ op: 'fire', n: 24, arg: 'fail', gap: 5 })));
    for (const r of failing) assert.equal(r.waited, 0, `calls waited on I/O (slowest ${r.maxMs} ms)`);
    const tripped = await until(f, (st) => st.members[0].phase === 'open' && st.members[1].phase === 'open', 3000);
    assert.notEqual(tripped.ms, -1, `the connected processes did not both open: ${JSON.stringify(tripped.s.members)}`);
    const more = await m2.ask({ op: 'fire', n: 5 });
    assert.equal(more.ok, 5, 'the partitioned process does not see the trip; its own upstream works');
    assert.equal(more.waited, 0, 'calls waited on I/O');
    s = await states(f);
    assert.deepEqual(s.members.map((m) => [m.phase, m.seen]), [['open', ['open']], ['open', ['open']], ['closed', []]]);
    // Healed again: process 2 finds the fleet's breaker open and takes its window; its
    // 5 outcomes from before it saw the trip belong to the closed period the trip
    // ended: counted once, and they never move the breaker (an earlier generation).
    px[2].mode = 'forward';
    px[2].drop();
    // Until its 5 are in: equal counts alone can come first, when process 2 has taken
    // the fleet's window and its own write is still on its way (seen once in CI: 40).
    const conv = await until(f, (st) => st.members.every((m) => m.phase === 'open' && m.successes === 45) &&
      new Set(counts(st).map(String)).size === 1, 5000);
    assert.notEqual(conv.ms, -1, `did not converge: ${JSON.stringify(conv.s.members)} ${JSON.stringify(conv.s.stores)}`);
    assert.deepEqual(conv.s.members[2].seen, ['open']);
    const [[succ, fails]] = counts(conv.s);
    assert.equal(succ, 45, 'the successes recorded while Redis was up, and process 2\'s 5 once');
    assert.ok(fails > 40 && fails <= sum(failing, 'failed'), `failures in the fleet's window: ${fails}`);
    console.log(`# partition: healed in ${healed.ms} ms (${timeouts} timeouts, ${refused} late writes refused, ${late} late ` +
      `answers ignored), the open breaker reached the partitioned process ${conv.ms} ms after the second heal`);
    await f.stop();
    for (const p of px) await p.close();
    await kill(redis);
  });

  test('replies lost after their writes landed: the writes are recognised by their receipts, nothing counted twice', async () => {
    const port = await freePort();
    const redis = await redisServer(port);
    const px = [await proxy(port), await proxy(port), await proxy(port)];
    const f = await fleet(3, (i) => ({ REDIS_PORT: String(px[i].port), NAME: 'deaf', OPTIONS: JSON.stringify(BREAKER) }));
    await f.all({ op: 'fire', n: 10 });
    const synced = await until(f, (s) => s.members.every((m) => m.successes === 30), 3000);
    assert.notEqual(synced.ms, -1);
    // Process 2's requests reach Redis, its replies never come back: its first write
    // lands, times out, and every read after it times out too.
    px[2].mode = 'deaf';
    const cut = await f.members[2].ask({ op: 'fire', n: 10, gap: (STALE_MS + 300) / 10 });
    assert.equal(cut.ok, 10);
    assert.equal(cut.waited, 0, `calls waited on I/O (slowest ${cut.maxMs} ms)`);
    let s = await states(f);
    assert.ok(s.stores[2].timeouts > 0, `process 2's ops timed out: ${JSON.stringify(s.stores[2])}`);
    px[2].mode = 'forward';
    px[2].drop();
    const healed = await until(f, (st) => st.members.every((m) => m.successes === 40), 5000);
    assert.notEqual(healed.ms, -1, `successes: ${healed.s.members.map((m) => m.successes)} (want 40 each)`);
    await sleep(3 * SYNC_MS);
    s = await states(f);
    assert.deepEqual(s.members.map((m) => m.successes), [40, 40, 40], 'nothing lost, nothing counted twice');
    console.log(`# replies lost: ${s.stores[2].timeouts} timeouts, converged ${healed.ms} ms after the replies came back`);
    await f.stop();
    for (const p of px) await p.close();
    await kill(redis);
  });

  test('a client\'s keyPrefix applies to every key the store writes: two apps kept apart by it keep two breakers (found by review: on ioredis < 5.9 the breaker keys had none)', async () => {
    const port = await freePort();
    const redis = await redisServer(port);
    const clients = [new Redis({ port, keyPrefix: 'appA:' }), new Redis({ port, keyPrefix: 'appB:' })];
    const stores = clients.map((client) => new RedisStore({ client, timeoutMs: 1000 }));
    await Promise.all(stores.map((s) => s.ready));
    const shared = { sync_ms: 100, flush_ms: 50 };
    const a = new CircuitBreaker(async () => { throw new Error('down'); }, { name: 'pay', volumeThreshold: 1, shared: { store: stores[0], ...shared } });
    const b = new CircuitBreaker(async () => 1, { name: 'pay', shared: { store: stores[1], ...shared } });
    await a.fire().catch(() => {});
    assert.ok(a.opened);
    await sleep(400);
    assert.equal(await b.fire(), 1, 'the other app\'s breaker of that name is its own');
    const plain = new Redis({ port });
    const keys = (await plain.keys('*')).sort();
    assert.ok(keys.length >= 3, keys.join(' '));
    assert.deepEqual(keys.filter((k) => !k.startsWith('appA:') && !k.startsWith('appB:')), [], `every key prefixed: ${keys.join(' ')}`);
    for (const x of [a, b]) x.shutdown();
    for (const s of stores) await s.close();
    for (const c of [...clients, plain]) c.disconnect();
    await kill(redis);
  });

  test('corrupt and foreign bytes in the key are detected and reset', async () => {
    const port = await freePort();
    const redis = await redisServer(port);
    const client = new Redis({ port });
    const f = await fleet(2, { REDIS_PORT: String(port), NAME: 'corrupt', OPTIONS: JSON.stringify(BREAKER), PREFIX: 'app:' });
    await f.all({ op: 'fire', n: 3 });
    await sleep(2 * SYNC_MS);
    const keys = await client.keys('app:fusewire/v3/corrupt/*');
    assert.equal(keys.length, 1, `one Redis key per breaker: ${keys}`);
    const [key] = keys;
    const healthy = async () => {
      const r = await until(f, () => true, 0);
      void r;
      for (let i = 0; i < 60; i++) {
        await f.all({ op: 'fire', n: 1 });
        const type = await client.type(key);
        const v = type === 'hash' ? await client.hgetBuffer(key, 'v') : null;
        if (v && v.subarray(0, 2).toString() === 'FW') return true;
        await sleep(50);
      }
      return false;
    };
    // Garbage under a new token: every process decodes it, reports it, and resets it.
    await client.hset(key, 't', '77', 'v', 'not fusewire state');
    assert.ok(await healthy(), 'the key holds fusewire state again');
    // A foreign type at the key (a string): read as unreadable, replaced by a hash.
    await client.del(key);
    await client.set(key, 'someone else\'s value');
    assert.ok(await healthy(), 'the foreign value was replaced');
    assert.ok((await client.pttl(key)) > 0, 'the key has a TTL');
    // A hash with neither field reads as absent, and the script takes it so: the first
    // write creates the key (before: a conflict as foreign data, then a reset).
    const { CAS_SCRIPT } = await import('fusewire/redis');
    await client.del('app:other');
    await client.hset('app:other', 'x', '1');
    const reply = await client.eval(CAS_SCRIPT, 1, 'app:other', '', 'FWstate', '60000', '0', '42');
    assert.equal(reply[0], 0, `written at once: ${JSON.stringify(reply)}`);
    assert.equal(reply[2], 42);
    assert.deepEqual(await client.hgetall('app:other'), { t: '42', v: 'FWstate' }, 'the foreign field went');
    const s = await states(f);
    assert.ok(s.members.some((m) => (m.issues.invalid ?? 0) > 0), JSON.stringify(s.members.map((m) => m.issues)));
    assert.ok(sum(s.stores, 'foreign') > 0);
    for (const m of s.members) assert.equal(m.phase, 'closed');
    await f.stop();
    await client.quit();
    await kill(redis);
  });

  test('Redis Cluster (3 local masters): the fleet trips together and probes once fleet-wide', async () => {
    // redis-server (installed by test-redis.sh) runs a local cluster: a failure to form
    // one fails the test (it used to skip, which hid a broken setup).
    const ports = [await freePort(), await freePort(), await freePort()];
    const nodes = [];
    try {
      for (const p of ports) {
        const conf = `/tmp/fusewire-cluster-${p}.conf`;
        rmSync(conf, { force: true }); // a stale file from an earlier run names other nodes
        nodes.push(await redisServer(p, ['--cluster-enabled', 'yes', '--cluster-config-file', conf,
          '--cluster-node-timeout', '2000']));
      }
      execFileSync('redis-cli', ['--cluster', 'create', ...ports.map((p) => `127.0.0.1:${p}`), '--cluster-replicas', '0',
        '--cluster-yes'], { stdio: 'ignore', timeout: 20000 });
      let ok = false;
      for (let i = 0; i < 100 && !ok; i++) {
        const info = execFileSync('redis-cli', ['-p', String(ports[0]), 'cluster', 'info']).toString();
        ok = info.includes('cluster_state:ok');
        if (!ok) await sleep(100);
      }
      assert.ok(ok, 'the local cluster never reached cluster_state:ok');
    } catch (e) {
      for (const n of nodes) await kill(n);
      throw e;
    }
    const opts = { ...BREAKER, fusewire: { breaker: { half_open: { permitted_probes: 1, probe_timeout_ms: 10000 } } } };
    const f = await fleet(3, { REDIS_CLUSTER: ports.join(','), NAME: 'clustered{tag}', OPTIONS: JSON.stringify(opts) });
    await f.all({ op: 'fire', n: 7, arg: 'fail', gap: 5 });
    const tripped = await until(f, (s) => s.members.every((m) => m.phase === 'open'), 3000);
    assert.notEqual(tripped.ms, -1, JSON.stringify(tripped.s?.members));
    await sleep(1100);
    const runs = await f.all({ op: 'probe', ms: 700 });
    assert.equal(sum(runs, 'ran'), 1, `probes ran: ${runs.map((r) => r.ran)}`);
    await f.all({ op: 'release' });
    const closed = await until(f, (s) => s.members.every((m) => m.phase === 'closed'), 3000);
    assert.notEqual(closed.ms, -1);
    await f.stop();
    for (const n of nodes) await kill(n);
  });
});
