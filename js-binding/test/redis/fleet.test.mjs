// A fleet of Node processes sharing one breaker through Redis (fusewire/redis), against
// a redis-server this file starts (and kills, restarts empty, pauses) on free local
// ports; scripts/test-redis.sh runs it. Each test forks member.mjs processes.
import assert from 'node:assert/strict';
import { execFileSync, fork, spawn } from 'node:child_process';
import { createServer, connect } from 'node:net';
import { dirname, join } from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import Redis from 'ioredis';

const here = dirname(fileURLToPath(import.meta.url));
const SYNC_MS = 200;
const STALE_MS = 1000;
const TIMEOUT_MS = 150;
// No call may take this long (the Redis round trips never sit on the call path; a
// blocked call would take at least TIMEOUT_MS).
const CALL_BOUND_MS = 60;
const SHARED = { sync_ms: SYNC_MS, stale_ms: STALE_MS, flush_ms: 50 };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function ping(port) {
  return new Promise((resolve) => {
    const c = connect(port, '127.0.0.1');
    let buf = '';
    c.on('connect', () => c.write('PING\r\n'));
    c.on('data', (d) => {
      buf += d;
      if (buf.includes('\r\n')) {
        c.destroy();
        resolve(buf.startsWith('+PONG'));
      }
    });
    c.on('error', () => resolve(false));
    setTimeout(() => { c.destroy(); resolve(false); }, 500);
  });
}

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
const children = new Set();
after(async () => {
  for (const c of children) c.kill('SIGKILL');
  for (const p of [...servers]) await kill(p);
});

/** Forks `n` fleet members; returns handles with `ask(msg)` and `stop()`. */
async function fleet(n, env) {
  const members = [];
  for (let i = 0; i < n; i++) {
    const child = fork(join(here, 'member.mjs'), [], {
      env: { ...process.env, TIMEOUT_MS: String(TIMEOUT_MS), SHARED: JSON.stringify(SHARED), ...env },
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
    for (const r of fired) assert.ok(r.maxMs < CALL_BOUND_MS, `a call took ${r.maxMs} ms`);
    const tripped = await until(f, (s) => s.members.every((m) => m.phase === 'open'), 3000);
    assert.notEqual(tripped.ms, -1, `not every process opened: ${JSON.stringify(tripped.s.members)}`);
    assert.ok(tripped.ms <= 2 * SYNC_MS + 400, `the trip took ${tripped.ms} ms to reach every process`);
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
      assert.ok(r.maxMs < CALL_BOUND_MS, `a call took ${r.maxMs} ms`);
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
      assert.ok(r.maxMs < CALL_BOUND_MS, `a call took ${r.maxMs} ms with Redis down`);
    }
    // Process 0's upstream fails: its local breaker (15 successes in its window) trips
    // on its 16th failure — more than half of 20+ calls — alone; the others stay closed.
    const [m0, m1, m2] = f.members;
    const failing = await m0.ask({ op: 'fire', n: 25, arg: 'fail' });
    assert.deepEqual([failing.failed, failing.rejected], [16, 9], 'the local breaker opened on its own window');
    assert.ok(failing.maxMs < CALL_BOUND_MS);
    let s = await states(f);
    assert.deepEqual(s.members.map((m) => m.phase), ['open', 'closed', 'closed']);
    for (const m of s.members) assert.ok((m.issues.failed ?? 0) + (m.issues.stale ?? 0) > 0, JSON.stringify(m.issues));
    assert.ok(sum(s.stores, 'failures') > 0);
    for (const m of [m1, m2]) assert.equal((await m.ask({ op: 'fire', n: 3 })).ok, 3);
    // Redis comes back empty (what it held before is lost): the outage's outcomes,
    // kept in every delta, meet in the new state — 36 successes, 16 failures: under
    // the threshold, so the fleet's breaker is closed and process 0 follows it again.
    redis = await redisServer(port);
    const want = [36, 16];
    const conv = await until(f, (st) => st.members.every((m) => m.phase === 'closed' &&
      m.successes === want[0] && m.failures === want[1]), 8000);
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
      assert.ok(r.maxMs < CALL_BOUND_MS, `a call took ${r.maxMs} ms with Redis paused`);
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
    const s = await states(f);
    assert.ok(s.members.some((m) => (m.issues.invalid ?? 0) > 0), JSON.stringify(s.members.map((m) => m.issues)));
    assert.ok(sum(s.stores, 'foreign') > 0);
    for (const m of s.members) assert.equal(m.phase, 'closed');
    await f.stop();
    await client.quit();
    await kill(redis);
  });

  test('Redis Cluster (3 local masters): the fleet trips together and probes once fleet-wide', async (t) => {
    const ports = [await freePort(), await freePort(), await freePort()];
    const nodes = [];
    try {
      for (const p of ports) {
        nodes.push(await redisServer(p, ['--cluster-enabled', 'yes', '--cluster-config-file', `/tmp/fusewire-cluster-${p}.conf`,
          '--cluster-node-timeout', '2000']));
      }
      execFileSync('redis-cli', ['--cluster', 'create', ...ports.map((p) => `127.0.0.1:${p}`), '--cluster-replicas', '0',
        '--cluster-yes'], { stdio: 'ignore', timeout: 20000 });
      for (let i = 0; i < 100; i++) {
        const info = execFileSync('redis-cli', ['-p', String(ports[0]), 'cluster', 'info']).toString();
        if (info.includes('cluster_state:ok')) break;
        await sleep(100);
      }
    } catch (e) {
      for (const n of nodes) await kill(n);
      t.skip(`no local Redis Cluster here (${e.message}); every command is single-key (see redis.test.mjs)`);
      return;
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
