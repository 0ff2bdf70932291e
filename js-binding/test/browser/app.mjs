// The browser scenario, loaded as plain ESM (import map) and as an esbuild bundle:
// fetches go through a breaker that trips, rejects, half-opens on its timer and
// closes. Results go to window.__result for the Playwright runner.
import * as fw from 'fusewire';

const { CircuitBreaker, ready } = fw;
const log = [];
const out = document.getElementById('log');
const note = (line) => {
  log.push(line);
  if (out) out.textContent += `${line}\n`;
};
const result = { steps: {}, events: [] };
try {
  try {
    new CircuitBreaker(async () => 1);
    result.steps.beforeReady = 'constructed';
  } catch (e) {
    result.steps.beforeReady = /await ready/.test(e.message) ? 'refused' : e.message;
  }
  await ready;
  result.steps.wasm = typeof WebAssembly === 'object';
  const call = async (path) => {
    const r = await fetch(path);
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    return r.text();
  };
  const b = new CircuitBreaker(call, { name: 'api', resetTimeout: 300, timeout: 2000, volumeThreshold: 2 });
  for (const e of ['open', 'halfOpen', 'close', 'reject', 'success', 'failure']) {
    b.on(e, () => {
      result.events.push(e);
      note(`event: ${e}`);
      document.getElementById('state').textContent = b.opened ? 'open' : b.halfOpen ? 'half-open' : 'closed';
    });
  }
  result.steps.first = await b.fire('/api/ok');
  for (let i = 0; i < 2; i++) await b.fire('/api/fail').catch((e) => note(`failed: ${e.message}`));
  result.steps.opened = b.opened;
  result.steps.rejected = await b.fire('/api/ok').then(() => 'ran', (e) => e.code);
  await new Promise((r) => setTimeout(r, 400));
  result.steps.halfOpen = b.halfOpen;
  result.steps.probe = await b.fire('/api/ok');
  result.steps.closed = b.closed;
  const s = b.stats;
  result.steps.stats = { fires: s.fires, failures: s.failures, successes: s.successes, rejects: s.rejects };
  result.steps.window = b.status.window.length;
  result.steps.json = JSON.parse(JSON.stringify(b.toJSON())).state.closed;
  try {
    new CircuitBreaker(async () => 1, { errorThresholdPercentage: 150 });
  } catch (e) {
    result.steps.typeError = `${e.name}: ${e.message}`;
  }
  b.shutdown();
  result.ok = true;
} catch (e) {
  result.ok = false;
  result.error = `${e?.name}: ${e?.message}\n${e?.stack}`;
}
note(JSON.stringify(result));
window.__result = result;
