//! Host calls that never panic.
//!
//! The proxy-wasm SDK's `hostcalls` panic (trap) on statuses they do not expect. This
//! module declares the few imports the filter needs with raw `u32` statuses and turns
//! every failure into a value. Off wasm32 (unit tests) every call reports
//! UNIMPLEMENTED.

use core::cell::UnsafeCell;

use fusewire_core::shared::{Io, Op, OwnedAnswer};

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
const PLUGIN_CONFIGURATION: u32 = 7;
const RESPONSE_BODY: u32 = 1;

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

/// Declares the `env` imports on wasm32 and UNIMPLEMENTED stubs elsewhere, from one
/// list.
macro_rules! imports {
    ($(fn $name:ident($($arg:ident: $ty:ty),*);)*) => {
        #[cfg(target_arch = "wasm32")]
        #[link(wasm_import_module = "env")]
        extern "C" {
            $(#[allow(clippy::too_many_arguments)] fn $name($($arg: $ty),*) -> u32;)*
        }
        $(
            #[cfg(not(target_arch = "wasm32"))]
            #[allow(clippy::too_many_arguments, clippy::missing_safety_doc)]
            unsafe fn $name($(_: $ty),*) -> u32 {
                UNIMPLEMENTED
            }
        )*
    };
}

type P = *const u8;
type M = *mut *mut u8;

imports! {
    fn proxy_log(level: u32, data: P, size: usize);
    fn proxy_get_log_level(ret: *mut u32);
    fn proxy_get_current_time_nanoseconds(ret: *mut u64);
    fn proxy_set_tick_period_milliseconds(period: u32);
    fn proxy_get_buffer_bytes(kind: u32, start: usize, max: usize, data: M, size: *mut usize);
    fn proxy_get_header_map_value(map: u32, key: P, key_size: usize, data: M, size: *mut usize);
    fn proxy_get_header_map_pairs(map: u32, data: M, size: *mut usize);
    fn proxy_get_property(path: P, path_size: usize, data: M, size: *mut usize);
    fn proxy_send_local_response(status: u32, details: P, details_size: usize, body: P,
        body_size: usize, headers: P, headers_size: usize, grpc_status: i32);
    fn proxy_get_shared_data(key: P, key_size: usize, data: M, size: *mut usize, cas: *mut u32);
    fn proxy_set_shared_data(key: P, key_size: usize, value: P, value_size: usize, cas: u32);
    fn proxy_define_metric(kind: u32, name: P, size: usize, ret: *mut u32);
    fn proxy_increment_metric(id: u32, offset: i64);
    fn proxy_record_metric(id: u32, value: u64);
    fn proxy_set_effective_context(context_id: u32);
    fn proxy_continue_stream(stream_type: u32);
}

/// Bytes of the buffer small host answers (header values, properties) are written
/// to, so a read costs no allocation.
const SCRATCH: usize = 256;

/// The scratch buffer and whether a host answer occupies it. Host calls never nest
/// and the guest reads an answer before its next host call, so one buffer serves
/// every small answer; one that finds it taken gets heap memory.
struct Scratch {
    bytes: UnsafeCell<[u8; SCRATCH]>,
    taken: UnsafeCell<bool>,
}

// SAFETY: a proxy-wasm VM runs on one thread.
unsafe impl Sync for Scratch {}

static SCRATCH_BUF: Scratch = Scratch {
    bytes: UnsafeCell::new([0; SCRATCH]),
    taken: UnsafeCell::new(false),
};

/// Memory for a host answer of `size` bytes (`proxy_on_memory_allocate`): the scratch
/// buffer when it is free and large enough, else heap memory that [`fetch`] frees;
/// null when the heap cannot grow by that much (the host call then fails with
/// INVALID_MEMORY_ACCESS instead of the VM aborting).
pub fn allocate(size: usize) -> *mut u8 {
    // SAFETY: one thread, no reentrancy (see `Scratch`).
    unsafe {
        let taken = &mut *SCRATCH_BUF.taken.get();
        if size <= SCRATCH && !*taken {
            *taken = true;
            return SCRATCH_BUF.bytes.get().cast();
        }
    }
    if size == 0 {
        return core::ptr::NonNull::dangling().as_ptr();
    }
    match std::alloc::Layout::array::<u8>(size) {
        // SAFETY: a non-zero size; freed by `fetch` as a `Vec<u8>` of capacity `size`
        // (the same layout).
        Ok(layout) => unsafe { std::alloc::alloc(layout) },
        Err(_) => core::ptr::null_mut(),
    }
}

/// Calls a getter that returns host-allocated bytes and hands them to `f`;
/// `Err(status)` on failure. The memory is released afterwards.
fn fetch<R>(call: impl FnOnce(M, *mut usize) -> u32, f: impl FnOnce(&[u8]) -> R) -> Result<R, u32> {
    let (mut p, mut n) = (core::ptr::null_mut(), 0usize);
    let s = call(&mut p, &mut n);
    let scratch: *mut u8 = SCRATCH_BUF.bytes.get().cast();
    let r = if p.is_null() || n == 0 {
        f(&[])
    } else if p == scratch {
        // SAFETY: the host wrote `n <= SCRATCH` bytes into the scratch buffer (it
        // asked for them through `allocate`); nothing else writes it until released.
        f(unsafe { core::slice::from_raw_parts(scratch, n.min(SCRATCH)) })
    } else {
        // SAFETY: the host wrote `n` bytes into a buffer of exactly `n` bytes it
        // obtained from `allocate`'s heap branch; we become its only owner.
        f(&unsafe { Vec::from_raw_parts(p, n, n) })
    };
    // SAFETY: one thread (see `Scratch`); the answer has been read.
    unsafe { *SCRATCH_BUF.taken.get() = false };
    if s == OK {
        Ok(r)
    } else {
        Err(s)
    }
}

/// Logs a message (failures are ignored: there is nowhere to report them).
pub fn log(level: Level, msg: &str) {
    // SAFETY: pointer and length of a live &str.
    unsafe { proxy_log(level as u32, msg.as_ptr(), msg.len()) };
}

/// Whether the host logs `Debug` messages of this VM (Envoy: `--component-log-level
/// wasm:debug`); false if it cannot tell.
pub fn debug_enabled() -> bool {
    let mut l = u32::MAX;
    // SAFETY: valid out-pointer.
    let s = unsafe { proxy_get_log_level(&mut l) };
    s == OK && l <= Level::Debug as u32
}

#[cfg(all(target_arch = "wasm32", target_os = "wasi"))]
#[link(wasm_import_module = "wasi_snapshot_preview1")]
extern "C" {
    /// WASI preview 1 `clock_time_get(id, precision, *time) -> errno`, as the
    /// standard library imports it.
    fn clock_time_get(id: i32, precision: i64, time: *mut u64) -> i32;
}

/// The host's monotonic clock in ns: WASI's clock 1 on `wasm32-wasip1` (in Envoy
/// its steady clock, one for the whole process, which wall-clock steps do not move);
/// None elsewhere or if the host refuses it.
#[inline(always)]
pub fn monotonic_ns() -> Option<u64> {
    #[cfg(all(target_arch = "wasm32", target_os = "wasi"))]
    {
        let mut t = 0u64;
        // SAFETY: valid out-pointer.
        if unsafe { clock_time_get(1, 1, &mut t) } == 0 {
            return Some(t);
        }
    }
    None
}

/// The host's wall clock in ns since the epoch (`proxy_get_current_time_nanoseconds`),
/// or None.
#[inline(always)]
pub fn wall_ns() -> Option<u64> {
    let mut t = 0u64;
    // SAFETY: valid out-pointer.
    let s = unsafe { proxy_get_current_time_nanoseconds(&mut t) };
    (s == OK).then_some(t)
}

/// 64 bits of the host's randomness: WASI `random_get` (Envoy's CSPRNG) on the wasip1
/// build; None elsewhere.
#[cfg(target_os = "wasi")]
pub fn random_u64() -> Option<u64> {
    #[link(wasm_import_module = "wasi_snapshot_preview1")]
    extern "C" {
        fn random_get(buf: *mut u8, len: usize) -> i32;
    }
    let mut b = [0u8; 8];
    // SAFETY: a valid 8-byte buffer.
    (unsafe { random_get(b.as_mut_ptr(), b.len()) } == 0).then(|| u64::from_le_bytes(b))
}

/// No host randomness without WASI (the wasm32-unknown-unknown build, native tests).
#[cfg(not(target_os = "wasi"))]
pub fn random_u64() -> Option<u64> {
    None
}

/// Arms this VM's timer.
pub fn set_tick_period_ms(ms: u32) -> u32 {
    // SAFETY: plain value call.
    unsafe { proxy_set_tick_period_milliseconds(ms) }
}

/// The plugin configuration buffer (only valid during `on_configure`).
pub fn plugin_configuration() -> Result<Vec<u8>, u32> {
    // SAFETY: valid out-pointers.
    fetch(
        |p, n| unsafe { proxy_get_buffer_bytes(PLUGIN_CONFIGURATION, 0, usize::MAX >> 1, p, n) },
        <[u8]>::to_vec,
    )
}

/// `f` of the first value of a header in `map`; None when absent or on any host
/// error.
pub fn header<R>(map: u32, name: &str, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
    // SAFETY: valid key slice and out-pointers.
    fetch(
        |p, n| unsafe { proxy_get_header_map_value(map, name.as_ptr(), name.len(), p, n) },
        f,
    )
    .ok()
}

/// Every header of `map` in order (None on any host error).
pub fn header_pairs(map: u32) -> Option<Vec<(String, String)>> {
    // SAFETY: valid out-pointers.
    fetch(
        |p, n| unsafe { proxy_get_header_map_pairs(map, p, n) },
        parse_map,
    )
    .ok()
    .flatten()
}

/// The whole of header map `map` in the proxy-wasm map format (for [`values_in`]),
/// or None on any host error.
pub fn header_map_bytes(map: u32) -> Option<Vec<u8>> {
    // SAFETY: valid out-pointers.
    fetch(
        |p, n| unsafe { proxy_get_header_map_pairs(map, p, n) },
        <[u8]>::to_vec,
    )
    .ok()
}

/// Every value of header `name` in `raw` (a map in the proxy-wasm format), in order,
/// joined with `,` (as [`push_text`] with `exact`); None when absent or the map is
/// malformed.
pub fn values_in(raw: &[u8], name: &str, exact: bool) -> Option<String> {
    let mut all: Option<String> = None;
    each_pair(raw, |k, v| {
        if k == name.as_bytes() {
            let a = match &mut all {
                Some(a) => {
                    a.push(',');
                    a
                }
                None => all.insert(String::new()),
            };
            push_text(a, v, exact);
        }
    })?;
    all
}

/// `b` as text, what is not UTF-8 as U+FFFD (see [`push_text`]).
pub fn text(b: &[u8]) -> String {
    let mut s = String::new();
    push_text(&mut s, b, false);
    s
}

/// Appends header bytes `b` to `out` as text: what is not UTF-8 becomes U+FFFD (as
/// `from_utf8_lossy`), or with `exact` each such byte a NUL and that byte as a
/// Latin-1 char — one-to-one, as no header value holds a NUL (Envoy refuses them).
pub fn push_text(out: &mut String, b: &[u8], exact: bool) {
    for chunk in b.utf8_chunks() {
        out.push_str(chunk.valid());
        let bad = chunk.invalid();
        if !exact && !bad.is_empty() {
            out.push(char::REPLACEMENT_CHARACTER);
        } else if exact {
            for &x in bad {
                out.push('\0');
                out.push(char::from(x));
            }
        }
    }
}

/// Parses the proxy-wasm map format; None when malformed.
pub fn parse_map(raw: &[u8]) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    each_pair(raw, |k, v| out.push((text(k), text(v))))?;
    Some(out)
}

/// Hands each pair of a map in the proxy-wasm format to `f`, in order; None when
/// malformed (the pairs before the fault were handed out).
fn each_pair(raw: &[u8], mut f: impl FnMut(&[u8], &[u8])) -> Option<()> {
    let u32_at = |i: usize| Some(u32::from_le_bytes(raw.get(i..i + 4)?.try_into().ok()?) as usize);
    if raw.is_empty() {
        return Some(());
    }
    let n = u32_at(0)?;
    let mut at = 4usize.checked_add(n.checked_mul(8)?)?;
    for i in 0..n {
        let (kl, vl) = (u32_at(4 + i * 8)?, u32_at(8 + i * 8)?);
        let k = raw.get(at..at + kl)?;
        at += kl;
        (raw.get(at) == Some(&0)).then_some(())?;
        let v = raw.get(at + 1..at + 1 + vl)?;
        at += 1 + vl;
        (raw.get(at) == Some(&0)).then_some(())?;
        at += 1;
        f(k, v);
    }
    Some(())
}

/// `f` of the current response body chunk: `Some` of its `size` bytes, `None` when
/// the host gave fewer (the call failed: the VM had no memory for them).
pub fn response_body(size: usize, f: impl FnOnce(Option<&[u8]>)) {
    // SAFETY: valid out-pointers.
    let _ = fetch(
        |p, n| unsafe { proxy_get_buffer_bytes(RESPONSE_BODY, 0, size, p, n) },
        |b| f((b.len() == size).then_some(b)),
    );
}

/// A header parsed as a number.
pub fn header_number(map: u32, name: &str) -> Option<u32> {
    header(map, name, |v| {
        let digits = v.trim_ascii();
        if digits.is_empty() || digits.len() > 9 {
            return None;
        }
        digits.iter().try_fold(0u32, |n, &d| {
            d.is_ascii_digit().then(|| n * 10 + u32::from(d - b'0'))
        })
    })
    .flatten()
}

/// `f` of a property by `\0`-joined path; None when absent or on any host error.
pub fn property<R>(path: &[u8], f: impl FnOnce(&[u8]) -> R) -> Option<R> {
    // SAFETY: valid path slice and out-pointers.
    fetch(
        |p, n| unsafe { proxy_get_property(path.as_ptr(), path.len(), p, n) },
        f,
    )
    .ok()
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

fn ptr(b: &[u8]) -> (P, usize) {
    if b.is_empty() {
        (core::ptr::null(), 0)
    } else {
        (b.as_ptr(), b.len())
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
    let ((bp, bn), (hp, hn)) = (ptr(body), ptr(headers));
    // SAFETY: valid slices; empty ones are sent as (null, 0).
    unsafe {
        proxy_send_local_response(
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
}

/// Makes `context_id` the effective context for the following calls.
pub fn set_effective_context(context_id: u32) -> u32 {
    // SAFETY: plain value call.
    unsafe { proxy_set_effective_context(context_id) }
}

/// Resumes the effective stream's request (paused in `on_http_request_headers`).
pub fn continue_request() -> u32 {
    // SAFETY: plain value call; stream type 0 = request.
    unsafe { proxy_continue_stream(0) }
}

/// Defines a metric; None on failure (the metric is then skipped).
pub fn define_metric(kind: u32, name: &str) -> Option<u32> {
    let mut id = 0u32;
    // SAFETY: valid name slice and out-pointer.
    let s = unsafe { proxy_define_metric(kind, name.as_ptr(), name.len(), &mut id) };
    (s == OK).then_some(id)
}

/// Adds `delta` (may be negative for gauges); failures ignored.
pub fn increment_metric(id: u32, delta: i64) {
    // SAFETY: plain value call.
    unsafe { proxy_increment_metric(id, delta) };
}

/// Sets a gauge / records a histogram sample; failures ignored.
pub fn record_metric(id: u32, value: u64) {
    // SAFETY: plain value call.
    unsafe { proxy_record_metric(id, value) };
}

/// Performs one of the engine's store requests on proxy-wasm shared data. Tokens
/// are the host's `u32` CAS values; the host does not return new tokens.
pub fn shared_data(io: &Io<'_>) -> OwnedAnswer {
    let key = io.key.as_bytes();
    match io.op {
        Op::Read => {
            let mut cas = 0u32;
            // SAFETY: valid key slice and out-pointers.
            let r = fetch(
                |p, n| unsafe { proxy_get_shared_data(key.as_ptr(), key.len(), p, n, &mut cas) },
                <[u8]>::to_vec,
            );
            match r {
                Ok(v) => OwnedAnswer::Found(v, u64::from(cas)),
                Err(NOT_FOUND) => OwnedAnswer::NotFound,
                Err(s) => OwnedAnswer::Failed(s),
            }
        }
        Op::Write { value, expect } => {
            // SAFETY: valid slices.
            let set = |cas| unsafe {
                proxy_set_shared_data(key.as_ptr(), key.len(), value.as_ptr(), value.len(), cas)
            };
            let absent = || {
                matches!(
                    shared_data(&Io {
                        op: Op::Read,
                        ..*io
                    }),
                    OwnedAnswer::NotFound
                )
            };
            match expect.proxy_wasm_set(set, absent) {
                OK => OwnedAnswer::Written(None),
                CAS_MISMATCH => OwnedAnswer::Conflict(None, false),
                s => OwnedAnswer::Failed(s),
            }
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
        super::serialize_map(&[("a", "bc"), ("d", "")], &mut out);
        let pairs = super::parse_map(&out).unwrap();
        assert_eq!(
            pairs,
            vec![("a".into(), "bc".into()), ("d".into(), String::new())]
        );
        for cut in 0..out.len() {
            assert!(
                super::parse_map(&out[..cut]).is_none() || cut == 0,
                "truncated at {cut}"
            );
        }
    }

    #[test]
    fn values_of_a_repeated_header_are_joined_in_order() {
        let mut raw = Vec::new();
        super::serialize_map(&[("x-t", "a"), ("y", "1"), ("x-t", "b")], &mut raw);
        assert_eq!(super::values_in(&raw, "x-t", false).as_deref(), Some("a,b"));
        assert_eq!(super::values_in(&raw, "y", false).as_deref(), Some("1"));
        assert_eq!(super::values_in(&raw, "z", false), None);
        assert_eq!(
            super::values_in(&raw[..raw.len() - 1], "x-t", false),
            None,
            "malformed"
        );
    }

    proptest::proptest! {
        /// `push_text` is `from_utf8_lossy`, or with `exact` one-to-one on header
        /// values (which hold no NUL): `b` is `a` with some bytes past ASCII changed,
        /// which makes or alters sequences that are not UTF-8 (where lossy text meets).
        #[test]
        fn exact_text_is_one_to_one(
            a in proptest::collection::vec(
                proptest::prop_oneof![1u8..=0x7f, 0x80u8..=0xff], 0..12),
            flips in proptest::collection::vec(proptest::prelude::any::<(bool, u8)>(), 12),
        ) {
            let text = |v: &[u8], exact| {
                let mut s = String::new();
                super::push_text(&mut s, v, exact);
                s
            };
            let b: Vec<u8> = a
                .iter()
                .zip(&flips)
                .map(|(&x, &(flip, to))| if flip && x >= 0x80 { 0x80 | to } else { x })
                .collect();
            proptest::prop_assert_eq!(text(&a, false), String::from_utf8_lossy(&a));
            proptest::prop_assert_eq!(text(&b, false), String::from_utf8_lossy(&b));
            proptest::prop_assert_eq!(text(&a, true) == text(&b, true), a == b);
        }
    }

    #[test]
    fn off_wasm_every_call_reports_unimplemented() {
        assert_eq!(super::wall_ns(), None);
        assert_eq!(super::monotonic_ns(), None);
        assert_eq!(super::plugin_configuration(), Err(super::UNIMPLEMENTED));
        assert_eq!(super::header(0, ":path", <[u8]>::to_vec), None);
    }

    /// A fake host call: allocates `sizes` through the guest's allocator (as the
    /// host does), writes the last buffer and reports it.
    fn host_writes(sizes: &[usize], fill: u8) -> impl FnOnce(super::M, *mut usize) -> u32 + '_ {
        move |p, n| {
            let mut last = core::ptr::null_mut();
            for &size in sizes {
                last = super::allocate(size);
                // SAFETY: `allocate` returned `size` writable bytes.
                unsafe { core::ptr::write_bytes(last, fill, size) };
            }
            // SAFETY: valid out-pointers from `fetch`.
            unsafe {
                *p = last;
                *n = sizes.last().copied().unwrap_or(0);
            }
            super::OK
        }
    }

    #[test]
    fn small_answers_use_the_scratch_buffer_and_release_it() {
        let scratch: *mut u8 = super::SCRATCH_BUF.bytes.get().cast();
        // Small: the scratch buffer, released after the read.
        let r = super::fetch(host_writes(&[3], 7), |b| {
            (b.as_ptr() == scratch, b.to_vec())
        });
        assert_eq!(r, Ok((true, vec![7, 7, 7])));
        let again = super::fetch(host_writes(&[2], 1), |b| b.as_ptr() == scratch);
        assert_eq!(again, Ok(true), "released after the first read");
        // Larger than the scratch buffer: heap memory, read the same.
        let big = super::fetch(host_writes(&[super::SCRATCH + 1], 9), |b| {
            (b.as_ptr() == scratch, b.len(), b.iter().all(|&x| x == 9))
        });
        assert_eq!(big, Ok((false, super::SCRATCH + 1, true)));
        // Two allocations in one call: the second finds the scratch taken.
        let two = super::fetch(host_writes(&[4, 5], 3), |b| {
            (b.as_ptr() == scratch, b.len())
        });
        assert_eq!(two, Ok((false, 5)));
        assert_eq!(
            super::fetch(host_writes(&[1], 0), |b| b.as_ptr() == scratch),
            Ok(true)
        );
    }

    /// Memory the heap cannot give is a null pointer (the host call fails), not an
    /// abort that kills the VM (found by review: a response chunk larger than the
    /// memory left trapped in `proxy_on_memory_allocate`).
    #[test]
    fn an_allocation_that_cannot_be_had_is_null() {
        // black_box: an allocation whose pointer is only compared with null may be
        // elided by the optimizer (natively; in the VM the pointer goes to the host).
        let huge = |n: usize| std::hint::black_box(super::allocate(std::hint::black_box(n)));
        assert!(huge(usize::MAX / 2).is_null());
        assert!(huge(isize::MAX as usize + 1).is_null());
        assert!(!super::allocate(0).is_null(), "nothing to free, never null");
        let big = super::fetch(host_writes(&[super::SCRATCH + 3], 5), <[u8]>::len);
        assert_eq!(big, Ok(super::SCRATCH + 3), "heap answers still work");
    }
}
