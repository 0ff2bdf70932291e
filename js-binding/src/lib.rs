//! fusewire-js: the `fusewire-core` [`Engine`] behind the npm package `fusewire`.
//!
//! The JS wrapper (`js-binding/ts`) translates Promises, events, timers and options
//! into calls of this module and back; every resilience rule is the core's. The ABI
//! is numbers only, so a call costs what a plain wasm call costs and the same `.wasm`
//! runs under any loader (Node ESM, Node CommonJS, browsers, bundlers) with no glue:
//!
//! - handles, codes and flags are `i32`/`u32`; call ids, times and tokens are `f64`
//!   (ids are below 2^53; times are milliseconds on the host clock, converted to the
//!   core's nanoseconds here);
//! - results that do not fit a return value go to a fixed `f64` area ([`fw_out`]),
//!   tables to a second area ([`fw_table`]);
//! - strings travel as UTF-8 through a scratch buffer ([`fw_scratch`] in,
//!   [`fw_msg`] out).
//!
//! One instance serves every breaker of a JS realm, so nothing here may trap: every
//! input is checked (unknown handles, forged ids, NaN/∞/negative times, oversized
//! buffers) and answered with an error code; nothing unwraps or indexes unchecked.
//! One breaker = one [`Engine`] with one policy and one key (so `poll` and
//! `next_deadline` stay O(1) per breaker); local state, or shared through a host
//! store driven with [`fw_io`] / [`fw_io_done`] (the core's `poll_io` / `io_done`).

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
#![deny(unsafe_op_in_unsafe_fn)]

use fusewire_core::breaker::ShortCircuit;
use fusewire_core::cache::RequestCache;
use fusewire_core::collapser::Collapser;
use fusewire_core::engine::bounded_name;
use fusewire_core::shared::{Answer, DecodeError, Expect, IoId, Issue, Op};
use fusewire_core::CacheConfig;
use fusewire_core::{
    Cause, Completion, Config, ConfigError, Engine, Event, EventKind, FallbackPermit, KeyId,
    Outcome, Permit, Phase, PolicyId, SharedConfig, Start, Ticket, TransitionReason,
};
use wasm_bindgen::prelude::*;

/// The module's allocator: talc, smaller and faster than Rust's default (dlmalloc) in
/// a `.wasm` (one instance per JS thread: no atomics).
#[cfg(all(target_family = "wasm", not(target_feature = "atomics")))]
#[global_allocator]
static ALLOCATOR: heap::Counted<talc::cell::TalcSyncCell<heap::Heap, talc::wasm::WasmBinning>> =
    heap::Counted(talc::cell::TalcSyncCell::new_wasm(heap::Heap::new()));

mod heap;

/// ABI version: the JS loader refuses a `.wasm` of another version.
pub const ABI_VERSION: u32 = 5;

/// Slots of the `f64` result area.
pub const OUT_LEN: usize = 64;
/// Largest scratch buffer (config JSON, store values).
pub const MAX_SCRATCH: u32 = 16 << 20;
/// Most breakers alive at once (handle index bits).
const INDEX_BITS: u32 = 20;
const INDEX_MASK: u32 = (1 << INDEX_BITS) - 1;
/// A slot's generation (the handle's bits above the index; bit 31 stays clear, so a
/// handle with it set is forged). A handle whose slot was freed and taken again 2 048
/// times matches once more: the wrapper never uses a handle after [`fw_free`].
const GEN_MASK: u32 = (1 << 11) - 1;

// ---- flags returned by start / complete / force / io_done -----------------------

/// `start` kind: the call runs now (permit id in `out[0]`).
pub const RUNNING: i32 = 0;
/// `start` kind: queued for a bulkhead slot (ticket id in `out[0]`).
pub const QUEUED: i32 = 1;
/// `start` kind: refused; bits 4..8 the event kind, 8..12 the cause.
pub const REFUSED: i32 = 2;
/// Events are queued: call [`fw_poll`] until it returns 0.
pub const F_EVENTS: i32 = 1 << 16;
/// The earliest deadline moved before the armed timer: call [`fw_next`] and re-arm.
pub const F_REARM: i32 = 1 << 17;
/// A store request is waiting: drive [`fw_io`].
pub const F_IO: i32 = 1 << 18;
/// The admitted call is a half-open probe.
pub const F_PROBE: i32 = 1 << 19;
/// Returned for an unknown (freed, forged) handle.
pub const E_HANDLE: i32 = -1;
/// Returned when the module is busy (re-entered): never expected.
pub const E_BUSY: i32 = -2;

// ---- poll event codes ------------------------------------------------------------

/// No event.
pub const EV_NONE: i32 = 0;
/// A call passed its deadline: `out[0]` call id.
pub const EV_TIMED_OUT: i32 = 1;
/// A queued call got a slot: `out[0]` permit id (= ticket id).
pub const EV_DEQUEUED: i32 = 2;
/// A queued call will not run: `out[0]` call id, `out[1]` event kind, `out[2]` cause.
pub const EV_REFUSED: i32 = 3;
/// A transition: `out[0]` from, `out[1]` to, `out[2]` reason, `out[3]` at (ms),
/// `out[4]` generation.
pub const EV_TRANSITION: i32 = 4;
/// A shared-store problem: `out[0]` issue (0 invalid, 1 contended, 2 failed,
/// 3 stale), `out[1]` host status; the text in [`fw_msg`].
pub const EV_STORE: i32 = 6;

pub(crate) struct Breaker {
    engine: Engine,
    policy: PolicyId,
    key: KeyId,
    name: String,
    /// The request cache (the config's `cache` section).
    pub(crate) cache: Option<RequestCache>,
    /// A second request cache for in-flight de-duplication (opossum's `coalesce`).
    pub(crate) coalesce: Option<RequestCache>,
    /// The request collapser (the config's `collapser` section).
    pub(crate) collapser: Option<Collapser>,
    /// Deadline (ns) the host has a timer for; `u64::MAX`: none.
    armed: u64,
    /// The calls' timeout (ns), if they have one (the config does not change).
    call_timeout: Option<u64>,
    /// Whether the engine keeps its state in a shared store.
    shared: bool,
    io_key: Vec<u8>,
    io_value: Vec<u8>,
}

struct Slot {
    generation: u32,
    breaker: Option<Box<Breaker>>,
    /// While free: the next free slot ([`NO_SLOT`]: none). A list through the slots,
    /// so `fw_free` never allocates (found by review: a free list of its own grew,
    /// and at the memory's end trapped).
    next_free: u32,
}

/// No slot (the end of the free list).
const NO_SLOT: u32 = u32::MAX;

pub(crate) struct State {
    slots: Vec<Slot>,
    /// The last slot freed (slots are taken again last freed first).
    free: u32,
    scratch: Vec<u8>,
    msg: Vec<u8>,
    out: Box<[f64; OUT_LEN]>,
    table: Vec<f64>,
    rng: u64,
}

/// One breaker with the state's shared buffers, borrowed apart.
pub(crate) struct Parts<'a> {
    pub(crate) b: &'a mut Breaker,
    pub(crate) out: &'a mut [f64; OUT_LEN],
    pub(crate) scratch: &'a [u8],
    pub(crate) table: &'a mut Vec<f64>,
}

impl State {
    fn new() -> Self {
        State {
            slots: Vec::new(),
            free: NO_SLOT,
            scratch: Vec::new(),
            msg: Vec::new(),
            out: Box::new([0.0; OUT_LEN]),
            table: Vec::new(),
            rng: 0x9E37_79B9_7F4A_7C15,
        }
    }

    fn set_out(&mut self, i: usize, v: f64) {
        if let Some(o) = self.out.get_mut(i) {
            *o = v;
        }
    }

    fn set_msg(&mut self, s: &str) {
        self.msg.clear();
        self.msg.extend_from_slice(s.as_bytes());
    }

    /// Reports `e`: `out[0]` = byte length of its path, message = path + reason.
    /// Returns -1.
    fn fail(&mut self, e: &ConfigError) -> i32 {
        self.set_out(0, e.path.len() as f64);
        self.msg.clear();
        self.msg.extend_from_slice(e.path.as_bytes());
        self.msg.extend_from_slice(e.reason.as_bytes());
        -1
    }

    /// The breaker of handle `h` with the scratch (input), `out` and the table.
    pub(crate) fn split(&mut self, h: u32) -> Option<Parts<'_>> {
        let State {
            slots,
            scratch,
            out,
            table,
            ..
        } = self;
        let slot = slots.get_mut((h & INDEX_MASK) as usize)?;
        if slot.generation != h >> INDEX_BITS {
            return None;
        }
        Some(Parts {
            b: slot.breaker.as_deref_mut()?,
            out,
            scratch,
            table,
        })
    }

    /// Splits the borrow: the breaker of handle `h` and the rest of the state.
    #[inline]
    pub(crate) fn parts(
        &mut self,
        h: u32,
    ) -> Option<(&mut Breaker, &mut [f64; OUT_LEN], &mut u64)> {
        let slot = self.slots.get_mut((h & INDEX_MASK) as usize)?;
        if slot.generation != h >> INDEX_BITS {
            return None;
        }
        let b = slot.breaker.as_deref_mut()?;
        Some((b, &mut self.out, &mut self.rng))
    }
}

/// The instance's one state. In wasm (one thread, and no import the state could be
/// re-entered through) a plain static with a busy flag; elsewhere (native tests run
/// on many threads) a thread-local.
#[cfg(target_arch = "wasm32")]
mod global {
    use super::State;
    use core::cell::UnsafeCell;

    struct Global {
        busy: UnsafeCell<bool>,
        state: UnsafeCell<Option<State>>,
    }

    // SAFETY: wasm32 without the atomics feature has exactly one thread.
    unsafe impl Sync for Global {}

    static G: Global = Global {
        busy: UnsafeCell::new(false),
        state: UnsafeCell::new(None),
    };

    /// The state, made on the first call.
    #[cold]
    #[inline(never)]
    fn first(slot: &mut Option<State>) -> &mut State {
        slot.insert(State::new())
    }

    /// Runs `f` on the state, or returns `fallback` if it is already in use.
    ///
    /// The host reads the flag after a throw out of an export (the stack running out,
    /// a trap): set, the state may be half-updated and the instance is given up;
    /// clear, the export did nothing. So every export does its work inside one `with`,
    /// and nothing here calls a function before the flag is set or after it is cleared.
    #[inline(always)]
    pub(crate) fn with<R>(fallback: R, f: impl FnOnce(&mut State) -> R) -> R {
        // SAFETY: one thread; the busy flag refuses re-entry, so the one `&mut`
        // handed out is unique for its lifetime.
        unsafe {
            let busy = &mut *G.busy.get();
            if *busy {
                return fallback;
            }
            *busy = true;
            let slot = &mut *G.state.get();
            let state = match slot {
                Some(s) => s,
                None => first(slot),
            };
            let r = f(state);
            *busy = false;
            r
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod global {
    use super::State;
    use std::cell::RefCell;

    thread_local! {
        static STATE: RefCell<State> = RefCell::new(State::new());
    }

    /// Runs `f` on the state, or returns `fallback` if it is unavailable (re-entered,
    /// or the thread-local is gone). Never panics.
    pub(crate) fn with<R>(fallback: R, f: impl FnOnce(&mut State) -> R) -> R {
        let mut f = Some(f);
        let r = STATE.try_with(|s| match (s.try_borrow_mut(), f.take()) {
            (Ok(mut s), Some(f)) => Some(f(&mut s)),
            _ => None,
        });
        match r {
            Ok(Some(v)) => v,
            _ => fallback,
        }
    }
}

pub(crate) use global::with;

/// Host milliseconds → core nanoseconds. NaN, negative and ∞ are clamped (a clock
/// stepping backwards counts as no time passing in the core).
pub(crate) fn ns(ms: f64) -> u64 {
    if ms.is_nan() || ms <= 0.0 {
        return 0;
    }
    // Whole milliseconds and the fraction apart: host times lie on the wall-clock
    // timeline (1.8e12 ms), where a product in nanoseconds is past 2^53 and rounds to
    // 256 ns — `t0 + 30` ms must come out exactly 30 ms after `t0` (or a timer armed
    // for a deadline finds it short of due). The fraction is rounded, not truncated
    // (0.9999998 ms is 1 ms). `as` saturates at u64::MAX for huge values and +∞.
    let whole = ms.floor();
    (whole as u64)
        .saturating_mul(1_000_000)
        .saturating_add(((ms - whole) * 1_000_000.0 + 0.5) as u64)
}

/// Core nanoseconds → host milliseconds, the nearest `f64` (a host time of the
/// wall-clock timeline reads back as itself).
pub(crate) fn ms(ns: u64) -> f64 {
    (ns / 1_000_000) as f64 + (ns % 1_000_000) as f64 / 1_000_000.0
}

/// A JS number that should be an id below 2^53 → the raw id (anything else: an id
/// that matches nothing).
pub(crate) fn id_of(v: f64) -> u64 {
    if (0.0..9_007_199_254_740_992.0).contains(&v) {
        v as u64
    } else {
        u64::MAX
    }
}

/// Runs `f` on the breaker of handle `h`: [`E_HANDLE`] for an unknown handle,
/// [`E_BUSY`] on re-entry.
pub(crate) fn on_breaker(h: u32, f: impl FnOnce(&mut Breaker) -> i32) -> i32 {
    with(E_BUSY, |s| match s.parts(h) {
        Some((b, _, _)) => f(b),
        None => E_HANDLE,
    })
}

/// [`on_breaker`] with the rest of the state (out area, scratch, table) alongside.
pub(crate) fn on_parts(h: u32, f: impl FnOnce(Parts<'_>) -> i32) -> i32 {
    with(E_BUSY, |s| match s.split(h) {
        Some(p) => f(p),
        None => E_HANDLE,
    })
}

fn splitmix(rng: &mut u64) -> u64 {
    *rng = rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *rng;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

const fn phase_code(p: Phase) -> f64 {
    match p {
        Phase::Closed => 0.0,
        Phase::Open => 1.0,
        Phase::HalfOpen => 2.0,
    }
}

const fn reason_code(r: TransitionReason) -> f64 {
    match r {
        TransitionReason::ErrorPercentage => 0.0,
        TransitionReason::ConsecutiveFailures => 1.0,
        TransitionReason::SlowCallRate => 2.0,
        TransitionReason::OpenElapsed => 3.0,
        TransitionReason::ProbesSucceeded => 4.0,
        TransitionReason::ProbeFailed => 5.0,
        TransitionReason::ProbeLeaseExpired => 6.0,
        TransitionReason::Forced => 7.0,
        TransitionReason::Observed => 8.0,
    }
}

const fn cause_code(c: Cause) -> i32 {
    match c {
        Cause::ShortCircuit(ShortCircuit::Open) => 0,
        Cause::ShortCircuit(ShortCircuit::ForcedOpen) => 1,
        Cause::ShortCircuit(ShortCircuit::ProbesExhausted) => 2,
        Cause::ShortCircuit(ShortCircuit::Throttled) => 3,
        Cause::ShortCircuit(ShortCircuit::SlowStart) => 4,
        Cause::BulkheadFull => 5,
        Cause::QueueFull => 6,
        Cause::WaitExpired => 7,
        Cause::Degraded => 8,
        Cause::UnknownKey => 9,
    }
}

impl Breaker {
    /// The flags every mutating call returns.
    pub(crate) fn flags(&mut self) -> i32 {
        self.flags_after(None)
    }

    /// The flags, where `floor` (if given) is a time no call deadline the last call
    /// added can be before: with the timer armed at or before it and before every key
    /// wake scheduled since, no deadline can be earlier than the timer, and the
    /// deadline scan is skipped (the hot path, shared keys included).
    #[inline]
    fn flags_after(&mut self, floor: Option<u64>) -> i32 {
        let mut f = 0;
        let events = self.engine.has_events();
        if events {
            f |= F_EVENTS;
        }
        if self.shared && self.engine.has_io() {
            f |= F_IO;
        }
        let wake = self.engine.take_new_wake();
        let quiet = !events
            && floor.is_some_and(|fl| self.armed <= fl)
            && wake.is_none_or(|w| self.armed <= w);
        if !quiet && self.next_deadline().is_some_and(|d| d < self.armed) {
            f |= F_REARM;
        }
        f
    }

    fn next_deadline(&self) -> Option<u64> {
        let caches = [&self.cache, &self.coalesce];
        let mut next = self.engine.next_deadline().unwrap_or(u64::MAX);
        for d in caches
            .into_iter()
            .flatten()
            .filter_map(RequestCache::next_deadline)
        {
            next = next.min(d);
        }
        if let Some(d) = self.collapser.as_ref().and_then(Collapser::next_deadline) {
            next = next.min(d);
        }
        (next != u64::MAX).then_some(next)
    }

    fn rekey(&mut self, now: u64) {
        if let Some(k) = self.engine.key(self.policy, &self.name, now) {
            self.key = k;
        }
    }

    /// Takes the key again if it expired (idle past `keys.idle_ms`: taken back lazily,
    /// so an idle breaker stops syncing with its store until it is used or read).
    fn revive(&mut self, now: u64) {
        if self.engine.key_policy(self.key).is_none() {
            self.rekey(now);
        }
    }
}

// ---- module-level -------------------------------------------------------------------

/// The ABI version ([`ABI_VERSION`]).
#[wasm_bindgen]
pub fn fw_abi() -> u32 {
    ABI_VERSION
}

/// Address of the `f64` result area ([`OUT_LEN`] slots; stable for the instance's
/// life, but re-create views after memory growth).
#[no_mangle]
pub extern "C" fn fw_out() -> u32 {
    with(0, |s| s.out.as_ptr() as u32)
}

/// Address of the table area (rows written by [`fw_buckets`]).
#[no_mangle]
pub extern "C" fn fw_table() -> u32 {
    with(0, |s| s.table.as_ptr() as u32)
}

/// Makes the scratch buffer `len` bytes long and returns its address (0 when `len`
/// is over [`MAX_SCRATCH`]). The host writes its input there before the call that
/// reads it; any call may move it, so ask again each time.
#[no_mangle]
pub extern "C" fn fw_scratch(len: u32) -> u32 {
    if len > MAX_SCRATCH {
        return 0;
    }
    with(0, |s| {
        s.scratch.clear();
        if len as usize > s.scratch.capacity() {
            // A failed allocation would trap the instance (every breaker of the
            // process): the old buffer goes first, so the new one (grown from none)
            // is what was probed (found by review: resize doubled past the probe, the
            // old block still held).
            s.scratch = Vec::new();
            if !fusewire_core::can_allocate(len as usize) {
                return 0;
            }
        }
        s.scratch.resize(len as usize, 0);
        if s.scratch.capacity() == 0 {
            s.scratch.reserve(1);
        }
        s.scratch.as_ptr() as u32
    })
}

/// Address of the last message (an error, a store issue); see [`fw_msg_len`].
#[no_mangle]
pub extern "C" fn fw_msg() -> u32 {
    with(0, |s| s.msg.as_ptr() as u32)
}

/// Length in bytes of the last message.
#[no_mangle]
pub extern "C" fn fw_msg_len() -> u32 {
    with(0, |s| s.msg.len() as u32)
}

/// Seeds the random source (adaptive throttle, slow start, jitter) from the host's
/// RNG.
#[no_mangle]
pub extern "C" fn fw_seed(lo: u32, hi: u32) {
    with((), |s| {
        s.rng = u64::from(hi) << 32 | u64::from(lo);
    });
}

/// Live breakers (for leak checks).
#[no_mangle]
pub extern "C" fn fw_live() -> u32 {
    with(0, |s| {
        s.slots.iter().filter(|x| x.breaker.is_some()).count() as u32
    })
}

/// Sets the wasm memory size (MiB, at most 4 095) past which memory counts as low:
/// new breakers, cache entries and collapser items are then refused (tests; the
/// default is 4 GiB less 128 MiB). Lifts the low mark.
#[no_mangle]
pub extern "C" fn fw_memory_limit(mib: u32) {
    heap::set_limit(mib);
}

/// Validates a config (JSON in scratch, `len` bytes) without creating anything:
/// 0 if valid, else -1 with `path` in `out[0]` (byte length) and
/// `path + reason` in the message.
#[no_mangle]
pub extern "C" fn fw_check(len: u32) -> i32 {
    with(E_BUSY, |s| {
        let json = s.scratch.get(..len as usize).unwrap_or_default();
        match Config::from_json_bytes(json) {
            Ok(_) => 0,
            Err(e) => s.fail(&e),
        }
    })
}

/// What [`fw_create`] reads from the scratch buffer.
struct Input<'a> {
    config: &'a [u8],
    shared: &'a [u8],
    name: &'a [u8],
    coalesce: &'a [u8],
    owner: u64,
}

impl Breaker {
    /// A breaker from its inputs; errors name the section (`cache.`, `collapser.`,
    /// `coalesce.`, `shared.`) in their path.
    /// Also the config's warnings ([`Config::warning_bits`]).
    fn build(input: &Input<'_>, seed: u64, now: u64) -> Result<(Breaker, u32), ConfigError> {
        let config = Config::from_json_bytes(input.config)?;
        let warnings = config.warning_bits();
        let cache = match &config.cache {
            Some(c) => Some(RequestCache::new(c.clone(), seed).map_err(|e| e.within("cache"))?),
            None => None,
        };
        let collapser = match &config.collapser {
            Some(c) => Some(
                Collapser::new(c.clone(), seed.rotate_left(17))
                    .map_err(|e| e.within("collapser"))?,
            ),
            None => None,
        };
        let coalesce = match input.coalesce {
            [] => None,
            bytes => Some(
                fusewire_core::config::parse_json::<CacheConfig>(bytes)
                    .and_then(|c| RequestCache::new(c, seed.rotate_left(31)))
                    .map_err(|e| e.within("coalesce"))?,
            ),
        };
        // TextEncoder output: always UTF-8.
        let name = std::str::from_utf8(input.name)
            .map_err(|_| ConfigError::new("name", "must be UTF-8"))?;
        let name = match bounded_name(name).into_owned() {
            n if n.is_empty() => "breaker".to_string(),
            n => n,
        };
        let mut engine = match input.shared {
            [] => Engine::local(),
            bytes => fusewire_core::config::parse_json::<SharedConfig>(bytes)
                .and_then(|c| Engine::shared(c, input.owner))
                .map_err(|e| e.within("shared"))?,
        };
        let policy = engine.add_policy(&name, config)?;
        let key = engine
            .key(policy, &name, now)
            .ok_or_else(|| ConfigError::new("", "no key"))?;
        let call_timeout = engine.config(policy).and_then(|c| {
            c.execution
                .timeout_enabled
                .then(|| c.execution.timeout_ms.saturating_mul(1_000_000))
        });
        let shared = engine.shared_config().is_some();
        let breaker = Breaker {
            engine,
            policy,
            key,
            name,
            cache,
            coalesce,
            collapser,
            armed: u64::MAX,
            call_timeout,
            shared,
            io_key: Vec::new(),
            io_value: Vec::new(),
        };
        Ok((breaker, warnings))
    }
}

/// Creates a breaker. Scratch holds `config` JSON (`config_len` bytes), then the
/// shared-state JSON (`shared_len` bytes; 0 = local state), then the name
/// (`name_len` bytes, UTF-8; longer than 200 bytes: its head and a hash of the whole name, [`bounded_name`]), then a second cache section for
/// in-flight de-duplication (`coalesce_len` bytes of the core's `CacheConfig` JSON;
/// 0 = none). The config's `cache` and `collapser` sections get a request cache and
/// a collapser. `owner_lo/hi`: this worker's id in shared ledgers. Returns the
/// handle (≥ 0) with `out[0]` = the config's warnings (bit `ConfigWarning as u32`),
/// or -1: `out[0]` = byte length of the error path (prefixed `shared.`
/// or `coalesce.` for those sections), message = path + reason.
#[no_mangle]
pub extern "C" fn fw_create(
    config_len: u32,
    shared_len: u32,
    name_len: u32,
    coalesce_len: u32,
    owner_lo: u32,
    owner_hi: u32,
    now: f64,
) -> i32 {
    with(E_BUSY, |s| {
        let (a, b) = (config_len as usize, shared_len as usize);
        let name_end = a.saturating_add(b).saturating_add(name_len as usize);
        let total = name_end.saturating_add(coalesce_len as usize);
        if total > s.scratch.len() {
            s.set_out(0, 0.0);
            s.set_msg("input too large");
            return -1;
        }
        if heap::low() {
            return s.fail(&ConfigError::new("", "wasm memory is full"));
        }
        let seed = splitmix(&mut s.rng);
        let input = Input {
            config: s.scratch.get(..a).unwrap_or_default(),
            shared: s.scratch.get(a..a + b).unwrap_or_default(),
            name: s.scratch.get(a + b..name_end).unwrap_or_default(),
            coalesce: s.scratch.get(name_end..total).unwrap_or_default(),
            owner: u64::from(owner_hi) << 32 | u64::from(owner_lo),
        };
        let (breaker, warnings) = match Breaker::build(&input, seed, ns(now)) {
            Ok((b, w)) => (Box::new(b), w),
            Err(e) => return s.fail(&e),
        };
        let index = match s.slots.get(s.free as usize) {
            Some(slot) => core::mem::replace(&mut s.free, slot.next_free),
            None => {
                if s.slots.len() as u32 > INDEX_MASK {
                    return s.fail(&ConfigError::new("", "too many breakers alive"));
                }
                if s.slots.try_reserve(1).is_err() {
                    return s.fail(&ConfigError::new("", "wasm memory is full"));
                }
                s.slots.push(Slot {
                    generation: 0,
                    breaker: None,
                    next_free: NO_SLOT,
                });
                s.slots.len() as u32 - 1
            }
        };
        let Some(slot) = s.slots.get_mut(index as usize) else {
            return s.fail(&ConfigError::new("", "too many breakers alive"));
        };
        slot.breaker = Some(breaker);
        slot.next_free = NO_SLOT;
        let h = ((slot.generation & GEN_MASK) << INDEX_BITS | index) as i32;
        s.set_out(0, f64::from(warnings));
        h
    })
}

/// Frees a breaker (its handle becomes stale). 1 if it was live.
#[no_mangle]
pub extern "C" fn fw_free(h: u32) -> i32 {
    with(E_BUSY, |s| {
        let i = h & INDEX_MASK;
        let Some(slot) = s.slots.get_mut(i as usize) else {
            return 0;
        };
        if slot.generation != h >> INDEX_BITS || slot.breaker.is_none() {
            return 0;
        }
        slot.breaker = None;
        slot.generation = slot.generation.wrapping_add(1) & GEN_MASK;
        slot.next_free = core::mem::replace(&mut s.free, i);
        1
    })
}

// ---- the call flow ------------------------------------------------------------------------

/// Before [`fw_start`] (`admitting` 1) or a read of the phase (0) on a shared
/// breaker: asks for the store reads the decision wants (a read takes no probe
/// lease). Returns flags ([`F_IO`]: drive [`fw_io`]). A no-op on local breakers.
#[no_mangle]
pub extern "C" fn fw_prepare(h: u32, admitting: u32, now: f64) -> i32 {
    on_breaker(h, |b| {
        b.revive(ns(now));
        if admitting != 0 {
            b.engine.prepare(b.key, ns(now));
        } else {
            b.engine.refresh(b.key, ns(now));
        }
        b.flags()
    })
}

/// Before letting a shared breaker go: asks to write its pending outcomes now.
/// Returns flags ([`F_IO`]: drive [`fw_io`]). A no-op on local breakers.
#[no_mangle]
pub extern "C" fn fw_flush(h: u32, now: f64) -> i32 {
    on_breaker(h, |b| {
        b.engine.flush(b.key, ns(now));
        b.flags()
    })
}

/// Starts a call: [`RUNNING`] (permit id in `out[0]`), [`QUEUED`] (ticket id in
/// `out[0]`) or [`REFUSED`] (bits 4..8: event kind, 8..12: cause; `out[0]`: ms until
/// the breaker lets calls through, or −1), or'ed with the flags.
#[no_mangle]
pub extern "C" fn fw_start(h: u32, now: f64) -> i32 {
    with(E_BUSY, |s| {
        let Some((b, out, rng)) = s.parts(h) else {
            return E_HANDLE;
        };
        let t = ns(now);
        let mut r = b.engine.start(b.key, t, splitmix(rng));
        if let Start::Refused(f) = &r {
            if f.cause == Cause::UnknownKey {
                // The key expired (idle past `keys.idle_ms`): take it again.
                b.rekey(t);
                r = b.engine.start(b.key, t, splitmix(rng));
            }
        }
        let kind = match r {
            Start::Running(p) => {
                let phase = b.engine.circuit(b.key).map(|c| c.state.phase());
                out[0] = p.into_raw() as f64;
                if phase == Some(Phase::Closed) {
                    // The closed path: the only deadline added is this call's.
                    let floor = b.call_timeout.map_or(u64::MAX, |d| t.saturating_add(d));
                    return RUNNING | b.flags_after(Some(floor));
                }
                RUNNING | F_PROBE
            }
            Start::Queued(t) => {
                out[0] = t.into_raw() as f64;
                QUEUED
            }
            Start::Refused(f) => {
                // ms until the breaker lets calls through (the error's `retryAfter`): for
                // a call an open breaker refused, `Engine::retry_after`'s rest of the
                // open period (the refusal already says `normal` mode and open), read
                // off the deciding state at less cost to the `.wasm`'s size.
                out[0] = match f.cause {
                    Cause::ShortCircuit(ShortCircuit::Open) => b
                        .engine
                        .breaker_state(b.key)
                        .map_or(-1.0, |s| s.open_until().saturating_sub(t) as f64 / 1e6),
                    _ => -1.0,
                };
                REFUSED | (f.event.index() as i32) << 4 | cause_code(f.cause) << 8
            }
        };
        kind | b.flags()
    })
}

/// Hands a permit back with its outcome (0 success, 1 failure, 2 timeout, 3 bad
/// request, 4 cancelled; anything else counts as a failure). Returns 0 on time,
/// 1 late (the call had timed out: discard the result), 2 unknown, or'ed with the
/// flags.
#[no_mangle]
pub extern "C" fn fw_complete(h: u32, id: f64, outcome: u32, now: f64) -> i32 {
    with(E_BUSY, |s| {
        let Some((b, _, rng)) = s.parts(h) else {
            return E_HANDLE;
        };
        let outcome = u8::try_from(outcome)
            .ok()
            .and_then(Outcome::from_u8)
            .unwrap_or(Outcome::Failure);
        let c = b
            .engine
            .complete(Permit::from_raw(id_of(id)), outcome, ns(now), splitmix(rng));
        let code = match c {
            Completion::OnTime => 0,
            Completion::Late => 1,
            Completion::Unknown => 2,
        };
        // A completion adds no deadline without an event (a transition, a dequeue).
        code | b.flags_after(Some(u64::MAX))
    })
}

/// Gives up a queued call. Returns 1 if it was still queued (or'ed with the flags).
#[no_mangle]
pub extern "C" fn fw_cancel_ticket(h: u32, id: f64, now: f64) -> i32 {
    on_breaker(h, |b| {
        let was = b.engine.cancel_ticket(Ticket::from_raw(id_of(id)), ns(now));
        i32::from(was) | b.flags()
    })
}

/// Takes the next event (see the `EV_*` codes; details in `out`).
#[no_mangle]
pub extern "C" fn fw_poll(h: u32, now: f64) -> i32 {
    with(E_BUSY, |s| {
        let code = {
            let Some((b, out, rng)) = s.parts(h) else {
                return E_HANDLE;
            };
            let t = ns(now);
            loop {
                let Some(e) = b.engine.poll(t, splitmix(rng)) else {
                    break EV_NONE;
                };
                match e {
                    Event::TimedOut { call, .. } => {
                        out[0] = call.to_raw() as f64;
                        break EV_TIMED_OUT;
                    }
                    Event::Dequeued { permit, .. } => {
                        out[0] = permit.into_raw() as f64;
                        break EV_DEQUEUED;
                    }
                    Event::Refused { call, refusal, .. } => {
                        out[0] = call.to_raw() as f64;
                        out[1] = refusal.event.index() as f64;
                        out[2] = f64::from(cause_code(refusal.cause));
                        break EV_REFUSED;
                    }
                    Event::Transition { transition: tr, .. } => {
                        out[0] = phase_code(tr.from);
                        out[1] = phase_code(tr.to);
                        out[2] = reason_code(tr.reason);
                        out[3] = ms(tr.at);
                        out[4] = f64::from(tr.generation);
                        break EV_TRANSITION;
                    }
                    // Taken again when next used or read (see `Breaker::revive`).
                    Event::KeyExpired { .. } => {}
                    // Codes only: the wrapper words them (`storeText`), so the
                    // .wasm carries none of the texts (≈ 60 B of it gzipped).
                    Event::Store { issue, .. } => {
                        let (code, status, what, n) = match issue {
                            Issue::Invalid(e) => {
                                let (what, n) = decode_code(e);
                                (0.0, 0.0, what, n)
                            }
                            Issue::Contended => (1.0, 0.0, 0.0, 0.0),
                            Issue::Failed(c) => (2.0, f64::from(c), 0.0, 0.0),
                            Issue::Stale => (3.0, 0.0, 0.0, 0.0),
                        };
                        out[0] = code;
                        out[1] = status;
                        out[2] = what;
                        out[3] = n;
                        break EV_STORE;
                    }
                }
            }
        };
        code
    })
}

/// A decode error as (kind, its number): the order of `DECODE` in ts/breaker.ts.
fn decode_code(e: DecodeError) -> (f64, f64) {
    match e {
        DecodeError::Truncated => (0.0, 0.0),
        DecodeError::TooLong => (1.0, 0.0),
        DecodeError::BadMagic => (2.0, 0.0),
        DecodeError::FutureVersion(v) => (3.0, f64::from(v)),
        DecodeError::OldVersion(v) => (4.0, f64::from(v)),
        DecodeError::WrongKind(k) => (5.0, f64::from(k)),
        DecodeError::Checksum => (6.0, 0.0),
        DecodeError::Payload => (7.0, 0.0),
    }
}

/// The earliest time (ms) the breaker has work for [`fw_poll`], recorded as the
/// armed timer; -1 when nothing is scheduled.
#[no_mangle]
pub extern "C" fn fw_next(h: u32) -> f64 {
    with(-1.0, |s| {
        let Some((b, _, _)) = s.parts(h) else {
            return -1.0;
        };
        match b.next_deadline() {
            Some(d) => {
                b.armed = d;
                ms(d)
            }
            None => {
                b.armed = u64::MAX;
                -1.0
            }
        }
    })
}

// ---- fallbacks, events, operator actions ------------------------------------------------

/// Asks for a fallback slot: its id (≥ 0), or -1 (`FALLBACK_REJECTION` recorded).
#[no_mangle]
pub extern "C" fn fw_fallback(h: u32, now: f64) -> f64 {
    with(-1.0, |s| {
        let Some((b, _, _)) = s.parts(h) else {
            return -1.0;
        };
        b.revive(ns(now));
        match b.engine.start_fallback(b.key, ns(now)) {
            Some(p) => p.into_raw() as f64,
            None => -1.0,
        }
    })
}

/// Ends a fallback (`ok` ≠ 0: `FALLBACK_SUCCESS`, else `FALLBACK_FAILURE`).
#[no_mangle]
pub extern "C" fn fw_fallback_done(h: u32, id: f64, ok: u32, now: f64) -> i32 {
    on_breaker(h, |b| {
        b.engine
            .finish_fallback(FallbackPermit::from_raw(id_of(id)), ok != 0, ns(now));
        0
    })
}

/// Counts `n` events of kind `kind` (an [`EventKind`] index; unknown kinds are
/// ignored). Never moves the breaker.
#[no_mangle]
pub extern "C" fn fw_record(h: u32, kind: u32, n: u32, now: f64) -> i32 {
    on_breaker(h, |b| {
        let Some(kind) = EventKind::from_index(kind as usize) else {
            return 0;
        };
        let t = ns(now);
        b.revive(t);
        if n == 1 {
            b.engine.record(b.key, kind, t);
        } else if n > 1 {
            b.engine.record_n(b.key, kind, n, t);
        }
        0
    })
}

/// Forces the breaker closed (0), open (1) or half-open (2); returns the flags.
#[no_mangle]
pub extern "C" fn fw_force(h: u32, phase: u32, now: f64) -> i32 {
    with(E_BUSY, |s| {
        let Some((b, _, rng)) = s.parts(h) else {
            return E_HANDLE;
        };
        let to = match phase {
            0 => Phase::Closed,
            1 => Phase::Open,
            2 => Phase::HalfOpen,
            _ => return b.flags(),
        };
        b.revive(ns(now));
        b.engine.force(b.key, to, ns(now), splitmix(rng));
        b.flags()
    })
}

/// Cheap state read (no percentile work): bits 0..2 phase (0 closed, 1 open,
/// 2 half-open, as reported: `forced_open` reports open); bit 2: a half-open breaker
/// still has probe turns (opossum's `pendingClose`); bit 3: warming up; bit 4: a call
/// now would be admitted.
#[no_mangle]
pub extern "C" fn fw_state(h: u32, now: f64) -> i32 {
    on_breaker(h, |b| {
        let t = ns(now);
        b.revive(t);
        let (Some(cfg), Some(state)) = (b.engine.config(b.policy), b.engine.breaker_state(b.key))
        else {
            return 0;
        };
        let phase = state.reported_phase(cfg.breaker.mode);
        let mut f = phase_code(phase) as i32;
        if phase == Phase::HalfOpen
            && state.probes_issued() < cfg.breaker.half_open.permitted_probes
        {
            f |= 1 << 2;
        }
        if state.warming_up(t) {
            f |= 1 << 3;
        }
        if state.would_admit(&cfg.breaker, t) {
            f |= 1 << 4;
        }
        f
    })
}

/// Fills `out` with the snapshot at `now`:
/// `[0]` phase, `[1]` rejecting, `[2]` would admit, `[3]` generation,
/// `[4..17]` live counts per event kind (the rolling window), `[17..30]` cumulative
/// counts, `[30..39]` latency percentiles in ms (p0 p25 p50 p75 p90 p95 p99 p99.5
/// p100, over the percentile window), `[39]` mean latency (ms), `[40]` latencies
/// counted, `[41]` in flight, `[42]` queued, `[43]` rolling max concurrency,
/// `[44]` probes issued, `[45]` warming up, `[46]` opened at (ms), `[47]` open until
/// (ms), `[48]` late results, `[49]` shadow rejections, `[50]` open step,
/// `[51]` slots held (shared), `[52]` memory bytes of the key, `[53]` the key's id
/// (another id: the key expired and was made again, its counts from 0), `[54]` slow
/// calls in the rolling window (the `slow_call` rule on).
/// Returns 0, or [`E_HANDLE`].
#[no_mangle]
pub extern "C" fn fw_snapshot(h: u32, now: f64) -> i32 {
    with(E_BUSY, |s| {
        let Some((b, out, _)) = s.parts(h) else {
            return E_HANDLE;
        };
        let t = ns(now);
        b.revive(t);
        let Some(snap) = b.engine.snapshot(b.key, t) else {
            return E_HANDLE;
        };
        out[0] = phase_code(snap.phase);
        out[1] = f64::from(u8::from(snap.rejecting));
        out[2] = f64::from(u8::from(snap.would_admit));
        out[3] = f64::from(snap.generation);
        for (i, (c, cum)) in snap
            .health
            .counts
            .iter()
            .zip(snap.cumulative.iter())
            .enumerate()
        {
            if let Some(o) = out.get_mut(4 + i) {
                *o = *c as f64;
            }
            if let Some(o) = out.get_mut(17 + i) {
                *o = *cum as f64;
            }
        }
        let p = snap.latency_ns;
        for (i, v) in [
            p.p0, p.p25, p.p50, p.p75, p.p90, p.p95, p.p99, p.p99_5, p.p100,
        ]
        .into_iter()
        .enumerate()
        {
            if let Some(o) = out.get_mut(30 + i) {
                *o = ms(v);
            }
        }
        out[39] = p.mean / 1_000_000.0;
        out[40] = p.count as f64;
        out[41] = f64::from(snap.in_flight);
        out[42] = f64::from(snap.queued);
        out[43] = f64::from(snap.rolling_max_concurrency);
        let st = b.engine.breaker_state(b.key);
        out[44] = st.map_or(0.0, |s| f64::from(s.probes_issued()));
        out[45] = f64::from(u8::from(st.is_some_and(|s| s.warming_up(t))));
        out[46] = st.map_or(0.0, |s| ms(s.opened_at()));
        out[47] = st.map_or(0.0, |s| ms(s.open_until()));
        out[48] = b.engine.late_results(b.key).map_or(0.0, |v| v as f64);
        out[49] = snap.shadow_rejections as f64;
        out[50] = st.map_or(0.0, |s| f64::from(s.open_step()));
        out[51] = b.engine.slots_held(b.key).map_or(0.0, f64::from);
        out[52] = b
            .engine
            .circuit(b.key)
            .map_or(0.0, |c| c.memory_bytes() as f64);
        out[53] = b.key.to_raw() as f64;
        out[54] = snap.health.slow as f64;
        0
    })
}

/// Writes the live counter buckets at `now` to the table in ring order, one row of
/// 14 numbers each: start (ms), then the count per event kind (the wrapper places
/// each row by its start). Returns the row count (call [`fw_table`] after it: the
/// table may have moved).
#[no_mangle]
pub extern "C" fn fw_buckets(h: u32, now: f64) -> i32 {
    with(E_BUSY, |s| {
        let t = ns(now);
        let mut table = core::mem::take(&mut s.table);
        table.clear();
        let mut n = E_HANDLE;
        if let Some((b, _, _)) = s.parts(h) {
            b.revive(t);
            n = 0;
            if let Some(c) = b.engine.circuit(b.key) {
                for (start, bucket) in c.window.counter_buckets_at(t) {
                    table.push(ms(start));
                    table.extend(bucket.counts.iter().map(|&c| f64::from(c)));
                    n += 1;
                }
            }
        }
        s.table = table;
        n
    })
}

// ---- the shared store ------------------------------------------------------------------

/// Takes the next store request: 0 none, 1 read, 2 write. `out[0]` request id,
/// `out[1]` what a write expects (0 absent, 1 the token in `out[2]`), `out[3]`/`[4]`
/// key address/length, `out[5]`/`[6]` value address/length (writes). The bytes stay
/// valid until the next call on this breaker.
#[no_mangle]
pub extern "C" fn fw_io(h: u32, now: f64) -> i32 {
    with(E_BUSY, |s| {
        let Some((b, out, rng)) = s.parts(h) else {
            return E_HANDLE;
        };
        let Some(io) = b.engine.poll_io(ns(now), splitmix(rng)) else {
            return 0;
        };
        b.io_key.clear();
        b.io_key.extend_from_slice(io.key.as_bytes());
        b.io_value.clear();
        let (write, expect) = match io.op {
            Op::Read => (false, None),
            Op::Write { value, expect } => {
                b.io_value.extend_from_slice(value);
                let e = match expect {
                    Expect::Absent => None,
                    Expect::Token(t) => Some(t),
                };
                (true, e)
            }
        };
        let id = io.id.to_raw();
        out[0] = id as f64;
        out[1] = f64::from(u8::from(expect.is_some()));
        out[2] = expect.map_or(0.0, |t| t as f64);
        out[3] = f64::from(b.io_key.as_ptr() as u32);
        out[4] = b.io_key.len() as f64;
        out[5] = f64::from(b.io_value.as_ptr() as u32);
        out[6] = b.io_value.len() as f64;
        if write {
            2
        } else {
            1
        }
    })
}

/// The store's answer to request `id`: `kind` 0 found (value: `len` scratch bytes,
/// `token`), 1 not found, 2 written (`token`, or -1 when the store does not tell),
/// 3 conflict (the current value in scratch when `token` ≥ 0; `flag` ≠ 0: the key
/// is absent now), 4 failed (`flag` = host status). Returns the flags.
#[no_mangle]
pub extern "C" fn fw_io_done(
    h: u32,
    id: f64,
    kind: u32,
    token: f64,
    len: u32,
    flag: u32,
    now: f64,
) -> i32 {
    with(E_BUSY, |s| {
        let State {
            slots,
            scratch,
            rng,
            ..
        } = s;
        let Some(slot) = slots.get_mut((h & INDEX_MASK) as usize) else {
            return E_HANDLE;
        };
        if slot.generation != h >> INDEX_BITS {
            return E_HANDLE;
        }
        let Some(b) = slot.breaker.as_deref_mut() else {
            return E_HANDLE;
        };
        let value = scratch.get(..len as usize).unwrap_or_default();
        let tok = if token.is_finite() && token >= 0.0 {
            Some(token as u64)
        } else {
            None
        };
        let answer = match kind {
            0 => Answer::Found {
                value,
                token: tok.unwrap_or(0),
            },
            1 => Answer::NotFound,
            2 => Answer::Written { token: tok },
            3 => Answer::Conflict {
                current: tok.map(|t| (value, t)),
                absent: flag != 0,
            },
            _ => Answer::Failed { code: flag },
        };
        b.engine
            .io_done(IoId::from_raw(id_of(id)), answer, ns(now), splitmix(rng));
        b.flags()
    })
}

/// Whether a store request waits (1) or not (0).
#[no_mangle]
pub extern "C" fn fw_has_io(h: u32) -> i32 {
    with(E_BUSY, |s| match s.parts(h) {
        Some((b, _, _)) => i32::from(b.engine.has_io()),
        None => E_HANDLE,
    })
}

/// Whether a shared breaker's outcomes are all written and no request is in flight
/// (1; also for local breakers), or not (0). Drive the store until it is, before
/// [`fw_free`] at shutdown.
#[no_mangle]
pub extern "C" fn fw_flushed(h: u32) -> i32 {
    with(E_BUSY, |s| match s.parts(h) {
        Some((b, _, _)) => i32::from(b.engine.flushed(b.key)),
        None => E_HANDLE,
    })
}

/// Whether a shared breaker holds nothing in the store — its outcomes written, no
/// request in flight, no bulkhead slot or reserve held — (1; also for local
/// breakers), or not (0): dropped now, it leaves nothing behind.
#[no_mangle]
pub extern "C" fn fw_quiet(h: u32) -> i32 {
    with(E_BUSY, |s| match s.parts(h) {
        Some((b, _, _)) => i32::from(b.engine.quiet(b.key)),
        None => E_HANDLE,
    })
}

mod extras;
pub use extras::*;

#[cfg(test)]
mod tests;
