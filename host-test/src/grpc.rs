//! gRPC as Envoy sees it: which requests are gRPC, the HTTP → gRPC status mapping of
//! local replies, `grpc-message` percent-encoding, and the simulated gRPC upstream that
//! answers `proxy_grpc_call` / `proxy_grpc_stream`.

use serde::{Deserialize, Serialize};

use crate::headers::HeaderMap;

/// gRPC status codes used by the host.
pub mod status {
    #![allow(missing_docs)]
    pub const OK: u32 = 0;
    pub const UNKNOWN: u32 = 2;
    pub const DEADLINE_EXCEEDED: u32 = 4;
    pub const UNIMPLEMENTED: u32 = 12;
    pub const INTERNAL: u32 = 13;
    pub const UNAVAILABLE: u32 = 14;
    pub const UNAUTHENTICATED: u32 = 16;
    pub const PERMISSION_DENIED: u32 = 7;
    /// Largest well-known code (`WellKnownGrpcStatus::MaximumKnown`).
    pub const MAX_KNOWN: u32 = 16;
}

/// Envoy's `Grpc::Utility::httpToGrpcStatus` (source/common/grpc/status.cc).
pub fn http_to_grpc_status(http: u16) -> u32 {
    match http {
        400 => status::INTERNAL,
        401 => status::UNAUTHENTICATED,
        403 => status::PERMISSION_DENIED,
        404 => status::UNIMPLEMENTED,
        429 | 502 | 503 | 504 => status::UNAVAILABLE,
        _ => status::UNKNOWN,
    }
}

/// Envoy's `Grpc::Utility::grpcToHttpStatus` (source/common/grpc/status.cc).
pub fn grpc_to_http_status(grpc: u32) -> u16 {
    match grpc {
        0 => 200,
        1 => 499,
        3 | 9 | 11 => 400,
        4 => 504,
        5 => 404,
        6 | 10 => 409,
        7 => 403,
        8 => 429,
        12 => 501,
        14 => 503,
        16 => 401,
        _ => 500, // UNKNOWN, INTERNAL, DATA_LOSS and codes past 16
    }
}

/// Envoy's `Http::Utility::PercentEncoding::encode` with the default reserved set `%`:
/// bytes below 0x20, from 0x7E (`~`) up, and `%` become `%XX` (uppercase hex).
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if !(0x20..0x7E).contains(&b) || b == b'%' {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push(b as char);
        }
    }
    out
}

/// Envoy's `Grpc::Common::isGrpcRequestHeaders`: a `:path` and a content-type of exactly
/// `application/grpc` or `application/grpc+<subtype>` (not `application/grpc-web`).
pub fn is_grpc_request(headers: &HeaderMap) -> bool {
    if headers.get(":path").is_none() {
        return false;
    }
    let ct = headers.get("content-type").unwrap_or_default();
    let base = b"application/grpc";
    ct.starts_with(base) && (ct.len() == base.len() || ct[base.len()] == b'+')
}

/// How a simulated cluster answers gRPC callouts (`proxy_grpc_call`, `proxy_grpc_stream`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrpcReply {
    /// Time until the answer arrives (a call's timeout fires first if shorter).
    pub latency_ns: u64,
    /// gRPC status (0 = OK).
    pub status: u32,
    /// Status message (`proxy_get_status` in `on_grpc_close`).
    pub message: String,
    /// Response message bytes (`on_grpc_receive`, buffer type 5).
    pub response: String,
    /// Initial metadata a stream receives first (map type 4).
    pub initial_metadata: Vec<(String, String)>,
    /// Trailing metadata a stream receives before it closes (map type 5).
    pub trailing_metadata: Vec<(String, String)>,
}

impl Default for GrpcReply {
    fn default() -> Self {
        GrpcReply {
            latency_ns: 0,
            status: status::OK,
            message: String::new(),
            response: String::new(),
            initial_metadata: vec![],
            trailing_metadata: vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_mapping_is_envoys() {
        let got: Vec<u32> = [400, 401, 403, 404, 429, 500, 502, 503, 504, 418]
            .iter()
            .map(|s| http_to_grpc_status(*s))
            .collect();
        assert_eq!(got, [13, 16, 7, 12, 14, 2, 14, 14, 14, 2]);
        let back: Vec<u16> = (0..=17).map(grpc_to_http_status).collect();
        assert_eq!(
            back,
            [
                200, 499, 500, 400, 504, 404, 409, 403, 429, 400, 409, 400, 501, 500, 503, 500,
                401, 500
            ]
        );
    }

    #[test]
    fn percent_encoding_keeps_spaces_and_encodes_the_rest() {
        assert_eq!(
            percent_encode("upstream request timeout"),
            "upstream request timeout"
        );
        assert_eq!(percent_encode("50% off~\n"), "50%25 off%7E%0A");
        assert_eq!(percent_encode("é"), "%C3%A9");
    }

    #[test]
    fn grpc_web_is_not_grpc() {
        let h = |ct: &str| HeaderMap::from_pairs([(":path", "/s/M"), ("content-type", ct)]);
        assert!(is_grpc_request(&h("application/grpc")));
        assert!(is_grpc_request(&h("application/grpc+proto")));
        assert!(!is_grpc_request(&h("application/grpc-web")));
        assert!(!is_grpc_request(&h("application/json")));
    }
}
