//! Why a simulation could not be set up (what goes wrong inside a run is in its report).

/// Failures setting the simulation up (what happens inside it is in the report).
#[derive(Debug, thiserror::Error)]
pub enum SimulationError {
    #[error("starting the runtime")]
    Runtime(#[source] std::io::Error),
    #[error("starting the Kubernetes API emulator")]
    Emulator(#[source] crate::emulator::EmulatorError),
    #[error("setting up kwok: {0}")]
    Kwok(String),
    #[error("creating {what} in the emulator")]
    Seed {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("the cluster store never synced")]
    Sync,
    #[error("starting the actors")]
    Actors(#[source] karpenter_actors::runtime::SpawnError),
    #[error("serving")]
    Serve(#[source] crate::http::HttpError),
}

impl SimulationError {
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Runtime(_) => "runtime",
            Self::Emulator(error) => error.category(),
            Self::Kwok(_) => "kwok",
            Self::Seed { .. } => "seed",
            Self::Sync => "sync",
            Self::Actors(_) => "actors",
            Self::Serve(error) => error.category(),
        }
    }
}
