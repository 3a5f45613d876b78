//! `NodeClaimActor`: one per NodeClaim, carrying it from request to running node and, once it
//! is deleted, back to nothing (Karpenter's `nodeclaim.lifecycle`, `nodeclaim.disruption`,
//! `nodeclaim.expiration`, `node.termination` and `node.health` controllers and the AWS
//! provider's `nodeclaim.tagging` in one owner; reference 2.1, 2.2).
//!
//! Flow: the daemon routes every change of the NodeClaim, of its Node (by provider id), of its
//! NodePool and of that pool's `EC2NodeClass`, the pod events on its node and the changes of the
//! pods on a draining node to the actor as [`Reconcile`](crate::messages::Reconcile); the
//! actor re-reads the NodeClaim from the `ClusterView` (or takes its own last write, while the
//! view still shows the version that write replaced) and takes the next steps, writing through
//! `ClusterApi` and `CloudProvider`. Writes start from that copy, without a read (the `*_from`
//! updates of `ClusterApi`):
//!
//! 1. **finalizer**: `karpenter.sh/termination` is added before anything is launched, so an
//!    instance can never outlive its NodeClaim unnoticed;
//! 2. **expiration** (`expiration`), whatever the launch state: at its creation plus
//!    `spec.expireAfter` (unless `Never`) the NodeClaim is deleted, counted once as
//!    `expired` and announced with a `DisruptionTerminating` event; before that the actor
//!    looks again at that instant. Forceful: no budget, but the drain below still honours
//!    PodDisruptionBudgets and `do-not-disrupt` until the termination grace period;
//! 3. **launch** ([`launch`]): `CloudProvider::create` runs in a task beside the actor (so a
//!    deletion is seen while CreateFleet is slow) and reports back with [`LaunchCompleted`]; its
//!    result sits in the shared [`LaunchCache`] for a minute, so a crash before `Launched` is
//!    written does not launch twice. No capacity or a `NodeClass` that is not ready deletes the
//!    NodeClaim; other errors set `Launched=Unknown` and retry with backoff (1 s to 1 min);
//! 4. **registration** ([`registration`]): the Node with the instance's provider id is synced
//!    (finalizer, owner, labels, annotations, taints unless `karpenter.sh/do-not-sync-taints`)
//!    and `Registered` set; the NodePool's `NodeRegistrationHealthy` turns `True`;
//! 5. **initialization** ([`initialization`]): Ready, no startup or ephemeral taints, requested
//!    resources present: the node is labelled `karpenter.sh/initialized` and `Initialized` set;
//! 6. then, every reconcile, **drift** ([`drift`]): once `Launched`, `Drifted=True` with the
//!    first reason found (the NodePool's hash, its requirements, the instance type gone from
//!    it, then the cloud provider's `is_drifted`), removed when none holds, decided again every
//!    5 minutes; a cloud error is retried with backoff after the other steps have run; and
//!    **consolidation** ([`consolidatable`]): a pod event the daemon marked in [`PodEvents`]
//!    is written as `status.lastPodEventTime`, and `Consolidatable` is set once the NodePool's
//!    `consolidateAfter` has passed since it (or since the initialization), removed otherwise;
//! 7. **repair** ([`repair`], only with `FEATURE_GATES` `NodeRepair=true`): a Node condition
//!    matching one of `CloudProvider::repair_policies` (`Ready=False` 30 min, ...) is looked at
//!    again the instant its toleration ends; then, on a synced view, if at most 20% (rounded
//!    up) of the NodePool's nodes (the cluster's, without a NodePool) are unhealthy, the
//!    NodeClaim is annotated `karpenter.sh/nodeclaim-termination-timestamp` = now and deleted
//!    (budgets, PDBs and `do-not-disrupt` do not apply: the drain deletes the pods at once);
//!    otherwise the Node gets `NodeRepairBlocked` (at most every 15 minutes) and the actor
//!    looks again in a minute;
//! 8. **tagging** ([`tagging`]), once `Registered` with a node name: the instance gets the
//!    `Name`, `karpenter.sh/nodeclaim` and `eks:eks-cluster-name` tags it lacks
//!    (`CloudProvider::tag_instance`), then the NodeClaim the `karpenter.k8s.aws/tagged`
//!    annotations, which skip the step from then on; a failure is retried with backoff without
//!    holding up the other steps, an instance already gone is skipped;
//! 9. **liveness**: a NodeClaim not registered 15 minutes after its launch (the `Launched`
//!    condition's transition time, so the window survives restarts) is deleted, and its
//!    NodePool's `NodeRegistrationHealthy` turns `False`;
//! 10. **termination** (`termination`), once the NodeClaim has a deletion timestamp: the
//!     termination time annotation from `terminationGracePeriod` (unless repair wrote one); the
//!     Node is deleted, tainted `karpenter.sh/disrupted:NoSchedule` and drained ([`drain`])
//!     through the eviction API; the volumes of the pods that left detach ([`volumes`]); the
//!     instance is deleted until the cloud reports it gone (`InstanceTerminating`); then the
//!     Node's and the NodeClaim's finalizers are removed.
//!
//! The actor is a [`Reconciler`]: the kit reads the NodeClaim, stops the actor
//! ([`crate::runtime::RestartPolicy::Transient`]) when it is gone from the view, keeps the
//! earliest requeue a step asks for ([`Coalesce::Earliest`]) and retries a failed reconcile
//! after 1 s doubling to 1 min. Waits use timers on tokio time; timestamps written to
//! Kubernetes and deadlines read from it use the `Clock` port. Nothing that must survive a
//! restart lives only here: the actor's own fields are eviction backoffs, event dedupe times
//! and once-only metric flags.

pub mod consolidatable;
pub mod drain;
pub mod drift;
pub mod events;
mod expiration;
pub mod initialization;
pub mod launch;
mod lifecycle;
pub mod registration;
pub mod repair;
pub mod tagging;
mod termination;
pub mod volumes;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;
use tracing::Instrument as _;

pub use consolidatable::PodEvents;
pub use launch::{LaunchCache, LaunchState, MAX_CONCURRENT_LAUNCHES};

use crate::deps::Deps;
use crate::ports::cloud_provider::CloudProviderError;
use crate::ports::cluster::ClusterError;
use crate::runtime::{
    Action, ActorCtx, ActorError, Backoff, Cause, Coalesce, ControllerId, Handles, Mail,
    ReconcileError, ReconcilePolicy, Reconciler, RestartPolicy, Start, Supervised,
    reconcile_object,
};
use karpenter_core::apis::labels;
use karpenter_core::apis::nodeclaim::provider_id;
use karpenter_core::apis::{MetaFields, SlimNodeClaim};

/// A node must register within this window after its launch (Karpenter's `registrationTTL`).
pub const REGISTRATION_TTL: Duration = Duration::from_mins(15);
/// First retry after a failed reconcile (Karpenter's lifecycle rate limiter base).
pub const ERROR_BACKOFF_MIN: Duration = Duration::from_secs(1);
/// Longest wait between retries of a failing reconcile (Karpenter's lifecycle rate limiter cap).
pub const ERROR_BACKOFF_MAX: Duration = Duration::from_mins(1);
/// While a launch runs the actor looks again this often, in case the completion notice was lost
/// to a full mailbox.
pub const LAUNCH_CHECK_INTERVAL: Duration = Duration::from_secs(5);
/// While the instance shuts down the actor asks the cloud again this often (Karpenter's 5 s).
pub const INSTANCE_TERMINATION_POLL: Duration = Duration::from_secs(5);
/// While pods drain the actor looks again this often even without pod events (Karpenter's
/// node termination requeue).
pub const DRAIN_POLL: Duration = Duration::from_secs(1);
/// First retry of an eviction a PodDisruptionBudget refused (Karpenter's eviction queue).
pub const EVICTION_BACKOFF_MIN: Duration = Duration::from_millis(100);
/// Longest wait between eviction retries of one pod (Karpenter's eviction queue).
pub const EVICTION_BACKOFF_MAX: Duration = Duration::from_secs(10);
/// Retries of a failed reconcile, and of a failed launch.
const ERROR_BACKOFF: Backoff = Backoff::exponential(ERROR_BACKOFF_MIN, ERROR_BACKOFF_MAX);
/// Retries of one pod's refused eviction.
const EVICTION_BACKOFF: Backoff = Backoff::exponential(EVICTION_BACKOFF_MIN, EVICTION_BACKOFF_MAX);
/// `FailedDraining` events about one node are published at most this often (the API server
/// folds repeats into a series anyway; this keeps the calls down while a PDB blocks for hours).
pub const DRAIN_EVENT_INTERVAL: Duration = Duration::from_mins(1);

/// The launch task finished (or died); the actor reads the outcome from the [`LaunchCache`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchCompleted;

impl Mail for LaunchCompleted {
    type Reply = ();
    const NAME: &'static str = "LaunchCompleted";
}

/// What every NodeClaimActor shares: the daemon's ports, and the launch cache and pod event
/// marks that outlive restarts of any one actor.
#[derive(Debug, Clone)]
pub struct NodeClaimDeps {
    pub deps: Deps,
    pub launches: Arc<LaunchCache>,
    pub pod_events: Arc<PodEvents>,
}

/// A failed step of a NodeClaim's reconcile.
#[derive(Debug, thiserror::Error)]
pub enum NodeClaimError {
    /// A Kubernetes write failed.
    #[error("{what} for nodeclaim {nodeclaim}")]
    Write {
        what: &'static str,
        nodeclaim: String,
        #[source]
        source: ClusterError,
    },
    /// `CloudProvider::create` failed with an error that is retried.
    #[error("launching nodeclaim {nodeclaim}")]
    Launch {
        nodeclaim: String,
        #[source]
        source: Box<CloudProviderError>,
    },
    /// `CloudProvider::delete` or `get` failed.
    #[error("{what} for nodeclaim {nodeclaim}")]
    Cloud {
        what: &'static str,
        nodeclaim: String,
        #[source]
        source: Box<CloudProviderError>,
    },
    /// The termination time annotation is not an RFC 3339 time.
    #[error(
        "nodeclaim {nodeclaim}: annotation {}: {value:?} is not an RFC 3339 time",
        labels::NODECLAIM_TERMINATION_TIMESTAMP
    )]
    TerminationTimestamp { nodeclaim: String, value: String },
}

impl NodeClaimError {
    /// Label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Write { source, .. } => source.category(),
            Self::Launch { source, .. } | Self::Cloud { source, .. } => source.category(),
            Self::TerminationTimestamp { .. } => "bad_termination_timestamp",
        }
    }
}

impl ReconcileError for NodeClaimError {
    fn category(&self) -> &'static str {
        NodeClaimError::category(self)
    }
}

/// When to look again: `None` waits for the next event.
type Next = Option<Duration>;

fn soonest(a: Next, b: Next) -> Next {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// An eviction that a PodDisruptionBudget refused, waiting for its retry.
#[derive(Debug, Clone, Copy)]
struct EvictionBackoff {
    attempts: u32,
    next: Instant,
}

/// One NodeClaim's actor.
#[derive(Debug)]
pub struct NodeClaimActor {
    name: String,
    /// The UID of the NodeClaim the fields below are about: a NodeClaim deleted and created
    /// again under the same name starts from scratch.
    uid: Option<String>,
    deps: Deps,
    launches: Arc<LaunchCache>,
    pod_events: Arc<PodEvents>,
    /// Consecutive failed launches, and when the next may start (events do not bypass the
    /// launch backoff; a restart does).
    launch_failures: u32,
    launch_not_before: Option<Instant>,
    evictions: HashMap<drain::PodKey, EvictionBackoff>,
    last_drain_event: Option<Instant>,
    /// When `NodeRepairBlocked` was last published about this NodeClaim's Node.
    last_repair_blocked_event: Option<Instant>,
    /// Once-only reports: a reconcile that runs on a view older than its own last write must
    /// not count a registration, liveness deletion, expiration or termination twice (Karpenter sleeps a
    /// second after each write for the same reason).
    reported: Reported,
    instance_gone: bool,
    /// The last cloud-side drift verdict and what it was decided on ([`drift::CloudDrift`]).
    cloud_drift: Option<drift::CloudDrift>,
    /// The last requirements-drift verdict and what it was decided on
    /// ([`drift::RequirementsDrift`]).
    requirements_drift: Option<drift::RequirementsDrift>,
    /// This actor's writes the view may not show yet (written from `&self` steps).
    own_writes: std::sync::Mutex<OwnWrites>,
}

/// The NodeClaim as this actor last wrote it, and the resourceVersions its writes replaced
/// since the view last caught up. A reconcile woken before the watch brings a write back
/// starts from the written copy instead of the view's older one, so its writes (which carry
/// the copy's resourceVersion) do not fail on a stale precondition.
#[derive(Debug, Default)]
struct OwnWrites {
    latest: Option<Arc<SlimNodeClaim>>,
    replaced: Vec<String>,
}

impl OwnWrites {
    /// `written` replaced the version `from`.
    fn record(&mut self, from: &SlimNodeClaim, written: &Arc<SlimNodeClaim>) {
        if let Some(rv) = from.metadata.resource_version.as_ref() {
            self.replaced.push(rv.clone());
        }
        self.latest = Some(Arc::clone(written));
    }

    /// The newer of the view's copy and this actor's last write: the write when the view's
    /// copy is one the writes replaced; else the view's (it has caught up, or another writer
    /// came after), and the record is dropped.
    fn newest(&mut self, seen: Arc<SlimNodeClaim>) -> Arc<SlimNodeClaim> {
        if let (Some(latest), Some(rv)) = (&self.latest, &seen.metadata.resource_version)
            && self.replaced.contains(rv)
        {
            return Arc::clone(latest);
        }
        *self = Self::default();
        seen
    }
}

/// What this actor has counted and logged already.
#[derive(Debug, Default)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "independent once-only flags, not a state machine"
)]
struct Reported {
    registered: bool,
    initialized: bool,
    liveness: bool,
    expired: bool,
    node_grace_event: bool,
    drained: bool,
    waiting_for_volumes: bool,
    node_released: bool,
    nodeclaim_released: bool,
    /// Node Repair deleted the NodeClaim (counted once).
    repaired: bool,
    /// The instance is tagged and the NodeClaim annotated (no second `tag_instance`).
    tagged: bool,
    /// The instance cannot be tagged (gone, or no instance id): not retried.
    untaggable: bool,
}

impl Supervised for NodeClaimActor {
    const KIND: &'static str = "NodeClaimActor";
    // Karpenter's lifecycle controller; the drain is its node.termination controller's work.
    const CONTROLLER: ControllerId =
        ControllerId::of_kind("nodeclaim.lifecycle", "karpenter.sh", "NodeClaim");
    // A NodeClaim sees a handful of events between reconciles; a draining node's pods can send
    // a burst (one per pod), and an overflow only drops a redundant "look again".
    const MAILBOX_CAPACITY: usize = 64;
    // Stops for good when its NodeClaim is gone; restarted only after a failure.
    const RESTART: RestartPolicy = RestartPolicy::Transient;
    type Deps = NodeClaimDeps;

    fn build(key: &str, deps: &NodeClaimDeps) -> Result<Self, ActorError> {
        Ok(Self {
            name: key.to_owned(),
            uid: None,
            deps: deps.deps.clone(),
            launches: Arc::clone(&deps.launches),
            pod_events: Arc::clone(&deps.pod_events),
            launch_failures: 0,
            launch_not_before: None,
            evictions: HashMap::new(),
            last_drain_event: None,
            last_repair_blocked_event: None,
            reported: Reported::default(),
            instance_gone: false,
            cloud_drift: None,
            requirements_drift: None,
            own_writes: std::sync::Mutex::default(),
        })
    }

    async fn started(&mut self, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        ctx.start_reconciling();
        Ok(())
    }
}

impl Reconciler for NodeClaimActor {
    type Object = SlimNodeClaim;
    type Error = NodeClaimError;
    // A fresh instance (first start or after a crash) looks at its NodeClaim at once: the
    // message that was in flight is lost and timers of the old instance are dropped.
    const POLICY: ReconcilePolicy = ReconcilePolicy {
        coalesce: Coalesce::Earliest,
        backoff: ERROR_BACKOFF,
        start: Start::Reconcile,
    };

    fn fetch(&self, key: &str) -> Option<Arc<SlimNodeClaim>> {
        let seen = self.deps.view.nodeclaim(key)?;
        Some(
            self.own_writes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .newest(seen),
        )
    }

    async fn reconcile(
        &mut self,
        nodeclaim: Arc<SlimNodeClaim>,
        _cause: Cause,
        ctx: &mut ActorCtx<Self>,
    ) -> Result<Action, NodeClaimError> {
        if !is_managed(&nodeclaim) {
            ctx.set_state("unmanaged");
            return Ok(Action::AwaitChange);
        }
        let current = uid(&nodeclaim);
        if self.uid.as_deref() != Some(current.as_str()) {
            self.forget();
            ctx.reset_backoff();
            self.uid = Some(current);
        }
        // Karpenter's lifecycle controller adds the provider id and the Node, once known, to
        // the context of every line of the reconcile.
        let context = tracing::error_span!(
            "nodeclaim",
            "provider-id" = tracing::field::Empty,
            Node = tracing::field::Empty
        );
        if let Some(status) = nodeclaim.status.as_ref() {
            if let Some(id) = status.provider_id.as_deref() {
                context.record("provider-id", id);
            }
            if let Some(node) = status.node_name.as_deref() {
                context.record("Node", node);
            }
        }
        let next = if nodeclaim.metadata.deletion_timestamp.is_some() {
            // Pods leaving a node that goes away move nothing consolidation would look at.
            self.pod_events.take(&self.name);
            Box::pin(self.finalize(ctx, nodeclaim).instrument(context)).await?
        } else {
            Box::pin(self.lifecycle(ctx, nodeclaim).instrument(context)).await?
        };
        Ok(Action::from(next))
    }
}

impl Handles<LaunchCompleted> for NodeClaimActor {
    async fn handle(
        &mut self,
        _message: LaunchCompleted,
        ctx: &mut ActorCtx<Self>,
    ) -> Result<(), ActorError> {
        reconcile_object(self, Cause::Related, ctx).await
    }
}

/// Whether this NodeClaim is ours to manage (its class is an `EC2NodeClass`).
#[must_use]
pub fn is_managed(nodeclaim: &SlimNodeClaim) -> bool {
    let class = &nodeclaim.spec.node_class_ref;
    class.group == labels::AWS_GROUP && class.kind == "EC2NodeClass"
}

fn has_finalizer(meta: &impl MetaFields) -> bool {
    meta.finalizers()
        .iter()
        .any(|f| f == labels::TERMINATION_FINALIZER)
}

fn label<'a>(nodeclaim: &'a SlimNodeClaim, key: &str) -> &'a str {
    nodeclaim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map_or("", String::as_str)
}

fn uid(nodeclaim: &SlimNodeClaim) -> String {
    nodeclaim
        .metadata
        .uid
        .clone()
        .or_else(|| nodeclaim.metadata.name.clone())
        .unwrap_or_default()
}

/// `to - from` as a duration, zero when `to` is earlier.
fn elapsed(from: Timestamp, to: Timestamp) -> Duration {
    Duration::try_from(to.duration_since(from)).unwrap_or(Duration::ZERO)
}

impl NodeClaimActor {
    fn now(&self) -> Timestamp {
        self.deps.clock.now()
    }

    /// Drops what this actor knew about a previous NodeClaim of the same name.
    fn forget(&mut self) {
        self.launch_failures = 0;
        self.launch_not_before = None;
        self.evictions.clear();
        self.last_drain_event = None;
        self.last_repair_blocked_event = None;
        self.reported = Reported::default();
        self.instance_gone = false;
        self.cloud_drift = None;
        self.requirements_drift = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(rv: &str) -> Arc<SlimNodeClaim> {
        let nodeclaim = serde_json::json!({
            "metadata": { "name": "c1", "resourceVersion": rv },
            "spec": {
                "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
                "requirements": [],
            },
        });
        Arc::new(serde_json::from_value(nodeclaim).expect("a NodeClaim"))
    }

    fn rv(nodeclaim: &SlimNodeClaim) -> &str {
        nodeclaim
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or_default()
    }

    #[test]
    fn a_view_behind_this_actors_writes_yields_the_last_write() {
        let mut own = OwnWrites::default();
        own.record(&at("1"), &at("2"));
        own.record(&at("2"), &at("3"));
        assert_eq!(rv(&own.newest(at("1"))), "3", "two writes behind");
        assert_eq!(rv(&own.newest(at("2"))), "3", "one write behind");
        assert_eq!(rv(&own.newest(at("3"))), "3", "caught up");
        // Caught up: the record is gone, so an old copy is taken as it is.
        assert_eq!(rv(&own.newest(at("1"))), "1");
    }

    #[test]
    fn another_writers_version_is_taken_from_the_view() {
        let mut own = OwnWrites::default();
        own.record(&at("1"), &at("2"));
        assert_eq!(rv(&own.newest(at("7"))), "7");
        assert!(own.latest.is_none() && own.replaced.is_empty());
    }
}
