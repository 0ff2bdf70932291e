/** Errors made by the breaker (as opposed to errors of the action). */

const OUR_ERROR = Symbol.for('fusewire.ourError');

/** The codes of the errors a breaker makes (opossum's, plus `ESHUTDOWN`). */
export type ErrorCode = 'EOPENBREAKER' | 'ETIMEDOUT' | 'ESEMLOCKED' | 'ESHUTDOWN';

/** An error made by the breaker: `code` says which (opossum's shape: a plain Error). */
export interface CircuitBreakerError extends Error {
  code: ErrorCode;
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

/**
 * @internal Warns once per text, without throwing (a `FusewireWarning` process
 * warning in Node, `console.warn` elsewhere): for mistakes that must not fail a call.
 */
export function warn(text: string): void {
  if (warned.has(text)) return;
  warned.add(text);
  const p = (globalThis as { process?: { emitWarning?(m: string, t: string): void } }).process;
  if (typeof p?.emitWarning === 'function') p.emitWarning(text, 'FusewireWarning');
  else console.warn(`FusewireWarning: ${text}`);
}
