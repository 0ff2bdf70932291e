//! Proxy-wasm ABI 0.2.1 constants: statuses, enums and the map/buffer/stream type ids.

/// Status codes returned by every host function.
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Status {
    Ok = 0,
    NotFound = 1,
    BadArgument = 2,
    SerializationFailure = 3,
    ParseFailure = 4,
    InvalidMemoryAccess = 6,
    Empty = 7,
    CasMismatch = 8,
    InternalFailure = 10,
    Unimplemented = 12,
}

/// Filter action returned by stream callbacks: Continue 0 / Pause 1.
pub const ACTION_CONTINUE: i32 = 0;

/// Header map type ids.
pub mod map {
    #![allow(missing_docs)]
    pub const REQUEST_HEADERS: i32 = 0;
    pub const REQUEST_TRAILERS: i32 = 1;
    pub const RESPONSE_HEADERS: i32 = 2;
    pub const RESPONSE_TRAILERS: i32 = 3;
    pub const GRPC_INITIAL_METADATA: i32 = 4;
    pub const GRPC_TRAILING_METADATA: i32 = 5;
    pub const HTTP_CALL_RESPONSE_HEADERS: i32 = 6;
    pub const HTTP_CALL_RESPONSE_TRAILERS: i32 = 7;
}

/// Buffer type ids.
pub mod buffer {
    #![allow(missing_docs)]
    pub const REQUEST_BODY: i32 = 0;
    pub const RESPONSE_BODY: i32 = 1;
    pub const DOWNSTREAM_DATA: i32 = 2;
    pub const UPSTREAM_DATA: i32 = 3;
    pub const HTTP_CALL_RESPONSE_BODY: i32 = 4;
    pub const GRPC_RECEIVE_BUFFER: i32 = 5;
    pub const VM_CONFIGURATION: i32 = 6;
    pub const PLUGIN_CONFIGURATION: i32 = 7;
    pub const CALL_DATA: i32 = 8;
}

/// Stream type ids for `proxy_continue_stream` / `proxy_close_stream`.
pub mod stream {
    #![allow(missing_docs)]
    pub const REQUEST: i32 = 0;
    pub const RESPONSE: i32 = 1;
    pub const DOWNSTREAM: i32 = 2;
    pub const UPSTREAM: i32 = 3;
}

/// Metric type ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricType {
    /// Monotonic counter.
    Counter,
    /// Settable gauge.
    Gauge,
    /// Histogram of recorded values.
    Histogram,
}

impl MetricType {
    /// Decodes the ABI id (counter 0, gauge 1, histogram 2).
    pub fn from_abi(v: i32) -> Option<Self> {
        match v {
            0 => Some(Self::Counter),
            1 => Some(Self::Gauge),
            2 => Some(Self::Histogram),
            _ => None,
        }
    }
}

/// Log levels as the ABI numbers them.
pub const LOG_LEVEL_NAMES: [&str; 6] = ["trace", "debug", "info", "warn", "error", "critical"];
