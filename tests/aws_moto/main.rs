//! The aws-sdk adapters of `src/aws` against `moto_server` on loopback: parsing of the catalogue
//! calls, the launch path (and the AWS cloud provider launching through the adapters: launch
//! templates, CreateFleet with an ICE fallback, list, delete), IAM instance profiles, SSM
//! aliases, SQS and EventBridge, EKS cluster discovery, and injected faults with their structured
//! error fields.
//!
//! Each test starts its own moto through `scripts/moto_launcher.py` from the project venv
//! (`scripts/venv.sh`). Without the venv a test prints why and passes, unless
//! `KARPENTER_REQUIRE_MOTO=1` (set by `scripts/test.sh`), where a missing venv fails.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines,
    reason = "integration test helpers: a failed unwrap is a failed test; each test walks one \
              scenario against one moto server, which takes seconds to start"
)]

mod eks;
mod moto;
mod narrow;
mod nodeclass;

use karpenter_core::domain::instance_type::CapacityType;
use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::sync::Arc;

use karpenter::aws::RetryPolicy;
use karpenter_actors::ports::aws_error::{AwsErrorClass, AwsService};
use karpenter_actors::ports::clock::SystemClock;
use karpenter_actors::ports::cloud_provider::CloudProvider;
use karpenter_actors::ports::ec2::{
    CreateFleetRequest, CreateLaunchTemplateRequest, DescribeInstancesRequest,
    DescribeLaunchTemplatesRequest, Ec2Api, Filter, FleetLaunchTemplateConfig, FleetOverride,
    InstanceState, LaunchTemplateData, LaunchTemplateRef, RunInstancesRequest, Tags,
};
use karpenter_actors::ports::eventbridge::{EventBridgeApi, EventEntry};
use karpenter_actors::ports::iam::IamApi;
use karpenter_actors::ports::sqs::{ReceiveRequest, SqsApi};
use karpenter_actors::ports::ssm::SsmApi;
use karpenter_actors::providers::cloud_provider::{AwsCloudProvider, AwsProviders};
use karpenter_actors::providers::instance_types::{
    LabelInterner, NodeClassSettings, Placement, ResolveSettings, resolve,
};
use karpenter_actors::testing::{AwsTestKit, MemoryClusterView};
use karpenter_core::apis::labels;
use karpenter_core::apis::{EC2NodeClass, NodeClaim, NodePool};
use moto::{Fault, Moto};

fn tags(pairs: &[(&str, &str)]) -> Tags {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The default VPC's subnet per zone of us-west-2.
async fn default_subnets(ec2: &dyn Ec2Api) -> BTreeMap<String, String> {
    ec2.describe_subnets(&[Filter::new("default-for-az", &["true"])])
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.zone, s.id))
        .collect()
}

fn fleet(template: &str, capacity: u32, overrides: Vec<FleetOverride>) -> CreateFleetRequest {
    CreateFleetRequest {
        client_token: None,
        capacity_type: CapacityType::OnDemand,
        total_target_capacity: capacity,
        allocation_strategy: "lowest-price".into(),
        launch_template_configs: vec![FleetLaunchTemplateConfig {
            launch_template_name: template.into(),
            version: "$Latest".into(),
            overrides,
        }],
        tags: tags(&[
            ("karpenter.sh/nodepool", "default"),
            ("eks:eks-cluster-name", "test-cluster"),
        ]),
        context: None,
        dry_run: false,
    }
}

fn override_of(instance_type: &str, subnet: &str, zone: &str) -> FleetOverride {
    FleetOverride {
        instance_type: instance_type.into(),
        subnet_id: subnet.into(),
        zone: zone.into(),
        image_id: None,
    }
}

async fn launch_template(ec2: &dyn Ec2Api, name: &str) {
    ec2.create_launch_template(&CreateLaunchTemplateRequest {
        name: name.into(),
        data: LaunchTemplateData {
            image_id: Some("ami-12c6146b".into()),
            user_data: Some("IyEvYmluL2Jhc2g=".into()),
            ..LaunchTemplateData::default()
        },
        tags: tags(&[("karpenter.k8s.aws/ec2nodeclass", "default")]),
        dry_run: false,
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn instance_types_offerings_zones_and_subnets_parse_into_port_types() {
    let Some(moto) = Moto::start().await else {
        return;
    };
    let ec2 = moto.clients.ec2.as_ref();

    let types = ec2
        .describe_instance_types(&[
            Filter::new("supported-virtualization-type", &["hvm"]),
            Filter::new(
                "processor-info.supported-architecture",
                &["x86_64", "arm64"],
            ),
        ])
        .await
        .unwrap();
    assert!(
        types.len() > 1000,
        "moto ships a real catalogue, got {}",
        types.len()
    );
    let by_name: BTreeMap<&str, _> = types.iter().map(|t| (t.name.as_str(), t)).collect();
    let m5 = by_name["m5.large"];
    assert_eq!(
        (m5.vcpus, m5.memory_mib, m5.max_enis, m5.ipv4_per_eni),
        (2, 8192, 3, 10)
    );
    assert_eq!(m5.hypervisor, "nitro");
    assert_eq!(m5.architectures, ["x86_64"]);
    assert_eq!(m5.ebs_bandwidth_mbps, Some(4750));
    let g5 = by_name["g5.xlarge"];
    assert_eq!(g5.gpus[0].name, "A10G");
    assert_eq!(g5.gpus[0].memory_mib, 22888);
    assert_eq!(by_name["inf2.xlarge"].neuron_devices[0].cores_per_device, 2);
    assert_eq!(by_name["p4d.24xlarge"].efa_max_interfaces, 4);
    assert_eq!(by_name["m7g.large"].architectures, ["arm64"]);

    let offerings = ec2
        .describe_instance_type_offerings(&[Filter::new("instance-type", &["m5.large"])])
        .await
        .unwrap();
    let zones: BTreeSet<String> = offerings.iter().map(|o| o.location.clone()).collect();
    assert!(zones.contains("us-west-2a"), "{zones:?}");

    let azs = ec2.describe_availability_zones().await.unwrap();
    let zone_ids: BTreeMap<String, String> = azs.into_iter().map(|z| (z.name, z.zone_id)).collect();
    assert_eq!(zone_ids["us-west-2a"], "usw2-az2");

    // Parsed data feeds the instance-type resolution: m5.large gets 29 ENI-limited pods.
    let resolved = resolve(
        m5,
        Placement {
            offered_zones: &zones,
            subnet_zones: &zone_ids,
        },
        &NodeClassSettings::default(),
        &ResolveSettings {
            region: "us-west-2".into(),
            vm_memory_overhead_percent: 0.075,
            reserved_enis: 0,
        },
        &mut LabelInterner::default(),
    )
    .unwrap();
    assert_eq!(resolved.capacity.pods, 29);

    // Subnets and security groups found by Karpenter's discovery tag.
    let raw = moto.raw_ec2().await;
    let vpc = raw
        .create_vpc()
        .cidr_block("10.1.0.0/16")
        .send()
        .await
        .unwrap();
    let vpc_id = vpc.vpc().unwrap().vpc_id().unwrap().to_owned();
    let discovery = aws_sdk_ec2::types::TagSpecification::builder()
        .resource_type(aws_sdk_ec2::types::ResourceType::Subnet)
        .tags(
            aws_sdk_ec2::types::Tag::builder()
                .key("karpenter.sh/discovery")
                .value("test-cluster")
                .build(),
        )
        .build();
    raw.create_subnet()
        .vpc_id(&vpc_id)
        .cidr_block("10.1.1.0/24")
        .availability_zone("us-west-2b")
        .tag_specifications(discovery)
        .send()
        .await
        .unwrap();
    let subnets = ec2
        .describe_subnets(&[Filter::tag("karpenter.sh/discovery", &["test-cluster"])])
        .await
        .unwrap();
    assert_eq!(subnets.len(), 1);
    assert_eq!(subnets[0].zone, "us-west-2b");
    assert_eq!(subnets[0].zone_id, "usw2-az1");
    assert_eq!(subnets[0].available_ip_address_count, 251);
    assert_eq!(subnets[0].tags["karpenter.sh/discovery"], "test-cluster");
    let groups = ec2
        .describe_security_groups(&[Filter::new("vpc-id", &[&vpc_id])])
        .await
        .unwrap();
    assert!(groups.iter().any(|g| g.name == "default"));
}

#[actix::test]
async fn launch_templates_fleets_instances_and_tags_round_trip() {
    let Some(moto) = Moto::start().await else {
        return;
    };
    let ec2 = moto.clients.ec2.as_ref();
    let subnets = default_subnets(ec2).await;
    let (zone, subnet) = subnets.iter().next().unwrap();

    launch_template(ec2, "karpenter.k8s.aws/launch-test").await;
    let found = ec2
        .describe_launch_templates(&DescribeLaunchTemplatesRequest {
            names: vec!["karpenter.k8s.aws/launch-test".into()],
            filters: Vec::new(),
        })
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].tags["karpenter.k8s.aws/ec2nodeclass"], "default");

    let response = ec2
        .create_fleet(&fleet(
            "karpenter.k8s.aws/launch-test",
            2,
            vec![
                override_of("m5.large", subnet, zone),
                override_of("c5.large", subnet, zone),
            ],
        ))
        .await
        .unwrap();
    let ids: Vec<String> = response
        .instances
        .iter()
        .flat_map(|i| i.instance_ids.clone())
        .collect();
    assert_eq!(ids.len(), 2);
    assert!(response.errors.is_empty());
    assert!(response.fleet_id.is_some());
    assert_eq!(response.instances[0].zone, *zone);
    assert_eq!(response.instances[0].capacity_type, CapacityType::OnDemand);

    let instances = ec2
        .describe_instances(&DescribeInstancesRequest {
            instance_ids: ids.clone(),
            filters: Vec::new(),
        })
        .await
        .unwrap();
    assert_eq!(instances.len(), 2);
    assert_eq!(instances[0].tags["karpenter.sh/nodepool"], "default");
    assert!(instances[0].launch_time.is_some());

    ec2.create_tags(&ids[..1], &tags(&[("Name", "node-a")]))
        .await
        .unwrap();
    let named = ec2
        .describe_instances(&DescribeInstancesRequest {
            instance_ids: Vec::new(),
            filters: vec![
                Filter::tag("Name", &["node-a"]),
                Filter::tag_key("karpenter.sh/nodepool"),
            ],
        })
        .await
        .unwrap();
    assert_eq!(named.iter().map(|i| &i.id).collect::<Vec<_>>(), [&ids[0]]);

    let changes = ec2.terminate_instances(&ids).await.unwrap();
    assert_eq!(changes.len(), 2);
    assert_eq!(changes[0].current_state, InstanceState::ShuttingDown);
    let after = ec2
        .describe_instances(&DescribeInstancesRequest {
            instance_ids: ids.clone(),
            filters: Vec::new(),
        })
        .await
        .unwrap();
    assert!(after.iter().all(|i| i.state == InstanceState::Terminated));

    ec2.delete_launch_template(&LaunchTemplateRef::Name(
        "karpenter.k8s.aws/launch-test".into(),
    ))
    .await
    .unwrap();
    let gone = ec2
        .describe_launch_templates(&DescribeLaunchTemplatesRequest {
            names: vec!["karpenter.k8s.aws/launch-test".into()],
            filters: Vec::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(gone.class, AwsErrorClass::NotFound);
    assert!(gone.is_launch_template_not_found());

    let missing = ec2
        .describe_instances(&DescribeInstancesRequest {
            instance_ids: vec!["i-0123456789abcdef0".into()],
            filters: Vec::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(missing.service, AwsService::Ec2);
    assert_eq!(missing.operation, "DescribeInstances");
    assert_eq!(missing.code.as_deref(), Some("InvalidInstanceID.NotFound"));
    assert_eq!(missing.status, Some(400));
    assert!(missing.request_id.is_some());
    assert_eq!(missing.category(), "not_found");
    assert!(missing.to_string().contains("i-0123456789abcdef0"));

    cloud_provider_launches_through_the_adapters(&moto).await;
}

/// A snapshot of a fresh 50 GiB volume in us-west-2a, for data volumes.
async fn moto_snapshot(moto: &Moto) -> String {
    let raw = moto.raw_ec2().await;
    let volume = raw
        .create_volume()
        .availability_zone("us-west-2a")
        .size(50)
        .send()
        .await
        .unwrap();
    raw.create_snapshot()
        .volume_id(volume.volume_id().unwrap())
        .send()
        .await
        .unwrap()
        .snapshot_id()
        .unwrap()
        .to_owned()
}

/// A class resolved over moto's default VPC, with a snapshot-backed data volume that uses
/// every EBS field.
async fn moto_nodeclass(moto: &Moto, snapshot: &str) -> EC2NodeClass {
    let ec2 = moto.clients.ec2.as_ref();
    let subnets = ec2
        .describe_subnets(&[Filter::new("default-for-az", &["true"])])
        .await
        .unwrap();
    let vpc = subnets[0].vpc_id.clone();
    let group = ec2
        .describe_security_groups(&[
            Filter::new("group-name", &["default"]),
            Filter::new("vpc-id", &[&vpc]),
        ])
        .await
        .unwrap()
        .remove(0);
    moto.clients
        .iam
        .create_instance_profile("test-cluster_moto", "/", &Tags::new())
        .await
        .unwrap();
    let mut class: EC2NodeClass = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "moto"},
        "spec": {
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test-cluster"}}],
            "securityGroupSelectorTerms": [{"id": group.id}],
            "amiSelectorTerms": [{"id": "ami-12c6146b"}],
            "amiFamily": "AL2023",
            "role": "KarpenterNodeRole",
            "tags": {"team": "ml"},
            "blockDeviceMappings": [
                {"deviceName": "/dev/xvda", "rootVolume": true,
                 "ebs": {"volumeSize": "30Gi", "volumeType": "gp3", "encrypted": true}},
                {"deviceName": "/dev/xvdb",
                 "ebs": {"snapshotID": snapshot, "volumeSize": "50Gi", "volumeType": "gp3",
                         "iops": 4000, "throughput": 250, "kmsKeyID": "alias/karpenter",
                         "encrypted": true, "deleteOnTermination": true,
                         "volumeInitializationRate": 200}},
            ],
            "metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 2},
        },
    }))
    .unwrap();
    class.status = serde_json::from_value(serde_json::json!({
        "subnets": subnets.iter().map(|s| serde_json::json!({"id": s.id, "zone": s.zone, "zoneID": s.zone_id})).collect::<Vec<_>>(),
        "securityGroups": [{"id": group.id, "name": group.name}],
        "amis": [{"id": "ami-12c6146b", "requirements": [{"key": labels::ARCH, "operator": "In", "values": ["amd64"]}]}],
        "instanceProfile": "test-cluster_moto",
        "conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                        "lastTransitionTime": "2025-01-01T00:00:00Z"}],
    }))
    .unwrap();
    class
}

/// The AWS cloud provider over the SDK adapters: a NodeClaim whose cheapest type is out of
/// capacity launches as the next one, with a launch template EC2 stores as sent; then list,
/// delete, and the class's templates deleted.
async fn cloud_provider_launches_through_the_adapters(moto: &Moto) {
    let raw = moto.raw_ec2().await;
    let snapshot = moto_snapshot(moto).await;
    let class = moto_nodeclass(moto, &snapshot).await;
    let zone = class.status.as_ref().unwrap().subnets[0].zone.clone();
    let view = Arc::new(MemoryClusterView::new());
    view.put_ec2nodeclass(class);
    let pool: NodePool = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "moto"},
            "requirements": [],
        }}},
    }))
    .unwrap();
    view.put_nodepool(pool);
    let mut settings =
        karpenter_actors::kwok::cloud_provider::settings("us-west-2", "test-cluster");
    settings.cluster.endpoint = "https://test-cluster.example.com".into();
    let ec2: Arc<dyn Ec2Api> = Arc::new(narrow::NarrowCatalogue {
        inner: moto.clients.ec2.clone(),
        instance_types: vec!["c5.large".into(), "m5.large".into()],
    });
    let providers = AwsProviders::new(ec2, None, &settings, Arc::new(SystemClock)).unwrap();
    // The batchers are actors: the test runs them on a kit of its own (an actix test).
    let (_aws, _actors) = AwsTestKit::with_providers(&providers);
    providers.refresh().await.unwrap();
    let cloud = AwsCloudProvider::new(view, providers, Arc::new(SystemClock), &settings);

    moto.set_faults(&["c5.large"], &[]).await;
    let claim: NodeClaim = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "moto-claim", "uid": "uid-moto-claim", "labels": {labels::NODEPOOL: "default"}},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "moto"},
            "requirements": [
                {"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
                {"key": labels::INSTANCE_TYPE, "operator": "In", "values": ["c5.large", "m5.large"]},
                {"key": labels::ZONE, "operator": "In", "values": [zone]},
            ],
            "taints": [{"key": "example.com/dedicated", "value": "ml", "effect": "NoSchedule"}],
        },
    }))
    .unwrap();
    let created = cloud.create(&claim).await.unwrap();
    moto.set_faults(&[], &[]).await;
    let created_labels = created.metadata.labels.clone().unwrap();
    assert_eq!(
        created_labels[labels::INSTANCE_TYPE],
        "m5.large",
        "c5.large was out of capacity"
    );
    assert_eq!(created_labels[labels::ZONE], zone);
    assert!(
        cloud
            .providers()
            .unavailable
            .is_unavailable("c5.large", &zone, CapacityType::OnDemand),
        "the fleet error marked the offering"
    );
    let provider_id = created
        .status
        .as_ref()
        .unwrap()
        .provider_id
        .clone()
        .unwrap();
    let instance_id = provider_id.rsplit('/').next().unwrap().to_owned();
    let instance = moto
        .clients
        .ec2
        .describe_instances(&DescribeInstancesRequest {
            instance_ids: vec![instance_id.clone()],
            filters: Vec::new(),
        })
        .await
        .unwrap()
        .remove(0);
    assert_eq!(instance.instance_type, "m5.large");
    assert_eq!(instance.tags["karpenter.k8s.aws/ec2nodeclass"], "moto");
    assert_eq!(instance.tags["kubernetes.io/cluster/test-cluster"], "owned");
    assert_eq!(instance.tags["team"], "ml");

    // The launch template as EC2 keeps it.
    let templates = cloud.providers().launch_templates.cached();
    assert_eq!(templates.len(), 1, "{templates:?}");
    let versions = raw
        .describe_launch_template_versions()
        .launch_template_name(&templates[0])
        .versions("$Latest")
        .send()
        .await
        .unwrap();
    let data = versions.launch_template_versions()[0]
        .launch_template_data()
        .unwrap();
    assert_eq!(data.image_id(), Some("ami-12c6146b"));
    assert_eq!(
        data.iam_instance_profile().and_then(|p| p.name()),
        Some("test-cluster_moto")
    );
    let metadata = data.metadata_options().unwrap();
    assert_eq!(metadata.http_put_response_hop_limit(), Some(2));
    assert_eq!(
        metadata
            .http_tokens()
            .map(aws_sdk_ec2::types::LaunchTemplateHttpTokensState::as_str),
        Some("required")
    );
    let devices = data.block_device_mappings();
    assert_eq!(devices.len(), 2);
    let root = devices[0].ebs().unwrap();
    assert_eq!(
        (root.volume_size(), root.encrypted()),
        (Some(30), Some(true))
    );
    let data_volume = devices[1].ebs().unwrap();
    assert_eq!(devices[1].device_name(), Some("/dev/xvdb"));
    assert_eq!(data_volume.snapshot_id(), Some(snapshot.as_str()));
    assert_eq!(
        (
            data_volume.volume_size(),
            data_volume.iops(),
            data_volume.throughput()
        ),
        (Some(50), Some(4000), Some(250))
    );
    assert_eq!(data_volume.kms_key_id(), Some("alias/karpenter"));
    assert_eq!(data_volume.delete_on_termination(), Some(true));
    assert_eq!(data_volume.volume_initialization_rate(), Some(200));
    let interface_tags = data
        .tag_specifications()
        .iter()
        .find(|t| t.resource_type() == Some(&aws_sdk_ec2::types::ResourceType::NetworkInterface))
        .expect("network interfaces are tagged");
    assert!(
        interface_tags
            .tags()
            .iter()
            .any(|t| t.key() == Some("karpenter.sh/nodepool") && t.value() == Some("default"))
    );
    let user_data =
        String::from_utf8(aws_smithy_types::base64::decode(data.user_data().unwrap()).unwrap())
            .unwrap();
    for expected in [
        "karpenter.sh/nodepool=default",
        "karpenter.sh/capacity-type=on-demand",
        "key: example.com/dedicated",
        "key: karpenter.sh/unregistered",
        "cidr: 10.100.0.0/16",
    ] {
        assert!(
            user_data.contains(expected),
            "{expected} missing:\n{user_data}"
        );
    }

    // Listed, deleted, and the class's templates removed.
    let listed = cloud.list().await.unwrap();
    assert!(
        listed
            .iter()
            .any(|c| c.status.as_ref().and_then(|s| s.provider_id.as_deref())
                == Some(provider_id.as_str()))
    );
    cloud.delete(&created).await.unwrap();
    let deleted = cloud
        .providers()
        .launch_templates
        .delete_all("moto")
        .await
        .unwrap();
    assert_eq!(deleted, 1);
    let gone = moto
        .clients
        .ec2
        .describe_launch_templates(&DescribeLaunchTemplatesRequest {
            names: templates.clone(),
            filters: Vec::new(),
        })
        .await
        .unwrap_err();
    assert!(gone.is_launch_template_not_found());
}

#[tokio::test]
async fn instance_profiles_and_ssm_aliases_round_trip_with_classified_errors() {
    let Some(moto) = Moto::start().await else {
        return;
    };
    let iam = moto.clients.iam.as_ref();
    moto.raw_iam()
        .await
        .create_role()
        .role_name("KarpenterNodeRole")
        .assume_role_policy_document("{}")
        .send()
        .await
        .unwrap();

    let created = iam
        .create_instance_profile(
            "test-cluster_123",
            "/karpenter/us-west-2/test-cluster/",
            &tags(&[("karpenter.k8s.aws/ec2nodeclass", "default")]),
        )
        .await
        .unwrap();
    assert_eq!(created.path, "/karpenter/us-west-2/test-cluster/");
    iam.add_role_to_instance_profile("test-cluster_123", "KarpenterNodeRole")
        .await
        .unwrap();
    let profile = iam.get_instance_profile("test-cluster_123").await.unwrap();
    assert_eq!(profile.roles, ["KarpenterNodeRole"]);
    assert_eq!(profile.tags["karpenter.k8s.aws/ec2nodeclass"], "default");

    let second = iam
        .add_role_to_instance_profile("test-cluster_123", "KarpenterNodeRole")
        .await
        .unwrap_err();
    assert_eq!(second.code.as_deref(), Some("LimitExceeded"));
    assert_eq!(second.service, AwsService::Iam);

    let duplicate = iam
        .create_instance_profile("test-cluster_123", "/", &Tags::new())
        .await
        .unwrap_err();
    assert_eq!(duplicate.class, AwsErrorClass::AlreadyExists);
    assert_eq!(duplicate.code.as_deref(), Some("EntityAlreadyExists"));

    iam.remove_role_from_instance_profile("test-cluster_123", "KarpenterNodeRole")
        .await
        .unwrap();
    iam.delete_instance_profile("test-cluster_123")
        .await
        .unwrap();
    let gone = iam
        .get_instance_profile("test-cluster_123")
        .await
        .unwrap_err();
    assert_eq!(gone.class, AwsErrorClass::NotFound);
    assert_eq!(gone.code.as_deref(), Some("NoSuchEntity"));
    assert_eq!(gone.status, Some(404));
    assert_eq!(gone.operation, "GetInstanceProfile");

    let ssm = moto.clients.ssm.as_ref();
    for alias in [
        "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/x86_64/standard/recommended/image_id",
        "/aws/service/bottlerocket/aws-k8s-1.32/arm64/latest/image_id",
        "/aws/service/ami-windows-latest/Windows_Server-2022-English-Core-EKS_Optimized-1.32/image_id",
    ] {
        let parameter = ssm.get_parameter(alias).await.unwrap();
        assert!(
            parameter.value.starts_with("ami-"),
            "{alias}: {parameter:?}"
        );
    }
    let missing = ssm
        .get_parameter("/aws/service/eks/optimized-ami/1.99/amazon-linux-2023/x86_64/standard/recommended/image_id")
        .await
        .unwrap_err();
    assert_eq!(missing.class, AwsErrorClass::NotFound);
    assert_eq!(missing.code.as_deref(), Some("ParameterNotFound"));
    assert_eq!(missing.service, AwsService::Ssm);
}

#[tokio::test]
async fn eventbridge_rules_deliver_interruption_events_to_sqs() {
    let Some(moto) = Moto::start().await else {
        return;
    };
    let (sqs, events) = (moto.clients.sqs.as_ref(), moto.clients.eventbridge.as_ref());
    let url = sqs.create_queue("test-cluster").await.unwrap();
    assert_eq!(sqs.get_queue_url("test-cluster").await.unwrap(), url);
    let arn = sqs.get_queue_arn(&url).await.unwrap();
    assert!(arn.starts_with("arn:aws:sqs:us-west-2:"), "{arn}");

    events
        .put_rule(
            "test-cluster-spot",
            r#"{"source":["aws.ec2"],"detail-type":["EC2 Spot Instance Interruption Warning"]}"#,
        )
        .await
        .unwrap();
    events
        .put_targets("test-cluster-spot", "1", &arn)
        .await
        .unwrap();
    let failed = events
        .put_events(&[
            EventEntry {
                source: "aws.ec2".into(),
                detail_type: "EC2 Spot Instance Interruption Warning".into(),
                detail: r#"{"instance-id":"i-0abc","instance-action":"terminate"}"#.into(),
                resources: vec!["arn:aws:ec2:us-west-2a:instance/i-0abc".into()],
            },
            EventEntry {
                source: "aws.other".into(),
                detail_type: "Something Else".into(),
                detail: "{}".into(),
                resources: Vec::new(),
            },
        ])
        .await
        .unwrap();
    assert_eq!(failed, 0);

    let receive = ReceiveRequest {
        max_messages: 10,
        wait_time_seconds: 1,
        visibility_timeout_seconds: 20,
    };
    let messages = sqs.receive_messages(&url, receive).await.unwrap();
    assert_eq!(messages.len(), 1, "only the matching event is delivered");
    let body: serde_json::Value = serde_json::from_str(&messages[0].body).unwrap();
    assert_eq!(
        body["detail-type"],
        "EC2 Spot Instance Interruption Warning"
    );
    assert_eq!(body["detail"]["instance-id"], "i-0abc");
    sqs.delete_message(&url, &messages[0].receipt_handle)
        .await
        .unwrap();

    sqs.send_message(&url, r#"{"hello":"queue"}"#)
        .await
        .unwrap();
    let sent = sqs.receive_messages(&url, receive).await.unwrap();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].body, r#"{"hello":"queue"}"#);

    let missing = sqs.get_queue_url("no-such-queue").await.unwrap_err();
    assert_eq!(missing.class, AwsErrorClass::NotFound);
    assert_eq!(missing.service, AwsService::Sqs);
    assert!(missing.request_id.is_some());
}

#[tokio::test]
async fn injected_faults_become_classified_errors_with_structured_fields() {
    let Some(moto) = Moto::start().await else {
        return;
    };
    let ec2 = moto.clients.ec2.as_ref();
    let subnets = default_subnets(ec2).await;
    let (zone, subnet) = subnets.iter().next().unwrap();
    launch_template(ec2, "karpenter.k8s.aws/faults").await;

    // Insufficient capacity: the ICE'd override is reported as a fleet error and skipped.
    moto.set_faults(&["m5.xlarge"], &[]).await;
    let only_ice = ec2
        .create_fleet(&fleet(
            "karpenter.k8s.aws/faults",
            1,
            vec![override_of("m5.xlarge", subnet, zone)],
        ))
        .await
        .unwrap();
    assert!(only_ice.instances.is_empty());
    assert_eq!(only_ice.errors[0].code, "InsufficientInstanceCapacity");
    assert_eq!(
        only_ice.errors[0].instance_type.as_deref(),
        Some("m5.xlarge")
    );
    assert_eq!(only_ice.errors[0].zone.as_deref(), Some(zone.as_str()));
    let fallback = ec2
        .create_fleet(&fleet(
            "karpenter.k8s.aws/faults",
            1,
            vec![
                override_of("m5.xlarge", subnet, zone),
                override_of("c5.large", subnet, zone),
            ],
        ))
        .await
        .unwrap();
    assert_eq!(fallback.instances[0].instance_type, "c5.large");
    let ice = ec2
        .run_instances(&RunInstancesRequest {
            launch_template_name: "karpenter.k8s.aws/faults".into(),
            instance_type: "m5.xlarge".into(),
            subnet_id: Some(subnet.clone()),
            ..RunInstancesRequest::default()
        })
        .await
        .unwrap_err();
    assert_eq!(ice.class, AwsErrorClass::InsufficientCapacity);
    assert_eq!(ice.code.as_deref(), Some("InsufficientInstanceCapacity"));
    assert_eq!(ice.operation, "RunInstances");
    assert_eq!(ice.status, Some(400));

    // Throttling: two throttled answers, then success under the (shortened) retry policy.
    moto.set_faults(
        &[],
        &[Fault::new(
            "DescribeAvailabilityZones",
            "RequestLimitExceeded",
            503,
            2,
        )],
    )
    .await;
    assert!(!ec2.describe_availability_zones().await.unwrap().is_empty());
    // Without retries the throttling error surfaces with every field.
    moto.set_faults(
        &[],
        &[Fault::new(
            "DescribeAvailabilityZones",
            "RequestLimitExceeded",
            503,
            1,
        )],
    )
    .await;
    let unretried = moto.clients_with(RetryPolicy::none()).await;
    let throttled = unretried
        .ec2
        .describe_availability_zones()
        .await
        .unwrap_err();
    assert_eq!(throttled.class, AwsErrorClass::Throttled);
    assert_eq!(throttled.code.as_deref(), Some("RequestLimitExceeded"));
    assert_eq!(throttled.status, Some(503));
    assert_eq!(
        throttled.request_id.as_deref(),
        Some("launcher-DescribeAvailabilityZones-1")
    );
    assert_eq!(throttled.operation, "DescribeAvailabilityZones");
    assert_eq!(throttled.to_string(), "injected RequestLimitExceeded");

    // Server errors are retried, and surface as `server` once the attempts run out.
    moto.set_faults(
        &[],
        &[Fault::new("DescribeSubnets", "InternalError", 500, 100)],
    )
    .await;
    let server = ec2.describe_subnets(&[]).await.unwrap_err();
    assert_eq!(server.class, AwsErrorClass::Server);
    assert_eq!(server.status, Some(500));

    // Each remaining class from its code, over both wire protocols (EC2 query, SQS JSON).
    let cases = [
        ("UnauthorizedOperation", 403, AwsErrorClass::Unauthorized),
        (
            "AuthFailure.ServiceLinkedRoleCreationNotPermitted",
            400,
            AwsErrorClass::SpotServiceLinkedRoleMissing,
        ),
        (
            "UnfulfillableCapacity",
            400,
            AwsErrorClass::InsufficientCapacity,
        ),
    ];
    for (code, status, class) in cases {
        moto.set_faults(&[], &[Fault::new("CreateFleet", code, status, 1)])
            .await;
        let error = unretried
            .ec2
            .create_fleet(&fleet(
                "karpenter.k8s.aws/faults",
                1,
                vec![override_of("c5.large", subnet, zone)],
            ))
            .await
            .unwrap_err();
        assert_eq!(error.class, class, "{code}");
        assert_eq!(error.code.as_deref(), Some(code));
        assert_eq!(error.status, Some(status));
        assert!(error.request_id.is_some(), "{code}");
    }
    moto.set_faults(
        &[],
        &[Fault::new("GetQueueUrl", "ThrottlingException", 400, 1)],
    )
    .await;
    let sqs_throttled = unretried.sqs.get_queue_url("anything").await.unwrap_err();
    assert_eq!(sqs_throttled.class, AwsErrorClass::Throttled);
    assert_eq!(sqs_throttled.service, AwsService::Sqs);
    assert_eq!(sqs_throttled.status, Some(400));

    // Already exists comes from moto itself.
    moto.set_faults(&[], &[]).await;
    let exists = ec2
        .create_launch_template(&CreateLaunchTemplateRequest {
            name: "karpenter.k8s.aws/faults".into(),
            ..CreateLaunchTemplateRequest::default()
        })
        .await
        .unwrap_err();
    assert_eq!(exists.class, AwsErrorClass::AlreadyExists);
}

/// moto ignores client tokens: a request sent twice with one token launches twice. A cloud
/// provider started again (a restarted daemon: no memory of the launch) still finds the
/// instance its predecessor launched for a NodeClaim whose provider id was never written, by
/// its launch group tag, and adopts it instead of launching another.
#[actix::test]
async fn a_restarted_cloud_provider_adopts_its_predecessors_launch_although_moto_ignores_tokens() {
    let Some(moto) = Moto::start().await else {
        return;
    };
    let ec2 = moto.clients.ec2.as_ref();
    let subnets = default_subnets(ec2).await;
    let (zone, subnet) = subnets.iter().next().unwrap();
    launch_template(ec2, "karpenter.k8s.aws/token-test").await;
    let mut request = fleet(
        "karpenter.k8s.aws/token-test",
        1,
        vec![override_of("m5.large", subnet, zone)],
    );
    request.client_token = Some("karpenter-same-token".into());
    let first = ec2.create_fleet(&request).await.unwrap();
    let again = ec2.create_fleet(&request).await.unwrap();
    assert_ne!(
        first.instances[0].instance_ids, again.instances[0].instance_ids,
        "moto launches again for a repeated token"
    );

    let snapshot = moto_snapshot(&moto).await;
    let class = moto_nodeclass(&moto, &snapshot).await;
    let zone = class.status.as_ref().unwrap().subnets[0].zone.clone();
    let view = Arc::new(MemoryClusterView::new());
    view.put_ec2nodeclass(class);
    let pool: NodePool = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "moto"},
            "requirements": [],
        }}},
    }))
    .unwrap();
    view.put_nodepool(pool);
    let mut settings =
        karpenter_actors::kwok::cloud_provider::settings("us-west-2", "test-cluster");
    settings.cluster.endpoint = "https://test-cluster.example.com".into();
    let start = || async {
        let ec2: Arc<dyn Ec2Api> = Arc::new(narrow::NarrowCatalogue {
            inner: moto.clients.ec2.clone(),
            instance_types: vec!["c5.large".into(), "m5.large".into()],
        });
        let providers = AwsProviders::new(ec2, None, &settings, Arc::new(SystemClock)).unwrap();
        providers.refresh().await.unwrap();
        // Each "process" has its own AWS actors (batchers), kept as long as its provider.
        let aws = AwsTestKit::with_providers(&providers);
        let cloud = AwsCloudProvider::new(
            Arc::clone(&view) as _,
            providers,
            Arc::new(SystemClock),
            &settings,
        );
        (cloud, aws)
    };
    let claim: NodeClaim = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "restart-claim", "uid": "uid-restart-claim", "labels": {labels::NODEPOOL: "default"}},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "moto"},
            "requirements": [
                {"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
                {"key": labels::INSTANCE_TYPE, "operator": "In", "values": ["c5.large", "m5.large"]},
                {"key": labels::ZONE, "operator": "In", "values": [zone]},
            ],
        },
    }))
    .unwrap();
    let (first, _first_aws) = start().await;
    let launched = first.create(&claim).await.unwrap();
    let cluster_instances = || async {
        moto.clients
            .ec2
            .describe_instances(&DescribeInstancesRequest {
                instance_ids: Vec::new(),
                filters: vec![
                    Filter::tag("eks:eks-cluster-name", &["test-cluster"]),
                    Filter::tag_key(karpenter_actors::nodeclaim::launch::LAUNCH_GROUP),
                    Filter::new("instance-state-name", &["pending", "running"]),
                ],
            })
            .await
            .unwrap()
    };
    assert_eq!(
        cluster_instances().await.len(),
        1,
        "tagged with its launch group"
    );

    // The daemon dies before the provider id is written; its successor knows nothing of it.
    let (restarted, _restarted_aws) = start().await;
    let adopted = restarted.create(&claim).await.unwrap();
    assert_eq!(
        adopted.status.as_ref().unwrap().provider_id,
        launched.status.as_ref().unwrap().provider_id,
        "the same instance, adopted"
    );
    assert_eq!(cluster_instances().await.len(), 1, "nothing launched again");
    let listed = restarted.list().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(listed.iter().all(|c| {
        c.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(karpenter_actors::nodeclaim::launch::LAUNCH_GROUP))
    }));
}
