//! The NodePool's part of drift: Karpenter's `nodeclaim.disruption` Drift sub-controller
//! (core `pkg/controllers/nodeclaim/disruption/drift.go`) decides whether a launched NodeClaim
//! still matches what its NodePool asks for, before it asks the cloud provider
//! (`CloudProvider::is_drifted`, the `NodeClass` part).
//!
//! Three checks, in Karpenter's order, first hit wins:
//!
//! 1. [`NodePoolDrift::NodePoolDrifted`] ([`nodepool_hash_drifted`]): the NodePool's template
//!    hash annotation differs from the one stamped on the NodeClaim at creation. Compared only
//!    when both carry a hash and the same hash version: a version bump re-stamps NodeClaims
//!    instead of drifting them all.
//! 2. [`NodePoolDrift::RequirementsDrifted`] ([`requirements_drifted`]): the NodeClaim's labels,
//!    read as `key In [value]` requirements, are not compatible with the NodePool template's
//!    requirements. Karpenter's `Compatible` without undefined keys allowed: a key the pool
//!    requires (other than by `NotIn`/`DoesNotExist`) that the NodeClaim has no label for
//!    drifts it, as does a label value the pool no longer allows.
//! 3. [`NodePoolDrift::InstanceTypeNotFound`] ([`instance_type_not_found`]): the NodeClaim's
//!    instance type is no longer among the NodePool's instance types, or none of that type's
//!    offerings (available or not) matches its zone and capacity type.
//!
//! [`static_drift`] runs the first two, which need no cloud call; the NodeClaim actor
//! (`actors/src/nodeclaim/drift.rs`) runs them through [`static_drift_with`], keeping the
//! requirements verdict while neither side changes, then asks for the pool's instance types, calls [`instance_type_not_found`], asks the cloud provider, and
//! writes the `Drifted` condition.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::instance_type::InstanceType;
use super::requirements::{AllowUndefined, Requirement, RequirementError, Requirements};
use crate::apis::labels::{self, annotation};
use crate::apis::requirements::NodePoolRequirement;
use crate::apis::{LabelMap, MetaFields, NodePool, SlimNodeClaim};

/// Why a NodeClaim drifted from its NodePool (the `Drifted` condition's reason and message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodePoolDrift {
    NodePoolDrifted,
    RequirementsDrifted,
    InstanceTypeNotFound,
}

impl NodePoolDrift {
    /// Karpenter's reason string.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NodePoolDrifted => "NodePoolDrifted",
            Self::RequirementsDrifted => "RequirementsDrifted",
            Self::InstanceTypeNotFound => "InstanceTypeNotFound",
        }
    }
}

/// Whether the NodePool's template hash moved away from the NodeClaim's: all four hash and
/// version annotations present, equal versions, different hashes.
#[must_use]
pub fn nodepool_hash_drifted(nodepool: &ObjectMeta, nodeclaim: &impl MetaFields) -> bool {
    let (Some(pool_hash), Some(pool_version), Some(claim_hash), Some(claim_version)) = (
        annotation(nodepool, labels::NODEPOOL_HASH),
        annotation(nodepool, labels::NODEPOOL_HASH_VERSION),
        annotation(nodeclaim, labels::NODEPOOL_HASH),
        annotation(nodeclaim, labels::NODEPOOL_HASH_VERSION),
    ) else {
        return false;
    };
    pool_version == claim_version && pool_hash != claim_hash
}

/// Whether the NodeClaim's labels no longer satisfy the NodePool template's requirements.
/// An error when the pool's requirements do not parse (validation rejects such a pool).
pub fn requirements_drifted(
    pool_requirements: &[NodePoolRequirement],
    nodeclaim_labels: &LabelMap,
) -> Result<bool, RequirementError> {
    let api: Vec<_> = pool_requirements
        .iter()
        .map(NodePoolRequirement::as_requirement)
        .collect();
    let pool = Requirements::from_api(&api)?;
    let claim = Requirements::from_labels(nodeclaim_labels);
    Ok(!claim.is_compatible(&pool, AllowUndefined::None))
}

/// Whether the NodeClaim's instance type is gone from `instance_types` (the NodePool's, with
/// unavailable offerings), or has no offering compatible with the NodeClaim's labels.
///
/// A `reserved` NodeClaim also matches on-demand offerings and ignores its reservation: its
/// label may not have been demoted yet after the reservation ended, and a reservation that
/// is no longer selected is the provider's `CapacityReservationDrift` to report.
#[must_use]
pub fn instance_type_not_found(
    instance_types: &[Arc<InstanceType>],
    nodeclaim_labels: &LabelMap,
) -> bool {
    let name = nodeclaim_labels
        .get(labels::INSTANCE_TYPE)
        .map_or("", String::as_str);
    let Some(instance_type) = instance_types.iter().find(|t| t.name == name) else {
        return true;
    };
    let mut requirements = Requirements::from_labels(nodeclaim_labels);
    if nodeclaim_labels
        .get(labels::CAPACITY_TYPE)
        .is_some_and(|c| c == labels::CAPACITY_TYPE_RESERVED)
    {
        requirements.set(Requirement::in_values(
            labels::CAPACITY_TYPE,
            &[
                labels::CAPACITY_TYPE_RESERVED,
                labels::CAPACITY_TYPE_ON_DEMAND,
            ],
        ));
        requirements.remove(labels::CAPACITY_RESERVATION_ID);
    }
    !instance_type
        .offerings
        .iter()
        .any(|o| o.is_compatible(&requirements))
}

/// The checks that need no cloud call, in order: the template hash, then the requirements.
/// An error when the hash has not drifted and the pool's requirements do not parse.
pub fn static_drift(
    nodepool: &NodePool,
    nodeclaim: &SlimNodeClaim,
) -> Result<Option<NodePoolDrift>, RequirementError> {
    static_drift_with(nodepool, nodeclaim, requirements_drifted)
}

/// [`static_drift`] with the requirements check given: called with the pool's requirements and
/// the NodeClaim's labels, only when the hash has not drifted (a caller may keep verdicts).
pub fn static_drift_with(
    nodepool: &NodePool,
    nodeclaim: &SlimNodeClaim,
    requirements: impl FnOnce(&[NodePoolRequirement], &LabelMap) -> Result<bool, RequirementError>,
) -> Result<Option<NodePoolDrift>, RequirementError> {
    if nodepool_hash_drifted(&nodepool.metadata, &nodeclaim.metadata) {
        return Ok(Some(NodePoolDrift::NodePoolDrifted));
    }
    let empty = LabelMap::default();
    let claim_labels = nodeclaim.metadata.labels.as_ref().unwrap_or(&empty);
    let drifted = requirements(&nodepool.spec.template.spec.requirements, claim_labels)?;
    Ok(drifted.then_some(NodePoolDrift::RequirementsDrifted))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::requirements::Operator;
    use crate::domain::instance_type::{InstanceType, Offering, Overhead};
    use crate::domain::resources::Resources;

    const ZONE_A: &str = "us-west-2a";
    const ZONE_B: &str = "us-west-2b";

    fn claim_labels(pairs: &[(&str, &str)]) -> LabelMap {
        LabelMap::from(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<std::collections::BTreeMap<_, _>>(),
        )
    }

    /// An m5.large claim in zone A, on-demand, amd64 linux, of pool `default`.
    fn launched() -> LabelMap {
        claim_labels(&[
            (labels::NODEPOOL, "default"),
            (labels::INSTANCE_TYPE, "m5.large"),
            (labels::CAPACITY_TYPE, labels::CAPACITY_TYPE_ON_DEMAND),
            (labels::ZONE, ZONE_A),
            (labels::ARCH, labels::ARCH_AMD64),
            (labels::OS, labels::OS_LINUX),
        ])
    }

    fn requirement(key: &str, operator: Operator, values: &[&str]) -> NodePoolRequirement {
        NodePoolRequirement::from(crate::apis::requirements::Requirement::new(
            key, operator, values,
        ))
    }

    fn meta(annotations: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            annotations: Some(claim_labels(annotations).to_map()),
            ..ObjectMeta::default()
        }
    }

    fn instance_type(name: &str, offerings: Vec<Offering>) -> Arc<InstanceType> {
        Arc::new(InstanceType::new(
            name,
            Requirements::from_requirements([Requirement::in_values(
                labels::INSTANCE_TYPE,
                &[name],
            )]),
            offerings,
            Resources::core(2000, 8 << 30, 29),
            Overhead::default(),
        ))
    }

    #[test]
    fn labels_the_pool_still_allows_are_not_drifted() {
        let pool = [
            requirement(
                labels::CAPACITY_TYPE,
                Operator::In,
                &[labels::CAPACITY_TYPE_ON_DEMAND, labels::CAPACITY_TYPE_SPOT],
            ),
            requirement(labels::ZONE, Operator::In, &[ZONE_A, ZONE_B]),
            requirement(labels::ARCH, Operator::Exists, &[]),
            requirement(
                "karpenter.k8s.aws/instance-family",
                Operator::NotIn,
                &["t3"],
            ),
            requirement("gpu", Operator::DoesNotExist, &[]),
        ];
        assert!(!requirements_drifted(&pool, &launched()).unwrap());
        assert!(!requirements_drifted(&[], &launched()).unwrap());
    }

    #[test]
    fn a_label_value_the_pool_no_longer_allows_is_requirements_drift() {
        let pool = [requirement(
            labels::CAPACITY_TYPE,
            Operator::In,
            &[labels::CAPACITY_TYPE_SPOT],
        )];
        assert!(requirements_drifted(&pool, &launched()).unwrap());
        let excluded = [requirement(labels::ZONE, Operator::NotIn, &[ZONE_A])];
        assert!(requirements_drifted(&excluded, &launched()).unwrap());
        let absent = [requirement(labels::ARCH, Operator::DoesNotExist, &[])];
        assert!(requirements_drifted(&absent, &launched()).unwrap());
    }

    #[test]
    fn a_key_the_pool_now_requires_that_the_claim_lacks_is_requirements_drift() {
        // Karpenter's `Compatible` with no undefined keys allowed: `In`, `Exists` (and
        // `Gt`/`Lt`) on a key the NodeClaim has no label for drift it, well-known or not.
        for pool in [
            [requirement("team", Operator::In, &["a"])],
            [requirement("team", Operator::Exists, &[])],
            [requirement(
                "karpenter.k8s.aws/instance-cpu",
                Operator::Gt,
                &["1"],
            )],
            [requirement(labels::ZONE_ID, Operator::In, &["usw2-az1"])],
        ] {
            assert!(
                requirements_drifted(&pool, &launched()).unwrap(),
                "{:?}",
                pool[0]
            );
        }
        // Keys the pool only excludes may stay undefined.
        for pool in [
            [requirement("team", Operator::NotIn, &["b"])],
            [requirement("team", Operator::DoesNotExist, &[])],
        ] {
            assert!(
                !requirements_drifted(&pool, &launched()).unwrap(),
                "{:?}",
                pool[0]
            );
        }
    }

    #[test]
    fn a_pool_whose_requirements_do_not_parse_is_an_error() {
        let pool = [requirement(
            "karpenter.k8s.aws/instance-cpu",
            Operator::Gt,
            &["many"],
        )];
        assert!(requirements_drifted(&pool, &launched()).is_err());
    }

    #[test]
    fn an_instance_type_with_a_matching_offering_is_found() {
        let types = [instance_type(
            "m5.large",
            vec![
                Offering::new(ZONE_B, labels::CAPACITY_TYPE_SPOT, 0.05),
                // Unavailable offerings count: a type out of capacity has not left the pool.
                Offering::new(ZONE_A, labels::CAPACITY_TYPE_ON_DEMAND, 0.1).unavailable(),
            ],
        )];
        assert!(!instance_type_not_found(&types, &launched()));
    }

    #[test]
    fn a_type_gone_from_the_pool_or_without_a_matching_offering_is_not_found() {
        let other = [instance_type(
            "c5.large",
            vec![Offering::new(ZONE_A, labels::CAPACITY_TYPE_ON_DEMAND, 0.1)],
        )];
        assert!(instance_type_not_found(&other, &launched()));
        assert!(instance_type_not_found(&[], &launched()));
        let elsewhere = [instance_type(
            "m5.large",
            vec![
                Offering::new(ZONE_B, labels::CAPACITY_TYPE_ON_DEMAND, 0.1),
                Offering::new(ZONE_A, labels::CAPACITY_TYPE_SPOT, 0.05),
            ],
        )];
        assert!(instance_type_not_found(&elsewhere, &launched()));
        let mut unlabelled = launched().to_map();
        unlabelled.remove(labels::INSTANCE_TYPE);
        let unlabelled = LabelMap::from(unlabelled);
        let found = [instance_type(
            "m5.large",
            vec![Offering::new(ZONE_A, labels::CAPACITY_TYPE_ON_DEMAND, 0.1)],
        )];
        assert!(instance_type_not_found(&found, &unlabelled));
    }

    #[test]
    fn a_reserved_claim_matches_on_demand_offerings_and_ignores_its_reservation() {
        let mut reserved = launched();
        reserved.insert(
            labels::CAPACITY_TYPE.to_owned(),
            labels::CAPACITY_TYPE_RESERVED.to_owned(),
        );
        reserved.insert(
            labels::CAPACITY_RESERVATION_ID.to_owned(),
            "cr-ended".to_owned(),
        );
        let on_demand_only = [instance_type(
            "m5.large",
            vec![Offering::new(ZONE_A, labels::CAPACITY_TYPE_ON_DEMAND, 0.1)],
        )];
        assert!(!instance_type_not_found(&on_demand_only, &reserved));
        let other_reservation = [instance_type(
            "m5.large",
            vec![Offering::reserved(ZONE_A, "cr-other", 0.08, 1)],
        )];
        assert!(!instance_type_not_found(&other_reservation, &reserved));
        let spot_only = [instance_type(
            "m5.large",
            vec![Offering::new(ZONE_A, labels::CAPACITY_TYPE_SPOT, 0.05)],
        )];
        assert!(instance_type_not_found(&spot_only, &reserved));
        // An on-demand claim does not match a reserved offering.
        assert!(instance_type_not_found(&other_reservation, &launched()));
    }

    #[test]
    fn the_hash_drifts_only_with_all_four_annotations_and_equal_versions() {
        let pool = meta(&[
            (labels::NODEPOOL_HASH, "new"),
            (labels::NODEPOOL_HASH_VERSION, "v3"),
        ]);
        let claim = meta(&[
            (labels::NODEPOOL_HASH, "old"),
            (labels::NODEPOOL_HASH_VERSION, "v3"),
        ]);
        assert!(nodepool_hash_drifted(&pool, &claim));
        assert!(!nodepool_hash_drifted(&pool, &pool));
        let other_version = meta(&[
            (labels::NODEPOOL_HASH, "old"),
            (labels::NODEPOOL_HASH_VERSION, "v2"),
        ]);
        assert!(!nodepool_hash_drifted(&pool, &other_version));
        let unversioned = meta(&[(labels::NODEPOOL_HASH, "old")]);
        assert!(!nodepool_hash_drifted(&pool, &unversioned));
        assert!(!nodepool_hash_drifted(&meta(&[]), &claim));
    }

    #[test]
    fn the_hash_is_checked_before_the_requirements() {
        let mut pool: NodePool = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": { "name": "default", "annotations": {
                labels::NODEPOOL_HASH: "new", labels::NODEPOOL_HASH_VERSION: "v3",
            }},
            "spec": { "template": { "spec": {
                "requirements": [{ "key": labels::CAPACITY_TYPE, "operator": "In", "values": ["spot"] }],
                "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
            }}},
        }))
        .unwrap();
        let mut claim: SlimNodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": { "name": "default-a", "labels": launched(), "annotations": {
                labels::NODEPOOL_HASH: "old", labels::NODEPOOL_HASH_VERSION: "v3",
            }},
            "spec": {
                "requirements": [],
                "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
            },
        }))
        .unwrap();
        assert_eq!(
            static_drift(&pool, &claim),
            Ok(Some(NodePoolDrift::NodePoolDrifted))
        );
        claim.metadata.annotations = pool.metadata.annotations.clone().map(LabelMap::from);
        assert_eq!(
            static_drift(&pool, &claim),
            Ok(Some(NodePoolDrift::RequirementsDrifted))
        );
        pool.spec.template.spec.requirements.clear();
        assert_eq!(static_drift(&pool, &claim), Ok(None));
    }
}
