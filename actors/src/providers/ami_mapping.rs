//! Which of an `EC2NodeClass`'s resolved AMIs (`status.amis`) each instance type launches with
//! (Karpenter's `MapToInstanceTypes`): the first AMI, in status order, whose requirements
//! (architecture, GPU or accelerator variant, OS) the instance type is compatible with.
//!
//! Used by the launch templates (one template per AMI group), AMI drift (the instance's image
//! must be the one its type maps to) and the `NodeClass` validation's choice of instance type.

use std::sync::Arc;

use k8s_openapi::api::core::v1::NodeSelectorRequirement;

use karpenter_core::apis::ec2nodeclass::Ami;
use karpenter_core::domain::amifamily::Variant;
use karpenter_core::domain::instance_type::InstanceType;
use karpenter_core::domain::requirements::{AllowUndefined, RequirementError, Requirements};

/// An AMI whose status requirements cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("status.amis[{index}] ({ami}): {source}")]
pub struct AmiRequirementsError {
    pub index: usize,
    pub ami: String,
    pub source: RequirementError,
}

impl AmiRequirementsError {
    #[must_use]
    pub fn category(&self) -> &'static str {
        "invalid_ami_requirements"
    }
}

/// The requirements of one resolved AMI.
pub fn ami_requirements(ami: &Ami) -> Result<Requirements, RequirementError> {
    let selectors: Vec<NodeSelectorRequirement> = ami
        .requirements
        .iter()
        .map(|r| NodeSelectorRequirement {
            key: r.key.clone(),
            operator: r.operator.clone(),
            values: Some(r.values.clone()),
        })
        .collect();
    Requirements::from_node_selector_requirements(&selectors)
}

/// The AMIs with their requirements, in status order.
pub fn parsed_amis(amis: &[Ami]) -> Result<Vec<(&Ami, Requirements)>, AmiRequirementsError> {
    amis.iter()
        .enumerate()
        .map(|(index, ami)| {
            ami_requirements(ami)
                .map(|requirements| (ami, requirements))
                .map_err(|source| AmiRequirementsError {
                    index,
                    ami: ami.id.clone(),
                    source,
                })
        })
        .collect()
}

/// AMI ids with the instance types that launch with them.
pub type AmiGroups = Vec<(String, Vec<Arc<InstanceType>>)>;

/// Each AMI (in status order) with the instance types that launch with it (in their order);
/// AMIs no type maps to are left out, and so are types no AMI serves.
pub fn map_to_instance_types(
    instance_types: &[Arc<InstanceType>],
    amis: &[Ami],
) -> Result<AmiGroups, AmiRequirementsError> {
    let parsed = parsed_amis(amis)?;
    let mut groups: AmiGroups = parsed
        .iter()
        .map(|(a, _)| (a.id.clone(), Vec::new()))
        .collect();
    for it in instance_types {
        if let Some(index) = parsed.iter().position(|(_, requirements)| {
            it.requirements
                .is_compatible(requirements, AllowUndefined::None)
        }) {
            groups[index].1.push(Arc::clone(it));
        }
    }
    // Two status entries may name the same image (one per variant): merge them.
    let mut merged: AmiGroups = Vec::new();
    for (id, types) in groups.into_iter().filter(|(_, t)| !t.is_empty()) {
        match merged.iter_mut().find(|(existing, _)| *existing == id) {
            Some((_, existing)) => existing.extend(types),
            None => merged.push((id, types)),
        }
    }
    Ok(merged)
}

/// Whether an AMI serves instances without GPUs or accelerators (the standard variant).
#[must_use]
pub fn is_standard_variant(requirements: &Requirements) -> bool {
    let standard = Requirements::from_node_selector_requirements(
        &Variant::Standard
            .requirements()
            .iter()
            .map(|r| NodeSelectorRequirement {
                key: r.key.clone(),
                operator: r.operator.clone(),
                values: Some(r.values.clone()),
            })
            .collect::<Vec<_>>(),
    );
    standard.is_ok_and(|standard| requirements.is_compatible(&standard, AllowUndefined::None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_core::apis::ec2nodeclass::AmiRequirement;
    use karpenter_core::apis::labels::{ARCH, INSTANCE_GPU_COUNT, INSTANCE_TYPE};
    use karpenter_core::domain::instance_type::Overhead;
    use karpenter_core::domain::requirements::Requirement;
    use karpenter_core::domain::resources::Resources;

    fn it(name: &str, arch: &str, gpus: Option<&str>) -> Arc<InstanceType> {
        let gpu = match gpus {
            Some(count) => Requirement::in_values(INSTANCE_GPU_COUNT, &[count]),
            None => Requirement::does_not_exist(INSTANCE_GPU_COUNT),
        };
        Arc::new(InstanceType::new(
            name,
            Requirements::from_requirements([
                Requirement::in_values(INSTANCE_TYPE, &[name]),
                Requirement::in_values(ARCH, &[arch]),
                gpu,
            ]),
            Vec::new(),
            Resources::default(),
            Overhead::default(),
        ))
    }

    fn ami(id: &str, requirements: &[(&str, &str, &[&str])]) -> Ami {
        Ami {
            id: id.into(),
            name: None,
            deprecated: None,
            requirements: requirements
                .iter()
                .map(|(k, o, v)| AmiRequirement {
                    key: (*k).into(),
                    operator: (*o).into(),
                    values: v.iter().map(|s| (*s).to_owned()).collect(),
                })
                .collect(),
        }
    }

    #[test]
    fn types_map_to_the_first_compatible_ami_in_status_order() {
        let amis = [
            ami(
                "ami-gpu",
                &[
                    (ARCH, "In", &["amd64"]),
                    (INSTANCE_GPU_COUNT, "Exists", &[]),
                ],
            ),
            ami(
                "ami-x86",
                &[
                    (ARCH, "In", &["amd64"]),
                    (INSTANCE_GPU_COUNT, "DoesNotExist", &[]),
                ],
            ),
            ami("ami-arm", &[(ARCH, "In", &["arm64"])]),
        ];
        let types = [
            it("m5.large", "amd64", None),
            it("g5.xlarge", "amd64", Some("1")),
            it("m7g.large", "arm64", None),
            it("x.weird", "s390x", None),
        ];
        let mapped = map_to_instance_types(&types, &amis).expect("valid");
        let names: Vec<(&str, Vec<&str>)> = mapped
            .iter()
            .map(|(id, ts)| (id.as_str(), ts.iter().map(|t| t.name.as_str()).collect()))
            .collect();
        assert_eq!(
            names,
            [
                ("ami-gpu", vec!["g5.xlarge"]),
                ("ami-x86", vec!["m5.large"]),
                ("ami-arm", vec!["m7g.large"]),
            ]
        );
        let parsed = parsed_amis(&amis).expect("valid");
        assert!(!is_standard_variant(&parsed[0].1));
        assert!(is_standard_variant(&parsed[1].1));
        assert!(
            is_standard_variant(&parsed[2].1),
            "arch-only images are standard"
        );
    }

    #[test]
    fn a_bad_operator_in_the_status_names_the_ami() {
        let error = map_to_instance_types(&[], &[ami("ami-1", &[(ARCH, "Near", &["x"])])])
            .expect_err("refused");
        assert_eq!(error.ami, "ami-1");
        assert!(error.to_string().starts_with("status.amis[0] (ami-1)"));
    }
}
