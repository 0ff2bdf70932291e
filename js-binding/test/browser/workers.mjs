// Two Web Workers share one breaker through a SharedStore on a SharedArrayBuffer (the
// page is cross-origin isolated: COOP + COEP): a trip in one rejects in the other, and
// half-open admits one probe across both. The second starts 1.5 s after the first
// (found by review: each Web Worker's `performance.now()` counts from its own start,
// so a trip by the later one was over at once for the earlier one). Results go to
// window.__result.
import { SharedStore } from '/node_modules/fusewire/dist/browser.js';

const result = { isolated: globalThis.crossOriginIsolated === true };
function spawn(buffer) {
  const w = new Worker('/test/browser/worker.mjs', { type: 'module' });
  const queue = [];
  w.onmessage = (e) => queue.shift()?.(e.data);
  w.onerror = (e) => queue.shift()?.({ error: e.message ?? String(e) });
  const ask = (msg) => new Promise((r) => {
    queue.push(r);
    w.postMessage(msg);
  });
  return { ask, ready: ask({ op: 'start', buffer }), end: () => w.terminate() };
}
try {
  const store = new SharedStore({ entries: 16 });
  const a = spawn(store.buffer);
  await a.ready;
  await new Promise((r) => setTimeout(r, 1500));
  const b = spawn(store.buffer);
  result.started = await Promise.all([a.ready, b.ready]);
  result.first = (await a.ask({ op: 'fire', arg: 'ok' })).value;
  for (let i = 0; i < 2; i++) await b.ask({ op: 'fire', arg: 'fail' });
  result.tripped = (await b.ask({ op: 'state' })).opened;
  await new Promise((r) => setTimeout(r, 60)); // a's view is older than sync_ms (20 ms)
  result.otherRejects = (await a.ask({ op: 'fire', arg: 'ok' })).code;
  result.otherOpen = (await a.ask({ op: 'state' })).opened;
  await new Promise((r) => setTimeout(r, 400)); // resetTimeout: half-open
  // Both start a slow call at once: one probe across the two workers.
  const starts = await Promise.all([a.ask({ op: 'slow' }), b.ask({ op: 'slow' })]);
  result.probes = starts.filter((s) => s.admitted).length;
  await Promise.all([a.ask({ op: 'release' }), b.ask({ op: 'release' })]);
  await new Promise((r) => setTimeout(r, 60));
  result.closed = [(await a.ask({ op: 'state' })).closed, (await b.ask({ op: 'state' })).closed];
  result.storeSize = store.size;
  a.end();
  b.end();
  result.ok = true;
} catch (e) {
  result.ok = false;
  result.error = `${e?.name}: ${e?.message}`;
}
window.__result = result;
