// The README's samples run as written: its claim, under the first sample ("The samples
// in this README run as written — in Node as ES modules, `.mjs` files, or as CommonJS
// where the first line names a `.cjs` file; … — except those marked as fragments").
// Every ```js block of the installed package's README.md runs as its own file (`.mjs`;
// `.cjs` when its first line is `// <name>.cjs`) in a child `node`, next to a
// node_modules that is this app's, and must exit 0 within TIME_LIMIT_MS, with no
// unhandled rejection (exit 1) and no FusewireWarning (a sample's options must not be
// ones the package warns about). Skipped: a block whose first line starts with
// "// A fragment" (the README's marker), and a sample importing `fusewire/redis` when
// no `redis-server` is on PATH; else it gets its own server on a free port, its URL as
// REDIS_URL (the variable the sample reads), and must leave keys there (it may exit 0
// without reaching Redis: a store that cannot reach it fails open).
//
// What a sample cannot reach here is stubbed: a module preloaded with `--import`
// replaces `globalThis.fetch` with one answering 200 JSON after a few ms (it honours an
// AbortSignal), so the stand-ins that fetch example.com run offline.
//
// Bounded by design: the `AbortSignal` sample keeps its process alive with a 1 s timer
// (its `abort()`), so it takes about a second.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, describe, test } from 'node:test';
import { pathToFileURL } from 'node:url';

import { freePort, ping } from './redis/server.mjs';

const TIME_LIMIT_MS = 30_000;
const FRAGMENT = '// A fragment';

const require = createRequire(import.meta.url);
const pkg = dirname(require.resolve('fusewire/package.json'));
const README = join(pkg, 'README.md');
const appNodeModules = dirname(pkg);

/**
 * The ```js blocks of `markdown` (```javascript and ```mjs too; also indented ones, inside list items: the fence's
 * indentation is taken off each line), each with the 1-based line of its opening fence.
 */
function jsBlocks(markdown) {
  const lines = markdown.split('\n');
  const blocks = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^( *)(`{3,})\s*([\w-]*)[^`]*$/.exec(lines[i]);
    if (open === null) continue;
    const [, indent, fence, lang] = open;
    const body = [];
    let j = i + 1;
    for (; j < lines.length && !new RegExp(`^ *${fence}\\s*$`).test(lines[j]); j++) {
      body.push(lines[j].startsWith(indent) ? lines[j].slice(indent.length) : lines[j].trimStart());
    }
    assert.ok(j < lines.length, `README.md line ${i + 1}: a code block that is never closed`);
    if (lang === 'js' || lang === 'javascript' || lang === 'mjs') blocks.push({ line: i + 1, code: body.join('\n') + '\n' });
    i = j;
  }
  return blocks;
}

/** The keys of the Redis at `port` (`KEYS *`: a test server holding a few). */
function keys(port) {
  return new Promise((resolve, reject) => {
    const c = createConnection(port, '127.0.0.1');
    let buf = '';
    const timer = setTimeout(() => { c.destroy(); reject(new Error(`KEYS *: no answer from port ${port}`)); }, 2000);
    c.on('connect', () => c.write('KEYS *\r\n'));
    c.on('data', (d) => {
      buf += d;
      const lines = buf.split('\r\n');
      const n = Number(lines[0].slice(1)); // *<count>, then $<len> and the key for each
      if (lines[0].startsWith('*') && lines.length > 2 * n + 1) {
        clearTimeout(timer);
        c.destroy();
        resolve(Array.from({ length: n }, (_, i) => lines[2 + 2 * i]));
      }
    });
    c.on('error', (e) => { clearTimeout(timer); reject(e); });
  });
}

const hasRedisServer = spawnSync('redis-server', ['--version'], { stdio: 'ignore' }).error === undefined;
let redis; // { url, process }, started by the first sample needing it
async function redisUrl() {
  if (redis !== undefined) return redis.url;
  const port = await freePort();
  const p = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '',
    '--appendonly', 'no'], { stdio: 'ignore' });
  redis = { url: `redis://127.0.0.1:${port}`, port, process: p };
  for (let i = 0; i < 100; i++) {
    if (await ping(port)) return redis.url;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`redis-server on port ${port} did not start`);
}

const dir = mkdtempSync(join(tmpdir(), 'fusewire-readme-'));
symlinkSync(appNodeModules, join(dir, 'node_modules'), 'dir');
const stub = join(dir, 'fetch-stub.mjs');
writeFileSync(stub, `// fetch, offline: 200 and a JSON body after 5 ms; an aborted signal rejects it.
globalThis.fetch = (input, init = {}) => new Promise((resolve, reject) => {
  const signal = init.signal ?? (input instanceof Request ? input.signal : undefined);
  const url = typeof input === 'string' || input instanceof URL ? String(input) : input.url;
  if (signal?.aborted) return reject(signal.reason);
  const timer = setTimeout(() => {
    signal?.removeEventListener('abort', onAbort);
    resolve(new Response(JSON.stringify({ stub: true, url }),
      { status: 200, headers: { 'content-type': 'application/json' } }));
  }, 5);
  const onAbort = () => { clearTimeout(timer); reject(signal.reason); };
  signal?.addEventListener('abort', onAbort, { once: true });
});
`);

after(async () => {
  if (redis !== undefined && redis.process.exitCode === null && redis.process.signalCode === null) {
    const gone = new Promise((r) => redis.process.once('exit', r));
    redis.process.kill('SIGKILL');
    await gone;
  }
  rmSync(dir, { recursive: true, force: true });
});

const redisKeys = () => keys(redis.port);

/** Runs `file` in a child node; resolves with its exit code or signal, output, and whether the time limit ended it. */
function run(file, env) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath,
      ['--unhandled-rejections=strict', '--import', pathToFileURL(stub).href, file],
      { cwd: dir, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => { stdout += d; });
    child.stderr.on('data', (d) => { stderr += d; });
    let timedOut = false;
    const timer = setTimeout(() => { timedOut = true; child.kill('SIGKILL'); }, TIME_LIMIT_MS);
    child.on('error', (e) => { clearTimeout(timer); reject(e); });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, timedOut });
    });
  });
}

const markdown = readFileSync(README, 'utf8');
const blocks = jsBlocks(markdown);

describe('README.md: every ```js sample runs as written', () => {
  test('the README makes the claim, and has samples to check it by', () => {
    assert.match(markdown.replace(/\s+/g, ' '),
      /The samples in this README run as written — in Node as ES modules, `\.mjs` files, or as CommonJS where the first line names a `\.cjs` file;/);
    assert.ok(blocks.filter((b) => !b.code.startsWith(FRAGMENT)).length >= 5, `${blocks.length} js blocks found`);
  });

  for (const { line, code } of blocks) {
    const first = (code.split('\n').find((l) => l.trim() !== '') ?? '(empty)').trim();
    const name = `README.md line ${line}: ${first.length > 70 ? `${first.slice(0, 69)}…` : first}`;
    const needsRedis = /from\s+['"]fusewire\/redis['"]/.test(code);
    let skip = false;
    if (code.startsWith(FRAGMENT)) skip = 'a fragment (marked so in the README): a part of a file';
    else if (needsRedis && !hasRedisServer) {
      // scripts/test-js.sh installs redis-server: a skip there would hide the sample.
      if (process.env.FUSEWIRE_TEST_ALL === '1') throw new Error(`${name}: needs redis-server on PATH`);
      skip = 'needs Redis (fusewire/redis): no redis-server on PATH';
    }
    test(name, { skip }, async (t) => {
      const file = join(dir, `readme-line-${line}${/^\/\/ \S+\.cjs\b/.test(first) ? '.cjs' : '.mjs'}`);
      writeFileSync(file, code);
      if (needsRedis) {
        assert.doesNotThrow(() => require.resolve('ioredis'),
          'ioredis is not installed beside fusewire (scripts/test-js.sh installs ioredis@5.9.3)');
      }
      const env = needsRedis ? { REDIS_URL: await redisUrl() } : {};
      const started = Date.now();
      const r = await run(file, env);
      const out = r.stdout.trim().split('\n').slice(0, 4).join(' | ');
      t.diagnostic(`${Date.now() - started} ms${out === '' ? '' : `; printed: ${out}`}`);
      const said = `\n--- stdout\n${r.stdout}--- stderr\n${r.stderr}--- the sample (README.md line ${line})\n${code}`;
      assert.ok(!r.timedOut, `still running after ${TIME_LIMIT_MS} ms (killed)${said}`);
      assert.equal(r.signal, null, `ended by ${r.signal}${said}`);
      assert.equal(r.code, 0, `exit code ${r.code}${said}`);
      assert.doesNotMatch(r.stderr, /FusewireWarning/, `the package warned about the sample's options${said}`);
      if (needsRedis) assert.notDeepEqual(await redisKeys(), [], `the sample left no key in the Redis at ${env.REDIS_URL}${said}`);
    });
  }
});
