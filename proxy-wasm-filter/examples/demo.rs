//! Runs a host-test scenario with the built filter and prints what the breaker did:
//! when it tripped, how much load it kept off the failing upstream, when it
//! recovered; writes the HTML timeline (and optionally the JSON report).
//!
//! ```sh
//! proxy-wasm-filter/build.sh
//! cargo run --release -p fusewire-proxy-wasm --example demo -- \
//!     examples/demo.toml --html out/demo.html [--json out/demo.json]
//! ```

use std::path::Path;

use anyhow::{bail, Context};
use fusewire_host_test::{Report, Scenario, WasmModule};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut scenario = "examples/demo.toml".to_string();
    let (mut html, mut json) = (Some("out/demo.html".to_string()), None);
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--html" => {
                i += 1;
                html = args.get(i).cloned();
            }
            "--json" => {
                i += 1;
                json = args.get(i).cloned();
            }
            a if a.starts_with('-') => bail!("unknown option {a}"),
            a => scenario = a.to_string(),
        }
        i += 1;
    }
    let s = Scenario::from_file(&scenario).with_context(|| format!("reading {scenario}"))?;
    let module_path = s.module.clone().context("scenario has no module")?;
    let module = WasmModule::from_file(&module_path)
        .with_context(|| format!("{module_path} (build it with proxy-wasm-filter/build.sh)"))?;
    let r = s.run(&module)?;
    print!("{}", summary(&r));
    for (path, text) in [(html, r.to_html()), (json, r.to_json())] {
        if let Some(path) = path {
            if let Some(dir) = Path::new(&path).parent() {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::write(&path, text)?;
            println!("wrote {path}");
        }
    }
    Ok(())
}

/// First second (index) at which `series` grows past its previous value.
fn first_increase(series: &[u64], from: usize) -> Option<usize> {
    (from.max(1)..series.len()).find(|&t| series[t] > series[t - 1])
}

fn summary(r: &Report) -> String {
    let mut out = String::new();
    let t = &r.totals;
    out.push_str(&format!(
        "{}: {} workers, {} s, {} requests\n",
        r.scenario, r.workers, r.duration_s, t.requests
    ));
    // Phases: when the outage starts and ends.
    let outage = r.phases.iter().position(|p| p.degraded);
    let (out_from, out_to) = match outage {
        Some(i) => (
            r.phases[i].from_s as usize,
            r.phases
                .get(i + 1)
                .map_or(r.duration_s as usize, |p| p.from_s as usize),
        ),
        None => (0, 0),
    };
    for p in &r.phases {
        out.push_str(&format!("  phase @{:>3} s: {}\n", p.from_s, p.label));
    }
    // Breaker transitions, per key, from the per-second metric series.
    for (name, series) in &r.metric_series {
        let Some(key) = name.strip_suffix(".opened") else {
            continue;
        };
        let tripped = first_increase(series, 0);
        let closed = r
            .metric_series
            .get(&format!("{key}.closed"))
            .and_then(|c| first_increase(c, out_to));
        match tripped {
            Some(s) => {
                let after = if s >= out_from {
                    format!(" ({} s into the outage)", s - out_from)
                } else {
                    String::new()
                };
                out.push_str(&format!(
                    "  {key}: tripped at {s} s{after}; opened {} time(s)\n",
                    series.last().copied().unwrap_or(0)
                ));
            }
            None => out.push_str(&format!("  {key}: never tripped\n")),
        }
        match closed {
            Some(c) => out.push_str(&format!(
                "  {key}: closed again at {c} s ({} s after the upstream recovered at {out_to} s)\n",
                c.saturating_sub(out_to)
            )),
            None if tripped.is_some() => out.push_str(&format!("  {key}: still open at the end\n")),
            None => {}
        }
    }
    // Load kept off the upstream during the outage.
    let secs = r
        .timeline
        .get(out_from..out_to.min(r.timeline.len()))
        .unwrap_or(&[]);
    let req: u64 = secs.iter().map(|s| s.requests).sum();
    let sent: u64 = secs.iter().map(|s| s.sent_upstream).sum();
    if req > 0 {
        out.push_str(&format!(
            "  outage {out_from}–{out_to} s: {req} requests, {sent} sent upstream, {} kept off the failing upstream ({:.0} %)\n",
            req - sent,
            100.0 * (req - sent) as f64 / req as f64
        ));
    }
    // Which of them kept that load off: the outage's local replies by tag.
    let mut in_outage: std::collections::BTreeMap<&str, u64> = Default::default();
    for s in secs {
        for (k, v) in &s.local_by_tag {
            *in_outage.entry(k.as_str()).or_default() += v;
        }
    }
    let tags: Vec<String> = in_outage.iter().map(|(k, v)| format!("{k}={v}")).collect();
    out.push_str(&format!(
        "  in the outage, local replies by x-fusewire: {}\n",
        tags.join(" ")
    ));
    let collapsed = t.local_by_tag.get("collapsed").copied().unwrap_or(0);
    let stale = t.local_by_tag.get("stale").copied().unwrap_or(0);
    if collapsed + stale > 0 {
        out.push_str(&format!(
            "  whole run: collapsed forwarding answered {collapsed} requests by an identical request in flight (upstream requests saved); stale-if-error served {stale} fallbacks the last good response\n"
        ));
    }
    out.push_str(&format!(
        "  totals: {} sent upstream, {} upstream attempts failed, {} unfinished\n",
        t.sent_upstream, t.upstream_attempt_failed, t.unfinished
    ));
    out
}
