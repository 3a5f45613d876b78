//! The high-level cloud provider port (Karpenter's `CloudProvider`, reference 4.1): what the
//! NodeClaim, NodePool, disruption and garbage-collection actors ask of a cloud.
//!
//! The AWS implementation is built from the providers in `crate::providers` over the narrow ports;
//! kwok's is the same code over `crate::kwok`. Instance types are the scheduler's domain model
//! ([`karpenter_core::domain::instance_type::InstanceType`]), so the provisioner hands them straight to
//! the solver. `crate::testing::FakeCloudProvider` is the recording in-memory one for actor tests.

use std::borrow::Cow;
use std::sync::Arc;

use async_trait::async_trait;

use super::aws_error::AwsError;
use karpenter_core::apis::EC2NodeClass;
use karpenter_core::apis::nodeclaim::NodeClaim;
use karpenter_core::apis::nodepool::NodePool;
use karpenter_core::apis::{SlimNode, SlimNodeClaim};
use karpenter_core::domain::instance_type::InstanceType;
pub use karpenter_core::domain::repair::{AWS_REPAIR_POLICIES, RepairPolicy};
use karpenter_core::domain::tags::Tags;

/// Why a NodeClaim's instance no longer matches its `NodeClass` (provider part of drift).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DriftReason {
    NodeClassDrift,
    AmiDrift,
    SecurityGroupDrift,
    SubnetDrift,
    CapacityReservationDrift,
}

impl DriftReason {
    /// Karpenter's reason string, used in the `Drifted` condition.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            DriftReason::NodeClassDrift => "NodeClassDrift",
            DriftReason::AmiDrift => "AMIDrift",
            DriftReason::SecurityGroupDrift => "SecurityGroupDrift",
            DriftReason::SubnetDrift => "SubnetDrift",
            DriftReason::CapacityReservationDrift => "CapacityReservationDrift",
        }
    }
}

/// Failures of the high-level port, as the core controllers tell them apart.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CloudProviderError {
    /// No offering could be launched; the NodeClaim is deleted and the pods re-provisioned.
    #[error("insufficient capacity for nodeclaim {nodeclaim}: {message}")]
    InsufficientCapacity { nodeclaim: String, message: String },
    /// The `NodeClass` is not ready; the NodeClaim is deleted.
    #[error("nodeclass {nodeclass} is not ready")]
    NodeClassNotReady { nodeclass: String },
    /// The instance is gone; `delete` returns this once termination finished.
    #[error("instance {instance_id} not found")]
    NodeClaimNotFound { instance_id: String },
    /// A launch failed for a reason shown on the `Launched` condition; retried with backoff.
    #[error("{message}")]
    Create { reason: String, message: String },
    /// The `NodeClass` lacks what the call needs (resolved AMIs, subnets, security groups, an
    /// instance type it no longer offers) or holds a value that cannot be used.
    #[error("ec2nodeclass {nodeclass}: {message}")]
    NodeClassIncomplete { nodeclass: String, message: String },
    /// A provider id that does not name an instance.
    #[error("invalid provider id {provider_id:?}: expected <provider>:///<zone>/<instance-id>")]
    InvalidProviderId { provider_id: String },
    #[error(transparent)]
    Aws(#[from] AwsError),
}

impl CloudProviderError {
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            CloudProviderError::InsufficientCapacity { .. } => "insufficient_capacity",
            CloudProviderError::NodeClassNotReady { .. } => "nodeclass_not_ready",
            CloudProviderError::NodeClaimNotFound { .. } => "nodeclaim_not_found",
            CloudProviderError::Create { .. } => "create",
            CloudProviderError::NodeClassIncomplete { .. } => "nodeclass_incomplete",
            CloudProviderError::InvalidProviderId { .. } => "invalid_provider_id",
            CloudProviderError::Aws(error) => error.category(),
        }
    }
}

/// A NodePool's instance types as the provider keeps them: shared, so a caller that reads them
/// (every drift check, every provisioning run) copies no list.
pub type InstanceTypes = Arc<Vec<Arc<InstanceType>>>;

/// Karpenter's `CloudProvider`.
#[async_trait]
pub trait CloudProvider: Send + Sync + std::fmt::Debug {
    /// Launches an instance for the NodeClaim and returns it hydrated (labels, provider id,
    /// image id, capacity, allocatable).
    async fn create(&self, nodeclaim: &NodeClaim) -> Result<NodeClaim, CloudProviderError>;
    /// Starts termination; returns `NodeClaimNotFound` once the instance is gone.
    async fn delete(&self, nodeclaim: &NodeClaim) -> Result<(), CloudProviderError>;
    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError>;
    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError>;
    /// [`Self::list`] with only what the garbage collector reads of each instance: name,
    /// launch group annotation, creation and deletion times, class and provider id, without
    /// labels or resources (at 5,000 instances the hydrated list is tens of megabytes for a
    /// sweep that reads none of them). By default the full list.
    async fn list_brief(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        self.list().await
    }
    /// Every instance type of the NodePool's `NodeClass`, unavailable offerings included.
    async fn instance_types(
        &self,
        nodepool: &NodePool,
    ) -> Result<InstanceTypes, CloudProviderError>;
    async fn is_drifted(
        &self,
        nodeclaim: &SlimNodeClaim,
    ) -> Result<Option<DriftReason>, CloudProviderError>;
    /// The (instance type, AMI id) pairs `EC2NodeClass` validation dry-runs with, best first
    /// (dynamic instance-type validation, new in v1.5): types the class's NodePools could launch,
    /// on the AMI each maps to. `nodeclass` carries the status being validated. Empty: the
    /// validation uses Karpenter's fallback types.
    fn validation_launches(
        &self,
        _nodeclass: &EC2NodeClass,
    ) -> Result<Vec<(String, String)>, CloudProviderError> {
        Ok(Vec::new())
    }
    /// Tags the NodeClaim's instance with those of `tags` whose keys it does not carry yet
    /// (Karpenter AWS's `nodeclaim.tagging` reads the instance's tags first, so a tag a user set
    /// keeps its value and a repeated call writes nothing). `NodeClaimNotFound` when the instance
    /// is gone.
    async fn tag_instance(
        &self,
        nodeclaim: &SlimNodeClaim,
        tags: &Tags,
    ) -> Result<(), CloudProviderError>;
    /// A node registered for the NodeClaim: the cloud provider may learn from what it reports
    /// (the AWS provider records its memory capacity for the next launches of its type, as
    /// Karpenter's `providers.instancetype.capacity` controller). No default: a decorator that
    /// forgot to pass it on would silently stop the learning.
    fn node_registered(&self, nodeclaim: &SlimNodeClaim, node: &SlimNode);
    /// The node conditions that make Node Repair replace a node (empty: no repair).
    fn repair_policies(&self) -> Cow<'static, [RepairPolicy]>;
    fn name(&self) -> &'static str;
}

/// An EC2 instance's provider id, `aws:///<zone>/<instance-id>` (what [`parse_provider_id`]
/// reads).
#[must_use]
pub fn provider_id(zone: &str, instance_id: &str) -> String {
    format!("aws:///{zone}/{instance_id}")
}

/// Splits `<provider>:///<zone>/<instance-id>` (any provider prefix, as v1.5 accepts for kwok).
pub fn parse_provider_id(provider_id: &str) -> Result<(&str, &str), CloudProviderError> {
    let invalid = || CloudProviderError::InvalidProviderId {
        provider_id: provider_id.to_owned(),
    };
    let (_, rest) = provider_id.split_once(":///").ok_or_else(invalid)?;
    let (zone, id) = rest.rsplit_once('/').ok_or_else(invalid)?;
    if id.is_empty() {
        return Err(invalid());
    }
    Ok((zone, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_of_any_provider_are_parsed() {
        assert_eq!(
            parse_provider_id("aws:///us-west-2a/i-0123").ok(),
            Some(("us-west-2a", "i-0123"))
        );
        assert_eq!(
            parse_provider_id("kwok-aws:///us-west-2b/i-9").ok(),
            Some(("us-west-2b", "i-9"))
        );
        assert!(parse_provider_id("i-0123").is_err());
        assert!(parse_provider_id("aws:///us-west-2a/").is_err());
    }

    #[test]
    fn a_formatted_provider_id_parses_back() {
        let id = provider_id("us-west-2c", "i-0abc");
        assert_eq!(id, "aws:///us-west-2c/i-0abc");
        assert_eq!(parse_provider_id(&id).ok(), Some(("us-west-2c", "i-0abc")));
    }

    #[test]
    fn accelerated_hardware_is_repaired_sooner_than_readiness() {
        let accelerated = AWS_REPAIR_POLICIES
            .iter()
            .find(|p| p.condition_type == "AcceleratedHardwareReady");
        assert_eq!(
            accelerated.map(|p| p.toleration),
            Some(std::time::Duration::from_mins(10))
        );
        assert_eq!(AWS_REPAIR_POLICIES.len(), 7);
    }

    mod provider_id_props {
        use proptest::prelude::*;

        use super::*;

        fn config() -> ProptestConfig {
            ProptestConfig {
                cases: 256,
                failure_persistence: None,
                ..ProptestConfig::default()
            }
        }

        fn assert_invalid(provider_id: &str) -> Result<(), TestCaseError> {
            match parse_provider_id(provider_id) {
                Err(error @ CloudProviderError::InvalidProviderId { .. }) => {
                    prop_assert_eq!(
                        &error,
                        &CloudProviderError::InvalidProviderId {
                            provider_id: provider_id.to_owned()
                        }
                    );
                    let message = error.to_string();
                    prop_assert!(message.contains(&format!("{provider_id:?}")), "{message}");
                    prop_assert_eq!(error.category(), "invalid_provider_id");
                }
                other => prop_assert!(false, "{provider_id:?} gave {other:?}"),
            }
            Ok(())
        }

        proptest! {
            #![proptest_config(config())]

            #[test]
            fn prop_provider_id_parsing_never_panics(
                provider_id in prop_oneof![any::<String>(), "[a-z:/.-]{0,6}:///[a-z0-9/-]{0,12}"]
            ) {
                if let Ok((zone, id)) = parse_provider_id(&provider_id) {
                    prop_assert!(!id.is_empty());
                    prop_assert!(!id.contains('/'));
                    let suffix = format!("{zone}/{id}");
                    prop_assert!(provider_id.ends_with(&suffix), "{provider_id:?}");
                }
            }

            #[test]
            fn prop_aws_provider_ids_round_trip(
                provider in prop::sample::select(vec!["aws", "kwok-aws", "kwok"]),
                zone in "[a-z]{2}(-gov)?-[a-z]{4,9}-[1-9][a-z]",
                id in "i-[0-9a-f]{8,17}",
            ) {
                let provider_id = format!("{provider}:///{zone}/{id}");
                prop_assert_eq!(
                    parse_provider_id(&provider_id).ok(),
                    Some((zone.as_str(), id.as_str()))
                );
            }

            #[test]
            fn prop_provider_ids_without_the_separator_are_invalid(
                provider_id in any::<String>().prop_filter("has :///", |s| !s.contains(":///"))
            ) {
                assert_invalid(&provider_id)?;
            }

            #[test]
            fn prop_provider_ids_without_an_instance_id_are_invalid(
                prefix in "[a-z-]{0,8}",
                zone in "[a-z0-9/-]{0,12}",
            ) {
                assert_invalid(&format!("{prefix}:///{zone}/"))?;
                assert_invalid(&format!("{prefix}:///"))?;
            }
        }
    }
}
