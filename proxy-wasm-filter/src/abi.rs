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
use crate::vecmap::VecMap;

#[derive(Default)]
struct Dispatcher {
    roots: Vec<(u32, Root)>,
    /// Live streams by context id (boxed: moving an entry moves a pointer).
    streams: VecMap<u32, Box<Stream>>,
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

/// A new root context (parent 0) or a stream of root `parent`.
pub fn context_create(id: u32, parent: u32) {
    with(|d| {
        if parent == 0 {
            if root(d, id).is_none() {
                d.roots.push((id, Root::new()));
            }
        } else if let Some(stream) = root(d, parent).map(|r| r.create_stream(id)) {
            d.streams.insert(id, Box::new(stream));
        }
    });
}

/// `proxy_on_vm_start`.
pub fn vm_start(id: u32, size: usize) -> bool {
    with(|d| root(d, id).is_some_and(|r| r.on_vm_start(size)))
}

/// `proxy_on_configure`.
pub fn configure(id: u32, size: usize) -> bool {
    with(|d| root(d, id).is_some_and(|r| r.on_configure(size)))
}

/// `proxy_on_tick`.
pub fn tick(id: u32) {
    with(|d| {
        if let Some(r) = root(d, id) {
            r.on_tick();
        }
    });
}

/// `proxy_on_request_headers`.
pub fn request_headers(id: u32, n: usize, eos: bool) -> u32 {
    with(|d| {
        d.streams
            .get_mut(&id)
            .map_or(0, |s| action(s.on_http_request_headers(n, eos)))
    })
}

/// `proxy_on_response_headers`.
pub fn response_headers(id: u32, n: usize, eos: bool) -> u32 {
    with(|d| {
        d.streams
            .get_mut(&id)
            .map_or(0, |s| action(s.on_http_response_headers(n, eos)))
    })
}

/// `proxy_on_response_trailers`.
pub fn response_trailers(id: u32, n: usize) -> u32 {
    with(|d| {
        d.streams
            .get_mut(&id)
            .map_or(0, |s| action(s.on_http_response_trailers(n)))
    })
}

/// `proxy_on_log`.
pub fn log(id: u32) {
    with(|d| {
        if let Some(s) = d.streams.get_mut(&id) {
            s.on_log();
        }
    });
}

/// `proxy_on_done` (Envoy ignores its return value; the export returns 1).
pub fn done(id: u32) {
    with(|d| {
        if let Some(s) = d.streams.get_mut(&id) {
            s.on_done();
        }
    });
}

/// `proxy_on_delete`: drops the context (a stream releases anything still held).
pub fn delete(id: u32) {
    let stream = with(|d| {
        d.roots.retain(|(i, _)| *i != id);
        d.streams.remove(&id)
    });
    drop(stream);
}

#[cfg(target_arch = "wasm32")]
mod exports {
    use super::*;

    #[no_mangle]
    pub extern "C" fn proxy_abi_version_0_2_1() {}

    /// Host → guest buffers; freed by `host::take` with the same layout.
    #[no_mangle]
    pub extern "C" fn proxy_on_memory_allocate(size: usize) -> *mut u8 {
        let mut v: Vec<u8> = Vec::with_capacity(size);
        let p = v.as_mut_ptr();
        std::mem::forget(v);
        p
    }

    #[cfg(target_os = "wasi")]
    extern "C" {
        fn __wasm_call_ctors();
    }

    #[no_mangle]
    pub extern "C" fn _initialize() {
        #[cfg(target_os = "wasi")]
        // SAFETY: runs the module's static constructors once, as wasi reactors must.
        unsafe {
            __wasm_call_ctors();
        }
    }

    #[no_mangle]
    pub extern "C" fn proxy_on_context_create(id: u32, parent: u32) {
        context_create(id, parent);
    }

    #[no_mangle]
    pub extern "C" fn proxy_on_vm_start(id: u32, size: usize) -> u32 {
        vm_start(id, size) as u32
    }

    #[no_mangle]
    pub extern "C" fn proxy_on_configure(id: u32, size: usize) -> u32 {
        configure(id, size) as u32
    }

    #[no_mangle]
    pub extern "C" fn proxy_on_tick(id: u32) {
        tick(id);
    }

    #[no_mangle]
    pub extern "C" fn proxy_on_request_headers(id: u32, n: usize, eos: u32) -> u32 {
        request_headers(id, n, eos != 0)
    }

    #[no_mangle]
    pub extern "C" fn proxy_on_response_headers(id: u32, n: usize, eos: u32) -> u32 {
        response_headers(id, n, eos != 0)
    }

    #[no_mangle]
    pub extern "C" fn proxy_on_response_trailers(id: u32, n: usize) -> u32 {
        response_trailers(id, n)
    }

    #[no_mangle]
    pub extern "C" fn proxy_on_log(id: u32) {
        log(id);
    }

    #[no_mangle]
    pub extern "C" fn proxy_on_done(id: u32) -> u32 {
        done(id);
        1
    }

    #[no_mangle]
    pub extern "C" fn proxy_on_delete(id: u32) {
        delete(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_ids_are_ignored() {
        context_create(5, 99); // stream of an unknown root
        assert_eq!(request_headers(5, 0, false), 0);
        assert!(!vm_start(7, 0));
        assert!(!configure(7, 0));
        tick(7);
        log(42);
        done(42);
        delete(42);
        context_create(1, 0);
        assert!(vm_start(1, 0));
        context_create(2, 1);
        // Off wasm32 the host calls report UNIMPLEMENTED: no config, no policies.
        assert_eq!(request_headers(2, 3, false), 0);
        assert_eq!(response_headers(2, 3, false), 0);
        log(2);
        done(2);
        delete(2);
        delete(1);
    }
}
