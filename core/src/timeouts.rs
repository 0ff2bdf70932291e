//! Deadline tracking for running calls.
//!
//! [`Timeouts`] is a call table: each running call gets a [`CallId`] and a
//! deadline, and carries a payload (e.g. its permits). The host asks
//! [`Timeouts::next_deadline`] when to wake up and [`Timeouts::poll_expired`]
//! which calls timed out; a result that arrives after that is reported late
//! ([`Finish::Late`]) so the host discards it. Slots are reused, so after warm-up
//! (concurrency reached its peak) nothing allocates.

use crate::time::Nanos;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Handle of one tracked call (slot + generation, so stale handles are detected).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CallId {
    slot: u32,
    generation: u32,
}

impl CallId {
    /// Raw form for FFI hosts.
    pub fn to_u64(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.slot)
    }

    /// From [`CallId::to_u64`].
    pub fn from_u64(raw: u64) -> Self {
        Self {
            slot: raw as u32,
            generation: (raw >> 32) as u32,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
enum SlotState<T> {
    Free,
    Running { deadline: Nanos, payload: T },
    Expired,
}

#[derive(Clone, Debug, PartialEq)]
struct Slot<T> {
    generation: u32,
    state: SlotState<T>,
}

/// How a call's result relates to its deadline.
#[derive(Debug, PartialEq, Eq)]
pub enum Finish<T> {
    /// In time: record the outcome; here is the payload.
    OnTime(T),
    /// The call already timed out (and was recorded as `TIMEOUT`): discard it.
    Late,
    /// Unknown or already finished handle: ignore it.
    Unknown,
}

/// The call table.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeouts<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    /// Expired slots waiting for their late result, oldest first; reclaimed when no
    /// free slot is left, so a late result that never comes cannot leak a slot.
    expired: VecDeque<u32>,
    running: usize,
    /// Cached earliest deadline; `None` = recompute.
    next: Option<Option<Nanos>>,
}

impl<T> Default for Timeouts<T> {
    fn default() -> Self {
        Self::with_capacity(0)
    }
}

impl<T> Timeouts<T> {
    /// A table with room for `capacity` concurrent calls before it grows.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            slots: Vec::with_capacity(capacity),
            free: Vec::with_capacity(capacity),
            expired: VecDeque::with_capacity(capacity),
            running: 0,
            next: Some(None),
        }
    }

    /// Reserves room for `additional` more concurrent calls.
    pub fn reserve(&mut self, additional: usize) {
        self.slots.reserve(additional);
        self.free.reserve(additional);
        self.expired.reserve(additional);
    }

    /// Calls running (not finished, not expired).
    pub fn running(&self) -> usize {
        self.running
    }

    /// Starts tracking a call that must finish by `deadline`.
    pub fn start(&mut self, deadline: Nanos, payload: T) -> CallId {
        let slot = match self.free.pop().or_else(|| self.reclaim_expired()) {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    state: SlotState::Free,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let s = &mut self.slots[slot as usize];
        s.state = SlotState::Running { deadline, payload };
        self.running += 1;
        if let Some(cached) = self.next {
            self.next = Some(Some(cached.map_or(deadline, |d| d.min(deadline))));
        }
        CallId {
            slot,
            generation: s.generation,
        }
    }

    /// Reuses the oldest expired slot (its late result, if it ever comes, will be
    /// reported `Unknown`).
    fn reclaim_expired(&mut self) -> Option<u32> {
        while let Some(i) = self.expired.pop_front() {
            if let Some(s) = self.slots.get_mut(i as usize) {
                if matches!(s.state, SlotState::Expired) {
                    s.state = SlotState::Free;
                    s.generation = s.generation.wrapping_add(1);
                    return Some(i);
                }
            }
        }
        None
    }

    fn release(&mut self, slot: u32) {
        if let Some(s) = self.slots.get_mut(slot as usize) {
            s.state = SlotState::Free;
            s.generation = s.generation.wrapping_add(1);
            self.free.push(slot);
        }
    }

    /// Stops tracking a call whose result arrived.
    pub fn finish(&mut self, id: CallId) -> Finish<T> {
        let Some(s) = self.slots.get_mut(id.slot as usize) else {
            return Finish::Unknown;
        };
        if s.generation != id.generation {
            return Finish::Unknown;
        }
        match core::mem::replace(&mut s.state, SlotState::Free) {
            SlotState::Free => Finish::Unknown,
            SlotState::Expired => {
                self.release(id.slot);
                Finish::Late
            }
            SlotState::Running { deadline, payload } => {
                self.running -= 1;
                if self.next == Some(Some(deadline)) {
                    self.next = None;
                }
                self.release(id.slot);
                Finish::OnTime(payload)
            }
        }
    }

    /// Forgets a timed-out call whose late result will never come.
    pub fn forget(&mut self, id: CallId) -> bool {
        match self.slots.get(id.slot as usize) {
            Some(s) if s.generation == id.generation && matches!(s.state, SlotState::Expired) => {
                self.release(id.slot);
                true
            }
            _ => false,
        }
    }

    /// Reports one call whose deadline is at or before `now` and marks it expired;
    /// record it as `TIMEOUT`. Call until `None`.
    pub fn poll_expired(&mut self, now: Nanos) -> Option<(CallId, T)> {
        if self.next_deadline().is_none_or(|d| d > now) {
            return None;
        }
        let i = self.slots.iter().position(
            |s| matches!(s.state, SlotState::Running { deadline, .. } if deadline <= now),
        )?;
        let s = &mut self.slots[i];
        let SlotState::Running { payload, .. } =
            core::mem::replace(&mut s.state, SlotState::Expired)
        else {
            return None;
        };
        self.running -= 1;
        self.next = None;
        self.expired.push_back(i as u32);
        Some((
            CallId {
                slot: i as u32,
                generation: s.generation,
            },
            payload,
        ))
    }

    /// The earliest deadline among running calls.
    pub fn next_deadline(&mut self) -> Option<Nanos> {
        if let Some(cached) = self.next {
            return cached;
        }
        let d = self
            .slots
            .iter()
            .filter_map(|s| match s.state {
                SlotState::Running { deadline, .. } => Some(deadline),
                _ => None,
            })
            .min();
        self.next = Some(d);
        d
    }
}
