/**
 * The browser entry (bundled by build/build.mjs with platform-browser.ts in place of
 * platform.ts). Exports what index.ts exports; `await ready` before creating breakers.
 */
export * from './index.js';
export { default } from './index.js';
