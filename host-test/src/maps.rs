//! Which header maps and buffers exist for the current context and callback, following
//! Envoy's wasm `Context::getConstMap` / `getMap` / `getBuffer`
//! (source/extensions/common/wasm/context.cc).
//!
//! Strict lifetimes (the default, as Envoy): a stream map is served only while Envoy holds
//! a pointer to it — from when its frame reaches the filter until that callback returns
//! Continue (request side: also `continue_stream`). In `on_log` (the access-log phase)
//! the request headers, response headers and response trailers are readable again (not
//! writable); in `on_done` / `on_delete` no stream map exists. Lenient lifetimes: a map,
//! once it exists, stays readable and writable until the stream is deleted.

use crate::abi::{buffer, map, Status};
use crate::headers::HeaderMap;
use crate::vm::{Phase, StreamData, VmState};

/// The map `ty` as a read (`get_header_map_value` / `_pairs`) sees it; `Ok(None)` when it
/// does not exist now.
pub(crate) fn read(d: &VmState, ty: i32) -> Result<Option<&HeaderMap>, Status> {
    if !(0..=map::HTTP_CALL_RESPONSE_TRAILERS).contains(&ty) {
        return Err(Status::BadArgument);
    }
    let cb = &d.callback;
    match ty {
        map::HTTP_CALL_RESPONSE_HEADERS => return Ok(cb.http.as_ref().map(|r| &r.0)),
        // Envoy serves `response->trailers()`, null when the response had none (a
        // read is then BAD_ARGUMENT: until 2026-12-07 an empty map here).
        map::HTTP_CALL_RESPONSE_TRAILERS => {
            return Ok(cb.http.as_ref().map(|r| &r.2).filter(|t| !t.is_empty()))
        }
        map::GRPC_INITIAL_METADATA => return Ok(cb.grpc_initial.as_ref()),
        map::GRPC_TRAILING_METADATA => return Ok(cb.grpc_trailing.as_ref()),
        _ => {}
    }
    let Some(s) = d.streams.get(&d.current) else {
        return Ok(None);
    };
    let strict = d.env.strict_lifetimes;
    Ok(match d.phase {
        // The access-log phase: Envoy's access_log_* maps (no request trailers).
        Phase::Log => match ty {
            map::REQUEST_HEADERS => Some(&s.req_headers),
            map::RESPONSE_HEADERS => s.resp_headers.as_ref(),
            map::RESPONSE_TRAILERS => s.resp_trailers.as_ref(),
            _ => None,
        },
        Phase::Done | Phase::Delete if strict => None,
        _ if strict => existing(s, ty).filter(|_| is_live(s, ty)),
        _ => existing(s, ty),
    })
}

/// Status of a value read on a map that does not exist: NOT_FOUND in the access-log
/// phase, BAD_ARGUMENT elsewhere.
pub(crate) fn missing(d: &VmState) -> Status {
    let log_phase = match d.phase {
        Phase::Log => true,
        Phase::Done | Phase::Delete => !d.env.strict_lifetimes,
        _ => false,
    };
    if log_phase {
        Status::NotFound
    } else {
        Status::BadArgument
    }
}

/// The map `ty` for a mutation or `get_header_map_size` (Envoy's `getMap`): only the
/// four stream maps, never the callout maps.
pub(crate) fn write(d: &mut VmState, ty: i32) -> Result<&mut HeaderMap, Status> {
    let strict = d.env.strict_lifetimes;
    let cur = d.current;
    let (phase, eos) = (d.phase, d.end_of_stream);
    let s = d.streams.get_mut(&cur).ok_or(Status::BadArgument)?;
    // Envoy `getMap`: in a body callback at the stream's end, a stream without
    // trailers gets an empty trailer map (`addDecodedTrailers` / `addEncodedTrailers`)
    // that goes on after the body (until 2026-12-07 BAD_ARGUMENT here: found by
    // review).
    if eos {
        match (ty, phase) {
            (map::REQUEST_TRAILERS, Phase::RequestBody) if s.req_trailers.is_none() => {
                s.req_trailers = Some(HeaderMap::new());
                s.req_trailers_live = true;
            }
            (map::RESPONSE_TRAILERS, Phase::ResponseBody) if s.resp_trailers.is_none() => {
                s.resp_trailers = Some(HeaderMap::new());
                s.resp_trailers_live = true;
            }
            _ => {}
        }
    }
    if strict && !is_live(s, ty) {
        return Err(Status::BadArgument);
    }
    match ty {
        map::REQUEST_HEADERS => Some(&mut s.req_headers),
        map::REQUEST_TRAILERS => s.req_trailers.as_mut(),
        map::RESPONSE_HEADERS => s.resp_headers.as_mut(),
        map::RESPONSE_TRAILERS => s.resp_trailers.as_mut(),
        _ => None,
    }
    .ok_or(Status::BadArgument)
}

fn is_live(s: &StreamData, ty: i32) -> bool {
    match ty {
        map::REQUEST_HEADERS => s.req_headers_live,
        map::REQUEST_TRAILERS => s.req_trailers_live,
        map::RESPONSE_HEADERS => s.resp_headers_live,
        map::RESPONSE_TRAILERS => s.resp_trailers_live,
        _ => false,
    }
}

fn existing(s: &StreamData, ty: i32) -> Option<&HeaderMap> {
    match ty {
        map::REQUEST_HEADERS => Some(&s.req_headers),
        map::REQUEST_TRAILERS => s.req_trailers.as_ref(),
        map::RESPONSE_HEADERS => s.resp_headers.as_ref(),
        map::RESPONSE_TRAILERS => s.resp_trailers.as_ref(),
        _ => None,
    }
}

/// `proxy_get_header_map_size`: Envoy's `HeaderMap::byteSize()` (keys + values).
pub(crate) fn byte_size(m: &HeaderMap) -> u32 {
    m.pairs()
        .iter()
        .map(|(k, v)| k.len() + v.len())
        .sum::<usize>() as u32
}

/// What `proxy_get_buffer_bytes` reads: Err(NOT_FOUND) for a buffer that does not
/// exist; the stream bodies outside their frame are an empty buffer (Envoy hands the
/// guest an empty wrapper), so are network and call-data buffers here.
pub(crate) fn read_buffer(d: &VmState, ty: i32) -> Result<Vec<u8>, Status> {
    let s = d.streams.get(&d.current);
    match ty {
        buffer::PLUGIN_CONFIGURATION => d.plugin_config.clone().ok_or(Status::NotFound),
        buffer::VM_CONFIGURATION => Ok(d.env.plugin.vm_configuration.clone().into_bytes()),
        buffer::HTTP_CALL_RESPONSE_BODY => d
            .callback
            .http
            .as_ref()
            .map(|r| r.1.clone())
            .ok_or(Status::NotFound),
        buffer::GRPC_RECEIVE_BUFFER => Ok(d.callback.grpc_message.clone().unwrap_or_default()),
        buffer::REQUEST_BODY => Ok(s
            .filter(|s| s.req_body_live)
            .map(|s| s.req_body.clone())
            .unwrap_or_default()),
        buffer::RESPONSE_BODY => Ok(s
            .filter(|s| s.resp_body_live)
            .map(|s| s.resp_body.clone())
            .unwrap_or_default()),
        buffer::DOWNSTREAM_DATA | buffer::UPSTREAM_DATA | buffer::CALL_DATA => Ok(Vec::new()),
        _ => Err(Status::BadArgument),
    }
}

/// The body `proxy_set_buffer_bytes` may change; BAD_ARGUMENT for a body outside its
/// frame or a read-only buffer, NOT_FOUND for one that does not exist.
pub(crate) fn write_buffer(d: &mut VmState, ty: i32) -> Result<&mut Vec<u8>, Status> {
    if ty == buffer::PLUGIN_CONFIGURATION && d.plugin_config.is_none()
        || ty == buffer::HTTP_CALL_RESPONSE_BODY && d.callback.http.is_none()
    {
        return Err(Status::NotFound);
    }
    let cur = d.current;
    let s = d.streams.get_mut(&cur).ok_or(Status::BadArgument)?;
    match ty {
        buffer::REQUEST_BODY if s.req_body_live => Ok(&mut s.req_body),
        buffer::RESPONSE_BODY if s.resp_body_live => Ok(&mut s.resp_body),
        _ => Err(Status::BadArgument),
    }
}
