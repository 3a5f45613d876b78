//! The daemon of a simulation: the settings a simulated cluster needs ([`simulated_settings`])
//! and the inputs and options [`crate::daemon::DaemonAssembly`] builds a simulated daemon from.
//!
//! ```text
//! cluster discovery (crate::discovery over kwok's EKS and the emulator: the endpoint and service
//!   CIDR, found as `karpenter run` finds them; no kube-dns Service, so no DNS address)
//! the Kubernetes version from the emulator's `/version` (its source handed to the daemon, whose
//!   VersionActor reads it again every 5 minutes)
//! emulator client + kwok's AWS ports + CloudSource::Loaded (the AWS cloud provider of
//!   `karpenter run`, over kwok's EC2 and Pricing, its catalogue loaded once before the actors
//!   start: a simulation is shorter than the 12-hour refresh, and the first provisioning run
//!   must see every instance type)
//!   -> DaemonAssembly: own watchers -> store synced -> cloud -> actors (the scenario's fault
//!      plan, inline solves) -> pump; no leader election, no HTTP (the simulation serves its own)
//! ```

use std::sync::Arc;

use karpenter_actors::daemon::StartOptions;
use karpenter_actors::kwok::cloud_provider as kwok_cloud;
use karpenter_actors::ports::version::KubernetesVersionSource;
use karpenter_actors::runtime::KitOptions;
use karpenter_config::Settings;
use karpenter_core::domain::version;
use kube::Client;

use super::error::SimulationError;
use super::file::Scenario;
use super::load::LoadedScenario;
use crate::cloud::CloudSource;
use crate::daemon::{ActorStart, DaemonAssembly, DaemonInputs, DaemonOptions};
use crate::discovery::{DiscoveryInputs, KubeCa, discover};
use crate::kube::version::KubeVersionSource;
use crate::sim::clock::SimClock;
use crate::sim::world::KwokAws;

/// The simulated daemon's name on the events it writes.
const SIMULATED_IDENTITY: &str = "karpenter-simulated";

/// The daemon's settings in a simulation.
#[must_use]
pub fn simulated_settings(scenario: &Scenario) -> Settings {
    Settings {
        cluster_name: Some(scenario.cluster_name.clone()),
        aws_region: Some(scenario.region.clone()),
        interruption_queue: Some(scenario.cluster_name.clone()),
        disable_leader_election: true,
        feature_gates: scenario.feature_gates,
        ..Settings::default()
    }
}

/// Starts one daemon process over the cluster: its own watchers, actor kit, actors and
/// metrics (call inside the simulation's actix System).
pub(super) async fn start_daemon(
    loaded: &LoadedScenario,
    clock: SimClock,
    client: &Client,
    world: &KwokAws,
) -> Result<DaemonAssembly, SimulationError> {
    let scenario = &loaded.scenario;
    let settings = simulated_settings(scenario);
    // Found as `karpenter run` finds them: the endpoint and service CIDR from kwok's EKS (no
    // CLUSTER_ENDPOINT is set); the simulated cluster has no kube-dns Service.
    let cluster_info = discover(DiscoveryInputs {
        settings: &settings,
        eks: world.eks.as_ref(),
        client,
        kube_ca: KubeCa::None,
    })
    .await
    .map_err(SimulationError::Discovery)?;
    // The version as `karpenter run` reads it without EKS_CONTROL_PLANE: the emulator's
    // `/version`, read again every 5 minutes by the actors' VersionActor.
    let version_source: Arc<dyn KubernetesVersionSource> =
        Arc::new(KubeVersionSource::new(client.clone()));
    let found = version_source
        .version()
        .await
        .map_err(SimulationError::Version)?;
    let kubernetes_version = version::check(found)
        .map_err(SimulationError::UnsupportedVersion)?
        .version();
    let mut provider_settings = kwok_cloud::settings(&scenario.region, &scenario.cluster_name);
    provider_settings.cluster = cluster_info;
    let inputs = DaemonInputs {
        settings: Arc::new(settings),
        client: client.clone(),
        aws: world.ports(),
        cluster_info: provider_settings.cluster.clone(),
        cloud: CloudSource::Loaded {
            ec2: world.ec2.clone(),
            pricing: Some(world.pricing.clone()),
            settings: provider_settings,
        },
        clock: Arc::new(clock),
        region: scenario.region.clone(),
        kubernetes_version,
        version_source,
        identity: SIMULATED_IDENTITY.to_owned(),
    };
    let options = DaemonOptions {
        actors: ActorStart::AfterSync,
        // Inline solves: a run ends at the same simulated instant however fast this machine is.
        start: StartOptions {
            inline_solve: true,
            ..StartOptions::default()
        },
        kit: KitOptions {
            faults: loaded.actor_faults.clone(),
            ..KitOptions::default()
        },
        endpoints: None,
    };
    Ok(DaemonAssembly::start(inputs, options).await?)
}
