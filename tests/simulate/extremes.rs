//! Valid objects at the schema's limits do not stall the daemon: a NodePool with 100
//! requirements, 50 budgets with schedules, limits of exa-scale quantities and a 63-character
//! name; an EC2NodeClass with every selector list at 30 terms of 20 tags, 50 block devices,
//! 50 tags and 16 KiB of user data; a NodeClaim with 100 requirements, exa-scale requests and
//! a 253-character name. Each is read by the watch and handled by its actor, and the cluster's
//! ordinary pool keeps provisioning as if it were not there.

use std::time::Duration;

use karpenter::sim::scenario::Simulation;
use karpenter_core::apis::conditions::ConditionStatus;
use karpenter_core::apis::{EC2NodeClass, NodeClaim, NodePool};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use super::support::{in_simulation, is_bound, pods, small_without_consolidation};

/// The small scenario scales 4 -> 12 at 2m: every pod lands on the ordinary pool, nothing is
/// left pending and the daemon did not escalate.
async fn the_ordinary_pool_still_provisions(mut sim: Simulation<'_>) {
    assert!(sim.advance(Duration::from_mins(3)).await);
    let pods = pods(&sim).await;
    assert_eq!(pods.len(), 12);
    assert!(pods.iter().all(is_bound), "every pod bound");
    let report = sim.finish().await;
    assert_eq!(report.pods.pending_at_end, 0);
    assert!(!report.escalated);
}

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

        the_ordinary_pool_still_provisions(sim).await;
    });
}

/// An EC2NodeClass with every list at its schema maximum; only one subnet and one security group
/// term match kwok's (the rest name tags nothing carries), and its AMI terms match no image.
fn extreme_nodeclass(name: &str) -> EC2NodeClass {
    let terms = |matching: serde_json::Value| -> Vec<serde_json::Value> {
        let mut terms = vec![matching];
        for i in 1..30 {
            let tags: serde_json::Map<String, serde_json::Value> = (0..20)
                .map(|t| (format!("example.com/term-{i}-{t}"), json!("x".repeat(200))))
                .collect();
            terms.push(json!({ "tags": tags }));
        }
        terms
    };
    let discovery = json!({ "tags": { "karpenter.sh/discovery": "simulated" } });
    let mut devices = vec![json!({
        "deviceName": "/dev/xvda", "rootVolume": true,
        "ebs": { "volumeSize": "58Ti", "volumeType": "gp3" },
    })];
    for i in 1..50 {
        devices.push(json!({
            "deviceName": format!("/dev/xvd{i}"),
            "ebs": { "volumeSize": "16Ti", "volumeType": "gp3", "iops": 16000 },
        }));
    }
    let tags: serde_json::Map<String, serde_json::Value> = (0..50)
        .map(|i| (format!("team.example.com/tag-{i}"), json!("v".repeat(255))))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": { "name": name },
        "spec": {
            "role": "KarpenterNodeRole-simulated",
            "amiFamily": "AL2023",
            "amiSelectorTerms": terms(json!({ "tags": { "example.com/no-such-image": "true" } })),
            "subnetSelectorTerms": terms(discovery.clone()),
            "securityGroupSelectorTerms": terms(discovery),
            "blockDeviceMappings": devices,
            "tags": tags,
            "userData": "#!/bin/bash\n".repeat(16 * 1024 / 12),
        },
    }))
    .unwrap()
}

#[test]
fn an_ec2nodeclass_at_the_schema_limits_gets_its_status_and_does_not_stall_provisioning() {
    in_simulation(|| async {
        let mut sim = Simulation::start(small_without_consolidation(), None)
            .await
            .unwrap();
        let name = "c".repeat(253);
        Api::<EC2NodeClass>::all(sim.client())
            .create(&PostParams::default(), &extreme_nodeclass(&name))
            .await
            .unwrap();
        assert!(sim.advance(Duration::from_secs(30)).await);
        let seen = Api::<EC2NodeClass>::all(sim.client())
            .get(&name)
            .await
            .unwrap();
        assert_eq!(seen.spec.block_device_mappings.len(), 50);
        let conditions = seen.status.map(|s| s.conditions).unwrap_or_default();
        let ready = conditions.iter().find(|c| c.type_ == "Ready");
        assert!(
            ready.is_some_and(|c| c.status == ConditionStatus::False),
            "the class's actor resolved it (no image matches, so not ready): {conditions:?}"
        );
        assert!(
            conditions
                .iter()
                .any(|c| c.type_ == "SubnetsReady" && c.status == ConditionStatus::True),
            "the one matching subnet term among 30 resolved: {conditions:?}"
        );

        the_ordinary_pool_still_provisions(sim).await;
    });
}

/// A standalone NodeClaim with 100 requirements (only one the catalogue knows), requests no
/// instance type has and the longest name Kubernetes allows.
fn extreme_nodeclaim(name: &str) -> NodeClaim {
    let mut requirements = vec![json!({
        "key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"],
    })];
    for i in 1..100 {
        requirements.push(json!({
            "key": format!("example.com/extreme-{i}"),
            "operator": "In",
            "values": [format!("value-{i}")],
        }));
    }
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": { "name": name },
        "spec": {
            "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
            "requirements": requirements,
            "resources": { "requests": { "cpu": "1E", "memory": "8Ei" } },
        },
    }))
    .unwrap()
}

#[test]
fn a_nodeclaim_at_the_schema_limits_is_deleted_for_want_of_capacity_and_does_not_stall_provisioning()
 {
    in_simulation(|| async {
        let mut sim = Simulation::start(small_without_consolidation(), None)
            .await
            .unwrap();
        let name = "n".repeat(253);
        let api = Api::<NodeClaim>::all(sim.client());
        api.create(&PostParams::default(), &extreme_nodeclaim(&name))
            .await
            .unwrap();
        let mut outcome = None;
        for _ in 0..120 {
            assert!(sim.advance(Duration::from_secs(1)).await);
            match api.get_opt(&name).await.unwrap() {
                None => {
                    outcome = Some("deleted".to_owned());
                    break;
                }
                Some(claim) => {
                    let launched = claim
                        .status
                        .unwrap_or_default()
                        .conditions
                        .into_iter()
                        .find(|c| c.type_ == "Launched" && c.status == ConditionStatus::False);
                    if let Some(condition) = launched {
                        outcome = Some(format!("Launched=False {}", condition.reason));
                        break;
                    }
                }
            }
        }
        let last = api.get_opt(&name).await.unwrap().and_then(|c| c.status);
        let outcome = outcome.unwrap_or_else(|| {
            panic!("the NodeClaim was neither deleted nor failed within 2 minutes: {last:?}")
        });
        // No instance type holds the requests: Karpenter's InsufficientCapacity, the NodeClaim
        // is deleted rather than retried forever.
        assert_eq!(outcome, "deleted");

        the_ordinary_pool_still_provisions(sim).await;
    });
}
