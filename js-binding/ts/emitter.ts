/**
 * The event-emitter surface breakers and statuses have (Node's EventEmitter in
 * Node.js, a compatible one in browsers).
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Listener = (...args: any[]) => void;

export interface Emitter {
  on(event: string | symbol, listener: Listener): this;
  addListener(event: string | symbol, listener: Listener): this;
  prependListener(event: string | symbol, listener: Listener): this;
  once(event: string | symbol, listener: Listener): this;
  prependOnceListener(event: string | symbol, listener: Listener): this;
  off(event: string | symbol, listener: Listener): this;
  removeListener(event: string | symbol, listener: Listener): this;
  removeAllListeners(event?: string | symbol): this;
  emit(event: string | symbol, ...args: unknown[]): boolean;
  listenerCount(event: string | symbol): number;
  listeners(event: string | symbol): Listener[];
  rawListeners(event: string | symbol): Listener[];
  eventNames(): (string | symbol)[];
  setMaxListeners(n: number): this;
  getMaxListeners(): number;
}
