//! Serving a running simulation (`karpenter simulate --serve`): the emulator on loopback for
//! kubectl, with a kubeconfig written whole (then renamed, so a reader never sees half of it),
//! and the daemon's endpoints beside it; [`Served`] tells the caller where.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use tokio::sync::oneshot;

use super::error::SimulationError;
use crate::emulator::{Emulator, EmulatorError, LoopbackServer};
use crate::http::{self, HttpServer, Routes};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    /// The Kubernetes API emulator (for kubectl).
    pub api: String,
    /// The kubeconfig written for it.
    pub kubeconfig: PathBuf,
    /// The daemon's `/metrics`, `/healthz`, `/readyz` and `/debug/actors`.
    pub daemon: String,
}

/// Serving the emulator and the daemon's endpoints while the simulation runs.
#[derive(Debug)]
pub struct ServeOptions {
    pub api: SocketAddr,
    /// Where the daemon's endpoints listen (port 0 picks one).
    pub daemon: SocketAddr,
    pub kubeconfig: PathBuf,
    /// Told where everything listens once it does.
    pub announce: Option<oneshot::Sender<Served>>,
}

/// Writes a kubeconfig whole, then renames it into place: whoever waits for the file never
/// reads half of it.
pub(crate) fn write_kubeconfig(path: &Path, contents: &str) -> Result<(), SimulationError> {
    let partial = path.with_extension("partial");
    std::fs::write(&partial, contents)
        .and_then(|()| std::fs::rename(&partial, path))
        .map_err(|source| {
            SimulationError::Emulator(EmulatorError::Kubeconfig {
                path: path.to_owned(),
                source,
            })
        })
}

/// Serves the emulator and the daemon's endpoints; announces where.
pub(super) async fn serve(
    options: &mut ServeOptions,
    emulator: &Emulator,
    routes: Routes,
) -> Result<(LoopbackServer, HttpServer), SimulationError> {
    let api = emulator
        .serve(options.api)
        .await
        .map_err(SimulationError::Emulator)?;
    write_kubeconfig(&options.kubeconfig, &api.kubeconfig())?;
    let daemon = http::serve(options.daemon, routes)
        .await
        .map_err(SimulationError::Serve)?;
    if let Some(announce) = options.announce.take() {
        let _ = announce.send(Served {
            api: api.url(),
            kubeconfig: options.kubeconfig.clone(),
            daemon: daemon.url(),
        });
    }
    Ok((api, daemon))
}
