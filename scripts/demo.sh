#!/usr/bin/env bash
# The main job: drive the engine through an outage and show what it did.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo run --quiet --release -p fusewire-core --example outage
