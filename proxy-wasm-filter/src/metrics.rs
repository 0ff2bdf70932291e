//! The filter's metrics, defined once per root context and key (never per request),
//! named after the core's event kinds.
//!
//! Names (`<prefix>` defaults to `fusewire`; `<key>` is the key with every character
//! outside `[A-Za-z0-9_]` replaced by `_`):
//!
//! | name | type | meaning |
//! | --- | --- | --- |
//! | `<prefix>.<key>.<event>` | counter | `success`, `failure`, `timeout`, `bad_request`, `short_circuited`, `semaphore_rejected`, `thread_pool_rejected`, `fallback_success` (fallback reply sent): the core's event kinds |
//! | `<prefix>.<key>.collapsed` | counter | requests answered with an identical in-flight request's response (the core's `COLLAPSED`) |
//! | `<prefix>.<key>.collapse_leader` | counter | requests that took the collapse lead (a waiter handed it included) |
//! | `<prefix>.<key>.stale_served` | counter | stale copies served instead of the fallback body |
//! | `<prefix>.<key>.cancelled` | counter | stream ended with no verdict |
//! | `<prefix>.<key>.opened` / `half_opened` / `closed` | counter | transitions this VM made (each counted once process-wide) |
//! | `<prefix>.<key>.breaker_state` | gauge | 0 closed, 1 open, 2 half-open |
//! | `<prefix>.<key>.in_flight` | gauge | admitted calls holding a slot (all workers) |
//! | `<prefix>.<key>.latency_ms` | histogram | latency of admitted calls, from admission to the response's end of stream |
//!
//! In Envoy they appear as `wasmcustom.<name>` in `/stats` and as the sanitised name in
//! `/stats/prometheus`. Counters are batched per VM and handed to the host on each
//! tick (one host call per non-zero counter instead of one per event).

use std::cell::RefCell;

use fusewire_core::{EventKind, Phase};

use crate::host;
use crate::vecmap::VecMap;

/// The key names given their own stats in this VM, and how many per policy. Envoy
/// never frees a stat, so the cap holds for the VM's whole life: across its root
/// contexts, and across reloads (each makes a new root on a reused VM).
#[derive(Default)]
struct StatNames {
    named: VecMap<String, ()>,
    per_policy: VecMap<String, usize>,
    /// Metric ids per `<prefix>.<key>.`: Envoy keeps every definition for the VM's
    /// life (a new id each time), so a reload's new root reuses them rather than
    /// defining its keys' metrics again (found by review: 400 reloads with 50 keys grew
    /// the host by 8 MB).
    defined: VecMap<String, KeyMetrics>,
}

thread_local! {
    static STAT_NAMES: RefCell<StatNames> = RefCell::default();
}

/// Whether key `name` of policy `policy` has its own stats: it has them already in
/// this VM, or the policy named fewer than `cap` keys so far (then it is counted).
pub fn own_stats(policy: &str, name: &str, cap: usize) -> bool {
    STAT_NAMES.with(|s| {
        let Ok(mut s) = s.try_borrow_mut() else {
            return false;
        };
        if s.named.get(name).is_some() {
            return true;
        }
        let n = s.per_policy.get(policy).copied().unwrap_or(0);
        if n >= cap {
            return false;
        }
        s.per_policy.insert(policy.to_string(), n + 1);
        s.named.insert(name.to_string(), ());
        true
    })
}

/// The event kinds the filter counts.
pub const EVENTS: [EventKind; 9] = [
    EventKind::Success,
    EventKind::Failure,
    EventKind::Timeout,
    EventKind::BadRequest,
    EventKind::ShortCircuited,
    EventKind::SemaphoreRejected,
    EventKind::ThreadPoolRejected,
    EventKind::FallbackSuccess,
    EventKind::Collapsed,
];

/// Counters that are not event kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Extra {
    /// `cancelled`.
    Cancelled = EVENTS.len(),
    /// `opened`.
    Opened,
    /// `half_opened`.
    HalfOpened,
    /// `closed`.
    Closed,
    /// `collapse_leader`: a request that took the collapse lead (a waiter handed it too).
    CollapseLeader,
    /// `stale_served`: a stale copy served instead of the fallback body.
    StaleServed,
}

const EXTRA: [&str; 6] = [
    "cancelled",
    "opened",
    "half_opened",
    "closed",
    "collapse_leader",
    "stale_served",
];
const N: usize = EVENTS.len() + EXTRA.len();

/// Every key's metrics of a root, and which of them hold counts not yet handed to the
/// host: a tick flushes only those, so its cost follows the keys that saw traffic
/// since the last tick, not every key ever defined.
#[derive(Default)]
pub struct MetricsTable {
    keys: Vec<KeyMetrics>,
    dirty: Vec<usize>,
}

impl MetricsTable {
    /// Adds a key's metrics; returns its slot.
    pub fn push(&mut self, m: KeyMetrics) -> usize {
        self.keys.push(m);
        self.keys.len() - 1
    }

    /// The metrics in slot `i`, to count on: the slot is flushed on the next tick.
    #[inline(always)]
    pub fn get_mut(&mut self, i: usize) -> Option<&mut KeyMetrics> {
        let m = self.keys.get_mut(i)?;
        if !m.dirty {
            m.dirty = true;
            self.dirty.push(i);
        }
        Some(m)
    }

    /// Hands the batched counts of the keys counted on since the last flush to the host.
    pub fn flush(&mut self) {
        for i in self.dirty.drain(..) {
            if let Some(m) = self.keys.get_mut(i) {
                m.flush();
            }
        }
    }
}

/// Metric ids of one key (None where the host refused a definition) and counts not yet
/// handed to the host.
#[derive(Clone, Debug, Default)]
pub struct KeyMetrics {
    /// Listed in its table's `dirty`.
    dirty: bool,
    ids: [Option<u32>; N],
    pending: [u32; N],
    state: Option<u32>,
    in_flight: Option<u32>,
    pending_in_flight: i64,
    latency: Option<u32>,
}

/// `<prefix>.<sanitised key>.<suffix>`.
pub fn metric_name(prefix: &str, key: &str, suffix: &str) -> String {
    let mut s = String::with_capacity(prefix.len() + key.len() + suffix.len() + 2);
    s.push_str(prefix);
    s.push('.');
    s.extend(key.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        }
    }));
    s.push('.');
    s.push_str(suffix);
    s
}

impl KeyMetrics {
    /// Defines every metric of `key`, once per VM.
    pub fn define(prefix: &str, key: &str) -> Self {
        let base = metric_name(prefix, key, "");
        let known = STAT_NAMES.with(|s| Some(s.try_borrow().ok()?.defined.get(&base)?.clone()));
        if let Some(m) = known {
            return m;
        }
        let m = Self::define_now(prefix, key);
        let complete = m.ids.iter().all(Option::is_some)
            && m.state.is_some()
            && m.in_flight.is_some()
            && m.latency.is_some();
        if complete {
            STAT_NAMES.with(|s| {
                if let Ok(mut s) = s.try_borrow_mut() {
                    s.defined.insert(base, m.clone());
                }
            });
        }
        m
    }

    fn define_now(prefix: &str, key: &str) -> Self {
        let mut m = KeyMetrics::default();
        let names = EVENTS.iter().map(|k| k.snake_name()).chain(EXTRA);
        for (slot, name) in m.ids.iter_mut().zip(names) {
            *slot = host::define_metric(host::COUNTER, &metric_name(prefix, key, name));
        }
        m.state = host::define_metric(host::GAUGE, &metric_name(prefix, key, "breaker_state"));
        m.in_flight = host::define_metric(host::GAUGE, &metric_name(prefix, key, "in_flight"));
        m.latency = host::define_metric(host::HISTOGRAM, &metric_name(prefix, key, "latency_ms"));
        m
    }

    fn add(&mut self, i: usize) {
        if let Some(p) = self.pending.get_mut(i) {
            *p = p.saturating_add(1);
        }
    }

    /// Counts one event (kinds the filter does not export are ignored).
    pub fn event(&mut self, kind: EventKind) {
        if let Some(i) = EVENTS.iter().position(|k| *k == kind) {
            self.add(i);
        }
    }

    /// Counts one non-event.
    pub fn extra(&mut self, e: Extra) {
        self.add(e as usize);
    }

    /// Counts a transition this VM made, and sets the state gauge.
    pub fn transition(&mut self, to: Phase, made_here: bool) {
        if made_here {
            self.extra(match to {
                Phase::Open => Extra::Opened,
                Phase::HalfOpen => Extra::HalfOpened,
                Phase::Closed => Extra::Closed,
            });
        }
        self.state(to);
    }

    /// Sets the breaker-state gauge.
    pub fn state(&self, phase: Phase) {
        if let Some(id) = self.state {
            let v = match phase {
                Phase::Closed => 0,
                Phase::Open => 1,
                Phase::HalfOpen => 2,
            };
            host::record_metric(id, v);
        }
    }

    /// Moves the process-wide in-flight gauge by ±1 (batched).
    pub fn in_flight(&mut self, delta: i64) {
        self.pending_in_flight += delta;
    }

    /// Records a latency sample.
    pub fn latency(&self, ms: u64) {
        if let Some(id) = self.latency {
            host::record_metric(id, ms);
        }
    }

    /// Hands the batched counts to the host.
    fn flush(&mut self) {
        self.dirty = false;
        for (p, id) in self.pending.iter_mut().zip(self.ids.iter()) {
            if *p > 0 {
                if let Some(id) = id {
                    host::increment_metric(*id, i64::from(*p));
                }
                *p = 0;
            }
        }
        if self.pending_in_flight != 0 {
            if let Some(id) = self.in_flight {
                host::increment_metric(id, self.pending_in_flight);
            }
            self.pending_in_flight = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_are_prometheus_friendly() {
        assert_eq!(
            super::metric_name("fusewire", "orders/GET:é", "success"),
            "fusewire.orders_GET__.success"
        );
    }

    /// The cap is the VM's, whatever root asks (found by review: each reload made a
    /// root with a fresh count, and Envoy's stats grew by `max_keys + 1` key names
    /// per policy per reload).
    #[test]
    fn the_stats_cap_holds_for_the_vm() {
        use super::own_stats;
        assert!(own_stats("p", "p/a", 2));
        assert!(own_stats("p", "p/b", 2));
        assert!(!own_stats("p", "p/c", 2), "past the cap");
        assert!(own_stats("p", "p/a", 2), "named already");
        assert!(!own_stats("p", "p/d", 2), "a new root asks: still past it");
        assert!(own_stats("q", "q/a", 2), "per policy");
        assert!(own_stats("p", "p/c", 3), "a reload that raises the cap");
    }
}
