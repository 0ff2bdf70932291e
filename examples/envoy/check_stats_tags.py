#!/usr/bin/env python3
"""Check the `stats_tags` rule of examples/envoy/envoy.yaml against the filter's stats.

Runs the demo (examples/demo.toml) in the host harness, takes every `wasmcustom.*`
stat the filter defined, and applies the example's `stats_config.stats_tags` as Envoy
does (each specifier in order; the first capture group is cut from the name, the
second, or else the first, is the tag's value), then names the series as Envoy's
`/stats/prometheus` does (custom namespace dropped, `[^A-Za-z0-9_]` -> `_`). It holds
when every fusewire stat carries `fusewire_key` = its key, the families are
`fusewire_<stat>` only, and no two stats make the same series. With --self-test it
also shows the checks fail without the rule (the key-and-suffix clash of
proxy-wasm-filter/README.md, "Metrics") and with a rule that misses the key.

Usage: check_stats_tags.py <fusewire-host> <fusewire.wasm> [--self-test]
"""
import pathlib
import re
import subprocess
import sys

import yaml

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PREFIX = "fusewire"
# Every stat a key defines (proxy-wasm-filter/src/metrics.rs; README "Metrics").
STATS = {
    "success", "failure", "timeout", "bad_request", "cancelled", "short_circuited",
    "semaphore_rejected", "thread_pool_rejected", "fallback_success", "opened",
    "half_opened", "closed", "collapsed", "collapse_leader", "stale_served",
    "breaker_state", "in_flight", "latency_ms",
}


class Bad(Exception):
    pass


def extract(name, specifiers):
    """Envoy's tag extraction: (tag-extracted name, {tag: value})."""
    tags = {}
    for spec in specifiers:
        m = re.search(spec["regex"], name)
        if m is None:
            continue
        if m.re.groups < 1:
            raise Bad(f"regex {spec['regex']!r} has no capture group (Envoy refuses it)")
        value = m.group(2) if m.re.groups >= 2 and m.group(2) is not None else m.group(1)
        tags[spec["tag_name"]] = value
        name = name[: m.start(1)] + name[m.end(1):]
    return name, tags


def series(stats, specifiers):
    """{(family, labels): stat name} for the fusewire stats, checking each one."""
    out = {}
    for full in stats:
        name, tags = extract(full, specifiers)
        if not name.startswith("wasmcustom."):
            raise Bad(f"{full}: left the custom namespace ({name})")
        family = re.sub(r"[^A-Za-z0-9_]", "_", name[len("wasmcustom."):])
        key, stat = full[len(f"wasmcustom.{PREFIX}."):].rsplit(".", 1)
        if tags.get("fusewire_key") != key:
            raise Bad(f"{full}: fusewire_key is {tags.get('fusewire_key')!r}, not {key!r}")
        if family != f"{PREFIX}_{stat}" or stat not in STATS:
            raise Bad(f"{full}: family {family}, not {PREFIX}_<stat>")
        labels = tuple(sorted(tags.items()))
        if (family, labels) in out:
            raise Bad(f"{full} and {out[(family, labels)]} are one series: {family}{dict(labels)}")
        out[(family, labels)] = full
    return out


def main():
    args = [a for a in sys.argv[1:] if a != "--self-test"]
    if len(args) != 2:
        sys.exit("usage: check_stats_tags.py <fusewire-host> <fusewire.wasm> [--self-test]")
    host, module = args
    doc = yaml.safe_load((HERE / "envoy.yaml").read_text())
    specifiers = doc["stats_config"]["stats_tags"]
    run = subprocess.run(
        [host, "run", str(ROOT / "examples" / "demo.toml"), "--module", module, "--stats", "--quiet"],
        capture_output=True, text=True, check=True,
    )
    stats = [line.split(":", 1)[0] for line in run.stdout.splitlines()
             if line.startswith(f"wasmcustom.{PREFIX}.")]
    keys = {s[len(f"wasmcustom.{PREFIX}."):].rsplit(".", 1)[0] for s in stats}
    if not keys or len(stats) != len(keys) * len(STATS):
        sys.exit(f"check_stats_tags: expected {len(STATS)} stats for each key, got {len(stats)} for {sorted(keys)}")
    try:
        found = series(stats, specifiers)
    except Bad as e:
        sys.exit(f"check_stats_tags: {e}")
    families = sorted({f for f, _ in found})
    print(f"stats_tags: {len(stats)} stats of {len(keys)} keys -> {len(families)} families with a fusewire_key label")
    if "--self-test" not in sys.argv:
        return
    # README's clash: `{policy}/{path}` keys `/orders` and `/orders/fallback`.
    clash = [f"wasmcustom.{PREFIX}.p__orders.fallback_success", f"wasmcustom.{PREFIX}.p__orders_fallback.success"]
    series(clash, specifiers)
    cases = {
        "no rule (key and stat run together)": (clash, []),
        "a rule that misses the key": (stats, [{"tag_name": "fusewire_key", "regex": r"^wasmcustom\.fusewire_(([a-z]+)\.)"}]),
        "a rule without a capture group": (stats, [{"tag_name": "fusewire_key", "regex": r"^wasmcustom\.fusewire\."}]),
    }
    for what, (names, specs) in cases.items():
        try:
            series(names, specs)
        except Bad:
            print(f"  self-test ok: {what} rejected")
            continue
        sys.exit(f"check_stats_tags: self-test FAILED: {what} was accepted")


if __name__ == "__main__":
    main()
