// Three Node processes behind one flaky upstream, sharing one breaker through Redis.
//
//   upstream   an HTTP "payments" service (in this process): healthy, then down, then
//              healthy again; it counts the requests that reach it
//   redis      REDIS_URL, or a redis-server started here on a free port (Debian's
//              `redis-server` package; no persistence) and stopped at the end
//   members    3 child processes, each calling the upstream ~40 times a second
//              through a CircuitBreaker named `payments` on a RedisStore
//
// Every member prints its own transitions; once a second the parent prints the
// fleet-wide view: each member's phase and what reached the upstream. With one
// breaker for the fleet, the members trip together, within one sync interval of
// the first to see the error rate (each would reach it alone too, here: about 40
// calls a second is past the volume threshold within a second), and half-open lets
// exactly one probe through for the whole fleet, not one per member. `npm start` here (after `bash scripts/build-js.sh`).
import { fork, spawn } from 'node:child_process';
import { createServer, get } from 'node:http';
import { connect, createServer as netServer } from 'node:net';
import { fileURLToPath } from 'node:url';

const MEMBERS = 3;
const RUN_MS = Number(process.env.DEMO_MS ?? 14_000);
const self = fileURLToPath(import.meta.url);

if (process.env.FLEET_MEMBER) await member();
else await main();

async function main() {
  const start = Date.now();
  const since = () => `${((Date.now() - start) / 1000).toFixed(1).padStart(5)} s`;
  let hits = 0;
  let failing = false;
  const upstream = createServer((req, res) => {
    hits++;
    res.statusCode = failing ? 503 : 200;
    res.end(failing ? 'down' : 'ok');
  });
  await new Promise((r) => upstream.listen(0, '127.0.0.1', r));
  const upstreamUrl = `http://127.0.0.1:${upstream.address().port}/pay`;

  let redis;
  let redisUrl = process.env.REDIS_URL;
  if (!redisUrl) {
    const port = await new Promise((r) => {
      const s = netServer().listen(0, '127.0.0.1', () => {
        const p = s.address().port;
        s.close(() => r(p));
      });
    });
    redis = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
      { stdio: 'ignore' });
    // Stopped however this process ends (a member's failure exits early).
    process.on('exit', () => redis?.kill());
    redis.on('error', (e) => {
      console.error(`fleet: cannot start redis-server (${e.message}); install it (apt-get install redis-server) or set REDIS_URL`);
      process.exit(1);
    });
    redisUrl = `redis://127.0.0.1:${port}`;
    // Until it accepts connections (a loaded machine can take longer than a moment).
    let up = false;
    for (let i = 0; i < 100 && !up; i++) {
      up = await new Promise((r) => {
        const c = connect(port, '127.0.0.1', () => {
          c.end();
          r(true);
        });
        c.on('error', () => r(false));
      });
      if (!up) await new Promise((r) => setTimeout(r, 50));
    }
    // Without it the members would each run on their own local breaker, silently.
    if (!up) {
      console.error(`fleet: redis-server did not accept connections on port ${port} within 5 s`);
      redis.kill();
      process.exit(1);
    }
  }
  console.log(`fleet: upstream ${upstreamUrl}, Redis ${redisUrl}${redis ? ' (started here)' : ''}, ${MEMBERS} members`);

  const phases = new Map();
  const members = [];
  for (let i = 0; i < MEMBERS; i++) {
    const c = fork(self, [], { env: { ...process.env, FLEET_MEMBER: String(i), UPSTREAM: upstreamUrl, REDIS_URL: redisUrl } });
    c.on('message', (m) => {
      if (m.transition) console.log(`${since()}  member ${i}: ${m.transition}`);
      if (m.phase) phases.set(i, m);
    });
    // A member that dies ends the run (it would wait for its totals for good).
    c.on('exit', (code) => {
      if (code !== 0 && code !== null) {
        console.error(`fleet: member ${i} exited with code ${code}`);
        process.exit(1);
      }
    });
    members.push(c);
  }
  const script = [
    { at: 3_000, say: 'upstream DOWN (every request fails)', failing: true },
    { at: 8_000, say: 'upstream recovered', failing: false },
  ];
  for (const s of script) {
    setTimeout(() => {
      failing = s.failing;
      console.log(`${since()}  ---- ${s.say}`);
    }, s.at);
  }
  let last = 0;
  const tick = setInterval(() => {
    const view = [...phases.entries()].sort((a, b) => a[0] - b[0]).map(([i, m]) => `m${i} ${m.phase.padEnd(8)}`).join(' ');
    console.log(`${since()}  fleet: ${view} | upstream saw ${String(hits - last).padStart(3)} req/s`);
    last = hits;
  }, 1000);
  await new Promise((r) => setTimeout(r, RUN_MS));
  clearInterval(tick);
  const totals = await Promise.all(members.map((c) => new Promise((r) => {
    // The totals, not a transition reported as the run ends.
    const onTotals = (m) => {
      if (m?.store === undefined) return;
      c.off('message', onTotals);
      r(m);
    };
    c.on('message', onTotals);
    c.send('stop');
  })));
  for (const [i, t] of totals.entries()) {
    console.log(`member ${i}: ${t.fires} calls, ${t.ok} ok, ${t.failed} failed, ${t.rejected} rejected by the breaker; ` +
      `Redis ops ${t.store.reads} reads + ${t.store.writes} writes, ${t.store.failures} failed`);
  }
  console.log(`upstream: ${hits} requests in ${(RUN_MS / 1000).toFixed(0)} s`);
  await Promise.all(members.map((c) => new Promise((r) => (c.exitCode !== null ? r() : c.once('exit', r)))));
  upstream.close();
  redis?.kill();
}

async function member() {
  const { Redis } = await import('ioredis');
  const { CircuitBreaker } = await import('fusewire');
  const { RedisStore } = await import('fusewire/redis');
  const client = new Redis(process.env.REDIS_URL);
  client.on('error', () => {}); // the store counts failures; the breaker keeps deciding locally
  const store = new RedisStore({ client });
  const call = () => new Promise((resolve, reject) => {
    get(process.env.UPSTREAM, (res) => {
      res.resume();
      res.on('end', () => (res.statusCode === 200 ? resolve('ok') : reject(new Error(`HTTP ${res.statusCode}`))));
    }).on('error', reject);
  });
  const breaker = new CircuitBreaker(call, {
    name: 'payments',
    timeout: 1000,
    resetTimeout: 2000,
    volumeThreshold: 30, // over the fleet's combined window (Redis), not per member
    errorThresholdPercentage: 50,
    shared: { store, sync_ms: 250, stale_ms: 2500 },
  });
  for (const e of ['open', 'halfOpen', 'close']) breaker.on(e, () => process.send({ transition: e }));
  const n = { fires: 0, ok: 0, failed: 0, rejected: 0 };
  const loop = setInterval(() => {
    n.fires++;
    breaker.fire().then(() => n.ok++, (e) => (e.code === 'EOPENBREAKER' ? n.rejected++ : n.failed++));
  }, 25);
  const report = setInterval(() => {
    process.send({ phase: breaker.opened ? 'open' : breaker.halfOpen ? 'halfOpen' : 'closed' });
  }, 200);
  process.on('message', async () => {
    clearInterval(loop);
    clearInterval(report);
    breaker.shutdown();
    await store.close(); // the last flush landed
    await client.quit();
    process.send({ ...n, store: store.stats });
    process.disconnect();
  });
}
