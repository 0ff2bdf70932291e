//! `fusewire-host`: run scenarios, benchmark modules, inspect a module's lifecycle.

use std::process::ExitCode;

use anyhow::{bail, Context as _};
use fusewire_host_test::bench::{self, BenchConfig, BenchTarget};
use fusewire_host_test::{ClockMode, Harness, HarnessConfig, PluginConfig, Scenario, WasmModule};

const USAGE: &str = "\
fusewire-host — a proxy-wasm host that behaves like Envoy

USAGE:
  fusewire-host run <scenario.toml> [--module M.wasm] [--seed N] [--clock virtual|real]
                    [--json OUT.json] [--html OUT.html] [--stats] [--prometheus] [--quiet]
                    [--verbose]
      Plays a scenario; prints a summary (and /stats or Prometheus text if asked);
      --verbose echoes guest logs (info and above) to stderr.
  fusewire-host bench --module A.wasm [--config A.json] [--name A] [--module B.wasm ...]
                    [--workers N] [--requests N] [--concurrency N] [--rounds N] [--path /p] [--cluster NAME]
                    [--status CODE] [--json OUT.json]
      Requests/s and µs/request through the harness (real clock, zero-latency upstream)
      for each module in the same run; the first module is the baseline.
  fusewire-host check <module.wasm> [--config plugin.json] [--workers N]
      Loads a module the way Envoy does and prints the lifecycle calls and logs.
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match real_main(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn value<'a>(args: &'a [String], i: &mut usize, flag: &str) -> anyhow::Result<&'a str> {
    *i += 1;
    args.get(*i)
        .map(|s| s.as_str())
        .with_context(|| format!("{flag} needs a value"))
}

fn real_main(args: &[String]) -> anyhow::Result<()> {
    match args.first().map(|s| s.as_str()) {
        Some("run") => run(&args[1..]),
        Some("bench") => bench_cmd(&args[1..]),
        Some("check") => check(&args[1..]),
        Some("-h" | "--help" | "help") | None => {
            print!("{USAGE}");
            Ok(())
        }
        Some(other) => bail!("unknown command {other:?}\n\n{USAGE}"),
    }
}

fn run(args: &[String]) -> anyhow::Result<()> {
    let (mut file, mut module, mut json, mut html) = (None, None, None, None);
    let (mut stats, mut prom, mut quiet, mut verbose) = (false, false, false, false);
    let (mut seed, mut clock) = (None, None);
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--module" => module = Some(value(args, &mut i, "--module")?.to_string()),
            "--seed" => {
                seed = Some(
                    value(args, &mut i, "--seed")?
                        .parse::<u64>()
                        .context("--seed: not an integer")?,
                )
            }
            "--clock" => {
                clock = Some(match value(args, &mut i, "--clock")? {
                    "virtual" => ClockMode::Virtual,
                    "real" => ClockMode::Real,
                    o => bail!("--clock: expected virtual or real, got {o:?}"),
                })
            }
            "--json" => json = Some(value(args, &mut i, "--json")?.to_string()),
            "--html" => html = Some(value(args, &mut i, "--html")?.to_string()),
            "--stats" => stats = true,
            "--prometheus" => prom = true,
            "--quiet" => quiet = true,
            "--verbose" => verbose = true,
            a if a.starts_with('-') => bail!("run: unknown option {a:?}"),
            a => file = Some(a.to_string()),
        }
        i += 1;
    }
    let file = file.context("run: missing <scenario.toml>")?;
    let mut s = Scenario::from_file(&file)?;
    if let Some(seed) = seed {
        s.seed = seed;
    }
    if let Some(c) = clock {
        s.clock = c;
    }
    let path = module
        .or(s.module.clone())
        .context("run: no module (set `module` in the scenario or pass --module)")?;
    let m = WasmModule::from_file(&path)?;
    let report = s.run_with_log_echo(&m, verbose.then_some(2))?;
    if let Some(p) = &json {
        std::fs::write(p, report.to_json()).with_context(|| format!("writing {p}"))?;
    }
    if let Some(p) = &html {
        std::fs::write(p, report.to_html()).with_context(|| format!("writing {p}"))?;
    }
    if !quiet {
        let t = &report.totals;
        println!(
            "scenario {} · module {} · seed {} · {} clock · {} workers · {} s",
            report.scenario,
            report.module,
            report.seed,
            report.clock,
            report.workers,
            report.duration_s
        );
        println!(
            "requests {}  sent upstream {}  upstream attempts failed {}  unfinished {}",
            t.requests, t.sent_upstream, t.upstream_attempt_failed, t.unfinished
        );
        for (k, v) in &t.outcomes {
            println!("  {k:<18} {v}");
        }
        for r in &report.reloads {
            println!("reload @ {} s: {}", r.at_s, r.result);
        }
        if !t.local_by_tag.is_empty() {
            println!("local replies by x-fusewire tag: {:?}", t.local_by_tag);
        }
        for (tag, l) in &t.local_samples {
            let body: String = l.body.chars().take(120).collect();
            println!(
                "  first {tag:?} reply: {} {:?} body {body:?}",
                l.status, l.headers
            );
        }
        if let Some(p) = report.latency.get("all") {
            println!(
                "latency ms: p50 {:.2}  p90 {:.2}  p99 {:.2}  max {:.2}",
                p.p50_ms, p.p90_ms, p.p99_ms, p.max_ms
            );
        }
    }
    if stats {
        print!("{}", report.stats);
    }
    if prom {
        print!("{}", report.prometheus);
    }
    Ok(())
}

fn bench_cmd(args: &[String]) -> anyhow::Result<()> {
    let mut cfg = BenchConfig::default();
    let mut targets: Vec<BenchTarget> = Vec::new();
    let mut json = None;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--module" => {
                let p = value(args, &mut i, "--module")?;
                let name = std::path::Path::new(p)
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or(p.into());
                targets.push(BenchTarget {
                    name,
                    module: WasmModule::from_file(p)?,
                    plugin: PluginConfig::default(),
                });
            }
            "--config" => {
                let p = value(args, &mut i, "--config")?;
                let t = targets
                    .last_mut()
                    .context("--config must follow a --module")?;
                t.plugin.configuration =
                    std::fs::read_to_string(p).with_context(|| format!("--config: reading {p}"))?;
            }
            "--name" => {
                let n = value(args, &mut i, "--name")?;
                targets
                    .last_mut()
                    .context("--name must follow a --module")?
                    .name = n.into();
            }
            "--workers" => {
                cfg.workers = value(args, &mut i, "--workers")?
                    .parse()
                    .context("--workers: not an integer")?
            }
            "--requests" => {
                cfg.requests = value(args, &mut i, "--requests")?
                    .parse()
                    .context("--requests: not an integer")?
            }
            "--concurrency" => {
                cfg.concurrency = value(args, &mut i, "--concurrency")?
                    .parse()
                    .context("--concurrency: not an integer")?
            }
            "--rounds" => {
                cfg.rounds = value(args, &mut i, "--rounds")?
                    .parse()
                    .context("--rounds: not an integer")?
            }
            "--path" => cfg.path = value(args, &mut i, "--path")?.into(),
            "--cluster" => cfg.cluster = value(args, &mut i, "--cluster")?.into(),
            "--status" => {
                cfg.status = value(args, &mut i, "--status")?
                    .parse()
                    .context("--status: not an HTTP status")?
            }
            "--json" => json = Some(value(args, &mut i, "--json")?.to_string()),
            a => bail!("bench: unknown argument {a:?}"),
        }
        i += 1;
    }
    if targets.is_empty() {
        bail!("bench: give at least one --module (the first is the baseline)");
    }
    if cfg.workers == 0 || cfg.requests == 0 {
        bail!("bench: --workers and --requests must be positive");
    }
    let results = bench::run(&targets, &cfg)?;
    println!(
        "{} requests/measurement/worker, {} in flight per worker, {} rounds (median), parallel = {} workers; path {}",
        cfg.requests,
        match cfg.concurrency {
            0 => "all".to_string(),
            n => n.to_string(),
        },
        cfg.rounds,
        cfg.workers,
        cfg.path
    );
    println!(
        "{:<24} {:>12} {:>14} {:>16} {:>14}",
        "module",
        "µs/request",
        "req/s 1 worker",
        format!("req/s {} workers", cfg.workers),
        "Δµs vs first"
    );
    for r in &results {
        println!(
            "{:<24} {:>12.2} {:>14.0} {:>16.0} {:>14.2}",
            r.name, r.us_per_request, r.rps_single, r.rps_parallel, r.delta_us_vs_baseline
        );
    }
    if let Some(p) = json {
        std::fs::write(&p, serde_json::to_string_pretty(&results)?)
            .with_context(|| format!("writing {p}"))?;
    }
    Ok(())
}

fn check(args: &[String]) -> anyhow::Result<()> {
    let mut file = None;
    let mut cfg = HarnessConfig::default();
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--config" => {
                let p = value(args, &mut i, "--config")?;
                cfg.plugin.configuration =
                    std::fs::read_to_string(p).with_context(|| format!("--config: reading {p}"))?;
            }
            "--workers" => {
                cfg.workers = value(args, &mut i, "--workers")?
                    .parse()
                    .context("--workers: not an integer")?
            }
            a if a.starts_with('-') => bail!("check: unknown option {a:?}"),
            a => file = Some(a.to_string()),
        }
        i += 1;
    }
    let m = WasmModule::from_file(file.context("check: missing <module.wasm>")?)?;
    let h = Harness::new(&m, cfg)?;
    for c in h.lifecycle() {
        println!(
            "{:<10} {:<26} ctx {} -> {:?}",
            c.vm, c.callback, c.context_id, c.result
        );
    }
    for l in h.logs() {
        println!("[{}] {}: {}", l.vm, l.level, l.message);
    }
    print!("{}", h.stats_text());
    Ok(())
}
