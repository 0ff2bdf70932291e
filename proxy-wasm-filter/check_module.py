#!/usr/bin/env python3
"""Checks a built filter module: imports only from `env` (plus WASI on wasip1) and
exports the proxy-wasm ABI 0.2.1 entry points the filter implements."""
import sys


def leb(d, i):
    r = s = 0
    while True:
        b = d[i]
        i += 1
        r |= (b & 0x7F) << s
        s += 7
        if b < 0x80:
            return r, i


def name(d, i):
    n, i = leb(d, i)
    return d[i:i + n].decode(), i + n


def sections(path):
    d = open(path, "rb").read()
    assert d[:4] == b"\0asm", f"{path}: not a wasm module"
    i, imports, exports = 8, [], []
    while i < len(d):
        sid = d[i]
        size, i = leb(d, i + 1)
        body, j = d[i:i + size], 0
        if sid in (2, 7):
            n, j = leb(body, 0)
            for _ in range(n):
                if sid == 2:
                    mod, j = name(body, j)
                    field, j = name(body, j)
                    kind = body[j]
                    j += 1
                    if kind == 0:
                        _, j = leb(body, j)
                    elif kind == 1:
                        j += 1
                        flags, j = leb(body, j)
                        _, j = leb(body, j)
                        if flags & 1:
                            _, j = leb(body, j)
                    elif kind == 2:
                        flags, j = leb(body, j)
                        _, j = leb(body, j)
                        if flags & 1:
                            _, j = leb(body, j)
                    else:
                        j += 2
                    imports.append((mod, field))
                else:
                    field, j = name(body, j)
                    j += 1
                    _, j = leb(body, j)
                    exports.append(field)
        i += size
    return imports, exports


REQUIRED = [
    "proxy_abi_version_0_2_1", "proxy_on_memory_allocate", "_initialize",
    "proxy_on_context_create", "proxy_on_vm_start", "proxy_on_configure", "proxy_on_tick",
    "proxy_on_request_headers", "proxy_on_response_headers", "proxy_on_response_trailers",
    "proxy_on_log", "proxy_on_done", "proxy_on_delete",
]

ok = True
for path in sys.argv[1:]:
    imports, exports = sections(path)
    wasi = "wasip1" in path
    allowed = {"env"} | ({"wasi_snapshot_preview1"} if wasi else set())
    bad = [f"{m}.{f}" for m, f in imports if m not in allowed]
    missing = [e for e in REQUIRED if e not in exports]
    env = sorted(f for m, f in imports if m == "env")
    print(f"{path}: {len(imports)} imports ({len(env)} from env), {len(exports)} exports")
    if bad or missing:
        ok = False
        print(f"  unexpected imports: {bad}\n  missing exports: {missing}", file=sys.stderr)
sys.exit(0 if ok else 1)
