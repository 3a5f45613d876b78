//! What every actor is built from: [`Deps`], the ports and shared values built once at startup
//! by the binary (`karpenter run` with real adapters, `karpenter simulate` and the tests with the
//! emulator and kwok) and passed down to each actor family by [`crate::daemon`].

use std::sync::{Arc, PoisonError, RwLock};

use karpenter_config::Settings;
use karpenter_core::domain::version::{self, KubernetesVersion};

use crate::metrics::Metrics;
use crate::ports::clock::Clock;
use crate::ports::cloud_provider::CloudProvider;
use crate::ports::cluster::ClusterApi;
use crate::ports::cluster_view::ClusterView;
use crate::ports::ec2::Ec2Api;
use crate::ports::eks::EksApi;
use crate::ports::eventbridge::EventBridgeApi;
use crate::ports::iam::IamApi;
use crate::ports::pricing::PricingApi;
use crate::ports::sqs::SqsApi;
use crate::ports::ssm::SsmApi;
use crate::ports::version::KubernetesVersionSource;
use crate::providers::unavailable::UnavailableOfferings;
use karpenter_core::domain::userdata::ClusterInfo;

/// The narrow AWS ports, for the providers and actors that call AWS directly.
#[derive(Debug, Clone)]
pub struct AwsPorts {
    pub ec2: Arc<dyn Ec2Api>,
    pub sqs: Arc<dyn SqsApi>,
    pub eventbridge: Arc<dyn EventBridgeApi>,
    pub iam: Arc<dyn IamApi>,
    pub ssm: Arc<dyn SsmApi>,
    pub pricing: Arc<dyn PricingApi>,
    /// `DescribeCluster`: the binary's cluster discovery (endpoint, service CIDR) before the
    /// actors start.
    pub eks: Arc<dyn EksApi>,
}

/// Everything the actors need, built once at startup and passed down.
#[derive(Debug, Clone)]
pub struct Deps {
    pub settings: Arc<Settings>,
    /// Timestamps written to Kubernetes; timers use tokio time.
    pub clock: Arc<dyn Clock>,
    /// Kubernetes writes.
    pub cluster: Arc<dyn ClusterApi>,
    /// Kubernetes reads (the watchers' store).
    pub view: Arc<dyn ClusterView>,
    /// Launch, terminate, list instances; instance types; drift.
    pub cloud: Arc<dyn CloudProvider>,
    pub aws: AwsPorts,
    /// The ICE cache: written by launches and spot interruptions, read by instance types. The
    /// cloud provider must be built over this same instance.
    pub unavailable: Arc<UnavailableOfferings>,
    /// Cluster name (`CLUSTER_NAME`), API endpoint and CA (`CLUSTER_ENDPOINT`,
    /// `CLUSTER_CA_BUNDLE` or `DescribeCluster`), DNS (`kube-dns` Service) and service CIDR:
    /// tags, instance-profile names and user data.
    pub cluster_info: ClusterInfo,
    /// The AWS region (`AWS_REGION` or IMDS).
    pub region: String,
    /// The cluster's Kubernetes version: read by the binary at startup, kept current by the
    /// `VersionActor` ([`crate::version`]).
    pub kubernetes_version: ClusterVersion,
    /// Where the `VersionActor` reads the version (`/version`, or EKS with
    /// `EKS_CONTROL_PLANE`); `None` runs no `VersionActor` (tests over fakes), and the version
    /// stays what it was built with.
    pub kubernetes_version_source: Option<Arc<dyn KubernetesVersionSource>>,
    /// Karpenter's node-lifecycle metrics, registered in the daemon's Registry
    /// (`Metrics::register`); `Metrics::default()` in tests.
    pub metrics: Arc<Metrics>,
}

/// The cluster's Kubernetes version, shared between the `VersionActor`, which refreshes it from
/// the control plane, and the actors, which read it (AMI aliases follow the control plane).
#[derive(Debug, Clone)]
pub struct ClusterVersion(Arc<RwLock<KubernetesVersion>>);

impl Default for ClusterVersion {
    /// The newest version Karpenter v1.5 supports: what tests and a daemon that has not asked the
    /// API server yet assume.
    fn default() -> Self {
        Self::new(version::MAX_TESTED)
    }
}

impl ClusterVersion {
    #[must_use]
    pub fn new(version: KubernetesVersion) -> Self {
        Self(Arc::new(RwLock::new(version)))
    }

    #[must_use]
    pub fn get(&self) -> KubernetesVersion {
        *self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn set(&self, version: KubernetesVersion) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = version;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_version_is_shared_by_its_clones() {
        let version = ClusterVersion::default();
        assert_eq!(version.get().to_string(), "1.33");
        version.clone().set(KubernetesVersion {
            major: 1,
            minor: 32,
        });
        assert_eq!(version.get().to_string(), "1.32");
    }
}
