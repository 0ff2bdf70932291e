// Every fetch of /api/data goes through a fusewire breaker; the page shows its state
// and rolling stats live, and logs every transition.
import { CircuitBreaker, ready } from 'fusewire';

await ready; // the WebAssembly module compiles asynchronously in browsers

const $ = (id) => document.getElementById(id);
const log = (line) => {
  $('log').textContent = `${new Date().toLocaleTimeString()}  ${line}\n` + $('log').textContent;
};

const breaker = new CircuitBreaker(async (path) => {
  const res = await fetch(path);
  if (!res.ok) throw new Error(`HTTP ${res.status}`);
  return res.json();
}, {
  name: 'api',
  timeout: 1000,
  resetTimeout: 2000,
  volumeThreshold: 10,
  errorThresholdPercentage: 50,
  rollingCountTimeout: 5000,
  fusewire: { breaker: { half_open: { permitted_probes: 2, success_threshold: 2 } } },
});
breaker.fallback(() => ({ value: 'fallback' }));
for (const e of ['open', 'halfOpen', 'close']) breaker.on(e, () => log(`breaker ${e}`));

function render() {
  const state = breaker.opened ? 'open' : breaker.halfOpen ? 'half-open' : 'closed';
  $('state').textContent = state;
  $('state').className = state;
  const s = breaker.stats;
  const rows = [['fires', s.fires], ['successes', s.successes], ['failures', s.failures], ['rejects', s.rejects],
    ['timeouts', s.timeouts], ['fallbacks', s.fallbacks], ['latency p50 / p99 (ms)', `${s.percentiles[0.5].toFixed(1)} / ${s.percentiles[0.99].toFixed(1)}`]];
  $('stats').innerHTML = rows.map(([k, v]) => `<tr><td>${k}</td><td><b>${v}</b></td></tr>`).join('');
}

async function tick() {
  try {
    if ($('auto').checked) {
      const r = await breaker.fire('/api/data');
      $('last').textContent = JSON.stringify(r);
    }
  } catch (err) {
    // Without a fallback a refused or failed call rejects: show it, keep polling.
    $('last').textContent = `error: ${err.message}`;
  } finally {
    render();
    setTimeout(tick, 100);
  }
}

for (const b of document.querySelectorAll('button[data-mode]')) {
  b.addEventListener('click', async () => {
    await fetch(`/api/mode?set=${b.dataset.mode}`);
    log(`upstream set to ${b.dataset.mode}`);
  });
}
tick();
