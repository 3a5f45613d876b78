//! Ports of kubernetes-sigs' drift budget tests (`test/suites/regression/drift_test.go`,
//! `Drift / Budgets`) over the simulation, beside the drift tests of `spec_over_time`: empty
//! drifted nodes under a 50% budget, and a zero budget on a scheduled window holding drift back
//! while the window is open. Drift comes from a change of the pool template's annotations, as
//! upstream's.

use std::time::Duration;

use karpenter::sim::scenario::{LoadedScenario, Simulation};
use serde_json::json;

use super::support::{
    PoolScenario, advance_to, at_most_disrupting, commands, condition_is_true, describe,
    disrupting_within_budget, hostname_affinity, in_simulation, live_instances, nodeclaims,
    patch_pool, pool_nodes, succeeded, workload,
};

/// When drift starts: the three nodes are Ready.
const DRIFT_AT: Duration = Duration::from_mins(2);
/// When the empty drift test's pods go.
const EMPTY_AT: Duration = Duration::from_mins(3);

/// Three pods, one per node, with `steps` (`pinned`: annotated `karpenter.sh/do-not-disrupt`);
/// `consolidate_after` and `budgets` (YAML list items at 10 spaces).
fn three_nodes(
    steps: &str,
    pinned: bool,
    consolidate_after: &str,
    budgets: &str,
) -> LoadedScenario {
    let disruption =
        format!("        consolidateAfter: {consolidate_after}\n        budgets:\n{budgets}");
    let mut extra = hostname_affinity("podAntiAffinity", "app");
    if pinned {
        extra += "    annotations: {karpenter.sh/do-not-disrupt: \"true\"}\n";
    }
    PoolScenario {
        requirements: &[
            r#"{key: karpenter.sh/capacity-type, operator: In, values: ["on-demand"]}"#,
            r#"{key: kubernetes.io/arch, operator: In, values: ["amd64"]}"#,
            r#"{key: karpenter.k8s.aws/instance-category, operator: In, values: ["c", "m"]}"#,
        ],
        disruption: &disruption,
        workloads: &workload("app", "1", steps, &extra),
        ..PoolScenario::default()
    }
    .load()
}

/// Changes the template's annotations and waits (at most a minute) until every NodeClaim is
/// `Drifted` (upstream's `EventuallyExpectDrifted`).
async fn drift_every_nodeclaim(sim: &mut Simulation<'_>) {
    patch_pool(
        sim,
        json!({"spec": {"template": {"metadata": {"annotations": {"test": "annotation"}}}}}),
    )
    .await;
    for _ in 0..60 {
        let claims = nodeclaims(sim).await;
        if claims.iter().all(|c| condition_is_true(c, "Drifted")) {
            return;
        }
        assert!(sim.advance(Duration::from_secs(1)).await);
    }
    panic!("not every NodeClaim drifted within a minute");
}

/// `Drift / Budgets / It("should respect budgets for empty drift")`: three drifted nodes made
/// empty, `nodes: "50%"`: at most two disrupting at once for upstream's five minutes, by which
/// time all three are gone. As in Karpenter, drift leaves empty nodes to Emptiness (so the
/// pool consolidates, as upstream's default NodePool does), which deletes them.
#[test]
fn empty_drifted_nodes_are_deleted_at_most_two_at_a_time_under_a_fifty_percent_budget() {
    in_simulation(|| async {
        let scenario = three_nodes(
            "[{at: 0s, replicas: 3}, {at: 3m, replicas: 0}]",
            true,
            "0s",
            "          - nodes: \"50%\"\n",
        );
        let mut sim = Simulation::start(scenario, None).await.unwrap();
        advance_to(&mut sim, DRIFT_AT).await;
        assert_eq!(pool_nodes(&sim).await.len(), 3);
        drift_every_nodeclaim(&mut sim).await;
        assert_eq!(pool_nodes(&sim).await.len(), 3, "the pinned pods keep them");
        advance_to(&mut sim, EMPTY_AT).await;
        let most = at_most_disrupting(&mut sim, 2, Duration::from_mins(5)).await;
        let left = pool_nodes(&sim).await;
        let report = sim.finish().await;
        assert!(most > 0, "{}", commands(&report));
        assert!(
            left.is_empty(),
            "{}\n{}",
            describe(&left),
            commands(&report)
        );
        let empty = report.nodes.disrupted.get("empty").copied().unwrap_or(0);
        assert_eq!(
            empty,
            3,
            "{:?}
{}",
            report.nodes.disrupted,
            commands(&report)
        );
    });
}

/// `Drift / Budgets / It("should not allow drift if the budget is fully blocking during a
/// scheduled time")`: `nodes: "0"` on a 30-minute window opened 15 minutes before the drift
/// (runs start at midnight: `45 23 * * *`), so nothing is disrupted until 15m. Beyond
/// upstream (one node, watched for a minute): three nodes, and once the window closes every
/// drifted node is replaced by exactly one node: the drift commands decided one after another
/// count the replacements already launching for the commands before them.
#[test]
fn a_scheduled_zero_budget_holds_drift_back_until_its_window_closes() {
    in_simulation(|| async {
        let scenario = three_nodes(
            "[{at: 0s, replicas: 3}]",
            false,
            "Never",
            "          - {nodes: \"0\", schedule: \"45 23 * * *\", duration: 30m}\n",
        );
        let mut sim = Simulation::start(scenario, None).await.unwrap();
        advance_to(&mut sim, DRIFT_AT).await;
        let before = live_instances(&sim);
        assert_eq!(before.len(), 3);
        drift_every_nodeclaim(&mut sim).await;
        let window_left = Duration::from_mins(15).saturating_sub(sim.now());
        if let Err(why) = disrupting_within_budget(&mut sim, |_| 0, window_left).await {
            panic!("inside the window: {why}");
        }
        assert_eq!(
            live_instances(&sim),
            before,
            "no node replaced in the window"
        );
        advance_to(&mut sim, Duration::from_mins(25)).await;
        let after = live_instances(&sim);
        let report = sim.finish().await;
        assert_eq!(
            succeeded(&report, "replace", "Drifted"),
            3,
            "{}",
            commands(&report)
        );
        let replacements: usize = report
            .disruptions
            .iter()
            .filter(|d| d.reason == "Drifted")
            .map(|d| d.added.len())
            .sum();
        assert_eq!(
            (replacements, report.nodes.nodeclaims_created, after.len()),
            (3, 6, 3),
            "one replacement per drifted node (planned, NodeClaims created, instances left): \
             {:?}\n{}",
            report
                .disruptions
                .iter()
                .map(|d| &d.added)
                .collect::<Vec<_>>(),
            commands(&report)
        );
        assert!(
            after.is_disjoint(&before),
            "every drifted node replaced after the window:\n{}",
            commands(&report)
        );
    });
}
