//! Workers on threads of their own, running at once (real clock), as Envoy's do: a
//! process-wide limit holds however their shared-data reads and writes interleave
//! (the other suites run one worker's callback at a time: found by review).

mod common;

use fusewire_host_test::*;

#[test]
fn the_bulkhead_limit_holds_across_workers_running_at_once() {
    for cas in [CasMode::Envoy, CasMode::Kong] {
        let json = r#"{"policies": [{"name": "svc", "match": {"path_prefix": "/api"},
            "breaker": {"mode": "forced_closed"}, "bulkhead": {"max_concurrent": 3}}]}"#;
        let mut cfg = common::harness_config(cas, json, 15_000);
        cfg.clock = ClockMode::Real;
        cfg.records = RecordDetail::Summary;
        let mut h = Harness::new(&common::module(), cfg).expect("plugin loads");
        let list = |w: usize| -> Vec<(u64, Request, UpstreamReply)> {
            (0..150)
                .map(|i| {
                    let req = Request::get(&format!("/api/{w}/{i}"));
                    (0, req, UpstreamReply::status(200).after_ms(2))
                })
                .collect()
        };
        let recs = h
            .run_parallel_capped((0..4).map(list).collect(), 4)
            .expect("runs");
        assert_eq!(recs.len(), 600, "{cas:?}");
        let sent = recs.iter().filter(|r| r.sent_upstream).count();
        let refused = recs
            .iter()
            .filter(|r| !r.sent_upstream && r.response_status == Some(503))
            .count();
        assert_eq!(sent + refused, 600, "{cas:?}: each sent or refused");
        // Each worker alone keeps 4 requests in flight: the limit is reached, never
        // passed.
        let peak = h.process().upstream_peak(false);
        assert_eq!(
            peak, 3,
            "{cas:?}: most upstream requests at once ({sent} sent)"
        );
    }
}
