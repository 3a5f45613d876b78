//! The `tracing` subscriber of every command, installed by `main` before the command runs.
//!
//! ```text
//! karpenter run       Karpenter's JSON lines (karpenter_actors::logs::KarpenterJson):
//!                     LOG_LEVEL -> level_filter, LOG_OUTPUT_PATHS -> sinks (every level),
//!                     LOG_ERROR_OUTPUT_PATHS -> the logger's own write failures, `caller`
//!                     only at debug, the sampler on, `commit` from the build (build.rs)
//! karpenter simulate  the daemon's lines stay out of the report and the progress lines:
//!                     --log-level (default error) in compact form on stderr, or with
//!                     --logs FILE Karpenter's JSON lines in FILE (default level info), timed
//!                     by simulated time
//! other commands      compact human-readable lines on stderr, info and up
//! ```

use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use karpenter_actors::logs::{
    KarpenterJson, NO_COMMIT_MESSAGE, Sink, SinkError, WallClock, level_filter,
};
use karpenter_config::{LogLevel, Settings};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::{Layer as _, Registry};

/// The build's commit (`vcs.revision` cut to 7 characters, `-dirty` for a modified tree), set
/// by build.rs; `None` when the build had no git checkout.
pub const COMMIT: Option<&str> = option_env!("KARPENTER_COMMIT");

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    #[error("opening the log outputs")]
    Sinks(#[from] SinkError),
    #[error("a tracing subscriber is already installed")]
    AlreadyInstalled(#[from] tracing::subscriber::SetGlobalDefaultError),
}

impl LoggingError {
    /// A bounded label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Sinks(e) => e.category(),
            Self::AlreadyInstalled(_) => "logging",
        }
    }
}

/// Karpenter's JSON layer for these settings (outputs opened, commit and caller set).
pub fn daemon_layer(settings: &Settings, clock: WallClock) -> Result<KarpenterJson, SinkError> {
    let outputs = Sink::open_all(&settings.log_output_paths, "LOG_OUTPUT_PATHS")?;
    let errors = Sink::open_all(&settings.log_error_output_paths, "LOG_ERROR_OUTPUT_PATHS")?;
    Ok(KarpenterJson::new(outputs)
        .error_outputs(errors)
        .commit(COMMIT)
        .caller(settings.log_level == LogLevel::Debug)
        .clock(clock))
}

/// Installs the subscriber of `karpenter run` (see the module docs) and writes Karpenter's
/// startup line about the commit when the build has none.
pub fn install_daemon(settings: &Settings) -> Result<(), LoggingError> {
    let layer = match daemon_layer(settings, Arc::new(SystemTime::now)) {
        Ok(layer) => layer,
        Err(error) => {
            // Nowhere the settings name can be written to: say so as a JSON line on stderr.
            let fallback = KarpenterJson::new(vec![Sink::stderr()]).commit(COMMIT);
            let subscriber =
                Registry::default().with(fallback.with_filter(level_filter(LogLevel::Error)));
            tracing::subscriber::with_default(subscriber, || {
                tracing::error!(
                    error = karpenter_actors::logs::err(&error),
                    "failed opening the log outputs"
                );
            });
            return Err(error.into());
        }
    };
    let level = settings.log_level;
    tracing::subscriber::set_global_default(
        Registry::default().with(layer.with_filter(level_filter(level))),
    )?;
    if COMMIT.is_none() {
        tracing::info!("{NO_COMMIT_MESSAGE}");
    }
    Ok(())
}

/// The compact human-readable layer on stderr (for the CLI commands).
fn compact<S>() -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_subscriber::fmt::layer()
        .compact()
        .without_time()
        .with_target(false)
        .with_writer(std::io::stderr)
}

/// Installs the subscriber of a CLI command: compact lines on stderr at `level`.
pub fn install_cli(level: LogLevel) -> Result<(), LoggingError> {
    tracing::subscriber::set_global_default(
        Registry::default().with(compact().with_filter(level_filter(level))),
    )?;
    Ok(())
}

/// Where `karpenter simulate` sends the daemon's lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimulationLogs<'a> {
    /// Compact lines on stderr, beside the progress lines.
    Terminal(LogLevel),
    /// Karpenter's JSON lines in a file, timed by simulated time.
    File(&'a Path, LogLevel),
}

/// The clock of simulation logs: the simulation's epoch plus tokio's (paused, so simulated)
/// elapsed time since `origin`, read on the thread that logs. Outside a runtime it is the
/// wall-clock time since `origin`.
#[cfg(feature = "simulate")]
fn simulated_clock() -> WallClock {
    use std::time::{Duration, UNIX_EPOCH};
    let origin = tokio::time::Instant::now();
    let epoch = UNIX_EPOCH
        + Duration::from_secs(
            u64::try_from(crate::sim::clock::SIMULATION_EPOCH_SECONDS).unwrap_or_default(),
        );
    Arc::new(move || epoch + tokio::time::Instant::now().saturating_duration_since(origin))
}

/// Installs the subscriber of `karpenter simulate` (see the module docs).
#[cfg(feature = "simulate")]
pub fn install_simulation(logs: SimulationLogs<'_>) -> Result<(), LoggingError> {
    match logs {
        SimulationLogs::Terminal(level) => install_cli(level),
        SimulationLogs::File(path, level) => {
            let layer = KarpenterJson::new(vec![Sink::file(path)?])
                .commit(COMMIT)
                .caller(level == LogLevel::Debug)
                .clock(simulated_clock());
            tracing::subscriber::set_global_default(
                Registry::default().with(layer.with_filter(level_filter(level))),
            )?;
            Ok(())
        }
    }
}
