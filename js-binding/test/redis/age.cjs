// Preloaded by a fleet member (`--require`) to make its process look AGE_MS older:
// perf_hooks' clock counts from a start that much earlier, as a long-running
// process's does (fleet.test.mjs: processes started an hour apart).
const { performance } = require('node:perf_hooks');

const age = Number(process.env.AGE_MS ?? 0);
const now = performance.now.bind(performance);
const origin = performance.timeOrigin;
Object.defineProperty(performance, 'now', { value: () => now() + age, configurable: true });
Object.defineProperty(performance, 'timeOrigin', { get: () => origin - age, configurable: true });
