#!/usr/bin/env python3
"""Copy examples/fusewire.json into the wasm filter's configuration in envoy.yaml."""
import json
import pathlib
import re

HERE = pathlib.Path(__file__).resolve().parent
plugin = json.loads((HERE.parent / "fusewire.json").read_text())
yaml_path = HERE / "envoy.yaml"
text = yaml_path.read_text()
pattern = re.compile(r"(?P<head>^(?P<indent> *)value: \|\n)(?P<body>(?:(?P=indent)  .*\n|\n)*)", re.M)
m = pattern.search(text)
if not m:
    raise SystemExit("envoy.yaml: no `value: |` block found")
pad = m.group("indent") + "  "
body = "".join(pad + line + "\n" for line in json.dumps(plugin, indent=2).splitlines())
yaml_path.write_text(text[: m.start("body")] + body + text[m.end("body"):])
print("envoy.yaml: plugin configuration refreshed from examples/fusewire.json")
