//! `is_drifted`, the provider part of drift (Karpenter's `pkg/cloudprovider/drift.go`), first
//! hit wins: `NodeClassDrift` (the class's static hash differs from the one stamped on the
//! NodeClaim at launch, same hash version), then, from the instance in EC2: `AMIDrift` (its
//! image is not the AMI its instance type maps to now), `SecurityGroupDrift` (its groups differ
//! from the class's), `SubnetDrift` (its subnet left the class's), `CapacityReservationDrift`
//! (its reservation is no longer selected; only with the `ReservedCapacity` gate, as the
//! instance port does not report reservations otherwise).

use std::collections::BTreeSet;

use super::AwsCloudProvider;
use crate::ports::cloud_provider::{CloudProviderError, DriftReason};
use crate::ports::ec2::Instance;
use crate::providers::ami_mapping::map_to_instance_types;
use karpenter_core::apis::labels::annotation;
use karpenter_core::apis::nodeclaim::provider_id;
use karpenter_core::apis::{EC2NodeClass, SlimNodeClaim, labels};

/// `NodeClassDrift` when both carry a hash of the same version and the hashes differ.
#[must_use]
pub fn static_drift(nodeclaim: &SlimNodeClaim, nodeclass: &EC2NodeClass) -> Option<DriftReason> {
    let class_hash = annotation(&nodeclass.metadata, labels::EC2NODECLASS_HASH)?;
    let class_version = annotation(&nodeclass.metadata, labels::EC2NODECLASS_HASH_VERSION)?;
    let claim_hash = annotation(&nodeclaim.metadata, labels::EC2NODECLASS_HASH)?;
    let claim_version = annotation(&nodeclaim.metadata, labels::EC2NODECLASS_HASH_VERSION)?;
    (class_version == claim_version && class_hash != claim_hash)
        .then_some(DriftReason::NodeClassDrift)
}

/// The instance-based reasons, in Karpenter's order, given the AMI its type maps to now.
fn instance_drift(
    instance: &Instance,
    nodeclass: &EC2NodeClass,
    mapped_ami: Option<&str>,
    reserved_capacity: bool,
) -> Option<DriftReason> {
    let status = nodeclass.status.as_ref()?;
    if mapped_ami != Some(instance.image_id.as_str()) {
        return Some(DriftReason::AmiDrift);
    }
    let wanted: BTreeSet<&str> = status
        .security_groups
        .iter()
        .map(|g| g.id.as_str())
        .collect();
    let has: BTreeSet<&str> = instance
        .security_group_ids
        .iter()
        .map(String::as_str)
        .collect();
    if wanted != has {
        return Some(DriftReason::SecurityGroupDrift);
    }
    if !status.subnets.iter().any(|s| s.id == instance.subnet_id) {
        return Some(DriftReason::SubnetDrift);
    }
    if let Some(reservation) = instance
        .capacity_reservation_id
        .as_ref()
        .filter(|_| reserved_capacity)
        && !status
            .capacity_reservations
            .iter()
            .any(|r| &r.id == reservation)
    {
        return Some(DriftReason::CapacityReservationDrift);
    }
    None
}

impl AwsCloudProvider {
    pub(super) async fn drift(
        &self,
        nodeclaim: &SlimNodeClaim,
    ) -> Result<Option<DriftReason>, CloudProviderError> {
        let Some(pool) = nodeclaim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::NODEPOOL))
            .and_then(|name| self.view.nodepool(name))
        else {
            return Ok(None);
        };
        let Some(nodeclass) = self.nodeclass_of_pool(&pool) else {
            return Ok(None);
        };
        if let Some(reason) = static_drift(nodeclaim, &nodeclass) {
            return Ok(Some(reason));
        }
        let class_name = nodeclass.metadata.name.clone().unwrap_or_default();
        let incomplete = |message: String| CloudProviderError::NodeClassIncomplete {
            nodeclass: class_name.clone(),
            message,
        };
        let status = nodeclass.status.clone().unwrap_or_default();
        if status.amis.is_empty() {
            return Err(incomplete("no amis exist given constraints".to_owned()));
        }
        if status.security_groups.is_empty() {
            return Err(incomplete(
                "no security groups are present in the status".to_owned(),
            ));
        }
        if status.subnets.is_empty() {
            return Err(incomplete("no subnets are discovered".to_owned()));
        }
        let instance = self
            .instance(provider_id(nodeclaim).unwrap_or_default())
            .await?;
        let type_name = nodeclaim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::INSTANCE_TYPE))
            .cloned()
            .unwrap_or_default();
        let instance_types = self.pool_instance_types(&pool)?.unwrap_or_default();
        let Some(instance_type) = instance_types.iter().find(|it| it.name == type_name) else {
            return Err(incomplete(format!(
                "finding node instance type {type_name:?}: not among the nodepool's instance types"
            )));
        };
        let mapped = map_to_instance_types(std::slice::from_ref(instance_type), &status.amis)
            .map_err(|e| incomplete(e.to_string()))?;
        let mapped_ami = mapped.first().map(|(id, _)| id.as_str());
        Ok(instance_drift(
            &instance,
            &nodeclass,
            mapped_ami,
            self.reserved_capacity,
        ))
    }
}
