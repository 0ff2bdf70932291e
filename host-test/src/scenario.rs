//! Scenario files (TOML): a plugin, routes and clusters, traffic and upstream
//! behaviour in phases — and the runner that plays them through a [`Harness`].

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context as _};
use serde::{Deserialize, Serialize};

use crate::clock::{ClockMode, Rng};
use crate::harness::{Harness, HarnessConfig, Reload};
use crate::report::{Report, ReportBuilder};
use crate::shared::CasMode;
use crate::types::{ClusterConfig, PluginConfig, Request, ResetReason, RouteConfig, UpstreamReply};
use crate::vm::WasmModule;

/// A scenario file. Every field is documented in README.md.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Name shown in reports.
    #[serde(default = "default_name")]
    pub name: String,
    /// The .wasm module (relative to the scenario file); the CLI's `--module` overrides.
    #[serde(default)]
    pub module: Option<String>,
    /// RNG seed: arrivals, upstream behaviour, worker choice, WASI random_get.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Seconds of traffic.
    pub duration_s: u64,
    /// Extra seconds after the traffic stops to let in-flight requests finish.
    #[serde(default = "default_drain")]
    pub drain_s: u64,
    /// `virtual` (default, deterministic) or `real`.
    #[serde(default)]
    pub clock: ClockMode,
    /// Envoy worker threads.
    #[serde(default = "default_workers")]
    pub workers: usize,
    /// `envoy` (default) or `kong` shared-data CAS rules.
    #[serde(default)]
    pub cas_mode: CasMode,
    /// The wasm filter config.
    #[serde(default)]
    pub plugin: ScenarioPlugin,
    /// Routes (default: "/" → "backend", 15 s timeout).
    #[serde(default = "default_routes")]
    pub routes: Vec<RouteConfig>,
    /// Clusters (default: "backend").
    #[serde(default = "default_clusters")]
    pub clusters: Vec<ClusterConfig>,
    /// The traffic.
    pub traffic: Traffic,
    /// Upstream behaviour phases, by start time (the first must start at 0).
    pub upstream: Vec<UpstreamPhase>,
    /// Plugin configuration changes during the run, as Envoy applies a new listener
    /// config: `{ at_s, configuration }` or `{ at_s, configuration_file }`.
    #[serde(default)]
    pub reloads: Vec<ScenarioReload>,
}

/// A plugin configuration change at second `at_s` (the rest of `plugin` stays).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioReload {
    /// Second of the run (whole seconds, below `duration_s`).
    pub at_s: u64,
    /// The new plugin configuration.
    #[serde(default)]
    pub configuration: String,
    /// Read `configuration` from this file (relative to the scenario file).
    #[serde(default)]
    pub configuration_file: Option<String>,
}

fn default_name() -> String {
    "scenario".into()
}
fn default_seed() -> u64 {
    1
}
fn default_drain() -> u64 {
    30
}
fn default_workers() -> usize {
    2
}
fn default_routes() -> Vec<RouteConfig> {
    vec![RouteConfig::default()]
}
fn default_clusters() -> Vec<ClusterConfig> {
    vec![ClusterConfig::default()]
}

/// Plugin section: [`PluginConfig`] plus `configuration_file`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioPlugin {
    /// Plugin fields (name, root_id, vm_id, configuration, failure_policy, ...).
    #[serde(flatten)]
    pub config: PluginConfig,
    /// Read `configuration` from this file (relative to the scenario file).
    #[serde(default)]
    pub configuration_file: Option<String>,
}

/// Traffic: an open model (`rate_per_s`) or a closed model (`concurrency` clients).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Traffic {
    /// Open model: arrivals per second (ignored when `concurrency` > 0).
    #[serde(default)]
    pub rate_per_s: f64,
    /// Rate changes over time: `{ from_s, rate_per_s }`, sorted by `from_s`.
    #[serde(default)]
    pub rate_phases: Vec<RatePhase>,
    /// `uniform` (evenly spaced, default) or `poisson` arrivals.
    #[serde(default)]
    pub arrival: Arrival,
    /// Closed model: this many clients, each sending its next request `think_ms`
    /// after its previous one finished. 0 = open model.
    #[serde(default)]
    pub concurrency: usize,
    /// Closed model think time.
    #[serde(default)]
    pub think_ms: u64,
    /// Paths with weights (default: "/" weight 1).
    #[serde(default = "default_paths")]
    pub paths: Vec<Weighted>,
    /// Methods with weights (default: GET).
    #[serde(default = "default_methods")]
    pub methods: Vec<Weighted>,
    /// Headers added to every request.
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// Headers with a value drawn per request: `{ name, values = [{ value, weight }] }`
    /// (tenants, users: keys that vary from request to request).
    #[serde(default)]
    pub header_choices: Vec<HeaderChoice>,
    /// Clients reset requests without a response after this long (0 = never).
    #[serde(default)]
    pub client_timeout_ms: u64,
    /// `round_robin` (default) or `random` worker choice per request.
    #[serde(default)]
    pub workers: WorkerChoice,
}

fn default_paths() -> Vec<Weighted> {
    vec![Weighted {
        value: "/".into(),
        weight: 1.0,
    }]
}
fn default_methods() -> Vec<Weighted> {
    vec![Weighted {
        value: "GET".into(),
        weight: 1.0,
    }]
}

/// A request header whose value is drawn per request.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderChoice {
    /// Header name (lower case).
    pub name: String,
    /// Values with weights.
    pub values: Vec<Weighted>,
}

/// A rate change.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RatePhase {
    /// Start second.
    pub from_s: f64,
    /// Arrivals per second from then on.
    pub rate_per_s: f64,
}

/// Arrival process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arrival {
    /// Evenly spaced.
    #[default]
    Uniform,
    /// Exponential gaps.
    Poisson,
}

/// Worker choice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerChoice {
    /// 0, 1, 2, ... in turn.
    #[default]
    RoundRobin,
    /// Seeded random.
    Random,
}

/// A weighted choice.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Weighted {
    /// The value (a path or a method).
    pub value: String,
    /// Relative weight.
    #[serde(default = "one")]
    pub weight: f64,
}
fn one() -> f64 {
    1.0
}

/// Upstream behaviour from `from_s` until the next phase.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamPhase {
    /// Start second.
    pub from_s: f64,
    /// Label shown on the timeline.
    #[serde(default)]
    pub label: String,
    /// The cluster whose requests this phase answers: a cluster with phases of its own
    /// follows them; every other cluster follows the phases without `cluster`.
    #[serde(default)]
    pub cluster: Option<String>,
    /// Status mix: status code (as a string key) → weight, e.g. `{ "200" = 95, "503" = 5 }`.
    #[serde(default = "default_status")]
    pub status: BTreeMap<String, f64>,
    /// Latency distribution.
    #[serde(default)]
    pub latency: Latency,
    /// Fraction of requests the upstream resets (router 503, flag UR).
    #[serde(default)]
    pub reset_ratio: f64,
    /// What kind of reset (`remote_reset`, `connection_failure`,
    /// `connection_termination`, `overflow`, `no_healthy_upstream`).
    #[serde(default)]
    pub reset_reason: ResetReason,
    /// Fraction of requests the upstream never answers (route timeout 504 / client reset).
    #[serde(default)]
    pub hang_ratio: f64,
    /// Headers on every response, e.g. `[["content-type", "application/grpc"]]`.
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// Trailers on every response, e.g. `[["grpc-status", "14"]]`.
    #[serde(default)]
    pub trailers: Vec<(String, String)>,
    /// Response body.
    #[serde(default)]
    pub body: String,
}

fn default_status() -> BTreeMap<String, f64> {
    BTreeMap::from([("200".to_string(), 1.0)])
}

/// Latency distribution in milliseconds.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "dist", rename_all = "lowercase", deny_unknown_fields)]
pub enum Latency {
    /// Always `ms`.
    Fixed {
        /// Milliseconds.
        ms: f64,
    },
    /// Uniform in [min_ms, max_ms].
    Uniform {
        /// Lower bound.
        min_ms: f64,
        /// Upper bound.
        max_ms: f64,
    },
    /// Normal, clamped at 0.
    Normal {
        /// Mean.
        mean_ms: f64,
        /// Standard deviation.
        stddev_ms: f64,
    },
    /// Exponential with this mean.
    Exponential {
        /// Mean.
        mean_ms: f64,
    },
    /// Log-normal with this median and σ (of the log): heavy tail.
    Lognormal {
        /// Median.
        median_ms: f64,
        /// Sigma of ln(latency).
        sigma: f64,
    },
}

impl Default for Latency {
    fn default() -> Self {
        Latency::Fixed { ms: 10.0 }
    }
}

impl Latency {
    fn sample_ns(&self, rng: &mut Rng) -> u64 {
        let ms = match *self {
            Latency::Fixed { ms } => ms,
            Latency::Uniform { min_ms, max_ms } => min_ms + (max_ms - min_ms) * rng.f64(),
            Latency::Normal { mean_ms, stddev_ms } => mean_ms + stddev_ms * gaussian(rng),
            Latency::Exponential { mean_ms } => -mean_ms * (1.0 - rng.f64()).ln(),
            Latency::Lognormal { median_ms, sigma } => median_ms * (sigma * gaussian(rng)).exp(),
        };
        (ms.max(0.0) * 1e6) as u64
    }
}

fn gaussian(rng: &mut Rng) -> f64 {
    let u1 = 1.0 - rng.f64();
    let u2 = rng.f64();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

fn pick<'a>(items: &'a [Weighted], rng: &mut Rng) -> &'a str {
    let total: f64 = items.iter().map(|w| w.weight).sum();
    let mut x = rng.f64() * total;
    for w in items {
        if x < w.weight {
            return &w.value;
        }
        x -= w.weight;
    }
    items.last().map(|w| w.value.as_str()).unwrap_or("/")
}

impl Scenario {
    /// Parses a scenario from TOML text; `configuration_file`s are read relative to
    /// the current directory (as `module` is).
    pub fn from_toml(text: &str) -> anyhow::Result<Self> {
        Self::parse(text, Path::new(""))
    }

    /// Reads a scenario file; `module` and `configuration_file` are resolved relative
    /// to it.
    pub fn from_file(path: impl AsRef<Path>) -> anyhow::Result<Self> {
        let path = path.as_ref();
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Self::parse(&text, path.parent().unwrap_or(Path::new("")))
            .with_context(|| format!("in {}", path.display()))
    }

    /// Parses and checks `text`; relative paths are resolved against `dir`.
    fn parse(text: &str, dir: &Path) -> anyhow::Result<Self> {
        let mut s: Scenario = toml::from_str(text).context("parsing scenario TOML")?;
        s.validate()?;
        if let Some(m) = &s.module {
            s.module = Some(dir.join(m).display().to_string());
        }
        if let Some(f) = s.plugin.configuration_file.take() {
            let p = dir.join(&f);
            s.plugin.config.configuration = std::fs::read_to_string(&p)
                .with_context(|| format!("plugin.configuration_file: reading {}", p.display()))?;
        }
        for (i, r) in s.reloads.iter_mut().enumerate() {
            if let Some(f) = r.configuration_file.take() {
                let p = dir.join(&f);
                r.configuration = std::fs::read_to_string(&p).with_context(|| {
                    format!("reloads[{i}].configuration_file: reading {}", p.display())
                })?;
            }
        }
        Ok(s)
    }

    /// Checks every field; errors name the field and the reason.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.duration_s == 0 {
            bail!("duration_s: must be at least 1");
        }
        if self.workers == 0 || self.workers > 256 {
            bail!("workers: must be 1..=256, got {}", self.workers);
        }
        let t = &self.traffic;
        if t.concurrency == 0
            && t.rate_per_s <= 0.0
            && t.rate_phases.iter().all(|p| p.rate_per_s <= 0.0)
        {
            bail!("traffic: set rate_per_s > 0 (open model) or concurrency > 0 (closed model)");
        }
        if !(t.rate_per_s.is_finite() && t.rate_per_s >= 0.0 && t.rate_per_s <= 1e6) {
            bail!("traffic.rate_per_s: must be 0..=1e6");
        }
        for (i, p) in t.rate_phases.iter().enumerate() {
            if !(p.rate_per_s >= 0.0 && p.rate_per_s <= 1e6 && p.from_s >= 0.0) {
                bail!("traffic.rate_phases[{i}]: from_s >= 0 and 0 <= rate_per_s <= 1e6 required");
            }
        }
        if t.paths.is_empty()
            || t.paths.iter().any(|w| w.weight.is_nan() || w.weight < 0.0)
            || t.paths.iter().all(|w| w.weight == 0.0)
        {
            bail!("traffic.paths: need at least one path with a positive weight");
        }
        if t.methods.is_empty()
            || t.methods
                .iter()
                .all(|w| w.weight.is_nan() || w.weight <= 0.0)
        {
            bail!("traffic.methods: need at least one method with a positive weight");
        }
        for (i, h) in t.header_choices.iter().enumerate() {
            if h.name.is_empty() || h.name != h.name.to_ascii_lowercase() {
                bail!("traffic.header_choices[{i}].name: must be a lower-case header name");
            }
            if h.values.iter().any(|w| w.weight.is_nan() || w.weight < 0.0)
                || h.values.iter().all(|w| w.weight == 0.0)
            {
                bail!("traffic.header_choices[{i}].values: need a value with a positive weight");
            }
        }
        if self.upstream.is_empty() {
            bail!("upstream: at least one phase is required");
        }
        // Each cluster's phases (and the general ones) start at 0 and increase.
        let mut last: BTreeMap<Option<&str>, f64> = BTreeMap::new();
        for (i, p) in self.upstream.iter().enumerate() {
            let group = p.cluster.as_deref();
            if let Some(c) = group {
                if !self.clusters.iter().any(|k| k.name == c) {
                    bail!("upstream[{i}].cluster: no cluster named {c:?}");
                }
            }
            match last.insert(group, p.from_s) {
                None if p.from_s != 0.0 => bail!(
                    "upstream[{i}].from_s: the first phase{} must start at 0",
                    group.map_or(String::new(), |c| format!(" of cluster {c:?}"))
                ),
                Some(before) if p.from_s <= before => {
                    bail!("upstream[{i}].from_s: phases must be in increasing from_s order")
                }
                _ => {}
            }
            if !(0.0..=1.0).contains(&p.reset_ratio)
                || !(0.0..=1.0).contains(&p.hang_ratio)
                || p.reset_ratio + p.hang_ratio > 1.0
            {
                bail!("upstream[{i}]: reset_ratio and hang_ratio must be in 0..=1 and sum to at most 1");
            }
            for (k, w) in &p.status {
                let code: u16 = k.parse().map_err(|_| {
                    anyhow::anyhow!("upstream[{i}].status: key {k:?} is not an HTTP status")
                })?;
                if !(100..=599).contains(&code) || w.is_nan() || *w < 0.0 {
                    bail!("upstream[{i}].status.{k}: status must be 100..=599 and weight >= 0");
                }
            }
            if p.reset_ratio + p.hang_ratio < 1.0 && p.status.values().all(|w| *w == 0.0) {
                bail!("upstream[{i}].status: needs a positive weight");
            }
        }
        if self.plugin.configuration_file.is_some() && !self.plugin.config.configuration.is_empty()
        {
            bail!("plugin.configuration_file: set together with plugin.configuration; give one");
        }
        for (i, r) in self.reloads.iter().enumerate() {
            if r.configuration_file.is_some() && !r.configuration.is_empty() {
                bail!(
                    "reloads[{i}].configuration_file: set together with reloads[{i}].configuration; give one"
                );
            }
            if r.at_s >= self.duration_s || (i > 0 && r.at_s <= self.reloads[i - 1].at_s) {
                bail!(
                    "reloads[{i}].at_s: must be below duration_s and increasing, got {}",
                    r.at_s
                );
            }
        }
        for r in &self.routes {
            if !self.clusters.iter().any(|c| c.name == r.cluster) {
                bail!(
                    "routes: route {:?} names unknown cluster {:?}",
                    r.name,
                    r.cluster
                );
            }
            if !last.contains_key(&None) && !last.contains_key(&Some(r.cluster.as_str())) {
                bail!(
                    "upstream: cluster {:?} (route {:?}) has no phase: add phases without `cluster`",
                    r.cluster,
                    r.name
                );
            }
        }
        Ok(())
    }

    /// The phase answering a request to `cluster` at `t_s`: the cluster's own
    /// phases if it has any, else the general ones.
    fn phase_at(&self, t_s: f64, cluster: &str) -> &UpstreamPhase {
        let own = self
            .upstream
            .iter()
            .any(|p| p.cluster.as_deref() == Some(cluster));
        let group = |p: &&UpstreamPhase| match &p.cluster {
            Some(c) => own && c == cluster,
            None => !own,
        };
        let mut phases = self.upstream.iter().filter(group);
        let first = phases.clone().next().unwrap_or(&self.upstream[0]);
        phases.rfind(|p| p.from_s <= t_s).unwrap_or(first)
    }

    /// The cluster a request for `path` goes to (first route whose prefix matches).
    fn cluster_of(&self, path: &str) -> &str {
        let route = self.routes.iter().find(|r| path.starts_with(&r.prefix));
        route.map_or("", |r| r.cluster.as_str())
    }

    fn rate_at(&self, t_s: f64) -> f64 {
        self.traffic
            .rate_phases
            .iter()
            .rev()
            .find(|p| p.from_s <= t_s)
            .map(|p| p.rate_per_s)
            .unwrap_or(self.traffic.rate_per_s)
    }

    /// The harness config this scenario describes.
    pub fn harness_config(&self) -> HarnessConfig {
        HarnessConfig {
            workers: self.workers,
            clock: self.clock,
            cas_mode: self.cas_mode,
            plugin: self.plugin.config.clone(),
            routes: self.routes.clone(),
            clusters: self.clusters.clone(),
            seed: self.seed,
            log_level: 2,
            records: crate::types::RecordDetail::Summary,
            ..HarnessConfig::default()
        }
    }

    /// Plays the scenario with `module` and returns the report.
    pub fn run(&self, module: &WasmModule) -> anyhow::Result<Report> {
        self.run_with_log_echo(module, None)
    }

    /// As [`Scenario::run`], echoing guest logs at or above `echo` (0..=5) to stderr.
    pub fn run_with_log_echo(
        &self,
        module: &WasmModule,
        echo: Option<u8>,
    ) -> anyhow::Result<Report> {
        let process = crate::env::Process::new();
        process.set_log_echo(echo);
        let mut h = Harness::with_process(process, module, self.harness_config())?;
        let mut runner = Runner {
            s: self,
            rng: Rng::new(self.seed),
            rr: 0,
        };
        let mut report = ReportBuilder::new(self, module.name());
        let end = self.duration_s * 1_000_000_000;
        let closed = self.traffic.concurrency > 0;
        let mut next_arrival = 0u64;
        if closed {
            for _ in 0..self.traffic.concurrency {
                runner.submit(&mut h, 0);
            }
        }
        let mut reloads = self.reloads.iter().peekable();
        for sec in 0..self.duration_s {
            if let Some(r) = reloads.next_if(|r| r.at_s == sec) {
                // At the start of second `sec` (the run is there): the new config as
                // Envoy applies it; a rejected one leaves the old one running.
                let plugin = PluginConfig {
                    configuration: r.configuration.clone(),
                    ..self.plugin.config.clone()
                };
                let result = match h.reload(module, plugin) {
                    Ok(Reload::ReusedVms) => "applied (same VMs, a new root context)".to_string(),
                    Ok(Reload::SamePlugin) => "unchanged (the same plugin config)".to_string(),
                    Ok(Reload::FreshVms) => "applied (fresh VMs)".to_string(),
                    Err(e) => format!("rejected, the old config keeps running: {e:#}"),
                };
                report.reload(sec, result);
            }
            let sec_end = (sec + 1) * 1_000_000_000;
            if !closed {
                while next_arrival < sec_end && next_arrival < end {
                    runner.submit(&mut h, next_arrival);
                    next_arrival = runner.next_gap(next_arrival);
                }
            }
            self.run_window(
                &mut h,
                &mut runner,
                &mut report,
                sec_end,
                closed && sec_end <= end,
            )?;
            report.second_done(&h);
        }
        let drain_end = end + self.drain_s * 1_000_000_000;
        let mut t = end;
        while h.in_flight() > 0 && t < drain_end {
            t += 1_000_000_000;
            self.run_window(&mut h, &mut runner, &mut report, t, false)?;
        }
        // One tick period more: the filter hands its batched counters and gauges to
        // the host on its tick, and the report reads them (found by review: the last
        // requests' counts were missing, `in_flight` ended at 1).
        t += self.max_tick_ms() * 1_000_000 + 1;
        self.run_window(&mut h, &mut runner, &mut report, t, false)?;
        for r in h.take_records() {
            report.record(&r);
        }
        Ok(report.finish(&h))
    }

    /// The longest VM timer period any of the scenario's plugin configurations asks
    /// for (`tick_ms`, 100 ms by default; at most a minute).
    fn max_tick_ms(&self) -> u64 {
        let tick = |json: &str| {
            serde_json::from_str::<serde_json::Value>(json)
                .ok()
                .and_then(|v| v.get("tick_ms")?.as_u64())
                .unwrap_or(100)
                .min(60_000)
        };
        self.reloads
            .iter()
            .map(|r| tick(&r.configuration))
            .fold(tick(&self.plugin.config.configuration), u64::max)
    }

    fn run_window(
        &self,
        h: &mut Harness,
        runner: &mut Runner,
        report: &mut ReportBuilder,
        until: u64,
        refill: bool,
    ) -> anyhow::Result<()> {
        let end = self.duration_s * 1_000_000_000;
        while h.step(until) {
            if refill || self.traffic.concurrency > 0 {
                for r in h.take_records() {
                    let next = r.end_ns + self.traffic.think_ms * 1_000_000;
                    report.record(&r);
                    if next < end {
                        runner.submit(h, next);
                    }
                }
            }
        }
        h.run_until(until);
        for r in h.take_records() {
            report.record(&r);
        }
        Ok(())
    }
}

struct Runner<'a> {
    s: &'a Scenario,
    rng: Rng,
    rr: usize,
}

impl Runner<'_> {
    fn next_gap(&mut self, t: u64) -> u64 {
        let rate = self.s.rate_at(t as f64 / 1e9);
        if rate <= 0.0 {
            // jump to the next rate phase that has traffic
            let next = self
                .s
                .traffic
                .rate_phases
                .iter()
                .find(|p| p.from_s * 1e9 > t as f64 && p.rate_per_s > 0.0);
            return next.map(|p| (p.from_s * 1e9) as u64).unwrap_or(u64::MAX);
        }
        let gap = match self.s.traffic.arrival {
            Arrival::Uniform => 1e9 / rate,
            Arrival::Poisson => -(1.0 - self.rng.f64()).ln() * 1e9 / rate,
        };
        t + (gap as u64).max(1)
    }

    fn submit(&mut self, h: &mut Harness, at: u64) {
        let (req, reply, worker) = self.draw(at);
        h.submit_at(at, worker, req, reply);
    }

    /// The request arriving at `at`, the upstream's reply to it, and its worker.
    fn draw(&mut self, at: u64) -> (Request, UpstreamReply, usize) {
        let t = &self.s.traffic;
        let path = pick(&t.paths, &mut self.rng).to_string();
        let method = pick(&t.methods, &mut self.rng).to_string();
        let mut req = Request::get(&path).method(&method);
        for (k, v) in &t.headers {
            req = req.header(k, v);
        }
        for h in &t.header_choices {
            req = req.header(&h.name, pick(&h.values, &mut self.rng));
        }
        if t.client_timeout_ms > 0 {
            req = req.client_timeout_ms(t.client_timeout_ms);
        }
        let phase = self.s.phase_at(at as f64 / 1e9, self.s.cluster_of(&path));
        let latency = phase.latency.sample_ns(&mut self.rng);
        let u = self.rng.f64();
        let reply = if u < phase.reset_ratio {
            UpstreamReply::Reset {
                latency_ns: latency,
                reason: phase.reset_reason,
            }
        } else if u < phase.reset_ratio + phase.hang_ratio {
            UpstreamReply::Hang
        } else {
            let total: f64 = phase.status.values().sum();
            let mut x = self.rng.f64() * total;
            let mut status = 200;
            for (k, w) in &phase.status {
                status = k.parse().unwrap_or(200);
                if x < *w {
                    break;
                }
                x -= w;
            }
            let mut reply = UpstreamReply::status(status)
                .after_ns(latency)
                .with_body(&phase.body);
            for (k, v) in &phase.headers {
                reply = reply.with_header(k, v);
            }
            for (k, v) in &phase.trailers {
                reply = reply.with_trailer(k, v);
            }
            reply
        };
        let worker = match t.workers {
            WorkerChoice::RoundRobin => {
                self.rr += 1;
                (self.rr - 1) % self.s.workers
            }
            WorkerChoice::Random => (self.rng.next_u64() % self.s.workers as u64) as usize,
        };
        (req, reply, worker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_SERVICES: &str = r#"
duration_s = 10
[[routes]]
name = "pay"
prefix = "/pay"
cluster = "payments"
[[routes]]
name = "rest"
prefix = "/"
cluster = "backend"
[[clusters]]
name = "payments"
[[clusters]]
name = "backend"
[traffic]
rate_per_s = 10
paths = [{ value = "/pay/charge" }, { value = "/catalog" }]
header_choices = [{ name = "x-tenant", values = [{ value = "acme", weight = 3 }, { value = "zeta" }] }]
[[upstream]]
from_s = 0
[[upstream]]
from_s = 0
label = "payments ok"
[[upstream]]
from_s = 5
label = "payments down"
status = { "503" = 1 }
"#;

    /// The scenario with the payments phases on `cluster`, the first from `first_s`.
    fn two_services(cluster: &str, first_s: u32) -> String {
        let on = format!("cluster = \"{cluster}\"\nlabel = \"payments");
        TWO_SERVICES.replace("label = \"payments", &on).replace(
            "from_s = 0\ncluster",
            &format!("from_s = {first_s}\ncluster"),
        )
    }

    fn status(r: &UpstreamReply) -> u16 {
        match r {
            UpstreamReply::Response { status, .. } => *status,
            _ => 0,
        }
    }

    /// A cluster with phases of its own follows them, the others the general ones;
    /// a header choice draws its values by weight (found by review: a scenario could
    /// not fail one upstream while others stayed healthy, nor vary a key header).
    #[test]
    fn a_cluster_follows_its_own_phases_and_header_choices_vary_per_request() {
        let s = Scenario::from_toml(&two_services("payments", 0)).expect("valid");
        let mut r = Runner {
            s: &s,
            rng: Rng::new(3),
            rr: 0,
        };
        let (mut acme, mut n) = (0, 0);
        for i in 0..2_000u64 {
            let at = i * 5_000_000; // 0 .. 10 s
            let (req, reply, _) = r.draw(at);
            let failing = req.path.starts_with("/pay") && at >= 5_000_000_000;
            assert_eq!(
                status(&reply),
                if failing { 503 } else { 200 },
                "{} at {at}",
                req.path
            );
            let tenant = req
                .headers
                .iter()
                .find(|(k, _)| k == "x-tenant")
                .map(|(_, v)| v.as_slice());
            acme += usize::from(tenant == Some(b"acme".as_slice()));
            n += usize::from(tenant.is_some());
        }
        assert_eq!(n, 2_000);
        assert!(
            (1_350..1_650).contains(&acme),
            "3:1 weights, got {acme} acme of 2000"
        );
    }

    #[test]
    fn cluster_phases_are_checked() {
        let err = |t: String| format!("{:#}", Scenario::from_toml(&t).expect_err("must fail"));
        let e = err(two_services("nope", 0));
        assert!(
            e.contains("upstream[1].cluster: no cluster named \"nope\""),
            "{e}"
        );
        let e = err(two_services("payments", 1));
        assert!(
            e.contains(
                "upstream[1].from_s: the first phase of cluster \"payments\" must start at 0"
            ),
            "{e}"
        );
        let no_general = two_services("payments", 0).replacen("[[upstream]]\nfrom_s = 0\n", "", 1);
        let e = err(no_general);
        assert!(
            e.contains("cluster \"backend\" (route \"rest\") has no phase"),
            "{e}"
        );
    }
}
