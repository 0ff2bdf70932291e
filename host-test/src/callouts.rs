//! Callouts: `proxy_http_call` and the gRPC calls/streams, as Envoy's wasm `Context`
//! makes them (source/extensions/common/wasm/context.cc `httpCall`, `grpcCall`,
//! `grpcStream`; proxy-wasm-cpp-host src/exports.cc). A callout belongs to the root
//! context of the calling context: its callbacks get the root context id.

use crate::abi::Status;
use crate::grpc::{status, GrpcReply};
use crate::headers::HeaderMap;
use crate::hostcalls::{read, read_str, write_u32, C, HR};
use crate::types::{ResetReason, UpstreamReply};
use crate::vm::{GrpcEvent, PendingCall, PendingGrpc};
use crate::worker::Event;

/// `proxy_http_call(cluster, headers, body, trailers, timeout_ms, token*)`.
pub(crate) fn http_call(c: &mut C, a: [i32; 9], ret: i32) -> HR<()> {
    let cluster = read_str(c, a[0], a[1])?;
    let headers = HeaderMap::decode(&read(c, a[2], a[3])?).map_err(|_| Status::BadArgument)?;
    let _body = read(c, a[4], a[5])?;
    let _trailers = HeaderMap::decode(&read(c, a[6], a[7])?).map_err(|_| Status::BadArgument)?;
    // Verify the token pointer before starting anything (cpp-host does the same).
    write_u32(c, ret, 0)?;
    if a[8] < 0 {
        return Err(Status::BadArgument.into());
    }
    let timeout_ns = a[8] as u64 * 1_000_000;
    let d = c.data_mut();
    let Some(cl) = d.env.clusters.get(&cluster) else {
        return Err(Status::BadArgument.into());
    };
    if headers.get(":path").is_none()
        || headers.get(":method").is_none()
        || headers.get(":authority").is_none()
    {
        return Err(Status::BadArgument.into());
    }
    let reply = cl.http_call_reply.clone();
    // No healthy host: the async client fails inline; Envoy drops the handler and
    // returns INTERNAL_FAILURE, so no callback ever comes.
    if let UpstreamReply::Reset {
        reason: ResetReason::NoHealthyUpstream,
        ..
    } = reply
    {
        return Err(Status::InternalFailure.into());
    }
    let token = d.next_token;
    d.next_token = d.next_token.wrapping_add(1).max(1);
    let now = d.env.clock.now();
    let (at, timed_out) = match &reply {
        UpstreamReply::Response { latency_ns, .. } | UpstreamReply::Reset { latency_ns, .. }
            if timeout_ns == 0 || *latency_ns <= timeout_ns =>
        {
            (Some(now + latency_ns), false)
        }
        _ if timeout_ns > 0 => (Some(now + timeout_ns), true),
        _ => (None, false),
    };
    let root = d.root_of(d.current);
    d.calls.insert(token, PendingCall { root, reply });
    if let Some(at) = at {
        d.env
            .bus
            .post(d.worker, at, Event::CallDone { token, timed_out });
    }
    write_u32(c, ret, token)
}

/// What the guest's `on_http_call_response` sees for a finished call: the upstream's
/// response, or the async client router's local reply for a reset (503 "upstream
/// connect error …") or a timeout (504 "upstream request timeout").
pub(crate) fn http_call_response(
    reply: UpstreamReply,
    timed_out: bool,
) -> (HeaderMap, Vec<u8>, HeaderMap) {
    let local = |status: u16, body: &str| {
        let mut h = HeaderMap::new();
        h.add(":status", status.to_string().as_bytes());
        h.add("content-length", body.len().to_string().as_bytes());
        h.add("content-type", b"text/plain");
        (h, body.as_bytes().to_vec(), HeaderMap::new())
    };
    match (timed_out, reply) {
        (true, _) | (false, UpstreamReply::Hang) => local(504, "upstream request timeout"),
        (false, UpstreamReply::Reset { reason, .. }) => local(503, reason.envoy().2),
        (
            false,
            UpstreamReply::Response {
                status,
                headers,
                body,
                trailers,
                ..
            },
        ) => {
            let mut h = HeaderMap::new();
            h.add(":status", status.to_string().as_bytes());
            for (k, v) in &headers {
                h.add(k, v.as_bytes());
            }
            let t = HeaderMap::from_pairs(trailers.iter().map(|(k, v)| (k, v.as_bytes())));
            (h, body.into_bytes(), t)
        }
    }
}

/// `proxy_grpc_call` (unary, odd tokens) and `proxy_grpc_stream` (even tokens): the
/// service is a cluster name; unknown → PARSE_FAILURE (Envoy's `grpcCall`).
pub(crate) fn grpc_open(
    c: &mut C,
    service: (i32, i32),
    timeout_ms: Option<i32>,
    ret: i32,
) -> HR<()> {
    let cluster = read_str(c, service.0, service.1)?;
    let d = c.data_mut();
    let Some(cl) = d.env.clusters.get(&cluster) else {
        return Err(Status::ParseFailure.into());
    };
    let reply: GrpcReply = cl.grpc_reply.clone();
    let k = d.next_grpc;
    d.next_grpc = d.next_grpc.wrapping_add(1).max(1);
    let token = match timeout_ms {
        Some(_) => k.wrapping_mul(2).wrapping_sub(1),
        None => k.wrapping_mul(2),
    };
    let now = d.env.clock.now();
    let timeout_ns = timeout_ms.map_or(0, |t| t.max(0) as u64 * 1_000_000);
    let timed_out = timeout_ns > 0 && reply.latency_ns > timeout_ns;
    let at = now
        + if timed_out {
            timeout_ns
        } else {
            reply.latency_ns
        };
    let root = d.root_of(d.current);
    d.grpc.insert(
        token,
        PendingGrpc {
            root,
            reply,
            timed_out,
        },
    );
    d.env.bus.post(d.worker, at, Event::GrpcDone { token });
    write_u32(c, ret, token)
}

fn is_call(token: u32) -> bool {
    token & 1 == 1
}

/// `proxy_grpc_send`: streams only (a call token → BAD_ARGUMENT).
pub(crate) fn grpc_send(c: &mut C, token: u32, msg: (i32, i32)) -> HR<()> {
    let _ = read(c, msg.0, msg.1)?;
    if is_call(token) {
        return Err(Status::BadArgument.into());
    }
    c.data().grpc.get(&token).ok_or(Status::NotFound)?;
    Ok(())
}

/// `proxy_grpc_cancel`: drops the callout, no callback follows.
pub(crate) fn grpc_cancel(c: &mut C, token: u32) -> HR<()> {
    c.data_mut().grpc.remove(&token).ok_or(Status::NotFound)?;
    Ok(())
}

/// `proxy_grpc_close`: cancels a call; half-closes a stream (its answer still comes).
pub(crate) fn grpc_close(c: &mut C, token: u32) -> HR<()> {
    let d = c.data_mut();
    d.grpc.get(&token).ok_or(Status::NotFound)?;
    if is_call(token) {
        d.grpc.remove(&token);
    }
    Ok(())
}

/// The callbacks a finished gRPC callout makes, in Envoy's order: a call gets its
/// message (`on_grpc_receive`) or, on error, `on_grpc_close`; a stream gets initial
/// metadata, the message, trailing metadata, then `on_grpc_close`. A timed-out call
/// closes with UNAVAILABLE "upstream request timeout" (the async client's router reply,
/// trailers-only).
pub(crate) fn grpc_events(token: u32, g: PendingGrpc) -> Vec<GrpcEvent> {
    let r = g.reply;
    let meta =
        |m: &[(String, String)]| HeaderMap::from_pairs(m.iter().map(|(k, v)| (k, v.as_bytes())));
    if g.timed_out {
        return vec![GrpcEvent::Close(
            status::UNAVAILABLE,
            "upstream request timeout".into(),
        )];
    }
    if is_call(token) {
        return if r.status == status::OK {
            vec![GrpcEvent::Message(r.response.into_bytes())]
        } else {
            vec![GrpcEvent::Close(r.status, r.message)]
        };
    }
    let mut ev = Vec::new();
    if !r.initial_metadata.is_empty() {
        ev.push(GrpcEvent::InitialMetadata(meta(&r.initial_metadata)));
    }
    if !r.response.is_empty() {
        ev.push(GrpcEvent::Message(r.response.clone().into_bytes()));
    }
    if !r.trailing_metadata.is_empty() {
        ev.push(GrpcEvent::TrailingMetadata(meta(&r.trailing_metadata)));
    }
    ev.push(GrpcEvent::Close(r.status, r.message));
    ev
}
