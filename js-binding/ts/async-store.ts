/**
 * `AsyncStore`: the base of stores that answer later (Redis: `fusewire/redis`). A
 * breaker given one runs the core's shared layer in **async mode**: admission never
 * waits — it decides from the last view (or the local breaker when the view is
 * stale) — and the core says when to read or write (at `sync_ms`, at once on a trip,
 * an error while the breaker is hot, a probe lease). This module only carries those
 * requests to the store and the answers back (`fw_io` → `_send` → `fw_io_done`);
 * every rule — what to read, what to write, CAS retries, backoff, staleness — is the
 * core's.
 */
import { now } from './clock.js';
import type { CoreSharedConfig } from './config.js';
import { bytes, io, nextIo, putScratchBytes, type Exports } from './engine.js';
import { brand } from './errors.js';

/** @internal What a breaker gives its async store. */
export interface AsyncHost {
  readonly _h: number;
  /** The exports of the instance its core is in. */
  readonly _w: Exports;
  readonly isShutdown: boolean;
  _after(flags: number, t: number): void;
  /** An answer that came after `shutdown()`, while the breaker drives its last flush. */
  _closingAnswer(id: number, kind: number, token: number, value: Uint8Array | undefined, flag: number): void;
  /** Numbers a write about to be sent (1, 2, …). */
  _writeSent(): number;
  /** Write `seq` landed (`flush()` settles on the first one sent after it was called). */
  _writeLanded(seq: number): void;
}

/**
 * @internal The store's answer to one request, in the core's `io_done` kinds: 0 found
 * (`value`, `token`), 1 not found, 2 written (`token`, or -1 unknown), 3 conflict
 * (`value` + `token` of the current state when known, else `token` -1; `flag` 1: the
 * key is absent now), 4 failed (`flag`: the store's status code).
 */
/**
 * A failed op's status that says the store answered and refused a write, so it did
 * not land (`RedisStore`'s write past its deadline): a breaker shutting down sends it
 * again instead of giving up.
 */
export const FAIL_REFUSED = 12;

export type AsyncDone = (kind: number, token: number, value: Uint8Array | undefined, flag: number) => void;

const decoder = new TextDecoder();

/** A store the core's shared layer drives asynchronously (see `RedisStore`). */
export abstract class AsyncStore {
  /** Breakers shut down and still driving their last flush: how to make each hold the process. */
  private _holds = new Set<() => void>();
  private _idle: (() => void)[] = [];

  /**
   * @internal A shut-down breaker drives its last flush: call the result when it is
   * done. `wait` makes its timer hold the process (someone awaits `close()`).
   */
  _hold(wait: () => void): () => void {
    const holds = this._holds;
    holds.add(wait);
    if (this._idle.length !== 0) wait();
    return () => {
      if (holds.delete(wait) && holds.size === 0) for (const f of this._idle.splice(0)) f();
    };
  }

  /**
   * @internal Resolves once no shut-down breaker drives a flush any more; meanwhile
   * their timers hold the process (found by review: with the client's socket gone,
   * Node exited with `close()` unsettled).
   */
  _whenIdle(): Promise<void> {
    if (this._holds.size === 0) return Promise.resolve();
    for (const wait of this._holds) wait();
    return new Promise((r) => this._idle.push(r));
  }

  /** @internal Whether a shut-down breaker still drives its last flush. */
  get _busy(): boolean {
    return this._holds.size > 0;
  }

  /** @internal Shared-config defaults for breakers on this store (the user's options win). */
  _defaults(): CoreSharedConfig {
    return {};
  }

  /** @internal An owner id for a new breaker's ledger entries. */
  abstract nextOwner(): number;

  /** @internal What a `stale` event can add: the store's recent error, if any. */
  _describeStale(): string | undefined {
    return undefined;
  }

  /** @internal What a failed op's `status` means, for `store` events (undefined: nothing to add). */
  _describe(status: number): string | undefined {
    void status;
    return undefined;
  }

  /**
   * @internal Performs one request without blocking: `op` 1 read, 2 write (`value`,
   * `expect` −1 for "absent" or the expected token); calls `done` exactly once, later.
   */
  abstract _send(op: number, key: string, value: Uint8Array | undefined, expect: number, done: AsyncDone): void;

  /** @internal Hands a breaker's waiting requests to the store; never waits. Returns no flags. */
  _pump(b: AsyncHost, t: number): number {
    const h = b._h;
    const x = b._w;
    // The core keeps at most one request in flight per key: this loop sends one.
    for (let i = 0; i < 8; i++) {
      const op = nextIo(x, h, t);
      if (op === 0) break;
      const { id, expect } = io;
      const mem = bytes();
      const key = decoder.decode(mem.subarray(io.keyAt, io.keyAt + io.keyLen));
      const value = op === 2 ? mem.slice(io.valueAt, io.valueAt + io.valueLen) : undefined;
      const seq = op === 2 ? b._writeSent() : 0;
      this._send(op, key, value, expect, (kind, token, v, flag) => {
        // Asked by a core since replaced with its instance (see `revive` in engine.ts):
        // the new core never asked.
        if (b._w === x) answer(b, id, kind, token, v, flag, seq);
      });
    }
    return 0;
  }
}

/** Feeds an answer back to the core, then handles what it caused (events, more I/O, the timer). */
function answer(b: AsyncHost, id: number, kind: number, token: number, value: Uint8Array | undefined,
  flag: number, seq: number): void {
  if (b.isShutdown) {
    b._closingAnswer(id, kind, token, value, flag);
    return;
  }
  const t = now();
  const f = deliver(b._w, b._h, id, kind, token, value, flag, t);
  if (kind === WRITTEN && seq > 0) b._writeLanded(seq);
  if (f < 0) return;
  try {
    b._after(f, t);
  } catch (e) {
    // A listener threw (every event was still handled). Its error surfaces as it
    // would from a timer, not as a rejection of the store client's promise.
    queueMicrotask(() => {
      throw e;
    });
  }
}

/** @internal Hands the store's answer to request `id` to the core (`fw_io_done` of exports `x`); returns its flags. */
export function deliver(x: Exports, h: number, id: number, kind: number, token: number, value: Uint8Array | undefined,
  flag: number, t: number): number {
  // Past 64 KiB a value is not fusewire state (the core's encoding limit): its first
  // 64 KiB + 1 bytes tell the core so (it reports and resets the key) without copying
  // the rest. A value that still finds no room is a failed read, not a lost answer
  // (the core would wait for it forever).
  const v = value !== undefined && value.length > MAX_STATE + 1 ? value.subarray(0, MAX_STATE + 1) : value;
  const len = v === undefined ? 0 : v.length;
  if (len > 0) {
    try {
      putScratchBytes(v!);
    } catch {
      return x.fw_io_done(h, id, FAILED, token, 0, 0, t);
    }
  }
  return x.fw_io_done(h, id, kind, token, len, flag, t);
}

/** The core's largest encoded state (`shared::codec::MAX_ENCODED_LEN`). */
const MAX_STATE = 64 * 1024;
/** `fw_io_done` kind: the store call failed. */
const FAILED = 4;
/** `fw_io_done` kind: the write landed. */
const WRITTEN = 2;

brand(AsyncStore, 'AsyncStore');
