//! fusewire-core: the sans-IO resilience engine.
//!
//! Hosts pass in time (`now`, u64 nanoseconds), randomness (`rand`, a u64 per
//! decision) and the answers of their store; the core never does I/O, never reads a
//! clock, has no threads and no globals. [`Engine`] is the one protected-call flow
//! every host drives (breaker, bulkhead with queue, deadlines, fallback limit, key
//! table, local or shared state). [`RequestCache`] (request cache index with
//! in-flight de-duplication) and [`Collapser`] (batch accumulator) run beside it:
//! the host keeps the payloads, the core keeps the index and the rules. See
//! [`guide`] (the crate README) for the host contract and the config schema.
//!
//! A host on local state, with a simulated clock (a real host passes its monotonic
//! clock in ns and a random `u64` per decision):
//!
//! ```
//! use fusewire_core::{Completion, Config, Engine, Event, Outcome, Phase, Start};
//!
//! const MS: u64 = 1_000_000;
//! let mut engine = Engine::local();
//! let config = Config::from_json(
//!     r#"{ "breaker": { "error_percentage": { "request_volume_threshold": 2 } },
//!          "execution": { "timeout_ms": 1000 } }"#,
//! )?;
//! let policy = engine.add_policy("payments", config)?;
//! let key = engine.key(policy, "payments", 0).expect("a policy of this engine");
//! let mut now = 0;
//! for _ in 0..2 {
//!     match engine.start(key, now, 7) {
//!         // Run the call; on its result:
//!         Start::Running(permit) => {
//!             now += 5 * MS;
//!             assert_eq!(engine.complete(permit, Outcome::Failure, now, 7), Completion::OnTime);
//!         }
//!         Start::Queued(_ticket) => unreachable!("no queue configured"),
//!         Start::Refused(_refusal) => unreachable!("closed until the second failure"),
//!     }
//! }
//! // Events the calls decided (time-driven ones: `poll` at `next_deadline`).
//! let mut phase = Phase::Closed;
//! while let Some(event) = engine.take_event() {
//!     if let Event::Transition { transition, .. } = event {
//!         phase = transition.to; // e.g. emit `open`
//!     }
//! }
//! assert_eq!(phase, Phase::Open);
//! assert!(matches!(engine.start(key, now, 7), Start::Refused(_)), "short-circuited");
//! # Ok::<(), fusewire_core::ConfigError>(())
//! ```

#![warn(missing_docs)]

/// `format!` without `alloc::fmt::format`'s panic message and its source path in a
/// `.wasm` (a `String` cannot fail to take text): −307 B gzipped in the npm `.wasm`.
/// For hosts built to a size budget too.
#[macro_export]
macro_rules! text {
    ($($arg:tt)*) => {
        $crate::formatted(format_args!($($arg)*))
    };
}

/// What [`text!`] calls.
#[doc(hidden)]
pub fn formatted(args: core::fmt::Arguments<'_>) -> String {
    let mut s = String::new();
    let _ = core::fmt::Write::write_fmt(&mut s, args);
    s
}

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
pub use config::{CacheConfig, CollapserConfig, Config, ConfigError, ConfigWarning, SharedConfig};
pub use engine::{
    CallId, Cause, Completion, Engine, Event, FallbackPermit, KeyId, Permit, PolicyId, Refusal,
    Start, Ticket,
};
pub use event::{EventKind, Outcome};
pub use histogram::{Histogram, Percentiles};
pub use slab::can_allocate;
pub use time::Nanos;
pub use window::{HealthSnapshot, Window};

/// The crate README, for readers of these docs: the host contract (three kinds of
/// host on one page), the config schema, shared state, the request cache and the
/// collapser.
#[doc = include_str!("../README.md")]
pub mod guide {}
