//! The scheduling benchmark's workload (`karpenter_core::domain::scheduling::workload`, the
//! rebuild of Karpenter's `scheduling_benchmark_test.go`) gives honest figures only if our plan
//! is as good as Karpenter's on it: every pod placed, as Karpenter's benchmark `b.Fatalf`s
//! otherwise, and one new node per hostname anti-affinity pod, the node count Karpenter's
//! benchmark reports for its diverse mix (a fifth of the pods). The anti-affinity pods
//! (`app: nginx`, required anti-affinity to each other over the hostname) need a node each, so a
//! fifth of the pods is the fewest nodes any plan can have; the other four fifths fit beside
//! them on the cheapest instance types that hold them.
//!
//! Sizes are kept small enough for a debug build; `benches/scheduling.rs` runs the rest.

#![allow(
    clippy::expect_used,
    reason = "integration test helpers: a failed expect is a failed test"
)]

use karpenter_core::apis::SlimPod;
use karpenter_core::domain::scheduling::workload::{
    BENCHMARK_INSTANCE_TYPES, PodFactory, benchmark_node_pool, fake_instance_types,
};
use karpenter_core::domain::scheduling::{
    Options, Plan, PodFailure, SchedulingPod, Snapshot, solve,
};

/// The snapshot the benchmark solves: the pods read from the view's Pods and the benchmark NodePool
/// with its 400 instance types.
fn benchmark_snapshot(pods: &[SlimPod]) -> Snapshot {
    Snapshot {
        pods: pods
            .iter()
            .map(|p| SchedulingPod::from_pod(p).expect("every benchmark pod converts"))
            .collect(),
        node_pools: vec![benchmark_node_pool(fake_instance_types(
            BENCHMARK_INSTANCE_TYPES,
        ))],
        ..Snapshot::default()
    }
}

/// Asserts that the plan places each of `pods` pods exactly once, with no failure.
fn expect_every_pod_placed(plan: &Plan, pods: usize) {
    let failures: Vec<String> = plan
        .failures
        .iter()
        .take(3)
        .map(PodFailure::message)
        .collect();
    assert!(
        plan.failures.is_empty(),
        "{} of {pods} pods unplaced, e.g. {failures:?}",
        plan.failures.len()
    );
    let placements = plan.placements(pods);
    assert!(
        placements.iter().all(Option::is_some),
        "{} of {pods} pods have no placement",
        placements.iter().filter(|p| p.is_none()).count()
    );
    assert_eq!(
        plan.scheduled_pods(),
        pods,
        "a pod is placed more than once"
    );
}

fn expect_karpenters_node_count(pods: usize) {
    let snapshot = benchmark_snapshot(&PodFactory::default().diverse(pods));
    assert_eq!(snapshot.pods.len(), pods);
    let plan = solve(&snapshot, &Options::default());
    expect_every_pod_placed(&plan, pods);
    assert!(
        plan.existing.is_empty(),
        "the benchmark has no existing nodes"
    );
    assert_eq!(
        plan.new_node_claims.len(),
        pods / 5,
        "diverse/{pods}: Karpenter's benchmark gets one node per anti-affinity pod (pods / 5)"
    );
}

#[test]
fn the_diverse_mix_of_100_pods_needs_20_nodes() {
    expect_karpenters_node_count(100);
}

#[test]
fn the_diverse_mix_of_1000_pods_needs_200_nodes() {
    expect_karpenters_node_count(1000);
}

#[test]
fn the_diverse_mix_of_5000_pods_needs_1000_nodes() {
    expect_karpenters_node_count(5000);
}

#[test]
fn the_diverse_mix_of_20000_pods_needs_4000_nodes() {
    expect_karpenters_node_count(20_000);
}
