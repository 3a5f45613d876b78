//! The emulator on loopback: an HTTP/1.1 server (hyper) in front of [`EmulatorService`], and
//! the kubeconfig that points kubectl or a separate daemon process at it (plain HTTP, no
//! credentials: the server only listens where it is told, normally 127.0.0.1).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tower_service::Service as _;

use super::EmulatorError;
use super::http::EmulatorService;
use crate::http::AcceptLoop;

/// The name of the cluster, context and user in the written kubeconfig.
pub const KUBECONFIG_NAME: &str = "karpenter-emulator";

/// A running loopback server; dropping it stops accepting connections.
#[derive(Debug)]
pub struct LoopbackServer {
    addr: SocketAddr,
    accept: AcceptLoop,
}

impl LoopbackServer {
    pub(crate) async fn start(
        service: EmulatorService,
        addr: SocketAddr,
    ) -> Result<Self, EmulatorError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| EmulatorError::Bind { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| EmulatorError::Bind { addr, source })?;
        let (shutdown, mut stop) = oneshot::channel();
        let task = tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    _ = &mut stop => break,
                };
                let Ok((stream, _)) = accepted else {
                    continue;
                };
                let service = service.clone();
                tokio::spawn(async move {
                    let handler = service_fn(move |request| {
                        let mut service = service.clone();
                        async move {
                            Ok::<_, Infallible>(
                                service
                                    .call(request)
                                    .await
                                    .unwrap_or_else(|never| match never {}),
                            )
                        }
                    });
                    // A client that hangs up mid-request is not the server's problem.
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), handler)
                        .await;
                });
            }
        });
        Ok(Self {
            addr,
            accept: AcceptLoop::new(shutdown, task),
        })
    }

    /// The address it listens on (the real port when asked for port 0).
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig for this server with `default` as the namespace.
    #[must_use]
    pub fn kubeconfig(&self) -> String {
        kubeconfig_for(&self.url())
    }

    /// Writes [`Self::kubeconfig`] to `path`.
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), EmulatorError> {
        std::fs::write(path, self.kubeconfig()).map_err(|source| EmulatorError::Kubeconfig {
            path: path.to_owned(),
            source,
        })
    }

    /// Stops accepting connections and waits for the accept loop to end.
    pub async fn shutdown(self) {
        self.accept.shutdown().await;
    }
}

/// A kubeconfig pointing at `server` without credentials.
#[must_use]
pub fn kubeconfig_for(server: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {KUBECONFIG_NAME}
  cluster:
    server: {server}
contexts:
- name: {KUBECONFIG_NAME}
  context:
    cluster: {KUBECONFIG_NAME}
    user: {KUBECONFIG_NAME}
    namespace: default
current-context: {KUBECONFIG_NAME}
users:
- name: {KUBECONFIG_NAME}
  user: {{}}
"
    )
}
