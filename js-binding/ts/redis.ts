/**
 * `fusewire/redis`: one breaker per name for a whole fleet — every process (on any
 * machine) whose breaker of that name uses a `RedisStore` on the same Redis shares
 * its state, window and probe leases.
 *
 * ```js
 * import Redis from 'ioredis';
 * import { CircuitBreaker } from 'fusewire';
 * import { RedisStore } from 'fusewire/redis';
 * const store = new RedisStore({ client: new Redis(process.env.REDIS_URL) });
 * const breaker = new CircuitBreaker(callUpstream, { name: 'upstream', shared: { store } });
 * ```
 *
 * It is I/O only: the core's shared layer runs in async mode (admission never waits
 * on Redis) and says what to read and what to write; this module performs it:
 *
 * - **Layout.** The core's store key (`<namespace>/v3/<policy>/<slot>`, namespace
 *   `shared.namespace`, default `fusewire`), behind `prefix`, is one Redis hash:
 *   `t` the CAS token (a decimal integer below 2^53), `v` the core's encoded state
 *   (versioned, checksummed). `PEXPIRE ttlMs` on every write, so abandoned breakers
 *   expire. Owner ids: `INCR <prefix>fusewire/owners` once per store.
 * - **Reads**: `HMGET key t v` (one round trip, no script).
 * - **Writes**: one Lua script (`EVALSHA`, `EVAL` when Redis answers `NOSCRIPT`):
 *   compare-and-set on the token; returns the new token on success, the current
 *   value and token on a conflict (so a retry needs no read), and refuses a write
 *   that reaches Redis after its deadline (the per-op timeout less the clock's
 *   uncertainty and a return trip, on Redis's clock), so a write this process
 *   already counted as failed rarely lands; one that does (its reply slower than the
 *   best seen) is recognised by its receipt.
 * - **Cluster**: every command touches one key (the script declares it in `KEYS`),
 *   so keys spread over slots and braces in a breaker's name are harmless.
 * - **Faults**: an op not answered within `timeoutMs` fails; the core then backs
 *   off (up to 8 × `sync_ms`), keeps the outcomes for the next write, and past
 *   `stale_ms` decides on the local breaker; the breaker emits `store` events and
 *   `store.stats` counts. A key holding foreign or corrupt data (another type, a bad
 *   token, undecodable bytes) reads as an unreadable state, which the core reports
 *   and replaces with a fresh one.
 *
 * The Redis client is the caller's (`ioredis`, a peer dependency: `Redis` or
 * `Cluster`): `close()` stops this store's timers; quit the client yourself.
 */
import { createHash } from 'node:crypto';

import { AsyncStore, FAIL_REFUSED, type AsyncDone } from './async-store.js';
import type { CoreSharedConfig } from './config.js';
import { describe, optionError } from './errors.js';
import { performance } from './monotonic.js';

/** Status codes a failed Redis op reports to the core (`store` events' `status`). */
export const FAIL_TIMEOUT = 10;
export const FAIL_ERROR = 11;
export const FAIL_LATE = FAIL_REFUSED;
export const FAIL_REPLY = 13;
export const FAIL_CLOSED = 14;

/** The part of an ioredis client (`Redis` or `Cluster`) the store uses. */
export interface RedisClientLike {
  /** Sends a command; bulk replies as Buffers (`EVALSHA`, `EVAL`, `HMGET`). */
  callBuffer(command: string, ...args: (string | Buffer | number)[]): Promise<unknown>;
  /** `INCR` (owner ids). */
  incr(key: string): Promise<unknown>;
}

/** Options of a `RedisStore`. */
export interface RedisStoreOptions {
  /** An ioredis client (`new Redis(…)` or `new Redis.Cluster(…)`); you own its connection. */
  client: RedisClientLike;
  /** Prefix of every Redis key of this store (default `''`; the core's `shared.namespace` comes after it). */
  prefix?: string | undefined;
  /** Expiry of a breaker's key, refreshed on every write (ms, default 86 400 000 = one day). */
  ttlMs?: number | undefined;
  /** Per-op timeout (ms, default 500): an op not answered by then counts as failed. */
  timeoutMs?: number | undefined;
}

/** Counters of a `RedisStore` since it was created. */
export interface RedisStoreStats {
  /** Reads sent (`HMGET`). */
  reads: number;
  /** Writes sent (the CAS script). */
  writes: number;
  /** Writes that landed. */
  written: number;
  /** Writes that found another token (lost a CAS race). */
  conflicts: number;
  /** Ops that failed (errors, timeouts, writes refused as late): each is one failed sync. */
  failures: number;
  /** Ops not answered within `timeoutMs`. */
  timeouts: number;
  /** Answers that came after their op had timed out (ignored). */
  late: number;
  /** Writes Redis refused because they arrived after their deadline. */
  refused: number;
  /** `NOSCRIPT` answers (the script was loaded again with `EVAL`). */
  noscript: number;
  /** Keys found holding foreign data (another type or a bad token). */
  foreign: number;
  /** Ops in flight now. */
  pending: number;
}

/**
 * KEYS[1] the state key. ARGV[1] the expected token ('' = absent), ARGV[2] the new
 * value, ARGV[3] the TTL (ms), ARGV[4] the deadline (Redis ms; 0 = none), ARGV[5]
 * the first token of a new key. Replies: {0, now, token} written; {1, now, token,
 * value} conflict (token 0, value '': the key holds foreign data); {2, now} conflict,
 * the key is absent; {3, now} refused, past the deadline.
 */
export const CAS_SCRIPT = `
if redis.replicate_commands then pcall(redis.replicate_commands) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dl = tonumber(ARGV[4]) or 0
if dl > 0 and now > dl then return {3, now} end
local k = KEYS[1]
local ty = redis.call('TYPE', k)['ok']
local tok = false
local cur = ''
if ty == 'hash' then
  local r = redis.call('HMGET', k, 't', 'v')
  tok = r[1]
  cur = r[2] or ''
  if (not tok) and (not r[2]) then
    -- Neither field: absent, as the read (HMGET) found it.
    tok = false
  elseif (not tok) or string.len(tok) > 16 or not string.match(tok, '^[1-9][0-9]*$')
      or tonumber(tok) > 9007199254740991 then
    tok = '0'
    cur = ''
  end
elseif ty ~= 'none' then
  tok = '0'
end
if not tok then
  if ARGV[1] ~= '' then return {2, now} end
  redis.call('DEL', k)
  redis.call('HSET', k, 't', ARGV[5], 'v', ARGV[2])
  redis.call('PEXPIRE', k, ARGV[3])
  return {0, now, tonumber(ARGV[5])}
end
if tok ~= ARGV[1] then return {1, now, tonumber(tok), cur} end
local nt
if tok == '0' then
  redis.call('DEL', k)
  redis.call('HSET', k, 't', ARGV[5], 'v', ARGV[2])
  nt = tonumber(ARGV[5])
else
  nt = redis.call('HINCRBY', k, 't', 1)
  redis.call('HSET', k, 'v', ARGV[2])
end
redis.call('PEXPIRE', k, ARGV[3])
return {0, now, nt}
`;

/** SHA-1 of `CAS_SCRIPT` (what `EVALSHA` names). */
export const CAS_SHA = createHash('sha1').update(CAS_SCRIPT).digest('hex');
const MAX_TOKEN = Number.MAX_SAFE_INTEGER;
const EMPTY = new Uint8Array(0);

function int(name: string, v: unknown, dflt: number, min: number, max: number): number {
  if (v === undefined) return dflt;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw optionError(`options.${name}`, `must be an integer in ${min}..=${max}, got ${describe(v)}`);
  }
  return v;
}

/** A decimal token from Redis, or 0 when it is not one this store writes. */
function token(b: unknown): number {
  if (b === null || b === undefined) return 0;
  const s = typeof b === 'string' ? b : Buffer.isBuffer(b) ? b.toString('latin1') : '';
  if (!/^[1-9][0-9]{0,15}$/.test(s)) return 0;
  const n = Number(s);
  return n <= MAX_TOKEN ? n : 0;
}

function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

interface Op {
  done: AsyncDone;
  timer: ReturnType<typeof setTimeout> | undefined;
  settled: boolean;
}

/** The options `RedisStore` takes (any other key is a TypeError: a misspelt one would be ignored). */
const REDIS_OPTION_KEYS = ['client', 'prefix', 'ttlMs', 'timeoutMs'];

/** Breaker state kept in Redis; pass it as `options.shared.store` (see the module doc). */
export class RedisStore extends AsyncStore {
  /** The client this store sends its commands through. */
  readonly client: RedisClientLike;
  /** Resolves once the owner id is known (or Redis did not answer within `timeoutMs`); never rejects. */
  readonly ready: Promise<void>;
  /** The last Redis error, if any. */
  lastError: string | undefined = undefined;
  private readonly _prefix: string;
  private readonly _ttl: string;
  private readonly _timeoutMs: number;
  private _owner = 0;
  private _closed = false;
  private _closing: Promise<void> | undefined;
  private readonly _pending = new Set<Op>();
  private readonly _stats: Omit<RedisStoreStats, 'pending'> = {
    reads: 0, writes: 0, written: 0, conflicts: 0, failures: 0, timeouts: 0, late: 0,
    refused: 0, noscript: 0, foreign: 0,
  };
  // Redis's clock: its offset from this process's monotonic clock (`performance.now()`,
  // which wall-clock steps do not move: found by a review of clock steps, a step of
  // the wall clock made Redis refuse this process's writes as late), in ms, and how
  // far off it may be.
  private _offset = 0;
  private _offsetErr = Infinity;
  private _offsetAt = 0;

  constructor(options: RedisStoreOptions) {
    super();
    if (typeof options !== 'object' || options === null) {
      throw optionError('options', `must be an object ({ client, prefix, ttlMs, timeoutMs }), got ${describe(options)}`);
    }
    const c = options.client as unknown as Record<string, unknown> | undefined;
    if (typeof c !== 'object' || c === null) {
      throw optionError('options.client', `must be an ioredis client (Redis or Cluster), got ${describe(c)}`);
    }
    for (const m of ['callBuffer', 'incr']) {
      if (typeof c[m] !== 'function') {
        throw optionError('options.client', `must be an ioredis client (Redis or Cluster): it has no ${m}()`);
      }
    }
    // ioredis sends commands flagged read-only (HMGET) to replicas under a Cluster's
    // `scaleReads`, on another connection than the writes: a read could miss a write
    // that landed, take its outcomes for lost and send them again (found by review).
    const scaleReads = (c.options as { scaleReads?: unknown } | undefined)?.scaleReads;
    if (scaleReads !== undefined && scaleReads !== 'master') {
      throw optionError('options.client', `must read from the masters (scaleReads: 'master', the default), got scaleReads ${describe(scaleReads)}: replicas lag the writes`);
    }
    for (const key of Object.keys(options)) {
      if (!REDIS_OPTION_KEYS.includes(key)) {
        throw optionError(`options.${key}`, `not a RedisStore option (they are ${REDIS_OPTION_KEYS.join(', ')})`);
      }
    }
    this.client = options.client;
    const prefix = options.prefix ?? '';
    if (typeof prefix !== 'string' || prefix.length > 256) {
      throw optionError('options.prefix', `must be a string of at most 256 characters, got ${describe(prefix)}`);
    }
    this._prefix = prefix;
    this._ttl = String(int('ttlMs', options.ttlMs, 86_400_000, 1_000, 31_536_000_000));
    this._timeoutMs = int('timeoutMs', options.timeoutMs, 500, 1, 60_000);
    this.ready = new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, this._timeoutMs);
      timer.unref?.();
      Promise.resolve()
        .then(() => this.client.incr(`${prefix}fusewire/owners`))
        .then((n) => {
          const v = typeof n === 'number' ? n : Number(n);
          if (Number.isSafeInteger(v) && v > 0) this._owner = (v % 0xffff_ffff) + 1;
        }, (e: unknown) => {
          this.lastError = errorText(e);
        })
        .finally(() => {
          clearTimeout(timer);
          resolve();
        });
    });
  }

  /** Counters since the store was created (each failure is one failed sync; breakers also emit `store`). */
  get stats(): RedisStoreStats {
    return { ...this._stats, pending: this._pending.size };
  }

  /**
   * @internal Its `ttlMs`: breakers on it keep `shared.lease_ttl_ms` below half of it,
   * as on a `SharedStore` (found by review: `ttlMs: 2000` was taken beside a 30 s
   * lease, and a quiet fleet's key, open breaker and leases with it, expired).
   */
  get _ttlMs(): number {
    return Number(this._ttl);
  }

  /**
   * Stops the store: ops in flight fail, later ones at once. Breakers shut down
   * before keep it open until their last flush landed (a write that met another
   * process's write is merged and retried; at most 5 s): await the result before
   * quitting the client. The client stays open (it is yours).
   */
  close(): Promise<void> {
    if (this._closing !== undefined) return this._closing;
    const stop = (): void => {
      this._closed = true;
      for (const op of [...this._pending]) this._settle(op, 4, -1, undefined, FAIL_CLOSED);
    };
    if (this._busy) {
      this._closing = this._whenIdle().then(stop);
    } else {
      stop();
      this._closing = Promise.resolve();
    }
    return this._closing;
  }

  /**
   * @internal A fleet shares one Redis key per breaker: healthy outcomes are merged
   * once per sync interval (1 s), not every 100 ms as across worker threads, so a
   * 100-process fleet writes ~100 times a second, not ~1000 times, mostly in
   * conflict. Errors, probes and hot keys are still written at once.
   */
  override _defaults(): CoreSharedConfig {
    return { flush_ms: 1000 };
  }

  /** @internal Redis's own words for a failed op (`WRONGPASS …`, `NOPERM …`), for `store` events. */
  override _describe(status: number): string | undefined {
    switch (status) {
      case FAIL_TIMEOUT: {
        // ioredis's state says why (found by review: a process that never reached
        // Redis only ever said "no reply", never that it could not connect).
        const state = (this.client as { status?: unknown }).status;
        const why = state === 'connecting' || state === 'reconnecting' ? `; the client is ${state}`
          : state === 'close' || state === 'end' ? '; the client is closed' : '';
        return `no reply within ${this._timeoutMs} ms${why}`;
      }
      case FAIL_ERROR: return this.lastError;
      case FAIL_LATE: return 'refused: the write reached Redis after its deadline';
      case FAIL_REPLY: return 'unexpected reply';
      case FAIL_CLOSED: return 'store closed';
      default: return undefined;
    }
  }

  /** @internal The id from Redis (`INCR`), or a random one when Redis did not answer yet. */
  nextOwner(): number {
    return this._owner !== 0 ? this._owner : (Math.floor(Math.random() * 0xffff_fffe) + 1);
  }

  /** @internal */
  _send(op: number, key: string, value: Uint8Array | undefined, expect: number, done: AsyncDone): void {
    const o: Op = { done, timer: undefined, settled: false };
    if (this._closed) {
      this._stats.failures++;
      queueMicrotask(() => done(4, -1, undefined, FAIL_CLOSED));
      return;
    }
    this._pending.add(o);
    o.timer = setTimeout(() => {
      // Node runs due timers before it reads sockets: after an event-loop stall the
      // reply may be waiting already. Give it one turn (setImmediate runs after the
      // poll phase) before the op counts as timed out.
      setImmediate(() => {
        if (o.settled) return;
        this._stats.timeouts++;
        this._settle(o, 4, -1, undefined, FAIL_TIMEOUT);
      });
    }, this._timeoutMs);
    o.timer.unref?.();
    const k = this._prefix + key;
    if (op === 2) this._write(o, k, value ?? EMPTY, expect);
    else this._read(o, k);
  }

  private _settle(o: Op, kind: number, tok: number, value: Uint8Array | undefined, flag: number): void {
    if (o.settled) {
      this._stats.late++;
      return;
    }
    o.settled = true;
    if (o.timer !== undefined) clearTimeout(o.timer);
    o.timer = undefined;
    this._pending.delete(o);
    if (kind === 4) this._stats.failures++;
    o.done(kind, tok, value, flag);
  }

  private _fail(o: Op, e: unknown): void {
    if (!o.settled) {
      this.lastError = errorText(e);
      this._lastErrorAt = performance.now();
    }
    this._settle(o, 4, -1, undefined, FAIL_ERROR);
  }

  /** When `lastError` was an op's answer (`performance.now()`). */
  private _lastErrorAt = -Infinity;

  /**
   * @internal For a `stale` event: the error Redis answered with in the last minute,
   * if any — Redis may be answering, refusing writes (found by review: OOM and
   * READONLY read as "no answer" after their first `failed` event).
   */
  override _describeStale(): string | undefined {
    const age = performance.now() - this._lastErrorAt;
    if (this.lastError === undefined || !(age < 60_000)) return undefined;
    return `Redis's last answer, ${Math.round(age / 1000)} s ago: ${this.lastError}`;
  }

  private _read(o: Op, k: string): void {
    this._stats.reads++;
    let p: Promise<unknown>;
    try {
      p = this.client.callBuffer('hmget', k, 't', 'v');
    } catch (e) {
      queueMicrotask(() => this._fail(o, e));
      return;
    }
    p.then((r) => {
      if (!Array.isArray(r) || r.length !== 2) return this._settle(o, 4, -1, undefined, FAIL_REPLY);
      const [t, v] = r as [unknown, unknown];
      if (t == null && v == null) return this._settle(o, 1, -1, undefined, 0);
      const tok = token(t);
      if (tok === 0) {
        this._stats.foreign++;
        return this._settle(o, 0, 0, EMPTY, 0);
      }
      this._settle(o, 0, tok, v instanceof Uint8Array ? v : EMPTY, 0);
    }, (e: unknown) => {
      // Another type at the key: foreign data, which the core resets.
      if (/WRONGTYPE/.test(errorText(e))) {
        this._stats.foreign++;
        return this._settle(o, 0, 0, EMPTY, 0);
      }
      this._fail(o, e);
    });
  }

  private _write(o: Op, k: string, value: Uint8Array, expect: number): void {
    this._stats.writes++;
    const sent = performance.now();
    // A deadline on Redis's clock once it is known: the timeout less the clock's
    // uncertainty and a return trip (each about half the best round trip seen), so a
    // write that lands can answer before this process gives up on it. (Half the
    // timeout, as before, refused writes on a jittery 200–300 ms link well inside
    // `timeoutMs`; a reply later still is caught by the write's receipt.)
    const margin = 2 * this._offsetErr;
    const deadline = margin < this._timeoutMs / 2
      ? Math.floor(sent + this._offset + this._timeoutMs - margin)
      : 0;
    const first = Math.floor(Math.random() * 2 ** 52) + 1;
    const args: (string | Buffer)[] = [
      k, expect < 0 ? '' : String(expect), Buffer.from(value.buffer, value.byteOffset, value.length),
      this._ttl, String(deadline), String(first),
    ];
    const c = this.client;
    let p: Promise<unknown>;
    try {
      // EVALSHA; a Redis that does not know the script yet (new, restarted, another
      // cluster node) answers NOSCRIPT, and EVAL loads it. Command names in lower
      // case: ioredis before 5.9 looked them up case-sensitively, and for 'EVALSHA'
      // found no key, so added no `keyPrefix` and routed no Cluster slot (found by
      // review: two apps kept apart by keyPrefix shared one breaker).
      p = c.callBuffer('evalsha', CAS_SHA, 1, ...args).catch((e: unknown) => {
        if (!/NOSCRIPT/.test(errorText(e))) throw e;
        this._stats.noscript++;
        return c.callBuffer('eval', CAS_SCRIPT, 1, ...args);
      });
    } catch (e) {
      queueMicrotask(() => this._fail(o, e));
      return;
    }
    p.then((r) => {
      // (Integer replies are strings with ioredis's `stringNumbers`: found by review,
      // every write read as failed though it landed.)
      const code = Array.isArray(r) && r.length >= 2 ? Number(r[0]) : NaN;
      if (!Array.isArray(r) || !Number.isInteger(code)) {
        return this._settle(o, 4, -1, undefined, FAIL_REPLY);
      }
      this._clock(sent, performance.now(), Number(r[1]));
      switch (code) {
        case 0: {
          const t = Number(r[2]);
          this._stats.written++;
          return this._settle(o, 2, Number.isSafeInteger(t) && t > 0 ? t : -1, undefined, 0);
        }
        case 1: {
          this._stats.conflicts++;
          const t = Number(r[2]);
          if (t === 0) this._stats.foreign++;
          const v = r[3] instanceof Uint8Array ? r[3] : EMPTY;
          return this._settle(o, 3, Number.isSafeInteger(t) && t >= 0 ? t : -1, v, 0);
        }
        case 2:
          this._stats.conflicts++;
          return this._settle(o, 3, -1, undefined, 1);
        case 3:
          this._stats.refused++;
          return this._settle(o, 4, -1, undefined, FAIL_LATE);
        default:
          return this._settle(o, 4, -1, undefined, FAIL_REPLY);
      }
    }, (e: unknown) => this._fail(o, e));
  }

  /** Learns Redis's clock from a reply: keeps the tightest recent estimate. */
  private _clock(sent: number, recv: number, server: number): void {
    if (!Number.isFinite(server) || recv < sent) return;
    const err = (recv - sent) / 2 + 1;
    // An old estimate loses 1 ms of trust per second (clock drift, a changed primary).
    const aged = this._offsetErr + (recv - this._offsetAt) / 1000;
    if (err <= aged) {
      this._offset = server - (sent + recv) / 2;
      this._offsetErr = err;
      this._offsetAt = recv;
    }
  }
}
