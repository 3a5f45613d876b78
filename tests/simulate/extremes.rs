//! Valid objects at the schema's limits do not stall the daemon: a NodePool with 100
//! requirements, 50 budgets with schedules, limits of exa-scale quantities and a 63-character
//! name is read by the watch, gets its status from its actor, and the cluster's other pool
//! keeps provisioning as if it were not there.

use std::time::Duration;

use karpenter::sim::scenario::Simulation;
use karpenter_core::apis::NodePool;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use super::support::{in_simulation, is_bound, pods, small_without_consolidation};

/// The extreme pool: every list at its schema maximum, quantities far past any cluster.
fn extreme_nodepool(name: &str) -> NodePool {
    let mut requirements = vec![json!({
        "key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand", "spot"],
    })];
    for i in 1..100 {
        requirements.push(json!({
            "key": format!("example.com/extreme-{i}"),
            "operator": "In",
            "values": [format!("value-{i}")],
        }));
    }
    let budgets: Vec<serde_json::Value> = (0..50)
        .map(|i| {
            json!({
                "nodes": format!("{}%", i % 100),
                "schedule": format!("{} {} * * *", i % 60, i % 24),
                "duration": "30m",
            })
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": { "name": name },
        "spec": {
            "template": { "spec": {
                "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
                "requirements": requirements,
                "taints": [{ "key": "extreme", "value": "true", "effect": "NoSchedule" }],
            }},
            "disruption": { "consolidateAfter": "30s", "budgets": budgets },
            "limits": { "cpu": "1E", "memory": "8Ei", "nvidia.com/gpu": "1E" },
        },
    }))
    .unwrap()
}

#[test]
fn a_nodepool_at_the_schema_limits_is_read_and_does_not_stall_provisioning() {
    in_simulation(|| async {
        let mut sim = Simulation::start(small_without_consolidation(), None)
            .await
            .unwrap();
        let name = "x".repeat(63);
        Api::<NodePool>::all(sim.client())
            .create(&PostParams::default(), &extreme_nodepool(&name))
            .await
            .unwrap();
        assert!(sim.advance(Duration::from_secs(30)).await);
        let seen = sim.view().nodepool(&name).expect("the watch read the pool");
        assert_eq!(seen.spec.template.spec.requirements.len(), 100);
        assert_eq!(seen.spec.disruption.budgets.len(), 50);
        let status = Api::<NodePool>::all(sim.client())
            .get(&name)
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        assert!(
            status
                .conditions
                .iter()
                .any(|c| c.type_ == "ValidationSucceeded"),
            "the pool's actor wrote its status: {:?}",
            status.conditions
        );

        // The small scenario scales 4 -> 12 at 2m: every pod lands on the ordinary pool.
        assert!(sim.advance(Duration::from_mins(3)).await);
        let pods = pods(&sim).await;
        assert_eq!(pods.len(), 12);
        assert!(pods.iter().all(is_bound), "every pod bound");
        let report = sim.finish().await;
        assert_eq!(report.pods.pending_at_end, 0);
        assert!(!report.escalated);
    });
}
