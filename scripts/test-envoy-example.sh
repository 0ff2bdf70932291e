#!/usr/bin/env bash
# Validates examples/envoy/envoy.yaml against Envoy's API protos (PyPI xds-protos).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import envoy.config.bootstrap.v3, yaml' 2>/dev/null; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'xds-protos==1.85.0' 'pyyaml==6.0.4'
fi
"$venv/bin/python" examples/envoy/check_envoy_yaml.py --self-test
