//! The AWS cloud provider end to end over kwok with tokio's paused clock: a NodeClaim becomes an
//! instance of the cheapest compatible type in an allowed zone with Karpenter's tags and a
//! launch template whose user data carries its labels and taints; ICE falls back and hides the
//! offering; retried creates are idempotent; delete, get and list; drift reasons; readiness
//! errors; tagging a registered instance with only the tags it lacks; launch templates
//! expiring, re-created and deleted with their class; launch subnets tracking addresses in
//! flight; the validation's choice of instance type; after a restart, a NodeClaim whose launch
//! was lost adopts what it launched (and only what suits it).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use karpenter_actors::kwok::cloud_provider::{KwokCloudDeps, cloud_provider, settings};
use karpenter_actors::kwok::ec2::{KwokEc2, KwokEc2Config, KwokEc2Deps};
use karpenter_actors::offering_metrics::OfferingMetrics;
use karpenter_actors::ports::clock::{Clock, ManualClock};
use karpenter_actors::ports::cloud_provider::{CloudProvider, CloudProviderError, DriftReason};
use karpenter_actors::ports::cluster_view::ClusterView;
use karpenter_actors::ports::ec2::{Ec2Api, InstanceState, LaunchTemplateData, LaunchTemplateRef};
use karpenter_actors::providers::cloud_provider::AwsCloudProvider;
use karpenter_actors::providers::launch_templates::LAUNCH_TEMPLATE_TTL;
use karpenter_actors::runtime::KitOptions;
use karpenter_actors::testing::{AwsTestKit, MemoryClusterView};
use karpenter_core::apis::conditions::{Condition, ConditionStatus};
use karpenter_core::apis::ec2nodeclass::{
    Ami, AmiRequirement, EC2NodeClassStatus, SecurityGroup, Subnet,
};
use karpenter_core::apis::labels;
use karpenter_core::apis::{EC2NodeClass, NodeClaim, NodePool, SlimNodeClaim};
use karpenter_core::domain::instance_type::CapacityType;
use serde_json::json;

const REGION: &str = "us-west-2";
const CLUSTER: &str = "test-cluster";
const AMI_X86: &str = "ami-00000000000000001";
const AMI_ARM: &str = "ami-00000000000000002";
const SECURITY_GROUP: &str = "sg-00000000000000001";
const LAUNCH_LATENCY: Duration = Duration::from_secs(16);

struct Env {
    /// The AWS group the providers' actors (batchers, ICE expiry, janitor) run in.
    aws: AwsTestKit,
    kwok: Arc<KwokEc2>,
    view: Arc<MemoryClusterView>,
    cloud: Arc<AwsCloudProvider>,
}

fn ami(id: &str, arch: &str) -> Ami {
    Ami {
        id: id.into(),
        name: Some(format!("{id}-name")),
        deprecated: None,
        requirements: vec![AmiRequirement {
            key: labels::ARCH.into(),
            operator: "In".into(),
            values: vec![arch.into()],
        }],
    }
}

fn ready(status: ConditionStatus) -> Condition {
    Condition {
        type_: "Ready".into(),
        status,
        observed_generation: None,
        last_transition_time: Time(Timestamp::UNIX_EPOCH),
        reason: if status == ConditionStatus::True {
            "Ready".into()
        } else {
            "NotReady".into()
        },
        message: String::new(),
    }
}

/// The class as the `NodeClass` work would have resolved it over kwok.
fn nodeclass(kwok: &KwokEc2) -> EC2NodeClass {
    let mut class: EC2NodeClass = serde_json::from_value(json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {
            "name": "default",
            "annotations": {
                labels::EC2NODECLASS_HASH: "1111",
                labels::EC2NODECLASS_HASH_VERSION: "v4",
            },
        },
        "spec": {
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "role": "KarpenterNodeRole",
            "tags": {"team": "ml"},
        },
    }))
    .unwrap();
    class.status = Some(EC2NodeClassStatus {
        subnets: kwok
            .subnets()
            .iter()
            .map(|s| Subnet {
                id: s.id.clone(),
                zone: s.zone.clone(),
                zone_id: Some(s.zone_id.clone()),
            })
            .collect(),
        security_groups: vec![SecurityGroup {
            id: SECURITY_GROUP.into(),
            name: Some("test-cluster-node".into()),
        }],
        capacity_reservations: Vec::new(),
        amis: vec![ami(AMI_X86, "amd64"), ami(AMI_ARM, "arm64")],
        instance_profile: Some("test-cluster_1234".into()),
        conditions: vec![ready(ConditionStatus::True)],
    });
    class
}

fn nodepool() -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [],
        }}},
    }))
    .unwrap()
}

/// A NodeClaim of the default pool with these requirements and requests.
fn nodeclaim(
    name: &str,
    requirements: &serde_json::Value,
    requests: &serde_json::Value,
) -> NodeClaim {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "uid": format!("uid-{name}"),
            "labels": {labels::NODEPOOL: "default", "project": "apollo"},
        },
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": requirements,
            "resources": {"requests": requests},
            "taints": [{"key": "example.com/dedicated", "value": "ml", "effect": "NoSchedule"}],
            "startupTaints": [{"key": "example.com/booting", "effect": "NoExecute"}],
        },
    }))
    .unwrap()
}

/// On-demand, amd64, families c5 and m5, in one zone.
fn od_claim(name: &str, zone: &str) -> NodeClaim {
    nodeclaim(
        name,
        &json!([
            {"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": labels::ZONE, "operator": "In", "values": [zone]},
            {"key": labels::INSTANCE_FAMILY, "operator": "In", "values": ["c5", "m5"]},
            {"key": labels::ARCH, "operator": "In", "values": ["amd64"]},
            {"key": "team", "operator": "In", "values": ["ml"]},
        ]),
        &json!({"cpu": "1", "memory": "2Gi"}),
    )
}

impl Env {
    async fn new() -> Env {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(Timestamp::UNIX_EPOCH));
        let kwok = Arc::new(
            KwokEc2::new(
                KwokEc2Config::new(REGION, CLUSTER),
                KwokEc2Deps {
                    clock: Arc::clone(&clock),
                    events: None,
                },
            )
            .unwrap(),
        );
        let view = Arc::new(MemoryClusterView::new());
        view.put_ec2nodeclass(nodeclass(&kwok));
        view.put_nodepool(nodepool());
        let aws = AwsTestKit::new(KitOptions::default());
        let cloud = cloud_provider(KwokCloudDeps {
            ec2: Arc::clone(&kwok),
            pricing: None,
            view: Arc::clone(&view) as _,
            clock,
            settings: settings(REGION, CLUSTER),
            aws_group: (*aws.root).clone(),
        })
        .await
        .unwrap();
        Env {
            aws,
            kwok,
            view,
            cloud,
        }
    }

    fn zone(&self, index: usize) -> String {
        self.kwok.subnets()[index].zone.clone()
    }

    /// The cloud provider of a daemon started again over the same account and cluster: its
    /// caches, batchers and bookkeeping are new.
    async fn restarted(&self) -> Arc<AwsCloudProvider> {
        cloud_provider(KwokCloudDeps {
            ec2: Arc::clone(&self.kwok),
            pricing: None,
            view: Arc::clone(&self.view) as _,
            clock: Arc::new(ManualClock::new(Timestamp::UNIX_EPOCH)),
            settings: settings(REGION, CLUSTER),
            // New batchers beside the old ones, which no longer get requests.
            aws_group: (*self.aws.root).clone(),
        })
        .await
        .unwrap()
    }

    /// The next CreateFleet takes effect and its answer is lost.
    fn lose_next_fleet_answers(&self, count: usize) {
        self.kwok.faults().lose_next_responses(
            "CreateFleet",
            count,
            karpenter_actors::ports::aws_error::AwsError::new(
                karpenter_actors::ports::aws_error::AwsService::Ec2,
                "CreateFleet",
                None,
                "connection reset by peer",
            ),
        );
    }

    fn instance_ids(&self) -> std::collections::BTreeSet<String> {
        self.kwok.instances().into_iter().map(|i| i.id).collect()
    }

    fn subnet(&self, index: usize) -> String {
        self.kwok.subnets()[index].id.clone()
    }

    fn class(&self) -> EC2NodeClass {
        (*self.view.ec2nodeclass("default").unwrap()).clone()
    }

    /// The cached launch template whose user data gives the kubelet `max_pods` (one template
    /// per AMI and max-pods group).
    fn launch_template(&self, max_pods: u32) -> (String, LaunchTemplateData) {
        let names = self.cloud.providers().launch_templates.cached();
        let found: Vec<(String, LaunchTemplateData)> = names
            .into_iter()
            .filter_map(|name| {
                let data = self.kwok.launch_template_data(&name)?;
                user_data(&data)
                    .contains(&format!("maxPods: {max_pods}\n"))
                    .then_some((name, data))
            })
            .collect();
        assert_eq!(found.len(), 1, "{found:?}");
        found.into_iter().next().unwrap()
    }
}

fn user_data(data: &LaunchTemplateData) -> String {
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(data.user_data.as_deref().unwrap_or_default())
            .unwrap(),
    )
    .unwrap()
}

fn label<'a>(claim: &'a NodeClaim, key: &str) -> &'a str {
    claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map_or("", String::as_str)
}

fn provider_id(claim: &NodeClaim) -> String {
    claim
        .status
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .unwrap()
}

#[actix::test]
async fn a_nodeclaim_becomes_the_cheapest_compatible_instance_with_karpenters_tags_and_user_data() {
    tokio::time::pause();
    let env = Env::new().await;
    let zone = env.zone(1);
    let created = env.cloud.create(&od_claim("claim-a", &zone)).await.unwrap();

    // c5.large (0.085 USD/h) is the cheapest on-demand c5/m5 type with room for 1 CPU, 2 GiB.
    assert_eq!(label(&created, labels::INSTANCE_TYPE), "c5.large");
    assert_eq!(label(&created, labels::ZONE), zone);
    assert_eq!(
        label(&created, labels::ZONE_ID),
        env.kwok.subnets()[1].zone_id
    );
    assert_eq!(label(&created, labels::CAPACITY_TYPE), "on-demand");
    assert_eq!(label(&created, labels::ARCH), "amd64");
    assert_eq!(label(&created, labels::OS), "linux");
    assert_eq!(label(&created, labels::INSTANCE_FAMILY), "c5");
    assert_eq!(label(&created, labels::INSTANCE_CPU), "2");
    assert_eq!(label(&created, labels::NODEPOOL), "default");
    assert_eq!(
        label(&created, "project"),
        "apollo",
        "the NodeClaim's own labels stay"
    );
    let status = created.status.clone().unwrap();
    let instances = env.kwok.instances();
    assert_eq!(instances.len(), 1);
    let instance = &instances[0];
    assert_eq!(
        status.provider_id.as_deref(),
        Some(format!("aws:///{zone}/{}", instance.id).as_str())
    );
    assert_eq!(status.image_id.as_deref(), Some(AMI_X86));
    assert_eq!(status.capacity["cpu"].0, "2");
    assert_eq!(status.capacity["pods"].0, "29");
    assert_eq!(status.allocatable["cpu"].0, "1930m");
    assert!(!status.capacity.contains_key(labels::RESOURCE_EFA));
    let annotations = created.metadata.annotations.clone().unwrap();
    assert_eq!(annotations[labels::EC2NODECLASS_HASH], "1111");
    assert_eq!(annotations[labels::EC2NODECLASS_HASH_VERSION], "v4");

    // The instance: the type and zone chosen, the class's security group, Karpenter's tags.
    assert_eq!(instance.instance_type, "c5.large");
    assert_eq!(instance.capacity_type, CapacityType::OnDemand);
    assert_eq!(instance.subnet_id, env.subnet(1));
    assert_eq!(instance.security_group_ids, [SECURITY_GROUP]);
    for (key, value) in [
        ("eks:eks-cluster-name", CLUSTER),
        ("kubernetes.io/cluster/test-cluster", "owned"),
        ("karpenter.sh/nodepool", "default"),
        ("karpenter.k8s.aws/ec2nodeclass", "default"),
        ("team", "ml"),
    ] {
        assert_eq!(
            instance.tags.get(key).map(String::as_str),
            Some(value),
            "{key}"
        );
    }
}

#[actix::test]
async fn the_launch_template_carries_the_ami_profile_groups_volumes_and_the_kubelet_labels_and_taints()
 {
    let env = Env::new().await;
    env.cloud
        .create(&od_claim("claim-lt", &env.zone(1)))
        .await
        .unwrap();
    // Its launch template: the AMI, the class's profile and groups, IMDSv2, the default volume
    // and user data registering the labels and taints.
    let (name, data) = env.launch_template(29);
    assert!(name.starts_with("karpenter.k8s.aws/"), "{name}");
    assert_eq!(data.image_id.as_deref(), Some(AMI_X86));
    assert_eq!(
        data.instance_profile_name.as_deref(),
        Some("test-cluster_1234")
    );
    assert_eq!(data.security_group_ids, [SECURITY_GROUP]);
    let metadata = data.metadata_options.clone().unwrap();
    assert_eq!(
        (
            metadata.http_tokens.as_str(),
            metadata.http_put_response_hop_limit
        ),
        ("required", 1)
    );
    assert_eq!(data.block_device_mappings.len(), 1);
    let root = &data.block_device_mappings[0];
    assert_eq!(
        (
            root.device_name.as_str(),
            root.volume_size_gib,
            root.volume_type.as_deref()
        ),
        ("/dev/xvda", Some(20), Some("gp3"))
    );
    assert_eq!(root.encrypted, Some(true));
    assert_eq!(
        data.network_interface_tags["karpenter.sh/nodepool"],
        "default"
    );
    assert!(
        data.spot_request_tags.is_empty(),
        "on-demand templates tag no spot requests"
    );
    let user_data = user_data(&data);
    for expected in [
        "karpenter.sh/nodepool=default",
        "karpenter.sh/capacity-type=on-demand",
        "karpenter.sh/do-not-sync-taints=true",
        "project=apollo",
        "team=ml",
        "key: example.com/dedicated",
        "key: example.com/booting",
        "key: karpenter.sh/unregistered",
        "maxPods: 29",
        "apiServerEndpoint: https://kwok.cluster.local",
    ] {
        assert!(
            user_data.contains(expected),
            "{expected} missing from:\n{user_data}"
        );
    }
}

#[actix::test]
async fn insufficient_capacity_on_the_cheapest_offering_falls_back_to_the_next_and_hides_it() {
    tokio::time::pause();
    let env = Env::new().await;
    let zone = env.zone(0);
    env.kwok
        .set_capacity("c5.large", &zone, CapacityType::OnDemand, 0);
    let created = env.cloud.create(&od_claim("ice", &zone)).await.unwrap();
    assert_eq!(label(&created, labels::INSTANCE_TYPE), "m5.large");
    let providers = env.cloud.providers();
    assert!(
        providers
            .unavailable
            .is_unavailable("c5.large", &zone, CapacityType::OnDemand)
    );
    let types = env.cloud.instance_types(&nodepool()).await.unwrap();
    let c5 = types.iter().find(|t| t.name == "c5.large").unwrap();
    let offering = c5
        .offerings
        .iter()
        .find(|o| o.zone() == Some(zone.as_str()) && o.capacity_type() == Some("on-demand"))
        .unwrap();
    assert!(
        !offering.available,
        "the ICE'd offering is listed as unavailable"
    );
    assert!(
        c5.offerings.iter().any(|o| o.available),
        "other offerings of the type stay available"
    );

    // With the only compatible offerings out of capacity, the launch is insufficient capacity.
    env.kwok
        .set_capacity("m5.large", &zone, CapacityType::OnDemand, 0);
    let only_large = nodeclaim(
        "ice-2",
        &json!([
            {"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": labels::ZONE, "operator": "In", "values": [zone]},
            {"key": labels::INSTANCE_TYPE, "operator": "In", "values": ["c5.large", "m5.large"]},
        ]),
        &json!({}),
    );
    let error = env.cloud.create(&only_large).await.unwrap_err();
    assert!(
        matches!(error, CloudProviderError::InsufficientCapacity { .. }),
        "{error:?}"
    );
}

#[actix::test]
async fn a_retried_create_of_the_same_nodeclaim_returns_the_same_instance() {
    tokio::time::pause();
    let env = Env::new().await;
    let claim = od_claim("retry", &env.zone(0));
    let first = env.cloud.create(&claim).await.unwrap();
    let second = env.cloud.create(&claim).await.unwrap();
    assert_eq!(provider_id(&first), provider_id(&second));
    assert_eq!(env.kwok.instances().len(), 1);
    assert_eq!(env.kwok.faults().count("CreateFleet"), 1);
    // Even with every offering gone meanwhile, the retry answers with the instance it has.
    env.cloud
        .providers()
        .unavailable
        .mark_capacity_type_unavailable(CapacityType::OnDemand);
    let third = env.cloud.create(&claim).await.unwrap();
    assert_eq!(provider_id(&third), provider_id(&first));
    let other = od_claim("other", &env.zone(0));
    assert!(matches!(
        env.cloud.create(&other).await,
        Err(CloudProviderError::InsufficientCapacity { .. })
    ));
}

#[actix::test]
async fn spot_launches_pick_spot_and_tag_spot_requests() {
    tokio::time::pause();
    let env = Env::new().await;
    let claim = nodeclaim(
        "spot",
        &json!([
            {"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["spot", "on-demand"]},
            {"key": labels::INSTANCE_FAMILY, "operator": "In", "values": ["m5"]},
        ]),
        &json!({}),
    );
    let created = env.cloud.create(&claim).await.unwrap();
    assert_eq!(label(&created, labels::CAPACITY_TYPE), "spot");
    assert_eq!(env.kwok.instances()[0].capacity_type, CapacityType::Spot);
    let (_, data) = env.launch_template(29);
    assert_eq!(data.spot_request_tags["karpenter.sh/nodepool"], "default");
}

#[actix::test]
async fn delete_get_and_list_follow_the_instances() {
    tokio::time::pause();
    let env = Env::new().await;
    let a = env
        .cloud
        .create(&od_claim("a", &env.zone(0)))
        .await
        .unwrap();
    let b = env
        .cloud
        .create(&od_claim("b", &env.zone(1)))
        .await
        .unwrap();

    let listed = env.cloud.list().await.unwrap();
    let mut ids: Vec<String> = listed.iter().map(provider_id).collect();
    ids.sort();
    let mut expected = vec![provider_id(&a), provider_id(&b)];
    expected.sort();
    assert_eq!(ids, expected);
    assert!(
        listed
            .iter()
            .all(|c| label(c, labels::INSTANCE_TYPE) == "c5.large")
    );
    assert!(
        listed
            .iter()
            .all(|c| label(c, labels::NODEPOOL) == "default")
    );
    assert!(
        listed
            .iter()
            .all(|c| c.metadata.creation_timestamp.is_some())
    );
    // The garbage collector's brief list: the same instances, names, launch times and launch
    // groups, without the labels and resources hydration adds.
    let brief = env.cloud.list_brief().await.unwrap();
    assert_eq!(brief.len(), listed.len());
    for full in &listed {
        let short = brief
            .iter()
            .find(|c| provider_id(c) == provider_id(full))
            .unwrap();
        assert_eq!(short.metadata.name, full.metadata.name);
        assert_eq!(
            short.metadata.creation_timestamp,
            full.metadata.creation_timestamp
        );
        assert_eq!(short.metadata.annotations, full.metadata.annotations);
        assert_eq!(short.metadata.deletion_timestamp, None);
        assert!(short.metadata.labels.is_none());
        assert!(short.status.as_ref().unwrap().capacity.is_empty());
    }

    let got = env.cloud.get(&provider_id(&a)).await.unwrap();
    assert_eq!(label(&got, labels::ZONE), env.zone(0));
    assert_eq!(label(&got, labels::ZONE_ID), env.kwok.subnets()[0].zone_id);
    assert_eq!(
        got.status.unwrap().capacity["memory"],
        a.status.clone().unwrap().capacity["memory"]
    );
    // Any provider prefix names the same instance (v1.5 accepts kwok's).
    let kwok_style = provider_id(&a).replacen("aws:", "kwok-aws:", 1);
    assert!(env.cloud.get(&kwok_style).await.is_ok());

    env.cloud.delete(&a).await.unwrap();
    let id = provider_id(&a).rsplit('/').next().unwrap().to_owned();
    let state = |env: &Env| {
        env.kwok
            .instances()
            .into_iter()
            .find(|i| i.id == id)
            .unwrap()
            .state
    };
    assert_eq!(state(&env), InstanceState::ShuttingDown);
    let shutting_down = env.cloud.get(&provider_id(&a)).await.unwrap();
    assert!(shutting_down.metadata.deletion_timestamp.is_some());
    let brief = env.cloud.list_brief().await.unwrap();
    let brief_a = brief.iter().find(|c| provider_id(c) == provider_id(&a));
    assert!(brief_a.unwrap().metadata.deletion_timestamp.is_some());
    env.cloud.delete(&a).await.unwrap();
    assert_eq!(env.kwok.faults().count("TerminateInstances"), 1);
    tokio::time::sleep(LAUNCH_LATENCY).await;
    assert_eq!(state(&env), InstanceState::Terminated);
    let gone = env.cloud.delete(&a).await.unwrap_err();
    assert!(
        matches!(gone, CloudProviderError::NodeClaimNotFound { .. }),
        "{gone:?}"
    );
    assert!(matches!(
        env.cloud.get(&provider_id(&a)).await,
        Err(CloudProviderError::NodeClaimNotFound { .. })
    ));
    assert_eq!(env.cloud.list().await.unwrap().len(), 1);
    assert!(matches!(
        env.cloud.get("i-0123").await,
        Err(CloudProviderError::InvalidProviderId { .. })
    ));
}

#[actix::test]
async fn a_registered_instance_is_tagged_with_only_the_tags_it_lacks() {
    tokio::time::pause();
    let env = Env::new().await;
    let created = env
        .cloud
        .create(&od_claim("claim-a", &env.zone(0)))
        .await
        .unwrap();
    let id = provider_id(&created).rsplit('/').next().unwrap().to_owned();
    // A user named the instance already; the launch tagged the cluster name.
    let by_hand =
        karpenter_core::domain::tags::Tags::from([("Name".to_owned(), "set-by-hand".to_owned())]);
    env.kwok
        .create_tags(std::slice::from_ref(&id), &by_hand)
        .await
        .unwrap();
    let calls = env.kwok.faults().count("CreateTags");

    let wanted = karpenter_core::domain::tags::registered_instance_tags(
        "ip-10-0-0-1.ec2.internal",
        "claim-a",
        CLUSTER,
    );
    env.cloud
        .tag_instance(&SlimNodeClaim::from(&created), &wanted)
        .await
        .unwrap();
    assert_eq!(env.kwok.faults().count("CreateTags"), calls + 1);
    let tags = env
        .kwok
        .instances()
        .into_iter()
        .find(|i| i.id == id)
        .unwrap()
        .tags;
    assert_eq!(
        tags["Name"], "set-by-hand",
        "an existing tag keeps its value"
    );
    assert_eq!(tags["karpenter.sh/nodeclaim"], "claim-a");
    assert_eq!(tags["eks:eks-cluster-name"], CLUSTER);

    // Nothing missing: no CreateTags.
    env.cloud
        .tag_instance(&SlimNodeClaim::from(&created), &wanted)
        .await
        .unwrap();
    assert_eq!(env.kwok.faults().count("CreateTags"), calls + 1);

    // An instance that is gone reports it, for the caller to stop trying.
    env.cloud.delete(&created).await.unwrap();
    tokio::time::sleep(LAUNCH_LATENCY).await;
    let gone = env
        .cloud
        .tag_instance(&SlimNodeClaim::from(&created), &wanted)
        .await
        .unwrap_err();
    assert!(
        matches!(gone, CloudProviderError::NodeClaimNotFound { .. }),
        "{gone:?}"
    );
    assert_eq!(env.kwok.faults().count("CreateTags"), calls + 1);
}

#[actix::test]
async fn drift_is_told_from_the_hash_the_ami_the_security_groups_and_the_subnet() {
    tokio::time::pause();
    let env = Env::new().await;
    let created = env
        .cloud
        .create(&od_claim("drift", &env.zone(0)))
        .await
        .unwrap();
    let kept = SlimNodeClaim::from(&created);
    assert_eq!(env.cloud.is_drifted(&kept).await.unwrap(), None);
    let original = env.class();

    let mut class = original.clone();
    class
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(labels::EC2NODECLASS_HASH.into(), "2222".into());
    env.view.put_ec2nodeclass(class);
    assert_eq!(
        env.cloud.is_drifted(&kept).await.unwrap(),
        Some(DriftReason::NodeClassDrift)
    );
    // A different hash version is not drift: the claim is re-stamped instead.
    let mut class = env.class();
    class
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(labels::EC2NODECLASS_HASH_VERSION.into(), "v5".into());
    env.view.put_ec2nodeclass(class);
    assert_eq!(env.cloud.is_drifted(&kept).await.unwrap(), None);

    let mut class = original.clone();
    class.status.as_mut().unwrap().amis[0].id = "ami-0new".into();
    env.view.put_ec2nodeclass(class);
    assert_eq!(
        env.cloud.is_drifted(&kept).await.unwrap(),
        Some(DriftReason::AmiDrift)
    );

    let mut class = original.clone();
    class.status.as_mut().unwrap().security_groups[0].id = "sg-0new".into();
    env.view.put_ec2nodeclass(class);
    assert_eq!(
        env.cloud.is_drifted(&kept).await.unwrap(),
        Some(DriftReason::SecurityGroupDrift)
    );

    let mut class = original.clone();
    class.status.as_mut().unwrap().subnets.remove(0);
    env.view.put_ec2nodeclass(class);
    assert_eq!(
        env.cloud.is_drifted(&kept).await.unwrap(),
        Some(DriftReason::SubnetDrift)
    );

    let mut class = original;
    class.status.as_mut().unwrap().amis.clear();
    env.view.put_ec2nodeclass(class);
    assert!(matches!(
        env.cloud.is_drifted(&kept).await,
        Err(CloudProviderError::NodeClassIncomplete { .. })
    ));
}

#[actix::test]
async fn a_class_not_ready_unknown_or_missing_stops_the_launch_with_karpenters_errors() {
    tokio::time::pause();
    let env = Env::new().await;
    let claim = od_claim("blocked", &env.zone(0));
    let mut class = env.class();
    class.status.as_mut().unwrap().conditions = vec![ready(ConditionStatus::False)];
    env.view.put_ec2nodeclass(class);
    assert!(matches!(
        env.cloud.create(&claim).await,
        Err(CloudProviderError::NodeClassNotReady { .. })
    ));
    let mut class = env.class();
    class.status.as_mut().unwrap().conditions.clear();
    env.view.put_ec2nodeclass(class);
    let error = env.cloud.create(&claim).await.unwrap_err();
    let CloudProviderError::Create { reason, .. } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(reason, "NodeClassReadinessUnknown");
    env.view.remove_ec2nodeclass("default");
    assert!(matches!(
        env.cloud.create(&claim).await,
        Err(CloudProviderError::InsufficientCapacity { .. })
    ));
    assert!(
        env.cloud
            .instance_types(&nodepool())
            .await
            .unwrap()
            .is_empty()
    );
    assert!(env.kwok.instances().is_empty());
}

#[actix::test]
async fn launch_templates_expire_unused_are_recreated_and_go_with_their_class() {
    tokio::time::pause();
    let env = Env::new().await;
    let zone = env.zone(0);
    env.cloud.create(&od_claim("lt-1", &zone)).await.unwrap();
    let (name, _) = env.launch_template(29);
    let created_templates = env.kwok.faults().count("CreateLaunchTemplate");
    assert!(created_templates >= 1);

    // A second launch with the same configuration reuses the cached templates.
    env.cloud.create(&od_claim("lt-2", &zone)).await.unwrap();
    assert_eq!(
        env.kwok.faults().count("CreateLaunchTemplate"),
        created_templates
    );

    // Unused for its TTL: the janitor deletes it in EC2. (The clock is paused: this sleep moves
    // tokio's time and lets the janitor's timer fire, it does not wait.)
    tokio::time::sleep(LAUNCH_TEMPLATE_TTL * 3).await;
    assert!(env.kwok.launch_template_data(&name).is_none());
    assert!(env.cloud.providers().launch_templates.cached().is_empty());
    let snapshot = env.aws.kit.snapshot();
    let janitor = snapshot
        .actor("LaunchTemplateJanitorActor", "launch-templates")
        .unwrap();
    assert!(janitor.handled_by_message["SweepTick"] >= 2, "{janitor:?}");

    // Re-created on demand.
    env.cloud.create(&od_claim("lt-3", &zone)).await.unwrap();
    assert!(env.kwok.launch_template_data(&name).is_some());
    assert_eq!(
        env.kwok.faults().count("CreateLaunchTemplate"),
        2 * created_templates
    );

    // Deleted behind the cache's back: the fleet fails once, the cache is dropped, and only the
    // missing template is made again.
    env.kwok
        .delete_launch_template(&LaunchTemplateRef::Name(name.clone()))
        .await
        .unwrap();
    env.cloud.create(&od_claim("lt-4", &zone)).await.unwrap();
    assert_eq!(
        env.kwok.faults().count("CreateLaunchTemplate"),
        2 * created_templates + 1
    );
    assert_eq!(env.kwok.instances().len(), 4);

    // The class goes: its templates go.
    let deleted = env
        .cloud
        .providers()
        .launch_templates
        .delete_all("default")
        .await
        .unwrap();
    assert_eq!(deleted, created_templates);
    assert!(env.kwok.launch_template_data(&name).is_none());
    assert!(env.cloud.providers().launch_templates.cached().is_empty());
}

#[actix::test]
async fn launch_subnets_debit_addresses_in_flight_and_credit_back_the_unused_zones() {
    tokio::time::pause();
    let env = Env::new().await;
    let claim = nodeclaim(
        "ips",
        &json!([
            {"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": labels::INSTANCE_TYPE, "operator": "In", "values": ["c5.large"]},
        ]),
        &json!({}),
    );
    let created = env.cloud.create(&claim).await.unwrap();
    let launched_zone = label(&created, labels::ZONE).to_owned();
    let subnets = &env.cloud.providers().subnets;
    for subnet in env.kwok.subnets() {
        let free = i64::from(subnet.available_ip_address_count);
        let expected = if subnet.zone == launched_zone {
            free - 29
        } else {
            free
        };
        assert_eq!(
            subnets.inflight_ips(&subnet.id),
            Some(expected),
            "{}",
            subnet.zone
        );
    }
}

#[actix::test]
async fn validation_dry_runs_with_a_type_the_nodepools_could_launch() {
    tokio::time::pause();
    let env = Env::new().await;
    let mut arm_pool = nodepool();
    arm_pool.spec.template.spec.requirements = serde_json::from_value(json!([
        {"key": labels::ARCH, "operator": "In", "values": ["arm64"]},
        {"key": labels::INSTANCE_FAMILY, "operator": "In", "values": ["m7g"]},
    ]))
    .unwrap();
    env.view.put_nodepool(arm_pool);
    let chosen = env.cloud.validation_instance_types(&env.class()).unwrap();
    assert!(chosen[0].starts_with("m7g."), "{chosen:?}");
    assert!(chosen.iter().all(|n| n.starts_with("m7g.")));
    env.view.remove_nodepool("default");
    assert_eq!(
        env.cloud.validation_instance_types(&env.class()).unwrap(),
        ["m5.large", "m6g.large"]
    );
}

/// `aws: Metrics / It("should expose karpenter_cloudprovider_instance_type_offering_price_estimate
/// metrics")` and `"... offering_available metrics"`: every offering of the pools' types gets its
/// price and availability, an ICE'd one goes to 0, and each type its vCPUs and memory.
#[actix::test]
async fn offering_gauges_carry_every_offerings_price_and_availability() {
    tokio::time::pause();
    let env = Env::new().await;
    let zone = env.zone(0);
    let metrics = OfferingMetrics::default();
    assert!(metrics.refresh(env.view.as_ref(), env.cloud.as_ref()).await > 0);
    assert_eq!(metrics.available("c5.large", "on-demand", &zone), Some(1.0));
    assert_eq!(metrics.price("c5.large", "on-demand", &zone), Some(0.085));
    assert_eq!(
        metrics.shape("c5.large"),
        Some((2.0, 4096.0 * 1024.0 * 1024.0))
    );

    env.kwok
        .set_capacity("c5.large", &zone, CapacityType::OnDemand, 0);
    env.cloud.create(&od_claim("ice", &zone)).await.unwrap();
    metrics.refresh(env.view.as_ref(), env.cloud.as_ref()).await;
    assert_eq!(metrics.available("c5.large", "on-demand", &zone), Some(0.0));
    assert_eq!(
        metrics.available("c5.large", "on-demand", &env.zone(1)),
        Some(1.0)
    );
}

/// The node a launched NodeClaim registers as, reporting `memory` of capacity.
fn registered_node(claim: &NodeClaim, memory: &str) -> karpenter_core::apis::SlimNode {
    serde_json::from_value(json!({
        "metadata": {"name": "n1", "labels": claim.metadata.labels.clone()},
        "status": {"capacity": {"cpu": "2", "memory": memory}},
    }))
    .unwrap()
}

fn memory_of(
    types: &[Arc<karpenter_core::domain::instance_type::InstanceType>],
    name: &str,
) -> (i64, i64) {
    let it = types.iter().find(|it| it.name == name).unwrap();
    (it.capacity.memory, it.allocatable().memory)
}

/// Karpenter's discovered capacity: a registered node's reported memory sizes the next
/// NodeClaims of its type on the same AMIs; a larger report, or a node on an AMI its class no
/// longer maps the type to, changes nothing.
#[actix::test]
async fn a_registered_nodes_reported_memory_sizes_the_next_launches_of_its_type() {
    tokio::time::pause();
    let env = Env::new().await;
    let pool = nodepool();
    let created = env
        .cloud
        .create(&od_claim("claim-a", &env.zone(0)))
        .await
        .unwrap();
    let name = label(&created, labels::INSTANCE_TYPE).to_owned();
    let before = memory_of(&env.cloud.instance_types(&pool).await.unwrap(), &name);

    // 3 GiB reported, below the estimate: the type's capacity and allocatable shrink by the gap.
    let reported = 3 * 1024 * 1024 * 1024_i64;
    assert!(reported < before.0, "{before:?}");
    env.cloud.node_registered(
        &SlimNodeClaim::from(&created),
        &registered_node(&created, "3Gi"),
    );
    let after = memory_of(&env.cloud.instance_types(&pool).await.unwrap(), &name);
    assert_eq!(after.0, reported);
    assert_eq!(after.1, before.1 - (before.0 - reported));

    // A larger report is ignored; a node on a stale AMI is not learned from.
    env.cloud.node_registered(
        &SlimNodeClaim::from(&created),
        &registered_node(&created, "100Gi"),
    );
    let mut stale = created.clone();
    stale.status.as_mut().unwrap().image_id = Some("ami-stale".into());
    env.cloud.node_registered(
        &SlimNodeClaim::from(&stale),
        &registered_node(&created, "1Gi"),
    );
    assert_eq!(
        memory_of(&env.cloud.instance_types(&pool).await.unwrap(), &name),
        after
    );

    // New AMIs on the class: the estimate again until a node on them registers.
    let mut class = env.class();
    class.status.as_mut().unwrap().amis[0].id = "ami-newer".into();
    env.view.put_ec2nodeclass(class);
    assert_eq!(
        memory_of(&env.cloud.instance_types(&pool).await.unwrap(), &name),
        before
    );
}

/// Every NodeClaim's drift check and every provisioning run reads a pool's instance types: while
/// nothing they depend on changed, each reader gets the provider's one list, not a copy of it;
/// a change (here a node reporting less memory) hands out a new list.
#[actix::test]
async fn readers_of_a_pools_instance_types_share_one_list_until_it_changes() {
    tokio::time::pause();
    let env = Env::new().await;
    let pool = nodepool();
    let first = env.cloud.instance_types(&pool).await.unwrap();
    let again = env.cloud.instance_types(&pool).await.unwrap();
    assert!(!first.is_empty());
    assert!(Arc::ptr_eq(&first, &again), "the same list is shared");

    let created = env
        .cloud
        .create(&od_claim("claim-a", &env.zone(0)))
        .await
        .unwrap();
    env.cloud.node_registered(
        &SlimNodeClaim::from(&created),
        &registered_node(&created, "1Gi"),
    );
    let changed = env.cloud.instance_types(&pool).await.unwrap();
    assert!(!Arc::ptr_eq(&first, &changed), "a change makes a new list");
    let name = label(&created, labels::INSTANCE_TYPE);
    assert_eq!(memory_of(&changed, name).0, 1024 * 1024 * 1024);
}

fn instance_id(claim: &NodeClaim) -> String {
    provider_id(claim).rsplit('/').next().unwrap().to_owned()
}

#[actix::test]
async fn a_nodeclaim_whose_fleet_answer_was_lost_with_its_process_adopts_its_instance() {
    tokio::time::pause();
    let env = Env::new().await;
    let claim = od_claim("lost", &env.zone(0));
    env.lose_next_fleet_answers(1);
    assert!(env.cloud.create(&claim).await.is_err());
    let orphans = env.instance_ids();
    assert_eq!(orphans.len(), 1, "the fleet launched");

    let restarted = env.restarted().await;
    let adopted = restarted.create(&claim).await.unwrap();
    assert_eq!(
        std::iter::once(instance_id(&adopted)).collect::<std::collections::BTreeSet<_>>(),
        orphans
    );
    assert_eq!(
        env.kwok.faults().count("CreateFleet"),
        1,
        "nothing launched again"
    );
    assert_eq!(
        label(&adopted, labels::INSTANCE_TYPE),
        env.kwok.instances()[0].instance_type
    );
    assert_eq!(label(&adopted, labels::ZONE), env.zone(0));
    assert!(
        adopted
            .status
            .as_ref()
            .unwrap()
            .allocatable
            .contains_key("cpu")
    );
    assert_eq!(
        adopted.metadata.annotations.as_ref().unwrap()[labels::EC2NODECLASS_HASH],
        "1111"
    );
    // Listed with its launch group, which the garbage collector reads.
    let listed = restarted.list().await.unwrap();
    assert!(
        listed[0]
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(karpenter_actors::nodeclaim::launch::LAUNCH_GROUP))
    );
}

#[actix::test]
async fn nodeclaims_of_a_merged_fleet_lost_with_their_process_adopt_one_instance_each() {
    tokio::time::pause();
    let env = Env::new().await;
    env.kwok.set_create_fleet_latency(Duration::from_secs(5));
    let zone = env.zone(0);
    let callers: Vec<_> = ["a", "b", "c"]
        .into_iter()
        .map(|name| {
            let (cloud, claim) = (Arc::clone(&env.cloud), od_claim(name, &zone));
            tokio::spawn(async move { cloud.create(&claim).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The process dies while EC2 works on the merged fleet.
    for caller in callers {
        caller.abort();
    }
    assert_eq!(
        env.kwok.faults().count("CreateFleet"),
        1,
        "one merged fleet"
    );
    let orphans = env.instance_ids();
    assert_eq!(orphans.len(), 3);

    env.kwok.set_create_fleet_latency(Duration::ZERO);
    let restarted = env.restarted().await;
    let mut adopted = std::collections::BTreeSet::new();
    for name in ["c", "a", "b"] {
        let claim = restarted.create(&od_claim(name, &zone)).await.unwrap();
        adopted.insert(instance_id(&claim));
    }
    assert_eq!(adopted, orphans, "one orphan each, none twice");
    assert_eq!(env.kwok.faults().count("CreateFleet"), 1);
}

#[actix::test]
async fn a_nodeclaim_whose_labels_were_written_adopts_the_instance_they_describe() {
    tokio::time::pause();
    let env = Env::new().await;
    let zone = env.zone(0);
    // p1 and p2 launch in one fleet whose answer is lost; the cheapest type's pool holds one
    // instance, so the fleet's second instance is of another type.
    env.kwok
        .set_capacity("c5.large", &zone, CapacityType::OnDemand, 1);
    env.lose_next_fleet_answers(1);
    let callers: Vec<_> = ["p1", "p2"]
        .into_iter()
        .map(|name| {
            let (cloud, claim) = (Arc::clone(&env.cloud), od_claim(name, &zone));
            tokio::spawn(async move { cloud.create(&claim).await })
        })
        .collect();
    for caller in callers {
        assert!(caller.await.unwrap().is_err());
    }
    let instances = env.kwok.instances();
    assert_eq!(instances.len(), 2);
    let first = instances
        .iter()
        .find(|i| i.instance_type == "c5.large")
        .unwrap();
    let second = instances
        .iter()
        .find(|i| i.instance_type != "c5.large")
        .unwrap();
    assert!(
        first.id < second.id,
        "without a preference the first would be taken"
    );
    // p2's labels were written before its process died; its status was not.
    let mut p2 = od_claim("p2", &zone);
    p2.metadata
        .labels
        .get_or_insert_default()
        .insert(labels::INSTANCE_TYPE.into(), second.instance_type.clone());
    let restarted = env.restarted().await;
    let adopted = restarted.create(&p2).await.unwrap();
    assert_eq!(
        instance_id(&adopted),
        second.id,
        "the instance its labels describe"
    );
    let p1 = restarted.create(&od_claim("p1", &zone)).await.unwrap();
    assert_eq!(instance_id(&p1), first.id);
    assert_eq!(env.kwok.instances().len(), 2);
}

#[actix::test]
async fn an_instance_launched_before_its_class_changed_is_not_adopted() {
    tokio::time::pause();
    let env = Env::new().await;
    let claim = od_claim("lost", &env.zone(0));
    env.lose_next_fleet_answers(1);
    assert!(env.cloud.create(&claim).await.is_err());
    let orphan = env.kwok.instances()[0].id.clone();
    let mut class = env.class();
    class
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(labels::EC2NODECLASS_HASH.into(), "2222".into());
    env.view.put_ec2nodeclass(class);

    let restarted = env.restarted().await;
    let launched = restarted.create(&claim).await.unwrap();
    assert_ne!(
        instance_id(&launched),
        orphan,
        "the old class's instance is left to the collector"
    );
    assert_eq!(env.kwok.instances().len(), 2);
}

#[actix::test]
async fn an_orphan_too_small_for_a_nodeclaims_requests_is_left_for_one_it_fits() {
    tokio::time::pause();
    let env = Env::new().await;
    let zone = env.zone(0);
    env.lose_next_fleet_answers(1);
    assert!(env.cloud.create(&od_claim("small", &zone)).await.is_err());
    let orphan = env.kwok.instances()[0].clone();
    assert!(
        orphan.instance_type.split_once('.').map(|(_, size)| size) == Some("large"),
        "{}",
        orphan.instance_type
    );

    let restarted = env.restarted().await;
    // The same group (requirements), but requests a large instance cannot hold.
    let mut big = od_claim("big", &zone);
    big.spec.resources.requests.insert(
        "cpu".into(),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("3".into()),
    );
    let launched = restarted.create(&big).await.unwrap();
    assert_ne!(instance_id(&launched), orphan.id);
    let fits = restarted.create(&od_claim("fits", &zone)).await.unwrap();
    assert_eq!(instance_id(&fits), orphan.id);
    assert_eq!(env.kwok.instances().len(), 2);
}

#[actix::test]
async fn a_failed_look_for_orphans_fails_the_launch_instead_of_launching_another() {
    tokio::time::pause();
    let env = Env::new().await;
    let claim = od_claim("lost", &env.zone(0));
    env.lose_next_fleet_answers(1);
    assert!(env.cloud.create(&claim).await.is_err());
    let restarted = env.restarted().await;
    env.kwok.faults().fail_next(
        "DescribeInstances",
        1,
        karpenter_actors::ports::aws_error::AwsError::new(
            karpenter_actors::ports::aws_error::AwsService::Ec2,
            "DescribeInstances",
            Some("RequestLimitExceeded"),
            "Request limit exceeded.",
        )
        .with_status(503),
    );
    let error = restarted.create(&claim).await.unwrap_err();
    let CloudProviderError::Create { reason, message } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(reason, "RequestLimitExceeded");
    assert!(message.starts_with("Error looking for instances launched before a restart"));
    assert_eq!(
        env.kwok.faults().count("CreateFleet"),
        1,
        "nothing launched meanwhile"
    );
    // The NodeClaim's retry looks again and adopts.
    let adopted = restarted.create(&claim).await.unwrap();
    assert_eq!(instance_id(&adopted), env.kwok.instances()[0].id);
    assert_eq!(env.kwok.instances().len(), 1);
}
