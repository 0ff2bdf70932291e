// Builds the JS side of the npm package from ts/ into dist/ (the .wasm is put in
// dist/fusewire.wasm by scripts/build-js.sh first):
//   dist/cjs/          tsc output (CommonJS, the Node implementation) + .d.ts
//   dist/index.cjs     require('fusewire'): the class, with every export on it (opossum's shape)
//   dist/index.mjs     import … from 'fusewire' in Node: the same instance, as ESM
//   dist/browser.js    browsers and bundlers: one ESM file (esbuild), .wasm via new URL(…, import.meta.url)
//   dist/prometheus.*  the fusewire/prometheus subpath
//   dist/redis.*       the fusewire/redis subpath (RedisStore: fleet-wide state through ioredis)
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dist = join(root, 'dist');
const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');

if (!existsSync(join(dist, 'fusewire.wasm'))) {
  console.error('build.mjs: dist/fusewire.wasm is missing (run scripts/build-js.sh)');
  process.exit(1);
}
rmSync(join(dist, 'cjs'), { recursive: true, force: true });
mkdirSync(dist, { recursive: true });

execFileSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.json')], { stdio: 'inherit' });
execFileSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.browser.json')], { stdio: 'inherit' });
writeFileSync(join(dist, 'cjs', 'package.json'), '{ "type": "commonjs" }\n');

const write = (name, text) => writeFileSync(join(dist, name), text.trimStart());

write('index.cjs', `
'use strict';
// require('fusewire') is the CircuitBreaker class (as require('opossum') is), with
// every other export on it: const { SharedStore, ready } = require('fusewire').
const m = require('./cjs/index.js');
const CircuitBreaker = m.CircuitBreaker;
for (const k of Object.keys(m)) {
  if (k !== 'default' && !Object.prototype.hasOwnProperty.call(CircuitBreaker, k)) {
    Object.defineProperty(CircuitBreaker, k, { value: m[k], enumerable: true });
  }
}
Object.defineProperty(CircuitBreaker, 'default', { value: CircuitBreaker });
module.exports = CircuitBreaker;
`);
write('index.mjs', `
// Node ESM: the same instance as require('fusewire') (one .wasm instance per process).
import m from './index.cjs';
export const {
  CircuitBreaker, Status, SharedStore, Collapser, PERCENTILES, isOurError, ready, version,
} = m;
export default m;
`);
// The namespace merged into the default export: `CircuitBreaker.Options`,
// `CircuitBreaker.Stats`, … as types (as @types/opossum has them), for CommonJS
// (`import CircuitBreaker = require('fusewire')`) and ESM (`import CircuitBreaker from 'fusewire'`).
const namespace = `
declare namespace CircuitBreaker {
  type Options<TI extends unknown[] = unknown[], TR = any> = fw.Options<TI, TR>;
  type CircuitBreakerEvents<TI extends unknown[] = unknown[], TR = unknown> = fw.CircuitBreakerEvents<TI, TR>;
  type CacheKey = fw.CacheKey;
  type CacheTransport<R = unknown> = fw.CacheTransport<R>;
  type BreakerStateJSON = fw.BreakerStateJSON;
  type SharedOptions = fw.SharedOptions;
  type CoreConfig = fw.CoreConfig;
  type CoreSharedConfig = fw.CoreSharedConfig;
  type CircuitBreakerError = fw.CircuitBreakerError;
  type ErrorCode = fw.ErrorCode;
  type Stats = fw.Stats;
  type Bucket = fw.Bucket;
  type Status = fw.Status;
  type SharedStore = fw.SharedStore;
  type SharedStoreOptions = fw.SharedStoreOptions;
  type Collapser<K = unknown, V = unknown> = fw.Collapser<K, V>;
  type CollapserOptions<K, V> = fw.CollapserOptions<K, V>;
}
`;
write('index.d.cts', `
import * as fw from './cjs/index.js';
declare const CircuitBreaker: typeof fw.CircuitBreaker & Omit<typeof fw, 'default'> & { default: typeof fw.CircuitBreaker };
type CircuitBreaker<TI extends unknown[] = unknown[], TR = unknown> = fw.CircuitBreaker<TI, TR>;
${namespace}
export = CircuitBreaker;
`);
// ESM: the default export is the class (in browsers too); its named exports are
// index.ts's, the class among them.
write('index.d.mts', `
import * as fw from './cjs/index.js';
export * from './cjs/index.js';
declare const CircuitBreaker: typeof fw.CircuitBreaker;
type CircuitBreaker<TI extends unknown[] = unknown[], TR = unknown> = fw.CircuitBreaker<TI, TR>;
${namespace}
export default CircuitBreaker;
`);
write('prometheus.cjs', `
'use strict';
module.exports = require('./cjs/prometheus.js');
`);
write('prometheus.mjs', `
import m from './prometheus.cjs';
export const { register, metricName, CircuitBreaker } = m;
`);
write('prometheus.d.cts', `
export * from './cjs/prometheus.js';
`);
write('prometheus.d.mts', `
export * from './cjs/prometheus.js';
`);
write('redis.cjs', `
'use strict';
module.exports = require('./cjs/redis.js');
`);
write('redis.mjs', `
import m from './redis.cjs';
export const {
  RedisStore, CAS_SCRIPT, CAS_SHA, FAIL_TIMEOUT, FAIL_ERROR, FAIL_LATE, FAIL_REPLY, FAIL_CLOSED,
} = m;
`);
write('redis.d.cts', `
export * from './cjs/redis.js';
`);
write('redis.d.mts', `
export * from './cjs/redis.js';
`);

// The browser bundle: platform-browser.ts in place of platform.ts.
await esbuild.build({
  entryPoints: [join(root, 'ts', 'browser.ts')],
  outfile: join(dist, 'browser.js'),
  bundle: true,
  format: 'esm',
  platform: 'browser',
  target: ['es2022'],
  legalComments: 'none',
  logLevel: 'warning',
  plugins: [{
    name: 'fusewire-platform',
    setup(b) {
      b.onResolve({ filter: /^\.\/platform\.js$/ }, () => ({ path: join(root, 'ts', 'platform-browser.ts') }));
    },
  }],
});
console.log('build.mjs: dist/ ready');
