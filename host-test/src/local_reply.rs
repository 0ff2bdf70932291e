//! How Envoy turns a local reply into response headers and body
//! (`Http::Utility::prepareLocalReply`, source/common/http/utility.cc).

use crate::grpc::{http_to_grpc_status, percent_encode};
use crate::headers::HeaderMap;
use crate::types::LocalReply;

/// The response a local reply becomes. For a gRPC request it is trailers-only:
/// `:status 200`, `content-type: application/grpc`, `grpc-status` (a sender-supplied
/// header wins, else the reply's gRPC status, else `httpToGrpcStatus`), `grpc-message`
/// (percent-encoded body), no content-length and no body. Otherwise the body gets
/// `content-length` and, unless the sender set one, `content-type: text/plain`; an
/// empty body drops both.
pub(crate) fn encode(lr: &LocalReply, is_grpc: bool, is_head: bool) -> (HeaderMap, Vec<u8>) {
    let mut h = HeaderMap::new();
    h.add(":status", lr.status.to_string().as_bytes());
    for (k, v) in &lr.headers {
        h.add(k, v.as_bytes());
    }
    if is_grpc {
        h.replace(":status", b"200");
        h.replace("content-type", b"application/grpc");
        if h.get("grpc-status").is_none_or(|v| v.is_empty()) {
            let g = lr
                .grpc_status
                .unwrap_or_else(|| http_to_grpc_status(lr.status));
            h.replace("grpc-status", g.to_string().as_bytes());
        }
        if !lr.body.is_empty() && !is_head {
            h.replace("grpc-message", percent_encode(&lr.body).as_bytes());
        }
        h.remove("content-length");
        return (h, Vec::new());
    }
    if lr.body.is_empty() {
        h.remove("content-length");
        h.remove("content-type");
        return (h, Vec::new());
    }
    h.replace("content-length", lr.body.len().to_string().as_bytes());
    if h.get("content-type").is_none() {
        h.add("content-type", b"text/plain");
    }
    let body = if is_head {
        Vec::new()
    } else {
        lr.body.clone().into_bytes()
    };
    (h, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::LocalReplySource;

    fn lr(status: u16, body: &str, headers: &[(&str, &str)], grpc: Option<u32>) -> LocalReply {
        LocalReply {
            source: LocalReplySource::Filter,
            status,
            details: String::new(),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: body.into(),
            grpc_status: grpc,
        }
    }

    #[test]
    fn grpc_reply_is_trailers_only_and_filter_grpc_status_wins() {
        let (h, b) = encode(
            &lr(503, "no 100%", &[("content-length", "3")], None),
            true,
            false,
        );
        assert!(b.is_empty());
        assert_eq!(h.get_str(":status").as_deref(), Some("200"));
        assert_eq!(h.get_str("grpc-status").as_deref(), Some("14"));
        assert_eq!(h.get_str("grpc-message").as_deref(), Some("no 100%25"));
        assert_eq!(h.get("content-length"), None);
        let (h, _) = encode(&lr(503, "", &[("grpc-status", "8")], Some(4)), true, false);
        assert_eq!(h.get_str("grpc-status").as_deref(), Some("8"));
        assert_eq!(h.get("grpc-message"), None);
        let (h, _) = encode(&lr(500, "", &[], Some(4)), true, false);
        assert_eq!(h.get_str("grpc-status").as_deref(), Some("4"));
    }

    #[test]
    fn http_reply_gets_text_plain_only_with_a_body() {
        let (h, b) = encode(&lr(429, "slow down", &[], None), false, false);
        assert_eq!(b, b"slow down");
        assert_eq!(h.get_str("content-type").as_deref(), Some("text/plain"));
        assert_eq!(h.get_str("content-length").as_deref(), Some("9"));
        let (h, _) = encode(
            &lr(200, "{}", &[("content-type", "application/json")], None),
            false,
            false,
        );
        assert_eq!(
            h.get_str("content-type").as_deref(),
            Some("application/json")
        );
        let (h, b) = encode(&lr(204, "", &[("content-type", "x/y")], None), false, false);
        assert!(b.is_empty() && h.get("content-type").is_none());
    }
}
