//! Whole simulations (`karpenter::sim::scenario`): a run replays byte for byte for a seed, and
//! the pieces of the report add up.

use std::path::PathBuf;

use karpenter::sim::scenario::{self, LoadedScenario, RunOptions};

fn small() -> LoadedScenario {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/scenarios/small.yaml");
    LoadedScenario::from_yaml(&std::fs::read_to_string(path).unwrap(), None).unwrap()
}

#[test]
fn a_run_is_byte_identical_for_the_same_seed() {
    let first = scenario::run(small(), RunOptions::quiet())
        .unwrap()
        .to_json();
    let second = scenario::run(small(), RunOptions::quiet())
        .unwrap()
        .to_json();
    assert_eq!(first, second);
    assert!(first.contains("\"scenario\": \"small\""), "{first}");
}

#[test]
fn the_report_counts_every_pod_the_workloads_asked_for() {
    let report = scenario::run(small(), RunOptions::quiet()).unwrap();
    assert_eq!(report.simulated_seconds, 8 * 60);
    let pods = &report.pods;
    assert!(pods.requested >= 12, "{pods:?}");
    assert_eq!(
        pods.running_at_end + pods.pending_at_end,
        12,
        "the workload holds 12 pods at the end: {pods:?}"
    );
    assert_eq!(
        pods.pending_reasons.values().sum::<usize>(),
        pods.pending_at_end
    );
}

#[test]
fn a_chaos_plan_can_crash_the_create_fleet_batcher_and_every_pod_still_runs() {
    // The AWS subsystems are actors of the same kit: the scenario's fault plan reaches them.
    let chaos = "actors:\n  seed: 5\n  rules:\n    - kind: CreateFleetBatcherActor\n      message: Add\n      nth: 2\n      action: panic\n";
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/scenarios/small.yaml");
    let scenario =
        LoadedScenario::from_yaml(&std::fs::read_to_string(path).unwrap(), Some(chaos)).unwrap();
    let report = scenario::run(scenario, RunOptions::quiet()).unwrap();
    let batcher = &report.actors["CreateFleetBatcherActor"];
    assert_eq!((batcher.panics, batcher.restarts), (1, 1), "{batcher:?}");
    assert!(!report.escalated);
    assert_eq!(report.pods.pending_at_end, 0, "{:?}", report.pods);
    assert_eq!(report.pods.running_at_end, 12);
}

#[test]
fn a_pod_no_pool_can_fit_is_reported_with_karpenters_latest_event_about_it() {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/scenarios/small.yaml");
    let text = std::fs::read_to_string(path)
        .unwrap()
        .replace(
            "workloads:\n",
            "workloads:\n  - name: huge\n    requests: {cpu: \"1000\"}\n    steps:\n      - {at: 0s, replicas: 2}\n",
        );
    let report = scenario::run(
        LoadedScenario::from_yaml(&text, None).unwrap(),
        RunOptions::quiet(),
    )
    .unwrap();
    let pods = &report.pods;
    assert_eq!(pods.pending_at_end, 2, "{pods:?}");
    let (reason, count) = pods.pending_reasons.iter().next().unwrap();
    assert_eq!(*count, 2, "{:?}", pods.pending_reasons);
    assert!(
        reason.starts_with("FailedScheduling: "),
        "the reason is Karpenter's event, not the scheduler's condition: {reason}"
    );
}
