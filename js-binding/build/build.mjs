// Builds the JS side of the npm package from ts/ into dist/ (the .wasm is put in
// dist/fusewire.wasm by scripts/build-js.sh first):
//   dist/cjs/          tsc output (CommonJS, the Node implementation) + .d.ts
//   dist/index.cjs     require('fusewire'): the class, with every export on it (opossum's shape)
//   dist/index.mjs     import … from 'fusewire' in Node: the same instance, as ESM
//   dist/browser.js    browsers and bundlers: one ESM file (esbuild), .wasm via new URL(…, import.meta.url)
//   dist/prometheus.*  the fusewire/prometheus subpath
//   dist/redis.*       the fusewire/redis subpath (RedisStore: fleet-wide state through ioredis)
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
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

// A `Status` is made by a breaker only. Its constructor is @internal (stripped), so the
// declaration inherited the emitter's `new ()`: `new Status()` compiled, then threw
// (found by review). Declared private instead.
const statusDts = join(dist, 'cjs', 'status.d.ts');
const statusClass = 'export declare class Status extends Status_base {\n';
const statusText = readFileSync(statusDts, 'utf8');
if (!statusText.includes(statusClass)) throw new Error('build.mjs: dist/cjs/status.d.ts declares no Status class');
writeFileSync(statusDts, statusText.replace(statusClass, `${statusClass}    /** Made by a breaker (\`breaker.status\`) or \`CircuitBreaker.newStatus\`. */
    private constructor();
`));

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
  CircuitBreaker, Status, SharedStore, Collapser, RequestLoader, PERCENTILES, isOurError, ready, load, version,
} = m;
export default m;
`);
// The types of the default export. `require('fusewire')` is the class with every
// export on it, so index.d.cts merges a class with a namespace: the values as
// `export import X = fw.X` (value and type), the type-only exports as `export type`.
// (A `declare const` whose namespace has type aliases of the same names as its value
// properties crashed tsc — "Debug Failure." — on `import { SharedStore } from
// 'fusewire'` in CommonJS files; found by review.) The ESM default export is the bare
// class (in browsers too), so index.d.mts's namespace carries types only.
// Both lists come from dist/cjs/index.d.ts, so a new export cannot be left out.
const ts = createRequire(import.meta.url)('typescript');
const exportsOf = (file) => {
  const program = ts.createProgram([file], {
    module: ts.ModuleKind.CommonJS, moduleResolution: ts.ModuleResolutionKind.Node10, noEmit: true,
    types: ['node'], typeRoots: [join(root, 'node_modules', '@types')],
  });
  const checker = program.getTypeChecker();
  const source = program.getSourceFile(file);
  const values = [];
  const types = [];
  const typed = [];
  let classParams;
  for (const s of checker.getExportsOfModule(checker.getSymbolAtLocation(source))) {
    if (s.name === 'default') continue;
    const typeOnly = (s.declarations ?? []).some((d) =>
      ts.isExportSpecifier(d) && (d.isTypeOnly || d.parent.parent.isTypeOnly));
    const target = s.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(s) : s;
    if (s.name !== 'CircuitBreaker' && (typeOnly || (target.flags & ts.SymbolFlags.Type))) typed.push(s.name);
    if (s.name === 'CircuitBreaker') {
      const decl = (target.declarations ?? []).find(ts.isClassDeclaration);
      classParams = decl?.typeParameters;
    } else if (!typeOnly && (target.flags & ts.SymbolFlags.Value)) {
      values.push(s.name);
    } else {
      types.push(s.name);
    }
  }
  if (classParams === undefined) throw new Error('build.mjs: dist/cjs/index.d.ts exports no generic CircuitBreaker class');
  return {
    values, types, typed,
    params: classParams.map((p) => p.getText()).join(', '),
    args: classParams.map((p) => p.name.text).join(', '),
  };
};
const api = exportsOf(join(dist, 'cjs', 'index.d.ts'));
const list = (names, indent) => names.map((n) => `${indent}${n},`).join('\n');
write('index.d.cts', `
// require('fusewire'): the CircuitBreaker class with every export on it (generated by build/build.mjs).
import * as fw from './cjs/index.js';
import type {
${list(api.types, '  ')}
} from './cjs/index.js';
declare class CircuitBreaker<${api.params}> extends fw.CircuitBreaker<${api.args}> {}
declare namespace CircuitBreaker {
${api.values.map((n) => `  export import ${n} = fw.${n};`).join('\n')}
  export { CircuitBreaker as default, CircuitBreaker };
  export type {
${list(api.types, '    ')}
  };
}
export = CircuitBreaker;
`);
// ESM: the default export is the class (in browsers too); its named exports are
// index.ts's, the class among them. `CircuitBreaker.Options`, `CircuitBreaker.Stats`, …
// are types (as @types/opossum has them).
write('index.d.mts', `
// import … from 'fusewire' (generated by build/build.mjs).
import * as fw from './cjs/index.js';
import type {
${list(api.typed, '  ')}
} from './cjs/index.js';
export * from './cjs/index.js';
declare class CircuitBreaker<${api.params}> extends fw.CircuitBreaker<${api.args}> {}
declare namespace CircuitBreaker {
  export type {
${list(api.typed, '    ')}
  };
}
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

// fusewire/prometheus and fusewire/redis in a browser bundle (their `browser`
// condition): a clear error, not a Node build bundled in that fails on `process`.
write('node-only.js', `
throw new Error('fusewire/prometheus and fusewire/redis run in Node only (prom-client, ioredis): ' +
  'in a browser or an edge runtime, import { CircuitBreaker, SharedStore } from "fusewire"');
`);

/**
 * A bundle of the package without Node: `entry` (browser.ts) with `platform` in place
 * of platform.ts and monotonic-browser.ts in place of monotonic.ts.
 */
function bundle(outfile, platform, options, entry = 'browser.ts') {
  return esbuild.build({
    entryPoints: [join(root, 'ts', entry)],
    outfile: join(dist, outfile),
    bundle: true,
    format: 'esm',
    target: ['es2022'],
    legalComments: 'none',
    logLevel: 'warning',
    ...options,
    plugins: [{
      name: 'fusewire-platform',
      setup(b) {
        b.onResolve({ filter: /^\.\/platform\.js$/ }, () => ({ path: join(root, 'ts', platform) }));
        b.onResolve({ filter: /^\.\/monotonic\.js$/ }, () => ({ path: join(root, 'ts', 'monotonic-browser.ts') }));
      },
    }],
  });
}

// Browsers and bundlers.
await bundle('browser.js', 'platform-browser.ts', { platform: 'browser' });
// Edge runtimes that compile the .wasm when they bundle the Worker (found by reviews:
// the browser build compiles from bytes, which they refuse): one build, `edge.js`
// (whitespace and syntax minified; names stay readable in stack traces), and an entry
// per runtime that imports the .wasm as that runtime's bundler spells it and hands it
// over before the app's code runs — `workerd` (Cloudflare Workers: wrangler) and
// `edge-light` (Next.js's Edge runtime, Vercel Edge: `?module`).
await bundle('edge.js', 'platform-edge.ts', { platform: 'neutral', minifyWhitespace: true, minifySyntax: true }, 'edge.ts');
for (const [file, spec] of [['workerd.js', './fusewire.wasm'], ['edge-light.js', './fusewire.wasm?module']]) {
  write(file, `import wasm from '${spec}';
import { load } from './edge.js';
load(wasm);
export * from './edge.js';
export { default } from './edge.js';
`);
}
console.log('build.mjs: dist/ ready');
