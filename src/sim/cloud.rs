//! The `CloudProvider` the simulated daemon runs with: the AWS cloud provider of
//! `karpenter_actors` over kwok's EC2 and Pricing, exactly as `karpenter run` builds it over the
//! SDK adapters. The catalogue and prices are loaded once before the actors start (a simulation
//! is shorter than the 12-hour refresh), so the first provisioning run already sees every
//! instance type.

use std::sync::Arc;

use crate::sim::scenario::file::Scenario;
use karpenter_actors::kwok::cloud_provider::{self as kwok_cloud, KwokCloudDeps};
use karpenter_actors::ports::clock::Clock;
use karpenter_actors::ports::cloud_provider::CloudProvider;
use karpenter_actors::ports::cluster_view::ClusterView;
use karpenter_actors::providers::unavailable::UnavailableOfferings;
use karpenter_core::domain::userdata::ClusterInfo;

use super::scenario::SimulationError;
use super::world::KwokAws;

/// The cloud provider, the ICE cache it writes and the cluster facts its user data uses.
#[derive(Debug, Clone)]
pub struct SimulatedCloud {
    pub cloud: Arc<dyn CloudProvider>,
    pub unavailable: Arc<UnavailableOfferings>,
    pub cluster_info: ClusterInfo,
}

/// The simulation's cloud provider over `world`, reading node classes from `view` (one per
/// daemon process, as in production).
pub async fn cloud_provider(
    world: &KwokAws,
    view: Arc<dyn ClusterView>,
    clock: Arc<dyn Clock>,
    scenario: &Scenario,
) -> Result<SimulatedCloud, SimulationError> {
    let settings = kwok_cloud::settings(&scenario.region, &scenario.cluster_name);
    let cluster_info = settings.cluster.clone();
    let cloud = kwok_cloud::cloud_provider(KwokCloudDeps {
        ec2: Arc::clone(&world.ec2),
        pricing: Some(Arc::clone(&world.pricing)),
        view,
        clock,
        settings,
    })
    .await
    .map_err(|error| SimulationError::Kwok(format!("the AWS cloud provider over kwok: {error}")))?;
    Ok(SimulatedCloud {
        unavailable: Arc::clone(&cloud.providers().unavailable),
        cloud,
        cluster_info,
    })
}
