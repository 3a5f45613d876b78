//! The scheduling snapshot, read from the cluster view (Karpenter's `Provisioner.Schedule` and
//! `NewScheduler`, core `pkg/controllers/provisioning/provisioner.go`, and the state nodes of
//! `pkg/controllers/state`).
//!
//! What goes in:
//! - **Pods**: pending provisionable pods ([`provisionable`], the core's rule the daemon's trigger
//!   also uses: unbound, not terminal or terminating, not owned by a DaemonSet or a Node, not
//!   preempting, not gated), then the
//!   reschedulable pods of deleting nodes. Pods that cannot be read, or that refuse Karpenter
//!   nodes (`karpenter.sh/nodepool DoesNotExist`), are set aside as ignored.
//! - **Existing nodes**: every Node and every launched NodeClaim, paired by provider id, except
//!   those being deleted: a deleting Node or NodeClaim, an instance terminating, or a node
//!   tainted `karpenter.sh/disrupted` (being disrupted: its pods are rescheduled here). Labels,
//!   taints, allocatable and capacity follow Karpenter's `StateNode`: the NodeClaim's until the
//!   Node registers and initializes. NodeClaims not launched yet are not nodes: the actor waits
//!   for them before a run, as Karpenter's cluster-state sync does.
//! - **NodePools** with their instance types (given), DaemonSet overhead (from each DaemonSet's
//!   newest running pod, else its pod template, as Karpenter) and limits less what their
//!   deleting NodeClaims still hold (the solver subtracts the existing nodes itself).
//! - **Namespaces** with their labels, for pod (anti-)affinity `namespaceSelector`s.
//!
//! Left out: volume zone requirements from `PersistentVolumeClaims` (volume topology is not
//! implemented).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::PodSpec;
use karpenter_core::apis::{SlimNode, SlimPod, SlimPodSpec};

use crate::pod_cache::PodCache;
use crate::ports::cloud_provider::InstanceTypes;
use crate::ports::cluster_view::ClusterView;
use karpenter_core::apis::SlimNodeClaim;
use karpenter_core::apis::conditions::{ConditionStatus, nodeclaim as claim_conditions};
use karpenter_core::apis::labels;
use karpenter_core::apis::nodepool::NodePool;
use karpenter_core::apis::taints::{Taint, TaintEffect};
use karpenter_core::domain::interner::Interner;
use karpenter_core::domain::limits;
pub use karpenter_core::domain::pods::{NotProvisionable, provisionable};
use karpenter_core::domain::pods::{is_terminal, owned_by};
use karpenter_core::domain::resources::{Resources, pod_requests};
use karpenter_core::domain::scheduling::{
    BoundPod, ExistingNode, NodeLabels, NodePoolInput, SchedulingPod, Snapshot,
    daemon_requests_for_node, scheduling_taints, taints_from_api,
};

use super::explain::PoolVerdict;

/// Whether a pod on a deleting node needs a new home (Karpenter's `IsReschedulable`): active (a
/// terminating `StatefulSet` pod too, since its replacement waits for it), not a DaemonSet or
/// static pod.
fn reschedulable(pod: &SlimPod) -> bool {
    let active = is_terminal(pod).is_none() && pod.metadata.deletion_timestamp.is_none();
    let stateful_terminating = owned_by(pod, "apps/v1", "StatefulSet")
        && pod.metadata.deletion_timestamp.is_some()
        && is_terminal(pod).is_none();
    (active || stateful_terminating)
        && !owned_by(pod, "apps/v1", "DaemonSet")
        && !owned_by(pod, "v1", "Node")
}

/// Karpenter's `validateKarpenterManagedLabelCanExist`: a pod requiring that
/// `karpenter.sh/nodepool` does not exist will never run on a Karpenter node.
fn refuses_karpenter_nodes(pod: &SlimPod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .is_some_and(|selector| {
            selector.node_selector_terms.iter().any(|term| {
                term.match_expressions
                    .iter()
                    .flatten()
                    .any(|e| e.key == labels::NODEPOOL && e.operator == "DoesNotExist")
            })
        })
}

/// `namespace/name`.
pub(super) fn pod_key(pod: &SlimPod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// A pod of the snapshot, to address events and decisions: its key and the view's pod itself,
/// whose namespace, name and uid it reads (a scale-up's run holds one per pending pod; each
/// had copies of those three strings).
#[derive(Debug, Clone)]
pub(crate) struct PodRef {
    /// `namespace/name`, shared by the run's decision and the actor's tables.
    pub key: Arc<str>,
    pod: Arc<SlimPod>,
}

impl PodRef {
    pub(crate) fn of(pod: &Arc<SlimPod>) -> Self {
        Self {
            key: pod_key(pod).into(),
            pod: Arc::clone(pod),
        }
    }

    pub fn namespace(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or("default")
    }

    pub fn name(&self) -> &str {
        self.pod.metadata.name.as_deref().unwrap_or_default()
    }

    pub fn uid(&self) -> Option<&str> {
        self.pod.metadata.uid.as_deref()
    }
}

/// An existing node of the snapshot: its Node and NodeClaim names.
#[derive(Debug, Clone, Default)]
pub(crate) struct NodeRef {
    pub node: Option<String>,
    pub node_claim: Option<String>,
}

/// A NodePool the run schedules with.
#[derive(Debug, Clone)]
pub(crate) struct UsablePool {
    pub nodepool: Arc<NodePool>,
    pub instance_types: InstanceTypes,
}

/// The snapshot and what its indices refer to.
#[derive(Debug, Default)]
pub(crate) struct Built {
    pub snapshot: Snapshot,
    /// One per `snapshot.pods`.
    pub pods: Vec<PodRef>,
    /// One per `snapshot.existing_nodes`.
    pub nodes: Vec<NodeRef>,
    /// Pods left out, with why.
    pub ignored: Vec<(PodRef, String)>,
    /// NodePools whose template could not be read.
    pub skipped_pools: Vec<PoolVerdict>,
    /// How many of `pods` are pending (the rest come from deleting nodes).
    pub pending: usize,
    /// Every state node (launched NodeClaims and Nodes), deleting ones included.
    pub states: Vec<StateRef>,
}

/// What [`build`] keeps of the pods from one run to the next ([`PodCache`]): each bound pod's
/// requests and scheduler view, each pending pod's conversion.
#[derive(Debug, Default)]
pub(crate) struct PodConversions {
    bound: PodCache<Arc<BoundFacts>>,
    pending: PodCache<Result<SchedulingPod, String>>,
}

impl PodConversions {
    fn sweep(&mut self) {
        self.bound.sweep();
        self.pending.sweep();
    }

    /// Conversions answered from the cache and made, bound and pending pods together.
    #[cfg(test)]
    #[must_use]
    pub(crate) fn counts(&self) -> (u64, u64) {
        let (bound, pending) = (self.bound.counts(), self.pending.counts());
        (bound.0 + pending.0, bound.1 + pending.1)
    }
}

/// A bound pod as an existing node's snapshot reads it: equal for the pods of a workload in
/// one state, so held once per distinct value ([`BOUND_FACTS`], its `BoundPod` with it); the
/// Provisioner and the disruption actor each keep one per bound pod between runs (50,000 at
/// the scale run).
#[derive(Debug, PartialEq, Eq, Hash)]
struct BoundFacts {
    terminal: bool,
    /// `None` when a quantity does not parse (the pod then adds nothing to the node).
    requests: Option<Resources>,
    daemon: bool,
    pod: Arc<BoundPod>,
}

impl BoundFacts {
    fn of(pod: &SlimPod) -> Arc<Self> {
        BOUND_FACTS.intern(Self {
            terminal: is_terminal(pod).is_some(),
            requests: pod.spec.as_ref().and_then(|spec| pod_requests(spec).ok()),
            daemon: is_daemon_pod(pod),
            pod: Arc::new(BoundPod::from_pod(pod)),
        })
    }
}

/// Every bound pod's facts, once per distinct value.
static BOUND_FACTS: Interner<BoundFacts> = Interner::new();

/// A Node, its NodeClaim, or both (Karpenter's `StateNode`).
struct StateNode<'a> {
    node: Option<&'a SlimNode>,
    claim: Option<&'a SlimNodeClaim>,
    /// The shared objects behind `node` and `claim` (always both set or both unset), for
    /// [`StateRef`] and the labels.
    arcs: (Option<&'a Arc<SlimNode>>, Option<&'a Arc<SlimNodeClaim>>),
}

/// A state node of the snapshot, as the disruption actor reads it: the objects, the pods bound
/// to the Node, what the snapshot made of it, and its index among the snapshot's existing nodes
/// (`None` when it is being deleted or disrupted).
#[derive(Debug, Clone)]
pub(crate) struct StateRef {
    pub node: Option<Arc<SlimNode>>,
    pub claim: Option<Arc<SlimNodeClaim>>,
    /// The Node's name once it has one, else the NodeClaim's.
    pub name: String,
    /// The Node's labels once registered, else the NodeClaim's.
    pub labels: NodeLabels,
    /// Karpenter's `Initialized()` (unmanaged nodes count as initialized).
    pub initialized: bool,
    /// Being deleted, its instance terminating, or tainted `karpenter.sh/disrupted`.
    pub deleting: bool,
    pub existing: Option<usize>,
    /// Every pod bound to the Node.
    pub pods: Vec<Arc<SlimPod>>,
}

fn label_is_true(node: Option<&SlimNode>, key: &str) -> bool {
    node.and_then(|n| n.metadata.labels.as_ref())
        .and_then(|l| l.get(key))
        .is_some_and(|v| v == "true")
}

/// The node's figure with zero entries filled in from the NodeClaim's (a node still starting
/// reports zeros for resources its device plugins have not registered yet).
fn overlay(node: Resources, claim: &Resources) -> Resources {
    let mut out = node;
    for (name, amount) in claim.iter() {
        if out.get(name) == 0 {
            out.set(name, amount);
        }
    }
    out
}

impl StateNode<'_> {
    fn managed(&self) -> bool {
        self.claim.is_some()
    }

    fn registered(&self) -> bool {
        !self.managed() || label_is_true(self.node, labels::REGISTERED)
    }

    fn initialized(&self) -> bool {
        !self.managed() || label_is_true(self.node, labels::INITIALIZED)
    }

    fn name(&self) -> String {
        self.node
            .and_then(|n| n.metadata.name.clone())
            .or_else(|| self.claim.and_then(|c| c.metadata.name.clone()))
            .unwrap_or_default()
    }

    /// The labels, read in place: the Node's once registered, else the NodeClaim's.
    fn labels(&self) -> NodeLabels {
        match self.arcs {
            (Some(node), _) if self.registered() => NodeLabels::node(Arc::clone(node)),
            (_, Some(claim)) => NodeLabels::claim(Arc::clone(claim)),
            _ => NodeLabels::default(),
        }
    }

    fn raw_taints(&self) -> Vec<Taint> {
        match (self.node, self.claim) {
            (Some(node), _) if self.registered() => taints_from_api(
                node.spec
                    .as_ref()
                    .and_then(|s| s.taints.as_deref())
                    .unwrap_or_default(),
            ),
            (_, Some(claim)) => claim.spec.taints.clone(),
            (Some(node), None) => taints_from_api(
                node.spec
                    .as_ref()
                    .and_then(|s| s.taints.as_deref())
                    .unwrap_or_default(),
            ),
            (None, None) => Vec::new(),
        }
    }

    fn taints(&self) -> Vec<Taint> {
        let startup = self
            .claim
            .map(|c| c.spec.startup_taints.as_slice())
            .unwrap_or_default();
        scheduling_taints(
            &self.raw_taints(),
            startup,
            self.managed() && !self.initialized(),
        )
    }

    /// Allocatable (or capacity): the Node's once initialized; before, the Node's with zero
    /// entries taken from the NodeClaim; the NodeClaim's when there is no Node yet.
    fn figure(&self, allocatable: bool) -> Resources {
        let node = self.node.map(|n| {
            let status = n.status.as_ref();
            let list = if allocatable {
                status.and_then(|s| s.allocatable.as_deref())
            } else {
                status.and_then(|s| s.capacity.as_deref())
            };
            Resources::from_list_or_zero(list)
        });
        let claim = self.claim.and_then(|c| c.status.as_ref()).map(|s| {
            Resources::from_list_or_zero(Some(if allocatable {
                &s.allocatable
            } else {
                &s.capacity
            }))
        });
        match (node, claim) {
            (Some(node), Some(claim)) if !self.initialized() => overlay(node, &claim),
            (Some(node), _) => node,
            (None, Some(claim)) => claim,
            (None, None) => Resources::default(),
        }
    }

    fn allocatable(&self) -> Resources {
        self.figure(true)
    }

    fn capacity(&self) -> Resources {
        self.figure(false)
    }

    /// Being deleted or disrupted: its pods need a new home and it takes no new ones.
    fn deleting(&self) -> bool {
        let claim_deleting = self.claim.is_some_and(|c| {
            c.metadata.deletion_timestamp.is_some()
                || c.status.as_ref().is_some_and(|s| {
                    s.conditions.iter().any(|cond| {
                        cond.type_ == claim_conditions::INSTANCE_TERMINATING
                            && cond.status == ConditionStatus::True
                    })
                })
        });
        let node_deleting = self
            .node
            .is_some_and(|n| n.metadata.deletion_timestamp.is_some());
        claim_deleting || node_deleting || self.disrupted()
    }

    fn disrupted(&self) -> bool {
        self.raw_taints()
            .iter()
            .any(|t| t.key == labels::DISRUPTED_TAINT && t.effect == TaintEffect::NoSchedule)
    }
}

fn is_daemon_pod(pod: &SlimPod) -> bool {
    owned_by(pod, "apps/v1", "DaemonSet")
}

/// The newest pod each DaemonSet controls, by the DaemonSet's uid (Karpenter's cluster state
/// keeps the same per DaemonSet).
fn newest_daemon_pods(pods: &[Arc<SlimPod>]) -> HashMap<&str, &SlimPod> {
    let mut newest: HashMap<&str, &SlimPod> = HashMap::new();
    for pod in pods {
        let Some(owner) = pod.metadata.owner_references.iter().flatten().find(|o| {
            o.controller == Some(true) && o.api_version == "apps/v1" && o.kind == "DaemonSet"
        }) else {
            continue;
        };
        let created = |p: &SlimPod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
        match newest.get(owner.uid.as_str()) {
            Some(seen) if created(seen) >= created(pod) => {}
            _ => {
                newest.insert(owner.uid.as_str(), pod);
            }
        }
    }
    newest
}

/// The pods the DaemonSets would run on a new node. As Karpenter, a DaemonSet's newest running
/// pod stands for it when it has one (its requests include what a `LimitRange` or a webhook
/// added), with the template's required node affinity in place of the one the DaemonSet
/// controller pinned to that pod's node; otherwise the template.
fn daemon_pods(
    daemonsets: &[Arc<DaemonSet>],
    running: &HashMap<&str, &SlimPod>,
) -> Vec<SchedulingPod> {
    daemonsets
        .iter()
        .filter_map(|ds| {
            let spec = &ds.spec;
            let running = ds.metadata.uid.as_deref().and_then(|uid| running.get(uid));
            let (mut metadata, pod_spec) = match running {
                Some(pod) => {
                    let mut pod_spec = pod.spec.clone();
                    if let Some(pod_spec) = pod_spec.as_mut() {
                        pod_spec.node_name = None;
                        pin_template_node_affinity(pod_spec, spec.template.spec.as_ref());
                    }
                    (pod.metadata.clone(), pod_spec)
                }
                None => (
                    spec.template.metadata.clone().unwrap_or_default().into(),
                    spec.template.spec.clone().map(SlimPodSpec::from),
                ),
            };
            metadata.namespace.clone_from(&ds.metadata.namespace);
            metadata.name = ds.metadata.name.as_deref().map(Arc::from);
            let pod = SlimPod {
                metadata,
                spec: pod_spec,
                status: None,
            };
            match SchedulingPod::from_pod(&pod) {
                Ok(p) => Some(p),
                Err(error) => {
                    tracing::debug!(error = %error, "leaving a daemonset out of the overhead");
                    None
                }
            }
        })
        .collect()
}

/// Gives a running daemon pod its template's required node affinity (none when the template has
/// none): the DaemonSet controller pins each pod to its node with a `metadata.name` field
/// selector, which says nothing about a new node.
fn pin_template_node_affinity(pod: &mut SlimPodSpec, template: Option<&PodSpec>) {
    let required = template
        .and_then(|t| t.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .clone()
        });
    let node_affinity = pod
        .affinity
        .get_or_insert_with(Default::default)
        .node_affinity
        .get_or_insert_with(Default::default);
    node_affinity.required_during_scheduling_ignored_during_execution = required;
}

/// Whether a run has anything to place: a provisionable pod, or a node or NodeClaim being
/// deleted or disrupted (whose pods may need a new home). A cheap scan, so an idle cluster
/// costs no instance type lookups.
pub(super) fn has_work(view: &dyn ClusterView) -> bool {
    if view.pods().iter().any(|p| provisionable(p).is_ok()) {
        return true;
    }
    let deleting_node = view.nodes().iter().any(|n| {
        StateNode {
            node: Some(n.as_ref()),
            claim: None,
            arcs: (Some(n), None),
        }
        .deleting()
    });
    deleting_node
        || view.nodeclaims().iter().any(|c| {
            StateNode {
                node: None,
                claim: Some(c.as_ref()),
                arcs: (None, Some(c)),
            }
            .deleting()
        })
}

/// Pairs NodeClaims with their Nodes by provider id: one state per launched NodeClaim (with its
/// Node once registered), then one per Node no NodeClaim claims.
fn pair<'a>(nodes: &'a [Arc<SlimNode>], claims: &'a [Arc<SlimNodeClaim>]) -> Vec<StateNode<'a>> {
    let mut paired: HashSet<String> = HashSet::new();
    let mut states: Vec<StateNode<'_>> = Vec::new();
    let mut node_by_provider: BTreeMap<&str, &Arc<SlimNode>> = BTreeMap::new();
    for node in nodes {
        if let Some(id) = node.spec.as_ref().and_then(|s| s.provider_id.as_deref()) {
            node_by_provider.insert(id, node);
        }
    }
    for claim in claims {
        let Some(id) = claim.status.as_ref().and_then(|s| s.provider_id.as_deref()) else {
            // Not launched yet: no node to place pods on.
            continue;
        };
        let node = node_by_provider.get(id).copied();
        if let Some(node) = node {
            paired.insert(node.metadata.name.clone().unwrap_or_default());
        }
        states.push(StateNode {
            node: node.map(AsRef::as_ref),
            claim: Some(claim.as_ref()),
            arcs: (node, Some(claim)),
        });
    }
    for node in nodes {
        if !paired.contains(node.metadata.name.as_deref().unwrap_or_default()) {
            states.push(StateNode {
                node: Some(node.as_ref()),
                claim: None,
                arcs: (Some(node), None),
            });
        }
    }
    states
}

/// Reads the snapshot for one run.
///
/// `cache` keeps the pods' conversions for the next run; a pod that has not changed since is
/// not converted again.
pub(crate) fn build(
    view: &dyn ClusterView,
    pools: &[UsablePool],
    cache: &mut PodConversions,
) -> Built {
    let mut built = Built::default();
    let pods = view.pods();
    let daemons = daemon_pods(&view.daemonsets(), &newest_daemon_pods(&pods));
    let nodes = view.nodes();
    let claims = view.nodeclaims();

    let states = pair(&nodes, &claims);

    // Every pod once: bound ones by node (one pass, not a scan per node), pending ones aside.
    let mut pending: Vec<&Arc<SlimPod>> = Vec::new();
    let mut by_node: HashMap<&str, Vec<&Arc<SlimPod>>> = HashMap::new();
    for pod in &pods {
        match pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            Some(node) if !node.is_empty() => by_node.entry(node).or_default().push(pod),
            _ if provisionable(pod).is_ok() => pending.push(pod),
            _ => {}
        }
    }

    // Pending pods first, then those of deleting nodes.
    let mut deleting_pods: Vec<&Arc<SlimPod>> = Vec::new();
    let mut deleting_claims: Vec<&SlimNodeClaim> = Vec::new();
    for state in &states {
        let pods_on: &[&Arc<SlimPod>] = state
            .node
            .and_then(|n| n.metadata.name.as_deref())
            .and_then(|name| by_node.get(name))
            .map_or(&[], Vec::as_slice);
        let deleting = state.deleting();
        built.states.push(StateRef {
            node: state.arcs.0.cloned(),
            claim: state.arcs.1.cloned(),
            name: state.name(),
            labels: state.labels(),
            initialized: state.initialized(),
            deleting,
            existing: (!deleting).then_some(built.snapshot.existing_nodes.len()),
            pods: pods_on.iter().map(|p| Arc::clone(p)).collect(),
        });
        if deleting {
            deleting_pods.extend(pods_on.iter().copied().filter(|p| reschedulable(p)));
            deleting_claims.extend(state.claim);
            continue;
        }
        built.snapshot.existing_nodes.push(existing_node(
            state,
            pods_on,
            &daemons,
            &mut cache.bound,
        ));
        built.nodes.push(NodeRef {
            node: state.node.and_then(|n| n.metadata.name.clone()),
            node_claim: state.claim.and_then(|c| c.metadata.name.clone()),
        });
    }
    let candidates = pending
        .into_iter()
        .map(|p| (p, true))
        .chain(deleting_pods.into_iter().map(|p| (p, false)));
    for (pod, is_pending) in candidates {
        let reference = PodRef::of(pod);
        if refuses_karpenter_nodes(pod) {
            built.ignored.push((
                reference,
                "configured to not run on a Karpenter provisioned node (karpenter.sh/nodepool DoesNotExist)".to_owned(),
            ));
            continue;
        }
        let converted = cache.pending.get(pod, |pod| {
            SchedulingPod::from_pod(pod).map_err(|error| error.to_string())
        });
        match converted {
            Ok(scheduling) => {
                built.snapshot.pods.push(scheduling);
                built.pods.push(reference);
                built.pending += usize::from(is_pending);
            }
            Err(error) => built.ignored.push((reference, error)),
        }
    }
    cache.sweep();

    // Namespace labels for pod (anti-)affinity terms with a `namespaceSelector`.
    built.snapshot.namespaces = view
        .namespaces()
        .iter()
        .filter_map(|ns| {
            let name = ns.metadata.name.clone()?;
            Some((name, ns.metadata.labels.clone().unwrap_or_default()))
        })
        .collect();

    for pool in pools {
        match node_pool_input(pool, &deleting_claims, &daemons) {
            Ok(input) => built.snapshot.node_pools.push(input),
            Err(error) => built.skipped_pools.push(PoolVerdict {
                node_pool: pool.nodepool.metadata.name.clone().unwrap_or_default(),
                reason: error.to_string(),
                detail: serde_json::Value::Null,
            }),
        }
    }
    built
}

fn existing_node(
    state: &StateNode<'_>,
    pods_on: &[&Arc<SlimPod>],
    daemons: &[SchedulingPod],
    cache: &mut PodCache<Arc<BoundFacts>>,
) -> ExistingNode {
    let labels = state.labels();
    let taints = state.taints();
    let mut requested = Resources::default();
    let mut daemon_running = Resources::default();
    let mut bound = Vec::with_capacity(pods_on.len());
    for pod in pods_on {
        let facts = cache.get(pod, BoundFacts::of);
        if facts.terminal {
            continue;
        }
        if let Some(requests) = &facts.requests {
            requested.add(requests);
            if facts.daemon {
                daemon_running.add(requests);
            }
        }
        bound.push(Arc::clone(&facts.pod));
    }
    let mut pending_daemons = daemon_requests_for_node(&labels, &taints, daemons);
    pending_daemons.sub(&daemon_running);
    pending_daemons.clamp_negative_to_zero();
    ExistingNode {
        name: state.name(),
        taints,
        allocatable: state.allocatable(),
        requested,
        pending_daemon_overhead: pending_daemons,
        capacity: state.capacity(),
        pods: bound,
        initialized: state.initialized(),
        registered: state.registered(),
        labels,
    }
}

/// Why a usable NodePool cannot be offered to the solver this run.
#[derive(Debug, thiserror::Error)]
enum PoolInputError {
    #[error(transparent)]
    NodePool(#[from] karpenter_core::domain::scheduling::NodePoolError),
    #[error(transparent)]
    Limits(#[from] karpenter_core::domain::limits::LimitsError),
}

fn node_pool_input(
    pool: &UsablePool,
    deleting_claims: &[&SlimNodeClaim],
    daemons: &[SchedulingPod],
) -> Result<NodePoolInput, PoolInputError> {
    let mut input = NodePoolInput::from_node_pool(&pool.nodepool, pool.instance_types.to_vec())?
        .with_daemonsets(daemons);
    // The solver subtracts the existing nodes; deleting NodeClaims still hold capacity.
    let held = limits::remaining_with_in_flight(
        &pool.nodepool,
        deleting_claims.iter().copied(),
        &pool.instance_types,
    )?;
    input.limits = held;
    Ok(input)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Pod, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    use super::*;

    fn bound(name: &str, app: &str) -> SlimPod {
        SlimPod::from(Pod {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some("ns".to_owned()),
                labels: Some(BTreeMap::from([("app".to_owned(), app.to_owned())])),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some("n1".to_owned()),
                ..PodSpec::default()
            }),
            status: None,
        })
    }

    #[test]
    fn bound_pods_of_a_workload_are_held_once_and_others_apart() {
        let first = BoundFacts::of(&bound("web-1", "web"));
        let second = BoundFacts::of(&bound("web-2", "web"));
        let other = BoundFacts::of(&bound("db-1", "db"));
        assert!(Arc::ptr_eq(&first, &second));
        assert!(Arc::ptr_eq(&first.pod, &second.pod));
        assert!(!Arc::ptr_eq(&first, &other));
        assert!(!Arc::ptr_eq(&first.pod, &other.pod));
        assert!(first.pod.counts_for_topology);
        let mut going = bound("web-3", "web");
        going.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        let going = BoundFacts::of(&going);
        assert!(!going.pod.counts_for_topology);
        assert!(!Arc::ptr_eq(&first.pod, &going.pod));
    }
}
