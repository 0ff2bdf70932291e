// fusewire/prometheus: every live breaker's counters, state and percentiles through
// prom-client, named as the Envoy filter's metrics are.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import * as client from 'prom-client';
import { CircuitBreaker } from 'fusewire';
import { register } from 'fusewire/prometheus';

test('Envoy-style names: <prefix>_<name>_<suffix>', async () => {
  const registry = new client.Registry();
  const remove = register({ client, registers: [registry] });
  const b = new CircuitBreaker(async (x) => {
    if (x) throw new Error('x');
    return 1;
  }, { name: 'orders-api' });
  await b.fire(false);
  await b.fire(false);
  await b.fire(true).catch(() => {});
  await b.fire(true).catch(() => {});
  await b.fire(true).catch(() => {});
  await b.fire(false).catch(() => {});
  const text = await registry.metrics();
  assert.match(text, /^# TYPE fusewire_orders_api_success counter$/m);
  assert.match(text, /^fusewire_orders_api_success 2$/m);
  assert.match(text, /^fusewire_orders_api_failure 3$/m);
  assert.match(text, /^fusewire_orders_api_short_circuited 1$/m);
  assert.match(text, /^fusewire_orders_api_opened 1$/m);
  assert.match(text, /^fusewire_orders_api_breaker_state 1$/m);
  assert.match(text, /^fusewire_orders_api_in_flight 0$/m);
  assert.match(text, /^fusewire_orders_api_latency_ms\{quantile="0\.5"\} [0-9.e-]+$/m);
  assert.match(text, /^fusewire_orders_api_latency_ms\{quantile="mean"\} [0-9.e-]+$/m);
  assert.match(text, /^fusewire_breakers 1$/m);
  b.shutdown();
  const after = await registry.metrics();
  assert.match(after, /^fusewire_breakers 0$/m);
  assert.doesNotMatch(after, /orders_api/, 'a shut-down breaker drops out');
  remove();
  assert.equal(await registry.getSingleMetric('fusewire_breakers'), undefined);
});

test('labels: true puts the name in a label', async () => {
  const registry = new client.Registry();
  const remove = register({ client, registers: [registry], prefix: 'app', labels: true });
  const a = new CircuitBreaker(async () => 1, { name: 'a', group: 'g' });
  const b = new CircuitBreaker(async () => 1, { name: 'b' });
  await a.fire();
  const text = await registry.metrics();
  assert.match(text, /^app_success\{name="a",group="g"\} 1$/m);
  assert.match(text, /^app_success\{name="b",group="b"\} 0$/m);
  assert.match(text, /^app_breaker_state\{name="a",group="g"\} 0$/m);
  a.shutdown();
  b.shutdown();
  remove();
  assert.throws(() => register({}), TypeError);
  assert.throws(() => register({ client, prefix: 'bad-prefix' }), TypeError);
});
