//! Process-wide shared state: how several workers (Envoy worker VMs, JS workers) keep
//! one breaker, one rolling window and one bulkhead per key through a host's CAS
//! key-value store.
//!
//! - [`codec`]: versioned, checksummed postcard envelope; decoding never panics.
//! - [`window`]: epoch-bucketed outcome counters (counters only, no latency ring) with
//!   an exact, associative, commutative merge; implements [`crate::window::Health`].
//! - [`state`]: a key's state, [`KeyState`] = the core's [`crate::BreakerState`] on a
//!   [`SharedWindow`], and a worker's [`state::Delta`].
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
//! - **One state machine**: the breaker logic is the core's [`crate::BreakerState`]
//!   (admission, probe leases, trip rules, open schedule with jitter, slow start,
//!   adaptive throttle, modes), run on a decoded [`KeyState`] under CAS. It reads its
//!   window through [`crate::window::Health`], so it runs on the compact
//!   [`SharedWindow`] here exactly as on the core's [`crate::Window`]; the semantics
//!   are those documented in the core README.
//! - **One read per admission**: [`KeyHandle::admit`] reads the state key and decodes it
//!   only when the CAS token changed, so a trip written by any worker is seen by every
//!   worker on its next call. Admission runs on a copy of the cached breaker state;
//!   only a decision that changes it (a probe lease, a transition) is written.
//! - **Deltas, not events**: outcomes go into the worker's [`state::Delta`] (a window of
//!   the same shape plus a consecutive-failure [`state::Streak`]); [`KeyHandle::flush`]
//!   merges it under CAS (window merge: newer epoch wins, equal epochs add — associative
//!   and commutative; streaks compose associatively) and runs the core's trip check on
//!   the merged window. Healthy keys flush on the host's tick only; errors, slow calls,
//!   and every outcome while the key is "hot" (errors in the window, a failure run, or
//!   not closed) flush at once, so trip decisions see all workers' events.
//! - **Probes are the core's leases**: half-open hands out exactly `permitted_probes`
//!   leases per generation process-wide (each write is a CAS), each with a deadline; a
//!   permit's generation and probe slot identify the lease; an expired lease reopens;
//!   results carrying an older generation are ignored.
//! - **Bulkhead ledger**: each owner writes its *true* in-flight count with a heartbeat
//!   ([`ledger::SlotLedger`]); entries older than the lease TTL (crashed VMs) no longer
//!   count, and a live owner's next write restores its entry.
//! - **Degraded behaviour** after `cas_attempts` lost races or a host error (never a
//!   panic, never a leaked slot): no probe lease → reject; no slot → reject; delta not
//!   merged → kept and retried; release not written → the entry overstates until the
//!   next tick writes the true count; probe result not written → settled by the lease
//!   deadline; read failure → the last view is used.
//! - **Time** is the core's: `u64` nanoseconds from the host (a wall clock here, made
//!   monotonic per worker by the host): elapsed times saturate, window epochs ahead of
//!   the reader still count, ledger heartbeats are live within ± TTL.
//!
//! Encoded size (schema v2, default config, wall-clock ns): a closed key with ten busy
//! 1 s buckets ≈ 146 bytes, an open one ≈ 126, a half-open one with a probe out ≈ 135.

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
