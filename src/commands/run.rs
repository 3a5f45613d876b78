//! `karpenter run`: the production entry point.
//!
//! ```text
//! settings (flags, env; validated) -> Kubernetes client (kubeconfig, else in-cluster)
//!   -> version check (refuse < 1.26, warn > 1.33) -> AWS SDK adapters (AWS_ENDPOINT_URL for
//!   emulators) -> RunningDaemon::start:
//!      HTTP: METRICS_PORT (/metrics, /debug/actors, added routes), HEALTH_PROBE_PORT (/healthz,
//!        /readyz with named checks: cache-synced, crds, aws, interruption-queue, leader-election)
//!      ClusterIngress (watchers, kept warm on standby replicas) -> ChangeFeed -> pump
//!      LeaderElector on the Lease -> when leading: DaemonSlot::start (every actor family)
//!   -> until SIGTERM/SIGINT, lost leadership or a root escalation
//!   -> graceful shutdown: in-flight launches get LAUNCH_GRACE to finish, actors stop, the lease
//!      is released, servers close.
//! ```
//!
//! [`RunningDaemon`] is the assembly without the process around it: tests start it over the
//! emulator and kwok's ports and look at its leadership, actors and endpoints.

use std::cell::RefCell;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use clap::Args;
use k8s_openapi::api::core::v1::{Namespace, Service};
use karpenter_actors::deps::ClusterVersion;
use karpenter_actors::deps::{AwsPorts, Deps};
use karpenter_actors::metrics::Metrics;
use karpenter_actors::ports::clock::{Clock, SystemClock};
use karpenter_actors::ports::cluster_view::ClusterView;
use karpenter_actors::providers::cloud_provider::AwsProviderSettings;
use karpenter_actors::runtime::{ActorKit, KitOptions, StopReason};
use karpenter_config::{Settings, SettingsError};
use karpenter_core::apis::{EC2NodeClass, NodeClaim, NodePool};
use karpenter_core::domain::userdata::ClusterInfo;
use karpenter_core::domain::version::{self, KubernetesVersion, VersionError, VersionVerdict};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, Resource};
use prometheus_client::registry::Registry;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use super::Status;
use crate::cloud::CloudSource;
use crate::daemon::{ChangeFeed, DaemonRoutes, DaemonSlot, bridge, pump, wait_for_launches};
use crate::http::{self, HealthChecks, HttpError, HttpServer, MetricsRegistries, Routes};
use crate::kube::cluster_api::KubeClusterApi;
use crate::kube::ingress::ClusterIngress;
use crate::kube::leader::{Ended, LeaderElector, LeaseTiming};
use crate::kube::state::ClusterState;
use crate::kube::{ConnectError, connect};

/// How long in-flight launches may run on after SIGTERM: within Kubernetes' default 30 s
/// termination grace, leaving time to stop the actors and release the lease. A launch cut
/// short is retried by the next leader with the same client token, so no instance leaks.
pub const LAUNCH_GRACE: Duration = Duration::from_secs(20);
/// How often a failing startup check (CRDs, AWS, interruption queue) is tried again.
const CHECK_RETRY: Duration = Duration::from_secs(15);
/// The namespace of the Lease when neither `LEADER_ELECTION_NAMESPACE` nor `SYSTEM_NAMESPACE`
/// is set (the chart sets the release namespace).
const DEFAULT_LEASE_NAMESPACE: &str = "kube-system";

/// Options of `karpenter run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub settings: Box<Settings>,
    /// A kubeconfig to use instead of the in-cluster service account (default: in-cluster, else
    /// $KUBECONFIG or ~/.kube/config).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
}

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("invalid settings")]
    Settings(#[source] SettingsError),
    #[error("starting the runtime")]
    Runtime(#[source] std::io::Error),
    #[error("connecting to Kubernetes")]
    Connect(#[source] ConnectError),
    #[error("reading the Kubernetes version")]
    Version(#[source] kube::Error),
    #[error(transparent)]
    Unsupported(#[from] VersionError),
    #[error("serving {what}")]
    Serve {
        what: &'static str,
        #[source]
        source: HttpError,
    },
    #[error("building the AWS providers: {0}")]
    Cloud(String),
}

impl RunError {
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Settings(e) => e.category(),
            Self::Runtime(_) => "runtime",
            Self::Connect(e) => e.category(),
            Self::Version(_) => "version",
            Self::Unsupported(e) => e.category(),
            Self::Serve { source, .. } => source.category(),
            Self::Cloud(_) => "cloud_provider",
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

impl Exit {
    /// The process status for this exit.
    #[must_use]
    pub fn status(&self) -> Status {
        match self {
            Self::Signal => Status::Success,
            _ => Status::Problems,
        }
    }
}

/// Reads the server's version and checks it against the supported range (and against
/// `KUBERNETES_MIN_VERSION` when that asks for more).
pub async fn check_version(
    client: &Client,
    settings: &Settings,
) -> Result<VersionVerdict, RunError> {
    let info = client
        .apiserver_version()
        .await
        .map_err(RunError::Version)?;
    let found = KubernetesVersion::from_parts(&info.major, &info.minor)
        .or_else(|_| KubernetesVersion::parse(&info.git_version))?;
    let verdict = version::check(found)?;
    if let Ok(minimum) = KubernetesVersion::parse(&settings.kubernetes_min_version)
        && found < minimum
    {
        return Err(RunError::Unsupported(VersionError::TooOld {
            version: found,
            minimum,
        }));
    }
    Ok(verdict)
}

/// What the daemon runs with: built by `run` from the settings, by tests from the emulator and
/// kwok.
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
    /// The cluster's Kubernetes version, for AMI aliases.
    pub kubernetes_version: KubernetesVersion,
    /// This replica's name in the Lease (unique per process).
    pub identity: String,
    pub lease: LeaseTiming,
    pub metrics_addr: SocketAddr,
    pub health_addr: SocketAddr,
    /// More routes for the metrics server.
    pub routes: Routes,
    /// Routes the actors answer (e.g. `/debug/explain/`), on the metrics server; 503 while this
    /// replica is a standby.
    pub daemon_routes: DaemonRoutes,
}

impl std::fmt::Debug for DaemonInputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonInputs")
            .field("identity", &self.identity)
            .field("metrics_addr", &self.metrics_addr)
            .field("health_addr", &self.health_addr)
            .finish_non_exhaustive()
    }
}

type Shared<T> = Arc<Mutex<T>>;

fn set<T>(cell: &Shared<T>, value: T) {
    *cell.lock().unwrap_or_else(PoisonError::into_inner) = value;
}

fn get<T: Clone>(cell: &Shared<T>) -> T {
    cell.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

/// A named check whose result a background task keeps current.
fn background_check(
    checks: &HealthChecks,
    name: &str,
    initial: &str,
) -> Shared<Result<(), String>> {
    let cell: Shared<Result<(), String>> = Arc::new(Mutex::new(Err(initial.to_owned())));
    let reader = Arc::clone(&cell);
    checks.add(name, move || get(&reader));
    cell
}

/// Tries `probe` until it succeeds, publishing each result in `cell`.
fn retry_until_ok<F, Fut>(cell: Shared<Result<(), String>>, probe: F) -> JoinHandle<()>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    tokio::spawn(async move {
        loop {
            let result = probe().await;
            let ok = result.is_ok();
            set(&cell, result);
            if ok {
                return;
            }
            tokio::time::sleep(CHECK_RETRY).await;
        }
    })
}

async fn served<K>(client: &Client) -> Result<(), String>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let api: Api<K> = Api::all(client.clone());
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Err(format!(
            "{}.{} is not served: install the CRDs (charts/karpenter-crd)",
            K::plural(&()),
            K::group(&())
        )),
        Err(error) => Err(format!("listing {}: {error}", K::plural(&()))),
    }
}

/// A daemon that is running: servers up, watchers running, actors started once leading.
pub struct RunningDaemon {
    kit: ActorKit,
    slot: DaemonSlot,
    state: ClusterState,
    readiness: HealthChecks,
    liveness: HealthChecks,
    metrics: HttpServer,
    health: HttpServer,
    leading: watch::Receiver<bool>,
    exit: watch::Receiver<Option<Exit>>,
    elector: Option<(oneshot::Sender<()>, JoinHandle<Ended>)>,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for RunningDaemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningDaemon")
            .field("metrics", &self.metrics.addr())
            .field("health", &self.health.addr())
            .field("leading", &*self.leading.borrow())
            .finish_non_exhaustive()
    }
}

/// The readiness checks of the startup: the cache has synced, and (kept current by probes
/// retried until they pass) the CRDs are served, AWS answers, the interruption queue exists.
/// Returns the probe tasks.
fn startup_checks(
    readiness: &HealthChecks,
    settings: &Settings,
    client: &Client,
    aws: &AwsPorts,
    state: &ClusterState,
) -> Vec<JoinHandle<()>> {
    let synced = state.clone();
    readiness.add("cache-synced", move || {
        use karpenter_actors::ports::cluster_view::ClusterView as _;
        if synced.is_synced() {
            Ok(())
        } else {
            Err("waiting for the first list of every watched kind".to_owned())
        }
    });
    let mut tasks = Vec::new();
    let crds = background_check(readiness, "crds", "not checked yet");
    let crd_client = client.clone();
    tasks.push(retry_until_ok(crds, move || {
        let client = crd_client.clone();
        async move {
            served::<NodePool>(&client).await?;
            served::<NodeClaim>(&client).await?;
            served::<EC2NodeClass>(&client).await
        }
    }));
    let reachable = background_check(readiness, "aws", "not checked yet");
    let ec2 = Arc::clone(&aws.ec2);
    tasks.push(retry_until_ok(reachable, move || {
        let ec2 = Arc::clone(&ec2);
        async move {
            ec2.describe_availability_zones()
                .await
                .map(|_| ())
                .map_err(|e| format!("EC2 DescribeAvailabilityZones: {e}"))
        }
    }));
    if let Some(queue) = settings.interruption_queue.clone() {
        let configured = background_check(readiness, "interruption-queue", "not checked yet");
        let sqs = Arc::clone(&aws.sqs);
        tasks.push(retry_until_ok(configured, move || {
            let sqs = Arc::clone(&sqs);
            let queue = queue.clone();
            async move {
                sqs.get_queue_url(&queue)
                    .await
                    .map(|_| ())
                    .map_err(|e| format!("SQS queue {queue} (INTERRUPTION_QUEUE): {e}"))
            }
        }));
    }
    tasks
}

/// The checks that follow the daemon's own exit: readiness fails once the lease is lost,
/// liveness once the root supervisor gave up.
fn exit_checks(
    readiness: &HealthChecks,
    liveness: &HealthChecks,
    exit: &watch::Receiver<Option<Exit>>,
) {
    let lost = exit.clone();
    readiness.add("leader-election", move || match &*lost.borrow() {
        Some(Exit::LostLeadership) => Err("lost the lease".to_owned()),
        _ => Ok(()),
    });
    let escalated = exit.clone();
    liveness.add("actors", move || match &*escalated.borrow() {
        Some(Exit::Escalated(reason)) => Err(format!("the root supervisor gave up: {reason}")),
        _ => Ok(()),
    });
}

/// Campaigns for the Lease (unless leader election is off): leadership is published on
/// `leading`, a loss on `exit`. Returns how to stop the campaign.
async fn campaign(
    settings: &Settings,
    client: &Client,
    identity: &str,
    lease: LeaseTiming,
    leading: watch::Sender<bool>,
    exit: Arc<watch::Sender<Option<Exit>>>,
) -> Option<(oneshot::Sender<()>, JoinHandle<Ended>)> {
    if settings.disable_leader_election {
        return None;
    }
    let namespace = settings
        .leader_election_namespace
        .clone()
        .or_else(|| settings.system_namespace.clone())
        .unwrap_or_else(|| DEFAULT_LEASE_NAMESPACE.to_owned());
    ensure_namespace(client, &namespace).await;
    let candidate = LeaderElector::new(
        client.clone(),
        &namespace,
        &settings.leader_election_name,
        identity,
        lease,
    );
    let (stop, stopped) = oneshot::channel::<()>();
    let handle = tokio::task::spawn_local(async move {
        let ended = candidate
            .run(leading, async {
                let _ = stopped.await;
            })
            .await;
        if ended == Ended::Lost {
            exit.send_replace(Some(Exit::LostLeadership));
        }
        ended
    });
    Some((stop, handle))
}

/// Starts the actors once this replica leads, their metrics added to `/metrics`; then reports
/// a root escalation on `exit`.
fn start_when_leading(
    slot: DaemonSlot,
    kit: ActorKit,
    deps: Deps,
    registries: MetricsRegistries,
    mut leading: watch::Receiver<bool>,
    exit: Arc<watch::Sender<Option<Exit>>>,
) -> JoinHandle<()> {
    let deps = Rc::new(RefCell::new(Some(deps)));
    tokio::task::spawn_local(async move {
        if leading.wait_for(|l| *l).await.is_err() {
            return;
        }
        let Some(deps) = deps.borrow_mut().take() else {
            return;
        };
        let mut actor_metrics = Registry::default();
        let started = slot.start(&kit, deps, &mut actor_metrics);
        registries.add(actor_metrics);
        match started {
            Ok(started) => {
                let reason: StopReason = started.root.escalated().await;
                exit.send_replace(Some(Exit::Escalated(format!("{reason:?}"))));
            }
            Err(error) => {
                exit.send_replace(Some(Exit::ActorsFailed(karpenter_core::errors::chain(
                    &error,
                ))));
            }
        }
    })
}

async fn serve_on(
    addr: SocketAddr,
    routes: Routes,
    what: &'static str,
) -> Result<HttpServer, RunError> {
    http::serve(addr, routes)
        .await
        .map_err(|source| RunError::Serve { what, source })
}

impl RunningDaemon {
    /// Starts everything (on the actix arbiter of the current thread); the actors start when
    /// this replica leads.
    #[expect(
        clippy::too_many_lines,
        reason = "the startup sequence, in order: servers, watchers, checks, election, actors"
    )]
    pub async fn start(inputs: DaemonInputs) -> Result<Self, RunError> {
        let DaemonInputs {
            settings,
            client,
            aws,
            cloud,
            clock,
            cluster_info,
            region,
            kubernetes_version,
            identity,
            lease,
            metrics_addr,
            health_addr,
            routes,
            daemon_routes,
        } = inputs;
        let mut registry = Registry::default();
        let kit = ActorKit::new(&mut registry, KitOptions::default());
        // Karpenter's shared families exist (at zero) on a standby replica too.
        let shared_metrics = Arc::new(Metrics::register(&mut registry));
        let registries = MetricsRegistries::new(registry);

        let readiness = HealthChecks::new();
        let liveness = HealthChecks::new();
        let slot = DaemonSlot::new();
        let (bridged, bridge_task) = bridge(slot.clone(), &daemon_routes);
        let metrics = serve_on(
            metrics_addr,
            routes
                .merge(bridged)
                .route(
                    http::METRICS_PATH,
                    http::metrics_handler(registries.clone()),
                )
                .route(http::ACTORS_PATH, http::actors_handler(kit.clone())),
            "metrics",
        )
        .await?;
        let health = serve_on(
            health_addr,
            Routes::new()
                .route(http::HEALTHZ_PATH, liveness.handler())
                .route(http::READYZ_PATH, readiness.handler()),
            "health probes",
        )
        .await?;

        let mut ingress = ClusterIngress::new(client.clone());
        let feed = ChangeFeed::subscribe(&mut ingress);
        let state = ingress.state();
        let mut tasks = vec![
            tokio::task::spawn_local(ingress.run()),
            tokio::task::spawn_local(pump(feed, slot.clone())),
            bridge_task,
        ];

        tasks.extend(startup_checks(&readiness, &settings, &client, &aws, &state));
        let (exit_tx, exit) = watch::channel::<Option<Exit>>(None);
        let exit_tx = Arc::new(exit_tx);
        exit_checks(&readiness, &liveness, &exit);

        let (leading_tx, leading) = watch::channel(settings.disable_leader_election);
        let elector = campaign(
            &settings,
            &client,
            &identity,
            lease,
            leading_tx,
            Arc::clone(&exit_tx),
        )
        .await;
        let view: Arc<dyn ClusterView> = Arc::new(state.clone());
        let built = cloud.build(Arc::clone(&view), Arc::clone(&clock), &readiness);
        tasks.extend(built.refresh);
        let deps = Deps {
            settings: Arc::clone(&settings),
            clock,
            cluster: Arc::new(KubeClusterApi::new(
                client.clone(),
                kube::runtime::events::Reporter {
                    controller: "karpenter".to_owned(),
                    instance: Some(identity.clone()),
                },
            )),
            view,
            cloud: built.cloud,
            aws,
            unavailable: built.unavailable,
            cluster_info,
            region,
            kubernetes_version: ClusterVersion::new(kubernetes_version),
            metrics: shared_metrics,
        };
        tasks.push(start_when_leading(
            slot.clone(),
            kit.clone(),
            deps,
            registries,
            leading.clone(),
            exit_tx,
        ));

        Ok(Self {
            kit,
            slot,
            state,
            readiness,
            liveness,
            metrics,
            health,
            leading,
            exit,
            elector,
            tasks,
        })
    }

    /// Where `/metrics` and `/debug/actors` are served.
    #[must_use]
    pub fn metrics_url(&self) -> String {
        self.metrics.url()
    }

    /// Where `/healthz` and `/readyz` are served.
    #[must_use]
    pub fn health_url(&self) -> String {
        self.health.url()
    }

    /// The actor kit (its registry is `/debug/actors`).
    #[must_use]
    pub fn kit(&self) -> &ActorKit {
        &self.kit
    }

    /// The readiness checks.
    #[must_use]
    pub fn readiness(&self) -> &HealthChecks {
        &self.readiness
    }

    /// The liveness checks.
    #[must_use]
    pub fn liveness(&self) -> &HealthChecks {
        &self.liveness
    }

    /// The cluster store.
    #[must_use]
    pub fn state(&self) -> &ClusterState {
        &self.state
    }

    /// Whether this replica holds the lease.
    #[must_use]
    pub fn is_leading(&self) -> bool {
        *self.leading.borrow()
    }

    /// Whether the actors are running.
    #[must_use]
    pub fn actors_started(&self) -> bool {
        self.slot.get().is_some()
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

    /// Stops gracefully: launches in flight get `launch_grace`, then the actors stop, the lease
    /// is released and the servers close. Returns the NodeClaims whose launch did not finish.
    pub async fn shutdown(self, launch_grace: Duration) -> Vec<String> {
        let unfinished = if self.slot.get().is_some() {
            wait_for_launches(&self.state, launch_grace).await
        } else {
            Vec::new()
        };
        self.slot.stop().await;
        if let Some((stop, handle)) = self.elector {
            let _ = stop.send(());
            let _ = handle.await;
        }
        for task in self.tasks {
            task.abort();
        }
        self.metrics.shutdown().await;
        self.health.shutdown().await;
        unfinished
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

/// This process's name in the Lease: the host name (the pod name in a cluster) and the pid.
fn identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    let host = if host.is_empty() {
        "karpenter".to_owned()
    } else {
        host
    };
    format!("{host}_{}", std::process::id())
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut terminate) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = terminate.recv() => return,
                _ = tokio::signal::ctrl_c() => return,
            }
        }
    }
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Runs `daemon` until `stop` or its own exit, then shuts it down.
pub async fn serve_until(
    inputs: DaemonInputs,
    stop: impl std::future::Future<Output = ()>,
    err: &mut impl Write,
) -> Result<Exit, RunError> {
    let mut daemon = RunningDaemon::start(inputs).await?;
    let _ = writeln!(
        err,
        "serving {0}/metrics and {0}/debug/actors, probes at {1}/healthz and {1}/readyz",
        daemon.metrics_url(),
        daemon.health_url()
    );
    let exit = tokio::select! {
        () = stop => Exit::Signal,
        exit = daemon.wait() => exit,
    };
    let _ = writeln!(
        err,
        "stopping ({exit:?}); in-flight launches get {LAUNCH_GRACE:?}"
    );
    let unfinished = daemon.shutdown(LAUNCH_GRACE).await;
    if !unfinished.is_empty() {
        let _ = writeln!(
            err,
            "launches still in flight at shutdown (the next leader resumes them): {}",
            unfinished.join(", ")
        );
    }
    Ok(exit)
}

/// The cluster DNS address: the `kube-system/kube-dns` Service's cluster IP, as Karpenter reads
/// it. Not found or unreadable: none (the AMI family's bootstrap default applies), with a
/// warning.
pub async fn cluster_dns(client: &Client, err: &mut impl Write) -> Vec<std::net::IpAddr> {
    let services: Api<Service> = Api::namespaced(client.clone(), "kube-system");
    let address = match services.get_opt("kube-dns").await {
        Ok(Some(service)) => service.spec.and_then(|s| s.cluster_ip),
        Ok(None) => None,
        Err(error) => {
            let _ = writeln!(err, "warning: reading kube-system/kube-dns: {error}");
            None
        }
    };
    if let Some(Ok(ip)) = address.as_deref().map(str::parse) {
        return vec![ip];
    }
    let _ = writeln!(
        err,
        "warning: no cluster IP on kube-system/kube-dns; nodes use their bootstrap's DNS default"
    );
    Vec::new()
}

/// Cluster facts from the settings: `CLUSTER_NAME`, `CLUSTER_ENDPOINT`, `CLUSTER_CA_BUNDLE`, and
/// the DNS address. (Karpenter finds a missing endpoint with EKS `DescribeCluster`; without the
/// EKS API here, set `CLUSTER_ENDPOINT`.)
fn cluster_info(settings: &Settings, dns_ips: Vec<std::net::IpAddr>) -> ClusterInfo {
    ClusterInfo {
        name: settings.cluster_name.clone().unwrap_or_default(),
        endpoint: settings
            .cluster_endpoint
            .as_ref()
            .map(|url| url.as_str().to_owned())
            .unwrap_or_default(),
        ca_bundle: settings.cluster_ca_bundle.clone(),
        dns_ips,
        ..ClusterInfo::default()
    }
}

async fn main_loop(args: &RunArgs, err: &mut impl Write) -> Result<Exit, RunError> {
    let settings = Arc::new((*args.settings).clone());
    let client = connect(args.kubeconfig.as_deref())
        .await
        .map_err(RunError::Connect)?;
    let verdict = check_version(&client, &settings).await?;
    let _ = writeln!(err, "Kubernetes {}", verdict.version());
    if let Some(warning) = verdict.warning() {
        let _ = writeln!(err, "warning: {warning}");
    }
    let clients =
        crate::aws::AwsClients::connect(&crate::aws::Connection::from_settings(&settings)).await;
    let aws = AwsPorts {
        ec2: clients.ec2.clone(),
        sqs: clients.sqs.clone(),
        eventbridge: clients.eventbridge.clone(),
        iam: clients.iam.clone(),
        ssm: clients.ssm.clone(),
        pricing: clients.pricing.clone(),
    };
    let cluster_info = cluster_info(&settings, cluster_dns(&client, err).await);
    if cluster_info.endpoint.is_empty() {
        let _ = writeln!(
            err,
            "warning: CLUSTER_ENDPOINT is not set; nodes' user data will not name the API server \
             (Karpenter finds it with EKS DescribeCluster, which this build does not call)"
        );
    }
    let provider_settings =
        AwsProviderSettings::from_settings(&settings, &clients.region, cluster_info.clone());
    let providers = clients
        .providers(&provider_settings)
        .map_err(|error| RunError::Cloud(error.to_string()))?;
    let any = |port: u16| SocketAddr::from((Ipv4Addr::UNSPECIFIED, port));
    let inputs = DaemonInputs {
        cloud: CloudSource::Aws {
            providers,
            settings: provider_settings,
        },
        clock: Arc::new(SystemClock),
        cluster_info,
        region: clients.region.clone(),
        kubernetes_version: verdict.version(),
        identity: identity(),
        lease: LeaseTiming::default(),
        metrics_addr: any(settings.metrics_port),
        health_addr: any(settings.health_probe_port),
        routes: Routes::new(),
        daemon_routes: crate::daemon::daemon_routes(),
        settings,
        client,
        aws,
    };
    serve_until(inputs, shutdown_signal(), err).await
}

/// Runs the command until SIGTERM/SIGINT.
pub fn run(args: &RunArgs, _out: &mut impl Write, err: &mut impl Write) -> Status {
    if let Err(error) = args.settings.validate_for_run() {
        let _ = writeln!(
            err,
            "error: {}",
            karpenter_core::errors::chain(&RunError::Settings(error))
        );
        return Status::BadInput;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            let _ = writeln!(
                err,
                "error: {}",
                karpenter_core::errors::chain(&RunError::Runtime(error))
            );
            return Status::Problems;
        }
    };
    let system = actix::System::with_tokio_rt(move || runtime);
    match system.block_on(main_loop(args, err)) {
        Ok(exit) => exit.status(),
        Err(error) => {
            let _ = writeln!(err, "error: {}", karpenter_core::errors::chain(&error));
            match error {
                RunError::Unsupported(_) | RunError::Settings(_) => Status::BadInput,
                _ => Status::Problems,
            }
        }
    }
}
