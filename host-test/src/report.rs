//! Scenario reports: per-second outcome counts, metric series, latency percentiles,
//! as JSON and as a self-contained HTML timeline.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::harness::Harness;
use crate::scenario::Scenario;
use crate::stats::MetricValue;
use crate::types::{LocalReply, LocalReplySource, Outcome, StreamRecord};

/// The header a filter sets on its local replies to say what they are, e.g.
/// `x-fusewire: short-circuited | rejected | timeout | fallback`.
pub const TAG_HEADER: &str = "x-fusewire";

/// Outcome classes counted in reports (exclusive: each stream has exactly one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Upstream answered < 500 (gRPC: a `grpc-status` Envoy maps below 500).
    UpstreamOk,
    /// Upstream answered >= 500 (or such a `grpc-status`), reset or timed out (and the
    /// filter let that through).
    UpstreamFailed,
    /// The filter answered locally with an error (status >= 400 or a non-zero
    /// grpc-status, tag not "fallback").
    RejectedLocally,
    /// The filter answered locally with a substitute (status < 400 or tag contains
    /// "fallback").
    FallbackServed,
    /// VM failed, FAIL_CLOSED 503.
    FailClosed,
    /// The client gave up (reset) before a response.
    ClientReset,
    /// The filter closed the stream.
    ClosedByFilter,
}

impl Class {
    /// Every class, in report order.
    pub const ALL: [Class; 7] = [
        Class::UpstreamOk,
        Class::UpstreamFailed,
        Class::RejectedLocally,
        Class::FallbackServed,
        Class::FailClosed,
        Class::ClientReset,
        Class::ClosedByFilter,
    ];

    /// snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            Class::UpstreamOk => "upstream_ok",
            Class::UpstreamFailed => "upstream_failed",
            Class::RejectedLocally => "rejected_locally",
            Class::FallbackServed => "fallback_served",
            Class::FailClosed => "fail_closed",
            Class::ClientReset => "client_reset",
            Class::ClosedByFilter => "closed_by_filter",
        }
    }
}

/// The local-reply tag (`x-fusewire` header) the client saw, if any.
pub fn local_tag(r: &StreamRecord) -> Option<String> {
    r.response_header(TAG_HEADER).or_else(|| {
        r.local_reply
            .as_ref()?
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(TAG_HEADER))
            .map(|(_, v)| v.clone())
    })
}

/// Classifies one stream.
pub fn classify(r: &StreamRecord) -> Class {
    match r.outcome {
        Outcome::UpstreamOk => Class::UpstreamOk,
        // A stream nothing answered: counted with the upstream failures.
        Outcome::UpstreamFailed | Outcome::IdleTimeout | Outcome::ResetAfterHeaders => {
            Class::UpstreamFailed
        }
        Outcome::FailClosed => Class::FailClosed,
        Outcome::DownstreamReset => Class::ClientReset,
        Outcome::ClosedByFilter => Class::ClosedByFilter,
        Outcome::LocalReply => {
            let status = r.response_status.unwrap_or(0);
            let grpc_error = r.response_header("grpc-status").is_some_and(|g| g != "0");
            let tag = local_tag(r).unwrap_or_default();
            if tag.contains("fallback") || (status < 400 && !grpc_error) {
                Class::FallbackServed
            } else {
                Class::RejectedLocally
            }
        }
    }
}

/// Latency percentiles in milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// Mean.
    pub mean_ms: f64,
    /// p50.
    pub p50_ms: f64,
    /// p90.
    pub p90_ms: f64,
    /// p99.
    pub p99_ms: f64,
    /// p99.9.
    pub p999_ms: f64,
    /// Max.
    pub max_ms: f64,
}

fn percentiles(v: &mut [u64]) -> Percentiles {
    if v.is_empty() {
        return Percentiles::default();
    }
    v.sort_unstable();
    let at = |q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1] as f64 / 1e6;
    Percentiles {
        count: v.len() as u64,
        mean_ms: v.iter().map(|x| *x as f64).sum::<f64>() / v.len() as f64 / 1e6,
        p50_ms: at(0.5),
        p90_ms: at(0.9),
        p99_ms: at(0.99),
        p999_ms: at(0.999),
        max_ms: *v.last().unwrap_or(&0) as f64 / 1e6,
    }
}

/// One upstream phase as shown on the timeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseInfo {
    /// Start second.
    pub from_s: f64,
    /// Label (from the scenario, or generated from the status mix).
    pub label: String,
    /// Whether the phase has 5xx, resets or hangs.
    pub degraded: bool,
}

/// A plugin reload during the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReloadInfo {
    /// Second of the run.
    pub at_s: u64,
    /// Applied (how) or rejected (why).
    pub result: String,
}

/// Counts for one second of the timeline (by request start time).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Second {
    /// Second index.
    pub t: u64,
    /// Requests started.
    pub requests: u64,
    /// Requests forwarded upstream (not exclusive with the classes).
    pub sent_upstream: u64,
    /// Count per [`Class`] name.
    pub outcomes: BTreeMap<String, u64>,
    /// Local replies by tag (`x-fusewire` value, `-` when absent).
    pub local_by_tag: BTreeMap<String, u64>,
    /// p50 latency of requests started this second.
    pub p50_ms: f64,
    /// p99 latency of requests started this second.
    pub p99_ms: f64,
}

/// Totals over the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Requests started.
    pub requests: u64,
    /// Requests forwarded upstream.
    pub sent_upstream: u64,
    /// Requests forwarded upstream whose upstream attempt failed (5xx, reset, timeout).
    pub upstream_attempt_failed: u64,
    /// Count per [`Class`] name.
    pub outcomes: BTreeMap<String, u64>,
    /// Filter local replies by status.
    pub local_by_status: BTreeMap<String, u64>,
    /// Filter local replies by `x-fusewire` tag (`-` when absent).
    pub local_by_tag: BTreeMap<String, u64>,
    /// The first filter local reply of each tag (status, headers, body), to see what
    /// clients got.
    #[serde(default)]
    pub local_samples: BTreeMap<String, LocalReply>,
    /// Requests still unfinished after the drain time.
    pub unfinished: u64,
}

/// A scenario run's report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// Module name/path.
    pub module: String,
    /// Seed.
    pub seed: u64,
    /// Clock mode.
    pub clock: String,
    /// Workers.
    pub workers: usize,
    /// Traffic seconds.
    pub duration_s: u64,
    /// Upstream phases by start (a cluster's own phases among them, labelled with it).
    pub phases: Vec<PhaseInfo>,
    /// The scenario's plugin reloads and what became of each.
    #[serde(default)]
    pub reloads: Vec<ReloadInfo>,
    /// Totals.
    pub totals: Totals,
    /// Latency percentiles: `all`, and per class name.
    pub latency: BTreeMap<String, Percentiles>,
    /// One entry per second.
    pub timeline: Vec<Second>,
    /// Metric name → value (counter/gauge value, histogram count) at the end of each second.
    pub metric_series: BTreeMap<String, Vec<u64>>,
    /// Final metric values.
    pub metrics: BTreeMap<String, MetricValue>,
    /// `/stats` text at the end.
    pub stats: String,
    /// Prometheus text at the end.
    pub prometheus: String,
}

/// Accumulates records into a [`Report`].
pub struct ReportBuilder {
    report: Report,
    lat_all: Vec<u64>,
    lat_by_class: BTreeMap<String, Vec<u64>>,
    lat_by_sec: Vec<Vec<u64>>,
    seconds_done: usize,
}

impl ReportBuilder {
    /// A builder for `scenario` run with `module`.
    pub fn new(s: &Scenario, module: &str) -> Self {
        let n = s.duration_s as usize;
        ReportBuilder {
            report: Report {
                scenario: s.name.clone(),
                module: module.rsplit('/').next().unwrap_or(module).to_string(),
                seed: s.seed,
                clock: format!("{:?}", s.clock).to_lowercase(),
                workers: s.workers,
                duration_s: s.duration_s,
                phases: phases_by_start(&s.upstream)
                    .map(|p| PhaseInfo {
                        from_s: p.from_s,
                        label: phase_label(p),
                        degraded: p.reset_ratio > 0.0
                            || p.hang_ratio > 0.0
                            || p.status
                                .iter()
                                .any(|(k, w)| *w > 0.0 && k.as_str() >= "500"),
                    })
                    .collect(),
                reloads: vec![],
                totals: Totals::default(),
                latency: BTreeMap::new(),
                timeline: (0..n as u64)
                    .map(|t| Second {
                        t,
                        ..Default::default()
                    })
                    .collect(),
                metric_series: BTreeMap::new(),
                metrics: BTreeMap::new(),
                stats: String::new(),
                prometheus: String::new(),
            },
            lat_all: vec![],
            lat_by_class: BTreeMap::new(),
            lat_by_sec: vec![vec![]; n],
            seconds_done: 0,
        }
    }

    /// Notes a plugin reload at second `at_s`.
    pub fn reload(&mut self, at_s: u64, result: String) {
        self.report.reloads.push(ReloadInfo { at_s, result });
    }

    /// Adds one finished stream.
    pub fn record(&mut self, r: &StreamRecord) {
        let class = classify(r);
        let t = &mut self.report.totals;
        t.requests += 1;
        *t.outcomes.entry(class.name().into()).or_default() += 1;
        if r.sent_upstream {
            t.sent_upstream += 1;
            if r.upstream_failed() && r.outcome != Outcome::DownstreamReset {
                t.upstream_attempt_failed += 1;
            }
        }
        let is_local = r
            .local_reply
            .as_ref()
            .is_some_and(|l| l.source == LocalReplySource::Filter);
        let tag = local_tag(r).unwrap_or_else(|| "-".into());
        if is_local {
            *t.local_by_status
                .entry(r.response_status.unwrap_or(0).to_string())
                .or_default() += 1;
            *t.local_by_tag.entry(tag.clone()).or_default() += 1;
            if let Some(l) = &r.local_reply {
                t.local_samples
                    .entry(tag.clone())
                    .or_insert_with(|| l.clone());
            }
        }
        let lat = r.latency_ns();
        self.lat_all.push(lat);
        self.lat_by_class
            .entry(class.name().into())
            .or_default()
            .push(lat);
        let sec = (r.start_ns / 1_000_000_000) as usize;
        if let Some(s) = self.report.timeline.get_mut(sec) {
            s.requests += 1;
            s.sent_upstream += r.sent_upstream as u64;
            *s.outcomes.entry(class.name().into()).or_default() += 1;
            if is_local {
                *s.local_by_tag.entry(tag).or_default() += 1;
            }
            self.lat_by_sec[sec].push(lat);
        }
    }

    /// Samples every metric at the end of a second.
    pub fn second_done(&mut self, h: &Harness) {
        for (name, v) in h.process().stats.snapshot() {
            let series = self.report.metric_series.entry(name).or_default();
            series.resize(self.seconds_done, 0);
            series.push(v.scalar());
        }
        self.seconds_done += 1;
    }

    /// Final report.
    pub fn finish(mut self, h: &Harness) -> Report {
        let r = &mut self.report;
        r.totals.unfinished = h.in_flight() as u64;
        for s in r.metric_series.values_mut() {
            let last = s.last().copied().unwrap_or(0);
            s.resize(self.seconds_done, last);
        }
        for (i, s) in r.timeline.iter_mut().enumerate() {
            let p = percentiles(&mut self.lat_by_sec[i]);
            s.p50_ms = p.p50_ms;
            s.p99_ms = p.p99_ms;
        }
        r.latency
            .insert("all".into(), percentiles(&mut self.lat_all));
        for (k, mut v) in self.lat_by_class {
            r.latency.insert(k, percentiles(&mut v));
        }
        r.metrics = h.process().stats.snapshot().into_iter().collect();
        r.stats = h.stats_text();
        r.prometheus = h.prometheus_text();
        self.report
    }
}

/// Every cluster's phases and the general ones on one timeline, by start (stable).
fn phases_by_start(
    phases: &[crate::scenario::UpstreamPhase],
) -> impl Iterator<Item = &crate::scenario::UpstreamPhase> {
    let mut v: Vec<_> = phases.iter().collect();
    v.sort_by(|a, b| a.from_s.total_cmp(&b.from_s));
    v.into_iter()
}

fn phase_label(p: &crate::scenario::UpstreamPhase) -> String {
    match &p.cluster {
        Some(c) => format!("{c}: {}", general_label(p)),
        None => general_label(p),
    }
}

fn general_label(p: &crate::scenario::UpstreamPhase) -> String {
    if !p.label.is_empty() {
        return p.label.clone();
    }
    let total: f64 = p.status.values().sum();
    let mut parts: Vec<String> = p
        .status
        .iter()
        .filter(|(k, _)| !k.starts_with('2'))
        .map(|(k, w)| {
            format!(
                "{:.0}% {k}",
                100.0 * w / total.max(f64::MIN_POSITIVE) * (1.0 - p.reset_ratio - p.hang_ratio)
            )
        })
        .collect();
    if p.reset_ratio > 0.0 {
        parts.push(format!("{:.0}% reset", 100.0 * p.reset_ratio));
    }
    if p.hang_ratio > 0.0 {
        parts.push(format!("{:.0}% hang", 100.0 * p.hang_ratio));
    }
    if parts.is_empty() {
        "healthy".into()
    } else {
        parts.join(", ")
    }
}

impl Report {
    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// A self-contained HTML page (inline SVG, no external assets).
    pub fn to_html(&self) -> String {
        crate::html::render(self)
    }
}
