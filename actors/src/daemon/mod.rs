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
use crate::domain::userdata::ClusterInfo;
use crate::interruption::{InterruptionActor, InterruptionDeps, InterruptionMetrics};
use crate::metrics::SharedMetrics;
use crate::nodeclass::{KubernetesVersion, NodeClassActor, NodeClassDeps};
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
use crate::runtime::{ActorRef, Family, GroupRef, GroupSpec, SpawnError};

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
    /// Cluster name (`CLUSTER_NAME`), API endpoint and CA (`CLUSTER_ENDPOINT`,
    /// `CLUSTER_CA_BUNDLE` or `DescribeCluster`), DNS (`kube-dns` Service) and service CIDR:
    /// tags, instance-profile names and user data.
    pub cluster_info: ClusterInfo,
    /// The AWS region (`AWS_REGION` or IMDS).
    pub region: String,
    /// The cluster's Kubernetes version, kept current by the binary from `/version`.
    pub kubernetes_version: KubernetesVersion,
}

/// The running actors.
#[derive(Debug)]
pub struct Daemon {
    root: GroupRef,
    deps: Deps,
    metrics: SharedMetrics,
    /// The interruption actor, when `INTERRUPTION_QUEUE` is set.
    interruption: Option<ActorRef<InterruptionActor>>,
    nodeclasses: Family<NodeClassActor>,
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
        let nodeclasses = root.family::<NodeClassActor>(
            GroupSpec::one_for_one("nodeclasses"),
            NodeClassDeps::from_daemon(&deps),
        )?;
        Ok(Self {
            root,
            deps,
            metrics,
            interruption,
            nodeclasses,
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
            ClusterChange::EC2NodeClass { name, deleted } => self.route_nodeclass(name, *deleted),
            ClusterChange::Relisted(WatchedKind::EC2NodeClass) => self.relist_nodeclasses(),
            ClusterChange::NodeClaim { deleted: true, .. }
            | ClusterChange::Relisted(WatchedKind::NodeClaim) => self.nudge_deleting_nodeclasses(),
            ClusterChange::NodeClaim { .. }
            | ClusterChange::NodePool { .. }
            | ClusterChange::Node { .. }
            | ClusterChange::Pod { .. }
            | ClusterChange::DaemonSet { .. }
            | ClusterChange::PodDisruptionBudget { .. }
            | ClusterChange::Relisted(_) => {}
        }
    }

    /// The `NodeClassActor` family (one per `EC2NodeClass`).
    #[must_use]
    pub fn nodeclasses(&self) -> &Family<NodeClassActor> {
        &self.nodeclasses
    }

    fn route_nodeclass(&self, name: &str, deleted: bool) {
        if deleted {
            self.nodeclasses.remove(name);
            return;
        }
        let cause = Cause::Changed;
        match self.nodeclasses.ensure(name) {
            Ok(actor) => {
                // A full mailbox is counted by the kit; the actor re-reads the store anyway.
                let _ = actor.try_send_event(Reconcile { cause });
            }
            Err(error) => tracing::error!(ec2nodeclass = name, %error, "starting NodeClassActor"),
        }
    }

    /// After a relist: every class in the store gets an actor and a look; actors of classes
    /// that are gone stop.
    fn relist_nodeclasses(&self) {
        let present: Vec<String> = self
            .deps
            .view
            .ec2nodeclasses()
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        for name in self.nodeclasses.keys() {
            if !present.contains(&name) {
                self.nodeclasses.remove(&name);
            }
        }
        for name in &present {
            if let Ok(actor) = self.nodeclasses.ensure(name) {
                let _ = actor.try_send_event(Reconcile {
                    cause: Cause::Relisted,
                });
            }
        }
    }

    /// A NodeClaim went: classes waiting in deletion for their NodeClaims look again (the
    /// deleted NodeClaim is no longer in the store to say which class it used).
    fn nudge_deleting_nodeclasses(&self) {
        for class in self.deps.view.ec2nodeclasses() {
            if class.metadata.deletion_timestamp.is_none() {
                continue;
            }
            if let Some(name) = &class.metadata.name {
                let _ = self.nodeclasses.try_send_event(
                    name,
                    Reconcile {
                        cause: Cause::Related,
                    },
                );
            }
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
