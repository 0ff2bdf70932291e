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
//!
//! # Design
//!
//! - **One read per admission**: [`KeyHandle::admit`] reads the state key and decodes it
//!   only when the CAS token changed, so a trip written by any worker is seen by every
//!   worker on its next call.
//! - **Deltas, not events**: outcomes go into the worker's [`state::Delta`] (a window of
//!   the same shape plus a consecutive-error [`state::Streak`]); [`KeyHandle::flush`]
//!   merges it under CAS (window merge: newer epoch wins, equal epochs add — associative
//!   and commutative) and evaluates the trip rules on the merged window. Healthy keys
//!   flush on the host's tick only; errors, slow calls, and every outcome while the key
//!   is "hot" (errors in the window, a streak, or not closed) flush at once, so trip
//!   decisions see all workers' events.
//! - **Probes are leases**: half-open hands out exactly `permitted_probes` leases per
//!   generation under CAS, each with a deadline; an expired lease counts as a failed
//!   probe; results carrying an older generation are ignored.
//! - **Bulkhead ledger**: each owner writes its *true* in-flight count with a heartbeat
//!   ([`ledger::SlotLedger`]); entries older than the lease TTL (crashed VMs) no longer
//!   count, and a live owner's next write restores its entry.
//! - **Degraded behaviour** after `cas_attempts` lost races or a host error (never a
//!   panic, never a leaked slot): no probe lease → reject; no slot → reject; delta not
//!   merged → kept and retried; release not written → the entry overstates until the
//!   next tick writes the true count; probe result not written → settled by the lease
//!   deadline; read failure → the last view is used.
//! - **Time** is the host's wall clock in ms: elapsed times saturate, window epochs
//!   ahead of the reader still count, ledger heartbeats are live within ± TTL.
//!
//! The breaker rules here are the core config's ([`BreakerParams::from_config`]) run
//! on a counters-only window: the core's [`crate::Window`] carries latency histograms
//! per bucket, which would make every CAS write kilobytes.

pub mod codec;
pub mod handle;
pub mod ledger;
pub mod state;
pub mod store;
pub mod window;

pub use codec::DecodeError;
pub use handle::{Admission, Issue, KeyHandle, Outcome, Probe, Report, SharedParams, Slot};
pub use ledger::SlotLedger;
pub use state::{BreakerParams, KeyState};
pub use store::{MemoryStore, SharedStore, StoreError};
pub use window::{Counts, Event, SharedWindow};
#[cfg(test)]
mod tests;
