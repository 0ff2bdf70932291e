#!/usr/bin/env bash
# fusewire/redis: a fleet of Node processes sharing breakers through Redis. Installs
# Debian's redis-server if missing; the tests start their own servers on free local
# ports (a single Redis, a primary with a replica, and a 3-master local Redis
# Cluster), kill, restart, pause, fail over and partition them (through TCP proxies
# in the test), and stop them at the end. Runs over the packed tarball (as test-js does) with
# ioredis (the peer dependency) installed beside it, on the machine's Node, and
# type-checks a TypeScript consumer of fusewire/redis. Rebuilds the package only
# when its sources are newer than dist/.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
start=$(date +%s)
command -v redis-server >/dev/null && command -v redis-cli >/dev/null || bash scripts/apt-install.sh redis-server
echo "test-redis: $(redis-server --version | cut -d' ' -f1-3)"
stamp=js-binding/dist/redis.cjs
if [ ! -f "$stamp" ] || [ -n "$(find js-binding/ts js-binding/src core/src js-binding/build js-binding/package.json -newer "$stamp" -type f | head -1)" ]; then
  bash scripts/build-js.sh
fi
out=target/redis-test
rm -rf "$out" && mkdir -p "$out/app"
(cd js-binding && npm pack --silent --pack-destination "$root/$out" >/dev/null)
tarball=$(ls "$out"/fusewire-*.tgz)
# The test dependencies as locked in js-binding/test/app (test-js's), then the tarball.
cp js-binding/test/app/package.json js-binding/test/app/package-lock.json "$out/app/"
(cd "$out/app" && npm ci --prefer-offline --no-audit --no-fund --loglevel=error >/dev/null &&
  npm install --no-save --prefer-offline --no-audit --no-fund --loglevel=error "../$(basename "$tarball")" >/dev/null)
cp -r js-binding/test/redis "$out/app/test"
echo "== tsc --noEmit: a consumer of fusewire/redis"
cat > "$out/app/test/sample.mts" <<'TS'
import { Redis, Cluster } from 'ioredis';
import { CircuitBreaker } from 'fusewire';
import { RedisStore, type RedisStoreStats } from 'fusewire/redis';
const store = new RedisStore({ client: new Redis({ lazyConnect: true }), prefix: 'app:', ttlMs: 60_000, timeoutMs: 200 });
const cluster = new RedisStore({ client: new Cluster([{ host: '127.0.0.1', port: 7000 }], { lazyConnect: true }) });
const b = new CircuitBreaker(async (x: number) => x * 2, { name: 'up', shared: { store, sync_ms: 500, stale_ms: 5000 } });
const s: RedisStoreStats = store.stats;
const p: Promise<number> = b.fire(1);
void [cluster, s, p];
TS
cat > "$out/app/test/tsconfig.json" <<'JSON'
{ "compilerOptions": { "module": "NodeNext", "moduleResolution": "NodeNext", "target": "ES2022", "strict": true,
  "noEmit": true, "skipLibCheck": false, "types": ["node"] }, "files": ["sample.mts"] }
JSON
(cd "$out/app" && node "$root/js-binding/node_modules/typescript/bin/tsc" -p test)
echo "types: ok"
echo "== node:test: the fleet against redis-server (Node $(node --version))"
(cd "$out/app" && timeout -k 10 600 node --test --test-timeout=300000 --test-reporter=spec test/*.test.mjs 2>&1 | tee "$root/$out/log.txt" | grep -E '^# |✔|✖|﹣' || true)
# (A test past its timeout is counted cancelled, not failed: both must be 0.)
grep -qE '^ℹ fail 0' "$out/log.txt" && grep -qE '^ℹ cancelled 0' "$out/log.txt" ||
  { grep -B5 -A40 '✖' "$out/log.txt" | head -150; tail -12 "$out/log.txt"; exit 1; }
echo "== examples/fleet: 3 processes trip together and close together"
if ! (cd examples/fleet && npm install --no-audit --no-fund --loglevel=error >/dev/null && timeout -k 10 300 node fleet.mjs) > "$out/fleet.log" 2>&1; then
  cat "$out/fleet.log"
  echo "examples/fleet: failed" >&2
  exit 1
fi
for m in 0 1 2; do
  for want in "member $m: open" "member $m: close"; do
    grep -q "$want" "$out/fleet.log" || { cat "$out/fleet.log"; echo "examples/fleet: no '$want'" >&2; exit 1; }
  done
done
grep -E "^upstream:" "$out/fleet.log"
echo "== test-redis: ok in $(( $(date +%s) - start )) s"
