/**
 * The EventEmitter of the builds without Node's (browsers, bundlers, edge runtimes),
 * and `listening` for it.
 * @internal
 */
import type { Emitter, Listener } from './emitter.js';

class BrowserEmitter implements Emitter {
  private _ev: Map<string | symbol, Listener[]> = new Map();
  private _max = 10;

  on(name: string | symbol, fn: Listener): this {
    return this.addListener(name, fn);
  }

  addListener(name: string | symbol, fn: Listener): this {
    if (this._ev.has('newListener')) this.emit('newListener', name, fn);
    const l = this._ev.get(name);
    if (l === undefined) this._ev.set(name, [fn]);
    else l.push(fn);
    return this;
  }

  prependListener(name: string | symbol, fn: Listener): this {
    if (this._ev.has('newListener')) this.emit('newListener', name, fn);
    const l = this._ev.get(name);
    if (l === undefined) this._ev.set(name, [fn]);
    else l.unshift(fn);
    return this;
  }

  once(name: string | symbol, fn: Listener): this {
    const wrapped: Listener & { listener?: Listener } = (...args: unknown[]) => {
      this.removeListener(name, wrapped);
      fn.apply(this, args);
    };
    wrapped.listener = fn;
    return this.on(name, wrapped);
  }

  prependOnceListener(name: string | symbol, fn: Listener): this {
    const wrapped: Listener & { listener?: Listener } = (...args: unknown[]) => {
      this.removeListener(name, wrapped);
      fn.apply(this, args);
    };
    wrapped.listener = fn;
    return this.prependListener(name, wrapped);
  }

  off(name: string | symbol, fn: Listener): this {
    return this.removeListener(name, fn);
  }

  removeListener(name: string | symbol, fn: Listener): this {
    const l = this._ev.get(name);
    if (l === undefined) return this;
    const i = l.findIndex((x) => x === fn || (x as { listener?: Listener }).listener === fn);
    if (i < 0) return this;
    l.splice(i, 1);
    if (l.length === 0) this._ev.delete(name);
    if (this._ev.has('removeListener')) this.emit('removeListener', name, fn);
    return this;
  }

  removeAllListeners(name?: string | symbol): this {
    if (name === undefined) this._ev.clear();
    else this._ev.delete(name);
    return this;
  }

  emit(name: string | symbol, ...args: unknown[]): boolean {
    const l = this._ev.get(name);
    if (l === undefined) {
      if (name === 'error') throw args[0] instanceof Error ? args[0] : new Error(String(args[0]));
      return false;
    }
    for (const fn of l.slice()) fn.apply(this, args);
    return true;
  }

  listenerCount(name: string | symbol): number {
    return this._ev.get(name)?.length ?? 0;
  }

  listeners(name: string | symbol): Listener[] {
    return (this._ev.get(name) ?? []).map((x) => (x as { listener?: Listener }).listener ?? x);
  }

  rawListeners(name: string | symbol): Listener[] {
    return (this._ev.get(name) ?? []).slice();
  }

  eventNames(): (string | symbol)[] {
    return [...this._ev.keys()];
  }

  setMaxListeners(n: number): this {
    this._max = n;
    return this;
  }

  getMaxListeners(): number {
    return this._max;
  }
}

export const EventEmitter = BrowserEmitter as unknown as new () => Emitter;

/** Whether `emit(name)` would call a listener (the map drops an event with its last one). */
export function listening(e: Emitter, name: string): boolean {
  return (e as unknown as { _ev: Map<string | symbol, Listener[]> })._ev.has(name);
}
