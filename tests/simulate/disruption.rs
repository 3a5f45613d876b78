//! Disruption in whole simulations (issue 16): consolidation brings the default scenario within
//! 1.5x of its cost bound without churning replicas; budgets with a schedule, `karpenter.sh/do-not-disrupt` pods and
//! PodDisruptionBudgets hold it back while they apply and no longer; a steady workload settles
//! and stays settled.

use std::collections::BTreeSet;
use std::time::Duration;

use karpenter::sim::report::{DisruptionLine, Report};
use karpenter::sim::scenario::file::DEFAULT_SCENARIO;
use karpenter::sim::scenario::{self, LoadedScenario, RunOptions, Simulation};

use super::support::{commands, in_simulation, load};

#[test]
fn the_default_scenario_schedules_every_pod_evicts_no_replica_more_than_twice_and_ends_within_one_and_a_half_times_the_bound()
 {
    let consolidating = scenario::run(
        LoadedScenario::from_yaml(DEFAULT_SCENARIO, None).unwrap(),
        RunOptions::quiet(),
    )
    .unwrap();
    let setting = "        consolidateAfter: 1m\n";
    assert!(
        DEFAULT_SCENARIO.contains(setting),
        "default.yaml's consolidateAfter moved"
    );
    let without = DEFAULT_SCENARIO.replace(setting, "        consolidateAfter: Never\n");
    let still = scenario::run(
        LoadedScenario::from_yaml(&without, None).unwrap(),
        RunOptions::quiet(),
    )
    .unwrap();
    assert!(
        still.disruptions.is_empty(),
        "consolidation off decides nothing:\n{}",
        commands(&still)
    );

    let pods = &consolidating.pods;
    assert_eq!(pods.pending_at_end, 0, "{:?}", pods.pending_reasons);
    assert!(
        pods.evictions.max_per_replica <= 2,
        "a replica was evicted {} times: {:?}\n{}",
        pods.evictions.max_per_replica,
        pods.evictions.replicas_by_evictions,
        commands(&consolidating)
    );
    let (with, without) = (
        consolidating.cost.per_hour_at_end,
        still.cost.per_hour_at_end,
    );
    assert!(
        with <= without / 2.0,
        "${with:.4}/h at the end with consolidation, ${without:.4}/h without: less than half saved"
    );
    // The bound is the cheapest whole nodes for the 120 web pods, 40 per zone (their spread):
    // a plan can reach it. Without consolidation the scenario ends far above it.
    let bound = consolidating.cost.lower_bound_per_hour_at_end.unwrap();
    assert_eq!(consolidating.cost.lower_bound_unpriced_pods, 0);
    assert!(
        with <= 1.5 * bound,
        "${with:.4}/h at the end, {:.2}x the bound ${bound:.4}/h\n{}",
        with / bound,
        commands(&consolidating)
    );
    assert!(
        without > 1.5 * bound,
        "${without:.4}/h without consolidation, bound ${bound:.4}/h"
    );
}

/// The closed window of every NodePool's budget in consolidation.yaml (`10 0 * * *` for 5m,
/// the run starting at midnight).
const WINDOW: std::ops::Range<u64> = 600..900;
/// When consolidation.yaml's do-not-disrupt pod goes (its workload's last step).
const PINNED_UNTIL: u64 = 17 * 60;
/// When consolidation.yaml's PodDisruptionBudget is deleted.
const PDB_UNTIL: u64 = 20 * 60;

fn touching<'a>(report: &'a Report, nodes: &BTreeSet<String>) -> Vec<&'a DisruptionLine> {
    report
        .disruptions
        .iter()
        .filter(|d| d.nodes.iter().any(|n| nodes.contains(n)))
        .collect()
}

/// Nothing touches `nodes` before `until`; a command that succeeds removes them afterwards.
fn held_until(report: &Report, nodes: &BTreeSet<String>, until: u64, what: &str) {
    let touching = touching(report, nodes);
    assert!(
        touching.iter().all(|d| d.at_seconds >= until),
        "{what}: a command disrupted {nodes:?} before {until}s:\n{}",
        commands(report)
    );
    assert!(
        touching
            .iter()
            .any(|d| d.outcome == "succeeded" && d.at_seconds >= until),
        "{what}: {nodes:?} not disrupted after {until}s:\n{}",
        commands(report)
    );
}

#[test]
fn the_consolidation_scenario_waits_for_the_budget_window_the_do_not_disrupt_pod_and_the_pdb() {
    let report = in_simulation(|| async {
        let mut sim = Simulation::start(load("config/scenarios/consolidation.yaml"), None)
            .await
            .unwrap();
        // After the 4m scale-down: the guarded pods are where they stay.
        assert!(sim.advance(Duration::from_mins(5)).await);
        let node_of = |prefix: &str| -> BTreeSet<String> {
            sim.view()
                .pods()
                .iter()
                .filter(|p| {
                    p.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with(prefix))
                })
                .filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()))
                .map(str::to_owned)
                .collect()
        };
        let pinned = node_of("pinned-0");
        let protected = node_of("critical-");
        assert_eq!(pinned.len(), 1, "the do-not-disrupt pod runs");
        assert!(!protected.is_empty(), "the PDB's pods run");
        sim.run_to_end(None).await;
        (sim.finish().await, pinned, protected)
    });
    let (report, pinned, protected) = report;

    let in_window: Vec<_> = report
        .disruptions
        .iter()
        .filter(|d| WINDOW.contains(&d.at_seconds))
        .collect();
    assert!(
        in_window.is_empty(),
        "commands decided while the budgets were closed:\n{}",
        commands(&report)
    );
    assert!(
        report
            .disruptions
            .iter()
            .any(|d| (WINDOW.end..WINDOW.end + 60).contains(&d.at_seconds)),
        "the 9m30s scale-down is consolidated once the window ends:\n{}",
        commands(&report)
    );
    held_until(&report, &pinned, PINNED_UNTIL, "do-not-disrupt");
    held_until(&report, &protected, PDB_UNTIL, "PodDisruptionBudget");
    assert_eq!(
        report.pods.pending_at_end, 0,
        "{:?}",
        report.pods.pending_reasons
    );
    assert!(
        report.cost.per_hour_at_end < report.cost.peak_per_hour,
        "${:.4}/h at the end, ${:.4}/h at the peak",
        report.cost.per_hour_at_end,
        report.cost.peak_per_hour
    );
}

/// Commands are decided within this of steady.yaml's 3m scale-down, and never after.
const SETTLED_BY: u64 = 15 * 60;

#[test]
fn a_steady_workload_settles_and_stays_settled() {
    let started = std::time::Instant::now();
    let report = scenario::run(
        load("tests/fixtures/scenarios/steady.yaml"),
        RunOptions::quiet(),
    )
    .unwrap();
    eprintln!(
        "steady.yaml: {}s simulated in {:.1}s",
        report.simulated_seconds,
        started.elapsed().as_secs_f64()
    );
    assert!(report.simulated_seconds >= 7200, "two hours steady");
    assert!(
        !report.disruptions.is_empty(),
        "the scale-down is consolidated"
    );
    for command in &report.disruptions {
        assert!(
            command.at_seconds < SETTLED_BY,
            "a command after the cluster settled:\n{}",
            commands(&report)
        );
        if let (Some(before), Some(after)) = (command.price_before, command.price_after) {
            assert!(
                after < before,
                "a command that does not lower the price:\n{}",
                commands(&report)
            );
        }
    }
    assert_eq!(
        report.pods.pending_at_end, 0,
        "{:?}",
        report.pods.pending_reasons
    );
}
