/**
 * The edge build (`dist/edge.js`: browser.ts's exports with platform-edge.ts in place
 * of platform.ts), plus `load`, which the `workerd` and `edge-light` entries call with
 * the module their runtime's bundler compiled.
 * @internal
 */
export * from './index.js';
export { default } from './index.js';
// The same module as the './platform.js' every other file imports (the build maps it here).
export { load } from './platform-edge.js';
