//! fusewire-proxy-wasm: the Envoy HTTP filter.
//!
//! Hystrix-style circuit breakers, bulkheads and timeouts per route or cluster, with
//! one process-wide state per key shared by every Envoy worker through proxy-wasm
//! shared data (see `fusewire_core::shared`). See the crate README for the plugin JSON.

#![warn(missing_docs)]
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]
#![cfg_attr(
    test,
    allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic
    )
)]

pub mod abi;
pub mod classify;
pub mod config;
pub mod filter;
pub mod host;
pub mod idmap;
pub mod matcher;
pub mod metrics;
pub mod replay;
pub mod slottable;
pub mod vecmap;

/// The VM's allocator: talc, smaller and faster than Rust's default (dlmalloc) in a
/// `.wasm` (single-threaded: each Envoy worker has its own VM).
#[cfg(all(target_family = "wasm", not(target_feature = "atomics")))]
#[global_allocator]
static ALLOCATOR: talc::wasm::WasmDynamicTalc = talc::wasm::new_wasm_dynamic_allocator();
