//! The `env` host functions of proxy-wasm ABI 0.2.1, with Envoy's statuses.

use wasmtime::{Caller, Linker};

use crate::abi::{stream, MetricType, Status};
use crate::headers::HeaderMap;
use crate::maps;
use crate::types::{LocalReply, LocalReplySource};
use crate::vm::VmState;
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
    let outer = c.data_mut().restricted.replace(MALLOC_ALLOWED);
    let p = alloc.call(&mut *c, data.len() as i32);
    c.data_mut().restricted = outer;
    let p = p.map_err(HErr::Trap)?;
    if p == 0 {
        return Err(Status::InvalidMemoryAccess.into());
    }
    write(c, p, data)?;
    write_u32(c, ptr_out, p as u32)?;
    write_u32(c, len_out, data.len() as u32)
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
    let buf = maps::read_buffer(c.data(), ty)?;
    // cpp-host: a start past the end reads nothing (OK, empty), never an error.
    let start = (start as u32 as usize).min(buf.len());
    let end = start.saturating_add(max as u32 as usize).min(buf.len());
    give(c, &buf[start..end], rp, rl)
}

fn set_buffer(c: &mut C, ty: i32, start: i32, size: i32, ptr: i32, len: i32) -> HR<()> {
    let data = read(c, ptr, len)?;
    let buf = maps::write_buffer(c.data_mut(), ty)?;
    let (start, size) = (start as u32 as usize, size as u32 as usize);
    // Envoy's `Buffer::copyFrom`: at 0, drain `size` bytes (at most all) and prepend
    // (a prepend, a replacement of the head, or of it all); at or past the end,
    // append; anything else BAD_ARGUMENT. (Until 2026-12-07 a head shorter than the
    // buffer was BAD_ARGUMENT here: found by review.)
    if start == 0 {
        let n = size.min(buf.len());
        buf.splice(0..n, data);
    } else if start >= buf.len() {
        buf.extend_from_slice(&data);
    } else {
        return Err(Status::BadArgument.into());
    }
    Ok(())
}

/// `proxy_send_local_response`. Envoy returns OK in every context; without a stream
/// (root context) nothing happens. Details have whitespace replaced by `_`; a gRPC
/// status outside 0..=16 (the SDKs pass -1) means "none".
fn send_local_response(c: &mut C, a: [i32; 8]) -> HR<()> {
    let details = read_str(c, a[1], a[2])?;
    let body = read_str(c, a[3], a[4])?;
    // cpp-host's `PairsUtil::toPairs` reads malformed pairs as none: the reply still goes.
    let headers = HeaderMap::decode(&read(c, a[5], a[6])?).unwrap_or_default();
    let d = c.data_mut();
    // cpp-host `exports::send_local_response` raises the VM-wide stop flag on success.
    d.stop_next = true;
    let cur = d.current;
    let Some(s) = d.streams.get_mut(&cur) else {
        return Ok(());
    };
    if s.local_reply.is_none() {
        d.effects.insert(cur);
        let grpc = a[7] as u32;
        s.local_reply = Some(LocalReply {
            source: LocalReplySource::Filter,
            status: a[0] as u32 as u16,
            details: details
                .chars()
                .map(|ch| if ch.is_whitespace() { '_' } else { ch })
                .collect(),
            headers: headers
                .pairs()
                .iter()
                .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
                .collect(),
            body,
            grpc_status: (grpc <= crate::grpc::status::MAX_KNOWN).then_some(grpc),
        });
    }
    Ok(())
}

/// `proxy_continue_stream` / `proxy_close_stream` stream-type check: request and
/// response act on a stream (OK and no effect without one), downstream is an OK no-op
/// for HTTP, upstream is UNIMPLEMENTED for continue, anything else BAD_ARGUMENT.
fn stream_type(ty: i32, continuing: bool) -> HR<bool> {
    match ty {
        stream::REQUEST | stream::RESPONSE => Ok(true),
        stream::DOWNSTREAM => Ok(false),
        stream::UPSTREAM if continuing => Err(Status::Unimplemented.into()),
        stream::UPSTREAM => Ok(false),
        _ => Err(Status::BadArgument.into()),
    }
}

/// What cpp-host's `WasmBase::startVm` allows while the start functions run.
pub(crate) const START_ALLOWED: &[&str] = &[
    "env.proxy_log",
    "wasi_snapshot_preview1.fd_write",
    "wasi_snapshot_preview1.args_sizes_get",
    "wasi_snapshot_preview1.args_get",
    "wasi_snapshot_preview1.environ_sizes_get",
    "wasi_snapshot_preview1.environ_get",
    "wasi_snapshot_preview1.fd_prestat_get",
    "wasi_snapshot_preview1.fd_prestat_dir_name",
    "wasi_snapshot_preview1.clock_time_get",
    "wasi_snapshot_preview1.random_get",
];

/// What cpp-host's `WasmBase::allocMemory` allows inside the module's allocator.
pub(crate) const MALLOC_ALLOWED: &[&str] = &[
    "env.proxy_log",
    "wasi_snapshot_preview1.fd_write",
    "wasi_snapshot_preview1.clock_time_get",
];

/// Traps a host call made while calls are restricted to a list it is not on, as
/// cpp-host's runtimes do (`restricted_callback`: the VM fails; found by review: the
/// harness answered calls during `_initialize` that Envoy refuses).
pub(crate) fn gate(c: &C, name: &str) -> wasmtime::Result<()> {
    match c.data().restricted {
        Some(allowed) if !allowed.contains(&name) => {
            Err(wasmtime::format_err!("restricted_callback: {name}"))
        }
        _ => Ok(()),
    }
}

macro_rules! wrap {
    ($l:expr, $name:literal, |$c:ident $(, $a:ident : $t:ty)*| $body:expr) => {
        $l.func_wrap("env", $name, |mut $c: C, $($a: $t),*| -> wasmtime::Result<i32> {
            gate(&$c, concat!("env.", $name))?;
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
        // One timer per root context (Envoy `Wasm::setTimerPeriod(root_context_id)`).
        let root = d.root_of(d.current);
        let gen = crate::vm::next_tick_gen();
        d.ticks.insert(root, (period as u32, gen));
        if period != 0 {
            let at = d.env.clock.now() + period as u32 as u64 * 1_000_000;
            d.env.bus.post(d.worker, at, Event::Tick { root, gen });
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
            // Envoy: a map that does not exist reads as OK with no pairs.
            let bytes = maps::read(c.data(), ty)?
                .map(HeaderMap::encode)
                .unwrap_or_default();
            give(c, &bytes, rp, rl)
        }
    );
    wrap!(l, "proxy_get_header_map_size", |c, ty: i32, rp: i32| {
        let n = maps::byte_size(maps::write(c.data_mut(), ty)?);
        write_u32(c, rp, n)
    });
    wrap!(
        l,
        "proxy_set_header_map_pairs",
        |c, ty: i32, p: i32, n: i32| {
            // cpp-host `PairsUtil::toPairs`: a malformed or oversized map is no pairs,
            // and Envoy sets that (every header removed, OK).
            let m = HeaderMap::decode(&read(c, p, n)?).unwrap_or_default();
            *maps::write(c.data_mut(), ty)? = m;
            Ok(())
        }
    );
    wrap!(
        l,
        "proxy_get_header_map_value",
        |c, ty: i32, kp: i32, kn: i32, rp: i32, rl: i32| {
            let k = read_str(c, kp, kn)?;
            let d = c.data();
            let m = maps::read(d, ty)?.ok_or_else(|| maps::missing(d))?;
            let v = m.get(&k).ok_or(Status::NotFound)?.to_vec();
            give(c, &v, rp, rl)
        }
    );
    wrap!(
        l,
        "proxy_replace_header_map_value",
        |c, ty: i32, kp: i32, kn: i32, vp: i32, vn: i32| {
            let (k, v) = (read_str(c, kp, kn)?, read(c, vp, vn)?);
            maps::write(c.data_mut(), ty)?.replace(&k, &v);
            Ok(())
        }
    );
    wrap!(
        l,
        "proxy_add_header_map_value",
        |c, ty: i32, kp: i32, kn: i32, vp: i32, vn: i32| {
            let (k, v) = (read_str(c, kp, kn)?, read(c, vp, vn)?);
            maps::write(c.data_mut(), ty)?.add(&k, &v);
            Ok(())
        }
    );
    wrap!(
        l,
        "proxy_remove_header_map_value",
        |c, ty: i32, kp: i32, kn: i32| {
            let k = read_str(c, kp, kn)?;
            maps::write(c.data_mut(), ty)?.remove(&k);
            Ok(())
        }
    );
    wrap!(
        l,
        "proxy_get_property",
        |c, pp: i32, pn: i32, rp: i32, rl: i32| {
            let path = read(c, pp, pn)?;
            let v = crate::properties::get(c.data(), &path).ok_or(Status::NotFound)?;
            give(c, &v, rp, rl)
        }
    );
    wrap!(
        l,
        "proxy_set_property",
        |c, pp: i32, pn: i32, vp: i32, vn: i32| {
            let (p, v) = (read(c, pp, pn)?, read(c, vp, vn)?);
            // Envoy keeps values in the stream's filter state: no stream, NOT_FOUND.
            let d = c.data_mut();
            let cur = d.current;
            let s = d.streams.get_mut(&cur).ok_or(Status::NotFound)?;
            s.props.insert(p, v);
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
            let d = c.data_mut();
            let id = d
                .env
                .process
                .shared
                .register_queue(&d.env.plugin.vm_id, &n, d.worker);
            // cpp-host notifies the root context of the registering context.
            let root = d.root_of(d.current);
            d.queue_roots.insert(id, root);
            write_u32(c, rp, id)
        }
    );
    wrap!(
        l,
        "proxy_resolve_shared_queue",
        |c, vp: i32, vn: i32, np: i32, nn: i32, rp: i32| {
            let (vm, n) = (read_str(c, vp, vn)?, read_str(c, np, nn)?);
            let d = c.data();
            // cpp-host `lookupSharedQueue`: an empty vm_id is the caller's own.
            let vm = if vm.is_empty() {
                &d.env.plugin.vm_id
            } else {
                &vm
            };
            let id = d
                .env
                .process
                .shared
                .resolve_queue(vm, &n)
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
        if !stream_type(ty, true)? {
            return Ok(());
        }
        let d = c.data_mut();
        let strict = d.env.strict_lifetimes;
        let cur = d.current;
        let Some(s) = d.streams.get_mut(&cur) else {
            return Ok(());
        };
        if ty == stream::REQUEST {
            s.continue_request = true;
        } else {
            s.continue_response = true;
        }
        d.effects.insert(cur);
        // Envoy's Context::continueStream drops its request map/buffer pointers for
        // either stream type, at once.
        if strict {
            s.req_headers_live = false;
            s.req_body_live = false;
            s.req_trailers_live = false;
        }
        Ok(())
    });
    wrap!(l, "proxy_close_stream", |c, ty: i32| {
        if !stream_type(ty, false)? {
            return Ok(());
        }
        let d = c.data_mut();
        let cur = d.current;
        if let Some(s) = d.streams.get_mut(&cur) {
            s.close = true;
            d.effects.insert(cur);
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
         rt: i32| crate::callouts::http_call(c, [up, un, hp, hn, bp, bn, tp, tn, to], rt)
    );
    wrap!(
        l,
        "proxy_grpc_call",
        |c,
         up: i32,
         un: i32,
         sp: i32,
         sn: i32,
         mp: i32,
         mn: i32,
         ip: i32,
         inn: i32,
         rp: i32,
         rn: i32,
         to: i32,
         rt: i32| {
            for (p, n) in [(sp, sn), (mp, mn), (ip, inn), (rp, rn)] {
                read(c, p, n)?;
            }
            crate::callouts::grpc_open(c, (up, un), Some(to), rt)
        }
    );
    wrap!(
        l,
        "proxy_grpc_stream",
        |c, up: i32, un: i32, sp: i32, sn: i32, mp: i32, mn: i32, ip: i32, inn: i32, rt: i32| {
            for (p, n) in [(sp, sn), (mp, mn), (ip, inn)] {
                read(c, p, n)?;
            }
            crate::callouts::grpc_open(c, (up, un), None, rt)
        }
    );
    wrap!(
        l,
        "proxy_grpc_send",
        |c, t: i32, p: i32, n: i32, _e: i32| crate::callouts::grpc_send(c, t as u32, (p, n))
    );
    wrap!(l, "proxy_grpc_cancel", |c, t: i32| {
        crate::callouts::grpc_cancel(c, t as u32)
    });
    wrap!(l, "proxy_grpc_close", |c, t: i32| {
        crate::callouts::grpc_close(c, t as u32)
    });
    wrap!(l, "proxy_get_status", |c, rc: i32, rp: i32, rl: i32| {
        let (code, msg) = c.data().status.clone();
        write_u32(c, rc, code)?;
        give(c, msg.as_bytes(), rp, rl)
    });
    wrap!(l, "proxy_set_effective_context", |c, ctx: i32| {
        let d = c.data_mut();
        let ctx = ctx as u32;
        // Any live context of this VM; none exists yet during the start functions.
        if !d.has_context(ctx) {
            return Err(Status::BadArgument.into());
        }
        d.switched_context |= ctx != d.current;
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
    // cpp-host `WasmBase::done`: only a root context waiting after `on_done` returned
    // false (else NOT_FOUND); its `on_delete` runs after the current VM call.
    wrap!(l, "proxy_done", |c| {
        let d = c.data_mut();
        let root = d.root_of(d.current);
        if !d.pending_done.contains(&root) {
            return Err(Status::NotFound.into());
        }
        d.pending_done.retain(|&r| r != root);
        d.done_ready.push(root);
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
