//! What one disruption round looks at, as plain data: the state nodes (a Node and its
//! NodeClaim, paired by provider id, with the pods bound to the Node), the NodePools' disruption
//! settings and instance types, the PodDisruptionBudgets, the scheduler's snapshot for the
//! simulations, and what the actor remembers between rounds (the orchestration queue, the
//! consolidation memos, the NodePools a timed-out single-node pass did not reach).
//!
//! The actor builds this from its cluster view; [`NodePod::from_pod`] and [`Pdb::from_api`]
//! read the Kubernetes objects so that the rules about them (which pods count as active,
//! reschedulable, evictable; which PDBs fully block) live here, next to the decisions.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

use crate::apis::SlimPod;
use crate::apis::labels;
use crate::apis::nodepool::Disruption;
use crate::apis::taints::{Taint, TaintEffect};
use crate::domain::instance_type::InstanceType;
use crate::domain::scheduling::NodeLabels;
use crate::domain::scheduling::{
    LabelSelector, PodError, PreferencePolicy, SchedulingPod, Snapshot,
};

/// The pod annotation whose value lowers or raises the cost of evicting the pod.
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

/// Who owns a pod, as far as disruption cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PodOwner {
    /// An `apps/v1` DaemonSet: never rescheduled.
    DaemonSet,
    /// A `v1` Node (a static, mirror pod): never rescheduled or evicted.
    Node,
    /// An `apps/v1` `StatefulSet`: a terminating replica still needs a home.
    StatefulSet,
    /// Anything else, or nothing.
    Other,
}

/// A pod bound to a state node.
#[derive(Debug, Clone, PartialEq)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "one flag per pod fact Karpenter's pod predicates read"
)]
pub struct NodePod {
    /// Identity, labels and everything the scheduler needs to place it elsewhere.
    pub pod: SchedulingPod,
    /// Phase `Succeeded` or `Failed`.
    pub terminal: bool,
    /// Has a deletion timestamp.
    pub terminating: bool,
    pub owner: PodOwner,
    /// Annotation `karpenter.sh/do-not-disrupt: "true"`.
    pub do_not_disrupt: bool,
    /// Annotation `controller.kubernetes.io/pod-deletion-cost`, when it parses as a float
    /// (Karpenter logs and ignores one that does not).
    pub deletion_cost: Option<f64>,
    /// `spec.priority`.
    pub priority: Option<i32>,
    /// Condition `Ready=False` (for a PDB's `unhealthyPodEvictionPolicy: AlwaysAllow`).
    pub not_ready: bool,
}

impl NodePod {
    /// Reads a bound pod.
    pub fn from_pod(pod: &SlimPod) -> Result<Self, PodError> {
        let scheduling = SchedulingPod::from_pod(pod)?;
        let annotations = pod.metadata.annotations.as_ref();
        let annotation = |key: &str| annotations.and_then(|a| a.get(key)).map(String::as_str);
        let status = pod.status.as_ref();
        let phase = status.and_then(|s| s.phase.as_deref());
        let owner = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find_map(|o| match (o.api_version.as_str(), o.kind.as_str()) {
                ("apps/v1", "DaemonSet") => Some(PodOwner::DaemonSet),
                ("v1", "Node") => Some(PodOwner::Node),
                ("apps/v1", "StatefulSet") => Some(PodOwner::StatefulSet),
                _ => None,
            })
            .unwrap_or(PodOwner::Other);
        Ok(Self {
            pod: scheduling,
            terminal: matches!(phase, Some("Succeeded" | "Failed")),
            terminating: pod.metadata.deletion_timestamp.is_some(),
            owner,
            do_not_disrupt: annotation(labels::DO_NOT_DISRUPT) == Some("true"),
            deletion_cost: annotation(POD_DELETION_COST).and_then(parse_deletion_cost),
            priority: pod.spec.as_ref().and_then(|s| s.priority),
            not_ready: status
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "False"),
        })
    }

    /// Not finished and not terminating (Karpenter's `IsActive`).
    #[must_use]
    pub fn is_active(&self) -> bool {
        !self.terminal && !self.terminating
    }

    /// Needs a new home when its node goes (Karpenter's `IsReschedulable`): active, or a
    /// terminating `StatefulSet` replica; not a `DaemonSet` or static pod.
    #[must_use]
    pub fn is_reschedulable(&self) -> bool {
        (self.is_active() || (self.owner == PodOwner::StatefulSet && self.terminating))
            && !matches!(self.owner, PodOwner::DaemonSet | PodOwner::Node)
    }

    /// Tolerates `karpenter.sh/disrupted:NoSchedule` (then it is never evicted for
    /// disruption, so no PDB concerns it).
    #[must_use]
    pub fn tolerates_disrupted_taint(&self) -> bool {
        let taint = Taint::new(labels::DISRUPTED_TAINT, None, TaintEffect::NoSchedule);
        self.pod
            .shape
            .tolerations
            .iter()
            .any(|t| t.tolerates(&taint))
    }

    /// Would be evicted when its node drains (Karpenter's `IsEvictable`).
    #[must_use]
    pub fn is_evictable(&self) -> bool {
        self.is_active()
            && !self.tolerates_disrupted_taint()
            && self.owner != PodOwner::Node
            && !self.do_not_disrupt
    }

    /// `namespace/name`.
    #[must_use]
    pub fn key(&self) -> String {
        self.pod.key()
    }
}

/// Go's `strconv.ParseFloat(v, 64)` for the deletion cost annotation.
#[must_use]
pub fn parse_deletion_cost(value: &str) -> Option<f64> {
    value.parse::<f64>().ok().filter(|v| !v.is_nan())
}

/// A PodDisruptionBudget as disruption reads it (Karpenter's `pdb.Limits` item).
#[derive(Debug, Clone, PartialEq)]
pub struct Pdb {
    pub namespace: String,
    pub name: String,
    /// A missing selector selects nothing, an empty one everything.
    pub selector: LabelSelector,
    /// `status.disruptionsAllowed`.
    pub disruptions_allowed: i32,
    /// `maxUnavailable: 0`, `maxUnavailable: "0%"` or `minAvailable: "100%"`: no pod it
    /// selects will ever be evicted.
    pub fully_blocking: bool,
    /// `unhealthyPodEvictionPolicy: AlwaysAllow`: pods with `Ready=False` may go anyway.
    pub always_allow_unhealthy: bool,
}

impl Pdb {
    /// Reads a PDB. An invalid selector selects nothing (Karpenter fails the whole candidate
    /// computation instead; a documented deviation).
    #[must_use]
    pub fn from_api(pdb: &PodDisruptionBudget) -> Self {
        let spec = pdb.spec.as_ref();
        let max_unavailable = spec.and_then(|s| s.max_unavailable.as_ref());
        let min_available = spec.and_then(|s| s.min_available.as_ref());
        let fully_blocking = matches!(max_unavailable, Some(IntOrString::Int(0)))
            || matches!(max_unavailable, Some(IntOrString::String(s)) if s == "0%")
            || matches!(min_available, Some(IntOrString::String(s)) if s == "100%");
        Self {
            namespace: pdb.metadata.namespace.clone().unwrap_or_default(),
            name: pdb.metadata.name.clone().unwrap_or_default(),
            selector: LabelSelector::from_api(spec.and_then(|s| s.selector.as_ref())),
            disruptions_allowed: pdb
                .status
                .as_ref()
                .and_then(|s| s.disruptions_allowed)
                .unwrap_or(0),
            fully_blocking,
            always_allow_unhealthy: spec.and_then(|s| s.unhealthy_pod_eviction_policy.as_deref())
                == Some("AlwaysAllow"),
        }
    }

    /// `namespace/name`.
    #[must_use]
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The NodeClaim side of a state node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeClaimFacts {
    pub name: String,
    /// `metadata.creationTimestamp`.
    pub created: Timestamp,
    /// `spec.expireAfter` (`None` for `Never`).
    pub expire_after: Option<Duration>,
    /// `spec.terminationGracePeriod`: Drift may then disrupt despite pods that block
    /// eviction.
    pub termination_grace_period: Option<Duration>,
    /// Condition `Consolidatable=True` (maintained by the NodeClaim's own controller).
    pub consolidatable: bool,
    /// Condition `Drifted=True` and its `lastTransitionTime`.
    pub drifted_since: Option<Timestamp>,
    /// Condition `InstanceTerminating=True`.
    pub instance_terminating: bool,
}

/// A Node and its NodeClaim as one (Karpenter's `StateNode`).
#[derive(Debug, Clone, PartialEq)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "one flag per state node fact Karpenter's candidate checks read"
)]
pub struct StateNode {
    /// The Node's name once registered, else the NodeClaim's.
    pub name: String,
    /// `None`: not managed by Karpenter.
    pub node_claim: Option<NodeClaimFacts>,
    /// A Node exists.
    pub has_node: bool,
    /// The Node's labels once registered, else the NodeClaim's.
    pub labels: NodeLabels,
    /// Karpenter's `Initialized()`: managed and labelled `karpenter.sh/initialized=true`
    /// (unmanaged nodes count as initialized).
    pub initialized: bool,
    /// The Node's `Ready` condition is `True`.
    pub ready: bool,
    /// Marked for deletion in memory by disruption, or deleted (NodeClaim deletion timestamp,
    /// `InstanceTerminating`, or an unmanaged Node's deletion timestamp).
    pub marked_for_deletion: bool,
    /// A provisioning or disruption pass nominated it for pods until this time.
    pub nominated_until: Option<Timestamp>,
    /// Annotation `karpenter.sh/do-not-disrupt: "true"` (the Node's once registered, else the
    /// NodeClaim's).
    pub do_not_disrupt: bool,
    /// Every pod bound to the Node (DaemonSet, static and finished ones included).
    pub pods: Vec<Arc<NodePod>>,
    /// Index of this node in [`DisruptionInput::scheduling`]'s `existing_nodes`; `None` when
    /// it is not there (marked for deletion).
    pub existing: Option<usize>,
}

impl StateNode {
    /// The `karpenter.sh/nodepool` label.
    #[must_use]
    pub fn node_pool(&self) -> Option<&str> {
        self.labels.get(labels::NODEPOOL).map(String::as_str)
    }

    /// A label.
    #[must_use]
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }

    /// Nominated for pods at `now`.
    #[must_use]
    pub fn is_nominated(&self, now: Timestamp) -> bool {
        self.nominated_until.is_some_and(|until| until > now)
    }

    /// The pods that need a new home when it goes.
    pub fn reschedulable_pods(&self) -> impl Iterator<Item = &NodePod> + '_ {
        self.pods
            .iter()
            .map(AsRef::as_ref)
            .filter(|p| p.is_reschedulable())
    }
}

/// A NodePool as disruption reads it.
#[derive(Debug, Clone)]
pub struct PoolInput {
    pub name: String,
    /// `spec.disruption`: consolidateAfter, consolidationPolicy, budgets.
    pub disruption: Disruption,
    /// The cloud provider's instance types for the pool. Empty when listing them failed or
    /// returned none: its nodes are then no candidates ("NodePool not found").
    pub instance_types: Vec<Arc<InstanceType>>,
}

/// The knobs of a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisruptionOptions {
    /// Feature gate `SpotToSpotConsolidation`.
    pub spot_to_spot: bool,
    /// Feature gate `ReservedCapacity` (reservations are counted in the simulations).
    pub reserved_capacity: bool,
    /// `PREFERENCE_POLICY` for the simulations.
    pub preference_policy: PreferencePolicy,
    /// Most candidates a multi-node command takes. Karpenter's binary search caps the
    /// midpoint at 100 and so tries up to 101 nodes; 101 reproduces it.
    pub multi_node_limit: usize,
    /// Work budget standing in for multi-node consolidation's 1-minute timeout; `None`: no
    /// cap (see the module docs of [`super`]).
    pub multi_node_budget: Option<u64>,
    /// Work budget standing in for single-node consolidation's 3-minute timeout.
    pub single_node_budget: Option<u64>,
    /// Work budget of repacking (no Karpenter counterpart), so that a round with every method
    /// stays under a second at 5,000 nodes.
    pub repack_budget: Option<u64>,
    /// Past Karpenter: replace N underutilized nodes by M < N cheaper ones when no single
    /// node can take them (off by default).
    pub repack: bool,
}

/// Karpenter's off-by-one: the binary search's midpoint is capped at 100, so a command can
/// take 101 candidates.
pub const MULTI_NODE_LIMIT: usize = 101;
/// Default work budget of multi-node consolidation (see the module docs of [`super`]): about
/// half a second of simulation on one core (a work unit costs about 1.5 µs in the disruption
/// bench), far more simulations than Karpenter runs in its minute.
pub const MULTI_NODE_BUDGET: u64 = 300_000;
/// Default work budget of repacking: a sixth of multi-node's (its simulations create several
/// NodeClaims and cost about four times as much per work unit).
pub const REPACK_BUDGET: u64 = 50_000;
/// Default work budget of single-node consolidation: about half a second of simulation, or
/// some 3,000 candidates of ten pods, where Karpenter's three minutes evaluate a few hundred.
pub const SINGLE_NODE_BUDGET: u64 = 300_000;

impl Default for DisruptionOptions {
    fn default() -> Self {
        Self {
            spot_to_spot: false,
            reserved_capacity: false,
            preference_policy: PreferencePolicy::Respect,
            multi_node_limit: MULTI_NODE_LIMIT,
            multi_node_budget: Some(MULTI_NODE_BUDGET),
            single_node_budget: Some(SINGLE_NODE_BUDGET),
            repack_budget: Some(REPACK_BUDGET),
            repack: false,
        }
    }
}

/// Per consolidation method: whether the cluster's consolidation state is unchanged since the
/// method last found nothing (Karpenter's `IsConsolidated` memo). The method then stops after
/// computing its candidates and budgets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "one independent memo per consolidation method, as Karpenter keeps them"
)]
pub struct Memos {
    pub emptiness: bool,
    pub multi_node: bool,
    pub single_node: bool,
    pub repack: bool,
    /// Single-node candidates (state node names) whose simulation found nothing to do in
    /// this same consolidation state. Past Karpenter, which starts its single-node pass from
    /// the cheapest candidate again after each timeout (so in a large cluster it never
    /// reaches the candidates past its deadline), a pass that ran out of budget goes on next
    /// round with the candidates it has not judged yet.
    pub single_node_judged: BTreeSet<String>,
}

/// Everything one disruption round decides from.
#[derive(Debug, Clone)]
pub struct DisruptionInput {
    pub now: Timestamp,
    pub nodes: Vec<StateNode>,
    /// The managed NodePools (ready or not).
    pub pools: Vec<PoolInput>,
    pub pdbs: Vec<Pdb>,
    /// The cluster as the provisioner's scheduler sees it: pods are the pending pods first,
    /// then the currently reschedulable pods of the nodes marked for deletion; existing nodes
    /// are the state nodes not marked for deletion (uninitialized and in-flight ones
    /// included); NodePools are the ready ones with their spec limits (not reduced by
    /// deleting NodeClaims), DaemonSet overhead and instance types.
    pub scheduling: Snapshot,
    /// How many of `scheduling.pods` are pending (the rest are deleting nodes' pods).
    pub pending_pods: usize,
    /// State node names with a command in the orchestration queue.
    pub queued: BTreeSet<String>,
    pub memos: Memos,
    /// NodePools a previous single-node pass did not reach before its budget ran out; they go
    /// first this time.
    pub single_node_unseen_pools: Vec<String>,
    pub options: DisruptionOptions,
}
