//! Native tests of the binding: lifecycle, the flow through the numbers-only ABI, and
//! hostile input (every argument of every export) that must never panic.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use super::*;

fn put(bytes: &[u8]) {
    with((), |s| {
        s.scratch.clear();
        s.scratch.extend_from_slice(bytes);
    });
}

fn out(i: usize) -> f64 {
    with(f64::NAN, |s| s.out.get(i).copied().unwrap_or(f64::NAN))
}

fn msg() -> String {
    with(String::new(), |s| {
        String::from_utf8_lossy(&s.msg).into_owned()
    })
}

fn create(config: &str, name: &str) -> i32 {
    let mut b = config.as_bytes().to_vec();
    b.extend_from_slice(name.as_bytes());
    put(&b);
    fw_create(config.len() as u32, 0, name.len() as u32, 0, 1, 0, 1_000.0)
}

#[test]
fn config_errors_carry_the_path() {
    let h = create(
        r#"{"breaker": {"error_percentage": {"threshold_percentage": 150}}}"#,
        "x",
    );
    assert_eq!(h, -1);
    let path_len = out(0) as usize;
    let m = msg();
    assert_eq!(
        &m[..path_len],
        "breaker.error_percentage.threshold_percentage"
    );
    assert_eq!(&m[path_len..], "must be a number in 0..=100, got 150");
    // Shared section errors are prefixed.
    let cfg = "{}";
    let shared = r#"{"namespace": "bad ns"}"#;
    let mut b = cfg.as_bytes().to_vec();
    b.extend_from_slice(shared.as_bytes());
    b.extend_from_slice(b"n");
    put(&b);
    assert_eq!(fw_create(2, shared.len() as u32, 1, 0, 0, 0, 0.0), -1);
    assert!(msg().starts_with("shared.namespace"), "{}", msg());
}

#[test]
fn create_reports_the_config_warnings_as_bits() {
    use fusewire_core::ConfigWarning;
    // The wrapper words each bit (CONFIG_WARNINGS in ts/options.ts): a new kind
    // needs its words there, and its bit here.
    let wrapper = include_str!("../ts/options.ts");
    for w in ConfigWarning::ALL {
        let row = format!("[{}, '{}', ", 1u32 << w as u32, w.path());
        assert!(
            wrapper.contains(&row),
            "ts/options.ts CONFIG_WARNINGS lacks {row}"
        );
    }
    assert!(create("{}", "quiet") >= 0);
    assert_eq!(out(0), 0.0, "none for the defaults");
    let all = r#"{"bulkhead": {"isolation": "pool", "max_queue": 9},
                  "breaker": {"slow_call": {"enabled": true}, "half_open": {"probe_timeout_ms": 10}}}"#;
    assert!(create(all, "loud") >= 0);
    assert_eq!(out(0), 7.0, "one bit each");
}

#[test]
fn a_call_trips_and_reports_a_transition() {
    let h = create(
        r#"{"breaker": {"error_percentage": {"request_volume_threshold": 0}}}"#,
        "trip",
    ) as u32;
    let r = fw_start(h, 1_000.0);
    assert_eq!(r & 0xf, RUNNING);
    assert_ne!(r & F_REARM, 0, "the first deadline wants a timer");
    let id = out(0);
    let c = fw_complete(h, id, 1, 1_001.0);
    assert_eq!(c & 0x3, 0);
    assert_ne!(c & F_EVENTS, 0);
    assert_eq!(fw_poll(h, 1_001.0), EV_TRANSITION);
    assert_eq!((out(0), out(1), out(2)), (0.0, 1.0, 0.0));
    assert_eq!(fw_poll(h, 1_001.0), EV_NONE);
    let r = fw_start(h, 1_002.0);
    assert_eq!(r & 0xf, REFUSED);
    assert_eq!((r >> 4) & 0xf, EventKind::ShortCircuited.index() as i32);
    assert_eq!(fw_state(h, 1_002.0) & 3, 1);
    // The second completion of the same permit is unknown.
    assert_eq!(fw_complete(h, id, 0, 1_003.0) & 3, 2);
    assert_eq!(fw_snapshot(h, 1_003.0), 0);
    assert_eq!(out(4 + EventKind::Failure.index()), 1.0);
    assert!(fw_next(h) > 1_000.0);
    // A handle with bit 31 set is forged (found by review: it acted as the handle).
    assert_eq!(fw_start(h | 1 << 31, 1_003.0), E_HANDLE);
    assert_eq!(fw_state(h | 1 << 31, 1_003.0), E_HANDLE);
    assert_eq!(fw_free(h | 1 << 31), 0);
    assert_eq!(fw_free(h), 1);
    assert_eq!(fw_free(h), 0);
    assert_eq!(fw_start(h, 0.0), E_HANDLE);
}

/// Freed slots are taken again, last freed first, under a new generation: the old
/// handles stay stale.
#[test]
fn freed_slots_are_taken_again_with_a_new_generation() {
    let a = create("{}", "a") as u32;
    let b = create("{}", "b") as u32;
    assert_eq!((fw_free(a), fw_free(b)), (1, 1));
    let (c, d, e) = (
        create("{}", "c") as u32,
        create("{}", "d") as u32,
        create("{}", "e") as u32,
    );
    assert_eq!(c & INDEX_MASK, b & INDEX_MASK);
    assert_eq!(d & INDEX_MASK, a & INDEX_MASK);
    assert_ne!(e & INDEX_MASK, a & INDEX_MASK);
    assert_ne!(e & INDEX_MASK, b & INDEX_MASK);
    for stale in [a, b] {
        assert_eq!(fw_start(stale, 0.0), E_HANDLE);
        assert_eq!(fw_free(stale), 0);
    }
    for live in [c, d, e] {
        assert_eq!(fw_start(live, 0.0) & 0xf, RUNNING);
        assert_eq!(fw_free(live), 1);
    }
}

#[test]
fn timeouts_are_polled() {
    let h = create(r#"{"execution": {"timeout_ms": 50}}"#, "t") as u32;
    assert_eq!(fw_start(h, 2_000.0) & 0xf, RUNNING);
    let id = out(0);
    assert!((fw_next(h) - 2_050.0).abs() < 1e-9, "{}", fw_next(h));
    assert_eq!(fw_poll(h, 2_049.0), EV_NONE);
    assert_eq!(fw_poll(h, 2_050.0), EV_TIMED_OUT);
    assert_eq!(out(0), id);
    assert_eq!(fw_complete(h, id, 0, 2_100.0) & 3, 1, "late");
    fw_free(h);
}

#[test]
fn hostile_numbers_never_panic() {
    let h = create("{}", "hostile") as u32;
    let nums = [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        -1.0,
        -0.0,
        0.5,
        1e300,
        -1e300,
        9_007_199_254_740_993.0,
        f64::MAX,
        f64::MIN_POSITIVE,
    ];
    let ints = [
        0u32,
        1,
        2,
        3,
        4,
        5,
        12,
        13,
        255,
        u32::MAX,
        1 << 31,
        0xFFFF_FFFE,
    ];
    for &n in &nums {
        for &i in &ints {
            let _ = fw_start(h, n);
            let _ = fw_complete(h, n, i, n);
            let _ = fw_complete(i, n, i, n);
            let _ = fw_cancel_ticket(h, n, n);
            let _ = fw_poll(h, n);
            let _ = fw_poll(i, n);
            let _ = fw_next(i);
            let _ = fw_fallback(h, n);
            let _ = fw_fallback_done(h, n, i, n);
            let _ = fw_record(h, i, i, n);
            let _ = fw_force(h, i, n);
            let _ = fw_state(h, n);
            let _ = fw_state(i, n);
            let _ = fw_snapshot(h, n);
            let _ = fw_buckets(h, n);
            let _ = fw_prepare(h, 1, n);
            let _ = fw_io(h, n);
            let _ = fw_io_done(h, n, i, n, i, i, n);
            let _ = fw_has_io(i);
            let _ = fw_flushed(i);
            let _ = fw_quiet(i);
            let _ = fw_create(i, i, i, i, i, i, n);
            let _ = fw_check(i);
            let _ = fw_free(i.wrapping_add(7));
            let _ = fw_cache_lookup(h, i, n, i, n);
            let _ = fw_cache_settle(h, i, n, i, n);
            let _ = fw_cache_offer(h, i, n, i, n);
            let _ = fw_cache_cancel(h, i, n, i, n);
            let _ = fw_cache_invalidate(h, i, n, i, n);
            let _ = fw_cache_clear(h, i, n, n);
            let _ = fw_cache_scope(h, n, n);
            let _ = fw_cache_scope(i, -1.0, n);
            let _ = fw_cache_poll(h, i, n);
            let _ = fw_col_add(h, i, n);
            let _ = fw_col_poll(h, n, i);
            let _ = fw_col_items(h, n);
            let _ = fw_col_complete(h, n, i, i);
            let _ = fw_col_fail(h, n);
        }
    }
    assert_eq!(fw_scratch(u32::MAX), 0);
    assert_ne!(fw_snapshot(h, 5.0), E_BUSY);
    fw_free(h);
}

#[test]
fn garbage_config_bytes_are_errors() {
    for bytes in [
        &b"\xff\xfe"[..],
        b"{",
        b"[1]",
        b"null",
        b"{\"breaker\": 7}",
        b"",
    ] {
        let mut b = bytes.to_vec();
        b.push(b'n');
        put(&b);
        assert_eq!(
            fw_create(bytes.len() as u32, 0, 1, 0, 0, 0, 0.0),
            -1,
            "{bytes:?}"
        );
        assert!(!msg().is_empty());
    }
}

#[test]
fn shared_breakers_drive_the_store_protocol() {
    use fusewire_core::shared::memory::{MemoryStore, Rules};
    let mut store = MemoryStore::new(Rules::Script);
    let cfg = r#"{"breaker": {"error_percentage": {"request_volume_threshold": 0}}}"#;
    let shared = "{}";
    let mut hs = Vec::new();
    for w in 0..2u32 {
        let mut b = cfg.as_bytes().to_vec();
        b.extend_from_slice(shared.as_bytes());
        b.extend_from_slice(b"svc");
        put(&b);
        let h = fw_create(cfg.len() as u32, 2, 3, 0, w + 1, 0, 10.0);
        assert!(h >= 0, "{}", msg());
        hs.push(h as u32);
    }
    let drive = drive_store;
    for &h in &hs {
        fw_prepare(h, 1, 20.0);
        drive(h, &mut store, 20.0);
    }
    // Worker 0 fails one call: the trip is written through the store.
    let h0 = hs[0];
    fw_prepare(h0, 1, 30.0);
    drive(h0, &mut store, 30.0);
    assert_eq!(fw_start(h0, 30.0) & 0xf, RUNNING);
    let id = out(0);
    drive(h0, &mut store, 30.0);
    fw_complete(h0, id, 1, 31.0);
    drive(h0, &mut store, 31.0);
    while fw_poll(h0, 31.0) != EV_NONE {}
    drive(h0, &mut store, 31.0);
    // Worker 1 sees it on its first call after one refresh interval (sync_ms 100).
    let h1 = hs[1];
    fw_prepare(h1, 1, 121.0);
    drive(h1, &mut store, 121.0);
    let r = fw_start(h1, 121.0);
    assert_eq!(r & 0xf, REFUSED, "worker 1 rejects after worker 0's trip");
    for h in hs {
        fw_free(h);
    }
}

#[test]
fn cache_and_collapser_through_the_abi() {
    let cfg = r#"{"cache": {"ttl_ms": 0, "max_waiters": 10},
                  "collapser": {"window_ms": 5, "max_batch_size": 3}}"#;
    let coalesce = r#"{"ttl_ms": 1000}"#;
    let mut b = cfg.as_bytes().to_vec();
    b.extend_from_slice(b"c");
    b.extend_from_slice(coalesce.as_bytes());
    put(&b);
    let h = fw_create(cfg.len() as u32, 0, 1, coalesce.len() as u32, 0, 0, 1_000.0);
    assert!(h >= 0, "{}", msg());
    let h = h as u32;
    // Cache: lead, a follower joins, the fill serves it, a later lookup hits.
    put(b"k1");
    assert_eq!(fw_cache_lookup(h, 0, 0.0, 2, 1_000.0) & 0xf, 2);
    let lead = out(0);
    put(b"k1");
    assert_eq!(fw_cache_lookup(h, 0, 0.0, 2, 1_000.0) & 0xf, 3);
    let wait = out(0);
    assert_eq!(fw_cache_settle(h, 0, lead, 1, 1_001.0) & 0xff, 0);
    let entry = out(0);
    assert!(entry >= 0.0);
    assert_eq!(out(2), 1.0, "one follower served");
    assert_eq!(fw_cache_poll(h, 0, 1_001.0), 1);
    assert_eq!((out(0), out(1), out(2)), (wait, entry, 0.0));
    put(b"k1");
    assert_eq!(fw_cache_lookup(h, 0, 0.0, 2, 1_002.0) & 0xf, 1);
    assert_eq!(out(0), entry);
    assert_eq!(
        fw_cache_settle(h, 0, lead, 1, 1_003.0),
        -1,
        "a lead settles once"
    );
    put(b"k1");
    assert_eq!(fw_cache_invalidate(h, 0, 0.0, 2, 1_003.0), 1);
    assert_eq!(fw_cache_poll(h, 0, 1_003.0), 4);
    assert_eq!((out(0), out(1)), (entry, 3.0));
    // The coalescing cache is there too; a third one is not.
    put(b"x");
    assert_eq!(fw_cache_lookup(h, 1, 0.0, 1, 1_004.0) & 0xf, 2);
    assert_eq!(fw_cache_lookup(h, 2, 0.0, 1, 1_004.0), 0);
    // Collapser: three items fill a batch.
    for i in 0..3 {
        put(b"batch");
        let r = fw_col_add(h, 5, 1_010.0) & 0xf;
        assert_eq!(r, if i == 2 { 2 } else { 1 });
    }
    let batch = fw_col_poll(h, 1_010.0, 0);
    assert!(batch >= 0.0);
    assert_eq!(fw_col_items(h, batch), 3);
    assert!(fw_col_complete(h, batch, 1, 1) >= 0.0);
    assert_eq!(fw_col_complete(h, batch, 1, 1), -1.0, "once per item");
    assert_eq!(fw_col_fail(h, batch), 2, "the rest fail");
    // A window-driven flush: fw_next reports the collapser's deadline.
    put(b"batch");
    assert_eq!(fw_col_add(h, 5, 1_020.0) & 0xf, 1);
    let next = fw_next(h);
    assert!((next - 1_025.0).abs() < 1e-6, "{next}");
    assert_eq!(fw_col_poll(h, 1_024.0, 0), -1.0);
    let batch = fw_col_poll(h, 1_025.0, 0);
    assert!(batch >= 0.0);
    assert_eq!(fw_col_items(h, batch), 1, "the window flushed the one item");
    assert_eq!(fw_col_items(h, -1.0), 0, "a forged batch id holds nothing");
    fw_free(h);
}

#[test]
fn request_scopes_through_the_abi() {
    let cfg = r#"{"cache": {"ttl_ms": 0, "max_scopes": 2}}"#;
    put(cfg.as_bytes());
    let h = fw_create(cfg.len() as u32, 0, 0, 0, 0, 0, 1_000.0);
    assert!(h >= 0, "{}", msg());
    let h = h as u32;
    let scope = fw_cache_scope(h, -1.0, 1_000.0);
    assert!(scope > 0.0);
    // One key in the scope and in the global scope: two entries.
    put(b"k");
    assert_eq!(fw_cache_lookup(h, 0, scope, 1, 1_000.0) & 0xf, 2);
    let lead = out(0);
    put(b"k");
    assert_eq!(
        fw_cache_lookup(h, 0, 0.0, 1, 1_000.0) & 0xf,
        2,
        "the global scope leads too"
    );
    assert_eq!(fw_cache_settle(h, 0, lead, 1, 1_000.0) & 0xff, 0);
    let entry = out(0);
    put(b"k");
    assert_eq!(fw_cache_lookup(h, 0, scope, 1, 1_000.0) & 0xf, 1);
    assert_eq!(out(0), entry);
    // Clearing the global scope leaves the request's entry.
    fw_cache_clear(h, 0, 0.0, 1_000.0);
    put(b"k");
    assert_eq!(fw_cache_lookup(h, 0, scope, 1, 1_000.0) & 0xf, 1);
    // Closing removes its entry.
    assert_eq!(fw_cache_scope(h, scope, 1_001.0), 1.0);
    assert_eq!(fw_cache_poll(h, 0, 1_001.0), 4);
    assert_eq!((out(0), out(1)), (entry, 2.0), "removed: scope closed");
    put(b"k");
    assert_eq!(
        fw_cache_lookup(h, 0, scope, 1, 1_001.0) & 0xf,
        4,
        "a closed scope is bypassed"
    );
    assert_eq!(fw_cache_scope(h, scope, 1_001.0), 0.0, "closed once");
    assert_eq!(
        fw_cache_scope(h, 0.0, 1_001.0),
        0.0,
        "the global scope stays"
    );
    // Two scopes at most.
    assert!(fw_cache_scope(h, -1.0, 1_001.0) > 0.0);
    assert!(fw_cache_scope(h, -1.0, 1_001.0) > 0.0);
    assert_eq!(fw_cache_scope(h, -1.0, 1_001.0), -1.0);
    assert_eq!(fw_cache_scope(u32::MAX, -1.0, 1_001.0), -1.0);
    fw_free(h);
}

#[test]
#[ignore = "timing, run by hand: cargo test --release -p fusewire-js -- --ignored --nocapture"]
fn timing_of_the_hot_path() {
    let h = create(r#"{"execution": {"timeout_ms": 10000}}"#, "t") as u32;
    let n = 2_000_000u32;
    let mut now = 1_000.0;
    fw_start(h, now);
    fw_next(h);
    let t0 = std::time::Instant::now();
    for _ in 0..n {
        now += 0.001;
        fw_start(h, now);
        let id = out(0);
        fw_complete(h, id, 0, now);
    }
    println!(
        "start+complete: {:.1} ns",
        t0.elapsed().as_nanos() as f64 / f64::from(n)
    );
    let t0 = std::time::Instant::now();
    for _ in 0..n {
        std::hint::black_box(fw_next(h));
    }
    println!(
        "fw_next: {:.1} ns",
        t0.elapsed().as_nanos() as f64 / f64::from(n)
    );
    let t0 = std::time::Instant::now();
    for _ in 0..n {
        std::hint::black_box(fw_has_io(h));
    }
    println!(
        "fw_has_io: {:.1} ns",
        t0.elapsed().as_nanos() as f64 / f64::from(n)
    );
    fw_free(h);
}

#[test]
#[ignore = "timing, run by hand"]
fn timing_of_the_engine_alone() {
    use fusewire_core::{Config, Engine, Outcome, Start};
    let mut e = Engine::local();
    let p = e
        .add_policy(
            "p",
            Config::from_json(r#"{"execution": {"timeout_ms": 10000}}"#).unwrap(),
        )
        .unwrap();
    let mut now = 1_000_000_000u64;
    let k = e.key(p, "k", now).unwrap();
    let n = 2_000_000u32;
    let t0 = std::time::Instant::now();
    for _ in 0..n {
        now += 1_000;
        if let Start::Running(permit) = e.start(k, now, 0) {
            e.complete(permit, Outcome::Success, now, 0);
        }
    }
    println!(
        "engine start+complete: {:.1} ns",
        t0.elapsed().as_nanos() as f64 / f64::from(n)
    );
    let t0 = std::time::Instant::now();
    for _ in 0..n {
        std::hint::black_box(e.next_deadline());
    }
    println!(
        "engine next_deadline: {:.1} ns",
        t0.elapsed().as_nanos() as f64 / f64::from(n)
    );
}

#[test]
fn a_deadline_read_back_in_milliseconds_is_exactly_that_far_in_nanoseconds() {
    // performance.now() readings are fractional; `t0 + 30` must be 30 ms after `t0` in
    // the core, or a timer armed for a deadline finds it 1 ns short of due.
    // Host times lie on the wall-clock timeline (`timeOrigin + now()`, 1.8e12 ms),
    // where nanoseconds pass 2^53: a product `ms * 1e6` rounds to 256 ns there.
    let mut short = 0;
    for base in [1_000.0, 1_796_477_150_670.097, 4.1e12] {
        for i in 0..100_000u32 {
            let t0 = base + f64::from(i) * 1.234_567;
            for (d, d_ns) in [(30.0, 30_000_000), (10.5, 10_500_000), (1.0, 1_000_000)] {
                if ns(t0 + d) - ns(t0) != d_ns {
                    short += 1;
                }
            }
            assert_eq!(ns(ms(ns(t0))), ns(t0), "round trip of {t0}");
            if base > 1e9 {
                // Past a nanosecond's resolution: a time reads back as itself.
                assert_eq!(ms(ns(t0)), t0, "read back: {t0}");
            }
        }
    }
    assert_eq!(short, 0);
    assert_eq!(ns(f64::INFINITY), u64::MAX);
    assert_eq!(ns(1e300), u64::MAX);
    assert_eq!(ns(-5.0), 0);
}

/// Runs worker `h`'s store requests against `store` until it has none (64 at most).
fn drive_store(h: u32, store: &mut fusewire_core::shared::memory::MemoryStore, now: f64) {
    use fusewire_core::shared::OwnedAnswer as A;
    for _ in 0..64 {
        let op = fw_io(h, now);
        if op <= 0 {
            break;
        }
        let (id, key, value, expect) =
            with((0.0, String::new(), Vec::new(), Expect::Absent), |s| {
                let Some((b, out, _)) = s.parts(h) else {
                    return (0.0, String::new(), Vec::new(), Expect::Absent);
                };
                let expect = if out[1] == 1.0 {
                    Expect::Token(out[2] as u64)
                } else {
                    Expect::Absent
                };
                (
                    out[0],
                    String::from_utf8_lossy(&b.io_key).into_owned(),
                    b.io_value.clone(),
                    expect,
                )
            });
        let io = fusewire_core::shared::Io {
            id: IoId::from_raw(id as u64),
            key: &key,
            op: if op == 1 {
                Op::Read
            } else {
                Op::Write {
                    value: &value,
                    expect,
                }
            },
        };
        let (kind, token, bytes, flag) = match store.exec(&io) {
            A::Found(v, t) => (0, t as f64, v, 0),
            A::NotFound => (1, -1.0, vec![], 0),
            A::Written(t) => (2, t.map_or(-1.0, |t| t as f64), vec![], 0),
            A::Conflict(Some((v, t)), absent) => (3, t as f64, v, u32::from(absent)),
            A::Conflict(None, absent) => (3, -1.0, vec![], u32::from(absent)),
            A::Failed(c) => (4, -1.0, vec![], c),
        };
        put(&bytes);
        fw_io_done(h, id, kind, token, bytes.len() as u32, flag, now);
    }
}

mod programs {
    //! Random programs of ABI calls — on a local breaker with a cache, a coalescing
    //! cache, a collapser, a queued bulkhead and timeouts, and on two breakers sharing
    //! a store — with ids the calls returned, forged ones and hostile numbers mixed
    //! in: no call may panic (a panic traps the module that serves every breaker of
    //! the process).
    use super::*;
    use proptest::prelude::*;

    const HOSTILE: [f64; 8] = [
        f64::NAN,
        f64::INFINITY,
        -1.0,
        -0.0,
        0.5,
        1e300,
        9_007_199_254_740_993.0,
        f64::MAX,
    ];

    #[derive(Clone, Debug)]
    enum Call {
        Advance(u16),
        Start(u8),
        Complete(u8, u8, u32),
        Cancel(u8, u8),
        Poll(u8),
        Drive(u8),
        Fallback(u8, bool),
        Force(u8, u32),
        Record(u8, u32, u32),
        Read(u8),
        Cache(u8, u32, u8, u8),
        Collapse(u8, u8, u32),
        Hostile(u8, u8),
        Recreate(u8),
    }

    fn call() -> impl Strategy<Value = Call> {
        prop_oneof![
            3 => any::<u16>().prop_map(|ms| Call::Advance(ms % 3000)),
            6 => any::<u8>().prop_map(Call::Start),
            5 => (any::<u8>(), any::<u8>(), any::<u32>()).prop_map(|(h, i, o)| Call::Complete(h, i, o)),
            1 => (any::<u8>(), any::<u8>()).prop_map(|(h, i)| Call::Cancel(h, i)),
            3 => any::<u8>().prop_map(Call::Poll),
            3 => any::<u8>().prop_map(Call::Drive),
            1 => (any::<u8>(), any::<bool>()).prop_map(|(h, ok)| Call::Fallback(h, ok)),
            1 => (any::<u8>(), any::<u32>()).prop_map(|(h, p)| Call::Force(h, p)),
            1 => (any::<u8>(), any::<u32>(), any::<u32>()).prop_map(|(h, k, n)| Call::Record(h, k, n)),
            2 => any::<u8>().prop_map(Call::Read),
            3 => (any::<u8>(), any::<u32>(), any::<u8>(), any::<u8>()).prop_map(|(h, w, k, i)| Call::Cache(h, w, k, i)),
            3 => (any::<u8>(), any::<u8>(), any::<u32>()).prop_map(|(h, k, o)| Call::Collapse(h, k, o)),
            1 => (any::<u8>(), any::<u8>()).prop_map(|(h, x)| Call::Hostile(h, x)),
            1 => any::<u8>().prop_map(Call::Recreate),
        ]
    }

    fn make(i: usize, now: f64) -> u32 {
        let (cfg, shared, coalesce) = if i == 0 {
            (
                r#"{"cache": {"ttl_ms": 50, "max_waiters": 3, "max_entries": 4},
                    "collapser": {"window_ms": 5, "max_batch_size": 3},
                    "execution": {"timeout_ms": 40},
                    "bulkhead": {"isolation": "pool", "max_concurrent": 2, "max_queue": 2,
                                 "queue_rejection_threshold": 2, "max_wait_ms": 30},
                    "breaker": {"error_percentage": {"request_volume_threshold": 2},
                                "open": {"sleep_window_ms": 50}}}"#,
                "",
                r#"{"ttl_ms": 0}"#,
            )
        } else {
            (
                r#"{"bulkhead": {"max_concurrent": 2}, "execution": {"timeout_ms": 40},
                    "breaker": {"error_percentage": {"request_volume_threshold": 2},
                                "half_open": {"permitted_probes": 2, "success_threshold": 2},
                                "open": {"sleep_window_ms": 50}}}"#,
                r#"{"flush_ms": 10, "sync_ms": 0}"#,
                "",
            )
        };
        let mut b = cfg.as_bytes().to_vec();
        b.extend_from_slice(shared.as_bytes());
        b.extend_from_slice(b"p");
        b.extend_from_slice(coalesce.as_bytes());
        put(&b);
        let h = fw_create(
            cfg.len() as u32,
            shared.len() as u32,
            1,
            coalesce.len() as u32,
            i as u32,
            0,
            now,
        );
        assert!(h >= 0, "{}", msg());
        h as u32
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn random_programs_never_panic(calls in prop::collection::vec(call(), 1..200)) {
            let mut store = fusewire_core::shared::memory::MemoryStore::new(fusewire_core::shared::memory::Rules::Script);
            let mut now = 1_000.0;
            let mut hs: Vec<u32> = (0..3).map(|i| make(i, now)).collect();
            // Ids the calls returned (call ids, leads, batches), to hand back.
            let mut ids: Vec<f64> = vec![0.0];
            let pick = |ids: &Vec<f64>, i: u8| ids[i as usize % ids.len()];
            for c in calls {
                match c {
                    Call::Advance(ms) => now += f64::from(ms),
                    Call::Start(h) => {
                        let h = hs[h as usize % 3];
                        fw_prepare(h, 1, now);
                        drive_store(h, &mut store, now);
                        if fw_start(h, now) >= 0 { ids.push(out(0)); }
                    }
                    Call::Complete(h, i, o) => { fw_complete(hs[h as usize % 3], pick(&ids, i), o % 6, now); }
                    Call::Cancel(h, i) => {
                        fw_cancel_ticket(hs[h as usize % 3], pick(&ids, i), now);
                        fw_complete(hs[h as usize % 3], pick(&ids, i), 5, now);
                    }
                    Call::Poll(h) => { let h = hs[h as usize % 3]; for _ in 0..64 { if fw_poll(h, now) == EV_NONE { break; } ids.push(out(0)); } }
                    Call::Drive(h) => drive_store(hs[h as usize % 3], &mut store, now),
                    Call::Fallback(h, ok) => {
                        let id = fw_fallback(hs[h as usize % 3], now);
                        fw_fallback_done(hs[h as usize % 3], id, u32::from(ok), now);
                    }
                    Call::Force(h, p) => { fw_force(hs[h as usize % 3], p % 5, now); }
                    Call::Record(h, k, n) => { fw_record(hs[h as usize % 3], k % 16, n % 5, now); }
                    Call::Read(h) => {
                        let h = hs[h as usize % 3];
                        fw_state(h, now);
                        fw_snapshot(h, now);
                        fw_buckets(h, now);
                        fw_next(h);
                        fw_has_io(h);
                        fw_flushed(h);
                        fw_quiet(h);
                    }
                    Call::Cache(h, which, k, i) => {
                        let h = hs[h as usize % 3];
                        let which = which % 3;
                        put(&[b'k', k % 5]);
                        match i % 6 {
                            0 | 1 => { if fw_cache_lookup(h, which, 0.0, 2, now) >= 0 { ids.push(out(0)); } }
                            2 => { fw_cache_settle(h, which, pick(&ids, k), u32::from(i % 2), now); }
                            3 => { fw_cache_cancel(h, which, pick(&ids, k), u32::from(i % 2), now); }
                            4 => { fw_cache_offer(h, which, 0.0, 2, now); fw_cache_invalidate(h, which, 0.0, 2, now); }
                            _ => { for _ in 0..16 { if fw_cache_poll(h, which, now) <= 0 { break; } } if k % 7 == 0 { fw_cache_clear(h, which, 0.0, now); } }
                        }
                    }
                    Call::Collapse(h, k, o) => {
                        let h = hs[h as usize % 3];
                        put(&[b'c', k % 7]);
                        fw_col_add(h, 2, now);
                        if o % 5 == 0 {
                            let scope = fw_cache_scope(h, -1.0, now);
                            put(&[b'c', k % 7]);
                            fw_cache_lookup(h, 0, scope, 2, now);
                            if o % 10 == 0 { fw_cache_scope(h, scope, now); }
                        }
                        let batch = fw_col_poll(h, now, o % 2);
                        if batch >= 0.0 {
                            let n = fw_col_items(h, batch).max(0) as u32;
                            for i in 0..n.min(4) { fw_col_complete(h, batch, i, (o >> 1) % 2); }
                            if o % 3 == 0 { fw_col_fail(h, batch); }
                        }
                    }
                    Call::Hostile(h, x) => {
                        let h = hs[h as usize % 3];
                        let n = HOSTILE[x as usize % HOSTILE.len()];
                        fw_start(h, n);
                        fw_poll(h, n);
                        fw_complete(h, n, u32::from(x), n);
                        fw_io_done(h, n, u32::from(x) % 6, n, u32::from(x), u32::from(x), n);
                        fw_cache_lookup(h, u32::from(x), n, u32::MAX, n);
                        fw_cache_scope(h, n, n);
                        fw_col_complete(h, n, u32::from(x), 1);
                    }
                    Call::Recreate(i) => {
                        let i = i as usize % 3;
                        fw_free(hs[i]);
                        hs[i] = make(i, now);
                    }
                }
            }
            for h in hs { fw_free(h); }
        }
    }
}
