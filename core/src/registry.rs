//! The registry: command key → breaker + metrics, pool key → bulkhead, and the
//! table of running calls with their deadlines — Hystrix's whole call flow
//! (circuit check → capacity check → run with timeout → record) as a sans-IO
//! state machine.
//!
//! ```text
//! start(cmd, now, rand) ─┬─ Rejected(event)         → fallback
//!                        ├─ Queued(ticket)          → wait for poll(): Dequeued / QueueExpired
//!                        └─ Running(call)           → complete(call, outcome) or poll(): TimedOut
//! ```

use crate::breaker::{Outcome, Permit, Transition};
use crate::bulkhead::{Acquire, Bulkhead, BulkheadPermit, FallbackPermit, WaitTicket};
use crate::circuit::CircuitBreaker;
use crate::config::{Config, ConfigError};
use crate::event::EventKind;
use crate::time::{ms_to_ns, Nanos};
use crate::timeouts::{CallId, Finish, Timeouts};
use std::collections::{HashMap, VecDeque};

/// Index of a registered command key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CommandId(pub u32);

/// Index of a pool key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolId(pub u32);

#[derive(Debug)]
struct Running {
    command: u32,
    permit: Permit,
    slot: BulkheadPermit,
}

#[derive(Debug)]
struct Waiting {
    pool: u32,
    ticket: WaitTicket,
    command: u32,
    permit: Permit,
}

/// Result of [`Registry::start`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Run it now; report the result with [`Registry::complete`].
    Running(CallId),
    /// Wait; [`Registry::poll`] reports [`Event::Dequeued`] or [`Event::QueueExpired`].
    Queued(PoolId, WaitTicket),
    /// Not run: the event that was recorded (`SHORT_CIRCUITED`,
    /// `SEMAPHORE_REJECTED`, `THREAD_POOL_REJECTED`). Fall back.
    Rejected(EventKind),
}

/// Result of [`Registry::complete`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// Recorded; the breaker transition it caused, if any.
    Recorded(Option<Transition>),
    /// The call had already timed out: the result is discarded.
    Late,
    /// Not a running call (finished twice, never started, or timed out so long ago
    /// that its slot was reused): discard the result.
    Unknown,
}

/// Something time made happen, reported by [`Registry::poll`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A call passed its deadline and was recorded as `TIMEOUT`; fall back, and
    /// discard its result when it arrives.
    TimedOut(CommandId, CallId),
    /// A queued call got a slot and is now running.
    Dequeued(CommandId, WaitTicket, CallId),
    /// A queued call waited longer than `max_wait_ms`; recorded as
    /// `THREAD_POOL_REJECTED`. Fall back.
    QueueExpired(CommandId, WaitTicket),
    /// A breaker changed phase because time passed.
    Transition(CommandId, Transition),
}

/// Command and pool registry with the running-call table.
#[derive(Debug, Default)]
pub struct Registry {
    commands: Vec<CircuitBreaker>,
    command_pool: Vec<u32>,
    command_keys: HashMap<String, u32>,
    pools: Vec<Bulkhead>,
    pool_keys: HashMap<String, u32>,
    calls: Timeouts<Running>,
    waiting: Vec<Waiting>,
    pending: VecDeque<Event>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers (or reconfigures) `key` in `group`; the pool key defaults to the
    /// group key. The pool takes the bulkhead settings of the latest registration.
    /// A known key keeps its counters and state.
    pub fn register(
        &mut self,
        key: &str,
        group: &str,
        pool: Option<&str>,
        config: Config,
        now: Nanos,
    ) -> Result<CommandId, ConfigError> {
        config.validate()?;
        let pool_key = pool.unwrap_or(group);
        let pool_id = match self.pool_keys.get(pool_key) {
            Some(&p) => {
                self.pools[p as usize].reconfigure(config.bulkhead.clone());
                p
            }
            None => {
                let p = self.pools.len() as u32;
                self.pools.push(Bulkhead::new(config.bulkhead.clone()));
                self.pool_keys.insert(pool_key.to_owned(), p);
                p
            }
        };
        let reserve = config.bulkhead.max_concurrent as usize;
        if let Some(&c) = self.command_keys.get(key) {
            self.commands[c as usize].reconfigure(config);
            self.command_pool[c as usize] = pool_id;
            return Ok(CommandId(c));
        }
        let c = self.commands.len() as u32;
        self.commands.push(CircuitBreaker::new(config, now));
        self.command_pool.push(pool_id);
        self.command_keys.insert(key.to_owned(), c);
        self.calls.reserve(reserve);
        Ok(CommandId(c))
    }

    /// The id of a registered command key.
    pub fn command_id(&self, key: &str) -> Option<CommandId> {
        self.command_keys.get(key).map(|&c| CommandId(c))
    }

    /// The id of a pool key.
    pub fn pool_id(&self, key: &str) -> Option<PoolId> {
        self.pool_keys.get(key).map(|&p| PoolId(p))
    }

    /// A command's breaker and metrics.
    pub fn command(&self, id: CommandId) -> Option<&CircuitBreaker> {
        self.commands.get(id.0 as usize)
    }

    /// Mutable access to a command's breaker and metrics.
    pub fn command_mut(&mut self, id: CommandId) -> Option<&mut CircuitBreaker> {
        self.commands.get_mut(id.0 as usize)
    }

    /// The pool a command runs in.
    pub fn pool_of(&self, id: CommandId) -> Option<PoolId> {
        self.command_pool.get(id.0 as usize).map(|&p| PoolId(p))
    }

    /// A pool's bulkhead.
    pub fn pool(&self, id: PoolId) -> Option<&Bulkhead> {
        self.pools.get(id.0 as usize)
    }

    /// Calls running.
    pub fn running(&self) -> usize {
        self.calls.running()
    }

    fn run(&mut self, command: u32, permit: Permit, slot: BulkheadPermit, now: Nanos) -> CallId {
        let exec = &self.commands[command as usize].config().execution;
        let deadline = if exec.timeout_enabled {
            now.saturating_add(ms_to_ns(exec.timeout_ms))
        } else {
            Nanos::MAX
        };
        self.calls.start(
            deadline,
            Running {
                command,
                permit,
                slot,
            },
        )
    }

    /// Circuit check, then capacity check, then start the call's timer.
    pub fn start(&mut self, id: CommandId, now: Nanos, rand: u64) -> Start {
        let c = id.0 as usize;
        let Some(cb) = self.commands.get_mut(c) else {
            return Start::Rejected(EventKind::ShortCircuited);
        };
        let permit = match cb.try_acquire(now, rand) {
            Ok(p) => p,
            Err(_) => return Start::Rejected(EventKind::ShortCircuited),
        };
        let pool = self.command_pool[c];
        match self.pools[pool as usize].try_acquire(now) {
            Acquire::Granted(slot) => Start::Running(self.run(id.0, permit, slot, now)),
            Acquire::Queued(ticket) => {
                self.waiting.push(Waiting {
                    pool,
                    ticket,
                    command: id.0,
                    permit,
                });
                Start::Queued(PoolId(pool), ticket)
            }
            Acquire::Rejected(event) => {
                let outcome = if event == EventKind::ThreadPoolRejected {
                    Outcome::ThreadPoolRejected
                } else {
                    Outcome::SemaphoreRejected
                };
                if let Some(t) = self.commands[c].record(permit, outcome, now, rand) {
                    self.pending.push_back(Event::Transition(id, t));
                }
                Start::Rejected(event)
            }
        }
    }

    fn take_waiting(&mut self, pool: u32, ticket: WaitTicket) -> Option<Waiting> {
        let i = self
            .waiting
            .iter()
            .position(|w| w.pool == pool && w.ticket == ticket)?;
        Some(self.waiting.swap_remove(i))
    }

    fn release_slot(&mut self, pool: u32, slot: BulkheadPermit, now: Nanos) {
        let mut grant = self.pools[pool as usize].release(slot, now);
        while let Some(g) = grant.take() {
            match self.take_waiting(pool, g.ticket) {
                Some(w) => {
                    let call = self.run(w.command, w.permit, g.permit, now);
                    self.pending
                        .push_back(Event::Dequeued(CommandId(w.command), g.ticket, call));
                }
                None => grant = self.pools[pool as usize].release(g.permit, now),
            }
        }
    }

    /// Reports a running call's outcome at `now`.
    pub fn complete(
        &mut self,
        call: CallId,
        outcome: Outcome,
        now: Nanos,
        rand: u64,
    ) -> Completion {
        match self.calls.finish(call) {
            Finish::OnTime(r) => {
                let pool = self.command_pool[r.command as usize];
                let t = self.commands[r.command as usize].record(r.permit, outcome, now, rand);
                self.release_slot(pool, r.slot, now);
                Completion::Recorded(t)
            }
            Finish::Late => Completion::Late,
            Finish::Unknown => Completion::Unknown,
        }
    }

    /// Gives up waiting in a queue (the caller went away). Returns whether it was queued.
    pub fn cancel(&mut self, pool: PoolId, ticket: WaitTicket, now: Nanos, rand: u64) -> bool {
        let Some(w) = self.take_waiting(pool.0, ticket) else {
            return false;
        };
        self.pools[pool.0 as usize].cancel(ticket);
        // The breaker permit goes back unused: count it as a rejection of capacity.
        let _ = self.commands[w.command as usize].record(
            w.permit,
            Outcome::ThreadPoolRejected,
            now,
            rand,
        );
        true
    }

    /// Records a non-call event for a command (fallback outcomes, cache hits,
    /// collapsed calls).
    pub fn record_event(&mut self, id: CommandId, kind: EventKind, now: Nanos, rand: u64) {
        if let Some(cb) = self.commands.get_mut(id.0 as usize) {
            if let Some(t) = cb.record_event(kind, now, rand) {
                self.pending.push_back(Event::Transition(id, t));
            }
        }
    }

    /// Asks for a fallback slot in the command's pool; on `None`,
    /// `FALLBACK_REJECTION` has been recorded.
    pub fn try_fallback(&mut self, id: CommandId, now: Nanos) -> Option<FallbackPermit> {
        let pool = *self.command_pool.get(id.0 as usize)?;
        let p = self.pools[pool as usize].try_acquire_fallback();
        if p.is_none() {
            self.commands[id.0 as usize].record_event(EventKind::FallbackRejection, now, 0);
        }
        p
    }

    /// Ends a fallback, recording `FALLBACK_SUCCESS` or `FALLBACK_FAILURE`.
    pub fn finish_fallback(&mut self, id: CommandId, permit: FallbackPermit, ok: bool, now: Nanos) {
        if let Some(&pool) = self.command_pool.get(id.0 as usize) {
            self.pools[pool as usize].release_fallback(permit);
            let kind = if ok {
                EventKind::FallbackSuccess
            } else {
                EventKind::FallbackFailure
            };
            self.commands[id.0 as usize].record_event(kind, now, 0);
        }
    }

    /// Advances time: timeouts, queue expiry and breaker transitions. Call until
    /// it returns `None`, then sleep until [`Registry::next_deadline`].
    pub fn poll(&mut self, now: Nanos, rand: u64) -> Option<Event> {
        if let Some(e) = self.pending.pop_front() {
            return Some(e);
        }
        if let Some((call, r)) = self.calls.poll_expired(now) {
            let pool = self.command_pool[r.command as usize];
            if let Some(t) =
                self.commands[r.command as usize].record(r.permit, Outcome::Timeout, now, rand)
            {
                self.pending
                    .push_back(Event::Transition(CommandId(r.command), t));
            }
            self.release_slot(pool, r.slot, now);
            return Some(Event::TimedOut(CommandId(r.command), call));
        }
        for pool in 0..self.pools.len() {
            if let Some(ticket) = self.pools[pool].poll_expired(now) {
                if let Some(w) = self.take_waiting(pool as u32, ticket) {
                    let cmd = w.command;
                    if let Some(t) = self.commands[cmd as usize].record(
                        w.permit,
                        Outcome::ThreadPoolRejected,
                        now,
                        rand,
                    ) {
                        self.pending.push_back(Event::Transition(CommandId(cmd), t));
                    }
                    return Some(Event::QueueExpired(CommandId(cmd), ticket));
                }
            }
            if let Some(g) = self.pools[pool].poll_grant() {
                match self.take_waiting(pool as u32, g.ticket) {
                    Some(w) => {
                        let call = self.run(w.command, w.permit, g.permit, now);
                        return Some(Event::Dequeued(CommandId(w.command), g.ticket, call));
                    }
                    None => self.release_slot(pool as u32, g.permit, now),
                }
            }
        }
        for (i, cb) in self.commands.iter_mut().enumerate() {
            if cb.next_deadline().is_some_and(|d| d <= now) {
                if let Some(t) = cb.poll(now, rand) {
                    return Some(Event::Transition(CommandId(i as u32), t));
                }
            }
        }
        None
    }

    /// The earliest time [`Registry::poll`] has work.
    pub fn next_deadline(&mut self) -> Option<Nanos> {
        let mut next = self.calls.next_deadline().filter(|&d| d != Nanos::MAX);
        let mut fold = |d: Option<Nanos>| {
            if let Some(d) = d {
                next = Some(next.map_or(d, |n: Nanos| n.min(d)));
            }
        };
        for p in &self.pools {
            fold(p.next_deadline());
        }
        for c in &self.commands {
            fold(c.next_deadline());
        }
        if !self.pending.is_empty() {
            fold(Some(0));
        }
        next
    }
}
