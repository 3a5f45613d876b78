//! The Kubernetes adapters: how the daemon reads and writes the cluster through kube-rs.
//!
//! - [`ingress`]: watchers keep the [`state::ClusterState`] store (one writer, many readers;
//!   each kind's objects in a [`store::KindStore`]) and route each change to the owners
//!   subscribed to its kind.
//! - [`cluster_api`]: the `ClusterApi` port of `karpenter-actors` (every write the daemon makes:
//!   NodeClaims, statuses with optimistic concurrency, node labels, taints and cordon,
//!   evictions, pod deletion, events).
//! - [`events`]: the event recorder behind `ClusterApi::publish_event` (series of repeats,
//!   stamped with the daemon's clock).
//! - [`leader`]: leader election on a Lease with Karpenter's timing, and the leadership gate
//!   every write checks.
//! - [`client`]: the daemon's two clients (rate-limited and gated; the lease's own) with
//!   connect and request deadlines.
//! - [`lenient`]: how each watched kind is decoded, so one object the types cannot read is
//!   skipped instead of failing its kind's list.
//! - [`version`]: the Kubernetes version from `/version`, a `KubernetesVersionSource`.
//!
//! The same code runs against a real API server (in-cluster or from a kubeconfig, see
//! [`connect`]) and against the emulator in [`crate::emulator`] in tests and simulations.

pub mod client;
pub mod cluster_api;
pub mod events;
pub mod ingress;
pub mod leader;
pub mod lenient;
pub mod state;
pub mod store;
pub mod version;

use std::path::Path;

use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};

/// Failures building a client.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("reading kubeconfig {path}")]
    Kubeconfig {
        path: String,
        #[source]
        source: KubeconfigError,
    },
    #[error("finding a Kubernetes configuration (in-cluster or KUBECONFIG)")]
    Infer(#[source] kube::config::InferConfigError),
    #[error("building the Kubernetes client")]
    Client(#[source] kube::Error),
}

impl ConnectError {
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Kubeconfig { .. } => "kubeconfig",
            Self::Infer(_) => "config",
            Self::Client(_) => "client",
        }
    }
}

/// A client from `kubeconfig` when given, else the in-cluster service account or the default
/// kubeconfig (kube's inference order).
pub async fn connect(kubeconfig: Option<&Path>) -> Result<kube::Client, ConnectError> {
    kube::Client::try_from(load_config(kubeconfig).await?).map_err(ConnectError::Client)
}

/// The configuration [`connect`] builds its client from (the daemon builds its two clients from
/// it, see [`client::daemon_clients`]).
pub async fn load_config(kubeconfig: Option<&Path>) -> Result<kube::Config, ConnectError> {
    match kubeconfig {
        Some(path) => {
            let parsed =
                Kubeconfig::read_from(path).map_err(|source| ConnectError::Kubeconfig {
                    path: path.display().to_string(),
                    source,
                })?;
            kube::Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
                .await
                .map_err(|source| ConnectError::Kubeconfig {
                    path: path.display().to_string(),
                    source,
                })
        }
        None => kube::Config::infer().await.map_err(ConnectError::Infer),
    }
}
