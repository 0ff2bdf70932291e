#!/usr/bin/env bash
# Installs wasm-bindgen-cli of exactly the version js-binding/Cargo.toml pins into
# target/tools (once: its build takes minutes). Prints the binary's path.
set -euo pipefail
cd "$(dirname "$0")/.."
exec 3>&1 1>&2 # stdout is the path alone
WB_VERSION=0.2.130
WB=target/tools/bin/wasm-bindgen
if ! "$WB" --version 2>/dev/null | grep -qx "wasm-bindgen $WB_VERSION"; then
  echo "install-wasm-bindgen: installing wasm-bindgen-cli $WB_VERSION into target/tools (once)"
  mkdir -p target/tools
  if ! cargo install --quiet wasm-bindgen-cli --version "$WB_VERSION" --locked --root target/tools \
      2> target/tools/install-locked.log; then
    # The crate's lock file pins webpki-roots 1.0.11, which some registry mirrors do
    # not carry: retry from the same crate source with that one entry moved to 1.0.10
    # (everything else stays locked).
    echo "install-wasm-bindgen: --locked install failed (see target/tools/install-locked.log); retrying with webpki-roots 1.0.10 in the lock file"
    cargo fetch --quiet --manifest-path /dev/null 2>/dev/null || true
    src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/wasm-bindgen-cli-"$WB_VERSION" 2>/dev/null | head -1)
    if [ -z "$src" ]; then
      cargo install --quiet wasm-bindgen-cli --version "$WB_VERSION" --root target/tools/none >/dev/null 2>&1 || true
      src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/wasm-bindgen-cli-"$WB_VERSION" | head -1)
    fi
    rm -rf target/tools/src && mkdir -p target/tools/src
    cp -r "$src" target/tools/src/
    dir=target/tools/src/wasm-bindgen-cli-$WB_VERSION
    grep -q '^\[workspace\]' "$dir/Cargo.toml" || printf '\n[workspace]\n' >> "$dir/Cargo.toml"
    (cd "$dir" && cargo update --quiet -p webpki-roots@1.0.11 --precise 1.0.10)
    cargo install --quiet --path "$dir" --locked --root target/tools --target-dir target/tools/build
  fi
fi
echo "$WB" >&3
