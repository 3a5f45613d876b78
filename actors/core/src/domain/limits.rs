//! What a `NodePool` runs and how much of its `spec.limits` is left: the numbers behind
//! `status.resources` (the NodePoolActor writes them) and the Provisioner's limit checks.
//!
//! Usage follows Karpenter's cluster state (`NodePoolResourcesFor`): every NodeClaim labelled
//! with the pool that is not being deleted contributes its capacity and one `nodes`; an
//! initialized NodeClaim counts its Node's capacity, one still starting counts the Node's
//! capacity with the NodeClaim's filling the resources the kubelet has not reported yet (or the
//! NodeClaim's alone before the Node registers). A NodeClaim without any capacity yet (not
//! launched) counts nothing, as in Karpenter; the Provisioner subtracts in-flight launches
//! itself.
//!
//! Data flow: NodeClaims and their Nodes (from the actors' view) -> [`usage_of`] (or
//! [`CapacityCache::usage`], which keeps each NodeClaim's capacity between counts) -> [`NodePoolUsage`] ->
//! [`status_resources`] (NodePool status) and [`remaining_limits`] / [`first_exceeded`].
//!
//! The Provisioner is stricter, so a limit is never exceeded whichever instance type the cloud
//! picks ([`remaining_with_in_flight`], Karpenter's `Limits.ExceededBy` over its state): a
//! NodeClaim counts its launched capacity, and before launch the largest capacity among the
//! instance types it may become ([`launch_capacity`]); deleting NodeClaims still count, as their
//! instances exist until they are gone. Each NodeClaim counts one against a `nodes` limit.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::resources::{
    CPU, EPHEMERAL_STORAGE, MEMORY, NODES, PODS, ResourceError, ResourceLimits, Resources,
    format_resource,
};
use crate::apis::condition_set;
use crate::apis::conditions::nodeclaim as conditions;
use crate::apis::labels;
use crate::apis::requirements::Operator;
use crate::apis::{NodePool, SlimNode, SlimNodeClaim};
use crate::domain::instance_type::InstanceType;

/// The resources `status.resources` always lists, zero when the pool runs nothing (Karpenter's
/// `BaseResources`).
pub const BASE_RESOURCES: [&str; 5] = [CPU, MEMORY, PODS, EPHEMERAL_STORAGE, NODES];

/// A NodeClaim or NodePool whose resource lists could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitsError {
    #[error("nodeclaim {nodeclaim}: status.capacity: {source}")]
    Capacity {
        nodeclaim: String,
        #[source]
        source: ResourceError,
    },
    #[error("node {node}: status.capacity: {source}")]
    NodeCapacity {
        node: String,
        #[source]
        source: ResourceError,
    },
    #[error("nodepool {nodepool}: spec.limits: {source}")]
    Limits {
        nodepool: String,
        #[source]
        source: ResourceError,
    },
}

impl LimitsError {
    /// Label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Capacity { source, .. }
            | Self::NodeCapacity { source, .. }
            | Self::Limits { source, .. } => source.category(),
        }
    }
}

/// What a pool runs now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodePoolUsage {
    /// Summed capacity, with `nodes` as a resource.
    pub total: Resources,
    /// NodeClaims whose capacity could not be read (left out of `total`).
    pub errors: Vec<LimitsError>,
}

/// A NodeClaim's capacity as cluster state counts it (see the module docs).
pub fn nodeclaim_capacity(
    nodeclaim: &SlimNodeClaim,
    node: Option<&SlimNode>,
) -> Result<Resources, LimitsError> {
    let name = nodeclaim.metadata.name.clone().unwrap_or_default();
    let claimed = match &nodeclaim.status {
        Some(status) => {
            Resources::from_list(&status.capacity).map_err(|source| LimitsError::Capacity {
                nodeclaim: name.clone(),
                source,
            })?
        }
        None => Resources::default(),
    };
    let Some(node) = node else {
        return Ok(claimed);
    };
    let reported = node
        .status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .map(|list| Resources::from_list(list))
        .transpose()
        .map_err(|source| LimitsError::NodeCapacity {
            node: node.metadata.name.clone().unwrap_or_default(),
            source,
        })?
        .unwrap_or_default();
    let initialized = nodeclaim
        .status
        .as_ref()
        .is_some_and(|s| condition_set::is_true(&s.conditions, conditions::INITIALIZED));
    if initialized {
        return Ok(reported);
    }
    let mut capacity = reported;
    for (resource, amount) in claimed.iter() {
        if capacity.get(resource) == 0 {
            capacity.set(resource, amount);
        }
    }
    Ok(capacity)
}

/// Whether the NodeClaim was created for this NodePool (its `karpenter.sh/nodepool` label).
#[must_use]
pub fn belongs_to(claim: &SlimNodeClaim, nodepool: &str) -> bool {
    claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::NODEPOOL))
        .is_some_and(|name| name == nodepool)
}

/// Whether a NodeClaim belongs to the pool and counts (not being deleted).
fn counts_for(nodeclaim: &SlimNodeClaim, nodepool: &str) -> bool {
    nodeclaim.metadata.deletion_timestamp.is_none() && belongs_to(nodeclaim, nodepool)
}

/// Sums the pool's NodeClaims, finding their Nodes with `node_for` (by provider id).
pub fn usage_of<'a>(
    nodeclaims: impl IntoIterator<Item = &'a SlimNodeClaim>,
    node_for: impl Fn(&str) -> Option<Arc<SlimNode>>,
    nodepool: &str,
) -> NodePoolUsage {
    sum_usage(nodeclaims, node_for, nodepool, |claim, node| {
        nodeclaim_capacity(claim, node)
    })
}

/// The pool's count with each NodeClaim's capacity from `capacity_of` (a NodeClaim without
/// capacity counts nothing, not even a node).
fn sum_usage<'a>(
    nodeclaims: impl IntoIterator<Item = &'a SlimNodeClaim>,
    node_for: impl Fn(&str) -> Option<Arc<SlimNode>>,
    nodepool: &str,
    mut capacity_of: impl FnMut(&SlimNodeClaim, Option<&SlimNode>) -> Result<Resources, LimitsError>,
) -> NodePoolUsage {
    let mut usage = NodePoolUsage::default();
    for nodeclaim in nodeclaims.into_iter().filter(|nc| counts_for(nc, nodepool)) {
        let node = nodeclaim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .and_then(&node_for);
        match capacity_of(nodeclaim, node.as_deref()) {
            Ok(capacity) if capacity.is_zero() => {}
            Ok(capacity) => {
                usage.total.add(&capacity);
                let nodes = usage.total.get(NODES);
                usage.total.set(NODES, nodes.saturating_add(1));
            }
            Err(error) => usage.errors.push(error),
        }
    }
    usage
}

/// [`usage_of`] for a caller that counts the same pool again and again (the NodePool actor,
/// on every change of its NodeClaims): each NodeClaim's capacity is kept with the
/// `resourceVersion`s of the NodeClaim and the Node it was read from and read again only when
/// either changes, so a recount of a 5,000-node pool parses the quantities of the few that
/// changed rather than all of them. Entries of NodeClaims a count did not see are dropped.
#[derive(Debug, Default)]
pub struct CapacityCache {
    kept: HashMap<String, KeptCapacity>,
    /// Hits and reads since the cache was made (for tests).
    hits: u64,
    reads: u64,
}

#[derive(Debug)]
struct KeptCapacity {
    nodeclaim_version: String,
    node_version: Option<String>,
    capacity: Result<Resources, LimitsError>,
    /// Seen by the current count.
    seen: bool,
}

impl CapacityCache {
    /// The pool's usage, as [`usage_of`] counts it.
    pub fn usage<'a>(
        &mut self,
        nodeclaims: impl IntoIterator<Item = &'a SlimNodeClaim>,
        node_for: impl Fn(&str) -> Option<Arc<SlimNode>>,
        nodepool: &str,
    ) -> NodePoolUsage {
        let usage = sum_usage(nodeclaims, node_for, nodepool, |claim, node| {
            self.capacity(claim, node)
        });
        self.kept.retain(|_, kept| std::mem::take(&mut kept.seen));
        usage
    }

    fn capacity(
        &mut self,
        nodeclaim: &SlimNodeClaim,
        node: Option<&SlimNode>,
    ) -> Result<Resources, LimitsError> {
        self.reads += 1;
        let (Some(name), Some(version)) = (
            nodeclaim.metadata.name.as_deref(),
            nodeclaim.metadata.resource_version.as_deref(),
        ) else {
            return nodeclaim_capacity(nodeclaim, node);
        };
        let node_version = node.and_then(|n| n.metadata.resource_version.as_deref());
        if let Some(kept) = self.kept.get_mut(name)
            && kept.nodeclaim_version == version
            && kept.node_version.as_deref() == node_version
        {
            kept.seen = true;
            self.hits += 1;
            return kept.capacity.clone();
        }
        let capacity = nodeclaim_capacity(nodeclaim, node);
        self.kept.insert(
            name.to_owned(),
            KeptCapacity {
                nodeclaim_version: version.to_owned(),
                node_version: node_version.map(str::to_owned),
                capacity: capacity.clone(),
                seen: true,
            },
        );
        capacity
    }

    /// Capacities answered from the cache and capacities read, since it was made.
    #[must_use]
    pub fn counts(&self) -> (u64, u64) {
        (self.hits, self.reads)
    }

    /// NodeClaims kept.
    #[must_use]
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }
}

/// `status.resources`: the base resources (zero when absent) and every other resource used.
#[must_use]
pub fn status_resources(usage: &Resources) -> BTreeMap<String, Quantity> {
    let mut out: BTreeMap<String, Quantity> = BASE_RESOURCES
        .iter()
        .map(|name| ((*name).to_owned(), Quantity(format_resource(name, 0))))
        .collect();
    for (name, amount) in usage.iter().filter(|(_, amount)| *amount != 0) {
        out.insert(name.to_owned(), Quantity(format_resource(name, amount)));
    }
    out
}

/// What is left of the pool's `spec.limits` after `usage` (negative when over); unlimited
/// resources stay unbounded.
pub fn remaining_limits(
    nodepool: &NodePool,
    usage: &Resources,
) -> Result<ResourceLimits, LimitsError> {
    let limits =
        ResourceLimits::from_list(&nodepool.spec.limits).map_err(|source| LimitsError::Limits {
            nodepool: nodepool.metadata.name.clone().unwrap_or_default(),
            source,
        })?;
    let mut remaining = ResourceLimits::unlimited();
    for (name, limit) in limits.iter() {
        remaining = remaining.with(name, limit.saturating_sub(usage.get(name)));
    }
    Ok(remaining)
}

/// A limit the pool's usage is already above (Karpenter's `ExceededBy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitExceeded {
    pub resource: String,
    pub usage: i64,
    pub limit: i64,
}

impl std::fmt::Display for LimitExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "resource usage exceeds limit: {} usage {} > limit {}",
            self.resource,
            format_resource(&self.resource, self.usage),
            format_resource(&self.resource, self.limit)
        )
    }
}

/// The first limit `usage` exceeds, if any.
pub fn first_exceeded(
    nodepool: &NodePool,
    usage: &Resources,
) -> Result<Option<LimitExceeded>, LimitsError> {
    let limits =
        ResourceLimits::from_list(&nodepool.spec.limits).map_err(|source| LimitsError::Limits {
            nodepool: nodepool.metadata.name.clone().unwrap_or_default(),
            source,
        })?;
    Ok(limits.iter().find_map(|(name, limit)| {
        let used = usage.get(name);
        (used > limit).then(|| LimitExceeded {
            resource: name.to_owned(),
            usage: used,
            limit,
        })
    }))
}

/// What one NodeClaim counts against its NodePool's limits: its launched capacity; before
/// launch, per resource the largest capacity among the instance types its
/// `node.kubernetes.io/instance-type In [...]` requirement allows (looked up in
/// `instance_types`); with none of those known, its requests.
#[must_use]
pub fn launch_capacity(claim: &SlimNodeClaim, instance_types: &[Arc<InstanceType>]) -> Resources {
    if let Some(status) = &claim.status
        && !status.capacity.is_empty()
        && let Ok(capacity) = Resources::from_list(&status.capacity)
    {
        return capacity;
    }
    let mut largest: Option<Resources> = None;
    let allowed = claim
        .spec
        .requirements
        .iter()
        .filter(|r| r.key == labels::INSTANCE_TYPE && r.operator == Operator::In)
        .flat_map(|r| r.values.iter());
    for name in allowed {
        if let Some(t) = instance_types.iter().find(|t| &t.name == name) {
            match &mut largest {
                Some(max) => max.max_with(&t.capacity),
                None => largest = Some(t.capacity.clone()),
            }
        }
    }
    largest
        .unwrap_or_else(|| Resources::from_list(&claim.spec.resources.requests).unwrap_or_default())
}

/// The Provisioner's view of the limits: the NodePool's limits less the capacity of every
/// NodeClaim in `claims` that belongs to it, deleting and in-flight ones included (others are
/// skipped, so the caller may pass all of them). Unlimited resources stay
/// unlimited; a used-up resource remains at zero.
pub fn remaining_with_in_flight<'a>(
    nodepool: &NodePool,
    claims: impl IntoIterator<Item = &'a SlimNodeClaim>,
    instance_types: &[Arc<InstanceType>],
) -> Result<ResourceLimits, LimitsError> {
    let name = nodepool.metadata.name.clone().unwrap_or_default();
    let mut limits =
        ResourceLimits::from_list(&nodepool.spec.limits).map_err(|source| LimitsError::Limits {
            nodepool: name.clone(),
            source,
        })?;
    if limits.is_unlimited() {
        return Ok(limits);
    }
    for claim in claims.into_iter().filter(|c| belongs_to(c, &name)) {
        limits.subtract(&launch_capacity(claim, instance_types));
    }
    Ok(limits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::NodeClaimStatus;
    use crate::apis::conditions::{Condition, ConditionStatus};
    use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;

    pub(super) fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
            .collect()
    }

    fn claim(
        name: &str,
        pool: &str,
        capacity: &[(&str, &str)],
        initialized: bool,
    ) -> SlimNodeClaim {
        let mut nodeclaim: SlimNodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": { "name": name, "labels": { "karpenter.sh/nodepool": pool } },
            "spec": { "requirements": [], "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" } },
        }))
        .unwrap();
        let conditions = if initialized {
            vec![Condition {
                type_: conditions::INITIALIZED.to_owned(),
                status: ConditionStatus::True,
                observed_generation: None,
                last_transition_time: Time(Timestamp::UNIX_EPOCH),
                reason: String::new(),
                message: String::new(),
            }]
        } else {
            Vec::new()
        };
        nodeclaim.status = Some(NodeClaimStatus {
            provider_id: Some(format!("aws:///zone/{name}")),
            capacity: quantities(capacity).into(),
            conditions,
            ..NodeClaimStatus::default()
        });
        nodeclaim
    }

    fn node(provider_id: &str, capacity: &[(&str, &str)]) -> Arc<SlimNode> {
        Arc::new(SlimNode::from(Node {
            metadata: ObjectMeta {
                name: Some(provider_id.to_owned()),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                provider_id: Some(provider_id.to_owned()),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                capacity: Some(quantities(capacity)),
                ..NodeStatus::default()
            }),
        }))
    }

    #[test]
    fn usage_sums_the_pools_live_nodeclaims_and_counts_nodes() {
        let a = claim("a", "default", &[("cpu", "4"), ("memory", "16Gi")], false);
        let b = claim("b", "default", &[("cpu", "2"), ("memory", "8Gi")], false);
        let other = claim("c", "other", &[("cpu", "64")], false);
        let mut deleting = claim("d", "default", &[("cpu", "8")], false);
        deleting.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        let unlaunched = claim("e", "default", &[], false);
        let usage = usage_of(
            [&a, &b, &other, &deleting, &unlaunched],
            |_| None,
            "default",
        );
        assert_eq!(usage.total.cpu, 6000);
        assert_eq!(usage.total.memory, 24 << 30);
        assert_eq!(usage.total.get(NODES), 2);
        assert!(usage.errors.is_empty());
        let status = status_resources(&usage.total);
        assert_eq!(status["cpu"].0, "6");
        assert_eq!(status["memory"].0, "24Gi");
        assert_eq!(status["pods"].0, "0", "base resources are always listed");
        assert_eq!(status["nodes"].0, "2");
    }

    #[test]
    fn an_initialized_nodeclaim_counts_its_nodes_capacity() {
        let a = claim("a", "default", &[("cpu", "4"), ("pods", "29")], true);
        let b = claim("b", "default", &[("cpu", "4"), ("pods", "29")], false);
        let nodes = [
            node("aws:///zone/a", &[("cpu", "3")]),
            node("aws:///zone/b", &[("cpu", "3"), ("pods", "0")]),
        ];
        let usage = usage_of(
            [&a, &b],
            |pid| {
                nodes
                    .iter()
                    .find(|n| n.metadata.name.as_deref() == Some(pid))
                    .cloned()
            },
            "default",
        );
        // a: the node's 3 cpu and no pods; b: the node's 3 cpu and the claim's 29 pods.
        assert_eq!(usage.total.cpu, 6000);
        assert_eq!(usage.total.pods, 29);
    }

    #[test]
    fn the_capacity_cache_counts_as_usage_of_and_rereads_only_what_changed() {
        let versioned = |mut claim: SlimNodeClaim, version: &str| {
            claim.metadata.resource_version = Some(version.to_owned());
            claim
        };
        let a = versioned(claim("a", "default", &[("cpu", "4")], true), "1");
        let b = versioned(claim("b", "default", &[("cpu", "2")], false), "1");
        let mut node_a = SlimNode::clone(&node("aws:///zone/a", &[("cpu", "3")]));
        node_a.metadata.resource_version = Some("7".to_owned());
        let nodes = std::cell::RefCell::new(vec![Arc::new(node_a)]);
        let node_for = |pid: &str| {
            nodes
                .borrow()
                .iter()
                .find(|n| n.metadata.name.as_deref() == Some(pid))
                .cloned()
        };
        let mut cache = CapacityCache::default();
        let first = cache.usage([&a, &b], node_for, "default");
        assert_eq!(first, usage_of([&a, &b], node_for, "default"));
        assert_eq!(
            first.total.cpu, 5000,
            "a counts its node's 3 cpu, b its own 2"
        );
        assert_eq!(cache.counts(), (0, 2));
        // Nothing changed: both answered from the cache.
        assert_eq!(cache.usage([&a, &b], node_for, "default"), first);
        assert_eq!(cache.counts(), (2, 4));
        // A's node reports more: a is read again, b is not.
        let mut grown = SlimNode::clone(&nodes.borrow()[0]);
        grown.status.as_mut().unwrap().capacity = Some(quantities(&[("cpu", "4")]).into());
        grown.metadata.resource_version = Some("8".to_owned());
        nodes.borrow_mut()[0] = Arc::new(grown);
        let after_node = cache.usage([&a, &b], node_for, "default");
        assert_eq!(after_node.total.cpu, 6000);
        assert_eq!(cache.counts(), (3, 6));
        // B changes version (a new capacity): read again.
        let b2 = versioned(claim("b", "default", &[("cpu", "8")], false), "2");
        assert_eq!(
            cache.usage([&a, &b2], node_for, "default").total.cpu,
            12_000
        );
        assert_eq!(cache.counts(), (4, 8));
        // A NodeClaim gone from the pool is forgotten.
        cache.usage([&a], node_for, "default");
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn remaining_limits_subtract_usage_and_exceeded_limits_are_named() {
        let pool: NodePool = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": { "name": "default" },
            "spec": {
                "limits": { "cpu": "10", "nodes": "2" },
                "template": { "spec": { "requirements": [], "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" } } },
            },
        }))
        .unwrap();
        let mut usage = Resources::core(6000, 1 << 30, 0);
        usage.set(NODES, 2);
        let remaining = remaining_limits(&pool, &usage).unwrap();
        let left: BTreeMap<&str, i64> = remaining.iter().collect();
        assert_eq!(left, BTreeMap::from([("cpu", 4000), ("nodes", 0)]));
        assert_eq!(first_exceeded(&pool, &usage).unwrap(), None);
        usage.set(NODES, 3);
        let exceeded = first_exceeded(&pool, &usage).unwrap().unwrap();
        assert_eq!(exceeded.resource, "nodes");
        assert!(exceeded.to_string().contains("nodes usage 3 > limit 2"));
    }

    #[test]
    fn a_bad_capacity_is_reported_and_left_out() {
        let bad = claim("bad", "default", &[("cpu", "lots")], false);
        let good = claim("good", "default", &[("cpu", "1")], false);
        let usage = usage_of([&bad, &good], |_| None, "default");
        assert_eq!(usage.total.cpu, 1000);
        assert_eq!(usage.errors.len(), 1);
        assert!(usage.errors[0].to_string().contains("nodeclaim bad"));
    }
}

#[cfg(test)]
mod in_flight_tests {
    use super::tests::quantities;
    use super::*;
    use crate::apis::nodeclaim::NodeClaimStatus;
    use crate::apis::requirements::NodeClaimRequirement;
    use crate::domain::resources::{CPU, MEMORY, NODES};
    use crate::domain::scheduling::workload::fake_instance_type;

    const GI: i64 = 1 << 30;

    fn nodepool(limits: &[(&str, &str)]) -> NodePool {
        let mut pool: NodePool = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {"template": {"spec": {
                "requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
            }}}
        }))
        .expect("a valid nodepool");
        pool.spec.limits = quantities(limits);
        pool
    }

    fn claim(pool: &str, types: &[&str], capacity: &[(&str, &str)]) -> SlimNodeClaim {
        let mut claim: SlimNodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": "c", "labels": {labels::NODEPOOL: pool}},
            "spec": {
                "requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
            }
        }))
        .expect("a valid nodeclaim");
        claim.spec.requirements.push(NodeClaimRequirement {
            key: labels::INSTANCE_TYPE.to_owned(),
            operator: Operator::In,
            values: types.iter().map(|t| (*t).to_owned()).collect(),
            min_values: None,
        });
        if !capacity.is_empty() {
            claim.status = Some(NodeClaimStatus {
                capacity: quantities(capacity).into(),
                ..NodeClaimStatus::default()
            });
        }
        claim
    }

    fn catalogue() -> Vec<Arc<InstanceType>> {
        vec![
            Arc::new(fake_instance_type("small", 2, 4 * GI, 10)),
            Arc::new(fake_instance_type("large", 8, 32 * GI, 40)),
        ]
    }

    #[test]
    fn launched_nodeclaims_count_their_capacity() {
        let launched = claim(
            "default",
            &["small", "large"],
            &[(CPU, "4"), (MEMORY, "8Gi")],
        );
        let left = remaining_with_in_flight(
            &nodepool(&[(CPU, "10"), (NODES, "3")]),
            [&launched],
            &catalogue(),
        )
        .expect("limits");
        assert_eq!(left.iter().collect::<Vec<_>>(), [(CPU, 6000), (NODES, 2)]);
    }

    #[test]
    fn in_flight_nodeclaims_count_their_largest_instance_type() {
        let in_flight = claim("default", &["small", "large"], &[]);
        let left = remaining_with_in_flight(&nodepool(&[(CPU, "10")]), [&in_flight], &catalogue())
            .expect("limits");
        assert_eq!(left.iter().collect::<Vec<_>>(), [(CPU, 2000)]);
    }

    #[test]
    fn nodeclaims_of_other_nodepools_do_not_count() {
        let other = claim("other", &["large"], &[(CPU, "8")]);
        let left = remaining_with_in_flight(&nodepool(&[(CPU, "10")]), [&other], &catalogue())
            .expect("limits");
        assert_eq!(left.iter().collect::<Vec<_>>(), [(CPU, 10_000)]);
    }

    #[test]
    fn a_bad_limit_names_the_nodepool_and_the_field() {
        let error = remaining_with_in_flight(&nodepool(&[(CPU, "ten")]), [], &[])
            .expect_err("bad quantity");
        assert!(
            error
                .to_string()
                .starts_with("nodepool default: spec.limits:")
        );
    }
}
