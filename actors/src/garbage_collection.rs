//! `GarbageCollectorActor`: the two sweeps that keep the cloud and the cluster agreeing
//! (reference 2.1 `nodeclaim.garbagecollection`, 2.2 `instance.garbagecollection`).
//!
//! - **Instances** ([`CollectInstances`]): instances tagged for this cluster
//!   (`CloudProvider::list_brief`: the list without labels or resources) that no NodeClaim names as
//!   its provider id, launched over [`INSTANCE_GRACE`] ago, are terminated and their Node (if any)
//!   deleted. Runs every [`INSTANCE_SWEEP_FAST`] for the first [`FAST_SWEEPS`] successful sweeps
//!   after start (leaks from a crash are found quickly), then every [`INSTANCE_SWEEP`]. Instances
//!   the NodeClaim actors launched within the last minute (the shared launch cache) are never taken
//!   for leaks, even before their NodeClaim's status names them.
//! - **NodeClaims** ([`CollectNodeClaims`]): registered NodeClaims whose instance is gone from
//!   the cloud's list and whose Node is not `Ready` are deleted
//!   (`karpenter_nodeclaims_disrupted_total{reason="garbage_collected"}`); every
//!   [`NODECLAIM_SWEEP`]. A `Ready` node means the kubelet still runs, whatever the cloud says.
//!
//! - **Orphan Nodes** ([`ReleaseOrphanNodes`]): a deleting Node that still carries
//!   `karpenter.sh/termination` but whose NodeClaim is gone (its finalizer was stripped by hand,
//!   or it went while the Node was held) has no actor to release it. Once its instance is gone
//!   from the cloud's list, the finalizer is removed; while the instance lives, the instance
//!   sweep terminates it and releases the Node. Run with every NodeClaim sweep and when the
//!   daemon sees such a Node change.
//!
//! Every sweep waits until the cluster view has listed everything: an empty view would make
//! every instance look leaked.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;

use crate::deps::Deps;
use crate::metrics::disruption_reason;
use crate::nodeclaim::LaunchCache;
use crate::nodeclaim::initialization::is_ready;
use crate::nodeclaim::launch::{LAUNCH_GROUP, group_of_tag, launch_group};
use crate::ports::cloud_provider::CloudProviderError;
use crate::ports::cluster::{ClusterError, Deletion};
use crate::runtime::{
    ActorCtx, ActorError, ControllerId, Handles, Mail, RestartPolicy, Supervised,
};
use karpenter_core::apis::SlimNode;
use karpenter_core::apis::condition_set;
use karpenter_core::apis::conditions::nodeclaim as cond;
use karpenter_core::apis::labels;
use karpenter_core::apis::nodeclaim::provider_id;

/// An instance younger than this may still be getting its NodeClaim's status written.
pub const INSTANCE_GRACE: Duration = Duration::from_secs(30);
/// Instance sweep period right after start.
pub const INSTANCE_SWEEP_FAST: Duration = Duration::from_secs(10);
/// Successful instance sweeps at the fast period before slowing down (Karpenter's 20).
pub const FAST_SWEEPS: u32 = 20;
/// Instance sweep period afterwards.
pub const INSTANCE_SWEEP: Duration = Duration::from_mins(2);
/// NodeClaim sweep period.
pub const NODECLAIM_SWEEP: Duration = Duration::from_mins(2);

/// Sweep for leaked instances now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollectInstances;

impl Mail for CollectInstances {
    /// How many instances were terminated.
    type Reply = usize;
    const NAME: &'static str = "CollectInstances";
}

/// Sweep for NodeClaims whose instance is gone now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollectNodeClaims;

impl Mail for CollectNodeClaims {
    /// How many NodeClaims were deleted.
    type Reply = usize;
    const NAME: &'static str = "CollectNodeClaims";
    // Karpenter's core collector of NodeClaims without an instance.
    const CONTROLLER: Option<&'static str> = Some("nodeclaim.garbagecollection");
}

/// Release deleting Nodes that no NodeClaim owns and whose instance is gone, now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReleaseOrphanNodes;

impl Mail for ReleaseOrphanNodes {
    /// How many Nodes were released.
    type Reply = usize;
    const NAME: &'static str = "ReleaseOrphanNodes";
    // Karpenter's node.termination releases a Node without NodeClaims.
    const CONTROLLER: Option<&'static str> = Some("node.termination");
}

/// Whether a Node is being deleted and still held by our finalizer.
#[must_use]
pub fn is_held_in_deletion(node: &SlimNode) -> bool {
    node.metadata.deletion_timestamp.is_some()
        && node
            .metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == labels::TERMINATION_FINALIZER))
}

/// Removes our finalizer from a Node.
fn release(node: &mut Node) {
    if let Some(finalizers) = &mut node.metadata.finalizers {
        finalizers.retain(|f| f != labels::TERMINATION_FINALIZER);
    }
}

/// What the collector needs: the daemon's ports and the NodeClaim actors' launch cache.
#[derive(Debug, Clone)]
pub struct GarbageCollectorDeps {
    pub deps: Deps,
    pub launches: Arc<LaunchCache>,
}

/// A failed sweep.
#[derive(Debug, thiserror::Error)]
pub enum GarbageCollectionError {
    #[error("listing the cloud's instances")]
    List(#[source] Box<CloudProviderError>),
    #[error("terminating leaked instance {provider_id}")]
    Terminate {
        provider_id: String,
        #[source]
        source: Box<CloudProviderError>,
    },
    #[error("{what} {name}")]
    Write {
        what: &'static str,
        name: String,
        #[source]
        source: ClusterError,
    },
}

impl GarbageCollectionError {
    /// Label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::List(source) | Self::Terminate { source, .. } => source.category(),
            Self::Write { source, .. } => source.category(),
        }
    }
}

/// The singleton collector.
#[derive(Debug)]
pub struct GarbageCollectorActor {
    deps: Deps,
    launches: Arc<LaunchCache>,
    /// Successful instance sweeps since start.
    instance_sweeps: u32,
}

impl Supervised for GarbageCollectorActor {
    const KIND: &'static str = "GarbageCollectorActor";
    // Karpenter's AWS instance collector; `CollectNodeClaims` does the core one's work.
    const CONTROLLER: ControllerId = ControllerId::singleton("instance.garbagecollection");
    // Two timers and the odd manual sweep; 8 is plenty.
    const MAILBOX_CAPACITY: usize = 8;
    const RESTART: RestartPolicy = RestartPolicy::Permanent;
    type Deps = GarbageCollectorDeps;

    fn build(_key: &str, deps: &GarbageCollectorDeps) -> Result<Self, ActorError> {
        Ok(Self {
            deps: deps.deps.clone(),
            launches: Arc::clone(&deps.launches),
            instance_sweeps: 0,
        })
    }

    async fn started(&mut self, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        // Timers of a previous instance are gone; both sweeps start over.
        ctx.send_after(INSTANCE_SWEEP_FAST, CollectInstances);
        ctx.send_after(NODECLAIM_SWEEP, CollectNodeClaims);
        ctx.set_state("idle");
        Ok(())
    }
}

impl Handles<CollectInstances> for GarbageCollectorActor {
    async fn handle(
        &mut self,
        _message: CollectInstances,
        ctx: &mut ActorCtx<Self>,
    ) -> Result<usize, ActorError> {
        let outcome = self.collect_instances().await;
        let next = if self.instance_sweeps <= FAST_SWEEPS {
            INSTANCE_SWEEP_FAST
        } else {
            INSTANCE_SWEEP
        };
        ctx.send_after(next, CollectInstances);
        outcome.map_err(|error| {
            tracing::error!(error = crate::logs::err(&error), "Reconciler error");
            ActorError::from_error(error.category(), &error)
        })
    }
}

impl Handles<CollectNodeClaims> for GarbageCollectorActor {
    async fn handle(
        &mut self,
        _message: CollectNodeClaims,
        ctx: &mut ActorCtx<Self>,
    ) -> Result<usize, ActorError> {
        let mut outcome = self.collect_nodeclaims().await;
        if outcome.is_ok()
            && let Err(error) = self.release_orphan_nodes().await
        {
            outcome = Err(error);
        }
        ctx.send_after(NODECLAIM_SWEEP, CollectNodeClaims);
        outcome.map_err(|error| {
            tracing::error!(error = crate::logs::err(&error), "Reconciler error");
            ActorError::from_error(error.category(), &error)
        })
    }
}

impl Handles<ReleaseOrphanNodes> for GarbageCollectorActor {
    async fn handle(
        &mut self,
        _message: ReleaseOrphanNodes,
        _ctx: &mut ActorCtx<Self>,
    ) -> Result<usize, ActorError> {
        self.release_orphan_nodes().await.map_err(|error| {
            tracing::error!(error = crate::logs::err(&error), "Reconciler error");
            ActorError::from_error(error.category(), &error)
        })
    }
}

impl GarbageCollectorActor {
    async fn collect_instances(&mut self) -> Result<usize, GarbageCollectionError> {
        if !self.deps.view.is_synced() {
            return Ok(0);
        }
        // List the cloud first: a slow list then meets a fresher cluster view (Karpenter's
        // order), and an instance launched meanwhile is in the launch cache.
        let instances = self
            .deps
            .cloud
            .list_brief()
            .await
            .map_err(|e| GarbageCollectionError::List(Box::new(e)))?;
        let known: HashSet<String> = self
            .deps
            .view
            .nodeclaims()
            .iter()
            .filter_map(|nc| provider_id(nc).map(str::to_owned))
            .chain(self.launches.launched_provider_ids())
            .collect();
        // Launch groups a NodeClaim still waits to launch in (see the module docs).
        let waiting: HashSet<String> = self
            .deps
            .view
            .nodeclaims()
            .iter()
            .filter(|nc| provider_id(nc).is_none() && nc.metadata.deletion_timestamp.is_none())
            .map(launch_group)
            .collect();
        let now = self.deps.clock.now();
        let mut collected = 0;
        for instance in instances
            .iter()
            .filter(|i| i.metadata.deletion_timestamp.is_none())
        {
            let Some(id) = provider_id(instance) else {
                continue;
            };
            let launched = instance
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(now, |t| t.0);
            let age = Duration::try_from(now.duration_since(launched)).unwrap_or(Duration::ZERO);
            if known.contains(id) || age <= INSTANCE_GRACE {
                continue;
            }
            if let Some(group) = instance
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(LAUNCH_GROUP))
                .map(|tag| group_of_tag(tag))
                && waiting.contains(group)
            {
                tracing::debug!(
                    provider_id = id,
                    "sparing an instance a nodeclaim of its launch group waits to adopt"
                );
                continue;
            }
            match self.deps.cloud.delete(instance).await {
                Ok(()) | Err(CloudProviderError::NodeClaimNotFound { .. }) => {}
                Err(source) => {
                    return Err(GarbageCollectionError::Terminate {
                        provider_id: id.to_owned(),
                        source: Box::new(source),
                    });
                }
            }
            tracing::debug!(
                "provider-id" = id,
                "garbage collected cloudprovider instance"
            );
            collected += 1;
            if let Some(node) = self.deps.view.node_by_provider_id(id) {
                self.delete_node(&node).await?;
            }
        }
        self.instance_sweeps = self.instance_sweeps.saturating_add(1);
        Ok(collected)
    }

    /// Deletes a leaked instance's Node. Its instance is terminated and no NodeClaim owns it,
    /// so nothing is left to drain: our finalizer is removed too, or the Node would wait for
    /// an owner that does not exist.
    async fn delete_node(&self, node: &SlimNode) -> Result<(), GarbageCollectionError> {
        let name = node.metadata.name.clone().unwrap_or_default();
        let error = |what, source| GarbageCollectionError::Write {
            what,
            name: name.clone(),
            source,
        };
        match self.deps.cluster.delete_node(&name).await {
            Ok(Deletion::Terminating) => {
                match self.deps.cluster.update_node(&name, &release).await {
                    Ok(_) | Err(ClusterError::NotFound { .. }) => {}
                    Err(source) => return Err(error("releasing the node", source)),
                }
            }
            Ok(Deletion::Deleted | Deletion::NotFound) | Err(ClusterError::NotFound { .. }) => {}
            Err(source) => return Err(error("deleting the node", source)),
        }
        tracing::debug!(Node = %name, "garbage collected node");
        Ok(())
    }

    /// The provider ids of the cloud's instances that are not shutting down.
    async fn alive_instances(&self) -> Result<HashSet<String>, GarbageCollectionError> {
        let instances = self
            .deps
            .cloud
            .list_brief()
            .await
            .map_err(|e| GarbageCollectionError::List(Box::new(e)))?;
        Ok(instances
            .iter()
            .filter(|i| i.metadata.deletion_timestamp.is_none())
            .filter_map(|i| provider_id(i).map(str::to_owned))
            .collect())
    }

    async fn collect_nodeclaims(&mut self) -> Result<usize, GarbageCollectionError> {
        if !self.deps.view.is_synced() {
            return Ok(0);
        }
        let alive = self.alive_instances().await?;
        let mut collected = 0;
        for nodeclaim in self.deps.view.nodeclaims() {
            let registered = nodeclaim
                .status
                .as_ref()
                .is_some_and(|s| condition_set::is_true(&s.conditions, cond::REGISTERED));
            let Some(id) = provider_id(&nodeclaim) else {
                continue;
            };
            if !registered || nodeclaim.metadata.deletion_timestamp.is_some() || alive.contains(id)
            {
                continue;
            }
            if self
                .deps
                .view
                .node_by_provider_id(id)
                .is_some_and(|node| is_ready(&node))
            {
                continue;
            }
            let name = nodeclaim.metadata.name.clone().unwrap_or_default();
            match self.deps.cluster.delete_nodeclaim(&name).await {
                Ok(_) => {}
                Err(ClusterError::NotFound { .. }) => continue,
                Err(source) => {
                    return Err(GarbageCollectionError::Write {
                        what: "deleting nodeclaim",
                        name,
                        source,
                    });
                }
            }
            tracing::debug!(
                NodeClaim = %name,
                Node = nodeclaim.status.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or_default(),
                "provider-id" = id,
                "garbage collecting nodeclaim with no cloudprovider representation"
            );
            let label = |key: &str| {
                nodeclaim
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(key))
                    .map_or("", String::as_str)
            };
            self.deps.metrics.nodeclaim_disrupted(
                disruption_reason::GARBAGE_COLLECTED,
                label(labels::NODEPOOL),
                label(labels::CAPACITY_TYPE),
            );
            collected += 1;
        }
        Ok(collected)
    }

    /// Removes our finalizer from deleting Nodes that no NodeClaim owns and whose instance is
    /// not in the cloud's list; the cloud is asked only when there is such a Node.
    async fn release_orphan_nodes(&mut self) -> Result<usize, GarbageCollectionError> {
        if !self.deps.view.is_synced() {
            return Ok(0);
        }
        let orphans: Vec<Arc<SlimNode>> = self
            .deps
            .view
            .nodes()
            .into_iter()
            .filter(|node| is_held_in_deletion(node))
            .filter(|node| {
                node.spec
                    .as_ref()
                    .and_then(|s| s.provider_id.as_deref())
                    .is_none_or(|id| self.deps.view.nodeclaim_by_provider_id(id).is_none())
            })
            .collect();
        if orphans.is_empty() {
            return Ok(0);
        }
        let alive = self.alive_instances().await?;
        let mut released = 0;
        for node in orphans {
            let id = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
            if id.is_some_and(|id| alive.contains(id)) {
                // The instance sweep terminates it and releases the Node.
                continue;
            }
            let name = node.metadata.name.clone().unwrap_or_default();
            match self.deps.cluster.update_node(&name, &release).await {
                Ok(_) | Err(ClusterError::NotFound { .. }) => {}
                Err(source) => {
                    return Err(GarbageCollectionError::Write {
                        what: "releasing the node",
                        name,
                        source,
                    });
                }
            }
            tracing::info!(Node = %name, "deleted node");
            released += 1;
        }
        Ok(released)
    }
}
