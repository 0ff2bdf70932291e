//! The `env` host functions of proxy-wasm ABI 0.2.1, with Envoy's statuses.

use wasmtime::{Caller, Linker};

use crate::abi::{buffer, map, stream, MetricType, Status};
use crate::headers::HeaderMap;
use crate::types::{LocalReply, LocalReplySource, UpstreamReply};
use crate::vm::{PendingCall, Phase, StreamData, VmState};
use crate::worker::Event;

/// Every `env` import the host provides.
pub const NAMES: &[&str] = &[
    "proxy_log",
    "proxy_get_log_level",
    "proxy_get_current_time_nanoseconds",
    "proxy_set_tick_period_milliseconds",
    "proxy_get_buffer_bytes",
    "proxy_set_buffer_bytes",
    "proxy_get_header_map_pairs",
    "proxy_set_header_map_pairs",
    "proxy_get_header_map_value",
    "proxy_replace_header_map_value",
    "proxy_remove_header_map_value",
    "proxy_add_header_map_value",
    "proxy_get_header_map_size",
    "proxy_get_property",
    "proxy_set_property",
    "proxy_get_shared_data",
    "proxy_set_shared_data",
    "proxy_register_shared_queue",
    "proxy_resolve_shared_queue",
    "proxy_dequeue_shared_queue",
    "proxy_enqueue_shared_queue",
    "proxy_continue_stream",
    "proxy_close_stream",
    "proxy_send_local_response",
    "proxy_http_call",
    "proxy_grpc_call",
    "proxy_grpc_stream",
    "proxy_grpc_send",
    "proxy_grpc_cancel",
    "proxy_grpc_close",
    "proxy_get_status",
    "proxy_set_effective_context",
    "proxy_call_foreign_function",
    "proxy_done",
    "proxy_define_metric",
    "proxy_get_metric",
    "proxy_record_metric",
    "proxy_increment_metric",
];

pub(crate) type C<'a> = Caller<'a, VmState>;

/// A host function failure: a status for the guest, or a trap to propagate.
pub(crate) enum HErr {
    St(Status),
    Trap(wasmtime::Error),
}
impl From<Status> for HErr {
    fn from(s: Status) -> Self {
        HErr::St(s)
    }
}
pub(crate) type HR<T> = Result<T, HErr>;

pub(crate) fn done(r: HR<()>) -> wasmtime::Result<i32> {
    match r {
        Ok(()) => Ok(0),
        Err(HErr::St(s)) => Ok(s as i32),
        Err(HErr::Trap(e)) => Err(e),
    }
}

pub(crate) fn read(c: &C, ptr: i32, len: i32) -> HR<Vec<u8>> {
    let m = c.data().memory.ok_or(Status::InvalidMemoryAccess)?;
    let s = ptr as u32 as usize;
    let e = s
        .checked_add(len as u32 as usize)
        .ok_or(Status::InvalidMemoryAccess)?;
    Ok(m.data(c)
        .get(s..e)
        .ok_or(Status::InvalidMemoryAccess)?
        .to_vec())
}

pub(crate) fn read_str(c: &C, ptr: i32, len: i32) -> HR<String> {
    Ok(String::from_utf8_lossy(&read(c, ptr, len)?).into_owned())
}

pub(crate) fn write(c: &mut C, ptr: i32, data: &[u8]) -> HR<()> {
    let m = c.data().memory.ok_or(Status::InvalidMemoryAccess)?;
    let s = ptr as u32 as usize;
    let e = s
        .checked_add(data.len())
        .ok_or(Status::InvalidMemoryAccess)?;
    m.data_mut(c)
        .get_mut(s..e)
        .ok_or(Status::InvalidMemoryAccess)?
        .copy_from_slice(data);
    Ok(())
}

pub(crate) fn write_u32(c: &mut C, ptr: i32, v: u32) -> HR<()> {
    write(c, ptr, &v.to_le_bytes())
}

/// Copies `data` into guest memory via the guest allocator and stores ptr/len at the
/// return pointers (ptr 0 / len 0 for empty data).
pub(crate) fn give(c: &mut C, data: &[u8], ptr_out: i32, len_out: i32) -> HR<()> {
    if data.is_empty() {
        write_u32(c, ptr_out, 0)?;
        return write_u32(c, len_out, 0);
    }
    let alloc = c.data().alloc.clone().ok_or(Status::InternalFailure)?;
    let p = alloc.call(&mut *c, data.len() as i32).map_err(HErr::Trap)?;
    if p == 0 {
        return Err(Status::InvalidMemoryAccess.into());
    }
    write(c, p, data)?;
    write_u32(c, ptr_out, p as u32)?;
    write_u32(c, len_out, data.len() as u32)
}

fn stream_mut<'a>(c: &'a mut C) -> HR<&'a mut StreamData> {
    let cur = c.data().current;
    Ok(c.data_mut()
        .streams
        .get_mut(&cur)
        .ok_or(Status::BadArgument)?)
}

/// The header map `ty` as it exists in the current context and phase.
fn header_map(d: &mut VmState, ty: i32) -> HR<&mut HeaderMap> {
    if ty == map::HTTP_CALL_RESPONSE_HEADERS || ty == map::HTTP_CALL_RESPONSE_TRAILERS {
        let r = d.call_response.as_mut().ok_or(Status::BadArgument)?;
        return Ok(if ty == map::HTTP_CALL_RESPONSE_HEADERS {
            &mut r.0
        } else {
            &mut r.2
        });
    }
    // Envoy: a map that does not exist now is BAD_ARGUMENT, except in the access-log
    // phase (on_log/on_done/on_delete), where it is NOT_FOUND.
    let missing = if matches!(d.phase, Phase::Log | Phase::Done) {
        Status::NotFound
    } else {
        Status::BadArgument
    };
    let cur = d.current;
    let s = d.streams.get_mut(&cur).ok_or(missing)?;
    match ty {
        map::REQUEST_HEADERS => Ok(&mut s.req_headers),
        map::RESPONSE_HEADERS => Ok(s.resp_headers.as_mut().ok_or(missing)?),
        _ => Err(missing.into()),
    }
}

fn log(c: &mut C, level: i32, ptr: i32, len: i32) -> HR<()> {
    let msg = read_str(c, ptr, len)?;
    if !(0..=5).contains(&level) {
        return Err(Status::BadArgument.into());
    }
    let d = c.data();
    d.env.process.log(crate::env::LogRecord {
        time_ns: d.env.clock.now(),
        vm: d.vm_name.clone(),
        level: level as u8,
        message: msg,
    });
    Ok(())
}

fn get_buffer(c: &mut C, ty: i32, start: i32, max: i32, rp: i32, rl: i32) -> HR<()> {
    let d = c.data();
    let phase = d.phase;
    let buf: Vec<u8> = match ty {
        buffer::PLUGIN_CONFIGURATION => d.plugin_config.clone().ok_or(Status::NotFound)?,
        buffer::VM_CONFIGURATION => d.vm_config.clone().ok_or(Status::NotFound)?,
        buffer::HTTP_CALL_RESPONSE_BODY => {
            d.call_response.as_ref().ok_or(Status::NotFound)?.1.clone()
        }
        buffer::REQUEST_BODY if phase == Phase::RequestBody => d
            .streams
            .get(&d.current)
            .ok_or(Status::NotFound)?
            .req_body
            .clone(),
        buffer::RESPONSE_BODY if phase == Phase::ResponseBody => d
            .streams
            .get(&d.current)
            .ok_or(Status::NotFound)?
            .resp_body
            .clone(),
        _ => return Err(Status::NotFound.into()),
    };
    let start = start as u32 as usize;
    if start > buf.len() {
        return Err(Status::BadArgument.into());
    }
    let end = start.saturating_add(max as u32 as usize).min(buf.len());
    give(c, &buf[start..end], rp, rl)
}

fn set_buffer(c: &mut C, ty: i32, start: i32, size: i32, ptr: i32, len: i32) -> HR<()> {
    let data = read(c, ptr, len)?;
    let phase = c.data().phase;
    let s = stream_mut(c).map_err(|_| Status::NotFound)?;
    let buf = match ty {
        buffer::REQUEST_BODY if phase == Phase::RequestBody => &mut s.req_body,
        buffer::RESPONSE_BODY if phase == Phase::ResponseBody => &mut s.resp_body,
        _ => return Err(Status::NotFound.into()),
    };
    let (start, size) = (start as u32 as usize, size as u32 as usize);
    // Envoy's Buffer semantics: prepend, replace all, or append.
    if start == 0 {
        if size == 0 {
            buf.splice(0..0, data);
        } else if size >= buf.len() {
            *buf = data;
        } else {
            return Err(Status::BadArgument.into());
        }
    } else if start >= buf.len() {
        buf.extend_from_slice(&data);
    } else {
        return Err(Status::BadArgument.into());
    }
    Ok(())
}

fn u64le(v: u64) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

/// Envoy attribute lookup. `path` is the raw `\0`-joined path.
fn property(d: &VmState, path: &[u8]) -> Option<Vec<u8>> {
    let s = d.streams.get(&d.current);
    if let Some(v) = s
        .and_then(|s| s.props.get(path))
        .or_else(|| d.root_props.get(path))
    {
        return Some(v.clone());
    }
    let segs: Vec<&[u8]> = path.split(|b| *b == 0).collect();
    if segs.iter().any(|s| s.contains(&b'.')) {
        return None;
    }
    let name = segs
        .iter()
        .map(|s| String::from_utf8_lossy(s))
        .collect::<Vec<_>>()
        .join(".");
    let p = &d.env.plugin;
    let text = |v: &str| Some(v.as_bytes().to_vec());
    match name.as_str() {
        "plugin_name" => return text(&p.name),
        "plugin_root_id" => return text(&p.root_id),
        "plugin_vm_id" => return text(&p.vm_id),
        "node.id" => return text("fusewire-host-test"),
        "node.cluster" => return text("fusewire-host-test"),
        _ => {}
    }
    let s = s?;
    let fin = s.final_info.as_ref();
    match name.as_str() {
        "xds.cluster_name" | "cluster_name" => text(&s.cluster_name),
        "xds.route_name" | "route_name" => text(&s.route_name),
        "upstream.address" => s
            .upstream_address
            .as_ref()
            .map(|a| format!("{a}:{}", s.upstream_port).into_bytes()),
        "upstream.port" => s
            .upstream_address
            .as_ref()
            .map(|_| u64le(s.upstream_port as u64)),
        "source.address" => text("10.0.0.1:50000"),
        "source.port" => Some(u64le(50000)),
        "destination.address" => text("10.0.0.100:8080"),
        "destination.port" => Some(u64le(8080)),
        "request.path" => s.req_headers.get(":path").map(|v| v.to_vec()),
        "request.url_path" => s
            .req_headers
            .get(":path")
            .map(|v| v.split(|b| *b == b'?').next().unwrap_or(&[]).to_vec()),
        "request.host" => s.req_headers.get(":authority").map(|v| v.to_vec()),
        "request.method" => s.req_headers.get(":method").map(|v| v.to_vec()),
        "request.scheme" => s.req_headers.get(":scheme").map(|v| v.to_vec()),
        "request.id" => text(&s.request_id),
        "request.protocol" => text("HTTP/1.1"),
        "request.time" => Some(u64le(s.start_wall_ns)),
        "request.duration" => fin.map(|f| u64le(f.duration_ns)),
        "response.code" => s.response_code.map(|c| u64le(c as u64)),
        "response.code_details" => fin.map(|f| f.code_details.clone().into_bytes()),
        "response.flags" => fin.map(|f| u64le(f.flags)),
        "response.backend_latency" => fin.and_then(|f| f.backend_latency_ns).map(u64le),
        _ => None,
    }
}

fn http_call(c: &mut C, a: [i32; 9], ret: i32) -> HR<()> {
    let cluster = read_str(c, a[0], a[1])?;
    let headers = HeaderMap::decode(&read(c, a[2], a[3])?).map_err(|_| Status::BadArgument)?;
    let _body = read(c, a[4], a[5])?;
    let _trailers = HeaderMap::decode(&read(c, a[6], a[7])?).map_err(|_| Status::BadArgument)?;
    let timeout_ms = a[8] as u32 as u64;
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
    let token = d.next_token;
    d.next_token += 1;
    let now = d.env.clock.now();
    let timeout_ns = timeout_ms * 1_000_000;
    let (at, timed_out) = match &reply {
        UpstreamReply::Response { latency_ns, .. } | UpstreamReply::Reset { latency_ns, .. } => {
            if timeout_ns > 0 && *latency_ns > timeout_ns {
                (now + timeout_ns, true)
            } else {
                (now + latency_ns, false)
            }
        }
        UpstreamReply::Hang => (now + timeout_ns, true),
    };
    d.calls.insert(
        token,
        PendingCall {
            context_id: d.current,
            reply,
        },
    );
    if !(timed_out && timeout_ns == 0) {
        d.env
            .bus
            .post(d.worker, at, Event::CallDone { token, timed_out });
    }
    write_u32(c, ret, token)
}

fn send_local_response(c: &mut C, a: [i32; 8]) -> HR<()> {
    let details = read_str(c, a[1], a[2])?;
    let body = read_str(c, a[3], a[4])?;
    let headers = HeaderMap::decode(&read(c, a[5], a[6])?).map_err(|_| Status::BadArgument)?;
    let s = stream_mut(c)?;
    if s.local_reply.is_none() {
        s.local_reply = Some(LocalReply {
            source: LocalReplySource::Filter,
            status: a[0] as u32 as u16,
            details,
            headers: headers
                .pairs()
                .iter()
                .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
                .collect(),
            body,
            grpc_status: if a[7] < 0 { None } else { Some(a[7] as u32) },
        });
    }
    Ok(())
}

macro_rules! wrap {
    ($l:expr, $name:literal, |$c:ident $(, $a:ident : $t:ty)*| $body:expr) => {
        $l.func_wrap("env", $name, |mut $c: C, $($a: $t),*| -> wasmtime::Result<i32> {
            let $c = &mut $c;
            done((|| -> HR<()> { $body })())
        })?;
    };
}

#[allow(clippy::redundant_closure_call)]
pub(crate) fn add_to_linker(l: &mut Linker<VmState>) -> wasmtime::Result<()> {
    wrap!(l, "proxy_log", |c, level: i32, p: i32, n: i32| log(
        c, level, p, n
    ));
    wrap!(l, "proxy_get_log_level", |c, rp: i32| {
        let lv = c.data().env.log_level as u32;
        write_u32(c, rp, lv)
    });
    wrap!(l, "proxy_get_current_time_nanoseconds", |c, rp: i32| {
        let t = c.data().env.clock.wall();
        write(c, rp, &t.to_le_bytes())
    });
    wrap!(l, "proxy_set_tick_period_milliseconds", |c, period: i32| {
        let d = c.data_mut();
        d.tick_period_ms = period as u32;
        d.tick_gen += 1;
        if period != 0 {
            let at = d.env.clock.now() + period as u32 as u64 * 1_000_000;
            d.env
                .bus
                .post(d.worker, at, Event::Tick { gen: d.tick_gen });
        }
        Ok(())
    });
    wrap!(
        l,
        "proxy_get_buffer_bytes",
        |c, ty: i32, s: i32, m: i32, rp: i32, rl: i32| get_buffer(c, ty, s, m, rp, rl)
    );
    wrap!(
        l,
        "proxy_set_buffer_bytes",
        |c, ty: i32, s: i32, z: i32, p: i32, n: i32| set_buffer(c, ty, s, z, p, n)
    );
    wrap!(
        l,
        "proxy_get_header_map_pairs",
        |c, ty: i32, rp: i32, rl: i32| {
            let bytes = header_map(c.data_mut(), ty)?.encode();
            give(c, &bytes, rp, rl)
        }
    );
    wrap!(l, "proxy_get_header_map_size", |c, ty: i32, rp: i32| {
        let n = header_map(c.data_mut(), ty)?.encode().len() as u32;
        write_u32(c, rp, n)
    });
    wrap!(
        l,
        "proxy_set_header_map_pairs",
        |c, ty: i32, p: i32, n: i32| {
            let m = HeaderMap::decode(&read(c, p, n)?).map_err(|_| Status::BadArgument)?;
            *header_map(c.data_mut(), ty)? = m;
            Ok(())
        }
    );
    wrap!(
        l,
        "proxy_get_header_map_value",
        |c, ty: i32, kp: i32, kn: i32, rp: i32, rl: i32| {
            let k = read_str(c, kp, kn)?;
            let v = header_map(c.data_mut(), ty)?
                .get(&k)
                .ok_or(Status::NotFound)?
                .to_vec();
            give(c, &v, rp, rl)
        }
    );
    wrap!(
        l,
        "proxy_replace_header_map_value",
        |c, ty: i32, kp: i32, kn: i32, vp: i32, vn: i32| {
            let (k, v) = (read_str(c, kp, kn)?, read(c, vp, vn)?);
            header_map(c.data_mut(), ty)?.replace(&k, &v);
            Ok(())
        }
    );
    wrap!(
        l,
        "proxy_add_header_map_value",
        |c, ty: i32, kp: i32, kn: i32, vp: i32, vn: i32| {
            let (k, v) = (read_str(c, kp, kn)?, read(c, vp, vn)?);
            header_map(c.data_mut(), ty)?.add(&k, &v);
            Ok(())
        }
    );
    wrap!(
        l,
        "proxy_remove_header_map_value",
        |c, ty: i32, kp: i32, kn: i32| {
            let k = read_str(c, kp, kn)?;
            header_map(c.data_mut(), ty)?.remove(&k);
            Ok(())
        }
    );
    wrap!(
        l,
        "proxy_get_property",
        |c, pp: i32, pn: i32, rp: i32, rl: i32| {
            let path = read(c, pp, pn)?;
            let v = property(c.data(), &path).ok_or(Status::NotFound)?;
            give(c, &v, rp, rl)
        }
    );
    wrap!(
        l,
        "proxy_set_property",
        |c, pp: i32, pn: i32, vp: i32, vn: i32| {
            let (p, v) = (read(c, pp, pn)?, read(c, vp, vn)?);
            let d = c.data_mut();
            match d.streams.get_mut(&d.current) {
                Some(s) => s.props.insert(p, v),
                None => d.root_props.insert(p, v),
            };
            Ok(())
        }
    );
    wrap!(
        l,
        "proxy_get_shared_data",
        |c, kp: i32, kn: i32, rp: i32, rl: i32, rc: i32| {
            let k = read_str(c, kp, kn)?;
            let d = c.data();
            let (v, cas) = d
                .env
                .process
                .shared
                .get(&d.env.plugin.vm_id, &k)
                .ok_or(Status::NotFound)?;
            give(c, &v, rp, rl)?;
            write_u32(c, rc, cas)
        }
    );
    wrap!(
        l,
        "proxy_set_shared_data",
        |c, kp: i32, kn: i32, vp: i32, vn: i32, cas: i32| {
            let k = read_str(c, kp, kn)?;
            let v = if vp == 0 && vn == 0 {
                None
            } else {
                Some(read(c, vp, vn)?)
            };
            let d = c.data();
            match d.env.process.shared.set(
                d.env.cas_mode,
                &d.env.plugin.vm_id,
                &k,
                v.as_deref(),
                cas as u32,
            ) {
                Status::Ok => Ok(()),
                s => Err(s.into()),
            }
        }
    );
    wrap!(
        l,
        "proxy_register_shared_queue",
        |c, np: i32, nn: i32, rp: i32| {
            let n = read_str(c, np, nn)?;
            let d = c.data();
            let id = d
                .env
                .process
                .shared
                .register_queue(&d.env.plugin.vm_id, &n, d.worker);
            write_u32(c, rp, id)
        }
    );
    wrap!(
        l,
        "proxy_resolve_shared_queue",
        |c, vp: i32, vn: i32, np: i32, nn: i32, rp: i32| {
            let (vm, n) = (read_str(c, vp, vn)?, read_str(c, np, nn)?);
            let id = c
                .data()
                .env
                .process
                .shared
                .resolve_queue(&vm, &n)
                .ok_or(Status::NotFound)?;
            write_u32(c, rp, id)
        }
    );
    wrap!(
        l,
        "proxy_enqueue_shared_queue",
        |c, id: i32, p: i32, n: i32| {
            let v = read(c, p, n)?;
            let d = c.data();
            let owner = d.env.process.shared.enqueue(id as u32, &v)?;
            if let Some(w) = owner {
                d.env
                    .bus
                    .post(w, d.env.clock.now(), Event::QueueReady { queue: id as u32 });
            }
            Ok(())
        }
    );
    wrap!(
        l,
        "proxy_dequeue_shared_queue",
        |c, id: i32, rp: i32, rl: i32| {
            let v = c.data().env.process.shared.dequeue(id as u32)?;
            give(c, &v, rp, rl)
        }
    );
    wrap!(l, "proxy_continue_stream", |c, ty: i32| {
        let s = stream_mut(c).map_err(|_| Status::NotFound)?;
        match ty {
            stream::REQUEST => s.continue_request = true,
            stream::RESPONSE => s.continue_response = true,
            _ => return Err(Status::BadArgument.into()),
        }
        Ok(())
    });
    wrap!(l, "proxy_close_stream", |c, ty: i32| {
        let s = stream_mut(c).map_err(|_| Status::NotFound)?;
        match ty {
            stream::REQUEST | stream::RESPONSE => s.close = true,
            _ => return Err(Status::BadArgument.into()),
        }
        Ok(())
    });
    wrap!(
        l,
        "proxy_send_local_response",
        |c, st: i32, dp: i32, dn: i32, bp: i32, bn: i32, hp: i32, hn: i32, g: i32| {
            send_local_response(c, [st, dp, dn, bp, bn, hp, hn, g])
        }
    );
    wrap!(
        l,
        "proxy_http_call",
        |c,
         up: i32,
         un: i32,
         hp: i32,
         hn: i32,
         bp: i32,
         bn: i32,
         tp: i32,
         tn: i32,
         to: i32,
         rt: i32| http_call(c, [up, un, hp, hn, bp, bn, tp, tn, to], rt)
    );
    wrap!(
        l,
        "proxy_grpc_call",
        |c,
         up: i32,
         un: i32,
         _a: i32,
         _b: i32,
         _d: i32,
         _e: i32,
         _f: i32,
         _g: i32,
         _h: i32,
         _i: i32,
         _t: i32,
         _r: i32| {
            let cl = read_str(c, up, un)?;
            if c.data().env.clusters.contains_key(&cl) {
                Err(Status::Unimplemented.into())
            } else {
                Err(Status::BadArgument.into())
            }
        }
    );
    wrap!(
        l,
        "proxy_grpc_stream",
        |c, up: i32, un: i32, _a: i32, _b: i32, _d: i32, _e: i32, _f: i32, _g: i32, _r: i32| {
            let cl = read_str(c, up, un)?;
            if c.data().env.clusters.contains_key(&cl) {
                Err(Status::Unimplemented.into())
            } else {
                Err(Status::BadArgument.into())
            }
        }
    );
    wrap!(
        l,
        "proxy_grpc_send",
        |_c, _t: i32, _p: i32, _n: i32, _e: i32| Err(Status::NotFound.into())
    );
    wrap!(l, "proxy_grpc_cancel", |_c, _t: i32| Err(
        Status::NotFound.into()
    ));
    wrap!(l, "proxy_grpc_close", |_c, _t: i32| Err(
        Status::NotFound.into()
    ));
    wrap!(l, "proxy_get_status", |c, rc: i32, rp: i32, rl: i32| {
        write_u32(c, rc, 0)?;
        give(c, &[], rp, rl)
    });
    wrap!(l, "proxy_set_effective_context", |c, ctx: i32| {
        let d = c.data_mut();
        let ctx = ctx as u32;
        if ctx != 1 && !d.streams.contains_key(&ctx) {
            return Err(Status::BadArgument.into());
        }
        d.current = ctx;
        Ok(())
    });
    wrap!(
        l,
        "proxy_call_foreign_function",
        |_c, _np: i32, _nn: i32, _ap: i32, _an: i32, _rp: i32, _rl: i32| {
            Err(Status::NotFound.into())
        }
    );
    wrap!(l, "proxy_done", |c| {
        c.data_mut().done_called = true;
        Ok(())
    });
    wrap!(
        l,
        "proxy_define_metric",
        |c, ty: i32, np: i32, nn: i32, rp: i32| {
            let ty = MetricType::from_abi(ty).ok_or(Status::BadArgument)?;
            let name = read_str(c, np, nn)?;
            let d = c.data_mut();
            let stat = d.env.process.stats.define(ty, &name);
            d.metric_ids.push(stat);
            // Envoy tags ids with the type in the low bits; any unique id works for guests.
            let id = ((d.metric_ids.len() as u32) << 2) | ty as u32;
            write_u32(c, rp, id)
        }
    );
    fn stat(d: &VmState, id: i32) -> HR<usize> {
        let idx = (id as u32 >> 2) as usize;
        Ok(*d
            .metric_ids
            .get(idx.wrapping_sub(1))
            .ok_or(Status::NotFound)?)
    }
    wrap!(l, "proxy_get_metric", |c, id: i32, rp: i32| {
        let st = stat(c.data(), id)?;
        let v = c.data().env.process.stats.get(st)?;
        write(c, rp, &v.to_le_bytes())
    });
    wrap!(l, "proxy_record_metric", |c, id: i32, v: i64| {
        let st = stat(c.data(), id)?;
        match c.data().env.process.stats.record(st, v as u64) {
            Status::Ok => Ok(()),
            s => Err(s.into()),
        }
    });
    wrap!(l, "proxy_increment_metric", |c, id: i32, v: i64| {
        let st = stat(c.data(), id)?;
        match c.data().env.process.stats.increment(st, v) {
            Status::Ok => Ok(()),
            s => Err(s.into()),
        }
    });
    Ok(())
}
