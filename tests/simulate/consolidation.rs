//! Ports of the AWS provider's consolidation suite (`aws: test/suites/consolidation/suite_test.go`)
//! over the simulation: `lastPodEventTime` following pod changes, budgets for empty delete, non-empty delete and replace consolidation
//! (checked every simulated second with Karpenter's own count of disrupting nodes), a fully
//! blocking budget and one blocking during a scheduled window, underutilized nodes deleted and
//! replaced with smaller ones (on-demand and spot, the e2e environment's
//! `SpotToSpotConsolidation=true`), on-demand replaced by spot, and the spot-to-spot gate: off,
//! no spot node is replaced by a spot node; on, only with 15 cheaper instance types.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use karpenter::sim::scenario::{LoadedScenario, Simulation};
use karpenter_core::domain::resources::parse_millis;
use serde_json::json;

use super::support::{
    PoolScenario, advance_to, at_most_disrupting, commands, describe, disrupting_within_budget,
    hostname_affinity, in_simulation, label_of, live_instances, nodeclaims, patch_pool, pool_nodes,
    succeeded, workload,
};

const ON_DEMAND: &str = r#"{key: karpenter.sh/capacity-type, operator: In, values: ["on-demand"]}"#;
const SPOT: &str = r#"{key: karpenter.sh/capacity-type, operator: In, values: ["spot"]}"#;
const AMD64: &str = r#"{key: kubernetes.io/arch, operator: In, values: ["amd64"]}"#;
const C_OR_M: &str =
    r#"{key: karpenter.k8s.aws/instance-category, operator: In, values: ["c", "m"]}"#;
/// Upstream's exclusion of burstable and odd families, "so we have more control over what gets
/// provisioned".
const NOT_ODD_FAMILIES: &str = r#"{key: karpenter.k8s.aws/instance-family, operator: NotIn, values: ["t2", "t3", "c1", "t3a", "t4g", "a1"]}"#;

/// `ConsistentlyExpectDisruptionsUntilNoneLeft`'s timeout.
const UNTIL_NONE_LEFT: Duration = Duration::from_mins(10);
/// When the scale-downs happen: every node of the first step registered and Ready.
const SCALE_DOWN_AT: Duration = Duration::from_mins(3);

/// Upstream's hostname spread (`maxSkew: 1`, `DoNotSchedule`) over a workload's pods.
const HOSTNAME_SPREAD: &str = "    topologySpreadConstraints: [{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule}]\n";

/// The `Budgets` context's cluster: five 1-CPU pods, one per node, scaled to one at
/// [`SCALE_DOWN_AT`] (four nodes become empty); `consolidateAfter: 0s` and `budgets` (YAML
/// list items at 10 spaces).
fn five_nodes_made_empty(budgets: &str) -> LoadedScenario {
    let disruption = format!("        consolidateAfter: 0s\n        budgets:\n{budgets}");
    PoolScenario {
        requirements: &[ON_DEMAND, AMD64, C_OR_M],
        disruption: &disruption,
        workloads: &workload(
            "app",
            "1",
            "[{at: 0s, replicas: 5}, {at: 3m, replicas: 1}]",
            &hostname_affinity("podAntiAffinity", "app"),
        ),
        ..PoolScenario::default()
    }
    .load()
}

/// `Consolidation / Budgets / It("should respect budgets for empty delete consolidation")`:
/// `nodes: "40%"` of five, so at most two at once, until only the pod's node is left.
#[test]
fn empty_nodes_are_deleted_at_most_two_at_a_time_under_a_forty_percent_budget() {
    in_simulation(|| async {
        let mut sim =
            Simulation::start(five_nodes_made_empty("          - nodes: \"40%\"\n"), None)
                .await
                .unwrap();
        advance_to(&mut sim, SCALE_DOWN_AT).await;
        assert_eq!(pool_nodes(&sim).await.len(), 5, "one node per pod");
        let most = at_most_disrupting(&mut sim, 2, UNTIL_NONE_LEFT).await;
        let left = pool_nodes(&sim).await;
        let report = sim.finish().await;
        assert!(most > 0, "{}", commands(&report));
        assert_eq!(left.len(), 1, "{}\n{}", describe(&left), commands(&report));
        assert!(
            succeeded(&report, "delete", "Empty") > 0,
            "{}",
            commands(&report)
        );
    });
}

/// `Consolidation / Budgets / It("should not allow consolidation if the budget is fully
/// blocking")`: `nodes: "0"`; upstream watches a minute, we watch the ten minutes the other
/// budget tests need to finish.
#[test]
fn a_zero_budget_keeps_every_empty_node() {
    in_simulation(|| async {
        let mut sim = Simulation::start(five_nodes_made_empty("          - nodes: \"0\"\n"), None)
            .await
            .unwrap();
        advance_to(&mut sim, SCALE_DOWN_AT).await;
        let before = live_instances(&sim);
        assert_eq!(before.len(), 5);
        let most = at_most_disrupting(&mut sim, 0, UNTIL_NONE_LEFT).await;
        assert_eq!(most, 0);
        assert_eq!(live_instances(&sim), before);
        let report = sim.finish().await;
        assert!(report.disruptions.is_empty(), "{}", commands(&report));
    });
}

/// `Consolidation / Budgets / It("should not allow consolidation if the budget is fully
/// blocking during a scheduled time")`: `nodes: "0"` on a 30-minute window opened 15 minutes
/// before the nodes are empty (runs start at midnight: `45 23 * * *`). Beyond upstream: once
/// the window closes at 15m, the empty nodes go.
#[test]
fn a_scheduled_zero_budget_keeps_every_empty_node_until_its_window_closes() {
    in_simulation(|| async {
        let budget = "          - {nodes: \"0\", schedule: \"45 23 * * *\", duration: 30m}\n";
        let mut sim = Simulation::start(five_nodes_made_empty(budget), None)
            .await
            .unwrap();
        advance_to(&mut sim, SCALE_DOWN_AT).await;
        let before = live_instances(&sim);
        assert_eq!(before.len(), 5);
        let window_left = Duration::from_mins(15).saturating_sub(sim.now());
        let most = match disrupting_within_budget(&mut sim, |_| 0, window_left).await {
            Ok(most) => most,
            Err(why) => panic!("inside the window: {why}"),
        };
        assert_eq!(most, 0);
        assert_eq!(live_instances(&sim), before);
        assert!(sim.advance(Duration::from_mins(3)).await);
        let left = pool_nodes(&sim).await;
        assert_eq!(left.len(), 1, "after the window:\n{}", describe(&left));
        sim.finish().await;
    });
}

/// `Consolidation / Budgets / It("should respect budgets for non-empty delete consolidation")`:
/// three 2xlarge nodes of three 2100m pods each, scaled to three pods, then consolidation
/// enabled under `nodes: "50%"`: at most two at once, down to one node.
#[test]
fn underutilized_nodes_are_deleted_at_most_two_at_a_time_under_a_fifty_percent_budget() {
    in_simulation(|| async {
        let scenario = PoolScenario {
            requirements: &[
                ON_DEMAND,
                AMD64,
                C_OR_M,
                r#"{key: karpenter.k8s.aws/instance-size, operator: In, values: ["2xlarge"]}"#,
            ],
            disruption: "        consolidateAfter: Never\n        budgets:\n          - nodes: \"50%\"\n",
            workloads: &workload(
                "app",
                "2100m",
                "[{at: 0s, replicas: 9}, {at: 3m, replicas: 3}]",
                "",
            ),
            ..PoolScenario::default()
        };
        let mut sim = Simulation::start(scenario.load(), None).await.unwrap();
        advance_to(&mut sim, SCALE_DOWN_AT + Duration::from_secs(30)).await;
        let before = pool_nodes(&sim).await;
        assert_eq!(before.len(), 3, "{}", describe(&before));
        patch_pool(
            &sim,
            json!({"spec": {"disruption": {"consolidateAfter": "0s"}}}),
        )
        .await;
        let most = at_most_disrupting(&mut sim, 2, UNTIL_NONE_LEFT).await;
        let left = pool_nodes(&sim).await;
        let report = sim.finish().await;
        assert!(most > 0, "{}", commands(&report));
        assert_eq!(left.len(), 1, "{}\n{}", describe(&left), commands(&report));
        assert!(
            succeeded(&report, "delete", "Underutilized") > 0,
            "a non-empty node deleted:\n{}",
            commands(&report)
        );
    });
}

/// Five partitions (`test-partition: "0"` .. `"4"`), each with a 3-CPU pod and, until 3m, a
/// second 3-CPU pod standing in for upstream's DaemonSet: one 2xlarge node each.
fn partitions() -> String {
    (0..5)
        .flat_map(|i| {
            let selector = format!("    nodeSelector: {{test-partition: \"{i}\"}}\n");
            [
                workload(
                    &format!("app-{i}"),
                    "3",
                    "[{at: 0s, replicas: 1}]",
                    &selector,
                ),
                workload(
                    &format!("daemon-{i}"),
                    "3",
                    "[{at: 0s, replicas: 1}, {at: 3m, replicas: 0}]",
                    &selector,
                ),
            ]
        })
        .collect()
}

/// `Consolidation / Budgets / It("should respect budgets for non-empty replace consolidation")`:
/// five 2xlarge nodes whose load halves; with `nodes: "3"`, at most three disrupting at once
/// until each is replaced by an xlarge.
#[test]
fn underutilized_nodes_are_replaced_at_most_three_at_a_time_under_a_budget_of_three() {
    in_simulation(|| async {
        let workloads = partitions();
        let scenario = PoolScenario {
            requirements: &[
                ON_DEMAND,
                AMD64,
                C_OR_M,
                r#"{key: karpenter.k8s.aws/instance-size, operator: In, values: ["xlarge", "2xlarge"]}"#,
                "{key: test-partition, operator: Exists}",
            ],
            disruption: "        consolidateAfter: Never\n        budgets:\n          - nodes: \"3\"\n",
            workloads: &workloads,
            ..PoolScenario::default()
        };
        let mut sim = Simulation::start(scenario.load(), None).await.unwrap();
        advance_to(&mut sim, SCALE_DOWN_AT + Duration::from_secs(30)).await;
        let before = pool_nodes(&sim).await;
        assert_eq!(before.len(), 5, "{}", describe(&before));
        assert!(
            before.iter().all(|n| is_size(n, "2xlarge")),
            "{}",
            describe(&before)
        );
        patch_pool(
            &sim,
            json!({"spec": {"disruption": {"consolidateAfter": "0s"}}}),
        )
        .await;
        let most = at_most_disrupting(&mut sim, 3, UNTIL_NONE_LEFT).await;
        let after = pool_nodes(&sim).await;
        let report = sim.finish().await;
        assert!(most > 0, "{}", commands(&report));
        let names = |nodes: &[Node]| -> BTreeSet<String> {
            nodes
                .iter()
                .filter_map(|n| n.metadata.name.clone())
                .collect()
        };
        assert!(
            names(&after).is_disjoint(&names(&before)),
            "every node replaced"
        );
        assert_eq!(after.len(), 5, "{}", describe(&after));
        assert!(
            after.iter().all(|n| is_size(n, "xlarge")),
            "{}\n{}",
            describe(&after),
            commands(&report)
        );
    });
}

fn is_size(node: &Node, size: &str) -> bool {
    label_of(node, "karpenter.k8s.aws/instance-size") == Some(size)
}

/// Millicores of a quantity; 0 when absent.
fn millis(quantity: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>) -> i64 {
    quantity.map_or(0, |q| parse_millis(&q.0).unwrap())
}

/// Upstream's `EventuallyExpectAvgUtilization(cpu, ...)`: the mean over the pool's nodes of
/// their pods' CPU requests over the node's allocatable CPU.
fn average_cpu_utilization(sim: &Simulation<'_>, nodes: &[Node]) -> f64 {
    let view = sim.view();
    let each: Vec<f64> = nodes
        .iter()
        .map(|node| {
            let name = node.metadata.name.as_deref().unwrap_or_default();
            let requested: i64 = view
                .pods_on_node(name)
                .iter()
                .flat_map(|p| p.spec.iter().flat_map(|s| s.containers.iter()))
                .map(|c| {
                    millis(
                        c.resources
                            .as_ref()
                            .and_then(|r| r.requests.as_ref())
                            .and_then(|r| r.get("cpu")),
                    )
                })
                .sum();
            let allocatable = millis(
                node.status
                    .as_ref()
                    .and_then(|s| s.allocatable.as_ref())
                    .and_then(|a| a.get("cpu")),
            );
            #[expect(clippy::cast_precision_loss, reason = "millicores of a node")]
            let ratio = requested as f64 / allocatable as f64;
            ratio
        })
        .collect();
    #[expect(clippy::cast_precision_loss, reason = "a handful of nodes")]
    let mean = each.iter().sum::<f64>() / each.len() as f64;
    mean
}

/// Steps second by second until the pool's average CPU utilization is above `floor`; the
/// utilization last seen when `limit` passed first.
async fn until_utilization_above(
    sim: &mut Simulation<'_>,
    floor: f64,
    limit: Duration,
) -> Result<(), String> {
    let from = sim.now();
    loop {
        let pool = pool_nodes(sim).await;
        let now = average_cpu_utilization(sim, &pool);
        if now > floor {
            return Ok(());
        }
        if sim.now().saturating_sub(from) >= limit {
            return Err(format!("{now:.2} after {limit:?}:\n{}", describe(&pool)));
        }
        assert!(sim.advance(Duration::from_secs(1)).await);
    }
}

/// `DescribeTable("should consolidate nodes (delete)")`: 100 one-CPU pods on medium to xlarge
/// nodes scaled to 40 (average utilization below 0.5), then consolidation enabled: above 0.6.
async fn underutilized_nodes_are_deleted(capacity: &str) {
    let scenario = PoolScenario {
        requirements: &[
            capacity,
            AMD64,
            r#"{key: karpenter.k8s.aws/instance-size, operator: In, values: ["medium", "large", "xlarge"]}"#,
            NOT_ODD_FAMILIES,
        ],
        workloads: &workload(
            "app",
            "1",
            "[{at: 0s, replicas: 100}, {at: 3m, replicas: 40}]",
            "",
        ),
        ..PoolScenario::default()
    };
    let mut sim = Simulation::start(scenario.load(), None).await.unwrap();
    advance_to(&mut sim, SCALE_DOWN_AT + Duration::from_secs(30)).await;
    let before = pool_nodes(&sim).await;
    let utilization = average_cpu_utilization(&sim, &before);
    assert!(
        utilization < 0.5,
        "{utilization:.2}:\n{}",
        describe(&before)
    );
    patch_pool(
        &sim,
        json!({"spec": {"disruption": {"consolidateAfter": "0s"}}}),
    )
    .await;
    let reached = until_utilization_above(&mut sim, 0.6, UNTIL_NONE_LEFT).await;
    let report = sim.finish().await;
    if let Err(why) = reached {
        panic!("{why}\n{}", commands(&report));
    }
    assert!(
        succeeded(&report, "delete", "Underutilized") > 0,
        "{}",
        commands(&report)
    );
}

/// `... Entry("if the nodes are on-demand nodes")`.
#[test]
fn underutilized_on_demand_nodes_are_deleted_until_average_utilization_exceeds_sixty_percent() {
    in_simulation(|| underutilized_nodes_are_deleted(ON_DEMAND));
}

/// `... Entry("if the nodes are spot nodes")`.
#[test]
fn underutilized_spot_nodes_are_deleted_until_average_utilization_exceeds_sixty_percent() {
    in_simulation(|| underutilized_nodes_are_deleted(SPOT));
}

const LINUX: &str = r#"{key: kubernetes.io/os, operator: In, values: ["linux"]}"#;
const LARGE_OR_2XLARGE: &str =
    r#"{key: karpenter.k8s.aws/instance-size, operator: In, values: ["large", "2xlarge"]}"#;

/// `DescribeTable("should consolidate nodes (replace)")`'s cluster: three 4-CPU and three
/// 1800m pods, each workload spread over hostnames, on large or 2xlarge nodes of `capacity`
/// (three 2xlarge); the 4-CPU pods go at [`SCALE_DOWN_AT`]. `families` narrows the pool's
/// instance families; `gate` is the `SpotToSpotConsolidation` feature gate.
fn three_2xlarge_nodes_losing_their_large_pods(
    capacity: &str,
    families: &str,
    gate: bool,
) -> LoadedScenario {
    let workloads = workload(
        "large-app",
        "4",
        "[{at: 0s, replicas: 3}, {at: 3m, replicas: 0}]",
        HOSTNAME_SPREAD,
    ) + &workload(
        "small-app",
        "1800m",
        "[{at: 0s, replicas: 3}]",
        HOSTNAME_SPREAD,
    );
    let top = format!("featureGates: SpotToSpotConsolidation={gate}\n");
    PoolScenario {
        requirements: &[capacity, AMD64, LARGE_OR_2XLARGE, families, LINUX],
        workloads: &workloads,
        top: &top,
        ..PoolScenario::default()
    }
    .load()
}

/// Runs [`three_2xlarge_nodes_losing_their_large_pods`] to just after the scale-down, checks
/// upstream's preconditions (three 2xlarge nodes, average utilization below 0.5) and enables
/// consolidation; the nodes before.
async fn consolidating_three_2xlarge_nodes(sim: &mut Simulation<'_>) -> Vec<Node> {
    advance_to(sim, SCALE_DOWN_AT + Duration::from_secs(30)).await;
    let before = pool_nodes(sim).await;
    assert_eq!(before.len(), 3, "{}", describe(&before));
    assert!(
        before.iter().all(|n| is_size(n, "2xlarge")),
        "{}",
        describe(&before)
    );
    let utilization = average_cpu_utilization(sim, &before);
    assert!(
        utilization < 0.5,
        "{utilization:.2}:\n{}",
        describe(&before)
    );
    patch_pool(
        sim,
        json!({"spec": {"disruption": {"consolidateAfter": "0s"}}}),
    )
    .await;
    before
}

/// Upstream's replace checks: average utilization above 0.8, then exactly three nodes, every
/// one a `.large`.
async fn replaced_by_three_large_nodes(capacity: &str, gate: bool) {
    let scenario = three_2xlarge_nodes_losing_their_large_pods(capacity, NOT_ODD_FAMILIES, gate);
    let mut sim = Simulation::start(scenario, None).await.unwrap();
    consolidating_three_2xlarge_nodes(&mut sim).await;
    let reached = until_utilization_above(&mut sim, 0.8, UNTIL_NONE_LEFT).await;
    let after = pool_nodes(&sim).await;
    let report = sim.finish().await;
    if let Err(why) = reached {
        panic!("{why}\n{}", commands(&report));
    }
    assert_eq!(
        after.len(),
        3,
        "{}\n{}",
        describe(&after),
        commands(&report)
    );
    assert!(
        after.iter().all(|n| is_size(n, "large")),
        "{}\n{}",
        describe(&after),
        commands(&report)
    );
    assert_eq!(
        succeeded(&report, "replace", "Underutilized"),
        3,
        "{}",
        commands(&report)
    );
}

/// `DescribeTable("should consolidate nodes (replace)") / Entry("if the nodes are on-demand
/// nodes")`.
#[test]
fn underutilized_on_demand_2xlarge_nodes_are_replaced_by_large_ones() {
    in_simulation(|| replaced_by_three_large_nodes(ON_DEMAND, false));
}

/// `... Entry("if the nodes are spot nodes")`, with the e2e environment's
/// `SpotToSpotConsolidation=true` (its install script sets it).
#[test]
fn with_the_spot_to_spot_gate_underutilized_spot_2xlarge_nodes_are_replaced_by_large_ones() {
    in_simulation(|| replaced_by_three_large_nodes(SPOT, true));
}

/// The spot Entry's cluster where spot-to-spot consolidation must not happen: for ten
/// minutes no command is decided and no instance launched or ended. (Karpenter also says why
/// in an `Unconsolidatable` event on each node; ours records that message as a repeat of the
/// node's first `Unconsolidatable` event, see tests/README.md, so it is not checked here.)
async fn no_spot_to_spot_replacement(families: &str, gate: bool) {
    let scenario = three_2xlarge_nodes_losing_their_large_pods(SPOT, families, gate);
    let mut sim = Simulation::start(scenario, None).await.unwrap();
    consolidating_three_2xlarge_nodes(&mut sim).await;
    let instances = live_instances(&sim);
    assert!(sim.advance(UNTIL_NONE_LEFT).await);
    assert_eq!(live_instances(&sim), instances, "no node replaced");
    let report = sim.finish().await;
    assert!(report.disruptions.is_empty(), "{}", commands(&report));
}

/// The `SpotToSpotConsolidation` gate off (Karpenter's default): a spot node is never
/// replaced by a spot node (`pkg/controllers/disruption/consolidation.go`).
#[test]
fn without_the_spot_to_spot_gate_spot_nodes_are_not_replaced() {
    in_simulation(|| no_spot_to_spot_replacement(NOT_ODD_FAMILIES, false));
}

/// The gate on, but fewer than 15 instance types cheaper than the 2xlarge (the pool allows
/// three families): single-node spot-to-spot consolidation needs 15, so that the replacement
/// is not itself consolidated at once.
#[test]
fn with_the_spot_to_spot_gate_a_spot_node_is_not_replaced_with_fewer_than_fifteen_cheaper_types() {
    in_simulation(|| {
        no_spot_to_spot_replacement(
            r#"{key: karpenter.k8s.aws/instance-family, operator: In, values: ["c5", "c6i", "m5"]}"#,
            true,
        )
    });
}

/// `Consolidation / It("should consolidate on-demand nodes to spot (replace)")`: two on-demand
/// large nodes, then the pool allows spot too: both become spot nodes.
#[test]
fn on_demand_nodes_are_replaced_by_spot_ones_once_the_pool_allows_spot() {
    in_simulation(|| async {
        let large = r#"{key: karpenter.k8s.aws/instance-size, operator: In, values: ["large"]}"#;
        let scenario = PoolScenario {
            requirements: &[ON_DEMAND, AMD64, large, NOT_ODD_FAMILIES],
            workloads: &workload(
                "small-app",
                "1800m",
                "[{at: 0s, replicas: 2}]",
                HOSTNAME_SPREAD,
            ),
            ..PoolScenario::default()
        };
        let mut sim = Simulation::start(scenario.load(), None).await.unwrap();
        advance_to(&mut sim, SCALE_DOWN_AT).await;
        assert_eq!(pool_nodes(&sim).await.len(), 2);
        let requirement = |key: &str, operator: &str, values: &[&str]| json!({"key": key, "operator": operator, "values": values});
        let families = ["t2", "t3", "c1", "t3a", "t4g", "a1"];
        patch_pool(
            &sim,
            json!({"spec": {
                "disruption": {"consolidateAfter": "0s"},
                "template": {"spec": {"requirements": [
                    requirement("karpenter.sh/capacity-type", "Exists", &[]),
                    requirement("kubernetes.io/arch", "In", &["amd64"]),
                    requirement("karpenter.k8s.aws/instance-size", "In", &["large"]),
                    requirement("karpenter.k8s.aws/instance-family", "NotIn", &families),
                ]}},
            }}),
        )
        .await;
        assert!(sim.advance(UNTIL_NONE_LEFT).await);
        let after = pool_nodes(&sim).await;
        let report = sim.finish().await;
        let spot = after
            .iter()
            .filter(|n| label_of(n, "karpenter.sh/capacity-type") == Some("spot"))
            .count();
        assert_eq!(
            (spot, after.len()),
            (2, 2),
            "{}\n{}",
            describe(&after),
            commands(&report)
        );
    });
}

/// The one NodeClaim's `status.lastPodEventTime`.
async fn last_pod_event_time(sim: &Simulation<'_>) -> Option<i64> {
    let claims = nodeclaims(sim).await;
    assert_eq!(claims.len(), 1);
    claims[0]
        .status
        .as_ref()?
        .last_pod_event_time
        .as_ref()
        .map(|t| t.0.as_second())
}

/// `Consolidation / LastPodEventTime / It("should update lastPodEventTime when pods are
/// scheduled and removed")`: five 1-CPU pods on one node (`nodes: "0%"`, consolidation off),
/// scaled to four then back to five 10 s apart (upstream's wait past the write dedupe): each
/// change moves the NodeClaim's `lastPodEventTime` within upstream's five seconds.
#[test]
fn last_pod_event_time_moves_when_a_pod_leaves_and_when_one_arrives() {
    in_simulation(|| async {
        let scenario = PoolScenario {
            requirements: &[ON_DEMAND, AMD64, C_OR_M],
            disruption: "        consolidateAfter: Never\n        budgets:\n          - nodes: \"0%\"\n",
            workloads: &workload(
                "app",
                "1",
                "[{at: 0s, replicas: 5}, {at: 2m, replicas: 4}, {at: 130s, replicas: 5}]",
                "",
            ),
            ..PoolScenario::default()
        };
        let mut sim = Simulation::start(scenario.load(), None).await.unwrap();
        advance_to(&mut sim, Duration::from_mins(2) - Duration::from_secs(1)).await;
        assert_eq!(pool_nodes(&sim).await.len(), 1, "five pods on one node");
        let mut last = last_pod_event_time(&sim).await.expect("the pods' binding");
        for step in [Duration::from_mins(2), Duration::from_secs(130)] {
            advance_to(&mut sim, step + Duration::from_secs(5)).await;
            let now = last_pod_event_time(&sim).await.unwrap();
            assert!(now > last, "at {step:?}: {last} -> {now}");
            last = now;
        }
        sim.finish().await;
    });
}
