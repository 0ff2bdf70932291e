// A small HTTP service that calls a flaky upstream through a fusewire breaker.
//
//   upstream  :U  an in-process "inventory" service: healthy, then an outage (most
//                 requests fail with 503 or hang), then healthy again
//   service   :S  GET /stock/:sku → calls the upstream through the breaker; when the
//                 breaker is open (or the call fails) it answers from a fallback
//   load      a client sending requests to the service for the whole run
//
// It prints every breaker transition as it happens, and the breaker's stats (opossum's
// shape) every second and at the end. `make demo` runs it; so does `npm start` here.
import { createServer, request } from 'node:http';

import { CircuitBreaker } from 'fusewire';

const PHASES = [
  { at: 0, name: 'healthy', failRate: 0.02, slowRate: 0 },
  { at: 4_000, name: 'outage: 80% errors, slow calls', failRate: 0.8, slowRate: 0.1 },
  { at: 9_000, name: 'recovered', failRate: 0.02, slowRate: 0 },
];
const RUN_MS = Number(process.env.DEMO_MS ?? 13_000);
const start = Date.now();
const since = () => `${((Date.now() - start) / 1000).toFixed(1).padStart(5)} s`;
const phase = () => [...PHASES].reverse().find((p) => Date.now() - start >= p.at);

// ---- the flaky upstream ---------------------------------------------------------------
let upstreamHits = 0;
let cancelled = 0; // slow upstream requests the service gave up on (its timeout)
/** Per phase: requests the service answered, and those that reached the upstream. */
const byPhase = new Map(PHASES.map((p) => [p, { served: 0, upstream: 0 }]));
const upstream = createServer((req, res) => {
  upstreamHits++;
  const p = phase();
  byPhase.get(p).upstream++;
  const r = Math.random();
  if (r < p.slowRate) {
    setTimeout(() => res.end('{"stock": 3}'), 2_000).unref();
    res.on('close', () => {
      if (!res.writableEnded) cancelled++;
    });
    return;
  }
  if (r < p.failRate) {
    res.writeHead(503).end('unavailable');
    return;
  }
  res.writeHead(200, { 'content-type': 'application/json' }).end('{"stock": 42}');
});

function getJSON(port, path, signal) {
  return new Promise((resolve, reject) => {
    const req = request({ port, path, signal }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c) => (body += c));
      res.on('end', () => {
        if (res.statusCode !== 200) {
          const e = new Error(`upstream ${res.statusCode}`);
          e.status = res.statusCode;
          reject(e);
        } else resolve(JSON.parse(body));
      });
    });
    req.on('error', reject);
    req.end();
  });
}

// ---- the service, protected by a breaker -------------------------------------------------
await new Promise((r) => upstream.listen(0, '127.0.0.1', r));
const upstreamPort = upstream.address().port;

// The action gets a per-call signal as its last argument: it aborts when the call times
// out or the service's own client goes away, so the upstream request is cancelled too
// (not left running against a struggling upstream).
const breaker = new CircuitBreaker((sku, signal) => getJSON(upstreamPort, `/inventory/${sku}`, signal), {
  name: 'inventory',
  timeout: 500, // ms: a slow upstream call fails fast, and its request is cancelled
  errorThresholdPercentage: 50,
  volumeThreshold: 10,
  resetTimeout: 1_000, // ms open before a probe
  rollingCountTimeout: 2_000,
  rollingCountBuckets: 10,
  // Beyond opossum: three probes must succeed before closing, and repeated trips
  // stay open longer (1 s, 2 s, 4 s … capped at 8 s).
  fusewire: {
    breaker: {
      half_open: { permitted_probes: 3, success_threshold: 3 },
      open: { schedule: 'exponential', multiplier: 2, max_ms: 8_000 },
    },
  },
});
breaker.fallback((sku, _signal) => ({ stock: null, sku, note: 'fallback: inventory unavailable' }));
for (const e of ['open', 'halfOpen', 'close']) {
  // `open` and `close` say why (the trip rule, probe_failed, probes_succeeded, …).
  breaker.on(e, (why) => {
    const reason = e === 'halfOpen' ? '' : why;
    console.log(`${since()}  breaker ${e.padEnd(8)} ${reason.padEnd(16)} (phase: ${phase().name})`);
  });
}

let served = 0;
let fallbacks = 0;
const service = createServer(async (req, res) => {
  const sku = req.url.split('/').pop();
  const asked = phase();
  // Aborts when this request's client goes away before its answer.
  const gone = new AbortController();
  res.on('close', () => gone.abort());
  const result = await breaker.fireWithSignal(gone.signal, sku).catch((e) => ({ error: e.message }));
  served++;
  byPhase.get(asked).served++;
  if (result.stock === null || result.error) fallbacks++;
  res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(result));
});
await new Promise((r) => service.listen(0, '127.0.0.1', r));
const servicePort = service.address().port;

// ---- load -------------------------------------------------------------------------------------
console.log(`fusewire example: service :${servicePort} → upstream :${upstreamPort}, ${RUN_MS / 1000} s`);
for (const p of PHASES) console.log(`  phase @ ${String(p.at / 1000).padStart(2)} s: ${p.name}`);
let lastPhase;
const statsTimer = setInterval(() => {
  const p = phase();
  if (p !== lastPhase) {
    console.log(`${since()}  --- ${p.name}`);
    lastPhase = p;
  }
  const s = breaker.stats;
  const state = breaker.opened ? 'open' : breaker.halfOpen ? 'half-open' : 'closed';
  console.log(`${since()}  ${state.padEnd(9)} window: fires ${s.fires}, failures ${s.failures}, ` +
    `rejects ${s.rejects}, timeouts ${s.timeouts}, p99 ${s.percentiles[0.99].toFixed(1)} ms`);
}, 1_000);
const stop = Date.now() + RUN_MS;
// A probe round can still meet the recovered upstream's 2 % errors (3 probes must all
// succeed: about 6 % of rounds fail) and reopen for 8 s: keep the load on until the
// breaker has closed, up to 28 s more — room for four rounds after the recovery (12 s
// left room for two, and both failed in one CI run: about 1 run in 300).
const hardStop = stop + 28_000;
const clients = Array.from({ length: 8 }, async (_, i) => {
  while (Date.now() < stop || (!breaker.closed && Date.now() < hardStop)) {
    await getJSON(servicePort, `/stock/sku-${i}`).catch(() => {});
    await new Promise((r) => setTimeout(r, 5));
  }
});
await Promise.all(clients);
clearInterval(statsTimer);

const s = breaker.stats;
console.log(`\nserved ${served} requests; ${upstreamHits} reached the upstream, ${served - upstreamHits} ` +
  `(${Math.round((100 * (served - upstreamHits)) / served)} %) were kept off it; ${fallbacks} answered by the fallback`);
const outage = byPhase.get(PHASES[1]);
console.log(`during the outage: ${outage.served} requests, ${outage.upstream} reached the upstream, ` +
  `${Math.round((100 * (outage.served - outage.upstream)) / outage.served)} % kept off it`);
console.log(`${cancelled} slow upstream requests were cancelled (the breaker's timeout, or a client gone); ` +
  `the breaker ends ${breaker.closed ? 'closed' : 'not closed'}`);
console.log('final window (opossum\'s stats shape):', JSON.stringify({
  fires: s.fires, successes: s.successes, failures: s.failures, timeouts: s.timeouts, rejects: s.rejects,
  fallbacks: s.fallbacks, latencyMean: Number(s.latencyMean.toFixed(2)), p99: Number(s.percentiles[0.99].toFixed(2)),
}));
breaker.shutdown();
upstream.close();
service.close();
upstream.closeAllConnections?.();
service.closeAllConnections?.();
