//! The daemon, assembled once for every caller: `karpenter run` over a real API server and the
//! AWS SDK, `karpenter simulate` over the emulator and kwok, the tests over either.
//!
//! ```text
//! DaemonAssembly::start(DaemonInputs, DaemonOptions):
//!   registry -> actor kit (options.kit), Karpenter's shared metrics
//!   endpoints?: metrics server (/metrics, /debug/actors, added routes, bridged daemon routes),
//!     health server (/healthz, /readyz)
//!   ClusterIngress (watchers -> ClusterState) -> ChangeFeed -> pump -> DaemonSlot -> actors
//!   endpoints?: startup probes (cache-synced, crds, aws, interruption-queue) and exit checks
//!   actors: WhenLeading: campaign for the Lease (unless DISABLE_LEADER_ELECTION), pump at once
//!             (changes before the start are dropped), cloud provider built over the store,
//!             the actors started once leading;
//!           AfterSync: the store's first sync, the cloud provider built (a loaded source reads
//!             its catalogue now), the actors started at once, then the pump (changes seen
//!             meanwhile are delivered)
//!   the AWS group (a second root: batchers, ICE expiry, launch-template janitor, catalogue
//!     refresh) starts with the cloud provider, leading or not
//!   a root escalation (either root) -> Exit::Escalated; a lost lease -> Exit::LostLeadership
//! shutdown(grace): in-flight launches get `grace`, the actors stop, the lease is released, the
//!   watchers and servers stop
//! ```
//!
//! What differs between the callers is in [`DaemonOptions`]; the rest is built the same way for
//! all of them.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::FutureExt as _;
use k8s_openapi::api::core::v1::Namespace;
use karpenter_actors::cloud_metrics::{CloudProviderMetrics, MeteredCloudProvider};
use karpenter_actors::cluster_metrics::ClusterMetrics;
use karpenter_actors::condition_metrics::ConditionMetrics;
use karpenter_actors::daemon::StartOptions;
use karpenter_actors::deps::{AwsPorts, ClusterVersion, Deps};
use karpenter_actors::messages::WatchedKind;
use karpenter_actors::metrics::{ClusterStateMetrics, Metrics};
use karpenter_actors::offering_metrics::OfferingMetrics;
use karpenter_actors::ports::clock::Clock;
use karpenter_actors::ports::cloud_provider::CloudProvider;
use karpenter_actors::ports::cluster::ClusterApi;
use karpenter_actors::ports::cluster_view::ChangeMark;
use karpenter_actors::ports::cluster_view::ClusterView;
use karpenter_actors::ports::version::KubernetesVersionSource;
use karpenter_actors::runtime::{ActorKit, KitOptions, RootGroup, SpawnError, StopReason};
use karpenter_config::Settings;
use karpenter_core::domain::userdata::ClusterInfo;
use karpenter_core::domain::version::KubernetesVersion;
use kube::api::PostParams;
use kube::{Api, Client};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use super::changes::{ChangeFeed, DaemonSlot, pump};
use super::gate::{GatedCloudProvider, GatedClusterApi, gated_aws};
use super::probes::{exit_checks, startup_checks};
use super::routes::{DaemonRoutes, bridge};
use crate::cloud::{BuiltCloud, CloudError, CloudSource};
use crate::http::{
    self, CheckResult, HealthChecks, HttpError, HttpServer, MetricsRegistries, Routes,
};
use crate::kube::cluster_api::KubeClusterApi;
use crate::kube::ingress::{ClusterIngress, IngressHealth};
use crate::kube::leader::{Ended, LeaderElector, LeadershipGate, LeaseTiming};
use crate::kube::state::ClusterState;

/// The namespace of the Lease when neither `LEADER_ELECTION_NAMESPACE` nor `SYSTEM_NAMESPACE`
/// is set (the chart sets the release namespace).
const DEFAULT_LEASE_NAMESPACE: &str = "kube-system";
/// The controller name on the events the daemon writes (Karpenter's).
const EVENT_CONTROLLER: &str = "karpenter";
/// How often [`wait_for_launches`] looks again.
const LAUNCH_POLL: Duration = Duration::from_millis(250);

/// What the daemon runs with: built by `karpenter run` from the settings, by the simulation and
/// the tests from the emulator and kwok.
pub struct DaemonInputs {
    pub settings: Arc<Settings>,
    pub client: Client,
    pub aws: AwsPorts,
    /// The cloud provider, built over the daemon's store once the watchers start.
    pub cloud: CloudSource,
    pub clock: Arc<dyn Clock>,
    /// Cluster facts for user data and names (endpoint, CA, DNS, service CIDR).
    pub cluster_info: ClusterInfo,
    /// The AWS region.
    pub region: String,
    /// The cluster's Kubernetes version read at startup, for AMI aliases.
    pub kubernetes_version: KubernetesVersion,
    /// Where the actors' `VersionActor` reads it again every 5 minutes (`/version`, or EKS with
    /// `EKS_CONTROL_PLANE`: `crate::discovery::version_source`).
    pub version_source: Arc<dyn KubernetesVersionSource>,
    /// This replica's name: its holder identity in the Lease (unique per process) and the
    /// instance on the events it writes.
    pub identity: String,
}

impl std::fmt::Debug for DaemonInputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonInputs")
            .field("identity", &self.identity)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

/// How a replica campaigns for the Lease, and the gate its writes pass.
#[derive(Clone)]
pub struct Election {
    pub timing: LeaseTiming,
    /// The client the elector uses; `None` for the daemon's own. `karpenter run` gives it a
    /// client of its own, neither rate-limited nor gated (`crate::kube::client`).
    pub lease_client: Option<Client>,
    /// Open while this replica leads; every write port of the actors checks it. `karpenter run`
    /// also puts it in its kube client and the cloud provider's EC2 port.
    pub gate: LeadershipGate,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("timing", &self.timing)
            .field("own_lease_client", &self.lease_client.is_some())
            .field("gate", &self.gate)
            .finish()
    }
}

impl Election {
    /// Karpenter's timing, the daemon's client, a gate of its own.
    #[must_use]
    pub fn new(timing: LeaseTiming) -> Self {
        Self {
            timing,
            lease_client: None,
            gate: LeadershipGate::new(),
        }
    }
}

/// When the actors start.
#[derive(Debug, Clone)]
pub enum ActorStart {
    /// Once this replica leads the Lease of the settings (at once with
    /// `DISABLE_LEADER_ELECTION`) and the store has listed every kind once (Karpenter's
    /// cluster-state sync). The pump runs from the start and drops the changes it reads before:
    /// starting actors re-read the whole store (`karpenter run`). On a lost lease the actors
    /// stop at once; their writes were refused from the renew deadline on.
    WhenLeading(Election),
    /// Right after the store's first sync, before the pump starts, so the changes seen meanwhile
    /// reach the actors after their start: a simulation's actors start at the same simulated
    /// instant, with the same inputs, on every run.
    AfterSync,
}

/// The HTTP servers of a daemon.
#[derive(Debug)]
pub struct Endpoints {
    /// `/metrics`, `/debug/actors`, [`Self::routes`] and [`Self::daemon_routes`].
    pub metrics_addr: SocketAddr,
    /// `/healthz` and `/readyz`.
    pub health_addr: SocketAddr,
    /// More routes for the metrics server.
    pub routes: Routes,
    /// Routes the actors answer (e.g. `/debug/explain/`), on the metrics server; 503 while this
    /// replica is a standby.
    pub daemon_routes: DaemonRoutes,
}

/// What differs between the daemons the assembly builds.
#[derive(Debug)]
pub struct DaemonOptions {
    pub actors: ActorStart,
    /// Which actor families run, and whether the Provisioner solves inline.
    pub start: StartOptions,
    /// The actor kit's options (a simulation's fault plan).
    pub kit: KitOptions,
    /// The metrics and health servers, with the startup probes and exit checks they serve;
    /// `None` for none (a simulation serves its own routes).
    pub endpoints: Option<Endpoints>,
}

impl DaemonOptions {
    /// `karpenter run`'s: every actor, started when leading, served on `endpoints`.
    #[must_use]
    pub fn leader_elected(lease: LeaseTiming, endpoints: Endpoints) -> Self {
        Self::leader_elected_with(Election::new(lease), endpoints)
    }

    /// As [`Self::leader_elected`], with the election's client and gate given.
    #[must_use]
    pub fn leader_elected_with(election: Election, endpoints: Endpoints) -> Self {
        Self {
            actors: ActorStart::WhenLeading(election),
            start: StartOptions::default(),
            kit: KitOptions::default(),
            endpoints: Some(endpoints),
        }
    }
}

/// Why the daemon could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("serving {what}")]
    Serve {
        what: &'static str,
        #[source]
        source: HttpError,
    },
    #[error("the cluster store never synced")]
    Sync,
    #[error("building the cloud provider")]
    Cloud(#[source] CloudError),
    #[error("starting the actors")]
    Actors(#[source] SpawnError),
}

impl DaemonError {
    /// A bounded label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Serve { source, .. } => source.category(),
            Self::Sync => "sync",
            Self::Cloud(error) => error.category(),
            Self::Actors(_) => "actors",
        }
    }
}

/// Why a running daemon stopped on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// SIGTERM, SIGINT, or the caller's stop.
    Signal,
    /// Another replica holds the lease now (Karpenter exits and restarts as a candidate).
    LostLeadership,
    /// The actors' root supervisor gave up.
    Escalated(String),
    /// The actors could not be started.
    ActorsFailed(String),
}

/// The two servers of [`Endpoints`].
#[derive(Debug)]
struct Servers {
    metrics: HttpServer,
    health: HttpServer,
}

/// A daemon that is running: watchers, the change pump, the actors (once leading), servers.
pub struct DaemonAssembly {
    kit: ActorKit,
    slot: DaemonSlot,
    state: ClusterState,
    cloud: Arc<dyn CloudProvider>,
    registries: MetricsRegistries,
    dropped: Arc<AtomicU64>,
    readiness: HealthChecks,
    liveness: HealthChecks,
    servers: Option<Servers>,
    leading: watch::Receiver<bool>,
    exit: watch::Receiver<Option<Exit>>,
    elector: Option<(oneshot::Sender<()>, JoinHandle<Ended>)>,
    pump: Option<JoinHandle<()>>,
    tasks: Vec<JoinHandle<()>>,
    /// The AWS group's root (AWS cloud sources).
    aws: Option<RootGroup>,
    /// The Kubernetes version the actors use.
    kubernetes_version: ClusterVersion,
}

impl std::fmt::Debug for DaemonAssembly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonAssembly")
            .field("servers", &self.servers)
            .field("leading", &*self.leading.borrow())
            .finish_non_exhaustive()
    }
}

async fn serve_on(
    addr: SocketAddr,
    routes: Routes,
    what: &'static str,
) -> Result<HttpServer, DaemonError> {
    http::serve(addr, routes)
        .await
        .map_err(|source| DaemonError::Serve { what, source })
}

/// `/metrics` (every registry) and `/debug/actors` (the kit's actors).
fn actor_routes(registries: &MetricsRegistries, kit: &ActorKit) -> Routes {
    Routes::new()
        .route(
            http::METRICS_PATH,
            http::metrics_handler(registries.clone()),
        )
        .route(http::ACTORS_PATH, http::actors_handler(kit.clone()))
}

impl DaemonAssembly {
    /// Starts everything (on the actix arbiter of the current thread); the actors start as
    /// `options.actors` says.
    #[expect(
        clippy::too_many_lines,
        reason = "the startup sequence, in order: servers, watchers, checks, election, actors"
    )]
    pub async fn start(inputs: DaemonInputs, options: DaemonOptions) -> Result<Self, DaemonError> {
        let DaemonInputs {
            settings,
            client,
            aws,
            cloud,
            clock,
            cluster_info,
            region,
            kubernetes_version,
            version_source,
            identity,
        } = inputs;
        // One version for every Deps built below, so `Self::kubernetes_version` is the actors'.
        let kubernetes_version = ClusterVersion::new(kubernetes_version);
        let mut registry = Registry::default();
        let kit = ActorKit::new(&mut registry, options.kit);
        // Karpenter's shared families exist (at zero) on a standby replica too.
        let shared_metrics = Arc::new(Metrics::register(&mut registry));
        let cluster_state_metrics = ClusterStateMetrics::register(&mut registry);
        let leader_status = register_leader_status(&mut registry, &settings.leader_election_name);
        let cluster_metrics = Arc::new(
            ClusterMetrics::register(&mut registry)
                .with_pod_times(shared_metrics.pod_times.clone()),
        );
        let cloud_metrics = CloudProviderMetrics::register(&mut registry);
        let condition_metrics = Arc::new(ConditionMetrics::register(&mut registry));
        let offering_metrics = OfferingMetrics::register(&mut registry);
        register_build_info(&mut registry);
        let registries = MetricsRegistries::new(registry);
        for family in shared_metrics
            .text_families()
            .into_iter()
            .chain(cluster_metrics.text_families())
        {
            registries.add_text(family);
        }

        let readiness = HealthChecks::new();
        let liveness = HealthChecks::new();
        let slot = DaemonSlot::new();
        let mut tasks = Vec::new();
        let servers = match options.endpoints {
            Some(endpoints) => {
                let mut metrics_routes = endpoints.routes.route(
                    http::METRICS_PATH,
                    http::metrics_handler(registries.clone()),
                );
                // Karpenter serves its debug handlers only with ENABLE_PROFILING; so do we.
                if settings.enable_profiling {
                    let (bridged, bridge_task) = bridge(slot.clone(), &endpoints.daemon_routes);
                    tasks.push(bridge_task);
                    metrics_routes = metrics_routes
                        .merge(bridged)
                        .route(http::ACTORS_PATH, http::actors_handler(kit.clone()));
                }
                let metrics = serve_on(endpoints.metrics_addr, metrics_routes, "metrics").await?;
                let health = serve_on(
                    endpoints.health_addr,
                    Routes::new()
                        .route(http::HEALTHZ_PATH, liveness.handler())
                        .route(http::READYZ_PATH, readiness.handler()),
                    "health probes",
                )
                .await?;
                Some(Servers { metrics, health })
            }
            None => None,
        };

        let mut ingress = ClusterIngress::new(client.clone());
        ingress.count_undecodable_in(cluster_state_metrics.clone());
        let feed = ChangeFeed::subscribe(&mut ingress);
        let dropped = feed.dropped_counter();
        let state = ingress.state();
        let watch_health = ingress.health();
        tasks.push(tokio::task::spawn_local(ingress.run()));
        tasks.push(tokio::task::spawn_local(monitor_sync(
            state.clone(),
            cluster_state_metrics,
        )));
        registries.before_encode(scrape_cluster_metrics(
            state.clone(),
            Arc::clone(&clock),
            Arc::clone(&cluster_metrics),
            Arc::clone(&condition_metrics),
        ));
        tasks.push(tokio::task::spawn_local(refresh_cluster_metrics(
            state.clone(),
            Arc::clone(&clock),
            cluster_metrics,
            condition_metrics,
        )));
        let mut feed = Some(feed);
        let mut pump_task = None;
        let pump_health = TaskWatch::default();
        if matches!(options.actors, ActorStart::WhenLeading(_)) {
            pump_task = feed.take().map(|feed| {
                tokio::task::spawn_local(pump_health.clone().watch(pump(feed, slot.clone())))
            });
        }

        if servers.is_some() {
            tasks.extend(startup_checks(&readiness, &settings, &client, &aws, &state));
            watch_checks(&liveness, &watch_health);
            liveness.add("change-pump", {
                let pump_health = pump_health.clone();
                move || pump_health.check("the change pump")
            });
        }
        let (exit_tx, exit) = watch::channel::<Option<Exit>>(None);
        let exit_tx = Arc::new(exit_tx);
        if servers.is_some() {
            exit_checks(&readiness, &liveness, &exit);
        }
        let view: Arc<dyn ClusterView> = Arc::new(state.clone());
        let deps = |built: &BuiltCloud, gate: Option<&LeadershipGate>| {
            let cluster: Arc<dyn ClusterApi> = Arc::new(
                KubeClusterApi::new(
                    client.clone(),
                    kube::runtime::events::Reporter {
                        controller: EVENT_CONTROLLER.to_owned(),
                        instance: Some(identity.clone()),
                    },
                )
                .with_clock(Arc::clone(&clock)),
            );
            // Karpenter's call metrics around the cloud provider, inside the gate.
            let metered: Arc<dyn CloudProvider> = Arc::new(MeteredCloudProvider::new(
                Arc::clone(&built.cloud),
                cloud_metrics.clone(),
            ));
            let (cluster, cloud, aws): (Arc<dyn ClusterApi>, Arc<dyn CloudProvider>, AwsPorts) =
                match gate {
                    Some(gate) => (
                        Arc::new(GatedClusterApi::new(cluster, gate.clone())),
                        Arc::new(GatedCloudProvider::new(metered, gate.clone())),
                        gated_aws(&aws, gate),
                    ),
                    None => (cluster, metered, aws.clone()),
                };
            Deps {
                settings: Arc::clone(&settings),
                clock: Arc::clone(&clock),
                cluster,
                view: Arc::clone(&view),
                cloud,
                aws,
                unavailable: Arc::clone(&built.unavailable),
                cluster_info: cluster_info.clone(),
                region: region.clone(),
                kubernetes_version: kubernetes_version.clone(),
                kubernetes_version_source: Some(Arc::clone(&version_source)),
                metrics: Arc::clone(&shared_metrics),
            }
        };

        let aws;
        let (leading, elector, built) = match options.actors {
            ActorStart::WhenLeading(election) => {
                let gate = election.gate.clone();
                if settings.disable_leader_election {
                    gate.open_for_good();
                }
                let (leading_tx, leading) = watch::channel(settings.disable_leader_election);
                let elector = campaign(
                    &settings,
                    client.clone(),
                    &identity,
                    election,
                    leading_tx,
                    Arc::clone(&exit_tx),
                    slot.clone(),
                )
                .await;
                if let (Some((_, _, elector_health)), true) = (&elector, servers.is_some()) {
                    let elector_health = elector_health.clone();
                    liveness.add("leader-elector", move || {
                        elector_health.check("the leader elector")
                    });
                }
                let mut built = cloud
                    .build(Arc::clone(&view), Arc::clone(&clock), &readiness, &kit)
                    .await
                    .map_err(DaemonError::Cloud)?;
                aws = built.aws.take();
                tasks.extend(
                    aws.iter()
                        .map(|root| report_escalation(root.clone(), Arc::clone(&exit_tx))),
                );
                tasks.push(start_when_leading(
                    slot.clone(),
                    kit.clone(),
                    deps(&built, Some(&gate)),
                    options.start,
                    registries.clone(),
                    leading.clone(),
                    state.clone(),
                    Arc::clone(&exit_tx),
                ));
                (
                    leading,
                    elector.map(|(stop, handle, _)| (stop, handle)),
                    built.cloud,
                )
            }
            ActorStart::AfterSync => {
                state
                    .wait_until_ready()
                    .await
                    .map_err(|_| DaemonError::Sync)?;
                let mut built = cloud
                    .build(Arc::clone(&view), Arc::clone(&clock), &readiness, &kit)
                    .await
                    .map_err(DaemonError::Cloud)?;
                aws = built.aws.take();
                tasks.extend(
                    aws.iter()
                        .map(|root| report_escalation(root.clone(), Arc::clone(&exit_tx))),
                );
                let mut actor_metrics = Registry::default();
                let started = slot
                    .start(&kit, deps(&built, None), &mut actor_metrics, options.start)
                    .map_err(DaemonError::Actors)?;
                registries.add(actor_metrics);
                pump_task = feed.take().map(|feed| {
                    tokio::task::spawn_local(pump_health.clone().watch(pump(feed, slot.clone())))
                });
                tasks.push(report_escalation(started.root, Arc::clone(&exit_tx)));
                (watch::channel(true).1, None, built.cloud)
            }
        };

        tasks.push(tokio::task::spawn_local(report_leadership(
            leading.clone(),
            leader_status,
        )));
        tasks.push(tokio::task::spawn_local(refresh_offering_metrics(
            state.clone(),
            Arc::clone(&built),
            offering_metrics,
        )));

        Ok(Self {
            kit,
            slot,
            state,
            cloud: built,
            registries,
            dropped,
            readiness,
            liveness,
            servers,
            leading,
            exit,
            elector,
            pump: pump_task,
            tasks,
            aws,
            kubernetes_version,
        })
    }

    /// Where `/metrics` and `/debug/actors` are served (with [`Endpoints`]).
    #[must_use]
    pub fn metrics_url(&self) -> Option<String> {
        self.servers.as_ref().map(|s| s.metrics.url())
    }

    /// Where `/healthz` and `/readyz` are served (with [`Endpoints`]).
    #[must_use]
    pub fn health_url(&self) -> Option<String> {
        self.servers.as_ref().map(|s| s.health.url())
    }

    /// `/metrics` and `/debug/actors` of this daemon, for a server of the caller's.
    #[must_use]
    pub fn actor_routes(&self) -> Routes {
        actor_routes(&self.registries, &self.kit)
    }

    /// The actor kit (its registry is `/debug/actors`).
    #[must_use]
    pub fn kit(&self) -> &ActorKit {
        &self.kit
    }

    /// Every metrics registry of this daemon (the kit's, Karpenter's, the actors').
    #[must_use]
    pub fn registries(&self) -> &MetricsRegistries {
        &self.registries
    }

    /// The readiness checks (empty without [`Endpoints`], but for the cloud's own).
    #[must_use]
    pub fn readiness(&self) -> &HealthChecks {
        &self.readiness
    }

    /// The liveness checks.
    #[must_use]
    pub fn liveness(&self) -> &HealthChecks {
        &self.liveness
    }

    /// The Kubernetes version the actors use (kept current by their `VersionActor`).
    #[must_use]
    pub fn kubernetes_version(&self) -> KubernetesVersion {
        self.kubernetes_version.get()
    }

    /// The cluster store.
    #[must_use]
    pub fn state(&self) -> &ClusterState {
        &self.state
    }

    /// The cloud provider the actors use.
    #[must_use]
    pub fn cloud(&self) -> Arc<dyn CloudProvider> {
        Arc::clone(&self.cloud)
    }

    /// Changes dropped because the queue to the pump was full.
    #[must_use]
    pub fn dropped_changes(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Whether this replica holds the lease (always, for [`ActorStart::AfterSync`]).
    #[must_use]
    pub fn is_leading(&self) -> bool {
        *self.leading.borrow()
    }

    /// Whether the actors are running.
    #[must_use]
    pub fn actors_started(&self) -> bool {
        self.slot.get().is_some()
    }

    /// Whether the actors' root supervisor gave up.
    #[must_use]
    pub fn escalated(&self) -> bool {
        self.slot
            .get()
            .is_some_and(|started| started.root.escalation().is_some())
            || self
                .aws
                .as_ref()
                .is_some_and(|aws| aws.escalation().is_some())
    }

    /// The disruption commands the actors decided (empty while no actors run).
    pub async fn disruption_history(&self) -> Vec<karpenter_actors::disruption::DisruptionRecord> {
        let Some(started) = self.slot.get() else {
            return Vec::new();
        };
        started
            .daemon
            .disruption()
            .request(
                karpenter_actors::disruption::GetDisruptionStatus,
                Duration::from_secs(5),
            )
            .await
            .map(|status| status.commands)
            .unwrap_or_default()
    }

    /// Resolves once this replica leads.
    pub async fn until_leading(&mut self) {
        let _ = self.leading.wait_for(|l| *l).await;
    }

    /// Resolves when the daemon stops on its own (lost leadership, escalation, failed start).
    pub async fn wait(&mut self) -> Exit {
        match self.exit.wait_for(Option::is_some).await {
            Ok(exit) => exit.clone().unwrap_or(Exit::Signal),
            Err(_) => std::future::pending().await,
        }
    }

    /// Stops the actors and the pump, as a process that stops; the watchers go on (a
    /// simulation's harness reads the first daemon's store) until [`Self::shutdown`].
    pub async fn stop_actors(&self) {
        self.slot.stop().await;
        if let Some(aws) = &self.aws {
            aws.stop().await;
        }
        if let Some(pump) = &self.pump {
            pump.abort();
        }
    }

    /// Stops gracefully: launches in flight get `launch_grace`, then the actors stop, the lease
    /// is released and the watchers and servers stop. Returns the NodeClaims whose launch did
    /// not finish.
    pub async fn shutdown(self, launch_grace: Duration) -> Vec<String> {
        let unfinished = if self.slot.get().is_some() {
            wait_for_launches(&self.state, launch_grace).await
        } else {
            Vec::new()
        };
        self.slot.stop().await;
        if let Some(aws) = &self.aws {
            aws.stop().await;
        }
        if let Some((stop, handle)) = self.elector {
            let _ = stop.send(());
            let _ = handle.await;
        }
        for task in self.tasks.into_iter().chain(self.pump) {
            task.abort();
        }
        if let Some(servers) = self.servers {
            servers.metrics.shutdown().await;
            servers.health.shutdown().await;
        }
        unfinished
    }
}

/// Campaigns for the Lease (unless leader election is off): leadership is published on
/// `leading` and kept in the election's gate; a loss stops the actors in `slot` at once and is
/// published on `exit`. Returns how to stop the campaign and the elector task's health.
async fn campaign(
    settings: &Settings,
    client: Client,
    identity: &str,
    election: Election,
    leading: watch::Sender<bool>,
    exit: Arc<watch::Sender<Option<Exit>>>,
    slot: DaemonSlot,
) -> Option<(oneshot::Sender<()>, JoinHandle<Ended>, TaskWatch)> {
    if settings.disable_leader_election {
        return None;
    }
    let namespace = settings
        .leader_election_namespace
        .clone()
        .or_else(|| settings.system_namespace.clone())
        .unwrap_or_else(|| DEFAULT_LEASE_NAMESPACE.to_owned());
    let lease_client = election.lease_client.unwrap_or(client);
    ensure_namespace(&lease_client, &namespace).await;
    let gate = election.gate;
    let candidate = LeaderElector::new(
        lease_client,
        &namespace,
        &settings.leader_election_name,
        identity,
        election.timing,
    )
    .with_gate(gate.clone());
    let (stop, stopped) = oneshot::channel::<()>();
    let health = TaskWatch::default();
    let watched = health.clone();
    let handle = tokio::task::spawn_local(async move {
        let run = candidate.run(leading, async {
            let _ = stopped.await;
        });
        let ended = match std::panic::AssertUnwindSafe(run).catch_unwind().await {
            Ok(ended) => ended,
            Err(panic) => {
                // Its renewals stopped: the gate would close at the deadline anyway.
                gate.close();
                watched.failed(format!("panicked: {}", panic_message(panic.as_ref())));
                Ended::Lost
            }
        };
        if ended == Ended::Lost {
            // The gate is closed already (no write goes out); the actors stop now, without the
            // launch grace of a graceful stop: another replica may lead in a few seconds.
            slot.stop().await;
            exit.send_replace(Some(Exit::LostLeadership));
        }
        ended
    });
    Some((stop, handle, health))
}

/// A panic's message, when it has one.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_owned())
}

/// Whether a background task that should run for the daemon's lifetime still runs.
#[derive(Debug, Clone, Default)]
pub(super) struct TaskWatch {
    ended: Arc<std::sync::Mutex<Option<String>>>,
}

impl TaskWatch {
    /// Records that the task ended, and why.
    fn failed(&self, why: String) {
        *self
            .ended
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(why);
    }

    /// Runs `task`, recording its end or its panic.
    fn watch(
        self,
        task: impl std::future::Future<Output = ()>,
    ) -> impl std::future::Future<Output = ()> {
        let watch = self;
        async move {
            match std::panic::AssertUnwindSafe(task).catch_unwind().await {
                Ok(()) => watch.failed("ended".to_owned()),
                Err(panic) => {
                    watch.failed(format!("panicked: {}", panic_message(panic.as_ref())));
                }
            }
        }
    }

    /// A liveness check: fails once the task ended (nothing restarts it safely: its input
    /// went with it).
    fn check(&self, what: &str) -> CheckResult {
        match &*self
            .ended
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            None => Ok(()),
            Some(why) => Err(format!("{what} {why}")),
        }
    }
}

/// One liveness check per watched kind (`watch-pods`, ...): fails while its watch keeps failing
/// or after it was restarted too often (the kubelet then restarts the process).
fn watch_checks(liveness: &HealthChecks, health: &Arc<IngressHealth>) {
    for kind in health.kinds() {
        let health = Arc::clone(health);
        let name = format!("watch-{kind}");
        liveness.add(&name, move || health.check(kind));
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    goversion: &'static str,
    goarch: &'static str,
    commit: &'static str,
}

/// The toolchain this binary is built with, in `goversion` (the workspace's `rust-version`,
/// which `rust-toolchain.toml` pins).
const TOOLCHAIN: &str = concat!("rust", env!("CARGO_PKG_RUST_VERSION"));

/// The architecture as Go names it (`GOARCH`), which `goarch` queries expect.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// `karpenter_build_info` (Karpenter's `pkg/metrics`): 1, labeled by the version, the
/// toolchain, the architecture and the commit (`""` in a build without one).
fn register_build_info(registry: &mut Registry) {
    let family = Family::<BuildLabels, Gauge>::default();
    family
        .get_or_create(&BuildLabels {
            version: env!("CARGO_PKG_VERSION"),
            goversion: TOOLCHAIN,
            goarch: go_arch(),
            commit: crate::logging::COMMIT.unwrap_or_default(),
        })
        .set(1);
    registry.register(
        "karpenter_build_info",
        "A metric with a constant '1' value labeled by version from which karpenter was built.",
        family,
    );
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct LeaseLabels {
    name: String,
}

/// controller-runtime's `leader_election_master_status{name}` for the Lease `lease`, on every
/// replica (0 on a standby).
fn register_leader_status(registry: &mut Registry, lease: &str) -> Gauge {
    let family = Family::<LeaseLabels, Gauge>::default();
    registry.register(
        "leader_election_master_status",
        "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
        family.clone(),
    );
    family.get_or_create_owned(&LeaseLabels {
        name: lease.to_owned(),
    })
}

/// Keeps `status` at 1 while this replica leads (always, for a daemon started after the sync
/// or without leader election: it acts as the leader), 0 otherwise.
async fn report_leadership(mut leading: watch::Receiver<bool>, status: Gauge) {
    loop {
        status.set(i64::from(*leading.borrow_and_update()));
        if leading.changed().await.is_err() {
            return;
        }
    }
}

/// Karpenter's store-backed gauges (nodes, NodePools, pods) and the status-condition
/// families, computed from the view at each scrape once the store has synced (an unsynced
/// store would drop the series of objects not listed yet). Walking every node and pod costs
/// nothing while nobody scrapes, and a scrape sees the cluster as it is.
fn scrape_cluster_metrics(
    state: ClusterState,
    clock: Arc<dyn Clock>,
    metrics: Arc<ClusterMetrics>,
    conditions: Arc<ConditionMetrics>,
) -> http::ScrapeHook {
    Arc::new(move || {
        if !state.is_synced() {
            return;
        }
        let now = clock.now();
        metrics.refresh(&state, now);
        conditions.refresh(&state, now);
    })
}

/// Between scrapes, every [`REFRESH_INTERVAL`](karpenter_actors::cluster_metrics::REFRESH_INTERVAL)
/// while the objects change: the pods that got bound or Ready (the duration histograms) and
/// the condition transitions, so none is missed however rarely Prometheus scrapes. A pass
/// over an unchanged view is skipped.
async fn refresh_cluster_metrics(
    state: ClusterState,
    clock: Arc<dyn Clock>,
    metrics: Arc<ClusterMetrics>,
    conditions: Arc<ConditionMetrics>,
) {
    if state.wait_until_ready().await.is_err() {
        return;
    }
    let mut every = tokio::time::interval(karpenter_actors::cluster_metrics::REFRESH_INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut mark = ChangeMark::new([
        WatchedKind::Pod,
        WatchedKind::Node,
        WatchedKind::NodeClaim,
        WatchedKind::NodePool,
        WatchedKind::EC2NodeClass,
    ]);
    loop {
        every.tick().await;
        let counts = mark.read(&state);
        if mark.unchanged(counts) {
            continue;
        }
        let now = clock.now();
        metrics.observe(&state, now);
        conditions.observe(&state, now);
        mark.mark(counts);
    }
}

/// Keeps Karpenter AWS's instance-type gauges (offering price and availability, vCPUs and
/// memory per type) current once the store has synced.
async fn refresh_offering_metrics(
    state: ClusterState,
    cloud: Arc<dyn CloudProvider>,
    metrics: OfferingMetrics,
) {
    if state.wait_until_ready().await.is_err() {
        return;
    }
    let mut every = tokio::time::interval(karpenter_actors::offering_metrics::REFRESH_INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        metrics.refresh(&state, cloud.as_ref()).await;
    }
}

/// How often the cluster-state gauges are refreshed.
const SYNC_CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// How long the store may stay unsynced before it is logged as an error (Karpenter's).
const SYNC_WARN_AFTER: Duration = Duration::from_secs(30);
/// How often that error is repeated (Karpenter's).
const SYNC_WARN_EVERY: Duration = Duration::from_secs(10);

/// Keeps Karpenter's cluster-state gauges current and logs a store that takes long to sync.
async fn monitor_sync(state: ClusterState, metrics: ClusterStateMetrics) {
    let started = tokio::time::Instant::now();
    let mut last_warning: Option<tokio::time::Instant> = None;
    loop {
        let synced = karpenter_actors::ports::cluster_view::ClusterView::is_synced(&state);
        let unsynced_for = if synced {
            Duration::ZERO
        } else {
            started.elapsed()
        };
        metrics.record(synced, unsynced_for, state.nodes.len());
        if !synced
            && unsynced_for >= SYNC_WARN_AFTER
            && last_warning.is_none_or(|at| at.elapsed() >= SYNC_WARN_EVERY)
        {
            tracing::error!(
                duration = ?unsynced_for,
                error = "waiting on cluster sync",
                "cluster is waiting on sync for extended duration"
            );
            last_warning = Some(tokio::time::Instant::now());
        }
        tokio::time::sleep(SYNC_CHECK_INTERVAL).await;
    }
}

/// Creates the Lease's namespace if it is missing (only matters on fresh test clusters; a
/// failure shows up as leader election errors).
async fn ensure_namespace(client: &Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    if matches!(api.get_opt(name).await, Ok(Some(_))) {
        return;
    }
    let namespace = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        ..Namespace::default()
    };
    let _ = api.create(&PostParams::default(), &namespace).await;
}

/// Starts the actors once this replica leads and the store has listed every kind once (no
/// actor acts on an empty or partial view: Karpenter's cluster-state sync), their metrics
/// added to `/metrics`; then reports a root escalation on `exit`.
#[expect(
    clippy::too_many_arguments,
    reason = "the pieces of the assembly this task joins; a struct would only rename them"
)]
fn start_when_leading(
    slot: DaemonSlot,
    kit: ActorKit,
    deps: Deps,
    options: StartOptions,
    registries: MetricsRegistries,
    mut leading: watch::Receiver<bool>,
    state: ClusterState,
    exit: Arc<watch::Sender<Option<Exit>>>,
) -> JoinHandle<()> {
    let deps = Rc::new(RefCell::new(Some(deps)));
    tokio::task::spawn_local(async move {
        if leading.wait_for(|l| *l).await.is_err() {
            return;
        }
        if state.wait_until_ready().await.is_err() {
            return;
        }
        if !*leading.borrow() {
            // Lost while waiting for the sync; the exit is already published.
            return;
        }
        let Some(deps) = deps.borrow_mut().take() else {
            return;
        };
        let mut actor_metrics = Registry::default();
        let started = slot.start(&kit, deps, &mut actor_metrics, options);
        registries.add(actor_metrics);
        match started {
            Ok(started) => report_escalation_now(started.root, &exit).await,
            Err(error) => {
                exit.send_replace(Some(Exit::ActorsFailed(karpenter_core::errors::chain(
                    &error,
                ))));
            }
        }
    })
}

/// Waits for the root supervisor to give up and says so on `exit`.
async fn report_escalation_now(root: RootGroup, exit: &watch::Sender<Option<Exit>>) {
    let reason: StopReason = root.escalated().await;
    exit.send_replace(Some(Exit::Escalated(format!("{reason:?}"))));
}

/// [`report_escalation_now`] as a task.
fn report_escalation(root: RootGroup, exit: Arc<watch::Sender<Option<Exit>>>) -> JoinHandle<()> {
    tokio::task::spawn_local(async move { report_escalation_now(root, &exit).await })
}

/// NodeClaims whose launch is in flight: not deleting and without a provider id yet.
#[must_use]
pub fn unlaunched_nodeclaims(view: &dyn ClusterView) -> Vec<String> {
    let mut names: Vec<String> = view
        .nodeclaims()
        .iter()
        .filter(|claim| claim.metadata.deletion_timestamp.is_none())
        .filter(|claim| {
            claim
                .status
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .is_none_or(str::is_empty)
        })
        .map(|claim| claim.name_any())
        .collect();
    names.sort();
    names
}

/// Waits until no launch is in flight, or `deadline` passes; returns the NodeClaims still
/// unlaunched (empty when every launch finished). The first step of a graceful shutdown: a
/// launch cut short is safe, as its client token makes the next leader's retry return the same
/// instance, but finishing it spares the retry.
pub async fn wait_for_launches(view: &dyn ClusterView, deadline: Duration) -> Vec<String> {
    let until = tokio::time::Instant::now() + deadline;
    loop {
        let pending = unlaunched_nodeclaims(view);
        if pending.is_empty() || tokio::time::Instant::now() >= until {
            return pending;
        }
        tokio::time::sleep(LAUNCH_POLL.min(until - tokio::time::Instant::now())).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_actors::testing::MemoryClusterView;
    use karpenter_core::apis::NodeClaim;
    fn claim(name: &str, provider_id: Option<&str>) -> NodeClaim {
        let mut claim: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": name},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": []
            }
        }))
        .expect("nodeclaim");
        if let Some(id) = provider_id {
            claim.status = Some(
                serde_json::from_value(serde_json::json!({"providerID": id})).expect("status"),
            );
        }
        claim
    }

    #[tokio::test]
    async fn a_watched_task_that_panics_or_ends_fails_its_check_by_name() {
        let panics = TaskWatch::default();
        assert!(panics.check("the change pump").is_ok());
        panics
            .clone()
            .watch(async { panic!("observe failed") })
            .await;
        assert_eq!(
            panics.check("the change pump"),
            Err("the change pump panicked: observe failed".to_owned())
        );
        let ends = TaskWatch::default();
        ends.clone().watch(async {}).await;
        assert_eq!(
            ends.check("the leader elector"),
            Err("the leader elector ended".to_owned())
        );
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_waits_for_unlaunched_nodeclaims_until_the_deadline() {
        let view = MemoryClusterView::new();
        view.put_nodeclaim(&claim("default-a", Some("aws:///us-west-2a/i-1")));
        view.put_nodeclaim(&claim("default-b", None));
        assert_eq!(unlaunched_nodeclaims(&view), ["default-b"]);
        let start = tokio::time::Instant::now();
        let left = wait_for_launches(&view, Duration::from_secs(3)).await;
        assert_eq!(left, ["default-b"]);
        assert_eq!(start.elapsed(), Duration::from_secs(3));
        view.put_nodeclaim(&claim("default-b", Some("aws:///us-west-2b/i-2")));
        assert!(
            wait_for_launches(&view, Duration::from_secs(3))
                .await
                .is_empty()
        );
    }
}
