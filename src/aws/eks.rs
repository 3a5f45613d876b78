//! [`EksApi`] over aws-sdk-eks: `DescribeCluster`, read into the port's [`EksCluster`] (only the
//! fields cluster discovery uses).

use async_trait::async_trait;
use aws_sdk_eks as eks;
use karpenter_actors::ports::aws_error::{AwsError, AwsService};
use karpenter_actors::ports::eks::{EksApi, EksCluster, IpFamily};
use karpenter_actors::retry::RetryPolicy;

#[derive(Debug, Clone)]
pub struct EksAdapter {
    client: eks::Client,
    retry: RetryPolicy,
}

impl EksAdapter {
    #[must_use]
    pub fn new(client: eks::Client, retry: RetryPolicy) -> Self {
        EksAdapter { client, retry }
    }
}

#[async_trait]
impl EksApi for EksAdapter {
    async fn describe_cluster(&self, name: &str) -> Result<EksCluster, AwsError> {
        let out = super::call(
            &self.retry,
            AwsService::Eks,
            "DescribeCluster",
            &self.client,
            |c| c.describe_cluster().name(name).send(),
        )
        .await?;
        let Some(cluster) = out.cluster() else {
            // EKS always answers with the cluster; an empty answer is treated as its absence.
            return Err(AwsError::new(
                AwsService::Eks,
                "DescribeCluster",
                Some("ResourceNotFoundException"),
                format!("DescribeCluster answered without a cluster for name: {name}."),
            ));
        };
        let network = cluster.kubernetes_network_config();
        let non_empty = |value: Option<&str>| value.filter(|v| !v.is_empty()).map(str::to_owned);
        Ok(EksCluster {
            name: cluster.name().unwrap_or(name).to_owned(),
            endpoint: non_empty(cluster.endpoint()),
            service_ipv4_cidr: non_empty(network.and_then(|n| n.service_ipv4_cidr())),
            service_ipv6_cidr: non_empty(network.and_then(|n| n.service_ipv6_cidr())),
            ip_family: match network.and_then(|n| n.ip_family()) {
                Some(eks::types::IpFamily::Ipv6) => IpFamily::Ipv6,
                _ => IpFamily::Ipv4,
            },
            version: non_empty(cluster.version()),
        })
    }
}
