//! The daemon's actors assembled: every actor family and singleton started under one root
//! group, with their dependencies, and the routing of cluster changes to them.
//!
//! Data flow:
//!
//! ```text
//! kube watchers (karpenter::kube::ClusterIngress) --Observed<K>--> karpenter::daemon pump
//!     --ClusterChange--> Daemon::observe --Reconcile / triggers--> actors
//! actors --reads--> ClusterView      actors --writes--> ClusterApi, CloudProvider, AWS ports
//! ```
//!
//! [`Deps`] holds every port and shared value, built once at startup by the binary
//! (`karpenter run` with real adapters, `karpenter simulate` and the tests with the emulator and
//! kwok). [`Daemon::start`] must run inside the actix system of the kit; the returned
//! [`Daemon`] holds the actor handles and is what the ingress pump, `/debug/actors` and
//! shutdown use.
//!
//! Each actor family adds itself here: a field in [`Daemon`], one spawn line in
//! [`Daemon::start`], and its routes in [`Daemon::observe`].

mod change;

use std::sync::Arc;

use karpenter_config::Settings;

pub use change::{Cause, ClusterChange, Reconcile, WatchedKind};

use crate::metrics::Metrics;
use crate::ports::clock::Clock;
use crate::ports::cloud_provider::CloudProvider;
use crate::ports::cluster::ClusterApi;
use crate::ports::cluster_view::ClusterView;
use crate::ports::ec2::Ec2Api;
use crate::ports::eventbridge::EventBridgeApi;
use crate::ports::iam::IamApi;
use crate::ports::pricing::PricingApi;
use crate::ports::sqs::SqsApi;
use crate::ports::ssm::SsmApi;
use crate::runtime::{GroupRef, SpawnError};

/// The narrow AWS ports, for the providers and actors that call AWS directly.
#[derive(Debug, Clone)]
pub struct AwsPorts {
    pub ec2: Arc<dyn Ec2Api>,
    pub sqs: Arc<dyn SqsApi>,
    pub eventbridge: Arc<dyn EventBridgeApi>,
    pub iam: Arc<dyn IamApi>,
    pub ssm: Arc<dyn SsmApi>,
    pub pricing: Arc<dyn PricingApi>,
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
    /// Karpenter's node-lifecycle metrics, registered in the daemon's Registry
    /// (`Metrics::register`); `Metrics::default()` in tests.
    pub metrics: Arc<Metrics>,
}

/// The running actors.
#[derive(Debug)]
pub struct Daemon {
    root: GroupRef,
    deps: Deps,
}

impl Daemon {
    /// Starts every actor under `root`.
    pub fn start(root: GroupRef, deps: Deps) -> Result<Self, SpawnError> {
        Ok(Self { root, deps })
    }

    /// Routes one cluster change to the actors that own it. Never blocks: events go to
    /// mailboxes with `try_send`, and an overflow is counted by the kit (the next change or the
    /// actor's own requeue catches up, since actors re-read the store).
    pub fn observe(&self, change: &ClusterChange) {
        match change {
            ClusterChange::NodeClaim { .. }
            | ClusterChange::NodePool { .. }
            | ClusterChange::EC2NodeClass { .. }
            | ClusterChange::Node { .. }
            | ClusterChange::Pod { .. }
            | ClusterChange::DaemonSet { .. }
            | ClusterChange::PodDisruptionBudget { .. }
            | ClusterChange::Relisted(_) => {}
        }
    }

    /// The group every actor runs under.
    #[must_use]
    pub fn root(&self) -> &GroupRef {
        &self.root
    }

    /// The dependencies the actors were started with.
    #[must_use]
    pub fn deps(&self) -> &Deps {
        &self.deps
    }
}
