//! From the plan's new NodeClaims to `NodeClaim` objects: the limits check against current
//! usage (Karpenter's `Provisioner.Create` re-reads the NodePool and checks its limits), the
//! names (`<nodepool>-<5 characters>`, as the API server's `generateName` makes them, from a
//! seeded generator so a simulation names its NodeClaims the same way every run) and the object
//! itself (Karpenter's `NodeClaimTemplate.ToNodeClaim`): the template's labels, annotations,
//! taints, startup taints, node class, termination grace period and expiry; the
//! `karpenter.sh/nodepool` and node class labels; the NodePool's hash annotations; the NodePool
//! as owner; the plan's requirements and requests.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use karpenter_core::apis::labels;
use karpenter_core::apis::nodeclaim::{NodeClaim, NodeClaimSpec, ResourceRequirements};
use karpenter_core::apis::nodepool::NodePool;
use karpenter_core::domain::instance_type::{InstanceType, satisfies_min_values};
use karpenter_core::domain::requirements::{Requirement, Requirements};
use karpenter_core::domain::resources::{ResourceLimits, Resources};
use karpenter_core::domain::scheduling::NewNodeClaim;
use karpenter_core::domain::scheduling::workload::Rng;

/// The characters the API server's `generateName` draws from (apimachinery's `rand.String`:
/// lowercase alphanumerics without vowels and look-alikes, so names spell no words).
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
/// Random characters after `<nodepool>-`, as `generateName` adds.
const NAME_SUFFIX_LEN: usize = 5;

/// Names NodeClaims `<nodepool>-xxxxx` from a seeded generator.
#[derive(Debug, Clone)]
pub struct NameGenerator {
    rng: Rng,
}

impl NameGenerator {
    #[must_use]
    pub fn seeded(seed: u64) -> Self {
        Self {
            rng: Rng::new(seed),
        }
    }

    /// The next name for a NodeClaim of `nodepool`.
    pub fn next(&mut self, nodepool: &str) -> String {
        let mut name = String::with_capacity(nodepool.len() + 1 + NAME_SUFFIX_LEN);
        name.push_str(nodepool);
        name.push('-');
        for _ in 0..NAME_SUFFIX_LEN {
            name.push(char::from(*self.rng.pick(NAME_ALPHABET)));
        }
        name
    }
}

/// Whether a planned NodeClaim may be created now.
#[derive(Debug, Clone)]
pub(super) enum Admission {
    /// Within the limits, with the instance types that keep it there.
    Admit {
        requirements: Requirements,
        instance_types: Vec<Arc<InstanceType>>,
    },
    /// Every instance type it could launch as would break a limit (or `minValues` could no
    /// longer be met within them).
    Refuse { reason: String },
}

/// Per resource, the largest capacity among the instance types.
fn largest_capacity(types: &[Arc<InstanceType>]) -> Resources {
    let mut out = Resources::default();
    for t in types {
        out.max_with(&t.capacity);
    }
    out
}

/// Checks a planned NodeClaim against what remains of its NodePool's limits, keeping only the
/// instance types whose capacity fits, and takes its worst case off `remaining` when admitted.
pub(super) fn admit(claim: &NewNodeClaim, remaining: &mut ResourceLimits) -> Admission {
    if remaining.is_unlimited() {
        return Admission::Admit {
            requirements: claim.requirements.clone(),
            instance_types: claim.instance_types.clone(),
        };
    }
    let within: Vec<Arc<InstanceType>> = claim
        .instance_types
        .iter()
        .filter(|t| remaining.first_exceeded_by(&t.capacity).is_none())
        .cloned()
        .collect();
    if within.is_empty() {
        let resource = claim
            .instance_types
            .first()
            .and_then(|t| remaining.first_exceeded_by(&t.capacity))
            .unwrap_or("nodes")
            .to_owned();
        return Admission::Refuse {
            reason: format!("all available instance types exceed the nodepool's {resource} limit"),
        };
    }
    let mut requirements = claim.requirements.clone();
    if within.len() < claim.instance_types.len() {
        let min_values = requirements
            .get(labels::INSTANCE_TYPE)
            .and_then(Requirement::min_values);
        let names: Vec<&str> = within.iter().map(|t| t.name.as_str()).collect();
        requirements
            .set(Requirement::in_values(labels::INSTANCE_TYPE, &names).with_min_values(min_values));
        if let Err(error) = satisfies_min_values(&within, &requirements) {
            return Admission::Refuse {
                reason: format!(
                    "within the nodepool's limits, minValues of {} cannot be met ({} of {} values remain)",
                    error.key, error.available, error.needed
                ),
            };
        }
    }
    remaining.subtract(&largest_capacity(&within));
    Admission::Admit {
        requirements,
        instance_types: within,
    }
}

/// The `NodeClaim` to create for a planned one.
pub(super) fn nodeclaim_object(
    nodepool: &NodePool,
    name: String,
    requirements: &Requirements,
    requests: &Resources,
) -> NodeClaim {
    let template = &nodepool.spec.template;
    let pool_name = nodepool.metadata.name.clone().unwrap_or_default();
    let class = &template.spec.node_class_ref;
    let mut claim_labels: BTreeMap<String, String> = template.metadata.labels.clone();
    claim_labels.insert(labels::NODEPOOL.to_owned(), pool_name.clone());
    claim_labels.insert(
        format!("{}/{}", class.group, class.kind.to_lowercase()),
        class.name.clone(),
    );
    let mut annotations: BTreeMap<String, String> = template.metadata.annotations.clone();
    let pool_annotations = nodepool.metadata.annotations.as_ref();
    for key in [labels::NODEPOOL_HASH, labels::NODEPOOL_HASH_VERSION] {
        if let Some(value) = pool_annotations.and_then(|a| a.get(key)) {
            annotations.insert(key.to_owned(), value.clone());
        }
    }
    NodeClaim {
        metadata: ObjectMeta {
            name: Some(name),
            labels: Some(claim_labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: format!("{}/{}", labels::CORE_GROUP, labels::VERSION),
                kind: "NodePool".to_owned(),
                name: pool_name,
                uid: nodepool.metadata.uid.clone().unwrap_or_default(),
                block_owner_deletion: Some(true),
                controller: None,
            }]),
            ..ObjectMeta::default()
        },
        spec: NodeClaimSpec {
            taints: template.spec.taints.clone(),
            startup_taints: template.spec.startup_taints.clone(),
            requirements: requirements.to_api().into(),
            resources: ResourceRequirements {
                requests: requests.to_list().into(),
            },
            node_class_ref: class.clone(),
            termination_grace_period: template.spec.termination_grace_period.clone(),
            expire_after: template.spec.expire_after.clone(),
        },
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_core::domain::resources::{CPU, NODES};
    use karpenter_core::domain::scheduling::workload::fake_instance_type;

    const GI: i64 = 1 << 30;

    fn planned(types: &[(&str, i64)]) -> NewNodeClaim {
        let instance_types: Vec<Arc<InstanceType>> = types
            .iter()
            .map(|(name, cpu)| Arc::new(fake_instance_type(name, *cpu, *cpu * 2 * GI, 10)))
            .collect();
        let names: Vec<&str> = types.iter().map(|(n, _)| *n).collect();
        NewNodeClaim {
            node_pool: "default".to_owned(),
            node_pool_index: 0,
            requirements: Requirements::from_requirements([Requirement::in_values(
                labels::INSTANCE_TYPE,
                &names,
            )]),
            requests: Resources::core(1000, GI, 1),
            instance_types,
            pods: vec![0],
            price: 0.1,
        }
    }

    #[test]
    fn names_look_like_generate_name_and_repeat_with_the_seed() {
        let mut a = NameGenerator::seeded(7);
        let mut b = NameGenerator::seeded(7);
        let name = a.next("default");
        assert_eq!(name, b.next("default"));
        let suffix = name.strip_prefix("default-").expect("prefix");
        assert_eq!(suffix.len(), NAME_SUFFIX_LEN);
        assert!(suffix.bytes().all(|c| NAME_ALPHABET.contains(&c)));
        assert_ne!(a.next("default"), name);
    }

    #[test]
    fn admission_keeps_the_types_within_the_limits_and_takes_the_largest_off() {
        let mut remaining = ResourceLimits::unlimited().with(CPU, 6000).with(NODES, 5);
        match admit(
            &planned(&[("small", 2), ("medium", 4), ("large", 8)]),
            &mut remaining,
        ) {
            Admission::Admit {
                instance_types,
                requirements,
            } => {
                let names: Vec<&str> = instance_types.iter().map(|t| t.name.as_str()).collect();
                assert_eq!(names, ["small", "medium"]);
                assert_eq!(
                    requirements
                        .get(labels::INSTANCE_TYPE)
                        .map(|r| r.values().len()),
                    Some(2)
                );
            }
            Admission::Refuse { reason } => panic!("refused: {reason}"),
        }
        assert_eq!(
            remaining.iter().collect::<Vec<_>>(),
            [(CPU, 2000), (NODES, 4)]
        );
        match admit(&planned(&[("medium", 4)]), &mut remaining) {
            Admission::Refuse { reason } => assert!(reason.contains("cpu limit"), "{reason}"),
            Admission::Admit { .. } => panic!("admitted beyond the limit"),
        }
    }
}
