#!/usr/bin/env bash
# make bench: the npm package's benchmark (js-binding/bench/bench.mjs) — fusewire vs
# opossum vs cockatiel on the success and failure paths, stats reads, Collapser vs
# DataLoader, memory per breaker and package size, all in one run. Builds the package
# first; runs on Node 22 (opossum 10 and cockatiel 4 need it; installed under
# target/node/22 if missing). Pass --quick for a short run. The core's own criterion
# benchmarks: cargo bench -p fusewire-core --bench hot_paths
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build-js.sh >/dev/null
(cd js-binding && rm -f fusewire-*.tgz && npm pack --silent >/dev/null)
node=$(bash scripts/install-node.sh 22)
"$node" --expose-gc js-binding/bench/bench.mjs "$@"
# fusewire/redis: added cost per fire, syncs per second, a simulated 100-process fleet
# (needs Debian's redis-server; skipped with a note when it is missing).
if command -v redis-server >/dev/null; then
  "$node" js-binding/bench/redis.mjs "$@"
else
  echo "bench: redis-server not installed (apt-get install redis-server): fusewire/redis numbers skipped"
fi
