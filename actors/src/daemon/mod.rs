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
use prometheus_client::registry::Registry;

pub use change::{Cause, ClusterChange, Reconcile, WatchedKind};

use crate::aws::unavailable::UnavailableOfferings;
use crate::interruption::{InterruptionActor, InterruptionDeps, InterruptionMetrics};
use crate::metrics::SharedMetrics;
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
use crate::runtime::{ActorRef, GroupRef, SpawnError};

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
    /// The ICE cache: written by launches and spot interruptions, read by instance types. The
    /// cloud provider must be built over this same instance.
    pub unavailable: Arc<UnavailableOfferings>,
}

/// The running actors.
#[derive(Debug)]
pub struct Daemon {
    root: GroupRef,
    deps: Deps,
    metrics: SharedMetrics,
    /// The interruption actor, when `INTERRUPTION_QUEUE` is set.
    interruption: Option<ActorRef<InterruptionActor>>,
}

impl Daemon {
    /// Starts every actor under `root`, registering their metrics in `registry`.
    pub fn start(root: GroupRef, deps: Deps, registry: &mut Registry) -> Result<Self, SpawnError> {
        let metrics = SharedMetrics::register(registry);
        let interruption = match &deps.settings.interruption_queue {
            Some(queue) => Some(root.spawn::<InterruptionActor>(
                "interruption",
                InterruptionDeps {
                    sqs: Arc::clone(&deps.aws.sqs),
                    cluster: Arc::clone(&deps.cluster),
                    view: Arc::clone(&deps.view),
                    unavailable: Arc::clone(&deps.unavailable),
                    clock: Arc::clone(&deps.clock),
                    queue: queue.clone(),
                    rebalance_replace: deps.settings.interruption_rebalance_replace,
                    metrics: InterruptionMetrics::register(
                        registry,
                        metrics.nodeclaims_disrupted.clone(),
                    ),
                },
            )?),
            None => None,
        };
        Ok(Self {
            root,
            deps,
            metrics,
            interruption,
        })
    }

    /// Metrics several actors write.
    #[must_use]
    pub fn metrics(&self) -> &SharedMetrics {
        &self.metrics
    }

    /// The interruption actor, when one runs.
    #[must_use]
    pub fn interruption(&self) -> Option<&ActorRef<InterruptionActor>> {
        self.interruption.as_ref()
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
