// Property test (fast-check): any sequence of successes, failures and time steps
// through a breaker with opossum's options gives the same phase, the same rejections
// and the same rolling-window counts as a small reference model of opossum's rules:
//   - every call is a fire (rejected ones too); the window holds the last
//     `rollingCountTimeout` ms in `rollingCountBuckets` buckets;
//   - a failure while closed opens when fires >= volumeThreshold and
//     failures / fires * 100 > errorThresholdPercentage (strictly above);
//   - open rejects; `resetTimeout` after opening it is half-open (timer-driven, no
//     call needed); the probe's success closes (the window is kept), its failure
//     reopens.
// Time moves in whole buckets, so the model needs no knowledge of bucket alignment.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import fc from 'fast-check';
import CircuitBreaker from 'fusewire';

import { fakeTime } from './helpers.mjs';

const WINDOW_MS = 1000;
const BUCKETS = 10;
const BUCKET_MS = WINDOW_MS / BUCKETS;
// Not a multiple of the bucket: "elapsed >= resetTimeout" is never an exact tie.
const RESET_MS = 250;

class Model {
  constructor(threshold, volume) {
    this.threshold = threshold;
    this.volume = volume;
    this.phase = 'closed';
    this.bucket = 0; // index of the current bucket
    this.events = []; // { bucket, kind: 'success' | 'failure' | 'reject' }
    this.openedAt = 0; // ms since start
    this.t = 0;
  }

  live() {
    return this.events.filter((e) => this.bucket - e.bucket < BUCKETS);
  }

  counts() {
    const live = this.live();
    const n = (k) => live.filter((e) => e.kind === k).length;
    return { fires: live.length, successes: n('success'), failures: n('failure'), rejects: n('reject') };
  }

  call(fails) {
    if (this.phase === 'open') {
      this.events.push({ bucket: this.bucket, kind: 'reject' });
      return 'rejected';
    }
    this.events.push({ bucket: this.bucket, kind: fails ? 'failure' : 'success' });
    if (this.phase === 'halfOpen') {
      if (fails) this.open();
      else this.phase = 'closed';
      return fails ? 'failed' : 'ok';
    }
    if (fails) {
      const c = this.counts();
      if (c.fires >= this.volume && (c.failures / c.fires) * 100 > this.threshold) this.open();
    }
    return fails ? 'failed' : 'ok';
  }

  open() {
    this.phase = 'open';
    this.openedAt = this.t;
  }

  advance(buckets) {
    this.t += buckets * BUCKET_MS;
    this.bucket += buckets;
    if (this.phase === 'open' && this.t - this.openedAt >= RESET_MS) this.phase = 'halfOpen';
  }
}

const step = fc.oneof(
  { weight: 6, arbitrary: fc.boolean().map((fails) => ({ call: fails })) },
  { weight: 2, arbitrary: fc.integer({ min: 1, max: 12 }).map((n) => ({ advance: n })) },
);

test('opossum rules: the breaker agrees with a reference model on every step', async () => {
  await fc.assert(
    fc.asyncProperty(
      fc.integer({ min: 1, max: 99 }),
      fc.integer({ min: 0, max: 6 }),
      fc.array(step, { minLength: 1, maxLength: 60 }),
      async (threshold, volume, steps) => {
        const clock = fakeTime();
        const b = new CircuitBreaker(async (fails) => {
          if (fails) throw new Error('boom');
          return 1;
        }, {
          timeout: false, resetTimeout: RESET_MS, errorThresholdPercentage: threshold,
          volumeThreshold: volume, rollingCountTimeout: WINDOW_MS, rollingCountBuckets: BUCKETS,
        });
        const m = new Model(threshold, volume);
        try {
          for (const [i, s] of steps.entries()) {
            const at = `step ${i} ${JSON.stringify(s)}`;
            if (s.advance !== undefined) {
              clock.tick(s.advance * BUCKET_MS);
              m.advance(s.advance);
            } else {
              const want = m.call(s.call);
              let got;
              try {
                await b.fire(s.call);
                got = 'ok';
              } catch (e) {
                got = e.code === 'EOPENBREAKER' ? 'rejected' : 'failed';
              }
              assert.equal(got, want, at);
            }
            const phase = b.opened ? 'open' : b.halfOpen ? 'halfOpen' : 'closed';
            assert.equal(phase, m.phase, `${at}: phase`);
            const st = b.stats;
            const c = m.counts();
            assert.deepEqual(
              { fires: st.fires, successes: st.successes, failures: st.failures, rejects: st.rejects },
              c, `${at}: window`);
          }
        } finally {
          b.shutdown();
          clock.restore();
        }
      },
    ),
    { numRuns: 150 },
  );
});

// Collapser against a model of DataLoader's contract: every load resolves to its own
// key's result (value or per-key Error), no batch exceeds maxBatchSize, a key is
// sent to the batch function once per cache lifetime (concurrent loads of one key
// share it; clear() and prime() act as in DataLoader), and failures are cached
// like values.
test('Collapser: results, batch bounds and de-duplication agree with a model', async () => {
  const { Collapser } = await import('fusewire');
  const op = fc.oneof(
    { weight: 5, arbitrary: fc.array(fc.integer({ min: 0, max: 7 }), { minLength: 1, maxLength: 12 }).map((keys) => ({ load: keys })) },
    { weight: 1, arbitrary: fc.integer({ min: 0, max: 7 }).map((k) => ({ clear: k })) },
    { weight: 1, arbitrary: fc.integer({ min: 0, max: 7 }).map((k) => ({ prime: k })) },
    { weight: 1, arbitrary: fc.constant({ clearAll: true }) },
  );
  await fc.assert(
    fc.asyncProperty(fc.integer({ min: 1, max: 5 }), fc.array(op, { minLength: 1, maxLength: 25 }), async (max, ops) => {
      const batches = [];
      const value = (k) => (k % 3 === 2 ? new Error(`no ${k}`) : `v:${k}`);
      const c = new Collapser(async (keys) => {
        batches.push(keys);
        return keys.map(value);
      }, { windowMs: 0, maxBatchSize: max });
      const cached = new Map(); // key → the result the model expects
      try {
        for (const [i, o] of ops.entries()) {
          const at = `op ${i} ${JSON.stringify(o)}`;
          if (o.clear !== undefined) {
            c.clear(o.clear);
            cached.delete(o.clear);
          } else if (o.prime !== undefined) {
            c.prime(o.prime, `primed:${o.prime}`);
            if (!cached.has(o.prime)) cached.set(o.prime, `primed:${o.prime}`);
          } else if (o.clearAll) {
            c.clearAll();
            cached.clear();
          } else {
            const before = batches.length;
            const fresh = [...new Set(o.load.filter((k) => !cached.has(k)))];
            const got = await Promise.all(o.load.map((k) => c.load(k).catch((e) => e)));
            for (const [j, k] of o.load.entries()) {
              const want = cached.get(k) ?? value(k);
              if (want instanceof Error) {
                assert.ok(got[j] instanceof Error, `${at}: key ${k} fails`);
                assert.equal(got[j].message, want.message, `${at}: key ${k}`);
              } else assert.equal(got[j], want, `${at}: key ${k}`);
            }
            const sent = batches.slice(before);
            for (const b of sent) assert.ok(b.length >= 1 && b.length <= max, `${at}: batch of ${b.length} > ${max}`);
            assert.deepEqual(sent.flat().sort(), [...fresh].sort(), `${at}: each uncached key sent once`);
            for (const k of fresh) cached.set(k, value(k));
          }
        }
      } finally {
        c.shutdown();
      }
    }),
    { numRuns: 150 },
  );
});

// Request loaders against the same model, one per request: each request loader is a
// DataLoader of its own (its own cache, batches of its own keys only, the context its
// batches carry), beside the collapser's own loads; a request ends (shutdown) and a
// new one starts with an empty cache.
test('Collapser.forRequest: each request loader agrees with a DataLoader model of its own', async () => {
  const { Collapser } = await import('fusewire');
  const req = fc.integer({ min: 0, max: 3 }); // 3: the collapser's own loads
  const op = fc.oneof(
    { weight: 5, arbitrary: fc.array(fc.tuple(req, fc.integer({ min: 0, max: 5 })), { minLength: 1, maxLength: 12 }).map((loads) => ({ loads })) },
    { weight: 1, arbitrary: fc.tuple(req, fc.integer({ min: 0, max: 5 })).map(([r, k]) => ({ clear: k, r })) },
    { weight: 1, arbitrary: fc.tuple(req, fc.integer({ min: 0, max: 5 })).map(([r, k]) => ({ prime: k, r })) },
    { weight: 1, arbitrary: req.map((r) => ({ clearAll: true, r })) },
    { weight: 1, arbitrary: fc.integer({ min: 0, max: 2 }).map((r) => ({ end: r })) },
  );
  await fc.assert(
    fc.asyncProperty(fc.integer({ min: 1, max: 4 }), fc.array(op, { minLength: 1, maxLength: 25 }), async (max, ops) => {
      const batches = [];
      const value = (k) => (k % 3 === 2 ? new Error(`no ${k}`) : `v:${k}`);
      const c = new Collapser(async (keys, ctx) => {
        batches.push({ ctx, keys: [...keys] });
        return keys.map(value);
      }, { windowMs: 0, maxBatchSize: max });
      let made = 0;
      const fresh = () => ({ loader: null, ctx: `request ${made++}`, cached: new Map() });
      const reqs = [fresh(), fresh(), fresh(), { loader: c, ctx: undefined, cached: new Map() }];
      for (const r of reqs.slice(0, 3)) r.loader = c.forRequest(r.ctx);
      try {
        for (const [i, o] of ops.entries()) {
          const at = `op ${i} ${JSON.stringify(o)}`;
          const r = reqs[o.r];
          if (o.end !== undefined) {
            reqs[o.end].loader.shutdown();
            const n = fresh();
            n.loader = c.forRequest(n.ctx);
            reqs[o.end] = n;
          } else if (o.clear !== undefined) {
            r.loader.clear(o.clear);
            r.cached.delete(o.clear);
          } else if (o.prime !== undefined) {
            r.loader.prime(o.prime, `primed:${o.prime}`);
            if (!r.cached.has(o.prime)) r.cached.set(o.prime, `primed:${o.prime}`);
          } else if (o.clearAll) {
            r.loader.clearAll();
            r.cached.clear();
          } else {
            const before = batches.length;
            const got = await Promise.all(o.loads.map(([q, k]) => reqs[q].loader.load(k).catch((e) => e)));
            for (const [j, [q, k]] of o.loads.entries()) {
              const want = reqs[q].cached.get(k) ?? value(k);
              if (want instanceof Error) {
                assert.ok(got[j] instanceof Error, `${at}: request ${q} key ${k} fails`);
                assert.equal(got[j].message, want.message, `${at}: request ${q} key ${k}`);
              } else assert.equal(got[j], want, `${at}: request ${q} key ${k}`);
            }
            const sent = batches.slice(before);
            for (const b of sent) assert.ok(b.keys.length >= 1 && b.keys.length <= max, `${at}: batch of ${b.keys.length} > ${max}`);
            for (const [q, r2] of reqs.entries()) {
              const uncached = [...new Set(o.loads.filter(([x, k]) => x === q && !r2.cached.has(k)).map(([, k]) => k))];
              const mine = sent.filter((b) => b.ctx === r2.ctx).flatMap((b) => b.keys);
              assert.deepEqual(mine.sort(), uncached.sort(), `${at}: request ${q}: each uncached key sent once, in its own batches`);
              for (const k of uncached) r2.cached.set(k, value(k));
            }
          }
        }
      } finally {
        c.shutdown();
      }
    }),
    { numRuns: 150 },
  );
});
