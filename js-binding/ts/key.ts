/**
 * Cache keys for the core's request-cache index (the `Collapser`'s keys, the
 * breaker's `cacheGetKey` results).
 * @internal
 */

/**
 * The cache index's bytes for a key, tagged by type so keys of different types never
 * meet (`1` / `'1'`, `NaN` / `'null'`, `1n` / `'1n'`): DataLoader compares keys with a
 * `Map`. Objects go by their JSON (an index needs bytes, not identity); `undefined` for
 * what has none (a symbol, a function).
 */
export function tagged(k: unknown): string | undefined {
  switch (typeof k) {
    case 'string': return `s${k}`;
    // Untagged: a number's text starts with a digit, '-', 'N' or 'I', no other tag. -0 is 0, as in a Map.
    case 'number': return String(k);
    case 'bigint': return `b${k}`;
    case 'boolean': return k ? 't' : 'f';
    case 'undefined': return 'u';
    case 'object': {
      if (k === null) return 'z';
      const j = JSON.stringify(k) as string | undefined;
      return j === undefined ? undefined : `j${j}`;
    }
    default: return undefined;
  }
}
