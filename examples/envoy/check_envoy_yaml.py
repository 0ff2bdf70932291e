#!/usr/bin/env python3
"""Validate examples/envoy/envoy.yaml against Envoy's API protos (PyPI `xds-protos`).

Checks, in order:
  1. the YAML parses into envoy.config.bootstrap.v3.Bootstrap with every typed_config
     resolved (an unknown field or a misspelt @type fails here);
  2. protoc-gen-validate rules carried by the protos (required messages and oneofs,
     string/bytes/repeated minimums, enum defined_only, numeric and duration bounds);
  3. Envoy wiring rules protos cannot express: the router ends every HTTP filter chain,
     every route names a defined cluster, the wasm filter has a vm_id and a failure
     policy, and its plugin configuration equals examples/fusewire.json.
With --self-test it also proves each check can fail by feeding known-bad variants.
"""
import copy
import json
import pathlib
import sys

import yaml
from google.protobuf import any_pb2, descriptor, json_format, symbol_database
from google.protobuf import wrappers_pb2  # noqa: F401  (registers StringValue)

# Register every type the example references through typed_config.
from envoy.config.bootstrap.v3 import bootstrap_pb2
from envoy.extensions.access_loggers.stream.v3 import stream_pb2  # noqa: F401
from envoy.extensions.filters.http.router.v3 import router_pb2  # noqa: F401
from envoy.extensions.filters.http.wasm.v3 import wasm_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (  # noqa: F401
    http_connection_manager_pb2,
)
from validate import validate_pb2

HERE = pathlib.Path(__file__).resolve().parent
PLUGIN_JSON = HERE.parent / "fusewire.json"
FD = descriptor.FieldDescriptor


class Invalid(Exception):
    pass


def unpack_any(msg):
    type_name = msg.type_url.split("/")[-1]
    try:
        cls = symbol_database.Default().GetSymbol(type_name)
    except KeyError as e:
        raise Invalid(f"unknown @type {msg.type_url}") from e
    inner = cls()
    if not msg.Unpack(inner):
        raise Invalid(f"cannot unpack {msg.type_url}")
    return inner


def check_rules(msg, path):
    """Apply the protoc-gen-validate rules of `msg` recursively."""
    desc = msg.DESCRIPTOR
    for oneof in desc.oneofs:
        if oneof.GetOptions().Extensions[validate_pb2.required] and not msg.WhichOneof(oneof.name):
            raise Invalid(f"{path}: one of `{oneof.name}` is required")
    for field in desc.fields:
        fpath = f"{path}.{field.name}"
        oneof = field.containing_oneof
        if oneof is not None and msg.WhichOneof(oneof.name) != field.name:
            continue  # rules on a oneof member apply only when it is the one set
        rules = field.GetOptions().Extensions[validate_pb2.rules]
        repeated = field.is_repeated
        if repeated:
            values = list(getattr(msg, field.name))
            if rules.HasField("repeated") and len(values) < rules.repeated.min_items:
                raise Invalid(f"{fpath}: needs at least {rules.repeated.min_items} item(s)")
        elif field.type == FD.TYPE_MESSAGE:
            present = msg.HasField(field.name)
            if rules.HasField("message") and rules.message.required and not present:
                raise Invalid(f"{fpath}: is required")
            values = [getattr(msg, field.name)] if present else []
        else:
            values = [getattr(msg, field.name)]
        for i, value in enumerate(values):
            vpath = f"{fpath}[{i}]" if repeated else fpath
            if field.type == FD.TYPE_MESSAGE:
                if field.message_type.full_name == "google.protobuf.Any":
                    check_rules(unpack_any(value), vpath)
                elif field.message_type.GetOptions().map_entry:
                    continue
                else:
                    if rules.HasField("duration"):
                        check_duration(rules.duration, value, vpath)
                    check_rules(value, vpath)
            else:
                check_scalar(field, rules, value, vpath)


def check_duration(rule, value, path):
    nanos = value.seconds * 10**9 + value.nanos
    if rule.HasField("gt") and not nanos > rule.gt.seconds * 10**9 + rule.gt.nanos:
        raise Invalid(f"{path}: must be greater than {rule.gt.ToJsonString()}")
    if rule.HasField("gte") and not nanos >= rule.gte.seconds * 10**9 + rule.gte.nanos:
        raise Invalid(f"{path}: must be at least {rule.gte.ToJsonString()}")


def check_scalar(field, rules, value, path):
    kind = rules.WhichOneof("type")
    if kind in ("string", "bytes"):
        r = getattr(rules, kind)
        if r.min_len and len(value) < r.min_len:
            raise Invalid(f"{path}: must be at least {r.min_len} long")
    elif kind == "enum":
        if rules.enum.defined_only and value not in field.enum_type.values_by_number:
            raise Invalid(f"{path}: {value} is not a defined {field.enum_type.name}")
        if value in rules.enum.not_in:
            raise Invalid(f"{path}: {value} is not allowed")
    elif kind in ("uint32", "uint64", "int32", "int64", "double"):
        r = getattr(rules, kind)
        for op, ok in (("gt", lambda a, b: a > b), ("gte", lambda a, b: a >= b),
                       ("lt", lambda a, b: a < b), ("lte", lambda a, b: a <= b)):
            if r.HasField(op) and not ok(value, getattr(r, op)):
                raise Invalid(f"{path}: {value} violates {op} {getattr(r, op)}")


def http_managers(bootstrap):
    for listener in bootstrap.static_resources.listeners:
        for chain in listener.filter_chains:
            for f in chain.filters:
                inner = unpack_any(f.typed_config)
                if inner.DESCRIPTOR.name == "HttpConnectionManager":
                    yield listener.name, inner


def check_wiring(bootstrap, plugin_json):
    clusters = {c.name for c in bootstrap.static_resources.clusters}
    wasm_filters = 0
    for listener, hcm in http_managers(bootstrap):
        names = [f.name for f in hcm.http_filters]
        if not names or names[-1] != "envoy.filters.http.router":
            raise Invalid(f"listener {listener}: http_filters must end with envoy.filters.http.router")
        for vh in hcm.route_config.virtual_hosts:
            for route in vh.routes:
                if route.route.cluster and route.route.cluster not in clusters:
                    raise Invalid(f"route {route.name}: unknown cluster {route.route.cluster}")
        for f in hcm.http_filters:
            inner = unpack_any(f.typed_config)
            if not isinstance(inner, wasm_pb2.Wasm):
                continue
            wasm_filters += 1
            cfg = inner.config
            if not cfg.vm_config.vm_id:
                raise Invalid("wasm filter: vm_config.vm_id must be set (shared state is per vm_id)")
            if cfg.failure_policy == 0:
                raise Invalid("wasm filter: failure_policy must be set explicitly")
            value = wrappers_pb2.StringValue()
            if not cfg.configuration.Unpack(value):
                raise Invalid("wasm filter: configuration must be a google.protobuf.StringValue")
            try:
                embedded = json.loads(value.value)
            except json.JSONDecodeError as e:
                raise Invalid(f"wasm filter: configuration is not JSON: {e}") from e
            if embedded != plugin_json:
                raise Invalid("wasm filter: configuration differs from examples/fusewire.json "
                              "(run: python3 examples/envoy/embed.py)")
    if wasm_filters == 0:
        raise Invalid("no envoy.filters.http.wasm filter found")


def validate(doc, plugin_json):
    bootstrap = bootstrap_pb2.Bootstrap()
    try:
        json_format.ParseDict(doc, bootstrap)
    except json_format.ParseError as e:
        raise Invalid(f"schema: {e}") from e
    check_rules(bootstrap, "bootstrap")
    check_wiring(bootstrap, plugin_json)
    return bootstrap


def self_test(doc, plugin_json):
    """Each mutation must be rejected, or the validator proves nothing."""
    def hcm(d):
        return d["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]

    def mutate(fn):
        d = copy.deepcopy(doc)
        fn(d)
        return d

    cases = {
        "misspelt field": mutate(lambda d: hcm(d).update(stat_prefx=hcm(d).pop("stat_prefix"))),
        "missing required stat_prefix": mutate(lambda d: hcm(d).pop("stat_prefix")),
        "unknown failure policy": mutate(lambda d: hcm(d)["http_filters"][0]["typed_config"]["config"].update(failure_policy="FAIL_SOMETIMES")),
        "router not last": mutate(lambda d: hcm(d)["http_filters"].reverse()),
        "route to unknown cluster": mutate(lambda d: hcm(d)["route_config"]["virtual_hosts"][0]["routes"][0]["route"].update(cluster="nope")),
        "misspelt @type": mutate(lambda d: hcm(d)["http_filters"][1]["typed_config"].update({"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Routr"})),
        "empty cluster name": mutate(lambda d: d["static_resources"]["clusters"][0].update(name="")),
    }
    for name, bad in cases.items():
        try:
            validate(bad, plugin_json)
        except Invalid:
            print(f"  self-test ok: {name} rejected")
            continue
        raise SystemExit(f"self-test FAILED: {name} was accepted")
    try:
        validate(doc, dict(plugin_json, __drift__=True))
    except Invalid:
        print("  self-test ok: plugin JSON drift rejected")
    else:
        raise SystemExit("self-test FAILED: plugin JSON drift was accepted")


def main():
    doc = yaml.safe_load((HERE / "envoy.yaml").read_text())
    plugin_json = json.loads(PLUGIN_JSON.read_text())
    try:
        validate(doc, plugin_json)
    except Invalid as e:
        raise SystemExit(f"examples/envoy/envoy.yaml is invalid: {e}")
    print("examples/envoy/envoy.yaml: valid Envoy v3 bootstrap; plugin JSON matches examples/fusewire.json")
    if "--self-test" in sys.argv:
        self_test(doc, plugin_json)


if __name__ == "__main__":
    main()
