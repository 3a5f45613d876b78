//! What the scheduler decided: pods placed on existing nodes, new NodeClaims to create, and
//! for every pod it could not place, why, NodePool by NodePool. Also the plan's cost and a
//! lower bound to judge it by.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::domain::instance_type::InstanceType;
use crate::domain::requirements::{Incompatibility, Requirements};
use crate::domain::resources::{Resources, approx_f64};

use super::input::Snapshot;

/// Pods placed on a node that exists or is already launching.
#[derive(Debug, Clone, PartialEq)]
pub struct ExistingPlacement {
    /// Index into [`Snapshot::existing_nodes`].
    pub node: usize,
    pub node_name: String,
    /// Indices into [`Snapshot::pods`].
    pub pods: Vec<usize>,
}

/// A NodeClaim to create.
#[derive(Debug, Clone, PartialEq)]
pub struct NewNodeClaim {
    pub node_pool: String,
    /// Index into [`Snapshot::node_pools`].
    pub node_pool_index: usize,
    /// The NodeClaim's requirements: the pool's, its pods', the topology domains chosen, and
    /// `node.kubernetes.io/instance-type In [..]` for the instance types below.
    pub requirements: Requirements,
    /// What its pods and the pool's DaemonSets request.
    pub requests: Resources,
    /// Up to `max_instance_types` instance types that fit, cheapest first.
    pub instance_types: Vec<Arc<InstanceType>>,
    /// Indices into [`Snapshot::pods`].
    pub pods: Vec<usize>,
    /// $/h of the cheapest compatible offering among the instance types.
    pub price: f64,
}

impl NewNodeClaim {
    /// The names of the instance types, cheapest first.
    #[must_use]
    pub fn instance_type_names(&self) -> Vec<&str> {
        self.instance_types
            .iter()
            .map(|t| t.name.as_str())
            .collect()
    }
}

/// What kind of topology rule refused a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum TopologyRule {
    TopologySpread,
    PodAffinity,
    PodAntiAffinity,
    /// Another pod's required anti-affinity keeps this one out.
    InverseAntiAffinity,
}

impl TopologyRule {
    fn as_str(self) -> &'static str {
        match self {
            Self::TopologySpread => "topology spread",
            Self::PodAffinity => "pod affinity",
            Self::PodAntiAffinity => "pod anti-affinity",
            Self::InverseAntiAffinity => "another pod's anti-affinity",
        }
    }
}

/// Why a NodePool could not take a pod.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Reason {
    /// The NodePool's requirements leave no instance type with an available offering.
    #[serde(rename_all = "camelCase")]
    NoInstanceTypes,
    /// A taint of the NodePool the pod does not tolerate.
    #[serde(rename_all = "camelCase")]
    Taint {
        key: String,
        value: Option<String>,
        effect: String,
    },
    /// A host port already taken (by the pool's DaemonSets).
    #[serde(rename_all = "camelCase")]
    HostPort { port: String },
    /// The pod's node selector or required node affinity cannot be met by the pool.
    #[serde(rename_all = "camelCase")]
    Requirements { detail: Incompatibility },
    /// The pod names a specific hostname.
    #[serde(rename_all = "camelCase")]
    Hostname { requirement: String },
    /// A topology spread constraint or pod (anti-)affinity term cannot be met.
    #[serde(rename_all = "camelCase")]
    Topology {
        rule: TopologyRule,
        topology_key: String,
        selector: String,
        /// Pods per domain (at most 25 domains).
        counts: BTreeMap<String, u32>,
        /// Domains the pod's own requirements allow.
        pod_domains: String,
    },
    /// Every instance type would break a limit of the pool.
    #[serde(rename_all = "camelCase")]
    Limits { resource: String },
    /// No instance type meets all of: the requirements, the resources, an available offering.
    #[serde(rename_all = "camelCase")]
    InstanceTypes {
        requirements: String,
        requests: String,
        #[serde(flatten)]
        checks: InstanceTypeChecks,
    },
    /// Too few instance types remain to offer `minValues` distinct values.
    #[serde(rename_all = "camelCase")]
    MinValues {
        key: String,
        needed: u32,
        available: u32,
    },
    /// The pod could use a capacity reservation that is used up; it waits for a later run
    /// rather than falling back to on-demand or spot.
    #[serde(rename_all = "camelCase")]
    ReservedCapacity,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoInstanceTypes => {
                f.write_str("nodepool requirements filtered out all available instance types")
            }
            Self::Taint { key, value, effect } => match value {
                Some(value) => write!(f, "did not tolerate taint {key}={value}:{effect}"),
                None => write!(f, "did not tolerate taint {key}:{effect}"),
            },
            Self::HostPort { port } => write!(f, "host port {port} is already in use"),
            Self::Requirements { detail } => write!(f, "incompatible requirements, {detail}"),
            Self::Hostname { requirement } => {
                write!(f, "pod requires a specific node ({requirement})")
            }
            Self::Topology {
                rule,
                topology_key,
                selector,
                counts,
                pod_domains,
            } => {
                write!(
                    f,
                    "unsatisfiable {} on {topology_key} for pods {selector}",
                    rule.as_str()
                )?;
                if !counts.is_empty() {
                    f.write_str(" (counts")?;
                    for (domain, count) in counts {
                        write!(f, " {domain}={count}")?;
                    }
                    f.write_str(")")?;
                }
                if !pod_domains.is_empty() {
                    write!(f, ", pod allows {pod_domains}")?;
                }
                Ok(())
            }
            Self::Limits { resource } => {
                write!(
                    f,
                    "all available instance types exceed the nodepool's {resource} limit"
                )
            }
            Self::InstanceTypes {
                requirements,
                requests,
                checks,
            } => {
                write!(f, "{}, requests={requests}", checks.summary())?;
                // When only resources are short the requirements are beside the point.
                let only_resources = checks.requirements_met && !checks.fits && checks.has_offering;
                if !requirements.is_empty() && !only_resources {
                    write!(f, ", requirements={requirements}")?;
                }
                Ok(())
            }
            Self::MinValues {
                key,
                needed,
                available,
            } => write!(
                f,
                "minValues of {key} not met: {available} of {needed} values remain"
            ),
            Self::ReservedCapacity => f.write_str(
                "compatible capacity reservations are used up; waiting for reserved capacity",
            ),
        }
    }
}

/// Which criteria ruled out every instance type of a NodePool: whether any type met the
/// requirements, had enough resources, had an available compatible offering, and whether any
/// met each pair while missing the third (Karpenter's `InstanceTypeFilterError`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
#[expect(
    clippy::struct_excessive_bools,
    reason = "one flag per criterion, as Karpenter reports them"
)]
pub struct InstanceTypeChecks {
    pub requirements_met: bool,
    pub fits: bool,
    pub has_offering: bool,
    pub requirements_and_fits: bool,
    pub requirements_and_offering: bool,
    pub fits_and_offering: bool,
}

impl InstanceTypeChecks {
    /// Karpenter's wording for what ruled the instance types out.
    #[must_use]
    pub fn summary(self) -> &'static str {
        match (self.requirements_met, self.fits, self.has_offering) {
            (false, false, false) => {
                "no instance type met the requirements, had enough resources or had a required offering"
            }
            (false, false, true) => "no instance type met the requirements or had enough resources",
            (false, true, false) => {
                "no instance type met the requirements or had a required offering"
            }
            (true, false, false) => {
                "no instance type had enough resources or had a required offering"
            }
            (false, true, true) => "no instance type met all requirements",
            (true, false, true) => "no instance type has enough resources",
            (true, true, false) => "no instance type has the required offering",
            (true, true, true) if self.requirements_and_fits => {
                "no instance type that meets the requirements and has enough resources has a required offering"
            }
            (true, true, true) if self.fits_and_offering => {
                "no instance type that has enough resources and a required offering meets the requirements"
            }
            (true, true, true) if self.requirements_and_offering => {
                "no instance type that meets the requirements and has a required offering has enough resources"
            }
            (true, true, true) => {
                "no instance type meets the requirements, resources and offering together"
            }
        }
    }
}

/// Why one NodePool could not take the pod.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolReason {
    pub node_pool: String,
    pub reason: Reason,
}

/// A pod the plan leaves pending.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodFailure {
    /// Index into [`Snapshot::pods`].
    pub pod: usize,
    /// `namespace/name`.
    pub pod_key: String,
    /// One reason per NodePool, in the order the pools were tried.
    pub reasons: Vec<PoolReason>,
    /// Deferred for reserved capacity rather than unschedulable: Karpenter records no
    /// `FailedScheduling` event for these.
    pub deferred: bool,
}

impl PodFailure {
    /// A one-line message for a `FailedScheduling` event.
    #[must_use]
    pub fn message(&self) -> String {
        if self.reasons.is_empty() {
            return "no nodepool can take the pod (no nodepools)".to_owned();
        }
        self.reasons
            .iter()
            .map(|r| format!("incompatible with nodepool {:?}, {}", r.node_pool, r.reason))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// The scheduler's answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub existing: Vec<ExistingPlacement>,
    pub new_node_claims: Vec<NewNodeClaim>,
    pub failures: Vec<PodFailure>,
    /// NodePools whose requirements leave no instance type (Karpenter's
    /// `NoCompatibleInstanceTypes` event).
    pub pools_without_instance_types: Vec<String>,
}

impl Plan {
    /// $/h of the new NodeClaims at their cheapest instance type.
    #[must_use]
    pub fn cost(&self) -> f64 {
        self.new_node_claims.iter().map(|c| c.price).sum()
    }

    /// How many pods the plan places.
    #[must_use]
    pub fn scheduled_pods(&self) -> usize {
        self.existing.iter().map(|e| e.pods.len()).sum::<usize>()
            + self
                .new_node_claims
                .iter()
                .map(|c| c.pods.len())
                .sum::<usize>()
    }

    /// Where each pod went: `Some(Placement)` or `None` when it failed.
    #[must_use]
    pub fn placements(&self, pods: usize) -> Vec<Option<Placement>> {
        let mut out = vec![None; pods];
        for existing in &self.existing {
            for pod in &existing.pods {
                if let Some(slot) = out.get_mut(*pod) {
                    *slot = Some(Placement::Existing(existing.node));
                }
            }
        }
        for (i, claim) in self.new_node_claims.iter().enumerate() {
            for pod in &claim.pods {
                if let Some(slot) = out.get_mut(*pod) {
                    *slot = Some(Placement::NewNodeClaim(i));
                }
            }
        }
        out
    }
}

/// Where a pod went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Index into [`Snapshot::existing_nodes`].
    Existing(usize),
    /// Index into [`Plan::new_node_claims`].
    NewNodeClaim(usize),
}

/// The plan's cost against a lower bound no plan can beat.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostReport {
    /// $/h of the new NodeClaims.
    pub cost: f64,
    /// For each resource, the requests of the pods on new NodeClaims priced at the cheapest
    /// available $ per unit of allocatable; the largest of these.
    pub lower_bound: f64,
}

impl CostReport {
    /// cost / lower bound (1.0 is perfect; 1.0 when nothing was bought).
    #[must_use]
    pub fn ratio(&self) -> f64 {
        if self.lower_bound > 0.0 {
            self.cost / self.lower_bound
        } else {
            1.0
        }
    }
}

/// Prices the plan against the lower bound: any NodeClaim costs at least, per resource, its
/// requests times the cheapest $ per allocatable unit of that resource across all instance
/// types, so the sum over NodeClaims is at least the same bound over all their pods.
#[must_use]
pub fn cost_report(snapshot: &Snapshot, plan: &Plan) -> CostReport {
    let mut requested = Resources::default();
    for claim in &plan.new_node_claims {
        for pod in &claim.pods {
            if let Some(p) = snapshot.pods.get(*pod) {
                requested.add(&p.shape.requests);
            }
        }
    }
    let mut lower_bound: f64 = 0.0;
    for (resource, amount) in requested.iter() {
        if amount <= 0 {
            continue;
        }
        let cheapest_per_unit = snapshot
            .node_pools
            .iter()
            .flat_map(|pool| pool.instance_types.iter())
            .filter_map(|t| {
                let allocatable = t.allocatable().get(resource);
                let price = t
                    .available_offerings()
                    .map(|o| o.price)
                    .min_by(f64::total_cmp)?;
                (allocatable > 0).then(|| price / approx_f64(allocatable))
            })
            .min_by(f64::total_cmp);
        if let Some(per_unit) = cheapest_per_unit {
            lower_bound = lower_bound.max(per_unit * approx_f64(amount));
        }
    }
    CostReport {
        cost: plan.cost(),
        lower_bound,
    }
}
