//! Cluster discovery (`karpenter::discovery`) through the aws-sdk-eks adapter against moto's
//! EKS: the endpoint and service CIDR of a cluster moto created, moto's default CIDR when none
//! was given, and a missing cluster failing with an error that names it and carries EKS's code;
//! with `EKS_CONTROL_PLANE`, the Kubernetes version from `DescribeCluster`.

use aws_sdk_eks::types::{KubernetesNetworkConfigRequest, VpcConfigRequest};
use karpenter::commands::run::{RunError, check_version};
use karpenter::discovery::{DiscoveryError, DiscoveryInputs, KubeCa, discover, version_source};
use karpenter::emulator::Emulator;
use karpenter_actors::ports::aws_error::{AwsErrorClass, AwsService};
use karpenter_actors::ports::eks::{EksApi, IpFamily};
use karpenter_actors::ports::version::VersionSourceError;
use karpenter_config::Settings;
use karpenter_core::domain::userdata::ClusterInfo;

use crate::moto::Moto;

/// The service CIDR the test cluster is created with (not moto's default, so a match proves it
/// was read from the cluster).
pub const SERVICE_CIDR: &str = "10.96.0.0/16";
/// moto's answer when a cluster was created without a service CIDR.
const MOTO_DEFAULT_CIDR: &str = "172.20.0.0/16";

/// Creates an EKS cluster in moto; `cidr` is its service CIDR (moto's default when `None`).
pub async fn create_cluster(moto: &Moto, name: &str, cidr: Option<&str>) {
    let eks = moto.raw_eks().await;
    let mut request = eks
        .create_cluster()
        .name(name)
        .role_arn("arn:aws:iam::123456789012:role/eks-cluster")
        .resources_vpc_config(VpcConfigRequest::builder().build());
    if let Some(cidr) = cidr {
        request = request.kubernetes_network_config(
            KubernetesNetworkConfigRequest::builder()
                .service_ipv4_cidr(cidr)
                .build(),
        );
    }
    request.send().await.unwrap();
}

/// Discovery as `karpenter run` does it, with `CLUSTER_NAME=name` and no `CLUSTER_ENDPOINT`.
pub async fn discover_in(moto: &Moto, name: &str) -> Result<ClusterInfo, DiscoveryError> {
    let settings = Settings {
        cluster_name: Some(name.into()),
        ..Settings::default()
    };
    let emulator = Emulator::new().unwrap();
    let client = emulator.client();
    discover(DiscoveryInputs {
        settings: &settings,
        eks: moto.clients.eks.as_ref(),
        client: &client,
        kube_ca: KubeCa::None,
    })
    .await
}

/// One moto server for the three cases: starting one costs seconds.
#[tokio::test]
async fn discovery_finds_endpoint_and_cidr_in_moto_and_names_a_missing_cluster() {
    let Some(moto) = Moto::start().await else {
        return;
    };
    create_cluster(&moto, "discovered", Some(SERVICE_CIDR)).await;
    create_cluster(&moto, "defaulted", None).await;

    // The adapter reads what moto says about the cluster.
    let described = moto
        .clients
        .eks
        .describe_cluster("discovered")
        .await
        .unwrap();
    let endpoint = described.endpoint.clone().unwrap();
    assert!(endpoint.starts_with("https://"), "{endpoint}");
    assert_eq!(described.service_ipv4_cidr.as_deref(), Some(SERVICE_CIDR));
    assert_eq!(described.ip_family, IpFamily::Ipv4);
    assert!(described.version.is_some(), "{described:?}");

    // Discovery: the endpoint and CIDR come from DescribeCluster when CLUSTER_ENDPOINT is unset.
    let info = discover_in(&moto, "discovered").await.unwrap();
    assert_eq!(info.name, "discovered");
    assert_eq!(info.endpoint, endpoint);
    assert_eq!(info.service_cidr.as_deref(), Some(SERVICE_CIDR));
    let info = discover_in(&moto, "defaulted").await.unwrap();
    assert_eq!(info.service_cidr.as_deref(), Some(MOTO_DEFAULT_CIDR));

    // A missing cluster: startup fails with Karpenter's words, the cluster's name and EKS's code.
    let error = discover_in(&moto, "no-such-cluster").await.unwrap_err();
    let text = karpenter_core::errors::chain(&error);
    assert!(
        text.starts_with("failed detecting cluster endpoint"),
        "{text}"
    );
    assert!(text.contains("no-such-cluster"), "{text}");
    let DiscoveryError::Endpoint { cluster, source } = &error else {
        panic!("expected an endpoint error, got {error:?}");
    };
    assert_eq!(cluster, "no-such-cluster");
    assert_eq!(source.service, AwsService::Eks);
    assert_eq!(source.operation, "DescribeCluster");
    assert_eq!(source.code.as_deref(), Some("ResourceNotFoundException"));
    assert_eq!(source.class, AwsErrorClass::NotFound);
    assert_eq!(error.category(), "not_found");
}

/// `EKS_CONTROL_PLANE`: the version `run` checks and the `VersionActor` follows comes from
/// moto's `DescribeCluster`, not from the API server's `/version` (the emulator's 1.33).
#[tokio::test]
async fn with_eks_control_plane_the_version_comes_from_describe_cluster() {
    let Some(moto) = Moto::start().await else {
        return;
    };
    moto.raw_eks()
        .await
        .create_cluster()
        .name("versioned")
        .version("1.31")
        .role_arn("arn:aws:iam::123456789012:role/eks-cluster")
        .resources_vpc_config(VpcConfigRequest::builder().build())
        .send()
        .await
        .unwrap();
    // Created without a version: moto's default, 1.19.
    create_cluster(&moto, "defaulted", None).await;
    let emulator = Emulator::new().unwrap();
    let client = emulator.client();
    let settings = |name: &str, eks_control_plane: bool| Settings {
        cluster_name: Some(name.into()),
        eks_control_plane,
        ..Settings::default()
    };
    let source = |settings: &Settings| version_source(settings, &client, moto.clients.eks.clone());

    let eks = settings("versioned", true);
    assert_eq!(source(&eks).version().await.unwrap().to_string(), "1.31");
    let api_server = settings("versioned", false);
    assert_eq!(
        source(&api_server).version().await.unwrap().to_string(),
        "1.33"
    );

    // moto's default is older than Karpenter v1.5 supports: `run` refuses to start.
    let defaulted = settings("defaulted", true);
    let error = check_version(source(&defaulted).as_ref(), &defaulted)
        .await
        .unwrap_err();
    assert!(matches!(error, RunError::Unsupported(_)), "{error:?}");
    assert!(
        error.to_string().contains("1.19 is not supported"),
        "{error}"
    );

    // A missing cluster: the read fails with the cluster's name and EKS's code.
    let missing = source(&settings("no-such-cluster", true))
        .version()
        .await
        .unwrap_err();
    assert_eq!(missing.category(), "not_found");
    let VersionSourceError::DescribeCluster { cluster, source } = missing else {
        panic!("expected a DescribeCluster error, got {missing:?}");
    };
    assert_eq!(cluster, "no-such-cluster");
    assert_eq!(source.operation, "DescribeCluster");
    assert_eq!(source.code.as_deref(), Some("ResourceNotFoundException"));
}
