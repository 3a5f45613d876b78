//! The instance type the `NodeClass` validation dry-runs with (dynamic instance-type
//! validation, new in v1.5, reference 5.1; Karpenter's `mockLaunchTemplateOptions`).
//!
//! [`validation_instance_types`] is pure: from the class's instance types it keeps those some
//! NodePool using the class could launch (its requirements and template labels intersect the
//! type's labels), maps them to the class's AMIs, prefers types whose AMI is the standard
//! (non-GPU, non-Neuron) variant (GPU images may need larger volumes than the class gives),
//! else any mapped type, else `m5.large` and `m6g.large`; Windows families always use that
//! fallback (Karpenter issue #7985). The first name is the one `RunInstances` is dry-run with,
//! so IAM policies that condition `RunInstances` on the instance type judge a real choice.
//! [`validation_launches`] gives the same choice as (instance type, AMI id) pairs, without the
//! fallback; the `NodeClassActor` asks for it through
//! [`crate::ports::cloud_provider::CloudProvider::validation_launches`].

use std::collections::BTreeSet;
use std::sync::Arc;

use super::ami_mapping::{
    AmiRequirementsError, is_standard_variant, map_to_instance_types, parsed_amis,
};
use super::instance_types::ami_family;
use karpenter_core::apis::EC2NodeClass;
use karpenter_core::apis::nodepool::NodePool;
use karpenter_core::apis::requirements::Requirement as ApiRequirement;
use karpenter_core::domain::instance_type::InstanceType;
use karpenter_core::domain::requirements::Requirements;

/// The types validation falls back to: one `x86_64` and one arm64, so some AMI matches.
pub const FALLBACK_INSTANCE_TYPES: [&str; 2] = ["m5.large", "m6g.large"];

/// A NodePool's requirements and template labels as one requirement set; requirements that
/// cannot be read are left out (NodePool validation reports them).
fn pool_requirements(nodepool: &NodePool) -> Requirements {
    let template = &nodepool.spec.template;
    let api: Vec<ApiRequirement> = template
        .spec
        .requirements
        .iter()
        .cloned()
        .map(ApiRequirement::from)
        .collect();
    let mut requirements = Requirements::new();
    for requirement in &api {
        if let Ok(parsed) = Requirements::from_api(std::slice::from_ref(requirement)) {
            requirements.add_all(&parsed);
        }
    }
    requirements.add_all(&Requirements::from_labels(&template.metadata.labels));
    requirements
}

/// The (instance type, AMI id) pairs the dry runs may use, best first; empty when the class is
/// Windows or none of its types fits a NodePool and an AMI (callers fall back to
/// [`FALLBACK_INSTANCE_TYPES`]).
pub fn validation_launches(
    nodeclass: &EC2NodeClass,
    instance_types: &[Arc<InstanceType>],
    nodepools: &[Arc<NodePool>],
) -> Result<Vec<(String, String)>, AmiRequirementsError> {
    if ami_family(&nodeclass.spec).is_windows() {
        return Ok(Vec::new());
    }
    let mut seen = BTreeSet::new();
    let mut compatible = Vec::new();
    for pool in nodepools {
        let requirements = pool_requirements(pool);
        for it in instance_types {
            if it.requirements.intersects_ok(&requirements) && seen.insert(it.name.clone()) {
                compatible.push(Arc::clone(it));
            }
        }
    }
    let amis = nodeclass
        .status
        .as_ref()
        .map(|s| s.amis.as_slice())
        .unwrap_or_default();
    let mapped = map_to_instance_types(&compatible, amis)?;
    let standard: BTreeSet<String> = parsed_amis(amis)?
        .into_iter()
        .filter(|(_, requirements)| is_standard_variant(requirements))
        .map(|(ami, _)| ami.id.clone())
        .collect();
    let pairs = |only_standard: bool| -> Vec<(String, String)> {
        mapped
            .iter()
            .filter(|(id, _)| !only_standard || standard.contains(id))
            .flat_map(|(id, types)| types.iter().map(|t| (t.name.clone(), id.clone())))
            .collect()
    };
    let preferred = pairs(true);
    Ok(if preferred.is_empty() {
        pairs(false)
    } else {
        preferred
    })
}

/// The instance types to dry-run with, best first (see the module docs).
pub fn validation_instance_types(
    nodeclass: &EC2NodeClass,
    instance_types: &[Arc<InstanceType>],
    nodepools: &[Arc<NodePool>],
) -> Result<Vec<String>, AmiRequirementsError> {
    let launches = validation_launches(nodeclass, instance_types, nodepools)?;
    Ok(if launches.is_empty() {
        FALLBACK_INSTANCE_TYPES.map(str::to_owned).to_vec()
    } else {
        launches.into_iter().map(|(name, _)| name).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_core::apis::ec2nodeclass::Ami;
    use karpenter_core::apis::ec2nodeclass::{
        AmiFamily, AmiRequirement, EC2NodeClassSpec, EC2NodeClassStatus,
    };
    use karpenter_core::apis::labels::{ARCH, INSTANCE_GPU_COUNT, INSTANCE_TYPE};
    use karpenter_core::domain::instance_type::Overhead;
    use karpenter_core::domain::requirements::Requirement;
    use karpenter_core::domain::resources::Resources;

    fn it(name: &str, arch: &str, gpu: bool) -> Arc<InstanceType> {
        Arc::new(InstanceType::new(
            name,
            Requirements::from_requirements([
                Requirement::in_values(INSTANCE_TYPE, &[name]),
                Requirement::in_values(ARCH, &[arch]),
                if gpu {
                    Requirement::in_values(INSTANCE_GPU_COUNT, &["1"])
                } else {
                    Requirement::does_not_exist(INSTANCE_GPU_COUNT)
                },
            ]),
            Vec::new(),
            Resources::default(),
            Overhead::default(),
        ))
    }

    fn requirement(key: &str, operator: &str, values: &[&str]) -> AmiRequirement {
        AmiRequirement {
            key: key.into(),
            operator: operator.into(),
            values: values.iter().map(|v| (*v).to_owned()).collect(),
        }
    }

    fn nodeclass(family: AmiFamily, amis: Vec<Ami>) -> EC2NodeClass {
        let spec: EC2NodeClassSpec = serde_json::from_value(serde_json::json!({
            "subnetSelectorTerms": [{"id": "subnet-1"}],
            "securityGroupSelectorTerms": [{"id": "sg-1"}],
            "amiSelectorTerms": [{"id": "ami-1"}],
            "amiFamily": family.as_str(),
            "role": "node",
        }))
        .expect("spec");
        let mut class = EC2NodeClass::new("default", spec);
        class.status = Some(EC2NodeClassStatus {
            amis,
            ..EC2NodeClassStatus::default()
        });
        class
    }

    fn pool(requirements: &serde_json::Value) -> Arc<NodePool> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodePool",
                "metadata": {"name": "p"},
                "spec": {"template": {"spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": requirements,
                }}},
            }))
            .expect("nodepool"),
        )
    }

    fn amis() -> Vec<Ami> {
        vec![
            Ami {
                id: "ami-nvidia".into(),
                name: None,
                deprecated: None,
                requirements: vec![
                    requirement(ARCH, "In", &["amd64"]),
                    requirement(INSTANCE_GPU_COUNT, "Exists", &[]),
                ],
            },
            Ami {
                id: "ami-standard".into(),
                name: None,
                deprecated: None,
                requirements: vec![
                    requirement(ARCH, "In", &["amd64"]),
                    requirement(INSTANCE_GPU_COUNT, "DoesNotExist", &[]),
                ],
            },
        ]
    }

    #[test]
    fn standard_ami_types_of_the_nodepools_come_first() {
        let types = [
            it("g5.xlarge", "amd64", true),
            it("c5.large", "amd64", false),
            it("m7g.large", "arm64", false),
        ];
        let pools = [pool(
            &serde_json::json!([{"key": ARCH, "operator": "In", "values": ["amd64"]}]),
        )];
        let chosen =
            validation_instance_types(&nodeclass(AmiFamily::AL2023, amis()), &types, &pools)
                .expect("valid");
        assert_eq!(chosen, ["c5.large"]);
    }

    #[test]
    fn gpu_only_pools_use_the_gpu_types_and_no_pools_fall_back() {
        let types = [
            it("g5.xlarge", "amd64", true),
            it("c5.large", "amd64", false),
        ];
        let gpu_pool = [pool(
            &serde_json::json!([{"key": INSTANCE_GPU_COUNT, "operator": "Exists"}]),
        )];
        let class = nodeclass(AmiFamily::AL2023, amis());
        assert_eq!(
            validation_instance_types(&class, &types, &gpu_pool).expect("valid"),
            ["g5.xlarge"]
        );
        assert_eq!(
            validation_instance_types(&class, &types, &[]).expect("valid"),
            FALLBACK_INSTANCE_TYPES
        );
    }

    #[test]
    fn windows_families_always_use_the_fallback_types() {
        let types = [it("c5.large", "amd64", false)];
        let pools = [pool(&serde_json::json!([]))];
        assert_eq!(
            validation_instance_types(&nodeclass(AmiFamily::Windows2022, amis()), &types, &pools)
                .expect("valid"),
            FALLBACK_INSTANCE_TYPES
        );
    }
}
