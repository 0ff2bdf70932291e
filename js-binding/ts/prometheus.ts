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
 * | `shadow_rejections` | counter | calls `mode: 'metrics_only'` would have refused |
 * | `cancelled` | counter | calls whose caller went away (an abort of a waiting call, or of a running one but its own deadline): the core counts them nowhere |
 * | `opened`, `half_opened`, `closed` | counter | transitions the breaker made |
 * | `breaker_state` | gauge | 0 closed, 1 open, 2 half-open |
 * | `in_flight` | gauge | calls holding a slot |
 * | `slow_calls` | gauge | calls in the rolling window at or over `slow_call.duration_threshold_ms` (with that rule on) |
 * | `latency_ms` | gauge, label `quantile` | latency percentiles over the window (p0 … p100) and `mean` |
 *
 * And two of the process: `<prefix>_breakers` (live breakers) and
 * `<prefix>_instance_losses` (a counter: wasm instances lost, each replaced: see `lose` and `revive` in engine.ts).
 *
 * With `{ labels: true }` the name moves into a `name` label instead:
 * `<prefix>_<suffix>{name="…", group="…"}` (one metric family per suffix).
 *
 * Live breakers that share a series (one name — or names equal once sanitised, `a-b`
 * and `a.b` — without labels; one name and group with them) report together: their
 * counters and `in_flight` add up (see `merge`).
 */
import { CircuitBreaker, liveBreakers, reapers, watchers, type Ref } from './breaker.js';
import { now } from './clock.js';
import { KIND_NAMES, S, losses, lost, out, served, type Exports } from './engine.js';
import { warn } from './errors.js';
import { PERCENTILES } from './status.js';

interface MetricConfig {
  name: string;
  help: string;
  labelNames?: string[];
  registers?: unknown[];
  collect?: (this: Metric) => void;
  aggregator?: string;
}

/**
 * How prom-client's `AggregatorRegistry.aggregate` merges one metric of several
 * threads' registries (each `worker_threads` worker has its own): counts, calls in
 * flight, breakers and instance losses add up (the default, `sum`); the state is the
 * highest a thread reports; latencies are averaged.
 */
function aggregator(suffix: string): string {
  return suffix === 'breaker_state' ? 'max' : suffix === 'latency_ms' ? 'average' : 'sum';
}

interface Metric {
  set?(labels: Record<string, string> | number, value?: number): void;
  inc?(labels: Record<string, string> | number, value?: number): void;
  reset(): void;
}

/** A metric class of prom-client, as this module calls it. */
type MetricClass = new (config: MetricConfig) => unknown;

/**
 * The part of prom-client this module uses: any `Gauge` and `Counter` constructors
 * (typed loosely, so every prom-client version's own types fit, whether imported as
 * `import * as client from 'prom-client'` or `import client = require('prom-client')`;
 * the module checks them when called).
 */
export interface PromClient {
  Gauge: new (config: never) => unknown;
  Counter: new (config: never) => unknown;
  register: unknown;
}

export interface PrometheusOptions {
  /** The prom-client module (`import * as client from 'prom-client'`). */
  client: PromClient;
  /** Registries to add the metrics to (default: `[client.register]`). */
  registers?: unknown[] | undefined;
  /** Metric name prefix (default `fusewire`). */
  prefix?: string | undefined;
  /** Put the breaker name in a label rather than in the metric name (default false). */
  labels?: boolean | undefined;
}

type Breaker = CircuitBreaker<any, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const EVENTS = [0, 1, 2, 12, 3, 4, 5, 6, 7, 8, 10, 11];
const QUANTILES = PERCENTILES.map(String);
/**
 * Counts of the core's snapshot beside the event kinds: `metrics_only`'s would-be
 * rejections (found by a review from resilience4j's side: a shadow breaker's
 * rejections were nowhere to be seen).
 */
const EXTRA = [S.SHADOW];
const EXTRA_NAMES = ['shadow_rejections'];
const COUNTERS = [...EVENTS.map((k) => KIND_NAMES[k]!), ...EXTRA_NAMES, 'cancelled', 'opened', 'half_opened', 'closed'];
const GAUGES = ['breaker_state', 'in_flight', 'slow_calls', 'latency_ms'];

/**
 * `<prefix>_<name>_<suffix>` with each character (code point) outside `[A-Za-z0-9_]`
 * replaced by one `_`, as the Envoy filter does.
 */
export function metricName(prefix: string, name: string, suffix: string): string {
  return `${prefix}_${name.replace(/[^A-Za-z0-9_]/gu, '_')}_${suffix}`;
}

interface Sample {
  at: number;
  counters: Record<string, number>;
  state: number;
  inFlight: number;
  /** Slow calls in the rolling window (the `slow_call` rule on). */
  slow: number;
  latency: Record<string, number>;
}

/**
 * The core's cumulative counts last read, of which key, and what earlier keys of the
 * breaker counted. A shared breaker's key expires after `keys.idle_ms` without calls
 * and is made again (another key id), counting from 0: the last read of the old key
 * (taken during the idle time, at any scrape interval below it) carries over, so the
 * exported counters never go down.
 */
interface Counts {
  key: number;
  last: number[];
  carried: number[];
}

/**
 * What an exporter keeps of a breaker it exports: the breaker itself only weakly (one
 * dropped without `shutdown()` is collected: found by review, an exporter holding
 * every breaker kept 20 000 dropped ones, 450 MB), and what its counts need once it
 * is gone — its handle, read one last time when it is collected (see `reapers`),
 * and its last read, which stands in for it until then.
 */
interface Member {
  ref: Ref;
  /** Its handle and the exports of its instance (kept up by `read` while it lives). */
  h: number;
  x: Exports;
  series: string;
  labels: Record<string, string>;
  transitions: { opened: number; halfOpened: number; closed: number };
  cancelled: { count: number };
  percentiles: boolean;
  /** The counts of the `status` it was primed with (its first key's only). */
  primed: number[] | undefined;
  counts: Counts | undefined;
  last: Sample | undefined;
  /** The collect run of `last` (see `run`). */
  run: number;
  /** A shared breaker: `slow_calls` and `shadow_rejections` are its store's, as every member's of the name. */
  shared: boolean;
}

/**
 * The collect run: prom-client collects every family of a scrape in one synchronous
 * run, so a member is read once per run and read again in the next. Ended by a
 * promise job (found by review: reads reused for 10 ms by the clock returned a
 * stale scrape, and one frozen for good under fake timers, which leave promise
 * jobs alone).
 */
let runId = 0;
let runOpen = false;
function run(): number {
  if (!runOpen) {
    runOpen = true;
    void Promise.resolve().then(() => {
      runOpen = false;
      runId++;
    });
  }
  return runId;
}

function member(b: Breaker, series: string, labels: Record<string, string>): Member {
  return {
    ref: b._ref, h: b._h, x: b._w, series, labels, transitions: b._transitions, cancelled: b._cancelled, percentiles: b._percentilesEnabled,
    primed: b._primed, counts: undefined, last: undefined, run: -1, shared: b._sharedState,
  };
}

/** The breaker's event counts since it was created (not the `status` it was primed with). */
function cumulative(m: Member, o: Float64Array): number[] {
  const key = o[S.KEY_ID]!;
  const n = EVENTS.length + EXTRA.length;
  const c = m.counts ??= { key, last: Array(n).fill(0), carried: Array(n).fill(0) };
  const base = m.primed;
  const raw = [...EVENTS.map((k) => o[S.CUMULATIVE + k]! - (base?.[k] ?? 0)), ...EXTRA.map((at) => o[at]!)];
  // A key made again restarts its event counts. The shadow count is no event count: a
  // shared breaker's is its store's, which drops when the store loses the state (a
  // Redis restart, an eviction), and `merge` keeps it from going down (found by
  // review: read as a new key, such a drop added every counter's total once more).
  if (key !== c.key || raw.some((v, i) => i < EVENTS.length && v < c.last[i]!)) {
    c.key = key;
    // (A shared breaker's shadow count lives on in its store: never carried.)
    c.carried = c.carried.map((v, i) => v + (m.shared && i >= EVENTS.length ? 0 : c.last[i]!));
    // The primed counts belonged to the first key only.
    if (base !== undefined) for (let i = 0; i < EVENTS.length; i++) raw[i]! += base[EVENTS[i]!] ?? 0;
    m.primed = undefined;
  } else if (!m.shared) {
    for (let i = EVENTS.length; i < n; i++) if (raw[i]! < c.last[i]!) c.carried[i]! += c.last[i]!;
  }
  c.last = raw;
  return raw.map((v, i) => Math.max(0, v) + c.carried[i]!);
}

/** Reads a member's core at `t` (its handle still holds its key). */
function read(m: Member, t: number): Sample | undefined {
  const b = m.ref.deref();
  if (b !== undefined && b._w !== m.x) {
    // A new core since (see `_rebind`): its counts carry on from the last read.
    m.h = b._h;
    m.x = b._w;
    if (m.counts !== undefined) m.counts.key = NaN;
  }
  if (m.x.fw_snapshot(m.h, t) !== 0) {
    // The instance is lost (or its core's, till it takes a new one): the counters stay,
    // and nothing is open or in flight.
    return (lost || m.x !== served) && m.last !== undefined ? { ...m.last, state: 0, inFlight: 0, slow: 0, latency: {} } : undefined;
  }
  const o = out();
  const counters: Record<string, number> = {};
  const total = cumulative(m, o);
  EVENTS.forEach((k, i) => {
    counters[KIND_NAMES[k]!] = total[i]!;
  });
  EXTRA_NAMES.forEach((name, i) => {
    counters[name] = total[EVENTS.length + i]!;
  });
  counters['cancelled'] = m.cancelled.count;
  counters['opened'] = m.transitions.opened;
  counters['half_opened'] = m.transitions.halfOpened;
  counters['closed'] = m.transitions.closed;
  // None without latencies in the window (or with percentiles disabled): a 0 would
  // read as a real latency.
  const latency: Record<string, number> = {};
  if (m.percentiles && o[S.LATENCIES]! > 0) {
    QUANTILES.forEach((q, i) => {
      latency[q] = o[S.PERCENTILES + i]!;
    });
    latency['mean'] = o[S.MEAN]!;
  }
  m.run = run();
  return (m.last = { at: t, counters, state: o[S.PHASE]!, inFlight: o[S.IN_FLIGHT]!, slow: o[S.SLOW]!, latency });
}

/**
 * One read of a live member's core per scrape (per collect run); a collected one's
 * last read (its counters: a counter never goes down) until its final read.
 * `final`: the values of a breaker shutting down (its core is still there). Never
 * throws: a listener that throws on a transition the refresh finds (a shared
 * breaker's) is warned of, and the scrape goes on (found by review: it failed the
 * whole scrape, every metric of the app gone).
 */
function sample(m: Member, final = false): Sample | undefined {
  const b = m.ref.deref();
  if (b === undefined) return m.last === undefined ? undefined : { ...m.last, state: 0, inFlight: 0, slow: 0, latency: {} };
  if (b.isShutdown && !final) return undefined;
  if (!final && m.last !== undefined && m.run === runId && runOpen) return m.last;
  try {
    const t = b._now();
    if (!final) {
      try {
        b._refresh(t);
      } catch (e) {
        warn(`fusewire/prometheus: breaker ${JSON.stringify(b.name)}: a listener threw during a scrape: ${(e as Error)?.message ?? e}`);
      }
    }
    return read(m, t);
  } catch {
    return m.last;
  }
}

function help(suffix: string): string {
  if (suffix === 'breaker_state') return 'breaker state: 0 closed, 1 open, 2 half-open';
  if (suffix === 'in_flight') return 'calls holding a slot';
  if (suffix === 'slow_calls') return 'calls in the rolling window at or over slow_call.duration_threshold_ms (the slow_call rule on)';
  if (suffix === 'latency_ms') return 'latency percentiles over the rolling window (ms)';
  if (suffix === 'breakers') return 'live fusewire breakers';
  if (suffix === 'instance_losses') return 'WebAssembly instances lost (a trap, or the stack running out inside one), each replaced: calls then running settled unprotected, and every breaker started over';
  if (suffix === 'shadow_rejections') return 'calls metrics_only would have refused, since the breaker was created';
  if (suffix === 'cancelled') return 'calls whose caller went away (an abort of a waiting call, or of a running one but its own deadline; counted in no other series), since the breaker was created';
  return `${suffix} since the breaker was created`;
}

/** How open a `breaker_state` value is (0 closed, 1 open, 2 half-open). */
const OPENNESS = [0, 2, 1];

/**
 * The value of several breakers that report under one series (the same name, or
 * names equal once sanitised): counters, `in_flight` and `slow_calls` add up, `breaker_state` is
 * the most open one's (open, then half-open, then closed), latency is the newest
 * breaker's (percentiles do not add up). `retired`: the final counters of breakers
 * that shut down or were collected while others of the series lived on, so a counter never goes down
 * (Prometheus would read a drop as a reset and `rate()` a phantom increase).
 */
function merge(ms: Iterable<Member>, retired?: Record<string, number>, floor?: Record<string, number>): Sample | undefined {
  let m: Sample | undefined;
  // A shared breaker's `slow_calls` and `shadow_rejections` are its store's: every
  // member of the name reports the whole, so the highest counts, once (found by
  // review: two members read double).
  let sharedSlow = 0;
  let sharedShadow = 0;
  for (const member of ms) {
    const s = sample(member);
    if (s === undefined) continue;
    m ??= { at: s.at, counters: {}, state: 0, inFlight: 0, slow: 0, latency: {} };
    for (const [k, v] of Object.entries(s.counters)) {
      if (member.shared && k === SHADOW) sharedShadow = Math.max(sharedShadow, v);
      else m.counters[k] = (m.counters[k] ?? 0) + v;
    }
    m.inFlight += s.inFlight;
    if (member.shared) sharedSlow = Math.max(sharedSlow, s.slow);
    else m.slow += s.slow;
    if (OPENNESS[s.state]! > OPENNESS[m.state]!) m.state = s.state;
    if (member.ref.deref() !== undefined) m.latency = s.latency; // a collected one has none
  }
  if (m !== undefined) {
    m.slow += sharedSlow;
    m.counters[SHADOW] = (m.counters[SHADOW] ?? 0) + sharedShadow;
    if (retired !== undefined) {
      for (const [k, v] of Object.entries(retired)) m.counters[k] = (m.counters[k] ?? 0) + v;
    }
    // A store's count read by members whose views differ a little: never down.
    if (floor !== undefined) m.counters[SHADOW] = floor[SHADOW] = Math.max(floor[SHADOW] ?? 0, m.counters[SHADOW]!);
  }
  return m;
}

const SHADOW = 'shadow_rejections';

/** Writes the value of `suffix` into metric `m` (reset first). */
function fill(m: Metric, suffix: string, s: Sample, labels: Record<string, string>): void {
  if (suffix === 'breaker_state') m.set?.(labels, s.state);
  else if (suffix === 'in_flight') m.set?.(labels, s.inFlight);
  else if (suffix === 'slow_calls') m.set?.(labels, s.slow);
  else if (suffix === 'latency_ms') {
    for (const [q, v] of Object.entries(s.latency)) m.set?.({ ...labels, quantile: q }, v);
  } else m.inc?.(labels, s.counters[suffix] ?? 0);
}

/**
 * Live registrations by registry and prefix: the function that removes each. Weak:
 * a registry dropped by its owner is not kept (found by review: a test suite's
 * `new Registry()` per test stayed alive for good).
 */
const active = new WeakMap<object, Map<string, () => void>>();

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
  // This copy's earlier registration of the prefix on a registry is replaced: a module
  // evaluated again (a dev server's reload: found by a Next.js review, `next dev`
  // threw "already registered" on every edit) registers again; and a registry cleared
  // since (`registry.clear()` between tests) must not get its metrics back. The
  // earlier `register()`'s remover then does nothing.
  for (const r of registers) active.get(r as object)?.get(prefix)?.();
  // A set: a breaker's 21 names are checked against every one made (found by review:
  // with an array, making the 8 000th breaker took 16 ms).
  const names = new Set<string>();
  const make = (counter: boolean, name: string, suffix: string, labelNames: string[],
    collect: (this: Metric) => void) => {
    const C = (counter ? client.Counter : client.Gauge) as unknown as MetricClass;
    // prom-client registers a metric in each registry in turn and throws at the first
    // that has the name, leaving it in those before (found by review): ask them all.
    for (const r of registers) {
      if ((r as { getSingleMetric?(n: string): unknown }).getSingleMetric?.(name)) {
        throw new Error(`A metric with the name ${name} has already been registered.`);
      }
    }
    new C({ name, help: help(suffix), labelNames, registers, collect, aggregator: aggregator(suffix) });
    names.add(name);
  };
  /** `make`, for a breaker's metric: a failure (the name is taken in a registry) warns. */
  const tryMake = (...a: Parameters<typeof make>): boolean => {
    try {
      make(...a);
      return true;
    } catch (e) {
      warn(`fusewire/prometheus: metric ${a[1]} not registered: ${(e as Error)?.message ?? e}`);
      return false;
    }
  };
  const remove = (name: string) => {
    for (const r of registers) (r as { removeSingleMetric?(n: string): void }).removeSingleMetric?.(name);
    names.delete(name);
  };
  // Taken (another copy of fusewire on the same registry, bundled into a dependency):
  // warned (found by review: the app's register() threw), and its breakers' metrics
  // follow, each warned where a name is taken.
  tryMake(false, `${prefix}_breakers`, 'breakers', [], function () {
    this.set?.(liveBreakers().length);
  });
  // Alert on its increase: each loss started every breaker over (its counters carry on).
  tryMake(true, `${prefix}_instance_losses`, 'instance_losses', [], function () {
    this.reset();
    this.inc?.(losses);
  });
  const suffixes = [...COUNTERS, ...GAUGES];
  const labels = options.labels === true;
  // Breakers with one name and group (labels), or one sanitised name (without), share
  // a series (see `merge`).
  const seriesKey = labels
    ? (b: Breaker) => JSON.stringify([b.name, b.group])
    : (b: Breaker) => metricName(prefix, b.name, '');
  /** A series: its members, the counters of those gone while others live on, its families. */
  interface Series { labels: Record<string, string>; ms: Set<Member>; retired: Record<string, number>; floor: Record<string, number>; mine: string[] }
  const members = new Map<Ref, Member>();
  const series = new Map<string, Series>();
  let changes = 0;
  /** Without labels: the families of a new series, named for its first breaker. */
  const families = (b: Breaker, e: Series) => {
    for (const suffix of suffixes) {
      const name = metricName(prefix, b.name, suffix);
      // Taken by another name's metric (`a` + `half_opened`, `a_half` + `opened`):
      // the name there first keeps it.
      if (names.has(name)) {
        warn(`fusewire/prometheus: breaker ${JSON.stringify(b.name)}'s metric ${name} is another breaker's; use { labels: true } to keep them apart`);
        continue;
      }
      const extra = suffix === 'latency_ms' ? ['quantile'] : [];
      const made = tryMake(COUNTERS.includes(suffix), name, suffix, extra, function () {
        this.reset();
        const s = merge(e.ms, e.retired, e.floor);
        if (s !== undefined) fill(this, suffix, s, {});
      });
      if (made) e.mine.push(name);
    }
  };
  const join = (b: Breaker) => {
    if (members.has(b._ref)) return;
    const key = seriesKey(b);
    const m = member(b, key, labels ? { name: b.name, group: b.group } : {});
    members.set(b._ref, m);
    changes++;
    let e = series.get(key);
    if (e === undefined) {
      series.set(key, (e = { labels: m.labels, ms: new Set(), retired: {}, floor: {}, mine: [] }));
      if (!labels) families(b, e);
    }
    e.ms.add(m);
  };
  /** `m` leaves its series, its `final` counters staying in it while others live on. */
  const leave = (m: Member, final: Sample | undefined) => {
    members.delete(m.ref);
    changes++;
    const e = series.get(m.series);
    if (e === undefined || !e.ms.delete(m)) return;
    if (e.ms.size === 0) {
      // The series goes with its last breaker.
      for (const n of e.mine) remove(n);
      series.delete(m.series);
      return;
    }
    for (const k of COUNTERS) {
      // A shared member's store count lives on in the others (and the floor).
      if (m.shared && k === SHADOW) continue;
      e.retired[k] = (e.retired[k] ?? 0) + (final?.counters[k] ?? 0);
    }
  };
  const watcher = (b: Breaker, live: boolean) => {
    if (live) join(b);
    else {
      const m = members.get(b._ref);
      if (m !== undefined) leave(m, sample(m, true));
    }
  };
  // Collected without `shutdown()`: its final counts, read before its key is freed.
  const reaper = (h: number, ref: Ref, x: Exports) => {
    const m = members.get(ref);
    if (m !== undefined && m.x !== x) {
      // Its last core (see `read`).
      m.h = h;
      m.x = x;
      if (m.counts !== undefined) m.counts.key = NaN;
    }
    if (m !== undefined) leave(m, read(m, now()) ?? m.last);
  };
  if (labels) {
    // Every series' value, computed once per scrape and read by all 21 families (found
    // by review: each family grouped and merged every breaker itself, 1.2 s per scrape
    // at 8 000 breakers). prom-client collects every family of a scrape in one
    // synchronous run: the view lasts until that run ends, and is made again for a
    // family that read it already (a second scrape in the same run) or after a
    // breaker came or went.
    let view: { changes: number; run: number; read: Set<string>; rows: [Record<string, string>, Sample][] } | undefined;
    const rows = (suffix: string) => {
      // (The collect run, not a `queueMicrotask`: fake timers that fake it kept one
      // view for good.)
      const now = run();
      if (view === undefined || view.run !== now || view.changes !== changes || view.read.has(suffix)) {
        const merged: [Record<string, string>, Sample][] = [];
        for (const e of series.values()) {
          const s = merge(e.ms, e.retired, e.floor);
          if (s !== undefined) merged.push([e.labels, s]);
        }
        view = { changes, run: now, read: new Set<string>(), rows: merged };
      }
      view.read.add(suffix);
      return view.rows;
    };
    try {
      for (const suffix of suffixes) {
        const extra = suffix === 'latency_ms' ? ['quantile'] : [];
        make(COUNTERS.includes(suffix), `${prefix}_${suffix}`, suffix, ['name', 'group', ...extra], function () {
          this.reset();
          for (const [labels, s] of rows(suffix)) fill(this, suffix, s, labels);
        });
      }
    } catch (e) {
      // A name taken (the app's own metric, another copy of fusewire): nothing of this
      // registration stays behind (found by review: the families made before it did,
      // with no remover, and every retry threw).
      for (const n of [...names]) remove(n);
      throw e;
    }
  }
  for (const b of liveBreakers()) join(b);
  watchers.add(watcher);
  reapers.add(reaper);
  const dispose = () => {
    watchers.delete(watcher);
    reapers.delete(reaper);
    for (const n of [...names]) remove(n);
    for (const r of registers) {
      const m = active.get(r as object);
      if (m?.get(prefix) === dispose) m.delete(prefix);
    }
  };
  for (const r of registers) {
    let m = active.get(r as object);
    if (m === undefined) active.set(r as object, (m = new Map()));
    m.set(prefix, dispose);
  }
  return dispose;
}

export { CircuitBreaker };
