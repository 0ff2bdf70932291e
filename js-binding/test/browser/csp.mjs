// Served with the Content-Security-Policy run.mjs puts in ?csp=: window.__result is
// 'ran' when a breaker ran a call, else why `ready` rejected.
import { CircuitBreaker, ready } from '/node_modules/fusewire/dist/browser.js';

try {
  await ready;
  const b = new CircuitBreaker(async () => 'ran');
  window.__result = await b.fire();
  b.shutdown();
} catch (e) {
  window.__result = String(e?.message ?? e);
}
