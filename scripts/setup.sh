#!/usr/bin/env bash
# Installs the toolchain pieces every build and test needs. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null; then
  echo "setup: cargo not found; install rustup first" >&2
  exit 1
fi
installed=$(rustup target list --installed)
for t in wasm32-unknown-unknown wasm32-wasip1; do
  grep -qx "$t" <<<"$installed" || rustup target add "$t"
done
rustup component list --installed | grep -q '^clippy' || rustup component add clippy
rustup component list --installed | grep -q '^rustfmt' || rustup component add rustfmt
