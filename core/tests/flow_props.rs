//! Property tests of the engine's protected-call flow: random sequences of start /
//! complete / cancel / cancel-ticket / clock steps (forwards and backwards) /
//! reconfigure, against a small reference model of the bulkhead, its FIFO queue, the
//! deadlines and the call table — in local mode and on shared state (2 workers, Envoy
//! and Kong CAS rules).
//!
//! The model tracks every call the engine handed out (queued, running, timed out,
//! reclaimed, done) and checks after every step:
//! - in-flight and queued per key equal the model's (per worker), and admissions never
//!   take the process-wide in-flight count past `max_concurrent`;
//! - every permit ends exactly once (`OnTime`, or `Late` after its `TimedOut`, then
//!   `Unknown`); stale and forged raw ids are `Unknown` and change nothing;
//! - deadlines fire at their time, never early, and nothing overdue survives a poll;
//! - the queue is FIFO (`Dequeued` in ticket order per key) and work-conserving;
//! - late results (and results of an earlier generation) never move the breaker;
//! - half-open probes per generation (started minus turns given back) ≤
//!   `permitted_probes`, process-wide;
//! - each worker is told one unbroken chain of phases per key (a transition starts
//!   where the last one ended, and never restates it).
//!
//! Local mode also predicts every bulkhead decision exactly (running / queued /
//! `QueueFull` / `BulkheadFull`).

mod common;

use std::collections::{BTreeMap, VecDeque};

use common::*;
use fusewire_core::config::{BulkheadConfig, Isolation};
use fusewire_core::shared::memory::Rules;
use fusewire_core::*;
use proptest::prelude::*;

/// Key names the properties use.
const NAMES: [&str; 3] = ["alpha", "beta", "gamma"];

#[derive(Clone, Debug)]
struct Setup {
    keys: usize,
    max: u32,
    max_queue: u32,
    threshold: u32,
    wait_ms: u64,
    timeout_ms: u64,
    probes: u32,
    success: u32,
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        1..=3usize,
        1..=3u32,
        0..=3u32,
        1..=3u32,
        100..=1500u64,
        200..=1500u64,
        1..=3u32,
    )
        .prop_flat_map(
            |(keys, max, max_queue, threshold, wait_ms, timeout_ms, probes)| {
                (1..=probes).prop_map(move |success| Setup {
                    keys,
                    max,
                    max_queue,
                    threshold,
                    wait_ms,
                    timeout_ms,
                    probes,
                    success,
                })
            },
        )
}

fn policy_json(s: &Setup) -> String {
    format!(
        r#"{{"breaker": {{"error_percentage": {{"request_volume_threshold": 4}},
                "open": {{"sleep_window_ms": 1000}},
                "half_open": {{"permitted_probes": {}, "success_threshold": {},
                               "probe_timeout_ms": 5000}}}},
            "bulkhead": {{"isolation": "pool", "max_concurrent": {}, "max_queue": {},
                          "queue_rejection_threshold": {}, "max_wait_ms": {}}},
            "execution": {{"timeout_enabled": true, "timeout_ms": {}}},
            "keys": {{"idle_ms": 86400000}}}}"#,
        s.probes, s.success, s.max, s.max_queue, s.threshold, s.wait_ms, s.timeout_ms
    )
}

#[derive(Clone, Copy, Debug)]
enum Forge {
    /// `u64::MAX`.
    Max,
    /// A slot far beyond the table.
    FarSlot,
    /// A held permit's id with a generation bit flipped.
    FlippedGeneration,
    /// A queued ticket's id used as a permit (and a permit's id as a ticket).
    Crossed,
}

#[derive(Clone, Debug)]
enum Op {
    Start {
        w: usize,
        key: usize,
    },
    Complete {
        w: usize,
        pick: usize,
        outcome: Outcome,
    },
    Cancel {
        w: usize,
        pick: usize,
    },
    CancelTicket {
        w: usize,
        pick: usize,
    },
    Stale {
        w: usize,
        pick: usize,
        outcome: Outcome,
    },
    Forged {
        w: usize,
        pick: usize,
        forge: Forge,
    },
    Advance {
        ms: u64,
        back: bool,
    },
    Reconfigure {
        max: u32,
        max_queue: u32,
        threshold: u32,
        wait_ms: u64,
        timeout_ms: u64,
    },
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        4 => Just(Outcome::Success),
        3 => Just(Outcome::Failure),
        1 => Just(Outcome::Timeout),
        1 => Just(Outcome::BadRequest),
        1 => Just(Outcome::Cancelled),
    ]
}

fn forge() -> impl Strategy<Value = Forge> {
    prop_oneof![
        Just(Forge::Max),
        Just(Forge::FarSlot),
        Just(Forge::FlippedGeneration),
        Just(Forge::Crossed),
    ]
}

fn op(workers: usize) -> impl Strategy<Value = Op> {
    let w = 0..workers;
    prop_oneof![
        8 => (w.clone(), 0..3usize).prop_map(|(w, key)| Op::Start { w, key }),
        5 => (w.clone(), any::<usize>(), outcome())
            .prop_map(|(w, pick, outcome)| Op::Complete { w, pick, outcome }),
        1 => (w.clone(), any::<usize>()).prop_map(|(w, pick)| Op::Cancel { w, pick }),
        1 => (w.clone(), any::<usize>()).prop_map(|(w, pick)| Op::CancelTicket { w, pick }),
        1 => (w.clone(), any::<usize>(), outcome())
            .prop_map(|(w, pick, outcome)| Op::Stale { w, pick, outcome }),
        1 => (w, any::<usize>(), forge()).prop_map(|(w, pick, forge)| Op::Forged { w, pick, forge }),
        4 => (0..=2000u64, prop::bool::weighted(0.15)).prop_map(|(ms, back)| Op::Advance { ms, back }),
        1 => (1..=3u32, 0..=3u32, 1..=3u32, 100..=1500u64, 200..=1500u64).prop_map(
            |(max, max_queue, threshold, wait_ms, timeout_ms)| Op::Reconfigure {
                max,
                max_queue,
                threshold,
                wait_ms,
                timeout_ms,
            }
        ),
    ]
}

/// Where a call is in its life, as the model sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    /// In its key's queue, expiring at `wait_deadline`.
    Queued { wait_deadline: u64 },
    /// Holding a slot, timing out at `deadline`.
    Running { deadline: u64 },
    /// Timed out; its late result is still expected.
    TimedOut,
    /// Ended (completed, or its late result came).
    Done,
    /// Left the queue without running (wait expired, ticket cancelled).
    Gone,
}

#[derive(Debug)]
struct CallM {
    w: usize,
    key: usize,
    raw: u64,
    st: St,
    /// Breaker generation of its pass.
    generation: u32,
    /// The half-open generation it probes in, if it is a probe.
    probe: Option<u32>,
}

#[derive(Debug, Default)]
struct WorkerM {
    /// Free call-table slots (removed calls not reused yet).
    free: usize,
    /// Timed-out calls in expiry order (the table's reclaim order).
    expired: VecDeque<usize>,
    /// Per key: queued calls in ticket order.
    queues: Vec<VecDeque<usize>>,
    /// Per key: calls holding a slot.
    held: Vec<u32>,
}

struct Sim {
    h: Host,
    shared: bool,
    names: Vec<&'static str>,
    keys: Vec<Vec<KeyId>>,
    cfg: Config,
    calls: Vec<CallM>,
    workers: Vec<WorkerM>,
    /// The engine clock (the host's `now` may step backwards; the engine's never).
    clock: u64,
    /// Per (key, half-open generation): probes out (started minus turns given back).
    probes: BTreeMap<(usize, u32), i64>,
    /// Admissions (running starts, dequeues) in the current step, per key.
    admitted: Vec<u32>,
    /// The phase each worker was last told per key (transitions form one chain).
    told: BTreeMap<(usize, KeyId), Phase>,
    log: Vec<String>,
}

impl Sim {
    fn new(mode: Mode, s: &Setup) -> Sim {
        let json = policy_json(s);
        let mut h = Host::new(mode, &json);
        let names: Vec<&'static str> = NAMES[..s.keys].to_vec();
        let mut keys = Vec::new();
        for w in 0..mode.workers() {
            keys.push(names.iter().map(|n| h.key(w, n)).collect::<Vec<_>>());
        }
        let workers = (0..mode.workers())
            .map(|_| WorkerM {
                queues: vec![VecDeque::new(); s.keys],
                held: vec![0; s.keys],
                ..Default::default()
            })
            .collect();
        let clock = h.now;
        let mut sim = Sim {
            h,
            shared: mode != Mode::Local,
            names,
            keys,
            cfg: config(&json),
            calls: Vec::new(),
            workers,
            clock,
            probes: BTreeMap::new(),
            admitted: vec![0; s.keys],
            told: BTreeMap::new(),
            log: Vec::new(),
        };
        for w in 0..mode.workers() {
            sim.take_events(w);
        }
        sim
    }

    fn bulkhead(&self) -> &BulkheadConfig {
        self.cfg.bulkhead.as_ref().expect("a bulkhead")
    }

    fn find(&self, w: usize, raw: u64) -> Option<usize> {
        self.calls.iter().rposition(|c| c.w == w && c.raw == raw)
    }

    /// The model's call table: a new call takes a free slot, else grows the table; a
    /// timed-out call keeps its slot for its late result (it is forgotten only past
    /// 16 384 waiting, which these runs never reach).
    fn insert(&mut self, w: usize) {
        let wm = &mut self.workers[w];
        if wm.free > 0 {
            wm.free -= 1;
        }
    }

    fn remove(&mut self, w: usize) {
        self.workers[w].free += 1;
    }

    fn phase_gen(&self, w: usize, key: usize) -> (Phase, u32) {
        let k = self.keys[w][key];
        let e = &self.h.engines[w];
        let s = e.snapshot(k, self.clock).expect("live key");
        (e.phase(k).expect("live key"), s.generation)
    }

    fn total_held(&self, key: usize) -> u32 {
        self.workers.iter().map(|wm| wm.held[key]).sum()
    }

    /// Collects worker `w`'s events and checks each against the model.
    fn take_events(&mut self, w: usize) {
        for e in self.h.take_events(w) {
            self.on_event(w, e);
        }
    }

    fn on_event(&mut self, w: usize, e: Event) {
        self.log.push(format!("  w{w} event {e:?}"));
        match e {
            Event::TimedOut { key, call } => {
                let i = self.find(w, call.to_raw()).expect("a known call timed out");
                let c = &self.calls[i];
                assert_eq!(self.keys[w][c.key], key, "timed out under its key");
                match c.st {
                    St::Running { deadline } => {
                        assert!(
                            deadline <= self.clock,
                            "timed out early: {deadline} > {}",
                            self.clock
                        )
                    }
                    st => panic!("TimedOut for a call in state {st:?}"),
                }
                let key = c.key;
                self.calls[i].st = St::TimedOut;
                self.workers[w].held[key] -= 1;
                self.workers[w].expired.push_back(i);
            }
            Event::Dequeued { key, permit } => {
                let raw = permit.into_raw();
                let i = self.find(w, raw).expect("a known ticket was dequeued");
                let k = self.calls[i].key;
                assert_eq!(self.keys[w][k], key, "dequeued under its key");
                let front = self.workers[w].queues[k].pop_front();
                assert_eq!(
                    front,
                    Some(i),
                    "FIFO: the dequeued call is the queue's head"
                );
                assert!(matches!(self.calls[i].st, St::Queued { .. }));
                let timeout = ms_to_ns(self.cfg.execution.timeout_ms);
                self.calls[i].st = St::Running {
                    deadline: self.clock + timeout,
                };
                self.workers[w].held[k] += 1;
                self.admitted[k] += 1;
            }
            Event::Refused { key, call, refusal } => {
                let i = self
                    .find(w, call.to_raw())
                    .expect("a known ticket was refused");
                let k = self.calls[i].key;
                assert_eq!(self.keys[w][k], key);
                assert_eq!(
                    (refusal.event, refusal.cause),
                    (EventKind::ThreadPoolRejected, Cause::WaitExpired)
                );
                match self.calls[i].st {
                    St::Queued { wait_deadline } => {
                        assert!(wait_deadline <= self.clock, "wait expired early")
                    }
                    st => panic!("wait expiry of a call in state {st:?}"),
                }
                let q = &mut self.workers[w].queues[k];
                let at = q.iter().position(|&c| c == i).expect("queued");
                q.remove(at);
                self.calls[i].st = St::Gone;
                self.remove(w);
            }
            Event::Transition { key, transition: t } => {
                let told = self.told.entry((w, key)).or_insert(Phase::Closed);
                assert!(
                    t.from == *told && t.to != t.from,
                    "w{w}: told {told:?}, then {:?} -> {:?}",
                    t.from,
                    t.to
                );
                *told = t.to;
            }
            Event::KeyExpired { key } => panic!("no key is idle long enough to expire: {key:?}"),
            Event::Store { key, issue } => {
                panic!("a synchronous in-memory store has no issues: {key:?} {issue:?}")
            }
        }
    }

    fn step(&mut self, op: &Op) {
        self.log.push(format!("{op:?}"));
        self.admitted.iter_mut().for_each(|a| *a = 0);
        match *op {
            Op::Start { w, key } => self.start(w, key % self.names.len()),
            Op::Complete { w, pick, outcome } => self.complete(w, pick, outcome, false),
            Op::Cancel { w, pick } => self.complete(w, pick, Outcome::Cancelled, true),
            Op::CancelTicket { w, pick } => self.cancel_ticket(w, pick),
            Op::Stale { w, pick, outcome } => {
                let done: Vec<usize> = (0..self.calls.len())
                    .filter(|&i| {
                        self.calls[i].w == w && matches!(self.calls[i].st, St::Done | St::Gone)
                    })
                    .collect();
                if done.is_empty() {
                    return;
                }
                let i = done[pick % done.len()];
                let raw = self.calls[i].raw;
                let now = self.h.now;
                let c = self.h.engines[w].complete(Permit::from_raw(raw), outcome, now, 0);
                assert_eq!(c, Completion::Unknown, "a stale permit id");
                assert!(
                    !self.h.engines[w].cancel_ticket(Ticket::from_raw(raw), now),
                    "a stale ticket id"
                );
                self.h.drive(w);
                self.take_events(w);
            }
            Op::Forged { w, pick, forge } => self.forged(w, pick, forge),
            Op::Advance { ms, back } => {
                if back {
                    self.h.now = self.h.now.saturating_sub(ms * MS);
                } else {
                    self.h.now += ms * MS;
                    self.clock = self.clock.max(self.h.now);
                }
                for w in 0..self.h.engines.len() {
                    self.h.drive(w);
                    self.take_events(w);
                }
            }
            Op::Reconfigure {
                max,
                max_queue,
                threshold,
                wait_ms,
                timeout_ms,
            } => {
                let mut cfg = self.cfg.clone();
                cfg.bulkhead = Some(BulkheadConfig {
                    isolation: Isolation::Pool,
                    max_concurrent: max,
                    max_queue,
                    queue_rejection_threshold: threshold,
                    max_wait_ms: wait_ms,
                    ..self.bulkhead().clone()
                });
                cfg.execution.timeout_ms = timeout_ms;
                self.cfg = cfg.clone();
                for w in 0..self.h.engines.len() {
                    let p = self.h.policy;
                    self.h.engines[w].set_policy(p, cfg.clone()).expect("valid");
                    self.h.drive(w);
                    self.take_events(w);
                }
            }
        }
        self.check();
    }

    fn start(&mut self, w: usize, key: usize) {
        let k = self.keys[w][key];
        let (now, rand) = (self.h.now, 0);
        self.h.engines[w].prepare(k, now);
        self.h.drive(w);
        self.take_events(w);
        let held_before = self.workers[w].held[key];
        let queued_before = self.workers[w].queues[key].len() as u32;
        let s = self.h.engines[w].start(k, now, rand);
        let (phase, generation) = self.phase_gen(w, key);
        self.log
            .push(format!("  -> {s:?} ({phase:?}, generation {generation})"));
        let b = self.bulkhead().clone();
        let cap = b.queue_capacity();
        let probe = phase == Phase::HalfOpen;
        // Local mode: the bulkhead decision is exact.
        let expect = |s: &Start| -> &'static str {
            if matches!(s, Start::Refused(r) if r.is_short_circuit()) {
                return "refused";
            }
            if held_before < b.max_concurrent && queued_before == 0 {
                "running"
            } else if !probe && queued_before < cap {
                "queued"
            } else {
                "refused"
            }
        };
        let want = expect(&s);
        match s {
            Start::Running(p) => {
                if !self.shared {
                    assert_eq!(want, "running");
                }
                self.insert(w);
                let deadline = self.clock + ms_to_ns(self.cfg.execution.timeout_ms);
                let probe = probe.then_some(generation);
                if let Some(g) = probe {
                    let n = self.probes.entry((key, g)).or_insert(0);
                    *n += 1;
                    assert!(
                        *n <= i64::from(self.cfg.breaker.half_open.permitted_probes),
                        "more than permitted_probes probes in generation {g}"
                    );
                }
                self.calls.push(CallM {
                    w,
                    key,
                    raw: p.into_raw(),
                    st: St::Running { deadline },
                    generation,
                    probe,
                });
                self.workers[w].held[key] += 1;
                self.admitted[key] += 1;
            }
            Start::Queued(t) => {
                if !self.shared {
                    assert_eq!(want, "queued");
                }
                assert!(!probe, "a probe is never queued");
                self.insert(w);
                let wait_deadline = self.clock + ms_to_ns(b.max_wait_ms);
                self.calls.push(CallM {
                    w,
                    key,
                    raw: t.into_raw(),
                    st: St::Queued { wait_deadline },
                    generation,
                    probe: None,
                });
                let i = self.calls.len() - 1;
                self.workers[w].queues[key].push_back(i);
            }
            Start::Refused(r) => {
                if r.is_short_circuit() {
                    assert_ne!(
                        phase,
                        Phase::Closed,
                        "a closed breaker short-circuited: {r:?}"
                    );
                } else if !self.shared {
                    assert_eq!(want, "refused", "{r:?}");
                    let cause = if cap > 0 && queued_before >= cap {
                        Cause::QueueFull
                    } else {
                        Cause::BulkheadFull
                    };
                    assert_eq!((r.event, r.cause), (EventKind::ThreadPoolRejected, cause));
                } else {
                    assert_eq!(r.event, EventKind::ThreadPoolRejected, "{r:?}");
                }
            }
        }
        self.h.drive(w);
        self.take_events(w);
    }

    /// Drains every pending wake at `now`, so that what follows is the only change.
    fn settle(&mut self) {
        for _ in 0..4 {
            for w in 0..self.h.engines.len() {
                self.h.drive(w);
                self.take_events(w);
            }
        }
    }

    fn complete(&mut self, w: usize, pick: usize, outcome: Outcome, cancel: bool) {
        // A permit the host holds: running, timed out (its late result may come) or
        // reclaimed (the engine forgot it).
        let held: Vec<usize> = (0..self.calls.len())
            .filter(|&i| {
                self.calls[i].w == w
                    && matches!(self.calls[i].st, St::Running { .. } | St::TimedOut)
            })
            .collect();
        if held.is_empty() {
            return;
        }
        let i = held[pick % held.len()];
        let (key, raw, st) = (self.calls[i].key, self.calls[i].raw, self.calls[i].st);
        let late = st == St::TimedOut;
        if late {
            self.settle();
        }
        let k = self.keys[w][key];
        let now = self.h.now;
        let before = self.phase_gen(w, key);
        let snap_before = self.h.engines[w].snapshot(k, self.clock);
        let late_before = self.h.engines[w].late_results(k);
        let c = if cancel {
            self.h.engines[w].cancel(Permit::from_raw(raw), now, 0)
        } else {
            self.h.engines[w].complete(Permit::from_raw(raw), outcome, now, 0)
        };
        let after = self.phase_gen(w, key);
        self.log.push(format!("  -> {c:?} ({after:?})"));
        match st {
            St::Running { .. } => {
                assert_eq!(c, Completion::OnTime);
                if self.calls[i].generation != before.1 {
                    assert_eq!(
                        after, before,
                        "a result of an earlier generation moved the breaker"
                    );
                }
                self.calls[i].st = St::Done;
                self.workers[w].held[key] -= 1;
                self.remove(w);
                if let Some(g) = self.calls[i].probe {
                    if matches!(outcome, Outcome::BadRequest | Outcome::Cancelled) || cancel {
                        // The probe said nothing about the upstream: its turn is back.
                        *self.probes.entry((key, g)).or_insert(0) -= 1;
                    }
                }
            }
            St::TimedOut => {
                assert_eq!(
                    c,
                    Completion::Late,
                    "a timed-out call's result is late, once"
                );
                assert_eq!(after, before, "a late result moved the breaker");
                assert_eq!(
                    self.h.engines[w].snapshot(k, self.clock),
                    snap_before,
                    "a late result changed the key's metrics"
                );
                // A cancel is no result (found by review: it counted as one).
                let arrived = !cancel && outcome != Outcome::Cancelled;
                assert_eq!(
                    self.h.engines[w].late_results(k),
                    late_before.map(|n| n + u64::from(arrived))
                );
                self.calls[i].st = St::Done;
                self.remove(w);
            }
            _ => unreachable!(),
        }
        self.h.drive(w);
        if late {
            // Nothing was pending at `now`: the late result caused no transition.
            let ev = self.h.take_events(w);
            assert!(
                !ev.iter().any(|e| matches!(e, Event::Transition { .. })),
                "a late result moved the breaker: {ev:?}"
            );
            assert_eq!(self.phase_gen(w, key), before);
            for e in ev {
                self.on_event(w, e);
            }
        }
        self.take_events(w);
    }

    fn cancel_ticket(&mut self, w: usize, pick: usize) {
        let queued: Vec<usize> = (0..self.calls.len())
            .filter(|&i| self.calls[i].w == w && matches!(self.calls[i].st, St::Queued { .. }))
            .collect();
        let now = self.h.now;
        if queued.is_empty() {
            // Tickets that already left the queue (ran or expired) are not queued.
            let gone: Vec<usize> = (0..self.calls.len())
                .filter(|&i| self.calls[i].w == w && self.calls[i].st == St::Gone)
                .collect();
            if let Some(&i) = gone.get(pick % gone.len().max(1)) {
                let raw = self.calls[i].raw;
                assert!(!self.h.engines[w].cancel_ticket(Ticket::from_raw(raw), now));
            }
            return;
        }
        let i = queued[pick % queued.len()];
        let key = self.calls[i].key;
        assert!(self.h.engines[w].cancel_ticket(Ticket::from_raw(self.calls[i].raw), now));
        let q = &mut self.workers[w].queues[key];
        let at = q.iter().position(|&c| c == i).expect("queued");
        q.remove(at);
        self.calls[i].st = St::Gone;
        self.remove(w);
        assert!(
            !self.h.engines[w].cancel_ticket(Ticket::from_raw(self.calls[i].raw), now),
            "a ticket is cancelled once"
        );
        self.h.drive(w);
        self.take_events(w);
    }

    fn forged(&mut self, w: usize, pick: usize, forge: Forge) {
        let now = self.h.now;
        let pick_of = |sim: &Sim, f: &dyn Fn(St) -> bool| -> Option<u64> {
            let v: Vec<u64> = sim
                .calls
                .iter()
                .filter(|c| c.w == w && f(c.st))
                .map(|c| c.raw)
                .collect();
            (!v.is_empty()).then(|| v[pick % v.len()])
        };
        let e = &mut self.h.engines[w];
        match forge {
            Forge::Max => {
                assert_eq!(
                    e.complete(Permit::from_raw(u64::MAX), Outcome::Failure, now, 0),
                    Completion::Unknown
                );
                assert!(!e.cancel_ticket(Ticket::from_raw(u64::MAX), now));
            }
            Forge::FarSlot => {
                let raw = (1 << 22) - 1;
                assert_eq!(
                    e.complete(Permit::from_raw(raw), Outcome::Failure, now, 0),
                    Completion::Unknown
                );
                assert!(!e.cancel_ticket(Ticket::from_raw(raw), now));
            }
            Forge::FlippedGeneration => {
                let Some(raw) = pick_of(self, &|st| {
                    matches!(st, St::Running { .. } | St::Queued { .. })
                }) else {
                    return;
                };
                let forged = raw ^ 1 << 52;
                let e = &mut self.h.engines[w];
                assert_eq!(
                    e.complete(Permit::from_raw(forged), Outcome::Failure, now, 0),
                    Completion::Unknown
                );
                assert!(!e.cancel_ticket(Ticket::from_raw(forged), now));
            }
            Forge::Crossed => {
                if let Some(raw) = pick_of(self, &|st| matches!(st, St::Queued { .. })) {
                    let e = &mut self.h.engines[w];
                    assert_eq!(
                        e.complete(Permit::from_raw(raw), Outcome::Failure, now, 0),
                        Completion::Unknown,
                        "a ticket is not a permit"
                    );
                }
                if let Some(raw) =
                    pick_of(self, &|st| matches!(st, St::Running { .. } | St::TimedOut))
                {
                    let e = &mut self.h.engines[w];
                    assert!(
                        !e.cancel_ticket(Ticket::from_raw(raw), now),
                        "a permit is not a ticket"
                    );
                }
            }
        }
        self.h.drive(w);
        self.take_events(w);
    }

    fn check(&mut self) {
        let b = self.bulkhead().clone();
        for key in 0..self.names.len() {
            let mut in_flight = 0;
            for w in 0..self.h.engines.len() {
                let k = self.keys[w][key];
                let e = &self.h.engines[w];
                let wm = &self.workers[w];
                assert_eq!(
                    e.in_flight(k),
                    Some(wm.held[key]),
                    "w{w} {}: in flight",
                    self.names[key]
                );
                assert_eq!(
                    e.queued(k),
                    Some(wm.queues[key].len() as u32),
                    "w{w} {}: queued",
                    self.names[key]
                );
                in_flight += e.in_flight(k).unwrap_or(0);
                // Work-conserving: nobody waits while this worker could run it.
                // (Shared: a slot this worker holds beyond its calls in flight, with
                // the ledger it last read within the limit.)
                if !wm.queues[key].is_empty() {
                    let held = wm.held[key];
                    let free = if self.shared {
                        let ttl = SharedConfig::default().lease_ttl_ms * MS;
                        let others = e
                            .shared_view(k)
                            .map_or(0, |v| v.ledger.others_in_flight(e.owner(), self.clock, ttl));
                        let slots = e.slots_held(k).expect("shared key");
                        slots > held && others + u64::from(slots) <= u64::from(b.max_concurrent)
                    } else {
                        held < b.max_concurrent
                    };
                    assert!(
                        !free,
                        "w{w} {}: a call waits while a slot is free",
                        self.names[key]
                    );
                }
            }
            assert_eq!(in_flight, self.total_held(key));
            if self.admitted[key] > 0 {
                assert!(
                    in_flight <= b.max_concurrent,
                    "{}: admitted past max_concurrent: {in_flight} > {}",
                    self.names[key],
                    b.max_concurrent
                );
            }
        }
        // Nothing overdue survives a poll.
        for c in &self.calls {
            match c.st {
                St::Running { deadline } => assert!(deadline > self.clock, "overdue call {c:?}"),
                St::Queued { wait_deadline } => {
                    assert!(wait_deadline > self.clock, "overdue wait {c:?}")
                }
                _ => {}
            }
        }
        // A host that polls again at next_deadline() is not woken in the past forever
        // (work re-armed for `now` may take another poll or two, not more).
        for w in 0..self.h.engines.len() {
            for _ in 0..4 {
                if self.h.engines[w]
                    .next_deadline()
                    .is_some_and(|d| d <= self.clock)
                {
                    self.h.drive(w);
                    self.take_events(w);
                }
            }
            if let Some(d) = self.h.engines[w].next_deadline() {
                assert!(
                    d > self.clock,
                    "w{w}: next_deadline {} ms in the past after polling until None",
                    (self.clock - d) / MS
                );
            }
        }
    }
}

fn run(mode: Mode, s: &Setup, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut sim = Sim::new(mode, s);
    for op in ops {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sim.step(op)));
        if let Err(e) = r {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            let tail: Vec<&String> = sim.log.iter().rev().take(40).collect();
            let tail: Vec<&str> = tail.into_iter().rev().map(|s| s.as_str()).collect();
            return Err(TestCaseError::fail(format!(
                "{mode:?} {s:?}: {msg}\nlast steps:\n{}",
                tail.join("\n")
            )));
        }
    }
    Ok(())
}

fn ms_to_ns(ms: u64) -> u64 {
    ms * MS
}

// ---- the breaker: probes process-wide ------------------------------------------------

#[derive(Clone, Debug)]
struct BreakerSetup {
    probes: u32,
    success: u32,
    probe_timeout_ms: u64,
    timeout: Option<u64>,
}

fn breaker_setup() -> impl Strategy<Value = BreakerSetup> {
    (1..=3u32, 300..=3000u64, prop::option::of(200..=2000u64)).prop_flat_map(
        |(probes, probe_timeout_ms, timeout)| {
            (1..=probes).prop_map(move |success| BreakerSetup {
                probes,
                success,
                probe_timeout_ms,
                timeout,
            })
        },
    )
}

#[derive(Clone, Debug)]
enum BOp {
    Start {
        w: usize,
    },
    Complete {
        w: usize,
        pick: usize,
        outcome: Outcome,
    },
    Advance {
        ms: u64,
    },
}

fn bop(workers: usize) -> impl Strategy<Value = BOp> {
    prop_oneof![
        5 => (0..workers).prop_map(|w| BOp::Start { w }),
        5 => (0..workers, any::<usize>(), outcome())
            .prop_map(|(w, pick, outcome)| BOp::Complete { w, pick, outcome }),
        2 => (0..=1500u64).prop_map(|ms| BOp::Advance { ms }),
    ]
}

/// Random traffic on one key of an error-percentage breaker (volume 5, 50 %, 500 ms
/// open): the probes running at once in one half-open generation, over every
/// worker, never exceed `permitted_probes`, and neither do the probes a generation
/// issued minus the turns given back (bad requests, cancellations).
fn run_breaker(mode: Mode, s: &BreakerSetup, ops: &[BOp]) -> Result<(), TestCaseError> {
    let json = format!(
        r#"{{"breaker": {{"error_percentage": {{"request_volume_threshold": 5}},
                "open": {{"sleep_window_ms": 500}},
                "half_open": {{"permitted_probes": {}, "success_threshold": {},
                               "probe_timeout_ms": {}}}}},
            "execution": {{"timeout_enabled": {}, "timeout_ms": {}}}}}"#,
        s.probes,
        s.success,
        s.probe_timeout_ms,
        s.timeout.is_some(),
        s.timeout.unwrap_or(1000)
    );
    let mut h = Host::new(mode, &json);
    let keys = h.keys("k");
    let n = i64::from(s.probes);
    // Running calls: (worker, raw id, probe generation).
    let mut running: Vec<(usize, u64, Option<u32>)> = Vec::new();
    // Per generation: probes issued minus turns given back.
    let mut issued: BTreeMap<u32, i64> = BTreeMap::new();
    for (step, op) in ops.iter().enumerate() {
        match *op {
            BOp::Start { w } => {
                let s = h.start(w, keys[w]);
                let snap = h.snapshot(w, keys[w]);
                if let Start::Running(p) = s {
                    let probe = (snap.phase == Phase::HalfOpen).then_some(snap.generation);
                    if let Some(g) = probe {
                        *issued.entry(g).or_insert(0) += 1;
                        prop_assert!(
                            issued[&g] <= n,
                            "step {step}: generation {g} issued {} > {n}",
                            issued[&g]
                        );
                    }
                    running.push((w, p.into_raw(), probe));
                }
            }
            BOp::Complete { w, pick, outcome } => {
                let mine: Vec<usize> = (0..running.len()).filter(|&i| running[i].0 == w).collect();
                if mine.is_empty() {
                    continue;
                }
                let (w, raw, probe) = running.remove(mine[pick % mine.len()]);
                let c = h.complete(w, Permit::from_raw(raw), outcome);
                if let (Some(g), Completion::OnTime) = (probe, c) {
                    if matches!(outcome, Outcome::BadRequest | Outcome::Cancelled) {
                        *issued.entry(g).or_insert(0) -= 1;
                    }
                }
            }
            BOp::Advance { ms } => {
                h.advance(ms);
                for w in 0..h.engines.len() {
                    for e in h.take_events(w) {
                        if let Event::TimedOut { call, .. } = e {
                            running.retain(|r| !(r.0 == w && r.1 == call.to_raw()));
                        }
                    }
                }
            }
        }
        for w in 0..h.engines.len() {
            for e in h.take_events(w) {
                if let Event::TimedOut { call, .. } = e {
                    running.retain(|r| !(r.0 == w && r.1 == call.to_raw()));
                }
            }
        }
        let mut at_once: BTreeMap<u32, i64> = BTreeMap::new();
        for r in &running {
            if let Some(g) = r.2 {
                *at_once.entry(g).or_insert(0) += 1;
            }
        }
        for (g, c) in at_once {
            prop_assert!(
                c <= n,
                "{mode:?} step {step}: {c} probes of generation {g} run at once (> {n})"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn local_flow_matches_the_model(s in setup(), ops in prop::collection::vec(op(1), 1..80)) {
        run(Mode::Local, &s, &ops)?;
    }

    #[test]
    fn shared_envoy_flow_matches_the_model(s in setup(), ops in prop::collection::vec(op(2), 1..80)) {
        run(Mode::Shared(Rules::Envoy, 2), &s, &ops)?;
    }

    #[test]
    fn shared_kong_flow_matches_the_model(s in setup(), ops in prop::collection::vec(op(2), 1..80)) {
        run(Mode::Shared(Rules::Kong, 2), &s, &ops)?;
    }

    #[test]
    fn half_open_probes_never_exceed_permitted_probes(
        s in breaker_setup(),
        mode in prop_oneof![
            Just(Mode::Local),
            Just(Mode::Shared(Rules::Envoy, 3)),
            Just(Mode::Shared(Rules::Kong, 3)),
        ],
        ops in prop::collection::vec(bop(3), 1..120),
    ) {
        let ops: Vec<BOp> = ops
            .into_iter()
            .map(|op| match op {
                BOp::Start { w } => BOp::Start { w: w % mode.workers() },
                BOp::Complete { w, pick, outcome } => BOp::Complete { w: w % mode.workers(), pick, outcome },
                other => other,
            })
            .collect();
        run_breaker(mode, &s, &ops)?;
    }
}
