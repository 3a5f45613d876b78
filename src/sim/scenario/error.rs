//! Why a simulation could not be set up (what goes wrong inside a run is in its report).

use karpenter_actors::ports::aws_error::AwsError;
use karpenter_actors::ports::version::VersionSourceError;
use karpenter_core::domain::version::VersionError;

use crate::daemon::DaemonError;
use crate::emulator::EmulatorError;
use crate::http::HttpError;
use crate::sim::world::WorldError;

/// Failures setting the simulation up (what happens inside it is in the report).
#[derive(Debug, thiserror::Error)]
pub enum SimulationError {
    #[error("starting the runtime")]
    Runtime(#[source] std::io::Error),
    #[error("starting the Kubernetes API emulator")]
    Emulator(#[source] EmulatorError),
    #[error("setting up kwok")]
    Kwok(#[source] WorldError),
    #[error("creating the interruption queue in kwok")]
    InterruptionQueue(#[source] AwsError),
    #[error("creating {what} in the emulator")]
    Seed {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// Boxed: the daemon's errors are large, and a `Result` carries the largest variant.
    #[error(transparent)]
    Daemon(Box<DaemonError>),
    #[error("serving")]
    Serve(#[source] HttpError),
    #[error("the cluster watchers stopped before their first list")]
    Watchers,
    #[error("discovering the simulated cluster")]
    Discovery(#[source] crate::discovery::DiscoveryError),
    #[error("reading the simulated cluster's kubernetes version")]
    Version(#[source] VersionSourceError),
    #[error(transparent)]
    UnsupportedVersion(VersionError),
    #[error("building the chaos plan")]
    Chaos(#[source] karpenter_actors::runtime::FaultPlanError),
}

impl From<DaemonError> for SimulationError {
    fn from(error: DaemonError) -> Self {
        Self::Daemon(Box::new(error))
    }
}

impl SimulationError {
    /// A bounded label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Runtime(_) => "runtime",
            Self::Emulator(error) => error.category(),
            Self::Kwok(error) => error.category(),
            Self::InterruptionQueue(_) => "interruption_queue",
            Self::Seed { .. } => "seed",
            Self::Daemon(error) => error.category(),
            Self::Serve(error) => error.category(),
            Self::Watchers => "watchers",
            Self::Discovery(error) => error.category(),
            Self::Version(error) => error.category(),
            Self::UnsupportedVersion(error) => error.category(),
            Self::Chaos(error) => error.category(),
        }
    }
}
