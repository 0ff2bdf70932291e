/**
 * The wasm instance and its numbers-only ABI (see js-binding/src/lib.rs).
 *
 * One instance serves every breaker of the realm. Nothing here writes a resilience
 * rule: these are thin typed views over the exports plus the byte shuffling for the
 * few strings that cross (config JSON in, error text out).
 * @internal
 */

export interface Exports {
  readonly memory: WebAssembly.Memory;
  readonly __wbindgen_externrefs?: WebAssembly.Table;
  __wbindgen_start?(): void;
  fw_abi(): number;
  fw_out(): number;
  fw_table(): number;
  fw_scratch(len: number): number;
  fw_msg(): number;
  fw_msg_len(): number;
  fw_seed(lo: number, hi: number): void;
  fw_live(): number;
  fw_memory_limit(mib: number): void;
  fw_check(len: number): number;
  fw_create(configLen: number, sharedLen: number, nameLen: number, coalesceLen: number, ownerLo: number, ownerHi: number, now: number): number;
  fw_free(h: number): number;
  fw_prepare(h: number, admitting: number, now: number): number;
  fw_flush(h: number, now: number): number;
  fw_start(h: number, now: number): number;
  fw_complete(h: number, id: number, outcome: number, now: number): number;
  fw_cancel_ticket(h: number, id: number, now: number): number;
  fw_poll(h: number, now: number): number;
  fw_next(h: number): number;
  fw_fallback(h: number, now: number): number;
  fw_fallback_done(h: number, id: number, ok: number, now: number): number;
  fw_record(h: number, kind: number, n: number, now: number): number;
  fw_force(h: number, phase: number, now: number): number;
  fw_state(h: number, now: number): number;
  fw_snapshot(h: number, now: number): number;
  fw_buckets(h: number, now: number): number;
  fw_io(h: number, now: number): number;
  fw_io_done(h: number, id: number, kind: number, token: number, len: number, flag: number, now: number): number;
  fw_has_io(h: number): number;
  fw_flushed(h: number): number;
  fw_quiet(h: number): number;
  fw_cache_lookup(h: number, which: number, scope: number, keyLen: number, now: number): number;
  fw_cache_settle(h: number, which: number, lead: number, ok: number, now: number): number;
  fw_cache_offer(h: number, which: number, scope: number, keyLen: number, now: number): number;
  fw_cache_cancel(h: number, which: number, id: number, lead: number, now: number): number;
  fw_cache_invalidate(h: number, which: number, scope: number, keyLen: number, now: number): number;
  fw_cache_clear(h: number, which: number, scope: number, now: number): number;
  fw_cache_poll(h: number, which: number, now: number): number;
  fw_col_add(h: number, keyLen: number, now: number): number;
  fw_col_poll(h: number, now: number, fullOnly: number): number;
  fw_col_items(h: number, batch: number): number;
  fw_col_complete(h: number, batch: number, index: number, ok: number): number;
  fw_col_fail(h: number, batch: number): number;
  fw_cache_scope(h: number, scope: number, now: number): number;
}

/** The ABI this wrapper speaks (`ABI_VERSION` in lib.rs). */
export const ABI = 5;

// Flags (lib.rs).
export const KIND_MASK = 0xf;
export const RUNNING = 0;
export const QUEUED = 1;
export const REFUSED = 2;
export const F_EVENTS = 1 << 16;
export const F_REARM = 1 << 17;
export const F_IO = 1 << 18;
export const F_PROBE = 1 << 19;
export const F_ANY = F_EVENTS | F_REARM | F_IO;

// Poll event codes.
export const EV_NONE = 0;
export const EV_TIMED_OUT = 1;
export const EV_DEQUEUED = 2;
export const EV_REFUSED = 3;
export const EV_TRANSITION = 4;
export const EV_STORE = 6;

// Outcomes.
export const OK = 0;
export const FAILURE = 1;
export const TIMEOUT = 2;
export const BAD_REQUEST = 3;
export const CANCELLED = 4;

// Event kinds (the core's counter indices).
export const K = {
  SUCCESS: 0,
  FAILURE: 1,
  TIMEOUT: 2,
  SHORT_CIRCUITED: 3,
  SEMAPHORE_REJECTED: 4,
  THREAD_POOL_REJECTED: 5,
  FALLBACK_SUCCESS: 6,
  FALLBACK_FAILURE: 7,
  FALLBACK_REJECTION: 8,
  FALLBACK_MISSING: 9,
  RESPONSE_FROM_CACHE: 10,
  COLLAPSED: 11,
  BAD_REQUEST: 12,
} as const;

/** Snake-case names of the event kinds, by index (metric names). */
export const KIND_NAMES = [
  'success', 'failure', 'timeout', 'short_circuited', 'semaphore_rejected',
  'thread_pool_rejected', 'fallback_success', 'fallback_failure', 'fallback_rejection',
  'fallback_missing', 'response_from_cache', 'collapsed', 'bad_request',
] as const;

/** Snapshot slots (fw_snapshot in lib.rs). */
export const S = {
  PHASE: 0, REJECTING: 1, WOULD_ADMIT: 2, GENERATION: 3, COUNTS: 4, CUMULATIVE: 17,
  PERCENTILES: 30, MEAN: 39, LATENCIES: 40, IN_FLIGHT: 41, QUEUED: 42, MAX_CONCURRENCY: 43,
  PROBES: 44, WARMING: 45, OPENED_AT: 46, OPEN_UNTIL: 47, LATE: 48, SHADOW: 49,
  OPEN_STEP: 50, SLOTS_HELD: 51, KEY_BYTES: 52, KEY_ID: 53, SLOW: 54,
} as const;

/**
 * The exports every call goes through: the instance's, guarded (see [`lose`]), or,
 * once the instance is lost, ones that answer without it.
 */
export let w: Exports = undefined as unknown as Exports;
/** The instance's own exports. */
let raw: Exports = undefined as unknown as Exports;

/**
 * Whether the instance is lost: a call into it threw while it was busy (a trap, or the
 * caller's stack ran out inside it, which leaves its memory half-updated: found while
 * probing what a trap does: one
 * `fire()` at the stack limit left every breaker of the process refusing calls as shut
 * down, for good). From then on no call reaches it: breakers pass calls through, until
 * a new instance replaces it (see `revive`), in a microtask.
 */
export let lost = false;

/**
 * How many times an instance was replaced: what a breaker got of an earlier one (its
 * handle, the ids of its calls, leads, batches and store requests) is known by this
 * number, and never handed to a later instance.
 */
let era = 0;

/** Instances lost so far in this realm (the `instance_losses` metric). */
export let losses = 0;

/** Whether the instance is busy (a call into it threw inside it), for tests. @internal */
export function busy(): boolean {
  try {
    return raw.fw_out() === 0;
  } catch {
    return true;
  }
}

/** What runs (in a microtask, off the stack that failed) once the instance is lost. */
export const onLost: Set<() => void> = new Set();

/** What the instance threw. */
let cause: unknown;
/** Whether the `onLost` handlers are scheduled (it can fail at the stack's end: tried again). */
let told = false;

/**
 * The instance threw `e` (its memory may be half-updated): every later call gets the
 * answers of an instance that holds nothing, and the `onLost` handlers run.
 * @internal (tests call it to lose the instance at a chosen moment).
 */
export function lose(e: unknown): void {
  if (!lost) {
    lost = true;
    losses++;
    w = DEAD;
    cause = e;
  }
  tell();
}

/**
 * Schedules the `onLost` handlers, once. Called again by every breaker and collapser
 * call while lost: where the instance threw at the stack's end, scheduling can throw too.
 */
export function tell(): void {
  if (told || !lost) return;
  schedule();
  told = true;
}

/** `tell`, from a guard: false when scheduling failed (the stack's end), to be tried again. */
function tryTell(): boolean {
  try {
    schedule();
    return true;
  } catch {
    return false;
  }
}

function schedule(): void {
  queueMicrotask(() => {
    const e = cause;
    const why = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
    // Each handler settles, unprotected, what its breaker got of the lost instance.
    for (const f of onLost) {
      try {
        f();
      } catch {
        // One breaker's handler must not keep the others from theirs.
      }
    }
    const wait = replaceIn();
    console.error(`fusewire: the WebAssembly instance failed (${why}); ${wait === 0
      ? 'a new instance replaces it now: calls made before settle unprotected and uncounted, and every breaker starts over on it (closed, counts at zero; a shared breaker reads its store again)'
      : `every breaker of this realm passes calls through unprotected for ${Math.ceil(wait / 1000)} s (${RECENT} instances were lost within a minute), then a new instance replaces it`}`);
    if (wait === 0) revive();
    else later(revive, wait);
  });
}

/** Instances replaced within `REPLACE_WINDOW_MS` before one more waits (a fault on every call must not spin). */
const RECENT = 5;
const REPLACE_WINDOW_MS = 60_000;
/** When the latest instances were replaced (ms, `Date.now()`). */
const replaced: number[] = [];

/** How long until the lost instance may be replaced (0: now). */
function replaceIn(): number {
  const t = Date.now();
  while (replaced.length > 0 && t - replaced[0]! >= REPLACE_WINDOW_MS) replaced.shift();
  return replaced.length < RECENT ? 0 : replaced[0]! + REPLACE_WINDOW_MS - t;
}

/** Runs `f` after `ms` without holding the process. */
function later(f: () => void, ms: number): void {
  const timer = setTimeout(f, ms) as unknown as { unref?(): void };
  timer.unref?.();
}

/** What runs once a new instance replaced the lost one (each breaker takes a new core). */
export const onRevive: Set<() => void> = new Set();

/**
 * Replaces the lost instance with a new one of the same module, and tells `onRevive`.
 * One that cannot be made (memory) leaves every breaker passing calls through.
 */
function revive(): void {
  if (!lost || wasmModule === undefined) return;
  try {
    start(wasmModule);
  } catch (e) {
    console.error(`fusewire: no new WebAssembly instance could be made (${e instanceof Error ? e.message : String(e)}); every breaker passes calls through unprotected until the process restarts`);
    return;
  }
  replaced.push(Date.now());
  era++;
  lost = false;
  told = false;
  cause = undefined;
  doubt = undefined;
  for (const f of onRevive) {
    try {
      f();
    } catch {
      // One breaker's failure must not keep the others from their new core.
    }
  }
}

/**
 * Answers of an instance that holds nothing (see the ABI in lib.rs). Each also makes
 * sure the `onLost` handlers are scheduled: where the instance was lost at the stack's
 * end scheduling could fail, and whatever touches it next (a call settling, a timer,
 * a getter) tries again.
 */
const DEAD: Exports = {
  get memory(): WebAssembly.Memory {
    return raw.memory;
  },
  fw_abi: () => ABI,
  fw_out: () => 0,
  fw_table: () => 0,
  fw_scratch: () => 0,
  fw_msg: () => 0,
  fw_msg_len: () => 0,
  fw_seed: () => {},
  fw_live: () => 0,
  fw_memory_limit: () => {},
  fw_check: () => 0,
  fw_create: () => -1,
  fw_free: () => 0,
  fw_prepare: () => 0,
  fw_flush: () => 0,
  fw_start: () => REFUSED,
  fw_complete: () => 2, // unknown: the call settles with its own outcome, told to no one
  fw_cancel_ticket: () => 0,
  fw_poll: () => EV_NONE,
  fw_next: () => -1,
  fw_fallback: () => -1,
  fw_fallback_done: () => 0,
  fw_record: () => 0,
  fw_force: () => 0,
  fw_state: () => 0,
  fw_snapshot: () => -1,
  fw_buckets: () => 0,
  fw_io: () => 0,
  fw_io_done: () => 0,
  fw_has_io: () => 0,
  fw_flushed: () => 1,
  fw_quiet: () => 1,
  fw_cache_lookup: () => 0,
  fw_cache_settle: () => -1,
  fw_cache_offer: () => -1,
  fw_cache_cancel: () => 0,
  fw_cache_invalidate: () => 0,
  fw_cache_clear: () => 0,
  fw_cache_poll: () => 0,
  fw_col_add: () => -1,
  fw_col_poll: () => -1,
  fw_col_items: () => 0,
  fw_col_complete: () => 0,
  fw_col_fail: () => 0,
  fw_cache_scope: () => -1,
};
for (const k of Object.keys(DEAD) as (keyof Exports)[]) {
  if (k === 'memory') continue;
  const f = DEAD[k] as unknown;
  (DEAD as unknown as Record<string, unknown>)[k] = (...a: number[]) => {
    if (!told && lost) told = tryTell();
    return (f as (...a: number[]) => number)(...a);
  };
}

type Fn = (...a: number[]) => number;

/**
 * The current instance's guarded exports (`w` while it serves). A breaker calls
 * through the exports of the instance it was bound to (`_w`): once a new instance
 * replaced that one, they answer as `DEAD` does.
 */
export let served: Exports = undefined as unknown as Exports;
/** What a call into the instance threw, while it is not known whether it was busy. */
let doubt: unknown;

/**
 * The exports while in doubt: each first asks the instance whether it is busy (at the
 * stack's end asking throws, and so does the call), then goes on to `served` or `DEAD`.
 */
const DOUBT = {} as Exports;
for (const k of Object.keys(DEAD) as (keyof Exports)[]) {
  if (k === 'memory') {
    Object.defineProperty(DOUBT, k, { get: () => raw.memory, enumerable: true });
    continue;
  }
  (DOUBT as unknown as Record<string, unknown>)[k] = (...a: number[]) => {
    if (w === DOUBT) settle();
    return (w[k] as unknown as Fn)(...a);
  };
}

/**
 * Ends a doubt: the instance idle did nothing (every export works inside `with`, in
 * lib.rs, which marks it busy before its first call and idle after its last), so the
 * stack ran out on the way in, and it serves again; busy, its state may be
 * half-updated, and it is lost. Throws where asking does (the stack's end): still in
 * doubt.
 */
function settle(): void {
  if (raw.fw_out() !== 0) {
    w = served;
    doubt = undefined;
    return;
  }
  lost = true;
  losses++;
  w = DEAD;
  cause ??= doubt;
  try {
    told ||= tryTell();
  } catch {
    // At the stack's end: the next answer of `DEAD` tells.
  }
}

/**
 * After a throw out of the instance (in doubt): whether to throw it on — the instance
 * idle, or unknown yet (the stack's end: the next call, or a microtask, settles it) —
 * or to answer as `DEAD` (lost).
 */
function decide(): boolean {
  try {
    settle();
  } catch {
    try {
      queueMicrotask(() => {
        try {
          if (w === DOUBT) settle();
        } catch {
          // The next call settles it.
        }
      });
    } catch {
      // The next call settles it.
    }
    return true;
  }
  return !lost;
}

/**
 * `f` with a throw taken as the instance lost (then answered as `DEAD` answers): a
 * trap (`WebAssembly.RuntimeError`) or the stack running out (`RangeError`, Firefox's
 * `InternalError`), which can happen anywhere inside it. Thrown on instead where it
 * leaves the instance idle (see `settle`): the stack ran out on the way in (12 of 16
 * deep recursions lost it so before), or an argument converts to no number.
 */
function guard(name: keyof Exports, f: Fn, me: Record<string, unknown>, mine: number): Fn {
  const dead = DEAD[name] as unknown as Fn;
  const guarded: Fn = (a, b, c, d, e, g, i) => {
    // Not the exports every call goes to now: lost or in doubt (then `w` answers), or
    // of an instance since replaced (then nothing of it reaches the new one).
    if (w !== (me as unknown)) return (era === mine ? (w[name] as unknown as Fn) : dead)(a, b, c, d, e, g, i);
    try {
      return f(a, b, c, d, e, g, i);
    } catch (x) {
      // Nothing before the state changes can throw: not even `instanceof`, which threw
      // at the stack's end (one run in 15 left the instance busy and not lost, every
      // call refused as shut down). In doubt until the instance says whether it is
      // busy; an argument that is no number (a BigInt, a `TypeError`) leaves it idle.
      w = DOUBT;
      doubt = x;
      if (decide()) throw x;
      return dead(a, b, c, d, e, g, i);
    }
  };
  // The export's own arity (what a caller, or a test, reads of it).
  return Object.defineProperty(guarded, 'length', { value: f.length });
}

/**
 * The instance's exports, each guarded. (Written out one function each, the exports of
 * a call measured no faster: 356–358 against 352–366 ns a fire.)
 */
function guarded(x: Exports): Exports {
  const g: Record<string, unknown> = {};
  const mine = era + 1; // `start` runs before `revive` counts it (or at load, era 0)
  for (const k of Object.keys(DEAD) as (keyof Exports)[]) {
    if (k !== 'memory') g[k] = guard(k, x[k] as unknown as Fn, g, wasmModule === undefined ? 0 : mine);
  }
  g['memory'] = x.memory; // the same object for the instance's life
  return g as unknown as Exports;
}
/** The `f64` result area as last viewed (empty once memory grew: then `out()`). @internal */
export let outView: Float64Array = new Float64Array(0);
let u8: Uint8Array = new Uint8Array(0);
let f64: Float64Array = new Float64Array(0);
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Why the module could not be loaded (browsers: `ready` rejected). */
let loadError: unknown;

/** Whether the instance is ready. */
export function loaded(): boolean {
  return w !== undefined;
}

/** Records why loading failed (`ready`'s rejection). @internal */
export function failed(e: unknown): void {
  loadError = e;
}

/** The platform's background retry after a failed load (browsers). */
let retry: (() => void) | undefined;

/** Sets what a breaker made after a failed load starts: another attempt. @internal */
export function onRetry(f: () => void): void {
  retry = f;
}

/** The error for a breaker made before the instance is ready. */
export function notLoaded(): Error {
  if (loadError === undefined) {
    return new Error('fusewire: the WebAssembly module is still loading; `await ready` (or `await load()`, both exported by fusewire) before creating breakers');
  }
  const why = loadError instanceof Error ? loadError.message : String(loadError);
  // One network blip must not disable fusewire for the page's life (found by review):
  // the next attempt starts now (at most one at a time, backing off).
  retry?.();
  return new Error(`fusewire: the WebAssembly module failed to load (\`ready\` rejected): ${why}; ` +
    'trying again: `await load()` (exported by fusewire) before creating breakers', { cause: loadError });
}

/**
 * Instantiates the module synchronously (its only import is wasm-bindgen's
 * externref-table initialiser) and checks the ABI.
 */
export function instantiate(m: WebAssembly.Module): void {
  if (w !== undefined) return;
  start(m);
  wasmModule = m;
}

/** The module instantiated (kept to replace a lost instance). */
let wasmModule: WebAssembly.Module | undefined;

/** Makes a new instance of `module` the one every call goes to. */
function start(module: WebAssembly.Module): void {
  const imports: Record<string, Record<string, () => void>> = {};
  let exportsRef: Exports | undefined;
  for (const imp of WebAssembly.Module.imports(module)) {
    if (imp.kind !== 'function' || imp.name !== '__wbindgen_init_externref_table') {
      throw new Error(`fusewire: unexpected wasm import ${imp.module}.${imp.name}`);
    }
    (imports[imp.module] ??= {})[imp.name] = () => {
      const table = exportsRef?.__wbindgen_externrefs;
      if (table === undefined) return;
      // What wasm-bindgen's own glue does (0.2.130).
      table.set(0, undefined);
      table.set(1024, undefined);
      table.set(1025, null);
      table.set(1026, true);
      table.set(1027, false);
    };
  }
  const instance = new WebAssembly.Instance(module, imports as WebAssembly.Imports);
  const ex = instance.exports as unknown as Exports;
  exportsRef = ex;
  ex.__wbindgen_start?.();
  if (ex.fw_abi() !== ABI) {
    throw new Error(`fusewire: the .wasm speaks ABI ${ex.fw_abi()}, this wrapper ABI ${ABI}`);
  }
  raw = ex;
  served = guarded(ex);
  w = served;
  // Views of the memory of an instance before are views of nothing now.
  outView = new Float64Array(0);
  u8 = new Uint8Array(0);
  f64 = new Float64Array(0);
  const seed = new Uint32Array(2);
  const c = (globalThis as { crypto?: { getRandomValues?(a: Uint32Array): Uint32Array } }).crypto;
  try {
    c!.getRandomValues!(seed);
  } catch {
    // None, or refused where the module loads (workerd forbids it at global scope).
    seed[0] = (Math.random() * 2 ** 32) >>> 0;
    seed[1] = (Math.random() * 2 ** 32) >>> 0;
  }
  w.fw_seed(seed[0]!, seed[1]!);
}

function views(): void {
  const b = w.memory.buffer;
  outView = new Float64Array(b, w.fw_out(), 64);
  u8 = new Uint8Array(b);
  f64 = new Float64Array(b);
}

/**
 * The whole linear memory as `f64`s (the table area is `f64s()[(fw_table() >>> 3) + i]`;
 * valid until the next wasm call that grows memory).
 */
export function f64s(): Float64Array {
  if (f64.length === 0) views(); // as in `out`
  return f64;
}

/** The `f64` result area (valid until the next wasm call that grows memory). */
export function out(): Float64Array {
  // Growing the memory detaches the old buffer (its views turn empty): cheaper to
  // check than reading `memory.buffer` on every call.
  if (outView.length === 0) views();
  return outView;
}

/** The whole linear memory as bytes. */
export function bytes(): Uint8Array {
  // As in `out` (reading `memory.buffer` costs 12 ns here: a cache hit's key paid it).
  if (u8.length === 0) views();
  return u8;
}

/** The store request `nextIo` took (one object, overwritten by the next). */
export const io = { id: 0, expect: -1, keyAt: 0, keyLen: 0, valueAt: 0, valueLen: 0 };

/**
 * Takes the next store request of breaker `h` (of exports `x`) into `io`: returns its op (1 read,
 * 2 write; `expect` −1 for "absent", else the expected token), or 0 when none waits.
 * The key and value bytes are at `keyAt` / `valueAt` in `bytes()`.
 */
export function nextIo(x: Exports, h: number, t: number): number {
  const op = x.fw_io(h, t);
  if (op <= 0) return 0;
  const o = out();
  io.id = o[0]!;
  io.expect = o[1] === 1 ? o[2]! : -1;
  io.keyAt = o[3]!;
  io.keyLen = o[4]!;
  io.valueAt = o[5]!;
  io.valueLen = o[6]!;
  return op;
}

/**
 * Writes one string into the scratch buffer; returns its byte length, or `NO_KEY`
 * when it cannot hold it: the exports then take it as a key no cache or collapser
 * keeps (found by a security review: a 6 M-character key made `fire()` throw).
 */
export function putKey(key: string): number {
  const n = key.length;
  const max = n * 3;
  const ptr = w.fw_scratch(max);
  if (ptr === 0 && max > 0) return NO_KEY;
  const mem = bytes();
  // Written by hand, not `encodeInto`: it needs a view of the target, an allocation
  // per key (a tenth of a batched Collapser load went to it and the garbage
  // collector); and UTF-8 has no lone surrogate, for which `encodeInto` writes
  // U+FFFD, so '\ud800', '\udc00' and '\ufffd' were one key and shared a cached value
  // (found by a test). This is WTF-8: UTF-8 for every well-formed string, and a lone
  // surrogate as the three bytes UTF-8 would give its code point (ED A0..BF xx, which
  // no UTF-8 holds), so keys stay apart and as long as UTF-8 makes them.
  let at = ptr;
  for (let i = 0; i < n; i++) {
    let c = key.charCodeAt(i);
    if (c < 0x80) {
      mem[at++] = c;
      continue;
    }
    const d = key.charCodeAt(i + 1); // NaN past the end
    if (c >= 0xd800 && c <= 0xdbff && d >= 0xdc00 && d <= 0xdfff) {
      c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
      i++;
    }
    if (c < 0x800) {
      mem[at++] = 0xc0 | (c >> 6);
      mem[at++] = 0x80 | (c & 0x3f);
    } else if (c < 0x10000) {
      mem[at++] = 0xe0 | (c >> 12);
      mem[at++] = 0x80 | ((c >> 6) & 0x3f);
      mem[at++] = 0x80 | (c & 0x3f);
    } else {
      mem[at++] = 0xf0 | (c >> 18);
      mem[at++] = 0x80 | ((c >> 12) & 0x3f);
      mem[at++] = 0x80 | ((c >> 6) & 0x3f);
      mem[at++] = 0x80 | (c & 0x3f);
    }
  }
  return at - ptr;
}


/** The exports' scratch limit (`MAX_SCRATCH` in src/lib.rs). */
const MAX_SCRATCH = 16 << 20;

/** A key length no scratch buffer holds (`u32::MAX` to the exports). */
const NO_KEY = 0xffff_ffff;

/** Writes `parts` back to back into the scratch buffer; returns their byte lengths. */
export function putScratch(parts: readonly string[]): number[] {
  // Encoded straight into wasm memory (no temporary arrays: creating a breaker
  // spent a sixth of its time in TextEncoder.encode's allocations). A UTF-16 unit
  // is at most 3 UTF-8 bytes.
  let max = 0;
  for (const p of parts) max += p.length * 3;
  // Over the scratch limit: refused here, before a length past 2^32 wraps on its
  // way into wasm and the encoding writes past the buffer (found by review).
  if (max > MAX_SCRATCH) throw new RangeError('fusewire: input too large');
  const ptr = w.fw_scratch(max);
  if (lost) return parts.map(() => 0); // nothing reads it
  if (ptr === 0 && max > 0) throw new RangeError('fusewire: input too large');
  const mem = bytes();
  const lens: number[] = [];
  let at = ptr;
  for (const p of parts) {
    const n = encoder.encodeInto(p, mem.subarray(at, ptr + max)).written;
    lens.push(n);
    at += n;
  }
  return lens;
}

/** Copies raw bytes into the scratch buffer. */
export function putScratchBytes(b: Uint8Array): void {
  const ptr = w.fw_scratch(b.length);
  if (lost) return; // nothing reads it
  if (ptr === 0 && b.length > 0) throw new RangeError('fusewire: value too large');
  bytes().set(b, ptr);
}

/** The last message (UTF-8 → string). */
export function message(): string {
  const len = w.fw_msg_len();
  const ptr = w.fw_msg();
  return decoder.decode(bytes().subarray(ptr, ptr + len));
}

/** Splits an error message into its path (byte length in out[0]) and reason. */
export function configError(): { path: string; reason: string } {
  const pathLen = out()[0]!;
  const len = w.fw_msg_len();
  const ptr = w.fw_msg();
  const m = bytes();
  return {
    path: decoder.decode(m.subarray(ptr, ptr + pathLen)),
    reason: decoder.decode(m.subarray(ptr + pathLen, ptr + len)),
  };
}
