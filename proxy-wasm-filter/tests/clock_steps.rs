//! Wall-clock steps (NTP correcting a drift, a VM resumed after a migration, an
//! operator) move nothing in the filter: it keeps time on the host's monotonic clock
//! (WASI clock 1, Envoy's steady clock), the one timeline of every worker VM. Each
//! scenario failed when the filter kept time on the wall clock (found by a review of
//! clock steps): a step back froze breakers and deadlines for its length, a step
//! forward timed out every call in flight and let the bulkhead exceed its limit.
//!
//! Needs the built module (see `tests/host.rs`).

use std::time::Duration;

use fusewire_core::shared::KeyState;
use fusewire_core::Phase;
use fusewire_host_test::*;

mod common;
use common::counter;

const HOUR: i64 = 3_600_000_000_000;

/// Opens on 50 % of 20 calls for 5 s, one probe; 1 s deadlines kept by the filter;
/// a bulkhead of 4 across the workers.
const CONFIG: &str = r#"{
  "tick_ms": 100,
  "shared": {"lease_ttl_ms": 2000, "heartbeat_ms": 500},
  "policies": [{
    "name": "svc",
    "match": {"path_prefix": "/api"},
    "breaker": {
      "error_percentage": {"request_volume_threshold": 20, "threshold_percentage": 50},
      "open": {"sleep_window_ms": 5000},
      "half_open": {"permitted_probes": 1, "success_threshold": 1}
    },
    "bulkhead": {"max_concurrent": 4},
    "execution": {"timeout_ms": 1000}, "timeout": "tick",
    "fallback": {"status": 503, "body": "fallback: {reason}"}
  }]
}"#;

fn harness() -> Harness {
    harness_on(CasMode::Envoy)
}

fn harness_on(cas: CasMode) -> Harness {
    let cfg = common::harness_config(cas, CONFIG, 15_000);
    Harness::new(&common::module(), cfg).expect("plugin loads")
}

/// The stored state of key `svc`.
fn stored(h: &Harness) -> KeyState {
    common::find_state(h, "svc", "svc").expect("state written")
}

fn tag(r: &StreamRecord) -> Option<String> {
    r.response_header("x-fusewire")
}

fn get() -> Request {
    Request::get("/api/item")
}

fn ok_after(ms: u64) -> UpstreamReply {
    UpstreamReply::status(200).after_ms(ms)
}

fn trip(h: &mut Harness) {
    for i in 0..20 {
        h.request(i % 4, get(), UpstreamReply::status(503));
    }
    h.run_for(Duration::from_millis(150));
    assert_eq!(counter(h, "fusewire.svc.opened"), 1);
}

/// Just after the trip: still open, and 5 s after it a probe closes the breaker.
fn still_open_then_closes(h: &mut Harness) {
    let r = h.request(1, get(), ok_after(10));
    assert_eq!(
        tag(&r).as_deref(),
        Some("short-circuited"),
        "still open: {r:?}"
    );
    h.run_for(Duration::from_millis(5_000));
    let probe = h.request(2, get(), ok_after(10));
    assert_eq!(probe.response_status, Some(200), "the probe: {probe:?}");
    h.run_for(Duration::from_millis(150));
    assert_eq!(stored(h).breaker.phase(), Phase::Closed);
}

/// An hour back: the open period still ends 5 s after the trip, and the probe closes
/// the breaker.
#[test]
fn a_step_back_does_not_hold_the_breaker_open() {
    let mut h = harness();
    trip(&mut h);
    h.step_wall_clock(-HOUR);
    still_open_then_closes(&mut h);
}

/// An hour back: a call past its 1 s deadline still gets the timeout reply at 1 s.
#[test]
fn a_step_back_does_not_stop_deadlines() {
    let mut h = harness();
    let r = h.request(0, get(), ok_after(10));
    assert_eq!(r.response_status, Some(200));
    h.step_wall_clock(-HOUR);
    let t0 = h.now_ns();
    let r = h.request(0, get(), ok_after(5_000));
    assert_eq!(tag(&r).as_deref(), Some("timeout"), "{r:?}");
    let ms = (r.end_ns - t0) / 1_000_000;
    assert!((1_000..=1_200).contains(&ms), "answered at {ms} ms");
}

/// A minute forward with calls in flight: none times out, nothing trips, and the
/// bulkhead's slots held before the step still count against its limit.
#[test]
fn a_step_forward_times_out_nothing_and_keeps_the_bulkhead_limit() {
    let mut h = harness();
    let t0 = h.now_ns();
    let held: Vec<u64> = (0..4)
        .map(|i| h.submit_at(t0 + i, 0, get(), ok_after(800)))
        .collect();
    h.run_for(Duration::from_millis(100));
    h.step_wall_clock(60 * 1_000_000_000);
    let refused: Vec<StreamRecord> = (0..4).map(|_| h.request(1, get(), ok_after(10))).collect();
    for r in &refused {
        assert_eq!(
            tag(r).as_deref(),
            Some("rejected"),
            "the 4 slots are taken: {r:?}"
        );
    }
    h.run_for(Duration::from_millis(1_000));
    for id in held {
        let r = h.record(id).expect("ended");
        assert_eq!(r.response_status, Some(200), "not timed out: {r:?}");
    }
    h.run_for(Duration::from_millis(150));
    assert_eq!(counter(&h, "fusewire.svc.timeout"), 0);
    assert_eq!(counter(&h, "fusewire.svc.success"), 4);
    assert_eq!(counter(&h, "fusewire.svc.opened"), 0);
}

/// VMs started after a step (Envoy makes new ones on a code or VM-config change, or
/// after a crash) keep the same time as the VMs before it: every VM adds the same
/// offset to the monotonic clock, agreed through shared data. (Each VM taking its
/// own offset from the wall clock would put the new VMs an hour behind: the breaker
/// they share would stay open for them.) Both CAS rules: Envoy's lenient one, and Kong's strict one, where the VMs' race to
/// write the offset first is a conflict for all but one.
#[test]
fn vms_started_after_a_step_keep_the_same_time() {
    for cas in [CasMode::Envoy, CasMode::Kong] {
        vms_started_after_a_step_keep_the_same_time_on(cas);
    }
}

fn vms_started_after_a_step_keep_the_same_time_on(cas: CasMode) {
    let mut h = harness_on(cas);
    trip(&mut h);
    h.step_wall_clock(-HOUR);
    let mut plugin = common::harness_config(cas, CONFIG, 15_000).plugin;
    plugin.vm_configuration = "fresh VMs".into();
    assert_eq!(
        h.reload(&common::module(), plugin).unwrap(),
        Reload::FreshVms
    );
    still_open_then_closes(&mut h);
}

/// Stored times read as wall-clock times (the monotonic clock plus the agreed offset),
/// as earlier releases, which kept time on the wall clock, stored them: old and new
/// code share one timeline while both run during a config drain.
#[test]
fn stored_times_read_as_wall_clock_times() {
    let mut h = harness();
    trip(&mut h);
    let wall = VIRTUAL_EPOCH_NS + h.now_ns();
    let until = stored(&h).breaker.open_until();
    assert!(
        (wall + 4_000_000_000..=wall + 5_000_000_000).contains(&until),
        "open until {until}, wall clock {wall}"
    );
}
