//! Disruption, black-box: budgets (count, percent, schedules, reasons, fail-closed), the cron
//! dialect against robfig's, every candidate blocker with Karpenter's message, disruption cost,
//! each method (Emptiness, Drift, multi-node, single-node, spot-to-spot, repacking), validation,
//! and the reduced simulations against full ones.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

mod disruption_support;

use std::collections::BTreeSet;
use std::time::Duration;

use disruption_support::*;
use karpenter_core::apis::labels;
use karpenter_core::apis::nodepool::DisruptionReason;
use karpenter_core::domain::disruption::budgets::{BudgetMapping, allowed_disruptions};
use karpenter_core::domain::disruption::candidates::{self, disruption_cost, eviction_cost};
use karpenter_core::domain::disruption::cron::CronSchedule;
use karpenter_core::domain::disruption::workload::{
    Cluster, NodeSpec, PodBuilder, PoolSpec, Scenario, bench_cluster,
};
use karpenter_core::domain::disruption::{
    Blocker, CommandDecision, Destination, Method, MethodOutcome, NodeEventReason, Origin, Pdb,
    UNLIMITED, Validation, decide, simulate_removal, validate,
};
use karpenter_core::domain::resources::{CPU, ResourceLimits};
use karpenter_core::domain::scheduling::workload::Rng;
use karpenter_core::domain::scheduling::{
    LabelSelector, Options, Placement, ReservedOfferingMode, Snapshot, solve,
};

// ---- budgets -----------------------------------------------------------------------------------

#[test]
fn a_count_budget_allows_that_many_nodes_even_beyond_the_node_count() {
    let allowance = allowed_disruptions(&[budget("5", None)], DisruptionReason::Empty, 3, now());
    assert_eq!(allowance.allowed, 5);
    assert!(allowance.errors.is_empty());
}

#[test]
fn percent_budgets_round_up() {
    for (nodes, count, expected) in [
        ("10%", 15, 2),
        ("10%", 1, 1),
        ("10%", 0, 0),
        ("33%", 10, 4),
        ("100%", 7, 7),
        ("0%", 9, 0),
    ] {
        let allowance = allowed_disruptions(
            &[budget(nodes, None)],
            DisruptionReason::Empty,
            count,
            now(),
        );
        assert_eq!(allowance.allowed, expected, "{nodes} of {count}");
    }
}

#[test]
fn an_empty_budget_list_allows_everything() {
    let allowance = allowed_disruptions(&[], DisruptionReason::Drifted, 10, now());
    assert_eq!(allowance.allowed, UNLIMITED);
}

#[test]
fn the_most_restrictive_active_budget_wins() {
    let budgets = [budget("5", None), budget("2", None), budget("50%", None)];
    let allowance = allowed_disruptions(&budgets, DisruptionReason::Underutilized, 10, now());
    assert_eq!(allowance.allowed, 2);
}

#[test]
fn budgets_apply_only_to_the_reasons_they_name() {
    let budgets = [
        budget("0", Some(vec![DisruptionReason::Drifted])),
        budget("3", None),
        budget("1", Some(vec![])),
    ];
    let empty = allowed_disruptions(&budgets, DisruptionReason::Empty, 10, now());
    let drifted = allowed_disruptions(&budgets, DisruptionReason::Drifted, 10, now());
    // `reasons: []` applies to no reason; a missing list to all.
    assert_eq!((empty.allowed, drifted.allowed), (3, 0));
}

#[test]
fn a_scheduled_budget_is_active_from_each_hit_for_its_duration() {
    // Daily at midnight for an hour: [00:00, 01:00).
    let budgets = [scheduled("0", "0 0 * * *", "1h"), budget("10", None)];
    for (at, expected) in [
        ("2024-06-01T00:00:00Z", 0),
        ("2024-06-01T00:59:59Z", 0),
        ("2024-06-01T01:00:00Z", 10),
        ("2024-05-31T23:59:59Z", 10),
        ("2024-06-01T12:00:00Z", 10),
    ] {
        let allowance = allowed_disruptions(&budgets, DisruptionReason::Empty, 10, ts(at));
        assert_eq!(allowance.allowed, expected, "at {at}");
    }
}

#[test]
fn descriptor_schedules_follow_robfigs_macros() {
    for (schedule, duration, at, active) in [
        ("@daily", "30m", "2024-06-01T00:10:00Z", true),
        ("@daily", "30m", "2024-06-01T00:40:00Z", false),
        ("@midnight", "1h", "2024-06-01T00:10:00Z", true),
        ("@hourly", "10m", "2024-06-01T12:05:00Z", true),
        ("@hourly", "10m", "2024-06-01T12:10:00Z", false),
        ("@weekly", "24h", "2024-06-02T18:00:00Z", true),
        ("@weekly", "24h", "2024-06-01T18:00:00Z", false),
        ("@monthly", "2h", "2024-06-01T01:00:00Z", true),
        ("@yearly", "2h", "2024-01-01T01:00:00Z", true),
        ("@annually", "2h", "2024-06-01T01:00:00Z", false),
    ] {
        let budgets = [scheduled("0", schedule, duration)];
        let allowance = allowed_disruptions(&budgets, DisruptionReason::Empty, 10, ts(at));
        let expected = if active { 0 } else { UNLIMITED };
        assert_eq!(
            allowance.allowed, expected,
            "{schedule} for {duration} at {at}"
        );
    }
}

#[test]
fn a_schedule_that_never_fires_keeps_its_budget_active() {
    // robfig gives up after five years and returns the zero time, which is never after now.
    let budgets = [scheduled("0", "0 0 30 2 *", "1h")];
    let allowance = allowed_disruptions(&budgets, DisruptionReason::Empty, 10, now());
    assert_eq!(allowance.allowed, 0);
    assert!(allowance.errors.is_empty());
}

#[test]
fn a_schedule_without_a_duration_is_never_active() {
    let mut without = scheduled("0", "* * * * *", "1h");
    without.duration = None;
    let allowance = allowed_disruptions(&[without], DisruptionReason::Empty, 10, now());
    assert_eq!(allowance.allowed, UNLIMITED);
}

#[test]
fn an_invalid_schedule_fails_closed_for_every_reason() {
    // Day-of-week 7 is valid for croner (the CRD validation) but not for robfig.
    let budgets = [
        budget("100%", None),
        Budget {
            reasons: Some(vec![DisruptionReason::Drifted]),
            ..scheduled("5", "0 0 * * 7", "1h")
        },
    ];
    for reason in [
        DisruptionReason::Empty,
        DisruptionReason::Drifted,
        DisruptionReason::Underutilized,
    ] {
        let allowance = allowed_disruptions(&budgets, reason, 10, now());
        assert_eq!(allowance.allowed, 0, "{reason:?}");
        assert_eq!(allowance.errors.len(), 1);
        assert_eq!(allowance.errors[0].category(), "invalid_schedule");
    }
}

#[test]
fn an_invalid_nodes_value_fails_closed() {
    let allowance = allowed_disruptions(&[budget("ten", None)], DisruptionReason::Empty, 10, now());
    assert_eq!(allowance.allowed, 0);
    assert_eq!(allowance.errors[0].category(), "invalid_nodes");
}

use karpenter_core::apis::nodepool::Budget;

#[test]
fn cron_schedules_find_the_next_time_as_robfig_does() {
    let after = "2024-06-01T12:00:00Z"; // a Saturday
    let table: &[(&str, &str, Option<&str>)] = &[
        (
            "*/15 * * * *",
            "2024-06-01T12:07:00Z",
            Some("2024-06-01T12:15:00Z"),
        ),
        ("0 9 * * 1-5", after, Some("2024-06-03T09:00:00Z")),
        ("0 0 1 * *", after, Some("2024-07-01T00:00:00Z")),
        ("0 0 * * sun", after, Some("2024-06-02T00:00:00Z")),
        ("0 0 1 JAN *", after, Some("2025-01-01T00:00:00Z")),
        // Both day fields restricted: either may match (the 13th is a Thursday, the 7th a
        // Friday).
        ("0 0 13 * 5", after, Some("2024-06-07T00:00:00Z")),
        // `*/2` is not a star (step above 1): either day field may match.
        ("0 0 */2 * 5", after, Some("2024-06-03T00:00:00Z")),
        // `*/1` and `?` are stars: the other day field alone decides.
        ("0 0 */1 * 5", after, Some("2024-06-07T00:00:00Z")),
        ("0 0 ? * mon", after, Some("2024-06-03T00:00:00Z")),
        // `a/step` means `a-max/step`.
        ("5/20 * * * *", after, Some("2024-06-01T12:05:00Z")),
        // Go's Atoi takes a sign.
        ("0 0 13 * +5", after, Some("2024-06-07T00:00:00Z")),
        ("0 0 29 2 *", after, Some("2028-02-29T00:00:00Z")),
        ("0 0 30 2 *", after, None),
        ("@yearly", after, Some("2025-01-01T00:00:00Z")),
        ("@weekly", after, Some("2024-06-02T00:00:00Z")),
        ("@monthly", after, Some("2024-07-01T00:00:00Z")),
        // Strictly after, at whole seconds; surrounding blanks are trimmed.
        (" 0 12 * * * ", after, Some("2024-06-02T12:00:00Z")),
        (
            "0 12 * * *",
            "2024-06-01T11:59:59.5Z",
            Some("2024-06-01T12:00:00Z"),
        ),
    ];
    for (schedule, from, expected) in table {
        let parsed = CronSchedule::parse(schedule).unwrap_or_else(|e| panic!("{schedule}: {e}"));
        assert_eq!(
            parsed.next_after(ts(from)),
            expected.map(ts),
            "{schedule:?} after {from}"
        );
    }
}

#[test]
fn cron_schedules_robfig_refuses_are_errors() {
    for schedule in [
        "0 0 * * 7",
        "0 0 L * *",
        "0 0 * * 1#2",
        "0 0 15W * *",
        "@DAILY",
        "@every 1h",
        "TZ=UTC 0 0 * * *",
        "CRON_TZ=UTC 0 0 * * *",
        "0 0 * *",
        "0 0 * * * *",
        "60 * * * *",
        "0 24 * * *",
        "0 0 0 * *",
        "0 0 * 13 *",
        "5-2 * * * *",
        "*/0 * * * *",
        "1-2-3 * * * *",
        "",
    ] {
        assert!(
            CronSchedule::parse(schedule).is_err(),
            "{schedule:?} parsed"
        );
    }
}

#[test]
fn the_budget_mapping_subtracts_disrupting_nodes_and_skips_uninitialized_ones() {
    let mut c = cluster();
    c.pools[0] = c.pools[0].clone().budgets(vec![budget("50%", None)]);
    c.nodes = vec![
        node("a", 2).pod(daemon("d-a")),
        node("b", 2).pod(pod("web", 500, 256)),
        node("c", 2).pod(pod("api", 500, 256)),
        node("d", 2),
    ];
    c.node_mut("b").unwrap().ready = false;
    c.node_mut("c").unwrap().marked_for_deletion = true;
    c.node_mut("d").unwrap().initialized = false;
    let input = c.input();
    let mapping = BudgetMapping::build(&input.nodes, &input.pools, DisruptionReason::Empty, now());
    let pool = &mapping.pools[0];
    // Three initialized nodes: ceil(50% of 3) = 2, less the not-ready and the deleting one.
    assert_eq!(
        (pool.nodes, pool.disrupting, pool.allowed, pool.available),
        (3, 2, 2, 0)
    );
    assert!(!pool.blocked);
    // Emptiness finds its empty node held back by the budget: no memo.
    let decision = decide(&input);
    expect_no_command(&decision);
    assert_eq!(
        outcome(&decision, Method::Emptiness),
        &MethodOutcome::Nothing {
            mark_consolidated: false
        }
    );
}

#[test]
fn a_pool_with_nodes_and_no_allowance_is_reported_blocked() {
    let mut c = cluster();
    c.pools[0] = c.pools[0].clone().budgets(vec![budget("0", None)]);
    c.nodes = vec![node("a", 2).pod(daemon("d-a"))];
    let decision = round(&c);
    expect_no_command(&decision);
    let report = decision.method(Method::Emptiness).unwrap();
    let pool = report
        .budgets
        .iter()
        .find(|b| b.node_pool == "on-demand")
        .unwrap();
    assert!(pool.blocked);
    assert_eq!(
        pool.blocked_message(),
        "No allowed disruptions for disruption reason Empty due to blocking budget"
    );
    // The spot pool has no nodes: allowed but not reported.
    assert_eq!(allowed(&decision, Method::Emptiness, "spot"), 0);
}

#[test]
fn budget_errors_are_listed_for_the_round_log() {
    let mut c = cluster();
    c.pools[1] = c.pools[1]
        .clone()
        .budgets(vec![scheduled("1", "0 0 L * *", "1h")]);
    let decision = round(&c);
    assert_eq!(decision.budget_errors.len(), 1);
    assert_eq!(decision.budget_errors[0].0, "spot");
}

// ---- candidates --------------------------------------------------------------------------------

#[test]
fn each_node_check_blocks_with_karpenters_message() {
    type Change = fn(&mut NodeSpec);
    let cases: &[(&str, Change, Option<&str>)] = &[
        ("unmanaged", |n| n.managed = false, None),
        (
            "no-node",
            |n| n.has_node = false,
            Some("Nodeclaim does not have an associated node"),
        ),
        (
            "uninitialized",
            |n| n.initialized = false,
            Some("Node isn't initialized"),
        ),
        (
            "deleting",
            |n| n.marked_for_deletion = true,
            Some("Node is deleting or marked for deletion"),
        ),
        (
            "nominated",
            |n| n.nominated_until = Some(now() + minutes(1)),
            Some("Node is nominated for a pending pod"),
        ),
        (
            "do-not-disrupt",
            |n| n.do_not_disrupt = true,
            Some(r#"Disruption is blocked through the "karpenter.sh/do-not-disrupt" annotation"#),
        ),
        (
            "ghost-pool",
            |n| n.pool = "ghost".to_owned(),
            Some("NodePool not found (NodePool=ghost)"),
        ),
    ];
    for (name, change, message) in cases {
        let mut c = cluster();
        let mut spec = node(name, 2).pod(pod("web", 500, 256));
        change(&mut spec);
        c.nodes = vec![spec];
        let decision = round(&c);
        let blocked = blocker(&decision, name).unwrap_or_else(|| panic!("{name} not blocked"));
        assert_eq!(blocked.message().as_deref(), *message, "{name}");
    }
}

#[test]
fn an_expired_nomination_does_not_block() {
    let mut c = cluster();
    let mut spec = node("a", 2).pod(pod("web", 500, 256));
    spec.nominated_until = Some(now() - minutes(1));
    c.nodes = vec![spec];
    assert!(blocker(&round(&c), "a").is_none());
}

#[test]
fn a_node_without_the_nodepool_label_or_in_the_queue_is_no_candidate() {
    let mut c = cluster();
    c.nodes = vec![node("a", 2), node("b", 2)];
    c.queued.insert("b".to_owned());
    let mut input = c.input();
    input.nodes[0].labels.remove(labels::NODEPOOL);
    let decision = decide(&input);
    assert_eq!(
        blocker(&decision, "a")
            .and_then(Blocker::message)
            .as_deref(),
        Some("Node doesn't have required label (label=karpenter.sh/nodepool)")
    );
    assert_eq!(blocker(&decision, "b"), Some(&Blocker::Queued));
    assert_eq!(Blocker::Queued.message(), None);
}

#[test]
fn a_pool_whose_instance_types_could_not_be_listed_blocks_its_nodes() {
    let mut c = cluster();
    c.pools[0].instance_types.clear();
    c.nodes = vec![node("a", 2).pod(daemon("d"))];
    assert_eq!(
        blocker(&round(&c), "a")
            .and_then(Blocker::message)
            .as_deref(),
        Some("NodePool not found (NodePool=on-demand)")
    );
}

#[test]
fn a_do_not_disrupt_pod_blocks_its_node_until_it_finishes() {
    for (builder, blocks) in [
        (pod("web", 500, 256).do_not_disrupt(), true),
        (daemon("agent").do_not_disrupt(), true),
        (pod("job", 500, 256).do_not_disrupt().finished(), false),
    ] {
        let mut c = cluster();
        c.nodes = vec![node("a", 2).pod(builder)];
        let decision = round(&c);
        let blocked = blocker(&decision, "a").and_then(Blocker::message);
        if blocks {
            assert!(
                blocked.as_deref().is_some_and(|m| m.starts_with(
                    r#"Pod has "karpenter.sh/do-not-disrupt" annotation (Pod=default/"#
                )),
                "{blocked:?}"
            );
        } else {
            assert!(blocked.is_none(), "{blocked:?}");
        }
    }
}

fn pdb(allowed: i32) -> Pdb {
    Pdb {
        namespace: "default".to_owned(),
        name: "web-pdb".to_owned(),
        selector: LabelSelector::from_labels(&[("app".to_owned(), "web".to_owned())].into()),
        disruptions_allowed: allowed,
        fully_blocking: false,
        always_allow_unhealthy: false,
    }
}

#[test]
fn a_pdb_without_disruptions_left_blocks_an_evictable_pod() {
    let message = "Pdb prevents pod evictions (PodDisruptionBudget=default/web-pdb)";
    let blocked_with = |pdb: Pdb, web: PodBuilder, not_ready: bool| {
        let mut c = cluster();
        let mut spec = node("a", 2).pod(web);
        spec.pods[0].not_ready = not_ready;
        c.nodes = vec![spec];
        c.pdbs = vec![pdb];
        blocker(&round(&c), "a").and_then(Blocker::message)
    };
    assert_eq!(
        blocked_with(pdb(0), pod("web", 500, 256), false).as_deref(),
        Some(message)
    );
    assert_eq!(blocked_with(pdb(1), pod("web", 500, 256), false), None);
    // A pod tolerating the disrupted taint is never evicted.
    assert_eq!(
        blocked_with(pdb(0), pod("web", 500, 256).tolerate_everything(), false),
        None
    );
    // AlwaysAllow lets unhealthy pods go.
    let always = Pdb {
        always_allow_unhealthy: true,
        ..pdb(0)
    };
    assert_eq!(
        blocked_with(always.clone(), pod("web", 500, 256), true),
        None
    );
    assert_eq!(
        blocked_with(always, pod("web", 500, 256), false).as_deref(),
        Some(message)
    );
}

#[test]
fn a_fully_blocking_pdb_keeps_its_pods_out_of_simulations() {
    let mut c = cluster();
    c.nodes = vec![node("a", 2).pod(pod("web", 500, 256)), node("b", 4)];
    c.pdbs = vec![Pdb {
        fully_blocking: true,
        ..pdb(1)
    }];
    let simulation = simulate_removal(&c.input(), &["a"]);
    assert!(simulation.pods.is_empty(), "{simulation:?}");
}

#[test]
fn drift_disrupts_a_pod_blocked_node_when_its_nodeclaim_has_a_termination_grace_period() {
    for (grace, expected) in [(Some(minutes(5)), true), (None, false)] {
        // A PDB with no disruption left blocks the pod, but it is not fully blocking: the
        // pod still moves in the simulation.
        let mut c = cluster();
        let mut spec = node("a", 4).pod(pod("web", 500, 256));
        spec.drifted_since = Some(now() - minutes(10));
        spec.termination_grace_period = grace;
        c.nodes = vec![spec];
        c.pdbs = vec![pdb(0)];
        let decision = round(&c);
        assert_eq!(decision.command.is_some(), expected, "{decision:#?}");
        if expected {
            let command = expect_command(&decision, Method::Drift);
            assert_eq!(command.replacements.len(), 1);
        }
        // Graceful methods never consider it.
        assert!(matches!(blocker(&decision, "a"), Some(Blocker::Pdb { .. })));
    }
}

#[test]
fn a_do_not_disrupt_pod_stays_out_of_the_drift_simulation() {
    let mut c = cluster();
    let mut spec = node("a", 4).pod(pod("web", 500, 256).do_not_disrupt());
    spec.drifted_since = Some(now() - minutes(10));
    spec.termination_grace_period = Some(minutes(5));
    c.nodes = vec![spec];
    let decision = round(&c);
    // Its only pod will not be evicted: nothing needs a new home, the node is deleted.
    let command = expect_command(&decision, Method::Drift);
    assert_eq!(command.decision(), CommandDecision::Delete);
}

#[test]
fn disruption_cost_adds_deletion_cost_and_priority_and_scales_with_lifetime_left() {
    let plain = pod("a", 100, 64).build().unwrap();
    assert!((eviction_cost(&plain) - 1.0).abs() < 1e-12);
    let costly = pod("b", 100, 64)
        .annotation("controller.kubernetes.io/pod-deletion-cost", "134217728")
        .priority(33_554_432)
        .build()
        .unwrap();
    assert!((eviction_cost(&costly) - 3.0).abs() < 1e-12);
    let clamped = pod("c", 100, 64).priority(2_000_000_000).build().unwrap();
    assert!((eviction_cost(&clamped) - 10.0).abs() < 1e-12);
    let unparsable = pod("d", 100, 64)
        .annotation("controller.kubernetes.io/pod-deletion-cost", "lots")
        .build()
        .unwrap();
    assert!((eviction_cost(&unparsable) - 1.0).abs() < 1e-12);

    let mut c = cluster();
    let mut spec = node("a", 2).pod(pod("x", 100, 64)).pod(daemon("d"));
    spec.created = now() - Duration::from_hours(5);
    spec.expire_after = Some(Duration::from_hours(10));
    c.nodes = vec![spec];
    let input = c.input();
    // Two pods (the DaemonSet pod counts) at half the lifetime left.
    assert!((disruption_cost(&input.nodes[0], now()) - 1.0).abs() < 1e-9);
}

#[test]
fn candidates_are_ordered_by_cost_then_name() {
    let mut c = cluster();
    c.nodes = vec![
        node("c", 4).pod(pod("c1", 100, 64)),
        node("b", 4).pod(pod("b1", 100, 64)).pod(pod("b2", 100, 64)),
        node("a", 4).pod(pod("a1", 100, 64)),
    ];
    let built = candidates::build(&c.input());
    let order: Vec<&str> = built.all.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(order, ["a", "c", "b"]);
}

// ---- emptiness ---------------------------------------------------------------------------------

#[test]
fn emptiness_deletes_the_empty_consolidatable_nodes_the_budget_allows() {
    let mut c = cluster();
    c.pools[0] = c.pools[0].clone().budgets(vec![budget("2", None)]);
    c.nodes = vec![
        node("a", 2).pod(daemon("d-a")),
        node("b", 2).pod(daemon("d-b")),
        node("c", 2),
        node("d", 2).pod(pod("web", 500, 256)),
    ];
    let decision = round(&c);
    let command = expect_command(&decision, Method::Emptiness);
    // "c" runs no pod at all: the cheapest to disrupt, then "a" by name.
    assert_eq!(names(command), ["a", "c"]);
    assert_eq!(command.decision(), CommandDecision::Delete);
    assert_eq!(decision.method(Method::Emptiness).unwrap().eligible, 3);
}

#[test]
fn daemonset_static_and_finished_pods_leave_a_node_empty_but_a_terminating_statefulset_pod_does_not()
 {
    let mut c = cluster();
    c.nodes = vec![
        node("a", 2)
            .pod(daemon("d"))
            .pod(PodBuilder::new("mirror").owner("Node"))
            .pod(pod("job", 100, 64).finished())
            .pod(pod("leaving", 100, 64).terminating()),
        node("b", 2).pod(
            PodBuilder::new("db-0")
                .requests(100, 64)
                .owner("StatefulSet")
                .terminating(),
        ),
    ];
    c.pools[0] = c.pools[0].clone().budgets(vec![budget("100%", None)]);
    let decision = round(&c);
    let command = expect_command(&decision, Method::Emptiness);
    assert_eq!(names(command), ["a"]);
}

#[test]
fn emptiness_waits_for_the_consolidatable_condition() {
    let mut c = cluster();
    let mut spec = node("a", 2).pod(daemon("d"));
    spec.consolidatable = false;
    c.nodes = vec![spec];
    let decision = round(&c);
    expect_no_command(&decision);
    assert_eq!(
        outcome(&decision, Method::Emptiness),
        &MethodOutcome::NoCandidates
    );
    assert!(
        decision
            .method(Method::Emptiness)
            .unwrap()
            .events
            .is_empty()
    );
}

#[test]
fn consolidate_after_never_disables_consolidation_with_an_event() {
    let mut c = cluster();
    c.pools[0] = c.pools[0].clone().never_consolidate();
    c.nodes = vec![node("a", 2).pod(daemon("d"))];
    let decision = round(&c);
    expect_no_command(&decision);
    assert_eq!(
        events(
            &decision,
            Method::Emptiness,
            NodeEventReason::Unconsolidatable,
            "a"
        ),
        [r#"NodePool "on-demand" has consolidation disabled"#]
    );
}

#[test]
fn a_memo_stops_a_method_once_it_computed_its_budgets() {
    let mut c = cluster();
    c.nodes = vec![node("a", 2).pod(daemon("d"))];
    c.memos.emptiness = true;
    let decision = round(&c);
    expect_no_command(&decision);
    let report = decision.method(Method::Emptiness).unwrap();
    assert_eq!(report.outcome, MethodOutcome::Memo);
    assert!(!report.budgets.is_empty());
}

#[test]
fn emptiness_runs_before_drift() {
    let mut c = cluster();
    let mut drifted = node("drifted", 4).pod(pod("web", 500, 256));
    drifted.drifted_since = Some(now() - minutes(30));
    c.nodes = vec![drifted, node("empty", 2).pod(daemon("d"))];
    let decision = round(&c);
    assert_eq!(
        names(expect_command(&decision, Method::Emptiness)),
        ["empty"]
    );
}

// ---- drift -------------------------------------------------------------------------------------

#[test]
fn drift_replaces_the_oldest_drifted_node_with_whatever_its_pods_need() {
    let mut c = cluster();
    let mut young = node("young", 8).pod(pod("big-a", 6000, 1024));
    young.drifted_since = Some(now() - minutes(5));
    let mut old = node("old", 8).pod(pod("big-b", 6000, 1024));
    old.drifted_since = Some(now() - minutes(50));
    c.nodes = vec![young, old];
    let decision = round(&c);
    let command = expect_command(&decision, Method::Drift);
    assert_eq!(names(command), ["old"]);
    assert_eq!(command.replacements.len(), 1);
    // No price filter: the replacement may cost what the node did.
    assert!(command.price_before.is_none());
    assert_eq!(
        command.placements,
        [("default/big-b".to_owned(), Destination::Replacement(0))]
    );
}

#[test]
fn drift_leaves_empty_drifted_nodes_to_emptiness() {
    let mut c = cluster();
    c.pools[0] = c.pools[0].clone().never_consolidate();
    let mut spec = node("a", 2).pod(daemon("d"));
    spec.drifted_since = Some(now() - minutes(5));
    c.nodes = vec![spec];
    let decision = round(&c);
    expect_no_command(&decision);
    assert_eq!(decision.method(Method::Drift).unwrap().eligible, 1);
    assert_eq!(decision.method(Method::Drift).unwrap().simulations, 0);
}

#[test]
fn drift_reports_pods_that_would_not_schedule() {
    let mut c = cluster();
    let mut spec = node("a", 2).pod(pod("gpu-job", 500, 256).node_selector("gpu", "true"));
    spec.drifted_since = Some(now() - minutes(5));
    c.nodes = vec![spec];
    let decision = round(&c);
    expect_no_command(&decision);
    let messages = events(
        &decision,
        Method::Drift,
        NodeEventReason::DisruptionBlocked,
        "a",
    );
    assert_eq!(messages.len(), 1);
    assert!(
        messages[0].starts_with("Not all pods would schedule, default/gpu-job => "),
        "{messages:?}"
    );
}

// ---- multi-node --------------------------------------------------------------------------------

/// A large node that is no consolidation candidate, with room to spare.
fn destination(name: &str, cpus: usize) -> NodeSpec {
    let mut spec = node(name, cpus).pod(pod(&format!("{name}-app"), 500, 256));
    spec.consolidatable = false;
    spec
}

#[test]
fn multi_node_deletes_the_longest_prefix_whose_pods_fit_elsewhere() {
    let mut c = unbudgeted();
    c.nodes = vec![destination("big", 16)];
    c.nodes.extend(numbered("small-", 4, 2, 1000));
    let decision = round(&c);
    let command = expect_command(&decision, Method::MultiNode);
    assert_eq!(command.decision(), CommandDecision::Delete);
    assert_eq!(
        names(command),
        ["small-000", "small-001", "small-002", "small-003"]
    );
    assert_eq!(command.destinations(), ["big"]);
    assert_eq!(command.price_after, Some(0.0));
}

#[test]
fn multi_node_replaces_several_nodes_by_one_cheaper_node() {
    let mut c = unbudgeted();
    c.nodes = numbered("n", 3, 8, 1000);
    let decision = round(&c);
    let command = expect_command(&decision, Method::MultiNode);
    assert_eq!(command.candidates.len(), 3);
    assert_eq!(command.replacements.len(), 1);
    let eight = it(8).offerings[0].price;
    // The same-type filter: only types cheaper than the cheapest candidate of a type the
    // replacement could be (8 CPUs) stay.
    for t in &command.replacements[0].instance_types {
        assert!(t.offerings[0].price < eight, "{}", t.name);
    }
    assert!(command.price_after.unwrap() < command.price_before.unwrap());
}

#[test]
fn the_same_type_filter_refuses_a_replacement_no_cheaper_than_a_candidate_of_its_type() {
    // Both pods need a 4-CPU node: replacing the two 4-CPU nodes by one 4-CPU node is just
    // deleting one, which multi-node leaves to single-node consolidation: "full" goes, its
    // pod moving next to the tiny one.
    let mut c = unbudgeted();
    c.nodes = vec![
        node("full", 4).pod(pod("big", 3500, 512)),
        node("light", 4).pod(pod("tiny", 200, 128)),
    ];
    let decision = round(&c);
    assert_eq!(
        outcome(&decision, Method::MultiNode),
        &MethodOutcome::Nothing {
            mark_consolidated: true
        }
    );
    let command = expect_command(&decision, Method::SingleNode);
    assert_eq!(names(command), ["full"]);
    assert_eq!(command.decision(), CommandDecision::Delete);
    assert_eq!(command.destinations(), ["light"]);
}

#[test]
fn multi_node_takes_at_most_101_candidates() {
    let mut c = unbudgeted();
    c.nodes = vec![destination("big", 32)];
    c.nodes.extend(numbered("n", 150, 1, 100));
    let decision = round(&c);
    let command = expect_command(&decision, Method::MultiNode);
    assert_eq!(command.candidates.len(), 101);
    // The limit is an option.
    c.options.multi_node_limit = 11;
    let decision = round(&c);
    assert_eq!(
        expect_command(&decision, Method::MultiNode)
            .candidates
            .len(),
        11
    );
}

#[test]
fn multi_node_returns_its_last_valid_command_when_its_budget_runs_out() {
    let mut c = unbudgeted();
    c.nodes = vec![destination("big", 16)];
    c.nodes.extend(numbered("n", 8, 2, 500));
    c.options.multi_node_budget = Some(1);
    let decision = round(&c);
    let report = decision.method(Method::MultiNode).unwrap();
    assert!(report.timed_out);
    assert_eq!(report.simulations, 1);
    // The first midpoint of [1, 7] is 4: five candidates.
    assert_eq!(
        expect_command(&decision, Method::MultiNode)
            .candidates
            .len(),
        5
    );
}

// ---- single-node -------------------------------------------------------------------------------

#[test]
fn single_node_replaces_a_node_by_a_cheaper_one() {
    let mut c = cluster();
    c.nodes = vec![node("a", 8).pod(pod("web", 500, 256))];
    let decision = round(&c);
    let command = expect_command(&decision, Method::SingleNode);
    assert_eq!(command.decision(), CommandDecision::Replace);
    let replacement = &command.replacements[0];
    let eight = it(8).offerings[0].price;
    assert!(
        replacement
            .instance_types
            .iter()
            .all(|t| t.offerings[0].price < eight)
    );
    // The instance-type requirement follows the kept types.
    let names: BTreeSet<String> = replacement
        .instance_types
        .iter()
        .map(|t| t.name.clone())
        .collect();
    let requirement = replacement.requirements.get(labels::INSTANCE_TYPE).unwrap();
    let allowed: BTreeSet<String> = requirement
        .values()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(names, allowed);
    assert_eq!(
        command.placements,
        [("default/web".to_owned(), Destination::Replacement(0))]
    );
}

#[test]
fn single_node_deletes_a_node_whose_pods_fit_elsewhere() {
    let mut c = cluster();
    c.nodes = vec![
        destination("big", 8),
        node("a", 2).pod(pod("web", 500, 256)),
    ];
    let decision = round(&c);
    let command = expect_command(&decision, Method::SingleNode);
    assert_eq!(command.decision(), CommandDecision::Delete);
    assert_eq!(command.destinations(), ["big"]);
}

#[test]
fn single_node_does_not_replace_by_a_node_that_is_not_cheaper() {
    let mut c = cluster();
    c.nodes = vec![node("a", 8).pod(pod("big", 7500, 1024))];
    let decision = round(&c);
    expect_no_command(&decision);
    assert_eq!(
        events(
            &decision,
            Method::SingleNode,
            NodeEventReason::Unconsolidatable,
            "a"
        ),
        ["Can't replace with a cheaper node"]
    );
    // The explanation names the cheapest replacement considered: the node's own type.
    let considered = &decision.method(Method::SingleNode).unwrap().replacements;
    let eight = it(8);
    assert_eq!(considered.len(), 1);
    assert_eq!(considered[0].candidates, ["a"]);
    assert_eq!(
        considered[0].cheapest,
        Some((eight.name.clone(), eight.offerings[0].price))
    );
    assert!((considered[0].price - eight.offerings[0].price).abs() < 1e-12);
}

#[test]
fn when_empty_pools_leave_underutilized_nodes_alone() {
    let mut c = cluster();
    c.pools[0] = c.pools[0].clone().when_empty();
    c.nodes = vec![node("a", 8).pod(pod("web", 500, 256))];
    let decision = round(&c);
    expect_no_command(&decision);
    assert_eq!(
        events(
            &decision,
            Method::SingleNode,
            NodeEventReason::Unconsolidatable,
            "a"
        ),
        [r#"NodePool "on-demand" has non-empty consolidation disabled"#]
    );
}

#[test]
fn an_on_demand_node_replaced_from_a_pool_allowing_spot_is_narrowed_to_spot() {
    let mut c = cluster();
    c.pools = vec![PoolSpec::new(
        "mixed",
        &[labels::CAPACITY_TYPE_ON_DEMAND, labels::CAPACITY_TYPE_SPOT],
        types(),
    )];
    c.nodes = vec![
        NodeSpec::new("a", "mixed", it(8), labels::CAPACITY_TYPE_ON_DEMAND)
            .zone("test-zone-1")
            .pod(pod("web", 500, 256)),
    ];
    let decision = round(&c);
    let command = expect_command(&decision, Method::SingleNode);
    let capacity = command.replacements[0]
        .requirements
        .get(labels::CAPACITY_TYPE)
        .unwrap();
    assert_eq!(capacity.values().len(), 1);
    assert!(capacity.has(labels::CAPACITY_TYPE_SPOT));
}

#[test]
fn spot_to_spot_consolidation_needs_its_feature_gate_and_fifteen_cheaper_types() {
    // Only the spot pool: the fake on-demand price equals the spot one, so an on-demand pool
    // would take the pod (and that is not spot-to-spot).
    let mut c = cluster();
    c.pools.remove(0);
    c.nodes = vec![spot_node("a", 8).pod(pod("web", 500, 256))];
    let decision = round(&c);
    expect_no_command(&decision);
    assert_eq!(
        events(
            &decision,
            Method::SingleNode,
            NodeEventReason::Unconsolidatable,
            "a"
        ),
        ["SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node"]
    );

    c.options.spot_to_spot = true;
    let decision = round(&c);
    expect_no_command(&decision);
    assert_eq!(
        events(
            &decision,
            Method::SingleNode,
            NodeEventReason::Unconsolidatable,
            "a"
        ),
        [
            "SpotToSpotConsolidation requires 15 cheaper instance type options than the current candidate to consolidate, got 7"
        ]
    );

    c.nodes = vec![spot_node("a", 32).pod(pod("web", 500, 256))];
    let decision = round(&c);
    let command = expect_command(&decision, Method::SingleNode);
    assert_eq!(command.replacements[0].instance_types.len(), 15);
}

#[test]
fn single_node_remembers_the_pools_its_budget_did_not_reach() {
    let mut c = cluster();
    c.nodes = vec![
        node("a", 8).pod(pod("big-a", 7500, 1024)),
        spot_node("b", 8).pod(pod("big-b", 7500, 1024)),
    ];
    c.options.single_node_budget = Some(1);
    let decision = round(&c);
    expect_no_command(&decision);
    let report = decision.method(Method::SingleNode).unwrap();
    assert!(report.timed_out);
    assert_eq!(report.evaluated, 1);
    assert_eq!(decision.single_node_unseen_pools, ["spot"]);
    // Next round starts with the pool left unseen.
    let mut input = c.input();
    input.single_node_unseen_pools = decision.single_node_unseen_pools.clone();
    let next = decide(&input);
    let events = &next.method(Method::SingleNode).unwrap().events;
    assert_eq!(events.first().map(|e| e.node.as_str()), Some("b"));
}

#[test]
fn a_single_node_pass_out_of_budget_goes_on_with_the_candidates_it_has_not_judged() {
    let mut c = unbudgeted();
    // Three full nodes: none can be deleted or replaced by anything cheaper.
    c.nodes = vec![
        node("a", 8).pod(pod("big-a", 7500, 1024)),
        node("b", 8).pod(pod("big-b", 7500, 1024)),
        node("c", 8).pod(pod("big-c", 7500, 1024)),
    ];
    c.options.single_node_budget = Some(1);
    let mut input = c.input();
    let mut judged_in_turn = Vec::new();
    for turn in 0..3 {
        let decision = decide(&input);
        expect_no_command(&decision);
        let report = decision.method(Method::SingleNode).unwrap();
        // One simulation per round; the last candidate ends the pass.
        assert_eq!(report.timed_out, turn < 2, "round {turn}");
        assert_eq!(report.judged.len(), 1);
        judged_in_turn.extend(report.judged.iter().cloned());
        input
            .memos
            .single_node_judged
            .extend(report.judged.iter().cloned());
    }
    judged_in_turn.sort();
    assert_eq!(
        judged_in_turn,
        ["a", "b", "c"],
        "each round judged a new candidate"
    );
    // Every candidate judged: the pass completes without a simulation and may be memoized.
    let decision = decide(&input);
    let report = decision.method(Method::SingleNode).unwrap();
    assert!(!report.timed_out);
    assert_eq!(report.simulations, 0);
    assert_eq!(
        report.outcome,
        MethodOutcome::Nothing {
            mark_consolidated: true
        }
    );
}

#[test]
fn a_pod_that_would_land_on_an_uninitialized_node_blocks_consolidation() {
    let mut c = cluster();
    let mut starting = node("starting", 8);
    starting.initialized = false;
    c.nodes = vec![starting, node("a", 2).pod(pod("web", 500, 256))];
    // Only "a" is a candidate and its pod fits only on the node still starting.
    let decision = round(&c);
    let messages = events(
        &decision,
        Method::SingleNode,
        NodeEventReason::Unconsolidatable,
        "a",
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("would schedule against uninitialized nodeclaim/starting-claim")),
        "{messages:?}"
    );
    assert!(
        decision
            .command
            .as_ref()
            .is_none_or(|c| c.decision() != CommandDecision::Delete)
    );
}

#[test]
fn pending_pods_that_cannot_schedule_do_not_block_consolidation() {
    let mut c = cluster();
    c.nodes = vec![
        destination("big", 8),
        node("a", 2).pod(pod("web", 500, 256)),
    ];
    c.pending = vec![
        pod("gpu-job", 500, 256)
            .node_selector("gpu", "true")
            .build()
            .unwrap(),
    ];
    let decision = round(&c);
    let command = expect_command(&decision, Method::SingleNode);
    assert_eq!(command.decision(), CommandDecision::Delete);
}

#[test]
fn a_reserved_node_whose_offering_is_gone_is_deleted_but_never_replaced() {
    let reserved = |name: &str| {
        NodeSpec::new(name, "on-demand", it(8), labels::CAPACITY_TYPE_RESERVED)
            .zone("test-zone-1")
            .pod(pod("web", 500, 256))
    };
    let mut c = cluster();
    c.nodes = vec![reserved("a")];
    let decision = round(&c);
    expect_no_command(&decision);
    assert_eq!(
        events(
            &decision,
            Method::SingleNode,
            NodeEventReason::Unconsolidatable,
            "a"
        ),
        ["Can't replace with a cheaper node"]
    );
    c.nodes.push(destination("big", 8));
    let decision = round(&c);
    assert_eq!(
        expect_command(&decision, Method::SingleNode).decision(),
        CommandDecision::Delete
    );
}

// ---- validation --------------------------------------------------------------------------------

fn single_replace() -> Cluster {
    let mut c = cluster();
    c.nodes = vec![node("a", 8).pod(pod("web", 500, 256))];
    c
}

#[test]
fn validation_keeps_a_consolidation_when_nothing_changed() {
    let c = single_replace();
    let decision = round(&c);
    let command = expect_command(&decision, Method::SingleNode);
    assert_eq!(
        validate(command, &c.input()),
        Validation::Keep {
            command: command.clone(),
            failed_validations: 0
        }
    );
}

#[test]
fn validation_abandons_a_command_whose_candidate_was_nominated() {
    let mut c = single_replace();
    let command = round(&c).command.unwrap();
    c.node_mut("a").unwrap().nominated_until = Some(now() + minutes(1));
    let abandoned = expect_abandoned(&command, &c);
    assert_eq!(abandoned.failed_validations, 1);
}

#[test]
fn validation_abandons_a_command_the_budgets_no_longer_allow() {
    let mut c = single_replace();
    let command = round(&c).command.unwrap();
    c.pools[0] = c.pools[0].clone().budgets(vec![budget("0", None)]);
    let abandoned = expect_abandoned(&command, &c);
    assert_eq!(
        abandoned.reason,
        "a candidate can no longer be disrupted without violating budgets"
    );
    assert_eq!(abandoned.failed_validations, 1);
}

#[test]
fn validation_abandons_a_delete_that_now_needs_a_new_node() {
    let mut c = cluster();
    c.nodes = vec![
        destination("big", 2),
        node("a", 2).pod(pod("web", 1000, 256)),
    ];
    let command = round(&c).command.unwrap();
    assert_eq!(command.decision(), CommandDecision::Delete);
    // Meanwhile a pod took the room on "big".
    arrive(&mut c, "big", pod("late", 1000, 256));
    let abandoned = expect_abandoned(&command, &c);
    assert_eq!(abandoned.failed_validations, 0);
}

#[test]
fn validation_abandons_a_replacement_whose_instance_types_are_no_longer_offered() {
    let mut c = single_replace();
    let command = round(&c).command.unwrap();
    let cheapest = command.replacements[0].instance_types[0].name.clone();
    for pool in &mut c.pools {
        pool.instance_types.retain(|t| t.name != cheapest);
    }
    assert!(matches!(
        validate(&command, &c.input()),
        Validation::Abandon(_)
    ));
}

#[test]
fn emptiness_validation_keeps_the_candidates_still_empty() {
    let mut c = unbudgeted();
    c.nodes = vec![
        node("a", 2).pod(daemon("d-a")),
        node("b", 2).pod(daemon("d-b")),
    ];
    let command = round(&c).command.unwrap();
    assert_eq!(command.candidates.len(), 2);
    arrive(&mut c, "b", pod("web", 100, 64));
    let Validation::Keep {
        command: kept,
        failed_validations,
    } = validate(&command, &c.input())
    else {
        panic!("abandoned");
    };
    assert_eq!(names(&kept), ["a"]);
    assert_eq!(failed_validations, 0);
    // Nothing left: abandoned, every candidate counted.
    arrive(&mut c, "a", pod("api", 100, 64));
    let abandoned = expect_abandoned(&command, &c);
    assert_eq!(abandoned.failed_validations, 2);
}

#[test]
fn drift_commands_are_not_validated() {
    let mut c = cluster();
    let mut spec = node("a", 4).pod(pod("web", 500, 256));
    spec.drifted_since = Some(now() - minutes(5));
    c.nodes = vec![spec];
    let command = round(&c).command.unwrap();
    c.node_mut("a").unwrap().nominated_until = Some(now() + minutes(1));
    assert!(matches!(
        validate(&command, &c.input()),
        Validation::Keep { .. }
    ));
}

// ---- simulations -------------------------------------------------------------------------------

/// Where each pod of a plan went: an existing node's name or "claim <i>", or nothing.
fn destinations_of(
    plan: &karpenter_core::domain::scheduling::Plan,
    pods: usize,
    node_name: impl Fn(usize) -> String,
) -> Vec<Option<String>> {
    plan.placements(pods)
        .into_iter()
        .map(|p| match p {
            Some(Placement::Existing(node)) => Some(node_name(node)),
            Some(Placement::NewNodeClaim(i)) => Some(format!("claim {i}")),
            None => None,
        })
        .collect()
}

/// A bench cluster with the corners the reduction must respect: nodes still starting,
/// pending pods (placeable and not), a deleting node, a CPU limit on a pool, pods with zonal
/// affinity and anti-affinity.
fn varied_cluster(seed: u64) -> Cluster {
    let scenario = if seed.is_multiple_of(2) {
        Scenario::Steady
    } else {
        Scenario::Underutilized
    };
    let mut c = bench_cluster(60, scenario, seed);
    let mut rng = Rng::new(seed + 1000);
    for node in &mut c.nodes {
        match rng.below(20) {
            0 => node.initialized = false,
            1 => node.marked_for_deletion = true,
            _ => {}
        }
    }
    if seed.is_multiple_of(3) {
        let used: i64 = c
            .nodes
            .iter()
            .filter(|n| n.pool == "on-demand")
            .map(|n| n.instance_type.capacity.cpu)
            .sum();
        c.pools[0].limits = ResourceLimits::unlimited().with(CPU, used + 8000);
    }
    c.pending = vec![
        pod("pending-small", 100, 64).build().unwrap(),
        pod("pending-gpu", 100, 64)
            .node_selector("gpu", "true")
            .build()
            .unwrap(),
    ];
    for (i, node) in c.nodes.iter_mut().enumerate().filter(|(i, _)| i % 7 == 3) {
        node.pods.push(
            pod(&format!("zonal-{i}"), 100, 64)
                .label("app", "zonal")
                .anti_affinity(labels::ZONE, "zonal-peer")
                .build()
                .unwrap(),
        );
        node.pods.push(
            pod(&format!("follower-{i}"), 100, 64)
                .label("app", "follower")
                .affinity(labels::ZONE, "zonal")
                .build()
                .unwrap(),
        );
    }
    c
}

/// 150 nodes of 2 to 8 CPUs, a third full, the rest with room; plain pods, pods pinned to a
/// zone, zonal spread and one-per-node pods.
fn roomy_cluster(seed: u64) -> Cluster {
    let mut rng = Rng::new(seed + 7);
    let mut c = cluster();
    let zones = ["test-zone-1", "test-zone-2", "test-zone-3"];
    for n in 0..150 {
        let cpus = 2 + rng.below(7);
        let mut spec = node(&format!("r{n:03}"), cpus).zone(zones[n % 3]);
        let budget_millis =
            i64::try_from(cpus).unwrap() * 1000 * if n % 3 == 0 { 9 } else { 5 } / 10;
        let mut used = 0;
        for p in 0..6 {
            let cpu = *rng.pick(&[100, 200, 300, 500]);
            if used + cpu > budget_millis {
                break;
            }
            used += cpu;
            let name = format!("r{n:03}-{p}");
            let mut builder = pod(&name, cpu, 128).label("app", &format!("app-{}", rng.below(6)));
            builder = match rng.below(8) {
                0 => builder.node_selector(labels::ZONE, zones[rng.below(3)]),
                1 => builder
                    .spread(labels::ZONE, "app-1", 3)
                    .label("app", "app-1"),
                2 => builder
                    .anti_affinity(labels::HOSTNAME, "solo")
                    .label("app", "solo"),
                _ => builder,
            };
            spec = spec.pod(builder);
        }
        spec.initialized = rng.below(15) != 0;
        c.nodes.push(spec);
    }
    if seed.is_multiple_of(2) {
        c.pools[0].limits = ResourceLimits::unlimited().with(CPU, 700_000);
    }
    c.pending = vec![pod("pending", 300, 128).build().unwrap()];
    c
}

/// A roomy cluster where every node also runs one replica of a Deployment with required
/// hostname anti-affinity (the scale scenario's one-per-node pods): a simulation can prove
/// such a pod fits no node past its prefix only by the nodes' replicas.
fn one_per_node_cluster(seed: u64) -> Cluster {
    let mut c = roomy_cluster(seed);
    for (n, node) in c.nodes.iter_mut().enumerate() {
        node.pods.push(
            pod(&format!("one-{n:03}"), 10, 16)
                .anti_affinity(labels::HOSTNAME, "one")
                .label("app", "one")
                .build()
                .unwrap(),
        );
    }
    c
}

/// A roomy cluster where some nodes carry a taint no pod tolerates: twins of untainted nodes
/// but for the taint, which a simulation must not put in the same node class.
fn tainted_twins_cluster(seed: u64) -> Cluster {
    let mut c = roomy_cluster(seed);
    let mut rng = Rng::new(seed + 11);
    for node in &mut c.nodes {
        if rng.below(3) == 0 {
            *node = node.clone().taint("dedicated");
        }
    }
    c
}

#[test]
fn reduced_simulations_answer_as_the_full_cluster_would() {
    let mut compared = 0;
    for seed in 0..42u64 {
        let c = if seed < 12 {
            varied_cluster(seed)
        } else if seed < 30 {
            roomy_cluster(seed)
        } else if seed < 36 {
            one_per_node_cluster(seed)
        } else {
            tainted_twins_cluster(seed)
        };
        let input = c.input();
        let mut rng = Rng::new(seed);
        let names: Vec<&str> = input.nodes.iter().map(|n| n.name.as_str()).collect();
        for trial in 0..6 {
            let size = if trial == 5 { 30 } else { 1 + rng.below(4) };
            let mut chosen: Vec<&str> = Vec::new();
            while chosen.len() < size.min(names.len()) {
                let name = *rng.pick(&names);
                if !chosen.contains(&name) {
                    chosen.push(name);
                }
            }
            let simulation = simulate_removal(&input, &chosen);

            // The full simulation: every other node as it is.
            let excluded: Vec<usize> = chosen
                .iter()
                .filter_map(|n| input.nodes.iter().find(|s| s.name == *n))
                .filter_map(|s| s.existing)
                .collect();
            let mut full = Snapshot {
                existing_nodes: Vec::new(),
                ..input.scheduling.clone()
            };
            let mut kept = Vec::new();
            for (i, node) in input.scheduling.existing_nodes.iter().enumerate() {
                if !excluded.contains(&i) {
                    full.existing_nodes.push(node.clone());
                    kept.push(i);
                }
            }
            let pending = input.pending_pods;
            let mut pods = input.scheduling.pods[..pending].to_vec();
            for name in &chosen {
                let node = input.nodes.iter().find(|s| s.name == *name).unwrap();
                for p in &node.pods {
                    if candidates::is_currently_reschedulable(p, &input.pdbs) {
                        pods.push(p.pod.clone());
                    }
                }
            }
            pods.extend_from_slice(&input.scheduling.pods[pending..]);
            full.pods = pods;
            let options = Options {
                reserved_offering_mode: ReservedOfferingMode::Fallback,
                ..Options::default()
            };
            let plan = solve(&full, &options);

            assert_eq!(simulation.pods.len(), full.pods.len());
            let reduced_at = destinations_of(&simulation.plan, full.pods.len(), |n| {
                input.scheduling.existing_nodes[n].name.clone()
            });
            let full_at = destinations_of(&plan, full.pods.len(), |n| {
                full.existing_nodes[n].name.clone()
            });
            assert_eq!(reduced_at, full_at, "seed {seed} trial {trial}: {chosen:?}");
            let claim_types = |p: &karpenter_core::domain::scheduling::Plan| {
                p.new_node_claims
                    .iter()
                    .map(|c| c.instance_type_names().join(","))
                    .collect::<Vec<_>>()
            };
            assert_eq!(
                claim_types(&simulation.plan),
                claim_types(&plan),
                "seed {seed}"
            );
            compared += 1;
        }
    }
    assert_eq!(compared, 252);
}

#[test]
fn simulated_pods_carry_their_origin() {
    let mut c = cluster();
    let mut leaving = node("leaving", 2).pod(pod("old", 100, 64));
    leaving.marked_for_deletion = true;
    c.nodes = vec![
        leaving,
        node("a", 2).pod(pod("web", 100, 64)),
        destination("big", 8),
    ];
    c.pending = vec![pod("new", 100, 64).build().unwrap()];
    let simulation = simulate_removal(&c.input(), &["a"]);
    let origins: Vec<(&str, Origin)> = simulation
        .pods
        .iter()
        .map(|p| (p.key.as_str(), p.origin))
        .collect();
    assert_eq!(
        origins,
        [
            ("default/new", Origin::Pending),
            ("default/web", Origin::Candidate),
            ("default/old", Origin::Deleting),
        ]
    );
    assert!(simulation.all_non_pending_scheduled());
}

// ---- repacking ---------------------------------------------------------------------------------

#[test]
fn repacking_replaces_several_nodes_by_fewer_cheaper_ones_where_karpenter_gives_up() {
    let mut c = unbudgeted();
    c.nodes = vec![
        node("n1", 21).pod(pod("a", 20_000, 1024)),
        node("n2", 21)
            .pod(pod("b", 10_000, 1024))
            .pod(pod("c", 10_000, 1024)),
        node("n3", 21)
            .pod(pod("d", 10_000, 1024))
            .pod(pod("e", 10_000, 1024)),
    ];
    let decision = round(&c);
    expect_no_command(&decision);
    c.options.repack = true;
    let decision = round(&c);
    let command = expect_command(&decision, Method::Repack);
    assert_eq!(command.candidates.len(), 3);
    assert_eq!(command.replacements.len(), 2);
    assert!(command.price_after.unwrap() < command.price_before.unwrap() * 0.99);
}

#[test]
fn repacking_splits_a_node_whose_pods_topology_spread_sends_to_two_zones() {
    let mut c = unbudgeted();
    // One big node in zone 1 holds pods spread over zones with maxSkew 1; zone 2 holds as many
    // on another node. Moving the big node's pods needs two nodes (zones 1 and 3 are then the
    // least loaded), which Karpenter refuses ("Can't remove without creating 2 candidates").
    let spread = |name: &str| {
        pod(name, 1000, 512)
            .label("app", "web")
            .spread(labels::ZONE, "web", 1)
    };
    let mut big = node("big", 32).zone("test-zone-1");
    let mut other = node("other", 8).zone("test-zone-2");
    for i in 0..6 {
        big = big.pod(spread(&format!("big-{i}")));
        other = other.pod(spread(&format!("other-{i}")));
    }
    c.nodes = vec![big, other];
    let decision = round(&c);
    expect_no_command(&decision);
    c.options.repack = true;
    let decision = round(&c);
    let command = expect_command(&decision, Method::Repack);
    assert!(command.candidate_names().contains(&"big"), "{command:#?}");
    assert!(command.replacements.len() >= 2, "{command:#?}");
    assert!(command.price_after.unwrap() < command.price_before.unwrap() * 0.99);
}

/// A signature of the cluster's nodes: sorted (instance type, capacity type, zone).
fn signature(c: &Cluster) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = c
        .nodes
        .iter()
        .map(|n| {
            (
                n.instance_type.name.clone(),
                n.capacity_type.clone(),
                n.zone.clone(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn repeated_rounds_with_repacking_never_undo_a_previous_command() {
    let sizes = [2000, 3000, 5000, 8000, 10_000, 12_000];
    let mut repacks = 0;
    for seed in 0..8u64 {
        let mut rng = Rng::new(seed);
        let mut c = cluster();
        c.options.repack = true;
        c.pools[0] = c.pools[0].clone().budgets(vec![budget("100%", None)]);
        for n in 0..10 {
            let mut spec = node(&format!("n{n}"), 32);
            let mut total = 0;
            for p in 0..3 {
                let cpu = *rng.pick(&sizes);
                if total + cpu > 20_000 {
                    break;
                }
                total += cpu;
                spec = spec.pod(pod(&format!("n{n}-p{p}"), cpu, 512));
            }
            // Right-size the node as Karpenter launched it.
            let cpus = usize::try_from(total / 1000 + 1).unwrap();
            spec.instance_type = it(cpus.min(32));
            c.nodes.push(spec);
        }
        let mut seen = vec![signature(&c)];
        let mut price = c.price();
        let mut settled = false;
        for _ in 0..60 {
            let decision = round(&c);
            let Some(command) = decision.command else {
                settled = true;
                break;
            };
            if command.method == Method::Repack {
                repacks += 1;
            }
            c.apply(&command);
            let now = c.price();
            assert!(
                now < price,
                "seed {seed}: {command:#?} did not save ({price} -> {now})"
            );
            price = now;
            let state = signature(&c);
            assert!(!seen.contains(&state), "seed {seed}: a state came back");
            seen.push(state);
            assert!(
                c.pending.is_empty(),
                "seed {seed}: pods left without a node"
            );
        }
        assert!(settled, "seed {seed} never settled");
    }
    assert!(repacks > 0, "no round repacked");
}
