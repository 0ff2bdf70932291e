// Runs the browser scenario in headless Chromium (Debian's /usr/bin/chromium, driven
// by playwright-core; never a downloaded browser), served from a local server: as
// plain ESM (import map → fusewire's browser entry), and built by each bundler the
// README names, every one resolving 'fusewire' through the package's exports map
// (browser condition): esbuild, `vite build`, webpack 5, and Vite's dev server (Vite 8
// as it comes; Vite 7 with the README's `optimizeDeps.exclude`); a cross-origin
// isolated page whose two Web Workers share one breaker (SharedStore).
// Then examples/browser (its own server, the page's buttons) as a user runs it: the
// upstream goes down → the page shows the breaker open; healthy again → closed.
// The bundlers (vite, vite7 = Vite 7, webpack) are installed in <app dir>, as this file is.
// Usage: node run.mjs <app dir> <playwright-core dir> <esbuild dir> [examples/browser/serve.mjs]
import { copyFileSync, mkdirSync, readFileSync, existsSync, statSync } from 'node:fs';
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import { dirname, extname, join, normalize } from 'node:path';

const [appDir, pwDir, esbuildDir, exampleServer] = process.argv.slice(2);
const require = createRequire(join(appDir, 'package.json'));
const { chromium } = require(pwDir);
const esbuild = require(esbuildDir);

// The bundler build: what an application built with esbuild ships.
mkdirSync(join(appDir, 'bundle'), { recursive: true });
await esbuild.build({
  entryPoints: [join(appDir, 'test', 'browser', 'app.mjs')],
  outfile: join(appDir, 'bundle', 'app.js'),
  bundle: true,
  format: 'esm',
  platform: 'browser',
  target: 'es2022',
  nodePaths: [join(appDir, 'node_modules')],
  logLevel: 'warning',
});
// esbuild leaves new URL('./fusewire.wasm', import.meta.url) as is: ship the file next to the bundle.
copyFileSync(require.resolve('fusewire/fusewire.wasm'), join(appDir, 'bundle', 'fusewire.wasm'));

// `vite build` and webpack 5 emit the .wasm as an asset of their own.
const browserDir = join(appDir, 'test', 'browser');
const vite = await import('vite');
await vite.build({
  root: browserDir,
  base: './',
  configFile: false,
  logLevel: 'warn',
  build: { outDir: join(appDir, 'vite-dist'), emptyOutDir: true, rollupOptions: { input: join(browserDir, 'vite.html') } },
});
const { default: webpack } = await import('webpack');
const packed = await new Promise((resolve, reject) => webpack({
  mode: 'production',
  context: appDir,
  entry: join(browserDir, 'app.mjs'),
  output: { path: join(appDir, 'webpack'), filename: 'app.js', clean: true },
  target: 'web',
  devtool: false,
}, (e, stats) => (e ? reject(e) : resolve(stats))));
if (packed.hasErrors()) throw new Error(`webpack: ${packed.toString({ all: false, errors: true })}`);

/** Vite's dev server on the scenario's page, answering the scenario's API itself. */
async function viteDev(viteModule, config) {
  const server = await viteModule.createServer({
    root: browserDir,
    configFile: false,
    logLevel: 'warn',
    server: { host: '127.0.0.1', port: 0, strictPort: false },
    plugins: [{ name: 'api', configureServer(s) { s.middlewares.use(api); } }],
    ...config,
  });
  await server.listen();
  return { url: `http://127.0.0.1:${server.httpServer.address().port}/vite.html`, close: () => server.close() };
}

/** The scenario's upstream: /api/ok answers, /api/fail is down. */
function api(req, res, next) {
  const path = new URL(req.url, 'http://localhost').pathname;
  if (path === '/api/ok') res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
  else if (path === '/api/fail') res.writeHead(503, { 'content-type': 'text/plain' }).end('down');
  else next();
}

// The browser entry alone, without its .wasm next to it: the missing-module page.
mkdirSync(join(appDir, 'nowasm'), { recursive: true });
copyFileSync(join(dirname(require.resolve('fusewire/fusewire.wasm')), 'browser.js'), join(appDir, 'nowasm', 'browser.js'));
// The same under /spa/, where the server answers unknown paths with an HTML page (200),
// as Vite's dev server does for node_modules/.vite/deps/fusewire.wasm (found by review).
mkdirSync(join(appDir, 'spa'), { recursive: true });
copyFileSync(join(dirname(require.resolve('fusewire/fusewire.wasm')), 'browser.js'), join(appDir, 'spa', 'browser.js'));

// Pages whose .wasm fetch fails once (flaky-load, flaky-auto) or always (flaky-source).
for (const mode of ['load', 'auto', 'source']) {
  mkdirSync(join(appDir, `flaky-${mode}`), { recursive: true });
  for (const f of ['browser.js', 'fusewire.wasm']) {
    copyFileSync(join(dirname(require.resolve('fusewire/fusewire.wasm')), f), join(appDir, `flaky-${mode}`, f));
  }
}
/** Requests for each flaky page's .wasm so far. */
const flakyHits = new Map();

const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.mjs': 'text/javascript', '.wasm': 'application/wasm', '.json': 'application/json' };
const server = createServer((req, res) => api(req, res, () => serveFile(req, res)));
function serveFile(req, res) {
  const url = new URL(req.url, 'http://localhost');
  if (url.pathname === '/favicon.ico') {
    res.writeHead(204).end();
    return;
  }
  const flaky = /^\/flaky-(\w+)\/fusewire\.wasm$/.exec(url.pathname);
  if (flaky !== null) {
    const n = (flakyHits.get(flaky[1]) ?? 0) + 1;
    flakyHits.set(flaky[1], n);
    if (flaky[1] === 'source') {
      setTimeout(() => res.writeHead(503, { 'content-type': 'text/plain' }).end('busy'), 500);
      return;
    }
    if (n === 1) {
      res.writeHead(503, { 'content-type': 'text/plain' }).end('busy');
      return;
    }
  }
  const file = normalize(join(appDir, decodeURIComponent(url.pathname)));
  if (url.pathname.startsWith('/spa/') && !existsSync(file)) {
    res.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html>\n<html><body>the app</body></html>\n');
    return;
  }
  if (!file.startsWith(appDir) || !existsSync(file) || !statSync(file).isFile()) {
    res.writeHead(404).end();
    return;
  }
  // Cross-origin isolated (COOP + COEP), as a page must be to share a
  // SharedArrayBuffer with its Web Workers; every resource here is same-origin.
  // ?csp=…: the page's Content-Security-Policy (csp.html).
  const csp = url.searchParams.get('csp');
  res.writeHead(200, {
    'content-type': TYPES[extname(file)] ?? 'application/octet-stream',
    'cross-origin-opener-policy': 'same-origin',
    'cross-origin-embedder-policy': 'require-corp',
    ...(csp === null ? {} : { 'content-security-policy': csp }),
  }).end(readFileSync(file));
}
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const base = `http://127.0.0.1:${server.address().port}`;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
});
let failed = 0;
const devServers = [];
try {
  const vite7 = await import('vite7');
  devServers.push(['Vite 8 dev server', await viteDev(vite, { cacheDir: join(appDir, '.vite8') })]);
  devServers.push(['Vite 7 dev server, optimizeDeps.exclude',
    await viteDev(vite7, { cacheDir: join(appDir, '.vite7'), optimizeDeps: { exclude: ['fusewire'] } })]);
  // Each page, and where its .wasm must come from (a bundle ships its own).
  const pages = [
    ['plain ESM', `${base}/test/browser/esm.html`, /^\/node_modules\/fusewire\/dist\/fusewire\.wasm$/],
    ['esbuild', `${base}/test/browser/bundle.html`, /^\/bundle\/fusewire\.wasm$/],
    ['vite build', `${base}/vite-dist/vite.html`, /^\/vite-dist\/assets\/fusewire-[\w-]+\.wasm$/],
    ['webpack 5', `${base}/test/browser/webpack.html`, /^\/webpack\/\w+\.wasm$/],
    // A dev server serves the package's own file (Vite 8's pre-bundle points at it; Vite
    // 7 without `exclude` would look next to its pre-bundle and fail).
    ...devServers.map(([label, dev]) => [label, dev.url, /^(\/@fs\/.*)?\/node_modules\/fusewire\/dist\/fusewire\.wasm$/]),
  ];
  for (const [page, url, wasmPath] of pages) {
    const p = await browser.newPage();
    const wasm = [];
    p.on('request', (q) => { if (/\.wasm(\?|$)/.test(q.url())) wasm.push(new URL(q.url()).pathname); });
    const errors = [];
    p.on('pageerror', (e) => errors.push(String(e)));
    // (A dev server has no favicon.ico: its 404 is not the page's error.)
    p.on('console', (m) => { if (m.type() === 'error' && !/\/favicon\.ico$/.test(m.location()?.url ?? '')) errors.push(m.text()); });
    await p.goto(url);
    await p.waitForFunction(() => window.__result !== undefined, null, { timeout: 20_000 });
    const r = await p.evaluate(() => window.__result);
    const s = r.steps ?? {};
    const checks = [
      ['ran to the end', r.ok === true],
      ['new CircuitBreaker before ready is refused', s.beforeReady === 'refused'],
      ['first call', s.first === 'ok'],
      ['trips', s.opened === true],
      ['rejects while open', s.rejected === 'EOPENBREAKER'],
      ['half-opens on its timer', s.halfOpen === true && r.events.includes('halfOpen')],
      ['the probe closes it', s.probe === 'ok' && s.closed === true && r.events.includes('close')],
      ['stats', s.stats?.rejects === 1 && s.stats?.failures === 2 && s.stats?.successes === 2],
      ['window', s.window === 10],
      ['TypeError for bad options', s.typeError === 'TypeError: options.errorThresholdPercentage: must be a number in 0..=100, got 150'],
      ['no page errors', errors.filter((e) => !/503/.test(e)).length === 0],
      ['the .wasm is the one it ships', wasm.length === 1 && wasmPath.test(wasm[0])],
    ];
    for (const [what, pass] of checks) {
      console.log(`${pass ? 'ok  ' : 'FAIL'} ${page}: ${what}`);
      if (!pass) failed++;
    }
    if (checks.some((c) => !c[1])) console.log(JSON.stringify(r, null, 2), errors, wasm);
    if (process.env.FUSEWIRE_SHOW_WASM) console.log(page, wasm);
    await p.close();
  }
  // One breaker across two Web Workers through a SharedStore (cross-origin isolated).
  {
    const p = await browser.newPage();
    const errors = [];
    p.on('pageerror', (e) => errors.push(String(e)));
    p.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
    await p.goto(`${base}/test/browser/workers.html`);
    await p.waitForFunction(() => window.__result !== undefined, null, { timeout: 20_000 });
    const r = await p.evaluate(() => window.__result);
    const checks = [
      ['the page is cross-origin isolated', r.isolated === true],
      ['ran to the end', r.ok === true],
      ['both workers made their breaker', r.started?.every((s) => s.ok === true) === true],
      ['a call runs', r.first === 'ok'],
      ['the later worker trips', r.tripped === true],
      ['the earlier worker rejects after the trip', r.otherRejects === 'EOPENBREAKER' && r.otherOpen === true],
      ['one probe across both workers', r.probes === 1],
      ['the probe closes both', r.closed?.every((c) => c === true) === true],
      ['one store entry', r.storeSize === 1],
      ['no page errors', errors.length === 0],
    ];
    for (const [what, pass] of checks) {
      console.log(`${pass ? 'ok  ' : 'FAIL'} Web Workers: ${what}`);
      if (!pass) failed++;
    }
    if (checks.some((c) => !c[1])) console.log(JSON.stringify(r, null, 2), errors);
    await p.close();
  }
  // A Content-Security-Policy without 'wasm-unsafe-eval' refuses to compile the .wasm:
  // `ready` says what to add (found by review: it blamed a damaged file); with it,
  // breakers work.
  for (const [csp, want] of [
    ["script-src 'self'", /Content-Security-Policy must allow WebAssembly: script-src 'wasm-unsafe-eval'/],
    ["script-src 'self' 'wasm-unsafe-eval'", /^ran$/],
  ]) {
    const p = await browser.newPage();
    await p.goto(`${base}/test/browser/csp.html?csp=${encodeURIComponent(csp)}`);
    await p.waitForFunction(() => window.__result !== undefined, null, { timeout: 20_000 });
    const r = await p.evaluate(() => window.__result);
    const pass = want.test(r);
    console.log(`${pass ? 'ok  ' : 'FAIL'} CSP ${csp}: ${pass ? want.source.slice(0, 60) : r}`);
    if (!pass) failed++;
    await p.close();
  }
  // Found by review: a missing .wasm made an unhandled rejection on pages that do not
  // await `ready` at once; an HTML page answered in its place (Vite's dev server)
  // failed with WebAssembly's "expected magic word" and no hint.
  for (const [label, dir, cause] of [
    ['missing .wasm', 'nowasm', /fusewire\.wasm failed: 404\b.*optimizeDeps/],
    ['an HTML page at the .wasm URL', 'spa', /\/spa\/fusewire\.wasm is not a WebAssembly module \(HTTP 200, content-type text\/html, \d+ bytes starting "<!doctype html>.*optimizeDeps: \{ exclude: \['fusewire'\] \}/],
  ]) {
    const p = await browser.newPage();
    const errors = [];
    p.on('pageerror', (e) => errors.push(String(e)));
    await p.goto(`${base}/test/browser/missing.html?dir=${dir}`);
    await p.waitForFunction(() => window.__result !== undefined, null, { timeout: 20_000 });
    const r = await p.evaluate(() => window.__result);
    const checks = [
      ['no unhandled rejection', r.unhandled === 0 && errors.length === 0],
      ['await ready throws the cause, with the URL and what to do', cause.test(r.cause)],
      // Found by review: it said "still loading" after `ready` had rejected.
      ['a breaker is refused with the load error', /failed to load \(`ready` rejected\).*fusewire\.wasm/.test(r.before)],
    ];
    for (const [what, pass] of checks) {
      console.log(`${pass ? 'ok  ' : 'FAIL'} ${label}: ${what}`);
      if (!pass) failed++;
    }
    if (checks.some((c) => !c[1])) console.log(JSON.stringify(r), errors);
    await p.close();
  }
  // Found by review: one failed .wasm fetch left fusewire unusable until the page
  // reloaded. `load()` tries again (called, or started by a breaker made after the
  // failure, backing off), or takes a copy (a Response from elsewhere).
  for (const mode of ['load', 'auto', 'source']) {
    const p = await browser.newPage();
    const errors = [];
    p.on('pageerror', (e) => errors.push(String(e)));
    await p.goto(`${base}/test/browser/flaky.html?mode=${mode}`);
    await p.waitForFunction(() => window.__result !== undefined, null, { timeout: 20_000 });
    const r = await p.evaluate(() => window.__result);
    const checks = [
      ['ready rejects, saying how to try again', /failed: 503\b.*await load\(\)/.test(r.ready)],
      // (`source`: the copy loads as soon as the package's own fetch fails.)
      ['a breaker is refused with the cause',
        mode === 'source' ? true : /failed to load \(`ready` rejected\).*trying again: `await load\(\)`/.test(r.before)],
      ['the copy given during the failing attempt is used', mode !== 'source' || r.copied === 'loaded'],
      ['breakers work after load()', r.after === 42],
      ['the .wasm was asked for again', mode === 'source' ? flakyHits.get(mode) === 1 : flakyHits.get(mode) === 2],
      ['no page errors', errors.length === 0],
    ];
    for (const [what, pass] of checks) {
      console.log(`${pass ? 'ok  ' : 'FAIL'} flaky .wasm (${mode}): ${what}`);
      if (!pass) failed++;
    }
    if (checks.some((c) => !c[1])) console.log(JSON.stringify(r), errors, [...flakyHits]);
    await p.close();
  }
  if (exampleServer !== undefined) failed += await example(exampleServer);
} finally {
  for (const [, dev] of devServers) await dev.close();
  await browser.close();
  server.close();
}

/** examples/browser: trips when the upstream goes down, closes when it recovers. */
async function example(serverScript) {
  const child = spawn(process.execPath, [serverScript, '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    const url = await new Promise((resolve, reject) => {
      let out = '';
      child.stdout.on('data', (d) => {
        out += d;
        const m = out.match(/http:\/\/127\.0\.0\.1:\d+\//);
        if (m) resolve(m[0]);
      });
      child.on('exit', (code) => reject(new Error(`examples/browser/serve.mjs exited with ${code}`)));
    });
    const p = await browser.newPage();
    const errors = [];
    p.on('pageerror', (e) => errors.push(String(e)));
    await p.goto(url);
    const state = () => p.textContent('#state');
    const checks = [];
    await p.waitForFunction(() => Number(document.querySelector('#stats')?.textContent.match(/fires(\d+)/)?.[1] ?? 0) > 5, null, { timeout: 10_000 });
    checks.push(['healthy: closed, fetching', (await state()) === 'closed']);
    await p.click('button[data-mode=down]');
    const opened = await p.waitForFunction(() => document.querySelector('#state').textContent === 'open', null, { timeout: 15_000 }).then(() => true, () => false);
    checks.push(['upstream down: the page shows the breaker open', opened]);
    checks.push(['the fallback answers', (await p.textContent('#last')).includes('fallback')]);
    await p.click('button[data-mode=up]');
    const closed = await p.waitForFunction(() => document.querySelector('#state').textContent === 'closed', null, { timeout: 15_000 }).then(() => true, () => false);
    checks.push(['healthy again: closed after its probes', closed]);
    checks.push(['the log shows open, halfOpen, close', /breaker close[\s\S]*breaker halfOpen[\s\S]*breaker open/.test(await p.textContent('#log'))]);
    checks.push(['no page errors', errors.length === 0]);
    for (const [what, pass] of checks) console.log(`${pass ? 'ok  ' : 'FAIL'} examples/browser: ${what}`);
    if (errors.length > 0) console.log(errors);
    await p.close();
    return checks.filter((c) => !c[1]).length;
  } finally {
    child.kill();
  }
}
if (failed > 0) {
  console.error(`browser tests: ${failed} check(s) failed`);
  process.exit(1);
}
console.log(`browser tests: ok (Chromium, plain ESM, esbuild, vite build, webpack 5, Vite 8 and 7 dev servers, two Web Workers sharing a breaker${exampleServer ? ', examples/browser' : ''})`);
