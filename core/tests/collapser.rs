//! Request collapser: deterministic-time scenarios (simulated clock, no sleeps), the
//! host loop with the engine, and a property test over arbitrary interleavings.

use std::collections::{HashMap, HashSet};

use fusewire_core::collapser::{Add, BatchId, ItemId, Refused, ScopeId};
use fusewire_core::config::CollapserConfig;
use fusewire_core::{Collapser, Config, Engine, EventKind, Outcome, Phase, Start};
use proptest::prelude::*;

mod common;

const MS: u64 = 1_000_000;
const T0: u64 = 1_000 * MS;
const G: ScopeId = ScopeId::GLOBAL;

fn cfg(json: &str) -> CollapserConfig {
    let c = Config::from_json(&format!(r#"{{"collapser": {json}}}"#))
        .unwrap_or_else(|e| panic!("test config: {e}"));
    c.collapser.expect("collapser section")
}

fn collapser(json: &str) -> Collapser {
    Collapser::new(cfg(json), 0x5eed).expect("valid")
}

fn queued(a: Add) -> ItemId {
    match a {
        Add::Queued(i) => i,
        other => panic!("expected queued, got {other:?}"),
    }
}

#[test]
fn a_batch_is_flushed_when_its_window_passes() {
    let mut c = collapser("{}");
    assert_eq!(c.config().window_ms, 10, "Hystrix's default window");
    assert_eq!(c.next_deadline(), None);
    let a = queued(c.add(G, b"users", T0));
    let b = queued(c.add(G, b"users", T0 + 3 * MS));
    let other = queued(c.add(G, b"orders", T0 + 4 * MS));
    let d = queued(c.add(G, b"users", T0 + 9 * MS));
    assert_eq!(c.next_deadline(), Some(T0 + 10 * MS), "first item + window");
    assert_eq!(c.poll(T0 + 10 * MS - 1), None);
    let batch = c.poll(T0 + 10 * MS).expect("due");
    assert_eq!(c.items(batch), &[a, b, d], "in arrival order");
    assert_eq!(c.batch_key(batch), Some(&b"users"[..]));
    assert_eq!(c.next_deadline(), Some(T0 + 14 * MS));
    assert_eq!(c.poll(T0 + 10 * MS), None);
    // A later add for the key starts a new batch.
    let e = queued(c.add(G, b"users", T0 + 11 * MS));
    let batch2 = c.poll(T0 + 14 * MS).expect("orders due");
    assert_eq!(c.items(batch2), &[other]);
    let batch3 = c.poll(T0 + 21 * MS).expect("second users batch due");
    assert_eq!(c.items(batch3), &[e]);
    assert_eq!(c.stats().flushed_window, 3);
    assert_eq!(c.stats().running_batches, 3);
}

#[test]
fn a_full_batch_is_flushed_at_once() {
    let mut c = collapser(r#"{"max_batch_size": 4}"#);
    let mut items = vec![];
    for _ in 0..3 {
        items.push(queued(c.add(G, b"k", T0)));
    }
    let Add::Full(last) = c.add(G, b"k", T0) else {
        panic!("the fourth item fills the batch")
    };
    items.push(last);
    assert_eq!(c.next_deadline(), Some(T0), "due now");
    let next = queued(c.add(G, b"k", T0 + MS));
    let batch = c.poll(T0 + MS).expect("full batch");
    assert_eq!(c.items(batch), &items[..]);
    assert_eq!(c.stats().flushed_full, 1);
    assert_eq!(
        c.next_deadline(),
        Some(T0 + 11 * MS),
        "the new batch's window"
    );
    let b2 = c.poll(T0 + 11 * MS).unwrap();
    assert_eq!(c.items(b2), &[next]);
}

#[test]
fn per_item_results_and_errors_map_back_to_each_caller() {
    let mut c = collapser("{}");
    let items: Vec<ItemId> = (0..5).map(|_| queued(c.add(G, b"k", T0))).collect();
    let batch = c.poll(T0 + 10 * MS).unwrap();
    // The batch call answered items 0, 1 (error), 3; item 2 and 4 are missing.
    assert_eq!(c.complete_item(batch, 0, true), Some(items[0]));
    assert_eq!(c.complete_item(batch, 1, false), Some(items[1]));
    assert_eq!(c.complete_item(batch, 3, true), Some(items[3]));
    assert_eq!(c.complete_item(batch, 3, true), None, "answered twice");
    assert_eq!(c.complete_item(batch, 9, true), None, "no such index");
    assert_eq!(c.fail_batch(batch), &[items[2], items[4]], "the rest fail");
    assert_eq!(c.fail_batch(batch), &[] as &[ItemId], "the batch ended");
    assert_eq!(c.complete_item(batch, 2, true), None);
    let s = c.stats();
    assert_eq!((s.items_ok, s.items_failed, s.items), (2, 3, 0));
    assert_eq!(s.running_batches, 0);
    // A batch whose every item got its result ends by itself.
    let a = queued(c.add(G, b"k", T0 + 20 * MS));
    let b = c.poll(T0 + 30 * MS).unwrap();
    assert_eq!(c.complete_item(b, 0, true), Some(a));
    assert_eq!(c.items(b), &[] as &[ItemId]);
    assert_eq!(c.stats().running_batches, 0);
}

/// The documented host loop: one engine call per batch, `COLLAPSED` per caller, and a
/// refused batch fails every caller.
#[test]
fn the_host_loop_runs_one_protected_execution_per_batch() {
    let mut e = Engine::local();
    let p = e
        .add_policy(
            "p",
            Config::from_json(r#"{"collapser": {"window_ms": 5}}"#).unwrap(),
        )
        .unwrap();
    let k = e.key(p, "GetUsers", T0).unwrap();
    let mut c = Collapser::new(e.config(p).unwrap().collapser.clone().unwrap(), 3).unwrap();
    let mut replies: HashMap<ItemId, Result<u32, &str>> = HashMap::new();
    let host = |c: &mut Collapser,
                e: &mut Engine,
                replies: &mut HashMap<ItemId, Result<u32, &str>>,
                now: u64,
                batch_ok: bool| {
        while let Some(batch) = c.poll(now) {
            let n = c.items(batch).len();
            for _ in 0..n {
                e.record(k, EventKind::Collapsed, now);
            }
            match e.start(k, now, 0) {
                Start::Running(permit) => {
                    let outcome = if batch_ok {
                        Outcome::Success
                    } else {
                        Outcome::Failure
                    };
                    e.complete(permit, outcome, now + MS, 0);
                    if batch_ok {
                        for i in 0..n as u32 {
                            let item = c.complete_item(batch, i, true).unwrap();
                            replies.insert(item, Ok(i));
                        }
                    }
                    for &item in c.fail_batch(batch) {
                        replies.insert(item, Err("batch failed"));
                    }
                }
                Start::Queued(_) => unreachable!("no queue configured"),
                Start::Refused(_) => {
                    for &item in c.fail_batch(batch) {
                        replies.insert(item, Err("short-circuited"));
                    }
                }
            }
        }
    };
    let first: Vec<ItemId> = (0..30).map(|_| queued(c.add(G, b"u", T0))).collect();
    host(&mut c, &mut e, &mut replies, T0 + 5 * MS, true);
    let snap = e.snapshot(k, T0 + 6 * MS).unwrap();
    assert_eq!(
        snap.cumulative[EventKind::Success.index()],
        1,
        "one execution"
    );
    assert_eq!(snap.cumulative[EventKind::Collapsed.index()], 30);
    for (i, item) in first.iter().enumerate() {
        assert_eq!(replies[item], Ok(i as u32));
    }
    // A failed batch fails every caller in it.
    let second: Vec<ItemId> = (0..7)
        .map(|_| queued(c.add(G, b"u", T0 + 10 * MS)))
        .collect();
    host(&mut c, &mut e, &mut replies, T0 + 15 * MS, false);
    for item in &second {
        assert_eq!(replies[item], Err("batch failed"));
    }
    // With the breaker open the batch is refused: every caller fails.
    e.force(k, Phase::Open, T0 + 20 * MS, 0);
    let third: Vec<ItemId> = (0..4)
        .map(|_| queued(c.add(G, b"u", T0 + 20 * MS)))
        .collect();
    host(&mut c, &mut e, &mut replies, T0 + 25 * MS, true);
    for item in &third {
        assert_eq!(replies[item], Err("short-circuited"));
    }
    let snap = e.snapshot(k, T0 + 26 * MS).unwrap();
    assert_eq!(snap.cumulative[EventKind::ShortCircuited.index()], 1);
    assert_eq!(snap.cumulative[EventKind::Collapsed.index()], 41);
    assert_eq!(c.stats().items, 0);
}

#[test]
fn scopes_are_isolated_and_closing_one_drops_its_waiting_items() {
    let mut c = collapser("{}");
    let a = c.open_scope().unwrap();
    let b = c.open_scope().unwrap();
    let ia = queued(c.add(a, b"k", T0));
    let ib = queued(c.add(b, b"k", T0));
    let ig = queued(c.add(G, b"k", T0));
    let ia2 = queued(c.add(a, b"k2", T0));
    // The scope closes before its window: its items are handed back, unflushed.
    let mut dropped = c.close_scope(a, T0 + MS).to_vec();
    dropped.sort();
    let mut want = vec![ia, ia2];
    want.sort();
    assert_eq!(dropped, want);
    assert_eq!(c.add(a, b"k", T0 + MS), Add::Refused(Refused::UnknownScope));
    assert!(c.close_scope(a, T0 + MS).is_empty(), "closed twice");
    assert!(
        c.close_scope(G, T0 + MS).is_empty(),
        "the global scope stays"
    );
    assert!(!c.cancel(ia), "dropped items are gone");
    let mut flushed = vec![];
    while let Some(batch) = c.poll(T0 + 10 * MS) {
        flushed.push(c.items(batch).to_vec());
    }
    assert_eq!(flushed, vec![vec![ib], vec![ig]], "one batch per scope");
    // A flushed batch of a scope runs on after the scope closes.
    let s = c.open_scope().unwrap();
    let is = queued(c.add(s, b"k", T0 + 20 * MS));
    let batch = c.poll(T0 + 30 * MS).unwrap();
    assert!(c.close_scope(s, T0 + 30 * MS).is_empty());
    assert_eq!(c.complete_item(batch, 0, true), Some(is));
    // Scopes are bounded.
    let mut c = collapser(r#"{"max_scopes": 1}"#);
    assert!(c.open_scope().is_some());
    assert_eq!(c.open_scope(), None);
}

#[test]
fn a_cancelled_item_leaves_its_batch_before_the_flush() {
    let mut c = collapser(r#"{"max_batch_size": 3}"#);
    let a = queued(c.add(G, b"k", T0));
    let b = queued(c.add(G, b"k", T0));
    assert!(c.cancel(a));
    assert!(!c.cancel(a), "twice");
    let d = queued(c.add(G, b"k", T0));
    // Two live items: the cancelled one does not count toward max_batch_size.
    let Add::Full(e) = c.add(G, b"k", T0) else {
        panic!("full at three live items")
    };
    let batch = c.poll(T0).unwrap();
    assert_eq!(c.items(batch), &[b, d, e]);
    // Cancelled after the flush: the result is discarded.
    assert!(c.cancel(d));
    assert_eq!(c.complete_item(batch, 1, true), None);
    assert_eq!(c.fail_batch(batch), &[b, e]);
    // A batch whose items all cancel is dropped: nothing to flush.
    let x = queued(c.add(G, b"k", T0 + MS));
    assert!(c.cancel(x));
    assert_eq!(c.next_deadline(), None);
    assert_eq!(c.poll(T0 + 100 * MS), None);
    assert_eq!(c.stats().items, 0);
    assert_eq!(c.stats().pending_batches, 0);
}

#[test]
fn items_are_bounded_and_long_keys_refused() {
    let mut c = collapser(r#"{"max_items": 10, "max_key_bytes": 4}"#);
    for i in 0..10u8 {
        let _ = queued(c.add(G, &[i % 3], T0));
    }
    assert_eq!(c.add(G, b"k", T0), Add::Refused(Refused::TooManyItems));
    assert_eq!(c.add(G, b"12345", T0), Add::Refused(Refused::KeyTooLong));
    assert_eq!(c.stats().refused, 2);
    // Items in flushed batches count until they have results.
    let mut batches = vec![];
    while let Some(b) = c.poll(T0 + 10 * MS) {
        batches.push(b);
    }
    assert_eq!(batches.len(), 3);
    assert_eq!(c.add(G, b"k", T0), Add::Refused(Refused::TooManyItems));
    assert_eq!(c.fail_batch(batches[0]).len(), 4);
    let _ = queued(c.add(G, b"k", T0 + 10 * MS));
}

#[test]
fn poll_full_takes_full_batches_only() {
    // Window 0: an unfilled batch is due at once, but a host running full batches
    // early (before the window's moment) must leave it collecting.
    let mut c = collapser(r#"{"window_ms": 0, "max_batch_size": 3}"#);
    let a = queued(c.add(G, b"k", T0));
    let b = queued(c.add(G, b"k", T0));
    let Add::Full(f) = c.add(G, b"k", T0) else {
        panic!("the third item fills the batch")
    };
    let d = queued(c.add(G, b"k", T0));
    let full = c.poll_full().expect("the full batch");
    assert_eq!(c.items(full), &[a, b, f]);
    assert_eq!(c.poll_full(), None, "the collecting batch stays");
    let e = queued(c.add(G, b"k", T0));
    let batch = c.poll(T0).expect("due at its moment");
    assert_eq!(c.items(batch), &[d, e]);
}

#[test]
fn window_zero_flushes_at_the_next_poll() {
    let mut c = collapser(r#"{"window_ms": 0}"#);
    let a = queued(c.add(G, b"k", T0));
    let b = queued(c.add(G, b"k", T0));
    assert_eq!(c.next_deadline(), Some(T0));
    let batch = c.poll(T0).unwrap();
    assert_eq!(c.items(batch), &[a, b]);
}

#[test]
fn reconfigure_applies_to_open_batches() {
    let mut c = collapser(r#"{"window_ms": 100, "max_batch_size": 10}"#);
    let items: Vec<ItemId> = (0..5).map(|_| queued(c.add(G, b"k", T0))).collect();
    let _other = queued(c.add(G, b"o", T0 + MS));
    assert_eq!(c.next_deadline(), Some(T0 + 100 * MS));
    // A shorter window applies at once.
    c.set_config(
        cfg(r#"{"window_ms": 20, "max_batch_size": 10}"#),
        T0 + 2 * MS,
    )
    .unwrap();
    assert_eq!(c.next_deadline(), Some(T0 + 20 * MS));
    // A smaller max batch makes the bigger batch due now.
    c.set_config(
        cfg(r#"{"window_ms": 20, "max_batch_size": 3}"#),
        T0 + 3 * MS,
    )
    .unwrap();
    assert_eq!(c.next_deadline(), Some(T0 + 3 * MS));
    let batch = c.poll(T0 + 3 * MS).unwrap();
    assert_eq!(c.items(batch), &items[..], "no item is lost");
    assert_eq!(c.poll(T0 + 3 * MS), None, "the small batch waits");
    let e = c
        .set_config(
            CollapserConfig {
                max_batch_size: 0,
                ..CollapserConfig::default()
            },
            T0,
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "collapser.max_batch_size: must be in 1..=100000, got 0"
    );
    assert_eq!(c.config().max_batch_size, 3, "the old config stays");
}

#[test]
fn stale_and_forged_ids_are_ignored() {
    let mut c = collapser("{}");
    let a = queued(c.add(G, b"k", T0));
    assert!(a.to_raw() < 1 << 53);
    let batch = c.poll(T0 + 10 * MS).unwrap();
    assert!(batch.to_raw() < 1 << 53);
    for forged in [u64::MAX, 1 << 53, batch.to_raw() | 1 << 60, 9_999_999, 1] {
        let fb = BatchId::from_raw(forged);
        assert!(c.items(fb).is_empty());
        assert_eq!(c.complete_item(fb, 0, true), None);
        assert!(c.fail_batch(fb).is_empty());
        assert_eq!(c.batch_key(fb), None);
        assert!(!c.cancel(ItemId::from_raw(forged)));
        let s = ScopeId::from_raw(forged);
        assert_eq!(c.add(s, b"k", T0), Add::Refused(Refused::UnknownScope));
        assert!(c.close_scope(s, T0).is_empty());
    }
    assert_eq!(c.complete_item(batch, 0, true), Some(a), "unharmed");
    assert_eq!(c.complete_item(batch, 0, true), None, "stale now");
}

#[test]
fn config_defaults_and_field_path_errors() {
    let d = Config::from_json(r#"{"collapser": {}}"#)
        .unwrap()
        .collapser
        .unwrap();
    assert_eq!(d, CollapserConfig::default());
    assert_eq!(d.window_ms, 10);
    assert_eq!(d.max_batch_size, 1_000);
    assert_eq!(d.max_items, 100_000);
    assert_eq!(d.max_key_bytes, 1_024);
    assert_eq!(d.max_scopes, 10_000);
    assert_eq!(Config::from_json("{}").unwrap().collapser, None);
    let err = |json: &str| Config::from_json(json).unwrap_err().to_string();
    assert_eq!(
        err(r#"{"collapser": {"max_items": 0}}"#),
        "collapser.max_items: must be in 1..=10000000, got 0"
    );
    assert_eq!(
        err(r#"{"collapser": {"window_ms": 99999999999999}}"#),
        "collapser.window_ms: must be in 0..=31536000000 ms, got 99999999999999"
    );
    assert!(err(r#"{"collapser": {"window": 5}}"#)
        .starts_with("collapser.window: unknown field `window`"));
}

#[test]
fn many_keys_and_items_stay_bounded() {
    let mut c = collapser(r#"{"max_items": 10000, "max_batch_size": 100}"#);
    let mut now = T0;
    for i in 0..200_000u32 {
        now += 1_000;
        match c.add(G, &(i % 5_000).to_le_bytes(), now) {
            Add::Queued(_) | Add::Full(_) => {}
            Add::Refused(r) => assert_eq!(r, Refused::TooManyItems),
        }
        while let Some(b) = c.poll(now) {
            let _ = c.fail_batch(b);
        }
        assert!(c.stats().items <= 10_000);
    }
    println!(
        "collapser memory after 200k adds: {} bytes",
        c.memory_bytes()
    );
    assert!(c.memory_bytes() < 2 << 20);
}

// ---- property: every item gets exactly one result; the bound holds --------------

#[derive(Clone, Debug)]
enum Op {
    Add { scope: usize, key: u8 },
    Cancel { item: usize },
    Advance { ms: u8 },
    Jump { to: u8 },
    Poll,
    Complete { batch: usize, index: u8, ok: bool },
    Fail { batch: usize },
    OpenScope,
    CloseScope { scope: usize },
    Reconfigure { window_ms: u8, max_batch_size: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..3usize, 0..4u8).prop_map(|(scope, key)| Op::Add { scope, key }),
        2 => any::<usize>().prop_map(|item| Op::Cancel { item }),
        3 => (0..15u8).prop_map(|ms| Op::Advance { ms }),
        1 => (0..5u8).prop_map(|to| Op::Jump { to }),
        3 => Just(Op::Poll),
        4 => (any::<usize>(), 0..8u8, any::<bool>()).prop_map(|(batch, index, ok)| Op::Complete { batch, index, ok }),
        1 => any::<usize>().prop_map(|batch| Op::Fail { batch }),
        1 => Just(Op::OpenScope),
        1 => any::<usize>().prop_map(|scope| Op::CloseScope { scope }),
        1 => (0..20u8, 1..6u8).prop_map(|(window_ms, max_batch_size)| Op::Reconfigure { window_ms, max_batch_size }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn every_item_gets_exactly_one_result_within_the_bound(
        window_ms in 0..20u64,
        max_batch_size in 1..6u32,
        max_items in 1..12u32,
        ops in prop::collection::vec(op(), 1..150),
    ) {
        let config = CollapserConfig { window_ms, max_batch_size, max_items, max_key_bytes: 4, max_scopes: 2 };
        let mut c = Collapser::new(config, 11).unwrap();
        let mut scopes = vec![ScopeId::GLOBAL];
        let mut waiting: Vec<ItemId> = vec![];
        let mut batches: Vec<BatchId> = vec![];
        let mut done: HashMap<ItemId, &'static str> = HashMap::new();
        let mut added: HashSet<ItemId> = HashSet::new();
        let mut now = T0;
        // The latest time so far: a clock stepping back counts as no time passing,
        // so what is due waits until the clock is past it again.
        let mut high = T0;
        let finish = |done: &mut HashMap<ItemId, &'static str>, waiting: &mut Vec<ItemId>, item: ItemId, how: &'static str| {
            if let Some(prev) = done.insert(item, how) {
                panic!("{item:?} got two results: {prev} and {how}");
            }
            waiting.retain(|i| *i != item);
        };
        for op in ops {
            match op {
                Op::Add { scope, key } => match c.add(scopes[scope % scopes.len()], &[key], now) {
                    Add::Queued(i) | Add::Full(i) => {
                        prop_assert!(added.insert(i), "fresh id");
                        waiting.push(i);
                    }
                    Add::Refused(_) => {}
                },
                Op::Cancel { item } if !waiting.is_empty() => {
                    let i = waiting[item % waiting.len()];
                    prop_assert!(c.cancel(i));
                    finish(&mut done, &mut waiting, i, "cancelled");
                }
                Op::Advance { ms } => now = now.saturating_add(u64::from(ms) * MS),
                Op::Jump { to } => now = common::jump(now, to),
                Op::Poll => {
                    while let Some(b) = c.poll(now) {
                        let items = c.items(b);
                        prop_assert!(!items.is_empty() && items.len() <= 5);
                        for i in items {
                            prop_assert!(waiting.contains(i), "listed items are waiting");
                        }
                        batches.push(b);
                    }
                }
                Op::Complete { batch, index, ok } if !batches.is_empty() => {
                    let b = batches[batch % batches.len()];
                    let listed = c.items(b).get(index as usize).copied();
                    if let Some(i) = c.complete_item(b, index.into(), ok) {
                        prop_assert_eq!(Some(i), listed);
                        finish(&mut done, &mut waiting, i, "completed");
                    }
                }
                Op::Fail { batch } if !batches.is_empty() => {
                    let b = batches.swap_remove(batch % batches.len());
                    for i in c.fail_batch(b).to_vec() {
                        finish(&mut done, &mut waiting, i, "failed");
                    }
                }
                Op::OpenScope => {
                    if let Some(s) = c.open_scope() {
                        scopes.push(s);
                    }
                }
                Op::CloseScope { scope } if scopes.len() > 1 => {
                    let s = scopes.swap_remove(1 + scope % (scopes.len() - 1));
                    for i in c.close_scope(s, now).to_vec() {
                        finish(&mut done, &mut waiting, i, "scope closed");
                    }
                }
                Op::Reconfigure { window_ms, max_batch_size } => {
                    let cfg = CollapserConfig {
                        window_ms: window_ms.into(),
                        max_batch_size: max_batch_size.into(),
                        ..c.config().clone()
                    };
                    c.set_config(cfg, now).unwrap();
                }
                _ => {}
            }
            prop_assert!(c.stats().items <= max_items);
            prop_assert_eq!(c.stats().items as usize, waiting.len());
            high = high.max(now);
        }
        // Time runs out: every batch is flushed and failed.
        now = high.saturating_add(1_000 * MS);
        while let Some(b) = c.poll(now) {
            batches.push(b);
        }
        for b in batches {
            for i in c.fail_batch(b).to_vec() {
                finish(&mut done, &mut waiting, i, "failed at the end");
            }
        }
        prop_assert!(waiting.is_empty(), "items without a result: {:?}", waiting);
        prop_assert_eq!(done.len(), added.len());
        let s = c.stats();
        prop_assert_eq!((s.items, s.pending_batches, s.running_batches), (0, 0, 0));
        prop_assert_eq!(c.next_deadline(), None);
    }
}

/// Closing the global scope or a stale scope id closes nothing: the global scope
/// keeps collecting, and a scope reusing the stale id's slot stays open (found by
/// mutation testing).
#[test]
fn closing_the_global_scope_or_a_stale_scope_closes_nothing() {
    let mut c = collapser("{}");
    let g = queued(c.add(G, b"k", T0));
    assert!(c.close_scope(G, T0).is_empty());
    let g2 = queued(c.add(G, b"k", T0));
    let stale = c.open_scope().unwrap();
    assert!(
        c.close_scope(stale, T0).is_empty(),
        "nothing collected in it"
    );
    // The new scope takes the closed one's place.
    let s = c.open_scope().unwrap();
    assert_ne!(s, stale);
    let i = queued(c.add(s, b"k", T0));
    assert!(c.close_scope(stale, T0).is_empty(), "stale");
    assert_eq!(c.stats().scopes, 1);
    let j = queued(c.add(s, b"k", T0));
    let mut flushed = vec![];
    while let Some(b) = c.poll(T0 + 10 * MS) {
        flushed.push(c.items(b).to_vec());
    }
    assert_eq!(flushed, vec![vec![g, g2], vec![i, j]]);
}

/// `max_key_bytes` is the longest key collapsed; the counters count adds, refusals
/// and cancellations (found by mutation testing).
#[test]
fn a_key_of_exactly_max_key_bytes_is_collapsed_and_the_counters_count() {
    let mut c = collapser(r#"{"max_key_bytes": 4}"#);
    let a = queued(c.add(G, b"1234", T0));
    let b = queued(c.add(G, b"1234", T0));
    let d = queued(c.add(G, b"1234", T0));
    assert_eq!(c.add(G, b"12345", T0), Add::Refused(Refused::KeyTooLong));
    assert!(c.cancel(a));
    assert!(c.cancel(d));
    let s = c.stats();
    assert_eq!((s.added, s.refused, s.cancelled, s.items), (3, 1, 2, 1));
    let batch = c.poll(T0 + 10 * MS).unwrap();
    assert_eq!(c.items(batch), &[b]);
    assert_eq!(c.batch_key(batch), Some(&b"1234"[..]));
}

/// Keys never share a batch, even when their hashes collide: 150 000 distinct keys
/// collect at once, so (with this seed) some share the hash bits the index compares
/// first, and only the key bytes tell them apart (found by mutation testing).
#[test]
fn distinct_keys_never_share_a_batch_even_when_their_hashes_collide() {
    const N: u32 = 150_000;
    let config = CollapserConfig {
        max_items: 1_000_000,
        ..cfg("{}")
    };
    let mut c = Collapser::new(config, 0x5eed).unwrap();
    for i in 0..N {
        let _ = queued(c.add(G, &i.to_le_bytes(), T0));
    }
    assert_eq!(c.stats().pending_batches, N);
    let mut batches = 0;
    while let Some(b) = c.poll(T0 + 10 * MS) {
        assert_eq!(c.items(b).len(), 1);
        batches += 1;
    }
    assert_eq!(batches, N);
}

/// The gauges: batches collecting, batches handed out, open scopes (found by
/// mutation testing).
#[test]
fn stats_report_pending_and_running_batches_and_open_scopes() {
    let mut c = collapser("{}");
    let s = c.open_scope().unwrap();
    let _other = c.open_scope().unwrap();
    let _ = queued(c.add(G, b"a", T0));
    let _ = queued(c.add(s, b"a", T0 + MS));
    let _ = queued(c.add(G, b"b", T0 + 2 * MS));
    let _running = c.poll(T0 + 10 * MS).unwrap();
    let st = c.stats();
    assert_eq!(
        (st.pending_batches, st.running_batches, st.scopes, st.items),
        (2, 1, 2, 3)
    );
}

/// A freed batch gives back a large item listing (small ones are kept for reuse): once
/// the tables are warm, memory is back where it was before the large batch.
#[test]
fn a_freed_batch_gives_back_a_large_listing() {
    let mut c = collapser(r#"{"max_batch_size": 5000}"#);
    // Warm the tables: 1 000 one-item batches, then every item cancelled.
    let items: Vec<ItemId> = (0..1_000u32)
        .map(|i| queued(c.add(G, &i.to_le_bytes(), T0)))
        .collect();
    for i in items {
        assert!(c.cancel(i));
    }
    let warm = c.memory_bytes();
    // One batch of 1 000 items, all cancelled before the flush.
    let items: Vec<ItemId> = (0..1_000).map(|_| queued(c.add(G, b"k", T0))).collect();
    assert!(c.memory_bytes() >= warm + 1_000 * std::mem::size_of::<ItemId>());
    for i in items {
        assert!(c.cancel(i));
    }
    assert_eq!(c.stats().pending_batches, 0);
    assert!(
        c.memory_bytes() <= warm,
        "{} bytes held after the batch was freed (warm: {warm})",
        c.memory_bytes()
    );
}

/// Found by review: a freed batch slot kept its key's buffer for its next key, so
/// slots that once held a long key kept that memory for good (the cache drops them).
#[test]
fn freed_batches_give_long_key_buffers_back() {
    let mut c = collapser(r#"{"max_items": 100000, "max_key_bytes": 4096}"#);
    let mut key = [0u8; 4000];
    for i in 0..2_000u32 {
        key[..4].copy_from_slice(&i.to_le_bytes());
        let _ = queued(c.add(G, &key, T0));
    }
    let full = c.memory_bytes();
    assert!(full > 2_000 * 4_000, "{full}");
    let mut batches = vec![];
    while let Some(b) = c.poll(T0 + 10 * MS) {
        batches.push(b);
    }
    assert_eq!(batches.len(), 2_000);
    for b in batches {
        assert_eq!(c.fail_batch(b).len(), 1);
    }
    let freed = c.memory_bytes();
    assert!(
        freed < full / 10,
        "kept {freed} of {full} bytes once every batch ended"
    );
}

/// Found by review: cancelled items' ids stayed in an open batch's listing until it
/// reached twice `max_batch_size`, so a batch of one live item could keep thousands
/// of them (per key: `max_items` × `max_batch_size` in all).
#[test]
fn a_batch_of_cancelled_items_keeps_a_short_listing() {
    let mut c = collapser(r#"{"max_items": 100000, "max_batch_size": 100000}"#);
    let _live = queued(c.add(G, b"k", T0));
    let before = c.memory_bytes();
    for _ in 0..10_000 {
        let i = queued(c.add(G, b"k", T0));
        assert!(c.cancel(i));
    }
    let after = c.memory_bytes();
    assert!(after < before + 1024, "{before} B, then {after} B");
    let b = c.poll(T0 + 10 * MS).expect("due");
    assert_eq!(c.items(b).len(), 1, "the live item");
}

/// Found by review: a full batch emptied by cancels left its id in the full queue,
/// and with no batch due no poll came to drop it: add + cancel of full batches grew
/// the queue without bound.
#[test]
fn full_batches_emptied_by_cancels_leave_no_ids_behind() {
    let mut c = collapser(r#"{"max_batch_size": 1}"#);
    let before = c.memory_bytes();
    for _ in 0..10_000 {
        let Add::Full(i) = c.add(G, b"k", T0) else {
            panic!("full at one item")
        };
        assert!(c.cancel(i));
    }
    assert_eq!(c.next_deadline(), None, "nothing due");
    let after = c.memory_bytes();
    assert!(after < before + 1024, "{before} B, then {after} B");
}
