#!/usr/bin/env bash
# fusewire-proxy-wasm: builds the filter for wasm32-wasip1 and wasm32-unknown-unknown
# with the root `wasm` profile, shrinks it with wasm-opt (npm package binaryen,
# installed under target/npm), checks its size and imports, runs the unit tests, the
# filter-in-host-test integration tests (4 workers, Envoy and Kong CAS modes, Envoy's
# strict header/property lifetimes), a short fuzz run of the shared-state decoder, and
# the demo scenario. Installs what it needs; idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

echo "== filter: build .wasm (profile wasm)"
bash proxy-wasm-filter/build.sh

echo "== filter: unit tests"
# Release, as the harness tests below: the crate's dev-dependencies include the
# harness, and a debug build of wasmtime for the unit tests alone took ~4 min.
cargo test --release -p fusewire-proxy-wasm --lib
echo "== filter: in the host harness (4 workers, Envoy + Kong CAS modes)"
cargo test --release -p fusewire-proxy-wasm --test host
echo "== filter: gRPC and streaming traffic in the host harness"
cargo test --release -p fusewire-proxy-wasm --test grpc
echo "== filter: both again as Envoy runs a plugin with allow_on_headers_stop_iteration"
FUSEWIRE_STOP_ITERATION=1 cargo test --release -p fusewire-proxy-wasm --test host --test grpc
echo "== filter: admit_after_body (uploads admitted once their body is in)"
cargo test --release -p fusewire-proxy-wasm --test uploads
echo "== filter: wall-clock steps move nothing (time on the host's monotonic clock)"
cargo test --release -p fusewire-proxy-wasm --test clock_steps
echo "== filter: random traffic with every feature on never kills a worker's VM"
cargo test --release -p fusewire-proxy-wasm --test random_traffic
echo "== filter: workers on threads running at once: the bulkhead limit holds process-wide"
cargo test --release -p fusewire-proxy-wasm --test parallel

echo "== filter: fuzz state_decode (${FUZZ_SECONDS:-15}s)"
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install cargo-fuzz --version 0.13.2 --locked
fi
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  fuzz=(cargo +nightly fuzz)
else
  fuzz=(env RUSTC_BOOTSTRAP=1 cargo fuzz)
fi
(
  cd core/fuzz
  mkdir -p corpus/state_decode
  "${fuzz[@]}" run state_decode corpus/state_decode seeds/state_decode -- \
    -max_total_time="${FUZZ_SECONDS:-15}" -print_final_stats=1 2>&1 | tail -n 5
)

echo "== filter: demo scenario smoke run"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cargo run --quiet --release -p fusewire-proxy-wasm --example demo -- \
  examples/demo.toml --html "$out/demo.html" | tee "$out/summary.txt"
grep -q "tripped at" "$out/summary.txt"
grep -q "closed again at" "$out/summary.txt"
# The demo is deterministic (virtual time, seed 42): README shows what it prints
# (found by review: the block had drifted after collapse and stale changes).
awk '/^What the Envoy part printed here/{f=1} f&&/^```text/{g=1;next} g&&/^```/{exit} g' README.md \
  > "$out/readme-summary.txt"
grep -v '^wrote ' "$out/summary.txt" | diff -u "$out/readme-summary.txt" - \
  || { echo "README's demo output differs from the demo's (above): update README.md" >&2; exit 1; }
test -s "$out/demo.html"

echo "== filter: all tests passed"
