// Node: where the .wasm is looked for. Bundling fusewire for Node (esbuild
// --platform=node, webpack target node) moves its code away from dist/fusewire.wasm;
// that failed with a bare ENOENT (found by review). Simulated by copying dist/cjs
// elsewhere, as a bundle would put it: a clear Error naming the paths tried and the
// fixes; a fusewire.wasm next to the code, or FUSEWIRE_WASM, loads it.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, test } from 'node:test';

const require = createRequire(import.meta.url);
const dist = join(dirname(require.resolve('fusewire/package.json')), 'dist');
const tmp = mkdtempSync(join(tmpdir(), 'fusewire-wasm-path-'));
mkdirSync(join(tmp, 'app'));
after(() => rmSync(tmp, { recursive: true, force: true }));

/** Runs a script (in `cwd`) that requires the copied code; its stdout/stderr. */
function run(code, env = {}, node = process.execPath, flags = [], cwd = join(tmp, 'app')) {
  const script = join(tmp, 'app', 'main.cjs');
  writeFileSync(script, `
try {
  const fw = require(${JSON.stringify(join(code, 'index.js'))});
  const b = new fw.CircuitBreaker(async () => 1);
  b.shutdown();
  console.log('loaded', typeof fw.CircuitBreaker);
} catch (e) {
  console.log('error', e.constructor.name, e.message);
}`);
  const env2 = { ...process.env, ...env };
  if (!('FUSEWIRE_WASM' in env)) delete env2.FUSEWIRE_WASM;
  // In a directory without fusewire in node_modules, unless told otherwise (bundled
  // code finds the app's copy of this version there).
  const r = spawnSync(node, [...flags, script], { env: env2, encoding: 'utf8', cwd });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.trim();
}

test('bundled code without its .wasm: an Error naming the paths tried and the fixes', () => {
  const code = join(tmp, 'out', 'bundle');
  cpSync(join(dist, 'cjs'), code, { recursive: true });
  const out = run(code);
  assert.match(out, /^error Error fusewire: its WebAssembly module fusewire\.wasm was not found \(tried /);
  for (const path of [join(tmp, 'out', 'fusewire.wasm'), join(code, 'fusewire.wasm'), join(tmp, 'app', 'fusewire.wasm')]) {
    assert.ok(out.includes(path), `names ${path}: ${out}`);
  }
  assert.match(out, /mark fusewire as external/);
  assert.match(out, /copy node_modules\/fusewire\/dist\/fusewire\.wasm next to the bundle/);
  assert.match(out, /FUSEWIRE_WASM/);
});

test('a fusewire.wasm next to the bundled code is found', () => {
  const code = join(tmp, 'next', 'bundle');
  cpSync(join(dist, 'cjs'), code, { recursive: true });
  copyFileSync(join(dist, 'fusewire.wasm'), join(code, 'fusewire.wasm'));
  assert.equal(run(code), 'loaded function');
});

test('the file next to the bundle wins over one above it, and a file that is not the module is named (found by a library author\'s review)', () => {
  const code = join(tmp, 'stale', 'bundle');
  cpSync(join(dist, 'cjs'), code, { recursive: true });
  writeFileSync(join(tmp, 'stale', 'fusewire.wasm'), 'not wasm');
  copyFileSync(join(dist, 'fusewire.wasm'), join(code, 'fusewire.wasm'));
  assert.equal(run(code), 'loaded function', 'the one beside the bundle');
  const junk = join(tmp, 'stale', 'fusewire.wasm');
  const out = run(code, { FUSEWIRE_WASM: junk });
  assert.match(out, /^error Error fusewire: .*stale\/fusewire\.wasm is not fusewire's WebAssembly module \(.*\); copy node_modules\/fusewire\/dist\/fusewire\.wasm of this version there, or point FUSEWIRE_WASM at it$/);
});

test('FUSEWIRE_WASM names the file; a wrong path is reported as such', () => {
  const code = join(tmp, 'env', 'bundle');
  cpSync(join(dist, 'cjs'), code, { recursive: true });
  assert.equal(run(code, { FUSEWIRE_WASM: join(dist, 'fusewire.wasm') }), 'loaded function');
  const missing = join(tmp, 'nowhere', 'fusewire.wasm');
  assert.equal(run(code, { FUSEWIRE_WASM: missing }),
    `error Error fusewire: FUSEWIRE_WASM is ${JSON.stringify(missing)}, which does not exist (point it at a copy of fusewire/dist/fusewire.wasm)`);
});

test('a single executable (its entry path virtual) finds a fusewire.wasm next to itself (found by review: `bun build --compile`)', () => {
  const code = join(tmp, 'exe', 'bundle');
  cpSync(join(dist, 'cjs'), code, { recursive: true });
  const bin = join(tmp, 'exe', 'bin');
  mkdirSync(bin);
  const node = join(bin, 'node');
  copyFileSync(process.execPath, node);
  chmodSync(node, 0o755);
  const out = run(code, {}, node);
  assert.match(out, /^error Error /);
  assert.ok(out.includes(join(bin, 'fusewire.wasm')), `names the executable's directory: ${out}`);
  assert.match(out, /next to the bundle \(or the executable\)/);
  copyFileSync(join(dist, 'fusewire.wasm'), join(bin, 'fusewire.wasm'));
  assert.equal(run(code, {}, node), 'loaded function');
});

test('an environment that refuses to be read is no FUSEWIRE_WASM (found by review: Deno without --allow-env threw NotCapable at import)', () => {
  const preload = join(tmp, 'app', 'no-env.cjs');
  writeFileSync(preload, `
const env = process.env;
process.env = new Proxy(env, {
  get(t, k) {
    if (k === 'FUSEWIRE_WASM') throw new Error('NotCapable: Requires env access to "FUSEWIRE_WASM"');
    return Reflect.get(t, k);
  },
});`);
  assert.equal(run(join(dist, 'cjs'), { FUSEWIRE_WASM: join(tmp, 'nowhere.wasm') }, process.execPath, ['--require', preload]),
    'loaded function');
});

test('Deno: the package probes only its own dist/fusewire.wasm, and reads FUSEWIRE_WASM only when granted (found by review: a read grant of the .wasm alone failed on a probe before it, and a terminal prompted for the variable)', () => {
  const own = join(dist, 'fusewire.wasm');
  const preload = join(tmp, 'app', 'deno.cjs');
  // Deno's rules, simulated: a look at a path not granted throws NotCapable, and
  // an env read not granted prompts (here: throws, so a read is seen).
  writeFileSync(preload, `
const fs = require('node:fs');
const exists = fs.existsSync;
fs.existsSync = (p) => {
  if (p !== ${JSON.stringify(own)}) throw new Error('NotCapable: Requires read access to "' + p + '"');
  return exists(p);
};
globalThis.Deno = { permissions: { querySync: (d) => ({ state: d.name === 'env' ? 'prompt' : 'granted' }) } };
const env = process.env;
process.env = new Proxy(env, {
  get(t, k) {
    if (k === 'FUSEWIRE_WASM') throw new Error('prompted for FUSEWIRE_WASM');
    return Reflect.get(t, k);
  },
});`);
  assert.equal(run(join(dist, 'cjs'), { FUSEWIRE_WASM: join(tmp, 'nowhere.wasm') }, process.execPath, ['--require', preload]),
    'loaded function');
});

test('Deno: a module it may not read is reported as a permission to grant, naming the path', () => {
  const preload = join(tmp, 'app', 'deno-denied.cjs');
  writeFileSync(preload, `
const fs = require('node:fs');
fs.existsSync = (p) => { throw new Error('NotCapable: Requires read access to "' + p + '"'); };
globalThis.Deno = { permissions: { querySync: () => ({ state: 'prompt' }) } };`);
  const out = run(join(dist, 'cjs'), {}, process.execPath, ['--require', preload]);
  assert.match(out, /^error Error fusewire: its WebAssembly module could not be read/);
  assert.ok(out.includes(`--allow-read=${join(dist, 'fusewire.wasm')}`), out);
});

test('bundled code finds the module in the app\'s node_modules when that holds this version (found by a Next.js review: Next bundles server code)', () => {
  const code = join(tmp, 'next', '.next', 'server', 'chunks');
  cpSync(join(dist, 'cjs'), code, { recursive: true });
  // An app whose node_modules holds fusewire: this version, then another.
  const app = join(tmp, 'next');
  const mod = join(app, 'node_modules', 'fusewire');
  mkdirSync(join(mod, 'dist'), { recursive: true });
  copyFileSync(join(dist, '..', 'package.json'), join(mod, 'package.json'));
  copyFileSync(join(dist, 'fusewire.wasm'), join(mod, 'dist', 'fusewire.wasm'));
  assert.equal(run(code, {}, process.execPath, [], app), 'loaded function');
  const other = JSON.parse(readFileSync(join(mod, 'package.json'), 'utf8'));
  other.version = '0.0.1';
  writeFileSync(join(mod, 'package.json'), JSON.stringify(other));
  const out = run(code, {}, process.execPath, [], app);
  assert.match(out, /^error Error fusewire: its WebAssembly module fusewire\.wasm was not found/);
  assert.match(out, /Next\.js serverExternalPackages: \['fusewire'\]/);
  assert.ok(!out.includes(join(mod, 'dist', 'fusewire.wasm')), `another version's module is not tried: ${out}`);
});

test('the package\'s version export is package.json\'s', async () => {
  const { version } = await import('fusewire');
  assert.equal(version, JSON.parse(readFileSync(join(dist, '..', 'package.json'), 'utf8')).version);
});
