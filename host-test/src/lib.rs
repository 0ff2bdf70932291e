//! fusewire-host-test: a wasmtime proxy-wasm (ABI 0.2.1) host that behaves like Envoy,
//! with a scenario runner. See README.md for the API, the scenario format and the
//! Envoy behaviours reproduced.

#![warn(missing_docs)]

pub mod abi;
pub mod bench;
mod callouts;
pub mod clock;
pub mod env;
pub mod grpc;
pub mod harness;
pub mod headers;
mod hostcalls;
mod html;
mod local_reply;
mod maps;
mod properties;
pub mod report;
pub mod scenario;
pub mod shared;
pub mod stats;
pub mod types;
mod vm;
mod wasi;
mod worker;

pub use abi::Status;
pub use clock::{ClockMode, MONOTONIC_BASE_NS, VIRTUAL_EPOCH_NS};
pub use env::{LifecycleCall, LogRecord, Process};
pub use harness::{Harness, HarnessConfig, Reload};
pub use headers::HeaderMap;
pub use report::Report;
pub use scenario::Scenario;
pub use shared::CasMode;
pub use stats::MetricValue;
pub use types::*;
pub use vm::WasmModule;
