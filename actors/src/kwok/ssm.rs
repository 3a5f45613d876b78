//! kwok's SSM: parameters in memory, seeded with the public AMI aliases Karpenter resolves.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;

use super::faults::Faults;
use crate::ports::aws_error::{AwsError, AwsService};
use crate::ports::ssm::{Parameter, SsmApi};

/// The in-memory SSM.
#[derive(Debug, Default)]
pub struct KwokSsm {
    parameters: Mutex<BTreeMap<String, Parameter>>,
    faults: Faults,
}

impl KwokSsm {
    /// An SSM with the AL2023, AL2, Bottlerocket and Windows aliases of these Kubernetes
    /// versions, pointing at `image_x86` / `image_arm`.
    #[must_use]
    pub fn with_aliases(versions: &[&str], image_x86: &str, image_arm: &str) -> Self {
        let ssm = KwokSsm::default();
        for v in versions {
            for (arch, image) in [("x86_64", image_x86), ("arm64", image_arm)] {
                for variant in ["standard", "nvidia", "neuron"] {
                    ssm.put(&format!("/aws/service/eks/optimized-ami/{v}/amazon-linux-2023/{arch}/{variant}/recommended/image_id"), image);
                }
                for flavour in ["", "-nvidia"] {
                    ssm.put(
                        &format!(
                            "/aws/service/bottlerocket/aws-k8s-{v}{flavour}/{arch}/latest/image_id"
                        ),
                        image,
                    );
                }
            }
            for (suffix, image) in [("", image_x86), ("-arm64", image_arm), ("-gpu", image_x86)] {
                ssm.put(&format!("/aws/service/eks/optimized-ami/{v}/amazon-linux-2{suffix}/recommended/image_id"), image);
            }
            for release in ["2019", "2022"] {
                ssm.put(&format!("/aws/service/ami-windows-latest/Windows_Server-{release}-English-Core-EKS_Optimized-{v}/image_id"), image_x86);
            }
        }
        ssm
    }

    /// Sets a parameter, bumping its version.
    pub fn put(&self, name: &str, value: &str) {
        let mut parameters = self
            .parameters
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let version = parameters.get(name).map_or(1, |p| p.version + 1);
        parameters.insert(
            name.to_owned(),
            Parameter {
                name: name.to_owned(),
                value: value.to_owned(),
                version,
            },
        );
    }

    /// Points every parameter whose value is `old` at `new` (a new image release behind the
    /// public aliases), bumping their versions; returns how many moved.
    pub fn repoint(&self, old: &str, new: &str) -> usize {
        let names: Vec<String> = self
            .parameters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .filter(|p| p.value == old)
            .map(|p| p.name.clone())
            .collect();
        for name in &names {
            self.put(name, new);
        }
        names.len()
    }

    #[must_use]
    pub fn faults(&self) -> &Faults {
        &self.faults
    }
}

#[async_trait]
impl SsmApi for KwokSsm {
    async fn get_parameter(&self, name: &str) -> Result<Parameter, AwsError> {
        self.faults.check("GetParameter", name)?;
        self.parameters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
            .ok_or_else(|| {
                AwsError::new(
                    AwsService::Ssm,
                    "GetParameter",
                    Some("ParameterNotFound"),
                    format!("Parameter {name} not found."),
                )
                .with_status(400)
            })
    }
}
