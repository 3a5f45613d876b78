//! The NodeClaimActor's steps for a live NodeClaim: finalizer, expiration (`expiration`),
//! launch, registration, initialization, drift (`drift`), consolidation (`consolidatable`),
//! repair (`repair`), tagging (`tagging`) and liveness (see the parent module for the flow).
//! Each step reads the NodeClaim it is given, writes only when something changes, and returns
//! the NodeClaim as written so the next step sees its own writes before the watch does. A
//! failed launch or drift check is returned only after the steps that do not depend on it
//! (consolidation, liveness) have run.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

use super::initialization::{self, NotInitialized};
use super::launch::{self, LaunchState};
use super::registration::{self, NodeLookup};
use super::{
    ERROR_BACKOFF, LAUNCH_CHECK_INTERVAL, LaunchCompleted, Next, NodeClaimActor, NodeClaimError,
    REGISTRATION_TTL, elapsed, events, has_finalizer, label, provider_id, soonest, uid,
};
use crate::logs;
use crate::metrics::disruption_reason;
use crate::ports::cloud_provider::{CloudProvider, CloudProviderError};
use crate::ports::cluster::{Change, ClusterError};
use crate::runtime::{ActorCtx, ActorRef};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_core::apis::condition_set::{
    self, ConditionSet, NODECLAIM_DEPENDENTS, NODEPOOL_DEPENDENTS, ObjectFacts,
};
use karpenter_core::apis::conditions::{ConditionStatus, nodeclaim as cond, nodepool as pool_cond};
use karpenter_core::apis::labels;
use karpenter_core::apis::{
    NodeClaim, NodeClaimStatus, NodePoolStatus, SlimMeta, SlimNode, SlimNodeClaim,
};

/// What a step leaves for the next.
pub(super) enum Step {
    /// Go on with this NodeClaim; look again after `Next`.
    Continue(Arc<SlimNodeClaim>, Next),
    /// The NodeClaim was deleted (or vanished): nothing more to do in this reconcile.
    Stop,
}

/// Reports a launch's end to the actor, also when the task dies.
struct LaunchGuard {
    launches: Arc<launch::LaunchCache>,
    uid: String,
    actor: ActorRef<NodeClaimActor>,
    finished: bool,
}

impl LaunchGuard {
    fn finish(&mut self, outcome: Result<NodeClaim, CloudProviderError>) {
        self.launches.finish(&self.uid, outcome);
        self.finished = true;
    }
}

impl Drop for LaunchGuard {
    fn drop(&mut self) {
        if !self.finished {
            self.launches.abandon(&self.uid);
        }
        // A full mailbox drops the notice; the actor's launch check timer catches up.
        let _ = self.actor.try_send_event(LaunchCompleted);
    }
}

pub(super) fn status_facts(nodeclaim: &SlimNodeClaim) -> ObjectFacts {
    ObjectFacts::of(&nodeclaim.metadata)
}

/// The NodeClaim's condition of this type, if any.
pub(super) fn condition<'a>(
    nodeclaim: &'a SlimNodeClaim,
    kind: &str,
) -> Option<&'a karpenter_core::apis::conditions::Condition> {
    nodeclaim
        .status
        .as_ref()
        .and_then(|s| condition_set::find(&s.conditions, kind))
}

/// Condition `kind` unknown because the NodeClaim's node has not registered (Karpenter's
/// `NodeNotFound`).
fn node_not_found(set: &mut ConditionSet<'_>, kind: &str) {
    set.set_unknown_with_reason(
        kind,
        cond::REASON_NODE_NOT_FOUND,
        "Node not registered with cluster",
    );
}

pub(super) fn is_true(nodeclaim: &SlimNodeClaim, kind: &str) -> bool {
    condition(nodeclaim, kind).is_some_and(|c| c.status == ConditionStatus::True)
}

impl NodeClaimActor {
    /// Writes a status change to `known` (the NodeClaim this reconcile has: no read unless it
    /// turns out stale); `None` when the NodeClaim is gone.
    pub(super) async fn write_status(
        &self,
        known: &SlimNodeClaim,
        what: &'static str,
        change: Change<'_, NodeClaimStatus>,
    ) -> Result<Option<Arc<SlimNodeClaim>>, NodeClaimError> {
        let result = self
            .deps
            .cluster
            .update_nodeclaim_status_from(known, change)
            .await;
        self.written_from(known, what, result)
    }

    /// The NodeClaim as the API server has it: an update that changes nothing writes nothing
    /// and answers the object read. `None` when it is gone.
    pub(super) async fn read_back(&self) -> Result<Option<Arc<SlimNodeClaim>>, NodeClaimError> {
        let result = self
            .deps
            .cluster
            .update_nodeclaim_status(&self.name, &|_: &mut NodeClaimStatus| {})
            .await;
        self.written("reading the NodeClaim back", result)
    }

    /// Writes a metadata change to `known` (as [`Self::write_status`]); `None` when the
    /// NodeClaim is gone.
    pub(super) async fn write_nodeclaim(
        &self,
        known: &SlimNodeClaim,
        what: &'static str,
        change: Change<'_, NodeClaim>,
    ) -> Result<Option<Arc<SlimNodeClaim>>, NodeClaimError> {
        let result = self.deps.cluster.update_nodeclaim_from(known, change).await;
        self.written_from(known, what, result)
    }

    /// [`Self::written`] of a write to `known`, remembered until the view shows it.
    fn written_from(
        &self,
        known: &SlimNodeClaim,
        what: &'static str,
        result: Result<NodeClaim, ClusterError>,
    ) -> Result<Option<Arc<SlimNodeClaim>>, NodeClaimError> {
        let written = self.written(what, result)?;
        if let Some(written) = &written
            && written.metadata.resource_version != known.metadata.resource_version
        {
            self.own_writes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .record(known, written);
        }
        Ok(written)
    }

    /// A write's outcome: the NodeClaim as written, `None` when it is gone, or the error.
    fn written(
        &self,
        what: &'static str,
        result: Result<NodeClaim, ClusterError>,
    ) -> Result<Option<Arc<SlimNodeClaim>>, NodeClaimError> {
        match result {
            Ok(written) => Ok(Some(Arc::new(SlimNodeClaim::from(written)))),
            Err(ClusterError::NotFound { .. }) => Ok(None),
            Err(source) => Err(NodeClaimError::Write {
                what,
                nodeclaim: self.name.clone(),
                source,
            }),
        }
    }

    /// Sets conditions in one status write, if they change anything.
    pub(super) async fn set_conditions(
        &self,
        nodeclaim: &Arc<SlimNodeClaim>,
        what: &'static str,
        edit: &(dyn Fn(&mut ConditionSet<'_>) + Send + Sync),
    ) -> Result<Option<Arc<SlimNodeClaim>>, NodeClaimError> {
        let facts = status_facts(nodeclaim);
        let now = self.now();
        let change = |status: &mut NodeClaimStatus| {
            let mut set =
                ConditionSet::new(&mut status.conditions, NODECLAIM_DEPENDENTS, facts, now);
            edit(&mut set);
        };
        // The probe is dropped before the write's await: a launch burst has thousands of these
        // writes waiting for a slot at once, and each kept its copy of the status (8 MB of the
        // 5,000-node run's peak).
        let unchanged = {
            let mut probe = nodeclaim.status.clone().unwrap_or_default();
            change(&mut probe);
            nodeclaim.status.as_ref() == Some(&probe)
        };
        if unchanged {
            return Ok(Some(Arc::clone(nodeclaim)));
        }
        self.write_status(nodeclaim, what, &change).await
    }

    /// Deletes the NodeClaim (it then terminates through its finalizer).
    pub(super) async fn delete_nodeclaim(&self, what: &'static str) -> Result<(), NodeClaimError> {
        match self.deps.cluster.delete_nodeclaim(&self.name).await {
            Ok(_) | Err(ClusterError::NotFound { .. }) => Ok(()),
            Err(source) => Err(NodeClaimError::Write {
                what,
                nodeclaim: self.name.clone(),
                source,
            }),
        }
    }

    pub(super) async fn publish(&self, event: crate::ports::cluster::ClusterEvent) {
        if let Err(error) = self.deps.cluster.publish_event(&event).await {
            tracing::debug!(reason = %event.reason, error = logs::err(&error), "failed publishing event");
        }
    }

    /// The Node of a NodeClaim, by provider id.
    pub(super) fn node_of(&self, nodeclaim: &SlimNodeClaim) -> Option<Arc<SlimNode>> {
        provider_id(nodeclaim).and_then(|id| self.deps.view.node_by_provider_id(id))
    }

    /// Steps for a NodeClaim that is not being deleted.
    ///
    /// Each step runs boxed, here and in [`Self::after_launch`]: a reconcile waiting in one
    /// step (a launch burst has thousands waiting for a write slot at once) then holds that
    /// step's state, not room for the largest of them (the unboxed handler was 3.2 KB).
    pub(super) async fn lifecycle(
        &mut self,
        ctx: &mut ActorCtx<Self>,
        nodeclaim: Arc<SlimNodeClaim>,
    ) -> Result<Next, NodeClaimError> {
        // A Node deleted out from under us takes its NodeClaim along (Karpenter's
        // node.termination deletes the NodeClaims of a deleting node).
        if let Some(node) = self.node_of(&nodeclaim)
            && node.metadata.deletion_timestamp.is_some()
            && has_finalizer(&node.metadata)
        {
            tracing::debug!("node is being deleted; deleting its nodeclaim");
            Box::pin(self.delete_nodeclaim("deleting the nodeclaim of a deleted node")).await?;
            return Ok(None);
        }
        let Some(nodeclaim) = Box::pin(self.ensure_finalizer(nodeclaim)).await? else {
            return Ok(None);
        };
        let mut next = None;
        // Expiration runs whatever the launch state, and first: an expired NodeClaim launches
        // nothing more.
        let nodeclaim = match Box::pin(self.expire(nodeclaim)).await? {
            Step::Continue(nodeclaim, after) => {
                next = soonest(next, after);
                nodeclaim
            }
            Step::Stop => return Ok(None),
        };
        let mut failure = None;
        let nodeclaim = match Box::pin(self.launch(ctx, Arc::clone(&nodeclaim))).await {
            Ok(Step::Continue(nodeclaim, after)) => {
                next = soonest(next, after);
                nodeclaim
            }
            Ok(Step::Stop) => return Ok(None),
            Err(error) => {
                failure = Some(error);
                nodeclaim
            }
        };
        let nodeclaim = if failure.is_none() {
            match Box::pin(self.after_launch(ctx, nodeclaim, &mut next, &mut failure)).await? {
                Some(nodeclaim) => nodeclaim,
                None => return Ok(None),
            }
        } else {
            nodeclaim
        };
        // A tagging failure is retried with the reconcile's backoff; it holds up nothing else.
        let nodeclaim = if failure.is_none() {
            match Box::pin(self.tag_instance(Arc::clone(&nodeclaim))).await {
                Ok(Step::Continue(tagged, _)) => tagged,
                Ok(Step::Stop) => return Ok(None),
                Err(error) => {
                    failure = Some(error);
                    nodeclaim
                }
            }
        } else {
            nodeclaim
        };
        // Liveness runs even when the launch keeps failing: 15 minutes without a node end it.
        match Box::pin(self.liveness(&nodeclaim)).await? {
            Step::Continue(_, after) => next = soonest(next, after),
            Step::Stop => return Ok(None),
        }
        match failure {
            Some(error) => Err(error),
            None => Ok(next),
        }
    }

    /// The steps after a launch: registration, initialization, the pod event, `Drifted`,
    /// `Consolidatable` and Node Repair, each given the NodeClaim as the one before wrote it;
    /// `None` when one ended the reconcile. A failed drift check goes to `failure` and the
    /// steps after it still run (Karpenter's drift and consolidation sub-controllers run side by
    /// side).
    async fn after_launch(
        &mut self,
        ctx: &mut ActorCtx<Self>,
        nodeclaim: Arc<SlimNodeClaim>,
        next: &mut Next,
        failure: &mut Option<NodeClaimError>,
    ) -> Result<Option<Arc<SlimNodeClaim>>, NodeClaimError> {
        let Step::Continue(nodeclaim, after) = Box::pin(self.register(ctx, nodeclaim)).await?
        else {
            return Ok(None);
        };
        *next = soonest(*next, after);
        let Step::Continue(nodeclaim, after) = Box::pin(self.initialize(ctx, nodeclaim)).await?
        else {
            return Ok(None);
        };
        *next = soonest(*next, after);
        let Some(nodeclaim) = Box::pin(self.record_pod_event(nodeclaim)).await? else {
            return Ok(None);
        };
        let nodeclaim = match Box::pin(self.update_drifted(Arc::clone(&nodeclaim))).await {
            Ok(Step::Continue(nodeclaim, after)) => {
                *next = soonest(*next, after);
                nodeclaim
            }
            Ok(Step::Stop) => return Ok(None),
            Err(error) => {
                *failure = Some(error);
                nodeclaim
            }
        };
        let Step::Continue(nodeclaim, after) =
            Box::pin(self.update_consolidatable(nodeclaim)).await?
        else {
            return Ok(None);
        };
        *next = soonest(*next, after);
        let Step::Continue(nodeclaim, after) = Box::pin(self.repair(ctx, nodeclaim)).await? else {
            return Ok(None);
        };
        *next = soonest(*next, after);
        Ok(Some(nodeclaim))
    }

    /// Adds the termination finalizer; `None` when the NodeClaim is gone.
    async fn ensure_finalizer(
        &self,
        nodeclaim: Arc<SlimNodeClaim>,
    ) -> Result<Option<Arc<SlimNodeClaim>>, NodeClaimError> {
        if has_finalizer(&nodeclaim.metadata) {
            return Ok(Some(nodeclaim));
        }
        let add = |nodeclaim: &mut NodeClaim| {
            let finalizers = nodeclaim.metadata.finalizers.get_or_insert_default();
            if !finalizers
                .iter()
                .any(|f| f == labels::TERMINATION_FINALIZER)
            {
                finalizers.push(labels::TERMINATION_FINALIZER.to_owned());
            }
        };
        self.write_nodeclaim(&nodeclaim, "adding the termination finalizer", &add)
            .await
    }

    async fn launch(
        &mut self,
        ctx: &mut ActorCtx<Self>,
        nodeclaim: Arc<SlimNodeClaim>,
    ) -> Result<Step, NodeClaimError> {
        if condition(&nodeclaim, cond::LAUNCHED)
            .is_some_and(|c| c.status != ConditionStatus::Unknown)
        {
            return Ok(Step::Continue(nodeclaim, None));
        }
        let uid = uid(&nodeclaim);
        if let Some(error) = self.launches.take_failure(&uid) {
            return self.launch_failed(&nodeclaim, error).await;
        }
        match self.launches.get(&uid) {
            Some(LaunchState::Launched(created)) => {
                let Some(written) = self.record_launch(&nodeclaim, &created).await? else {
                    return Ok(Step::Stop);
                };
                self.launch_failures = 0;
                self.launch_not_before = None;
                Ok(Step::Continue(written, None))
            }
            // Written already; this copy predates the write (the view lags): go on with the
            // NodeClaim as the API server has it.
            Some(LaunchState::Recorded(_)) => match self.read_back().await? {
                Some(current) if is_true(&current, cond::LAUNCHED) => {
                    Ok(Step::Continue(current, None))
                }
                Some(current) => Ok(Step::Continue(current, Some(LAUNCH_CHECK_INTERVAL))),
                None => Ok(Step::Stop),
            },
            Some(LaunchState::InFlight | LaunchState::Failed(_)) => {
                ctx.set_state("launching");
                Ok(Step::Continue(nodeclaim, Some(LAUNCH_CHECK_INTERVAL)))
            }
            None => {
                let now = Instant::now();
                if let Some(at) = self.launch_not_before.filter(|at| *at > now) {
                    return Ok(Step::Continue(nodeclaim, Some(at - now)));
                }
                ctx.set_state("launching");
                self.start_launch(ctx, Arc::clone(&nodeclaim), uid);
                Ok(Step::Continue(nodeclaim, Some(LAUNCH_CHECK_INTERVAL)))
            }
        }
    }

    /// Runs `CloudProvider::create` in a task beside the actor; the outcome goes to the launch
    /// cache and a [`LaunchCompleted`] to the actor.
    fn start_launch(&self, ctx: &ActorCtx<Self>, nodeclaim: Arc<SlimNodeClaim>, uid: String) {
        if !self.launches.begin(&uid) {
            return;
        }
        let cloud: Arc<dyn CloudProvider> = Arc::clone(&self.deps.cloud);
        let launches = Arc::clone(&self.launches);
        let mut guard = LaunchGuard {
            launches: Arc::clone(&self.launches),
            uid,
            actor: ctx.myself().clone(),
            finished: false,
        };
        ctx.spawn_task(async move {
            let slot = launches.slot().await;
            let outcome = cloud.create(&nodeclaim.to_nodeclaim()).await;
            drop(slot);
            guard.finish(outcome);
        });
    }

    /// Writes what the launch returned and `Launched=True`.
    pub(super) async fn record_launch(
        &self,
        nodeclaim: &Arc<SlimNodeClaim>,
        created: &NodeClaim,
    ) -> Result<Option<Arc<SlimNodeClaim>>, NodeClaimError> {
        let mut nodeclaim = Arc::clone(nodeclaim);
        let mut probe = nodeclaim.to_nodeclaim();
        launch::apply_launch_metadata(&mut probe, created);
        if SlimMeta::from(probe.metadata) != nodeclaim.metadata {
            let change =
                |nodeclaim: &mut NodeClaim| launch::apply_launch_metadata(nodeclaim, created);
            match self
                .write_nodeclaim(
                    &nodeclaim,
                    "writing the launched instance's labels",
                    &change,
                )
                .await?
            {
                Some(written) => nodeclaim = written,
                None => return Ok(None),
            }
        }
        let facts = status_facts(&nodeclaim);
        let now = self.now();
        // Karpenter's lifecycle reconcile runs registration right after the launch and patches
        // the status once: a node that has not registered yet is `NodeNotFound` in the same
        // write (the registration step then finds nothing to change).
        let unregistered = created
            .status
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .is_some_and(|id| self.deps.view.nodes_by_provider_id(id).is_empty());
        let change = |status: &mut NodeClaimStatus| {
            launch::apply_launch_status(status, created);
            let mut set =
                ConditionSet::new(&mut status.conditions, NODECLAIM_DEPENDENTS, facts, now);
            set.set_true(cond::LAUNCHED);
            if unregistered {
                node_not_found(&mut set, cond::REGISTERED);
            }
        };
        let written = self
            .write_status(&nodeclaim, "writing the launch", &change)
            .await?;
        if written.is_some() {
            self.launches.recorded(&uid(&nodeclaim));
            let labels = created.metadata.labels.clone().unwrap_or_default();
            let status = created.status.as_ref();
            tracing::info!(
                "provider-id" = status.and_then(|s| s.provider_id.as_deref()).unwrap_or_default(),
                "instance-type" = labels.get(labels::INSTANCE_TYPE).map_or("", String::as_str),
                zone = labels.get(labels::ZONE).map_or("", String::as_str),
                "capacity-type" = labels.get(labels::CAPACITY_TYPE).map_or("", String::as_str),
                allocatable = %logs::json(&status.map(|s| &s.allocatable)),
                "launched nodeclaim"
            );
        }
        Ok(written)
    }

    async fn launch_failed(
        &mut self,
        nodeclaim: &Arc<SlimNodeClaim>,
        error: CloudProviderError,
    ) -> Result<Step, NodeClaimError> {
        let (event, reason) = match &error {
            CloudProviderError::InsufficientCapacity { .. } => (
                Some(events::insufficient_capacity(nodeclaim, &error.to_string())),
                disruption_reason::INSUFFICIENT_CAPACITY,
            ),
            CloudProviderError::NodeClassNotReady { .. } => (
                Some(events::nodeclass_not_ready(nodeclaim, &error.to_string())),
                disruption_reason::NODECLASS_NOT_READY,
            ),
            _ => (None, ""),
        };
        if let Some(event) = event {
            tracing::error!(error = logs::err(&error), "failed launching nodeclaim");
            self.publish(event).await;
            self.delete_nodeclaim("deleting a nodeclaim that cannot launch")
                .await?;
            self.deps.metrics.nodeclaim_disrupted(
                reason,
                label(nodeclaim, labels::NODEPOOL),
                label(nodeclaim, labels::CAPACITY_TYPE),
            );
            return Ok(Step::Stop);
        }
        let delay = ERROR_BACKOFF.delay(self.launch_failures);
        self.launch_failures = self.launch_failures.saturating_add(1);
        self.launch_not_before = Some(Instant::now() + delay);
        let (reason, message) = launch::launch_failure_condition(&error);
        self.set_conditions(nodeclaim, "writing the launch failure", &|set| {
            set.set_unknown_with_reason(cond::LAUNCHED, &reason, &message);
        })
        .await?;
        Err(NodeClaimError::Launch {
            nodeclaim: self.name.clone(),
            source: Box::new(error),
        })
    }

    /// A NodeClaim registered before this actor started (a daemon restart): the cloud provider
    /// learns from its node once, as Karpenter's capacity controller hydrates its cache from
    /// the registered nodes it lists at startup.
    fn registered_before_start(&mut self, nodeclaim: &SlimNodeClaim) {
        if std::mem::replace(&mut self.reported.registered, true) {
            return;
        }
        if let Some(node) = nodeclaim
            .status
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .and_then(|name| self.deps.view.node(name))
        {
            self.deps.cloud.node_registered(nodeclaim, &node);
        }
    }

    async fn register(
        &mut self,
        ctx: &mut ActorCtx<Self>,
        nodeclaim: Arc<SlimNodeClaim>,
    ) -> Result<Step, NodeClaimError> {
        if is_true(&nodeclaim, cond::REGISTERED) {
            self.registered_before_start(&nodeclaim);
            return Ok(Step::Continue(nodeclaim, None));
        }
        if !is_true(&nodeclaim, cond::LAUNCHED) {
            return Ok(Step::Continue(nodeclaim, None));
        }
        let Some(provider_id) = provider_id(&nodeclaim).map(str::to_owned) else {
            return Ok(Step::Continue(nodeclaim, None));
        };
        ctx.set_state("registering");
        let nodes = self.deps.view.nodes_by_provider_id(&provider_id);
        let node = match registration::matching_nodes(&nodes, &provider_id) {
            NodeLookup::NotFound => {
                let written = self
                    .set_conditions(&nodeclaim, "writing the registration", &|set| {
                        node_not_found(set, cond::REGISTERED);
                    })
                    .await?;
                return Ok(written.map_or(Step::Stop, |nc| Step::Continue(nc, None)));
            }
            NodeLookup::Multiple(count) => {
                tracing::error!(
                    error = %format_args!("expected a single node with provider id {provider_id}, found {count}"),
                    "node claim registration error"
                );
                let written = self
                    .set_conditions(&nodeclaim, "writing the registration", &|set| {
                        set.set_false(
                            cond::REGISTERED,
                            cond::REASON_MULTIPLE_NODES_FOUND,
                            "Invariant violated, matched multiple nodes",
                        );
                    })
                    .await?;
                return Ok(written.map_or(Step::Stop, |nc| Step::Continue(nc, None)));
            }
            NodeLookup::Found(node) => node,
        };
        let node_name = node.metadata.name.clone().unwrap_or_default();
        if !registration::is_registered(&node) && !registration::has_unregistered_taint(&node) {
            tracing::error!(
                Node = %node_name,
                taint = labels::UNREGISTERED_TAINT,
                error = "missing required taint",
                "node claim registration error"
            );
            self.publish(events::unregistered_taint_missing(&nodeclaim))
                .await;
        }
        // A probe of the view's Node, as a written Node's metadata, to tell whether a write is due.
        let (mut metadata, mut spec) = (ObjectMeta::from(node.metadata.clone()), node.spec.clone());
        registration::sync_node(&mut metadata, &mut spec, &nodeclaim);
        if SlimMeta::from(metadata) != node.metadata || spec != node.spec {
            let claim = Arc::clone(&nodeclaim);
            let change = move |node: &mut Node| {
                registration::sync_node(&mut node.metadata, &mut node.spec, &claim);
            };
            match self.deps.cluster.update_node_from(&node, &change).await {
                Ok(_) => {}
                Err(ClusterError::NotFound { .. }) => return Ok(Step::Continue(nodeclaim, None)),
                Err(source) => {
                    return Err(NodeClaimError::Write {
                        what: "syncing the node",
                        nodeclaim: self.name.clone(),
                        source,
                    });
                }
            }
        }
        let facts = status_facts(&nodeclaim);
        let now = self.now();
        let change = |status: &mut NodeClaimStatus| {
            status.node_name = Some(node_name.clone());
            ConditionSet::new(&mut status.conditions, NODECLAIM_DEPENDENTS, facts, now)
                .set_true(cond::REGISTERED);
        };
        let Some(written) = self
            .write_status(&nodeclaim, "writing the registration", &change)
            .await?
        else {
            return Ok(Step::Stop);
        };
        if !std::mem::replace(&mut self.reported.registered, true) {
            tracing::info!(Node = %node_name, "registered nodeclaim");
            self.deps.cloud.node_registered(&written, &node);
            self.deps
                .metrics
                .node_created(label(&written, labels::NODEPOOL));
            self.set_registration_health(&written, true).await;
        }
        Ok(Step::Continue(written, None))
    }

    async fn initialize(
        &mut self,
        ctx: &mut ActorCtx<Self>,
        nodeclaim: Arc<SlimNodeClaim>,
    ) -> Result<Step, NodeClaimError> {
        if !is_true(&nodeclaim, cond::REGISTERED) {
            return Ok(Step::Continue(nodeclaim, None));
        }
        if is_true(&nodeclaim, cond::INITIALIZED) {
            ctx.set_state("ready");
            return Ok(Step::Continue(nodeclaim, None));
        }
        ctx.set_state("initializing");
        let Some(node) = self.node_of(&nodeclaim) else {
            let written = self
                .set_conditions(&nodeclaim, "writing the initialization", &|set| {
                    node_not_found(set, cond::INITIALIZED);
                })
                .await?;
            return Ok(written.map_or(Step::Stop, |nc| Step::Continue(nc, None)));
        };
        if let Err(NotInitialized { reason, message }) = initialization::check(&node, &nodeclaim) {
            let written = self
                .set_conditions(&nodeclaim, "writing the initialization", &|set| {
                    set.set_unknown_with_reason(cond::INITIALIZED, reason, &message);
                })
                .await?;
            return Ok(written.map_or(Step::Stop, |nc| Step::Continue(nc, None)));
        }
        let initialized = node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::INITIALIZED))
            .is_some_and(|v| v == "true");
        if !initialized {
            let change = |node: &mut Node| {
                node.metadata
                    .labels
                    .get_or_insert_default()
                    .insert(labels::INITIALIZED.to_owned(), "true".to_owned());
            };
            match self.deps.cluster.update_node_from(&node, &change).await {
                Ok(_) => {}
                Err(ClusterError::NotFound { .. }) => return Ok(Step::Continue(nodeclaim, None)),
                Err(source) => {
                    return Err(NodeClaimError::Write {
                        what: "labelling the node initialized",
                        nodeclaim: self.name.clone(),
                        source,
                    });
                }
            }
        }
        let written = self
            .set_conditions(&nodeclaim, "writing the initialization", &|set| {
                set.set_true(cond::INITIALIZED);
            })
            .await?;
        // Once per NodeClaim: a reconcile that runs before the store shows the condition
        // writes nothing new.
        if written.is_some() && !std::mem::replace(&mut self.reported.initialized, true) {
            tracing::info!(
                allocatable = %logs::json(&node.status.as_ref().and_then(|s| s.allocatable.as_ref())),
                "initialized nodeclaim"
            );
        }
        ctx.set_state("ready");
        Ok(written.map_or(Step::Stop, |nc| Step::Continue(nc, None)))
    }

    /// When the registration window of an unregistered NodeClaim started: its `Launched`
    /// condition's transition (the launch, or its creation while launching fails).
    fn registration_window_start(&self, nodeclaim: &SlimNodeClaim) -> Timestamp {
        condition(nodeclaim, cond::LAUNCHED)
            .map(|c| c.last_transition_time.0)
            .or_else(|| nodeclaim.metadata.creation_timestamp.as_ref().map(|t| t.0))
            .unwrap_or_else(|| self.now())
    }

    async fn liveness(&mut self, nodeclaim: &Arc<SlimNodeClaim>) -> Result<Step, NodeClaimError> {
        if is_true(nodeclaim, cond::REGISTERED) {
            return Ok(Step::Continue(Arc::clone(nodeclaim), None));
        }
        let waited = elapsed(self.registration_window_start(nodeclaim), self.now());
        if let Some(left) = REGISTRATION_TTL
            .checked_sub(waited)
            .filter(|d| !d.is_zero())
        {
            return Ok(Step::Continue(Arc::clone(nodeclaim), Some(left)));
        }
        self.set_registration_health(nodeclaim, false).await;
        self.delete_nodeclaim("deleting a nodeclaim that did not register")
            .await?;
        if !std::mem::replace(&mut self.reported.liveness, true) {
            tracing::debug!(ttl = %logs::GoDuration(REGISTRATION_TTL), "terminating due to registration ttl");
            self.deps.metrics.nodeclaim_disrupted(
                disruption_reason::LIVENESS,
                label(nodeclaim, labels::NODEPOOL),
                label(nodeclaim, labels::CAPACITY_TYPE),
            );
        }
        Ok(Step::Stop)
    }

    /// The NodePool's `NodeRegistrationHealthy`: `True` when a node registered; `False` (only
    /// from `Unknown`) when one did not, with the launch failure as the reason if it never
    /// launched. Failures are logged: the condition is informational.
    async fn set_registration_health(&self, nodeclaim: &SlimNodeClaim, healthy: bool) {
        let name = label(nodeclaim, labels::NODEPOOL);
        let Some(nodepool) = self.deps.view.nodepool(name) else {
            return;
        };
        let current = nodepool
            .status
            .as_ref()
            .and_then(|s| condition_set::find(&s.conditions, pool_cond::NODE_REGISTRATION_HEALTHY))
            .map(|c| c.status);
        let (status, reason, message) = if healthy {
            if current == Some(ConditionStatus::True) {
                return;
            }
            (
                ConditionStatus::True,
                pool_cond::NODE_REGISTRATION_HEALTHY.to_owned(),
                String::new(),
            )
        } else {
            if current.is_some_and(|s| s != ConditionStatus::Unknown) {
                return;
            }
            match condition(nodeclaim, cond::LAUNCHED) {
                Some(launched) if launched.status != ConditionStatus::True => (
                    ConditionStatus::False,
                    launched.reason.clone(),
                    launched.message.clone(),
                ),
                _ => (
                    ConditionStatus::False,
                    pool_cond::REASON_REGISTRATION_FAILED.to_owned(),
                    "Failed to register node".to_owned(),
                ),
            }
        };
        let facts = ObjectFacts::of(&nodepool.metadata);
        let now = self.now();
        let change = |pool_status: &mut NodePoolStatus| {
            ConditionSet::new(&mut pool_status.conditions, NODEPOOL_DEPENDENTS, facts, now).set(
                pool_cond::NODE_REGISTRATION_HEALTHY,
                status,
                &reason,
                &message,
            );
        };
        if let Err(error) = self
            .deps
            .cluster
            .update_nodepool_status(name, &change)
            .await
        {
            tracing::error!(
                NodePool = name,
                error = logs::err(&error),
                "failed updating nodepool registration health"
            );
        }
    }
}

/// The duration left until `deadline`, zero when past.
pub(super) fn until(now: Timestamp, deadline: Timestamp) -> Duration {
    elapsed(now, deadline)
}
