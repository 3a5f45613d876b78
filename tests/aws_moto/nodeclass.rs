//! The `EC2NodeClass` resolution providers and the `NodeClassActor` over the real adapters
//! against moto: subnets and security groups by tag, id and name; AMIs through the seeded SSM
//! aliases and by name; instance profiles created, re-roled, deleted and re-created; and one
//! class reconciled to `Ready` (dry runs included) and deleted with its profile and launch
//! templates.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use karpenter_actors::deps::ClusterVersion;
use karpenter_actors::messages::{Cause, Reconcile};
use karpenter_actors::nodeclass::status::find;
use karpenter_actors::nodeclass::{NodeClassActor, NodeClassDeps};
use karpenter_actors::ports::clock::SystemClock;
use karpenter_actors::ports::ec2::{
    CreateLaunchTemplateRequest, DescribeLaunchTemplatesRequest, Ec2Api, LaunchTemplateData, Tags,
};
use karpenter_actors::ports::iam::IamApi;
use karpenter_actors::ports::ssm::SsmApi;
use karpenter_actors::providers::amis::AmiProvider;
use karpenter_actors::providers::instance_profiles::{
    InstanceProfileProvider, profile_name, profile_tags,
};
use karpenter_actors::providers::security_groups::SecurityGroupProvider;
use karpenter_actors::providers::subnets::SubnetProvider;
use karpenter_actors::runtime::{ActorKit, GroupSpec, KitOptions};
use karpenter_actors::testing::MemoryClusterView;
use karpenter_actors::testing::{FakeClusterApi, MirroredClusterApi};
use karpenter_core::apis::EC2NodeClass;
use karpenter_core::apis::conditions::{ConditionStatus, READY};
use karpenter_core::apis::ec2nodeclass::{
    AmiSelectorTerm, SecurityGroupSelectorTerm, SelectorTags, SubnetSelectorTerm,
};
use karpenter_core::apis::labels::{TAG_EC2NODECLASS, TAG_EKS_CLUSTER_NAME};
use karpenter_core::domain::userdata::ClusterInfo;

use crate::moto::Moto;

const CLUSTER: &str = "test-cluster";
const REGION: &str = "us-west-2";
const DISCOVERY: &str = "karpenter.sh/discovery";

fn tag_spec(resource: ResourceType, key: &str, value: &str) -> TagSpecification {
    TagSpecification::builder()
        .resource_type(resource)
        .tags(Tag::builder().key(key).value(value).build())
        .build()
}

fn selector(key: &str, value: &str) -> SelectorTags {
    SelectorTags([(key.to_owned(), value.to_owned())].into())
}

/// A VPC with a /24 subnet in us-west-2a and a /26 one in us-west-2b, both tagged for
/// discovery, and a tagged security group. Returns (big subnet, small subnet, group id).
async fn network(moto: &Moto) -> (String, String, String) {
    let raw = moto.raw_ec2().await;
    let vpc = raw
        .create_vpc()
        .cidr_block("10.20.0.0/16")
        .send()
        .await
        .unwrap();
    let vpc_id = vpc.vpc().unwrap().vpc_id().unwrap().to_owned();
    let mut subnets = Vec::new();
    for (cidr, zone) in [
        ("10.20.1.0/24", "us-west-2a"),
        ("10.20.2.0/26", "us-west-2b"),
    ] {
        let subnet = raw
            .create_subnet()
            .vpc_id(&vpc_id)
            .cidr_block(cidr)
            .availability_zone(zone)
            .tag_specifications(tag_spec(ResourceType::Subnet, DISCOVERY, CLUSTER))
            .send()
            .await
            .unwrap();
        subnets.push(subnet.subnet().unwrap().subnet_id().unwrap().to_owned());
    }
    let group = raw
        .create_security_group()
        .group_name("test-cluster-nodes")
        .description("nodes")
        .vpc_id(&vpc_id)
        .tag_specifications(tag_spec(ResourceType::SecurityGroup, DISCOVERY, CLUSTER))
        .send()
        .await
        .unwrap();
    let group_id = group.group_id().unwrap().to_owned();
    (subnets.remove(0), subnets.remove(0), group_id)
}

async fn roles(moto: &Moto, names: &[&str]) {
    let iam = moto.raw_iam().await;
    for name in names {
        iam.create_role()
            .role_name(*name)
            .assume_role_policy_document("{}")
            .send()
            .await
            .unwrap();
    }
}

/// One moto server for both parts: starting one costs seconds.
#[actix::test]
async fn nodeclass_providers_and_actor_resolve_against_moto_and_clean_up() {
    let Some(moto) = Moto::start().await else {
        return;
    };
    let network = network(&moto).await;
    roles(&moto, &["KarpenterNodeRole", "OtherRole"]).await;
    providers_resolve_subnets_groups_amis_and_profiles(&moto, &network).await;
    a_nodeclass_is_ready_and_its_deletion_cleans_up(&moto).await;
}

async fn providers_resolve_subnets_groups_amis_and_profiles(
    moto: &Moto,
    (big, small, group_id): &(String, String, String),
) {
    let ec2: Arc<dyn Ec2Api> = moto.clients.ec2.clone();

    // Subnets: by tag, most free addresses first; ids and tags ORed without duplicates.
    let subnets = SubnetProvider::new(Arc::clone(&ec2));
    let by_tag = subnets
        .list(&[SubnetSelectorTerm {
            tags: Some(selector(DISCOVERY, CLUSTER)),
            id: None,
        }])
        .await
        .unwrap();
    let found: Vec<(&str, u32, &str)> = by_tag
        .iter()
        .map(|s| {
            (
                s.id.as_str(),
                s.available_ip_address_count,
                s.zone_id.as_str(),
            )
        })
        .collect();
    assert_eq!(
        found,
        [
            (big.as_str(), 251, "usw2-az2"),
            (small.as_str(), 59, "usw2-az1"),
        ]
    );
    let ored = subnets
        .list(&[
            SubnetSelectorTerm {
                tags: Some(selector(DISCOVERY, "*")),
                id: None,
            },
            SubnetSelectorTerm {
                tags: None,
                id: Some(small.clone()),
            },
        ])
        .await
        .unwrap();
    assert_eq!(ored.len(), 2);

    // Security groups: by tag, by id and by name find the same group.
    let groups = SecurityGroupProvider::new(Arc::clone(&ec2));
    for term in [
        SecurityGroupSelectorTerm {
            tags: Some(selector(DISCOVERY, CLUSTER)),
            ..SecurityGroupSelectorTerm::default()
        },
        SecurityGroupSelectorTerm {
            id: Some(group_id.clone()),
            ..SecurityGroupSelectorTerm::default()
        },
        SecurityGroupSelectorTerm {
            name: Some("test-cluster-nodes".into()),
            ..SecurityGroupSelectorTerm::default()
        },
    ] {
        let found = groups.list(std::slice::from_ref(&term)).await.unwrap();
        let ids: Vec<&str> = found.iter().map(|g| g.id.as_str()).collect();
        assert_eq!(ids, [group_id.as_str()], "{term:?}");
    }

    // AMIs: the alias reads the seeded SSM parameters and describes the seeded images.
    let amis = AmiProvider::new(Arc::clone(&ec2), moto.clients.ssm.clone());
    let alias = [AmiSelectorTerm {
        alias: Some("al2023@latest".into()),
        ..AmiSelectorTerm::default()
    }];
    let resolved = amis.list(&alias, "1.33", Timestamp::now()).await.unwrap();
    let ssm = moto.clients.ssm.as_ref();
    let x86 = ssm
        .get_parameter(
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id",
        )
        .await
        .unwrap()
        .value;
    assert_eq!(resolved.amis.len(), 5, "{:?}", resolved.amis);
    let standard_x86 = resolved.amis.iter().find(|a| a.id == x86).unwrap();
    let keys: Vec<(&str, &str)> = standard_x86
        .requirements
        .iter()
        .map(|r| (r.key.as_str(), r.operator.as_str()))
        .collect();
    assert_eq!(
        keys,
        [
            ("kubernetes.io/arch", "In"),
            ("karpenter.k8s.aws/instance-gpu-count", "DoesNotExist"),
            (
                "karpenter.k8s.aws/instance-accelerator-count",
                "DoesNotExist"
            ),
        ]
    );
    let by_name = amis
        .list(
            &[AmiSelectorTerm {
                name: Some("*1.33-amazon-linux-2023-arm64-standard*".into()),
                ..AmiSelectorTerm::default()
            }],
            "1.33",
            Timestamp::now(),
        )
        .await
        .unwrap();
    assert_eq!(by_name.amis.len(), 1);
    assert_eq!(by_name.amis[0].requirements[0].values, ["arm64"]);
    let missing = amis
        .list(&alias, "1.99", Timestamp::now())
        .await
        .unwrap_err();
    assert!(missing.is_selector_problem(), "{missing}");

    // Instance profiles: created with tags and the role; the role replaced; deleted and evicted;
    // created afresh.
    let profiles = InstanceProfileProvider::new(moto.clients.iam.clone());
    let name = profile_name(CLUSTER, REGION, "default");
    let tags = profile_tags(&Tags::new(), CLUSTER, REGION, "default");
    profiles
        .ensure(&name, "KarpenterNodeRole", &tags)
        .await
        .unwrap();
    let iam = moto.clients.iam.as_ref();
    let created = iam.get_instance_profile(&name).await.unwrap();
    assert_eq!(created.roles, ["KarpenterNodeRole"]);
    assert_eq!(created.tags[TAG_EC2NODECLASS], "default");
    assert_eq!(created.tags[TAG_EKS_CLUSTER_NAME], CLUSTER);
    profiles
        .ensure(&name, "team/OtherRole", &tags)
        .await
        .unwrap();
    assert_eq!(
        iam.get_instance_profile(&name).await.unwrap().roles,
        ["OtherRole"]
    );
    profiles.delete(&name).await.unwrap();
    assert!(!profiles.is_cached(&name));
    assert!(
        iam.get_instance_profile(&name)
            .await
            .unwrap_err()
            .is_not_found()
    );
    profiles.delete(&name).await.unwrap();
    profiles
        .ensure(&name, "KarpenterNodeRole", &tags)
        .await
        .unwrap();
    assert_eq!(
        iam.get_instance_profile(&name).await.unwrap().roles,
        ["KarpenterNodeRole"]
    );
}

/// A `NodeClassActor` family over moto's adapters and fake Kubernetes ports, with one
/// `EC2NodeClass` named `default` (AL2023 alias, discovery tags, `KarpenterNodeRole`).
struct ClassUnderTest {
    api: Arc<FakeClusterApi>,
    view: Arc<MemoryClusterView>,
    family: karpenter_actors::runtime::Family<NodeClassActor>,
    root: karpenter_actors::runtime::RootGroup,
}

impl ClassUnderTest {
    fn start(moto: &Moto, cluster_info: ClusterInfo) -> Self {
        let api = Arc::new(FakeClusterApi::new());
        let view = Arc::new(MemoryClusterView::new());
        let ec2: Arc<dyn Ec2Api> = moto.clients.ec2.clone();
        let deps = NodeClassDeps {
            cluster: Arc::new(MirroredClusterApi::new(Arc::clone(&api), Arc::clone(&view))),
            view: view.clone(),
            clock: Arc::new(SystemClock),
            ec2: Arc::clone(&ec2),
            subnets: Arc::new(SubnetProvider::new(Arc::clone(&ec2))),
            security_groups: Arc::new(SecurityGroupProvider::new(Arc::clone(&ec2))),
            amis: Arc::new(AmiProvider::new(Arc::clone(&ec2), moto.clients.ssm.clone())),
            instance_profiles: Arc::new(InstanceProfileProvider::new(moto.clients.iam.clone())),
            cluster_info,
            region: REGION.into(),
            kubernetes_version: ClusterVersion::default(),
            cloud: None,
        };
        let mut metrics = prometheus_client::registry::Registry::default();
        let kit = ActorKit::new(&mut metrics, KitOptions::default());
        let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
        let family = root
            .family::<NodeClassActor>(GroupSpec::one_for_one("nodeclasses"), deps)
            .unwrap();
        let class: EC2NodeClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": "default", "uid": "uid-default", "generation": 1},
            "spec": {
                "subnetSelectorTerms": [{"tags": {DISCOVERY: CLUSTER}}],
                "securityGroupSelectorTerms": [{"tags": {DISCOVERY: CLUSTER}}],
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "role": "KarpenterNodeRole",
            },
        }))
        .unwrap();
        api.seed_ec2nodeclass(class.clone());
        view.put_ec2nodeclass(class);
        Self {
            api,
            view,
            family,
            root,
        }
    }

    async fn reconcile(&self) {
        self.family.ensure("default").unwrap();
        self.family
            .request(
                "default",
                Reconcile {
                    cause: Cause::Changed,
                },
                Duration::from_mins(1),
            )
            .await
            .unwrap();
    }

    /// The class's Ready condition: status and message.
    fn ready(&self) -> (ConditionStatus, String) {
        let status = self.api.ec2nodeclass("default").unwrap().status.unwrap();
        let ready = find(&status.conditions, READY).unwrap();
        (ready.status, ready.message.clone())
    }
}

/// Karpenter's readiness rule for AL2023 over moto: with the service CIDR discovered from moto's
/// EKS the class is Ready; without one it is not, with Karpenter's message.
#[actix::test]
async fn an_al2023_nodeclass_is_ready_with_the_cidr_discovered_from_moto_eks() {
    let Some(moto) = Moto::start().await else {
        return;
    };
    network(&moto).await;
    roles(&moto, &["KarpenterNodeRole"]).await;
    crate::eks::create_cluster(&moto, CLUSTER, Some(crate::eks::SERVICE_CIDR)).await;
    let discovered = crate::eks::discover_in(&moto, CLUSTER).await.unwrap();
    assert_eq!(
        discovered.service_cidr.as_deref(),
        Some(crate::eks::SERVICE_CIDR)
    );

    let undiscovered = ClassUnderTest::start(
        &moto,
        ClusterInfo {
            service_cidr: None,
            ..discovered.clone()
        },
    );
    undiscovered.reconcile().await;
    assert_eq!(
        undiscovered.ready(),
        (
            ConditionStatus::False,
            "Failed to detect the cluster CIDR".to_owned()
        )
    );
    undiscovered.root.stop().await;

    let class = ClassUnderTest::start(&moto, discovered);
    class.reconcile().await;
    let (status, message) = class.ready();
    assert_eq!(status, ConditionStatus::True, "{message}");
    class.root.stop().await;
}

/// The actor over the same moto: the profile the provider part left is reused.
async fn a_nodeclass_is_ready_and_its_deletion_cleans_up(moto: &Moto) {
    let class = ClassUnderTest::start(
        moto,
        ClusterInfo {
            name: CLUSTER.into(),
            endpoint: "https://test-cluster.example.com".into(),
            ca_bundle: None,
            dns_ips: vec!["10.100.0.10".parse().unwrap()],
            service_cidr: Some("10.100.0.0/16".into()),
        },
    );
    let (api, view) = (Arc::clone(&class.api), Arc::clone(&class.view));
    let ec2: Arc<dyn Ec2Api> = moto.clients.ec2.clone();
    let reconcile = || class.reconcile();
    reconcile().await;
    let status = api.ec2nodeclass("default").unwrap().status.unwrap();
    let conditions: Vec<(String, ConditionStatus, String)> = status
        .conditions
        .iter()
        .map(|c| (c.type_.clone(), c.status, c.message.clone()))
        .collect();
    assert_eq!(
        find(&status.conditions, READY).map(|c| c.status),
        Some(ConditionStatus::True),
        "{conditions:?}"
    );
    assert_eq!(status.subnets.len(), 2);
    assert_eq!(status.amis.len(), 5);
    let profile = profile_name(CLUSTER, REGION, "default");
    assert_eq!(status.instance_profile.as_deref(), Some(profile.as_str()));

    // A launch template the cloud provider made for the class.
    ec2.create_launch_template(&CreateLaunchTemplateRequest {
        name: "karpenter.k8s.aws/0123456789".into(),
        data: LaunchTemplateData {
            image_id: Some(status.amis[0].id.clone()),
            ..LaunchTemplateData::default()
        },
        tags: Tags::from([
            (TAG_EKS_CLUSTER_NAME.to_owned(), CLUSTER.to_owned()),
            (TAG_EC2NODECLASS.to_owned(), "default".to_owned()),
        ]),
        dry_run: false,
    })
    .await
    .unwrap();

    let mut deleting = api.ec2nodeclass("default").unwrap();
    deleting.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    api.seed_ec2nodeclass(deleting.clone());
    view.put_ec2nodeclass(deleting);
    reconcile().await;
    assert!(api.ec2nodeclass("default").is_none(), "finalizer removed");
    assert!(
        moto.clients
            .iam
            .get_instance_profile(&profile)
            .await
            .unwrap_err()
            .is_not_found()
    );
    let left = ec2
        .describe_launch_templates(&DescribeLaunchTemplatesRequest::default())
        .await
        .unwrap();
    assert!(left.is_empty(), "{left:?}");
    class.root.stop().await;
}
