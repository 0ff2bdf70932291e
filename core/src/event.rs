//! The event kinds the rolling metrics count (Hystrix's `HystrixEventType`).

use serde::{Deserialize, Serialize};

/// One countable event. The discriminant is the counter index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum EventKind {
    /// The call ran and succeeded.
    Success = 0,
    /// The call ran and failed.
    Failure = 1,
    /// The call ran past its deadline.
    Timeout = 2,
    /// The breaker (or the adaptive throttle / slow-start ramp) rejected the call.
    ShortCircuited = 3,
    /// The semaphore bulkhead was full.
    SemaphoreRejected = 4,
    /// The pool bulkhead (slots + wait queue) rejected the call.
    ThreadPoolRejected = 5,
    /// The fallback ran and succeeded.
    FallbackSuccess = 6,
    /// The fallback ran and failed.
    FallbackFailure = 7,
    /// The fallback concurrency limit rejected the fallback.
    FallbackRejection = 8,
    /// No fallback was configured.
    FallbackMissing = 9,
    /// Served from the request cache without running.
    ResponseFromCache = 10,
    /// The call was merged into a collapsed batch.
    Collapsed = 11,
    /// The caller's fault (e.g. HTTP 4xx): reported, never counted as an error.
    BadRequest = 12,
}

/// Number of event kinds.
pub const EVENT_KINDS: usize = 13;

impl EventKind {
    /// Every kind, in counter-index order.
    pub const ALL: [EventKind; EVENT_KINDS] = [
        EventKind::Success,
        EventKind::Failure,
        EventKind::Timeout,
        EventKind::ShortCircuited,
        EventKind::SemaphoreRejected,
        EventKind::ThreadPoolRejected,
        EventKind::FallbackSuccess,
        EventKind::FallbackFailure,
        EventKind::FallbackRejection,
        EventKind::FallbackMissing,
        EventKind::ResponseFromCache,
        EventKind::Collapsed,
        EventKind::BadRequest,
    ];

    /// Counter index of this kind.
    #[inline]
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Hystrix-style upper-case name, e.g. `SHORT_CIRCUITED`.
    pub const fn name(self) -> &'static str {
        match self {
            EventKind::Success => "SUCCESS",
            EventKind::Failure => "FAILURE",
            EventKind::Timeout => "TIMEOUT",
            EventKind::ShortCircuited => "SHORT_CIRCUITED",
            EventKind::SemaphoreRejected => "SEMAPHORE_REJECTED",
            EventKind::ThreadPoolRejected => "THREAD_POOL_REJECTED",
            EventKind::FallbackSuccess => "FALLBACK_SUCCESS",
            EventKind::FallbackFailure => "FALLBACK_FAILURE",
            EventKind::FallbackRejection => "FALLBACK_REJECTION",
            EventKind::FallbackMissing => "FALLBACK_MISSING",
            EventKind::ResponseFromCache => "RESPONSE_FROM_CACHE",
            EventKind::Collapsed => "COLLAPSED",
            EventKind::BadRequest => "BAD_REQUEST",
        }
    }
}
