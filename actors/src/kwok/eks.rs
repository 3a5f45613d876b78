//! kwok's EKS: clusters in memory, answered by `DescribeCluster` as EKS does (a missing cluster
//! is `ResourceNotFoundException`). `karpenter simulate` creates its cluster here, and the daemon
//! discovers the API endpoint and service CIDR through this port, the path `karpenter run` takes
//! against EKS.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;

use super::faults::Faults;
use crate::ports::aws_error::{AwsError, AwsService};
use crate::ports::eks::{EksApi, EksCluster, IpFamily};

/// The API endpoint kwok's clusters report (nothing listens there).
pub const KWOK_CLUSTER_ENDPOINT: &str = "https://kwok.cluster.local";
/// The service CIDR kwok's clusters report: EKS's default, which AL2023 user data needs.
pub const KWOK_SERVICE_CIDR: &str = "10.100.0.0/16";
/// The Kubernetes version kwok's clusters report.
pub const KWOK_CLUSTER_VERSION: &str = "1.33";

/// The in-memory EKS.
#[derive(Debug, Default)]
pub struct KwokEks {
    clusters: Mutex<BTreeMap<String, EksCluster>>,
    faults: Faults,
}

impl KwokEks {
    /// An EKS with one cluster named `name` ([`KwokEks::cluster`]).
    #[must_use]
    pub fn with_cluster(name: &str) -> Self {
        let eks = KwokEks::default();
        eks.put(KwokEks::cluster(name));
        eks
    }

    /// A cluster as kwok describes it: [`KWOK_CLUSTER_ENDPOINT`], [`KWOK_SERVICE_CIDR`], IPv4.
    #[must_use]
    pub fn cluster(name: &str) -> EksCluster {
        EksCluster {
            name: name.to_owned(),
            endpoint: Some(KWOK_CLUSTER_ENDPOINT.to_owned()),
            service_ipv4_cidr: Some(KWOK_SERVICE_CIDR.to_owned()),
            service_ipv6_cidr: None,
            ip_family: IpFamily::Ipv4,
            version: Some(KWOK_CLUSTER_VERSION.to_owned()),
        }
    }

    /// Creates or replaces a cluster.
    pub fn put(&self, cluster: EksCluster) {
        self.clusters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(cluster.name.clone(), cluster);
    }

    #[must_use]
    pub fn faults(&self) -> &Faults {
        &self.faults
    }
}

#[async_trait]
impl EksApi for KwokEks {
    async fn describe_cluster(&self, name: &str) -> Result<EksCluster, AwsError> {
        self.faults.check("DescribeCluster", name)?;
        self.clusters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
            .ok_or_else(|| {
                AwsError::new(
                    AwsService::Eks,
                    "DescribeCluster",
                    Some("ResourceNotFoundException"),
                    format!("No cluster found for name: {name}."),
                )
                .with_status(404)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_cluster_is_described_and_a_missing_one_is_not_found() {
        let eks = KwokEks::with_cluster("kwok");
        let cluster = eks.describe_cluster("kwok").await.unwrap();
        assert_eq!(cluster.endpoint.as_deref(), Some(KWOK_CLUSTER_ENDPOINT));
        assert_eq!(cluster.service_cidr(), Some(KWOK_SERVICE_CIDR));
        let missing = eks.describe_cluster("other").await.unwrap_err();
        assert!(missing.is_not_found(), "{missing:?}");
        assert!(missing.to_string().contains("other"), "{missing}");
        assert_eq!(eks.faults().count("DescribeCluster"), 2);
    }
}
