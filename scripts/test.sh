#!/usr/bin/env bash
# Every test of the project. Each stage script installs what it needs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== lint: cargo fmt, cargo clippy"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
for stage in scripts/test-*.sh; do
  echo "== $stage"
  bash "$stage"
done
echo "== all test stages passed"
