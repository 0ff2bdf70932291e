#!/usr/bin/env bash
# Builds the npm package `fusewire` into js-binding/dist: the one .wasm (cargo →
# wasm-bindgen-cli of exactly the pinned version → wasm-opt -Oz), the CommonJS + ESM
# entry points for Node, the browser/bundler ESM bundle and the TypeScript types.
# Installs what it needs (cached under target/): wasm-bindgen-cli, binaryen
# (wasm-opt), the package's npm devDependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
WB_VERSION=0.2.130
WB=target/tools/bin/wasm-bindgen
if ! "$WB" --version 2>/dev/null | grep -qx "wasm-bindgen $WB_VERSION"; then
  echo "build-js: installing wasm-bindgen-cli $WB_VERSION into target/tools (once)"
  mkdir -p target/tools
  if ! cargo install --quiet wasm-bindgen-cli --version "$WB_VERSION" --locked --root target/tools \
      2> target/tools/install-locked.log; then
    # The crate's lock file pins webpki-roots 1.0.11, which some registry mirrors do
    # not carry: retry from the same crate source with that one entry moved to 1.0.10
    # (everything else stays locked).
    echo "build-js: --locked install failed (see target/tools/install-locked.log); retrying with webpki-roots 1.0.10 in the lock file"
    cargo fetch --quiet --manifest-path /dev/null 2>/dev/null || true
    src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/wasm-bindgen-cli-"$WB_VERSION" 2>/dev/null | head -1)
    if [ -z "$src" ]; then
      cargo install --quiet wasm-bindgen-cli --version "$WB_VERSION" --root target/tools/none >/dev/null 2>&1 || true
      src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/wasm-bindgen-cli-"$WB_VERSION" | head -1)
    fi
    rm -rf target/tools/src && mkdir -p target/tools/src
    cp -r "$src" target/tools/src/
    dir=target/tools/src/wasm-bindgen-cli-$WB_VERSION
    grep -q '^\[workspace\]' "$dir/Cargo.toml" || printf '\n[workspace]\n' >> "$dir/Cargo.toml"
    (cd "$dir" && cargo update --quiet -p webpki-roots@1.0.11 --precise 1.0.10)
    cargo install --quiet --path "$dir" --locked --root target/tools --target-dir target/tools/build
  fi
fi
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
# strip=false: wasm-bindgen reads the target_features section; wasm-opt strips after.
CARGO_PROFILE_WASM_OPT_LEVEL=s CARGO_PROFILE_WASM_STRIP=false \
  cargo build --quiet -p fusewire-js --profile wasm --target wasm32-unknown-unknown
out=target/fusewire-js
rm -rf "$out" && mkdir -p "$out" js-binding/dist
"$WB" --target web --no-typescript --out-dir "$out" target/wasm32-unknown-unknown/wasm/fusewire_js.wasm
"$WASM_OPT" -Oz --converge --strip-debug --strip-producers \
  --enable-bulk-memory --enable-sign-ext --enable-nontrapping-float-to-int \
  --enable-mutable-globals --enable-reference-types --enable-multivalue \
  "$out/fusewire_js_bg.wasm" -o js-binding/dist/fusewire.wasm
node js-binding/build/check-wasm.mjs js-binding/dist/fusewire.wasm
node js-binding/build/build.mjs
