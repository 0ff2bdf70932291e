// Checks the shipped .wasm: its only import is wasm-bindgen's externref-table
// initialiser (so the loader needs no glue), every export the wrapper calls is
// there, and the gzipped size is within budget (FUSEWIRE_MAX_WASM_GZIP, bytes; 0 = none).
import { readFileSync } from 'node:fs';
import { gzipSync } from 'node:zlib';

const file = process.argv[2];
const bytes = readFileSync(file);
const m = new WebAssembly.Module(bytes);
const imports = WebAssembly.Module.imports(m);
const bad = imports.filter((i) => i.name !== '__wbindgen_init_externref_table');
if (bad.length > 0) {
  console.error(`check-wasm: unexpected imports: ${bad.map((i) => `${i.module}.${i.name}`).join(', ')}`);
  process.exit(1);
}
const need = ['memory', 'fw_abi', 'fw_start', 'fw_complete', 'fw_poll', 'fw_next', 'fw_create',
  'fw_free', 'fw_snapshot', 'fw_state', 'fw_io', 'fw_io_done', 'fw_buckets', 'fw_check'];
const have = new Set(WebAssembly.Module.exports(m).map((e) => e.name));
const missing = need.filter((n) => !have.has(n));
if (missing.length > 0) {
  console.error(`check-wasm: missing exports: ${missing.join(', ')}`);
  process.exit(1);
}
const gz = gzipSync(bytes, { level: 9 }).length;
const max = Number(process.env.FUSEWIRE_MAX_WASM_GZIP ?? 60000);
console.log(`fusewire.wasm: ${bytes.length} bytes, ${gz} bytes gzipped${max > 0 ? ` (budget ${max})` : ''}`);
if (max > 0 && gz > max) {
  console.error(`check-wasm: ${gz} bytes gzipped is over the ${max} byte budget`);
  process.exit(1);
}
