//! The `CloudProvider` the simulated daemon runs with. It is the AWS `CloudProvider` of
//! `karpenter_actors` over kwok's ports once that lands on main; until then this stand-in
//! answers every call with an error saying so (nothing launches, and the report shows the
//! pods pending), so the rest of the simulation can be built and run.

use std::sync::Arc;

use async_trait::async_trait;
use karpenter_actors::apis::{NodeClaim, NodePool};
use karpenter_actors::domain::instance_type::InstanceType;
use karpenter_actors::ports::cloud_provider::{
    AWS_REPAIR_POLICIES, CloudProvider, CloudProviderError, DriftReason, RepairPolicy,
};

use karpenter_actors::ports::clock::Clock;
use karpenter_actors::ports::cluster_view::ClusterView;
use karpenter_config::scenario::Scenario;

use super::scenario::SimulationError;
use super::world::KwokAws;

/// The reason every call of the stand-in fails with.
const NOT_WIRED: &str = "the AWS CloudProvider over kwok is not on this branch yet";

/// See the module docs.
#[derive(Debug, Default)]
pub struct UnwiredCloudProvider;

fn not_wired() -> CloudProviderError {
    CloudProviderError::Create {
        reason: "CloudProviderNotWired".to_owned(),
        message: NOT_WIRED.to_owned(),
    }
}

#[async_trait]
impl CloudProvider for UnwiredCloudProvider {
    async fn create(&self, _nodeclaim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        Err(not_wired())
    }
    async fn delete(&self, _nodeclaim: &NodeClaim) -> Result<(), CloudProviderError> {
        Err(not_wired())
    }
    async fn get(&self, _provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        Err(not_wired())
    }
    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        Err(not_wired())
    }
    async fn instance_types(
        &self,
        _nodepool: &NodePool,
    ) -> Result<Vec<Arc<InstanceType>>, CloudProviderError> {
        Err(not_wired())
    }
    async fn is_drifted(
        &self,
        _nodeclaim: &NodeClaim,
    ) -> Result<Option<DriftReason>, CloudProviderError> {
        Ok(None)
    }
    fn repair_policies(&self) -> &'static [RepairPolicy] {
        AWS_REPAIR_POLICIES
    }
    fn name(&self) -> &'static str {
        "kwok-unwired"
    }
}

/// The simulation's cloud provider over `world`, reading node classes from `view` (one per
/// daemon process, as in production).
pub async fn cloud_provider(
    _world: &KwokAws,
    _view: Arc<dyn ClusterView>,
    _clock: Arc<dyn Clock>,
    _scenario: &Scenario,
) -> Result<Arc<dyn CloudProvider>, SimulationError> {
    Ok(Arc::new(UnwiredCloudProvider))
}
