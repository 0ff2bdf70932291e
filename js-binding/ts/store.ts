/**
 * `SharedStore`: a compare-and-set key-value store on a `SharedArrayBuffer`, the
 * store the core's shared layer drives (its `poll_io` / `io_done` protocol) when
 * breakers of several `worker_threads` workers — or Web Workers — keep one state per
 * name. It is I/O, not a rule: it stores bytes and tokens the core hands it, with
 * the strict CAS rules of the core's `Rules::Script` (a write expects the key absent
 * or its current token; an answer carries the new token, a conflict the current
 * value).
 *
 * Layout: a 64-byte header of `Int32` words, then `entries` fixed-size entries found
 * by open addressing on an FNV-1a hash of the key. Entries are never emptied (the
 * core bounds the keys of a policy to `keys.max_keys + 1`); a new key that finds no
 * free entry takes over the one written longest ago within `MAX_PROBE` of its hash,
 * if that was `ttlMs` or more ago (as `RedisStore` lets keys expire), so breaker names
 * that come and go do not fill the store for good. One lock serialises operations;
 * each holds it for a copy of at most `valueBytes`. The lock word holds a ticket
 * drawn for each hold, so a waiter can tell a dead holder (a worker terminated inside
 * the lock) from a busy one: an operation waits at most `LOCK_WAIT_MS` (spinning,
 * with `Atomics.wait` back-off off the browser main thread) and then answers
 * "failed" (`FAIL_BUSY`: the core runs the key on its local breaker and backs off); a
 * hold that made no progress for `LOCK_TAKEOVER_MS` is taken over. A value it left
 * half-written fails the state's checksum and is reset by the core; one it finished
 * copying stands under the old token, and the next write replaces it. A holder that
 * was only stalled (a debugger pause, a long GC) finds its ticket gone before it
 * writes and answers "failed" instead.
 */
import { brand, optionError, describe } from './errors.js';

const MAGIC = 0x46575331; // "FWS1"
/**
 * 4: the lock word holds a ticket per hold (3: entries record when they were written;
 * 2: the lock word holds its holder's id).
 */
const VERSION = 4;
/** Longest probe from a key's hash: past it the store counts as full for that key. */
const MAX_PROBE = 4096;
const H_MAGIC = 0;
const H_VERSION = 1;
const H_LOCK = 2;
const H_ENTRIES = 3;
const H_KEY_BYTES = 4;
const H_VALUE_BYTES = 5;
const H_OWNERS = 6;
const H_TOKEN = 7;
const H_USED = 8;
const H_STRIDE = 9;
const H_WAITERS = 10;
const H_LOCK_SEQ = 11;
/** Byte offset of the header's `ttlMs` (a Float64). */
const H_TTL_MS = 48;
const HEADER = 64;
const E_TOKEN = 0;
const E_KEY_LEN = 4;
const E_VALUE_LEN = 8;
const E_HASH = 12;
/** When the entry was last written (`wallNow()`, a Float64). */
const E_WRITTEN = 16;
const E_DATA = 24;

/** Store status codes reported to the core as `Answer::Failed`. */
export const FAIL_VALUE_TOO_LARGE = 1;
export const FAIL_FULL = 2;
export const FAIL_KEY_TOO_LARGE = 3;
export const FAIL_BUSY = 4;
/** The store threw (a bug or a damaged buffer); the request is answered as failed. */
export const FAIL_INTERNAL = 5;

/** What a `SharedStore` status code in a `store` event means. */
export function sharedStoreStatus(code: number): string {
  switch (code) {
    case FAIL_VALUE_TOO_LARGE: return 'the state is larger than the store\'s valueBytes';
    case FAIL_FULL: return 'the store is full (every entry holds a key written within its ttlMs)';
    case FAIL_KEY_TOO_LARGE: return 'the key is longer than the store\'s keyBytes';
    case FAIL_BUSY: return `the store's lock stayed held for ${LOCK_WAIT_MS} ms`;
    case FAIL_INTERNAL: return 'the store failed';
    default: return `store status ${code}`;
  }
}

/** Longest wait for the lock by one operation (ms). */
const LOCK_WAIT_MS = 20;
/** A lock holder with no progress for this long (ms) died inside the lock. */
const LOCK_TAKEOVER_MS = 1000;

const clock: { now(): number } = globalThis.performance ?? Date;

/**
 * Time on a timeline every worker of the process shares (ms): `performance.timeOrigin`
 * (the process's start on the wall clock, in Node's workers too) plus the monotonic
 * clock, so a wall-clock step (NTP) or a fake `Date` in one thread does not age or
 * rejuvenate entries. Read at each call, so a test can move it.
 */
function wallNow(): number {
  const p = globalThis.performance;
  return p === undefined ? Date.now() : p.timeOrigin + p.now();
}

/** Shortest `ttlMs`: a breaker in use writes its entry far more often. */
const MIN_TTL_MS = 60_000;

/** Options of a new store. */
export interface SharedStoreOptions {
  /** Keys the store can hold (default 1024; each shared breaker uses one). */
  entries?: number | undefined;
  /** Longest key in bytes (default 288: a 64-byte `namespace` and a name of any length fit). */
  keyBytes?: number | undefined;
  /** Largest value in bytes (default 2048; a breaker's state is ≈ 100–400 bytes). */
  valueBytes?: number | undefined;
  /**
   * An entry not written for this long (ms; default 86 400 000, a day, as `RedisStore`'s
   * `ttlMs`) may be given to a new key when no entry is free.
   */
  ttlMs?: number | undefined;
}

/** @internal What an operation answered (the value, if any, is in `store.value`). */
export interface StoreAnswer {
  /** 0 found, 1 not found, 2 written, 3 conflict, 4 failed (the core's `io_done` kinds). */
  kind: number;
  /** Token (found / written / conflict with a current value), else -1. */
  token: number;
  /** Bytes of `store.value` that hold the value. */
  len: number;
  /** Conflict: the key is absent; failed: the status code. */
  flag: number;
}

function fnv1a(b: Uint8Array, from: number, len: number): number {
  let h = 0x811c9dc5;
  for (let i = from; i < from + len; i++) {
    h ^= b[i]!;
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

function positiveInt(name: string, v: unknown, dflt: number, max: number): number {
  if (v === undefined) return dflt;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > max) {
    throw optionError(`options.${name}`, `must be an integer in 1..=${max}, got ${describe(v)}`);
  }
  return v;
}

const OPTION_KEYS = ['entries', 'keyBytes', 'valueBytes', 'ttlMs'];

/** Whether `v` is a SharedArrayBuffer (of this realm or another: a worker's, a vm context's). */
function isSharedArrayBuffer(v: unknown): v is SharedArrayBuffer {
  return typeof v === 'object' && v !== null && Object.prototype.toString.call(v) === '[object SharedArrayBuffer]';
}

/** What a wrong argument in place of a SharedArrayBuffer is (error messages). */
function describeBuffer(v: unknown): string {
  if (v instanceof SharedStore) return 'a SharedStore (pass its `.buffer`)';
  if (Object.prototype.toString.call(v) === '[object ArrayBuffer]') return 'an ArrayBuffer (not shared memory)';
  if (ArrayBuffer.isView(v)) return `a ${v.constructor.name} (pass the SharedArrayBuffer itself)`;
  return describe(v);
}

/** A CAS store on a `SharedArrayBuffer`; pass `store.buffer` to workers and `SharedStore.from(buffer)` there. */
export class SharedStore {
  /** The shared memory: send it to workers (`workerData`, `postMessage`). */
  readonly buffer: SharedArrayBuffer;
  /** @internal */ readonly value: Uint8Array;
  private readonly i32: Int32Array;
  private readonly u8: Uint8Array;
  private readonly dv: DataView;
  private readonly entries: number;
  private readonly keyBytes: number;
  private readonly valueBytes: number;
  private readonly stride: number;
  private readonly ttlMs: number;
  /** Set by `find` when no entry is free: the entry to take over, or -1. */
  private reclaim = -1;
  private canWait = true;
  /** The lock word of this view's hold (its ticket), 0 when it holds none. */
  private ticket = 0;
  /** The hold (ticket) last seen while waiting, and since when (ms). */
  private heldBy = 0;
  private heldSince = 0;
  private seenAt = 0;
  private readonly answer: StoreAnswer = { kind: 0, token: -1, len: 0, flag: 0 };

  /** A new store, or (given a buffer) a view of an existing one. */
  constructor(options?: SharedStoreOptions | SharedArrayBuffer) {
    if (typeof SharedArrayBuffer === 'undefined') {
      throw new TypeError('fusewire: SharedArrayBuffer is not available (browsers need cross-origin isolation)');
    }
    if (isSharedArrayBuffer(options)) {
      this.buffer = options;
      if (options.byteLength < HEADER) throw new TypeError('fusewire: the buffer is not a SharedStore');
      this.i32 = new Int32Array(options, 0, HEADER / 4);
      if (Atomics.load(this.i32, H_MAGIC) !== MAGIC) {
        throw new TypeError('fusewire: the buffer is not a SharedStore');
      }
      if (Atomics.load(this.i32, H_VERSION) !== VERSION) {
        throw new TypeError(`fusewire: SharedStore version ${Atomics.load(this.i32, H_VERSION)}, expected ${VERSION}`);
      }
      this.entries = Atomics.load(this.i32, H_ENTRIES);
      this.keyBytes = Atomics.load(this.i32, H_KEY_BYTES);
      this.valueBytes = Atomics.load(this.i32, H_VALUE_BYTES);
      this.stride = Atomics.load(this.i32, H_STRIDE);
      this.ttlMs = new DataView(options).getFloat64(H_TTL_MS, true);
      if (!(this.ttlMs >= MIN_TTL_MS && this.entries >= 1 && this.keyBytes >= 1 && this.valueBytes >= 1 &&
          this.stride >= E_DATA + this.keyBytes + this.valueBytes)) {
        throw new TypeError('fusewire: the SharedStore header is damaged');
      }
      if (options.byteLength < HEADER + this.entries * this.stride) {
        throw new TypeError('fusewire: the SharedStore buffer is truncated');
      }
    } else {
      if (options !== undefined && (typeof options !== 'object' || options === null)) {
        throw optionError('options', `must be an object or a SharedArrayBuffer, got ${describe(options)}`);
      }
      if (options !== undefined && (options instanceof SharedStore || ArrayBuffer.isView(options) ||
          Object.prototype.toString.call(options) === '[object ArrayBuffer]')) {
        throw optionError('options', `must be an options object or a SharedArrayBuffer (another store's \`store.buffer\`), got ${describeBuffer(options)}`);
      }
      const o = options ?? {};
      for (const key of Object.keys(o)) {
        if (!OPTION_KEYS.includes(key)) {
          throw optionError(`options.${key}`, `not a SharedStore option (they are ${OPTION_KEYS.join(', ')})`);
        }
      }
      this.entries = positiveInt('entries', o.entries, 1024, 1 << 20);
      // A store key is `<namespace>/v3/<name>/<slot>`: 64 + 4 + 200 (longer names
      // are hashed down to it) + 1 + a slot number.
      this.keyBytes = positiveInt('keyBytes', o.keyBytes, 288, 4096);
      this.valueBytes = positiveInt('valueBytes', o.valueBytes, 2048, 1 << 20);
      this.ttlMs = o.ttlMs === undefined ? 86_400_000 : o.ttlMs;
      if (typeof this.ttlMs !== 'number' || !Number.isInteger(this.ttlMs) || this.ttlMs < MIN_TTL_MS || this.ttlMs > 31_536_000_000) {
        throw optionError('options.ttlMs', `must be an integer in ${MIN_TTL_MS}..=31536000000 (ms), got ${describe(o.ttlMs)}`);
      }
      this.stride = (E_DATA + this.keyBytes + this.valueBytes + 7) & ~7;
      this.buffer = new SharedArrayBuffer(HEADER + this.entries * this.stride);
      this.i32 = new Int32Array(this.buffer, 0, HEADER / 4);
      this.i32[H_VERSION] = VERSION;
      this.i32[H_ENTRIES] = this.entries;
      this.i32[H_KEY_BYTES] = this.keyBytes;
      this.i32[H_VALUE_BYTES] = this.valueBytes;
      this.i32[H_STRIDE] = this.stride;
      new DataView(this.buffer).setFloat64(H_TTL_MS, this.ttlMs, true);
      Atomics.store(this.i32, H_MAGIC, MAGIC);
    }
    this.u8 = new Uint8Array(this.buffer);
    this.dv = new DataView(this.buffer);
    this.value = new Uint8Array(this.valueBytes);
  }

  /** A view of the store in `buffer` (made by `new SharedStore()` in any worker). */
  static from(buffer: SharedArrayBuffer): SharedStore {
    // Anything else would make a new, private store: workers that never share state.
    if (!isSharedArrayBuffer(buffer)) {
      throw new TypeError('fusewire: SharedStore.from(buffer): buffer must be the SharedArrayBuffer of a SharedStore ' +
        `(pass \`store.buffer\`, e.g. through workerData), got ${describeBuffer(buffer)}`);
    }
    return new SharedStore(buffer);
  }

  /** Keys stored. */
  get size(): number {
    return Atomics.load(this.i32, H_USED);
  }

  /** Keys the store can hold. */
  get capacity(): number {
    return this.entries;
  }

  /** @internal Its `ttlMs`: breakers on it keep `shared.lease_ttl_ms` below half of it. */
  get _ttlMs(): number {
    return this.ttlMs;
  }

  /** @internal A new owner id (unique among the store's users). */
  nextOwner(): number {
    return Atomics.add(this.i32, H_OWNERS, 1) + 1;
  }

  /** Takes the lock; false when it stayed held for `LOCK_WAIT_MS` (see the module doc). */
  private lock(): boolean {
    const i32 = this.i32;
    // Each hold writes a ticket of its own into the lock word (never 0), so a waiter
    // that sees one ticket there for LOCK_TAKEOVER_MS has seen one hold make no
    // progress (found by review: the holder's id and a sequence bumped after taking
    // the lock let a sighting from an earlier hold match a new one, and two threads
    // in at once).
    let me = (Atomics.add(i32, H_LOCK_SEQ, 1) + 1) | 0;
    if (me === 0) me = (Atomics.add(i32, H_LOCK_SEQ, 1) + 1) | 0;
    let spins = 0;
    let start = -1;
    for (;;) {
      const cur = Atomics.compareExchange(i32, H_LOCK, 0, me);
      if (cur === 0) break;
      if (++spins < 64) continue;
      const t = clock.now();
      // A sighting not renewed for 10 minutes is forgotten: the 32-bit tickets wrap,
      // and one seen hours ago must not match a new hold (found by review). (A wrap
      // within 10 minutes takes 7 million holds a second; a waiter backing off comes
      // back well within them.)
      const renewed = t - this.seenAt <= 600_000;
      this.seenAt = t;
      if (cur !== this.heldBy || !renewed) {
        this.heldBy = cur;
        this.heldSince = t;
      } else if (t - this.heldSince > LOCK_TAKEOVER_MS) {
        // No progress for a second: the holder died inside the lock.
        if (Atomics.compareExchange(i32, H_LOCK, cur, me) === cur) break;
        continue;
      }
      if (start < 0) start = t;
      else if (t - start > LOCK_WAIT_MS) return false;
      if (!this.canWait) continue;
      Atomics.add(i32, H_WAITERS, 1);
      try {
        Atomics.wait(i32, H_LOCK, cur, 1);
      } catch {
        this.canWait = false; // a browser main thread may not wait: spin
      } finally {
        Atomics.sub(i32, H_WAITERS, 1);
      }
    }
    this.ticket = me;
    return true;
  }

  /**
   * Whether this view still holds the lock: a holder that stalled past
   * LOCK_TAKEOVER_MS (a debugger pause, a long GC) was presumed dead and its lock
   * taken over; it must not write then (it answers busy, and the core retries).
   */
  private holds(): boolean {
    return Atomics.load(this.i32, H_LOCK) === this.ticket;
  }

  /** Answers "failed: the lock was busy" (the core runs the key on its own breaker and retries). */
  private busy(a: StoreAnswer): StoreAnswer {
    a.kind = 4;
    a.flag = FAIL_BUSY;
    return a;
  }

  private unlock(): void {
    // Not ours any more if it was taken over (we were presumed dead): leave it.
    Atomics.compareExchange(this.i32, H_LOCK, this.ticket, 0);
    this.ticket = 0;
    if (Atomics.load(this.i32, H_WAITERS) > 0) Atomics.notify(this.i32, H_LOCK, 1);
  }

  /**
   * Entry offset of `key`, or -(offset of the first free entry) - 1, or -Infinity when
   * full: no free entry within `MAX_PROBE` of the key's hash (entries are never emptied,
   * so a key is never farther; found by review: a full store scanned all its entries
   * under the lock for every missing key, 23 ms at a million). When full, `reclaim`
   * is the entry of that run written longest ago, if `ttlMs` or more ago (the clock
   * is read only then).
   */
  private find(key: Uint8Array, kFrom: number, kLen: number, hash: number): number {
    const n = this.entries;
    const u8 = this.u8;
    const dv = this.dv;
    let i = hash % n;
    const probes = Math.min(n, MAX_PROBE);
    let oldest = Infinity;
    this.reclaim = -1;
    for (let probe = 0; probe < probes; probe++) {
      const at = HEADER + i * this.stride;
      if (dv.getUint32(at + E_TOKEN, true) === 0) return -at - 1;
      const written = dv.getFloat64(at + E_WRITTEN, true);
      if (written < oldest) {
        oldest = written;
        this.reclaim = at;
      }
      if (dv.getUint32(at + E_HASH, true) === hash && dv.getUint32(at + E_KEY_LEN, true) === kLen) {
        let same = true;
        const d = at + E_DATA;
        for (let j = 0; j < kLen; j++) {
          if (u8[d + j] !== key[kFrom + j]) {
            same = false;
            break;
          }
        }
        if (same) return at;
      }
      i = i + 1 === n ? 0 : i + 1;
    }
    if (oldest > wallNow() - this.ttlMs) this.reclaim = -1;
    return -Infinity;
  }

  /** Copies an entry's value into `value`; a damaged length gives no bytes (the core resets undecodable state). */
  private copyOut(at: number): number {
    const len = this.dv.getUint32(at + E_VALUE_LEN, true);
    if (len > this.valueBytes) return 0;
    const from = at + E_DATA + this.keyBytes;
    this.value.set(this.u8.subarray(from, from + len));
    return len;
  }

  private nextToken(): number {
    const t = (Atomics.load(this.i32, H_TOKEN) + 1) >>> 0 || 1;
    Atomics.store(this.i32, H_TOKEN, t | 0);
    return t;
  }

  /**
   * @internal One request of the core: `op` 1 read, 2 write; `expect` −1 for "absent"
   * or the token the write expects; the key and the value are byte ranges of `mem`.
   */
  exec(op: number, mem: Uint8Array, kFrom: number, kLen: number, expect: number,
    vFrom: number, vLen: number): StoreAnswer {
    const a = this.answer;
    a.token = -1;
    a.len = 0;
    a.flag = 0;
    if (kLen > this.keyBytes) {
      a.kind = 4;
      a.flag = FAIL_KEY_TOO_LARGE;
      return a;
    }
    if (op === 2 && vLen > this.valueBytes) {
      a.kind = 4;
      a.flag = FAIL_VALUE_TOO_LARGE;
      return a;
    }
    const hash = fnv1a(mem, kFrom, kLen);
    if (!this.lock()) return this.busy(a);
    try {
      const at = this.find(mem, kFrom, kLen, hash);
      if (op === 1) {
        if (at >= 0) {
          a.kind = 0;
          a.token = this.dv.getUint32(at + E_TOKEN, true);
          a.len = this.copyOut(at);
        } else {
          a.kind = 1;
        }
        return a;
      }
      // Write under the strict CAS rules.
      if (at >= 0) {
        const cur = this.dv.getUint32(at + E_TOKEN, true);
        if (expect < 0 || cur !== expect) {
          a.kind = 3;
          a.token = cur;
          a.len = this.copyOut(at);
          return a;
        }
        // Everything that may allocate (and so pause for a collection) comes before
        // the check: past it the writer only copies (found by review: a pause after
        // the check let a takeover's write be overwritten).
        const value = mem.subarray(vFrom, vFrom + vLen);
        const written = wallNow();
        if (!this.holds()) return this.busy(a);
        this.u8.set(value, at + E_DATA + this.keyBytes);
        this.dv.setUint32(at + E_VALUE_LEN, vLen, true);
        this.dv.setFloat64(at + E_WRITTEN, written, true);
        const t = this.nextToken();
        this.dv.setUint32(at + E_TOKEN, t, true);
        a.kind = 2;
        a.token = t;
        return a;
      }
      if (expect >= 0) {
        a.kind = 3;
        a.flag = 1; // absent now
        return a;
      }
      // No free entry: take over the one idle longest (its key, if still used, finds
      // itself absent and is written again where there is room), or answer full.
      const taken = at === -Infinity ? this.reclaim : -at - 1;
      if (taken < 0) {
        a.kind = 4;
        a.flag = FAIL_FULL;
        return a;
      }
      const e = taken;
      const key = mem.subarray(kFrom, kFrom + kLen);
      const value = mem.subarray(vFrom, vFrom + vLen);
      const written = wallNow();
      if (!this.holds()) return this.busy(a);
      this.u8.set(key, e + E_DATA);
      this.dv.setUint32(e + E_KEY_LEN, kLen, true);
      this.dv.setUint32(e + E_HASH, hash, true);
      this.u8.set(value, e + E_DATA + this.keyBytes);
      this.dv.setUint32(e + E_VALUE_LEN, vLen, true);
      this.dv.setFloat64(e + E_WRITTEN, written, true);
      const t = this.nextToken();
      this.dv.setUint32(e + E_TOKEN, t, true);
      if (at !== -Infinity) Atomics.add(this.i32, H_USED, 1);
      a.kind = 2;
      a.token = t;
      return a;
    } finally {
      this.unlock();
    }
  }
}

brand(SharedStore, 'SharedStore');
