//! Bulkhead: a pool's concurrency slots, an optional bounded wait queue with a
//! max wait, and a separate fallback concurrency limit.
//!
//! Permits are move-only tokens released by value, so a permit cannot be
//! released twice. Counts are plain data ([`BulkheadState`]) for shared storage.

use crate::config::BulkheadConfig;
use crate::event::EventKind;
use crate::time::{ms_to_ns, Nanos};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// A pool's counts. Plain data: serde, `Clone`, `PartialEq`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkheadState {
    /// Slots in use.
    pub in_use: u32,
    /// Calls waiting in the queue.
    pub queued: u32,
    /// Fallbacks running.
    pub fallback_in_use: u32,
}

/// One execution slot. Release it with [`Bulkhead::release`] (consumes it).
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a bulkhead permit must be released"]
pub struct BulkheadPermit {
    _private: (),
}

/// One fallback slot. Release it with [`Bulkhead::release_fallback`].
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a fallback permit must be released"]
pub struct FallbackPermit {
    _private: (),
}

/// A place in the wait queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WaitTicket(pub u64);

/// Result of asking for a slot.
#[derive(Debug, PartialEq, Eq)]
pub enum Acquire {
    /// Run now.
    Granted(BulkheadPermit),
    /// Wait; a later [`Bulkhead::release`] grants it, or [`Bulkhead::poll_expired`]
    /// reports it expired after `max_wait_ms`.
    Queued(WaitTicket),
    /// Full: the event to record (`SEMAPHORE_REJECTED` without a queue,
    /// `THREAD_POOL_REJECTED` with one).
    Rejected(EventKind),
}

/// A queued call that got a slot.
#[derive(Debug, PartialEq, Eq)]
pub struct Grant {
    /// Which waiter.
    pub ticket: WaitTicket,
    /// Its slot.
    pub permit: BulkheadPermit,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Waiter {
    ticket: WaitTicket,
    enqueued_at: Nanos,
}

/// A pool's bulkhead.
#[derive(Clone, Debug, PartialEq)]
pub struct Bulkhead {
    config: BulkheadConfig,
    state: BulkheadState,
    waiters: VecDeque<Waiter>,
    expired: VecDeque<WaitTicket>,
    next_ticket: u64,
    clock: Nanos,
}

impl Bulkhead {
    /// An idle bulkhead (the queue's memory is reserved up front).
    pub fn new(config: BulkheadConfig) -> Self {
        let cap = config.max_queue.min(config.queue_rejection_threshold) as usize;
        Self {
            waiters: VecDeque::with_capacity(cap),
            expired: VecDeque::with_capacity(cap),
            config,
            state: BulkheadState::default(),
            next_ticket: 0,
            clock: 0,
        }
    }

    /// The counts.
    pub fn state(&self) -> BulkheadState {
        self.state
    }

    /// The config.
    pub fn config(&self) -> &BulkheadConfig {
        &self.config
    }

    /// Applies a new config; running calls and waiters are kept.
    pub fn reconfigure(&mut self, config: BulkheadConfig) {
        self.config = config;
    }

    fn queue_cap(&self) -> u32 {
        self.config
            .max_queue
            .min(self.config.queue_rejection_threshold)
    }

    fn deadline(&self, w: &Waiter) -> Nanos {
        w.enqueued_at
            .saturating_add(ms_to_ns(self.config.max_wait_ms))
    }

    /// Asks for a slot at `now`.
    #[inline]
    pub fn try_acquire(&mut self, now: Nanos) -> Acquire {
        self.clock = self.clock.max(now);
        if self.state.in_use < self.config.max_concurrent && self.waiters.is_empty() {
            self.state.in_use += 1;
            return Acquire::Granted(BulkheadPermit { _private: () });
        }
        if self.config.max_queue == 0 {
            return Acquire::Rejected(EventKind::SemaphoreRejected);
        }
        if self.state.queued >= self.queue_cap() {
            return Acquire::Rejected(EventKind::ThreadPoolRejected);
        }
        let ticket = WaitTicket(self.next_ticket);
        self.next_ticket += 1;
        self.waiters.push_back(Waiter {
            ticket,
            enqueued_at: self.clock,
        });
        self.state.queued += 1;
        Acquire::Queued(ticket)
    }

    /// Releases a slot at `now`. If a waiter is due it gets the slot at once.
    #[inline]
    pub fn release(&mut self, permit: BulkheadPermit, now: Nanos) -> Option<Grant> {
        let BulkheadPermit { _private: () } = permit;
        self.clock = self.clock.max(now);
        self.state.in_use = self.state.in_use.saturating_sub(1);
        self.expire(self.clock);
        self.grant_waiters()
    }

    fn grant_waiters(&mut self) -> Option<Grant> {
        if self.state.in_use >= self.config.max_concurrent {
            return None;
        }
        let w = self.waiters.pop_front()?;
        self.state.queued -= 1;
        self.state.in_use += 1;
        Some(Grant {
            ticket: w.ticket,
            permit: BulkheadPermit { _private: () },
        })
    }

    fn expire(&mut self, now: Nanos) {
        while let Some(w) = self.waiters.front() {
            if self.deadline(w) > now {
                break;
            }
            let t = w.ticket;
            self.waiters.pop_front();
            self.state.queued -= 1;
            self.expired.push_back(t);
        }
    }

    /// Reports one waiter whose max wait passed (record `THREAD_POOL_REJECTED`).
    pub fn poll_expired(&mut self, now: Nanos) -> Option<WaitTicket> {
        self.clock = self.clock.max(now);
        self.expire(self.clock);
        self.expired.pop_front()
    }

    /// Grants a slot to the next waiter if one is free (after a config change
    /// raised `max_concurrent`).
    pub fn poll_grant(&mut self) -> Option<Grant> {
        self.grant_waiters()
    }

    /// Removes a waiter the host gave up on. Returns whether it was queued.
    pub fn cancel(&mut self, ticket: WaitTicket) -> bool {
        if let Some(i) = self.waiters.iter().position(|w| w.ticket == ticket) {
            self.waiters.remove(i);
            self.state.queued -= 1;
            true
        } else {
            false
        }
    }

    /// When [`Bulkhead::poll_expired`] next has work.
    pub fn next_deadline(&self) -> Option<Nanos> {
        if !self.expired.is_empty() {
            return Some(self.clock);
        }
        self.waiters.front().map(|w| self.deadline(w))
    }

    /// Asks for a fallback slot; `None` means record `FALLBACK_REJECTION`.
    pub fn try_acquire_fallback(&mut self) -> Option<FallbackPermit> {
        if self.state.fallback_in_use < self.config.fallback_max_concurrent {
            self.state.fallback_in_use += 1;
            Some(FallbackPermit { _private: () })
        } else {
            None
        }
    }

    /// Releases a fallback slot.
    pub fn release_fallback(&mut self, permit: FallbackPermit) {
        let FallbackPermit { _private: () } = permit;
        self.state.fallback_in_use = self.state.fallback_in_use.saturating_sub(1);
    }
}
