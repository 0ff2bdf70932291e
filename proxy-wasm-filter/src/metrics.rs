//! The filter's metrics, defined once per root context and key (never per request).
//!
//! Names (`<prefix>` defaults to `fusewire`; `<key>` is the policy key with every
//! character outside `[A-Za-z0-9_]` replaced by `_`):
//!
//! | name | type | meaning |
//! | --- | --- | --- |
//! | `<prefix>.<key>.success` | counter | upstream success |
//! | `<prefix>.<key>.failure` | counter | upstream failure (status, gRPC, flags, reset) |
//! | `<prefix>.<key>.timeout` | counter | tick timeout or Envoy `UT` |
//! | `<prefix>.<key>.bad_request` | counter | caller's fault (default 4xx) |
//! | `<prefix>.<key>.short_circuited` | counter | rejected by the breaker |
//! | `<prefix>.<key>.semaphore_rejected` | counter | rejected by the bulkhead |
//! | `<prefix>.<key>.fallback_success` | counter | fallback local reply sent |
//! | `<prefix>.<key>.cancelled` | counter | stream ended with no verdict |
//! | `<prefix>.<key>.opened` / `half_opened` / `closed` | counter | transitions |
//! | `<prefix>.<key>.breaker_state` | gauge | 0 closed, 1 open, 2 half-open |
//! | `<prefix>.<key>.in_flight` | gauge | admitted calls in flight (all workers) |
//! | `<prefix>.<key>.latency_ms` | histogram | upstream latency of admitted calls |
//!
//! In Envoy they appear as `wasmcustom.<name>` in `/stats` and as the sanitised name
//! (dots → underscores) in `/stats/prometheus`.

use crate::host;

/// Counter kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Counter {
    /// success
    Success,
    /// failure
    Failure,
    /// timeout
    Timeout,
    /// bad_request
    BadRequest,
    /// short_circuited
    ShortCircuited,
    /// semaphore_rejected
    SemaphoreRejected,
    /// fallback_success
    FallbackSuccess,
    /// cancelled
    Cancelled,
    /// opened
    Opened,
    /// half_opened
    HalfOpened,
    /// closed
    Closed,
}

/// Suffixes, indexed by [`Counter`].
pub const COUNTER_NAMES: [&str; 11] = [
    "success",
    "failure",
    "timeout",
    "bad_request",
    "short_circuited",
    "semaphore_rejected",
    "fallback_success",
    "cancelled",
    "opened",
    "half_opened",
    "closed",
];

/// Metric ids of one key (None where the host refused a definition), and counts not
/// yet handed to the host: counters and the in-flight gauge are batched per VM and
/// flushed on every tick (one host call per non-zero counter instead of one per
/// event; Envoy's own stats flush is seconds apart anyway).
#[derive(Clone, Debug, Default)]
pub struct KeyMetrics {
    counters: [Option<u32>; 11],
    pending: [u32; 11],
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
    /// Defines every metric of `key`.
    pub fn define(prefix: &str, key: &str) -> Self {
        let mut m = KeyMetrics::default();
        for (slot, name) in m.counters.iter_mut().zip(COUNTER_NAMES) {
            *slot = host::define_metric(host::COUNTER, &metric_name(prefix, key, name));
        }
        m.state = host::define_metric(host::GAUGE, &metric_name(prefix, key, "breaker_state"));
        m.in_flight = host::define_metric(host::GAUGE, &metric_name(prefix, key, "in_flight"));
        m.latency = host::define_metric(host::HISTOGRAM, &metric_name(prefix, key, "latency_ms"));
        m
    }

    /// Adds one to a counter (handed to the host on the next [`KeyMetrics::flush`]).
    #[inline]
    pub fn count(&mut self, c: Counter) {
        if let Some(p) = self.pending.get_mut(c as usize) {
            *p = p.saturating_add(1);
        }
    }

    /// Hands the batched counts to the host.
    pub fn flush(&mut self) {
        for (p, id) in self.pending.iter_mut().zip(self.counters.iter()) {
            if *p > 0 {
                if let Some(id) = id {
                    host::increment_metric(*id, *p as i64);
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

    /// Sets the breaker-state gauge.
    pub fn state(&self, phase: u8) {
        if let Some(id) = self.state {
            host::record_metric(id, phase as u64);
        }
    }

    /// Moves the process-wide in-flight gauge by ±1 (batched).
    pub fn in_flight(&mut self, delta: i64) {
        self.pending_in_flight += delta;
    }

    /// Sets the in-flight gauge to the process-wide count read from the slot ledger
    /// (batched ±1 moves are subsumed by it).
    pub fn set_in_flight(&mut self, n: u64) {
        self.pending_in_flight = 0;
        if let Some(id) = self.in_flight {
            host::record_metric(id, n);
        }
    }

    /// Records a latency sample.
    pub fn latency(&self, ms: u64) {
        if let Some(id) = self.latency {
            host::record_metric(id, ms);
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
}
