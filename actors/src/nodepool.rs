//! `NodePoolActor`: one per NodePool, keeping what Karpenter's `nodepool.*` controllers keep
//! (reference 2.1):
//!
//! - **hash** (`nodepool.hash`): the `karpenter.sh/nodepool-hash` and `-hash-version`
//!   annotations ([`karpenter_core::domain::nodepool_hash`]); when the pool carries another hash version
//!   (Karpenter's own `v3`, or an older one of ours), its NodeClaims are re-stamped with the new
//!   hash first (those already `Drifted` keep theirs), so a version change drifts nothing;
//! - **counter** (`nodepool.counter`): `status.resources`, the capacity and node count of the
//!   pool's NodeClaims ([`karpenter_core::domain::limits`]), once the cluster view is synced;
//! - **readiness** (`nodepool.readiness`): `NodeClassReady` from the `EC2NodeClass`'s `Ready`
//!   (not found, terminating or unknown make it `False` with Karpenter's reasons);
//! - **registration health** (`nodepool.registrationhealth`): `NodeRegistrationHealthy` back to
//!   `Unknown` when the pool or its class changes generation (the NodeClaim actors set it `True` on a
//!   registration and `False` on a liveness timeout);
//! - **validation** (`nodepool.validation`): `ValidationSucceeded` from the runtime rules
//!   ([`karpenter_core::apis::validation::nodepool_violations`]); and the root `Ready`.
//!
//! Flow: the daemon sends [`Reconcile`](crate::messages::Reconcile) when the NodePool, one of
//! its NodeClaims or its `EC2NodeClass` changes; the actor also looks again every
//! [`COUNTER_RESYNC`] (Karpenter's counter period) for node capacities it is not told about, and
//! retries a failed reconcile after the same period. Changes of members within
//! [`MEMBER_COALESCE`] of the last recount are folded into one ([`Reconciler::defer`]).
//! [`GetNodePoolUsage`] answers the pool's usage and remaining limits (the same pure functions
//! the Provisioner can call on the view directly). Counts keep each NodeClaim's capacity
//! between them ([`CapacityCache`]), so a recount reads again only the NodeClaims and Nodes that
//! changed, and a recount while the view's NodeClaims and Nodes did not change at all
//! ([`ChangeMark`]) answers the last count without walking the pool. The actor is a
//! [`Reconciler`]: it stops when its NodePool is gone.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::deps::Deps;
use crate::messages::WatchedKind;
use crate::ports::cluster::ClusterError;
use crate::ports::cluster_view::ChangeMark;
use crate::runtime::{
    Action, ActorCtx, ActorError, Backoff, Cause, Coalesce, ControllerId, Handles, Mail,
    ReconcileError, ReconcilePolicy, Reconciler, RestartPolicy, Start, Supervised,
};
use karpenter_core::apis::condition_set::{self, ConditionSet, NODEPOOL_DEPENDENTS, ObjectFacts};
use karpenter_core::apis::conditions::{
    ConditionStatus, READY, nodeclaim as claim_cond, nodepool as cond,
};
use karpenter_core::apis::labels::{self, annotation};
use karpenter_core::apis::validation::nodepool_violations;
use karpenter_core::apis::{NodeClaim, NodePool, NodePoolStatus, SlimNodeClaim};
use karpenter_core::domain::limits::{self, CapacityCache, LimitsError};
use karpenter_core::domain::nodepool_hash::{HASH_VERSION, template_hash};
use karpenter_core::domain::resources::{ResourceLimits, Resources};

/// How often the pool recounts its resources without being told (Karpenter's counter period).
pub const COUNTER_RESYNC: Duration = Duration::from_secs(5);
/// How soon to look again while the cluster view has not listed everything yet.
pub const UNSYNCED_RETRY: Duration = Duration::from_secs(1);
/// Recounts caused by members (the pool's NodeClaims) within this long of the last one are
/// folded into one recount at its end: a burst of N launches costs a few passes over the pool's
/// NodeClaims instead of N (controller-runtime's work queue folds them too).
pub const MEMBER_COALESCE: Duration = Duration::from_millis(500);

/// Asks for the pool's usage and what is left of its limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetNodePoolUsage;

/// The pool's usage and remaining limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePoolUsage {
    /// Capacity of the pool's live NodeClaims, with `nodes`.
    pub usage: Resources,
    /// `spec.limits` minus `usage` (unbounded resources are absent).
    pub remaining: ResourceLimits,
}

impl Mail for GetNodePoolUsage {
    type Reply = Result<NodePoolUsage, LimitsError>;
    const NAME: &'static str = "GetNodePoolUsage";
}

/// A failed step of a NodePool's reconcile.
#[derive(Debug, thiserror::Error)]
pub enum NodePoolError {
    #[error("{what} of nodepool {nodepool}")]
    Write {
        what: &'static str,
        nodepool: String,
        #[source]
        source: ClusterError,
    },
    #[error("re-stamping nodeclaim {nodeclaim} with the hash of nodepool {nodepool}")]
    Restamp {
        nodepool: String,
        nodeclaim: String,
        #[source]
        source: ClusterError,
    },
}

impl NodePoolError {
    /// Label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Write { source, .. } | Self::Restamp { source, .. } => source.category(),
        }
    }
}

impl ReconcileError for NodePoolError {
    fn category(&self) -> &'static str {
        NodePoolError::category(self)
    }
}

/// One NodePool's actor.
#[derive(Debug)]
pub struct NodePoolActor {
    name: String,
    deps: Deps,
    /// When the pool was last recounted.
    recounted: Option<Instant>,
    /// Each NodeClaim's capacity as the last count read it.
    capacities: CapacityCache,
    /// The last count, and the view's NodeClaim and Node change counts it was made at: while
    /// neither kind changed, the pool's usage is the same and a recount (every
    /// [`COUNTER_RESYNC`], a walk over all of the pool's NodeClaims) answers it again.
    counted: Option<limits::NodePoolUsage>,
    count_mark: ChangeMark<2>,
}

impl Supervised for NodePoolActor {
    const KIND: &'static str = "NodePoolActor";
    // Karpenter splits this work over nodepool.counter, .hash, .readiness and
    // .registrationhealth; the counter (status.resources) is the one it does on every change.
    const CONTROLLER: ControllerId =
        ControllerId::of_kind("nodepool.counter", "karpenter.sh", "NodePool");
    // Every NodeClaim change of the pool sends one event; a burst of launches fills it, and an
    // overflow only drops a redundant recount.
    const MAILBOX_CAPACITY: usize = 64;
    const RESTART: RestartPolicy = RestartPolicy::Transient;
    type Deps = Deps;

    fn build(key: &str, deps: &Deps) -> Result<Self, ActorError> {
        Ok(Self {
            name: key.to_owned(),
            deps: deps.clone(),
            recounted: None,
            capacities: CapacityCache::default(),
            counted: None,
            count_mark: ChangeMark::new([WatchedKind::NodeClaim, WatchedKind::Node]),
        })
    }

    async fn started(&mut self, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        ctx.start_reconciling();
        Ok(())
    }
}

impl Reconciler for NodePoolActor {
    type Object = NodePool;
    type Error = NodePoolError;
    // A failed reconcile is retried with the next recount.
    const POLICY: ReconcilePolicy = ReconcilePolicy {
        coalesce: Coalesce::Earliest,
        backoff: Backoff::constant(COUNTER_RESYNC),
        start: Start::Reconcile,
    };

    fn defer(&self, cause: Cause) -> Option<Duration> {
        let now = Instant::now();
        let last = self.recounted?;
        (cause == Cause::Member && now < last + MEMBER_COALESCE)
            .then(|| last + MEMBER_COALESCE - now)
    }

    fn fetch(&self, key: &str) -> Option<Arc<NodePool>> {
        self.deps.view.nodepool(key)
    }

    async fn reconcile(
        &mut self,
        nodepool: Arc<NodePool>,
        _cause: Cause,
        ctx: &mut ActorCtx<Self>,
    ) -> Result<Action, NodePoolError> {
        if !self.deps.view.is_synced() {
            ctx.set_state("waiting for sync");
            return Ok(Action::requeue(UNSYNCED_RETRY));
        }
        self.recounted = Some(Instant::now());
        self.stamp_hash(&nodepool).await?;
        self.write_status(&nodepool).await?;
        ctx.set_state("synced");
        Ok(Action::requeue(COUNTER_RESYNC))
    }
}

impl Handles<GetNodePoolUsage> for NodePoolActor {
    async fn handle(
        &mut self,
        _message: GetNodePoolUsage,
        _ctx: &mut ActorCtx<Self>,
    ) -> Result<Result<NodePoolUsage, LimitsError>, ActorError> {
        let Some(nodepool) = self.deps.view.nodepool(&self.name) else {
            return Err(ActorError::new(
                "not_found",
                format!("nodepool {} is gone", self.name),
            ));
        };
        let usage = self.usage().total;
        Ok(limits::remaining_limits(&nodepool, &usage)
            .map(|remaining| NodePoolUsage { usage, remaining }))
    }
}

impl NodePoolActor {
    /// The pool's usage as the view shows it now: its live NodeClaims and their Nodes.
    fn usage(&mut self) -> limits::NodePoolUsage {
        let view = self.deps.view.as_ref();
        let counts = self.count_mark.read(view);
        if let Some(counted) = &self.counted
            && self.count_mark.unchanged(counts)
        {
            return counted.clone();
        }
        let nodeclaims = view.nodeclaims_of_nodepool(&self.name);
        let usage = self.capacities.usage(
            nodeclaims.iter().map(AsRef::as_ref),
            |provider_id| view.node_by_provider_id(provider_id),
            &self.name,
        );
        self.counted = Some(usage.clone());
        self.count_mark.mark(counts);
        usage
    }
}

/// What the `NodeClassReady` condition should say.
fn node_class_readiness(
    deps: &Deps,
    nodepool: &NodePool,
) -> Option<(ConditionStatus, String, String)> {
    let class = &nodepool.spec.template.spec.node_class_ref;
    if class.group != labels::AWS_GROUP || class.kind != "EC2NodeClass" {
        // Not a class this provider serves (Karpenter ignores such pools).
        return None;
    }
    let Some(nodeclass) = deps.view.ec2nodeclass(&class.name) else {
        return Some((
            ConditionStatus::False,
            cond::REASON_NODE_CLASS_NOT_FOUND.to_owned(),
            "NodeClass not found on cluster".to_owned(),
        ));
    };
    if nodeclass.metadata.deletion_timestamp.is_some() {
        return Some((
            ConditionStatus::False,
            cond::REASON_NODE_CLASS_TERMINATING.to_owned(),
            "NodeClass is Terminating".to_owned(),
        ));
    }
    let ready = nodeclass
        .status
        .as_ref()
        .and_then(|s| condition_set::find(&s.conditions, READY));
    Some(match ready {
        Some(ready) if ready.status == ConditionStatus::True => (
            ConditionStatus::True,
            cond::NODE_CLASS_READY.to_owned(),
            String::new(),
        ),
        Some(ready) if ready.status == ConditionStatus::False => (
            ConditionStatus::False,
            ready.reason.clone(),
            ready.message.clone(),
        ),
        _ => (
            ConditionStatus::False,
            cond::REASON_NODE_CLASS_READINESS_UNKNOWN.to_owned(),
            "Node Class Readiness Unknown".to_owned(),
        ),
    })
}

impl NodePoolActor {
    /// The pool's NodeClaims.
    fn nodeclaims(&self) -> Vec<Arc<SlimNodeClaim>> {
        self.deps.view.nodeclaims_of_nodepool(&self.name)
    }

    async fn stamp_hash(&self, nodepool: &NodePool) -> Result<(), NodePoolError> {
        let hash = template_hash(&nodepool.spec.template);
        let version = annotation(&nodepool.metadata, labels::NODEPOOL_HASH_VERSION);
        if version != Some(HASH_VERSION) {
            self.restamp_nodeclaims(&hash).await?;
        }
        if version == Some(HASH_VERSION)
            && annotation(&nodepool.metadata, labels::NODEPOOL_HASH) == Some(hash.as_str())
        {
            return Ok(());
        }
        let change = |nodepool: &mut NodePool| {
            let annotations = nodepool.metadata.annotations.get_or_insert_default();
            annotations.insert(labels::NODEPOOL_HASH.to_owned(), hash.clone());
            annotations.insert(
                labels::NODEPOOL_HASH_VERSION.to_owned(),
                HASH_VERSION.to_owned(),
            );
        };
        match self.deps.cluster.update_nodepool(&self.name, &change).await {
            Ok(_) | Err(ClusterError::NotFound { .. }) => Ok(()),
            Err(source) => Err(NodePoolError::Write {
                what: "writing the hash annotations",
                nodepool: self.name.clone(),
                source,
            }),
        }
    }

    /// Stamps the pool's NodeClaims with the current hash version, and with the current hash
    /// unless they are drifted already (a new algorithm cannot tell whether they still are).
    async fn restamp_nodeclaims(&self, hash: &str) -> Result<(), NodePoolError> {
        for nodeclaim in self.nodeclaims() {
            if annotation(&nodeclaim.metadata, labels::NODEPOOL_HASH_VERSION) == Some(HASH_VERSION)
            {
                continue;
            }
            let name = nodeclaim.metadata.name.clone().unwrap_or_default();
            let change = |nodeclaim: &mut NodeClaim| {
                let drifted = nodeclaim
                    .status
                    .as_ref()
                    .and_then(|s| condition_set::find(&s.conditions, claim_cond::DRIFTED))
                    .is_some();
                let annotations = nodeclaim.metadata.annotations.get_or_insert_default();
                annotations.insert(
                    labels::NODEPOOL_HASH_VERSION.to_owned(),
                    HASH_VERSION.to_owned(),
                );
                if !drifted {
                    annotations.insert(labels::NODEPOOL_HASH.to_owned(), hash.to_owned());
                }
            };
            match self.deps.cluster.update_nodeclaim(&name, &change).await {
                Ok(_) | Err(ClusterError::NotFound { .. }) => {}
                Err(source) => {
                    return Err(NodePoolError::Restamp {
                        nodepool: self.name.clone(),
                        nodeclaim: name,
                        source,
                    });
                }
            }
        }
        Ok(())
    }

    async fn write_status(&mut self, nodepool: &NodePool) -> Result<(), NodePoolError> {
        let usage = self.usage();
        for error in &usage.errors {
            tracing::error!(error = %error, "left a nodeclaim out of the nodepool's resources");
        }
        let resources = limits::status_resources(&usage.total);
        let readiness = node_class_readiness(&self.deps, nodepool);
        let class = &nodepool.spec.template.spec.node_class_ref;
        let class_generation = self
            .deps
            .view
            .ec2nodeclass(&class.name)
            .map(|c| c.metadata.generation.unwrap_or(0));
        let violations = nodepool_violations(&nodepool.spec);
        let validation = if violations.is_empty() {
            None
        } else {
            Some(
                violations
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            )
        };
        let facts = ObjectFacts::of(&nodepool.metadata);
        let now = self.deps.clock.now();
        let change = |status: &mut NodePoolStatus| {
            status.resources.clone_from(&resources);
            let reset_health = class_generation.is_some_and(|generation| {
                let health =
                    condition_set::find(&status.conditions, cond::NODE_REGISTRATION_HEALTHY);
                health.is_none()
                    || status.node_class_observed_generation != Some(generation)
                    || health.and_then(|c| c.observed_generation) != Some(facts.generation)
            });
            if let Some(generation) = class_generation {
                status.node_class_observed_generation = Some(generation);
            }
            let mut set =
                ConditionSet::new(&mut status.conditions, NODEPOOL_DEPENDENTS, facts, now);
            match &validation {
                None => set.set_true(cond::VALIDATION_SUCCEEDED),
                Some(message) => set.set_false(
                    cond::VALIDATION_SUCCEEDED,
                    cond::REASON_VALIDATION_FAILED,
                    message,
                ),
            };
            if let Some((status, reason, message)) = &readiness {
                set.set(cond::NODE_CLASS_READY, *status, reason, message);
            }
            if reset_health {
                set.set_unknown_with_reason(
                    cond::NODE_REGISTRATION_HEALTHY,
                    condition_set::REASON_AWAITING_RECONCILIATION,
                    "object is awaiting reconciliation",
                );
            }
        };
        let mut probe = nodepool.status.clone().unwrap_or_default();
        change(&mut probe);
        if nodepool.status.as_ref() == Some(&probe) {
            return Ok(());
        }
        match self
            .deps
            .cluster
            .update_nodepool_status(&self.name, &change)
            .await
        {
            Ok(_) | Err(ClusterError::NotFound { .. }) => Ok(()),
            Err(source) => Err(NodePoolError::Write {
                what: "writing the status",
                nodepool: self.name.clone(),
                source,
            }),
        }
    }
}
