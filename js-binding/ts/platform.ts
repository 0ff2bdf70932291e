/**
 * Node.js platform: the EventEmitter base class and the synchronous `.wasm` load, so
 * `new CircuitBreaker()` works right after `require`/`import` (opossum code has no
 * `await init()`). The browser bundle swaps this module for platform-browser.ts.
 * @internal
 */
import { EventEmitter as NodeEmitter } from 'node:events';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import type { Emitter } from './emitter.js';
import { instantiate } from './engine.js';

/** The base class of breakers and statuses: Node's own EventEmitter. */
export const EventEmitter = NodeEmitter as unknown as new () => Emitter;

export const platform = 'node';

/**
 * Whether `emit(name)` would call a listener: Node's emitter counts its events in
 * `_eventsCount` and keeps them in `_events`, deleting an event's entry with its
 * last listener. Without that table (another emitter) the answer is yes, so nothing
 * is ever skipped wrongly.
 */
export function listening(e: Emitter, name: string): boolean {
  const n = e as unknown as { _events?: Record<string, unknown>; _eventsCount?: number };
  if (n._eventsCount === 0) return false;
  const table = n._events;
  return table === undefined || table[name] !== undefined;
}

instantiate(new WebAssembly.Module(readFileSync(join(__dirname, '..', 'fusewire.wasm'))));

/** Resolved: Node compiles the module synchronously at load. */
export const ready: Promise<void> = Promise.resolve();
