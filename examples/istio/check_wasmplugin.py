#!/usr/bin/env python3
"""Check examples/istio/wasmplugin.yaml, the WasmPlugin of proxy-wasm-filter/README.md.

  1. the README's Istio block is this file, verbatim;
  2. it is a WasmPlugin (extensions.istio.io) with the fields the README relies on;
  3. its pluginConfig, converted to JSON as Istio converts it (YAML -> protobuf Struct
     -> JSON), loads in the filter: `fusewire-host check <module> --config <json>`
     exits 0 (a refused config would be a 500 NFCF outage on new pods).

Usage: check_wasmplugin.py <fusewire-host> <fusewire.wasm>
"""
import json
import pathlib
import re
import subprocess
import sys
import tempfile

import yaml

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
EXAMPLE = HERE / "wasmplugin.yaml"
README = ROOT / "proxy-wasm-filter" / "README.md"


def fail(msg):
    print(f"check_wasmplugin: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    if len(sys.argv) != 3:
        fail("usage: check_wasmplugin.py <fusewire-host> <fusewire.wasm>")
    host, module = sys.argv[1], sys.argv[2]
    text = EXAMPLE.read_text()
    readme = README.read_text()
    at = readme.find("### Istio (`WasmPlugin`)")
    block = re.search(r"```yaml\n(.*?)```", readme[at:], re.S) if at >= 0 else None
    if block is None or block.group(1) != text:
        fail(f"{README.relative_to(ROOT)}: the Istio YAML block differs from {EXAMPLE.relative_to(ROOT)}")
    doc = yaml.safe_load(text)
    if doc.get("apiVersion") != "extensions.istio.io/v1alpha1" or doc.get("kind") != "WasmPlugin":
        fail("not an extensions.istio.io/v1alpha1 WasmPlugin")
    spec = doc.get("spec") or {}
    for field in ("url", "pluginConfig", "failStrategy", "match"):
        if field not in spec:
            fail(f"spec.{field} missing")
    if spec["failStrategy"] not in ("FAIL_OPEN", "FAIL_CLOSE", "FAIL_RELOAD"):
        fail(f"spec.failStrategy: {spec['failStrategy']!r}")
    # Istio hands the filter google.protobuf.Struct rendered as JSON: numbers are
    # doubles, printed without a fraction when whole (json.dumps of a float would
    # print 25.0, which the filter refuses for counts).
    def struct(v):
        if isinstance(v, bool) or v is None or isinstance(v, str):
            return v
        if isinstance(v, (int, float)):
            return int(v) if float(v).is_integer() else float(v)
        if isinstance(v, list):
            return [struct(x) for x in v]
        return {str(k): struct(x) for k, x in v.items()}
    plugin = json.dumps(struct(spec["pluginConfig"]))
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        f.write(plugin)
        f.flush()
        r = subprocess.run([host, "check", module, "--config", f.name], capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"the filter refused the pluginConfig: {r.stderr.strip() or r.stdout.strip()}")
    # `[vm] level: message`; 3 is warn: a config warning (a policy that never applies,
    # a queue capped by its threshold...) has no place in the example.
    warned = [line for line in r.stdout.splitlines() if re.match(r"^\[[^\]]*\] [345]: ", line)]
    if warned:
        fail("the pluginConfig loads with warnings: " + "; ".join(warned))
    print(f"check_wasmplugin: {EXAMPLE.relative_to(ROOT)} ok (pluginConfig loads in the filter, no warning)")


if __name__ == "__main__":
    main()
