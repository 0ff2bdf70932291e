#!/usr/bin/env bash
# Every test of the project. Each stage script installs what it needs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p target
bash scripts/prefetch.sh > target/prefetch.log 2>&1 &
prefetch=$!
echo "== lint: cargo fmt, cargo clippy"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# Stages run in dependency order; every scripts/test-*.sh must be listed here.
stages=(core host filter envoy-example js redis)
for f in scripts/test-*.sh; do
  name=${f#scripts/test-}; name=${name%.sh}
  [[ " ${stages[*]} " == *" $name "* ]] || { echo "scripts/test.sh: stage $f is not listed" >&2; exit 1; }
done
for name in "${stages[@]}"; do
  if [ "$name" = js ]; then
    # The background installs (scripts/prefetch.sh) must be done before the stages
    # that use what they install.
    wait "$prefetch" || { echo "prefetch failed (the stages install what they need):"; tail -n 20 target/prefetch.log; }
  fi
  f=scripts/test-$name.sh
  [ -f "$f" ] || { echo "scripts/test.sh: missing stage $f" >&2; exit 1; }
  echo "== $f"
  bash "$f"
done
echo "== all test stages passed"
