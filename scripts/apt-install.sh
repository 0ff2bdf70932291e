#!/usr/bin/env bash
# Installs Debian packages (as root, else through sudo), refreshing the package lists
# only when the first try fails: `apt-install.sh chromium redis-server`.
set -euo pipefail
[ $# -gt 0 ] || exit 0
sudo=()
[ "$(id -u)" = 0 ] || sudo=(sudo)
"${sudo[@]}" apt-get install -y "$@" >/dev/null 2>&1 ||
  { "${sudo[@]}" apt-get update >/dev/null && "${sudo[@]}" apt-get install -y "$@" >/dev/null; }
