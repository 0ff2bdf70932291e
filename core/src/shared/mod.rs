//! Process-wide shared state, sans-IO: how the workers of one process (Envoy worker
//! VMs, JS `worker_threads`) — or the processes of a fleet (Redis) — keep one breaker,
//! one rolling window and one bulkhead per key through the host's CAS store.
//!
//! The engine never calls a store: it says what to read and what to write
//! ([`io::Io`]: a key, bytes and the expected CAS token) and is told what happened
//! ([`io::Answer`]), so synchronous stores (Envoy shared data, a
//! `SharedArrayBuffer`) and asynchronous ones (Redis) drive the same code.
//!
//! - [`codec`]: versioned, checksummed envelope; decoding never panics.
//! - [`state`]: a key's stored state ([`KeyState`]: the core breaker on the core's
//!   ring with a counters-only bucket, plus the slot ledger) and a worker's [`Delta`].
//! - [`ledger`]: bulkhead slots per worker with heartbeat leases.
//! - [`receipts`]: each owner's last write, so a write whose reply was lost is
//!   recognised on an asynchronous store.
//! - [`io`]: the store protocol.
//! - `replica`: one worker's view of one key and the CAS protocol (internal).
//! - [`memory`]: an in-memory store with Envoy, Kong and Redis-script rules (tests).
//!
//! See the crate README ("Host contract") for what each kind of host does.

pub mod codec;
pub mod io;
pub mod ledger;
pub mod memory;
pub mod receipts;
pub(crate) mod replica;
pub mod state;

pub use codec::DecodeError;
pub use io::{Answer, Expect, Io, IoId, Issue, Op, OwnedAnswer, LOST};
pub use ledger::SlotLedger;
pub use receipts::Receipts;
pub use replica::{slot_index, LAYOUT, OVERFLOW, PROBE_LIMIT};
pub use state::{Counts, Delta, KeyState, Streak, WireWindow, SPARSE_CALLS};
