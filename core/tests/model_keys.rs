//! The engine's key table against a reference model (local state, two policies, a
//! simulated clock): random `key(policy, name)` lookups over a small alphabet (and
//! calls started on the ids they return), starts on any id handed out so far (stale
//! ones too), completes, cancels and cancelled tickets, bulkhead waits and call
//! timeouts, clock steps (past `keys.idle_ms`, and backwards), `poll`, and
//! reconfigures of `keys.max_keys` / `keys.idle_ms`. Checked at every step:
//! - a live name gets the same `KeyId` again; a new key an id never handed out before;
//!   a new name past `max_keys` live keys gets its policy's one overflow key, unless
//!   the least recently used key is idle (then it expires first: README, "Key table");
//! - a named key is only made while fewer than `max_keys` are live;
//! - expiry is lazy, in `poll` (and for the LRU key in a `key` lookup of a full
//!   policy): a key goes once unused (no call started) for `idle_ms` with nothing
//!   running or queued; a sweep that finds it busy looks again `idle_ms` later;
//! - a key with a call running or queued never expires; an expired key's id is stale
//!   (no name, `start` refuses it `UnknownKey`); once every call has ended, every
//!   named key is gone `idle_ms` later;
//! - `key_count`, `keys()`, `is_overflow`, `in_flight` and `queued` agree.
//!
//! The breaker is `forced_closed`: an open one keeps its key longer (see `flow.rs`).

use std::collections::BTreeMap;

use fusewire_core::*;
use proptest::prelude::*;

const MS: u64 = 1_000_000;
const NAMES: [&str; 6] = ["a", "b", "c", "d", "e", "f"];

fn config(max_keys: u32, idle_ms: u64) -> Config {
    Config::from_json(&format!(
        r#"{{"breaker": {{"mode": "forced_closed"}},
            "bulkhead": {{"isolation": "pool", "max_concurrent": 1, "max_queue": 2,
                          "queue_rejection_threshold": 2, "max_wait_ms": 1500}},
            "execution": {{"timeout_enabled": true, "timeout_ms": 2500}},
            "keys": {{"max_keys": {max_keys}, "idle_ms": {idle_ms}}}}}"#
    ))
    .unwrap()
}

#[derive(Clone, Debug)]
enum Op {
    /// `key(policy, name)`, and `start` on its id if set.
    Key(usize, usize, bool),
    /// `start` on any id handed out so far.
    Start(usize),
    /// Ends a held call: `cancel_ticket` if queued, else `complete`.
    End(usize, Outcome),
    /// The host clock moves on (ms; back if negative).
    Advance(i64),
    Poll,
    /// `set_policy(policy, max_keys, idle_ms)`.
    Reconfigure(usize, u32, u64),
}

fn idle_ms() -> impl Strategy<Value = u64> {
    prop::sample::select(vec![1_000u64, 1_500, 2_000])
}

fn op() -> impl Strategy<Value = Op> {
    let ms = prop_oneof![8 => (0..=12i64).prop_map(|n| n * 250), 2 => 1..100i64, 2 => Just(10_000),
                         1 => -3_000..0i64];
    let outcome = prop_oneof![Just(Outcome::Failure), Just(Outcome::Cancelled)];
    prop_oneof![
        6 => (0..2usize, 0..NAMES.len(), any::<bool>()).prop_map(|(p, n, s)| Op::Key(p, n, s)),
        2 => any::<usize>().prop_map(Op::Start),
        4 => (any::<usize>(), outcome).prop_map(|(i, o)| Op::End(i, o)),
        4 => ms.prop_map(Op::Advance),
        3 => Just(Op::Poll),
        1 => (0..2usize, 1..=4u32, idle_ms()).prop_map(|(p, m, i)| Op::Reconfigure(p, m, i)),
    ]
}

/// A call the host holds: running, timed out (its result is late), or queued.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Held {
    Run,
    Late,
    Wait,
}

type Calls = Vec<(KeyId, CallId, Held)>;

fn busy(held: &Calls, id: KeyId) -> bool {
    held.iter().any(|&(k, _, h)| k == id && h != Held::Late)
}

type Res<T = ()> = Result<T, TestCaseError>;

fn fail(why: String) -> TestCaseError {
    TestCaseError::fail(why)
}

/// Takes the events (from `poll(now)` if given) into `held`; returns the keys that
/// expired, each checked idle when it did.
fn drain(e: &mut Engine, held: &mut Calls, poll: Option<u64>) -> Res<Vec<KeyId>> {
    let mut gone = vec![];
    loop {
        let ev = match poll {
            Some(now) => e.poll(now, 0),
            None => e.take_event(),
        };
        let (call, from, to) = match ev {
            None => return Ok(gone),
            Some(Event::KeyExpired { key }) => {
                prop_assert!(!busy(held, key), "{:?} expired with a call held", key);
                gone.push(key);
                continue;
            }
            Some(Event::TimedOut { call, .. }) => (call, Held::Run, Some(Held::Late)),
            Some(Event::Dequeued { permit, .. }) => (permit.id(), Held::Wait, Some(Held::Run)),
            Some(Event::Refused { call, .. }) => (call, Held::Wait, None),
            Some(ev) => return Err(fail(format!("unexpected {ev:?}"))),
        };
        let i = held.iter().position(|&(_, c, h)| c == call && h == from);
        let i = i.ok_or_else(|| fail(format!("{call:?} was not {from:?}")))?;
        match to {
            Some(h) => held[i].2 = h,
            None => _ = held.swap_remove(i),
        }
    }
}

/// A live key: policy, name (`None`: the overflow key), last use, LRU order.
struct Entry(usize, Option<usize>, u64, u64);

struct Host {
    e: Engine,
    pids: [PolicyId; 2],
    max_keys: [u32; 2],
    idle_ms: [u64; 2],
    /// The host's clock and the engine's (the latest time it was given).
    now: u64,
    clock: u64,
    /// The model: the live keys, in LRU order by `seq`.
    live: BTreeMap<KeyId, Entry>,
    seq: u64,
    /// Every id handed out (stale ones stay), and the calls held.
    ids: Vec<KeyId>,
    held: Calls,
}

impl Host {
    fn find(&self, p: usize, name: Option<usize>) -> Option<KeyId> {
        let mut found = self.live.iter().filter(|(_, e)| e.0 == p && e.1 == name);
        found.next().map(|(&id, _)| id)
    }

    fn count(&self, p: usize) -> u32 {
        self.live
            .values()
            .filter(|e| e.0 == p && e.1.is_some())
            .count() as u32
    }

    fn touch(&mut self, id: KeyId) {
        if let Some(e) = self.live.get_mut(&id).filter(|e| e.1.is_some()) {
            self.seq += 1;
            (e.2, e.3) = (self.clock, self.seq);
        }
    }

    /// Up to `budget` times, the LRU key if unused for `idle_ms`: it expires if idle,
    /// else it is looked at again later (touched). Returns the expired.
    fn sweep(&mut self, p: usize, budget: usize) -> Vec<KeyId> {
        let mut gone = vec![];
        for _ in 0..budget {
            let named = self.live.iter().filter(|(_, e)| e.0 == p && e.1.is_some());
            let Some((&id, e)) = named.min_by_key(|(_, e)| e.3) else {
                break;
            };
            if self.clock < e.2 + self.idle_ms[p] * MS {
                break;
            } else if busy(&self.held, id) {
                self.touch(id);
            } else {
                self.live.remove(&id);
                gone.push(id);
            }
        }
        gone
    }

    fn start(&mut self, id: KeyId) -> Res {
        let live = self.live.contains_key(&id);
        self.clock = self.clock.max(self.now);
        self.touch(id);
        let (call, held) = match self.e.start(id, self.now, 0) {
            Start::Running(p) => (p.id(), Held::Run),
            Start::Queued(t) => (t.id(), Held::Wait),
            Start::Refused(r) => {
                prop_assert_eq!(r.cause == Cause::UnknownKey, !live, "{:?} on {:?}", r, id);
                return Ok(());
            }
        };
        prop_assert!(live, "a call started on stale {:?}", id);
        self.held.push((id, call, held));
        Ok(())
    }

    /// `key(p, name)`: the id it must return (`None`: a new one), and the keys that
    /// expire first (the LRU key of a full policy, if idle).
    fn key(&mut self, p: usize, name: usize) -> (Option<KeyId>, Vec<KeyId>) {
        if let Some(id) = self.find(p, Some(name)) {
            return (Some(id), vec![]);
        }
        let full = |h: &Self| h.count(p) >= h.max_keys[p];
        let gone = if full(self) { self.sweep(p, 1) } else { vec![] };
        (self.find(p, None).filter(|_| full(self)), gone)
    }

    fn step(&mut self, op: Op) -> Res {
        let (now, t) = (self.now, self.clock.max(self.now));
        let mut want = vec![];
        match op {
            Op::Key(p, name, start) => {
                self.clock = t;
                let got = self.e.key(self.pids[p], NAMES[name], now).expect("a key");
                let expect;
                (expect, want) = self.key(p, name);
                if let Some(id) = expect {
                    prop_assert_eq!(got, id, "a live name's or the overflow key's id changed");
                } else {
                    prop_assert!(!self.ids.contains(&got), "an old id again: {:?}", got);
                    let named = self.count(p) < self.max_keys[p];
                    self.seq += 1;
                    let entry = Entry(p, named.then_some(name), self.clock, self.seq);
                    self.live.insert(got, entry);
                    self.ids.push(got);
                    let count = self.e.key_count(self.pids[p]);
                    prop_assert!(
                        !named || count <= Some(self.max_keys[p]),
                        "{:?} keys",
                        count
                    );
                }
                if start {
                    self.start(got)?;
                }
            }
            Op::Start(i) if !self.ids.is_empty() => self.start(self.ids[i % self.ids.len()])?,
            Op::End(i, outcome) if !self.held.is_empty() => {
                self.clock = t;
                let (_, call, h) = self.held.swap_remove(i % self.held.len());
                let (e, permit) = (&mut self.e, Permit::from_raw(call.to_raw()));
                let ok = match h {
                    Held::Wait => e.cancel_ticket(Ticket::from_raw(call.to_raw()), now),
                    Held::Run => e.complete(permit, outcome, now, 0) == Completion::OnTime,
                    Held::Late => e.complete(permit, outcome, now, 0) == Completion::Late,
                };
                prop_assert!(ok, "a held call's end was not as held");
            }
            Op::Advance(ms) => self.now = now.saturating_add_signed(ms * MS as i64),
            Op::Poll => {
                // `poll` does time-driven work (and moves the clock) only when due.
                let due = self.e.next_deadline().is_some_and(|d| d <= t);
                let gone = drain(&mut self.e, &mut self.held, Some(now))?;
                if due {
                    self.clock = t;
                    want = (0..2).flat_map(|p| self.sweep(p, 64)).collect();
                }
                return self.check(gone, want);
            }
            Op::Reconfigure(p, max_keys, idle_ms) => {
                let set = self.e.set_policy(self.pids[p], config(max_keys, idle_ms));
                prop_assert!(set.is_ok(), "{:?}", set);
                (self.max_keys[p], self.idle_ms[p]) = (max_keys, idle_ms);
            }
            _ => {}
        }
        let gone = drain(&mut self.e, &mut self.held, None)?;
        self.check(gone, want)
    }

    fn check(&self, mut gone: Vec<KeyId>, mut want: Vec<KeyId>) -> Res {
        gone.sort();
        want.sort();
        prop_assert_eq!(gone, want, "expired keys at {}", self.clock);
        for &id in &self.ids {
            let entry = self.live.get(&id);
            let name = entry.map(|e| {
                e.1.map_or(format!("p{}/~overflow", e.0), |n| NAMES[n].into())
            });
            prop_assert_eq!(self.e.key_name(id).map(str::to_string), name, "{:?}", id);
            prop_assert_eq!(self.e.is_overflow(id), entry.is_some_and(|e| e.1.is_none()));
            let n = |w| Some(self.held.iter().filter(|c| c.0 == id && c.2 == w).count() as u32);
            prop_assert_eq!(self.e.in_flight(id), entry.and(n(Held::Run)), "{:?}", id);
            prop_assert_eq!(self.e.queued(id), entry.and(n(Held::Wait)), "{:?}", id);
        }
        let counts = [0, 1].map(|p| Some(self.count(p)));
        prop_assert_eq!(self.pids.map(|p| self.e.key_count(p)), counts);
        prop_assert_eq!(self.e.keys().count(), self.live.len());
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn key_table_matches_the_model(
        setup in [(1..=4u32, idle_ms()), (1..=4u32, idle_ms())],
        ops in prop::collection::vec(op(), 1..60),
    ) {
        let mut e = Engine::local().with_seed(0x5eed);
        let pids = [0, 1].map(|p| e.add_policy(&format!("p{p}"), config(setup[p].0, setup[p].1)).unwrap());
        let (max_keys, idle_ms) = (setup.map(|s| s.0), setup.map(|s| s.1));
        // The engine's clock starts at 0 (it keeps the latest time it was given).
        let (now, clock, live, seq, ids, held) = (1_000_000 * MS, 0, BTreeMap::new(), 0, vec![], vec![]);
        let mut h = Host { e, pids, max_keys, idle_ms, now, clock, live, seq, ids, held };
        for op in ops {
            h.step(op)?;
        }
        // Every call ends; idle_ms later every named key is gone (the overflow keys stay).
        while !h.held.is_empty() {
            h.step(Op::End(0, Outcome::Cancelled))?;
        }
        h.now = h.now.max(h.clock);
        h.step(Op::Advance(2_000))?;
        h.step(Op::Poll)?;
        for p in h.pids {
            prop_assert_eq!(h.e.key_count(p), Some(0));
        }
    }
}
