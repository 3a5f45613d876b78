//! The daemon of a simulation: settings a simulated cluster needs ([`simulated_settings`]) and
//! one daemon process over the emulator and kwok.
//!
//! ```text
//! ClusterIngress (own watchers) -> store synced -> cloud provider over kwok (catalogue loaded)
//!   -> actor kit (the scenario's fault plan) -> Daemon (inline solves) -> pump of the changes
//! ```

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use karpenter_actors::daemon::StartOptions;
use karpenter_actors::deps::{ClusterVersion, Deps};
use karpenter_actors::metrics::Metrics;
use karpenter_actors::ports::cloud_provider::CloudProvider;
use karpenter_actors::ports::cluster_view::ClusterView;
use karpenter_actors::runtime::{ActorKit, KitOptions};
use karpenter_config::{HttpUrl, Settings};
use kube::Client;
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;

use super::error::SimulationError;
use super::file::Scenario;
use super::load::LoadedScenario;
use crate::daemon::{ChangeFeed, DaemonSlot, pump};
use crate::http::MetricsRegistries;
use crate::kube::cluster_api::KubeClusterApi;
use crate::kube::ingress::ClusterIngress;
use crate::sim::clock::SimClock;
use crate::sim::cloud::cloud_provider;
use crate::sim::world::KwokAws;

/// The API endpoint the simulated cluster claims to have (user data needs one).
const SIMULATED_ENDPOINT: &str = "https://simulated.eks.amazonaws.com";

/// The daemon's settings in a simulation.
#[must_use]
pub fn simulated_settings(scenario: &Scenario) -> Settings {
    Settings {
        cluster_name: Some(scenario.cluster_name.clone()),
        aws_region: Some(scenario.region.clone()),
        interruption_queue: Some(scenario.cluster_name.clone()),
        cluster_endpoint: HttpUrl::parse(SIMULATED_ENDPOINT).ok(),
        disable_leader_election: true,
        ..Settings::default()
    }
}

/// The daemon as one process runs it: its own watchers (unless it shares the first ones),
/// actor kit, actors and metrics.
pub(super) struct DaemonProcess {
    pub(super) kit: ActorKit,
    pub(super) slot: DaemonSlot,
    pub(super) registries: MetricsRegistries,
    pub(super) dropped: Arc<AtomicU64>,
    pub(super) tasks: Vec<JoinHandle<()>>,
}

impl DaemonProcess {
    /// Starts the watchers of `ingress` and the actors over them; returns the store too.
    pub(super) async fn start(
        loaded: &LoadedScenario,
        clock: SimClock,
        client: &Client,
        world: &KwokAws,
        mut ingress: ClusterIngress,
    ) -> Result<(Self, Arc<dyn ClusterView>, Arc<dyn CloudProvider>), SimulationError> {
        let feed = ChangeFeed::subscribe(&mut ingress);
        let dropped = feed.dropped_counter();
        let state = ingress.state();
        let mut tasks = vec![tokio::task::spawn_local(ingress.run())];
        state
            .wait_until_ready()
            .await
            .map_err(|_| SimulationError::Sync)?;
        let view: Arc<dyn ClusterView> = Arc::new(state);
        let simulated =
            cloud_provider(world, Arc::clone(&view), Arc::new(clock), &loaded.scenario).await?;
        let cloud = Arc::clone(&simulated.cloud);
        let mut registry = Registry::default();
        let kit = ActorKit::new(
            &mut registry,
            KitOptions {
                faults: loaded.actor_faults.clone(),
                ..KitOptions::default()
            },
        );
        let reporter = kube::runtime::events::Reporter {
            controller: "karpenter".to_owned(),
            instance: Some("karpenter-simulated".to_owned()),
        };
        let deps = Deps {
            settings: Arc::new(simulated_settings(&loaded.scenario)),
            clock: Arc::new(clock),
            cluster: Arc::new(KubeClusterApi::new(client.clone(), reporter)),
            view: Arc::clone(&view),
            cloud: Arc::clone(&cloud),
            aws: world.ports(),
            unavailable: simulated.unavailable,
            cluster_info: simulated.cluster_info,
            region: loaded.scenario.region.clone(),
            kubernetes_version: ClusterVersion::default(),
            metrics: Arc::new(Metrics::register(&mut registry)),
        };
        let slot = DaemonSlot::new();
        let mut daemon_registry = Registry::default();
        // Inline solves: a run ends at the same simulated instant however fast this machine is.
        let options = StartOptions {
            inline_solve: true,
            ..StartOptions::default()
        };
        slot.start_with(&kit, deps, &mut daemon_registry, options)
            .map_err(SimulationError::Actors)?;
        let registries = MetricsRegistries::new(registry);
        registries.add(daemon_registry);
        tasks.push(tokio::task::spawn_local(pump(feed, slot.clone())));
        Ok((
            Self {
                kit,
                slot,
                registries,
                dropped,
                tasks,
            },
            view,
            cloud,
        ))
    }

    pub(super) fn escalated(&self) -> bool {
        self.slot
            .get()
            .is_some_and(|s| s.root.escalation().is_some())
    }
}
