/**
 * The host clock, read once per call: milliseconds (fractional) on a monotonic
 * clock (`performance.now()`) on the timeline every process and worker shares
 * (`performance.timeOrigin` + `now()`), handed to the core, which converts to
 * nanoseconds.
 *
 * Test fakes are followed, so code under fake timers sees time move exactly as the
 * fake says:
 * - sinon's fake timers (Jest's modern timers, Vitest's, `@sinonjs/fake-timers`)
 *   stamp the `setTimeout` they install with their clock: its monotonic time is
 *   read (advanced by `tick` / `advanceTimersByTime`, not by `setSystemTime`), with
 *   or without a faked `Date`;
 * - else a fake global `Date` (node:test `mock.timers`, others): `Date.now()`. A
 *   `Date` is a fake when its `now` is not the engine's own (its source is not
 *   `[native code]`).
 * - Jest's legacy timers keep no clock: a breaker timer they fire moves the time to
 *   its deadline (`fired`).
 * The source is chosen again when `globalThis.Date` is replaced, when a timer is
 * armed or fires early, and (while following a sinon clock) when that clock is gone;
 * a call pays one identity compare. Whatever the source, time continues from the
 * last reading and never goes back. Timers are always looked up on `globalThis` when
 * armed, so a faked `setTimeout` drives the breaker's one timer.
 * @internal
 */

import { performance } from './monotonic.js';

type Perf = { now(): number };
/** A sinon fake clock, as its fake `setTimeout` carries it. */
type FakeClock = { now: number; performance?: Perf };

/** The engine's monotonic clock (a constant: read on every call). */
const monotonic: Perf = performance;

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

/** The sinon clock behind the global `setTimeout`, if it is one of sinon's fakes. */
function sinonClock(): FakeClock | undefined {
  const c = (globalThis.setTimeout as unknown as { clock?: FakeClock } | undefined)?.clock;
  return typeof c === 'object' && c !== null && typeof c.now === 'number' ? c : undefined;
}

const REAL = 0;
const SINON = 1;
const DATE = 2;

/** The `Date` last looked at, and whether it is a fake. */
let seen: DateConstructor = globalThis.Date;
let seenFake = isFake(seen);
let source = REAL;
let sinon: FakeClock | undefined;
/** The source changed: the next reading continues from the last. */
let rebase = false;
/**
 * Time is `base + (source reading − origin)`: the difference of two readings is exact
 * even where a fake `Date` reads 1.7e12 (an offset added to it would round to 0.2 µs).
 * In a typed array: stored unboxed on every reading.
 */
const ORIGIN = 0;
const BASE = 1;
const LAST = 2;
const at = new Float64Array(3);
// Time starts on the timeline every process, thread and Web Worker shares: the
// wall clock at this one's start, then monotonic (`timeOrigin` + `now()`). Breakers
// sharing a store compare each other's times (found by review: with each process's
// or Web Worker's own `now()`, which counts from its start, a trip by one started
// later was over at once for the others, or not counted at all).
at[BASE] = at[LAST] = timeOrigin();

function timeOrigin(): number {
  const t = (monotonic as { timeOrigin?: unknown }).timeOrigin;
  return typeof t === 'number' && Number.isFinite(t) && t > 0 ? t : 0;
}

/**
 * How many times the source changed: fake timers came or went, and with them the
 * scheduling functions a breaker found (a task scheduled through fakes that are gone
 * never runs).
 */
export let epoch = 0;

/** Chooses the source. */
function pick(): void {
  sinon = sinonClock();
  const next = sinon !== undefined ? SINON : seenFake ? DATE : REAL;
  if (next !== source) {
    source = next;
    rebase = true;
    epoch++;
  }
}
pick();

/** Looks for a fake clock again (a timer armed, or one that fired early). */
export function recheck(): void {
  if (sinonClock() !== sinon) pick();
}

/**
 * The timer armed for `due` fired early by the clock. Under fake timers that keep no
 * clock to read (Jest's legacy timers: a mock `setTimeout`) the time is then at least
 * `due`: the clock moves there. Returns whether it did (real timers: never, as a busy
 * event loop also fires them early).
 */
export function fired(due: number): boolean {
  if ((globalThis.setTimeout as unknown as { _isMockFunction?: unknown })._isMockFunction !== true) return false;
  const t = now();
  if (t >= due) return false;
  at[BASE]! += due - t;
  at[LAST] = due;
  return true;
}

/** Now, in milliseconds. */
export function now(): number {
  // The global `Date` as a free name: a faster load than through `globalThis`.
  const D = Date;
  if (D !== seen) {
    seen = D;
    seenFake = isFake(D);
    pick();
  } else if (source === SINON && sinonClock() !== sinon) {
    pick();
  }
  let raw: number;
  if (source === REAL) raw = monotonic.now();
  else if (source === SINON) raw = sinon!.performance?.now() ?? sinon!.now;
  else raw = D.now();
  const a = at;
  if (rebase) {
    rebase = false;
    a[ORIGIN] = raw;
    a[BASE] = a[LAST]!;
  }
  let t = a[BASE]! + (raw - a[ORIGIN]!);
  if (t < a[LAST]!) {
    // A fake Date set back: time stands still until it passes the last reading.
    a[ORIGIN] = raw;
    a[BASE] = a[LAST]!;
    t = a[LAST]!;
  }
  a[LAST] = t;
  return t;
}

/** Wall-clock milliseconds (`Date.now()`, faked or not). */
export function wallNow(): number {
  return globalThis.Date.now();
}

type Timer = { ref?(): unknown; unref?(): unknown } | number;

/**
 * One timer, cancelled with the `clearTimeout` of the `setTimeout` that armed it:
 * fake timers come and go, and a fake's `clearTimeout` given a real handle leaves it
 * running (and warns), as Node's given a fake one does nothing.
 */
export class TimerSlot {
  /** The armed timer, if any. */
  timer: Timer | undefined = undefined;
  /** The clock's `epoch` when it was armed. */
  epoch = -1;
  private _clear: ((t: never) => void) | undefined = undefined;

  /** Arms it through the current global `setTimeout` (delay clamped to its range), cancelling the one before. */
  arm(fn: () => void, delayMs: number, ref: boolean): void {
    this.cancel();
    recheck();
    // A float excess of a nanosecond (a deadline read back in ms) is no extra ms.
    let d = Math.ceil(delayMs - 1e-6);
    if (!(d >= 1)) d = 1;
    if (d > 2_147_483_647) d = 2_147_483_647;
    this._clear = globalThis.clearTimeout as (t: never) => void;
    this.epoch = epoch;
    let t: Timer;
    try {
      t = globalThis.setTimeout(fn, d) as unknown as Timer;
    } catch {
      // Refused outside a request (workerd's global scope: a breaker made when the
      // Worker loads, found by review): left unarmed, a call arms it.
      this.epoch = -1;
      return;
    }
    if (!ref) unref(t);
    this.timer = t;
  }

  /** Cancels the armed timer, if any. */
  cancel(): void {
    const t = this.timer;
    if (t === undefined) return;
    this.timer = undefined;
    // Called as a plain function: a browser's `clearTimeout` throws "Illegal
    // invocation" when called on another object.
    const clear = this._clear!;
    try {
      clear(t as never);
    } catch {
      // A fake's `clearTimeout` that throws once the fakes are gone (Deno std's
      // FakeTime: "no fake time"; found by review: `shutdown()` and the next `fire()`
      // threw it). Its timer died with the fakes.
    }
  }

  /** Whether a timer is armed through scheduling functions that are gone since (it never fires). */
  get stale(): boolean {
    return this.timer !== undefined && this.epoch !== epoch;
  }
}

export function ref(t: Timer | undefined): void {
  if (t !== undefined && typeof t === 'object' && typeof t.ref === 'function') t.ref();
}

export function unref(t: Timer | undefined): void {
  if (t !== undefined && typeof t === 'object' && typeof t.unref === 'function') t.unref();
}

export type { Timer };
