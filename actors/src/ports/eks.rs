//! The narrow EKS port: `DescribeCluster`, which Karpenter calls at startup for the API endpoint
//! when `CLUSTER_ENDPOINT` is unset (`pkg/operator/operator.go`) and for the service CIDR that
//! AL2023's nodeadm configuration needs (`pkg/providers/launchtemplate`). Only the fields the
//! daemon reads are kept: not the cluster's CA, which Karpenter takes from the kube client's
//! configuration instead.
//!
//! Implemented over aws-sdk-eks in `src/aws/eks.rs` and in memory by
//! [`crate::kwok::eks::KwokEks`]; called by the binary's `discovery` module and, with
//! `EKS_CONTROL_PLANE`, by [`crate::providers::version::EksVersionSource`] (the control plane's
//! Kubernetes version).

use async_trait::async_trait;

use super::aws_error::AwsError;

/// The IP family of a cluster's pods and services (`kubernetesNetworkConfig.ipFamily`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IpFamily {
    #[default]
    Ipv4,
    Ipv6,
}

impl IpFamily {
    /// EKS's spelling (`ipv4`, `ipv6`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            IpFamily::Ipv4 => "ipv4",
            IpFamily::Ipv6 => "ipv6",
        }
    }
}

/// What `DescribeCluster` says about a cluster, as far as the daemon cares.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EksCluster {
    pub name: String,
    /// The API server URL (`https://XXXX.gr7.us-west-2.eks.amazonaws.com`); `None` while the
    /// cluster is still being created.
    pub endpoint: Option<String>,
    /// `kubernetesNetworkConfig.serviceIpv4Cidr`.
    pub service_ipv4_cidr: Option<String>,
    /// `kubernetesNetworkConfig.serviceIpv6Cidr` (IPv6 clusters).
    pub service_ipv6_cidr: Option<String>,
    pub ip_family: IpFamily,
    /// The control plane's Kubernetes version (`1.33`).
    pub version: Option<String>,
}

impl EksCluster {
    /// The service CIDR nodes are configured with: IPv4 first, then IPv6, as Karpenter's
    /// `ResolveClusterCIDR` picks it.
    #[must_use]
    pub fn service_cidr(&self) -> Option<&str> {
        self.service_ipv4_cidr
            .as_deref()
            .or(self.service_ipv6_cidr.as_deref())
    }
}

#[async_trait]
pub trait EksApi: Send + Sync + std::fmt::Debug {
    /// `DescribeCluster` of `name`; a missing cluster is a not-found error
    /// (`ResourceNotFoundException`).
    async fn describe_cluster(&self, name: &str) -> Result<EksCluster, AwsError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ipv4_service_cidr_wins_over_the_ipv6_one() {
        let mut cluster = EksCluster {
            service_ipv6_cidr: Some("fd00:1234::/108".into()),
            ip_family: IpFamily::Ipv6,
            ..EksCluster::default()
        };
        assert_eq!(cluster.service_cidr(), Some("fd00:1234::/108"));
        cluster.service_ipv4_cidr = Some("172.20.0.0/16".into());
        assert_eq!(cluster.service_cidr(), Some("172.20.0.0/16"));
        assert_eq!(EksCluster::default().service_cidr(), None);
    }
}
