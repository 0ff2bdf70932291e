/**
 * The host clock, read once per call: milliseconds (fractional) on a monotonic
 * clock (`performance.now()`), handed to the core, which converts to nanoseconds.
 *
 * Test fakes: when the global `Date` is a fake (node:test `mock.timers` with
 * `apis: ['Date', 'setTimeout', …]`, sinon / jest fake timers) — installed before or
 * after this module was loaded — the clock follows `Date.now()` instead, continuing
 * from where it was, so code under fake timers sees time move exactly as the fake
 * says. A `Date` is a fake when its `now` is not the engine's own (its source is not
 * `[native code]`); that is checked again only when `globalThis.Date` is replaced,
 * so a call pays one identity compare. Timers are always looked up on `globalThis`
 * when armed, so faked `setTimeout` drives the breaker's one timer.
 * @internal
 */

const perf: { now(): number } =
  (globalThis as { performance?: { now(): number } }).performance ?? Date;
const fnSource = Function.prototype.toString;

/** Whether `D` is a fake `Date`: its `now` is not native code. */
function isFake(D: DateConstructor): boolean {
  try {
    return !/\[native code\]\s*\}\s*$/.test(fnSource.call(D.now));
  } catch {
    // `now` is not a function or hides its source: not the engine's Date.
    return true;
  }
}

/** The `Date` last looked at, and whether it is a fake. */
let seen: DateConstructor = globalThis.Date;
let seenFake = isFake(seen);
let faked = false;
let offset = 0;
let last = 0;

/** Now, in milliseconds. */
export function now(): number {
  const D = globalThis.Date;
  if (D !== seen) {
    seen = D;
    seenFake = isFake(D);
  }
  const fake = seenFake;
  const raw = fake ? D.now() : perf.now();
  if (fake !== faked) {
    // The source changed: continue from the last reading.
    faked = fake;
    offset = last - raw;
  }
  const t = raw + offset;
  last = t;
  return t;
}

/** Wall-clock milliseconds (`Date.now()`, faked or not). */
export function wallNow(): number {
  return globalThis.Date.now();
}

type Timer = { ref?(): unknown; unref?(): unknown } | number;

/** Arms a timer through the current global `setTimeout` (delay clamped to its range). */
export function arm(fn: () => void, delayMs: number, ref: boolean): Timer {
  // A float excess of a nanosecond (a deadline read back in ms) is no extra ms.
  let d = Math.ceil(delayMs - 1e-6);
  if (!(d >= 1)) d = 1;
  if (d > 2_147_483_647) d = 2_147_483_647;
  const t = globalThis.setTimeout(fn, d) as unknown as Timer;
  if (!ref) unref(t);
  return t;
}

export function disarm(t: Timer | undefined): void {
  if (t !== undefined) globalThis.clearTimeout(t as unknown as ReturnType<typeof setTimeout>);
}

export function ref(t: Timer | undefined): void {
  if (t !== undefined && typeof t === 'object' && typeof t.ref === 'function') t.ref();
}

export function unref(t: Timer | undefined): void {
  if (t !== undefined && typeof t === 'object' && typeof t.unref === 'function') t.unref();
}

export type { Timer };
