//! The Kubernetes version from EKS: with `EKS_CONTROL_PLANE`, Karpenter reads the control plane's
//! version from `DescribeCluster` instead of the API server's `/version`
//! (`pkg/providers/version/version.go`, `getEKSVersion`). EKS answers `major.minor` (`1.33`).

use std::sync::Arc;

use async_trait::async_trait;
use karpenter_core::domain::version::KubernetesVersion;

use crate::ports::eks::EksApi;
use crate::ports::version::{KubernetesVersionSource, VersionSourceError};

/// [`KubernetesVersionSource`] over EKS `DescribeCluster` of the daemon's cluster.
#[derive(Debug, Clone)]
pub struct EksVersionSource {
    eks: Arc<dyn EksApi>,
    cluster: String,
}

impl EksVersionSource {
    /// Reads the version of `cluster` (`CLUSTER_NAME`).
    #[must_use]
    pub fn new(eks: Arc<dyn EksApi>, cluster: &str) -> Self {
        Self {
            eks,
            cluster: cluster.to_owned(),
        }
    }
}

#[async_trait]
impl KubernetesVersionSource for EksVersionSource {
    async fn version(&self) -> Result<KubernetesVersion, VersionSourceError> {
        let cluster = self
            .eks
            .describe_cluster(&self.cluster)
            .await
            .map_err(|source| VersionSourceError::DescribeCluster {
                cluster: self.cluster.clone(),
                source,
            })?;
        let version = cluster
            .version
            .ok_or_else(|| VersionSourceError::NoVersion {
                cluster: self.cluster.clone(),
            })?;
        Ok(KubernetesVersion::parse(&version)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kwok::eks::KwokEks;
    use crate::ports::aws_error::AwsErrorClass;

    #[tokio::test]
    async fn the_version_is_what_describe_cluster_says_and_a_missing_one_is_an_error() {
        let eks = Arc::new(KwokEks::with_cluster("c"));
        let mut cluster = KwokEks::cluster("c");
        cluster.version = Some("1.31".into());
        eks.put(cluster.clone());
        let source = EksVersionSource::new(Arc::clone(&eks) as _, "c");
        assert_eq!(source.version().await.unwrap().to_string(), "1.31");

        cluster.version = None;
        eks.put(cluster);
        let error = source.version().await.unwrap_err();
        assert_eq!(error.category(), "no_version");

        let missing = EksVersionSource::new(eks as _, "other");
        let VersionSourceError::DescribeCluster { cluster, source } =
            missing.version().await.unwrap_err()
        else {
            panic!("expected a DescribeCluster error");
        };
        assert_eq!(cluster, "other");
        assert_eq!(source.class, AwsErrorClass::NotFound);
    }
}
