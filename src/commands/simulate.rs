//! `karpenter simulate`: the whole daemon against an embedded cluster (the Kubernetes API
//! emulator, kwok's AWS, a fake kubelet and kube-scheduler), through a scenario, on simulated
//! time; a progress line every few simulated seconds on stderr and a report (table or JSON) at
//! the end. See `karpenter::sim::scenario` for the run and `config/scenarios/README.md` for
//! scenario files.
//!
//! `--serve ADDR` serves the emulator on loopback with a kubeconfig, so kubectl can watch and
//! change the cluster, and the daemon's endpoints beside it; the run then goes at wall-clock
//! pace. Without `--scenario` it is an empty cluster with the daemon running, until Ctrl-C:
//! `kubectl apply` an EC2NodeClass, a NodePool and some pods, and watch nodes come.
//!
//! `--serve ADDR --cluster-only` serves the cluster without the daemon and kwok
//! (`crate::sim::cluster_only`): a `karpenter run` process brings the daemon, an AWS emulator
//! (moto) the instances. The process-level tests (`tests/process`) run it that way.

use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::sim::cluster_only::{CLUSTER_ONLY_KUBELET, ClusterOnlyOptions, serve_cluster};
use crate::sim::scenario::file::{DEFAULT_REGION, DEFAULT_SCENARIO, DEFAULT_SCENARIO_PATH};
use clap::{Args, ValueEnum};
use karpenter_config::LogLevel;
use tokio::sync::{mpsc, oneshot};

use super::Status;
use crate::logging::SimulationLogs;
use crate::sim::report::Report;
use crate::sim::scenario::{
    self, LoadedScenario, Pace, RunOptions, ScenarioError, ServeOptions, Served,
};

/// File name of the kubeconfig written when `--kubeconfig` is not given (in the temp dir).
pub const DEFAULT_KUBECONFIG_NAME: &str = "karpenter-emulator.kubeconfig";

/// How the report is printed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum Output {
    #[default]
    Table,
    Json,
}

/// Options of `karpenter simulate`.
#[derive(Debug, Clone, Default, Args)]
pub struct SimulateArgs {
    /// Scenario file [default: the embedded config/scenarios/default.yaml].
    #[arg(long, value_name = "FILE")]
    pub scenario: Option<PathBuf>,
    /// Seed of the run, instead of the scenario's (the same seed gives the same report).
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Report format.
    #[arg(long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// A chaos plan replacing the scenario's (the form of its `chaos:` section: `actors` is
    /// the actor kit's fault plan, `aws` lists API errors at given times).
    #[arg(long, value_name = "FILE")]
    pub chaos: Option<PathBuf>,
    /// No progress lines on stderr.
    #[arg(long, short)]
    pub quiet: bool,
    /// Serve the Kubernetes API emulator on this address (e.g. 127.0.0.1:8001; port 0 picks
    /// one) and write a kubeconfig for it; the run goes at wall-clock pace until it ends or
    /// Ctrl-C. Without --scenario: an empty cluster with the daemon, until Ctrl-C.
    #[arg(long, value_name = "ADDR")]
    pub serve: Option<SocketAddr>,
    /// Where to write the kubeconfig for the served emulator [default: <temp dir>/karpenter-emulator.kubeconfig].
    #[arg(long, value_name = "PATH", requires = "serve")]
    pub kubeconfig: Option<PathBuf>,
    /// Where the daemon's /metrics and /debug/actors listen when serving [default: the serve
    /// address's IP, a free port].
    #[arg(long, value_name = "ADDR", requires = "serve")]
    pub daemon_addr: Option<SocketAddr>,
    /// Serve only the cluster: the emulator (CRDs, namespaces, the kube-dns Service), the fake
    /// kube-scheduler and a fake kubelet that registers a Node for each NodeClaim with a provider
    /// id; no daemon and no kwok. Run `karpenter run --kubeconfig <the kubeconfig>` against it
    /// (with `AWS_ENDPOINT_URL` for an AWS emulator such as moto). Runs until SIGTERM or Ctrl-C.
    #[arg(
        long,
        requires = "serve",
        conflicts_with_all = ["scenario", "chaos", "daemon_addr", "seed", "output"]
    )]
    pub cluster_only: bool,
    /// The daemon's log level (debug, info, error) [default: error on the terminal, info with
    /// --logs]. Its lines go to stderr, beside the progress lines, unless --logs is given.
    #[arg(long, value_enum, value_name = "LEVEL")]
    pub log_level: Option<LogLevel>,
    /// Write the daemon's log lines to FILE in Karpenter's JSON form (as `karpenter run`
    /// writes them, timed by simulated time) instead of stderr.
    #[arg(long, value_name = "FILE")]
    pub logs: Option<PathBuf>,
}

impl SimulateArgs {
    /// Where the daemon's lines go: a simulation's product is its progress lines and report,
    /// so on the terminal only errors by default.
    #[must_use]
    pub fn logs(&self) -> SimulationLogs<'_> {
        match &self.logs {
            Some(path) => SimulationLogs::File(path, self.log_level.unwrap_or(LogLevel::Info)),
            None => SimulationLogs::Terminal(self.log_level.unwrap_or(LogLevel::Error)),
        }
    }
}

/// Why the scenario the arguments name could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("reading {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The scenario (or the `--chaos` file) breaks a rule; `file` names the one at fault.
    #[error("{file}")]
    Scenario {
        file: String,
        #[source]
        source: ScenarioError,
    },
}

impl LoadError {
    /// A bounded label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Read { .. } => "read",
            Self::Scenario { source, .. } => source.category(),
        }
    }
}

fn read(path: &Path) -> Result<String, LoadError> {
    std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Loads the scenario the arguments name (the embedded default without `--scenario`).
pub fn load(args: &SimulateArgs) -> Result<LoadedScenario, LoadError> {
    let (source, text) = match &args.scenario {
        Some(path) => (path.display().to_string(), read(path)?),
        None => (
            DEFAULT_SCENARIO_PATH.to_owned(),
            DEFAULT_SCENARIO.to_owned(),
        ),
    };
    let chaos = match &args.chaos {
        Some(path) => Some((path.display().to_string(), read(path)?)),
        None => None,
    };
    let mut loaded = LoadedScenario::from_yaml(&text, chaos.as_ref().map(|(_, t)| t.as_str()))
        .map_err(|e| {
            let file = match (&chaos, e.to_string().starts_with("chaos")) {
                (Some((chaos_source, _)), true) => chaos_source.clone(),
                _ => source,
            };
            LoadError::Scenario { file, source: e }
        })?;
    if let Some(seed) = args.seed {
        loaded.scenario.seed = seed;
    }
    Ok(loaded)
}

fn print_report(report: &Report, output: Output, out: &mut impl Write) {
    let text = match output {
        Output::Table => report.to_table(),
        Output::Json => report.to_json() + "\n",
    };
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

fn status_of(report: &Report) -> Status {
    if report.escalated {
        Status::Problems
    } else {
        Status::Success
    }
}

/// Runs the command.
pub fn run(args: &SimulateArgs, out: &mut impl Write, err: &mut impl Write) -> Status {
    if args.cluster_only {
        let Some(runtime) = super::current_thread_runtime(err) else {
            return Status::Problems;
        };
        return runtime.block_on(serve_cluster_until(args, shutdown_signal(), out, err));
    }
    if args.serve.is_some() {
        let Some(runtime) = super::current_thread_runtime(err) else {
            return Status::Problems;
        };
        return runtime.block_on(serve_until(args, shutdown_signal(), out, err));
    }
    let loaded = match load(args) {
        Ok(loaded) => loaded,
        Err(error) => {
            let _ = writeln!(err, "error: {}", karpenter_core::errors::chain(&error));
            return Status::BadInput;
        }
    };
    let started = std::time::Instant::now();
    let quiet = args.quiet;
    let mut options = RunOptions::quiet();
    if !quiet {
        options.progress = Some(Box::new(|line: &str| {
            // Progress goes out as it happens (stderr is unbuffered), not when the run ends.
            eprintln!("{line}");
        }));
    }
    match scenario::run(loaded, options) {
        Ok(report) => {
            print_report(&report, args.output, out);
            if !quiet {
                let _ = writeln!(
                    err,
                    "simulated {}s in {:.1}s of wall time",
                    report.simulated_seconds,
                    started.elapsed().as_secs_f64()
                );
            }
            status_of(&report)
        }
        Err(error) => {
            let _ = writeln!(err, "error: {}", karpenter_core::errors::chain(&error));
            Status::Problems
        }
    }
}

/// SIGTERM (how process supervisors and tests stop a server) or Ctrl-C.
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
    // Without a signal handler the run ends with its scenario, which is also fine.
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Serves the cluster only (`--cluster-only`) until `stop` completes: the testable core.
pub async fn serve_cluster_until(
    args: &SimulateArgs,
    stop: impl Future<Output = ()>,
    out: &mut impl Write,
    err: &mut impl Write,
) -> Status {
    let Some(addr) = args.serve else {
        let _ = writeln!(
            err,
            "error: --cluster-only needs --serve ADDR (e.g. 127.0.0.1:8001)"
        );
        return Status::BadInput;
    };
    let kubeconfig = args
        .kubeconfig
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(DEFAULT_KUBECONFIG_NAME));
    let (announce, announced) = oneshot::channel::<String>();
    let options = ClusterOnlyOptions {
        api: addr,
        kubeconfig: kubeconfig.clone(),
        region: DEFAULT_REGION.to_owned(),
        kubelet: CLUSTER_ONLY_KUBELET,
        announce: Some(announce),
    };
    let serving = serve_cluster(options, stop);
    let mut serving = std::pin::pin!(serving);
    // Announce as soon as it listens, while the cluster keeps running.
    let result = tokio::select! {
        url = announced => {
            if let Ok(url) = url {
                let _ = writeln!(out, "serving the Kubernetes API emulator at {url} (cluster only)");
                let _ = writeln!(out, "kubeconfig: {}", kubeconfig.display());
                let _ = writeln!(
                    out,
                    "try: KUBECONFIG={} karpenter run (CLUSTER_NAME, AWS_REGION, AWS_ENDPOINT_URL)",
                    kubeconfig.display()
                );
                let _ = out.flush();
            }
            serving.await
        }
        result = &mut serving => result,
    };
    match result {
        Ok(totals) => {
            let _ = writeln!(
                err,
                "stopped: {} node(s) registered, {} deleted, {} pod(s) bound, {} started, {} failed write(s)",
                totals.nodes_registered,
                totals.nodes_deleted,
                totals.pods_bound,
                totals.pods_started,
                totals.errors
            );
            Status::Success
        }
        Err(error) => {
            let _ = writeln!(err, "error: {}", karpenter_core::errors::chain(&error));
            Status::Problems
        }
    }
}

/// A simulation running on its own thread.
struct SimulationThread {
    announced: oneshot::Receiver<Served>,
    progress: mpsc::UnboundedReceiver<String>,
    done: oneshot::Receiver<Result<Report, scenario::SimulationError>>,
    stop: oneshot::Sender<()>,
}

/// Starts the served simulation on its own thread (its own runtime and actix System).
fn spawn_served(
    loaded: LoadedScenario,
    mut serve: ServeOptions,
    quiet: bool,
) -> std::io::Result<SimulationThread> {
    let (announce, announced) = oneshot::channel::<Served>();
    let (stop, stop_rx) = oneshot::channel::<()>();
    let (progress_tx, progress) = mpsc::unbounded_channel::<String>();
    let (done_tx, done) = oneshot::channel();
    serve.announce = Some(announce);
    std::thread::Builder::new()
        .name("simulation".to_owned())
        .spawn(move || {
            let options = RunOptions {
                pace: Pace::RealTime,
                progress: (!quiet).then(|| {
                    Box::new(move |line: &str| {
                        let _ = progress_tx.send(line.to_owned());
                    }) as scenario::ProgressSink<'static>
                }),
                serve: Some(serve),
                stop: Some(stop_rx),
            };
            let _ = done_tx.send(scenario::run(loaded, options));
        })?;
    Ok(SimulationThread {
        announced,
        progress,
        done,
        stop,
    })
}

fn print_served(served: &Served, out: &mut impl Write) {
    let _ = writeln!(out, "serving the Kubernetes API emulator at {}", served.api);
    let _ = writeln!(out, "kubeconfig: {}", served.kubeconfig.display());
    let _ = writeln!(
        out,
        "daemon: {0}/metrics {0}/debug/actors (karpenter actors --url {0})",
        served.daemon
    );
    let _ = writeln!(
        out,
        "try: KUBECONFIG={} kubectl get nodepools,nodeclaims,nodes,pods -A",
        served.kubeconfig.display()
    );
    let _ = out.flush();
}

/// Serves a simulation until it ends or `stop` completes (the testable core of `--serve`).
/// The simulation runs on its own thread (its own actix System), so this works inside any
/// runtime.
pub async fn serve_until(
    args: &SimulateArgs,
    stop: impl Future<Output = ()>,
    out: &mut impl Write,
    err: &mut impl Write,
) -> Status {
    let Some(addr) = args.serve else {
        let _ = writeln!(
            err,
            "error: serving needs --serve ADDR (e.g. 127.0.0.1:8001)"
        );
        return Status::BadInput;
    };
    let loaded = if args.scenario.is_some() {
        match load(args) {
            Ok(loaded) => loaded,
            Err(error) => {
                let _ = writeln!(err, "error: {}", karpenter_core::errors::chain(&error));
                return Status::BadInput;
            }
        }
    } else {
        LoadedScenario::open_ended(args.seed.unwrap_or(0))
    };
    let kubeconfig = args
        .kubeconfig
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(DEFAULT_KUBECONFIG_NAME));
    let daemon = args
        .daemon_addr
        .unwrap_or_else(|| SocketAddr::new(addr.ip(), 0));
    let serve = ServeOptions {
        api: addr,
        daemon,
        kubeconfig,
        announce: None,
    };
    let running = match spawn_served(loaded, serve, args.quiet) {
        Ok(running) => running,
        Err(error) => {
            let _ = writeln!(err, "error: starting the simulation thread: {error}");
            return Status::Problems;
        }
    };
    let SimulationThread {
        announced,
        mut progress,
        done,
        stop: stop_tx,
    } = running;
    if let Ok(served) = announced.await {
        print_served(&served, out);
    }
    let mut stop = std::pin::pin!(stop);
    let mut done = std::pin::pin!(done);
    let mut stop_tx = Some(stop_tx);
    let mut progress_open = true;
    let result = loop {
        tokio::select! {
            line = progress.recv(), if progress_open => match line {
                Some(line) => { let _ = writeln!(err, "{line}"); }
                None => progress_open = false,
            },
            () = &mut stop, if stop_tx.is_some() => {
                if let Some(tx) = stop_tx.take() {
                    let _ = tx.send(());
                }
            }
            result = &mut done => break result,
        }
    };
    match result {
        Ok(Ok(report)) => {
            print_report(&report, args.output, out);
            status_of(&report)
        }
        Ok(Err(error)) => {
            let _ = writeln!(err, "error: {}", karpenter_core::errors::chain(&error));
            Status::BadInput
        }
        Err(_) => {
            let _ = writeln!(err, "error: the simulation thread ended without a report");
            Status::Problems
        }
    }
}
