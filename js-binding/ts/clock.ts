/**
 * The host clock, read once per call: milliseconds (fractional) on a monotonic
 * clock (`performance.now()`), handed to the core, which converts to nanoseconds.
 *
 * Test fakes: when something replaces the global `Date` (node:test `mock.timers`
 * with `apis: ['Date', 'setTimeout', …]`, sinon / jest fake timers), the clock
 * follows `Date.now()` instead, continuing from where it was, so code under fake
 * timers sees time move exactly as the fake says. Timers are always looked up on
 * `globalThis` when armed, so faked `setTimeout` drives the breaker's one timer.
 * @internal
 */

const RealDate = Date;
const perf: { now(): number } =
  (globalThis as { performance?: { now(): number } }).performance ?? RealDate;
let faked = false;
let offset = 0;
let last = 0;

/** Now, in milliseconds. */
export function now(): number {
  const D = globalThis.Date;
  const fake = D !== RealDate;
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
