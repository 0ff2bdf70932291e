#!/usr/bin/env bash
# Validates examples/envoy/envoy.yaml against Envoy's API protos (PyPI xds-protos), and
# examples/istio/wasmplugin.yaml (README's WasmPlugin): its pluginConfig loads in the
# filter (the filter stage built the module and fusewire-host); the example's stats_tags
# rule gives every stat of the demo its key as a label.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv
if [ ! -x "$venv/bin/python" ]; then
  if ! python3 -m venv "$venv" 2>/dev/null; then
    # Debian splits venv (and its pip) out of python3.
    rm -rf "$venv"
    bash scripts/apt-install.sh python3-venv
    python3 -m venv "$venv"
  fi
fi
if ! "$venv/bin/python" -c 'import envoy.config.bootstrap.v3, yaml' 2>/dev/null; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'xds-protos==1.85.0' 'pyyaml==6.0.4'
fi
"$venv/bin/python" examples/envoy/check_envoy_yaml.py --self-test
module=target/fusewire/wasm32-wasip1/fusewire.wasm
[ -f "$module" ] || bash proxy-wasm-filter/build.sh
cargo build --release -q -p fusewire-host-test --bin fusewire-host
"$venv/bin/python" examples/istio/check_wasmplugin.py target/release/fusewire-host "$module"
"$venv/bin/python" examples/envoy/check_stats_tags.py target/release/fusewire-host "$module" --self-test
