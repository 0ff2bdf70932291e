/**
 * `fusewire/prometheus`: every live breaker's counters, state and latency
 * percentiles through `prom-client` (a peer dependency), read from the core at
 * scrape time (nothing is counted per call).
 *
 * Names follow the Envoy filter's metrics (proxy-wasm-filter/src/metrics.rs), as
 * Envoy's `/stats/prometheus` shows them: `<prefix>_<name>_<suffix>` with the
 * breaker's name sanitised to `[A-Za-z0-9_]`:
 *
 * | suffix | type | meaning |
 * | --- | --- | --- |
 * | `success`, `failure`, `timeout`, `bad_request`, `short_circuited`, `semaphore_rejected`, `thread_pool_rejected`, `fallback_success`, `fallback_failure`, `fallback_rejection`, `response_from_cache`, `collapsed` | counter | the core's event kinds, since the breaker was created |
 * | `opened`, `half_opened`, `closed` | counter | transitions the breaker made |
 * | `breaker_state` | gauge | 0 closed, 1 open, 2 half-open |
 * | `in_flight` | gauge | calls holding a slot |
 * | `latency_ms` | gauge, label `quantile` | latency percentiles over the window (p0 … p100) and `mean` |
 *
 * With `{ labels: true }` the name moves into a `name` label instead:
 * `<prefix>_<suffix>{name="…", group="…"}` (one metric family per suffix).
 */
import { CircuitBreaker, registry, watchers } from './breaker.js';
import { KIND_NAMES, S, out, w } from './engine.js';
import { PERCENTILES } from './status.js';

interface MetricConfig {
  name: string;
  help: string;
  labelNames?: string[];
  registers?: unknown[];
  collect?: () => void;
}

interface Metric {
  set?(labels: Record<string, string> | number, value?: number): void;
  inc?(labels: Record<string, string> | number, value?: number): void;
  reset(): void;
}

/** The part of prom-client this module uses. */
export interface PromClient {
  Gauge: new (config: MetricConfig) => Metric;
  Counter: new (config: MetricConfig) => Metric;
  register: unknown;
}

export interface PrometheusOptions {
  /** The prom-client module (`import * as client from 'prom-client'`). */
  client: PromClient;
  /** Registries to add the metrics to (default: `[client.register]`). */
  registers?: unknown[];
  /** Metric name prefix (default `fusewire`). */
  prefix?: string;
  /** Put the breaker name in a label rather than in the metric name (default false). */
  labels?: boolean;
}

type Breaker = CircuitBreaker<any, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const EVENTS = [0, 1, 2, 12, 3, 4, 5, 6, 7, 8, 10, 11];
const QUANTILES = PERCENTILES.map(String);
const COUNTERS = [...EVENTS.map((k) => KIND_NAMES[k]!), 'opened', 'half_opened', 'closed'];
const GAUGES = ['breaker_state', 'in_flight', 'latency_ms'];

/** `<prefix>_<name>_<suffix>` with everything outside `[A-Za-z0-9_]` replaced by `_`. */
export function metricName(prefix: string, name: string, suffix: string): string {
  return `${prefix}_${name.replace(/[^A-Za-z0-9_]/g, '_')}_${suffix}`;
}

interface Sample {
  at: number;
  counters: Record<string, number>;
  state: number;
  inFlight: number;
  latency: Record<string, number>;
}

const samples = new WeakMap<Breaker, Sample>();

/** One read of the core per breaker and scrape (reused for 10 ms). */
function sample(b: Breaker): Sample | undefined {
  if (b.isShutdown) return undefined;
  const t = b._now();
  const cached = samples.get(b);
  if (cached !== undefined && t - cached.at < 10) return cached;
  if (w.fw_snapshot(b._h, t) !== 0) return undefined;
  const o = out();
  const counters: Record<string, number> = {};
  for (const k of EVENTS) counters[KIND_NAMES[k]!] = o[S.CUMULATIVE + k]!;
  counters['opened'] = b._transitions.opened;
  counters['half_opened'] = b._transitions.halfOpened;
  counters['closed'] = b._transitions.closed;
  const latency: Record<string, number> = {};
  QUANTILES.forEach((q, i) => {
    latency[q] = o[S.PERCENTILES + i]!;
  });
  latency['mean'] = o[S.MEAN]!;
  const s = { at: t, counters, state: o[S.PHASE]!, inFlight: o[S.IN_FLIGHT]!, latency };
  samples.set(b, s);
  return s;
}

function help(suffix: string): string {
  if (suffix === 'breaker_state') return 'breaker state: 0 closed, 1 open, 2 half-open';
  if (suffix === 'in_flight') return 'calls holding a slot';
  if (suffix === 'latency_ms') return 'latency percentiles over the rolling window (ms)';
  if (suffix === 'breakers') return 'live fusewire breakers';
  return `${suffix} since the breaker was created`;
}

/** Writes one breaker's value of `suffix` into metric `m` (reset first). */
function fill(m: Metric, suffix: string, s: Sample, labels: Record<string, string>): void {
  if (suffix === 'breaker_state') m.set?.(labels, s.state);
  else if (suffix === 'in_flight') m.set?.(labels, s.inFlight);
  else if (suffix === 'latency_ms') {
    for (const [q, v] of Object.entries(s.latency)) m.set?.({ ...labels, quantile: q }, v);
  } else m.inc?.(labels, s.counters[suffix] ?? 0);
}

/**
 * Registers the metrics of every breaker, present and future (a breaker's metrics
 * are removed when it shuts down). Values are read from the core at scrape time.
 * Returns a function that removes everything again.
 */
export function register(options: PrometheusOptions): () => void {
  const client = options?.client;
  if (client === undefined || typeof client.Gauge !== 'function' || typeof client.Counter !== 'function') {
    throw new TypeError('options.client: must be the prom-client module');
  }
  const prefix = options.prefix ?? 'fusewire';
  if (typeof prefix !== 'string' || !/^[A-Za-z_:][A-Za-z0-9_:]*$/.test(prefix)) {
    throw new TypeError(`options.prefix: must be a Prometheus metric name, got ${JSON.stringify(prefix)}`);
  }
  const registers = options.registers ?? [client.register];
  const names: string[] = [];
  const make = (counter: boolean, name: string, suffix: string, labelNames: string[],
    collect: (this: Metric) => void) => {
    const C = counter ? client.Counter : client.Gauge;
    new C({ name, help: help(suffix), labelNames, registers, collect });
    names.push(name);
  };
  const remove = (name: string) => {
    for (const r of registers) (r as { removeSingleMetric?(n: string): void }).removeSingleMetric?.(name);
    const i = names.indexOf(name);
    if (i >= 0) names.splice(i, 1);
  };
  make(false, `${prefix}_breakers`, 'breakers', [], function () {
    this.set?.(registry.size);
  });
  const suffixes = [...COUNTERS, ...GAUGES];
  let watcher: ((b: Breaker, live: boolean) => void) | undefined;
  if (options.labels === true) {
    for (const suffix of suffixes) {
      const extra = suffix === 'latency_ms' ? ['quantile'] : [];
      make(COUNTERS.includes(suffix), `${prefix}_${suffix}`, suffix, ['name', 'group', ...extra], function () {
        this.reset();
        for (const b of registry) {
          const s = sample(b);
          if (s !== undefined) fill(this, suffix, s, { name: b.name, group: b.group });
        }
      });
    }
  } else {
    const own = new Map<Breaker, string[]>();
    const add = (b: Breaker) => {
      const mine: string[] = [];
      for (const suffix of suffixes) {
        const name = metricName(prefix, b.name, suffix);
        if (names.includes(name)) continue; // two breakers with one name: the first reports
        const extra = suffix === 'latency_ms' ? ['quantile'] : [];
        make(COUNTERS.includes(suffix), name, suffix, extra, function () {
          this.reset();
          const s = sample(b);
          if (s !== undefined) fill(this, suffix, s, {});
        });
        mine.push(name);
      }
      own.set(b, mine);
    };
    watcher = (b, live) => {
      if (live) add(b);
      else {
        for (const n of own.get(b) ?? []) remove(n);
        own.delete(b);
      }
    };
    for (const b of registry) add(b);
    watchers.add(watcher);
  }
  return () => {
    if (watcher !== undefined) watchers.delete(watcher);
    for (const n of [...names]) remove(n);
  };
}

export { CircuitBreaker };
