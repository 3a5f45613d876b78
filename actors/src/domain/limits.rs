//! A NodePool's remaining limits: its `spec.limits` less what its NodeClaims hold, launched or
//! in flight (Karpenter's `NodePoolResourcesFor` + `Limits.ExceededBy`, core
//! `pkg/controllers/state/cluster.go` and `pkg/apis/v1/nodepool.go`).
//!
//! Data flow: the Provisioner reads the NodePool and every NodeClaim from the cluster view, calls
//! [`remaining`], and checks each NodeClaim it is about to create against the result
//! ([`ResourceLimits::first_exceeded_by`]), subtracting it before the next one. A NodeClaim counts
//! its launched capacity (`status.capacity`); before launch it counts the largest capacity among
//! the instance types it may become, so an in-flight NodeClaim is never under-counted and a limit
//! is never exceeded whichever type the cloud picks. Each NodeClaim also counts one against a
//! `nodes` limit. Deleting NodeClaims still count: their instances exist until they are gone.

use std::sync::Arc;

use crate::apis::labels;
use crate::apis::nodeclaim::NodeClaim;
use crate::apis::nodepool::NodePool;
use crate::apis::requirements::Operator;
use crate::domain::instance_type::InstanceType;
use crate::domain::resources::{ResourceError, ResourceLimits, Resources};

/// A NodePool whose limits cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitsError {
    #[error("nodepool {nodepool}: spec.limits: {source}")]
    Limits {
        nodepool: String,
        #[source]
        source: ResourceError,
    },
}

impl LimitsError {
    /// A short label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Limits { source, .. } => source.category(),
        }
    }
}

/// Whether the NodeClaim was created for this NodePool (its `karpenter.sh/nodepool` label).
#[must_use]
pub fn belongs_to(claim: &NodeClaim, nodepool: &str) -> bool {
    claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::NODEPOOL))
        .is_some_and(|name| name == nodepool)
}

/// What one NodeClaim counts against its NodePool's limits: its launched capacity; before
/// launch, per resource the largest capacity among the instance types its
/// `node.kubernetes.io/instance-type In [...]` requirement allows (looked up in
/// `instance_types`); with none of those known, its requests.
#[must_use]
pub fn nodeclaim_capacity(claim: &NodeClaim, instance_types: &[Arc<InstanceType>]) -> Resources {
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

/// The NodePool's limits less the capacity of every NodeClaim in `claims` that belongs to it
/// (others are skipped, so the caller may pass all of them). Unlimited resources stay
/// unlimited; a used-up resource remains at zero.
pub fn remaining<'a>(
    nodepool: &NodePool,
    claims: impl IntoIterator<Item = &'a NodeClaim>,
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
        limits.subtract(&nodeclaim_capacity(claim, instance_types));
    }
    Ok(limits)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;
    use crate::apis::nodeclaim::NodeClaimStatus;
    use crate::apis::requirements::NodeClaimRequirement;
    use crate::domain::resources::{CPU, MEMORY, NODES};
    use crate::domain::scheduling::workload::fake_instance_type;

    const GI: i64 = 1 << 30;

    fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
            .collect()
    }

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

    fn claim(pool: &str, types: &[&str], capacity: &[(&str, &str)]) -> NodeClaim {
        let mut claim: NodeClaim = serde_json::from_value(serde_json::json!({
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
                capacity: quantities(capacity),
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
        let left = remaining(
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
        let left =
            remaining(&nodepool(&[(CPU, "10")]), [&in_flight], &catalogue()).expect("limits");
        assert_eq!(left.iter().collect::<Vec<_>>(), [(CPU, 2000)]);
    }

    #[test]
    fn nodeclaims_of_other_nodepools_do_not_count() {
        let other = claim("other", &["large"], &[(CPU, "8")]);
        let left = remaining(&nodepool(&[(CPU, "10")]), [&other], &catalogue()).expect("limits");
        assert_eq!(left.iter().collect::<Vec<_>>(), [(CPU, 10_000)]);
    }

    #[test]
    fn a_bad_limit_names_the_nodepool_and_the_field() {
        let error = remaining(&nodepool(&[(CPU, "ten")]), [], &[]).expect_err("bad quantity");
        assert!(
            error
                .to_string()
                .starts_with("nodepool default: spec.limits:")
        );
    }
}
