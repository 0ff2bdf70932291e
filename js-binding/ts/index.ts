/**
 * fusewire: Hystrix-grade resilience for Node.js and browsers, written once in Rust
 * (the core that also runs inside Envoy) and driven from JS. `CircuitBreaker` is a
 * drop-in for opossum's.
 */
import { CircuitBreaker } from './breaker.js';

export {
  CircuitBreaker,
  type CacheKey,
  type CacheTransport,
  type MemoryCache,
  type BreakerStateJSON,
  type State,
  type StatusOptions,
  type CircuitBreakerEvents,
  type Options,
  type SharedOptions,
  type TransitionReason,
} from './breaker.js';
export type { CoreConfig, CoreCacheConfig, CoreCollapserConfig, CoreSharedConfig, BreakerMode, OpenSchedule } from './config.js';
export { isOurError, type CircuitBreakerError, type ErrorCode, type Refusal } from './errors.js';
export { Status, PERCENTILES, type Bucket, type Stats, type Window } from './status.js';
export { SharedStore, type SharedStoreOptions } from './store.js';
export { Collapser, RequestLoader, type BatchFn, type CollapserOptions } from './collapser.js';
export { ready, load, type WasmSource } from './platform.js';
export type { Emitter, Listener } from './emitter.js';

export { version } from './version.js';

export default CircuitBreaker;
