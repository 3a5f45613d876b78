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
//! The Provisioner singleton is spawned here and triggered from [`Daemon::observe`]; the
//! daemon's HTTP server answers `explain` through [`Daemon::explain_pod`].
//!
//! Each actor family adds itself here: a field in [`Daemon`], one spawn line in
//! [`Daemon::start`], and its routes in [`Daemon::observe`].
//!
//! Node lifecycle routes: a NodeClaim change goes to its `NodeClaimActor` (started on demand)
//! and its `NodePoolActor`; a Node change to the NodeClaim with its provider id, or, for a
//! deleting Node no NodeClaim owns, to the `GarbageCollectorActor`; a change of a pod bound to
//! a node whose NodeClaim is being deleted to that NodeClaim (its drain goes on); a pod event on
//! a node of a live NodeClaim to that NodeClaim, marked in [`PodEvents`] (it records
//! `lastPodEventTime`); a `VolumeAttachment` change to the deleting NodeClaim of its node (its
//! termination waits for attachments to go); a NodePool change to its actor and, nudged, to its
//! NodeClaims (their `Consolidatable` follows `consolidateAfter`, their `Drifted` the
//! template); an `EC2NodeClass` change to its `NodeClassActor`, the pools using it and, nudged,
//! the NodeClaims of those pools and those referencing the class (their `Drifted` follows the
//! class); a deleted NodeClaim to the classes waiting in deletion. The `GarbageCollectorActor`
//! runs on its own timers, the `InterruptionActor` on its SQS polls, the `VersionActor` (when
//! [`Deps::kubernetes_version_source`] is set) on its own timer: when the Kubernetes version
//! changed, it has every `EC2NodeClass` nudged (their AMI aliases follow the version).
//!
//! The three families count restart intensity per object: an actor that keeps failing is
//! parked (its siblings and the process go on) and an event is recorded on its object
//! ([`parking`]).

pub mod parking;

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;

use crate::deps::Deps;
use crate::messages::{Cause, ClusterChange, Reconcile, WatchedKind};
use karpenter_core::domain::consolidatable::pod_event_due;
use parking::ParkedObject;

use crate::disruption::{
    ChangeSignal, ClusterChanged, DISRUPTION_KEY, DisruptionActor, DisruptionDeps,
    DisruptionMetrics, ExplainNode, NodeExplanation,
};
use crate::garbage_collection::{
    GarbageCollectorActor, GarbageCollectorDeps, ReleaseOrphanNodes, is_held_in_deletion,
};
use crate::interruption::{InterruptionActor, InterruptionDeps, InterruptionMetrics};
use crate::metrics::Metrics;
use crate::nodeclaim::{
    LaunchCache, MAX_CONCURRENT_LAUNCHES, NodeClaimActor, NodeClaimDeps, PodEvents,
};
use crate::nodeclass::{NodeClassActor, NodeClassDeps};
use crate::nodepool::NodePoolActor;
use crate::ports::cluster_view::ClusterView;
use crate::provisioner::{
    Explain, PROVISIONER_KEY, PodExplanation, ProvisionerActor, ProvisionerDeps,
    ProvisionerMetrics, ProvisionerPorts, TriggerSource, Triggered,
};
use crate::runtime::{ActorRef, Family, GroupRef, GroupSpec, SendError, SpawnError};
use crate::version::{OnVersionChange, VERSION_KEY, VersionActor, VersionDeps};
use karpenter_core::domain::version::KubernetesVersion;

/// The running actors.
#[derive(Debug)]
pub struct Daemon {
    root: GroupRef,
    deps: Deps,
    /// One `NodeClaimActor` per NodeClaim (launch, registration, initialization, liveness,
    /// drain and termination).
    nodeclaims: Family<NodeClaimActor>,
    /// One `NodePoolActor` per NodePool (status, hash, readiness, limits).
    nodepools: Family<NodePoolActor>,
    /// Leaked instances and NodeClaims whose instance vanished.
    garbage_collector: ActorRef<GarbageCollectorActor>,
    /// Launch outcomes shared by the NodeClaim actors and the garbage collector.
    launches: Arc<LaunchCache>,
    /// Pod events routed to NodeClaim actors and not yet recorded by them.
    pod_events: Arc<PodEvents>,
    /// The interruption actor, when `INTERRUPTION_QUEUE` is set.
    interruption: Option<ActorRef<InterruptionActor>>,
    /// One `NodeClassActor` per `EC2NodeClass` (resolution, validation, status, deletion).
    nodeclasses: Option<Family<NodeClassActor>>,
    /// The Kubernetes version refresh, when the daemon was given a version source.
    version: Option<ActorRef<VersionActor>>,
    /// The Provisioner singleton: pending pods to NodeClaims.
    provisioner: ActorRef<ProvisionerActor>,
    /// The disruption singleton: consolidation, emptiness, drift and the orchestration queue.
    disruption: ActorRef<DisruptionActor>,
    disruption_changes: ChangeSignal,
}

/// How [`Daemon::start_with`] runs the actors. The default is production's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartOptions {
    /// Run the `NodeClassActor` family. Tests of the node lifecycle that
    /// write a class's status by hand turn this off, so no actor rewrites it.
    pub nodeclass_actors: bool,
    /// The Provisioner solves on the actors' thread (`ProvisionerDeps::solving_inline`), so a
    /// simulation replays exactly.
    pub inline_solve: bool,
    /// NodeClaim launches in flight at most ([`MAX_CONCURRENT_LAUNCHES`]).
    pub launch_limit: usize,
}

impl Default for StartOptions {
    fn default() -> Self {
        Self {
            nodeclass_actors: true,
            inline_solve: false,
            launch_limit: MAX_CONCURRENT_LAUNCHES,
        }
    }
}

/// How long `explain` waits for the Provisioner's answer.
const EXPLAIN_TIMEOUT: Duration = Duration::from_secs(5);

impl Daemon {
    /// Starts every actor under `root`; actors with their own metric families register them
    /// in `registry` (the shared ones are in `deps.metrics`).
    pub fn start(root: GroupRef, deps: Deps, registry: &mut Registry) -> Result<Self, SpawnError> {
        Self::start_with(root, deps, registry, StartOptions::default())
    }

    /// [`Daemon::start`] with some actors left out (see [`StartOptions`]).
    pub fn start_with(
        root: GroupRef,
        deps: Deps,
        registry: &mut Registry,
        options: StartOptions,
    ) -> Result<Self, SpawnError> {
        let launches = Arc::new(LaunchCache::with_limit(options.launch_limit));
        let pod_events = Arc::new(PodEvents::new());
        let park_events = |object| {
            parking::park_events(object, Arc::clone(&deps.cluster), Arc::clone(&deps.view))
        };
        let nodeclaims = root.family_with_park_hook::<NodeClaimActor>(
            GroupSpec::one_for_one("nodeclaims"),
            NodeClaimDeps {
                deps: deps.clone(),
                launches: Arc::clone(&launches),
                pod_events: Arc::clone(&pod_events),
            },
            park_events(ParkedObject::NodeClaim),
        )?;
        let nodepools = root.family_with_park_hook::<NodePoolActor>(
            GroupSpec::one_for_one("nodepools"),
            deps.clone(),
            park_events(ParkedObject::NodePool),
        )?;
        let garbage_collector = root.spawn::<GarbageCollectorActor>(
            "garbage-collector",
            GarbageCollectorDeps {
                deps: deps.clone(),
                launches: Arc::clone(&launches),
            },
        )?;
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
                        deps.metrics.nodeclaims_disrupted(),
                    ),
                },
            )?),
            None => None,
        };
        let nodeclasses = if options.nodeclass_actors {
            Some(root.family_with_park_hook::<NodeClassActor>(
                GroupSpec::one_for_one("nodeclasses"),
                NodeClassDeps::from_daemon(&deps),
                park_events(ParkedObject::EC2NodeClass),
            )?)
        } else {
            None
        };
        let version = spawn_version(&root, &deps, nodeclasses.as_ref())?;
        let mut provisioner_deps = ProvisionerDeps::new(
            ProvisionerPorts {
                settings: Arc::clone(&deps.settings),
                clock: Arc::clone(&deps.clock),
                cluster: Arc::clone(&deps.cluster),
                view: Arc::clone(&deps.view),
                cloud: Arc::clone(&deps.cloud),
            },
            ProvisionerMetrics::register(registry, deps.metrics.nodeclaims_created())
                .with_pod_times(deps.metrics.pod_times.clone()),
        );
        if options.inline_solve {
            provisioner_deps = provisioner_deps.solving_inline();
        }
        let disruption_deps = DisruptionDeps::new(
            deps.clone(),
            provisioner_deps.clone(),
            DisruptionMetrics::register(registry),
        );
        let disruption_changes = disruption_deps.changes.clone();
        let provisioner = root.spawn::<ProvisionerActor>(PROVISIONER_KEY, provisioner_deps)?;
        let disruption = root.spawn::<DisruptionActor>(DISRUPTION_KEY, disruption_deps)?;
        Ok(Self {
            root,
            deps,
            nodeclaims,
            nodepools,
            garbage_collector,
            launches,
            pod_events,
            interruption,
            nodeclasses,
            version,
            provisioner,
            disruption,
            disruption_changes,
        })
    }

    /// Routes one cluster change to the actors that own it. Never blocks: events go to
    /// mailboxes with `try_send`, and an overflow is counted by the kit (the next change or the
    /// actor's own requeue catches up, since actors re-read the store).
    pub fn observe(&self, change: &ClusterChange) {
        self.trigger_provisioner(change);
        self.tell_disruption(change);
        match change {
            ClusterChange::NodeClaim { name, deleted } => {
                self.nodeclaim_changed(name, *deleted);
                if *deleted {
                    self.nudge_deleting_nodeclasses();
                }
            }
            ClusterChange::NodePool { name, deleted } => self.nodepool_changed(name, *deleted),
            ClusterChange::EC2NodeClass { name, deleted } => {
                self.route_nodeclass(name, *deleted);
                self.nodeclass_changed(name);
                self.nudge_nodeclaims_of_class(name);
            }
            ClusterChange::Node {
                name,
                provider_id: Some(provider_id),
                ..
            } => self.node_changed(name, provider_id),
            ClusterChange::Pod {
                node_name: Some(node),
                pod_event,
                ..
            } => self.pod_on_node_changed(node, *pod_event),
            ClusterChange::VolumeAttachment {
                node_name: Some(node),
                ..
            } => self.volume_attachment_changed(node),
            ClusterChange::Relisted(kind) => self.relisted(*kind),
            ClusterChange::Node {
                provider_id: None, ..
            }
            | ClusterChange::Pod {
                node_name: None, ..
            }
            | ClusterChange::VolumeAttachment {
                node_name: None, ..
            }
            | ClusterChange::DaemonSet { .. }
            | ClusterChange::PodDisruptionBudget { .. }
            | ClusterChange::PersistentVolumeClaim { .. }
            | ClusterChange::Namespace { .. } => {}
        }
    }

    /// Queues `Reconcile` for a NodeClaim's actor, starting it unless the NodeClaim is gone.
    fn nodeclaim_changed(&self, name: &str, deleted: bool) {
        let cause = if deleted {
            Cause::Deleted
        } else {
            Cause::Changed
        };
        if deleted {
            self.pod_events.take(name);
            let _ = self.nodeclaims.nudge(name, Reconcile { cause });
        } else {
            nudge(&self.nodeclaims, name, cause);
        }
        // Its pool recounts: a NodeClaim's capacity or deletion changes the pool's resources.
        match self.deps.view.nodeclaim(name) {
            Some(nodeclaim) => {
                if let Some(pool) = nodeclaim
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(karpenter_core::apis::labels::NODEPOOL))
                {
                    let _ = self.nodepools.try_send_event(
                        pool,
                        Reconcile {
                            cause: Cause::Member,
                        },
                    );
                }
            }
            // Gone: its pool is unknown now, and pools are few.
            None => broadcast(&self.nodepools, Cause::Member),
        }
    }

    fn nodepool_changed(&self, name: &str, deleted: bool) {
        if deleted {
            let _ = self.nodepools.try_send_event(
                name,
                Reconcile {
                    cause: Cause::Deleted,
                },
            );
        } else {
            send(&self.nodepools, name, Cause::Changed);
        }
        // Its NodeClaims look again: `consolidateAfter` decides their `Consolidatable`, the
        // template hash and requirements their `Drifted` (Karpenter's nodeclaim.disruption
        // watches NodePools the same way).
        for nodeclaim in self.deps.view.nodeclaims_of_nodepool(name) {
            if let Some(nodeclaim) = nodeclaim.metadata.name.as_deref() {
                let _ = self.nodeclaims.nudge(
                    nodeclaim,
                    Reconcile {
                        cause: Cause::Related,
                    },
                );
            }
        }
    }

    /// The pools using the class re-check its readiness.
    fn nodeclass_changed(&self, name: &str) {
        for pool in self.deps.view.nodepools() {
            if pool.spec.template.spec.node_class_ref.name == name
                && let Some(pool_name) = pool.metadata.name.as_deref()
            {
                send(&self.nodepools, pool_name, Cause::Related);
            }
        }
    }

    /// The NodeClaims of the class look again: their drift depends on it (AMIs, subnets,
    /// security groups, the static hash). Karpenter's `nodeclaim.disruption` watches node
    /// classes and enqueues the NodeClaims that reference one; the AWS provider's drift reads the
    /// class of the NodeClaim's pool, so the NodeClaims of the pools using the class are
    /// nudged as well. Only running actors are nudged: a NodeClaim without one has not been
    /// observed yet and is reconciled when it is.
    fn nudge_nodeclaims_of_class(&self, class: &str) {
        let mut names = std::collections::BTreeSet::new();
        let references = |reference: &karpenter_core::apis::NodeClassReference| {
            reference.name == class
                && reference.kind == "EC2NodeClass"
                && reference.group == karpenter_core::apis::labels::AWS_GROUP
        };
        for pool in self.deps.view.nodepools() {
            if references(&pool.spec.template.spec.node_class_ref)
                && let Some(pool_name) = pool.metadata.name.as_deref()
            {
                for nodeclaim in self.deps.view.nodeclaims_of_nodepool(pool_name) {
                    names.extend(nodeclaim.metadata.name.clone());
                }
            }
        }
        for nodeclaim in self.deps.view.nodeclaims() {
            if references(&nodeclaim.spec.node_class_ref) {
                names.extend(nodeclaim.metadata.name.clone());
            }
        }
        for name in names {
            let _ = self.nodeclaims.nudge(
                &name,
                Reconcile {
                    cause: Cause::Related,
                },
            );
        }
    }

    /// The node's NodeClaim looks again (registration, initialization, termination); a
    /// deleting Node that no NodeClaim owns goes to the collector, which releases it once its
    /// instance is gone.
    fn node_changed(&self, name: &str, provider_id: &str) {
        match self
            .deps
            .view
            .nodeclaim_by_provider_id(provider_id)
            .and_then(|nc| nc.metadata.name.clone())
        {
            Some(nodeclaim) => nudge(&self.nodeclaims, &nodeclaim, Cause::Related),
            None => {
                if self
                    .deps
                    .view
                    .node(name)
                    .is_some_and(|node| is_held_in_deletion(&node))
                {
                    // A lost notice waits for the collector's next NodeClaim sweep (2 min).
                    self.garbage_collector.send_lossy(ReleaseOrphanNodes);
                }
            }
        }
    }

    /// A pod on a node of a NodeClaim moved. Draining: the NodeClaim's drain goes on. Live and
    /// a pod event: the NodeClaim records it (marked, then nudged; see [`PodEvents`]), unless
    /// the one it stored is within the dedupe window, which the actor would skip anyway (a
    /// node's pods come in bursts). Pods on nodes without a NodeClaim concern no actor.
    fn pod_on_node_changed(&self, node: &str, pod_event: bool) {
        let Some(provider_id) = self
            .deps
            .view
            .node(node)
            .and_then(|n| n.spec.as_ref().and_then(|s| s.provider_id.clone()))
        else {
            return;
        };
        let Some(nodeclaim) = self.deps.view.nodeclaim_by_provider_id(&provider_id) else {
            return;
        };
        let Some(name) = nodeclaim.metadata.name.as_deref() else {
            return;
        };
        if nodeclaim.metadata.deletion_timestamp.is_some() {
            let _ = self.nodeclaims.nudge(
                name,
                Reconcile {
                    cause: Cause::Related,
                },
            );
            return;
        }
        let last = nodeclaim
            .status
            .as_ref()
            .and_then(|s| s.last_pod_event_time.as_ref())
            .map(|t| t.0);
        if pod_event && pod_event_due(last, self.deps.clock.now()) {
            self.pod_events.mark(name);
            nudge(&self.nodeclaims, name, Cause::Related);
        }
    }

    /// A volume attached to or detached from a node: a deleting NodeClaim of that node may be
    /// waiting for its attachments to go before terminating the instance.
    fn volume_attachment_changed(&self, node: &str) {
        let Some(nodeclaim) = self
            .deps
            .view
            .node(node)
            .and_then(|n| n.spec.as_ref().and_then(|s| s.provider_id.clone()))
            .and_then(|id| self.deps.view.nodeclaim_by_provider_id(&id))
        else {
            return;
        };
        if nodeclaim.metadata.deletion_timestamp.is_some()
            && let Some(name) = nodeclaim.metadata.name.as_deref()
        {
            let _ = self.nodeclaims.nudge(
                name,
                Reconcile {
                    cause: Cause::Related,
                },
            );
        }
    }

    fn relisted(&self, kind: WatchedKind) {
        match kind {
            WatchedKind::NodeClaim => {
                for nodeclaim in self.deps.view.nodeclaims() {
                    if let Some(name) = nodeclaim.metadata.name.as_deref() {
                        nudge(&self.nodeclaims, name, Cause::Relisted);
                    }
                }
                // Actors whose NodeClaim vanished during the gap stop themselves.
                broadcast(&self.nodeclaims, Cause::Relisted);
                broadcast(&self.nodepools, Cause::Member);
                self.nudge_deleting_nodeclasses();
            }
            WatchedKind::NodePool => {
                for nodepool in self.deps.view.nodepools() {
                    if let Some(name) = nodepool.metadata.name.as_deref() {
                        send(&self.nodepools, name, Cause::Relisted);
                    }
                }
                broadcast(&self.nodepools, Cause::Relisted);
                // A `consolidateAfter` may have changed during the gap.
                for name in self.nodeclaims.keys() {
                    let _ = self.nodeclaims.nudge(
                        &name,
                        Reconcile {
                            cause: Cause::Relisted,
                        },
                    );
                }
            }
            WatchedKind::EC2NodeClass => {
                self.relist_nodeclasses();
                broadcast(&self.nodepools, Cause::Related);
                // A class may have changed during the gap: drift is decided again.
                for name in self.nodeclaims.keys() {
                    let _ = self.nodeclaims.nudge(
                        &name,
                        Reconcile {
                            cause: Cause::Relisted,
                        },
                    );
                }
            }
            WatchedKind::Node | WatchedKind::VolumeAttachment => {
                broadcast(&self.nodeclaims, Cause::Related);
            }
            WatchedKind::Pod
            | WatchedKind::DaemonSet
            | WatchedKind::PodDisruptionBudget
            | WatchedKind::PersistentVolumeClaim
            | WatchedKind::Namespace => {}
        }
    }

    /// The NodeClaim actors.
    #[must_use]
    pub fn nodeclaims(&self) -> &Family<NodeClaimActor> {
        &self.nodeclaims
    }

    /// The NodePool actors.
    #[must_use]
    pub fn nodepools(&self) -> &Family<NodePoolActor> {
        &self.nodepools
    }

    /// The garbage collector.
    #[must_use]
    pub fn garbage_collector(&self) -> &ActorRef<GarbageCollectorActor> {
        &self.garbage_collector
    }

    /// Launch outcomes of the last minute (the NodeClaim actors' and garbage collector's).
    #[must_use]
    pub fn launches(&self) -> &Arc<LaunchCache> {
        &self.launches
    }

    /// The `NodeClassActor` family (one per `EC2NodeClass`); `None` when started without it.
    #[must_use]
    pub fn nodeclasses(&self) -> Option<&Family<NodeClassActor>> {
        self.nodeclasses.as_ref()
    }

    fn route_nodeclass(&self, name: &str, deleted: bool) {
        let Some(nodeclasses) = &self.nodeclasses else {
            return;
        };
        if deleted {
            nodeclasses.remove(name);
            return;
        }
        send(nodeclasses, name, Cause::Changed);
    }

    /// After a relist: every class in the store gets an actor and a look; actors of classes
    /// that are gone stop.
    fn relist_nodeclasses(&self) {
        let Some(nodeclasses) = &self.nodeclasses else {
            return;
        };
        let present: Vec<String> = self
            .deps
            .view
            .ec2nodeclasses()
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        for name in nodeclasses.keys() {
            if !present.contains(&name) {
                nodeclasses.remove(&name);
            }
        }
        for name in &present {
            send(nodeclasses, name, Cause::Relisted);
        }
    }

    /// A NodeClaim went: classes waiting in deletion for their NodeClaims look again (the
    /// deleted NodeClaim is no longer in the store to say which class it used).
    fn nudge_deleting_nodeclasses(&self) {
        let Some(nodeclasses) = &self.nodeclasses else {
            return;
        };
        for class in self.deps.view.ec2nodeclasses() {
            if class.metadata.deletion_timestamp.is_none() {
                continue;
            }
            if let Some(name) = &class.metadata.name {
                let _ = nodeclasses.try_send_event(
                    name,
                    Reconcile {
                        cause: Cause::Related,
                    },
                );
            }
        }
    }

    /// Metrics several actors write.
    #[must_use]
    pub fn metrics(&self) -> &Metrics {
        &self.deps.metrics
    }

    /// The Kubernetes version refresh, when one runs.
    #[must_use]
    pub fn version(&self) -> Option<&ActorRef<VersionActor>> {
        self.version.as_ref()
    }

    /// The interruption actor, when one runs.
    #[must_use]
    pub fn interruption(&self) -> Option<&ActorRef<InterruptionActor>> {
        self.interruption.as_ref()
    }

    /// Pending pods, nodes being disrupted, NodePool and node class changes and NodeClaims going
    /// away make the Provisioner look for capacity (Karpenter's `provisioner.trigger.pod` and
    /// `provisioner.trigger.node`). A full mailbox loses the trigger, which is fine: its window
    /// is open and the run reads every pending pod from the view.
    fn trigger_provisioner(&self, change: &ClusterChange) {
        let trigger = match change {
            ClusterChange::Pod {
                namespace,
                name,
                pending: true,
                deleted: false,
                ..
            } => Triggered::pod(namespace, name),
            ClusterChange::Node {
                name,
                deleted: false,
                ..
            } if self
                .deps
                .view
                .node(name)
                .is_some_and(|node| node.is_disrupted()) =>
            {
                Triggered::by(TriggerSource::NodeDisrupted)
            }
            ClusterChange::NodePool { .. } | ClusterChange::EC2NodeClass { .. } => {
                Triggered::by(TriggerSource::NodePoolChanged)
            }
            ClusterChange::NodeClaim { deleted: true, .. } => {
                Triggered::by(TriggerSource::NodeClaimDeleted)
            }
            ClusterChange::Relisted(WatchedKind::Pod | WatchedKind::NodePool) => {
                Triggered::by(TriggerSource::Relisted)
            }
            _ => return,
        };
        self.provisioner.send_lossy(trigger);
    }

    /// Any change may make a node consolidatable or a command invalid; NodeClaim, Node,
    /// NodePool and PDB changes bring the next disruption round forward. A nudge: at most one
    /// notice waits in the mailbox, and a lost one only delays the round to its next poll.
    fn tell_disruption(&self, change: &ClusterChange) {
        let structural = match change {
            ClusterChange::NodeClaim { .. }
            | ClusterChange::Node { .. }
            | ClusterChange::NodePool { .. }
            | ClusterChange::PodDisruptionBudget { .. }
            | ClusterChange::Relisted(_) => true,
            ClusterChange::Pod { .. }
            | ClusterChange::EC2NodeClass { .. }
            | ClusterChange::DaemonSet { .. }
            | ClusterChange::VolumeAttachment { .. }
            | ClusterChange::PersistentVolumeClaim { .. }
            | ClusterChange::Namespace { .. } => false,
        };
        if structural {
            self.disruption_changes.structural();
        }
        let _ = self.disruption.nudge(ClusterChanged);
    }

    /// The disruption singleton (for `explain node`, `/debug` and the simulation report).
    #[must_use]
    pub fn disruption(&self) -> &ActorRef<DisruptionActor> {
        &self.disruption
    }

    /// Why a node is or is not being disrupted (`karpenter explain node`).
    pub async fn explain_node(&self, name: &str) -> Result<NodeExplanation, SendError> {
        self.disruption
            .request(
                ExplainNode {
                    name: name.to_owned(),
                },
                EXPLAIN_TIMEOUT,
            )
            .await
    }

    /// The Provisioner singleton (for `explain` and `/debug` routes).
    #[must_use]
    pub fn provisioner(&self) -> &ActorRef<ProvisionerActor> {
        &self.provisioner
    }

    /// Why a pod is pending: the Provisioner's latest decision for it (`karpenter explain pod`).
    pub async fn explain_pod(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<PodExplanation, SendError> {
        self.provisioner
            .request(
                Explain {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                },
                EXPLAIN_TIMEOUT,
            )
            .await
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

/// Queues `Reconcile` for the actor of `key`, starting it if needed. An event, not a request:
/// a full mailbox is counted by the kit and the actor re-reads its object anyway.
fn send<A>(family: &Family<A>, key: &str, cause: Cause)
where
    A: crate::runtime::Handles<Reconcile>,
{
    match family.ensure(key) {
        Ok(actor) => {
            let _ = actor.try_send_event(Reconcile { cause });
        }
        Err(error) => {
            tracing::error!(
                kind = A::KIND,
                key,
                error = crate::logs::err(&error),
                "failed starting an actor"
            );
        }
    }
}

/// [`send`] as a nudge: at most one `Reconcile` waits in the actor's mailbox, however many
/// changes arrive before it is handled (NodeClaims see bursts: every pod of a draining node).
fn nudge<A>(family: &Family<A>, key: &str, cause: Cause)
where
    A: crate::runtime::Handles<Reconcile>,
{
    match family.ensure(key) {
        Ok(actor) => {
            let _ = actor.nudge(Reconcile { cause });
        }
        Err(error) => {
            tracing::error!(
                kind = A::KIND,
                key,
                error = crate::logs::err(&error),
                "failed starting an actor"
            );
        }
    }
}

/// The `VersionActor`, when the daemon has a version source; a version change nudges the
/// classes of `nodeclasses`.
fn spawn_version(
    root: &GroupRef,
    deps: &Deps,
    nodeclasses: Option<&Family<NodeClassActor>>,
) -> Result<Option<ActorRef<VersionActor>>, SpawnError> {
    let Some(source) = &deps.kubernetes_version_source else {
        return Ok(None);
    };
    root.spawn::<VersionActor>(
        VERSION_KEY,
        VersionDeps {
            source: Arc::clone(source),
            version: deps.kubernetes_version.clone(),
            minimum: KubernetesVersion::parse(&deps.settings.kubernetes_min_version).ok(),
            on_change: nudge_nodeclasses_on_version_change(
                nodeclasses.cloned(),
                Arc::clone(&deps.view),
            ),
        },
    )
    .map(Some)
}

/// What the `VersionActor` calls when the Kubernetes version changed: every class in the store
/// looks again (its AMI aliases resolve per version), its actor started if needed. Nudges: a
/// class with a `Reconcile` waiting reads the new version anyway.
fn nudge_nodeclasses_on_version_change(
    nodeclasses: Option<Family<NodeClassActor>>,
    view: Arc<dyn ClusterView>,
) -> OnVersionChange {
    Arc::new(move |_| {
        let Some(nodeclasses) = &nodeclasses else {
            return;
        };
        for class in view.ec2nodeclasses() {
            if let Some(name) = class.metadata.name.as_deref() {
                nudge(nodeclasses, name, Cause::Related);
            }
        }
    })
}

/// Queues `Reconcile` for every running actor of a family.
fn broadcast<A>(family: &Family<A>, cause: Cause)
where
    A: crate::runtime::Handles<Reconcile>,
{
    for key in family.keys() {
        let _ = family.try_send_event(&key, Reconcile { cause });
    }
}
