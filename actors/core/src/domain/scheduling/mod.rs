//! The scheduler: where pending pods go, and which NodeClaims to create for those that fit
//! nowhere yet (Karpenter's provisioning simulation, core
//! `pkg/controllers/provisioning/scheduling/`).
//!
//! Data flow: the Provisioner converts pods once ([`SchedulingPod::from_pod`]), gathers the
//! existing and in-flight nodes ([`ExistingNode`]) and the NodePools with their instance types,
//! DaemonSet overhead and limits ([`NodePoolInput`]) into a [`Snapshot`], and calls [`solve`].
//! The returned [`Plan`] says which pods go on which existing nodes, which NodeClaims to create
//! (requirements, requests, up to 60 cheapest instance types, their pods), and for every pod
//! left pending a [`Reason`] per NodePool that renders as a short line and serializes as a
//! structured object. [`cost_report`] prices the plan against a lower bound;
//! [`cost_lower_bound`] is a tighter one over what each pod may actually run on.
//!
//! Everything Karpenter honours is honoured: the requirements algebra (`In`, `NotIn`, `Exists`,
//! `DoesNotExist`, `Gt`, `Lt`, `minValues`, label aliases), requests with init containers, sidecars
//! and overhead, node selectors and required node affinity (OR terms, relaxed one at a time),
//! taints and tolerations, host ports, volume zone requirements, topology spread on any key
//! (`minDomains`, `matchLabelKeys`, node affinity and taint policies, `ScheduleAnyway`), pod affinity
//! and anti-affinity (required and preferred, including the inverse direction), preference
//! relaxation under `PREFERENCE_POLICY` Respect or Ignore, NodePool weights and limits.
//! The (private) `solver` module explains how it is made fast, how plans get cheaper, and where
//! it deliberately differs from Karpenter.

mod bitset;
mod bound;
mod explain;
mod input;
mod node_labels;
mod plan;
mod pod;
mod selector;
mod solver;
mod topology;
mod type_cache;
pub mod workload;

pub use bound::{CostLowerBound, cost_lower_bound, cost_lower_bound_of_shapes};
pub use input::{
    ExistingNode, NodePoolError, NodePoolInput, Snapshot, daemon_requests_for_node,
    scheduling_taints,
};
pub use node_labels::NodeLabels;
pub use plan::{
    CostReport, ExistingPlacement, InstanceTypeChecks, NewNodeClaim, Placement, Plan, PodFailure,
    PoolReason, Reason, TopologyRule, cost_report,
};
pub use pod::{
    AffinityTerm, BoundPod, HostPort, PodError, PodShape, PreferredTerm, SchedulingPod,
    SpreadConstraint, Toleration, TolerationOperator, first_untolerated, taints_from_api,
};
pub use selector::{LabelSelector, SelectorOperator, SelectorTerm};
pub use type_cache::TypeCache;

pub use karpenter_config::PreferencePolicy;

use crate::domain::instance_type::MAX_INSTANCE_TYPES;

/// What to do when placing a pod would take a NodeClaim off the capacity reservations it
/// could otherwise use (Karpenter's `ReservedOfferingMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReservedOfferingMode {
    /// Defer the pod to a later run instead (provisioning).
    #[default]
    Strict,
    /// Fall back to on-demand or spot (disruption simulations).
    Fallback,
}

/// How the scheduler runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// `PREFERENCE_POLICY`: respect preferences (relaxing them one by one) or ignore them.
    pub preference_policy: PreferencePolicy,
    /// Most instance types per new NodeClaim.
    pub max_instance_types: usize,
    /// The `ReservedCapacity` feature gate: count capacity reservations as they are used.
    pub reserved_capacity: bool,
    pub reserved_offering_mode: ReservedOfferingMode,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            preference_policy: PreferencePolicy::Respect,
            max_instance_types: MAX_INSTANCE_TYPES,
            reserved_capacity: false,
            reserved_offering_mode: ReservedOfferingMode::Strict,
        }
    }
}

/// The order in which the scheduler tries existing nodes (indices into `nodes`): initialized
/// nodes first, then by name. A pod goes to the first that can take it.
#[must_use]
pub fn existing_node_order(nodes: &[ExistingNode]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..nodes.len()).collect();
    order.sort_by(|a, b| {
        let (na, nb) = (&nodes[*a], &nodes[*b]);
        nb.initialized
            .cmp(&na.initialized)
            .then_with(|| na.name.cmp(&nb.name))
    });
    order
}

/// Places the snapshot's pods (see the module docs).
#[must_use]
pub fn solve(snapshot: &Snapshot, options: &Options) -> Plan {
    let mut solver = solver::Solver::new(snapshot, options);
    solver.run();
    solver.into_plan()
}

/// [`solve`], also telling for each pod whether its very first attempt placed it, with its
/// requirements unrelaxed. Such a pod went to the first node, in the scheduler's order, that
/// could take it at that moment; a pod that failed an attempt first, or needed a relaxed
/// preference, may owe its place to what was placed in between. Disruption uses this to prove
/// that a simulation over a prefix of the existing nodes answers as the whole cluster would.
#[must_use]
pub fn solve_observed(snapshot: &Snapshot, options: &Options) -> (Plan, Vec<bool>) {
    solve_shared(snapshot, options, None)
}

/// [`solve_observed`] keeping the per-class instance-type answers in `cache` across calls
/// over the same pools (see [`TypeCache`]); the plan is the one without a cache.
#[must_use]
pub fn solve_shared(
    snapshot: &Snapshot,
    options: &Options,
    cache: Option<&TypeCache>,
) -> (Plan, Vec<bool>) {
    let mut solver = solver::Solver::new(snapshot, options);
    solver.type_cache = cache;
    solver.run();
    let first_try = std::mem::take(&mut solver.first_try);
    (solver.into_plan(), first_try)
}
