#!/usr/bin/env bash
# Builds the npm package `fusewire` into js-binding/dist: the one .wasm (cargo →
# wasm-bindgen-cli of exactly the pinned version → wasm-opt -Oz), the CommonJS + ESM
# entry points for Node, the browser/bundler ESM bundle and the TypeScript types.
# Installs what it needs (cached under target/): wasm-bindgen-cli, binaryen
# (wasm-opt), the package's npm devDependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
WB=$(bash scripts/install-wasm-bindgen.sh)
WASM_OPT=target/npm/node_modules/.bin/wasm-opt
if [ ! -x "$WASM_OPT" ]; then
  mkdir -p target/npm
  npm install --prefix target/npm --no-audit --no-fund --silent binaryen@132 >/dev/null
fi
# npm devDependencies (from the committed lock file), re-installed when it changes.
stamp=js-binding/node_modules/.fusewire-lock
if [ ! -f "$stamp" ] || ! cmp -s js-binding/package-lock.json "$stamp"; then
  (cd js-binding && npm ci --no-audit --no-fund --loglevel=error)
  cp js-binding/package-lock.json "$stamp"
fi
# opt-level z: the package's .wasm budget is 60 000 B gzipped (check-wasm.mjs); "s" is
# 4 KB over it gzipped. strip=false: wasm-bindgen reads the target_features section;
# wasm-opt strips after. -Zlocation-detail=none (unstable, on the stable compiler
# through RUSTC_BOOTSTRAP) drops the source paths and lines a panic would name: the
# module aborts on a panic and reports no location, and they were ≈ 265 B gzipped.
# Its own target directory: other RUSTFLAGS there would rebuild the filter's crates.
CARGO_PROFILE_WASM_OPT_LEVEL=z CARGO_PROFILE_WASM_STRIP=false \
  RUSTC_BOOTSTRAP=1 RUSTFLAGS="-Zlocation-detail=none" CARGO_TARGET_DIR=target/js-wasm \
  cargo build --quiet -p fusewire-js --profile wasm --target wasm32-unknown-unknown
out=target/fusewire-js
rm -rf "$out" && mkdir -p "$out" js-binding/dist
"$WB" --target web --no-typescript --out-dir "$out" target/js-wasm/wasm32-unknown-unknown/wasm/fusewire_js.wasm
# --low-memory-unused: Rust's wasm32 layout puts the shadow stack at the bottom of
# memory, growing down from 1 MiB, and the data above it: the low 1 KiB is touched
# only by a stack about to overflow, so wasm-opt may fold address offsets (≈ 300 B
# gzipped). --merge-similar-functions folds functions that differ only in constants
# (≈ 240 B gzipped); -aimfs 6 inlines functions of up to 6 instructions at every call
# site (default 2: ≈ 190 B gzipped smaller, as fast; 8 and above grow it again);
# --dae-optimizing drops arguments every caller passes the same, then re-optimizes
# (≈ 35 B gzipped); -ocimfs 30 inlines a function with one caller only up to 30
# instructions (default: any size, which made the module 1.5 KB larger gzipped,
# though 1.8 KB smaller raw, and no faster: success and failure paths within noise,
# A/B interleaved); --strip-target-features drops a section no engine reads.
"$WASM_OPT" --merge-similar-functions --dae-optimizing -Oz -aimfs 6 -ocimfs 30 --converge --strip-debug --strip-producers \
  --strip-target-features --low-memory-unused \
  --enable-bulk-memory --enable-sign-ext --enable-nontrapping-float-to-int \
  --enable-mutable-globals --enable-reference-types --enable-multivalue \
  "$out/fusewire_js_bg.wasm" -o js-binding/dist/fusewire.wasm
node js-binding/build/check-wasm.mjs js-binding/dist/fusewire.wasm
node js-binding/build/build.mjs
