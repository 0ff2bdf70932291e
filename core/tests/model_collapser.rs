//! Collapser vs a naive model: which batch each add joins, when and in which order
//! batches are handed out, exactly which items each lists (in add order), and what
//! complete_item / fail_batch / cancel / close_scope / set_config return.

use std::collections::VecDeque;

use fusewire_core::collapser::{Add, BatchId, ItemId, Refused, ScopeId};
use fusewire_core::config::CollapserConfig;
use fusewire_core::Collapser;
use proptest::prelude::*;

const MS: u64 = 1_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ph {
    Open,
    Full,
    Running,
}

#[derive(Debug)]
struct B {
    seq: u64,
    tag: u32,
    key: u8,
    first_at: u64,
    phase: Ph,
    /// Live items, in add order (open/full); the fixed listing once running.
    items: Vec<ItemId>,
    /// Running: items of the listing still without a result.
    live: Vec<ItemId>,
    id: Option<BatchId>,
}

#[derive(Default)]
struct M {
    batches: Vec<B>,
    full: VecDeque<u64>,
    seq: u64,
    now: u64,
    window_ms: u64,
    max_batch_size: u32,
}

impl M {
    fn live_items(&self) -> usize {
        self.batches
            .iter()
            .map(|b| {
                if b.phase == Ph::Running {
                    b.live.len()
                } else {
                    b.items.len()
                }
            })
            .sum()
    }
    fn drop_seq(&mut self, seq: u64) {
        self.batches.retain(|b| b.seq != seq);
        self.full.retain(|&s| s != seq);
    }
    fn make_full(&mut self, seq: u64) {
        let b = self.batches.iter_mut().find(|b| b.seq == seq).unwrap();
        if b.phase == Ph::Open {
            b.phase = Ph::Full;
            self.full.push_back(seq);
        }
    }
    /// The batch `poll` hands out next: (seq).
    fn due(&mut self) -> Option<u64> {
        if let Some(s) = self.full.pop_front() {
            return Some(s);
        }
        let b = self
            .batches
            .iter()
            .filter(|b| b.phase == Ph::Open)
            .min_by_key(|b| b.seq)?;
        (b.first_at + self.window_ms * MS <= self.now).then_some(b.seq)
    }
}

#[derive(Clone, Debug)]
enum Op {
    Add { scope: usize, key: u8 },
    Cancel { pick: usize },
    Advance { ms: u8, back: bool },
    Poll,
    Complete { pick: usize, index: u8 },
    Fail { pick: usize },
    Open,
    Close { scope: usize },
    Reconfigure { window_ms: u8, max_batch_size: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (0..3usize, 0..3u8).prop_map(|(scope, key)| Op::Add { scope, key }),
        2 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
        4 => (0..15u8, prop::bool::weighted(0.1)).prop_map(|(ms, back)| Op::Advance { ms, back }),
        4 => Just(Op::Poll),
        4 => (any::<usize>(), 0..6u8).prop_map(|(pick, index)| Op::Complete { pick, index }),
        1 => any::<usize>().prop_map(|pick| Op::Fail { pick }),
        1 => Just(Op::Open),
        1 => any::<usize>().prop_map(|scope| Op::Close { scope }),
        1 => (0..20u8, 1..6u8).prop_map(|(window_ms, max_batch_size)| Op::Reconfigure { window_ms, max_batch_size }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn collapser_matches_a_naive_batch_model(
        window_ms in 0..20u64,
        max_batch_size in 1..6u32,
        max_items in 1..12u32,
        ops in prop::collection::vec(op(), 1..150),
    ) {
        let config = CollapserConfig { window_ms, max_batch_size, max_items, max_key_bytes: 4, max_scopes: 2 };
        let mut c = Collapser::new(config, 11).unwrap();
        let mut m = M { window_ms, max_batch_size, ..M::default() };
        let mut t = 1_000 * MS;
        let mut scopes: Vec<(ScopeId, u32)> = vec![(ScopeId::GLOBAL, 0)];
        let mut tags = 0;
        let mut all_items: Vec<ItemId> = vec![];
        for (step, op) in ops.into_iter().enumerate() {
            match op {
                Op::Add { scope, key } => {
                    m.now = m.now.max(t);
                    let (sid, tag) = scopes[scope % scopes.len()];
                    let got = c.add(sid, &[key], t);
                    if m.live_items() >= max_items as usize {
                        prop_assert_eq!(got, Add::Refused(Refused::TooManyItems), "step {}", step);
                        continue;
                    }
                    let item = match got {
                        Add::Queued(i) | Add::Full(i) => i,
                        other => return Err(TestCaseError::fail(format!("step {step}: {other:?}"))),
                    };
                    all_items.push(item);
                    let seq = match m.batches.iter().find(|b| b.phase == Ph::Open && b.tag == tag && b.key == key) {
                        Some(b) => b.seq,
                        None => {
                            m.seq += 1;
                            let now = m.now;
                            m.batches.push(B { seq: m.seq, tag, key, first_at: now, phase: Ph::Open, items: vec![], live: vec![], id: None });
                            m.seq
                        }
                    };
                    let b = m.batches.iter_mut().find(|b| b.seq == seq).unwrap();
                    b.items.push(item);
                    let full = b.items.len() as u32 >= m.max_batch_size;
                    if full {
                        m.make_full(seq);
                    }
                    prop_assert_eq!(matches!(got, Add::Full(_)), full, "step {}: full", step);
                }
                Op::Cancel { pick } if !all_items.is_empty() => {
                    let item = all_items[pick % all_items.len()];
                    let mut want = false;
                    let mut emptied = None;
                    for b in &mut m.batches {
                        if b.phase == Ph::Running {
                            if let Some(p) = b.live.iter().position(|i| *i == item) {
                                b.live.remove(p);
                                want = true;
                                if b.live.is_empty() { emptied = Some(b.seq); }
                            }
                        } else if let Some(p) = b.items.iter().position(|i| *i == item) {
                            b.items.remove(p);
                            want = true;
                            if b.items.is_empty() { emptied = Some(b.seq); }
                        }
                    }
                    if let Some(s) = emptied { m.drop_seq(s); }
                    prop_assert_eq!(c.cancel(item), want, "step {}: cancel", step);
                }
                Op::Advance { ms, back } => {
                    t = if back { t.saturating_sub(u64::from(ms) * MS) } else { t + u64::from(ms) * MS };
                }
                Op::Poll => loop {
                    m.now = m.now.max(t);
                    let got = c.poll(t);
                    let want = m.due();
                    match (got, want) {
                        (None, None) => break,
                        (Some(bid), Some(seq)) => {
                            let b = m.batches.iter_mut().find(|b| b.seq == seq).unwrap();
                            b.phase = Ph::Running;
                            b.live = b.items.clone();
                            b.id = Some(bid);
                            prop_assert_eq!(c.items(bid), &b.items[..], "step {}: listing", step);
                            prop_assert_eq!(c.batch_key(bid), Some(&[b.key][..]), "step {}: key", step);
                        }
                        (g, w) => return Err(TestCaseError::fail(format!("step {step}: poll {g:?}, model {w:?}"))),
                    }
                },
                Op::Complete { pick, index } => {
                    let running: Vec<u64> = m.batches.iter().filter(|b| b.phase == Ph::Running).map(|b| b.seq).collect();
                    if running.is_empty() { continue; }
                    let seq = running[pick % running.len()];
                    let b = m.batches.iter_mut().find(|b| b.seq == seq).unwrap();
                    let bid = b.id.unwrap();
                    let want = b.items.get(index as usize).copied().filter(|i| b.live.contains(i));
                    if let Some(i) = want { b.live.retain(|x| *x != i); }
                    let ended = b.live.is_empty();
                    if ended { m.drop_seq(seq); }
                    prop_assert_eq!(c.complete_item(bid, index.into(), true), want, "step {}: complete", step);
                    prop_assert_eq!(c.items(bid).is_empty(), ended, "step {}: ended", step);
                }
                Op::Fail { pick } => {
                    let running: Vec<u64> = m.batches.iter().filter(|b| b.phase == Ph::Running).map(|b| b.seq).collect();
                    if running.is_empty() { continue; }
                    let seq = running[pick % running.len()];
                    let b = m.batches.iter().find(|b| b.seq == seq).unwrap();
                    let (bid, want) = (b.id.unwrap(), b.live.clone());
                    m.drop_seq(seq);
                    prop_assert_eq!(c.fail_batch(bid), &want[..], "step {}: fail_batch", step);
                }
                Op::Open => {
                    if let Some(s) = c.open_scope() {
                        tags += 1;
                        scopes.push((s, tags));
                    }
                }
                Op::Close { scope } if scopes.len() > 1 => {
                    let (sid, tag) = scopes.remove(1 + scope % (scopes.len() - 1));
                    m.now = m.now.max(t);
                    let mut want = vec![];
                    let seqs: Vec<u64> = m.batches.iter().filter(|b| b.tag == tag && b.phase != Ph::Running).map(|b| b.seq).collect();
                    for s in seqs {
                        want.extend(m.batches.iter().find(|b| b.seq == s).unwrap().items.clone());
                        m.drop_seq(s);
                    }
                    prop_assert_eq!(c.close_scope(sid, t), &want[..], "step {}: close_scope", step);
                }
                Op::Reconfigure { window_ms, max_batch_size } => {
                    let cfg = CollapserConfig { window_ms: window_ms.into(), max_batch_size: max_batch_size.into(), ..c.config().clone() };
                    c.set_config(cfg, t).unwrap();
                    m.now = m.now.max(t);
                    m.window_ms = window_ms.into();
                    m.max_batch_size = max_batch_size.into();
                    let mut open: Vec<(u64, usize)> = m.batches.iter().filter(|b| b.phase == Ph::Open).map(|b| (b.seq, b.items.len())).collect();
                    open.sort();
                    for (s, n) in open {
                        if n as u32 >= m.max_batch_size { m.make_full(s); }
                    }
                }
                _ => {}
            }
            prop_assert_eq!(c.stats().items as usize, m.live_items(), "step {}: items", step);
            let want_deadline = if !m.full.is_empty() {
                Some(m.now)
            } else {
                m.batches.iter().filter(|b| b.phase == Ph::Open).min_by_key(|b| b.seq).map(|b| b.first_at + m.window_ms * MS)
            };
            prop_assert_eq!(c.next_deadline(), want_deadline, "step {}: next_deadline", step);
        }
    }
}
