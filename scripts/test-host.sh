#!/usr/bin/env bash
# host-test stage: builds the fixture modules, runs every host-test test (release:
# guest code runs under cranelift, far faster than a debug wasmtime), then smoke-runs
# the CLI (scenario reproducibility, bench, check).
set -euo pipefail
cd "$(dirname "$0")/.."

# The wasm targets, clippy and rustfmt (run alone on a fresh machine too).
bash scripts/setup.sh

echo "== host-test: fixtures (wasm32-wasip1, wasm32-unknown-unknown)"
for t in wasm32-wasip1 wasm32-unknown-unknown; do
  cargo build --quiet --release --locked --target "$t" \
    --manifest-path host-test/fixtures/Cargo.toml --target-dir target/fixtures
done
(cd host-test/fixtures && cargo fmt --all -- --check)
(cd host-test/fixtures && cargo clippy --quiet --release --locked --target wasm32-wasip1 \
  --target-dir ../../target/fixtures -- -D warnings)

echo "== host-test: unit + fixture + scenario tests"
FUSEWIRE_FIXTURES_PREBUILT=1 cargo test --release --locked -p fusewire-host-test

echo "== host-test: CLI smoke"
cargo build --quiet --release --locked -p fusewire-host-test --bin fusewire-host
bin=target/release/fusewire-host
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
$bin run host-test/scenarios/flaky-backend.toml --json "$out/a.json" --html "$out/a.html" --quiet
$bin run host-test/scenarios/flaky-backend.toml --json "$out/b.json" --quiet
cmp "$out/a.json" "$out/b.json" || { echo "virtual-time run not reproducible" >&2; exit 1; }
grep -q '<svg' "$out/a.html"
check_out=$($bin check target/fixtures/wasm32-wasip1/release/fixture_probe.wasm --workers 2)
[ "$(grep -c proxy_on_configure <<<"$check_out")" = 4 ] || { echo "check: expected 4 on_configure calls" >&2; exit 1; }
$bin bench --module target/fixtures/wasm32-wasip1/release/fixture_noop.wasm --requests 300 --rounds 1 >/dev/null
echo "== host-test: ok"
