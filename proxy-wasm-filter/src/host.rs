//! Host calls that never panic.
//!
//! The proxy-wasm SDK's `hostcalls` panic (trap) on any status they do not expect, and
//! its `Status` enum cannot represent every status a host may return. This module
//! declares the few imports the filter needs with raw `u32` statuses and turns every
//! failure into a value. Off wasm32 (unit tests) every call reports UNIMPLEMENTED.

use fusewire_core::shared::{SharedStore, StoreError};

/// Status OK.
pub const OK: u32 = 0;
/// Status NOT_FOUND.
pub const NOT_FOUND: u32 = 1;
/// Status CAS_MISMATCH.
pub const CAS_MISMATCH: u32 = 8;
/// Status UNIMPLEMENTED.
pub const UNIMPLEMENTED: u32 = 12;

/// Map: request headers.
pub const REQUEST_HEADERS: u32 = 0;
/// Map: response headers.
pub const RESPONSE_HEADERS: u32 = 2;
/// Map: response trailers.
pub const RESPONSE_TRAILERS: u32 = 3;
/// Buffer: plugin configuration.
pub const PLUGIN_CONFIGURATION: u32 = 7;

/// Metric type counter.
pub const COUNTER: u32 = 0;
/// Metric type gauge.
pub const GAUGE: u32 = 1;
/// Metric type histogram.
pub const HISTOGRAM: u32 = 2;

/// Log levels.
#[derive(Clone, Copy, Debug)]
#[repr(u32)]
pub enum Level {
    /// debug
    Debug = 1,
    /// info
    Info = 2,
    /// warn
    Warn = 3,
    /// error
    Error = 4,
}

#[cfg(target_arch = "wasm32")]
mod raw {
    #![allow(clashing_extern_declarations)]
    #[link(wasm_import_module = "env")]
    extern "C" {
        pub fn proxy_log(level: u32, data: *const u8, size: usize) -> u32;
        pub fn proxy_get_current_time_nanoseconds(ret: *mut u64) -> u32;
        pub fn proxy_set_tick_period_milliseconds(period: u32) -> u32;
        pub fn proxy_get_buffer_bytes(
            kind: u32,
            start: usize,
            max: usize,
            ret_data: *mut *mut u8,
            ret_size: *mut usize,
        ) -> u32;
        pub fn proxy_get_header_map_value(
            map: u32,
            key: *const u8,
            key_size: usize,
            ret_data: *mut *mut u8,
            ret_size: *mut usize,
        ) -> u32;
        pub fn proxy_get_property(
            path: *const u8,
            path_size: usize,
            ret_data: *mut *mut u8,
            ret_size: *mut usize,
        ) -> u32;
        #[allow(clippy::too_many_arguments)]
        pub fn proxy_send_local_response(
            status: u32,
            details: *const u8,
            details_size: usize,
            body: *const u8,
            body_size: usize,
            headers: *const u8,
            headers_size: usize,
            grpc_status: i32,
        ) -> u32;
        pub fn proxy_get_shared_data(
            key: *const u8,
            key_size: usize,
            ret_data: *mut *mut u8,
            ret_size: *mut usize,
            ret_cas: *mut u32,
        ) -> u32;
        pub fn proxy_set_shared_data(
            key: *const u8,
            key_size: usize,
            value: *const u8,
            value_size: usize,
            cas: u32,
        ) -> u32;
        pub fn proxy_define_metric(kind: u32, name: *const u8, size: usize, ret: *mut u32) -> u32;
        pub fn proxy_increment_metric(id: u32, offset: i64) -> u32;
        pub fn proxy_record_metric(id: u32, value: u64) -> u32;
        pub fn proxy_set_effective_context(context_id: u32) -> u32;
        pub fn proxy_continue_stream(stream_type: u32) -> u32;
    }
}

/// Takes ownership of a host-allocated buffer (allocated through the SDK's
/// `proxy_on_memory_allocate`). A null pointer is the empty value.
#[cfg(target_arch = "wasm32")]
fn take(ptr: *mut u8, len: usize) -> Vec<u8> {
    if ptr.is_null() {
        return Vec::new();
    }
    // SAFETY: the host wrote `len` bytes into a buffer of exactly `len` bytes that it
    // obtained from our allocator; we become its only owner.
    unsafe { Vec::from_raw_parts(ptr, len, len) }
}

/// Logs a message (failures are ignored: there is nowhere to report them).
pub fn log(level: Level, msg: &str) {
    #[cfg(target_arch = "wasm32")]
    // SAFETY: pointer and length of a live &str.
    unsafe {
        raw::proxy_log(level as u32, msg.as_ptr(), msg.len());
    }
    #[cfg(not(target_arch = "wasm32"))]
    let _ = (level, msg);
}

/// Host wall-clock time in ns since the epoch, or None.
pub fn now_ns() -> Option<u64> {
    #[cfg(target_arch = "wasm32")]
    {
        let mut t = 0u64;
        // SAFETY: valid out-pointer.
        let s = unsafe { raw::proxy_get_current_time_nanoseconds(&mut t) };
        (s == OK).then_some(t)
    }
    #[cfg(not(target_arch = "wasm32"))]
    None
}

/// Arms this VM's timer.
pub fn set_tick_period_ms(ms: u32) -> u32 {
    #[cfg(target_arch = "wasm32")]
    // SAFETY: plain value call.
    unsafe {
        raw::proxy_set_tick_period_milliseconds(ms)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = ms;
        UNIMPLEMENTED
    }
}

/// The plugin configuration buffer (only valid during `on_configure`).
pub fn plugin_configuration() -> Result<Vec<u8>, u32> {
    #[cfg(target_arch = "wasm32")]
    {
        let (mut p, mut n) = (core::ptr::null_mut(), 0usize);
        // SAFETY: valid out-pointers.
        let s = unsafe {
            raw::proxy_get_buffer_bytes(PLUGIN_CONFIGURATION, 0, usize::MAX >> 1, &mut p, &mut n)
        };
        match s {
            OK => Ok(take(p, n)),
            s => Err(s),
        }
    }
    #[cfg(not(target_arch = "wasm32"))]
    Err(UNIMPLEMENTED)
}

/// First value of a header in `map`; None when absent or on any host error.
pub fn header(map: u32, name: &str) -> Option<Vec<u8>> {
    #[cfg(target_arch = "wasm32")]
    {
        let (mut p, mut n) = (core::ptr::null_mut(), 0usize);
        // SAFETY: valid key slice and out-pointers.
        let s = unsafe {
            raw::proxy_get_header_map_value(map, name.as_ptr(), name.len(), &mut p, &mut n)
        };
        let v = take(p, n);
        (s == OK).then_some(v)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = (map, name);
        None
    }
}

/// A property by `\0`-joined path; None when absent or on any host error.
pub fn property(path: &[u8]) -> Option<Vec<u8>> {
    #[cfg(target_arch = "wasm32")]
    {
        let (mut p, mut n) = (core::ptr::null_mut(), 0usize);
        // SAFETY: valid path slice and out-pointers.
        let s = unsafe { raw::proxy_get_property(path.as_ptr(), path.len(), &mut p, &mut n) };
        let v = take(p, n);
        (s == OK).then_some(v)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = path;
        None
    }
}

/// Serialises headers in the proxy-wasm map format (empty map: empty bytes).
pub fn serialize_map(pairs: &[(&str, &str)], out: &mut Vec<u8>) {
    out.clear();
    if pairs.is_empty() {
        return;
    }
    out.extend_from_slice(&(pairs.len() as u32).to_le_bytes());
    for (k, v) in pairs {
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
    }
    for (k, v) in pairs {
        out.extend_from_slice(k.as_bytes());
        out.push(0);
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
}

/// Sends a local reply on the effective stream; returns the host status.
pub fn send_local_response(
    status: u32,
    details: &str,
    body: &[u8],
    headers: &[u8],
    grpc: i32,
) -> u32 {
    #[cfg(target_arch = "wasm32")]
    // SAFETY: valid slices; an empty map is sent as (null, 0).
    unsafe {
        let (hp, hn) = if headers.is_empty() {
            (core::ptr::null(), 0)
        } else {
            (headers.as_ptr(), headers.len())
        };
        let (bp, bn) = if body.is_empty() {
            (core::ptr::null(), 0)
        } else {
            (body.as_ptr(), body.len())
        };
        raw::proxy_send_local_response(
            status,
            details.as_ptr(),
            details.len(),
            bp,
            bn,
            hp,
            hn,
            grpc,
        )
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = (status, details, body, headers, grpc);
        UNIMPLEMENTED
    }
}

/// Makes `context_id` the effective context for the following calls.
pub fn set_effective_context(context_id: u32) -> u32 {
    #[cfg(target_arch = "wasm32")]
    // SAFETY: plain value call.
    unsafe {
        raw::proxy_set_effective_context(context_id)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = context_id;
        UNIMPLEMENTED
    }
}

/// Resumes the effective stream's request (paused in `on_http_request_headers`).
pub fn continue_request() -> u32 {
    #[cfg(target_arch = "wasm32")]
    // SAFETY: plain value call; stream type 0 = request.
    unsafe {
        raw::proxy_continue_stream(0)
    }
    #[cfg(not(target_arch = "wasm32"))]
    UNIMPLEMENTED
}

/// Defines a metric; None on failure (the metric is then skipped).
pub fn define_metric(kind: u32, name: &str) -> Option<u32> {
    #[cfg(target_arch = "wasm32")]
    {
        let mut id = 0u32;
        // SAFETY: valid name slice and out-pointer.
        let s = unsafe { raw::proxy_define_metric(kind, name.as_ptr(), name.len(), &mut id) };
        (s == OK).then_some(id)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = (kind, name);
        None
    }
}

/// Adds `delta` (may be negative for gauges); failures ignored.
pub fn increment_metric(id: u32, delta: i64) {
    #[cfg(target_arch = "wasm32")]
    // SAFETY: plain value call.
    unsafe {
        raw::proxy_increment_metric(id, delta);
    }
    #[cfg(not(target_arch = "wasm32"))]
    let _ = (id, delta);
}

/// Sets a gauge / records a histogram sample; failures ignored.
pub fn record_metric(id: u32, value: u64) {
    #[cfg(target_arch = "wasm32")]
    // SAFETY: plain value call.
    unsafe {
        raw::proxy_record_metric(id, value);
    }
    #[cfg(not(target_arch = "wasm32"))]
    let _ = (id, value);
}

/// proxy-wasm shared data as a [`SharedStore`].
#[derive(Clone, Copy, Debug, Default)]
pub struct HostStore {
    /// Successful writes (for the filter's own accounting).
    pub writes: u64,
}

impl SharedStore for HostStore {
    fn get(&mut self, key: &str) -> Result<Option<(Vec<u8>, u32)>, StoreError> {
        #[cfg(target_arch = "wasm32")]
        {
            let (mut p, mut n, mut cas) = (core::ptr::null_mut(), 0usize, 0u32);
            // SAFETY: valid key slice and out-pointers.
            let s = unsafe {
                raw::proxy_get_shared_data(key.as_ptr(), key.len(), &mut p, &mut n, &mut cas)
            };
            let v = take(p, n);
            match s {
                OK => Ok(Some((v, cas))),
                NOT_FOUND => Ok(None),
                s => Err(StoreError::Host(s)),
            }
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            let _ = key;
            Err(StoreError::Host(UNIMPLEMENTED))
        }
    }

    fn set(&mut self, key: &str, value: &[u8], cas: u32) -> Result<(), StoreError> {
        #[cfg(target_arch = "wasm32")]
        {
            // SAFETY: valid slices.
            let s = unsafe {
                raw::proxy_set_shared_data(
                    key.as_ptr(),
                    key.len(),
                    value.as_ptr(),
                    value.len(),
                    cas,
                )
            };
            match s {
                OK => {
                    self.writes += 1;
                    Ok(())
                }
                CAS_MISMATCH => Err(StoreError::CasMismatch),
                s => Err(StoreError::Host(s)),
            }
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            let _ = (key, value, cas);
            Err(StoreError::Host(UNIMPLEMENTED))
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn map_format() {
        let mut out = Vec::new();
        super::serialize_map(&[], &mut out);
        assert!(out.is_empty());
        super::serialize_map(&[("a", "bc")], &mut out);
        assert_eq!(out, b"\x01\0\0\0\x01\0\0\0\x02\0\0\0a\0bc\0");
    }
}
