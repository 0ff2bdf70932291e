//! fusewire-core: the sans-IO resilience engine.
//!
//! Hosts pass in time (`now`, u64 nanoseconds), randomness (`rand`, a u64 per
//! decision) and the answers of their store; the core never does I/O, never reads a
//! clock, has no threads and no globals. [`Engine`] is the one protected-call flow
//! every host drives (breaker, bulkhead with queue, deadlines, fallback limit, key
//! table, local or shared state). [`RequestCache`] (request cache index with
//! in-flight de-duplication) and [`Collapser`] (batch accumulator) run beside it:
//! the host keeps the payloads, the core keeps the index and the rules. See the
//! crate README for the host contract and the config schema.

#![warn(missing_docs)]

pub mod breaker;
pub mod cache;
pub mod circuit;
pub mod collapser;
pub mod config;
mod counter;
pub mod engine;
pub mod event;
pub mod histogram;
pub mod json;
mod keyindex;
pub mod ring;
pub mod shared;
mod slab;
pub mod time;
pub mod window;

pub use breaker::{BreakerState, Pass, Phase, ShortCircuit, Transition, TransitionReason};
pub use cache::RequestCache;
pub use circuit::{Circuit, CircuitBreaker, Snapshot};
pub use collapser::Collapser;
pub use config::{CacheConfig, CollapserConfig, Config, ConfigError, SharedConfig};
pub use engine::{
    CallId, Cause, Completion, Engine, Event, FallbackPermit, KeyId, Permit, PolicyId, Refusal,
    Start, Ticket,
};
pub use event::{EventKind, Outcome};
pub use histogram::{Histogram, Percentiles};
pub use time::Nanos;
pub use window::{HealthSnapshot, Window};
