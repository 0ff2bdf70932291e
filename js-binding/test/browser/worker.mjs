// A Web Worker of workers.html: one breaker named 'api' on the page's SharedStore.
import { CircuitBreaker, SharedStore, ready } from '/node_modules/fusewire/dist/browser.js';

let breaker;
let release;
let slow;
const settle = (p) => p.then((value) => ({ value }), (e) => ({ code: e.code ?? e.message }));
self.onmessage = async ({ data: m }) => {
  let r = {};
  try {
    if (m.op === 'start') {
      await ready;
      const store = SharedStore.from(m.buffer);
      breaker = new CircuitBreaker(async (x) => {
        if (x === 'fail') throw new Error('upstream down');
        if (x === 'slow') await new Promise((res) => { release = res; });
        return x;
      }, {
        name: 'api', resetTimeout: 300, timeout: false, volumeThreshold: 2,
        shared: { store, flush_ms: 20, sync_ms: 20, heartbeat_ms: 100, lease_ttl_ms: 1000 },
      });
      r = { ok: true };
    } else if (m.op === 'fire') {
      r = await settle(breaker.fire(m.arg));
    } else if (m.op === 'state') {
      r = { opened: breaker.opened, halfOpen: breaker.halfOpen, closed: breaker.closed };
    } else if (m.op === 'slow') {
      slow = settle(breaker.fire('slow'));
      await new Promise((res) => setTimeout(res, 0));
      r = { admitted: release !== undefined };
      if (release === undefined) r.result = await slow;
    } else if (m.op === 'release') {
      if (release) {
        release('done');
        release = undefined;
        r = await slow;
      }
    }
  } catch (e) {
    r = { error: `${e?.name}: ${e?.message}` };
  }
  self.postMessage(r);
};
