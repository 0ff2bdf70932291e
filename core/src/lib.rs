//! fusewire-core: the sans-IO resilience engine.
//!
//! Hosts pass in time (`now`, u64 nanoseconds), randomness (`rand`, a u64 per
//! decision) and storage; the core never does I/O and never reads a clock. See
//! the crate README for the host contract and the config schema.

mod arrays;
pub mod breaker;
pub mod bulkhead;
pub mod circuit;
pub mod config;
mod counter;
pub mod event;
pub mod histogram;
pub mod registry;
pub mod shared;
pub mod time;
pub mod timeouts;
pub mod window;

pub use breaker::{BreakerState, Outcome, Permit, Phase, Rejection, Transition, TransitionReason};
pub use circuit::{CircuitBreaker, Snapshot};
pub use config::{Config, ConfigError};
pub use event::EventKind;
pub use histogram::{Histogram, Percentiles};
pub use time::Nanos;
pub use window::{HealthSnapshot, Window};
