#!/usr/bin/env bash
# Installs, in the background of `make test`, what the later stages need and that
# takes minutes of mostly idle waiting or one core (Debian packages, Node binaries,
# wasm-bindgen-cli), so it overlaps the first stages' builds. Each stage still
# installs what it needs itself if this did not finish or failed.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
pkgs=()
command -v chromium >/dev/null || [ -x /usr/bin/chromium ] || pkgs+=(chromium)
command -v redis-server >/dev/null || pkgs+=(redis-server)
if [ ${#pkgs[@]} -gt 0 ]; then
  bash scripts/apt-install.sh "${pkgs[@]}" || { echo "prefetch: apt-get install ${pkgs[*]} failed"; status=1; }
fi
for major in 18 22 24; do
  bash scripts/install-node.sh "$major" >/dev/null || status=1
done
bash scripts/install-wasm-bindgen.sh >/dev/null || status=1
exit $status
