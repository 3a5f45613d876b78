//! The Kubernetes version from the API server's `/version` (kube-rs `apiserver_version`): the
//! `KubernetesVersionSource` of `karpenter run` without `EKS_CONTROL_PLANE`, and of a
//! simulation, whose emulator answers `/version` (`Emulator::set_kubernetes_version` changes it).
//! Karpenter reads `major` and `minor` (EKS reports minors such as `29+`); a server that leaves
//! them empty is read from its `gitVersion`.

use async_trait::async_trait;
use karpenter_actors::ports::version::{KubernetesVersionSource, VersionSourceError};
use karpenter_core::domain::version::KubernetesVersion;
use kube::Client;

/// [`KubernetesVersionSource`] over a kube client's `/version`.
#[derive(Clone)]
pub struct KubeVersionSource {
    client: Client,
}

impl std::fmt::Debug for KubeVersionSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeVersionSource").finish_non_exhaustive()
    }
}

impl KubeVersionSource {
    #[must_use]
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

#[async_trait]
impl KubernetesVersionSource for KubeVersionSource {
    async fn version(&self) -> Result<KubernetesVersion, VersionSourceError> {
        let info = self.client.apiserver_version().await.map_err(|error| {
            VersionSourceError::ApiServer {
                message: karpenter_core::errors::chain(&error),
            }
        })?;
        Ok(KubernetesVersion::from_parts(&info.major, &info.minor)
            .or_else(|_| KubernetesVersion::parse(&info.git_version))?)
    }
}
