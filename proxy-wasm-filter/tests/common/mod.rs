//! What the harness suites share.

use fusewire_core::shared::codec::{self, Kind};
use fusewire_core::shared::{slot_index, KeyState, LAYOUT, PROBE_LIMIT};
use fusewire_host_test::*;

/// The harness every suite runs: 4 workers on a virtual clock, the plugin with `json`
/// (fail closed), one route `/` to cluster `backend` with `route_timeout_ms`.
pub fn harness_config(cas: CasMode, json: &str, route_timeout_ms: u64) -> HarnessConfig {
    HarnessConfig {
        workers: 4,
        clock: ClockMode::Virtual,
        cas_mode: cas,
        plugin: PluginConfig {
            name: "fusewire".into(),
            root_id: "fusewire".into(),
            vm_id: "fusewire-v1".into(),
            configuration: json.into(),
            failure_policy: FailurePolicy::FailClosed,
            // `FUSEWIRE_STOP_ITERATION=1`: the whole suite as Envoy runs a plugin with
            // `allow_on_headers_stop_iteration` (body frames reach a stopped stream).
            allow_on_headers_stop_iteration: std::env::var_os("FUSEWIRE_STOP_ITERATION")
                .is_some_and(|v| v == "1"),
            ..Default::default()
        },
        routes: vec![RouteConfig {
            name: "r1".into(),
            prefix: "/".into(),
            cluster: "backend".into(),
            timeout_ms: route_timeout_ms,
        }],
        clusters: vec![ClusterConfig::default()],
        seed: 1,
        ..Default::default()
    }
}

/// Where the filter's `.wasm` for `target` is: `FUSEWIRE_WASM`, else what
/// `proxy-wasm-filter/build.sh` writes.
pub fn module_path(target: &str) -> String {
    std::env::var("FUSEWIRE_WASM").unwrap_or_else(|_| {
        format!(
            "{}/../target/fusewire/{target}/fusewire.wasm",
            env!("CARGO_MANIFEST_DIR")
        )
    })
}

/// The filter built for `wasm32-wasip1`.
pub fn module() -> WasmModule {
    let p = module_path("wasm32-wasip1");
    WasmModule::from_file(&p)
        .unwrap_or_else(|e| panic!("{p}: {e} — build it with proxy-wasm-filter/build.sh"))
}

/// A counter or gauge; a missing metric is a test failure (a misspelt name must not
/// pass an `== 0` check).
#[allow(dead_code)]
pub fn counter(h: &Harness, name: &str) -> u64 {
    match h.metric(name) {
        Some(MetricValue::Counter { value }) | Some(MetricValue::Gauge { value }) => value,
        other => panic!("metric {name}: {other:?}"),
    }
}

/// The stored state of `key` of policy `policy` (`keys.max_keys` 100), found by
/// probing its slots as the engine does.
#[allow(dead_code)]
pub fn find_state(h: &Harness, policy: &str, key: &str) -> Option<KeyState> {
    (0..PROBE_LIMIT).find_map(|step| {
        let slot = slot_index(key, step, 100);
        let (bytes, _) = h.shared_data(&format!("fusewire/{LAYOUT}/{policy}/{slot}"))?;
        let s: KeyState = codec::decode(Kind::KeyState, &bytes).ok()?;
        (s.name == key).then_some(s)
    })
}

/// The messages logged so far that contain `part`, in order.
#[allow(dead_code)]
pub fn logged(h: &Harness, part: &str) -> Vec<String> {
    h.logs()
        .into_iter()
        .filter(|l| l.message.contains(part))
        .map(|l| l.message)
        .collect()
}
