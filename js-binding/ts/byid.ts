/**
 * Values keyed by a core id, stored at the id's slot. The core's request-cache and
 * collapser ids are `generation · 2^24 + slot` below 2^53 (core/src/slab.rs): keyed by
 * the whole number, a `Map` hashes a heap-allocated double on every access once the
 * generation grows; here the slot indexes an array and the whole id is compared, so a
 * stale id never matches. One id space per table (one slab of the core).
 * @internal
 */
const SLOTS = 16_777_216; // 2^24 (SLOT_BITS in core/src/slab.rs)

export class ById<T> {
  private readonly _ids: number[] = [];
  private readonly _vals: (T | undefined)[] = [];
  private _size = 0;

  /** Entries held. */
  get size(): number {
    return this._size;
  }

  get(id: number): T | undefined {
    const s = id % SLOTS;
    return this._ids[s] === id ? this._vals[s] : undefined;
  }

  has(id: number): boolean {
    return this.get(id) !== undefined;
  }

  /** Stores `v` for `id` (a value of an earlier id of the same slot is replaced). */
  set(id: number, v: T): void {
    const s = id % SLOTS;
    if (this._vals[s] === undefined) this._size++;
    this._ids[s] = id;
    this._vals[s] = v;
  }

  /** Removes the value of `id`; whether there was one. */
  delete(id: number): boolean {
    const s = id % SLOTS;
    if (this._ids[s] !== id || this._vals[s] === undefined) return false;
    this._vals[s] = undefined;
    this._size--;
    return true;
  }

  /** Every value held (any order). */
  values(): T[] {
    const out: T[] = [];
    if (this._size === 0) return out;
    for (const v of this._vals) if (v !== undefined) out.push(v);
    return out;
  }

  clear(): void {
    this._ids.length = 0;
    this._vals.length = 0;
    this._size = 0;
  }
}
