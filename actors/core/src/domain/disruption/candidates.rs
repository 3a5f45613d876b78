//! Which nodes may be disrupted at all (Karpenter's `NewCandidate`, spec section 2), what it
//! costs to disrupt them (section 3), and each method's filter (`ShouldDisrupt`).
//!
//! A state node is checked in Karpenter's order; the first failing check rejects it with a
//! [`Blocker`] whose [`Blocker::message`] is the text Karpenter publishes in its
//! `DisruptionBlocked` event. Nodes that pass become [`Candidate`]s with their NodePool,
//! instance type, capacity type, zone, reschedulable pods and disruption cost. Each method then
//! filters them ([`emptiness_filter`], [`drift_filter`], [`consolidation_filter`]), the
//! consolidation filters with an [`Unconsolidatable`] reason and Karpenter's event text.

use std::cell::OnceCell;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use k8s_openapi::jiff::Timestamp;

use crate::apis::labels;
use crate::apis::nodepool::ConsolidationPolicy;
use crate::domain::instance_type::InstanceType;

use super::DisruptionError;
use super::input::{DisruptionInput, NodePod, Pdb, PoolInput, StateNode};

/// Why a state node is no candidate for any method (spec section 2, checks 1 to 10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocker {
    /// No NodeClaim: not managed by Karpenter (no event).
    Unmanaged,
    /// A NodeClaim without a Node yet (event on the NodeClaim only).
    NoNode,
    NotInitialized,
    Deleting,
    Nominated,
    /// The node's `karpenter.sh/do-not-disrupt` annotation.
    DoNotDisruptNode,
    NoNodePoolLabel,
    /// Already in the orchestration queue (no event).
    Queued,
    /// The NodePool is unknown or its instance types could not be listed.
    NodePoolNotFound {
        node_pool: String,
    },
    /// An active pod with `karpenter.sh/do-not-disrupt` (`namespace/name`).
    DoNotDisruptPod {
        pod: String,
    },
    /// A PDB that allows no disruption selects an evictable pod (`namespace/name` of the PDB).
    Pdb {
        pdb: String,
    },
}

impl Blocker {
    /// The `DisruptionBlocked` event message, `None` when Karpenter publishes none.
    #[must_use]
    pub fn message(&self) -> Option<String> {
        Some(match self {
            Self::Unmanaged | Self::Queued => return None,
            Self::NoNode => "Nodeclaim does not have an associated node".to_owned(),
            Self::NotInitialized => "Node isn't initialized".to_owned(),
            Self::Deleting => "Node is deleting or marked for deletion".to_owned(),
            Self::Nominated => "Node is nominated for a pending pod".to_owned(),
            Self::DoNotDisruptNode => format!(
                "Disruption is blocked through the {:?} annotation",
                labels::DO_NOT_DISRUPT
            ),
            Self::NoNodePoolLabel => format!(
                "Node doesn't have required label (label={})",
                labels::NODEPOOL
            ),
            Self::NodePoolNotFound { node_pool } => {
                format!("NodePool not found (NodePool={node_pool})")
            }
            Self::DoNotDisruptPod { pod } => {
                format!(
                    "Pod has {:?} annotation (Pod={pod})",
                    labels::DO_NOT_DISRUPT
                )
            }
            Self::Pdb { pdb } => {
                format!("Pdb prevents pod evictions (PodDisruptionBudget={pdb})")
            }
        })
    }

    /// A short label for metrics and reports.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Unmanaged => "unmanaged",
            Self::NoNode => "no_node",
            Self::NotInitialized => "not_initialized",
            Self::Deleting => "deleting",
            Self::Nominated => "nominated",
            Self::DoNotDisruptNode => "do_not_disrupt_node",
            Self::NoNodePoolLabel => "no_nodepool_label",
            Self::Queued => "queued",
            Self::NodePoolNotFound { .. } => "nodepool_not_found",
            Self::DoNotDisruptPod { .. } => "do_not_disrupt_pod",
            Self::Pdb { .. } => "pdb",
        }
    }

    /// Whether the event goes on the NodeClaim only (there is no Node).
    #[must_use]
    pub fn node_claim_only(&self) -> bool {
        matches!(self, Self::NoNode)
    }

    /// Pod-level blockers, which Drift ignores for NodeClaims with a termination grace
    /// period.
    #[must_use]
    pub fn is_pod_block(&self) -> bool {
        matches!(self, Self::DoNotDisruptPod { .. } | Self::Pdb { .. })
    }
}

/// Why a candidate is filtered out of consolidation (spec section 2, `ShouldDisrupt`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unconsolidatable {
    InstanceTypeNotFound {
        instance_type: String,
    },
    NoCapacityTypeLabel,
    NoZoneLabel,
    /// `consolidateAfter: Never`.
    ConsolidationDisabled {
        node_pool: String,
    },
    /// `consolidationPolicy: WhenEmpty` (for Multi and Single).
    UnderutilizedDisabled {
        node_pool: String,
    },
    /// `Consolidatable` is not True yet (no event).
    NotConsolidatable,
}

impl Unconsolidatable {
    /// The `Unconsolidatable` event message, `None` when Karpenter publishes none.
    #[must_use]
    pub fn message(&self) -> Option<String> {
        Some(match self {
            Self::NotConsolidatable => return None,
            Self::InstanceTypeNotFound { instance_type } => {
                format!("Instance Type {instance_type:?} not found")
            }
            Self::NoCapacityTypeLabel => {
                format!("Node does not have label {:?}", labels::CAPACITY_TYPE)
            }
            Self::NoZoneLabel => format!("Node does not have label {:?}", labels::ZONE),
            Self::ConsolidationDisabled { node_pool } => {
                format!("NodePool {node_pool:?} has consolidation disabled")
            }
            Self::UnderutilizedDisabled { node_pool } => {
                format!("NodePool {node_pool:?} has non-empty consolidation disabled")
            }
        })
    }

    /// A short label for metrics and reports.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::InstanceTypeNotFound { .. } => "instance_type_not_found",
            Self::NoCapacityTypeLabel => "no_capacity_type",
            Self::NoZoneLabel => "no_zone",
            Self::ConsolidationDisabled { .. } => "consolidation_disabled",
            Self::UnderutilizedDisabled { .. } => "underutilized_disabled",
            Self::NotConsolidatable => "not_consolidatable",
        }
    }
}

/// A node some method may disrupt.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Index into [`DisruptionInput::nodes`].
    pub node: usize,
    pub name: String,
    pub node_claim: String,
    pub node_pool: String,
    /// Index into [`DisruptionInput::pools`].
    pub pool: usize,
    /// Looked up by the `node.kubernetes.io/instance-type` label in the pool's types.
    pub instance_type: Option<Arc<InstanceType>>,
    pub capacity_type: Option<String>,
    pub zone: Option<String>,
    /// Indices into the state node's pods of its reschedulable pods.
    pub reschedulable: Vec<usize>,
    /// Disruption cost: the pods' eviction costs times the lifetime remaining.
    pub cost: f64,
    /// A pod-level blocker Drift ignores (termination grace period set); graceful methods
    /// never see such a candidate.
    pub pod_block: Option<Blocker>,
    /// Its price, once consolidation asked for it.
    pub(super) price: OnceCell<Result<Option<f64>, DisruptionError>>,
}

impl Candidate {
    /// Whether it runs no pod that needs a new home.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.reschedulable.is_empty()
    }
}

/// A state node rejected by [`build`], for the `DisruptionBlocked` events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockedNode {
    pub node: String,
    pub node_claim: Option<String>,
    pub blocker: Blocker,
}

/// The candidates of a round and the state nodes rejected.
#[derive(Debug, Clone, Default)]
pub struct Candidates {
    /// Every node that passed the node checks, sorted by disruption cost (ties by name).
    /// Those with a `pod_block` are candidates for Drift only.
    pub all: Vec<Candidate>,
    pub blocked: Vec<BlockedNode>,
}

/// Karpenter's `EvictionCost`: 1, plus the deletion cost / 2^27, plus the priority / 2^25,
/// clamped to [-10, 10].
#[must_use]
pub fn eviction_cost(pod: &NodePod) -> f64 {
    /// Scales a pod deletion cost (an `int32`) to about [-16, 16] pods.
    const DELETION_COST_SCALE: f64 = 134_217_728.0; // 2^27
    /// Scales a priority to about [-64, 30] pods.
    const PRIORITY_SCALE: f64 = 33_554_432.0; // 2^25
    let mut cost = 1.0;
    if let Some(deletion_cost) = pod.deletion_cost {
        cost += deletion_cost / DELETION_COST_SCALE;
    }
    if let Some(priority) = pod.priority {
        cost += f64::from(priority) / PRIORITY_SCALE;
    }
    cost.clamp(-10.0, 10.0)
}

/// Karpenter's `LifetimeRemaining`: the share of `expireAfter` still ahead, in [0, 1]; 1 when
/// the node never expires.
#[must_use]
pub fn lifetime_remaining(node: &StateNode, now: Timestamp) -> f64 {
    let Some(claim) = &node.node_claim else {
        return 1.0;
    };
    let Some(expire_after) = claim.expire_after else {
        return 1.0;
    };
    let total = expire_after.as_secs_f64();
    if total <= 0.0 {
        return 0.0;
    }
    let age = now.duration_since(claim.created).as_secs_f64();
    ((total - age) / total).clamp(0.0, 1.0)
}

/// The disruption cost of a node: every pod's eviction cost (DaemonSet, static and finished
/// pods included) times the lifetime remaining.
#[must_use]
pub fn disruption_cost(node: &StateNode, now: Timestamp) -> f64 {
    node.pods.iter().map(|p| eviction_cost(p)).sum::<f64>() * lifetime_remaining(node, now)
}

/// The PDB that keeps a pod from being evicted, if any (Karpenter's `isEvictable` with the
/// zero-disruptions or fully-blocking test).
fn blocking_pdb<'a>(pod: &NodePod, pdbs: &'a [Pdb], fully: bool) -> Option<&'a Pdb> {
    if !pod.is_evictable() {
        return None;
    }
    for pdb in pdbs {
        if *pdb.namespace != *pod.pod.namespace || !pdb.selector.matches(&pod.pod.shape.labels) {
            continue;
        }
        if pdb.always_allow_unhealthy && pod.not_ready {
            return None;
        }
        let blocks = if fully {
            pdb.fully_blocking
        } else {
            pdb.disruptions_allowed == 0
        };
        if blocks {
            return Some(pdb);
        }
    }
    None
}

/// Karpenter's `IsCurrentlyReschedulable`: reschedulable, no `do-not-disrupt`, and no PDB that
/// will never allow its eviction. These are the pods a simulation moves.
#[must_use]
pub fn is_currently_reschedulable(pod: &NodePod, pdbs: &[Pdb]) -> bool {
    pod.is_reschedulable() && !pod.do_not_disrupt && blocking_pdb(pod, pdbs, true).is_none()
}

/// The pod-level check (spec check 10): an active pod with `do-not-disrupt`, else the first
/// evictable pod a zero-disruption PDB selects.
fn pod_blocker(node: &StateNode, pdbs: &[Pdb]) -> Option<Blocker> {
    if let Some(pod) = node.pods.iter().find(|p| p.is_active() && p.do_not_disrupt) {
        return Some(Blocker::DoNotDisruptPod { pod: pod.key() });
    }
    node.pods
        .iter()
        .find_map(|p| blocking_pdb(p, pdbs, false))
        .map(|pdb| Blocker::Pdb { pdb: pdb.key() })
}

/// Karpenter's node-level checks, in order (spec checks 1 to 9).
fn node_blocker(node: &StateNode, input: &DisruptionInput) -> Result<usize, Blocker> {
    if node.node_claim.is_none() {
        return Err(Blocker::Unmanaged);
    }
    if !node.has_node {
        return Err(Blocker::NoNode);
    }
    if !node.initialized {
        return Err(Blocker::NotInitialized);
    }
    if node.marked_for_deletion {
        return Err(Blocker::Deleting);
    }
    if node.is_nominated(input.now) {
        return Err(Blocker::Nominated);
    }
    if node.do_not_disrupt {
        return Err(Blocker::DoNotDisruptNode);
    }
    let Some(pool_name) = node.node_pool() else {
        return Err(Blocker::NoNodePoolLabel);
    };
    if input.queued.contains(&node.name) {
        return Err(Blocker::Queued);
    }
    input
        .pools
        .iter()
        .position(|p| p.name == pool_name && !p.instance_types.is_empty())
        .ok_or_else(|| Blocker::NodePoolNotFound {
            node_pool: pool_name.to_owned(),
        })
}

/// Every state node checked (Karpenter's `GetCandidates` before the method filter): the
/// candidates sorted by disruption cost, and the rejected nodes.
#[must_use]
pub fn build(input: &DisruptionInput) -> Candidates {
    let mut out = Candidates::default();
    let mut types = TypesByName::new(&input.pools);
    for (index, node) in input.nodes.iter().enumerate() {
        let reject = |blocker: Blocker| BlockedNode {
            node: node.name.clone(),
            node_claim: node.node_claim.as_ref().map(|c| c.name.clone()),
            blocker,
        };
        let pool = match node_blocker(node, input) {
            Ok(pool) => pool,
            Err(blocker) => {
                out.blocked.push(reject(blocker));
                continue;
            }
        };
        let pod_block = pod_blocker(node, &input.pdbs);
        let grace_period = node
            .node_claim
            .as_ref()
            .is_some_and(|c| c.termination_grace_period.is_some());
        if let Some(blocker) = &pod_block {
            // Graceful methods reject it (and publish the event); Drift keeps it when the
            // NodeClaim has a termination grace period.
            out.blocked.push(reject(blocker.clone()));
            if !grace_period {
                continue;
            }
        }
        out.all
            .push(candidate(input, index, pool, pod_block, &mut types));
    }
    sort_by_cost(&mut out.all);
    out
}

/// Each pool's instance types by name, indexed on first use: a round looks up the type of
/// every node, and a pool lists hundreds.
struct TypesByName<'a> {
    pools: &'a [PoolInput],
    by_pool: Vec<Option<FxHashMap<&'a str, &'a Arc<InstanceType>>>>,
}

impl<'a> TypesByName<'a> {
    fn new(pools: &'a [PoolInput]) -> Self {
        Self {
            pools,
            by_pool: pools.iter().map(|_| None).collect(),
        }
    }

    /// The pool's first instance type of this name.
    fn get(&mut self, pool: usize, name: &str) -> Option<Arc<InstanceType>> {
        let listed = &self.pools.get(pool)?.instance_types;
        let by_name = self.by_pool.get_mut(pool)?.get_or_insert_with(|| {
            let mut by_name = FxHashMap::default();
            for instance_type in listed {
                by_name
                    .entry(instance_type.name.as_str())
                    .or_insert(instance_type);
            }
            by_name
        });
        by_name.get(name).map(|t| Arc::clone(t))
    }
}

/// A state node as a candidate, whatever its checks say (for simulating its removal).
pub(super) fn any_node(input: &DisruptionInput, index: usize) -> Candidate {
    let pool = input.nodes[index]
        .node_pool()
        .and_then(|p| input.pools.iter().position(|pool| pool.name == p))
        .unwrap_or(0);
    candidate(
        input,
        index,
        pool,
        None,
        &mut TypesByName::new(&input.pools),
    )
}

/// The candidate for a state node of a pool: its instance type by label in the pool's
/// types, capacity type, zone, reschedulable pods and cost.
fn candidate(
    input: &DisruptionInput,
    index: usize,
    pool: usize,
    pod_block: Option<Blocker>,
    types: &mut TypesByName<'_>,
) -> Candidate {
    let node = &input.nodes[index];
    let instance_type = node
        .label(labels::INSTANCE_TYPE)
        .and_then(|name| types.get(pool, name));
    Candidate {
        node: index,
        name: node.name.clone(),
        node_claim: node
            .node_claim
            .as_ref()
            .map(|c| c.name.clone())
            .unwrap_or_default(),
        node_pool: node.node_pool().unwrap_or_default().to_owned(),
        pool,
        instance_type,
        capacity_type: node.label(labels::CAPACITY_TYPE).map(str::to_owned),
        zone: node.label(labels::ZONE).map(str::to_owned),
        reschedulable: node
            .pods
            .iter()
            .enumerate()
            .filter(|(_, p)| p.is_reschedulable())
            .map(|(i, _)| i)
            .collect(),
        cost: disruption_cost(node, input.now),
        pod_block,
        price: OnceCell::new(),
    }
}

/// Ascending disruption cost, ties by name (Karpenter's sort is unstable; a deterministic
/// order is an allowed deviation).
pub fn sort_by_cost(candidates: &mut [Candidate]) {
    candidates.sort_by(|a, b| a.cost.total_cmp(&b.cost).then_with(|| a.name.cmp(&b.name)));
}

fn consolidate_after_never(pool: &PoolInput) -> bool {
    matches!(pool.disruption.consolidate_after.get(), Ok(None))
}

/// Emptiness's filter: consolidation enabled, no reschedulable pods, `Consolidatable`.
pub fn emptiness_filter(
    candidate: &Candidate,
    input: &DisruptionInput,
) -> Result<(), Unconsolidatable> {
    // Nodes with a pod-level blocker are candidates for Drift only.
    if candidate.pod_block.is_some() {
        return Err(Unconsolidatable::NotConsolidatable);
    }
    let pool = &input.pools[candidate.pool];
    if consolidate_after_never(pool) {
        return Err(Unconsolidatable::ConsolidationDisabled {
            node_pool: pool.name.clone(),
        });
    }
    if !candidate.is_empty() || !consolidatable(candidate, input) {
        return Err(Unconsolidatable::NotConsolidatable);
    }
    Ok(())
}

/// Drift's filter: `Drifted=True`, nothing else.
#[must_use]
pub fn drift_filter(candidate: &Candidate, input: &DisruptionInput) -> bool {
    input.nodes[candidate.node]
        .node_claim
        .as_ref()
        .is_some_and(|c| c.drifted_since.is_some())
}

fn consolidatable(candidate: &Candidate, input: &DisruptionInput) -> bool {
    input.nodes[candidate.node]
        .node_claim
        .as_ref()
        .is_some_and(|c| c.consolidatable)
}

/// Multi- and single-node consolidation's filter, in Karpenter's order.
pub fn consolidation_filter(
    candidate: &Candidate,
    input: &DisruptionInput,
) -> Result<(), Unconsolidatable> {
    // Nodes with a pod-level blocker are candidates for Drift only.
    if candidate.pod_block.is_some() {
        return Err(Unconsolidatable::NotConsolidatable);
    }
    let node = &input.nodes[candidate.node];
    if candidate.instance_type.is_none() {
        return Err(Unconsolidatable::InstanceTypeNotFound {
            instance_type: node.label(labels::INSTANCE_TYPE).unwrap_or("").to_owned(),
        });
    }
    if candidate.capacity_type.is_none() {
        return Err(Unconsolidatable::NoCapacityTypeLabel);
    }
    if candidate.zone.is_none() {
        return Err(Unconsolidatable::NoZoneLabel);
    }
    let pool = &input.pools[candidate.pool];
    if consolidate_after_never(pool) {
        return Err(Unconsolidatable::ConsolidationDisabled {
            node_pool: pool.name.clone(),
        });
    }
    if pool.disruption.consolidation_policy != ConsolidationPolicy::WhenEmptyOrUnderutilized {
        return Err(Unconsolidatable::UnderutilizedDisabled {
            node_pool: pool.name.clone(),
        });
    }
    if !consolidatable(candidate, input) {
        return Err(Unconsolidatable::NotConsolidatable);
    }
    Ok(())
}
