//! What the engine tells its host: the verdict of [`crate::Engine::start`], of
//! [`crate::Engine::complete`], and the [`Event`]s [`crate::Engine::poll`] reports.

use super::calls::{CallId, Permit, Ticket};
use super::keys::KeyId;
use crate::breaker::{ShortCircuit, Transition};
use crate::event::EventKind;
use crate::shared::Issue;

/// The verdict of [`crate::Engine::start`].
#[derive(Debug, PartialEq, Eq)]
#[must_use]
pub enum Start {
    /// Run the call now; hand the permit back with its outcome.
    Running(Permit),
    /// Wait for a bulkhead slot (pool isolation): a later [`Event::Dequeued`] carries
    /// the permit, or [`Event::Refused`] ends the wait.
    Queued(Ticket),
    /// Not run: fall back. The event is already recorded (but for
    /// [`Cause::UnknownKey`]: a stale or foreign key id, which counts nowhere).
    Refused(Refusal),
}

/// Why a call was not run: the event recorded for it and the cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// `SHORT_CIRCUITED` (the breaker), `SEMAPHORE_REJECTED` or
    /// `THREAD_POOL_REJECTED` (the bulkhead: "rejected" always means capacity).
    pub event: EventKind,
    /// The cause.
    pub cause: Cause,
}

/// The cause of a [`Refusal`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The breaker short-circuited the call.
    ShortCircuit(ShortCircuit),
    /// Every slot is in use and there is no queue.
    BulkheadFull,
    /// Every slot is in use and the queue is full.
    QueueFull,
    /// The call waited `max_wait_ms` in the queue.
    WaitExpired,
    /// The shared store could not grant a probe lease or a slot in time (lost races):
    /// refused rather than over-admitted. (A failing store leaves the key to its local
    /// breaker and a per-worker bulkhead instead.)
    Degraded,
    /// The key is not (or no longer) in the table: nothing is recorded, and the
    /// breaker may be closed (the event says `ShortCircuited`; get a new key id).
    UnknownKey,
}

impl Refusal {
    pub(crate) const fn short_circuit(reason: ShortCircuit) -> Self {
        Refusal {
            event: EventKind::ShortCircuited,
            cause: Cause::ShortCircuit(reason),
        }
    }

    /// Whether the breaker refused it (as opposed to the bulkhead).
    pub fn is_short_circuit(&self) -> bool {
        self.event == EventKind::ShortCircuited
    }
}

/// The verdict of [`crate::Engine::complete`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// Recorded; any transition it caused is reported by [`crate::Engine::poll`].
    OnTime,
    /// The call had already timed out (recorded as `TIMEOUT`): the result is counted
    /// as late and never moves the breaker. Discard it.
    Late,
    /// Not a call the engine knows (finished twice, forged, or a timed-out call whose
    /// slot was reused): ignored.
    Unknown,
}

/// Something that happened, reported by [`crate::Engine::poll`] in the order it
/// happened: a call's `TimedOut` or `Refused` comes right before the `Transition` it
/// caused (opossum's hosts emit `timeout`, `failure`, `open`, then the fallback).
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// A running call passed its deadline: `TIMEOUT` is recorded and its slot freed.
    /// Fall back; a later [`crate::Engine::complete`] of it returns
    /// [`Completion::Late`].
    TimedOut {
        /// Its key.
        key: KeyId,
        /// The call (the permit's id).
        call: CallId,
    },
    /// A queued call got a slot and runs now (same id as its ticket).
    Dequeued {
        /// Its key.
        key: KeyId,
        /// Permission to run it.
        permit: Permit,
    },
    /// A queued call will not run: fall back. The event is already recorded.
    Refused {
        /// Its key.
        key: KeyId,
        /// The call (the ticket's id).
        call: CallId,
        /// Why.
        refusal: Refusal,
    },
    /// A breaker changed phase (by any call, by time, or by another worker's write
    /// seen through the shared store).
    Transition {
        /// Its key.
        key: KeyId,
        /// The change.
        transition: Transition,
    },
    /// An idle key left the table; its id is stale from now on.
    KeyExpired {
        /// The key.
        key: KeyId,
    },
    /// A shared-store problem to log or count (the engine already degraded as
    /// documented).
    Store {
        /// The key it concerns.
        key: KeyId,
        /// What happened.
        issue: Issue,
    },
}
