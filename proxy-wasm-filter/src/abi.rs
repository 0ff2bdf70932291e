//! The proxy-wasm ABI 0.2.1 entry points: a minimal dispatcher from the host's
//! context ids to the filter's [`Root`] and [`Stream`] contexts.
//!
//! It replaces the proxy-wasm Rust SDK's dispatcher, for two reasons: the SDK panics
//! (traps) on context ids it does not know, and it links code for every callback kind
//! (gRPC, HTTP calls, network filters) this filter never uses — about 30 KB of the
//! module. Unknown ids and unexpected callbacks are ignored here. Callbacks the filter
//! does not export (request body, trailers, ...) are skipped by Envoy.

use std::cell::UnsafeCell;

use crate::filter::{Action, Root, Stream};
use crate::idmap::IdMap;

#[derive(Default)]
struct Dispatcher {
    roots: Vec<(u32, Root)>,
    /// Live streams by context id (a stream is a handle and a few flags: cheaper to
    /// move than to box).
    streams: IdMap<Stream>,
}

/// The VM's single dispatcher. Wasm VMs are single-threaded and host callbacks never
/// nest (host calls made by the filter do not call back into it, except the
/// allocator), so one exclusive borrow per callback is sound.
struct Global(UnsafeCell<Option<Dispatcher>>);

// SAFETY: wasm32 proxy-wasm VMs run on one thread; see the type's doc.
unsafe impl Sync for Global {}

static DISPATCHER: Global = Global(UnsafeCell::new(None));

fn with<R>(f: impl FnOnce(&mut Dispatcher) -> R) -> R {
    // SAFETY: single-threaded, non-reentrant (see `Global`).
    let d = unsafe { &mut *DISPATCHER.0.get() };
    f(d.get_or_insert_with(Dispatcher::default))
}

fn root(d: &mut Dispatcher, id: u32) -> Option<&mut Root> {
    d.roots.iter_mut().find(|(i, _)| *i == id).map(|(_, r)| r)
}

fn action(a: Action) -> u32 {
    match a {
        Action::Continue => 0,
        Action::Pause => 1,
    }
}

fn stream<R: Default>(id: u32, f: impl FnOnce(&mut Stream) -> R) -> R {
    with(|d| d.streams.get_mut(id).map(f).unwrap_or_default())
}

/// The ABI marker export.
#[cfg_attr(target_arch = "wasm32", no_mangle)]
pub extern "C" fn proxy_abi_version_0_2_1() {}

/// Host → guest buffers; freed by `host::take` with the same layout.
#[cfg_attr(target_arch = "wasm32", no_mangle)]
pub extern "C" fn proxy_on_memory_allocate(size: usize) -> *mut u8 {
    crate::host::allocate(size)
}

#[cfg(all(target_arch = "wasm32", target_os = "wasi"))]
extern "C" {
    fn __wasm_call_ctors();
}

/// The reactor start function.
#[cfg(target_arch = "wasm32")]
#[no_mangle]
pub extern "C" fn _initialize() {
    #[cfg(target_os = "wasi")]
    // SAFETY: runs the module's static constructors once, as wasi reactors must.
    unsafe {
        __wasm_call_ctors();
    }
}

/// A new root context (parent 0) or a stream of root `parent`.
#[cfg_attr(target_arch = "wasm32", no_mangle)]
pub extern "C" fn proxy_on_context_create(id: u32, parent: u32) {
    with(|d| {
        if parent == 0 {
            if root(d, id).is_none() {
                d.roots.push((id, Root::new()));
            }
        } else if let Some(stream) = root(d, parent).map(|r| r.create_stream(id)) {
            d.streams.insert(id, stream);
        }
    });
}

/// `proxy_on_vm_start`.
#[cfg_attr(target_arch = "wasm32", no_mangle)]
pub extern "C" fn proxy_on_vm_start(id: u32, size: usize) -> u32 {
    with(|d| root(d, id).is_some_and(|r| r.on_vm_start(size))) as u32
}

/// `proxy_on_configure`.
#[cfg_attr(target_arch = "wasm32", no_mangle)]
pub extern "C" fn proxy_on_configure(id: u32, size: usize) -> u32 {
    with(|d| root(d, id).is_some_and(|r| r.on_configure(size))) as u32
}

/// `proxy_on_tick`.
#[cfg_attr(target_arch = "wasm32", no_mangle)]
pub extern "C" fn proxy_on_tick(id: u32) {
    with(|d| root(d, id).map(Root::on_tick));
}

/// `proxy_on_request_headers`.
#[cfg_attr(target_arch = "wasm32", no_mangle)]
pub extern "C" fn proxy_on_request_headers(id: u32, n: usize, eos: u32) -> u32 {
    stream(id, |s| action(s.on_http_request_headers(n, eos != 0)))
}

/// `proxy_on_response_headers`.
#[cfg_attr(target_arch = "wasm32", no_mangle)]
pub extern "C" fn proxy_on_response_headers(id: u32, n: usize, eos: u32) -> u32 {
    stream(id, |s| action(s.on_http_response_headers(n, eos != 0)))
}

/// `proxy_on_response_body`.
#[cfg_attr(target_arch = "wasm32", no_mangle)]
pub extern "C" fn proxy_on_response_body(id: u32, size: usize, eos: u32) -> u32 {
    stream(id, |s| action(s.on_http_response_body(size, eos != 0)))
}

/// `proxy_on_response_trailers`.
#[cfg_attr(target_arch = "wasm32", no_mangle)]
pub extern "C" fn proxy_on_response_trailers(id: u32, n: usize) -> u32 {
    stream(id, |s| action(s.on_http_response_trailers(n)))
}

/// `proxy_on_log`.
#[cfg_attr(target_arch = "wasm32", no_mangle)]
pub extern "C" fn proxy_on_log(id: u32) {
    stream(id, Stream::on_log);
}

/// `proxy_on_done` (Envoy ignores its return value).
#[cfg_attr(target_arch = "wasm32", no_mangle)]
pub extern "C" fn proxy_on_done(id: u32) -> u32 {
    stream(id, |s| s.on_done());
    1
}

/// `proxy_on_delete`: drops the context (a stream releases anything still held).
#[cfg_attr(target_arch = "wasm32", no_mangle)]
pub extern "C" fn proxy_on_delete(id: u32) {
    let stream = with(|d| {
        d.roots.retain(|(i, _)| *i != id);
        d.streams.remove(id)
    });
    drop(stream);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_ids_are_ignored() {
        proxy_on_context_create(5, 99); // stream of an unknown root
        assert_eq!(proxy_on_request_headers(5, 0, 0), 0);
        assert_eq!(proxy_on_vm_start(7, 0), 0);
        assert_eq!(proxy_on_configure(7, 0), 0);
        proxy_on_tick(7);
        proxy_on_log(42);
        proxy_on_done(42);
        proxy_on_delete(42);
        proxy_on_context_create(1, 0);
        assert_eq!(proxy_on_vm_start(1, 0), 1);
        proxy_on_context_create(2, 1);
        // Off wasm32 the host calls report UNIMPLEMENTED: no config, no policies.
        assert_eq!(proxy_on_request_headers(2, 3, 0), 0);
        assert_eq!(proxy_on_response_headers(2, 3, 0), 0);
        proxy_on_log(2);
        proxy_on_done(2);
        proxy_on_delete(2);
        proxy_on_delete(1);
        assert!(
            with(|d| d.roots.is_empty() && d.streams.is_empty()),
            "both contexts dropped"
        );
    }
}
