//! `karpenter run`: the production entry point.
//!
//! ```text
//! settings (flags, env; validated) -> Kubernetes client (kubeconfig, else in-cluster)
//!   -> version check (refuse < 1.26, warn > 1.33) -> AWS SDK adapters (AWS_ENDPOINT_URL for
//!   emulators) -> DaemonAssembly::start (crate::daemon), leader-elected:
//!      HTTP: METRICS_PORT (/metrics, /debug/actors, /debug/explain/), HEALTH_PROBE_PORT
//!        (/healthz, /readyz with named checks: cache-synced, crds, aws, interruption-queue,
//!        leader-election)
//!      ClusterIngress (watchers, kept warm on standby replicas) -> ChangeFeed -> pump
//!      LeaderElector on the Lease -> when leading: DaemonSlot::start (every actor family)
//!   -> until SIGTERM/SIGINT, lost leadership or a root escalation
//!   -> graceful shutdown: in-flight launches get LAUNCH_GRACE to finish, actors stop, the lease
//!      is released, servers close.
//! ```
//!
//! The daemon itself is [`crate::daemon::DaemonAssembly`], which tests start over the emulator
//! and kwok's ports; this module is the process around it.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use k8s_openapi::api::core::v1::Service;
use karpenter_actors::deps::AwsPorts;
use karpenter_actors::logs::{self, GoDuration};
use karpenter_actors::ports::clock::SystemClock;
use karpenter_actors::providers::cloud_provider::AwsProviderSettings;
use karpenter_actors::providers::pricing::PricingError;
use karpenter_config::{Settings, SettingsError};
use karpenter_core::domain::userdata::ClusterInfo;
use karpenter_core::domain::version::{self, KubernetesVersion, VersionError, VersionVerdict};
use kube::{Api, Client};

use super::Status;
use crate::cloud::CloudSource;
use crate::daemon::{
    DaemonAssembly, DaemonError, DaemonInputs, DaemonOptions, Endpoints, Exit, daemon_routes,
};
use crate::http::Routes;
use crate::kube::leader::LeaseTiming;
use crate::kube::{ConnectError, connect};

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
    Version(#[source] kube::Error),
    #[error(transparent)]
    Unsupported(#[from] VersionError),
    #[error(transparent)]
    Daemon(#[from] DaemonError),
    #[error("building the AWS providers")]
    Cloud(#[source] PricingError),
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
            Self::Daemon(e) => e.category(),
            Self::Cloud(_) => "cloud_provider",
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
            paths = ?["/metrics", "/debug/actors"],
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
    tracing::info!(
        reason = ?exit,
        "launch-grace" = %GoDuration(LAUNCH_GRACE),
        "Stopping and waiting for leader election runnables"
    );
    let unfinished = daemon.shutdown(LAUNCH_GRACE).await;
    if !unfinished.is_empty() {
        tracing::info!(
            NodeClaims = ?unfinished,
            "launches still in flight at shutdown; the next leader resumes them"
        );
    }
    tracing::info!("Wait completed, proceeding to shutdown the manager");
    Ok(exit)
}

/// The cluster DNS address: the `kube-system/kube-dns` Service's cluster IP, as Karpenter reads
/// it. Not found or unreadable: none (the AMI family's bootstrap default applies), said at
/// debug as Karpenter does.
pub async fn cluster_dns(client: &Client) -> Vec<std::net::IpAddr> {
    let services: Api<Service> = Api::namespaced(client.clone(), "kube-system");
    let address = match services.get_opt("kube-dns").await {
        Ok(Some(service)) => service.spec.and_then(|s| s.cluster_ip),
        Ok(None) => None,
        Err(error) => {
            tracing::debug!(
                error = logs::err(&error),
                "unable to detect the IP of the kube-dns service, reading kube-system/kube-dns"
            );
            None
        }
    };
    if let Some(Ok(ip)) = address.as_deref().map(str::parse::<std::net::IpAddr>) {
        tracing::debug!("kube-dns-ip" = %ip, "discovered kube dns");
        return vec![ip];
    }
    tracing::debug!(
        "unable to detect the IP of the kube-dns service, kube-system/kube-dns has no cluster IP; \
         nodes use their bootstrap's DNS default"
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

async fn main_loop(args: &RunArgs) -> Result<Exit, RunError> {
    let settings = Arc::new((*args.settings).clone());
    let client = connect(args.kubeconfig.as_deref())
        .await
        .map_err(RunError::Connect)?;
    let verdict = check_version(&client, &settings).await?;
    tracing::debug!(version = %verdict.version(), "discovered kubernetes version");
    if let Some(warning) = verdict.warning() {
        tracing::info!(version = %verdict.version(), "{warning}");
    }
    let clients =
        crate::aws::AwsClients::connect(&crate::aws::Connection::from_settings(&settings)).await;
    tracing::debug!(region = %clients.region, "discovered region");
    let aws = AwsPorts {
        ec2: clients.ec2.clone(),
        sqs: clients.sqs.clone(),
        eventbridge: clients.eventbridge.clone(),
        iam: clients.iam.clone(),
        ssm: clients.ssm.clone(),
        pricing: clients.pricing.clone(),
    };
    let cluster_info = cluster_info(&settings, cluster_dns(&client).await);
    if cluster_info.endpoint.is_empty() {
        tracing::error!(
            error = "CLUSTER_ENDPOINT is not set; nodes' user data will not name the API server \
                     (Karpenter finds it with EKS DescribeCluster, which this build does not call)",
            "failed detecting cluster endpoint"
        );
    }
    let provider_settings =
        AwsProviderSettings::from_settings(&settings, &clients.region, cluster_info.clone());
    let providers = clients
        .providers(&provider_settings)
        .map_err(RunError::Cloud)?;
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
        settings: Arc::clone(&settings),
        client,
        aws,
    };
    let options = DaemonOptions::leader_elected(
        LeaseTiming::default(),
        Endpoints {
            metrics_addr: any(settings.metrics_port),
            health_addr: any(settings.health_probe_port),
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
