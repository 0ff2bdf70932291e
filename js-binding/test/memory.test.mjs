// The wasm instance's memory: grown in steps, so that many breakers alive do not make
// each new one pay for all of them. (Every `memory.grow` replaces the JS ArrayBuffer,
// and V8 answers with a collection of the whole JS heap: grown page by page, the
// 40 000th breaker took 1.5 ms to create, the first 5 000 73 µs each.)
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { test } from 'node:test';

import CircuitBreaker from 'fusewire';

const require = createRequire(import.meta.url);
const pkgDir = dirname(require.resolve('fusewire/package.json'));
const engine = require(join(pkgDir, 'dist', 'cjs', 'engine.js'));

test('wasm memory grows by at least an eighth of itself at a time', () => {
  const keep = [];
  let grows = 0;
  let size = engine.bytes().length;
  const start = size;
  for (let i = 0; i < 3000; i++) {
    keep.push(new CircuitBreaker(async () => 1, { name: `memory-${i}` }));
    const now = engine.bytes().length;
    if (now !== size) {
      grows++;
      assert.ok(now - size >= size / 8 - 65536, `grew ${now - size} B at ${size} B`);
      size = now;
    }
  }
  const grown = size - start;
  assert.ok(grown > 3000 * 4096, `3 000 breakers take wasm memory (${grown} B)`);
  // Page by page this was one grow per 64 KiB (≈ 450 here); in steps of ⅛, a few dozen.
  assert.ok(grows <= 40, `${grows} grows for ${grown} B`);
  for (const b of keep) b.shutdown();
});
