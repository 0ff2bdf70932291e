//! [`Collapser`]: Hystrix's request collapser as a sans-IO batch accumulator — calls
//! for one collapser key within a window become one batch, run as **one** protected
//! execution, and each result maps back to its caller. The host keeps the items'
//! arguments and results (keyed by [`ItemId`]); the core keeps the batches.
//!
//! ```text
//! add(scope, key) ─┬─ Queued(item) → wait for the flush at next_deadline()
//!                  ├─ Full(item)   → the batch is full: poll() now
//!                  └─ Refused(why) → run this call on its own
//! poll(now) → Some(batch) → items(batch) (in order) → run ONE call for the batch →
//!   complete_item(batch, index, ok) → the item (caller) that result belongs to
//!   fail_batch(batch)                → every item still without a result
//! cancel(item)   the caller went away (before the flush: it leaves the batch)
//! ```
//!
//! - A batch is keyed by the collapser key bytes (stored with a seeded hash, so keys
//!   never share a batch by collision) within a scope: [`ScopeId::GLOBAL`] or a
//!   request scope ([`Collapser::open_scope`]; closing it drops its batches that
//!   were not flushed yet and returns their items).
//! - **Window**: a batch is due `window_ms` after its first item (Hystrix's timer
//!   delay, default 10 ms); [`Collapser::next_deadline`] says when. A batch reaching
//!   `max_batch_size` items is due at once ([`Add::Full`]). Either way,
//!   [`Collapser::poll`] hands it out once; later adds for that key start a new batch.
//! - **Bounds**: `max_items` items without a result at most (waiting or in flushed
//!   batches); past it [`Collapser::add`] refuses. An open batch's listing keeps at
//!   most twice its live items, and 16 (cancelled items are compacted away).
//! - **Results**: the flushed listing is fixed; [`Collapser::complete_item`] maps
//!   result `index` to its item (`None` if that caller cancelled or already has a
//!   result); [`Collapser::fail_batch`] fails every item still without a result (a
//!   refused or failed batch, or results missing from a partial answer) and ends the
//!   batch. Every item gets exactly one of: a `complete_item` / `fail_batch` /
//!   `close_scope` mention, or a successful `cancel`. A handed-out batch holds its
//!   items until then (the batch's engine call, with its timeout, always ends it;
//!   a batch the host loses only costs `max_items` room).
//! - Ids are generation-checked with raw forms below 2^53; stale or forged ids are
//!   ignored.
//!
//! **Host loop** (with the [`crate::Engine`]): for each batch from `poll`, record
//! `COLLAPSED` for every item with [`crate::Engine::record`], then
//! [`crate::Engine::start`] once for the batch. `Running(permit)`: run the batch call,
//! `complete` the permit with the batch's outcome, map each result with
//! `complete_item`, then `fail_batch` for the rest. `Queued(ticket)`: keep the batch id
//! with the ticket and do the same on `Dequeued`. `Refused` (breaker, bulkhead), a
//! timeout or a failed batch call: `fail_batch`, and fail or fall back every caller it
//! lists.

use std::collections::VecDeque;

use crate::config::{CollapserConfig, ConfigError};
use crate::keyindex::{hash, KeyIndex};
use crate::slab::{
    open_scope, public_id, push_newest, unlink, Id, Linked, List, Slab, EMPTY, MAX_SLOTS, NIL,
};
use crate::time::{ms_to_ns, Monotonic, Nanos};

public_id!(
    /// One caller's place in a batch; the host keeps the caller's arguments and
    /// reply under it.
    ItemId
);
public_id!(
    /// A batch handed out by [`Collapser::poll`].
    BatchId
);
public_id!(
    /// A request scope, or [`ScopeId::GLOBAL`]. Scope ids belong to the collapser
    /// that opened them.
    ScopeId
);

impl ScopeId {
    /// The global scope (always open).
    pub const GLOBAL: ScopeId = ScopeId(Id {
        slot: 0,
        generation: 0,
    });
}

/// The verdict of [`Collapser::add`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Add {
    /// The item joined its key's open batch; it is flushed at
    /// [`Collapser::next_deadline`].
    Queued(ItemId),
    /// The item joined and filled the batch: poll now.
    Full(ItemId),
    /// Not collapsed: run this call on its own.
    Refused(Refused),
}

/// Why [`Collapser::add`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The scope is closed, stale or forged.
    UnknownScope,
    /// The key is longer than `max_key_bytes`.
    KeyTooLong,
    /// `max_items` items are waiting for results.
    TooManyItems,
}

/// Counters and sizes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CollapserStats {
    /// Items without a result (≤ `max_items`).
    pub items: u32,
    /// Batches collecting items (open or full, not yet handed out).
    pub pending_batches: u32,
    /// Batches handed out and not yet ended.
    pub running_batches: u32,
    /// Open request scopes.
    pub scopes: u32,
    /// Items added.
    pub added: u64,
    /// Adds refused.
    pub refused: u64,
    /// Batches flushed because they were full.
    pub flushed_full: u64,
    /// Batches flushed because their window passed.
    pub flushed_window: u64,
    /// Items completed with `ok`.
    pub items_ok: u64,
    /// Items completed with `!ok` or failed by `fail_batch`.
    pub items_failed: u64,
    /// Items cancelled.
    pub cancelled: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Phase {
    /// Collecting (in the index and the open list).
    #[default]
    Open,
    /// Full, queued for the next poll.
    Full,
    /// Handed out; results map back by index.
    Running,
}

/// Link pair of the open list (by first item).
const OPEN: usize = 0;
/// Link pair of a request scope's list.
const SCOPE: usize = 1;
/// Largest item listing a freed batch keeps for reuse.
const KEEP_ITEMS: usize = 64;

#[derive(Debug, Default)]
struct Batch {
    phase: Phase,
    scope: u32,
    hash: u64,
    key: Vec<u8>,
    items: Vec<ItemId>,
    /// Items without a result.
    live: u32,
    first_at: Nanos,
    links: [[u32; 2]; 2],
}

impl Linked for Batch {
    fn links(&mut self) -> &mut [[u32; 2]; 2] {
        &mut self.links
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Item {
    batch: u32,
}

/// The collapser. See the module documentation.
#[derive(Debug)]
pub struct Collapser {
    config: CollapserConfig,
    window_ns: Nanos,
    seed: u64,
    clock: Monotonic,
    batches: Slab<Batch>,
    items: Slab<Item>,
    scopes: Slab<List>,
    index: KeyIndex,
    open: List,
    full: VecDeque<Id>,
    full_count: u32,
    running: u32,
    out: Vec<ItemId>,
    stats: CollapserStats,
}

impl Collapser {
    /// A collapser with `config` (validated; error paths start with `collapser.`).
    /// `seed`: 64 random bits from the host (keys may be attacker-chosen).
    pub fn new(config: CollapserConfig, seed: u64) -> Result<Self, ConfigError> {
        config.validate().map_err(|e| e.within("collapser"))?;
        let mut scopes = Slab::default();
        let _ = open_scope(&mut scopes, 0);
        Ok(Collapser {
            window_ns: ms_to_ns(config.window_ms),
            config,
            seed,
            clock: Monotonic::default(),
            batches: Slab::default(),
            items: Slab::default(),
            scopes,
            index: KeyIndex::default(),
            open: EMPTY,
            full: VecDeque::new(),
            full_count: 0,
            running: 0,
            out: Vec::new(),
            stats: CollapserStats::default(),
        })
    }

    /// The config in force.
    pub fn config(&self) -> &CollapserConfig {
        &self.config
    }

    /// Applies a new config at run time: open batches keep their items and take the
    /// new window at once; batches at or past a lower `max_batch_size` are due now; a
    /// lower `max_items` only refuses new adds until the count falls under it.
    pub fn set_config(&mut self, config: CollapserConfig, now: Nanos) -> Result<(), ConfigError> {
        config.validate().map_err(|e| e.within("collapser"))?;
        self.clock.advance(now);
        self.config = config;
        self.window_ns = ms_to_ns(self.config.window_ms);
        let mut p = self.open.oldest;
        while let Some(b) = self.batches.at(p) {
            let next = b.links[OPEN][0];
            if b.live >= self.config.max_batch_size {
                self.make_full(p);
            }
            p = next;
        }
        Ok(())
    }

    // ---- scopes ---------------------------------------------------------------

    /// Opens a request scope; `None` when `max_scopes` are open.
    pub fn open_scope(&mut self) -> Option<ScopeId> {
        open_scope(&mut self.scopes, self.config.max_scopes).map(ScopeId)
    }

    /// Closes a request scope: its batches not yet handed out are dropped, and their
    /// items (callers that will get no result) are returned; fail or drop them.
    /// Batches already handed out run on. Empty for the global scope and unknown
    /// scopes.
    pub fn close_scope(&mut self, scope: ScopeId, now: Nanos) -> &[ItemId] {
        self.clock.advance(now);
        self.out.clear();
        if scope.0.slot == 0 || self.scopes.get(scope.0).is_none() {
            return &self.out;
        }
        while let Some(slot) = self.scopes.get(scope.0).map(|s| s.oldest) {
            let Some(id) = self.batches.id_at(slot) else {
                break;
            };
            self.take_live(id, false);
            self.free_batch(slot);
        }
        self.scopes.remove_at(scope.0.slot);
        &self.out
    }

    // ---- adding ---------------------------------------------------------------

    /// Adds a call for collapser `key` in `scope` at `now`. O(1) amortised; see
    /// [`Add`].
    pub fn add(&mut self, scope: ScopeId, key: &[u8], now: Nanos) -> Add {
        let now = self.clock.advance(now);
        if self.scopes.get(scope.0).is_none() {
            return self.refuse(Refused::UnknownScope);
        }
        if key.len() > self.config.max_key_bytes as usize {
            return self.refuse(Refused::KeyTooLong);
        }
        if self.items.len() >= self.config.max_items {
            return self.refuse(Refused::TooManyItems);
        }
        let sc = scope.0.slot;
        let h = hash(self.seed, u64::from(sc), key);
        let batches = &self.batches;
        let found = self.index.find(h, |s| {
            batches
                .at(s)
                .is_some_and(|b| b.scope == sc && b.key.as_slice() == key)
        });
        // The item first: a batch opened for an item that then finds no room would be
        // flushed empty (found by review).
        let Some(item) = self.items.insert(MAX_SLOTS, |i| *i = Item { batch: NIL }) else {
            return self.refuse(Refused::TooManyItems);
        };
        let slot = match found {
            Some(s) => s,
            None => match self.open_batch(sc, h, key, now) {
                Some(s) => s,
                None => {
                    self.items.remove_at(item.slot);
                    return self.refuse(Refused::TooManyItems);
                }
            },
        };
        if let Some(i) = self.items.at_mut(item.slot) {
            i.batch = slot;
        }
        let item = ItemId(item);
        let limit = self.config.max_batch_size;
        let mut full = false;
        let mut compact = false;
        if let Some(b) = self.batches.at_mut(slot) {
            b.items.push(item);
            b.live += 1;
            full = b.live >= limit;
            // Cancelled items leave their ids behind: dropped once they are half the
            // listing (found by review: at twice `max_batch_size`, a batch of one live
            // item kept thousands of cancelled ids). Amortised O(1).
            compact = b.items.len() >= 2 * (b.live as usize).max(8);
        }
        if compact {
            self.compact(slot);
        }
        self.stats.added += 1;
        if full {
            self.make_full(slot);
            Add::Full(item)
        } else {
            Add::Queued(item)
        }
    }

    fn refuse(&mut self, why: Refused) -> Add {
        self.stats.refused += 1;
        Add::Refused(why)
    }

    fn open_batch(&mut self, scope: u32, h: u64, key: &[u8], now: Nanos) -> Option<u32> {
        if !self.index.reserve() {
            return None;
        }
        let id = self.batches.insert(MAX_SLOTS, |b| {
            b.phase = Phase::Open;
            b.scope = scope;
            b.hash = h;
            b.key.clear();
            b.key.extend_from_slice(key);
            b.items.clear();
            b.live = 0;
            b.first_at = now;
            b.links = [[NIL; 2]; 2];
        })?;
        self.index.insert(h, id.slot);
        push_newest(&mut self.batches, &mut self.open, id.slot, OPEN);
        if scope != 0 {
            if let Some(s) = self.scopes.at_mut(scope) {
                push_newest(&mut self.batches, s, id.slot, SCOPE);
            }
        }
        Some(id.slot)
    }

    /// Drops listing slots of items that left (cancelled).
    fn compact(&mut self, slot: u32) {
        let items = &self.items;
        if let Some(b) = self.batches.at_mut(slot) {
            b.items
                .retain(|id| items.get(id.0).is_some_and(|i| i.batch == slot));
        }
    }

    /// An open batch is full: out of the index and the open list, queued for poll.
    fn make_full(&mut self, slot: u32) {
        let Some(b) = self.batches.at_mut(slot) else {
            return;
        };
        if b.phase != Phase::Open {
            return;
        }
        b.phase = Phase::Full;
        let h = b.hash;
        self.index.remove(h, slot);
        unlink(&mut self.batches, &mut self.open, slot, OPEN);
        if let Some(id) = self.batches.id_at(slot) {
            self.full.push_back(id);
            self.full_count += 1;
        }
    }

    /// The caller of `item` went away: before the flush it leaves its batch (an
    /// emptied batch is dropped); after it, its result will be discarded
    /// (`complete_item` returns `None` for it). `false`: it already has a result, or
    /// the id is stale or forged.
    pub fn cancel(&mut self, item: ItemId) -> bool {
        let Some(slot) = self.items.get(item.0).map(|i| i.batch) else {
            return false;
        };
        self.items.remove_at(item.0.slot);
        self.stats.cancelled += 1;
        let live = match self.batches.at_mut(slot) {
            Some(b) => {
                b.live -= 1;
                b.live
            }
            None => return true,
        };
        if live == 0 {
            self.free_batch(slot);
        }
        true
    }

    // ---- flushing -------------------------------------------------------------

    /// The next batch due at `now` (full ones first, then open ones whose window
    /// passed, oldest first), handed out once: list it with [`Collapser::items`] and
    /// run it. Call until `None`, then again at [`Collapser::next_deadline`].
    pub fn poll(&mut self, now: Nanos) -> Option<BatchId> {
        let now = self.clock.advance(now);
        if let Some(b) = self.poll_full() {
            return Some(b);
        }
        let slot = self.open.oldest;
        let first = self.batches.at(slot)?.first_at;
        if first.saturating_add(self.window_ns) > now {
            return None;
        }
        self.index
            .remove(self.batches.at(slot).map_or(0, |b| b.hash), slot);
        unlink(&mut self.batches, &mut self.open, slot, OPEN);
        self.stats.flushed_window += 1;
        Some(self.flush(slot))
    }

    /// The next full batch, if any, leaving the collecting ones alone (a host that
    /// runs full batches at once and the others at their window's end).
    pub fn poll_full(&mut self) -> Option<BatchId> {
        while let Some(id) = self.full.pop_front() {
            if self.batches.get(id).is_some_and(|b| b.phase == Phase::Full) {
                self.full_count -= 1;
                self.stats.flushed_full += 1;
                return Some(self.flush(id.slot));
            }
        }
        None
    }

    fn flush(&mut self, slot: u32) -> BatchId {
        self.compact(slot);
        let scope = self.batches.at(slot).map_or(0, |b| b.scope);
        if scope != 0 {
            if let Some(s) = self.scopes.at_mut(scope) {
                unlink(&mut self.batches, s, slot, SCOPE);
            }
        }
        if let Some(b) = self.batches.at_mut(slot) {
            b.phase = Phase::Running;
        }
        self.running += 1;
        BatchId(self.batches.id_at(slot).unwrap_or(Id {
            slot,
            generation: 0,
        }))
    }

    /// When [`Collapser::poll`] has a batch: now if one is full, else the oldest open
    /// batch's window end (`None`: no batch is collecting).
    pub fn next_deadline(&self) -> Option<Nanos> {
        if self.full_count > 0 {
            return Some(self.clock.now());
        }
        self.batches
            .at(self.open.oldest)
            .map(|b| b.first_at.saturating_add(self.window_ns))
    }

    // ---- results --------------------------------------------------------------

    fn running(&self, batch: BatchId) -> Option<&Batch> {
        self.batches
            .get(batch.0)
            .filter(|b| b.phase == Phase::Running)
    }

    /// A handed-out batch's items, in order: result `index` of the batch call belongs
    /// to `items(batch)[index]`. Empty for an ended, stale or forged batch.
    pub fn items(&self, batch: BatchId) -> &[ItemId] {
        self.running(batch).map_or(&[], |b| b.items.as_slice())
    }

    /// A handed-out batch's collapser key.
    pub fn batch_key(&self, batch: BatchId) -> Option<&[u8]> {
        self.running(batch).map(|b| b.key.as_slice())
    }

    /// Result `index` of `batch` (`ok`: success, for the counters): the item whose
    /// caller gets it. `None`: bad index, that caller cancelled or already has its
    /// result, or the batch ended. The batch ends when its last item has a result.
    pub fn complete_item(&mut self, batch: BatchId, index: u32, ok: bool) -> Option<ItemId> {
        let item = *self.running(batch)?.items.get(index as usize)?;
        if self.items.get(item.0).map(|i| i.batch) != Some(batch.0.slot) {
            return None;
        }
        self.items.remove_at(item.0.slot);
        if ok {
            self.stats.items_ok += 1;
        } else {
            self.stats.items_failed += 1;
        }
        let live = self.batches.get_mut(batch.0).map(|b| {
            b.live -= 1;
            b.live
        });
        if live == Some(0) {
            self.free_batch(batch.0.slot);
        }
        Some(item)
    }

    /// Ends a handed-out batch: every item still without a result fails, and is
    /// listed (in batch order) so its caller can fail or fall back. Use it when the
    /// batch was refused or failed, and after mapping a partial answer. Empty for an
    /// ended, stale or forged batch.
    pub fn fail_batch(&mut self, batch: BatchId) -> &[ItemId] {
        self.out.clear();
        if self.running(batch).is_some() {
            self.take_live(batch.0, true);
            self.free_batch(batch.0.slot);
        }
        &self.out
    }

    /// Moves the live items of a batch to `out` and frees them.
    fn take_live(&mut self, batch: Id, failed: bool) {
        let Some(b) = self.batches.get(batch) else {
            return;
        };
        for &item in &b.items {
            if self.items.get(item.0).map(|i| i.batch) == Some(batch.slot) {
                self.items.remove_at(item.0.slot);
                self.out.push(item);
            }
        }
        if failed {
            self.stats.items_failed += self.out.len() as u64;
        }
        if let Some(b) = self.batches.get_mut(batch) {
            b.live = 0;
        }
    }

    /// Frees a batch from wherever it is (index, lists, queue count).
    fn free_batch(&mut self, slot: u32) {
        let Some(b) = self.batches.at(slot) else {
            return;
        };
        let (phase, h, scope) = (b.phase, b.hash, b.scope);
        match phase {
            Phase::Open => {
                self.index.remove(h, slot);
                unlink(&mut self.batches, &mut self.open, slot, OPEN);
            }
            Phase::Full => {
                self.full_count -= 1;
                // Its id stays in `full` until polled: with none full left, they are
                // all stale (found by review: full batches emptied by cancels, never
                // polled, grew the queue without bound).
                if self.full_count == 0 {
                    self.full.clear();
                }
            }
            Phase::Running => self.running -= 1,
        }
        if phase != Phase::Running && scope != 0 {
            if let Some(s) = self.scopes.at_mut(scope) {
                unlink(&mut self.batches, s, slot, SCOPE);
            }
        }
        if let Some(b) = self.batches.at_mut(slot) {
            b.items.clear();
            if b.items.capacity() > KEEP_ITEMS {
                b.items = Vec::new();
            }
            // As the cache's: a slot keeps no long key for its next, short one.
            if b.key.capacity() > crate::cache::KEEP_KEY_BYTES {
                b.key = Vec::new();
            }
        }
        self.batches.remove_at(slot);
    }

    // ---- introspection --------------------------------------------------------

    /// Counters and sizes.
    pub fn stats(&self) -> CollapserStats {
        CollapserStats {
            items: self.items.len(),
            pending_batches: self.batches.len() - self.running,
            running_batches: self.running,
            scopes: self.scopes.len() - 1,
            ..self.stats
        }
    }

    /// Heap bytes held (batches with their keys and listings, items, index, scopes).
    pub fn memory_bytes(&self) -> usize {
        self.batches.table_bytes()
            + self
                .batches
                .values()
                .map(|b| b.key.capacity() + b.items.capacity() * core::mem::size_of::<ItemId>())
                .sum::<usize>()
            + self.items.table_bytes()
            + self.scopes.table_bytes()
            + self.index.memory_bytes()
            + self.full.capacity() * core::mem::size_of::<Id>()
            + self.out.capacity() * core::mem::size_of::<ItemId>()
    }
}
