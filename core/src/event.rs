//! The vocabulary every layer shares: [`EventKind`] (what the rolling metrics count,
//! Hystrix's `HystrixEventType`) and [`Outcome`] (how a call that ran ended).

/// One countable event. The discriminant is the counter index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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

/// How a call the flow let run ended, as the host judged it. The one outcome type of
/// the crate: the flow, the shared layer and every host's classification use it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Outcome {
    /// It succeeded.
    Success = 0,
    /// It failed.
    Failure = 1,
    /// It passed its deadline (a host-enforced deadline, e.g. Envoy's route timeout;
    /// the flow's own deadlines are reported by `poll`).
    Timeout = 2,
    /// The caller's fault (e.g. HTTP 4xx): reported, never an error, never a
    /// fallback, never closes a half-open breaker.
    BadRequest = 3,
    /// No verdict: the caller went away (or the call never reached its target).
    /// Counts nowhere, frees the slot, gives a probe turn back.
    Cancelled = 4,
}

impl Outcome {
    /// Every outcome, in discriminant order.
    pub const ALL: [Outcome; 5] = [
        Outcome::Success,
        Outcome::Failure,
        Outcome::Timeout,
        Outcome::BadRequest,
        Outcome::Cancelled,
    ];

    /// The event this outcome is counted as (`None`: [`Outcome::Cancelled`]).
    pub const fn event(self) -> Option<EventKind> {
        match self {
            Outcome::Success => Some(EventKind::Success),
            Outcome::Failure => Some(EventKind::Failure),
            Outcome::Timeout => Some(EventKind::Timeout),
            Outcome::BadRequest => Some(EventKind::BadRequest),
            Outcome::Cancelled => None,
        }
    }

    /// Whether the call ran to a verdict (and so has a meaningful latency).
    pub const fn executed(self) -> bool {
        !matches!(self, Outcome::Cancelled)
    }

    /// Whether it counts as an error (failure or timeout).
    pub const fn is_error(self) -> bool {
        matches!(self, Outcome::Failure | Outcome::Timeout)
    }

    /// From its discriminant (FFI hosts pass outcomes as numbers).
    pub const fn from_u8(v: u8) -> Option<Outcome> {
        match v {
            0 => Some(Outcome::Success),
            1 => Some(Outcome::Failure),
            2 => Some(Outcome::Timeout),
            3 => Some(Outcome::BadRequest),
            4 => Some(Outcome::Cancelled),
            _ => None,
        }
    }
}

impl EventKind {
    /// From its counter index (FFI hosts pass kinds as numbers).
    pub const fn from_index(i: usize) -> Option<EventKind> {
        if i < EVENT_KINDS {
            Some(Self::ALL[i])
        } else {
            None
        }
    }

    /// Snake-case name, e.g. `short_circuited` (metric-name suffixes).
    pub const fn snake_name(self) -> &'static str {
        match self {
            EventKind::Success => "success",
            EventKind::Failure => "failure",
            EventKind::Timeout => "timeout",
            EventKind::ShortCircuited => "short_circuited",
            EventKind::SemaphoreRejected => "semaphore_rejected",
            EventKind::ThreadPoolRejected => "thread_pool_rejected",
            EventKind::FallbackSuccess => "fallback_success",
            EventKind::FallbackFailure => "fallback_failure",
            EventKind::FallbackRejection => "fallback_rejection",
            EventKind::FallbackMissing => "fallback_missing",
            EventKind::ResponseFromCache => "response_from_cache",
            EventKind::Collapsed => "collapsed",
            EventKind::BadRequest => "bad_request",
        }
    }
}
