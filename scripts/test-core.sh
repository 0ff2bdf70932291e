#!/usr/bin/env bash
# fusewire-core: unit, scenario and property tests, the zero-allocation test, the
# wasm32 zero-import check (core/tests/wasm_imports.rs builds core/wasm-probe),
# then a short run of every fuzz target in core/fuzz. Installs what it needs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

echo "== core: cargo test -p fusewire-core (incl. wasm zero-import check)"
cargo test -p fusewire-core
echo "== core: out-of-memory refusals in a release build (the .wasm's optimiser may drop an"
echo "   allocation probe whose block is unused: the debug build cannot show that)"
cargo test --release -p fusewire-core --test alloc_failure
echo "== core: the JSON reader without its syntax messages (as the npm binding builds it)"
cargo test -p fusewire-core --no-default-features --lib json

echo "== core: fuzz smoke runs"
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install cargo-fuzz --version 0.13.2 --locked
fi
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  fuzz=(cargo +nightly fuzz)
else
  # Stable can take -Z flags with RUSTC_BOOTSTRAP=1.
  fuzz=(env RUSTC_BOOTSTRAP=1 cargo fuzz)
fi
cd core/fuzz
targets=$("${fuzz[@]}" list)
[ -n "$targets" ] || { echo "core/fuzz: no fuzz targets listed" >&2; exit 1; }
secs=${FUZZ_SECONDS:-20}
for t in $targets; do
  echo "-- fuzz $t (${secs}s)"
  mkdir -p "corpus/$t"
  dirs=("corpus/$t")
  if [ -d "seeds/$t" ]; then dirs+=("seeds/$t"); fi
  # New inputs go to corpus/ (gitignored); seeds/ stays as committed. A unit running
  # over 10 s is a hang (a host would loop forever): libFuzzer fails the run.
  "${fuzz[@]}" run "$t" "${dirs[@]}" -- -max_total_time="$secs" -timeout=10 -print_final_stats=1 2>&1 | tail -n 15
done
echo "== core: all tests passed"
