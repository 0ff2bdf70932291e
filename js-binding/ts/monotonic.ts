/**
 * The engine's monotonic clock in Node: perf_hooks' `performance`, which a fake
 * global `performance` installed before fusewire loaded (a test runner's setup file)
 * does not replace. The browser bundle swaps this module for monotonic-browser.ts.
 * @internal
 */
export { performance } from 'node:perf_hooks';
