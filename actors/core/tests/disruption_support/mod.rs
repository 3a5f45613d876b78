//! Builders and expectations for the disruption tests: a cluster of Karpenter's fake instance
//! types (type `n` has `n` CPUs, `2n` GiB and costs the same per CPU), an on-demand and a spot
//! NodePool, nodes and pods by size.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use karpenter_core::apis::labels;
use karpenter_core::apis::nodepool::{Budget, DisruptionReason};
use karpenter_core::domain::disruption::workload::{Cluster, NodeSpec, PodBuilder, PoolSpec};
use karpenter_core::domain::disruption::{
    Abandoned, Blocker, Command, Decision, Method, MethodOutcome, NodeEventReason, Validation,
    decide, validate,
};
use karpenter_core::domain::instance_type::InstanceType;
use karpenter_core::domain::scheduling::workload::fake_instance_types;

/// The tests' clock: 2024-06-01T12:00:00Z (a Saturday).
pub fn now() -> Timestamp {
    ts("2024-06-01T12:00:00Z")
}

pub fn ts(text: &str) -> Timestamp {
    text.parse().expect("a valid timestamp")
}

/// Fake instance types of 1 to 32 CPUs.
pub fn types() -> Vec<Arc<InstanceType>> {
    fake_instance_types(32)
}

/// The fake type with `cpus` CPUs.
pub fn it(cpus: usize) -> Arc<InstanceType> {
    types()[cpus - 1].clone()
}

/// An empty cluster with an `on-demand` and a `spot` pool.
pub fn cluster() -> Cluster {
    let mut cluster = Cluster::new(now());
    cluster.pools = vec![
        PoolSpec::new("on-demand", &[labels::CAPACITY_TYPE_ON_DEMAND], types()),
        PoolSpec::new("spot", &[labels::CAPACITY_TYPE_SPOT], types()),
    ];
    cluster
}

/// A cluster whose on-demand pool may disrupt all its nodes at once.
pub fn unbudgeted() -> Cluster {
    let mut cluster = cluster();
    cluster.pools[0] = cluster.pools[0].clone().budgets(vec![budget("100%", None)]);
    cluster
}

/// `count` on-demand nodes `<prefix><i>` of `cpus` CPUs, each with one pod of `pod_millis`.
pub fn numbered(prefix: &str, count: usize, cpus: usize, pod_millis: i64) -> Vec<NodeSpec> {
    (0..count)
        .map(|i| {
            node(&format!("{prefix}{i:03}"), cpus).pod(pod(
                &format!("{prefix}{i:03}-app"),
                pod_millis,
                pod_millis / 2,
            ))
        })
        .collect()
}

/// An on-demand node of `cpus` CPUs in zone 1.
pub fn node(name: &str, cpus: usize) -> NodeSpec {
    NodeSpec::new(name, "on-demand", it(cpus), labels::CAPACITY_TYPE_ON_DEMAND).zone("test-zone-1")
}

/// A spot node of `cpus` CPUs in zone 1.
pub fn spot_node(name: &str, cpus: usize) -> NodeSpec {
    NodeSpec::new(name, "spot", it(cpus), labels::CAPACITY_TYPE_SPOT).zone("test-zone-1")
}

/// A pod requesting CPU (millicores) and memory (MiB), owned by a `ReplicaSet`.
pub fn pod(name: &str, cpu_millis: i64, memory_mib: i64) -> PodBuilder {
    PodBuilder::new(name)
        .requests(cpu_millis, memory_mib)
        .label("app", name)
        .owner("ReplicaSet")
}

/// A DaemonSet pod.
pub fn daemon(name: &str) -> PodBuilder {
    PodBuilder::new(name)
        .requests(100, 128)
        .label("app", "daemon")
        .owner("DaemonSet")
}

/// A budget of `nodes` for the given reasons (`None`: all).
pub fn budget(nodes: &str, reasons: Option<Vec<DisruptionReason>>) -> Budget {
    Budget {
        reasons,
        nodes: nodes.to_owned(),
        schedule: None,
        duration: None,
    }
}

/// A scheduled budget.
pub fn scheduled(nodes: &str, schedule: &str, duration: &str) -> Budget {
    Budget {
        reasons: None,
        nodes: nodes.to_owned(),
        schedule: Some(schedule.to_owned()),
        duration: Some(duration.to_owned()),
    }
}

pub fn minutes(n: u64) -> Duration {
    Duration::from_mins(n)
}

/// Decides one round over the cluster.
pub fn round(cluster: &Cluster) -> Decision {
    decide(&cluster.input())
}

/// The command, which must come from `method`.
pub fn expect_command(decision: &Decision, method: Method) -> &Command {
    let command = decision
        .command
        .as_ref()
        .unwrap_or_else(|| panic!("expected a {method:?} command, got none: {decision:#?}"));
    assert_eq!(command.method, method, "{command:#?}");
    command
}

/// No command.
pub fn expect_no_command(decision: &Decision) {
    assert!(
        decision.command.is_none(),
        "expected no command, got {:#?}",
        decision.command
    );
}

/// Candidate names, sorted.
pub fn names(command: &Command) -> Vec<&str> {
    let mut names = command.candidate_names();
    names.sort_unstable();
    names
}

/// Why the node is no candidate, if it is not.
pub fn blocker<'a>(decision: &'a Decision, node: &str) -> Option<&'a Blocker> {
    decision
        .blocked
        .iter()
        .find(|b| b.node == node)
        .map(|b| &b.blocker)
}

/// The messages of one kind of event a method published for a node.
pub fn events(
    decision: &Decision,
    method: Method,
    reason: NodeEventReason,
    node: &str,
) -> Vec<String> {
    decision
        .method(method)
        .map(|m| {
            m.events
                .iter()
                .filter(|e| e.node == node && e.reason == reason)
                .map(|e| e.message.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// The method's outcome.
pub fn outcome(decision: &Decision, method: Method) -> &MethodOutcome {
    &decision
        .method(method)
        .unwrap_or_else(|| panic!("{method:?} did not run: {decision:#?}"))
        .outcome
}

/// The pool's raw allowance for the method's reason.
pub fn allowed(decision: &Decision, method: Method, pool: &str) -> i64 {
    decision
        .method(method)
        .and_then(|m| m.budgets.iter().find(|b| b.node_pool == pool))
        .map_or_else(
            || panic!("no budget for {pool} in {method:?}: {decision:#?}"),
            |b| b.allowed,
        )
}

/// A pod lands on a node of the cluster.
pub fn arrive(cluster: &mut Cluster, node: &str, pod: PodBuilder) {
    let pod = pod.build().expect("a valid pod");
    cluster
        .node_mut(node)
        .unwrap_or_else(|| panic!("no node {node}"))
        .pods
        .push(pod);
}

/// Validates the command against the cluster as it is now; it must be abandoned.
pub fn expect_abandoned(command: &Command, cluster: &Cluster) -> Abandoned {
    match validate(command, &cluster.input()) {
        Validation::Abandon(abandoned) => abandoned,
        Validation::Keep { command, .. } => panic!("kept {command:#?}"),
    }
}
