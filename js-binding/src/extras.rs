//! The request cache, the in-flight de-duplication cache and the request collapser of
//! a breaker, through the same numbers-only ABI (keys travel as bytes in scratch).
//! The JS host keeps the payloads (Promises) and the callers, keyed by the ids these
//! return; the core decides what is stored, shared, evicted, expired and batched.

use fusewire_core::cache::{
    self, Abandon, Bypass, CacheEvent, Lead, Lookup, Removal, RequestCache, Wait,
};
use fusewire_core::collapser::{self, Add, BatchId, ItemId};

use crate::{id_of, ns, on_parts, with, Breaker};

fn pick(b: &mut Breaker, which: u32) -> Option<&mut RequestCache> {
    match which {
        0 => b.cache.as_mut(),
        1 => b.coalesce.as_mut(),
        _ => None,
    }
}

/// What an entry costs beside its key, counted against the cache's `max_bytes`: the
/// core's node and the wrapper's payload slot (the value itself is the JS heap's). So
/// `max_bytes` bounds the memory of many short keys too (found by a security review:
/// 2^24 entries of unique short keys could fill the `.wasm`'s 4 GiB).
const ENTRY_BYTES: u64 = 256;

const fn bypass_code(b: Bypass) -> f64 {
    match b {
        Bypass::UnknownScope => 0.0,
        Bypass::KeyTooLong => 1.0,
        Bypass::TooManyWaiters => 2.0,
        Bypass::Full => 3.0,
    }
}

const fn removal_code(r: Removal) -> f64 {
    match r {
        Removal::Evicted => 0.0,
        Removal::Expired => 1.0,
        Removal::ScopeClosed => 2.0,
        Removal::Invalidated => 3.0,
        Removal::Cleared => 4.0,
        Removal::NotCached => 5.0,
    }
}

/// The scope of raw id `v` (0: the global scope; a closed or forged one is unknown
/// to the core).
fn cache_scope(v: f64) -> cache::ScopeId {
    cache::ScopeId::from_raw(id_of(v))
}

/// Looks the key (`key_len` scratch bytes) up in cache `which` (0: the cache, 1: the
/// coalescing cache), scope `scope` (0: global): 0 no such cache, 1 hit (`out[0]` entry, `out[1]`
/// failure), 2 lead (`out[0]` caller: run the call, then settle it), 3 wait (`out[0]`
/// caller: wait for its event), 4 bypass (`out[0]` why: run the call without the
/// cache); or'ed with the flags.
#[no_mangle]
pub extern "C" fn fw_cache_lookup(h: u32, which: u32, scope: f64, key_len: u32, now: f64) -> i32 {
    on_parts(h, |p| {
        let Some(c) = pick(p.b, which) else {
            return 0;
        };
        // A key the scratch buffer could not hold (the wrapper passes u32::MAX) is
        // one no cache takes (found by a security review: it read as the empty key).
        let Some(key) = p.scratch.get(..key_len as usize) else {
            p.out[0] = bypass_code(Bypass::KeyTooLong);
            return 4 | p.b.flags();
        };
        if crate::heap::low() {
            p.out[0] = bypass_code(Bypass::Full);
            return 4 | p.b.flags();
        }
        let code = match c.lookup(cache_scope(scope), key, ns(now)) {
            Lookup::Hit { entry, failure } => {
                p.out[0] = entry.to_raw() as f64;
                p.out[1] = f64::from(u8::from(failure));
                1
            }
            Lookup::Lead(l) => {
                p.out[0] = l.into_raw() as f64;
                2
            }
            Lookup::Wait(w) => {
                p.out[0] = w.into_raw() as f64;
                3
            }
            Lookup::Bypass(why) => {
                p.out[0] = bypass_code(why);
                4
            }
        };
        code | p.b.flags()
    })
}

/// Settles a lead of cache `which`: `ok` ≠ 0 fills the entry, else fails it. Returns
/// 0 (`out[0]` the entry or -1, `out[1]` whether it stays cached, `out[2]` followers
/// served) or -1 for an unknown lead; or'ed with the flags.
#[no_mangle]
pub extern "C" fn fw_cache_settle(h: u32, which: u32, lead: f64, ok: u32, now: f64) -> i32 {
    on_parts(h, |p| {
        let Some(c) = pick(p.b, which) else {
            return -1;
        };
        let l = Lead::from_raw(id_of(lead));
        let t = ns(now);
        let settled = if ok != 0 {
            c.fill(l, ENTRY_BYTES, t)
        } else {
            c.fail(l, ENTRY_BYTES, t)
        };
        let Some(st) = settled else {
            return -1;
        };
        p.out[0] = st.entry.map_or(-1.0, |e| e.to_raw() as f64);
        p.out[1] = f64::from(u8::from(st.cached));
        p.out[2] = f64::from(st.followers);
        p.b.flags()
    })
}

/// A call that bypassed cache `which` succeeded: its result fills the key (`key_len`
/// scratch bytes, scope `scope`) unless a ready entry holds it. Returns 0 (`out[0]` the entry to keep
/// the payload under) or -1 (nothing kept); or'ed with the flags.
#[no_mangle]
pub extern "C" fn fw_cache_offer(h: u32, which: u32, scope: f64, key_len: u32, now: f64) -> i32 {
    on_parts(h, |p| {
        let (Some(key), Some(c)) = (p.scratch.get(..key_len as usize), pick(p.b, which)) else {
            return -1;
        };
        if crate::heap::low() {
            return -1;
        }
        let Some(entry) = c
            .offer(cache_scope(scope), key, ENTRY_BYTES, ns(now))
            .and_then(|s| s.entry)
        else {
            return -1;
        };
        p.out[0] = entry.to_raw() as f64;
        p.b.flags()
    })
}

/// Gives up a lead (`lead` ≠ 0) or a wait of cache `which`; 1 if it was live.
#[no_mangle]
pub extern "C" fn fw_cache_cancel(h: u32, which: u32, id: f64, lead: u32, now: f64) -> i32 {
    on_parts(h, |p| {
        let Some(c) = pick(p.b, which) else {
            return 0;
        };
        let raw = id_of(id);
        let t = ns(now);
        let was = if lead != 0 {
            c.cancel_lead(Lead::from_raw(raw), t)
        } else {
            c.cancel_wait(Wait::from_raw(raw), t)
        };
        i32::from(was)
    })
}

/// Removes the entry for the key (`key_len` scratch bytes, scope `scope`) from cache
/// `which`; 1 if there was one.
#[no_mangle]
pub extern "C" fn fw_cache_invalidate(
    h: u32,
    which: u32,
    scope: f64,
    key_len: u32,
    now: f64,
) -> i32 {
    on_parts(h, |p| {
        let (Some(key), Some(c)) = (p.scratch.get(..key_len as usize), pick(p.b, which)) else {
            return 0;
        };
        i32::from(c.invalidate(cache_scope(scope), key, ns(now)))
    })
}

/// Empties scope `scope` of cache `which` (flights go on, and so do other scopes).
#[no_mangle]
pub extern "C" fn fw_cache_clear(h: u32, which: u32, scope: f64, now: f64) -> i32 {
    on_parts(h, |p| {
        if let Some(c) = pick(p.b, which) {
            c.clear(cache_scope(scope), ns(now));
        }
        0
    })
}

/// The next event of cache `which`: 0 none, 1 ready (`out[0]` wait, `out[1]` entry,
/// `out[2]` failure), 2 promoted (`out[0]` the new lead), 3 abandoned (`out[0]` wait,
/// `out[1]` 0 wait expired / 1 scope closed), 4 removed (`out[0]` entry, `out[1]`
/// why: evicted, expired, scope closed, invalidated, cleared, not cached).
#[no_mangle]
pub extern "C" fn fw_cache_poll(h: u32, which: u32, now: f64) -> i32 {
    on_parts(h, |p| {
        let Some(c) = pick(p.b, which) else {
            return 0;
        };
        match c.poll(ns(now)) {
            None => 0,
            Some(CacheEvent::Ready {
                wait,
                entry,
                failure,
            }) => {
                p.out[0] = wait.to_raw() as f64;
                p.out[1] = entry.to_raw() as f64;
                p.out[2] = f64::from(u8::from(failure));
                1
            }
            Some(CacheEvent::Promoted { lead }) => {
                p.out[0] = lead.into_raw() as f64;
                2
            }
            Some(CacheEvent::Abandoned { wait, reason }) => {
                p.out[0] = wait.to_raw() as f64;
                p.out[1] = match reason {
                    Abandon::WaitExpired => 0.0,
                    Abandon::ScopeClosed => 1.0,
                };
                3
            }
            Some(CacheEvent::Removed { entry, reason }) => {
                p.out[0] = entry.to_raw() as f64;
                p.out[1] = removal_code(reason);
                4
            }
        }
    })
}

// ---- the collapser ------------------------------------------------------------------------------

/// Adds an item for collapser key `key_len` scratch bytes (global scope; the
/// wrapper keys a request's batches by the request): 0 no
/// collapser, 1 queued (`out[0]` item; flushed at the next deadline), 2 full
/// (`out[0]` item; poll now), 3 refused (`out[0]` why: 0 unknown scope, 1 key too
/// long, 2 too many items: run the call on its own); or'ed with the flags.
#[no_mangle]
pub extern "C" fn fw_col_add(h: u32, key_len: u32, now: f64) -> i32 {
    on_parts(h, |p| {
        let Some(c) = p.b.collapser.as_mut() else {
            return 0;
        };
        let Some(key) = p.scratch.get(..key_len as usize) else {
            p.out[0] = 1.0; // as too long: the call runs on its own
            return 3 | p.b.flags();
        };
        if crate::heap::low() {
            p.out[0] = 2.0; // as too many items: the call runs on its own
            return 3 | p.b.flags();
        }
        let code = match c.add(collapser::ScopeId::GLOBAL, key, ns(now)) {
            Add::Queued(item) => {
                p.out[0] = item.to_raw() as f64;
                1
            }
            Add::Full(item) => {
                p.out[0] = item.to_raw() as f64;
                2
            }
            Add::Refused(why) => {
                p.out[0] = match why {
                    collapser::Refused::UnknownScope => 0.0,
                    collapser::Refused::KeyTooLong => 1.0,
                    collapser::Refused::TooManyItems => 2.0,
                };
                3
            }
        };
        code | p.b.flags()
    })
}

/// Takes the next due batch (`full_only` ≠ 0: only a full one): its id (its items:
/// [`fw_col_items`]), or -1.
#[no_mangle]
pub extern "C" fn fw_col_poll(h: u32, now: f64, full_only: u32) -> f64 {
    with(-1.0, |s| {
        let Some(p) = s.split(h) else {
            return -1.0;
        };
        let Some(c) = p.b.collapser.as_mut() else {
            return -1.0;
        };
        let batch = if full_only != 0 {
            c.poll_full()
        } else {
            c.poll(ns(now))
        };
        batch.map_or(-1.0, |b| b.to_raw() as f64)
    })
}

fn write_items(table: &mut Vec<f64>, items: &[ItemId]) -> i32 {
    table.clear();
    table.extend(items.iter().map(|i| i.to_raw() as f64));
    items.len() as i32
}

/// Writes the items of batch `batch`, in order, to the table; returns how many.
#[no_mangle]
pub extern "C" fn fw_col_items(h: u32, batch: f64) -> i32 {
    on_parts(h, |p| {
        let Some(c) = p.b.collapser.as_ref() else {
            return 0;
        };
        write_items(p.table, c.items(BatchId::from_raw(id_of(batch))))
    })
}

/// Maps result `index` of `batch` to its item (`ok`: a success): the item id, or -1
/// (that caller cancelled, already has a result, or no such index).
#[no_mangle]
pub extern "C" fn fw_col_complete(h: u32, batch: f64, index: u32, ok: u32) -> f64 {
    with(-1.0, |s| {
        let Some(p) = s.split(h) else {
            return -1.0;
        };
        let Some(c) = p.b.collapser.as_mut() else {
            return -1.0;
        };
        c.complete_item(BatchId::from_raw(id_of(batch)), index, ok != 0)
            .map_or(-1.0, |i| i.to_raw() as f64)
    })
}

/// Ends `batch`, failing every item still without a result; their ids go to the
/// table; returns how many.
#[no_mangle]
pub extern "C" fn fw_col_fail(h: u32, batch: f64) -> i32 {
    on_parts(h, |p| {
        let Some(c) = p.b.collapser.as_mut() else {
            return 0;
        };
        let items = c.fail_batch(BatchId::from_raw(id_of(batch)));
        write_items(p.table, items)
    })
}

// ---- request scopes -----------------------------------------------------------------------------

/// With `scope` < 0, opens a request scope of the cache (cache 0): its id, or -1 (no
/// cache, or its scopes are all open). Else closes scope `scope`: its entries are
/// removed and its flights end (cache events follow); 1 if it was open.
#[no_mangle]
pub extern "C" fn fw_cache_scope(h: u32, scope: f64, now: f64) -> f64 {
    with(-1.0, |s| {
        let Some(c) = s.split(h).and_then(|p| p.b.cache.as_mut()) else {
            return -1.0;
        };
        if scope < 0.0 {
            c.open_scope().map_or(-1.0, |s| s.to_raw() as f64)
        } else {
            f64::from(u8::from(c.close_scope(cache_scope(scope), ns(now))))
        }
    })
}
