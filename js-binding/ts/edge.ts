/**
 * The edge build (`dist/edge.js`: browser.ts's exports with platform-edge.ts in place
 * of platform.ts), plus `load`, which the `workerd` and `edge-light` entries call with
 * the module their runtime's bundler compiled.
 * @internal
 */
export * from './index.js';
export { default } from './index.js';
// (`load` comes with index.js: './platform.js' is platform-edge.ts in this build.)
