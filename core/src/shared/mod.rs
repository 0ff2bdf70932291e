//! Process-wide shared state: how several workers (Envoy worker VMs, JS workers) keep
//! one breaker, one rolling window and one bulkhead per key through a host's CAS
//! key-value store.
//!
//! - [`codec`]: versioned, checksummed postcard envelope; decoding never panics.
//! - [`window`]: epoch-bucketed outcome counters with an associative, commutative merge.
//! - [`state`]: a key's breaker state and the transition logic, run on a state value.
//! - [`ledger`]: cross-worker bulkhead slots per owner with heartbeat leases.
//! - [`store`]: the store contract, the bounded CAS update loop, key names.
//! - [`handle`]: one worker's handle on one key (cached view, local delta, slots).
//!
//! Keys are named `fusewire/v1/state/<key>` and `fusewire/v1/slots/<key>`; a config
//! reload keeps every key whose name is unchanged, and nothing here ever resets state
//! on (re)configuration. Corrupt or foreign-version bytes are reported as
//! [`handle::Issue::Invalid`] and replaced by a fresh state on the next write.

pub mod codec;
pub mod handle;
pub mod ledger;
pub mod params;
pub mod state;
pub mod store;
pub mod window;

pub use codec::DecodeError;
pub use handle::{Admission, Issue, KeyHandle, Outcome, Probe, Report, SharedParams, Slot};
pub use ledger::SlotLedger;
pub use state::{
    BreakerParams, KeyState, Mode, OpenSchedule, Phase, Reject, Rules, Threshold, Transition,
};
pub use store::{MemoryStore, SharedStore, StoreError};
pub use window::{Counts, Event, SharedWindow};
#[cfg(test)]
mod tests;
