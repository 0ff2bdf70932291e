//! The proxy-wasm ABI 0.2.1 entry points: a minimal dispatcher from the host's
//! context ids to the filter's [`Root`] contexts (a stream's callbacks go to the
//! root that created it).
//!
//! It replaces the proxy-wasm Rust SDK's dispatcher, for two reasons: the SDK panics
//! (traps) on context ids it does not know, and it links code for every callback kind
//! (gRPC, HTTP calls, network filters) this filter never uses — about 30 KB of the
//! module. Unknown ids and unexpected callbacks are ignored here. Callbacks the filter
//! does not export are skipped by Envoy (taken as Continue).

use std::cell::UnsafeCell;

use crate::filter::{Action, Root};

#[derive(Default)]
struct Dispatcher {
    /// Root contexts by id (one per plugin of this VM; usually one).
    roots: Vec<(u32, Root)>,
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

/// The root of stream `id`. With one root (the usual case) no search: a root ignores
/// stream ids it does not hold.
fn owner(d: &mut Dispatcher, id: u32) -> Option<&mut Root> {
    match d.roots.as_mut_slice() {
        [(_, r)] => Some(r),
        roots => roots.iter_mut().map(|(_, r)| r).find(|r| r.holds(id)),
    }
}

/// Runs `f` on the root of stream `id`.
fn stream<R: Default>(id: u32, f: impl FnOnce(&mut Root) -> R) -> R {
    with(|d| owner(d, id).map_or_else(R::default, f))
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
            match root(d, id) {
                Some(r) => r.deleted = false,
                None => d.roots.push((id, Root::new())),
            }
        } else if let Some(r) = root(d, parent) {
            r.create_stream(id);
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
pub extern "C" fn proxy_on_request_headers(id: u32, _n: usize, eos: u32) -> u32 {
    stream(id, |r| action(r.on_http_request_headers(id, eos != 0)))
}

/// `proxy_on_request_body`: a waiting stream's body is held with flow control
/// (StopIterationAndWatermark: Envoy buffers it and pushes back on the client, no 413)
/// until the stream is resumed or answered.
#[cfg_attr(target_arch = "wasm32", no_mangle)]
pub extern "C" fn proxy_on_request_body(id: u32, size: usize, eos: u32) -> u32 {
    stream(id, |r| match r.on_http_request_data(id, size, eos != 0) {
        Action::Continue => 0,
        Action::Pause => 2,
    })
}

/// `proxy_on_request_trailers`: held (StopIteration) while the stream waits.
#[cfg_attr(target_arch = "wasm32", no_mangle)]
pub extern "C" fn proxy_on_request_trailers(id: u32, _n: usize) -> u32 {
    stream(id, |r| action(r.on_http_request_data(id, 0, true)))
}

/// `proxy_on_response_headers`.
#[cfg_attr(target_arch = "wasm32", no_mangle)]
pub extern "C" fn proxy_on_response_headers(id: u32, _n: usize, eos: u32) -> u32 {
    stream(id, |r| action(r.on_http_response_headers(id, eos != 0)))
}

/// `proxy_on_response_body`.
#[cfg_attr(target_arch = "wasm32", no_mangle)]
pub extern "C" fn proxy_on_response_body(id: u32, size: usize, eos: u32) -> u32 {
    stream(id, |r| action(r.on_http_response_body(id, size, eos != 0)))
}

/// `proxy_on_response_trailers`.
#[cfg_attr(target_arch = "wasm32", no_mangle)]
pub extern "C" fn proxy_on_response_trailers(id: u32, _n: usize) -> u32 {
    stream(id, |r| action(r.on_http_response_trailers(id)))
}

/// `proxy_on_log`.
#[cfg_attr(target_arch = "wasm32", no_mangle)]
pub extern "C" fn proxy_on_log(id: u32) {
    stream(id, |r| r.finish_stream(id));
}

/// `proxy_on_done`: a root lets its state go (its plugin was released: a reload, a
/// shutdown); a stream finishes (Envoy ignores the return value for streams).
#[cfg_attr(target_arch = "wasm32", no_mangle)]
pub extern "C" fn proxy_on_done(id: u32) -> u32 {
    with(|d| match root(d, id) {
        Some(r) => r.on_done(),
        None => {
            if let Some(r) = owner(d, id) {
                r.finish_stream(id);
            }
        }
    });
    1
}

/// `proxy_on_delete`: a stream releases anything still held; a root is dropped once
/// its streams are finished (streams in flight keep using it).
#[cfg_attr(target_arch = "wasm32", no_mangle)]
pub extern "C" fn proxy_on_delete(id: u32) {
    with(|d| {
        match root(d, id) {
            Some(r) => r.deleted = true,
            None => {
                if let Some(r) = owner(d, id) {
                    r.finish_stream(id);
                }
            }
        }
        for (_, r) in &mut d.roots {
            if r.deleted && r.is_idle() {
                r.on_done(); // its last stream ended after `on_done`
            }
        }
        d.roots.retain(|(_, r)| !(r.deleted && r.is_idle()));
    });
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
        assert!(with(|d| d.roots.is_empty()), "both contexts dropped");

        // A root deleted with a stream in flight stays until that stream finishes.
        // (One test: the dispatcher is a process-wide global.)
        proxy_on_context_create(10, 0);
        proxy_on_context_create(11, 10);
        assert_eq!(proxy_on_request_headers(11, 3, 0), 0);
        proxy_on_delete(10);
        assert!(
            with(|d| root(d, 10).is_some_and(|r| r.holds(11))),
            "kept for 11"
        );
        assert_eq!(proxy_on_response_headers(11, 3, 1), 0);
        proxy_on_log(11);
        assert!(with(|d| root(d, 10).is_some_and(|r| r.is_idle())));
        proxy_on_done(11);
        proxy_on_delete(11);
        assert!(
            with(|d| d.roots.is_empty()),
            "dropped once its stream is done"
        );

        // With two roots, each stream's callbacks reach its own root.
        for r in [20, 30] {
            proxy_on_context_create(r, 0);
            proxy_on_context_create(r + 1, r);
        }
        assert!(with(
            |d| root(d, 20).is_some_and(|r| r.holds(21) && !r.holds(31))
        ));
        proxy_on_delete(31); // a stream deleted without on_log is finished there
        assert!(with(|d| root(d, 30).is_some_and(|r| r.is_idle())));
        assert!(with(|d| root(d, 20).is_some_and(|r| r.holds(21))));
        proxy_on_delete(20);
        proxy_on_delete(30);
        assert_eq!(with(|d| d.roots.len()), 1, "20 waits for 21");
        proxy_on_delete(21);
        assert!(with(|d| d.roots.is_empty()));
    }
}
