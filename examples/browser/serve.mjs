// Serves the browser example: the page, fusewire's browser build (from
// js-binding/dist, built by scripts/build-js.sh) and a flaky /api whose health the
// page's buttons switch. Usage: node examples/browser/serve.mjs [port]
import { existsSync, readFileSync, statSync } from 'node:fs';
import { createServer } from 'node:http';
import { dirname, extname, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const dist = join(here, '..', '..', 'js-binding', 'dist');
if (!existsSync(join(dist, 'browser.js'))) {
  console.error('build the package first: bash scripts/build-js.sh');
  process.exit(1);
}
const TYPES = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript', '.wasm': 'application/wasm' };
let mode = 'up';
const server = createServer((req, res) => {
  const url = new URL(req.url, 'http://localhost');
  if (url.pathname === '/api/data') {
    const fail = mode === 'down' ? Math.random() < 0.9 : mode === 'flaky' ? Math.random() < 0.4 : false;
    const delay = mode === 'down' ? 30 : 5;
    setTimeout(() => {
      if (fail) res.writeHead(503).end('upstream unavailable');
      else res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ value: Math.round(Math.random() * 100) }));
    }, delay);
    return;
  }
  if (url.pathname === '/api/mode') {
    mode = url.searchParams.get('set') ?? mode;
    res.writeHead(200, { 'content-type': 'text/plain' }).end(mode);
    return;
  }
  const file = url.pathname.startsWith('/fusewire/')
    ? normalize(join(dist, url.pathname.slice('/fusewire/'.length)))
    : normalize(join(here, url.pathname === '/' ? 'index.html' : url.pathname));
  // (A directory is not served: reading one threw and ended the server.)
  if ((!file.startsWith(dist) && !file.startsWith(here)) || !existsSync(file) || !statSync(file).isFile()) {
    res.writeHead(404).end();
    return;
  }
  res.writeHead(200, { 'content-type': TYPES[extname(file)] ?? 'application/octet-stream' }).end(readFileSync(file));
});
const port = Number(process.argv[2] ?? 8080);
server.on('error', (e) => {
  console.error(e.code === 'EADDRINUSE'
    ? `fusewire browser example: port ${port} is in use; pass another: node examples/browser/serve.mjs 8081 (0: any free port)`
    : `fusewire browser example: ${e.message}`);
  process.exit(1);
});
server.listen(port, '127.0.0.1', () => console.log(`fusewire browser example: http://127.0.0.1:${server.address().port}/`));
