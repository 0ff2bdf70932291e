//! Scenario runner tests: reproducibility, classification, traffic models, validation.

mod common;

use std::sync::OnceLock;

use fusewire_host_test::report::Class;
use fusewire_host_test::*;

fn probe() -> &'static WasmModule {
    static M: OnceLock<WasmModule> = OnceLock::new();
    M.get_or_init(|| common::fixture("probe"))
}

const BASE: &str = r#"
name = "t"
seed = 11
duration_s = 20
workers = 3
[plugin]
configuration = "tick_ms=250"
[[routes]]
name = "api"
prefix = "/"
cluster = "backend"
timeout_ms = 300
[traffic]
rate_per_s = 150
arrival = "poisson"
workers = "random"
paths = [{ value = "/a", weight = 6 }, { value = "/probe/local", weight = 1 }, { value = "/probe/fallback", weight = 1 }]
[[upstream]]
from_s = 0
status = { "200" = 9, "503" = 1 }
latency = { dist = "lognormal", median_ms = 30, sigma = 0.7 }
[[upstream]]
from_s = 10
reset_ratio = 0.3
hang_ratio = 0.2
latency = { dist = "exponential", mean_ms = 20 }
"#;

#[test]
fn virtual_runs_are_bit_for_bit_reproducible() {
    let s = Scenario::from_toml(BASE).unwrap();
    let a = s.run(probe()).unwrap().to_json();
    let b = s.run(probe()).unwrap().to_json();
    assert_eq!(a, b, "same scenario + seed must give an identical report");
    let mut other = s.clone();
    other.seed = 12;
    assert_ne!(
        other.run(probe()).unwrap().to_json(),
        a,
        "a different seed changes the run"
    );
}

#[test]
fn report_counts_every_outcome_per_second() {
    let s = Scenario::from_toml(BASE).unwrap();
    let r = s.run(probe()).unwrap();
    let t = &r.totals;
    assert!(t.requests > 2500 && t.requests < 3500, "{}", t.requests);
    assert_eq!(t.unfinished, 0);
    assert_eq!(
        t.requests,
        r.timeline.iter().map(|s| s.requests).sum::<u64>()
    );
    assert_eq!(t.requests, t.outcomes.values().sum::<u64>());
    for c in [
        Class::UpstreamOk,
        Class::UpstreamFailed,
        Class::RejectedLocally,
        Class::FallbackServed,
    ] {
        assert!(
            t.outcomes.get(c.name()).copied().unwrap_or(0) > 0,
            "no {}",
            c.name()
        );
    }
    assert_eq!(
        t.local_by_tag.get("rejected"),
        t.outcomes.get("rejected_locally")
    );
    assert_eq!(
        t.local_by_tag.get("fallback"),
        t.outcomes.get("fallback_served")
    );
    assert_eq!(
        t.local_by_status.keys().cloned().collect::<Vec<_>>(),
        ["200", "429"]
    );
    // One sample reply per tag, as the client got it.
    assert_eq!(
        t.local_samples.keys().collect::<Vec<_>>(),
        t.local_by_tag.keys().collect::<Vec<_>>()
    );
    assert_eq!(t.local_samples["rejected"].status, 429);
    // Phase 2 (resets and hangs) fails upstream requests; phase 1 mostly succeeds.
    let ok = |s: &report::Second| *s.outcomes.get("upstream_ok").unwrap_or(&0);
    assert!(r.timeline[..10].iter().all(|s| ok(s) > 0));
    assert!(r.timeline[10..].iter().all(|s| ok(s) > s.requests / 4));
    let hung = r.latency.get("upstream_failed").unwrap();
    assert_eq!(hung.max_ms, 300.0, "hangs end at the 300 ms route timeout");
    // Metrics sampled every second; the probe counts requests and ticks.
    let req = &r.metric_series["probe.requests"];
    assert_eq!(req.len(), 20);
    assert!(req.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(r.metrics["probe.requests"].scalar(), t.requests);
    assert_eq!(
        r.metric_series["probe.ticks"][0],
        4 * 4,
        "3 workers + main, 4 ticks per second"
    );
    assert!(r.stats.contains("wasmcustom.probe.requests: "));
    assert!(r.prometheus.contains("# TYPE probe_requests counter"));
}

#[test]
fn closed_model_keeps_concurrency_clients_busy() {
    let text = r#"
duration_s = 2
workers = 2
[traffic]
concurrency = 10
think_ms = 0
[[upstream]]
from_s = 0
latency = { dist = "fixed", ms = 100 }
"#;
    let r = Scenario::from_toml(text).unwrap().run(probe()).unwrap();
    assert_eq!(
        r.totals.requests, 200,
        "10 clients x 20 sequential 100 ms requests"
    );
    assert_eq!(r.timeline[0].requests, 100);
}

#[test]
fn html_is_self_contained() {
    let r = Scenario::from_toml(BASE).unwrap().run(probe()).unwrap();
    let html = r.to_html();
    assert!(html.starts_with("<!doctype html>"));
    assert!(html.matches("<svg").count() >= 2);
    assert!(!html.contains("src=") && !html.contains("href=") && !html.contains("<script"));
    assert!(html.contains("rejected locally"));
}

#[test]
fn bad_scenarios_name_the_field() {
    let err = |t: &str| format!("{:#}", Scenario::from_toml(t).expect_err("must fail"));
    let base = "duration_s = 1\n[traffic]\nrate_per_s = 1\n";
    assert!(err(&format!(
        "{base}[[upstream]]\nfrom_s = 0\nstatus = {{ \"abc\" = 1 }}\n"
    ))
    .contains("upstream[0].status"));
    assert!(err(&format!("{base}[[upstream]]\nfrom_s = 1\n")).contains("upstream[0].from_s"));
    assert!(err(&format!(
        "{base}[[upstream]]\nfrom_s = 0\nreset_ratio = 2.0\n"
    ))
    .contains("upstream[0]"));
    assert!(err(&format!("{base}[[upstream]]\nfrom_s = 0\nbogus = 1\n")).contains("bogus"));
    assert!(err("duration_s = 1\n[traffic]\n[[upstream]]\nfrom_s = 0\n").contains("traffic"));
    assert!(err(&format!("workers = 0\n{base}[[upstream]]\nfrom_s = 0\n")).contains("workers"));
    let bad_route =
        format!("{base}[[routes]]\nname = \"r\"\ncluster = \"nope\"\n[[upstream]]\nfrom_s = 0\n");
    assert!(err(&bad_route).contains("unknown cluster"));
}

#[test]
fn example_scenario_parses() {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/flaky-backend.toml");
    let s = Scenario::from_file(p).unwrap();
    assert_eq!(s.upstream.len(), 4);
    assert!(s.module.unwrap().ends_with("fixture_probe.wasm"));
}

#[test]
fn upstream_mix_and_latency_follow_the_phase() {
    let text = r#"
duration_s = 10
workers = 2
[traffic]
rate_per_s = 500
[[upstream]]
from_s = 0
status = { "200" = 80, "503" = 20 }
latency = { dist = "uniform", min_ms = 10, max_ms = 30 }
"#;
    let r = Scenario::from_toml(text).unwrap().run(probe()).unwrap();
    let t = &r.totals;
    assert_eq!(t.requests, 5000);
    let failed = t.outcomes["upstream_failed"] as f64 / t.requests as f64;
    assert!((0.17..0.23).contains(&failed), "503 share {failed}");
    let all = &r.latency["all"];
    assert!(
        all.max_ms <= 30.0 && all.p50_ms > 15.0 && all.p50_ms < 25.0,
        "{all:?}"
    );
    let fixed = "duration_s = 2\n[traffic]\nrate_per_s = 10\n[[upstream]]\nfrom_s = 0\nlatency = { dist = \"fixed\", ms = 42 }\n";
    let r = Scenario::from_toml(fixed).unwrap().run(probe()).unwrap();
    assert_eq!(
        (r.latency["all"].p50_ms, r.latency["all"].max_ms),
        (42.0, 42.0)
    );
}

#[test]
fn reloads_apply_at_their_second_and_a_rejected_one_keeps_the_old_config() {
    let toml = BASE.replace("duration_s = 20", "duration_s = 6")
        + r#"
[[reloads]]
at_s = 2
configuration = "tick_ms=500"
[[reloads]]
at_s = 3
configuration = "reject_configure=1"
[[reloads]]
at_s = 4
configuration = "tick_ms=500"
"#;
    let s = Scenario::from_toml(&toml).unwrap();
    let r = s.run(probe()).unwrap();
    let got: Vec<(u64, &str)> = r
        .reloads
        .iter()
        .map(|x| (x.at_s, x.result.split(':').next().unwrap_or("")))
        .collect();
    assert_eq!(
        got,
        [
            (2, "applied (same VMs, a new root context)"),
            (3, "rejected, the old config keeps running"),
            (4, "unchanged (the same plugin config)"),
        ],
        "{:?}",
        r.reloads
    );
    assert!(r.reloads[1].result.contains("on_configure returned false"));
    assert_eq!(r.totals.unfinished, 0, "traffic runs through the reloads");
    let late = Scenario::from_toml(
        &(BASE.replace("duration_s = 20", "duration_s = 6")
            + "[[reloads]]\nat_s = 6\nconfiguration = \"x\"\n"),
    );
    assert!(
        format!("{:#}", late.unwrap_err()).contains("reloads[0].at_s: must be below duration_s")
    );
    let both = Scenario::from_toml(
        &(BASE.replace("duration_s = 20", "duration_s = 6")
            + "[[reloads]]\nat_s = 2\nconfiguration = \"x\"\nconfiguration_file = \"y.json\"\n"),
    );
    assert!(format!("{:#}", both.unwrap_err()).contains(
        "reloads[0].configuration_file: set together with reloads[0].configuration; give one"
    ));
    let plugin = Scenario::from_toml(&BASE.replace(
        "configuration = \"tick_ms=250\"",
        "configuration = \"tick_ms=250\"\nconfiguration_file = \"p.json\"",
    ));
    assert!(format!("{:#}", plugin.unwrap_err())
        .contains("plugin.configuration_file: set together with plugin.configuration; give one"));
}

#[test]
fn from_toml_reads_configuration_files_too() {
    // Found by review: `from_toml` left `configuration_file` unread, so the plugin
    // silently ran with an empty configuration.
    let dir = std::env::temp_dir().join(format!("fusewire-scenario-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("plugin.conf");
    std::fs::write(&file, "tick_ms=250").unwrap();
    let text = BASE.replace("duration_s = 20", "duration_s = 6").replace(
        "configuration = \"tick_ms=250\"",
        &format!("configuration_file = {:?}", file.display().to_string()),
    ) + &format!(
        "[[reloads]]\nat_s = 2\nconfiguration_file = {:?}\n",
        file.display().to_string()
    );
    let s = Scenario::from_toml(&text).unwrap();
    assert_eq!(s.plugin.config.configuration, "tick_ms=250");
    assert_eq!(s.reloads[0].configuration, "tick_ms=250");
    std::fs::remove_file(&file).unwrap();
    let missing = format!("{:#}", Scenario::from_toml(&text).unwrap_err());
    assert!(
        missing.contains("plugin.configuration_file: reading"),
        "{missing}"
    );
    std::fs::remove_dir(&dir).unwrap();
}
