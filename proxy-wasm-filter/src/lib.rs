//! fusewire-proxy-wasm: the Envoy HTTP filter.
