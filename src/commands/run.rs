//! `karpenter run`: the production entry point.
//!
//! ```text
//! settings (flags, env; validated) -> Kubernetes client (kubeconfig, else in-cluster)
//!   -> AWS SDK adapters (AWS_ENDPOINT_URL for emulators) -> version check (`/version`, or EKS
//!   DescribeCluster with EKS_CONTROL_PLANE; refuse < 1.26, warn > 1.33; the actors' VersionActor
//!   reads it again every 5 minutes) -> cluster discovery (crate::discovery: endpoint, service
//!   CIDR, CA, DNS)
//!   -> DaemonAssembly::start (crate::daemon), leader-elected:
//!      HTTP: METRICS_PORT (/metrics, /debug/actors, /debug/explain/), HEALTH_PROBE_PORT
//!        (/healthz, /readyz with named checks: cache-synced, crds, aws, interruption-queue,
//!        leader-election)
//!      ClusterIngress (watchers, kept warm on standby replicas) -> ChangeFeed -> pump
//!      LeaderElector on the Lease -> when leading: DaemonSlot::start (every actor family)
//!   -> until SIGTERM/SIGINT, lost leadership or a root escalation
//!   -> graceful shutdown: in-flight launches get LAUNCH_GRACE to finish, actors stop, the lease
//!      is released, servers close. After a lost lease there is no grace: the actors were
//!      stopped when it was lost, and their writes refused from the renew deadline on.
//!
//! Two Kubernetes clients (`crate::kube::client`): the daemon's, rate-limited by
//! KUBE_CLIENT_QPS / KUBE_CLIENT_BURST and gated by leadership, and the elector's own.
//! ```
//!
//! The daemon itself is [`crate::daemon::DaemonAssembly`], which tests start over the emulator
//! and kwok's ports; this module is the process around it.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use karpenter_actors::deps::AwsPorts;
use karpenter_actors::logs::{self, GoDuration};
use karpenter_actors::ports::clock::SystemClock;
use karpenter_actors::ports::version::{KubernetesVersionSource, VersionSourceError};
use karpenter_actors::providers::cloud_provider::{AwsProviderSettings, AwsProviders};
use karpenter_actors::providers::pricing::PricingError;
use karpenter_config::{Settings, SettingsError};
use karpenter_core::domain::version::{self, KubernetesVersion, VersionError, VersionVerdict};

use super::Status;
use crate::cloud::CloudSource;
use crate::daemon::{
    DaemonAssembly, DaemonError, DaemonInputs, DaemonOptions, Election, Endpoints, Exit,
    daemon_routes, gated_ec2,
};
use crate::http::Routes;
use crate::kube::client::{ClientOptions, daemon_clients};
use crate::kube::leader::{LeadershipGate, LeaseTiming};
use crate::kube::{ConnectError, load_config};

/// How long in-flight launches may run on after SIGTERM: within Kubernetes' default 30 s
/// termination grace, leaving time to stop the actors and release the lease. A launch cut
/// short is retried by the next leader with the same client token, so no instance leaks.
pub const LAUNCH_GRACE: Duration = Duration::from_secs(20);

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
    Version(#[source] VersionSourceError),
    #[error(transparent)]
    Unsupported(#[from] VersionError),
    #[error(transparent)]
    Daemon(#[from] DaemonError),
    #[error("building the AWS providers")]
    Cloud(#[source] PricingError),
    #[error(transparent)]
    Discovery(crate::discovery::DiscoveryError),
}

impl RunError {
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Settings(e) => e.category(),
            Self::Runtime(_) => "runtime",
            Self::Connect(e) => e.category(),
            Self::Version(e) => e.category(),
            Self::Unsupported(e) => e.category(),
            Self::Daemon(e) => e.category(),
            Self::Cloud(_) => "cloud_provider",
            Self::Discovery(e) => e.category(),
        }
    }
}

/// The process status for a daemon's exit.
#[must_use]
pub fn exit_status(exit: &Exit) -> Status {
    match exit {
        Exit::Signal => Status::Success,
        _ => Status::Problems,
    }
}

/// Reads the control plane's version from `source` (`/version`, or EKS with
/// `EKS_CONTROL_PLANE`) and checks it against the supported range (and against
/// `KUBERNETES_MIN_VERSION` when that asks for more).
pub async fn check_version(
    source: &dyn KubernetesVersionSource,
    settings: &Settings,
) -> Result<VersionVerdict, RunError> {
    let found = source.version().await.map_err(RunError::Version)?;
    let minimum = KubernetesVersion::parse(&settings.kubernetes_min_version).ok();
    Ok(version::check_with_minimum(found, minimum)?)
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

/// Runs the daemon until `stop` or its own exit, then shuts it down. Its lines are log lines
/// (controller-runtime's server and shutdown messages).
pub async fn serve_until(
    inputs: DaemonInputs,
    options: DaemonOptions,
    stop: impl std::future::Future<Output = ()>,
) -> Result<Exit, RunError> {
    let mut daemon = DaemonAssembly::start(inputs, options).await?;
    if let Some(metrics) = daemon.metrics_url() {
        tracing::info!(
            bindAddress = %metrics,
            paths = ?["/metrics"],
            "Serving metrics server"
        );
    }
    if let Some(health) = daemon.health_url() {
        tracing::info!(
            name = "health probe",
            addr = %health,
            paths = ?["/healthz", "/readyz"],
            "starting server"
        );
    }
    let exit = tokio::select! {
        () = stop => Exit::Signal,
        exit = daemon.wait() => exit,
    };
    // A lost lease gets no grace: another replica may lead within seconds.
    let grace = if exit == Exit::LostLeadership {
        Duration::ZERO
    } else {
        LAUNCH_GRACE
    };
    tracing::info!(
        reason = ?exit,
        "launch-grace" = %GoDuration(grace),
        "Stopping and waiting for leader election runnables"
    );
    let unfinished = daemon.shutdown(grace).await;
    if !unfinished.is_empty() {
        tracing::info!(
            NodeClaims = ?unfinished,
            "launches still in flight at shutdown; the next leader resumes them"
        );
    }
    tracing::info!("Wait completed, proceeding to shutdown the manager");
    Ok(exit)
}

async fn main_loop(args: &RunArgs) -> Result<Exit, RunError> {
    let settings = Arc::new((*args.settings).clone());
    let gate = LeadershipGate::new();
    let clients = daemon_clients(
        load_config(args.kubeconfig.as_deref())
            .await
            .map_err(RunError::Connect)?,
        &ClientOptions {
            qps: settings.kube_client_qps,
            burst: settings.kube_client_burst,
            gate: gate.clone(),
        },
    )
    .map_err(|source| RunError::Connect(ConnectError::Client(source)))?;
    let client = clients.daemon.clone();
    let lease_client = clients.lease.clone();
    let clients =
        crate::aws::AwsClients::connect(&crate::aws::Connection::from_settings(&settings)).await;
    tracing::debug!(region = %clients.region, "discovered region");
    let version_source = crate::discovery::version_source(&settings, &client, clients.eks.clone());
    let verdict = check_version(version_source.as_ref(), &settings).await?;
    tracing::debug!(version = %verdict.version(), "discovered kubernetes version");
    if let Some(warning) = verdict.warning() {
        tracing::info!(version = %verdict.version(), "{warning}");
    }
    let aws = AwsPorts {
        eks: clients.eks.clone(),
        ec2: clients.ec2.clone(),
        sqs: clients.sqs.clone(),
        eventbridge: clients.eventbridge.clone(),
        iam: clients.iam.clone(),
        ssm: clients.ssm.clone(),
        pricing: clients.pricing.clone(),
    };
    let cluster_info = crate::discovery::discover(crate::discovery::DiscoveryInputs {
        settings: &settings,
        eks: clients.eks.as_ref(),
        client: &client,
        kube_ca: crate::discovery::KubeCa::Config(args.kubeconfig.as_deref()),
    })
    .await
    .map_err(RunError::Discovery)?;
    let provider_settings =
        AwsProviderSettings::from_settings(&settings, &clients.region, cluster_info.clone());
    // The cloud provider's own EC2 port is gated too, so a launch that started before the
    // renew deadline sends no CreateFleet after it.
    let pricing: Option<Arc<dyn karpenter_actors::ports::pricing::PricingApi>> =
        (!provider_settings.isolated_vpc).then(|| Arc::clone(&clients.pricing) as _);
    let providers = AwsProviders::new(
        gated_ec2(Arc::clone(&clients.ec2) as _, &gate),
        pricing,
        &provider_settings,
        Arc::new(SystemClock),
    )
    .map_err(RunError::Cloud)?;
    let inputs = DaemonInputs {
        cloud: CloudSource::Aws {
            providers,
            settings: provider_settings,
        },
        clock: Arc::new(SystemClock),
        cluster_info,
        region: clients.region.clone(),
        kubernetes_version: verdict.version(),
        version_source,
        identity: identity(),
        settings: Arc::clone(&settings),
        client,
        aws,
    };
    let options = DaemonOptions::leader_elected_with(
        Election {
            timing: LeaseTiming::default(),
            lease_client: Some(lease_client),
            gate,
        },
        Endpoints {
            metrics_addr: SocketAddr::from((settings.metrics_bind_address, settings.metrics_port)),
            health_addr: SocketAddr::from((
                settings.health_probe_bind_address,
                settings.health_probe_port,
            )),
            routes: Routes::new(),
            daemon_routes: daemon_routes(),
        },
    );
    serve_until(inputs, options, shutdown_signal()).await
}

/// Runs the command until SIGTERM/SIGINT. Everything it says is a log line (the subscriber is
/// `crate::logging`'s, installed by `main`); the writers are unused.
pub fn run(args: &RunArgs, _out: &mut impl Write, _err: &mut impl Write) -> Status {
    if let Err(error) = args.settings.validate_for_run() {
        tracing::error!(
            error = logs::err(&RunError::Settings(error)),
            "failed starting the controller"
        );
        return Status::BadInput;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(
                error = logs::err(&RunError::Runtime(error)),
                "failed starting the controller"
            );
            return Status::Problems;
        }
    };
    let system = actix::System::with_tokio_rt(move || runtime);
    match system.block_on(main_loop(args)) {
        Ok(exit) => exit_status(&exit),
        Err(error) => {
            tracing::error!(error = logs::err(&error), "failed starting the controller");
            match error {
                RunError::Unsupported(_) | RunError::Settings(_) => Status::BadInput,
                _ => Status::Problems,
            }
        }
    }
}
