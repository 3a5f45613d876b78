//! `karpenter simulate`: the daemon against an embedded cluster. Until the simulation exists,
//! `--serve ADDR` runs the Kubernetes API emulator on loopback and writes a kubeconfig for it,
//! so kubectl (or the daemon as a separate process) can use it; it serves until Ctrl-C.

use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use super::Status;
use crate::sim::Emulator;

/// File name of the kubeconfig written when `--kubeconfig` is not given (in the temp dir).
pub const DEFAULT_KUBECONFIG_NAME: &str = "karpenter-emulator.kubeconfig";

/// Options of `karpenter simulate`.
#[derive(Debug, Clone, Args)]
pub struct SimulateArgs {
    /// Serve the Kubernetes API emulator on this address (e.g. 127.0.0.1:8001; port 0 picks one).
    #[arg(long, value_name = "ADDR")]
    pub serve: Option<SocketAddr>,
    /// Where to write the kubeconfig for the served emulator [default: <temp dir>/karpenter-emulator.kubeconfig].
    #[arg(long, value_name = "PATH", requires = "serve")]
    pub kubeconfig: Option<PathBuf>,
}

/// Runs the command until Ctrl-C.
pub fn run(args: &SimulateArgs, out: &mut impl Write, err: &mut impl Write) -> Status {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            let _ = writeln!(err, "error: starting the async runtime: {error}");
            return Status::Problems;
        }
    };
    runtime.block_on(serve_until(args, shutdown_signal(), out, err))
}

async fn shutdown_signal() {
    // Without a signal handler the server runs until the process is killed, which is also fine.
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Serves until `stop` completes (the testable core of [`run`]).
pub async fn serve_until(
    args: &SimulateArgs,
    stop: impl Future<Output = ()>,
    out: &mut impl Write,
    err: &mut impl Write,
) -> Status {
    let Some(addr) = args.serve else {
        let _ = writeln!(
            err,
            "error: the simulation itself is not built yet; use --serve ADDR to serve the Kubernetes API emulator"
        );
        return Status::BadInput;
    };
    let emulator = match Emulator::new() {
        Ok(emulator) => emulator,
        Err(error) => {
            let _ = writeln!(err, "error: {error}");
            return Status::Problems;
        }
    };
    let server = match emulator.serve(addr).await {
        Ok(server) => server,
        Err(error) => {
            let _ = writeln!(
                err,
                "error: {error}: {}",
                std::error::Error::source(&error)
                    .map(ToString::to_string)
                    .unwrap_or_default()
            );
            return Status::BadInput;
        }
    };
    let path = args
        .kubeconfig
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(DEFAULT_KUBECONFIG_NAME));
    if let Err(error) = server.write_kubeconfig(&path) {
        let _ = writeln!(
            err,
            "error: {error}: {}",
            std::error::Error::source(&error)
                .map(ToString::to_string)
                .unwrap_or_default()
        );
        return Status::BadInput;
    }
    let _ = writeln!(
        out,
        "serving the Kubernetes API emulator at {}",
        server.url()
    );
    let _ = writeln!(out, "kubeconfig: {}", path.display());
    let _ = writeln!(
        out,
        "try: KUBECONFIG={} kubectl get nodepools,nodes,pods -A",
        path.display()
    );
    let _ = out.flush();
    stop.await;
    emulator.close_watches();
    server.shutdown().await;
    Status::Success
}
