//! `proxy_get_property`: Envoy's attributes (source/extensions/filters/common/expr/
//! context.cc, `RequestWrapper` / `ResponseWrapper` / `XdsWrapper`, and the wasm
//! `Context::findValue` plugin tokens).
//!
//! Everything but `plugin_*` and `xds.node` needs a stream's info, so root contexts
//! (ticks, callouts, configure) see only those. Header-derived `request.*` values read
//! the live request header map (strict lifetimes: NOT_FOUND once the request headers
//! have continued, readable again in `on_log`); `response.code` is set when the
//! upstream response starts, for a local reply only once its headers left the filter;
//! `response.code_details` and `response.flags` as soon as Envoy sets them. The bare
//! `cluster_name` / `route_name` no longer exist, nor does a top-level `node`;
//! `xds.route_name` is NOT_FOUND when no route matched and `xds.cluster_name` also
//! when the route's cluster does not exist (Envoy keeps no cluster info for it).

use crate::headers::HeaderMap;
use crate::vm::{Phase, StreamData, VmState};

fn u64le(v: u64) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

/// The harness's node `id` and `cluster`.
const NODE_NAME: &str = "fusewire-host-test";

/// `xds.node` as Envoy serializes a message attribute: the protobuf wire bytes of
/// `envoy.config.core.v3.Node { id: 1, cluster: 2 }`.
fn node_message() -> Vec<u8> {
    let mut m = Vec::with_capacity(2 * (NODE_NAME.len() + 2));
    for field in [0x0a, 0x12] {
        m.push(field);
        m.push(NODE_NAME.len() as u8);
        m.extend_from_slice(NODE_NAME.as_bytes());
    }
    m
}

/// A map-valued attribute in the pairs encoding (an empty map is the 4-byte count 0).
fn pairs(m: Option<&HeaderMap>) -> Vec<u8> {
    match m {
        Some(m) if !m.is_empty() => m.encode(),
        _ => vec![0; 4],
    }
}

/// The request headers as attributes see them (Envoy's activation request headers).
fn request_view<'a>(d: &VmState, s: &'a StreamData) -> Option<&'a HeaderMap> {
    if !d.env.strict_lifetimes || s.req_headers_live || d.phase == Phase::Log {
        Some(&s.req_headers)
    } else {
        None
    }
}

fn response_view<'a>(d: &VmState, live: bool, m: &'a Option<HeaderMap>) -> Option<&'a HeaderMap> {
    if !d.env.strict_lifetimes || live || d.phase == Phase::Log {
        m.as_ref()
    } else {
        None
    }
}

/// The value at `path` (segments joined by `\0`), or None (NOT_FOUND).
pub(crate) fn get(d: &VmState, path: &[u8]) -> Option<Vec<u8>> {
    let s = d.streams.get(&d.current);
    if let Some(v) = s.and_then(|s| s.props.get(path)) {
        return Some(v.clone());
    }
    let segs: Vec<String> = path
        .split(|b| *b == 0)
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    let text = |v: &str| Some(v.as_bytes().to_vec());
    let p = d.plugin();
    let init = d.phase == Phase::Init;
    match segs
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        // During the start functions only the VM context exists: no plugin, no root id.
        ["plugin_name"] if !init => return text(&p.name),
        ["plugin_root_id"] => return text(if init { "" } else { &p.root_id }),
        ["plugin_vm_id"] => return text(&p.vm_id),
        // The bootstrap's `node` (a core.v3.Node message: its wire bytes, or a field).
        ["xds", "node"] if !init => return Some(node_message()),
        ["xds", "node", "id"] | ["xds", "node", "cluster"] if !init => return text(NODE_NAME),
        _ => {}
    }
    let s = s?;
    let fin = s.final_info.as_ref();
    let req = request_view(d, s);
    let header = |k: &str| req.and_then(|h| h.get(k)).map(|v| v.to_vec());
    match segs
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["xds", "cluster_name"] => s.cluster_name.as_deref().and_then(text),
        ["xds", "route_name"] => s.route_name.as_deref().and_then(text),
        ["upstream", "address"] => s
            .upstream_address
            .as_ref()
            .map(|a| format!("{a}:{}", s.upstream_port).into_bytes()),
        ["upstream", "port"] => s
            .upstream_address
            .as_ref()
            .map(|_| u64le(s.upstream_port as u64)),
        ["source", "address"] => text("10.0.0.1:50000"),
        ["source", "port"] => Some(u64le(50000)),
        ["destination", "address"] => text("10.0.0.100:8080"),
        ["destination", "port"] => Some(u64le(8080)),
        ["request", "path"] => header(":path"),
        ["request", "url_path"] => {
            header(":path").map(|v| v.split(|b| *b == b'?').next().unwrap_or(&[]).to_vec())
        }
        ["request", "host"] => header(":authority"),
        ["request", "method"] => header(":method"),
        ["request", "scheme"] => header(":scheme"),
        ["request", "id"] => header("x-request-id"),
        ["request", "useragent"] => header("user-agent"),
        ["request", "referer"] => header("referer"),
        ["request", "headers"] => Some(pairs(req)),
        ["request", "headers", k] => header(k),
        ["request", "protocol"] => text("HTTP/1.1"),
        ["request", "time"] => Some(u64le(s.start_wall_ns)),
        ["request", "duration"] => fin.map(|f| u64le(f.duration_ns)),
        ["response", "code"] => s.response_code.map(|c| u64le(c as u64)),
        ["response", "code_details"] => s.code_details.clone().map(String::into_bytes),
        ["response", "flags"] => Some(u64le(s.flags)),
        ["response", "headers"] => Some(pairs(response_view(
            d,
            s.resp_headers_live,
            &s.resp_headers,
        ))),
        ["response", "headers", k] => response_view(d, s.resp_headers_live, &s.resp_headers)
            .and_then(|h| h.get(k))
            .map(|v| v.to_vec()),
        ["response", "trailers"] => Some(pairs(response_view(
            d,
            s.resp_trailers_live,
            &s.resp_trailers,
        ))),
        ["response", "trailers", k] => response_view(d, s.resp_trailers_live, &s.resp_trailers)
            .and_then(|h| h.get(k))
            .map(|v| v.to_vec()),
        ["response", "backend_latency"] => fin.and_then(|f| f.backend_latency_ns).map(u64le),
        _ => None,
    }
}
