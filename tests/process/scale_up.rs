//! A scale-up as a user sees it: an AL2023 EC2NodeClass and a NodePool applied, pods pending,
//! then moto instances, Ready nodes and bound pods, with the cluster's endpoint and service CIDR
//! discovered from moto's EKS (no `CLUSTER_ENDPOINT` is set) and written into the nodes' user
//! data.

use std::collections::BTreeSet;

use aws_sdk_ec2::types::Filter;
use base64::Engine as _;
use karpenter_core::apis::EC2NodeClass;
use kube::Api;

use crate::support::{SERVICE_CIDR, World, instance_of};

fn condition(conditions: &[karpenter_core::apis::conditions::Condition], kind: &str) -> String {
    conditions
        .iter()
        .find(|c| c.type_ == kind)
        .map_or_else(|| "absent".to_owned(), |c| format!("{:?}", c.status))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_pods_become_moto_instances_ready_nodes_and_bound_pods() {
    let Some(world) = World::start("scale-up").await else {
        return;
    };
    world.apply_nodepool().await;
    let daemon = world.daemon(&[]);
    world.create_pods("web", 2).await;
    world.until_pods_run("web", 2, &[&daemon]).await;

    // Each pod has a node of its own; each node a NodeClaim; each NodeClaim one moto instance.
    let claims = world.nodeclaims().await;
    let context = world.context(&[&daemon]);
    assert_eq!(claims.len(), 2, "{claims:#?}\n{context}");
    let claimed: BTreeSet<String> = claims.iter().filter_map(instance_of).collect();
    let running: BTreeSet<String> = world
        .instances()
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(claimed, running, "{context}");
    for claim in &claims {
        let status = claim.status.clone().unwrap_or_default();
        for kind in ["Launched", "Registered", "Initialized", "Ready"] {
            assert_eq!(
                condition(&status.conditions, kind),
                "True",
                "{kind} of {claim:#?}"
            );
        }
        assert!(status.node_name.is_some(), "{claim:#?}");
    }
    let bound: BTreeSet<String> = world
        .pods()
        .await
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    assert_eq!(bound.len(), 2, "one node per pod");

    // The AL2023 class is Ready: the service CIDR was found.
    let class = Api::<EC2NodeClass>::all(world.client.clone())
        .get("default")
        .await
        .unwrap();
    let class_status = class.status.clone().unwrap_or_default();
    assert_eq!(
        condition(&class_status.conditions, "Ready"),
        "True",
        "{class:#?}"
    );

    // The launch template's nodeadm configuration names what moto's EKS reports.
    let ec2 = world.moto.raw_ec2().await;
    let templates = ec2
        .describe_launch_templates()
        .filters(
            Filter::builder()
                .name("tag:karpenter.k8s.aws/ec2nodeclass")
                .values("default")
                .build(),
        )
        .send()
        .await
        .unwrap();
    let template = templates
        .launch_templates()
        .first()
        .and_then(|t| t.launch_template_id())
        .unwrap_or_else(|| panic!("no launch template for the class\n{context}"))
        .to_owned();
    let versions = ec2
        .describe_launch_template_versions()
        .launch_template_id(template)
        .versions("$Latest")
        .send()
        .await
        .unwrap();
    let user_data = versions
        .launch_template_versions()
        .first()
        .and_then(|v| v.launch_template_data())
        .and_then(|d| d.user_data())
        .unwrap();
    let user_data = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(user_data)
            .unwrap(),
    )
    .unwrap();
    assert!(
        user_data.contains(&format!("apiServerEndpoint: {}", world.eks_endpoint)),
        "the endpoint DescribeCluster reports, {}:\n{user_data}",
        world.eks_endpoint
    );
    assert!(
        user_data.contains(&format!("cidr: {SERVICE_CIDR}")),
        "{user_data}"
    );
    assert!(user_data.contains("10.100.0.10"), "kube-dns: {user_data}");
}
