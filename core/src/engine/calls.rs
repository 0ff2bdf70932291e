//! The call table: every call the engine knows (queued, running, timed out, or a
//! running fallback), addressed by a generation-checked [`CallId`], and the move-only
//! handles hosts hold ([`Permit`], [`Ticket`], [`FallbackPermit`]).
//!
//! Deadlines live in per-duration FIFOs (`Deadlines`): calls of one policy share a
//! timeout, and the engine clock never goes backwards, so deadlines enter each FIFO
//! in order and the earliest is always at a head — O(1) to arm, find and expire;
//! entries of calls that ended behind a hung one are swept, O(1) amortized.

use std::collections::VecDeque;

use crate::breaker::RawPass;
use crate::time::Nanos;

const SLOT_BITS: u32 = 22;
const SLOT_MASK: u64 = (1 << SLOT_BITS) - 1;
const GEN_MASK: u32 = (1 << 31) - 1;

/// A call's address: slot and generation. Its raw form is a number below 2^53 (JS
/// hosts keep it as a plain number); a stale or forged number is detected by the
/// generation check and never trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallId {
    slot: u32,
    generation: u32,
}

impl CallId {
    /// The plain number (below 2^53).
    pub fn to_raw(self) -> u64 {
        u64::from(self.generation) << SLOT_BITS | u64::from(self.slot)
    }

    /// The slot: dense and reused once a call ends, so a host can keep its per-call
    /// data in a vector indexed by it (checking the whole id on use).
    pub fn slot(self) -> usize {
        self.slot as usize
    }

    /// From [`CallId::to_raw`]; any number is accepted and checked on use (one at
    /// or above 2^53, which `to_raw` never gives, matches no call).
    pub fn from_raw(raw: u64) -> Self {
        if raw >> (SLOT_BITS + 31) != 0 {
            return CallId {
                slot: u32::MAX,
                generation: u32::MAX,
            };
        }
        CallId {
            slot: (raw & SLOT_MASK) as u32,
            generation: ((raw >> SLOT_BITS) as u32) & GEN_MASK,
        }
    }
}

/// Permission to run one call. Hand it back exactly once: [`crate::Engine::complete`]
/// (with the outcome) or [`crate::Engine::cancel`]. Dropped without either, its slot
/// stays taken and its deadline (if any) ends it as a timeout, an error: a host whose
/// calls can be dropped (an `async` task whose future goes away) keeps it in a guard
/// that cancels on drop. Move-only; [`Permit::into_raw`] / [`Permit::from_raw`] carry
/// it across an FFI boundary. Handles name a call of the engine that made them: one
/// given to another engine is not detected.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a permit must be completed or cancelled"]
pub struct Permit(pub(crate) CallId);

/// A place in a key's wait queue: a later [`crate::Event::Dequeued`] carries the
/// permit (same id), or [`crate::Event::Refused`] ends the wait. Give it up with
/// [`crate::Engine::cancel_ticket`]. Move-only.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a ticket must be waited on or cancelled"]
pub struct Ticket(pub(crate) CallId);

/// A fallback slot; end it with [`crate::Engine::finish_fallback`]. Move-only.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a fallback permit must be finished"]
pub struct FallbackPermit(pub(crate) CallId);

macro_rules! handle {
    ($t:ident) => {
        impl $t {
            /// The call's id.
            pub fn id(&self) -> CallId {
                self.0
            }

            /// The plain number, for FFI hosts.
            pub fn into_raw(self) -> u64 {
                self.0.to_raw()
            }

            /// Rebuilds the handle from [`Self::into_raw`]. The engine checks it on
            /// use: a stale or forged number is reported unknown, never trusted.
            pub fn from_raw(raw: u64) -> Self {
                $t(CallId::from_raw(raw))
            }
        }
    };
}
handle!(Permit);
handle!(Ticket);
handle!(FallbackPermit);

/// What a slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Call {
    Free,
    /// Waiting for a bulkhead slot, holding its breaker pass.
    Queued {
        key: u32,
        pass: RawPass,
        deadline: Nanos,
    },
    /// Holding a slot (executing).
    Running {
        key: u32,
        pass: RawPass,
        deadline: Nanos,
    },
    /// Timed out (recorded as TIMEOUT); waiting for its late result, which is
    /// credited to the key if it is still the same one (`key_generation`).
    Expired {
        key: u32,
        key_generation: u32,
    },
    /// A fallback holding a fallback slot.
    Fallback {
        key: u32,
    },
}

#[derive(Clone, Debug)]
struct Slot {
    generation: u32,
    call: Call,
}

/// Timed-out calls kept for their late result at most: past it, the oldest is
/// forgotten (its result, if it ever comes, is `Unknown`), so results that never
/// come cannot hold memory.
pub(crate) const MAX_EXPIRED: usize = 16_384;

/// The table.
#[derive(Debug, Default)]
pub(crate) struct Calls {
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Timed-out calls waiting for their late result, oldest first (entries whose
    /// result came are dropped lazily: see [`Calls::compact`]).
    expired: VecDeque<CallId>,
    /// Calls in the `Expired` state.
    expired_live: usize,
}

impl Calls {
    #[inline(always)]
    pub(crate) fn get(&self, id: CallId) -> Option<Call> {
        let s = self.slots.get(id.slot as usize)?;
        (s.generation == id.generation && s.call != Call::Free).then_some(s.call)
    }

    pub(crate) fn set(&mut self, id: CallId, call: Call) {
        if let Some(s) = self.slots.get_mut(id.slot as usize) {
            if s.generation == id.generation {
                s.call = call;
            }
        }
    }

    /// Stores a new call; `None` only when the table is at its size limit with no
    /// timed-out call left to forget.
    #[inline]
    pub(crate) fn insert(&mut self, call: Call) -> Option<CallId> {
        let slot = match self.free.pop() {
            Some(i) => i,
            None if (self.slots.len() as u64) <= SLOT_MASK => {
                self.slots.push(Slot {
                    generation: 0,
                    call: Call::Free,
                });
                (self.slots.len() - 1) as u32
            }
            None => self.reclaim()?,
        };
        let s = self.slots.get_mut(slot as usize)?;
        s.call = call;
        Some(CallId {
            slot,
            generation: s.generation,
        })
    }

    /// Forgets the oldest timed-out call; returns its slot (not on the free list).
    #[cold]
    fn reclaim(&mut self) -> Option<u32> {
        while let Some(id) = self.expired.pop_front() {
            if matches!(self.get(id), Some(Call::Expired { .. })) {
                self.bump(id.slot);
                self.expired_live = self.expired_live.saturating_sub(1);
                return Some(id.slot);
            }
        }
        None
    }

    /// Drops the ids of timed-out calls whose result came, once they outnumber the
    /// calls still waiting: amortised O(1) per call.
    fn compact(&mut self) {
        if self.expired.len() > 2 * self.expired_live + 64 {
            let slots = &self.slots;
            self.expired.retain(|id| {
                slots.get(id.slot as usize).is_some_and(|s| {
                    s.generation == id.generation && matches!(s.call, Call::Expired { .. })
                })
            });
        }
    }

    fn bump(&mut self, slot: u32) {
        if let Some(s) = self.slots.get_mut(slot as usize) {
            s.call = Call::Free;
            s.generation = s.generation.wrapping_add(1) & GEN_MASK;
        }
    }

    /// Frees a call's slot (its id becomes stale).
    pub(crate) fn remove(&mut self, id: CallId) {
        let Some(call) = self.get(id) else { return };
        self.bump(id.slot);
        crate::slab::push_free(&mut self.free, id.slot);
        if matches!(call, Call::Expired { .. }) {
            self.expired_live = self.expired_live.saturating_sub(1);
            self.compact();
        }
    }

    /// Marks a running call timed out; past [`MAX_EXPIRED`] waiting, the oldest is
    /// forgotten.
    pub(crate) fn expire(&mut self, id: CallId, key: u32, key_generation: u32) {
        if !matches!(self.get(id), Some(Call::Running { .. })) {
            return;
        }
        self.set(
            id,
            Call::Expired {
                key,
                key_generation,
            },
        );
        self.expired.push_back(id);
        self.expired_live += 1;
        if self.expired_live > MAX_EXPIRED {
            if let Some(slot) = self.reclaim() {
                crate::slab::push_free(&mut self.free, slot);
            }
        }
        self.compact();
    }

    /// Timed-out calls waiting for their late result, and ids held for them.
    #[cfg(test)]
    pub(crate) fn expired_len(&self) -> (usize, usize) {
        (self.expired_live, self.expired.len())
    }
}

/// Deadline FIFOs, one per distinct duration: entries `(deadline, call)` in
/// non-decreasing order. Entries whose call ended are skipped; the head is kept
/// valid by [`Deadlines::clean`] after every removal, so [`Deadlines::next`] is exact.
/// Ended entries behind a live head (a hung call) are swept once as many cleans as
/// half the entries have run: entries stay below 2 × the live ones + [`SWEEP_MIN`],
/// at O(1) amortized per clean.
#[derive(Debug, Default)]
pub(crate) struct Deadlines {
    fifos: Vec<(u64, VecDeque<(Nanos, CallId)>)>,
    /// Cleans since the last sweep.
    cleans: usize,
}

/// Entries below which no sweep runs.
const SWEEP_MIN: usize = 64;

impl Deadlines {
    /// Arms `deadline = now + duration` for `call`.
    #[inline]
    pub(crate) fn push(&mut self, duration: u64, deadline: Nanos, call: CallId) {
        let i = match self.fifos.iter().position(|(d, _)| *d == duration) {
            Some(i) => i,
            None => {
                self.fifos.push((duration, VecDeque::new()));
                self.fifos.len() - 1
            }
        };
        if let Some((_, q)) = self.fifos.get_mut(i) {
            q.push_back((deadline, call));
        }
    }

    /// Pops stale heads (and now and then sweeps stale entries behind a live head):
    /// an entry stands while `calls` holds its call, running (`queued`: waiting) with
    /// that deadline. One instantiation for every caller (the `.wasm` size).
    pub(crate) fn clean(&mut self, calls: &Calls, queued: bool) {
        self.clean_with(|c, d| {
            matches!(
                (calls.get(c), queued),
                (Some(Call::Running { deadline, .. }), false) | (Some(Call::Queued { deadline, .. }), true)
                    if deadline == d
            )
        });
    }

    /// [`Deadlines::clean`] with `live(call, deadline)` saying whether an entry stands.
    fn clean_with(&mut self, mut live: impl FnMut(CallId, Nanos) -> bool) {
        let mut len = 0;
        for (_, q) in &mut self.fifos {
            while let Some(&(d, c)) = q.front() {
                if live(c, d) {
                    break;
                }
                q.pop_front();
            }
            len += q.len();
        }
        self.cleans += 1;
        if len >= SWEEP_MIN && self.cleans >= len / 2 {
            self.cleans = 0;
            for (_, q) in &mut self.fifos {
                // In place, in order (what `retain` does, with the code already here).
                for _ in 0..q.len() {
                    if let Some((d, c)) = q.pop_front() {
                        if live(c, d) {
                            q.push_back((d, c));
                        }
                    }
                }
            }
        }
        // Empty FIFOs stay (no allocation per call); only a burst of distinct
        // durations (reconfigurations) is trimmed.
        if self.fifos.len() > 4 {
            self.fifos.retain(|(_, q)| !q.is_empty());
        }
    }

    /// The earliest deadline.
    pub(crate) fn next(&self) -> Option<Nanos> {
        self.fifos
            .iter()
            .filter_map(|(_, q)| q.front().map(|e| e.0))
            .min()
    }

    /// Takes one entry due at `now` (the caller checks it still stands).
    pub(crate) fn pop_due(&mut self, now: Nanos) -> Option<(Nanos, CallId)> {
        // The earliest due front (the first of equals), by index: a plain loop is
        // smaller in the .wasm than the iterator chain.
        let mut best: Option<(Nanos, usize)> = None;
        for (i, (_, q)) in self.fifos.iter().enumerate() {
            if let Some(&(t, _)) = q.front() {
                if t <= now && best.is_none_or(|(b, _)| t < b) {
                    best = Some((t, i));
                }
            }
        }
        self.fifos.get_mut(best?.1)?.1.pop_front()
    }

    /// Entries held (live or stale): bounded by the calls armed within one duration.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.fifos.iter().map(|(_, q)| q.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_generation_checked_and_below_2_pow_53() {
        let mut t = Calls::default();
        let a = t
            .insert(Call::Expired {
                key: 1,
                key_generation: 0,
            })
            .unwrap();
        assert!(a.to_raw() < 1 << 53);
        t.remove(a);
        assert_eq!(t.get(a), None, "stale after removal");
        let b = t
            .insert(Call::Expired {
                key: 2,
                key_generation: 0,
            })
            .unwrap();
        assert_eq!(b.slot, a.slot);
        assert_ne!(b, a);
        assert_eq!(t.get(CallId::from_raw(a.to_raw())), None);
        assert_eq!(
            t.get(CallId::from_raw(b.to_raw())),
            Some(Call::Expired {
                key: 2,
                key_generation: 0
            })
        );
        assert_eq!(t.get(CallId::from_raw(u64::MAX)), None, "forged");
    }

    fn running() -> Call {
        Call::Running {
            key: 0,
            pass: (0, 0, 0),
            deadline: 0,
        }
    }

    /// Found by review: a hung call at the head kept every later, finished call's
    /// entry (16 B × rate × timeout: 32 MB in 2 s at 1 M calls/s with a 1 h timeout).
    #[test]
    fn finished_entries_behind_a_hung_call_are_swept() {
        let mut d = Deadlines::default();
        let id = |n: u32| CallId {
            slot: n,
            generation: 0,
        };
        d.push(1_000, 1_000, id(0)); // never ends
        let mut peak = 0;
        for n in 1..100_000u32 {
            d.push(1_000, 1_000 + u64::from(n), id(n));
            // Call n ends at once; the hung call 0 and the newest stand.
            d.clean_with(|c, _| c.slot == 0);
            peak = peak.max(d.len());
        }
        assert!(peak <= 2 + 2 * SWEEP_MIN, "entries peaked at {peak}");
        assert_eq!(d.next(), Some(1_000), "the hung call's deadline stays");
        // Many live entries: swept only as often as amortizes (every entry stays).
        let mut d = Deadlines::default();
        for n in 0..10_000u32 {
            d.push(1_000, u64::from(n), id(n));
            d.clean_with(|_, _| true);
        }
        assert_eq!(d.len(), 10_000);
    }

    #[test]
    fn a_timed_out_call_keeps_its_slot_for_its_late_result() {
        let mut t = Calls::default();
        let a = t.insert(running()).unwrap();
        t.expire(a, 0, 0);
        let b = t.insert(running()).unwrap();
        assert_ne!(b.slot, a.slot, "a new call takes a new slot");
        assert!(matches!(t.get(a), Some(Call::Expired { .. })));
        t.remove(a);
        assert_eq!(t.expired_len().0, 0);
    }

    #[test]
    fn timed_out_calls_are_bounded_and_their_ids_do_not_pile_up() {
        let mut t = Calls::default();
        // Results that come back: no id is kept for long.
        for _ in 0..10_000 {
            let a = t.insert(running()).unwrap();
            t.expire(a, 0, 0);
            t.remove(a);
        }
        assert_eq!(t.expired_len().0, 0);
        assert!(
            t.expired_len().1 <= 64 + 1,
            "ids held: {:?}",
            t.expired_len()
        );
        // Results that never come: at most MAX_EXPIRED waited for, the oldest forgotten.
        let first = t.insert(running()).unwrap();
        t.expire(first, 0, 0);
        for _ in 0..MAX_EXPIRED + 10 {
            let a = t.insert(running()).unwrap();
            t.expire(a, 0, 0);
        }
        assert_eq!(t.expired_len().0, MAX_EXPIRED);
        assert_eq!(t.get(first), None, "the oldest was forgotten");
        assert!(
            t.slots.len() <= MAX_EXPIRED + 64,
            "slots: {}",
            t.slots.len()
        );
    }

    #[test]
    fn raw_ids_at_or_above_2_pow_53_match_nothing() {
        let mut t = Calls::default();
        let a = t.insert(running()).unwrap();
        assert_eq!(t.get(CallId::from_raw(a.to_raw() | 1 << 53)), None);
        assert_eq!(t.get(CallId::from_raw(a.to_raw() | 1 << 60)), None);
        assert!(t.get(CallId::from_raw(a.to_raw())).is_some());
    }

    #[test]
    fn deadlines_fifo_order_and_clean_heads() {
        let mut d = Deadlines::default();
        let id = |s| CallId {
            slot: s,
            generation: 0,
        };
        d.push(10, 15, id(1));
        d.push(10, 20, id(2));
        d.push(3, 12, id(3));
        assert_eq!(d.next(), Some(12));
        d.clean_with(|c, _| c != id(3));
        assert_eq!(d.next(), Some(15));
        assert_eq!(d.pop_due(14), None);
        assert_eq!(d.pop_due(30), Some((15, id(1))));
        assert_eq!(d.len(), 1);
    }

    /// Found by mutation testing: the ids held stay within twice the calls still
    /// waiting plus 64 when some wait on (a burst of timeouts, then most results come;
    /// an odd count so no equality test can stand in for the bound), and a compaction
    /// keeps the ids of the calls still waiting, so the oldest is still forgotten first.
    #[test]
    fn timed_out_ids_stay_bounded_while_calls_wait_and_the_oldest_is_forgotten_first() {
        let mut t = Calls::default();
        let waiting: Vec<CallId> = (0..100)
            .map(|_| {
                let a = t.insert(running()).unwrap();
                t.expire(a, 0, 0);
                a
            })
            .collect();
        let burst: Vec<CallId> = (0..1_001)
            .map(|_| {
                let a = t.insert(running()).unwrap();
                t.expire(a, 0, 0);
                a
            })
            .collect();
        for a in burst {
            t.remove(a);
        }
        let (live, held) = t.expired_len();
        assert_eq!(live, 100);
        assert!(held <= 2 * live + 64, "ids held: {held} for {live} waiting");
        // Up to the cap: the oldest waiting call is the one forgotten.
        for _ in 0..MAX_EXPIRED - 100 + 1 {
            let a = t.insert(running()).unwrap();
            t.expire(a, 0, 0);
        }
        assert_eq!(t.expired_len().0, MAX_EXPIRED);
        assert_eq!(t.get(waiting[0]), None, "the oldest was forgotten");
        assert!(matches!(t.get(waiting[1]), Some(Call::Expired { .. })));
    }

    /// Found by mutation testing: with many calls running (more entries than
    /// `SWEEP_MIN`) behind a hung one, ended entries are still swept.
    #[test]
    fn ended_entries_are_swept_with_many_calls_running() {
        let mut d = Deadlines::default();
        let id = |n: u32| CallId {
            slot: n,
            generation: 0,
        };
        // Calls 0..100 never end; every later call ends at once.
        for n in 0..100u32 {
            d.push(1_000, 1_000, id(n));
        }
        let mut peak = 0;
        for n in 100..20_000u32 {
            d.push(1_000, 1_000 + u64::from(n), id(n));
            d.clean_with(|c, _| c.slot < 100 || c.slot == n);
            peak = peak.max(d.len());
        }
        assert!(peak <= 2 * 101 + SWEEP_MIN, "entries peaked at {peak}");
    }

    /// Found by mutation testing: empty FIFOs of past durations (reconfigurations) are
    /// trimmed once there are more than a few.
    #[test]
    fn fifos_of_past_durations_are_trimmed() {
        let mut d = Deadlines::default();
        // Three new durations between cleans, so the count steps over any one value.
        for n in 0..300u32 {
            let duration = 1_000 + u64::from(n);
            d.push(
                duration,
                duration,
                CallId {
                    slot: n,
                    generation: 0,
                },
            );
            if n % 3 == 2 {
                d.clean_with(|_, _| false);
                assert!(d.fifos.len() <= 4, "{} FIFOs", d.fifos.len());
            }
        }
        assert_eq!(d.next(), None);
    }
}
