/** Errors made by the breaker (as opposed to errors of the action). */

const OUR_ERROR = Symbol.for('fusewire.ourError');

/** The codes of the errors a breaker makes (opossum's, plus `ESHUTDOWN`). */
export type ErrorCode = 'EOPENBREAKER' | 'ETIMEDOUT' | 'ESEMLOCKED' | 'ESHUTDOWN';

/**
 * Why the core refused a call (`EOPENBREAKER`: the first five and `no_key`;
 * `ESEMLOCKED`: the rest). `degraded`: a shared store could not grant a probe lease
 * or a slot in time. `no_key`: the breaker's key expired and the instance had no
 * memory to take it again (the call counts nowhere).
 */
export type Refusal = 'open' | 'forced_open' | 'probes_exhausted' | 'throttled' | 'slow_start' |
  'bulkhead_full' | 'queue_full' | 'wait_expired' | 'degraded' | 'no_key';

/** An error made by the breaker: `code` says which (opossum's shape: a plain Error). */
export interface CircuitBreakerError extends Error {
  code: ErrorCode;
  /**
   * A refusal's cause: an open breaker (`open`, `forced_open`), a half-open one with
   * its probes out (`probes_exhausted`), the adaptive throttle or slow-start ramp of a
   * closed one (`throttled`, `slow_start`), a full bulkhead (`bulkhead_full`,
   * `queue_full`), a queued call's wait ending (`wait_expired`), or a shared store
   * that could not grant a lease or slot in time (`degraded`).
   */
  refusal?: Refusal;
  /**
   * `EOPENBREAKER` from an open breaker: ms until it lets calls through again (the
   * rest of its open period; on a shared breaker, the fleet's). Absent when no end
   * is known: half-open with its probes out, or held open by `breaker.mode:
   * 'forced_open'`.
   */
  retryAfter?: number;
}

/** @internal */
export function ourError(message: string, code: ErrorCode): CircuitBreakerError {
  const e = new Error(message) as CircuitBreakerError & { [OUR_ERROR]?: boolean };
  e.code = code;
  e[OUR_ERROR] = true;
  return e;
}

/** Whether `error` was made by a breaker (opossum's `CircuitBreaker.isOurError`). */
export function isOurError(error: unknown): error is CircuitBreakerError {
  return typeof error === 'object' && error !== null &&
    (error as { [OUR_ERROR]?: boolean })[OUR_ERROR] === true;
}

/** @internal */
export function describe(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v.length > 60 ? v.slice(0, 60) + '…' : v);
  if (typeof v === 'number' || typeof v === 'boolean' || v === undefined || v === null) {
    return String(v);
  }
  if (typeof v === 'bigint') return `${v}n (a BigInt)`;
  if (typeof v === 'symbol') return v.toString();
  if (typeof v === 'function') return 'a function';
  if (Array.isArray(v)) return 'an array';
  return 'an object';
}

/** @internal A TypeError naming the option and the reason. */
export function optionError(path: string, reason: string): TypeError {
  return new TypeError(`${path}: ${reason}`);
}

const warned = new Set<string>();
/** Texts remembered at most (they name breakers: found by review, a breaker made per request grew the set for good). */
const WARNED_MAX = 1000;

/**
 * @internal Warns once per text, without throwing (a `FusewireWarning` process
 * warning in Node, `console.warn` elsewhere): for mistakes that must not fail a call.
 * Past `WARNED_MAX` texts the memory starts over (a text may then be told again).
 */
export function warn(text: string): void {
  if (warned.has(text)) return;
  if (warned.size >= WARNED_MAX) warned.clear();
  warned.add(text);
  const p = (globalThis as { process?: { emitWarning?(m: string, t: string): void } }).process;
  try {
    if (typeof p?.emitWarning === 'function') {
      p.emitWarning(text, 'FusewireWarning');
      return;
    }
  } catch {
    // Defined to throw (Next.js's Edge runtime): the console, as elsewhere.
  }
  console.warn(`FusewireWarning: ${text}`);
}

/**
 * @internal What a fusewire object is, readable across copies of the package (one
 * bundled into a dependency, two versions installed), where `instanceof` fails: a
 * `Symbol.for` key, as `isOurError`'s mark.
 */
export const KIND = Symbol.for('fusewire.kind');

/** @internal Marks a class's instances as `kind` (not enumerable). */
export function brand(cls: { prototype: object }, kind: string): void {
  Object.defineProperty(cls.prototype, KIND, { value: kind });
}

/** @internal The kind of a fusewire object from any copy of the package, if it is one. */
export function kindOf(v: unknown): string | undefined {
  if ((typeof v !== 'object' && typeof v !== 'function') || v === null) return undefined;
  const k = (v as { [KIND]?: unknown })[KIND];
  return typeof k === 'string' ? k : undefined;
}
