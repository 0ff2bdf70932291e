// Test helpers: deterministic time on Node 18–24 and small utilities.
//
// node:test's mock.timers fakes setTimeout/setInterval (and, from Node 20.11, Date).
// fusewire's clock follows the global Date whenever it is replaced, so these helpers
// install a fake Date of their own next to mock.timers' fake timers and advance both
// together in small steps (timers see the time they were due at, ± a step).
//
// Node 18's experimental MockTimers loses timers once one is cleared (its queue breaks
// after clearTimeout), so there the helpers fake the timers themselves, with the same
// semantics: a timer runs when the fake clock reaches its due time.
import { mock } from 'node:test';

const RealDate = globalThis.Date;
const NODE_MAJOR = Number(process.versions.node.split('.')[0]);

function ownTimers(clock) {
  const saved = {
    setTimeout: globalThis.setTimeout, clearTimeout: globalThis.clearTimeout,
    setInterval: globalThis.setInterval, clearInterval: globalThis.clearInterval,
  };
  const timers = new Map();
  let seq = 0;
  const add = (fn, ms, every, args) => {
    const id = ++seq;
    const d = Math.max(1, Number(ms) || 0);
    timers.set(id, { fn, at: clock() + d, every: every ? d : 0, args, seq: id });
    return { id, ref() { return this; }, unref() { return this; }, hasRef: () => false, [Symbol.toPrimitive]: () => id };
  };
  const del = (t) => {
    if (t !== undefined && t !== null) timers.delete(typeof t === 'object' ? t.id : t);
  };
  globalThis.setTimeout = (fn, ms, ...args) => add(fn, ms, false, args);
  globalThis.setInterval = (fn, ms, ...args) => add(fn, ms, true, args);
  globalThis.clearTimeout = del;
  globalThis.clearInterval = del;
  return {
    run(now) {
      for (;;) {
        let next;
        for (const [id, t] of timers) {
          if (t.at <= now && (next === undefined || t.at < next[1].at || (t.at === next[1].at && t.seq < next[1].seq))) next = [id, t];
        }
        if (next === undefined) return;
        const [id, t] = next;
        if (t.every > 0) t.at += t.every;
        else timers.delete(id);
        t.fn(...t.args);
      }
    },
    restore() {
      Object.assign(globalThis, saved);
    },
  };
}

export function fakeTime(start = 1_700_000_000_000) {
  let t = start;
  class FakeDate extends RealDate {
    constructor(...args) {
      if (args.length === 0) super(t);
      else super(...args);
    }
    static now() {
      return t;
    }
  }
  let own;
  if (NODE_MAJOR < 20) own = ownTimers(() => t);
  else mock.timers.enable({ apis: ['setTimeout', 'setInterval'] });
  globalThis.Date = FakeDate;
  return {
    now: () => t,
    /** Advances the clock by `ms`, running timers as they come due. */
    tick(ms, step = 1) {
      const end = t + ms;
      while (t < end) {
        const d = Math.min(step, end - t);
        t += d;
        if (own !== undefined) own.run(t);
        else mock.timers.tick(d);
      }
    },
    restore() {
      globalThis.Date = RealDate;
      if (own !== undefined) own.restore();
      else mock.timers.reset();
    },
  };
}

/** Lets pending promise reactions run (a few turns of the microtask queue). */
export async function flush(turns = 10) {
  for (let i = 0; i < turns; i++) await Promise.resolve();
}

/** Records every event of `emitter` (names given) as [name, ...args]. */
export function record(emitter, names) {
  const log = [];
  for (const n of names) emitter.on(n, (...a) => log.push([n, ...a]));
  return log;
}

export const EVENTS = [
  'fire', 'success', 'failure', 'timeout', 'reject', 'open', 'halfOpen', 'close', 'fallback',
  'semaphoreLocked', 'cacheHit', 'cacheMiss', 'coalesceCacheHit', 'coalesceCacheMiss',
  'healthCheckFailed', 'shutdown', 'snapshot',
];

/** A promise with its resolve/reject (a controllable action result). */
export function deferred() {
  let resolve, reject;
  const promise = new Promise((a, b) => {
    resolve = a;
    reject = b;
  });
  return { promise, resolve, reject };
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
