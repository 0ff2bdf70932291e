//! Throughput benchmark: requests through the harness (real clock, zero-latency
//! upstream) for one or more modules measured in the same run, so a filter's own cost
//! is the difference to a no-op baseline.

use std::time::Instant;

use crate::clock::ClockMode;
use crate::harness::{Harness, HarnessConfig};
use crate::types::{
    ClusterConfig, PluginConfig, RecordDetail, Request, RouteConfig, UpstreamReply,
};
use crate::vm::WasmModule;

/// One module to measure.
#[derive(Clone)]
pub struct BenchTarget {
    /// Label in the output.
    pub name: String,
    /// The module.
    pub module: WasmModule,
    /// Its plugin config (e.g. the filter's JSON).
    pub plugin: PluginConfig,
}

/// Benchmark settings.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// Worker threads for the parallel measurement.
    pub workers: usize,
    /// Requests per measurement and worker.
    pub requests: usize,
    /// Streams in flight per worker (1: back to back); 0: every request starts at
    /// once, so `requests` streams are in flight.
    pub concurrency: usize,
    /// Rounds (targets interleaved per round; the median is reported).
    pub rounds: usize,
    /// Request path.
    pub path: String,
    /// Upstream status.
    pub status: u16,
    /// Name of the cluster the route sends to (properties `xds.cluster_name`).
    pub cluster: String,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            workers: 2,
            requests: 20_000,
            concurrency: 0,
            rounds: 3,
            path: "/".into(),
            status: 200,
            cluster: "backend".into(),
        }
    }
}

/// Result for one target.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchResult {
    /// Target label.
    pub name: String,
    /// One worker: µs per request (median over rounds).
    pub us_per_request: f64,
    /// One worker: requests per second.
    pub rps_single: f64,
    /// `workers` workers in parallel: total requests per second (median).
    pub rps_parallel: f64,
    /// Extra µs per request over the first target (the baseline).
    pub delta_us_vs_baseline: f64,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn measure(t: &BenchTarget, cfg: &BenchConfig, workers: usize) -> anyhow::Result<f64> {
    let mut h = Harness::new(
        &t.module,
        HarnessConfig {
            workers,
            clock: ClockMode::Real,
            plugin: t.plugin.clone(),
            records: RecordDetail::Summary,
            routes: vec![RouteConfig {
                cluster: cfg.cluster.clone(),
                ..Default::default()
            }],
            clusters: vec![ClusterConfig {
                name: cfg.cluster.clone(),
                ..Default::default()
            }],
            ..Default::default()
        },
    )?;
    let list = |n: usize| -> Vec<(u64, Request, UpstreamReply)> {
        (0..n)
            .map(|_| {
                (
                    0,
                    Request::get(&cfg.path),
                    UpstreamReply::status(cfg.status),
                )
            })
            .collect()
    };
    let cap = match cfg.concurrency {
        0 => usize::MAX,
        n => n,
    };
    let lists = |n: usize| (0..workers).map(|_| list(n)).collect();
    h.run_parallel_capped(lists(cfg.requests / 10 + 1), cap)?; // warm-up
    let start = Instant::now();
    let recs = h.run_parallel_capped(lists(cfg.requests), cap)?;
    let secs = start.elapsed().as_secs_f64();
    Ok(recs.len() as f64 / secs)
}

/// Runs the benchmark; the first target is the baseline.
pub fn run(targets: &[BenchTarget], cfg: &BenchConfig) -> anyhow::Result<Vec<BenchResult>> {
    let mut single: Vec<Vec<f64>> = vec![vec![]; targets.len()];
    let mut par: Vec<Vec<f64>> = vec![vec![]; targets.len()];
    for _ in 0..cfg.rounds.max(1) {
        for (i, t) in targets.iter().enumerate() {
            single[i].push(measure(t, cfg, 1)?);
            par[i].push(measure(t, cfg, cfg.workers)?);
        }
    }
    let mut out = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        let rps_single = median(&mut single[i]);
        out.push(BenchResult {
            name: t.name.clone(),
            us_per_request: 1e6 / rps_single,
            rps_single,
            rps_parallel: median(&mut par[i]),
            delta_us_vs_baseline: 0.0,
        });
    }
    let base = out.first().map(|b| b.us_per_request).unwrap_or(0.0);
    for r in &mut out {
        r.delta_us_vs_baseline = r.us_per_request - base;
    }
    Ok(out)
}
