//! The Kubernetes version port: where the control plane's version is read (Karpenter's
//! `providers.version`, `pkg/providers/version/version.go`). AMI aliases resolve per Kubernetes
//! version, so the daemon reads it at startup and its `VersionActor` every 5 minutes.
//!
//! Implemented over the API server's `/version` in the binary (`src/kube/version.rs`, also what a
//! simulation reads from the emulator), over EKS `DescribeCluster` when `EKS_CONTROL_PLANE` is
//! set ([`crate::providers::version::EksVersionSource`]), and programmably by
//! `crate::testing::FakeVersionSource`.

use async_trait::async_trait;
use karpenter_core::domain::version::{KubernetesVersion, VersionError};

use super::aws_error::AwsError;

/// Reads the control plane's Kubernetes version.
#[async_trait]
pub trait KubernetesVersionSource: Send + Sync + std::fmt::Debug {
    /// The control plane's `major.minor` version now.
    async fn version(&self) -> Result<KubernetesVersion, VersionSourceError>;
}

/// A failed read of the version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionSourceError {
    /// `/version` failed; `message` is the client's error chain (the kube client is not a
    /// dependency of this crate).
    #[error("getting kubernetes version from the kubernetes api: {message}")]
    ApiServer { message: String },
    #[error("describing eks cluster {cluster}")]
    DescribeCluster {
        cluster: String,
        #[source]
        source: AwsError,
    },
    #[error("eks cluster {cluster} reports no kubernetes version")]
    NoVersion { cluster: String },
    #[error(transparent)]
    Unparseable(#[from] VersionError),
}

impl VersionSourceError {
    /// A bounded label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::ApiServer { .. } => "api_server",
            Self::DescribeCluster { source, .. } => source.category(),
            Self::NoVersion { .. } => "no_version",
            Self::Unparseable(error) => error.category(),
        }
    }
}
