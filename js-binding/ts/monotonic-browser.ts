/**
 * The engine's monotonic clock in browsers: the global `performance` as fusewire
 * finds it when it loads.
 * @internal
 */
export const performance: { now(): number } = globalThis.performance ?? Date;
