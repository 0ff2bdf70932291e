//! fusewire-host-test: a proxy-wasm host harness that behaves like Envoy.
