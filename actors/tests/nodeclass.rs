//! The `NodeClassActor` over kwok's EC2, IAM and SSM with a recording Kubernetes fake: resolution
//! into status and conditions, one condition per failure, the hash annotations and NodeClaim
//! re-stamping, deletion waiting for NodeClaims, the re-created class that needs a fresh
//! instance profile, retries, and the daemon's routes. Every test runs in an actix system with
//! tokio time paused: requeues and backoffs take no wall time and nothing sleeps for real.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines,
    reason = "integration test helpers: a failed unwrap is a failed test; scenarios read top to \
              bottom"
)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use karpenter_actors::daemon::Daemon;
use karpenter_actors::deps::ClusterVersion;
use karpenter_actors::deps::{AwsPorts, Deps};
use karpenter_actors::kwok::ec2::{KwokEc2, KwokEc2Config, KwokEc2Deps};
use karpenter_actors::kwok::eventbridge::KwokEventBridge;
use karpenter_actors::kwok::iam::KwokIam;
use karpenter_actors::kwok::pricing::KwokPricing;
use karpenter_actors::kwok::sqs::KwokSqs;
use karpenter_actors::kwok::ssm::KwokSsm;
use karpenter_actors::messages::{Cause, ClusterChange, Reconcile};
use karpenter_actors::metrics::Metrics;
use karpenter_actors::nodeclass::finalize::REASON_WAITING_ON_NODECLAIM_TERMINATION;
use karpenter_actors::nodeclass::status::find;
use karpenter_actors::nodeclass::{NodeClassActor, NodeClassDeps};
use karpenter_actors::ports::aws_error::{AwsError, AwsService};
use karpenter_actors::ports::clock::{Clock, ManualClock};
use karpenter_actors::ports::cloud_provider::{
    CloudProvider, CloudProviderError, DriftReason, RepairPolicy,
};
use karpenter_actors::ports::cluster::{ClusterApi, ClusterEvent};
use karpenter_actors::ports::ec2::{
    CreateLaunchTemplateRequest, DescribeLaunchTemplatesRequest, Ec2Api, Image, LaunchTemplateData,
    Tags,
};
use karpenter_actors::ports::iam::IamApi;
use karpenter_actors::providers::amis::AmiProvider;
use karpenter_actors::providers::instance_profiles::{InstanceProfileProvider, profile_name};
use karpenter_actors::providers::security_groups::SecurityGroupProvider;
use karpenter_actors::providers::subnets::SubnetProvider;
use karpenter_actors::providers::unavailable::UnavailableOfferings;
use karpenter_actors::runtime::{ActorKit, Family, GroupSpec, KitOptions, RootGroup, SendError};
use karpenter_actors::testing::ClusterCall;
use karpenter_actors::testing::MemoryClusterView;
use karpenter_actors::testing::{FakeClusterApi, MirroredClusterApi};
use karpenter_core::apis::conditions::{ConditionStatus, READY, ec2nodeclass as types};
use karpenter_core::apis::labels::{
    EC2NODECLASS_HASH, EC2NODECLASS_HASH_VERSION, EC2NODECLASS_TERMINATION_FINALIZER,
    TAG_EC2NODECLASS, TAG_EKS_CLUSTER_NAME,
};
use karpenter_core::apis::{EC2NodeClass, NodeClaim, NodeClaimStatus, NodePool};
use karpenter_core::domain::nodeclass_hash::HASH_VERSION;
use karpenter_core::domain::userdata::ClusterInfo;
use prometheus_client::registry::Registry;

const CLUSTER: &str = "test-cluster";
const REGION: &str = "us-west-2";
const TIMEOUT: Duration = Duration::from_secs(30);
const X86_IMAGE: &str = "ami-00000000000000001";
const ARM_IMAGE: &str = "ami-00000000000000002";

fn cluster_info() -> ClusterInfo {
    ClusterInfo {
        name: CLUSTER.into(),
        endpoint: "https://test-cluster.example.com".into(),
        ca_bundle: Some("Y2EtYnVuZGxlCg==".into()),
        dns_ips: vec!["10.100.0.10".parse().unwrap()],
        service_cidr: Some("10.100.0.0/16".into()),
    }
}

/// Ports, stores and the actor family of one test.
struct Env {
    _kit: ActorKit,
    root: RootGroup,
    family: Family<NodeClassActor>,
    deps: NodeClassDeps,
    api: Arc<FakeClusterApi>,
    view: Arc<MemoryClusterView>,
    ec2: Arc<KwokEc2>,
    iam: Arc<KwokIam>,
    clock: Arc<ManualClock>,
}

struct Ports {
    api: Arc<FakeClusterApi>,
    view: Arc<MemoryClusterView>,
    mirrored: Arc<MirroredClusterApi>,
    clock: Arc<ManualClock>,
    ec2: Arc<KwokEc2>,
    iam: Arc<KwokIam>,
    ssm: Arc<KwokSsm>,
}

fn ports() -> Ports {
    let clock = Arc::new(ManualClock::new(
        "2025-06-01T00:00:00Z".parse::<Timestamp>().unwrap(),
    ));
    let api = Arc::new(FakeClusterApi::new());
    api.set_now(clock.now());
    let view = Arc::new(MemoryClusterView::new());
    let mirrored = Arc::new(MirroredClusterApi::new(Arc::clone(&api), Arc::clone(&view)));
    let ec2 = Arc::new(
        KwokEc2::new(
            KwokEc2Config::new(REGION, CLUSTER),
            KwokEc2Deps {
                clock: clock.clone(),
                events: None,
            },
        )
        .unwrap(),
    );
    let iam = Arc::new(KwokIam::default());
    let ssm = Arc::new(KwokSsm::with_aliases(&["1.33"], X86_IMAGE, ARM_IMAGE));
    Ports {
        api,
        view,
        mirrored,
        clock,
        ec2,
        iam,
        ssm,
    }
}

fn nodeclass_deps(p: &Ports, info: ClusterInfo) -> NodeClassDeps {
    let ec2: Arc<dyn Ec2Api> = p.ec2.clone();
    NodeClassDeps {
        cluster: p.mirrored.clone(),
        view: p.view.clone(),
        clock: p.clock.clone(),
        ec2: Arc::clone(&ec2),
        subnets: Arc::new(SubnetProvider::new(Arc::clone(&ec2))),
        security_groups: Arc::new(SecurityGroupProvider::new(Arc::clone(&ec2))),
        amis: Arc::new(AmiProvider::new(Arc::clone(&ec2), p.ssm.clone())),
        instance_profiles: Arc::new(InstanceProfileProvider::new(p.iam.clone())),
        cluster_info: info,
        region: REGION.into(),
        kubernetes_version: ClusterVersion::default(),
        cloud: None,
    }
}

impl Env {
    fn new() -> Self {
        Self::with_cluster(cluster_info())
    }

    fn with_cluster(info: ClusterInfo) -> Self {
        let p = ports();
        let deps = nodeclass_deps(&p, info);
        let mut metrics = Registry::default();
        let kit = ActorKit::new(&mut metrics, KitOptions::default());
        let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
        let family = root
            .family::<NodeClassActor>(GroupSpec::one_for_one("nodeclasses"), deps.clone())
            .unwrap();
        Env {
            _kit: kit,
            root,
            family,
            deps,
            api: p.api,
            view: p.view,
            ec2: p.ec2,
            iam: p.iam,
            clock: p.clock,
        }
    }

    /// Creates (or replaces) a class in both the API and the store.
    fn apply(&self, class: EC2NodeClass) {
        self.api.seed_ec2nodeclass(class.clone());
        self.view.put_ec2nodeclass(class);
    }

    fn class(&self, name: &str) -> EC2NodeClass {
        self.api.ec2nodeclass(name).expect("class exists")
    }

    /// Delivers one reconcile and waits until it was handled.
    async fn reconcile(&self, name: &str) -> Result<(), SendError> {
        self.family.ensure(name).unwrap();
        self.family
            .request(
                name,
                Reconcile {
                    cause: Cause::Changed,
                },
                TIMEOUT,
            )
            .await
    }

    /// Marks the class for deletion, as `kubectl delete` does while a finalizer remains.
    fn delete(&self, name: &str) {
        let mut class = self.class(name);
        class.metadata.deletion_timestamp = Some(Time(self.clock.now()));
        self.apply(class);
    }

    fn condition(&self, name: &str, type_: &str) -> (ConditionStatus, String, String) {
        let class = self.class(name);
        let status = class.status.expect("status written");
        let condition =
            find(&status.conditions, type_).unwrap_or_else(|| panic!("condition {type_} missing"));
        (
            condition.status,
            condition.reason.clone(),
            condition.message.clone(),
        )
    }
}

fn profile(class: &str) -> String {
    profile_name(CLUSTER, REGION, class)
}

fn class_from(name: &str, spec: serde_json::Value) -> EC2NodeClass {
    let mut base = serde_json::json!({
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "role": "KarpenterNodeRole-test",
    });
    if let (serde_json::Value::Object(base), serde_json::Value::Object(extra)) = (&mut base, spec) {
        for (key, value) in extra {
            if value.is_null() {
                base.remove(&key);
            } else {
                base.insert(key, value);
            }
        }
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "generation": 1},
        "spec": base,
    }))
    .unwrap()
}

fn nodeclaim_for(name: &str, class: &str, annotations: &serde_json::Value) -> NodeClaim {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "requirements": [],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": class},
        },
    }))
    .unwrap()
}

fn aws_error(service: AwsService, operation: &'static str, code: &str, status: u16) -> AwsError {
    AwsError::new(service, operation, Some(code), format!("injected {code}")).with_status(status)
}

#[actix::test]
async fn a_class_resolves_into_a_ready_status_with_its_finalizer_and_hash() {
    tokio::time::pause();
    let env = Env::new();
    env.apply(class_from("default", serde_json::json!({})));
    env.reconcile("default").await.unwrap();

    let class = env.class("default");
    assert_eq!(
        class.metadata.finalizers.as_deref(),
        Some(&[EC2NODECLASS_TERMINATION_FINALIZER.to_owned()][..])
    );
    let annotations = class.metadata.annotations.clone().unwrap();
    assert_eq!(annotations[EC2NODECLASS_HASH_VERSION], HASH_VERSION);
    assert!(!annotations[EC2NODECLASS_HASH].is_empty());

    let status = class.status.clone().unwrap();
    assert_eq!(status.subnets.len(), 3);
    assert!(status.subnets.iter().all(|s| s.zone_id.is_some()));
    let ids: Vec<&str> = status.subnets.iter().map(|s| s.id.as_str()).collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(ids, sorted, "equal free addresses order by id");
    assert_eq!(status.security_groups.len(), 1);
    assert_eq!(
        status.security_groups[0].name.as_deref(),
        Some("test-cluster-node")
    );
    // al2023@latest: x86 standard, nvidia and neuron, arm standard and nvidia.
    assert_eq!(status.amis.len(), 5);
    assert!(status.amis.iter().any(|a| a.id == X86_IMAGE));
    assert!(status.amis.iter().any(|a| a.id == ARM_IMAGE));
    assert_eq!(
        status.instance_profile.as_deref(),
        Some(profile("default").as_str())
    );
    for type_ in [
        types::AMIS_READY,
        types::SUBNETS_READY,
        types::SECURITY_GROUPS_READY,
        types::INSTANCE_PROFILE_READY,
        types::VALIDATION_SUCCEEDED,
        READY,
    ] {
        let (status, reason, _) = env.condition("default", type_);
        assert_eq!(status, ConditionStatus::True, "{type_}");
        assert_eq!(reason, type_);
    }

    let profile = env
        .iam
        .get_instance_profile(&profile("default"))
        .await
        .unwrap();
    assert_eq!(profile.roles, ["KarpenterNodeRole-test"]);
    assert_eq!(profile.tags[TAG_EC2NODECLASS], "default");
    assert_eq!(profile.tags[TAG_EKS_CLUSTER_NAME], CLUSTER);
    assert_eq!(profile.tags["kubernetes.io/cluster/test-cluster"], "owned");
    assert_eq!(profile.tags["topology.kubernetes.io/region"], REGION);
    for dry_run in ["CreateFleet", "CreateLaunchTemplate", "RunInstances"] {
        assert_eq!(env.ec2.faults().count(dry_run), 1, "{dry_run}");
    }
    assert!(env.ec2.instances().is_empty(), "dry runs launch nothing");

    // A second look changes nothing and repeats no dry run (cached for 10 minutes).
    let writes = env.api.calls().len();
    env.reconcile("default").await.unwrap();
    assert_eq!(env.api.calls().len(), writes);
    assert_eq!(env.ec2.faults().count("CreateFleet"), 1);

    // Requeues: subnets every minute, without any event.
    let subnet_calls = env.ec2.faults().count("DescribeSubnets");
    tokio::time::sleep(Duration::from_secs(125)).await;
    assert!(
        env.ec2.faults().count("DescribeSubnets") > subnet_calls,
        "subnets are refreshed every minute"
    );
    env.root.stop().await;
}

#[actix::test]
async fn no_matching_subnets_is_subnets_not_found_and_blocks_validation() {
    tokio::time::pause();
    let env = Env::new();
    env.apply(class_from(
        "default",
        serde_json::json!({"subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "nope"}}]}),
    ));
    env.reconcile("default").await.unwrap();
    let (status, reason, message) = env.condition("default", types::SUBNETS_READY);
    assert_eq!(status, ConditionStatus::False);
    assert_eq!(reason, types::REASON_SUBNETS_NOT_FOUND);
    assert_eq!(message, "SubnetSelector did not match any Subnets");
    let (status, reason, _) = env.condition("default", types::VALIDATION_SUCCEEDED);
    assert_eq!(status, ConditionStatus::False);
    assert_eq!(reason, types::REASON_DEPENDENCIES_NOT_READY);
    let (status, reason, message) = env.condition("default", READY);
    assert_eq!(status, ConditionStatus::False);
    assert_eq!(reason, "UnhealthyDependents");
    assert!(message.contains("SubnetsReady=False"), "{message}");
    assert_eq!(env.ec2.faults().count("CreateFleet"), 0, "no dry run");

    // The user tags a subnet: the one-minute requeue finds it without any event.
    env.ec2.add_subnet(karpenter_actors::ports::ec2::Subnet {
        id: "subnet-0000000000000000a".into(),
        zone: "us-west-2a".into(),
        zone_id: "usw2-az2".into(),
        vpc_id: "vpc-00000000000000001".into(),
        available_ip_address_count: 10,
        map_public_ip_on_launch: false,
        tags: [("karpenter.sh/discovery".to_owned(), "nope".to_owned())].into(),
    });
    tokio::time::sleep(Duration::from_secs(65)).await;
    let (status, _, _) = env.condition("default", types::SUBNETS_READY);
    assert_eq!(status, ConditionStatus::True);
    assert_eq!(env.condition("default", READY).0, ConditionStatus::True);
    env.root.stop().await;
}

#[actix::test]
async fn no_matching_ami_is_ami_not_found() {
    tokio::time::pause();
    let env = Env::new();
    env.apply(class_from(
        "by-tag",
        serde_json::json!({"amiFamily": "AL2023", "amiSelectorTerms": [{"tags": {"team": "none"}}]}),
    ));
    // An alias whose parameters do not exist for the cluster's version.
    env.apply(class_from(
        "old-version",
        serde_json::json!({"amiSelectorTerms": [{"alias": "bottlerocket@v1.2.3"}]}),
    ));
    env.reconcile("by-tag").await.unwrap();
    env.reconcile("old-version").await.unwrap();
    let (status, reason, message) = env.condition("by-tag", types::AMIS_READY);
    assert_eq!(status, ConditionStatus::False);
    assert_eq!(reason, types::REASON_AMI_NOT_FOUND);
    assert_eq!(message, "AMISelector did not match any AMIs");
    let (status, reason, message) = env.condition("old-version", types::AMIS_READY);
    assert_eq!(status, ConditionStatus::False);
    assert_eq!(reason, types::REASON_AMI_NOT_FOUND);
    assert!(message.contains("bottlerocket@v1.2.3"), "{message}");
    assert!(env.class("by-tag").status.unwrap().amis.is_empty());
    env.root.stop().await;
}

#[actix::test]
async fn amis_by_name_owner_and_tags_pick_the_newest_non_deprecated_per_architecture() {
    tokio::time::pause();
    let env = Env::new();
    let image = |id: &str, name: &str, arch: &str, created: &str, deprecated: Option<&str>| Image {
        id: id.into(),
        name: name.into(),
        architecture: arch.into(),
        creation_date: created.into(),
        deprecation_time: deprecated.map(str::to_owned),
        owner_id: "000000000000".into(),
        state: "available".into(),
        tags: [("team".to_owned(), "ml".to_owned())].into(),
    };
    env.ec2.add_image(image(
        "ami-0000000000000000a",
        "team-ml-1",
        "x86_64",
        "2025-01-01T00:00:00.000Z",
        None,
    ));
    // Newer, but deprecated before "now" (2025-06-01).
    env.ec2.add_image(image(
        "ami-0000000000000000b",
        "team-ml-2",
        "x86_64",
        "2025-03-01T00:00:00.000Z",
        Some("2025-05-01T00:00:00.000Z"),
    ));
    env.ec2.add_image(image(
        "ami-0000000000000000c",
        "team-ml-3",
        "arm64",
        "2025-02-01T00:00:00.000Z",
        None,
    ));
    env.apply(class_from(
        "by-name",
        serde_json::json!({"amiFamily": "AL2023", "amiSelectorTerms": [{"name": "team-ml-*", "owner": "self"}]}),
    ));
    env.apply(class_from(
        "by-tag",
        serde_json::json!({"amiFamily": "AL2023", "amiSelectorTerms": [{"tags": {"team": "ml"}}]}),
    ));
    for name in ["by-name", "by-tag"] {
        env.reconcile(name).await.unwrap();
        let amis = env.class(name).status.unwrap().amis;
        let ids: Vec<&str> = amis.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(
            ids,
            ["ami-0000000000000000c", "ami-0000000000000000a"],
            "{name}"
        );
        assert_eq!(
            env.condition(name, types::AMIS_READY).0,
            ConditionStatus::True
        );
    }
    env.root.stop().await;
}

#[actix::test]
async fn iam_refusing_the_instance_profile_is_a_condition_not_a_crash() {
    tokio::time::pause();
    let env = Env::new();
    env.iam.faults().fail_next(
        "CreateInstanceProfile",
        1,
        aws_error(
            AwsService::Iam,
            "CreateInstanceProfile",
            "AccessDenied",
            403,
        ),
    );
    env.apply(class_from("default", serde_json::json!({})));
    env.reconcile("default").await.unwrap();
    let (status, reason, message) = env.condition("default", types::INSTANCE_PROFILE_READY);
    assert_eq!(status, ConditionStatus::False);
    assert_eq!(reason, types::REASON_INSTANCE_PROFILE_CREATION_FAILED);
    assert!(message.contains("creating instance profile"), "{message}");
    assert!(message.contains("AccessDenied"), "{message}");
    assert_eq!(env.condition("default", READY).0, ConditionStatus::False);

    // The policy is fixed: the next look (a minute later) creates the profile.
    tokio::time::sleep(Duration::from_secs(65)).await;
    assert_eq!(
        env.condition("default", types::INSTANCE_PROFILE_READY).0,
        ConditionStatus::True
    );
    assert!(
        env.iam
            .get_instance_profile(&profile("default"))
            .await
            .is_ok()
    );
    env.root.stop().await;
}

#[actix::test]
async fn bad_user_data_fails_validation_with_the_parse_error() {
    tokio::time::pause();
    let env = Env::new();
    env.apply(class_from(
        "bottlerocket",
        serde_json::json!({
            "amiSelectorTerms": [{"alias": "bottlerocket@latest"}],
            "userData": "[settings.kubernetes\nmax-pods = 3",
        }),
    ));
    env.reconcile("bottlerocket").await.unwrap();
    let (status, reason, message) = env.condition("bottlerocket", types::VALIDATION_SUCCEEDED);
    assert_eq!(status, ConditionStatus::False);
    assert_eq!(reason, types::REASON_USER_DATA_VALIDATION_FAILED);
    assert!(message.contains("not valid TOML"), "{message}");
    assert_eq!(
        env.condition("bottlerocket", types::AMIS_READY).0,
        ConditionStatus::True
    );
    assert_eq!(env.ec2.faults().count("CreateFleet"), 0, "no dry run");
    env.root.stop().await;
}

#[actix::test]
async fn the_dry_run_launches_a_type_a_nodepool_of_the_class_could_use() {
    tokio::time::pause();
    let p = ports();
    let mut deps = nodeclass_deps(&p, cluster_info());
    let aws = karpenter_actors::testing::AwsTestKit::new(KitOptions::default());
    let cloud = karpenter_actors::kwok::cloud_provider::cloud_provider(
        karpenter_actors::kwok::cloud_provider::KwokCloudDeps {
            ec2: p.ec2.clone(),
            pricing: None,
            view: p.view.clone(),
            clock: p.clock.clone(),
            settings: karpenter_actors::kwok::cloud_provider::settings(REGION, CLUSTER),
            aws_group: (*aws.root).clone(),
        },
    )
    .await
    .unwrap();
    deps.cloud = Some(cloud);
    // The only NodePool on this class wants Graviton c7g.large: the dry run launches that,
    // not Karpenter's m5.large fallback (v1.5 dynamic instance-type validation).
    let pool: NodePool = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "graviton"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c7g.large"]}
            ]
        }}}
    }))
    .unwrap();
    p.view.put_nodepool(pool);
    let mut metrics = Registry::default();
    let kit = ActorKit::new(&mut metrics, KitOptions::default());
    let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
    let family = root
        .family::<NodeClassActor>(GroupSpec::one_for_one("nodeclasses"), deps)
        .unwrap();
    let class = class_from("default", serde_json::json!({}));
    p.api.seed_ec2nodeclass(class.clone());
    p.view.put_ec2nodeclass(class);
    family.ensure("default").unwrap();
    family
        .request(
            "default",
            Reconcile {
                cause: Cause::Changed,
            },
            TIMEOUT,
        )
        .await
        .unwrap();
    let launched: Vec<String> = p
        .ec2
        .faults()
        .calls()
        .into_iter()
        .filter(|c| c.operation == "RunInstances")
        .map(|c| c.detail)
        .collect();
    assert_eq!(launched, ["c7g.large"]);
    let status = p.api.ec2nodeclass("default").unwrap().status.unwrap();
    let validation = find(&status.conditions, types::VALIDATION_SUCCEEDED).unwrap();
    assert_eq!(validation.status, ConditionStatus::True);
    root.stop().await;
}

#[actix::test]
async fn an_unauthorized_dry_run_names_the_call() {
    tokio::time::pause();
    let env = Env::new();
    env.ec2.faults().fail_next(
        "RunInstances",
        1,
        aws_error(
            AwsService::Ec2,
            "RunInstances",
            "UnauthorizedOperation",
            403,
        ),
    );
    env.apply(class_from("default", serde_json::json!({})));
    env.reconcile("default").await.unwrap();
    let (status, reason, message) = env.condition("default", types::VALIDATION_SUCCEEDED);
    assert_eq!(status, ConditionStatus::False);
    assert_eq!(reason, types::REASON_RUN_INSTANCES_AUTH_CHECK_FAILED);
    assert_eq!(
        message,
        "Controller isn't authorized to call ec2:RunInstances"
    );
    env.root.stop().await;
}

#[actix::test]
async fn an_al2023_class_without_the_cluster_cidr_is_not_ready() {
    tokio::time::pause();
    let env = Env::with_cluster(ClusterInfo {
        service_cidr: None,
        ..cluster_info()
    });
    env.apply(class_from("default", serde_json::json!({})));
    env.reconcile("default").await.unwrap();
    let (status, reason, message) = env.condition("default", READY);
    assert_eq!(status, ConditionStatus::False);
    assert_eq!(reason, types::REASON_NODE_CLASS_NOT_READY);
    assert_eq!(message, "Failed to detect the cluster CIDR");
    assert_eq!(
        env.condition("default", types::VALIDATION_SUCCEEDED).0,
        ConditionStatus::True
    );
    env.root.stop().await;
}

#[actix::test]
async fn a_throttled_call_keeps_the_condition_and_retries_with_backoff() {
    tokio::time::pause();
    let env = Env::new();
    env.ec2.faults().fail_next(
        "DescribeSubnets",
        1,
        aws_error(
            AwsService::Ec2,
            "DescribeSubnets",
            "RequestLimitExceeded",
            503,
        ),
    );
    env.apply(class_from("default", serde_json::json!({})));
    let error = env.reconcile("default").await.unwrap_err();
    assert_eq!(error.category(), "throttled");
    let (status, reason, _) = env.condition("default", types::SUBNETS_READY);
    assert_eq!(status, ConditionStatus::Unknown);
    assert_eq!(reason, "AwaitingReconciliation");
    // The other parts resolved in the same pass.
    assert_eq!(
        env.condition("default", types::AMIS_READY).0,
        ConditionStatus::True
    );
    // First retry after a second.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        env.condition("default", types::SUBNETS_READY).0,
        ConditionStatus::True
    );
    assert_eq!(env.condition("default", READY).0, ConditionStatus::True);
    env.root.stop().await;
}

#[actix::test]
async fn a_karpenter_hash_version_restamps_nodeclaims_instead_of_drifting_them() {
    tokio::time::pause();
    let env = Env::new();
    let mut class = class_from("default", serde_json::json!({}));
    class.metadata.annotations = Some(
        [
            (EC2NODECLASS_HASH.to_owned(), "123".to_owned()),
            (EC2NODECLASS_HASH_VERSION.to_owned(), "v4".to_owned()),
        ]
        .into(),
    );
    env.apply(class);
    let karpenter = serde_json::json!({EC2NODECLASS_HASH: "123", EC2NODECLASS_HASH_VERSION: "v4"});
    let fresh = nodeclaim_for("fresh", "default", &karpenter);
    let mut drifted = nodeclaim_for("drifted", "default", &karpenter);
    drifted.status = Some(NodeClaimStatus {
        conditions: vec![karpenter_core::apis::conditions::Condition {
            type_: "Drifted".into(),
            status: ConditionStatus::True,
            observed_generation: None,
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
            reason: "NodeClassDrift".into(),
            message: String::new(),
        }],
        ..NodeClaimStatus::default()
    });
    let other = nodeclaim_for("other", "another-class", &karpenter);
    for claim in [fresh, drifted, other] {
        env.api.seed_nodeclaim(claim.clone());
        env.view.put_nodeclaim(&claim);
    }
    env.reconcile("default").await.unwrap();

    let class_hash = env.class("default").metadata.annotations.unwrap()[EC2NODECLASS_HASH].clone();
    assert_ne!(class_hash, "123");
    let annotations = |name: &str| {
        env.api
            .nodeclaim(name)
            .unwrap()
            .metadata
            .annotations
            .unwrap()
    };
    assert_eq!(annotations("fresh")[EC2NODECLASS_HASH], class_hash);
    assert_eq!(
        annotations("fresh")[EC2NODECLASS_HASH_VERSION],
        HASH_VERSION
    );
    assert_eq!(annotations("drifted")[EC2NODECLASS_HASH], "123");
    assert_eq!(
        annotations("drifted")[EC2NODECLASS_HASH_VERSION],
        HASH_VERSION
    );
    assert_eq!(annotations("other")[EC2NODECLASS_HASH_VERSION], "v4");
    env.root.stop().await;
}

#[actix::test]
async fn deletion_waits_for_nodeclaims_then_removes_profile_templates_and_finalizer() {
    tokio::time::pause();
    let env = Env::new();
    env.apply(class_from("default", serde_json::json!({})));
    env.reconcile("default").await.unwrap();
    let profile = profile("default");
    assert!(env.deps.instance_profiles.is_cached(&profile));
    // A launch template the cloud provider made for this class, and one of another class.
    for class in ["default", "other"] {
        env.ec2
            .create_launch_template(&CreateLaunchTemplateRequest {
                name: format!("karpenter.k8s.aws/{class}"),
                data: LaunchTemplateData::default(),
                tags: Tags::from([
                    (TAG_EKS_CLUSTER_NAME.to_owned(), CLUSTER.to_owned()),
                    (TAG_EC2NODECLASS.to_owned(), class.to_owned()),
                ]),
                dry_run: false,
            })
            .await
            .unwrap();
    }
    let claim = nodeclaim_for("default-abc12", "default", &serde_json::json!({}));
    env.api.seed_nodeclaim(claim.clone());
    env.view.put_nodeclaim(&claim);

    env.delete("default");
    env.reconcile("default").await.unwrap();
    let waiting: Vec<ClusterEvent> = env
        .api
        .events()
        .into_iter()
        .filter(|e| e.reason == REASON_WAITING_ON_NODECLAIM_TERMINATION)
        .collect();
    assert_eq!(waiting.len(), 1);
    assert_eq!(
        waiting[0].note.as_deref(),
        Some("Waiting on NodeClaim termination for default-abc12")
    );
    assert_eq!(waiting[0].regarding.kind.as_deref(), Some("EC2NodeClass"));
    assert!(env.iam.get_instance_profile(&profile).await.is_ok());
    assert!(env.api.ec2nodeclass("default").is_some(), "finalizer holds");

    // Another look soon after does not repeat the event; ten minutes later it does.
    env.reconcile("default").await.unwrap();
    let count = |env: &Env| {
        env.api
            .calls()
            .iter()
            .filter(|c| {
                matches!(c, ClusterCall::PublishEvent { reason, .. } if reason == REASON_WAITING_ON_NODECLAIM_TERMINATION)
            })
            .count()
    };
    assert_eq!(count(&env), 1);
    tokio::time::sleep(Duration::from_secs(601)).await;
    assert_eq!(count(&env), 2);

    // The NodeClaim goes: cleanup, then the finalizer.
    env.api.delete_nodeclaim("default-abc12").await.unwrap();
    env.view.remove_nodeclaim("default-abc12");
    let unrelated = nodeclaim_for("unrelated", "other", &serde_json::json!({}));
    env.api.seed_nodeclaim(unrelated.clone());
    env.view.put_nodeclaim(&unrelated);
    env.reconcile("default").await.unwrap();
    assert!(
        env.iam
            .get_instance_profile(&profile)
            .await
            .unwrap_err()
            .is_not_found()
    );
    assert!(!env.deps.instance_profiles.is_cached(&profile));
    let templates = env
        .ec2
        .describe_launch_templates(&DescribeLaunchTemplatesRequest::default())
        .await
        .unwrap();
    let names: Vec<&str> = templates.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["karpenter.k8s.aws/other"]);
    assert!(
        env.api.ec2nodeclass("default").is_none(),
        "finalizer removed"
    );
    env.root.stop().await;
}

#[actix::test]
async fn a_deleting_class_keeps_its_profile_and_templates_until_the_view_has_synced() {
    tokio::time::pause();
    let env = Env::new();
    env.apply(class_from("default", serde_json::json!({})));
    env.reconcile("default").await.unwrap();
    let profile = profile("default");
    env.ec2
        .create_launch_template(&CreateLaunchTemplateRequest {
            name: "karpenter.k8s.aws/default".to_owned(),
            data: LaunchTemplateData::default(),
            tags: Tags::from([
                (TAG_EKS_CLUSTER_NAME.to_owned(), CLUSTER.to_owned()),
                (TAG_EC2NODECLASS.to_owned(), "default".to_owned()),
            ]),
            dry_run: false,
        })
        .await
        .unwrap();
    // The view has listed no NodeClaim yet: the one still running under the class is unseen.
    env.view.set_synced(false);
    env.delete("default");
    env.reconcile("default").await.unwrap();
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(env.iam.get_instance_profile(&profile).await.is_ok());
    let templates = env
        .ec2
        .describe_launch_templates(&DescribeLaunchTemplatesRequest::default())
        .await
        .unwrap();
    assert_eq!(templates.len(), 1, "{templates:?}");
    assert!(env.api.ec2nodeclass("default").is_some(), "finalizer holds");

    // Synced, with the NodeClaim listed: the class waits for it as usual.
    let claim = nodeclaim_for("default-abc12", "default", &serde_json::json!({}));
    env.api.seed_nodeclaim(claim.clone());
    env.view.put_nodeclaim(&claim);
    env.view.set_synced(true);
    env.reconcile("default").await.unwrap();
    assert!(env.iam.get_instance_profile(&profile).await.is_ok());
    assert!(
        env.api
            .events()
            .iter()
            .any(|e| e.reason == REASON_WAITING_ON_NODECLAIM_TERMINATION)
    );
    env.root.stop().await;
}

#[actix::test]
async fn a_class_recreated_under_the_same_name_gets_a_fresh_instance_profile() {
    tokio::time::pause();
    let env = Env::new();
    let profile = profile("default");
    env.apply(class_from("default", serde_json::json!({})));
    env.reconcile("default").await.unwrap();
    assert_eq!(env.iam.faults().count("CreateInstanceProfile"), 1);

    env.delete("default");
    env.reconcile("default").await.unwrap();
    assert!(env.api.ec2nodeclass("default").is_none());
    // The watch reports the deletion; the daemon stops the actor.
    env.family.remove("default");

    // Re-created within the profile cache's 15 minutes.
    tokio::time::sleep(Duration::from_mins(1)).await;
    env.apply(class_from("default", serde_json::json!({})));
    env.reconcile("default").await.unwrap();
    assert_eq!(env.iam.faults().count("CreateInstanceProfile"), 2);
    let recreated = env.iam.get_instance_profile(&profile).await.unwrap();
    assert_eq!(recreated.roles, ["KarpenterNodeRole-test"]);
    assert_eq!(
        env.condition("default", types::INSTANCE_PROFILE_READY).0,
        ConditionStatus::True
    );
    env.root.stop().await;
}

#[actix::test]
async fn a_given_instance_profile_is_used_as_is() {
    tokio::time::pause();
    let env = Env::new();
    env.apply(class_from(
        "given",
        serde_json::json!({"role": null, "instanceProfile": "MyProfile"}),
    ));
    env.reconcile("given").await.unwrap();
    let status = env.class("given").status.unwrap();
    assert_eq!(status.instance_profile.as_deref(), Some("MyProfile"));
    assert_eq!(env.iam.faults().count("CreateInstanceProfile"), 0);
    env.delete("given");
    env.reconcile("given").await.unwrap();
    assert_eq!(env.iam.faults().count("DeleteInstanceProfile"), 0);
    assert!(env.api.ec2nodeclass("given").is_none());
    env.root.stop().await;
}

/// A cloud provider the daemon test never calls.
#[derive(Debug)]
struct UnusedCloud;

#[async_trait]
impl CloudProvider for UnusedCloud {
    async fn create(&self, _: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        unimplemented!("not used by the NodeClassActor")
    }
    async fn delete(&self, _: &NodeClaim) -> Result<(), CloudProviderError> {
        unimplemented!("not used by the NodeClassActor")
    }
    async fn get(&self, _: &str) -> Result<NodeClaim, CloudProviderError> {
        unimplemented!("not used by the NodeClassActor")
    }
    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        unimplemented!("not used by the NodeClassActor")
    }
    async fn instance_types(
        &self,
        _: &NodePool,
    ) -> Result<karpenter_actors::ports::cloud_provider::InstanceTypes, CloudProviderError> {
        unimplemented!("not used by the NodeClassActor")
    }
    async fn is_drifted(
        &self,
        _: &karpenter_core::apis::SlimNodeClaim,
    ) -> Result<Option<DriftReason>, CloudProviderError> {
        unimplemented!("not used by the NodeClassActor")
    }
    async fn tag_instance(
        &self,
        _: &karpenter_core::apis::SlimNodeClaim,
        _: &karpenter_core::domain::tags::Tags,
    ) -> Result<(), CloudProviderError> {
        unimplemented!("not used by the NodeClassActor")
    }
    fn node_registered(
        &self,
        _: &karpenter_core::apis::SlimNodeClaim,
        _: &karpenter_core::apis::SlimNode,
    ) {
    }

    fn repair_policies(&self) -> std::borrow::Cow<'static, [RepairPolicy]> {
        std::borrow::Cow::Borrowed(&[])
    }
    fn name(&self) -> &'static str {
        "unused"
    }
}

#[actix::test]
async fn the_daemon_routes_class_changes_and_nodeclaim_deletions_to_the_class_actors() {
    tokio::time::pause();
    let p = ports();
    let sqs = Arc::new(KwokSqs::new(REGION));
    let deps = Deps {
        settings: Arc::new(karpenter_config::Settings::default()),
        clock: p.clock.clone(),
        cluster: p.mirrored.clone(),
        view: p.view.clone(),
        cloud: Arc::new(UnusedCloud),
        aws: AwsPorts {
            ec2: p.ec2.clone(),
            sqs: sqs.clone(),
            eventbridge: Arc::new(KwokEventBridge::new(REGION, sqs, p.clock.clone())),
            iam: p.iam.clone(),
            ssm: p.ssm.clone(),
            pricing: Arc::new(KwokPricing::default()),
            eks: Arc::new(karpenter_actors::kwok::eks::KwokEks::default()),
        },
        unavailable: Arc::new(UnavailableOfferings::default()),
        cluster_info: cluster_info(),
        region: REGION.into(),
        kubernetes_version: ClusterVersion::default(),
        kubernetes_version_source: None,
        metrics: Arc::new(Metrics::default()),
    };
    let mut metrics = Registry::default();
    let kit = ActorKit::new(&mut metrics, KitOptions::default());
    let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
    let daemon = Daemon::start((*root).clone(), deps, &mut metrics).unwrap();

    let class = class_from("default", serde_json::json!({}));
    p.api.seed_ec2nodeclass(class.clone());
    p.view.put_ec2nodeclass(class);
    daemon.observe(&ClusterChange::EC2NodeClass {
        name: "default".into(),
        deleted: false,
    });
    assert_eq!(daemon.nodeclasses().unwrap().keys(), ["default"]);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let ready = |api: &FakeClusterApi| {
        api.ec2nodeclass("default")
            .and_then(|c| c.status)
            .and_then(|s| find(&s.conditions, READY).map(|c| c.status))
    };
    assert_eq!(ready(&p.api), Some(ConditionStatus::True));

    // Deletion with a NodeClaim left: the class waits; the NodeClaim's deletion wakes it.
    let claim = nodeclaim_for("default-1", "default", &serde_json::json!({}));
    p.api.seed_nodeclaim(claim.clone());
    p.view.put_nodeclaim(&claim);
    let mut deleting = p.api.ec2nodeclass("default").unwrap();
    deleting.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
    p.api.seed_ec2nodeclass(deleting.clone());
    p.view.put_ec2nodeclass(deleting);
    daemon.observe(&ClusterChange::EC2NodeClass {
        name: "default".into(),
        deleted: false,
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(p.api.ec2nodeclass("default").is_some());
    p.view.remove_nodeclaim("default-1");
    daemon.observe(&ClusterChange::NodeClaim {
        name: "default-1".into(),
        deleted: true,
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(p.api.ec2nodeclass("default").is_none(), "finalized");
    daemon.observe(&ClusterChange::EC2NodeClass {
        name: "default".into(),
        deleted: true,
    });
    assert!(daemon.nodeclasses().unwrap().is_empty());
    root.stop().await;
}
