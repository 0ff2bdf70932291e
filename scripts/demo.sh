#!/usr/bin/env bash
# The main job: build the Envoy filter (.wasm), run it in the Envoy stand-in harness
# with 4 workers through healthy -> partial outage -> recovery, print a summary and
# write the HTML timeline to out/demo.html. Then the Node demo (the npm package).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash proxy-wasm-filter/build.sh
mkdir -p out
cargo run --quiet --release -p fusewire-proxy-wasm --example demo -- \
  examples/demo.toml --html out/demo.html --json out/demo.json
echo
echo "timeline: out/demo.html   report: out/demo.json"

# The Node demo: the npm package (js-binding/) in a small HTTP service calling a flaky
# upstream (examples/node). The browser example: node examples/browser/serve.mjs
echo
echo "== the Node demo: examples/node (npm package fusewire)"
echo "building the npm package (js-binding/; the first run also builds wasm-bindgen-cli, ~4 min)"
bash scripts/build-js.sh >/dev/null
(cd examples/node && npm install --no-audit --no-fund --loglevel=error >/dev/null && node service.mjs)
